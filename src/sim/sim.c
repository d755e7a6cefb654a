// sim.c - the serving engine over a tiered KV store on a virtual clock (see sim.h).
#include "sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../base/timer.h"
#include "../kv/kv_policy.h"
#include "../kv/kv_prefetch.h"
#include "../kv/kv_victim.h"
#include "sim_core.h"

// ---------------------------------------------------------------- workloads

static const char *const k_wl_names[KVT_WL_COUNT] = {"uniform", "chat", "code", "summarization", "mixed", "fixed"};

kvt_sim_workload kvt_sim_workload_find(const char *name) {
    for (int i = 0; name && i < KVT_WL_COUNT; i++) {
        if (!strcasecmp(name, k_wl_names[i])) return (kvt_sim_workload)i;
    }
    return KVT_WL_COUNT;
}

const char *kvt_sim_workload_name(kvt_sim_workload w) { return w < KVT_WL_COUNT ? k_wl_names[w] : "?"; }
const char *kvt_sim_workload_names(void) { return "uniform|chat|code|summarization|mixed|fixed"; }
const char *kvt_sim_policy_names(void) { return "lru|lfu|attn-ema|static|lookahead|oracle"; }

typedef struct {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) { // splitmix64
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; } // [0, 1)
static int64_t rng_range(rng *r, int64_t lo, int64_t hi) { return lo + (int64_t)(rng_unit(r) * (double)(hi - lo + 1)); }

// Prompt and output lengths of one request (tokens). Prompt ranges: chat 128-512 (70% under 256), code
// 512-2048, summarization 2048-6000 (tierkv.txt §4.1; its 8192 summarization ceiling is past Llama-2's
// 4096 context, the issue's 6000 is kept); output lengths are ours (the paper gives none). fixed: c's.
static void sample_lengths(const kvt_sim_config *c, rng *r, int64_t *prompt, int64_t *out) {
    kvt_sim_workload w = c->workload;
    if (w == KVT_WL_FIXED) {
        *prompt = c->fixed_prompt > 0 ? c->fixed_prompt : 512;
        *out = c->fixed_out > 0 ? c->fixed_out : 128;
        return;
    }
    if (w == KVT_WL_MIXED) {
        double u = rng_unit(r);
        w = u < 0.4 ? KVT_WL_CHAT : u < 0.7 ? KVT_WL_CODE : KVT_WL_SUMMARIZATION;
    }
    switch (w) {
    case KVT_WL_CHAT:
        *prompt = rng_unit(r) < 0.7 ? rng_range(r, 128, 255) : rng_range(r, 256, 512);
        *out = rng_range(r, 64, 256);
        break;
    case KVT_WL_CODE:
        *prompt = rng_range(r, 512, 2048);
        *out = rng_range(r, 128, 512);
        break;
    case KVT_WL_SUMMARIZATION:
        *prompt = rng_range(r, 2048, 6000);
        *out = rng_range(r, 128, 256);
        break;
    default:
        *prompt = 512;
        *out = 128;
        break;
    }
}

static int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Expected output tokens and expected blocks at a request's end, over 4096 draws of a fixed stream.
static void workload_means(const kvt_sim_config *c, double *mean_out, double *mean_blocks) {
    rng r = {0x5eedull};
    double so = 0, sb = 0;
    for (int i = 0; i < 4096; i++) {
        int64_t p, o;
        sample_lengths(c, &r, &p, &o);
        so += (double)o;
        sb += (double)div_up(p + o, c->block_tokens);
    }
    *mean_out = so / 4096;
    *mean_blocks = sb / 4096;
}

// Blocks per token block: the layers a request block is split into (kvt_sim_config.layers; 1 if unset).
static int64_t n_layers(const kvt_sim_config *c) { return c->layers > 1 ? c->layers : 1; }

double kvt_sim_footprint_blocks(const kvt_sim_config *c) {
    double mo, mb;
    workload_means(c, &mo, &mb);
    return (double)c->max_batch * mb * (double)n_layers(c);
}

int64_t kvt_sim_block_bytes(const kvt_hparams *hp, int64_t block_tokens) {
    const int64_t dv = hp->head_dim_v > 0 ? hp->head_dim_v : hp->head_dim;
    return (int64_t)hp->n_layer * hp->n_head_kv * (hp->head_dim + dv) * 2 * block_tokens;
}

// ---------------------------------------------------------------- configuration

void kvt_sim_config_default(kvt_sim_config *c) {
    *c = (kvt_sim_config){0};
    c->block_tokens = 16;
    c->block_bytes = 2LL * 32 * 32 * 128 * 2 * 16; // Llama-2-7B, F16: 8 MiB
    c->h2d_gbps = c->d2h_gbps = 64;
    c->h2d_latency_us = c->d2h_latency_us = 1;
    c->ssd_read_gbps = c->ssd_write_gbps = 7;
    c->ssd_latency_us = 10;
    c->rho = 1;
    c->iter_ms = 4.0;
    c->workload = KVT_WL_UNIFORM;
    c->n_requests = 256;
    c->load = 0.8;
    c->max_batch = 32;
    c->seed = 1;
    c->policy = "lru";
    c->prefetch_depth = 4;
    c->victim_window = 64;
    c->attn_alpha = 0.5;
}

kvt_status kvt_sim_config_from_profile(kvt_sim_config *c, const kvt_profile *p, const char *json_text, kvt_err *err) {
    if (p->h2d_gbps > 0) c->h2d_gbps = p->h2d_gbps;
    if (p->d2h_gbps > 0) c->d2h_gbps = p->d2h_gbps;
    c->h2d_latency_us = p->h2d_latency_us;
    c->d2h_latency_us = p->d2h_latency_us;
    if (!p->has_gpu) { // a CPU machine: the fast tier is RAM, the host tier is absent, the disk is the link
        c->h2d_gbps = c->d2h_gbps = p->cpu_read_gbps;
        c->h2d_latency_us = c->d2h_latency_us = 0;
    }
    if (p->disk_read_gbps > 0) c->ssd_read_gbps = p->disk_read_gbps;
    if (p->disk_write_gbps > 0) c->ssd_write_gbps = p->disk_write_gbps;
    c->ssd_latency_us = p->disk_read_latency_us;
    if (p->ram_bytes > 0 && c->block_bytes > 0)
        c->host_blocks = (p->ram_bytes - p->ram_reserved_bytes) / c->block_bytes;
    c->device = p->has_gpu ? kvt_device_gpu(p) : kvt_device_cpu(p);
    c->iter_ms = c->iter_ms_per_seq = c->iter_us_per_ctx = 0;
    c->prefill_ms_per_tok = 0;
    c->copy_on_compute = !p->has_gpu;
    if (json_text) {
        kvt_jv root;
        kvt_status st = kvt_jv_parse(json_text, &root, err);
        if (st) return st;
        c->iter_ms = kvt_jv_num(&root, "sim_iter_ms", 0);
        c->iter_ms_per_seq = kvt_jv_num(&root, "sim_iter_ms_per_seq", 0);
        c->iter_us_per_ctx = kvt_jv_num(&root, "sim_iter_us_per_ctx", 0);
        c->prefill_ms_per_tok = kvt_jv_num(&root, "sim_prefill_ms_per_tok", 0);
        if (!p->has_gpu) {
            // sim_copy_lanes: compute threads that copy at once (the store without copy threads on memory copies: its
            // readers, each between its own blocks, and the pool's waiting threads; kv_paged.h io_mem_threads), so the
            // iteration is delayed by the copies' summed time / lanes; 1 (the default): a copy thread that takes a
            // compute thread's core stalls the whole pool at its next barrier, the copies' full time
            double lanes = kvt_jv_num(&root, "sim_copy_lanes", 1);
            if (lanes < 1) lanes = 1;
            const double g = kvt_jv_num(&root, "sim_copy_gbps", 0);
            if (g > 0) c->h2d_gbps = c->d2h_gbps = g * lanes;
            c->h2d_latency_us = c->d2h_latency_us = kvt_jv_num(&root, "sim_copy_block_us", 0) / lanes;
        }
        kvt_jv_free(&root);
    }
    return KVT_OK;
}

// ---------------------------------------------------------------- state

enum { W_FAST = 1, W_HOST = 2, W_SSD = 4 };
enum { L_H2D, L_D2H, L_SSD_R, L_SSD_W, N_LINK };
enum { EV_ARRIVE, EV_XSTART, EV_XDONE };
enum { PF_NONE, PF_SCHED, PF_ATTN, PF_COPY };

