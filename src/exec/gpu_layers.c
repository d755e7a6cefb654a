// gpu_layers.c - the device layers of a CPU/GPU split (gpu_layers.h): weights, KV blocks and the forward pass of
// a layer through the CUDA backend's table.
#include "gpu_layers.h"

#include <stdlib.h>
#include <string.h>

#include "../base/timer.h"
#include "../kernels/dtype.h"
#include "gpu_kv.h"

typedef struct {
    void *wq, *wk, *wv, *wo, *wg, *wu, *wd;  // device weights, as in the GGUF
    float *attn_norm, *ffn_norm;            // device [n_embd]
    float *q_norm, *k_norm;                 // device [head_dim] (qwen3) or NULL
    float *bq, *bk, *bv;                    // device biases (qwen2) or NULL
    float *post_attn_norm, *post_ffn_norm;  // device [n_embd] (gemma3) or NULL
} dev_layer;

struct kvt_gpu_layers {
    const kvt_cuda_api *api;
    kvt_cuda_ctx *ctx;
    const kvt_model *m;
    kvt_gpu_layers_params p;
    int32_t nl;             // device layers
    dev_layer *L;           // [nl]
    int64_t weight_bytes;
    kvt_gpu_kv *kv;         // the device layers' KV cache (VRAM over pinned host: gpu_kv.h)
    float *ff;              // device rope frequency factors [n_rot / 2] or NULL
    void *w_out;            // p.output: device output weight (token_embd when tied)
    float *out_norm;        // p.output: device [n_embd]
    float *logits;          // p.output: device [n_ubatch, n_vocab]
    int32_t *dids;          // p.output: device [n_ubatch] greedy ids (kvt_gpu_layers_argmax)
    int64_t kept;           // rows of logits the last run left on the device (its logits NULL), else 0
    // scratch, device [n_ubatch, width] f32: x, xn, q, k, v, att, tmp, gate, up; int32 [n_ubatch] positions, rows'
    // sequences and lengths, with their host staging
    float *x, *xn, *q, *k, *v, *att, *tmp, *gate, *up;
    int32_t *dpos, *drow, *dlen, *hpos, *hrow, *hlen;
    int64_t h2d, d2h, d2d, calls; // bytes moved after init (kvt_gpu_layers_stats)
    int64_t argmax_calls;         // kvt_gpu_layers_argmax calls
    kvt_cuda_event *ev_join;      // COPY's work of a micro-batch's layers, joined back into COMPUTE (a graph's end)
    kvt_cuda_graph *graph;        // p.graphs: the executable graph of the last captured micro-batch (NULL: none yet)
    bool graph_off;               // a capture failed: graphs are off for this context
    int64_t graph_steps, graph_updates;
    double run_ms, kv_ms, sync_ms; // host wall time in the calls, in the device KV's calls, waiting for the device
};

static kvt_status cu_fail(const kvt_gpu_layers *g, const char *what, kvt_err *err) {
    return kvt_errorf(err, KVT_ERR_IO, "CUDA %s: %s", what, g->api->last_error(g->ctx));
}
#define CU(call, what)                                                                                                        \
    do {                                                                                                                      \
        if ((call) != KVT_CUDA_OK) return cu_fail(g, what, err);                                                              \
    } while (0)

static kvt_status upload(kvt_gpu_layers *g, const void *src, size_t bytes, void **dst, kvt_err *err) {
    *dst = NULL;
    if (!src || bytes == 0) return KVT_OK;
    CU(g->api->dev_malloc(g->ctx, bytes, dst), "allocation of a weight");
    CU(g->api->copy_h2d(g->ctx, *dst, src, bytes, KVT_CUDA_STREAM_COMPUTE), "upload of a weight");
    g->weight_bytes += (int64_t)bytes;
    return KVT_OK;
}

static kvt_status upload_weight(kvt_gpu_layers *g, const kvt_weight *w, const char *name, int32_t il, void **dst,
                                kvt_err *err) {
    const kvt_type wt = kvt_weight_file_type(w); // the GGUF's layout (w->data may be repacked for the CPU)
    // the types the device's matrix kernels take (src/cuda/cuda_blocks.cuh type_block, f32 and bf16 apart)
    const bool device_type = wt == KVT_TYPE_F16 || wt == KVT_TYPE_Q4_0 || wt == KVT_TYPE_Q4_1 || wt == KVT_TYPE_Q8_0 ||
                             wt == KVT_TYPE_Q4_K || wt == KVT_TYPE_Q5_K || wt == KVT_TYPE_Q6_K;
    if (!device_type || w->cols % 8) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "layer %d weight %s (%s, %lld columns) cannot run on the device yet",
                          il, name, kvt_type_name(wt), (long long)w->cols);
    }
    return upload(g, kvt_weight_file_data(w), (size_t)(w->rows * kvt_row_size(wt, w->cols)), dst, err);
}

