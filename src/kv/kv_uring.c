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
    int64_t stall_ms;   // a wait with no completion for this long cancels what is in flight (kvt_uring_set_stall_ms)
    int64_t stalls;     // such cancellations so far
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
    u->stall_ms = KVT_URING_STALL_MS;
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

bool kvt_uring_set_stall_ms(kvt_uring *u, int64_t ms) {
    pthread_mutex_lock(&u->mu);
    u->stall_ms = ms > 0 ? ms : KVT_URING_STALL_MS;
    pthread_mutex_unlock(&u->mu);
    return (u->ring.features & IORING_FEAT_EXT_ARG) != 0;
}

int64_t kvt_uring_stalls(kvt_uring *u) {
    pthread_mutex_lock(&u->mu);
    const int64_t n = u->stalls;
    pthread_mutex_unlock(&u->mu);
    return n;
}

// Waits for a completion (mu not held). Where the kernel takes a wait's timeout as an argument (IORING_FEAT_EXT_ARG:
// no entry of the submission queue, which other threads fill under mu), the wait ends after u->stall_ms with nothing
// completed: then, with mu held, every request in flight on the ring is cancelled (IORING_ASYNC_CANCEL_ANY); each
// completes with -ECANCELED (or -EINTR) and its owner does it again with pread/pwrite (kvt_uring_rw_finish). A request
// the kernel holds past that (a device that never answers) is still waited for: its buffer stays in the kernel's hands.
static void wait_or_cancel(kvt_uring *u, int64_t stall_ms) {
    struct io_uring_cqe *cqe;
    if (!(u->ring.features & IORING_FEAT_EXT_ARG)) {
        (void)io_uring_wait_cqe(&u->ring, &cqe); // an error (EINTR) is retried by the caller's loop
        return;
    }
    struct __kernel_timespec ts = {.tv_sec = stall_ms / 1000, .tv_nsec = (stall_ms % 1000) * 1000000};
    if (io_uring_wait_cqe_timeout(&u->ring, &cqe, &ts) != -ETIME) return;
    pthread_mutex_lock(&u->mu);
    if (!io_uring_cq_ready(&u->ring)) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
        if (sqe) {
            io_uring_prep_cancel(sqe, NULL, IORING_ASYNC_CANCEL_ANY);
            io_uring_sqe_set_data(sqe, NULL); // its own completion is nobody's
            if (io_uring_submit(&u->ring) >= 0) u->stalls++;
        }
    }
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
            const int64_t stall_ms = u->stall_ms;
            pthread_mutex_unlock(&u->mu);
            // waits on the completion side (submits nothing but a cancel after a stall); an error (EINTR) is
            // retried: the requests are in the kernel's hands and q must outlive them
            wait_or_cancel(u, stall_ms);
            pthread_mutex_lock(&u->mu);
            reap_ready(u);
        }
        u->reaping = false;
        pthread_cond_broadcast(&u->cv);
    }
    pthread_mutex_unlock(&u->mu);
    for (int j = 0; j < p->n; j++) {
        // a request cancelled after a stall (wait_or_cancel) is done again synchronously
        if (j < k && q[j].res != -ECANCELED && q[j].res != -EINTR) res[j] = q[j].res;
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

bool kvt_uring_set_stall_ms(kvt_uring *u, int64_t ms) {
    (void)u, (void)ms;
    return false;
}

int64_t kvt_uring_stalls(kvt_uring *u) {
    (void)u;
    return 0;
}

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
