// beam.c - step-wise beam search driver (beam.h) over the paged KV store.
#include "beam.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../base/grow.h"
#include "../base/timer.h"
#include "../exec/numerics.h"
#include "../kernels/vec.h"

kvt_beam_params kvt_beam_params_default(void) {
    kvt_beam_params p;
    memset(&p, 0, sizeof p);
    p.n_beams = 4;
    p.width = 2;
    p.step = 16;
    p.n_tokens = 64;
    p.temp = 0.0f;
    p.seed = 1;
    p.schedule = KVT_BEAM_SCHED_LAYERWISE;
    p.batched = true;
    p.stop_at_eog = true;
    return p;
}

kvt_status kvt_beam_score_mean_logprob(void *user, const kvt_beam_cand *c, double *score, kvt_err *err) {
    (void)user;
    (void)err;
    double s = 0;
    for (int64_t i = 0; i < c->n; i++) s += c->logprobs[i];
    *score = c->n > 0 ? s / (double)c->n : 0.0;
    return KVT_OK;
}

// --- candidates -------------------------------------------------------------------

typedef enum { C_PENDING, C_PENDING_LAST, C_DONE, C_FINISHED } cstate;

typedef struct {
    int32_t seq;          // context sequence, -1 when released
    int32_t *ids;         // [n] generated ids
    float *lp;            // [n] their log-probabilities
    size_t n, cap, cap_lp;
    int32_t *blk;         // [n_blk] logical ids of the blocks of positions [b*bt, (b+1)*bt), all layers
    size_t n_blk, cap_blk;
    bool own_last;        // the partly filled last block was written since the fork (no longer shared)
    int64_t len;          // positions held by seq (prompt + decoded ids)
    float *next;          // [n_vocab] logits after the last decoded id (live candidates)
    double score;
    int64_t order;        // creation order (ties in selection)
    cstate state;
    int64_t step_start;   // ids[step_start ..) belong to the current step
    char *text;           // this step's text (delimiter check)
    size_t n_text, cap_text;
    uint64_t rng;
} bcand;

typedef struct {
    kvt_context *ctx;
    const kvt_beam_params *p;
    int32_t n_vocab;
    int64_t bt;           // positions per block
    int64_t lblock_bytes; // bytes of one logical block (every layer and group)
    int32_t next_lid;     // next logical block id
    bool gpu_forks;       // device layers hold KV: a fork shares the parent's full blocks and copies its partly
                          // filled last block at once (gpu_kv.h; the store copies it at the first write: the same
                          // logical blocks), counted in res->fork_blocks
    int64_t order;
    kvt_beam_result *res;
} beam_run;

static void cand_free(beam_run *r, bcand *c) {
    if (!c) return;
    if (c->seq > 0) kvt_context_seq_free(r->ctx, c->seq);
    else if (c->seq == 0) kvt_context_seq_truncate(r->ctx, 0, 0);
    free(c->ids);
    free(c->lp);
    free(c->blk);
    free(c->next);
    free(c->text);
    free(c);
}

static void cand_release_seq(beam_run *r, bcand *c) {
    if (c->seq > 0) kvt_context_seq_free(r->ctx, c->seq);
    else if (c->seq == 0) kvt_context_seq_truncate(r->ctx, 0, 0);
    c->seq = -1;
    free(c->next);
    c->next = NULL;
}

static bool blk_push(bcand *c, int32_t id) {
    if (!kvt_grow((void **)&c->blk, &c->cap_blk, c->n_blk + 1, sizeof *c->blk)) return false;
    c->blk[c->n_blk++] = id;
    return true;
}

// Logical block bookkeeping of one position appended at c->len (mirrors the store: a new block per
// block_tokens positions; the first write into a shared partly filled block makes a private copy).
static bool cand_note_append(beam_run *r, bcand *c) {
    int64_t b = c->len / r->bt;
    bool ok = true;
    if (b == (int64_t)c->n_blk) ok = blk_push(c, r->next_lid++);
    else if (!c->own_last) c->blk[b] = r->next_lid++;
    c->own_last = true;
    c->len++;
    return ok;
}

// --- token choice ------------------------------------------------------------------

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// log(sum(exp(row))) over n entries: the largest entry m, then expf(row[i] - m) (libm's bits whatever the ISA:
// kvt_vec_expf_sub's SIMD form) summed in double, entry i into accumulator i % 4, the four added in a fixed order.
// The same bits on every machine and thread; a vocabulary of 128K entries in ~0.1 ms (exp in double: ~1.5 ms).
static double log_sum_exp(const float *row, int32_t n) {
    float mx = row[0];
    for (int32_t i = 1; i < n; i++) mx = row[i] > mx ? row[i] : mx;
    enum { CHUNK = 2048 }; // a multiple of 4: accumulator i % 4 across chunks
    float e[CHUNK];
    double s[4] = {0, 0, 0, 0};
    for (int32_t i0 = 0; i0 < n; i0 += CHUNK) {
        const int32_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        kvt_vec_expf_sub(row + i0, mx, e, m);
        int32_t k = 0;
        for (; k + 4 <= m; k += 4) {
            s[0] += e[k], s[1] += e[k + 1], s[2] += e[k + 2], s[3] += e[k + 3];
        }
        for (; k < m; k++) s[k % 4] += e[k];
    }
    return mx + log((s[0] + s[1]) + (s[2] + s[3]));
}

// Log-probability of id in a row of logits, rounded to float: the built-in score and the process reward
// model both sum these (so one model scoring its own beams gives the built-in score bit for bit).
static float token_logprob(const float *row, int32_t n, int32_t id) {
    return (float)((double)row[id] - log_sum_exp(row, n));
}