static kvt_status check_model(const kvt_model *m, kvt_err *err) {
    const kvt_hparams *hp = &m->hp;
    if (hp->head_dim_v != hp->head_dim || hp->head_dim > KVT_CUDA_ATTN_MAX_HEAD_DIM || hp->head_dim % 2) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "device layers: head_dim %d / %d (the device's attention needs equal K "
                          "and V widths, even, at most %d)", hp->head_dim, hp->head_dim_v, KVT_CUDA_ATTN_MAX_HEAD_DIM);
    }
    return KVT_OK;
}

kvt_status kvt_gpu_layers_init(const kvt_cuda_backend *b, const kvt_model *m, const kvt_gpu_layers_params *p,
                               kvt_gpu_layers **out, kvt_err *err) {
    *out = NULL;
    const kvt_hparams *hp = &m->hp;
    if (!b || !b->api || p->il0 < 0 || p->il0 > hp->n_layer || (p->il0 == hp->n_layer && !p->output) || p->n_ubatch < 1 ||
        p->n_ctx < 1 || p->block_len < 1) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "device layers: first layer %d of %d, ubatch %lld, context %lld, block %lld",
                          p->il0, hp->n_layer, (long long)p->n_ubatch, (long long)p->n_ctx, (long long)p->block_len);
    }
    if (p->group_heads < 0 || p->group_heads > hp->n_head_kv || (p->group_heads > 0 && hp->n_head_kv % p->group_heads)) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "device layers: KV groups of %d heads do not divide the %d KV heads",
                          p->group_heads, hp->n_head_kv);
    }
    kvt_status st = check_model(m, err);
    if (st) return st;
    kvt_gpu_layers *g = calloc(1, sizeof *g);
    if (!g) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    g->api = b->api;
    g->m = m;
    g->p = *p;
    g->nl = hp->n_layer - p->il0;
    char msg[KVT_CUDA_ERR_MAX] = "";
    if (g->api->ctx_init(p->device, &g->ctx, msg, (int)sizeof msg) != KVT_CUDA_OK) {
        free(g);
        return kvt_errorf(err, KVT_ERR_IO, "CUDA context on device %d: %s", p->device, msg);
    }
    *out = g; // freed by kvt_gpu_layers_free on any failure below
    const size_t nl = g->nl > 0 ? (size_t)g->nl : 1; // none: the output alone (still a valid allocation)
    g->L = calloc(nl, sizeof *g->L);
    if (!g->L) st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    const int64_t E = hp->n_embd, hd = hp->head_dim;
    for (int32_t i = 0; !st && i < g->nl; i++) {
        const int32_t il = p->il0 + i;
        const kvt_layer *L = &m->layers[il];
        dev_layer *D = &g->L[i];
        const kvt_weight *w[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        void **d[7] = {&D->wq, &D->wk, &D->wv, &D->wo, &D->wg, &D->wu, &D->wd};
        static const char *const names[7] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
        for (int j = 0; !st && j < 7; j++) st = upload_weight(g, w[j], names[j], il, d[j], err);
        if (!st) st = upload(g, L->attn_norm, (size_t)E * sizeof(float), (void **)&D->attn_norm, err);
        if (!st) st = upload(g, L->ffn_norm, (size_t)E * sizeof(float), (void **)&D->ffn_norm, err);
        if (!st && L->q_norm) st = upload(g, L->q_norm, (size_t)hd * sizeof(float), (void **)&D->q_norm, err);
        if (!st && L->k_norm) st = upload(g, L->k_norm, (size_t)hd * sizeof(float), (void **)&D->k_norm, err);
        if (!st && L->bq) st = upload(g, L->bq, (size_t)L->wq.rows * sizeof(float), (void **)&D->bq, err);
        if (!st && L->bk) st = upload(g, L->bk, (size_t)L->wk.rows * sizeof(float), (void **)&D->bk, err);
        if (!st && L->bv) st = upload(g, L->bv, (size_t)L->wv.rows * sizeof(float), (void **)&D->bv, err);
        if (!st && L->post_attn_norm) st = upload(g, L->post_attn_norm, (size_t)E * sizeof(float), (void **)&D->post_attn_norm, err);
        if (!st && L->post_ffn_norm) st = upload(g, L->post_ffn_norm, (size_t)E * sizeof(float), (void **)&D->post_ffn_norm, err);
    }
    if (!st && m->rope_freqs) st = upload(g, m->rope_freqs, (size_t)(hp->n_rot / 2) * sizeof(float), (void **)&g->ff, err);
    if (!st && p->output) {
        st = upload_weight(g, &m->output, "output", hp->n_layer, &g->w_out, err);
        if (!st) st = upload(g, m->output_norm, (size_t)E * sizeof(float), (void **)&g->out_norm, err);
        if (!st && g->api->dev_malloc(g->ctx, (size_t)(p->n_ubatch * hp->n_vocab) * sizeof(float), (void **)&g->logits))
            st = cu_fail(g, "allocation of the logits", err);
        if (!st && g->api->dev_malloc(g->ctx, (size_t)p->n_ubatch * sizeof(int32_t), (void **)&g->dids))
            st = cu_fail(g, "allocation of the greedy ids", err);
    }
    // scratch
    const int64_t U = p->n_ubatch, Q = (int64_t)hp->n_head * hd, K = (int64_t)hp->n_head_kv * hd;
    // `up` also holds the micro-batch's K and V as f16 before the FFN (layer): at least 2 K f16 = K f32 wide
    const int64_t widths[9] = {E, E, Q, K, K, Q, E, hp->n_ff, hp->n_ff > K ? hp->n_ff : K};
    float **bufs[9] = {&g->x, &g->xn, &g->q, &g->k, &g->v, &g->att, &g->tmp, &g->gate, &g->up};
    for (int j = 0; !st && j < 9; j++) {
        if (g->api->dev_malloc(g->ctx, (size_t)(U * widths[j]) * sizeof(float), (void **)bufs[j]) != KVT_CUDA_OK)
            st = cu_fail(g, "allocation of the scratch", err);
    }
    int32_t **ibufs[3] = {&g->dpos, &g->drow, &g->dlen};
    for (int j = 0; !st && j < 3; j++) {
        if (g->api->dev_malloc(g->ctx, (size_t)U * sizeof(int32_t), (void **)ibufs[j]) != KVT_CUDA_OK)
            st = cu_fail(g, "allocation of the scratch", err);
    }
    g->hpos = malloc((size_t)U * sizeof(int32_t));
    g->hrow = malloc((size_t)U * sizeof(int32_t));
    g->hlen = malloc((size_t)U * sizeof(int32_t));
    if (!st && (!g->hpos || !g->hrow || !g->hlen)) st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    if (!st) {
        int32_t *win = malloc(nl * sizeof *win);
        for (int32_t i = 0; win && i < g->nl; i++) win[i] = m->layers[p->il0 + i].window;
        const int32_t ng = p->group_heads > 0 ? hp->n_head_kv / p->group_heads : 1;
        const kvt_gpu_kv_params kp = {g->nl, p->block_len, p->n_ctx, K / ng * 2, win, p->vram_kv_bytes, p->evict, ng,
                                      p->pinned_kv_bytes, p->disk_dir, p->disk_kv_bytes, p->copy_min, p->disk_sync};
        st = win ? kvt_gpu_kv_init(g->api, g->ctx, &kp, &g->kv, err) : kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
        free(win);
    }
    if (!st && g->api->event_create(g->ctx, &g->ev_join) != KVT_CUDA_OK) st = cu_fail(g, "event", err);
    if (!st && g->api->stream_sync(g->ctx, KVT_CUDA_STREAM_COMPUTE) != KVT_CUDA_OK) st = cu_fail(g, "weight upload", err);
    if (st) {
        kvt_gpu_layers_free(g);
        *out = NULL;
    }
    return st;
}

