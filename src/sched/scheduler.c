// scheduler.c - iteration-level continuous batching (see scheduler.h).
//
// Requests live in one list in arrival order. Admission is FCFS, so the admitted requests form a prefix of
// the list and the latest-admitted running request is the last admitted one not swapped out.
#include "scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/timer.h"
#include "../kv/kv_paged.h"
#include "prefix_cache.h"
#include "sched_policy.h"

typedef struct {
    int32_t seq;       // -1: not yet forked, or freed
    kvt_sampler *smp;
    int32_t last;      // the token to decode next
    int64_t n_gen;
    bool live;
} choice;

typedef enum { R_WAITING, R_PREFILL, R_DECODE } rstate;

typedef struct req {
    struct req *next;
    uint64_t id;
    kvt_sched_request p;
    int32_t *prompt;     // owned copy
    int64_t max_tokens;  // effective
    int64_t n_prefilled; // prompt positions in the prompt's sequence
    rstate state;
    bool swapped;        // preempted: its blocks went down to disk; it does not run
    bool restarted;      // started again once after a failed pass (req_restart); a second such failure ends it
    choice *ch;          // [p.n]
    int32_t n_live;
    int64_t cached, completion;
    kvt_sparse_totals sparse; // its choices' sparse decode steps, taken as their sequences are freed (seq_free)
    const kvt_prefix_staged *staged; // blocks read beforehand (borrowed until released), or NULL
} req;

struct kvt_sched {
    kvt_context *ctx;
    const kvt_tokenizer *tok;
    kvt_sched_params p;
    kvt_sched_callbacks cb;
    kvt_prefix_cache *pc;
    int32_t n_vocab;
    int64_t resident;     // bytes fast + host hold (preemption; -1: off)
    int64_t block_bytes;  // one more KV block of a sequence
    req *head;
    uint64_t next_id;
    kvt_sched_stats st;
    // scratch of one iteration, grown as needed
    kvt_batch_run *runs;
    req **run_req;        // [cap] the request of each run
    int32_t *run_choice;  // [cap] the choice of a decode run, -1 for a prefill chunk
    int32_t *plan;
    int64_t cap, plan_cap;
    bool plan_live;       // a plan is published
    // the decisions' view of the requests (sched_policy.h), in list order, grown as needed
    kvt_sched_policy_req *view;
    req **view_req;       // [view_cap] the request of each view entry
    int64_t *pick;        // [view_cap] indices the decisions return
    kvt_sched_policy_run *split; // [view_cap]
    int64_t view_cap;
};

kvt_sched_params kvt_sched_params_default(void) {
    kvt_sched_params p = {0};
    p.n_parallel = 4;
    p.token_budget = 512;
    p.plan_iters = 4;
    p.prefix_fetch_bytes = (int64_t)256 << 20;
    p.prefix_fetch_wait_ms = 2000;
    p.prefix_query_bytes = KVT_PREFIX_QUERY_BYTES_DEFAULT;
    p.prefix_key_bytes = KVT_PREFIX_KEY_BYTES_DEFAULT;
    p.warm_positions = -1;
    p.warm_max_bytes = KVT_SCHED_WARM_MAX_DEFAULT;
    return p;
}

static bool is_paged(kvt_context *ctx) { return !strcmp(kvt_context_kv(ctx)->ops->name, "paged"); }

