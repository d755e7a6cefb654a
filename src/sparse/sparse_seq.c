// sparse_seq.c - the per-sequence sparse state: created on demand, grown with the positions the sequence
// holds, copied on fork, cut back on truncate, freed with the sequence; key summaries and query history.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/hugemem.h"
#include "../kernels/quant.h"
#include "sparse_impl.h"

int64_t kvt_sparse_alloc_bytes(int64_t n) {
    const int64_t huge = (int64_t)2 << 20;
    return n >= KVT_SPARSE_HUGE_MIN ? (n + huge - 1) / huge * huge : (n + 63) / 64 * 64;
}

void *kvt_sparse_zalloc(size_t n, bool *ok) {
    void *p;
    // a buffer of KVT_SPARSE_HUGE_MIN bytes or more (the int8 key copies of a layer at a long context) in whole 2 MiB
    // pages: the scans that read it (the worker's over every key, the re-rank's over scattered candidate pages) then
    // miss the TLB 512 times less (measured: docs/log/SPARSE-log-2.md, "Cheaper selection for RAM"); the rounding is counted
    // (kvt_sparse_alloc_bytes in the summary bytes)
    const bool big = n >= KVT_SPARSE_HUGE_MIN;
    const size_t size = n ? (size_t)kvt_sparse_alloc_bytes((int64_t)n) : 64;
    if (!(p = kvt_alloc_huge(size, big))) {
        *ok = false;
        return NULL;
    }
    memset(p, 0, n);
    return p;
}

static bool has_summaries(const kvt_sparse *s) {
    return s->p.mode == KVT_SPARSE_QUEST || s->p.mode == KVT_SPARSE_ASYNCSPADE;
}

static int64_t pages_of(const kvt_sparse *s, int64_t cap) { return (cap + s->p.page - 1) / s->p.page; }

// asyncspade keeps key copies of this width (for the predicted query's scan or the real query's).
static bool uses_bits(const kvt_sparse *s, int32_t bits) {
    return s->p.mode == KVT_SPARSE_ASYNCSPADE && (s->p.key_bits == bits || s->p.rerank_bits == bits);
}

int64_t kvt_sparse_kept_pages(const kvt_sparse *s) {
    if (s->p.mode != KVT_SPARSE_ASYNCSPADE || s->p.keep <= 0.0 || s->p.rerank <= 1.0 || s->p.rerank_block <= 1) return 0;
    return (s->d.n_ctx + s->p.rerank_block - 1) / s->p.rerank_block;
}

int64_t kvt_sparse_layer_pieces(const kvt_sparse *s) {
    if (s->p.mode != KVT_SPARSE_ASYNCSPADE || !s->p.share_layers || !s->p.share || s->p.rerank <= 1.0 || s->p.rerank_block <= 1) return 0;
    return (int64_t)s->d.n_head_kv * (s->d.n_ctx / s->p.rerank_block + 2); // a head's pieces: at most one per page
}

// Bytes of one layer's key summaries with room for cap positions.
static int64_t layer_summary_bytes(const kvt_sparse *s, int64_t cap) {
    const int64_t H = s->d.n_head_kv, hd = s->d.head_dim;
    return kvt_sparse_layer_summary_bytes(&s->p, H, hd, cap, s->p.mode == KVT_SPARSE_QUEST ? pages_of(s, cap) : 0);
}

static void layer_free(kvt_sparse_layer *ly) {
    free(ly->k8);
    free(ly->k8s);
    free(ly->k4);
    free(ly->k4s);
    free(ly->lo);
    free(ly->hi);
    free(ly->sel);
    free(ly->sel_score);
    free(ly->nsel);
    free(ly->hist);
    free(ly->pred_q);
    free(ly->gram);
    free(ly->kept);
    free(ly->lv);
    free(ly->lw);
    free(ly->shat);
    free(ly->rs_cal);
}

void kvt_sparse_seq_destroy(kvt_sparse *s, kvt_sparse_seq *q) {
    if (!q) return;
    for (int32_t l = 0; q->lay && l < s->d.n_layer; l++) layer_free(&q->lay[l]);
    s->summary_held -= q->summary_bytes;
    free(q->lay);
    free(q->steps);
    free(q);
}

