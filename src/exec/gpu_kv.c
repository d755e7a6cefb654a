// gpu_kv.c - the device layers' KV cache: VRAM slots within a budget over pinned host slots (gpu_kv.h).
#include "gpu_kv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kv/kv_tier.h"
#include "../kv/kv_victim.h"
#include "gpu_kv_disk.h"

#define CHUNK_BYTES ((int64_t)8 << 20) // slots are cut from allocations of at least this (or the budget)
#define HOST_EVICT_BATCH 8             // blocks leaving pinned host memory per wait for both streams

// A pool of slots of slot_bytes, cut from chunks of per_chunk slots, in VRAM or pinned host memory.
typedef struct {
    bool host;
    void **chunk;      // [n_chunk] allocations (host addresses for host slots)
    void **dchunk;     // [n_chunk] their device addresses (host slots: host_device_ptr; VRAM: = chunk)
    int64_t n_chunk, per_chunk;
    int64_t cap;       // most slots (-1: unlimited)
    int64_t made;      // slots cut so far
    int64_t next, end; // the next slot id to cut and the end of the last chunk's ids (chunk c: ids from
                       // c * per_chunk; a chunk cut short at the budget leaves its other ids unused)
    int64_t *free;     // slots given back
    int64_t n_free, cap_free;
} slab;

typedef struct {
    int32_t layer;        // i * ng + j for head group j of device layer i
    int64_t idx;          // block index in its (sequence, layer)
    int64_t vslot, hslot; // VRAM slot, host slot (-1: none)
    int64_t res;          // position in the resident list (-1: not in VRAM)
    int64_t hres;         // position in the host list (-1: no host slot)
    int64_t dslot;        // disk slot (-1: none)
    uint32_t crc;         // of the disk copy
    bool dvalid;          // the disk copy holds the block's current bytes
    int32_t dlo, dhi;     // rows [dlo, dhi) written in VRAM since the host copy was made (dhi 0: none)
    int64_t wslot;        // the disk thread: a host slot it is leaving, holding its current bytes until written (-1: none)
    bool pending;         // the disk thread: its read, or the load that follows the read, not issued yet (held)
    uint64_t last_use, uses;
    int64_t need_call;    // the micro-batch whose reads include it (its layer's fetch marked it)
    int32_t *hold;        // [n_hold] the sequences whose tables hold it at (layer, idx), n_hold 0: a free id; forks
    int64_t n_hold, cap_hold; // share full blocks (a write into a block with n_hold > 1 copies it first)
} gblk;

typedef struct {
    int64_t n_pos;   // positions held (-1: no such sequence)
    int64_t *blk;    // [nl * mb] block ids (valid below n_blk of the layer; -1 below n_drop)
    int64_t *n_blk;  // [nl]
    int64_t *n_drop; // [nl] blocks [0, n_drop) of a sliding-window layer freed: no later query sees them (window_slide)
} gseq;

typedef struct {      // a sequence of the micro-batch: the positions its rows attend
    int32_t seq;
    int64_t min_len, max_len; // its first row's and last row's positions + 1
} bseq;

typedef struct {
    void *dst;          // as copy_h2d / copy_d2h take them (host slots by their host address)
    const void *src;
    size_t bytes;
    void *ddst;         // the same as device addresses (copy_batch's)
    const void *dsrc;
    int64_t vc, hc;     // the chunks of the VRAM and the pinned slot: copies merge within one chunk pair only (one
                        // DMA must not span two allocations, even where they lie side by side: CUDA refuses it)
} xfer;

// The disk thread (not p.disk_sync): a pinned slot leaving (its block evicted from pinned host ahead of need), written
// to disk on the thread once the events of its generation have passed, then free again.
typedef struct {
    int64_t id, hslot; // its block; the slot
    int64_t gen;       // the generation whose events it waits for
    int64_t ticket;    // its disk write on the thread (-1: not submitted yet; write false: nothing to write)
    bool write;
} leave;
typedef struct {       // a generation of evictions: events on both streams after the slots' last use
    int64_t id, step;  // step: kv->step when recorded
    kvt_cuda_event *ev[2];
    bool promoted;     // its events passed and its writes were submitted
} lgen;
typedef struct {
    int64_t id, ticket;
} dread;

struct kvt_gpu_kv {
    const kvt_cuda_api *api;
    kvt_cuda_ctx *ctx;
    kvt_gpu_kv_params p;
    int32_t *window;     // [nv] each block layer's sliding window
    const kvt_evict_policy *pol;
    int64_t slot_bytes, mb;
    int32_t ng, nv;      // KV head groups per layer (each its own blocks); blocks' layers: nv = nl * ng, v = i * ng + j
    slab vram, host;
    gblk *B;
    int64_t n_B, cap_B, *free_id, n_free_id;
    int64_t *res;        // resident blocks (ids), in no order
    int64_t n_res, victim_pos;
    int64_t *hres;       // blocks with a host slot (ids), in no order (the pinned tier's victims, with a disk tier)
    int64_t n_hres, hvictim_pos;
    bool has_disk;       // T2 below pinned host
    kvt_tier_store disk;
    void *bounce;        // [disk.slot_bytes] 4096-aligned, for disk I/O of slots O_DIRECT cannot take
    bool quiet;          // both streams synchronized and nothing queued since (host slots may be rewritten)
    bool keep_window;    // KVT_GPU_KV_KEEP_WINDOW (tests): a window layer keeps every block (the first version)
    int64_t copy_min;    // copies shorter than this go into copy_batch kernels (0: none)
    // the serving scheduler's plan (kvt_gpu_kv_set_plan): per sequence < seq_cap, the first plan iteration running it
    // (-1: none) and the plan under which it last ran in a micro-batch
    int32_t *plan, *plan_it, *pit; // [n_plan] the plan's sequences and their iterations; [seq_cap]
    int64_t n_plan, cap_plan, plan_id, *ran;
    bseq *gbs;           // [n_plan] the guess of the next micro-batch (kvt_gpu_kv_end)
    int32_t seq_cap;
    gseq *seq;
    void ***tk, ***tv;   // [nv] device tables [seq_cap * mb]
    void ***hk, ***hv;   // [nv] host mirrors
    uint8_t **tdirty;    // [nv][seq_cap]: the mirror row changed since uploaded
    void **stage;        // pinned staging of the table rows uploaded in one micro-batch (read by COMPUTE when it
    int64_t n_stage, cap_stage; // gets there: never reused before the micro-batch's end), n_stage entries used
    // the micro-batch
    int64_t call;
    bseq *bs;
    int32_t n_bs;
    int32_t *rseq;       // [rows] each row's sequence and attended length
    int64_t *rlen, n_rows, cap_rows;
    uint64_t tick;
    kvt_cuda_event *ev_copy[2], *ev_compute;
    xfer *wb, *ld;       // one fetch's write-backs and loads
    int64_t n_wb, n_ld, cap_wb, cap_ld;
    // T2 on the disk thread (gpu_kv.h; none with p.disk_sync)
    kvt_disk_worker *dw;
    int64_t reserve_max; // most pinned slots kept free or leaving ahead of need: the staging, a quarter of the budget,
                         // made past it (host.cap includes it)
    int64_t takes, last_takes; // pinned slots the current fetch took, and the last fetch (the reserve: what one
                               // layer's fetch takes, at least HOST_EVICT_BATCH, at most reserve_max)
    int64_t pressure_until; // evictions ahead only until this step: a slot was needed with none free (a stall, or a
                            // slot past the budget) within the last 4 x nl calls (a tier that fits evicts nothing ahead)
    int64_t step;        // kvt_gpu_kv_layer and _end calls so far (the pipeline's clock)
    leave *lv;
    int64_t n_lv, cap_lv;
    lgen *gens;
    int64_t n_gen, cap_gen, gen_next;
    kvt_cuda_event **evpool; // events of retired generations, for reuse
    int64_t n_evpool, cap_evpool;
    dread *rd;           // disk reads submitted and not waited for
    int64_t n_rd, cap_rd;
    xfer *dld;           // loads of blocks read from disk, issued once their reads are done
    int64_t n_dld, cap_dld;
    bool full;           // this fetch found no victim: none will appear before it ends (nothing is freed in it)
    kvt_gpu_kv_stats st;
};

static kvt_status cu_fail(const kvt_gpu_kv *kv, const char *what, kvt_err *err) {
    return kvt_errorf(err, KVT_ERR_IO, "CUDA %s: %s", what, kv->api->last_error(kv->ctx));
}
#define CU(call, what)                                                                                                        \
    do {                                                                                                                      \
        if ((call) != KVT_CUDA_OK) return cu_fail(kv, what, err);                                                            \
    } while (0)

static bool grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return true;
    int64_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

// ---------------------------------------------------------------- slots

static uint8_t *slot_dev(const kvt_gpu_kv *kv, const slab *s, int64_t id) {
    return (uint8_t *)s->dchunk[id / s->per_chunk] + (id % s->per_chunk) * kv->slot_bytes;
}
static uint8_t *slot_host(const kvt_gpu_kv *kv, int64_t id) { // a host slot's host address
    return (uint8_t *)kv->host.chunk[id / kv->host.per_chunk] + (id % kv->host.per_chunk) * kv->slot_bytes;
}

// *id = a slot of s, or -1 when s is at its cap. The free list always has room for every slot made.
static kvt_status slot_get(kvt_gpu_kv *kv, slab *s, int64_t *id, kvt_err *err) {
    *id = -1;
    if (s->n_free > 0) {
        *id = s->free[--s->n_free];
        return KVT_OK;
    }
    if (s->cap >= 0 && s->made >= s->cap) return KVT_OK;
    if (s->next == s->end) { // a new chunk (the last one short where the budget ends; a budget raised past it: another)
        const int64_t n = s->cap >= 0 && s->cap - s->made < s->per_chunk ? s->cap - s->made : s->per_chunk;
        void **c = realloc(s->chunk, (size_t)(s->n_chunk + 1) * sizeof *c);
        if (c) s->chunk = c;
        void **d = c ? realloc(s->dchunk, (size_t)(s->n_chunk + 1) * sizeof *d) : NULL;
        if (d) s->dchunk = d;
        if (!d || !grow((void **)&s->free, &s->cap_free, s->made + n, sizeof *s->free))
            return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
        const size_t bytes = (size_t)(n * kv->slot_bytes);
        void *m = NULL;
        if (s->host) {
            CU(kv->api->host_malloc(kv->ctx, bytes, &m), "pinned host memory for KV blocks");
            if (kv->api->host_device_ptr(kv->ctx, m, &d[s->n_chunk]) != KVT_CUDA_OK) {
                kvt_status st = cu_fail(kv, "device address of pinned KV blocks", err);
                kv->api->host_free(kv->ctx, m);
                return st;
            }
            kv->st.pinned_bytes += (int64_t)bytes;
        } else {
            CU(kv->api->dev_malloc(kv->ctx, bytes, &m), "VRAM for KV blocks");
            d[s->n_chunk] = m;
            kv->st.vram_bytes += (int64_t)bytes;
        }
        s->next = s->n_chunk * s->per_chunk;
        s->end = s->next + n;
        c[s->n_chunk++] = m;
    }
    s->made++;
    *id = s->next++;
    return KVT_OK;
}
static void slot_put(slab *s, int64_t id) {
    if (id >= 0) s->free[s->n_free++] = id;
}