// The k largest entries of row into top[0..k) (descending; ties to the lowest id), k <= n.
static void top_k(const float *row, int32_t n, int32_t k, int32_t *top) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m == k && row[i] <= row[top[k - 1]]) continue;
        int32_t j = m < k ? m++ : k - 1;
        while (j > 0 && row[top[j - 1]] < row[i]) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = i;
    }
}

// The weights of entries [0, m) of a row in a draw at temperature temp: e[k] = expf(row[k] / temp - ms), ms the row's
// largest entry / temp (libm's expf bits whatever the ISA: kvt_vec_expf_sub).
static void draw_weights(const float *row, int32_t m, float temp, float ms, float *e) {
    for (int32_t k = 0; k < m; k++) e[k] = row[k] / temp;
    kvt_vec_expf_sub(e, ms, e, m);
}

// Draw from softmax(row / temp) with the candidate's own stream: the weights summed in double in index order, then
// the same weights again in the same order until the running sum passes the drawn point.
static int32_t sample(bcand *c, const float *row, int32_t n, float temp) {
    float mx = row[0];
    for (int32_t i = 1; i < n; i++) mx = row[i] > mx ? row[i] : mx;
    const float ms = mx / temp;
    enum { CHUNK = 2048 };
    float e[CHUNK];
    double tot = 0;
    for (int32_t i0 = 0; i0 < n; i0 += CHUNK) {
        const int32_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        draw_weights(row + i0, m, temp, ms, e);
        for (int32_t k = 0; k < m; k++) tot += e[k];
    }
    const double u = (double)(splitmix(&c->rng) >> 11) * (1.0 / 9007199254740992.0) * tot;
    double acc = 0;
    for (int32_t i0 = 0; i0 < n; i0 += CHUNK) {
        const int32_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        draw_weights(row + i0, m, temp, ms, e);
        for (int32_t k = 0; k < m; k++) {
            acc += e[k];
            if (u < acc) return i0 + k;
        }
    }
    return n - 1;
}

static bool text_ends_with_delim(beam_run *r, bcand *c, int32_t id) {
    const char *d = r->p->step_delim;
    if (!d || !*d || !r->p->tok) return false;
    // the piece is written in place, whatever its length (a first call tells the length when it does not fit)
    int64_t np = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (!kvt_grow((void **)&c->text, &c->cap_text, c->n_text + (size_t)(np > 64 ? np : 64) + 1, 1)) return false;
        np = kvt_token_to_piece(r->p->tok, id, c->text + c->n_text, (int64_t)(c->cap_text - c->n_text - 1));
        if (np < 0) np = 0;
        if (np <= (int64_t)(c->cap_text - c->n_text - 1)) break;
    }
    c->n_text += (size_t)np;
    size_t nd = strlen(d);
    return c->n_text >= nd && memcmp(c->text + c->n_text - nd, d, nd) == 0;
}

// The pure part of a choice from logits row ([n_vocab]): the id (argmax, or a draw from c's own stream at temp > 0)
// and log(sum(exp(row))). It touches c->rng only, so the rows of a batch are drawn in
// parallel (draw_rows) with the bits of one at a time.
typedef struct {
    int32_t id;
    double lse;
} draw;
static draw draw_row(const beam_run *r, bcand *c, const float *row) {
    draw d;
    if (r->p->temp > 0) d.id = sample(c, row, r->n_vocab, r->p->temp);
    else top_k(row, r->n_vocab, 1, &d.id);
    d.lse = log_sum_exp(row, r->n_vocab);
    return d;
}

// Appends the drawn id to c with its log-probability (token_logprob's bits) and sets c->state.
static kvt_status choose(beam_run *r, bcand *c, const float *row, draw d, kvt_err *err) {
    const kvt_beam_params *p = r->p;
    const int32_t id = d.id;
    if (!kvt_grow((void **)&c->ids, &c->cap, c->n + 1, sizeof *c->ids) ||
        !kvt_grow((void **)&c->lp, &c->cap_lp, c->n + 1, sizeof *c->lp)) {
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for beam ids");
    }
    c->ids[c->n] = id;
    c->lp[c->n] = (float)((double)row[id] - d.lse); // token_logprob(row, n_vocab, id)
    c->n++;
    bool delim = text_ends_with_delim(r, c, id);
    if (p->stop_at_eog && p->tok && kvt_token_is_eog(p->tok, id)) c->state = C_FINISHED;
    else if ((int64_t)c->n >= p->n_tokens) c->state = C_FINISHED;
    else if ((int64_t)c->n - c->step_start >= p->step || delim) c->state = C_PENDING_LAST;
    else c->state = C_PENDING;
    return KVT_OK;
}

// After c's pending id was decoded with logits row: bookkeeping, then the next choice (d: its draw, made by
// draw_rows unless c ends its step) or the step end.
static kvt_status after_decode(beam_run *r, bcand *c, const float *row, draw d, kvt_err *err) {
    if (!cand_note_append(r, c)) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for block lists");
    if (c->state == C_PENDING_LAST) {
        if (!c->next && !(c->next = malloc((size_t)r->n_vocab * sizeof(float)))) {
            return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for beam logits");
        }
        memcpy(c->next, row, (size_t)r->n_vocab * sizeof(float));
        c->state = C_DONE;
        return KVT_OK;
    }
    return choose(r, c, row, d, err);
}

