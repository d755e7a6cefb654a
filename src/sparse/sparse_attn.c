// sparse_attn.c - exact attention of one query token over selected positions, and exact scoring of every
// position (the oracle), both reading the KV store through acquire/release.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "../kernels/quant.h"
#include "../kernels/vec.h"
#include "../kv/kv_paged.h"
#include "sparse_impl.h"

int64_t kvt_sparse_attn_scratch_floats(const kvt_sparse_dims *d) {
    const int64_t qpg = d->n_head / d->n_head_kv;
    // queries in the dot type (<= f32 each, padded), an F16 cache's queries again as f32 (padded: queries_in), scores
    // [qpg, n_ctx], aggregate [n_ctx], m/l [qpg], o [qpg, hdv]
    return 2 * qpg * (d->head_dim + 32) + qpg * d->n_ctx + d->n_ctx + 2 * qpg + qpg * d->head_dim_v + 64;
}

// A run of a KV head's selected positions that lie in one block, for the two-pass attention (attend_pass_task).
typedef struct {
    int64_t a, e, b; // sel[a .. e) lie in block b
    kvt_kv_view v;   // held: the block acquired (from the first pass on, until the second's end)
    bool held, scored;
    _Atomic int32_t left; // split second pass: the query heads still to accumulate it (the last releases it)
} sp_run;

// KV head kh's attention between the two passes: its runs, the first not accumulated yet, its scores and state.
typedef struct {
    sp_run *run;
    int64_t nrun, next, held; // runs; the first not accumulated yet; the blocks held
    float *s, *m, *l, *o; // scores [qpg, ns] at their positions' indexes; m, l [qpg]; o [qpg, hdv]
    int32_t i0;           // the query head of row 0 (s, m, l, o hold rows i0 .. of the group's heads)
} sp_head;

typedef struct {
    kvt_kv *kv;
    int32_t seq, layer, qpg;
    sp_head *head;          // the two-pass attention's per-head state, pass 1 or 2 (attend_pass_task)
    int pass;
    bool split;             // attend_task: one task per pair of query heads (a store whose reads are free: SPLIT_HEADS), else
                            // per KV head
    int64_t pin_cap;        // blocks a head may hold from pass 1 to pass 2
    const kvt_attn_params *p;
    const float *q;
    int64_t n;              // positions held (scoring) 
    const int32_t *sel;     // [n_head_kv][sel_stride] selected positions (attention)
    const int64_t *nsel;    // [n_head_kv]
    int64_t sel_stride;
    float *out;             // attention: [n_head * hdv]
    float *agg;             // scoring: [n_head_kv][agg_stride] the group's summed softmax per position
    int64_t agg_stride;
    float *const *scratch;  // per thread
    _Atomic int failed;
    kvt_err err;
} sp_job;

static void sp_fail(sp_job *J, const kvt_err *e) {
    if (!atomic_exchange(&J->failed, 1)) J->err = *e;
}

static int64_t qrow_of(const kvt_kv *kv) {
    return (kvt_row_size(kvt_type_ops_get(kv->type)->vec_dot_type, kv->head_dim) + 63) / 64 * 64;
}

// An F16 cache's queries as f32 (for kvt_attn_kq_f16): qpg rows of qrow / 2 floats from the end of the qpg rows of qd
// (qrow is a multiple of 64 bytes: 64-byte aligned as qd); NULL for other cache types (their scores: the type's vec_dot).
static float *queries_f32(const sp_job *J, uint8_t *qd, int64_t qrow) {
    return J->kv->type == KVT_TYPE_F16 ? (float *)(qd + J->qpg * qrow) : NULL;
}

// Queries of KV head kh's group converted to the dot type of the store: qpg rows of qrow bytes at qd, and with qf
// (an F16 cache) their f16 values again as f32 rows of qrow / 2 floats at qf. Only the rows of query heads [i0, i1).
static void queries_in(const sp_job *J, int32_t kh, uint8_t *qd, float *qf, int64_t qrow, int32_t i0, int32_t i1) {
    const kvt_type_ops *qops = kvt_type_ops_get(kvt_type_ops_get(J->kv->type)->vec_dot_type);
    const int32_t hd = J->kv->head_dim;
    for (int32_t i = i0; i < i1; i++) {
        qops->from_float(J->q + (int64_t)(kh * J->qpg + i) * hd, qd + i * qrow, hd);
        if (qf) qops->to_float(qd + i * qrow, qf + i * (qrow / 2), hd);
    }
}

