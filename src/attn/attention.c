// attention.c - streaming exact attention with the online-softmax merge.
#include "attention.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "../kernels/f16.h"
#include "../kernels/quant.h"
#include "../kernels/vec.h"
#include "../kv/kv_paged.h"

// Query heads served by one block of a group.
static int32_t group_qheads(const kvt_kv *kv, int32_t n_head) { return kv->group_heads * (n_head / kv->n_head_kv); }

static int32_t tile_of(int32_t tile) { return tile > 0 ? tile : KVT_ATTN_TILE; }

// First position a query at pos attends with a window of w positions (0: the whole context).
static int64_t first_visible(int64_t w, int64_t pos) { return w > 0 && pos - w + 1 > 0 ? pos - w + 1 : 0; }

// Query tokens attended together by one task in prefill: each block is acquired once per task for all of
// them, not once per token (fewer acquisitions, and far fewer loads when the fast tier is small).
#define ATTN_TOKENS 64
// An F16 tile's V rows are converted to f32 once when at least this many (token, query head) rows of a task read them.
#define VF_ROWS 2

// First row of tile pa read by a task whose first visible position is p_first.
static int64_t ps_of(int64_t pa, int64_t p_first) { return p_first > pa ? p_first - pa : 0; }

int64_t kvt_attn_scratch_bytes(const kvt_kv *kv, int32_t n_head, int32_t tile) {
    const int64_t qh = group_qheads(kv, n_head), T = tile_of(tile), TC = ATTN_TOKENS;
    const kvt_type dt = kvt_type_ops_get(kv->type)->vec_dot_type;
    // per token of a task: scores [qh, T] f32, chunk state and merged state m/l [qh] f32 + acc [qh, hdv] f32
    // (twice), queries [qh] rows of the K dot type; shared: gathered V rows [T, group_heads * head_dim_v] kv type;
    // an F16 cache: the queries again as f32 [qh] rows of the dot type's padded length (kq_f16_scores)
    const int64_t qrow = (kvt_row_size(dt, kv->head_dim) + 63) / 64 * 64;
    // and the tile's V rows as f32 [group_heads, T, head_dim_v] (vf: converted once for the task's rows)
    const int64_t qf = kv->type == KVT_TYPE_F16 ? TC * qh * (qrow / 2) * 4 + 64 : 0;
    const int64_t vf = kv->type == KVT_TYPE_F16 ? (int64_t)kv->group_heads * T * kv->head_dim_v * 4 + 64 : 0;
    // and the tile's K rows as f32 [group_heads, T, head_dim] (kf: converted once for the task's tokens)
    const int64_t kf = kv->type == KVT_TYPE_F16 ? (int64_t)kv->group_heads * T * kv->head_dim * 4 + 64 : 0;
    // and 4 floats per query head for the exponentials of one token's heads taken together (ex)
    const int64_t ex = 4 * qh * 4 + 64;
    return TC * (qh * T * 4 + 2 * (qh * 8 + qh * (int64_t)kv->head_dim_v * 4) + qh * (kvt_row_size(dt, kv->head_dim) + 64)) +
           T * kvt_row_size(kv->type, (int64_t)kv->group_heads * kv->head_dim_v) + 256 + qf + vf + kf + ex;
}

// Fixed chunking: positions [c * CP, (c + 1) * CP) form chunk c, CP = chunk_tiles * T >= KVT_ATTN_CHUNK,
// whatever the thread count, block size or tier set-up. Each chunk is attended from a fresh online-softmax
// state, tile by tile in order; the chunk states of a (token, head) are then folded in chunk order
// (state_fold) and normalised once (state_out). Prefill does the folds inline as its tiles pass a chunk end;
// single-token decode attends the chunks as separate tasks (threads just claim them, in order, so each block
// is read by one or two chunks and a thread walks the blocks in schedule order: the paged store's frontier
// stays exact) and folds the saved chunk states afterwards: the same operations, so the same bits.
static int64_t chunk_tiles(int32_t T) { return (KVT_ATTN_CHUNK + T - 1) / T; }

// Most chunks the workspace holds: one token of a sequence of kv->n_ctx positions.
static int64_t max_chunks(const kvt_kv *kv) { return (kv->n_ctx + KVT_ATTN_CHUNK - 1) / KVT_ATTN_CHUNK; }

