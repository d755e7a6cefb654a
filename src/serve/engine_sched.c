// engine_sched.c - the continuous-batching kvt_engine: src/sched's scheduler on one thread.
//
// submit/cancel/stats run on any thread and touch only the inbox, the job list and the counters under the
// mutex. The scheduler thread moves new jobs from the inbox into the scheduler, turns cancel flags into
// kvt_sched_cancel calls, and runs kvt_sched_step while anything waits or runs; every callback of every job
// comes from that one thread, so each job's callbacks are serialized.
//
// With a prefix cache over a second-level store (and prefix_fetch_bytes > 0), a new job's prompt blocks that the
// memory cache lacks are first looked up by the background fetch (prefix_fetch.h): the job waits in the fetching
// list, not in the scheduler, so the running requests' iterations go on meanwhile; it enters the scheduler with
// its staged copies when the fetch is done, or without them (admission then reads the store) once
// prefix_fetch_wait_ms have passed. Jobs may so enter the scheduler in another order than they arrived.
#include <pthread.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "../base/timer.h"
#include "../sched/prefix_fetch.h"
#include "engine.h"

struct sengine;
typedef struct sjob {
    struct sjob *next;       // inbox, then the list of jobs in the scheduler
    struct sengine *e;
    uint64_t id;             // the engine's id
    uint64_t sid;            // the scheduler's id (0: not yet submitted there); scheduler thread only
    bool cancelled;          // under mu
    kvt_engine_job p;
    int32_t *prompt;         // owned copy
    kvt_engine_callbacks cb;
    kvt_prefix_fetch_job *fj; // background fetch of its prefix blocks (scheduler thread), or NULL
    kvt_prefix_staged staged; // fj's result, handed to the scheduler
    kvt_sampler_report report; // p.post_sampling: what the draw kept (p.sampling.report points here)
    double deadline_ms;       // in the fetching list: when to stop waiting for fj
} sjob;

typedef struct sengine {
    kvt_engine base;
    kvt_context *ctx;
    const kvt_tokenizer *tok;
    kvt_sched *s;
    int32_t max_queue;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sjob *inbox, *inbox_tail; // submitted, not yet in the scheduler
    sjob *jobs;               // in the scheduler
    sjob *transit;            // the job the scheduler thread took from the inbox or the fetching list and has not yet
                              // put in the job list or the fetching list (or ended): s_cancel marks it there too
    int32_t n_inbox;
    int64_t sched_waiting;    // jobs the scheduler has not admitted (as of its last iteration)
    bool stopping, cancel_pending;
    uint64_t next_id;
    kvt_engine_stats st;
    kvt_prefix_store *pstore; // the prefix cache's second level (borrowed from the params), or NULL
    kvt_prefix_fetch *fetch;  // background reads of pstore (NULL: none)
    sjob *fetching;           // jobs whose fetch is under way, in arrival order (changed by the scheduler thread under mu)
    int32_t n_fetching;
    bool fetch_ready;         // under mu: a fetch completed since the scheduler thread last looked
    int32_t fetch_wait_ms;
    int64_t block_tokens;
    float *lp;                // [n_vocab] log-probabilities scratch (scheduler thread)
} sengine;

static void unlink_job(sengine *e, sjob *j) {
    for (sjob **pp = &e->jobs; *pp; pp = &(*pp)->next) {
        if (*pp == j) {
            *pp = j->next;
            return;
        }
    }
}

static bool on_token(void *user, int32_t index, int32_t id, const float *logits) {
    sjob *j = user;
    sengine *e = j->e;
    kvt_engine_token t;
    memset(&t, 0, sizeof t);
    t.id = id;
    t.eog = e->tok && kvt_token_is_eog(e->tok, id);
    if (j->p.logprobs && j->p.sampling.report) kvt_engine_token_report(j->p.sampling.report, &t);
    else if (j->p.logprobs) {
        kvt_engine_token_logprobs(logits, kvt_context_model(e->ctx)->hp.n_vocab, j->p.top_logprobs, e->lp, &t);
    }
    return j->cb.on_token(j->cb.user, index, &t);
}

static void on_finish(void *user, int32_t index, kvt_sched_finish why) {
    sjob *j = user;
    j->cb.on_finish(j->cb.user, index, why == KVT_SCHED_STOP ? KVT_FINISH_STOP : KVT_FINISH_LENGTH);
}