typedef struct {
    int64_t req;
    int32_t idx;               // token block of the request
    int32_t layer;             // its layer (0 unless kvt_sim_config.layers > 1)
    int32_t pos[2];            // index in the fast / host lists (tier_list), -1 if absent
    uint8_t where, fly, dirty, live, pf, queued; // queued: in the copy engine's queue (PF_COPY)
    uint8_t qplan;             // queued by the plan (plan_iters): its load displaces only later plan ranks
    uint8_t qattn;             // queued by attn-ema's prefetch (PF_COPY): loaded only if the policy ranks a
                               // resident block below it
    uint64_t last_use, uses;
    double ema;
} blk;

typedef struct {
    int64_t first_blk, max_blocks;
    double t_first, t_last;
    int64_t scan_start, scan_nb, next_start; // position in this iteration's scan (-1: not in it), blocks then
    int64_t chunk_from;  // prefilled tokens before this iteration's prompt chunk
    bool finishing, admitted_now, in_batch; // admitted_now: computes a prompt chunk in this iteration
    bool completes;      // this iteration's prompt chunk ends the prompt (the first token)
    int64_t prank;       // plan rank (kvt_plan_ranks; INT64_MAX: not planned, or no plan): its blocks' rank
} req;

typedef struct {
    int64_t *v;
    int64_t n, cap;
} ilist;

typedef struct {
    const kvt_sim_config *c;
    int64_t nl;         // blocks per token block (n_layers)
    int64_t nb_ctx;     // the most token blocks a request holds (the store's blocks per shard: store_next_use)
    int64_t cursor;     // the store's decode frontier (kv_paged.c reader_at): key of the block read or waited for
    int64_t seg, next_seg; // blocks of one layer in this iteration's scan / in the next one's (the oracle's view)
    const kvt_evict_policy *pol;
    int pf_mode;
    bool oracle;
    bool attn_pf;       // PF_COPY under attn-ema: the store's attention prefetch (attn_queue)
    int64_t attn_pend;  // attn_pf: the block read last, for attn_queue (copy_prefetch, eng_step; -1: none)
    kvt_err *err;
    kvt_sim_queue q;
    kvt_sim_link link[N_LINK];
    kvt_sim_req *pub; // what the scheduler sees [n_requests]
    req *r;           // the rest [n_requests]
    blk *b;           // every request's blocks, max_blocks each, from r[i].first_blk
    ilist fast, host, running, waiting, batch, scan, attn, done_tpot;
    ilist pfq;          // PF_COPY: the copy engine's queue of blocks to prefetch, from pfq_head on
    int64_t pfq_head;
    kvt_kv_pos *pfwin;  // PF_COPY: kvt_prefetch_window's scratch [copy_prefetch]
    int64_t *btok, *swap_out, *swap_in, *admit; // the scheduler's answer besides batch: [max_batch], [n_requests] x 3
    int64_t cur_fast, cur_host; // window cursors
    int64_t C, n_fly_fast, n_pf;
    uint64_t tick;
    // engine
    double t_eng, slice, stall_from;
    int64_t pos, pc, wait_blk, n_done;
    bool wait_slot, pf_blocked, idle, tried_pos;
    double iter_s_full, lambda, first_arrival, last_token;
    // fast <-> host copies in their byte phase, the time with at least one (to copy_t), and (copy_on_compute) how
    // much of it the engine has been charged
    int64_t n_copy;
    double copy_busy, copy_t, busy_mark;
    int64_t tokens;
    kvt_sim_result *res;
    kvt_victim_trace tr;   // with on_pick: kvt_victim_pick's trace, victim_window + 1 candidates
    int32_t *plan, *plan_order; // plan_iters: the plan [(max_batch + n_requests) x plan_iters], by rank [n_requests]
    int64_t *plan_seen, *plan_rank; // plan_iters: kvt_plan_ranks' scratch and ranks [n_requests]
    kvt_plan_room plan_room;        // plan_iters: the fast tier's room for the plan's loads (plan_visit)
} sim;

static kvt_status il_push(sim *s, ilist *l, int64_t x) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 64;
        int64_t *nv = realloc(l->v, (size_t)cap * sizeof *nv);
        if (!nv) return kvt_errorf(s->err, KVT_ERR_NOMEM, "sim: out of memory (%lld list entries)", (long long)cap);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return KVT_OK;
}

// Tier lists (t 0: fast, 1: host): swap-remove keeps positions in the block.
static ilist *tier_list(sim *s, int t) { return t ? &s->host : &s->fast; }
static kvt_status tier_add(sim *s, int t, int64_t id) {
    s->b[id].pos[t] = (int32_t)tier_list(s, t)->n;
    s->b[id].where |= t ? W_HOST : W_FAST;
    return il_push(s, tier_list(s, t), id);
}
static void tier_del(sim *s, int t, int64_t id) {
    ilist *l = tier_list(s, t);
    const int32_t p = s->b[id].pos[t];
    const int64_t last = l->v[--l->n];
    l->v[p] = last;
    s->b[last].pos[t] = p;
    s->b[id].pos[t] = -1;
    s->b[id].where &= (uint8_t)~(t ? W_HOST : W_FAST);
}
static kvt_status fast_add(sim *s, int64_t id) { return tier_add(s, 0, id); }
static void fast_del(sim *s, int64_t id) { tier_del(s, 0, id); }
static kvt_status host_add(sim *s, int64_t id) { return tier_add(s, 1, id); }
static void host_del(sim *s, int64_t id) { tier_del(s, 1, id); }

// Block k (token block) of layer L of request ri.
static int64_t blk_id(const sim *s, int64_t ri, int64_t k, int64_t L) { return s->r[ri].first_blk + k * s->nl + L; }

// Accesses until the schedule reads block id again (the store's next_use): this iteration's scan, then
// the next iteration's (K = 1). The scan is layer-major: layer L of request R at L x seg + scan_start. lookahead
// assumes the batch continues unchanged; the oracle knows which requests finish and where the others will sit.
static int64_t next_use(const sim *s, const blk *B) {
    const req *R = &s->r[B->req];
    if (R->scan_start < 0) return INT64_MAX;
    const int64_t p = B->layer * s->seg + R->scan_start + B->idx;
    if (B->idx < R->scan_nb && p >= s->pos) return p - s->pos;
    if (s->oracle && R->finishing) return INT64_MAX;
    return s->scan.n - s->pos + B->layer * (s->oracle ? s->next_seg : s->seg) + (s->oracle ? R->next_start : R->scan_start) +
           B->idx;
}

static kvt_evict_info info_of(const sim *s, int64_t id) {
    const blk *B = &s->b[id];
    const int64_t live = s->fast.n + s->n_fly_fast;
    kvt_evict_info e = {B->last_use, B->uses, next_use(s, B), B->req * s->nl + B->layer, B->idx, s->pub[B->req].n_blocks,
                        live > s->C ? (double)(live - s->C) / (double)live : 0.0, B->ema};
    return e;
}

// ---------------------------------------------------------------- victims

// No write is needed to drop block B's copy from its tier (kvt_victim_clean: fast: an up-to-date copy below, on SSD
// with clean_ssd_only, the paged store's rule, else on host or SSD; host: a copy elsewhere).
static bool is_clean(const sim *s, const blk *B, bool host_tier) {
    const bool below = host_tier || !B->dirty; // a dirty fast copy is newer than the copies below it
    return kvt_victim_clean(!host_tier, (B->where & W_FAST) != 0, below && (B->where & W_HOST), below && (B->where & W_SSD),
                            !s->c->clean_ssd_only, false);
}

// The paged store's schedule key of block B (kvt_sched_key: its layer's shard, its index; not its request).
static int64_t store_key(const sim *s, const blk *B) { return kvt_sched_key(B->layer, B->idx, s->nb_ctx); }

// PF_COPY: block B's next use as the paged store sees it (kvt_sched_distance over (layer, index) keys, whatever
// the request), from the store's decode frontier (cursor: the key of the block the scan reads or waits for).
static int64_t store_next_use(const sim *s, const blk *B) {
    return kvt_sched_distance(store_key(s, B), s->cursor, s->nl * s->nb_ctx);
}

// kvt_victim_pick's view of the simulator: the window l->v[start ..] (n listed, wrapping) of m blocks, then the
// incoming block (if any) as candidate m; each block's description and its policy inputs.
typedef struct {
    sim *s;
    const ilist *l;
    int64_t start, n, m, incoming, limit;
    bool host_tier, ranks;
} victim_ud;

