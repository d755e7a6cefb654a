// select.c - the pure pieces of sparse selection: the query predictor, Quest's bound and top-k.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sparse_impl.h"

#define MAX_WINDOW 64

const char *kvt_sparse_mode_name(kvt_sparse_mode m) {
    switch (m) {
    case KVT_SPARSE_ORACLE: return "oracle";
    case KVT_SPARSE_QUEST: return "quest";
    case KVT_SPARSE_ASYNCSPADE: return "asyncspade";
    default: return "off";
    }
}

bool kvt_sparse_mode_parse(const char *s, kvt_sparse_mode *out) {
    for (int m = KVT_SPARSE_OFF; m <= KVT_SPARSE_ASYNCSPADE; m++) {
        if (!strcmp(s, kvt_sparse_mode_name((kvt_sparse_mode)m))) {
            *out = (kvt_sparse_mode)m;
            return true;
        }
    }
    return false;
}

const char *kvt_sparse_pred_name(kvt_sparse_pred m) {
    return m == KVT_SPARSE_PRED_LAST ? "last" : m == KVT_SPARSE_PRED_RIDGE_HEAD ? "ridge-head" : m == KVT_SPARSE_PRED_SIMPLEX ? "simplex" : "ridge";
}

bool kvt_sparse_pred_parse(const char *s, kvt_sparse_pred *out) {
    for (int m = KVT_SPARSE_PRED_RIDGE; m <= KVT_SPARSE_PRED_SIMPLEX; m++) {
        if (!strcmp(s, kvt_sparse_pred_name((kvt_sparse_pred)m))) {
            *out = (kvt_sparse_pred)m;
            return true;
        }
    }
    return false;
}

bool kvt_sparse_params_preset(const char *name, kvt_sparse_params *p) {
    const bool acc = !strcmp(name, "acc");
    if (!acc && strcmp(name, "keep") && strcmp(name, "doc")) return false;
    p->mode = KVT_SPARSE_ASYNCSPADE;
    p->rerank = acc ? 8.0 : !strcmp(name, "doc") ? 6.0 : 4.0;
    p->block = p->rerank_block = acc ? 4 : 16; // acc: pages of 4 since 2026-12-02 (docs/SPARSE.md, "ACC4")
    p->page_elems = acc ? 256 : 0; // acc: a page at most 256 key elements per KV head (Gemma 3: 1 position; docs/SPARSE.md, "gacc")
    p->block_sum = true;
    p->prefetch_top = 0.5;
    p->keep = 0.25;
    p->share = strcmp(name, "keep") != 0;
    p->dense_layers = acc ? 1 : 0;
    p->rerank_qbits = strcmp(name, "keep") ? 16 : 8; // keep: the int8 real query (docs/SPARSE.md, "Speed at 8K"); acc: int16
    return true;
}

int64_t kvt_sparse_predict_work_floats(int32_t max_window, int32_t d) {
    (void)max_window;
    return d;
}

// Solves G a = b for the symmetric positive definite G ([w, w], overwritten by its Cholesky factor).
// false when G is not positive definite (a degenerate window).
static bool chol_solve(double *G, double *b, int32_t w) {
    for (int32_t j = 0; j < w; j++) {
        double s = G[j * w + j];
        for (int32_t k = 0; k < j; k++) s -= G[j * w + k] * G[j * w + k];
        if (!(s > 0.0)) return false;
        const double ljj = sqrt(s);
        G[j * w + j] = ljj;
        for (int32_t i = j + 1; i < w; i++) {
            double t = G[i * w + j];
            for (int32_t k = 0; k < j; k++) t -= G[i * w + k] * G[j * w + k];
            G[i * w + j] = t / ljj;
        }
    }
    for (int32_t i = 0; i < w; i++) { // L y = b
        double t = b[i];
        for (int32_t k = 0; k < i; k++) t -= G[i * w + k] * b[k];
        b[i] = t / G[i * w + i];
    }
    for (int32_t i = w - 1; i >= 0; i--) { // L^T a = y
        double t = b[i];
        for (int32_t k = i + 1; k < w; k++) t -= G[k * w + i] * b[k];
        b[i] = t / G[i * w + i];
    }
    return true;
}

