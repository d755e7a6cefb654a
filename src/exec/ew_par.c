// ew_par.c - element-wise kernels spread over the thread pool (see ew_par.h).
#include "ew_par.h"

#include "../kernels/vec.h"

typedef struct {
    void (*fn)(void *ctx, int64_t a, int64_t b);
    void *ctx;
    int64_t n, per; // items, items per task
} ranges_job;

static void ranges_task(void *vctx, int64_t task, int thread) {
    (void)thread;
    const ranges_job *j = vctx;
    const int64_t a = task * j->per, b = a + j->per < j->n ? a + j->per : j->n;
    j->fn(j->ctx, a, b);
}

void kvt_par_ranges(kvt_threadpool *pool, int64_t n, int64_t min_per_task, void (*fn)(void *ctx, int64_t a, int64_t b),
                    void *ctx) {
    const int nt = kvt_threadpool_n_threads(pool);
    if (nt <= 1 || n < 2 * min_per_task) {
        fn(ctx, 0, n);
        return;
    }
    const int64_t tasks = n / min_per_task < nt ? n / min_per_task : nt;
    ranges_job j = {fn, ctx, n, (n + tasks - 1) / tasks};
    kvt_threadpool_run(pool, ranges_task, &j, (n + j.per - 1) / j.per);
}

typedef struct {
    float *g;       // [n]
    const float *u; // [n]
    bool gelu;
} glu_job;

static void glu_range(void *vctx, int64_t a, int64_t b) {
    const glu_job *j = vctx;
    if (j->gelu) kvt_geglu_f32(j->g + a, j->u + a, b - a);
    else kvt_swiglu_f32(j->g + a, j->u + a, b - a);
}

enum { SWIGLU_MIN_TASK = 1024 }; // elements: below this the hand-off costs more than the expf it saves

void kvt_glu_par(kvt_threadpool *pool, bool gelu, float *g, const float *u, int64_t n) {
    glu_job j = {g, u, gelu};
    kvt_par_ranges(pool, n, SWIGLU_MIN_TASK, glu_range, &j);
}

void kvt_swiglu_par(kvt_threadpool *pool, float *g, const float *u, int64_t n) { kvt_glu_par(pool, false, g, u, n); }