static kvt_sparse_seq *seq_new(const kvt_sparse *s) {
    kvt_sparse_seq *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->lay = calloc((size_t)s->d.n_layer, sizeof *q->lay);
    bool ok = q->lay != NULL;
    const int64_t H = s->d.n_head_kv, W1 = s->p.window + 1;
    for (int32_t l = 0; ok && l < s->d.n_layer; l++) {
        kvt_sparse_layer *ly = &q->lay[l];
        ly->sel_pos = ly->kept_pos = -1;
        ly->nsel = kvt_sparse_zalloc((size_t)H * 8, &ok);
        if (kvt_sparse_kept_pages(s) > 0) ly->kept = kvt_sparse_zalloc((size_t)(H * kvt_sparse_kept_pages(s)), &ok);
        ly->lpos = ly->lalloc = -1;
        if (kvt_sparse_layer_pieces(s) > 0) {
            ly->lv = kvt_sparse_zalloc((size_t)kvt_sparse_layer_pieces(s) * 4, &ok);
            ly->lw = kvt_sparse_zalloc((size_t)kvt_sparse_layer_pieces(s) * 4, &ok);
        }
        if (s->p.mode == KVT_SPARSE_ASYNCSPADE) {
            ly->hist = kvt_sparse_zalloc((size_t)(H * W1 * s->gd) * 4, &ok);
            ly->pred_q = kvt_sparse_zalloc((size_t)(H * s->gd) * 4, &ok);
            ly->gram = kvt_sparse_zalloc((size_t)(H * W1 * W1) * 8, &ok); // gram_n = 0: computed at the first prediction
        }
    }
    if (!ok) {
        if (q->lay) {
            for (int32_t l = 0; l < s->d.n_layer; l++) layer_free(&q->lay[l]);
        }
        free(q->lay);
        free(q);
        return NULL;
    }
    return q;
}

kvt_sparse_seq *kvt_sparse_seq_get(kvt_sparse *s, int32_t seq) {
    if (seq < 0) return NULL;
    if (seq >= s->n_seqs) {
        const int32_t n = seq + 1 > 2 * s->n_seqs ? seq + 1 : 2 * s->n_seqs;
        pthread_mutex_lock(&s->mu); // the worker looks sequences up in the table
        kvt_sparse_seq **t = realloc(s->seqs, (size_t)n * sizeof *t);
        if (t) {
            for (int32_t i = s->n_seqs; i < n; i++) t[i] = NULL;
            s->seqs = t;
            s->n_seqs = n;
        }
        pthread_mutex_unlock(&s->mu);
        if (!t) return NULL;
    }
    if (!s->seqs[seq]) s->seqs[seq] = seq_new(s);
    return s->seqs[seq];
}

