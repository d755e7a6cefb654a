// sparse_choose.c - the selection of a layer's next set (asyncspade's predicted query on the int8 keys, its
// re-rank and fallback, quest's page bounds, the oracle), and the asyncspade worker that selects for every
// sequence of the context off the critical path.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/timer.h"
#include "../kv/kv_paged.h"
#include "sparse_impl.h"

// The worker, between parts of its work (each KV head's prediction, its scan every SCAN_PART positions, each softmax
// row, the aggregate, the top-k): while a re-rank runs (on the critical path, over the pool's threads), it
// sleeps, so that the re-rank has the cores (on a machine with as many cores as the pool has threads, a running worker
// took one of them from the re-rank: the candidates' scores then ran mostly on the caller, in 1.3-1.6x the time, and
// the documented configuration's re-rank met a running worker at ~85% of its layers; docs/log/SPARSE-log-2.md, "The
// worker gives the cores to the re-rank"). Only the timing changes: the worker computes the same values whenever it
// runs. rr_running and worker_paused are sequentially consistent: the worker sets worker_paused before it reads
// rr_running, the re-rank clears rr_running before it reads worker_paused, so that one of them sees the other's store
// (no lost wake-up: rr_end then broadcasts under mu).
static void worker_yield(kvt_sparse *s) {
    if (atomic_load_explicit(&s->rr_running, memory_order_relaxed) == 0) return;
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->worker_paused, 1);
    while (atomic_load(&s->rr_running) > 0 && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
    atomic_store(&s->worker_paused, 0);
    pthread_mutex_unlock(&s->mu);
}

static void rr_begin(kvt_sparse *s) {
    if (s->has_worker) atomic_fetch_add(&s->rr_running, 1);
}

static void rr_end(kvt_sparse *s) {
    if (!s->has_worker) return;
    if (atomic_fetch_sub(&s->rr_running, 1) == 1 && atomic_load(&s->worker_paused)) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

// positions of the worker's scan between two checks of worker_yield (a multiple of 16): 256 (~4-6 us of scan here) and not
// 2048 (~30-45 us), so that a re-rank that finds the worker scanning gets the second core sooner (docs/log/SPARSE-log-2.md,
// "The re-rank's stall taken apart")
enum { SCAN_PART = 256 };

// raw[i * n + t] = scale * q_i . k_t of KV head kh for t < n_keys, -inf for the rest (q: the group's qpg query
// rows, taken as int16 with a scale per row: integer dot products with the key copies of `bits`, sparse_score.c).
// yield (the worker): the positions in parts of SCAN_PART, worker_yield between them (each score is computed alone:
// the same bits in one call or in parts).
static void score_keys(kvt_sparse *s, const kvt_sparse_layer *ly, int32_t kh, int32_t bits, const float *q, int64_t n,
                       int64_t n_keys, float scale, float *raw, bool yield) {
    int16_t q16[KVT_SPARSE_MAX_QPG * KVT_SPARSE_MAX_HD];
    float qs[KVT_SPARSE_MAX_QPG];
    kvt_sparse_quant_query(q, s->qpg, s->d.head_dim, q16, qs);
    const kvt_sparse_keys k = kvt_sparse_keys_of(ly, bits, kh, s->d.head_dim);
    if (n_keys > n) n_keys = n;
    const int64_t part = yield ? SCAN_PART : n_keys; // positions per call (the caller: all in one)
    const int64_t off = kvt_sparse_off(ly); // a shared base's positions [0, off): whole blocks of 16, as part
    for (int64_t t0 = 0; t0 < n_keys; t0 += part) {
        if (yield) worker_yield(s);
        const int64_t m = n_keys - t0 < part ? n_keys - t0 : part, mb = t0 >= off ? 0 : off - t0 < m ? off - t0 : m;
        if (mb > 0) { // (each score is its own: the same bits in one run or two)
            kvt_sparse_score_keys_rows(q16, qs, s->qpg, s->d.head_dim, kvt_sparse_base_keys_of(ly, bits, kh, s->d.head_dim), t0,
                                       mb, n, scale, raw + t0);
        }
        if (m > mb) kvt_sparse_score_keys_rows(q16, qs, s->qpg, s->d.head_dim, k, t0 + mb - off, m - mb, n, scale, raw + t0 + mb);
    }
    for (int32_t i = 0; i < s->qpg; i++) {
        for (int64_t t = n_keys; t < n; t++) raw[(int64_t)i * n + t] = -INFINITY;
    }
    if (yield) worker_yield(s);
}

static double dot_d(const float *a, const float *b, int32_t d) {
    double t = 0.0;
    for (int32_t x = 0; x < d; x++) t += (double)a[x] * b[x];
    return t;
}

// Every position of each page of B positions takes the page's largest score (sum: the sum of its scores, the
// page's mass): top-k then picks whole pages (the last one cut at the budget), as the store moves whole blocks.
static void page_max(float *score, int64_t n, int32_t B, bool sum) {
    if (sum) {
        kvt_sparse_page_sums(score, n, B);
        return;
    }
    for (int64_t p0 = 0; p0 < n; p0 += B) {
        const int64_t p1 = p0 + B < n ? p0 + B : n;
        float m = score[p0];
        for (int64_t t = p0 + 1; t < p1; t++) m = sum ? m + score[t] : score[t] > m ? score[t] : m;
        for (int64_t t = p0; t < p1; t++) score[t] = m;
    }
}

static int32_t *sel_of(const kvt_sparse_layer *ly, int32_t kh) { return ly->sel + (int64_t)kh * ly->cap; }

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// The blocks of KV head kh's new selection (sel, m positions) to the store's copy engine. With prefetch_top and a
// re-rank, only the blocks of the prefetch_top * K best candidates by their predicted score (sc[x]: sel[x]'s), best block first
// (sink and recent first: attention reads them whatever the re-rank keeps), so that a fast tier of about K positions
// is filled with what the real query will most likely keep instead of being churned by all F * K candidates.
// final: sel is the set attention reads now; the store marks the shard's other blocks as the first to evict.
// Nothing to do on a store that is not paged (the contiguous cache holds every position in memory).
static void prefetch_head(kvt_sparse *s, kvt_sparse_scratch *ss, const int32_t *sel, const float *sc, int64_t m, int64_t n,
                          int64_t K, int32_t seq, int32_t layer, int32_t kh, bool final) {
    const kvt_kv *kv = s->kv;
    if (strcmp(kv->ops->name, "paged") != 0) return;
    const int64_t B = kv->block_tokens;
    int64_t nb = 0;
    const int64_t K2 = (int64_t)ceil(s->p.prefetch_top * (double)K);
    if (K > 0 && sc && s->p.prefetch_top > 0.0 && s->p.rerank > 1.0 && K2 < m) {
        // the K2 best of the n positions are the K2 best of the m candidates (sel: the best F * K by the same scores,
        // ties to the earlier position, sink and recent all in): top-k over the candidates' scores (compacted into
        // raw, free by now) gives the same positions at half the work
        int64_t c_sink = 0, c_recent = 0;
        for (int64_t x = 0; x < m; x++) {
            ss->raw[x] = sc[x];
            c_sink += sel[x] < s->p.sink;
            c_recent += sel[x] >= n - s->p.recent;
        }
        const int64_t m2 = s->p.block > 1 // whole pages of one score (page_max): top-k over the pages
                               ? kvt_sparse_topk_pages(ss->raw, m, K2, c_sink, c_recent, s->p.block, sel, ss->csel, ss->vals, ss->wts)
                               : kvt_sparse_topk(ss->raw, m, K2, c_sink, c_recent, ss->csel, ss->mark, ss->vals);
        m = m2;
        uint64_t *key = (uint64_t *)ss->blk; // (descending score, ascending block), as one sortable key
        for (int64_t x = 0; x < m; x++) {
            const int32_t t = sel[ss->csel[x]];
            const float v = t < s->p.sink || t >= n - s->p.recent ? INFINITY : sc[ss->csel[x]];
            uint32_t u;
            memcpy(&u, &v, 4);
            u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); // ascending with the float
            const uint64_t k = ((uint64_t)~u << 32) | (uint64_t)(t / B);
            if (nb > 0 && (key[nb - 1] & 0xffffffffu) == (uint64_t)(t / B)) {
                if (k < key[nb - 1]) key[nb - 1] = k; // the block's best position
            } else {
                key[nb++] = k;
            }
        }
        qsort(key, (size_t)nb, sizeof *key, cmp_u64);
        for (int64_t i = 0; i < nb; i++) ss->blk[i] = (int64_t)(key[i] & 0xffffffffu);
    } else {
        for (int64_t x = 0; x < m; x++) {
            const int64_t b = sel[x] / B;
            if (nb == 0 || ss->blk[nb - 1] != b) ss->blk[nb++] = b;
        }
    }
    kvt_kv_paged_prefetch(s->kv, seq, layer, kh / kv->group_heads, ss->blk, nb);
    if (final && kv->group_heads == 1) kvt_kv_paged_set_selected(s->kv, seq, layer, kh, ss->blk, nb); // ascending
}

