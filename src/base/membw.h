// membw.h - sustained DRAM read bandwidth, measured by streaming a buffer
// much larger than the last-level cache with every thread of a pool.
#ifndef KVT_MEMBW_H
#define KVT_MEMBW_H

#include <stdint.h>

#include "threadpool.h"

// Reads `bytes` (rounded up to whole sets of four 64 KiB chunks) `reps` times in each of the patterns below
// (kvt_read_pattern); returns the best bytes/second over the repetitions and patterns, or 0 if the buffer cannot be
// allocated.
double kvt_measure_read_bw(kvt_threadpool *pool, int64_t bytes, int reps);

// A probe buffer made once and read many times: `kvtier bench`'s token-paired probe reads as many bytes as a decode
// token right after each token, so the buffer is allocated and faulted in (written) at init, never in a timed pass.
// Ownership: the caller's (kvt_read_probe_free).
typedef struct kvt_read_probe kvt_read_probe;
// The access patterns: each pool task XOR-reads one 64 KiB chunk (one stream a thread), or four chunks a quarter of
// the buffer apart line by line in turns (four streams a thread, as the x8 decode GEMVs), or the same with the lines
// 4 KiB ahead of each stream prefetched into L2, or two chunks half the buffer apart with the lines 2 KiB ahead
// prefetched into L1 (the fastest on an AMD Zen 5, where the others read slower than its decode GEMVs).
typedef enum { KVT_READ_ONE, KVT_READ_FOUR, KVT_READ_FOUR_PF, KVT_READ_TWO_PF_L1, KVT_READ_N_PATTERNS } kvt_read_pattern;
// bytes: what a pass reads, rounded up to whole sets of four 64 KiB chunks (kvt_read_probe_bytes); ring_bytes: the
// buffer holds enough such windows for ring_bytes (at least one), and the passes read them in turns, so that a window
// is read again only after ring_bytes / bytes passes (a window read every other token could otherwise still be in a
// large last-level cache); n_threads: the most threads of a pool that will read it. KVT_ERR_NOMEM when the buffer
// cannot be allocated, KVT_ERR_INVALID_ARG for n_threads < 1.
kvt_status kvt_read_probe_init(int64_t bytes, int64_t ring_bytes, int n_threads, kvt_read_probe **out, kvt_err *err);
void kvt_read_probe_free(kvt_read_probe *p);
int64_t kvt_read_probe_bytes(const kvt_read_probe *p);
// Reads the next window once in pattern `pat` with every thread of `pool` (one job); returns the pass's wall seconds
// (> 0), or 0 when the pool has more threads than init allowed or pat is not a pattern.
double kvt_read_probe_pass(kvt_read_probe *p, kvt_threadpool *pool, kvt_read_pattern pat);

// One task's read in pattern pat: its streams (kvt_read_pattern_streams: 1, 4 or 2) start `stride` bytes apart at p,
// each `len` bytes long; returns the XOR of the 64-bit words read (which keeps the loads alive). Reads whole 128-byte
// (KVT_READ_ONE) or 64-byte steps of each stream: the bytes past the last whole step are not read. Any alignment. The
// probe's passes read their chunks with it, and tools/bench/kq_decode_bench.c a decode task's rows.
uint64_t kvt_read_streams(const void *p, int64_t stride, int64_t len, kvt_read_pattern pat);
int kvt_read_pattern_streams(kvt_read_pattern pat);

#endif
