// ew_par.h - element-wise kernels spread over the thread pool.
//
// The forward pass and the profiler's SwiGLU rate both call this, so the profile measures the
// split the engine runs.
#ifndef KVT_EW_PAR_H
#define KVT_EW_PAR_H

#include <stdint.h>

#include "../base/threadpool.h"

// g[i] = silu(g[i]) * u[i] for i < n (g, u: [n] f32), in element ranges of at least 1024 (one
// expf each) per task; below two such ranges, or with one thread, on the caller. Bitwise equal
// to kvt_swiglu_f32 over the whole array.
void kvt_swiglu_par(kvt_threadpool *pool, float *g, const float *u, int64_t n);

#endif