kvt_status kvt_sched_init(kvt_context *ctx, const kvt_tokenizer *tok, const kvt_sched_params *p,
                          const kvt_sched_callbacks *cb, kvt_sched **out, kvt_err *err) {
    *out = NULL;
    if (p->n_parallel < 1) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "n_parallel %d: need at least 1", p->n_parallel);
    if (kvt_context_seq_n_past(ctx, 0) != 0) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "the scheduler's context must start empty (sequence 0 holds %lld)",
                          (long long)kvt_context_seq_n_past(ctx, 0));
    }
    if ((p->prefix_cache || p->preempt || p->n_parallel > 1) && !is_paged(ctx)) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "the scheduler needs the paged KV store for %s (the context uses the %s "
                          "cache): set kv_paged", p->prefix_cache ? "the prefix cache" : p->preempt ? "preemption" : "n_parallel > 1",
                          kvt_context_kv(ctx)->ops->name);
    }
    kvt_sched *s = calloc(1, sizeof *s);
    if (!s) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the scheduler");
    s->ctx = ctx;
    s->tok = tok;
    s->p = *p;
    s->cb = *cb;
    if (s->p.token_budget < s->p.n_parallel + 1) s->p.token_budget = s->p.n_parallel + 1;
    s->n_vocab = kvt_context_model(ctx)->hp.n_vocab;
    s->block_bytes = kvt_context_kv_block_bytes(ctx);
    s->resident = -1;
    if (p->preempt && is_paged(ctx)) {
        kvt_kv_stats ks;
        kvt_context_kv_stats(ctx, &ks);
        const int64_t *b = ks.budget_bytes;
        if (b[KVT_TIER_DISK] != 0 && b[KVT_TIER_FAST] > 0 && b[KVT_TIER_HOST] >= 0) s->resident = b[KVT_TIER_FAST] + b[KVT_TIER_HOST];
    }
    if (p->prefix_cache) {
        kvt_prefix_cache_params pp = kvt_prefix_cache_params_default();
        pp.max_blocks = p->prefix_max_blocks;
        pp.store = p->prefix_store;
        pp.query_bytes = p->prefix_query_bytes;
        pp.key_bytes = p->prefix_key_bytes;
        kvt_status st = kvt_prefix_cache_init(ctx, &pp, &s->pc, err);
        if (st) {
            free(s);
            return st;
        }
    }
    *out = s;
    return KVT_OK;
}

// The request no longer reads its staged blocks: they go back to their owner.
static void staged_release(req *r) {
    if (r->staged && r->staged->release) r->staged->release(r->staged->arg);
    r->staged = NULL;
}

// Frees sequence seq of request r, its sparse step records counted first and its key summaries of the prompt's
// blocks (or the prompt's partial last block) left to the prefix cache.
static void seq_free(kvt_sched *s, req *r, int32_t seq) {
    kvt_sparse_seq_totals_add(kvt_context_sparse(s->ctx), seq, r->p.n_prompt, &r->sparse);
    // the prompt's partial last block too (without sparse attention), now that seq writes no more into it: kept
    // while seq ran, seq's next token would have copied it (a block more in the store)
    if (s->pc && r->state == R_DECODE) kvt_prefix_cache_keep_tail(s->pc, seq, r->prompt, r->p.n_prompt);
    if (s->pc) kvt_prefix_cache_keep_keys(s->pc, seq, r->prompt, r->p.n_prompt);
    kvt_context_seq_free(s->ctx, seq);
}

// Frees the request's sequences and samplers and unlinks it; then on_done.
static void req_end(kvt_sched *s, req *r, kvt_sched_outcome how, const kvt_err *why) {
    staged_release(r);
    for (req **pp = &s->head; *pp; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    for (int32_t i = 0; i < r->p.n; i++) {
        if (r->ch[i].seq > 0) seq_free(s, r, r->ch[i].seq);
        kvt_sampler_free(r->ch[i].smp);
    }
    kvt_sched_result res;
    memset(&res, 0, sizeof res);
    res.outcome = how;
    if (why) res.err = *why;
    res.prompt_tokens = r->p.n_prompt;
    res.cached_tokens = r->cached;
    res.computed_tokens = r->state == R_WAITING ? 0 : r->n_prefilled - r->cached;
    res.completion_tokens = r->completion;
    res.sparse = kvt_context_sparse_selects(s->ctx);
    res.sparse_steps = r->sparse;
    void *user = r->p.user;
    free(r->ch);
    free(r->prompt);
    free(r);
    s->cb.on_done(user, &res);
}

void kvt_sched_free(kvt_sched *s) {
    if (!s) return;
    while (s->head) req_end(s, s->head, KVT_SCHED_CANCELLED, NULL);
    kvt_prefix_cache_free(s->pc);
    free(s->runs);
    free(s->run_req);
    free(s->run_choice);
    free(s->plan);
    free(s->view);
    free(s->view_req);
    free(s->pick);
    free(s->split);
    free(s);
}

kvt_status kvt_sched_submit(kvt_sched *s, const kvt_sched_request *rq, uint64_t *id, kvt_err *err) {
    return kvt_sched_submit_staged(s, rq, NULL, id, err);
}

// The prefix cache gives a request at most kvt_context_prompt_cacheable positions: all but the last ones, which are
// computed for their logits (and asyncspade's query history: a cached prefix brings keys only).

int64_t kvt_sched_prefix_blocks(const kvt_sched *s, int64_t n_prompt) {
    const int64_t bt = kvt_context_kv(s->ctx)->block_tokens;
    return bt > 0 ? kvt_context_prompt_cacheable(s->ctx, n_prompt) / bt : 0;
}

int64_t kvt_sched_prefix_probe(const kvt_sched *s, const int32_t *prompt, int64_t n_prompt) {
    return s->pc ? kvt_prefix_cache_probe(s->pc, prompt, n_prompt, kvt_context_prompt_cacheable(s->ctx, n_prompt)) : -1;
}

kvt_status kvt_sched_submit_staged(kvt_sched *s, const kvt_sched_request *rq, const kvt_prefix_staged *staged,
                                   uint64_t *id, kvt_err *err) {
    const int64_t n_ctx = kvt_context_n_ctx(s->ctx);
    if (rq->n_prompt < 1 || rq->n_prompt >= n_ctx || rq->n < 1) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "a request of %lld prompt tokens and %d choices: need 1 .. %lld tokens "
                          "(the context holds %lld) and n >= 1", (long long)rq->n_prompt, rq->n, (long long)(n_ctx - 1),
                          (long long)n_ctx);
    }
    req *r = calloc(1, sizeof *r);
    int32_t *prompt = malloc((size_t)rq->n_prompt * sizeof *prompt);
    choice *ch = calloc((size_t)rq->n, sizeof *ch);
    if (!r || !prompt || !ch) {
        free(r), free(prompt), free(ch);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a request of %lld tokens", (long long)rq->n_prompt);
    }
    memcpy(prompt, rq->prompt, (size_t)rq->n_prompt * sizeof *prompt);
    r->p = *rq;
    r->p.prompt = r->prompt = prompt;
    r->ch = ch;
    for (int32_t i = 0; i < rq->n; i++) ch[i].seq = -1;
    r->max_tokens = n_ctx - rq->n_prompt;
    if (rq->max_tokens >= 0 && rq->max_tokens < r->max_tokens) r->max_tokens = rq->max_tokens;
    r->id = ++s->next_id;
    r->staged = staged;
    req **tail = &s->head;
    while (*tail) tail = &(*tail)->next;
    *tail = r;
    *id = r->id;
    return KVT_OK;
}

