// sparse.h - sparse decode attention: selection (oracle, quest, asyncspade) and exact attention over the
// selected positions (docs/SPARSE.md).
//
// A kvt_sparse lives in a context and sees every attention call of the forward pass
// (kvt_sparse_attention), of every sequence. Each sequence that attends gets its own state, created on
// demand: a compact key summary per (layer, KV head) written as keys are appended (quest: per-page key
// min/max; asyncspade: an int8 copy of every key with a per-row scale), grown with the positions the
// sequence holds; the last queries per (layer, KV head) (asyncspade's predictor); the selection of its next
// decode step; its step records. The context tells it of forks (the child copies the parent's state, so it
// selects as if it had decoded the same tokens alone), truncations and freed sequences
// (kvt_sparse_seq_fork / _truncate / _free). Keys that enter a sequence's store without an attention call
// (a restored session, blocks of the prefix cache) are read back from the store when the sequence next
// attends. Calls of more than one token (prefill), of sliding-window layers and of the first dense_layers
// layers attend densely (kvt_attention, bit for bit the dense path).
//
// A sequence's selection depends only on its own keys, queries and settings: its output is the same
// whichever sequences share the batch, however the batch is split, with any thread count.
//
// Decode step of a sequence at position pos, layer l: the selected set S of each KV head (sorted
// positions, always [0, sink) and [pos - recent + 1, pos]) is attended exactly: softmax over S only.
// When S would hold every position the call is dense (kvt_attention: equal to the dense path exactly).
// GQA: the group's query heads share S; a position's score is the sum over the group's heads of its
// softmax probability (the group's attention mass), so top-k maximizes the group's mass recall.
//
// asyncspade runs its selection for step pos + 1 of (sequence, layer l) on a worker thread as soon as layer
// l of step pos has attended (the rest of the forward pass computes meanwhile); jobs of every sequence go
// through one queue in the order they are posted. Step pos + 1 waits for its job (the wait is the stall).
// The worker reads only that layer's summaries of that sequence, which the caller does not write until it
// has waited for the job.
#ifndef KVT_SPARSE_H
#define KVT_SPARSE_H

#include <stdint.h>

#include "../attn/attention.h"
#include "../base/status.h"
#include "../base/threadpool.h"
#include "../kernels/vec.h"
#include "../kv/kv.h"
#include "sparse_params.h"

typedef struct {
    int32_t n_layer, n_head, n_head_kv, head_dim, head_dim_v;
    int64_t n_ctx;
    int32_t n_threads;
    kvt_type kv_type; // the store's element type: summaries are taken from keys rounded to it
    kvt_rope_params rope; // the RoPE of the (global) layers' queries, for rope_align (n_rot 0: none)
    bool bounded;         // the summaries of all sequences together must stay within kvt_sparse_summary_bytes
                          // (a --kv-fast budget reserved them): a step that would pass it fails (KVT_ERR_BUDGET)
    int32_t swa_period;   // sliding windows (kvt_hparams_layer_window's rule): 0, every layer global; else layer il is
                          // global iff il % swa_period == swa_period - 1. Only global layers from --sparse-dense-layers
                          // on keep summaries (a window layer attends densely)
} kvt_sparse_dims;

// One decode step (token) of a sequence, summed over its sparse layers and KV heads.
typedef struct {
    int64_t pos;                // position decoded
    int64_t selected;           // positions attended, summed over sparse (layer, KV head) pairs
    int64_t context;            // positions held, summed likewise (dense would attend these)
    int64_t kv_read_bytes;      // K and V bytes of the attended rows (dense layers included)
    int64_t summary_read_bytes; // bytes of compact key summaries scanned to select
    double oracle_overlap;      // |S ∩ S_oracle| / |S_oracle| over the middle positions, mean over pairs (-1: no stats)
    double mass_recall;         // the group's attention mass (real query) inside S, mean over pairs (-1: no stats)
    double mass_recall_min;     // its minimum over the step's pairs (-1: no stats)
    double stall_ms;            // time the step waited for selections (worker, or inline selection)
    double wait_ms;             // of which waiting for the asyncspade worker (the rest: selection on the caller)
    int32_t n_pairs_stats;      // (layer, KV head) pairs behind the means above
} kvt_sparse_step;

typedef struct kvt_sparse kvt_sparse;

