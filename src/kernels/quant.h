// quant.h - per-type row kernels: dequantize, quantize, dot product.
//
// Every function works on whole rows of n elements, n a multiple of the type's
// block size (1 for f32/f16/bf16, 32 for q4_0/q4_1/q8_0/q8_1, 256 for the
// K-quants); a row of n elements occupies kvt_row_size(t, n) bytes. Rows are
// expected at the natural alignment of the block (2 bytes, 4 for q8_K), which
// holds for GGUF tensor data and for buffers from malloc.
//
// Dot products pair a weight row of type t with an activation row of type
// ops->vec_dot_type, as llama.cpp does (q4_0 and q8_0 with q8_0, q4_1 with
// q8_1, K-quants with q8_K, float types with themselves), so that results
// match llama.cpp up to float summation order.
#ifndef KVT_QUANT_H
#define KVT_QUANT_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"

// The block layouts and kvt_k_scale_min below are shared with the CUDA kernels (src/cuda/cuda_blocks.cuh):
// this header compiles as C11 and as CUDA C++.
#if defined(__CUDACC__)
#define KVT_HOST_DEVICE __host__ __device__
#else
#define KVT_HOST_DEVICE
#endif
#ifdef __cplusplus
#define KVT_STATIC_ASSERT static_assert
#else
#define KVT_STATIC_ASSERT _Static_assert
#endif

// dst[0..n) = dequantized src (row of n elements of the table's type)
typedef void (*kvt_to_float_fn)(const void *src, float *dst, int64_t n);
// dst (row of n elements of the table's type) = quantized src[0..n)
typedef void (*kvt_from_float_fn)(const float *src, void *dst, int64_t n);
// *s = sum_i x[i] * y[i]; x: row of the table's type, y: row of vec_dot_type
typedef void (*kvt_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);
// One weight row against nt activation rows (1 <= nt <= KVT_DOT_MULTI_MAX):
// s[t * s_stride] = dot(x, y + t * y_stride) for t in [0, nt). Loads and
// decodes each weight block once for all nt rows (prefill micro-kernel).
typedef void (*kvt_vec_dot_multi_fn)(int64_t n, const void *x, const void *y, size_t y_stride,
                                     int nt, float *s, int64_t s_stride);
#define KVT_DOT_MULTI_MAX 4

typedef struct {
    kvt_to_float_fn to_float;
    kvt_from_float_fn from_float;
    kvt_vec_dot_fn vec_dot;
    kvt_type vec_dot_type;
    kvt_vec_dot_multi_fn vec_dot_multi; // never NULL when vec_dot is not NULL
} kvt_type_ops;

// Best implementation for this CPU (detected once, thread-safe); NULL for types
// kvtier cannot compute with. q8_1 and q8_K (activation-only types) have
// to_float and from_float but no vec_dot.
const kvt_type_ops *kvt_type_ops_get(kvt_type t);
// Portable scalar reference implementation (same NULL rules).
const kvt_type_ops *kvt_type_ops_ref(kvt_type t);

