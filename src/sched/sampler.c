#include "sampler.h"

#include "../model/tokenizer.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t id;
    float v; // logit, then probability
} cand;


struct kvt_sampler {
    kvt_sampler_params p;
    int32_t n_vocab;
    cand *c;          // [n_vocab] candidates
    int32_t *hist;    // [penalty_last_n] ring buffer of the last penalty_last_n tokens accepted
    int64_t n_hist;   // tokens accepted so far (the ring holds the last min(n_hist, penalty_last_n))
    int32_t *count;   // [n_vocab] occurrences of each token in the ring (NULL when no penalty is on)
    uint32_t *stamp;  // [n_vocab] the draw that last penalized each token (once per distinct token a draw)
    uint32_t n_draws; // draws so far (the stamp of the current one)
    kvt_logit_bias *bias; // [p.n_logit_bias] (p.logit_bias points here)
    uint64_t rng;
    // the infill filter's scratch (p.infill set): per survivor its renormalized probability, whether it left (merged
    // into another), its text's offset in pbuf [n_vocab + 1]; pbuf holds any set of survivors' texts (the vocabulary's
    // total, measured at init)
    float *q;
    uint8_t *gone;
    int64_t *poff;
    char *pbuf;
    int64_t pcap;
    // typical-p's scratch (p.typical_p < 1): the candidates' indices with their negated scores (a heap in `before`
    // order), the candidates kept
    cand *sh;
    cand *tmp;
    float mu; // mirostat's target surprise (2 tau at start)
    kvt_dry *dry; // the DRY window (NULL: off or under mirostat)
    // adaptive-p's average of the chosen tokens' probabilities (weighted sum, total weight) and the last draw's token
    // and probability, which kvt_sampler_accept adds when that token is accepted
    float ap_sum, ap_weight, ap_prob;
    int32_t ap_pending;
    float *ap_q; // [n_vocab] the survivors' probabilities of a draw (adaptive-p on)
    // the grammar (p.grammar set): this sequence's matcher, the vocabulary's texts (a reference), the ids 0..n_vocab-1
    // [n_vocab] and the mask of a rejected draw [n_vocab] (1: allowed)
    kvt_grammar_state *gs;
    kvt_grammar_vocab *gv;
    int32_t *g_ids;
    uint8_t *g_mask;
    int64_t g_drawn; // tokens drawn under the grammar (messages)
};

kvt_sampler_params kvt_sampler_params_default(void) {
    kvt_sampler_params p = {0.8f, 40, 0.95f, 0.05f, 1.0f, 64, 0x5eed, 0.0f, 0.0f, NULL, 0, NULL, -1.0f, 1.0f,
                            0.0f, 0.1f, 0.0f, 1.0f, 0, 5.0f, 0.1f, {0.0f, 1.75f, 2, 64}, NULL, -1.0f, 0.9f, NULL, 0,
                            NULL, NULL};
    return p;
}

