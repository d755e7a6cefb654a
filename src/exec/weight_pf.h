// weight_pf.h - decode's weight prefetch in the pool's idle time.
//
// Decode reads each weight once per token from DRAM, and between two product jobs the DRAM idles: while the caller
// runs the serial steps (norm, conversions, KV append), while the other threads wait at a job's end and during a
// short attention. A prefetch window names the weights of the next product job (one byte range per task); a thread
// that would spin in the pool (kvt_threadpool_set_idle) calls kvt_wpf_step instead, which requests the lines of one
// chunk of the window into its cache (L2), the tasks' ranges taken in turns (their starts first) so that each task
// finds its first lines, and then more, already there when the job starts. Only cache hints: no result depends on
// it (the same bits with or without, and whatever the timing). Torn reads of a window that is being replaced can
// only make a thread request lines of a stale window (weights too: mapped memory; a prefetch never faults).
//
// One thread posts windows (the pool's owner); any thread steps. The struct is the owner's (no allocation).
#ifndef KVT_WEIGHT_PF_H
#define KVT_WEIGHT_PF_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

// Ranges of one window at most (a job with more tasks: its first KVT_WPF_RANGES tasks are prefetched).
#define KVT_WPF_RANGES 32
// Bytes one kvt_wpf_step requests (a whole number of 64-byte lines): short, so that a new job is seen soon.
#define KVT_WPF_CHUNK 2048

typedef struct {
    _Atomic uint64_t cur;                 // window generation << 32 | next chunk to request
    _Atomic int64_t n_chunk;              // chunks of the window
    _Atomic int n_range;
    _Atomic uintptr_t base[KVT_WPF_RANGES]; // each range's first byte (a task's weights)
    _Atomic int64_t len[KVT_WPF_RANGES];    // and its length in bytes
} kvt_wpf;

// The bytes a window requests at most (kvt_context's default): a core's L2 holds them beside its task's lines.
#define KVT_WPF_BUDGET (256 * 1024)

// A byte range of weights.
typedef struct {
    const void *p;
    int64_t bytes;
} kvt_wpf_range;

// Empties p (no window).
void kvt_wpf_init(kvt_wpf *p);
// Replaces the window by r[0..n) (n beyond KVT_WPF_RANGES: the first ones), at most `budget` bytes requested in
// all (whole chunks, per range in turns; <= 0 or n <= 0: no window). Owner thread only.
void kvt_wpf_post(kvt_wpf *p, const kvt_wpf_range *r, int n, int64_t budget);
// Requests the lines of the window's next chunk; false when the window has none left (the caller spins then).
bool kvt_wpf_step(kvt_wpf *p);

#endif
