// matmul.h - the weight x activation product at the heart of every layer.
//
// Batch invariance (issue 11 section 6): on one ISA, an output Y[t, r] has the same bits whatever
// n_tok, the position of token t in the batch, and the row range [r0, r1) of the call: every kernel
// path (GEMV, the rows kernel for 2..4 tokens, any GEMM tile) sums one row the way the single-token
// rows kernel does. Threads split the work over output rows only, never over K. The canonical
// per-row order of each type, per ISA (sums in f32, fp-contract off: a*b+c is a mul then an add
// unless written as an FMA):
//  scalar (quant.c vec_dot): the reference dot of each type, block by block in k order.
//  avx2 (8 lanes; matmul_avx2.c rows kernels, else quant_avx2.c vec_dot):
//   f32/f16/bf16 (weights and activations as f32): one accumulator a = 8-lane zero; for each 8-wide
//     slice k0 (k0 + 8 <= n, ascending): a = fma(w[k0..+8], y[k0..+8], a) (llama.cpp's float tiles keep
//     one accumulator per output too); s = hsum(a), hsum(v) = ((v0+v4) + (v2+v6)) + ((v1+v5) + (v3+v7));
//     then for the remaining k ascending: s = s + w[k]*y[k] (rounded product, then sum). (Until
//     2026-11-29: two accumulators, even and odd 8-wide slices, s = hsum(a0 + a1).)
//   q4_1 (x q8_1 blocks of 32; llama.cpp's own order, ggml_vec_dot_q4_1_q8_1 on x86, on every ISA): one
//     8-lane accumulator, per block in order: acc = fma(broadcast(dx * dy), float(p), acc) with p the 8 int32
//     lanes (lane i: the exact integer dot of the block's elements 4i..4i+3), and the min terms in a scalar
//     chain ms = fma(m, s, ms) (s the q8_1 block's sum term); Y = hsum(acc) + ms.
//   q8_0 (x q8_0 blocks of 32): per block the exact int32 total S of its 32 products (|S| < 2^20), then
//     acc = acc + (float(S) * dx) * dy in one scalar chain in block order; Y = acc (the scalar order).
//     (Only totals: so the 8-row AVX2 tile, rows in the lanes, sums each row's block in any integer order.)
//   q4_0 and q5_0 (x q8_0 blocks of 32), on every ISA (scalar, avx2, avx512: one order, so one set of bits): the
//     scalar reference's, per block in order the exact int32 total S of the 32 products (q - o) * y (o = 8, q5_0 16),
//     then acc = acc + (float(S) * dx) * dy, one chain; Y = acc. Their kernels (q40x8.h) take 8 rows in the lanes of
//     q4_0_x8 / q5_0_x8 groups (repacked at load; rows not repacked are packed into groups per call: matmul.c),
//     decode and every batch alike. (Until 2026-12-04 both had the per-ISA lane order below, with o = 8 and 16.)
//   q8_0 on avx512 (weights offset by 128, o = 128): blocks in groups of 8 (g = 0, 8, ...): per group
//     D[j] = dx[g+j] * dy[g+j] (f32 product), and cacc = fma(cx[g..g+8], c[g..g+8],
//     cacc) with c = (-o * dy) * (float)sum(y), cx = dx;
//     per block j of the group in order: p = 8 int32 lanes (lane i: the exact integer dot of
//     the block's elements 4i..4i+3 of the stored unsigned value (value + o), the -o is in c),
//     acc[j & 1] = fma(float(p), broadcast(D[j]), acc[j & 1]); blocks past the
//     last full group: tail = tail + (dx * dy) * hsum(float(p)), then tail = tail + cx * c;
//     Y = (hsum(acc0 + acc1) + hsum(cacc)) + tail (16-lane pairs on avx512: x32_row).
//   q4_K/q5_K/q6_K (x q8_K, super-blocks of 256): per super-block the exact int32 total S of the
//     scaled products (|S| < 2^28), acc = fma(float(S), d * dy, acc) in a scalar chain; q4_K/q5_K also
//     macc = macc + (dmin * dy) * (float)(exact integer min dot), a scalar chain; Y = acc - macc (q6_K:
//     acc). (Only totals: so the 8-row q4_K/q6_K tiles, rows in the lanes, may sum a sub-block's
//     products in int16 before its scale.) The same order, so the same bits, on avx512: q5_K's GEMV through
//     this body (its batches from KQ5_GEMM_MIN = 5 tokens the q4_K panel tile of kq_avx512.h on q5_K's 5-bit values),
//     q4_K/q6_K through kq_avx512.h (the GEMV's 512-bit integer partial sums reduced to the
//     total per super-block; the 16-row VPDPBUSD panel tile from 2 tokens on, one row per lane).
//     q4_K_x8 (q4_K repacked at load, quant.h): the same totals and chains, 8 rows in the lanes (kqx8.h),
//     so a repacked matrix gives the q4_K bits; its batches read the groups (AVX2: the 8-row q4_K tile on
//     side data made from them; AVX-512: the GEMV per token up to 8 tokens, then the q4_K panel tile packed from
//     them), only the rows of a group cut by the call's row range run the q4_K paths on unpacked rows.
//     q5_K_x8 (q5_K repacked at load where the AVX2 kernels run, quant.h): the same totals and chains, 8 rows in the
//     lanes (kqx8.h), so a repacked matrix gives the q5_K bits on both ISAs: decode the AVX2 GEMV (on AVX-512 machines
//     too), batches AVX2 the GEMV token by token up to KVT_Q5KX8_TOK_MAX tokens, AVX-512 2-4 tokens the GEMV's
//     arithmetic per token (4 tokens a pass) and from KVT_Q5KX8_GEMM_MIN the q4_K panel tile packed from the groups,
//     larger AVX2 batches the 8-row q4_K tile on q5_K's values; the rows of a group cut by the range the q5_K paths on
//     unpacked rows.
//     q4_0_x8, q5_0_x8 (q4_0, q5_0 repacked, as q4_K_x8): their order above, one row per lane (q40x8.h).
//     q4_1_x8 (q4_1 repacked, as q4_K_x8): the q4_1 order above, a row's 8 accumulator lanes in lane r of 8 vectors
//     (q41x8.h), so a repacked matrix gives the q4_1 bits; batches too (the same GEMV token by token).
//     q8_0_x8 (q8_0 repacked, as q4_K_x8): each ISA's q8_0 order above (avx2: the totals and the scalar chain;
//     avx512: x32_row's 32 chains per row), rows in the lanes (q80x8.h), so a repacked matrix gives the q8_0 bits;
//     batches: the same GEMV token by token (AVX2: up to KVT_Q80X8_TOK_MAX tokens, the q8_0 paths on unpacked
//     rows beyond).
//   f16_x16 (f16 repacked at load into 16-row panels, f16x16.h; KVT_F16X16=0: not): its own order, the same on every
//     ISA (scalar too): per output one FMA chain over k ascending, acc = fmaf(w[k], x[k], acc) from 0, no split and no
//     horizontal sum; the GEMV (1-8 tokens, AVX2 1-6) and the GEMM tile give the same bits, so a row's result depends
//     on neither the ISA nor the batch nor the row range. Unrepacked f16 (KVT_REPACK=0, memory short, rows not a
//     multiple of 16) takes the same order (rows packed into panels on the fly): the same bits as the repacked
//     matrix. With KVT_F16X16=0 f16 keeps the f16 order above (lane-split, a horizontal sum).
//   bf16_x16 (bf16 repacked at load into 16-row panels of element pairs, bf16x16.h; KVT_BF16X16=0: not): its own
//     order, the same on every ISA (scalar too): per output one chain over the pairs ascending, the odd element's
//     FMA then the even one's, each rounded to nearest with denormal inputs as zero and tiny results flushed
//     (VDPBF16PS's definition, run by AVX512_BF16 CPUs in one instruction, and by FMAs under MXCSR's FTZ | DAZ
//     elsewhere); bf16 activations (rounded to nearest even). Unrepacked bf16 (KVT_REPACK=0, rows not a multiple
//     of 16) is packed into panels per call, an odd n runs the scalar chain with a zero element n: the same bits.
//     With KVT_BF16X16=0 bf16 keeps the float order above (lane-split, a horizontal sum).
//   q5_1, q2_K, q3_K, iq4_nl, iq4_xs (quant_lowbit_avx2.c, both ISAs): llama.cpp's AVX2 order of each (its 8 lanes of
//     exact integer sums a block, its FMA chains, its horizontal sum); batches of q2_K, q3_K, iq4_nl, iq4_xs from
//     LB_*_GEMM_MIN tokens on through gemm_lowbit.h's tiles, in that order. But iq4_xs on avx512: the q6_K order
//     above (per super-block the exact total S, acc = fma(float(S), d * dy, acc), the scalar reference's too), its
//     batches from KQXS_GEMM_MIN tokens on the 16-row panel tile of kq_avx512.h (codebook value + 128 in the panel,
//     the offset's term from the q8_K block sums).
//  avx512: the same sources with 16-lane vectors (f32/f16/bf16: one 16-lane accumulator over 16-wide
//   slices, s = _mm512_reduce_add_ps(a); q4_1: the 8-lane order above; KVT_SIMD_AVX512 paths of matmul_avx2.c and
//   quant_avx2.c); the GEMM tiles of gemm_avx512.c follow the float rows kernel (the low-bit ones their GEMV's
//   order, above); the old AVX-512 f16/q8_0 panel tiles sum in another order and are off unless
//   -DKVT_MM_AVX512_GEMM=1.
// A new tile (e.g. AVX2 GEMM) must reproduce these sums exactly (same lanes, same FMA chains, same
// horizontal sum) to be used for batches.
#ifndef KVT_MATMUL_H
#define KVT_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "quant.h"

