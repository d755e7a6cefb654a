// kv_prefetch.c - the copy-engine prefetch window and the victim filter of a prefetch (see kv_prefetch.h).
#include "kv_prefetch.h"

int32_t kvt_prefetch_window(int32_t n_shard, kvt_kv_shard_span span, const void *ud, int32_t shard, int64_t b,
                            int32_t depth, kvt_kv_pos *out) {
    int32_t k = 0;
    for (int32_t step = 0; n_shard > 0 && step <= n_shard && k < depth; step++) {
        const int32_t sh = (shard + step) % n_shard;
        int64_t first, end;
        span(ud, sh, &first, &end);
        for (int64_t i = step == 0 ? b + 1 : first; i < end && k < depth; i++) out[k++] = (kvt_kv_pos){sh, i};
    }
    return k;
}

int64_t kvt_plan_ranks(const int32_t *seqs, int64_t n, int32_t n_seq, kvt_plan_valid valid, const void *ud, int64_t *seen,
                       int64_t *rank, int32_t *order) {
    for (int32_t q = 0; q < n_seq; q++) {
        rank[q] = INT64_MAX;
        seen[q] = -1;
    }
    int64_t iter = 0, nu = 0;
    for (int64_t i = 0; i < n; i++) {
        const int32_t q = seqs[i];
        if (q < 0 || q >= n_seq || (valid && !valid(ud, q))) continue;
        if (seen[q] == iter) iter++;
        seen[q] = iter;
        if (rank[q] == INT64_MAX) {
            rank[q] = iter;
            if (order) order[nu] = q;
            nu++;
        }
    }
    return nu;
}

void kvt_plan_prefetch(const int32_t *order, int64_t nu, const int64_t *rank, int32_t n_shard, int64_t cap,
                       kvt_plan_span span, kvt_plan_visit visit, void *ud) {
    int64_t counted = 0;
    for (int64_t g0 = 0, g1 = 0; g0 < nu && counted < cap; g0 = g1) {
        for (g1 = g0; g1 < nu && rank[order[g1]] == rank[order[g0]];) g1++;
        for (int32_t k = 0; k < n_shard && counted < cap; k++) {
            for (int64_t u = g0; u < g1 && counted < cap; u++) {
                int64_t first, end;
                span(ud, order[u], k, &first, &end);
                for (int64_t j = first; j < end && counted < cap; j++, counted++) visit(ud, order[u], k, j);
            }
        }
    }
}

void kvt_plan_room_init(kvt_plan_room *R, int64_t *cnt, int64_t n, int64_t free_slots) {
    int64_t acc = 0;
    for (int64_t r = n; r >= 0; r--) { // later[r] = sum of cnt[r + 1 .. n]
        const int64_t c = cnt[r];
        cnt[r] = acc;
        acc += c;
    }
    *R = (kvt_plan_room){cnt, n, free_slots, 0};
}

bool kvt_plan_room_take(kvt_plan_room *R, int64_t rank) {
    const int64_t r = rank >= 0 && rank < R->n ? rank : R->n;
    if (R->free != INT64_MAX && R->free + R->later[r] - R->used <= 0) return false;
    R->used++;
    return true;
}