// Keys [pos0, pos0 + n) of layer restored into the store without an attention call (kvt_context_kv_load):
// into sequence seq's key summaries, as appended keys enter them. k: [n, n_head_kv * head_dim] f32, values of the
// store's element type (read back from it: not rounded again).
// A no-op for modes without summaries; keys not taken here are read back from the store when needed.
void kvt_sparse_observe_loaded(kvt_sparse *s, int32_t seq, int32_t layer, int64_t pos0, int64_t n, const float *k);

// Resolves defaults (sink, recent, window, page, budget fraction) into *p.
void kvt_sparse_params_resolve(kvt_sparse_params *p);
// Bytes of the compact key summaries of p->seqs sequences of n_ctx positions each (asyncspade: n_ctx rounded up to
// 16, the int8 copies' block; 0 for off and oracle):
// the caller reserves them in the fast tier's budget. A sequence's summaries are allocated as it grows
// (kvt_sparse_summary_held: what is held now); asyncspade's forks share their parent's key copies of whole blocks of
// 16 positions (held once), so a fork adds the positions past them.
int64_t kvt_sparse_summary_bytes(const kvt_sparse_params *p, const kvt_sparse_dims *d);
// The layers that keep key summaries: the global layers (d->swa_period) from p->dense_layers on.
int32_t kvt_sparse_summary_layers(const kvt_sparse_params *p, const kvt_sparse_dims *d);
// The sets of n_ctx positions (p->seqs, the unit of kvt_sparse_summary_bytes) that n_seqs sequences alive together,
// forks of one another, can hold at once, each writing at most n_tail positions past the sequence it was forked from
// (beam: 1 + beams x width, -n). Forks that copy (--sparse-rerank-resid): n_seqs. Otherwise the forks share the first
// sequence's key summaries in blocks of B positions (asyncspade 16, quest a page): 2 (its summaries as the base, its
// own positions past it) + every sequence's own positions (each at most max(64, 2 (n_tail + B + 1)) + B: their
// doubling), counted twice against the buffers' rounding to 2 MiB, and never more than 1 + n_seqs (a sequence's own
// part is at most a set).
int32_t kvt_sparse_fork_sets(const kvt_sparse_params *p, int64_t n_ctx, int64_t n_live, int64_t n_tail);
int64_t kvt_sparse_summary_held(const kvt_sparse *s);
// NULL in *out for mode off. KVT_ERR_INVALID_ARG for a bad setting (named), KVT_ERR_NOMEM.
kvt_status kvt_sparse_init(const kvt_sparse_params *p, const kvt_sparse_dims *d, kvt_sparse **out, kvt_err *err);
void kvt_sparse_free(kvt_sparse *s);

// The context's sequence calls (s may be NULL: no-ops). fork: dst (its old state dropped) takes a copy of
// src's state for positions [0, n) (KVT_ERR_BUDGET past the summary reservation, KVT_ERR_NOMEM; dst then has
// none). truncate: positions >= n_keep forgotten (their step records too; 0 frees the state). free: the
// state and its records freed. Each waits for the sequence's worker jobs first.
kvt_status kvt_sparse_seq_fork(kvt_sparse *s, int32_t src, int32_t dst, int64_t n, kvt_err *err);
void kvt_sparse_seq_truncate(kvt_sparse *s, int32_t seq, int64_t n_keep);
// A forward pass begins (the context's decode calls): the layers' undo records name it.
void kvt_sparse_pass_begin(kvt_sparse *s);
// The pass failed: seq's state as before it, its positions [n_keep, ...) gone (n_keep: where the pass started).
// asyncspade: the query history, the hysteresis and the selection to be made again, as they were, so that the pass run
// again gives what it would have given (the layers the pass reached; with --sparse-rerank-resid its calibration is
// not taken back: kvt_sparse_pass_repeatable). Otherwise as kvt_sparse_seq_truncate.
void kvt_sparse_seq_undo(kvt_sparse *s, int32_t seq, int64_t n_keep);
// Whether kvt_sparse_seq_undo takes a failed pass back whole.
bool kvt_sparse_pass_repeatable(const kvt_sparse *s);
void kvt_sparse_seq_free(kvt_sparse *s, int32_t seq);