// Instruction set picked by kvt_type_ops_get.
typedef enum { KVT_ISA_SCALAR = 0, KVT_ISA_AVX2 = 1, KVT_ISA_AVX512 = 2 } kvt_isa;
kvt_isa kvt_kernels_isa(void);
// The best ISA this CPU runs (whatever KVT_ISA says).
kvt_isa kvt_kernels_isa_detected(void);
// Tests and benchmarks: the kernels of isa (at most the detected one) from now on, for the whole
// process; call it while no kernel runs. Returns the ISA in use before.
kvt_isa kvt_kernels_set_isa(kvt_isa isa);
const char *kvt_isa_name(kvt_isa isa);
// Software prefetch distance in bytes of the decode GEMVs that stream quantized weights (q4_1_x8, q8_0_x8, q4_K_x8, q6_K
// rows), per CPU: KVT_PF_INTEL on Intel, whose decode from DRAM overlapped the kernels' arithmetic with the reads only
// with them (docs/log/BENCHMARKS-kernels-2.md, intel11; 4096 bytes into L2 since q4dec11; KVT_PF_INTEL_A7, 2048, on family 6
// model 0xA7: BENCHMARKS-kernels-6.md, i7pf); KVT_PF_AMD_AVX2 (4096) on
// AMD without AVX-512 (Zen 3: 1.07-1.28x paired, docs/log/BENCHMARKS-kernels-3.md, z3dec); 0 (none) on AMD with
// AVX-512 (Zen 4), where the prefetches cost more than they hide (BENCHMARKS-kernels-2.md, kq6x8; but q4_K_x8's there:
// below), but KVT_PF_AMD_ZEN5
// (1024) on AMD family 0x1A on with AVX-512 (Zen 5) for q8_0_x8 and q4_1_x8 (paired 1.20-1.30x and 1.10-1.14x from DRAM,
// docs/log/BENCHMARKS-kernels-5.md, z5dq; the q4_K, q4_K_x8 and q6_K rows still none there: the per-type distances
// below; the dense ones KVT_PF_AMD_ZEN5_DENSE, 256, z5f16). KVT_PREFETCH=BYTES
// (0 .. 65536, a multiple of 64) overrides it and the dense distance below, to measure. Prefetches only: no result
// changes with them.
int64_t kvt_kernels_prefetch(void);
// The distance of the decode GEMV of type t (KVT_TYPE_Q4_K_X8, KVT_TYPE_Q6_K_R: the q6_K_r rows, KVT_TYPE_Q4_K /
// KVT_TYPE_Q6_K: the AVX-512 K-quant rows of kq_avx512.h; any other: the one above): kvt_kernels_prefetch() but 0 for
// the K-quant ones on Zen 5, KVT_PF_AMD_ZEN4_Q4K (2048) for q4_K_x8 on Zen 4 (its AVX2 GEMV there, below), and for those two on AMD without AVX-512 KVT_PF_AMD_AVX2_Q4K (1024 since z4k's
// AVX2 GEMV, into L1 only there: kqx8.h; 2048 before, 1.07-1.09x median paired at the model level on a Zen 3) and KVT_PF_AMD_AVX2_Q6K (1024 since z5k6,
// into L1 only there as q4_K_x8's; 4096 before; docs/log/BENCHMARKS-kernels-3.md, z3k, z5k6). KVT_PREFETCH and kvt_kernels_set_prefetch set it for every type.
int64_t kvt_kernels_prefetch_type(kvt_type t);
// The same for the dense decode GEMVs (f16_x16; the f16 and bf16 rows' default form, matmul.h): Intel's distance on
// Intel, 0 on AMD (Zen 3: f16_x16 read its plain stream at 96-106% of the probe without, 0.85-0.94x with; z3dec).
int64_t kvt_kernels_prefetch_dense(void);
// Whether the decode GEMV of type t, where it prefetches (the distances above), also prefetches the lines
// KVT_X8_PF_NEAR bytes ahead into L1 (bits_avx2.h): 1 but for q8_0_x8 and q4_1_x8 on AMD without AVX-512 (Zen 3: q8_0_x8's AVX2
// GEMV read 1.01-1.09x faster from DRAM without, paired, z4q8; q4_1_x8's 0.99-1.04x, SmolLM2 Q4_1 decode faster in 4 of
// 5 rounds, z4q41; docs/log/BENCHMARKS-kernels-3.md). q8_0_x8's GEMV reads it, and q4_1_x8's default decode form
// (kvt_kernels_decode_form: 34 with, 4 without; the other GEMVs' L1 prefetch is their form's, matmul.h). kvt_kernels_set_prefetch leaves it; the reset restores it.
int kvt_kernels_prefetch_l1(kvt_type t);
// Whether type t's decode GEMV (one token) runs its AVX2 kernel where the AVX-512 ones are dispatched: 1 on AMD Zen 4
// (family 0x19 with AVX-512) for q4_K_x8, with lines 2048 bytes ahead (paired against the AVX-512 GEMV without prefetch
// 1.03-1.09x in 10 of 10 shape sets, 68-100% of the pairs won, z4q4k in docs/log/BENCHMARKS-kernels-5.md; f16_x16 and
// q6_K_r there 0.97-1.01x: not), and on AMD Zen 5 (family 0x1A on with AVX-512) for f16_x16, q4_K_x8 and q6_K_r (q6_K then repacked to q6_K_r there as on AVX2, its
// batches the AVX-512 q6_K panel tile packed from it: kvt_q6kr_gemm_avx512; z5q6), where the 256-bit loop reads DRAM faster (f16: tl-f16 tg32 with
// KVT_ISA=avx2 4 of 4 alternating rounds ahead, medians 16.6 -> 19.1 t/s, token-paired share 85-86% -> 92-102%,
// "f16 decode on Zen 5"; q4_K_x8 with lines 1024 bytes ahead into L1, its distance there: paired 1.01-1.08x, z5dq2;
// docs/log/BENCHMARKS-kernels-5.md), else 0. The same bits: every f16_x16 kernel runs one FMA chain per output
// (f16x16.h); q4_K_x8's GEMVs sum the exact integer totals of a super-block into the same float chains (kqx8.h), and
// so do the q6_K / q6_K_r kernels of both ISAs (kq_avx512.h, quant_avx2.c).
int kvt_kernels_decode_avx2(kvt_type t);
// Tests and benchmarks: those distances from now on (clamped to 0 .. 65536, a multiple of 64); return the old one.
int64_t kvt_kernels_set_prefetch(int64_t bytes);
int64_t kvt_kernels_set_prefetch_dense(int64_t bytes);
// Tests and benchmarks: the CPU's distances again (all of them, per type too; KVT_PREFETCH as at the first call).
void kvt_kernels_reset_prefetch(void);
// Table of one instruction set; NULL if that ISA is not compiled in, not
// supported by this CPU, or does not cover t. For tests and benchmarks.
const kvt_type_ops *kvt_type_ops_isa(kvt_type t, kvt_isa isa);

