// matmul_par.h - weight x activation products spread over the thread pool.
//
// kvt_matmul_par computes up to KVT_MM_MAX_OUT products that share one input
// (q/k/v, or gate/up) in a single pool dispatch: the input rows are converted
// once per distinct dot type, and the row ranges of all weights form one task
// list. Decode issues hundreds of these per token, so fewer dispatches matter.
#ifndef KVT_MATMUL_PAR_H
#define KVT_MATMUL_PAR_H

#include <stdint.h>

#include "../base/threadpool.h"
#include "../model/model.h"
#include "weight_pf.h"

#define KVT_MM_MAX_OUT 4

// Scratch for converted activations: kvt_matmul_scratch_bytes(max_cols, n) bytes.
int64_t kvt_matmul_scratch_bytes(int64_t max_cols, int64_t n_tok);

// For each i < n_out: y[i][t, r] = sum_k w[i][r, k] * x[t, k]
//   x:    [n_tok, cols] f32 (all w[i] have the same cols)
//   y[i]: [n_tok, w[i]->rows] f32
//   scratch: kvt_matmul_scratch_bytes(cols, n_tok) bytes, 64-byte aligned
void kvt_matmul_par(kvt_threadpool *pool, const kvt_weight *const *w, float *const *y, int n_out, const float *x,
                    int64_t n_tok, void *scratch);

// Every task of kvt_matmul_par(_ex) but a part's last covers a multiple of this many rows (more with row_align or
// in prefill): per-chunk state of its callers needs at most rows / KVT_MATMUL_MIN_CHUNK_ROWS + 1 entries. In
// prefill (16 tokens or more, 2+ threads) the tasks of the job's last part, and of the parts of its shape, get
// smaller towards its end (so the threads end together); parts of one shape are still cut alike.
#define KVT_MATMUL_MIN_CHUNK_ROWS 16

// What kvt_matmul_par_ex adds: small element-wise steps run inside the product's own pool job, in the task that
// produced their rows, instead of serially on the caller between two jobs (decode: backend_cpu.c's fusions).
typedef struct {
    // Called by the task that computed rows [r0, r1) of y[part] (every token's), right after them and concurrently
    // with other tasks; chunk is the task's index among part's tasks. Parts whose weights have the same rows and
    // row size are cut into the same chunks. NULL: none.
    void (*epilogue)(void *ctx, int part, int64_t chunk, int64_t r0, int64_t r1);
    void *ctx;
    int64_t row_align; // every task's first row a multiple of this too (<= 1: only the kernels' own alignment)
    const void *xq;    // non-NULL: the input, already in the dot type of every w[i] (all the same), as the conversion
                       // would write it ([n_tok] rows of kvt_row_size(dot type, cols) bytes); x and scratch unused
    // Non-NULL: consecutive w[i] of one type and cols whose rows lie back to back in memory (the repacking places a
    // layer's matrices one after the other: wq|wk|wv) run as one matrix, so that a task's rows may span them (fewer,
    // longer kernel calls); its tasks write their rows here, [n_tok, the group's rows] per such group, groups in
    // order (n_tok * the rows of all w[i] floats are enough), then copy each part's rows to its y and call the
    // epilogue for that part's rows; chunk is then the task's index in the group. Each row's bits are those of the
    // unfused product (matmul.h: a row's result does not depend on the call's rows). Used only for groups of 2+.
    float *fused_y;
} kvt_mm_opts;

// kvt_matmul_par with opts (NULL: as kvt_matmul_par). The products are the same bits whatever the options.
void kvt_matmul_par_ex(kvt_threadpool *pool, const kvt_weight *const *w, float *const *y, int n_out, const float *x,
                       int64_t n_tok, void *scratch, const kvt_mm_opts *opts);

// The weight bytes of each task kvt_matmul_par_ex(pool, w, .., n_out, .., n_tok, .., opts) runs (opts' row_align and
// whether fused_y is set count; NULL: as kvt_matmul_par), in task order: writes at most max ranges to r and returns
// how many (weight_pf.h's window of the next job). Rows of a (repacked) weight are kvt_row_size(type, cols) bytes
// each, in row order.
int kvt_matmul_par_ranges(const kvt_threadpool *pool, const kvt_weight *const *w, int n_out, int64_t n_tok,
                          const kvt_mm_opts *opts, kvt_wpf_range *r, int max);

#endif
