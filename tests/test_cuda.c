// test_cuda.c - suite `cuda`: every kernel of the CUDA backend (src/cuda/kvt_cuda.h) against the CPU
// reference of this repo, on random non-zero data, each device output filled with NaN before the
// kernel writes it. Normalized MSE (sum (gpu - cpu)^2 / sum cpu^2) <= 5e-4 for the matrix products and
// attention, <= 1e-6 for the element-wise kernels; argmax must be equal. Token counts 1, 2, 8, 9, 64,
// 512 (matvec: those <= 8). Every case skips, with the reason, when build/libkvtier-cuda.so or a CUDA
// device is absent. Lines "# cuda-result KERNEL TYPE N nmse X" and "# cuda-bw TYPE GBPS LIMIT" are
// read by tools/device/gpu_check.sh into its table.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/attn/attention.h"
#include "../src/base/threadpool.h"
#include "../src/base/timer.h"
#include "../src/exec/backend_cuda.h"
#include "../src/kernels/f16.h"
#include "../src/kernels/quant.h"
#include "../src/kernels/vec.h"
#include "../src/kv/kv.h"
#include "../src/plan/profile.h"
#include "../src/sched/sampler.h"
#include "test.h"

#define NMSE_MATMUL 5e-4
#define NMSE_EW 1e-6
#define MAX_ALLOCS 128

static const int k_tokens[] = {1, 2, 8, 9, 64, 512};
#define N_TOKENS ((int)(sizeof k_tokens / sizeof k_tokens[0]))
static const kvt_type k_wtypes[] = {KVT_TYPE_F16, KVT_TYPE_BF16, KVT_TYPE_Q8_0, KVT_TYPE_Q4_0,
                                    KVT_TYPE_Q4_1, KVT_TYPE_Q4_K, KVT_TYPE_Q5_K, KVT_TYPE_Q6_K};
#define N_WTYPES ((int)(sizeof k_wtypes / sizeof k_wtypes[0]))

typedef struct {
    kvt_cuda_backend be;
    const kvt_cuda_api *api;
    kvt_cuda_ctx *ctx;
    kvt_cuda_ctx *ctx_alt;           // a second context made with KVT_CUDA_MMV=q8_1 and KVT_CUDA_ATTN=tiled (the other paths
                                     // of mul_mat_vec and attn_paged)
    char skip_alt[256];              // why ctx_alt is NULL while ctx is not
    char skip[KVT_ERR_MSG_MAX + 64]; // reason every case skips ("" when a device is there)
    char err[KVT_ERR_MSG_MAX + 64];  // first failure of the current case
    void *allocs[MAX_ALLOCS];        // device allocations of the current case
    int n_allocs;
    uint64_t rng;
} gpu;

// ---------------------------------------------------------------- helpers

