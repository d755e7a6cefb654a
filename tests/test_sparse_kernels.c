// test_sparse_kernels.c - the selection's arithmetic against scalar references (src/sparse/sparse_score*.c: the page
// and piece sums, the int8 key copies, the int16 x int8 scores, the exp and the aggregate softmax), bit for bit on
// every ISA the CPU has; called from the sparse suite (tests/test_sparse.c).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/f16.h"
#include "../src/kernels/quant.h"
#include "../src/sparse/sparse_impl.h"
#include "test.h"
#include "test_util.h"

void test_sparse_kernels(void);

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) { return test_xorshift_unit(&rng_state); } // [-1, 1)

// kvt_sparse_page_sums: each page's positions hold the page's sum in position order, as a serial loop per page.
// On every ISA the CPU has (AVX2 and AVX-512 with B a multiple of 8: kvt_sparse_page_sums_avx2 for the groups of 16 whole
// pages), with zeros of both signs among the values (a page's sum starts from its first value, not from 0).
static void test_page_sums(void) {
    enum { MAXN = 3000 };
    static float s[MAXN], a[MAXN], b[MAXN];
    const int32_t Bs[] = {1, 3, 8, 16, 17, 64, 24};
    const int nb = (int)(sizeof Bs / sizeof *Bs);
    const kvt_isa top = kvt_kernels_isa_detected(), saved = kvt_kernels_isa();
    bool ok = true;
    int cases = 0;
    for (int it = 0; it < 140 && ok; it++) {
        const int64_t n = it % 10 == 9 ? 16 * 16 * 3 : 1 + (int64_t)((frand() + 1.0f) * 0.5f * (MAXN - 1));
        const int32_t B = Bs[it % nb];
        for (int64_t t = 0; t < n; t++) s[t] = b[t] = it % 5 == 2 && t % 3 ? -0.0f : frand() * (t % 7 ? 1.0f : 1e4f);
        for (int64_t p0 = 0; p0 < n; p0 += B) {
            const int64_t p1 = p0 + B < n ? p0 + B : n;
            float m = b[p0];
            for (int64_t t = p0 + 1; t < p1; t++) m += b[t];
            for (int64_t t = p0; t < p1; t++) b[t] = m;
        }
        for (int isa = KVT_ISA_SCALAR; isa <= (int)top && ok; isa++) {
            kvt_kernels_set_isa((kvt_isa)isa);
            memcpy(a, s, (size_t)n * sizeof *a);
            kvt_sparse_page_sums(a, n, B);
            ok = memcmp(a, b, (size_t)n * sizeof *a) == 0;
            cases++;
        }
    }
    kvt_kernels_set_isa(saved);
    test_result(ok, "sparse: page sums (pages side by side) = a serial sum per page, bit for bit on every ISA", "%d cases", cases);
}

// kvt_sparse_piece_sums16: 16 pieces of B values, each summed in order from 0 as a serial loop, bit for bit, on every ISA
// the CPU has (AVX2 and AVX-512 with B a multiple of 8: the explicit kernel kvt_sparse_piece_sums16_avx2); values of mixed
// magnitudes and signs (the order of the additions shows), zeros of both signs, infinities and NaN.
static void test_piece_sums16(void) {
    static float a[16 * 48], m[16];
    const int32_t Bs[] = {1, 4, 8, 16, 17, 24, 40, 48};
    const int nb = (int)(sizeof Bs / sizeof *Bs);
    const kvt_isa top = kvt_kernels_isa_detected(), saved = kvt_kernels_isa();
    bool ok = true;
    int cases = 0;
    for (int it = 0; it < 96 && ok; it++) {
        const int32_t B = Bs[it % nb];
        for (int64_t t = 0; t < 16 * B; t++) {
            a[t] = (frand() + 1.0f) * (t % 5 ? 1e-3f : 1.0f) * (it % 7 == 0 && t % 3 == 0 ? 0.0f : 1.0f);
            if (it % 4 == 1) a[t] = frand() * (t % 3 ? 1e4f : 1e-4f); // both signs, cancellations
            if (it % 8 == 3 && t % 11 == 0) a[t] = -0.0f;
            if (it % 16 == 5 && t == 7) a[t] = INFINITY;
            if (it % 16 == 13 && t == 9) a[t] = NAN;
        }
        for (int isa = KVT_ISA_SCALAR; isa <= (int)top && ok; isa++) {
            kvt_kernels_set_isa((kvt_isa)isa);
            kvt_sparse_piece_sums16(a, B, m);
            cases++;
            for (int32_t j = 0; j < 16 && ok; j++) {
                float r = 0.0f;
                for (int32_t t = 0; t < B; t++) r += a[j * B + t];
                ok = memcmp(&r, &m[j], sizeof r) == 0 || (isnan(r) && isnan(m[j]));
            }
        }
    }
    kvt_kernels_set_isa(saved);
    test_result(ok, "sparse: the re-rank's piece sums (16 pieces side by side) = a serial sum from 0 per piece, bit for bit on every ISA",
                "%d cases", cases);
}