// The draws of the rows of one batched forward pass (logits [n, n_vocab]; who[i]: row i's continuation), on the
// context's thread pool: an argmax (or a draw) and a log-sum-exp over the vocabulary per row (128K entries: a few
// hundred microseconds) would otherwise run one row at a time between forward passes. Rows that end their step draw
// nothing.
typedef struct {
    const beam_run *r;
    bcand **who;
    const float *logits;
    draw *out;
    int64_t n, per_task;
} draw_job;
static void draw_task(void *arg, int64_t t, int thread) {
    (void)thread;
    const draw_job *j = arg;
    for (int64_t i = t * j->per_task; i < j->n && i < (t + 1) * j->per_task; i++) {
        if (j->who[i]->state == C_PENDING) j->out[i] = draw_row(j->r, j->who[i], j->logits + i * j->r->n_vocab);
    }
}
static void draw_rows(beam_run *r, bcand **who, const float *logits, int32_t n, draw *out) {
    kvt_threadpool *pool = kvt_context_pool(r->ctx);
    const int nt = pool ? kvt_threadpool_n_threads(pool) : 1;
    draw_job j = {r, who, logits, out, n, (n + nt - 1) / nt};
    if (pool && nt > 1 && n > 1) kvt_threadpool_run(pool, draw_task, &j, (n + j.per_task - 1) / j.per_task);
    else draw_task(&j, 0, 0); // per_task >= n here: one task of all rows
}

// --- running a group of continuations through the step ------------------------------

typedef struct {
    int32_t *seqs, *toks; // [n] batch
    bcand **who;          // [n]
    draw *draws;          // [n] the rows' draws (draw_rows)
} batch_buf;

// Advances every continuation of members[0..n) to the end of its step, one token per forward pass.
static kvt_status run_members(beam_run *r, bcand **members, int32_t n, batch_buf *bb, double *decode_ms, kvt_err *err) {
    for (;;) {
        int32_t nb = 0;
        for (int32_t i = 0; i < n; i++) {
            bcand *c = members[i];
            if (c->state != C_PENDING && c->state != C_PENDING_LAST) continue;
            bb->seqs[nb] = c->seq;
            bb->toks[nb] = c->ids[c->n - 1];
            bb->who[nb++] = c;
        }
        if (nb == 0) return KVT_OK;
        if (r->p->batched) {
            double t0 = kvt_time_ms();
            kvt_status st = kvt_decode_batch(r->ctx, bb->seqs, bb->toks, nb, err);
            *decode_ms += kvt_time_ms() - t0;
            if (st) return st;
            const float *logits = kvt_context_logits(r->ctx); // [nb, n_vocab]
            const double td = kvt_time_ms();
            draw_rows(r, bb->who, logits, nb, bb->draws);
            r->res->select_ms += kvt_time_ms() - td; // the choice is counted as selection
            for (int32_t i = 0; i < nb; i++) {
                if ((st = after_decode(r, bb->who[i], logits + (int64_t)i * r->n_vocab, bb->draws[i], err))) return st;
            }
            r->res->n_forward++;
        } else {
            for (int32_t i = 0; i < nb; i++) {
                double t0 = kvt_time_ms();
                kvt_status st = kvt_decode_seq(r->ctx, bb->seqs[i], &bb->toks[i], 1, false, err);
                *decode_ms += kvt_time_ms() - t0;
                if (st) return st;
                bcand *c = bb->who[i];
                const float *row = kvt_context_logits(r->ctx);
                const draw d = c->state == C_PENDING ? draw_row(r, c, row) : (draw){0, 0};
                if ((st = after_decode(r, c, row, d, err))) return st;
                r->res->n_forward++;
            }
        }
        r->res->n_decoded += nb;
    }
}

// --- balanced: prefetch of the next group's blocks by a helper thread ----------------

typedef struct {
    kvt_kv *kv;
    int64_t *q;          // [n][4] (seq, layer, group, block) to acquire and release, in decode order
    int64_t n;
    atomic_bool stop;
    int64_t done;
    double wait_ms;      // time spent inside acquire (counted by the store as stall)
    pthread_t tid;
    bool started;
} prefetcher;

static void *prefetch_main(void *arg) {
    prefetcher *pf = arg;
    for (int64_t i = 0; i < pf->n && !atomic_load(&pf->stop); i++) {
        const int64_t *e = pf->q + i * 4;
        kvt_kv_view v;
        kvt_err e2 = {0};
        double t0 = kvt_time_ms();
        kvt_status st = pf->kv->ops->acquire(pf->kv, (int32_t)e[0], (int32_t)e[1], (int32_t)e[2], e[3], &v, &e2);
        pf->wait_ms += kvt_time_ms() - t0;
        if (st) break; // a hint only: the group loads what is missing itself
        pf->kv->ops->release(pf->kv, (int32_t)e[0], (int32_t)e[1], (int32_t)e[2], e[3]);
        pf->done++;
    }
    return NULL;
}