// asyncspade's query window of a sequence, kept beside a prefix cache's blocks (src/sched/prefix_cache.c): the
// queries of its last min(window + 1, end) positions before `end`, every layer, as its prompt's prefill computed
// them. A later sequence given the cached positions [0, at) that computes [at, n) itself gets them back
// (kvt_sparse_qwin_restore) instead of recomputing the last window + 1 prompt positions (kvt_sparse_prompt_tail):
// its history is then the same bits as a sequence that computed the whole prompt, so its selections and tokens are too.
typedef struct kvt_sparse_qwin kvt_sparse_qwin;
// The window of seq ending at end (its queries of [0, end) observed in order, none since): *out, owned by the caller;
// NULL (KVT_OK) when there is none to take (not asyncspade, no state, a history not ending at end). KVT_ERR_NOMEM.
// Called by the thread that runs the sequence's forward passes (it does not wait for the sequence's worker job).
kvt_status kvt_sparse_qwin_take(kvt_sparse *s, int32_t seq, int64_t end, kvt_sparse_qwin **out, kvt_err *err);
void kvt_sparse_qwin_free(kvt_sparse_qwin *w);
int64_t kvt_sparse_qwin_end(const kvt_sparse_qwin *w);
int64_t kvt_sparse_qwin_bytes(const kvt_sparse_qwin *w); // bytes allocated for it
// True when w holds every query a sequence given [0, at) that computes [at, n) itself needs: at in (first, end] (first:
// the window's first position, end - min(window + 1, end)), n > at, and n - window - 1 >= first.
bool kvt_sparse_qwin_covers(const kvt_sparse_qwin *w, int64_t at, int64_t n);
// seq (holding positions [0, at), no query observed yet) takes w's queries of [.., at) as its history; at must be
// covered (kvt_sparse_qwin_covers with at's n). KVT_ERR_INVALID_ARG (another configuration, at past the window),
// KVT_ERR_NOMEM.
kvt_status kvt_sparse_qwin_restore(kvt_sparse *s, int32_t seq, const kvt_sparse_qwin *w, int64_t at, kvt_err *err);

// A sequence's key summaries (asyncspade's key copies, quest's page bounds), kept by a prefix cache beside its blocks
// (src/sched/prefix_cache.c): a later sequence given the cached positions shares them (kvt_sparse_ksum_attach) instead
// of reading those keys back from the store and summarizing them again. They are the bits any sequence holding those
// positions computes (a position's key depends on the tokens up to it alone), so its selections and tokens are too.
typedef struct kvt_sparse_ksum kvt_sparse_ksum;
// Whether s keeps key summaries a prefix cache can keep (quest, asyncspade; not with --sparse-rerank-resid). NULL: false.
bool kvt_sparse_keeps_keys(const kvt_sparse *s);
// Frees sequence seq's state (kvt_sparse_seq_free) keeping its summaries of the whole blocks (asyncspade 16 positions,
// quest a page) of [0, end) that every summarizing layer holds: *out, owned by the caller (kvt_sparse_ksum_free). A
// layer's own buffers become the kept copy as they are (no copy); a layer sharing a base (a fork, a kept copy it was
// given) keeps that base when it holds the positions, else a copy of the base's and its own. NULL (KVT_OK) when there
// is nothing to keep (no state, no summaries, fewer than a block, --sparse-rerank-resid). The kept bytes leave the
// summaries held (and the --kv-fast reservation: the cache's own budget bounds them) for the totals' summary_kept,
// until the last sequence or kept copy that shares them lets go. KVT_ERR_NOMEM (the state is freed all the same).
kvt_status kvt_sparse_seq_free_keep(kvt_sparse *s, int32_t seq, int64_t end, kvt_sparse_ksum **out, kvt_err *err);
// The same summaries of a sequence that goes on (a prefix cache's running holder of the positions): a layer without a
// base makes its buffers of the whole blocks it holds a base, as a fork does (no copy; it goes on in its own buffers
// from there), and shares it with *out. The caller must not run seq's forward pass meanwhile (this waits for its
// selection jobs). seq's selections and tokens stay what they were. NULL (KVT_OK) as above; KVT_ERR_NOMEM,
// KVT_ERR_BUDGET (the --kv-fast reservation has no room for the layer's own buffers): nothing kept, seq as it was or
// with some layers' summaries frozen (the same bits).
kvt_status kvt_sparse_seq_keep(kvt_sparse *s, int32_t seq, int64_t end, kvt_sparse_ksum **out, kvt_err *err);
void kvt_sparse_ksum_free(kvt_sparse_ksum *k); // (before the kvt_sparse it came from)
int64_t kvt_sparse_ksum_end(const kvt_sparse_ksum *k);   // the positions kept: [0, end)
int64_t kvt_sparse_ksum_bytes(const kvt_sparse_ksum *k); // their allocated bytes
// seq (holding positions [0, at), no key summarized yet) shares k's summaries of the whole blocks of [0, min(at, end)):
// *shared of them (0: less than a block); its layers summarize the rest from there. KVT_ERR_INVALID_ARG (k of another
// state, seq already summarizing), KVT_ERR_NOMEM.
kvt_status kvt_sparse_ksum_attach(kvt_sparse *s, int32_t seq, const kvt_sparse_ksum *k, int64_t at, int64_t *shared,
                                  kvt_err *err);

