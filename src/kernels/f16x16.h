// f16x16.h - f16 weights repacked at load into 16-row panels (KVT_TYPE_F16_X16), and their kernels.
//
// Layout: the matrix's rows (a multiple of 16) in panels of 16; panel p (rows 16p .. 16p + 15) takes the bytes of
// those 16 rows (16 * n * 2, so row offsets of panels are the f16 ones), element k of row 16p + i at uint16 index
// 16k + i of the panel: for each k the 16 rows' values side by side (32 bytes), k ascending.
//
// Numerics (one order on every ISA, for a row alone or in any batch): an output is
//   acc = 0; for k = 0 .. n - 1 ascending: acc = fmaf(w[r][k], x[k], acc); Y = acc
// with w and x the f16 values as f32 (exact) and fmaf one rounding (an FMA instruction, or libm's fmaf in the scalar
// build). No split of k, no horizontal sum: every kernel (the scalar reference, the AVX2 and AVX-512 GEMVs and GEMM
// tiles) gives the same bits, whatever the ISA, the batch, the token's position in it and the call's row range.
// The activations are f16 rows (the f16 weights' dot type, as for unrepacked f16: llama.cpp's f16 x f16 too).
// The GEMV keeps one accumulator per 16 rows (a zmm, two ymm) and runs several panels at once so that the FMA
// chains overlap; the GEMM tile (AVX-512: 2 panels x 12 tokens, 24 zmm accumulators; AVX2: 24 rows (3 ymm, half
// of three panels) x 4 tokens, 12 ymm, a panel left over 1 panel x 4 tokens) reads a k block's weights converted to
// f32 once (AVX-512: converts the f16 weights in each tile, f16x16_simd.h FX_WF32) and broadcasts each token's x[k]
// from an f32 copy of the activations packed per k block (L1); a k
// block's partial sums go through Y (an f32 store and reload: the chain is unchanged).
// Unrepacked f16 matrices (KVT_REPACK=0, memory short at load, rows not a multiple of 16, a matrix given to
// kvt_matmul_rows as f16) take the same order: matmul.c packs strips of their rows into panels in a per-thread buffer
// (kvt_f16x16_pack_rows) and runs these kernels on them, so an f16 matrix gives the same bits whether or not it was
// repacked. Only KVT_F16X16=0 restores the f16 order of matmul.h (lane-split accumulators, a horizontal sum).
#ifndef KVT_F16X16_H
#define KVT_F16X16_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

// Y[t * ldy + r] for r in [r0, r1) (any range; a panel cut by it is computed whole into scratch and only its rows
// copied out) and t < n_tok, from the f16_x16 matrix W (n columns) and n_tok f16 activation rows X (stride n), with
// kvt_f16x16_scratch_ISA(n, n_tok) bytes of 64-aligned scratch (the reference needs none).
void kvt_f16x16_mm_ref(int64_t n, const void *W, int64_t r0, int64_t r1, const void *X, int64_t n_tok, float *Y,
                       int64_t ldy);
void kvt_f16x16_mm_avx2(int64_t n, const void *W, int64_t r0, int64_t r1, const void *X, int64_t n_tok, float *Y,
                        int64_t ldy, void *scratch);
void kvt_f16x16_mm_avx512(int64_t n, const void *W, int64_t r0, int64_t r1, const void *X, int64_t n_tok, float *Y,
                          int64_t ldy, void *scratch);
int64_t kvt_f16x16_scratch_avx2(int64_t n, int64_t n_tok);
int64_t kvt_f16x16_scratch_avx512(int64_t n, int64_t n_tok);
// Batches of 1 .. 8 tokens (AVX2: 6) run the GEMV (each panel's weights converted once per k for the batch's tokens, several
// panels in flight); larger ones the GEMM tile.
// k elements per block of the GEMM (the packed f32 activations of a token tile: KC * tile * 4 bytes, in L1)
#ifndef KVT_F16X16_KC
#define KVT_F16X16_KC 256
#endif

// The repacking (quant.c's table): pack (rows a multiple of 16), unpack rows [r0, r1) back to f16 rows, row r as f32.
void kvt_f16x16_pack(const void *src, void *dst, int64_t rows, int64_t n);
// dst = rows [0, nr) of the row-major f16 matrix src (row stride src_rs bytes, n columns) in the f16_x16 layout,
// the last panel's missing rows zero: ceil(nr / 16) * 16 * n * 2 bytes.
void kvt_f16x16_pack_rows(const void *src, size_t src_rs, int64_t nr, int64_t n, void *dst);
void kvt_f16x16_unpack(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n);
void kvt_f16x16_row_to_float(const void *W, int64_t r, int64_t n, float *dst);
// Whether f16 matrices are repacked (KVT_F16X16=0: not; read once). Tests may set it (returns the old value).
int kvt_f16x16_enabled(void);
int kvt_f16x16_set_enabled(int on);

#endif