// Prefill: tokens per task, one task per thread up to ATTN_TOKENS tokens each: every task walks all blocks
// of the layer, so fewer tasks read fewer blocks (and load fewer when the fast tier is small). A prompt's first
// chunk (pos0 < n: the causal triangle dominates, the last token attends n times more positions than the first)
// is cut into ATTN_SPLIT tasks per thread of at least ATTN_MIN_TOKENS, claimed heaviest first (attn_task), so the
// threads finish together: with one task per thread the last one did 3/4 of the work at n = 128, 2 threads.
#define ATTN_SPLIT 4
#define ATTN_SMALL 512 // decode: (query head, position) pairs a thread under which the heads split one task a thread (below)
#define ATTN_MIN_TOKENS 8
static int64_t tokens_per_task(int64_t n, int64_t pos0, int nt) {
    int64_t tc = (n + nt - 1) / nt;
    if (nt > 1 && pos0 < n) {
        const int64_t tf = (n + (int64_t)ATTN_SPLIT * nt - 1) / ((int64_t)ATTN_SPLIT * nt);
        tc = tf > ATTN_MIN_TOKENS ? tf : ATTN_MIN_TOKENS < tc ? ATTN_MIN_TOKENS : tc;
    }
    return tc < 1 ? 1 : tc > ATTN_TOKENS ? ATTN_TOKENS : tc;
}

// Bytes of the chunk states [n_head][chunks][2 + hdv] f32 of one decoded token (the workspace's first part).
static int64_t part_bytes(const kvt_kv *kv, int32_t n_head) { return max_chunks(kv) * n_head * (2 + (int64_t)kv->head_dim_v) * 4; }

// The attention-mass area, after the chunk states (decode, for a store that wants the mass: kv_paged.h): per
// query head its final (M, L) [n_head][2]; per (head, tile) the tile's running max and its weights' sums (relative
// to that max) per block the tile touches, [n_head][tiles][1 + runs]; the mass per block of one group [blocks].
static int64_t mass_runs(int64_t T, int64_t bt) { return (T + bt - 1) / bt + 1; }
static int64_t mass_floats(const kvt_kv *kv, int32_t n_head, int64_t T) {
    const int64_t tiles = (kv->n_ctx + T - 1) / T;
    return (int64_t)n_head * (2 + tiles * (1 + mass_runs(T, kv->block_tokens))) + kv->n_ctx / kv->block_tokens + 2;
}

int64_t kvt_attn_workspace_bytes(const kvt_kv *kv, int32_t n_head, int n_threads) {
    (void)n_threads;
    return part_bytes(kv, n_head) + mass_floats(kv, n_head, KVT_ATTN_TILE) * 4 + 64;
}

// Folds the state (m, l, o) of the next chunk into the running (M, L, O) of one (token, head).
static void state_fold(float *M, float *L, float *O, float m, float l, const float *o, int32_t hdv) {
    if (m == -INFINITY) return; // no position (cannot happen for a chunk that exists; kept exact anyway)
    const float mn = m > *M ? m : *M;
    const float a = expf(*M - mn), b = expf(m - mn);
    *L = *L * a + l * b;
    kvt_vec_fold_f32(O, a, o, b, hdv);
    *M = mn;
}

// The attention output of one (token, head) from its folded state.
static void state_out(float *dst, float L, const float *O, int32_t hdv) {
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    for (int32_t x = 0; x < hdv; x++) dst[x] = O[x] * inv;
}

typedef struct {
    kvt_kv *kv;
    int32_t seq, layer;
    const kvt_attn_params *p;
    int32_t T;
    const float *q;
    int64_t pos0, n, n_tok; // n_tok: tokens per task
    int64_t n_chunk;        // chunks of the single token when they are separate tasks (split), else 1
    int64_t c0;             // split: the first chunk its window sees (chunks c0 .. c0 + n_chunk - 1)
    int64_t n_hs;           // tasks per (token task, group, chunk): query heads [k * hpt, (k + 1) * hpt) of the group
    int32_t hpt;
    float *out;
    float *part; // [n_head, n_chunk, 2 + hdv] (m, l, o) per chunk when split
    // attention mass (decode for a store that wants it, else NULL): the workspace's mass area (mass_floats)
    float *ml, *rec, *mass;
    int64_t n_tiles, runs; // rec: [n_head][n_tiles][1 + runs]
    void *const *scratch;
    _Atomic int failed;
    kvt_err err;
} attn_job;

// The running max after a tile: max(m, s[0..n)).
static float tile_max(const float *s, int64_t n, float m) { return kvt_vec_max_f32(s, n, m); }

