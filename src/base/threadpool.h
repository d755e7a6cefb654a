// threadpool.h - a small persistent thread pool for data-parallel loops.
//
// kvt_threadpool_run(pool, fn, ctx, n_tasks) calls fn(ctx, task, thread) for
// every task in [0, n_tasks) across the pool's threads (the caller is thread
// 0 and works too) and returns when all are done. Workers spin briefly
// between jobs (decode issues hundreds of small jobs per token), then sleep.
//
// KVT_POOL_STATS=1 in the environment (measurement only) makes the pool count where the time goes
// (kvt_threadpool_get_stats; `kvtier bench` prints it); unset, the count costs one branch per job.
#ifndef KVT_THREADPOOL_H
#define KVT_THREADPOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "status.h"

typedef struct kvt_threadpool kvt_threadpool;
typedef void (*kvt_task_fn)(void *ctx, int64_t task, int thread);

// n_threads >= 1 (1 = run everything on the caller).
// kvt_threadpool_run is called by one thread at a time (the pool's owner); every fn(ctx, task, ...)
// call of a job happens exactly once and before kvt_threadpool_run returns.
kvt_status kvt_threadpool_init(int n_threads, kvt_threadpool **out, kvt_err *err);
void kvt_threadpool_free(kvt_threadpool *pool);
int kvt_threadpool_n_threads(const kvt_threadpool *pool);

// What KVT_POOL_STATS=1 counted since kvt_threadpool_init (all zero without it). Times in ms.
typedef struct {
    int64_t jobs;         // jobs dispatched to the threads
    int64_t tasks;        // their tasks
    int64_t caller_tasks; // of which the caller ran
    int64_t inline_jobs;  // jobs run on the caller alone (one task, or one thread)
    double inline_ms;     // the caller's time in those (also counted in between_ms)
    double caller_ms;     // the caller's time in its own tasks of dispatched jobs
    double wait_ms;       // the caller waiting for the other threads' tasks
    double between_ms;    // the caller outside the pool, between two dispatched jobs (the serial work)
    double worker_ms;     // the workers' time in tasks, all together
} kvt_threadpool_stats;
void kvt_threadpool_get_stats(const kvt_threadpool *pool, kvt_threadpool_stats *out);
void kvt_threadpool_run(kvt_threadpool *pool, kvt_task_fn fn, void *ctx, int64_t n_tasks);

// Test hook (the pool's stress test widens its race windows with it): called by workers right after
// they see a new job (WORKER_WOKEN) and after they read its descriptor (WORKER_READ), and by the
// caller of kvt_threadpool_run between retiring the previous job and storing the new descriptor
// (CALLER_RETIRED, CALLER_DESCRIPTOR). NULL (the default) disables it; set it only while no job runs.
typedef enum {
    KVT_POOL_HOOK_WORKER_WOKEN,
    KVT_POOL_HOOK_WORKER_READ,
    KVT_POOL_HOOK_CALLER_RETIRED,
    KVT_POOL_HOOK_CALLER_DESCRIPTOR,
} kvt_pool_hook_point;
typedef void (*kvt_threadpool_hook)(void *arg, kvt_pool_hook_point point);
void kvt_threadpool_set_hook(kvt_threadpool *pool, kvt_threadpool_hook hook, void *arg);

// Work for a thread that would otherwise spin (the tiered KV store's queued copies, kv_paged.h
// kvt_kv_paged_help): the caller of kvt_threadpool_run calls fn(arg) while it waits for tasks still running
// on other threads, and a worker while it spins between jobs, every few spin rounds. fn returns whether it did
// some work (the waiter then calls it again before spinning on); it must be short (one block copy), must not
// block (try-lock) and must not change any result. NULL (the default) disables it. Workers spin between jobs,
// so they may be in the old function while it is changed, or (having read it just before) call it once with the
// new arg: fn must accept NULL and must outlive any pool it was set on; clear it (or free the pool) before arg goes
// away.
typedef bool (*kvt_threadpool_idle_fn)(void *arg);
void kvt_threadpool_set_idle(kvt_threadpool *pool, kvt_threadpool_idle_fn fn, void *arg);

// A worker's spin budget between jobs: the pause rounds it spins (taking idle work, above) before it yields its core
// (sched_yield a while, then sleeps on a condition variable). Default KVT_THREADPOOL_SPIN_DEFAULT (~0.7 ms on a Xeon:
// decode issues hundreds of small jobs per token). A smaller budget gives the core sooner to other threads of the
// process (the asyncspade selection worker: forward.c sets it when one runs). Timing only: results do not depend on it.
// spin_iters < 0 restores the default; returns the budget now in force. Workers read it at the start of each wait.
#define KVT_THREADPOOL_SPIN_DEFAULT 20000
int kvt_threadpool_set_spin(kvt_threadpool *pool, int spin_iters);
int kvt_threadpool_get_spin(const kvt_threadpool *pool);

// Number of physical cores (falls back to online CPUs).
int kvt_physical_cores(void);

#endif