// Euclidean projection of v[0 .. w) onto the probability simplex (sort-free: bisection on the threshold).
static void project_simplex(double *v, int32_t w) {
    double lo = -1e300, hi = -1e300;
    for (int32_t i = 0; i < w; i++) hi = v[i] > hi ? v[i] : hi;
    lo = hi - 1.0; // sum max(v - tau, 0) is >= 1 at tau = max - 1 and 0 at tau = max
    for (int it = 0; it < 60; it++) {
        const double tau = 0.5 * (lo + hi);
        double s = 0.0;
        for (int32_t i = 0; i < w; i++) s += v[i] > tau ? v[i] - tau : 0.0;
        if (s > 1.0) lo = tau;
        else hi = tau;
    }
    const double tau = 0.5 * (lo + hi);
    double s = 0.0;
    for (int32_t i = 0; i < w; i++) s += (v[i] = v[i] > tau ? v[i] - tau : 0.0);
    for (int32_t i = 0; i < w; i++) v[i] = s > 0.0 ? v[i] / s : 1.0 / w;
}

// min over the simplex of a^T G a - 2 b^T a (G: [w, w] with the ridge term on its diagonal): accelerated
// projected gradient (FISTA), step 1 / (2 * trace G) (trace >= the largest eigenvalue), from the uniform point.
static void solve_simplex(const double *G, const double *b, int32_t w, double *a) {
    double y[MAX_WINDOW], prev[MAX_WINDOW], tr = 0.0, t = 1.0;
    for (int32_t i = 0; i < w; i++) tr += G[i * w + i];
    const double step = tr > 0.0 ? 1.0 / (2.0 * tr) : 1.0;
    for (int32_t i = 0; i < w; i++) a[i] = y[i] = prev[i] = 1.0 / w;
    for (int it = 0; it < 200; it++) {
        for (int32_t i = 0; i < w; i++) {
            double g = -b[i];
            for (int32_t j = 0; j < w; j++) g += G[i * w + j] * y[j];
            a[i] = y[i] - step * 2.0 * g;
        }
        project_simplex(a, w);
        const double tn = 0.5 * (1.0 + sqrt(1.0 + 4.0 * t * t));
        for (int32_t i = 0; i < w; i++) {
            y[i] = a[i] + (t - 1.0) / tn * (a[i] - prev[i]);
            prev[i] = a[i];
        }
        t = tn;
    }
}

enum { GRAM_XB = 32 }; // dimensions per tile of gram

// Rows a0 .. m-1 of the Gram matrix R[a * ld + b] = dot(row a, row b) of the m rows h ([m, d]), every column b < m, and
// their mirror R[b * ld + a] (b < a0): each entry a serial double sum over the dimensions in order (products of floats:
// exact in double, so R[a * ld + b] and R[b * ld + a] are the same bits, and an entry depends only on its two rows: a
// row computed at one step is the same bits at the next). Tile by tile of GRAM_XB dimensions, transposed so that one
// dimension's products with every row are contiguous: the m sums of a row run side by side in vector lanes
// (independent sums: no latency chain).
KVT_SPARSE_CLONES
static void gram(const float *h, int32_t m, int32_t d, double *R, int32_t ld, int32_t a0) {
    double T[GRAM_XB * (MAX_WINDOW + 1)];
    for (int32_t a = a0; a < m; a++) memset(R + (int64_t)a * ld, 0, (size_t)m * sizeof *R);
    for (int32_t x0 = 0; x0 < d; x0 += GRAM_XB) {
        const int32_t xn = d - x0 < GRAM_XB ? d - x0 : GRAM_XB;
        for (int32_t b = 0; b < m; b++) {
            for (int32_t xx = 0; xx < xn; xx++) T[xx * m + b] = h[(int64_t)b * d + x0 + xx];
        }
        for (int32_t a = a0; a < m; a++) {
            double *Ra = R + (int64_t)a * ld;
            for (int32_t xx = 0; xx < xn; xx++) {
                const double v = T[xx * m + a], *Tx = T + xx * m;
                for (int32_t b = 0; b < m; b++) Ra[b] += v * Tx[b];
            }
        }
    }
    for (int32_t a = a0; a < m; a++) {
        for (int32_t b = 0; b < a0; b++) R[(int64_t)b * ld + a] = R[(int64_t)a * ld + b];
    }
}

