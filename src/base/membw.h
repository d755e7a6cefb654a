// membw.h - sustained DRAM read bandwidth, measured by streaming a buffer
// much larger than the last-level cache with every thread of a pool.
#ifndef KVT_MEMBW_H
#define KVT_MEMBW_H

#include <stdint.h>

#include "threadpool.h"

// Reads `bytes` (rounded to 64 KiB chunks) `reps` times; returns the best
// bytes/second over the repetitions, or 0 if the buffer cannot be allocated.
double kvt_measure_read_bw(kvt_threadpool *pool, int64_t bytes, int reps);

#endif
