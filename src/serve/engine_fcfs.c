// engine_fcfs.c - the first kvt_engine: one context, one job at a time, first come first served.
//
// A worker thread pops jobs in arrival order and runs each choice with kvt_generate_cached on the one
// context. The KV of the last prompt stays in the context; the next job reuses the prefix its prompt
// shares with it (only prompt positions: the KV of generated tokens, decoded one at a time, may differ
// in the last bits from a batched prefill, so reusing it would not be exact).
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../base/timer.h"
#include "../sched/generate.h"
#include "engine.h"

typedef struct fcfs_job {
    struct fcfs_job *next;
    uint64_t id;
    atomic_bool cancelled;
    kvt_engine_job p;
    int32_t *prompt;  // owned copy of p.prompt
    kvt_engine_callbacks cb;
    kvt_sampler_report report; // p.post_sampling: what the draw kept (p.sampling.report points here)
} fcfs_job;

typedef struct {
    kvt_engine base;
    kvt_context *ctx;
    const kvt_tokenizer *tok;
    int64_t n_ubatch;
    int32_t max_queue;
    pthread_t worker;
    bool worker_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    fcfs_job *head, *tail;  // queued jobs
    fcfs_job *running;
    int32_t n_queued;
    bool stopping;
    uint64_t next_id;
    kvt_engine_stats st;    // counters (queued/running filled at read time)
    int32_t *prev;          // prompt whose KV the context holds (positions [0, n_prev))
    int64_t n_prev;
    float *lp;              // [n_vocab] scratch for log-probabilities
} fcfs;

// State of one choice while kvt_generate_cached runs it.
typedef struct {
    fcfs *e;
    fcfs_job *j;
    int32_t index;
    bool user_stop;   // on_token returned false
} fcfs_run;

void kvt_engine_token_logprobs(const float *logits, int32_t n_vocab, int32_t k, float *lp, kvt_engine_token *t) {
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)(logits[i] - mx));
    const float lse = mx + (float)log(sum);
    for (int32_t i = 0; i < n_vocab; i++) lp[i] = logits[i] - lse;
    t->logprob = lp[t->id];
    t->n_top = 0;
    for (int32_t i = 0; i < n_vocab && k > 0; i++) { // insertion into the sorted top list (k <= 20)
        float v = lp[i];
        if (t->n_top == k && v <= t->top_logprobs[k - 1]) continue;
        int32_t pos = t->n_top < k ? t->n_top++ : k - 1;
        while (pos > 0 && t->top_logprobs[pos - 1] < v) {
            t->top_logprobs[pos] = t->top_logprobs[pos - 1];
            t->top_ids[pos] = t->top_ids[pos - 1];
            pos--;
        }
        t->top_logprobs[pos] = v;
        t->top_ids[pos] = i;
    }
}

static bool on_token(void *user, int32_t id) {
    fcfs_run *r = user;
    if (atomic_load(&r->j->cancelled)) return false;
    kvt_engine_token t;
    memset(&t, 0, sizeof t);
    t.id = id;
    t.eog = r->e->tok && kvt_token_is_eog(r->e->tok, id);
    if (r->j->p.logprobs && r->j->p.sampling.report) kvt_engine_token_report(r->j->p.sampling.report, &t);
    else if (r->j->p.logprobs) {
        kvt_engine_token_logprobs(kvt_context_logits(r->e->ctx), kvt_context_model(r->e->ctx)->hp.n_vocab,
                                  r->j->p.top_logprobs, r->e->lp, &t);
    }
    if (!r->j->cb.on_token(r->j->cb.user, r->index, &t)) {
        r->user_stop = true;
        return false;
    }
    return true;
}

static int64_t common_prefix(const int32_t *a, int64_t na, const int32_t *b, int64_t nb) {
    int64_t n = 0;
    while (n < na && n < nb && a[n] == b[n]) n++;
    return n;
}

