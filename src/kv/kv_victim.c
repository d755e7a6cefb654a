// kv_victim.c - the victim search of a tier, shared by the paged store and the simulator (see kv_victim.h).
#include "kv_victim.h"

#include <stdlib.h>

#include "kv_prefetch.h"

bool kvt_victim_trace_init(kvt_victim_trace *tr, int64_t cap) {
    tr->n = 0;
    tr->chosen = -1;
    tr->cap = cap > 0 ? cap : 1;
    tr->info = malloc((size_t)tr->cap * sizeof *tr->info);
    if (tr->info) return true;
    tr->cap = 0;
    return false;
}

void kvt_victim_trace_free(kvt_victim_trace *tr) {
    free(tr->info);
    tr->info = NULL;
    tr->cap = tr->n = 0;
    tr->chosen = -1;
}

// Steps 1 and 2: the block may go at all.
static inline bool eligible(const kvt_victim_query *q, const kvt_victim_cand *c) {
    if (c->flags & KVT_VICTIM_HELD) return false;
    return q->limit < 0 || kvt_evict_may_displace(c->rank, c->rank == q->xrank ? c->sched_next : 0, q->limit, q->xrank);
}

int64_t kvt_victim_pick(const kvt_victim_query *q, const kvt_victim_cand *cands, int64_t n, kvt_victim_info_fn info,
                        void *ud, kvt_victim_trace *tr) {
    if (!q || !q->pol || n < 0 || (n > 0 && (!cands || !info)) || (tr && n > tr->cap)) return -2;
    const bool classes = !q->fast_tier || q->pol->clean_first;
    // steps 3 and 4: the latest rank among the blocks that may go, and whether a clean one of that rank exists
    int64_t rank = 0;
    bool found = false, clean = false;
    for (int64_t i = 0; i < n; i++) {
        const kvt_victim_cand *c = &cands[i];
        if ((c->flags & KVT_VICTIM_INCOMING) || !eligible(q, c)) continue;
        const bool ci = classes && (c->flags & KVT_VICTIM_CLEAN);
        if (!found || c->rank > rank) {
            rank = c->rank;
            clean = ci;
            found = true;
        } else if (c->rank == rank) clean |= ci;
    }
    // step 5 over that class (and an incoming block), in window order: kvt_evict_pick's rule, the candidates scored
    // as they come
    int64_t best = -1, n_class = 0, chosen = -1;
    double bs = 0;
    for (int64_t i = 0; i < n; i++) {
        const kvt_victim_cand *c = &cands[i];
        if (!(c->flags & KVT_VICTIM_INCOMING)) {
            if (!found || c->rank != rank || !eligible(q, c)) continue;
            if (classes && ((c->flags & KVT_VICTIM_CLEAN) != 0) != clean) continue;
        }
        kvt_evict_info b;
        info(ud, c->id, &b);
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