static bool penalize(const kvt_sampler_params *p) {
    return p->penalty_last_n > 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

static bool mirostat_on(const kvt_sampler_params *p) { return p->mirostat == 1 || p->mirostat == 2; }

// DRY acts (llama.cpp's mirostat chain has none)
static bool dry_on(const kvt_sampler_params *p) { return kvt_dry_params_on(&p->dry) && !mirostat_on(p); }

bool kvt_sampler_params_adjust(const kvt_sampler_params *p) {
    return p->n_logit_bias > 0 || penalize(p) || dry_on(p);
}

// A bias that bans its token (-inf).
static bool is_ban(float bias) { return isinf(bias) && bias < 0; }

// typical-p, XTC and infill can drop the argmax, and a dynamic temperature can rise above 0: a greedy draw then goes
// through them
static bool drops_argmax(const kvt_sampler_params *p) {
    return p->typical_p < 1.0f || (p->xtc_probability > 0.0f && p->xtc_threshold <= 0.5f) || p->infill ||
           p->dynatemp_range > 0.0f;
}

bool kvt_sampler_params_bans_only(const kvt_sampler_params *p) {
    if ((penalize(p) && !mirostat_on(p)) || dry_on(p) || drops_argmax(p) || p->report || p->grammar) return false;
    for (int32_t i = 0; p->logit_bias && i < p->n_logit_bias; i++) {
        if (!is_ban(p->logit_bias[i].bias)) return false;
    }
    return true;
}

bool kvt_sampler_params_banned(const kvt_sampler_params *p, int32_t token) {
    for (int32_t i = 0; p->logit_bias && i < p->n_logit_bias; i++) {
        if (p->logit_bias[i].token == token && is_ban(p->logit_bias[i].bias)) return true;
    }
    return false;
}

kvt_status kvt_sampler_init(const kvt_sampler_params *p, int32_t n_vocab, kvt_sampler **out, kvt_err *err) {
    *out = NULL;
    if (n_vocab <= 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sampler needs a vocabulary");
    for (int32_t i = 0; i < (p->logit_bias ? p->n_logit_bias : 0); i++) {
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= n_vocab)
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "logit bias %d: token %d is outside the vocabulary (0..%d)", (int)i,
                              (int)p->logit_bias[i].token, (int)n_vocab - 1);
        if (isnan(p->logit_bias[i].bias))
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "logit bias %d: token %d has a NaN bias", (int)i,
                              (int)p->logit_bias[i].token);
    }
    if (p->infill && kvt_token_eot(p->infill) < 0 && kvt_token_eos(p->infill) < 0)
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "infill sampler: the vocabulary has neither an EOT nor an EOS "
                          "token");
    if (p->grammar && (!p->grammar_vocab || kvt_grammar_vocab_n(p->grammar_vocab) != n_vocab))
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "grammar: the sampler needs the texts of the model's %d tokens "
                          "(given %d)", (int)n_vocab, p->grammar_vocab ? (int)kvt_grammar_vocab_n(p->grammar_vocab) : 0);
    kvt_sampler *s = calloc(1, sizeof *s);
    if (!s) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    s->p = *p;
    if (s->p.penalty_last_n < 0) s->p.penalty_last_n = 0;
    s->n_vocab = n_vocab;
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->hist = malloc((size_t)(s->p.penalty_last_n + 1) * sizeof *s->hist);
    bool pen = penalize(&s->p);
    if (!p->logit_bias) s->p.n_logit_bias = 0;
    if (s->p.n_logit_bias > 0) {
        s->bias = malloc((size_t)s->p.n_logit_bias * sizeof *s->bias);
        if (s->bias) memcpy(s->bias, p->logit_bias, (size_t)s->p.n_logit_bias * sizeof *s->bias);
    }
    s->p.logit_bias = s->bias;
    if (pen) {
        s->count = calloc((size_t)n_vocab, sizeof *s->count);
        s->stamp = calloc((size_t)n_vocab, sizeof *s->stamp);
    }
    bool infill_ok = true; // (and typical-p's scratch)
    if (p->infill) {
        for (int32_t i = 0; i < n_vocab; i++) s->pcap += kvt_token_to_piece(p->infill, i, NULL, 0);
        s->q = malloc((size_t)n_vocab * sizeof *s->q);
        s->gone = malloc((size_t)n_vocab);
        s->poff = malloc(((size_t)n_vocab + 1) * sizeof *s->poff);
        s->pbuf = malloc((size_t)s->pcap + 1);
        infill_ok = s->q && s->gone && s->poff && s->pbuf;
    }
    if (p->adaptive_target >= 0.0f) {
        s->ap_q = malloc((size_t)n_vocab * sizeof *s->ap_q);
        infill_ok = infill_ok && s->ap_q;
    }
    if (p->typical_p < 1.0f) {
        s->sh = malloc((size_t)n_vocab * sizeof *s->sh);
        s->tmp = malloc((size_t)n_vocab * sizeof *s->tmp);
        infill_ok = infill_ok && s->sh && s->tmp;
    }
    if (!s->c || !s->hist || (pen && (!s->count || !s->stamp)) || (s->p.n_logit_bias > 0 && !s->bias) || !infill_ok) {
        kvt_sampler_free(s);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a sampler over %d tokens", (int)n_vocab);
    }
    if (dry_on(p)) {
        kvt_status st = kvt_dry_init(&p->dry, p->dry_breakers, n_vocab, &s->dry, err);
        if (st) {
            kvt_sampler_free(s);
            return st;
        }
    }
    if (p->grammar) {
        kvt_status st = kvt_grammar_state_init(p->grammar, &s->gs, err);
        if (st) {
            kvt_sampler_free(s);
            return st;
        }
        s->gv = kvt_grammar_vocab_ref(p->grammar_vocab);
        s->g_ids = malloc((size_t)n_vocab * sizeof *s->g_ids);
        s->g_mask = malloc((size_t)n_vocab);
        if (!s->g_ids || !s->g_mask) {
            kvt_sampler_free(s);
            return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a grammar's mask over %d tokens", (int)n_vocab);
        }
        for (int32_t i = 0; i < n_vocab; i++) s->g_ids[i] = i;
    }
    s->p.grammar = NULL; // (held through gs and gv)
    s->p.grammar_vocab = NULL;
    s->rng = p->seed * 0x9E3779B97F4A7C15ull + 1;
    s->mu = 2.0f * p->mirostat_tau;
    const float decay = p->adaptive_decay < 0.0f ? 0.0f : p->adaptive_decay > 0.99f ? 0.99f : p->adaptive_decay;
    s->p.adaptive_decay = decay;
    s->ap_sum = p->adaptive_target / (1.0f - decay); // (llama.cpp's start: the average at the target)
    s->ap_weight = 1.0f / (1.0f - decay);
    s->ap_pending = -1;
    *out = s;
    return KVT_OK;
}

