// sparse_params.h - the settings of sparse decoding (docs/SPARSE.md), carried in kvt_context_params.
//
// Decode attention of a sequence attends, per (layer, KV head), a selected set of K positions instead of
// all of them: the first `sink`, the last `recent`, and the best of the rest by the mode's score. Prefill
// stays dense, as do the first `dense_layers` layers and sliding-window layers. Mode off (the default,
// all zeros) is the exact dense path, untouched.
#ifndef KVT_SPARSE_PARAMS_H
#define KVT_SPARSE_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    KVT_SPARSE_OFF = 0,
    KVT_SPARSE_ORACLE,     // exact top-k on the real query (keys read from the KV store): the accuracy bound
    KVT_SPARSE_QUEST,      // pages of `page` positions ranked by an upper bound of q.k from per-page key min/max
    KVT_SPARSE_ASYNCSPADE, // top-k on a query predicted from the last `window` queries, on int8 key copies,
                           // selected by a worker while the previous token computes
} kvt_sparse_mode;

// asyncspade: how the next query is predicted from the last ones.
typedef enum {
    KVT_SPARSE_PRED_RIDGE = 0, // the paper's: softmax-normalized ridge weights per window, ensemble averaged
    KVT_SPARSE_PRED_LAST,      // the last query as it is (no regression)
    KVT_SPARSE_PRED_RIDGE_HEAD,// the same ridge ensemble, one regression per query head instead of per KV group
    KVT_SPARSE_PRED_SIMPLEX,   // Eq. 2 read literally: the ridge problem solved over softmax-normalized (simplex)
                               // weights, per window, ensemble averaged
} kvt_sparse_pred;