static int64_t window_id(const victim_ud *u, int64_t k) {
    const int64_t j = u->start + k;
    return u->l->v[j < u->n ? j : j - u->n];
}

KVT_VICTIM_INLINE void victim_cand(void *ud, int64_t k, kvt_victim_cand *out) {
    const victim_ud *u = ud;
    const sim *s = u->s;
    if (k == u->m) { // the incoming block
        *out = (kvt_victim_cand){.id = u->incoming, .rank = s->r[s->b[u->incoming].req].prank, .flags = KVT_VICTIM_INCOMING};
        return;
    }
    const int64_t id = window_id(u, k);
    const blk *B = &s->b[id];
    *out = (kvt_victim_cand){.id = id,
                             .rank = u->ranks ? s->r[B->req].prank : INT64_MAX,
                             .sched_next = u->limit >= 0 && !B->fly ? store_next_use(s, B) : 0,
                             .flags = B->fly ? KVT_VICTIM_HELD : is_clean(s, B, u->host_tier) ? KVT_VICTIM_CLEAN : 0u};
}

KVT_VICTIM_INLINE void victim_info(void *ud, int64_t id, kvt_evict_info *out) { *out = info_of(((const victim_ud *)ud)->s, id); }

// The victim among a window of list l (cursor *cur): kvt_victim_pick (kv_victim.h, the paged store's rule: blocks
// in flight never go; clean blocks first where the policy asks, clean_first, and always in the host tier; then
// kvt_evict_pick's rule), the window moving on at every call (kvt_victim_window). With `incoming` (>= 0) the block
// a prefetch would bring is a candidate too and -2 is returned if it is the one picked; with limit >= 0 (a
// copy-engine prefetch, PF_COPY) only blocks the store's schedule needs later than `limit` steps
// (kvt_evict_may_displace, xrank the incoming block's plan rank). A block's plan rank is its request's (INT64_MAX
// for all without plan_iters). -1 if no block qualifies.
static int64_t pick(sim *s, const ilist *l, int64_t *cur, bool host_tier, int64_t incoming, int64_t limit, int64_t xrank) {
    victim_ud u = {.s = s, .l = l, .n = l->n, .incoming = incoming, .limit = limit, .host_tier = host_tier,
                   .ranks = s->c->plan_iters > 0}; // without a plan every rank is INT64_MAX (req is not read)
    u.m = kvt_victim_window(u.n, s->c->victim_window, cur, &u.start);
    const kvt_victim_query q = {.pol = s->pol, .fast_tier = !host_tier, .limit = limit, .xrank = xrank, .now = s->tick};
    const int64_t k = kvt_victim_pick(&q, u.m + (incoming >= 0), victim_cand, victim_info, &u, s->c->on_pick ? &s->tr : NULL);
    if (s->c->on_pick && k >= 0 && k != u.m) s->c->on_pick(s->c->on_pick_ud, s->tr.info, s->tr.n, s->tick, s->tr.chosen);
    return k < 0 ? -1 : k == u.m ? -2 : window_id(&u, k);
}

// ---------------------------------------------------------------- transfers

// Link li is between the fast and the host tier (a copy on the compute cores with copy_on_compute).
static bool is_copy(int li) { return li == L_H2D || li == L_D2H; }

// Bytes a transfer on link li occupies its link with: the block, plus on a compute-core copy its per-block CPU
// time (the link's latency, spent as bytes at the rate of the one copy link, h2d).
static double xfer_bytes(const sim *s, int li) {
    const double lat = li == L_H2D ? s->c->h2d_latency_us : li == L_D2H ? s->c->d2h_latency_us : 0;
    return (double)s->c->block_bytes + (s->c->copy_on_compute && is_copy(li) ? lat * 1e-6 * s->link[L_H2D].bw : 0);
}

// Accounts the time with a fast <-> host copy in its byte phase up to t.
static void copy_acc(sim *s, double t) {
    if (s->n_copy > 0) s->copy_busy += t - s->copy_t;
    s->copy_t = t;
}

// Link li starts a transfer's byte phase at t.
static kvt_status link_begin(sim *s, int li, double t, int64_t id) {
    if (is_copy(li)) {
        copy_acc(s, t);
        s->n_copy++;
    }
    return kvt_sim_link_start(&s->link[li], t, id, xfer_bytes(s, li), s->err);
}

// The engine starts computing at t after waiting (a stall, idle): copies until now cost it nothing more.
static void eng_resume(sim *s, double t) {
    copy_acc(s, t);
    s->busy_mark = s->copy_busy;
}

static kvt_status link_sched(sim *s, int li) {
    kvt_sim_link *L = &s->link[li];
    if (L->n_act == 0) return KVT_OK;
    return kvt_sim_queue_push(&s->q, kvt_sim_link_next_time(L), EV_XDONE, li, (int64_t)L->version, 0, s->err);
}

// Starts a transfer of block id on link li at t. With copy_on_compute both directions of the fast <-> host copy
// share one link (the same cores and memory do both): a write-back runs on the h2d link, its id encoded -2 - id.
static kvt_status issue(sim *s, double t, int li, int64_t id) {
    if (s->c->copy_on_compute && li == L_D2H) {
        const double bytes = xfer_bytes(s, L_D2H);
        copy_acc(s, t);
        s->n_copy++;
        kvt_status st = kvt_sim_link_start(&s->link[L_H2D], t, -2 - id, bytes, s->err);
        return st ? st : link_sched(s, L_H2D);
    }
    kvt_sim_link *L = &s->link[li];
    if (L->latency > 0) return kvt_sim_queue_push(&s->q, t + L->latency, EV_XSTART, li, id, 0, s->err);
    kvt_status st = link_begin(s, li, t, id);
    return st ? st : link_sched(s, li);
}

// Room for one more block in the host tier: the victim's copy goes to SSD unless it has another.
static kvt_status host_room(sim *s, double t) {
    while (s->c->host_blocks > 0 && s->host.n >= s->c->host_blocks) {
        int64_t v = pick(s, &s->host, &s->cur_host, true, -1, -1, INT64_MAX);
        if (v < 0) return kvt_errorf(s->err, KVT_ERR_BUDGET, "sim: host tier full of blocks in flight");
        host_del(s, v);
        if (!(s->b[v].where & (W_FAST | W_SSD))) { // its only copy: to SSD (a fast copy writes back when evicted)
            s->b[v].where |= W_SSD;
            kvt_status st = issue(s, t, L_SSD_W, v);
            if (st) return st;
        }
    }
    return KVT_OK;
}

static kvt_status evict_fast(sim *s, int64_t v, double t) {
    blk *B = &s->b[v];
    fast_del(s, v);
    if (B->dirty || !(B->where & (W_HOST | W_SSD))) { // write back
        B->dirty = 0;
        if (!(B->where & W_HOST)) {
            kvt_status st = host_room(s, t);
            if (!st) st = host_add(s, v);
            if (st) return st;
        }
        return issue(s, t, L_D2H, v);
    }
    return KVT_OK;
}

// Makes room for one block in the fast tier; *ok false if every resident block is in flight.
static kvt_status fast_room(sim *s, double t, bool *ok) {
    *ok = true;
    while (s->fast.n + s->n_fly_fast >= s->C) {
        int64_t v = pick(s, &s->fast, &s->cur_fast, false, -1, -1, INT64_MAX);
        if (v < 0) {
            *ok = false;
            return KVT_OK;
        }
        kvt_status st = evict_fast(s, v, t);
        if (st) return st;
    }
    return KVT_OK;
}

// Starts bringing block id into the fast tier (a slot must be free): one hop from host, two from SSD.
static kvt_status fetch(sim *s, int64_t id, double t) {
    blk *B = &s->b[id];
    B->fly = 1;
    s->n_fly_fast++;
    if (B->where & W_HOST) return issue(s, t, L_H2D, id);
    kvt_status st = host_room(s, t);
    return st ? st : issue(s, t, L_SSD_R, id);
}

// ---------------------------------------------------------------- prefetch