// Decode's attention mass record of query head h for tile tl: the max mn and the weights expf(s - mn) of the
// tile's n scores (from position p on) summed per block. Read only: the attention's result is unchanged.
static void tile_mass(const attn_job *J, int64_t h, int64_t tl, int64_t pa, int64_t p, const float *s, int64_t n,
                      float mn) {
    float *r = J->rec + (h * J->n_tiles + tl) * (1 + J->runs);
    const int64_t bt = J->kv->block_tokens, ba = pa / bt;
    r[0] = mn;
    for (int64_t k = 0; k < J->runs; k++) r[1 + k] = 0.0f;
    for (int64_t x = 0; x < n; x++) r[1 + (p + x) / bt - ba] += expf(s[x] - mn);
}

static bool fail(attn_job *J, const kvt_err *e) {
    if (!atomic_exchange(&J->failed, 1)) J->err = *e;
    return false;
}

// One (tokens [t0, t1), group g, its query heads [a, a + qh)[, chunk c when split]): stream over the tiles for
// those query heads and every token. Per token and head the floating-point operations are those of attending it
// alone, tile by tile in order, chunk by chunk (see chunk_tiles).
static void attn_task(void *vctx, int64_t task, int thread) {
    attn_job *J = vctx;
    kvt_kv *kv = J->kv;
    const int32_t H = J->p->n_head, hd = kv->head_dim, hdv = kv->head_dim_v, T = J->T;
    const int32_t qpg = H / kv->n_head_kv, gq = group_qheads(kv, H);
    const int64_t C = J->n_chunk, S = J->n_hs, n_tt = (J->n + J->n_tok - 1) / J->n_tok; // token tasks
    const int64_t tt = n_tt - 1 - task / (kv->n_group * S * C); // the last tokens (most positions) first
    const int32_t g = (int32_t)((task / (S * C)) % kv->n_group);
    const int64_t c = task % C;
    // the task's query heads: [a, a + qh) of the group's gq (each head's operations are its own: any split, same bits)
    const int32_t a = (int32_t)((task / C) % S) * J->hpt, qh = gq - a < J->hpt ? gq - a : J->hpt;
    const bool split = C > 1;
    const int64_t t0 = tt * J->n_tok, t1 = tt + 1 < n_tt ? t0 + J->n_tok : J->n, nj = t1 - t0;
    const int64_t pos_last = J->pos0 + t1 - 1; // last position attended by the last token (causal)
    const int64_t W = J->p->window;
    const int64_t p_first = first_visible(W, J->pos0 + t0); // first position attended by the first token
    const kvt_type_ops *ops = kvt_type_ops_get(kv->type);
    const kvt_type_ops *qops = kvt_type_ops_get(ops->vec_dot_type);
    const int64_t qrow = (kvt_row_size(ops->vec_dot_type, hd) + 63) / 64 * 64;
    const int64_t vrow = kvt_row_size(kv->type, hdv);
    const bool f16 = kv->type == KVT_TYPE_F16;
    const int64_t CT = chunk_tiles(T);
    float *s = (float *)J->scratch[thread];       // [nj, qh, T] scores
    float *m = s + nj * qh * T;                   // [nj, qh] running max of the chunk
    float *l = m + nj * qh;                       // [nj, qh] running sum of the chunk
    float *o = l + nj * qh;                       // [nj, qh, hdv] accumulators of the chunk
    float *fm = o + nj * qh * hdv;                // [nj, qh] folded state of the chunks done (M, L, O)
    float *fl = fm + nj * qh;
    float *fo = fl + nj * qh;                     // [nj, qh, hdv]
    uint8_t *qd = (uint8_t *)(((uintptr_t)(fo + nj * qh * hdv) + 63) & ~(uintptr_t)63); // [nj, qh, qrow]
    uint8_t *vt = qd + nj * qh * qrow;            // [group_heads, T, vrow] gathered V rows, kv type
    // F16: the queries as f32 [nj, qh, qrow / 2] (their f16 values), for kvt_attn_kq_f16
    float *qf = f16 ? (float *)(((uintptr_t)(vt + (int64_t)kv->group_heads * T * vrow) + 63) & ~(uintptr_t)63) : NULL;
    const int64_t qst = qrow / 2; // elements per query row, f16 and f32 alike
    // F16: the tile's V rows as f32 [group_heads, T, hdv] (exact: the same bits as converting at each use), when
    // at least VF_ROWS (token, head) rows of the task read each KV head's rows: one conversion for all of them
    float *vf = f16 ? (float *)(((uintptr_t)(qf + nj * qh * qst) + 63) & ~(uintptr_t)63) : NULL;
    const bool conv = f16 && nj * (qh < qpg ? qh : qpg) >= VF_ROWS;
    // F16, several tokens: the tile's K rows as f32 [group_heads, T, hd], converted once for all of them (the
    // scores by kvt_attn_kq_kf32 after the tile's rows are read, the same bits as kvt_attn_kq_f16 per token)
    float *kf = f16 ? (float *)(((uintptr_t)(vf + (int64_t)kv->group_heads * T * hdv) + 63) & ~(uintptr_t)63) : NULL;
    const bool kc = f16 && nj > 1 && kvt_attn_kq_kf32_ok(hd);
    // [4, qh] f32: the arguments and values of one token's exponentials, all its heads at once (libm's bits)
    float *ex = (float *)(((uintptr_t)(f16 ? kf + (int64_t)kv->group_heads * T * hd : (float *)(vt + (int64_t)kv->group_heads * T * vrow)) + 63) & ~(uintptr_t)63);
    const int32_t h0 = g * gq + a;                // first query head of the task
    for (int64_t j = 0; j < nj; j++) {
        for (int32_t i = 0; i < qh; i++) {
            qops->from_float(J->q + (t0 + j) * (int64_t)H * hd + (int64_t)(h0 + i) * hd, qd + (j * qh + i) * qrow, hd);
            if (qf) qops->to_float(qd + (j * qh + i) * qrow, qf + (j * qh + i) * qst, hd);
            m[j * qh + i] = fm[j * qh + i] = -INFINITY;
            l[j * qh + i] = fl[j * qh + i] = 0.0f;
        }
    }
    memset(o, 0, (size_t)(nj * qh * hdv) * sizeof(float));
    memset(fo, 0, (size_t)(nj * qh * hdv) * sizeof(float));
    const int64_t ntile = (pos_last + 1 + T - 1) / T, tl_first = p_first / T;
    int64_t held = -1; // block currently acquired
    kvt_kv_view v = {0};
    kvt_err e;
    // split: the tiles of chunk c0 + c from the window's first one on; else all the tiles of the tokens
    const int64_t ca = J->c0 + c, tl_beg = split && ca * CT > tl_first ? ca * CT : tl_first;
    const int64_t tl_end = split && (ca + 1) * CT < ntile ? (ca + 1) * CT : ntile;
    for (int64_t tl = tl_beg; tl < tl_end; tl++) {
        if (atomic_load_explicit(&J->failed, memory_order_relaxed)) break;
        const int64_t pa = tl * T, pb = pa + T < pos_last + 1 ? pa + T : pos_last + 1;
        const int64_t ps = pa > p_first ? pa : p_first; // first position of the tile read (window)
        const bool direct = ps / kv->block_tokens == (pb - 1) / kv->block_tokens; // tile inside one block
        for (int64_t p = ps; p < pb;) {
            const int64_t b = p / kv->block_tokens;
            if (b != held) {
                if (held >= 0) kv->ops->release(kv, J->seq, J->layer, g, held);
                held = -1;
                if (kv->ops->acquire(kv, J->seq, J->layer, g, b, &v, &e)) {
                    fail(J, &e);
                    return;
                }
                held = b;
            }
            const int64_t off = p - v.pos0;
            int64_t cnt = v.pos0 + v.n - p;
            if (cnt > pb - p) cnt = pb - p;
            if (cnt <= 0) { // the store holds fewer positions than attended: a caller error
                kvt_errorf(&e, KVT_ERR_INVALID_ARG, "KV layer %d holds no position %lld", J->layer, (long long)p);
                fail(J, &e);
                break;
            }
            for (int32_t h = a / qpg; kc && h <= (a + qh - 1) / qpg; h++) { // the task's KV heads' rows, to f32
                const uint8_t *src = (const uint8_t *)v.k + h * v.k_hstride + off * v.k_stride;
                for (int64_t x = 0; x < cnt; x++)
                    kvt_f16_to_f32_row((const uint16_t *)(src + x * v.k_stride), kf + (h * (int64_t)T + p - pa + x) * hd, hd);
            }
            for (int64_t j = 0; !kc && j < nj; j++) {
                const int64_t pos = J->pos0 + t0 + j;
                const int64_t cj = pos + 1 - p < cnt ? pos + 1 - p : cnt; // causal: positions <= pos
                const int64_t lo = first_visible(W, pos), x0 = lo > p ? lo - p : 0; // window: positions >= lo
                // F16: the query heads of one KV head together, each score the vec_dot's bits (kvt_attn_kq_f16)
                for (int32_t i = 0, nh; qf && i < qh && cj > x0; i += nh) {
                    nh = qpg - (a + i) % qpg < qh - i ? qpg - (a + i) % qpg : qh - i; // heads of this KV head in the task
                    const uint8_t *kb = (const uint8_t *)v.k + ((a + i) / qpg) * v.k_hstride + (off + x0) * v.k_stride;
                    const int64_t ji = j * qh + i;
                    kvt_attn_kq_f16(hd, kb, v.k_stride, cj - x0, (const uint16_t *)(qd + ji * qrow), qf + ji * qst, qst, nh,
                                    J->p->scale, s + ji * T + (p - pa) + x0, T);
                }
                for (int32_t i = 0; !qf && i < qh && cj > x0; i++) {
                    const uint8_t *kb = (const uint8_t *)v.k + ((a + i) / qpg) * v.k_hstride + off * v.k_stride;
                    const uint8_t *qj = qd + (j * qh + i) * qrow;
                    float *si = s + (j * qh + i) * T + (p - pa);
                    for (int64_t x = x0; x < cj; x++) {
                        float d;
                        ops->vec_dot(hd, &d, kb + x * v.k_stride, qj);
                        si[x] = d * J->p->scale;
                    }
                }
            }
            if (!direct) {
                for (int32_t h = a / qpg; h <= (a + qh - 1) / qpg; h++) { // the task's KV heads
                    const uint8_t *src = (const uint8_t *)v.v + h * v.v_hstride + off * v.v_stride;
                    uint8_t *dst = vt + (h * (int64_t)T + p - pa) * vrow;
                    if (v.v_stride == vrow) memcpy(dst, src, (size_t)(cnt * vrow));
                    else for (int64_t x = 0; x < cnt; x++) memcpy(dst + x * vrow, src + x * v.v_stride, (size_t)vrow);
                }
            }
            p += cnt;
        }
        if (atomic_load_explicit(&J->failed, memory_order_relaxed)) break;
        for (int64_t j = 0; kc && j < nj; j++) { // the scores from the converted K rows (kc)
            const int64_t pos = J->pos0 + t0 + j, lo = first_visible(W, pos);
            const int64_t cj = (pos + 1 < pb ? pos + 1 : pb) - pa, x0 = lo > pa ? lo - pa : 0; // [pa + x0, pa + cj)
            for (int32_t i = 0, nh; i < qh && cj > x0; i += nh) {
                nh = qpg - (a + i) % qpg < qh - i ? qpg - (a + i) % qpg : qh - i; // heads of this KV head in the task
                const int64_t ji = j * qh + i;
                kvt_attn_kq_kf32(hd, kf + (((a + i) / qpg) * (int64_t)T + x0) * hd, hd, cj - x0, qf + ji * qst, qst, nh,
                                 J->p->scale, s + ji * T + x0, T);
            }
        }
        // merge the tile into the running (m, l, o) of every head of every token that attends it
        int64_t vstr = direct ? v.v_stride : vrow, vhstr = direct ? v.v_hstride : T * vrow;
        kvt_type vtype = kv->type;
        // F16 V in chunk 0 (positions [0, KVT_ATTN_CHUNK)): llama.cpp's order, o in f16 (kvt_attn_merge_f16);
        // every later chunk in f32 with one max per tile (attention.h)
        const bool f16m = f16 && tl < CT, cv = conv && !f16m;
        if (cv) { // the tile's rows [ps, pb) of the task's KV heads, to f32 once
            for (int32_t h = a / qpg; h <= (a + qh - 1) / qpg; h++) {
                for (int64_t x = ps_of(pa, p_first); x < pb - pa; x++) {
                    const uint8_t *src = direct ? (const uint8_t *)v.v + h * v.v_hstride + (pa + x - v.pos0) * v.v_stride
                                                : vt + (h * (int64_t)T + x) * vrow;
                    kvt_f16_to_f32_row((const uint16_t *)src, vf + (h * (int64_t)T + x) * hdv, hdv);
                }
            }
            vstr = (int64_t)hdv * 4, vhstr = T * vstr, vtype = KVT_TYPE_F32;
        }
        for (int64_t j = 0; j < nj; j++) {
            const int64_t pos = J->pos0 + t0 + j, lo = first_visible(W, pos);
            if (pos < pa) continue;
            const int64_t cnt = (pa + T < pos + 1 ? pa + T : pos + 1) - pa, x0 = lo > pa ? lo - pa : 0;
            // the tile lies before the token's window (its chunk state is still empty, nothing to fold)
            if (x0 >= cnt) continue;
            // V rows of the tile from its position pa + x0 on (the token's first visible one)
            const uint8_t *vbase = cv ? (const uint8_t *)(vf + x0 * hdv)
                                   : direct ? (const uint8_t *)v.v + (pa + x0 - v.pos0) * v.v_stride : vt + x0 * vrow;
            // the token's chunk ends with this tile: fold it (prefill; split tasks save it instead)
            const bool fold = !split && ((tl + 1) % CT == 0 || pos < pa + T);
            for (int32_t i = 0, nh; f16m && i < qh; i += nh) { // the query heads of one KV head together
                const int64_t ji = j * qh + i;
                nh = qpg - (a + i) % qpg < qh - i ? qpg - (a + i) % qpg : qh - i; // heads of this KV head in the task
                for (int32_t k = 0; J->rec && k < nh; k++) { // decode: each head's weights per block
                    const float *sk = s + (ji + k) * T + x0;
                    tile_mass(J, h0 + i + k, tl, pa, pa + x0, sk, cnt - x0, tile_max(sk, cnt - x0, m[ji + k]));
                }
                kvt_attn_merge_f16(nh, s + ji * T + x0, T, cnt - x0, vbase + ((a + i) / qpg) * vhstr, vstr, m + ji, l + ji,
                                   o + ji * hdv, hdv, hdv);
            }
            // per head: the max, the correction expf(m - max) (all the heads' at once), the weights
            for (int32_t i = 0; !f16m && i < qh; i++) {
                const int64_t ji = j * qh + i;
                float *si = s + ji * T + x0;
                const float mn = tile_max(si, cnt - x0, m[ji]); // the running max after the tile
                if (J->rec) tile_mass(J, h0 + i, tl, pa, pa + x0, si, cnt - x0, mn); // decode: its weights per block
                ex[i] = m[ji] - mn;
                ex[qh + i] = mn;
            }
            if (!f16m) kvt_vec_expf_sub(ex, 0.0f, ex + 2 * qh, qh); // expf(d - 0) = expf(d), bit for bit
            for (int32_t i = 0; !f16m && i < qh; i++) {
                const int64_t ji = j * qh + i;
                float *si = s + ji * T + x0;
                const float mn = ex[qh + i], corr = ex[2 * qh + i];
                // a fresh state (m -inf, l and o 0) under a finite max: corr is 0 and leaves l and o as they are
                if (corr != 1.0f && !(m[ji] == -INFINITY && mn > -INFINITY)) {
                    l[ji] *= corr;
                    kvt_vec_scale_f32(o + ji * hdv, corr, hdv);
                }
                kvt_vec_expf_sub(si, mn, si, cnt - x0); // scores -> weights, in place (libm's expf bits)
                m[ji] = mn;
            }
            // the sums l, each in position order (8 heads at a time in the lanes of one vector: kvt_vec_sum_rows_f32)
            if (!f16m) kvt_vec_sum_rows_f32(l + j * qh, s + j * qh * T + x0, T, qh, cnt - x0);
            for (int32_t i = 0; !f16m && i < qh; i++) {
                const int64_t ji = j * qh + i;
                kvt_vec_mad_rows(vtype, o + ji * hdv, vbase + ((a + i) / qpg) * vhstr, vstr, s + ji * T + x0, cnt - x0, hdv);
            }
            // fold: state_fold's operations (the same bits), the exponentials of all the heads at once
            for (int32_t i = 0; fold && i < qh; i++) {
                const int64_t ji = j * qh + i;
                const float mn = m[ji] > fm[ji] ? m[ji] : fm[ji];
                ex[2 * i] = m[ji] == -INFINITY ? 0.0f : fm[ji] - mn;
                ex[2 * i + 1] = m[ji] == -INFINITY ? 0.0f : m[ji] - mn;
            }
            if (fold) kvt_vec_expf_sub(ex, 0.0f, ex + 2 * qh, 2 * qh);
            for (int32_t i = 0; fold && i < qh; i++) {
                const int64_t ji = j * qh + i;
                if (m[ji] != -INFINITY) {
                    const float mn = m[ji] > fm[ji] ? m[ji] : fm[ji], fa = ex[2 * qh + 2 * i], fb = ex[2 * qh + 2 * i + 1];
                    fl[ji] = fl[ji] * fa + l[ji] * fb;
                    kvt_vec_fold_f32(fo + ji * hdv, fa, o + ji * hdv, fb, hdv);
                    fm[ji] = mn;
                } // else: no position (state_fold's early return)
                m[ji] = -INFINITY;
                l[ji] = 0.0f;
                memset(o + ji * hdv, 0, (size_t)hdv * sizeof(float));
            }
        }
    }
    if (held >= 0) kv->ops->release(kv, J->seq, J->layer, g, held);
    if (atomic_load_explicit(&J->failed, memory_order_relaxed)) return;
    for (int64_t j = 0; j < nj; j++) {
        const int64_t t = t0 + j;
        for (int32_t i = 0; i < qh; i++) {
            const int32_t h = h0 + i;
            const int64_t ji = j * qh + i;
            if (!split) {
                state_out(J->out + t * (int64_t)H * hdv + (int64_t)h * hdv, fl[ji], fo + ji * hdv, hdv);
                if (J->ml) {
                    J->ml[2 * h] = fm[ji];
                    J->ml[2 * h + 1] = fl[ji];
                }
            } else {
                float *ps = J->part + (h * C + c) * (2 + hdv);
                ps[0] = m[ji];
                ps[1] = l[ji];
                memcpy(ps + 2, o + ji * hdv, (size_t)hdv * sizeof(float));
            }
        }
    }
}

