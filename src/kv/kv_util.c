// kv_util.c - small helpers shared by the KV cache implementations.
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "../base/hugemem.h"

void *kvt_kv_arena_alloc(size_t bytes) { return kvt_alloc_huge(bytes, bytes >= KVT_HUGE_PAGE); }

const char *kvt_tier_name(kvt_tier t) {
    switch (t) {
    case KVT_TIER_FAST: return "fast";
    case KVT_TIER_HOST: return "host";
    case KVT_TIER_DISK: return "disk";
    default: return "?";
    }
}

void kvt_kv_get_stats(kvt_kv *kv, kvt_kv_stats *out) {
    memset(out, 0, sizeof *out);
    if (kv && kv->ops->stats) kv->ops->stats(kv, out);
}