// Y[t*ldy + r] = dot(W row r, X row t) for r in [r0, r1), t in [0, n_tok).
//   W : [n_rows, n] of type wt, rows packed (stride kvt_row_size(wt, n) bytes)
//   Xq: [n_tok, n] of type kvt_type_ops_get(wt)->vec_dot_type, row stride
//       kvt_row_size(vdt, n) bytes (activations quantized by its from_float)
//   Y : f32, token-major, ldy >= r1
// n must be a multiple of wt's block size. Reads W rows [r0, r1) only and
// writes only Y[t*ldy + r] for those rows, so threads may split rows freely.
// Thread-safe; may use up to ~64 KiB of stack (larger scratch is malloc'ed).
// If wt is not computable the outputs are set to NaN (no abort).
void kvt_matmul_rows(kvt_type wt, int64_t n, const void *W, int64_t r0, int64_t r1, const void *Xq,
                     int64_t n_tok, float *Y, int64_t ldy);

// Same with the kernels of one instruction set (tests, benchmarks); falls back
// to scalar when isa is not available on this CPU.
void kvt_matmul_rows_isa(kvt_isa isa, kvt_type wt, int64_t n, const void *W, int64_t r0, int64_t r1,
                         const void *Xq, int64_t n_tok, float *Y, int64_t ldy);

