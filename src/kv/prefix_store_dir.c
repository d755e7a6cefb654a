// prefix_store_dir.c - the prefix-block store in a directory (`--kv-cache-dir DIR`): one file per block,
// written to a temporary name and renamed, read back and checked (prefix_entry.h), bounded by max_bytes with
// least-recently-used removal. The directory is opened once; every file operation is relative to it.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../base/grow.h"
#include "../base/crc32c.h"
#include "../base/timer.h"
#include "prefix_entry.h"

#define NAME_LEN 45 // "%08x-%016llx%016llx.kvb"
#define HDR KVT_PREFIX_ENTRY_HEADER_BYTES

typedef struct {
    uint32_t idh;
    kvt_block_key key;
    int64_t bytes;    // file size
    int32_t prev, next; // LRU list: head = most recent; -1 ends
} dir_entry;

typedef struct {
    kvt_prefix_store_common com; // base, counters, writer
    int dfd;
    uint32_t idh;
    int64_t max_bytes, entry_bytes;
    atomic_uint_fast64_t tmp_seq;
    // index of the entries on disk (mu)
    pthread_mutex_t mu;
    dir_entry *e;
    size_t e_cap, e_len, e_n; // e_len: slots of e ever used; e_n: live entries
    int32_t free_list; // through .next
    int32_t *slot;     // open addressing, -1 empty; slot_cap a power of two
    size_t slot_cap;
    int32_t lru_head, lru_tail;
    int64_t total_bytes;
} dir_store;

static void entry_name(char *buf, uint32_t idh, const kvt_block_key *k) {
    snprintf(buf, NAME_LEN + 1, "%08" PRIx32 "-%016" PRIx64 "%016" PRIx64 ".kvb", idh, k->hi, k->lo);
}