// The selection's arithmetic (sparse_score.c) against scalar references: the int16 x int8 scores equal the
// exactly summed products times the same scales, bit for bit; the exp within 2e-7 of expf; the aggregate of
// each head's softmax sums to 1 and matches a double-precision softmax.
// hd 72: not a multiple of the vector width (the portable loop's tails run); 64 and 128: the AVX-512 kernel where the
// CPU has it (the same bits: integer sums).
static void test_score_kernels_hd(const int HD) {
    enum { QPG = 3, N = 37, MAXHD = 128 };
    float q[QPG * MAXHD], qs[QPG], ks[N], raw[QPG * N], ref[QPG * N];
    int16_t q16[QPG * MAXHD];
    int8_t k8[N * MAXHD], kb[48 * MAXHD]; // rows [N, HD]; the same keys in the block layout (kvt_sparse_k8_at)
    for (int i = 0; i < QPG * HD; i++) q[i] = frand() * 3.0f;
    for (int i = 0; i < N * HD; i++) k8[i] = (int8_t)(frand() * 127.0f);
    k8[3] = -127, k8[HD + 5] = 127; // the extremes
    memset(kb, 0x55, sizeof kb);      // the block's unused positions: garbage, never read into a score
    for (int t = 0; t < N; t++) {
        for (int x = 0; x < HD; x++) kb[kvt_sparse_k8_at(t, x, HD)] = k8[t * HD + x];
    }
    for (int t = 0; t < N; t++) ks[t] = 0.01f + 0.02f * (frand() + 1.0f);
    kvt_sparse_quant_query(q, QPG, HD, q16, qs);
    const float scale = 0.125f;
    const int64_t n_keys = N - 2;
    const kvt_sparse_keys kk = {kb, ks, 8};
    kvt_sparse_score_keys(q16, qs, QPG, HD, kk, n_keys, N, scale, raw);
    bool ok = true;
    double qerr = 0.0;
    for (int i = 0; i < QPG; i++) {
        for (int x = 0; x < HD; x++) qerr = fmax(qerr, fabs(q16[i * HD + x] * (double)qs[i] - q[i * HD + x]) / qs[i]);
        for (int t = 0; t < N; t++) {
            int64_t sum = 0;
            for (int x = 0; x < HD; x++) sum += (int64_t)q16[i * HD + x] * k8[t * HD + x];
            ref[i * N + t] = t < n_keys ? (float)sum * (ks[t] * (qs[i] * scale)) : -INFINITY;
            ok = ok && memcmp(&ref[i * N + t], &raw[i * N + t], sizeof(float)) == 0;
        }
    }
    ok = ok && qerr <= 0.5 + 4e-3; // half a step, plus the float rounding of q / scale (|q16| < 2^15: ulp <= 2^-9)
    // rows scored in runs into their place of a wider row (a re-rank's candidates): the same bits
    float rows[QPG * N];
    for (int i = 0; i < QPG * N; i++) rows[i] = -INFINITY;
    // {first row, count}: within a block, across a block's end, a whole block, from a block's start
    const int runs[5][2] = {{0, 5}, {5, 6}, {11, 17}, {28, 4}, {32, (int)n_keys - 32}};
    for (int r = 0; r < 5; r++) {
        kvt_sparse_score_keys_rows(q16, qs, QPG, HD, kk, runs[r][0], runs[r][1], N, scale, rows + runs[r][0]);
    }
    ok = ok && memcmp(rows, ref, sizeof rows) == 0;
    double eerr = 0.0;
    for (int i = 0; i < 86900; i++) {
        const float x = -(float)i * 1e-3f;
        eerr = fmax(eerr, fabs((double)kvt_sparse_exp_neg(x) - exp((double)x)) / exp((double)x));
    }
    ok = ok && eerr < 2e-7 && kvt_sparse_exp_neg(-INFINITY) == 0.0f && kvt_sparse_exp_neg(-100.0f) == 0.0f &&
         kvt_sparse_exp_neg(0.0f) == 1.0f;
    float agg[N];
    double aerr = 0.0, total = 0.0;
    memcpy(ref, raw, sizeof raw);
    kvt_sparse_aggregate(raw, QPG, N, agg);
    for (int t = 0; t < N; t++) {
        double a = 0.0;
        for (int i = 0; i < QPG; i++) {
            double mx = -INFINITY, sum = 0.0;
            for (int u = 0; u < N; u++) mx = fmax(mx, ref[i * N + u]);
            for (int u = 0; u < N; u++) sum += exp((double)ref[i * N + u] - mx);
            a += exp((double)ref[i * N + t] - mx) / sum;
        }
        aerr = fmax(aerr, fabs(a - agg[t]));
        total += agg[t];
    }
    ok = ok && aerr < 1e-6 && fabs(total - QPG) < 1e-5 && agg[N - 1] == 0.0f;
    // in two parts (the re-rank's passes: each row's softmax on any thread, in any order, then the rows summed): the
    // same bits; a row with no finite score adds nothing
    float r1[QPG * N], r2[QPG * N], a1[N], a2[N], inv[QPG];
    memcpy(r1, ref, sizeof r1);
    for (int t = 0; t < N; t++) r1[(QPG - 1) * N + t] = -INFINITY;
    memcpy(r2, r1, sizeof r2);
    kvt_sparse_aggregate(r1, QPG, N, a1);
    for (int i = QPG - 1; i >= 0; i--) inv[i] = kvt_sparse_softmax_row(r2 + i * N, N);
    kvt_sparse_aggregate_rows(r2, QPG, N, N, inv, a2);
    ok = ok && isnan(inv[QPG - 1]) && memcmp(a1, a2, sizeof a1) == 0;
    // a part of the rows (the re-rank's middle candidates: row stride N): the same bits as that part of the whole
    float a3[N];
    kvt_sparse_aggregate_rows(r2 + 3, QPG, N - 5, N, inv, a3);
    ok = ok && memcmp(a3, a2 + 3, (size_t)(N - 5) * sizeof(float)) == 0;
    test_result(ok, HD == 72 ? "sparse: int8 scores exact, exp and group softmax against scalar references (head_dim 72)"
                : HD == 64 ? "sparse: int8 scores exact, exp and group softmax against scalar references (head_dim 64)"
                           : "sparse: int8 scores exact, exp and group softmax against scalar references (head_dim 128)",
                "query rounding %.3g steps, exp rel err %.3g, aggregate err %.3g, total %.6f", qerr, eerr, aerr, total);
}

