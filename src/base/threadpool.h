// threadpool.h - a small persistent thread pool for data-parallel loops.
//
// kvt_threadpool_run(pool, fn, ctx, n_tasks) calls fn(ctx, task, thread) for
// every task in [0, n_tasks) across the pool's threads (the caller is thread
// 0 and works too) and returns when all are done. Workers spin briefly
// between jobs (decode issues hundreds of small jobs per token), then sleep.
#ifndef KVT_THREADPOOL_H
#define KVT_THREADPOOL_H

#include <stdint.h>

#include "status.h"

typedef struct kvt_threadpool kvt_threadpool;
typedef void (*kvt_task_fn)(void *ctx, int64_t task, int thread);

// n_threads >= 1 (1 = run everything on the caller).
kvt_status kvt_threadpool_init(int n_threads, kvt_threadpool **out, kvt_err *err);
void kvt_threadpool_free(kvt_threadpool *pool);
int kvt_threadpool_n_threads(const kvt_threadpool *pool);
void kvt_threadpool_run(kvt_threadpool *pool, kvt_task_fn fn, void *ctx, int64_t n_tasks);

// Number of physical cores (falls back to online CPUs).
int kvt_physical_cores(void);

#endif