// Moves layer ly to buffers of cap positions, keeping the first old_cap positions of each KV head.
static kvt_status layer_resize(kvt_sparse *s, kvt_sparse_seq *q, kvt_sparse_layer *ly, int64_t cap, kvt_err *err) {
    const int64_t H = s->d.n_head_kv, hd = s->d.head_dim, oc = ly->cap;
    const int64_t grow = layer_summary_bytes(s, cap) - layer_summary_bytes(s, oc);
    if (s->summary_limit >= 0 && s->summary_held + grow > s->summary_limit) {
        return kvt_errorf(err, KVT_ERR_BUDGET,
                          "sparse key summaries: %lld bytes held, %lld more exceed the %lld reserved in --kv-fast "
                          "(for %d sequence(s) of n_ctx positions: raise --sparse-seqs or --kv-fast)",
                          (long long)s->summary_held, (long long)grow, (long long)s->summary_limit,
                          s->p.seqs > 0 ? s->p.seqs : 1);
    }
    bool ok = true;
    int32_t *sel = kvt_sparse_zalloc((size_t)(H * cap) * 4, &ok);
    float *sel_score = s->p.mode == KVT_SPARSE_ASYNCSPADE ? kvt_sparse_zalloc((size_t)(H * cap) * 4, &ok) : NULL;
    int8_t *k8 = NULL;
    uint8_t *k4 = NULL;
    float *k8s = NULL, *lo = NULL, *hi = NULL;
    uint16_t *k4s = NULL;
    const int64_t s4 = kvt_sparse_k4_groups((int32_t)hd); // 4-bit scales per position
    const int64_t np = pages_of(s, cap), onp = pages_of(s, oc), r4 = kvt_sparse_k4_row((int32_t)hd);
    if (uses_bits(s, 8)) {
        k8 = kvt_sparse_zalloc((size_t)(H * cap * hd), &ok);
        k8s = kvt_sparse_zalloc((size_t)(H * cap) * 4, &ok);
    }
    if (uses_bits(s, 4)) {
        k4 = kvt_sparse_zalloc((size_t)(H * cap * r4), &ok);
        k4s = kvt_sparse_zalloc((size_t)(H * cap * s4) * 2, &ok);
    }
    const int64_t qpg = s->qpg;
    float *shat = s->p.rerank_resid > 0.0 && s->p.mode == KVT_SPARSE_ASYNCSPADE ? kvt_sparse_zalloc((size_t)(H * qpg * cap) * 4, &ok) : NULL;
    double *rs_cal = shat && !ly->rs_cal ? kvt_sparse_zalloc((size_t)(2 * H) * 8, &ok) : NULL; // (once: not per position)
    if (s->p.mode == KVT_SPARSE_QUEST) {
        lo = kvt_sparse_zalloc((size_t)(H * np * hd) * 4, &ok);
        hi = kvt_sparse_zalloc((size_t)(H * np * hd) * 4, &ok);
    }
    if (!ok) {
        free(sel), free(sel_score), free(k8), free(k8s), free(k4), free(k4s), free(lo), free(hi), free(shat), free(rs_cal);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the sparse state of %lld positions", (long long)cap);
    }
    for (int64_t kh = 0; oc > 0 && kh < H; kh++) {
        memcpy(sel + kh * cap, ly->sel + kh * oc, (size_t)oc * 4);
        if (sel_score) memcpy(sel_score + kh * cap, ly->sel_score + kh * oc, (size_t)oc * 4);
        if (shat) memcpy(shat + kh * qpg * cap, ly->shat + kh * qpg * oc, (size_t)(qpg * oc) * 4); // rows of stride <= oc
        if (k8) {
            memcpy(k8 + kh * cap * hd, ly->k8 + kh * oc * hd, (size_t)(oc * hd));
            memcpy(k8s + kh * cap, ly->k8s + kh * oc, (size_t)oc * 4);
        }
        if (k4) {
            memcpy(k4 + kh * cap * r4, ly->k4 + kh * oc * r4, (size_t)(oc * r4));
            memcpy(k4s + kh * cap * s4, ly->k4s + kh * oc * s4, (size_t)(oc * s4) * 2);
        }
        if (lo) {
            memcpy(lo + kh * np * hd, ly->lo + kh * onp * hd, (size_t)(onp * hd) * 4);
            memcpy(hi + kh * np * hd, ly->hi + kh * onp * hd, (size_t)(onp * hd) * 4);
        }
    }
    free(ly->shat);
    ly->shat = shat;
    if (rs_cal) ly->rs_cal = rs_cal;
    free(ly->sel), free(ly->sel_score), free(ly->k8), free(ly->k8s), free(ly->k4), free(ly->k4s), free(ly->lo), free(ly->hi);
    ly->sel = sel, ly->sel_score = sel_score, ly->k8 = k8, ly->k8s = k8s, ly->k4 = k4, ly->k4s = k4s, ly->lo = lo, ly->hi = hi;
    ly->cap = cap;
    q->summary_bytes += grow;
    s->summary_held += grow;
    return KVT_OK;
}

