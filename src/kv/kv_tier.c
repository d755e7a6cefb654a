// kv_tier.c - slot allocators over memory arenas and an O_DIRECT file.
#include "kv_tier.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/crc32c.h"
#include "../base/grow.h"

#define DISK_ALIGN 4096

kvt_status kvt_tier_mem_init(kvt_tier_store *t, kvt_tier id, int64_t budget, int64_t slot_bytes, kvt_err *err) {
    memset(t, 0, sizeof *t);
    t->id = id;
    t->present = true;
    t->fd = -1;
    t->budget = budget;
    t->slot_bytes = (slot_bytes + 63) / 64 * 64;
    t->data_bytes = slot_bytes;
    t->max_slots = budget < 0 ? INT64_MAX : budget / t->slot_bytes;
    t->chunk_slots = ((int64_t)8 << 20) / t->slot_bytes;
    if (t->chunk_slots < 1) t->chunk_slots = 1;
    if (t->max_slots == 0) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "KV %s tier budget (%s %lld bytes) holds no block of %lld bytes",
                          kvt_tier_name(id), id == KVT_TIER_FAST ? "--kv-fast" : "--kv-host", (long long)budget,
                          (long long)t->slot_bytes);
    }
    return KVT_OK;
}

kvt_status kvt_tier_disk_init(kvt_tier_store *t, const char *dir, int64_t budget, int64_t data_bytes, bool keep,
                              bool no_uring, kvt_err *err) {
    memset(t, 0, sizeof *t);
    t->id = KVT_TIER_DISK;
    t->present = true;
    t->keep = keep;
    t->budget = budget;
    t->data_bytes = data_bytes;
    t->slot_bytes = (data_bytes + DISK_ALIGN - 1) / DISK_ALIGN * DISK_ALIGN;
    t->max_slots = budget < 0 ? INT64_MAX : budget / t->slot_bytes;
    t->fd = -1;
    if (t->max_slots == 0) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "KV disk budget --kv-disk-max %lld bytes holds no block of %lld bytes",
                          (long long)budget, (long long)t->slot_bytes);
    }
    size_t n = strlen(dir) + 32;
    t->path = malloc(n);
    if (!t->path) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    snprintf(t->path, n, "%s/kvtier-kv-XXXXXX", dir);
    t->fd = mkostemp(t->path, O_DIRECT | O_CLOEXEC);
    t->direct = t->fd >= 0;
    if (t->fd < 0 && errno == EINVAL) { // file system without O_DIRECT (tmpfs): buffered I/O
        snprintf(t->path, n, "%s/kvtier-kv-XXXXXX", dir);
        t->fd = mkostemp(t->path, O_CLOEXEC);
    }
    if (t->fd < 0) {
        kvt_status st = kvt_errorf(err, KVT_ERR_IO, "cannot create KV disk file in %s: %s", dir, strerror(errno));
        free(t->path);
        t->path = NULL;
        return st;
    }
    // Unlinked at once unless kept: the open descriptor holds the blocks, and nothing is left in dir
    // however the process ends (exit, Ctrl-C, SIGTERM, SIGKILL, a crash). t->path still names it in messages.
    if (!keep && unlink(t->path) != 0) {
        kvt_status st = kvt_errorf(err, KVT_ERR_IO, "cannot unlink the new KV disk file %s: %s", t->path, strerror(errno));
        close(t->fd);
        t->fd = -1;
        free(t->path);
        t->path = NULL;
        return st;
    }
    t->io_why = "disabled by the caller";
    if (!no_uring) t->ring = kvt_uring_open(t->fd, 128, &t->io_why); // room for a batch of KVT_TIER_READ_MANY and others
    return KVT_OK;
}

const char *kvt_tier_disk_engine(const kvt_tier_store *t) { return t->ring ? "io_uring" : "threads"; }

// One pread/pwrite through the ring or directly: bytes, or -1 with errno.
static ssize_t disk_rw(kvt_tier_store *t, bool write, void *buf, size_t n, off_t off) {
    if (t->ring) return kvt_uring_rw(t->ring, write, buf, n, off);
    return write ? pwrite(t->fd, buf, n, off) : pread(t->fd, buf, n, off);
}

void kvt_tier_free(kvt_tier_store *t) {
    for (size_t i = 0; i < t->n_chunk; i++) free(t->chunk[i]);
    free(t->chunk);
    free(t->mem);
    free(t->free_ids);
    kvt_uring_close(t->ring);
    if (t->fd >= 0) close(t->fd); // the file was unlinked at creation unless kept
    free(t->path);
    memset(t, 0, sizeof *t);
    t->fd = -1;
}

// Slots the chunks made so far hold (the last chunk of a budget may hold fewer than chunk_slots).
static int64_t chunk_slots_made(const kvt_tier_store *t) {
    const int64_t n = (int64_t)t->n_chunk * t->chunk_slots;
    return n < t->max_slots ? n : t->max_slots;
}

