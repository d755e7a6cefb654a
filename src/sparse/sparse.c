// sparse.c - the sparse decoding state of a context: key summaries, query history, selection (inline or on
// the asyncspade worker), step records.
#include "sparse.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../base/timer.h"
#include "../kernels/quant.h"
#include "../kv/kv_paged.h"
#include "sparse_impl.h"

#define MAX_WINDOWS 8

// Scratch of one selecting thread (the caller's, or the worker's).
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
} sel_scratch;

struct kvt_sparse {
    kvt_sparse_params p;
    kvt_sparse_dims d;
    int32_t qpg, gd;         // query heads per KV head; floats of a group's query (qpg * head_dim)
    int32_t windows[MAX_WINDOWS], nw;
    int64_t n_pages;         // quest pages per (layer, KV head)
    int8_t *k8;              // asyncspade: [L][Hkv][n_ctx][hd] int8 keys
    float *k8s;              // [L][Hkv][n_ctx] their scales
    float *lo, *hi;          // quest: [L][Hkv][n_pages][hd] key bounds
    float *hist;             // asyncspade: [L][Hkv][W + 1][gd] last queries, oldest first
    float *pred_q;           // asyncspade: [L][Hkv][gd] the predicted query of the layer's selection
    int32_t *hist_n;         // [L] rows held
    int64_t *hist_next;      // [L] the position the next call must start at (else it is a rewind: the history
                             // restarts and the layer's selection is stale)
    int32_t *sel;            // [L][Hkv][n_ctx] selected positions
    int64_t *nsel;           // [L][Hkv]
    int64_t *sel_pos;        // [L] the decode position the selection of the layer is for (-1: none)
    float **scratch;         // [n_threads] attention scratch
    float *exact;            // [Hkv][n_ctx] exact aggregated scores (oracle, stats)
    int32_t *osel;           // [n_ctx] the oracle set (stats)
    sel_scratch main_ss, work_ss;
    float *krow;             // [hd] a key rounded to the store's type
    void *krow_t;            // its row in that type
    // the asyncspade worker
    pthread_t th;
    bool has_worker, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t *queue;          // [L] ring of layers to select for
    int64_t *queue_pos;      // [L] their target positions
    int32_t q_head, q_count;
    uint8_t *busy;           // [L] queued or running
    float scale;             // the attention scale (set before the first job is posted)
    kvt_kv *kv;              // the store (set likewise): the worker hands it the chosen blocks as prefetches
    // steps
    kvt_sparse_step *steps, cur;
    int64_t n_steps, cap_steps;
    float *pair_mass;        // mass recall of every (step, layer, KV head) pair with stats
    int64_t n_pair_mass, cap_pair_mass;
    // per (layer, KV head) pair: steps with stats, sums of mass recall, oracle overlap, query cosine; fallbacks
    int64_t *ps_n, *ps_fb, *ps_ncos;
    double *ps_mass, *ps_ovl, *ps_cos;
    int64_t n_pred_sel, n_fallback; // asyncspade: predicted selections used, of which redone with the real query
};

void kvt_sparse_params_resolve(kvt_sparse_params *p) {
    if (p->mode == KVT_SPARSE_OFF) return;
    if (p->sink < 0) p->sink = 4;
    if (p->recent < 0) p->recent = 32;
    if (p->recent < 1) p->recent = 1; // the current position is always attended
    if (p->window <= 0) p->window = 16;
    if (p->lambda <= 0.0) p->lambda = 1e-3;
    if (p->page <= 0) p->page = 16;
    if (p->budget <= 0 && p->budget_frac <= 0.0) p->budget_frac = 0.125;
}

int64_t kvt_sparse_summary_bytes(const kvt_sparse_params *pp, const kvt_sparse_dims *d) {
    kvt_sparse_params p = *pp;
    kvt_sparse_params_resolve(&p);
    const int64_t pairs = (int64_t)d->n_layer * d->n_head_kv;
    if (p.mode == KVT_SPARSE_QUEST) return pairs * ((d->n_ctx + p.page - 1) / p.page) * 2 * d->head_dim * 4;
    if (p.mode == KVT_SPARSE_ASYNCSPADE) return pairs * d->n_ctx * (d->head_dim + 4);
    return 0;
}

static void *zalloc(size_t n, bool *ok) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? (n + 63) / 64 * 64 : 64)) {
        *ok = false;
        return NULL;
    }
    memset(p, 0, n);
    return p;
}

static void ss_alloc(sel_scratch *ss, const kvt_sparse *s, bool *ok) {
    const int64_t N = s->d.n_ctx;
    ss->raw = zalloc((size_t)(s->qpg * N) * 4, ok);
    ss->agg = zalloc((size_t)N * 4, ok);
    ss->vals = zalloc((size_t)N * 4, ok);
    ss->mark = zalloc((size_t)N, ok);
    ss->pred = zalloc((size_t)s->gd * 4, ok);
    ss->work = zalloc((size_t)kvt_sparse_predict_work_floats(s->p.window, s->gd) * 4, ok);
    ss->blk = zalloc((size_t)N * 8, ok);
    ss->al = zalloc((size_t)(s->p.window + 1) * s->gd * 4, ok);
    ss->cs = zalloc((size_t)(s->d.rope.n_rot + 2) * 4, ok);
    ss->hrow = zalloc((size_t)(s->p.window + 1) * s->d.head_dim * 4, ok);
}

