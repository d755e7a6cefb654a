// cuda_mmvq_items.cuh - mul_mat_vec over activations quantized to q8_1 (integer dot products with dp4a), the
// per-item and per-lane code as host and device functions: the kernels of cuda_matvec.cu are loops around them, and
// tests/cuda/cuda_host_check.cu runs the same functions on the CPU (the device intrinsics __dp4a, __vsub4 and
// __funnelshift_rc emulated by plain functions) against the CPU reference and the double product.
//
// Activations (the context's q8_1 buffer, written by q8_1_block): per activation row t, `xq` [n_cols] int8 and `xd`
// [n_cols / 32] float2 (d, s) per block of 32 values: x[i] ~ d * q[i], d = max |x| / 127 in f32, s = d * sum(q), so
// that a weight block's minimum or offset term is s times a weight constant. Rows of xq start 32-byte aligned.
//
// Weights: the block layouts of src/kernels/quant.h, read as 32-bit words (16-byte loads where the layout is 16-byte
// aligned: q4_K, q5_K), never bytewise. Each type's traits MQ<T> cut a row into items: whole blocks (q4_0, q4_1,
// q8_0: 32 elements), two sub-blocks of a super-block (q4_K, q5_K: 64 elements), or a quarter super-block (q6_K: 16
// elements of each of four 32-element groups). A lane loads an item's weight words once per row (load), the item's
// activation ints once per token (loadx) and adds the dot product of the two (dot) for every row and token.
#ifndef KVT_CUDA_MMVQ_ITEMS_CUH
#define KVT_CUDA_MMVQ_ITEMS_CUH

#include "cuda_items.cuh"

// ---------------------------------------------------------------- device intrinsics, emulated on the host

// c + the sum of the four signed byte products of a and b
__host__ __device__ __forceinline__ int dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(uint8_t)((uint32_t)a >> (8 * i)) * (int)(int8_t)(uint8_t)((uint32_t)b >> (8 * i));
    return c;
#endif
}
// a - b per byte, modulo 256
__host__ __device__ __forceinline__ uint32_t vsub4(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return __vsub4(a, b);
#else
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)(uint8_t)((a >> (8 * i)) - (b >> (8 * i))) << (8 * i);
    return r;
#endif
}
// the low 32 bits of (hi:lo) >> min(sh, 32)
__host__ __device__ __forceinline__ uint32_t funnel_rc(uint32_t lo, uint32_t hi, uint32_t sh) {
#ifdef __CUDA_ARCH__
    return __funnelshift_rc(lo, hi, sh);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (sh < 32 ? sh : 32));
#endif
}
// a read-only load of *p (uint16_t or uint32_t, aligned to its size)
template <class U> __host__ __device__ __forceinline__ U ldg_u(const U *p) {
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    U v;
    memcpy(&v, p, sizeof v);
    return v;
#endif
}
__host__ __device__ __forceinline__ uint32_t ld32(const uint32_t *p) { return ldg_u(p); }
__host__ __device__ __forceinline__ uint16_t ld16(const uint16_t *p) { return ldg_u(p); }
// 4 words from a 16-byte aligned address (one 16-byte load)
__host__ __device__ __forceinline__ void ld128(const void *p, uint32_t *w) {
#ifdef __CUDA_ARCH__
    const uint4 v = __ldg((const uint4 *)p);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
#else
    memcpy(w, p, 16);
#endif
}
// N (a multiple of 4) words from a 16-byte aligned address
template <int N> __host__ __device__ __forceinline__ void ld_words16(const uint8_t *p, uint32_t *w) {
    KVT_UNROLL
    for (int k = 0; k < N; k += 4) ld128(p + 4 * k, w + k);
}
// N little-endian words of the bytes p .. p + 4N, p 2-byte aligned: the aligned words around them (N 32-bit loads,
// and a 16-bit load of the last half word when p is not 4-byte aligned) joined by funnel shifts, without a branch.
// Reads nothing outside the 4-byte words that hold p .. p + 4N.
template <int N> __host__ __device__ __forceinline__ void ld_words(const uint8_t *p, uint32_t *w) {
    const uintptr_t a = (uintptr_t)p;
    const uint32_t *b = (const uint32_t *)(a & ~(uintptr_t)3);
    const uint32_t sh = (uint32_t)(a & 2) * 8; // 0 or 16
    uint32_t raw[N + 1];
    KVT_UNROLL
    for (int k = 0; k < N; k++) raw[k] = ld32(b + k);
    raw[N] = sh ? ld16((const uint16_t *)(b + N)) : 0u;
    KVT_UNROLL
    for (int k = 0; k < N; k++) w[k] = funnel_rc(raw[k], raw[k + 1], sh);
}
__host__ __device__ __forceinline__ float h2f_lo(uint32_t w) { return h2f((uint16_t)(w & 0xffff)); }
__host__ __device__ __forceinline__ float h2f_hi(uint32_t w) { return h2f((uint16_t)(w >> 16)); }