void kvt_sched_cancel(kvt_sched *s, uint64_t id) {
    for (req *r = s->head; r; r = r->next) {
        if (r->id == id) {
            req_end(s, r, KVT_SCHED_CANCELLED, NULL);
            return;
        }
    }
}

bool kvt_sched_idle(const kvt_sched *s) { return !s->head; }

bool kvt_sched_warm(kvt_sched *s) {
    const int64_t n = s->p.warm_positions < 0 ? kvt_context_n_ctx(s->ctx) : s->p.warm_positions;
    // the store's memory first (a prompt's KV is written before its key summaries), then the summaries' pool; with a
    // prefix cache, which keeps every block a prompt filled (a sliding-window layer's too) and imports whole blocks
    // from a second-level store, the room is every layer's
    return kvt_kv_paged_warm(kvt_context_kv(s->ctx), n, s->pc != NULL, s->p.warm_max_bytes) ||
           kvt_sparse_warm(kvt_context_sparse(s->ctx), n, KVT_SPARSE_WARM_MIN_SET_DEFAULT, s->p.warm_max_bytes);
}

void kvt_sched_stats_get(const kvt_sched *s, kvt_sched_stats *out) {
    *out = s->st;
    out->waiting = out->running = out->preempted = 0;
    for (const req *r = s->head; r; r = r->next) {
        if (r->state == R_WAITING) out->waiting++;
        else if (r->swapped) out->preempted++;
        else out->running += r->state == R_PREFILL ? 1 : r->n_live;
    }
    if (s->pc) {
        kvt_prefix_cache_stats ps;
        kvt_prefix_cache_stats_get(s->pc, &ps);
        out->query_hits = ps.query_hits;
        out->query_tokens = ps.query_tokens;
        out->query_windows = ps.query_windows;
        out->query_bytes = ps.query_bytes;
        out->key_hits = ps.key_hits, out->key_tokens = ps.key_tokens;
        out->key_sums = ps.key_sums, out->key_bytes = ps.key_bytes, out->key_live = ps.key_live;
    }
}

// Sparse decode attention with a selection (quest, asyncspade): a decode step of a sequence reads only its selected
// blocks (kvt_context_decode_bytes), so a decoding sequence is counted at that working set, not at all it holds. A
// prompt is attended densely: a prefill of several chunks re-reads the prompt's KV at every chunk, so it counts
// whole (as dense); a prompt whose rest (after the prefix cache) is computed in one chunk reads the cached prefix once,
// in that one pass, and is counted at the working set it keeps from then on: its decode steps' plus the chunk's blocks.
// Dense: every sequence at what it holds (unchanged).