// ---- block layouts (facts of the GGUF format; halves stored as f16 bits) ----

typedef struct { uint16_t d; uint8_t qs[KVT_QK / 2]; } kvt_block_q4_0;           // x = d * (q - 8)
typedef struct { uint16_t d, m; uint8_t qs[KVT_QK / 2]; } kvt_block_q4_1;        // x = d * q + m
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[KVT_QK / 2]; } kvt_block_q5_0; // x = d * (q - 16)
typedef struct { uint16_t d; int8_t qs[KVT_QK]; } kvt_block_q8_0;                // x = d * q
typedef struct { uint16_t d, s; int8_t qs[KVT_QK]; } kvt_block_q8_1;             // s = d * sum(q)
// Nibble packing of q4_0/q4_1/q5_0: element j in the low nibble of qs[j], element
// j + 16 in the high nibble; q5_0's fifth bit of element j is bit j of qh (little-endian 32 bits).

// K-quants: 8 sub-blocks of 32 with 6-bit scale sc and min m (packed in
// scales[12]), x = d * sc * q - dmin * m. qs[32*c + l] holds element 64c + l in
// its low nibble and 64c + 32 + l in its high nibble; q5_K adds bit 2c of
// qh[l] (element 64c + l) and bit 2c+1 (element 64c + 32 + l) as value 16.
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[KVT_QK_K / 2];
} kvt_block_q4_K;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[KVT_QK_K / 8];
    uint8_t qs[KVT_QK_K / 2];
} kvt_block_q5_K;
// q6_K: 16 sub-blocks of 16 with int8 scales, x = d * scales[g] * (q - 32).
// In each half h (128 elements): element 128h + 32k + l (k=0..3, l=0..31) takes
// low bits from ql[64h + l + 32*(k&1)] (low nibble for k<2, high for k>=2) and
// high bits (qh[32h + l] >> 2k) & 3.
typedef struct {
    uint8_t ql[KVT_QK_K / 2];
    uint8_t qh[KVT_QK_K / 4];
    int8_t scales[KVT_QK_K / 16];
    uint16_t d;
} kvt_block_q6_K;
// q8_K: activations for K-quant dot products; bsums[g] = sum of qs[16g..16g+16).
typedef struct {
    float d;
    int8_t qs[KVT_QK_K];
    int16_t bsums[KVT_QK_K / 16];
} kvt_block_q8_K;

