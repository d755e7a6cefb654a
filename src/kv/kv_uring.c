// kv_uring.c - io_uring disk I/O for the KV disk tier (see kv_uring.h).
#include "kv_uring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef KVT_HAVE_LIBURING
#include <liburing.h>
#include <pthread.h>

// A request of one thread: filled by the reaper when its completion arrives.
typedef kvt_uring_req ureq;

struct kvt_uring {
    struct io_uring ring;
    int fd;
    pthread_mutex_t mu; // guards the submission queue, the done flags and `reaping`
    pthread_cond_t cv;  // a request completed, or the reaper role became free
    bool reaping;       // a thread waits in io_uring_wait_cqe (the completion side has one user at a time)
};

bool kvt_uring_compiled(void) { return true; }

kvt_uring *kvt_uring_open(int fd, unsigned entries, const char **why) {
    const char *no = getenv("KVT_NO_URING");
    if (no && *no && strcmp(no, "0") != 0) {
        *why = "KVT_NO_URING set";
        return NULL;
    }
    kvt_uring *u = calloc(1, sizeof *u);
    if (!u) {
        *why = "out of memory";
        return NULL;
    }
    int r = io_uring_queue_init(entries, &u->ring, 0);
    if (r < 0) { // kernel without io_uring, or forbidden (seccomp, io_uring_disabled)
        free(u);
        *why = "io_uring_queue_init failed";
        return NULL;
    }
    u->fd = fd;
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    *why = "";
    return u;
}

void kvt_uring_close(kvt_uring *u) {
    if (!u) return;
    io_uring_queue_exit(&u->ring);
    pthread_cond_destroy(&u->cv);
    pthread_mutex_destroy(&u->mu);
    free(u);
}

// Hands every available completion to its request. Called by the reaper with mu held.
static void reap_ready(kvt_uring *u) {
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe(&u->ring, &cqe) == 0) {
        ureq *q = io_uring_cqe_get_data(cqe);
        if (q) {
            q->res = cqe->res;
            q->done = true;
        }
        io_uring_cqe_seen(&u->ring, cqe);
    }
}

// Whether every request of q[0 .. n) has completed (mu held).
static bool all_done(const ureq *q, int n) {
    for (int i = 0; i < n; i++) {
        if (!q[i].done) return false;
    }
    return true;
}

void kvt_uring_rw_start(kvt_uring *u, bool write, int n, void *const *buf, const size_t *len, const off_t *off,
                        kvt_uring_pending *p) {
    struct io_uring_sqe *sq[KVT_URING_MANY_MAX];
    const int m = n < KVT_URING_MANY_MAX ? n : KVT_URING_MANY_MAX;
    p->n = m, p->write = write;
    for (int i = 0; i < m; i++) p->buf[i] = buf[i], p->len[i] = len[i], p->off[i] = off[i];
    ureq *q = p->q;
    int k = 0; // requests in the ring: q[0 .. k); the rest synchronously
    pthread_mutex_lock(&u->mu);
    for (; k < m; k++) {
        struct io_uring_sqe *sqe = sq[k] = io_uring_get_sqe(&u->ring);
        if (!sqe) break; // more requests in flight than ring entries
        if (write) io_uring_prep_write(sqe, u->fd, buf[k], (unsigned)len[k], (__u64)off[k]);
        else io_uring_prep_read(sqe, u->fd, buf[k], (unsigned)len[k], (__u64)off[k]);
        q[k] = (ureq){false, 0};
        io_uring_sqe_set_data(sqe, &q[k]);
    }
    // the kernel takes entries in the order they were prepared; those it has not taken are the ring's last
    // io_uring_sq_ready() entries, ours (entries left from an earlier failure come before them)
    int sub = 0;
    for (int tries = 0; k > 0 && tries < 4; tries++) {
        const int r = io_uring_submit(&u->ring);
        const unsigned left = io_uring_sq_ready(&u->ring);
        sub = left >= (unsigned)k ? 0 : k - (int)left;
        if (r < 0 || sub == k) break;
    }
    if (sub < k) {
        // not submitted: each entry left becomes a no-op that no one waits for (it goes with the next
        // submission) and its request is done synchronously
        for (int j = sub; j < k; j++) {
            io_uring_prep_nop(sq[j]);
            io_uring_sqe_set_data(sq[j], NULL);
        }
        k = sub;
    }
    p->k = k;
    pthread_mutex_unlock(&u->mu);
}

