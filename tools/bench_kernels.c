// bench_kernels.c - throughput of kvt_matmul_rows per weight type.
//
// usage: bench_kernels [-t threads] [-r rows] [-n cols] [-p n_tok] [-i passes] [-c max_copies] [-T type]... [-s isa]
// Decode (n_tok = 1): GB/s of weight bytes streamed, rotating over enough copies
// of the matrix to defeat the last-level cache. Prefill (n_tok = -p, default
// 128): GFLOP/s (2 * rows * cols * n_tok per call). Activation quantization is
// excluded. Threads split the rows the way the engine's pool does.
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/kernels/matmul.h"
#include "../src/kernels/quant.h"

// Single-threaded runs use the thread's CPU time, so that other processes on
// the machine do not count; multi-threaded runs use wall time.
static int g_cpu_clock;
static double now_s(void) {
    struct timespec ts;
    clock_gettime(g_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    int isa;
    kvt_type t;
    int64_t n, rows, n_tok;
    const char *w;
    const void *x;
    float *y;
    int ith, nth;
} job;

static void *run_job(void *p) {
    const job *j = p;
    const int64_t per = (j->rows + j->nth - 1) / j->nth;
    const int64_t r0 = per * j->ith, r1 = r0 + per < j->rows ? r0 + per : j->rows;
    if (r0 < r1) kvt_matmul_rows_isa((kvt_isa)j->isa, j->t, j->n, j->w, r0, r1, j->x, j->n_tok, j->y, j->rows);
    return NULL;
}

static void matmul_mt(job base, int nth) {
    pthread_t th[64];
    job jobs[64];
    for (int i = 0; i < nth; i++) {
        jobs[i] = base;
        jobs[i].ith = i, jobs[i].nth = nth;
        if (i > 0 && pthread_create(&th[i], NULL, run_job, &jobs[i]) != 0) jobs[i].nth = -1;
    }
    run_job(&jobs[0]);
    for (int i = 1; i < nth; i++)
        if (jobs[i].nth > 0) pthread_join(th[i], NULL);
        else run_job(&jobs[i]);
}

int main(int argc, char **argv) {
    int nth = 1, iters = 0, ntypes = 0; // iters: passes (best is kept)
    int64_t rows = 5632, n = 2048, pp = 128;
    kvt_type types[16];
    int isa = -1, max_copies = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) nth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) rows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) pp = atoll(argv[++i]);
        else if (!strcmp(argv[i], "-i") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) max_copies = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
            const char *s = argv[++i];
            isa = !strcmp(s, "scalar") ? 0 : !strcmp(s, "avx2") ? 1 : 2;
        } else if (!strcmp(argv[i], "-T") && i + 1 < argc && ntypes < 16) {
            if (!kvt_type_from_name(argv[++i], &types[ntypes])) {
                fprintf(stderr, "unknown type %s\n", argv[i]);
                return 1;
            }
            ntypes++;
        } else {
            fprintf(stderr, "usage: %s [-t threads] [-r rows] [-n cols] [-p n_tok] [-i passes] [-c max_copies] [-T type]... [-s scalar|avx2|avx512]\n", argv[0]);
            return 1;
        }
    }
    if (nth < 1 || nth > 64) nth = 1;
    g_cpu_clock = nth == 1;
    if (!ntypes) {
        const kvt_type def[] = {KVT_TYPE_F16, KVT_TYPE_Q8_0, KVT_TYPE_Q4_0, KVT_TYPE_Q4_1,
                                KVT_TYPE_Q4_K, KVT_TYPE_Q5_K, KVT_TYPE_Q6_K, KVT_TYPE_BF16, KVT_TYPE_F32};
        ntypes = (int)(sizeof def / sizeof def[0]);
        memcpy(types, def, sizeof def);
    }
    printf("isa %s, %d thread(s), W [%lld x %lld]\n", kvt_isa_name(kvt_kernels_isa()), nth, (long long)rows, (long long)n);
    printf("%-6s %10s %10s %12s\n", "type", "MB", "tg GB/s", "pp GFLOP/s");
    for (int ti = 0; ti < ntypes; ti++) {
        const kvt_type t = types[ti];
        // a repacked type (q4_K_x8): quantized as its source type, then repacked as the model loader does
        const kvt_type qt = kvt_type_repacked_from(t);
        const kvt_repack_ops *rp = qt != t ? kvt_type_repack_into(t) : NULL;
        const kvt_type_ops *ops = isa < 0 ? kvt_type_ops_get(qt) : kvt_type_ops_isa(qt, (kvt_isa)isa);
        if (!ops || !ops->vec_dot) {
            printf("%-6s unsupported\n", kvt_type_name(t));
            continue;
        }
        const kvt_type_ops *vops = kvt_type_ops_get(ops->vec_dot_type);
        const int64_t wrs = kvt_row_size(t, n), xrs = kvt_row_size(ops->vec_dot_type, n);
        const size_t wbytes = (size_t)(wrs * rows);
        int copies = (int)(256.0 * 1024 * 1024 / (double)wbytes) + 1 < 64 ? (int)(256.0 * 1024 * 1024 / (double)wbytes) + 1 : 64;
        if (max_copies > 0 && copies > max_copies) copies = max_copies;
        char *w = malloc(wbytes * (size_t)copies);
        float *f = malloc((size_t)(n > pp ? n : pp) * (size_t)n * sizeof *f);
        char *x = malloc((size_t)(xrs * pp));
        float *y = malloc((size_t)(rows * pp) * sizeof *y);
        if (!w || !f || !x || !y) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        uint64_t s = 88172645463325252ull;
        for (int64_t i = 0; i < n * (n > pp ? n : pp); i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            f[i] = ((float)(s >> 40) / 16777216.f - 0.5f) * 0.1f;
        }
        // quantize n rows once, tile them over the matrix and its copies
        const int64_t uniq = rows < n ? rows : n;
        for (int64_t r = 0; r < uniq; r++) ops->from_float(f + r * n, w + r * wrs, n);
        for (int64_t r = uniq; r < rows; r++) memcpy(w + r * wrs, w + (r % uniq) * wrs, (size_t)wrs);
        if (rp) {
            char *tmp = malloc(wbytes);
            if (!tmp || rows % rp->row_align) {
                fprintf(stderr, "%s: out of memory or rows not a multiple of %d\n", kvt_type_name(t), rp->row_align);
                return 1;
            }
            rp->pack(w, tmp, rows, n);
            memcpy(w, tmp, wbytes);
            free(tmp);
        }
        for (int c = 1; c < copies; c++) memcpy(w + wbytes * (size_t)c, w, wbytes);
        for (int64_t k = 0; k < pp; k++) vops->from_float(f + k * n, x + k * xrs, n);

        job base = {isa < 0 ? (int)kvt_kernels_isa() : isa, t, n, rows, 1, w, x, y, 0, 1};
        // best of several passes (robust against other load on the machine)
        const int passes = iters ? iters : 7;
        double tg = 1e30, ppt = 1e30;
        matmul_mt(base, nth);
        for (int ps = 0; ps < passes; ps++) {
            const double t0 = now_s();
            for (int c = 0; c < copies; c++) {
                base.w = w + wbytes * (size_t)c;
                matmul_mt(base, nth);
            }
            const double dt = (now_s() - t0) / copies;
            if (dt < tg) tg = dt;
        }
        base.w = w, base.n_tok = pp;
        matmul_mt(base, nth);
        for (int ps = 0; ps < passes; ps++) {
            const double t0 = now_s();
            matmul_mt(base, nth);
            const double dt = now_s() - t0;
            if (dt < ppt) ppt = dt;
        }
        printf("%-6s %10.1f %10.2f %12.1f\n", kvt_type_name(t), (double)wbytes / 1e6, (double)wbytes / tg / 1e9,
               2.0 * (double)rows * (double)n * (double)pp / ppt / 1e9);
        free(w), free(f), free(x), free(y);
    }
    return 0;
}
