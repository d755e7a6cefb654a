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
#include <sys/types.h>

typedef struct kvt_uring kvt_uring;

// A ring of `entries` slots for fd, or NULL (why: a static string saying why, for reports).
kvt_uring *kvt_uring_open(int fd, unsigned entries, const char **why);
void kvt_uring_close(kvt_uring *u);
// One read (write) of n bytes at off into (from) buf, as pread/pwrite: bytes transferred (may be short),
// or -1 with errno set.
ssize_t kvt_uring_rw(kvt_uring *u, bool write, void *buf, size_t n, off_t off);
// True if this build has io_uring support compiled in.
bool kvt_uring_compiled(void);

#endif
