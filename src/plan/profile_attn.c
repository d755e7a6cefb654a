// profile_attn.c - achieved rates of kvtier's own non-GEMM kernels on this CPU: attention
// (src/attn/attention.c) for the planner's attention term (helm.txt Eqs. 4.11 and 4.13), and
// the element-wise SwiGLU of the FFN for its prefill term. The attention kernel (f16 dot
// products, online softmax with expf, f16 row accumulation) reaches a small fraction of the
// GEMM rate, and SwiGLU's expf per element is a tenth of a small model's prefill, so timing both
// is the only way the model's time comes out right.
#include <stdlib.h>
#include <string.h>

#include "../attn/attention.h"
#include "../base/timer.h"
#include "../exec/ew_par.h"
#include "profile.h"

// A head layout typical of the small GQA models: 16 query heads over 4 KV heads of 64.
enum { A_HEADS = 16, A_KV_HEADS = 4, A_DIM = 64 };

// Best-of timing of kvt_attention for n query tokens at positions [pos0, pos0 + n) over one layer
// whose KV holds pos0 + n positions; FLOP/s counted as 4 x n_head x head_dim per attended position.
static double attn_rate(kvt_kv *kv, kvt_threadpool *pool, int nt, int64_t pos0, int64_t n, int reps, float *q, float *out,
                        void **scratch, void *ws) {
    kvt_attn_params ap = {A_HEADS, 0.125f, 0, 0};
    double attended = 0;
    for (int64_t t = 0; t < n; t++) attended += (double)(pos0 + t + 1);
    const double flops = 4.0 * A_HEADS * A_DIM * attended;
    double best = 0;
    const int64_t t_begin = kvt_time_ns();
    for (int r = 0; r < 1000 && (r < reps + 1 || (double)(kvt_time_ns() - t_begin) / 1e9 < 0.2); r++) {
        const int64_t t0 = kvt_time_ns();
        if (kvt_attention(kv, 0, 0, &ap, q, pos0, n, out, pool, scratch, ws, NULL)) return 0;
        const double sec = (double)(kvt_time_ns() - t0) / 1e9;
        if (r > 0 && flops / sec / 1e9 > best) best = flops / sec / 1e9; // run 0 warms up
    }
    (void)nt;
    return best;
}

