// test_sparse.c - sparse decode attention (src/sparse/): the predictor, Quest's bounds, top-k, exact
// attention over a set, and the selections in a context (oracle = dense at full budget, thread counts,
// the asyncspade worker against inline selection).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/exec/context.h"
#include "../src/exec/session.h"
#include "../src/kernels/f16.h"
#include "../src/kernels/quant.h"
#include "../src/model/model.h"
#include "../src/kv/kv_paged.h"
#include "../src/sparse/sparse_impl.h"
#include "test.h"
#include "test_util.h"

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) { return test_xorshift_unit(&rng_state); } // [-1, 1)

// q_t = 2 cos(th) q_{t-1} - q_{t-2}: a rotation (what RoPE does to a fixed query), a linear recurrence of order
// 2; the ridge predictor (no softmax) with windows >= 2 predicts it; with softmax weights a constant sequence.
static void test_predictor(void) {
    enum { D = 16, N = 12 };
    float hist[N + 1][D], pred[D], work[D];
    const float th = 0.3f;
    for (int x = 0; x < D; x++) {
        hist[0][x] = frand();
        hist[1][x] = frand();
    }
    for (int t = 2; t <= N; t++) {
        for (int x = 0; x < D; x++) hist[t][x] = 2.0f * cosf(th) * hist[t - 1][x] - hist[t - 2][x];
    }
    const int32_t windows[3] = {2, 4, 8};
    kvt_sparse_predict(&hist[0][0], N, D, windows, 3, 1e-9, false, pred, work);
    double err = 0, mag = 0;
    for (int x = 0; x < D; x++) {
        err = fmax(err, fabs((double)pred[x] - hist[N][x]));
        mag = fmax(mag, fabs((double)hist[N][x]));
    }
    test_result(err <= 1e-4 * fmax(mag, 1.0), "sparse: ridge predictor predicts a linear recurrence (rotation)",
                "max error %.3g of %.3g", err, mag);
    for (int t = 0; t < N; t++) {
        for (int x = 0; x < D; x++) hist[t][x] = hist[0][x];
    }
    kvt_sparse_predict(&hist[0][0], N, D, windows, 3, 1e-3, true, pred, work);
    err = 0;
    for (int x = 0; x < D; x++) err = fmax(err, fabs((double)pred[x] - hist[0][x]));
    kvt_sparse_predict(&hist[0][0], 1, D, windows, 3, 1e-3, true, work, work); // one row: itself
    test_result(err <= 1e-5 && work[0] == hist[0][0], "sparse: softmax-normalized predictor keeps a constant query",
                "max error %.3g", err);
}

// The predictor's Gram matrix kept from step to step (kvt_sparse_gram_update, as the selection keeps it per layer and KV
// head): over a stream of history rows (one or several per step, steps without a prediction, rewinds), the prediction
// from the kept matrix = the prediction computing it whole, bit for bit, ridge and simplex.
static void test_predict_gram(void) {
    enum { D = 24, W1 = 9 };
    float hist[W1][D], p1[D], p2[D], work[D];
    double G[W1 * W1];
    const int32_t windows[3] = {2, 4, 8};
    int32_t hn = 0, gn = 0, gs = 0;
    bool ok = true;
    int bad = -1;
    for (int step = 0; step < 300 && ok; step++) {
        const int r = (int)((frand() + 1.0f) * 8.0f); // 0..15
        if (r == 0) hn = gn = gs = 0;                 // a rewind
        const int add = r == 1 ? 3 : r == 2 ? 12 : 1;  // rows arriving (a prompt chunk: more than the window)
        for (int a = 0; a < add; a++) {
            if (hn == W1) memmove(hist[0], hist[1], sizeof hist[0] * (W1 - 1)), gs++;
            for (int x = 0; x < D; x++) hist[hn == W1 ? W1 - 1 : hn][x] = frand() * (x % 3 ? 1.0f : 5.0f);
            hn = hn == W1 ? W1 : hn + 1;
        }
        if (r == 3 || r == 4) continue; // no prediction at this step: the shifts accumulate
        const bool simplex = step % 5 == 0;
        kvt_sparse_gram_update(&hist[0][0], hn, D, G, W1, &gn, &gs);
        kvt_sparse_predict_gram(&hist[0][0], hn, D, windows, 3, 1e-3, simplex, G, W1, p1, work);
        if (simplex) kvt_sparse_predict_simplex(&hist[0][0], hn, D, windows, 3, 1e-3, p2, work);
        else kvt_sparse_predict(&hist[0][0], hn, D, windows, 3, 1e-3, true, p2, work);
        ok = gn == hn && gs == 0 && memcmp(p1, p2, sizeof p1) == 0;
        bad = step;
    }
    test_result(ok, "sparse: predictor on the Gram matrix kept from step to step = computed whole, bit for bit (ridge, simplex)",
                "differ at step %d", bad);
}

// kvt_sparse_weighted_kth (a radix select) = the k-th largest by a sort, counting each value its weight times, for random
// multisets with ties, negative values, both zeros and infinities, every k at the edges and random ones between.
static int cmp_desc(const void *x, const void *y) {
    const float a = *(const float *)x, b = *(const float *)y;
    return a > b ? -1 : a < b;
}

static void test_weighted_kth(void) {
    enum { MAXN = 700 };
    static float v[MAXN], vs[MAXN], sorted[MAXN * 8];
    static int32_t w[MAXN], ws[MAXN];
    bool ok = true;
    int bad_it = -1;
    for (int it = 0; it < 400 && ok; it++) {
        const int64_t n = 1 + (int64_t)((frand() + 1.0f) * 0.5f * (MAXN - 1)) % (it % 3 ? MAXN : 20);
        const int levels = it % 4 == 0 ? 3 : 1000; // many ties, or few
        int64_t total = 0, ns = 0;
        for (int64_t i = 0; i < n; i++) {
            float x = (float)(int)((frand() + 1.0f) * 0.5f * levels) / (float)levels * (it % 2 ? 1.0f : -2.0f) + (it % 5 == 0 ? 0.5f : 0.0f);
            if (i % 53 == 7) x = -0.0f;
            if (i % 61 == 3) x = 0.0f;
            if (it % 9 == 0 && i % 17 == 1) x = INFINITY;
            if (it % 11 == 0 && i % 13 == 2) x = -INFINITY;
            if (it % 6 == 0) x = ldexpf(1.0f + frand() * 0.5f, (int)(frand() * 30.0f)); // wide exponents
            v[i] = x;
            w[i] = 1 + (int32_t)((frand() + 1.0f) * 0.5f * 7.0f);
            for (int32_t r = 0; r < w[i]; r++) sorted[ns++] = x;
            total += w[i];
        }
        qsort(sorted, (size_t)ns, sizeof *sorted, cmp_desc);
        for (int64_t j = 0; j < 12 && ok; j++) {
            const int64_t k = j == 0 ? 1 : j == 1 ? total : 1 + (int64_t)((frand() + 1.0f) * 0.5f * (float)(total - 1));
            memcpy(vs, v, (size_t)n * sizeof *v);
            memcpy(ws, w, (size_t)n * sizeof *w);
            const float got = kvt_sparse_weighted_kth(vs, ws, n, k);
            ok = got == sorted[k - 1];
            if (!ok) bad_it = it;
        }
    }
    test_result(ok, "sparse: weighted k-th largest (radix select) = the k-th of the sorted multiset (ties, +-0, +-inf, wide exponents)",
                "differs at iteration %d", bad_it);
}

// Eq. 2 read literally (weights on the simplex): an alternating sequence a, b, a, b, ... is continued exactly
// (each window's weights go to the rows equal to the last one, the shifted window then gives the other);
// softmax-normalized ridge weights cannot (softmax(1, 0) mixes both rows).
static void test_predictor_simplex(void) {
    enum { D = 16, N = 12 };
    float hist[N][D], pred[D], work[D];
    for (int x = 0; x < D; x++) {
        hist[0][x] = frand();
        hist[1][x] = frand();
    }
    for (int t = 2; t < N; t++) memcpy(hist[t], hist[t - 2], sizeof hist[t]);
    const int32_t windows[3] = {2, 4, 8};
    kvt_sparse_predict_simplex(&hist[0][0], N, D, windows, 3, 1e-9, pred, work);
    double err = 0, errs = 0;
    for (int x = 0; x < D; x++) err = fmax(err, fabs((double)pred[x] - hist[N - 2][x]));
    kvt_sparse_predict(&hist[0][0], N, D, windows, 3, 1e-9, true, pred, work);
    for (int x = 0; x < D; x++) errs = fmax(errs, fabs((double)pred[x] - hist[N - 2][x]));
    test_result(err <= 1e-3 && errs > 0.05, "sparse: simplex-weight predictor continues an alternating sequence",
                "max error %.3g (softmax-normalized: %.3g)", err, errs);
}

// RoPE alignment: rows R(p) x of one raw query x at positions P - n .. P - 1 all become R(P) x.
static void test_rope_align(void) {
    enum { HD = 16, HEADS = 2, N = 6, P = 37 };
    const kvt_rope_params rp = {HD, 1, 10000.0f, 1.0f, NULL};
    float x[HEADS * HD], want[HEADS * HD], hist[N][HEADS * HD], cs[HD];
    for (int i = 0; i < HEADS * HD; i++) x[i] = frand();
    for (int i = 0; i < N; i++) {
        memcpy(hist[i], x, sizeof x);
        kvt_rope_cache(&rp, P - N + i, cs);
        for (int j = 0; j < HEADS; j++) kvt_rope_apply(&rp, cs, hist[i] + j * HD);
    }
    memcpy(want, x, sizeof x);
    kvt_rope_cache(&rp, P, cs);
    for (int j = 0; j < HEADS; j++) kvt_rope_apply(&rp, cs, want + j * HD);
    kvt_sparse_rope_align(&hist[0][0], N, HEADS, HD, &rp, cs);
    double err = 0;
    for (int i = 0; i < N; i++) {
        for (int x0 = 0; x0 < HEADS * HD; x0++) err = fmax(err, fabs((double)hist[i][x0] - want[x0]));
    }
    test_result(err <= 1e-4, "sparse: rope_align rotates past queries to the next position's phase", "max error %.3g", err);
}

// Upper bounds: for random f16-rounded keys of a page and random queries, the bound is >= every q . k.
static void test_quest_bound(void) {
    enum { D = 64, P = 16, TRIALS = 200 };
    float k[P][D], lo[D], hi[D], q[D];
    bool ok = true;
    double worst = 1e30;
    for (int tr = 0; tr < TRIALS && ok; tr++) {
        for (int x = 0; x < D; x++) lo[x] = INFINITY, hi[x] = -INFINITY;
        const float sc = tr % 2 ? 30.0f : 0.01f;
        for (int t = 0; t < P; t++) {
            for (int x = 0; x < D; x++) {
                k[t][x] = kvt_f16_to_f32(kvt_f32_to_f16(frand() * sc));
                lo[x] = fminf(lo[x], k[t][x]);
                hi[x] = fmaxf(hi[x], k[t][x]);
            }
        }
        for (int x = 0; x < D; x++) q[x] = frand() * sc;
        const float b = kvt_sparse_quest_bound(q, lo, hi, D);
        for (int t = 0; t < P; t++) {
            float d = 0.0f;
            for (int x = 0; x < D; x++) d += q[x] * k[t][x];
            ok = ok && b >= d;
            worst = fmin(worst, (double)b - d);
        }
    }
    test_result(ok, "sparse: quest page bounds are upper bounds of q.k (f16 keys, 200 pages)", "bound below a dot by %.3g", -worst);
}

void test_sparse_resid_rows(void); // tests/test_sparse_resid.c
void test_sparse_kernels(void);    // tests/test_sparse_kernels.c

typedef struct {
    float v;
    int32_t i;
} vi_pair;

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_vi(const void *a, const void *b) { // value descending (float order: -0 == +0), then position
    const vi_pair *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return (x->i > y->i) - (x->i < y->i);
}