// The attention call of the forward pass, after K/V of [pos0, pos0 + n) were appended to kv: k are those
// keys ([n, n_head_kv * head_dim] f32, roped), q the queries. Same contract as kvt_attention. A decode step (n
// == 1 and not prompt) attends sparsely; prompt tokens (n > 1, or prompt set) densely.
kvt_status kvt_sparse_attention(kvt_sparse *s, kvt_kv *kv, int32_t seq, int32_t layer, const kvt_attn_params *p,
                                const float *q, const float *k, int64_t pos0, int64_t n, bool prompt, float *out,
                                kvt_threadpool *pool, void *const *scratch, void *workspace, kvt_err *err);

// Decode steps of sequence seq recorded since it was created (or the last clear), for the positions it
// still holds: *n of them, valid until the next call.
const kvt_sparse_step *kvt_sparse_steps(const kvt_sparse *s, int32_t seq, int64_t *n);
// Clears every sequence's records and the aggregates (kvt_sparse_summarize, kvt_sparse_pair_stats).
void kvt_sparse_steps_clear(kvt_sparse *s);
const kvt_sparse_params *kvt_sparse_get_params(const kvt_sparse *s);
// Last prompt tokens a prefix cache must leave to be computed for decoding to select as without the cache:
// asyncspade's predictor needs the queries of the last window + 1 positions (a cached prefix brings keys,
// not queries); 1 otherwise (the last token's logits). s NULL: 1.
int64_t kvt_sparse_prompt_tail(const kvt_sparse *s);
const kvt_sparse_dims *kvt_sparse_get_dims(const kvt_sparse *s);
// Blocks of block_tokens positions that one sparse (layer, KV head) pair's decode step reads from the store at most,
// with n positions held (the working set a step keeps in the fast tier): ceil(n / block_tokens) for off and oracle
// (the oracle scores every key); otherwise the budget K (sink and recent included) as whole pages plus the two
// partial ones at sink and recent when the selection is page-aligned (quest's page, asyncspade's rerank_block or
// block), one block a position at token level; at most every block. Not counted: a re-rank's candidates that the
// worker prefetches beyond the K it keeps (speculative loads, evicted first by nothing but the store's policy). With
// share / share_layers a head's or layer's budget varies around K (the sum is kept): approximately per layer.
// p resolved or not.
int64_t kvt_sparse_step_blocks(const kvt_sparse_params *p, int64_t n, int64_t block_tokens);

// The figures of one (layer, KV head) pair over the steps recorded with stats (-1 where none).
typedef struct {
    int64_t n;             // steps with stats
    double mass_recall;    // mean
    double oracle_overlap; // mean
    double query_cos;      // asyncspade: mean cosine of the predicted and the real query (the group's, concatenated)
    double fallback_frac;  // asyncspade: share of its steps selected again with the real query (--sparse-fallback)
} kvt_sparse_pair_stat;
void kvt_sparse_pair_stats(const kvt_sparse *s, int32_t layer, int32_t kh, kvt_sparse_pair_stat *out);

