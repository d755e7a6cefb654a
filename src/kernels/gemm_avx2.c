// gemm_avx2.c - AVX2 GEMM tiles for prefill (several activation rows at once).
//
// A tile computes R weight rows x T activation rows; each weight block is
// decoded once per tile and used for T rows, each activation block is loaded
// once and used for R rows.
//
// Batch invariance (every output bit-identical to what the AVX2 GEMV gives
// for that activation row alone): every output element keeps the GEMV's own
// accumulators, lane layout and order of floating-point operations:
//  - float weights (matmul_avx2.c fp tile): one accumulator per output taking
//    the 8-element chunks (16 on AVX-512) in ascending k, then hsum(acc) and a
//    scalar tail from the last multiple of 8 (16); a 4 x 3 tile is 12 ymm
//    accumulators (f16 x f16: the tile reads the f16 activations, as stored or
//    for calls of many rows copied to a stride off 4 KiB, and converts them
//    itself, half the bytes of the f32 rows the GEMV prepares);
//  - q8_0 (matmul_avx2.c q8_0_rows): per block the exact integer total, then
//    the scalar reference's (S * dx) * dy and a sum per block; the tile takes 8 weight rows in the lanes (repacked per
//    strip, interleaved, as the q4_K one);
//  - q4_1 (q4_1_row, llama.cpp's order) one accumulator over all blocks and the
//    m * s terms in a scalar FMA chain (q4_0 has no tile here: matmul.c runs it through q40x8.h, its order on
//    every ISA);
//  - K-quants (quant_avx2.c bodies): exact i32 sums per super-block (q6_K:
//    lanes as in the GEMV; q4_K/q5_K: the row's total), one fma per
//    super-block, the min term in a scalar. The q4_K tile takes 8 weight
//    rows in the lanes (repacked per strip, interleaved), so one activation
//    load serves 8 rows and a sub-block is summed in int16 before its scale;
//    q4_K_x8 (q4_K repacked at load) takes the same tile, its side data made
//    from the repacked groups (q4kx8_gprep: lane permutes, no transpose).
// Integer sums are exact, so their order is free.
//
// Driver: the activation rows are prepared once per call (type-specific
// side data: f32 rows, scales as floats, block sums), then strips of weight
// rows (L2) x blocks of activation rows (L2) are covered by tiles. Weight side
// data (scales as floats, unpacked K scales, q4_K's interleaved 8-row groups)
// is prepared once per strip into the per-thread scratch: nothing is kept
// between calls, so no second copy of the weights stays in memory.
//
// Compiled twice: as is for AVX2 (8 lanes) and by gemm_avx512.c with
// KVT_SIMD_AVX512 defined, where the float tiles exist 16 lanes wide like the
// AVX-512 rows kernel. The low-bit tiles of gemm_lowbit.h (q2_K, q3_K,
// iq4_nl, iq4_xs: each weight's scaled value prepared as a byte or a word per
// strip, the GEMV's lanes and chains) exist in both. The
// 32-block and K-quant tiles here are AVX2 only: the AVX-512 rows kernels of
// those types spend per output and pair of blocks a VPDPBUSD, a scale permute,
// a convert and an FMA, so a tile in their order saves little over them (tried
// for q8_0: no gain measured).
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "f16.h"
#include "matmul.h"
#include "quant.h"
#include "fvec_avx.h"
#include "x32_avx.h"

#define UNROLL _Pragma("GCC unroll 16")
#define RMAX 4 // tile limits of the dispatch tables
#define TMAX 8

#ifdef KVT_SIMD_AVX512
#define GEMM_FN(name) kvt_gemm_##name##_avx512
#define GEMM_SCRATCH_FN(name) kvt_gemm_scratch_##name##_avx512
#define MM_TABLE kvt_mm_kernel_avx512
#ifndef FP_SHAPE
#define FP_SHAPE 4x6 // 24 accumulators of 32 zmm
#define FP_RM 4
#define FP_TM 6
#endif
#else
#define GEMM_FN(name) kvt_gemm_##name##_avx2
#define GEMM_SCRATCH_FN(name) kvt_gemm_scratch_##name##_avx2
#define MM_TABLE kvt_mm_kernel_avx2
// 4 x 3: 12 accumulators, 3 activation vectors and 1 weight vector = the 16 ymm (each activation vector,
// streamed from L2, serves 4 rows: 3 x 4 read a third more activation bytes per FMA). F16 pp128, one
// thread, Zen 4, 2026-11-28: 97-104 -> 100-106 GFLOP/s, and no more drops to 71 at n = 2048.
#ifndef FP_SHAPE
#define FP_SHAPE 4x3
#define FP_RM 4
#define FP_TM 3
#endif
#endif
// Float tiles, both ISAs: strips of 512 KiB of weights (more tiles per token block): the prepared f32
// activations (4n bytes a token) come from L3 once per strip, which dominated at large n on AVX2
// (n = 5632 f16 78 -> 88 GFLOP/s, 192 -> 512 KiB; 2048 unchanged); f16/bf16 weights converted in the
// tile (f16 activations too), the f32 panel measured slower. AVX-512, one thread, Zen 4, pp128 GFLOP/s
// at n x rows 2048 x 5632 / 5632 x 2048 / 2048 x 2048, 2026-11-28 (before: STRIP_BYTES strips, the
// weights converted to f32 once per strip): f16 80/98/80 -> 86/98/86, bf16 59-71/78-84/62-70 ->
// 96-99/100-102/85-97, f32 64/80/62 -> 72/88/72 (then with two accumulators per output in K blocks of 512).
#ifndef FP_STRIP
#define FP_STRIP (512 * 1024)
#endif
#ifndef FP_WPANEL
#define FP_WPANEL 0 // 1: f16/bf16 weights converted to an f32 panel once per strip
#endif

INLINE int64_t align64(int64_t v) { return (v + 63) & ~(int64_t)63; }
INLINE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Tile arguments: W weight row 0 (stride wrs), S its side data (stride ss),
// X raw activation row 0 (stride xrs), P its prepared data (stride ps),
// Y[t*ldy + r] the outputs.
#define TILE_ARGS                                                                                   \
    int64_t n, const char *W, size_t wrs, const char *S, size_t ss, const char *X, size_t xrs, const char *P, \
        size_t ps, float *Y, int64_t ldy
#define TILE_PASS n, W, wrs, S, ss, X, xrs, P, ps, Y, ldy
typedef void (*tile_fn)(TILE_ARGS);

typedef struct {
    kvt_type type;
    int rm, tm;                          // tile used for full tiles (rm <= RMAX, tm <= TMAX)
    int64_t (*psize)(int64_t n);         // prepared bytes per activation row (multiple of 64)
    void (*prep)(int64_t n, const void *x, void *p); // NULL: the rows kernel's prep (matmul_avx2.c)
    int64_t (*wsize)(int64_t n);         // side-data bytes per weight row (multiple of 64; 0: none)
    void (*wprep)(int64_t n, const void *w, void *s);
    const tile_fn (*tiles)[TMAX];        // tiles[R-1][T-1]
    int64_t strip;                       // weight bytes per strip (0: STRIP_BYTES)
    // Optional instead of wprep: side data of a group of rm rows (nr <= rm of them real, the rest zero) at
    // s, rm * wsize(n) bytes; the tile gets S at its group's start (rows interleaved in the group).
    void (*gprep)(int64_t n, const char *w, size_t wrs, int nr, void *s);
} gemm_type;

#define STRIP_BYTES (192 * 1024) // weight rows per strip (L2), gemm_type.strip = 0
#ifndef TOKEN_BYTES
#define TOKEN_BYTES (192 * 1024)
#endif

