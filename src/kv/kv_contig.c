// kv_contig.c - the all-in-memory KV cache (tier T0 only).
#include <stdlib.h>
#include <string.h>

#include "../kernels/quant.h"
#include "kv.h"

typedef struct {
    kvt_kv base;
    int64_t k_row, v_row; // bytes per position of one head's K / V
    uint8_t *k;           // [n_layer, n_head_kv, n_ctx, head_dim] kv type, tier T0 (head-major: kv.h)
    uint8_t *v;           // [n_layer, n_head_kv, n_ctx, head_dim_v] kv type, tier T0
} kv_contig;

static kvt_status contig_append(kvt_kv *kv, int32_t seq, int32_t layer, int64_t pos, int64_t n, const float *k,
                                const float *v, kvt_err *err) {
    kv_contig *c = (kv_contig *)kv;
    if (seq != 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "contiguous KV cache holds one sequence (got seq %d)", seq);
    if (pos < 0 || n < 0 || pos + n > kv->n_ctx) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "KV cache full: positions [%lld, %lld) exceed context %lld", (long long)pos,
                          (long long)(pos + n), (long long)kv->n_ctx);
    }
    const kvt_type_ops *ops = kvt_type_ops_get(kv->type);
    const int64_t kw = (int64_t)kv->n_head_kv * kv->head_dim, vw = (int64_t)kv->n_head_kv * kv->head_dim_v;
    for (int64_t h = 0; h < kv->n_head_kv; h++) {
        uint8_t *kd = c->k + (((int64_t)layer * kv->n_head_kv + h) * kv->n_ctx + pos) * c->k_row;
        uint8_t *vd = c->v + (((int64_t)layer * kv->n_head_kv + h) * kv->n_ctx + pos) * c->v_row;
        for (int64_t i = 0; i < n; i++) {
            ops->from_float(k + i * kw + h * kv->head_dim, kd + i * c->k_row, kv->head_dim);
            ops->from_float(v + i * vw + h * kv->head_dim_v, vd + i * c->v_row, kv->head_dim_v);
        }
    }
    return KVT_OK;
}

static kvt_status contig_acquire(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b, kvt_kv_view *out,
                                 kvt_err *err) {
    kv_contig *c = (kv_contig *)kv;
    (void)seq;
    if (group < 0 || group >= kv->n_group) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV group %d out of range", group);
    int64_t p0 = b * kv->block_tokens;
    if (b < 0 || p0 >= kv->n_ctx) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV block %lld out of range", (long long)b);
    int64_t n = kv->n_ctx - p0 < kv->block_tokens ? kv->n_ctx - p0 : kv->block_tokens;
    out->pos0 = p0;
    out->n = n;
    const int64_t h0 = (int64_t)group * kv->group_heads; // first head of the group
    out->k = c->k + (((int64_t)layer * kv->n_head_kv + h0) * kv->n_ctx + p0) * c->k_row;
    out->v = c->v + (((int64_t)layer * kv->n_head_kv + h0) * kv->n_ctx + p0) * c->v_row;
    out->k_stride = c->k_row;
    out->v_stride = c->v_row;
    out->k_hstride = kv->n_ctx * c->k_row;
    out->v_hstride = kv->n_ctx * c->v_row;
    return KVT_OK;
}

static void contig_release(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b) {
    (void)kv, (void)seq, (void)layer, (void)group, (void)b;
}

// Positions are addressed directly, so forgetting a suffix needs no work:
// later appends overwrite it and attention never reads past its range.
static void contig_truncate(kvt_kv *kv, int32_t seq, int64_t n_keep) { (void)kv, (void)seq, (void)n_keep; }

static void contig_stats(kvt_kv *kv, kvt_kv_stats *out) {
    kv_contig *c = (kv_contig *)kv;
    memset(out, 0, sizeof *out);
    int64_t b = kv->n_layer * kv->n_head_kv * kv->n_ctx * (c->k_row + c->v_row);
    out->budget_bytes[KVT_TIER_FAST] = -1;
    out->peak_bytes[KVT_TIER_FAST] = out->used_bytes[KVT_TIER_FAST] = b;
    out->block_bytes = kv->block_tokens * kv->n_head_kv * (c->k_row + c->v_row);
}

static void contig_free(kvt_kv *kv) {
    kv_contig *c = (kv_contig *)kv;
    free(c->k);
    free(c->v);
    free(c);
}

static const kvt_kv_ops k_contig_ops = {"contiguous",   contig_append, contig_acquire, contig_release, contig_truncate,
                                        NULL,           NULL,          contig_stats,   contig_free,
                                        .free_reads = 1};

int64_t kvt_kv_contig_bytes(const kvt_kv_params *p) {
    return (int64_t)p->n_layer * p->n_ctx *
           (kvt_row_size(p->type, (int64_t)p->n_head_kv * p->head_dim) +
            kvt_row_size(p->type, (int64_t)p->n_head_kv * p->head_dim_v));
}

kvt_status kvt_kv_contig_init(const kvt_kv_params *p, kvt_kv **out, kvt_err *err) {
    *out = NULL;
    if (p->type != KVT_TYPE_F16 && p->type != KVT_TYPE_F32) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "KV cache type %s not supported (f16, f32 are)", kvt_type_name(p->type));
    }
    if (p->n_ctx <= 0 || p->block_tokens <= 0) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV cache needs n_ctx > 0 and block_tokens > 0");
    }
    const int32_t gh = p->group_heads > 0 ? p->group_heads : p->n_head_kv;
    if (p->n_head_kv % gh) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV group of %d heads does not divide the %d KV heads", gh, p->n_head_kv);
    }
    kv_contig *c = calloc(1, sizeof *c);
    if (!c) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    c->base = (kvt_kv){&k_contig_ops, p->type, p->n_layer, p->n_head_kv, p->head_dim, p->head_dim_v, p->block_tokens, p->n_ctx,
                       gh,         p->n_head_kv / gh};
    c->k_row = kvt_row_size(p->type, p->head_dim);
    c->v_row = kvt_row_size(p->type, p->head_dim_v);
    const int64_t rows = (int64_t)p->n_layer * p->n_head_kv * p->n_ctx;
    size_t kb = (size_t)(rows * c->k_row), vb = (size_t)(rows * c->v_row);
    c->k = kvt_kv_arena_alloc(kb);
    c->v = kvt_kv_arena_alloc(vb);
    if (!c->k || !c->v) {
        contig_free(&c->base);
        return kvt_errorf(err, KVT_ERR_NOMEM, "cannot allocate KV cache of %zu bytes (n_ctx %lld)", kb + vb,
                          (long long)p->n_ctx);
    }
    *out = &c->base;
    return KVT_OK;
}