// Folds the chunk states of one head of the single token in chunk order.
static void merge_task(void *vctx, int64_t h, int thread) {
    (void)thread;
    attn_job *J = vctx;
    const int32_t hdv = J->kv->head_dim_v;
    const int64_t C = J->n_chunk;
    const float *ps = J->part + h * C * (2 + hdv);
    float *dst = J->out + h * (int64_t)hdv;
    float M = -INFINITY, L = 0.0f;
    memset(dst, 0, (size_t)hdv * sizeof(float));
    for (int64_t c = 0; c < C; c++) {
        const float *pc = ps + c * (2 + hdv);
        state_fold(&M, &L, dst, pc[0], pc[1], pc + 2, hdv);
    }
    state_out(dst, L, dst, hdv);
    if (J->ml) {
        J->ml[2 * h] = M;
        J->ml[2 * h + 1] = L;
    }
}

// Decode: the softmax weight of each block [b_first, pos0 / bt] visible to the token, summed over its positions and
// averaged over the query heads of each group, from the tiles' records and the heads' final (M, L); handed to the
// store (kvt_kv_paged_attn_mass), which then prefetches the blocks its EMA finds important (kvt_kv_paged_attn_prefetch).
static void mass_export(const attn_job *J, int64_t p_first) {
    kvt_kv *kv = J->kv;
    const int64_t bt = kv->block_tokens, T = J->T, b_first = p_first / bt, nb = J->pos0 / bt - b_first + 1;
    const int64_t tl_first = p_first / T, ntile = J->pos0 / T + 1;
    const int32_t qh = group_qheads(kv, J->p->n_head);
    for (int32_t g = 0; g < kv->n_group; g++) {
        for (int64_t b = 0; b < nb; b++) J->mass[b] = 0.0f;
        for (int32_t i = 0; i < qh; i++) {
            const int32_t h = g * qh + i;
            const float M = J->ml[2 * h], L = J->ml[2 * h + 1];
            for (int64_t tl = tl_first; L > 0.0f && tl < ntile; tl++) {
                const float *r = J->rec + ((int64_t)h * J->n_tiles + tl) * (1 + J->runs);
                const float f = r[0] == -INFINITY ? 0.0f : expf(r[0] - M) / L;
                for (int64_t k = 0; f > 0.0f && k < J->runs; k++) {
                    const int64_t b = tl * T / bt + k - b_first;
                    if (b >= 0 && b < nb) J->mass[b] += r[1 + k] * f;
                }
            }
        }
        for (int64_t b = 0; b < nb; b++) J->mass[b] /= (float)qh;
        kvt_kv_paged_attn_mass(kv, J->seq, J->layer, g, b_first, J->mass, nb);
        kvt_kv_paged_attn_prefetch(kv, J->seq, J->layer, g, b_first, nb, 1.0 / (double)nb);
    }
}

