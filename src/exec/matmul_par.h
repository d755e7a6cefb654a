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

#define KVT_MM_MAX_OUT 4

// Scratch for converted activations: kvt_matmul_scratch_bytes(max_cols, n) bytes.
int64_t kvt_matmul_scratch_bytes(int64_t max_cols, int64_t n_tok);

// For each i < n_out: y[i][t, r] = sum_k w[i][r, k] * x[t, k]
//   x:    [n_tok, cols] f32 (all w[i] have the same cols)
//   y[i]: [n_tok, w[i]->rows] f32
//   scratch: kvt_matmul_scratch_bytes(cols, n_tok) bytes, 64-byte aligned
void kvt_matmul_par(kvt_threadpool *pool, const kvt_weight *const *w, float *const *y, int n_out, const float *x,
                    int64_t n_tok, void *scratch);

#endif