// Queues the full blocks of group `next` that the group `cur` does not hold, layer by layer (the
// order the next group reads them), at most max_blocks store blocks, and starts the helper.
static kvt_status prefetch_start(beam_run *r, prefetcher *pf, bcand **cur, int32_t n_cur, bcand **next, int32_t n_next,
                                 int64_t max_blocks, kvt_err *err) {
    memset(pf, 0, sizeof *pf);
    atomic_init(&pf->stop, false);
    pf->kv = kvt_context_kv(r->ctx);
    if (max_blocks <= 0 || n_next == 0) return KVT_OK;
    uint8_t *seen = calloc((size_t)r->next_lid + 1, 1); // logical blocks already listed or held by cur
    if (!seen) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for prefetch lists");
    for (int32_t i = 0; i < n_cur; i++) {
        for (size_t b = 0; b < cur[i]->n_blk; b++) seen[cur[i]->blk[b]] = 1;
    }
    const kvt_kv *kv = pf->kv;
    size_t cap = 0;
    kvt_status st = KVT_OK;
    // a logical block is one id for every (layer, group): mark per layer pass with value layer+2
    for (int32_t L = 0; L < kv->n_layer && pf->n < max_blocks && !st; L++) {
        for (int32_t i = 0; i < n_next && pf->n < max_blocks && !st; i++) {
            bcand *c = next[i];
            int64_t full = c->len / r->bt; // only full blocks: the partial one may be copied on write
            for (int64_t b = 0; b < full && pf->n < max_blocks; b++) {
                uint8_t *s = &seen[c->blk[b]];
                if (*s == 1 || *s == (uint8_t)(2 + L % 200)) continue;
                *s = (uint8_t)(2 + L % 200);
                for (int32_t g = 0; g < kv->n_group && pf->n < max_blocks; g++) {
                    if (!kvt_grow((void **)&pf->q, &cap, (size_t)(pf->n + 1) * 4, sizeof *pf->q)) {
                        st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for prefetch lists");
                        break;
                    }
                    int64_t *e = pf->q + pf->n * 4;
                    e[0] = c->seq, e[1] = L, e[2] = g, e[3] = b;
                    pf->n++;
                }
            }
        }
    }
    free(seen);
    if (st || pf->n == 0) return st;
    if (pthread_create(&pf->tid, NULL, prefetch_main, pf) != 0) return KVT_OK; // no thread: no prefetch
    pf->started = true;
    return st;
}

static void prefetch_join(beam_run *r, prefetcher *pf) {
    if (pf->started) {
        atomic_store(&pf->stop, true);
        pthread_join(pf->tid, NULL);
        r->res->prefetched_blocks += pf->done;
        r->res->prefetch_ms += pf->wait_ms;
    }
    free(pf->q);
    memset(pf, 0, sizeof *pf);
}

// --- one step ------------------------------------------------------------------------

typedef struct {
    bcand **act;            // [n_act] continuations that decode in this step, canonical order
    int32_t n_act;
    kvt_beam_blocks *bl;    // [n_act] their logical blocks, dense ids
    int32_t *ids_buf;       // dense ids
    int32_t n_ids;
    int64_t *block_bytes;   // [n_ids]
} step_view;

static void step_view_free(step_view *v) {
    free(v->act);
    free(v->bl);
    free(v->ids_buf);
    free(v->block_bytes);
}

static kvt_status step_view_build(beam_run *r, bcand **conts, int32_t n, step_view *v, kvt_err *err) {
    memset(v, 0, sizeof *v);
    int32_t *map = malloc(((size_t)r->next_lid + 1) * sizeof *map);
    v->act = malloc(((size_t)n + 1) * sizeof *v->act);
    v->bl = malloc(((size_t)n + 1) * sizeof *v->bl);
    size_t tot = 0;
    for (int32_t i = 0; i < n; i++) tot += conts[i]->n_blk;
    v->ids_buf = malloc((tot + 1) * sizeof *v->ids_buf);
    v->block_bytes = malloc((tot + 1) * sizeof *v->block_bytes);
    if (!map || !v->act || !v->bl || !v->ids_buf || !v->block_bytes) {
        free(map);
        step_view_free(v);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the step's block lists");
    }
    for (int32_t i = 0; i <= r->next_lid; i++) map[i] = -1;
    size_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        bcand *c = conts[i];
        if (c->state != C_PENDING && c->state != C_PENDING_LAST) continue;
        v->bl[v->n_act].ids = v->ids_buf + k;
        v->bl[v->n_act].n = (int32_t)c->n_blk;
        for (size_t b = 0; b < c->n_blk; b++) {
            int32_t *m = &map[c->blk[b]];
            if (*m < 0) {
                *m = v->n_ids;
                v->block_bytes[v->n_ids++] = r->lblock_bytes;
            }
            v->ids_buf[k++] = *m;
        }
        v->act[v->n_act++] = c;
    }
    free(map);
    return KVT_OK;
}

// Sums the predicted bytes of this step for every schedule into the result.
static void step_predict(beam_run *r, const step_view *v, int64_t budget) {
    kvt_beam_step_in in = {v->bl, v->n_act, v->n_ids, v->block_bytes, kvt_context_kv(r->ctx)->n_layer,
                           r->lblock_bytes / r->bt, r->p->step, budget, true};
    for (int s = 0; s < KVT_BEAM_SCHED_COUNT; s++) {
        kvt_beam_step_bytes out;
        kvt_err e = {0};
        if (kvt_beam_step_predict((kvt_beam_sched)s, &in, &out, &e)) continue; // one beam over budget: no figure
        r->res->pred_load[s] += out.load_bytes;
        r->res->pred_store[s] += out.store_bytes;
    }
}

// Bytes beam i of the step view writes during the step: the blocks from its partly filled last
// one (copied on write when shared) to the one holding position len + step - 1.
static int64_t step_grow(const beam_run *r, const bcand *c) {
    const int64_t first = c->len / r->bt, last = (c->len + r->p->step + r->bt - 1) / r->bt;
    return (last - first) * r->lblock_bytes;
}

// Groups of the step (order/start into g) for the schedule (kvt_beam_plan_groups).
// grow[i]: step_grow of view beam i.
static kvt_status step_groups(beam_run *r, const step_view *v, const int64_t *grow, int64_t budget, kvt_beam_groups *g,
                              kvt_err *err) {
    const int32_t n = v->n_act;
    kvt_beam_sched s = r->p->schedule;
    if (budget <= 0) s = KVT_BEAM_SCHED_LAYERWISE; // no fast budget: one group
    kvt_err e = {0};
    kvt_status st = kvt_beam_plan_groups(s, v->bl, n, v->n_ids, v->block_bytes, grow, budget, g, &e);
    if (st == KVT_ERR_BUDGET) { // one beam's KV exceeds the budget: one beam at a time
        int32_t *sizes = malloc((size_t)n * sizeof *sizes);
        if (!sizes) st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for groups");
        else {
            for (int32_t i = 0; i < n; i++) sizes[i] = 1;
            st = kvt_beam_group_in_order(n, sizes, n, g, err);
        }
        free(sizes);
    } else if (st) {
        *err = e;
    }
    return st;
}