// The softmax rows (kvt_sparse_softmax_row in place, _to into a second buffer) on every ISA the CPU has (AVX2: the
// explicit kernel kvt_sparse_exp_sum_avx2) against a portable reference: every term kvt_sparse_exp_neg(s - max), their
// sum in 16 partial sums (lane t mod 16, in order) added in order; the same bits, for lengths 0..40, 255, 256, 1000 with
// -inf, NaN, -87 and values far below the maximum among them.
static void test_softmax_isa(void) {
    enum { MAXN = 1000 };
    static float s[MAXN], a[MAXN], b[MAXN], ref[MAXN];
    const int lens[] = {0, 1, 5, 15, 16, 17, 31, 33, 40, 255, 256, MAXN};
    const kvt_isa top = kvt_kernels_isa_detected(), saved = kvt_kernels_isa();
    bool ok = true;
    int cases = 0;
    for (int l = 0; l < (int)(sizeof lens / sizeof *lens); l++) {
        const int n = lens[l];
        for (int v = 0; v < 3; v++) {
            for (int t = 0; t < n; t++) {
                const int k = (t * 7 + v * 3 + l) % 23;
                s[t] = k == 0 ? -INFINITY : k == 1 && v > 0 ? NAN : k == 2 ? -87.0f : k == 3 ? -200.0f : frand() * (v == 2 ? 60.0f : 8.0f);
            }
            float mx = -INFINITY;
            for (int t = 0; t < n; t++) mx = s[t] > mx ? s[t] : mx;
            float rinv = NAN;
            if (mx > -INFINITY) {
                float part[16] = {0}, sum = 0.0f;
                for (int t = 0; t < n; t++) part[t % 16] += (ref[t] = kvt_sparse_exp_neg(s[t] - mx));
                for (int j = 0; j < 16; j++) sum += part[j];
                rinv = sum > 0.0f ? 1.0f / sum : 0.0f;
            }
            for (int isa = KVT_ISA_SCALAR; isa <= (int)top; isa++) {
                kvt_kernels_set_isa((kvt_isa)isa);
                memcpy(a, s, (size_t)n * sizeof(float));
                const float ia = kvt_sparse_softmax_row(a, n), ib = kvt_sparse_softmax_row_to(s, b, n);
                const bool same = isnan(rinv) ? isnan(ia) && isnan(ib) : memcmp(&ia, &rinv, 4) == 0 && memcmp(&ib, &rinv, 4) == 0;
                ok = ok && same;
                if (!isnan(rinv)) ok = ok && memcmp(a, ref, (size_t)n * 4) == 0 && memcmp(b, ref, (size_t)n * 4) == 0;
                cases++;
            }
        }
    }
    kvt_kernels_set_isa(saved);
    test_result(ok, "sparse: softmax rows (in place and into a buffer) = the portable exp_neg terms and 16-lane sum, bit for bit on every ISA (lengths 0..1000, -inf, NaN)",
                "%d cases", cases);
}

