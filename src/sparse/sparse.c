// sparse.c - the sparse decoding state of a context: settings, shared scratch, the asyncspade worker's
// lifetime, step records and their aggregates, and the attention call (per sequence: sparse_seq.c;
// selection and the worker: sparse_choose.c).
#include "sparse.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../base/timer.h"
#include "../kernels/quant.h"
#include "../kv/kv_paged.h"
#include "sparse_impl.h"

void kvt_sparse_params_resolve(kvt_sparse_params *p) {
    if (p->mode == KVT_SPARSE_OFF) return;
    if (p->sink < 0) p->sink = 4;
    if (p->recent < 0) p->recent = 32;
    if (p->recent < 1) p->recent = 1; // the current position is always attended
    if (p->window <= 0) p->window = 16;
    if (p->lambda <= 0.0) p->lambda = 1e-3;
    if (p->page <= 0) p->page = 16;
    if (p->budget <= 0 && p->budget_frac <= 0.0) p->budget_frac = 0.125;
    if (p->seqs <= 0) p->seqs = 1;
    if (p->key_bits <= 0) p->key_bits = 8;
    if (p->rerank_bits <= 0) p->rerank_bits = p->key_bits;
    if (p->rerank_qbits <= 0) p->rerank_qbits = 16;
    if (p->rerank_resid_gate <= 0.0) p->rerank_resid_gate = 0.8;
    if (p->rerank_resid_cal <= 0) p->rerank_resid_cal = 4;
}

int64_t kvt_sparse_summary_bytes(const kvt_sparse_params *pp, const kvt_sparse_dims *d) {
    kvt_sparse_params p = *pp;
    kvt_sparse_params_resolve(&p);
    if (p.mode != KVT_SPARSE_QUEST && p.mode != KVT_SPARSE_ASYNCSPADE) return 0; // the oracle reads the store's keys
    // the layers of every sequence at n_ctx positions (asyncspade: whole 16-position blocks), as allocated
    const int64_t cap = p.mode == KVT_SPARSE_ASYNCSPADE ? kvt_sparse_k8_cap(d->n_ctx) : d->n_ctx;
    return (int64_t)kvt_sparse_summary_layers(&p, d) * p.seqs *
           kvt_sparse_layer_summary_bytes(&p, d->n_head_kv, d->head_dim, cap, (d->n_ctx + p.page - 1) / p.page);
}

int32_t kvt_sparse_summary_layers(const kvt_sparse_params *p, const kvt_sparse_dims *d) {
    int32_t n = 0;
    for (int32_t il = p->dense_layers > 0 ? p->dense_layers : 0; il < d->n_layer; il++) {
        n += d->swa_period <= 0 || il % d->swa_period == d->swa_period - 1;
    }
    return n;
}

int32_t kvt_sparse_fork_sets(const kvt_sparse_params *p, int64_t n_ctx, int64_t n_seqs, int64_t n_tail) {
    if (n_seqs < 1) n_seqs = 1;
    if (n_tail < 0) n_tail = 0;
    int64_t sets = n_seqs;
    const bool quest = p->mode == KVT_SPARSE_QUEST;
    if ((quest || p->mode == KVT_SPARSE_ASYNCSPADE) && p->rerank_resid <= 0.0 && n_ctx > 0) {
        const int64_t B = quest ? (p->page > 0 ? p->page : 16) : 16; // the shared blocks' positions
        const int64_t own = (2 * (n_tail + B + 1) > 64 ? 2 * (n_tail + B + 1) : 64) + B;
        const int64_t n = n_seqs > INT64_MAX / 2 / own ? INT64_MAX / 2 : 2 * n_seqs * own; // (no overflow)
        const int64_t shared = 2 + n / n_ctx + (n % n_ctx != 0);
        sets = shared < 1 + n_seqs ? shared : 1 + n_seqs; // (a sequence's own part never passes a set)
    }
    return sets < INT32_MAX ? (int32_t)sets : INT32_MAX;
}