// ---------------------------------------------------------------- blocks

// Points the mirrors of b's table entry at where b is now (VRAM if there, else its host slot; only on disk: NULL,
// never read before a fetch brings it back).
static void place(kvt_gpu_kv *kv, const gblk *b) {
    uint8_t *a = b->vslot >= 0 ? slot_dev(kv, &kv->vram, b->vslot) : b->hslot >= 0 ? slot_dev(kv, &kv->host, b->hslot) : NULL;
    for (int64_t h = 0; h < b->n_hold; h++) { // every table that holds it (a shared block is in VRAM once for all)
        const size_t e = (size_t)b->hold[h] * kv->mb + b->idx;
        kv->hk[b->layer][e] = a;
        kv->hv[b->layer][e] = a ? a + kv->slot_bytes / 2 : NULL;
        kv->tdirty[b->layer][b->hold[h]] = 1;
    }
}

// The resident list (host false: blocks in VRAM) and the host list (true: blocks with a host slot).
static int64_t *lpos(gblk *b, bool host) { return host ? &b->hres : &b->res; }
static void lst_add(kvt_gpu_kv *kv, bool host, int64_t id) {
    int64_t *l = host ? kv->hres : kv->res, *n = host ? &kv->n_hres : &kv->n_res;
    *lpos(&kv->B[id], host) = *n;
    l[(*n)++] = id;
}
static void lst_del(kvt_gpu_kv *kv, bool host, int64_t id) {
    int64_t *l = host ? kv->hres : kv->res, *n = host ? &kv->n_hres : &kv->n_res;
    const int64_t r = *lpos(&kv->B[id], host), last = l[--*n];
    l[r] = last;
    *lpos(&kv->B[last], host) = r;
    *lpos(&kv->B[id], host) = -1;
}
#define res_add(kv, id) lst_add(kv, false, id)
#define res_del(kv, id) lst_del(kv, false, id)

enum { Q_WB, Q_LD, Q_DLD }; // a fetch's write-backs, its loads, the loads waiting for disk reads
static kvt_status queue_copy(kvt_gpu_kv *kv, int which, void *dst, const void *src, void *ddst, const void *dsrc, int64_t bytes,
                             int64_t vslot, int64_t hslot, kvt_err *err) {
    xfer **list = which == Q_WB ? &kv->wb : which == Q_LD ? &kv->ld : &kv->dld;
    int64_t *n = which == Q_WB ? &kv->n_wb : which == Q_LD ? &kv->n_ld : &kv->n_dld;
    int64_t *cap = which == Q_WB ? &kv->cap_wb : which == Q_LD ? &kv->cap_ld : &kv->cap_dld;
    if (!grow((void **)list, cap, *n + 1, sizeof **list)) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    (*list)[(*n)++] = (xfer){dst, src, (size_t)bytes, ddst, dsrc, vslot / kv->vram.per_chunk, hslot / kv->host.per_chunk};
    return KVT_OK;
}

// The victim search's view of the resident list (kv_victim.h), for the fetch of layer `f`.
typedef struct {
    kvt_gpu_kv *kv;
    int64_t start;
    int32_t f;
    bool host; // the host list (a pinned slot for the fetch of layer f), else the resident list
} vview;

// f: the block layer fetched; the blocks of its device layer and of the one before (every head group) are held
static bool held(const kvt_gpu_kv *kv, const gblk *b, int32_t f) {
    if (f < 0) return false; // outside a fetch (forks: both streams idle)
    const int32_t l = b->layer / kv->ng, lf = f / kv->ng;
    return b->need_call == kv->call && (l == lf || l == lf - 1);
}
static bool in_batch(const kvt_gpu_kv *kv, int32_t seq) {
    for (int32_t k = 0; k < kv->n_bs; k++) {
        if (kv->bs[k].seq == seq) return true;
    }
    return false;
}
static void victim_cand(void *ud, int64_t k, kvt_victim_cand *out) {
    const vview *v = ud;
    const int64_t id = v->host ? v->kv->hres[(v->start + k) % v->kv->n_hres] : v->kv->res[(v->start + k) % v->kv->n_res];
    const gblk *b = &v->kv->B[id];
    // clean: leaving costs no write (VRAM: the host copy is current; host: in VRAM too, or a current disk copy)
    const bool clean = v->host ? b->vslot >= 0 || (b->dslot >= 0 && b->dvalid) : b->dhi == 0 && b->hslot >= 0;
    const bool h = held(v->kv, b, v->f) || b->pending; // (a read or load in flight on the disk thread's path)
    *out = (kvt_victim_cand){id, INT64_MAX, 0, (h ? KVT_VICTIM_HELD : 0) | (clean ? KVT_VICTIM_CLEAN : 0)};
}
static void victim_info(void *ud, int64_t id, kvt_evict_info *out) {
    const vview *v = ud;
    const kvt_gpu_kv *kv = v->kv;
    const gblk *b = &kv->B[id];
    // the schedule: layers in order, micro-batch after micro-batch; a sequence outside this one: not known
    // (with the scheduler's plan: a sequence of plan iteration it runs it iterations on, the next micro-batch for one of
    // this iteration that has not run yet)
    // (a shared block: its nearest use over the sequences that hold it; a holder in the micro-batch is the nearest)
    int64_t next = INT64_MAX;
    for (int64_t h = 0; h < b->n_hold; h++) {
        const int32_t s = b->hold[h];
        int64_t n = INT64_MAX;
        if (in_batch(kv, s)) {
            next = b->layer >= v->f ? b->layer - v->f : kv->nv - v->f + b->layer;
            break;
        } else if (s < kv->seq_cap && kv->pit[s] >= 0) {
            const int64_t it = kv->pit[s] == 0 && kv->ran[s] != kv->plan_id ? 0 : kv->pit[s] > 1 ? kv->pit[s] : 1;
            n = kv->nv - v->f + b->layer + it * kv->nv;
        }
        if (n < next) next = n;
    }
    const int64_t cap = v->host ? kv->host.cap : kv->vram.cap, total = kv->n_B - kv->n_free_id;
    const double frac = cap < 0 || total <= cap ? 0.0 : 1.0 - (double)cap / (double)total;
    *out = (kvt_evict_info){b->last_use, b->uses, next, b->layer, b->idx, kv->mb, frac, 0.0};
}

// ---------------------------------------------------------------- T2: disk below pinned host

static kvt_status flush(kvt_gpu_kv *kv, const xfer *list, int64_t n, bool to_host, kvt_err *err);
static kvt_status sync_both(kvt_gpu_kv *kv, kvt_err *err);
static kvt_status block_unshare(kvt_gpu_kv *kv, int32_t seq, int32_t i, int64_t idx, kvt_err *err);

// Before a host slot is rewritten from the host (a disk write reads it, its next owner reuses it): the fetch's
// pending copies are issued (write-backs before loads, as at its end) and both streams finish everything queued.
static kvt_status make_quiet(kvt_gpu_kv *kv, kvt_err *err) {
    kvt_status st = flush(kv, kv->wb, kv->n_wb, true, err);
    if (!st) st = flush(kv, kv->ld, kv->n_ld, false, err);
    if (st) return st;
    kv->n_wb = kv->n_ld = 0;
    if (kv->quiet) return KVT_OK;
    CU(kv->api->stream_sync(kv->ctx, KVT_CUDA_STREAM_COMPUTE), "synchronization before a disk write");
    CU(kv->api->stream_sync(kv->ctx, KVT_CUDA_STREAM_COPY), "synchronization before a disk write");
    kv->quiet = true;
    kv->st.syncs++;
    return KVT_OK;
}

static void disk_what(const gblk *b, char *what, size_t n) {
    snprintf(what, n, "device KV block %lld of sequence %d, block layer %d", (long long)b->idx, b->n_hold ? b->hold[0] : -1,
             b->layer);
}

// Block id leaves pinned host memory (both streams quiet): to disk unless its disk copy is current, or just dropped
// while it is in VRAM (its VRAM copy is then written back whole when it leaves VRAM).
static kvt_status host_evict(kvt_gpu_kv *kv, int64_t id, kvt_err *err) {
    gblk *b = &kv->B[id];
    if (b->vslot >= 0) {
        b->dlo = 0, b->dhi = (int32_t)kv->p.block_len;
    } else if (!(b->dslot >= 0 && b->dvalid)) {
        if (b->dslot < 0 && (b->dslot = kvt_tier_alloc(&kv->disk)) < 0)
            return kvt_errorf(err, KVT_ERR_BUDGET, "device KV: the disk tier (%lld bytes) is full", (long long)kv->p.disk_bytes);
        char what[96];
        disk_what(b, what, sizeof what);
        kvt_status st = kvt_tier_disk_write(&kv->disk, b->dslot, slot_host(kv, b->hslot), kv->bounce, &b->crc, what, err);
        if (st) return st;
        b->dvalid = true;
        kv->st.disk_writes++;
        kv->st.disk_write_bytes += kv->slot_bytes;
    }
    lst_del(kv, true, id);
    slot_put(&kv->host, b->hslot);
    b->hslot = -1;
    place(kv, b);
    kv->st.host_evictions++;
    return KVT_OK;
}

