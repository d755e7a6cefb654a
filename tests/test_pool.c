// test_pool.c - the thread pool under stress: many back-to-back jobs of varied task counts, with
// the pool's test hook widening every race window by random delays, check that each task index
// of each job runs exactly once, with that job's function and context, and never after
// kvt_threadpool_run returned.
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/base/membw.h"
#include "../src/base/threadpool.h"
#include "../src/base/timer.h"
#include "../src/exec/matmul_par.h"
#include "../src/kernels/dtype.h"
#include "../src/kernels/quant.h"
#include "test.h"

#define MAX_TASKS 67
#define N_SLOTS 4 // job contexts in rotation, so a stale task lands on a live or a finished one

typedef struct {
    int kind;                   // which of the two task functions this job runs (0 or 1)
    int64_t n;                  // task count
    _Atomic int returned;       // set once kvt_threadpool_run returned for this job
    _Atomic int count[MAX_TASKS];
    _Atomic int64_t *errors;    // shared: late tasks, wrong function, index out of range
} job_ctx;

static void task_common(job_ctx *j, int kind, int64_t task) {
    if (atomic_load(&j->returned) || j->kind != kind || task < 0 || task >= j->n) {
        atomic_fetch_add(j->errors, 1);
        return;
    }
    atomic_fetch_add(&j->count[task], 1);
}
static void task_a(void *ctx, int64_t task, int thread) {
    (void)thread;
    task_common(ctx, 0, task);
}
static void task_b(void *ctx, int64_t task, int thread) {
    (void)thread;
    task_common(ctx, 1, task);
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

// Random delays at the pool's race windows: mostly none, sometimes a short spin, rarely a yield.
static void delay_hook(void *arg, kvt_pool_hook_point point) {
    (void)arg;
    static _Thread_local uint64_t s;
    if (!s) s = (uint64_t)(uintptr_t)&s * 0x9E3779B97F4A7C15ull | 1;
    const uint64_t r = rng_next(&s) + (uint64_t)point;
    if ((r & 7) == 0) {
        for (volatile int i = 0; i < (int)(r >> 40 & 1023); i++) {
        }
    } else if ((r & 63) == 1) {
        sched_yield();
    }
}

// Runs n_jobs jobs on a pool of n_threads; returns the number of violations, and the time in ms.
static int64_t stress(int n_threads, int n_jobs, bool hooked, int spin, double *ms) {
    kvt_threadpool *pool;
    kvt_err err;
    if (kvt_threadpool_init(n_threads, &pool, &err)) return -1;
    kvt_threadpool_set_spin(pool, spin);
    if (hooked) kvt_threadpool_set_hook(pool, delay_hook, NULL);
    static job_ctx slots[N_SLOTS];
    _Atomic int64_t errors = 0;
    int64_t bad = 0;
    uint64_t s = 0x1234567u + (uint64_t)n_threads;
    const double t0 = kvt_time_ms();
    for (int j = 0; j < n_jobs; j++) {
        job_ctx *c = &slots[j % N_SLOTS];
        c->kind = (int)(rng_next(&s) & 1);
        c->n = 2 + (int64_t)(rng_next(&s) % (MAX_TASKS - 2)); // 2..MAX_TASKS-1: never the serial path
        c->errors = &errors;
        for (int t = 0; t < MAX_TASKS; t++) atomic_store(&c->count[t], 0);
        atomic_store(&c->returned, 0);
        kvt_threadpool_run(pool, c->kind ? task_b : task_a, c, c->n);
        atomic_store(&c->returned, 1);
        for (int64_t t = 0; t < c->n; t++) bad += atomic_load(&c->count[t]) != 1;
    }
    *ms = kvt_time_ms() - t0;
    kvt_threadpool_free(pool); // joins the workers: a stale task would have run by now
    for (int k = 0; k < N_SLOTS; k++) {
        for (int64_t t = 0; t < slots[k].n; t++) bad += atomic_load(&slots[k].count[t]) != 1;
    }
    return bad + atomic_load(&errors);
}

// The idle function (kvt_threadpool_set_idle): threads waiting in the pool (the caller for a slow task on another
// thread, workers between jobs) call it, each call's work counted once; the jobs' tasks still run exactly once.
typedef struct {
    _Atomic int64_t budget; // units of idle work left
    _Atomic int64_t done;   // units taken
} idle_ctx;

static bool idle_take(void *arg) {
    idle_ctx *c = arg;
    if (!c) return false; // the pool may call it with NULL while it is being cleared
    if (atomic_fetch_sub(&c->budget, 1) <= 0) {
        atomic_fetch_add(&c->budget, 1);
        return false;
    }
    atomic_fetch_add(&c->done, 1);
    return true;
}

typedef struct {
    _Atomic int count[8];
} slow_ctx;

static void task_slow(void *ctx, int64_t task, int thread) {
    (void)thread;
    slow_ctx *c = ctx;
    if (task == 0) { // long enough that the caller waits for it on another thread, or runs it while a worker waits
        const double t0 = kvt_time_ms();
        while (kvt_time_ms() - t0 < 2.0) {
        }
    }
    atomic_fetch_add(&c->count[task], 1);
}

static void task_a_count(void *ctx, int64_t task, int thread) {
    (void)thread;
    atomic_fetch_add(&((slow_ctx *)ctx)->count[task], 1);
}

static void idle_work_test(void) {
    kvt_threadpool *pool = NULL;
    kvt_err err = {0};
    idle_ctx ic;
    atomic_init(&ic.budget, 1000);
    atomic_init(&ic.done, 0);
    int64_t bad = 0;
    if (kvt_threadpool_init(2, &pool, &err) == KVT_OK) {
        kvt_threadpool_set_idle(pool, idle_take, &ic);
        // 20 jobs; more (up to 1000, ~2 s) until some idle work was taken: on a loaded machine the worker may not
        // run at all during the first ones (the caller then runs every task itself and never waits)
        for (int j = 0; j < 20 || (atomic_load(&ic.done) == 0 && j < 1000); j++) {
            slow_ctx sc;
            for (int i = 0; i < 8; i++) atomic_init(&sc.count[i], 0);
            kvt_threadpool_run(pool, task_slow, &sc, 8);
            for (int i = 0; i < 8; i++) bad += atomic_load(&sc.count[i]) != 1;
        }
        kvt_threadpool_set_idle(pool, NULL, NULL);
        kvt_threadpool_free(pool);
    } else bad = -1;
    const int64_t done = atomic_load(&ic.done), left = atomic_load(&ic.budget);
    test_result(bad == 0 && done > 0 && done + left == 1000,
                "pool: threads waiting in the pool take the idle work (kvt_threadpool_set_idle), tasks still run once",
                "%lld task count errors, %lld units of idle work taken, %lld left", (long long)bad, (long long)done,
                (long long)left);
}

// KVT_POOL_STATS=1: the pool counts its jobs and the caller's and workers' times (kvt_threadpool_get_stats); unset,
// all zero. 50 jobs: every fifth of one task (on the caller alone), the others of 8 tasks over 2 threads.
static void stats_test(void) {
    int64_t bad = 0;
    kvt_threadpool_stats on = {0}, off = {0};
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0) setenv("KVT_POOL_STATS", "1", 1);
        kvt_threadpool *pool = NULL;
        kvt_err err = {0};
        if (kvt_threadpool_init(2, &pool, &err) == KVT_OK) {
            for (int j = 0; j < 50; j++) {
                slow_ctx sc;
                for (int i = 0; i < 8; i++) atomic_init(&sc.count[i], 0);
                kvt_threadpool_run(pool, j % 10 ? task_a_count : task_slow, &sc, j % 5 ? 8 : 1);
                for (int i = 0; i < (j % 5 ? 8 : 1); i++) bad += atomic_load(&sc.count[i]) != 1;
            }
            kvt_threadpool_get_stats(pool, pass == 0 ? &on : &off);
            kvt_threadpool_free(pool);
        } else bad = -1;
        unsetenv("KVT_POOL_STATS");
    }
    test_result(bad == 0 && on.jobs == 40 && on.tasks == 320 && on.inline_jobs == 10 && on.caller_tasks <= 320 &&
                    on.caller_ms > 0 && off.jobs == 0 && off.inline_jobs == 0 && off.caller_ms == 0,
                "pool: KVT_POOL_STATS=1 counts the jobs (dispatched, on the caller alone) and the times; unset, nothing",
                "%lld task count errors; on: %lld jobs, %lld tasks, %lld alone, %.3f ms; off: %lld jobs", (long long)bad,
                (long long)on.jobs, (long long)on.tasks, (long long)on.inline_jobs, on.caller_ms, (long long)off.jobs);
}