// Study hook (kq_decode_bench -A/-B, the kernel tests): the form of type t's decode GEMV (one token), 0 = the default
// form. Every form gives the same bits (each row's order of the comment above); the kernel reads it once per call.
// Forms: q8_0_x8 (q80x8.h; default: Q80X8_NS = 4 streams with prefetch, 1 without): the groups of a call read as v % 10
// streams at once (1, 2, 4), block by block; AVX-512 v >= 10: turns of 4 blocks; AVX2 v / 100 = 1: without the L1
// prefetch (the default where kvt_kernels_prefetch_l1 says so: AMD Zen 3), 2: with it (the default elsewhere); f32/f16/bf16 (both ISAs: the float
// rows kernel of matmul_avx2.c): v rows at once (1, 2, 4: adjacent rows, the next rows' lines prefetched) or v % 10
// streams (12, 14: rows h apart in a strip of matmul.c, each row's next row prefetched; 22, 24: the same over the
// call's whole row range, not per strip); q4_1_x8 (q41x8.h; default 4 streams with prefetch): v % 10 streams (1, 2, 4),
// AVX-512 21, 22, 24 in 512-bit vectors, 11, 12, 14 the same with the older, longer block (a shift per nibble pair),
// 31, 32, 34 (the default) 21, 22, 24 and their 256-bit loop with lines 1024 bytes ahead also prefetched into L1 (the
// AVX2 build's loop: lines into L2 at half the CPU's distance; 35 there: the full distance, the form before k14);
// q4_K_x8 (kqx8.h; default AVX-512 4 streams, AVX2 two streams with the activation pointer laundered per super-block,
// with prefetch into L2 and L1, or L1 only at distances up to KVT_X8_PF_NEAR: x8_sb_z): 1, 2, 4 streams, 5 / 8
// (AVX2 / AVX-512) the forms before k11k, 6 / 9 k11k's without the L1 prefetch, AVX2 7 the pairs before k4r, 10 the
// default before z4k (x8_sb_sp), 9 that in 4 streams, 8 that without prefetch; 11, 12, 13 x8_sb_z into L2 only, L2
// and L1, L1 only; 14 the default in 4 streams;
// q6_K (kq_avx512.h, quant_avx2.c; default AVX-512 4 streams with prefetch into L2 and L1, AVX2 pairs): v % 10
// streams (1, 2, 4; AVX2 only 4, else its pairs; AVX-512 8: the default without the L1 prefetch), per strip, or
// (22, 24) over the call's whole row range
// (AVX2 24: paired 1.05-1.12x in 2026-11-30's sets, the model not shown faster: docs/log/BENCHMARKS-kernels-2.md,
// dec11g); q6_K_r (quant_avx2.c, AVX2 only; default pairs, the two rows' super-block totals reduced together (q8k),
// with prefetch into L2 and L1 where the CPU's decode prefetches, into L1 only at distances up to KVT_X8_PF_NEAR): 20
// the pairs reduced row by row (the default before q8k), and on that loop 8 the q6_K rows' one prefetch into L1
// instead, 10 no prefetch, 11 / 12 / 13 into L2 only / L2 and L1 / L1 only at any distance; 24 four rows reduced
// together; f16_x16 (f16x16_simd.h; default lines into L2 at the
// CPU's distance and into L1 KVT_X8_PF_NEAR ahead): 1 the single prefetch into L1 at the CPU's distance (before k14);
// q5_K_x8 (kqx8.h, its AVX2 GEMV on both ISAs; default x8_sb_z5h in 2 streams): 1, 4 streams, 5 x8_sb_z with q5 (the
// default before kq5h); q4_0_x8 / q5_0_x8 (q40x8.h; default 4 streams with prefetch, else 1): 1, 2, 4 streams, AVX2 5
// q40x8_groups (the AVX2 default before q40z; the AVX-512 build's loop).
// Any other value: the default. For tests and
// benchmarks only; set it while no kernel runs.
int kvt_kernels_decode_variant(kvt_type t);
int kvt_kernels_set_decode_variant(kvt_type t, int v); // returns the old value
// The form type t's decode GEMV runs: the study form set above, or else the type's default: f16 and bf16 on a CPU whose
// dense decode prefetches (kvt_kernels_prefetch_dense() > 0: Intel, AMD Zen 5) 24, four streams over the call's whole row range (paired
// against the adjacent rows, 2026-11-30: f16 1.06-1.15x, bf16 1.05-1.16x on gate, down and q, both ISAs, 78-100% of the
// pairs won; docs/log/BENCHMARKS-kernels-2.md, "f16 decode in four streams"), q4_1_x8 where kvt_kernels_prefetch() > 0
// (Intel, AMD without AVX-512, AMD Zen 5) 34 (4 streams, L1 prefetch
// too, 512-bit vectors in the AVX-512 build, the 256-bit loop in the AVX2 one; docs/log/BENCHMARKS-kernels-2.md,
// small11, and BENCHMARKS-kernels-3.md, k11q, z3dec), but 4 (4 streams, L2 only, the full distance) where
// kvt_kernels_prefetch_l1(KVT_TYPE_Q4_1_X8) says no (AMD Zen 3: paired 0.99-1.04x from DRAM, 1.05-1.07x from L3, z4q41); every other case (f32, Zen 4) 0 (for the float rows the adjacent-rows
// form: 9 names that one explicitly, for comparisons).
int kvt_kernels_decode_form(kvt_type t);