// Positions a selection takes for a budget of K0: K0, and with a re-rank its candidates, K0 + (rerank - 1) x the middle.
static int64_t candidates_of(const kvt_sparse *s, int64_t K0) {
    const int64_t mid = K0 - s->p.sink - s->p.recent;
    return K0 + (s->p.rerank > 1.0 && mid > 0 ? (int64_t)((s->p.rerank - 1.0) * (double)mid) : 0);
}

// KV head kh's K best positions by the group's scores ss->agg[0 .. n) (pages of --sparse-block when that is > 1: page_max
// rewrites agg first), into its selection, with each one's score (sel_score: the prefetch order).
static void choose_head(const kvt_sparse *s, kvt_sparse_layer *ly, kvt_sparse_scratch *ss, int32_t kh, int64_t n, int64_t K) {
    int32_t *sel = sel_of(ly, kh);
    if (s->p.block > 1) { // whole pages of one score each: top-k over the pages
        page_max(ss->agg, n, s->p.block, s->p.block_sum);
        ly->nsel[kh] = kvt_sparse_topk_pages(ss->agg, n, K, s->p.sink, s->p.recent, s->p.block, NULL, sel, ss->vals, ss->wts);
    } else {
        ly->nsel[kh] = kvt_sparse_topk(ss->agg, n, K, s->p.sink, s->p.recent, sel, ss->mark, ss->vals);
    }
    float *sc = ly->sel_score ? ly->sel_score + (int64_t)kh * ly->cap : NULL;
    for (int64_t x = 0; sc && x < ly->nsel[kh]; x++) sc[x] = ss->agg[sel[x]];
}