// Makes block b of KV head kh's group held in *v (releasing the one held before).
static bool hold(sp_job *J, int32_t kh, int64_t b, int64_t *held, kvt_kv_view *v) {
    if (b == *held) return true;
    const int32_t g = kh / J->kv->group_heads;
    if (*held >= 0) J->kv->ops->release(J->kv, J->seq, J->layer, g, *held);
    *held = -1;
    kvt_err e;
    if (J->kv->ops->acquire(J->kv, J->seq, J->layer, g, b, v, &e)) {
        sp_fail(J, &e);
        return false;
    }
    *held = b;
    return true;
}

static void unhold(sp_job *J, int32_t kh, int64_t held) {
    if (held >= 0) J->kv->ops->release(J->kv, J->seq, J->layer, kh / J->kv->group_heads, held);
}

enum { PF_ROWS = 16 }; // run_score / run_accum: the next stretch's K / V rows (F16) requested up to this many positions ahead

// Requests into L1 the cache lines of the rows of positions sel[*done .. e) (each `bytes` bytes at base + (sel[x] -
// pos0) * stride) and sets *done = e; nothing when e <= *done, so that consecutive stretches request each row once.
// Hints only: no effect on any value.
static inline void prefetch_rows(const uint8_t *base, int64_t stride, int64_t pos0, const int32_t *sel, int64_t *done,
                                 int64_t e, int64_t bytes) {
    for (int64_t x = *done; x < e; x++)
        for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(base + (sel[x] - pos0) * stride + o, 0, 3);
    if (e > *done) *done = e;
}

// Run R's scores (block held) for query heads [i0, i1): h->s[(i - h->i0) * ns + x] for x in [R->a, R->e), as
// attend_task computes them (each query head's scores and softmax are its own: any split of the heads, the same bits).
// An F16 cache (qf set): each stretch of consecutive positions in one kvt_attn_kq_f16 call for the heads together,
// every score the F16 vec_dot's bits times scale, as the loop below.
static void run_score(const sp_job *J, int32_t jh, const uint8_t *qd, const float *qf, int64_t qrow, int64_t ns,
                      const int32_t *sel, sp_head *h, const sp_run *R, int32_t i0, int32_t i1) {
    const kvt_kv *kv = J->kv;
    const kvt_type_ops *ops = kvt_type_ops_get(kv->type);
    const uint8_t *kb = (const uint8_t *)R->v.k + jh * R->v.k_hstride;
    if (qf) {
        const int64_t qst = qrow / 2, krow = 2 * (int64_t)kv->head_dim;
        int64_t pf_done = R->a + 1; // positions whose K rows were requested: [.., pf_done)
        for (int64_t x0 = R->a, x1; x0 < R->e; x0 = x1) {
            for (x1 = x0 + 1; x1 < R->e && sel[x1] == sel[x0] + (x1 - x0);) x1++; // sel[x0 .. x1) consecutive
            // the next stretch's K rows (to L1): hints only
            if (pf_done < x1) pf_done = x1;
            prefetch_rows(kb, R->v.k_stride, R->v.pos0, sel, &pf_done, R->e - x1 < PF_ROWS ? R->e : x1 + PF_ROWS, krow);
            kvt_attn_kq_f16(kv->head_dim, kb + (sel[x0] - R->v.pos0) * R->v.k_stride, R->v.k_stride, x1 - x0,
                            (const uint16_t *)(qd + i0 * qrow), qf + i0 * qst, qst, i1 - i0, J->p->scale,
                            h->s + (int64_t)(i0 - h->i0) * ns + x0, ns);
        }
        return;
    }
    for (int32_t i = i0; i < i1; i++) {
        float *si = h->s + (int64_t)(i - h->i0) * ns;
        for (int64_t x = R->a; x < R->e; x++) {
            float d;
            ops->vec_dot(kv->head_dim, &d, kb + (sel[x] - R->v.pos0) * R->v.k_stride, qd + i * qrow);
            si[x] = d * J->p->scale;
        }
    }
}