static void ss_free(sel_scratch *ss) {
    free(ss->raw);
    free(ss->agg);
    free(ss->vals);
    free(ss->mark);
    free(ss->pred);
    free(ss->work);
    free(ss->blk);
    free(ss->al);
    free(ss->cs);
    free(ss->hrow);
}


static void *worker_main(void *arg);
static double wait_layer(kvt_sparse *s, int32_t layer);

kvt_status kvt_sparse_init(const kvt_sparse_params *pp, const kvt_sparse_dims *d, kvt_sparse **out, kvt_err *err) {
    *out = NULL;
    if (pp->mode == KVT_SPARSE_OFF) return KVT_OK;
    kvt_sparse_params p = *pp;
    kvt_sparse_params_resolve(&p);
    if (p.budget_frac > 1.0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--sparse-budget %g: a fraction must be <= 1", p.budget_frac);
    if (p.fallback < 0.0 || p.fallback > 1.0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--sparse-fallback %g: a cosine in [0, 1]", p.fallback);
    if (p.window > 64) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--sparse-window %d: at most 64 queries", p.window);
    if (d->n_head_kv <= 0 || d->n_head % d->n_head_kv) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sparse attention: n_head %d not a multiple of n_head_kv %d", d->n_head, d->n_head_kv);
    }
    if (d->head_dim > KVT_SPARSE_MAX_HD || d->n_head / d->n_head_kv > KVT_SPARSE_MAX_QPG) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "sparse attention: head_dim %d (at most %d) or %d query heads per KV head (at most %d)",
                          d->head_dim, KVT_SPARSE_MAX_HD, d->n_head / d->n_head_kv, KVT_SPARSE_MAX_QPG);
    }
    kvt_sparse *s = calloc(1, sizeof *s);
    if (!s) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    s->p = p;
    s->d = *d;
    s->qpg = d->n_head / d->n_head_kv;
    s->gd = s->qpg * d->head_dim;
    for (int32_t w = 2; w < p.window && s->nw < MAX_WINDOWS - 1; w *= 2) s->windows[s->nw++] = w; // the ensemble
    s->windows[s->nw++] = p.window;
    const int64_t L = d->n_layer, H = d->n_head_kv, N = d->n_ctx, hd = d->head_dim;
    bool ok = true;
    if (p.mode == KVT_SPARSE_ASYNCSPADE) {
        s->k8 = zalloc((size_t)(L * H * N * hd), &ok);
        s->k8s = zalloc((size_t)(L * H * N) * 4, &ok);
        s->hist = zalloc((size_t)(L * H * (p.window + 1) * s->gd) * 4, &ok);
        s->pred_q = zalloc((size_t)(L * H * s->gd) * 4, &ok);
    }
    if (p.mode == KVT_SPARSE_QUEST) {
        s->n_pages = (N + p.page - 1) / p.page;
        s->lo = zalloc((size_t)(L * H * s->n_pages * hd) * 4, &ok);
        s->hi = zalloc((size_t)(L * H * s->n_pages * hd) * 4, &ok);
    }
    s->hist_n = zalloc((size_t)L * 4, &ok);
    s->ps_n = zalloc((size_t)(L * H) * 8, &ok);
    s->ps_fb = zalloc((size_t)(L * H) * 8, &ok);
    s->ps_ncos = zalloc((size_t)(L * H) * 8, &ok);
    s->ps_mass = zalloc((size_t)(L * H) * 8, &ok);
    s->ps_ovl = zalloc((size_t)(L * H) * 8, &ok);
    s->ps_cos = zalloc((size_t)(L * H) * 8, &ok);
    s->hist_next = zalloc((size_t)L * 8, &ok);
    s->sel = zalloc((size_t)(L * H * N) * 4, &ok);
    s->nsel = zalloc((size_t)(L * H) * 8, &ok);
    s->sel_pos = zalloc((size_t)L * 8, &ok);
    s->exact = zalloc((size_t)(H * N) * 4, &ok);
    s->osel = zalloc((size_t)N * 4, &ok);
    s->krow = zalloc((size_t)hd * 4, &ok);
    s->krow_t = zalloc((size_t)hd * 4, &ok);
    s->queue = zalloc((size_t)L * 4, &ok);
    s->queue_pos = zalloc((size_t)L * 8, &ok);
    s->busy = zalloc((size_t)L, &ok);
    s->scratch = calloc((size_t)d->n_threads, sizeof(float *));
    if (!s->scratch) ok = false;
    for (int32_t i = 0; ok && i < d->n_threads; i++) s->scratch[i] = zalloc((size_t)kvt_sparse_attn_scratch_floats(d) * 4, &ok);
    ss_alloc(&s->main_ss, s, &ok);
    if (p.mode == KVT_SPARSE_ASYNCSPADE && !p.sync) ss_alloc(&s->work_ss, s, &ok);
    for (int64_t l = 0; ok && l < L; l++) s->sel_pos[l] = -1;
    if (!ok) {
        kvt_sparse_free(s);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the sparse state (%lld summary bytes)",
                          (long long)kvt_sparse_summary_bytes(&p, d));
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (p.mode == KVT_SPARSE_ASYNCSPADE && !p.sync) {
        if (pthread_create(&s->th, NULL, worker_main, s)) {
            kvt_sparse_free(s);
            return kvt_errorf(err, KVT_ERR_NOMEM, "cannot start the asyncspade selection thread");
        }
        s->has_worker = true;
    }
    *out = s;
    return KVT_OK;
}