KVT_STATIC_ASSERT(sizeof(kvt_block_q4_0) == 18, "q4_0 layout");
KVT_STATIC_ASSERT(sizeof(kvt_block_q4_1) == 20, "q4_1 layout");
KVT_STATIC_ASSERT(sizeof(kvt_block_q5_0) == 22, "q5_0 layout");
KVT_STATIC_ASSERT(sizeof(kvt_block_q8_0) == 34, "q8_0 layout");
KVT_STATIC_ASSERT(sizeof(kvt_block_q8_1) == 36, "q8_1 layout");
KVT_STATIC_ASSERT(sizeof(kvt_block_q4_K) == 144, "q4_K layout");
KVT_STATIC_ASSERT(sizeof(kvt_block_q5_K) == 176, "q5_K layout");
KVT_STATIC_ASSERT(sizeof(kvt_block_q6_K) == 210, "q6_K layout");
KVT_STATIC_ASSERT(sizeof(kvt_block_q8_K) == 292, "q8_K layout");

// 6-bit scale and min of sub-block j (0..7) of a q4_K / q5_K super-block.
KVT_HOST_DEVICE static inline void kvt_k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// All eight at once, four bytes at a time: sc[0..8) and m[0..8) from the 12 packed bytes q.
static inline void kvt_k_scales_unpack(const uint8_t *q, uint8_t sc[8], uint8_t m[8]) {
    uint32_t w[3];
    memcpy(w, q, 12);
    const uint32_t lo6 = 0x3f3f3f3fu, hi2 = 0x03030303u, lo4 = 0x0f0f0f0fu;
    const uint32_t s03 = w[0] & lo6, m03 = w[1] & lo6;
    const uint32_t s47 = (w[2] & lo4) | (((w[0] >> 6) & hi2) << 4);
    const uint32_t m47 = ((w[2] >> 4) & lo4) | (((w[1] >> 6) & hi2) << 4);
    memcpy(sc, &s03, 4), memcpy(sc + 4, &s47, 4);
    memcpy(m, &m03, 4), memcpy(m + 4, &m47, 4);
}