static void on_done(void *user, const kvt_sched_result *r) {
    sjob *j = user;
    sengine *e = j->e;
    kvt_engine_result res;
    memset(&res, 0, sizeof res);
    res.outcome = r->outcome == KVT_SCHED_DONE ? KVT_ENGINE_DONE
                  : r->outcome == KVT_SCHED_CANCELLED ? KVT_ENGINE_CANCELLED : KVT_ENGINE_FAILED;
    res.err = r->err;
    res.prompt_tokens = r->prompt_tokens;
    res.cached_tokens = r->cached_tokens;
    res.completion_tokens = r->completion_tokens;
    res.sparse = r->sparse;
    res.sparse_steps = r->sparse_steps;
    pthread_mutex_lock(&e->mu);
    unlink_job(e, j);
    if (res.outcome == KVT_ENGINE_DONE) e->st.jobs_done++;
    else if (res.outcome == KVT_ENGINE_CANCELLED) e->st.jobs_cancelled++;
    else e->st.jobs_failed++;
    e->st.prompt_tokens += r->computed_tokens; // (not the prompt of one cancelled before it ran)
    e->st.cached_tokens += r->cached_tokens;
    e->st.generated_tokens += r->completion_tokens;
    pthread_mutex_unlock(&e->mu);
    j->cb.on_done(j->cb.user, &res);
    kvt_prefix_fetch_release(e->fetch, j->fj); // not handed to the scheduler (submit failed), or cancelled while fetching
    free(j->prompt);
    free(j);
}

// kvt_prefix_staged.release: the scheduler admitted the job (or ended it unadmitted).
static void staged_release(void *arg) {
    sjob *j = arg;
    kvt_prefix_fetch_release(j->e->fetch, j->fj);
    j->fj = NULL;
}