void kvt_sparse_free(kvt_sparse *s) {
    if (!s) return;
    if (s->has_worker) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
    }
    if (s->scratch) {
        for (int32_t i = 0; i < s->d.n_threads; i++) free(s->scratch[i]);
    }
    free(s->scratch);
    ss_free(&s->main_ss);
    ss_free(&s->work_ss);
    void *bufs[] = {s->k8, s->k8s, s->lo, s->hi, s->hist, s->hist_n, s->hist_next, s->sel, s->nsel, s->sel_pos,
                    s->exact, s->osel, s->krow, s->krow_t, s->queue, s->queue_pos, s->busy, s->steps, s->pair_mass,
                    s->pred_q, s->ps_n, s->ps_fb, s->ps_ncos, s->ps_mass, s->ps_ovl, s->ps_cos};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

const kvt_sparse_params *kvt_sparse_get_params(const kvt_sparse *s) { return &s->p; }
const kvt_sparse_dims *kvt_sparse_get_dims(const kvt_sparse *s) { return &s->d; }

const kvt_sparse_step *kvt_sparse_steps(const kvt_sparse *s, int64_t *n) {
    *n = s->n_steps;
    return s->steps;
}

void kvt_sparse_steps_clear(kvt_sparse *s) {
    s->n_steps = s->n_pair_mass = s->n_pred_sel = s->n_fallback = 0;
    const size_t np = (size_t)s->d.n_layer * s->d.n_head_kv;
    memset(s->ps_n, 0, np * 8);
    memset(s->ps_fb, 0, np * 8);
    memset(s->ps_ncos, 0, np * 8);
    memset(s->ps_mass, 0, np * 8);
    memset(s->ps_ovl, 0, np * 8);
    memset(s->ps_cos, 0, np * 8);
}