// ---- load-time repacking (a weight matrix stored again in a layout its kernels read linearly) ----
// q4_K_x8: rows in groups of 8 (the matrix has rows % 8 == 0); group g (rows 8g .. 8g + 7) takes the bytes
// of those 8 rows (8 * kvt_row_size(q4_K, n)), so row offsets of groups are the q4_K ones. Per super-block
// b a group holds KVT_X8_SB bytes at b * KVT_X8_SB:
//   [0, 1024)    qs: chunk (c, p) (c, p < 4) at 64 * (4c + p): row r's q4_K qs[32c + 8p .. 32c + 8p + 8) at
//                8r (low nibbles: elements 64c + 8p + i of sub-block 2c; high: 64c + 32 + 8p + i, sub-block 2c + 1)
//   [1024, 1088) L: byte 8r + j = (sc_j & 15) | (m_j & 15) << 4 of row r (sc, m: kvt_k_scale_min)
//   [1088, 1120) H: entry e = 8r + j is h_e = (sc_j >> 4) | (m_j >> 4) << 2; byte i = h_i | h_(i+32) << 4
//   [1120, 1136) d of rows 0..7 (f16), [1136, 1152) dmin of rows 0..7 (f16)
// The kernels compute every output in the q4_K order of matmul.h (only the exact integer totals per
// super-block), so a repacked matrix gives the bits of the original on every ISA.
#define KVT_X8_SB (8 * 144)
// Row r's 6-bit scales and mins of the q4_K_x8 super-block at in (L and H above).
static inline void kvt_q4kx8_scales(const uint8_t *in, int r, uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 8; j++) {
        const int e = 8 * r + j, L = in[1024 + e], h = (e < 32 ? in[1088 + e] : in[1088 + e - 32] >> 4) & 15;
        sc[j] = (uint8_t)((L & 15) | (h & 3) << 4);
        m[j] = (uint8_t)((L >> 4) | (h >> 2) << 4);
    }
}
// q5_K_x8: q5_K rows in groups of 8 the same way (group g at the q5_K offset of row 8g); per super-block b a group
// holds KVT_Q5X8_SB bytes at b * KVT_Q5X8_SB: [0, 1152) q4_K_x8's layout above of the rows' d, dmin, scales and qs,
// then [1152, 1408) qh: chunk p (p < 4) at 1152 + 64p: row r's q5_K qh[8p .. 8p + 8) at 8r, so a 32-byte half of
// chunk p holds the fifth bits (bit 2c: low nibbles of slice c, bit 2c + 1: high) of the qs in the halves of chunks
// (c, p). Its decode GEMV (kqx8.h, AVX2, on AVX-512 machines too) keeps the q5_K order of matmul.h (the exact
// integer totals and the same chains): the bits of the q5_K matrix on every ISA.
#define KVT_Q5X8_SB (8 * 176)
// q4_1_x8: q4_1 rows in groups of 8 the same way (group g at the q4_1 offset of row 8g); per block b of 32
// elements a group holds KVT_Q41X8_B bytes at b * KVT_Q41X8_B:
//   [0, 128)   qs: dword 8Q + r (Q < 4) = row r's q4_1 qs[4Q .. 4Q + 4) (low nibbles: elements 4Q + i, high:
//              16 + 4Q + i), so one 32-byte load holds quad Q of the 8 rows
//   [128, 144) d of rows 0..7 (f16), [144, 160) m of rows 0..7 (f16)
// Its kernels keep the q4_1 order of matmul.h per row (a row's 8 accumulator lanes are lanes of 8 vectors,
// one row per lane): the bits of the q4_1 matrix on every ISA.
#define KVT_Q41X8_B (8 * 20)
// q4_0_x8: q4_0 rows in groups of 8 the same way (group g at the q4_0 offset of row 8g); per block b of 32
// elements a group holds KVT_Q40X8_B bytes at b * KVT_Q40X8_B:
//   [0, 128)   qs: dword 8Q + r (Q < 4) = row r's q4_0 qs[4Q .. 4Q + 4) (low nibbles: elements 4Q + i, high:
//              16 + 4Q + i), q4_1_x8's order
//   [128, 144) d of rows 0..7 (f16)
// q4_0's order (matmul.h) is the scalar reference's on every ISA: per block the exact integer total S of the 32
// products (q - 8) * y, then acc = acc + (float(S) * dx) * dy in one chain in block order; its kernels (q40x8.h) keep
// it with one row per lane, so a q4_0 matrix, repacked or not, gives the same bits on every ISA and in every batch.
// Unrepacked q4_0 rows are packed into this layout per strip by matmul.c (kvt_q4_0_x8_pack_rows).
#define KVT_Q40X8_B (8 * 18)
// q5_0_x8: q5_0 rows the same way, a block KVT_Q50X8_B bytes: [0, 144) q4_0_x8's layout of the rows' low nibbles and
// d, then [144, 176) H, the fifth bits in the quads' lanes: byte 4r + k holds in bit Q (Q < 4) the fifth bit of row r's
// element 4Q + k (the low nibble of quad Q's byte k) and in bit 4 + Q that of element 16 + 4Q + k (its high nibble).
// q5_0's order is q4_0's with the offset 16 (matmul.h), the scalar reference's on every ISA.
#define KVT_Q50X8_B (8 * 22)
// dst = the nr q4_0 (q5_0) rows at src (stride wrs bytes, n columns) as ceil(nr / 8) q4_0_x8 (q5_0_x8) groups, the
// rows past nr of the last group zero (d = 0: their outputs are 0). dst holds ceil(nr / 8) * 8 row sizes.
void kvt_q4_0_x8_pack_rows(const void *src, size_t wrs, int64_t nr, int64_t n, void *dst);
void kvt_q5_0_x8_pack_rows(const void *src, size_t wrs, int64_t nr, int64_t n, void *dst);
// q8_0_x8: q8_0 rows in groups of 8 the same way (group g at the q8_0 offset of row 8g); per block b of 32
// elements a group holds KVT_Q80X8_B bytes at b * KVT_Q80X8_B:
//   [0, 256)   qs: row r's q8_0 qs[8P .. 8P + 8) at 64P + 8r (P < 4), so one 64-byte load holds chunk P of the 8
//              rows (a 32-byte load: of rows 0-3 or 4-7), each row's two quads 2P, 2P + 1 side by side
//   [256, 272) d of rows 0..7 (f16)
// Its kernels (q80x8.h) keep each ISA's q8_0 order of matmul.h per row, one row per lane (AVX2: the exact integer
// total per block, then the scalar chain; AVX-512: the offset-128 grouped order, every accumulator lane a lane of
// the x8 kernel's): the bits of the q8_0 matrix on every ISA. Its rows can be read back one at a time
// (row_to_float), so a tied token_embd / output matrix is repacked too (model.c) and the embedding lookup reads it.
#define KVT_Q80X8_B (8 * 34)
typedef struct {
    kvt_type to;    // the repacked type
    int row_align;  // the matrix's rows must be a multiple of this
    // dst (rows x n of `to`) = src (rows x n of the source type); no overlap
    void (*pack)(const void *src, void *dst, int64_t rows, int64_t n);
    // dst (rows r0 .. r1 - 1 of the source type, packed) = those rows of the repacked matrix W (any r0 <= r1)
    void (*unpack)(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n);
    // dst[0..n) = row r of the repacked matrix W dequantized, the source type's to_float bits (NULL: none, and
    // then a tied token_embd / output matrix of the source type is not repacked)
    void (*row_to_float)(const void *W, int64_t r, int64_t n, float *dst);
    int col_align; // the matrix's columns must be a multiple of this (0: any; bf16_x16's element pairs: 2)
} kvt_repack_ops;
// The repacking of weights of type t (NULL: none). to_type(from) and from_type(to) below. q6_K's is a plain
// copy (to == q6_K: the same layout, moved into the repacked weights' huge pages; quant.c). q5_K's (q5_K_x8) only
// where the AVX2 kernels run (AVX2 and AVX-512 machines) and kvt_q5kx8_enabled().
const kvt_repack_ops *kvt_type_repack(kvt_type t);
// Whether q5_K matrices are repacked to q5_K_x8 at load: yes unless the environment sets KVT_Q5KX8=0 (read once; for
// paired comparisons in one binary: the same bits either way).
bool kvt_q5kx8_enabled(void);
// The repacking whose result is the repacked type `to` (NULL: none), whatever ISA runs now (a matrix repacked
// under one ISA stays readable under every other).
const kvt_repack_ops *kvt_type_repack_into(kvt_type to);
// The source type of a repacked type (t itself for any other type).
kvt_type kvt_type_repacked_from(kvt_type t);
// q6_K_r: q6_K with each 210-byte block's 6-bit values rearranged (scales and d where q6_K has them), the
// repacking of q6_K when the AVX2 kernels are the dispatched ones (kvt_kernels_isa() == avx2; other ISAs keep
// q6_K's copy), so that the AVX2 decode builds its 6-bit vectors and applies its scales in fewer operations
// (quant_avx2.c). With q(e) the 6-bit value (0..63) of element e and, for pair j < 4 and byte i < 32,
//   a(j, i) = 16 g + (i & 7), g = 8 (i >> 4) + 2 j + ((i >> 3) & 1), and b(j, i) = a(j, i) + 8
// (lane i >> 4 of a 32-byte vector: groups of 16 from the super-block's first (lane 0) or second (lane 1) half;
// the A and B vectors of a pair hold the same group at every byte, so their int16 pair sums can be added before
// one madd with the scales):
//   ql[32 j + i]         = q(a(j, i)) | (q(b(j, i)) >> 4) << 6
//   qh[32 (j >> 1) + i]  = low 4 bits of q(b(j, i)) in the low (j even) or high (j odd) nibble
// The decode reads the q8_K activation row in the same order (kvt_q6r_prep: qs[64 j + i] = element a(j, i),
// qs[64 j + 32 + i] = element b(j, i), bsums negated); every output keeps the q6_K order of matmul.h (the exact
// integer total per super-block, then the scalar chain): the bits of the q6_K matrix on every ISA.
// p = the q8_K row x (n elements) prepared for the q6_K_r decode (same size as x).
void kvt_q6r_prep(int64_t n, const void *x, void *p);
// dst[0..n) = row r of the matrix W of type t (rows of n elements; a repacked type too), dequantized: the
// embedding lookup. False (dst untouched) if t has no to_float or its repacking no row_to_float.
bool kvt_matrix_row_to_float(kvt_type t, const void *W, int64_t r, int64_t n, float *dst);

