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
typedef struct {
    bool done;
    int res; // bytes, or -errno
} ureq;

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

ssize_t kvt_uring_rw(kvt_uring *u, bool write, void *buf, size_t n, off_t off) {
    ureq q = {false, 0};
    pthread_mutex_lock(&u->mu);
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) { // more requests in flight than ring entries: do this one synchronously
        pthread_mutex_unlock(&u->mu);
        return write ? pwrite(u->fd, buf, n, off) : pread(u->fd, buf, n, off);
    }
    if (write) io_uring_prep_write(sqe, u->fd, buf, (unsigned)n, (__u64)off);
    else io_uring_prep_read(sqe, u->fd, buf, (unsigned)n, (__u64)off);
    io_uring_sqe_set_data(sqe, &q);
    if (io_uring_submit(&u->ring) < 0) {
        // not submitted: turn it into a no-op that no one waits for (it goes with the next submission) and
        // do this request synchronously
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, NULL);
        pthread_mutex_unlock(&u->mu);
        return write ? pwrite(u->fd, buf, n, off) : pread(u->fd, buf, n, off);
    }
    while (!q.done) {
        if (u->reaping) {
            pthread_cond_wait(&u->cv, &u->mu);
            continue;
        }
        u->reaping = true;
        reap_ready(u);
        if (!q.done) {
            struct io_uring_cqe *cqe;
            pthread_mutex_unlock(&u->mu);
            // waits on the completion side only (submits nothing); an error (EINTR) is retried: the request is
            // in the kernel's hands and q must outlive it
            (void)io_uring_wait_cqe(&u->ring, &cqe);
            pthread_mutex_lock(&u->mu);
            reap_ready(u);
        }
        u->reaping = false;
        pthread_cond_broadcast(&u->cv);
    }
    pthread_mutex_unlock(&u->mu);
    if (q.res < 0) {
        errno = -q.res;
        return -1;
    }
    return q.res;
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

#endif
