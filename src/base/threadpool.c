// threadpool.c - persistent workers with a generation-tagged task counter.
//
// A job is published by bumping `generation`; tasks are claimed by a CAS on
// `claim` = (generation << 32 | next task), so a worker that wakes late (its
// core was taken by another process) can never claim a task of a later job,
// and the caller never waits for an idle worker: it claims every task nobody
// else took and waits only for tasks already running elsewhere.
//
// The job descriptor (fn, ctx, n_tasks) is read by a worker as a snapshot that
// the claim word validates, seqlock style: the caller first moves `claim` to
// the new generation, then stores the descriptor with release; a worker loads
// the descriptor with acquire, then `claim`. A worker that saw any field of a
// newer job therefore also sees that job's claim word, whose generation is not
// the one it was woken for, and takes nothing: a function is never paired with
// another job's context, task count or counter. (Generations are compared
// modulo 2^32: a worker would have to sleep through 4 billion jobs to be fooled.)
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "timer.h"
#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ITERS KVT_THREADPOOL_SPIN_DEFAULT  // pause-loop iterations before yielding the core (the caller's wait; the workers' default)
#define YIELD_ITERS 200   // sched_yield rounds before sleeping on the condition variable
#define IDLE_EVERY 16     // spin rounds between two calls of the idle function (kvt_threadpool_set_idle)

struct kvt_threadpool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    // current job (written by the caller before the generation is published)
    _Atomic(kvt_task_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int64_t n_tasks;
    _Atomic uint64_t claim;      // generation << 32 | next task index
    _Atomic int64_t done;        // tasks finished in the current job
    _Atomic uint64_t generation; // bumped to publish a job
    _Atomic int sleeping;        // workers blocked on cv
    _Atomic int stop;
    _Atomic int spin;            // a worker's pause rounds between jobs before it yields (kvt_threadpool_set_spin)
    _Atomic(kvt_threadpool_hook) hook; // tests only (NULL otherwise): called at the race windows
    _Atomic(void *) hook_arg;
    _Atomic(kvt_threadpool_idle_fn) idle; // work for spinning threads (kvt_threadpool_set_idle), or NULL
    _Atomic(void *) idle_arg;
    // KVT_POOL_STATS=1 (measurement only): where the caller's and the workers' time goes (kvt_threadpool_get_stats)
    bool stats;
    int64_t st_runs, st_inline, st_tasks, st_caller_tasks; // dispatched jobs, jobs run on the caller alone, their tasks
    int64_t st_drain_ns, st_wait_ns, st_between_ns;        // caller: own tasks, waiting for others, outside the pool
    int64_t st_inline_ns, st_last_ns;                                     // caller: when the previous job returned (0: none yet)
    _Atomic int64_t st_worker_ns;                           // workers: time in their tasks, all together
};

// One relaxed load and a branch never taken outside tests.
#define HOOK(p, point)                                                                         \
    do {                                                                                       \
        kvt_threadpool_hook h_ = atomic_load_explicit(&(p)->hook, memory_order_relaxed);       \
        if (h_) h_(atomic_load_explicit(&(p)->hook_arg, memory_order_relaxed), (point));       \
    } while (0)

typedef struct {
    kvt_threadpool *pool;
    int id;
} worker_arg;

// A spinning thread's turn at the idle work (every IDLE_EVERY spin rounds): true if it did some.
static inline bool idle_work(kvt_threadpool *p, int spins) {
    if (spins % IDLE_EVERY) return false;
    kvt_threadpool_idle_fn f = atomic_load_explicit(&p->idle, memory_order_acquire);
    return f && f(atomic_load_explicit(&p->idle_arg, memory_order_acquire));
}