static float frand(gpu *g) { // uniform in [-1, 1), never 0
    g->rng ^= g->rng << 13, g->rng ^= g->rng >> 7, g->rng ^= g->rng << 17;
    float v = (float)((g->rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
    return v == 0.0f ? 0.5f : v;
}
static float *frand_array(gpu *g, int64_t n) {
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; p && i < n; i++) p[i] = frand(g);
    return p;
}

// Records the first failure of a case from an API status.
static bool cu_ok(gpu *g, int rc, const char *what) {
    if (rc == KVT_CUDA_OK) return true;
    if (!g->err[0]) snprintf(g->err, sizeof g->err, "%s: status %d: %s", what, rc, g->api->last_error(g->ctx));
    return false;
}

static void *dalloc(gpu *g, size_t bytes) {
    void *p = NULL;
    if (g->n_allocs == MAX_ALLOCS || !cu_ok(g, g->api->dev_malloc(g->ctx, bytes, &p), "dev_malloc")) return NULL;
    g->allocs[g->n_allocs++] = p;
    return p;
}
// Device buffer filled with NaN (0xff bytes): the poisoned output of a kernel.
static void *dpoison(gpu *g, size_t bytes) {
    void *p = dalloc(g, bytes);
    if (p && !cu_ok(g, g->api->memset_dev(g->ctx, p, 0xff, bytes), "memset_dev")) return NULL;
    return p;
}
// Device copy of host data (synchronous).
static void *dput(gpu *g, const void *host, size_t bytes) {
    void *p = dalloc(g, bytes);
    if (!p || !cu_ok(g, g->api->copy_h2d(g->ctx, p, host, bytes, KVT_CUDA_STREAM_COMPUTE), "copy_h2d") ||
        !cu_ok(g, g->api->stream_sync(g->ctx, KVT_CUDA_STREAM_COMPUTE), "stream_sync"))
        return NULL;
    return p;
}
// Waits for the compute stream and copies a device buffer back.
static bool dget(gpu *g, void *host, const void *dev, size_t bytes) {
    return dev && cu_ok(g, g->api->stream_sync(g->ctx, KVT_CUDA_STREAM_COMPUTE), "stream_sync (kernel)") &&
           cu_ok(g, g->api->copy_d2h(g->ctx, host, dev, bytes, KVT_CUDA_STREAM_COMPUTE), "copy_d2h") &&
           cu_ok(g, g->api->stream_sync(g->ctx, KVT_CUDA_STREAM_COMPUTE), "stream_sync (copy)");
}
// Frees the case's device memory and returns whether the case is still clean.
static bool case_end(gpu *g) {
    for (int i = 0; i < g->n_allocs; i++) g->api->dev_free(g->ctx, g->allocs[i]);
    g->n_allocs = 0;
    return !g->err[0];
}

// sum (a - b)^2 / sum b^2; INFINITY if any value is not finite (a poisoned output left unwritten).
static double nmse(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? num / den : num;
}

// Case start: false (and the case skipped) without a device.
static bool case_begin(gpu *g, const char *name) {
    if (g->ctx) {
        g->err[0] = 0;
        return true;
    }
    test_skip(name, g->skip);
    return false;
}

// Ends a case whose worst nmse over its variants is `worst` (limit `lim`).
static void case_report(gpu *g, const char *name, double worst, double lim) {
    const bool clean = case_end(g);
    test_result(clean && worst <= lim, name, "%s%snmse %.3g > %.1g", g->err, g->err[0] ? "; " : "", worst, lim);
}

// Random weights [n_rows, n_cols] of type t (quantized from uniform f32 by the reference quantizer).
static void *make_weights(gpu *g, kvt_type t, int64_t n_rows, int64_t n_cols) {
    const int64_t rb = kvt_row_size(t, n_cols);
    float *f = frand_array(g, n_rows * n_cols);
    uint8_t *w = malloc((size_t)(n_rows * rb));
    for (int64_t r = 0; f && w && r < n_rows; r++) kvt_type_ops_ref(t)->from_float(f + r * n_cols, w + r * rb, n_cols);
    free(f);
    return w;
}

// ---------------------------------------------------------------- matrix products

#define MM_ROWS 96
#define MM_COLS 512

// y_ref[t, r] = the reference dot of weight row r with activation row t quantized to vec_dot_type ([n_rows, n_cols] weights).
static void matmul_ref(kvt_type t, const uint8_t *w, int64_t n_rows, int64_t n_cols, const float *x, int64_t nt, float *y) {
    const kvt_type_ops *ops = kvt_type_ops_ref(t);
    const int64_t rb = kvt_row_size(t, n_cols), xb = kvt_row_size(ops->vec_dot_type, n_cols);
    uint8_t *xq = malloc((size_t)xb);
    for (int64_t k = 0; xq && k < nt; k++) {
        kvt_type_ops_ref(ops->vec_dot_type)->from_float(x + k * n_cols, xq, n_cols);
        for (int64_t r = 0; r < n_rows; r++) ops->vec_dot(n_cols, &y[k * n_rows + r], w + r * rb, xq);
    }
    free(xq);
}

// A context made with KVT_CUDA_MMV=mmv, KVT_CUDA_ATTN=attn, KVT_CUDA_ATTN_DECODE=dec, KVT_CUDA_MMVQ_ROWS=rows and
// KVT_CUDA_MMVQ_ILP=ilp (read by ctx_init; the caller's values put back; "": the library's default): the suite names both paths itself, whatever
// the library's defaults.
static int ctx_with(const kvt_cuda_api *api, const char *mmv, const char *attn, const char *dec, const char *rows,
                    const char *ilp, kvt_cuda_ctx **out, char *msg, int n) {
    enum { NV = 5 };
    static const char *const name[NV] = {"KVT_CUDA_MMV", "KVT_CUDA_ATTN", "KVT_CUDA_ATTN_DECODE", "KVT_CUDA_MMVQ_ROWS",
                                         "KVT_CUDA_MMVQ_ILP"};
    const char *val[NV] = {mmv, attn, dec, rows, ilp};
    char saved[NV][64];
    bool had[NV];
    for (int i = 0; i < NV; i++) {
        const char *was = getenv(name[i]);
        had[i] = was != NULL;
        snprintf(saved[i], sizeof saved[i], "%s", was ? was : "");
        setenv(name[i], val[i], 1);
    }
    const int rc = api->ctx_init(0, out, msg, n);
    for (int i = 0; i < NV; i++) {
        if (had[i]) setenv(name[i], saved[i], 1);
        else unsetenv(name[i]);
    }
    return rc;
}

// Runs a case on the alternative context (KVT_CUDA_MMV=q8_1, KVT_CUDA_ATTN=tiled): its allocations, copies and kernels;
// false (the case reported failed) when that context could not be made on a machine that has a device.
static bool use_alt(gpu *g, const char *name, kvt_cuda_ctx **saved) {
    *saved = g->ctx;
    if (g->ctx && !g->ctx_alt) {
        test_result(false, name, "no context with KVT_CUDA_MMV=q8_1 KVT_CUDA_ATTN=tiled: %s", g->skip_alt);
        return false;
    }
    g->ctx = g->ctx_alt;
    return true;
}

// The matrix products' paths: mul_mat_vec with f32 activations (the default context), mul_mat_vec with q8_1
// activations (the alternative context; F16 and BF16 keep the f32 path there), mul_mat_gemm.
enum { MM_VEC, MM_VEC_Q8_1, MM_GEMM };
static const char *const k_mm_name[] = {"mul_mat_vec", "mul_mat_vec_q8_1", "mul_mat_gemm"};

// One path and weight type: mul_mat_vec over 1 .. 9, 16, 17 and 64 (KVT_CUDA_MMV_BATCH_MAX) tokens, on 96 x 512 weights
// and on 37 x 4096 (an odd row count, several items per lane), every row of every call bit for bit that row's call
// alone (batch invariance: tiles of 8 rows summed as calls of their own); mul_mat_gemm over 1, 2, 8, 9, 64, 512 tokens
// on 96 x 512.
static void case_matmul(gpu *g, kvt_type t, int path) {
    char name[128];
    const bool gemm = path == MM_GEMM;
    snprintf(name, sizeof name, "cuda %s %s x %s tokens, %s", k_mm_name[path], kvt_type_name(t),
             gemm ? "{1,2,8,9,64,512}" : "{1..9,16,17,64}", gemm ? "96 x 512" : "96 x 512 and 37 x 4096, rows as alone");
    kvt_cuda_ctx *ctx0 = g->ctx;
    if (path == MM_VEC_Q8_1 && !use_alt(g, name, &ctx0)) return;
    if (!case_begin(g, name)) {
        g->ctx = ctx0;
        return;
    }
    double worst = 0;
    for (int shape = 0; shape < (gemm ? 1 : 2) && !g->err[0]; shape++) {
        const int64_t n_rows = shape ? 37 : 96, n_cols = shape ? 4096 : 512, max_t = gemm ? 512 : KVT_CUDA_MMV_BATCH_MAX;
        uint8_t *w = make_weights(g, t, n_rows, n_cols);
        float *x = frand_array(g, max_t * n_cols), *y = malloc((size_t)(max_t * n_rows) * sizeof *y),
              *ref = malloc((size_t)(max_t * n_rows) * sizeof *ref), *alone = malloc((size_t)(max_t * n_rows) * sizeof *alone);
        if (w && x && y && ref && alone) {
            matmul_ref(t, w, n_rows, n_cols, x, max_t, ref); // row t of the reference does not depend on the others
            void *dw = dput(g, w, (size_t)(n_rows * kvt_row_size(t, n_cols)));
            float *dx = dput(g, x, (size_t)(max_t * n_cols) * sizeof(float));
            for (int64_t r = 0; !gemm && r < max_t && dw && dx && !g->err[0]; r++) { // each activation row alone
                float *dy = dpoison(g, (size_t)n_rows * sizeof(float));
                if (!dy || !cu_ok(g, g->api->mul_mat_vec(g->ctx, (int)t, dw, n_rows, n_cols, dx + r * n_cols, 1, dy), "mul_mat_vec") ||
                    !dget(g, alone + r * n_rows, dy, (size_t)n_rows * sizeof(float)))
                    break;
            }
            for (int nt = 1; nt <= max_t && dw && dx && !g->err[0]; nt++) {
                bool listed = !gemm && (nt <= 9 || nt == 16 || nt == 17 || nt == max_t);
                for (int i = 0; gemm && i < N_TOKENS; i++) listed |= k_tokens[i] == nt;
                if (!listed) continue;
                float *dy = dpoison(g, (size_t)(nt * n_rows) * sizeof(float));
                if (!dy) break;
                const int rc = gemm ? g->api->mul_mat_gemm(g->ctx, (int)t, dw, n_rows, n_cols, dx, nt, dy)
                                    : g->api->mul_mat_vec(g->ctx, (int)t, dw, n_rows, n_cols, dx, nt, dy);
                if (!cu_ok(g, rc, k_mm_name[path]) || !dget(g, y, dy, (size_t)(nt * n_rows) * sizeof(float))) break;
                const double e = nmse(y, ref, (int64_t)nt * n_rows);
                printf("# cuda-result %s %s %d nmse %.3g\n", k_mm_name[path], kvt_type_name(t), nt, e);
                worst = fmax(worst, e);
                if (!gemm && memcmp(y, alone, (size_t)(nt * n_rows) * sizeof(float)))
                    snprintf(g->err, sizeof g->err, "%d rows: not bit for bit each row's call alone", nt);
            }
        } else {
            snprintf(g->err, sizeof g->err, "out of host memory");
        }
        free(w), free(x), free(y), free(ref), free(alone);
    }
    case_report(g, name, worst, NMSE_MATMUL);
    g->ctx = ctx0;
}

// mul_mat_vec_multi (ABI 9): three products of one x (q4_K 96 x 512, q6_K 40 x 512, f16 24 x 512: a layer's q, k, v of
// mixed types) over 1, 3 and 9 tokens, each y bit for bit its own mul_mat_vec call, on the default context (f32
// activations) and the alternative one (q8_1: x quantized once for the two quantized products); 0 and
// KVT_CUDA_MV_MULTI_MAX + 1 products refused.
static void case_matvec_multi(gpu *g, int path) {
    char name[128];
    snprintf(name, sizeof name, "cuda mul_mat_vec_multi (%s): q4_K, q6_K, f16 of one x x {1,3,9} tokens, each its call alone",
             path == MM_VEC ? "f32 activations" : "q8_1 activations");
    kvt_cuda_ctx *ctx0 = g->ctx;
    if (path == MM_VEC_Q8_1 && !use_alt(g, name, &ctx0)) return;
    if (!case_begin(g, name)) {
        g->ctx = ctx0;
        return;
    }
    static const kvt_type types[3] = {KVT_TYPE_Q4_K, KVT_TYPE_Q6_K, KVT_TYPE_F16};
    static const int64_t rows[3] = {96, 40, 24};
    const int64_t n_cols = 512, max_t = 9;
    void *dw[3] = {NULL, NULL, NULL};
    float *x = frand_array(g, max_t * n_cols), *a = malloc((size_t)(max_t * 96) * sizeof *a), *b = malloc((size_t)(max_t * 96) * sizeof *b);
    float *dx = x ? dput(g, x, (size_t)(max_t * n_cols) * sizeof(float)) : NULL;
    for (int i = 0; i < 3; i++) {
        uint8_t *w = make_weights(g, types[i], rows[i], n_cols);
        dw[i] = w ? dput(g, w, (size_t)(rows[i] * kvt_row_size(types[i], n_cols))) : NULL;
        free(w);
    }
    static const int toks[3] = {1, 3, 9};
    for (int k = 0; k < 3 && a && b && dx && dw[0] && dw[1] && dw[2] && !g->err[0]; k++) {
        const int nt = toks[k];
        kvt_cuda_mv mv[3];
        float *dy[3], *dz[3];
        for (int i = 0; i < 3; i++) {
            dy[i] = dpoison(g, (size_t)(nt * rows[i]) * sizeof(float));
            dz[i] = dpoison(g, (size_t)(nt * rows[i]) * sizeof(float));
            mv[i] = (kvt_cuda_mv){(int)types[i], dw[i], rows[i], dy[i]};
        }
        if (!dy[2] || !dz[2] || !cu_ok(g, g->api->mul_mat_vec_multi(g->ctx, mv, 3, n_cols, dx, nt), "mul_mat_vec_multi")) break;
        for (int i = 0; i < 3 && !g->err[0]; i++) {
            if (!cu_ok(g, g->api->mul_mat_vec(g->ctx, (int)types[i], dw[i], rows[i], n_cols, dx, nt, dz[i]), "mul_mat_vec") ||
                !dget(g, a, dy[i], (size_t)(nt * rows[i]) * sizeof(float)) || !dget(g, b, dz[i], (size_t)(nt * rows[i]) * sizeof(float)))
                break;
            if (memcmp(a, b, (size_t)(nt * rows[i]) * sizeof(float)))
                snprintf(g->err, sizeof g->err, "%d tokens: product %d (%s) not bit for bit its call alone", nt, i, kvt_type_name(types[i]));
        }
    }
    if (!g->err[0] && dx && dw[0]) { // the count of products is checked
        kvt_cuda_mv mv[KVT_CUDA_MV_MULTI_MAX + 1];
        for (int i = 0; i <= KVT_CUDA_MV_MULTI_MAX; i++) mv[i] = (kvt_cuda_mv){(int)types[0], dw[0], rows[0], NULL};
        if (g->api->mul_mat_vec_multi(g->ctx, mv, 0, n_cols, dx, 1) != KVT_CUDA_ERR_ARG ||
            g->api->mul_mat_vec_multi(g->ctx, mv, KVT_CUDA_MV_MULTI_MAX + 1, n_cols, dx, 1) != KVT_CUDA_ERR_ARG)
            snprintf(g->err, sizeof g->err, "0 or %d products not refused", KVT_CUDA_MV_MULTI_MAX + 1);
    }
    free(x), free(a), free(b);
    const bool clean = case_end(g);
    test_result(clean, name, "%s", g->err);
    g->ctx = ctx0;
}

// dequant_f16 (one weight matrix) and get_rows (embedding rows, ids with repeats) against to_float.
static void case_dequant_rows(gpu *g, kvt_type t) {
    char name[96];
    snprintf(name, sizeof name, "cuda dequant_f16 + get_rows %s x {1,2,8,9,64,512} ids", kvt_type_name(t));
    if (!case_begin(g, name)) return;
    uint8_t *w = make_weights(g, t, MM_ROWS, MM_COLS);
    const int64_t n = MM_ROWS * MM_COLS, rb = kvt_row_size(t, MM_COLS);
    float *ref = malloc((size_t)n * sizeof *ref), *got = malloc(512 * MM_COLS * sizeof *got), *rows = malloc(512 * MM_COLS * sizeof *rows);
    uint16_t *h = malloc((size_t)n * sizeof *h);
    int32_t ids[512];
    double worst = 0;
    if (w && ref && got && rows && h) {
        for (int64_t r = 0; r < MM_ROWS; r++) kvt_type_ops_ref(t)->to_float(w + r * rb, ref + r * MM_COLS, MM_COLS);
        void *dw = dput(g, w, (size_t)(MM_ROWS * rb));
        uint16_t *dh = dpoison(g, (size_t)n * 2);
        if (dw && dh && cu_ok(g, g->api->dequant_f16(g->ctx, (int)t, dw, n, dh), "dequant_f16") && dget(g, h, dh, (size_t)n * 2)) {
            for (int64_t i = 0; i < n; i++) got[i] = kvt_f16_to_f32(h[i]);
            worst = nmse(got, ref, n); // f16 rounding of the values: ~1e-8
            printf("# cuda-result dequant_f16 %s %lld nmse %.3g\n", kvt_type_name(t), (long long)n, worst);
        }
        for (int i = 0; i < 512; i++) ids[i] = (int32_t)((g->rng = g->rng * 6364136223846793005ull + 1) >> 33) % MM_ROWS;
        int32_t *dids = dput(g, ids, sizeof ids);
        for (int i = 0; i < N_TOKENS && dw && dids; i++) {
            const int nt = k_tokens[i];
            float *dout = dpoison(g, (size_t)nt * MM_COLS * sizeof(float));
            if (!dout || !cu_ok(g, g->api->get_rows(g->ctx, (int)t, dw, MM_ROWS, MM_COLS, dids, nt, dout), "get_rows") ||
                !dget(g, got, dout, (size_t)nt * MM_COLS * sizeof(float)))
                break;
            for (int k = 0; k < nt; k++) memcpy(rows + k * MM_COLS, ref + ids[k] * MM_COLS, MM_COLS * sizeof(float));
            const double e = nmse(got, rows, (int64_t)nt * MM_COLS);
            printf("# cuda-result get_rows %s %d nmse %.3g\n", kvt_type_name(t), nt, e);
            worst = fmax(worst, e);
        }
    } else {
        snprintf(g->err, sizeof g->err, "out of host memory");
    }
    case_report(g, name, worst, NMSE_EW);
    free(w), free(ref), free(got), free(rows), free(h);
}

// Achieved bandwidth of mul_mat_vec at one token beside the probe's device read bandwidth, with f32 activations and
// with q8_1 activations (the quantized types; the time includes the activations' quantization), for 4096 x 4096
// weights (9 MB of Q4_K: a few microseconds, launch-bound) and a llama3-8b FFN's 14336 x 4096 and 4096 x 14336 (the
// kernel's own rate). Reported, not asserted (the issue's >= 60% is for a whole decode step). Lines
// "# cuda-bw TYPE GBPS LIMIT PATH ROWSxCOLS". q4_K and q6_K (a Q4_K_M model's weights) also with 1 and 4 weight rows
// per warp (KVT_CUDA_MMVQ_ROWS; PATH q8_1r1, q8_1r4) beside the default 2, and with 2 items a lane in flight
// (KVT_CUDA_MMVQ_ILP=2; q8_1i2 with 2 rows, q8_1r1i2 with 1).
static void case_matvec_bandwidth(gpu *g) {
    const char *name = "cuda mul_mat_vec bandwidth, 4096 x 4096, 14336 x 4096, 4096 x 14336, 1 token, f32 and q8_1 activations (reported)";
    if (getenv("KVT_CUDA_NO_BENCH")) { // gpu_check.sh's compute-sanitizer run
        test_skip(name, "KVT_CUDA_NO_BENCH is set");
        return;
    }
    if (!case_begin(g, name)) return;
    kvt_profile prof;
    memset(&prof, 0, sizeof prof);
    kvt_err perr = {0};
    const double limit = kvt_profile_gpu(0, true, &prof, &perr) == KVT_OK ? prof.gpu_mem_gbps : 0;
    static const int64_t shapes[3][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336}}; // rows N, columns K
    const int64_t KMAX = 14336;
    float *x = frand_array(g, KMAX);
    float *dx = x ? dput(g, x, KMAX * sizeof(float)) : NULL, *dy = dpoison(g, KMAX * sizeof(float));
    // f32, q8_1, then q8_1 with 1 and 4 rows per warp, and 2 items in flight with 2 and 1 rows
    enum { N_PATHS = MM_VEC_Q8_1 + 5 };
    kvt_cuda_ctx *pctx[N_PATHS] = {g->ctx, g->ctx_alt};
    static const char *const pname[N_PATHS] = {"f32", "q8_1", "q8_1r1", "q8_1r4", "q8_1i2", "q8_1r1i2"};
    static const char *const prows[N_PATHS] = {"", "", "1", "4", "2", "1"}, *const pilp[N_PATHS] = {"", "", "1", "1", "2", "2"};
    char pmsg[KVT_CUDA_ERR_MAX];
    for (int i = MM_VEC_Q8_1 + 1; i < N_PATHS; i++)
        if (ctx_with(g->api, "q8_1", "chunked", "head", prows[i], pilp[i], &pctx[i], pmsg, (int)sizeof pmsg) != KVT_CUDA_OK)
            pctx[i] = NULL;
    for (int sh = 0; sh < 3; sh++) {
        const int64_t N = shapes[sh][0], K = shapes[sh][1];
        for (int i = 0; i < N_WTYPES && dx && dy; i++) {
            const kvt_type t = k_wtypes[i];
            const size_t bytes = (size_t)(N * kvt_row_size(t, K));
            void *dw = dalloc(g, bytes);
            if (!dw || !cu_ok(g, g->api->memset_dev(g->ctx, dw, 0x11, bytes), "memset_dev")) break; // finite values of every type
            for (int path = MM_VEC; path < N_PATHS; path++) {
                kvt_cuda_ctx *c = pctx[path];
                if (!c || (path != MM_VEC && (t == KVT_TYPE_F16 || t == KVT_TYPE_BF16))) continue; // no q8_1 path
                if (path > MM_VEC_Q8_1 && t != KVT_TYPE_Q4_K && t != KVT_TYPE_Q6_K) continue; // rows per warp: q4_K, q6_K only
                cu_ok(g, g->api->stream_sync(g->ctx, KVT_CUDA_STREAM_COMPUTE), "stream_sync"); // the memset done
                kvt_cuda_ctx *ctx0 = g->ctx;
                g->ctx = c; // (for cu_ok's message)
                double best = INFINITY;
                for (int rep = 0; rep < 5; rep++) {
                    const double t0 = kvt_time_ms();
                    for (int k = 0; k < 20; k++) cu_ok(g, g->api->mul_mat_vec(c, (int)t, dw, N, K, dx, 1, dy), "mul_mat_vec");
                    cu_ok(g, g->api->stream_sync(c, KVT_CUDA_STREAM_COMPUTE), "stream_sync");
                    best = fmin(best, (kvt_time_ms() - t0) / 20);
                }
                g->ctx = ctx0;
                printf("# cuda-bw %s %.1f %.1f %s %lldx%lld\n", kvt_type_name(t), (double)bytes / (best * 1e-3) / 1e9, limit,
                       pname[path], (long long)N, (long long)K);
            }
            g->api->dev_free(g->ctx, dw);
            g->allocs[--g->n_allocs] = NULL;
        }
    }
    free(x);
    for (int i = MM_VEC_Q8_1 + 1; i < N_PATHS; i++)
        if (pctx[i]) g->api->ctx_free(pctx[i]);
    const bool clean = case_end(g);
    test_result(clean, name, "%s", g->err);
}

