// sparse_impl.h - what the files of src/sparse/ share (not part of the library's interface).
//
// The state of a kvt_sparse is split in two: what is shared by every sequence of the context (settings,
// scratch of the selecting threads, the asyncspade worker and its job queue, the aggregates of the steps),
// and one kvt_sparse_seq per sequence that has attended sparsely (its key summaries, query history,
// selection of its next decode step, step records), created on demand and freed with the sequence.
//
// Threads: the caller (the forward pass; fork, free, truncate) owns every field, except that the worker,
// while a (sequence, layer) job is queued or running (sp_layer.busy, under mu), reads that layer's summaries
// and history and writes its selection and predicted query. The caller touches a layer of a sequence only
// after waiting for that layer's job (kvt_sparse_wait_layer), so the two never overlap.
#ifndef KVT_SPARSE_IMPL_H
#define KVT_SPARSE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "sparse.h"

enum { KVT_SPARSE_MAX_WINDOWS = 8 };

// The selection's loops built for AVX-512, AVX2 and the baseline (target_clones), vectorized: plain float and double
// operations without contraction (ISO C mode), so every clone computes the same bits as the scalar code.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__) // the clones' resolver runs before the sanitizers' runtime is set up
#define KVT_SPARSE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), optimize("vect-cost-model=dynamic")))
#else
#define KVT_SPARSE_CLONES
#endif

// Scratch of one selecting thread (the caller's, or the worker's); sized for n_ctx positions.
typedef struct {
    float *raw;   // [qpg, n_ctx] scores
    float *agg;   // [n_ctx] aggregated score
    float *vals;  // [n_ctx] top-k scratch
    uint8_t *mark;// [n_ctx]
    float *pred;  // [qpg * head_dim] predicted query of a group
    float *work;  // predictor work
    float *al;    // [W + 1][qpg * head_dim] the history rotated to the predicted position (rope_align)
    float *cs;    // [n_rot] a rotation's cos/sin
    float *hrow;  // [W + 1][head_dim] one query head's history (ridge-head)
    int64_t *blk; // [n_ctx] blocks of a selection (prefetch)
    int32_t *csel;// [n_ctx] a re-rank's choice, as indices into the candidates; the best candidates (prefetch_top);
                  // in a re-rank's pass 1, its candidates past a shared base as positions in the own key copies
    int32_t *wts; // [n_ctx + 2] page weights of kvt_sparse_topk_pages
} kvt_sparse_scratch;

// The key summaries of positions [0, n) of one layer of a sequence (asyncspade's copies, quest's bounds), frozen when
// the sequence was forked and shared by it and its forks (each holds a reference; the last to let go frees it). Never
// written once made, so a fork costs only the positions past n (a beam's continuations share the prompt's). buf: the
// layer's buffers as they were (asyncspade k8, k8s, k4, k4s; quest lo, hi, NULL, NULL), `stride` blocks per KV head
// (blocks of 16 positions; quest: pages); n a multiple of the block.
typedef struct {
    int64_t n, stride;
    void *buf[4];
    int64_t bytes; // their allocated bytes, counted once in kvt_sparse.summary_held (summary_kept once kept)
    int32_t refs;  // layers and kept summaries (kvt_sparse_ksum) that hold it (their callers serialize forks and frees)
    int32_t kept;  // the kept summaries among them: while > 0 its bytes are in summary_kept instead of summary_held (the
                   // last one let go while layers still hold it: back in summary_held, under the reservation again)
} kvt_sparse_kbase;