static int64_t gemm_scratch_of(const gemm_type *g, int64_t n, int64_t n_tok, int64_t wrs) {
    int64_t sr = (g->strip ? g->strip : STRIP_BYTES) / (wrs > 0 ? wrs : 1) / g->rm * g->rm;
    if (sr < g->rm) sr = g->rm;
    return n_tok * g->psize(n) + (g->wsize ? sr * g->wsize(n) : 0) + 64;
}

// Token tiles: tile i covers tokens [tile_pos(i), tile_pos(i + 1)). n_tok = nt * tm - d is cut into nt - d tiles of tm
// and d of tm - 1 (when d <= nt) rather than full tiles and one of n_tok mod tm: 128 tokens on the 4 x 6 AVX-512
// tile are 18 x 6 + 4 x 5, not 21 x 6 + 1 x 2 (8 of 24 accumulators busy). Each output's order of operations is
// its own whatever the tile (see the top), so the result is unchanged.
typedef struct {
    int64_t n_tok, n_tiles, n_full, tm;
} tok_tiles;
static tok_tiles tok_tiles_of(int64_t n_tok, int64_t tm) {
    const int64_t nt = (n_tok + tm - 1) / tm, d = nt * tm - n_tok;
    return (tok_tiles){n_tok, nt, d <= nt && tm > 1 ? nt - d : nt, tm};
}
static int64_t tile_pos(const tok_tiles *k, int64_t i) {
    const int64_t p = i <= k->n_full ? i * k->tm : k->n_full * k->tm + (i - k->n_full) * (k->tm - 1);
    return p < k->n_tok ? p : k->n_tok;
}

static void gemm_run(const gemm_type *g, int64_t n, const char *W, size_t wrs, int64_t nr, const char *X, size_t xrs,
                     int64_t n_tok, float *Y, int64_t ldy, char *scratch) {
    const int64_t ps = g->psize(n), ws = g->wsize ? g->wsize(n) : 0;
    int64_t sr = (g->strip ? g->strip : STRIP_BYTES) / (int64_t)wrs / g->rm * g->rm, tb = TOKEN_BYTES / (ps + (int64_t)xrs) / g->tm;
    if (sr < g->rm) sr = g->rm;
    if (tb < 1) tb = 1;
    // token blocks of tb tiles at most, as even as the tiles allow
    const tok_tiles tk = tok_tiles_of(n_tok, g->tm);
    const int64_t n_blk = (tk.n_tiles + tb - 1) / tb;
    tb = n_blk > 0 ? (tk.n_tiles + n_blk - 1) / n_blk : tb;
    char *P = scratch, *S = P + n_tok * ps;
    void (*prep)(int64_t, const void *, void *) = g->prep ? g->prep : MM_TABLE(g->type)->prep;
    for (int64_t t = 0; t < n_tok; t++) prep(n, X + t * (int64_t)xrs, P + t * ps);
    for (int64_t rs = 0; rs < nr; rs += sr) {
        const int64_t re = min64(rs + sr, nr);
        if (g->gprep)
            for (int64_t r = rs; r < re; r += g->rm)
                g->gprep(n, W + r * (int64_t)wrs, wrs, (int)min64(g->rm, re - r), S + (r - rs) * ws);
        else if (ws)
            for (int64_t r = rs; r < re; r++) g->wprep(n, W + r * (int64_t)wrs, S + (r - rs) * ws);
        for (int64_t i0 = 0; i0 < tk.n_tiles; i0 += tb) {
            const int64_t i1 = min64(i0 + tb, tk.n_tiles);
            for (int64_t r = rs; r < re; r += g->rm) {
                const int R = (int)min64(g->rm, re - r);
                for (int64_t i = i0; i < i1; i++) {
                    const int64_t t = tile_pos(&tk, i);
                    const int T = (int)(tile_pos(&tk, i + 1) - t);
                    g->tiles[R - 1][T - 1](n, W + r * (int64_t)wrs, wrs, S + (r - rs) * ws, (size_t)ws,
                                           X + t * (int64_t)xrs, xrs, P + t * ps, (size_t)ps, Y + t * ldy + r, ldy);
                }
            }
        }
    }
}

// Instantiates name##_tile(TILE_ARGS, R, T) for the R x T of one tile shape
// (SHAPE: 3x3, 2x4 or 1x8, every smaller R and T for the edges), the
// dispatch table, and the kvt_mm_kernel entry points name##_gemm / _scratch.
#define TW(name, R, T) \
    static void name##_t##R##_##T(TILE_ARGS) { name##_tile(TILE_PASS, R, T); }