// copy_batch (ABI 5; the device KV's batched loads and write-backs): 100 copies of mixed sizes (16-byte multiples and
// odd ones, at odd offsets), pinned host -> VRAM through the host memory's device address, then VRAM -> another pinned
// buffer, then VRAM -> VRAM, in batches of at most KVT_CUDA_COPY_BATCH_MAX: every byte arrives, the gaps between the
// destinations keep their poison. With the bench allowed: GB/s of 64 MiB in blocks of 16 KiB and 256 KiB, as batched
// kernels, as one DMA per block and as one DMA of it all, each direction ("# cuda-copy" lines, gpu_check.sh's table).
static void case_copy_batch(gpu *g) {
    const char *name = "cuda copy_batch: scattered copies pinned -> VRAM -> pinned -> VRAM, every byte, gaps untouched";
    if (!case_begin(g, name)) return;
    enum { N = 100, GAP = 64 };
    const kvt_cuda_api *A = g->api;
    size_t off[N], len[N], total = 0;
    for (int i = 0; i < N; i++) {
        len[i] = i % 3 == 0 ? 1000 + (size_t)i : 2048 * (size_t)(1 + i % 4); // odd and 16-byte multiples
        off[i] = total + (i % 5 == 0 ? 3 : 0);                                 // some at odd offsets
        total = off[i] + len[i] + GAP;
    }
    uint8_t *src = NULL, *back = NULL, *want = malloc(total), *got = malloc(total);
    void *dsrc = NULL, *dback = NULL;
    cu_ok(g, A->host_malloc(g->ctx, total, (void **)&src), "host_malloc");
    cu_ok(g, A->host_malloc(g->ctx, total, (void **)&back), "host_malloc");
    if (src && back) {
        cu_ok(g, A->host_device_ptr(g->ctx, src, &dsrc), "host_device_ptr");
        cu_ok(g, A->host_device_ptr(g->ctx, back, &dback), "host_device_ptr");
    }
    uint8_t *dv = dpoison(g, total), *dv2 = dpoison(g, total);
    bool same = false;
    if (src && back && dsrc && dback && dv && dv2 && want && got) {
        for (size_t k = 0; k < total; k++) src[k] = (uint8_t)((g->rng = g->rng * 6364136223846793005ull + 1442695040888963407ull) >> 56);
        memset(back, 0xff, total);
        memset(want, 0xff, total);
        for (int i = 0; i < N; i++) memcpy(want + off[i], src + off[i], len[i]);
        kvt_cuda_copy l[KVT_CUDA_COPY_BATCH_MAX];
        for (int pass = 0; pass < 3; pass++) { // pinned -> VRAM, VRAM -> pinned, VRAM -> VRAM
            uint8_t *to = pass == 0 ? dv : pass == 1 ? (uint8_t *)dback : dv2;
            const uint8_t *from = pass == 0 ? (const uint8_t *)dsrc : dv;
            for (int i0 = 0; i0 < N; i0 += 64) { // (batches of 64 and 36)
                const int n = N - i0 < 64 ? N - i0 : 64;
                for (int i = 0; i < n; i++) l[i] = (kvt_cuda_copy){to + off[i0 + i], from + off[i0 + i], len[i0 + i]};
                cu_ok(g, A->copy_batch(g->ctx, l, n, KVT_CUDA_STREAM_COPY), "copy_batch");
            }
        }
        cu_ok(g, A->stream_sync(g->ctx, KVT_CUDA_STREAM_COPY), "stream_sync");
        const bool b1 = !memcmp(back, want, total);
        same = b1 && dget(g, got, dv2, total) && !memcmp(got, want, total);
        if (!same && !g->err[0]) snprintf(g->err, sizeof g->err, "bytes differ (%s)", b1 ? "VRAM -> VRAM" : "pinned -> VRAM -> pinned");
    }
    const int bad = A->copy_batch(g->ctx, NULL, 0, KVT_CUDA_STREAM_COPY); // refused, named
    A->host_free(g->ctx, src);
    A->host_free(g->ctx, back);
    free(want), free(got);
    const bool clean = case_end(g);
    test_result(clean && same && bad == KVT_CUDA_ERR_ARG, name, "%s; refused empty batch: %d", g->err, bad);
    const char *bname = "cuda copy_batch bandwidth against one DMA per block, 64 MiB in 16 KiB and 256 KiB blocks (reported)";
    if (getenv("KVT_CUDA_NO_BENCH")) {
        test_skip(bname, "KVT_CUDA_NO_BENCH is set");
        return;
    }
    if (!case_begin(g, bname)) return;
    const size_t MB64 = (size_t)64 << 20;
    uint8_t *h = NULL, *dh = NULL, *d = dalloc(g, MB64);
    cu_ok(g, A->host_malloc(g->ctx, MB64, (void **)&h), "host_malloc");
    if (h) cu_ok(g, A->host_device_ptr(g->ctx, h, (void **)&dh), "host_device_ptr");
    for (int bs = 0; bs < 2 && h && dh && d; bs++) {
        const size_t blk = bs ? (size_t)256 << 10 : (size_t)16 << 10, nblk = MB64 / blk;
        for (int dir = 0; dir < 2; dir++) { // host -> device, device -> host
            double ms[3];
            for (int way = 0; way < 3; way++) { // batched, a DMA per block, one DMA
                double best = INFINITY;
                for (int rep = 0; rep < 3; rep++) {
                    const double t0 = kvt_time_ms();
                    if (way == 0) {
                        kvt_cuda_copy l[KVT_CUDA_COPY_BATCH_MAX];
                        for (size_t i0 = 0; i0 < nblk; i0 += KVT_CUDA_COPY_BATCH_MAX) {
                            const int n = (int)(nblk - i0 < KVT_CUDA_COPY_BATCH_MAX ? nblk - i0 : KVT_CUDA_COPY_BATCH_MAX);
                            for (int i = 0; i < n; i++) {
                                const size_t o = (i0 + (size_t)i) * blk;
                                l[i] = dir ? (kvt_cuda_copy){dh + o, d + o, blk} : (kvt_cuda_copy){d + o, dh + o, blk};
                            }
                            cu_ok(g, A->copy_batch(g->ctx, l, n, KVT_CUDA_STREAM_COPY), "copy_batch");
                        }
                    } else {
                        const size_t each = way == 1 ? blk : MB64;
                        for (size_t o = 0; o < MB64; o += each) {
                            if (dir) cu_ok(g, A->copy_d2h(g->ctx, h + o, d + o, each, KVT_CUDA_STREAM_COPY), "copy_d2h");
                            else cu_ok(g, A->copy_h2d(g->ctx, d + o, h + o, each, KVT_CUDA_STREAM_COPY), "copy_h2d");
                        }
                    }
                    cu_ok(g, A->stream_sync(g->ctx, KVT_CUDA_STREAM_COPY), "stream_sync");
                    best = fmin(best, kvt_time_ms() - t0);
                }
                ms[way] = best;
            }
            printf("# cuda-copy %s %zuK batched %.1f dma-per-block %.1f dma-one %.1f GB/s\n", dir ? "d2h" : "h2d", blk >> 10,
                   MB64 / (ms[0] * 1e-3) / 1e9, MB64 / (ms[1] * 1e-3) / 1e9, MB64 / (ms[2] * 1e-3) / 1e9);
        }
    }
    A->host_free(g->ctx, h);
    const bool ok2 = case_end(g);
    test_result(ok2, bname, "%s", g->err);
}

