// kv_uring.h - disk I/O of the KV store's disk tier through io_uring (liburing),
// with the plain pread/pwrite path (run by the copy engine's threads) as fallback.
//
// One ring per disk tier file, shared by every thread that reads or writes
// blocks (the copy engine's workers and compute threads that miss): each
// thread submits its request and waits for its own completion; whichever
// thread waits first reaps completions for all, so the workers keep several
// block reads in flight on the one ring. Built only with -DKVT_HAVE_LIBURING
// (the Makefile adds it when liburing is installed); without it, with
// KVT_NO_URING=1 in the environment, or when io_uring_queue_init fails
// (kernel without io_uring, seccomp), kvt_uring_open returns NULL and the
// caller uses pread/pwrite.
#ifndef KVT_KV_URING_H
#define KVT_KV_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct kvt_uring kvt_uring;

// A ring of `entries` slots for fd, or NULL (why: a static string saying why, for reports).
kvt_uring *kvt_uring_open(int fd, unsigned entries, const char **why);
void kvt_uring_close(kvt_uring *u);
// One read (write) of n bytes at off into (from) buf, as pread/pwrite: bytes transferred (may be short),
// or -1 with errno set.
ssize_t kvt_uring_rw(kvt_uring *u, bool write, void *buf, size_t n, off_t off);
// n reads (writes) at once: buf[i] <-> n bytes len[i] at off[i], for i in [0, n). They go to the ring in one
// submission (one system call; the block layer sees them together, one doorbell for the device), and the call
// returns when all of them have completed. res[i]: bytes transferred (may be short), or -errno. Requests beyond the
// ring's free entries, or all of them if the submission fails, are done with pread/pwrite. As kvt_uring_rw for
// n = 1 (which it is). Pieces of KVT_URING_MANY_MAX at most are submitted at once.
#define KVT_URING_MANY_MAX 64
void kvt_uring_rw_many(kvt_uring *u, bool write, int n, void *const *buf, const size_t *len, const off_t *off, ssize_t *res);
// kvt_uring_rw_many in two calls, for a caller that computes while its requests are in flight: _start submits n <=
// KVT_URING_MANY_MAX requests (as one piece of kvt_uring_rw_many) and returns; _finish waits for them (or does with
// pread/pwrite those the ring did not take) and gives their res[i]. *p must stay where it is between the two (other
// threads reaping the ring write its done flags). Every _start needs its _finish.
typedef struct {
    bool done;
    int res; // bytes, or -errno
} kvt_uring_req;
typedef struct {
    int n, k; // requests; q[0 .. k) in the ring, the rest done by _finish synchronously
    bool write;
    void *buf[KVT_URING_MANY_MAX];
    size_t len[KVT_URING_MANY_MAX];
    off_t off[KVT_URING_MANY_MAX];
    kvt_uring_req q[KVT_URING_MANY_MAX];
} kvt_uring_pending;
void kvt_uring_rw_start(kvt_uring *u, bool write, int n, void *const *buf, const size_t *len, const off_t *off,
                        kvt_uring_pending *p);
void kvt_uring_rw_finish(kvt_uring *u, kvt_uring_pending *p, ssize_t *res);
// A stalled ring: when a waiting thread sees no completion for stall_ms (default KVT_URING_STALL_MS), every request
// in flight on the ring is cancelled and done again with pread/pwrite by its owner, so that a completion the kernel
// never posts (seen once, 2026-12-03: an O_DIRECT write taken by the kernel, no io-wq worker, no completion, the test
// suite waiting for ever) costs the stall time, not a hang; kvt_uring_stalls counts those cancellations. Needs a
// kernel with IORING_FEAT_EXT_ARG (5.11 on): kvt_uring_set_stall_ms returns false where the wait has no timeout (an
// older kernel). ms <= 0 restores the default.
#define KVT_URING_STALL_MS 5000
bool kvt_uring_set_stall_ms(kvt_uring *u, int64_t ms);
int64_t kvt_uring_stalls(kvt_uring *u);
// True if this build has io_uring support compiled in.
bool kvt_uring_compiled(void);

#endif
