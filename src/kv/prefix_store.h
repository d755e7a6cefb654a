// prefix_store.h - stores of full prefix-cache blocks below the live KV store (issue 12: `--kv-cache-dir`,
// issue 16: `--kv-remote`), keyed by the prefix cache's chain hash.
//
// The prefix cache (src/sched) keys every full block of a prompt by a chain hash of the token ids of that
// block and of all blocks before it. Live blocks are shared by reference inside the KV store; a
// kvt_prefix_store keeps copies of such blocks outside the process's KV tiers (files that survive a
// restart, or a Redis server that several processes share), so that a later request whose prompt starts
// with the same blocks imports them instead of recomputing them.
//
// A block's payload is the K and V of its block_tokens positions for every layer and every KV head, in
// the KV element type, in the order kvt_kv_block_export writes it (kv_block_io.h). Its size is
// kvt_kv_block_payload_bytes(kv).
//
// Identity: a store is opened for one kvt_prefix_identity. Whatever a store returns was written under the
// same identity and checked (CRC32C over header and payload); an entry of another model, KV type, layout or
// block size, a truncated or corrupt entry, an unreachable server, a timeout: all are misses (counted in the
// stats), never an error to the caller and never a wrong block.
//
// Threading: get/put/stats may be called from several threads at once.
#ifndef KVT_PREFIX_STORE_H
#define KVT_PREFIX_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "kv.h"

// Chain hash of a full block: 128 bits (two independent 64-bit lanes), over the previous block's key and
// this block's token ids (kvt_prefix_key_next in src/sched/prefix_cache.h computes it).
typedef struct {
    uint64_t lo, hi;
} kvt_block_key;

// What a stored block must have been computed with. Two identities are equal when every field is.
typedef struct {
    uint32_t model_fingerprint; // kvt_session_model_fingerprint (CRC32C of every tensor byte and the hyperparameters)
    char arch[16];              // general.architecture, NUL padded
    uint32_t n_layer, n_head_kv, head_dim, head_dim_v;
    uint32_t kv_type;           // kvt_type of K and V (F16 or F32)
    uint32_t block_tokens;      // positions per block
    uint32_t layout;            // payload layout version (kv_block_io.h: 1 = head-major per layer, K then V)
} kvt_prefix_identity;

typedef struct {
    int64_t gets, hits, misses;       // lookups, and how they ended
    int64_t miss_corrupt;             // misses because an entry failed its checks (CRC, header, identity, size)
    int64_t miss_unavailable;         // misses because the store could not be reached (I/O error, timeout, dead server)
    int64_t puts, put_failed, put_dropped; // writes asked for; failed; dropped because too many bytes were in flight
    int64_t bytes_read, bytes_written;     // payload bytes
    double read_ms, write_ms;              // time spent in reads / writes (summed over threads)
} kvt_prefix_store_stats;

typedef struct kvt_prefix_store kvt_prefix_store;

typedef struct {
    const char *name; // "dir", "redis"
    // Looks key up; on a hit copies the payload (payload_bytes, as the store was opened with) to dst and sets
    // *hit. Never fails: anything wrong is a miss (dst may have been written then: the stores read into it
    // before the checks).
    void (*get)(kvt_prefix_store *s, const kvt_block_key *key, void *dst, bool *hit);
    // Stores a copy of payload under key (may return before the write completes; payload is copied first).
    // An existing entry with the same key is left as it is. Never fails: a failed write is counted.
    void (*put)(kvt_prefix_store *s, const kvt_block_key *key, const void *payload);
    // Waits until every put issued so far has completed or failed (tests, shutdown).
    void (*flush)(kvt_prefix_store *s);
    void (*stats)(kvt_prefix_store *s, kvt_prefix_store_stats *out);
    void (*free)(kvt_prefix_store *s); // flushes first
    // Optional (NULL: get is called n times): looks up n keys at once (the Redis store pipelines them);
    // dsts[i] and hits[i] as get's dst and hit.
    void (*get_many)(kvt_prefix_store *s, const kvt_block_key *keys, int n, void *const *dsts, bool *hits);
    // Optional (NULL: the store is one level): the stores a chain is made of, nearest first, into out[cap]; returns
    // how many (kvt_prefix_store_levels).
    int (*levels)(kvt_prefix_store *s, kvt_prefix_store **out, int cap);
} kvt_prefix_store_ops;

struct kvt_prefix_store {
    const kvt_prefix_store_ops *ops;
    kvt_prefix_identity id;
    int64_t payload_bytes;
};

// A directory of files, one per block (`--kv-cache-dir DIR`), written to a temporary name and renamed, so a
// crash never leaves a partial entry under a valid name. max_bytes (0: unlimited) bounds the directory:
// least recently used entries are removed past it. KVT_ERR_IO if DIR cannot be created or written.
kvt_status kvt_prefix_store_dir_open(const char *dir, const kvt_prefix_identity *id, int64_t payload_bytes,
                                     int64_t max_bytes, kvt_prefix_store **out, kvt_err *err);