// ---------------------------------------------------------------- element-wise

// rmsnorm: plain rows (n 576, weight), rows without weight, and per-head (head_dim 64, 9 heads).
static void case_rmsnorm(gpu *g) {
    const char *name = "cuda rmsnorm (rows, no weight, per-head q/k) x {1,2,8,9,64,512} tokens";
    if (!case_begin(g, name)) return;
    static const int shapes[3][3] = {{576, 1, 1}, {576, 1, 0}, {64, 9, 1}}; // n, heads per token, weighted
    double worst = 0;
    for (int s = 0; s < 3; s++) {
        const int n = shapes[s][0], heads = shapes[s][1];
        const int64_t rows = 512 * (int64_t)heads, total = rows * n;
        float *x = frand_array(g, total), *w = frand_array(g, n), *ref = malloc((size_t)total * sizeof *ref),
              *got = malloc((size_t)total * sizeof *got);
        float *dx = x ? dput(g, x, (size_t)total * sizeof(float)) : NULL, *dw = w ? dput(g, w, (size_t)n * sizeof(float)) : NULL;
        for (int i = 0; i < N_TOKENS && ref && got && dx && dw; i++) {
            const int64_t r = (int64_t)k_tokens[i] * heads;
            for (int64_t k = 0; k < r; k++) kvt_rmsnorm_f32(ref + k * n, x + k * n, shapes[s][2] ? w : NULL, n, 1e-6f);
            float *dy = dpoison(g, (size_t)(r * n) * sizeof(float));
            if (!dy || !cu_ok(g, g->api->rmsnorm(g->ctx, dx, shapes[s][2] ? dw : NULL, dy, r, n, 1e-6f), "rmsnorm") ||
                !dget(g, got, dy, (size_t)(r * n) * sizeof(float)))
                break;
            const double e = nmse(got, ref, r * n);
            printf("# cuda-result rmsnorm n%d/h%d/w%d %d nmse %.3g\n", n, heads, shapes[s][2], k_tokens[i], e);
            worst = fmax(worst, e);
        }
        free(x), free(w), free(ref), free(got);
    }
    case_report(g, name, worst, NMSE_EW);
}

