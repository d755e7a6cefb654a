// kv_policy.c - LRU, LFU, lookahead (Belady with the known schedule), spread
// (lookahead over an even partition of the schedule), attention EMA, static
// tiering and the oracle (see kv_policy.h).
#include "kv_policy.h"

#include <string.h>

// Least recently used: the longer ago, the sooner evicted.
static double lru_score(const kvt_evict_info *b, uint64_t now) { return (double)(now - b->last_use); }

// Recency as a fraction below one, for tie-breaks: in [0, 1).
static double age_frac(const kvt_evict_info *b, uint64_t now) {
    return (double)(now - b->last_use) / ((double)now + 1.0);
}

// Least frequently used; ties broken by recency (a fraction below one use).
static double lfu_score(const kvt_evict_info *b, uint64_t now) { return -(double)b->uses + age_frac(b, now); }

// Farthest next use first (Belady's MIN with the decode schedule as oracle).
static double lookahead_score(const kvt_evict_info *b, uint64_t now) {
    (void)now;
    return (double)b->next_use;
}

// Shard s streams its oldest n_s blocks, n_s = floor(f * B * (s + 1)) - floor(f * B * s) for stream share f and
// B blocks per shard: the streamed blocks add up to floor(f * B * n_shard) and lie evenly over the shards.
bool kvt_evict_streams(const kvt_evict_info *b) {
    const double f = b->stream_frac < 0 ? 0 : b->stream_frac > 1 ? 1 : b->stream_frac;
    const double per = f * (double)b->shard_blocks;
    const int64_t n = (int64_t)(per * (double)(b->shard + 1)) - (int64_t)(per * (double)b->shard);
    return b->index < n;
}

// Streamed blocks first, each class by farthest next use. Next uses are below 2^40 for any real schedule.
static double spread_score(const kvt_evict_info *b, uint64_t now) {
    (void)now;
    return (double)b->next_use + (kvt_evict_streams(b) ? 1099511627776.0 : 0.0);
}

// Lowest attention mass first; ties (and a store that exports no mass: all 0) by recency. The mass term
// is scaled so that any difference above 2^-20 outweighs recency.
static double attn_ema_score(const kvt_evict_info *b, uint64_t now) {
    return -b->attn_ema * 1048576.0 + age_frac(b, now);
}

// Fixed assignment by position: higher block indices leave first, a request's first blocks stay.
static double static_score(const kvt_evict_info *b, uint64_t now) { return (double)b->index + age_frac(b, now); }

static const kvt_evict_policy k_policies[] = {
    {"lru", lru_score, true},
    {"lfu", lfu_score, true},
    {"lookahead", lookahead_score, true},
    {"spread", spread_score, false},
    {"attn-ema", attn_ema_score, true},
    {"static", static_score, true},
    {"oracle", lookahead_score, true},
};

const kvt_evict_policy *kvt_evict_policy_find(const char *name) {
    for (size_t i = 0; name && i < sizeof k_policies / sizeof k_policies[0]; i++) {
        if (!strcmp(name, k_policies[i].name)) return &k_policies[i];
    }
    return NULL;
}

const char *kvt_evict_policy_names(void) { return "lru|lfu|lookahead|spread|attn-ema|static|oracle"; }

int64_t kvt_evict_pick(const kvt_evict_policy *p, const kvt_evict_info *cands, int64_t n, uint64_t now) {
    int64_t best = -1;
    double bs = 0;
    for (int64_t i = 0; i < n; i++) {
        double s = p->score(&cands[i], now);
        if (kvt_evict_better(s, bs, best)) {
            best = i;
            bs = s;
        }
    }
    return best;
}