kvt_status kvt_sparse_layer_reserve(kvt_sparse *s, kvt_sparse_seq *q, int32_t layer, int64_t need, kvt_err *err) {
    kvt_sparse_layer *ly = &q->lay[layer];
    const int64_t N = s->d.n_ctx;
    if (need > N) need = N;
    if (need <= ly->cap) return KVT_OK;
    int64_t cap = 2 * ly->cap > need ? 2 * ly->cap : need; // doubling: appends cost amortized O(1)
    if (cap < 64) cap = 64;
    cap = (cap + s->p.page - 1) / s->p.page * s->p.page;
    if (cap > N) cap = N;
    if (s->p.mode == KVT_SPARSE_ASYNCSPADE) cap = kvt_sparse_k8_cap(cap); // whole blocks of the int8 layout
    return layer_resize(s, q, ly, cap, err);
}

// Keys [pos0, pos0 + n) into ly's summaries, each rounded to the store's element type first (the bounds
// and the int8 copies describe the keys attention reads). Rows come in order: a page restarts at its first.
static void observe_keys(kvt_sparse *s, kvt_sparse_layer *ly, int64_t pos0, int64_t n, const float *k) {
    const kvt_type_ops *ops = kvt_type_ops_get(s->d.kv_type);
    const int32_t hd = s->d.head_dim, H = s->d.n_head_kv;
    const int64_t cap = ly->cap, np = pages_of(s, cap);
    for (int64_t t = 0; t < n; t++) {
        const int64_t pos = pos0 + t;
        for (int32_t kh = 0; kh < H; kh++) {
            ops->from_float(k + (t * H + kh) * hd, s->krow_t, hd);
            ops->to_float(s->krow_t, s->krow, hd);
            if (ly->k8) kvt_sparse_quant_key(s->krow, hd, 8, pos, ly->k8 + kh * cap * hd, ly->k8s + kh * cap);
            if (ly->k4) {
                kvt_sparse_quant_key(s->krow, hd, 4, pos, ly->k4 + kh * cap * kvt_sparse_k4_row(hd),
                                     ly->k4s + kh * cap * kvt_sparse_k4_groups(hd));
            }
            if (ly->lo) {
                const int64_t pg = pos / s->p.page;
                float *lo = ly->lo + (kh * np + pg) * hd, *hi = ly->hi + (kh * np + pg) * hd;
                const bool restart = pos % s->p.page == 0;
                for (int32_t x = 0; x < hd; x++) {
                    const float v = s->krow[x];
                    if (restart || v < lo[x]) lo[x] = v;
                    if (restart || v > hi[x]) hi[x] = v;
                }
            }
        }
    }
}

// A rewind to pos0: the summaries keep keys [0, pos0) (quest: whole pages; the open page is read again).
static void cut_keys(const kvt_sparse *s, kvt_sparse_layer *ly, int64_t pos0) {
    if (ly->key_n > pos0) ly->key_n = s->p.mode == KVT_SPARSE_QUEST ? pos0 - pos0 % s->p.page : pos0;
}

// Keys [ly->key_n, end) read back from the store into the summaries.
static kvt_status catch_up(kvt_sparse *s, kvt_kv *kv, int32_t seq, kvt_sparse_layer *ly, int32_t layer, int64_t end,
                           kvt_err *err) {
    while (ly->key_n < end) {
        const int64_t c = end - ly->key_n < KVT_SPARSE_CATCHUP ? end - ly->key_n : KVT_SPARSE_CATCHUP;
        kvt_status st = kvt_sparse_read_keys(kv, seq, layer, ly->key_n, c, s->kbuf, err);
        if (st) return st;
        observe_keys(s, ly, ly->key_n, c, s->kbuf);
        ly->key_n += c;
    }
    return KVT_OK;
}

