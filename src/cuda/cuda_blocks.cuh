// cuda_blocks.cuh - device-side decoding of every weight type, one traits struct per type over
// the block layouts of src/kernels/quant.h (shared, not copied). Kernels are written once as
// templates over these traits and instantiated through dispatch_type().
//
// Each traits struct W<type> has:
//   QK     elements per block (1 for float types: a "block" is then one element)
//   bytes  bytes per block
//   get8(blk, j0, v): v[0..8) = elements j0..j0+7 of the block at blk, as f32; for QK >= 8, j0 is a
//          multiple of 8 inside the block; for float types blk points at element j0 itself.
// Within any 8-element group the scale (and min) is one, so get8 decodes it once. The decoders are
// host and device functions: tests/cuda_host_check.cu runs them on the CPU against quant.c's to_float.
// Blocks are only 2-byte aligned in GGUF data (18, 34, 210 bytes ...): fields are read bytewise or
// as 16-bit halves, never as wider words.
#ifndef KVT_CUDA_BLOCKS_CUH
#define KVT_CUDA_BLOCKS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../kernels/quant.h"
#include "kvt_cuda.h"

__host__ __device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__host__ __device__ __forceinline__ float bf2f(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

template <int T> struct W;

template <> struct W<KVT_CUDA_F32> {
    static constexpr int QK = 1, bytes = 4;
    KVT_HOST_DEVICE static void get8(const uint8_t *p, int, float v[8]) {
        const float *f = (const float *)p; // f32 rows are 4-byte aligned
        for (int i = 0; i < 8; i++) v[i] = f[i];
    }
};
template <> struct W<KVT_CUDA_F16> {
    static constexpr int QK = 1, bytes = 2;
    KVT_HOST_DEVICE static void get8(const uint8_t *p, int, float v[8]) {
        const uint16_t *h = (const uint16_t *)p;
        for (int i = 0; i < 8; i++) v[i] = h2f(h[i]);
    }
};
template <> struct W<KVT_CUDA_BF16> {
    static constexpr int QK = 1, bytes = 2;
    KVT_HOST_DEVICE static void get8(const uint8_t *p, int, float v[8]) {
        const uint16_t *h = (const uint16_t *)p;
        for (int i = 0; i < 8; i++) v[i] = bf2f(h[i]);
    }
};
// x = d * (q - 8); element j < 16 in the low nibble of qs[j], j >= 16 in the high nibble of qs[j - 16]
template <> struct W<KVT_CUDA_Q4_0> {
    static constexpr int QK = KVT_QK, bytes = sizeof(kvt_block_q4_0);
    KVT_HOST_DEVICE static void get8(const uint8_t *p, int j0, float v[8]) {
        const kvt_block_q4_0 *b = (const kvt_block_q4_0 *)p;
        const float d = h2f(b->d);
        const int shift = j0 < 16 ? 0 : 4;
        const uint8_t *q = b->qs + (j0 & 15);
        for (int i = 0; i < 8; i++) v[i] = d * (float)(((q[i] >> shift) & 0xF) - 8);
    }
};
// x = d * q + m
template <> struct W<KVT_CUDA_Q4_1> {
    static constexpr int QK = KVT_QK, bytes = sizeof(kvt_block_q4_1);
    KVT_HOST_DEVICE static void get8(const uint8_t *p, int j0, float v[8]) {
        const kvt_block_q4_1 *b = (const kvt_block_q4_1 *)p;
        const float d = h2f(b->d), m = h2f(b->m);
        const int shift = j0 < 16 ? 0 : 4;
        const uint8_t *q = b->qs + (j0 & 15);
        for (int i = 0; i < 8; i++) v[i] = d * (float)((q[i] >> shift) & 0xF) + m;
    }
};
template <> struct W<KVT_CUDA_Q8_0> {
    static constexpr int QK = KVT_QK, bytes = sizeof(kvt_block_q8_0);
    KVT_HOST_DEVICE static void get8(const uint8_t *p, int j0, float v[8]) {
        const kvt_block_q8_0 *b = (const kvt_block_q8_0 *)p;
        const float d = h2f(b->d);
        for (int i = 0; i < 8; i++) v[i] = d * (float)b->qs[j0 + i];
    }
};
// q4_K / q5_K: sub-block s = j0 / 32 has scale sc and min m; x = d * sc * q - dmin * m, q's low 4 bits
// in qs[32 * (s / 2) + l] (nibble s & 1), q5_K's fifth bit is bit s of qh[l]
template <int T> struct WK45 {
    KVT_HOST_DEVICE static void get8(const uint8_t *p, int j0, float v[8]) {
        typedef typename std::conditional<T == KVT_CUDA_Q4_K, kvt_block_q4_K, kvt_block_q5_K>::type B;
        const B *b = (const B *)p;
        const int s = j0 / 32, l0 = j0 % 32, shift = 4 * (s & 1);
        uint8_t sc, m;
        kvt_k_scale_min(s, b->scales, &sc, &m);
        const float ds = h2f(b->d) * sc, dm = h2f(b->dmin) * m;
        const uint8_t *q = b->qs + 32 * (s / 2) + l0;
        for (int i = 0; i < 8; i++) {
            int x = (q[i] >> shift) & 0xF;
            if constexpr (T == KVT_CUDA_Q5_K) x |= ((((const kvt_block_q5_K *)p)->qh[l0 + i] >> s) & 1) << 4;
            v[i] = ds * (float)x - dm;
        }
    }
};
template <> struct W<KVT_CUDA_Q4_K> : WK45<KVT_CUDA_Q4_K> {
    static constexpr int QK = KVT_QK_K, bytes = sizeof(kvt_block_q4_K);
};
template <> struct W<KVT_CUDA_Q5_K> : WK45<KVT_CUDA_Q5_K> {
    static constexpr int QK = KVT_QK_K, bytes = sizeof(kvt_block_q5_K);
};
// q6_K: element e = 128h + 32k + l: low bits in ql[64h + l + 32(k & 1)] (nibble k >= 2), high bits
// (qh[32h + l] >> 2k) & 3; x = d * scales[e / 16] * (q - 32)
template <> struct W<KVT_CUDA_Q6_K> {
    static constexpr int QK = KVT_QK_K, bytes = sizeof(kvt_block_q6_K);
    KVT_HOST_DEVICE static void get8(const uint8_t *p, int j0, float v[8]) {
        const kvt_block_q6_K *b = (const kvt_block_q6_K *)p;
        const int h = j0 / 128, k = (j0 % 128) / 32, l0 = j0 % 32;
        const float ds = h2f(b->d) * (float)b->scales[j0 / 16];
        const uint8_t *ql = b->ql + 64 * h + 32 * (k & 1) + l0, *qh = b->qh + 32 * h + l0;
        const int shift = k < 2 ? 0 : 4;
        for (int i = 0; i < 8; i++) {
            const int q = ((ql[i] >> shift) & 0xF) | (((qh[i] >> (2 * k)) & 3) << 4);
            v[i] = ds * (float)(q - 32);
        }
    }
};

// Decodes the 8-element group g (elements 8g..8g+7) of a row starting at `row`.
template <int T> __host__ __device__ __forceinline__ void row_get8(const uint8_t *row, int64_t g, float v[8]) {
    constexpr int QK = W<T>::QK;
    if constexpr (QK == 1) {
        W<T>::get8(row + 8 * g * W<T>::bytes, 0, v);
    } else {
        const int64_t e = 8 * g;
        W<T>::get8(row + (e / QK) * W<T>::bytes, (int)(e % QK), v);
    }
}

// Bytes of a row of n elements of type T (n a multiple of QK).
template <int T> __host__ __device__ constexpr int64_t row_bytes(int64_t n) { return n / W<T>::QK * W<T>::bytes; }

// Op<T>::run(args...) for the weight type `type` (F32 only when allow_f32); KVT_CUDA_ERR_ARG for any
// other type. Op is a class template over the type id with a static int run(...).
template <template <int> class Op, class... A> int dispatch_type(int type, bool allow_f32, A... a) {
    switch (type) {
    case KVT_CUDA_F32: return allow_f32 ? Op<KVT_CUDA_F32>::run(a...) : KVT_CUDA_ERR_ARG;
    case KVT_CUDA_F16: return Op<KVT_CUDA_F16>::run(a...);
    case KVT_CUDA_BF16: return Op<KVT_CUDA_BF16>::run(a...);
    case KVT_CUDA_Q4_0: return Op<KVT_CUDA_Q4_0>::run(a...);
    case KVT_CUDA_Q4_1: return Op<KVT_CUDA_Q4_1>::run(a...);
    case KVT_CUDA_Q8_0: return Op<KVT_CUDA_Q8_0>::run(a...);
    case KVT_CUDA_Q4_K: return Op<KVT_CUDA_Q4_K>::run(a...);
    case KVT_CUDA_Q5_K: return Op<KVT_CUDA_Q5_K>::run(a...);
    case KVT_CUDA_Q6_K: return Op<KVT_CUDA_Q6_K>::run(a...);
    }
    return KVT_CUDA_ERR_ARG;
}

// Elements per block of a weight type (1 for float types), 0 for a type not handled.
static inline int type_block(int type) {
    switch (type) {
    case KVT_CUDA_F32: case KVT_CUDA_F16: case KVT_CUDA_BF16: return 1;
    case KVT_CUDA_Q4_0: case KVT_CUDA_Q4_1: case KVT_CUDA_Q8_0: return KVT_QK;
    case KVT_CUDA_Q4_K: case KVT_CUDA_Q5_K: case KVT_CUDA_Q6_K: return KVT_QK_K;
    }
    return 0;
}

#endif