void kvt_sparse_select_predicted(kvt_sparse *s, kvt_sparse_layer *ly, kvt_sparse_scratch *ss, int64_t P, float scale,
                                 int32_t pf_seq, int32_t pf_layer) {
    const int64_t n = P + 1;
    const int64_t K0 = kvt_sparse_budget_of(s, n), K = candidates_of(s, K0);
    const int32_t hn = ly->hist_n, hd = s->d.head_dim, gd = s->gd;
    const bool align = s->p.rope_align && s->d.rope.n_rot > 0;
    for (int32_t kh = 0; kh < s->d.n_head_kv; kh++) {
        const float *h = ly->hist + (int64_t)kh * (s->p.window + 1) * gd;
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
        } else if (align) { // the rows rotate differently at every step: no products kept
            if (s->p.predictor == KVT_SPARSE_PRED_SIMPLEX) kvt_sparse_predict_simplex(h, hn, gd, s->windows, s->nw, s->p.lambda, ss->pred, ss->work);
            else kvt_sparse_predict(h, hn, gd, s->windows, s->nw, s->p.lambda, true, ss->pred, ss->work);
        } else { // the ridge (or simplex) ensemble on the history's Gram matrix kept from the last step (the same bits)
            const int32_t W1 = s->p.window + 1;
            double *G = ly->gram + (int64_t)kh * W1 * W1;
            int32_t gn = ly->gram_n, gs = ly->gram_shift; // every head's products moved by the same rows
            kvt_sparse_gram_update(h, hn, gd, G, W1, &gn, &gs);
            kvt_sparse_predict_gram(h, hn, gd, s->windows, s->nw, s->p.lambda, s->p.predictor == KVT_SPARSE_PRED_SIMPLEX, G, W1,
                                    ss->pred, ss->work);
        }
        memcpy(ly->pred_q + (int64_t)kh * gd, ss->pred, (size_t)gd * sizeof(float));
        const bool worker = ss == &s->work_ss;
        // --sparse-rerank-resid: the raw scores kept in the layer for the re-rank (s^), the softmax terms into the scratch
        float *sh = ly->shat ? ly->shat + (int64_t)kh * s->qpg * ly->cap : NULL;
        score_keys(s, ly, kh, s->p.key_bits, ss->pred, n, P, scale, sh ? sh : ss->raw, worker); // (checks first)
        float inv[KVT_SPARSE_MAX_QPG]; // kvt_sparse_aggregate's operations, the worker checking after each softmax row
        for (int32_t i = 0; i < s->qpg; i++) {
            inv[i] = sh ? kvt_sparse_softmax_row_to(sh + (int64_t)i * n, ss->raw + (int64_t)i * n, n)
                        : kvt_sparse_softmax_row(ss->raw + (int64_t)i * n, n);
            if (worker) worker_yield(s);
        }
        kvt_sparse_aggregate_rows(ss->raw, s->qpg, n, n, inv, ss->agg);
        if (worker) worker_yield(s);
        choose_head(s, ly, ss, kh, n, K); // (with the candidates' predicted scores: the prefetch order)
        if (worker) worker_yield(s);
        if (pf_layer >= 0 && s->kv) {
            prefetch_head(s, ss, sel_of(ly, kh), ly->sel_score + (int64_t)kh * ly->cap, ly->nsel[kh], n, K0, pf_seq, pf_layer, kh, false);
        }
    }
    if (ly->gram && !align && (s->p.predictor == KVT_SPARSE_PRED_RIDGE || s->p.predictor == KVT_SPARSE_PRED_SIMPLEX)) {
        ly->gram_n = hn, ly->gram_shift = 0; // every head's products are up to date
    }
    ly->sel_pos = P;
}

// rerank_block: each candidate of a page of Q positions (candidates sorted, x in [0, nc)) takes the page's mass, the
// sum of agg over its candidates; sink and recent candidates (kept anyway) keep theirs and add nothing, so that a
// page is not chosen for the forced positions it holds. Top-K then keeps whole pages, the most mass first.
static void page_mass(float *agg, const int32_t *sel, int64_t nc, int64_t c_sink, int64_t c_recent, int32_t Q) {
    for (int64_t x = c_sink; x < nc - c_recent;) {
        int64_t e = x;
        float m = 0.0f;
        const int32_t end = (sel[x] / Q + 1) * Q; // sorted: the page's candidates are the run below its end
        for (; e < nc - c_recent && sel[e] < end; e++) m += agg[e];
        for (int64_t y = x; y < e; y++) agg[y] = m;
        x = e;
    }
}

// keep: the pages of KV head kh's final set (sel, m positions) marked as kept by decode position P, the others not.
static void mark_kept(const kvt_sparse *s, kvt_sparse_layer *ly, int32_t kh, const int32_t *sel, int64_t m) {
    const int64_t np = kvt_sparse_kept_pages(s);
    uint8_t *kept = ly->kept + kh * np;
    memset(kept, 0, (size_t)np);
    for (int64_t x = 0, end = 0, pg = -1; x < m; x++) { // sorted: one division per page
        if (sel[x] >= end) pg = sel[x] / s->p.rerank_block, end = (pg + 1) * s->p.rerank_block, kept[pg] = 1;
    }
}

// The re-rank (kvt_sparse_rerank) in three passes, so that its work spreads over the pool's threads however few KV
// heads there are (one task per head left a thread idle for a third of the re-rank with 3 heads on 2 threads): (1) the
// candidates' scores, each KV head's candidates cut into `chunks` parts; (2) each (KV head, query head) row's softmax;
// (3) per KV head, the group's mass, the pages, the hysteresis and top-K. Every task reads and writes only its own rows
// (its head's rows of ly and of the rr_* buffers), and each value is computed by the same arithmetic whatever the
// split (integer dot products per candidate, one row's exp sum in one task): the same bits for every thread count.
typedef struct {
    kvt_sparse *s;
    kvt_sparse_layer *ly;
    int64_t P, K;   // the decode position; positions kept per KV head
    float scale;
    bool use_kept;  // the pages kept at P - 1 count (1 + keep) times
    int32_t chunks; // parts of a head's candidates in pass 1
} rerank_job;

// Whether KV head kh has candidates to drop (else its selection stays as it is).
static bool rr_active(const rerank_job *J, int32_t kh) { return J->ly->nsel[kh] > J->K; }

static float *rr_raw(const rerank_job *J, int32_t kh) { return J->s->rr_raw + (int64_t)kh * J->s->qpg * J->s->d.n_ctx; }