void kvt_sampler_free(kvt_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->hist);
    free(s->count);
    free(s->stamp);
    free(s->bias);
    free(s->q);
    free(s->gone);
    free(s->poff);
    free(s->pbuf);
    free(s->sh);
    free(s->tmp);
    kvt_dry_free(s->dry);
    free(s->ap_q);
    kvt_grammar_state_free(s->gs);
    kvt_grammar_vocab_free(s->gv);
    free(s->g_ids);
    free(s->g_mask);
    free(s);
}

void kvt_sampler_accept(kvt_sampler *s, int32_t token) {
    if (s->dry) kvt_dry_accept(s->dry, token);
    if (s->ap_pending >= 0 && s->ap_pending == token) { // adaptive-p: the drawn token's probability into the average
        s->ap_sum = s->ap_prob + s->p.adaptive_decay * s->ap_sum;
        s->ap_weight = 1.0f + s->p.adaptive_decay * s->ap_weight;
    }
    s->ap_pending = -1;
    const int64_t w = s->p.penalty_last_n;
    if (w == 0) return;
    int32_t *slot = &s->hist[s->n_hist % w];
    if (s->count) {
        if (s->n_hist >= w && *slot >= 0 && *slot < s->n_vocab) s->count[*slot]--; // leaves the window
        if (token >= 0 && token < s->n_vocab) s->count[token]++;
    }
    *slot = token;
    s->n_hist++;
}

int32_t kvt_argmax(const float *logits, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++) {
        if (logits[i] > logits[best]) best = i;
    }
    return (int32_t)best;
}

// splitmix64: a small, well-distributed generator; uniform in [0, 1)
static double next_uniform(kvt_sampler *s) {
    uint64_t z = (s->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

// A draw over c[0..m) by their weights c[i].v summing to tot: the first whose running sum passes a uniform x tot (the
// last when rounding leaves it short).
static int32_t draw_index(kvt_sampler *s, const cand *c, int32_t m, double tot) {
    const double r = next_uniform(s) * tot;
    double acc = 0.0;
    for (int32_t i = 0; i < m; i++) {
        acc += c[i].v;
        if (r < acc) return i;
    }
    return m - 1;
}

// The report of a draw (sampler.h): the candidates c[0..m) with weights summing to tot, the drawn one at pick (m 1,
// tot 1: a greedy draw).
static void report(kvt_sampler *s, const cand *c, int32_t m, double tot, int32_t pick) {
    kvt_sampler_report *r = s->p.report;
    if (!r) return;
    const int32_t k = r->k < 0 ? 0 : r->k > KVT_SAMPLER_REPORT_MAX ? KVT_SAMPLER_REPORT_MAX : r->k;
    r->chosen = (float)(c[pick].v / tot);
    r->n = 0;
    for (int32_t i = 0; i < m && k > 0; i++) { // insertion into the sorted list of the k likeliest
        const float v = (float)(c[i].v / tot);
        if (!(v > 0.0f) || (r->n == k && v <= r->probs[k - 1])) continue;
        int32_t pos = r->n < k ? r->n++ : k - 1;
        for (; pos > 0 && r->probs[pos - 1] < v; pos--) {
            r->probs[pos] = r->probs[pos - 1];
            r->ids[pos] = r->ids[pos - 1];
        }
        r->probs[pos] = v;
        r->ids[pos] = c[i].id;
    }
}

// A greedy draw of token id: its report holds it alone, at 1.
static int32_t greedy(kvt_sampler *s, int32_t id) {
    const cand one = {id, 1.0f};
    report(s, &one, 1, 1.0, 0);
    return id;
}

// The candidates' order: larger logit first, then lower id (a total order on finite logits).
static inline bool before(const cand *x, const cand *y) { return x->v > y->v || (x->v == y->v && x->id < y->id); }

static int cmp_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    return before(x, y) ? -1 : before(y, x) ? 1 : 0;
}

// h[0..k) a heap whose root is the first in `before` order (best_root) or the last; sifts h[i] down.
static void heap_sift(cand *h, int32_t k, int32_t i, bool best_root) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < k && (best_root ? before(&h[l], &h[m]) : before(&h[m], &h[l]))) m = l;
        if (r < k && (best_root ? before(&h[r], &h[m]) : before(&h[m], &h[r]))) m = r;
        if (m == i) return;
        cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

// Moves the k first of c[0..n) in `before` order to c[0..k), sorted: the prefix a sort of all n would give; the others
// stay in c[k..n) (a permutation: a candidate the heap lets go swaps places with the one that enters, so a later
// selection over c[0..n) sees every candidate once).
static void select_top(cand *c, int32_t n, int32_t k) {
    for (int32_t i = k / 2 - 1; i >= 0; i--) heap_sift(c, k, i, false);
    for (int32_t i = k; i < n; i++) {
        if (before(&c[i], &c[0])) {
            const cand t = c[0];
            c[0] = c[i];
            c[i] = t;
            heap_sift(c, k, 0, false);
        }
    }
    qsort(c, (size_t)k, sizeof *c, cmp_desc);
}