void kvt_sparse_gram_update(const float *hist, int32_t n, int32_t d, double *G, int32_t ld, int32_t *g_n, int32_t *g_shift) {
    int32_t k = *g_n - *g_shift; // rows still held: rows shift .. g_n - 1 of the products, now rows 0 .. k - 1
    if (k < 0 || *g_n > n + *g_shift) k = 0;
    if (k > 0 && *g_shift > 0) {
        for (int32_t a = 0; a < k; a++) memmove(G + (int64_t)a * ld, G + (int64_t)(a + *g_shift) * ld + *g_shift, (size_t)k * sizeof *G);
    }
    if (k < n) gram(hist, n, d, G, ld, k);
    *g_n = n;
    *g_shift = 0;
}

// acc[x] += (float)sum_i a[i] X[i * d + x] over i in order (double sums), for x in [0, d): GRAM_XB dimensions at a time,
// the dimensions' sums side by side in vector lanes.
KVT_SPARSE_CLONES
static void combine_rows(const double *a, const float *X, int32_t w, int32_t d, float *acc) {
    for (int32_t x0 = 0; x0 < d; x0 += GRAM_XB) {
        const int32_t xn = d - x0 < GRAM_XB ? d - x0 : GRAM_XB;
        double s[GRAM_XB] = {0};
        for (int32_t i = 0; i < w; i++) {
            const float *Xi = X + (int64_t)i * d + x0;
            for (int32_t xx = 0; xx < xn; xx++) s[xx] += a[i] * Xi[xx];
        }
        for (int32_t xx = 0; xx < xn; xx++) acc[x0 + xx] += (float)s[xx];
    }
}

// One window's estimate of the next row, added into acc; false when the window cannot be used. how: 0 the
// ridge weights as solved, 1 softmax-normalized, 2 the ridge problem solved over the simplex. R: the Gram matrix
// of the last m rows of hist (m >= w + 1; row stride ld), shared by every window (the products of the same rows: the
// same bits).
static bool predict_window(const float *hist, int32_t n, int32_t d, int32_t w, double lambda, int how, const double *R,
                           int32_t ld, int32_t m, float *acc) {
    if (w < 1 || w > MAX_WINDOW || n < w + 1 || m < w + 1) return false;
    double G[MAX_WINDOW * MAX_WINDOW], a[MAX_WINDOW];
    const int32_t r0 = m - 1 - w; // X: rows n-1-w .. n-2 of hist = rows r0 .. m-2 of R; y: row m-1
    double tr = 0.0;
    for (int32_t i = 0; i < w; i++) {
        for (int32_t j = 0; j <= i; j++) G[i * w + j] = G[j * w + i] = R[(r0 + i) * ld + r0 + j];
        tr += G[i * w + i];
        a[i] = R[(r0 + i) * ld + m - 1];
    }
    const double reg = lambda * (tr > 0.0 ? tr / w : 1.0);
    for (int32_t i = 0; i < w; i++) G[i * w + i] += reg > 0.0 ? reg : 1e-12;
    if (how == 2) {
        double b[MAX_WINDOW];
        memcpy(b, a, (size_t)w * sizeof *b);
        solve_simplex(G, b, w, a);
    } else if (!chol_solve(G, a, w)) {
        return false;
    }
    if (how == 1) {
        double mx = a[0], sum = 0.0;
        for (int32_t i = 1; i < w; i++) mx = a[i] > mx ? a[i] : mx;
        for (int32_t i = 0; i < w; i++) sum += (a[i] = exp(a[i] - mx));
        for (int32_t i = 0; i < w; i++) a[i] /= sum;
    }
    combine_rows(a, hist + (int64_t)(n - w) * d, w, d, acc); // the window shifted by one: rows n-w .. n-1
    return true;
}

