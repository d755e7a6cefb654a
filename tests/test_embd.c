// test_embd.c - embeddings (src/serve/embed.h, kvt_decode_embd): pooling and normalisation against a plain reference,
// the hidden states as the LM head's input, their independence of n_ubatch, the thread count and the sequence's
// state, and the embedder's errors.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/exec/context.h"
#include "../src/gguf/gguf.h"
#include "../src/kernels/quant.h"
#include "../src/model/model.h"
#include "../src/serve/embed.h"
#include "test.h"

// The reference: each case written out on its own, sums in long double.
static void ref_pool_norm(kvt_pooling p, const float *h, int64_t n, int64_t E, int norm, long double *out) {
    for (int64_t j = 0; j < E; j++) {
        if (p == KVT_POOL_CLS) out[j] = h[j];
        else if (p == KVT_POOL_LAST) out[j] = h[(n - 1) * E + j];
        else {
            long double s = 0;
            for (int64_t t = 0; t < n; t++) s += h[t * E + j];
            out[j] = s / n;
        }
    }
    long double d = 0;
    for (int64_t j = 0; j < E; j++) {
        const long double a = fabsl(out[j]);
        if (norm == 0) d = a > d ? a : d;
        else if (norm > 0) d += powl(a, norm);
    }
    if (norm == -1) d = 1;
    else if (norm == 0) d /= 32760;
    else d = powl(d, 1.0L / norm);
    for (int64_t j = 0; j < E; j++) out[j] = d > 0 ? out[j] / d : 0;
}

static void test_pool(void) {
    enum { N = 7, E = 33 };
    float h[N * E], out[E];
    uint64_t s = 12345;
    for (int i = 0; i < N * E; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        h[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 8.0 - 4.0);
    }
    const kvt_pooling pools[3] = {KVT_POOL_MEAN, KVT_POOL_CLS, KVT_POOL_LAST};
    const int norms[5] = {-1, 0, 1, 2, 3};
    double worst = 0;
    bool ok = true;
    for (int pi = 0; pi < 3; pi++) {
        for (int ni = 0; ni < 5; ni++) {
            long double ref[E];
            ref_pool_norm(pools[pi], h, N, E, norms[ni], ref);
            kvt_embd_pool(pools[pi], h, N, E, out);
            ok = ok && kvt_embd_normalize(out, out, E, norms[ni]);
            for (int j = 0; j < E; j++) {
                const double rel = fabs((double)(out[j] - ref[j])) / fmax(1e-30, fabs((double)ref[j]));
                worst = fmax(worst, rel);
            }
        }
    }
    test_result(ok && worst < 1e-6, "embd: mean/cls/last pooling, normalisation -1/0/1/2/3 = the reference",
                "max relative difference %.3g", worst);
    float z[E] = {0}, zo[E];
    kvt_embd_normalize(z, zo, E, 2);
    bool zero = true;
    for (int j = 0; j < E; j++) zero = zero && zo[j] == 0.0f;
    kvt_pooling p;
    test_result(zero && !kvt_embd_normalize(h, out, E, -2) && kvt_pooling_parse("mean", &p) && p == KVT_POOL_MEAN &&
                    kvt_pooling_parse("none", &p) && p == KVT_POOL_NONE && !kvt_pooling_parse("max", &p),
                "embd: a zero vector stays zero, norm -2 and pooling 'max' are refused", "wrong");
}

// Hidden states of prompt (n tokens) on a fresh context with n_threads / n_ubatch, after `pre` tokens of seq 0.
static kvt_status hidden(const kvt_model *m, int threads, int64_t ub, const int32_t *prompt, int64_t n, int64_t pre,
                         float *h, kvt_err *err) {
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 64;
    cp.n_threads = threads;
    cp.n_ubatch = ub;
    kvt_context *c = NULL;
    kvt_status st = kvt_context_init(m, &cp, &c, err);
    if (!st && pre > 0) st = kvt_decode(c, prompt, pre, false, err);
    if (!st) st = kvt_decode_embd(c, 0, prompt, n, h, NULL, NULL, err);
    if (!st && kvt_context_n_past(c) != pre) st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "n_past changed");
    kvt_context_free(c);
    return st;
}

// A cancel check that answers false `k` times, then true; counts its calls.
typedef struct {
    int k, calls;
} cancel_after;

static bool cancel_after_fn(void *user) {
    cancel_after *ca = user;
    return ca->calls++ >= ca->k;
}