kvt_status kvt_profile_attn(int n_threads, int reps, kvt_profile *p, kvt_err *err) {
    // decode: 1 token after 2047; prefill: a 128-token prompt, and a 512-token chunk at 1536 (deep in a long prompt)
    const int64_t ctx = KVT_PROFILE_ATTN_DEEP_POS + KVT_PROFILE_ATTN_DEEP_N, pre = KVT_PROFILE_ATTN_DEEP_N;
    kvt_kv_params kp = {KVT_TYPE_F16, 1, A_KV_HEADS, A_DIM, A_DIM, ctx, 512, 0};
    kvt_kv *kv = NULL;
    kvt_threadpool *pool = NULL;
    float *k = malloc(sizeof(float) * (size_t)(ctx * A_KV_HEADS * A_DIM)); // [ctx, kv heads * dim]
    float *q = malloc(sizeof(float) * (size_t)(pre * A_HEADS * A_DIM));    // [pre, heads * dim]
    float *out = malloc(sizeof(float) * (size_t)(pre * A_HEADS * A_DIM));
    void **scratch = calloc((size_t)n_threads, sizeof *scratch);
    void *ws = NULL;
    kvt_status st = KVT_OK;
    if (!k || !q || !out || !scratch) {
        st = kvt_errorf(err, KVT_ERR_NOMEM, "profile: out of memory for the attention test");
        goto done;
    }
    if ((st = kvt_kv_contig_init(&kp, &kv, err)) || (st = kvt_threadpool_init(n_threads, &pool, err))) goto done;
    uint32_t s = 1;
    for (int64_t i = 0; i < ctx * A_KV_HEADS * A_DIM; i++) s = s * 1664525u + 1013904223u, k[i] = (float)(s >> 9) / 8388608.0f - 1.0f;
    for (int64_t i = 0; i < pre * A_HEADS * A_DIM; i++) q[i] = k[(i * 7) % (ctx * A_KV_HEADS * A_DIM)];
    if ((st = kv->ops->append(kv, 0, 0, 0, ctx, k, k, err))) goto done;
    const int64_t sb = kvt_attn_scratch_bytes(kv, A_HEADS, 0);
    for (int i = 0; i < n_threads; i++) {
        if (posix_memalign(&scratch[i], 64, (size_t)sb)) {
            st = kvt_errorf(err, KVT_ERR_NOMEM, "profile: out of memory for attention scratch");
            goto done;
        }
    }
    if (posix_memalign(&ws, 64, (size_t)kvt_attn_workspace_bytes(kv, A_HEADS, n_threads) + 64)) {
        st = kvt_errorf(err, KVT_ERR_NOMEM, "profile: out of memory for the attention workspace");
        goto done;
    }
    p->cpu_attn_gflops = attn_rate(kv, pool, n_threads, ctx - 1, 1, reps, q, out, scratch, ws);
    p->cpu_attn_prefill_gflops = attn_rate(kv, pool, n_threads, 0, KVT_PROFILE_ATTN_PROMPT, reps, q, out, scratch, ws);
    p->cpu_attn_prefill_deep_gflops =
        attn_rate(kv, pool, n_threads, KVT_PROFILE_ATTN_DEEP_POS, KVT_PROFILE_ATTN_DEEP_N, reps, q, out, scratch, ws);
done:
    if (scratch)
        for (int i = 0; i < n_threads; i++) free(scratch[i]);
    free(scratch);
    free(ws);
    free(k);
    free(q);
    free(out);
    kvt_threadpool_free(pool);
    kvt_kv_free(kv);
    return st;
}

// --- SwiGLU ---------------------------------------------------------------------------

kvt_status kvt_profile_swiglu(int n_threads, int reps, kvt_profile *p, kvt_err *err) {
    enum { N = 128 * 4096, MAX_RUNS = 512 };
    float *src = malloc(sizeof(float) * N), *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N);
    double *sec = malloc(sizeof(double) * MAX_RUNS);
    kvt_threadpool *pool = NULL;
    kvt_status st = KVT_OK;
    if (!src || !g || !u || !sec) {
        st = kvt_errorf(err, KVT_ERR_NOMEM, "profile: out of memory for the SwiGLU test");
        goto done;
    }
    if ((st = kvt_threadpool_init(n_threads, &pool, err))) goto done;
    uint32_t s = 7;
    for (int64_t i = 0; i < N; i++) { // activations of the size a prefill's gate and up rows have
        s = s * 1664525u + 1013904223u, src[i] = ((float)(s >> 9) / 8388608.0f - 1.0f) * 4.0f;
        s = s * 1664525u + 1013904223u, u[i] = (float)(s >> 9) / 8388608.0f - 1.0f;
    }
    int runs = 0;
    const int64_t t_begin = kvt_time_ns();
    for (int r = 0; r < MAX_RUNS && (r < reps + 1 || (double)(kvt_time_ns() - t_begin) / 1e9 < 0.1); r++) {
        memcpy(g, src, sizeof(float) * N); // the same input each run, outside the timed part
        const int64_t t0 = kvt_time_ns();
        kvt_swiglu_par(pool, g, u, N); // the forward pass's own split
        if (r > 0) sec[runs++] = (double)(kvt_time_ns() - t0) / 1e9; // run 0 warms up
    }
    kvt_sort_f64(sec, runs);
    p->cpu_swiglu_gelems = runs > 0 && sec[runs / 2] > 0 ? (double)N / sec[runs / 2] / 1e9 : 0;
done:
    kvt_threadpool_free(pool);
    free(src);
    free(g);
    free(u);
    free(sec);
    return st;
}