// The fetch thread: a job's blocks are staged.
static void fetch_ready(void *user) {
    sengine *e = user;
    pthread_mutex_lock(&e->mu);
    e->fetch_ready = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

// Starts the background fetch of j's prefix blocks that the memory cache lacks: true when j waits for it in the
// fetching list (not yet in the scheduler). Scheduler thread; mu not held.
static bool fetch_begin(sengine *e, sjob *j) {
    if (!e->fetch) return false; // a job cancelled meanwhile leaves the fetching list at once (take_fetched)
    const int64_t nb = kvt_sched_prefix_blocks(e->s, j->p.n_prompt); // the blocks attach may give
    const int64_t m = nb > 0 ? kvt_sched_prefix_probe(e->s, j->prompt, j->p.n_prompt) : -1;
    if (m < 0 || m >= nb || !(j->fj = kvt_prefix_fetch_start(e->fetch, j->prompt, m, nb))) return false;
    j->deadline_ms = kvt_time_ms() + e->fetch_wait_ms;
    pthread_mutex_lock(&e->mu);
    if (e->transit == j) e->transit = NULL;
    j->next = NULL;
    sjob **tail = &e->fetching;
    while (*tail) tail = &(*tail)->next;
    *tail = j;
    e->n_fetching++;
    e->sched_waiting--; // counted in n_fetching meanwhile
    e->st.prefix_fetches++;
    pthread_mutex_unlock(&e->mu);
    return true;
}

// Hands job j (out of the inbox or the fetching list) to the scheduler, with its staged blocks if any, or ends it
// (cancelled, or refused by the scheduler). Scheduler thread; mu not held.
static void job_enter(sengine *e, sjob *j) {
    pthread_mutex_lock(&e->mu);
    const bool cancelled = j->cancelled;
    if (!cancelled) { // in the job list before the scheduler can end it
        j->next = e->jobs;
        e->jobs = j;
    }
    if (e->transit == j) e->transit = NULL; // a cancel from now on finds it in the job list, or it ends below
    pthread_mutex_unlock(&e->mu);
    kvt_sched_request rq = {j->prompt, j->p.n_prompt, j->p.max_tokens, j->p.sampling, j->p.n, !j->p.ignore_eos, j};
    kvt_err err = {0};
    const kvt_prefix_staged *sg = NULL;
    if (!cancelled && j->fj) {
        kvt_prefix_fetch_result(e->fetch, j->fj, &j->staged);
        j->staged.release = staged_release;
        j->staged.arg = j;
        sg = &j->staged;
    }
    kvt_status st = cancelled ? KVT_OK : kvt_sched_submit_staged(e->s, &rq, sg, &j->sid, &err);
    if (cancelled || st) {
        kvt_sched_result r;
        memset(&r, 0, sizeof r);
        r.outcome = cancelled ? KVT_SCHED_CANCELLED : KVT_SCHED_FAILED;
        r.err = err;
        r.prompt_tokens = j->p.n_prompt;
        if (!cancelled) {
            pthread_mutex_lock(&e->mu);
            unlink_job(e, j);
            pthread_mutex_unlock(&e->mu);
        }
        j->next = NULL;
        on_done(j, &r);
    }
}

// Moves the jobs of the fetching list whose fetch is done, or overdue, or that were cancelled, into the scheduler
// (an overdue fetch is abandoned: admission reads the store itself). Scheduler thread; mu not held.
static void take_fetched(sengine *e) {
    pthread_mutex_lock(&e->mu);
    e->fetch_ready = false;
    pthread_mutex_unlock(&e->mu);
    const double now = kvt_time_ms();
    for (;;) {
        sjob *j = NULL;
        bool late = false;
        pthread_mutex_lock(&e->mu);
        for (sjob **pp = &e->fetching; *pp; pp = &(*pp)->next) {
            sjob *x = *pp;
            const bool done = kvt_prefix_fetch_done(e->fetch, x->fj);
            if (x->cancelled || done || now >= x->deadline_ms) {
                *pp = x->next;
                j = e->transit = x;
                late = !x->cancelled && !done;
                e->n_fetching--;
                e->sched_waiting++;
                if (late) e->st.prefix_fetch_timeouts++;
                break;
            }
        }
        pthread_mutex_unlock(&e->mu);
        if (!j) return;
        if (late) {
            kvt_prefix_fetch_release(e->fetch, j->fj);
            j->fj = NULL;
        }
        job_enter(e, j);
    }
}

// Earliest deadline of the fetching list (mu held); 0 when it is empty.
static double fetch_deadline(const sengine *e) {
    double d = 0;
    for (const sjob *j = e->fetching; j; j = j->next) {
        if (d == 0 || j->deadline_ms < d) d = j->deadline_ms;
    }
    return d;
}

// Moves the inbox into the scheduler and passes cancellations on. Scheduler thread; mu not held.
static void take_inbox(sengine *e) {
    pthread_mutex_lock(&e->mu);
    const bool cancels = e->cancel_pending;
    e->cancel_pending = false;
    pthread_mutex_unlock(&e->mu);
    for (;;) { // one job at a time, in transit until it is in a list a cancel searches (or ended)
        pthread_mutex_lock(&e->mu);
        sjob *j = e->inbox;
        if (j) {
            e->inbox = j->next;
            if (!e->inbox) e->inbox_tail = NULL;
            e->n_inbox--;
            e->sched_waiting++; // waiting in the scheduler now (the next iteration counts them exactly)
            e->transit = j;
        }
        pthread_mutex_unlock(&e->mu);
        if (!j) break;
        if (!fetch_begin(e, j)) job_enter(e, j);
    }
    take_fetched(e);
    if (!cancels) return;
    for (;;) { // one cancelled job at a time: kvt_sched_cancel ends it (on_done unlinks it)
        uint64_t sid = 0;
        pthread_mutex_lock(&e->mu);
        for (sjob *j = e->jobs; j && !sid; j = j->next) {
            if (j->cancelled) sid = j->sid;
        }
        pthread_mutex_unlock(&e->mu);
        if (!sid) return;
        kvt_sched_cancel(e->s, sid);
    }
}

// The store's and the sparse layer's figures into e->st (e->mu held; the engine thread, between steps).
static void store_stats(sengine *e) {
    kvt_context_kv_stats(e->ctx, &e->st.kv);
    if (kvt_context_sparse(e->ctx)) kvt_sparse_totals_get(kvt_context_sparse(e->ctx), &e->st.sparse);
}

static void *sched_main(void *arg) {
    sengine *e = arg;
    bool warm = true; // the store may want memory warmed ahead of use (kvt_sched_warm): looked at whenever idle
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->inbox && !e->cancel_pending && !e->stopping && !e->fetch_ready && kvt_sched_idle(e->s)) {
            if (warm) { // one chunk at a time, the conditions looked at again between them
                pthread_mutex_unlock(&e->mu);
                warm = kvt_sched_warm(e->s);
                pthread_mutex_lock(&e->mu);
                store_stats(e);
                continue;
            }
            const double d = fetch_deadline(e);
            if (d == 0) {
                pthread_cond_wait(&e->cv, &e->mu);
                continue;
            }
            const double left = d - kvt_time_ms();
            if (left <= 0) break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            const int64_t ns = ts.tv_nsec + (int64_t)(left * 1e6) + 1000000;
            ts.tv_sec += (time_t)(ns / 1000000000);
            ts.tv_nsec = (long)(ns % 1000000000);
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        }
        const bool quit = e->stopping && !e->inbox && !e->fetching && kvt_sched_idle(e->s);
        pthread_mutex_unlock(&e->mu);
        if (quit) return NULL;
        take_inbox(e);
        const double t0 = kvt_time_ms();
        kvt_sched_stats before, after;
        kvt_sched_stats_get(e->s, &before);
        int64_t rows = 0;
        kvt_err err = {0};
        kvt_sched_step(e->s, &rows, &err); // a failed pass ends its requests with FAILED; the others go on
        warm = true;
        kvt_sched_stats_get(e->s, &after);
        const double dt = (kvt_time_ms() - t0) / 1e3;
        const int64_t pre = after.prefill_rows - before.prefill_rows, dec = after.decode_rows - before.decode_rows;
        pthread_mutex_lock(&e->mu);
        if (pre + dec > 0) {
            e->st.prompt_seconds += dt * (double)pre / (double)(pre + dec);
            e->st.decode_seconds += dt * (double)dec / (double)(pre + dec);
        }
        e->sched_waiting = after.waiting;
        e->st.running = after.running;
        e->st.iterations = after.iterations;
        e->st.preemptions = after.preemptions;
        e->st.resumes = after.resumes;
        e->st.restarts = after.restarts;
        e->st.preempted = after.preempted;
        e->st.plans = after.plans;
        e->st.prefix_attach_seconds = after.attach_ms / 1e3;
        e->st.query_hits = after.query_hits;
        e->st.query_tokens = after.query_tokens;
        e->st.query_windows = after.query_windows;
        e->st.query_bytes = after.query_bytes;
        e->st.key_hits = after.key_hits, e->st.key_tokens = after.key_tokens;
        e->st.key_sums = after.key_sums, e->st.key_bytes = after.key_bytes, e->st.key_live = after.key_live;
        store_stats(e);
        pthread_mutex_unlock(&e->mu);
    }
}