// Without top-k: the softmax over every candidate (summed in id order), then the same cuts as with top-k (top-p: the
// shortest prefix in `before` order whose probabilities reach top_p; min-p: the prefix with at least min_p times the
// largest), sorting only what the cuts keep: the survivors are filtered by min-p first (a prefix too), the top-p
// prefix is popped from a heap. Leaves the survivors' probabilities in c[0..m), in order; returns m. Without a cut
// every candidate survives in id order (the draw needs no order).
static int32_t cut_all(kvt_sampler *s) {
    cand *c = s->c;
    const int32_t n = s->n_vocab;
    float mx = c[0].v;
    for (int32_t i = 1; i < n; i++) mx = c[i].v > mx ? c[i].v : mx;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += expf(c[i].v - mx);
#define PROB(x) ((float)(expf((x) - mx) / sum))
    const bool top_p = s->p.top_p < 1.0f, min_p = s->p.min_p > 0.0f;
    int32_t m = n;
    if (min_p) { // keep the logits of those at or above the threshold (a prefix of the order), then sort them
        // (min_p above 1 keeps the largest, as min_p 1: the threshold never passes it, so m >= 1)
        const float thr = PROB(mx) * (s->p.min_p < 1.0f ? s->p.min_p : 1.0f);
        int32_t above = 0;
        for (int32_t i = 0; i < n; i++) above += PROB(c[i].v) >= thr;
        if (above >= s->p.min_keep) {
            m = 0;
            for (int32_t i = 0; i < n; i++)
                if (PROB(c[i].v) >= thr) c[m++] = c[i];
            qsort(c, (size_t)m, sizeof *c, cmp_desc);
        } else { // min_keep: the likeliest min_keep (those above the threshold are their prefix)
            m = s->p.min_keep < n ? s->p.min_keep : n;
            select_top(c, n, m);
        }
    }
    if (top_p) { // pop in order until the probabilities reach top_p: a heap with the first in order at its root
        int32_t k = m, got = 0;
        double cum = 0.0;
        for (int32_t i = k / 2 - 1; i >= 0; i--) heap_sift(c, k, i, true);
        while (k > 0) {
            cand t = c[0];
            c[0] = c[--k];
            heap_sift(c, k, 0, true);
            c[k] = t; // the popped ones gather at the end, last popped lowest
            got++;
            cum += PROB(t.v);
            if (cum >= s->p.top_p && got >= s->p.min_keep) break;
        }
        for (int32_t i = m - got, j = m - 1; i < j; i++, j--) { // first popped first
            cand t = c[i];
            c[i] = c[j];
            c[j] = t;
        }
        memmove(c, c + m - got, (size_t)got * sizeof *c);
        m = got;
    }
    for (int32_t i = 0; i < m; i++) c[i].v = PROB(c[i].v);
#undef PROB
    return m;
}

// The penalties of llama.cpp's penalties sampler, once per distinct token of the window.
static void apply_penalties(kvt_sampler *s) {
    const int64_t k = s->n_hist < s->p.penalty_last_n ? s->n_hist : s->p.penalty_last_n;
    const uint32_t draw = ++s->n_draws == 0 ? ++s->n_draws : s->n_draws; // 0 is "never"
    if (draw == 1) memset(s->stamp, 0, (size_t)s->n_vocab * sizeof *s->stamp);
    for (int64_t i = 0; i < k; i++) {
        int32_t t = s->hist[i];
        if (t < 0 || t >= s->n_vocab || s->stamp[t] == draw) continue;
        s->stamp[t] = draw;
        float *v = &s->c[t].v;
        *v = *v > 0 ? *v / s->p.repeat_penalty : *v * s->p.repeat_penalty;
        *v -= (float)s->count[t] * s->p.frequency_penalty + s->p.presence_penalty;
    }
}

// After a logit bias: a candidate at +inf (a bias of +inf, or two huge ones summed) forces the draw: the candidates at
// +inf share it evenly (the softmax's limit) and every other one is out (-inf); returns false when every candidate is
// at -inf (all banned), which the caller draws greedily (the lowest id). Without this the softmax's max subtraction
// made every probability NaN (inf - inf) and min-p kept no candidate at all.
static bool bias_limits(kvt_sampler *s) {
    const int32_t n = s->n_vocab;
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++) mx = s->c[i].v > mx ? s->c[i].v : mx;
    if (mx == INFINITY) {
        for (int32_t i = 0; i < n; i++) s->c[i].v = s->c[i].v == INFINITY ? 0.0f : -INFINITY;
    }
    return mx > -INFINITY;
}

// llama.cpp's top-n-sigma (sampler.h) on every candidate c[0..n_vocab) (logits, in id order): its float sums, so that
// its threshold falls where llama.cpp's does.
static void top_n_sigma(kvt_sampler *s) {
    cand *c = s->c;
    const int32_t n = s->n_vocab;
    float mx = c[0].v, sum = 0.0f;
    int64_t cnt = 0;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].v == -INFINITY) continue;
        mx = c[i].v > mx ? c[i].v : mx;
        sum += c[i].v;
        cnt++;
    }
    if (n <= 1 || cnt == 0) return;
    const float mean = sum / (float)cnt;
    float acc = 0.0f;
    for (int32_t i = 0; i < n; i++)
        if (c[i].v != -INFINITY) acc = (float)((double)acc + pow((double)(c[i].v - mean), 2.0));
    const float thr = mx - s->p.top_n_sigma * sqrtf(acc / (float)cnt);
    for (int32_t i = 0; i < n; i++)
        if (c[i].v < thr) c[i].v = -INFINITY;
}