static void test_model(const char *path) {
    const char *name = "embd: hidden states x output matrix = the logits (stories260K, F32)";
    kvt_model *m = NULL;
    kvt_err err = {0};
    if (kvt_model_load(path, false, &m, &err)) {
        test_result(false, name, "%s", err.msg);
        return;
    }
    enum { N = 20 };
    const int64_t E = m->hp.n_embd, V = m->hp.n_vocab;
    int32_t prompt[N];
    for (int i = 0; i < N; i++) prompt[i] = 1 + (i * 37) % (int32_t)(V - 1);
    float *h = malloc((size_t)(N * E) * sizeof *h), *h2 = malloc((size_t)(N * E) * sizeof *h2);
    float *row = malloc((size_t)E * sizeof *row), *logits = malloc((size_t)(N * V) * sizeof *logits);
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    kvt_context *c = NULL;
    kvt_status st = kvt_context_init(m, &cp, &c, &err);
    if (!st) st = kvt_decode_embd(c, 0, prompt, N, h, NULL, NULL, &err);
    if (!st) st = kvt_decode(c, prompt, N, true, &err);
    if (!st) memcpy(logits, kvt_context_logits(c), (size_t)(N * V) * sizeof *logits);
    double md = 0, mx = 1e-30;
    for (int64_t t = 0; !st && t < N; t++) {
        for (int64_t v = 0; v < V; v++) {
            kvt_matrix_row_to_float(m->output.type, m->output.data, v, E, row);
            double d = 0;
            for (int64_t j = 0; j < E; j++) d += (double)row[j] * h[t * E + j];
            md = fmax(md, fabs(d - logits[t * V + v]));
            mx = fmax(mx, fabs((double)logits[t * V + v]));
        }
    }
    test_result(!st && md <= 1e-4 * mx, name, "%s (max diff %.3g of %.3g)", st ? err.msg : "", md, mx);

    // invariance: 1 or 2 threads, micro-batches of 3 or 64, with 5 tokens of the sequence before it or none (then
    // positions differ: compare the prefix case against itself across threads / micro-batches only)
    name = "embd: the rows do not depend on n_ubatch, the thread count or an earlier call (bit for bit)";
    bool same = !st;
    kvt_err e2 = {0};
    kvt_status s2 = KVT_OK;
    if (same) s2 = hidden(m, 1, 3, prompt, N, 0, h2, &e2);
    same = same && !s2 && !memcmp(h, h2, (size_t)(N * E) * sizeof *h);
    float *h3 = malloc((size_t)(N * E) * sizeof *h3);
    if (same && !(s2 = hidden(m, 2, 64, prompt, N, 5, h2, &e2)) && !(s2 = hidden(m, 1, 4, prompt, N, 5, h3, &e2)))
        same = !memcmp(h2, h3, (size_t)(N * E) * sizeof *h);
    else same = false;
    if (same) { // the call left the sequence as it was: a second call gives the same rows
        s2 = kvt_decode_embd(c, 0, prompt, N, h2, NULL, NULL, &e2);
        s2 = s2 ? s2 : kvt_decode_embd(c, 0, prompt, N, h3, NULL, NULL, &e2);
        same = !s2 && !memcmp(h2, h3, (size_t)(N * E) * sizeof *h);
    }
    test_result(same, name, "%s", s2 ? e2.msg : "rows differ");
    free(h3);

    name = "embd: the embedder pools, normalises, refuses 0 tokens and a prompt over n_ctx";
    kvt_embedder *em = NULL;
    cp.n_ctx = 16;
    bool ok = !kvt_embedder_create(m, &cp, KVT_POOL_MEAN, &em, &err);
    float *out = malloc((size_t)E * sizeof *out), *ref = malloc((size_t)E * sizeof *ref);
    ok = ok && !kvt_embedder_run(em, prompt, 10, 2, out, NULL, NULL, &err);
    if (ok) { // the same as pooling the context's own rows
        ok = !hidden(m, 2, 512, prompt, 10, 0, h2, &err);
        kvt_embd_pool(KVT_POOL_MEAN, h2, 10, E, ref);
        kvt_embd_normalize(ref, ref, E, 2);
        ok = ok && !memcmp(out, ref, (size_t)E * sizeof *out);
    }
    ok = ok && kvt_embedder_run(em, prompt, 0, 2, out, NULL, NULL, &err) == KVT_ERR_INVALID_ARG;
    ok = ok && kvt_embedder_run(em, prompt, 17, 2, out, NULL, NULL, &err) == KVT_ERR_BUDGET;
    ok = ok && kvt_embedder_run(em, prompt, 16, 2, out, NULL, NULL, &err) == KVT_OK;
    test_result(ok, name, "%s", err.msg);
    kvt_embedder_free(em);

    // cancel: asked before each micro-batch (4 tokens: 5 of them); after k answers of false it stops the call
    name = "embd: a cancel check stops kvt_decode_embd / the embedder at a micro-batch boundary; the next call's "
           "bits are a fresh context's";
    ok = true;
    char why[600] = "";
    cp.n_ctx = 64;
    cp.n_ubatch = 4;
    kvt_context *c4 = NULL;
    if (kvt_context_init(m, &cp, &c4, &err)) ok = false, snprintf(why, sizeof why, "%.500s", err.msg);
    for (int k = 0; ok && k < 5; k++) {
        cancel_after ca = {k, 0};
        kvt_status cs = kvt_decode_embd(c4, 0, prompt, N, h2, cancel_after_fn, &ca, &err);
        if (cs != KVT_ERR_CANCELLED || ca.calls != k + 1 || kvt_context_n_past(c4) != 0) {
            snprintf(why, sizeof why, "k %d: status %d, %d calls, n_past %lld", k, (int)cs, ca.calls,
                     (long long)kvt_context_n_past(c4));
            ok = false;
        } else if ((cs = kvt_decode_embd(c4, 0, prompt, N, h2, NULL, NULL, &err)) ||
                   memcmp(h, h2, (size_t)(N * E) * sizeof *h)) {
            snprintf(why, sizeof why, "k %d: the next call differs from a fresh context's (%d)", k, (int)cs);
            ok = false;
        }
    }
    cancel_after never = {1000, 0};
    if (ok && (kvt_decode_embd(c4, 0, prompt, N, h2, cancel_after_fn, &never, &err) || never.calls != 5)) {
        snprintf(why, sizeof why, "a check that never cancels: %d calls (want 5)", never.calls);
        ok = false;
    }
    kvt_context_free(c4);
    cp.n_ctx = 16;
    em = NULL;
    float *fresh = malloc((size_t)E * sizeof *fresh);
    ok = ok && !kvt_embedder_create(m, &cp, KVT_POOL_MEAN, &em, &err) &&
         !kvt_embedder_run(em, prompt, 14, 2, fresh, NULL, NULL, &err);
    kvt_embedder_free(em);
    em = NULL;
    ok = ok && !kvt_embedder_create(m, &cp, KVT_POOL_MEAN, &em, &err);
    cancel_after one = {2, 0};
    if (ok && kvt_embedder_run(em, prompt, 14, 2, out, cancel_after_fn, &one, &err) != KVT_ERR_CANCELLED) {
        snprintf(why, sizeof why, "the embedder did not stop: %.500s", err.msg);
        ok = false;
    }
    if (ok && (kvt_embedder_run(em, prompt, 14, 2, out, NULL, NULL, &err) || memcmp(out, fresh, (size_t)E * 4))) {
        snprintf(why, sizeof why, "the embedder's next result differs from a fresh one's");
        ok = false;
    }
    test_result(ok, name, "%s", why);
    kvt_embedder_free(em);
    free(fresh);
    free(out), free(ref);
    kvt_context_free(c);
    free(h), free(h2), free(row), free(logits);
    kvt_model_free(m);
}

