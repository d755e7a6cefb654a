// test_sparse_seq.c - sparse decode attention for every sequence of a context (src/sparse/, docs/SPARSE.md,
// "Sequences"): a sequence decoded sparsely in a batch with others (created and freed on the way, prefill
// chunks beside decode rows) gives the logits it gets alone, bit for bit, in every mode; a fork selects as a
// sequence that decoded the same tokens alone; keys that enter a sequence without an attention call (blocks
// pushed by reference, as the prefix cache does) are read back into its summaries; a truncate in mid-page cuts
// the summaries back; the summaries' memory follows the sequences and stays within the --kv-fast reservation;
// beam search under sparse keeps the same beams under every schedule.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/exec/context.h"
#include "../src/kv/kv_paged.h"
#include "../src/model/model.h"
#include "../src/sched/beam.h"
#include "../src/sparse/sparse.h"
#include "../src/sparse/sparse_impl.h"
#include "test.h"

enum { N_STEP = 8, MAX_PROMPT = 128 };

// A sequence's fixed tokens: a prompt of n_prompt, then N_STEP decode tokens (pattern `salt`).
typedef struct {
    int32_t prompt[MAX_PROMPT];
    int64_t n_prompt;
    int32_t step[N_STEP];
} lane;

static void lane_make(lane *l, int64_t n_prompt, int salt, int32_t n_vocab) {
    l->n_prompt = n_prompt;
    for (int64_t i = 0; i < n_prompt; i++) l->prompt[i] = 1 + (int32_t)((i * (37 + 2 * salt) + salt) % (n_vocab - 1));
    for (int j = 0; j < N_STEP; j++) l->step[j] = 1 + (j * (13 + salt) + 7 + salt) % (n_vocab - 1);
}

static kvt_context_params base_params(kvt_sparse_mode mode) {
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 96;
    cp.n_threads = 2;
    cp.kv_block = 8;
    cp.kv_paged = true;
    cp.sparse.mode = mode;
    cp.sparse.budget = 12;
    cp.sparse.sink = 2;
    cp.sparse.recent = 4;
    cp.sparse.page = 4;
    cp.sparse.window = 4;
    return cp;
}

// F16 K and V bytes of one block of `block` positions over every layer.
static int64_t block_bytes(const kvt_model *m, int64_t block) {
    return (int64_t)m->hp.n_layer * m->hp.n_head_kv * (m->hp.head_dim + m->hp.head_dim_v) * 2 * block;
}

// A new empty sequence (a fork of the empty sequence 0, as the scheduler makes them).
static kvt_status seq_new(kvt_context *ctx, int32_t *seq, kvt_err *err) { return kvt_context_seq_fork(ctx, 0, seq, err); }