enum { MAD_ROWS = 32, ACC_HEADS = 4 }; // run_accum: positions per expf / kvt_vec_mad_rows call; query heads per pass

// The running max of a query head rises only for a score more than RISE_SLACK over it (weights expf(s - max) up to
// e^8 ~ 3000: far from f32's range, and the rounding of a product does not depend on its scale), so that after the
// first position a rise is rare even where the scores climb along the positions.
#define RISE_SLACK 8.0f

// A score more than RISE_SLACK above row i's running max (or any score before the first) becomes its max, after l and o
// are scaled by expf(old max - score).
static inline bool rises(const sp_head *h, int32_t i, float s) { return s > h->m[i] + RISE_SLACK; }

static inline void rise_to(sp_head *h, int32_t i, float s, int32_t hdv) {
    if (!rises(h, i, s)) return;
    const float corr = expf(h->m[i] - s);
    if (corr != 1.0f) {
        h->l[i] *= corr;
        kvt_vec_scale_f32(h->o + (int64_t)i * hdv, corr, hdv);
    }
    h->m[i] = s;
}

// Weights w[0 .. x1 - x0) = expf(s - m) of positions sel[x0 .. x1) added to row i's l in order, and their V rows to its
// o: each stretch of consecutive positions in one kvt_vec_mad_rows call (row order: the bits of row-by-row).
static inline void add_rows(sp_head *h, int32_t i, const float *w, const int32_t *sel, int64_t x0, int64_t x1,
                            const uint8_t *vb, const kvt_kv_view *v, kvt_type type, int32_t hdv) {
    for (int64_t x = 0; x < x1 - x0; x++) h->l[i] += w[x];
    for (int64_t y0 = x0, y1; y0 < x1; y0 = y1) {
        for (y1 = y0 + 1; y1 < x1 && sel[y1] == sel[y0] + (y1 - y0);) y1++; // sel[y0 .. y1) consecutive
        kvt_vec_mad_rows(type, h->o + (int64_t)i * hdv, vb + (sel[y0] - v->pos0) * v->v_stride, v->v_stride, w + (y0 - x0),
                         y1 - y0, hdv);
    }
}

