// test_prefix_store.c - the stores of prefix-cache blocks (prefix_store.h) on synthetic payloads: the
// directory store (round trip, restart, corrupt / truncated / foreign entries are counted misses, max_bytes
// with LRU removal, the in-flight budget, threads) and the Redis store against a redis-server this suite
// starts itself (test_prefix_store_redis.c; skipped with the reason when hiredis or redis-server is absent).
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/kv/prefix_entry.h"
#include "../src/kv/prefix_store.h"
#include "test.h"
#include "test_prefix_store.h"

kvt_prefix_identity tps_identity(uint32_t fingerprint, uint32_t block_tokens) {
    kvt_prefix_identity id;
    memset(&id, 0, sizeof id);
    id.model_fingerprint = fingerprint;
    strcpy(id.arch, "llama");
    id.n_layer = 2, id.n_head_kv = 2, id.head_dim = 8, id.head_dim_v = 8;
    id.kv_type = 1, id.block_tokens = block_tokens, id.layout = 1;
    return id;
}

kvt_block_key tps_key(int i) {
    return (kvt_block_key){0x1000 + (uint64_t)i * 0x9E3779B97F4A7C15ull, 0xABCD0000ull + (uint64_t)i};
}

void tps_payload(int i, uint8_t *p, int64_t n) {
    uint32_t x = 2166136261u ^ (uint32_t)i;
    for (int64_t j = 0; j < n; j++) {
        x = x * 1664525u + 1013904223u;
        p[j] = (uint8_t)(x >> 24);
    }
}

// Gets key i and compares with its payload: 1 hit with the right bytes, 0 miss, -1 hit with wrong bytes.
int tps_get_check(kvt_prefix_store *s, int i, uint8_t *buf, uint8_t *want) {
    bool hit = false;
    kvt_prefix_store_get(s, &(kvt_block_key){tps_key(i).lo, tps_key(i).hi}, buf, &hit);
    if (!hit) return 0;
    tps_payload(i, want, s->payload_bytes);
    return memcmp(buf, want, (size_t)s->payload_bytes) == 0 ? 1 : -1;
}

#define P 4096 // payload bytes of the synthetic blocks
#define ENTRY (96 + P)

static int count_files(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        const size_t l = strlen(de->d_name), ls = strlen(suffix);
        n += l >= ls && strcmp(de->d_name + l - ls, suffix) == 0 && de->d_name[0] != '.';
    }
    closedir(d);
    return n;
}

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char p[512];
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            unlink(p);
        }
    }
    closedir(d);
    rmdir(dir);
}

// Path of key i's file under identity id in dir.
static void entry_path(char *buf, size_t cap, const char *dir, const kvt_prefix_identity *id, int i);

static kvt_prefix_store *open_dir(const char *dir, uint32_t fp, uint32_t bt, int64_t max_bytes, int64_t inflight) {
    kvt_prefix_identity id = tps_identity(fp, bt);
    kvt_prefix_store_dir_params p = kvt_prefix_store_dir_params_default();
    p.max_bytes = max_bytes;
    p.inflight_bytes = inflight;
    kvt_prefix_store *s = NULL;
    kvt_err err;
    if (kvt_prefix_store_dir_open_params(dir, &id, P, &p, &s, &err)) {
        printf("# open %s: %s\n", dir, err.msg);
        return NULL;
    }
    return s;
}

void tps_put(kvt_prefix_store *s, int i) {
    uint8_t b[P];
    tps_payload(i, b, P);
    kvt_block_key k = tps_key(i);
    kvt_prefix_store_put(s, &k, b);
}

int tps_hits(kvt_prefix_store *s, int a, int b) {
    uint8_t buf[P], want[P];
    int n = 0;
    for (int i = a; i < b; i++) {
        const int r = tps_get_check(s, i, buf, want);
        if (r < 0) return -1000;
        n += r;
    }
    return n;
}