// The same with every setting: kvt_prefix_store_dir_open uses the defaults with its max_bytes.
typedef struct {
    int64_t max_bytes;      // bound of the directory's entries in bytes, headers included (0: unlimited)
    int64_t inflight_bytes; // payload bytes of puts queued for the writer thread (default 64 MiB); a put past it is
                            // dropped (put_dropped); one is always admitted when none is queued. 0: puts are
                            // written synchronously in the caller's thread
} kvt_prefix_store_dir_params;
kvt_prefix_store_dir_params kvt_prefix_store_dir_params_default(void);
// Entries are files "<identity hash>-<key>.kvb" in DIR (a fixed header of 96 bytes with a CRC32C, then the
// payload); entries of other identities may share DIR (they count against max_bytes). Entries present at open
// are indexed (least recently used first, by modification time; a hit touches its file); temporary files left
// by dead processes are removed.
kvt_status kvt_prefix_store_dir_open_params(const char *dir, const kvt_prefix_identity *id, int64_t payload_bytes,
                                            const kvt_prefix_store_dir_params *p, kvt_prefix_store **out,
                                            kvt_err *err);

// A Redis (or Valkey) server shared by several processes (`--kv-remote URL`), through hiredis: one key per block,
// "<key_prefix>:v1:<arch>:<fingerprint>:t<kv type>:L<layout>:b<block tokens>:<layers>x<kv heads>x<head dims>:<key>",
// whose value is the entry (the same 96-byte header with its CRC32C as a directory entry, then the payload), so
// that the server's eviction can never leave half an entry. Writes are SET NX (an existing entry is left as it
// is), pipelined by a writer thread under a budget of bytes in flight; reads take one of a pool of connections.
// A missing key, a failed check (the value is then deleted, so that a put can replace it), a timeout, a dead
// server are misses; after a failed connection attempt the
// server is not tried again for retry_ms (lookups are misses at once meanwhile), then reconnected.
typedef struct {
    int pool_size;          // connections for lookups and writes (default 4)
    int connect_timeout_ms; // default 500
    int command_timeout_ms; // per command (read or write of a reply), default 2000
    int retry_ms;           // pause after a failed connection attempt (default 1000)
    int pipeline;           // most commands (SETs, GETs of get_many) sent before their replies are read (default 8)
    int64_t pipeline_bytes; // and at most this many bytes of values (at least one command; default 256 KiB): large
                            // values pipelined are slower than one at a time (server and client buffers copy more)
    int64_t inflight_bytes; // payload bytes of puts queued or being written (default 64 MiB); past it put_dropped
    int64_t ttl_s;          // expiry of written keys in seconds (0: none; the server's maxmemory policy evicts)
    const char *key_prefix; // default "kvt"
} kvt_prefix_store_redis_params;
kvt_prefix_store_redis_params kvt_prefix_store_redis_params_default(void);
// url: "redis://HOST[:PORT]" (port 6379 by default; HOST may be [IPv6]) or "unix:///PATH"; p NULL: the defaults.
// Connects once to
// check the server: KVT_ERR_IO naming the URL when it cannot be reached, KVT_ERR_INVALID_ARG for a malformed URL
// or parameter, KVT_ERR_UNSUPPORTED when kvtier was built without hiredis (the message says what to install).
kvt_status kvt_prefix_store_redis_open(const char *url, const kvt_prefix_identity *id, int64_t payload_bytes,
                                       const kvt_prefix_store_redis_params *p, kvt_prefix_store **out, kvt_err *err);

// Two stores as one level below the other (`--kv-cache-dir` in front of `--kv-remote`): a lookup tries near, then
// far, and a block found far is put near too; puts go to both. Both must have been opened for the same identity and
// payload size (KVT_ERR_INVALID_ARG otherwise). Takes ownership of near and far, also on error.
kvt_status kvt_prefix_store_chain_open(kvt_prefix_store *near, kvt_prefix_store *far, kvt_prefix_store **out,
                                       kvt_err *err);

static inline void kvt_prefix_store_get(kvt_prefix_store *s, const kvt_block_key *k, void *dst, bool *hit) {
    s->ops->get(s, k, dst, hit);
}
static inline void kvt_prefix_store_get_many(kvt_prefix_store *s, const kvt_block_key *keys, int n,
                                             void *const *dsts, bool *hits) {
    if (s->ops->get_many) {
        s->ops->get_many(s, keys, n, dsts, hits);
        return;
    }
    for (int i = 0; i < n; i++) s->ops->get(s, &keys[i], dsts[i], &hits[i]);
}
static inline void kvt_prefix_store_put(kvt_prefix_store *s, const kvt_block_key *k, const void *payload) {
    s->ops->put(s, k, payload);
}
static inline void kvt_prefix_store_flush(kvt_prefix_store *s) { s->ops->flush(s); }
static inline void kvt_prefix_store_stats_get(kvt_prefix_store *s, kvt_prefix_store_stats *o) { s->ops->stats(s, o); }
// The single stores s is made of, nearest first (s itself unless it is a chain), at most cap; returns the count.
static inline int kvt_prefix_store_levels(kvt_prefix_store *s, kvt_prefix_store **out, int cap) {
    if (cap <= 0) return 0;
    if (s->ops->levels) return s->ops->levels(s, out, cap);
    out[0] = s;
    return 1;
}
static inline void kvt_prefix_store_free(kvt_prefix_store *s) {
    if (s) s->ops->free(s);
}

#endif