static kvt_status run_step(beam_run *r, bcand **conts, int32_t n_conts, int64_t budget, batch_buf *bb, int32_t *n_groups,
                           double *decode_ms, kvt_err *err) {
    step_view v;
    kvt_status st = step_view_build(r, conts, n_conts, &v, err);
    if (st) return st;
    *n_groups = 0;
    if (v.n_act == 0) {
        step_view_free(&v);
        return KVT_OK;
    }
    step_predict(r, &v, budget > 0 ? budget : INT64_MAX / 4);
    const int32_t n = v.n_act;
    int32_t *order = malloc((size_t)n * sizeof *order), *start = malloc(((size_t)n + 1) * sizeof *start);
    int64_t *grow = malloc(((size_t)n + 1) * sizeof *grow); // [n] bytes each view beam writes this step
    bcand **mem = malloc((size_t)n * sizeof *mem);
    kvt_beam_groups g = {0, order, start};
    if (!order || !start || !mem || !grow) st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for groups");
    for (int32_t i = 0; !st && i < n; i++) grow[i] = step_grow(r, v.act[i]);
    if (!st) st = step_groups(r, &v, grow, budget, &g, err);
    for (int32_t i = 0; !st && i < n; i++) mem[i] = v.act[order[i]];
    for (int32_t gi = 0; !st && gi < g.n_groups; gi++) {
        bcand **cur = mem + start[gi];
        const int32_t n_cur = start[gi + 1] - start[gi];
        prefetcher pf;
        memset(&pf, 0, sizeof pf);
        if (r->p->schedule == KVT_BEAM_SCHED_BALANCED && gi + 1 < g.n_groups && budget > 0) {
            // headroom: what the current group leaves of the budget at the end of the step
            // (shared blocks once; order[] indexes the view, as bl[] and grow[] do)
            int64_t used = kvt_beam_group_bytes(v.bl, v.n_ids, order + start[gi], n_cur, v.block_bytes, grow);
            if (used < 0) used = budget;
            kvt_kv_stats ks;
            kvt_context_kv_stats(r->ctx, &ks);
            int64_t room = (budget - used) / (ks.block_bytes > 0 ? ks.block_bytes : 1);
            st = prefetch_start(r, &pf, cur, n_cur, mem + start[gi + 1], start[gi + 2] - start[gi + 1], room, err);
        }
        if (!st) st = run_members(r, cur, n_cur, bb, decode_ms, err);
        prefetch_join(r, &pf);
    }
    *n_groups = g.n_groups;
    free(order);
    free(start);
    free(grow);
    free(mem);
    step_view_free(&v);
    return st;
}

// --- the search ---------------------------------------------------------------------

static int cmp_cand(const void *a, const void *b) {
    const bcand *x = *(bcand *const *)a, *y = *(bcand *const *)b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return x->order < y->order ? -1 : x->order > y->order;
}

typedef struct {
    uint64_t hash; // of the candidate's ids
    int32_t rank;  // its index in the ranked list
} id_key;

