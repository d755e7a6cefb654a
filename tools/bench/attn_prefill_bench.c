// attn_prefill_bench.c - prefill attention at depth, alone: kvt_attention of n query tokens at positions
// [d, d + n) of one layer whose contiguous F16 (or F32) KV holds d + n positions, the forward pass's call.
//   make attn-prefill-bench
//   build/attn_prefill_bench [-H heads=32] [-K kv_heads=4] [-D head_dim=64] [-d depth=2048] [-n tokens=512]
//                            [-t threads=2] [-r reps=5] [-f32]
// Defaults: TinyLlama-1.1B's layer (SmolLM2-135M: -H 9 -K 3; Gemma 3 270M: -H 4 -K 1 -D 256). Prints the median
// and best milliseconds of one layer's call over reps (after one warm-up) and the FLOP/s counted as 4 x n_head x
// head_dim per attended position. Wall time: run it under the exclusive /work/quiet and /work/busy locks.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/attn/attention.h"
#include "../../src/base/timer.h"

static int cmp_dbl(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int H = 32, K = 4, D = 64, nt = 2, reps = 5;
    int64_t d = 2048, n = 512;
    kvt_type ty = KVT_TYPE_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(a, "-H")) H = atoi(v), i++;
        else if (!strcmp(a, "-K")) K = atoi(v), i++;
        else if (!strcmp(a, "-D")) D = atoi(v), i++;
        else if (!strcmp(a, "-d")) d = atoll(v), i++;
        else if (!strcmp(a, "-n")) n = atoll(v), i++;
        else if (!strcmp(a, "-t")) nt = atoi(v), i++;
        else if (!strcmp(a, "-r")) reps = atoi(v), i++;
        else if (!strcmp(a, "-f32")) ty = KVT_TYPE_F32;
        else {
            fprintf(stderr, "usage: %s [-H 32] [-K 4] [-D 64] [-d 2048] [-n 512] [-t 2] [-r 5] [-f32]\n", argv[0]);
            return 2;
        }
    }
    if (H <= 0 || K <= 0 || H % K || D <= 0 || d < 0 || n <= 0 || nt <= 0 || reps <= 0) return 2;
    const int64_t ctx = d + n;
    kvt_kv_params kp = {ty, 1, K, D, D, ctx, 512, 0};
    kvt_kv *kv = NULL;
    kvt_threadpool *pool = NULL;
    kvt_err err = {0};
    float *k = malloc(sizeof(float) * (size_t)(ctx * K * D)), *v = malloc(sizeof(float) * (size_t)(ctx * K * D));
    float *q = malloc(sizeof(float) * (size_t)(n * H * D)), *out = malloc(sizeof(float) * (size_t)(n * H * D));
    double *ms = malloc(sizeof(double) * (size_t)reps);
    void **sc = calloc((size_t)nt, sizeof *sc), *ws = NULL;
    if (!k || !v || !q || !out || !ms || !sc) return 1;
    if (kvt_kv_contig_init(&kp, &kv, &err) || kvt_threadpool_init(nt, &pool, &err)) {
        fprintf(stderr, "init: %s\n", err.msg);
        return 1;
    }
    uint32_t s = 1;
    const float qs = 1.0f / sqrtf((float)D);
    for (int64_t i = 0; i < ctx * K * D; i++) s = s * 1664525u + 1013904223u, k[i] = (float)(s >> 9) / 8388608.0f - 1.0f;
    for (int64_t i = 0; i < ctx * K * D; i++) s = s * 1664525u + 1013904223u, v[i] = (float)(s >> 9) / 8388608.0f - 1.0f;
    for (int64_t i = 0; i < n * H * D; i++) s = s * 1664525u + 1013904223u, q[i] = ((float)(s >> 9) / 8388608.0f - 1.0f) * 4.0f;
    if (kv->ops->append(kv, 0, 0, 0, ctx, k, v, &err)) {
        fprintf(stderr, "append: %s\n", err.msg);
        return 1;
    }
    for (int i = 0; i < nt; i++)
        if (posix_memalign(&sc[i], 64, (size_t)kvt_attn_scratch_bytes(kv, H, 0))) return 1;
    if (posix_memalign(&ws, 64, (size_t)kvt_attn_workspace_bytes(kv, H, nt) + 64)) return 1;
    const kvt_attn_params ap = {H, qs, 0, 0};
    double attended = 0, sum = 0;
    for (int64_t t = 0; t < n; t++) attended += (double)(d + t + 1);
    for (int r = 0; r <= reps; r++) {
        const int64_t t0 = kvt_time_ns();
        if (kvt_attention(kv, 0, 0, &ap, q, d, n, out, pool, sc, ws, &err)) {
            fprintf(stderr, "attention: %s\n", err.msg);
            return 1;
        }
        if (r > 0) ms[r - 1] = (double)(kvt_time_ns() - t0) / 1e6; // run 0 warms up
    }
    uint64_t hash = 1469598103934665603ull; // FNV-1a of the output's bytes: equal bits, equal hash
    for (int64_t i = 0; i < n * H * D; i++) {
        uint32_t b;
        memcpy(&b, &out[i], 4);
        for (int k = 0; k < 4; k++) hash = (hash ^ ((b >> (8 * k)) & 255)) * 1099511628211ull;
        sum += out[i];
    }
    qsort(ms, (size_t)reps, sizeof *ms, cmp_dbl);
    const double med = ms[reps / 2];
    printf("attn H=%d K=%d D=%d d=%lld n=%lld t=%d %s: median %.2f ms best %.2f ms (%.1f GFLOP/s) sum %.9g bits %016llx\n", H, K,
           D, (long long)d, (long long)n, nt, ty == KVT_TYPE_F16 ? "f16" : "f32", med, ms[0],
           4.0 * H * D * attended / med / 1e6, sum, (unsigned long long)hash);
    for (int i = 0; i < nt; i++) free(sc[i]);
    free(sc);
    free(ws);
    free(k);
    free(v);
    free(q);
    free(out);
    free(ms);
    kvt_threadpool_free(pool);
    kvt_kv_free(kv);
    return 0;
}