// One layer of one sequence. Buffers hold `cap` positions per KV head (grown as the sequence grows, at most
// n_ctx); rows of KV head kh start at kh * cap (pages: kh * pages(cap)). The key summaries (asyncspade's copies,
// quest's bounds) after a fork, or from a prefix cache's kept summaries: the positions [0, off) in the shared base kb
// (off <= kb->n, whole blocks: a sequence may share a base's first positions only), the layer's own buffers only [off, cap),
// rows of kh at kh * (cap - off) (pages: kh * pages(cap - off); position t at t - off); off = 0 and kb = NULL
// otherwise.
typedef struct {
    int64_t cap;        // positions the buffers have room for
    int64_t key_n;      // keys [0, key_n) are in the summaries (the rest is read from the store when needed)
    kvt_sparse_kbase *kb; // the shared summaries of positions [0, off), or NULL (off: kvt_sparse_off)
    int64_t koff;       // off with kb, <= kb->n
    int8_t *k8;         // asyncspade (a width of 8 used): [Hkv][(cap - off) * hd] int8 keys in blocks of 16 positions
                        // (kvt_sparse_k8_at; cap a multiple of 16)
    float *k8s;         // asyncspade: [Hkv][cap - off] their scales
    uint8_t *k4;        // asyncspade (a width of 4 used): [Hkv][(cap - off) * kvt_sparse_k4_row(hd)] 4-bit keys (kvt_sparse_k4_at)
    uint16_t *k4s;      // asyncspade: [Hkv][(cap - off) * kvt_sparse_k4_groups(hd)] their group scales, f16 (kvt_sparse_k4s_at)
    float *lo, *hi;     // quest: [Hkv][pages(cap - off)][hd] key bounds
    int32_t *sel;       // [Hkv][cap] the selected positions of the next step
    float *sel_score;   // [Hkv][cap] asyncspade: the predicted score of each of sel's positions (the prefetch order)
    int64_t *nsel;      // [Hkv]
    float *hist;        // asyncspade: [Hkv][W + 1][gd] last queries, oldest first
    float *pred_q;      // asyncspade: [Hkv][gd] the predicted query of the selection
    double *gram;       // asyncspade: [Hkv][(W + 1) * (W + 1)] the dot products of hist's rows (kvt_sparse_gram_update:
                        // row-major, stride W + 1), brought up to date by the selecting thread
    int32_t gram_n;     // the leading rows of hist whose products gram held when it was last brought up to date
    int32_t gram_shift; // rows hist dropped from its front since then (counted by the caller, applied by the selector)
    int32_t hist_n;     // rows of hist held
    int64_t hist_next;  // the position the next call must start at (else a rewind: the history restarts)
    float *qlog;        // asyncspade: [Hkv][kvt_sparse_qlog_rows][gd] the queries of positions [qlog_end - qlog_n, qlog_end),
                        // position t in row t % kvt_sparse_qlog_rows: a truncate to n rebuilds hist from them (its rows of
                        // [n - W - 1, n)) when they reach back that far (sparse_seq.c hist_cut)
    int64_t qlog_end;
    int32_t qlog_n;
    int64_t sel_pos;    // the decode position sel is for (-1: none)
    uint8_t *kept;      // asyncspade with keep: [Hkv][pages of rerank_block positions at n_ctx] 1 where the final set
                        // of decode position kept_pos held the page
    int64_t kept_pos;   // the decode position whose final set kept describes (-1: none)
    uint8_t *klog;      // asyncspade with keep: [kvt_sparse_qlog_rows][Hkv][(pages + 7) / 8] kept as bits, of the decode
                        // position klog_pos[r] (-1: none) in row r = position % kvt_sparse_qlog_rows: a truncate to n that
                        // rebuilds hist takes kept of n - 1 back from them (sparse_seq.c hist_cut)
    int64_t *klog_pos;  // [kvt_sparse_qlog_rows]
    // asyncspade with share_layers: the pieces of pages the layer's share_choose ranked at decode position lpos (every
    // KV head's, side by side: ln of them, their mass lv (without the hysteresis' factor) and candidates lw;
    // [kvt_sparse_layer_pieces]) and the middle
    // positions its own budget gave them (lkk); lalloc: the middle positions the shared budgets give the layer at the
    // step of kvt_sparse_seq.lb_pos (-1: its own)
    float *lv;
    int32_t *lw;
    int64_t ln, lkk, lpos, lalloc;
    float *shat;        // --sparse-rerank-resid: [Hkv][qpg * cap] the worker's raw predicted scores of its last selection
                        // (row i of head kh at kh * qpg * cap + i * (sel_pos + 1), indexed by position)
    double *rs_cal;     // --sparse-rerank-resid: [Hkv][2] the head's calibration: re-rank calls measured, the sum of the
                        // shares of their candidates' mass the chosen pages held (sparse_choose.c); from rerank_resid_cal
                        // calls on, the mean against rerank_resid_gate decides between the residual and the exact pass
    // asyncspade: what the current pass (kvt_sparse.pass) changed, so that a failed pass can be taken back whole
    // (kvt_sparse_seq_undo): the history rows it pushed out ([Hkv][W + 1][gd], the first undo_n of each head, oldest
    // first), the history's length and next position, and the hysteresis' pages ([Hkv][pages]) when it used them
    float *undo_hist;
    uint8_t *undo_kept;
    uint64_t undo_pass; // the pass that saved them (0: none)
    int32_t undo_n, undo_hist_n;
    int64_t undo_hist_next, undo_kept_pos;
    bool undo_kept_saved;
    uint8_t busy;       // a worker job for this layer is queued or running (under mu)
} kvt_sparse_layer;

// Queries a layer's log keeps per KV head (kvt_sparse_layer.qlog): the window's W + 1 and KVT_SPARSE_QLOG_DEPTH more, so
// that a truncate up to that many positions back from the last query observed keeps the history.
enum { KVT_SPARSE_QLOG_DEPTH = 32 };
static inline int32_t kvt_sparse_qlog_rows(const kvt_sparse_params *p) { return p->window + 1 + KVT_SPARSE_QLOG_DEPTH; }

// The first position of ly's own key summaries: its shared base's end, or 0.
static inline int64_t kvt_sparse_off(const kvt_sparse_layer *ly) { return ly->kb ? ly->koff : 0; }

// One sequence.
typedef struct {
    kvt_sparse_layer *lay;   // [n_layer]
    int64_t summary_bytes;   // bytes of its key summaries (k8, k8s, lo, hi) allocated
    kvt_sparse_step cur;     // the step being recorded (layer 0 opens it, the last layer closes it)
    kvt_sparse_step *steps;  // records of its decode steps (dropped with the positions they decoded)
    int64_t n_steps, cap_steps;
    int64_t lb_pos;          // share_layers: the decode position the layers' lalloc were set for
} kvt_sparse_seq;

typedef struct {
    int32_t seq, layer;
    int64_t pos; // the decode position to select for
} kvt_sparse_job;

// kvt_sparse_warm's rooms at most (every halving of any int64_t room)
enum { KVT_SPARSE_WARM_ROOMS = 64 };