// The next block the policy would bring in, or -1: lookahead and oracle walk the schedule (this scan,
// then the next one), attn-ema its list of blocks predicted important.
static int64_t pf_next(sim *s) {
    if (s->pf_mode == PF_SCHED) {
        if (s->pc < s->pos) s->pc = s->pos;
        for (; s->pc < 2 * s->scan.n; s->pc++) {
            int64_t id = s->scan.v[s->pc % s->scan.n];
            const blk *B = &s->b[id];
            if (s->pc >= s->scan.n && s->oracle && s->r[B->req].finishing) continue;
            if (B->live && !B->fly && !(B->where & W_FAST)) return id;
        }
    } else if (s->pf_mode == PF_ATTN) {
        for (; s->pc < s->attn.n; s->pc++) {
            int64_t id = s->attn.v[s->pc];
            const blk *B = &s->b[id];
            if (B->live && !B->fly && !(B->where & W_FAST)) return id;
        }
    }
    return -1;
}

// Live blocks of request ud in every layer (the store's shards): kvt_prefetch_window's span.
static void req_span(const void *ud, int32_t shard, int64_t *first, int64_t *end) {
    (void)shard;
    *first = 0;
    *end = ((const kvt_sim_req *)ud)->n_blocks;
}

// PF_COPY, after a read of block id: the store's copy engine queues the next copy_prefetch blocks of the
// request's schedule (kvt_prefetch_window, as kv_paged.c schedule_prefetch) that are not in the fast tier, in
// flight or queued.
static kvt_status copy_queue(sim *s, int64_t id) {
    const blk *R = &s->b[id];
    const int32_t n = kvt_prefetch_window((int32_t)s->nl, req_span, &s->pub[R->req], R->layer, R->idx,
                                          (int32_t)s->c->copy_prefetch, s->pfwin);
    for (int32_t k = 0; k < n; k++) {
        const int64_t x = blk_id(s, R->req, s->pfwin[k].block, s->pfwin[k].shard);
        blk *B = &s->b[x];
        if ((B->where & W_FAST) || B->fly || B->queued) continue;
        B->queued = 1;
        kvt_status st = il_push(s, &s->pfq, x);
        if (st) return st;
    }
    return KVT_OK;
}

// PF_COPY under attn-ema, after a decoding request's read of the last block of a layer (id), once the copy engine
// has taken the reads' schedule prefetches (copy_prefetch), or at the engine's next step if that comes first (the
// paged store hears the layer's attention mass when its attention ends, kvt_kv_paged_attn_mass, and then queues,
// kvt_kv_paged_attn_prefetch, behind those prefetches): the layer's blocks that kvt_attn_prefetch_wanted and are not in the
// fast tier, in flight or queued join the copy engine's queue (qattn: loaded only if the policy ranks a resident
// block below them).
static kvt_status attn_queue(sim *s, int64_t id) {
    const blk *R = &s->b[id];
    const int64_t n = s->pub[R->req].n_blocks;
    if (!s->attn_pf || s->r[R->req].admitted_now || R->idx != n - 1) return KVT_OK;
    const double share = 1.0 / (double)(n + 5); // attn_mass's normalisation
    if (s->c->on_trace) s->c->on_trace(s->c->on_trace_ud, KVT_SIM_TRACE_ATTN, R->req, R->layer, n - 1, share);
    for (int64_t k = 0; k < n; k++) {
        const int64_t x = blk_id(s, R->req, k, R->layer);
        blk *B = &s->b[x];
        if ((B->where & W_FAST) || B->fly || B->queued || !kvt_attn_prefetch_wanted(B->ema, share)) continue;
        B->queued = B->qattn = 1;
        kvt_status st = il_push(s, &s->pfq, x);
        if (st) return st;
    }
    return KVT_OK;
}

// PF_COPY: the copy engine (prefetch_depth loads in flight, as its threads) takes the queue in order; a load
// into a full fast tier evicts only a block the schedule needs later than the one it brings (of a later plan rank,
// or of the same and needed later), and is dropped if there is none (kv_paged.c io_main -> load(wait = false,
// limit = next use) -> pick_victim); a planned load (qplan) displaces only later plan ranks (limit INT64_MAX).
static kvt_status copy_prefetch(sim *s, double t) {
again:
    while (s->n_pf < s->c->prefetch_depth && s->pfq_head < s->pfq.n) {
        const int64_t id = s->pfq.v[s->pfq_head++];
        blk *B = &s->b[id];
        const bool planned = B->qplan, attn = B->qattn;
        B->queued = B->qplan = B->qattn = 0;
        if (!B->live || B->fly || (B->where & W_FAST)) continue;
        if (s->fast.n + s->n_fly_fast >= s->C) {
            const int64_t v = attn ? pick(s, &s->fast, &s->cur_fast, false, id, -1, s->r[B->req].prank)
                                   : pick(s, &s->fast, &s->cur_fast, false, -1, planned ? INT64_MAX : store_next_use(s, B),
                                          s->r[B->req].prank);
            if (v < 0) continue; // -2: attn-ema ranks the block below every candidate
            kvt_status st = evict_fast(s, v, t);
            if (st) return st;
        }
        if (s->fast.n + s->n_fly_fast >= s->C) continue;
        B->pf = 1;
        s->n_pf++;
        kvt_status st = fetch(s, id, t);
        if (st) return st;
    }
    if (s->pfq_head == s->pfq.n) s->pfq_head = s->pfq.n = 0;
    if (s->attn_pend >= 0 && s->pfq.n == 0 && s->n_pf == 0) { // the reads' prefetches are done: attn-ema's turn
        const int64_t a = s->attn_pend;
        s->attn_pend = -1;
        kvt_status st = attn_queue(s, a);
        if (st) return st;
        goto again;
    }
    return KVT_OK;
}

static kvt_status prefetch(sim *s, double t) {
    if (s->pf_mode == PF_COPY) return copy_prefetch(s, t);
    s->pf_blocked = false;
    while (s->pf_mode != PF_NONE && s->n_pf < s->c->prefetch_depth) {
        int64_t id = pf_next(s);
        if (id < 0) return KVT_OK;
        if (s->fast.n + s->n_fly_fast >= s->C) {
            int64_t v = pick(s, &s->fast, &s->cur_fast, false, id, -1, INT64_MAX);
            if (v < 0) {
                s->pf_blocked = true;
                return KVT_OK;
            }
            kvt_status st = evict_fast(s, v, t);
            if (st) return st;
        }
        if (s->fast.n + s->n_fly_fast >= s->C) { // still full (a prefill went past the capacity): wait for reads
            s->pf_blocked = true;
            return KVT_OK;
        }
        s->b[id].pf = 1;
        s->n_pf++;
        s->pc++;
        kvt_status st = fetch(s, id, t);
        if (st) return st;
    }
    return KVT_OK;
}

// ---------------------------------------------------------------- engine

// One iteration's compute: batch requests, n_dec of them decoding over ctx_sum KV positions in all.
static double iter_seconds(const kvt_sim_config *c, int64_t batch, int64_t n_dec, double ctx_sum) {
    if (c->iter_ms > 0)
        return (c->iter_ms + c->iter_ms_per_seq * (double)(n_dec > 1 ? n_dec - 1 : 0) + c->iter_us_per_ctx * 1e-3 * ctx_sum) *
               1e-3;
    const double ctx = n_dec ? ctx_sum / (double)n_dec : 0.0;
    return kvt_stage_decode_ms(c->costs, 0, c->costs->n_units, &c->device, batch, (int64_t)ctx) * 1e-3;
}

// Synthetic attention mass of block idx of a request with n blocks (the simulator's stand-in for what the
// streaming attention would export): the first block (attention sink) weighs 4, the last two 3, the others
// a fixed per-block factor in [0.5, 1.5); normalised by about the sum, n + 5.
static double attn_mass(int64_t req_id, int64_t idx, int64_t n) {
    double w;
    if (idx == 0) w = 4;
    else if (idx >= n - 2) w = 3;
    else {
        rng r = {(uint64_t)req_id * 0x100000001B3ull + (uint64_t)idx};
        w = 0.5 + rng_unit(&r);
    }
    return w / (double)(n + 5);
}

static void touch(sim *s, int64_t id) {
    blk *B = &s->b[id];
    const double mass = attn_mass(B->req, B->idx, s->pub[B->req].n_blocks);
    if (s->c->on_trace) s->c->on_trace(s->c->on_trace_ud, KVT_SIM_TRACE_READ, B->req, B->layer, B->idx, mass);
    B->last_use = ++s->tick;
    B->uses++;
    B->ema = s->c->attn_alpha * mass + (1 - s->c->attn_alpha) * B->ema;
}