// The block-layout key scans (int8: kvt_sparse_k8_at; 4-bit: kvt_sparse_k4_at) on every ISA the CPU has (the AVX-512
// VNNI kernel splits each int16 query element in two bytes) against exact int64 sums: the same bits, for 1..8 query heads
// (the kernel takes 6 per pass), head_dim 4..512 (4-bit: a last half row at 4, 72) with the extreme values (|q16| = 32767,
// k = +-127 or +-7: the int32 bound) and runs that start and end anywhere in a block; the 4-bit copies' unused nibbles
// and positions hold garbage. qbits 8: an int8 query (|q16| <= 127, --sparse-rerank-qbits 8: one VNNI product per 4
// dimensions on AVX-512, VPMADDUBSW with k's sign on AVX2), the extremes +-127.
static void test_score_blocks_bits(const int bits, const int qbits) {
    enum { MAXN = 213, MAXHD = 512, MAXQ = 8 }; // sets longer than the AVX-512 kernel's prefetch distance (64 entries)
    static int16_t q16[MAXQ * MAXHD];
    static int8_t rows[MAXN * MAXHD];
    static uint8_t kb[(MAXN + 15) / 16 * 16 * MAXHD];
    static float ks[MAXN], qs[MAXQ], out[MAXQ * MAXN], ref[MAXQ * MAXN];
    static uint16_t ks16[(MAXN + 15) / 16 * 16 * (MAXHD / 32)]; // 4-bit: f16 group scales (kvt_sparse_k4s_at)
    const int hds[] = {4, 64, 72, 256, 512};
    const int lim = bits == 4 ? 7 : 127;
    bool ok = true;
    int cases = 0;
    const kvt_isa top = kvt_kernels_isa_detected(), saved = kvt_kernels_isa();
    const kvt_sparse_keys kk = {kb, bits == 4 ? (const void *)ks16 : (const void *)ks, bits};
    for (int h = 0; h < 5; h++) {
        const int hd = hds[h];
        const int ng = bits == 4 ? kvt_sparse_k4_groups(hd) : 1, gw = hd / ng;
        for (int qpg = 1; qpg <= MAXQ; qpg++) {
            const int extreme = (qpg + h) % 3 == 0; // every product at its largest magnitude, all of one sign
            const float qlim = qbits == 8 ? 127.0f : 32767.0f;
            for (int i = 0; i < qpg * hd; i++) q16[i] = extreme ? (int16_t)(i % 2 ? -qlim : qlim) : (int16_t)lrintf(frand() * qlim);
            for (size_t i = 0; i < sizeof kb; i++) kb[i] = (uint8_t)(frand() * 127.0f + 128.0f); // garbage
            for (int t = 0; t < MAXN; t++) {
                for (int x = 0; x < hd; x++) {
                    const int8_t v = extreme ? (int8_t)((x + t) % 2 ? -lim : lim) : (int8_t)lrintf(frand() * (float)lim);
                    rows[t * hd + x] = v;
                    if (bits == 4) {
                        uint8_t *b = kb + kvt_sparse_k4_at(t, x, hd);
                        const int sh = (x >> 2 & 1) * 4;
                        *b = (uint8_t)((*b & ~(15 << sh)) | (v + 8) << sh);
                    } else {
                        kb[kvt_sparse_k8_at(t, x, hd)] = (uint8_t)v;
                    }
                }
                ks[t] = 0.01f + 0.02f * (frand() + 1.0f);
                for (int g = 0; g < ng; g++) ks16[kvt_sparse_k4s_at(t, g, ng)] = kvt_f32_to_f16(0.01f + 0.02f * (frand() + 1.0f));
            }
            for (int i = 0; i < qpg; i++) qs[i] = 0.5f + frand();
            const int t0 = (int)((frand() + 1.0f) * 10.0f), n = MAXN - t0 - (qpg % 4); // a run from t0
            for (int i = 0; i < qpg; i++) {
                for (int t = t0; t < t0 + n; t++) {
                    float f = 0.0f;
                    for (int g = 0; g < ng; g++) { // 4-bit: per scale group, the terms added in order
                        int64_t sum = 0;
                        for (int x = g * gw; x < (g + 1) * gw; x++) sum += (int64_t)q16[i * hd + x] * rows[t * hd + x];
                        ok = ok && sum >= INT32_MIN && sum <= INT32_MAX;
                        const float sc = bits == 4 ? kvt_f16_to_f32(ks16[kvt_sparse_k4s_at(t, g, ng)]) : ks[t];
                        const float term = (float)sum * (sc * (qs[i] * 0.25f));
                        f = g == 0 ? term : f + term;
                    }
                    ref[i * MAXN + t - t0] = f;
                }
            }
            for (int isa = KVT_ISA_SCALAR; isa <= (int)top; isa++) {
                kvt_kernels_set_isa((kvt_isa)isa);
                memset(out, 0, sizeof out);
                kvt_sparse_score_keys_rows(q16, qs, qpg, hd, kk, t0, n, MAXN, 0.25f, out);
                for (int i = 0; i < qpg; i++) ok = ok && memcmp(out + i * MAXN, ref + i * MAXN, (size_t)n * 4) == 0;
                // a sorted subset (a re-rank's candidates): every other run of 1..7 positions, one pass
                int32_t pos[MAXN];
                int m = 0;
                for (int t = t0, r = 0; t < t0 + n; r++) {
                    const int len = 1 + (t * 7 + r) % 7;
                    for (int u = t; r % 2 == 0 && u < t + len && u < t0 + n; u++) pos[m++] = u;
                    t += len;
                }
                memset(out, 0, sizeof out);
                kvt_sparse_score_keys_set(q16, qs, qpg, hd, kk, pos, m, MAXN, 0.25f, out);
                for (int i = 0; i < qpg; i++) {
                    for (int x = 0; x < m; x++) ok = ok && memcmp(&out[i * MAXN + x], &ref[i * MAXN + pos[x] - t0], 4) == 0;
                }
                // the same set in two parts, the second scored into its place (the re-rank's passes split a head's
                // candidates so), cut inside a block
                const int a = m / 3;
                memset(out, 0, sizeof out);
                kvt_sparse_score_keys_set(q16, qs, qpg, hd, kk, pos, a, MAXN, 0.25f, out);
                kvt_sparse_score_keys_set(q16, qs, qpg, hd, kk, pos + a, m - a, MAXN, 0.25f, out + a);
                for (int i = 0; i < qpg; i++) {
                    for (int x = 0; x < m; x++) ok = ok && memcmp(&out[i * MAXN + x], &ref[i * MAXN + pos[x] - t0], 4) == 0;
                }
                // whole blocks (a re-rank's candidates in pages of 16: the kernels' whole-block path and pairs of blocks)
                // among partial ones and gaps, whole and in parts cut inside a block and at a block's start
                m = 0;
                for (int b = t0 / 16; b * 16 < t0 + n; b++) {
                    const int kind = (b * 7 + qpg + h) % 5; // 0-2: whole, 3: part, 4: none
                    for (int u = b * 16; kind < 4 && u < b * 16 + 16; u++) {
                        if (u >= t0 && u < t0 + n && (kind < 3 || u % 3 == 0)) pos[m++] = u;
                    }
                }
                for (int cut = 0; cut < 3; cut++) {
                    const int c = cut == 0 ? m : cut == 1 ? m / 2 : (m / 2) & ~15;
                    memset(out, 0, sizeof out);
                    kvt_sparse_score_keys_set(q16, qs, qpg, hd, kk, pos, c, MAXN, 0.25f, out);
                    if (c < m) kvt_sparse_score_keys_set(q16, qs, qpg, hd, kk, pos + c, m - c, MAXN, 0.25f, out + c);
                    for (int i = 0; i < qpg; i++) {
                        for (int x = 0; x < m; x++) ok = ok && memcmp(&out[i * MAXN + x], &ref[i * MAXN + pos[x] - t0], 4) == 0;
                    }
                }
                cases++;
            }
        }
    }
    kvt_kernels_set_isa(saved);
    test_result(ok, bits == 4 ? "sparse: block-layout 4-bit scan of a range and of a sorted set (whole or in parts; runs and whole blocks) = exact sums on every ISA (1..8 query heads, head_dim 4..512, extremes)"
                : qbits == 8 ? "sparse: block-layout int8 scan, int8 query, of a range and of a sorted set (whole or in parts; runs and whole blocks) = exact sums on every ISA (1..8 query heads, head_dim 4..512, extremes)"
                             : "sparse: block-layout int8 scan of a range and of a sorted set (whole or in parts; runs and whole blocks) = exact sums on every ISA (1..8 query heads, head_dim 4..512, extremes)",
                "%d cases", cases);
}