// kvt_sparse_topk against a comparison sort (the K - sink - recent best middle positions, ties by position, NaN as
// -inf) on random scores drawn from a few values (ties), with -0 and +0, -inf, NaN, huge and tiny values, and page
// runs of equal scores: the same positions.
static void test_topk_random(void) {
    enum { MAXN = 3000 };
    static float score[MAXN], vals[MAXN];
    static int32_t sel[MAXN], ref[MAXN], selp[MAXN], wts[MAXN + 2], pos[MAXN], selc[MAXN];
    static float sc2[MAXN];
    bool okp = true;
    int badp = -1;
    static uint8_t mark[MAXN];
    static vi_pair pr[MAXN];
    const float pool[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -INFINITY, NAN, 3e38f, -3e38f, 1e-40f, -1e-40f, 2.0f};
    bool ok = true;
    int bad = -1;
    for (int it = 0; it < 400 && ok; it++) {
        const int64_t n = 1 + (int64_t)((frand() + 1.0f) * 0.5f * (MAXN - 1));
        const int mode = it % 3; // 0: a few values, 1: continuous, 2: runs of 16 equal (pages)
        for (int64_t t = 0; t < n; t++) {
            if (mode == 0) score[t] = pool[(int)((frand() + 1.0f) * 6.0f) % 12];
            else if (mode == 1) score[t] = frand() * 100.0f;
            else score[t] = t % 16 ? score[t - 1] : pool[(int)((frand() + 1.0f) * 6.0f) % 12] * (it % 2 ? 1.0f : (float)(t % 5));
        }
        const int64_t sink = it % 5, recent = 1 + it % 7, K = (int64_t)((frand() + 1.0f) * 0.5f * (double)n);
        const int64_t m = kvt_sparse_topk(score, n, K, sink, recent, sel, mark, vals);
        if (mode == 2) { // over the pages: the same positions
            const int64_t mp = kvt_sparse_topk_pages(score, n, K, sink, recent, 16, NULL, selp, vals, wts);
            okp = okp && mp == m && memcmp(selp, sel, (size_t)m * sizeof *sel) == 0;
            // a sorted subset of positions (candidates) with their pages' scores, pages of 8
            int64_t nc = 0;
            for (int64_t t = 0; t < n; t++) {
                if (frand() > -0.3f) pos[nc] = (int32_t)t, sc2[nc++] = score[t / 8 * 8];
            }
            const int64_t Kc = K * nc / (n > 0 ? n : 1);
            const int64_t mc = kvt_sparse_topk(sc2, nc, Kc, sink, recent, selc, mark, vals);
            const int64_t mq = kvt_sparse_topk_pages(sc2, nc, Kc, sink, recent, 8, pos, selp, vals, wts);
            okp = okp && mq == mc && memcmp(selp, selc, (size_t)mc * sizeof *selc) == 0;
            if (!okp && badp < 0) badp = it;
        }
        // the reference
        const int64_t s0 = sink < n ? sink : n, r0 = recent < n - s0 ? recent : n - s0, m1 = n - r0;
        int64_t c = 0, np = 0;
        for (int64_t t = 0; t < s0; t++) ref[c++] = (int32_t)t;
        for (int64_t t = s0; t < m1; t++) pr[np++] = (vi_pair){isnan(score[t]) ? -INFINITY : score[t], (int32_t)t};
        qsort(pr, (size_t)np, sizeof *pr, cmp_vi);
        int64_t kk = K - s0 - r0;
        if (kk > np) kk = np;
        for (int64_t x = 0; x < kk; x++) ref[c++] = pr[x].i;
        for (int64_t t = m1; t < n; t++) ref[c++] = (int32_t)t;
        qsort(ref, (size_t)c, sizeof *ref, cmp_i32);
        ok = m == c && memcmp(sel, ref, (size_t)c * sizeof *sel) == 0;
        if (!ok) bad = it;
    }
    test_result(ok, "sparse: top-k equals a comparison sort's choice (ties, -0/+0, -inf, NaN, pages; 400 draws)",
                "first mismatch at draw %d", bad);
    test_result(okp, "sparse: top-k over pages of equal scores = top-k over the positions, all positions or a sorted subset (ties, -0/+0, -inf, NaN; 133 draws)",
                "first mismatch at draw %d", badp);
}

static void test_topk(void) {
    enum { N = 100 };
    float score[N], vals[N];
    int32_t sel[N];
    uint8_t mark[N];
    for (int i = 0; i < N; i++) score[i] = (float)((i * 37) % N); // a permutation of 0 .. 99
    score[50] = score[51] = 1000.0f;
    const int64_t n = kvt_sparse_topk(score, N, 10, 3, 4, sel, mark, vals);
    bool ok = n == 10;
    for (int i = 0; ok && i < 3; i++) ok = sel[i] == i;          // sink
    for (int i = 0; ok && i < 4; i++) ok = sel[6 + i] == 96 + i; // recent
    ok = ok && sel[3] < sel[4] && sel[4] < sel[5];
    int has50 = 0, has51 = 0;
    for (int i = 0; i < n; i++) has50 |= sel[i] == 50, has51 |= sel[i] == 51;
    ok = ok && has50 && has51;
    const int64_t all = kvt_sparse_topk(score, N, 200, 3, 4, sel, mark, vals);
    ok = ok && all == N && sel[N - 1] == N - 1;
    test_result(ok, "sparse: top-k keeps sink and recent, the best of the rest, sorted", "got %lld positions", (long long)n);
}

// --sparse-keep: a page the previous decode step kept stays in the set against a new page with less than (1 + keep)
// times its mass; without keep, or when the kept set is not the previous step's (a gap), the better page wins; a fork
// keeps its parent's kept pages. One KV head, head_dim 4, pages of 4, K = 9 (two pages + the recent position).
static void keep_step(kvt_sparse *s, int32_t seq, int64_t P, const float *q, int32_t *pages) {
    kvt_sparse_layer *ly = &kvt_sparse_seq_get(s, seq)->lay[0];
    for (int32_t t = 0; t <= P; t++) ly->sel[t] = t; // every position a candidate
    ly->nsel[0] = P + 1;
    kvt_sparse_rerank(s, ly, P, q, 1.0f, NULL, true);
    pages[0] = pages[1] = -1;
    for (int64_t x = 0, k = 0; x < ly->nsel[0]; x++) {
        if (ly->sel[x] < P && (k == 0 || pages[k - 1] != ly->sel[x] / 4) && k < 2) pages[k++] = ly->sel[x] / 4;
    }
}

static bool keep_case(double keep, bool gap, bool fork, int32_t *p1, int32_t *p2) {
    kvt_sparse_params p = {.mode = KVT_SPARSE_ASYNCSPADE, .budget = 9, .sink = 0, .recent = 1, .rerank = 4.0,
                           .block = 4, .rerank_block = 4, .keep = keep, .sync = true};
    const kvt_sparse_dims d = {.n_layer = 1, .n_head = 1, .n_head_kv = 1, .head_dim = 4, .head_dim_v = 4, .n_ctx = 64,
                               .n_threads = 1, .kv_type = KVT_TYPE_F32};
    kvt_sparse *s = NULL;
    kvt_err err;
    if (kvt_sparse_init(&p, &d, &s, &err)) return false;
    kvt_sparse_seq *q = kvt_sparse_seq_get(s, 0);
    bool ok = q && !kvt_sparse_layer_reserve(s, q, 0, 64, &err);
    if (ok) { // keys: page 2 along x0, page 4 along x1, page 6 along x2 (|k| = 1), the rest 0
        kvt_sparse_layer *ly = &q->lay[0];
        for (int t = 0; t < 64; t++) {
            ly->k8s[t] = 1.0f / 127.0f;
            for (int x = 0; x < 4; x++) ly->k8[kvt_sparse_k8_at(t, x, 4)] = (int8_t)((t / 4 == 2 && x == 0) || (t / 4 == 4 && x == 1) || (t / 4 == 6 && x == 2) ? 127 : 0);
        }
        const float q1[4] = {3.0f, 3.0f, 2.7f, 0.0f}, q2[4] = {3.0f, 2.85f, 3.0f, 0.0f}; // page 6 overtakes page 4
        keep_step(s, 0, 40, q1, p1);
        if (fork) ok = !kvt_sparse_seq_fork(s, 0, 1, 41, &err);
        keep_step(s, fork ? 1 : 0, gap ? 42 : 41, q2, p2);
    }
    kvt_sparse_free(s);
    return ok;
}

static void test_keep(void) {
    int32_t a1[2], a2[2], b1[2], b2[2], c1[2], c2[2], d1[2], d2[2];
    bool ok = keep_case(0.0, false, false, a1, a2) && keep_case(1.0, false, false, b1, b2) && keep_case(1.0, true, false, c1, c2) &&
              keep_case(1.0, false, true, d1, d2);
    ok = ok && a1[0] == 2 && a1[1] == 4 && b1[0] == 2 && b1[1] == 4; // step 1: pages 2 and 4 either way
    ok = ok && a2[0] == 2 && a2[1] == 6;                             // no keep: page 6 replaces page 4
    ok = ok && b2[0] == 2 && b2[1] == 4;                             // keep 1: page 4 (2 x its mass) stays
    ok = ok && c2[0] == 2 && c2[1] == 6;                             // kept at P - 2: not used
    ok = ok && d2[0] == 2 && d2[1] == 4;                             // a fork keeps its parent's kept pages
    test_result(ok, "sparse: --sparse-keep keeps the previous step's page against a better one below (1 + keep) x, not after a gap; fork copies it",
                "pages %d %d -> %d %d (off), %d %d (keep), %d %d (gap), %d %d (fork)", a1[0], a1[1], a2[0], a2[1], b2[0], b2[1],
                c2[0], c2[1], d2[0], d2[1]);
}

// A re-rank over every position of H KV heads (one query head each, head_dim 4, pages of 4, K = 9 with recent 1 and
// sink 0, n_ctx 64) at decode position P (no rewind between calls); key(kh, t) gives the int8 key's dimension with
// 127 (else 0; -1: none). sel[kh][0 .. n[kh]) gets the set.
static bool rr_case(kvt_sparse *s, int32_t H, int64_t P, const float *q, int (*key)(int32_t, int32_t), int32_t sel[][64], int64_t *n) {
    kvt_sparse_layer *ly = &kvt_sparse_seq_get(s, 0)->lay[0];
    for (int32_t kh = 0; kh < H; kh++) {
        for (int t = 0; t < 64; t++) {
            ly->k8s[kh * ly->cap + t] = 1.0f / 127.0f;
            for (int x = 0; x < 4; x++) ly->k8[kh * ly->cap * 4 + kvt_sparse_k8_at(t, x, 4)] = (int8_t)(key(kh, t) == x ? 127 : 0);
        }
        for (int32_t t = 0; t <= P; t++) ly->sel[kh * ly->cap + t] = t;
        ly->nsel[kh] = P + 1;
    }
    kvt_sparse_rerank(s, ly, P, q, 1.0f, NULL, true);
    for (int32_t kh = 0; kh < H; kh++) {
        n[kh] = ly->nsel[kh];
        memcpy(sel[kh], ly->sel + kh * ly->cap, (size_t)n[kh] * 4);
    }
    return true;
}

static kvt_sparse *rr_sparse_rb(int32_t H, bool share, int32_t rb) {
    kvt_sparse_params p = {.mode = KVT_SPARSE_ASYNCSPADE, .budget = 9, .sink = 0, .recent = 1, .rerank = 4.0, .block = rb,
                           .rerank_block = rb, .share = share, .sync = true};
    const kvt_sparse_dims d = {.n_layer = 1, .n_head = H, .n_head_kv = H, .head_dim = 4, .head_dim_v = 4, .n_ctx = 64,
                               .n_threads = 1, .kv_type = KVT_TYPE_F32};
    kvt_sparse *s = NULL;
    kvt_err err;
    if (kvt_sparse_init(&p, &d, &s, &err)) return NULL;
    kvt_sparse_seq *q = kvt_sparse_seq_get(s, 0);
    if (!q || kvt_sparse_layer_reserve(s, q, 0, 64, &err)) {
        kvt_sparse_free(s);
        return NULL;
    }
    return s;
}

static kvt_sparse *rr_sparse(int32_t H, bool share) { return rr_sparse_rb(H, share, 4); }

// head 0: page 2 along x0 (its mass in one page); head 1: pages 2, 4, 6, 8 along x0 (spread over four)
static int key_share(int32_t kh, int32_t t) {
    return (t / 4 == 2 || (kh == 1 && (t / 4 == 4 || t / 4 == 6 || t / 4 == 8))) ? 0 : -1;
}

static bool same_set(const int32_t *sel, int64_t n, const int32_t *want, int64_t nw) {
    return n == nw && memcmp(sel, want, (size_t)n * 4) == 0;
}

