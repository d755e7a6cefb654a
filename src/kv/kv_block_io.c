// kv_block_io.c - one full block of a sequence as a flat payload (layout 1, kv_block_io.h), through the kv ops
// only: export acquires the block's views and copies their rows, import converts the rows to f32 (exact for
// F16 and F32) and appends them.
#include "kv_block_io.h"

#include <stdlib.h>
#include <string.h>

#include "../kernels/quant.h"
#include "kv_paged.h"

// Bytes of one layer's K (v = 0) or V (v = 1) part of the payload: [n_head_kv][block_tokens][dim].
static int64_t part_bytes(const kvt_kv *kv, int v) {
    return (int64_t)kv->n_head_kv * kv->block_tokens * kvt_row_size(kv->type, v ? kv->head_dim_v : kv->head_dim);
}

int64_t kvt_kv_block_payload_bytes(const kvt_kv *kv) { return (int64_t)kv->n_layer * (part_bytes(kv, 0) + part_bytes(kv, 1)); }

void kvt_kv_block_identity(const kvt_kv *kv, kvt_prefix_identity *id) {
    id->n_layer = (uint32_t)kv->n_layer;
    id->n_head_kv = (uint32_t)kv->n_head_kv;
    id->head_dim = (uint32_t)kv->head_dim;
    id->head_dim_v = (uint32_t)kv->head_dim_v;
    id->kv_type = (uint32_t)kv->type;
    id->block_tokens = (uint32_t)kv->block_tokens;
    id->layout = KVT_KV_BLOCK_LAYOUT;
}

kvt_status kvt_kv_block_export(kvt_kv *kv, int32_t seq, int64_t b, void *dst, kvt_err *err) {
    const int64_t bt = kv->block_tokens;
    const int64_t krow = kvt_row_size(kv->type, kv->head_dim), vrow = kvt_row_size(kv->type, kv->head_dim_v);
    uint8_t *out = dst;
    for (int32_t l = 0; l < kv->n_layer; l++) {
        uint8_t *kd = out, *vd = out + part_bytes(kv, 0); // this layer's K part, then its V part
        for (int32_t g = 0; g < kv->n_group; g++) {
            kvt_kv_view w;
            kvt_status st = kv->ops->acquire(kv, seq, l, g, b, &w, err);
            if (st) return st;
            if (w.n < bt) {
                kv->ops->release(kv, seq, l, g, b);
                return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV block %lld of sequence %d holds %lld of %lld positions: "
                                  "only full blocks are exported", (long long)b, seq, (long long)w.n, (long long)bt);
            }
            for (int32_t j = 0; j < kv->group_heads; j++) {
                const int64_t h = (int64_t)g * kv->group_heads + j;
                for (int64_t i = 0; i < bt; i++) {
                    memcpy(kd + (h * bt + i) * krow, (const uint8_t *)w.k + j * w.k_hstride + i * w.k_stride, (size_t)krow);
                    memcpy(vd + (h * bt + i) * vrow, (const uint8_t *)w.v + j * w.v_hstride + i * w.v_stride, (size_t)vrow);
                }
            }
            kv->ops->release(kv, seq, l, g, b);
        }
        out += part_bytes(kv, 0) + part_bytes(kv, 1);
    }
    return KVT_OK;
}

// The paged store's import by copy (into the host tier, or an unbounded fast tier): the payload's rows of each (layer, group) are the block's K and V parts as they are
// (head-major, the element type), so they are handed over as pointers into src. *placed false: not taken.
static kvt_status import_copy(kvt_kv *kv, int32_t seq, int64_t b, const void *src, bool *placed, kvt_err *err) {
    *placed = false;
    if (strcmp(kv->ops->name, "paged") != 0) return KVT_OK;
    const int32_t n = kv->n_layer * kv->n_group;
    const void **kp = malloc((size_t)n * 2 * sizeof *kp), **vp = kp + n; // [n] K parts, [n] V parts
    if (!kp) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory importing a KV block");
    const int64_t krow = kvt_row_size(kv->type, kv->head_dim), vrow = kvt_row_size(kv->type, kv->head_dim_v);
    const uint8_t *in = src;
    for (int32_t l = 0; l < kv->n_layer; l++) {
        for (int32_t g = 0; g < kv->n_group; g++) {
            const int64_t h0 = (int64_t)g * kv->group_heads;
            kp[l * kv->n_group + g] = in + h0 * kv->block_tokens * krow;
            vp[l * kv->n_group + g] = in + part_bytes(kv, 0) + h0 * kv->block_tokens * vrow;
        }
        in += part_bytes(kv, 0) + part_bytes(kv, 1);
    }
    kvt_status st = kvt_kv_paged_seq_push_copy(kv, seq, b, (const void *const *)kp, (const void *const *)vp, placed, err);
    free(kp);
    return st;
}

kvt_status kvt_kv_block_import(kvt_kv *kv, int32_t seq, int64_t b, const void *src, kvt_err *err) {
    bool placed = false;
    kvt_status hst = import_copy(kv, seq, b, src, &placed, err);
    if (hst || placed) return hst;
    const int64_t bt = kv->block_tokens, kw = (int64_t)kv->n_head_kv * kv->head_dim,
                  vw = (int64_t)kv->n_head_kv * kv->head_dim_v;
    const int64_t krow = kvt_row_size(kv->type, kv->head_dim), vrow = kvt_row_size(kv->type, kv->head_dim_v);
    const kvt_type_ops *ops = kvt_type_ops_get(kv->type);
    float *k = malloc((size_t)(bt * (kw + vw)) * sizeof *k); // [bt, kw] then [bt, vw]: one layer's rows in f32
    if (!k) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory importing a KV block (%lld positions)", (long long)bt);
    float *v = k + bt * kw;
    const uint8_t *in = src;
    kvt_status st = KVT_OK;
    for (int32_t l = 0; !st && l < kv->n_layer; l++) {
        const uint8_t *ks = in, *vs = in + part_bytes(kv, 0);
        for (int64_t h = 0; h < kv->n_head_kv; h++) {
            for (int64_t i = 0; i < bt; i++) {
                ops->to_float(ks + (h * bt + i) * krow, k + i * kw + h * kv->head_dim, kv->head_dim);
                ops->to_float(vs + (h * bt + i) * vrow, v + i * vw + h * kv->head_dim_v, kv->head_dim_v);
            }
        }
        st = kv->ops->append(kv, seq, l, b * bt, bt, k, v, err);
        in += part_bytes(kv, 0) + part_bytes(kv, 1);
    }
    if (st) kv->ops->truncate(kv, seq, b * bt);
    free(k);
    return st;
}