// Runs every choice of j; fills *res.
static void run_job(fcfs *e, fcfs_job *j, kvt_engine_result *res) {
    const int64_t n_ctx = kvt_context_n_ctx(e->ctx);
    const int64_t n_prompt = j->p.n_prompt;
    int64_t max_tokens = n_ctx - n_prompt;
    if (j->p.max_tokens >= 0 && j->p.max_tokens < max_tokens) max_tokens = j->p.max_tokens;
    int32_t *out = malloc((size_t)(max_tokens + 1) * sizeof *out);
    if (!out) {
        res->outcome = KVT_ENGINE_FAILED;
        kvt_errorf(&res->err, KVT_ERR_NOMEM, "out of memory for %lld generated ids", (long long)max_tokens);
        return;
    }
    res->prompt_tokens = n_prompt;
    for (int32_t i = 0; i < j->p.n && res->outcome == KVT_ENGINE_DONE; i++) {
        if (atomic_load(&j->cancelled)) {
            res->outcome = KVT_ENGINE_CANCELLED;
            break;
        }
        int64_t n_cached = common_prefix(e->prev, e->n_prev, j->prompt, n_prompt);
        const int64_t lim = kvt_context_prompt_cacheable(e->ctx, n_prompt); // all but 1, or asyncspade's query window
        if (n_cached > lim) n_cached = lim;
        if (n_cached > kvt_context_n_past(e->ctx)) n_cached = kvt_context_n_past(e->ctx);
        kvt_context_truncate(e->ctx, n_cached);
        if (i == 0) res->cached_tokens = n_cached;
        kvt_generate_params gp = kvt_generate_params_default();
        gp.n_predict = max_tokens;
        gp.sampling = j->p.sampling;
        gp.sampling.seed = j->p.sampling.seed + (uint64_t)i;
        gp.stop_at_eog = !j->p.ignore_eos;
        fcfs_run r = {e, j, i, false};
        kvt_generate_stats gs;
        kvt_status st = kvt_generate_cached(e->ctx, e->tok, j->prompt, n_prompt, n_cached, e->n_ubatch, &gp, out, NULL,
                                            on_token, &r, &gs, &res->err);
        // the context now holds this prompt (and generated tokens past it, never reused)
        free(e->prev);
        e->prev = NULL;
        e->n_prev = 0;
        if (st) {
            kvt_context_truncate(e->ctx, 0);
            res->outcome = KVT_ENGINE_FAILED;
            break;
        }
        if ((e->prev = malloc((size_t)n_prompt * sizeof *e->prev))) {
            memcpy(e->prev, j->prompt, (size_t)n_prompt * sizeof *e->prev);
            e->n_prev = n_prompt;
        }
        res->completion_tokens += gs.n_gen;
        res->sparse = kvt_context_sparse_selects(e->ctx);
        kvt_sparse_seq_totals_add(kvt_context_sparse(e->ctx), 0, n_prompt, &res->sparse_steps);
        pthread_mutex_lock(&e->mu);
        e->st.prompt_tokens += n_prompt - n_cached;
        e->st.cached_tokens += n_cached;
        e->st.generated_tokens += gs.n_gen;
        e->st.prompt_seconds += gs.prefill_ms / 1e3;
        e->st.decode_seconds += gs.decode_ms / 1e3;
        pthread_mutex_unlock(&e->mu);
        if (atomic_load(&j->cancelled) && !r.user_stop && !gs.hit_eog) {
            res->outcome = KVT_ENGINE_CANCELLED;
            break;
        }
        j->cb.on_finish(j->cb.user, i, gs.hit_eog || r.user_stop ? KVT_FINISH_STOP : KVT_FINISH_LENGTH);
    }
    free(out);
}

static void *worker_main(void *arg) {
    fcfs *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->head && !e->stopping) pthread_cond_wait(&e->cv, &e->mu);
        fcfs_job *j = e->head;
        if (!j) { // stopping and nothing queued
            pthread_mutex_unlock(&e->mu);
            return NULL;
        }
        e->head = j->next;
        if (!e->head) e->tail = NULL;
        e->n_queued--;
        e->running = j;
        pthread_mutex_unlock(&e->mu);

        kvt_engine_result res;
        memset(&res, 0, sizeof res);
        res.outcome = atomic_load(&j->cancelled) ? KVT_ENGINE_CANCELLED : KVT_ENGINE_DONE;
        if (res.outcome == KVT_ENGINE_DONE) run_job(e, j, &res);

        pthread_mutex_lock(&e->mu);
        e->running = NULL;
        if (res.outcome == KVT_ENGINE_DONE) e->st.jobs_done++;
        else if (res.outcome == KVT_ENGINE_CANCELLED) e->st.jobs_cancelled++;
        else e->st.jobs_failed++;
        kvt_context_kv_stats(e->ctx, &e->st.kv);
        if (kvt_context_sparse(e->ctx)) kvt_sparse_totals_get(kvt_context_sparse(e->ctx), &e->st.sparse);
        pthread_mutex_unlock(&e->mu);
        j->cb.on_done(j->cb.user, &res);
        free(j->prompt);
        free(j);
    }
}