// The steps recorded, aggregated over every sequence (records dropped with their sequence included).
typedef struct {
    int64_t n_steps;
    int64_t summary_bytes;         // bytes of the key summaries reserved (kvt_sparse_summary_bytes)
    int64_t summary_peak_bytes;    // the most bytes of key summaries held at once (every sequence, shared copies once)
    double selected_frac;          // positions attended / positions held, over the sparse (layer, KV head) pairs
    double kv_read_bytes;          // per step, mean
    double summary_read_bytes;     // per step, mean
    double stall_ms;               // per step, mean
    double wait_ms;                // per step, mean: of stall_ms, waiting for the asyncspade worker
    double worker_ms, worker_cpu_ms; // asyncspade: the worker's wall and thread CPU time in its jobs, per step (every
                                   // sequence's jobs over every sequence's steps)
    double oracle_overlap;         // mean over (step, layer, KV head) pairs (-1: no stats)
    double mass_recall, mass_recall_p5; // mean and 5th percentile over the pairs (-1: no stats)
    double query_cos;              // asyncspade with stats: mean cosine of predicted and real query (-1: none)
    double fallback_frac;          // asyncspade: share of its predicted (step, layer, KV head) selections redone
                                   // with the real query (--sparse-fallback; 0 without)
    double rerank_resid_rows;      // --sparse-rerank-resid: the mean share of a candidate's int8 key rows its residual
                                   // calls read (-1: none)
    double rerank_resid_exact_frac; // --sparse-rerank-resid: share of the re-rank's (call, KV head) pairs that took
                                   // the exact pass (more than half the rows needed; no kept scores)
} kvt_sparse_summary;
// NOMEM only for the percentile's sort buffer.
kvt_status kvt_sparse_summarize(const kvt_sparse *s, kvt_sparse_summary *out, kvt_err *err);

// Cumulative counters of every decode step of every sequence since init (kvt_sparse_steps_clear does not reset them;
// sequences freed since included): cheap to read at any time between steps (serve's /metrics).
typedef struct {
    int64_t steps;              // sparse decode steps (tokens decoded by a sequence)
    int64_t selected, context;  // positions attended / held, summed over the sparse (layer, KV head) pairs
    int64_t kv_read_bytes;      // K and V bytes of the attended rows (dense layers included)
    int64_t summary_read_bytes; // bytes of key summaries scanned to select
    double stall_ms;            // time the steps waited for selections
    double wait_ms;             // of which waiting for the asyncspade worker
    double worker_ms, worker_cpu_ms; // asyncspade: the worker's wall and thread CPU time in its jobs
    int64_t predicted, fallbacks; // asyncspade: predicted (layer, KV head) selections used, of which redone with the real
                                  // query; counted only with --sparse-fallback or --sparse-stats (the cosine check)
    int64_t summary_held, summary_peak; // bytes of key summaries held now and at the most (every sequence, a shared base
                                        // once; gauges of the context, not of the steps)
    int64_t summary_reserved;     // bytes reserved for them in --kv-fast (kvt_sparse_summary_bytes; -1: no --kv-fast)
    int64_t summary_pooled;       // bytes of freed sequences' summary buffers kept for the next ones, and of those warmed
                                  // ahead of use (kvt_sparse_warm) (a gauge; at most twice one sequence's at n_ctx, and
                                  // held + pooled within the reservation)
    int64_t summary_reuses;       // summary buffers a sequence took from those instead of new memory (a counter)
    int64_t summary_warm_bytes;   // bytes of those made and faulted in ahead of use (kvt_sparse_warm; a counter)
    int64_t summary_kept;         // bytes of summaries prefix caches keep (kvt_sparse_seq_free_keep; a gauge, outside
                                  // summary_held and the reservation)
} kvt_sparse_totals;
void kvt_sparse_totals_get(const kvt_sparse *s, kvt_sparse_totals *out);
// One step of warming the key summaries' pool ahead of use, for a caller with nothing else to do (serve's idle engine,
// between the store's warming steps): makes and faults in one more buffer of those a sequence's layers take when they
// grow from position 0 to fill a room, and pools it. The rooms: `positions` (at most n_ctx), then halves of it while
// one sequence's summaries of a room are min_set bytes or more (KVT_SPARSE_WARM_MIN_SET_DEFAULT: a shorter prompt's
// smaller buffers fault in quickly enough); one set of each, largest first, within the pool's bound (twice one
// sequence's summaries at n_ctx), the reservation (held + pooled) and max_bytes of pooled buffers (-1: no bound);
// pooled buffers of other sizes (shorter sequences', freed) leave the pool first when it is full. A layer that grows
// from position 0 then takes the buffers of the smallest room that holds its need and less than twice it (as the
// doubling's own worst case) instead of new memory, whose first touch is slow where the host reclaims free memory
// (docs/SERVING.md "Memory warmed ahead of use"): the same selections and values. Whether it made or dropped one
// (call again) or not (nothing to do, or out of memory: a later call looks again). s NULL or no summaries: false.
// The caller's thread (as kvt_sparse_layer_keys), never during a forward pass.
enum { KVT_SPARSE_WARM_MIN_SET_DEFAULT = 4 << 20 };
bool kvt_sparse_warm(kvt_sparse *s, int64_t positions, int64_t min_set, int64_t max_bytes);
// Adds the recorded decode steps of sequence seq at positions >= pos0 (kvt_sparse_steps) into *acc: steps, selected,
// context, kv_read_bytes, summary_read_bytes, stall_ms, wait_ms (the worker's times, the predicted / fallback counts
// and the summary bytes are kept per context only: acc's are left as they are). s NULL, or no records: *acc unchanged. Serve's
// per-request figures: called before the request's sequences are freed (their records go with them).
void kvt_sparse_seq_totals_add(const kvt_sparse *s, int32_t seq, int64_t pos0, kvt_sparse_totals *acc);

