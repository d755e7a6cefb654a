// test_sampler.c - sampling chain properties.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/sched/sampler.h"
#include "test.h"

// The chain as it was before the top-k selection and the uncut path (a sort of the whole vocabulary, the softmax in
// that order; the temperature relative to the largest survivor): the reference the faster sampler must give the same
// draws as where it cuts.
typedef struct {
    int32_t id;
    float v;
} ref_cand;
static int ref_cmp(const void *a, const void *b) {
    const ref_cand *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? 1 : -1;
    return x->id - y->id;
}
static double ref_uniform(uint64_t *rng) {
    uint64_t z = (*rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}
static int32_t ref_sample(const kvt_sampler_params *p, const float *logits, int32_t n, ref_cand *c, uint64_t *rng) {
    for (int32_t i = 0; i < n; i++) c[i] = (ref_cand){i, logits[i]};
    int32_t m = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    qsort(c, (size_t)n, sizeof *c, ref_cmp);
    double sum = 0.0;
    const float mx = c[0].v;
    for (int32_t i = 0; i < m; i++) {
        c[i].v = expf(c[i].v - mx);
        sum += c[i].v;
    }
    for (int32_t i = 0; i < m; i++) c[i].v = (float)(c[i].v / sum);
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        for (int32_t i = 0; i < m; i++) {
            cum += c[i].v;
            if (cum >= p->top_p) {
                m = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        const float thr = c[0].v * p->min_p;
        int32_t k = 1;
        while (k < m && c[k].v >= thr) k++;
        m = k;
    }
    double tot = 0.0;
    const float pmax = c[0].v;
    for (int32_t i = 0; i < m; i++) {
        c[i].v = (float)pow((double)c[i].v / pmax, 1.0 / p->temp);
        tot += c[i].v;
    }
    double r = ref_uniform(rng) * tot, acc = 0.0;
    for (int32_t i = 0; i < m; i++) {
        acc += c[i].v;
        if (r < acc) return c[i].id;
    }
    return c[m - 1].id;
}

// Every cut of top-k / top-p / min-p draws as the reference, token for token; the uncut chain follows the softmax.
static void test_sampler_cuts(void) {
    enum { N = 1000, DRAWS = 60 };
    float *logits = malloc(N * sizeof *logits);
    ref_cand *c = malloc(N * sizeof *c);
    uint64_t x = 12345;
    for (int32_t i = 0; i < N; i++) { // a peaked, Zipf-like spread with a few exact ties
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        logits[i] = (float)((x >> 40) % 4096) / 256.0f - 8.0f;
    }
    logits[17] = logits[999] = 12.0f; // a tie at the top
    const int32_t ks[] = {0, 1, 7, 40, N - 1, N, N + 5};
    const float ps[] = {0.5f, 0.95f, 1.0f}, mps[] = {0.0f, 0.05f, 0.3f}, ts[] = {0.7f, 1.3f};
    int cases = 0, bad = 0;
    char first[128] = "";
    for (size_t a = 0; a < sizeof ks / sizeof ks[0]; a++)
        for (size_t b = 0; b < 3; b++)
            for (size_t d = 0; d < 3; d++)
                for (size_t t = 0; t < 2; t++) {
                    kvt_sampler_params p = kvt_sampler_params_default();
                    p.top_k = ks[a];
                    p.top_p = ps[b];
                    p.min_p = mps[d];
                    p.temp = ts[t];
                    p.seed = 99 + (uint64_t)cases;
                    if ((p.top_k <= 0 || p.top_k >= N) && p.top_p >= 1.0f && p.min_p <= 0.0f) continue; // no cut
                    kvt_sampler *s;
                    if (kvt_sampler_init(&p, N, &s, NULL) != KVT_OK) {
                        bad++;
                        continue;
                    }
                    uint64_t rng = p.seed * 0x9E3779B97F4A7C15ull + 1;
                    cases++;
                    for (int i = 0; i < DRAWS; i++) {
                        int32_t got = kvt_sampler_sample(s, logits), want = ref_sample(&p, logits, N, c, &rng);
                        if (got != want) {
                            if (!bad++)
                                snprintf(first, sizeof first, "top_k %d top_p %g min_p %g temp %g draw %d: %d, want %d",
                                         p.top_k, p.top_p, p.min_p, p.temp, i, got, want);
                            break;
                        }
                    }
                    kvt_sampler_free(s);
                }
    test_result(bad == 0, "sampler: top-k, top-p, min-p cuts draw as sorting the whole vocabulary (bounded heap, "
                "filtered sort)", "%d of %d cases differ; first: %s", bad, cases, first);
    free(logits);
    free(c);
}

// The greedy pick of a sampler with params p over logits l[n] after accepting the tokens of `seen` (digits, in order).
static int32_t pick_after(const kvt_sampler_params *p, const float *l, int32_t n, const char *seen) {
    kvt_sampler *s;
    if (kvt_sampler_init(p, n, &s, NULL) != KVT_OK) return -1;
    for (const char *c = seen; *c; c++) kvt_sampler_accept(s, *c - '0');
    int32_t id = kvt_sampler_sample(s, l);
    kvt_sampler_free(s);
    return id;
}

// llama.cpp's penalties: repeat (divide positive / multiply negative), frequency (per occurrence), presence (once),
// over the last penalty_last_n tokens accepted.
static void test_sampler_penalties(void) {
    const float l[3] = {2.0f, 1.5f, -1.0f};
    kvt_sampler_params p = kvt_sampler_params_default();
    p.temp = 0;
    p.frequency_penalty = 0.2f;
    test_result(pick_after(&p, l, 3, "00") == 0 && pick_after(&p, l, 3, "000") == 1, // 2 - 0.4 > 1.5 > 2 - 0.6
                "sampler: frequency penalty per occurrence in the window", "");
    p.frequency_penalty = 0;
    p.presence_penalty = 0.45f;
    p.penalty_last_n = 2;
    bool ok = pick_after(&p, l, 3, "000") == 0; // 2 - 0.45 = 1.55 > 1.5: once, not per occurrence
    p.presence_penalty = 0.6f;                  // 2 - 0.6 < 1.5; but once the window (2) holds only 1s, 0 is free
    ok &= pick_after(&p, l, 3, "0") == 1 && pick_after(&p, l, 3, "011") == 0;
    test_result(ok, "sampler: presence penalty once per token, only within the window", "");
    // the three together on a negative logit: -1 * 2 - (2 * 0.5 + 0.25) = -3.25 < -3 (token 1 pushed below it)
    const float m[2] = {-3.0f, -1.0f};
    p = kvt_sampler_params_default();
    p.temp = 0;
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    test_result(pick_after(&p, m, 2, "11") == 0 && pick_after(&p, m, 2, "1") == 1,
                "sampler: repeat, frequency and presence penalties combined", "");
    kvt_sampler_params q = kvt_sampler_params_default();
    bool off = !kvt_sampler_params_adjust(&q);
    q.presence_penalty = 0.1f;
    bool on = kvt_sampler_params_adjust(&q);
    q.penalty_last_n = 0;
    bool off2 = !kvt_sampler_params_adjust(&q);
    const kvt_logit_bias one = {1, 0.5f};
    q.logit_bias = &one;
    q.n_logit_bias = 1;
    test_result(off && on && off2 && kvt_sampler_params_adjust(&q),
                "sampler: adjust() says when a penalty or a logit bias acts", "");
    // logit biases first (llama.cpp's order): +0.6 lifts token 1 over 0; -inf bans; a token outside is refused
    kvt_logit_bias b[2] = {{1, 0.6f}, {0, -INFINITY}};
    p = kvt_sampler_params_default();
    p.temp = 0;
    p.logit_bias = b;
    p.n_logit_bias = 1;
    bool ok2 = pick_after(&p, l, 3, "") == 1;
    p.n_logit_bias = 2;
    b[0].bias = 0;
    ok2 &= pick_after(&p, l, 3, "") == 1; // 0 banned
    p.temp = 1.0f;
    p.top_k = 0;
    kvt_sampler *s;
    kvt_sampler_init(&p, 3, &s, NULL);
    for (int i = 0; i < 200; i++) ok2 &= kvt_sampler_sample(s, l) != 0;
    b[0].bias = 0.6f; // the sampler copied the biases at init: a change after does nothing
    for (int i = 0; i < 200; i++) ok2 &= kvt_sampler_sample(s, l) != 0;
    kvt_sampler_free(s);
    b[1].token = 3;
    kvt_err err = {0};
    ok2 &= kvt_sampler_init(&p, 3, &s, &err) == KVT_ERR_INVALID_ARG && strstr(err.msg, "token 3");
    test_result(ok2, "sampler: logit biases (a bias, a ban at any temperature, copied at init, tokens checked)", "%s",
                err.msg);
}

// Extreme settings a request or a flag can give: a low temperature is near greedy (before, every weight p ^ (1/T)
// underflowed to 0 and the least likely survivor was drawn every time); a bias of +inf forces its tokens (before,
// NaN probabilities: min-p kept nothing and the draw read c[-1]); all tokens banned draws the lowest id; min_p > 1
// keeps the largest.
static void test_sampler_extremes(void) {
    enum { N = 8, DRAWS = 400 };
    const float l[N] = {2.0f, 1.9f, 1.8f, 1.7f, 1.6f, 1.5f, 1.4f, 1.3f};
    char why[160] = "";
    bool ok = true;
    const float temps[] = {0.01f, 0.001f, 1e-5f};
    const int32_t ks[] = {0, 4};
    for (size_t t = 0; t < 3; t++)
        for (size_t k = 0; k < 2; k++) {
            kvt_sampler_params p = kvt_sampler_params_default();
            p.top_k = ks[k];
            p.top_p = 1.0f;
            p.min_p = 0.0f;
            p.temp = temps[t];
            kvt_sampler *s;
            if (kvt_sampler_init(&p, N, &s, NULL) != KVT_OK) return test_result(false, "sampler: extremes", "init");
            int zeros = 0;
            for (int i = 0; i < DRAWS; i++) zeros += kvt_sampler_sample(s, l) == 0;
            kvt_sampler_free(s);
            if (zeros < DRAWS - 1 && ok) {
                ok = false;
                snprintf(why, sizeof why, "temp %g top_k %d: the best token drawn %d times of %d", temps[t], ks[k], zeros,
                         DRAWS);
            }
        }
    test_result(ok, "sampler: a low temperature (0.01 .. 1e-5) draws the best token, cut or not", "%s", why);
    const kvt_logit_bias force[2] = {{3, INFINITY}, {5, INFINITY}};
    kvt_logit_bias ban[N];
    for (int i = 0; i < N; i++) ban[i] = (kvt_logit_bias){i, -INFINITY};
    const float mps[] = {0.05f, 0.0f};
    const int32_t tks[] = {0, 40, 2};
    ok = true;
    for (size_t a = 0; a < 2; a++)
        for (size_t b = 0; b < 3; b++) {
            kvt_sampler_params p = kvt_sampler_params_default();
            p.min_p = mps[a];
            p.top_k = tks[b];
            p.logit_bias = force;
            p.n_logit_bias = 2;
            kvt_sampler *s;
            if (kvt_sampler_init(&p, N, &s, NULL) != KVT_OK) return test_result(false, "sampler: extremes", "init");
            int got[N] = {0}, other = 0;
            for (int i = 0; i < DRAWS; i++) {
                int32_t id = kvt_sampler_sample(s, l);
                if (id == 3 || id == 5) got[id]++;
                else other++;
            }
            kvt_sampler_free(s);
            if ((other || got[3] < DRAWS / 4 || got[5] < DRAWS / 4) && ok) {
                ok = false;
                snprintf(why, sizeof why, "min_p %g top_k %d: 3 x%d, 5 x%d, others x%d", mps[a], tks[b], got[3], got[5],
                         other);
            }
            p.logit_bias = ban;
            p.n_logit_bias = N;
            if (kvt_sampler_init(&p, N, &s, NULL) != KVT_OK) return test_result(false, "sampler: extremes", "init");
            int32_t id = kvt_sampler_sample(s, l);
            kvt_sampler_free(s);
            if (id != 0 && ok) {
                ok = false;
                snprintf(why, sizeof why, "min_p %g top_k %d, every token banned: drew %d, want 0", mps[a], tks[b], id);
            }
        }
    test_result(ok, "sampler: +inf biases force their tokens evenly, every token banned draws id 0", "%s", why);
    kvt_sampler_params p = kvt_sampler_params_default();
    p.top_k = 0;
    p.min_p = 2.0f;
    kvt_sampler *s;
    ok = kvt_sampler_init(&p, N, &s, NULL) == KVT_OK;
    for (int i = 0; ok && i < 50; i++) ok = kvt_sampler_sample(s, l) == 0;
    kvt_sampler_free(s);
    test_result(ok, "sampler: min_p above 1 keeps the largest", "");
}

// A ban beside a +inf bias of the same token (ignore_eos with that token forced, in either order, or finite biases
// summing to +inf): the token stays banned and the draws are those of the ban alone, greedy and sampled, cut or not
// (its logit was NaN: greedy drew it when it was id 0, a sampled draw fell through to the last candidate).
static void test_sampler_ban_wins(void) {
    enum { N = 8, DRAWS = 200 };
    const float l[N] = {2.0f, 1.9f, 1.8f, 1.7f, 1.6f, 1.5f, 1.4f, 1.3f};
    const kvt_logit_bias sets[3][3] = {{{0, INFINITY}, {0, -INFINITY}, {0, 0.0f}},
                                       {{0, -INFINITY}, {0, INFINITY}, {0, 0.0f}},
                                       {{0, 3e38f}, {0, 3e38f}, {0, -INFINITY}}};
    const kvt_logit_bias ban = {0, -INFINITY};
    const float temps[] = {0.0f, 0.8f};
    const float mps[] = {0.05f, 0.0f};
    char why[160] = "";
    bool ok = true;
    for (size_t c = 0; c < 12; c++) { // every bias set, at each temperature, with and without min-p
        const size_t k = c / 4, t = c / 2 % 2, m = c % 2;
        kvt_sampler_params p = kvt_sampler_params_default();
        p.logit_bias = sets[k];
        p.n_logit_bias = 3;
        p.seed = 7;
        p.temp = temps[t];
        p.min_p = mps[m];
        p.top_k = 0;
        kvt_sampler *s, *r;
        if (kvt_sampler_init(&p, N, &s, NULL) != KVT_OK) return test_result(false, "sampler: ban wins", "init");
        p.logit_bias = &ban;
        p.n_logit_bias = 1;
        if (kvt_sampler_init(&p, N, &r, NULL) != KVT_OK) {
            kvt_sampler_free(s);
            return test_result(false, "sampler: ban wins", "init");
        }
        for (int i = 0; ok && i < DRAWS; i++) {
            const int32_t a = kvt_sampler_sample(s, l), b = kvt_sampler_sample(r, l);
            if (a != b || a == 0) {
                ok = false;
                snprintf(why, sizeof why, "biases %zu temp %g min_p %g draw %d: %d, the ban alone %d", k,
                         temps[t], mps[m], i, a, b);
            }
        }
        kvt_sampler_free(s);
        kvt_sampler_free(r);
    }
    test_result(ok, "sampler: a ban wins over a +inf bias of its token (no NaN), greedy and sampled", "%s", why);
    kvt_sampler_params p = kvt_sampler_params_default();
    const kvt_logit_bias nanb = {3, NAN};
    p.logit_bias = &nanb;
    p.n_logit_bias = 1;
    kvt_sampler *s = NULL;
    kvt_err err = {0};
    const kvt_status st = kvt_sampler_init(&p, N, &s, &err);
    kvt_sampler_free(s);
    test_result(st == KVT_ERR_INVALID_ARG && strstr(err.msg, "NaN"), "sampler: a NaN logit bias is refused, named",
                "status %d: %s", (int)st, err.msg);
}

// llama.cpp's top-n-sigma: logits 0, 0.05, ..., 4.95 (mean 2.475, standard deviation 1.4431): n = 1 keeps the logits
// at or above 4.95 - 1.4431 = 3.507, ids 71..99 (id 70 is 3.50, under it); a tiny n keeps the largest alone; off,
// the draws reach below.
static void test_sampler_top_n_sigma(void) {
    enum { N = 100 };
    float l[N];
    for (int i = 0; i < N; i++) l[i] = 0.05f * (float)i;
    const float ns[3] = {1.0f, 1e-6f, -1.0f};
    int lo[3], hi[3];
    for (int k = 0; k < 3; k++) {
        kvt_sampler_params p = kvt_sampler_params_default();
        p.temp = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.top_n_sigma = ns[k], p.seed = 9;
        kvt_sampler *s = NULL;
        lo[k] = N, hi[k] = -1;
        if (kvt_sampler_init(&p, N, &s, NULL) != KVT_OK) continue;
        for (int d = 0; d < 3000; d++) {
            const int32_t id = kvt_sampler_sample(s, l);
            lo[k] = id < lo[k] ? id : lo[k];
            hi[k] = id > hi[k] ? id : hi[k];
        }
        kvt_sampler_free(s);
    }
    test_result(lo[0] == 71 && hi[0] == 99 && lo[1] == 99 && hi[1] == 99 && lo[2] < 60,
                "sampler: top-n-sigma keeps the logits within n standard deviations of the largest (llama.cpp's)",
                "n 1: ids %d..%d (want 71..99); n 1e-6: %d..%d; off: lowest %d", lo[0], hi[0], lo[1], hi[1], lo[2]);
}

// llama.cpp's typical-p on p = .5 .2 .15 .1 .05 (entropy 1.3332; |-ln p - H| .640 .276 .564 .970 1.663): 0.3 keeps
// ids 1 and 2 (.2 + .15 passes it), so a greedy draw is id 1, not the argmax 0; 0.5 keeps 1, 2, 0 (greedy 0).
static void test_sampler_typical(void) {
    enum { N = 5 };
    const float pr[N] = {0.5f, 0.2f, 0.15f, 0.1f, 0.05f};
    float l[N];
    for (int i = 0; i < N; i++) l[i] = logf(pr[i]);
    int32_t greedy[2] = {-1, -1};
    int64_t seen = 0;
    const float tp[2] = {0.3f, 0.5f};
    for (int k = 0; k < 2; k++) {
        kvt_sampler_params p = kvt_sampler_params_default();
        p.temp = 0.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.typical_p = tp[k];
        kvt_sampler *s = NULL;
        if (kvt_sampler_init(&p, N, &s, NULL) == KVT_OK) greedy[k] = kvt_sampler_sample(s, l);
        kvt_sampler_free(s);
    }
    kvt_sampler_params p = kvt_sampler_params_default();
    p.temp = 1.0f, p.top_k = 3, p.top_p = 1.0f, p.min_p = 0.0f, p.typical_p = 0.3f, p.seed = 4;
    kvt_sampler *s = NULL;
    if (kvt_sampler_init(&p, N, &s, NULL) == KVT_OK)
        for (int d = 0; d < 500; d++) seen |= (int64_t)1 << kvt_sampler_sample(s, l);
    kvt_sampler_free(s);
    // after top_k 3 it sees .5 .2 .15 renormalized (.588 .235 .176; H .9587; scores .428 .488 .776): id 0 comes
    // first and .588 passes 0.3 alone, so every draw is id 0
    test_result(greedy[0] == 1 && greedy[1] == 0 && seen == 1,
                "sampler: typical-p keeps the locally typical tokens (llama.cpp's), greedy draws among them too",
                "greedy at 0.3: %d (want 1), at 0.5: %d (want 0); top_k 3 + 0.3 drew mask %llx (want 1)", greedy[0],
                greedy[1], (long long)seen);
}

// The ids drawn (a bitmap) by `draws` draws of p over logits l[n] (n <= 64).
static int64_t draws_of(const kvt_sampler_params *p, const float *l, int32_t n, int draws) {
    kvt_sampler *s = NULL;
    if (kvt_sampler_init(p, n, &s, NULL) != KVT_OK) return -1;
    int64_t seen = 0;
    for (int d = 0; d < draws; d++) seen |= (int64_t)1 << kvt_sampler_sample(s, l);
    kvt_sampler_free(s);
    return seen;
}

// llama.cpp's XTC on p = .4 .3 .2 .1 (threshold .15: ids 0, 1, 2 pass it, 0 and 1 leave) and its dynamic temperature
// (range 1 at temperature 0: a flat distribution draws everything, a peaked one only its top).
static void test_sampler_xtc_dynatemp(void) {
    const float pr[4] = {0.4f, 0.3f, 0.2f, 0.1f};
    float l[4], flat[4] = {0, 0, 0, 0}, peak[4] = {12, 0, 0, 0};
    for (int i = 0; i < 4; i++) l[i] = logf(pr[i]);
    kvt_sampler_params p = kvt_sampler_params_default();
    p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.seed = 6;
    p.temp = 0.0f, p.xtc_probability = 1.0f, p.xtc_threshold = 0.15f;
    const int64_t greedy = draws_of(&p, l, 4, 1);
    p.temp = 1.0f;
    const int64_t drawn = draws_of(&p, l, 4, 400);
    p.xtc_probability = 0.5f;
    const int64_t half = draws_of(&p, l, 4, 400);
    p.xtc_probability = 1.0f, p.xtc_threshold = 0.45f, p.temp = 0.0f; // nothing passes .45: no change
    const int64_t none = draws_of(&p, l, 4, 1);
    test_result(greedy == 4 && drawn == 12 && half == 15 && none == 1,
                "sampler: XTC removes the candidates over its threshold but the least likely of them (llama.cpp's)",
                "greedy %llx (want 4), draws %llx (want c), at probability 0.5 %llx (want f), threshold .45 %llx (want 1)",
                (long long)greedy, (long long)drawn, (long long)half, (long long)none);
    kvt_sampler_params d = kvt_sampler_params_default();
    d.top_k = 0, d.top_p = 1.0f, d.min_p = 0.0f, d.seed = 2, d.temp = 0.0f, d.dynatemp_range = 1.0f;
    const int64_t f = draws_of(&d, flat, 4, 200), k = draws_of(&d, peak, 4, 200);
    test_result(f == 15 && k == 1, "sampler: the dynamic temperature follows the entropy (flat: 1, peaked: ~0)",
                "flat %llx (want f), peaked %llx (want 1)", (long long)f, (long long)k);
}

// The typical-p set of logits l[n] computed the plain way (sort by |-log p - H|, cumulate until past tp): its likeliest
// member (a greedy draw's answer), for the sampler's heap-based cut to match.
static int ref_shift_cmp(const void *a, const void *b) {
    const float *x = a, *y = b;
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] < y[1] ? -1 : x[1] > y[1]);
}
static int32_t ref_typical_greedy(const float *l, int32_t n, float tp) {
    float mx = l[0], p[256], sh[256][2], H = 0.0f;
    double sum = 0.0;
    for (int32_t i = 1; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    for (int32_t i = 0; i < n; i++) sum += (p[i] = expf(l[i] - mx));
    for (int32_t i = 0; i < n; i++) p[i] = (float)(p[i] / sum);
    for (int32_t i = 0; i < n; i++) H += -p[i] * logf(p[i]);
    for (int32_t i = 0; i < n; i++) sh[i][0] = fabsf(-logf(p[i]) - H), sh[i][1] = (float)i;
    qsort(sh, (size_t)n, sizeof sh[0], ref_shift_cmp);
    float cum = 0.0f;
    int32_t best = -1;
    for (int32_t k = 0; k < n; k++) {
        const int32_t i = (int32_t)sh[k][1];
        if (best < 0 || p[i] > p[best] || (p[i] == p[best] && i < best)) best = i;
        cum += p[i];
        if (cum > tp) break;
    }
    return best;
}

static void test_sampler_typical_ref(void) {
    uint64_t rng = 17;
    int bad = 0, trials = 300;
    char why[160] = "";
    for (int t = 0; t < trials; t++) {
        const int32_t n = 20 + (int32_t)(ref_uniform(&rng) * 200);
        float l[256];
        for (int32_t i = 0; i < n; i++) l[i] = (float)(ref_uniform(&rng) * 8.0);
        const float tp = 0.05f + (float)ref_uniform(&rng) * 0.9f;
        kvt_sampler_params p = kvt_sampler_params_default();
        p.temp = 0.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.typical_p = tp;
        kvt_sampler *s = NULL;
        if (kvt_sampler_init(&p, n, &s, NULL) != KVT_OK) break;
        const int32_t got = kvt_sampler_sample(s, l), want = ref_typical_greedy(l, n, tp);
        kvt_sampler_free(s);
        if (got != want && !bad++) snprintf(why, sizeof why, "trial %d (n %d, p %.3f): %d, want %d", t, n, tp, got, want);
    }
    test_result(bad == 0, "sampler: typical-p's cut equals sorting by |-log p - H| (300 random distributions)", "%d wrong: %s",
                bad, why);
}

// llama.cpp's mirostat. Version 2 on p = .5 .25 .125 .125 (surprises 1, 2, 3, 3 bits): mu = 2 tau at start keeps
// those at most mu, and each draw moves mu towards tau. Version 1 on a Zipf distribution of exponent 2 over 200
// tokens: its estimate s = 2, so k = (2^mu / (1 - 1/200))^(1/2) = 4.01 at tau 2: the first draw is among 4.
static void test_sampler_mirostat(void) {
    const float pr[4] = {0.5f, 0.25f, 0.125f, 0.125f};
    float l[4], z[200];
    for (int i = 0; i < 4; i++) l[i] = logf(pr[i]);
    for (int i = 0; i < 200; i++) z[i] = -2.0f * logf((float)(i + 1));
    kvt_sampler_params p = kvt_sampler_params_default();
    p.temp = 1.0f, p.mirostat = 2, p.seed = 5;
    p.mirostat_tau = 0.5f, p.mirostat_eta = 0.1f; // mu 1 -> 1.5 over 10 draws (each draw's surprise is 0): id 0 only
    const int64_t low = draws_of(&p, l, 4, 10);
    p.mirostat_tau = 1.5f, p.mirostat_eta = 0.0f; // mu stays 3: every id
    const int64_t all = draws_of(&p, l, 4, 300);
    p.mirostat_tau = 0.9f; // mu stays 1.8: id 0 only
    const int64_t one = draws_of(&p, l, 4, 100);
    p.temp = 0.0f, p.mirostat_tau = 1.5f; // greedy: the argmax
    const int64_t greedy = draws_of(&p, l, 4, 5);
    test_result(low == 1 && all == 15 && one == 1 && greedy == 1,
                "sampler: mirostat 2 keeps the candidates whose surprise is at most mu, mu follows tau (llama.cpp's)",
                "tau .5: %llx (want 1), tau 1.5 eta 0: %llx (want f), tau .9: %llx (want 1), greedy %llx", (long long)low,
                (long long)all, (long long)one, (long long)greedy);
    int32_t hi = -1, distinct = 0;
    int64_t seen = 0;
    for (uint64_t seed = 0; seed < 200; seed++) { // the first draw of fresh samplers
        kvt_sampler_params q = kvt_sampler_params_default();
        q.temp = 1.0f, q.mirostat = 1, q.mirostat_tau = 2.0f, q.seed = seed;
        kvt_sampler *s = NULL;
        if (kvt_sampler_init(&q, 200, &s, NULL) != KVT_OK) break;
        const int32_t id = kvt_sampler_sample(s, z);
        kvt_sampler_free(s);
        hi = id > hi ? id : hi;
        if (id < 64 && !(seen & ((int64_t)1 << id))) seen |= (int64_t)1 << id, distinct++;
    }
    test_result(hi == 3 && distinct == 4, "sampler: mirostat 1 keeps the k its Zipf estimate gives (llama.cpp's)",
                "highest id %d (want 3), %d distinct (want 4)", hi, distinct);
}

// llama.cpp's adaptive-p over p = (0.6, 0.3, 0.1), target 0.3, decay 0 (the average is the last chosen token's
// probability): the first draw favors the token nearest 0.3 (softmax of 0, 5, 2.33: 0.93); once a 0.1 is chosen the
// target moves to 2 x 0.3 - 0.1 = 0.5, and the 0.6 token leads (softmax of 4.17, 2.33, -2.62: 0.86); once a 0.3 is
// chosen it stays. Draws counted over 3000 seeds.
static void test_sampler_adaptive(void) {
    const float l[3] = {logf(0.6f), logf(0.3f), logf(0.1f)};
    kvt_sampler_params p = kvt_sampler_params_default();
    p.temp = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f;
    p.adaptive_target = 0.3f, p.adaptive_decay = 0.0f;
    int first[3] = {0}, after2[3] = {0}, after1[3] = {0};
    for (int seed = 0; seed < 3000; seed++) {
        p.seed = (uint64_t)seed;
        kvt_sampler *s = NULL;
        if (kvt_sampler_init(&p, 3, &s, NULL) != KVT_OK) break;
        kvt_sampler_accept(s, 1); // a prompt token: no draw pending, the average stays
        const int32_t a = kvt_sampler_sample(s, l);
        kvt_sampler_accept(s, a);
        const int32_t b = kvt_sampler_sample(s, l);
        first[a]++;
        if (a == 2) after2[b]++;
        if (a == 1) after1[b]++;
        kvt_sampler_free(s);
    }
    const double f1 = first[1] / 3000.0, n2 = after2[0] + after2[1] + after2[2], n1 = after1[0] + after1[1] + after1[2];
    test_result(fabs(f1 - 0.93) < 0.03 && n2 > 50 && after2[0] / n2 > 0.78 && after1[1] / n1 > 0.9,
                "sampler: adaptive-p draws near its target, which moves with the chosen tokens' probabilities",
                "first %d %d %d; after a 0.1: %d %d %d; after a 0.3: %d %d %d", first[0], first[1], first[2], after2[0],
                after2[1], after2[2], after1[0], after1[1], after1[2]);
}

// The report of a draw (post-sampling probabilities): greedy, the argmax alone at 1; top-k 5 at temperature 0.7, the 5
// largest logits' softmax at 1/0.7, most likely first (k 3: the first 3 of them), the drawn token's among them.
static void test_sampler_report(void) {
    enum { N = 50 };
    float l[N];
    for (int i = 0; i < N; i++) l[i] = (float)((i * 37) % 23) * 0.25f;
    kvt_sampler_report r = {.k = 3};
    kvt_sampler_params p = kvt_sampler_params_default();
    p.temp = 0, p.report = &r;
    kvt_sampler *s = NULL;
    bool ok = kvt_sampler_init(&p, N, &s, NULL) == KVT_OK && !kvt_sampler_params_bans_only(&p);
    const int32_t g = ok ? kvt_sampler_sample(s, l) : -1;
    ok = ok && g == kvt_argmax(l, N) && r.n == 1 && r.ids[0] == g && r.probs[0] == 1.0f && r.chosen == 1.0f;
    kvt_sampler_free(s);
    p.temp = 0.7f, p.top_k = 5, p.top_p = 1.0f, p.min_p = 0.0f;
    s = NULL;
    ok = ok && kvt_sampler_init(&p, N, &s, NULL) == KVT_OK;
    const int32_t d = ok ? kvt_sampler_sample(s, l) : -1;
    kvt_sampler_free(s);
    // the reference: the 5 largest (ties to the lower id), softmax of logit / 0.7
    int32_t top[5];
    double w[5], tot = 0;
    for (int k = 0; k < 5; k++) {
        int32_t b = -1;
        for (int32_t i = 0; i < N; i++) {
            bool used = false;
            for (int q = 0; q < k; q++) used |= top[q] == i;
            if (!used && (b < 0 || l[i] > l[b])) b = i;
        }
        top[k] = b;
        tot += (w[k] = exp((l[b] - l[top[0]]) / 0.7));
    }
    bool drawn_in = false;
    for (int k = 0; k < 5; k++) drawn_in |= top[k] == d && fabs(r.chosen - w[k] / tot) < 1e-6;
    ok = ok && r.n == 3 && drawn_in;
    for (int k = 0; ok && k < 3; k++) ok = r.ids[k] == top[k] && fabs(r.probs[k] - w[k] / tot) < 1e-6;
    test_result(ok, "sampler: a draw's report (post-sampling probabilities): greedy's argmax at 1, top-k's survivors "
                "renormalized at the temperature, most likely first", "greedy %d, drawn %d, n %d", g, d, r.n);
}

// llama.cpp's min_keep: min-p 0.99, top-p 0.01 and typical-p 0.01 each keep at least min_keep candidates, with top-k
// (the sorted path) and without (every candidate); XTC does not act when it would leave fewer. Seen in the report.
static void test_sampler_min_keep(void) {
    enum { N = 64 };
    float l[N];
    for (int i = 0; i < N; i++) l[i] = (float)((i * 29) % N) * 0.2f; // distinct (29 and 64 coprime)
    static const struct {
        float min_p, top_p, typical;
        int32_t top_k;
    } c[] = {{0.99f, 1.0f, 1.0f, 40}, {0.99f, 1.0f, 1.0f, 0}, {0.0f, 0.01f, 1.0f, 40},
             {0.0f, 0.01f, 1.0f, 0},  {0.0f, 1.0f, 0.01f, 40}, {0.0f, 1.0f, 0.01f, 0}};
    int bad = 0;
    char why[128] = "";
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        for (int32_t keep = 0; keep <= 6; keep += 3) {
            kvt_sampler_report r = {.k = 20};
            kvt_sampler_params p = kvt_sampler_params_default();
            p.temp = 1.0f, p.min_p = c[k].min_p, p.top_p = c[k].top_p, p.typical_p = c[k].typical;
            p.top_k = c[k].top_k, p.min_keep = keep, p.report = &r;
            kvt_sampler *s = NULL;
            if (kvt_sampler_init(&p, N, &s, NULL) != KVT_OK) {
                bad++;
                continue;
            }
            kvt_sampler_sample(s, l);
            kvt_sampler_free(s);
            const int32_t want = keep > 1 ? keep : 1; // (every cut here keeps one alone)
            if (r.n != want) {
                bad++;
                snprintf(why, sizeof why, "case %zu min_keep %d: %d kept", k, keep, r.n);
            }
        }
    }
    kvt_sampler_report r = {.k = 20};
    kvt_sampler_params p = kvt_sampler_params_default();
    p.temp = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.report = &r;
    p.xtc_probability = 1.0f, p.xtc_threshold = 0.001f, p.min_keep = N; // it would leave N - (those above) < N
    kvt_sampler *s = NULL;
    if (kvt_sampler_init(&p, N, &s, NULL) == KVT_OK) {
        kvt_sampler_sample(s, l);
        kvt_sampler_free(s);
    }
    test_result(bad == 0 && r.n == 20, "sampler: min_keep keeps at least that many through top-p, min-p, typical-p "
                "(with top-k and without) and stops XTC", "%d wrong; %s; XTC kept %d", bad, why, r.n);
}