struct kvt_sparse {
    kvt_sparse_params p;
    kvt_sparse_dims d;
    int32_t qpg, gd;         // query heads per KV head; floats of a group's query (qpg * head_dim)
    int32_t windows[KVT_SPARSE_MAX_WINDOWS], nw;
    kvt_sparse_seq **seqs;   // [n_seqs] per sequence (NULL: none yet); the table is reallocated under mu
    int32_t n_seqs;
    int64_t summary_held;    // bytes of key summaries over every sequence
    int64_t summary_peak;    // the most summary_held has been
    int64_t summary_kept;    // bytes of the shared bases prefix caches hold (kvt_sparse_ksum): outside summary_held and
                             // the reservation (the cache's own budget bounds them) while a kept copy holds them
    int64_t summary_limit;   // at most this many (d.bounded), else -1
    uint64_t pass;           // the forward pass under way (kvt_sparse_pass_begin; the layers' undo records name it)
    // the key-summary buffers a freed sequence's layers left, kept for the next sequence's (sparse_seq.c keys_alloc /
    // keys_free): a new big buffer's 2 MiB pages are zeroed by the kernel at first touch (~25 ms for SmolLM2's 30
    // layers at 6K), and that first touch took 0.3-0.5 s now and then on a VM. big: a record of every buffer keys_alloc
    // made ([n_big]), pooled ones free for reuse; their bytes at most pool_max (twice one sequence's summaries at n_ctx) and,
    // under a reservation, summary_held + pooled_bytes <= summary_limit.
    struct kvt_sparse_big {
        void *p;
        int64_t size;   // allocated bytes (kvt_sparse_alloc_bytes)
        bool pooled;
        uint64_t tick;  // pool_tick when it was pooled (the oldest leave first)
    } *big;
    int64_t n_big, cap_big, pooled_bytes, pool_max;
    uint64_t pool_tick;
    int64_t pool_reuses;     // buffers taken from the pool (a counter)
    // kvt_sparse_warm: the rooms (positions of a layer, largest first) whose buffers it pools ahead of use ([n_warm]),
    // and the bytes it made and faulted in (a counter)
    int64_t warm_caps[KVT_SPARSE_WARM_ROOMS];
    int32_t n_warm;
    int64_t warm_bytes;
    float **scratch;         // [n_threads] attention scratch
    float *exact;            // [Hkv][n_ctx] exact aggregated scores (oracle, stats)
    int32_t *osel;           // [n_ctx] the oracle set (stats)
    float *kbuf;             // [KVT_SPARSE_CATCHUP][Hkv * hd] keys read back from the store
    kvt_sparse_scratch main_ss, work_ss;
    kvt_sparse_scratch *rr_ss;  // asyncspade with a re-rank: [n_threads] per pool thread (its heads in parallel), else NULL
    // asyncspade with a re-rank: each KV head's state between the passes of kvt_sparse_rerank (sparse_choose.c)
    float *rr_raw;           // [Hkv][qpg * n_ctx] the candidates' scores, then their softmax terms
    int16_t *rr_q16;         // [Hkv][gd] the real query as int16 (kvt_sparse_quant_query)
    float *rr_qs;            // [Hkv][qpg] its row scales
    float *rr_inv;           // [Hkv][qpg] 1 / each row's exp sum (kvt_sparse_softmax_row)
    // --sparse-rerank-resid: each KV head's residual plan (kvt_sparse_resid_plan, sparse_resid.c): nr rows (0: the
    // exact pass), their indices, the residual over them as int8 [qpg][4 * nr], 128 * each row's sum, scale * its scale
    int32_t *rs_nr, *rs_rows, *rs_corr; // [Hkv], [Hkv][hd / 4], [Hkv][qpg]
    int8_t *rs_d8;           // [Hkv][gd]
    float *rs_qs;            // [Hkv][qpg]
    // asyncspade with share: the layer's pages over every KV head, for one top-k (kvt_sparse_rerank, share_choose)
    float *sh_vals;            // [Hkv][n_ctx] each head's pieces (its middle candidates cut at page ends): their score
    int32_t *sh_wts;           // [Hkv][n_ctx] and their candidates
    float *sh_raw;             // share_layers: [Hkv][n_ctx] the pieces' mass without the hysteresis' factor
    float *sh_v;               // [Hkv * n_ctx] every head's pieces side by side, reordered by the threshold's search
    int32_t *sh_w;             // [Hkv * n_ctx]
    int64_t *sh_cnt;           // [3 * Hkv] per head: sink candidates, recent candidates, pieces
    // asyncspade with share_layers: every layer's pieces side by side (kvt_sparse_layer_budgets), and a copy the
    // threshold's search reorders: [n_layer * kvt_sparse_layer_pieces]
    float *ls_v, *ls_v2;
    int32_t *ls_w, *ls_w2;
    float *krow;             // [hd] a key rounded to the store's type
    void *krow_t;            // its row in that type
    // the asyncspade worker
    pthread_t th;
    bool has_worker, stop;
    // the worker gives the cores to the re-rank (on the critical path): rr_running counts the re-ranks under way; the
    // worker checks it between parts of its scan and sleeps on cv while it is not 0, with worker_paused set (sparse_choose.c)
    _Atomic int32_t rr_running, worker_paused;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kvt_sparse_job *queue;   // ring of cap_queue jobs, q_count of them from q_head
    int64_t cap_queue, q_head, q_count;
    float scale;             // the attention scale (set before the first job is posted)
    kvt_kv *kv;              // the store (set likewise): the worker hands it the chosen blocks as prefetches
    // aggregates of every step of every sequence since init (or the last kvt_sparse_steps_clear)
    int64_t agg_steps, agg_pairs;
    double agg_sel, agg_ctx, agg_kv_read, agg_summary_read, agg_stall, agg_wait, agg_ovl, agg_mass;
    double agg_worker_ms, agg_worker_cpu_ms; // the worker's wall and thread CPU time in its jobs (under mu)
    float *pair_mass;        // mass recall of every (step, layer, KV head) pair with stats
    int64_t n_pair_mass, cap_pair_mass;
    // per (layer, KV head) pair: steps with stats, sums of mass recall, oracle overlap, query cosine; fallbacks
    int64_t *ps_n, *ps_fb, *ps_ncos;
    double *ps_mass, *ps_ovl, *ps_cos;
    int64_t n_pred_sel, n_fallback; // asyncspade: predicted selections used, of which redone with the real query
    kvt_sparse_totals tot;   // since init, never cleared (kvt_sparse_totals_get); worker_ms / worker_cpu_ms under mu
    int64_t n_rr_resid, n_rr_exact, n_rr_rows; // --sparse-rerank-resid: (call, KV head) pairs by the residual, by the
                                               // exact pass after calibration (the gate not passed); rows the residual
                                               // ones read
};

enum { KVT_SPARSE_CATCHUP = 64 }; // positions read back from the store per chunk

// Positions attended out of n held.
int64_t kvt_sparse_budget_of(const kvt_sparse *s, int64_t n);
// n bytes zeroed, 64-byte aligned (free()); NULL and *ok = false when out of memory. Buffers of KVT_SPARSE_HUGE_MIN bytes
// or more (a layer's int8 key copies at a long context) are 2 MiB-aligned, rounded up to whole 2 MiB and advised as huge
// pages (transparent huge pages where the kernel has them; madvise mode is enough): kvt_sparse_alloc_bytes(n) bytes (0 for 0)
// are allocated, and the summary bytes count that.
void *kvt_sparse_zalloc(size_t n, bool *ok);
int64_t kvt_sparse_alloc_bytes(int64_t n);
enum { KVT_SPARSE_HUGE_MIN = 1 << 20 };
// Bytes allocated for one layer's key summaries of H KV heads with room for cap positions (np pages of them):
// quest the pages' min and max (f32), asyncspade the key copies of each width p uses (key_bits, rerank_bits) and their
// f32 scales (kvt_sparse_alloc_bytes each).
int64_t kvt_sparse_layer_summary_bytes(const kvt_sparse_params *p, int64_t H, int64_t hd, int64_t cap, int64_t np);

// --- sparse_seq.c: per-sequence state ------------------------------------------------------------------

