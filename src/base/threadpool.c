#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ITERS 4096   // pause-loop iterations before yielding the core
#define YIELD_ITERS 2000  // sched_yield rounds before sleeping on the condition variable

struct kvt_threadpool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    // current job
    kvt_task_fn fn;
    void *ctx;
    int64_t n_tasks;
    _Atomic int64_t next_task;
    _Atomic int pending;        // workers still busy with the current job
    _Atomic uint64_t generation; // bumped to publish a job
    _Atomic int stop;
};

typedef struct {
    kvt_threadpool *pool;
    int id;
} worker_arg;

static void drain(kvt_threadpool *p, int thread) {
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&p->next_task, 1, memory_order_relaxed);
        if (t >= p->n_tasks) break;
        p->fn(p->ctx, t, thread);
    }
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    kvt_threadpool *p = wa->pool;
    int id = wa->id;
    free(wa);
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&p->stop, memory_order_relaxed)) return NULL;
            if (++spins < SPIN_ITERS) {
                CPU_RELAX();
                continue;
            }
            // another process may want this core (oversubscription): yield before sleeping
            if (spins < SPIN_ITERS + YIELD_ITERS) {
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        seen = gen;
        if (atomic_load(&p->stop)) return NULL;
        drain(p, id);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
}

kvt_status kvt_threadpool_init(int n_threads, kvt_threadpool **out, kvt_err *err) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 4096) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "thread count %d out of range (1..4096)", n_threads);
    kvt_threadpool *p = calloc(1, sizeof *p);
    if (!p) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for thread pool");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!p->threads) {
        free(p);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for thread pool");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            p->n_threads = i;
            kvt_threadpool_free(p);
            return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for thread pool");
        }
        wa->pool = p;
        wa->id = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n_threads = i;
            kvt_threadpool_free(p);
            return kvt_errorf(err, KVT_ERR_IO, "cannot create worker thread %d", i);
        }
    }
    *out = p;
    return KVT_OK;
}

void kvt_threadpool_free(kvt_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

int kvt_threadpool_n_threads(const kvt_threadpool *p) { return p ? p->n_threads : 1; }

void kvt_threadpool_run(kvt_threadpool *p, kvt_task_fn fn, void *ctx, int64_t n_tasks) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    drain(p, 0);
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
        if (spins < SPIN_ITERS) CPU_RELAX();
        else sched_yield(); // a worker was descheduled: give it the core
    }
}

int kvt_physical_cores(void) {
    // count distinct (physical id, core id) pairs in /proc/cpuinfo
    FILE *f = fopen("/proc/cpuinfo", "r");
    int n = 0;
    if (f) {
        char line[256];
        int phys = 0, seen_cap = 256, n_seen = 0;
        long seen[256];
        while (fgets(line, sizeof line, f)) {
            int v;
            if (sscanf(line, "physical id : %d", &v) == 1) phys = v;
            if (sscanf(line, "core id : %d", &v) == 1) {
                long key = (long)phys * 100000 + v;
                int dup = 0;
                for (int i = 0; i < n_seen; i++) dup |= seen[i] == key;
                if (!dup && n_seen < seen_cap) seen[n_seen++] = key;
            }
        }
        fclose(f);
        n = n_seen;
    }
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    return n;
}
