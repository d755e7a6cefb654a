// bf16x16.h - bf16 weights repacked at load into 16-row panels of element pairs (KVT_TYPE_BF16_X16), and their
// kernels.
//
// Layout: the matrix's rows (a multiple of 16, n even) in panels of 16; panel p (rows 16p .. 16p + 15) takes the bytes
// of those 16 rows (16 * n * 2, so row offsets of panels are the bf16 ones). Pair j (elements 2j and 2j + 1) of row
// 16p + i is the dword i of the panel's 64-byte line j: uint16 index 32j + 2i holds element 2j, 32j + 2i + 1 element
// 2j + 1. One line per pair, 16 rows side by side: the operand of one VDPBF16PS.
//
// Numerics (one order on every ISA, for a row alone or in any batch): with w and x the bf16 values as f32 (exact), an
// output is
//   acc = +0; for j = 0 .. n/2 - 1 ascending: acc = F(w[2j+1] * x[2j+1] + acc); acc = F(w[2j] * x[2j] + acc); Y = acc
// where F(.) is one rounding to nearest even of the exact value, then a result of magnitude below 2^-126 (FLT_MIN)
// becomes a zero of its sign (flush to zero, tininess after rounding), and an input of magnitude below 2^-126 counts
// as a zero of its sign (denormals are zero). That is VDPBF16PS's definition (Intel SDM: "FP32 FMA with daz in, ftz
// out and RNE rounding", the odd element first), which AVX512_BF16 CPUs run in one instruction per 32 products, and
// what an FMA instruction computes with MXCSR's FTZ and DAZ bits set: the scalar reference and the AVX2 / AVX-512F
// kernels run their FMAs that way (MXCSR set on entry, restored on return). On the AMD EPYC Zen 4 the two agree on
// 64 million lanes aimed at the flush boundary (2026-12-04); a CPU where they would not is found at first use
// (kvt_bf16x16_dp_ok: a boundary test set) and takes the FMA kernels. An odd n (never repacked) counts as n + 1 with
// a zero element n in the weights and the activations.
// The activations are bf16 rows (bf16's dot type, rounded to nearest even, as llama.cpp's). No split of k, no
// horizontal sum: every kernel gives the same bits, whatever the ISA, the batch, the token's place in it and the
// call's row range.
// Unrepacked bf16 matrices (KVT_REPACK=0, memory short at load, rows not a multiple of 16, a matrix given to
// kvt_matmul_rows as bf16) take the same order: matmul.c packs strips of their rows into panels per call
// (kvt_bf16x16_pack_rows). KVT_BF16X16=0 restores the older bf16 order (matmul.h: lane-split f32 sums).
#ifndef KVT_BF16X16_H
#define KVT_BF16X16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Y[t * ldy + r] for r in [r0, r1) (any range; a panel cut by it is computed whole into scratch and only its rows
// copied out) and t < n_tok, from the bf16_x16 matrix W (n columns, n even: an odd n writes nothing) and n_tok bf16
// activation rows X (stride n), with kvt_bf16x16_scratch(n, n_tok) bytes of 64-aligned scratch (the reference needs
// none).
void kvt_bf16x16_mm_ref(int64_t n, const void *W, int64_t r0, int64_t r1, const void *X, int64_t n_tok, float *Y,
                        int64_t ldy);
void kvt_bf16x16_mm_avx2(int64_t n, const void *W, int64_t r0, int64_t r1, const void *X, int64_t n_tok, float *Y,
                         int64_t ldy, void *scratch);
// AVX-512: VDPBF16PS where kvt_bf16x16_dp_ok(), else AVX-512F FMAs (the same bits).
void kvt_bf16x16_mm_avx512(int64_t n, const void *W, int64_t r0, int64_t r1, const void *X, int64_t n_tok, float *Y,
                           int64_t ldy, void *scratch);
int64_t kvt_bf16x16_scratch(int64_t n, int64_t n_tok);
// The same order on plain bf16 rows (row r at W + r * wrs bytes, any n): Y[t * ldy + r], r in [r0, r1).
void kvt_bf16x16_rows_ref(int64_t n, const void *W, size_t wrs, int64_t r0, int64_t r1, const void *X, int64_t n_tok,
                          float *Y, int64_t ldy);
// Whether the AVX-512 kernels use VDPBF16PS: the CPU has AVX512_BF16, its results equal the FMA order above on a
// boundary test set (run once), and the environment does not set KVT_BF16DP=0. Tests may force it off (returns the
// old value; on is honoured only where the CPU passes).
bool kvt_bf16x16_dp_ok(void);
bool kvt_bf16x16_set_dp(bool on);

// The repacking (quant.c's table): pack (rows a multiple of 16, n even), unpack rows [r0, r1) back to bf16 rows, row r
// as f32.
void kvt_bf16x16_pack(const void *src, void *dst, int64_t rows, int64_t n);
// dst = rows [0, nr) of the row-major bf16 matrix src (row stride src_rs bytes, n columns, n even) in the bf16_x16
// layout, the last panel's missing rows zero: ceil(nr / 16) * 16 * n * 2 bytes.
void kvt_bf16x16_pack_rows(const void *src, size_t src_rs, int64_t nr, int64_t n, void *dst);
void kvt_bf16x16_unpack(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n);
void kvt_bf16x16_row_to_float(const void *W, int64_t r, int64_t n, float *dst);
// Whether bf16 matrices take this order (KVT_BF16X16=0: not; read once). Tests may set it (returns the old value).
int kvt_bf16x16_enabled(void);
int kvt_bf16x16_set_enabled(int on);

#endif
