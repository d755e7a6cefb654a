// ew_par.c - element-wise kernels spread over the thread pool (see ew_par.h).
#include "ew_par.h"

#include "../kernels/vec.h"

enum { SWIGLU_MIN_TASK = 1024 }; // elements: below this the hand-off costs more than the expf it saves

typedef struct {
    float *g;       // [n]
    const float *u; // [n]
    int64_t n, per; // elements, elements per task
} swiglu_job;

static void swiglu_task(void *vctx, int64_t task, int thread) {
    (void)thread;
    const swiglu_job *j = vctx;
    const int64_t a = task * j->per, b = a + j->per < j->n ? a + j->per : j->n;
    kvt_swiglu_f32(j->g + a, j->u + a, b - a);
}

void kvt_swiglu_par(kvt_threadpool *pool, float *g, const float *u, int64_t n) {
    const int nt = kvt_threadpool_n_threads(pool);
    if (nt <= 1 || n < 2 * SWIGLU_MIN_TASK) {
        kvt_swiglu_f32(g, u, n);
        return;
    }
    const int64_t tasks = n / SWIGLU_MIN_TASK < nt ? n / SWIGLU_MIN_TASK : nt;
    swiglu_job j = {g, u, n, (n + tasks - 1) / tasks};
    kvt_threadpool_run(pool, swiglu_task, &j, (n + j.per - 1) / j.per);
}