// --sparse-share: of two KV heads, the one whose mass is in one page keeps that page, the one whose mass is spread over
// four pages keeps three of them: 2K positions in all, the pages with the most mass over both heads.
static void test_share(void) {
    int32_t sel[2][64];
    int64_t n[2] = {0, 0};
    const float q2[8] = {3.0f, 0.0f, 0.0f, 0.0f, 2.0f, 0.0f, 0.0f, 0.0f};
    const int32_t w0[] = {8, 9, 10, 11, 50}, w1[] = {8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27, 50};
    const int32_t u0[] = {0, 1, 2, 3, 8, 9, 10, 11, 50}, u1[] = {8, 9, 10, 11, 16, 17, 18, 19, 50}; // K each without share
    kvt_sparse *s = rr_sparse(2, true);
    bool ok = s && rr_case(s, 2, 50, q2, key_share, sel, n) && same_set(sel[0], n[0], w0, 5) && same_set(sel[1], n[1], w1, 13);
    kvt_sparse_free(s);
    s = rr_sparse(2, false);
    ok = ok && s && rr_case(s, 2, 50, q2, key_share, sel, n) && same_set(sel[0], n[0], u0, 9) && same_set(sel[1], n[1], u1, 9);
    kvt_sparse_free(s);
    // token level (a piece per position): head 0's 4 heavy positions outweigh head 1's 16, which take the 12 left
    s = rr_sparse_rb(2, true, 0);
    const bool tok = s && rr_case(s, 2, 50, q2, key_share, sel, n) && same_set(sel[0], n[0], w0, 5) && same_set(sel[1], n[1], w1, 13);
    kvt_sparse_free(s);
    test_result(ok && tok, "sparse: --sparse-share: a layer's heads share 2K positions, the pages (or positions, token level) with the most mass first",
                "got %lld + %lld positions (token level %s)", (long long)n[0], (long long)n[1], tok ? "ok" : "wrong");
}

// --sparse-share-layers: two layers of one KV head (K = 9: recent 1 and two pages of 4), layer 0's mass in one page,
// layer 1's spread over four (key_share's heads 0 and 1). The first step (no record) keeps K per layer; the next step's
// budgets come from it: layer 0 keeps its page, layer 1 three of its four (5 + 13 positions: 2K in all); with a floor of
// 1 each layer keeps its own K; after a gap (no record of P - 1) each its own K; a fork copies the records. At token level
// (rerank_block 0: a piece per position) the same counts: layer 0's 4 heavy positions outweigh layer 1's 16, which take
// the 12 positions left of the 16 middle ones.
static void sl_step(kvt_sparse *s, int32_t seq, int64_t P, const float *q, int64_t *n) {
    kvt_sparse_seq *sq = kvt_sparse_seq_get(s, seq);
    kvt_sparse_layer_budgets(s, sq, P);
    for (int32_t l = 0; l < 2; l++) {
        kvt_sparse_layer *ly = &sq->lay[l];
        for (int32_t t = 0; t <= P; t++) ly->sel[t] = t;
        ly->nsel[0] = P + 1;
        kvt_sparse_rerank(s, ly, P, q, 1.0f, NULL, true);
        n[l] = ly->nsel[0];
    }
}

static bool sl_case(int32_t rb, double floor, int64_t gap, bool fork, int64_t *n1, int64_t *n2) {
    kvt_sparse_params p = {.mode = KVT_SPARSE_ASYNCSPADE, .budget = 9, .sink = 0, .recent = 1, .rerank = 4.0, .block = rb,
                           .rerank_block = rb, .share = true, .share_layers = true, .layer_floor = floor, .sync = true};
    const kvt_sparse_dims d = {.n_layer = 2, .n_head = 1, .n_head_kv = 1, .head_dim = 4, .head_dim_v = 4, .n_ctx = 64,
                               .n_threads = 1, .kv_type = KVT_TYPE_F32};
    kvt_sparse *s = NULL;
    kvt_err err;
    if (kvt_sparse_init(&p, &d, &s, &err)) return false;
    kvt_sparse_seq *q = kvt_sparse_seq_get(s, 0);
    bool ok = q && !kvt_sparse_layer_reserve(s, q, 0, 64, &err) && !kvt_sparse_layer_reserve(s, q, 1, 64, &err);
    for (int32_t l = 0; ok && l < 2; l++) {
        kvt_sparse_layer *ly = &q->lay[l];
        for (int t = 0; t < 64; t++) {
            ly->k8s[t] = 1.0f / 127.0f;
            for (int x = 0; x < 4; x++) ly->k8[kvt_sparse_k8_at(t, x, 4)] = (int8_t)(key_share(l, t) == x ? 127 : 0);
        }
    }
    const float q1[4] = {3.0f, 0.0f, 0.0f, 0.0f};
    if (ok) sl_step(s, 0, 49, q1, n1);
    if (ok && fork) ok = !kvt_sparse_seq_fork(s, 0, 1, 50, &err);
    if (ok) sl_step(s, fork ? 1 : 0, 50 + gap, q1, n2);
    kvt_sparse_free(s);
    return ok;
}

static void test_share_layers_at(int32_t rb) {
    int64_t a1[2], a2[2], b1[2], b2[2], c1[2], c2[2], d1[2], d2[2];
    bool ok = sl_case(rb, 0.0, 0, false, a1, a2) && sl_case(rb, 1.0, 0, false, b1, b2) && sl_case(rb, 0.0, 1, false, c1, c2) &&
              sl_case(rb, 0.0, 0, true, d1, d2);
    ok = ok && a1[0] == 9 && a1[1] == 9 && a2[0] == 5 && a2[1] == 13; // the second step: 2K shared by the two layers
    ok = ok && b2[0] == 9 && b2[1] == 9;                               // floor 1: each layer's own
    ok = ok && c2[0] == 9 && c2[1] == 9;                               // no record of P - 1: each layer's own
    ok = ok && d2[0] == 5 && d2[1] == 13;                              // a fork copies the records
    test_result(ok, rb > 1 ? "sparse: --sparse-share-layers: the next step's budgets from the layers' page masses (2K in all), floor 1 = own, not after a gap, fork copies"
                           : "sparse: --sparse-share-layers at token level: the next step's budgets from the layers' position masses (2K in all), floor 1 = own, not after a gap, fork copies",
                "%lld %lld -> %lld %lld (share), %lld %lld (floor 1), %lld %lld (gap), %lld %lld (fork)", (long long)a1[0],
                (long long)a1[1], (long long)a2[0], (long long)a2[1], (long long)b2[0], (long long)b2[1], (long long)c2[0],
                (long long)c2[1], (long long)d2[0], (long long)d2[1]);
}

// Random keys and values of n positions x hkv heads x hd (malloc'd: *k, *v) and a query of h heads x hd (q), from frand in
// that order.
static void rand_kvq(int64_t n, int32_t hkv, int32_t hd, int32_t h, float **k, float **v, float *q) {
    *k = malloc((size_t)(n * hkv * hd) * 4), *v = malloc((size_t)(n * hkv * hd) * 4);
    for (int64_t i = 0; i < n * hkv * hd; i++) (*k)[i] = frand(), (*v)[i] = frand();
    for (int i = 0; i < h * hd; i++) q[i] = frand() * 3.0f;
}

// The oracle's exact scores of an F16 cache (kvt_sparse_score_exact: the query heads of a KV head against a block's
// positions in one kvt_attn_kq_f16 call) have the bits of one F16 vec_dot per (position, query head) times the scale,
// aggregated by kvt_sparse_aggregate: head dims 64 (the four-position kernel) and 40 (a tail past the vector steps).
static void test_score_exact_f16(int32_t HD) {
    char name[128];
    snprintf(name, sizeof name, "sparse: exact scores of an F16 cache have the F16 vec_dot's bits (head dim %d)", HD);
    const int32_t H = 6, HKV = 2, NCTX = 200, qpg = H / HKV;
    const int64_t n = 150;
    kvt_kv_params kp = {KVT_TYPE_F16, 1, HKV, HD, HD, NCTX, 64, 0};
    kvt_kv *kv = NULL;
    kvt_threadpool *pool = NULL;
    kvt_err err = {0};
    if (kvt_threadpool_init(2, &pool, &err) || kvt_kv_contig_init(&kp, &kv, &err)) {
        test_result(false, name, "%s", err.msg);
        kvt_threadpool_free(pool);
        return;
    }
    float *k, *v, q[6 * 64];
    rand_kvq(n, HKV, HD, H, &k, &v, q);
    kvt_attn_params ap = {H, 1.0f / sqrtf((float)HD), KVT_ATTN_TILE, 0};
    kvt_sparse_dims d = {1, H, HKV, HD, HD, NCTX, 2, KVT_TYPE_F16, {0}, false, 0};
    float *ss[2];
    for (int i = 0; i < 2; i++) ss[i] = aligned_alloc(64, (size_t)(kvt_sparse_attn_scratch_floats(&d) * 4 + 63) / 64 * 64);
    float *agg = calloc((size_t)(HKV * NCTX), 4), *ref = calloc((size_t)(HKV * NCTX), 4), *s = malloc((size_t)(qpg * n) * 4);
    uint16_t *k16 = malloc((size_t)HD * 2), q16[64];
    kvt_status st = kv->ops->append(kv, 0, 0, 0, n, k, v, &err);
    if (!st) st = kvt_sparse_score_exact(kv, 0, 0, &ap, q, n, agg, NCTX, pool, ss, &err);
    const kvt_type_ops *ops = kvt_type_ops_get(KVT_TYPE_F16);
    for (int32_t kh = 0; kh < HKV; kh++) {
        for (int32_t i = 0; i < qpg; i++) {
            ops->from_float(q + (int64_t)(kh * qpg + i) * HD, q16, HD);
            for (int64_t t = 0; t < n; t++) {
                float dd;
                ops->from_float(k + (t * HKV + kh) * HD, k16, HD);
                ops->vec_dot(HD, &dd, k16, q16);
                s[i * n + t] = dd * ap.scale;
            }
        }
        kvt_sparse_aggregate(s, qpg, n, ref + kh * NCTX);
    }
    test_result(!st && memcmp(agg, ref, (size_t)(HKV * NCTX) * 4) == 0, name, "%s", st ? err.msg : "scores differ");
    for (int i = 0; i < 2; i++) free(ss[i]);
    free(agg), free(ref), free(s), free(k16), free(k), free(v);
    kvt_kv_free(kv);
    kvt_threadpool_free(pool);
}

// Exact attention over every position equals the dense streamed attention (to rounding): an F32 cache to 1e-5;
// an F16 cache to f16 rounding, as the dense path keeps the V accumulator in f16 there (llama.cpp's flash
// attention, kvt_attn_merge_f16) and the sparse path in f32 (|v| <= 1: 2e-3).
static void test_attend_set(kvt_type type, double tol) {
    char name[128];
    snprintf(name, sizeof name, "sparse: attention over the full set equals dense attention (%s cache, %g)", kvt_type_name(type), tol);
    const int32_t H = 4, HKV = 2, HD = 32, NCTX = 200;
    kvt_kv_params kp = {type, 1, HKV, HD, HD, NCTX, 64, 0};
    kvt_kv *kv = NULL;
    kvt_threadpool *pool = NULL;
    kvt_err err = {0};
    if (kvt_threadpool_init(2, &pool, &err) || kvt_kv_contig_init(&kp, &kv, &err)) {
        test_result(false, name, "%s", err.msg);
        kvt_threadpool_free(pool);
        return;
    }
    const int64_t n = 150;
    float *k, *v, q[4 * 32], a[4 * 32], b[4 * 32];
    rand_kvq(n, HKV, HD, H, &k, &v, q);
    kvt_attn_params ap = {H, 1.0f / sqrtf((float)HD), KVT_ATTN_TILE, 0};
    kvt_sparse_dims d = {1, H, HKV, HD, HD, NCTX, 2, type, {0}, false, 0};
    void *sc[2] = {malloc((size_t)kvt_attn_scratch_bytes(kv, H, KVT_ATTN_TILE)), malloc((size_t)kvt_attn_scratch_bytes(kv, H, KVT_ATTN_TILE))};
    float *ss[2];
    for (int i = 0; i < 2; i++) ss[i] = aligned_alloc(64, (size_t)(kvt_sparse_attn_scratch_floats(&d) * 4 + 63) / 64 * 64);
    int32_t *sel = malloc((size_t)(HKV * NCTX) * 4);
    int64_t nsel[2] = {n, n};
    for (int h = 0; h < HKV; h++) {
        for (int64_t i = 0; i < n; i++) sel[h * NCTX + i] = (int32_t)i;
    }
    kvt_status st = kv->ops->append(kv, 0, 0, 0, n, k, v, &err);
    if (!st) st = kvt_attention(kv, 0, 0, &ap, q, n - 1, 1, a, pool, sc, NULL, &err);
    if (!st) st = kvt_sparse_attend_set(kv, 0, 0, &ap, q, sel, nsel, NCTX, false, b, pool, ss, &err);
    double md = 0;
    for (int i = 0; i < H * HD; i++) md = fmax(md, fabs((double)a[i] - b[i]));
    test_result(!st && md < tol, name, "%s (max diff %.3g)", st ? err.msg : "outputs differ", md);
    for (int i = 0; i < 2; i++) free(sc[i]), free(ss[i]);
    free(sel);
    free(k);
    free(v);
    kvt_kv_free(kv);
    kvt_threadpool_free(pool);
}