// Logits of lane l decoded alone in a fresh context: out [N_STEP, n_vocab]. The prompt goes in two calls
// (split at `split`, 0: one call) so that references match runs that prefill in chunks.
static kvt_status alone(const kvt_model *m, const kvt_context_params *cp, const lane *l, int64_t split, float *out,
                        kvt_err *err) {
    const int32_t V = m->hp.n_vocab;
    kvt_context *ctx = NULL;
    int32_t s = -1;
    kvt_status st = kvt_context_init(m, cp, &ctx, err);
    if (!st) st = seq_new(ctx, &s, err);
    if (!st && split > 0) st = kvt_decode_prompt(ctx, s, l->prompt, split, false, err);
    if (!st) st = kvt_decode_prompt(ctx, s, l->prompt + split, l->n_prompt - split, false, err);
    for (int j = 0; !st && j < N_STEP; j++) {
        st = kvt_decode_seq(ctx, s, &l->step[j], 1, false, err);
        if (!st) memcpy(out + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
    }
    kvt_context_free(ctx);
    return st;
}

static bool same(const float *a, const float *b, int64_t n) { return memcmp(a, b, (size_t)n * sizeof(float)) == 0; }

// Sequence seq of ctx, holding l's prompt up to `from`, decodes the rest of it and then l's steps: their logits into out
// [N_STEP, n_vocab].
static kvt_status rest_and_steps(kvt_context *ctx, int32_t seq, const lane *l, int64_t from, float *out, kvt_err *err) {
    const int32_t V = kvt_context_model(ctx)->hp.n_vocab;
    kvt_status st = kvt_decode_prompt(ctx, seq, l->prompt + from, l->n_prompt - from, false, err);
    for (int j = 0; !st && j < N_STEP; j++) {
        st = kvt_decode_seq(ctx, seq, &l->step[j], 1, false, err);
        if (!st) memcpy(out + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
    }
    return st;
}

// Positions selected over a sequence's recorded steps, and their count.
static int64_t selected(kvt_context *ctx, int32_t seq, int64_t *n_steps) {
    const kvt_sparse_step *s = kvt_sparse_steps(kvt_context_sparse(ctx), seq, n_steps);
    int64_t t = 0;
    for (int64_t i = 0; i < *n_steps; i++) t += s[i].selected;
    return t;
}

// Lane a decoded in a busy context: b prefilled first, then a's prompt and c's in one mixed batch; the steps
// alternate kvt_decode_batch (b, a, c) and kvt_decode_runs (c, a, b) with b freed at step 3 and a new lane d
// prefilling beside a's step 4, its step rows from then on. out: a's logits [N_STEP, n_vocab].
static kvt_status busy(const kvt_model *m, const kvt_context_params *cp, const lane *la, const lane *lb, const lane *lc,
                       const lane *ld, float *out, int64_t *sel_a, int64_t *steps_a, int64_t *steps_c, kvt_err *err) {
    const int32_t V = m->hp.n_vocab;
    kvt_context *ctx = NULL;
    int32_t a = -1, b = -1, c = -1, d = -1;
    kvt_status st = kvt_context_init(m, cp, &ctx, err);
    if (!st) st = seq_new(ctx, &b, err);
    if (!st) st = kvt_decode_seq(ctx, b, lb->prompt, lb->n_prompt, false, err);
    if (!st) st = seq_new(ctx, &a, err);
    if (!st) st = seq_new(ctx, &c, err);
    if (!st) {
        const kvt_batch_run r[2] = {{c, lc->prompt, lc->n_prompt, false, true}, {a, la->prompt, la->n_prompt, false, true}};
        st = kvt_decode_runs(ctx, r, 2, err);
    }
    int dj = 0; // steps d has decoded
    for (int j = 0; !st && j < N_STEP; j++) {
        if (j == 3) kvt_context_seq_free(ctx, b), b = -1;
        if (j == 4 && !(st = seq_new(ctx, &d, err))) {
            const kvt_batch_run r[3] = {{a, &la->step[j], 1, true, false}, {d, ld->prompt, ld->n_prompt, false, true}, {c, &lc->step[j], 1, false, false}};
            st = kvt_decode_runs(ctx, r, 3, err);
            if (!st) memcpy(out + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
            continue;
        }
        if (j % 2 == 0) {
            int32_t seqs[3], toks[3];
            int n = 0, ia = 0;
            if (b >= 0) seqs[n] = b, toks[n++] = lb->step[j];
            ia = n, seqs[n] = a, toks[n++] = la->step[j];
            seqs[n] = c, toks[n++] = lc->step[j];
            if (d >= 0) seqs[n] = d, toks[n++] = ld->step[dj++];
            st = kvt_decode_batch(ctx, seqs, toks, n, err);
            if (!st) memcpy(out + (int64_t)j * V, kvt_context_logits(ctx) + (int64_t)ia * V, (size_t)V * sizeof(float));
        } else {
            kvt_batch_run r[4];
            int n = 0;
            r[n++] = (kvt_batch_run){c, &lc->step[j], 1, true, false};
            r[n++] = (kvt_batch_run){a, &la->step[j], 1, true, false};
            if (b >= 0) r[n++] = (kvt_batch_run){b, &lb->step[j], 1, true, false};
            if (d >= 0) r[n++] = (kvt_batch_run){d, &ld->step[dj++], 1, true, false};
            st = kvt_decode_runs(ctx, r, n, err);
            if (!st) memcpy(out + (int64_t)j * V, kvt_context_logits(ctx) + V, (size_t)V * sizeof(float));
        }
    }
    if (!st) {
        *sel_a = selected(ctx, a, steps_a);
        int64_t sc = 0;
        selected(ctx, c, &sc);
        *steps_c = sc;
    }
    kvt_context_free(ctx);
    return st;
}

typedef struct {
    const char *name;
    kvt_sparse_mode mode;
    bool sync;
    double rerank, fallback;
    bool tiers; // a small fast tier over a host tier (the worker prefetches every sequence's blocks)
    int32_t key_bits; // asyncspade: --sparse-key-bits (0: 8)
} config;

static kvt_context_params config_params(const kvt_model *m, const config *cf) {
    kvt_context_params cp = base_params(cf->mode);
    cp.sparse.sync = cf->sync;
    cp.sparse.rerank = cf->rerank;
    cp.sparse.fallback = cf->fallback;
    cp.sparse.key_bits = cf->key_bits;
    if (cf->tiers) {
        cp.sparse.seqs = 4;
        kvt_sparse_dims d = {m->hp.n_layer, m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim, m->hp.head_dim_v, cp.n_ctx, 2,
                             KVT_TYPE_F16, {0}, true, 0};
        const int64_t blk = block_bytes(m, cp.kv_block);
        cp.kv_fast_bytes = kvt_sparse_summary_bytes(&cp.sparse, &d) + 6 * blk;
        cp.kv_host_bytes = 8 << 20;
        cp.kv_prefetch = 1;
    }
    return cp;
}

static void test_batch_independence(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    const int64_t n = (int64_t)N_STEP * V;
    float *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    lane la, lb, lc, ld;
    lane_make(&la, 40, 0, V);
    lane_make(&lb, 29, 1, V);
    lane_make(&lc, 51, 2, V);
    lane_make(&ld, 23, 3, V);
    const config cfs[] = {
        {"oracle", KVT_SPARSE_ORACLE, false, 0, 0, false, 0},
        {"quest", KVT_SPARSE_QUEST, false, 0, 0, false, 0},
        {"asyncspade (worker)", KVT_SPARSE_ASYNCSPADE, false, 0, 0, false, 0},
        {"asyncspade (inline)", KVT_SPARSE_ASYNCSPADE, true, 0, 0, false, 0},
        {"asyncspade re-rank 2 + fallback 0.5", KVT_SPARSE_ASYNCSPADE, false, 2.0, 0.5, false, 0},
        {"asyncspade (worker) over a small fast tier", KVT_SPARSE_ASYNCSPADE, false, 0, 0, true, 0},
        {"asyncspade 4-bit keys, re-rank 2 + fallback 0.5, over a small fast tier", KVT_SPARSE_ASYNCSPADE, false, 2.0, 0.5, true, 4},
        {"quest over a small fast tier", KVT_SPARSE_QUEST, false, 0, 0, true, 0},
    };
    for (size_t i = 0; i < sizeof cfs / sizeof cfs[0]; i++) {
        const kvt_context_params cp = config_params(m, &cfs[i]);
        kvt_err err = {0};
        int64_t sel = 0, steps = 0, steps_c = 0;
        kvt_status st = alone(m, &cp, &la, 0, ref, &err);
        if (!st) st = busy(m, &cp, &la, &lb, &lc, &ld, got, &sel, &steps, &steps_c, &err);
        const int64_t want = (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12;
        char name[200];
        snprintf(name, sizeof name, "sparse_seq: %s: a sequence in a changing batch = alone, bit for bit; every sequence sparse",
                 cfs[i].name);
        test_result(!st && same(ref, got, n) && steps == N_STEP && sel == want && steps_c == N_STEP, name,
                    "%s (steps %lld, selected %lld of %lld, other sequence's steps %lld)",
                    st ? err.msg : same(ref, got, n) ? "counts" : "logits differ", (long long)steps, (long long)sel,
                    (long long)want, (long long)steps_c);
    }
    // --sparse off: the batched run is still the dense one (sequences beside each other change nothing)
    kvt_context_params cp = base_params(KVT_SPARSE_OFF);
    kvt_err err = {0};
    int64_t sel = 0, steps = 0, steps_c = 0;
    kvt_status st = alone(m, &cp, &la, 0, ref, &err);
    if (!st) {
        kvt_context *ctx = NULL;
        st = kvt_context_init(m, &cp, &ctx, &err);
        if (!st && kvt_context_sparse(ctx)) st = KVT_ERR_INVALID_ARG;
        kvt_context_free(ctx);
    }
    if (!st) {
        kvt_context_params cs = base_params(KVT_SPARSE_ORACLE);
        cs.sparse.budget = 96; // the budget covers every position: the dense path
        st = busy(m, &cs, &la, &lb, &lc, &ld, got, &sel, &steps, &steps_c, &err);
    }
    test_result(!st && same(ref, got, n), "sparse_seq: oracle with budget >= context in a batch = --sparse off alone, bit for bit",
                "%s", st ? err.msg : "logits differ");
    free(ref);
    free(got);
}

// Parent decodes a's prompt and 3 steps, the child forks; then parent and child decode side by side (the
// child a's steps 3.., the parent b's). The child = lane a alone.
static void test_fork(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    const int64_t n = (int64_t)N_STEP * V;
    float *ref = malloc((size_t)n * 4), *got = calloc((size_t)n, 4);
    lane la, lb;
    lane_make(&la, 37, 0, V);
    lane_make(&lb, 37, 5, V);
    const config cfs[] = {
        {"quest", KVT_SPARSE_QUEST, false, 0, 0, false, 0},
        {"asyncspade (worker)", KVT_SPARSE_ASYNCSPADE, false, 0, 0, false, 0},
        {"asyncspade (inline)", KVT_SPARSE_ASYNCSPADE, true, 0, 0, false, 0},
        {"asyncspade 4-bit keys (worker)", KVT_SPARSE_ASYNCSPADE, false, 0, 0, false, 4},
        {"oracle", KVT_SPARSE_ORACLE, false, 0, 0, false, 0},
    };
    for (size_t i = 0; i < sizeof cfs / sizeof cfs[0]; i++) {
        const kvt_context_params cp = config_params(m, &cfs[i]);
        kvt_err err = {0};
        kvt_status st = alone(m, &cp, &la, 0, ref, &err);
        kvt_context *ctx = NULL;
        int32_t p = -1, c = -1;
        if (!st) st = kvt_context_init(m, &cp, &ctx, &err);
        if (!st) st = seq_new(ctx, &p, &err);
        if (!st) st = kvt_decode_seq(ctx, p, la.prompt, la.n_prompt, false, &err);
        for (int j = 0; !st && j < 3; j++) {
            st = kvt_decode_seq(ctx, p, &la.step[j], 1, false, &err);
            if (!st) memcpy(got + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
        }
        if (!st) st = kvt_context_seq_fork(ctx, p, &c, &err);
        for (int j = 3; !st && j < N_STEP; j++) {
            const int32_t seqs[2] = {p, c}, toks[2] = {lb.step[j], la.step[j]};
            st = kvt_decode_batch(ctx, seqs, toks, 2, &err);
            if (!st) memcpy(got + (int64_t)j * V, kvt_context_logits(ctx) + V, (size_t)V * sizeof(float));
        }
        kvt_context_free(ctx);
        char name[160];
        snprintf(name, sizeof name, "sparse_seq: %s: a fork decodes as the same tokens alone, bit for bit", cfs[i].name);
        test_result(!st && same(ref, got, n), name, "%s", st ? err.msg : "logits differ");
    }
    free(ref);
    free(got);
}

// Forks share the key summaries of their parent's whole blocks (a base): a fork of a fork decoding after its parent
// and grandparent are freed = the same tokens alone; a fork truncated below the base (its own summaries of every
// position made again), and one forked again before it writes, = the same calls on a sequence that was never forked;
// a fork adds fewer summary bytes than its parent holds, and every byte is freed with the last sequence. asyncspade's
// int8 and 4-bit copies (worker scans and a re-rank whose candidates lie in the base and past it), quest's page bounds.
static void test_fork_share(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    const int64_t n = (int64_t)N_STEP * V;
    float *ref = malloc((size_t)n * 4), *got = calloc((size_t)n, 4), *tr = calloc((size_t)n, 4), *tg = calloc((size_t)n, 4),
          *tg2 = calloc((size_t)n, 4);
    lane la;
    lane_make(&la, 37, 0, V);
    const config cfs[] = {
        {"asyncspade", KVT_SPARSE_ASYNCSPADE, false, 0, 0, false, 0},
        {"asyncspade 4-bit keys", KVT_SPARSE_ASYNCSPADE, false, 0, 0, false, 4},
        {"asyncspade re-rank 2", KVT_SPARSE_ASYNCSPADE, false, 2.0, 0, false, 0},
        {"quest", KVT_SPARSE_QUEST, false, 0, 0, false, 0},
    };
    for (size_t i = 0; i < sizeof cfs / sizeof cfs[0]; i++) {
        const kvt_context_params cp = config_params(m, &cfs[i]);
        kvt_err err = {0};
        kvt_status st = alone(m, &cp, &la, 0, ref, &err);
        int64_t h0 = -1, h1 = -1, h2 = -1;
        bool trunc_same = false;
        // the truncate: without a fork (tr), in a fork (tg), in a fork then forked again before it writes (tg2)
        for (int forked = 0; !st && forked <= 2; forked++) {
            kvt_context *ctx = NULL;
            int32_t p = -1, c = -1;
            float *out = forked == 2 ? tg2 : forked ? tg : tr;
            st = kvt_context_init(m, &cp, &ctx, &err);
            if (!st) st = seq_new(ctx, &p, &err);
            if (!st) st = kvt_decode_seq(ctx, p, la.prompt, la.n_prompt, false, &err);
            for (int j = 0; !st && j < 3; j++) st = kvt_decode_seq(ctx, p, &la.step[j], 1, false, &err);
            if (!st && forked) {
                h0 = kvt_sparse_summary_held(kvt_context_sparse(ctx));
                st = kvt_context_seq_fork(ctx, p, &c, &err);
                h1 = st ? -1 : kvt_sparse_summary_held(kvt_context_sparse(ctx));
                if (!st) kvt_context_seq_free(ctx, p), p = c;
            }
            if (!st) kvt_context_seq_truncate(ctx, p, la.n_prompt - 30); // 7: below the base of 32 positions by blocks
            if (!st && forked == 2) {
                st = kvt_context_seq_fork(ctx, p, &c, &err);
                if (!st) kvt_context_seq_free(ctx, p), p = c;
            }
            if (!st) st = kvt_decode_seq(ctx, p, la.prompt + la.n_prompt - 30, 30, false, &err);
            for (int j = 0; !st && j < N_STEP; j++) {
                st = kvt_decode_seq(ctx, p, &la.step[j], 1, false, &err);
                if (!st) memcpy(out + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
            }
            kvt_context_free(ctx);
        }
        trunc_same = !st && same(tr, tg, n) && same(tr, tg2, n);
        // the chain: p prefills and decodes 3 steps, c = fork(p) decodes 1 after p is freed, g = fork(c) the rest after c is
        kvt_context *ctx = NULL;
        int32_t p = -1, c = -1, g = -1;
        if (!st) st = kvt_context_init(m, &cp, &ctx, &err);
        if (!st) st = seq_new(ctx, &p, &err);
        if (!st) st = kvt_decode_seq(ctx, p, la.prompt, la.n_prompt, false, &err);
        for (int j = 0; !st && j < N_STEP; j++) {
            if (j == 3) {
                st = kvt_context_seq_fork(ctx, p, &c, &err);
                if (!st) kvt_context_seq_free(ctx, p), p = c;
            }
            if (!st && j == 4) {
                st = kvt_context_seq_fork(ctx, p, &g, &err);
                if (!st) kvt_context_seq_free(ctx, p), p = g;
            }
            if (!st) st = kvt_decode_seq(ctx, p, &la.step[j], 1, false, &err);
            if (!st) memcpy(got + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
        }
        if (!st) kvt_context_seq_free(ctx, p);
        h2 = st ? -1 : kvt_sparse_summary_held(kvt_context_sparse(ctx));
        kvt_context_free(ctx);
        char name[200];
        snprintf(name, sizeof name, "sparse_seq: %s: forks share the parent's key copies: a fork of a fork = alone, a fork truncated below them = unforked, bit for bit; bytes", cfs[i].name);
        test_result(!st && same(ref, got, n) && trunc_same && h0 > 0 && h1 > h0 && h1 - h0 < h0 && h2 == 0, name,
                    "%s (truncated %s; held %lld -> %lld after the fork, %lld at the end)", st ? err.msg : "differ",
                    trunc_same ? "same" : "differs", (long long)h0, (long long)h1, (long long)h2);
    }
    free(ref);
    free(got);
    free(tr);
    free(tg);
    free(tg2);
}

// Blocks of lane a's prompt pushed by reference into a new sequence (the prefix cache's way: no attention
// call sees their keys), the rest of the prompt prefilled: = a alone with the same split.
// Sequence b (empty) gets sequence a's first n positions (whole blocks of `block`) by reference, as the prefix cache
// gives them; ids: scratch of n_layer * n_head_kv handles.
static kvt_status push_prefix(kvt_context *ctx, int32_t a, int32_t b, int64_t n, int64_t block, int64_t *ids, kvt_err *err) {
    kvt_status st = KVT_OK;
    for (int64_t blk = 0; !st && blk < n / block; blk++) {
        st = kvt_kv_paged_block_ref(kvt_context_kv(ctx), a, blk, ids, err);
        if (!st) st = kvt_kv_paged_seq_push_ref(kvt_context_kv(ctx), b, blk, ids, err);
        kvt_kv_paged_block_unref(kvt_context_kv(ctx), ids);
    }
    return st ? st : kvt_context_seq_set_n_past(ctx, b, n, err);
}

static void test_pushed_blocks(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    const int64_t n = (int64_t)N_STEP * V, split = 32;
    float *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    int64_t *ids = malloc((size_t)m->hp.n_layer * m->hp.n_head_kv * sizeof *ids);
    lane la;
    lane_make(&la, 40, 0, V);
    const config cfs[] = {
        {"quest", KVT_SPARSE_QUEST, false, 0, 0, false, 0},
        {"asyncspade (worker)", KVT_SPARSE_ASYNCSPADE, false, 0, 0, false, 0},
        {"asyncspade 4-bit keys (worker)", KVT_SPARSE_ASYNCSPADE, false, 0, 0, false, 4},
    };
    for (size_t i = 0; i < sizeof cfs / sizeof cfs[0]; i++) {
        const kvt_context_params cp = config_params(m, &cfs[i]);
        kvt_err err = {0};
        kvt_status st = alone(m, &cp, &la, split, ref, &err);
        kvt_context *ctx = NULL;
        int32_t a = -1, b = -1;
        if (!st) st = kvt_context_init(m, &cp, &ctx, &err);
        if (!st) st = seq_new(ctx, &a, &err);
        if (!st) st = kvt_decode_seq(ctx, a, la.prompt, split, false, &err);
        if (!st) st = seq_new(ctx, &b, &err);
        if (!st) st = push_prefix(ctx, a, b, split, cp.kv_block, ids, &err);
        if (!st) kvt_context_seq_free(ctx, a);
        if (!st) st = kvt_decode_seq(ctx, b, la.prompt + split, la.n_prompt - split, false, &err);
        for (int j = 0; !st && j < N_STEP; j++) {
            st = kvt_decode_seq(ctx, b, &la.step[j], 1, false, &err);
            if (!st) memcpy(got + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
        }
        kvt_context_free(ctx);
        char name[160];
        snprintf(name, sizeof name, "sparse_seq: %s: keys pushed by reference are read back into the summaries (= prefilled), bit for bit",
                 cfs[i].name);
        test_result(!st && same(ref, got, n), name, "%s", st ? err.msg : "logits differ");
    }
    free(ids);
    free(ref);
    free(got);
}

// asyncspade's query window (kvt_sparse_qwin_*, what serve's prefix cache keeps): a 40-token prompt's window (window 8:
// the queries of positions 31..39) taken at its end; a second sequence given the first 32 positions by reference takes
// it back at 32, computes positions 32..39 itself (fewer than the window's 9) and decodes as the prompt decoded alone,
// bit for bit. covers: at in (31, 40], a prompt of at least 40 tokens.
static void test_query_window(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    const int64_t n = (int64_t)N_STEP * V, split = 32;
    float *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4), *bare = malloc((size_t)n * 4);
    int64_t *ids = malloc((size_t)m->hp.n_layer * m->hp.n_head_kv * sizeof *ids);
    lane la;
    lane_make(&la, 40, 3, V);
    kvt_context_params cp = base_params(KVT_SPARSE_ASYNCSPADE);
    cp.sparse.window = 8;
    kvt_err err = {0};
    kvt_status st = alone(m, &cp, &la, split, ref, &err);
    bool covers = false;
    for (int with = 1; with >= 0 && !st; with--) { // with the window, then without it (the history restarts at 32)
        kvt_context *ctx = NULL;
        kvt_sparse_qwin *w = NULL;
        int32_t a = -1, b = -1;
        if (!st) st = kvt_context_init(m, &cp, &ctx, &err);
        if (!st) st = seq_new(ctx, &a, &err);
        if (!st) st = kvt_decode_prompt(ctx, a, la.prompt, la.n_prompt, false, &err);
        if (!st && with) st = kvt_sparse_qwin_take(kvt_context_sparse(ctx), a, la.n_prompt, &w, &err);
        if (!st && with) {
            covers = w && kvt_sparse_qwin_end(w) == 40 && kvt_sparse_qwin_covers(w, 32, 40) && kvt_sparse_qwin_covers(w, 40, 41) &&
                     !kvt_sparse_qwin_covers(w, 31, 40) && !kvt_sparse_qwin_covers(w, 32, 39) && !kvt_sparse_qwin_covers(w, 40, 40);
        }
        if (!st) st = seq_new(ctx, &b, &err);
        if (!st) st = push_prefix(ctx, a, b, split, cp.kv_block, ids, &err);
        if (!st && with) st = kvt_sparse_qwin_restore(kvt_context_sparse(ctx), b, w, split, &err);
        if (!st) kvt_context_seq_free(ctx, a);
        if (!st) st = rest_and_steps(ctx, b, &la, split, with ? got : bare, &err);
        kvt_sparse_qwin_free(w);
        kvt_context_free(ctx);
    }
    test_result(!st && covers && same(ref, got, n),
                "sparse_seq: asyncspade's query window taken at a prompt's end and restored into a sequence given the cached "
                "blocks (fewer positions computed than the window) = the prompt decoded alone, bit for bit",
                "%s (covers as expected %d; without the window the logits %s)", st ? err.msg : "logits differ", covers,
                st ? "-" : same(ref, bare, n) ? "are the same too" : "differ");
    free(ids);
    free(ref);
    free(got);
    free(bare);
}

// The modes whose key summaries a prefix cache keeps: quest's bounds, asyncspade's int8 and its 4-bit copies.
static const struct {
    const char *name;
    kvt_sparse_mode mode;
    int32_t bits;
} key_cfs[] = {{"quest", KVT_SPARSE_QUEST, 0}, {"asyncspade", KVT_SPARSE_ASYNCSPADE, 8}, {"asyncspade 4-bit keys", KVT_SPARSE_ASYNCSPADE, 4}};

static kvt_context_params key_params(size_t i) {
    kvt_context_params cp = base_params(key_cfs[i].mode);
    if (key_cfs[i].bits) cp.sparse.key_bits = key_cfs[i].bits;
    return cp;
}

// Key summaries kept as a sequence is freed (kvt_sparse_seq_free_keep, what serve's prefix cache keeps) and shared by
// later sequences given the cached blocks (kvt_sparse_ksum_attach): a (56 prompt positions and 2 steps) keeps [0, 32)
// (its own buffers, no copy); b, given 32 positions, shares them and computes [32, 56); b keeps [0, 48) (its base's 32
// and its own 16 copied together); d, given 48, shares those, computes [48, 56) and decodes as the prompt alone, bit for
// bit. The kept bytes leave summary_held for summary_kept; once the kept copies are freed, the base d still holds is
// counted in summary_held again (under the reservation), and it is freed with d.
static void test_kept_keys(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    const int64_t n = (int64_t)N_STEP * V;
    float *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    int64_t *ids = malloc((size_t)m->hp.n_layer * m->hp.n_head_kv * sizeof *ids);
    lane la;
    lane_make(&la, 56, 5, V);
    for (size_t i = 0; i < sizeof key_cfs / sizeof key_cfs[0]; i++) {
        const kvt_context_params cp = key_params(i);
        kvt_err err = {0};
        kvt_status st = alone(m, &cp, &la, 48, ref, &err);
        kvt_context *ctx = NULL;
        kvt_sparse_ksum *k1 = NULL, *k2 = NULL;
        int32_t a = -1, b = -1, d = -1;
        int64_t sh1 = -1, sh2 = -1, e1 = -1, e2 = -1;
        kvt_sparse_totals t1 = {0}, t2 = {0}, t3 = {0};
        bool refused = false;
        if (!st) st = kvt_context_init(m, &cp, &ctx, &err);
        kvt_sparse *sp = ctx ? kvt_context_sparse(ctx) : NULL;
        if (!st) st = seq_new(ctx, &a, &err);
        if (!st) st = kvt_decode_prompt(ctx, a, la.prompt, la.n_prompt, false, &err);
        for (int j = 0; !st && j < 2; j++) st = kvt_decode_seq(ctx, a, &la.step[j], 1, false, &err);
        if (!st) st = seq_new(ctx, &b, &err);
        if (!st) st = push_prefix(ctx, a, b, 32, cp.kv_block, ids, &err);
        if (!st) st = kvt_sparse_seq_free_keep(sp, a, 32, &k1, &err);
        if (!st) kvt_context_seq_free(ctx, a), kvt_sparse_totals_get(sp, &t1), e1 = kvt_sparse_ksum_end(k1);
        if (!st) st = kvt_sparse_ksum_attach(sp, b, k1, 32, &sh1, &err);
        if (!st) st = kvt_decode_prompt(ctx, b, la.prompt + 32, la.n_prompt - 32, false, &err);
        if (!st) st = seq_new(ctx, &d, &err);
        if (!st) st = push_prefix(ctx, b, d, 48, cp.kv_block, ids, &err);
        if (!st) st = kvt_sparse_seq_free_keep(sp, b, 48, &k2, &err);
        if (!st) kvt_context_seq_free(ctx, b), e2 = kvt_sparse_ksum_end(k2);
        if (!st) st = kvt_sparse_ksum_attach(sp, d, k2, 48, &sh2, &err);
        if (!st) st = rest_and_steps(ctx, d, &la, 48, got, &err);
        if (!st) { // a sequence that summarizes already is refused, named
            kvt_err e3 = {0};
            int64_t sh3 = 0;
            refused = kvt_sparse_ksum_attach(sp, d, k2, 48, &sh3, &e3) == KVT_ERR_INVALID_ARG && strstr(e3.msg, "already");
        }
        if (!st) kvt_sparse_ksum_free(k1), kvt_sparse_ksum_free(k2), k1 = k2 = NULL, kvt_sparse_totals_get(sp, &t2);
        if (!st) kvt_context_seq_free(ctx, d), kvt_sparse_totals_get(sp, &t3);
        kvt_sparse_ksum_free(k1);
        kvt_sparse_ksum_free(k2);
        kvt_context_free(ctx);
        char name[320];
        snprintf(name, sizeof name, "sparse_seq: %s: key summaries kept as a sequence is freed and shared by the next ones "
                 "given the cached blocks (twice, the second a copy of base and own) = the prompt alone, bit for bit; bytes "
                 "kept; held again by the sequence left once the kept copies go; freed with it", key_cfs[i].name);
        test_result(!st && e1 == 32 && sh1 == 32 && e2 == 48 && sh2 == 48 && same(ref, got, n) && refused &&
                        t1.summary_kept > 0 && t2.summary_kept == 0 && t2.summary_held > 0 && t3.summary_kept == 0 &&
                        t3.summary_held == 0,
                    name, "%s (kept ends %lld, %lld; shared %lld, %lld; refused %d; kept bytes %lld, %lld, %lld; held %lld, %lld)",
                    st ? err.msg : "figures or logits", (long long)e1, (long long)e2, (long long)sh1, (long long)sh2,
                    refused, (long long)t1.summary_kept, (long long)t2.summary_kept, (long long)t3.summary_kept,
                    (long long)t2.summary_held, (long long)t3.summary_held);
    }
    free(ids);
    free(ref);
    free(got);
}

// Key summaries kept from a sequence that goes on (kvt_sparse_seq_keep, what serve's prefix cache takes from a running
// holder for a request with its prefix): a (a 56-token prompt) keeps [0, 48) and decodes its steps as if it had not
// (its buffers became a base, as a fork's parent's do); b, given the first 48 positions and sharing the kept copy while a
// still runs, computes [48, 56) and decodes as the prompt alone: both bit for bit. The kept bytes outlive a and go with
// their last holder.
static void test_live_keys(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    const int64_t n = (int64_t)N_STEP * V;
    float *refa = malloc((size_t)n * 4), *refb = malloc((size_t)n * 4), *ga = malloc((size_t)n * 4), *gb = malloc((size_t)n * 4);
    int64_t *ids = malloc((size_t)m->hp.n_layer * m->hp.n_head_kv * sizeof *ids);
    lane la;
    lane_make(&la, 56, 6, V);
    for (size_t i = 0; i < sizeof key_cfs / sizeof key_cfs[0]; i++) {
        const kvt_context_params cp = key_params(i);
        kvt_err err = {0};
        kvt_status st = alone(m, &cp, &la, 0, refa, &err);
        if (!st) st = alone(m, &cp, &la, 48, refb, &err);
        kvt_context *ctx = NULL;
        kvt_sparse_ksum *k = NULL;
        int32_t a = -1, b = -1;
        int64_t sh = -1, e = -1;
        kvt_sparse_totals t1 = {0}, t2 = {0}, t3 = {0};
        if (!st) st = kvt_context_init(m, &cp, &ctx, &err);
        kvt_sparse *sp = ctx ? kvt_context_sparse(ctx) : NULL;
        if (!st) st = seq_new(ctx, &a, &err);
        if (!st) st = kvt_decode_prompt(ctx, a, la.prompt, la.n_prompt, false, &err);
        for (int j = 0; !st && j < 2; j++) { // a's first steps; then it keeps
            st = kvt_decode_seq(ctx, a, &la.step[j], 1, false, &err);
            if (!st) memcpy(ga + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
        }
        if (!st) st = kvt_sparse_seq_keep(sp, a, 48, &k, &err);
        if (!st) e = kvt_sparse_ksum_end(k), kvt_sparse_totals_get(sp, &t1);
        if (!st) st = seq_new(ctx, &b, &err);
        if (!st) st = push_prefix(ctx, a, b, 48, cp.kv_block, ids, &err);
        if (!st) st = kvt_sparse_ksum_attach(sp, b, k, 48, &sh, &err);
        if (!st) st = kvt_decode_prompt(ctx, b, la.prompt + 48, la.n_prompt - 48, false, &err);
        for (int j = 0; !st && j < N_STEP; j++) { // b's steps, a's beside them
            st = kvt_decode_seq(ctx, b, &la.step[j], 1, false, &err);
            if (!st) memcpy(gb + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
            if (!st && j + 2 < N_STEP) st = kvt_decode_seq(ctx, a, &la.step[j + 2], 1, false, &err);
            if (!st && j + 2 < N_STEP) memcpy(ga + (int64_t)(j + 2) * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
        }
        if (!st) kvt_context_seq_free(ctx, a), kvt_sparse_totals_get(sp, &t2);
        if (!st) kvt_context_seq_free(ctx, b), kvt_sparse_ksum_free(k), k = NULL, kvt_sparse_totals_get(sp, &t3);
        kvt_sparse_ksum_free(k);
        kvt_context_free(ctx);
        char name[320];
        snprintf(name, sizeof name, "sparse_seq: %s: key summaries kept from a sequence that goes on, shared by one given the "
                 "cached blocks: both = their prompt alone, bit for bit; bytes kept past the first, freed with the last holder",
                 key_cfs[i].name);
        test_result(!st && e == 48 && sh == 48 && same(refa, ga, n) && same(refb, gb, n) && t1.summary_kept > 0 &&
                        t2.summary_kept == t1.summary_kept && t3.summary_kept == 0 && t3.summary_held == 0,
                    name, "%s (kept end %lld, shared %lld; a %s, b %s; kept bytes %lld, %lld, %lld; held %lld)",
                    st ? err.msg : "figures or logits", (long long)e, (long long)sh, same(refa, ga, n) ? "same" : "differs",
                    same(refb, gb, n) ? "same" : "differs", (long long)t1.summary_kept, (long long)t2.summary_kept,
                    (long long)t3.summary_kept, (long long)t3.summary_held);
    }
    free(ids);
    free(refa);
    free(refb);
    free(ga);
    free(gb);
}

// A sequence given kept summaries and nothing of its own yet (kvt_sparse_ksum_attach: no own buffers until its first
// key past them), then (fork) forked there, the fork computing the rest, or (truncate) cut back below them to 20 and
// computing from there: = the prompt alone, bit for bit, and every byte back at 0 once freed. Both once wrote the
// base's blocks into own buffers sized for none (a heap overflow under ASan).
static void test_attached_edges(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    const int64_t n = (int64_t)N_STEP * V;
    float *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    int64_t *ids = malloc((size_t)m->hp.n_layer * m->hp.n_head_kv * sizeof *ids);
    lane la;
    lane_make(&la, 56, 5, V);
    for (int trunc = 0; trunc <= 1; trunc++) {
        for (size_t i = 0; i < sizeof key_cfs / sizeof key_cfs[0]; i++) {
            const kvt_context_params cp = key_params(i);
            const int64_t from = trunc ? 20 : 48; // where the sequence computing the rest starts
            kvt_err err = {0};
            kvt_status st = alone(m, &cp, &la, from, ref, &err);
            kvt_context *ctx = NULL;
            kvt_sparse_ksum *k = NULL;
            int32_t a = -1, b = -1, c = -1;
            int64_t sh = 0;
            kvt_sparse_totals t = {0};
            if (!st) st = kvt_context_init(m, &cp, &ctx, &err);
            kvt_sparse *sp = ctx ? kvt_context_sparse(ctx) : NULL;
            if (!st) st = seq_new(ctx, &a, &err);
            if (!st) st = kvt_decode_prompt(ctx, a, la.prompt, la.n_prompt, false, &err);
            if (!st) st = seq_new(ctx, &b, &err);
            if (!st) st = push_prefix(ctx, a, b, 48, cp.kv_block, ids, &err);
            if (!st) st = kvt_sparse_seq_free_keep(sp, a, 48, &k, &err);
            if (!st) kvt_context_seq_free(ctx, a);
            if (!st) st = kvt_sparse_ksum_attach(sp, b, k, 48, &sh, &err);
            if (!st && trunc) kvt_context_seq_truncate(ctx, b, from), c = b;
            if (!st && !trunc) st = kvt_context_seq_fork(ctx, b, &c, &err);
            if (!st) st = rest_and_steps(ctx, c, &la, from, got, &err);
            if (!st) {
                kvt_context_seq_free(ctx, b);
                kvt_context_seq_free(ctx, c);
                kvt_sparse_ksum_free(k), k = NULL;
                kvt_sparse_totals_get(sp, &t);
            }
            kvt_sparse_ksum_free(k);
            kvt_context_free(ctx);
            char name[256];
            snprintf(name, sizeof name, "sparse_seq: %s: a sequence given kept summaries and no key of its own yet, %s "
                     "= the prompt alone, bit for bit; nothing held after", key_cfs[i].name,
                     trunc ? "truncated below them" : "forked");
            test_result(!st && sh == 48 && same(ref, got, n) && t.summary_held == 0 && t.summary_kept == 0, name,
                        "%s (shared %lld, held %lld, kept %lld)", st ? err.msg : "figures or logits", (long long)sh,
                        (long long)t.summary_held, (long long)t.summary_kept);
        }
    }
    free(ids);
    free(ref);
    free(got);
}

// A sequence truncated and decoded again up to positions it had decoded (serve's FCFS engine reuses a prefix so; a
// failed pass is cut back so) = a fresh one given the same chunks, bit for bit: with --sparse-share-layers the
// layers' shared budgets of a position were kept across the truncate and used again (found by a review). Also a
// --sparse-real-layers layer under --sparse-rerank-resid: its re-rank is the exact pass (no worker prediction to take
// a residual from), so = the same with --sparse-rerank-resid 0.
static void test_truncate_again(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    int32_t toks[80];
    for (int i = 0; i < 80; i++) toks[i] = 1 + (int32_t)((i * 53 + 7) % (V - 1));
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    for (int v = 0; v < 2; v++) {
        kvt_context_params cp = base_params(KVT_SPARSE_ASYNCSPADE);
        cp.sparse.rerank = 4, cp.sparse.rerank_block = 4, cp.sparse.sync = true;
        if (v == 0) cp.sparse.share = cp.sparse.share_layers = true, cp.sparse.budget = 16, cp.sparse.rerank = 2;
        else cp.sparse.real_layers = m->hp.n_layer, cp.sparse.rerank_resid = 0.25, cp.sparse.rerank_resid_gate = 0.01,
             cp.sparse.rerank_resid_cal = 1; // (the residual taken from the first calibrated step on)
        kvt_context_params cr = cp;
        if (v == 1) cr.sparse.rerank_resid = 0; // the reference: no residual
        kvt_err err = {0};
        kvt_context *A = NULL, *B = NULL;
        kvt_status st = kvt_context_init(m, &cp, &A, &err);
        if (!st) st = kvt_context_init(m, v == 1 ? &cr : &cp, &B, &err);
        if (!st) st = kvt_decode(A, toks, 56, false, &err);
        for (int i = 56; !st && v == 0 && i < 72; i++) st = kvt_decode(A, toks + i, 1, false, &err); // then cut back
        if (!st && v == 0) kvt_context_truncate(A, 56);
        if (!st) st = kvt_decode(A, toks + 56, 15, false, &err);
        for (int i = 71; !st && i < 80; i++) st = kvt_decode(A, toks + i, 1, false, &err);
        if (!st) memcpy(a, kvt_context_logits(A), (size_t)V * 4);
        if (!st) st = kvt_decode(B, toks, 56, false, &err);
        if (!st) st = kvt_decode(B, toks + 56, 15, false, &err);
        for (int i = 71; !st && i < 80; i++) st = kvt_decode(B, toks + i, 1, false, &err);
        if (!st) memcpy(b, kvt_context_logits(B), (size_t)V * 4);
        kvt_context_free(A);
        kvt_context_free(B);
        test_result(!st && same(a, b, V),
                    v == 0 ? "sparse_seq: --sparse-share-layers: truncated and decoded again = a fresh sequence, bit for bit"
                           : "sparse_seq: --sparse-real-layers with --sparse-rerank-resid: the exact re-rank (= resid 0), bit for bit",
                    "%s", st ? err.msg : "logits differ");
    }
    free(a);
    free(b);
}

// A pass that fails halfway (the k-th read from the disk tier fails: kv_fault_read_at; the store's full disk likewise)
// and is run again, as the scheduler does after trimming its prefix cache: the greedy ids of 30 steps after a 40-token
// prompt = those of the run without the fault, for every k that hit (asyncspade: the failed pass is taken back by
// kvt_sparse_seq_undo; before, 9 of 14 such runs gave other ids; quest beside it). The tiny model, a fast tier of 4
// blocks, the rest on disk.
static int fault_run(const kvt_model *m, kvt_sparse_mode mode, int64_t fault, int32_t *ids, int *n_fail, kvt_err *err) {
    kvt_context_params cp = base_params(mode);
    cp.sparse.budget = 0, cp.sparse.budget_frac = 0.25;
    cp.kv_block = 16;
    kvt_sparse_dims sd = {m->hp.n_layer, m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim, m->hp.head_dim_v, cp.n_ctx, 2,
                          KVT_TYPE_F16, {0}, true, 0};
    cp.kv_fast_bytes = 4 * block_bytes(m, cp.kv_block) / m->hp.n_layer + kvt_sparse_summary_bytes(&cp.sparse, &sd);
    cp.kv_disk_dir = "/tmp";
    cp.kv_fault_read_at = fault;
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(m, &cp, &ctx, err);
    int32_t prompt[40], tok = 0;
    for (int i = 0; i < 40; i++) prompt[i] = 1 + (i * 37 + 11) % (m->hp.n_vocab - 1);
    *n_fail = 0;
    for (int t = 0; !st && t <= 30; t++) {
        kvt_batch_run r = t == 0 ? (kvt_batch_run){0, prompt, 40, true, true} : (kvt_batch_run){0, &tok, 1, true, false};
        if ((st = kvt_decode_runs(ctx, &r, 1, err))) (*n_fail)++, st = kvt_decode_runs(ctx, &r, 1, err); // once again
        if (st) break;
        const float *l = kvt_context_logits(ctx);
        int32_t best = 0;
        for (int32_t v = 1; v < m->hp.n_vocab; v++) best = l[v] > l[best] ? v : best;
        if (t < 30) ids[t] = best;
        tok = best;
    }
    kvt_context_free(ctx);
    return st;
}

static void test_failed_pass_again(const kvt_model *m) {
    const kvt_sparse_mode modes[2] = {KVT_SPARSE_QUEST, KVT_SPARSE_ASYNCSPADE};
    for (int mi = 0; mi < 2; mi++) {
        int32_t ref[30], got[30];
        int nf = 0, faulted = 0, differ = 0;
        kvt_err err = {0};
        kvt_status st = fault_run(m, modes[mi], 0, ref, &nf, &err);
        for (int64_t k = 1; !st && k <= 40; k += 3) {
            if ((st = fault_run(m, modes[mi], k, got, &nf, &err))) break;
            faulted += nf > 0;
            differ += nf > 0 && memcmp(ref, got, sizeof ref) != 0;
        }
        char name[200];
        snprintf(name, sizeof name, "sparse_seq: %s: a pass failed halfway (a disk read) and run again = the run without the "
                 "fault, greedy ids", kvt_sparse_mode_name(modes[mi]));
        test_result(!st && faulted > 0 && differ == 0, name, "%s (%d runs hit a fault, %d gave other ids)",
                    st ? err.msg : "ids", faulted, differ);
    }
}

// Under a --kv-fast reservation for one sequence (asyncspade): (pool) a sequence growing its buffers (40, then 70
// positions) leaves its old ones to the pool only as far as the reservation allows: held + pooled within it at each
// point and after its end; (unkeep) summaries kept from a running sequence and then dropped by the cache (its LRU, a
// trim) count as held again: a second sequence past the reservation beside it is refused, as without the keep.
static void test_reservation_edges(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    lane la, lb;
    lane_make(&la, 90, 2, V), lane_make(&lb, 60, 1, V);
    kvt_context_params cp = base_params(KVT_SPARSE_ASYNCSPADE);
    kvt_sparse_dims d = {m->hp.n_layer, m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim, m->hp.head_dim_v, cp.n_ctx, 2,
                         KVT_TYPE_F16, {0}, true, 0};
    cp.sparse.seqs = 1;
    const int64_t res = kvt_sparse_summary_bytes(&cp.sparse, &d);
    cp.kv_fast_bytes = res + 16 * block_bytes(m, cp.kv_block);
    cp.kv_host_bytes = 8 << 20;
    for (int part = 0; part < 2; part++) {
        kvt_err err = {0};
        kvt_context *ctx = NULL;
        int32_t a = -1, b = -1;
        kvt_sparse_totals t[4] = {{0}};
        kvt_status st = kvt_context_init(m, &cp, &ctx, &err), bst = KVT_OK;
        kvt_sparse *sp = ctx ? kvt_context_sparse(ctx) : NULL;
        if (!st) st = seq_new(ctx, &a, &err);
        if (part == 0) {
            if (!st) st = kvt_decode_seq(ctx, a, la.prompt, 40, false, &err);
            if (!st) kvt_sparse_totals_get(sp, &t[0]), st = kvt_decode_seq(ctx, a, la.prompt + 40, 30, false, &err);
            if (!st) kvt_sparse_totals_get(sp, &t[1]), kvt_context_seq_free(ctx, a), kvt_sparse_totals_get(sp, &t[2]);
            bool within = true;
            for (int x = 0; x < 3; x++) within = within && t[x].summary_held + t[x].summary_pooled <= res;
            test_result(!st && within && t[1].summary_held > t[0].summary_held,
                        "sparse_seq: a sequence growing under a reservation pools its old buffers within it (held + pooled)",
                        "%s (held + pooled %lld, %lld, %lld; reserved %lld)", st ? err.msg : "over",
                        (long long)(t[0].summary_held + t[0].summary_pooled), (long long)(t[1].summary_held + t[1].summary_pooled),
                        (long long)(t[2].summary_held + t[2].summary_pooled), (long long)res);
        } else {
            kvt_sparse_ksum *k = NULL;
            if (!st) st = kvt_decode_seq(ctx, a, la.prompt, 60, false, &err);
            if (!st) kvt_sparse_totals_get(sp, &t[0]), st = kvt_sparse_seq_keep(sp, a, 48, &k, &err);
            if (!st) kvt_sparse_totals_get(sp, &t[1]), kvt_sparse_ksum_free(k), kvt_sparse_totals_get(sp, &t[2]);
            kvt_err e2 = {0};
            if (!st && !(st = seq_new(ctx, &b, &err))) bst = kvt_decode_seq(ctx, b, lb.prompt, 60, false, &e2);
            test_result(!st && t[1].summary_kept > 0 && t[2].summary_kept == 0 &&
                            t[2].summary_held == t[1].summary_held + t[1].summary_kept &&
                            bst == KVT_ERR_BUDGET && strstr(e2.msg, "--sparse-seqs"),
                        "sparse_seq: summaries kept from a running sequence and dropped by the cache count under the "
                        "reservation again (a second sequence past it refused)",
                        "%s (held %lld, kept %lld -> held %lld, kept %lld; second sequence: %s)", st ? err.msg : "figures",
                        (long long)t[1].summary_held, (long long)t[1].summary_kept, (long long)t[2].summary_held,
                        (long long)t[2].summary_kept, bst ? e2.msg : "admitted");
        }
        kvt_context_free(ctx);
    }
}

// Key summaries taken from a running sequence whose --kv-fast reservation has no room for the own buffers it would go
// on in (asyncspade, a reservation of one sequence at n_ctx, the sequence at 66 of its 96 positions): refused with the
// reservation named, nothing kept, nothing else held, and the sequence decodes on as alone, bit for bit.
static void test_live_keys_budget(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    const int64_t n = (int64_t)N_STEP * V;
    float *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    lane la;
    lane_make(&la, 60, 7, V);
    kvt_context_params cp = base_params(KVT_SPARSE_ASYNCSPADE);
    kvt_sparse_dims d = {m->hp.n_layer, m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim, m->hp.head_dim_v, cp.n_ctx, 2,
                         KVT_TYPE_F16, {0}, true, 0};
    cp.sparse.seqs = 1;
    cp.kv_fast_bytes = kvt_sparse_summary_bytes(&cp.sparse, &d) + 8 * block_bytes(m, cp.kv_block);
    cp.kv_host_bytes = 8 << 20;
    kvt_err err = {0}, e2 = {0};
    kvt_status st = alone(m, &cp, &la, 0, ref, &err), kst = KVT_OK;
    kvt_context *ctx = NULL;
    kvt_sparse_ksum *k = NULL;
    kvt_sparse_totals t0 = {0}, t1 = {0};
    int32_t a = -1;
    if (!st) st = kvt_context_init(m, &cp, &ctx, &err);
    if (!st) st = seq_new(ctx, &a, &err);
    if (!st) st = kvt_decode_prompt(ctx, a, la.prompt, la.n_prompt, false, &err);
    for (int j = 0; !st && j < N_STEP; j++) {
        if (j == 6) { // 66 positions held
            kvt_sparse_totals_get(kvt_context_sparse(ctx), &t0);
            kst = kvt_sparse_seq_keep(kvt_context_sparse(ctx), a, 64, &k, &e2);
            kvt_sparse_totals_get(kvt_context_sparse(ctx), &t1);
        }
        st = kvt_decode_seq(ctx, a, &la.step[j], 1, false, &err);
        if (!st) memcpy(got + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
    }
    kvt_sparse_ksum_free(k);
    kvt_context_free(ctx);
    test_result(!st && kst == KVT_ERR_BUDGET && strstr(e2.msg, "reserved") && !k && t1.summary_kept == 0 &&
                    t1.summary_held == t0.summary_held && same(ref, got, n),
                "sparse_seq: key summaries taken from a running sequence without room in the --kv-fast reservation: refused "
                "(the reservation named), nothing kept or held more, the sequence decodes on as alone, bit for bit",
                "%s (status %s: %s; kept %lld, held %lld then %lld; logits %s)", st ? err.msg : "figures",
                kvt_status_str(kst), e2.msg, (long long)t1.summary_kept, (long long)t0.summary_held,
                (long long)t1.summary_held, same(ref, got, n) ? "same" : "differ");
    free(ref);
    free(got);
}

// A prompt in parts (the last of one token, as a prompt cache's remainder or a scheduler's chunk leaves it) attends
// as in one call: prompt tokens are dense whatever the call's size (kvt_decode_prompt).
static void test_prompt_parts(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    const int64_t n = (int64_t)N_STEP * V;
    float *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    lane la;
    lane_make(&la, 40, 0, V);
    const kvt_sparse_mode modes[] = {KVT_SPARSE_QUEST, KVT_SPARSE_ASYNCSPADE};
    bool ok = true;
    kvt_err err = {0};
    for (int mi = 0; ok && mi < 2; mi++) {
        const kvt_context_params cp = base_params(modes[mi]);
        ok = !alone(m, &cp, &la, 0, ref, &err) && !alone(m, &cp, &la, la.n_prompt - 1, got, &err) && same(ref, got, n);
    }
    test_result(ok, "sparse_seq: a prompt whose last part is one token (kvt_decode_prompt) = the prompt in one call, bit for bit",
                "%s", err.msg[0] ? err.msg : "logits differ");
    free(ref);
    free(got);
}

// Quest: decode a's steps, truncate in mid-page, decode b's steps from there: = a sequence that decoded a's
// kept steps then b's alone (the open page's bounds are rebuilt from the keys kept, not widened by the ones
// dropped); the records of the dropped steps go.
static void test_truncate(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    const int64_t n = (int64_t)N_STEP * V;
    const int keep = 2; // positions 41 + 2 = 43: mid-page (page 4)
    float *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    lane la, lb, lab;
    lane_make(&la, 41, 0, V);
    lane_make(&lb, 41, 4, V);
    lab = la;
    for (int j = keep; j < N_STEP; j++) lab.step[j] = lb.step[j];
    kvt_context_params cp = base_params(KVT_SPARSE_QUEST);
    kvt_err err = {0};
    kvt_status st = alone(m, &cp, &lab, 0, ref, &err);
    kvt_context *ctx = NULL;
    int32_t a = -1;
    if (!st) st = kvt_context_init(m, &cp, &ctx, &err);
    if (!st) st = seq_new(ctx, &a, &err);
    if (!st) st = kvt_decode_seq(ctx, a, la.prompt, la.n_prompt, false, &err);
    for (int j = 0; !st && j < N_STEP; j++) {
        st = kvt_decode_seq(ctx, a, &la.step[j], 1, false, &err);
        if (!st) memcpy(got + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
    }
    const bool first_differs = !st && !same(ref + (int64_t)keep * V, got + (int64_t)keep * V, (int64_t)(N_STEP - keep) * V);
    if (!st) kvt_context_seq_truncate(ctx, a, la.n_prompt + keep);
    int64_t steps = 0;
    if (!st) kvt_sparse_steps(kvt_context_sparse(ctx), a, &steps);
    for (int j = keep; !st && j < N_STEP; j++) {
        st = kvt_decode_seq(ctx, a, &lb.step[j], 1, false, &err);
        if (!st) memcpy(got + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
    }
    kvt_context_free(ctx);
    test_result(!st && same(ref, got, n) && steps == keep && first_differs,
                "sparse_seq: quest after a truncate in mid-page = the kept tokens then the new ones alone, bit for bit; records cut",
                "%s (records after the truncate %lld)", st ? err.msg : "logits differ", (long long)steps);
    free(ref);
    free(got);
}

// What an asyncspade step leaves that depends on its selection: the step's record (positions attended, and with stats
// the mass recall and oracle overlap of its final sets) and, once the worker is done, every (layer, KV head)'s
// selection (sync: the step's final set; worker: its predicted set of the next step).
typedef struct {
    int64_t selected, context, sel_pos;
    double mass, ovl;
    int32_t *sel; // [n_layer][Hkv][n_ctx], rows of nsel entries, the rest -1
} trunc_snap;

static void trunc_snap_take(kvt_context *ctx, int32_t seq, trunc_snap *o) {
    kvt_sparse *s = kvt_context_sparse(ctx);
    kvt_sparse_seq *q = s->seqs[seq];
    kvt_sparse_wait_seq(s, q);
    int64_t n = 0;
    const kvt_sparse_step *st = kvt_sparse_steps(s, seq, &n);
    o->selected = n ? st[n - 1].selected : -1, o->context = n ? st[n - 1].context : -1;
    o->mass = n ? st[n - 1].mass_recall : -2.0, o->ovl = n ? st[n - 1].oracle_overlap : -2.0;
    o->sel_pos = q->lay[s->d.n_layer - 1].sel_pos;
    const int64_t C = s->d.n_ctx, H = s->d.n_head_kv;
    for (int64_t i = 0; i < s->d.n_layer * H * C; i++) o->sel[i] = -1;
    for (int32_t l = 0; l < s->d.n_layer; l++) {
        const kvt_sparse_layer *ly = &q->lay[l];
        for (int64_t kh = 0; ly->sel && kh < H; kh++) {
            memcpy(o->sel + (l * H + kh) * C, ly->sel + kh * ly->cap, (size_t)ly->nsel[kh] * sizeof(int32_t));
        }
    }
}

static bool trunc_snap_same(const trunc_snap *a, const trunc_snap *b, int64_t n_sel) {
    return a->selected == b->selected && a->context == b->context && a->sel_pos == b->sel_pos && a->mass == b->mass &&
           a->ovl == b->ovl && memcmp(a->sel, b->sel, (size_t)n_sel * sizeof(int32_t)) == 0;
}

// asyncspade: a sequence that decoded 24 steps after a 40-token prompt, truncated to n and fed the same tokens again
// (those of the prompt as a prompt, the steps one at a time) = a fresh context fed them once, bit for bit: each step's
// logits, record and selections, for truncates 1 to 28 positions back (in a store block of 8 and at its edge, in a key
// block of 16 and at its edge, inside the prompt, twice without a token between); before, the query history restarted
// after any truncate and the first prediction used the rows of the positions cut. A truncate 44 back (past the query
// log) followed by a prompt of 20 tokens is exact too (the prompt refills the window). The reference runs another
// thread count and store block size. With --sparse-keep the hysteresis' pages of step n - 1 come back too
// (--sparse-share-layers' shares do not: they restart after a truncate, docs/SPARSE.md).
static void test_truncate_history(const kvt_model *m) {
    enum { NP = 40, NS = 24, NT = NP + NS };
    const int32_t V = m->hp.n_vocab;
    int32_t toks[NT];
    for (int i = 0; i < NT; i++) toks[i] = 1 + (int32_t)((i * 29 + 11) % (V - 1));
    static const int64_t cuts[][2] = {{63, 0}, {56, 0}, {45, 0}, {48, 0}, {56, 50}, {41, 0}, {36, 0}, {20, 0}};
    const int n_cuts = (int)(sizeof cuts / sizeof cuts[0]);
    for (int v = 0; v < 4; v++) {
        kvt_context_params cp = base_params(KVT_SPARSE_ASYNCSPADE);
        cp.sparse.stats = true;
        kvt_context_params cr = cp;
        cr.n_threads = 1, cr.kv_block = 16;
        const char *name = "the worker";
        if (v == 1) {
            name = "sync, re-rank of pages";
            cp.sparse.sync = true, cp.sparse.rerank = 4, cp.sparse.block = 4, cp.sparse.rerank_block = 4;
            cr = cp, cr.n_threads = 3;
        } else if (v == 2) {
            name = "the worker, window 16, 4-bit copies, re-rank";
            cp.sparse.window = 16, cp.sparse.key_bits = 4, cp.sparse.rerank = 2, cp.sparse.budget = 0, cp.sparse.budget_frac = 0.25;
            cr = cp, cr.kv_block = 4;
        } else if (v == 3) { // --sparse-preset keep's flags: the hysteresis of step n - 1 comes back with the history
            name = "the worker, KEEP's flags (hysteresis)";
            cp.sparse.rerank = 4, cp.sparse.block = 4, cp.sparse.block_sum = true, cp.sparse.rerank_block = 4;
            cp.sparse.prefetch_top = 0.5, cp.sparse.keep = 0.25, cp.sparse.rerank_qbits = 8;
            cr = cp, cr.n_threads = 1, cr.kv_block = 16;
        }
        kvt_err err = {0};
        kvt_context *R = NULL, *A = NULL;
        kvt_status st = kvt_context_init(m, &cr, &R, &err);
        if (!st) st = kvt_context_init(m, &cp, &A, &err);
        const int64_t C = cp.n_ctx, n_sel = (int64_t)m->hp.n_layer * m->hp.n_head_kv * C;
        float *ref = malloc((size_t)NT * V * 4);
        trunc_snap rs[NT], got = {0};
        for (int i = 0; i < NT; i++) rs[i].sel = calloc((size_t)n_sel, sizeof(int32_t));
        got.sel = calloc((size_t)n_sel, sizeof(int32_t));
        // the reference: the prompt, then the steps
        if (!st) st = kvt_decode_prompt(R, 0, toks, NP, false, &err);
        for (int i = NP; !st && i < NT; i++) {
            st = kvt_decode_seq(R, 0, toks + i, 1, false, &err);
            if (!st) memcpy(ref + (int64_t)i * V, kvt_context_logits(R), (size_t)V * 4);
            if (!st) trunc_snap_take(R, 0, &rs[i]);
        }
        if (!st) st = kvt_decode_prompt(A, 0, toks, NP, false, &err);
        for (int i = NP; !st && i < NT; i++) st = kvt_decode_seq(A, 0, toks + i, 1, false, &err);
        int bad = -1, bad_pos = -1;
        const char *what = "";
        for (int c = 0; !st && bad < 0 && c < n_cuts; c++) {
            kvt_context_truncate(A, cuts[c][0]);
            if (cuts[c][1] > 0) kvt_context_truncate(A, cuts[c][1]);
            const int64_t n = cuts[c][1] > 0 ? cuts[c][1] : cuts[c][0];
            if (n < NP) st = kvt_decode_prompt(A, 0, toks + n, NP - n, false, &err);
            for (int64_t i = n > NP ? n : NP; !st && bad < 0 && i < NT; i++) {
                st = kvt_decode_seq(A, 0, toks + i, 1, false, &err);
                if (st) break;
                trunc_snap_take(A, 0, &got);
                const bool logits = same(ref + i * V, kvt_context_logits(A), V), sel = trunc_snap_same(&rs[i], &got, n_sel);
                if (!logits || !sel) bad = c, bad_pos = (int)i, what = !sel ? (logits ? "selections" : "logits and selections") : "logits";
            }
        }
        kvt_context_free(R);
        kvt_context_free(A);
        char title[256];
        snprintf(title, sizeof title,
                 "sparse_seq: asyncspade (%s): truncated to n (1-44 back, in and at blocks, in the prompt) and fed the same "
                 "tokens again = a fresh sequence: logits, records and selections bit for bit", name);
        test_result(!st && bad < 0, title, "%s (truncate to %lld, first difference at position %d)",
                    st ? err.msg : what, bad >= 0 ? (long long)(cuts[bad][1] > 0 ? cuts[bad][1] : cuts[bad][0]) : -1LL,
                    bad_pos);
        for (int i = 0; i < NT; i++) free(rs[i].sel);
        free(got.sel);
        free(ref);
    }
}

// Summary memory: held per sequence as it grows, freed with it; a bounded fast tier reserves seqs sets.
static void test_summary_budget(const kvt_model *m) {
    lane la, lb;
    lane_make(&la, 60, 0, m->hp.n_vocab);
    lane_make(&lb, 60, 1, m->hp.n_vocab);
    kvt_context_params cp = base_params(KVT_SPARSE_ASYNCSPADE);
    kvt_sparse_dims d = {m->hp.n_layer, m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim, m->hp.head_dim_v, cp.n_ctx, 2,
                         KVT_TYPE_F16, {0}, true, 0};
    const int64_t one = kvt_sparse_summary_bytes(&cp.sparse, &d); // one sequence of n_ctx positions
    cp.sparse.seqs = 2;
    const int64_t two = kvt_sparse_summary_bytes(&cp.sparse, &d);
    cp.sparse.seqs = 0;
    kvt_err err = {0};
    kvt_context *ctx = NULL;
    int32_t a = -1, b = -1;
    kvt_status st = kvt_context_init(m, &cp, &ctx, &err); // unbounded: no limit, memory follows the sequences
    if (!st) st = seq_new(ctx, &a, &err);
    if (!st) st = kvt_decode_seq(ctx, a, la.prompt, la.n_prompt, false, &err);
    const int64_t h1 = st ? -1 : kvt_sparse_summary_held(kvt_context_sparse(ctx));
    if (!st) st = kvt_context_seq_fork(ctx, a, &b, &err);
    const int64_t h2 = st ? -1 : kvt_sparse_summary_held(kvt_context_sparse(ctx));
    if (!st) kvt_context_seq_free(ctx, a), kvt_context_seq_free(ctx, b);
    const int64_t h3 = st ? -1 : kvt_sparse_summary_held(kvt_context_sparse(ctx));
    kvt_sparse_totals t0 = {0}, t1 = {0};
    if (!st) kvt_sparse_totals_get(kvt_context_sparse(ctx), &t0);
    // a new sequence of the same length takes the freed buffers back (pooled), not new memory, and decodes as before
    float *l1 = malloc((size_t)m->hp.n_vocab * sizeof *l1);
    if (!st) st = seq_new(ctx, &a, &err);
    if (!st) st = kvt_decode_seq(ctx, a, la.prompt, la.n_prompt, false, &err);
    if (!st && l1) memcpy(l1, kvt_context_logits(ctx), (size_t)m->hp.n_vocab * sizeof *l1);
    if (!st) kvt_sparse_totals_get(kvt_context_sparse(ctx), &t1);
    kvt_context_free(ctx);
    ctx = NULL;
    bool same = false; // the logits of a fresh context's sequence
    if (!st && l1 && !kvt_context_init(m, &cp, &ctx, &err) && !seq_new(ctx, &b, &err) &&
        !kvt_decode_seq(ctx, b, la.prompt, la.n_prompt, false, &err)) {
        same = !memcmp(l1, kvt_context_logits(ctx), (size_t)m->hp.n_vocab * sizeof *l1);
    }
    kvt_context_free(ctx);
    free(l1);
    test_result(!st && two == 2 * one && h1 > 0 && h1 <= one && h2 > h1 && h2 < 2 * h1 && h3 == 0,
                "sparse_seq: summaries held grow with the sequences (a fork shares its parent's whole blocks), freed with them; reservation scales with --sparse-seqs",
                "%s (one %lld, two %lld, held %lld, %lld, %lld)", st ? err.msg : "figures", (long long)one, (long long)two,
                (long long)h1, (long long)h2, (long long)h3);
    test_result(!st && t0.summary_pooled > 0 && t0.summary_pooled <= one && t1.summary_reuses > t0.summary_reuses &&
                    t1.summary_pooled < t0.summary_pooled && same,
                "sparse_seq: freed sequences' summary buffers are kept (at most twice one sequence's at n_ctx) and a new sequence "
                "takes them back, with the logits of a fresh context",
                "%s (pooled %lld then %lld, reuses %lld then %lld, one %lld, same logits %d)", st ? err.msg : "figures",
                (long long)t0.summary_pooled, (long long)t1.summary_pooled, (long long)t0.summary_reuses,
                (long long)t1.summary_reuses, (long long)one, same);
    // bounded: reservation for 1 sequence, a second full one does not fit; for 2 it does
    const int64_t blk = block_bytes(m, cp.kv_block);
    for (int seqs = 1; seqs <= 2; seqs++) {
        cp.sparse.seqs = seqs;
        cp.kv_fast_bytes = kvt_sparse_summary_bytes(&cp.sparse, &d) + 8 * blk;
        cp.kv_host_bytes = 8 << 20;
        ctx = NULL;
        st = kvt_context_init(m, &cp, &ctx, &err);
        if (!st) st = seq_new(ctx, &a, &err);
        if (!st) st = kvt_decode_seq(ctx, a, la.prompt, la.n_prompt, false, &err);
        if (!st) st = seq_new(ctx, &b, &err);
        if (!st) st = kvt_decode_seq(ctx, b, lb.prompt, lb.n_prompt, false, &err);
        for (int j = 0; !st && j < N_STEP; j++) {
            const int32_t seqs2[2] = {a, b}, toks[2] = {la.step[j], lb.step[j]};
            st = kvt_decode_batch(ctx, seqs2, toks, 2, &err);
        }
        const int64_t held = ctx ? kvt_sparse_summary_held(kvt_context_sparse(ctx)) : -1;
        if (!st && seqs == 2) { // under the reservation: what is held and what the pool keeps stay within it
            kvt_context_seq_free(ctx, b);
            int32_t c = -1;
            kvt_sparse_totals t = {0};
            if (!(st = seq_new(ctx, &c, &err))) st = kvt_decode_seq(ctx, c, lb.prompt, lb.n_prompt, false, &err);
            kvt_sparse_totals_get(kvt_context_sparse(ctx), &t);
            const bool fit0 = t.summary_held + t.summary_pooled <= kvt_sparse_summary_bytes(&cp.sparse, &d);
            // summaries kept (c's, as a prefix cache keeps them: outside the reservation), a new sequence in c's place,
            // then the kept ones freed: their buffers join the pool only as far as the reservation allows
            kvt_sparse_ksum *k = NULL;
            int32_t e = -1;
            if (!st) st = kvt_sparse_seq_free_keep(kvt_context_sparse(ctx), c, lb.n_prompt, &k, &err);
            if (!st) kvt_context_seq_free(ctx, c);
            if (!st && !(st = seq_new(ctx, &e, &err))) st = kvt_decode_seq(ctx, e, lb.prompt, lb.n_prompt, false, &err);
            kvt_sparse_totals tk = {0};
            kvt_sparse_totals_get(kvt_context_sparse(ctx), &tk);
            const bool had_k = k != NULL;
            kvt_sparse_ksum_free(k);
            kvt_sparse_totals_get(kvt_context_sparse(ctx), &t);
            if (!st && (!fit0 || !had_k || tk.summary_kept <= 0 || t.summary_kept != 0 ||
                        t.summary_held + t.summary_pooled > kvt_sparse_summary_bytes(&cp.sparse, &d))) {
                st = KVT_ERR_BUDGET;
                snprintf(err.msg, sizeof err.msg, "held %lld + pooled %lld past the reservation %lld (kept %lld, then %lld)",
                         (long long)t.summary_held, (long long)t.summary_pooled,
                         (long long)kvt_sparse_summary_bytes(&cp.sparse, &d), (long long)tk.summary_kept,
                         (long long)t.summary_kept);
            }
        }
        kvt_context_free(ctx);
        if (seqs == 1) {
            test_result(st == KVT_ERR_BUDGET && strstr(err.msg, "--sparse-seqs"),
                        "sparse_seq: summaries past the --kv-fast reservation are refused, naming --sparse-seqs", "status %d: %s",
                        st, err.msg);
        } else {
            test_result(!st && held <= kvt_sparse_summary_bytes(&cp.sparse, &d),
                        "sparse_seq: two sequences fit a reservation for two (summaries kept as one ends, then freed: held "
                        "and pooled within it)", "%s (held %lld)", st ? err.msg : "over",
                        (long long)held);
        }
    }
}

// Summary buffers warmed ahead of use (kvt_sparse_warm, serve's idle engine): pooled within their bound and the
// reservation; a sequence takes those of the smallest room that holds its need and less than twice it, and decodes bit
// for bit as without them. Variants: one room (n_ctx 96, min_set past any set): a 60-token prompt takes the room of 96
// (its own size would be 64), a 20-token one leaves it pooled; the same under a reservation; halved rooms (n_ctx 256,
// min_set 1 byte: rooms of 256, 128 and 64 positions): a 100-token prompt takes the room of 128 (its own size 112),
// the 20-token one the room of 64 (its own size).
static void test_summary_warm(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    const kvt_sparse_mode modes[] = {KVT_SPARSE_QUEST, KVT_SPARSE_ASYNCSPADE};
    for (int mi = 0; mi < 2; mi++) {
        for (int variant = 0; variant < 3; variant++) {
            const bool bounded = variant == 1, rooms = variant == 2;
            const int64_t min_set = rooms ? 1 : INT64_MAX;
            lane la, ls;
            lane_make(&la, rooms ? 100 : 60, 0, V);
            lane_make(&ls, 20, 1, V);
            kvt_context_params cp = base_params(modes[mi]);
            if (rooms) cp.n_ctx = 256;
            kvt_sparse_dims d = {m->hp.n_layer, m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim, m->hp.head_dim_v,
                                 cp.n_ctx, 2, KVT_TYPE_F16, {0}, true, 0};
            const int64_t one = kvt_sparse_summary_bytes(&cp.sparse, &d);
            if (bounded) { // a reservation for two sequences: the warmed buffers and the short one's fit beside it
                cp.sparse.seqs = 2;
                cp.kv_fast_bytes = kvt_sparse_summary_bytes(&cp.sparse, &d) + 32 * block_bytes(m, cp.kv_block);
                cp.kv_host_bytes = 8 << 20;
            }
            float *ref = malloc((size_t)N_STEP * V * sizeof *ref), *got = malloc((size_t)N_STEP * V * sizeof *got);
            kvt_err err = {0};
            kvt_status st = ref && got ? alone(m, &cp, &la, 0, ref, &err) : KVT_ERR_NOMEM;
            kvt_context *ctx = NULL;
            int32_t a = -1, b = -1;
            int64_t cold = -1; // the prompt's summaries held without warming
            if (!st) st = kvt_context_init(m, &cp, &ctx, &err);
            if (!st) st = seq_new(ctx, &a, &err);
            if (!st) st = kvt_decode_prompt(ctx, a, la.prompt, la.n_prompt, false, &err);
            if (!st) cold = kvt_sparse_summary_held(kvt_context_sparse(ctx));
            kvt_context_free(ctx);
            ctx = NULL;
            if (!st) st = kvt_context_init(m, &cp, &ctx, &err);
            kvt_sparse *sp = ctx ? kvt_context_sparse(ctx) : NULL;
            int calls = 0;
            while (!st && calls < 10000 && kvt_sparse_warm(sp, cp.n_ctx, min_set, -1)) calls++;
            kvt_sparse_totals t0 = {0}, t1 = {0}, tp = {0}, t2 = {0};
            if (sp) kvt_sparse_totals_get(sp, &t0);
            const bool again = sp && kvt_sparse_warm(sp, cp.n_ctx, min_set, -1);
            if (!st) st = seq_new(ctx, &b, &err);
            if (!st) st = kvt_decode_seq(ctx, b, ls.prompt, ls.n_prompt, false, &err);
            if (sp) kvt_sparse_totals_get(sp, &t1);
            if (!st) st = seq_new(ctx, &a, &err);
            if (!st) st = kvt_decode_prompt(ctx, a, la.prompt, la.n_prompt, false, &err);
            if (sp) kvt_sparse_totals_get(sp, &tp);
            for (int j = 0; !st && j < N_STEP; j++) {
                st = kvt_decode_seq(ctx, a, &la.step[j], 1, false, &err);
                if (!st) memcpy(got + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
            }
            if (sp) kvt_sparse_totals_get(sp, &t2);
            kvt_context_free(ctx);
            // every room's set pooled (rooms: more than one set), within twice one set
            const bool pooled = t0.summary_warm_bytes > 0 && t0.summary_pooled == t0.summary_warm_bytes &&
                                (rooms ? t0.summary_pooled > one : t0.summary_pooled <= one) && t0.summary_pooled <= 2 * one;
            // the short prompt: buffers of its own (one room), or the smallest room's, its own size (rooms)
            const bool short_ok = rooms ? t1.summary_reuses > t0.summary_reuses && t1.summary_pooled < t0.summary_pooled
                                        : t1.summary_reuses == t0.summary_reuses && t1.summary_pooled == t0.summary_pooled;
            // the long one: a room's buffers, larger than its own size, and no growth over its steps
            const int64_t held_a = tp.summary_held - t1.summary_held;
            const bool taken = tp.summary_reuses > t1.summary_reuses && tp.summary_pooled < t1.summary_pooled &&
                               held_a > cold && held_a < 2 * cold && t2.summary_reuses == tp.summary_reuses &&
                               t2.summary_held == tp.summary_held;
            const bool within = !bounded || t2.summary_held <= t2.summary_reserved;
            char name[256];
            snprintf(name, sizeof name,
                     "sparse_seq: %s summaries warmed ahead of use%s: pooled within their bound, a sequence takes the "
                     "smallest room under twice its need, bit for bit as without",
                     mi ? "asyncspade" : "quest", bounded ? " under a reservation" : rooms ? " (halved rooms)" : "");
            test_result(!st && calls > 0 && !again && pooled && short_ok && taken && within && same(ref, got, (int64_t)N_STEP * V),
                        name, "%s (calls %d, again %d, warmed %lld, pooled %lld of %lld, reuses %lld / %lld / %lld / %lld, "
                        "pooled %lld / %lld / %lld, held %lld (cold %lld), %lld of %lld)",
                        st ? err.msg : "figures", calls, again, (long long)t0.summary_warm_bytes, (long long)t0.summary_pooled,
                        (long long)one, (long long)t0.summary_reuses, (long long)t1.summary_reuses,
                        (long long)tp.summary_reuses, (long long)t2.summary_reuses, (long long)t1.summary_pooled,
                        (long long)tp.summary_pooled, (long long)t2.summary_pooled, (long long)held_a, (long long)cold,
                        (long long)t2.summary_held, (long long)t2.summary_reserved);
            free(ref);
            free(got);
        }
    }
}

// Beam search under sparse attention: every schedule (batched or not) keeps the beams of layerwise, bit for bit.
static void test_beam(const kvt_model *m) {
    const kvt_sparse_mode modes[] = {KVT_SPARSE_QUEST, KVT_SPARSE_ASYNCSPADE};
    for (int mi = 0; mi < 2; mi++) {
        for (int batched = 0; batched < 2; batched++) {
            kvt_beam_result ref = {0}, r = {0};
            bool ok = true;
            char why[KVT_ERR_MSG_MAX + 64] = "";
            for (int s = 0; ok && s < KVT_BEAM_SCHED_COUNT; s++) {
                kvt_context_params cp = base_params(modes[mi]);
                cp.n_ctx = 64;
                cp.sparse.budget = 10;
                kvt_beam_params bp = kvt_beam_params_default();
                bp.n_beams = 3;
                bp.width = 2;
                bp.step = 4;
                bp.n_tokens = 12;
                bp.batched = batched;
                bp.stop_at_eog = false;
                bp.schedule = (kvt_beam_sched)s;
                bp.fast_budget = 6 * block_bytes(m, cp.kv_block); // a step's continuations go in several groups
                int32_t prompt[20];
                for (int i = 0; i < 20; i++) prompt[i] = 1 + (i * 53) % (m->hp.n_vocab - 1);
                kvt_context *ctx = NULL;
                kvt_err err = {0};
                kvt_status st = kvt_context_init(m, &cp, &ctx, &err);
                kvt_beam_result *o = s == 0 ? &ref : &r;
                if (!st) st = kvt_beam_run(ctx, &bp, prompt, 20, o, &err);
                if (!st && kvt_sparse_summary_held(kvt_context_sparse(ctx)) != 0) {
                    st = kvt_errorf(&err, KVT_ERR_INVALID_ARG, "%lld summary bytes held after the search",
                                    (long long)kvt_sparse_summary_held(kvt_context_sparse(ctx)));
                }
                kvt_context_free(ctx);
                if (st) {
                    ok = false;
                    snprintf(why, sizeof why, "%s: %s", kvt_beam_sched_name(bp.schedule), err.msg);
                } else if (s > 0) {
                    bool many = false;
                    for (int32_t i = 0; i < r.n_steps; i++) many |= r.groups_per_step[i] > 1;
                    ok = r.n_beams == ref.n_beams && many;
                    for (int32_t i = 0; ok && i < r.n_beams; i++) {
                        ok = r.beams[i].n == ref.beams[i].n && r.beams[i].score == ref.beams[i].score &&
                             !memcmp(r.beams[i].ids, ref.beams[i].ids, (size_t)r.beams[i].n * sizeof(int32_t));
                    }
                    if (!ok) snprintf(why, sizeof why, "%s: beams differ from layerwise (or one group per step)", kvt_beam_sched_name(bp.schedule));
                    kvt_beam_result_free(&r);
                }
            }
            kvt_beam_result_free(&ref);
            char name[160];
            snprintf(name, sizeof name, "sparse_seq: beam (%s) under %s: every schedule keeps layerwise's beams, bit for bit",
                     batched ? "batched" : "one by one", kvt_sparse_mode_name(modes[mi]));
            test_result(ok, name, "%s", why);
        }
    }
}

// beam's default reservation under asyncspade (kvt_sparse_fork_sets: the forks share sequence 0's key summaries): 4 sets
// for 3 beams x 2 at n_ctx 1024 where forks that copy (--sparse-rerank-resid) need 7, quest's 3; a fast tier of that
// reservation and 8 KV blocks keeps the beams of an unbounded store, bit for bit.
static void test_beam_reserve(const kvt_model *m) {
    kvt_context_params cp = base_params(KVT_SPARSE_ASYNCSPADE);
    cp.n_ctx = 1024;
    cp.sparse.budget = 10;
    kvt_beam_params bp = kvt_beam_params_default();
    bp.n_beams = 3, bp.width = 2, bp.step = 4, bp.n_tokens = 12, bp.stop_at_eog = false;
    const int64_t live = 1 + (int64_t)bp.n_beams * bp.width; // (cmd_beam's)
    const int32_t sets = kvt_sparse_fork_sets(&cp.sparse, cp.n_ctx, live, bp.n_tokens);
    kvt_sparse_params qp = cp.sparse, rp = cp.sparse;
    qp.mode = KVT_SPARSE_QUEST; // (pages of 4)
    rp.rerank = 2.0, rp.rerank_resid = 0.5;
    const bool units = sets == 4 && kvt_sparse_fork_sets(&qp, cp.n_ctx, live, bp.n_tokens) == 3 &&
                       kvt_sparse_fork_sets(&rp, cp.n_ctx, live, bp.n_tokens) == live;
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = 1 + (i * 53) % (m->hp.n_vocab - 1);
    kvt_beam_result ref = {0}, r = {0};
    kvt_err err = {0};
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(m, &cp, &ctx, &err);
    if (!st) st = kvt_beam_run(ctx, &bp, prompt, 40, &ref, &err);
    kvt_context_free(ctx);
    kvt_sparse_dims d = {m->hp.n_layer, m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim, m->hp.head_dim_v, cp.n_ctx, 2,
                         KVT_TYPE_F16, {0}, true, 0};
    cp.sparse.seqs = sets;
    cp.kv_fast_bytes = kvt_sparse_summary_bytes(&cp.sparse, &d) + 8 * block_bytes(m, cp.kv_block);
    cp.kv_host_bytes = 8 << 20;
    ctx = NULL;
    if (!st) st = kvt_context_init(m, &cp, &ctx, &err);
    if (!st) st = kvt_beam_run(ctx, &bp, prompt, 40, &r, &err);
    kvt_context_free(ctx);
    bool same_beams = !st && r.n_beams == ref.n_beams;
    for (int32_t i = 0; same_beams && i < r.n_beams; i++) {
        same_beams = r.beams[i].n == ref.beams[i].n && r.beams[i].score == ref.beams[i].score &&
                     !memcmp(r.beams[i].ids, ref.beams[i].ids, (size_t)r.beams[i].n * sizeof(int32_t));
    }
    kvt_beam_result_free(&ref);
    kvt_beam_result_free(&r);
    test_result(units && same_beams, "sparse_seq: beam's reservation under asyncspade: 4 sets (not 7) hold 3 x 2 beams; the same beams as unbounded",
                "%s (sets %d)", st ? err.msg : units ? "beams differ" : "sets", sets);
}

// kvt_beam_result_rescore with a dense context of the same model (beam --rescore-dense): oracle with K >= the context is
// dense, so every beam's dense score is its own score, bit for bit; asyncspade at a small budget changes the logits, so
// some beam's dense score differs from its score, and rating those ids again gives the same bits (deterministic).
static void test_beam_rescore(const kvt_model *m) {
    const kvt_sparse_mode modes[] = {KVT_SPARSE_ORACLE, KVT_SPARSE_ASYNCSPADE};
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = 1 + (i * 53) % (m->hp.n_vocab - 1);
    for (int mi = 0; mi < 2; mi++) {
        kvt_context_params cp = base_params(modes[mi]);
        cp.n_ctx = 128;
        cp.sparse.budget = mi == 0 ? 128 : 6;
        kvt_context_params dc = kvt_context_params_default();
        dc.n_ctx = cp.n_ctx;
        dc.n_threads = cp.n_threads;
        kvt_beam_params bp = kvt_beam_params_default();
        bp.n_beams = 3, bp.width = 2, bp.step = 4, bp.n_tokens = 16, bp.stop_at_eog = false;
        kvt_beam_result r = {0};
        kvt_err err = {0};
        kvt_context *ctx = NULL;
        kvt_beam_prm *dense = NULL;
        kvt_status st = kvt_context_init(m, &cp, &ctx, &err);
        if (!st) st = kvt_beam_run(ctx, &bp, prompt, 40, &r, &err);
        if (!st) st = kvt_beam_prm_init(m, &dc, &dense, &err);
        if (!st) st = kvt_beam_result_rescore(dense, prompt, 40, &r, &err);
        bool ok = !st && r.n_beams == bp.n_beams, differ = false, again = true;
        double first[8] = {0};
        for (int32_t i = 0; ok && i < r.n_beams && i < 8; i++) {
            ok = r.beams[i].rescored;
            first[i] = r.beams[i].rescore;
            differ |= r.beams[i].rescore != r.beams[i].score;
        }
        if (ok) st = kvt_beam_result_rescore(dense, prompt, 40, &r, &err);
        for (int32_t i = 0; ok && !st && i < r.n_beams && i < 8; i++) again &= r.beams[i].rescore == first[i];
        kvt_beam_prm_free(dense);
        kvt_context_free(ctx);
        kvt_beam_result_free(&r);
        if (mi == 0) {
            test_result(ok && !st && !differ, "sparse_seq: beam --rescore-dense under oracle with K >= context: the dense score is the score, bit for bit",
                        "%s", st ? err.msg : "scores differ");
        } else {
            test_result(ok && !st && differ && again,
                        "sparse_seq: beam --rescore-dense under asyncspade K=6: dense scores differ from the sparse ones, the same bits again",
                        "%s", st ? err.msg : !differ ? "no score differs" : "not deterministic");
        }
    }
}

void test_sparse_seq(const test_env *env) {
    char path[512];
    if (!test_data(env, "qwen3-tiny.gguf", path, sizeof path)) {
        test_skip("sparse_seq", test_data_missing(env, "qwen3-tiny.gguf"));
        return;
    }
    kvt_model *m = NULL;
    kvt_err err = {0};
    if (kvt_model_load(path, false, &m, &err)) {
        test_result(false, "sparse_seq: load qwen3-tiny", "%s", err.msg);
        return;
    }
    test_batch_independence(m);
    test_fork(m);
    test_fork_share(m);
    test_pushed_blocks(m);
    test_query_window(m);
    test_kept_keys(m);
    test_attached_edges(m);
    test_reservation_edges(m);
    test_truncate_again(m);
    test_failed_pass_again(m);
    test_live_keys(m);
    test_live_keys_budget(m);
    test_prompt_parts(m);
    test_truncate(m);
    test_truncate_history(m);
    test_summary_budget(m);
    test_summary_warm(m);
    test_beam(m);
    test_beam_reserve(m);
    test_beam_rescore(m);
    kvt_model_free(m);
}