// Appends a token block to request ri (a block per layer), written in the fast tier (dirty). Past the capacity
// only when every resident block is in flight.
static kvt_status new_block(sim *s, int64_t ri, double t) {
    kvt_sim_req *P = &s->pub[ri];
    if (P->n_blocks >= s->r[ri].max_blocks) return KVT_OK;
    const int64_t k = P->n_blocks;
    kvt_status st = KVT_OK;
    for (int64_t L = 0; L < s->nl && !st; L++) {
        bool ok;
        if ((st = fast_room(s, t, &ok))) break;
        const int64_t id = blk_id(s, ri, k, L);
        s->b[id] = (blk){.req = ri, .idx = (int32_t)k, .layer = (int32_t)L, .pos = {-1, -1}, .live = 1, .dirty = 1,
                         .last_use = s->tick, .uses = 1};
        s->b[id].ema = attn_mass(ri, k, k + 1);
        if (s->c->on_trace) s->c->on_trace(s->c->on_trace_ud, KVT_SIM_TRACE_NEW, ri, (int32_t)L, k, s->b[id].ema);
        st = fast_add(s, id);
    }
    P->n_blocks = k + 1;
    return st;
}

static void free_blocks(sim *s, int64_t ri) {
    if (s->c->on_trace) s->c->on_trace(s->c->on_trace_ud, KVT_SIM_TRACE_FREE, ri, 0, 0, 0);
    for (int64_t k = 0; k < s->pub[ri].n_blocks * s->nl; k++) {
        const int64_t id = s->r[ri].first_blk + k;
        blk *B = &s->b[id];
        if (B->where & W_FAST) fast_del(s, id);
        if (B->where & W_HOST) host_del(s, id);
        B->where = 0;
        B->live = 0; // a block in flight releases its slot when it lands
    }
}

// Preemption by swap: every block of request ri not in flight goes down to SSD (one write on the SSD link where
// the SSD has no copy yet); its fast and host copies are dropped. Blocks in flight land and are evicted as usual.
static kvt_status swap_out(sim *s, int64_t ri, double t) {
    for (int64_t k = 0; k < s->pub[ri].n_blocks * s->nl; k++) {
        const int64_t id = s->r[ri].first_blk + k;
        blk *B = &s->b[id];
        if (B->fly || !B->live) continue;
        if (B->where & W_FAST) fast_del(s, id);
        if (B->where & W_HOST) host_del(s, id);
        B->dirty = 0;
        if (!(B->where & W_SSD)) {
            B->where |= W_SSD;
            kvt_status st = issue(s, t, L_SSD_W, id);
            if (st) return st;
        }
    }
    return KVT_OK;
}

static kvt_status bad_pick(sim *s, const char *what, int64_t id) {
    return kvt_errorf(s->err, KVT_ERR_INVALID_ARG, "sim: the scheduler %s request %lld, which is %s", what, (long long)id,
                      id < 0 || id >= s->c->n_requests ? "out of range"
                      : s->pub[id].state == KVT_SIM_WAITING ? "waiting"
                      : s->pub[id].state == KVT_SIM_RUNNING ? (s->pub[id].swapped ? "swapped out" : "running")
                                                            : "not waiting or running");
}

// Admits request id (waiting): it joins the running list and holds no block yet.
static kvt_status admit_req(sim *s, int64_t id) {
    s->pub[id].state = KVT_SIM_RUNNING;
    s->pub[id].prefilled = 0;
    return il_push(s, &s->running, id);
}

// Request id reads its blocks in this iteration: with one layer they join the scan now (in batch order),
// with layers the scan is built layer by layer once the batch is known (start_iter).
static kvt_status scan_add(sim *s, int64_t id) {
    req *R = &s->r[id];
    R->scan_start = s->seg;
    R->scan_nb = s->pub[id].n_blocks;
    s->seg += R->scan_nb;
    kvt_status st = KVT_OK;
    for (int64_t k = 0; s->nl == 1 && k < R->scan_nb && !st; k++) st = il_push(s, &s->scan, R->first_blk + k);
    return st;
}

// plan_iters: the paged store's view of a request as kvt_plan_prefetch walks it (one sequence per request, the
// layers its shards).
static void plan_span(void *ud, int32_t req_id, int32_t shard, int64_t *first, int64_t *end) {
    (void)shard;
    *first = 0;
    *end = ((const sim *)ud)->pub[req_id].n_blocks;
}

// A planned block below the fast tier joins the copy engine's queue if its load can find room in the fast tier
// (kvt_plan_room_take), or if it is only on SSD (the store then stages it to the host tier) (kv_paged.c plan_visit).
static void plan_visit(void *ud, int32_t req_id, int32_t shard, int64_t block) {
    sim *s = ud;
    const int64_t x = blk_id(s, req_id, block, shard);
    blk *B = &s->b[x];
    if ((B->where & W_FAST) || B->fly || B->queued) return;
    if (!kvt_plan_room_take(&s->plan_room, s->r[B->req].prank) && ((B->where & W_HOST) || s->c->host_blocks <= 0)) return;
    if (il_push(s, &s->pfq, x)) return; // out of memory: a prefetch is a hint (the store's queue_push drops it too)
    B->queued = B->qplan = 1;
}

// The plan before an iteration of nb requests (batch.v), as the serving scheduler publishes it and the paged store
// applies it (scheduler.c publish_plan -> kvt_kv_paged_set_plan): every request's plan rank, and with the store's
// copy engine (PF_COPY) the planned blocks below the fast tier queued, then taken as its threads would.
static kvt_status publish_plan(sim *s, int64_t nb, double t) {
    const kvt_sim_config *c = s->c;
    int64_t n = 0, n_sw = 0;
    for (int64_t i = 0; i < nb; i++) s->plan[n++] = (int32_t)s->batch.v[i];
    for (int64_t i = 0; i < s->running.n; i++) {
        const int64_t id = s->running.v[i];
        if (s->pub[id].state == KVT_SIM_RUNNING && s->pub[id].swapped) {
            s->plan[n++] = (int32_t)id;
            n_sw++;
        }
    }
    n = kvt_sched_policy_plan(s->plan, nb, n_sw, c->plan_iters);
    if (c->on_plan) c->on_plan(c->on_trace_ud, s->plan, n);
    const int64_t nu = kvt_plan_ranks(s->plan, n, (int32_t)c->n_requests, NULL, NULL, s->plan_seen, s->plan_rank, s->plan_order);
    for (int64_t q = 0; q < c->n_requests; q++) s->r[q].prank = s->plan_rank[q];
    if (s->pf_mode != PF_COPY || nu == 0) return KVT_OK;
    const int64_t cap = c->host_blocks > 0 && s->C < INT64_MAX - c->host_blocks ? s->C + c->host_blocks : INT64_MAX;
    int64_t *cnt = calloc((size_t)n + 1, sizeof *cnt); // fast-tier residents by plan rank (kvt_plan_room)
    if (!cnt) return kvt_errorf(s->err, KVT_ERR_NOMEM, "sim: out of memory");
    for (int64_t i = 0; i < s->fast.n; i++) {
        const blk *B = &s->b[s->fast.v[i]];
        const int64_t r = s->r[B->req].prank;
        if (!B->fly) cnt[r < n ? r : n]++;
    }
    const int64_t used = s->fast.n + s->n_fly_fast;
    kvt_plan_room_init(&s->plan_room, cnt, n, s->C == INT64_MAX ? INT64_MAX : (used < s->C ? s->C - used : 0));
    kvt_plan_prefetch(s->plan_order, nu, s->plan_rank, (int32_t)s->nl, cap, plan_span, plan_visit, s);
    free(cnt);
    return copy_prefetch(s, t);
}

