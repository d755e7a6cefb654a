// kv_util.c - small helpers shared by the KV cache implementations.
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kv.h"

void *kvt_kv_arena_alloc(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    void *p = NULL;
    if (posix_memalign(&p, bytes >= huge ? huge : 4096, bytes ? bytes : 1)) return NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= huge) (void)madvise(p, bytes, MADV_HUGEPAGE); // a hint: the memory works without it
#endif
    return p;
}

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