// llama.cpp's typical-p (sampler.h) on c[0..m), v their softmax (float, summing to 1; in any order): leaves the
// candidates it keeps in c[0..m'), sorted, renormalized; returns m'. The most typical are popped from a heap until
// their probabilities pass typical_p, so a cut that keeps few of many candidates costs O(m), not a sort of all (the
// heap is heap_sift's over {index, -|-log p - entropy|}: the smallest score first, the lower index on ties). A
// probability of 0 (an underflow; llama.cpp's entropy turns NaN there) counts as 0 log 0 = 0 and comes last.
static int32_t typical_cut(kvt_sampler *s, int32_t m) {
    cand *c = s->c;
    float entropy = 0.0f;
    for (int32_t i = 0; i < m; i++)
        if (c[i].v > 0.0f) entropy += -c[i].v * logf(c[i].v);
    cand *sh = s->sh;
    for (int32_t i = 0; i < m; i++) sh[i] = (cand){i, c[i].v > 0.0f ? -fabsf(-logf(c[i].v) - entropy) : -INFINITY};
    for (int32_t i = m / 2 - 1; i >= 0; i--) heap_sift(sh, m, i, true);
    float cum = 0.0f;
    int32_t k = 0, left = m;
    while (left > 0) {
        const cand t = sh[0];
        sh[0] = sh[--left];
        heap_sift(sh, left, 0, true);
        s->tmp[k++] = c[t.id];
        cum += c[t.id].v;
        if (cum > s->p.typical_p && k >= s->p.min_keep) break;
    }
    memcpy(c, s->tmp, (size_t)k * sizeof *c);
    qsort(c, (size_t)k, sizeof *c, cmp_desc);
    double sum = 0.0;
    for (int32_t i = 0; i < k; i++) sum += c[i].v;
    for (int32_t i = 0; i < k; i++) c[i].v = (float)(c[i].v / sum);
    return k;
}

// llama.cpp's XTC (sampler.h) on the survivors c[0..m) (probabilities, not normalized; in any order): one draw of the
// generator decides whether it acts; then, sorted and renormalized, those at or above the threshold leave but the
// last of them. Returns the new m (c[0..m) sorted when it acted).
static int32_t xtc_cut(kvt_sampler *s, int32_t m) {
    if (m < 2 || (float)next_uniform(s) > s->p.xtc_probability) return m;
    cand *c = s->c;
    qsort(c, (size_t)m, sizeof *c, cmp_desc);
    double tot = 0.0;
    for (int32_t i = 0; i < m; i++) tot += c[i].v;
    int32_t last = 0;
    while (last + 1 < m && (float)(c[last + 1].v / tot) >= s->p.xtc_threshold) last++;
    if (last == 0 || (float)(c[0].v / tot) < s->p.xtc_threshold || m - last < s->p.min_keep) return m;
    memmove(c, c + last, (size_t)(m - last) * sizeof *c);
    return m - last;
}

// The temperature of the draw over the survivors c[0..m) (probabilities, not normalized): temp, or with
// dynatemp_range > 0 llama.cpp's dynamic temperature from their entropy.
static float draw_temp(const kvt_sampler *s, int32_t m) {
    if (s->p.dynatemp_range <= 0.0f) return s->p.temp;
    const float lo = s->p.temp - s->p.dynatemp_range > 0.0f ? s->p.temp - s->p.dynatemp_range : 0.0f;
    const float hi = s->p.temp + s->p.dynatemp_range;
    if (m <= 1) return hi; // one candidate: any temperature draws it
    double tot = 0.0;
    for (int32_t i = 0; i < m; i++) tot += s->c[i].v;
    float ent = 0.0f;
    for (int32_t i = 0; i < m; i++) {
        const float pr = (float)(s->c[i].v / tot);
        if (pr > 0.0f) ent -= pr * logf(pr);
    }
    return lo + (hi - lo) * powf(ent / -logf(1.0f / (float)m), s->p.dynatemp_exponent);
}

