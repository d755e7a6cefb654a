#include "sampler.h"

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
    int32_t *hist;    // ring buffer of the last penalty_last_n tokens
    int64_t n_hist;
    uint64_t rng;
};

kvt_sampler_params kvt_sampler_params_default(void) {
    kvt_sampler_params p = {0.8f, 40, 0.95f, 0.05f, 1.0f, 64, 0x5eed};
    return p;
}

kvt_status kvt_sampler_init(const kvt_sampler_params *p, int32_t n_vocab, kvt_sampler **out, kvt_err *err) {
    *out = NULL;
    if (n_vocab <= 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sampler needs a vocabulary");
    kvt_sampler *s = calloc(1, sizeof *s);
    if (!s) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    s->p = *p;
    if (s->p.penalty_last_n < 0) s->p.penalty_last_n = 0;
    s->n_vocab = n_vocab;
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->hist = malloc((size_t)(s->p.penalty_last_n + 1) * sizeof *s->hist);
    if (!s->c || !s->hist) {
        kvt_sampler_free(s);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    }
    s->rng = p->seed * 0x9E3779B97F4A7C15ull + 1;
    *out = s;
    return KVT_OK;
}

void kvt_sampler_free(kvt_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->hist);
    free(s);
}

void kvt_sampler_accept(kvt_sampler *s, int32_t token) {
    if (s->p.penalty_last_n == 0) return;
    s->hist[s->n_hist % s->p.penalty_last_n] = token;
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

static int cmp_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? 1 : -1;
    return x->id - y->id;
}

int32_t kvt_sampler_sample(kvt_sampler *s, const float *logits) {
    const int32_t n = s->n_vocab;
    for (int32_t i = 0; i < n; i++) s->c[i] = (cand){i, logits[i]};
    // repetition penalty (llama.cpp convention: divide positive, multiply negative)
    if (s->p.repeat_penalty != 1.0f && s->p.penalty_last_n > 0) {
        int64_t k = s->n_hist < s->p.penalty_last_n ? s->n_hist : s->p.penalty_last_n;
        for (int64_t i = 0; i < k; i++) {
            int32_t t = s->hist[i];
            if (t < 0 || t >= n) continue;
            float *v = &s->c[t].v;
            // apply once per distinct token
            bool dup = false;
            for (int64_t j = 0; j < i; j++) dup |= s->hist[j] == t;
            if (dup) continue;
            *v = *v > 0 ? *v / s->p.repeat_penalty : *v * s->p.repeat_penalty;
        }
    }
    if (s->p.temp <= 0.0f) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++) {
            if (s->c[i].v > s->c[best].v) best = i;
        }
        return best;
    }
    int32_t m = n;
    if (s->p.top_k > 0 && s->p.top_k < m) m = s->p.top_k;
    // partial order: sort all (vocabularies are <= ~256k; a sort per token is cheap next to the forward pass)
    qsort(s->c, (size_t)n, sizeof *s->c, cmp_desc);
    // softmax over the kept candidates
    double sum = 0.0;
    const float mx = s->c[0].v;
    for (int32_t i = 0; i < m; i++) {
        s->c[i].v = expf(s->c[i].v - mx);
        sum += s->c[i].v;
    }
    for (int32_t i = 0; i < m; i++) s->c[i].v = (float)(s->c[i].v / sum);
    if (s->p.top_p < 1.0f) {
        double cum = 0.0;
        for (int32_t i = 0; i < m; i++) {
            cum += s->c[i].v;
            if (cum >= s->p.top_p) {
                m = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0.0f) {
        const float thr = s->c[0].v * s->p.min_p;
        int32_t k = 1;
        while (k < m && s->c[k].v >= thr) k++;
        m = k;
    }
    // temperature on the survivors: p_i ^ (1/T) renormalised == softmax(logit/T)
    double tot = 0.0;
    for (int32_t i = 0; i < m; i++) {
        s->c[i].v = (float)pow(s->c[i].v, 1.0 / s->p.temp);
        tot += s->c[i].v;
    }
    double r = next_uniform(s) * tot, acc = 0.0;
    for (int32_t i = 0; i < m; i++) {
        acc += s->c[i].v;
        if (r < acc) return s->c[i].id;
    }
    return s->c[m - 1].id;
}