// Run R's step of the online softmax from its scores for query heads [i0, i1), position by position: a score more than
// RISE_SLACK above the running max first becomes the max (l and o scaled by expf(old max - score)), then w = expf(s -
// max), l += w, o += w * v. The state after a position depends on the selected positions up to it only, never on how
// they are cut into runs, so the output has the same bits whatever the store's block size, the passes around a late
// batch and the split of the heads (each query head's state is its own). Computed MAD_ROWS positions at a time: for
// up to ACC_HEADS heads together where a head's max rises at the chunk's first position at most (the usual case), the
// chunk's weights in one kvt_vec_expf_sub call (libm's expf bits) and each stretch of consecutive positions in one
// kvt_vec_mad_rows call per head, the next stretch's V rows requested meanwhile (a hint: the rows of a selection are
// cold); a head whose max rises inside the chunk takes it in pieces between its rises, with the same operations.
static void run_accum(const sp_job *J, int32_t jh, int64_t ns, const int32_t *sel, sp_head *h, const sp_run *R,
                      int32_t i0, int32_t i1) {
    const kvt_kv *kv = J->kv;
    const int32_t hdv = kv->head_dim_v;
    const uint8_t *vb = (const uint8_t *)R->v.v + jh * R->v.v_hstride;
    const bool pf = kv->type == KVT_TYPE_F16;
    const int64_t vrow = 2 * (int64_t)hdv;
    for (int32_t g0 = i0 - h->i0; g0 < i1 - h->i0; g0 += ACC_HEADS) { // rows g0 .. g0 + nh of s, m, l, o
        const int32_t nh = i1 - h->i0 - g0 < ACC_HEADS ? i1 - h->i0 - g0 : ACC_HEADS;
        float wb[ACC_HEADS][MAD_ROWS];
        int64_t pf_done = R->a + 1; // positions whose V rows this pass requested: [.., pf_done)
        for (int64_t c0 = R->a; c0 < R->e; c0 += MAD_ROWS) {
            const int64_t c1 = R->e - c0 < MAD_ROWS ? R->e : c0 + MAD_ROWS;
            bool whole[ACC_HEADS]; // head c's max does not rise past c0 in this chunk
            int32_t nwhole = 0;
            for (int32_t c = 0; c < nh; c++) {
                const int32_t i = g0 + c;
                const float *si = h->s + (int64_t)i * ns;
                rise_to(h, i, si[c0], hdv);
                whole[c] = true;
                for (int64_t x = c0 + 1; x < c1; x++) whole[c] = whole[c] && !rises(h, i, si[x]);
                if (!whole[c]) continue;
                nwhole++;
                kvt_vec_expf_sub(si + c0, h->m[i], wb[c], c1 - c0);
                for (int64_t x = 0; x < c1 - c0; x++) h->l[i] += wb[c][x];
            }
            for (int64_t x0 = c0, x1; nwhole > 0 && x0 < c1; x0 = x1) {
                for (x1 = x0 + 1; x1 < c1 && sel[x1] == sel[x0] + (x1 - x0);) x1++; // sel[x0 .. x1) consecutive
                if (pf) { // the next stretch's V rows (to L1): hints only
                    if (pf_done < x1) pf_done = x1;
                    prefetch_rows(vb, R->v.v_stride, R->v.pos0, sel, &pf_done, R->e - x1 < PF_ROWS ? R->e : x1 + PF_ROWS,
                                  vrow);
                }
                for (int32_t c = 0; c < nh; c++) {
                    if (whole[c])
                        kvt_vec_mad_rows(kv->type, h->o + (int64_t)(g0 + c) * hdv, vb + (sel[x0] - R->v.pos0) * R->v.v_stride,
                                         R->v.v_stride, wb[c] + (x0 - c0), x1 - x0, hdv);
                }
            }
            for (int32_t c = 0; c < nh; c++) { // the heads whose max rises inside the chunk: piece by piece
                if (whole[c]) continue;
                const int32_t i = g0 + c;
                const float *si = h->s + (int64_t)i * ns;
                for (int64_t x0 = c0, x1; x0 < c1; x0 = x1) {
                    rise_to(h, i, si[x0], hdv);
                    for (x1 = x0 + 1; x1 < c1 && !rises(h, i, si[x1]);) x1++; // [x0, x1): one max
                    kvt_vec_expf_sub(si + x0, h->m[i], wb[c], x1 - x0);
                    add_rows(h, i, wb[c], sel, x0, x1, vb, &R->v, kv->type, hdv);
                }
            }
        }
    }
}

// The end of the run that starts at sel[a]: the first index past a whose position lies in another block.
static int64_t run_end(const int32_t *sel, int64_t a, int64_t ns, int64_t block_tokens) {
    const int64_t b = sel[a] / block_tokens;
    int64_t e = a;
    while (e < ns && sel[e] / block_tokens == b) e++;
    return e;
}

// KV head kh's online softmax state before its first run, rows of query heads [i0, i1): m = -inf, l = 0, o = 0.
static void head_init(const sp_job *J, sp_head *h, int32_t i0, int32_t i1) {
    for (int32_t r = i0 - h->i0; r < i1 - h->i0; r++) {
        h->m[r] = -INFINITY;
        h->l[r] = 0.0f;
    }
    memset(h->o + (int64_t)(i0 - h->i0) * J->kv->head_dim_v, 0, (size_t)(i1 - i0) * J->kv->head_dim_v * sizeof(float));
}

// KV head kh's outputs from its state after its last run: o / l per query head in [i0, i1) (0 where l is 0).
static void head_out(const sp_job *J, int32_t kh, const sp_head *h, int32_t i0, int32_t i1) {
    const int32_t hdv = J->kv->head_dim_v;
    for (int32_t i = i0; i < i1; i++) {
        const int32_t r = i - h->i0;
        const float inv = h->l[r] > 0.0f ? 1.0f / h->l[r] : 0.0f;
        float *dst = J->out + (int64_t)(kh * J->qpg + i) * hdv;
        for (int32_t x = 0; x < hdv; x++) dst[x] = h->o[(int64_t)r * hdv + x] * inv;
    }
}