// kvt_matmul_par_ex (the decode fusions' hook): each task's epilogue runs once, right after its rows and with
// them computed, the tasks of a part cover its rows exactly once, start at multiples of row_align, and parts of the
// same shape get the same chunks; the products are kvt_matmul_par's bits, with the input converted or given.
#define EPI_ROWS 1000
typedef struct {
    float *const *y;
    int64_t n_tok, rows, row_align;
    _Atomic int64_t bad;
    _Atomic int seen[2][EPI_ROWS];       // per part and row: epilogue calls that covered it
    _Atomic int64_t chunk_r0[2][EPI_ROWS]; // per part and chunk index: its first row + 1
} epi_check;

static void epi_fn(void *vctx, int part, int64_t chunk, int64_t r0, int64_t r1) {
    epi_check *e = vctx;
    bool ok = part >= 0 && part < 2 && r0 >= 0 && r0 < r1 && r1 <= e->rows && r0 % e->row_align == 0 && chunk >= 0 &&
              chunk < EPI_ROWS;
    for (int64_t r = r0; ok && r < r1; r++) {
        atomic_fetch_add(&e->seen[part][r], 1);
        for (int64_t t = 0; t < e->n_tok; t++) ok &= e->y[part][t * e->rows + r] == e->y[part][t * e->rows + r]; // written
    }
    if (ok) atomic_store(&e->chunk_r0[part][chunk], r0 + 1);
    if (!ok) atomic_fetch_add(&e->bad, 1);
}