// rope: normal and neox, full and partial rotation, two bases, a frequency scale and factors.
static void case_rope(gpu *g) {
    const char *name = "cuda rope (normal, neox; partial n_rot; freq scale and factors) x {1,2,8,9,64,512} tokens";
    if (!case_begin(g, name)) return;
    enum { HEADS = 4, DIM = 64 };
    static const struct { int neox, n_rot; float base, scale; int factors; } v[] = {
        {0, 64, 10000.0f, 1.0f, 0}, {1, 64, 10000.0f, 1.0f, 0}, {1, 32, 1000000.0f, 0.25f, 0}, {0, 48, 500000.0f, 1.0f, 1}};
    const int64_t total = 512 * HEADS * DIM;
    float *x = frand_array(g, total), *ref = malloc((size_t)total * sizeof *ref), *got = malloc((size_t)total * sizeof *got);
    float ff[DIM / 2], cs[DIM];
    int32_t pos[512];
    for (int i = 0; i < DIM / 2; i++) ff[i] = 1.0f + (float)i / 8.0f;
    for (int i = 0; i < 512; i++) pos[i] = i % 3 == 0 ? i : (int32_t)(frand(g) * 2048.0f + 2048.0f); // some past 4k positions
    int32_t *dpos = dput(g, pos, sizeof pos);
    float *dff = dput(g, ff, sizeof ff);
    double worst = 0;
    for (size_t k = 0; k < sizeof v / sizeof v[0] && x && ref && got && dpos && dff; k++) {
        const kvt_rope_params p = {v[k].n_rot, v[k].neox, v[k].base, v[k].scale, v[k].factors ? ff : NULL};
        for (int i = 0; i < N_TOKENS; i++) {
            const int nt = k_tokens[i];
            memcpy(ref, x, (size_t)nt * HEADS * DIM * sizeof(float));
            for (int t = 0; t < nt; t++) {
                kvt_rope_cache(&p, pos[t], cs);
                for (int h = 0; h < HEADS; h++) kvt_rope_apply(&p, cs, ref + ((int64_t)t * HEADS + h) * DIM);
            }
            float *dx = dput(g, x, (size_t)nt * HEADS * DIM * sizeof(float)); // in place: the input is the output
            const kvt_cuda_rope_args a = {nt, HEADS, DIM, v[k].n_rot, v[k].neox, v[k].base, v[k].scale, v[k].factors ? dff : NULL, dpos};
            if (!dx || !cu_ok(g, g->api->rope(g->ctx, dx, &a), "rope") || !dget(g, got, dx, (size_t)nt * HEADS * DIM * sizeof(float))) break;
            const double e = nmse(got, ref, (int64_t)nt * HEADS * DIM);
            printf("# cuda-result rope neox%d/rot%d/ff%d %d nmse %.3g\n", v[k].neox, v[k].n_rot, v[k].factors, nt, e);
            worst = fmax(worst, e);
        }
    }
    free(x), free(ref), free(got);
    case_report(g, name, worst, NMSE_EW);
}

