// prefix_entry.c - entry format, counters and background writer shared by the prefix-block stores.
#include "prefix_entry.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../base/crc32c.h"

static const char k_magic[8] = {'K', 'V', 'T', 'P', 'R', 'E', 'F', 'X'};

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

// bytes 16..63: the identity
static void id_write(uint8_t *p, const kvt_prefix_identity *id) {
    put32(p + 16, id->model_fingerprint);
    memcpy(p + 20, id->arch, 16);
    const uint32_t f[7] = {id->n_layer, id->n_head_kv, id->head_dim, id->head_dim_v, id->kv_type, id->block_tokens,
                           id->layout};
    for (int i = 0; i < 7; i++) put32(p + 36 + 4 * i, f[i]);
}
static void id_read(const uint8_t *p, kvt_prefix_identity *id) {
    memset(id, 0, sizeof *id);
    id->model_fingerprint = get32(p + 16);
    memcpy(id->arch, p + 20, 16);
    uint32_t *f[7] = {&id->n_layer, &id->n_head_kv, &id->head_dim, &id->head_dim_v, &id->kv_type, &id->block_tokens,
                      &id->layout};
    for (int i = 0; i < 7; i++) *f[i] = get32(p + 36 + 4 * i);
}

uint32_t kvt_prefix_identity_hash(const kvt_prefix_identity *id) {
    uint8_t b[KVT_PREFIX_ENTRY_HEADER_BYTES] = {0};
    id_write(b, id);
    return kvt_crc32c(0, b + 16, 48);
}

void kvt_prefix_entry_header(uint8_t *hdr, const kvt_prefix_identity *id, const kvt_block_key *key,
                             uint32_t payload_crc, int64_t payload_bytes) {
    memset(hdr, 0, KVT_PREFIX_ENTRY_HEADER_BYTES);
    memcpy(hdr, k_magic, 8);
    put32(hdr + 8, KVT_PREFIX_ENTRY_VERSION);
    put32(hdr + 12, KVT_PREFIX_ENTRY_HEADER_BYTES);
    id_write(hdr, id);
    put64(hdr + 64, key->lo);
    put64(hdr + 72, key->hi);
    put64(hdr + 80, (uint64_t)payload_bytes);
    // the CRC of header then payload, from the two CRCs
    const uint32_t crc = kvt_crc32c(0, hdr, KVT_PREFIX_ENTRY_HEADER_BYTES);
    put32(hdr + 88, kvt_crc32c_combine(crc, payload_crc, (uint64_t)payload_bytes));
}

static const char *id_diff(const kvt_prefix_identity *a, const kvt_prefix_identity *b) {
    if (a->model_fingerprint != b->model_fingerprint) return "model fingerprint";
    if (memcmp(a->arch, b->arch, sizeof a->arch) != 0) return "architecture";
    if (a->n_layer != b->n_layer) return "n_layer";
    if (a->n_head_kv != b->n_head_kv) return "n_head_kv";
    if (a->head_dim != b->head_dim || a->head_dim_v != b->head_dim_v) return "head_dim";
    if (a->kv_type != b->kv_type) return "KV type";
    if (a->block_tokens != b->block_tokens) return "block size";
    if (a->layout != b->layout) return "layout";
    return NULL;
}

kvt_status kvt_prefix_entry_check(const uint8_t *hdr, size_t hdr_len, const void *payload, size_t payload_len,
                                  const kvt_prefix_identity *want_id, const kvt_block_key *want_key,
                                  kvt_prefix_identity *got_id, kvt_block_key *got_key, kvt_err *err) {
    if (hdr_len < KVT_PREFIX_ENTRY_HEADER_BYTES) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "entry header truncated: %zu of %d bytes", hdr_len,
                          KVT_PREFIX_ENTRY_HEADER_BYTES);
    }
    if (memcmp(hdr, k_magic, 8) != 0) return kvt_errorf(err, KVT_ERR_FORMAT, "entry: bad magic");
    if (get32(hdr + 8) != KVT_PREFIX_ENTRY_VERSION) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "entry: version %" PRIu32 ", expected %u", get32(hdr + 8),
                          KVT_PREFIX_ENTRY_VERSION);
    }
    if (get32(hdr + 12) != KVT_PREFIX_ENTRY_HEADER_BYTES || get32(hdr + 92) != 0) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "entry: header size %" PRIu32 " or reserved field %" PRIu32 " wrong",
                          get32(hdr + 12), get32(hdr + 92));
    }
    const uint64_t pb = get64(hdr + 80);
    if (pb != (uint64_t)payload_len) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "entry: payload of %" PRIu64 " bytes in the header, %zu present", pb,
                          payload_len);
    }
    kvt_prefix_identity id;
    id_read(hdr, &id);
    const kvt_block_key key = {get64(hdr + 64), get64(hdr + 72)};
    if (got_id) *got_id = id;
    if (got_key) *got_key = key;
    if (want_id) {
        const char *d = id_diff(&id, want_id);
        if (d) return kvt_errorf(err, KVT_ERR_FORMAT, "entry: written for another identity (%s differs)", d);
    }
    if (want_key && (key.lo != want_key->lo || key.hi != want_key->hi)) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "entry: key %016" PRIx64 "%016" PRIx64 " is not the one asked for",
                          key.hi, key.lo);
    }
    uint8_t h[KVT_PREFIX_ENTRY_HEADER_BYTES];
    memcpy(h, hdr, sizeof h);
    put32(h + 88, 0);
    const uint32_t crc = kvt_crc32c(kvt_crc32c(0, h, sizeof h), payload, payload_len);
    if (crc != get32(hdr + 88)) {
        return kvt_errorf(err, KVT_ERR_CHECKSUM, "entry: CRC32C %08" PRIx32 " stored, %08" PRIx32 " computed",
                          get32(hdr + 88), crc);
    }
    return KVT_OK;
}