int64_t kvt_tier_chunk_next_bytes(const kvt_tier_store *t) {
    if (!t->present || t->fd >= 0) return 0;
    const int64_t left = t->max_slots - chunk_slots_made(t);
    return (left < t->chunk_slots ? left : t->chunk_slots) * t->slot_bytes;
}

int64_t kvt_tier_warm_bytes(const kvt_tier_store *t) {
    if (!t->present || t->fd >= 0) return 0;
    return (t->n_free + chunk_slots_made(t) - t->n_made) * t->slot_bytes;
}

bool kvt_tier_chunk_add(kvt_tier_store *t, uint8_t *chunk, int64_t bytes) {
    if (bytes <= 0 || bytes != kvt_tier_chunk_next_bytes(t)) return false;
    if (!kvt_grow((void **)&t->chunk, &t->cap_chunk, t->n_chunk + 1, sizeof *t->chunk)) return false;
    t->chunk[t->n_chunk++] = chunk;
    return true;
}

// Adds a chunk of chunk_slots slots (fewer for the last one of a budget), see kvt_kv_arena_alloc.
static bool chunk_new(kvt_tier_store *t) {
    const int64_t bytes = kvt_tier_chunk_next_bytes(t);
    uint8_t *p = bytes > 0 ? kvt_kv_arena_alloc((size_t)bytes) : NULL;
    if (!p) return false;
    if (!kvt_tier_chunk_add(t, p, bytes)) {
        free(p);
        return false;
    }
    return true;
}

int64_t kvt_tier_alloc(kvt_tier_store *t) {
    if (t->n_used >= t->max_slots) return -1;
    int64_t s;
    if (t->n_free > 0) {
        s = t->free_ids[--t->n_free];
    } else {
        if (t->fd < 0) { // memory tier: create the slot's buffer
            if (t->n_made == t->cap_mem) {
                int64_t cap = t->cap_mem ? t->cap_mem * 2 : 64;
                uint8_t **m = realloc(t->mem, (size_t)cap * sizeof *m);
                if (!m) return -1;
                t->mem = m;
                t->cap_mem = cap;
            }
            if (t->n_made == (int64_t)t->n_chunk * t->chunk_slots && !chunk_new(t)) return -1;
            const int64_t c = t->n_made / t->chunk_slots;
            t->mem[t->n_made] = t->chunk[c] + (t->n_made - c * t->chunk_slots) * t->slot_bytes;
        }
        s = t->n_made++;
    }
    t->n_used++;
    if (t->n_used > t->peak_used) t->peak_used = t->n_used;
    return s;
}

void kvt_tier_release(kvt_tier_store *t, int64_t slot) {
    if (t->n_free == t->cap_free) {
        int64_t cap = t->cap_free ? t->cap_free * 2 : 64;
        int64_t *f = realloc(t->free_ids, (size_t)cap * sizeof *f);
        if (!f) { // cannot remember the slot: leak it (still counted as free in n_used)
            t->n_used--;
            return;
        }
        t->free_ids = f;
        t->cap_free = cap;
    }
    t->free_ids[t->n_free++] = slot;
    t->n_used--;
}

uint8_t *kvt_tier_ptr(const kvt_tier_store *t, int64_t slot) { return t->mem[slot]; }

// A memory-tier block can be the O_DIRECT buffer itself (no bounce copy) when it is aligned and the
// disk slot has no padding: memory slots are DISK_ALIGN-aligned allocations, so this holds whenever
// the block size is a multiple of DISK_ALIGN (e.g. 512 positions of 3 x 64 f16 K or V values).
static bool direct_ok(const kvt_tier_store *t, const void *p) {
    return t->slot_bytes == t->data_bytes && (uintptr_t)p % DISK_ALIGN == 0;
}

// What goes to disk for src: the block itself when O_DIRECT can take it, else bounce (the data, zero padded).
static const uint8_t *write_buf(const kvt_tier_store *t, const void *src, void *bounce) {
    if (direct_ok(t, src)) return src;
    memcpy(bounce, src, (size_t)t->data_bytes);
    if (t->slot_bytes > t->data_bytes) memset((uint8_t *)bounce + t->data_bytes, 0, (size_t)(t->slot_bytes - t->data_bytes));
    return bounce;
}

// The block's name in a transfer's error message: `what`, or (NULL: a batch transfer) its disk slot, formatted into
// buf [40] only when there is an error to report.
static const char *block_name(const kvt_tier_store *t, off_t off, const char *what, char *buf) {
    if (what) return what;
    snprintf(buf, 40, "disk slot %lld", (long long)(off / t->slot_bytes));
    return buf;
}