// The rest of a prompt fits the chunk of one iteration whatever the decode rows beside it (n_parallel at most).
static bool one_chunk(const kvt_sched *s, int64_t rest) { return rest + s->p.n_parallel <= s->p.token_budget; }

// The working set of a sparse request of n sequences over n_prompt positions, rest of them still to compute in one
// chunk: each sequence's decode step plus its next block, and the chunk's blocks.
static int64_t sparse_need(const kvt_sched *s, int32_t n, int64_t n_prompt, int64_t rest) {
    const int64_t B = kvt_context_kv_block(s->ctx);
    return (int64_t)n * (kvt_context_decode_bytes(s->ctx, n_prompt + 1) + s->block_bytes) + (rest + B - 1) / B * s->block_bytes;
}

// Bytes of KV the request's running sequences hold plus one more block each (its next), in any tier; under sparse
// selection, of a decoding (or one-chunk prefilling) request, at most their working set (see above).
static int64_t req_demand(kvt_sched *s, const req *r) {
    kvt_kv *kv = kvt_context_kv(s->ctx);
    const bool sparse = kvt_context_sparse_selects(s->ctx);
    const int64_t rest = r->p.n_prompt - r->n_prefilled;
    int64_t sum = 0;
    for (int32_t i = 0; i < r->p.n; i++) {
        if (!r->ch[i].live || r->ch[i].seq < 0) continue;
        int64_t b[KVT_TIER_COUNT];
        kvt_kv_paged_seq_usage(kv, r->ch[i].seq, b);
        int64_t held = b[KVT_TIER_FAST] + b[KVT_TIER_HOST] + b[KVT_TIER_DISK];
        if (sparse && r->state == R_DECODE) {
            const int64_t ws = kvt_context_decode_bytes(s->ctx, kvt_context_seq_n_past(s->ctx, r->ch[i].seq) + 1);
            held = ws < held ? ws : held;
        } else if (sparse && r->state == R_PREFILL && one_chunk(s, rest)) {
            const int64_t ws = sparse_need(s, 1, r->p.n_prompt, rest) - s->block_bytes;
            held = ws < held ? ws : held;
        }
        sum += held + s->block_bytes;
    }
    return sum;
}

// KV a waiting request is counted at when admitted (kvt_sched_policy_req.need; 0: its prompt's blocks): under sparse
// selection, when the prefix cache leaves the rest of its prompt to one chunk, its working set (see above).
static int64_t req_need(kvt_sched *s, const req *r) {
    if (!s->pc || !kvt_context_sparse_selects(s->ctx)) return 0;
    const int64_t cached = kvt_sched_prefix_probe(s, r->prompt, r->p.n_prompt) * kvt_context_kv_block(s->ctx);
    const int64_t rest = r->p.n_prompt - cached;
    if (!one_chunk(s, rest)) return 0;
    const int64_t B = kvt_context_kv_block(s->ctx), whole = (r->p.n_prompt + B - 1) / B * s->block_bytes;
    const int64_t ws = sparse_need(s, r->p.n, r->p.n_prompt, rest);
    return ws < whole ? ws : 0;
}

// Admits r: its prompt's sequence (with the prefix cache's blocks) and one sampler per choice.
static kvt_status admit(kvt_sched *s, req *r, kvt_err *err) {
    int32_t seq;
    kvt_status st = kvt_context_seq_fork(s->ctx, 0, &seq, err); // sequence 0 stays empty: a fork of it is a new one
    if (st) return st;
    r->ch[0].seq = seq;
    r->ch[0].live = true;
    r->n_live = 1;
    r->state = R_PREFILL;
    for (int32_t i = 0; !st && i < r->p.n; i++) {
        kvt_sampler_params sp = r->p.sampling;
        sp.seed = r->p.sampling.seed + (uint64_t)i;
        st = kvt_sampler_init(&sp, s->n_vocab, &r->ch[i].smp, err);
        for (int64_t t = 0; !st && t < r->p.n_prompt; t++) kvt_sampler_accept(r->ch[i].smp, r->prompt[t]);
    }
    if (!st && s->pc) {
        int64_t n_cached = 0;
        const double t0 = kvt_time_ms();
        st = kvt_prefix_cache_attach_staged(s->pc, seq, r->prompt, r->p.n_prompt, kvt_context_prompt_cacheable(s->ctx, r->p.n_prompt), r->staged,
                                            &n_cached, err);
        if (!st) {
            r->cached = r->n_prefilled = n_cached;
            s->st.cached_tokens += n_cached;
        }
        s->st.attach_ms += kvt_time_ms() - t0;
    }
    staged_release(r); // admitted: the copies were imported (or not needed)
    return st;
}