static kvt_status fcfs_submit(kvt_engine *base, const kvt_engine_job *job, const kvt_engine_callbacks *cb, uint64_t *id,
                              kvt_err *err) {
    fcfs *e = (fcfs *)base;
    int32_t *prompt = NULL;
    kvt_status ast = kvt_engine_job_accept(job, kvt_context_n_ctx(e->ctx), &prompt, err);
    if (ast) return ast;
    fcfs_job *j = calloc(1, sizeof *j);
    if (!j) {
        free(prompt);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a job");
    }
    j->p = *job;
    j->p.prompt = j->prompt = prompt;
    j->p.sampling.report = NULL;
    if (job->post_sampling && job->logprobs) {
        j->report.k = job->top_logprobs;
        j->p.sampling.report = &j->report;
    }
    j->cb = *cb;
    atomic_init(&j->cancelled, false);
    pthread_mutex_lock(&e->mu);
    kvt_status st = kvt_engine_job_admit(e->stopping, e->n_queued, e->max_queue, err);
    if (st) {
        e->st.jobs_rejected++;
        pthread_mutex_unlock(&e->mu);
        free(prompt);
        free(j);
        return st;
    }
    j->id = ++e->next_id;
    *id = j->id;
    if (e->tail) e->tail->next = j;
    else e->head = j;
    e->tail = j;
    e->n_queued++;
    e->st.jobs_submitted++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return KVT_OK;
}

static void fcfs_cancel(kvt_engine *base, uint64_t id) {
    fcfs *e = (fcfs *)base;
    pthread_mutex_lock(&e->mu);
    if (e->running && e->running->id == id) atomic_store(&e->running->cancelled, true);
    for (fcfs_job *j = e->head; j; j = j->next) {
        if (j->id == id) atomic_store(&j->cancelled, true);
    }
    pthread_mutex_unlock(&e->mu);
}

static void fcfs_stats(kvt_engine *base, kvt_engine_stats *out) {
    fcfs *e = (fcfs *)base;
    pthread_mutex_lock(&e->mu);
    *out = e->st;
    out->queued = e->n_queued;
    out->running = e->running ? 1 : 0;
    pthread_mutex_unlock(&e->mu);
}

static int64_t fcfs_n_ctx(const kvt_engine *base) { return kvt_context_n_ctx(((const fcfs *)base)->ctx); }

static void fcfs_shutdown(kvt_engine *base, bool cancel_running) {
    fcfs *e = (fcfs *)base;
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    if (cancel_running) {
        if (e->running) atomic_store(&e->running->cancelled, true);
        for (fcfs_job *j = e->head; j; j = j->next) atomic_store(&j->cancelled, true);
    }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void fcfs_free(kvt_engine *base) {
    fcfs *e = (fcfs *)base;
    if (e->worker_started) {
        fcfs_shutdown(base, true);
        pthread_join(e->worker, NULL); // the worker drains the queue (on_done CANCELLED) before it returns
    }
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    kvt_context_free(e->ctx);
    free(e->prev);
    free(e->lp);
    free(e);
}

static const kvt_engine_ops k_fcfs_ops = {"fcfs", fcfs_submit, fcfs_cancel, fcfs_stats, fcfs_n_ctx, fcfs_shutdown, fcfs_free};

kvt_status kvt_engine_fcfs_create(kvt_context *ctx, const kvt_tokenizer *tok, int64_t n_ubatch, int32_t max_queue,
                                  kvt_engine **out, kvt_err *err) {
    *out = NULL;
    fcfs *e = calloc(1, sizeof *e);
    float *lp = malloc((size_t)kvt_context_model(ctx)->hp.n_vocab * sizeof *lp);
    if (!e || !lp) {
        free(e);
        free(lp);
        kvt_context_free(ctx);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the engine");
    }
    e->base.ops = &k_fcfs_ops;
    e->ctx = ctx;
    e->tok = tok;
    e->lp = lp;
    e->n_ubatch = n_ubatch;
    e->max_queue = max_queue > 0 ? max_queue : 1;
    e->st.n_ctx = kvt_context_n_ctx(ctx);
    e->st.n_parallel = 1;
    e->st.kv_store = kvt_context_kv(ctx)->ops->name;
    kvt_context_kv_stats(ctx, &e->st.kv);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (pthread_create(&e->worker, NULL, worker_main, e) != 0) {
        fcfs_free(&e->base);
        return kvt_errorf(err, KVT_ERR_NOMEM, "cannot start the engine's worker thread");
    }
    e->worker_started = true;
    *out = &e->base;
    return KVT_OK;
}