static bool name_parse(const char *n, uint32_t *idh, kvt_block_key *k) {
    if (strlen(n) != NAME_LEN || n[8] != '-' || strcmp(n + 41, ".kvb") != 0) return false;
    for (int i = 0; i < 41; i++) {
        if (i != 8 && !((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f'))) return false;
    }
    char b[17];
    memcpy(b, n, 8), b[8] = 0;
    *idh = (uint32_t)strtoul(b, NULL, 16);
    memcpy(b, n + 9, 16), b[16] = 0;
    k->hi = strtoull(b, NULL, 16);
    memcpy(b, n + 25, 16), b[16] = 0;
    k->lo = strtoull(b, NULL, 16);
    return true;
}

// ---- index: hash of (identity hash, key) -> entry, and the LRU list (mu held) ----
static size_t key_hash(uint32_t idh, const kvt_block_key *k) {
    uint64_t h = (k->lo ^ (k->hi * 0x9E3779B97F4A7C15ull) ^ idh) * 0xBF58476D1CE4E5B9ull;
    return (size_t)(h ^ (h >> 31));
}

static int64_t ix_find(dir_store *s, uint32_t idh, const kvt_block_key *k, size_t *pos) {
    if (!s->slot_cap) return -1;
    for (size_t i = key_hash(idh, k) & (s->slot_cap - 1);; i = (i + 1) & (s->slot_cap - 1)) {
        const int32_t x = s->slot[i];
        if (x < 0) return -1;
        if (s->e[x].idh == idh && s->e[x].key.lo == k->lo && s->e[x].key.hi == k->hi) {
            if (pos) *pos = i;
            return x;
        }
    }
}

static void lru_unlink(dir_store *s, int32_t x) {
    dir_entry *e = &s->e[x];
    if (e->prev >= 0) s->e[e->prev].next = e->next; else s->lru_head = e->next;
    if (e->next >= 0) s->e[e->next].prev = e->prev; else s->lru_tail = e->prev;
}
static void lru_push_front(dir_store *s, int32_t x) {
    s->e[x].prev = -1;
    s->e[x].next = s->lru_head;
    if (s->lru_head >= 0) s->e[s->lru_head].prev = x; else s->lru_tail = x;
    s->lru_head = x;
}

static bool slots_resize(dir_store *s, size_t cap) {
    int32_t *ns = malloc(cap * sizeof *ns);
    if (!ns) return false;
    for (size_t i = 0; i < cap; i++) ns[i] = -1;
    for (int32_t x = s->lru_head; x >= 0; x = s->e[x].next) {
        size_t i = key_hash(s->e[x].idh, &s->e[x].key) & (cap - 1);
        while (ns[i] >= 0) i = (i + 1) & (cap - 1);
        ns[i] = x;
    }
    free(s->slot);
    s->slot = ns;
    s->slot_cap = cap;
    return true;
}

// Adds an entry as the most recent one (or refreshes it); false when out of memory (the file stays, unindexed).
static bool ix_insert(dir_store *s, uint32_t idh, const kvt_block_key *k, int64_t bytes) {
    int64_t x = ix_find(s, idh, k, NULL);
    if (x >= 0) {
        lru_unlink(s, (int32_t)x);
        lru_push_front(s, (int32_t)x);
        return true;
    }
    if ((s->e_n + 1) * 2 > s->slot_cap && !slots_resize(s, s->slot_cap ? 2 * s->slot_cap : 64)) return false;
    if (s->free_list >= 0) {
        x = s->free_list;
        s->free_list = s->e[x].next;
    } else {
        if (s->e_len >= INT32_MAX || !kvt_grow((void **)&s->e, &s->e_cap, s->e_len + 1, sizeof *s->e)) return false;
        x = (int64_t)s->e_len++;
    }
    s->e[x] = (dir_entry){idh, *k, bytes, -1, -1};
    size_t i = key_hash(idh, k) & (s->slot_cap - 1);
    while (s->slot[i] >= 0) i = (i + 1) & (s->slot_cap - 1);
    s->slot[i] = (int32_t)x;
    lru_push_front(s, (int32_t)x);
    s->e_n++;
    s->total_bytes += bytes;
    return true;
}

static void ix_remove(dir_store *s, int32_t x, size_t pos) {
    lru_unlink(s, x);
    s->total_bytes -= s->e[x].bytes;
    s->e[x].next = s->free_list;
    s->free_list = x;
    s->e_n--;
    // backward-shift deletion keeps every probe chain unbroken
    const size_t m = s->slot_cap - 1;
    size_t i = pos;
    for (size_t j = (i + 1) & m;; j = (j + 1) & m) {
        const int32_t y = s->slot[j];
        if (y < 0) break;
        const size_t home = key_hash(s->e[y].idh, &s->e[y].key) & m;
        if (((j - home) & m) >= ((j - i) & m)) {
            s->slot[i] = y;
            i = j;
        }
    }
    s->slot[i] = -1;
}

static void ix_drop(dir_store *s, uint32_t idh, const kvt_block_key *k) {
    size_t pos;
    const int64_t x = ix_find(s, idh, k, &pos);
    if (x >= 0) ix_remove(s, (int32_t)x, pos);
}

// Removes least recently used entries (never `keep`) until the directory fits max_bytes.
static void evict(dir_store *s, int32_t keep) {
    if (!s->max_bytes) return;
    while (s->total_bytes > s->max_bytes && s->lru_tail >= 0 && s->lru_tail != keep) {
        const int32_t x = s->lru_tail;
        char name[NAME_LEN + 1];
        entry_name(name, s->e[x].idh, &s->e[x].key);
        unlinkat(s->dfd, name, 0);
        size_t pos;
        ix_find(s, s->e[x].idh, &s->e[x].key, &pos);
        ix_remove(s, x, pos);
    }
}

// ---- reads ----
static bool read_full(int fd, void *buf, size_t n, off_t off) {
    for (size_t done = 0; done < n;) {
        const ssize_t r = pread(fd, (char *)buf + done, n - done, off + (off_t)done);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return false;
        }
        done += (size_t)r;
    }
    return true;
}

static kvt_prefix_get_outcome dir_read(dir_store *s, const kvt_block_key *key, void *dst) {
    char name[NAME_LEN + 1];
    entry_name(name, s->idh, key);
    const int fd = openat(s->dfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno != ENOENT) return KVT_PGET_UNAVAILABLE;
        pthread_mutex_lock(&s->mu);
        // removed by another process: forget it, unless a writer of this store renamed it into place since the
        // open failed (it indexes the entry under this mutex after the rename: dropping it then would leave a
        // file the index does not count, and the directory past max_bytes)
        if (faccessat(s->dfd, name, F_OK, 0) != 0) ix_drop(s, s->idh, key);
        pthread_mutex_unlock(&s->mu);
        return KVT_PGET_MISS;
    }
    struct stat st;
    uint8_t hdr[HDR];
    kvt_prefix_get_outcome o = KVT_PGET_CORRUPT;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        o = KVT_PGET_UNAVAILABLE;
    } else if (st.st_size == s->entry_bytes) {
        if (!read_full(fd, hdr, HDR, 0) || !read_full(fd, dst, (size_t)s->com.base.payload_bytes, HDR)) {
            o = KVT_PGET_UNAVAILABLE;
        } else if (kvt_prefix_entry_check(hdr, HDR, dst, (size_t)s->com.base.payload_bytes, &s->com.base.id, key, NULL,
                                          NULL, NULL) == KVT_OK) {
            o = KVT_PGET_HIT;
            futimens(fd, NULL); // recency survives a restart
        }
    }
    close(fd);
    pthread_mutex_lock(&s->mu);
    if (o == KVT_PGET_HIT) {
        if (ix_insert(s, s->idh, key, s->entry_bytes)) evict(s, s->lru_head); // now the most recent
    } else if (o == KVT_PGET_CORRUPT) { // never used again
        unlinkat(s->dfd, name, 0);
        ix_drop(s, s->idh, key);
    }
    pthread_mutex_unlock(&s->mu);
    return o;
}