// ---- counters ----
void kvt_prefix_counters_init(kvt_prefix_counters *c) {
    memset(&c->s, 0, sizeof c->s);
    pthread_mutex_init(&c->mu, NULL);
}
void kvt_prefix_counters_destroy(kvt_prefix_counters *c) { pthread_mutex_destroy(&c->mu); }

void kvt_prefix_count_get(kvt_prefix_counters *c, kvt_prefix_get_outcome o, int64_t bytes, double ms) {
    pthread_mutex_lock(&c->mu);
    c->s.gets++;
    if (o == KVT_PGET_HIT) {
        c->s.hits++;
        c->s.bytes_read += bytes;
    } else {
        c->s.misses++;
        c->s.miss_corrupt += o == KVT_PGET_CORRUPT;
        c->s.miss_unavailable += o == KVT_PGET_UNAVAILABLE;
    }
    c->s.read_ms += ms;
    pthread_mutex_unlock(&c->mu);
}

void kvt_prefix_count_put(kvt_prefix_counters *c, int asked, kvt_prefix_put_outcome o, int64_t bytes, double ms) {
    pthread_mutex_lock(&c->mu);
    c->s.puts += asked;
    if (o == KVT_PPUT_DONE) c->s.bytes_written += bytes;
    c->s.put_failed += o == KVT_PPUT_FAILED;
    c->s.put_dropped += o == KVT_PPUT_DROPPED;
    c->s.write_ms += ms;
    pthread_mutex_unlock(&c->mu);
}

void kvt_prefix_counters_get(kvt_prefix_counters *c, kvt_prefix_store_stats *out) {
    pthread_mutex_lock(&c->mu);
    *out = c->s;
    pthread_mutex_unlock(&c->mu);
}

// ---- shared ops ----
void kvt_prefix_common_put(kvt_prefix_store *s, const kvt_block_key *key, const void *payload) {
    kvt_prefix_store_common *c = (kvt_prefix_store_common *)s;
    const bool queued = kvt_prefix_putq_push(c->q, key, payload);
    kvt_prefix_count_put(&c->cnt, 1, queued ? KVT_PPUT_SKIPPED : KVT_PPUT_DROPPED, 0, 0);
}

void kvt_prefix_common_flush(kvt_prefix_store *s) {
    kvt_prefix_store_common *c = (kvt_prefix_store_common *)s;
    if (c->q) kvt_prefix_putq_flush(c->q);
}

void kvt_prefix_common_stats(kvt_prefix_store *s, kvt_prefix_store_stats *out) {
    kvt_prefix_counters_get(&((kvt_prefix_store_common *)s)->cnt, out);
}

// ---- background writer ----
struct kvt_prefix_putq {
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    pthread_t thread;
    kvt_prefix_put_job *ring; // circular queue of cap jobs
    size_t cap, head, n;
    int64_t payload_bytes, budget, inflight; // inflight: bytes queued or being written
    int batch;
    kvt_prefix_put_job *jobs; // batch jobs taken by the writer
    void **spare;             // [n_spare] payload buffers written out, kept for the next pushes (no malloc, no
    size_t n_spare, cap_spare; // page faults per block); at most the budget's worth
    bool stop;
    kvt_prefix_write_fn write;
    void *ctx;
};

// Room for one more job in the ring (called with mu held); false when out of memory.
static bool ring_reserve(kvt_prefix_putq *q) {
    if (q->n < q->cap) return true;
    const size_t nc = q->cap ? 2 * q->cap : 16;
    kvt_prefix_put_job *r = malloc(nc * sizeof *r);
    if (!r) return false;
    for (size_t i = 0; i < q->n; i++) r[i] = q->ring[(q->head + i) % q->cap];
    free(q->ring);
    q->ring = r;
    q->cap = nc;
    q->head = 0;
    return true;
}