static int cmp_key(const void *a, const void *b) {
    const id_key *x = a, *y = b;
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

// Marks dup[i] for every candidate of the ranked list all[0..n) whose ids equal those of a better ranked one
// (sampled continuations can coincide: they are one beam, kept once). keys: [n] scratch.
static void mark_duplicates(bcand *const *all, int32_t n, id_key *keys, bool *dup) {
    for (int32_t i = 0; i < n; i++) {
        uint64_t h = 1469598103934665603ull; // FNV-1a over the ids
        for (size_t k = 0; k < all[i]->n; k++) h = (h ^ (uint32_t)all[i]->ids[k]) * 1099511628211ull;
        keys[i] = (id_key){h ^ all[i]->n, i};
        dup[i] = false;
    }
    qsort(keys, (size_t)n, sizeof *keys, cmp_key);
    for (int32_t a = 0; a < n;) {
        int32_t b = a + 1;
        while (b < n && keys[b].hash == keys[a].hash) b++;
        for (int32_t x = a + 1; x < b; x++) { // equal hashes: compare the ids with each better ranked one
            const bcand *cx = all[keys[x].rank];
            for (int32_t y = a; y < x && !dup[keys[x].rank]; y++) {
                const bcand *cy = all[keys[y].rank];
                dup[keys[x].rank] = !dup[keys[y].rank] && cx->n == cy->n && !memcmp(cx->ids, cy->ids, cx->n * sizeof *cx->ids);
            }
        }
        a = b;
    }
}

// A continuation of parent: a fork of its sequence with its ids and block list.
static kvt_status fork_cand(beam_run *r, const bcand *parent, uint64_t stream, bcand **out, kvt_err *err) {
    bcand *c = calloc(1, sizeof *c);
    if (!c) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a beam");
    c->seq = -1;
    bool ok = kvt_grow((void **)&c->ids, &c->cap, parent->n + 1, sizeof *c->ids);
    ok = ok && kvt_grow((void **)&c->lp, &c->cap_lp, parent->n + 1, sizeof *c->lp);
    ok = ok && kvt_grow((void **)&c->blk, &c->cap_blk, parent->n_blk + 1, sizeof *c->blk);
    if (!ok) {
        cand_free(r, c);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a beam");
    }
    if (parent->n) { // the root has no ids yet (NULL arrays)
        memcpy(c->ids, parent->ids, parent->n * sizeof *c->ids);
        memcpy(c->lp, parent->lp, parent->n * sizeof *c->lp);
    }
    memcpy(c->blk, parent->blk, parent->n_blk * sizeof *c->blk);
    c->n = parent->n;
    c->n_blk = parent->n_blk;
    c->own_last = false;
    if (r->gpu_forks && parent->len % r->bt) r->res->fork_blocks++; // the device's copy of the partly filled last block
    c->len = parent->len;
    c->order = r->order++;
    c->step_start = (int64_t)c->n;
    c->rng = r->p->seed ^ (stream * 0xD1B54A32D192ED03ull);
    splitmix(&c->rng);
    kvt_status st = kvt_context_seq_fork(r->ctx, parent->seq, &c->seq, err);
    if (st) {
        c->seq = -1;
        cand_free(r, c);
        return st;
    }
    *out = c;
    return KVT_OK;
}

static kvt_status check_params(kvt_context *ctx, const kvt_beam_params *p, int64_t n_prompt, kvt_err *err) {
    const char *what = NULL;
    if (p->n_beams < 1 || p->n_beams > 65536) what = "--beams must be in 1..65536";
    else if (p->width < 1 || p->width > 1024) what = "--width must be in 1..1024";
    else if (p->step < 1) what = "--step must be at least 1";
    else if (p->n_tokens < 1) what = "-n must be at least 1";
    else if (p->temp < 0 || !(p->temp == p->temp)) what = "--temp must be >= 0";
    else if ((int)p->schedule < 0 || p->schedule >= KVT_BEAM_SCHED_COUNT) what = "unknown schedule";
    else if (n_prompt < 1) what = "the prompt has no tokens";
    else if (p->step_delim && *p->step_delim && !p->tok) what = "--step-delim needs the tokenizer";
    if (what) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam search: %s", what);
    if (p->temp == 0 && (int64_t)p->width * p->n_beams > kvt_context_model(ctx)->hp.n_vocab) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG,
                          "beam search: --beams x --width (%d x %d) exceeds the vocabulary (%d): the first step takes "
                          "the top beams x width tokens", p->n_beams, p->width, kvt_context_model(ctx)->hp.n_vocab);
    }
    if (!kvt_context_kv(ctx)->ops->seq_fork) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED,
                          "beam search needs the paged KV store (forks share blocks); the %s cache holds one sequence: "
                          "set a KV tier or kv_paged", kvt_context_kv(ctx)->ops->name);
    }
    if (kvt_context_seq_n_past(ctx, 0) != 0) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam search: sequence 0 must be empty (it holds %lld positions)",
                          (long long)kvt_context_seq_n_past(ctx, 0));
    }
    if (n_prompt + p->n_tokens > kvt_context_n_ctx(ctx)) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "beam search: prompt %lld + %lld tokens exceed the context size %lld",
                          (long long)n_prompt, (long long)p->n_tokens, (long long)kvt_context_n_ctx(ctx));
    }
    return KVT_OK;
}

static void free_all(beam_run *r, bcand **v, int32_t n) {
    for (int32_t i = 0; i < n; i++) cand_free(r, v[i]);
}