static void matmul_ex_test(void) {
    enum { COLS = 256, ROWS = 600, NTOK = 20 }; // 1 and 3 tokens: decode's cut; 20: prefill's (2 threads: a tail)
    int64_t bad = 0, cases = 0;
    float *x = malloc(sizeof(float) * NTOK * COLS), *wf = malloc(sizeof(float) * ROWS * COLS);
    float *ref = malloc(sizeof(float) * 2 * NTOK * ROWS), *out = malloc(sizeof(float) * 2 * NTOK * ROWS);
    float *fy = malloc(sizeof(float) * 2 * NTOK * ROWS); // kvt_mm_opts' fused_y
    void *scratch = NULL, *xq = NULL;
    const int64_t sb = kvt_matmul_scratch_bytes(COLS, NTOK);
    epi_check *e = calloc(1, sizeof *e);
    const kvt_type types[] = {KVT_TYPE_Q8_0, KVT_TYPE_F32};
    if (!x || !wf || !ref || !out || !fy || !e || posix_memalign(&scratch, 64, (size_t)sb) || posix_memalign(&xq, 64, (size_t)sb)) {
        bad = -1;
        goto done;
    }
    for (int i = 0; i < NTOK * COLS; i++) x[i] = (float)((i * 37) % 101 - 50) / 17.0f;
    for (int i = 0; i < ROWS * COLS; i++) wf[i] = (float)((i * 53) % 97 - 48) / 29.0f;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const kvt_type_ops *ops = kvt_type_ops_get(types[ti]), *dot = kvt_type_ops_get(ops->vec_dot_type);
        const int64_t wrs = kvt_row_size(types[ti], COLS), drs = kvt_row_size(ops->vec_dot_type, COLS);
        uint8_t *wd = malloc((size_t)(wrs * ROWS * 2));
        if (!wd) {
            bad = -1;
            goto done;
        }
        for (int r = 0; r < ROWS; r++) ops->from_float(wf + r * COLS, wd + r * wrs, COLS);
        memcpy(wd + ROWS * wrs, wd, (size_t)(wrs * ROWS)); // w2: the same rows right after w's
        for (int t = 0; t < NTOK; t++) dot->from_float(x + t * COLS, (uint8_t *)xq + t * drs, COLS);
        const kvt_weight w = {wd, types[ti], COLS, ROWS, NULL, types[ti]}, w2 = {wd + ROWS * wrs, types[ti], COLS, ROWS, NULL, types[ti]};
        const kvt_weight *ws[2] = {&w, &w}, *wf2[2] = {&w, &w2};
        float *ry[2] = {ref, ref + NTOK * ROWS}, *oy[2] = {out, out + NTOK * ROWS};
        for (int threads = 1; threads <= 4; threads++) {
            kvt_threadpool *pool = NULL;
            kvt_err err;
            if (kvt_threadpool_init(threads, &pool, &err)) {
                bad = -1;
                goto done;
            }
            kvt_matmul_par(pool, ws, ry, 2, x, NTOK, scratch);
            static const int toks[] = {1, 3, NTOK};
            for (size_t ni = 0; ni < sizeof toks / sizeof toks[0]; ni++) {
                const int n_tok = toks[ni];
                // row_align 1, 32, 96, 96 with the input given; 4: fused_y with w twice (not back to back: unfused);
                // 5, 6: fused_y with w and w2 back to back (one group: its tasks span both), row_align 1 and 8
                for (int variant = 0; variant < 7; variant++) {
                    const bool fused = variant >= 5;
                    const kvt_weight *const *wv = fused ? wf2 : ws;
                    memset(e, 0, sizeof *e);
                    memset(out, 0xff, sizeof(float) * 2 * NTOK * ROWS); // NaN until written
                    memset(fy, 0xff, sizeof(float) * 2 * NTOK * ROWS);
                    e->y = oy, e->n_tok = n_tok, e->rows = ROWS;
                    e->row_align = variant == 1 ? 32 : variant == 2 || variant == 3 ? 96 : variant == 6 ? 8 : 1;
                    const kvt_mm_opts o = {epi_fn, e, e->row_align, variant == 3 ? xq : NULL, variant >= 4 ? fy : NULL};
                    kvt_matmul_par_ex(pool, wv, oy, 2, x, n_tok, scratch, &o); // one token: x's (xq's) first row
                    cases++;
                    bool ok = atomic_load(&e->bad) == 0;
                    for (int part = 0; part < 2; part++) {
                        for (int r = 0; r < ROWS; r++) ok &= atomic_load(&e->seen[part][r]) == 1;
                        for (int c = 0; !fused && c < EPI_ROWS; c++) ok &= atomic_load(&e->chunk_r0[0][c]) == atomic_load(&e->chunk_r0[1][c]);
                        for (int t = 0; t < n_tok; t++) { // the product of token t alone = its row of the 3-token product
                            ok &= memcmp(oy[part] + t * ROWS, ry[part] + t * ROWS, sizeof(float) * ROWS) == 0;
                        }
                    }
                    // the prefetch window's ranges (weight_pf.h) are these tasks' bytes, in task order: per part (the
                    // chunks' first rows), or fused, back to back from w's first byte to w2's last
                    kvt_wpf_range rr[4 * EPI_ROWS / KVT_MATMUL_MIN_CHUNK_ROWS];
                    const int nr = kvt_matmul_par_ranges(pool, wv, 2, n_tok, &o, rr, (int)(sizeof rr / sizeof rr[0]));
                    int k = 0;
                    if (fused) {
                        const char *at = (const char *)wd;
                        for (; k < nr; k++) ok &= rr[k].p == at && rr[k].bytes > 0, at += rr[k].bytes;
                        ok &= at == (const char *)wd + 2 * ROWS * wrs && nr > 0;
                    }
                    for (int part = 0; !fused && part < 2; part++) {
                        int64_t sum = 0;
                        for (int c = 0; c < EPI_ROWS && atomic_load(&e->chunk_r0[part][c]) > 0; c++, k++) {
                            ok &= k < nr && rr[k].p == wd + (atomic_load(&e->chunk_r0[part][c]) - 1) * wrs;
                            if (k < nr) sum += rr[k].bytes;
                        }
                        ok &= sum == ROWS * wrs;
                    }
                    ok &= k == nr;
                    bad += !ok;
                }
            }
            kvt_threadpool_free(pool);
        }
        free(wd);
    }