void test_dry_all(void); // test_dry.c

// A grammar in the chain (sampler.h): over a vocabulary of 8 texts, the draws follow the grammar to its end and then
// the end-of-generation token; greedy picks the likeliest allowed token (the same as the full mask's draw, whichever
// path found it), a sampled draw never a refused one; a ban on every allowed token leaves the grammar's pick (the
// end outranks ignore_eos's ban); a grammar the vocabulary cannot continue fails with a status.
static void test_sampler_grammar(void) {
    enum { N = 8, EOG = 7 };
    const char *const pieces[N] = {"a", "b", "ab", "{", "}", "x", "\xc3", ""}; // 6: half of a 2-byte character
    size_t lens[N];
    bool eog[N] = {0};
    eog[EOG] = true;
    for (int i = 0; i < N; i++) lens[i] = strlen(pieces[i]);
    kvt_grammar_vocab *v = NULL;
    kvt_grammar *g = NULL, *g2 = NULL;
    const char *src = "root ::= \"{\" [ab]+ \"}\"", *src2 = "root ::= \"\xc3\xa9\"";
    if (kvt_grammar_vocab_init(N, pieces, lens, eog, &v, NULL) ||
        kvt_grammar_parse(src, strlen(src), NULL, NULL, &g, NULL) ||
        kvt_grammar_parse(src2, strlen(src2), NULL, NULL, &g2, NULL)) {
        test_result(false, "sampler.grammar: the grammars compile", "");
        kvt_grammar_vocab_free(v);
        kvt_grammar_free(g);
        return;
    }
    // x is always the likeliest, refused everywhere; } second, allowed once a letter is in
    const float logits[N] = {1.0f, 0.5f, 0.8f, 0.2f, 2.0f, 3.0f, 0.1f, 0.0f};
    kvt_sampler_params p = kvt_sampler_params_default();
    p.temp = 0;
    p.grammar = g;
    p.grammar_vocab = v;
    kvt_sampler *s;
    int32_t ids[8] = {0}, n = 0;
    bool ok = !kvt_sampler_init(&p, N, &s, NULL);
    for (; ok && n < 4; n++) ok = !kvt_sampler_draw(s, logits, &ids[n], NULL);
    test_result(ok && ids[0] == 3 && ids[1] == 0 && ids[2] == 4 && ids[3] == EOG,
                "sampler.grammar: greedy follows the grammar to its end, then the end-of-generation token",
                "ids %d %d %d %d", ids[0], ids[1], ids[2], ids[3]);
    kvt_sampler_free(s);
    // sampled, many seeds: only allowed tokens, every answer a sentence of the grammar
    int bad = 0;
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        p.seed = seed;
        char text[64] = "";
        int32_t id = -1;
        if (kvt_sampler_init(&p, N, &s, NULL)) {
            bad++;
            continue;
        }
        for (int k = 0; k < 40 && id != EOG; k++) {
            if (kvt_sampler_draw(s, logits, &id, NULL)) break;
            if (id != EOG) strncat(text, pieces[id], sizeof text - strlen(text) - 1);
        }
        bool complete = false;
        kvt_grammar_match(g, text, strlen(text), &complete, NULL);
        bad += !(complete && id == EOG) && strlen(text) < sizeof text - 2;
        kvt_sampler_free(s);
    }
    test_result(bad == 0, "sampler.grammar: sampled answers are sentences of the grammar, ended by EOG",
                "%d of 200 seeds", bad);
    // the grammar complete and every end-of-generation token banned (ignore_eos): the end still wins
    kvt_logit_bias ban = {EOG, -INFINITY};
    p.temp = 0;
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    ok = !kvt_sampler_init(&p, N, &s, NULL);
    n = 0;
    for (; ok && n < 4; n++) ok = !kvt_sampler_draw(s, logits, &ids[n], NULL);
    test_result(ok && ids[2] == 4 && ids[3] == EOG, "sampler.grammar: a ban on every allowed token leaves the grammar's end",
                "ok %d, ids %d %d %d %d", ok, ids[0], ids[1], ids[2], ids[3]);
    kvt_sampler_free(s);
    // a character no token can complete: half of it is allowed, then no token continues: a status, named
    p.grammar = g2;
    p.n_logit_bias = 0;
    kvt_err err = {0};
    ok = !kvt_sampler_init(&p, N, &s, NULL) && !kvt_sampler_draw(s, logits, &ids[0], &err) && ids[0] == 6;
    kvt_status st = ok ? kvt_sampler_draw(s, logits, &ids[1], &err) : KVT_OK;
    test_result(ok && st == KVT_ERR_INVALID_ARG && ids[1] == -1 && strstr(err.msg, "no token"),
                "sampler.grammar: a grammar the vocabulary cannot continue fails the draw, named", "ok %d st %d: %s", ok,
                (int)st, err.msg);
    kvt_sampler_free(s);
    kvt_grammar_free(g);
    kvt_grammar_free(g2);
    kvt_grammar_vocab_free(v);
}