#define TW3(name, R) TW(name, R, 1) TW(name, R, 2) TW(name, R, 3)
#define TW4(name, R) TW3(name, R) TW(name, R, 4)
#define TW6(name, R) TW4(name, R) TW(name, R, 5) TW(name, R, 6)
#define TW8(name, R) TW6(name, R) TW(name, R, 7) TW(name, R, 8)
#define TT3(name, R) {name##_t##R##_1, name##_t##R##_2, name##_t##R##_3}
#define TT4(name, R) {name##_t##R##_1, name##_t##R##_2, name##_t##R##_3, name##_t##R##_4}
#define TT6(name, R) {name##_t##R##_1, name##_t##R##_2, name##_t##R##_3, name##_t##R##_4, name##_t##R##_5, name##_t##R##_6}
#define TT8(name, R) \
    {name##_t##R##_1, name##_t##R##_2, name##_t##R##_3, name##_t##R##_4, \
     name##_t##R##_5, name##_t##R##_6, name##_t##R##_7, name##_t##R##_8}
#define SHAPE_3x3(name) TW3(name, 1) TW3(name, 2) TW3(name, 3) \
    static const tile_fn name##_tab[RMAX][TMAX] = {TT3(name, 1), TT3(name, 2), TT3(name, 3)};
#define SHAPE_2x4(name) TW4(name, 1) TW4(name, 2) \
    static const tile_fn name##_tab[RMAX][TMAX] = {TT4(name, 1), TT4(name, 2)};
#define SHAPE_2x6(name) TW6(name, 1) TW6(name, 2) \
    static const tile_fn name##_tab[RMAX][TMAX] = {TT6(name, 1), TT6(name, 2)};
#define SHAPE_3x4(name) TW4(name, 1) TW4(name, 2) TW4(name, 3) \
    static const tile_fn name##_tab[RMAX][TMAX] = {TT4(name, 1), TT4(name, 2), TT4(name, 3)};
#define SHAPE_4x3(name) TW3(name, 1) TW3(name, 2) TW3(name, 3) TW3(name, 4) \
    static const tile_fn name##_tab[RMAX][TMAX] = {TT3(name, 1), TT3(name, 2), TT3(name, 3), TT3(name, 4)};
#define SHAPE_4x4(name) TW4(name, 1) TW4(name, 2) TW4(name, 3) TW4(name, 4) \
    static const tile_fn name##_tab[RMAX][TMAX] = {TT4(name, 1), TT4(name, 2), TT4(name, 3), TT4(name, 4)};
#define SHAPE_4x6(name) TW6(name, 1) TW6(name, 2) TW6(name, 3) TW6(name, 4) \
    static const tile_fn name##_tab[RMAX][TMAX] = {TT6(name, 1), TT6(name, 2), TT6(name, 3), TT6(name, 4)};
#define SHAPE_(name, S) SHAPE_##S(name)
#define SHAPE_1x8(name) TW8(name, 1) static const tile_fn name##_tab[RMAX][TMAX] = {TT8(name, 1)};
#define SHAPE_1x4(name) TW4(name, 1) static const tile_fn name##_tab[RMAX][TMAX] = {TT4(name, 1)};
#define SHAPE_2x2(name) TW(name, 1, 1) TW(name, 1, 2) TW(name, 2, 1) TW(name, 2, 2) \
    static const tile_fn name##_tab[RMAX][TMAX] = {{name##_t1_1, name##_t1_2}, {name##_t2_1, name##_t2_2}};
#define DEFINE_GEMM(name, TYPE, SHAPE, RM, TM, PSIZE, PREP, WSIZE, WPREP) \
    DEFINE_GEMM_S(name, TYPE, SHAPE, RM, TM, PSIZE, PREP, WSIZE, WPREP, 0)
#define DEFINE_GEMM_S(name, TYPE, SHAPE, RM, TM, PSIZE, PREP, WSIZE, WPREP, STRIP)                  \
    SHAPE_(name, SHAPE)                                                                             \
    DEFINE_GEMM_FNS(name, TYPE, RM, TM, PSIZE, PREP, WSIZE, WPREP, STRIP, NULL)
#define DEFINE_GEMM_FNS(name, TYPE, RM, TM, PSIZE, PREP, WSIZE, WPREP, STRIP, GPREP)                \
    static const gemm_type name##_g = {TYPE, RM, TM, PSIZE, PREP, WSIZE, WPREP, name##_tab, STRIP, GPREP}; \
    int64_t GEMM_SCRATCH_FN(name)(int64_t n, int64_t n_tok) {                                       \
        return gemm_scratch_of(&name##_g, n, n_tok, kvt_row_size(TYPE, n));                         \
    }                                                                                               \
    void GEMM_FN(name)(int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs, \
                                int64_t n_tok, float *Y, int64_t ldy, void *scratch) {              \
        gemm_run(&name##_g, n, W, wrs, nr, X, xrs, n_tok, Y, ldy, scratch);                         \
    }

// ============================================================ float weights

// Prepared activation row: n floats, by the rows kernel's prep (the GEMV's own values).
static int64_t fp_psize(int64_t n) { return align64(n * 4); }

#ifdef FP_YREG
#define FP_REG(v) __asm__("" : "+x"(v))
#else
#define FP_REG(v) (void)0
#endif
#define ld_f32(p) fv_ld(p)
#define cvt_f32(v) (v)

#if FP_WPANEL
// Weight side data of f16/bf16: the rows as f32 (exact), converted once per
// strip rather than once per tile; the tile reads them (WB, WS = S, ss).
static int64_t fpw_wsize(int64_t n) { return align64(n * 4); }
static void f16_wprep(int64_t n, const void *w, void *s) { kvt_f16_to_f32_row_avx2(w, s, n); }
static void bf16_wprep(int64_t n, const void *w, void *s) {
    for (int64_t i = 0; i < n; i++) ((float *)s)[i] = kvt_bf16_to_f32(((const uint16_t *)w)[i]);
}
#endif

// P: the activation rows as f32 (or YT as stored, converted by LDY). Weight row r of the tile at WB + r * WS,
// elements of type ET. One accumulator per output over the FV_N-wide chunks in ascending k, the rows kernel's
// order (matmul_avx2.c DEFINE_FP_TILE), in one pass over K.
#define DEFINE_FP_TILE(...) DEFINE_FP_TILE_(__VA_ARGS__)
#define DEFINE_FP_TILE_(name, ET, LDW, CVT, WB, WS, YT, LDY, CVTY, YB, YS)                        \
    INLINE void name##_tile(TILE_ARGS, int R, int T) {                                              \
        (void)W, (void)wrs, (void)S, (void)ss, (void)X, (void)xrs, (void)P, (void)ps;               \
        const int64_t nv = n & ~(int64_t)(FV_N - 1);                                                \
        FV acc[RMAX][TMAX];                                                                         \
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = fv_zero(); \
        for (int64_t i = 0; i < nv; i += FV_N) {                                                    \
            if (R > T) { /* T activations in registers, the weights one by one */                  \
                FV y[TMAX];                                                                         \
                UNROLL for (int t = 0; t < T; t++) y[t] = LDY((const YT *)(YB + t * YS) + i);       \
                UNROLL for (int r = 0; r < R; r++) {                                                \
                    FV w = LDW((const ET *)(WB + r * WS) + i);                                      \
                    __asm__("" : "+x"(w)); /* one register for it, its load not repeated */         \
                    UNROLL for (int t = 0; t < T; t++) acc[r][t] = fv_fma(w, y[t], acc[r][t]);      \
                }                                                                                   \
                continue;                                                                           \
            }                                                                                       \
            FV w[RMAX];                                                                             \
            UNROLL for (int r = 0; r < R; r++) w[r] = LDW((const ET *)(WB + r * WS) + i);           \
            UNROLL for (int t = 0; t < T; t++) {                                                    \
                FV y = LDY((const YT *)(YB + t * YS) + i);                                          \
                FP_REG(y);                                                                          \
                UNROLL for (int r = 0; r < R; r++) acc[r][t] = fv_fma(w[r], y, acc[r][t]);          \
            }                                                                                       \
        }                                                                                           \
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) {                     \
            const ET *x = (const ET *)(WB + r * WS);                                                \
            const YT *y = (const YT *)(YB + t * YS);                                                \
            float s = fv_hsum(acc[r][t]);                                                           \
            for (int64_t j = nv; j < n; j++) s += CVT(x[j]) * CVTY(y[j]);                           \
            Y[t * ldy + r] = s;                                                                     \
        }                                                                                           \
    }

#define FP_YF32 float, ld_f32, cvt_f32, P, ps // activations: the prepared f32 rows
DEFINE_FP_TILE(f32, float, ld_f32, cvt_f32, W, wrs, FP_YF32)
DEFINE_GEMM_S(f32, KVT_TYPE_F32, FP_SHAPE, FP_RM, FP_TM, fp_psize, NULL, NULL, NULL, FP_STRIP)
#if FP_WPANEL
DEFINE_FP_TILE(fpw, float, ld_f32, cvt_f32, S, ss, FP_YF32)
#define f16_tile fpw_tile
#define bf16_tile fpw_tile
DEFINE_GEMM_S(f16, KVT_TYPE_F16, FP_SHAPE, FP_RM, FP_TM, fp_psize, NULL, fpw_wsize, f16_wprep, FP_STRIP)
DEFINE_GEMM_S(bf16, KVT_TYPE_BF16, FP_SHAPE, FP_RM, FP_TM, fp_psize, NULL, fpw_wsize, bf16_wprep, FP_STRIP)
#else
#ifndef F16_YRAW
#define F16_YRAW 1
#endif
#if F16_YRAW
// f16 x f16: the activations read as f16 (converted in the tile to the values the GEMV's prep makes), as given (f16)
// or (f16p) copied into rows of an odd number of 64-byte lines. At n = 2048 the rows as given are 4096 bytes apart,
// so the 3 activation rows of a tile and its 4 weight rows (4096 bytes apart too) all fall into the same L1 sets:
// AVX2, one thread, Zen 4, 2026-11-29 (bench_kernels -p 128, 3-5 rounds): 2048 x 2048 96-100 -> 102-103 GFLOP/s,
// 5632 x 2048 even. The copy (n_tok rows per call) pays only for calls of many rows (F16P_MIN_ROWS): the engine's
// tasks of 32 K/V rows would spend more on it than they gain. Same values either way, so the same bits.
#ifndef F16P_MIN_ROWS
#define F16P_MIN_ROWS 512
#endif
static int64_t fp_psize0(int64_t n) { return (void)n, 64; }
static void fp_prep0(int64_t n, const void *x, void *p) { (void)n, (void)x, (void)p; }
static int64_t f16p_psize(int64_t n) {
    const int64_t s = align64(2 * n);
    return (s / 64) % 2 ? s : s + 64;
}
static void f16p_prep(int64_t n, const void *x, void *p) { memcpy(p, x, (size_t)(2 * n)); }
DEFINE_FP_TILE(f16r, uint16_t, fv_ld_f16, kvt_f16_to_f32, W, wrs, uint16_t, fv_ld_f16, kvt_f16_to_f32, X, xrs)
DEFINE_FP_TILE(f16p, uint16_t, fv_ld_f16, kvt_f16_to_f32, W, wrs, uint16_t, fv_ld_f16, kvt_f16_to_f32, P, ps)
DEFINE_GEMM_S(f16r, KVT_TYPE_F16, FP_SHAPE, FP_RM, FP_TM, fp_psize0, fp_prep0, NULL, NULL, FP_STRIP)
DEFINE_GEMM_S(f16p, KVT_TYPE_F16, FP_SHAPE, FP_RM, FP_TM, f16p_psize, f16p_prep, NULL, NULL, FP_STRIP)
int64_t GEMM_SCRATCH_FN(f16)(int64_t n, int64_t n_tok) { return GEMM_SCRATCH_FN(f16p)(n, n_tok); }
void GEMM_FN(f16)(int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs, int64_t n_tok, float *Y,
                  int64_t ldy, void *scratch) {
    if (xrs % 4096 == 0 && nr >= F16P_MIN_ROWS) GEMM_FN(f16p)(n, W, wrs, nr, X, xrs, n_tok, Y, ldy, scratch);
    else GEMM_FN(f16r)(n, W, wrs, nr, X, xrs, n_tok, Y, ldy, scratch);
}
#else
DEFINE_FP_TILE(f16, uint16_t, fv_ld_f16, kvt_f16_to_f32, W, wrs, FP_YF32)
DEFINE_GEMM_S(f16, KVT_TYPE_F16, FP_SHAPE, FP_RM, FP_TM, fp_psize, NULL, NULL, NULL, FP_STRIP)
#endif
DEFINE_FP_TILE(bf16, uint16_t, fv_ld_bf16, kvt_bf16_to_f32, W, wrs, FP_YF32)
DEFINE_GEMM_S(bf16, KVT_TYPE_BF16, FP_SHAPE, FP_RM, FP_TM, fp_psize, NULL, NULL, NULL, FP_STRIP)
#endif

// ======================================================= 32-element blocks
#ifndef KVT_SIMD_AVX512 // AVX-512 32-block and K-quant rows kernels sum otherwise (see top)

// q4_1 (the one 32-element nibble format with a tile here: q8_0 has its own 8-row tile below, q4_0 and q5_0 run
// q40x8.h's kernels). Prepared activation row (nbp = blocks rounded up to 8): float d[nbp], c[nbp] as x32_prep makes
// them (c: the block's s). Weight side data: float dx[nbp], mx[nbp] (m).
INLINE int64_t nb_pad(int64_t nb) { return (nb + 7) & ~(int64_t)7; }
static void q4_1_wprep(int64_t n, const void *w, void *s) {
    const int64_t nb = n / KVT_QK, nbp = nb_pad(nb);
    const size_t bs = sizeof(kvt_block_q4_1);
    float *d = s, *m = d + nbp;
    for (int64_t ib = 0; ib < nb; ib++) {
        d[ib] = _cvtsh_ss(ld16((const char *)w + ib * bs));
        m[ib] = _cvtsh_ss(ld16((const char *)w + ib * bs + 2));
    }
    for (int64_t ib = nb; ib < nbp; ib++) d[ib] = m[ib] = 0;
}
static int64_t x32_wsize(int64_t n) { return align64(8 * nb_pad(n / KVT_QK)); }

static int64_t x32_psize(int64_t n) { return align64(8 * nb_pad(n / KVT_QK)); }

static void q4_1_aprep(int64_t n, const void *x, void *p) {
    const int64_t nb = n / KVT_QK, nbp = nb_pad(nb);
    float *d = p, *c = d + nbp;
    for (int64_t ib = 0; ib < nb; ib++) {
        const kvt_block_q8_1 *b = (const kvt_block_q8_1 *)x + ib;
        d[ib] = _cvtsh_ss(b->d);
        c[ib] = _cvtsh_ss(b->s);
    }
    for (int64_t ib = nb; ib < nbp; ib++) d[ib] = c[ib] = 0;
}

// llama.cpp's order as matmul_avx2.c q4_1_row (one accumulator per output over the blocks in order, the m * s terms
// in a scalar FMA chain); a block's i32 lanes as there (x32_avx.h blk_u8, kvt_dot_u8s8).
INLINE void q4_1_tile(TILE_ARGS, int R, int T) {
    const size_t bs = sizeof(kvt_block_q4_1), ys = sizeof(kvt_block_q8_1);
    const int64_t nb = n / KVT_QK, nbp = nb_pad(nb);
    __m256 acc[RMAX][TMAX];
    float ms[RMAX][TMAX];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps(), ms[r][t] = 0;
    for (int64_t ib = 0; ib < nb; ib++) {
        __m256i w[RMAX];
        UNROLL for (int r = 0; r < R; r++) w[r] = blk_u8(W + r * wrs + ib * bs);
        UNROLL for (int t = 0; t < T; t++) {
            const float *pd = (const float *)(P + t * ps);
            const __m256i y = _mm256_loadu_si256((const __m256i *)(X + t * xrs + ib * ys + 4));
            UNROLL for (int r = 0; r < R; r++) {
                const float *sd = (const float *)(S + r * ss);
                const __m256i p = kvt_dot_u8s8(w[r], y);
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(sd[ib] * pd[ib]), _mm256_cvtepi32_ps(p), acc[r][t]);
                ms[r][t] = fmaf(sd[nbp + ib], pd[nbp + ib], ms[r][t]);
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) Y[t * ldy + r] = kvt_hsum8(acc[r][t]) + ms[r][t];
}
DEFINE_GEMM(q4_1, KVT_TYPE_Q4_1, 2x4, 2, 4, x32_psize, q4_1_aprep, x32_wsize, q4_1_wprep)

// ================================================================ K-quants
//
// q5_K: a mirror of quant_avx2.c's q5_K body over 1 x T (k45_tile, written for
// q4_K too, which now takes the 8-row tile below with q6_K). Weight side data
// of q5_K, per super-block (KS bytes): uint8 sc[8], mn[8]; float d, dmin.
// Prepared activations of q4_K / q5_K, per super-block (KA bytes): int16 sums
// of the 8 sub-blocks of 32 (for the min term). q6_K needs none.
#define KS 24
#define KA 16
static int64_t k45_wsize(int64_t n) { return align64(n / KVT_QK_K * KS); }
static int64_t k45_psize(int64_t n) { return align64(n / KVT_QK_K * KA); }
static int64_t k_psize0(int64_t n) { return (void)n, 64; }
static void k_prep0(int64_t n, const void *x, void *p) { (void)n, (void)x, (void)p; }

INLINE void k45_wprep(int64_t n, const void *w, void *s, size_t bsz) {
    for (int64_t b = 0; b < n / KVT_QK_K; b++) {
        const kvt_block_q4_K *x = (const kvt_block_q4_K *)((const char *)w + b * (int64_t)bsz); // q5_K: same head
        uint8_t *o = (uint8_t *)s + b * KS;
        kvt_k_scales_unpack(x->scales, o, o + 8);
        const float d = _cvtsh_ss(x->d), dmin = _cvtsh_ss(x->dmin);
        memcpy(o + 16, &d, 4), memcpy(o + 20, &dmin, 4);
    }
}
static void q5_K_wprep(int64_t n, const void *w, void *s) { k45_wprep(n, w, s, sizeof(kvt_block_q5_K)); }
static void k45_prep(int64_t n, const void *x, void *p) {
    for (int64_t b = 0; b < n / KVT_QK_K; b++) {
        const kvt_block_q8_K *y = (const kvt_block_q8_K *)x + b;
        const __m128i s = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y->bsums),
                                         _mm_loadu_si128((const __m128i *)y->bsums + 1));
        _mm_storeu_si128((__m128i *)((char *)p + b * KA), s);
    }
}

