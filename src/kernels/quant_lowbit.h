// quant_lowbit.h - the GGUF weight types kvtier computes with in the file's layout (no repacked layout; row kernels,
// and for larger batches the GEMM tiles of gemm_lowbit.h): q2_K and q3_K (llama-quantize's Q2_K, Q3_K_S / Q3_K_M /
// Q3_K_L files), q5_1, iq4_nl and iq4_xs (IQ4_NL, IQ4_XS). Their block layouts (facts of the GGUF format, as ggml defines them) and the tables of
// their kernels: the scalar reference in quant_lowbit.c, the AVX2 / AVX-512 ones in quant_lowbit_avx2.c.
//
// Dot products pair the weights with llama.cpp's activation types (q2_K, q3_K, iq4_xs: q8_K; q5_1: q8_1; iq4_nl:
// q8_0). The scalar reference sums each block's exact integer total in its own scalar chain; the AVX2 / AVX-512
// kernels of q5_1, q2_K, q3_K and iq4_nl sum in llama.cpp's AVX2 order (its 8 lanes of exact integer sums a block,
// its FMA chains, its final sum), so they give llama.cpp's bits on its own rows (suite quant_lowbit), for one
// activation row or several, and the GEMM tiles the GEMV's bits (suite determ); so does iq4_xs's AVX2 kernel, its AVX-512
// one sums in the reference's order (per super-block the exact total, acc = fma(float(S), d * dy, acc)): its bits.
#ifndef KVT_QUANT_LOWBIT_H
#define KVT_QUANT_LOWBIT_H

#include "quant.h"