void test_sampler(const test_env *env) {
    (void)env;
    test_sampler_grammar();
    test_dry_all();
    test_sampler_adaptive();
    test_sampler_report();
    test_sampler_min_keep();
    test_sampler_mirostat();
    test_sampler_typical_ref();
    test_sampler_ban_wins();
    test_sampler_top_n_sigma();
    test_sampler_typical();
    test_sampler_xtc_dynatemp();
    enum { N = 100 };
    float logits[N];
    for (int i = 0; i < N; i++) logits[i] = (float)(i % 17) * 0.1f;
    logits[42] = 5.0f;
    kvt_sampler_params p = kvt_sampler_params_default();
    p.temp = 0;
    kvt_sampler *s;
    kvt_sampler_init(&p, N, &s, NULL);
    test_result(kvt_sampler_sample(s, logits) == 42, "sampler: greedy picks argmax", "");
    kvt_sampler_free(s);
    // top-k 1 at any temperature is greedy
    p.temp = 1.5f;
    p.top_k = 1;
    kvt_sampler_init(&p, N, &s, NULL);
    bool ok = true;
    for (int i = 0; i < 50; i++) ok &= kvt_sampler_sample(s, logits) == 42;
    test_result(ok, "sampler: top-k 1 is greedy", "");
    kvt_sampler_free(s);
    // same seed, same draws; the draws follow the distribution roughly
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.temp = 1.0f;
    float two[2] = {0.0f, logf(3.0f)}; // p = 0.25 / 0.75
    kvt_sampler *a, *b;
    kvt_sampler_init(&p, 2, &a, NULL);
    kvt_sampler_init(&p, 2, &b, NULL);
    int same = 1, ones = 0;
    for (int i = 0; i < 4000; i++) {
        int x = kvt_sampler_sample(a, two), y = kvt_sampler_sample(b, two);
        same &= x == y;
        ones += x;
    }
    test_result(same, "sampler: deterministic for a seed", "");
    test_result(fabs(ones / 4000.0 - 0.75) < 0.03, "sampler: draws follow softmax", "P(1) = %.3f, want 0.75", ones / 4000.0);
    kvt_sampler_free(a);
    kvt_sampler_free(b);
    // min-p removes the unlikely token entirely
    p.min_p = 0.5f;
    kvt_sampler_init(&p, 2, &a, NULL);
    ok = true;
    for (int i = 0; i < 500; i++) ok &= kvt_sampler_sample(a, two) == 1;
    test_result(ok, "sampler: min-p filters", "");
    kvt_sampler_free(a);
    // repetition penalty turns the winner around
    p = kvt_sampler_params_default();
    p.temp = 0;
    p.repeat_penalty = 4.0f;
    float pen[2] = {1.0f, 2.0f};
    kvt_sampler_init(&p, 2, &a, NULL);
    kvt_sampler_accept(a, 1);
    test_result(kvt_sampler_sample(a, pen) == 0, "sampler: repetition penalty", "");
    kvt_sampler_free(a);
    test_sampler_cuts();
    test_sampler_penalties();
    test_sampler_extremes();
}
