// kv_prefetch.h - the paged store's copy-engine prefetch decisions, as pure functions that
// both back ends run: the real store (kv_paged.c) and the simulator (src/sim).
//
// After every read of a block, the store's copy engine queues the blocks that follow it in
// the reading sequence's decode schedule (kvt_prefetch_window), and loads each with a
// victim that the schedule needs later than the block it brings (kvt_evict_may_displace);
// a load that finds no such victim is dropped. Neither function knows about time, threads
// or copies.
#ifndef KVT_KV_PREFETCH_H
#define KVT_KV_PREFETCH_H

#include <stdbool.h>
#include <stdint.h>

// A block of a sequence: its shard (layer * n_group + group in the store; the simulator has one) and its index
// in the shard.
typedef struct {
    int32_t shard;
    int64_t block;
} kvt_kv_pos;

// Live blocks of shard `shard` of the sequence: [*first, *end) (first > 0 where a sliding window freed the
// leading ones). ud: the caller's sequence.
typedef void (*kvt_kv_shard_span)(const void *ud, int32_t shard, int64_t *first, int64_t *end);

// The prefetch window after a read of block b of shard `shard`: the next `depth` positions of the sequence's
// decode schedule, in order: blocks b+1.. of the shard, then each following shard (cyclically) from its first
// live block, over at most one cycle and back to the read shard's first blocks. Writes them to out[0..depth)
// and returns how many (fewer when the sequence holds fewer). The caller queues those that are not resident,
// in flight or queued already; the others count towards depth all the same.
int32_t kvt_prefetch_window(int32_t n_shard, kvt_kv_shard_span span, const void *ud, int32_t shard, int64_t b,
                            int32_t depth, kvt_kv_pos *out);

// The store's decode schedule, as the policies see it (kv_paged.c next_use): a block's key is
// shard x nb_ctx + index (nb_ctx: blocks per shard at the full context), whatever its sequence, and its next use
// the keys from the decode frontier `cursor` (the key of the block being read) to its key, cyclic over
// cycle = shards x nb_ctx keys. Blocks of every sequence at one (shard, index) look needed at the same step: the
// store ranks layers, not sequences.
// Both are on the victim search's path (one call per candidate), so they are inline: cycle > 0; the distance is
// ((key - cursor) mod cycle) in [0, cycle), without a division when the two keys lie within one cycle.
static inline int64_t kvt_sched_key(int64_t shard, int64_t index, int64_t nb_ctx) { return shard * nb_ctx + index; }
static inline int64_t kvt_sched_distance(int64_t key, int64_t cursor, int64_t cycle) {
    int64_t d = key - cursor;
    if (d < 0) d += cycle;
    if (d >= 0 && d < cycle) return d;
    d = (key - cursor) % cycle;
    return d < 0 ? d + cycle : d;
}

// Whether a resident block may be evicted to load another (the store's victim filter, kv_paged.c
// pick_victim). limit < 0: any block (a load the reader waits for). Else, for a prefetch, only a block of a
// later plan rank than the incoming block's (xrank), or of the same rank and needed later than `limit`
// schedule steps (the incoming block's next use; limit INT64_MAX: later ranks only). rank: the plan rank of the
// candidate's earliest planned sequence, INT64_MAX without a plan (then a prefetch only displaces blocks the
// schedule needs later than the one it brings). next_use: the candidate's schedule steps to its next read.
// Inline: it is on the victim search's path, once per candidate.
static inline bool kvt_evict_may_displace(int64_t rank, int64_t next_use, int64_t limit, int64_t xrank) {
    return limit < 0 || rank > xrank || (rank == xrank && limit < INT64_MAX && next_use > limit);
}

