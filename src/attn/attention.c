// attention.c - streaming exact attention with the online-softmax merge.
#include "attention.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "../kernels/quant.h"
#include "../kernels/vec.h"

int64_t kvt_attn_scratch_bytes(const kvt_kv *kv) {
    // scores [block_tokens] f32 + query in the K dot type [head_dim] + acc [head_dim_v] f32 + tmp row
    return kv->block_tokens * 4 + kvt_row_size(KVT_TYPE_F32, kv->head_dim) + 2 * (int64_t)kv->head_dim_v * 4 + 64;
}

typedef struct {
    kvt_kv *kv;
    int32_t seq, layer;
    const kvt_attn_params *p;
    const float *q;
    int64_t pos0, n;
    float *out;
    void *const *scratch;
    _Atomic int failed;
    kvt_err err;
} attn_job;

// One (token, query head): stream over the blocks covering [0, pos].
static void attn_task(void *vctx, int64_t task, int thread) {
    attn_job *J = vctx;
    kvt_kv *kv = J->kv;
    const int32_t H = J->p->n_head, hd = kv->head_dim, hdv = kv->head_dim_v;
    const int64_t t = task / H;
    const int32_t h = (int32_t)(task % H);
    const int32_t g = h / (H / kv->n_head_kv);
    const int64_t pos = J->pos0 + t; // last position attended (causal)
    const kvt_type_ops *ops = kvt_type_ops_get(kv->type);
    uint8_t *sc = J->scratch[thread];
    float *s = (float *)sc;                                   // [block_tokens] scores
    float *o = s + kv->block_tokens;                          // [hdv] accumulator
    void *qd = o + hdv;                                       // [hd] query in K's dot type
    const kvt_type_ops *qops = kvt_type_ops_get(ops->vec_dot_type);
    qops->from_float(J->q + t * (int64_t)H * hd + (int64_t)h * hd, qd, hd);
    memset(o, 0, (size_t)hdv * sizeof(float));
    float m = -INFINITY, l = 0.0f;
    const int64_t nb = kvt_kv_n_blocks(kv, pos + 1);
    for (int64_t b = 0; b < nb; b++) {
        if (atomic_load_explicit(&J->failed, memory_order_relaxed)) return;
        kvt_kv_view v;
        kvt_err e;
        if (kv->ops->acquire(kv, J->seq, J->layer, b, &v, &e)) {
            if (!atomic_exchange(&J->failed, 1)) J->err = e;
            return;
        }
        int64_t cnt = pos + 1 - v.pos0;
        if (cnt > v.n) cnt = v.n;
        const uint8_t *kb = (const uint8_t *)v.k + (int64_t)g * kvt_row_size(kv->type, hd);
        float bm = -INFINITY;
        for (int64_t j = 0; j < cnt; j++) {
            float d;
            ops->vec_dot(hd, &d, kb + j * v.k_stride, qd);
            s[j] = d * J->p->scale;
            if (s[j] > bm) bm = s[j];
        }
        // merge this block into the running (m, l, o)
        float mn = bm > m ? bm : m;
        float corr = expf(m - mn);
        if (corr != 1.0f) {
            l *= corr;
            kvt_vec_scale_f32(o, corr, hdv);
        }
        const uint8_t *vb = (const uint8_t *)v.v + (int64_t)g * kvt_row_size(kv->type, hdv);
        for (int64_t j = 0; j < cnt; j++) {
            float pj = expf(s[j] - mn);
            l += pj;
            kvt_vec_mad(kv->type, o, vb + j * v.v_stride, pj, hdv);
        }
        m = mn;
        kv->ops->release(kv, J->seq, J->layer, b);
    }
    float *dst = J->out + t * (int64_t)H * hdv + (int64_t)h * hdv;
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int32_t i = 0; i < hdv; i++) dst[i] = o[i] * inv;
}

kvt_status kvt_attention(kvt_kv *kv, int32_t seq, int32_t layer, const kvt_attn_params *p, const float *q, int64_t pos0,
                         int64_t n, float *out, kvt_threadpool *pool, void *const *scratch, kvt_err *err) {
    if (p->n_head % kv->n_head_kv) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "n_head %d not a multiple of n_head_kv %d", p->n_head, kv->n_head_kv);
    }
    attn_job J = {.kv = kv, .seq = seq, .layer = layer, .p = p, .q = q, .pos0 = pos0, .n = n, .out = out, .scratch = scratch};
    atomic_init(&J.failed, 0);
    kvt_threadpool_run(pool, attn_task, &J, n * p->n_head);
    if (atomic_load(&J.failed)) {
        if (err) *err = J.err;
        return J.err.status;
    }
    return KVT_OK;
}