// q5_1: x = d * q + m, q = 0..31: the low four bits as q4_1's nibbles, the fifth of element j in bit j of qh.
typedef struct {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[KVT_QK / 2];
} kvt_block_q5_1;
// q2_K: 16 sub-blocks of 16, x = d * (sc & 15) * q - dmin * (sc >> 4), sc = scales[e / 16], q = 0..3. Element
// e = 128h + 32j + 16k + l (h, k = 0..1, j = 0..3, l = 0..15) in bits 2j of qs[32h + 16k + l].
typedef struct {
    uint8_t scales[KVT_QK_K / 16];
    uint8_t qs[KVT_QK_K / 4];
    uint16_t d, dmin;
} kvt_block_q2_K;
// q3_K: 16 sub-blocks of 16, x = d * (s - 32) * v, s the 6-bit scale of sub-block e / 16 (kvt_q3_K_scales), v =
// -4..3. Element e = 128h + 32j + 16k + l: its low two bits in bits 2j of qs[32h + 16k + l]; v = those bits when bit
// 4h + j of hmask[16k + l] is set, those bits - 4 when not.
typedef struct {
    uint8_t hmask[KVT_QK_K / 8];
    uint8_t qs[KVT_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} kvt_block_q3_K;
// iq4_nl: x = d * kvt_iq4nl_values[q], q the 4-bit index of element j in the low nibble of qs[j], of j + 16 in the
// high nibble (q4_0's packing).
typedef struct {
    uint16_t d;
    uint8_t qs[KVT_QK / 2];
} kvt_block_iq4_nl;
// iq4_xs: 8 sub-blocks of 32 with 6-bit scales ls (low four bits in the nibbles of scales_l, bits 2b, 2b + 1 of
// scales_h the high two of sub-block b), x = d * (ls - 32) * kvt_iq4nl_values[q]; sub-block b's indices in
// qs[16b .. 16b + 16) as iq4_nl's.
typedef struct {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[KVT_QK_K / 64];
    uint8_t qs[KVT_QK_K / 2];
} kvt_block_iq4_xs;

KVT_STATIC_ASSERT(sizeof(kvt_block_q5_1) == 24, "q5_1 layout");
KVT_STATIC_ASSERT(sizeof(kvt_block_q2_K) == 84, "q2_K layout");
KVT_STATIC_ASSERT(sizeof(kvt_block_q3_K) == 110, "q3_K layout");
KVT_STATIC_ASSERT(sizeof(kvt_block_iq4_nl) == 18, "iq4_nl layout");
KVT_STATIC_ASSERT(sizeof(kvt_block_iq4_xs) == 136, "iq4_xs layout");

// The 16 values of the iq4_nl / iq4_xs codebook (ggml's kvalues_iq4nl).
static const int8_t kvt_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// The exact integer dot of one iq4 block of 32 (indices packed as iq4_nl's, qs[16]) with 32 int8 activations: the
// scalar reference's block sum, and the last odd block of the SIMD iq4_nl kernels (any order: the same integer).
static inline int kvt_iq4_block_isum(const uint8_t qs[16], const int8_t *y) {
    int isum = 0;
    for (int j = 0; j < 16; j++) isum += kvt_iq4nl_values[qs[j] & 0xF] * y[j] + kvt_iq4nl_values[qs[j] >> 4] * y[j + 16];
    return isum;
}

// The 16 signed scales s - 32 (-32..31) of a q3_K block from its 12 packed bytes: the low four bits of sub-block
// g in nibble g / 8 of byte g % 8, the high two in bits 2 (g / 4) of byte 8 + g % 4.
static inline void kvt_q3_K_scales(const uint8_t q[12], int8_t sc[16]) {
    for (int g = 0; g < 16; g++) {
        const int lo = (q[g % 8] >> (4 * (g / 8))) & 0xF, hi = (q[8 + g % 4] >> (2 * (g / 4))) & 3;
        sc[g] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

// The 6-bit scale ls (0..63) of sub-block b (0..7) of an iq4_xs block.
static inline int kvt_iq4_xs_scale(const kvt_block_iq4_xs *x, int b) {
    return ((x->scales_l[b / 2] >> (4 * (b % 2))) & 0xF) | (((x->scales_h >> (2 * b)) & 3) << 4);
}

// Defines `const kvt_type_ops *fn(kvt_type t)`: the table of the five types, from the functions NAME_to_float,
// NAME_from_float, NAME_dot and NAME_multi of the file that expands it (NULL for another type).
#define KVT_LOWBIT_OPS_(name, vt) {name##_to_float, name##_from_float, name##_dot, vt, name##_multi}
#define KVT_LOWBIT_TABLE(fn)                                                                                          \
    const kvt_type_ops *fn(kvt_type t) {                                                                              \
        static const kvt_type_ops q5_1 = KVT_LOWBIT_OPS_(q5_1, KVT_TYPE_Q8_1), q2_K = KVT_LOWBIT_OPS_(q2_K, KVT_TYPE_Q8_K), \
                                  q3_K = KVT_LOWBIT_OPS_(q3_K, KVT_TYPE_Q8_K),                                        \
                                  iq4_nl = KVT_LOWBIT_OPS_(iq4_nl, KVT_TYPE_Q8_0),                                    \
                                  iq4_xs = KVT_LOWBIT_OPS_(iq4_xs, KVT_TYPE_Q8_K);                                    \
        switch (t) {                                                                                                  \
        case KVT_TYPE_Q5_1: return &q5_1;                                                                             \
        case KVT_TYPE_Q2_K: return &q2_K;                                                                             \
        case KVT_TYPE_Q3_K: return &q3_K;                                                                             \
        case KVT_TYPE_IQ4_NL: return &iq4_nl;                                                                         \
        case KVT_TYPE_IQ4_XS: return &iq4_xs;                                                                         \
        default: return NULL;                                                                                         \
        }                                                                                                             \
    }

// The kernels of these types (NULL for any other type): the reference, and the SIMD builds (NULL where the CPU
// lacks the ISA is the caller's concern: quant.c asks only for an ISA the CPU runs).
const kvt_type_ops *kvt_lowbit_ops_ref(kvt_type t);
const kvt_type_ops *kvt_lowbit_ops_avx2(kvt_type t);
const kvt_type_ops *kvt_lowbit_ops_avx512(kvt_type t);

#endif
