// cuda_items.cuh - the per-item bodies of the kernels, as host and device functions: each kernel is a
// loop (over its grid, or a warp's lanes) around one of these, and tests/cuda/cuda_host_check.cu runs
// the same functions on the CPU against the references of src/kernels. What the CPU run cannot cover:
// launch shapes, warp shuffles, shared memory and barriers.
#ifndef KVT_CUDA_ITEMS_CUH
#define KVT_CUDA_ITEMS_CUH

#include <cublas_api.h>

#include <cfloat>
#include <cmath>

#include "cuda_blocks.cuh"

// #pragma unroll in the device pass only (the host compiler does not know it)
#ifdef __CUDA_ARCH__
#define KVT_UNROLL _Pragma("unroll")
#else
#define KVT_UNROLL
#endif

__host__ __device__ __forceinline__ float4 ldg4(const float4 *p) {
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}

__host__ __device__ __forceinline__ float quiet_nan() {
    const uint32_t u = 0x7fc00000u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// mul_mat_vec: lane `lane` (of 32) of the warp of weight row `row` (n_cols elements of type T) adds into
// acc[t], t < n_tok, its groups lane, lane + 32, ... times activation row t (x: [n_tok, n_cols], 16-byte
// aligned rows). The warp then sums acc over its lanes.
template <int T>
__host__ __device__ __forceinline__ void mmv_lane(const uint8_t *row, int64_t n_cols, const float *x, int n_tok, int lane,
                                                  float acc[KVT_CUDA_MMV_MAX_ROWS]) {
    const int64_t n_groups = n_cols / 8;
    for (int64_t g = lane; g < n_groups; g += 32) {
        float w[8];
        row_get8<T>(row, g, w);
        KVT_UNROLL
        for (int t = 0; t < KVT_CUDA_MMV_MAX_ROWS; t++) {
            if (t < n_tok) {
                const float4 *xv = (const float4 *)(x + t * n_cols + 8 * g);
                const float4 a = ldg4(xv), b = ldg4(xv + 1);
                acc[t] += w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y + w[6] * b.z + w[7] * b.w;
            }
        }
    }
}

// dequant_f16: group g (elements 8g .. 8g+7) of src (one row of type T) into dst as f16; A16: dst is 16-byte
// aligned, and the group goes out as one 16-byte store (one instruction, not 8 of 2 bytes).
template <int T, bool A16 = false> __host__ __device__ __forceinline__ void dequant_item(const uint8_t *src, int64_t g, __half *dst) {
    float v[8];
    row_get8<T>(src, g, v);
    if (A16) {
        union {
            uint4 u;
            __half h[8];
        } o;
        for (int i = 0; i < 8; i++) o.h[i] = __float2half_rn(v[i]);
        *(uint4 *)(dst + 8 * g) = o.u;
    } else {
        for (int i = 0; i < 8; i++) dst[8 * g + i] = __float2half_rn(v[i]);
    }
}

// get_rows: item k = (output row t, group g) of n_ids * n_cols / 8; an id out of [0, n_rows) gives NaN.
template <int T>
__host__ __device__ __forceinline__ void get_rows_item(int64_t k, const uint8_t *W, int64_t n_rows, int64_t n_cols,
                                                       const int32_t *ids, float *out) {
    const int64_t per_row = n_cols / 8, t = k / per_row, g = k % per_row;
    const int32_t id = ids[t];
    float v[8];
    if (id >= 0 && id < n_rows) {
        row_get8<T>(W + id * row_bytes<T>(n_cols), g, v);
    } else {
        for (int i = 0; i < 8; i++) v[i] = quiet_nan();
    }
    for (int i = 0; i < 8; i++) out[t * n_cols + 8 * g + i] = v[i];
}

// rope: item k = (token, head, rotated pair i) of n_tok * n_head * n_rot / 2, in place in x. The angle
// is kvt_rope_cache's: the running product theta *= theta_scale in f32, theta_scale from the host.
__host__ __device__ __forceinline__ void rope_item(int64_t k, float *x, const kvt_cuda_rope_args &a, float theta_scale) {
    const int half = a.n_rot / 2;
    const int i = (int)(k % half);
    const int64_t th_idx = k / half; // token * n_head + head
    float theta = (float)a.pos[th_idx / a.n_head];
    for (int j = 0; j < i; j++) theta *= theta_scale;
    const float ff = a.freq_factors ? a.freq_factors[i] : 1.0f;
    const float th = a.freq_scale * theta / ff;
    const float c = cosf(th), s = sinf(th);
    float *xh = x + th_idx * a.head_dim;
    const int p0 = a.neox ? i : 2 * i, p1 = a.neox ? i + half : 2 * i + 1;
    const float x0 = xh[p0], x1 = xh[p1];
    xh[p0] = x0 * c - x1 * s;
    xh[p1] = x0 * s + x1 * c;
}

// rmsnorm, one thread block of nthreads per row: thread tid's part of the row's sum of squares (double,
// as kvt_rmsnorm_f32); the block sums the parts (warps by shuffles, then the warps in order); every
// thread turns the total into the scale and writes its elements.
__host__ __device__ __forceinline__ double rmsnorm_part(const float *xr, int64_t n, int tid, int nthreads) {
    double sum = 0.0;
    for (int64_t i = tid; i < n; i += nthreads) sum += (double)xr[i] * xr[i];
    return sum;
}
__host__ __device__ __forceinline__ float rmsnorm_scale(double total, int64_t n, float eps) {
    return 1.0f / sqrtf((float)(total / (double)n) + eps);
}
__host__ __device__ __forceinline__ void rmsnorm_write(const float *xr, const float *w, float *yr, int64_t n, float scale, int tid,
                                                       int nthreads) {
    for (int64_t i = tid; i < n; i += nthreads) yr[i] = w ? xr[i] * scale * w[i] : xr[i] * scale;
}

// argmax, one thread block per row: (v, i) beats (bv, bi) if v is larger, or equal with a lower index,
// or bi < 0 (nothing yet) and v is not NaN; NaN never beats. argmax_part: thread tid's best of its
// elements (bi = -1 if it has none but NaNs) and whether any of them is a NaN or an infinity; the block
// then reduces the parts with argmax_better (and ORs the flags), and argmax_result gives the row's answer.
__host__ __device__ __forceinline__ bool argmax_better(float v, int64_t i, float bv, int64_t bi) {
    return v > bv || (v == bv && i < bi) || (bi < 0 && v == v);
}
__host__ __device__ __forceinline__ void argmax_part(const float *xr, int64_t n, int tid, int nthreads, float *bv_out,
                                                     int64_t *bi_out, bool *bad_out) {
    float bv = -INFINITY;
    int64_t bi = -1;
    bool bad = false;
    for (int64_t i = tid; i < n; i += nthreads) {
        const float v = xr[i];
        bad |= !(fabsf(v) <= FLT_MAX); // NaN or +-inf
        if (argmax_better(v, i, bv, bi)) bv = v, bi = i;
    }
    *bv_out = bv, *bi_out = bi, *bad_out = bad;
}
// The row's id from the reduced best bi and flag bad: kvt_argmax's answer (src/sched/sampler.c scans from index 0
// with `>`: a NaN at index 0 wins, a NaN elsewhere never; all NaN: 0), or -1 if flag_nonfinite and the row holds a
// NaN or an infinity.
__host__ __device__ __forceinline__ int32_t argmax_result(float x0, int64_t bi, bool bad, int flag_nonfinite) {
    if (flag_nonfinite && bad) return -1;
    return x0 != x0 || bi < 0 ? 0 : (int32_t)bi;
}

// mul_mat_gemm's cublasGemmEx arguments for Y [n_tok, n_rows] = X [n_tok, n_cols] W^T, all row-major:
// row-major W is column-major n_cols x n_rows (lda n_cols), likewise X and Y, so column-major
// Y^T (n_rows x n_tok, ldc n_rows) = op_T(W) op_N(X). A = W, B = X, C = Y.
struct gemm_args {
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc;
};
inline gemm_args gemm_args_for(int64_t n_rows, int64_t n_cols, int64_t n_tok) {
    return gemm_args{CUBLAS_OP_T, CUBLAS_OP_N, (int)n_rows, (int)n_tok, (int)n_cols, (int)n_cols, (int)n_cols, (int)n_rows};
}

// Gated activations: g[i] = Act::f(g[i]) * u[i].
struct silu_op {
    __host__ __device__ static float f(float g) { return g / (1.0f + expf(-g)); }
};
struct gelu_tanh_op {
    __host__ __device__ static float f(float x) {
        const float c = 0.7978845608028654f; // sqrt(2/pi)
        return 0.5f * x * (1.0f + tanhf(c * x * (1.0f + 0.044715f * x * x)));
    }
};

#endif