// G: the Gram matrix of hist's n rows (row stride ld, kvt_sparse_gram_update), or NULL: computed here (the same bits).
static void predict(const float *hist, int32_t n, int32_t d, const int32_t *windows, int32_t nw, double lambda, int how,
                    const double *G, int32_t ld, float *out, float *work) {
    memset(work, 0, (size_t)d * sizeof(float));
    int32_t used = 0, m = 0;
    for (int32_t i = 0; i < nw; i++) { // the rows the largest usable window reads
        if (windows[i] >= 1 && windows[i] <= MAX_WINDOW && n >= windows[i] + 1 && windows[i] + 1 > m) m = windows[i] + 1;
    }
    double R[(MAX_WINDOW + 1) * (MAX_WINDOW + 1)];
    const double *Rm = R; // the Gram matrix of the last m rows, row stride ld
    if (G && m > 0) {
        Rm = G + (int64_t)(n - m) * ld + (n - m);
    } else {
        ld = m;
        if (m > 0) gram(hist + (int64_t)(n - m) * d, m, d, R, m, 0);
    }
    for (int32_t i = 0; i < nw; i++) used += predict_window(hist, n, d, windows[i], lambda, how, Rm, ld, m, work);
    if (!used) {
        if (n > 0) memcpy(out, hist + (int64_t)(n - 1) * d, (size_t)d * sizeof(float));
        else memset(out, 0, (size_t)d * sizeof(float));
        return;
    }
    for (int32_t x = 0; x < d; x++) out[x] = work[x] / (float)used;
}

void kvt_sparse_predict(const float *hist, int32_t n, int32_t d, const int32_t *windows, int32_t nw, double lambda,
                        bool softmax, float *out, float *work) {
    predict(hist, n, d, windows, nw, lambda, softmax ? 1 : 0, NULL, 0, out, work);
}

void kvt_sparse_predict_gram(const float *hist, int32_t n, int32_t d, const int32_t *windows, int32_t nw, double lambda,
                             bool simplex, const double *G, int32_t ld, float *out, float *work) {
    predict(hist, n, d, windows, nw, lambda, simplex ? 2 : 1, G, ld, out, work);
}

void kvt_sparse_predict_simplex(const float *hist, int32_t n, int32_t d, const int32_t *windows, int32_t nw, double lambda,
                                float *out, float *work) {
    predict(hist, n, d, windows, nw, lambda, 2, NULL, 0, out, work);
}

void kvt_sparse_rope_align(float *hist, int32_t n, int32_t heads, int32_t head_dim, const kvt_rope_params *rope, float *cs) {
    for (int32_t i = 0; i < n; i++) {
        kvt_rope_cache(rope, n - i, cs);
        for (int32_t j = 0; j < heads; j++) kvt_rope_apply(rope, cs, hist + ((int64_t)i * heads + j) * head_dim);
    }
}

float kvt_sparse_quest_bound(const float *q, const float *lo, const float *hi, int32_t d) {
    // per element the larger of q*lo and q*hi bounds q*k for every k in [lo, hi]; summed in double and
    // rounded up so that the float result bounds the float dot products too (their rounding is far smaller
    // than the relative margin kept here)
    double s = 0.0, mag = 0.0;
    for (int32_t x = 0; x < d; x++) {
        const double a = (double)q[x] * lo[x], b = (double)q[x] * hi[x];
        s += a > b ? a : b;
        mag += fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    }
    return (float)(s + mag * 1e-5 + 1e-30);
}

// Quickselect: the k-th largest (k >= 1) of v[0 .. n), reordering v.
static float kth_largest(float *v, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        const float a = v[lo], b = v[(lo + hi) / 2], c = v[hi];
        const float piv = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b)); // median of three
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] > piv) i++;
            while (v[j] < piv) j--;
            if (i <= j) {
                const float t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return v[want];
    }
    return v[want];
}