// A pinned host slot for the fetch of layer f (f < 0: outside a fetch, nothing held): a free one, else a victim's
// (kvt_victim_pick over the host list, the VRAM tier's policy; its blocks go to disk; up to HOST_EVICT_BATCH of them at
// once, so that one wait for the streams serves several evictions); when every host block is held
// (the two layers of the fetch read more than the budget), one past the budget (counted).
static kvt_status host_slot_async(kvt_gpu_kv *kv, int32_t f, int64_t *id, kvt_err *err);
static kvt_status host_slot(kvt_gpu_kv *kv, int32_t f, int64_t *id, kvt_err *err) {
    if (kv->dw) return host_slot_async(kv, f, id, err);
    kvt_status st = slot_get(kv, &kv->host, id, err);
    if (st || *id >= 0) return st;
    // up to HOST_EVICT_BATCH victims per wait for the streams (the first found before waiting)
    for (int e = 0; e < HOST_EVICT_BATCH; e++) {
        vview v = {kv, 0, f, true};
        const int64_t m = kvt_victim_window(kv->n_hres, KVT_VICTIM_WINDOW_DEFAULT, &kv->hvictim_pos, &v.start);
        const kvt_victim_query q = {kv->pol, false, -1, INT64_MAX, kv->tick, false};
        const int64_t k = m > 0 ? kvt_victim_pick(&q, m, victim_cand, victim_info, &v, NULL) : -1;
        if (k < 0 && e == 0) {
            kv->host.cap++;
            kv->st.pinned_over_bytes += kv->slot_bytes;
        }
        if (k < 0) break;
        const int64_t vid = kv->hres[(v.start + k) % kv->n_hres];
        if ((e == 0 && (st = make_quiet(kv, err))) || (st = host_evict(kv, vid, err))) return st;
    }
    return slot_get(kv, &kv->host, id, err);
}

// Block id, only on disk, comes back into a pinned host slot (read on the host: a slot from host_slot is either new
// or was given up after both streams finished with it).
static kvt_status disk_load_async(kvt_gpu_kv *kv, int32_t f, int64_t id, kvt_err *err);
static kvt_status disk_load(kvt_gpu_kv *kv, int32_t f, int64_t id, kvt_err *err) {
    if (kv->dw) return disk_load_async(kv, f, id, err);
    int64_t hs;
    kvt_status st = host_slot(kv, f, &hs, err);
    if (st) return st;
    gblk *b = &kv->B[id];
    char what[96];
    disk_what(b, what, sizeof what);
    if ((st = kvt_tier_disk_read(&kv->disk, b->dslot, slot_host(kv, hs), kv->bounce, b->crc, what, err))) {
        slot_put(&kv->host, hs);
        return st;
    }
    b->hslot = hs;
    lst_add(kv, true, id);
    place(kv, b);
    kv->st.disk_reads++;
    kv->st.disk_read_bytes += kv->slot_bytes;
    return KVT_OK;
}

// ---------------------------------------------------------------- T2 on the disk thread (gpu_kv.h)

// A new generation of evictions: the fetch's pending copies issued (a write-back into a leaving slot comes before its
// event), then an event on each stream after everything queued so far, which the slots' disk writes wait for.
static kvt_status gen_new(kvt_gpu_kv *kv, int64_t *g, kvt_err *err) {
    kvt_status st = flush(kv, kv->wb, kv->n_wb, true, err);
    if (!st) st = flush(kv, kv->ld, kv->n_ld, false, err);
    if (st) return st;
    kv->n_wb = kv->n_ld = 0;
    if (!grow((void **)&kv->gens, &kv->cap_gen, kv->n_gen + 1, sizeof *kv->gens)) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    lgen *G = &kv->gens[kv->n_gen];
    *G = (lgen){.id = kv->gen_next, .step = kv->step};
    for (int s = 0; s < 2; s++) {
        if (kv->n_evpool > 0) G->ev[s] = kv->evpool[--kv->n_evpool];
        else CU(kv->api->event_create(kv->ctx, &G->ev[s]), "event of a disk write");
        const int stream = s ? KVT_CUDA_STREAM_COPY : KVT_CUDA_STREAM_COMPUTE;
        if (kv->api->event_record(kv->ctx, G->ev[s], stream) != KVT_CUDA_OK) {
            kvt_status e = cu_fail(kv, "event of a disk write", err);
            for (int q = 0; q <= s; q++) kv->api->event_free(kv->ctx, G->ev[q]);
            return e;
        }
    }
    kv->n_gen++;
    *g = kv->gen_next++;
    return KVT_OK;
}

static lgen *gen_find(kvt_gpu_kv *kv, int64_t g) {
    for (int64_t k = 0; k < kv->n_gen; k++) {
        if (kv->gens[k].id == g) return &kv->gens[k];
    }
    return NULL;
}

// Block id leaves pinned host memory in generation g: its slot keeps the bytes until the thread has written them (a
// block also in VRAM, or with a current disk copy, has nothing to write: the slot just comes back).
static kvt_status leave_add(kvt_gpu_kv *kv, int64_t id, int64_t g, kvt_err *err) {
    gblk *b = &kv->B[id];
    const bool write = b->vslot < 0 && !(b->dslot >= 0 && b->dvalid);
    if (write && b->dslot < 0 && (b->dslot = kvt_tier_alloc(&kv->disk)) < 0)
        return kvt_errorf(err, KVT_ERR_BUDGET, "device KV: the disk tier (%lld bytes) is full", (long long)kv->p.disk_bytes);
    if (!grow((void **)&kv->lv, &kv->cap_lv, kv->n_lv + 1, sizeof *kv->lv)) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    if (b->vslot >= 0) b->dlo = 0, b->dhi = (int32_t)kv->p.block_len; // written back whole when it leaves VRAM
    kv->lv[kv->n_lv++] = (leave){id, b->hslot, g, -1, write};
    lst_del(kv, true, id);
    b->wslot = write ? b->hslot : -1;
    b->hslot = -1;
    place(kv, b);
    kv->st.host_evictions++;
    return KVT_OK;
}

// Up to n victims leave pinned host memory as one generation (f: the fetch; its blocks are held). *got: how many.
static kvt_status evict_ahead(kvt_gpu_kv *kv, int32_t f, int64_t n, int64_t *got, kvt_err *err) {
    *got = 0;
    int64_t g = -1;
    for (int64_t e = 0; e < n; e++) {
        vview v = {kv, 0, f, true};
        const int64_t m = kvt_victim_window(kv->n_hres, KVT_VICTIM_WINDOW_DEFAULT, &kv->hvictim_pos, &v.start);
        const kvt_victim_query q = {kv->pol, false, -1, INT64_MAX, kv->tick, false};
        const int64_t k = m > 0 ? kvt_victim_pick(&q, m, victim_cand, victim_info, &v, NULL) : -1;
        if (k < 0) break;
        const int64_t vid = kv->hres[(v.start + k) % kv->n_hres];
        kvt_status st = g < 0 ? gen_new(kv, &g, err) : KVT_OK;
        if (st || (st = leave_add(kv, vid, g, err))) return st;
        ++*got;
    }
    return KVT_OK;
}

// The generations recorded at a step <= upto and not promoted yet: the host waits for their events (then both streams
// have finished with their slots) and submits their writes to the thread.
static kvt_status promote(kvt_gpu_kv *kv, int64_t upto, kvt_err *err) {
    for (int64_t k = 0; k < kv->n_gen; k++) {
        lgen *G = &kv->gens[k];
        if (G->promoted || G->step > upto) continue;
        CU(kv->api->event_sync(kv->ctx, G->ev[0]), "wait before a disk write");
        CU(kv->api->event_sync(kv->ctx, G->ev[1]), "wait before a disk write");
        G->promoted = true;
        for (int64_t j = 0; j < kv->n_lv; j++) {
            leave *L = &kv->lv[j];
            if (L->gen != G->id || !L->write) continue;
            char what[96];
            disk_what(&kv->B[L->id], what, sizeof what);
            if ((L->ticket = kvt_disk_worker_submit(kv->dw, true, kv->B[L->id].dslot, slot_host(kv, L->hslot), 0, what)) < 0)
                return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
        }
    }
    return KVT_OK;
}

// L's write, if submitted, is done (the host waits for it): the block's disk copy is current.
static kvt_status leave_written(kvt_gpu_kv *kv, const leave *L, kvt_err *err) {
    if (!L->write || L->ticket < 0) return KVT_OK;
    gblk *b = &kv->B[L->id];
    kvt_status st = kvt_disk_worker_wait(kv->dw, L->ticket, &b->crc, err);
    if (st) return st;
    b->dvalid = true;
    kv->st.disk_writes++;
    kv->st.disk_write_bytes += kv->slot_bytes;
    kv->st.disk_async_bytes += kv->slot_bytes;
    return KVT_OK;
}

static void leave_del(kvt_gpu_kv *kv, int64_t j) { // keeps the order
    memmove(&kv->lv[j], &kv->lv[j + 1], (size_t)(kv->n_lv - j - 1) * sizeof *kv->lv);
    kv->n_lv--;
}

// Retires the generations without leaving slots (their events back to the pool).
static void gens_gc(kvt_gpu_kv *kv) {
    int64_t w = 0;
    for (int64_t k = 0; k < kv->n_gen; k++) {
        bool used = false;
        for (int64_t j = 0; j < kv->n_lv && !used; j++) used = kv->lv[j].gen == kv->gens[k].id;
        if (used || !grow((void **)&kv->evpool, &kv->cap_evpool, kv->n_evpool + 2, sizeof *kv->evpool)) {
            kv->gens[w++] = kv->gens[k];
            continue;
        }
        kv->evpool[kv->n_evpool++] = kv->gens[k].ev[0];
        kv->evpool[kv->n_evpool++] = kv->gens[k].ev[1];
    }
    kv->n_gen = w;
}

// The leaving slots of promoted generations recorded at a step <= upto come back free (their writes waited for).
static kvt_status reap(kvt_gpu_kv *kv, int64_t upto, kvt_err *err) {
    for (int64_t j = 0; j < kv->n_lv;) {
        const leave L = kv->lv[j];
        const lgen *G = gen_find(kv, L.gen);
        if (!G->promoted || G->step > upto) {
            j++;
            continue;
        }
        kvt_status st = leave_written(kv, &L, err);
        if (st) return st;
        if (L.write) kv->B[L.id].wslot = -1; // (a block has at most one write leaving; it may have dropped slots too)
        slot_put(&kv->host, L.hslot);
        leave_del(kv, j);
    }
    gens_gc(kv);
    return KVT_OK;
}

// Waits for every disk read submitted so far, then issues the loads that followed them (on COPY, after the fetches
// queued before) and records the fetch event of layer l after them. Called before layer l's kernels are queued and
// before the next fetch: the reads ran on the thread while the kernels before them ran.
static kvt_status reads_done(kvt_gpu_kv *kv, int32_t l, kvt_err *err) {
    if (kv->n_rd == 0 && kv->n_dld == 0) return KVT_OK;
    for (int64_t k = 0; k < kv->n_rd; k++) {
        kvt_status st = kvt_disk_worker_wait(kv->dw, kv->rd[k].ticket, NULL, err);
        if (st) return st;
        kv->B[kv->rd[k].id].pending = false;
    }
    kv->n_rd = 0;
    kvt_status st = flush(kv, kv->dld, kv->n_dld, false, err);
    kv->n_dld = 0;
    if (st) return st;
    if (l >= 0) CU(kv->api->event_record(kv->ctx, kv->ev_copy[l & 1], KVT_CUDA_STREAM_COPY), "event after a disk read's load");
    return KVT_OK;
}