// A disk write's start: counts it and fails it where a test injects a failure (fail_write_at).
static kvt_status write_begin(kvt_tier_store *t, off_t off, const char *what, kvt_err *err) {
    int64_t nw = atomic_fetch_add(&t->n_writes, 1) + 1;
    if (t->fail_write_at > 0 && nw == t->fail_write_at) {
        char nb[40];
        return kvt_errorf(err, KVT_ERR_IO, "KV disk write of %s to %s at offset %lld failed: %s (injected)",
                          block_name(t, off, what, nb), t->path, (long long)off, strerror(EIO));
    }
    return KVT_OK;
}

// The rest of a write of buf [slot_bytes] to the slot at `off` from byte `done` on (one pwrite or ring request at a
// time).
static kvt_status write_finish(kvt_tier_store *t, off_t off, const uint8_t *buf, int64_t done, const char *what,
                               kvt_err *err) {
    while (done < t->slot_bytes) {
        ssize_t w = disk_rw(t, true, (uint8_t *)buf + done, (size_t)(t->slot_bytes - done), off + done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            char nb[40];
            return kvt_errorf(err, e == ENOSPC || e == EDQUOT ? KVT_ERR_BUDGET : KVT_ERR_IO,
                              "KV disk write of %s to %s at offset %lld failed: %s", block_name(t, off, what, nb), t->path,
                              (long long)(off + done), strerror(e));
        }
        done += w;
    }
    return KVT_OK;
}

kvt_status kvt_tier_disk_write(kvt_tier_store *t, int64_t slot, const void *src, void *bounce, uint32_t *crc,
                               const char *what, kvt_err *err) {
    const uint8_t *buf = write_buf(t, src, bounce);
    *crc = kvt_crc32c(0, src, (size_t)t->data_bytes);
    const off_t off = (off_t)slot * t->slot_bytes;
    kvt_status st = write_begin(t, off, what, err);
    return st ? st : write_finish(t, off, buf, 0, what, err);
}


// A disk read's start: counts it and fails it where a test injects a failure (fail_read_at).
static kvt_status read_begin(kvt_tier_store *t, off_t off, const char *what, kvt_err *err) {
    int64_t nr = atomic_fetch_add(&t->n_reads, 1) + 1;
    if (t->fail_read_at > 0 && nr == t->fail_read_at) {
        char nb[40];
        return kvt_errorf(err, KVT_ERR_IO, "KV disk read of %s from %s at offset %lld failed: %s (injected)",
                          block_name(t, off, what, nb), t->path, (long long)off, strerror(EIO));
    }
    return KVT_OK;
}

// The rest of a read of the slot at `off` into buf [slot_bytes] from byte `done` on (one pread or ring request at a
// time), then the CRC32C check and the copy to dst when buf is the bounce buffer.
static kvt_status read_finish(kvt_tier_store *t, off_t off, uint8_t *buf, int64_t done, void *dst, uint32_t crc,
                              const char *what, kvt_err *err) {
    char nb[40];
    while (done < t->slot_bytes) {
        ssize_t r = disk_rw(t, false, buf + done, (size_t)(t->slot_bytes - done), off + done);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            return kvt_errorf(err, KVT_ERR_IO, "KV disk read of %s from %s at offset %lld failed: %s",
                              block_name(t, off, what, nb), t->path, (long long)(off + done), strerror(errno));
        }
        if (r == 0) {
            return kvt_errorf(err, KVT_ERR_IO, "KV disk read of %s from %s at offset %lld: short read (%lld of %lld bytes)",
                              block_name(t, off, what, nb), t->path, (long long)off, (long long)done, (long long)t->slot_bytes);
        }
        done += r;
    }
    uint32_t got = kvt_crc32c(0, buf, (size_t)t->data_bytes);
    if (got != crc) {
        return kvt_errorf(err, KVT_ERR_CHECKSUM,
                          "KV disk block %s in %s at offset %lld is corrupt: CRC32C 0x%08x, expected 0x%08x",
                          block_name(t, off, what, nb), t->path, (long long)off, got, crc);
    }
    if (buf != dst) memcpy(dst, buf, (size_t)t->data_bytes);
    return KVT_OK;
}

kvt_status kvt_tier_disk_read(kvt_tier_store *t, int64_t slot, void *dst, void *bounce, uint32_t crc, const char *what,
                              kvt_err *err) {
    const off_t off = (off_t)slot * t->slot_bytes;
    kvt_status st = read_begin(t, off, what, err);
    if (st) return st;
    uint8_t *buf = direct_ok(t, dst) ? dst : bounce; // [slot_bytes] read straight into the block when possible
    return read_finish(t, off, buf, 0, dst, crc, what, err);
}