int64_t kvt_sparse_topk(const float *score, int64_t n, int64_t K, int64_t sink, int64_t recent, int32_t *sel,
                        uint8_t *mark, float *vals) {
    if (sink > n) sink = n;
    if (recent > n - sink) recent = n - sink;
    const int64_t m0 = sink, m1 = n - recent, m = m1 - m0; // the middle positions [m0, m1)
    int64_t kk = K - sink - recent;
    memset(mark, 0, (size_t)n);
    memset(mark, 1, (size_t)sink);
    memset(mark + m1, 1, (size_t)recent);
    if (kk >= m) {
        memset(mark + m0, 1, (size_t)m);
    } else if (kk > 0) {
        for (int64_t i = 0; i < m; i++) vals[i] = isnan(score[m0 + i]) ? -INFINITY : score[m0 + i];
        const float thr = kth_largest(vals, m, kk);
        int64_t c = 0;
        for (int64_t i = m0; i < m1; i++) {
            if (score[i] > thr) {
                mark[i] = 1;
                c++;
            }
        }
        for (int64_t i = m0; i < m1 && c < kk; i++) {
            if (!mark[i] && (score[i] == thr || (isnan(score[i]) && thr == -INFINITY))) {
                mark[i] = 1;
                c++;
            }
        }
    }
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) {
        if (mark[i]) sel[c++] = (int32_t)i;
    }
    return c;
}

// The k-th largest (1 <= k <= the total weight) of v[0 .. n) counting value i w[i] times, reordering v and w
// (quickselect with a three-way partition; no NaN in v). The reference of weighted_kth below.
static float weighted_kth_qs(float *v, int32_t *w, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n; // the values left: [lo, hi)
    for (;;) {
        const float a = v[lo], b = v[lo + (hi - lo - 1) / 2], c = v[hi - 1];
        const float piv = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b)); // median of three
        int64_t gt = lo, i = lo, lt = hi, G = 0, E = 0; // [lo, gt): > piv, [gt, i): == piv, [lt, hi): < piv
        while (i < lt) {
            const float x = v[i];
            const int32_t y = w[i];
            if (x > piv) {
                v[i] = v[gt], w[i] = w[gt], v[gt] = x, w[gt] = y, gt++, i++, G += y;
            } else if (x < piv) {
                lt--;
                v[i] = v[lt], w[i] = w[lt], v[lt] = x, w[lt] = y;
            } else {
                i++, E += y;
            }
        }
        if (k <= G) hi = gt;
        else if (k <= G + E) return piv;
        else k -= G + E, lo = lt;
    }
}