void kvt_gpu_layers_free(kvt_gpu_layers *g) {
    if (!g) return;
    const kvt_cuda_api *A = g->api;
    if (g->ctx) {
        A->stream_sync(g->ctx, KVT_CUDA_STREAM_COMPUTE);
        for (int32_t i = 0; g->L && i < g->nl; i++) {
            dev_layer *D = &g->L[i];
            void *ps[16] = {D->wq, D->wk, D->wv, D->wo, D->wg, D->wu, D->wd, D->attn_norm, D->ffn_norm, D->q_norm, D->k_norm,
                            D->bq, D->bk, D->bv, D->post_attn_norm, D->post_ffn_norm};
            for (int j = 0; j < 16; j++) A->dev_free(g->ctx, ps[j]);
        }
        kvt_gpu_kv_free(g->kv);
        if (g->ev_join) A->event_free(g->ctx, g->ev_join);
        A->graph_free(g->ctx, g->graph);
        void *ps[17] = {g->ff,   g->x,  g->xn,   g->q,    g->k,    g->v,     g->att,      g->tmp,    g->gate,
                        g->up,   g->dpos, g->drow, g->dlen, g->w_out, g->out_norm, g->logits, g->dids};
        for (int j = 0; j < 17; j++) A->dev_free(g->ctx, ps[j]);
        A->ctx_free(g->ctx);
    }
    free(g->L);
    free(g->hpos);
    free(g->hrow);
    free(g->hlen);
    free(g);
}