// Claims and runs tasks of job `gen` until none is left or a newer job started.
static int64_t drain(kvt_threadpool *p, uint64_t gen, int thread) {
    int64_t ran = 0;
    if (thread) HOOK(p, KVT_POOL_HOOK_WORKER_WOKEN);
    // descriptor snapshot first (acquire), then the claim word that validates it (see the top)
    kvt_task_fn fn = atomic_load_explicit(&p->fn, memory_order_acquire);
    void *ctx = atomic_load_explicit(&p->ctx, memory_order_acquire);
    const int64_t n = atomic_load_explicit(&p->n_tasks, memory_order_acquire);
    if (thread) HOOK(p, KVT_POOL_HOOK_WORKER_READ);
    uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        if ((c >> 32) != (gen & 0xffffffffu) || (int64_t)(c & 0xffffffffu) >= n) return ran;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel, memory_order_acquire)) {
            continue;
        }
        fn(ctx, (int64_t)(c & 0xffffffffu), thread);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        ran++;
        c = atomic_load_explicit(&p->claim, memory_order_acquire);
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
        const int spin = atomic_load_explicit(&p->spin, memory_order_relaxed); // the budget, read at the start of each wait
        while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&p->stop, memory_order_relaxed)) return NULL;
            if (++spins < spin) {
                if (idle_work(p, spins)) spins = -1; // it did work: try again at once, the spin starts anew
                else CPU_RELAX();
            } else if (spins < spin + YIELD_ITERS) {
                sched_yield(); // another process may want this core
            } else {
                pthread_mutex_lock(&p->mu);
                atomic_fetch_add(&p->sleeping, 1);
                while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
                atomic_fetch_sub(&p->sleeping, 1);
                pthread_mutex_unlock(&p->mu);
                spins = 0;
            }
        }
        seen = gen;
        if (atomic_load(&p->stop)) return NULL;
        if (p->stats) {
            const int64_t t0 = kvt_time_ns();
            drain(p, gen, id);
            atomic_fetch_add_explicit(&p->st_worker_ns, kvt_time_ns() - t0, memory_order_relaxed);
        } else {
            drain(p, gen, id);
        }
    }
}

