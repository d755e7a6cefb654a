// test_batch.c - batched decode across sequences (kvt_decode_batch) against
// decoding each sequence on its own (kvt_decode_seq), on the paged store.
// Bit for bit: every matmul path sums a row the same way whatever the rows beside it, and attention's
// chunking depends on positions only (issue 11 section 6; tests/test_determ.c).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/exec/context.h"
#include "../src/model/model.h"
#include "test.h"

enum { N_SEQ = 4, N_PROMPT = 24, N_STEP = 6 };

// Prefills seq 0 with the prompt, forks N_SEQ - 1 sequences, then decodes N_STEP tokens in every
// sequence (token of sequence i at step j: a fixed function of i and j), batched or one by one.
// logits: [N_STEP, N_SEQ, n_vocab].
static kvt_status run(const kvt_model *m, const kvt_context_params *cp, bool batched, float *logits, kvt_err *err) {
    const int32_t V = m->hp.n_vocab;
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(m, cp, &ctx, err);
    if (st) return st;
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = 1 + (i * 37) % (V - 1);
    st = kvt_decode(ctx, prompt, N_PROMPT, false, err);
    int32_t seqs[N_SEQ] = {0};
    for (int i = 1; !st && i < N_SEQ; i++) st = kvt_context_seq_fork(ctx, 0, &seqs[i], err);
    for (int j = 0; !st && j < N_STEP; j++) {
        int32_t tok[N_SEQ];
        for (int i = 0; i < N_SEQ; i++) tok[i] = 1 + (i * 101 + j * 13 + 7) % (V - 1);
        float *out = logits + (int64_t)j * N_SEQ * V;
        if (batched) {
            st = kvt_decode_batch(ctx, seqs, tok, N_SEQ, err);
            if (!st) memcpy(out, kvt_context_logits(ctx), (size_t)N_SEQ * V * sizeof(float));
        } else {
            for (int i = 0; !st && i < N_SEQ; i++) {
                st = kvt_decode_seq(ctx, seqs[i], &tok[i], 1, false, err);
                if (!st) memcpy(out + (int64_t)i * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
            }
        }
    }
    kvt_context_free(ctx);
    return st;
}

static void test_model(const char *label, const char *path) {
    char name[160];
    snprintf(name, sizeof name, "batch: %s: %d sequences batched = one by one, bit for bit", label, N_SEQ);
    kvt_model *m = NULL;
    kvt_err err = {0};
    if (kvt_model_load(path, false, &m, &err)) {
        test_result(false, name, "%s", err.msg);
        return;
    }
    const int64_t n = (int64_t)N_STEP * N_SEQ * m->hp.n_vocab;
    float *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    cp.kv_paged = true;
    cp.kv_block = 8;
    kvt_status st = a && b ? run(m, &cp, false, a, &err) : KVT_ERR_NOMEM;
    if (!st) st = run(m, &cp, true, b, &err);
    double md = 0, mr = 1e-30;
    for (int64_t i = 0; !st && i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mr = fmax(mr, fabs((double)a[i]));
    }
    test_result(!st && md == 0, name, "%s (max diff %.3g of %.3g)", st ? err.msg : "logits differ", md, mr);
    free(a);
    free(b);
    kvt_model_free(m);
}

static void test_errors(const char *path) {
    const char *name = "batch: a sequence twice, a missing sequence, a full context are refused";
    kvt_model *m = NULL;
    kvt_err err = {0};
    if (kvt_model_load(path, false, &m, &err)) {
        test_result(false, name, "%s", err.msg);
        return;
    }
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 4;
    cp.n_threads = 1;
    cp.kv_paged = true;
    kvt_context *ctx = NULL;
    bool ok = !kvt_context_init(m, &cp, &ctx, &err);
    int32_t s1 = -1, tok[2] = {1, 2}, twice[2] = {0, 0}, missing[2] = {0, 7};
    ok = ok && !kvt_context_seq_fork(ctx, 0, &s1, &err);
    ok = ok && kvt_decode_batch(ctx, twice, tok, 2, &err) == KVT_ERR_INVALID_ARG && strstr(err.msg, "twice");
    ok = ok && kvt_decode_batch(ctx, missing, tok, 2, &err) == KVT_ERR_INVALID_ARG;
    int32_t seqs[2] = {0, s1};
    for (int i = 0; ok && i < 4; i++) ok = !kvt_decode_batch(ctx, seqs, tok, 2, &err);
    ok = ok && kvt_decode_batch(ctx, seqs, tok, 2, &err) == KVT_ERR_BUDGET;
    ok = ok && kvt_context_seq_n_past(ctx, 0) == 4 && kvt_context_seq_n_past(ctx, s1) == 4;
    test_result(ok, name, "%s", err.msg);
    kvt_context_free(ctx);
    kvt_model_free(m);
}

void test_batch(const test_env *env) {
    char path[512];
    if (!test_data(env, "stories260K.gguf", path, sizeof path)) {
        test_skip("batch", test_data_missing(env, "stories260K.gguf"));
        return;
    }
    test_model("stories260K", path);
    test_errors(path);
    if (test_data(env, "qwen3-tiny.gguf", path, sizeof path)) test_model("qwen3-tiny", path);
    else test_skip("batch: qwen3-tiny", test_data_missing(env, "qwen3-tiny.gguf"));
}