// ---------------------------------------------------------------- activations

// One q8_1 block: the 32 values x[0 .. 32) (16-byte aligned) into q[0 .. 32) (16-byte aligned) and *ds = (d, d * sum q).
// A NaN or an infinity among them gives d = NaN (q = 0), so that it reaches every product as with f32 activations.
__host__ __device__ __forceinline__ void q8_1_block(const float *x, int8_t *q, float2 *ds) {
    float v[32];
    KVT_UNROLL
    for (int i = 0; i < 32; i += 4) {
        const float4 f = ldg4((const float4 *)(x + i));
        v[i] = f.x, v[i + 1] = f.y, v[i + 2] = f.z, v[i + 3] = f.w;
    }
    float amax = 0.0f;
    bool bad = false;
    KVT_UNROLL
    for (int i = 0; i < 32; i++) {
        bad |= !(fabsf(v[i]) <= FLT_MAX);
        amax = fmaxf(amax, fabsf(v[i]));
    }
    const float d = bad ? quiet_nan() : amax / 127.0f, id = !bad && amax > 0.0f ? 127.0f / amax : 0.0f;
    uint32_t w[8];
    int sum = 0;
    KVT_UNROLL
    for (int k = 0; k < 8; k++) {
        uint32_t p = 0;
        KVT_UNROLL
        for (int i = 0; i < 4; i++) {
            const int qi = bad ? 0 : (int)rintf(v[4 * k + i] * id); // |v * id| <= 127 within rounding: rint stays in range
            sum += qi;
            p |= (uint32_t)(uint8_t)(int8_t)qi << (8 * i);
        }
        w[k] = p;
    }
#ifdef __CUDA_ARCH__
    ((uint4 *)q)[0] = make_uint4(w[0], w[1], w[2], w[3]);
    ((uint4 *)q)[1] = make_uint4(w[4], w[5], w[6], w[7]);
#else
    memcpy(q, w, 32);
#endif
    *ds = make_float2(d, d * (float)sum);
}

// ---------------------------------------------------------------- weight types
//
// MQ<T>: ITEM elements per item (n_cols a multiple of it); NW weight words and NF floats per item and row (load);
// NX activation ints and NS (d, s) pairs per item and token (loadx); dot(w, f, xi, xs) = the item's part of the row's
// product with the token's dequantized activations.

template <int T> struct MQ;

// 32 activation bytes of block b as 8 ints, and its (d, s)
__host__ __device__ __forceinline__ void loadx_block(const int8_t *xq, const float2 *xd, int64_t b, int32_t *xi, float2 *xs) {
    ld_words16<8>((const uint8_t *)(xq + 32 * b), (uint32_t *)xi);
    *xs = xd[b];
}
// sum of the 4-bit fields (w >> shift) & 0xF of words w[0..4) times the activation ints x[0..4)
__host__ __device__ __forceinline__ int dot_nibbles(const uint32_t *w, int shift, const int32_t *x) {
    int s = 0;
    KVT_UNROLL
    for (int k = 0; k < 4; k++) s = dp4a((int)((w[k] >> shift) & 0x0F0F0F0Fu), x[k], s);
    return s;
}

// The types whose item is one block of 32 (q4_0, q4_1, q8_0): the item's activations are those of its block.
struct MQ32 {
    static constexpr int ITEM = 32, NX = 8, NS = 1;
    __host__ __device__ static void loadx(const int8_t *xq, const float2 *xd, int64_t it, int32_t *xi, float2 *xs) {
        loadx_block(xq, xd, it, xi, xs);
    }
};
// q4_0 / q4_1 nibbles: element j < 16 in the low nibble of qs[j], j >= 16 the high nibble of qs[j - 16]; the integer
// dot product of the block's 4 words of nibbles with its 8 activation ints
__host__ __device__ __forceinline__ int dot_q4_block(const uint32_t *w, const int32_t *xi) {
    return dot_nibbles(w, 0, xi) + dot_nibbles(w, 4, xi + 4);
}