// Query heads per task of the split one-pass attention: a pair (an F16 cache's K rows converted once for both in
// kvt_attn_kq_f16), and the tasks of a group of qpg query heads.
enum { SPLIT_HEADS = 2 };
static int32_t split_tasks(int32_t qpg) { return (qpg + SPLIT_HEADS - 1) / SPLIT_HEADS; }

// Attention of KV head kh's query heads over its selected positions: online softmax over runs of positions
// in one block (exact over the set): each run scored (run_score), then accumulated (run_accum). Task kh, or with
// J->split task kh * split_tasks(qpg) + c: query heads [2c, 2c + 2) of KV head kh (the last task of an odd group one
// head; each query head's scores and softmax are its own: the same bits; 3 KV heads on 2 threads left a core idle a
// third of the time, and the pairs share the conversion of the K rows).
static void attend_task(void *vctx, int64_t task, int thread) {
    sp_job *J = vctx;
    kvt_kv *kv = J->kv;
    const int32_t qpg = J->qpg, nt = split_tasks(qpg), kh = (int32_t)(J->split ? task / nt : task), jh = kh % kv->group_heads;
    const int32_t i0 = J->split ? (int32_t)(task % nt) * SPLIT_HEADS : 0;
    const int32_t i1 = J->split && i0 + SPLIT_HEADS < qpg ? i0 + SPLIT_HEADS : qpg, nr = i1 - i0;
    const int64_t qrow = qrow_of(kv);
    float *sc = J->scratch[thread];
    uint8_t *qd = (uint8_t *)sc;
    float *qf = queries_f32(J, qd, qrow);
    const int32_t *sel = J->sel + kh * J->sel_stride;
    const int64_t ns = J->nsel[kh];
    sp_head h = {.s = sc + qpg * qrow / 4 + (qf ? qpg * qrow / 2 : 0) + 16, .i0 = i0}; // s [nr, ns] at the positions' indexes
    h.m = h.s + (int64_t)nr * ns;                         // [nr]
    h.l = h.m + nr, h.o = h.l + nr;                        // [nr], [nr, hdv]
    queries_in(J, kh, qd, qf, qrow, i0, i1);
    head_init(J, &h, i0, i1);
    int64_t held = -1;
    sp_run R = {0};
    for (int64_t a = 0; a < ns;) {
        const int64_t b = sel[a] / kv->block_tokens, e = run_end(sel, a, ns, kv->block_tokens); // [a, e) in block b
        if (!hold(J, kh, b, &held, &R.v)) return;
        if (sel[e - 1] >= R.v.pos0 + R.v.n) {
            kvt_err er;
            kvt_errorf(&er, KVT_ERR_INVALID_ARG, "KV layer %d holds no position %d", J->layer, sel[e - 1]);
            sp_fail(J, &er);
            break;
        }
        R.a = a, R.e = e, R.b = b;
        run_score(J, jh, qd, qf, qrow, ns, sel, &h, &R, i0, i1);
        run_accum(J, jh, ns, sel, &h, &R, i0, i1);
        a = e;
    }
    unhold(J, kh, held);
    head_out(J, kh, &h, i0, i1);
}