INLINE int hsum4_epi32(__m128i p) {
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0x4e));
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0xb1));
    return _mm_cvtsi128_si32(p);
}
INLINE int hsum8_epi32(__m256i v) {
    return hsum4_epi32(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

// dy of the tile's T tokens as one vector (lane t: token t; lanes past T zero).
INLINE __m256 k_dy8(const char *X, size_t xrs, int T) {
    float dy[8] = {0};
    UNROLL for (int t = 0; t < T; t++) dy[t] = ((const kvt_block_q8_K *)(X + t * xrs))->d;
    return _mm256_loadu_ps(dy);
}

// The exact integer min dots sum_j m[j] * bsum_j of T <= 8 tokens at once (lane t: token t; lanes past T
// zero): token pairs (k, k + 4) share a 256-bit madd, three hadds reduce each token's four lanes.
INLINE __m256i k_min_dot8(__m128i mins16, const char *P, size_t ps, int64_t ib, int T) {
    const __m256i mv = _mm256_broadcastsi128_si256(mins16);
    __m256i p[4];
    UNROLL for (int k = 0; k < 4; k++) {
        const __m128i lo = k < T ? _mm_loadu_si128((const __m128i *)(P + k * ps + ib * KA)) : _mm_setzero_si128();
        const __m128i hi = k + 4 < T ? _mm_loadu_si128((const __m128i *)(P + (k + 4) * ps + ib * KA)) : _mm_setzero_si128();
        p[k] = _mm256_madd_epi16(mv, _mm256_set_m128i(hi, lo));
    }
    return _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
}

// Per token, the same operations as quant_avx2.c's q4_K/q5_K body alone: acc = fma(float(isum), d * dy,
// acc) and macc = macc + (dmin * dy) * float(min dot), the latter for all T tokens in one vector (lane t
// holds token t's scalar macc: the same product, rounding and sum order).
INLINE void k45_tile(TILE_ARGS, int R, int T, int HB) {
    const size_t bsz = HB ? sizeof(kvt_block_q5_K) : sizeof(kvt_block_q4_K);
    const size_t qs_off = HB ? offsetof(kvt_block_q5_K, qs) : offsetof(kvt_block_q4_K, qs);
    const int64_t nb = n / KVT_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 macc[RMAX];
    float acc[RMAX][TMAX];
    UNROLL for (int r = 0; r < R; r++) {
        macc[r] = _mm256_setzero_ps();
        UNROLL for (int t = 0; t < T; t++) acc[r][t] = 0;
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const kvt_block_q8_K *y[TMAX];
        UNROLL for (int t = 0; t < T; t++) y[t] = (const kvt_block_q8_K *)(X + t * xrs) + ib;
        __m256i isum[RMAX][TMAX], hb[RMAX];
        UNROLL for (int r = 0; r < R; r++) {
            UNROLL for (int t = 0; t < T; t++) isum[r][t] = _mm256_setzero_si256();
            hb[r] = HB ? _mm256_loadu_si256((const __m256i *)(W + r * wrs + ib * bsz + offsetof(kvt_block_q5_K, qh)))
                       : _mm256_setzero_si256();
        }
        UNROLL for (int c = 0; c < 4; c++) {
            __m256i lo[RMAX], hi[RMAX], s0[RMAX], s1[RMAX];
            UNROLL for (int r = 0; r < R; r++) {
                const uint8_t *sc = (const uint8_t *)(S + r * ss + ib * KS);
                const __m256i q = _mm256_loadu_si256((const __m256i *)(W + r * wrs + ib * bsz + qs_off + 32 * c));
                lo[r] = _mm256_and_si256(q, m4);
                hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (HB) {
                    const __m256i one = _mm256_set1_epi8(1);
                    lo[r] = _mm256_or_si256(lo[r], _mm256_slli_epi16(_mm256_and_si256(hb[r], one), 4));
                    hi[r] = _mm256_or_si256(hi[r], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb[r], 1), one), 4));
                    hb[r] = _mm256_srli_epi16(hb[r], 2);
                }
                s0[r] = _mm256_set1_epi16(sc[2 * c]);
                s1[r] = _mm256_set1_epi16(sc[2 * c + 1]);
            }
            UNROLL for (int t = 0; t < T; t++) UNROLL for (int r = 0; r < R; r++) {
                const __m256i p0 = _mm256_maddubs_epi16(lo[r], _mm256_loadu_si256((const __m256i *)(y[t]->qs + 64 * c)));
                const __m256i p1 = _mm256_maddubs_epi16(hi[r], _mm256_loadu_si256((const __m256i *)(y[t]->qs + 64 * c + 32)));
                isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_add_epi32(_mm256_madd_epi16(p0, s0[r]), _mm256_madd_epi16(p1, s1[r])));
            }
        }
        const __m256 dy8 = k_dy8((const char *)y[0], xrs, T);
        UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *sc = (const uint8_t *)(S + r * ss + ib * KS);
            float d, dmin;
            memcpy(&d, sc + 16, 4), memcpy(&dmin, sc + 20, 4);
            uint64_t m64;
            memcpy(&m64, sc + 8, 8);
            const __m128i mv = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m64));
            _Alignas(32) float dd[8];
            _mm256_store_ps(dd, _mm256_mul_ps(_mm256_set1_ps(d), dy8));
            UNROLL for (int t = 0; t < T; t++) acc[r][t] = fmaf((float)hsum8_epi32(isum[r][t]), dd[t], acc[r][t]);
            const __m256 md = _mm256_mul_ps(_mm256_set1_ps(dmin), dy8);
            macc[r] = _mm256_add_ps(macc[r], _mm256_mul_ps(md, _mm256_cvtepi32_ps(k_min_dot8(mv, P, ps, ib, T))));
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        _Alignas(32) float m[8];
        _mm256_store_ps(m, macc[r]);
        UNROLL for (int t = 0; t < T; t++) Y[t * ldy + r] = acc[r][t] - m[t];
    }
}