kvt_status kvt_attention(kvt_kv *kv, int32_t seq, int32_t layer, const kvt_attn_params *p, const float *q, int64_t pos0,
                         int64_t n, float *out, kvt_threadpool *pool, void *const *scratch, void *workspace,
                         kvt_err *err) {
    if (p->n_head % kv->n_head_kv) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "n_head %d not a multiple of n_head_kv %d", p->n_head, kv->n_head_kv);
    }
    const int nt = kvt_threadpool_n_threads(pool);
    attn_job J = {.kv = kv, .seq = seq, .layer = layer, .p = p, .T = tile_of(p->tile), .q = q, .pos0 = pos0, .n = n,
                  .out = out, .scratch = scratch, .part = workspace, .n_chunk = 1, .n_hs = 1,
                  .hpt = group_qheads(kv, p->n_head)};
    // one token on several threads: its chunks (those its window sees) are the tasks; same result either way
    const int64_t T = J.T, CT = chunk_tiles(J.T);
    const int64_t c_end = ((pos0 + 1 + T - 1) / T + CT - 1) / CT, c0 = first_visible(p->window, pos0) / T / CT;
    if (n == 1 && nt > 1 && workspace && c_end - c0 > 1 && c_end - c0 <= max_chunks(kv)) {
        J.c0 = c0;
        J.n_chunk = c_end - c0;
    }
    J.n_tok = J.n_chunk > 1 ? 1 : tokens_per_task(n, pos0, nt);
    // one token with too few (group, chunk) tasks to keep the threads busy (SmolLM2: 1 group of 9 query heads, one
    // chunk below 64 positions): the group's query heads split too, down to one head per task. Each head's
    // operations are the same whatever the split. Only a store whose reads are free (the contiguous one): every
    // task acquires the blocks it reads, and the paged store's frontier and statistics count readers.
    // A small attention (fewer than ATTN_SMALL (query head, position) pairs a thread) splits only into one task a
    // thread: a task's claim and set-up cost more than its heads (SmolLM2 Q4_1 at <= 32 positions, 2 threads: 2 tasks
    // instead of 9 one-head tasks, token-paired ~0.9% faster a token: docs/log/BENCHMARKS-kernels-5.md, dp).
    if (n == 1 && nt > 1 && kv->ops->free_reads) {
        const int64_t span = pos0 + 1 - first_visible(p->window, pos0), pairs = (int64_t)p->n_head * span;
        const int64_t want = pairs < ATTN_SMALL * nt ? nt : 8 * (int64_t)nt, have = (int64_t)kv->n_group * J.n_chunk;
        if (have < want) {
            const int32_t gq = J.hpt;
            int64_t S = (want + have - 1) / have;
            if (S > gq) S = gq;
            J.hpt = (int32_t)((gq + S - 1) / S);
            J.n_hs = (gq + J.hpt - 1) / J.hpt;
        }
    }
    // decode for a store that ranks blocks by attention mass: the mass area of the workspace, if the tile fits it
    const int64_t p_first = first_visible(p->window, pos0);
    if (n == 1 && workspace && kvt_kv_paged_wants_attn_mass(kv) &&
        mass_floats(kv, p->n_head, T) <= mass_floats(kv, p->n_head, KVT_ATTN_TILE)) {
        J.ml = (float *)((uint8_t *)workspace + part_bytes(kv, p->n_head));
        J.n_tiles = (kv->n_ctx + T - 1) / T;
        J.runs = mass_runs(T, kv->block_tokens);
        J.rec = J.ml + 2 * p->n_head;
        J.mass = J.rec + p->n_head * J.n_tiles * (1 + J.runs);
        for (int64_t i = 0; i < p->n_head * J.n_tiles; i++) J.rec[i * (1 + J.runs)] = -INFINITY;
    }
    atomic_init(&J.failed, 0);
    kvt_threadpool_run(pool, attn_task, &J, (n + J.n_tok - 1) / J.n_tok * kv->n_group * J.n_hs * J.n_chunk);
    if (!atomic_load(&J.failed) && J.n_chunk > 1) kvt_threadpool_run(pool, merge_task, &J, p->n_head);
    if (!atomic_load(&J.failed) && J.ml) mass_export(&J, p_first);
    if (atomic_load(&J.failed)) {
        if (err) *err = J.err;
        return J.err.status;
    }
    return KVT_OK;
}