done:
    test_result(bad == 0, "pool: kvt_matmul_par_ex: every task's epilogue once after its rows, rows covered once, chunks "
                "aligned and equal across same-shape parts, products equal to kvt_matmul_par's (input converted or given; "
                "parts back to back fused into one matrix with fused_y)",
                "%lld of %lld cases wrong (-1: setup failed)", (long long)bad, (long long)cases);
    free(x), free(wf), free(ref), free(out), free(fy), free(scratch), free(xq), free(e);
}

// The weight prefetch window (weight_pf.h): kvt_wpf_step requests each chunk of a posted window once, the ranges'
// chunks in turns, as many as the budget allows (whole rounds), none once a window is emptied or replaced; four
// threads stepping one window together take each chunk once.
typedef struct {
    kvt_wpf *w;
    _Atomic int64_t steps;
} wpf_ctx;

static void wpf_task(void *vctx, int64_t task, int thread) {
    (void)task, (void)thread;
    wpf_ctx *c = vctx;
    while (kvt_wpf_step(c->w)) atomic_fetch_add(&c->steps, 1);
}

static void wpf_test(void) {
    static char buf[40000];
    kvt_wpf w;
    kvt_wpf_init(&w);
    int64_t bad = 0;
    bad += kvt_wpf_step(&w); // empty
    const kvt_wpf_range r[3] = {{buf, 10000}, {buf + 10000, 2048}, {buf + 20000, 20000}};
    const int64_t all = (10000 + KVT_WPF_CHUNK - 1) / KVT_WPF_CHUNK + 1 + (20000 + KVT_WPF_CHUNK - 1) / KVT_WPF_CHUNK;
    // budgets: all; 1 round of 3 chunks' worth + 1 = 2 rounds (range 1 has one chunk: 3 + 2); 2 + 1 = 3 rounds (3 + 2 + 2)
    const int64_t budget[3] = {1 << 30, 3 * KVT_WPF_CHUNK, 7 * KVT_WPF_CHUNK}, want[3] = {all, 5, 7};
    for (int i = 0; i < 3; i++) {
        kvt_wpf_post(&w, r, 3, budget[i]);
        int64_t n = 0;
        while (kvt_wpf_step(&w) && n <= all) n++;
        bad += n != want[i];
    }
    kvt_wpf_post(&w, r, 3, 1 << 30);
    kvt_wpf_post(&w, r, 0, 1 << 30); // replaced by none
    bad += kvt_wpf_step(&w);
    kvt_threadpool *pool = NULL;
    kvt_err err;
    if (kvt_threadpool_init(4, &pool, &err)) {
        bad = -1;
    } else {
        for (int rep = 0; rep < 200; rep++) {
            wpf_ctx c = {&w, 0};
            kvt_wpf_post(&w, r, 3, 1 << 30);
            kvt_threadpool_run(pool, wpf_task, &c, 4);
            bad += atomic_load(&c.steps) != all;
        }
        kvt_threadpool_free(pool);
    }
    test_result(bad == 0, "pool: weight prefetch window: each chunk once (4 threads too), the budget's whole rounds, none when "
                "empty or replaced", "%lld wrong (-1: setup failed)", (long long)bad);
}