// y = W x over n rows: the matrix-vector kernel up to KVT_CUDA_MMV_BATCH_MAX rows (each row's sums independent of the
// rows beside it: a beam schedule or a serving batch that groups the same rows otherwise gets the same bits), the GEMM
// (f16 operands) past that.
static int mm(kvt_gpu_layers *g, const kvt_weight *w, const void *dw, const float *x, int64_t n, float *y) {
    return n <= KVT_CUDA_MMV_BATCH_MAX ? g->api->mul_mat_vec(g->ctx, (int)kvt_weight_file_type(w), dw, w->rows, w->cols, x, n, y)
                                      : g->api->mul_mat_gemm(g->ctx, (int)kvt_weight_file_type(w), dw, w->rows, w->cols, x, n, y);
}

// Head group j's K and V rows of the micro-batch (f16 kh, vh: row t at t * stride, gk elements) into their blocks, by
// copy_batch: one copy per run of rows whose positions follow each other in one block and whose sources lie side by
// side (stride == gk: one head group), so that a prefill's rows cross in one copy per block, in lists of at most
// KVT_CUDA_COPY_BATCH_MAX copies (one launch each), not one launch per row.
static kvt_status store_rows(kvt_gpu_layers *g, int32_t i, int32_t j, int64_t n, const int32_t *seqs, const int64_t *pos,
                             const uint16_t *kh, const uint16_t *vh, int64_t gk, int64_t stride, int64_t voff, kvt_err *err) {
    const int64_t bl = g->p.block_len, rb = gk * (int64_t)sizeof(uint16_t);
    kvt_cuda_copy list[KVT_CUDA_COPY_BATCH_MAX];
    int nc = 0;
    for (int64_t t0 = 0, t1; t0 < n; t0 = t1) {
        for (t1 = t0 + 1; t1 < n && stride == gk && seqs[t1] == seqs[t0] && pos[t1] == pos[t1 - 1] + 1 && pos[t1] % bl; t1++) {}
        uint8_t *row = kvt_gpu_kv_row(g->kv, i, j, seqs[t0], pos[t0]);
        if (t1 - t0 > 1) kvt_gpu_kv_row(g->kv, i, j, seqs[t0], pos[t1 - 1]); // the block's written rows: [first, last]
        const size_t bytes = (size_t)((t1 - t0) * rb);
        list[nc++] = (kvt_cuda_copy){row, kh + t0 * stride, bytes};
        list[nc++] = (kvt_cuda_copy){row + voff, vh + t0 * stride, bytes};
        if (nc + 2 > KVT_CUDA_COPY_BATCH_MAX || t1 == n) {
            CU(g->api->copy_batch(g->ctx, list, nc, KVT_CUDA_STREAM_COMPUTE), "K and V into their blocks");
            nc = 0;
        }
    }
    return KVT_OK;
}

// y[t] += b for the n rows of y (w wide, w <= the query width): b repeated n times into `att` (free until the
// attention) by log2 n copies, each doubling the rows, then one add over them all; not one launch per row (a prefill
// of 512 rows made 3 x 512 launches a layer for qwen2's biases). The same sums.
static kvt_status add_bias(kvt_gpu_layers *g, float *y, const float *b, int64_t n, int64_t w, kvt_err *err) {
    const kvt_cuda_api *A = g->api;
    if (n == 1) {
        CU(A->add(g->ctx, y, b, w), "bias");
        return KVT_OK;
    }
    float *rep = g->att; // [n, w]
    CU(A->copy_d2d(g->ctx, rep, b, (size_t)w * sizeof(float), KVT_CUDA_STREAM_COMPUTE), "bias rows");
    for (int64_t have = 1; have < n; have *= 2) {
        const int64_t c = have < n - have ? have : n - have;
        CU(A->copy_d2d(g->ctx, rep + have * w, rep, (size_t)(c * w) * sizeof(float), KVT_CUDA_STREAM_COMPUTE), "bias rows");
    }
    CU(A->add(g->ctx, y, rep, n * w), "bias");
    return KVT_OK;
}