INLINE void q5_K_tile(TILE_ARGS, int R, int T) { k45_tile(TILE_PASS, R, T, 1); }

// q4_K and q6_K over 8 weight rows at once, rows in the lanes (one activation load serves 8 rows). The
// GEMV's order (matmul.h) needs only each row's exact integer total S per super-block, so the tile sums
// the maddubs pair sums of a scale group in int16 before applying the scale with one madd, where the
// GEMV spends a madd per 32 products and row: q4_K a whole sub-block of 32 (8 pair sums of at most
// |2 * 15 * 128| each: < 2^15), q6_K half a group of 16 (2 of at most 2 * 63 * 128). The weights are
// repacked once per strip (per call, never kept): per 8-row group and super-block (KG_SIZE bytes)
//   uint8 q[64 quads Q][8 rows][4]: the values (q4_K 0..15, q6_K 0..63) of elements 4Q .. 4Q + 3
//   int16 sc[NG groups][8 rows][2]: each row's scale of the group (q4_K 8 of 32, q6_K 16 of 16) twice
//     (a madd pairs a row's two int16)
//   int16 mn[4 or 8 p][8 rows][2]: q4_K the mins of sub-blocks 2p and 2p + 1 (4 p); q6_K the scales of
//     groups 2p and 2p + 1 (8 p), for the offset term -32 * sum_g sc_g * bsum_g
//   float d[8 rows], dmin[8 rows] (q6_K: d only)
// Rows past the group's real ones are zero. Per token, lane r: acc = fma(float(S), d * dy, acc) and
// (q4_K) macc = macc + (dmin * dy) * float(min dot) per super-block, Y = acc - macc: the GEMV's operations.
#define KG_SC 2048
#define KG_MN(Q6) (KG_SC + ((Q6) ? 512 : 256))
#define KG_D(Q6) (KG_MN(Q6) + ((Q6) ? 256 : 128))
#define KG_DMIN(Q6) (KG_D(Q6) + 32)
#define KG_SIZE(Q6) (KG_DMIN(Q6) + ((Q6) ? 0 : 32))
#ifndef K8_TM
#define K8_TM 6
#endif
static int64_t q4k8_wsize(int64_t n) { return align64(n / KVT_QK_K * (KG_SIZE(0) / 8)); }
static int64_t q6k8_wsize(int64_t n) { return align64(n / KVT_QK_K * (KG_SIZE(1) / 8)); }