// Pages of kvt_sparse_layer.kept per KV head (0: no hysteresis, kept is NULL).
int64_t kvt_sparse_kept_pages(const kvt_sparse *s);
// ly->kept, just made for decode position ly->kept_pos, into its log (ly->klog; a no-op without one).
void kvt_sparse_kept_log(const kvt_sparse *s, kvt_sparse_layer *ly);

// Pieces of pages a layer's share_layers record holds (kvt_sparse_layer.lv; 0: no share_layers).
int64_t kvt_sparse_layer_pieces(const kvt_sparse *s);

// The state of seq, created when missing (NULL only when out of memory).
kvt_sparse_seq *kvt_sparse_seq_get(kvt_sparse *s, int32_t seq);
void kvt_sparse_seq_destroy(kvt_sparse *s, kvt_sparse_seq *q);
// Before the pass under way (kvt_sparse_pass_begin) changes ly, at its first call for ly: what kvt_sparse_seq_undo
// needs to take the pass back (asyncspade; a no-op otherwise).
void kvt_sparse_undo_save(kvt_sparse *s, kvt_sparse_layer *ly, int64_t pos0, int64_t n);
// Room for `need` positions in layer's buffers (at most n_ctx). KVT_ERR_BUDGET when the summaries would pass
// the reservation, KVT_ERR_NOMEM.
kvt_status kvt_sparse_layer_reserve(kvt_sparse *s, kvt_sparse_seq *q, int32_t layer, int64_t need, kvt_err *err);
// Brings layer's summaries to keys [0, pos0): a rewind below key_n cuts them back (to the page start for
// quest), keys missing below pos0 are read back from the store. Then keys [pos0, pos0 + n) (k: [n, Hkv * hd]
// f32, NULL: read them from the store too) enter them. A layer that is never sparse (!sparse_layer: sliding
// window, dense_layers) keeps no summaries.
kvt_status kvt_sparse_layer_keys(kvt_sparse *s, kvt_kv *kv, int32_t seq, kvt_sparse_seq *q, int32_t layer, int64_t pos0,
                                 int64_t n, const float *k, bool sparse_layer, kvt_err *err);
// The queries of a call's n tokens at pos0 into layer's history (the last window + 1 rows per KV head) and its log (the
// last kvt_sparse_qlog_rows); rewind: both restart.
void kvt_sparse_observe_queries(kvt_sparse *s, kvt_sparse_layer *ly, int64_t pos0, int64_t n, const float *q, bool rewind);

// --- sparse_choose.c: selection and the worker -----------------------------------------------------------

// The next selection of every KV head of ly from its predicted query (with a re-rank: rerank * K candidates). pf_layer
// >= 0: each head's blocks go to the store's copy engine as it is selected (as (pf_seq, pf_layer); prefetch_top: the
// best candidates' only, best first); -1: none.
void kvt_sparse_select_predicted(kvt_sparse *s, kvt_sparse_layer *ly, kvt_sparse_scratch *ss, int64_t P, float scale,
                                 int32_t pf_seq, int32_t pf_layer);
// KV head kh's selection as the worker makes it (the same count: with a re-rank its candidates, rerank * K; pages of
// --sparse-block when that is > 1), but from the real query qg ([qpg * head_dim]) on the key copies of --sparse-rerank-bits:
// the fallback's (a head whose prediction missed) and the real layers'; the re-rank then narrows it as the worker's.
void kvt_sparse_select_real(kvt_sparse *s, kvt_sparse_layer *ly, int32_t kh, int64_t P, const float *qg, float scale);
void kvt_sparse_check_predicted(kvt_sparse *s, kvt_sparse_layer *ly, int32_t layer, int64_t P, const float *q, float scale);
// The K best of each KV head's candidates (its current selection: F*K positions from the predicted query) by the
// real query q on the int8 keys, the candidates only scored (softmax of each query head over the candidates). pool:
// one task per KV head (NULL: all on the caller); the same bits either way.
// predicted: the candidates come from the worker's predicted query (its scores in ly->shat: --sparse-rerank-resid may
// score their residual); false for a --sparse-real-layers layer, whose selection used the real query.
void kvt_sparse_rerank(kvt_sparse *s, kvt_sparse_layer *ly, int64_t P, const float *q, float scale, kvt_threadpool *pool,
                       bool predicted);
// share_layers, before the re-rank of decode position P (once per step and sequence: q->lb_pos): each layer's lalloc
// from the records of step P - 1 of every layer that has one (lpos = kept_pos = P - 1): one threshold over all their
// pieces of pages (the best layer_floor of each layer's own budget first) for the sum of their own budgets (lkk); the
// other layers keep their own (-1). Serial, in layer order: the same bits for every thread count and schedule.
void kvt_sparse_layer_budgets(kvt_sparse *s, kvt_sparse_seq *q, int64_t P);
void kvt_sparse_select_quest(kvt_sparse *s, kvt_sparse_layer *ly, int64_t P, const float *q, float scale);
void kvt_sparse_select_oracle(kvt_sparse *s, kvt_sparse_layer *ly, int64_t P);
void *kvt_sparse_worker_main(void *arg);
// --sparse-rerank-resid (sparse_resid.c): KV head kh's plan for this re-rank (s->rs_*: the rows holding the share of the
// residual q - q^'s energy, or 0 rows: the exact pass, while calibrating or where the gate is not passed), q the group's
// real query [gd], from ly->pred_q; serial, before pass 1. Then pass 1 over the candidates sel[x0, x1) (stride nc): raw =
// s^ + the residual's product on the plan's rows.
void kvt_sparse_resid_plan(kvt_sparse *s, const kvt_sparse_layer *ly, int32_t kh, const float *q, float scale);
void kvt_sparse_resid_score(const kvt_sparse *s, const kvt_sparse_layer *ly, int32_t kh, int64_t P, const int32_t *sel,
                            int64_t x0, int64_t x1, int64_t nc, float *raw);
