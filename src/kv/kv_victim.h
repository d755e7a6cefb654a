// kv_victim.h - which resident block a tier gives up: the victim search of the paged store (kv_paged.c) and
// of the simulator (src/sim), as pure functions that both call, so that the two cannot choose differently.
//
// A search examines a window of the tier's resident blocks (kvt_victim_window: at most `size` of them, a
// window that moves on at every search; the resident list is in no particular order, so the windows sample
// it, as approximate LRU caches do). The caller describes each block of the window on request (a
// kvt_victim_cand_fn: plan rank, held / clean flags, schedule distance) and kvt_victim_pick chooses, in this
// order:
//   1. a held block (pinned by a reader, busy, in flight) never goes;
//   2. for a prefetch (limit >= 0), only a block that kvt_evict_may_displace (kv_prefetch.h) admits;
//   3. the latest plan rank first (INT64_MAX: not planned, or no plan: every block then has that rank);
//   4. within that rank, clean blocks first (kvt_victim_clean: evicting them costs no write), where the
//      distinction counts: in a lower tier always, in the fast tier where the policy is clean_first;
//   5. within that class, kvt_evict_pick (kv_policy.h) on the blocks' kvt_evict_info, ties to the earliest
//      block of the window.
// Nothing here knows about time, threads, copies or the caller's block tables; nothing allocates. kvt_evict_info
// is computed (by the caller's callback) only for the blocks of the class that competes in step 5, from the first
// of them on; the class search stops at a candidate nothing can beat. The search is inline in this header: at each
// caller the compiler turns the callbacks into inlined direct calls, so the shared search is as fast as a loop
// written there (it is on the store's hot path, and most of the simulator's time).
#ifndef KVT_KV_VICTIM_H
#define KVT_KV_VICTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "kv_policy.h"
#include "kv_prefetch.h"

// The search and the callers' callbacks (victim_cand, victim_info in kv_paged.c and sim.c) are forced inline where
// the compiler allows: as calls, up to three per candidate cost the store a fifth of its search time
// (tools/bench/victim_bench.c).
#if defined(__GNUC__)
#define KVT_VICTIM_INLINE static inline __attribute__((always_inline))
#else
#define KVT_VICTIM_INLINE static inline
#endif

// Resident blocks examined per eviction by default (the paged store's victim_window, the device KV's window).
#define KVT_VICTIM_WINDOW_DEFAULT 256

// The window of one victim search over a list of n resident blocks: at most `size` (>= 1) of them, all of them
// when there are fewer, from position *pos (mod n); when the list is longer than the window, *pos moves on past
// it (the next search starts there). Returns the window's length m and sets *start: the window is
// list[(*start + k) % n] for k in [0, m).
static inline int64_t kvt_victim_window(int64_t n, int64_t size, int64_t *pos, int64_t *start) {
    const int64_t m = n < size ? n : size;
    *start = n > m ? *pos % n : 0;
    if (n > m) *pos = (*start + m) % n;
    return m;
}

// Whether dropping a block's copy from a tier costs no write (another up-to-date copy remains). fast_tier: the
// copy in the fast tier, which is clean with a disk copy, or a host copy where host_counts (the simulator's
// default; the paged store's evictions to host cost only a memcpy, so there a host copy does not count), and
// never when several sequences share the block (shared: it gets the first disk copy and preferring it would
// reload it for every sharer). A lower tier's copy (host) is clean with a copy in the fast tier or on disk.
// in_fast / in_host / on_disk: the block has an up-to-date copy there.
static inline bool kvt_victim_clean(bool fast_tier, bool in_fast, bool in_host, bool on_disk, bool host_counts, bool shared) {
    return fast_tier ? !shared && (on_disk || (host_counts && in_host)) : in_fast || on_disk;
}

enum {
    KVT_VICTIM_HELD = 1,     // may not go: pinned by a reader, busy, or in flight
    KVT_VICTIM_CLEAN = 2,    // kvt_victim_clean
    KVT_VICTIM_INCOMING = 4, // the block a prefetch would bring (not resident): not filtered by steps 1-4, it competes
                             // in step 5 with the class of the others; picked, the prefetch does not happen (the
                             // simulator's admission of a prefetch by the policy, tierkv.txt Alg. 1)
};