// attend_task in two passes around a late batch of disk reads in flight (kvt_kv_paged_prefetch_end_async). Pass 1
// (the reads in flight): the runs whose blocks are resident now are acquired and scored, and the leading ones (every
// run before them as well) accumulated; pass 2 (the reads done): the rest, in position order. Every run is scored as
// attend_task scores it and accumulated in the same order, so the output has attend_task's bits; only the work before
// the first late run, and the scores of the resident runs after it, move into the wait.
static void attend_pass_task(void *vctx, int64_t kh64, int thread) {
    sp_job *J = vctx;
    kvt_kv *kv = J->kv;
    const int32_t kh = (int32_t)kh64, jh = kh % kv->group_heads;
    const int32_t g = kh / kv->group_heads;
    const int64_t qrow = qrow_of(kv), ns = J->nsel[kh];
    const int32_t *sel = J->sel + kh * J->sel_stride;
    sp_head *h = &J->head[kh];
    uint8_t *qd = (uint8_t *)J->scratch[thread];
    float *qf = queries_f32(J, qd, qrow);
    queries_in(J, kh, qd, qf, qrow, 0, J->qpg);
    if (J->pass == 1) {
        h->nrun = h->next = h->held = 0;
        for (int64_t a = 0; a < ns;) {
            const int64_t e = run_end(sel, a, ns, kv->block_tokens);
            h->run[h->nrun++] = (sp_run){.a = a, .e = e, .b = sel[a] / kv->block_tokens};
            a = e;
        }
        head_init(J, h, 0, J->qpg);
    }
    for (int64_t r = h->next; r < h->nrun; r++) { // the runs before next are accumulated and let go
        sp_run *R = &h->run[r];
        if (!R->held) {
            if (J->pass == 1 && h->held >= J->pin_cap) break; // the fast tier's room for the others' loads
            kvt_err e;
            bool ready = true;
            const kvt_status st = J->pass == 1 ? kvt_kv_paged_acquire_ready(kv, J->seq, J->layer, g, R->b, &R->v, &ready, &e)
                                               : kv->ops->acquire(kv, J->seq, J->layer, g, R->b, &R->v, &e); // 2, 3
            if (st) {
                sp_fail(J, &e);
                return;
            }
            if (!ready) continue; // in flight, or evicted: pass 2
            R->held = true;
            h->held++;
            if (sel[R->e - 1] >= R->v.pos0 + R->v.n) {
                kvt_errorf(&e, KVT_ERR_INVALID_ARG, "KV layer %d holds no position %d", J->layer, sel[R->e - 1]);
                sp_fail(J, &e);
                return;
            }
        }
        if (!R->scored) {
            run_score(J, jh, qd, qf, qrow, ns, sel, h, R, 0, J->qpg);
            R->scored = true;
        }
        if (J->pass == 3) continue; // held and scored: accumulated by pass 4
        if (r == h->next) { // then let go: a block is held only from its scores to its accumulation
            run_accum(J, jh, ns, sel, h, R, 0, J->qpg);
            h->next++;
            kv->ops->release(kv, J->seq, J->layer, g, R->b);
            R->held = false;
            h->held--;
        }
    }
    if (J->pass == 2) head_out(J, kh, h, 0, J->qpg);
    if (J->pass == 3) {
        for (int64_t r = h->next; r < h->nrun; r++) atomic_store(&h->run[r].left, J->qpg);
    }
}

// Pass 4 of the split second pass, task kh * qpg + i: query head i of KV head kh accumulates the runs pass 1 left (pass
// 3 held and scored them all), in position order, with attend_task's operations; the last query head to accumulate a
// run releases its block.
static void accum_head_task(void *vctx, int64_t task, int thread) {
    (void)thread;
    sp_job *J = vctx;
    kvt_kv *kv = J->kv;
    const int32_t kh = (int32_t)(task / J->qpg), i = (int32_t)(task % J->qpg), jh = kh % kv->group_heads;
    const int32_t g = kh / kv->group_heads;
    const int32_t *sel = J->sel + kh * J->sel_stride;
    sp_head *h = &J->head[kh];
    for (int64_t r = h->next; r < h->nrun; r++) {
        sp_run *R = &h->run[r];
        run_accum(J, jh, J->nsel[kh], sel, h, R, i, i + 1);
        if (atomic_fetch_sub(&R->left, 1) == 1) {
            kv->ops->release(kv, J->seq, J->layer, g, R->b);
            R->held = false;
        }
    }
    head_out(J, kh, h, i, i + 1);
}