// y_i = W_i x for the n (<= KVT_CUDA_MV_MULTI_MAX) weights w[i] of one input (a layer's q, k, v; gate, up): one
// mul_mat_vec_multi call up to KVT_CUDA_MMV_BATCH_MAX rows (x quantized once for all of them), each its GEMM past that
static kvt_status mm_multi(kvt_gpu_layers *g, int n_w, const kvt_weight *const *w, void *const *dw, const float *x, int64_t n,
                           float *const *y, const char *what, kvt_err *err) {
    if (n > KVT_CUDA_MMV_BATCH_MAX) {
        for (int i = 0; i < n_w; i++) CU(mm(g, w[i], dw[i], x, n, y[i]), what);
        return KVT_OK;
    }
    kvt_cuda_mv mv[KVT_CUDA_MV_MULTI_MAX];
    for (int i = 0; i < n_w; i++) mv[i] = (kvt_cuda_mv){(int)kvt_weight_file_type(w[i]), dw[i], w[i]->rows, y[i]};
    CU(g->api->mul_mat_vec_multi(g->ctx, mv, n_w, w[0]->cols, x, n), what);
    return KVT_OK;
}

static kvt_status layer(kvt_gpu_layers *g, int32_t i, int64_t n, const int32_t *seqs, const int64_t *pos, int32_t max_len,
                        kvt_err *err) {
    const void *const *tk, *const *tv;
    int32_t mb;
    const double t0 = kvt_time_ms();
    kvt_status st = kvt_gpu_kv_layer(g->kv, i, &tk, &tv, &mb, err); // the layer's blocks fetched (or read from host)
    g->kv_ms += kvt_time_ms() - t0;
    if (st) return st;
    const kvt_cuda_api *A = g->api;
    const kvt_hparams *hp = &g->m->hp;
    const kvt_layer *L = &g->m->layers[g->p.il0 + i];
    const dev_layer *D = &g->L[i];
    const int64_t E = hp->n_embd, hd = hp->head_dim, K = (int64_t)hp->n_head_kv * hd;
    CU(A->rmsnorm(g->ctx, g->x, D->attn_norm, g->xn, n, E, hp->rms_eps), "rmsnorm");
    {
        const kvt_weight *const w[3] = {&L->wq, &L->wk, &L->wv};
        void *const dw[3] = {D->wq, D->wk, D->wv};
        float *const y[3] = {g->q, g->k, g->v};
        if ((st = mm_multi(g, 3, w, dw, g->xn, n, y, "attn_q, attn_k, attn_v", err))) return st;
    }
    if (D->bq && (st = add_bias(g, g->q, D->bq, n, L->wq.rows, err))) return st;
    if (D->bk && (st = add_bias(g, g->k, D->bk, n, L->wk.rows, err))) return st;
    if (D->bv && (st = add_bias(g, g->v, D->bv, n, L->wv.rows, err))) return st;
    if (D->q_norm) CU(A->rmsnorm(g->ctx, g->q, D->q_norm, g->q, n * hp->n_head, hd, hp->rms_eps), "q norm");
    if (D->k_norm) CU(A->rmsnorm(g->ctx, g->k, D->k_norm, g->k, n * hp->n_head_kv, hd, hp->rms_eps), "k norm");
    // a local (sliding-window) layer ropes with its own base and scale (gemma3), as forward.c's second table
    kvt_cuda_rope_args ra = {(int32_t)n, hp->n_head, (int32_t)hd, hp->n_rot, hp->rope_type == KVT_ROPE_NEOX,
                             L->rope_local ? hp->rope_freq_base_swa : hp->rope_freq_base,
                             L->rope_local ? hp->rope_freq_scale_swa : hp->rope_freq_scale, g->ff, g->dpos};
    CU(A->rope(g->ctx, g->q, &ra), "rope");
    ra.n_head = hp->n_head_kv;
    CU(A->rope(g->ctx, g->k, &ra), "rope");
    // per KV head group (one: every head): K and V rows into its blocks as f16, then attention of its query heads
    const int32_t ng = g->p.group_heads > 0 ? hp->n_head_kv / g->p.group_heads : 1, gkv = hp->n_head_kv / ng;
    const int32_t gq = hp->n_head / ng; // query heads of a group (GQA: n_head / n_head_kv per KV head)
    const int64_t voff = kvt_gpu_kv_v_offset(g->kv), GK = gkv * hd;
    // K and V of the micro-batch as f16 [n, K] each, in `up` (unused until the FFN; at least 2 K wide), then into their
    // blocks (store_rows); one row of one group (a decode step's): converted straight into its block (2 launches, not 3)
    uint16_t *kh = (uint16_t *)g->up, *vh = kh + n * K;
    const bool direct = n == 1 && ng == 1;
    if (!direct) {
        CU(A->dequant_f16(g->ctx, KVT_CUDA_F32, g->k, n * K, kh), "K to f16");
        CU(A->dequant_f16(g->ctx, KVT_CUDA_F32, g->v, n * K, vh), "V to f16");
    }
    for (int32_t j = 0; j < ng; j++) {
        if (direct) {
            uint8_t *row = kvt_gpu_kv_row(g->kv, i, j, seqs[0], pos[0]);
            CU(A->dequant_f16(g->ctx, KVT_CUDA_F32, g->k, K, (uint16_t *)row), "K into its block");
            CU(A->dequant_f16(g->ctx, KVT_CUDA_F32, g->v, K, (uint16_t *)(row + voff)), "V into its block");
        } else if ((st = store_rows(g, i, j, n, seqs, pos, kh + j * GK, vh + j * GK, GK, K, voff, err))) {
            return st;
        }
        if (j > 0) kvt_gpu_kv_tables(g->kv, i, j, &tk, &tv);
        const kvt_cuda_attn_args aa = {(int32_t)n, gq, gkv, (int32_t)hd, (int32_t)g->p.block_len, mb, max_len, hp->attn_scale,
                                       g->q + j * gq * hd, tk, tv, g->drow, g->dlen, g->att + j * gq * hd, L->window,
                                       ng > 1 ? (int32_t)(hp->n_head * hd) : 0};
        CU(A->attn_paged(g->ctx, &aa), "attention");
    }
    CU(mm(g, &L->wo, D->wo, g->att, n, g->tmp), "attn_output");
    if (D->post_attn_norm) CU(A->rmsnorm(g->ctx, g->tmp, D->post_attn_norm, g->tmp, n, E, hp->rms_eps), "post-attention norm");
    CU(A->add(g->ctx, g->x, g->tmp, n * E), "residual");
    CU(A->rmsnorm(g->ctx, g->x, D->ffn_norm, g->xn, n, E, hp->rms_eps), "rmsnorm");
    {
        const kvt_weight *const w[2] = {&L->w_gate, &L->w_up};
        void *const dw[2] = {D->wg, D->wu};
        float *const y[2] = {g->gate, g->up};
        if ((st = mm_multi(g, 2, w, dw, g->xn, n, y, "ffn_gate, ffn_up", err))) return st;
    }
    if (hp->ffn_act == KVT_FFN_GEGLU) CU(A->geglu(g->ctx, g->gate, g->up, n * hp->n_ff), "geglu");
    else CU(A->swiglu(g->ctx, g->gate, g->up, n * hp->n_ff), "swiglu");
    CU(mm(g, &L->w_down, D->wd, g->gate, n, g->tmp), "ffn_down");
    if (D->post_ffn_norm) CU(A->rmsnorm(g->ctx, g->tmp, D->post_ffn_norm, g->tmp, n, E, hp->rms_eps), "post-FFN norm");
    CU(A->add(g->ctx, g->x, g->tmp, n * E), "residual");
    return KVT_OK;
}

