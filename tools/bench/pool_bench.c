// pool_bench.c - micro-benchmark of the thread pool's per-job overhead: many back-to-back jobs of
// tiny tasks (the shape of decode, which issues hundreds of small matmul jobs per token).
//   cc -std=c11 -O2 -D_GNU_SOURCE -pthread tools/bench/pool_bench.c build/libkvtier.a -o build/pool_bench
//   build/pool_bench [threads=2] [jobs=200000] [tasks_per_job=8] [reps=5]
// Prints the best and median of reps: ns per job.
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../src/base/threadpool.h"
#include "../../src/base/timer.h"

static void tiny(void *ctx, int64_t task, int thread) {
    (void)thread;
    atomic_fetch_add_explicit((_Atomic int64_t *)ctx + 8 * (task & 1), 1, memory_order_relaxed);
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2;
    const int jobs = argc > 2 ? atoi(argv[2]) : 200000;
    const int tasks = argc > 3 ? atoi(argv[3]) : 8;
    int reps = argc > 4 ? atoi(argv[4]) : 5;
    if (reps < 1 || reps > 64) reps = 5;
    kvt_threadpool *pool;
    kvt_err err;
    if (kvt_threadpool_init(threads, &pool, &err)) {
        fprintf(stderr, "pool_bench: %s\n", err.msg);
        return 1;
    }
    static _Atomic int64_t counters[16];
    double ns[64];
    for (int r = 0; r < reps; r++) {
        const double t0 = kvt_time_ms();
        for (int j = 0; j < jobs; j++) kvt_threadpool_run(pool, tiny, counters, tasks);
        ns[r] = (kvt_time_ms() - t0) * 1e6 / jobs;
    }
    kvt_threadpool_free(pool);
    const int64_t want = (int64_t)reps * jobs * tasks, got = atomic_load(&counters[0]) + atomic_load(&counters[8]);
    qsort(ns, (size_t)reps, sizeof ns[0], cmp);
    printf("pool_bench: %d threads, %d jobs x %d tasks: best %.0f ns/job, median %.0f ns/job%s\n", threads, jobs, tasks,
           ns[0], ns[reps / 2], got == want ? "" : " (TASK COUNT WRONG)");
    return got == want ? 0 : 1;
}