kvt_status kvt_sparse_layer_keys(kvt_sparse *s, kvt_kv *kv, int32_t seq, kvt_sparse_seq *q, int32_t layer, int64_t pos0,
                                 int64_t n, const float *k, bool sparse_layer, kvt_err *err) {
    kvt_sparse_layer *ly = &q->lay[layer];
    if (!sparse_layer) { // never selected for: no summaries (a sliding window's store no longer holds old keys)
        ly->key_n = pos0 + n;
        return KVT_OK;
    }
    cut_keys(s, ly, pos0);
    kvt_status st = kvt_sparse_layer_reserve(s, q, layer, pos0 + n + 1, err); // + 1: the next step's selection
    if (st) return st;
    if (!has_summaries(s)) {
        ly->key_n = pos0 + n;
        return KVT_OK;
    }
    if ((st = catch_up(s, kv, seq, ly, layer, pos0, err))) return st;
    if (!k) return catch_up(s, kv, seq, ly, layer, pos0 + n, err);
    observe_keys(s, ly, pos0, n, k);
    ly->key_n = pos0 + n;
    return KVT_OK;
}

void kvt_sparse_observe_queries(kvt_sparse *s, kvt_sparse_layer *ly, int64_t n, const float *q, bool rewind) {
    if (!ly->hist) return;
    const int32_t W1 = s->p.window + 1, gd = s->gd, H = s->d.n_head_kv;
    if (rewind) ly->hist_n = ly->gram_n = ly->gram_shift = 0;
    const int64_t t0 = n > W1 ? n - W1 : 0;
    for (int64_t t = t0; t < n; t++) {
        const int32_t hn = ly->hist_n;
        if (hn == W1) ly->gram_shift++; // the oldest row leaves: the predictor's products move up a row
        for (int32_t kh = 0; kh < H; kh++) {
            float *h = ly->hist + (int64_t)kh * W1 * gd;
            if (hn == W1) memmove(h, h + gd, (size_t)(W1 - 1) * gd * sizeof(float));
            memcpy(h + (int64_t)(hn == W1 ? W1 - 1 : hn) * gd, q + (t * H + kh) * (int64_t)gd, (size_t)gd * sizeof(float));
        }
        ly->hist_n = hn == W1 ? W1 : hn + 1;
    }
}

void kvt_sparse_observe_loaded(kvt_sparse *s, int32_t seq, int32_t layer, int64_t pos0, int64_t n, const float *k) {
    if (!s || layer < s->p.dense_layers || layer >= s->d.n_layer || pos0 < 0 || n <= 0 || pos0 + n > s->d.n_ctx) return;
    kvt_sparse_seq *q = kvt_sparse_seq_get(s, seq);
    if (!q) return; // out of memory: the keys are read back from the store when the sequence attends
    kvt_sparse_wait_layer(s, q, layer); // the worker reads the summaries of the layer it selects for
    kvt_sparse_layer *ly = &q->lay[layer];
    if (ly->hist_next > pos0) ly->hist_next = -1; // the queries of the rewritten positions are gone
    cut_keys(s, ly, pos0);
    kvt_err e;
    if (!has_summaries(s) || ly->key_n != pos0 || kvt_sparse_layer_reserve(s, q, layer, pos0 + n, &e)) return;
    observe_keys(s, ly, pos0, n, k);
    ly->key_n = pos0 + n;
}

// --- the sequence calls of the context -------------------------------------------------------------------

static kvt_sparse_seq *seq_of(const kvt_sparse *s, int32_t seq) {
    return seq >= 0 && seq < s->n_seqs ? s->seqs[seq] : NULL;
}

void kvt_sparse_seq_free(kvt_sparse *s, int32_t seq) {
    kvt_sparse_seq *q = s ? seq_of(s, seq) : NULL;
    if (!q) return;
    kvt_sparse_wait_seq(s, q);
    kvt_sparse_seq_destroy(s, q);
    s->seqs[seq] = NULL;
}