static void flip_byte(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[4096];
    size_t n;
    while (a && b && (n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    if (a) fclose(a);
    if (b) fclose(b);
}

typedef struct {
    kvt_prefix_store *s;
    int t, wrong, hits;
} thr_arg;
static void *thr_main(void *arg);

int tps_threads(kvt_prefix_store *s, int *hits) {
    thr_arg a[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
        a[t] = (thr_arg){s, t, 0, 0};
        pthread_create(&th[t], NULL, thr_main, &a[t]);
    }
    int wrong = 0;
    *hits = 0;
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL), wrong += a[t].wrong, *hits += a[t].hits;
    kvt_prefix_store_flush(s);
    return wrong;
}

static void *thr_main(void *arg) {
    thr_arg *a = arg;
    uint8_t buf[P], want[P];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 24; i++) {
            const int k = (i * 7 + a->t * 5) % 40;
            if ((i + round) % 2) tps_put(a->s, k);
            const int r = tps_get_check(a->s, k, buf, want);
            a->wrong += r < 0;
            a->hits += r > 0;
        }
    }
    return NULL;
}

static void test_dir(void) {
    char dir[] = "/tmp/kvt_pstore_XXXXXX";
    if (!mkdtemp(dir)) {
        test_result(false, "prefix_store dir: temp dir", "mkdtemp failed");
        return;
    }
    kvt_prefix_store_stats st;
    // round trip (asynchronous puts)
    kvt_prefix_store *s = open_dir(dir, 0x1234, 16, 0, 64 << 20);
    for (int i = 0; i < 8; i++) tps_put(s, i);
    tps_put(s, 3); // an existing key is left as it is
    kvt_prefix_store_flush(s);
    int h = tps_hits(s, 0, 9);
    kvt_prefix_store_stats_get(s, &st);
    test_result(h == 8 && st.hits == 8 && st.misses == 1 && st.puts == 9 && st.bytes_written == 8 * P &&
                    st.bytes_read == 8 * P && count_files(dir, ".kvb") == 8,
                "prefix_store dir: round trip (8 puts, 8 hits with the same bytes, 1 miss)",
                "hits %d, stats hits %lld misses %lld puts %lld written %lld, files %d", h, (long long)st.hits,
                (long long)st.misses, (long long)st.puts, (long long)st.bytes_written, count_files(dir, ".kvb"));
    kvt_prefix_store_free(s);

    // restart: a new store on the same directory finds the entries
    s = open_dir(dir, 0x1234, 16, 0, 0);
    h = tps_hits(s, 0, 8);
    test_result(h == 8, "prefix_store dir: entries survive close and reopen", "%d of 8 hits", h);

    // damaged entries: payload byte, header byte, truncation -> counted misses, files removed
    kvt_prefix_identity id = tps_identity(0x1234, 16);
    char path[512], path2[512];
    entry_path(path, sizeof path, dir, &id, 0);
    flip_byte(path, 96 + 1000);
    entry_path(path, sizeof path, dir, &id, 1);
    flip_byte(path, 3);
    entry_path(path, sizeof path, dir, &id, 2);
    if (truncate(path, ENTRY - 10) != 0) printf("# truncate failed\n");
    h = tps_hits(s, 0, 3);
    kvt_prefix_store_stats_get(s, &st);
    test_result(h == 0 && st.miss_corrupt == 3 && st.misses == 3 && count_files(dir, ".kvb") == 5,
                "prefix_store dir: a flipped payload byte, a flipped header byte, a truncated file: misses counted",
                "hits %d, miss_corrupt %lld, files %d", h, (long long)st.miss_corrupt, count_files(dir, ".kvb"));
    kvt_prefix_store_free(s);

    // other model / other block size: no entry under their names; a file of ours renamed to theirs fails the
    // identity check
    const uint32_t other[2][2] = {{0x9999, 16}, {0x1234, 32}};
    for (int o = 0; o < 2; o++) {
        kvt_prefix_store *b = open_dir(dir, other[o][0], other[o][1], 0, 0);
        kvt_prefix_identity bid = tps_identity(other[o][0], other[o][1]);
        const int h1 = tps_hits(b, 3, 8);
        entry_path(path, sizeof path, dir, &id, 3 + o);
        entry_path(path2, sizeof path2, dir, &bid, 3 + o);
        copy_file(path, path2);
        const int h2 = tps_hits(b, 3 + o, 4 + o);
        kvt_prefix_store_stats_get(b, &st);
        test_result(h1 == 0 && h2 == 0 && st.miss_corrupt == 1 && !test_file_exists(path2),
                    o ? "prefix_store dir: entries of another block size are never used"
                      : "prefix_store dir: entries of another model are never used",
                    "hits %d/%d, miss_corrupt %lld", h1, h2, (long long)st.miss_corrupt);
        kvt_prefix_store_free(b);
    }
    rm_dir(dir);

    // max_bytes: 3 entries fit; the least recently used goes
    if (!mkdtemp(strcpy(dir, "/tmp/kvt_pstore_XXXXXX"))) return;
    s = open_dir(dir, 0x1234, 16, 3 * ENTRY, 0);
    tps_put(s, 0), tps_put(s, 1), tps_put(s, 2);
    tps_hits(s, 0, 1); // 0 is now more recent than 1
    tps_put(s, 3);
    const int h1 = tps_hits(s, 1, 2), h023 = tps_hits(s, 0, 1) + tps_hits(s, 2, 4);
    test_result(h1 == 0 && h023 == 3 && count_files(dir, ".kvb") == 3,
                "prefix_store dir: max_bytes of 3 entries removes the least recently used one",
                "evicted one hit %d, others %d of 3, files %d", h1, h023, count_files(dir, ".kvb"));
    kvt_prefix_store_free(s);
    s = open_dir(dir, 0x1234, 16, 2 * ENTRY, 0); // reopened smaller: trimmed at open
    test_result(count_files(dir, ".kvb") == 2, "prefix_store dir: a smaller max_bytes trims the directory at open",
                "%d files", count_files(dir, ".kvb"));
    kvt_prefix_store_free(s);
    rm_dir(dir);

    // the in-flight budget: one block; every put is written or counted as dropped
    if (!mkdtemp(strcpy(dir, "/tmp/kvt_pstore_XXXXXX"))) return;
    s = open_dir(dir, 0x1234, 16, 0, P);
    for (int i = 0; i < 64; i++) tps_put(s, i);
    kvt_prefix_store_flush(s);
    kvt_prefix_store_stats_get(s, &st);
    h = tps_hits(s, 0, 64);
    test_result(st.puts == 64 && st.bytes_written / P + st.put_dropped == 64 && h == st.bytes_written / P && h >= 1,
                "prefix_store dir: in-flight budget of one block: each put written or counted as dropped",
                "puts %lld, written %lld, dropped %lld, hits %d", (long long)st.puts, (long long)(st.bytes_written / P),
                (long long)st.put_dropped, h);
    kvt_prefix_store_free(s);
    rm_dir(dir);

    // threads: puts and gets of overlapping keys at once; every hit has the right bytes
    if (!mkdtemp(strcpy(dir, "/tmp/kvt_pstore_XXXXXX"))) return;
    s = open_dir(dir, 0x1234, 16, 30 * ENTRY, 64 << 20);
    int th_hits;
    const int wrong = tps_threads(s, &th_hits);
    kvt_prefix_store_stats_get(s, &st);
    const int files = count_files(dir, ".kvb"), after = tps_hits(s, 0, 40);
    test_result(wrong == 0 && st.put_failed == 0 && files <= 30 && files > 0 && after == files,
                "prefix_store dir: 4 threads putting and getting at once (max 30 entries): no wrong bytes",
                "wrong %d, failed %lld, files %d, hits afterwards %d (during: %d)", wrong, (long long)st.put_failed,
                files, after, th_hits);
    kvt_prefix_store_free(s);
    rm_dir(dir);

    // a directory that cannot be created: an error naming it
    kvt_prefix_identity bid = tps_identity(1, 16);
    kvt_err err = {0};
    kvt_prefix_store *bad = NULL;
    const kvt_status bst = kvt_prefix_store_dir_open("/proc/kvt_no/such", &bid, P, 0, &bad, &err);
    test_result(bst == KVT_ERR_IO && !bad && strstr(err.msg, "/proc/kvt_no/such"),
                "prefix_store dir: an uncreatable directory is KVT_ERR_IO naming it", "status %d: %s", bst, err.msg);
}

static void entry_path(char *buf, size_t cap, const char *dir, const kvt_prefix_identity *id, int i) {
    const kvt_block_key k = tps_key(i);
    snprintf(buf, cap, "%s/%08x-%016llx%016llx.kvb", dir, kvt_prefix_identity_hash(id), (unsigned long long)k.hi,
             (unsigned long long)k.lo);
}

void test_prefix_store(const test_env *env) {
    (void)env;
    test_dir();
    tps_redis_tests(env);
}