// The spin budget (kvt_threadpool_set_spin): default, clamped, restored by a negative value; with no spin at all
// (workers yield at once, then sleep) and with a few rounds, every task still runs once, none late.
static void spin_test(const test_env *env) {
    kvt_threadpool *pool = NULL;
    kvt_err err = {0};
    int64_t bad = 0;
    if (kvt_threadpool_init(2, &pool, &err) == KVT_OK) {
        bad += kvt_threadpool_get_spin(pool) != KVT_THREADPOOL_SPIN_DEFAULT;
        bad += kvt_threadpool_set_spin(pool, 200) != 200 || kvt_threadpool_get_spin(pool) != 200;
        bad += kvt_threadpool_set_spin(pool, 0) != 0 || kvt_threadpool_get_spin(pool) != 0;
        bad += kvt_threadpool_set_spin(pool, -1) != KVT_THREADPOOL_SPIN_DEFAULT;
        bad += kvt_threadpool_set_spin(pool, 1 << 30) != 1 << 24;
        kvt_threadpool_free(pool);
    } else bad = -1;
    bad += kvt_threadpool_get_spin(NULL) != KVT_THREADPOOL_SPIN_DEFAULT;
    test_result(bad == 0, "pool: kvt_threadpool_set_spin: default, clamped, restored", "%lld wrong value(s)", (long long)bad);
    for (int spin = 0; spin <= 200; spin += 200) {
        const int n_jobs = env->quick ? 1500 : 6000;
        double ms = 0;
        const int64_t v = stress(2, n_jobs, true, spin, &ms);
        char name[160];
        snprintf(name, sizeof name, "pool: spin budget %d, %d jobs on 2 threads, race windows widened: every task once, none late",
                 spin, n_jobs);
        test_result(v == 0, name, "%lld violation(s)", (long long)v);
        printf("#   %.0f ms, %.2f us per job\n", ms, 1000.0 * ms / n_jobs);
    }
}