// 8 x 8 transpose of 32-bit elements: o[i] lane r = v[r] lane i.
INLINE void transpose8_epi32(const __m256i v[8], __m256i o[8]) {
    __m256i t[8], u[8];
    UNROLL for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
    }
    UNROLL for (int h = 0; h < 2; h++) { // rows 4h .. 4h + 3
        u[4 * h] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
        u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
        u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
        u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
    }
    UNROLL for (int i = 0; i < 4; i++) {
        o[i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x20);
        o[i + 4] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x31);
    }
}

// The 32 values of sub-block m (elements 32m .. 32m + 31) of one super-block, in element order.
INLINE __m256i k_sub_values(const char *blk, int m, int Q6) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (!Q6) { // chunk m / 2: low nibbles sub-block m even, high nibbles m odd
        const __m256i q = _mm256_loadu_si256((const __m256i *)(((const kvt_block_q4_K *)blk)->qs + 32 * (m / 2)));
        return _mm256_and_si256(m & 1 ? _mm256_srli_epi16(q, 4) : q, m4);
    }
    const kvt_block_q6_K *x = (const kvt_block_q6_K *)blk;
    if (Q6 == 2) { // q6_K_r (quant.h): groups 2m, 2m + 1 are lane m / 4 of pair j = m % 4, A and B by 8 bytes
        const int L = m / 4, j = m % 4;
        const __m128i p = _mm_loadu_si128((const __m128i *)(x->ql + 32 * j + 16 * L));
        const __m128i nb = _mm_loadu_si128((const __m128i *)(x->qh + 32 * (j >> 1) + 16 * L));
        const __m128i a = _mm_and_si128(p, _mm_set1_epi8(0x3F));
        const __m128i b = _mm_or_si128(_mm_and_si128(j & 1 ? _mm_srli_epi16(nb, 4) : nb, _mm_set1_epi8(0x0F)),
                                       _mm_and_si128(_mm_srli_epi16(p, 2), _mm_set1_epi8(0x30)));
        return _mm256_set_m128i(_mm_unpackhi_epi64(a, b), _mm_unpacklo_epi64(a, b));
    }
    // as quant_avx2.c's q6_K body: half h, k
    const int h = m / 4, k = m % 4;
    const __m256i ql = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32 * (k & 1)));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
    const __m256i lo = _mm256_and_si256(k >= 2 ? _mm256_srli_epi16(ql, 4) : ql, m4);
    return _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), _mm256_set1_epi8(3)), 4));
}

INLINE void k8_gprep(int64_t n, const char *w, size_t wrs, int nr, void *s, int Q6) {
    const size_t bsz = Q6 ? sizeof(kvt_block_q6_K) : sizeof(kvt_block_q4_K);
    for (int64_t b = 0; b < n / KVT_QK_K; b++) {
        uint8_t *o = (uint8_t *)s + b * KG_SIZE(Q6);
        int16_t *sc16 = (int16_t *)(o + KG_SC), *mn16 = (int16_t *)(o + KG_MN(Q6));
        float *d = (float *)(o + KG_D(Q6)), *dmin = (float *)(o + KG_DMIN(Q6));
        const char *x[8];
        for (int r = 0; r < 8; r++) {
            x[r] = r < nr ? w + r * (int64_t)wrs + b * (int64_t)bsz : NULL;
            if (Q6) {
                const kvt_block_q6_K *q = (const kvt_block_q6_K *)x[r];
                for (int g = 0; g < 16; g++) {
                    const int16_t v = q ? q->scales[g] : 0;
                    sc16[16 * g + 2 * r] = sc16[16 * g + 2 * r + 1] = v;
                    mn16[16 * (g / 2) + 2 * r + (g & 1)] = v;
                }
                d[r] = q ? _cvtsh_ss(q->d) : 0.f;
                continue;
            }
            const kvt_block_q4_K *q = (const kvt_block_q4_K *)x[r];
            uint8_t sc[8] = {0}, mn[8] = {0};
            if (q) kvt_k_scales_unpack(q->scales, sc, mn);
            for (int j = 0; j < 8; j++) sc16[16 * j + 2 * r] = sc16[16 * j + 2 * r + 1] = sc[j];
            for (int p = 0; p < 4; p++) mn16[16 * p + 2 * r] = mn[2 * p], mn16[16 * p + 2 * r + 1] = mn[2 * p + 1];
            d[r] = q ? _cvtsh_ss(q->d) : 0.f;
            dmin[r] = q ? _cvtsh_ss(q->dmin) : 0.f;
        }
        for (int m = 0; m < 8; m++) {
            __m256i v[8], t[8];
            for (int r = 0; r < 8; r++) v[r] = x[r] ? k_sub_values(x[r], m, Q6) : _mm256_setzero_si256();
            transpose8_epi32(v, t);
            for (int i = 0; i < 8; i++) _mm256_store_si256((__m256i *)(o + (8 * m + i) * 32), t[i]);
        }
    }
}
static void q4k8_gprep(int64_t n, const char *w, size_t wrs, int nr, void *s) { k8_gprep(n, w, wrs, nr, s, 0); }
// The same side data straight from a q4_K_x8 group at w (quant.h; whole groups only: nr is 8): chunk (c, p)
// lane 2r + e holds row r's quad 2p + e of slice c, i.e. quad 16c + 2p + e (low nibbles, sub-block 2c) and
// 16c + 8 + 2p + e (high nibbles, sub-block 2c + 1); a lane permute and two 128-bit selects give the 8 rows
// of a quad, no transpose.
// q5 (q5_K_x8, quant.h): the values 0..31 (K8_Q5's side data), bit 4 from the qh chunk p, whose lanes are the quads'.
INLINE void kx8_gprep(int64_t n, const char *w, void *s, const int q5) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10), eo = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    for (int64_t b = 0; b < n / KVT_QK_K; b++) {
        const uint8_t *in = (const uint8_t *)w + b * (q5 ? KVT_Q5X8_SB : KVT_X8_SB);
        uint8_t *o = (uint8_t *)s + b * KG_SIZE(0);
        UNROLL for (int k = 0; k < 16; k++) { // chunk (c, p) = (k / 4, k % 4): quads Q, Q + 1 (low), Q + 8, Q + 9 (high)
            const __m256i A = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(in + 64 * k)), eo);
            const __m256i B = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(in + 64 * k + 32)), eo);
            const __m256i ev = _mm256_permute2x128_si256(A, B, 0x20), od = _mm256_permute2x128_si256(A, B, 0x31);
            const int c = k / 4, p = k % 4, Q = 16 * c + 2 * p;
            __m256i v[4] = {_mm256_and_si256(ev, m4), _mm256_and_si256(od, m4), _mm256_and_si256(_mm256_srli_epi16(ev, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi16(od, 4), m4)};
            if (q5) { // bits 2c (low nibbles) and 2c + 1 (high) of the quads' qh bytes to bit 4
                const __m256i HA = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(in + KVT_X8_SB + 64 * p)), eo);
                const __m256i HB = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(in + KVT_X8_SB + 64 * p + 32)), eo);
                const __m256i h[2] = {_mm256_permute2x128_si256(HA, HB, 0x20), _mm256_permute2x128_si256(HA, HB, 0x31)};
                UNROLL for (int e = 0; e < 2; e++) {
                    v[e] = _mm256_or_si256(v[e], _mm256_and_si256(kvt_bit_to4_256(h[e], 2 * c), m10));
                    v[2 + e] = _mm256_or_si256(v[2 + e], _mm256_and_si256(kvt_bit_to4_256(h[e], 2 * c + 1), m10));
                }
            }
            UNROLL for (int i = 0; i < 4; i++) _mm256_store_si256((__m256i *)(o + 32 * (Q + (i & 1) + 8 * (i >> 1))), v[i]);
        }
        int16_t *sc16 = (int16_t *)(o + KG_SC), *mn16 = (int16_t *)(o + KG_MN(0));
        for (int r = 0; r < 8; r++) {
            uint8_t sc[8], mn[8];
            kvt_q4kx8_scales(in, r, sc, mn);
            for (int j = 0; j < 8; j++) sc16[16 * j + 2 * r] = sc16[16 * j + 2 * r + 1] = sc[j];
            for (int p = 0; p < 4; p++) mn16[16 * p + 2 * r] = mn[2 * p], mn16[16 * p + 2 * r + 1] = mn[2 * p + 1];
        }
        _mm256_store_ps((float *)(o + KG_D(0)), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + 1120))));
        _mm256_store_ps((float *)(o + KG_DMIN(0)), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + 1136))));
    }
}
static void q4kx8_gprep(int64_t n, const char *w, size_t wrs, int nr, void *s) {
    (void)wrs, (void)nr;
    kx8_gprep(n, w, s, 0);
}
static void q5kx8_gprep(int64_t n, const char *w, size_t wrs, int nr, void *s) {
    (void)wrs, (void)nr;
    kx8_gprep(n, w, s, 1);
}
static void q6k8_gprep(int64_t n, const char *w, size_t wrs, int nr, void *s) { k8_gprep(n, w, wrs, nr, s, 1); }
static void q6kr_gprep(int64_t n, const char *w, size_t wrs, int nr, void *s) { k8_gprep(n, w, wrs, nr, s, 2); }

