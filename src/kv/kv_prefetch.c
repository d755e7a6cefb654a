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

bool kvt_evict_may_displace(int64_t rank, int64_t next_use, int64_t limit, int64_t xrank) {
    return limit < 0 || rank > xrank || (rank == xrank && limit < INT64_MAX && next_use > limit);
}