// A metadata-only GGUF at path: general.architecture = arch (NULL: none) and, by kind, "<arch>.pooling_type"
// 'u' u32 v, 'i' i32 v, 's' the string "mean", 0 absent. Then kvt_embd_pooling_choose on it.
static kvt_status choose_from(const char *path, const char *arch, char kind, int64_t v, const kvt_pooling *given,
                              kvt_pooling *out, bool *from_gguf, kvt_err *err) {
    kvt_gguf_writer *w = kvt_gguf_writer_init();
    char key[64];
    snprintf(key, sizeof key, "%s.pooling_type", arch ? arch : "llama");
    if (arch) kvt_gguf_writer_set_str(w, "general.architecture", arch);
    if (kind == 'u') kvt_gguf_writer_set_u32(w, key, (uint32_t)v);
    if (kind == 'i') kvt_gguf_writer_set_i32(w, key, (int32_t)v);
    if (kind == 's') kvt_gguf_writer_set_str(w, key, "mean");
    kvt_status st = kvt_gguf_writer_write(w, path, err);
    kvt_gguf_writer_free(w);
    kvt_gguf *g = NULL;
    if (!st) st = kvt_gguf_open(path, &g, err);
    if (!st) st = kvt_embd_pooling_choose(g, given, out, from_gguf, err);
    kvt_gguf_free(g);
    return st;
}