// Pass 1, task kh * chunks + c: the c-th part of KV head kh's candidates scored in place (no copy of their int8 rows);
// position P, the query's own, has no int8 row yet: -inf, as in the full scan (it is always kept, recent).
static void rr_score_task(void *ctx, int64_t task, int thread) {
    const rerank_job *J = ctx;
    kvt_sparse *s = J->s;
    const int32_t kh = (int32_t)(task / J->chunks), c = (int32_t)(task % J->chunks), hd = s->d.head_dim;
    if (!rr_active(J, kh)) return;
    const int32_t *sel = sel_of(J->ly, kh);
    const int64_t nc = J->ly->nsel[kh];
    const int64_t nk = sel[nc - 1] >= J->P ? nc - 1 : nc; // sorted: only the last can be P
    const int64_t x0 = nk * c / J->chunks, x1 = nk * (c + 1) / J->chunks;
    float *raw = rr_raw(J, kh);
    if (s->rs_nr && s->rs_nr[kh] > 0) {
        kvt_sparse_resid_score(s, J->ly, kh, J->P, sel, x0, x1, nc, raw); // (never a shared base: resid forks copy)
    } else {
        const int16_t *q16 = s->rr_q16 + (int64_t)kh * s->gd;
        const float *qs = s->rr_qs + (int64_t)kh * s->qpg;
        const int64_t off = kvt_sparse_off(J->ly);
        int64_t xb = x0; // sorted: the candidates in the shared base first, then those in the own buffers
        while (xb < x1 && sel[xb] < off) xb++;
        if (xb > x0) {
            kvt_sparse_score_keys_set(q16, qs, s->qpg, hd, kvt_sparse_base_keys_of(J->ly, s->p.rerank_bits, kh, hd), sel + x0,
                                      xb - x0, nc, J->scale, raw + x0);
        }
        if (x1 > xb) {
            const int32_t *pos = sel + xb;
            if (off > 0) { // the own buffers' positions start at off
                kvt_sparse_scratch *ss = s->rr_ss ? &s->rr_ss[thread] : &s->main_ss;
                for (int64_t x = xb; x < x1; x++) ss->csel[x - xb] = sel[x] - (int32_t)off;
                pos = ss->csel;
            }
            kvt_sparse_score_keys_set(q16, qs, s->qpg, hd, kvt_sparse_keys_of(J->ly, s->p.rerank_bits, kh, hd), pos, x1 - xb,
                                      nc, J->scale, raw + xb);
        }
    }
    if (c == J->chunks - 1) {
        for (int64_t y = nk; y < nc; y++) {
            for (int32_t i = 0; i < s->qpg; i++) raw[(int64_t)i * nc + y] = -INFINITY;
        }
    }
}

// Pass 2, task kh * qpg + i: query head i's softmax over KV head kh's candidates.
static void rr_softmax_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const rerank_job *J = ctx;
    const int32_t kh = (int32_t)(task / J->s->qpg), i = (int32_t)(task % J->s->qpg);
    if (!rr_active(J, kh)) return;
    const int64_t nc = J->ly->nsel[kh];
    J->s->rr_inv[task] = kvt_sparse_softmax_row(rr_raw(J, kh) + (int64_t)i * nc, nc);
}

// Pass 3 with pages (rerank_block Q > 1; with share, Q = 1 at token level): KV head kh's middle candidates (sorted, [c0, c1)) cut into pieces at page ends
// in one pass over the softmax terms (rows, [qpg][nc]): each piece's mass into raw (NaN as -inf; NULL: not kept), its
// score into v (the mass, times f in a page kept at P - 1; NaN as -inf) and its number of candidates into w; returns the
// pieces' count; agg: scratch of c1 - c0 floats. A candidate's mass is kvt_sparse_aggregate_rows' (its rows' terms times
// their inv summed in row order), a piece's the sum of its candidates' in order from 0: the operations of page_mass and
// the hysteresis' factor in the same order, so the same bits.
static int64_t rr_pieces(const kvt_sparse *s, const float *rows, const float *inv, const int32_t *sel, int64_t nc, int64_t c0,
                         int64_t c1, const uint8_t *kept, float f, float *agg, float *v, float *raw, int32_t *w) {
    const int32_t Q = s->p.rerank_block > 1 ? s->p.rerank_block : 1; // token level (share): a piece per candidate
    kvt_sparse_aggregate_rows(rows + c0, s->qpg, c1 - c0, nc, inv, agg); // vectorized, the rows in order
    int64_t ns = 0;
    float m16[16];
    for (int64_t x = c0, e; x < c1; x = e) {
        // 16 whole pages in a row (the worker's candidates come in whole pages): their masses side by side, each summed
        // in the same order from 0 (kvt_sparse_piece_sums16); a page is whole when its Q candidates are Q consecutive
        // entries from a page start (sorted and distinct: exactly the page's positions)
        int32_t F = 0;
        while (F < 16 && x + (int64_t)(F + 1) * Q <= c1 && sel[x + (int64_t)F * Q] % Q == 0 &&
               sel[x + (int64_t)F * Q + Q - 1] == sel[x + (int64_t)F * Q] + Q - 1) {
            F++;
        }
        if (F == 16) {
            kvt_sparse_piece_sums16(agg + (x - c0), Q, m16);
            for (int32_t j = 0; j < 16; j++, ns++) {
                const float m = m16[j];
                const float mk = kept && kept[sel[x + (int64_t)j * Q] / Q] ? m * f : m;
                v[ns] = isnan(mk) ? -INFINITY : mk;
                if (raw) raw[ns] = isnan(m) ? -INFINITY : m;
                w[ns] = Q;
            }
            e = x + 16 * (int64_t)Q;
            continue;
        }
        const int32_t end = (sel[x] / Q + 1) * Q; // sorted: the page's candidates are the run below its end
        float m = 0.0f;
        for (e = x; e < c1 && sel[e] < end; e++) m += agg[e - c0];
        const float mk = kept && kept[sel[x] / Q] ? m * f : m;
        v[ns] = isnan(mk) ? -INFINITY : mk;
        if (raw) raw[ns] = isnan(m) ? -INFINITY : m;
        w[ns++] = (int32_t)(e - x);
    }
    return ns;
}