// Waits until no job for (q, layer) is queued or running; the milliseconds waited.
double kvt_sparse_wait_layer(kvt_sparse *s, kvt_sparse_seq *q, int32_t layer);
// Every layer of q.
void kvt_sparse_wait_seq(kvt_sparse *s, kvt_sparse_seq *q);
// Queues the selection of (seq, layer) for decode position P (selected inline at the step when the queue
// cannot grow).
void kvt_sparse_post(kvt_sparse *s, kvt_sparse_seq *q, int32_t seq, int32_t layer, int64_t P);
// The blocks holding layer ly's selection of seq, handed to the paged store's copy engine (a no-op on other
// stores); ss: the calling thread's scratch. final: the set attention reads now (head-wise blocks: the store is
// told, kvt_kv_paged_set_selected, so that it evicts the blocks the set left out first); every block of it.
// Not final: the worker's candidates for decode position ly->sel_pos, ordered and cut by prefetch_top as the
// worker's own prefetch does (ly->sel_score).
void kvt_sparse_prefetch_selection(kvt_sparse *s, kvt_sparse_scratch *ss, const kvt_sparse_layer *ly, int32_t seq,
                                   int32_t layer, bool final);
// prefetch_layers > 0: the selection prefetch_layers layers ahead goes to the store if the worker made it.
void kvt_sparse_prefetch_ahead(kvt_sparse *s, kvt_sparse_seq *q, int32_t seq, int32_t layer, int64_t P);

// --- sparse_attn.c ---------------------------------------------------------------------------------------

// Floats of one thread's scratch for kvt_sparse_attend_set / kvt_sparse_score_exact (64-byte aligned).
int64_t kvt_sparse_attn_scratch_floats(const kvt_sparse_dims *d);

// Exact attention of the single query token q ([n_head * head_dim]) over the selected positions of each
// KV head: sel + kh * sel_stride, nsel[kh] sorted positions. out: [n_head * head_dim_v]. One task per KV head.
// late: a batch of the set's disk reads is in flight (kvt_kv_paged_prefetch_end_async): the resident blocks' work is
// done while it completes and the rest after kvt_kv_paged_late_wait, with the same bits (sparse_attn.c
// attend_pass_task).
kvt_status kvt_sparse_attend_set(kvt_kv *kv, int32_t seq, int32_t layer, const kvt_attn_params *p, const float *q,
                                 const int32_t *sel, const int64_t *nsel, int64_t sel_stride, bool late, float *out,
                                 kvt_threadpool *pool, float *const *scratch, kvt_err *err);
// The oracle score of positions [0, n) of every KV head with the real query: agg + kh * agg_stride gets the sum
// over the group's query heads of their softmax probabilities (keys read from the store).
kvt_status kvt_sparse_score_exact(kvt_kv *kv, int32_t seq, int32_t layer, const kvt_attn_params *p, const float *q,
                                  int64_t n, float *agg, int64_t agg_stride, kvt_threadpool *pool, float *const *scratch,
                                  kvt_err *err);
// Keys [pos0, pos0 + n) of (seq, layer) read back from the store as f32: k [n, n_head_kv * head_dim]. On the
// caller's thread.
kvt_status kvt_sparse_read_keys(kvt_kv *kv, int32_t seq, int32_t layer, int64_t pos0, int64_t n, float *k, kvt_err *err);
// s: [qpg, n] raw scores (overwritten); agg[t] = sum_i softmax(s_i)[t] (kvt_sparse_exp_neg, partial sums in a
// fixed order: the same bits on every call). A row with no finite score adds nothing.
void kvt_sparse_aggregate(float *s, int32_t qpg, int64_t n, float *agg);
// kvt_sparse_aggregate in two parts (the rows may run on different threads, the same bits): one row's softmax terms
// (s [n] overwritten by exp(s - max)), returning 1 / their sum (NaN: no finite score, the row adds nothing); then
// agg[t] = sum_i s_i[t] * inv[i] over the rows in order (row i at s + i * stride, n of its terms).
float kvt_sparse_softmax_row(float *s, int64_t n);
// The same with the terms into e [n] (s kept): the same bits in e as kvt_sparse_softmax_row gives in s.
float kvt_sparse_softmax_row_to(const float *s, float *e, int64_t n);
// Every position of each page of B positions ([p0, p0 + B), the last page cut at n) set to the sum of the page's scores,
// summed in position order (the same bits as a serial loop per page; pages side by side in vector lanes).
void kvt_sparse_page_sums(float *score, int64_t n, int32_t B);
// m[j] = the in-order sum (from 0) of a[j B .. j B + B) for j < 16 (the rerank's pieces of whole pages, 16 at once).
void kvt_sparse_piece_sums16(const float *a, int32_t B, float *m);
void kvt_sparse_aggregate_rows(const float *s, int32_t qpg, int64_t n, int64_t stride, const float *inv, float *agg);

// Bounds of the selection's stack rows (sparse_score.c, sparse.c).
enum { KVT_SPARSE_MAX_HD = 512, KVT_SPARSE_MAX_QPG = 64 };

// The qpg query rows q ([qpg, hd] f32) as int16 (q16 [qpg, hd]) with one scale per row (qscale [qpg]):
// q ~ q16 * qscale, max |q16| = 32767 (non-finite values count as 0).
void kvt_sparse_quant_query(const float *q, int32_t qpg, int32_t hd, int16_t *q16, float *qscale);
// The same with `bits` 16 (kvt_sparse_quant_query) or 8: max |q16| = 127 (an int8 query held in int16: the scans take one
// VNNI product per 4 dimensions instead of two; --sparse-rerank-qbits 8).
void kvt_sparse_quant_query_bits(const float *q, int32_t qpg, int32_t hd, int32_t bits, int16_t *q16, float *qscale);
// The layout of the int8 key copies (kvt_sparse_layer.k8, one KV head): blocks of 16 positions, each block hd / 4
// groups of 4 dimensions, each group 16 positions x 4 bytes (64 bytes): element x of position t at
// kvt_sparse_k8_at(t, x, hd). A group of 16 keys is then one vector row for VPDPBUSD (16 dot products at once, no
// horizontal sums). hd must be a multiple of 4; buffers hold a multiple of 16 positions.
static inline int64_t kvt_sparse_k8_at(int64_t t, int32_t x, int32_t hd) {
    return (t >> 4) * 16 * (int64_t)hd + (int64_t)(x >> 2) * 64 + (t & 15) * 4 + (x & 3);
}
// Positions of a key-copy buffer with room for n (whole blocks; both widths).
static inline int64_t kvt_sparse_k8_cap(int64_t n) { return (n + 15) / 16 * 16; }

