// cuda_fake.c - a CPU emulation of the CUDA backend table (src/cuda/kvt_cuda.h), for checking the
// suite `cuda` itself (tests/test_cuda.c: its buffers, block tables, poisoning and comparisons) on
// machines without a GPU: `make cuda-check` builds it into build/libkvtier-cuda-fake.so and runs
// `KVT_CUDA_LIB=build/libkvtier-cuda-fake.so build/kvtier-tests cuda`. "Device" memory is host
// memory, streams run at once, events are no-ops. The kernels follow the contracts of kvt_cuda.h
// with plain C (the attention with the same chunked online-softmax as src/cuda/cuda_attn.cu);
// they say nothing about the CUDA kernels' correctness. Test-only: never loaded by kvtier.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/cuda/kvt_cuda.h"
#include "../../src/kernels/f16.h"
#include "../../src/kernels/quant.h"
#include "../../src/kernels/vec.h"

struct kvt_cuda_ctx {
    char err[KVT_CUDA_ERR_MAX];
};

static int fail(kvt_cuda_ctx *ctx, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
    return code;
}

static int device_count(int *out, char *err, int err_len) {
    (void)err, (void)err_len;
    *out = 1;
    return KVT_CUDA_OK;
}
static int device_info(int device, kvt_cuda_device_info *out, char *err, int err_len) {
    memset(out, 0, sizeof *out);
    if (device != 0) {
        snprintf(err, (size_t)err_len, "fake device %d does not exist (1 device)", device);
        return KVT_CUDA_ERR_NO_DEVICE;
    }
    snprintf(out->name, sizeof out->name, "fake CUDA device (CPU emulation, tests only)");
    out->cc_major = 9, out->n_sm = 1, out->vram_bytes = out->vram_free_bytes = (int64_t)1 << 30;
    return KVT_CUDA_OK;
}
static int ctx_init(int device, kvt_cuda_ctx **out, char *err, int err_len) {
    kvt_cuda_device_info info;
    int rc = device_info(device, &info, err, err_len);
    *out = rc ? NULL : calloc(1, sizeof **out);
    return rc ? rc : *out ? KVT_CUDA_OK : KVT_CUDA_ERR_NOMEM;
}
static void ctx_free(kvt_cuda_ctx *ctx) { free(ctx); }
static const char *last_error(const kvt_cuda_ctx *ctx) { return ctx->err; }

static int dev_malloc(kvt_cuda_ctx *ctx, size_t bytes, void **out) {
    *out = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
    return *out ? KVT_CUDA_OK : fail(ctx, KVT_CUDA_ERR_NOMEM, "fake malloc of %zu bytes failed", bytes);
}
static int dev_free(kvt_cuda_ctx *ctx, void *p) {
    (void)ctx;
    free(p);
    return KVT_CUDA_OK;
}
static int memset_dev(kvt_cuda_ctx *ctx, void *dst, int byte, size_t bytes) {
    (void)ctx;
    memset(dst, byte, bytes);
    return KVT_CUDA_OK;
}
static int copy(kvt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, int stream) {
    if (stream < 0 || stream >= KVT_CUDA_STREAM_COUNT) return fail(ctx, KVT_CUDA_ERR_ARG, "stream id %d does not exist", stream);
    memcpy(dst, src, bytes);
    return KVT_CUDA_OK;
}
static int event_create(kvt_cuda_ctx *ctx, kvt_cuda_event **out) {
    (void)ctx;
    *out = (kvt_cuda_event *)malloc(1);
    return KVT_CUDA_OK;
}
static int event_free(kvt_cuda_ctx *ctx, kvt_cuda_event *ev) {
    (void)ctx;
    free(ev);
    return KVT_CUDA_OK;
}
static int event_record(kvt_cuda_ctx *ctx, kvt_cuda_event *ev, int stream) {
    (void)ev;
    return stream < 0 || stream >= KVT_CUDA_STREAM_COUNT ? fail(ctx, KVT_CUDA_ERR_ARG, "stream id %d", stream) : KVT_CUDA_OK;
}
static int stream_wait(kvt_cuda_ctx *ctx, int stream, kvt_cuda_event *ev) { return event_record(ctx, ev, stream); }
static int event_sync(kvt_cuda_ctx *ctx, kvt_cuda_event *ev) { return event_record(ctx, ev, 0); }
static int stream_sync(kvt_cuda_ctx *ctx, int stream) { return event_record(ctx, NULL, stream); }