// Pass 3, task kh: the group's mass per candidate (the rows summed in order), pages, hysteresis, top-K, in the scratch
// of the thread that runs it. With pages, the pieces straight from the softmax terms (rr_pieces), then top-K over them
// as kvt_sparse_topk_pages does (the same threshold and ties, so the same set); with share, only the head's pieces (into
// sh_vals, sh_wts, sh_raw): the layer's top-k over every head's pages follows (share_choose).
static void rr_choose_task(void *ctx, int64_t task, int thread) {
    const rerank_job *J = ctx;
    kvt_sparse *s = J->s;
    kvt_sparse_layer *ly = J->ly;
    kvt_sparse_scratch *ss = s->rr_ss ? &s->rr_ss[thread] : &s->main_ss;
    const int32_t kh = (int32_t)task, H = s->d.n_head_kv;
    const int64_t n = J->P + 1, K = J->K;
    const bool keep = ly->kept != NULL;
    int32_t *sel = sel_of(ly, kh);
    const int64_t nc = ly->nsel[kh];
    if (nc <= K) { // nothing to drop
        if (keep) mark_kept(s, ly, kh, sel, nc);
        return;
    }
    int64_t c_sink = 0, c_recent = 0; // sorted: a prefix and a suffix
    while (c_sink < nc && sel[c_sink] < s->p.sink) c_sink++;
    while (c_recent < nc && sel[nc - 1 - c_recent] >= n - s->p.recent) c_recent++;
    const float *rows = rr_raw(J, kh), *inv = s->rr_inv + (int64_t)kh * s->qpg;
    const uint8_t *kept = J->use_kept ? ly->kept + kh * kvt_sparse_kept_pages(s) : NULL; // kept: only with pages
    const float f = (float)(1.0 + s->p.keep);
    if (s->sh_vals) { // share: the layer's pages (or, at token level, positions) are chosen together (share_choose)
        const int64_t N = s->d.n_ctx;
        // sink and recent overlap (a context shorter than both): the recent ones counted once, as kvt_sparse_topk
        // clips them: no middle, every candidate kept (share_choose writes c_sink + c_recent of them)
        if (c_sink + c_recent > nc) c_recent = nc - c_sink;
        const int64_t ns = c_sink + c_recent == nc ? 0
                                                   : rr_pieces(s, rows, inv, sel, nc, c_sink, nc - c_recent, kept, f, ss->agg, s->sh_vals + kh * N,
                                                               s->sh_raw ? s->sh_raw + kh * N : NULL, s->sh_wts + kh * N);
        s->sh_cnt[kh] = c_sink, s->sh_cnt[H + kh] = c_recent, s->sh_cnt[2 * H + kh] = ns;
        return;
    }
    if (s->p.rerank_block > 1 && c_sink + c_recent <= nc) { // top-K over the pieces, as kvt_sparse_topk_pages
        const int64_t c1 = nc - c_recent, kk = K - c_sink - c_recent; // kk < the middle's candidates (nc > K)
        float *v = ss->agg;
        int32_t *w = ss->csel;
        // --sparse-rerank-resid, a head calibrating: the share of its middle candidates' mass the chosen pieces hold
        double *cal = ly->rs_cal ? ly->rs_cal + 2 * kh : NULL;
        if (cal && cal[0] >= s->p.rerank_resid_cal) cal = NULL;
        float *pm = cal ? ss->raw : NULL;
        double m_all = 0.0, m_kept = 0.0;
        const int64_t ns = rr_pieces(s, rows, inv, sel, nc, c_sink, c1, kept, f, ss->vals, v, pm, w);
        float thr = INFINITY;
        int64_t ties = 0;
        if (kk > 0) { // the kk-th largest, a piece counted once per candidate; what the pieces above it leave to the ties
            memcpy(ss->vals, v, (size_t)ns * sizeof(float));
            memcpy(ss->wts, w, (size_t)ns * sizeof(int32_t));
            thr = kvt_sparse_weighted_kth(ss->vals, ss->wts, ns, kk);
            ties = kk;
            for (int64_t i = 0; i < ns; i++) ties -= v[i] > thr ? w[i] : 0;
        }
        int64_t c = c_sink, x = c_sink; // the pieces in order, in place (c <= x); ties to the lower positions
        for (int64_t i = 0; i < ns; x += w[i], i++) {
            int64_t take = v[i] > thr ? w[i] : 0;
            if (kk > 0 && v[i] == thr) take = ties < w[i] ? ties : w[i], ties -= take;
            if (pm && pm[i] > 0.0f) m_all += pm[i], m_kept += take == w[i] ? pm[i] : (double)pm[i] * (double)take / w[i];
            if (take == 16 && c < x) memmove(sel + c, sel + x, 16 * sizeof *sel); // a whole page of 16: one move
            else if (c < x) for (int64_t y = 0; y < take; y++) sel[c + y] = sel[x + y];
            c += take;
        }
        for (int64_t y = c1; y < nc; y++) sel[c++] = sel[y];
        ly->nsel[kh] = c;
        if (keep) mark_kept(s, ly, kh, sel, c);
        if (cal && m_all > 0.0) cal[0] += 1.0, cal[1] += m_kept / m_all;
        return;
    }
    kvt_sparse_aggregate_rows(rows, s->qpg, nc, nc, inv, ss->agg);
    if (s->p.rerank_block > 1) page_mass(ss->agg, sel, nc, c_sink, c_recent, s->p.rerank_block); // (no middle: no piece)
    // top-K over the candidates in position order (sink and recent: their first and last ones)
    const int64_t m = s->p.rerank_block > 1 // the candidates of a page share its mass: top-k over the pages
                          ? kvt_sparse_topk_pages(ss->agg, nc, K, c_sink, c_recent, s->p.rerank_block, sel, ss->csel, ss->vals, ss->wts)
                          : kvt_sparse_topk(ss->agg, nc, K, c_sink, c_recent, ss->csel, ss->mark, ss->vals);
    for (int64_t x = 0; x < m; x++) sel[x] = sel[ss->csel[x]]; // csel ascending, csel[x] >= x
    ly->nsel[kh] = m;
    if (keep) mark_kept(s, ly, kh, sel, m);
}