static kvt_status s_submit(kvt_engine *base, const kvt_engine_job *job, const kvt_engine_callbacks *cb, uint64_t *id,
                           kvt_err *err) {
    sengine *e = (sengine *)base;
    int32_t *prompt = NULL;
    kvt_status ast = kvt_engine_job_accept(job, kvt_context_n_ctx(e->ctx), &prompt, err);
    if (ast) return ast;
    sjob *j = calloc(1, sizeof *j);
    if (!j) {
        free(prompt);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a job");
    }
    j->e = e;
    j->p = *job;
    j->p.prompt = j->prompt = prompt;
    j->p.sampling.report = NULL;
    if (job->post_sampling && job->logprobs) {
        j->report.k = job->top_logprobs;
        j->p.sampling.report = &j->report;
    }
    j->cb = *cb;
    pthread_mutex_lock(&e->mu);
    kvt_status st = kvt_engine_job_admit(e->stopping, e->n_inbox + e->n_fetching + e->sched_waiting, e->max_queue, err);
    if (st) {
        e->st.jobs_rejected++;
        pthread_mutex_unlock(&e->mu);
        free(prompt);
        free(j);
        return st;
    }
    j->id = *id = ++e->next_id;
    if (e->inbox_tail) e->inbox_tail->next = j;
    else e->inbox = j;
    e->inbox_tail = j;
    e->n_inbox++;
    e->st.jobs_submitted++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return KVT_OK;
}

