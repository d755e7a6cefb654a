// prefix_entry.h - what the prefix-block stores (prefix_store_dir.c, prefix_store_redis.c) share: the entry
// format (a fixed header, then the payload), their counters, and a background writer of puts with a budget
// of bytes in flight. Internal to src/kv; callers use prefix_store.h.
//
// Entry = header (KVT_PREFIX_ENTRY_HEADER_BYTES, little-endian) then payload_bytes of payload:
//   0 magic "KVTPREFX" | 8 version u32 | 12 header bytes u32 | 16 model fingerprint u32 | 20 arch[16]
//   36 n_layer | 40 n_head_kv | 44 head_dim | 48 head_dim_v | 52 kv_type | 56 block_tokens | 60 layout (u32 each)
//   64 key.lo u64 | 72 key.hi u64 | 80 payload bytes u64 | 88 CRC32C u32 | 92 reserved u32 (0)
// The CRC32C covers the header (with its CRC field zero) followed by the payload.
#ifndef KVT_PREFIX_ENTRY_H
#define KVT_PREFIX_ENTRY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "prefix_store.h"

#define KVT_PREFIX_ENTRY_HEADER_BYTES 96
#define KVT_PREFIX_ENTRY_VERSION 1u

// Writes the header of the entry (id, key, a payload of payload_bytes whose CRC-32C alone is payload_crc, i.e.
// kvt_crc32c(0, payload, payload_bytes)) into hdr (KVT_PREFIX_ENTRY_HEADER_BYTES); no pass over the payload.
void kvt_prefix_entry_header(uint8_t *hdr, const kvt_prefix_identity *id, const kvt_block_key *key,
                             uint32_t payload_crc, int64_t payload_bytes);

// Checks an entry read back: hdr_len bytes of header, payload_len bytes of payload. Magic, version, header
// size, reserved field, payload size (the header's must equal payload_len) and CRC32C always; the identity
// and the key too when want_id / want_key are non-NULL. KVT_OK, or KVT_ERR_FORMAT / KVT_ERR_CHECKSUM with
// a message naming the field. *got_id / *got_key (optional) receive the header's identity and key.
kvt_status kvt_prefix_entry_check(const uint8_t *hdr, size_t hdr_len, const void *payload, size_t payload_len,
                                  const kvt_prefix_identity *want_id, const kvt_block_key *want_key,
                                  kvt_prefix_identity *got_id, kvt_block_key *got_key, kvt_err *err);

// CRC32C of the identity's fields as the header stores them (names of entries).
uint32_t kvt_prefix_identity_hash(const kvt_prefix_identity *id);

// ---- counters shared by the stores (thread-safe) ----
typedef struct {
    pthread_mutex_t mu;
    kvt_prefix_store_stats s;
} kvt_prefix_counters;

typedef enum { KVT_PGET_HIT, KVT_PGET_MISS, KVT_PGET_CORRUPT, KVT_PGET_UNAVAILABLE } kvt_prefix_get_outcome;
// SKIPPED: nothing to count beyond `asked` (an entry already present, or a put only queued so far)
typedef enum { KVT_PPUT_DONE, KVT_PPUT_SKIPPED, KVT_PPUT_FAILED, KVT_PPUT_DROPPED } kvt_prefix_put_outcome;

void kvt_prefix_counters_init(kvt_prefix_counters *c);
void kvt_prefix_counters_destroy(kvt_prefix_counters *c);
// A lookup that ended as `o`, payload bytes read on a hit, ms spent.
void kvt_prefix_count_get(kvt_prefix_counters *c, kvt_prefix_get_outcome o, int64_t bytes, double ms);
// A put asked for (asked = 1) and/or completed as `o` (asked = 0 when only its outcome is counted).
void kvt_prefix_count_put(kvt_prefix_counters *c, int asked, kvt_prefix_put_outcome o, int64_t bytes, double ms);
void kvt_prefix_counters_get(kvt_prefix_counters *c, kvt_prefix_store_stats *out);

// ---- what both stores start with, and the ops they share through it ----
typedef struct kvt_prefix_putq kvt_prefix_putq;
typedef struct {
    kvt_prefix_store base;
    kvt_prefix_counters cnt;
    kvt_prefix_putq *q; // the background writer (NULL: none)
} kvt_prefix_store_common;
// put: queues the put (counted as asked, or as dropped past the budget); q must be non-NULL
void kvt_prefix_common_put(kvt_prefix_store *s, const kvt_block_key *key, const void *payload);
void kvt_prefix_common_flush(kvt_prefix_store *s);
void kvt_prefix_common_stats(kvt_prefix_store *s, kvt_prefix_store_stats *out);

// ---- background writer: puts queued with a copy of the payload, written by one thread in batches ----
typedef struct {
    kvt_block_key key;
    void *payload; // payload_bytes, owned by the queue
    uint32_t crc;  // kvt_crc32c(0, payload, payload_bytes), computed while the queue copied it
} kvt_prefix_put_job;

// Writes n jobs (n <= the batch size given to start); counts their outcomes itself.
typedef void (*kvt_prefix_write_fn)(void *ctx, kvt_prefix_put_job *jobs, int n);

// Starts the writer thread. budget_bytes bounds the payload bytes queued or being written (a put past it is
// dropped; one put is always admitted when nothing is in flight); batch (>= 1) is the most jobs per call of
// write. KVT_ERR_NOMEM / KVT_ERR_IO (thread) otherwise.
kvt_status kvt_prefix_putq_start(int64_t payload_bytes, int64_t budget_bytes, int batch, kvt_prefix_write_fn write,
                                 void *ctx, kvt_prefix_putq **out, kvt_err *err);
// Queues a copy of payload under key; false when dropped (over budget, or out of memory).
bool kvt_prefix_putq_push(kvt_prefix_putq *q, const kvt_block_key *key, const void *payload);
// Waits until every job pushed so far has been written.
void kvt_prefix_putq_flush(kvt_prefix_putq *q);
// Flushes, stops the thread and frees the queue (NULL is fine).
void kvt_prefix_putq_stop(kvt_prefix_putq *q);

#endif