// A float's order as an unsigned integer (-0 as +0, which compares equal to it), and back.
static inline uint32_t order_key(float x) {
    if (x == 0.0f) x = 0.0f;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static inline float order_value(uint32_t k) {
    const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// The k-th largest (1 <= k <= the total weight) of v[0 .. n) counting value i w[i] times; v and w are scratch (their
// contents are lost). The value is defined by the multiset alone (the one v such that the weight above v is < k and the
// weight at or above v is >= k), so any exact method gives it: a radix select on order_key's bytes, the highest first
// (each pass: the weights per byte value among the values left, the byte where the weight from the top reaches k, the
// values with that byte kept in place), without the quickselect's branches on every comparison (this was ~4 us per
// KV head in the re-rank's pass 3 and ~10 us in the worker's top-k here; docs/log/SPARSE-log-2.md, "The re-rank's stall
// taken apart"). A -0 comes out as +0 (equal to it in every comparison of the callers); with a NaN in v (no caller
// passes one), the quickselect.
static inline uint32_t key_at(const float *v, int64_t i) { // the keys live in v's place (memcpy: no aliasing)
    uint32_t u;
    memcpy(&u, v + i, sizeof u);
    return u;
}

static float weighted_kth(float *v, int32_t *w, int64_t n, int64_t k) {
    int nan = 0;
    for (int64_t i = 0; i < n; i++) nan |= isnan(v[i]);
    if (nan) return weighted_kth_qs(v, w, n, k);
    for (int64_t i = 0; i < n; i++) {
        const uint32_t u = order_key(v[i]);
        memcpy(v + i, &u, sizeof u);
    }
    int64_t m = n;
    for (int32_t shift = 24; shift >= 0 && m > 1; shift -= 8) {
        int64_t h[256];
        memset(h, 0, sizeof h);
        for (int64_t i = 0; i < m; i++) h[(key_at(v, i) >> shift) & 255u] += w[i];
        int32_t b = 255;
        int64_t above = 0;
        while (b > 0 && above + h[b] < k) above += h[b--];
        k -= above;
        int64_t c = 0;
        for (int64_t i = 0; i < m; i++) {
            const uint32_t x = key_at(v, i);
            const int32_t y = w[i];
            memcpy(v + c, &x, sizeof x);
            w[c] = y;
            c += ((x >> shift) & 255u) == (uint32_t)b;
        }
        m = c;
    }
    // every value left has the same key (all its bytes chosen), or one value is left
    return order_value(key_at(v, 0));
}

// The end of the piece of the middle [m0, m1) that starts at a: the rest of a's page (pos NULL: x's page is x / B; else
// pos[x] / B, pos sorted). Without pos every piece after the first starts at a page start, so only the first divides.
static inline int64_t piece_end(const int32_t *pos, int64_t m0, int64_t a, int64_t m1, int32_t B) {
    if (!pos) {
        const int64_t e = a == m0 ? (a / B + 1) * B : a + B;
        return e < m1 ? e : m1;
    }
    const int64_t end = ((int64_t)pos[a] / B + 1) * B;
    int64_t e = a + 1;
    while (e < m1 && pos[e] < end) e++;
    return e;
}

int64_t kvt_sparse_topk_pages(const float *score, int64_t n, int64_t K, int64_t sink, int64_t recent, int32_t B,
                              const int32_t *pos, int32_t *sel, float *vals, int32_t *wts) {
    if (sink > n) sink = n;
    if (recent > n - sink) recent = n - sink;
    const int64_t m0 = sink, m1 = n - recent, kk = K - sink - recent; // the middle [m0, m1)
    int64_t c = 0;
    for (int64_t t = 0; t < m0; t++) sel[c++] = (int32_t)t;
    if (kk >= m1 - m0) {
        for (int64_t t = m0; t < m1; t++) sel[c++] = (int32_t)t;
    } else if (kk > 0) {
        int64_t ns = 0; // the middle cut into its pieces of pages, each one value
        for (int64_t a = m0, e; a < m1; a = e, ns++) {
            e = piece_end(pos, m0, a, m1, B);
            vals[ns] = isnan(score[a]) ? -INFINITY : score[a];
            wts[ns] = (int32_t)(e - a);
        }
        const float thr = weighted_kth(vals, wts, ns, kk);
        int64_t ties = kk; // what the pieces above thr leave to the ties (the lowest first)
        for (int64_t a = m0, e; a < m1; a = e) {
            e = piece_end(pos, m0, a, m1, B);
            if (score[a] > thr) ties -= e - a;
        }
        for (int64_t a = m0, e; a < m1; a = e) {
            e = piece_end(pos, m0, a, m1, B);
            int64_t take = 0;
            if (score[a] > thr) take = e - a;
            else if (score[a] == thr || (isnan(score[a]) && thr == -INFINITY)) take = ties < e - a ? ties : e - a, ties -= take;
            for (int64_t t = a; t < a + take; t++) sel[c++] = (int32_t)t;
        }
    }
    for (int64_t t = m1; t < n; t++) sel[c++] = (int32_t)t;
    return c;
}

float kvt_sparse_weighted_kth(float *v, int32_t *w, int64_t n, int64_t k) { return weighted_kth(v, w, n, k); }