// llama.cpp's mirostat (sampler.h) over every candidate (logits after the biases; temp > 0): keeps those the version
// keeps (sorted: a selection of the likeliest, not a sort of the vocabulary), draws one and moves mu by its surprise.
// Its float arithmetic, so that k and the cut fall where llama.cpp's do.
static int32_t mirostat_draw(kvt_sampler *s) {
    cand *c = s->c;
    const int32_t n = s->n_vocab;
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        c[i].v /= s->p.temp;
        mx = c[i].v > mx ? c[i].v : mx;
    }
    float sum = 0.0f;
    for (int32_t i = 0; i < n; i++) sum += (c[i].v = expf(c[i].v - mx));
    for (int32_t i = 0; i < n; i++) c[i].v /= sum;
    int32_t m;
    if (s->p.mirostat == 1) { // Zipf's exponent from the 100 likeliest, then the k that gives surprise mu
        const int32_t t = n < 100 ? n : 100;
        select_top(c, n, t);
        float tb = 0.0f, tt = 0.0f;
        for (int32_t i = 0; i < 99 && i < n - 1; i++) {
            const float ti = logf((float)(i + 2) / (float)(i + 1)), bi = logf(c[i].v / c[i + 1].v);
            tb += ti * bi;
            tt += ti * ti;
        }
        const float sh = tb / tt, eps = sh - 1.0f;
        const float k = powf((eps * powf(2.0f, s->mu)) / (1.0f - powf((float)n, -eps)), 1.0f / sh);
        m = isfinite(k) && k < (float)n ? (k >= 1.0f ? (int32_t)k : 1) : n;
        if (m > t) select_top(c, n, m);
    } else { // the candidates whose surprise is at most mu (a prefix of the order; at least the likeliest)
        m = 0;
        for (int32_t i = 0; i < n; i++)
            if (-log2f(c[i].v) <= s->mu) c[m++] = c[i];
        if (m == 0) m = 1, select_top(c, n, 1); // (nothing was moved: c holds every candidate)
        else qsort(c, (size_t)m, sizeof *c, cmp_desc);
    }
    float tot = 0.0f;
    for (int32_t i = 0; i < m; i++) tot += c[i].v;
    for (int32_t i = 0; i < m; i++) c[i].v /= tot;
    const int32_t pick = draw_index(s, c, m, 1.0);
    report(s, c, m, 1.0, pick);
    s->mu -= s->p.mirostat_eta * (-log2f(c[pick].v) - s->p.mirostat_tau);
    return c[pick].id;
}

// llama.cpp's infill sampler (sampler.h) on the survivors c[0..m) (probabilities, not normalized; in any order): sorts
// them, keeps those it keeps with their probabilities (the draw is over their logits) and returns how many. Its sums in
// float and its passes in its order, so that its cuts fall where llama.cpp's do.
static int32_t infill_filter(kvt_sampler *s, int32_t m) {
    const kvt_tokenizer *t = s->p.infill;
    cand *c = s->c;
    float *q = s->q;
    qsort(c, (size_t)m, sizeof *c, cmp_desc);
    double tot = 0.0;
    for (int32_t i = 0; i < m; i++) tot += c[i].v;
    float p_txt = 0.0f, p_eog = 0.0f;
    for (int32_t i = 0; i < m; i++) {
        q[i] = (float)(c[i].v / tot);
        if (kvt_token_is_eog(t, c[i].id)) p_eog += q[i];
        else p_txt += q[i];
    }
    int32_t k = 0;
    if (3.0f * p_eog * (float)m > p_txt) { // too little text: the end-of-generation tokens alone
        for (int32_t i = 0; i < m; i++)
            if (kvt_token_is_eog(t, c[i].id)) c[k++] = c[i];
        return k;
    }
    // a token whose text begins another's takes the other's probability into the likelier of the two
    int64_t off = 0;
    for (int32_t i = 0; i < m; i++) {
        s->poff[i] = off;
        off += kvt_token_to_piece(t, c[i].id, s->pbuf + off, s->pcap - off);
        s->gone[i] = c[i].v == 0.0f; // a banned token (-inf logit) takes no part, as in llama.cpp
    }
    s->poff[m] = off;
    for (int32_t i0 = 0; i0 < m; i0++) {
        const int64_t n0 = s->poff[i0 + 1] - s->poff[i0];
        for (int32_t i1 = 0; i1 < m && !s->gone[i0]; i1++) {
            const int64_t n1 = s->poff[i1 + 1] - s->poff[i1];
            if (i0 == i1 || s->gone[i1] || n0 == 0 || n0 > n1 ||
                memcmp(s->pbuf + s->poff[i0], s->pbuf + s->poff[i1], (size_t)n0))
                continue;
            const int32_t dst = q[i1] > q[i0] ? i1 : i0, src = dst == i0 ? i1 : i0;
            q[dst] += q[src];
            q[src] = 0.0f;
            s->gone[src] = 1;
        }
    }
    // text tokens under 0.2 leave (a merged-away one is gone whatever it is)
    int32_t n_txt = 0;
    float sum = 0.0f;
    for (int32_t i = 0; i < m; i++) {
        const bool eog = kvt_token_is_eog(t, c[i].id);
        if (s->gone[i] || (q[i] < 0.2f && !eog)) continue;
        n_txt += !eog;
        sum += q[i];
        q[k] = q[i];
        c[k++] = c[i];
    }
    if (n_txt == 0) { // EOT (else EOS) alone
        const int32_t eot = kvt_token_eot(t);
        c[0] = (cand){eot >= 0 ? eot : kvt_token_eos(t), 1.0f};
        return 1;
    }
    // then those under 1 / (text tokens left + 1) of the renormalized probabilities
    const float thr = 1.0f / (float)(n_txt + 1);
    m = k;
    k = 0;
    for (int32_t i = 0; i < m; i++)
        if (q[i] / sum >= thr || kvt_token_is_eog(t, c[i].id)) c[k++] = c[i];
    return k;
}