static kvt_status run(kvt_gpu_layers *g, int64_t n, const int32_t *seqs, const int64_t *pos, float *x, const int64_t *out,
                      int64_t n_out, float *logits, kvt_err *err) {
    if (n < 1 || n > g->p.n_ubatch) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "device layers: %lld rows (1 .. %lld)", (long long)n,
                          (long long)g->p.n_ubatch);
    }
    int32_t max_len = 0;
    g->kept = 0;
    double t0 = kvt_time_ms();
    kvt_status st = kvt_gpu_kv_begin(g->kv, n, seqs, pos, &max_len, err);
    g->kv_ms += kvt_time_ms() - t0;
    if (st) return st;
    for (int64_t t = 0; t < n; t++) {
        g->hpos[t] = (int32_t)pos[t];
        g->hrow[t] = seqs[t];
        g->hlen[t] = (int32_t)pos[t] + 1;
    }
    const int64_t E = g->m->hp.n_embd;
    const size_t ib = (size_t)n * sizeof(int32_t);
    CU(g->api->copy_h2d(g->ctx, g->x, x, (size_t)(n * E) * sizeof(float), KVT_CUDA_STREAM_COMPUTE), "upload of the activations");
    CU(g->api->copy_h2d(g->ctx, g->dpos, g->hpos, ib, KVT_CUDA_STREAM_COMPUTE), "upload of the positions");
    CU(g->api->copy_h2d(g->ctx, g->drow, g->hrow, ib, KVT_CUDA_STREAM_COMPUTE), "upload of the positions");
    CU(g->api->copy_h2d(g->ctx, g->dlen, g->hlen, ib, KVT_CUDA_STREAM_COMPUTE), "upload of the positions");
    g->h2d += n * E * (int64_t)sizeof(float) + 3 * (int64_t)ib;
    g->calls++;
    // a decode micro-batch whose KV is all in VRAM: its layers captured as one graph (nothing in them waits or allocates
    // once the workspace holds the attention's chunk states)
    const bool graph = g->p.graphs && !g->graph_off && g->nl > 0 && n <= KVT_CUDA_MMV_MAX_ROWS && kvt_gpu_kv_resident(g->kv);
    if (graph) {
        const kvt_hparams *hp = &g->m->hp;
        const int64_t chunks = (max_len + KVT_CUDA_ATTN_CHUNK - 1) / KVT_CUDA_ATTN_CHUNK;
        CU(g->api->workspace_reserve(g->ctx, (size_t)(n * hp->n_head * chunks * (hp->head_dim + 2)) * sizeof(float)),
           "attention workspace");
        t0 = kvt_time_ms();
        st = kvt_gpu_kv_reserve(g->kv, err);
        g->kv_ms += kvt_time_ms() - t0;
        if (st) return st;
        CU(g->api->graph_begin(g->ctx), "capture of a decode step");
    }
    for (int32_t i = 0; !st && i < g->nl; i++) st = layer(g, i, n, seqs, pos, max_len, err);
    // COPY's part of the layers joined back into COMPUTE (a capture must end so; in eager runs one wait more)
    if (!st && (g->api->event_record(g->ctx, g->ev_join, KVT_CUDA_STREAM_COPY) != KVT_CUDA_OK ||
                g->api->stream_wait(g->ctx, KVT_CUDA_STREAM_COMPUTE, g->ev_join) != KVT_CUDA_OK))
        st = cu_fail(g, "join of the streams", err);
    if (graph) {
        int updated = 0;
        if (g->api->graph_end(g->ctx, &g->graph, !st, &updated) != KVT_CUDA_OK && !st)
            st = cu_fail(g, "graph of a decode step (graphs now off for this context)", err);
        if (st) { // nothing captured ran: the call fails (the caller drops its positions); the next ones run eagerly
            g->graph_off = true;
            kvt_gpu_kv_tables_dirty(g->kv);
            return st;
        }
        g->graph_steps++;
        g->graph_updates += updated;
    }
    if (st) return st;
    t0 = kvt_time_ms();
    st = kvt_gpu_kv_end(g->kv, err); // the next step's layer 0, overlapping what follows
    g->kv_ms += kvt_time_ms() - t0;
    if (st) return st;
    if (!g->p.output) {
        CU(g->api->copy_d2h(g->ctx, x, g->x, (size_t)(n * E) * sizeof(float), KVT_CUDA_STREAM_COMPUTE),
           "download of the activations");
        g->d2h += n * E * (int64_t)sizeof(float);
    } else if (n_out > 0) { // the rows asked for, packed at the start of xn, normed; their logits
        const kvt_hparams *hp = &g->m->hp;
        for (int64_t k0 = 0, k1; k0 < n_out; k0 = k1) { // one copy per run of consecutive rows (all of them: one)
            const int64_t t0 = out ? out[k0] : n - n_out + k0;
            for (k1 = k0 + 1; k1 < n_out && (out ? out[k1] : n - n_out + k1) == t0 + (k1 - k0); k1++) {}
            CU(g->api->copy_d2d(g->ctx, g->xn + k0 * E, g->x + t0 * E, (size_t)((k1 - k0) * E) * sizeof(float),
                                KVT_CUDA_STREAM_COMPUTE), "output rows");
        }
        CU(g->api->rmsnorm(g->ctx, g->xn, g->out_norm, g->xn, n_out, E, hp->rms_eps), "output norm");
        CU(mm(g, &g->m->output, g->w_out, g->xn, n_out, g->logits), "output");
        if (!logits) {
            g->kept = n_out; // kvt_gpu_layers_logits / _argmax fetch them
        } else {
            CU(g->api->copy_d2h(g->ctx, logits, g->logits, (size_t)(n_out * hp->n_vocab) * sizeof(float),
                                KVT_CUDA_STREAM_COMPUTE), "download of the logits");
            g->d2h += n_out * hp->n_vocab * (int64_t)sizeof(float);
        }
    }
    t0 = kvt_time_ms();
    const int rc = g->api->stream_sync(g->ctx, KVT_CUDA_STREAM_COMPUTE);
    g->sync_ms += kvt_time_ms() - t0;
    if (rc != KVT_CUDA_OK) return cu_fail(g, "forward pass", err);
    return KVT_OK;
}