// swiglu, geglu and add over n = tokens * 1536 elements (in place, as the forward pass uses them).
static void case_glu_add(gpu *g) {
    const char *name = "cuda swiglu, geglu, add x {1,2,8,9,64,512} tokens";
    if (!case_begin(g, name)) return;
    const int64_t width = 1536, total = 512 * width;
    float *a = frand_array(g, total), *b = frand_array(g, total), *ref = malloc((size_t)total * sizeof *ref),
          *got = malloc((size_t)total * sizeof *got);
    for (int64_t i = 0; a && i < total; i++) a[i] *= 6.0f; // the activations' interesting range
    float *db = b ? dput(g, b, (size_t)total * sizeof(float)) : NULL;
    double worst = 0;
    for (int op = 0; op < 3 && a && ref && got && db; op++) {
        for (int i = 0; i < N_TOKENS; i++) {
            const int64_t n = k_tokens[i] * width;
            memcpy(ref, a, (size_t)n * sizeof(float));
            if (op == 0) kvt_swiglu_f32(ref, b, n);
            else if (op == 1) kvt_geglu_f32(ref, b, n);
            else kvt_vec_add_f32(ref, b, n);
            float *da = dput(g, a, (size_t)n * sizeof(float));
            const int rc = !da ? KVT_CUDA_ERR_NOMEM
                           : op == 0 ? g->api->swiglu(g->ctx, da, db, n)
                           : op == 1 ? g->api->geglu(g->ctx, da, db, n)
                                     : g->api->add(g->ctx, da, db, n);
            if (!cu_ok(g, rc, op == 0 ? "swiglu" : op == 1 ? "geglu" : "add") || !dget(g, got, da, (size_t)n * sizeof(float))) break;
            const double e = nmse(got, ref, n);
            printf("# cuda-result %s f32 %d nmse %.3g\n", op == 0 ? "swiglu" : op == 1 ? "geglu" : "add", k_tokens[i], e);
            worst = fmax(worst, e);
        }
    }
    free(a), free(b), free(ref), free(got);
    case_report(g, name, worst, NMSE_EW);
}

// argmax over rows of a 49152-entry vocabulary, with ties to the lowest index planted, NaNs (at index 0 in some rows:
// kvt_argmax's 0), infinities; each row count once as kvt_argmax and once flagging non-finite rows (-1).
static bool row_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}
static void case_argmax(gpu *g) {
    const char *name = "cuda argmax (ties to the lowest id, NaN, inf, flagged) x {1,2,8,9,64,512} rows";
    if (!case_begin(g, name)) return;
    const int64_t n = 49152, total = 512 * n;
    float *x = frand_array(g, total);
    int32_t got[512], want_bad = 0;
    int bad = -1, bad_flag = 0;
    for (int r = 0; x && r < 512; r++) {
        float *xr = x + r * n;
        const int32_t m = kvt_argmax(xr, n);
        if (r % 3 == 0) xr[(m + 7919) % n] = xr[m]; // a tie of the row's max at two places in every third row
        if (r % 7 == 1) xr[(m + 11) % n] = NAN;      // a NaN beside
        if (r % 7 == 2) xr[0] = NAN;                 // a NaN at index 0: kvt_argmax says 0
        if (r % 7 == 3) xr[(m + 5) % n] = INFINITY;
        if (r % 7 == 4) xr[(m + 3) % n] = -INFINITY;
    }
    float *dx = x ? dput(g, x, (size_t)total * sizeof(float)) : NULL;
    for (int i = 0; i < N_TOKENS && dx && bad < 0; i++) {
        const int rows = k_tokens[i];
        for (int flag = 0; flag < 2 && bad < 0; flag++) {
            int32_t *dout = dpoison(g, (size_t)rows * sizeof(int32_t));
            if (!dout || !cu_ok(g, g->api->argmax(g->ctx, dx, rows, n, dout, flag), "argmax") ||
                !dget(g, got, dout, (size_t)rows * sizeof(int32_t)))
                break;
            for (int r = 0; r < rows && bad < 0; r++) {
                const int32_t want = flag && !row_finite(x + r * n, n) ? -1 : kvt_argmax(x + r * n, n);
                if (got[r] != want) bad = r, bad_flag = flag, want_bad = want;
            }
        }
    }
    const bool clean = case_end(g);
    test_result(clean && bad < 0, name, "%s%s row %d (flag %d): got %d, want %d", g->err, g->err[0] ? ";" : "", bad, bad_flag,
                bad >= 0 ? got[bad] : 0, want_bad);
    free(x);
}

// ---------------------------------------------------------------- attention

enum { NH = 8, NKV = 2 }; // query heads over KV heads (GQA)

// The repo's attention (kvt_attention over a contiguous f16 cache of len positions) of n query tokens at
// positions pos0 .. pos0 + n - 1. k, v: [len, NKV * dim]; q, out: [n, NH * dim].
static kvt_status attn_ref(int dim, int block_len, int64_t len, const float *k, const float *v, const float *q, int64_t pos0,
                           int64_t n, float *out, kvt_err *err) {
    const kvt_kv_params kp = {KVT_TYPE_F16, 1, NKV, dim, dim, len, block_len, 0};
    const kvt_attn_params ap = {NH, 1.0f / sqrtf((float)dim), 0, 0};
    kvt_kv *kv = NULL;
    kvt_threadpool *pool = NULL;
    void *scratch = NULL, *ws = NULL;
    kvt_status st = kvt_kv_contig_init(&kp, &kv, err);
    if (!st) st = kvt_threadpool_init(1, &pool, err);
    if (!st) st = kv->ops->append(kv, 0, 0, 0, len, k, v, err);
    if (!st && (!(scratch = malloc((size_t)kvt_attn_scratch_bytes(kv, NH, 0))) ||
                !(ws = malloc((size_t)kvt_attn_workspace_bytes(kv, NH, 1)))))
        st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    if (!st) st = kvt_attention(kv, 0, 0, &ap, q, pos0, n, out, pool, &scratch, ws, err);
    free(scratch), free(ws);
    kvt_threadpool_free(pool);
    kvt_kv_free(kv);
    return st;
}

// KV blocks of several sequences in one device pool: K blocks then V blocks of [BL, NKV, D] f16, laid
// out in shuffled slots, the unused rows of partial blocks NaN (a read past a sequence's end shows), and
// the block tables [n_seq, max_blocks] of device pointers into the pool.
typedef struct {
    int D, BL, n_blocks, max_blocks;
    size_t blk, bytes;          // halves per block; bytes of the pool
    uint16_t *host;             // pinned (pinned) or malloc'ed
    void *dev;
    const void **ktab, **vtab;  // host copies of the tables
    bool pinned;
} kv_pool;

