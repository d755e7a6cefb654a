// test_sparse_resid.c - the residual re-rank's loop (--sparse-rerank-resid; src/sparse/sparse_resid.c), called from the
// sparse suite (tests/test_sparse.c).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/quant.h"
#include "../src/sparse/sparse_impl.h"
#include "test.h"
#include "test_util.h"

void test_sparse_resid_rows(void);

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) { return test_xorshift_unit(&rng_state); } // [-1, 1)

// --sparse-rerank-resid's loop (kvt_sparse_resid_rows): s^ + the int8 residual's exact integer sum over the chosen
// rows times (ks * qs), the same bits on every ISA (1..8 query heads, head_dim 4..256, runs, whole blocks, parts, the
// extremes); and with every row chosen, s^ from the predicted query plus the residual is the real query's score within
// the int8 roundings (the re-rank's exact score).
void test_sparse_resid_rows(void) {
    enum { MAXN = 213, MAXHD = 256, MAXQ = 8 };
    static int8_t d8[MAXQ * MAXHD], rows8[MAXN * MAXHD];
    static uint8_t kb[(MAXN + 15) / 16 * 16 * MAXHD];
    static float ks[MAXN], qs[MAXQ], shat[MAXQ * MAXN], out[MAXQ * MAXN], ref[MAXQ * MAXN];
    static int32_t corr[MAXQ], rsel[MAXHD / 4], pos[MAXN];
    const int hds[] = {4, 64, 72, 256};
    bool ok = true, close = true;
    int cases = 0;
    double worst = 0.0;
    const kvt_isa top = kvt_kernels_isa_detected(), saved = kvt_kernels_isa();
    const kvt_sparse_keys kk = {kb, ks, 8};
    for (int h = 0; h < 4; h++) {
        const int hd = hds[h], ng = hd / 4;
        for (int qpg = 1; qpg <= MAXQ; qpg++) {
            const int extreme = (qpg + h) % 3 == 0;
            const int nr = (qpg + h) % 2 ? ng : (ng + 1) / 2; // every row, or about half of them (every other one)
            for (int j = 0; j < nr; j++) rsel[j] = nr == ng ? j : 2 * j < ng ? 2 * j : j;
            for (int i = 0; i < qpg * 4 * nr; i++) d8[i] = extreme ? (int8_t)(i % 2 ? -127 : 127) : (int8_t)lrintf(frand() * 127.0f);
            if (qpg == 5 && !extreme) d8[qpg * 4 * nr - 1] = -128; // outside the plan's range: the AVX2 form's guard
            for (int i = 0; i < qpg; i++) {
                int32_t sm = 0;
                for (int x = 0; x < 4 * nr; x++) sm += d8[i * 4 * nr + x];
                corr[i] = 128 * sm;
                qs[i] = 0.5f + frand();
            }
            for (int t = 0; t < MAXN; t++) {
                for (int x = 0; x < hd; x++) {
                    const int8_t v = extreme ? (int8_t)((x + t) % 2 ? -127 : 127) : (int8_t)lrintf(frand() * 127.0f);
                    rows8[t * hd + x] = v;
                    kb[kvt_sparse_k8_at(t, x, hd)] = (uint8_t)v;
                }
                ks[t] = 0.01f + 0.02f * (frand() + 1.0f);
                for (int i = 0; i < qpg; i++) shat[i * MAXN + t] = frand() * 10.0f;
            }
            for (int i = 0; i < qpg; i++) {
                for (int t = 0; t < MAXN; t++) {
                    int32_t sm = 0;
                    for (int j = 0; j < nr; j++) {
                        for (int c = 0; c < 4; c++) sm += d8[i * 4 * nr + 4 * j + c] * rows8[t * hd + 4 * rsel[j] + c];
                    }
                    ref[i * MAXN + t] = shat[i * MAXN + t] + (float)sm * (ks[t] * qs[i]);
                }
            }
            int m = 0; // whole blocks among partial ones and gaps
            for (int b = 0; b * 16 < MAXN; b++) {
                const int kind = (b * 7 + qpg + h) % 5;
                for (int u = b * 16; kind < 4 && u < b * 16 + 16 && u < MAXN; u++) {
                    if (kind < 3 || u % 3 == 0) pos[m++] = u;
                }
            }
            for (int isa = KVT_ISA_SCALAR; isa <= (int)top; isa++) {
                kvt_kernels_set_isa((kvt_isa)isa);
                for (int cut = 0; cut < 2; cut++) { // whole, or in two parts cut inside a block (pass 1's chunks)
                    const int c = cut ? m / 2 + 1 : m;
                    memset(out, 0, sizeof out);
                    kvt_sparse_resid_rows(d8, corr, qs, qpg, hd, rsel, nr, kk, pos, c, shat, MAXN, MAXN, out);
                    if (c < m) kvt_sparse_resid_rows(d8, corr, qs, qpg, hd, rsel, nr, kk, pos + c, m - c, shat, MAXN, MAXN, out + c);
                    for (int i = 0; i < qpg; i++) {
                        for (int x = 0; x < m; x++) ok = ok && memcmp(&out[i * MAXN + x], &ref[i * MAXN + pos[x]], 4) == 0;
                    }
                }
                cases++;
            }
        }
        // every row: s^ (the predicted query q^ as int16 on the int8 keys) + the residual q - q^ as int8 on every row =
        // the real query q's float score on the int8 keys, within the roundings of q^ and q - q^
        const int qpg = 3;
        float q[MAXQ * MAXHD], pq[MAXQ * MAXHD], dres[MAXHD];
        int16_t q16[MAXQ * MAXHD], r16[MAXHD];
        float pqs[MAXQ], dsc;
        for (int i = 0; i < qpg * hd; i++) q[i] = frand() * 2.0f, pq[i] = q[i] + 0.3f * frand();
        kvt_sparse_quant_query(pq, qpg, hd, q16, pqs);
        for (int t = 0; t < MAXN; t++) pos[t] = t;
        kvt_sparse_score_keys_set(q16, pqs, qpg, hd, kk, pos, MAXN, MAXN, 0.125f, shat);
        for (int j = 0; j < ng; j++) rsel[j] = j;
        for (int i = 0; i < qpg; i++) {
            for (int x = 0; x < hd; x++) dres[x] = q[i * hd + x] - pq[i * hd + x];
            kvt_sparse_quant_query_bits(dres, 1, hd, 8, r16, &dsc);
            int32_t sm = 0;
            for (int x = 0; x < hd; x++) d8[i * hd + x] = (int8_t)r16[x], sm += r16[x];
            corr[i] = 128 * sm;
            qs[i] = dsc * 0.125f;
        }
        kvt_sparse_resid_rows(d8, corr, qs, qpg, hd, rsel, ng, kk, pos, MAXN, shat, MAXN, MAXN, out);
        for (int i = 0; i < qpg; i++) {
            double qn = 0.0;
            for (int x = 0; x < hd; x++) qn += (double)q[i * hd + x] * q[i * hd + x];
            for (int t = 0; t < MAXN; t++) {
                double e = 0.0, kn = 0.0;
                for (int x = 0; x < hd; x++) {
                    const double kv = rows8[t * hd + x] * (double)ks[t];
                    e += q[i * hd + x] * kv, kn += kv * kv;
                }
                const double err = fabs(out[i * MAXN + t] - 0.125 * e) / (0.125 * sqrt(qn * kn)); // relative to |q| |k|
                worst = err > worst ? err : worst;
                close = close && err < 2e-3;
            }
        }
    }
    kvt_kernels_set_isa(saved);
    test_result(ok, "sparse: residual re-rank rows (s^ + int8 residual on chosen rows) = exact sums on every ISA (1..8 query heads, head_dim 4..256, whole and half the rows, blocks, parts, extremes)",
                "%d cases", cases);
    test_result(close, "sparse: residual re-rank on every row = the real query's score on the int8 keys within the roundings",
                "worst %.3g of |q| |k|", worst);
}