int64_t kvt_sparse_layer_summary_bytes(const kvt_sparse_params *p, int64_t H, int64_t hd, int64_t cap, int64_t np) {
    if (p->mode == KVT_SPARSE_QUEST) return 2 * kvt_sparse_alloc_bytes(H * np * hd * 4);
    if (p->mode != KVT_SPARSE_ASYNCSPADE) return 0;
    int64_t b = 0;
    for (int32_t bits = 4; bits <= 8; bits += 4) { // each width's copies and their scales
        if (p->key_bits == bits || p->rerank_bits == bits) {
            b += kvt_sparse_alloc_bytes(H * cap * kvt_sparse_key_row_bytes(bits, (int32_t)hd)) +
                 kvt_sparse_alloc_bytes(H * cap * kvt_sparse_key_scale_bytes(bits, (int32_t)hd));
        }
    }
    return b;
}

// With a re-rank the scratch also holds a re-rank's choice among its candidates, or the best candidates the worker
// prefetches (csel).
static void ss_alloc(kvt_sparse_scratch *ss, const kvt_sparse *s, bool *ok) {
    const int64_t N = s->d.n_ctx;
    ss->raw = kvt_sparse_zalloc((size_t)(s->qpg * N) * 4, ok);
    ss->agg = kvt_sparse_zalloc((size_t)N * 4, ok);
    ss->vals = kvt_sparse_zalloc((size_t)N * 4, ok);
    ss->mark = kvt_sparse_zalloc((size_t)N, ok);
    ss->pred = kvt_sparse_zalloc((size_t)s->gd * 4, ok);
    ss->work = kvt_sparse_zalloc((size_t)kvt_sparse_predict_work_floats(s->p.window, s->gd) * 4, ok);
    ss->blk = kvt_sparse_zalloc((size_t)N * 8, ok);
    ss->wts = kvt_sparse_zalloc((size_t)(N + 2) * 4, ok);
    ss->al = kvt_sparse_zalloc((size_t)(s->p.window + 1) * s->gd * 4, ok);
    ss->cs = kvt_sparse_zalloc((size_t)(s->d.rope.n_rot + 2) * 4, ok);
    ss->hrow = kvt_sparse_zalloc((size_t)(s->p.window + 1) * s->d.head_dim * 4, ok);
    if (s->p.rerank > 1.0) ss->csel = kvt_sparse_zalloc((size_t)N * 4, ok);
}