// share, on the caller after pass 3: one top-k over the pages of every KV head with candidates to drop (the pieces of
// rr_pieces), for the sum of their budgets' middles, as kvt_sparse_topk_pages over the heads' middles side by side
// (the same threshold; ties to the first head, then the lower position); each head then keeps its sink, its recent and
// its chosen pages. Serial over the pieces (K / page of them per head), in a fixed order: the same bits on any thread
// count.
static void share_choose(const rerank_job *J) {
    kvt_sparse *s = J->s;
    kvt_sparse_layer *ly = J->ly;
    const int32_t H = s->d.n_head_kv;
    const int64_t N = s->d.n_ctx, *c0 = s->sh_cnt, *c1 = s->sh_cnt + H, *np = s->sh_cnt + 2 * H;
    int64_t ns = 0, kk = 0, total = 0;
    for (int32_t kh = 0; kh < H; kh++) {
        if (!rr_active(J, kh)) continue;
        if (ly->lv) memcpy(ly->lv + ns, s->sh_raw + kh * N, (size_t)np[kh] * 4); // share_layers: the unscaled masses
        for (int64_t i = 0; i < np[kh]; i++, ns++) s->sh_v[ns] = s->sh_vals[kh * N + i], s->sh_w[ns] = s->sh_wts[kh * N + i], total += s->sh_w[ns];
        kk += J->K - c0[kh] - c1[kh];
    }
    if (ly->lv) { // share_layers: this step's pieces, the budget's next record; the shared budget, when set, replaces kk
        const int64_t prev = ly->lkk; // (the budget lalloc was shared from: the previous step's, lpos P - 1)
        memcpy(ly->lw, s->sh_w, (size_t)ns * 4);
        ly->ln = ns, ly->lkk = kk, ly->lpos = J->P;
        // the layer's share, plus its own budget's growth since (a fractional budget grows with the position): one
        // sparse layer alone then takes its own budget, as without share_layers
        if (ly->lalloc >= 0) kk = ly->lalloc + (kk - prev);
    }
    const bool all = kk >= total;
    const float thr = all || kk <= 0 ? INFINITY : kvt_sparse_weighted_kth(s->sh_v, s->sh_w, ns, kk);
    int64_t ties = kk; // what the pieces above thr leave to the ties (the first head's, the lowest first)
    for (int32_t kh = 0; kh < H; kh++) {
        for (int64_t i = 0; rr_active(J, kh) && i < np[kh]; i++) ties -= s->sh_vals[kh * N + i] > thr ? s->sh_wts[kh * N + i] : 0;
    }
    for (int32_t kh = 0; kh < H; kh++) {
        if (!rr_active(J, kh)) continue;
        int32_t *sel = sel_of(ly, kh);
        const int64_t nc = ly->nsel[kh];
        int64_t c = c0[kh], x = c0[kh];
        for (int64_t i = 0; i < np[kh]; i++) { // the pieces in order, in place (c <= x)
            const float v = s->sh_vals[kh * N + i];
            const int32_t w = s->sh_wts[kh * N + i];
            int64_t take = all || v > thr ? w : 0;
            if (!all && v == thr && kk > 0) take = ties < w ? ties : w, ties -= take;
            for (int64_t y = 0; y < take; y++) sel[c + y] = sel[x + y];
            c += take, x += w;
        }
        for (int64_t y = nc - c1[kh]; y < nc; y++) sel[c++] = sel[y];
        ly->nsel[kh] = c;
        if (ly->kept) mark_kept(s, ly, kh, sel, c);
    }
}

// kvt_sparse_layer_budgets: how many of the n pieces' candidates (v, w in order) the threshold thr takes, the pieces at
// thr taking from *ties in order (as share_choose and kvt_sparse_topk_pages cut them).
static int64_t taken_at(const float *v, const int32_t *w, int64_t n, float thr, int64_t *ties) {
    int64_t a = 0;
    for (int64_t i = 0; i < n; i++) {
        if (v[i] > thr) {
            a += w[i];
        } else if (v[i] == thr && *ties > 0) {
            const int64_t t = *ties < w[i] ? *ties : w[i];
            a += t, *ties -= t;
        }
    }
    return a;
}

void kvt_sparse_layer_budgets(kvt_sparse *s, kvt_sparse_seq *q, int64_t P) {
    if (q->lb_pos == P) return;
    q->lb_pos = P;
    int64_t ns = 0, kk = 0, total = 0;
    for (int32_t l = 0; l < s->d.n_layer; l++) {
        kvt_sparse_layer *ly = &q->lay[l];
        ly->lalloc = -1;
        if (!ly->lv || ly->lpos != P - 1 || ly->kept_pos != P - 1 || ly->ln <= 0 || ly->lkk <= 0) continue;
        float *v = s->ls_v + ns;
        int32_t *w = s->ls_w + ns;
        memcpy(v, ly->lv, (size_t)ly->ln * 4);
        memcpy(w, ly->lw, (size_t)ly->ln * 4);
        int64_t lt = 0;
        for (int64_t i = 0; i < ly->ln; i++) lt += w[i];
        const int64_t fk = (int64_t)(s->p.layer_floor * (double)ly->lkk);
        if (fk > 0) { // the layer's best pieces up to fk candidates first (+inf; whole pieces: at least fk)
            memcpy(s->ls_v2, v, (size_t)ly->ln * 4);
            memcpy(s->ls_w2, w, (size_t)ly->ln * 4);
            const float tl = fk >= lt ? -INFINITY : kvt_sparse_weighted_kth(s->ls_v2, s->ls_w2, ly->ln, fk);
            int64_t rest = fk; // the pieces above tl, then those at tl in order while the floor is not reached
            for (int64_t i = 0; i < ly->ln; i++) rest -= v[i] > tl ? w[i] : 0;
            for (int64_t i = 0; i < ly->ln; i++) {
                if (v[i] > tl || (v[i] == tl && rest > 0)) rest -= v[i] == tl ? w[i] : 0, v[i] = INFINITY;
            }
        }
        ly->lalloc = 0; // in the pool
        ns += ly->ln, kk += ly->lkk, total += lt;
    }
    if (ns == 0) return;
    memcpy(s->ls_v2, s->ls_v, (size_t)ns * 4);
    memcpy(s->ls_w2, s->ls_w, (size_t)ns * 4);
    const float thr = kk >= total ? -INFINITY : kvt_sparse_weighted_kth(s->ls_v2, s->ls_w2, ns, kk);
    int64_t ties = kk - taken_at(s->ls_v, s->ls_w, ns, thr, &(int64_t){0}); // what the pieces above thr leave
    int64_t at = 0;
    for (int32_t l = 0; l < s->d.n_layer; l++) {
        kvt_sparse_layer *ly = &q->lay[l];
        if (ly->lalloc < 0) continue;
        ly->lalloc = kk >= total ? ly->ln > 0 ? INT64_MAX / 4 : 0 : taken_at(s->ls_v + at, s->ls_w + at, ly->ln, thr, &ties);
        at += ly->ln;
    }
}

