// ew_par.h - element-wise kernels spread over the thread pool.
//
// The forward pass and the profiler's SwiGLU rate both call this, so the profile measures the
// split the engine runs.
#ifndef KVT_EW_PAR_H
#define KVT_EW_PAR_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/threadpool.h"

// Calls fn(ctx, a, b) over consecutive ranges [a, b) covering [0, n), at most one range per thread and
// each of at least min_per_task items; on the caller (fn(ctx, 0, n)) below two such ranges or with one
// thread. The ranges run concurrently, so fn must treat them independently.
void kvt_par_ranges(kvt_threadpool *pool, int64_t n, int64_t min_per_task, void (*fn)(void *ctx, int64_t a, int64_t b),
                    void *ctx);

// g[i] = silu(g[i]) * u[i] for i < n (g, u: [n] f32), in element ranges of at least 1024 (one
// expf each) per task; below two such ranges, or with one thread, on the caller. Bitwise equal
// to kvt_swiglu_f32 over the whole array.
void kvt_swiglu_par(kvt_threadpool *pool, float *g, const float *u, int64_t n);
// The same split for either gated activation: gelu ? kvt_geglu_f32 : kvt_swiglu_f32.
void kvt_glu_par(kvt_threadpool *pool, bool gelu, float *g, const float *u, int64_t n);

#endif