// The layout of the 4-bit key copies (kvt_sparse_layer.k4, one KV head): blocks of 16 positions as the int8 layout, each
// block (hd + 7) / 8 rows of 64 bytes; row r holds the int8 layout's groups 2r (low nibbles) and 2r + 1 (high nibbles)
// of 4 dimensions x 16 positions (byte (t & 15) * 4 + (x & 3)), so that one 64-byte load, masked and shifted, gives two
// VPDPBUSD operands. Element x of position t is nibble (x >> 2) & 1 of byte kvt_sparse_k4_at(t, x, hd), stored as v + 8
// for v in [-7, 7]; the high nibbles of a last half row (hd % 8 == 4) are unused. One scale per group of 32 dimensions
// (kvt_sparse_k4_groups: hd / 32 groups, or one for the whole row when hd is not a multiple of 32), as f16 bits, the
// key's element x ~ v * scale of its group: group g of position t at kvt_sparse_k4s_at(t, g, ng) (16 positions side by
// side, one vector of a block per group).
static inline int64_t kvt_sparse_k4_row(int32_t hd) { return (hd + 7) / 8 * 4; } // bytes per position
static inline int64_t kvt_sparse_k4_at(int64_t t, int32_t x, int32_t hd) {
    return (t >> 4) * 16 * kvt_sparse_k4_row(hd) + (int64_t)(x >> 3) * 64 + (t & 15) * 4 + (x & 3);
}
static inline int32_t kvt_sparse_k4_groups(int32_t hd) { return hd % 32 == 0 ? hd / 32 : 1; }
static inline int64_t kvt_sparse_k4s_at(int64_t t, int32_t g, int32_t ng) { return (t >> 4) * 16 * ng + g * 16 + (t & 15); }
// Bytes per position of the key copies of `bits` (8: hd, 4: kvt_sparse_k4_row), and of their scales (8: one f32; 4:
// an f16 per group).
static inline int64_t kvt_sparse_key_row_bytes(int32_t bits, int32_t hd) { return bits == 4 ? kvt_sparse_k4_row(hd) : hd; }
static inline int64_t kvt_sparse_key_scale_bytes(int32_t bits, int32_t hd) { return bits == 4 ? 2 * kvt_sparse_k4_groups(hd) : 4; }

// Key copies of one KV head for the scans: kc in the layout of `bits` (8: kvt_sparse_k8_at, 4: kvt_sparse_k4_at), ks
// their scales (8: f32 [positions], the key ~ v * ks[t], v in [-127, 127]; 4: f16 bits at kvt_sparse_k4s_at, v in
// [-7, 7] times its group's scale).
typedef struct {
    const void *kc;
    const void *ks;
    int32_t bits;
} kvt_sparse_keys;
// The copies of `bits` of KV head kh in the buffers k8, k8s, k4, k4s of c positions per KV head.
static inline kvt_sparse_keys kvt_sparse_keys_in(const void *k8, const void *k8s, const void *k4, const void *k4s, int64_t c,
                                                 int32_t bits, int32_t kh, int32_t hd) {
    kvt_sparse_keys k = {bits == 4 ? (const void *)((const uint8_t *)k4 + kh * c * kvt_sparse_k4_row(hd))
                                   : (const void *)((const int8_t *)k8 + kh * c * (int64_t)hd),
                         bits == 4 ? (const void *)((const uint16_t *)k4s + kh * c * kvt_sparse_k4_groups(hd))
                                   : (const void *)((const float *)k8s + kh * c),
                         bits};
    return k;
}
// The copies of `bits` of KV head kh of ly's own buffers: position t (>= kvt_sparse_off(ly)) at t - kvt_sparse_off(ly).
static inline kvt_sparse_keys kvt_sparse_keys_of(const kvt_sparse_layer *ly, int32_t bits, int32_t kh, int32_t hd) {
    return kvt_sparse_keys_in(ly->k8, ly->k8s, ly->k4, ly->k4s, ly->cap - kvt_sparse_off(ly), bits, kh, hd);
}
// The copies of `bits` of KV head kh in ly's shared base (positions [0, kvt_sparse_off(ly)); ly->kb not NULL).
static inline kvt_sparse_keys kvt_sparse_base_keys_of(const kvt_sparse_layer *ly, int32_t bits, int32_t kh, int32_t hd) {
    const kvt_sparse_kbase *b = ly->kb;
    return kvt_sparse_keys_in(b->buf[0], b->buf[1], b->buf[2], b->buf[3], 16 * b->stride, bits, kh, hd); // (blocks of 16)
}

// Key k ([hd] f32) as position t of a KV head's copies of `bits` (kc, ks: that head's buffers, layouts above): 8, one f32
// scale per row, max |k| / 127; 4, one per group of dimensions, max |k| / 7 over the group rounded to f16 (1 for a zero
// group or one whose scale is no f16 normal); v = round(k / scale) within the range.
void kvt_sparse_quant_key(const float *k, int32_t hd, int32_t bits, int64_t t, void *kc, void *ks);

// raw[i * n + t] = scale * q_i . k_t with q_i = q16_i * qscale[i] and k_t the copy of any width for t < n_keys, -inf
// for n_keys <= t < n: int8, (float)(q16_i . v_t) * (ks[t] * qs) with qs = qscale[i] * scale; 4-bit, the same term per
// scale group (the group's integer sum times its scale times qs), the groups' terms added in order from the first. The
// integer sums are exact (|q16| <= 32767, |v| <= 127, hd <= 512 keep them below 2^31), so the same bits on every path.
void kvt_sparse_score_keys(const int16_t *q16, const float *qscale, int32_t qpg, int32_t hd, kvt_sparse_keys k,
                           int64_t n_keys, int64_t n, float scale, float *raw);
// The same products for positions [t0, t0 + n_keys) only (k: the KV head's whole buffers), position t written at
// raw[i * stride + t - t0] (a run of positions scored into its place in a wider row: the same bits as
// kvt_sparse_score_keys over those positions).
void kvt_sparse_score_keys_rows(const int16_t *q16, const float *qscale, int32_t qpg, int32_t hd, kvt_sparse_keys k,
                                int64_t t0, int64_t n_keys, int64_t stride, float scale, float *raw);