// ---- internal: SIMD matmul kernels (matmul_avx2.c / matmul_avx512.c) ----
// prep converts one activation row (vec_dot_type, n elements) into the
// kernel's layout of prep_size(n) bytes (multiple of 64; P rows 64-aligned);
// rows computes Y[t*ldy + r] = dot(W row r, P row t), r < nr, t < nt <= nt_max, with rows_scratch(n) bytes
// of 64-aligned scratch (rows_scratch NULL: none; scratch may then be NULL).
typedef struct {
    int64_t (*prep_size)(int64_t n);
    void (*prep)(int64_t n, const void *x, void *p);
    void (*rows)(int64_t n, const void *W, size_t wrs, int64_t nr, const void *P, size_t prs, int nt,
                 float *Y, int64_t ldy, void *scratch);
    // Optional many-token path on the raw activations (vec_dot_type rows),
    // used when n_tok >= gemm_min_tok: Y[t*ldy + r] for r < nr, t < n_tok,
    // with gemm_scratch(n, n_tok) bytes of 64-aligned scratch. prep/rows may
    // be NULL when gemm is set (then fewer tokens go the generic way).
    int gemm_min_tok;
    int64_t (*gemm_scratch)(int64_t n, int64_t n_tok);
    void (*gemm)(int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs, int64_t n_tok,
                 float *Y, int64_t ldy, void *scratch);
    int nt_max; // most activation rows per rows call (0: KVT_DOT_MULTI_MAX)
    int64_t (*rows_scratch)(int64_t n); // bytes of scratch a rows call needs (NULL: none)
} kvt_mm_kernel;
const kvt_mm_kernel *kvt_mm_kernel_avx2(kvt_type wt);
const kvt_mm_kernel *kvt_mm_kernel_avx512(kvt_type wt);