static void rr_pass(kvt_threadpool *pool, kvt_task_fn fn, rerank_job *J, int64_t n_tasks) {
    if (pool) {
        kvt_threadpool_run(pool, fn, J, n_tasks);
    } else {
        for (int64_t t = 0; t < n_tasks; t++) fn(J, t, 0);
    }
}

void kvt_sparse_rerank(kvt_sparse *s, kvt_sparse_layer *ly, int64_t P, const float *q, float scale, kvt_threadpool *pool,
                       bool predicted) {
    // hysteresis: the pages the previous decode step kept (that step only: none after a rewind or a prompt)
    if (!(pool && s->rr_ss && kvt_threadpool_n_threads(pool) <= s->d.n_threads)) pool = NULL; // else all on the caller
    rerank_job J = {s, ly, P, kvt_sparse_budget_of(s, P + 1), scale, ly->kept != NULL && ly->kept_pos == P - 1,
                    pool ? kvt_threadpool_n_threads(pool) : 1};
    const int32_t H = s->d.n_head_kv;
    rr_begin(s); // the worker sleeps at its next check until rr_end
    for (int32_t kh = 0; kh < H; kh++) {
        if (rr_active(&J, kh)) {
            kvt_sparse_quant_query_bits(q + (int64_t)kh * s->gd, s->qpg, s->d.head_dim, s->p.rerank_qbits,
                                        s->rr_q16 + (int64_t)kh * s->gd, s->rr_qs + (int64_t)kh * s->qpg);
            if (s->rs_nr) { // --sparse-rerank-resid: the rows of the residual, or 0 (the exact pass)
                s->rs_nr[kh] = 0;
                if (predicted && ly->shat && ly->sel_pos == P) kvt_sparse_resid_plan(s, ly, kh, q + (int64_t)kh * s->gd, scale);
            }
        }
    }
    rr_pass(pool, rr_score_task, &J, (int64_t)H * J.chunks);
    rr_pass(pool, rr_softmax_task, &J, (int64_t)H * s->qpg);
    rr_pass(pool, rr_choose_task, &J, H);
    if (s->sh_vals) share_choose(&J);
    rr_end(s);
    ly->kept_pos = P;
    kvt_sparse_kept_log(s, ly);
}

void kvt_sparse_select_real(kvt_sparse *s, kvt_sparse_layer *ly, int32_t kh, int64_t P, const float *qg, float scale) {
    kvt_sparse_scratch *ss = &s->main_ss;
    const int64_t n = P + 1;
    score_keys(s, ly, kh, s->p.rerank_bits, qg, n, P, scale, ss->raw, false);
    kvt_sparse_aggregate(ss->raw, s->qpg, n, ss->agg);
    choose_head(s, ly, ss, kh, n, candidates_of(s, kvt_sparse_budget_of(s, n)));
}

// asyncspade, on the caller once the real query q is here: the cosine of each KV head's predicted query with
// the real one (stats), and with --sparse-fallback the heads below it selected again with the real query on
// the int8 keys (on the critical path: counted as stall by the caller).
void kvt_sparse_check_predicted(kvt_sparse *s, kvt_sparse_layer *ly, int32_t layer, int64_t P, const float *q, float scale) {
    if (!s->p.stats && s->p.fallback <= 0.0) return;
    for (int32_t kh = 0; kh < s->d.n_head_kv; kh++) {
        const int64_t pr = (int64_t)layer * s->d.n_head_kv + kh;
        const float *a = ly->pred_q + (int64_t)kh * s->gd, *b = q + (int64_t)kh * s->gd;
        const double ab = dot_d(a, b, s->gd), aa = dot_d(a, a, s->gd), bb = dot_d(b, b, s->gd);
        const double cs = aa > 0.0 && bb > 0.0 ? ab / sqrt(aa * bb) : 0.0;
        if (s->p.stats) s->ps_cos[pr] += cs, s->ps_ncos[pr]++;
        s->n_pred_sel++;
        s->tot.predicted++;
        if (s->p.fallback <= 0.0 || cs >= s->p.fallback) continue;
        s->n_fallback++;
        s->tot.fallbacks++;
        if (s->p.stats) s->ps_fb[pr]++;
        kvt_sparse_select_real(s, ly, kh, P, b, scale);
    }
}

// quest: each position scored by its page's bound (max over the group's heads), token-level top-k of those
// (whole pages, the last one cut at the budget).
void kvt_sparse_select_quest(kvt_sparse *s, kvt_sparse_layer *ly, int64_t P, const float *q, float scale) {
    kvt_sparse_scratch *ss = &s->main_ss;
    const int64_t n = P + 1, K = kvt_sparse_budget_of(s, n), hd = s->d.head_dim;
    const int64_t off = kvt_sparse_off(ly), P0 = off / s->p.page, np = (ly->cap - off + s->p.page - 1) / s->p.page; // (off: whole pages)
    const int64_t bp = ly->kb ? ly->kb->stride : 0; // the shared base's pages [0, P0) per KV head
    for (int32_t kh = 0; kh < s->d.n_head_kv; kh++) {
        for (int64_t pg = 0; pg * s->p.page < P; pg++) {
            const bool in_base = pg < P0;
            const int64_t at = (in_base ? kh * bp + pg : kh * np + pg - P0) * hd;
            const float *lo = (in_base ? (const float *)ly->kb->buf[0] : ly->lo) + at;
            const float *hi = (in_base ? (const float *)ly->kb->buf[1] : ly->hi) + at;
            float best = -INFINITY;
            for (int32_t i = 0; i < s->qpg; i++) {
                const float b = kvt_sparse_quest_bound(q + ((int64_t)kh * s->qpg + i) * hd, lo, hi, (int32_t)hd) * scale;
                best = b > best ? b : best;
            }
            for (int64_t t = pg * s->p.page; t < (pg + 1) * s->p.page && t < P; t++) ss->agg[t] = best;
        }
        ss->agg[P] = INFINITY; // always kept (recent): the middle positions hold their page's bound, top-k over the pages
        ly->nsel[kh] = kvt_sparse_topk_pages(ss->agg, n, K, s->p.sink, s->p.recent, (int32_t)s->p.page, NULL, sel_of(ly, kh), ss->vals, ss->wts);
    }
    ly->sel_pos = P;
}