static bool pool_init(gpu *g, kv_pool *p, int n_seq, const int *lens, int D, int BL, bool pinned) {
    memset(p, 0, sizeof *p);
    p->D = D, p->BL = BL, p->pinned = pinned;
    int max_len = 0;
    for (int s = 0; s < n_seq; s++) p->n_blocks += (lens[s] + BL - 1) / BL, max_len = lens[s] > max_len ? lens[s] : max_len;
    p->max_blocks = (max_len + BL - 1) / BL;
    p->blk = (size_t)BL * NKV * D;
    p->bytes = 2 * (size_t)p->n_blocks * p->blk * sizeof(uint16_t);
    if (pinned) cu_ok(g, g->api->host_malloc(g->ctx, p->bytes, (void **)&p->host), "host_malloc");
    else p->host = malloc(p->bytes);
    p->ktab = calloc((size_t)n_seq * p->max_blocks, sizeof *p->ktab);
    p->vtab = calloc((size_t)n_seq * p->max_blocks, sizeof *p->vtab);
    p->dev = dalloc(g, p->bytes);
    if (p->host && p->ktab && p->vtab && p->dev) {
        for (size_t i = 0; i < p->bytes / 2; i++) p->host[i] = 0x7e00; // f16 NaN
        return true;
    }
    if (!g->err[0]) snprintf(g->err, sizeof g->err, "out of memory");
    return false;
}

static void pool_free(gpu *g, kv_pool *p) {
    if (p->pinned) g->api->host_free(g->ctx, p->host);
    else free(p->host);
    free(p->ktab), free(p->vtab);
}

// Stores sequence s's rows (k, v: [len, NKV * D] f32) in blocks whose slots come from slot[*next ..).
static void pool_put(kv_pool *p, int s, int len, const float *k, const float *v, const int *slot, int *next) {
    const int64_t row = (int64_t)NKV * p->D;
    for (int b = 0; b < (len + p->BL - 1) / p->BL; b++, (*next)++) {
        const size_t ko = (size_t)slot[*next] * p->blk, vo = ((size_t)p->n_blocks + slot[*next]) * p->blk;
        for (int64_t i = (int64_t)b * p->BL * row; i < (int64_t)len * row && i < (int64_t)(b + 1) * p->BL * row; i++) {
            p->host[ko + i - (int64_t)b * p->BL * row] = kvt_f32_to_f16(k[i]);
            p->host[vo + i - (int64_t)b * p->BL * row] = kvt_f32_to_f16(v[i]);
        }
        p->ktab[s * p->max_blocks + b] = (const uint16_t *)p->dev + ko;
        p->vtab[s * p->max_blocks + b] = (const uint16_t *)p->dev + vo;
    }
}

// A shuffled permutation of [0, n) (malloc'ed).
static int *shuffled(gpu *g, int n) {
    int *slot = malloc((size_t)(n > 0 ? n : 1) * sizeof *slot);
    for (int b = 0; slot && b < n; b++) slot[b] = b;
    for (int b = n - 1; slot && b > 0; b--) {
        const int j = (int)((g->rng = g->rng * 6364136223846793005ull + 1442695040888963407ull) >> 33) % (b + 1), t = slot[b];
        slot[b] = slot[j], slot[j] = t;
    }
    return slot;
}

// Uploads the pool: pinned, from pinned host on the COPY stream with COMPUTE waiting on an event (no
// host synchronization); else on COMPUTE. Then uploads the tables.
static bool pool_upload(gpu *g, kv_pool *p, int n_seq, void **dk, void **dv) {
    kvt_cuda_event *ev = NULL;
    bool ok;
    if (p->pinned) {
        ok = cu_ok(g, g->api->event_create(g->ctx, &ev), "event_create") &&
             cu_ok(g, g->api->copy_h2d(g->ctx, p->dev, p->host, p->bytes, KVT_CUDA_STREAM_COPY), "copy_h2d (copy stream)") &&
             cu_ok(g, g->api->event_record(g->ctx, ev, KVT_CUDA_STREAM_COPY), "event_record") &&
             cu_ok(g, g->api->stream_wait(g->ctx, KVT_CUDA_STREAM_COMPUTE, ev), "stream_wait");
    } else {
        ok = cu_ok(g, g->api->copy_h2d(g->ctx, p->dev, p->host, p->bytes, KVT_CUDA_STREAM_COMPUTE), "copy_h2d");
    }
    if (ev) g->api->event_free(g->ctx, ev); // freed once recorded work completes (CUDA's event semantics)
    *dk = dput(g, p->ktab, (size_t)n_seq * p->max_blocks * sizeof(void *));
    *dv = dput(g, p->vtab, (size_t)n_seq * p->max_blocks * sizeof(void *));
    return ok && *dk && *dv;
}

static const int k_attn_cfg[2][2] = {{64, 16}, {128, 48}}; // head_dim, block_len (48: not a divisor of the chunk)

// The same decode call on the alternative context (KVT_CUDA_ATTN_DECODE=gqa: the query heads of a KV head in one
// block): every output bit for bit the per-head kernel's `want` (n floats); a difference is the case's error.
static void attn_decode_gqa(gpu *g, const kvt_cuda_attn_args *a, const float *want, int n, int D, int BL) {
    kvt_cuda_ctx *c0 = g->ctx;
    g->ctx = g->ctx_alt;
    kvt_cuda_attn_args b = *a;
    b.out = dpoison(g, (size_t)n * sizeof(float));
    float *got = malloc((size_t)n * sizeof *got);
    if (got && b.out && cu_ok(g, g->api->attn_paged(g->ctx, &b), "attn_paged (gqa)") && dget(g, got, b.out, (size_t)n * sizeof(float))) {
        int differ = 0;
        for (int i = 0; i < n; i++) differ += memcmp(&got[i], &want[i], sizeof(float)) != 0;
        printf("# cuda-result attn_decode_gqa d%d/b%d: %d of %d outputs differ from the per-head kernel's\n", D, BL, differ, n);
        if (differ) snprintf(g->err, sizeof g->err, "KVT_CUDA_ATTN_DECODE=gqa: %d of %d outputs not the per-head kernel's", differ, n);
    }
    free(got);
    g->ctx = c0;
}

// Decode: 7 sequences of 1, 2, 8, 9, 64, 512 and 100 positions, one query row each, in one call; the
// blocks shuffled in one pool. pinned: the pool travels from pinned host memory on the COPY stream.
static void case_attn_decode(gpu *g, bool pinned) {
    char name[160];
    snprintf(name, sizeof name, "cuda attn_paged decode (GQA 8/2, partial blocks, 7 seqs of 1..512 in one call)%s",
             pinned ? ", blocks from pinned host on the copy stream" : "");
    if (!case_begin(g, name)) return;
    enum { NSEQ = 7 };
    static const int lens[NSEQ] = {1, 2, 8, 9, 64, 512, 100};
    double worst = 0;
    for (int c = 0; c < 2 && !g->err[0]; c++) {
        const int D = k_attn_cfg[c][0], BL = k_attn_cfg[c][1];
        kv_pool p;
        float *q = frand_array(g, NSEQ * NH * D), *ref = malloc(NSEQ * NH * D * sizeof *ref), *got = malloc(NSEQ * NH * D * sizeof *got);
        int32_t seq_len[NSEQ];
        int *slot = NULL, next = 0;
        if (pool_init(g, &p, NSEQ, lens, D, BL, pinned) && q && ref && got && (slot = shuffled(g, p.n_blocks))) {
            for (int s = 0; s < NSEQ && !g->err[0]; s++) {
                const int len = seq_len[s] = lens[s];
                float *k = frand_array(g, (int64_t)len * NKV * D), *v = frand_array(g, (int64_t)len * NKV * D);
                kvt_err e = {0};
                if (!k || !v || attn_ref(D, BL, len, k, v, q + s * NH * D, len - 1, 1, ref + s * NH * D, &e))
                    snprintf(g->err, sizeof g->err, "CPU reference: %s", k && v ? e.msg : "out of memory");
                else pool_put(&p, s, len, k, v, slot, &next);
                free(k), free(v);
            }
            void *dk = NULL, *dv = NULL;
            if (!g->err[0] && pool_upload(g, &p, NSEQ, &dk, &dv)) {
                const kvt_cuda_attn_args a = {NSEQ, NH, NKV, D, BL, p.max_blocks, 512, 1.0f / sqrtf((float)D),
                                              dput(g, q, NSEQ * NH * D * sizeof(float)), dk, dv, NULL,
                                              dput(g, seq_len, sizeof seq_len), dpoison(g, NSEQ * NH * D * sizeof(float)), 0, 0};
                if (cu_ok(g, g->api->attn_paged(g->ctx, &a), "attn_paged") && dget(g, got, a.out, NSEQ * NH * D * sizeof(float))) {
                    for (int s = 0; s < NSEQ; s++) {
                        const double e = nmse(got + s * NH * D, ref + s * NH * D, NH * D);
                        printf("# cuda-result attn_decode%s d%d/b%d %d nmse %.3g\n", pinned ? "(pinned)" : "", D, BL, lens[s], e);
                        worst = fmax(worst, e);
                    }
                    if (g->ctx_alt && !pinned) attn_decode_gqa(g, &a, got, NSEQ * NH * D, D, BL);
                }
            }
        }
        pool_free(g, &p);
        free(q), free(ref), free(got), free(slot);
        if (!case_end(g)) break;
    }
    case_report(g, name, worst, NMSE_MATMUL);
}