// q4_K_x8 decode (kqx8.h): Y[8g + r] for the 8-row groups g in [g0, g1) of W (n columns) against one q8_K row y.
void kvt_q4kx8_gemv_avx2(int64_t n, const void *W, int64_t g0, int64_t g1, const void *y, float *Y);
void kvt_q4kx8_gemv_avx512(int64_t n, const void *W, int64_t g0, int64_t g1, const void *y, float *Y);
// q5_K_x8 (quant.h) decode: Y[8g + r] for the groups [g0, g1) against one q8_K row y (the AVX2 build only, the one
// q5_K_x8 decode on every x86 ISA: kqx8.h).
void kvt_q5kx8_gemv_avx2(int64_t n, const void *W, int64_t g0, int64_t g1, const void *y, float *Y);
// The same for n_tok q8_K rows X (stride xrs bytes) into Y[t * ldy + 8g + r]: AVX2 token by token per group (batches up
// to KVT_Q5KX8_TOK_MAX tokens; larger ones: kvt_gemm_q5kx8_avx2), AVX-512 the GEMV's arithmetic 4 tokens a pass
// (2 .. KVT_Q5KX8_GEMM_MIN - 1 tokens); the same bits.
void kvt_q5kx8_gemv_nt_avx2(int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, size_t xrs, int64_t n_tok,
                            float *Y, int64_t ldy);