static void s_cancel(kvt_engine *base, uint64_t id) {
    sengine *e = (sengine *)base;
    pthread_mutex_lock(&e->mu);
    for (sjob *j = e->inbox; j; j = j->next) j->cancelled = j->cancelled || j->id == id;
    if (e->transit && e->transit->id == id) e->transit->cancelled = true; // job_enter or take_fetched ends it
    for (sjob *j = e->fetching; j; j = j->next) {
        if (j->id == id) j->cancelled = e->fetch_ready = true; // the scheduler thread ends it
    }
    for (sjob *j = e->jobs; j; j = j->next) {
        if (j->id == id) j->cancelled = e->cancel_pending = true;
    }
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void s_stats(kvt_engine *base, kvt_engine_stats *out) {
    sengine *e = (sengine *)base;
    pthread_mutex_lock(&e->mu);
    *out = e->st;
    out->queued = e->n_inbox + e->n_fetching + e->sched_waiting;
    pthread_mutex_unlock(&e->mu);
    if (e->fetch) {
        kvt_prefix_fetch_stats fs;
        kvt_prefix_fetch_stats_get(e->fetch, &fs);
        out->prefix_staged_blocks = fs.staged_blocks;
        out->prefix_staged_bytes = fs.staged_bytes;
        out->prefix_staged_blocks_total = fs.blocks;
        out->prefix_staged_bytes_total = fs.bytes;
        out->prefix_fetch_budget_stops = fs.budget_stops;
    }
    if (e->pstore) { // each store's counters are its own (thread-safe)
        kvt_prefix_store *lv[KVT_ENGINE_PREFIX_LEVELS];
        out->n_prefix = kvt_prefix_store_levels(e->pstore, lv, KVT_ENGINE_PREFIX_LEVELS);
        for (int32_t i = 0; i < out->n_prefix; i++) {
            out->prefix_store[i] = lv[i]->ops->name;
            kvt_prefix_store_stats_get(lv[i], &out->prefix[i]);
        }
    }
}

static int64_t s_n_ctx(const kvt_engine *base) { return kvt_context_n_ctx(((const sengine *)base)->ctx); }

static void s_shutdown(kvt_engine *base, bool cancel_running) {
    sengine *e = (sengine *)base;
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    if (cancel_running) {
        for (sjob *j = e->inbox; j; j = j->next) j->cancelled = true;
        for (sjob *j = e->fetching; j; j = j->next) j->cancelled = e->fetch_ready = true;
        for (sjob *j = e->jobs; j; j = j->next) j->cancelled = e->cancel_pending = true;
    }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void s_free(kvt_engine *base) {
    sengine *e = (sengine *)base;
    if (e->thread_started) {
        s_shutdown(base, true);
        pthread_join(e->thread, NULL); // the thread ends every job (on_done CANCELLED) before it returns
    }
    kvt_sched_free(e->s);
    kvt_prefix_fetch_free(e->fetch); // after every job released its fetch
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    kvt_context_free(e->ctx);
    free(e->lp);
    free(e);
}

static const kvt_engine_ops k_sched_ops = {"sched", s_submit, s_cancel, s_stats, s_n_ctx, s_shutdown, s_free};

kvt_status kvt_engine_sched_create(kvt_context *ctx, const kvt_tokenizer *tok, const kvt_sched_params *sp,
                                   int32_t max_queue, kvt_engine **out, kvt_err *err) {
    *out = NULL;
    sengine *e = calloc(1, sizeof *e);
    float *lp = malloc((size_t)kvt_context_model(ctx)->hp.n_vocab * sizeof *lp);
    if (!e || !lp) {
        free(e);
        free(lp);
        kvt_context_free(ctx);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the engine");
    }
    e->base.ops = &k_sched_ops;
    e->ctx = ctx;
    e->tok = tok;
    e->lp = lp;
    e->max_queue = max_queue > 0 ? max_queue : 1;
    e->pstore = sp->prefix_store;
    e->st.n_ctx = kvt_context_n_ctx(ctx);
    e->st.n_parallel = sp->n_parallel;
    e->st.kv_store = kvt_context_kv(ctx)->ops->name;
    kvt_context_kv_stats(ctx, &e->st.kv);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    kvt_sched_callbacks cb = {on_token, on_finish, on_done};
    kvt_status st = kvt_sched_init(ctx, tok, sp, &cb, &e->s, err);
    if (st) {
        s_free(&e->base);
        return st;
    }
    e->block_tokens = kvt_context_kv(ctx)->block_tokens;
    e->fetch_wait_ms = sp->prefix_fetch_wait_ms > 0 ? sp->prefix_fetch_wait_ms : 0;
    if (sp->prefix_cache && sp->prefix_store && sp->prefix_fetch_bytes > 0) {
        kvt_prefix_fetch_params fp = {sp->prefix_fetch_bytes, fetch_ready, e};
        if ((st = kvt_prefix_fetch_init(sp->prefix_store, e->block_tokens, &fp, &e->fetch, err))) {
            s_free(&e->base);
            return st;
        }
    }
    if (pthread_create(&e->thread, NULL, sched_main, e) != 0) {
        s_free(&e->base);
        return kvt_errorf(err, KVT_ERR_NOMEM, "cannot start the engine's scheduler thread");
    }
    e->thread_started = true;
    *out = &e->base;
    return KVT_OK;
}