// Every disk job done and every leaving slot free (both streams were synchronized: the events have passed).
static kvt_status disk_drain(kvt_gpu_kv *kv, kvt_err *err) {
    kvt_status st = promote(kv, INT64_MAX, err);
    if (!st) st = reap(kv, INT64_MAX, err);
    return st;
}

static kvt_status host_slot_async(kvt_gpu_kv *kv, int32_t f, int64_t *id, kvt_err *err) {
    kvt_status st = slot_get(kv, &kv->host, id, err);
    if (!st && *id < 0) { // none free: the slots leaving come back first (the host waits for them in line)
        int64_t got = 0; // (a batch leaves with those already leaving, as in one wait of the synchronous version)
        if (kv->n_lv < HOST_EVICT_BATCH && (st = evict_ahead(kv, f, HOST_EVICT_BATCH - kv->n_lv, &got, err))) return st;
        kv->pressure_until = kv->step + 4 * (int64_t)kv->p.nl;
        if (kv->n_lv == 0) { // every host block held (two layers' reads past the budget): one slot past it
            kv->host.cap++;
            kv->st.pinned_over_bytes += kv->slot_bytes;
        } else {
            kv->st.disk_stalls++;
            if ((st = disk_drain(kv, err))) return st;
        }
        if ((st = slot_get(kv, &kv->host, id, err))) return st;
    }
    if (st || f < 0 || kv->host.cap < 0) return st; // (outside a fetch, e.g. forks: no eviction ahead)
    kv->takes++;
    if (kv->step >= kv->pressure_until) return KVT_OK;
    // keep slots free or leaving for the next fetch (as many as the last one took), written while kernels run
    const int64_t want = kv->last_takes > HOST_EVICT_BATCH ? kv->last_takes : HOST_EVICT_BATCH;
    const int64_t reserve = want < kv->reserve_max ? want : kv->reserve_max;
    const int64_t have = kv->host.n_free + kv->n_lv + (kv->host.cap - kv->host.made);
    int64_t got;
    return have < reserve ? evict_ahead(kv, f, reserve - have, &got, err) : KVT_OK;
}

// Block id, only on disk (or leaving), comes back into a pinned host slot: a leaving slot is taken back (after its
// write, if submitted); else a read into a slot no stream uses is submitted to the thread, and the block is pending:
// its load (if it gets a VRAM slot) waits in dld, and the host waits for the read before layer f's kernels.
static kvt_status disk_load_async(kvt_gpu_kv *kv, int32_t f, int64_t id, kvt_err *err) {
    gblk *b = &kv->B[id];
    kvt_status st;
    if (b->wslot >= 0) {
        int64_t j = 0;
        while (kv->lv[j].id != id || !kv->lv[j].write) j++;
        if ((st = leave_written(kv, &kv->lv[j], err))) return st;
        leave_del(kv, j);
        gens_gc(kv);
        b->hslot = b->wslot;
        b->wslot = -1;
        lst_add(kv, true, id);
        place(kv, b);
        kv->st.disk_reclaims++;
        return KVT_OK;
    }
    int64_t hs;
    if ((st = host_slot(kv, f, &hs, err))) return st;
    b = &kv->B[id];
    char what[96];
    disk_what(b, what, sizeof what);
    if (!grow((void **)&kv->rd, &kv->cap_rd, kv->n_rd + 1, sizeof *kv->rd)) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    const int64_t t = kvt_disk_worker_submit(kv->dw, false, b->dslot, slot_host(kv, hs), b->crc, what);
    if (t < 0) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    kv->rd[kv->n_rd++] = (dread){id, t};
    b->hslot = hs;
    b->pending = true;
    lst_add(kv, true, id);
    place(kv, b);
    kv->st.disk_reads++;
    kv->st.disk_read_bytes += kv->slot_bytes;
    kv->st.disk_async_bytes += kv->slot_bytes;
    return KVT_OK;
}

// A VRAM slot for the fetch of layer f: a free one, else a victim's (written back first if dirty). *id -1: none.
static kvt_status vram_slot(kvt_gpu_kv *kv, int32_t f, int64_t *id, kvt_err *err) {
    kvt_status st = slot_get(kv, &kv->vram, id, err);
    if (st || *id >= 0 || kv->n_res == 0 || kv->full) return st;
    vview v = {kv, 0, f, false};
    const int64_t m = kvt_victim_window(kv->n_res, KVT_VICTIM_WINDOW_DEFAULT, &kv->victim_pos, &v.start);
    const kvt_victim_query q = {kv->pol, true, -1, INT64_MAX, kv->tick, false};
    const int64_t k = kvt_victim_pick(&q, m, victim_cand, victim_info, &v, NULL);
    if (k < 0) { // every resident block of the window is held
        kv->full = m == kv->n_res;
        return KVT_OK;
    }
    const int64_t vid = kv->res[(v.start + k) % kv->n_res];
    gblk *b = &kv->B[vid];
    if (b->hslot < 0) { // (dropped from pinned host, or made in VRAM): a host slot to write it back into, whole
        int64_t hs;
        if ((st = host_slot(kv, f, &hs, err))) return st;
        b = &kv->B[vid];
        b->hslot = hs;
        lst_add(kv, true, vid);
    }
    if (b->dhi > b->dlo) { // the rows written since the host copy was made, of K and of V
        const int64_t off = b->dlo * kv->p.row_bytes, n = (b->dhi - b->dlo) * kv->p.row_bytes, v = kv->slot_bytes / 2;
        uint8_t *dst = slot_host(kv, b->hslot), *src = slot_dev(kv, &kv->vram, b->vslot), *dd = slot_dev(kv, &kv->host, b->hslot);
        if ((st = queue_copy(kv, Q_WB, dst + off, src + off, dd + off, src + off, n, b->vslot, b->hslot, err)) ||
            (st = queue_copy(kv, Q_WB, dst + v + off, src + v + off, dd + v + off, src + v + off, n, b->vslot, b->hslot, err)))
            return st;
        kv->st.writebacks++;
    }
    b = &kv->B[vid];
    b->dlo = b->dhi = 0;
    *id = b->vslot;
    b->vslot = -1;
    res_del(kv, vid);
    place(kv, b);
    kv->st.evictions++;
    return KVT_OK;
}

// A new block idx of (seq, layer), placed in VRAM if the fetch of layer f finds a slot, else in a host slot.
static kvt_status block_new(kvt_gpu_kv *kv, int32_t seq, int32_t layer, int64_t idx, int32_t f, kvt_err *err) {
    int64_t id;
    if (kv->n_free_id > 0) id = kv->free_id[--kv->n_free_id];
    else {
        if (kv->n_B == kv->cap_B) { // free_id and res hold every id
            const int64_t cap = kv->cap_B ? 2 * kv->cap_B : 64;
            gblk *nb = realloc(kv->B, (size_t)cap * sizeof *nb);
            if (nb) kv->B = nb;
            int64_t *fi = nb ? realloc(kv->free_id, (size_t)cap * sizeof *fi) : NULL;
            if (fi) kv->free_id = fi;
            int64_t *rs = fi ? realloc(kv->res, (size_t)cap * sizeof *rs) : NULL;
            if (rs) kv->res = rs;
            int64_t *hr = rs ? realloc(kv->hres, (size_t)cap * sizeof *hr) : NULL;
            if (!hr) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
            kv->hres = hr;
            kv->cap_B = cap;
        }
        id = kv->n_B++;
        kv->B[id].hold = NULL, kv->B[id].cap_hold = 0;
    }
    gblk *b = &kv->B[id];
    int32_t *hold = b->hold;
    int64_t cap_hold = b->cap_hold;
    if (!grow((void **)&hold, &cap_hold, 1, sizeof *hold)) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    hold[0] = seq;
    *b = (gblk){.layer = layer, .idx = idx, .vslot = -1, .hslot = -1, .res = -1, .hres = -1, .dslot = -1,
                .wslot = -1, .need_call = kv->call, .hold = hold, .n_hold = 1, .cap_hold = cap_hold};
    gseq *S = &kv->seq[seq];
    S->blk[(size_t)layer * kv->mb + idx] = id;
    S->n_blk[layer] = idx + 1;
    int64_t slot = -1;
    kvt_status st = f >= 0 ? vram_slot(kv, f, &slot, err) : slot_get(kv, &kv->vram, &slot, err);
    if (st) return st;
    b = &kv->B[id];
    if (slot >= 0) {
        b->vslot = slot;
        res_add(kv, id);
    } else {
        if ((st = host_slot(kv, f, &slot, err))) return st;
        b = &kv->B[id];
        b->hslot = slot;
        lst_add(kv, true, id);
    }
    place(kv, b);
    return KVT_OK;
}

static void block_free(kvt_gpu_kv *kv, int64_t id) {
    gblk *b = &kv->B[id];
    if (b->res >= 0) res_del(kv, id);
    if (b->hres >= 0) lst_del(kv, true, id);
    slot_put(&kv->vram, b->vslot);
    slot_put(&kv->host, b->hslot);
    if (b->dslot >= 0) kvt_tier_release(&kv->disk, b->dslot);
    kv->free_id[kv->n_free_id++] = id;
}

// seq's table drops its reference to block id (the last one frees it).
static void block_unref(kvt_gpu_kv *kv, int64_t id, int32_t seq) {
    gblk *b = &kv->B[id];
    for (int64_t h = 0; h < b->n_hold; h++) {
        if (b->hold[h] != seq) continue;
        b->hold[h] = b->hold[--b->n_hold];
        break;
    }
    if (b->n_hold == 0) block_free(kv, id);
}

