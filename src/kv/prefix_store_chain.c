// prefix_store_chain.c - two prefix-block stores as one (kvt_prefix_store_chain_open, prefix_store.h): a near
// store (the local directory, `--kv-cache-dir`) in front of a far one (Redis, `--kv-remote`). A lookup tries
// near, then far; a block found far is also put near, so the next lookup of it stays local. Puts go to both.
// Each level keeps its own counters (kvt_prefix_store_levels lists them for /metrics); the chain's own
// counters are lookups as the caller sees them.
#include <stdlib.h>
#include <string.h>

#include "../base/timer.h"
#include "prefix_entry.h"

typedef struct {
    kvt_prefix_store base;
    kvt_prefix_store *near, *far; // owned
    kvt_prefix_counters cnt;      // lookups through the chain (a hit at either level is a hit)
} chain_store;

static void chain_get_many(kvt_prefix_store *b, const kvt_block_key *keys, int n, void *const *dsts, bool *hits) {
    chain_store *s = (chain_store *)b;
    if (n <= 0) return; // (also tells the compiler the scratch sizes below are positive: -O1 asan builds)
    const double t0 = kvt_time_ms();
    kvt_prefix_store_get_many(s->near, keys, n, dsts, hits);
    // the near misses, in order, go to the far store in one call (it pipelines them)
    kvt_block_key *mk = malloc((size_t)n * sizeof *mk);
    void **md = malloc((size_t)n * sizeof *md);
    bool *mh = malloc((size_t)n * sizeof *mh);
    int *mi = malloc((size_t)n * sizeof *mi);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (hits[i]) continue;
        if (mk && md && mh && mi) {
            mk[m] = keys[i];
            md[m] = dsts[i];
            mi[m++] = i;
        } else { // out of memory for the batch: one at a time
            kvt_prefix_store_get(s->far, &keys[i], dsts[i], &hits[i]);
            if (hits[i]) kvt_prefix_store_put(s->near, &keys[i], dsts[i]);
        }
    }
    if (m > 0) {
        kvt_prefix_store_get_many(s->far, mk, m, md, mh);
        for (int j = 0; j < m; j++) {
            hits[mi[j]] = mh[j];
            if (mh[j]) kvt_prefix_store_put(s->near, &mk[j], md[j]); // write-back: the near store copies it first
        }
    }
    free(mk);
    free(md);
    free(mh);
    free(mi);
    const double dt = (kvt_time_ms() - t0) / n;
    for (int i = 0; i < n; i++)
        kvt_prefix_count_get(&s->cnt, hits[i] ? KVT_PGET_HIT : KVT_PGET_MISS, hits[i] ? b->payload_bytes : 0, dt);
}

static void chain_get(kvt_prefix_store *b, const kvt_block_key *key, void *dst, bool *hit) {
    void *d[1] = {dst};
    chain_get_many(b, key, 1, d, hit);
}

static void chain_put(kvt_prefix_store *b, const kvt_block_key *key, const void *payload) {
    chain_store *s = (chain_store *)b;
    kvt_prefix_count_put(&s->cnt, 1, KVT_PPUT_SKIPPED, 0, 0); // written (and counted) by each level
    kvt_prefix_store_put(s->near, key, payload);
    kvt_prefix_store_put(s->far, key, payload);
}

static void chain_flush(kvt_prefix_store *b) {
    chain_store *s = (chain_store *)b;
    kvt_prefix_store_flush(s->near);
    kvt_prefix_store_flush(s->far);
}

static void chain_stats(kvt_prefix_store *b, kvt_prefix_store_stats *out) {
    chain_store *s = (chain_store *)b;
    kvt_prefix_counters_get(&s->cnt, out);
}

static void chain_free(kvt_prefix_store *b) {
    chain_store *s = (chain_store *)b;
    kvt_prefix_store_free(s->near);
    kvt_prefix_store_free(s->far);
    kvt_prefix_counters_destroy(&s->cnt);
    free(s);
}

static int chain_levels(kvt_prefix_store *b, kvt_prefix_store **out, int cap) {
    chain_store *s = (chain_store *)b;
    int n = kvt_prefix_store_levels(s->near, out, cap);
    return n + kvt_prefix_store_levels(s->far, out + n, cap - n);
}

static const kvt_prefix_store_ops chain_ops = {"chain",     chain_get,  chain_put,     chain_flush,
                                               chain_stats, chain_free, chain_get_many, chain_levels};

kvt_status kvt_prefix_store_chain_open(kvt_prefix_store *near, kvt_prefix_store *far, kvt_prefix_store **out,
                                       kvt_err *err) {
    *out = NULL;
    if (!near || !far || near->payload_bytes != far->payload_bytes ||
        memcmp(&near->id, &far->id, sizeof near->id) != 0) {
        kvt_prefix_store_free(near);
        kvt_prefix_store_free(far);
        return kvt_errorf(err, KVT_ERR_INVALID_ARG,
                          "prefix store chain: the two stores must be opened for the same identity and block size");
    }
    chain_store *s = calloc(1, sizeof *s);
    if (!s) {
        kvt_prefix_store_free(near);
        kvt_prefix_store_free(far);
        return kvt_errorf(err, KVT_ERR_NOMEM, "prefix store chain: out of memory");
    }
    kvt_prefix_counters_init(&s->cnt);
    s->base.ops = &chain_ops;
    s->base.id = near->id;
    s->base.payload_bytes = near->payload_bytes;
    s->near = near;
    s->far = far;
    *out = &s->base;
    return KVT_OK;
}