// The key copies as observe_keys writes them (kvt_sparse_quant_key): each element within half a step of the key (a
// step: the row's scale, max |k| / 127 or / 7), the largest at +-127 / +-7, a zero row all 0 with scale 1; the other
// elements of a 4-bit byte untouched.
static void test_quant_key(void) {
    enum { NT = 20 };
    static uint8_t kc[32 * 128];
    float ks[NT], k[128];
    uint16_t ks16[32 * 4];
    bool ok = true;
    double worst = 0.0;
    for (int c = 0; c < 3; c++) { // int8 at head_dim 72, 4-bit at 72 (one scale) and 128 (4 groups of 32)
        const int bits = c == 0 ? 8 : 4, HD = c == 2 ? 128 : 72, lim = bits == 4 ? 7 : 127;
        const int ng = bits == 4 ? kvt_sparse_k4_groups(HD) : 1, gw = HD / ng;
        memset(kc, 0, sizeof kc);
        for (int t = 0; t < NT; t++) {
            // t 5: a zero row; t 7: its second group zero; the groups at different magnitudes
            for (int x = 0; x < HD; x++) k[x] = t == 5 || (t == 7 && x / gw == 1) ? 0.0f : frand() * (float)(t + 1) * (float)(1 + x / gw);
            kvt_sparse_quant_key(k, HD, bits, t, kc, bits == 4 ? (void *)ks16 : (void *)ks);
            for (int g = 0; g < ng; g++) {
                const float sc = bits == 4 ? kvt_f16_to_f32(ks16[kvt_sparse_k4s_at(t, g, ng)]) : ks[t];
                int vmax = 0;
                for (int x = g * gw; x < (g + 1) * gw; x++) {
                    const int v = bits == 4 ? (kc[kvt_sparse_k4_at(t, x, HD)] >> ((x >> 2 & 1) * 4) & 15) - 8
                                            : (int8_t)kc[kvt_sparse_k8_at(t, x, HD)];
                    vmax = abs(v) > vmax ? abs(v) : vmax;
                    worst = fmax(worst, fabs(v * (double)sc - k[x]) / sc);
                }
                const bool zero = t == 5 || (t == 7 && g == 1 && ng > 1);
                // 4-bit: the scale rounded to f16 first, so the largest may land at 6 or 8 -> clamped to 7
                ok = ok && (zero ? vmax == 0 && sc == 1.0f : bits == 4 ? vmax >= 6 && vmax <= lim : vmax == lim);
            }
        }
    }
    test_result(ok && worst <= 0.5 + 2e-3, "sparse: int8 and 4-bit (group scales, f16) key copies within half a step of the keys, extremes at +-127 / +-7",
                "worst %.4g steps", worst);
}