void kvt_q5kx8_gemv_nt_avx512(int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, size_t xrs, int64_t n_tok,
                              float *Y, int64_t ldy);
#define KVT_Q5KX8_TOK_MAX 8
// AVX-512 batches of q5_K_x8 from KVT_Q5KX8_GEMM_MIN tokens: as kvt_q4kx8_gemm_avx512 (its scratch size too), the
// q5_K bits.
#define KVT_Q5KX8_GEMM_MIN 5
void kvt_q5kx8_gemm_avx512(int64_t n, const void *W, int64_t nr, const void *X, int64_t n_tok, float *Y, int64_t ldy,
                           void *scratch);
// AVX2 q6_K decode (quant_avx2.c): Y[r] for the nr rows at W (stride wrs) against one q8_K row y, two rows at once.
void kvt_q6k_rows_avx2(int64_t n, const void *W, size_t wrs, int64_t nr, const void *y, float *Y);
// The same for q6_K_r rows (quant.h) against a q8_K row prepared by kvt_q6r_prep.
void kvt_q6r_rows_avx2(int64_t n, const void *W, size_t wrs, int64_t nr, const void *y, float *Y);
// q4_1_x8 (q41x8.h): Y[t * ldy + 8g + r] for the groups g in [g0, g1) against n_tok q8_1 rows X (decode and batches).
void kvt_q41x8_mm_avx2(int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok, float *Y, int64_t ldy);
void kvt_q41x8_mm_avx512(int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok, float *Y,
                         int64_t ldy);
// q8_0_x8 (q80x8.h): Y[t * ldy + 8g + r] for the groups g in [g0, g1) against n_tok q8_0 rows X, with
// kvt_q80x8_scratch_ISA(n, n_tok) bytes of 64-aligned scratch: decode and every batch on AVX-512; on AVX2 batches up
// to KVT_Q80X8_TOK_MAX tokens, larger ones run the q8_0 GEMM tile on unpacked rows (matmul.c). (Zen 4, one thread,
// W 2048 x 2048 / 2048 x 5632 in cache, GFLOP/s q8_0 -> q8_0_x8: AVX-512 2-8 tokens 110-138 -> 148-163, 16-128
// tokens 71-127 -> 123-161; AVX2 2-8 tokens 27-81 -> 88-98, 16-128 tokens 71-114 -> 64-95.)
#ifndef KVT_Q80X8_TOK_MAX
#define KVT_Q80X8_TOK_MAX 8
#endif
// The x8 kernels with scratch (q8_0_x8, q4_0_x8), per ISA: kvt_NAME_mm_ISA(n, W, g0, g1, X, n_tok, Y, ldy, scratch)
// and kvt_NAME_scratch_ISA(n, n_tok), the bytes of 64-aligned scratch it needs.
#define KVT_X8_MM_DECL(name, isa)                                                                                      \
    void kvt_##name##_mm_##isa(int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok, float *Y, \
                               int64_t ldy, void *scratch);                                                            \
    int64_t kvt_##name##_scratch_##isa(int64_t n, int64_t n_tok);
KVT_X8_MM_DECL(q80x8, avx2)
KVT_X8_MM_DECL(q80x8, avx512)
// q4_0_x8, q5_0_x8 (q40x8.h; q5: q5_0_x8): Y[t * ldy + 8g + r] for the groups g in [g0, g1) against n_tok q8_0 rows X,
// with kvt_q40x8_scratch(n, n_tok) bytes of 64-aligned scratch (per token and block the activation's dy and offset
// term): decode and every batch, each row in its type's order (the scalar reference's bits).
void kvt_q40x8_mm_avx2(int q5, int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok, float *Y,
                       int64_t ldy, void *scratch);
void kvt_q40x8_mm_avx512(int q5, int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok, float *Y,
                         int64_t ldy, void *scratch);
