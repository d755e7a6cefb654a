// sparse_resid.c - the residual re-rank (--sparse-rerank-resid R, docs/SPARSE.md "Flags", docs/log/SPARSE-log-2.md "The
// residual re-rank as a flag"): the real query q's score of a candidate x as the worker's raw predicted score s^(x) (its
// int16 q^ on the int8 copies, kept in ly->shat) plus the residual's product (q - q^) . k(x) on share R of the int8
// block's 4-dimension rows, those with the most residual energy over the group's query heads, chosen per call and KV
// head. The error is the residual on the rows left out times the keys there; it matters where attention is flat over the
// candidates (errors near the cut reorder pages that hold mass). So each (layer, KV head) first takes the exact pass for
// rerank_resid_cal re-ranks and measures the share of its candidates' mass its chosen pages hold (sparse_choose.c, pass
// 3); only where the mean is >= rerank_resid_gate does it take the residual (SmolLM2: about half its heads at 4K; Gemma 3's
// flat global layers stay exact).
#include <math.h>
#include <string.h>

#include "../kernels/quant.h"
#include "sparse_impl.h"

void kvt_sparse_resid_plan(kvt_sparse *s, const kvt_sparse_layer *ly, int32_t kh, const float *q, float scale) {
    const int32_t hd = s->d.head_dim, qpg = s->qpg, ng = hd / 4;
    const double *cal = ly->rs_cal + 2 * kh; // calls measured, the sum of their kept mass shares
    s->rs_nr[kh] = 0;
    if (cal[0] < s->p.rerank_resid_cal) return; // calibrating: the exact pass
    if (!(cal[1] >= s->p.rerank_resid_gate * cal[0])) { // attention too flat over the candidates: the exact pass
        s->n_rr_exact++;
        return;
    }
    const float *pq = ly->pred_q + (int64_t)kh * s->gd;
    double en[KVT_SPARSE_MAX_HD / 4];
    for (int32_t g = 0; g < ng; g++) { // each row's residual energy over the group's query heads
        en[g] = 0.0;
        for (int32_t i = 0; i < qpg; i++) {
            for (int32_t x = 4 * g; x < 4 * g + 4; x++) {
                const double d = (double)q[(int64_t)i * hd + x] - pq[(int64_t)i * hd + x];
                en[g] += d * d;
            }
        }
    }
    int32_t nr = (int32_t)lround(s->p.rerank_resid * ng);
    nr = nr < 1 ? 1 : nr > ng ? ng : nr;
    uint8_t pick[KVT_SPARSE_MAX_HD / 4] = {0};
    for (int32_t j = 0; j < nr; j++) { // the rows with the most energy (ties: the lower row first; NaN never wins)
        int32_t b = -1;
        for (int32_t g = 0; g < ng; g++) {
            if (!pick[g] && (b < 0 || en[g] > en[b])) b = g;
        }
        pick[b] = 1;
    }
    int32_t *rows = s->rs_rows + (int64_t)kh * (ng + 1);
    for (int32_t g = 0, j = 0; g < ng; g++) {
        if (pick[g]) rows[j++] = g; // ascending: the block's rows in memory order
    }
    float dc[KVT_SPARSE_MAX_HD]; // one query head's residual over the rows, rounded to int8 with its scale
    int16_t q16[KVT_SPARSE_MAX_HD];
    float qsc;
    int8_t *d8 = s->rs_d8 + (int64_t)kh * s->gd;
    for (int32_t i = 0; i < qpg; i++) {
        for (int32_t j = 0; j < nr; j++) {
            for (int32_t c = 0; c < 4; c++) {
                const int64_t x = (int64_t)i * hd + 4 * rows[j] + c;
                dc[4 * j + c] = q[x] - pq[x];
            }
        }
        kvt_sparse_quant_query_bits(dc, 1, 4 * nr, 8, q16, &qsc);
        int32_t sm = 0;
        for (int32_t x = 0; x < 4 * nr; x++) d8[(int64_t)i * 4 * nr + x] = (int8_t)q16[x], sm += q16[x];
        s->rs_corr[(int64_t)kh * qpg + i] = 128 * sm;
        s->rs_qs[(int64_t)kh * qpg + i] = qsc * scale;
    }
    s->rs_nr[kh] = nr;
    s->n_rr_resid++;
    s->n_rr_rows += nr;
}

void kvt_sparse_resid_rows(const int8_t *d8, const int32_t *corr, const float *qs, int32_t qpg, int32_t hd, const int32_t *rows,
                           int32_t nr, kvt_sparse_keys k, const int32_t *pos, int64_t m, const float *shat, int64_t sh_stride,
                           int64_t stride, float *raw) {
#if defined(__x86_64__)
    if (kvt_kernels_isa() == KVT_ISA_AVX512) {
        kvt_sparse_resid_avx512(d8, corr, qs, qpg, hd, rows, nr, k, pos, m, shat, sh_stride, stride, raw);
        return;
    }
    bool d127 = true; // the AVX2 form takes d with k's sign: every element in [-127, 127] (the plan's int8 residual is)
    for (int64_t x = 0; x < (int64_t)qpg * 4 * nr; x++) d127 = d127 && d8[x] != -128;
    if (kvt_kernels_isa() == KVT_ISA_AVX2 && d127) {
        kvt_sparse_resid_avx2(d8, qs, qpg, hd, rows, nr, k, pos, m, shat, sh_stride, stride, raw);
        return;
    }
#endif
    (void)corr; // the portable loop sums d . k directly (the kernel's (k + 128) . d - corr is the same integer)
    const int8_t *k8 = k.kc;
    const float *ks = k.ks;
    for (int64_t x = 0; x < m; x++) {
        const int64_t t = pos[x];
        for (int32_t i = 0; i < qpg; i++) {
            int32_t sm = 0;
            for (int32_t j = 0; j < nr; j++) {
                for (int32_t c = 0; c < 4; c++) sm += (int32_t)d8[i * 4 * nr + 4 * j + c] * k8[kvt_sparse_k8_at(t, 4 * rows[j] + c, hd)];
            }
            raw[(int64_t)i * stride + x] = shat[(int64_t)i * sh_stride + t] + (float)sm * (ks[t] * qs[i]);
        }
    }
}

void kvt_sparse_resid_score(const kvt_sparse *s, const kvt_sparse_layer *ly, int32_t kh, int64_t P, const int32_t *sel,
                            int64_t x0, int64_t x1, int64_t nc, float *raw) {
    const int32_t hd = s->d.head_dim, qpg = s->qpg, ng = hd / 4;
    // s^: row i at i * (P + 1), by position (the worker's selection for P)
    kvt_sparse_resid_rows(s->rs_d8 + (int64_t)kh * s->gd, s->rs_corr + (int64_t)kh * qpg, s->rs_qs + (int64_t)kh * qpg, qpg, hd,
                          s->rs_rows + (int64_t)kh * (ng + 1), s->rs_nr[kh], kvt_sparse_keys_of(ly, 8, kh, hd), sel + x0, x1 - x0,
                          ly->shat + (int64_t)kh * qpg * ly->cap, P + 1, nc, raw + x0);
}