INLINE __m256i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// The sum of the int16 pair sums maddubs(q[Q], y) over quads Q = q0 .. q0 + nq - 1 of T tokens, accumulated
// into isum after one madd with the group's scales scv.
INLINE void k8_group(const char *g, const kvt_block_q8_K *const *y, int T, int q0, int nq, __m256i scv, __m256i *isum) {
    __m256i s16[TMAX];
    UNROLL for (int t = 0; t < T; t++) s16[t] = _mm256_setzero_si256();
    UNROLL for (int i = 0; i < nq; i++) {
        const __m256i w = _mm256_load_si256((const __m256i *)(g + (q0 + i) * 32));
        UNROLL for (int t = 0; t < T; t++)
            s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(w, bcast32(y[t]->qs + 4 * (q0 + i))));
    }
    UNROLL for (int t = 0; t < T; t++) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s16[t], scv));
}

// The R <= 8 valid lanes of v (lane r: row r) to Y[0 .. R - 1].
INLINE void l8_store(float *Y, int R, __m256 v) {
    if (R == 8) {
        _mm256_storeu_ps(Y, v);
        return;
    }
    _Alignas(32) float o[8];
    _mm256_store_ps(o, v);
    for (int r = 0; r < R; r++) Y[r] = o[r];
}

// Q6: 0 q4_K, 1 q6_K, K8_Q5 q5_K (the q4_K side data with values 0..31: a sub-block's int16 sums in two halves of 4
// quads, each at most 4 pair sums of 2 * 31 * 128 < 2^15, then the same madd with the scales).
#define K8_Q5 3
INLINE void k8_tile(TILE_ARGS, int R, int T, int Q6) {
    (void)W, (void)wrs, (void)ss;
    const int K6 = Q6 == 1;
    const int64_t nb = n / KVT_QK_K;
    __m256 acc[TMAX], macc[TMAX];
    UNROLL for (int t = 0; t < T; t++) acc[t] = macc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const char *g = S + ib * KG_SIZE(K6);
        const kvt_block_q8_K *y[TMAX];
        UNROLL for (int t = 0; t < T; t++) y[t] = (const kvt_block_q8_K *)(X + t * xrs) + ib;
        __m256i isum[TMAX];
        UNROLL for (int t = 0; t < T; t++) {
            isum[t] = _mm256_setzero_si256();
            if (K6) { // -32 * sum_g sc_g * bsum_g
                __m256i off = _mm256_setzero_si256();
                UNROLL for (int p = 0; p < 8; p++)
                    off = _mm256_add_epi32(off, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(g + KG_MN(1) + 32 * p)),
                                                                  bcast32(y[t]->bsums + 2 * p)));
                isum[t] = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(off, 5));
            }
        }
        if (K6) {
            for (int gr = 0; gr < 16; gr++) {
                const __m256i scv = _mm256_load_si256((const __m256i *)(g + KG_SC + 32 * gr));
                k8_group(g, y, T, 4 * gr, 2, scv, isum);
                k8_group(g, y, T, 4 * gr + 2, 2, scv, isum);
            }
        } else if (Q6 == K8_Q5) {
            for (int j = 0; j < 8; j++) {
                const __m256i scv = _mm256_load_si256((const __m256i *)(g + KG_SC + 32 * j));
                k8_group(g, y, T, 8 * j, 4, scv, isum);
                k8_group(g, y, T, 8 * j + 4, 4, scv, isum);
            }
        } else {
            for (int j = 0; j < 8; j++)
                k8_group(g, y, T, 8 * j, 8, _mm256_load_si256((const __m256i *)(g + KG_SC + 32 * j)), isum);
        }
        const __m256 dv = _mm256_load_ps((const float *)(g + KG_D(K6)));
        UNROLL for (int t = 0; t < T; t++) {
            const __m256 dy = _mm256_set1_ps(y[t]->d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dv, dy), acc[t]);
            if (K6) continue;
            const char *bs = P + t * ps + ib * KA; // 8 int16 sums of 32: pairs (2p, 2p + 1)
            __m256i md = _mm256_setzero_si256();
            UNROLL for (int p = 0; p < 4; p++)
                md = _mm256_add_epi32(md, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(g + KG_MN(0) + 32 * p)),
                                                            bcast32(bs + 4 * p)));
            const __m256 dmv = _mm256_load_ps((const float *)(g + KG_DMIN(0)));
            macc[t] = _mm256_add_ps(macc[t], _mm256_mul_ps(_mm256_mul_ps(dmv, dy), _mm256_cvtepi32_ps(md)));
        }
    }
    UNROLL for (int t = 0; t < T; t++) l8_store(Y + t * ldy, R, K6 ? acc[t] : _mm256_sub_ps(acc[t], macc[t]));
}

