// prefix_store_bench.c - bytes per second of a prefix-block store (prefix_store.h) on synthetic blocks:
// puts (queued, then flush: the writer's sustained rate), gets one at a time, pipelined gets (get_many of
// `batch`), and gets from `threads` threads at once.
//   make prefix-store-bench
//   build/prefix_store_bench URL [block_bytes=614400] [blocks=200] [threads=4] [batch=8]
// URL: redis://HOST:PORT, unix:///PATH (Redis) or dir:/PATH (the directory store; its files stay, the
// caller removes them). 614400 bytes is a SmolLM2-135M block: 30 layers x 5 KV heads x 16 tokens x 64 dims x 2 (K, V)
// x 2 bytes. tools/bench/prefix_store_bench.sh runs it beside redis-benchmark on a server of its own.
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../../src/base/timer.h"
#include "../../src/kv/prefix_store.h"

typedef struct {
    kvt_prefix_store *s;
    int first, n, stride;
    int hits;
} worker;

static kvt_block_key key_of(int i) { return (kvt_block_key){(uint64_t)i * 0x9E3779B97F4A7C15ull, (uint64_t)getpid()}; }

static void *get_worker(void *arg) {
    worker *w = arg;
    uint8_t *buf = malloc((size_t)w->s->payload_bytes);
    for (int i = w->first; buf && i < w->n; i += w->stride) {
        bool hit;
        const kvt_block_key k = key_of(i);
        kvt_prefix_store_get(w->s, &k, buf, &hit);
        w->hits += hit;
    }
    free(buf);
    return NULL;
}

// CPU time of this process (all threads, user + system) in ms: steadier than wall time on a shared machine.
static double cpu_ms(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

static void report(const char *what, int n, int64_t bytes, double ms, double cpu, int hits) {
    printf("%-22s %5d blocks %8.1f ms %8.1f MB/s %7.1f blocks/s  client CPU %6.1f ms (%.0f us/block)  hits %d\n",
           what, n, ms, (double)n * (double)bytes / 1e6 / (ms / 1e3), n / (ms / 1e3), cpu, cpu * 1e3 / n, hits);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s URL [block_bytes=614400] [blocks=200] [threads=4] [batch=8]\n", argv[0]);
        return 2;
    }
    const char *url = argv[1];
    const int64_t bytes = argc > 2 ? atoll(argv[2]) : 614400;
    const int n = argc > 3 ? atoi(argv[3]) : 200;
    const int threads = argc > 4 ? atoi(argv[4]) : 4;
    const int batch = argc > 5 ? atoi(argv[5]) : 8;
    if (bytes <= 0 || n <= 0 || threads < 1 || threads > 64 || batch < 1 || batch > 1024) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    kvt_prefix_identity id;
    memset(&id, 0, sizeof id);
    id.model_fingerprint = 0xBE7C4, id.n_layer = 30, id.n_head_kv = 5, id.head_dim = id.head_dim_v = 64;
    id.kv_type = 1, id.block_tokens = 16, id.layout = 1;
    strcpy(id.arch, "llama");
    kvt_prefix_store *s = NULL;
    kvt_err err;
    kvt_status st;
    if (strncmp(url, "dir:", 4) == 0) {
        kvt_prefix_store_dir_params p = kvt_prefix_store_dir_params_default();
        p.inflight_bytes = (int64_t)n * bytes;
        st = kvt_prefix_store_dir_open_params(url + 4, &id, bytes, &p, &s, &err);
    } else {
        kvt_prefix_store_redis_params p = kvt_prefix_store_redis_params_default();
        p.inflight_bytes = (int64_t)n * bytes; // every put queued: the writer's sustained rate is what is timed
        p.pool_size = threads > p.pool_size ? threads : p.pool_size;
        p.pipeline = batch;
        p.key_prefix = "kvtbench";
        p.ttl_s = 600;
        st = kvt_prefix_store_redis_open(url, &id, bytes, &p, &s, &err);
    }
    if (st) {
        fprintf(stderr, "prefix_store_bench: %s\n", err.msg);
        return 1;
    }
    uint8_t *blocks = malloc((size_t)bytes * 4), *buf = malloc((size_t)bytes * (size_t)batch);
    void **dsts = malloc(sizeof *dsts * (size_t)batch);
    kvt_block_key *keys = malloc(sizeof *keys * (size_t)batch);
    bool *hits = malloc((size_t)batch);
    if (!blocks || !buf || !dsts || !keys || !hits) return 1;
    for (int64_t i = 0; i < bytes * 4; i++) blocks[i] = (uint8_t)(i * 131 + (i >> 12));
    printf("# %s, block %" PRId64 " bytes, %d blocks, %d threads, batch %d\n", url, bytes, n, threads, batch);

    double t0 = kvt_time_ms(), c0 = cpu_ms();
    for (int i = 0; i < n; i++) {
        const kvt_block_key k = key_of(i);
        kvt_prefix_store_put(s, &k, blocks + (size_t)(i % 4) * (size_t)bytes);
    }
    kvt_prefix_store_flush(s);
    kvt_prefix_store_stats stats;
    kvt_prefix_store_stats_get(s, &stats);
    report("put (queued + flush)", n, bytes, kvt_time_ms() - t0, cpu_ms() - c0, (int)(stats.bytes_written / bytes));

    t0 = kvt_time_ms(), c0 = cpu_ms();
    int h = 0;
    for (int i = 0; i < n; i++) {
        bool hit;
        const kvt_block_key k = key_of(i);
        kvt_prefix_store_get(s, &k, buf, &hit);
        h += hit;
    }
    report("get (one at a time)", n, bytes, kvt_time_ms() - t0, cpu_ms() - c0, h);

    t0 = kvt_time_ms(), c0 = cpu_ms();
    h = 0;
    for (int i = 0; i < n; i += batch) {
        const int m = n - i < batch ? n - i : batch;
        for (int j = 0; j < m; j++) keys[j] = key_of(i + j), dsts[j] = buf + (size_t)j * (size_t)bytes;
        kvt_prefix_store_get_many(s, keys, m, dsts, hits);
        for (int j = 0; j < m; j++) h += hits[j];
    }
    char what[64];
    snprintf(what, sizeof what, "get_many (batch %d)", batch);
    report(what, n, bytes, kvt_time_ms() - t0, cpu_ms() - c0, h);

    worker w[64];
    pthread_t th[64];
    t0 = kvt_time_ms(), c0 = cpu_ms();
    for (int t = 0; t < threads; t++) {
        w[t] = (worker){s, t, n, threads, 0};
        pthread_create(&th[t], NULL, get_worker, &w[t]);
    }
    h = 0;
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL), h += w[t].hits;
    snprintf(what, sizeof what, "get (%d threads)", threads);
    report(what, n, bytes, kvt_time_ms() - t0, cpu_ms() - c0, h);

    kvt_prefix_store_stats_get(s, &stats);
    printf("# stats: gets %" PRId64 " hits %" PRId64 " misses %" PRId64 " (corrupt %" PRId64 ", unavailable %" PRId64
           ") puts %" PRId64 " failed %" PRId64 " dropped %" PRId64 "\n",
           stats.gets, stats.hits, stats.misses, stats.miss_corrupt, stats.miss_unavailable, stats.puts,
           stats.put_failed, stats.put_dropped);
    kvt_prefix_store_free(s);
    free(blocks), free(buf), free(dsts), free(keys), free(hits);
    return 0;
}