// ---- internal: per-ISA tables, provided by quant_avx2.c / quant_avx512.c ----
const kvt_type_ops *kvt_type_ops_avx2_table(kvt_type t);
const kvt_type_ops *kvt_type_ops_avx512_table(kvt_type t);
void kvt_f16_to_f32_row_avx2(const uint16_t *src, float *dst, int64_t n);
void kvt_f32_to_f16_row_avx2(const float *src, uint16_t *dst, int64_t n);
// y[i] += s * x[i], x f16 (f16 != 0) or f32; for kvt_vec_mad
void kvt_vec_mad_avx2(int f16, float *y, const void *x, float s, int64_t n);
// for kvt_vec_mad_rows
void kvt_vec_mad_rows_avx2(int f16, float *y, const void *x, int64_t stride, const float *s, int64_t n_rows, int64_t n);
void kvt_vec_mad_rows_avx512(int f16, float *y, const void *x, int64_t stride, const float *s, int64_t n_rows, int64_t n);
// for kvt_vec_expf_sub (vec.h)
void kvt_vec_expf_sub_avx2(const float *x, float m, float *y, int64_t n);
void kvt_vec_expf_sub_avx512(const float *x, float m, float *y, int64_t n);
// for kvt_attn_merge_f16 (vec.h): positions are taken KVT_MERGE_ROWS at a time; kvt_attn_merge_factors gives
// their ms and w factors and updates *m, *l
#define KVT_MERGE_ROWS 64
// Inline so that each kernel file compiles fmaf as its ISA allows (one fused operation either way: the same bits;
// a libm call from the baseline build).
static inline void kvt_attn_merge_factors(const float *s, int64_t n, float *m, float *l, float *ms, float *w) {
    float M = *m, L = *l;
    for (int64_t r = 0; r < n; r++) {
        if (s[r] > M) {
            ms[r] = expf(M - s[r]);
            w[r] = 1.0f;
            M = s[r];
        } else {
            ms[r] = 1.0f;
            w[r] = expf(s[r] - M);
        }
        L = fmaf(L, ms[r], w[r]);
    }
    *m = M;
    *l = L;
}
// for kvt_attn_kq_f16 (vec.h): the SIMD forms read the queries as f32 rows (qf; q16 unused)
void kvt_attn_kq_f16_avx2(int64_t n, const void *k, int64_t k_stride, int64_t np, const uint16_t *q16, const float *qf,
                          int64_t q_stride, int nq, float scale, float *s, int64_t s_stride);