// The same products for the m sorted positions pos[0 .. m) (a re-rank's candidates), the x-th at raw[i * stride + x].
void kvt_sparse_score_keys_set(const int16_t *q16, const float *qscale, int32_t qpg, int32_t hd, kvt_sparse_keys k,
                               const int32_t *pos, int64_t m, int64_t stride, float scale, float *raw);
// The residual's loop: for the m sorted candidates pos, raw[i * stride + x] = shat[i * sh_stride + pos[x]] + (float)(the
// integer sum of d8 [qpg][4 nr] with the int8 keys' nr rows `rows`) * (ks[pos[x]] * qs[i]) (corr [qpg]: 128 * each row of
// d8's sum, for the kernel's unsigned form); the portable loop, or its AVX-512 VNNI form (sparse_resid_avx512.c) or its AVX2
// form (sparse_resid_avx2.c: |k| and d with k's sign in VPMADDUBSW, d in [-127, 127]; corr not needed): the same bits.
void kvt_sparse_resid_rows(const int8_t *d8, const int32_t *corr, const float *qs, int32_t qpg, int32_t hd, const int32_t *rows,
                           int32_t nr, kvt_sparse_keys k, const int32_t *pos, int64_t m, const float *shat, int64_t sh_stride,
                           int64_t stride, float *raw);
void kvt_sparse_resid_avx512(const int8_t *d8, const int32_t *corr, const float *qs, int32_t qpg, int32_t hd,
                             const int32_t *rows, int32_t nr, kvt_sparse_keys k, const int32_t *pos, int64_t m,
                             const float *shat, int64_t sh_stride, int64_t stride, float *raw);
void kvt_sparse_resid_avx2(const int8_t *d8, const float *qs, int32_t qpg, int32_t hd, const int32_t *rows, int32_t nr,
                           kvt_sparse_keys k, const int32_t *pos, int64_t m, const float *shat, int64_t sh_stride,
                           int64_t stride, float *raw);
// The 16-position blocks a scan visits (the vector kernels): the range [t0, t0 + n) (pos NULL) or the n sorted positions
// of pos (a run of entries in one block; pos strictly increasing: 16 entries from a block's start to its end are that
// whole block), from kvt_sparse_blocks_of. kvt_sparse_blocks_next gives the next block's first position *b0, the lanes to
// score (bit j: position b0 + j) and where the first of them goes (*out: its index in the range or the list; the others
// follow in lane order); false at the end. it->x: the list entries consumed so far.
typedef struct {
    const int32_t *pos;
    int64_t t0, n, x, b; // b: the range's next block
} kvt_sparse_blocks;
static inline kvt_sparse_blocks kvt_sparse_blocks_of(const int32_t *pos, int64_t t0, int64_t n) {
    const kvt_sparse_blocks it = {pos, t0, n, 0, t0 & ~(int64_t)15};
    return it;
}
static inline bool kvt_sparse_blocks_next(kvt_sparse_blocks *it, int64_t *b0, uint32_t *lanes, int64_t *out) {
    uint32_t m = 0;
    if (it->pos) {
        if (it->x >= it->n) return false;
        *out = it->x;
        const int32_t p = it->pos[it->x];
        *b0 = p & ~(int32_t)15;
        if ((p & 15) == 0 && it->x + 15 < it->n && it->pos[it->x + 15] == p + 15) { // a whole block (the common case:
            it->x += 16;                                                           // whole pages of candidates)
            *lanes = 0xffffu;
            return true;
        }
        for (; it->x < it->n && it->pos[it->x] < *b0 + 16; it->x++) m |= 1u << (it->pos[it->x] - *b0);
    } else {
        const int64_t t1 = it->t0 + it->n;
        if (it->b >= t1) return false;
        *b0 = it->b;
        const int64_t j0 = it->t0 > *b0 ? it->t0 - *b0 : 0, j1 = t1 < *b0 + 16 ? t1 - *b0 : 16;
        m = ((1u << j1) - 1u) & ~((1u << j0) - 1u);
        *out = *b0 + j0 - it->t0;
        it->b += 16;
    }
    *lanes = m;
    return true;
}
// A block's 16 scores f stored from r on: the lanes set in `lanes`, in order (the vector kernels' epilogue).
static inline void kvt_sparse_store_lanes(float *r, const float *f, uint32_t lanes) {
    if (lanes == 0xffff) {
        for (int32_t j = 0; j < 16; j++) r[j] = f[j];
        return;
    }
    int64_t o = 0;
    for (int32_t j = 0; j < 16; j++) {
        if (lanes >> j & 1) r[o++] = f[j];
    }
}
// The residual pass's prefetch (its vector kernels) of the 16-position block at pb (a multiple of 16) into L1: the plan's
// nr rows (64 bytes each) of its int8 copies kc (bb bytes a block), its key scales ks and the qpg query heads' rows of s^.
static inline __attribute__((always_inline)) void kvt_sparse_resid_prefetch(const uint8_t *kc, int64_t bb, const int32_t *rows,
                                                                            int32_t nr, const float *ks, const float *shat,
                                                                            int64_t sh_stride, int32_t qpg, int64_t pb) {
    for (int32_t j = 0; j < nr; j++) __builtin_prefetch(kc + pb / 16 * bb + 64 * rows[j], 0, 3);
    __builtin_prefetch(ks + pb, 0, 3);
    for (int32_t i = 0; i < qpg; i++) __builtin_prefetch(shat + i * sh_stride + pb, 0, 3);
}

