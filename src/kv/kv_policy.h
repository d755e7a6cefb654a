// kv_policy.h - eviction policies of the tiered KV store.
//
// A policy is a pure function of what the store knows about a block: when it
// was last used and how often (in logical ticks: one tick per block access,
// no wall-clock time), and how many accesses ahead the fixed decode schedule
// will need it again. It never moves data, so a simulator with a virtual
// clock can drive the same code as the real store.
#ifndef KVT_KV_POLICY_H
#define KVT_KV_POLICY_H

#include <stdint.h>

typedef struct {
    uint64_t last_use; // tick of the last access
    uint64_t uses;     // number of accesses
    int64_t next_use;  // accesses until the schedule reads the block again (INT64_MAX: never / unknown)
} kvt_evict_info;

typedef struct {
    const char *name;
    // Eviction priority of a block at tick `now`: the candidate with the highest score is evicted first.
    double (*score)(const kvt_evict_info *b, uint64_t now);
} kvt_evict_policy;

// "lru", "lfu" or "lookahead"; NULL if unknown.
const kvt_evict_policy *kvt_evict_policy_find(const char *name);
// Names of the known policies, for help texts: "lru|lfu|lookahead".
const char *kvt_evict_policy_names(void);
// Index in cands[0..n) of the block to evict (ties: the lowest index); -1 if n == 0.
int64_t kvt_evict_pick(const kvt_evict_policy *p, const kvt_evict_info *cands, int64_t n, uint64_t now);

#endif