// Attention over a set whose late disk reads are in flight (kvt_kv_paged_prefetch_end_async: two passes, the resident
// blocks first) has the bits of the one-pass attention: a paged F16 store of 2 head-wise shards of 10 blocks, a fast
// tier of fast_blocks blocks, demoted to disk; every third position selected; blocks 1, 4 and 7 of each head handed over
// late. 8 blocks: the second pass per KV head; 40: split per query head (pass 3 holds every run left, pass 4). The
// one-pass attention over a contiguous store (split per query head: its reads are free) has the same bits too.
static void test_attend_set_late(int fast_blocks) {
    char name[160];
    snprintf(name, sizeof name, "sparse: attention with a late batch in flight (two passes, fast tier %d blocks) and per "
             "query head has the one-pass bits", fast_blocks);
    const int32_t H = 4, HKV = 2, HD = 32, NCTX = 160;
    char dir[] = "/tmp/kvt_test_sparse_late_XXXXXX";
    const char *disk = mkdtemp(dir);
    if (!disk) {
        test_skip(name, "cannot create a directory in /tmp");
        return;
    }
    kvt_kv_paged_params pp = kvt_kv_paged_params_default();
    pp.type = KVT_TYPE_F16, pp.n_layer = 1, pp.n_head_kv = HKV, pp.head_dim = HD, pp.head_dim_v = HD, pp.n_ctx = NCTX;
    pp.block_tokens = 16, pp.group_heads = 1, pp.n_io_threads = 1, pp.disk_dir = disk;
    pp.fast_bytes = fast_blocks * kvt_kv_paged_block_bytes(&pp);
    kvt_kv *kv = NULL;
    kvt_threadpool *pool = NULL;
    kvt_err err = {0};
    kvt_status st = kvt_threadpool_init(2, &pool, &err);
    if (!st) st = kvt_kv_paged_init(&pp, &kv, &err);
    const int64_t n = 150;
    float *k, *v, q[4 * 32], a[4 * 32], b[4 * 32], c[4 * 32];
    rand_kvq(n, HKV, HD, H, &k, &v, q);
    kvt_attn_params ap = {H, 1.0f / sqrtf((float)HD), KVT_ATTN_TILE, 0};
    kvt_sparse_dims d = {1, H, HKV, HD, HD, NCTX, 2, KVT_TYPE_F16, {0}, false, 0};
    kvt_kv_params kp = {KVT_TYPE_F16, 1, HKV, HD, HD, NCTX, 16, 0};
    kvt_kv *kc = NULL;
    if (!st) st = kvt_kv_contig_init(&kp, &kc, &err);
    if (!st) st = kc->ops->append(kc, 0, 0, 0, n, k, v, &err);
    float *ss[2];
    for (int i = 0; i < 2; i++) ss[i] = aligned_alloc(64, (size_t)(kvt_sparse_attn_scratch_floats(&d) * 4 + 63) / 64 * 64);
    int32_t sel[2 * 160];
    int64_t nsel[2] = {0, 0};
    for (int h = 0; h < HKV; h++) {
        for (int64_t i = h; i < n; i += 3) sel[h * NCTX + nsel[h]++] = (int32_t)i;
    }
    bool pend = false;
    if (!st) st = kv->ops->append(kv, 0, 0, 0, n, k, v, &err);
    if (!st) kvt_kv_paged_set_caller_prefetch(kv, 0, 0, true);
    if (!st) st = kvt_kv_paged_seq_demote(kv, 0, KVT_TIER_DISK, &err);
    kvt_kv_paged_drain(kv);
    if (!st) st = kvt_sparse_attend_set(kv, 0, 0, &ap, q, sel, nsel, NCTX, false, a, pool, ss, &err);
    if (!st) st = kvt_kv_paged_seq_demote(kv, 0, KVT_TIER_DISK, &err);
    kvt_kv_paged_drain(kv);
    if (!st) {
        const int64_t late[3] = {1, 4, 7};
        kvt_kv_paged_prefetch_begin(kv);
        for (int32_t h = 0; h < HKV; h++) kvt_kv_paged_prefetch(kv, 0, 0, h, late, 3);
        pend = kvt_kv_paged_prefetch_end_async(kv);
        st = kvt_sparse_attend_set(kv, 0, 0, &ap, q, sel, nsel, NCTX, pend, b, pool, ss, &err);
    }
    if (!st) st = kvt_sparse_attend_set(kc, 0, 0, &ap, q, sel, nsel, NCTX, false, c, pool, ss, &err);
    test_result(!st && memcmp(a, b, sizeof a) == 0 && memcmp(a, c, sizeof a) == 0, name, "%s (a batch in flight: %d)",
                st ? err.msg : "outputs differ", pend);
    kvt_kv_free(kc);
    for (int i = 0; i < 2; i++) free(ss[i]);
    free(k);
    free(v);
    kvt_kv_free(kv);
    kvt_threadpool_free(pool);
    rmdir(disk);
}

// Attention over a set does not depend on the store's block size: contiguous stores of blocks of 1, 8, 16, 64 and 160
// positions and a paged store of blocks of 16 give the same bits for the same selection (scattered positions, whole
// pages, the last positions), with keys of random scores (the max rises rarely) and with scores rising along the
// positions (a rise in most chunks); and the output is the definition's (a scalar online softmax position by position
// in double) to rounding.
static void test_attend_set_blocks(kvt_type type, bool rising) {
    char name[192];
    snprintf(name, sizeof name, "sparse: attention over a set has the same bits for store blocks of 1, 8, 16, 64, 160 and "
             "paged 16 (%s cache, %s scores) and is the online softmax to rounding", kvt_type_name(type),
             rising ? "rising" : "random");
    const int32_t H = 6, HKV = 2, HD = 32, NCTX = 160, qpg = H / HKV;
    const int64_t n = 150, blocks[5] = {1, 8, 16, 64, 160};
    float *k, *v, q[6 * 32], out[6][6 * 32];
    rand_kvq(n, HKV, HD, H, &k, &v, q);
    if (rising) { // each key leans on its group's first query by a share growing with the position: that head's scores
                  // climb by ~100 over the positions, its max rising every few positions (past attention's slack of 8)
        for (int64_t t = 0; t < n; t++) {
            for (int32_t kh = 0; kh < HKV; kh++) {
                for (int32_t x = 0; x < HD; x++) k[(t * HKV + kh) * HD + x] = 0.3f * k[(t * HKV + kh) * HD + x] + (float)t / (float)n * q[kh * qpg * HD + x] * 8.0f;
            }
        }
    }
    int32_t sel[2 * 160];
    int64_t nsel[2] = {0, 0};
    for (int32_t h = 0; h < HKV; h++) { // positions 0-2, every 5th (h = 0) or pages of 8 (h = 1), the last 12
        for (int64_t i = 0; i < n; i++) {
            const bool keep = i < 3 || i >= n - 12 || (h == 0 ? i % 5 == 2 : (i / 8) % 3 == 1);
            if (keep) sel[h * NCTX + nsel[h]++] = (int32_t)i;
        }
    }
    kvt_attn_params ap = {H, 1.0f / sqrtf((float)HD), KVT_ATTN_TILE, 0};
    kvt_sparse_dims d = {1, H, HKV, HD, HD, NCTX, 2, type, {0}, false, 0};
    float *ss[2];
    for (int i = 0; i < 2; i++) ss[i] = aligned_alloc(64, (size_t)(kvt_sparse_attn_scratch_floats(&d) * 4 + 63) / 64 * 64);
    kvt_threadpool *pool = NULL;
    kvt_err err = {0};
    kvt_status st = kvt_threadpool_init(2, &pool, &err);
    for (int b = 0; b < 6 && !st; b++) {
        kvt_kv *kv = NULL;
        if (b < 5) {
            kvt_kv_params kp = {type, 1, HKV, HD, HD, NCTX, blocks[b], 0};
            st = kvt_kv_contig_init(&kp, &kv, &err);
        } else {
            kvt_kv_paged_params pp = kvt_kv_paged_params_default();
            pp.type = type, pp.n_layer = 1, pp.n_head_kv = HKV, pp.head_dim = HD, pp.head_dim_v = HD, pp.n_ctx = NCTX;
            pp.block_tokens = 16, pp.group_heads = 1, pp.n_io_threads = 1;
            st = kvt_kv_paged_init(&pp, &kv, &err);
        }
        if (!st) st = kv->ops->append(kv, 0, 0, 0, n, k, v, &err);
        if (!st) st = kvt_sparse_attend_set(kv, 0, 0, &ap, q, sel, nsel, NCTX, false, out[b], pool, ss, &err);
        kvt_kv_free(kv);
    }
    bool same = !st;
    for (int b = 1; b < 6 && same; b++) same = memcmp(out[0], out[b], sizeof out[0]) == 0;
    // the definition in double over the values the cache holds
    const kvt_type_ops *ops = kvt_type_ops_get(type);
    uint8_t row[32 * 4];
    float kr[32], vr[32];
    double md = 0;
    for (int32_t hq = 0; hq < H && !st; hq++) {
        const int32_t kh = hq / qpg;
        float qr[32];
        if (type == KVT_TYPE_F16) { // the query as the dot type holds it
            ops->from_float(q + hq * HD, row, HD);
            ops->to_float(row, qr, HD);
        } else {
            memcpy(qr, q + hq * HD, sizeof qr);
        }
        double m = -INFINITY, l = 0, o[32] = {0};
        for (int64_t x = 0; x < nsel[kh]; x++) {
            const int64_t t = sel[kh * NCTX + x];
            ops->from_float(k + (t * HKV + kh) * HD, row, HD);
            ops->to_float(row, kr, HD);
            ops->from_float(v + (t * HKV + kh) * HD, row, HD);
            ops->to_float(row, vr, HD);
            double dot = 0;
            for (int32_t j = 0; j < HD; j++) dot += (double)qr[j] * kr[j];
            const double sc = dot * ap.scale;
            if (sc > m) {
                const double c = exp(m - sc);
                l *= c;
                for (int32_t j = 0; j < HD; j++) o[j] *= c;
                m = sc;
            }
            const double w = exp(sc - m);
            l += w;
            for (int32_t j = 0; j < HD; j++) o[j] += w * vr[j];
        }
        for (int32_t j = 0; j < HD; j++) md = fmax(md, fabs(o[j] / l - out[0][hq * HD + j]));
    }
    test_result(same && md < 1e-5, name, "%s (max diff to the definition %.3g)", st ? err.msg : same ? "off" : "outputs differ", md);
    for (int i = 0; i < 2; i++) free(ss[i]);
    free(k);
    free(v);
    kvt_threadpool_free(pool);
}

enum { N_PROMPT = 40, N_STEP = 8 };

// The fixed prompt of N_PROMPT ids and N_STEP fixed decode tokens on sequence 0 of ctx; logits [N_STEP, n_vocab].
static kvt_status decode_fixed(kvt_context *ctx, int32_t V, float *logits, kvt_err *err) {
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = 1 + (i * 37) % (V - 1);
    kvt_status st = kvt_decode(ctx, prompt, N_PROMPT, false, err);
    for (int j = 0; !st && j < N_STEP; j++) {
        const int32_t tok = 1 + (j * 13 + 7) % (V - 1);
        st = kvt_decode(ctx, &tok, 1, false, err);
        if (!st) memcpy(logits + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
    }
    return st;
}

// Prefill then N_STEP greedy-free decode steps (fixed tokens); logits [N_STEP, n_vocab], steps recorded.
// With `repeat`, the same run twice in one context (truncated to 0 between): the second's logits are kept.
static kvt_status run_n(const kvt_model *m, const kvt_context_params *cp, int repeat, float *logits, int64_t *sel_total,
                        kvt_err *err) {
    const int32_t V = m->hp.n_vocab;
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(m, cp, &ctx, err);
    if (st) return st;
    for (int r = 0; r < repeat && !st; r++) {
        kvt_context_truncate(ctx, 0);
        if (kvt_context_sparse(ctx)) kvt_sparse_steps_clear(kvt_context_sparse(ctx));
        st = decode_fixed(ctx, V, logits, err);
    }
    *sel_total = 0;
    if (!st && kvt_context_sparse(ctx)) {
        int64_t n = 0;
        const kvt_sparse_step *s = kvt_sparse_steps(kvt_context_sparse(ctx), 0, &n);
        for (int64_t i = 0; i < n; i++) *sel_total += s[i].selected;
        if (n != N_STEP) st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "%lld steps recorded, %d decoded", (long long)n, N_STEP);
    }
    kvt_context_free(ctx);
    return st;
}