// attn-ema's prefetch (tierkv.txt's attention-score prefetch): after a sequence's attention over a range of blocks,
// a block whose EMA of attention mass is at least KVT_ATTN_PREFETCH_RATIO times an even share of the range's mass
// (share: what each block would get if attention were uniform over the range) is wanted in the fast tier; the
// copy engine then loads it only if the policy ranks a resident block below it (kvt_victim_pick with the block as
// KVT_VICTIM_INCOMING). The paged store (kvt_kv_paged_attn_mass, share 1 / blocks attended) and the simulator (its
// synthetic masses, share 1 / (blocks + 5)) both ask this.
#define KVT_ATTN_PREFETCH_RATIO 1.25
static inline bool kvt_attn_prefetch_wanted(double ema, double share) { return ema >= KVT_ATTN_PREFETCH_RATIO * share; }

// The scheduler's plan (kvt_kv_paged_set_plan; the simulator's plan_iters): seqs[0 .. n) are the sequences of the
// next iterations in run order; a new iteration begins where a sequence repeats within the current one. Entries
// outside [0, n_seq), or for which valid(ud, q) is false (valid NULL: all valid), are skipped. Writes rank[q] for
// every q in [0, n_seq): the iteration of q's first appearance (its plan rank: the store evicts blocks of later ranks
// first), INT64_MAX if it does not appear; and order[0 .. return): the planned sequences by first appearance, so by
// rank (order may be NULL). seen: scratch [n_seq]. No allocation.
typedef bool (*kvt_plan_valid)(const void *ud, int32_t q);
int64_t kvt_plan_ranks(const int32_t *seqs, int64_t n, int32_t n_seq, kvt_plan_valid valid, const void *ud, int64_t *seen,
                       int64_t *rank, int32_t *order);

// The plan's prefetch order: the blocks of the planned sequences order[0 .. nu) (rank: from kvt_plan_ranks),
// iteration by iteration, each iteration in decode order (shard by shard over its sequences, each sequence's live
// blocks [first, end) of the shard from span, in order); the first `cap` of them (the fast and host tiers hold cap
// blocks; blocks already resident count too). visit(ud, seq, shard, block) for each, in that order: the caller
// queues those not resident, in flight or queued (as the copy engine's loads with limit INT64_MAX and the block's
// rank: kvt_evict_may_displace) whose load finds room (kvt_plan_room_take below), or that the host tier can stage.
typedef void (*kvt_plan_span)(void *ud, int32_t seq, int32_t shard, int64_t *first, int64_t *end);
typedef void (*kvt_plan_visit)(void *ud, int32_t seq, int32_t shard, int64_t block);
void kvt_plan_prefetch(const int32_t *order, int64_t nu, const int64_t *rank, int32_t n_shard, int64_t cap,
                       kvt_plan_span span, kvt_plan_visit visit, void *ud);

// The fast tier's room for the plan's loads, as its callers (the store and the simulator) queue them in
// kvt_plan_prefetch's order: a planned load of rank r enters a full fast tier only over a resident block of a later
// rank (kvt_evict_may_displace with limit INT64_MAX), and the copy engine takes the queue in order, so the loads
// queued before it took the free slots, then the latest ranks' blocks, first. A planned block whose load can find no
// room is not queued for the fast tier: with every running sequence in the plan's first iteration (one rank), a
// full fast tier has no later rank at all, and queuing every planned block below it each iteration cost a copy
// thread's victim search per block for nothing, and kept those blocks out of the decode schedule's own prefetch
// (a block is queued once) until the copy threads had gone through them.
typedef struct {
    const int64_t *later; // [n + 1]: later[r] = resident blocks of a rank > r (r = n: 0)
    int64_t n;            // ranks counted one by one (0 .. n - 1); a rank >= n (INT64_MAX: unplanned) counts as n
    int64_t free;         // free slots of the fast tier (INT64_MAX: unbounded)
    int64_t used;         // loads counted so far
} kvt_plan_room;

// cnt[0 .. n]: the fast tier's resident blocks that may go (not held), by plan rank (cnt[n]: rank n or later, or
// unplanned); turned in place into the counts of later ranks (R->later). free_slots: the fast tier's free slots.
void kvt_plan_room_init(kvt_plan_room *R, int64_t *cnt, int64_t n, int64_t free_slots);
// Whether a planned load of plan rank `rank` finds room after the loads counted so far; if so, it is counted.
bool kvt_plan_room_take(kvt_plan_room *R, int64_t rank);

#endif