// kvt_median_f64 (kvtier bench's shares) and the reusable read probe (its token-paired probes): sizes rounded to
// whole sets of four 64 KiB chunks, every pattern's pass timed (> 0) on 1 and 2 threads, a pool wider than the probe
// and a pattern out of range refused (0).
static void probe_test(void) {
    int64_t bad = 0;
    double odd[] = {3, 1, 2}, even[] = {4, 1, 3, 2}, one[] = {7};
    bad += kvt_median_f64(odd, 3) != 2;
    bad += kvt_median_f64(even, 4) != 2.5;
    bad += kvt_median_f64(one, 1) != 7;
    bad += kvt_median_f64(one, 0) != 0;
    kvt_read_probe *p = NULL;
    kvt_threadpool *pools[2] = {NULL, NULL};
    bad += kvt_threadpool_init(1, &pools[0], NULL) != KVT_OK;
    bad += kvt_threadpool_init(2, &pools[1], NULL) != KVT_OK;
    bad += kvt_read_probe_init(1000000, 0, 0, &p, NULL) != KVT_ERR_INVALID_ARG || p != NULL;
    if (kvt_read_probe_init(1000000, 3000000, 1, &p, NULL) == KVT_OK) {
        bad += kvt_read_probe_bytes(p) != 1048576; // 15.3 chunks: 16 (in 3 windows: a pass reads one)
        bad += pools[1] && kvt_read_probe_pass(p, pools[1], KVT_READ_ONE) != 0; // 2 threads, made for 1
        for (int k = 0; k < 4; k++) bad += pools[0] && !(kvt_read_probe_pass(p, pools[0], KVT_READ_FOUR) > 0); // windows in turn
        kvt_read_probe_free(p);
    } else {
        bad++;
    }
    p = NULL;
    if (kvt_read_probe_init(1, 0, 2, &p, NULL) == KVT_OK) {
        bad += kvt_read_probe_bytes(p) != 4 * 65536;
        for (int t = 0; t < 2; t++) {
            for (int k = 0; k < KVT_READ_N_PATTERNS; k++) bad += pools[t] && !(kvt_read_probe_pass(p, pools[t], k) > 0);
            bad += pools[t] && kvt_read_probe_pass(p, pools[t], KVT_READ_N_PATTERNS) != 0;
        }
        kvt_read_probe_free(p);
    } else {
        bad++;
    }
    kvt_threadpool_free(pools[0]);
    kvt_threadpool_free(pools[1]);
    test_result(bad == 0, "pool: kvt_median_f64, and the reusable read probe's sizes, passes and refusals", "%lld wrong",
                (long long)bad);
}

void test_pool(const test_env *env) {
    probe_test();
    matmul_ex_test();
    wpf_test();
    spin_test(env);
    idle_work_test();
    stats_test();
    for (int threads = 2; threads <= 4; threads += 2) {
        for (int hooked = 0; hooked <= 1; hooked++) {
            const int n_jobs = hooked ? (env->quick ? 1500 : 6000) : (env->quick ? 4000 : 30000);
            double ms = 0;
            const int64_t bad = stress(threads, n_jobs, hooked, -1, &ms);
            char name[160];
            snprintf(name, sizeof name, "pool: %d back-to-back jobs of 2..%d tasks on %d threads%s: every task once, none late",
                     n_jobs, MAX_TASKS - 1, threads, hooked ? ", race windows widened" : "");
            test_result(bad == 0, name, "%lld violation(s) (duplicate, missing, late, out-of-range or mismatched task)",
                        (long long)bad);
            printf("#   %.0f ms, %.2f us per job\n", ms, 1000.0 * ms / n_jobs);
        }
    }
}