kvt_status kvt_beam_run(kvt_context *ctx, const kvt_beam_params *p, const int32_t *prompt, int64_t n_prompt,
                        kvt_beam_result *res, kvt_err *err) {
    memset(res, 0, sizeof *res);
    kvt_status st = check_params(ctx, p, n_prompt, err);
    if (st) return st;
    const double t_start = kvt_time_ms();
    kvt_kv *kv = kvt_context_kv(ctx);
    kvt_kv_stats ks0;
    kvt_context_kv_stats(ctx, &ks0);
    beam_run r = {ctx, p, kvt_context_model(ctx)->hp.n_vocab, kv->block_tokens,
                  ks0.block_bytes * kv->n_layer * kv->n_group, 0, false, 0, res};
    int64_t budget = p->fast_budget != 0 ? p->fast_budget : ks0.budget_bytes[KVT_TIER_FAST];
    kvt_gpu_layers_stats gs;
    const bool gpu = kvt_context_gpu_stats(ctx, &gs) && gs.layers > 0;
    const int64_t fork_bytes0 = gpu ? gs.kv.fork_bytes : 0;
    r.gpu_forks = gpu;
    if (p->fast_budget == 0 && budget < 0 && gpu && gs.kv.vram_cap_bytes >= 0) {
        // device layers with a VRAM budget for their KV (--kv-vram) and no fast tier of the CPU store: the groups are
        // sized by VRAM (LBS on a GPU). The store's block bytes count every layer, the VRAM budget the device layers'
        // only (blocks of the same f16 rows): scaled by n_layer / device layers.
        const int64_t n_layer = kvt_context_model(ctx)->hp.n_layer;
        budget = gs.kv.vram_cap_bytes * n_layer / gs.layers;
    }
    const kvt_beam_scorer scorer = p->scorer ? p->scorer : kvt_beam_score_mean_logprob;
    const int32_t N = p->n_beams, W = p->width;
    size_t cap_steps = 0;
    // live: beams to expand (rank order); pool: the kept candidates after selection; conts: this step's
    bcand **live = calloc((size_t)N, sizeof *live), **pool = calloc((size_t)N, sizeof *pool);
    bcand **conts = calloc(2 * (size_t)N * W + (size_t)N, sizeof *conts); // [N*W] this step, then [N + N*W] to rank
    int32_t n_live = 0, n_pool = 0, n_conts = 0;
    id_key *keys = malloc(((size_t)N * W + (size_t)N) * sizeof *keys); // [N + N*W] duplicate search (temp > 0)
    bool *dup = malloc((size_t)N * W + (size_t)N);
    batch_buf bb = {malloc((size_t)N * W * sizeof(int32_t)), malloc((size_t)N * W * sizeof(int32_t)),
                    malloc((size_t)N * W * sizeof(bcand *)), malloc((size_t)N * W * sizeof(draw))};
    double decode_ms = 0;
    if (!live || !pool || !conts || !keys || !dup || !bb.seqs || !bb.toks || !bb.who || !bb.draws) {
        st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for %d beams x %d continuations", N, W);
        goto done;
    }
    // prefill: the root beam is sequence 0
    bcand *root = calloc(1, sizeof *root);
    if (!root) {
        st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a beam");
        goto done;
    }
    root->seq = 0;
    pool[n_pool++] = root; // owned by the pool until it is expanded
    double t0 = kvt_time_ms();
    if ((st = kvt_decode_seq(ctx, 0, prompt, n_prompt, false, err))) goto done;
    res->prefill_ms = kvt_time_ms() - t0;
    root->next = malloc((size_t)r.n_vocab * sizeof(float));
    if (!root->next) {
        st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for beam logits");
        goto done;
    }
    memcpy(root->next, kvt_context_logits(ctx), (size_t)r.n_vocab * sizeof(float));
    if ((st = kvt_check_logits(kvt_context_model(ctx), root->next, r.n_vocab, "the prompt's last token", err))) goto done;
    for (int64_t i = 0; i < n_prompt; i++) {
        if (!cand_note_append(&r, root)) {
            st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for block lists");
            goto done;
        }
    }
    root->order = r.order++;
    root->state = C_DONE;
    kvt_kv_stats ks1;
    kvt_context_kv_stats(ctx, &ks1);
    for (int32_t step = 0;; step++) {
        // live beams: the pool's unfinished candidates, in rank order
        n_live = 0;
        for (int32_t i = 0; i < n_pool; i++) {
            if (pool[i]->state == C_DONE) live[n_live++] = pool[i];
        }
        if (n_live == 0) break; // every step adds a token to each live beam: at most n_tokens steps
        if (!kvt_grow((void **)&res->groups_per_step, &cap_steps, (size_t)step + 1, sizeof *res->groups_per_step)) {
            st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
            goto done;
        }
        double ts = kvt_time_ms();
        // expansion: W forks of each live beam (N * W of the root, so that every step runs N * W
        // continuations), whose sequence is then released (the forks hold its blocks)
        const int32_t w = n_live == 1 && step == 0 ? N * W : W;
        if (p->temp == 0 && w > r.n_vocab) {
            st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam search: %d first continuations exceed the vocabulary (%d)", w,
                            r.n_vocab);
            goto done;
        }
        n_conts = 0;
        for (int32_t b = 0; b < n_live && !st; b++) {
            const float *row = live[b]->next;
            if (p->temp == 0) top_k(row, r.n_vocab, w, bb.toks);
            const double lse = log_sum_exp(row, r.n_vocab); // once for the w forks
            for (int32_t j = 0; j < w && !st; j++) {
                bcand *c = NULL;
                uint64_t stream = ((uint64_t)step << 40) ^ ((uint64_t)b * (uint64_t)w + (uint64_t)j + 1);
                if ((st = fork_cand(&r, live[b], stream, &c, err))) break;
                conts[n_conts++] = c;
                const draw d = {p->temp == 0 ? bb.toks[j] : sample(c, row, r.n_vocab, p->temp), lse};
                st = choose(&r, c, row, d, err);
            }
            cand_release_seq(&r, live[b]);
        }
        res->select_ms += kvt_time_ms() - ts;
        int32_t ng = 0;
        if (!st) st = run_step(&r, conts, n_conts, budget, &bb, &ng, &decode_ms, err);
        res->groups_per_step[res->n_steps++] = ng;
        ts = kvt_time_ms();
        // rating
        for (int32_t i = 0; i < n_conts && !st; i++) {
            bcand *c = conts[i];
            kvt_beam_cand bc = {prompt, n_prompt, c->ids, c->lp, (int64_t)c->n, c->step_start, c->state == C_FINISHED};
            st = scorer(p->scorer_user, &bc, &c->score, err);
        }
        if (st) {
            free_all(&r, conts, n_conts);
            n_conts = 0;
            goto done;
        }
        // selection: the best N of the kept finished candidates and the new continuations
        int32_t n_all = 0;
        for (int32_t i = 0; i < n_pool; i++) {
            if (pool[i]->state == C_FINISHED) conts[n_conts + n_all++] = pool[i];
            else cand_free(&r, pool[i]); // expanded parents
        }
        n_pool = 0;
        for (int32_t i = 0; i < n_conts; i++) conts[n_conts + n_all++] = conts[i];
        bcand **all = conts + n_conts;
        qsort(all, (size_t)n_all, sizeof *all, cmp_cand);
        // coinciding continuations (two draws of the same tokens) are merged: the N kept beams are distinct
        if (p->temp > 0) mark_duplicates(all, n_all, keys, dup);
        for (int32_t i = 0; i < n_all; i++) {
            if (p->temp > 0 && dup[i]) cand_free(&r, all[i]);
            else if (n_pool < N) {
                pool[n_pool++] = all[i];
                if (all[i]->state == C_FINISHED) cand_release_seq(&r, all[i]);
            } else cand_free(&r, all[i]);
        }
        n_conts = 0;
        res->select_ms += kvt_time_ms() - ts;
    }
    // results: the pool, best first (live beams at the step limit count as they are)
    res->beams = calloc((size_t)(n_pool ? n_pool : 1), sizeof *res->beams);
    if (!res->beams) {
        st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for results");
        goto done;
    }
    for (int32_t i = 0; i < n_pool; i++) {
        kvt_beam_out *o = &res->beams[res->n_beams++];
        o->n = (int64_t)pool[i]->n;
        o->ids = malloc((pool[i]->n + 1) * sizeof *o->ids);
        if (!o->ids) {
            st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for results");
            goto done;
        }
        memcpy(o->ids, pool[i]->ids, pool[i]->n * sizeof *o->ids);
        o->score = pool[i]->score;
        o->finished = pool[i]->state == C_FINISHED;
    }
    kvt_kv_stats ks2;
    kvt_context_kv_stats(ctx, &ks2);
    const int nt = kvt_context_n_threads(ctx) > 0 ? kvt_context_n_threads(ctx) : 1;
    double stall = ks2.stall_ms - ks1.stall_ms - res->prefetch_ms;
    res->stall_ms = stall > 0 ? stall / nt : 0;
    res->compute_ms = decode_ms - res->stall_ms;