static kvt_status start_iter(sim *s, double t) {
    const kvt_sim_config *c = s->c;
    kvt_sim_sched_view v = {.reqs = s->pub, .n_reqs = c->n_requests, .running = s->running.v, .n_running = s->running.n,
                            .waiting = s->waiting.v, .n_waiting = s->waiting.n, .max_batch = c->max_batch,
                            .block_tokens = c->block_tokens, .fast_blocks = s->C / s->nl,
                            .host_blocks = c->host_blocks / s->nl, .now = t};
    kvt_sim_batch sb = {.ids = s->batch.v, .tokens = s->btok, .swap_out = s->swap_out, .swap_in = s->swap_in, .admit = s->admit};
    int64_t nb = (c->sched ? c->sched : kvt_sim_sched_fcfs)(&v, &sb, c->sched_ud);
    if (nb < 0) return kvt_errorf(s->err, KVT_ERR_NOMEM, "sim: the scheduler failed (out of memory)");
    if (nb > c->max_batch)
        return kvt_errorf(s->err, KVT_ERR_INVALID_ARG, "sim: the scheduler returned a batch of %lld (max %lld)",
                          (long long)nb, (long long)c->max_batch);
    if (sb.n_swap_out < 0 || sb.n_swap_out > s->running.n || sb.n_swap_in < 0 || sb.n_swap_in > s->running.n ||
        sb.n_admit < 0 || sb.n_admit > s->waiting.n)
        return kvt_errorf(s->err, KVT_ERR_INVALID_ARG, "sim: the scheduler swapped out %lld, in %lld and admitted %lld of "
                          "%lld running and %lld waiting requests", (long long)sb.n_swap_out, (long long)sb.n_swap_in,
                          (long long)sb.n_admit, (long long)s->running.n, (long long)s->waiting.n);
    s->batch.n = nb;
    kvt_status st = KVT_OK;
    for (int64_t i = 0; i < sb.n_swap_out && !st; i++) {
        const int64_t id = s->swap_out[i];
        if (id < 0 || id >= c->n_requests || s->pub[id].state != KVT_SIM_RUNNING || s->pub[id].swapped)
            return bad_pick(s, "swapped out", id);
        s->pub[id].swapped = true;
        s->res->preemptions++;
        st = swap_out(s, id, t);
    }
    for (int64_t i = 0; i < sb.n_swap_in && !st; i++) {
        const int64_t id = s->swap_in[i];
        if (id < 0 || id >= c->n_requests || s->pub[id].state != KVT_SIM_RUNNING || !s->pub[id].swapped)
            return bad_pick(s, "resumed", id);
        s->pub[id].swapped = false;
        s->res->resumes++;
    }
    for (int64_t i = 0; i < sb.n_admit && !st; i++) {
        const int64_t id = s->admit[i];
        if (id < 0 || id >= c->n_requests || s->pub[id].state != KVT_SIM_WAITING) return bad_pick(s, "admitted", id);
        st = admit_req(s, id);
    }
    if (!st && c->plan_iters > 0) st = publish_plan(s, nb, t);
    if (st) return st;
    for (int64_t i = 0; i < s->running.n; i++) s->r[s->running.v[i]].scan_start = -1;
    s->scan.n = s->attn.n = 0;
    s->seg = 0;
    int64_t prefill_tok = 0, n_dec = 0;
    double ctx_sum = 0;
    for (int64_t i = 0; i < nb && !st; i++) {
        const int64_t id = s->batch.v[i], tok = s->btok[i];
        if (id < 0 || id >= c->n_requests || s->r[id].in_batch ||
            (s->pub[id].state != KVT_SIM_WAITING && s->pub[id].state != KVT_SIM_RUNNING) || s->pub[id].swapped)
            return kvt_errorf(s->err, KVT_ERR_INVALID_ARG, "sim: the scheduler picked request %lld, which is %s",
                              (long long)id, id < 0 || id >= c->n_requests ? "out of range"
                                             : s->r[id].in_batch                 ? "twice in the batch"
                                             : s->pub[id].swapped                ? "swapped out"
                                                                                 : "not waiting or running");
        req *R = &s->r[id];
        kvt_sim_req *P = &s->pub[id];
        const bool prefill = P->state == KVT_SIM_WAITING || P->prefilled < P->prompt;
        if (prefill ? tok < 1 || tok > P->prompt - (P->state == KVT_SIM_WAITING ? 0 : P->prefilled) : tok != 1)
            return kvt_errorf(s->err, KVT_ERR_INVALID_ARG, "sim: the scheduler gave request %lld %lld tokens (%s)",
                              (long long)id, (long long)tok, prefill ? "a prompt chunk past its prompt" : "decoding: 1");
        R->in_batch = true;
        if (prefill) { // admit if waiting; a prompt chunk: its blocks are created, the earlier ones read
            if (P->state == KVT_SIM_WAITING) st = admit_req(s, id);
            R->admitted_now = true;
            R->chunk_from = P->prefilled;
            if (!st && P->prefilled > 0) st = scan_add(s, id);
            P->prefilled += tok;
            R->completes = P->prefilled == P->prompt;
            R->finishing = R->completes && P->out <= 1;
            for (int64_t k = P->n_blocks; !st && k < div_up(P->prefilled, c->block_tokens); k++) st = new_block(s, id, t);
            prefill_tok += tok;
        } else {
            R->finishing = P->generated + 1 >= P->out;
            st = scan_add(s, id);
            ctx_sum += (double)(P->prompt + P->generated);
            n_dec++;
        }
    }
    // with layers, the scan layer by layer over the batch (with one, scan_add built it)
    for (int64_t L = 0; s->nl > 1 && L < s->nl && !st; L++) {
        for (int64_t i = 0; i < nb && !st; i++) {
            const int64_t id = s->batch.v[i];
            for (int64_t k = 0; s->r[id].scan_start >= 0 && k < s->r[id].scan_nb && !st; k++)
                st = il_push(s, &s->scan, blk_id(s, id, k, L));
        }
    }
    if (st) return st;
    // the waiting list without the admitted
    int64_t w = 0;
    for (int64_t i = 0; i < s->waiting.n; i++) {
        if (s->pub[s->waiting.v[i]].state == KVT_SIM_WAITING) s->waiting.v[w++] = s->waiting.v[i];
    }
    s->waiting.n = w;
    // where each request continuing into the next iteration will sit in its scan (the oracle's view)
    int64_t off = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t i = 0; i < nb; i++) {
            req *R = &s->r[s->batch.v[i]];
            if (R->admitted_now != (pass == 1) || R->finishing) continue;
            R->next_start = off;
            off += s->pub[s->batch.v[i]].n_blocks;
        }
    }
    s->next_seg = off;
    if (s->pf_mode == PF_ATTN) { // blocks whose attention EMA predicts them important (weight >= 1.25)
        for (int64_t p = 0; p < s->scan.n && !st; p++) {
            const blk *B = &s->b[s->scan.v[p]];
            if (kvt_attn_prefetch_wanted(B->ema, 1.0 / (double)(s->pub[B->req].n_blocks + 5)))
                st = il_push(s, &s->attn, s->scan.v[p]);
        }
        if (st) return st;
    }
    if (nb == 0) {
        s->idle = true;
        s->t_eng = INFINITY;
        return KVT_OK;
    }
    const double T = iter_seconds(c, nb, n_dec, ctx_sum);
    s->slice = s->scan.n ? T / (double)s->scan.n : 0;
    s->t_eng = t + (double)prefill_tok * c->prefill_ms_per_tok * 1e-3 + (s->scan.n ? 0 : T);
    s->pos = s->pc = 0;
    s->tried_pos = false;
    return prefetch(s, t);
}

static kvt_status end_iter(sim *s, double t) {
    const kvt_sim_config *c = s->c;
    kvt_status st = KVT_OK;
    for (int64_t i = 0; i < s->batch.n && !st; i++) {
        const int64_t id = s->batch.v[i];
        req *R = &s->r[id];
        kvt_sim_req *P = &s->pub[id];
        for (int64_t L = 0; R->admitted_now && R->chunk_from % c->block_tokens && L < s->nl; L++) {
            blk *W = &s->b[blk_id(s, id, R->chunk_from / c->block_tokens, L)]; // the chunk wrote into a block it had
            if (W->where & W_FAST) W->dirty = 1;
        }
        if (R->admitted_now && !R->completes) { // a prompt chunk before the last: no token yet
            R->admitted_now = R->in_batch = false;
            R->scan_start = -1;
            continue;
        }
        P->generated++;
        if (R->admitted_now) R->t_first = t;
        R->t_last = s->last_token = t;
        s->tokens++;
        R->admitted_now = R->in_batch = false;
        R->scan_start = -1;
        if (P->generated >= P->out) {
            P->state = KVT_SIM_DONE;
            free_blocks(s, id);
            s->n_done++;
            if (P->out > 1) st = il_push(s, &s->done_tpot, id);
        } else if (div_up(P->prompt + P->generated, c->block_tokens) > P->n_blocks) {
            st = new_block(s, id, t);
        } else {
            for (int64_t L = 0; L < s->nl; L++) {
                blk *W = &s->b[blk_id(s, id, P->n_blocks - 1, L)];
                if (W->where & W_FAST) W->dirty = 1;
            }
        }
    }
    int64_t w = 0;
    for (int64_t i = 0; i < s->running.n; i++) {
        if (s->pub[s->running.v[i]].state == KVT_SIM_RUNNING) s->running.v[w++] = s->running.v[i];
    }
    s->running.n = w;
    s->res->iterations++;
    return st;
}