static void ss_free(kvt_sparse_scratch *ss) {
    void *bufs[] = {ss->raw, ss->agg, ss->vals, ss->mark, ss->pred, ss->work, ss->blk, ss->al, ss->cs, ss->hrow, ss->csel, ss->wts};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

kvt_status kvt_sparse_init(const kvt_sparse_params *pp, const kvt_sparse_dims *d, kvt_sparse **out, kvt_err *err) {
    *out = NULL;
    if (pp->mode == KVT_SPARSE_OFF) return KVT_OK;
    kvt_sparse_params p = *pp;
    kvt_sparse_params_resolve(&p);
    if (p.mode == KVT_SPARSE_ASYNCSPADE && p.page_elems > 0 && d->head_dim > 0) { // pages of at most page_elems key elements
        const int32_t q = p.page_elems / d->head_dim > 1 ? p.page_elems / d->head_dim : 1;
        if (p.block > q) p.block = q;
        if (p.rerank_block > q) p.rerank_block = q;
    }
    if (p.budget_frac > 1.0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--sparse-budget %g: a fraction must be <= 1", p.budget_frac);
    if (p.fallback < 0.0 || p.fallback > 1.0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--sparse-fallback %g: a cosine in [0, 1]", p.fallback);
    if (p.layer_floor < 0.0 || p.layer_floor > 1.0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--sparse-layer-floor %g: a fraction in [0, 1]", p.layer_floor);
    if (p.share_layers && !(p.share && p.rerank > 1.0)) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--sparse-share-layers needs --sparse-share and --sparse-rerank");
    }
    if (p.window > 64) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--sparse-window %d: at most 64 queries", p.window);
    if (d->n_head_kv <= 0 || d->n_head % d->n_head_kv) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sparse attention: n_head %d not a multiple of n_head_kv %d", d->n_head, d->n_head_kv);
    }
    if ((p.key_bits != 4 && p.key_bits != 8) || (p.rerank_bits != 4 && p.rerank_bits != 8)) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--sparse-key-bits %d / --sparse-rerank-bits %d: 4 or 8", p.key_bits, p.rerank_bits);
    }
    if (p.rerank_qbits != 8 && p.rerank_qbits != 16) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--sparse-rerank-qbits %d: 8 or 16", p.rerank_qbits);
    }
    if (!(p.rerank_resid >= 0.0 && p.rerank_resid <= 1.0) || !(p.rerank_resid_gate >= 0.0 && p.rerank_resid_gate <= 1.0)) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--sparse-rerank-resid %g / -gate %g: shares in [0, 1]", p.rerank_resid,
                          p.rerank_resid_gate);
    }
    if (p.rerank_resid > 0.0 && (p.key_bits != 8 || p.rerank_bits != 8)) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--sparse-rerank-resid needs the int8 copies for both scans (--sparse-key-bits 8, --sparse-rerank-bits 8)");
    }
    if (p.mode == KVT_SPARSE_ASYNCSPADE && d->head_dim % 4) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "sparse asyncspade: head_dim %d is not a multiple of 4 (the int8 key layout)", d->head_dim);
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
    for (int32_t w = 2; w < p.window && s->nw < KVT_SPARSE_MAX_WINDOWS - 1; w *= 2) s->windows[s->nw++] = w; // the ensemble
    s->windows[s->nw++] = p.window;
    s->summary_limit = d->bounded ? kvt_sparse_summary_bytes(&p, d) : -1;
    kvt_sparse_params p1 = p;
    p1.seqs = 1;
    s->pool_max = 2 * kvt_sparse_summary_bytes(&p1, d); // one sequence's summaries at n_ctx and at its halves (warmed)
    const int64_t L = d->n_layer, H = d->n_head_kv, N = d->n_ctx, hd = d->head_dim;
    bool ok = true;
    s->ps_n = kvt_sparse_zalloc((size_t)(L * H) * 8, &ok);
    s->ps_fb = kvt_sparse_zalloc((size_t)(L * H) * 8, &ok);
    s->ps_ncos = kvt_sparse_zalloc((size_t)(L * H) * 8, &ok);
    s->ps_mass = kvt_sparse_zalloc((size_t)(L * H) * 8, &ok);
    s->ps_ovl = kvt_sparse_zalloc((size_t)(L * H) * 8, &ok);
    s->ps_cos = kvt_sparse_zalloc((size_t)(L * H) * 8, &ok);
    s->exact = kvt_sparse_zalloc((size_t)(H * N) * 4, &ok);
    s->osel = kvt_sparse_zalloc((size_t)N * 4, &ok);
    s->kbuf = kvt_sparse_zalloc((size_t)(KVT_SPARSE_CATCHUP * H * hd) * 4, &ok);
    s->krow = kvt_sparse_zalloc((size_t)hd * 4, &ok);
    s->krow_t = kvt_sparse_zalloc((size_t)hd * 4, &ok);
    s->scratch = calloc((size_t)d->n_threads, sizeof(float *));
    if (!s->scratch) ok = false;
    for (int32_t i = 0; ok && i < d->n_threads; i++) s->scratch[i] = kvt_sparse_zalloc((size_t)kvt_sparse_attn_scratch_floats(d) * 4, &ok);
    ss_alloc(&s->main_ss, s, &ok);
    if (p.mode == KVT_SPARSE_ASYNCSPADE && !p.sync) ss_alloc(&s->work_ss, s, &ok);
    if (ok && p.mode == KVT_SPARSE_ASYNCSPADE && p.rerank > 1.0 && d->n_threads > 1) {
        s->rr_ss = calloc((size_t)d->n_threads, sizeof *s->rr_ss);
        if (!s->rr_ss) ok = false;
        for (int32_t i = 0; ok && i < d->n_threads; i++) ss_alloc(&s->rr_ss[i], s, &ok);
    }
    if (ok && p.mode == KVT_SPARSE_ASYNCSPADE && p.rerank > 1.0) { // the re-rank's passes (any thread count)
        s->rr_raw = kvt_sparse_zalloc((size_t)(H * s->qpg * N) * 4, &ok);
        s->rr_q16 = kvt_sparse_zalloc((size_t)(H * s->gd) * 2, &ok);
        s->rr_qs = kvt_sparse_zalloc((size_t)(H * s->qpg) * 4, &ok);
        s->rr_inv = kvt_sparse_zalloc((size_t)(H * s->qpg) * 4, &ok);
        if (p.rerank_resid > 0.0) {
            s->rs_nr = kvt_sparse_zalloc((size_t)H * 4, &ok);
            s->rs_rows = kvt_sparse_zalloc((size_t)(H * (hd / 4 + 1)) * 4, &ok);
            s->rs_corr = kvt_sparse_zalloc((size_t)(H * s->qpg) * 4, &ok);
            s->rs_d8 = kvt_sparse_zalloc((size_t)(H * s->gd), &ok);
            s->rs_qs = kvt_sparse_zalloc((size_t)(H * s->qpg) * 4, &ok);
        }
    }
    if (ok && p.mode == KVT_SPARSE_ASYNCSPADE && p.rerank > 1.0 && p.share) { // pieces: pages, or single positions
        s->sh_vals = kvt_sparse_zalloc((size_t)(H * N) * 4, &ok);
        s->sh_wts = kvt_sparse_zalloc((size_t)(H * N) * 4, &ok);
        s->sh_v = kvt_sparse_zalloc((size_t)(H * N) * 4, &ok);
        s->sh_w = kvt_sparse_zalloc((size_t)(H * N) * 4, &ok);
        s->sh_cnt = kvt_sparse_zalloc((size_t)(3 * H) * 8, &ok);
    }
    if (ok && kvt_sparse_layer_pieces(s) > 0) {
        const size_t n_all = (size_t)(d->n_layer * kvt_sparse_layer_pieces(s));
        s->sh_raw = kvt_sparse_zalloc((size_t)(H * N) * 4, &ok);
        s->ls_v = kvt_sparse_zalloc(n_all * 4, &ok);
        s->ls_v2 = kvt_sparse_zalloc(n_all * 4, &ok);
        s->ls_w = kvt_sparse_zalloc(n_all * 4, &ok);
        s->ls_w2 = kvt_sparse_zalloc(n_all * 4, &ok);
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (!ok) {
        kvt_sparse_free(s);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the sparse state");
    }
    if (p.mode == KVT_SPARSE_ASYNCSPADE && !p.sync) {
        if (pthread_create(&s->th, NULL, kvt_sparse_worker_main, s)) {
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
    for (int32_t i = 0; i < s->n_seqs; i++) kvt_sparse_seq_destroy(s, s->seqs[i]);
    free(s->seqs);
    for (int64_t i = 0; i < s->n_big; i++) free(s->big[i].p); // (the pooled ones: the sequences freed theirs above)
    free(s->big);
    if (s->scratch) {
        for (int32_t i = 0; i < s->d.n_threads; i++) free(s->scratch[i]);
    }
    free(s->scratch);
    ss_free(&s->main_ss);
    ss_free(&s->work_ss);
    for (int32_t i = 0; s->rr_ss && i < s->d.n_threads; i++) ss_free(&s->rr_ss[i]);
    free(s->rr_ss);
    void *bufs[] = {s->exact, s->osel, s->kbuf, s->krow, s->krow_t, s->queue, s->pair_mass, s->rr_raw, s->rr_q16, s->rr_qs, s->rr_inv,
                    s->rs_nr, s->rs_rows, s->rs_corr, s->rs_d8, s->rs_qs,
                    s->sh_vals, s->sh_wts, s->sh_v, s->sh_w, s->sh_cnt, s->sh_raw, s->ls_v, s->ls_v2, s->ls_w, s->ls_w2,
                    s->ps_n, s->ps_fb, s->ps_ncos, s->ps_mass, s->ps_ovl, s->ps_cos};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

const kvt_sparse_params *kvt_sparse_get_params(const kvt_sparse *s) { return &s->p; }
const kvt_sparse_dims *kvt_sparse_get_dims(const kvt_sparse *s) { return &s->d; }
int64_t kvt_sparse_summary_held(const kvt_sparse *s) { return s->summary_held; }
int64_t kvt_sparse_prompt_tail(const kvt_sparse *s) {
    return s && s->p.mode == KVT_SPARSE_ASYNCSPADE ? (int64_t)s->p.window + 1 : 1;
}

const kvt_sparse_step *kvt_sparse_steps(const kvt_sparse *s, int32_t seq, int64_t *n) {
    const kvt_sparse_seq *q = seq >= 0 && seq < s->n_seqs ? s->seqs[seq] : NULL;
    *n = q ? q->n_steps : 0;
    return q ? q->steps : NULL;
}

void kvt_sparse_seq_totals_add(const kvt_sparse *s, int32_t seq, int64_t pos0, kvt_sparse_totals *acc) {
    int64_t n = 0;
    const kvt_sparse_step *st = s ? kvt_sparse_steps(s, seq, &n) : NULL;
    for (int64_t i = 0; i < n; i++) {
        if (st[i].pos < pos0) continue;
        acc->steps++;
        acc->selected += st[i].selected;
        acc->context += st[i].context;
        acc->kv_read_bytes += st[i].kv_read_bytes;
        acc->summary_read_bytes += st[i].summary_read_bytes;
        acc->stall_ms += st[i].stall_ms;
        acc->wait_ms += st[i].wait_ms;
    }
}

void kvt_sparse_steps_clear(kvt_sparse *s) {
    for (int32_t i = 0; i < s->n_seqs; i++) {
        if (s->seqs[i]) s->seqs[i]->n_steps = 0;
    }
    s->agg_steps = s->agg_pairs = 0;
    s->agg_sel = s->agg_ctx = s->agg_kv_read = s->agg_summary_read = s->agg_stall = s->agg_wait = s->agg_ovl = s->agg_mass = 0.0;
    pthread_mutex_lock(&s->mu); // the worker adds its times under mu
    s->agg_worker_ms = s->agg_worker_cpu_ms = 0.0;
    pthread_mutex_unlock(&s->mu);
    s->n_pair_mass = s->n_pred_sel = s->n_fallback = 0;
    s->n_rr_resid = s->n_rr_exact = s->n_rr_rows = 0;
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
    o->n_steps = s->agg_steps;
    o->summary_bytes = kvt_sparse_summary_bytes(&s->p, &s->d);
    o->summary_peak_bytes = s->summary_peak;
    const double ns = s->agg_steps > 0 ? (double)s->agg_steps : 1.0;
    o->selected_frac = s->agg_ctx > 0 ? s->agg_sel / s->agg_ctx : 1.0;
    o->kv_read_bytes = s->agg_kv_read / ns;
    o->summary_read_bytes = s->agg_summary_read / ns;
    o->stall_ms = s->agg_stall / ns;
    o->wait_ms = s->agg_wait / ns;
    // the worker adds its times under mu while it runs (summaries may be taken between steps)
    pthread_mutex_t *mu = (pthread_mutex_t *)&s->mu;
    pthread_mutex_lock(mu);
    o->worker_ms = s->agg_worker_ms / ns;
    o->worker_cpu_ms = s->agg_worker_cpu_ms / ns;
    pthread_mutex_unlock(mu);
    o->oracle_overlap = o->mass_recall = o->mass_recall_p5 = o->query_cos = -1.0;
    o->fallback_frac = s->n_pred_sel ? (double)s->n_fallback / (double)s->n_pred_sel : 0.0;
    o->rerank_resid_rows = s->n_rr_resid ? (double)s->n_rr_rows / ((double)s->n_rr_resid * (s->d.head_dim / 4)) : -1.0;
    o->rerank_resid_exact_frac = s->n_rr_resid + s->n_rr_exact ? (double)s->n_rr_exact / (double)(s->n_rr_resid + s->n_rr_exact) : 0.0;
    const int64_t np = s->agg_pairs;
    if (np == 0) return KVT_OK;
    if (s->p.mode == KVT_SPARSE_ASYNCSPADE) {
        double cs = 0.0;
        int64_t nc = 0;
        for (int64_t i = 0; i < (int64_t)s->d.n_layer * s->d.n_head_kv; i++) cs += s->ps_cos[i], nc += s->ps_ncos[i];
        o->query_cos = nc ? cs / (double)nc : -1.0;
    }
    o->oracle_overlap = s->agg_ovl / (double)np;
    o->mass_recall = s->agg_mass / (double)np;
    float *v = malloc((size_t)s->n_pair_mass * sizeof *v + 1);
    if (!v) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for %lld mass recall values", (long long)s->n_pair_mass);
    memcpy(v, s->pair_mass, (size_t)s->n_pair_mass * sizeof *v);
    qsort(v, (size_t)s->n_pair_mass, sizeof *v, cmp_float);
    o->mass_recall_p5 = s->n_pair_mass ? v[(int64_t)(0.05 * (double)(s->n_pair_mass - 1))] : -1.0;
    free(v);
    return KVT_OK;
}

// K for n positions held: the budget, or its fraction of n rounded up.
static int64_t params_budget(const kvt_sparse_params *p, int64_t n) {
    return p->budget > 0 ? p->budget : (int64_t)ceil(p->budget_frac * (double)n);
}

int64_t kvt_sparse_step_blocks(const kvt_sparse_params *pp, int64_t n, int64_t B) {
    kvt_sparse_params p = *pp;
    kvt_sparse_params_resolve(&p);
    if (B < 1) B = 1;
    const int64_t nb = (n + B - 1) / B;
    if (p.mode != KVT_SPARSE_QUEST && p.mode != KVT_SPARSE_ASYNCSPADE) return nb;
    int64_t K = params_budget(&p, n);
    if (K < (int64_t)p.sink + p.recent) K = (int64_t)p.sink + p.recent;
    // the page the selection is aligned to (0: token level)
    const int64_t P = p.mode == KVT_SPARSE_QUEST ? p.page
                      : p.rerank > 1.0 && p.rerank_block > 1 ? p.rerank_block : p.block > 1 ? p.block : 0;
    const int64_t blocks = P > 0 ? ((K + P - 1) / P + 2) * ((P + B - 1) / B) : K;
    return blocks < nb ? blocks : nb;
}

void kvt_sparse_totals_get(const kvt_sparse *s, kvt_sparse_totals *o) {
    pthread_mutex_t *mu = (pthread_mutex_t *)&s->mu; // the worker adds its times under mu while it runs
    pthread_mutex_lock(mu);
    *o = s->tot;
    pthread_mutex_unlock(mu);
    o->summary_held = s->summary_held, o->summary_peak = s->summary_peak, o->summary_reserved = s->summary_limit;
    o->summary_pooled = s->pooled_bytes, o->summary_reuses = s->pool_reuses, o->summary_kept = s->summary_kept;
    o->summary_warm_bytes = s->warm_bytes;
}

int64_t kvt_sparse_budget_of(const kvt_sparse *s, int64_t n) { return params_budget(&s->p, n); }

// --- the attention call ---------------------------------------------------------------------------------

static int64_t row_bytes(const kvt_sparse *s) {
    return kvt_row_size(s->d.kv_type, s->d.head_dim) + kvt_row_size(s->d.kv_type, s->d.head_dim_v);
}

// Stats of a sparse step of layer at P: mass recall and oracle overlap of every KV head's selection (exact
// scores in s->exact).
static void stats_of(kvt_sparse *s, const kvt_sparse_layer *ly, int32_t layer, int64_t P, double *mass_sum, double *mass_min,
                     double *ovl_sum) {
    const int64_t n = P + 1, K = kvt_sparse_budget_of(s, n);
    const int64_t m0 = s->p.sink < n ? s->p.sink : n, m1 = n - s->p.recent > m0 ? n - s->p.recent : m0;
    for (int32_t kh = 0; kh < s->d.n_head_kv; kh++) {
        const int64_t pr = (int64_t)layer * s->d.n_head_kv + kh;
        const float *ex = s->exact + kh * s->d.n_ctx;
        const int32_t *sel = ly->sel + kh * ly->cap;
        double mass = 0.0;
        for (int64_t x = 0; x < ly->nsel[kh]; x++) mass += ex[sel[x]];
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
        for (int64_t x = 0; x < ly->nsel[kh]; x++) s->main_ss.mark[sel[x]] = 1;
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

// A closed step into the sequence's records and the aggregates.
static void step_close(kvt_sparse *s, kvt_sparse_seq *q, const kvt_sparse_step *c) {
    s->agg_steps++;
    s->agg_sel += (double)c->selected;
    s->agg_ctx += (double)c->context;
    s->agg_kv_read += (double)c->kv_read_bytes;
    s->agg_summary_read += (double)c->summary_read_bytes;
    s->agg_stall += c->stall_ms;
    s->agg_wait += c->wait_ms;
    s->tot.steps++;
    s->tot.selected += c->selected;
    s->tot.context += c->context;
    s->tot.kv_read_bytes += c->kv_read_bytes;
    s->tot.summary_read_bytes += c->summary_read_bytes;
    s->tot.stall_ms += c->stall_ms;
    s->tot.wait_ms += c->wait_ms;
    if (c->n_pairs_stats > 0) {
        s->agg_ovl += c->oracle_overlap * c->n_pairs_stats;
        s->agg_mass += c->mass_recall * c->n_pairs_stats;
        s->agg_pairs += c->n_pairs_stats;
    }
    if (q->n_steps == q->cap_steps) {
        const int64_t cap = q->cap_steps ? q->cap_steps * 2 : 64;
        kvt_sparse_step *st = realloc(q->steps, (size_t)cap * sizeof *st);
        if (!st) return; // the record is lost (the aggregates keep it), decoding goes on
        q->steps = st;
        q->cap_steps = cap;
    }
    q->steps[q->n_steps++] = *c;
}

// Adds a layer's figures to the sequence's current step (layer 0 opens it, the last layer closes it).
static void step_add(kvt_sparse *s, kvt_sparse_seq *q, int32_t layer, int64_t P, int64_t sel, int64_t ctx, int64_t summary,
                     double stall, double wait, int32_t pairs_stats, double mass, double mass_min, double ovl) {
    kvt_sparse_step *c = &q->cur;
    if (layer == 0 || c->pos != P) {
        memset(c, 0, sizeof *c);
        c->pos = P;
        c->mass_recall_min = 2.0;
        c->oracle_overlap = c->mass_recall = 0.0;
    }
    c->kv_read_bytes += sel * row_bytes(s);
    c->summary_read_bytes += summary;
    c->stall_ms += stall;
    c->wait_ms += wait;
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
    step_close(s, q, c);
}

kvt_status kvt_sparse_attention(kvt_sparse *s, kvt_kv *kv, int32_t seq, int32_t layer, const kvt_attn_params *p,
                                const float *q, const float *k, int64_t pos0, int64_t n, bool prompt, float *out,
                                kvt_threadpool *pool, void *const *scratch, void *workspace, kvt_err *err) {
    const int64_t P = pos0 + n - 1, held = P + 1;
    const bool decode = n == 1 && !prompt;
    kvt_sparse_seq *sq = kvt_sparse_seq_get(s, seq);
    if (!sq) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the sparse state of sequence %d", seq);
    kvt_sparse_layer *ly = &sq->lay[layer];
    double stall = kvt_sparse_wait_layer(s, sq, layer); // the worker is done with this layer's summaries
    if (!decode) stall = 0.0;
    const double wait = stall;
    if (s->scale != p->scale || s->kv != kv) { // set once (the worker reads them: under the mutex it posts with)
        pthread_mutex_lock(&s->mu);
        s->scale = p->scale;
        s->kv = kv;
        pthread_mutex_unlock(&s->mu);
    }
    if (decode && s->has_worker && s->p.prefetch_layers > 0) kvt_sparse_prefetch_ahead(s, sq, seq, layer, P);
    kvt_sparse_undo_save(s, ly, pos0, n); // (what this call changes, taken back if the pass fails)
    // a call not where the last one ended (a truncate deeper than the query log, keys loaded): the history restarts, no
    // selection is current
    const bool rewind = pos0 != ly->hist_next;
    if (rewind) ly->sel_pos = ly->kept_pos = -1;
    ly->hist_next = pos0 + n;
    const bool sparse_layer = p->window == 0 && layer >= s->p.dense_layers;
    kvt_status st = kvt_sparse_layer_keys(s, kv, seq, sq, layer, pos0, n, k, sparse_layer, err);
    if (st) return st;
    const bool real_layer = ly->hist && layer < s->p.real_layers; // asyncspade: selects with the real query
    if (ly->hist && !real_layer && decode && sparse_layer && kvt_sparse_budget_of(s, held) < held && ly->sel_pos != P) {
        // no selection ready (sync mode, the first step, or a job that could not be queued): predict now
        const double t0 = kvt_time_ms();
        kvt_sparse_select_predicted(s, ly, &s->main_ss, P, p->scale, seq, -1);
        stall += kvt_time_ms() - t0;
    }
    kvt_sparse_observe_queries(s, ly, pos0, n, q, rewind);
    const int64_t H = s->d.n_head_kv;
    const bool dense_call = !decode || !sparse_layer || kvt_sparse_budget_of(s, held) >= held;
    kvt_kv_paged_set_caller_prefetch(kv, seq, layer, !dense_call); // a selection's blocks come from its prefetch
    if (dense_call) {
        st = kvt_attention(kv, seq, layer, p, q, pos0, n, out, pool, scratch, workspace, err);
        if (!st && decode) step_add(s, sq, layer, P, H * held, H * held, 0, stall, wait, 0, 0.0, 1.0, 0.0);
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
            kvt_sparse_select_oracle(s, ly, P);
            summary = H * held * kvt_row_size(s->d.kv_type, s->d.head_dim);
        } else if (s->p.mode == KVT_SPARSE_QUEST) {
            kvt_sparse_select_quest(s, ly, P, q, p->scale);
            summary = H * ((P + s->p.page - 1) / s->p.page) * 2 * s->d.head_dim * 4;
        } else {
            if (real_layer) { // the worker's selection, made with the real query
                for (int32_t kh = 0; kh < H; kh++) kvt_sparse_select_real(s, ly, kh, P, q + (int64_t)kh * s->gd, p->scale);
                ly->sel_pos = P;
            } else {
                kvt_sparse_check_predicted(s, ly, layer, P, q, p->scale);
            }
            if (s->p.rerank > 1.0 && kvt_sparse_layer_pieces(s) > 0) kvt_sparse_layer_budgets(s, sq, P);
            if (s->p.rerank > 1.0) kvt_sparse_rerank(s, ly, P, q, p->scale, pool, !real_layer);
            summary = H * P * (kvt_sparse_key_row_bytes(s->p.key_bits, s->d.head_dim) + // the worker's scan
                               kvt_sparse_key_scale_bytes(s->p.key_bits, s->d.head_dim));
        }
        // the selection time is on the critical path for oracle and quest (and asyncspade's re-rank / misses)
        stall += kvt_time_ms() - t0;
        double mass = 0.0, mass_min = 2.0, ovl = 0.0;
        if (s->p.stats) stats_of(s, ly, layer, P, &mass, &mass_min, &ovl);
        // every block of the set is queued at once (the ones only the real query chose: quest, oracle, re-rank,
        // fallback; and the worker's own, again: the store skips the blocks still resident or queued, and queues
        // those evicted since the worker prefetched them, which a fast tier smaller than a step's set does: without
        // this, twice the misses at the same bytes, docs/log/SPARSE-log-2.md), so that the copy engine loads the misses in
        // parallel while attention reads the first blocks; and the store evicts the blocks this set left out first
        kvt_kv_paged_prefetch_begin(kv); // the set's blocks only on disk read now, in one batch (kv_paged.h)
        kvt_sparse_prefetch_selection(s, &s->main_ss, ly, seq, layer, true);
        // the last submission of those reads stays in flight while attention works over the resident blocks
        const bool late = kvt_kv_paged_prefetch_end_async(kv);
        int64_t nsel = 0;
        for (int32_t kh = 0; kh < H; kh++) nsel += ly->nsel[kh];
        st = kvt_sparse_attend_set(kv, seq, layer, p, q, ly->sel, ly->nsel, ly->cap, late, out, pool, s->scratch, err);
        if (st) return st;
        step_add(s, sq, layer, P, nsel, H * held, summary, stall, wait, s->p.stats ? (int32_t)H : 0, mass, mass_min, ovl);
    }
    if (!st && s->has_worker && sparse_layer && !real_layer && held < s->d.n_ctx) {
        kvt_sparse_post(s, sq, seq, layer, held); // the next step's selection
    }
    return st;
}
