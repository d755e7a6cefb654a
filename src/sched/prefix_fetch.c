// prefix_fetch.c - background reads of prefix blocks from the second-level store (prefix_fetch.h).
//
// Jobs wait in a FIFO; the thread takes the first, reserves budget for up to 8 blocks, reads them with the
// mutex released (get_many into fresh buffers), keeps the hits up to the first miss and gives the rest of the
// reservation back, until the job's last block, a miss, the budget or an abandon ends it.
#include "prefix_fetch.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 8 }; // blocks asked for at once (the Redis store pipelines them)

struct kvt_prefix_fetch_job {
    struct kvt_prefix_fetch_job *next; // queue
    int64_t b0, nb;
    kvt_block_key *keys;  // [nb - b0]
    void **payloads;      // [nb - b0] staged copies, the first n set
    int64_t n;
    bool queued, running, done, last, abandoned;
};

struct kvt_prefix_fetch {
    kvt_prefix_store *store;
    int64_t block_tokens, pb; // positions per block, payload bytes
    kvt_prefix_fetch_params p;
    pthread_mutex_t mu;
    pthread_cond_t cv;        // the queue has a job, or stop
    kvt_prefix_fetch_job *head, *tail;
    bool stop;
    pthread_t thread;
    kvt_prefix_fetch_stats st;
};

static void job_free(kvt_prefix_fetch *f, kvt_prefix_fetch_job *j) { // mu held; returns the job's staged bytes
    for (int64_t i = 0; i < j->n; i++) free(j->payloads[i]);
    f->st.staged_blocks -= j->n;
    f->st.staged_bytes -= j->n * f->pb;
    free(j->keys);
    free(j->payloads);
    free(j);
}

// Looks up the blocks of j from j->n on; mu held on entry and exit, released around the store's reads.
static void run_job(kvt_prefix_fetch *f, kvt_prefix_fetch_job *j) {
    const int64_t total = j->nb - j->b0;
    while (j->n < total && !j->abandoned && !f->stop) {
        int64_t want = total - j->n < BATCH ? total - j->n : BATCH;
        const int64_t room = (f->p.budget_bytes - f->st.staged_bytes) / f->pb;
        if (room < want) want = room;
        if (want <= 0) {
            f->st.budget_stops++;
            return;
        }
        f->st.staged_bytes += want * f->pb; // reserved while the reads are under way
        pthread_mutex_unlock(&f->mu);
        void *dsts[BATCH];
        bool hits[BATCH];
        int got = 0;
        while (got < want && (dsts[got] = malloc((size_t)f->pb))) got++;
        if (got > 0) kvt_prefix_store_get_many(f->store, j->keys + j->n, got, dsts, hits);
        int k = 0;
        while (k < got && hits[k]) k++;
        for (int i = k; i < got; i++) free(dsts[i]);
        pthread_mutex_lock(&f->mu);
        f->st.staged_bytes -= (want - k) * f->pb;
        for (int i = 0; i < k; i++) j->payloads[j->n++] = dsts[i];
        f->st.staged_blocks += k;
        f->st.blocks += k;
        f->st.bytes += k * f->pb;
        if (k < want) { // a miss (or out of memory: a miss too)
            j->last = k < got;
            return;
        }
    }
}

static void *fetch_main(void *arg) {
    kvt_prefix_fetch *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->stop && !f->head) pthread_cond_wait(&f->cv, &f->mu);
        if (f->stop) break;
        kvt_prefix_fetch_job *j = f->head;
        f->head = j->next;
        if (!f->head) f->tail = NULL;
        j->queued = false;
        j->running = true;
        run_job(f, j);
        j->running = false;
        j->done = true;
        if (j->abandoned) {
            job_free(f, j);
            continue;
        }
        if (f->p.on_ready) {
            pthread_mutex_unlock(&f->mu);
            f->p.on_ready(f->p.user);
            pthread_mutex_lock(&f->mu);
        }
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

