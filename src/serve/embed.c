// embed.c - pooling, normalisation and the embedder (embed.h).
#include "embed.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const k_pool_names[] = {"none", "mean", "cls", "last"};

bool kvt_pooling_parse(const char *name, kvt_pooling *out) {
    for (int i = 0; i < 4; i++) {
        if (name && !strcmp(name, k_pool_names[i])) {
            *out = (kvt_pooling)i;
            return true;
        }
    }
    return false;
}

const char *kvt_pooling_name(kvt_pooling p) { return (unsigned)p < 4 ? k_pool_names[p] : "?"; }

kvt_status kvt_embd_pooling_choose(const kvt_gguf *g, const kvt_pooling *given, kvt_pooling *out, bool *from_gguf,
                                   kvt_err *err) {
    if (from_gguf) *from_gguf = false;
    if (given) {
        *out = *given;
        return KVT_OK;
    }
    *out = KVT_POOL_MEAN;
    kvt_str arch = {NULL, 0};
    if (kvt_gguf_get_str(g, "general.architecture", &arch, NULL) || arch.len > 64) return KVT_OK; // no key to read
    char key[96];
    snprintf(key, sizeof key, "%.*s.pooling_type", (int)arch.len, arch.ptr);
    int64_t v = 0;
    kvt_err ge = {0};
    kvt_status st = kvt_gguf_get_i64(g, key, &v, &ge);
    if (st == KVT_ERR_NOT_FOUND) return KVT_OK;
    if (st) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s (the pooling type: 0 none, 1 mean, 2 cls, 3 last); --pooling "
                          "overrides it", ge.msg); // ge names the file, the key and the types
    }
    // llama.cpp's numbering (0 none, 1 mean, 2 cls, 3 last, 4 rank) -> kvt_pooling
    static const kvt_pooling k_from_llama[] = {KVT_POOL_NONE, KVT_POOL_MEAN, KVT_POOL_CLS, KVT_POOL_LAST};
    if (v == 4) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "%s: metadata '%s' = 4 (rank) asks for a reranking head, which "
                          "kvtier does not have; --pooling mean, cls, last or none overrides it", kvt_gguf_path(g),
                          key);
    }
    if (v < 0 || v > 3) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: metadata '%s' = %lld is not a pooling type (0 none, 1 mean, 2 cls, "
                          "3 last, 4 rank); --pooling overrides it", kvt_gguf_path(g), key, (long long)v);
    }
    *out = k_from_llama[v];
    if (from_gguf) *from_gguf = true;
    return KVT_OK;
}

void kvt_embd_pool(kvt_pooling p, const float *h, int64_t n, int64_t E, float *out) {
    if (p == KVT_POOL_CLS) {
        memcpy(out, h, (size_t)E * sizeof *out);
        return;
    }
    if (p != KVT_POOL_MEAN) {
        memcpy(out, h + (n - 1) * E, (size_t)E * sizeof *out);
        return;
    }
    for (int64_t j = 0; j < E; j++) {
        double s = 0.0;
        for (int64_t t = 0; t < n; t++) s += h[t * E + j];
        out[j] = (float)(s / (double)n);
    }
}

bool kvt_embd_normalize(const float *in, float *out, int64_t E, int norm) {
    if (norm < -1) return false;
    double sum = 0.0;
    if (norm == -1) {
        sum = 1.0;
    } else if (norm == 0) {
        for (int64_t i = 0; i < E; i++) sum = fabs(in[i]) > sum ? fabs(in[i]) : sum;
        sum /= 32760.0;
    } else if (norm == 2) {
        for (int64_t i = 0; i < E; i++) sum += (double)in[i] * in[i];
        sum = sqrt(sum);
    } else {
        for (int64_t i = 0; i < E; i++) sum += pow(fabs(in[i]), norm);
        sum = pow(sum, 1.0 / norm);
    }
    const float scale = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
    for (int64_t i = 0; i < E; i++) out[i] = in[i] * scale;
    return true;
}

struct kvt_embedder {
    kvt_context *ctx;
    kvt_pooling pooling;
    int64_t n_embd;
    pthread_mutex_t mu;
    float *rows;      // [cap_rows, n_embd] the last request's hidden states (under mu)
    int64_t cap_rows;
};

kvt_status kvt_embedder_create(const kvt_model *m, const kvt_context_params *cp, kvt_pooling pooling,
                               kvt_embedder **out, kvt_err *err) {
    *out = NULL;
    kvt_context_params p = kvt_context_params_default();
    p.n_ctx = cp->n_ctx;
    p.n_threads = cp->n_threads;
    if (cp->n_ubatch > 0) p.n_ubatch = cp->n_ubatch;
    p.kv_type = cp->kv_type;
    kvt_embedder *e = calloc(1, sizeof *e);
    if (!e) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the embedder");
    kvt_status st = kvt_context_init(m, &p, &e->ctx, err);
    if (st) {
        free(e);
        return st;
    }
    e->pooling = pooling;
    e->n_embd = m->hp.n_embd;
    pthread_mutex_init(&e->mu, NULL);
    *out = e;
    return KVT_OK;
}

void kvt_embedder_free(kvt_embedder *e) {
    if (!e) return;
    kvt_context_free(e->ctx);
    pthread_mutex_destroy(&e->mu);
    free(e->rows);
    free(e);
}

kvt_pooling kvt_embedder_pooling(const kvt_embedder *e) { return e->pooling; }
int64_t kvt_embedder_n_embd(const kvt_embedder *e) { return e->n_embd; }
int64_t kvt_embedder_n_ctx(const kvt_embedder *e) { return kvt_context_n_ctx(e->ctx); }

kvt_status kvt_embedder_run(kvt_embedder *e, const int32_t *tokens, int64_t n, int norm, float *out,
                            kvt_cancel_fn cancel, void *cancel_user, kvt_err *err) {
    if (n < 1) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "the input has no tokens");
    if (norm < -1) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "embd_normalize %d: need -1 (none), 0, 2 or p > 0", norm);
    }
    if (n > kvt_embedder_n_ctx(e)) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "the input has %lld tokens; the context holds %lld", (long long)n,
                          (long long)kvt_embedder_n_ctx(e));
    }
    const int64_t E = e->n_embd;
    if (!cancel) {
        pthread_mutex_lock(&e->mu);
    } else { // behind another request: ask cancel every 50 ms while waiting
        for (;;) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            if (!pthread_mutex_timedlock(&e->mu, &ts)) break;
            if (cancel(cancel_user)) return kvt_errorf(err, KVT_ERR_CANCELLED, "embeddings cancelled while waiting");
        }
    }
    kvt_status st = KVT_OK;
    float *rows = out; // pooling none: the rows are the result
    if (e->pooling != KVT_POOL_NONE) {
        if (n > e->cap_rows) {
            float *r = realloc(e->rows, (size_t)(n * E) * sizeof *r);
            if (!r) {
                st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for %lld x %lld hidden states", (long long)n,
                                (long long)E);
            } else {
                e->rows = r, e->cap_rows = n;
            }
        }
        rows = e->rows;
    }
    if (!st) st = kvt_decode_embd(e->ctx, 0, tokens, n, rows, cancel, cancel_user, err);
    if (!st && e->pooling != KVT_POOL_NONE) {
        kvt_embd_pool(e->pooling, rows, n, E, out);
        kvt_embd_normalize(out, out, E, norm);
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}