static kvt_status run(const kvt_model *m, const kvt_context_params *cp, float *logits, int64_t *sel_total, kvt_err *err) {
    return run_n(m, cp, 1, logits, sel_total, err);
}

// As run, but the prompt's KV comes from a session file (saved by a dense context) instead of a prefill, as generate
// --kv-load loads it: all but the prompt's last kvt_context_prompt_tail positions, which are decoded (their logits,
// and asyncspade's query window). kvt_context_kv_load must put the restored keys into the sparse key summaries.
static kvt_status run_loaded(const kvt_model *m, const kvt_context_params *cp, float *logits, kvt_err *err) {
    const int32_t V = m->hp.n_vocab;
    char path[64];
    snprintf(path, sizeof path, "/tmp/kvt_sparse_load_%d.kvs", (int)getpid());
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = 1 + (i * 37) % (V - 1);
    kvt_context_params cd = *cp;
    cd.sparse.mode = KVT_SPARSE_OFF;
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(m, &cd, &ctx, err);
    if (!st) st = kvt_decode(ctx, prompt, N_PROMPT, false, err);
    if (!st) st = kvt_context_kv_save(ctx, 0, prompt, N_PROMPT, path, err);
    kvt_context_free(ctx);
    ctx = NULL;
    if (!st) st = kvt_context_init(m, cp, &ctx, err);
    kvt_session_info info = {0, 0, 0};
    if (!st) st = kvt_context_kv_load(ctx, 0, path, prompt, N_PROMPT, N_PROMPT - kvt_context_prompt_tail(ctx), &info, err);
    if (!st && info.n_loaded != N_PROMPT - kvt_context_prompt_tail(ctx)) {
        st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "%lld positions loaded, want %lld", (long long)info.n_loaded,
                        (long long)(N_PROMPT - kvt_context_prompt_tail(ctx)));
    }
    if (!st) st = kvt_decode_prompt(ctx, 0, prompt + info.n_loaded, N_PROMPT - info.n_loaded, false, err);
    for (int j = 0; !st && j < N_STEP; j++) {
        const int32_t tok = 1 + (j * 13 + 7) % (V - 1);
        st = kvt_decode(ctx, &tok, 1, false, err);
        if (!st) memcpy(logits + (int64_t)j * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
    }
    kvt_context_free(ctx);
    unlink(path);
    return st;
}

// Runs cp (selection inline: --sparse-sync) over the prompt and the steps, then counts in the last step's sets of every
// sparse layer and KV head the pages of B positions that are cut: some but not all of their middle positions (between
// the sink and the recent ones) selected. Logits into logits.
static kvt_status cut_pages(const kvt_model *m, kvt_context_params cp, int32_t B, float *logits, int64_t *cut, kvt_err *err) {
    cp.sparse.sync = true;
    const int32_t V = m->hp.n_vocab;
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(m, &cp, &ctx, err);
    if (!st) st = decode_fixed(ctx, V, logits, err);
    *cut = 0;
    kvt_sparse *sp = st ? NULL : kvt_context_sparse(ctx);
    kvt_sparse_seq *q = sp ? kvt_sparse_seq_get(sp, 0) : NULL;
    const int64_t P = N_PROMPT + N_STEP - 1, lo = cp.sparse.sink, hi = P - cp.sparse.recent + 1; // middle [lo, hi)
    for (int32_t l = cp.sparse.dense_layers; q && l < m->hp.n_layer; l++) {
        const kvt_sparse_layer *ly = &q->lay[l];
        for (int32_t kh = 0; kh < m->hp.n_head_kv; kh++) {
            uint8_t in[N_PROMPT + N_STEP] = {0};
            for (int64_t x = 0; x < ly->nsel[kh]; x++) in[ly->sel[(int64_t)kh * ly->cap + x]] = 1;
            for (int64_t p0 = 0; p0 < hi; p0 += B) {
                int64_t have = 0, size = 0;
                for (int64_t t = p0 > lo ? p0 : lo; t < p0 + B && t < hi; t++) size++, have += in[t];
                *cut += have > 0 && have < size;
            }
        }
    }
    if (!st && !q) st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "no sparse state after the steps");
    kvt_context_free(ctx);
    return st;
}

// Runs cp with the selection inline (--sparse-sync: logits into a, selected total *sa), then with the worker (into b,
// *sb); cp->sparse.sync is left false. Returns the first error.
static kvt_status run_inline_worker(const kvt_model *m, kvt_context_params *cp, float *a, int64_t *sa, float *b,
                                    int64_t *sb, kvt_err *err) {
    cp->sparse.sync = true;
    kvt_status st = run(m, cp, a, sa, err);
    cp->sparse.sync = false;
    if (!st) st = run(m, cp, b, sb, err);
    return st;
}

static double max_diff(const float *a, const float *b, int64_t n) {
    double md = 0;
    for (int64_t i = 0; i < n; i++) md = fmax(md, fabs((double)a[i] - b[i]));
    return md;
}

// The paged store in a fast tier of the key summaries and 4 blocks, a host tier below, prefetch 1.
static void use_small_tiers(kvt_context_params *c, const kvt_sparse_dims *dd) {
    c->kv_fast_bytes = kvt_sparse_summary_bytes(&c->sparse, dd) + 4 * 4096;
    c->kv_host_bytes = 1 << 20;
    c->kv_prefetch = 1;
}

// Runs cp with 1..4 threads, each count varied by vary(c, t, dd) (the tiers, the policy, ...): true if every run's
// logits equal ref (n values) bit for bit and its selections total sel. *st gets the first failure.
static bool same_for_threads(const kvt_model *m, const kvt_context_params *cp, const kvt_sparse_dims *dd,
                             void (*vary)(kvt_context_params *, int, const kvt_sparse_dims *), float *a, const float *ref,
                             int64_t n, int64_t sel, kvt_status *st, kvt_err *err) {
    bool same = true;
    for (int t = 1; same && t <= 4; t++) {
        kvt_context_params c = *cp;
        c.n_threads = t;
        vary(&c, t, dd);
        int64_t s = 0;
        *st = run(m, &c, a, &s, err);
        same = !*st && max_diff(a, ref, n) == 0 && s == sel;
    }
    return same;
}

// even thread counts on the small tiers
static void vary_tiers(kvt_context_params *c, int t, const kvt_sparse_dims *dd) {
    if (t % 2 == 0) use_small_tiers(c, dd);
}

// 3 and 4 threads prefetch only the K best candidates' blocks (--sparse-prefetch-top 1), 4 ranks the blocks by
// attn-ema; 2, 3 and 4 on the small tiers
static void vary_prefetch_top(kvt_context_params *c, int t, const kvt_sparse_dims *dd) {
    c->sparse.prefetch_top = t >= 3 ? 1.0 : 0.0;
    c->kv_evict = t == 4 ? "attn-ema" : NULL;
    if (t % 2 == 0 || t == 3) use_small_tiers(c, dd);
}