kvt_status kvt_prefix_fetch_init(kvt_prefix_store *store, int64_t block_tokens, const kvt_prefix_fetch_params *p,
                                 kvt_prefix_fetch **out, kvt_err *err) {
    *out = NULL;
    if (!store || block_tokens <= 0 || !p || p->budget_bytes <= 0) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "prefix fetch: a store, a block size and a staging budget > 0 are needed");
    }
    kvt_prefix_fetch *f = calloc(1, sizeof *f);
    if (!f) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the prefix fetch");
    f->store = store;
    f->block_tokens = block_tokens;
    f->pb = store->payload_bytes > 0 ? store->payload_bytes : 1;
    f->p = *p;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if (pthread_create(&f->thread, NULL, fetch_main, f) != 0) {
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
        free(f);
        return kvt_errorf(err, KVT_ERR_NOMEM, "cannot start the prefix fetch thread");
    }
    *out = f;
    return KVT_OK;
}

void kvt_prefix_fetch_free(kvt_prefix_fetch *f) {
    if (!f) return;
    pthread_mutex_lock(&f->mu);
    f->stop = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    // jobs still queued are the callers' (not released): free them too, callers must not use them after this
    while (f->head) {
        kvt_prefix_fetch_job *j = f->head;
        f->head = j->next;
        job_free(f, j);
    }
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}

kvt_prefix_fetch_job *kvt_prefix_fetch_start(kvt_prefix_fetch *f, const int32_t *tokens, int64_t b0, int64_t nb) {
    if (!f || b0 < 0 || b0 >= nb) return NULL;
    kvt_prefix_fetch_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->b0 = b0;
    j->nb = nb;
    j->keys = malloc((size_t)(nb - b0) * sizeof *j->keys);
    j->payloads = calloc((size_t)(nb - b0), sizeof *j->payloads);
    if (!j->keys || !j->payloads) {
        free(j->keys);
        free(j->payloads);
        free(j);
        return NULL;
    }
    kvt_block_key k = {0, 0};
    for (int64_t b = 0; b < nb; b++) { // the chain from block 0
        k = kvt_prefix_key_next(b ? &k : NULL, tokens + b * f->block_tokens, f->block_tokens);
        if (b >= b0) j->keys[b - b0] = k;
    }
    pthread_mutex_lock(&f->mu);
    j->queued = true;
    if (f->tail) f->tail->next = j;
    else f->head = j;
    f->tail = j;
    f->st.jobs++;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return j;
}

bool kvt_prefix_fetch_done(kvt_prefix_fetch *f, const kvt_prefix_fetch_job *j) {
    pthread_mutex_lock(&f->mu);
    const bool d = j->done;
    pthread_mutex_unlock(&f->mu);
    return d;
}

void kvt_prefix_fetch_result(kvt_prefix_fetch *f, const kvt_prefix_fetch_job *j, kvt_prefix_staged *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&f->mu);
    out->b0 = j->b0;
    out->n = j->done ? j->n : 0;
    out->keys = j->keys;
    out->payloads = j->payloads;
    out->last = j->done && j->last;
    pthread_mutex_unlock(&f->mu);
}

void kvt_prefix_fetch_release(kvt_prefix_fetch *f, kvt_prefix_fetch_job *j) {
    if (!f || !j) return;
    pthread_mutex_lock(&f->mu);
    if (j->running) { // the thread frees it when its read returns
        j->abandoned = true;
        f->st.abandoned++;
    } else {
        if (j->queued) {
            kvt_prefix_fetch_job **pp = &f->head, *prev = NULL;
            while (*pp && *pp != j) prev = *pp, pp = &(*pp)->next;
            if (*pp) *pp = j->next;
            if (f->tail == j) f->tail = prev;
            f->st.abandoned++;
        }
        job_free(f, j);
    }
    pthread_mutex_unlock(&f->mu);
}

void kvt_prefix_fetch_stats_get(kvt_prefix_fetch *f, kvt_prefix_fetch_stats *out) {
    pthread_mutex_lock(&f->mu);
    *out = f->st;
    pthread_mutex_unlock(&f->mu);
}