// Every position [0, n) of KV head kh scored with the real query: agg[t] = sum over the group's heads of
// softmax(q_h . k * scale)[t].
static void score_task(void *vctx, int64_t kh64, int thread) {
    sp_job *J = vctx;
    kvt_kv *kv = J->kv;
    const int32_t kh = (int32_t)kh64, hd = kv->head_dim, qpg = J->qpg, jh = kh % kv->group_heads;
    const kvt_type_ops *ops = kvt_type_ops_get(kv->type);
    const int64_t qrow = qrow_of(kv), n = J->n;
    float *sc = J->scratch[thread];
    uint8_t *qd = (uint8_t *)sc;
    float *qf = queries_f32(J, qd, qrow);
    float *s = sc + qpg * qrow / 4 + (qf ? qpg * qrow / 2 : 0) + 16; // [qpg, n]
    queries_in(J, kh, qd, qf, qrow, 0, qpg);
    int64_t held = -1;
    kvt_kv_view v = {0};
    for (int64_t p = 0; p < n;) {
        if (!hold(J, kh, p / kv->block_tokens, &held, &v)) return;
        int64_t cnt = v.pos0 + v.n - p;
        if (cnt > n - p) cnt = n - p;
        if (cnt <= 0) {
            kvt_err er;
            kvt_errorf(&er, KVT_ERR_INVALID_ARG, "KV layer %d holds no position %lld", J->layer, (long long)p);
            sp_fail(J, &er);
            break;
        }
        const uint8_t *kb = (const uint8_t *)v.k + jh * v.k_hstride + (p - v.pos0) * v.k_stride;
        if (qf) {
            kvt_attn_kq_f16(hd, kb, v.k_stride, cnt, (const uint16_t *)qd, qf, qrow / 2, qpg, J->p->scale, s + p, n);
        } else {
            for (int32_t i = 0; i < qpg; i++) {
                for (int64_t x = 0; x < cnt; x++) {
                    float d;
                    ops->vec_dot(hd, &d, kb + x * v.k_stride, qd + i * qrow);
                    s[i * n + p + x] = d * J->p->scale;
                }
            }
        }
        p += cnt;
    }
    unhold(J, kh, held);
    kvt_sparse_aggregate(s, qpg, n, J->agg + kh * J->agg_stride);
}

static kvt_status run(sp_job *J, kvt_task_fn fn, kvt_threadpool *pool, kvt_err *err) {
    atomic_init(&J->failed, 0);
    kvt_threadpool_run(pool, fn, J, J->split ? (int64_t)J->kv->n_head_kv * split_tasks(J->qpg) : J->kv->n_head_kv);
    if (atomic_load(&J->failed)) {
        if (err) *err = J->err;
        return J->err.status;
    }
    return KVT_OK;
}