static void test_context(const char *path) {
    kvt_model *m = NULL;
    kvt_err err = {0};
    if (kvt_model_load(path, false, &m, &err)) {
        test_result(false, "sparse: load qwen3-tiny", "%s", err.msg);
        return;
    }
    const int64_t n = (int64_t)N_STEP * m->hp.n_vocab;
    float *dense = calloc((size_t)n, 4), *a = calloc((size_t)n, 4), *b = calloc((size_t)n, 4);
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    cp.kv_block = 16;
    int64_t sd = 0, sa = 0, sb = 0;
    kvt_status st = run(m, &cp, dense, &sd, &err);
    // oracle with a budget >= the context: the dense path, bit for bit
    kvt_context_params co = cp;
    co.sparse.mode = KVT_SPARSE_ORACLE;
    co.sparse.budget = 64;
    if (!st) st = run(m, &co, a, &sa, &err);
    test_result(!st && max_diff(dense, a, n) == 0, "sparse: oracle with budget >= context = dense, bit for bit", "%s (max diff %.3g)",
                st ? err.msg : "logits differ", max_diff(dense, a, n));
    // a small budget changes the result (the sparse path runs) and stays close for the oracle
    co.sparse.budget = 12;
    co.sparse.sink = 2;
    co.sparse.recent = 4;
    co.sparse.stats = true;
    st = run(m, &co, a, &sa, &err);
    test_result(!st && max_diff(dense, a, n) > 0 && sa == (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12,
                "sparse: oracle at budget 12 attends 12 positions per layer and KV head", "%s (selected %lld)",
                st ? err.msg : "unexpected", (long long)sa);
    // every mode: the same bits with 1 to 4 threads (paged store too)
    const kvt_sparse_mode modes[3] = {KVT_SPARSE_ORACLE, KVT_SPARSE_QUEST, KVT_SPARSE_ASYNCSPADE};
    for (int mi = 0; mi < 3; mi++) {
        kvt_context_params c1 = co;
        c1.sparse.mode = modes[mi];
        c1.sparse.page = 4;
        c1.sparse.window = 4;
        c1.n_threads = 1;
        st = run(m, &c1, a, &sa, &err);
        bool same = !st;
        for (int t = 2; same && t <= 4; t++) {
            c1.n_threads = t;
            c1.kv_paged = t % 2 == 0;
            st = run(m, &c1, b, &sb, &err);
            same = !st && max_diff(a, b, n) == 0 && sa == sb;
        }
        char name[128];
        snprintf(name, sizeof name, "sparse: %s: selection and logits identical with 1..4 threads", kvt_sparse_mode_name(modes[mi]));
        test_result(same, name, "%s", st ? err.msg : "differ");
    }
    // asyncspade: the worker's selection = the inline selection for the same predicted query
    kvt_context_params c2 = co;
    c2.sparse.mode = KVT_SPARSE_ASYNCSPADE;
    c2.sparse.window = 4;
    st = run_inline_worker(m, &c2, a, &sa, b, &sb, &err);
    test_result(!st && max_diff(a, b, n) == 0 && sa == sb, "sparse: asyncspade worker = inline selection, bit for bit", "%s",
                st ? err.msg : "differ");
    // a second run in the same context after a truncate (perplexity's chunks) = a fresh context, inline and worker
    for (int sync = 0; sync < 2; sync++) {
        c2.sparse.sync = sync;
        kvt_status s2 = run_n(m, &c2, 2, a, &sa, &err);
        char name[128];
        snprintf(name, sizeof name, "sparse: asyncspade (%s) after a truncate = a fresh context, bit for bit", sync ? "inline" : "worker");
        test_result(!s2 && max_diff(a, b, n) == 0, name, "%s", s2 ? err.msg : "differ");
    }
    c2.sparse.sync = false;
    // the paged store with a small fast tier (the worker's chosen blocks prefetched from the host tier): the same
    // bits as the contiguous cache; the key summaries are taken from the fast budget
    kvt_sparse_dims dd = {m->hp.n_layer, m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim, m->hp.head_dim_v, 64, 2, KVT_TYPE_F16, {0}, false, 0};
    const int64_t summary = kvt_sparse_summary_bytes(&c2.sparse, &dd);
    kvt_context_params c3 = c2;
    c3.kv_fast_bytes = summary + 4 * 4096;
    c3.kv_host_bytes = 1 << 20;
    c3.kv_prefetch = 1;
    st = run(m, &c3, a, &sa, &err);
    test_result(!st && max_diff(a, b, n) == 0, "sparse: asyncspade over a fast tier of 4 blocks + host = in memory, bit for bit",
                "%s", st ? err.msg : "differ");
    c3.sparse.prefetch_layers = 1; // the selected blocks handed to the store a layer ahead instead of a step ahead
    st = run(m, &c3, a, &sa, &err);
    test_result(!st && max_diff(a, b, n) == 0, "sparse: asyncspade prefetching a layer ahead over a small fast tier = in memory, bit for bit",
                "%s", st ? err.msg : "differ");
    c3.sparse.prefetch_layers = 0;
    c3.kv_fast_bytes = summary;
    kvt_context *cx = NULL;
    st = kvt_context_init(m, &c3, &cx, &err);
    test_result(st == KVT_ERR_BUDGET && strstr(err.msg, "summaries"), "sparse: a fast budget that cannot hold the key summaries is refused",
                "status %d: %s", st, err.msg);
    kvt_context_free(cx);
    // re-rank on: still deterministic and within the budget
    c2.sparse.rerank = 2.0;
    st = run(m, &c2, a, &sa, &err);
    test_result(!st && sa == (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12, "sparse: asyncspade re-rank keeps K positions",
                "%s (selected %lld)", st ? err.msg : "unexpected", (long long)sa);
    // fallback 1: every head re-selected with the real query = re-rank over every position
    c2.sparse.rerank = 64.0;
    st = run(m, &c2, b, &sb, &err);
    kvt_context_params c4 = c2;
    c4.sparse.rerank = 0.0;
    c4.sparse.fallback = 1.0;
    if (!st) st = run(m, &c4, a, &sa, &err);
    test_result(!st && max_diff(a, b, n) == 0 && sa == sb, "sparse: asyncspade fallback 1 = re-rank over every position, bit for bit",
                "%s", st ? err.msg : "differ");
    // real layers: every layer selecting with the real query = fallback 1 (a), worker = inline for one real layer
    kvt_context_params c5 = c2;
    c5.sparse.rerank = 0.0;
    c5.sparse.real_layers = m->hp.n_layer;
    st = run(m, &c5, b, &sb, &err);
    test_result(!st && max_diff(a, b, n) == 0 && sa == sb, "sparse: asyncspade with every layer real = fallback 1, bit for bit",
                "%s", st ? err.msg : "differ");
    c5.sparse.real_layers = 1;
    st = run_inline_worker(m, &c5, a, &sa, b, &sb, &err);
    test_result(!st && max_diff(a, b, n) == 0 && sa == sb, "sparse: asyncspade with a real first layer: worker = inline, bit for bit",
                "%s", st ? err.msg : "differ");
    // rope_align and the last-query predictor run and keep the budget
    c4.sparse.fallback = 0.0;
    c4.sparse.rope_align = true;
    c4.sparse.predictor = KVT_SPARSE_PRED_LAST;
    st = run(m, &c4, a, &sa, &err);
    test_result(!st && sa == (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12, "sparse: asyncspade rope_align + last query keep K positions",
                "%s (selected %lld)", st ? err.msg : "unexpected", (long long)sa);
    // --sparse-block: whole pages of 4 positions, still K positions per pair; worker = inline
    kvt_context_params c6 = co;
    c6.sparse.mode = KVT_SPARSE_ASYNCSPADE;
    c6.sparse.window = 4;
    c6.sparse.block = 4;
    st = run_inline_worker(m, &c6, a, &sa, b, &sb, &err);
    test_result(!st && max_diff(a, b, n) == 0 && sa == sb && sa == (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12,
                "sparse: asyncspade block 4 keeps K positions; worker = inline, bit for bit", "%s (selected %lld)",
                st ? err.msg : "differ", (long long)sa);
    // re-rank among block candidates (--sparse-rerank 2 --sparse-block 4: 2K candidate positions in whole pages from
    // the predicted query, the real query keeps K of them): K positions per pair; worker = inline for the same
    // predicted query; 1..4 threads and the paged store with a fast tier of 4 blocks + host = the contiguous store
    kvt_context_params c8 = c6;
    c8.sparse.rerank = 2.0;
    st = run_inline_worker(m, &c8, a, &sa, b, &sb, &err);
    test_result(!st && max_diff(a, b, n) == 0 && sa == sb && sa == (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12,
                "sparse: asyncspade re-rank x2 among block candidates keeps K positions; worker = inline, bit for bit",
                "%s (selected %lld)", st ? err.msg : "differ", (long long)sa);
    const bool same8 = !st && same_for_threads(m, &c8, &dd, vary_tiers, a, b, n, sb, &st, &err);
    test_result(same8, "sparse: asyncspade re-rank among block candidates: 1..4 threads, fast tier + host = contiguous, bit for bit",
                "%s", st ? err.msg : "differ");
    // the store's block size changes no bit: quest (pages of 4) and asyncspade's re-rank among block candidates, blocks
    // of 16 (contiguous) against 4 and 8 (paged) and 64 (contiguous)
    bool sameb = !st;
    for (int mi = 0; mi < 2 && sameb; mi++) {
        kvt_context_params cb = c8;
        cb.sparse.mode = mi ? KVT_SPARSE_ASYNCSPADE : KVT_SPARSE_QUEST;
        cb.sparse.page = 4;
        int64_t s0 = 0, s1 = 0;
        st = run(m, &cb, a, &s0, &err);
        const int64_t blk[3] = {4, 64, 8};
        for (int j = 0; j < 3 && !st && sameb; j++) {
            kvt_context_params cj = cb;
            cj.kv_block = blk[j];
            cj.kv_paged = j != 1;
            st = run(m, &cj, b, &s1, &err);
            sameb = !st && max_diff(a, b, n) == 0 && s0 == s1;
        }
        sameb = sameb && !st;
    }
    test_result(sameb, "sparse: quest and asyncspade re-rank: store blocks of 4, 8, 16, 64 (paged and contiguous), bit for bit",
                "%s", st ? err.msg : "differ");
    // --sparse-rerank-block 4: the real query keeps whole pages of 4 candidates (by their summed mass): K positions per
    // pair, worker = inline; 1..4 threads and the paged store (the worker prefetching only its K best candidates'
    // blocks, --sparse-prefetch-top 1, or all of them) = the contiguous store, bit for bit
    kvt_context_params c10 = c8;
    c10.sparse.rerank_block = 4;
    st = run_inline_worker(m, &c10, a, &sa, b, &sb, &err);
    test_result(!st && max_diff(a, b, n) == 0 && sa == sb && sa == (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12,
                "sparse: asyncspade re-rank block 4 keeps K positions; worker = inline, bit for bit", "%s (selected %lld)",
                st ? err.msg : "differ", (long long)sa);
    const bool same10 = !st && same_for_threads(m, &c10, &dd, vary_prefetch_top, a, b, n, sb, &st, &err);
    test_result(same10, "sparse: asyncspade re-rank block 4, prefetch top 1 or all, lru or attn-ema: 1..4 threads, fast tier + host = contiguous, bit for bit",
                "%s", st ? err.msg : "differ");
    // a head whose prediction missed (--sparse-fallback) and the real layers select as the worker does, from the real
    // query: under c10 (re-rank x2 among pages of 4, whole pages of 4 kept) fallback 1 = every layer real, bit for bit,
    // and their sets are whole pages of 4 (at most the last page cut at the budget, per head), as c10's own; before
    // 2026-12-04 they were K single positions (a page-granular store then read blocks for scattered positions)
    {
        kvt_context_params cf = c10, cr = c10;
        cf.sparse.fallback = 1.0;
        cr.sparse.real_layers = m->hp.n_layer;
        int64_t cut_own = -1, cut_fb = -1, cut_real = -1;
        float *fa = malloc((size_t)n * sizeof *fa), *fr = malloc((size_t)n * sizeof *fr);
        st = fa && fr ? cut_pages(m, c10, 4, fa, &cut_own, &err) : kvt_errorf(&err, KVT_ERR_NOMEM, "out of memory");
        if (!st) st = cut_pages(m, cf, 4, fa, &cut_fb, &err);
        if (!st) st = cut_pages(m, cr, 4, fr, &cut_real, &err);
        const int64_t heads = (int64_t)m->hp.n_layer * m->hp.n_head_kv;
        const bool same = !st && max_diff(fa, fr, n) == 0;
        free(fa), free(fr);
        test_result(same && cut_fb <= heads && cut_real == cut_fb && cut_own <= heads,
                    "sparse: asyncspade fallback and real layers under a re-rank in pages: the worker's candidates from the real query, whole pages kept; fallback 1 = every layer real, bit for bit",
                    "%s (pages cut: own %lld, fallback %lld, real %lld; at most %lld)", st ? err.msg : "differ",
                    (long long)cut_own, (long long)cut_fb, (long long)cut_real, (long long)heads);
    }
    // the same a layer ahead (--sparse-prefetch-layers 1): the worker's candidates cut by prefetch top there too
    kvt_context_params c10l = c10;
    c10l.sparse.prefetch_layers = 1;
    const bool same10l = !st && same_for_threads(m, &c10l, &dd, vary_prefetch_top, a, b, n, sb, &st, &err);
    test_result(same10l, "sparse: asyncspade re-rank block 4, prefetch top 1 or all, a layer ahead: 1..4 threads, fast tier + host = contiguous, bit for bit",
                "%s", st ? err.msg : "differ");
    // --sparse-rerank-qbits 8 (the re-rank's real query as int8): K positions per pair, worker = inline, 1..4 threads and
    // the paged store = the contiguous store, bit for bit (on this model the same selection as the int16 query's)
    kvt_context_params c10q = c10;
    c10q.sparse.rerank_qbits = 8;
    {
        float *aq = malloc((size_t)n * sizeof *aq);
        st = aq ? run_inline_worker(m, &c10q, aq, &sa, b, &sb, &err) : kvt_errorf(&err, KVT_ERR_NOMEM, "out of memory");
        const bool sameq = !st && max_diff(aq, b, n) == 0 && sa == sb && sa == (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12 &&
                           same_for_threads(m, &c10q, &dd, vary_prefetch_top, aq, b, n, sb, &st, &err);
        test_result(sameq, "sparse: asyncspade --sparse-rerank-qbits 8: K positions per pair; worker = inline, 1..4 threads, fast tier + host = contiguous, bit for bit",
                    "%s (selected %lld)", st ? err.msg : "differ", (long long)sa);
        free(aq);
    }
    // --sparse-rerank-resid (the worker's kept scores plus the residual on half the rows, every head past a gate of 0.01
    // after 1 calibration call): K positions per pair, worker = inline, 1..4 threads and the paged store = the contiguous
    // store, bit for bit; a calibration longer than the run (every re-rank the exact pass) = without the flag, bit for bit
    for (int e = 0; e < 2; e++) {
        kvt_context_params c10r = c10q;
        c10r.sparse.rerank_resid = 0.5;
        c10r.sparse.rerank_resid_gate = 0.01;
        c10r.sparse.rerank_resid_cal = e ? 1 << 20 : 1;
        float *ar = malloc((size_t)n * sizeof *ar), *ax = malloc((size_t)n * sizeof *ax);
        int64_t sx = 0;
        st = ar && ax ? run_inline_worker(m, &c10r, ar, &sa, b, &sb, &err) : kvt_errorf(&err, KVT_ERR_NOMEM, "out of memory");
        bool same = !st && max_diff(ar, b, n) == 0 && sa == sb && sa == (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12 &&
                    same_for_threads(m, &c10r, &dd, vary_prefetch_top, ar, b, n, sb, &st, &err);
        if (same && e) same = !(st = run(m, &c10q, ax, &sx, &err)) && max_diff(ar, ax, n) == 0;
        test_result(same, e ? "sparse: asyncspade --sparse-rerank-resid while calibrating (the exact pass) = without it; K positions, worker = inline, 1..4 threads, fast tier + host = contiguous, bit for bit"
                            : "sparse: asyncspade --sparse-rerank-resid 0.5: K positions per pair; worker = inline, 1..4 threads, fast tier + host = contiguous, bit for bit",
                    "%s (selected %lld)", st ? err.msg : "differ", (long long)sa);
        free(ar);
        free(ax);
    }
    // --sparse-block-sum: candidate pages by their predicted mass; worker = inline, K positions
    c10.sparse.block_sum = true;
    st = run_inline_worker(m, &c10, a, &sa, b, &sb, &err);
    test_result(!st && max_diff(a, b, n) == 0 && sa == sb && sa == (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12,
                "sparse: asyncspade block-sum candidates, re-rank block 4 keeps K positions; worker = inline, bit for bit",
                "%s (selected %lld)", st ? err.msg : "differ", (long long)sa);
    // --sparse-keep 1: the previous step's pages count double; K positions, worker = inline, and 1..4 threads, the
    // paged store (prefetch top 1 or all, lru or attn-ema) = the contiguous store, bit for bit; and it changes the sets
    c10.sparse.keep = 1.0;
    float *a0 = malloc((size_t)n * sizeof *a0);
    st = a0 ? run_inline_worker(m, &c10, a0, &sa, b, &sb, &err) : kvt_errorf(&err, KVT_ERR_NOMEM, "out of memory");
    test_result(!st && max_diff(a0, b, n) == 0 && sa == sb && sa == (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12 && max_diff(a, b, n) > 0,
                "sparse: asyncspade --sparse-keep 1 keeps K positions, differs from keep 0; worker = inline, bit for bit",
                "%s (selected %lld, vs keep 0 %.3g)", st ? err.msg : "differ", (long long)sa, max_diff(a, b, n));
    const bool same11 = !st && same_for_threads(m, &c10, &dd, vary_prefetch_top, a0, b, n, sb, &st, &err);
    test_result(same11, "sparse: asyncspade --sparse-keep 1: 1..4 threads, fast tier + host = contiguous, bit for bit", "%s",
                st ? err.msg : "differ");
    // --sparse-share (the budget shared by a layer's KV heads): K positions per pair on average (per layer in all),
    // worker = inline, 1..4 threads and the paged store = the contiguous store, bit for bit
    kvt_context_params c12 = c10;
    c12.sparse.share = true;
    st = run_inline_worker(m, &c12, a0, &sa, b, &sb, &err);
    const bool same12 = !st && max_diff(a0, b, n) == 0 && sa == sb && sa == (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12 &&
                        same_for_threads(m, &c12, &dd, vary_prefetch_top, a0, b, n, sb, &st, &err);
    test_result(same12, "sparse: asyncspade --sparse-share: K positions per pair on average; worker = inline, 1..4 threads, fast tier + host = contiguous, bit for bit",
                "%s (selected %lld)", st ? err.msg : "differ", (long long)sa);
    // --sparse-share-layers (the budget shared by the sparse layers too, set from the previous step): at most K
    // positions per pair on average, differs from share alone; worker = inline, 1..4 threads and the paged store = the
    // contiguous store, bit for bit
    kvt_context_params c13 = c12;
    c13.sparse.share_layers = true;
    float *a1 = malloc((size_t)n * sizeof *a1);
    st = a1 ? run_inline_worker(m, &c13, a1, &sa, b, &sb, &err) : kvt_errorf(&err, KVT_ERR_NOMEM, "out of memory");
    const bool same13 = !st && max_diff(a1, b, n) == 0 && sa == sb && sa <= (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12 &&
                        max_diff(a0, b, n) > 0 && same_for_threads(m, &c13, &dd, vary_prefetch_top, a1, b, n, sb, &st, &err);
    test_result(same13, "sparse: asyncspade --sparse-share-layers: at most K positions per pair on average, differs from share; worker = inline, 1..4 threads, fast tier + host = contiguous, bit for bit",
                "%s (selected %lld)", st ? err.msg : "differ", (long long)sa);
    // the same two at token level (no pages: a piece per candidate position)
    kvt_context_params c12t = c12;
    c12t.sparse.block = c12t.sparse.rerank_block = 0;
    c12t.sparse.keep = 0.0;
    st = run_inline_worker(m, &c12t, a0, &sa, b, &sb, &err);
    bool same13t = !st && max_diff(a0, b, n) == 0 && sa == sb && sa == (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12 &&
                   same_for_threads(m, &c12t, &dd, vary_prefetch_top, a0, b, n, sb, &st, &err);
    kvt_context_params c13t = c12t;
    c13t.sparse.share_layers = true;
    if (same13t) st = run_inline_worker(m, &c13t, a1, &sa, b, &sb, &err);
    same13t = same13t && !st && max_diff(a1, b, n) == 0 && sa == sb && sa <= (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12 &&
              max_diff(a0, b, n) > 0 && same_for_threads(m, &c13t, &dd, vary_prefetch_top, a1, b, n, sb, &st, &err);
    test_result(same13t, "sparse: asyncspade --sparse-share, --sparse-share-layers at token level: K / at most K positions per pair on average, differ; worker = inline, 1..4 threads, fast tier + host = contiguous, bit for bit",
                "%s (selected %lld)", st ? err.msg : "differ", (long long)sa);
    // --sparse-key-bits 4 (the 4-bit key copies for every scan; with --sparse-rerank-bits 8 the real query's re-rank on
    // int8 copies kept beside them): K positions per pair, worker = inline, 1..4 threads and the paged store with a fast
    // tier of the 4-bit summaries (fewer bytes reserved) + 4 blocks = the contiguous store, bit for bit; a selection that
    // differs from the int8 copies'
    for (int rb = 4; rb <= 8; rb += 4) {
        kvt_context_params c14 = c10;
        c14.sparse.key_bits = 4;
        c14.sparse.rerank_bits = rb;
        st = run_inline_worker(m, &c14, a1, &sa, b, &sb, &err);
        const bool same14 = !st && max_diff(a1, b, n) == 0 && sa == sb && sa == (int64_t)N_STEP * m->hp.n_layer * m->hp.n_head_kv * 12 &&
                            same_for_threads(m, &c14, &dd, vary_prefetch_top, a1, b, n, sb, &st, &err);
        char nm[256];
        snprintf(nm, sizeof nm, "sparse: asyncspade --sparse-key-bits 4%s: K positions per pair; worker = inline, 1..4 threads, fast tier + host = contiguous, bit for bit",
                 rb == 8 ? " --sparse-rerank-bits 8" : "");
        test_result(same14, nm, "%s (selected %lld)", st ? err.msg : "differ", (long long)sa);
    }
    free(a1);
    free(a0);
    // a prompt restored from a session file (--kv-load) enters the key summaries: quest after a load = quest after
    // the prefill (quest's selection needs no query history), bit for bit
    kvt_context_params c7 = co;
    c7.sparse.mode = KVT_SPARSE_QUEST;
    c7.sparse.page = 4;
    c7.sparse.stats = false;
    st = run(m, &c7, a, &sa, &err);
    if (!st) st = run_loaded(m, &c7, b, &err);
    test_result(!st && max_diff(a, b, n) == 0, "sparse: quest after --kv-load = quest after the prefill, bit for bit", "%s (max diff %.3g)",
                st ? err.msg : "differ", max_diff(a, b, n));
    // asyncspade after a load that leaves its query window's tokens to be decoded (kvt_context_prompt_tail) = asyncspade
    // after the prefill, bit for bit: the window's queries come from those tokens (loading all but the last token left
    // the history short, and the selections differed)
    kvt_context_params c7a = c8;
    c7a.sparse.stats = false;
    int64_t s7a = 0;
    st = run(m, &c7a, a, &s7a, &err);
    if (!st) st = run_loaded(m, &c7a, b, &err);
    test_result(!st && max_diff(a, b, n) == 0, "sparse: asyncspade after --kv-load (the query window decoded) = asyncspade after the prefill, bit for bit",
                "%s (max diff %.3g)", st ? err.msg : "differ", max_diff(a, b, n));
    // sink and recent that overlap (sink + recent > the positions held, a budget below them): every position is sink or
    // recent, so every mode attends to all of them, as the oracle does (the sparse path over every position: within
    // rounding of dense), bit for bit; the re-rank's shared budgets (--sparse-share, at token level and in pages, and
    // --sparse-share-layers) had written sink + recent candidates into a buffer of fewer (a heap overflow under ASan,
    // found by a sweep of beam's flags)
    kvt_context_params cr = co;
    cr.sparse.stats = false;
    cr.sparse.sink = 30;
    cr.sparse.recent = 24; // 54 > N_PROMPT + N_STEP
    cr.sparse.budget = 12;
    int64_t sr = 0;
    st = run(m, &cr, b, &sr, &err);
    bool same_ov = !st && max_diff(dense, b, n) < 1e-2;
    const char *ov_name[5] = {"quest", "asyncspade re-rank", "+ share", "+ share in pages of 4", "+ share layers"};
    int ov_bad = -1;
    for (int v = 0; v < 5 && same_ov; v++) {
        kvt_context_params cv = v == 0 ? cr : c8;
        if (v == 0) cv.sparse.mode = KVT_SPARSE_QUEST, cv.sparse.page = 4;
        cv.sparse.stats = false;
        cv.sparse.sink = cr.sparse.sink;
        cv.sparse.recent = cr.sparse.recent;
        cv.sparse.budget = cr.sparse.budget;
        cv.sparse.share = v >= 2;
        cv.sparse.rerank_block = v == 3 ? 4 : 0;
        cv.sparse.share_layers = v == 4;
        int64_t sv = 0;
        st = run(m, &cv, a, &sv, &err);
        same_ov = !st && max_diff(b, a, n) == 0 && sv == sr;
        if (!same_ov) ov_bad = v;
    }
    test_result(same_ov, "sparse: sink + recent past the positions held (budget below them): quest and asyncspade's re-rank, shared budgets too, = the oracle (every position), bit for bit",
                "%s: %s (max diff %.3g, from dense %.3g)", ov_bad >= 0 ? ov_name[ov_bad] : "", st ? err.msg : "differ", max_diff(b, a, n),
                max_diff(dense, b, n));
    free(dense);
    free(a);
    free(b);
    kvt_model_free(m);
}

// The CLI: --sparse flags on generate, their per-step JSON, and bad values refused.
static void test_cli(const test_env *env, const char *model) {
    const char *name = "sparse: generate --sparse asyncspade --json reports per-step records, --sparse-key-bits 4 fewer summary bytes; bad values refused";
    if (!test_file_exists(env->cli)) {
        test_skip(name, "no kvtier binary");
        return;
    }
    static char out[1 << 16];
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s -p 'one two three four five six seven eight nine ten eleven twelve' -n 6 --temp 0 -c 64 "
             "--json --sparse asyncspade --sparse-budget 0.5 --sparse-sink 1 --sparse-recent 2 --sparse-stats 2>/dev/null",
             env->cli, model);
    const int rc = test_run(cmd, out, sizeof out);
    const bool ok = rc == 0 && strstr(out, "\"mode\":\"asyncspade\"") && strstr(out, "\"steps\":[{") &&
                    strstr(out, "\"mass_recall\":") && strstr(out, "\"summary_bytes\":");
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi -n 1 --sparse bogus >/dev/null 2>&1", env->cli, model);
    char junk[64];
    const int bad1 = test_run(cmd, junk, sizeof junk);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi -n 1 --sparse quest --sparse-budget 1.5 >/dev/null 2>&1", env->cli, model);
    const int bad2 = test_run(cmd, junk, sizeof junk);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi -n 1 --sparse asyncspade --sparse-share-layers >/dev/null 2>&1", env->cli, model);
    const int bad3 = test_run(cmd, junk, sizeof junk); // --sparse-share-layers needs --sparse-share and a re-rank
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi -n 1 --sparse asyncspade --sparse-key-bits 6 >/dev/null 2>&1", env->cli, model);
    const int bad4 = test_run(cmd, junk, sizeof junk);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi -n 1 --sparse asyncspade --sparse-rerank-qbits 12 >/dev/null 2>&1", env->cli, model);
    const int bad5 = test_run(cmd, junk, sizeof junk);
    // the 4-bit copies: reported, and fewer summary bytes than the int8 run's
    static char out4[1 << 16];
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s -p 'one two three four five six seven eight nine ten eleven twelve' -n 6 --temp 0 -c 64 "
             "--json --sparse asyncspade --sparse-budget 0.5 --sparse-sink 1 --sparse-recent 2 --sparse-key-bits 4 2>/dev/null",
             env->cli, model);
    const int rc4 = test_run(cmd, out4, sizeof out4);
    const char *b8 = strstr(out, "\"summary_bytes\":"), *b4 = strstr(out4, "\"summary_bytes\":");
    const bool ok4 = rc4 == 0 && strstr(out4, "\"key_bits\":4") && strstr(out, "\"key_bits\":8") && b8 && b4 &&
                     atoll(b4 + 16) > 0 && atoll(b4 + 16) < atoll(b8 + 16);
    test_result(ok && ok4 && bad1 != 0 && bad2 != 0 && bad3 != 0 && bad4 != 0 && bad5 != 0, name,
                "rc %d %d, bad values rc %d %d %d %d %d, output %.300s", rc, rc4, bad1, bad2, bad3, bad4, bad5, ok ? out4 : out);
}

// --sparse-preset acc: the same settings and tokens as its flags written out; a later flag overrides it; a bad name refused;
// keep takes the int8 re-rank query, acc the int16 one.
static void test_cli_preset(const test_env *env, const char *model) {
    const char *name = "sparse: --sparse-preset acc = its flags (settings and tokens), a later flag overrides it, bad name refused; keep's re-rank query int8";
    if (!test_file_exists(env->cli)) {
        test_skip(name, "no kvtier binary");
        return;
    }
    static char o1[1 << 16], o2[1 << 16], o3[1 << 16];
    char cmd[1024], junk[64];
    const char *run = "%s generate -m %s -p 'one two three four five six seven eight nine ten eleven twelve' -n 6 --temp 0 "
                      "-c 64 --json --sparse-budget 0.5 --sparse-sink 1 --sparse-recent 2 %s 2>/dev/null";
    snprintf(cmd, sizeof cmd, run, env->cli, model, "--sparse-preset acc");
    const int rc1 = test_run(cmd, o1, sizeof o1);
    snprintf(cmd, sizeof cmd, run, env->cli, model,
             "--sparse asyncspade --sparse-rerank 8 --sparse-block 4 --sparse-block-sum --sparse-rerank-block 4 "
             "--sparse-prefetch-top 0.5 --sparse-keep 0.25 --sparse-share --sparse-dense-layers 1");
    const int rc2 = test_run(cmd, o2, sizeof o2);
    snprintf(cmd, sizeof cmd, run, env->cli, model, "--sparse-preset acc --sparse-dense-layers 0");
    const int rc3 = test_run(cmd, o3, sizeof o3);
    // the settings and the generated ids: everything before "summary_bytes" (timings follow)
    const char *s1 = strstr(o1, "\"sparse\":{"), *s2 = strstr(o2, "\"sparse\":{");
    const char *e1 = s1 ? strstr(s1, "\"summary_bytes\"") : NULL, *e2 = s2 ? strstr(s2, "\"summary_bytes\"") : NULL;
    const char *i1 = strstr(o1, "\"ids\":["), *i2 = strstr(o2, "\"ids\":[");
    const bool same = rc1 == 0 && rc2 == 0 && e1 && e2 && e1 - s1 == e2 - s2 && !memcmp(s1, s2, (size_t)(e1 - s1)) && i1 &&
                      i2 && strchr(i1, ']') && strchr(i1, ']') - i1 == (strchr(i2, ']') ? strchr(i2, ']') - i2 : -1) &&
                      !strncmp(i1, i2, (size_t)(strchr(i1, ']') - i1)) && strstr(s1, "\"dense_layers\":1") && strstr(s1, "\"rerank_block\":4") &&
                      strstr(s1, "\"share\":true");
    const bool over = rc3 == 0 && strstr(o3, "\"dense_layers\":0") && strstr(o3, "\"rerank_block\":4");
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi -n 1 --sparse-preset fast >/dev/null 2>&1", env->cli, model);
    const int bad = test_run(cmd, junk, sizeof junk);
    static char o4[1 << 16];
    snprintf(cmd, sizeof cmd, run, env->cli, model, "--sparse-preset keep");
    const int rc4 = test_run(cmd, o4, sizeof o4);
    const bool qb = rc4 == 0 && strstr(o4, "\"rerank_qbits\":8") && strstr(o1, "\"rerank_qbits\":16");
    // --sparse-rerank-resid: the residual re-rank runs (its rows reported), the exact pass not at all with a gate of 0
    // past one calibration call; refused without int8 copies for both scans
    static char o5[1 << 16];
    snprintf(cmd, sizeof cmd, run, env->cli, model,
             "--sparse-preset keep --sparse-rerank-resid 0.5 --sparse-rerank-resid-gate 0.01 --sparse-rerank-resid-cal 1");
    const int rc5 = test_run(cmd, o5, sizeof o5);
    const char *rr = strstr(o5, "\"rerank_resid_rows\":");
    const bool resid = rc5 == 0 && rr && strtod(rr + 20, NULL) > 0.0 && strstr(o5, "\"rerank_resid_exact_frac\":0,");
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi -n 1 -c 64 --sparse-preset keep --sparse-rerank-resid 0.5 --sparse-key-bits 4 >/dev/null 2>&1",
             env->cli, model);
    const int bad4 = test_run(cmd, junk, sizeof junk);
    test_result(resid && bad4 != 0, "sparse: --sparse-rerank-resid runs the residual re-rank (rows reported), refused with 4-bit scans",
                "rc %d, bad rc %d, output %.400s", rc5, bad4, rr ? rr : o5);
    test_result(same && over && bad != 0 && qb, name, "rc %d %d %d %d, bad rc %d, output %.300s", rc1, rc2, rc3, rc4, bad,
                s1 ? s1 : o1);
    // --sparse-page-elems: acc's pages shrink to at most E key elements per KV head (this model: head_dim 32, so acc's 256
    // keep pages of 4, as above); E 64: pages of 2, E 16: 1; an explicit --sparse-rerank-block after it keeps its size
    static char o6[3][1 << 16];
    const char *pe_flags[3] = {"--sparse-page-elems 64", "--sparse-page-elems 16", "--sparse-page-elems 64 --sparse-rerank-block 4"};
    const char *pe_want[3] = {"2,", "1,", "4,"}; // block and rerank_block
    bool pe = true;
    for (int i = 0; i < 3; i++) {
        char f[128], wb[32], wr[40];
        snprintf(f, sizeof f, "--sparse-preset acc %s", pe_flags[i]);
        snprintf(cmd, sizeof cmd, run, env->cli, model, f);
        snprintf(wb, sizeof wb, "\"block\":%s", pe_want[i]);
        snprintf(wr, sizeof wr, "\"rerank_block\":%s", pe_want[i]);
        pe = pe && test_run(cmd, o6[i], sizeof o6[i]) == 0 && strstr(o6[i], wb) && strstr(o6[i], wr);
    }
    test_result(pe, "sparse: --sparse-page-elems caps acc's page (E / head_dim positions, at least 1); an explicit page size kept",
                "output %.300s", o6[0]);
}

// The int8 block layout's terms: asyncspade needs head_dim % 4 == 0 (refused with a message otherwise; quest does
// not), reserves n_ctx rounded up to whole 16-position blocks, and a sequence's buffers hold whole blocks.
static void test_k8_layout_terms(void) {
    kvt_sparse_params p = {.mode = KVT_SPARSE_ASYNCSPADE, .budget = 8, .sync = true};
    kvt_sparse_dims d = {.n_layer = 2, .n_head = 2, .n_head_kv = 1, .head_dim = 6, .head_dim_v = 6, .n_ctx = 100,
                         .n_threads = 1, .kv_type = KVT_TYPE_F32};
    kvt_sparse *s = NULL;
    kvt_err err = {0};
    const kvt_status st = kvt_sparse_init(&p, &d, &s, &err);
    bool ok = st == KVT_ERR_UNSUPPORTED && strstr(err.msg, "multiple of 4") && !s;
    kvt_sparse_params pq = p;
    pq.mode = KVT_SPARSE_QUEST;
    ok = ok && !kvt_sparse_init(&pq, &d, &s, &err) && s;
    kvt_sparse_free(s);
    s = NULL;
    d.head_dim = d.head_dim_v = 8;
    ok = ok && kvt_sparse_summary_bytes(&p, &d) == 2 * 1 * 112 * (8 + 4); // 100 positions -> 7 blocks of 16
    ok = ok && !kvt_sparse_init(&p, &d, &s, &err) && s;
    kvt_sparse_seq *q = s ? kvt_sparse_seq_get(s, 0) : NULL;
    ok = ok && q && !kvt_sparse_layer_reserve(s, q, 0, 100, &err) && q->lay[0].cap == 112 &&
         kvt_sparse_summary_held(s) == 112 * (8 + 4);
    kvt_sparse_free(s);
    s = NULL;
    p.key_bits = 4; // 4-bit copies: 4 bytes per position at head_dim 8, one f16 scale (each buffer a 64-byte multiple)
    const int64_t l4 = kvt_sparse_alloc_bytes(112 * 4) + kvt_sparse_alloc_bytes(112 * 2);
    ok = ok && kvt_sparse_summary_bytes(&p, &d) == 2 * l4 && !kvt_sparse_init(&p, &d, &s, &err) && s;
    q = s ? kvt_sparse_seq_get(s, 0) : NULL;
    ok = ok && q && !kvt_sparse_layer_reserve(s, q, 0, 100, &err) && q->lay[0].cap == 112 && !q->lay[0].k8 && q->lay[0].k4 &&
         kvt_sparse_summary_held(s) == l4;
    kvt_sparse_free(s);
    test_result(ok, "sparse: asyncspade refuses head_dim % 4 != 0 (quest does not); n_ctx 100 reserves and holds 7 blocks of 16",
                "status %d: %s", (int)st, err.msg);
}

// kvt_sparse_zalloc: small buffers 64-byte aligned, buffers of KVT_SPARSE_HUGE_MIN bytes or more 2 MiB-aligned (the huge
// page hint), every byte asked for zeroed; the buffers are written to their last byte and freed.
static void test_zalloc(void) {
    const size_t sizes[] = {1, 100, 4096, KVT_SPARSE_HUGE_MIN - 1, KVT_SPARSE_HUGE_MIN, 3 * 1024 * 1024 / 2, (size_t)5 << 20};
    bool ok = true;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        bool got = true;
        unsigned char *p = kvt_sparse_zalloc(sizes[i], &got);
        const uintptr_t align = sizes[i] >= KVT_SPARSE_HUGE_MIN ? (uintptr_t)2 << 20 : 64;
        ok = ok && got && p && (uintptr_t)p % align == 0;
        for (size_t j = 0; ok && j < sizes[i]; j += 4093) ok = p[j] == 0;
        if (p) p[sizes[i] - 1] = 1, ok = ok && p[0] == (sizes[i] == 1);
        free(p);
    }
    // the summary bytes count what is allocated: SmolLM2's shape at 8K, one layer: int8 copies 1.5 MiB -> 2 MiB
    kvt_sparse_params p = {.mode = KVT_SPARSE_ASYNCSPADE, .budget = 8};
    kvt_sparse_dims d = {.n_layer = 1, .n_head = 9, .n_head_kv = 3, .head_dim = 64, .head_dim_v = 64, .n_ctx = 8192};
    const int64_t sb = kvt_sparse_summary_bytes(&p, &d);
    ok = ok && sb == ((int64_t)2 << 20) + 3 * 8192 * 4 && kvt_sparse_alloc_bytes(0) == 0 && kvt_sparse_alloc_bytes(65) == 128;
    // 4-bit copies: 32 bytes per position (0.75 MiB, under the huge-page size: 64-byte multiples) and two f16 group
    // scales; both widths: both
    p.key_bits = 4;
    const int64_t sb4 = kvt_sparse_summary_bytes(&p, &d);
    p.rerank_bits = 8;
    const int64_t sb48 = kvt_sparse_summary_bytes(&p, &d);
    ok = ok && sb4 == 3 * 8192 * 32 + 3 * 8192 * 4 && sb48 == sb + sb4;
    // only the layers that keep summaries are reserved: Gemma 3's 18 layers, a global one every 6th (5, 11, 17): 3; from
    // --sparse-dense-layers 6 on: 2; no windows: the 18 less the dense ones
    kvt_sparse_params pg = {.mode = KVT_SPARSE_ASYNCSPADE, .budget = 8};
    kvt_sparse_dims dg = {.n_layer = 18, .n_head = 4, .n_head_kv = 1, .head_dim = 256, .head_dim_v = 256, .n_ctx = 4096, .swa_period = 6};
    const int64_t g3 = kvt_sparse_summary_bytes(&pg, &dg), layers3 = kvt_sparse_summary_layers(&pg, &dg);
    pg.dense_layers = 6;
    const int32_t layers2 = kvt_sparse_summary_layers(&pg, &dg);
    dg.swa_period = 0;
    const int32_t layers12 = kvt_sparse_summary_layers(&pg, &dg);
    pg.dense_layers = 0;
    ok = ok && layers3 == 3 && layers2 == 2 && layers12 == 12 && g3 * 6 == kvt_sparse_summary_bytes(&pg, &dg);
    test_result(ok, "sparse: summary buffers zeroed, 64-byte aligned, 2 MiB-aligned from 1 MiB on (huge pages), counted as allocated (int8, 4-bit, both); only the layers that keep them reserved",
                "differ (summary bytes %lld, 4-bit %lld, both %lld; layers %lld, %d, %d)", (long long)sb, (long long)sb4,
                (long long)sb48, (long long)layers3, layers2, layers12);
}

void test_sparse(const test_env *env) {
    test_zalloc();
    test_predictor();
    test_predictor_simplex();
    test_predict_gram();
    test_weighted_kth();
    test_rope_align();
    test_quest_bound();
    test_sparse_kernels();
    test_sparse_resid_rows();
    test_k8_layout_terms();
    test_topk();
    test_topk_random();
    test_keep();
    test_share();
    test_share_layers_at(4);
    test_share_layers_at(0);
    test_attend_set(KVT_TYPE_F32, 1e-5);
    test_attend_set(KVT_TYPE_F16, 2e-3);
    test_score_exact_f16(64);
    test_score_exact_f16(40);
    test_attend_set_late(8);
    for (int ty = 0; ty < 2; ty++) {
        test_attend_set_blocks(ty ? KVT_TYPE_F16 : KVT_TYPE_F32, false);
        test_attend_set_blocks(ty ? KVT_TYPE_F16 : KVT_TYPE_F32, true);
    }
    test_attend_set_late(40);
    char path[512];
    if (!test_data(env, "qwen3-tiny.gguf", path, sizeof path)) {
        test_skip("sparse: context cases", test_data_missing(env, "qwen3-tiny.gguf"));
        return;
    }
    test_context(path);
    test_cli(env, path);
    test_cli_preset(env, path);
}