void kvt_sparse_pair_stats(const kvt_sparse *s, int32_t layer, int32_t kh, kvt_sparse_pair_stat *o) {
    const int64_t pr = (int64_t)layer * s->d.n_head_kv + kh, n = s->ps_n[pr];
    o->n = n;
    o->mass_recall = n ? s->ps_mass[pr] / (double)n : -1.0;
    o->oracle_overlap = n ? s->ps_ovl[pr] / (double)n : -1.0;
    o->query_cos = s->ps_ncos[pr] ? s->ps_cos[pr] / (double)s->ps_ncos[pr] : -1.0;
    o->fallback_frac = s->ps_ncos[pr] ? (double)s->ps_fb[pr] / (double)s->ps_ncos[pr] : -1.0;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

kvt_status kvt_sparse_summarize(const kvt_sparse *s, kvt_sparse_summary *o, kvt_err *err) {
    memset(o, 0, sizeof *o);
    o->n_steps = s->n_steps;
    o->summary_bytes = kvt_sparse_summary_bytes(&s->p, &s->d);
    double sel = 0, ctx = 0, ovl = 0, mass = 0;
    int64_t np = 0;
    for (int64_t i = 0; i < s->n_steps; i++) {
        const kvt_sparse_step *t = &s->steps[i];
        sel += (double)t->selected;
        ctx += (double)t->context;
        o->kv_read_bytes += (double)t->kv_read_bytes;
        o->summary_read_bytes += (double)t->summary_read_bytes;
        o->stall_ms += t->stall_ms;
        if (t->n_pairs_stats > 0) {
            ovl += t->oracle_overlap * t->n_pairs_stats;
            mass += t->mass_recall * t->n_pairs_stats;
            np += t->n_pairs_stats;
        }
    }
    const double ns = s->n_steps > 0 ? (double)s->n_steps : 1.0;
    o->selected_frac = ctx > 0 ? sel / ctx : 1.0;
    o->kv_read_bytes /= ns;
    o->summary_read_bytes /= ns;
    o->stall_ms /= ns;
    o->oracle_overlap = o->mass_recall = o->mass_recall_p5 = o->query_cos = -1.0;
    o->fallback_frac = s->n_pred_sel ? (double)s->n_fallback / (double)s->n_pred_sel : 0.0;
    if (np == 0) return KVT_OK;
    if (s->pred_q) {
        double cs = 0.0;
        int64_t nc = 0;
        for (int64_t i = 0; i < (int64_t)s->d.n_layer * s->d.n_head_kv; i++) cs += s->ps_cos[i], nc += s->ps_ncos[i];
        o->query_cos = nc ? cs / (double)nc : -1.0;
    }
    o->oracle_overlap = ovl / (double)np;
    o->mass_recall = mass / (double)np;
    float *v = malloc((size_t)s->n_pair_mass * sizeof *v + 1);
    if (!v) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for %lld mass recall values", (long long)s->n_pair_mass);
    memcpy(v, s->pair_mass, (size_t)s->n_pair_mass * sizeof *v);
    qsort(v, (size_t)s->n_pair_mass, sizeof *v, cmp_float);
    o->mass_recall_p5 = s->n_pair_mass ? v[(int64_t)(0.05 * (double)(s->n_pair_mass - 1))] : -1.0;
    free(v);
    return KVT_OK;
}

// Positions attended out of n held.
static int64_t budget_of(const kvt_sparse *s, int64_t n) {
    if (s->p.budget > 0) return s->p.budget;
    return (int64_t)ceil(s->p.budget_frac * (double)n);
}

// --- summaries and history (the caller's thread, never while the worker selects for the same layer) ------

static int64_t pair(const kvt_sparse *s, int32_t layer, int32_t kh) { return (int64_t)layer * s->d.n_head_kv + kh; }

// Keys [pos0, pos0 + n) of layer into the summaries, each rounded to the store's element type first (the
// bounds and the int8 copies describe the keys attention reads).
static void observe_keys(kvt_sparse *s, int32_t layer, int64_t pos0, int64_t n, const float *k) {
    const kvt_type_ops *ops = kvt_type_ops_get(s->d.kv_type);
    const int32_t hd = s->d.head_dim, H = s->d.n_head_kv;
    if (!s->k8 && !s->lo) return;
    for (int64_t t = 0; t < n; t++) {
        const int64_t pos = pos0 + t;
        for (int32_t kh = 0; kh < H; kh++) {
            ops->from_float(k + (t * H + kh) * hd, s->krow_t, hd);
            ops->to_float(s->krow_t, s->krow, hd);
            const int64_t pr = pair(s, layer, kh);
            if (s->k8) {
                float mx = 0.0f;
                for (int32_t x = 0; x < hd; x++) mx = fabsf(s->krow[x]) > mx ? fabsf(s->krow[x]) : mx;
                const float sc = mx > 0.0f ? mx / 127.0f : 1.0f;
                int8_t *dst = s->k8 + (pr * s->d.n_ctx + pos) * hd;
                for (int32_t x = 0; x < hd; x++) dst[x] = (int8_t)lrintf(s->krow[x] / sc);
                s->k8s[pr * s->d.n_ctx + pos] = sc;
            }
            if (s->lo) {
                const int64_t pg = pos / s->p.page, first = pg * s->p.page > pos0 ? pg * s->p.page : pos0;
                float *lo = s->lo + (pr * s->n_pages + pg) * hd, *hi = s->hi + (pr * s->n_pages + pg) * hd;
                // the page's first row written by this call restarts it (rows before pos0 stay: bounds only widen)
                const bool restart = pos == first && pos == pg * s->p.page;
                for (int32_t x = 0; x < hd; x++) {
                    const float v = s->krow[x];
                    if (restart || v < lo[x]) lo[x] = v;
                    if (restart || v > hi[x]) hi[x] = v;
                }
            }
        }
    }
}

void kvt_sparse_observe_loaded(kvt_sparse *s, int32_t seq, int32_t layer, int64_t pos0, int64_t n, const float *k) {
    if (!s || seq != 0 || layer < 0 || layer >= s->d.n_layer || pos0 < 0 || n <= 0 || pos0 + n > s->d.n_ctx) return;
    if (s->has_worker) wait_layer(s, layer); // the worker reads the summaries of the layer it selects for
    observe_keys(s, layer, pos0, n, k);
}

// The queries of the call's n tokens of layer into its history (the last window + 1 rows per KV head).
static void observe_queries(kvt_sparse *s, int32_t layer, int64_t n, const float *q, bool rewind) {
    if (!s->hist) return;
    const int32_t W1 = s->p.window + 1, gd = s->gd, H = s->d.n_head_kv;
    if (rewind) s->hist_n[layer] = 0;
    const int64_t t0 = n > W1 ? n - W1 : 0;
    for (int64_t t = t0; t < n; t++) {
        int32_t hn = s->hist_n[layer];
        for (int32_t kh = 0; kh < H; kh++) {
            float *h = s->hist + pair(s, layer, kh) * W1 * gd;
            if (hn == W1) memmove(h, h + gd, (size_t)(W1 - 1) * gd * sizeof(float));
            memcpy(h + (int64_t)(hn == W1 ? W1 - 1 : hn) * gd, q + (t * H + kh) * (int64_t)gd, (size_t)gd * sizeof(float));
        }
        s->hist_n[layer] = hn == W1 ? W1 : hn + 1;
    }
}

// --- selection ------------------------------------------------------------------------------------------

// raw[i * n + t] = scale * q_i . k8_t for t < n_keys, -inf for the rest (q: the group's qpg query rows, taken
// as int16 with a scale per row: integer dot products with the int8 keys, sparse_score.c).
static void score_int8(const kvt_sparse *s, int64_t pr, const float *q, int64_t n, int64_t n_keys, float scale, float *raw) {
    int16_t q16[KVT_SPARSE_MAX_QPG * KVT_SPARSE_MAX_HD];
    float qs[KVT_SPARSE_MAX_QPG];
    kvt_sparse_quant_query(q, s->qpg, s->d.head_dim, q16, qs);
    kvt_sparse_score_i8(q16, qs, s->qpg, s->d.head_dim, s->k8 + pr * s->d.n_ctx * s->d.head_dim, s->k8s + pr * s->d.n_ctx,
                        n_keys, n, scale, raw);
}

static double dot_d(const float *a, const float *b, int32_t d) {
    double t = 0.0;
    for (int32_t x = 0; x < d; x++) t += (double)a[x] * b[x];
    return t;
}

// Every position of each page of B positions takes the page's largest score: top-k then picks whole pages
// (the last one cut at the budget), as the store moves whole blocks.
static void page_max(float *score, int64_t n, int32_t B) {
    for (int64_t p0 = 0; p0 < n; p0 += B) {
        const int64_t p1 = p0 + B < n ? p0 + B : n;
        float m = score[p0];
        for (int64_t t = p0 + 1; t < p1; t++) m = score[t] > m ? score[t] : m;
        for (int64_t t = p0; t < p1; t++) score[t] = m;
    }
}

// asyncspade: the selection of layer for decode position P (keys [0, P) known), predicted query, K' positions.
static void select_predicted(kvt_sparse *s, sel_scratch *ss, int32_t layer, int64_t P, float scale) {
    const int64_t n = P + 1;
    int64_t K = budget_of(s, n);
    const int64_t mid = K - s->p.sink - s->p.recent;
    if (s->p.rerank > 1.0 && mid > 0) K += (int64_t)((s->p.rerank - 1.0) * (double)mid);
    const int32_t hn = s->hist_n[layer], hd = s->d.head_dim, gd = s->gd;
    const bool align = s->p.rope_align && s->d.rope.n_rot > 0;
    for (int32_t kh = 0; kh < s->d.n_head_kv; kh++) {
        const int64_t pr = pair(s, layer, kh);
        const float *h = s->hist + pr * (s->p.window + 1) * gd;
        if (align) { // row i holds the query of position P - hn + i: rotate it by hn - i positions to P's phase
            memcpy(ss->al, h, (size_t)hn * gd * sizeof(float));
            kvt_sparse_rope_align(ss->al, hn, s->qpg, hd, &s->d.rope, ss->cs);
            h = ss->al;
        }
        if (s->p.predictor == KVT_SPARSE_PRED_LAST && hn > 0) {
            memcpy(ss->pred, h + (int64_t)(hn - 1) * gd, (size_t)gd * sizeof(float));
        } else if (s->p.predictor == KVT_SPARSE_PRED_RIDGE_HEAD) {
            for (int32_t j = 0; j < s->qpg; j++) { // head j's rows, contiguous
                for (int32_t i = 0; i < hn; i++) memcpy(ss->hrow + (int64_t)i * hd, h + (int64_t)i * gd + (int64_t)j * hd, (size_t)hd * sizeof(float));
                kvt_sparse_predict(ss->hrow, hn, hd, s->windows, s->nw, s->p.lambda, true, ss->pred + (int64_t)j * hd, ss->work);
            }
        } else if (s->p.predictor == KVT_SPARSE_PRED_SIMPLEX) {
            kvt_sparse_predict_simplex(h, hn, gd, s->windows, s->nw, s->p.lambda, ss->pred, ss->work);
        } else {
            kvt_sparse_predict(h, hn, gd, s->windows, s->nw, s->p.lambda, true, ss->pred, ss->work);
        }
        memcpy(s->pred_q + pr * gd, ss->pred, (size_t)gd * sizeof(float));
        score_int8(s, pr, ss->pred, n, P, scale, ss->raw);
        kvt_sparse_aggregate(ss->raw, s->qpg, n, ss->agg);
        if (s->p.block > 1) page_max(ss->agg, n, s->p.block);
        s->nsel[pr] = kvt_sparse_topk(ss->agg, n, K, s->p.sink, s->p.recent, s->sel + pr * s->d.n_ctx, ss->mark, ss->vals);
    }
    s->sel_pos[layer] = P;
}

// asyncspade's re-rank: among the candidates, the K best by the real query on the int8 keys.
static void rerank(kvt_sparse *s, int32_t layer, int64_t P, const float *q, float scale) {
    sel_scratch *ss = &s->main_ss;
    const int64_t n = P + 1, K = budget_of(s, n);
    for (int32_t kh = 0; kh < s->d.n_head_kv; kh++) {
        const int64_t pr = pair(s, layer, kh);
        int32_t *sel = s->sel + pr * s->d.n_ctx;
        score_int8(s, pr, q + (int64_t)kh * s->gd, n, P, scale, ss->raw);
        kvt_sparse_aggregate(ss->raw, s->qpg, n, ss->agg);
        for (int64_t t = 0; t < n; t++) ss->vals[t] = -INFINITY;
        for (int64_t x = 0; x < s->nsel[pr]; x++) ss->vals[sel[x]] = ss->agg[sel[x]];
        memcpy(ss->agg, ss->vals, (size_t)n * sizeof(float));
        s->nsel[pr] = kvt_sparse_topk(ss->agg, n, K, s->p.sink, s->p.recent, sel, ss->mark, ss->vals);
    }
}

// asyncspade, on the caller once the real query q is here: the cosine of each KV head's predicted query with
// the real one (stats), and with --sparse-fallback the heads below it selected again with the real query on
// the int8 keys (on the critical path: counted as stall by the caller).
// The selection of pair pr for decode position P by the real query (the group's rows at qg) on the int8 keys.
static void select_real_pair(kvt_sparse *s, int64_t pr, int64_t P, const float *qg, float scale) {
    sel_scratch *ss = &s->main_ss;
    const int64_t n = P + 1, K = budget_of(s, n);
    score_int8(s, pr, qg, n, P, scale, ss->raw);
    kvt_sparse_aggregate(ss->raw, s->qpg, n, ss->agg);
    s->nsel[pr] = kvt_sparse_topk(ss->agg, n, K, s->p.sink, s->p.recent, s->sel + pr * s->d.n_ctx, ss->mark, ss->vals);
}

static void check_predicted(kvt_sparse *s, int32_t layer, int64_t P, const float *q, float scale) {
    if (!s->p.stats && s->p.fallback <= 0.0) return;
    for (int32_t kh = 0; kh < s->d.n_head_kv; kh++) {
        const int64_t pr = pair(s, layer, kh);
        const float *a = s->pred_q + pr * s->gd, *b = q + (int64_t)kh * s->gd;
        const double ab = dot_d(a, b, s->gd), aa = dot_d(a, a, s->gd), bb = dot_d(b, b, s->gd);
        const double cs = aa > 0.0 && bb > 0.0 ? ab / sqrt(aa * bb) : 0.0;
        if (s->p.stats) s->ps_cos[pr] += cs, s->ps_ncos[pr]++;
        s->n_pred_sel++;
        if (s->p.fallback <= 0.0 || cs >= s->p.fallback) continue;
        s->n_fallback++;
        if (s->p.stats) s->ps_fb[pr]++;
        select_real_pair(s, pr, P, b, scale);
    }
}

// quest: each position scored by its page's bound (max over the group's heads), token-level top-k of those
// (whole pages, the last one cut at the budget).
static void select_quest(kvt_sparse *s, int32_t layer, int64_t P, const float *q, float scale) {
    sel_scratch *ss = &s->main_ss;
    const int64_t n = P + 1, K = budget_of(s, n), hd = s->d.head_dim;
    for (int32_t kh = 0; kh < s->d.n_head_kv; kh++) {
        const int64_t pr = pair(s, layer, kh);
        for (int64_t pg = 0; pg * s->p.page < P; pg++) {
            const float *lo = s->lo + (pr * s->n_pages + pg) * hd, *hi = s->hi + (pr * s->n_pages + pg) * hd;
            float best = -INFINITY;
            for (int32_t i = 0; i < s->qpg; i++) {
                const float b = kvt_sparse_quest_bound(q + ((int64_t)kh * s->qpg + i) * hd, lo, hi, (int32_t)hd) * scale;
                best = b > best ? b : best;
            }
            for (int64_t t = pg * s->p.page; t < (pg + 1) * s->p.page && t < P; t++) ss->agg[t] = best;
        }
        ss->agg[P] = INFINITY;
        s->nsel[pr] = kvt_sparse_topk(ss->agg, n, K, s->p.sink, s->p.recent, s->sel + pr * s->d.n_ctx, ss->mark, ss->vals);
    }
    s->sel_pos[layer] = P;
}

static void select_oracle(kvt_sparse *s, int32_t layer, int64_t P) {
    sel_scratch *ss = &s->main_ss;
    const int64_t n = P + 1, K = budget_of(s, n);
    for (int32_t kh = 0; kh < s->d.n_head_kv; kh++) {
        const int64_t pr = pair(s, layer, kh);
        s->nsel[pr] = kvt_sparse_topk(s->exact + kh * s->d.n_ctx, n, K, s->p.sink, s->p.recent, s->sel + pr * s->d.n_ctx,
                                      ss->mark, ss->vals);
    }
    s->sel_pos[layer] = P;
}

// --- the worker -----------------------------------------------------------------------------------------

// The blocks holding layer's selection, handed to the paged store's copy engine (a no-op on other stores).
static void prefetch_selection(kvt_sparse *s, sel_scratch *ss, int32_t layer) {
    const kvt_kv *kv = s->kv;
    for (int32_t kh = 0; kh < s->d.n_head_kv; kh++) {
        const int64_t pr = pair(s, layer, kh);
        const int32_t *sel = s->sel + pr * s->d.n_ctx;
        int64_t nb = 0;
        for (int64_t x = 0; x < s->nsel[pr]; x++) {
            const int64_t b = sel[x] / kv->block_tokens;
            if (nb == 0 || ss->blk[nb - 1] != b) ss->blk[nb++] = b;
        }
        kvt_kv_paged_prefetch(s->kv, 0, layer, kh / kv->group_heads, ss->blk, nb);
    }
}

static void *worker_main(void *arg) {
    kvt_sparse *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && s->q_count == 0) pthread_cond_wait(&s->cv, &s->mu);
        if (s->stop) break;
        const int32_t layer = s->queue[s->q_head];
        const int64_t P = s->queue_pos[s->q_head];
        s->q_head = (s->q_head + 1) % s->d.n_layer;
        s->q_count--;
        pthread_mutex_unlock(&s->mu);
        select_predicted(s, &s->work_ss, layer, P, s->scale);
        if (s->p.prefetch_layers == 0) prefetch_selection(s, &s->work_ss, layer);
        pthread_mutex_lock(&s->mu);
        s->busy[layer] = 0;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

// Waits until no selection for layer is queued or running; the milliseconds waited.
static double wait_layer(kvt_sparse *s, int32_t layer) {
    if (!s->has_worker) return 0.0;
    pthread_mutex_lock(&s->mu);
    double ms = 0.0;
    if (s->busy[layer]) {
        const double t0 = kvt_time_ms();
        while (s->busy[layer]) pthread_cond_wait(&s->cv, &s->mu);
        ms = kvt_time_ms() - t0;
    }
    pthread_mutex_unlock(&s->mu);
    return ms;
}

// prefetch_layers > 0: at layer of step P, the selection of the layer prefetch_layers further on (of this
// step, or of the next one past the last layer) goes to the store, if the worker has made it.
static void prefetch_ahead(kvt_sparse *s, int32_t layer, int64_t P) {
    int32_t l2 = layer + s->p.prefetch_layers;
    int64_t P2 = P;
    while (l2 >= s->d.n_layer) l2 -= s->d.n_layer, P2++;
    pthread_mutex_lock(&s->mu);
    const bool ready = !s->busy[l2] && s->sel_pos[l2] == P2;
    pthread_mutex_unlock(&s->mu);
    if (ready) prefetch_selection(s, &s->main_ss, l2);
}

static void post_layer(kvt_sparse *s, int32_t layer, int64_t P) {
    pthread_mutex_lock(&s->mu);
    const int32_t at = (s->q_head + s->q_count) % s->d.n_layer;
    s->queue[at] = layer;
    s->queue_pos[at] = P;
    s->q_count++;
    s->busy[layer] = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

// --- the attention call ---------------------------------------------------------------------------------

static int64_t row_bytes(const kvt_sparse *s) {
    return kvt_row_size(s->d.kv_type, s->d.head_dim) + kvt_row_size(s->d.kv_type, s->d.head_dim_v);
}

// Stats of a sparse step of layer at P: mass recall and oracle overlap of every KV head's selection (exact
// scores in s->exact).
static void stats_of(kvt_sparse *s, int32_t layer, int64_t P, double *mass_sum, double *mass_min, double *ovl_sum) {
    const int64_t n = P + 1, K = budget_of(s, n);
    const int64_t m0 = s->p.sink < n ? s->p.sink : n, m1 = n - s->p.recent > m0 ? n - s->p.recent : m0;
    for (int32_t kh = 0; kh < s->d.n_head_kv; kh++) {
        const int64_t pr = pair(s, layer, kh);
        const float *ex = s->exact + kh * s->d.n_ctx;
        const int32_t *sel = s->sel + pr * s->d.n_ctx;
        double mass = 0.0;
        for (int64_t x = 0; x < s->nsel[pr]; x++) mass += ex[sel[x]];
        mass /= s->qpg;
        *mass_sum += mass;
        s->ps_mass[pr] += mass;
        s->ps_n[pr]++;
        if (s->n_pair_mass == s->cap_pair_mass) {
            const int64_t cap = s->cap_pair_mass ? 2 * s->cap_pair_mass : 4096;
            float *pm = realloc(s->pair_mass, (size_t)cap * sizeof *pm);
            if (pm) s->pair_mass = pm, s->cap_pair_mass = cap;
        }
        if (s->n_pair_mass < s->cap_pair_mass) s->pair_mass[s->n_pair_mass++] = (float)mass;
        if (mass < *mass_min) *mass_min = mass;
        const int64_t no = kvt_sparse_topk(ex, n, K, s->p.sink, s->p.recent, s->osel, s->main_ss.mark, s->main_ss.vals);
        memset(s->main_ss.mark, 0, (size_t)n);
        for (int64_t x = 0; x < s->nsel[pr]; x++) s->main_ss.mark[sel[x]] = 1;
        int64_t inter = 0, omid = 0;
        for (int64_t x = 0; x < no; x++) {
            if (s->osel[x] < m0 || s->osel[x] >= m1) continue;
            omid++;
            inter += s->main_ss.mark[s->osel[x]];
        }
        const double ovl = omid ? (double)inter / (double)omid : 1.0;
        *ovl_sum += ovl;
        s->ps_ovl[pr] += ovl;
    }
}

// Adds a layer's figures to the current step (layer 0 opens it, the last layer closes it).
static void step_add(kvt_sparse *s, int32_t layer, int64_t P, int64_t sel, int64_t ctx, int64_t summary, double stall,
                     int32_t pairs_stats, double mass, double mass_min, double ovl) {
    kvt_sparse_step *c = &s->cur;
    if (layer == 0 || c->pos != P) {
        memset(c, 0, sizeof *c);
        c->pos = P;
        c->mass_recall_min = 2.0;
        c->oracle_overlap = c->mass_recall = 0.0;
    }
    c->kv_read_bytes += sel * row_bytes(s);
    c->summary_read_bytes += summary;
    c->stall_ms += stall;
    if (pairs_stats) {
        c->selected += sel;
        c->context += ctx;
        c->mass_recall += mass; // sums for now; the last layer turns them into means
        c->oracle_overlap += ovl;
        c->mass_recall_min = mass_min < c->mass_recall_min ? mass_min : c->mass_recall_min;
        c->n_pairs_stats += pairs_stats;
    } else if (sel != ctx) {
        c->selected += sel;
        c->context += ctx;
    }
    if (layer != s->d.n_layer - 1) return;
    if (c->n_pairs_stats > 0) {
        c->mass_recall /= c->n_pairs_stats;
        c->oracle_overlap /= c->n_pairs_stats;
    } else {
        c->mass_recall = c->oracle_overlap = c->mass_recall_min = -1.0;
    }
    if (s->n_steps == s->cap_steps) {
        const int64_t cap = s->cap_steps ? s->cap_steps * 2 : 256;
        kvt_sparse_step *st = realloc(s->steps, (size_t)cap * sizeof *st);
        if (!st) return; // the record is lost, decoding goes on
        s->steps = st;
        s->cap_steps = cap;
    }
    s->steps[s->n_steps++] = *c;
}

kvt_status kvt_sparse_attention(kvt_sparse *s, kvt_kv *kv, int32_t seq, int32_t layer, const kvt_attn_params *p,
                                const float *q, const float *k, int64_t pos0, int64_t n, float *out, kvt_threadpool *pool,
                                void *const *scratch, void *workspace, kvt_err *err) {
    if (seq != 0) return kvt_attention(kv, seq, layer, p, q, pos0, n, out, pool, scratch, workspace, err);
    const int64_t P = pos0 + n - 1, held = P + 1;
    const bool decode = n == 1;
    double stall = wait_layer(s, layer); // the worker is done with this layer's summaries
    if (!decode) stall = 0.0;
    if (s->scale != p->scale || s->kv != kv) { // set once (the worker reads them: under the mutex it posts with)
        pthread_mutex_lock(&s->mu);
        s->scale = p->scale;
        s->kv = kv;
        pthread_mutex_unlock(&s->mu);
    }
    if (decode && s->has_worker && s->p.prefetch_layers > 0) prefetch_ahead(s, layer, P);
    const bool rewind = pos0 != s->hist_next[layer]; // a truncate: the history restarts, no selection is current
    if (rewind) s->sel_pos[layer] = -1;
    s->hist_next[layer] = pos0 + n;
    observe_keys(s, layer, pos0, n, k);
    const bool sparse_layer = p->window == 0 && layer >= s->p.dense_layers;
    const bool real_layer = s->hist && layer < s->p.real_layers; // asyncspade: selects with the real query
    if (s->hist && !real_layer && decode && sparse_layer && budget_of(s, held) < held && s->sel_pos[layer] != P) {
        // no selection ready (sync mode, or the first step): predict now, from the queries before this one
        const double t0 = kvt_time_ms();
        select_predicted(s, &s->main_ss, layer, P, p->scale);
        stall += kvt_time_ms() - t0;
    }
    observe_queries(s, layer, n, q, rewind);
    const int64_t H = s->d.n_head_kv;
    kvt_status st;
    const bool dense_call = !decode || !sparse_layer || budget_of(s, held) >= held;
    kvt_kv_paged_set_caller_prefetch(kv, seq, layer, !dense_call); // a selection's blocks come from its prefetch
    if (dense_call) {
        st = kvt_attention(kv, seq, layer, p, q, pos0, n, out, pool, scratch, workspace, err);
        if (!st && decode) step_add(s, layer, P, H * held, H * held, 0, stall, 0, 0.0, 1.0, 0.0);
    } else {
        // exact scores: the oracle's selection (timed), or the stats of the others (not timed)
        const bool exact_first = s->p.stats && s->p.mode != KVT_SPARSE_ORACLE;
        if (exact_first && (st = kvt_sparse_score_exact(kv, seq, layer, p, q, held, s->exact, s->d.n_ctx, pool, s->scratch, err))) {
            return st;
        }
        const double t0 = kvt_time_ms();
        int64_t summary = 0;
        if (s->p.mode == KVT_SPARSE_ORACLE &&
            (st = kvt_sparse_score_exact(kv, seq, layer, p, q, held, s->exact, s->d.n_ctx, pool, s->scratch, err))) {
            return st;
        }
        if (s->p.mode == KVT_SPARSE_ORACLE) {
            select_oracle(s, layer, P);
            summary = H * held * kvt_row_size(s->d.kv_type, s->d.head_dim);
        } else if (s->p.mode == KVT_SPARSE_QUEST) {
            select_quest(s, layer, P, q, p->scale);
            summary = H * ((P + s->p.page - 1) / s->p.page) * 2 * s->d.head_dim * 4;
        } else {
            if (real_layer) {
                for (int32_t kh = 0; kh < H; kh++) select_real_pair(s, pair(s, layer, kh), P, q + (int64_t)kh * s->gd, p->scale);
                s->sel_pos[layer] = P;
            } else {
                check_predicted(s, layer, P, q, p->scale);
                if (s->p.rerank > 1.0) rerank(s, layer, P, q, p->scale);
            }
            summary = H * P * (s->d.head_dim + 4);
        }
        // the selection time is on the critical path for oracle and quest (and asyncspade's re-rank / misses)
        stall += kvt_time_ms() - t0;
        double mass = 0.0, mass_min = 2.0, ovl = 0.0;
        if (s->p.stats) stats_of(s, layer, P, &mass, &mass_min, &ovl);
        // every block of the set is queued at once (the ones the worker prefetched and the ones only the real
        // query chose: quest, oracle, re-rank, fallback), so that the copy engine loads the misses in parallel
        // while attention reads the first blocks
        prefetch_selection(s, &s->main_ss, layer);
        int64_t nsel = 0;
        for (int32_t kh = 0; kh < H; kh++) nsel += s->nsel[pair(s, layer, kh)];
        st = kvt_sparse_attend_set(kv, seq, layer, p, q, s->sel + pair(s, layer, 0) * s->d.n_ctx, s->nsel + pair(s, layer, 0),
                                   s->d.n_ctx, out, pool, s->scratch, err);
        if (st) return st;
        step_add(s, layer, P, nsel, H * held, summary, stall, s->p.stats ? (int32_t)H : 0, mass, mass_min, ovl);
    }
    if (!st && s->has_worker && sparse_layer && !real_layer && held < s->d.n_ctx) post_layer(s, layer, held); // the next step's selection
    return st;
}