static kvt_status eng_step(sim *s) {
    const double t = s->t_eng;
    if (s->c->copy_on_compute) { // the copies since the last step took the cores: the step comes that much later
        copy_acc(s, t);
        const double owed = s->copy_busy - s->busy_mark;
        s->busy_mark = s->copy_busy;
        if (owed > 0) {
            s->t_eng = t + owed;
            return KVT_OK;
        }
    }
    if (s->attn_pend >= 0) { // the copy engine is still busy with the last read's prefetches: queue behind them
        const int64_t a = s->attn_pend;
        s->attn_pend = -1;
        kvt_status st = attn_queue(s, a);
        if (!st) st = copy_prefetch(s, t);
        if (st) return st;
    }
    if (s->pos == s->scan.n) {
        kvt_status st = end_iter(s, t);
        return st ? st : start_iter(s, t);
    }
    const int64_t id = s->scan.v[s->pos];
    blk *B = &s->b[id];
    s->cursor = store_key(s, B); // the reader joins the frontier before it waits for the block (kv_paged.c)
    if (B->where & W_FAST) {
        s->res->reads++;
        if (!s->tried_pos) s->res->hit_rate++; // hits, divided at the end
        touch(s, id);
        s->pos++;
        s->tried_pos = false;
        s->t_eng = t + s->slice;
        if (s->pf_mode == PF_COPY) {
            if (s->attn_pf) s->attn_pend = id;
            kvt_status st = copy_queue(s, id);
            return st ? st : copy_prefetch(s, t);
        }
        return s->pf_blocked ? prefetch(s, t) : KVT_OK;
    }
    s->tried_pos = true;
    s->stall_from = t;
    s->t_eng = INFINITY;
    if (B->fly) {
        s->wait_blk = id;
        return KVT_OK;
    }
    bool ok;
    kvt_status st = fast_room(s, t, &ok);
    if (st) return st;
    if (!ok) {
        s->wait_slot = true;
        return KVT_OK;
    }
    s->wait_blk = id;
    return fetch(s, id, t);
}

// A transfer on link li of block id ended at t.
static kvt_status xfer_done(sim *s, int li, int64_t id, double t) {
    s->res->transfers++;
    s->res->moved_bytes += (double)s->c->block_bytes;
    blk *B = &s->b[id];
    kvt_status st = KVT_OK;
    if (li == L_SSD_R && B->live) { // first hop of two
        st = host_room(s, t);
        if (!st && !(B->where & W_HOST)) st = host_add(s, id);
        return st ? st : issue(s, t, L_H2D, id);
    }
    if (li == L_H2D || li == L_SSD_R) {
        B->fly = 0;
        s->n_fly_fast--;
        if (B->pf) {
            B->pf = 0;
            s->n_pf--;
            if (s->pf_mode == PF_COPY) B->last_use = s->tick; // a load counts as a use for recency (kv_paged.c transfer)
        }
        if (B->live) {
            st = fast_add(s, id);
            B->dirty = 0;
        }
        if (s->wait_blk == id) {
            s->res->stall_s += t - s->stall_from;
            s->t_eng = t;
            s->wait_blk = -1;
            eng_resume(s, t);
        }
    }
    if (st) return st;
    if (s->wait_slot) {
        s->wait_slot = false;
        s->res->stall_s += t - s->stall_from;
        s->t_eng = t;
        eng_resume(s, t);
    }
    return prefetch(s, t);
}

static kvt_status handle(sim *s, const kvt_sim_event *e) {
    kvt_status st = KVT_OK;
    if (e->kind == EV_ARRIVE) {
        s->pub[e->a].state = KVT_SIM_WAITING;
        st = il_push(s, &s->waiting, e->a);
        if (!st && e->a + 1 < s->c->n_requests)
            st = kvt_sim_queue_push(&s->q, s->pub[e->a + 1].arrival, EV_ARRIVE, 0, e->a + 1, 0, s->err);
        // the first of requests arriving together starts the engine once all of them are there
        const bool more_now = e->a + 1 < s->c->n_requests && s->pub[e->a + 1].arrival <= e->t;
        if (!st && s->idle && !more_now) {
            s->idle = false;
            eng_resume(s, e->t);
            st = start_iter(s, e->t);
        }
    } else if (e->kind == EV_XSTART) {
        st = link_begin(s, e->aux, e->t, e->a);
        if (!st) st = link_sched(s, e->aux);
    } else if ((uint32_t)e->a == s->link[e->aux].version) {
        int64_t id = kvt_sim_link_finish(&s->link[e->aux], e->t);
        int li = e->aux;
        if (id <= -2) { // a write-back on the shared copy link (copy_on_compute)
            id = -2 - id;
            li = L_D2H;
        }
        if (id >= 0 && is_copy(li)) {
            copy_acc(s, e->t);
            s->n_copy--;
        }
        st = link_sched(s, e->aux);
        if (!st && id >= 0) st = xfer_done(s, li, id, e->t);
    }
    return st;
}

int64_t kvt_sim_min_fast_blocks(int64_t prefetch_depth) { return prefetch_depth + 2; }

static kvt_status check_config(const kvt_sim_config *c, kvt_err *err) {
    if (c->block_tokens <= 0 || c->block_bytes <= 0)
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sim: block_tokens and block_bytes must be positive");
    if (!(c->h2d_gbps > 0 && c->d2h_gbps > 0 && c->ssd_read_gbps > 0 && c->ssd_write_gbps > 0))
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sim: every link bandwidth must be positive (h2d %g, d2h %g, ssd %g/%g GB/s)",
                          c->h2d_gbps, c->d2h_gbps, c->ssd_read_gbps, c->ssd_write_gbps);
    if (c->fast_blocks <= 0 && !(c->rho > 0)) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sim: rho must be positive");
    if (c->n_requests <= 0 || c->max_batch <= 0 || !(c->load > 0) || c->prefetch_depth <= 0 || c->victim_window <= 0)
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sim: requests, max_batch, load, prefetch_depth and victim_window must be positive");
    if (c->fast_blocks > 0 && c->fast_blocks < kvt_sim_min_fast_blocks(c->prefetch_depth))
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sim: fast_blocks %lld below the minimum %lld (prefetch_depth %lld + 2: the "
                          "blocks a prefetch keeps in flight, the block a read waits for and the one decoding writes)",
                          (long long)c->fast_blocks, (long long)kvt_sim_min_fast_blocks(c->prefetch_depth),
                          (long long)c->prefetch_depth);
    if (c->layers < 0 || c->layers > (1 << 12))
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sim: layers %d out of [0, 4096]", c->layers);
    if (c->plan_iters < 0 || c->plan_iters > (1 << 10) || (c->plan_iters > 0 && c->n_requests > INT32_MAX / 2))
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sim: plan_iters %d out of [0, 1024] (or too many requests for a plan)",
                          c->plan_iters);
    if (c->copy_prefetch < 0 || c->copy_prefetch > (1 << 20))
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sim: copy_prefetch %lld out of [0, 2^20]", (long long)c->copy_prefetch);
    if (!(c->iter_ms > 0) && !c->costs)
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sim: no compute model (iter_ms 0 and no costs)");
    if (c->workload >= KVT_WL_COUNT) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sim: unknown workload");
    if (!c->policy || !kvt_evict_policy_find(c->policy))
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sim: unknown policy '%s' (%s)", c->policy ? c->policy : "(null)",
                          kvt_sim_policy_names());
    return KVT_OK;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void sim_free(sim *s) {
    kvt_sim_queue_free(&s->q);
    for (int i = 0; i < N_LINK; i++) kvt_sim_link_free(&s->link[i]);
    free(s->pub);
    free(s->r);
    free(s->b);
    ilist *ls[] = {&s->fast, &s->host, &s->running, &s->waiting, &s->batch, &s->scan, &s->attn, &s->done_tpot, &s->pfq};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) free(ls[i]->v);
    kvt_victim_trace_free(&s->tr);
    free(s->plan);
    free(s->plan_order);
    free(s->plan_seen);
    free(s->plan_rank);
    free(s->pfwin);
    free(s->btok);
    free(s->swap_out);
    free(s->swap_in);
    free(s->admit);
}