// --- pieces, exposed for the tests ---------------------------------------------------------------------

// Predicts the next row of a sequence of rows hist[0 .. n) ([n, d], oldest first): for each window w of
// windows[0 .. nw) with n >= w + 1, ridge regression of the last row on the w rows before it
// (min |X^T a - y|^2 + lambda * tr(X X^T) / w * |a|^2), a softmax-normalized when `softmax` is set, then
// applied to the last w rows (shifted by one); the estimates are averaged. n < 2 or no usable window: the
// last row (zeros for n = 0). work: kvt_sparse_predict_work_floats(max window, d) floats.
int64_t kvt_sparse_predict_work_floats(int32_t max_window, int32_t d);
void kvt_sparse_predict(const float *hist, int32_t n, int32_t d, const int32_t *windows, int32_t nw, double lambda,
                        bool softmax, float *out, float *work);
// The same with each window's weights a = argmin over the simplex (a >= 0, sum a = 1) of the ridge objective
// (the weights a softmax can express, the regression solved under that constraint rather than normalized after).
void kvt_sparse_predict_simplex(const float *hist, int32_t n, int32_t d, const int32_t *windows, int32_t nw, double lambda,
                                float *out, float *work);

// Rotates rows hist[0 .. n) ([n, heads * head_dim], row i the RoPE'd query heads of position P - n + i) to
// position P's RoPE phase in place (row i by n - i positions): a query predicted from the rows is then the
// prediction made before RoPE with P's RoPE applied. cs: rope->n_rot floats of scratch.
void kvt_sparse_rope_align(float *hist, int32_t n, int32_t heads, int32_t head_dim, const kvt_rope_params *rope, float *cs);

// Upper bound of q . k over every k with lo <= k <= hi element-wise ([d] each).
float kvt_sparse_quest_bound(const float *q, const float *lo, const float *hi, int32_t d);

// The positions of [0, n) to attend with budget K: [0, sink) and [n - recent, n) always, then the
// highest score[] of the rest (ties: the lower position): max(K, sink + recent) positions in all, at most n.
// sel: sorted positions; returns their count. mark: n bytes of scratch. vals: n floats of scratch.
int64_t kvt_sparse_topk(const float *score, int64_t n, int64_t K, int64_t sink, int64_t recent, int32_t *sel,
                        uint8_t *mark, float *vals);
// The same positions as kvt_sparse_topk when score is constant over each page (positions outside [sink, n - recent)
// excepted), found over the pages instead of the positions: x's page is x / B (pos NULL), or pos[x] / B (pos: n sorted
// positions, e.g. candidates; score[x] the score of pos[x]). vals, wts: (pages met) + 2 of scratch each.
int64_t kvt_sparse_topk_pages(const float *score, int64_t n, int64_t K, int64_t sink, int64_t recent, int32_t B,
                              const int32_t *pos, int32_t *sel, float *vals, int32_t *wts);

#endif