void kvt_attn_kq_f16_avx512(int64_t n, const void *k, int64_t k_stride, int64_t np, const uint16_t *q16, const float *qf,
                            int64_t q_stride, int nq, float scale, float *s, int64_t s_stride);
// for kvt_attn_kq_kf32 (vec.h): 1 when done, 0 where n is not a multiple of 32 (AVX2) or 64 (AVX-512): nothing written
int kvt_attn_kq_kf32_avx2(int64_t n, const float *kf, int64_t kf_stride, int64_t np, const float *qf, int64_t q_stride,
                          int nq, float scale, float *s, int64_t s_stride);
int kvt_attn_kq_kf32_avx512(int64_t n, const float *kf, int64_t kf_stride, int64_t np, const float *qf, int64_t q_stride,
                            int nq, float scale, float *s, int64_t s_stride);
// for kvt_vec_scale_f32 and kvt_vec_fold_f32 (vec.h)
void kvt_vec_scale_f32_avx2(float *y, float s, int64_t n);
void kvt_vec_fold_f32_avx2(float *y, float a, const float *x, float b, int64_t n);
void kvt_vec_scale_f32_avx512(float *y, float s, int64_t n);
void kvt_vec_fold_f32_avx512(float *y, float a, const float *x, float b, int64_t n);
// for kvt_vec_sum_rows_f32 (vec.h)
void kvt_vec_sum_rows_f32_avx2(float *l, const float *s, int64_t s_stride, int nh, int64_t n);
// for kvt_vec_max_f32 (vec.h)
float kvt_vec_max_f32_avx2(const float *x, int64_t n, float m);
float kvt_vec_max_f32_avx512(const float *x, int64_t n, float m);
void kvt_attn_merge_f16_avx2(int nh, const float *s, int64_t s_stride, int64_t n, const void *v, int64_t stride,
                             float *m, float *l, float *o, int64_t o_stride, int64_t hdv);
int64_t kvt_attn_merge_f16_cols_avx512(int64_t hdv); // for kvt_attn_merge_f16_cols (vec.h)
void kvt_attn_merge_f16_avx512(int nh, const float *s, int64_t s_stride, int64_t n, const void *v, int64_t stride,
                               float *m, float *l, float *o, int64_t o_stride, int64_t hdv);

#endif
