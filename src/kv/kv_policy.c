// kv_policy.c - LRU, LFU and lookahead (Belady with the known schedule).
#include "kv_policy.h"

#include <string.h>

// Least recently used: the longer ago, the sooner evicted.
static double lru_score(const kvt_evict_info *b, uint64_t now) { return (double)(now - b->last_use); }

// Least frequently used; ties broken by recency (a fraction below one use).
static double lfu_score(const kvt_evict_info *b, uint64_t now) {
    double age = (double)(now - b->last_use) / ((double)now + 1.0);
    return -(double)b->uses + age;
}

// Farthest next use first (Belady's MIN with the decode schedule as oracle).
static double lookahead_score(const kvt_evict_info *b, uint64_t now) {
    (void)now;
    return (double)b->next_use;
}

static const kvt_evict_policy k_policies[] = {
    {"lru", lru_score},
    {"lfu", lfu_score},
    {"lookahead", lookahead_score},
};

const kvt_evict_policy *kvt_evict_policy_find(const char *name) {
    for (size_t i = 0; name && i < sizeof k_policies / sizeof k_policies[0]; i++) {
        if (!strcmp(name, k_policies[i].name)) return &k_policies[i];
    }
    return NULL;
}

const char *kvt_evict_policy_names(void) { return "lru|lfu|lookahead"; }

int64_t kvt_evict_pick(const kvt_evict_policy *p, const kvt_evict_info *cands, int64_t n, uint64_t now) {
    int64_t best = -1;
    double bs = 0;
    for (int64_t i = 0; i < n; i++) {
        double s = p->score(&cands[i], now);
        if (best < 0 || s > bs) {
            best = i;
            bs = s;
        }
    }
    return best;
}