// The default pooling from the GGUF's <arch>.pooling_type (llama.cpp's numbering), mean without it, --pooling first.
static void test_pooling_default(void) {
    const char *name = "embd: default pooling = the GGUF's pooling_type (none/mean/cls/last), mean without the key, "
                       "--pooling wins";
    char path[64];
    snprintf(path, sizeof path, "/tmp/kvt_test_embd_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) {
        test_result(false, name, "mkstemp failed");
        return;
    }
    close(fd);
    struct {
        const char *arch;
        char kind;
        int64_t v;
        kvt_pooling want;
        bool from;
    } ok_cases[] = {{"bert", 'u', 0, KVT_POOL_NONE, true},   {"bert", 'u', 1, KVT_POOL_MEAN, true},
                    {"bert", 'u', 2, KVT_POOL_CLS, true},    {"qwen3", 'u', 3, KVT_POOL_LAST, true},
                    {"llama", 'i', 2, KVT_POOL_CLS, true},   {"llama", 0, 0, KVT_POOL_MEAN, false},
                    {NULL, 'u', 2, KVT_POOL_MEAN, false}};
    char why[1024] = "";
    bool ok = true;
    kvt_err err = {0};
    for (size_t i = 0; ok && i < sizeof ok_cases / sizeof ok_cases[0]; i++) {
        kvt_pooling p = KVT_POOL_MEAN;
        bool from = !ok_cases[i].from;
        kvt_status st = choose_from(path, ok_cases[i].arch, ok_cases[i].kind, ok_cases[i].v, NULL, &p, &from, &err);
        if (st || p != ok_cases[i].want || from != ok_cases[i].from) {
            snprintf(why, sizeof why, "case %zu: status %d, pooling %s, from_gguf %d (%.600s)", i, (int)st,
                     kvt_pooling_name(p), (int)from, err.msg);
            ok = false;
        }
    }
    const kvt_pooling given[] = {KVT_POOL_NONE, KVT_POOL_MEAN, KVT_POOL_LAST}; // over cls, rank and a bad value
    const int64_t vals[] = {2, 4, 99};
    for (int i = 0; ok && i < 3; i++) {
        kvt_pooling p = KVT_POOL_CLS;
        bool from = true;
        kvt_status st = choose_from(path, "bert", 'u', vals[i], &given[i], &p, &from, &err);
        if (st || p != given[i] || from) {
            snprintf(why, sizeof why, "--pooling %s over %lld: status %d, pooling %s", kvt_pooling_name(given[i]),
                     (long long)vals[i], (int)st, kvt_pooling_name(p));
            ok = false;
        }
    }
    test_result(ok, name, "%s", why);

    name = "embd: pooling_type 4 (rank), 99, -1 or a string: an error naming the file and the key";
    struct {
        char kind;
        int64_t v;
        kvt_status want;
    } bad[] = {{'u', 4, KVT_ERR_UNSUPPORTED}, {'u', 99, KVT_ERR_FORMAT}, {'i', -1, KVT_ERR_FORMAT},
               {'s', 0, KVT_ERR_FORMAT}};
    ok = true;
    for (size_t i = 0; ok && i < sizeof bad / sizeof bad[0]; i++) {
        kvt_pooling p = KVT_POOL_MEAN;
        memset(&err, 0, sizeof err);
        kvt_status st = choose_from(path, "bert", bad[i].kind, bad[i].v, NULL, &p, NULL, &err);
        if (st != bad[i].want || !strstr(err.msg, path) || !strstr(err.msg, "bert.pooling_type") ||
            (bad[i].v == 4 && !strstr(err.msg, "rank")) || !strstr(err.msg, "--pooling")) {
            snprintf(why, sizeof why, "case %zu: status %d (want %d): \"%.600s\"", i, (int)st, (int)bad[i].want,
                     err.msg);
            ok = false;
        }
    }
    test_result(ok, name, "%s", why);
    unlink(path);
}

void test_embd(const test_env *env) {
    test_pool();
    test_pooling_default();
    char path[512];
    if (!test_data(env, "stories260K.gguf", path, sizeof path)) {
        test_skip("embd: model", test_data_missing(env, "stories260K.gguf"));
        return;
    }
    test_model(path);
}