// Ends choice i (on_finish), freeing its sequence unless it is the prompt's sequence that others still need to fork.
static void choice_end(kvt_sched *s, req *r, int32_t i, kvt_sched_finish why) {
    choice *c = &r->ch[i];
    c->live = false;
    r->n_live--;
    if (c->seq > 0) seq_free(s, r, c->seq);
    c->seq = -1;
    s->cb.on_finish(r->p.user, i, why);
}

// Choice i samples its next token from logits and reports it. A failed draw (a grammar that allows no token) fails
// the request: the caller ends it with the status.
static kvt_status choice_sample(kvt_sched *s, req *r, int32_t i, const float *logits, kvt_err *err) {
    choice *c = &r->ch[i];
    if (c->n_gen >= r->max_tokens) {
        choice_end(s, r, i, KVT_SCHED_LENGTH);
        return KVT_OK;
    }
    int32_t id;
    kvt_status st = kvt_sampler_draw(c->smp, logits, &id, err);
    if (st) return st;
    kvt_sampler_accept(c->smp, id);
    c->n_gen++;
    r->completion++;
    const bool go = s->cb.on_token(r->p.user, i, id, logits);
    if (r->p.stop_at_eog && s->tok && kvt_token_is_eog(s->tok, id)) choice_end(s, r, i, KVT_SCHED_STOP);
    else if (!go) choice_end(s, r, i, KVT_SCHED_STOP);
    else if (c->n_gen >= r->max_tokens) choice_end(s, r, i, KVT_SCHED_LENGTH);
    else c->last = id;
    return KVT_OK;
}

// The prompt of r is in its sequence: register it in the prefix cache, fork the other choices, sample each.
static kvt_status prompt_done(kvt_sched *s, req *r, const float *logits, kvt_err *err) {
    kvt_status st = KVT_OK;
    if (s->pc) st = kvt_prefix_cache_insert(s->pc, r->ch[0].seq, r->prompt, r->p.n_prompt, err);
    if (!st && s->pc) kvt_prefix_cache_keep_queries(s->pc, r->ch[0].seq, r->prompt, r->p.n_prompt); // (asyncspade)
    for (int32_t i = 1; !st && i < r->p.n; i++) {
        st = kvt_context_seq_fork(s->ctx, r->ch[0].seq, &r->ch[i].seq, err);
        if (!st) {
            r->ch[i].live = true;
            r->n_live++;
        }
    }
    if (st) return st;
    r->state = R_DECODE;
    for (int32_t i = 0; !st && i < r->p.n; i++) st = choice_sample(s, r, i, logits, err);
    return st;
}

static kvt_status grow(kvt_sched *s, int64_t n, kvt_err *err) {
    if (n <= s->cap) return KVT_OK;
    int64_t cap = n * 2;
    kvt_batch_run *runs = realloc(s->runs, (size_t)cap * sizeof *runs);
    if (runs) s->runs = runs;
    req **rr = realloc(s->run_req, (size_t)cap * sizeof *rr);
    if (rr) s->run_req = rr;
    int32_t *rc = realloc(s->run_choice, (size_t)cap * sizeof *rc);
    if (rc) s->run_choice = rc;
    if (!runs || !rr || !rc) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a batch of %lld runs", (long long)n);
    s->cap = cap;
    return KVT_OK;
}

// The decisions' parameters and view of the requests (sched_policy.h), in list order; with `demand` and
// preemption, the admitted requests' demand (req_demand) and, with need_of_waiting, the waiting ones' need (req_need). Returns the view's length, -1 when out of memory.
static kvt_sched_policy_params policy_params(const kvt_sched *s) {
    return (kvt_sched_policy_params){s->p.n_parallel, s->p.token_budget, s->resident, kvt_context_kv_block(s->ctx),
                                     s->block_bytes};
}