// Up to KVT_TIER_READ_MANY block transfers in one direction (the batch calls below), in two steps: disk_start does
// each block's start (counted; a write's CRC32C and its buffer) and hands the ring its requests together; disk_finish
// waits for them, then does each block's finish, which does the rest of a request the ring failed or did short one at a
// time (and a read's CRC check and copy out of its bounce buffer). blk[i] [data_bytes] is the block: the destination of
// a read, the source of a write. The arrays stay the caller's until disk_finish returns.
static void disk_start(kvt_tier_store *t, bool write, int n, const int64_t *slot, void *const *blk, void *const *bounce,
                       uint32_t *crc, kvt_status *st, kvt_err *err, kvt_tier_pending *p) {
    const int m = n < KVT_TIER_READ_MANY ? n : KVT_TIER_READ_MANY;
    // the ring's requests: request x moves block idx[x] whole through rb[x]
    void *rb[KVT_TIER_READ_MANY];
    size_t rl[KVT_TIER_READ_MANY];
    off_t ro[KVT_TIER_READ_MANY];
    int k = 0;
    p->n = m, p->write = write;
    for (int i = 0; i < m; i++) {
        const off_t off = (off_t)slot[i] * t->slot_bytes;
        if (write) {
            p->buf[i] = (uint8_t *)write_buf(t, blk[i], bounce[i]);
            crc[i] = kvt_crc32c(0, blk[i], (size_t)t->data_bytes);
        } else {
            p->buf[i] = direct_ok(t, blk[i]) ? blk[i] : bounce[i];
        }
        st[i] = write ? write_begin(t, off, NULL, &err[i]) : read_begin(t, off, NULL, &err[i]);
        if (st[i] || !t->ring) continue;
        rb[k] = p->buf[i], rl[k] = (size_t)t->slot_bytes, ro[k] = off, p->idx[k++] = i;
    }
    p->k = k;
    if (k > 0) kvt_uring_rw_start(t->ring, write, k, rb, rl, ro, &p->ring);
}

static void disk_finish(kvt_tier_store *t, const int64_t *slot, void *const *blk, const uint32_t *crc, kvt_status *st,
                        kvt_err *err, kvt_tier_pending *p) {
    int64_t done[KVT_TIER_READ_MANY] = {0}; // bytes the ring moved (0: the finish moves it all: no ring, or a ring error)
    ssize_t rr[KVT_TIER_READ_MANY];
    if (p->k > 0) kvt_uring_rw_finish(t->ring, &p->ring, rr);
    for (int x = 0; x < p->k; x++) done[p->idx[x]] = rr[x] > 0 ? rr[x] : 0; // an error: moved again, one by one
    for (int i = 0; i < p->n; i++) {
        if (st[i]) continue;
        const off_t off = (off_t)slot[i] * t->slot_bytes;
        st[i] = p->write ? write_finish(t, off, p->buf[i], done[i], NULL, &err[i])
                         : read_finish(t, off, p->buf[i], done[i], blk[i], crc[i], NULL, &err[i]);
    }
}

static void disk_many(kvt_tier_store *t, bool write, int n, const int64_t *slot, void *const *blk, void *const *bounce,
                      uint32_t *crc, kvt_status *st, kvt_err *err) {
    kvt_tier_pending p;
    for (int i0 = 0; i0 < n; i0 += KVT_TIER_READ_MANY) {
        disk_start(t, write, n - i0, slot + i0, blk + i0, bounce + i0, crc + i0, st + i0, err + i0, &p);
        disk_finish(t, slot + i0, blk + i0, crc + i0, st + i0, err + i0, &p);
    }
}

void kvt_tier_disk_read_start(kvt_tier_store *t, int n, const int64_t *slot, void *const *dst, void *const *bounce,
                              const uint32_t *crc, kvt_status *st, kvt_err *err, kvt_tier_pending *p) {
    disk_start(t, false, n, slot, dst, bounce, (uint32_t *)crc, st, err, p); // a read only reads crc[]
}

void kvt_tier_disk_read_finish(kvt_tier_store *t, const int64_t *slot, void *const *dst, const uint32_t *crc,
                               kvt_status *st, kvt_err *err, kvt_tier_pending *p) {
    disk_finish(t, slot, dst, crc, st, err, p);
}

void kvt_tier_disk_read_many(kvt_tier_store *t, int n, const int64_t *slot, void *const *dst, void *const *bounce,
                             const uint32_t *crc, kvt_status *st, kvt_err *err) {
    disk_many(t, false, n, slot, dst, bounce, (uint32_t *)crc, st, err); // a read only reads crc[]
}

void kvt_tier_disk_write_many(kvt_tier_store *t, int n, const int64_t *slot, const void *const *src, void *const *bounce,
                              uint32_t *crc, kvt_status *st, kvt_err *err) {
    disk_many(t, true, n, slot, (void *const *)src, bounce, crc, st, err); // a write only reads src[i]'s bytes
}