// One block of the window, in window order.
typedef struct {
    int64_t id;         // the caller's block id, handed to the info callback (for the candidates of step 5)
    int64_t rank;       // plan rank: the plan iteration of the earliest planned sequence holding it (INT64_MAX:
                        // none, or no plan); a later rank goes first
    int64_t sched_next; // schedule steps to the block's next read (kvt_sched_distance): read only by the prefetch
                        // filter, i.e. when limit >= 0 and rank == xrank (the caller may leave it 0 otherwise)
    uint32_t flags;     // KVT_VICTIM_*
} kvt_victim_cand;

// What one search is for.
typedef struct {
    const kvt_evict_policy *pol; // the tier's eviction policy
    bool fast_tier;              // the fast tier (clean first only where pol->clean_first) or a lower one (always)
    int64_t limit;               // < 0: any block (a load the reader waits for); >= 0: a prefetch's victim filter
                                 // (kvt_evict_may_displace), limit the incoming block's schedule distance, INT64_MAX:
                                 // later plan ranks only
    int64_t xrank;               // plan rank of the incoming block (INT64_MAX: none), read when limit >= 0
    uint64_t now;                // the policies' clock (ticks)
    bool none_clean;             // the caller knows that no candidate can be clean (the store's fast tier without a
                                 // disk tier): step 4 is skipped, which gives the same victim sooner
} kvt_victim_query;

// Fills *out with the description of candidate k (0 .. n - 1, in window order) of the search. Called up to twice per
// candidate (the class, then the competitors): it must give the same answer both times. ud: the caller's store.
typedef void (*kvt_victim_cand_fn)(void *ud, int64_t k, kvt_victim_cand *out);
// Fills *out with the policy inputs of block `id` (the caller's state: last use, uses, next use, shard, index, EMA
// mass ...). ud: the caller's store.
typedef void (*kvt_victim_info_fn)(void *ud, int64_t id, kvt_evict_info *out);

// A trace of one search (optional; the simulator's on_pick hands it to tests), owned by the caller and sized once:
// cap >= the most candidates of one search. After a search, info[0 .. n) are the candidates that competed in step 5,
// in window order, and chosen is the index in info of the victim (-1: none): kvt_evict_pick(pol, info, n, now) ==
// chosen.
typedef struct {
    kvt_evict_info *info; // [cap]
    int64_t cap;
    int64_t n;
    int64_t chosen;
} kvt_victim_trace;

// Allocates info for cap candidates. Returns false when out of memory (then nothing is held).
bool kvt_victim_trace_init(kvt_victim_trace *tr, int64_t cap);
void kvt_victim_trace_free(kvt_victim_trace *tr);

// The victim among the n candidates of the window that cand describes: its index k in the window, -1 if no
// candidate qualifies, -2 on bad arguments (a NULL pointer; n > tr->cap with a trace). Calls info for every
// candidate of the competing class, in window order, and scores it at once (tr may be NULL).
KVT_VICTIM_INLINE bool kvt_victim_eligible_(const kvt_victim_query *q, const kvt_victim_cand *c) { // steps 1 and 2
    if (c->flags & KVT_VICTIM_HELD) return false;
    return q->limit < 0 || kvt_evict_may_displace(c->rank, c->rank == q->xrank ? c->sched_next : 0, q->limit, q->xrank);
}