// llama.cpp's adaptive-p (sampler.h) over the survivors c[0..m), their weights after the temperature summing to tot:
// each one's probability moved to the logit of its distance from the adapted target, the draw by their softmax; the
// drawn token and its probability wait for kvt_sampler_accept. Its float arithmetic.
static int32_t adaptive_draw(kvt_sampler *s, int32_t m, double tot) {
    cand *c = s->c;
    float *q = s->ap_q;
    const float target = s->p.adaptive_target > 1.0f ? 1.0f : s->p.adaptive_target;
    float at = s->ap_weight == 0.0f ? target : 2.0f * target - s->ap_sum / s->ap_weight;
    at = at < 0.0f ? 0.0f : at > 1.0f ? 1.0f : at;
    float mx = -INFINITY;
    for (int32_t i = 0; i < m; i++) {
        q[i] = (float)(c[i].v / tot);
        const float d = fabsf((q[i] - at) * (1.0f / 0.3f));
        c[i].v = 5.0f - 10.0f * d * d / (1.0f + d);
        mx = c[i].v > mx ? c[i].v : mx;
    }
    double sum = 0.0;
    for (int32_t i = 0; i < m; i++) sum += (c[i].v = expf(c[i].v - mx));
    const int32_t pick = draw_index(s, c, m, sum);
    report(s, c, m, sum, pick);
    s->ap_pending = c[pick].id;
    s->ap_prob = q[pick];
    return c[pick].id;
}

// The chain over logits [n_vocab], with mask [n_vocab] (NULL: none) setting every token it marks 0 to -inf first.
static int32_t chain(kvt_sampler *s, const float *logits, const uint8_t *mask) {
    const int32_t n = s->n_vocab;
    for (int32_t i = 0; i < n; i++) s->c[i] = (cand){i, logits[i]};
    if (mask) {
        for (int32_t i = 0; i < n; i++) s->c[i].v = mask[i] ? s->c[i].v : -INFINITY;
    }
    // a ban (a -inf bias, or biases summing to -inf) wins over any other bias of its token, whatever their order: a
    // +inf bias beside a ban (ignore_eos with an end-of-generation token forced, or [[5, 1e308], [5, -1e308]]) made the
    // logit NaN (inf - inf), and a NaN drew greedily or fell through every cut to the last candidate
    for (int32_t i = 0; i < s->p.n_logit_bias; i++) {
        float *v = &s->c[s->bias[i].token].v;
        *v = is_ban(s->bias[i].bias) || *v == -INFINITY ? -INFINITY : *v + s->bias[i].bias;
    }
    const bool mirostat = mirostat_on(&s->p);
    if (s->count && !mirostat) apply_penalties(s); // (llama.cpp's mirostat chain has no penalties)
    if (s->dry) { // (candidates still in id order)
        const int32_t *tok;
        const float *pen;
        const int32_t k = kvt_dry_penalties(s->dry, &tok, &pen);
        for (int32_t i = 0; i < k; i++) s->c[tok[i]].v -= pen[i];
    }
    const bool all_banned = s->p.n_logit_bias > 0 && !bias_limits(s);
    const bool typical = s->p.typical_p < 1.0f;
    const bool xtc = s->p.xtc_probability > 0.0f && s->p.xtc_threshold <= 0.5f;
    const bool plain = !drops_argmax(&s->p);
    if (all_banned || (s->p.temp <= 0.0f && (plain || mirostat))) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++) {
            if (s->c[i].v > s->c[best].v) best = i;
        }
        return greedy(s, best);
    }
    if (mirostat) return mirostat_draw(s);
    if (s->p.top_n_sigma > 0.0f) top_n_sigma(s); // (the argmax always stays: a greedy draw went above)
    int32_t m = n;
    if ((s->p.top_k > 0 && s->p.top_k < n) || typical) {
        if (s->p.top_k > 0 && s->p.top_k < n) {
            m = s->p.top_k;
            select_top(s->c, n, m);
        } else { // typical-p without top-k: every candidate, unsorted (typical_cut sorts what it keeps), its max first
            select_top(s->c, n, 1);
        }
        // softmax over the kept candidates
        double sum = 0.0;
        const float mx = s->c[0].v;
        for (int32_t i = 0; i < m; i++) {
            s->c[i].v = expf(s->c[i].v - mx);
            sum += s->c[i].v;
        }
        for (int32_t i = 0; i < m; i++) s->c[i].v = (float)(s->c[i].v / sum);
        if (typical) m = typical_cut(s, m);
        if (s->p.top_p < 1.0f) {
            double cum = 0.0;
            for (int32_t i = 0; i < m; i++) {
                cum += s->c[i].v;
                if (cum >= s->p.top_p && i + 1 >= s->p.min_keep) {
                    m = i + 1;
                    break;
                }
            }
        }
        if (s->p.min_p > 0.0f) {
            const float thr = s->c[0].v * s->p.min_p;
            int32_t k = 1;
            while (k < m && (s->c[k].v >= thr || k < s->p.min_keep)) k++;
            m = k;
        }
    } else {
        m = cut_all(s);
    }
    if (xtc) m = xtc_cut(s, m);
    if (s->p.infill) m = infill_filter(s, m);
    const float temp = draw_temp(s, m);
    if (temp <= 0.0f) { // the argmax of those left (the likeliest, the lowest id on ties)
        int32_t best = 0;
        for (int32_t i = 1; i < m; i++)
            if (before(&s->c[i], &s->c[best])) best = i;
        return greedy(s, s->c[best].id);
    }
    // temperature on the survivors: (p_i / p_max) ^ (1/T) renormalised == softmax(logit/T). Relative to the largest
    // survivor (a ratio in (0, 1], the largest's weight 1): p_i ^ (1/T) alone underflowed to 0 for every survivor at a
    // low temperature (T 0.01 and a largest probability under 0.35), and the draw fell to the last, least likely one.
    float pmax = s->c[0].v;
    for (int32_t i = 1; i < m; i++) pmax = s->c[i].v > pmax ? s->c[i].v : pmax;
    double tot = 0.0;
    for (int32_t i = 0; i < m; i++) {
        s->c[i].v = (float)pow((double)s->c[i].v / pmax, 1.0 / temp);
        tot += s->c[i].v;
    }
    if (s->p.adaptive_target >= 0.0f) return adaptive_draw(s, m, tot);
    const int32_t pick = draw_index(s, s->c, m, tot);
    report(s, s->c, m, tot, pick);
    return s->c[pick].id;
}

