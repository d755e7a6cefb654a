// kv_util.c - small helpers shared by the KV cache implementations.
#include <string.h>

#include "kv.h"

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
