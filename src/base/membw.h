// membw.h - sustained DRAM read bandwidth, measured by streaming a buffer
// much larger than the last-level cache with every thread of a pool.
#ifndef KVT_MEMBW_H
#define KVT_MEMBW_H

#include <stdint.h>

#include "threadpool.h"

// Reads `bytes` (rounded up to whole sets of four 64 KiB chunks) `reps` times in each of three patterns (one stream
// per task; four streams per task; four streams with software prefetch); returns the best bytes/second over the
// repetitions and patterns, or 0 if the buffer cannot be allocated.
double kvt_measure_read_bw(kvt_threadpool *pool, int64_t bytes, int reps);

#endif