static int64_t view_build(kvt_sched *s, bool demand, bool need_of_waiting, kvt_err *err) {
    int64_t n = 0;
    for (const req *r = s->head; r; r = r->next) n++;
    if (n > s->view_cap) {
        const int64_t cap = n * 2;
        kvt_sched_policy_req *v = realloc(s->view, (size_t)cap * sizeof *v);
        if (v) s->view = v;
        req **vr = realloc(s->view_req, (size_t)cap * sizeof *vr);
        if (vr) s->view_req = vr;
        int64_t *pk = realloc(s->pick, (size_t)cap * sizeof *pk);
        if (pk) s->pick = pk;
        kvt_sched_policy_run *sp = realloc(s->split, (size_t)cap * sizeof *sp);
        if (sp) s->split = sp;
        if (!v || !vr || !pk || !sp) {
            kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the scheduler's view of %lld requests", (long long)n);
            return -1;
        }
        s->view_cap = cap;
    }
    n = 0;
    for (req *r = s->head; r; r = r->next, n++) {
        const int32_t state = r->state == R_WAITING ? KVT_SP_WAITING : r->state == R_PREFILL ? KVT_SP_PREFILL : KVT_SP_DECODE;
        const bool mem = demand && s->resident >= 0;
        const int64_t d = mem && r->state != R_WAITING ? req_demand(s, r) : 0;
        const int64_t need = mem && need_of_waiting && r->state == R_WAITING ? req_need(s, r) : 0;
        s->view[n] = (kvt_sched_policy_req){state, r->swapped, r->p.n, r->n_live, r->p.n_prompt, r->n_prefilled, d, need};
        s->view_req[n] = r;
    }
    return n;
}

// Preemption by swap and resumption (s->resident >= 0): the running requests' demand must fit in fast + host.
static kvt_status balance(kvt_sched *s, kvt_err *err) {
    const kvt_sched_policy_params pp = policy_params(s);
    const int64_t n = view_build(s, true, false, err);
    if (n < 0) return err->status;
    kvt_sched_policy_load load = kvt_sched_policy_running(s->view, n);
    for (int64_t v; (v = kvt_sched_policy_victim(&pp, s->view, n, &load)) >= 0;) { // the latest admitted running one
        req *victim = s->view_req[v];
        const int64_t d = req_demand(s, victim);
        if (s->plan_live) { // no planned prefetch of the victim's blocks while they move down
            kvt_context_set_plan(s->ctx, NULL, 0);
            s->plan_live = false;
        }
        bool ok = true;
        for (int32_t i = 0; ok && i < victim->p.n; i++) {
            kvt_err e2;
            if (victim->ch[i].live && victim->ch[i].seq > 0) {
                ok = !kvt_kv_paged_seq_demote(kvt_context_kv(s->ctx), victim->ch[i].seq, KVT_TIER_DISK, &e2);
            }
        }
        if (!ok) break; // the disk is full too: let it run (the store copes or the pass fails)
        victim->swapped = true;
        s->view[v].swapped = true;
        s->st.preemptions++;
        load.demand -= d;
        load.n_running--;
    }
    for (int64_t i = 0; i < n; i++) { // a swapped request counts at what it holds now, its blocks on disk
        if (s->view[i].swapped) s->view[i].demand = req_demand(s, s->view_req[i]);
    }
    const int64_t n_resume = kvt_sched_policy_resume(&pp, s->view, n, &load, s->pick); // the earliest swapped ones that fit
    for (int64_t k = 0; k < n_resume; k++) {
        s->view_req[s->pick[k]]->swapped = false;
        s->st.resumes++;
    }
    return KVT_OK;
}

// Admits waiting requests in arrival order while slots (and, with preemption, fast + host) allow.
static kvt_status admit_waiting(kvt_sched *s, kvt_err *err) {
    const kvt_sched_policy_params pp = policy_params(s);
    int64_t n = view_build(s, true, true, err);
    if (n < 0) return err->status;
    for (;;) {
        const int64_t n_admit = kvt_sched_policy_admit(&pp, s->view, n, s->pick);
        int64_t failed = -1;
        for (int64_t k = 0; k < n_admit && failed < 0; k++) {
            const int64_t i = s->pick[k];
            kvt_err e2;
            if (admit(s, s->view_req[i], &e2)) {
                req_end(s, s->view_req[i], KVT_SCHED_FAILED, &e2);
                failed = i;
            } else { // counted at its prompt's blocks from now on
                s->view[i].demand = kvt_sched_policy_need(&pp, &s->view[i]);
                s->view[i].state = KVT_SP_PREFILL;
            }
        }
        if (failed < 0) return KVT_OK;
        n--; // the failed request leaves the view; the others are asked again
        memmove(s->view + failed, s->view + failed + 1, (size_t)(n - failed) * sizeof *s->view);
        memmove(s->view_req + failed, s->view_req + failed + 1, (size_t)(n - failed) * sizeof *s->view_req);
    }
}

