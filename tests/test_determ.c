// test_determ.c - the same answer whatever the thread count and the batch (issue 11, section 6).
//
// Bit for bit, on every kernel path this CPU runs (scalar, avx2, avx512):
//  - the matmul entry point gives a row alone the bits it gives it in any batch of rows and tokens;
//  - a small model's logits over a prompt and decoded tokens are the same for 1..4 threads, in the
//    contiguous cache and in the paged store with tiny tiers and a disk, and when the prompt is fed
//    one token at a time (prefill = decode);
//  - kvt_decode_batch gives every sequence the logits it gets alone, for batches of 2..16;
//  - every beam schedule keeps the same beams with the same scores, and a process reward model that
//    is the model itself gives the built-in score.
// Models are made here with `kvtier mkmodel` (no shared data needed).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/attn/attention.h"
#include "../src/base/threadpool.h"
#include "../src/cli/commands.h"
#include "../src/exec/context.h"
#include "../src/kernels/matmul.h"
#include "../src/kernels/quant.h"
#include "../src/sched/beam.h"
#include "test.h"

// ------------------------------------------------------------------ matmul entry point

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static float rng_f(uint64_t *s) { return (float)((rng_next(s) >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0); }

// Row t of X alone (n_tok 1) vs within batches [t0, t0 + nb) and row ranges [r0, r1): the same bits. n elements a row
// (512; 544 too for 32-element blocks: an odd block count, whose last block some kernels take apart).
static void matmul_rows_alone_vs_batch(kvt_isa isa, kvt_type wt, int64_t n) {
    enum { R = 37, NX = 48 };
    char name[160];
    snprintf(name, sizeof name, "determ: %s matmul %s: a row alone = in batches of 2..48 tokens, any row split%s",
             kvt_isa_name(isa), kvt_type_name(wt), n == 512 ? "" : " (17 blocks)");
    const kvt_type_ops *wo = kvt_type_ops_isa(wt, isa);
    if (!wo || !wo->vec_dot) wo = kvt_type_ops_ref(wt);
    const kvt_type dt = wo->vec_dot_type;
    const kvt_type_ops *xo = kvt_type_ops_isa(dt, isa) ? kvt_type_ops_isa(dt, isa) : kvt_type_ops_ref(dt);
    const int64_t wrs = kvt_row_size(wt, n), xrs = kvt_row_size(dt, n);
    uint8_t *W = malloc((size_t)(R * wrs)), *X = malloc((size_t)(NX * xrs));
    float *f = malloc((size_t)n * sizeof *f), *alone = malloc(sizeof(float) * R * NX), *Y = malloc(sizeof(float) * R * NX);
    bool ok = W && X && f && alone && Y;
    uint64_t s = 11 + (uint64_t)wt;
    for (int64_t r = 0; ok && r < R; r++) {
        for (int64_t i = 0; i < n; i++) f[i] = rng_f(&s) * (i % 7 == 0 ? 3.0f : 1.0f);
        wo->from_float(f, W + r * wrs, n);
    }
    for (int64_t t = 0; ok && t < NX; t++) {
        for (int64_t i = 0; i < n; i++) f[i] = rng_f(&s);
        xo->from_float(f, X + t * xrs, n);
    }
    for (int64_t t = 0; ok && t < NX; t++) kvt_matmul_rows_isa(isa, wt, n, W, 0, R, X + t * xrs, 1, alone + t * R, R);
    static const int batches[] = {2, 3, 4, 5, 8, 12, 16, 33, 48}; // 48: past every kernel's tile threshold (matmul_avx2.c)
    static const int64_t splits[][4] = {{0, R, R, R}, {0, 16, 16, R}, {0, 1, 1, R}, {0, 5, 5, 36}};
    char why[160] = "";
    for (size_t b = 0; ok && b < sizeof batches / sizeof *batches; b++) {
        for (size_t sp = 0; ok && sp < sizeof splits / sizeof *splits; sp++) {
            const int nb = batches[b];
            for (int64_t t0 = 0; ok && t0 + nb <= NX; t0 += nb) {
                for (int64_t i = 0; i < R * NX; i++) Y[i] = NAN;
                const int64_t *q = splits[sp];
                kvt_matmul_rows_isa(isa, wt, n, W, q[0], q[1], X + t0 * xrs, nb, Y, R);
                kvt_matmul_rows_isa(isa, wt, n, W, q[2], q[3], X + t0 * xrs, nb, Y, R);
                const int64_t r_end = q[3];
                for (int64_t t = 0; ok && t < nb; t++) {
                    for (int64_t r = 0; ok && r < r_end; r++) {
                        const float a = alone[(t0 + t) * R + r], y = Y[t * R + r];
                        if (memcmp(&a, &y, sizeof a) != 0) {
                            snprintf(why, sizeof why, "batch %d at token %lld, row %lld: %.9g alone, %.9g in the batch", nb,
                                     (long long)(t0 + t), (long long)r, a, y);
                            ok = false;
                        }
                    }
                }
            }
        }
    }
    test_result(ok, name, "%s", why[0] ? why : "out of memory");
    free(W), free(X), free(f), free(alone), free(Y);
}

// ------------------------------------------------------------------ attention alone, with a sliding window

// out [n, heads * dim]: positions [0, n) attended at once (prefill, `threads` threads) or one call per token.
static kvt_status attend_all(kvt_kv *kv, const kvt_attn_params *ap, const float *q, int64_t n, int threads,
                             bool by_token, float *out, kvt_err *err) {
    kvt_threadpool *pool = NULL;
    kvt_status st = kvt_threadpool_init(threads, &pool, err);
    void **scratch = calloc((size_t)threads, sizeof *scratch);
    const int64_t sb = kvt_attn_scratch_bytes(kv, ap->n_head, ap->tile);
    void *ws = malloc((size_t)kvt_attn_workspace_bytes(kv, ap->n_head, threads));
    for (int i = 0; !st && i < threads; i++) {
        if (!scratch || !ws || posix_memalign(&scratch[i], 64, (size_t)sb)) st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    }
    const int64_t row = (int64_t)ap->n_head * kv->head_dim;
    if (!st && !by_token) st = kvt_attention(kv, 0, 0, ap, q, 0, n, out, pool, scratch, ws, err);
    for (int64_t t = 0; !st && by_token && t < n; t++) {
        st = kvt_attention(kv, 0, 0, ap, q + t * row, t, 1, out + t * row, pool, scratch, ws, err);
    }
    for (int i = 0; scratch && i < threads; i++) free(scratch[i]);
    free(scratch);
    free(ws);
    kvt_threadpool_free(pool);
    return st;
}

// heads query heads over kv_heads KV heads; decode splits a token's query heads over the threads (one head a task
// below 64 positions, two past it: with 9 over 3, a task's heads then straddle two KV heads).
static void attention_window(const int HEADS, const int KV_HEADS) {
    enum { DIM = 64, N = 200 };
    kvt_kv_params kp = {KVT_TYPE_F16, 1, KV_HEADS, DIM, DIM, 256, 16, 0};
    kvt_kv *kv = NULL;
    kvt_err err = {0};
    float *k = malloc(sizeof(float) * N * KV_HEADS * DIM), *v = malloc(sizeof(float) * N * KV_HEADS * DIM);
    float *q = malloc(sizeof(float) * N * HEADS * DIM), *ref = malloc(sizeof(float) * N * HEADS * DIM);
    float *o = malloc(sizeof(float) * N * HEADS * DIM);
    kvt_status st = k && v && q && ref && o ? kvt_kv_contig_init(&kp, &kv, &err) : KVT_ERR_NOMEM;
    uint64_t s = 5;
    for (int64_t i = 0; !st && i < (int64_t)N * KV_HEADS * DIM; i++) k[i] = rng_f(&s), v[i] = rng_f(&s);
    for (int64_t i = 0; !st && i < (int64_t)N * HEADS * DIM; i++) q[i] = 2.0f * rng_f(&s);
    if (!st) st = kv->ops->append(kv, 0, 0, 0, N, k, v, &err);
    static const int windows[] = {0, 48, 100};
    for (size_t w = 0; w < sizeof windows / sizeof *windows; w++) {
        kvt_attn_params ap = {HEADS, 0.125f, 0, windows[w]};
        char name[160], why[200] = "";
        snprintf(name, sizeof name,
                 "determ: attention (%d heads, %d KV heads, window %d) of %d positions: prefill on 1 thread = one token "
                 "at a time on 1..4 threads = prefill on 3",
                 HEADS, KV_HEADS, windows[w], N);
        bool ok = !st && !(st = attend_all(kv, &ap, q, N, 1, false, ref, &err));
        for (int t = 1; ok && t <= 4; t++) {
            ok = !(st = attend_all(kv, &ap, q, N, t, true, o, &err)) && !memcmp(ref, o, sizeof(float) * N * HEADS * DIM);
            if (!ok && !st) snprintf(why, sizeof why, "one token at a time on %d threads differs", t);
        }
        ok = ok && !(st = attend_all(kv, &ap, q, N, 3, false, o, &err)) && !memcmp(ref, o, sizeof(float) * N * HEADS * DIM);
        if (!ok && !st && !why[0]) snprintf(why, sizeof why, "prefill on 3 threads differs");
        test_result(ok, name, "%s", st ? err.msg : why);
    }
    kvt_kv_free(kv);
    free(k), free(v), free(q), free(ref), free(o);
}

// ------------------------------------------------------------------ a small model

// Makes a 2-layer llama-architecture model of weight type `type` (mkmodel) at path; false on failure.
static bool make_model(const char *path, const char *type) {
    const char *args[] = {"-q", "-o", path, "--arch", "llama", "--dim", "256", "--layers", "2", "--heads", "4",
                          "--kv-heads", "2", "--ff", "512", "--vocab", "512", "--ctx", "512", "--seed", "3", "--type",
                          type, "-t", "1", NULL};
    return cmd_mkmodel((int)(sizeof args / sizeof *args) - 1, (char **)args) == 0;
}

enum { N_PROMPT = 70, N_GEN = 70, N_POS = N_PROMPT + N_GEN }; // 140 positions: 3 attention chunks

static int32_t prompt_tok(int i, int32_t V) { return 1 + (i * 37 + 5) % (V - 1); }
static int32_t gen_tok(int i, int32_t V) { return 1 + (i * 101 + 13) % (V - 1); }

// Logits [N_POS, V] of the prompt (fed at once, or one token at a time) and of N_GEN decoded tokens.
// last_only: the prompt at once asking for its last row's logits only (the last layer's FFN then runs on that row
// alone, and not at all in the micro-batches before it): rows before N_PROMPT - 1 are left as they were.
static kvt_status run_logits(const kvt_model *m, const kvt_context_params *cp, bool by_token, bool last_only, int n_gen,
                             float *out, kvt_err *err) {
    const int32_t V = m->hp.n_vocab;
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(m, cp, &ctx, err);
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = prompt_tok(i, V);
    if (!st && by_token) {
        for (int i = 0; !st && i < N_PROMPT; i++) {
            st = kvt_decode(ctx, &prompt[i], 1, false, err);
            if (!st) memcpy(out + (int64_t)i * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
        }
    } else if (!st && last_only) {
        st = kvt_decode(ctx, prompt, N_PROMPT, false, err);
        if (!st) memcpy(out + (int64_t)(N_PROMPT - 1) * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
    } else if (!st) {
        st = kvt_decode(ctx, prompt, N_PROMPT, true, err);
        if (!st) memcpy(out, kvt_context_logits(ctx), (size_t)N_PROMPT * V * sizeof(float));
    }
    for (int i = 0; !st && i < n_gen; i++) {
        const int32_t tok = gen_tok(i, V);
        st = kvt_decode(ctx, &tok, 1, false, err);
        if (!st) memcpy(out + (int64_t)(N_PROMPT + i) * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
    }
    kvt_context_free(ctx);
    return st;
}

// First differing position of two [n_pos, V] logits arrays (-1: bitwise equal).
static int64_t first_diff(const float *a, const float *b, int64_t n_pos, int32_t V, double *dmax) {
    *dmax = 0;
    int64_t first = -1;
    for (int64_t i = 0; i < n_pos * V; i++) {
        if (memcmp(&a[i], &b[i], sizeof *a) != 0) {
            if (first < 0) first = i / V;
            *dmax = fmax(*dmax, fabs((double)a[i] - b[i]));
        }
    }
    return first;
}

// full: every variant below; else (the lower kernel paths, to keep the suite fast) 3 threads and the paged
// store with tiny tiers fed token by token.
static void logits_invariant(const kvt_model *m, const char *type, kvt_isa isa, bool full, int n_gen, const char *disk) {
    const int32_t V = m->hp.n_vocab;
    const int64_t n = (int64_t)N_POS * V;
    float *ref = malloc((size_t)n * sizeof *ref), *o = malloc((size_t)n * sizeof *o);
    kvt_err err = {0};
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 256;
    cp.n_threads = 1;
    kvt_status st = ref && o ? run_logits(m, &cp, false, false, n_gen, ref, &err) : KVT_ERR_NOMEM;
    char name[200];
    snprintf(name, sizeof name, "determ: %s %s: logits of 1 thread (contiguous, prompt at once)", kvt_isa_name(isa), type);
    if (st) {
        test_result(false, name, "%s", err.msg);
        free(ref), free(o);
        return;
    }
    // variants: threads, store, prompt fed token by token
    typedef struct {
        const char *what;
        int threads;
        int store; // 0 contiguous, 1 paged unlimited, 2 paged with tiny tiers + disk
        bool by_token;
        bool last_only; // the prompt's last row's logits only (compared from that row on)
        int ubatch;     // micro-batch rows (0: the default)
    } variant;
    static const variant vs[] = {
        {"2 threads", 2, 0, false, false, 0},
        {"3 threads", 3, 0, false, false, 0},
        {"4 threads", 4, 0, false, false, 0},
        {"prompt one token at a time, 2 threads", 2, 0, true, false, 0},
        {"paged store, 1 thread", 1, 1, false, false, 0},
        {"paged store, tiny fast + host tiers and a disk, 3 threads", 3, 2, false, false, 0},
        {"paged store, tiny tiers + disk, 4 threads, prompt token by token", 4, 2, true, false, 0},
        {"prompt's last logits only, 2 threads", 2, 0, false, true, 0},
        {"prompt's last logits only in micro-batches of 16, paged store, 3 threads", 3, 1, false, true, 16},
    };
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) {
        if (!full && i != 1 && i != 6 && i != 8) continue;
        kvt_context_params c = cp;
        c.n_threads = vs[i].threads;
        if (vs[i].ubatch) c.n_ubatch = vs[i].ubatch;
        if (vs[i].store) {
            c.kv_paged = true;
            c.kv_block = 8;
        }
        if (vs[i].store == 2) {
            // one 8-position block of one layer (K and V, f16): 8 * 2 heads * 64 * 2 * 2 bytes
            const int64_t blk = 8LL * m->hp.n_head_kv * m->hp.head_dim * 2 * 2;
            c.kv_fast_bytes = 8 * blk;
            c.kv_host_bytes = 6 * blk;
            c.kv_disk_dir = disk;
        }
        snprintf(name, sizeof name, "determ: %s %s: %s = 1 thread, bit for bit (%d positions)", kvt_isa_name(isa), type,
                 vs[i].what, N_PROMPT + n_gen);
        if (vs[i].store == 2 && !disk) {
            test_skip(name, "no temporary directory for the disk tier");
            continue;
        }
        st = run_logits(m, &c, vs[i].by_token, vs[i].last_only, n_gen, o, &err);
        double dmax = 0;
        const int64_t p0 = vs[i].last_only ? N_PROMPT - 1 : 0; // the first row compared
        int64_t d = st ? -1 : first_diff(ref + p0 * V, o + p0 * V, N_PROMPT + n_gen - p0, V, &dmax);
        if (d >= 0) d += p0;
        test_result(!st && d < 0, name, "%s", st ? err.msg : "differ");
        if (!st && d >= 0) printf("     first differing position %lld, max |diff| %.3g\n", (long long)d, dmax);
    }
    free(ref), free(o);
}

// ------------------------------------------------------------------ batches across sequences

enum { N_SEQ = 16, B_PROMPT = 20, B_STEP = 3 };

// Prefills seq 0, forks N_SEQ - 1 sequences, decodes B_STEP tokens in each, `bs` sequences per
// kvt_decode_batch. logits: [B_STEP, N_SEQ, V].
static kvt_status run_batches(const kvt_model *m, int bs, float *logits, kvt_err *err) {
    const int32_t V = m->hp.n_vocab;
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    cp.kv_paged = true;
    cp.kv_block = 8;
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(m, &cp, &ctx, err);
    int32_t prompt[B_PROMPT];
    for (int i = 0; i < B_PROMPT; i++) prompt[i] = prompt_tok(i, V);
    if (!st) st = kvt_decode(ctx, prompt, B_PROMPT, false, err);
    int32_t seqs[N_SEQ] = {0};
    for (int i = 1; !st && i < N_SEQ; i++) st = kvt_context_seq_fork(ctx, 0, &seqs[i], err);
    for (int j = 0; !st && j < B_STEP; j++) {
        int32_t tok[N_SEQ];
        for (int i = 0; i < N_SEQ; i++) tok[i] = 1 + (i * 101 + j * 13 + 7) % (V - 1);
        for (int i0 = 0; !st && i0 < N_SEQ; i0 += bs) {
            const int nb = i0 + bs <= N_SEQ ? bs : N_SEQ - i0;
            st = kvt_decode_batch(ctx, seqs + i0, tok + i0, nb, err);
            if (!st) {
                memcpy(logits + ((int64_t)j * N_SEQ + i0) * V, kvt_context_logits(ctx), (size_t)nb * V * sizeof(float));
            }
        }
    }
    kvt_context_free(ctx);
    return st;
}

static void batches_invariant(const kvt_model *m, const char *type, kvt_isa isa) {
    const int64_t n = (int64_t)B_STEP * N_SEQ * m->hp.n_vocab;
    float *ref = malloc((size_t)n * sizeof *ref), *o = malloc((size_t)n * sizeof *o);
    kvt_err err = {0};
    kvt_status st = ref && o ? run_batches(m, 1, ref, &err) : KVT_ERR_NOMEM;
    static const int sizes[] = {2, 3, 5, 8, 16};
    bool ok = !st;
    char why[KVT_ERR_MSG_MAX + 100] = "";
    for (size_t i = 0; ok && i < sizeof sizes / sizeof *sizes; i++) {
        st = run_batches(m, sizes[i], o, &err);
        double dmax = 0;
        const int64_t d = st ? -1 : first_diff(ref, o, (int64_t)B_STEP * N_SEQ, m->hp.n_vocab, &dmax);
        if (st || d >= 0) {
            ok = false;
            snprintf(why, sizeof why, "batches of %d: %s (row %lld, max |diff| %.3g)", sizes[i], st ? err.msg : "differ",
                     (long long)d, dmax);
        }
    }
    char name[200];
    snprintf(name, sizeof name, "determ: %s %s: kvt_decode_batch of 2, 3, 5, 8, 16 sequences = each alone, bit for bit",
             kvt_isa_name(isa), type);
    test_result(ok, name, "%s", why[0] ? why : err.msg);
    free(ref), free(o);
}

// ------------------------------------------------------------------ beam schedules, process reward model

typedef struct {
    kvt_beam_result r;
    kvt_status st;
    char msg[KVT_ERR_MSG_MAX];
} beam_out;

static void beam_run(const kvt_model *m, const kvt_beam_params *bp, int threads, beam_out *o) {
    memset(o, 0, sizeof *o);
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 128;
    cp.n_threads = threads;
    cp.kv_block = 8;
    cp.kv_paged = true;
    // a fast tier holding a few continuations' KV: schedules group them differently
    cp.kv_fast_bytes = 12 * 8LL * m->hp.n_head_kv * m->hp.head_dim * 2 * 2 * m->hp.n_layer;
    cp.kv_host_bytes = 16 << 20;
    kvt_context *ctx = NULL;
    kvt_err err = {0};
    o->st = kvt_context_init(m, &cp, &ctx, &err);
    int32_t prompt[13];
    for (int i = 0; i < 13; i++) prompt[i] = prompt_tok(i, m->hp.n_vocab);
    if (!o->st) o->st = kvt_beam_run(ctx, bp, prompt, 13, &o->r, &err);
    snprintf(o->msg, sizeof o->msg, "%s", err.msg);
    kvt_context_free(ctx);
}

static bool beams_equal(const kvt_beam_result *a, const kvt_beam_result *b, char *why, size_t n_why) {
    if (a->n_beams != b->n_beams) {
        snprintf(why, n_why, "%d beams vs %d", a->n_beams, b->n_beams);
        return false;
    }
    for (int32_t i = 0; i < a->n_beams; i++) {
        const kvt_beam_out *x = &a->beams[i], *y = &b->beams[i];
        if (x->n != y->n || memcmp(x->ids, y->ids, (size_t)x->n * sizeof *x->ids) != 0) {
            snprintf(why, n_why, "beam %d: ids differ", i);
            return false;
        }
        if (memcmp(&x->score, &y->score, sizeof x->score) != 0) {
            snprintf(why, n_why, "beam %d: score %.17g vs %.17g", i, x->score, y->score);
            return false;
        }
    }
    return true;
}

static void beams_invariant(const kvt_model *m, const char *type, kvt_isa isa) {
    kvt_beam_params bp = kvt_beam_params_default();
    bp.n_beams = 8;
    bp.width = 2;
    bp.step = 8;
    bp.n_tokens = 24;
    bp.seed = 7;
    bp.stop_at_eog = false;
    bp.schedule = KVT_BEAM_SCHED_LAYERWISE;
    beam_out ref, o;
    beam_run(m, &bp, 1, &ref);
    char name[200], why[200] = "";
    for (int s = KVT_BEAM_SCHED_LAYERWISE; s < KVT_BEAM_SCHED_COUNT; s++) {
        bp.schedule = (kvt_beam_sched)s;
        beam_run(m, &bp, 2 + s % 2, &o);
        snprintf(name, sizeof name, "determ: %s %s: 8 beams, %s on %d threads = layerwise on 1: same beams, same scores",
                 kvt_isa_name(isa), type, kvt_beam_sched_name(bp.schedule), 2 + s % 2);
        bool ok = !ref.st && !o.st && beams_equal(&ref.r, &o.r, why, sizeof why);
        test_result(ok, name, "%s", ref.st ? ref.msg : o.st ? o.msg : why);
        kvt_beam_result_free(&o.r);
    }
    // the model as its own process reward model: the built-in score
    kvt_context_params pc = kvt_context_params_default();
    pc.n_ctx = 128;
    pc.n_threads = 2;
    kvt_beam_prm *prm = NULL;
    kvt_err err = {0};
    kvt_status st = kvt_beam_prm_init(m, &pc, &prm, &err);
    bp.schedule = KVT_BEAM_SCHED_BALANCED;
    bp.scorer = kvt_beam_prm_score;
    bp.scorer_user = prm;
    if (!st) beam_run(m, &bp, 2, &o);
    snprintf(name, sizeof name, "determ: %s %s: --prm with the model itself = the built-in score, bit for bit",
             kvt_isa_name(isa), type);
    bool ok = !st && !ref.st && !o.st && beams_equal(&ref.r, &o.r, why, sizeof why);
    test_result(ok, name, "%s", st ? err.msg : ref.st ? ref.msg : o.st ? o.msg : why);
    if (!st) kvt_beam_result_free(&o.r);
    kvt_beam_prm_free(prm);
    kvt_beam_result_free(&ref.r);
}

// ------------------------------------------------------------------ suite

void test_determ(const test_env *env) {
    static const kvt_type mm_types[] = {KVT_TYPE_F32,  KVT_TYPE_F16,  KVT_TYPE_BF16, KVT_TYPE_Q4_0, KVT_TYPE_Q4_1,
                                        KVT_TYPE_Q5_0, KVT_TYPE_Q8_0, KVT_TYPE_Q4_K, KVT_TYPE_Q5_K, KVT_TYPE_Q6_K,
                                        KVT_TYPE_Q5_1, KVT_TYPE_Q2_K, KVT_TYPE_Q3_K, KVT_TYPE_IQ4_NL, KVT_TYPE_IQ4_XS};
    const kvt_isa best = kvt_kernels_isa_detected(), saved = kvt_kernels_isa();
    for (int isa = KVT_ISA_SCALAR; isa <= KVT_ISA_AVX512; isa++) {
        if (isa > (int)best) {
            char name[80];
            snprintf(name, sizeof name, "determ: %s kernels", kvt_isa_name((kvt_isa)isa));
            test_skip(name, "this CPU does not run them");
            continue;
        }
        for (size_t i = 0; i < sizeof mm_types / sizeof *mm_types; i++) {
            int64_t blck = 0, bsize = 0;
            matmul_rows_alone_vs_batch((kvt_isa)isa, mm_types[i], 512);
            if (kvt_type_layout((uint32_t)mm_types[i], &blck, &bsize) && blck == 32)
                matmul_rows_alone_vs_batch((kvt_isa)isa, mm_types[i], 544);
        }
    }
    attention_window(4, 2);
    attention_window(9, 3); // SmolLM2-135M's heads
    char dir[] = "/tmp/kvt_test_determ_XXXXXX";
    const char *disk = mkdtemp(dir);
    // f16, q8_0, q4_1 and the q4_K/q6_K mix: every kernel family
    static const char *const types[] = {"f16", "q8_0", "q4_1", "q4_k_m"};
    const size_t n_types = env->quick ? 1 : sizeof types / sizeof *types;
    for (size_t ti = 0; ti < n_types; ti++) {
        const char *type = types[env->quick ? 3 : ti];
        char path[128];
        snprintf(path, sizeof path, "/tmp/kvt_test_determ_%d_%s.gguf", (int)getpid(), type);
        kvt_model *m = NULL;
        kvt_err err = {0};
        if (!make_model(path, type) || kvt_model_load(path, false, &m, &err)) {
            test_result(false, "determ: mkmodel", "%s: %s", type, err.msg);
            unlink(path);
            continue;
        }
        // every case on the best path; the lower paths (slower) get the thread, store and prefill cases
        // (sanitizer builds: the best path only)
        for (int isa = env->quick ? (int)best : KVT_ISA_SCALAR; isa <= (int)best; isa++) {
            const bool full = isa == (int)best;
            kvt_kernels_set_isa((kvt_isa)isa);
            logits_invariant(m, type, (kvt_isa)isa, full, env->quick || !full ? 20 : N_GEN, disk);
            if (isa > KVT_ISA_SCALAR) batches_invariant(m, type, (kvt_isa)isa);
            if (full) beams_invariant(m, type, (kvt_isa)isa);
        }
        kvt_kernels_set_isa(saved);
        kvt_model_free(m);
        unlink(path);
    }
    if (disk) rmdir(disk);
}