int32_t kvt_sampler_sample(kvt_sampler *s, const float *logits) {
    if (!s->gs) return chain(s, logits, NULL);
    int32_t id;
    return kvt_sampler_draw(s, logits, &id, NULL) ? chain(s, logits, NULL) : id;
}

kvt_status kvt_sampler_draw(kvt_sampler *s, const float *logits, int32_t *out, kvt_err *err) {
    *out = -1;
    if (!s->gs) {
        *out = chain(s, logits, NULL);
        return KVT_OK;
    }
    const int32_t n = s->n_vocab;
    const bool plain = !drops_argmax(&s->p);
    // greedy over the raw logits (nothing adjusts them, no report): the argmax, the candidates filled only when needed
    const bool raw = s->p.temp <= 0.0f && plain && !mirostat_on(&s->p) && !kvt_sampler_params_adjust(&s->p) &&
                     !s->p.report;
    int32_t id = raw ? kvt_argmax(logits, n) : chain(s, logits, NULL);
    uint8_t ok = 0;
    kvt_status st = kvt_grammar_state_filter(s->gs, s->gv, &id, 1, &ok, err);
    if (!st && !ok && raw) {
        for (int32_t i = 0; i < n; i++) s->c[i] = (cand){i, logits[i]};
    }
    // a greedy chain (chain() took its argmax path: s->c holds the adjusted logits in id order) picks, after the mask,
    // the first allowed token in `before` order: the likeliest candidates are checked one by one first, so that the
    // whole vocabulary is filtered only when none of them is allowed
    if (!st && !ok && s->p.temp <= 0.0f && (plain || mirostat_on(&s->p))) {
        const int32_t k = n < 64 ? n : 64;
        select_top(s->c, n, k);
        for (int32_t i = 0; !st && !ok && i < k && s->c[i].v > -INFINITY; i++) {
            st = kvt_grammar_state_filter(s->gs, s->gv, &s->c[i].id, 1, &ok, err);
            if (!st && ok) id = greedy(s, s->c[i].id);
        }
    }
    if (!st && !ok) { // llama.cpp's second draw: the grammar's mask first, then the whole chain again
        st = kvt_grammar_state_filter(s->gs, s->gv, s->g_ids, n, s->g_mask, err);
        int32_t best = -1; // the likeliest allowed token by the raw logits (lowest id on ties)
        for (int32_t i = 0; !st && i < n; i++) {
            if (s->g_mask[i] && (best < 0 || logits[i] > logits[best])) best = i;
        }
        if (!st && best < 0)
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "grammar: no token of the vocabulary continues the text after "
                              "%lld generated tokens", (long long)s->g_drawn);
        if (!st) {
            id = chain(s, logits, s->g_mask);
            if (id < 0 || id >= n || !s->g_mask[id]) id = greedy(s, best); // the biases banned every allowed token
        }
    }
    if (!st) st = kvt_grammar_state_accept(s->gs, s->gv, id, err);
    if (st) return st;
    s->g_drawn++;
    *out = id;
    return KVT_OK;
}
