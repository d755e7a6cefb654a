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
// s: [qpg, n] raw scores (overwritten); agg[t] = sum_i softmax(s_i)[t] (kvt_sparse_exp_neg, partial sums in a
// fixed order: the same bits on every call). A row with no finite score adds nothing.
void kvt_sparse_aggregate(float *s, int32_t qpg, int64_t n, float *agg);

// Bounds of the selection's stack rows (sparse_score.c, sparse.c).
enum { KVT_SPARSE_MAX_HD = 512, KVT_SPARSE_MAX_QPG = 64 };

// The qpg query rows q ([qpg, hd] f32) as int16 (q16 [qpg, hd]) with one scale per row (qscale [qpg]):
// q ~ q16 * qscale, max |q16| = 32767 (non-finite values count as 0).
void kvt_sparse_quant_query(const float *q, int32_t qpg, int32_t hd, int16_t *q16, float *qscale);
// raw[i * n + t] = scale * q_i . k_t with q_i = q16_i * qscale[i] and k_t = k8[t] * k8s[t] (k8 [n_keys, hd] int8,
// k8s [n_keys]) for t < n_keys, -inf for n_keys <= t < n. Integer dot products: the same bits on every path.
void kvt_sparse_score_i8(const int16_t *q16, const float *qscale, int32_t qpg, int32_t hd, const int8_t *k8,
                         const float *k8s, int64_t n_keys, int64_t n, float scale, float *raw);
// e^x for x <= 0, relative error below 2e-7 against expf; 0 for x <= -87, -inf and NaN (exposed for the tests).
float kvt_sparse_exp_neg(float x);

#endif
