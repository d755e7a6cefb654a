// kv_policy.h - eviction policies of the tiered KV store.
//
// A policy is a pure function of what the store knows about a block: when it
// was last used and how often (in logical ticks: one tick per block access,
// no wall-clock time), how many accesses ahead the fixed decode schedule
// will need it again, and where it sits in the schedule. It never moves data,
// so a simulator with a virtual clock can drive the same code as the real
// store.
//
// "spread" exists because lookahead (Belady's MIN) is optimal in bytes but
// not in time: under the cyclic decode scan its victim is always the block
// just read, so the blocks it leaves out of the fast tier form one run of
// consecutive schedule positions, and their loads come in one burst that no
// prefetch depth can overlap (a load may only start once its victim has been
// read). spread fixes which blocks stream, evenly over the schedule (the
// oldest blocks of every shard, in the share the fast tier cannot hold), and
// applies lookahead to them first: about the same bytes, one load per shard
// at a time, overlapped with the compute of the shards before it.
#ifndef KVT_KV_POLICY_H
#define KVT_KV_POLICY_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    uint64_t last_use; // tick of the last access
    uint64_t uses;     // number of accesses
    int64_t next_use;  // accesses until the schedule reads the block again (INT64_MAX: never / unknown)
    // placement in the schedule (used by "spread")
    int64_t shard;        // ordinal of the block's shard in the decode schedule (layer * n_group + group)
    int64_t index;        // block index in its shard (0: oldest positions)
    int64_t shard_blocks; // blocks per shard
    double stream_frac;   // share of all blocks the fast tier cannot keep, with slack for reads and loads in
                          // flight, in [0, 1]; set by the store from its budget
    // Exponential moving average of the block's share of attention mass (softmax weight summed over the
    // block's positions, averaged over heads), in [0, 1]; used by "attn-ema". The simulator (src/sim) sets
    // it from a synthetic mass; the paged store from the mass decode attention reports
    // (kvt_kv_paged_attn_mass, src/attn/attention.h); 0 for a block never attended in decode (attn-ema then
    // ranks by recency). Last member on purpose: positional initializers of the first seven stay valid.
    double attn_ema;
} kvt_evict_info;

typedef struct {
    const char *name;
    // Eviction priority of a block at tick `now`: the candidate with the highest score is evicted first.
    double (*score)(const kvt_evict_info *b, uint64_t now);
    // Whether the store prefers victims with a copy below (no write-back) over the score.
    bool clean_first;
} kvt_evict_policy;

// The policies:
//   lru        least recently used                lfu     least frequently used, ties by recency
//   lookahead  farthest next use (Belady's MIN with the known schedule: in a serving store the
//              continuous-batching scheduler's next batches, TierKV's scheduler-driven policy)
//   spread     see above
//   attn-ema   lowest attention-mass EMA first (InfiniGen-style prediction, no schedule), ties by recency
//   static     static tiering: a fixed assignment by position, the request's first blocks stay; of the
//              others the highest index goes first, ties by recency
//   oracle     the score of lookahead, fed by perfect future knowledge: the simulator fills next_use
//              from the future it knows (finishing requests included); a real store can only give it the
//              scheduler's known lookahead, where it is lookahead
// True if block b is one of those "spread" streams through the fast tier (the others stay there).
bool kvt_evict_streams(const kvt_evict_info *b);
// A policy by name (one of kvt_evict_policy_names()); NULL if unknown.
const kvt_evict_policy *kvt_evict_policy_find(const char *name);
// Names of the known policies, for help texts: "lru|lfu|lookahead|spread|attn-ema|static|oracle".
const char *kvt_evict_policy_names(void);
// Whether a candidate of score s beats the best so far (score bs; best < 0: none yet): the highest score is
// evicted, ties go to the earlier candidate. kvt_evict_pick and the victim search (kv_victim.h) both decide by it.
static inline bool kvt_evict_better(double s, double bs, int64_t best) { return best < 0 || s > bs; }
// Index in cands[0..n) of the block to evict (ties: the lowest index); -1 if n == 0.
int64_t kvt_evict_pick(const kvt_evict_policy *p, const kvt_evict_info *cands, int64_t n, uint64_t now);

#endif