// Publishes the sequences of the next plan_iters iterations: the running ones, then the swapped ones that resume next
// (kvt_sched_policy_plan, as the simulator's plan).
static void publish_plan(kvt_sched *s, int64_t n_runs) {
    int64_t n_swapped_seqs = 0;
    for (req *r = s->head; r && r->state != R_WAITING; r = r->next) {
        if (r->swapped) n_swapped_seqs += r->n_live;
    }
    const int64_t n = (n_runs + n_swapped_seqs) * s->p.plan_iters;
    if (n > s->plan_cap) {
        int32_t *p = realloc(s->plan, (size_t)n * sizeof *p);
        if (!p) return; // no plan this time: the store falls back to its eviction policy
        s->plan = p;
        s->plan_cap = n;
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n_runs; i++) s->plan[k++] = s->runs[i].seq;
    for (req *r = s->head; r && r->state != R_WAITING; r = r->next) {
        for (int32_t i = 0; r->swapped && i < r->p.n; i++) {
            if (r->ch[i].live && r->ch[i].seq > 0) s->plan[k++] = r->ch[i].seq;
        }
    }
    k = kvt_sched_policy_plan(s->plan, n_runs, k - n_runs, s->p.plan_iters);
    kvt_context_set_plan(s->ctx, s->plan, k);
    s->plan_live = true;
    s->st.plans++;
}

// Decode rows of the running choices, then prompt chunks, under the token budget (kvt_sched_policy_split).
// Returns the runs.
static int64_t build_runs(kvt_sched *s, kvt_err *err) {
    const kvt_sched_policy_params pp = policy_params(s);
    const int64_t nv = view_build(s, false, false, err); // the split needs no demand
    if (nv < 0) return -1;
    const int64_t n_split = kvt_sched_policy_split(&pp, s->view, nv, s->split);
    int64_t n = 0;
    for (int64_t k = 0; k < n_split; k++) {
        const kvt_sched_policy_run *e = &s->split[k];
        req *r = s->view_req[e->req];
        if (!e->prefill) {
            for (int32_t i = 0; i < r->p.n; i++) {
                if (!r->ch[i].live) continue;
                if (grow(s, n + 1, err)) return -1;
                s->runs[n] = (kvt_batch_run){r->ch[i].seq, &r->ch[i].last, 1, true, false};
                s->run_req[n] = r;
                s->run_choice[n++] = i;
            }
        } else {
            if (grow(s, n + 1, err)) return -1;
            s->runs[n] = (kvt_batch_run){r->ch[0].seq, r->prompt + r->n_prefilled, e->tokens, e->last, true};
            s->run_req[n] = r;
            s->run_choice[n++] = -1;
        }
    }
    return n;
}

// r, admitted and still in its prompt (no token reported), goes back to waiting: its sequences and samplers are freed
// and it is computed again from its admission on, which gives the tokens it would have had (its prompt's blocks that
// passes before completed may come back from the prefix cache, exact as any hit).
static void req_restart(kvt_sched *s, req *r) {
    for (int32_t i = 0; i < r->p.n; i++) {
        if (r->ch[i].seq > 0) seq_free(s, r, r->ch[i].seq);
        kvt_sampler_free(r->ch[i].smp);
        r->ch[i] = (choice){-1, NULL, 0, 0, false};
    }
    r->n_live = 0;
    r->state = R_WAITING;
    r->swapped = false;
    r->n_prefilled = r->cached = r->completion = 0;
    r->restarted = true;
    s->st.restarts++;
}