// q8_0 over 8 weight rows at once, rows in the lanes. The AVX2 order of q8_0 (matmul.h) is per block the exact
// integer total S of its 32 products, then acc = acc + (float(S) * dx) * dy in one chain per output, so the
// tile keeps 8 rows' chains in the lanes of one vector per token. Per token and 4 elements (a quad): one
// broadcast activation load, the sign trick (maddubs(|w|, sign(y, w)): pair sums below 2 * 128 * 127) and a
// madd to int32, for 8 rows; per block a convert, two multiplies and an add per token, where the rows form
// spent a convert and an FMA per block and output. The weights are repacked once per strip (per call, never kept):
// per 8-row group and block (Q8G_SIZE bytes) int8 q[8 quads][8 rows][4] (row r's elements 4Q .. 4Q + 3),
// then float d[8 rows]; rows past the group's real ones are zero. Prepared activations: float dy[nb].
#define Q8G_SIZE 288
#ifndef Q8G_TM
#define Q8G_TM 4
#endif
#ifndef Q8G_STRIP
#define Q8G_STRIP (96 * 1024)
#endif
static int64_t q8g_wsize(int64_t n) { return align64(n / KVT_QK * (Q8G_SIZE / 8)); }
static int64_t q8g_psize(int64_t n) { return align64(n / KVT_QK * 4); }
static void q8g_prep(int64_t n, const void *x, void *p) {
    for (int64_t b = 0; b < n / KVT_QK; b++) ((float *)p)[b] = _cvtsh_ss(((const kvt_block_q8_0 *)x)[b].d);
}
static void q8g_gprep(int64_t n, const char *w, size_t wrs, int nr, void *s) {
    for (int64_t b = 0; b < n / KVT_QK; b++) {
        char *o = (char *)s + b * Q8G_SIZE;
        float *d = (float *)(o + 256);
        __m256i v[8], t[8];
        for (int r = 0; r < 8; r++) {
            const kvt_block_q8_0 *x = (const kvt_block_q8_0 *)(w + r * (int64_t)wrs) + b;
            v[r] = r < nr ? _mm256_loadu_si256((const __m256i *)x->qs) : _mm256_setzero_si256();
            d[r] = r < nr ? _cvtsh_ss(x->d) : 0.f;
        }
        transpose8_epi32(v, t);
        for (int i = 0; i < 8; i++) _mm256_store_si256((__m256i *)(o + 32 * i), t[i]);
    }
}
INLINE void q8g_tile(TILE_ARGS, int R, int T) {
    (void)W, (void)wrs, (void)ss;
    const int64_t nb = n / KVT_QK;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[TMAX];
    UNROLL for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const char *g = S + ib * Q8G_SIZE;
        const int8_t *y[TMAX];
        __m256i isum[TMAX];
        UNROLL for (int t = 0; t < T; t++) {
            y[t] = ((const kvt_block_q8_0 *)(X + t * xrs) + ib)->qs;
            isum[t] = _mm256_setzero_si256();
        }
        UNROLL for (int q = 0; q < 8; q++) {
            const __m256i w = _mm256_load_si256((const __m256i *)(g + 32 * q)), a = _mm256_sign_epi8(w, w);
            UNROLL for (int t = 0; t < T; t++) {
                const __m256i p = _mm256_maddubs_epi16(a, _mm256_sign_epi8(bcast32(y[t] + 4 * q), w));
                isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, ones));
            }
        }
        const __m256 dv = _mm256_load_ps((const float *)(g + 256));
        UNROLL for (int t = 0; t < T; t++) {
            const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(isum[t]), dv),
                                           _mm256_broadcast_ss((const float *)(P + t * ps) + ib));
            acc[t] = _mm256_add_ps(acc[t], v);
        }
    }
    UNROLL for (int t = 0; t < T; t++) l8_store(Y + t * ldy, R, acc[t]);
}

// One noinline body per (type, T) of the 8-row tiles, the row count R (valid outputs of the group) at run time.
#define L8_T(name, BODY, T) \
    static __attribute__((noinline)) void name##_l8_t##T(TILE_ARGS, int R) { BODY(TILE_PASS, R, T); }
#define L8_RT(name, R, T) \
    static void name##_t##R##_##T(TILE_ARGS) { name##_l8_t##T(TILE_PASS, R); }
#define L8_R(name, R) L8_RT(name, R, 1) L8_RT(name, R, 2) L8_RT(name, R, 3) L8_RT(name, R, 4) \
    L8_RT(name, R, 5) L8_RT(name, R, 6) L8_RT(name, R, 7) L8_RT(name, R, 8)
#define DEFINE_L8(name, TYPE, BODY, TM, PSIZE, PREP, WSIZE, GPREP, STRIP)                             \
    L8_T(name, BODY, 1) L8_T(name, BODY, 2) L8_T(name, BODY, 3) L8_T(name, BODY, 4) L8_T(name, BODY, 5) \
    L8_T(name, BODY, 6) L8_T(name, BODY, 7) L8_T(name, BODY, 8)                                        \
    L8_R(name, 1) L8_R(name, 2) L8_R(name, 3) L8_R(name, 4) L8_R(name, 5) L8_R(name, 6) L8_R(name, 7) L8_R(name, 8) \
    static const tile_fn name##_tab[8][TMAX] = {TT8(name, 1), TT8(name, 2), TT8(name, 3), TT8(name, 4), \
                                                TT8(name, 5), TT8(name, 6), TT8(name, 7), TT8(name, 8)}; \
    DEFINE_GEMM_FNS(name, TYPE, 8, TM, PSIZE, PREP, WSIZE, NULL, STRIP, GPREP)
#ifndef K8_STRIP
#define K8_STRIP (96 * 1024) // weight bytes per strip (repacked about 2x larger)
#endif
INLINE void q4k8_tile(TILE_ARGS, int R, int T) { k8_tile(TILE_PASS, R, T, 0); }
INLINE void q6k8_tile(TILE_ARGS, int R, int T) { k8_tile(TILE_PASS, R, T, 1); }
INLINE void q5k8_tile(TILE_ARGS, int R, int T) { k8_tile(TILE_PASS, R, T, K8_Q5); }
DEFINE_GEMM(q5_K, KVT_TYPE_Q5_K, 1x8, 1, 8, k45_psize, k45_prep, k45_wsize, q5_K_wprep)
DEFINE_L8(q4_K, KVT_TYPE_Q4_K, q4k8_tile, K8_TM, k45_psize, k45_prep, q4k8_wsize, q4k8_gprep, K8_STRIP)
DEFINE_L8(q4kx8, KVT_TYPE_Q4_K_X8, q4k8_tile, K8_TM, k45_psize, k45_prep, q4k8_wsize, q4kx8_gprep, K8_STRIP)
DEFINE_L8(q5kx8, KVT_TYPE_Q5_K_X8, q5k8_tile, K8_TM, k45_psize, k45_prep, q4k8_wsize, q5kx8_gprep, K8_STRIP)
DEFINE_L8(q6_K, KVT_TYPE_Q6_K, q6k8_tile, K8_TM, k_psize0, k_prep0, q6k8_wsize, q6k8_gprep, K8_STRIP)
DEFINE_L8(q6kr, KVT_TYPE_Q6_K_R, q6k8_tile, K8_TM, k_psize0, k_prep0, q6k8_wsize, q6kr_gprep, K8_STRIP)
DEFINE_L8(q8_0, KVT_TYPE_Q8_0, q8g_tile, Q8G_TM, q8g_psize, q8g_prep, q8g_wsize, q8g_gprep, Q8G_STRIP)
#endif

#include "gemm_lowbit.h" // q2_K, q3_K, iq4_nl, iq4_xs: tiles in the low-bit GEMVs' order