static void *putq_main(void *arg) {
    kvt_prefix_putq *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->n && !q->stop) pthread_cond_wait(&q->cv_work, &q->mu);
        if (!q->n && q->stop) break;
        int n = 0;
        while (q->n && n < q->batch) {
            q->jobs[n++] = q->ring[q->head];
            q->head = (q->head + 1) % q->cap;
            q->n--;
        }
        pthread_mutex_unlock(&q->mu);
        q->write(q->ctx, q->jobs, n);
        pthread_mutex_lock(&q->mu);
        for (int i = 0; i < n; i++) {
            if (q->n_spare < q->cap_spare) q->spare[q->n_spare++] = q->jobs[i].payload;
            else free(q->jobs[i].payload);
        }
        q->inflight -= (int64_t)n * q->payload_bytes;
        pthread_cond_broadcast(&q->cv_done);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

kvt_status kvt_prefix_putq_start(int64_t payload_bytes, int64_t budget_bytes, int batch, kvt_prefix_write_fn write,
                                 void *ctx, kvt_prefix_putq **out, kvt_err *err) {
    kvt_prefix_putq *q = calloc(1, sizeof *q);
    if (!q) return kvt_errorf(err, KVT_ERR_NOMEM, "prefix store: out of memory for the write queue");
    q->payload_bytes = payload_bytes;
    q->budget = budget_bytes;
    q->batch = batch < 1 ? 1 : batch;
    q->write = write;
    q->ctx = ctx;
    q->jobs = malloc((size_t)q->batch * sizeof *q->jobs);
    const int64_t spare = payload_bytes > 0 ? budget_bytes / payload_bytes : 0;
    q->cap_spare = (size_t)(spare < 1 ? 1 : spare > 64 ? 64 : spare);
    q->spare = malloc(q->cap_spare * sizeof *q->spare);
    if (!q->jobs || !q->spare) {
        free(q->jobs);
        free(q->spare);
        free(q);
        return kvt_errorf(err, KVT_ERR_NOMEM, "prefix store: out of memory for the write queue");
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv_work, NULL);
    pthread_cond_init(&q->cv_done, NULL);
    if (pthread_create(&q->thread, NULL, putq_main, q) != 0) {
        pthread_cond_destroy(&q->cv_done);
        pthread_cond_destroy(&q->cv_work);
        pthread_mutex_destroy(&q->mu);
        free(q->jobs);
        free(q->spare);
        free(q);
        return kvt_errorf(err, KVT_ERR_IO, "prefix store: cannot start the writer thread");
    }
    *out = q;
    return KVT_OK;
}

bool kvt_prefix_putq_push(kvt_prefix_putq *q, const kvt_block_key *key, const void *payload) {
    pthread_mutex_lock(&q->mu);
    const bool over = q->inflight > 0 && q->inflight + q->payload_bytes > q->budget;
    if (over) {
        pthread_mutex_unlock(&q->mu);
        return false;
    }
    q->inflight += q->payload_bytes; // reserved before the copy, so concurrent pushes respect the budget
    void *copy = q->n_spare ? q->spare[--q->n_spare] : NULL;
    pthread_mutex_unlock(&q->mu);
    if (!copy) copy = malloc((size_t)q->payload_bytes);
    // the copy and the payload's CRC (for the entry's header) in one pass
    const uint32_t crc = copy ? kvt_crc32c_copy(0, copy, payload, (size_t)q->payload_bytes) : 0;
    pthread_mutex_lock(&q->mu);
    if (!copy || !ring_reserve(q)) {
        q->inflight -= q->payload_bytes;
        pthread_cond_broadcast(&q->cv_done);
        pthread_mutex_unlock(&q->mu);
        free(copy);
        return false;
    }
    q->ring[(q->head + q->n) % q->cap] = (kvt_prefix_put_job){*key, copy, crc};
    q->n++;
    pthread_cond_signal(&q->cv_work);
    pthread_mutex_unlock(&q->mu);
    return true;
}

void kvt_prefix_putq_flush(kvt_prefix_putq *q) {
    pthread_mutex_lock(&q->mu);
    while (q->inflight > 0) pthread_cond_wait(&q->cv_done, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

void kvt_prefix_putq_stop(kvt_prefix_putq *q) {
    if (!q) return;
    kvt_prefix_putq_flush(q);
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_signal(&q->cv_work);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    for (size_t i = 0; i < q->n_spare; i++) free(q->spare[i]);
    free(q->spare);
    free(q->ring);
    free(q->jobs);
    pthread_cond_destroy(&q->cv_done);
    pthread_cond_destroy(&q->cv_work);
    pthread_mutex_destroy(&q->mu);
    free(q);
}
