// gpu_kv_disk.c - the device KV's disk thread (gpu_kv_disk.h).
#include "gpu_kv_disk.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    bool write, done, taken;
    int64_t slot;
    uint8_t *buf;
    uint32_t crc;
    char what[96];
    kvt_status st;
    kvt_err err;
} job;

struct kvt_disk_worker {
    kvt_tier_store *disk;
    int64_t delay_us;
    void *bounce;            // [disk->slot_bytes] 4096-aligned, the thread's own (O_DIRECT of unaligned slots)
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    job *jobs;               // tickets [base, base + n): jobs[ticket - base]
    int64_t base, n, cap, next; // next: the ticket the thread runs next
    bool stop;
};

static void *run(void *arg) {
    kvt_disk_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stop && w->next == w->base + w->n) pthread_cond_wait(&w->work, &w->mu);
        if (w->next == w->base + w->n) break; // stopping, nothing left
        const int64_t t = w->next;
        job j = w->jobs[t - w->base]; // (the array may move while the lock is not held)
        pthread_mutex_unlock(&w->mu);
        if (w->delay_us > 0) nanosleep(&(struct timespec){w->delay_us / 1000000, (w->delay_us % 1000000) * 1000}, NULL);
        j.err.msg[0] = 0;
        j.st = j.write ? kvt_tier_disk_write(w->disk, j.slot, j.buf, w->bounce, &j.crc, j.what, &j.err)
                       : kvt_tier_disk_read(w->disk, j.slot, j.buf, w->bounce, j.crc, j.what, &j.err);
        pthread_mutex_lock(&w->mu);
        job *r = &w->jobs[t - w->base];
        r->st = j.st, r->crc = j.crc, r->err = j.err, r->done = true;
        w->next = t + 1;
        pthread_cond_broadcast(&w->done);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

kvt_status kvt_disk_worker_start(kvt_disk_worker **out, kvt_tier_store *disk, int64_t delay_us, kvt_err *err) {
    *out = NULL;
    kvt_disk_worker *w = calloc(1, sizeof *w);
    if (!w) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    w->disk = disk, w->delay_us = delay_us;
    if (posix_memalign(&w->bounce, 4096, (size_t)disk->slot_bytes)) {
        free(w);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->work, NULL);
    pthread_cond_init(&w->done, NULL);
    if (pthread_create(&w->thread, NULL, run, w)) {
        pthread_mutex_destroy(&w->mu), pthread_cond_destroy(&w->work), pthread_cond_destroy(&w->done);
        free(w->bounce), free(w);
        return kvt_errorf(err, KVT_ERR_IO, "device KV: could not start the disk thread");
    }
    *out = w;
    return KVT_OK;
}

void kvt_disk_worker_stop(kvt_disk_worker *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu), pthread_cond_destroy(&w->work), pthread_cond_destroy(&w->done);
    free(w->jobs), free(w->bounce), free(w);
}

int64_t kvt_disk_worker_submit(kvt_disk_worker *w, bool write, int64_t slot, uint8_t *buf, uint32_t crc, const char *what) {
    pthread_mutex_lock(&w->mu);
    int64_t drop = 0; // the jobs at the front that are done and taken go
    while (drop < w->n && w->jobs[drop].taken) drop++;
    if (drop > 0) {
        memmove(w->jobs, w->jobs + drop, (size_t)(w->n - drop) * sizeof *w->jobs);
        w->base += drop, w->n -= drop;
    }
    if (w->n == w->cap) {
        const int64_t cap = w->cap ? 2 * w->cap : 64;
        job *j = realloc(w->jobs, (size_t)cap * sizeof *j);
        if (!j) {
            pthread_mutex_unlock(&w->mu);
            return -1;
        }
        w->jobs = j, w->cap = cap;
    }
    job *j = &w->jobs[w->n];
    *j = (job){.write = write, .slot = slot, .buf = buf, .crc = crc};
    snprintf(j->what, sizeof j->what, "%s", what);
    const int64_t t = w->base + w->n++;
    pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->mu);
    return t;
}

kvt_status kvt_disk_worker_wait(kvt_disk_worker *w, int64_t ticket, uint32_t *crc, kvt_err *err) {
    pthread_mutex_lock(&w->mu);
    if (ticket < w->base || ticket >= w->base + w->n || w->jobs[ticket - w->base].taken) {
        pthread_mutex_unlock(&w->mu);
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "device KV: disk job %lld is not pending", (long long)ticket);
    }
    while (!w->jobs[ticket - w->base].done) pthread_cond_wait(&w->done, &w->mu);
    job *j = &w->jobs[ticket - w->base];
    j->taken = true;
    const kvt_status st = j->st;
    if (st) kvt_errorf(err, st, "%s", j->err.msg);
    else if (crc) *crc = j->crc;
    pthread_mutex_unlock(&w->mu);
    return st;
}