// Requests (arrival times and lengths) of seed c->seed, and the blocks they can hold.
static kvt_status make_requests(sim *s) {
    const kvt_sim_config *c = s->c;
    double mean_out, mean_blocks;
    workload_means(c, &mean_out, &mean_blocks);
    const double F = (double)c->max_batch * mean_blocks * (double)s->nl;
    s->C = c->fast_blocks > 0 ? c->fast_blocks : (int64_t)ceil(F / c->rho);
    if (s->C < kvt_sim_min_fast_blocks(c->prefetch_depth)) s->C = kvt_sim_min_fast_blocks(c->prefetch_depth); // from rho
    const double ctx = mean_blocks * (double)c->block_tokens - mean_out / 2;
    s->lambda = c->load * (double)c->max_batch / (mean_out * iter_seconds(c, c->max_batch, c->max_batch, (double)c->max_batch * ctx));
    s->pub = calloc((size_t)c->n_requests, sizeof *s->pub);
    s->r = calloc((size_t)c->n_requests, sizeof *s->r);
    if (!s->pub || !s->r) return kvt_errorf(s->err, KVT_ERR_NOMEM, "sim: out of memory for %lld requests", (long long)c->n_requests);
    rng g = {c->seed * 0x9E3779B97F4A7C15ull + (uint64_t)c->workload + 1};
    double t = 0;
    int64_t nblk = 0;
    for (int64_t i = 0; i < c->n_requests; i++) {
        if (!c->burst) t += -log(1.0 - rng_unit(&g)) / s->lambda;
        s->pub[i].arrival = t;
        sample_lengths(c, &g, &s->pub[i].prompt, &s->pub[i].out);
        s->r[i].first_blk = nblk;
        s->r[i].max_blocks = div_up(s->pub[i].prompt + s->pub[i].out, c->block_tokens);
        s->r[i].scan_start = -1;
        s->r[i].prank = INT64_MAX;
        nblk += s->r[i].max_blocks * s->nl;
        if (s->r[i].max_blocks > s->nb_ctx) s->nb_ctx = s->r[i].max_blocks;
    }
    s->first_arrival = s->pub[0].arrival;
    s->b = calloc((size_t)nblk, sizeof *s->b);
    const size_t w = (size_t)c->victim_window + 1;
    const bool vs_ok = !c->on_pick || kvt_victim_trace_init(&s->tr, (int64_t)w);
    if (c->plan_iters > 0) {
        s->plan = malloc((size_t)((c->max_batch + c->n_requests) * c->plan_iters) * sizeof *s->plan);
        s->plan_order = malloc((size_t)c->n_requests * sizeof *s->plan_order);
        s->plan_seen = malloc((size_t)c->n_requests * sizeof *s->plan_seen);
        s->plan_rank = malloc((size_t)c->n_requests * sizeof *s->plan_rank);
        if (!s->plan || !s->plan_order || !s->plan_seen || !s->plan_rank)
            return kvt_errorf(s->err, KVT_ERR_NOMEM, "sim: out of memory for the plan of %lld requests", (long long)c->n_requests);
    }
    s->batch.v = malloc((size_t)c->max_batch * sizeof *s->batch.v);
    s->btok = malloc((size_t)c->max_batch * sizeof *s->btok);
    s->swap_out = malloc((size_t)c->n_requests * sizeof *s->swap_out);
    s->swap_in = malloc((size_t)c->n_requests * sizeof *s->swap_in);
    s->admit = malloc((size_t)c->n_requests * sizeof *s->admit);
    if (s->pf_mode == PF_COPY) s->pfwin = malloc((size_t)c->copy_prefetch * sizeof *s->pfwin);
    if (!s->b || !vs_ok || (s->pf_mode == PF_COPY && !s->pfwin) || !s->batch.v || !s->btok || !s->swap_out || !s->swap_in || !s->admit)
        return kvt_errorf(s->err, KVT_ERR_NOMEM, "sim: out of memory for %lld blocks", (long long)nblk);
    s->batch.cap = c->max_batch;
    for (int64_t i = 0; i < nblk; i++) s->b[i].pos[0] = s->b[i].pos[1] = -1;
    return KVT_OK;
}

kvt_status kvt_sim_run(const kvt_sim_config *c, kvt_sim_result *r, kvt_err *err) {
    *r = (kvt_sim_result){0};
    kvt_status st = check_config(c, err);
    if (st) return st;
    const double w0 = kvt_time_ms();
    sim S = {.c = c, .nl = n_layers(c), .err = err, .res = r, .wait_blk = -1, .idle = true, .t_eng = INFINITY};
    sim *s = &S;
    s->pol = kvt_evict_policy_find(c->policy);
    s->oracle = !strcmp(c->policy, "oracle");
    s->pf_mode = s->oracle || !strcmp(c->policy, "lookahead")      ? PF_SCHED
                 : c->copy_prefetch > 0                            ? PF_COPY
                 : !strcmp(c->policy, "attn-ema")                  ? PF_ATTN
                                                                   : PF_NONE;
    s->attn_pf = s->pf_mode == PF_COPY && !strcmp(c->policy, "attn-ema");
    s->attn_pend = -1;
    kvt_sim_queue_init(&s->q);
    // a compute-core copy spends its latency as CPU time in the byte phase (xfer_bytes)
    kvt_sim_link_init(&s->link[L_H2D], "h2d", c->h2d_gbps * 1e9, c->copy_on_compute ? 0 : c->h2d_latency_us * 1e-6);
    kvt_sim_link_init(&s->link[L_D2H], "d2h", c->d2h_gbps * 1e9, c->copy_on_compute ? 0 : c->d2h_latency_us * 1e-6);
    kvt_sim_link_init(&s->link[L_SSD_R], "ssd-read", c->ssd_read_gbps * 1e9, c->ssd_latency_us * 1e-6);
    kvt_sim_link_init(&s->link[L_SSD_W], "ssd-write", c->ssd_write_gbps * 1e9, c->ssd_latency_us * 1e-6);
    st = make_requests(s);
    if (!st) st = kvt_sim_queue_push(&s->q, s->pub[0].arrival, EV_ARRIVE, 0, 0, 0, err);
    const int64_t max_iter = 64 * (c->n_requests + 16) * 4096;
    while (!st && s->n_done < c->n_requests) {
        if (s->t_eng < INFINITY && s->t_eng <= kvt_sim_queue_peek(&s->q)) {
            st = eng_step(s);
        } else {
            kvt_sim_event e;
            if (!kvt_sim_queue_pop(&s->q, &e)) {
                st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "sim: stalled at t = %.6f s with %lld of %lld requests done",
                                s->t_eng, (long long)s->n_done, (long long)c->n_requests);
                break;
            }
            st = handle(s, &e);
        }
        if (!st && r->iterations > max_iter) st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "sim: no end after %lld iterations", (long long)max_iter);
    }
    if (!st) {
        r->n_done = s->done_tpot.n;
        r->tpot_ms = malloc((size_t)(r->n_done ? r->n_done : 1) * sizeof *r->tpot_ms);
        if (!r->tpot_ms) st = kvt_errorf(err, KVT_ERR_NOMEM, "sim: out of memory");
    }
    if (!st) {
        double sum = 0;
        for (int64_t i = 0; i < r->n_done; i++) {
            const int64_t id = s->done_tpot.v[i];
            r->tpot_ms[i] = (s->r[id].t_last - s->r[id].t_first) / (double)(s->pub[id].out - 1) * 1e3;
            sum += r->tpot_ms[i];
        }
        r->tpot_ms_mean = r->n_done ? sum / (double)r->n_done : 0;
        double *sorted = malloc((size_t)(r->n_done ? r->n_done : 1) * sizeof *sorted);
        if (sorted && r->n_done) {
            memcpy(sorted, r->tpot_ms, (size_t)r->n_done * sizeof *sorted);
            qsort(sorted, (size_t)r->n_done, sizeof *sorted, cmp_double);
            r->tpot_ms_p95 = sorted[(int64_t)ceil(0.95 * (double)r->n_done) - 1];
        }
        free(sorted);
        r->hit_rate = r->reads ? r->hit_rate / (double)r->reads : 1.0;
        r->throughput_tok_s = s->last_token > s->first_arrival ? (double)s->tokens / (s->last_token - s->first_arrival) : 0;
        r->fast_blocks = s->C;
        r->copy_s = s->copy_busy;
        r->sim_s = s->last_token;
    }
    r->wall_s = (kvt_time_ms() - w0) * 1e-3;
    sim_free(s);
    if (st) kvt_sim_result_free(r);
    return st;
}

void kvt_sim_result_free(kvt_sim_result *r) {
    free(r->tpot_ms);
    r->tpot_ms = NULL;
}
