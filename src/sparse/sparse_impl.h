// sparse_impl.h - what the files of src/sparse/ share (not part of the library's interface).
#ifndef KVT_SPARSE_IMPL_H
#define KVT_SPARSE_IMPL_H

#include "sparse.h"

// Floats of one thread's scratch for kvt_sparse_attend_set / kvt_sparse_score_exact (64-byte aligned).
int64_t kvt_sparse_attn_scratch_floats(const kvt_sparse_dims *d);

// Exact attention of the single query token q ([n_head * head_dim]) over the selected positions of each
// KV head: sel + kh * sel_stride, nsel[kh] sorted positions. out: [n_head * head_dim_v]. One task per KV head.
kvt_status kvt_sparse_attend_set(kvt_kv *kv, int32_t seq, int32_t layer, const kvt_attn_params *p, const float *q,
                                 const int32_t *sel, const int64_t *nsel, int64_t sel_stride, float *out,
                                 kvt_threadpool *pool, float *const *scratch, kvt_err *err);
// The oracle score of positions [0, n) of every KV head with the real query: agg + kh * agg_stride gets the sum
// over the group's query heads of their softmax probabilities (keys read from the store).
kvt_status kvt_sparse_score_exact(kvt_kv *kv, int32_t seq, int32_t layer, const kvt_attn_params *p, const float *q,
                                  int64_t n, float *agg, int64_t agg_stride, kvt_threadpool *pool, float *const *scratch,
                                  kvt_err *err);
// s: [qpg, n] raw scores (overwritten); agg[t] = sum_i softmax(s_i)[t].
void kvt_sparse_aggregate(float *s, int32_t qpg, int64_t n, float *agg);

#endif