// Sliding windows (the CPU store's shard_slide, kv_paged.c): a row at position p of a layer with window W attends
// [p - W + 1, p] (kvt_cuda_attn_args.window: the last W positions, its own included; Gemma's n_swa), and no later row of
// its sequence comes before the micro-batch's first (kvt_gpu_kv_begin refuses one whose window reaches a freed block),
// so the blocks wholly before its first row's p - W + 1 go: the sequence's references dropped, the last one frees the
// block's VRAM, pinned host and disk slots (block_free), its table entries NULL. Never allocated again: fetch starts
// at n_drop. A block whose last reference goes while it has a host or disk slot (or disk I/O in flight) waits for both
// streams first, as a truncate does (a free host slot may be rewritten from the host at once); one only in VRAM does
// not (its next owner's writes and loads are ordered after whatever still uses it on the streams).
static kvt_status window_slide(kvt_gpu_kv *kv, kvt_err *err) {
    if (kv->keep_window) return KVT_OK;
    bool synced = false;
    for (int32_t k = 0; k < kv->n_bs; k++) {
        const int32_t seq = kv->bs[k].seq;
        gseq *S = &kv->seq[seq];
        for (int32_t v = 0; v < kv->nv; v++) {
            const int64_t w = kv->window[v], bl = kv->p.block_len;
            int64_t keep = w > 0 && kv->bs[k].min_len > w ? (kv->bs[k].min_len - w) / bl : 0;
            if (keep > S->n_blk[v]) keep = S->n_blk[v];
            for (int64_t b = S->n_drop[v]; b < keep; b++) {
                const size_t e = (size_t)v * kv->mb + b, r = (size_t)seq * kv->mb + b;
                const gblk *B = &kv->B[S->blk[e]];
                if (!synced && B->n_hold == 1 && (B->hslot >= 0 || B->dslot >= 0 || B->wslot >= 0 || B->pending)) {
                    kvt_status st = sync_both(kv, err);
                    if (st) return st;
                    synced = true;
                }
                block_unref(kv, S->blk[e], seq);
                S->blk[e] = -1;
                kv->hk[v][r] = kv->hv[v][r] = NULL;
                kv->tdirty[v][seq] = 1;
                kv->st.window_freed++;
            }
            if (keep > S->n_drop[v]) S->n_drop[v] = keep;
        }
    }
    return KVT_OK;
}

static kvt_status batch_issue(kvt_gpu_kv *kv, const kvt_cuda_copy *batch, int n, kvt_err *err) {
    if (n == 0) return KVT_OK;
    CU(kv->api->copy_batch(kv->ctx, batch, n, KVT_CUDA_STREAM_COPY), "batched copy of KV blocks");
    kv->st.transfers++;
    kv->st.batches++;
    kv->st.batched_copies += n;
    return KVT_OK;
}

// Queues the copies gathered in list on COPY: neighbours merged (consecutive sources onto consecutive destinations);
// a copy of at least copy_min bytes as one DMA (copy_h2d / copy_d2h), the shorter ones gathered into copy_batch
// kernels of up to KVT_CUDA_COPY_BATCH_MAX copies each (one transfer whatever the block size).
static kvt_status flush(kvt_gpu_kv *kv, const xfer *list, int64_t n, bool to_host, kvt_err *err) {
    kvt_cuda_copy batch[KVT_CUDA_COPY_BATCH_MAX];
    int nb = 0;
    kvt_status st;
    for (int64_t i = 0; i < n;) {
        int64_t j = i + 1;
        size_t bytes = list[i].bytes;
        while (j < n && (uint8_t *)list[i].dst + bytes == list[j].dst && (const uint8_t *)list[i].src + bytes == list[j].src &&
               (uint8_t *)list[i].ddst + bytes == list[j].ddst && (const uint8_t *)list[i].dsrc + bytes == list[j].dsrc &&
               list[i].vc == list[j].vc && list[i].hc == list[j].hc)
            bytes += list[j++].bytes;
        kv->quiet = false;
        (to_host ? &kv->st.d2h_bytes : &kv->st.h2d_bytes)[0] += (int64_t)bytes;
        if ((int64_t)bytes < kv->copy_min) {
            batch[nb++] = (kvt_cuda_copy){list[i].ddst, list[i].dsrc, bytes};
            if (nb == KVT_CUDA_COPY_BATCH_MAX && (st = batch_issue(kv, batch, nb, err))) return st;
            nb %= KVT_CUDA_COPY_BATCH_MAX;
        } else {
            if (to_host) CU(kv->api->copy_d2h(kv->ctx, list[i].dst, list[i].src, bytes, KVT_CUDA_STREAM_COPY), "write-back of KV blocks");
            else CU(kv->api->copy_h2d(kv->ctx, list[i].dst, list[i].src, bytes, KVT_CUDA_STREAM_COPY), "load of KV blocks");
            kv->st.transfers++;
        }
        i = j;
    }
    return batch_issue(kv, batch, nb, err);
}

// The first block a sequence's rows read in layer i (never one a window freed: the guess of kvt_gpu_kv_end after a
// truncate may reach back past them; it only fetches, nothing reads them).
static int64_t first_block(const kvt_gpu_kv *kv, int32_t i, const bseq *s) {
    const int64_t w = kv->window[i], d = kv->seq[s->seq].n_drop[i];
    const int64_t b = w > 0 && s->min_len > w ? (s->min_len - w) / kv->p.block_len : 0;
    return b > d ? b : d;
}

// The fetch of device layer l, every head group's blocks (the schedule of gpu_kv.h, step 2): queued on COPY, then
// its event recorded.
static kvt_status fetch(kvt_gpu_kv *kv, int32_t l, kvt_err *err) {
    kv->n_wb = kv->n_ld = 0;
    if (kv->takes > 0) kv->last_takes = kv->takes; // (a fetch that took no pinned slot keeps the last one's)
    kv->takes = 0;
    kv->full = false;
    kvt_status st = KVT_OK;
    for (int32_t kf = 0; !st && kf < kv->n_bs * kv->ng; kf++) { // group by group, the batch's sequences in each
        const int32_t f = l * kv->ng + kf / kv->n_bs, k = kf % kv->n_bs;
        const bseq *s = &kv->bs[k];
        gseq *S = &kv->seq[s->seq];
        const int64_t hi = (s->max_len + kv->p.block_len - 1) / kv->p.block_len;
        for (int64_t b = first_block(kv, f, s); !st && b < hi; b++) {
            if (b >= S->n_blk[f]) { // new blocks, in order (the ones before b too, should a window skip them)
                for (int64_t nb = S->n_blk[f]; !st && nb <= b; nb++) st = block_new(kv, s->seq, f, nb, f, err);
                continue;
            }
            const int64_t id = S->blk[(size_t)f * kv->mb + b];
            kv->B[id].need_call = kv->call;
            if (kv->B[id].vslot < 0 && kv->B[id].hslot < 0 && (st = disk_load(kv, f, id, err))) continue; // T2 -> T1
            if (kv->B[id].vslot >= 0) continue;
            int64_t slot;
            if ((st = vram_slot(kv, f, &slot, err)) || slot < 0) continue;
            gblk *B = &kv->B[id];
            B->vslot = slot;
            B->dlo = B->dhi = 0;
            res_add(kv, id);
            uint8_t *vd = slot_dev(kv, &kv->vram, slot);
            st = queue_copy(kv, B->pending ? Q_DLD : Q_LD, vd, slot_host(kv, B->hslot), vd, slot_dev(kv, &kv->host, B->hslot),
                            kv->slot_bytes, slot, B->hslot, err);
            place(kv, B);
            kv->st.loads++;
        }
    }
    if (!st) st = flush(kv, kv->wb, kv->n_wb, true, err); // write-backs first: a victim's slot is then reloaded
    if (!st) st = flush(kv, kv->ld, kv->n_ld, false, err);
    kv->n_wb = kv->n_ld = 0; // (issued: make_quiet outside a fetch finds nothing pending)
    if (st) return st;
    CU(kv->api->event_record(kv->ctx, kv->ev_copy[l & 1], KVT_CUDA_STREAM_COPY), "event after a fetch");
    return KVT_OK;
}

// ---------------------------------------------------------------- sequences and tables

static kvt_status seq_reserve(kvt_gpu_kv *kv, int32_t seq, kvt_err *err) {
    if (seq < kv->seq_cap) return KVT_OK;
    int32_t cap = kv->seq_cap ? kv->seq_cap : 4;
    while (cap <= seq) cap *= 2;
    gseq *ns = realloc(kv->seq, (size_t)cap * sizeof *ns);
    if (!ns) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for %d device sequences", cap);
    kv->seq = ns;
    for (int32_t s = kv->seq_cap; s < cap; s++) ns[s] = (gseq){-1, NULL, NULL, NULL};
    int32_t *pit = realloc(kv->pit, (size_t)cap * sizeof *pit);
    if (pit) kv->pit = pit;
    int64_t *ran = pit ? realloc(kv->ran, (size_t)cap * sizeof *ran) : NULL;
    if (!ran) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for %d device sequences", cap);
    kv->ran = ran;
    for (int32_t s = kv->seq_cap; s < cap; s++) pit[s] = -1, ran[s] = -1;
    const size_t row = (size_t)kv->mb * sizeof(void *);
    for (int32_t i = 0; i < kv->nv; i++) {
        uint8_t *td = realloc(kv->tdirty[i], (size_t)cap);
        if (!td) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
        memset(td + kv->seq_cap, 0, (size_t)(cap - kv->seq_cap));
        kv->tdirty[i] = td;
        void ***dev[2] = {&kv->tk[i], &kv->tv[i]}, ***host[2] = {&kv->hk[i], &kv->hv[i]};
        for (int t = 0; t < 2; t++) {
            void **h = realloc(*host[t], (size_t)cap * row);
            if (!h) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for device block tables");
            memset(h + (size_t)kv->seq_cap * kv->mb, 0, (size_t)(cap - kv->seq_cap) * row);
            *host[t] = h;
            void *d = NULL;
            CU(kv->api->dev_malloc(kv->ctx, (size_t)cap * row, &d), "allocation of the block tables");
            if (*dev[t]) {
                CU(kv->api->copy_d2d(kv->ctx, d, *dev[t], (size_t)kv->seq_cap * row, KVT_CUDA_STREAM_COMPUTE), "block tables");
                CU(kv->api->stream_sync(kv->ctx, KVT_CUDA_STREAM_COMPUTE), "block tables");
                kv->api->dev_free(kv->ctx, *dev[t]);
            }
            *dev[t] = d;
        }
    }
    kv->seq_cap = cap;
    return KVT_OK;
}

static kvt_status seq_get(kvt_gpu_kv *kv, int32_t seq, gseq **out, kvt_err *err) {
    if (seq < 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "device layers: sequence %d", seq);
    kvt_status st = seq_reserve(kv, seq, err);
    if (st) return st;
    gseq *S = &kv->seq[seq];
    if (S->n_pos < 0) {
        S->n_blk = calloc((size_t)kv->nv, sizeof *S->n_blk);
        S->n_drop = calloc((size_t)kv->nv, sizeof *S->n_drop);
        S->blk = malloc((size_t)kv->nv * (size_t)kv->mb * sizeof *S->blk);
        if (!S->n_blk || !S->n_drop || !S->blk) {
            free(S->n_blk), free(S->n_drop), free(S->blk);
            S->n_blk = NULL, S->n_drop = NULL, S->blk = NULL;
            return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
        }
        S->n_pos = 0;
    }
    *out = S;
    return KVT_OK;
}