// Blocks of 32 laid out as d (f16) then 4 * N_W bytes of quants (q4_0, q8_0): f[0] = d, w = the quants' words.
template <class B, int N_W> struct MQ32d : MQ32 {
    static constexpr int NW = N_W, NF = 1;
    __host__ __device__ static void load(const uint8_t *row, int64_t it, uint32_t *w, float *f) {
        const uint8_t *b = row + it * sizeof(B);
        ld_words<N_W>(b + 2, w);
        f[0] = h2f(ld16((const uint16_t *)b));
    }
};

// q4_0 (18 bytes: d, qs[16]): x = d (q - 8)
template <> struct MQ<KVT_CUDA_Q4_0> : MQ32d<kvt_block_q4_0, 4> {
    __host__ __device__ static float dot(const uint32_t *w, const float *f, const int32_t *xi, const float2 *xs) {
        return f[0] * (xs[0].x * (float)dot_q4_block(w, xi) - 8.0f * xs[0].y);
    }
};
// q4_1 (20 bytes: d, m, qs[16]): x = d q + m
template <> struct MQ<KVT_CUDA_Q4_1> : MQ32 {
    static constexpr int NW = 4, NF = 2;
    __host__ __device__ static void load(const uint8_t *row, int64_t it, uint32_t *w, float *f) {
        const uint8_t *b = row + it * sizeof(kvt_block_q4_1);
        uint32_t dm[1];
        ld_words<1>(b, dm);
        ld_words<4>(b + 4, w);
        f[0] = h2f_lo(dm[0]), f[1] = h2f_hi(dm[0]);
    }
    __host__ __device__ static float dot(const uint32_t *w, const float *f, const int32_t *xi, const float2 *xs) {
        return f[0] * xs[0].x * (float)dot_q4_block(w, xi) + f[1] * xs[0].y;
    }
};
// q8_0 (34 bytes: d, qs[32]): x = d q
template <> struct MQ<KVT_CUDA_Q8_0> : MQ32d<kvt_block_q8_0, 8> {
    __host__ __device__ static float dot(const uint32_t *w, const float *f, const int32_t *xi, const float2 *xs) {
        int s = 0;
        KVT_UNROLL
        for (int k = 0; k < 8; k++) s = dp4a((int)w[k], xi[k], s);
        return f[0] * xs[0].x * (float)s;
    }
};