static inline int64_t kvt_q40x8_scratch(int64_t n, int64_t n_tok) { return n_tok * (n / KVT_QK) * 8 + 64; }
// AVX-512 batches (KVT_Q4KX8_GEMM_MIN tokens on): Y[t * ldy + r], r < nr (a multiple of 8), from the rows at W (a
// group start), with kvt_q4kx8_gemm_scratch_avx512(n) bytes of 64-aligned scratch; the q4_K tile's bits.
#define KVT_Q4KX8_GEMM_MIN 9
// AVX-512 batches of 2 .. KVT_Q4KX8_GEMM_MIN - 1 tokens (rows of q8_K at X, stride xrs): the GEMV's arithmetic per
// token, the groups g in [g0, g1), Y[t * ldy + 8g + r].
void kvt_q4kx8_gemv_nt_avx512(int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, size_t xrs, int64_t n_tok,
                              float *Y, int64_t ldy);
void kvt_q4kx8_gemm_avx512(int64_t n, const void *W, int64_t nr, const void *X, int64_t n_tok, float *Y, int64_t ldy,
                           void *scratch);
int64_t kvt_q4kx8_gemm_scratch_avx512(int64_t n);
// q6_K_r rows (quant.h; wrs: the q6_K row size) on AVX-512, batches of KVT_Q6KR_GEMM_MIN tokens on: Y[t * ldy + r],
// r < nr, against n_tok q8_K rows X (stride xrs), with kvt_q6kr_gemm_scratch_avx512(n) bytes of 64-aligned scratch:
// kq_avx512.h's q6_K panel tile on panels packed from the q6_K_r rows, so the q6_K bits (q6_K_r is the AVX-512
// layout on AMD Zen 5 only, whose decode runs the AVX2 q6_K_r GEMV: kvt_kernels_decode_avx2).
#define KVT_Q6KR_GEMM_MIN 9
void kvt_q6kr_gemm_avx512(int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs, int64_t n_tok,
                          float *Y, int64_t ldy, void *scratch);
int64_t kvt_q6kr_gemm_scratch_avx512(int64_t n);

// GEMM tiles (gemm_avx2.c, and gemm_avx512.c for isa avx512), the gemm entries
// of the SIMD kernels: each output is bit-identical to that ISA's GEMV for that
// activation row alone.
#define KVT_GEMM_DECL(name, isa)                                                                    \
    int64_t kvt_gemm_scratch_##name##_##isa(int64_t n, int64_t n_tok);                            \
    void kvt_gemm_##name##_##isa(int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs, \
                                 int64_t n_tok, float *Y, int64_t ldy, void *scratch);
#define KVT_GEMM_DECL2(name) KVT_GEMM_DECL(name, avx2) KVT_GEMM_DECL(name, avx512)
KVT_GEMM_DECL2(f32)
KVT_GEMM_DECL2(f16)
KVT_GEMM_DECL2(bf16)
KVT_GEMM_DECL(q4_1, avx2)
KVT_GEMM_DECL(q8_0, avx2)
KVT_GEMM_DECL(q4_K, avx2)
KVT_GEMM_DECL(q4kx8, avx2) // q4_K_x8 groups (rows a multiple of 8 from a group start; wrs: the q4_K row size)
KVT_GEMM_DECL2(q2_K) // gemm_lowbit.h: the GEMV's bits (quant_lowbit_avx2.c) on each ISA
KVT_GEMM_DECL2(q3_K)
KVT_GEMM_DECL2(iq4_nl)
KVT_GEMM_DECL(iq4_xs, avx2) // AVX-512: kq_avx512.h's panel tile (matmul_avx2.c)
KVT_GEMM_DECL(q5kx8, avx2) // q5_K_x8 groups (as q4kx8; wrs: the q5_K row size): the 8-row q4_K tile on q5_K's values
KVT_GEMM_DECL(q5_K, avx2)
KVT_GEMM_DECL(q6_K, avx2)
KVT_GEMM_DECL(q6kr, avx2) // q6_K_r rows (quant.h; wrs: the q6_K row size): the q6_K tile's bits

#endif