// The lines of 16-position block b (its keys: kc + b * bb, bb bytes; its scales: ks + b * sb, sb bytes) requested into
// L1: the scans' prefetch. Hints only; b may lie past the keys (a prefetch never faults; the address is computed as an
// integer, so no pointer leaves its object). always_inline: GCC deletes calls of a static function that only
// prefetches as free of side effects (docs/log/SPARSE-log-3.md, "z5st").
static inline __attribute__((always_inline)) void kvt_sparse_block_prefetch(const void *kc, int64_t bb, const void *ks,
                                                                            int64_t sb, int64_t b) {
    const uintptr_t k = (uintptr_t)kc + (uintptr_t)(b * bb), sc = (uintptr_t)ks + (uintptr_t)(b * sb);
    for (int64_t o = 0; o < bb; o += 64) __builtin_prefetch((const void *)(k + (uintptr_t)o), 0, 3);
    for (int64_t o = 0; o < sb; o += 64) __builtin_prefetch((const void *)(sc + (uintptr_t)o), 0, 3);
}
// The range scans' prefetch (the vector kernels, pos NULL: the worker's scan of every key): the block
// KVT_SPARSE_PF_RANGE blocks after the one at position b0. Without it the scan ran at a third of the speed of a plain
// read of the same bytes (AMD EPYC Zen 5: 47 MB of int8 copies, 6-7.5 ms against 2 ms; the hardware's stream prefetch
// does not keep up with the VNNI work between the loads; 2.3-2.4 ms with it at 4-16 blocks ahead; docs/log/SPARSE-log-3.md,
// "z5st"). Near a range's end the block lies past it (the next part of the same head's keys, or past the buffer).
enum { KVT_SPARSE_PF_RANGE = 8 };
static inline __attribute__((always_inline)) void kvt_sparse_range_prefetch(const void *kc, int64_t bb, const void *ks,
                                                                            int64_t sb, int64_t b0) {
    kvt_sparse_block_prefetch(kc, bb, ks, sb, b0 / 16 + KVT_SPARSE_PF_RANGE);
}

// The scan of all of these (any width; qs: qscale times the attention scale; pos NULL: the range [t0, t0 + n_keys), else the n_keys
// sorted positions of pos) on AVX-512 VNNI (sparse_score_avx512.c; the same bits: integer sums).
void kvt_sparse_dot_blocks_avx512(const int16_t *q16, const float *qs, int32_t qpg, int32_t hd, kvt_sparse_keys k,
                                  int64_t t0, int64_t n_keys, const int32_t *pos, int64_t stride, float *raw);
// The 4-bit scan on AVX2 (sparse_score_avx2.c: VPMADDUBSW, exact in int16 for nibbles; the same bits).
void kvt_sparse_dot_blocks4_avx2(const int16_t *q16, const float *qs, int32_t qpg, int32_t hd, kvt_sparse_keys k,
                                 int64_t t0, int64_t n_keys, const int32_t *pos, int64_t stride, float *raw);
// The int8 copies on AVX2 against an int8 query (every element of q16 in [-127, 127]; --sparse-rerank-qbits 8): |k| times
// q with k's sign in VPMADDUBSW, exact in int16 (sparse_score_avx2.c; the same bits).
void kvt_sparse_dot_blocks8q_avx2(const int16_t *q16, const float *qs, int32_t qpg, int32_t hd, kvt_sparse_keys k,
                                  int64_t t0, int64_t n_keys, const int32_t *pos, int64_t stride, float *raw);
// The int8 copies on AVX2 against an int16 query (any element; the worker's scan, --sparse-rerank-qbits 16): the keys
// widened to int16 and VPMADDWD, exact in int32 (sparse_score_avx2.c; the same bits). Before it (2026-12-01) this case
// took the portable loop's AVX2 clone, which GCC left scalar: the worker's CPU per token ~6x (docs/log/SPARSE-log-2.md,
// "The worker's scan and the softmax's exponentials on AVX2").
void kvt_sparse_dot_blocks8_avx2(const int16_t *q16, const float *qs, int32_t qpg, int32_t hd, kvt_sparse_keys k,
                                 int64_t t0, int64_t n_keys, const int32_t *pos, int64_t stride, float *raw);
// e^x for x <= 0, relative error below 2e-7 against expf; 0 for x <= -87, -inf and NaN (exposed for the tests).
float kvt_sparse_exp_neg(float x);
// The softmax's terms e[t] = kvt_sparse_exp_neg(s[t] - mx) for t < n (e may be s) and their sum (16 partial sums, lane
// t mod 16, added in order at the end) on AVX2 (sparse_score_avx2.c): the bits of sparse_score.c's portable exp_sum.
float kvt_sparse_exp_sum_avx2(const float *s, float *e, int64_t n, float mx);
// kvt_sparse_piece_sums16 on AVX2 for B a multiple of 8 (sparse_score_avx2.c: 8 x 8 tiles transposed in registers, each
// piece's values added in order from 0 in its lane): the same bits. Before it (2026-12-01) the AVX2 clone of the portable
// loop ran, which GCC 12 leaves scalar; its AVX-512 clone is as scalar (4-lane inserts, the sums in memory), so AVX-512
// CPUs take this kernel too (2026-12-02, AMD EPYC Zen 5).
void kvt_sparse_piece_sums16_avx2(const float *a, int32_t B, float *m);
// kvt_sparse_page_sums' groups of 16 whole pages on AVX2 (B a multiple of 8; the same tiles, each page summed in order
// from its first value): the same bits; returns where the pages it left (fewer than 16 whole ones) start. AVX-512 CPUs
// take it too (GCC 12's AVX-512 clone of the portable loop is scalar as well).
int64_t kvt_sparse_page_sums_avx2(float *score, int64_t n, int32_t B);

// The predictor's Gram matrix kept from step to step (select.c): G ([n, n] used of row stride ld) holds the dot products
// of rows [0, *g_n) of the history as it was, which has since dropped *g_shift rows from its front; the products still
// held move to their rows' new places, the new rows' products (with every row) are computed, then *g_n = n and
// *g_shift = 0. An entry depends only on its two rows (a serial double sum), so G is the same bits as the Gram matrix
// computed whole. Then kvt_sparse_predict (softmax weights; simplex: kvt_sparse_predict_simplex) over hist's n rows with
// that G: the same prediction, bit for bit, without the O(n^2 d) products of every step.
void kvt_sparse_gram_update(const float *hist, int32_t n, int32_t d, double *G, int32_t ld, int32_t *g_n, int32_t *g_shift);
void kvt_sparse_predict_gram(const float *hist, int32_t n, int32_t d, const int32_t *windows, int32_t nw, double lambda,
                             bool simplex, const double *G, int32_t ld, float *out, float *work);

// The k-th largest (1 <= k <= the total weight) of v[0 .. n) counting value i w[i] times, reordering v and w (no NaN
// in v; select.c, the threshold of kvt_sparse_topk_pages).
float kvt_sparse_weighted_kth(float *v, int32_t *w, int64_t n, int64_t k);

#endif