// q4_K / q5_K super-block header (16 bytes: d, dmin, scales[12]) as 4 words h: the scale and min of sub-block s
// (kvt_k_scale_min's packing, read from the words: bytes 0-3 in h[1], 4-7 in h[2], 8-11 in h[3])
__host__ __device__ __forceinline__ void k_scale_min_w(const uint32_t *h, int s, float *sc, float *m) {
    const int sh = 8 * (s & 3);
    const uint32_t b0 = (h[1] >> sh) & 0xFF, b1 = (h[2] >> sh) & 0xFF, b2 = (h[3] >> sh) & 0xFF;
    if (s < 4) {
        *sc = (float)(b0 & 63), *m = (float)(b1 & 63);
    } else {
        *sc = (float)((b2 & 15) | ((b0 >> 6) << 4)), *m = (float)((b2 >> 4) | ((b1 >> 6) << 4));
    }
}
// q4_K (144 bytes) and q5_K (176 bytes): item = sub-blocks 2j and 2j + 1 of a super-block (j = it % 4), whose low
// 4 bits are the low and high nibbles of qs[32j .. 32j + 32); q5_K's fifth bits are bits 2j and 2j + 1 of qh[0 .. 32).
// x = d sc q - dmin m per sub-block. Words: w[0..8) the qs, q5_K's w[8..16) the qh shifted right by 2j.
template <int T> struct MQK45 {
    static constexpr bool Q5 = T == KVT_CUDA_Q5_K;
    static constexpr int ITEM = 64, NW = Q5 ? 16 : 8, NF = 4, NX = 16, NS = 2;
    static constexpr int BYTES = Q5 ? (int)sizeof(kvt_block_q5_K) : (int)sizeof(kvt_block_q4_K), QS = Q5 ? 48 : 16;
    __host__ __device__ static void load(const uint8_t *row, int64_t it, uint32_t *w, float *f) {
        const uint8_t *b = row + (it / 4) * BYTES; // 16-byte aligned (rows of 144- or 176-byte blocks)
        const int j = (int)(it % 4);
        uint32_t h[4];
        ld_words16<4>(b, h);
        ld_words16<8>(b + QS + 32 * j, w);
        if constexpr (Q5) {
            ld_words16<8>(b + 16, w + 8);
            KVT_UNROLL
            for (int k = 8; k < 16; k++) w[k] >>= 2 * j;
        }
        float sc0, m0, sc1, m1;
        k_scale_min_w(h, 2 * j, &sc0, &m0);
        k_scale_min_w(h, 2 * j + 1, &sc1, &m1);
        const float d = h2f_lo(h[0]), dmin = h2f_hi(h[0]);
        f[0] = d * sc0, f[1] = d * sc1, f[2] = dmin * m0, f[3] = dmin * m1;
    }
    __host__ __device__ static void loadx(const int8_t *xq, const float2 *xd, int64_t it, int32_t *xi, float2 *xs) {
        loadx_block(xq, xd, 2 * it, xi, xs);
        loadx_block(xq, xd, 2 * it + 1, xi + 8, xs + 1);
    }
    __host__ __device__ static float dot(const uint32_t *w, const float *f, const int32_t *xi, const float2 *xs) {
        int s0 = 0, s1 = 0;
        KVT_UNROLL
        for (int k = 0; k < 8; k++) {
            uint32_t a = w[k] & 0x0F0F0F0Fu, b = (w[k] >> 4) & 0x0F0F0F0Fu;
            if constexpr (Q5) {
                a |= (w[8 + k] & 0x01010101u) << 4;
                b |= ((w[8 + k] >> 1) & 0x01010101u) << 4;
            }
            s0 = dp4a((int)a, xi[k], s0);
            s1 = dp4a((int)b, xi[8 + k], s1);
        }
        return f[0] * xs[0].x * (float)s0 + f[1] * xs[1].x * (float)s1 - f[2] * xs[0].y - f[3] * xs[1].y;
    }
};
template <> struct MQ<KVT_CUDA_Q4_K> : MQK45<KVT_CUDA_Q4_K> {};
template <> struct MQ<KVT_CUDA_Q5_K> : MQK45<KVT_CUDA_Q5_K> {};

// q6_K (210 bytes, 2-byte aligned: ql[128], qh[64], scales[16] int8, d): element e = 128h + 32k + l has its low bits in
// ql[64h + l + 32(k & 1)] (high nibble for k >= 2), its high bits (qh[32h + l] >> 2k) & 3, x = d scales[e / 16] (q - 32).
// Item (h, i) = (it % 4 / 2, it % 2): l in [16i, 16i + 16) for k = 0..3, i.e. half i of activation blocks 4h + k.
// Words: w[0..4) ql[64h + 16i ..], w[4..8) ql[64h + 32 + 16i ..], w[8..12) qh[32h + 16i ..]; f[k] = d scales[8h + 2k + i].
template <> struct MQ<KVT_CUDA_Q6_K> {
    static constexpr int ITEM = 64, NW = 12, NF = 4, NX = 16, NS = 4;
    __host__ __device__ static void load(const uint8_t *row, int64_t it, uint32_t *w, float *f) {
        const uint8_t *b = row + (it / 4) * sizeof(kvt_block_q6_K);
        const int h = (int)(it % 4) / 2, i = (int)(it % 2);
        ld_words<4>(b + 64 * h + 16 * i, w);
        ld_words<4>(b + 64 * h + 32 + 16 * i, w + 4);
        ld_words<4>(b + 128 + 32 * h + 16 * i, w + 8);
        uint32_t sc[2]; // scales[8h .. 8h + 8)
        ld_words<2>(b + 192 + 8 * h, sc);
        const float d = h2f(ld16((const uint16_t *)(b + 208)));
        KVT_UNROLL
        for (int k = 0; k < 4; k++) f[k] = d * (float)(int8_t)(uint8_t)(sc[k / 2] >> (8 * (2 * (k % 2) + i)));
    }
    __host__ __device__ static void loadx(const int8_t *xq, const float2 *xd, int64_t it, int32_t *xi, float2 *xs) {
        const int64_t b0 = (it / 4) * 8 + 4 * ((it % 4) / 2); // activation block of k = 0
        const int i = (int)(it % 2);
        KVT_UNROLL
        for (int k = 0; k < 4; k++) {
            ld_words16<4>((const uint8_t *)(xq + 32 * (b0 + k) + 16 * i), (uint32_t *)xi + 4 * k);
            xs[k] = xd[b0 + k];
        }
    }
    __host__ __device__ static float dot(const uint32_t *w, const float *f, const int32_t *xi, const float2 *xs) {
        float r = 0.0f;
        KVT_UNROLL
        for (int k = 0; k < 4; k++) {
            int s = 0;
            KVT_UNROLL
            for (int m = 0; m < 4; m++) {
                const uint32_t lo = (w[4 * (k & 1) + m] >> (k >= 2 ? 4 : 0)) & 0x0F0F0F0Fu;
                const uint32_t q = lo | (((w[8 + m] >> (2 * k)) & 0x03030303u) << 4);
                s = dp4a((int)vsub4(q, 0x20202020u), xi[4 * k + m], s);
            }
            r += f[k] * xs[k].x * (float)s;
        }
        return r;
    }
};