// After a failed pass that cannot be repeated (kvt_context_pass_repeatable: asyncspade with --sparse-rerank-resid),
// the pass's requests in their prompt start again (req_restart; they move behind the admitted requests, in their
// order, so that the admitted ones stay a prefix of the list), and those that reported tokens fail, named. Returns
// whether any failed.
static bool pass_abandon(kvt_sched *s, int64_t n_runs, kvt_err *err) {
    bool failed = false;
    req *back = NULL, **tail = &back; // the restarted ones, in list order
    for (req **pp = &s->head; *pp;) {
        req *r = *pp;
        bool ran = false;
        for (int64_t i = 0; i < n_runs && !ran; i++) ran = s->run_req[i] == r;
        if (!ran) {
            pp = &r->next;
        } else if (r->state == R_PREFILL && !r->restarted) {
            req_restart(s, r);
            *pp = r->next;
            r->next = NULL;
            *tail = r, tail = &r->next;
        } else {
            kvt_err e2 = *err;
            snprintf(e2.msg, sizeof e2.msg, "%.300s (not run again: %s)", err->msg,
                     r->restarted ? "it failed so once already"
                                  : "the failed pass counted in --sparse-rerank-resid's calibration, so a repeat could "
                                    "change its tokens");
            req_end(s, r, KVT_SCHED_FAILED, &e2); // (unlinks r: *pp is its successor now)
            failed = true;
        }
    }
    if (back) { // behind the last admitted request
        req **at = &s->head;
        while (*at && (*at)->state != R_WAITING) at = &(*at)->next;
        *tail = *at;
        *at = back;
    }
    return failed;
}

kvt_status kvt_sched_step(kvt_sched *s, int64_t *rows, kvt_err *err) {
    *rows = 0;
    kvt_status st0 = s->resident >= 0 ? balance(s, err) : KVT_OK;
    if (!st0) st0 = admit_waiting(s, err);
    if (st0) return st0;
    const int64_t n_runs = build_runs(s, err);
    if (n_runs < 0) return err->status;
    if (n_runs == 0) {
        if (s->plan_live) kvt_context_set_plan(s->ctx, NULL, 0); // nothing runs: no stale plan
        s->plan_live = false;
        return KVT_OK;
    }
    if (s->p.plan_iters > 0 && is_paged(s->ctx)) publish_plan(s, n_runs);
    kvt_status st = kvt_decode_runs(s->ctx, s->runs, n_runs, err);
    if (st == KVT_ERR_BUDGET && s->pc) { // the store is full: cached prefixes give way first
        s->st.prefix_trimmed += kvt_prefix_cache_trim(s->pc, 0);
        if (!kvt_context_pass_repeatable(s->ctx)) return pass_abandon(s, n_runs, err) ? st : KVT_OK;
        st = kvt_decode_runs(s->ctx, s->runs, n_runs, err);
    }
    if (st) { // the requests of this pass fail; the others go on
        for (int64_t i = 0; i < n_runs; i++) {
            req *r = s->run_req[i];
            bool still = false;
            for (req *q = s->head; q; q = q->next) still = still || q == r;
            if (still) req_end(s, r, KVT_SCHED_FAILED, err);
        }
        return st;
    }
    s->st.iterations++;
    const float *logits = kvt_context_logits(s->ctx);
    int64_t k = 0; // logits row
    for (int64_t i = 0; i < n_runs; i++) {
        req *r = s->run_req[i];
        *rows += s->runs[i].n;
        if (!r) continue; // its request failed earlier in this pass (its logits row was counted there)
        if (s->run_choice[i] >= 0) {
            s->st.decode_rows++;
            kvt_err e2;
            if (choice_sample(s, r, s->run_choice[i], logits + k++ * s->n_vocab, &e2)) {
                for (int64_t j = i + 1; j < n_runs; j++) { // its other choices' rows are skipped (r is gone)
                    if (s->run_req[j] == r) {
                        s->run_req[j] = NULL;
                        k += s->run_choice[j] >= 0 || s->runs[j].logits;
                    }
                }
                req_end(s, r, KVT_SCHED_FAILED, &e2);
                continue;
            }
        } else {
            s->st.prefill_rows += s->runs[i].n;
            r->n_prefilled += s->runs[i].n;
            if (!s->runs[i].logits && s->pc) {
                // the blocks this chunk filled join the prefix cache (and go to its store) now, not at the prompt's
                // end: a request arriving meanwhile with the same prefix shares them
                kvt_err e2;
                if (kvt_prefix_cache_insert(s->pc, r->ch[0].seq, r->prompt, r->n_prefilled, &e2)) {
                    req_end(s, r, KVT_SCHED_FAILED, &e2);
                    continue;
                }
            }
            if (s->runs[i].logits) {
                kvt_err e2;
                if (prompt_done(s, r, logits + k++ * s->n_vocab, &e2)) {
                    req_end(s, r, KVT_SCHED_FAILED, &e2);
                    continue;
                }
            }
        }
        if (r->state == R_DECODE && r->n_live == 0) req_end(s, r, KVT_SCHED_DONE, NULL);
    }
    return KVT_OK;
}