static void dir_get(kvt_prefix_store *base, const kvt_block_key *key, void *dst, bool *hit) {
    dir_store *s = (dir_store *)base;
    const double t0 = kvt_time_ms();
    const kvt_prefix_get_outcome o = dir_read(s, key, dst);
    *hit = o == KVT_PGET_HIT;
    kvt_prefix_count_get(&s->com.cnt, o, *hit ? s->com.base.payload_bytes : 0, kvt_time_ms() - t0);
}

// ---- writes ----
static bool write_full(int fd, const uint8_t *hdr, const void *payload, size_t n) {
    struct iovec v[2] = {{(void *)hdr, HDR}, {(void *)payload, n}};
    size_t left = HDR + n;
    while (left > 0) {
        const ssize_t w = writev(fd, v, 2);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        left -= (size_t)w;
        for (size_t k = (size_t)w, i = 0; i < 2 && k > 0; i++) {
            const size_t t = k < v[i].iov_len ? k : v[i].iov_len;
            v[i].iov_base = (char *)v[i].iov_base + t;
            v[i].iov_len -= t;
            k -= t;
        }
    }
    return true;
}

static kvt_prefix_put_outcome dir_write_one(dir_store *s, const kvt_prefix_put_job *job) {
    const kvt_block_key *key = &job->key;
    const void *payload = job->payload;
    if (s->max_bytes && s->entry_bytes > s->max_bytes) return KVT_PPUT_FAILED;
    pthread_mutex_lock(&s->mu);
    const bool have = ix_find(s, s->idh, key, NULL) >= 0;
    pthread_mutex_unlock(&s->mu);
    if (have) return KVT_PPUT_SKIPPED;
    char name[NAME_LEN + 1], tmp[NAME_LEN + 64];
    entry_name(name, s->idh, key);
    snprintf(tmp, sizeof tmp, ".tmp-%ld-%" PRIu64 "-%s", (long)getpid(), (uint64_t)atomic_fetch_add(&s->tmp_seq, 1),
             name);
    uint8_t hdr[HDR];
    kvt_prefix_entry_header(hdr, &s->com.base.id, key, job->crc, s->com.base.payload_bytes);
    const int fd = openat(s->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return KVT_PPUT_FAILED;
    const bool ok = write_full(fd, hdr, payload, (size_t)s->com.base.payload_bytes);
    if (close(fd) != 0 || !ok || renameat(s->dfd, tmp, s->dfd, name) != 0) {
        unlinkat(s->dfd, tmp, 0);
        return KVT_PPUT_FAILED;
    }
    pthread_mutex_lock(&s->mu);
    if (ix_insert(s, s->idh, key, s->entry_bytes)) evict(s, s->lru_head);
    pthread_mutex_unlock(&s->mu);
    return KVT_PPUT_DONE;
}

static void dir_write_jobs(void *ctx, kvt_prefix_put_job *jobs, int n) {
    dir_store *s = ctx;
    for (int i = 0; i < n; i++) {
        const double t0 = kvt_time_ms();
        const kvt_prefix_put_outcome o = dir_write_one(s, &jobs[i]);
        kvt_prefix_count_put(&s->com.cnt, 0, o, s->com.base.payload_bytes, kvt_time_ms() - t0);
    }
}

static void dir_put(kvt_prefix_store *base, const kvt_block_key *key, const void *payload) {
    dir_store *s = (dir_store *)base;
    if (!s->com.q) {
        kvt_prefix_count_put(&s->com.cnt, 1, KVT_PPUT_SKIPPED, 0, 0);
        kvt_prefix_put_job j = {*key, (void *)payload, kvt_crc32c(0, payload, (size_t)base->payload_bytes)};
        dir_write_jobs(s, &j, 1);
        return;
    }
    kvt_prefix_common_put(base, key, payload);
}

static void dir_free(kvt_prefix_store *base) {
    dir_store *s = (dir_store *)base;
    kvt_prefix_putq_stop(s->com.q);
    if (s->dfd >= 0) close(s->dfd);
    kvt_prefix_counters_destroy(&s->com.cnt);
    pthread_mutex_destroy(&s->mu);
    free(s->e);
    free(s->slot);
    free(s);
}

static const kvt_prefix_store_ops dir_ops = {
    "dir", dir_get, dir_put, kvt_prefix_common_flush, kvt_prefix_common_stats, dir_free, NULL, NULL};

// ---- open ----
typedef struct {
    uint32_t idh;
    kvt_block_key key;
    int64_t bytes;
    struct timespec mtime;
} scan_item;

static int scan_cmp(const void *a, const void *b) { // oldest first
    const struct timespec *x = &((const scan_item *)a)->mtime, *y = &((const scan_item *)b)->mtime;
    if (x->tv_sec != y->tv_sec) return x->tv_sec < y->tv_sec ? -1 : 1;
    return (x->tv_nsec > y->tv_nsec) - (x->tv_nsec < y->tv_nsec);
}

// A temporary file ".tmp-PID-..." whose writer is gone.
static bool stale_tmp(const char *n) {
    if (strncmp(n, ".tmp-", 5) != 0) return false;
    const long pid = strtol(n + 5, NULL, 10);
    return pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static kvt_status dir_scan(dir_store *s, const char *dir, kvt_err *err) {
    const int fd = dup(s->dfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return kvt_errorf(err, KVT_ERR_IO, "kv cache dir %s: cannot list: %s", dir, strerror(errno));
    }
    scan_item *it = NULL;
    size_t n = 0, cap = 0;
    kvt_status st = KVT_OK;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        scan_item x;
        struct stat sb;
        if (stale_tmp(de->d_name)) {
            unlinkat(s->dfd, de->d_name, 0);
            continue;
        }
        if (!name_parse(de->d_name, &x.idh, &x.key) || fstatat(s->dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(sb.st_mode)) {
            continue;
        }
        x.bytes = (int64_t)sb.st_size;
        x.mtime = sb.st_mtim;
        if (!kvt_grow((void **)&it, &cap, n + 1, sizeof *it)) {
            st = kvt_errorf(err, KVT_ERR_NOMEM, "kv cache dir %s: out of memory for the index", dir);
            break;
        }
        it[n++] = x;
    }
    closedir(d);
    if (st == KVT_OK) {
        if (n) qsort(it, n, sizeof *it, scan_cmp);
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < n && st == KVT_OK; i++) {
            if (!ix_insert(s, it[i].idh, &it[i].key, it[i].bytes)) {
                st = kvt_errorf(err, KVT_ERR_NOMEM, "kv cache dir %s: out of memory for the index", dir);
            }
        }
        evict(s, -1);
        pthread_mutex_unlock(&s->mu);
    }
    free(it);
    return st;
}

kvt_prefix_store_dir_params kvt_prefix_store_dir_params_default(void) {
    return (kvt_prefix_store_dir_params){.max_bytes = 0, .inflight_bytes = 64ll << 20};
}

kvt_status kvt_prefix_store_dir_open(const char *dir, const kvt_prefix_identity *id, int64_t payload_bytes,
                                     int64_t max_bytes, kvt_prefix_store **out, kvt_err *err) {
    kvt_prefix_store_dir_params p = kvt_prefix_store_dir_params_default();
    p.max_bytes = max_bytes;
    return kvt_prefix_store_dir_open_params(dir, id, payload_bytes, &p, out, err);
}

kvt_status kvt_prefix_store_dir_open_params(const char *dir, const kvt_prefix_identity *id, int64_t payload_bytes,
                                            const kvt_prefix_store_dir_params *p, kvt_prefix_store **out,
                                            kvt_err *err) {
    *out = NULL;
    if (dir && !*dir) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "kv cache dir: the path is empty");
    if (!dir || !id || payload_bytes <= 0 || p->max_bytes < 0 || p->inflight_bytes < 0) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "kv cache dir: bad arguments (dir, identity, payload %" PRId64
                          " bytes, max %" PRId64 " bytes)", payload_bytes, p->max_bytes);
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        return kvt_errorf(err, KVT_ERR_IO, "kv cache dir %s: cannot create: %s", dir, strerror(errno));
    }
    dir_store *s = calloc(1, sizeof *s);
    if (!s) return kvt_errorf(err, KVT_ERR_NOMEM, "kv cache dir %s: out of memory", dir);
    s->com.base = (kvt_prefix_store){&dir_ops, *id, payload_bytes};
    s->idh = kvt_prefix_identity_hash(id);
    s->max_bytes = p->max_bytes;
    s->entry_bytes = HDR + payload_bytes;
    s->free_list = s->lru_head = s->lru_tail = -1;
    kvt_prefix_counters_init(&s->com.cnt);
    pthread_mutex_init(&s->mu, NULL);
    s->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    kvt_status st = KVT_OK;
    if (s->dfd < 0) st = kvt_errorf(err, KVT_ERR_IO, "kv cache dir %s: cannot open: %s", dir, strerror(errno));
    if (!st && faccessat(s->dfd, ".", W_OK, 0) != 0) {
        st = kvt_errorf(err, KVT_ERR_IO, "kv cache dir %s: not writable: %s", dir, strerror(errno));
    }
    if (!st) st = dir_scan(s, dir, err);
    if (!st && p->inflight_bytes > 0) {
        st = kvt_prefix_putq_start(payload_bytes, p->inflight_bytes, 1, dir_write_jobs, s, &s->com.q, err);
    }
    if (st) {
        dir_free(&s->com.base);
        return st;
    }
    *out = &s->com.base;
    return KVT_OK;
}