// ---------------------------------------------------------------- the lane

// Weight rows per warp of the q8_1 matvec
constexpr int kMmvqRows = 2;

// mul_mat_vec over q8_1 activations: lane `lane` (of 32) of the warp of weight rows r0 .. r0 + R (rows past n_rows
// repeat the last row; the kernel drops their sums) adds into acc[r][t], t < n_tok <= NT, its items lane, lane + 32,
// ... of each row times activation row t. The warp then sums acc over its lanes. ILP items a lane at a time (their
// weights loaded before the first is used: more bytes in flight), added in the same order: the same sums for any ILP.
template <int T, int NT, int R, int ILP = 1>
__host__ __device__ __forceinline__ void mmvq_lane(const uint8_t *W, int64_t n_rows, int64_t n_cols, int64_t r0, const int8_t *xq,
                                                   const float2 *xd, int n_tok, int lane, float (*acc)[NT]) {
    typedef MQ<T> Q;
    const int64_t rb = row_bytes<T>(n_cols), n_items = n_cols / Q::ITEM;
    const uint8_t *rows[R];
    KVT_UNROLL
    for (int r = 0; r < R; r++) rows[r] = W + (r0 + r < n_rows ? r0 + r : n_rows - 1) * rb;
    for (int64_t it0 = lane; it0 < n_items; it0 += 32 * ILP) {
        uint32_t w[ILP][R][Q::NW];
        float f[ILP][R][Q::NF];
        KVT_UNROLL
        for (int u = 0; u < ILP; u++) {
            if (it0 + 32 * u < n_items) {
                KVT_UNROLL
                for (int r = 0; r < R; r++) Q::load(rows[r], it0 + 32 * u, w[u][r], f[u][r]);
            }
        }
        KVT_UNROLL
        for (int u = 0; u < ILP; u++) {
            const int64_t it = it0 + 32 * u;
            if (it >= n_items) break;
            KVT_UNROLL
            for (int t = 0; t < NT; t++) {
                if (t < n_tok) {
                    int32_t xi[Q::NX];
                    float2 xs[Q::NS];
                    Q::loadx(xq + t * n_cols, xd + t * (n_cols / 32), it, xi, xs);
                    KVT_UNROLL
                    for (int r = 0; r < R; r++) acc[r][t] += Q::dot(w[u][r], f[u][r], xi, xs);
                }
            }
        }
    }
}

// Bytes of the q8_1 activations of n_tok rows of n_cols: xq then, 256-byte aligned, xd.
__host__ __device__ __forceinline__ int64_t q8_1_xq_bytes(int64_t n_tok, int64_t n_cols) { return (n_tok * n_cols + 255) / 256 * 256; }
__host__ __device__ __forceinline__ int64_t q8_1_bytes(int64_t n_tok, int64_t n_cols) {
    return q8_1_xq_bytes(n_tok, n_cols) + n_tok * (n_cols / 32) * (int64_t)sizeof(float2);
}

// Whether the q8_1 path handles weight type `type` (the float types keep the f32 path).
static inline bool mmvq_type(int type) {
    return type == KVT_CUDA_Q4_0 || type == KVT_CUDA_Q4_1 || type == KVT_CUDA_Q8_0 || type == KVT_CUDA_Q4_K ||
           type == KVT_CUDA_Q5_K || type == KVT_CUDA_Q6_K;
}

#endif