// The int8 copy (kvt_sparse_quant_key, 8 bits; vectorized by the compiler since 2026-12-04) = the scalar formula it
// replaced, byte for byte and scale for scale: scale max |k| / 127 (1 for a zero row), v = lrintf(k / scale) clamped to
// [-127, 127], at kvt_sparse_k8_at. Rows of head_dim 4..512 with ties at .5 steps, zeros, a denormal, +-inf and NaN.
static void test_quant_key8_ref(void) {
    enum { NT = 18, MAXHD = 512 };
    static int8_t kc[NT * MAXHD + 16 * MAXHD], ref[NT * MAXHD + 16 * MAXHD];
    float ks[NT], rs[NT], k[MAXHD];
    bool ok = true;
    int cases = 0;
    for (int hd = 4; hd <= MAXHD && ok; hd = hd < 16 ? hd + 4 : hd * 2) {
        memset(kc, 0x5a, sizeof kc), memset(ref, 0x5a, sizeof ref);
        for (int t = 0; t < NT; t++) {
            for (int x = 0; x < hd; x++) k[x] = frand() * (float)(t + 1);
            if (t == 1) memset(k, 0, sizeof k);                              // a zero row
            if (t == 2) for (int x = 0; x < hd; x++) k[x] = (float)(x % 9) - 4.0f + (x % 2 ? 0.5f : -0.5f); // ties
            if (t == 3) k[0] = 127.0f, k[hd - 1] = 63.5f;                     // scale 1: .5 steps exactly
            if (t == 4) k[hd / 2] = 1e-40f;                                  // a denormal
            if (t == 5) k[1] = INFINITY;
            if (t == 6) k[hd - 1] = -INFINITY;
            if (t == 7) k[0] = NAN;
            kvt_sparse_quant_key(k, hd, 8, t, kc, ks);
            float mx = 0.0f; // the formula it replaced
            for (int x = 0; x < hd; x++) mx = fabsf(k[x]) > mx ? fabsf(k[x]) : mx;
            const float sc = mx > 0.0f ? mx / 127.0f : 1.0f;
            rs[t] = sc;
            for (int x = 0; x < hd; x++) {
                long v = lrintf(k[x] / sc);
                v = v > 127 ? 127 : v < -127 ? -127 : v;
                ref[kvt_sparse_k8_at(t, x, hd)] = (int8_t)v;
            }
            ok = ok && memcmp(&ks[t], &rs[t], sizeof(float)) == 0;
            cases++;
        }
        ok = ok && memcmp(kc, ref, (size_t)kvt_sparse_k8_cap(NT) * hd) == 0;
    }
    test_result(ok, "sparse: int8 key copies = the scalar formula byte for byte (head_dim 4..512; ties, zeros, denormal, inf, NaN)",
                "%d rows", cases);
}

static void test_score_blocks(void) {
    test_softmax_isa();
    test_score_blocks_bits(8, 16);
    test_score_blocks_bits(8, 8);
    test_score_blocks_bits(4, 16);
    test_quant_key();
    test_quant_key8_ref();
}

static void test_score_kernels(void) {
    test_score_blocks();
    test_score_kernels_hd(72);
    test_score_kernels_hd(64);
    test_score_kernels_hd(128);
}


void test_sparse_kernels(void) {
    test_page_sums();
    test_piece_sums16();
    test_score_kernels();
}