// Uploads layer i's table rows that changed (on COMPUTE), through the pinned staging (a copy from pageable memory
// may make the host wait for the stream).
static kvt_status tables_upload(kvt_gpu_kv *kv, int32_t i, kvt_err *err) {
    for (int32_t k = 0; k < kv->n_bs; k++) {
        const int32_t s = kv->bs[k].seq;
        if (!kv->tdirty[i][s]) continue;
        const size_t off = (size_t)s * kv->mb;
        const int64_t n = kv->seq[s].n_blk[i];
        void ***dev[2] = {&kv->tk[i], &kv->tv[i]}, ***host[2] = {&kv->hk[i], &kv->hv[i]};
        for (int t = 0; t < 2; t++) { // (kvt_gpu_kv_begin sized the staging for every row of the micro-batch)
            void **st = kv->stage + kv->n_stage;
            memcpy(st, *host[t] + off, (size_t)n * sizeof(void *));
            kv->n_stage += n;
            CU(kv->api->copy_h2d(kv->ctx, *dev[t] + off, st, (size_t)n * sizeof(void *), KVT_CUDA_STREAM_COMPUTE), "block table");
        }
        kv->st.table_bytes += 2 * n * (int64_t)sizeof(void *);
        kv->tdirty[i][s] = 0;
    }
    return KVT_OK;
}

// ---------------------------------------------------------------- the interface

kvt_status kvt_gpu_kv_init(const kvt_cuda_api *api, kvt_cuda_ctx *ctx, const kvt_gpu_kv_params *p, kvt_gpu_kv **out,
                           kvt_err *err) {
    *out = NULL;
    const kvt_evict_policy *pol = kvt_evict_policy_find(p->evict ? p->evict : "lru");
    if (!pol) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "device KV: eviction policy '%s' (%s)", p->evict, kvt_evict_policy_names());
    if (p->nl < 0 || p->block_len < 1 || p->n_ctx < 1 || p->row_bytes < 1 || p->vram_bytes < 0 || p->n_group < 0)
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "device KV: %d layers, block %lld, context %lld", p->nl,
                          (long long)p->block_len, (long long)p->n_ctx);
    kvt_gpu_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    *out = kv; // freed by kvt_gpu_kv_free on any failure below
    kv->api = api, kv->ctx = ctx, kv->p = *p, kv->pol = pol;
    kv->slot_bytes = 2 * p->block_len * p->row_bytes;
    kv->ng = p->n_group > 1 ? p->n_group : 1;
    kv->nv = p->nl * kv->ng;
    kv->mb = (p->n_ctx + p->block_len - 1) / p->block_len;
    const int64_t per = CHUNK_BYTES / kv->slot_bytes > 1 ? CHUNK_BYTES / kv->slot_bytes : 1;
    kv->vram = (slab){.host = false, .per_chunk = per, .cap = p->vram_bytes > 0 ? p->vram_bytes / kv->slot_bytes : -1};
    kv->host = (slab){.host = true, .per_chunk = per, .cap = p->pinned_bytes > 0 ? p->pinned_bytes / kv->slot_bytes : -1};
    kv->st.vram_cap_bytes = kv->vram.cap < 0 ? -1 : kv->vram.cap * kv->slot_bytes;
    kv->st.pinned_cap_bytes = kv->host.cap < 0 ? -1 : kv->host.cap * kv->slot_bytes;
    kv->p.disk_dir = NULL;
    kv->disk.fd = -1;
    kv->copy_min = p->copy_min == 0 ? KVT_GPU_KV_COPY_MIN : p->copy_min < 0 ? 0 : p->copy_min;
    const char *keep = getenv("KVT_GPU_KV_KEEP_WINDOW"); // (tests: the first version, to compare the logits with)
    kv->keep_window = keep && keep[0] && strcmp(keep, "0") != 0;
    if (p->pinned_bytes > 0 && !(p->disk_dir && p->disk_dir[0]))
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "device KV: a pinned host budget (%lld bytes) needs a disk tier below it "
                          "(--kv-disk DIR)", (long long)p->pinned_bytes);
    if (p->disk_bytes < 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "device KV: disk budget %lld", (long long)p->disk_bytes);
    if (kv->host.cap >= 0 && kv->host.cap < 1) kv->host.cap = 1; // (a budget below one slot: one slot)
    if (p->disk_dir && p->disk_dir[0]) {
        kvt_status st = kvt_tier_disk_init(&kv->disk, p->disk_dir, p->disk_bytes > 0 ? p->disk_bytes : -1, kv->slot_bytes,
                                           false, true, err);
        if (st) return st;
        kv->has_disk = true;
        if (posix_memalign(&kv->bounce, 4096, (size_t)kv->disk.slot_bytes)) {
            kv->bounce = NULL;
            return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
        }
        if (!p->disk_sync) { // the disk thread; KVT_GPU_KV_DISK_DELAY_US (tests): each of its jobs that much slower
            const char *d = getenv("KVT_GPU_KV_DISK_DELAY_US");
            kvt_status st = kvt_disk_worker_start(&kv->dw, &kv->disk, d ? atoll(d) : 0, err);
            if (st) return st;
            // the staging: up to a quarter of the budget again, pinned past it, kept free ahead of need under pressure
            kv->reserve_max = kv->host.cap / 4;
            kv->host.cap += kv->reserve_max;
            kv->st.pinned_staging_bytes = kv->reserve_max * kv->slot_bytes;
        }
    }
    const size_t nl = kv->nv > 0 ? (size_t)kv->nv : 1;
    kv->window = calloc(nl, sizeof *kv->window);
    kv->tk = calloc(nl, sizeof *kv->tk), kv->tv = calloc(nl, sizeof *kv->tv);
    kv->hk = calloc(nl, sizeof *kv->hk), kv->hv = calloc(nl, sizeof *kv->hv);
    kv->tdirty = calloc(nl, sizeof *kv->tdirty);
    if (!kv->window || !kv->tk || !kv->tv || !kv->hk || !kv->hv || !kv->tdirty) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    for (int32_t v = 0; p->window && v < kv->nv; v++) kv->window[v] = p->window[v / kv->ng];
    kv->p.window = NULL;
    for (int j = 0; j < 2; j++) CU(api->event_create(ctx, &kv->ev_copy[j]), "event");
    CU(api->event_create(ctx, &kv->ev_compute), "event");
    return KVT_OK;
}

static void slab_free(kvt_gpu_kv *kv, slab *s) {
    for (int64_t c = 0; c < s->n_chunk; c++) (s->host ? kv->api->host_free : kv->api->dev_free)(kv->ctx, s->chunk[c]);
    free(s->chunk), free(s->dchunk), free(s->free);
}

void kvt_gpu_kv_free(kvt_gpu_kv *kv) {
    if (!kv) return;
    const kvt_cuda_api *A = kv->api;
    kvt_err e;
    if (kv->dw) sync_both(kv, &e); // (a failure here has nowhere to go: the thread's jobs are done either way below)
    kvt_disk_worker_stop(kv->dw);
    A->stream_sync(kv->ctx, KVT_CUDA_STREAM_COMPUTE);
    A->stream_sync(kv->ctx, KVT_CUDA_STREAM_COPY);
    for (int64_t k = 0; k < kv->n_gen; k++) A->event_free(kv->ctx, kv->gens[k].ev[0]), A->event_free(kv->ctx, kv->gens[k].ev[1]);
    for (int64_t k = 0; k < kv->n_evpool; k++) A->event_free(kv->ctx, kv->evpool[k]);
    free(kv->gens), free(kv->evpool), free(kv->lv), free(kv->rd), free(kv->dld);
    slab_free(kv, &kv->vram);
    slab_free(kv, &kv->host);
    for (int32_t i = 0; i < kv->nv; i++) {
        if (kv->tk) A->dev_free(kv->ctx, kv->tk[i]);
        if (kv->tv) A->dev_free(kv->ctx, kv->tv[i]);
        if (kv->hk) free(kv->hk[i]);
        if (kv->hv) free(kv->hv[i]);
        if (kv->tdirty) free(kv->tdirty[i]);
    }
    A->host_free(kv->ctx, kv->stage);
    for (int j = 0; j < 2; j++) A->event_free(kv->ctx, kv->ev_copy[j]);
    A->event_free(kv->ctx, kv->ev_compute);
    for (int32_t s = 0; kv->seq && s < kv->seq_cap; s++) free(kv->seq[s].blk), free(kv->seq[s].n_blk), free(kv->seq[s].n_drop);
    for (int64_t id = 0; id < kv->n_B; id++) free(kv->B[id].hold);
    free(kv->seq), free(kv->tk), free(kv->tv), free(kv->hk), free(kv->hv), free(kv->tdirty), free(kv->window);
    if (kv->has_disk) kvt_tier_free(&kv->disk);
    free(kv->bounce), free(kv->hres), free(kv->plan), free(kv->plan_it), free(kv->pit), free(kv->ran), free(kv->gbs);
    free(kv->B), free(kv->free_id), free(kv->res), free(kv->bs), free(kv->rseq), free(kv->rlen), free(kv->wb), free(kv->ld);
    free(kv);
}