// With a trace: two passes, the class first (steps 3 and 4), then step 5 over that class alone, so that the trace
// holds exactly the competitors.
KVT_VICTIM_INLINE int64_t kvt_victim_pick_traced_(const kvt_victim_query *q, int64_t n, kvt_victim_cand_fn cand,
                                                  kvt_victim_info_fn info, void *ud, kvt_victim_trace *tr) {
    const bool classes = !q->none_clean && (!q->fast_tier || q->pol->clean_first);
    // steps 3 and 4: the latest rank among the blocks that may go, and whether a clean one of that rank exists (no
    // candidate can beat a clean one of rank INT64_MAX, or where clean does not count one of that rank: stop there);
    // first: the first candidate of the class found so far (the class only rises, so no candidate of the final
    // class comes before it: step 5 starts there)
    int64_t rank = 0, first = 0;
    bool found = false, clean = false, incoming = false; // incoming: seen (the loop sees every candidate until found)
    kvt_victim_cand c;
    for (int64_t i = 0; i < n && !(found && rank == INT64_MAX && (clean || !classes)); i++) {
        cand(ud, i, &c);
        incoming |= (c.flags & KVT_VICTIM_INCOMING) != 0;
        if ((c.flags & KVT_VICTIM_INCOMING) || !kvt_victim_eligible_(q, &c)) continue;
        const bool ci = classes && (c.flags & KVT_VICTIM_CLEAN);
        if (!found || c.rank > rank || (c.rank == rank && ci && !clean)) {
            rank = c.rank;
            clean = ci;
            found = true;
            first = i;
        }
    }
    // step 5 over that class (and an incoming block), in window order: kvt_evict_pick's rule, the candidates scored
    // as they come; with no class and no incoming block nothing qualifies: no second pass over the window (a
    // prefetch that no block may make room for, the common case of a full fast tier)
    int64_t best = -1, n_class = 0, chosen = -1;
    double bs = 0;
    if (!found && !incoming) first = n;
    for (int64_t i = first; i < n; i++) {
        cand(ud, i, &c);
        if (!(c.flags & KVT_VICTIM_INCOMING)) {
            if (!found || c.rank != rank || !kvt_victim_eligible_(q, &c)) continue;
            if (classes && ((c.flags & KVT_VICTIM_CLEAN) != 0) != clean) continue;
        }
        kvt_evict_info b;
        info(ud, c.id, &b);
        const double sc = q->pol->score(&b, q->now);
        if (kvt_evict_better(sc, bs, best)) {
            best = i;
            bs = sc;
            chosen = n_class;
        }
        if (tr) tr->info[n_class] = b;
        n_class++;
    }
    if (tr) {
        tr->n = n_class;
        tr->chosen = chosen;
    }
    return best;
}

// The search proper (no trace): one pass over the window that keeps, for the latest rank seen so far, the best
// candidate of each class (clean, and the others) and the best incoming block; the class and its winner are those
// of the two-pass search (kvt_victim_pick_traced_: the same victim, tests/test_sim.c compares them on random
// windows), but each candidate is described once instead of twice. On the store's prefetch path at rho 5 (a full
// fast tier, every block dirty and of one rank) the two passes described every candidate twice, its schedule distance
// computed up to three times (docs/log/BENCHMARKS-serve.md, 2026-11-28 evening: the search was 10.6% of the decode samples
// there, ~5% after this and the store's prefetching of the window's blocks). The policy
// inputs are computed for every candidate of the latest rank so far (a candidate of a rank that a later one
// outranks was scored for nothing: cheap beside the block's read).
KVT_VICTIM_INLINE int64_t kvt_victim_pick(const kvt_victim_query *q, int64_t n, kvt_victim_cand_fn cand,
                                          kvt_victim_info_fn info, void *ud, kvt_victim_trace *tr) {
    if (!q || !q->pol || n < 0 || (n > 0 && (!cand || !info)) || (tr && n > tr->cap)) return -2;
    if (tr) return kvt_victim_pick_traced_(q, n, cand, info, ud, tr);
    const bool classes = !q->none_clean && (!q->fast_tier || q->pol->clean_first);
    int64_t rank = 0, best[2] = {-1, -1}, inc = -1; // best[1]: clean class, best[0]: the others (all without classes)
    double bs[2] = {0, 0}, is = 0;
    bool found = false;
    kvt_victim_cand c;
    for (int64_t i = 0; i < n; i++) {
        cand(ud, i, &c);
        const bool incoming = (c.flags & KVT_VICTIM_INCOMING) != 0;
        if (!incoming) {
            if (!kvt_victim_eligible_(q, &c) || (found && c.rank < rank)) continue;
            if (!found || c.rank > rank) {
                rank = c.rank;
                found = true;
                best[0] = best[1] = -1;
            }
        }
        kvt_evict_info b;
        info(ud, c.id, &b);
        const double sc = q->pol->score(&b, q->now);
        if (incoming) {
            if (kvt_evict_better(sc, is, inc)) inc = i, is = sc;
            continue;
        }
        const int k = classes && (c.flags & KVT_VICTIM_CLEAN) ? 1 : 0;
        if (kvt_evict_better(sc, bs[k], best[k])) best[k] = i, bs[k] = sc;
    }
    const int k = best[1] >= 0 ? 1 : 0;
    if (inc < 0) return best[k];
    if (best[k] < 0) return inc;
    // the class's winner against the incoming block: the higher score, a tie to the earlier in window order
    return is > bs[k] || (is == bs[k] && inc < best[k]) ? inc : best[k];
}

#endif