// Row r of W as f32 into out[n_cols].
static int weight_row(kvt_cuda_ctx *ctx, int type, const void *W, int64_t r, int64_t n_cols, float *out) {
    const kvt_type_ops *ops = kvt_type_ops_ref((kvt_type)type);
    const int64_t rb = kvt_row_size((kvt_type)type, n_cols);
    if (!ops || rb < 0 || n_cols % 8) return fail(ctx, KVT_CUDA_ERR_ARG, "type %d x %lld columns not handled", type, (long long)n_cols);
    ops->to_float((const char *)W + r * rb, out, n_cols);
    return KVT_CUDA_OK;
}

static int mul_mat(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const float *x,
                   int64_t n_tok, float *y) {
    float *w = malloc((size_t)n_cols * sizeof *w);
    int rc = w ? KVT_CUDA_OK : KVT_CUDA_ERR_NOMEM;
    for (int64_t r = 0; !rc && r < n_rows; r++) {
        rc = weight_row(ctx, type, W, r, n_cols, w);
        for (int64_t t = 0; !rc && t < n_tok; t++) {
            double s = 0;
            for (int64_t k = 0; k < n_cols; k++) s += (double)w[k] * x[t * n_cols + k];
            y[t * n_rows + r] = (float)s;
        }
    }
    free(w);
    return rc;
}
static int mul_mat_vec(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const float *x,
                       int64_t n_tok, float *y) {
    if (type == KVT_CUDA_F32 || n_tok < 1 || n_tok > KVT_CUDA_MMV_MAX_ROWS)
        return fail(ctx, KVT_CUDA_ERR_ARG, "mul_mat_vec: type %d, %lld rows", type, (long long)n_tok);
    return mul_mat(ctx, type, W, n_rows, n_cols, x, n_tok, y);
}
static int dequant_f16(kvt_cuda_ctx *ctx, int type, const void *src, int64_t n, uint16_t *dst) {
    float *f = malloc((size_t)n * sizeof *f);
    int rc = f ? weight_row(ctx, type, src, 0, n, f) : KVT_CUDA_ERR_NOMEM;
    for (int64_t i = 0; !rc && i < n; i++) dst[i] = kvt_f32_to_f16(f[i]);
    free(f);
    return rc;
}

static int rmsnorm(kvt_cuda_ctx *ctx, const float *x, const float *w, float *y, int64_t n_rows, int64_t n, float eps) {
    (void)ctx;
    for (int64_t r = 0; r < n_rows; r++) kvt_rmsnorm_f32(y + r * n, x + r * n, w, n, eps);
    return KVT_CUDA_OK;
}
static int rope(kvt_cuda_ctx *ctx, float *x, const kvt_cuda_rope_args *a) {
    float cs[KVT_CUDA_ATTN_MAX_HEAD_DIM * 2];
    if (a->n_rot > 2 * KVT_CUDA_ATTN_MAX_HEAD_DIM) return fail(ctx, KVT_CUDA_ERR_ARG, "rope: n_rot %d", a->n_rot);
    const kvt_rope_params p = {a->n_rot, a->neox, a->freq_base, a->freq_scale, a->freq_factors};
    for (int t = 0; t < a->n_tok; t++) {
        kvt_rope_cache(&p, a->pos[t], cs);
        for (int h = 0; h < a->n_head; h++) kvt_rope_apply(&p, cs, x + ((int64_t)t * a->n_head + h) * a->head_dim);
    }
    return KVT_CUDA_OK;
}
static int swiglu(kvt_cuda_ctx *ctx, float *g, const float *u, int64_t n) {
    (void)ctx;
    kvt_swiglu_f32(g, u, n);
    return KVT_CUDA_OK;
}
static int geglu(kvt_cuda_ctx *ctx, float *g, const float *u, int64_t n) {
    (void)ctx;
    kvt_geglu_f32(g, u, n);
    return KVT_CUDA_OK;
}
static int add(kvt_cuda_ctx *ctx, float *y, const float *x, int64_t n) {
    (void)ctx;
    kvt_vec_add_f32(y, x, n);
    return KVT_CUDA_OK;
}
static int get_rows(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const int32_t *ids,
                    int64_t n_ids, float *out) {
    for (int64_t t = 0; t < n_ids; t++) {
        if (ids[t] < 0 || ids[t] >= n_rows) return fail(ctx, KVT_CUDA_ERR_ARG, "get_rows: id %d", ids[t]);
        int rc = weight_row(ctx, type, W, ids[t], n_cols, out + t * n_cols);
        if (rc) return rc;
    }
    return KVT_CUDA_OK;
}
static int argmax(kvt_cuda_ctx *ctx, const float *x, int64_t n_rows, int64_t n, int32_t *out) {
    (void)ctx;
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++) best = x[r * n + i] > x[r * n + best] ? i : best;
        out[r] = (int32_t)best;
    }
    return KVT_CUDA_OK;
}