kvt_status kvt_sparse_attend_set(kvt_kv *kv, int32_t seq, int32_t layer, const kvt_attn_params *p, const float *q,
                                 const int32_t *sel, const int64_t *nsel, int64_t sel_stride, bool late, float *out,
                                 kvt_threadpool *pool, float *const *scratch, kvt_err *err) {
    sp_job J = {.kv = kv, .seq = seq, .layer = layer, .qpg = p->n_head / kv->n_head_kv, .p = p, .q = q, .sel = sel,
                .nsel = nsel, .sel_stride = sel_stride, .out = out, .scratch = scratch};
    const int32_t H = kv->n_head_kv, qpg = J.qpg;
    // the two passes' state: per KV head its runs (at most one per position) and floats, each from a 64-byte boundary
    // (64 bytes of slack each); one allocation
    int64_t bytes = (int64_t)H * (int64_t)sizeof(sp_head);
    for (int32_t kh = 0; late && kh < H; kh++) {
        bytes += nsel[kh] * (int64_t)sizeof(sp_run) + (qpg * nsel[kh] + 2 * qpg + (int64_t)qpg * kv->head_dim_v) * 4 + 128;
    }
    void *mem = late ? malloc((size_t)bytes) : NULL;
    if (!mem) { // no batch in flight (or no memory for the state: then the batch waited for first): one pass
        if (late) kvt_kv_paged_late_wait(kv);
        J.split = kv->ops->free_reads != 0; // per pair of query heads where an acquire costs nothing (else more acquires)
        return run(&J, attend_task, pool, err);
    }
    J.head = mem;
    uint8_t *at = (uint8_t *)(J.head + H);
    for (int32_t kh = 0; kh < H; kh++) {
        sp_head *h = &J.head[kh];
        memset(h, 0, sizeof *h);
        at = (uint8_t *)(((uintptr_t)at + 63) & ~(uintptr_t)63); // the runs and the floats each from a 64-byte line
        h->run = (sp_run *)at;
        at += nsel[kh] * (int64_t)sizeof(sp_run);
        at = (uint8_t *)(((uintptr_t)at + 63) & ~(uintptr_t)63);
        h->s = (float *)at;
        h->m = h->s + qpg * nsel[kh];
        h->l = h->m + qpg;
        h->o = h->l + qpg;
        at = (uint8_t *)(h->o + (int64_t)qpg * kv->head_dim_v);
    }
    // pass 1 holds the blocks it scored until pass 2 accumulates them: at most a quarter of the fast tier in all, so
    // that the loads of pass 2 (one block at a time per head, as attend_task) always find room
    J.pin_cap = kvt_kv_paged_fast_slots(kv) / (4 * H);
    J.pass = 1;
    kvt_status st = run(&J, attend_pass_task, pool, err);
    kvt_kv_paged_late_wait(kv); // whatever pass 1 did
    int64_t left = 0; // the runs pass 1 did not accumulate, every head
    for (int32_t kh = 0; kh < H; kh++) left += J.head[kh].nrun - J.head[kh].next;
    if (!st && left <= kvt_kv_paged_fast_slots(kv) / 2) {
        // the split second pass: pass 3 (per KV head) holds and scores every run left, pass 4 (per query head: 3 KV
        // heads on 2 threads left a core idle a third of pass 2) accumulates them; at most half the fast tier held
        J.pass = 3;
        st = run(&J, attend_pass_task, pool, err);
        if (!st) kvt_threadpool_run(pool, accum_head_task, &J, (int64_t)H * qpg); // (it cannot fail)
    } else if (!st) {
        J.pass = 2;
        st = run(&J, attend_pass_task, pool, err);
    }
    for (int32_t kh = 0; kh < H; kh++) { // a failed pass leaves blocks held
        const sp_head *h = &J.head[kh];
        for (int64_t r = 0; r < h->nrun; r++) {
            if (h->run[r].held) kv->ops->release(kv, seq, layer, kh / kv->group_heads, h->run[r].b);
        }
    }
    free(mem);
    return st;
}

kvt_status kvt_sparse_score_exact(kvt_kv *kv, int32_t seq, int32_t layer, const kvt_attn_params *p, const float *q,
                                  int64_t n, float *agg, int64_t agg_stride, kvt_threadpool *pool, float *const *scratch,
                                  kvt_err *err) {
    sp_job J = {.kv = kv, .seq = seq, .layer = layer, .qpg = p->n_head / kv->n_head_kv, .p = p, .q = q, .n = n,
                .agg = agg, .agg_stride = agg_stride, .scratch = scratch};
    return run(&J, score_task, pool, err);
}

kvt_status kvt_sparse_read_keys(kvt_kv *kv, int32_t seq, int32_t layer, int64_t pos0, int64_t n, float *k, kvt_err *err) {
    const kvt_type_ops *ops = kvt_type_ops_get(kv->type);
    const int32_t H = kv->n_head_kv, hd = kv->head_dim;
    for (int32_t kh = 0; kh < H; kh++) {
        const int32_t g = kh / kv->group_heads, jh = kh % kv->group_heads;
        for (int64_t p = pos0; p < pos0 + n;) {
            const int64_t b = p / kv->block_tokens;
            kvt_kv_view v = {0};
            kvt_status st = kv->ops->acquire(kv, seq, layer, g, b, &v, err);
            if (st) return st;
            int64_t cnt = v.pos0 + v.n - p;
            if (cnt > pos0 + n - p) cnt = pos0 + n - p;
            if (cnt <= 0) {
                kv->ops->release(kv, seq, layer, g, b);
                return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sparse key summaries: sequence %d layer %d holds no position %lld",
                                  seq, layer, (long long)p);
            }
            const uint8_t *kb = (const uint8_t *)v.k + jh * v.k_hstride + (p - v.pos0) * v.k_stride;
            for (int64_t x = 0; x < cnt; x++) ops->to_float(kb + x * v.k_stride, k + ((p - pos0 + x) * H + kh) * hd, hd);
            kv->ops->release(kv, seq, layer, g, b);
            p += cnt;
        }
    }
    return KVT_OK;
}