typedef struct {
    kvt_sparse_mode mode;
    int64_t budget;       // positions attended per (layer, KV head), sink and recent included (0: budget_frac)
    double budget_frac;   // budget as a fraction of the positions held (used when budget == 0; 0: 1/8)
    int32_t sink;         // first positions always attended (default 4 when mode != off and sink < 0)
    int32_t recent;       // last positions always attended, the current one included (default 32 when < 0)
    int32_t window;       // asyncspade: queries of the regression window (default 16 when 0)
    int32_t dense_layers; // first layers attended densely (default 0)
    int32_t page;         // quest: positions per page (default 16 when 0)
    double rerank;        // asyncspade: keep rerank * K candidates by the predicted query, re-rank them with the
                          // real query on the int8 keys (<= 1: no re-rank)
    bool sync;            // asyncspade: select on the caller when the query arrives (no worker)
    kvt_sparse_pred predictor; // asyncspade: the query predictor (default the paper's ridge ensemble)
    double lambda;        // asyncspade: the ridge regularization, relative to the window's mean squared norm
                          // (default 1e-3 when 0)
    bool rope_align;      // asyncspade: rotate the past queries to the predicted position's RoPE phase before
                          // predicting (i.e. predict the query before RoPE, then apply the next position's RoPE)
    int32_t real_layers;  // asyncspade: the first real_layers layers select with the real query on the int8 keys,
                          // on the caller (no prediction; where the predictor is poor: early layers)
    double fallback;      // asyncspade: a KV head whose predicted query has cosine < fallback with the real one
                          // is selected again with the real query on the int8 keys, on the caller (0: never)
    int32_t block;        // asyncspade: select whole pages of block positions (a page's score: the largest of its
                          // positions' scores), so that the set maps onto the store's blocks (--kv-block); 0 or
                          // 1: token-level (default)
    int32_t page_elems;   // asyncspade: the most key elements a page of block / rerank_block positions may hold per KV head:
                          // at init each of the two larger than 1 becomes min(itself, max(1, page_elems / head_dim)) (acc: 256,
                          // pages of 4 at head_dim <= 64, 2 at 128, 1 at 256); 0: as given. --sparse-block and
                          // --sparse-rerank-block set it to 0 (an explicit page size is kept)
    bool block_sum;       // asyncspade with block: a page's score is the sum of its positions' scores (the group's
                          // predicted mass in the page) instead of their largest
    int32_t rerank_block; // asyncspade with rerank: the real query keeps whole pages of rerank_block positions (a
                          // page's score: the group's mass summed over its candidates, sink and recent apart), so that
                          // the set maps onto the store's blocks and fits a fast tier of K positions; 0 or 1: token level
    double keep;          // asyncspade with rerank_block: a page the previous decode step of the (layer, KV head) kept scores
                          // (1 + keep) times its candidate mass (hysteresis: fewer pages change per step, so fewer
                          // blocks are loaded into a fast tier of K positions); 0: off
    bool share;           // asyncspade with rerank_block: the KV heads of a layer share their budgets: the layer's
                          // Hkv * K positions go to the pages with the most mass over all its heads (each head's mass
                          // sums to qpg), sink and recent of every head kept; 0: K per head
    bool share_layers;    // asyncspade with share: the sparse layers share their budgets too: each layer's budget at a
                          // decode step is set from the previous step's page masses of every sparse layer (one
                          // threshold over all their pages), so that the layers' budgets sum to what each would have
                          // had alone (attended positions per head per layer, averaged over the layers, stay K)
    double layer_floor;   // with share_layers: each layer keeps at least this fraction of its own budget (0..1; 0: none)
    double prefetch_top;  // asyncspade with rerank: the worker hands the copy engine only the blocks of its
                          // prefetch_top * K best candidates, best first (sink and recent first); 0: every candidate
    int32_t prefetch_layers; // asyncspade: the blocks of a selection go to the store's copy engine when the
                          // attention is this many layers before it (0: as soon as the worker has selected, a
                          // whole step ahead)
    int32_t key_bits;     // asyncspade: bits of the key copies the predicted query scans (the worker's scan of every
                          // position): 8 (int8, default; 0 means 8) or 4 (4-bit, half the bytes; kvt_sparse_k4_at)
    int32_t rerank_bits;  // asyncspade: bits of the key copies the real query scores (re-rank, fallback, real layers):
                          // 8 or 4; 0: key_bits. A copy of each width used is kept (4 and 8: both, the bytes of both)
    int32_t rerank_qbits; // asyncspade with rerank: the real query of the re-rank's scoring as int16 (16; 0 means 16) or
                          // int8 (8: |q| <= 127 with a scale per query head, one VNNI product per 4 dimensions instead of two)
    double rerank_resid;  // asyncspade with rerank and int8 copies for both scans: the re-rank's scores as the worker's kept
                          // predicted scores s^ plus the residual (q - q^) . k on this share (0..1] of the int8 blocks'
                          // 4-dimension rows, those with the most residual energy per call and KV head (at least one), in
                          // the KV heads whose calibration passes rerank_resid_gate; 0: the exact pass (default)
    double rerank_resid_gate; // with rerank_resid: a KV head takes the residual when, over its first rerank_resid_cal
                          // re-rank calls (the exact pass), its chosen pages held on average at least this share of its
                          // candidates' mass (0: 0.8); below, it stays on the exact pass
    int32_t rerank_resid_cal; // with rerank_resid: calibration calls per (layer, KV head) (0: 4)
    bool stats;           // per step: oracle overlap and attention mass recall (costs an exact scoring pass)
    int32_t seqs;         // sequences of n_ctx positions whose key summaries the fast budget reserves (0: 1;
                          // beam and serve set theirs: kvt_sparse_summary_bytes)
} kvt_sparse_params;

// "off", "oracle", "quest", "asyncspade"; parse returns false on another name.
const char *kvt_sparse_mode_name(kvt_sparse_mode m);
bool kvt_sparse_mode_parse(const char *s, kvt_sparse_mode *out);
// "ridge", "last", "ridge-head", "simplex"; parse returns false on another name.
const char *kvt_sparse_pred_name(kvt_sparse_pred m);
bool kvt_sparse_pred_parse(const char *s, kvt_sparse_pred *out);
// A measured set of asyncspade's selection settings (docs/SPARSE.md, the --sparse-preset row), written into p; only
// these fields, so settings applied after it change them and the others (budget, sink, recent, stats) keep theirs:
//   "keep": rerank 4, block 16, block_sum, rerank_block 16, prefetch_top 0.5, keep 0.25, rerank_qbits 8 (the speed
//           configuration KEEP)
//   "doc":  keep's with rerank 6, share and rerank_qbits 16 (the documented configuration)
//   "acc":  rerank 8, block 4, block_sum, rerank_block 4, page_elems 256, prefetch_top 0.5, keep 0.25, share, dense_layers 1,
//           rerank_qbits 16 (the accuracy configuration, pages of 4; pages of 8 until 2026-12-02; since 2026-12-02 18:00 UTC
//           pages of at most 256 key elements: 1 position on Gemma 3's 256-dimension heads, docs/SPARSE.md "gacc")
// Returns false (p unchanged) on another name.
bool kvt_sparse_params_preset(const char *name, kvt_sparse_params *p);

#endif