void kvt_sparse_select_oracle(kvt_sparse *s, kvt_sparse_layer *ly, int64_t P) {
    kvt_sparse_scratch *ss = &s->main_ss;
    const int64_t n = P + 1, K = kvt_sparse_budget_of(s, n);
    for (int32_t kh = 0; kh < s->d.n_head_kv; kh++) {
        ly->nsel[kh] = kvt_sparse_topk(s->exact + kh * s->d.n_ctx, n, K, s->p.sink, s->p.recent, sel_of(ly, kh), ss->mark,
                                       ss->vals);
    }
    ly->sel_pos = P;
}

// --- the worker -----------------------------------------------------------------------------------------

void kvt_sparse_prefetch_selection(kvt_sparse *s, kvt_sparse_scratch *ss, const kvt_sparse_layer *ly, int32_t seq,
                                   int32_t layer, bool final) {
    const int64_t n = ly->sel_pos + 1, K = final || !ly->sel_score ? 0 : kvt_sparse_budget_of(s, n);
    for (int32_t kh = 0; kh < s->d.n_head_kv; kh++) {
        const float *sc = K > 0 ? ly->sel_score + (int64_t)kh * ly->cap : NULL;
        prefetch_head(s, ss, sel_of(ly, kh), sc, ly->nsel[kh], n, K, seq, layer, kh, final);
    }
}

void *kvt_sparse_worker_main(void *arg) {
    kvt_sparse *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && s->q_count == 0) pthread_cond_wait(&s->cv, &s->mu);
        if (s->stop) break;
        const kvt_sparse_job j = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->cap_queue;
        s->q_count--;
        kvt_sparse_layer *ly = &s->seqs[j.seq]->lay[j.layer]; // the sequence lives while its job does
        pthread_mutex_unlock(&s->mu);
        const int64_t t0 = kvt_time_ns(), c0 = kvt_thread_cpu_ns();
        // each KV head's blocks go to the copy engine as soon as it is selected (unless a later layer hands them)
        kvt_sparse_select_predicted(s, ly, &s->work_ss, j.pos, s->scale, j.seq, s->p.prefetch_layers == 0 ? j.layer : -1);
        const double ms = (double)(kvt_time_ns() - t0) / 1e6, cpu_ms = (double)(kvt_thread_cpu_ns() - c0) / 1e6;
        pthread_mutex_lock(&s->mu);
        s->agg_worker_ms += ms;
        s->agg_worker_cpu_ms += cpu_ms;
        s->tot.worker_ms += ms;
        s->tot.worker_cpu_ms += cpu_ms;
        ly->busy = 0;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

double kvt_sparse_wait_layer(kvt_sparse *s, kvt_sparse_seq *q, int32_t layer) {
    if (!s->has_worker) return 0.0;
    kvt_sparse_layer *ly = &q->lay[layer];
    pthread_mutex_lock(&s->mu);
    double ms = 0.0;
    if (ly->busy) {
        const double t0 = kvt_time_ms();
        while (ly->busy) pthread_cond_wait(&s->cv, &s->mu);
        ms = kvt_time_ms() - t0;
    }
    pthread_mutex_unlock(&s->mu);
    return ms;
}

void kvt_sparse_wait_seq(kvt_sparse *s, kvt_sparse_seq *q) {
    for (int32_t l = 0; l < s->d.n_layer; l++) kvt_sparse_wait_layer(s, q, l);
}

void kvt_sparse_prefetch_ahead(kvt_sparse *s, kvt_sparse_seq *q, int32_t seq, int32_t layer, int64_t P) {
    int32_t l2 = layer + s->p.prefetch_layers;
    int64_t P2 = P;
    while (l2 >= s->d.n_layer) l2 -= s->d.n_layer, P2++;
    const kvt_sparse_layer *ly = &q->lay[l2];
    pthread_mutex_lock(&s->mu);
    const bool ready = !ly->busy && ly->sel_pos == P2;
    pthread_mutex_unlock(&s->mu);
    if (ready) kvt_sparse_prefetch_selection(s, &s->main_ss, ly, seq, l2, false);
}

void kvt_sparse_post(kvt_sparse *s, kvt_sparse_seq *q, int32_t seq, int32_t layer, int64_t P) {
    pthread_mutex_lock(&s->mu);
    if (s->q_count == s->cap_queue) { // grow the ring (the worker copies a job out before it unlocks)
        const int64_t cap = s->cap_queue ? 2 * s->cap_queue : 2 * (int64_t)s->d.n_layer;
        kvt_sparse_job *nq = malloc((size_t)cap * sizeof *nq);
        if (!nq) { // no job: the step selects inline (sel_pos != P), the same bits
            pthread_mutex_unlock(&s->mu);
            return;
        }
        for (int64_t i = 0; i < s->q_count; i++) nq[i] = s->queue[(s->q_head + i) % s->cap_queue];
        free(s->queue);
        s->queue = nq;
        s->cap_queue = cap;
        s->q_head = 0;
    }
    s->queue[(s->q_head + s->q_count) % s->cap_queue] = (kvt_sparse_job){seq, layer, P};
    s->q_count++;
    q->lay[layer].busy = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}