done:
    if (gpu && kvt_context_gpu_stats(ctx, &gs)) res->fork_copy_bytes = gs.kv.fork_bytes - fork_bytes0;
    free_all(&r, pool, n_pool);
    free(pool);
    free(live);
    free(conts);
    free(keys);
    free(dup);
    free(bb.seqs);
    free(bb.toks);
    free(bb.who);
    free(bb.draws);
    kvt_context_seq_truncate(ctx, 0, 0);
    res->total_ms = kvt_time_ms() - t_start;
    return st;
}

void kvt_beam_result_free(kvt_beam_result *res) {
    if (!res) return;
    for (int32_t i = 0; i < res->n_beams; i++) free(res->beams[i].ids);
    free(res->beams);
    free(res->groups_per_step);
    memset(res, 0, sizeof *res);
}

// --- process reward model ---------------------------------------------------------------

struct kvt_beam_prm {
    kvt_context *ctx;
    int32_t n_vocab;
    const int32_t *prompt; // the prompt held by sequence 0 (positions [0, n_prompt))
    int64_t n_prompt;
    int32_t *buf;          // [cap] prompt's last id + candidate ids
    size_t cap;
};

kvt_status kvt_beam_prm_init(const kvt_model *prm, const kvt_context_params *cp, kvt_beam_prm **out, kvt_err *err) {
    *out = NULL;
    kvt_beam_prm *p = calloc(1, sizeof *p);
    if (!p) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    kvt_status st = kvt_context_init(prm, cp, &p->ctx, err);
    if (st) {
        free(p);
        return st;
    }
    p->n_vocab = prm->hp.n_vocab;
    *out = p;
    return KVT_OK;
}

void kvt_beam_prm_free(kvt_beam_prm *p) {
    if (!p) return;
    kvt_context_free(p->ctx);
    free(p->buf);
    free(p);
}

// Mean log-probability, under the PRM, of ids[0..n) after the prompt: the prompt stays decoded in
// sequence 0 (it is decoded again when another prompt comes); each candidate is decoded after it
// and truncated away.
kvt_status kvt_beam_prm_score(void *user, const kvt_beam_cand *c, double *score, kvt_err *err) {
    kvt_beam_prm *p = user;
    *score = 0;
    if (c->n == 0) return KVT_OK;
    for (int64_t i = 0; i < c->n; i++) {
        if (c->ids[i] < 0 || c->ids[i] >= p->n_vocab) {
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "process reward model: token %d outside its vocabulary (%d)",
                              c->ids[i], p->n_vocab);
        }
    }
    kvt_status st;
    if (p->prompt != c->prompt || p->n_prompt != c->n_prompt) {
        kvt_context_truncate(p->ctx, 0);
        p->prompt = NULL;
        if (c->n_prompt > 1 && (st = kvt_decode(p->ctx, c->prompt, c->n_prompt - 1, false, err))) return st;
        p->prompt = c->prompt;
        p->n_prompt = c->n_prompt;
    }
    kvt_context_truncate(p->ctx, c->n_prompt - 1);
    // the prompt's last id predicts ids[0]; ids[i] predicts ids[i + 1]
    if (!kvt_grow((void **)&p->buf, &p->cap, (size_t)c->n + 1, sizeof *p->buf)) {
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    }
    p->buf[0] = c->prompt[c->n_prompt - 1];
    memcpy(p->buf + 1, c->ids, (size_t)c->n * sizeof *p->buf);
    if ((st = kvt_decode(p->ctx, p->buf, c->n, true, err))) return st;
    const float *lg = kvt_context_logits(p->ctx); // [n, n_vocab]
    double s = 0;
    for (int64_t i = 0; i < c->n; i++) {
        const float *row = lg + i * p->n_vocab;
        s += token_logprob(row, p->n_vocab, c->ids[i]);
    }
    *score = s / (double)c->n;
    kvt_context_truncate(p->ctx, c->n_prompt - 1);
    return KVT_OK;
}

kvt_status kvt_beam_result_rescore(kvt_beam_prm *p, const int32_t *prompt, int64_t n_prompt, kvt_beam_result *res,
                                   kvt_err *err) {
    if (!p || !prompt || n_prompt < 1 || !res) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "rescore: needs a scorer, a prompt of at least one token and results");
    }
    for (int32_t i = 0; i < res->n_beams; i++) {
        kvt_beam_out *b = &res->beams[i];
        // the PRM reads only the prompt and the ids; logprobs are the search's own, not needed here
        kvt_beam_cand c = {prompt, n_prompt, b->ids, NULL, b->n, 0, b->finished};
        double s;
        kvt_status st = kvt_beam_prm_score(p, &c, &s, err);
        if (st) return st;
        b->rescore = s;
        b->rescored = true;
    }
    return KVT_OK;
}