kvt_status kvt_gpu_kv_begin(kvt_gpu_kv *kv, int64_t n, const int32_t *seqs, const int64_t *pos, int32_t *max_len,
                            kvt_err *err) {
    int64_t cap = kv->cap_rows; // (rlen and rseq grow alike; bs: at most n sequences)
    bseq *bs = realloc(kv->bs, (size_t)(n > 0 ? n : 1) * sizeof *kv->bs);
    if (bs) kv->bs = bs;
    if (!bs || !grow((void **)&kv->rlen, &cap, n, sizeof *kv->rlen) || !grow((void **)&kv->rseq, &kv->cap_rows, n, sizeof *kv->rseq))
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    kv->n_bs = 0;
    *max_len = 0;
    for (int64_t t = 0; t < n; t++) {
        gseq *S;
        kvt_status st = seq_get(kv, seqs[t], &S, err);
        if (st) return st;
        if (pos[t] < 0 || pos[t] >= kv->p.n_ctx || pos[t] > S->n_pos) {
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "device layers: position %lld of sequence %d (holds %lld, context %lld)",
                              (long long)pos[t], seqs[t], (long long)S->n_pos, (long long)kv->p.n_ctx);
        }
        for (int32_t v = 0; v < kv->nv; v++) { // (after a truncate far back, as the CPU store's append refuses it)
            const int64_t w = kv->window[v], freed = S->n_drop[v] * kv->p.block_len;
            if (w > 0 && freed > 0 && pos[t] - w + 1 < freed)
                return kvt_errorf(err, KVT_ERR_INVALID_ARG, "device layers: position %lld of sequence %d: the sliding window of %lld "
                                  "positions of device layer %d reaches positions before %lld, already freed",
                                  (long long)pos[t], seqs[t], (long long)w, v / kv->ng, (long long)freed);
        }
        if (pos[t] == S->n_pos) S->n_pos++;
        const int64_t len = pos[t] + 1;
        kv->rseq[t] = seqs[t];
        kv->rlen[t] = len;
        if (len > *max_len) *max_len = (int32_t)len;
        int32_t k = 0;
        while (k < kv->n_bs && kv->bs[k].seq != seqs[t]) k++;
        if (k == kv->n_bs) kv->bs[kv->n_bs++] = (bseq){seqs[t], len, len};
        kv->ran[seqs[t]] = kv->plan_id;
        if (len < kv->bs[k].min_len) kv->bs[k].min_len = len;
        if (len > kv->bs[k].max_len) kv->bs[k].max_len = len;
    }
    kvt_status st0 = window_slide(kv, err);
    if (st0) return st0;
    // copy on write: a row writing into a block that other sequences share (a truncate into it, a rewrite) gets a
    // copy of its own first (both streams idle; the block's bytes unchanged)
    bool synced = false;
    for (int64_t t = 0; t < n; t++) {
        const int64_t b = pos[t] / kv->p.block_len;
        for (int32_t i = 0; i < kv->nv; i++) {
            const gseq *S = &kv->seq[seqs[t]];
            if (b >= S->n_blk[i] || kv->B[S->blk[(size_t)i * kv->mb + b]].n_hold < 2) continue;
            kvt_status st = synced ? KVT_OK : sync_both(kv, err);
            synced = true;
            if (st || (st = block_unshare(kv, seqs[t], i, b, err))) return st;
        }
    }
    if (synced) {
        kvt_status st = sync_both(kv, err);
        if (st) return st;
    }
    kv->n_rows = n;
    kv->call++;
    // the staging of the table rows this micro-batch may upload: every row of its sequences, K and V, every layer
    // (COMPUTE, the only stream that reads it, is idle between micro-batches: the old staging may go)
    const int64_t need = 2 * (int64_t)kv->nv * kv->n_bs * kv->mb;
    kv->n_stage = 0;
    if (need > kv->cap_stage) {
        const int64_t cap = need > 2 * kv->cap_stage ? need : 2 * kv->cap_stage;
        CU(kv->api->host_free(kv->ctx, kv->stage), "pinned staging of block tables");
        kv->stage = NULL, kv->cap_stage = 0;
        CU(kv->api->host_malloc(kv->ctx, (size_t)cap * sizeof(void *), (void **)&kv->stage), "pinned staging of block tables");
        kv->cap_stage = cap;
    }
    return KVT_OK;
}

// The disk thread's clock (kvt_gpu_kv_layer and _end): the generations of evictions recorded a call ago have their
// events waited for (the kernels queued since keep the device busy) and their writes submitted; those submitted a call
// ago (written while a layer's kernels ran) have their slots back.
static kvt_status disk_tick(kvt_gpu_kv *kv, kvt_err *err) {
    kv->step++;
    if (!kv->dw) return KVT_OK;
    kvt_status st = promote(kv, kv->step - 1, err);
    return st ? st : reap(kv, kv->step - 2, err);
}

kvt_status kvt_gpu_kv_layer(kvt_gpu_kv *kv, int32_t i, const void *const **tk, const void *const **tv,
                            int32_t *max_blocks, kvt_err *err) {
    const kvt_cuda_api *A = kv->api;
    kvt_status st;
    kv->quiet = false; // (the kernels of the layer before were queued since)
    if ((st = disk_tick(kv, err))) return st;
    // 1. nothing still reads what the fetches below evict: COPY waits for the kernels queued so far
    CU(A->event_record(kv->ctx, kv->ev_compute, KVT_CUDA_STREAM_COMPUTE), "event");
    CU(A->stream_wait(kv->ctx, KVT_CUDA_STREAM_COPY, kv->ev_compute), "COPY waiting for COMPUTE");
    // 2. this layer's fetch (the first layer's: not queued ahead) and the next layer's, on COPY
    const int64_t l0 = kv->st.loads;
    if (i == 0 && (st = fetch(kv, 0, err))) return st;
    kv->st.loads_first += kv->st.loads - l0;
    // the disk reads of this layer's fetch (on the thread since it was queued), then their loads (none without a thread)
    if (kv->dw && (st = reads_done(kv, i, err))) return st;
    if (i + 1 < kv->p.nl && (st = fetch(kv, i + 1, err))) return st;
    // 3. COMPUTE waits for this layer's blocks, and its table rows follow them
    CU(A->stream_wait(kv->ctx, KVT_CUDA_STREAM_COMPUTE, kv->ev_copy[i & 1]), "COMPUTE waiting for a fetch");
    for (int32_t v = i * kv->ng; v < (i + 1) * kv->ng; v++) {
        if ((st = tables_upload(kv, v, err))) return st;
    }
    // what this layer reads: the blocks' use (the policies' input) and the bytes, by where they are
    kv->tick++;
    for (int32_t v = i * kv->ng; v < (i + 1) * kv->ng; v++) {
        for (int32_t k = 0; k < kv->n_bs; k++) {
            const bseq *s = &kv->bs[k];
            const gseq *S = &kv->seq[s->seq];
            for (int64_t b = first_block(kv, v, s); b < S->n_blk[v]; b++) {
                gblk *B = &kv->B[S->blk[(size_t)v * kv->mb + b]];
                B->last_use = kv->tick;
                B->uses++;
            }
        }
        const int64_t bl = kv->p.block_len, w = kv->window[v];
        for (int64_t t = 0; t < kv->n_rows; t++) {
            const gseq *S = &kv->seq[kv->rseq[t]];
            const int64_t len = kv->rlen[t], lo = w > 0 && len > w ? len - w : 0;
            for (int64_t p0 = lo; p0 < len;) {
                const int64_t b = p0 / bl, p1 = (b + 1) * bl < len ? (b + 1) * bl : len;
                const bool vram = kv->B[S->blk[(size_t)v * kv->mb + b]].vslot >= 0;
                (vram ? &kv->st.vram_read_bytes : &kv->st.zero_copy_bytes)[0] += (p1 - p0) * 2 * kv->p.row_bytes;
                p0 = p1;
            }
        }
    }
    kvt_gpu_kv_tables(kv, i, 0, tk, tv);
    *max_blocks = (int32_t)kv->mb;
    return KVT_OK;
}

kvt_status kvt_gpu_kv_end(kvt_gpu_kv *kv, kvt_err *err) {
    if (kv->p.nl < 1 || kv->n_bs == 0) return KVT_OK;
    kv->quiet = false;
    kvt_status st0 = disk_tick(kv, err);
    if (st0) return st0;
    // as step 1 of a layer: nothing still reads what this fetch evicts (the last layer's kernels are queued)
    CU(kv->api->event_record(kv->ctx, kv->ev_compute, KVT_CUDA_STREAM_COMPUTE), "event");
    CU(kv->api->stream_wait(kv->ctx, KVT_CUDA_STREAM_COPY, kv->ev_compute), "COPY waiting for COMPUTE");
    // the guess: with the scheduler's plan, the sequences of its first iteration that have not run yet, else those of
    // the next iteration (their positions so far: no block is made for a guess); without one, the same sequences
    bseq *bs = kv->bs;
    const int32_t n_bs = kv->n_bs;
    if (kv->n_plan > 0) {
        int32_t n = 0;
        for (int pass = 0; pass < 2 && n == 0; pass++) {
            for (int64_t k = 0; k < kv->n_plan; k++) {
                const int32_t s = kv->plan[k];
                if (kv->plan_it[k] != pass || s >= kv->seq_cap || kv->seq[s].n_pos <= 0 || (pass == 0 && kv->ran[s] == kv->plan_id)) continue;
                bool dup = false;
                for (int32_t q = 0; q < n; q++) dup |= kv->gbs[q].seq == s;
                if (!dup) kv->gbs[n++] = (bseq){s, kv->seq[s].n_pos + 1, kv->seq[s].n_pos};
            }
        }
        if (n > 0) kv->bs = kv->gbs, kv->n_bs = n;
    }
    // (a call of its own: only the guess's blocks are held; the micro-batch's may go, COPY waiting for its kernels)
    kv->call++;
    const int64_t l0 = kv->st.loads;
    kvt_status st = fetch(kv, 0, err);
    kv->st.loads_ahead += kv->st.loads - l0;
    kv->bs = bs, kv->n_bs = n_bs;
    return st;
}

kvt_status kvt_gpu_kv_set_plan(kvt_gpu_kv *kv, const int32_t *seqs, int64_t n, kvt_err *err) {
    for (int64_t k = 0; k < kv->n_plan; k++) {
        if (kv->plan[k] >= 0 && kv->plan[k] < kv->seq_cap) kv->pit[kv->plan[k]] = -1;
    }
    kv->n_plan = 0;
    kv->plan_id++;
    if (n <= 0) return KVT_OK;
    int64_t cap = kv->cap_plan;
    int64_t cap2 = kv->cap_plan;
    if (!grow((void **)&kv->gbs, &cap, n, sizeof *kv->gbs) || !grow((void **)&kv->plan_it, &cap2, n, sizeof *kv->plan_it) ||
        !grow((void **)&kv->plan, &kv->cap_plan, n, sizeof *kv->plan))
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    memcpy(kv->plan, seqs, (size_t)n * sizeof *seqs);
    kv->n_plan = n;
    int32_t it = 0; // a new iteration starts where a sequence repeats ([a, b, a, c]: {a, b}, then {a, c})
    for (int64_t k = 0, start = 0; k < n; k++) {
        for (int64_t q = start; q < k; q++) {
            if (seqs[q] == seqs[k]) {
                it++, start = k;
                break;
            }
        }
        kv->plan_it[k] = it;
        const int32_t s = seqs[k];
        if (s >= 0 && s < kv->seq_cap && kv->pit[s] < 0) kv->pit[s] = it;
    }
    return KVT_OK;
}

void kvt_gpu_kv_tables(const kvt_gpu_kv *kv, int32_t i, int32_t j, const void *const **tk, const void *const **tv) {
    *tk = (const void *const *)kv->tk[i * kv->ng + j];
    *tv = (const void *const *)kv->tv[i * kv->ng + j];
}