// Prefill: the last T tokens (1, 2, 8, 9, 64, 512) of a 600-position sequence, one query row per token
// attending its causal prefix (seq_len = position + 1), all rows on block-table row 0 (row_seq).
// tiled: on the alternative context (KVT_CUDA_ATTN=tiled: its 64 and 512 rows by the tiled kernel, the others chunked).
static void case_attn_prefill(gpu *g, bool tiled) {
    const char *name = tiled ? "cuda attn_paged prefill, KVT_CUDA_ATTN=tiled (causal rows over one sequence of 600, x {1,2,8,9,64,512} tokens)"
                             : "cuda attn_paged prefill (causal rows over one sequence of 600, x {1,2,8,9,64,512} tokens)";
    kvt_cuda_ctx *ctx0 = g->ctx;
    if (tiled && !use_alt(g, name, &ctx0)) return;
    if (!case_begin(g, name)) {
        g->ctx = ctx0;
        return;
    }
    const int L = 600;
    double worst = 0;
    for (int c = 0; c < 2 && !g->err[0]; c++) {
        const int D = k_attn_cfg[c][0], BL = k_attn_cfg[c][1];
        kv_pool p;
        float *k = frand_array(g, (int64_t)L * NKV * D), *v = frand_array(g, (int64_t)L * NKV * D), *q = frand_array(g, 512 * NH * D);
        float *ref = malloc(512 * NH * D * sizeof *ref), *got = malloc(512 * NH * D * sizeof *got);
        int32_t *seq_len = malloc(512 * sizeof *seq_len), *row_seq = calloc(512, sizeof *row_seq);
        int *slot = NULL, next = 0;
        void *dk = NULL, *dv = NULL;
        if (pool_init(g, &p, 1, &L, D, BL, false) && k && v && q && ref && got && seq_len && row_seq && (slot = shuffled(g, p.n_blocks))) {
            pool_put(&p, 0, L, k, v, slot, &next);
            const float *dq = NULL;
            const int32_t *drow = NULL;
            if (pool_upload(g, &p, 1, &dk, &dv)) drow = dput(g, row_seq, 512 * sizeof(int32_t));
            for (int i = 0; i < N_TOKENS && drow && !g->err[0]; i++) {
                const int T = k_tokens[i];
                kvt_err e = {0};
                if (attn_ref(D, BL, L, k, v, q, L - T, T, ref, &e)) {
                    snprintf(g->err, sizeof g->err, "CPU reference: %s", e.msg);
                    break;
                }
                for (int t = 0; t < T; t++) seq_len[t] = L - T + t + 1;
                dq = dput(g, q, (size_t)T * NH * D * sizeof(float));
                const kvt_cuda_attn_args a = {T, NH, NKV, D, BL, p.max_blocks, L, 1.0f / sqrtf((float)D), dq, dk, dv, drow,
                                              dput(g, seq_len, (size_t)T * sizeof(int32_t)), dpoison(g, (size_t)T * NH * D * sizeof(float)),
                                              0, 0};
                if (!cu_ok(g, g->api->attn_paged(g->ctx, &a), "attn_paged") || !dget(g, got, a.out, (size_t)T * NH * D * sizeof(float))) break;
                const double err = nmse(got, ref, (int64_t)T * NH * D);
                printf("# cuda-result attn_prefill%s d%d/b%d %d nmse %.3g\n", tiled ? "_tiled" : "", D, BL, T, err);
                worst = fmax(worst, err);
            }
        } else if (!g->err[0]) {
            snprintf(g->err, sizeof g->err, "out of memory");
        }
        pool_free(g, &p);
        free(k), free(v), free(q), free(ref), free(got), free(seq_len), free(row_seq), free(slot);
        if (!case_end(g)) break;
    }
    case_report(g, name, worst, NMSE_MATMUL);
    g->ctx = ctx0;
}

void test_cuda(const test_env *env) {
    (void)env;
    gpu g;
    memset(&g, 0, sizeof g);
    g.rng = 0x9e3779b97f4a7c15ull;
    kvt_err err = {0};
    const kvt_status st = kvt_cuda_backend_open(&g.be, &err);
    if (st == KVT_ERR_NOT_FOUND) {
        snprintf(g.skip, sizeof g.skip, "no CUDA library built (%s)", err.msg);
    } else if (st == KVT_ERR_UNSUPPORTED) {
        snprintf(g.skip, sizeof g.skip, "no CUDA device: %s", err.msg);
    } else if (st == KVT_ERR_IO) {
        snprintf(g.skip, sizeof g.skip, "CUDA library not loadable: %s", err.msg);
    } else if (st != KVT_OK) {
        test_result(false, "cuda: backend library", "%s", err.msg); // a stale or foreign library is a failure
        snprintf(g.skip, sizeof g.skip, "CUDA backend unusable: %s", err.msg);
    } else {
        g.api = g.be.api;
        char msg[256] = "";
        if (ctx_with(g.api, "f32", "chunked", "head", "", "", &g.ctx, msg, (int)sizeof msg) != KVT_CUDA_OK) {
            test_result(false, "cuda: context on device 0", "%s", msg);
            snprintf(g.skip, sizeof g.skip, "no CUDA context: %s", msg);
        } else {
            kvt_cuda_device_info info;
            if (g.api->device_info(0, &info, msg, (int)sizeof msg) == KVT_CUDA_OK)
                printf("# cuda device 0: %s, sm_%d%d, %d SMs, %.1f GiB\n", info.name, info.cc_major, info.cc_minor, info.n_sm,
                       (double)info.vram_bytes / (1 << 30));
            if (ctx_with(g.api, "q8_1", "tiled", "gqa", "", "", &g.ctx_alt, g.skip_alt, (int)sizeof g.skip_alt) != KVT_CUDA_OK)
                g.ctx_alt = NULL;
        }
    }
    for (int path = MM_VEC; path <= MM_GEMM; path++)
        for (int i = 0; i < N_WTYPES; i++) case_matmul(&g, k_wtypes[i], path);
    case_matvec_multi(&g, MM_VEC);
    case_matvec_multi(&g, MM_VEC_Q8_1);
    case_dequant_rows(&g, KVT_TYPE_F32);
    for (int i = 0; i < N_WTYPES; i++) case_dequant_rows(&g, k_wtypes[i]);
    case_rmsnorm(&g);
    case_rope(&g);
    case_glu_add(&g);
    case_argmax(&g);
    case_attn_decode(&g, false);
    case_attn_decode(&g, true);
    case_attn_prefill(&g, false);
    case_attn_prefill(&g, true);
    case_matvec_bandwidth(&g);
    case_copy_batch(&g);
    if (g.ctx_alt) g.api->ctx_free(g.ctx_alt);
    if (g.ctx) g.api->ctx_free(g.ctx);
    kvt_cuda_backend_close(&g.be);
}