kvt_status kvt_gpu_layers_run(kvt_gpu_layers *g, int64_t n, const int32_t *seqs, const int64_t *pos, float *x,
                              const int64_t *out, int64_t n_out, float *logits, kvt_err *err) {
    const double t0 = kvt_time_ms();
    const kvt_status st = run(g, n, seqs, pos, x, out, n_out, logits, err);
    g->run_ms += kvt_time_ms() - t0;
    return st;
}

// The host's wait for COMPUTE at the end of a fetch of kept rows (counted as run and sync time)
static kvt_status sync_kept(kvt_gpu_layers *g, double t_call, const char *what, kvt_err *err) {
    const double t0 = kvt_time_ms();
    const int rc = g->api->stream_sync(g->ctx, KVT_CUDA_STREAM_COMPUTE);
    const double t1 = kvt_time_ms();
    g->sync_ms += t1 - t0;
    g->run_ms += t1 - t_call;
    return rc == KVT_CUDA_OK ? KVT_OK : cu_fail(g, what, err);
}

static kvt_status check_kept(const kvt_gpu_layers *g, int64_t n_out, kvt_err *err) {
    if (n_out < 1 || n_out > g->kept) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "device logits: %lld rows asked, %lld kept by the last run", (long long)n_out,
                          (long long)g->kept);
    }
    return KVT_OK;
}