uint8_t *kvt_gpu_kv_row(kvt_gpu_kv *kv, int32_t i, int32_t j, int32_t seq, int64_t pos) {
    i = i * kv->ng + j; // the block layer of head group j
    const int64_t b = pos / kv->p.block_len;
    gblk *B = &kv->B[kv->seq[seq].blk[(size_t)i * kv->mb + b]];
    const int32_t r = (int32_t)(pos % kv->p.block_len);
    B->dvalid = false; // a disk copy is stale
    if (B->vslot >= 0) { // the rows the next write-back copies
        B->dlo = B->dhi == 0 || r < B->dlo ? r : B->dlo;
        B->dhi = r + 1 > B->dhi ? r + 1 : B->dhi;
    }
    return (uint8_t *)kv->hk[i][(size_t)seq * kv->mb + b] + (pos % kv->p.block_len) * kv->p.row_bytes;
}

int64_t kvt_gpu_kv_v_offset(const kvt_gpu_kv *kv) { return kv->slot_bytes / 2; }
bool kvt_gpu_kv_resident(const kvt_gpu_kv *kv) { return kv->p.vram_bytes <= 0 && kv->p.pinned_bytes <= 0; }

kvt_status kvt_gpu_kv_reserve(kvt_gpu_kv *kv, kvt_err *err) {
    const int64_t need = kv->n_rows * kv->nv; // at most one new block per row and block layer
    int64_t *ids = malloc((size_t)(need > 0 ? need : 1) * sizeof *ids), got = 0;
    if (!ids) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    kvt_status st = KVT_OK;
    while (!st && got < need) {
        st = slot_get(kv, &kv->vram, &ids[got], err);
        if (!st && ids[got] < 0) break; // at the budget (not resident): nothing more to make
        got += !st;
    }
    for (int64_t i = got - 1; i >= 0; i--) slot_put(&kv->vram, ids[i]); // back: the next slot_get takes ids[0], as it would
    free(ids);
    return st;
}
void kvt_gpu_kv_tables_dirty(kvt_gpu_kv *kv) {
    for (int32_t i = 0; i < kv->nv; i++) memset(kv->tdirty[i], 1, (size_t)kv->seq_cap);
}

static kvt_status sync_both(kvt_gpu_kv *kv, kvt_err *err) {
    kvt_status st = kv->dw ? reads_done(kv, -1, err) : KVT_OK; // (the disk thread's reads and their loads first)
    if (st) return st;
    CU(kv->api->stream_sync(kv->ctx, KVT_CUDA_STREAM_COMPUTE), "synchronization");
    CU(kv->api->stream_sync(kv->ctx, KVT_CUDA_STREAM_COPY), "synchronization");
    kv->quiet = true;
    return kv->dw ? disk_drain(kv, err) : KVT_OK; // (every leaving slot free)
}

// Block did (new, placed by block_new outside a fetch) gets block sid's bytes, wherever sid is (both streams idle).
static kvt_status block_copy(kvt_gpu_kv *kv, int64_t sid, int64_t did, kvt_err *err) {
    const kvt_cuda_api *A = kv->api;
    const gblk *s = &kv->B[sid], *d = &kv->B[did];
    const size_t n = (size_t)kv->slot_bytes;
    kvt_status st;
    kv->quiet = false;
    if (s->vslot < 0 && s->hslot < 0) { // only on disk: read into d's host slot, or through the bounce
        char what[96];
        disk_what(s, what, sizeof what);
        uint8_t *to = d->vslot >= 0 ? kv->bounce : slot_host(kv, d->hslot);
        if ((st = kvt_tier_disk_read(&kv->disk, s->dslot, to, kv->bounce, s->crc, what, err))) return st;
        kv->st.disk_reads++;
        kv->st.disk_read_bytes += (int64_t)n;
        if (d->vslot >= 0) {
            CU(A->copy_h2d(kv->ctx, slot_dev(kv, &kv->vram, d->vslot), kv->bounce, n, KVT_CUDA_STREAM_COPY), "fork");
            CU(A->stream_sync(kv->ctx, KVT_CUDA_STREAM_COPY), "fork"); // (the bounce is reused)
            kv->st.h2d_bytes += (int64_t)n;
        }
    } else if (s->vslot >= 0 && d->vslot >= 0) {
        CU(A->copy_d2d(kv->ctx, slot_dev(kv, &kv->vram, d->vslot), slot_dev(kv, &kv->vram, s->vslot), n, KVT_CUDA_STREAM_COPY), "fork");
        kv->st.d2d_bytes += (int64_t)n;
    } else if (s->vslot >= 0) {
        CU(A->copy_d2h(kv->ctx, slot_host(kv, d->hslot), slot_dev(kv, &kv->vram, s->vslot), n, KVT_CUDA_STREAM_COPY), "fork");
        kv->st.d2h_bytes += (int64_t)n;
    } else if (d->vslot >= 0) {
        CU(A->copy_h2d(kv->ctx, slot_dev(kv, &kv->vram, d->vslot), slot_host(kv, s->hslot), n, KVT_CUDA_STREAM_COPY), "fork");
        kv->st.h2d_bytes += (int64_t)n;
    } else {
        memcpy(slot_host(kv, d->hslot), slot_host(kv, s->hslot), n); // both streams idle
        kv->st.h2h_bytes += (int64_t)n;
    }
    kv->st.transfers += d->vslot >= 0 || s->vslot >= 0;
    kv->st.fork_blocks++;
    kv->st.fork_bytes += (int64_t)n;
    if (d->vslot >= 0) { // all its rows came from s: the host copy (none yet) lacks them
        gblk *w = &kv->B[did];
        w->dlo = 0, w->dhi = (int32_t)kv->p.block_len;
    }
    return KVT_OK;
}

// seq's block idx of block layer i is shared: seq gets a copy of its own (copy on write; both streams idle).
static kvt_status block_unshare(kvt_gpu_kv *kv, int32_t seq, int32_t i, int64_t idx, kvt_err *err) {
    const int64_t old = kv->seq[seq].blk[(size_t)i * kv->mb + idx], n_blk = kv->seq[seq].n_blk[i];
    block_unref(kv, old, seq); // (first: a host eviction while placing the copy must not point seq's table at old)
    kvt_status st = block_new(kv, seq, i, idx, -1, err);
    kv->seq[seq].n_blk[i] = n_blk > idx + 1 ? n_blk : idx + 1;
    if (st) return st;
    kv->st.cow_blocks++;
    return block_copy(kv, old, kv->seq[seq].blk[(size_t)i * kv->mb + idx], err);
}

kvt_status kvt_gpu_kv_fork(kvt_gpu_kv *kv, int32_t src, int32_t dst, kvt_err *err) {
    if (src < 0 || src >= kv->seq_cap || kv->seq[src].n_pos < 0 || src == dst) return KVT_OK;
    kvt_gpu_kv_truncate(kv, dst, 0);
    gseq *D;
    kvt_status st = seq_get(kv, dst, &D, err);
    if (st || (st = sync_both(kv, err))) return st;
    const int64_t n_pos = kv->seq[src].n_pos;
    for (int32_t i = 0; i < kv->nv; i++) {
        // the blocks a sliding window freed: freed for dst too (its queries start where src's would: no later one sees
        // them), never shared or copied
        const int64_t d = kv->seq[src].n_drop[i];
        for (int64_t b = 0; b < d; b++) {
            const size_t e = (size_t)dst * kv->mb + b;
            kv->seq[dst].blk[(size_t)i * kv->mb + b] = -1;
            kv->hk[i][e] = kv->hv[i][e] = NULL;
        }
        kv->seq[dst].n_drop[i] = kv->seq[dst].n_blk[i] = d;
        kv->tdirty[i][dst] = 1;
        for (int64_t b = d; b < kv->seq[src].n_blk[i]; b++) {
            const int64_t sid = kv->seq[src].blk[(size_t)i * kv->mb + b];
            if ((b + 1) * kv->p.block_len <= n_pos) { // full: shared (a later write into it copies it first)
                gblk *B = &kv->B[sid];
                if (!grow((void **)&B->hold, &B->cap_hold, B->n_hold + 1, sizeof *B->hold))
                    return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
                B->hold[B->n_hold++] = dst;
                kv->seq[dst].blk[(size_t)i * kv->mb + b] = sid;
                kv->seq[dst].n_blk[i] = b + 1;
                place(kv, B);
                kv->st.fork_shared_blocks++;
                continue;
            }
            // the partly filled last block (the next write goes into it): copied
            if ((st = block_new(kv, dst, i, b, -1, err)) ||
                (st = block_copy(kv, sid, kv->seq[dst].blk[(size_t)i * kv->mb + b], err)))
                return st;
        }
    }
    kv->seq[dst].n_pos = n_pos;
    return sync_both(kv, err);
}

void kvt_gpu_kv_truncate(kvt_gpu_kv *kv, int32_t seq, int64_t n_keep) {
    if (seq < 0 || seq >= kv->seq_cap || kv->seq[seq].n_pos < 0) return;
    gseq *S = &kv->seq[seq];
    const int64_t keep = n_keep > 0 ? (n_keep + kv->p.block_len - 1) / kv->p.block_len : 0;
    kvt_err e;
    sync_both(kv, &e); // no kernel or copy may still use a slot that goes (a failure shows at the next call)
    for (int32_t i = 0; i < kv->nv; i++) {
        for (int64_t b = keep > S->n_drop[i] ? keep : S->n_drop[i]; b < S->n_blk[i]; b++)
            block_unref(kv, S->blk[(size_t)i * kv->mb + b], seq);
        if (S->n_blk[i] > keep) S->n_blk[i] = keep;
        if (S->n_drop[i] > keep) S->n_drop[i] = keep; // (kvt_gpu_kv_begin refuses a row whose window reaches them)
    }
    if (n_keep <= 0) {
        free(S->n_blk), free(S->n_drop), free(S->blk);
        *S = (gseq){-1, NULL, NULL, NULL};
    } else if (S->n_pos > n_keep) {
        S->n_pos = n_keep;
    }
}

void kvt_gpu_kv_get_stats(const kvt_gpu_kv *kv, kvt_gpu_kv_stats *out) {
    *out = kv->st;
    out->blocks_vram = kv->n_res;
    out->blocks_disk = 0;
    for (int64_t id = 0; id < kv->n_B; id++) out->blocks_disk += kv->B[id].n_hold > 0 && kv->B[id].vslot < 0 && kv->B[id].hslot < 0;
    out->blocks_host = kv->n_B - kv->n_free_id - kv->n_res - out->blocks_disk;
    out->disk_bytes = kv->has_disk ? kv->disk.n_used * kv->disk.slot_bytes : 0;
}