kvt_status kvt_threadpool_init(int n_threads, kvt_threadpool **out, kvt_err *err) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 4096) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "thread count %d out of range (1..4096)", n_threads);
    kvt_threadpool *p = calloc(1, sizeof *p);
    if (!p) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for thread pool");
    p->n_threads = n_threads;
    atomic_init(&p->spin, SPIN_ITERS);
    const char *st = getenv("KVT_POOL_STATS");
    p->stats = st && st[0] && strcmp(st, "0") != 0;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!p->threads) {
        free(p);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for thread pool");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) *wa = (worker_arg){p, i};
        if (!wa || pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
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

// Runs tasks [base, base + n) of a job whose task count exceeds the claim word's 32-bit index.
typedef struct {
    kvt_task_fn fn;
    void *ctx;
    int64_t base;
} chunk_job;

static void chunk_task(void *arg, int64_t task, int thread) {
    const chunk_job *j = arg;
    j->fn(j->ctx, j->base + task, thread);
}

void kvt_threadpool_run(kvt_threadpool *p, kvt_task_fn fn, void *ctx, int64_t n_tasks) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        const int64_t t0 = p && p->stats ? kvt_time_ns() : 0;
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        if (p && p->stats) p->st_inline++, p->st_inline_ns += kvt_time_ns() - t0; // also counted as outside the pool
        return;
    }
    const int64_t max_job = (int64_t)1 << 31; // task indices must stay below the claim word's generation bits
    if (n_tasks > max_job) {
        for (int64_t b = 0; b < n_tasks; b += max_job) {
            chunk_job j = {fn, ctx, b};
            kvt_threadpool_run(p, chunk_task, &j, n_tasks - b < max_job ? n_tasks - b : max_job);
        }
        return;
    }
    const int64_t t_enter = p->stats ? kvt_time_ns() : 0;
    const uint64_t gen = atomic_load_explicit(&p->generation, memory_order_relaxed) + 1;
    // 1. retire the old job: late workers of earlier generations can claim nothing from here on
    atomic_store_explicit(&p->claim, (gen & 0xffffffffu) << 32, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    HOOK(p, KVT_POOL_HOOK_CALLER_RETIRED);
    // 2. the descriptor, each field with release so a reader that sees it also sees step 1
    atomic_store_explicit(&p->fn, fn, memory_order_release);
    HOOK(p, KVT_POOL_HOOK_CALLER_DESCRIPTOR);
    atomic_store_explicit(&p->ctx, ctx, memory_order_release);
    atomic_store_explicit(&p->n_tasks, n_tasks, memory_order_release);
    // 3. publish
    atomic_store_explicit(&p->generation, gen, memory_order_release);
    if (atomic_load(&p->sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    const int64_t mine = drain(p, gen, 0);
    const int64_t t_drained = p->stats ? kvt_time_ns() : 0;
    for (int spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks; spins++) {
        if (idle_work(p, spins)) { // a queued KV copy instead of a spin (kvt_threadpool_set_idle): try again at once
            spins = -1;
            continue;
        }
        if (spins < SPIN_ITERS) CPU_RELAX();
        else sched_yield(); // a task is running on a descheduled worker: give it the core
    }
    if (p->stats) {
        const int64_t t_done = kvt_time_ns();
        p->st_runs++;
        p->st_tasks += n_tasks;
        p->st_caller_tasks += mine;
        p->st_drain_ns += t_drained - t_enter;
        p->st_wait_ns += t_done - t_drained;
        if (p->st_last_ns) p->st_between_ns += t_enter - p->st_last_ns;
        p->st_last_ns = t_done;
    }
}

void kvt_threadpool_get_stats(const kvt_threadpool *p, kvt_threadpool_stats *out) {
    *out = (kvt_threadpool_stats){0};
    if (!p) return;
    out->jobs = p->st_runs;
    out->tasks = p->st_tasks;
    out->caller_tasks = p->st_caller_tasks;
    out->inline_jobs = p->st_inline;
    out->inline_ms = (double)p->st_inline_ns / 1e6;
    out->caller_ms = (double)p->st_drain_ns / 1e6;
    out->wait_ms = (double)p->st_wait_ns / 1e6;
    out->between_ms = (double)p->st_between_ns / 1e6;
    out->worker_ms = (double)atomic_load(&((kvt_threadpool *)p)->st_worker_ns) / 1e6;
}

void kvt_threadpool_set_hook(kvt_threadpool *p, kvt_threadpool_hook hook, void *arg) {
    if (!p) return;
    atomic_store(&p->hook_arg, arg);
    atomic_store(&p->hook, hook);
}

int kvt_threadpool_set_spin(kvt_threadpool *p, int spin_iters) {
    if (spin_iters < 0) spin_iters = SPIN_ITERS;
    if (spin_iters > 1 << 24) spin_iters = 1 << 24;
    if (p) atomic_store_explicit(&p->spin, spin_iters, memory_order_relaxed);
    return spin_iters;
}

int kvt_threadpool_get_spin(const kvt_threadpool *p) {
    return p ? atomic_load_explicit(&((kvt_threadpool *)p)->spin, memory_order_relaxed) : SPIN_ITERS;
}

void kvt_threadpool_set_idle(kvt_threadpool *p, kvt_threadpool_idle_fn fn, void *arg) {
    if (!p) return;
    // the function goes NULL first and comes back last: a thread that sees the new function sees its argument
    atomic_store_explicit(&p->idle, NULL, memory_order_release);
    atomic_store_explicit(&p->idle_arg, arg, memory_order_release);
    if (fn) atomic_store_explicit(&p->idle, fn, memory_order_release);
}

int kvt_physical_cores(void) {
    // count distinct (physical id, core id) pairs in /proc/cpuinfo
    FILE *f = fopen("/proc/cpuinfo", "r");
    int n = 0;
    if (f) {
        char line[256];
        int phys = 0, n_seen = 0;
        long seen[1024];
        while (fgets(line, sizeof line, f)) {
            int v;
            if (sscanf(line, "physical id : %d", &v) == 1) phys = v;
            if (sscanf(line, "core id : %d", &v) == 1) {
                long key = (long)phys * 100000 + v;
                int dup = 0;
                for (int i = 0; i < n_seen; i++) dup |= seen[i] == key;
                if (!dup && n_seen < 1024) seen[n_seen++] = key;
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
