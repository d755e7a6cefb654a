// sparse_attn.c - exact attention of one query token over selected positions, and exact scoring of every
// position (the oracle), both reading the KV store through acquire/release.
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "../kernels/quant.h"
#include "../kernels/vec.h"
#include "sparse_impl.h"

int64_t kvt_sparse_attn_scratch_floats(const kvt_sparse_dims *d) {
    const int64_t qpg = d->n_head / d->n_head_kv;
    // queries in the dot type (<= f32 each, padded), scores [qpg, n_ctx], aggregate [n_ctx], m/l [qpg], o [qpg, hdv]
    return qpg * (d->head_dim + 32) + qpg * d->n_ctx + d->n_ctx + 2 * qpg + qpg * d->head_dim_v + 64;
}

typedef struct {
    kvt_kv *kv;
    int32_t seq, layer, qpg;
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

// Queries of KV head kh's group converted to the dot type of the store: qpg rows of qrow bytes at qd.
static void queries_in(const sp_job *J, int32_t kh, uint8_t *qd, int64_t qrow) {
    const kvt_type_ops *qops = kvt_type_ops_get(kvt_type_ops_get(J->kv->type)->vec_dot_type);
    const int32_t hd = J->kv->head_dim;
    for (int32_t i = 0; i < J->qpg; i++) qops->from_float(J->q + (int64_t)(kh * J->qpg + i) * hd, qd + i * qrow, hd);
}

static int64_t qrow_of(const kvt_kv *kv) {
    return (kvt_row_size(kvt_type_ops_get(kv->type)->vec_dot_type, kv->head_dim) + 63) / 64 * 64;
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

// Attention of KV head kh's query heads over its selected positions: online softmax over runs of positions
// in one block (exact over the set).
static void attend_task(void *vctx, int64_t kh64, int thread) {
    sp_job *J = vctx;
    kvt_kv *kv = J->kv;
    const int32_t kh = (int32_t)kh64, hd = kv->head_dim, hdv = kv->head_dim_v, qpg = J->qpg, jh = kh % kv->group_heads;
    const kvt_type_ops *ops = kvt_type_ops_get(kv->type);
    const int64_t qrow = qrow_of(kv);
    float *sc = J->scratch[thread];
    uint8_t *qd = (uint8_t *)sc;
    const int32_t *sel = J->sel + kh * J->sel_stride;
    const int64_t ns = J->nsel[kh];
    float *s = sc + qpg * qrow / 4 + 16; // [qpg, ns] scores of a run (ns: a run is never longer)
    float *m = s + (int64_t)qpg * ns;    // [qpg]
    float *l = m + qpg, *o = l + qpg;    // [qpg], [qpg, hdv]
    queries_in(J, kh, qd, qrow);
    for (int32_t i = 0; i < qpg; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    memset(o, 0, (size_t)qpg * hdv * sizeof(float));
    int64_t held = -1;
    kvt_kv_view v = {0};
    for (int64_t a = 0; a < ns;) {
        const int64_t b = sel[a] / kv->block_tokens;
        int64_t e = a;
        while (e < ns && sel[e] / kv->block_tokens == b) e++; // the run [a, e) lies in block b
        if (!hold(J, kh, b, &held, &v)) return;
        if (sel[e - 1] >= v.pos0 + v.n) {
            kvt_err er;
            kvt_errorf(&er, KVT_ERR_INVALID_ARG, "KV layer %d holds no position %d", J->layer, sel[e - 1]);
            sp_fail(J, &er);
            break;
        }
        const uint8_t *kb = (const uint8_t *)v.k + jh * v.k_hstride, *vb = (const uint8_t *)v.v + jh * v.v_hstride;
        for (int32_t i = 0; i < qpg; i++) {
            float *si = s + (int64_t)i * ns, bm = -INFINITY;
            for (int64_t x = a; x < e; x++) {
                float d;
                ops->vec_dot(hd, &d, kb + (sel[x] - v.pos0) * v.k_stride, qd + i * qrow);
                si[x - a] = d * J->p->scale;
                bm = si[x - a] > bm ? si[x - a] : bm;
            }
            const float mn = bm > m[i] ? bm : m[i], corr = expf(m[i] - mn);
            float *oi = o + (int64_t)i * hdv;
            if (corr != 1.0f) {
                l[i] *= corr;
                kvt_vec_scale_f32(oi, corr, hdv);
            }
            for (int64_t x = a; x < e; x++) {
                const float w = expf(si[x - a] - mn);
                l[i] += w;
                kvt_vec_mad_rows(kv->type, oi, vb + (sel[x] - v.pos0) * v.v_stride, v.v_stride, &w, 1, hdv);
            }
            m[i] = mn;
        }
        a = e;
    }
    unhold(J, kh, held);
    for (int32_t i = 0; i < qpg; i++) {
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        float *dst = J->out + (int64_t)(kh * qpg + i) * hdv;
        for (int32_t x = 0; x < hdv; x++) dst[x] = o[(int64_t)i * hdv + x] * inv;
    }
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
    float *s = sc + qpg * qrow / 4 + 16; // [qpg, n]
    queries_in(J, kh, qd, qrow);
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
        for (int32_t i = 0; i < qpg; i++) {
            for (int64_t x = 0; x < cnt; x++) {
                float d;
                ops->vec_dot(hd, &d, kb + x * v.k_stride, qd + i * qrow);
                s[i * n + p + x] = d * J->p->scale;
            }
        }
        p += cnt;
    }
    unhold(J, kh, held);
    kvt_sparse_aggregate(s, qpg, n, J->agg + kh * J->agg_stride);
}

static kvt_status run(sp_job *J, kvt_task_fn fn, kvt_threadpool *pool, kvt_err *err) {
    atomic_init(&J->failed, 0);
    kvt_threadpool_run(pool, fn, J, J->kv->n_head_kv);
    if (atomic_load(&J->failed)) {
        if (err) *err = J->err;
        return J->err.status;
    }
    return KVT_OK;
}

kvt_status kvt_sparse_attend_set(kvt_kv *kv, int32_t seq, int32_t layer, const kvt_attn_params *p, const float *q,
                                 const int32_t *sel, const int64_t *nsel, int64_t sel_stride, float *out,
                                 kvt_threadpool *pool, float *const *scratch, kvt_err *err) {
    sp_job J = {.kv = kv, .seq = seq, .layer = layer, .qpg = p->n_head / kv->n_head_kv, .p = p, .q = q, .sel = sel,
                .nsel = nsel, .sel_stride = sel_stride, .out = out, .scratch = scratch};
    return run(&J, attend_task, pool, err);
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