kvt_status kvt_gpu_layers_logits(kvt_gpu_layers *g, int64_t n_out, float *dst, kvt_err *err) {
    kvt_status st = check_kept(g, n_out, err);
    if (st) return st;
    const double t0 = kvt_time_ms();
    const size_t bytes = (size_t)(n_out * g->m->hp.n_vocab) * sizeof(float);
    CU(g->api->copy_d2h(g->ctx, dst, g->logits, bytes, KVT_CUDA_STREAM_COMPUTE), "download of the logits");
    if ((st = sync_kept(g, t0, "download of the logits", err))) return st;
    g->d2h += (int64_t)bytes;
    return KVT_OK;
}

kvt_status kvt_gpu_layers_argmax(kvt_gpu_layers *g, int64_t n_out, int32_t *ids, kvt_err *err) {
    kvt_status st = check_kept(g, n_out, err);
    if (st) return st;
    const double t0 = kvt_time_ms();
    CU(g->api->argmax(g->ctx, g->logits, n_out, g->m->hp.n_vocab, g->dids, 1), "argmax of the logits");
    CU(g->api->copy_d2h(g->ctx, ids, g->dids, (size_t)n_out * sizeof(int32_t), KVT_CUDA_STREAM_COMPUTE), "download of the ids");
    if ((st = sync_kept(g, t0, "argmax of the logits", err))) return st;
    g->d2h += n_out * (int64_t)sizeof(int32_t);
    g->argmax_calls++;
    return KVT_OK;
}

kvt_status kvt_gpu_layers_seq_fork(kvt_gpu_layers *g, int32_t src, int32_t dst, kvt_err *err) {
    return kvt_gpu_kv_fork(g->kv, src, dst, err);
}

void kvt_gpu_layers_seq_truncate(kvt_gpu_layers *g, int32_t seq, int64_t n_keep) { kvt_gpu_kv_truncate(g->kv, seq, n_keep); }
kvt_status kvt_gpu_layers_set_plan(kvt_gpu_layers *g, const int32_t *seqs, int64_t n, kvt_err *err) {
    return kvt_gpu_kv_set_plan(g->kv, seqs, n, err);
}

void kvt_gpu_layers_get_stats(const kvt_gpu_layers *g, kvt_gpu_layers_stats *out) {
    kvt_gpu_kv_stats k;
    kvt_gpu_kv_get_stats(g->kv, &k);
    *out = (kvt_gpu_layers_stats){.layers = g->nl,
                                  .output = g->p.output,
                                  .weight_bytes = g->weight_bytes,
                                  .kv_bytes = k.vram_bytes,
                                  .h2d_bytes = g->h2d + k.h2d_bytes + k.table_bytes,
                                  .d2h_bytes = g->d2h + k.d2h_bytes,
                                  .d2d_bytes = k.d2d_bytes,
                                  .calls = g->calls,
                                  .argmax_calls = g->argmax_calls,
                                  .graph_steps = g->graph_steps,
                                  .graph_updates = g->graph_updates,
                                  .run_ms = g->run_ms,
                                  .kv_ms = g->kv_ms,
                                  .sync_ms = g->sync_ms,
                                  .kv = k};
}