// The chunked online softmax of cuda_attn.cu, sequentially: chunk states (m, s, o) folded in order.
static int attn_paged(kvt_cuda_ctx *ctx, const kvt_cuda_attn_args *a) {
    const int D = a->head_dim;
    if (D > KVT_CUDA_ATTN_MAX_HEAD_DIM || a->n_head % a->n_kv_head) return fail(ctx, KVT_CUDA_ERR_ARG, "attn_paged: shape");
    float sc[KVT_CUDA_ATTN_CHUNK], oc[KVT_CUDA_ATTN_MAX_HEAD_DIM], o[KVT_CUDA_ATTN_MAX_HEAD_DIM];
    for (int row = 0; row < a->n_q; row++) {
        const int64_t len = a->seq_len[row], s = a->row_seq ? a->row_seq[row] : row;
        if (len < 1 || len > a->max_seq_len) return fail(ctx, KVT_CUDA_ERR_ARG, "attn_paged: seq_len %lld", (long long)len);
        for (int h = 0; h < a->n_head; h++) {
            const int kvh = h / (a->n_head / a->n_kv_head);
            const float *q = a->q + ((int64_t)row * a->n_head + h) * D;
            float m = -INFINITY, sum = 0;
            memset(o, 0, sizeof o);
            const int64_t lo = a->window > 0 && len > a->window ? len - a->window : 0; // a sliding window's first position
            for (int64_t p0 = lo; p0 < len; p0 += KVT_CUDA_ATTN_CHUNK) {
                const int n = (int)(len - p0 < KVT_CUDA_ATTN_CHUNK ? len - p0 : KVT_CUDA_ATTN_CHUNK);
                float mc = -INFINITY, sc_sum = 0;
                for (int i = 0; i < n; i++) {
                    const int64_t p = p0 + i, b = p / a->block_len;
                    const uint16_t *k = (const uint16_t *)a->k_blocks[(int64_t)s * a->max_blocks + b] +
                                        ((p % a->block_len) * a->n_kv_head + kvh) * D;
                    float dot = 0;
                    for (int d = 0; d < D; d++) dot += q[d] * kvt_f16_to_f32(k[d]);
                    sc[i] = dot * a->scale;
                    mc = fmaxf(mc, sc[i]);
                }
                memset(oc, 0, sizeof oc);
                for (int i = 0; i < n; i++) {
                    const int64_t p = p0 + i, b = p / a->block_len;
                    const uint16_t *v = (const uint16_t *)a->v_blocks[(int64_t)s * a->max_blocks + b] +
                                        ((p % a->block_len) * a->n_kv_head + kvh) * D;
                    const float e = expf(sc[i] - mc);
                    sc_sum += e;
                    for (int d = 0; d < D; d++) oc[d] += e * kvt_f16_to_f32(v[d]);
                }
                const float mn = fmaxf(m, mc), a0 = expf(m - mn), a1 = expf(mc - mn);
                sum = sum * a0 + sc_sum * a1;
                for (int d = 0; d < D; d++) o[d] = o[d] * a0 + oc[d] * a1;
                m = mn;
            }
            for (int d = 0; d < D; d++) a->out[((int64_t)row * a->n_head + h) * D + d] = o[d] / sum;
        }
    }
    return KVT_CUDA_OK;
}

static const kvt_cuda_api k_fake = {
    KVT_CUDA_ABI_VERSION, (int)sizeof(kvt_cuda_api), device_count, device_info, ctx_init, ctx_free, last_error,
    dev_malloc, dev_free, dev_malloc, dev_free, memset_dev, copy, copy, copy, event_create, event_free, event_record,
    stream_wait, event_sync, stream_sync, mul_mat_vec, mul_mat, dequant_f16, rmsnorm, rope, swiglu, geglu, add,
    get_rows, argmax, attn_paged,
};

const kvt_cuda_api *kvt_cuda_get_api(int abi_version) { return abi_version == KVT_CUDA_ABI_VERSION ? &k_fake : NULL; }