void kvt_uring_rw_finish(kvt_uring *u, kvt_uring_pending *p, ssize_t *res) {
    const ureq *q = p->q;
    const int k = p->k;
    pthread_mutex_lock(&u->mu);
    while (!all_done(q, k)) { // one thread reaps for all (u->reaping); the others wait for it on cv
        if (u->reaping) {
            pthread_cond_wait(&u->cv, &u->mu);
            continue;
        }
        u->reaping = true;
        reap_ready(u);
        if (!all_done(q, k)) {
            struct io_uring_cqe *cqe;
            pthread_mutex_unlock(&u->mu);
            // waits on the completion side only (submits nothing); an error (EINTR) is retried: the requests
            // are in the kernel's hands and q must outlive them
            (void)io_uring_wait_cqe(&u->ring, &cqe);
            pthread_mutex_lock(&u->mu);
            reap_ready(u);
        }
        u->reaping = false;
        pthread_cond_broadcast(&u->cv);
    }
    pthread_mutex_unlock(&u->mu);
    for (int j = 0; j < p->n; j++) {
        if (j < k) res[j] = q[j].res;
        else {
            const ssize_t r = p->write ? pwrite(u->fd, p->buf[j], p->len[j], p->off[j])
                                       : pread(u->fd, p->buf[j], p->len[j], p->off[j]);
            res[j] = r < 0 ? -(ssize_t)errno : r;
        }
    }
}

void kvt_uring_rw_many(kvt_uring *u, bool write, int n, void *const *buf, const size_t *len, const off_t *off, ssize_t *res) {
    kvt_uring_pending p;
    for (int i0 = 0; i0 < n; i0 += KVT_URING_MANY_MAX) { // in pieces of at most KVT_URING_MANY_MAX
        kvt_uring_rw_start(u, write, n - i0, buf + i0, len + i0, off + i0, &p);
        kvt_uring_rw_finish(u, &p, res + i0);
    }
}

ssize_t kvt_uring_rw(kvt_uring *u, bool write, void *buf, size_t n, off_t off) {
    ssize_t r;
    kvt_uring_rw_many(u, write, 1, &buf, &n, &off, &r);
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

#else // no liburing at build time

struct kvt_uring {
    int unused;
};

bool kvt_uring_compiled(void) { return false; }

kvt_uring *kvt_uring_open(int fd, unsigned entries, const char **why) {
    (void)fd;
    (void)entries;
    *why = "built without liburing";
    return NULL;
}

void kvt_uring_close(kvt_uring *u) { (void)u; }

ssize_t kvt_uring_rw(kvt_uring *u, bool write, void *buf, size_t n, off_t off) {
    (void)u, (void)write, (void)buf, (void)n, (void)off;
    errno = ENOSYS;
    return -1;
}

void kvt_uring_rw_many(kvt_uring *u, bool write, int n, void *const *buf, const size_t *len, const off_t *off, ssize_t *res) {
    (void)u, (void)write, (void)buf, (void)len, (void)off;
    for (int i = 0; i < n; i++) res[i] = -ENOSYS;
}

void kvt_uring_rw_start(kvt_uring *u, bool write, int n, void *const *buf, const size_t *len, const off_t *off,
                        kvt_uring_pending *p) {
    (void)u, (void)write, (void)buf, (void)len, (void)off;
    p->n = n < KVT_URING_MANY_MAX ? n : KVT_URING_MANY_MAX;
    p->k = 0;
}

void kvt_uring_rw_finish(kvt_uring *u, kvt_uring_pending *p, ssize_t *res) {
    (void)u;
    for (int i = 0; i < p->n; i++) res[i] = -ENOSYS;
}

#endif