void kvt_sparse_seq_truncate(kvt_sparse *s, int32_t seq, int64_t n_keep) {
    kvt_sparse_seq *q = s ? seq_of(s, seq) : NULL;
    if (!q) return;
    if (n_keep <= 0) {
        kvt_sparse_seq_free(s, seq);
        return;
    }
    kvt_sparse_wait_seq(s, q);
    for (int32_t l = 0; l < s->d.n_layer; l++) {
        kvt_sparse_layer *ly = &q->lay[l];
        cut_keys(s, ly, n_keep);
        if (ly->hist_next > n_keep) ly->hist_next = -1, ly->sel_pos = ly->kept_pos = -1; // the next call rewinds
    }
    int64_t k = 0;
    for (int64_t i = 0; i < q->n_steps; i++) {
        if (q->steps[i].pos < n_keep) q->steps[k++] = q->steps[i];
    }
    q->n_steps = k;
}

kvt_status kvt_sparse_seq_fork(kvt_sparse *s, int32_t src, int32_t dst, int64_t n, kvt_err *err) {
    if (!s) return KVT_OK;
    kvt_sparse_seq_free(s, dst);
    kvt_sparse_seq *a = seq_of(s, src);
    if (!a) return KVT_OK; // nothing yet: dst builds its state as src would
    kvt_sparse_wait_seq(s, a);
    kvt_sparse_seq *b = kvt_sparse_seq_get(s, dst);
    if (!b) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the sparse state of sequence %d", dst);
    a = s->seqs[src]; // the table may have moved
    b->lb_pos = a->lb_pos;
    const int64_t H = s->d.n_head_kv, hd = s->d.head_dim, W1 = s->p.window + 1;
    for (int32_t l = 0; l < s->d.n_layer; l++) {
        kvt_sparse_layer *x = &a->lay[l], *y = &b->lay[l];
        kvt_status st = x->cap > 0 ? layer_resize(s, b, y, x->cap, err) : KVT_OK;
        if (st) {
            kvt_sparse_seq_free(s, dst);
            return st;
        }
        const int64_t cap = x->cap, np = pages_of(s, cap);
        if (cap > 0) memcpy(y->sel, x->sel, (size_t)(H * cap) * 4);
        if (cap > 0 && x->sel_score) memcpy(y->sel_score, x->sel_score, (size_t)(H * cap) * 4);
        if (cap > 0 && x->k8) {
            memcpy(y->k8, x->k8, (size_t)(H * cap * hd));
            memcpy(y->k8s, x->k8s, (size_t)(H * cap) * 4);
        }
        if (cap > 0 && x->k4) {
            memcpy(y->k4, x->k4, (size_t)(H * cap * kvt_sparse_k4_row((int32_t)hd)));
            memcpy(y->k4s, x->k4s, (size_t)(H * cap * kvt_sparse_k4_groups((int32_t)hd)) * 2);
        }
        if (cap > 0 && x->lo) {
            memcpy(y->lo, x->lo, (size_t)(H * np * hd) * 4);
            memcpy(y->hi, x->hi, (size_t)(H * np * hd) * 4);
        }
        memcpy(y->nsel, x->nsel, (size_t)H * 8);
        if (cap > 0 && x->shat) memcpy(y->shat, x->shat, (size_t)(H * s->qpg * cap) * 4);
        if (cap > 0 && x->rs_cal) memcpy(y->rs_cal, x->rs_cal, (size_t)(2 * H) * 8);
        if (x->hist) {
            memcpy(y->hist, x->hist, (size_t)(H * W1 * s->gd) * 4);
            memcpy(y->pred_q, x->pred_q, (size_t)(H * s->gd) * 4);
        }
        y->key_n = x->key_n;
        y->hist_n = x->hist_n;
        y->hist_next = x->hist_next;
        y->sel_pos = x->sel_pos;
        if (x->kept) memcpy(y->kept, x->kept, (size_t)(H * kvt_sparse_kept_pages(s)));
        y->kept_pos = x->kept_pos;
        if (x->lv) {
            memcpy(y->lv, x->lv, (size_t)x->ln * 4);
            memcpy(y->lw, x->lw, (size_t)x->ln * 4);
        }
        y->ln = x->ln, y->lkk = x->lkk, y->lpos = x->lpos, y->lalloc = x->lalloc;
        cut_keys(s, y, n);
        if (y->hist_next > n) y->hist_next = -1, y->sel_pos = y->kept_pos = -1;
    }
    return KVT_OK;
}
