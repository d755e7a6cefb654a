// test_kv.c - the tiered paged KV store: exactness against the all-in-T0 run
// for random budgets, block sizes, granularities, policies and prefetch depths;
// fork / copy-on-write; disk integrity (CRC mismatch, injected I/O errors);
// budget errors; the pure eviction policies; CRC32C.
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../src/base/crc32c.h"
#include "../src/base/timer.h"
#include "../src/cli/commands.h"
#include "../src/exec/context.h"
#include "../src/attn/attention.h"
#include "../src/kv/kv_paged.h"
#include "../src/kv/kv_policy.h"
#include "../src/kv/kv_tier.h"
#include "../src/kv/kv_uring.h"
#include "../src/model/model.h"
#include "test.h"

static uint64_t rng_next(uint64_t *s) { // splitmix64
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int64_t rng_range(uint64_t *s, int64_t lo, int64_t hi) { // [lo, hi]
    return lo + (int64_t)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

// --- CRC32C and policies ---------------------------------------------------------

static void test_crc(void) {
    enum { N = 3 * 65536 + 200 };
    uint8_t *buf = malloc(N);
    uint64_t s = 7;
    for (int i = 0; buf && i < N; i++) buf[i] = (uint8_t)rng_next(&s);
    bool ok = buf && kvt_crc32c(0, "123456789", 9) == 0xE3069283u && kvt_crc32c_sw(0, "123456789", 9) == 0xE3069283u;
    // small sizes (one stream), and sizes around and far above the three-stream threshold (3 x 4096)
    const int sizes[] = {0, 37, 999, 12287, 12288, 12289, 12296, 12300, 65536, 3 * 65536 + 99, N - 100};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && ok; k++) {
        const size_t n = (size_t)sizes[k];
        ok = kvt_crc32c(0, buf + 3, n) == kvt_crc32c_sw(0, buf + 3, n);
        ok = ok && kvt_crc32c(kvt_crc32c(0, buf, 100), buf + 100, n) == kvt_crc32c(0, buf, 100 + n);
        // combining two CRCs; a copy that sums what it copies
        ok = ok && kvt_crc32c_combine(kvt_crc32c(0, buf, 100), kvt_crc32c(0, buf + 100, n), n) == kvt_crc32c(0, buf, 100 + n);
        uint8_t *dst = malloc(n + 1);
        ok = ok && dst && kvt_crc32c_copy(5, dst, buf + 1, n) == kvt_crc32c(5, buf + 1, n) && !memcmp(dst, buf + 1, n);
        free(dst);
    }
    double t0 = kvt_time_ms(), gbps;
    uint32_t c = 0;
    for (int r = 0; r < 64 && ok; r++) c ^= kvt_crc32c((uint32_t)r, buf, 3 * 65536);
    gbps = 64.0 * 3 * 65536 / (kvt_time_ms() - t0) / 1e6;
    printf("#    crc32c %.1f GB/s (192 KiB buffers, %08x)\n", gbps, c);
    free(buf);
    test_result(ok, "kv: crc32c check value, hardware == table, chaining, three streams, combine, copy", "mismatch");
}

static void test_policies(void) {
    // blocks: A used long ago often, B recent once, C needed farthest by the schedule
    kvt_evict_info c[3] = {{.last_use = 1, .uses = 9, .next_use = 5},
                           {.last_use = 10, .uses = 1, .next_use = 2},
                           {.last_use = 5, .uses = 3, .next_use = 50}};
    const kvt_evict_policy *lru = kvt_evict_policy_find("lru"), *lfu = kvt_evict_policy_find("lfu"),
                           *la = kvt_evict_policy_find("lookahead");
    bool ok = lru && lfu && la && !kvt_evict_policy_find("fifo");
    ok = ok && kvt_evict_pick(lru, c, 3, 11) == 0 && kvt_evict_pick(lfu, c, 3, 11) == 1 &&
         kvt_evict_pick(la, c, 3, 11) == 2 && kvt_evict_pick(la, c, 0, 11) == -1;
    // LFU ties are broken by recency
    kvt_evict_info t[2] = {{.last_use = 8, .uses = 2}, {.last_use = 3, .uses = 2}};
    ok = ok && kvt_evict_pick(lfu, t, 2, 10) == 1;
    // spread: 30 shards of 8 blocks, a fast tier short of 36 blocks (stream share 0.15): the oldest 1 or 2
    // blocks of every shard stream, 36 in all, and a streamed block goes before any other whatever its
    // next use
    const kvt_evict_policy *sp = kvt_evict_policy_find("spread");
    int64_t n_stream = 0, max_per = 0, min_per = 8;
    for (int64_t sh = 0; sp && sh < 30; sh++) {
        int64_t per = 0;
        for (int64_t b = 0; b < 8; b++) {
            kvt_evict_info x = {.shard = sh, .index = b, .shard_blocks = 8, .stream_frac = 36.0 / 240.0};
            if (kvt_evict_streams(&x)) {
                per++;
                ok = ok && b < 2; // the oldest
            }
        }
        n_stream += per;
        max_per = per > max_per ? per : max_per;
        min_per = per < min_per ? per : min_per;
    }
    ok = ok && sp && n_stream == 36 && min_per == 1 && max_per == 2;
    kvt_evict_info s2[2] = {{.next_use = 900, .shard = 3, .index = 5, .shard_blocks = 8, .stream_frac = 0.15},
                            {.next_use = 4, .shard = 3, .index = 0, .shard_blocks = 8, .stream_frac = 0.15}};
    ok = ok && sp && kvt_evict_pick(sp, s2, 2, 10) == 1 && kvt_evict_pick(la, s2, 2, 10) == 0;
    ok = ok && sp && !sp->clean_first && la->clean_first;
    test_result(ok, "kv: eviction policies are pure functions (lru, lfu, lookahead, spread)", "wrong victim");
}

// --- exactness against the all-in-T0 run ----------------------------------------------

typedef struct {
    int32_t *ids;   // [n_gen]
    float *logits;  // [n_gen, n_vocab] logits that chose each id
    kvt_kv_stats st;
    kvt_err err;
    kvt_status status;
} run_out;

static void run_free(run_out *r) {
    free(r->ids);
    free(r->logits);
}

// Greedy: prompt then n_gen tokens; records every step's logits.
static void run_greedy(const kvt_model *m, const kvt_context_params *cp, const int32_t *prompt, int64_t n_prompt,
                       int64_t n_gen, run_out *r) {
    memset(r, 0, sizeof *r);
    const int32_t V = m->hp.n_vocab;
    r->ids = calloc((size_t)n_gen, sizeof *r->ids);
    r->logits = calloc((size_t)(n_gen * V), sizeof *r->logits);
    kvt_context *ctx = NULL;
    if ((r->status = kvt_context_init(m, cp, &ctx, &r->err))) return;
    r->status = kvt_decode(ctx, prompt, n_prompt, false, &r->err);
    for (int64_t i = 0; !r->status && i < n_gen; i++) {
        const float *l = kvt_context_logits(ctx);
        memcpy(r->logits + i * V, l, (size_t)V * sizeof(float));
        int32_t best = 0;
        for (int32_t j = 1; j < V; j++) best = l[j] > l[best] ? j : best;
        r->ids[i] = best;
        if (i + 1 < n_gen) r->status = kvt_decode(ctx, &best, 1, false, &r->err);
    }
    kvt_context_kv_stats(ctx, &r->st);
    kvt_context_free(ctx);
}

// max |a-b| / max |ref| over all steps
static double rel_diff(const float *a, const float *ref, int64_t n) {
    double md = 0, mr = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (d > md) md = d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    return md / mr;
}

static int64_t slot_bytes(int64_t block_bytes) { return (block_bytes + 63) / 64 * 64; }

// Random tier configurations on one model; each must give the ids and logits of the contiguous run.
static void property_model(const char *label, const char *path, int n_cases, uint64_t seed, bool quick) {
    char name[160];
    snprintf(name, sizeof name, "kv: %s: %d random tier set-ups give the all-in-T0 ids and logits (1e-5)", label,
             n_cases);
    kvt_model *m = NULL;
    kvt_err err = {0};
    if (kvt_model_load(path, false, &m, &err)) {
        test_result(false, name, "%s", err.msg);
        return;
    }
    const kvt_hparams *hp = &m->hp;
    uint64_t s = seed;
    const int64_t n_prompt = quick ? 40 : 70, n_gen = quick ? 6 : 12;
    int32_t prompt[128];
    for (int64_t i = 0; i < n_prompt; i++) prompt[i] = (int32_t)rng_range(&s, 3, hp->n_vocab - 1);
    kvt_context_params base = kvt_context_params_default();
    base.n_ctx = 128;
    base.n_threads = 2;
    base.n_ubatch = 32; // chunked prefill
    base.kv_block = 16;
    run_out ref;
    run_greedy(m, &base, prompt, n_prompt, n_gen, &ref);
    bool ok = !ref.status;
    char why[1024] = "";
    if (!ok) snprintf(why, sizeof why, "reference run: %s", ref.err.msg);
    const char *pols[4] = {"lru", "lfu", "lookahead", "spread"};
    const int64_t n_tok = n_prompt + n_gen;
    for (int c = 0; ok && c < n_cases; c++) {
        kvt_context_params cp = base;
        cp.kv_paged = true;
        cp.kv_block = rng_range(&s, 1, 40);
        // a random divisor of n_head_kv as the group size
        int32_t g;
        do g = (int32_t)rng_range(&s, 1, hp->n_head_kv);
        while (hp->n_head_kv % g);
        cp.kv_group = g;
        cp.kv_evict = pols[rng_range(&s, 0, 3)];
        cp.kv_prefetch = (int32_t)rng_range(&s, 0, 6);
        kvt_kv_paged_params pp = kvt_kv_paged_params_default();
        pp.type = cp.kv_type;
        pp.n_head_kv = hp->n_head_kv;
        pp.head_dim = hp->head_dim;
        pp.head_dim_v = hp->head_dim_v;
        pp.block_tokens = cp.kv_block;
        pp.group_heads = g;
        const int64_t sb = slot_bytes(kvt_kv_paged_block_bytes(&pp));
        const int64_t total = (int64_t)hp->n_layer * (hp->n_head_kv / g) * ((n_tok + cp.kv_block - 1) / cp.kv_block);
        const int64_t fast = rng_range(&s, 2, total + 2);
        cp.kv_fast_bytes = fast * sb + rng_range(&s, 0, sb - 1);
        int kind = (int)rng_range(&s, 0, 2); // 0: host only, 1: disk only, 2: host + disk
        if (fast >= total) kind = (int)rng_range(&s, 0, 3); // 3: T0 only
        cp.kv_host_bytes = 0;
        cp.kv_disk_dir = NULL;
        if (kind == 0) cp.kv_host_bytes = (total - fast + 2 + rng_range(&s, 0, 4)) * sb;
        if (kind == 2) cp.kv_host_bytes = rng_range(&s, 1, total) * sb;
        if (kind == 1 || kind == 2) cp.kv_disk_dir = "/tmp";
        run_out r;
        run_greedy(m, &cp, prompt, n_prompt, n_gen, &r);
        const char *cfg_fmt = "case %d (block %lld, group %d, %s, prefetch %d, fast %lld host %lld disk %s)";
        char cfg[256];
        snprintf(cfg, sizeof cfg, cfg_fmt, c, (long long)cp.kv_block, g, cp.kv_evict, cp.kv_prefetch,
                 (long long)cp.kv_fast_bytes, (long long)cp.kv_host_bytes, cp.kv_disk_dir ? "yes" : "no");
        if (r.status) {
            ok = false;
            snprintf(why, sizeof why, "%s: %s", cfg, r.err.msg);
        } else {
            double rd = rel_diff(r.logits, ref.logits, n_gen * hp->n_vocab);
            bool same = !memcmp(r.ids, ref.ids, (size_t)n_gen * sizeof(int32_t));
            bool within = r.st.peak_bytes[0] <= cp.kv_fast_bytes &&
                          (!cp.kv_host_bytes || r.st.peak_bytes[1] <= cp.kv_host_bytes);
            if (!same || rd > 1e-5 || !within) {
                ok = false;
                snprintf(why, sizeof why, "%s: ids %s, logits rel diff %.3g, peak fast %lld host %lld", cfg,
                         same ? "same" : "differ", rd, (long long)r.st.peak_bytes[0], (long long)r.st.peak_bytes[1]);
            }
        }
        run_free(&r);
    }
    test_result(ok, name, "%s", why);
    run_free(&ref);
    kvt_model_free(m);
}

// A synthetic llama with 6 layers, 8 query heads over 4 KV heads.
static bool make_synth(char *path, size_t cap) {
    snprintf(path, cap, "/tmp/kvt_test_kv_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) return false;
    close(fd);
    char *argv[] = {"-q", "-o", path, "--arch", "llama", "--dim", "64", "--layers", "6", "--heads", "8", "--kv-heads",
                    "4", "--ff", "128", "--vocab", "300", "--ctx", "256", "--type", "f32", NULL};
    return cmd_mkmodel((int)(sizeof argv / sizeof argv[0]) - 1, argv) == 0;
}

// --- fork and copy on write ----------------------------------------------------------

static kvt_kv_paged_params small_params(void) {
    kvt_kv_paged_params p = kvt_kv_paged_params_default();
    p.type = KVT_TYPE_F32;
    p.n_layer = 2;
    p.n_head_kv = 2;
    p.head_dim = 4;
    p.head_dim_v = 4;
    p.n_ctx = 64;
    p.block_tokens = 4;
    p.group_heads = 1;
    return p;
}

// Value of K (v: V) element e of position pos, layer l, in sequence variant `tag`.
static float kval(int tag, int l, int64_t pos, int e, int v) { return (float)(tag * 10000 + l * 1000 + pos * 10 + e) + (v ? 0.5f : 0); }

static kvt_status put(kvt_kv *kv, int32_t seq, int tag, int64_t pos, int64_t n, kvt_err *err) {
    float k[64 * 8], v[64 * 8];
    for (int l = 0; l < kv->n_layer; l++) {
        for (int64_t i = 0; i < n; i++) {
            for (int e = 0; e < 8; e++) {
                k[i * 8 + e] = kval(tag, l, pos + i, e, 0);
                v[i * 8 + e] = kval(tag, l, pos + i, e, 1);
            }
        }
        kvt_status st = kv->ops->append(kv, seq, l, pos, n, k, v, err);
        if (st) return st;
    }
    return KVT_OK;
}

// Checks positions [0, n) of seq: tag_of(pos) gives the variant expected there.
static bool check(kvt_kv *kv, int32_t seq, int64_t n, int64_t split, int tag_lo, int tag_hi) {
    for (int l = 0; l < kv->n_layer; l++) {
        for (int32_t g = 0; g < kv->n_group; g++) {
            for (int64_t b = 0; b < kvt_kv_n_blocks(kv, n); b++) {
                kvt_kv_view w;
                kvt_err e;
                if (kv->ops->acquire(kv, seq, l, g, b, &w, &e)) return false;
                bool ok = true;
                for (int64_t i = 0; i < w.n && w.pos0 + i < n; i++) {
                    int64_t pos = w.pos0 + i;
                    int tag = pos < split ? tag_lo : tag_hi;
                    for (int x = 0; x < 4; x++) {
                        float kk = ((const float *)((const uint8_t *)w.k + i * w.k_stride))[x];
                        float vv = ((const float *)((const uint8_t *)w.v + i * w.v_stride))[x];
                        ok = ok && kk == kval(tag, l, pos, g * 4 + x, 0) && vv == kval(tag, l, pos, g * 4 + x, 1);
                    }
                }
                kv->ops->release(kv, seq, l, g, b);
                if (!ok) return false;
            }
        }
    }
    return true;
}

static void test_fork_cow(void) {
    const char *name = "kv: fork shares blocks, copy on write of the partly filled last block";
    for (int variant = 0; variant < 2; variant++) {
        kvt_kv_paged_params p = small_params();
        if (variant) { // tiny T0 with host + disk: the shared blocks move between tiers
            p.fast_bytes = 3 * 64 * 4;
            p.host_bytes = 4 * 64 * 4;
            p.disk_dir = "/tmp";
        }
        kvt_kv *kv = NULL;
        kvt_err err = {0};
        int32_t s1 = -1;
        bool ok = !kvt_kv_paged_init(&p, &kv, &err) && !put(kv, 0, 1, 0, 10, &err);
        kvt_kv_stats a, b;
        if (ok) kvt_kv_get_stats(kv, &a);
        ok = ok && !kv->ops->seq_fork(kv, 0, &s1, &err) && s1 == 1;
        if (ok) kvt_kv_get_stats(kv, &b);
        // forking copies nothing
        ok = ok && b.moved_count[0][0] == a.moved_count[0][0];
        ok = ok && !put(kv, 1, 2, 10, 5, &err) && !put(kv, 0, 3, 10, 3, &err);
        ok = ok && check(kv, 0, 13, 10, 1, 3) && check(kv, 1, 15, 10, 1, 2);
        kvt_kv_get_stats(kv, &b);
        // the shared last block (positions 8..11) was copied once per shard (2 layers x 2 groups)
        ok = ok && b.moved_count[0][0] - a.moved_count[0][0] == 4;
        // overwrite the fork's tail (truncate + append) and free it: seq 0 unchanged
        if (ok) kv->ops->truncate(kv, 1, 6);
        ok = ok && !put(kv, 1, 4, 6, 2, &err) && check(kv, 1, 8, 6, 1, 4) && check(kv, 0, 13, 10, 1, 3);
        if (ok) kv->ops->seq_free(kv, 1);
        kvt_kv_view w;
        ok = ok && kv->ops->acquire(kv, 1, 0, 0, 0, &w, &err) == KVT_ERR_INVALID_ARG && check(kv, 0, 13, 10, 1, 3);
        if (ok) kvt_kv_get_stats(kv, &b);
        // only seq 0's 4 blocks per shard remain, wherever they live
        int64_t used = (b.used_bytes[0] + b.used_bytes[1]) / b.block_bytes;
        ok = ok && (variant || used == 4 * 4);
        kvt_kv_free(kv);
        if (!ok) {
            test_result(false, name, "variant %d: %s", variant, err.msg);
            return;
        }
    }
    test_result(true, name, "");
}

// Readers of sequence 0 (acquire / release on their own threads, as the compute threads do) while the sequence-calls
// thread forks and frees other sequences (kv.h allows both at once): a fork that grows the store's sequence table
// moved it while a reader waited in a load with the mutex let go, and the reader then used the old table (heap use
// after free, seen under ASan; found by a randomized test of the store). Sequence 0 lives mostly on disk (a fast
// tier of 3 blocks), so readers wait in loads often; every value they read is checked.
typedef struct {
    kvt_kv *kv;
    atomic_int stop;
    atomic_long reads, wrong;
} reader_ctx;

static void *kv_reader(void *arg) {
    reader_ctx *r = arg;
    while (!atomic_load(&r->stop)) {
        if (!check(r->kv, 0, 40, 40, 1, 1)) atomic_fetch_add(&r->wrong, 1);
        atomic_fetch_add(&r->reads, 1);
    }
    return NULL;
}

static void test_readers_beside_forks(void) {
    bool ok = true;
    long reads = 0, wrong = 0;
    int64_t forks = 0;
    kvt_err err = {0};
    for (int round = 0; ok && round < 4; round++) { // a new store each round: its sequence table grows again
        kvt_kv_paged_params p = small_params();
        p.fast_bytes = 3 * 64 * 4;
        p.disk_dir = "/tmp";
        p.prefetch = 4;
        kvt_kv *kv = NULL;
        ok = !kvt_kv_paged_init(&p, &kv, &err) && !put(kv, 0, 1, 0, 40, &err);
        reader_ctx r = {.kv = kv};
        pthread_t th[2];
        int started = 0;
        for (; ok && started < 2; started++) ok = pthread_create(&th[started], NULL, kv_reader, &r) == 0;
        // the readers under way before the forks (on a loaded machine the forks could all end before a reader ran)
        for (int waited = 0; ok && atomic_load(&r.reads) == 0 && waited < 20000; waited++) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        // forks kept until the end: the table grows by one entry at each (a realloc that may move it)
        enum { NF = 120 };
        int32_t seqs[NF];
        int n = 0;
        for (; ok && n < NF; n++) ok = !kv->ops->seq_fork(kv, 0, &seqs[n], &err);
        forks += n;
        for (int i = 0; i < n; i++) kv->ops->seq_free(kv, seqs[i]);
        atomic_store(&r.stop, 1);
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
        reads += atomic_load(&r.reads), wrong += atomic_load(&r.wrong);
        kvt_kv_free(kv);
    }
    test_result(ok && wrong == 0 && reads > 0,
                "kv: readers of a sequence on disk beside forks and frees on the sequence-calls thread: every value right",
                "%s (%lld forks, %ld full reads, %ld wrong)", ok ? "" : err.msg, (long long)forks, reads, wrong);
}

// --- memory warmed ahead of use -----------------------------------------------------------

static void test_warm(void) {
    const char *name = "kv: memory warmed ahead of use: one chunk a call, within each tier's budget, the blocks written "
                       "there read back; a sliding-window layer's window only, or every position (whole)";
    char why[768] = "";
    for (int variant = 0; variant < 2 && !why[0]; variant++) {
        kvt_kv_paged_params p = small_params();
        if (variant) { // small fast and host tiers over disk: each warmed up to its budget, no further
            p.fast_bytes = 6 * slot_bytes(kvt_kv_paged_block_bytes(&p));
            p.host_bytes = 8 * slot_bytes(kvt_kv_paged_block_bytes(&p));
            p.disk_dir = "/tmp";
        }
        kvt_kv *kv = NULL;
        kvt_err err = {0};
        if (kvt_kv_paged_init(&p, &kv, &err)) {
            snprintf(why, sizeof why, "variant %d: %s", variant, err.msg);
            break;
        }
        const int64_t sb = slot_bytes(kvt_kv_paged_block_bytes(&p));
        int calls = 0;
        if (kvt_kv_paged_warm(kv, 64, false, 0)) { // a bound of 0 bytes: nothing to make
            snprintf(why, sizeof why, "variant %d: warmed with max_bytes 0", variant);
            kvt_kv_free(kv);
            break;
        }
        while (calls < 8 && kvt_kv_paged_warm(kv, 64, false, -1)) calls++;
        kvt_kv_stats a, b;
        kvt_kv_get_stats(kv, &a);
        // unbounded: one 8 MiB chunk holds room for 64 positions (2 layers x 2 groups x 16 blocks); bounded: each
        // memory tier's whole budget, in one chunk each
        const int64_t want_fast = variant ? 6 * sb : ((int64_t)8 << 20) / sb * sb, want_host = variant ? 8 * sb : 0;
        if (calls != (variant ? 2 : 1) || a.warm_bytes[KVT_TIER_FAST] != want_fast ||
            a.warm_bytes[KVT_TIER_HOST] != want_host || a.warm_bytes[KVT_TIER_DISK] != 0 || a.used_bytes[0] != 0) {
            snprintf(why, sizeof why, "variant %d: %d calls made %lld / %lld bytes (want %lld / %lld)", variant, calls,
                     (long long)a.warm_bytes[KVT_TIER_FAST], (long long)a.warm_bytes[KVT_TIER_HOST],
                     (long long)want_fast, (long long)want_host);
        } else if (kvt_kv_paged_warm(kv, 0, false, -1) || put(kv, 0, 1, 0, 40, &err) || !check(kv, 0, 40, 40, 1, 1) ||
                   (kv->ops->truncate(kv, 0, 0), put(kv, 0, 2, 0, 24, &err)) || !check(kv, 0, 24, 24, 2, 2)) {
            snprintf(why, sizeof why, "variant %d: the store over warmed chunks: %s", variant, err.msg[0] ? err.msg : "wrong values");
        } else {
            kvt_kv_get_stats(kv, &b);
            // the blocks took the warmed slots: nothing more made; unbounded, the chunk still holds the room
            if (b.warm_bytes[KVT_TIER_FAST] != a.warm_bytes[KVT_TIER_FAST] || (!variant && kvt_kv_paged_warm(kv, 64, false, -1)))
                snprintf(why, sizeof why, "variant %d: warmed again after use", variant);
        }
        kvt_kv_free(kv);
    }
    // a sliding-window layer: its window and a block, or (whole) every position. P positions fill 3/4 of a chunk
    // in each of the two layers: windowed one chunk, whole two
    for (int whole = 0; whole < 2 && !why[0]; whole++) {
        kvt_kv_paged_params p = small_params();
        const int32_t win[2] = {0, 8};
        p.layer_window = win;
        kvt_kv *kv = NULL;
        kvt_err e = {0};
        if (kvt_kv_paged_init(&p, &kv, &e)) {
            snprintf(why, sizeof why, "a window: %s", e.msg);
            break;
        }
        const int64_t sb = slot_bytes(kvt_kv_paged_block_bytes(&p)), per_chunk = ((int64_t)8 << 20) / sb;
        const int64_t P = per_chunk * 3 / 4 / 2 * p.block_tokens; // (2 groups a layer)
        int calls = 0;
        while (calls < 8 && kvt_kv_paged_warm(kv, P, whole, -1)) calls++;
        kvt_kv_stats a;
        kvt_kv_get_stats(kv, &a);
        if (calls != 1 + whole || a.warm_bytes[KVT_TIER_FAST] != (1 + whole) * per_chunk * sb) {
            snprintf(why, sizeof why, "a window, whole %d: %d calls made %lld bytes for %lld positions", whole, calls,
                     (long long)a.warm_bytes[KVT_TIER_FAST], (long long)P);
        }
        kvt_kv_free(kv);
    }
    kvt_kv_params cpar = {KVT_TYPE_F32, 2, 2, 4, 4, 64, 4, 1};
    kvt_kv *kc = NULL;
    kvt_err err = {0};
    if (!why[0] && (kvt_kv_contig_init(&cpar, &kc, &err) || kvt_kv_paged_warm(kc, 64, false, -1)))
        snprintf(why, sizeof why, "the contiguous store: %s", err.msg[0] ? err.msg : "warmed");
    kvt_kv_free(kc);
    test_result(!why[0], name, "%s", why);
}

// --- sliding-window layers --------------------------------------------------------------

typedef struct {
    kvt_kv *kv;
    void *scratch[2];
    void *ws;
} win_store;

static bool win_store_init(win_store *w, kvt_kv *kv, int32_t n_head) {
    w->kv = kv;
    for (int i = 0; i < 2; i++) w->scratch[i] = malloc((size_t)kvt_attn_scratch_bytes(kv, n_head, 0));
    w->ws = malloc((size_t)kvt_attn_workspace_bytes(kv, n_head, 2));
    return w->scratch[0] && w->scratch[1] && w->ws;
}

static void win_store_free(win_store *w) {
    kvt_kv_free(w->kv);
    free(w->scratch[0]);
    free(w->scratch[1]);
    free(w->ws);
}

// Layer 0 attends a window of W positions, layer 1 the whole context. Positions arrive in runs of 1..7
// (decode and small prefills); after each run both layers attend the run's queries over the contiguous
// cache and over the paged store (4-position blocks, head-wise shards). Both give the same outputs bit for
// bit, equal to a dense softmax over the window; the paged store holds at most kvt_kv_paged_shard_blocks
// (ceil((W + run - 2) / 4) + 1) blocks per shard of layer 0 whatever the context; acquiring a freed block, or
// appending where the window reaches freed positions, fails with a message.
static void test_sliding_window(void) {
    enum { L = 2, HKV = 2, H = 4, HD = 8, W = 10, BT = 4, NCTX = 300, MAXRUN = 7 };
    const char *name = "kv: sliding-window layer: paged store frees what the window left, outputs equal the contiguous cache's";
    static float K[NCTX][HKV * HD], V[NCTX][HKV * HD], q[MAXRUN][H * HD], out[2][MAXRUN][H * HD];
    const int32_t windows[L] = {W, 0};
    uint64_t rs = 99;
    kvt_err err = {0};
    kvt_threadpool *pool = NULL;
    kvt_kv_params kp = {KVT_TYPE_F32, L, HKV, HD, HD, NCTX, BT, 0};
    kvt_kv_paged_params pp = small_params();
    pp.n_layer = L;
    pp.n_head_kv = HKV;
    pp.head_dim = pp.head_dim_v = HD;
    pp.n_ctx = NCTX;
    pp.block_tokens = BT;
    pp.layer_window = windows;
    pp.n_readers = 2;
    kvt_kv *kc = NULL, *kpg = NULL;
    win_store st[2] = {{0}, {0}};
    bool ok = !kvt_threadpool_init(2, &pool, &err) && !kvt_kv_contig_init(&kp, &kc, &err) &&
              !kvt_kv_paged_init(&pp, &kpg, &err);
    st[0].kv = kc; // freed by win_store_free from here on
    st[1].kv = kpg;
    ok = ok && win_store_init(&st[0], kc, H) && win_store_init(&st[1], kpg, H);
    double worst = 0;
    int64_t max_blocks = 0, bound = 0, n = 0;
    char why[256] = "";
    while (ok && n < NCTX) {
        int64_t run = rng_range(&rs, 1, MAXRUN);
        if (n + run > NCTX) run = NCTX - n;
        for (int64_t t = 0; t < run; t++) {
            for (int e = 0; e < HKV * HD; e++) {
                K[n + t][e] = (float)rng_range(&rs, -1000, 1000) / 500.0f;
                V[n + t][e] = (float)rng_range(&rs, -1000, 1000) / 500.0f;
            }
            for (int e = 0; e < H * HD; e++) q[t][e] = (float)rng_range(&rs, -1000, 1000) / 500.0f;
        }
        for (int32_t l = 0; ok && l < L; l++) {
            const kvt_attn_params ap = {H, 0.35f, 0, windows[l]};
            for (int k = 0; ok && k < 2; k++) {
                kvt_kv *kv = st[k].kv;
                ok = !kv->ops->append(kv, 0, l, n, run, K[n], V[n], &err) &&
                     !kvt_attention(kv, 0, l, &ap, q[0], n, run, out[k][0], pool, st[k].scratch, st[k].ws, &err);
            }
            if (ok && memcmp(out[0], out[1], (size_t)run * sizeof out[0][0]) != 0) {
                snprintf(why, sizeof why, "layer %d, positions %lld..%lld: paged != contiguous", l, (long long)n,
                         (long long)(n + run - 1));
                ok = false;
            }
            // dense reference over [pos - W + 1, pos] (layer 0) or [0, pos] (layer 1)
            for (int64_t t = 0; ok && t < run; t++) {
                const int64_t pos = n + t, lo = windows[l] && pos - windows[l] + 1 > 0 ? pos - windows[l] + 1 : 0;
                for (int h = 0; h < H; h++) {
                    const int kh = h / (H / HKV);
                    double mx = -1e300, sum = 0, acc[HD] = {0};
                    for (int64_t j = lo; j <= pos; j++) {
                        double d = 0;
                        for (int e = 0; e < HD; e++) d += (double)q[t][h * HD + e] * K[j][kh * HD + e];
                        mx = fmax(mx, d * 0.35);
                    }
                    for (int64_t j = lo; j <= pos; j++) {
                        double d = 0;
                        for (int e = 0; e < HD; e++) d += (double)q[t][h * HD + e] * K[j][kh * HD + e];
                        const double w = exp(d * 0.35 - mx);
                        sum += w;
                        for (int e = 0; e < HD; e++) acc[e] += w * V[j][kh * HD + e];
                    }
                    for (int e = 0; e < HD; e++) worst = fmax(worst, fabs(acc[e] / sum - out[0][t][h * HD + e]));
                }
            }
        }
        n += run;
        kvt_kv_stats ks;
        kvt_kv_get_stats(kpg, &ks);
        const int64_t held = ks.used_bytes[KVT_TIER_FAST] / ks.block_bytes;
        // layer 1: every block; layer 0: the window plus the run, per shard
        const int64_t b = HKV * kvt_kv_paged_shard_blocks(n, 0, BT, MAXRUN) + HKV * kvt_kv_paged_shard_blocks(n, W, BT, MAXRUN);
        max_blocks = held > max_blocks ? held : max_blocks;
        if (held > b) {
            snprintf(why, sizeof why, "at %lld positions the paged store holds %lld blocks, bound %lld", (long long)n,
                     (long long)held, (long long)b);
            ok = false;
        }
        bound = b;
    }
    if (ok && worst > 1e-4) {
        snprintf(why, sizeof why, "outputs differ from the dense windowed softmax by %g", worst);
        ok = false;
    }
    // layer 0's first block is gone; the window of a query at 20 (after truncating) reaches freed positions
    kvt_kv_view v;
    if (ok && (kpg->ops->acquire(kpg, 0, 0, 0, 0, &v, &err) == KVT_OK || !strstr(err.msg, "sliding window"))) {
        snprintf(why, sizeof why, "acquiring a freed block: %.150s", err.msg);
        ok = false;
    }
    if (ok) kpg->ops->truncate(kpg, 0, 20);
    if (ok && (kpg->ops->append(kpg, 0, 0, 20, 1, K[20], V[20], &err) == KVT_OK || !strstr(err.msg, "freed"))) {
        snprintf(why, sizeof why, "appending into a freed window: %.150s", err.msg);
        ok = false;
    }
    if (ok) kpg->ops->truncate(kpg, 0, 0); // a fresh start works again
    ok = ok && !kpg->ops->append(kpg, 0, 0, 0, 3, K[0], V[0], &err) && !kpg->ops->append(kpg, 0, 1, 0, 3, K[0], V[0], &err);
    printf("#    sliding window %d over %d positions: paged store peak %lld blocks of layer 0 + 1 (bound %lld), "
           "max |out - dense| %.2g\n", W, NCTX, (long long)max_blocks, (long long)bound, worst);
    test_result(ok, name, "%s %s", why, err.msg);
    win_store_free(&st[0]);
    win_store_free(&st[1]);
    kvt_threadpool_free(pool);
}

// kvt_kv_paged_shard_blocks, the blocks the planner sizes the store with, against the store: one sliding-window layer
// filled to NCTX positions in chunks of U after a first chunk of r0 = 1..U positions (so that the chunks meet the
// blocks at every offset). The blocks held after each append never exceed the function, and at some offset reach it.
static void test_window_blocks(void) {
    enum { NCTX = 96, HD = 4 };
    static const int32_t Ws[] = {1, 5, 8, 10, 17};
    static const int64_t BTs[] = {4, 8}, Us[] = {1, 3, 8, 13};
    static float K[NCTX * HD], V[NCTX * HD];
    char why[256] = "";
    int cases = 0;
    for (size_t wi = 0; wi < sizeof Ws / sizeof Ws[0] && !why[0]; wi++) {
        for (size_t bi = 0; bi < sizeof BTs / sizeof BTs[0] && !why[0]; bi++) {
            for (size_t ui = 0; ui < sizeof Us / sizeof Us[0] && !why[0]; ui++) {
                const int32_t W = Ws[wi];
                const int64_t BT = BTs[bi], U = Us[ui], want = kvt_kv_paged_shard_blocks(NCTX, W, BT, U);
                int64_t most = 0;
                for (int64_t r0 = 1; r0 <= U && !why[0]; r0++) {
                    kvt_kv_paged_params p = small_params();
                    p.n_layer = 1;
                    p.n_head_kv = 1;
                    p.group_heads = 0;
                    p.n_ctx = NCTX;
                    p.block_tokens = BT;
                    p.layer_window = &W;
                    kvt_kv *kv = NULL;
                    kvt_err err = {0};
                    if (kvt_kv_paged_init(&p, &kv, &err)) {
                        snprintf(why, sizeof why, "init: %.200s", err.msg);
                        break;
                    }
                    for (int64_t pos = 0, n = r0; pos < NCTX && !why[0]; pos += n, n = U) {
                        if (pos + n > NCTX) n = NCTX - pos;
                        if (kv->ops->append(kv, 0, 0, pos, n, K, V, &err)) {
                            snprintf(why, sizeof why, "W %d, block %lld, chunk %lld: append at %lld: %.150s", W, (long long)BT,
                                     (long long)U, (long long)pos, err.msg);
                            break;
                        }
                        kvt_kv_stats st;
                        kvt_kv_get_stats(kv, &st);
                        const int64_t held = st.used_bytes[KVT_TIER_FAST] / st.block_bytes;
                        if (held > most) most = held;
                    }
                    kvt_kv_free(kv);
                }
                if (!why[0] && most != want) {
                    snprintf(why, sizeof why, "W %d, block %lld, chunks of %lld: the store held at most %lld blocks, "
                             "kvt_kv_paged_shard_blocks says %lld", W, (long long)BT, (long long)U, (long long)most,
                             (long long)want);
                }
                cases++;
            }
        }
    }
    // a global layer: every block; fewer positions than the window: every block too
    if (!why[0] && (kvt_kv_paged_shard_blocks(100, 0, 16, 512) != 7 || kvt_kv_paged_shard_blocks(100, 512, 16, 512) != 7 ||
                    kvt_kv_paged_shard_blocks(0, 8, 4, 1) != 0))
        snprintf(why, sizeof why, "global or short: %lld, %lld", (long long)kvt_kv_paged_shard_blocks(100, 0, 16, 512),
                 (long long)kvt_kv_paged_shard_blocks(100, 512, 16, 512));
    test_result(!why[0], "kv: sliding-window blocks held: the store's peak equals kvt_kv_paged_shard_blocks (the planner's)",
                "%s (%d cases)", why, cases);
}

// --- disk integrity and budgets ---------------------------------------------------------

// Prefill a context with everything beyond a tiny T0 on disk, then drop the cached copies.
static kvt_context *disk_ctx(const kvt_model *m, kvt_context_params cp, kvt_err *err) {
    kvt_context *ctx = NULL;
    int32_t prompt[48];
    for (int i = 0; i < 48; i++) prompt[i] = 5 + i * 7 % 200;
    if (kvt_context_init(m, &cp, &ctx, err)) return NULL;
    if (kvt_decode(ctx, prompt, 48, false, err)) {
        kvt_context_free(ctx);
        return NULL;
    }
    kvt_kv_paged_drop_cached(kvt_context_kv(ctx));
    return ctx;
}

static void test_disk_integrity(const char *path) {
    kvt_model *m = NULL;
    kvt_err err = {0};
    if (kvt_model_load(path, false, &m, &err)) {
        test_result(false, "kv: disk integrity", "%s", err.msg);
        return;
    }
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    cp.kv_block = 8;
    cp.kv_prefetch = 0;
    cp.kv_fast_bytes = 4 * 4096;
    cp.kv_disk_dir = "/tmp";
    // (1) corrupt one byte of the first block with a disk copy: decode must fail naming file and block.
    // Blocks of 8 positions (1 KiB) go through a bounce buffer; blocks of 32 (4 KiB, aligned) are read
    // straight into the fast-tier slot, and the check must hold there too.
    for (int direct = 0; direct <= 1; direct++) {
        const char *name = direct ? "kv: a corrupted disk block is detected, naming file and block (direct I/O)"
                                  : "kv: a corrupted disk block is detected, naming file and block (bounce buffer)";
        kvt_context_params c1 = cp;
        c1.kv_block = direct ? 32 : 8;
        c1.kv_keep = true; // the file stays in /tmp so that the test can open it (removed below)
        kvt_context *ctx = disk_ctx(m, c1, &err);
        bool ok = ctx != NULL;
        if (ok) {
            kvt_kv_stats ks;
            kvt_kv_get_stats(kvt_context_kv(ctx), &ks);
            ok = (ks.block_bytes % 4096 == 0) == (direct != 0);
            if (!ok) snprintf(err.msg, sizeof err.msg, "block of %lld bytes", (long long)ks.block_bytes);
        }
        int64_t off = -1;
        int bl = 0, bb = 0; // the first block with a disk copy
        for (int x = 0; ok && off < 0 && x < 5 * 6; x++) {
            bl = x / 6, bb = x % 6;
            off = kvt_kv_paged_disk_offset(kvt_context_kv(ctx), 0, bl, 0, bb);
        }
        char want[64];
        snprintf(want, sizeof want, "layer %d group 0 block %d", bl, bb);
        const char *file = ok ? kvt_kv_paged_disk_path(kvt_context_kv(ctx)) : NULL;
        char detail[800] = "";
        if (ok && off >= 0 && file) {
            int fd = open(file, O_RDWR);
            uint8_t byte = 0;
            ok = fd >= 0 && pread(fd, &byte, 1, off + 5) == 1;
            byte ^= 0x40;
            ok = ok && pwrite(fd, &byte, 1, off + 5) == 1 && fsync(fd) == 0;
            if (fd >= 0) close(fd);
            int32_t tok = 9;
            kvt_status st = ok ? kvt_decode(ctx, &tok, 1, false, &err) : KVT_OK;
            ok = ok && st == KVT_ERR_CHECKSUM && strstr(err.msg, file) && strstr(err.msg, want);
            snprintf(detail, sizeof detail, "status %d: %s", st, err.msg);
        } else {
            ok = false;
            snprintf(detail, sizeof detail, "no disk copy (offset %lld): %s", (long long)off, err.msg);
        }
        test_result(ok, name, "%s", detail);
        char kept[512] = "";
        if (file) snprintf(kept, sizeof kept, "%s", file);
        kvt_context_free(ctx);
        if (kept[0]) unlink(kept);
    }
    // (2) an injected read error ends the request with an I/O error (never a token)
    {
        const char *name = "kv: an injected disk read error is reported";
        kvt_context_params c2 = cp;
        c2.kv_fault_read_at = 3;
        kvt_context *ctx = disk_ctx(m, c2, &err); // the failing read may come in prefill or in decode
        int32_t tok = 9;
        kvt_status st = ctx ? kvt_decode(ctx, &tok, 1, false, &err) : err.status;
        test_result(st == KVT_ERR_IO && strstr(err.msg, "kvtier-kv-") && strstr(err.msg, "block"), name,
                    "status %d: %s", st, err.msg);
        kvt_context_free(ctx);
    }
    // (3) full disk budget and no lower tier: clear budget errors
    {
        const char *name = "kv: a full disk budget or a missing lower tier is a budget error";
        kvt_context_params c3 = cp;
        c3.kv_disk_max = 3 * 4096;
        kvt_context *ctx = disk_ctx(m, c3, &err);
        bool ok = !ctx && err.status == KVT_ERR_BUDGET && strstr(err.msg, "--kv-disk-max");
        char m1[KVT_ERR_MSG_MAX];
        snprintf(m1, sizeof m1, "%s", err.msg);
        kvt_context_free(ctx);
        c3.kv_disk_dir = NULL;
        c3.kv_disk_max = 0; // (a disk budget without a disk tier is refused as a contradiction)
        ctx = disk_ctx(m, c3, &err);
        ok = ok && !ctx && err.status == KVT_ERR_BUDGET && strstr(err.msg, "--kv-disk");
        kvt_context_free(ctx);
        c3.kv_fast_bytes = 100; // below one block per thread
        ctx = disk_ctx(m, c3, &err);
        ok = ok && !ctx && err.status == KVT_ERR_BUDGET && strstr(err.msg, "--kv-fast");
        kvt_context_free(ctx);
        test_result(ok, name, "'%s' / '%s'", m1, err.msg);
    }
    kvt_model_free(m);
}

// The set-up of the two batch tests below: case c's disk tier (bit 0: pread/pwrite, no ring; bit 1: 4096-byte blocks,
// moved straight from and into their aligned buffers, else 1000 bytes through the bounce buffers), BATCH_NB disk
// slots, and BATCH_NB source blocks filled with the pattern (i * a + x * m).
enum { BATCH_NB = 6 };
typedef struct {
    kvt_tier_store t;
    int64_t data;               // bytes per block
    uint8_t *src, *dst, *bnc;   // [BATCH_NB][4096] (4096-aligned): sources, read-back destinations, bounce buffers
    int64_t slot[BATCH_NB];
} batch_case;

// false, with the reason in detail [600] and nothing left to free, when the set-up fails
static bool batch_setup(batch_case *b, int c, int a, int m, char *detail) {
    memset(b, 0, sizeof *b);
    b->data = c & 2 ? 4096 : 1000;
    kvt_err err = {0};
    if (kvt_tier_disk_init(&b->t, "/tmp", -1, b->data, false, c & 1, &err)) {
        snprintf(detail, 600, "case %d: %s", c, err.msg);
        return false;
    }
    bool ok = !posix_memalign((void **)&b->src, 4096, BATCH_NB * 4096) &&
              !posix_memalign((void **)&b->dst, 4096, BATCH_NB * 4096) &&
              !posix_memalign((void **)&b->bnc, 4096, BATCH_NB * 4096);
    for (int i = 0; ok && i < BATCH_NB; i++) {
        for (int64_t x = 0; x < b->data; x++) b->src[i * 4096 + x] = (uint8_t)(i * a + x * m);
        ok = (b->slot[i] = kvt_tier_alloc(&b->t)) >= 0;
    }
    if (!ok) {
        snprintf(detail, 600, "case %d: set-up failed (memory or slots)", c);
        free(b->src), free(b->dst), free(b->bnc);
        kvt_tier_free(&b->t);
    }
    return ok;
}

static void batch_free(batch_case *b) {
    free(b->src), free(b->dst), free(b->bnc);
    kvt_tier_free(&b->t);
}

// Flips one bit of block i's disk copy (O_DIRECT: whole aligned pages, read and written through bnc's first page).
static bool batch_corrupt(batch_case *b, int i, int byte, uint8_t bit) {
    const off_t off = (off_t)b->slot[i] * b->t.slot_bytes;
    if (pread(b->t.fd, b->bnc, 4096, off) != 4096) return false;
    b->bnc[byte] ^= bit;
    return pwrite(b->t.fd, b->bnc, 4096, off) == 4096;
}

// A request the kernel takes and never completes (a read of an empty pipe through the ring) is cancelled after the
// ring's stall time and done again with pread (which a pipe refuses: ESPIPE), so the caller returns instead of
// waiting for ever (kv_uring.h, kvt_uring_set_stall_ms).
static void test_uring_stall(void) {
    const char *name = "kv: a ring request that never completes is cancelled after the stall time (no hang)";
    int pfd[2];
    const char *why = "pipe failed";
    kvt_uring *u = pipe(pfd) == 0 ? kvt_uring_open(pfd[0], 4, &why) : NULL;
    if (!u) {
        test_skip(name, why);
        return;
    }
    if (!kvt_uring_set_stall_ms(u, 50)) {
        kvt_uring_close(u);
        close(pfd[0]), close(pfd[1]);
        test_skip(name, "this kernel's io_uring waits take no timeout (IORING_FEAT_EXT_ARG, Linux 5.11)");
        return;
    }
    char buf[8];
    const double t0 = kvt_time_ms();
    const ssize_t r = kvt_uring_rw(u, false, buf, sizeof buf, 0);
    const int e = errno;
    const double ms = kvt_time_ms() - t0;
    const int64_t stalls = kvt_uring_stalls(u);
    kvt_uring_close(u);
    close(pfd[0]), close(pfd[1]);
    test_result(r < 0 && e == ESPIPE && stalls == 1 && ms >= 45.0, name, "r %zd errno %d stalls %lld after %.1f ms", r, e,
                (long long)stalls, ms);
}

// kvt_tier_disk_read_many (the copy engine's disk batches) against one read at a time: 6 blocks written, the disk
// copy of block 2 corrupted, the 5th read of the batch failed by injection; each block's outcome is its own (the
// others read back exactly), with blocks that need the bounce buffer (1000 bytes) and blocks read straight into
// their 4096-aligned destination, through the ring and with pread (no_uring).
static void test_read_many(void) {
    bool ok = true;
    char detail[600] = "";
    for (int c = 0; c < 4 && ok; c++) {
        batch_case b;
        if (!batch_setup(&b, c, 31, 7, detail)) {
            ok = false;
            break;
        }
        void *dp[BATCH_NB], *bp[BATCH_NB];
        uint32_t crc[BATCH_NB];
        kvt_status st[BATCH_NB];
        kvt_err e[BATCH_NB], err = {0};
        for (int i = 0; ok && i < BATCH_NB; i++) {
            dp[i] = b.dst + i * 4096, bp[i] = b.bnc + i * 4096;
            ok = !kvt_tier_disk_write(&b.t, b.slot[i], b.src + i * 4096, bp[i], &crc[i], "test block", &err);
        }
        ok = ok && batch_corrupt(&b, 2, 17, 0x10);
        if (!ok && !detail[0]) snprintf(detail, sizeof detail, "case %d: setup failed: %s", c, err.msg);
        b.t.fail_read_at = b.t.n_reads + 5; // the batch's 5th read (block 4)
        if (ok) kvt_tier_disk_read_many(&b.t, BATCH_NB, b.slot, dp, bp, crc, st, e);
        for (int i = 0; ok && i < BATCH_NB; i++) {
            const kvt_status want = i == 2 ? KVT_ERR_CHECKSUM : i == 4 ? KVT_ERR_IO : KVT_OK;
            ok = st[i] == want && (want || !memcmp(dp[i], b.src + i * 4096, (size_t)b.data));
            if (!ok) snprintf(detail, sizeof detail, "case %d block %d: status %d (want %d) %s", c, i, st[i], want, st[i] ? e[i].msg : "data differ");
        }
        batch_free(&b);
    }
    test_result(ok, "kv: disk reads in a batch: each block checked and reported on its own (corrupt, failed, exact), "
                "ring and pread, bounce and direct", "%s", detail);
}

// kvt_tier_disk_write_many (a late batch's victims written together, kv_paged_io.c clean_victims) against one write at
// a time: 6 blocks written in one batch, the 3rd write failed by injection (reported as an I/O error naming its disk
// slot, the others written), then read back one at a time: the written blocks exact and their CRCs those
// kvt_tier_disk_write returns; the disk copy of block 5 corrupted after the batch: its read reports the CRC mismatch as
// a block written alone does (KVT_ERR_CHECKSUM, "is corrupt"); bounce and direct, ring and pwrite.
static void test_write_many(void) {
    bool ok = true;
    char detail[600] = "";
    for (int c = 0; c < 4 && ok; c++) {
        batch_case b;
        if (!batch_setup(&b, c, 29, 5, detail)) {
            ok = false;
            break;
        }
        const void *sp[BATCH_NB];
        void *bp[BATCH_NB];
        uint32_t crc[BATCH_NB], crc1[BATCH_NB];
        kvt_status st[BATCH_NB];
        kvt_err e[BATCH_NB], err = {0};
        for (int i = 0; i < BATCH_NB; i++) {
            sp[i] = b.src + i * 4096, bp[i] = b.bnc + i * 4096;
            crc1[i] = kvt_crc32c(0, b.src + i * 4096, (size_t)b.data);
        }
        b.t.fail_write_at = b.t.n_writes + 3; // the batch's 3rd write (block 2)
        kvt_tier_disk_write_many(&b.t, BATCH_NB, b.slot, sp, bp, crc, st, e);
        for (int i = 0; ok && i < BATCH_NB; i++) {
            const kvt_status want = i == 2 ? KVT_ERR_IO : KVT_OK;
            ok = st[i] == want && (want ? strstr(e[i].msg, "(injected)") && strstr(e[i].msg, "disk slot") : crc[i] == crc1[i]);
            if (!ok) snprintf(detail, sizeof detail, "case %d block %d: write status %d (want %d) %s", c, i, st[i], want, st[i] ? e[i].msg : "crc differs");
        }
        ok = ok && batch_corrupt(&b, 5, 33, 0x04);
        for (int i = 0; ok && i < BATCH_NB; i++) {
            if (i == 2) continue;
            const kvt_status r = kvt_tier_disk_read(&b.t, b.slot[i], b.dst + i * 4096, b.bnc + i * 4096, crc[i], "test block", &err);
            const kvt_status want = i == 5 ? KVT_ERR_CHECKSUM : KVT_OK;
            ok = r == want && (want ? strstr(err.msg, "test block") && strstr(err.msg, "is corrupt") : !memcmp(b.dst + i * 4096, b.src + i * 4096, (size_t)b.data));
            if (!ok) snprintf(detail, sizeof detail, "case %d block %d: read status %d (want %d) %s", c, i, r, want, r ? err.msg : "data differ");
        }
        batch_free(&b);
    }
    test_result(ok, "kv: disk writes in a batch: each block written and reported on its own (failed, exact; a corrupt copy "
                "reported on read as before), ring and pwrite, bounce and direct", "%s", detail);
}

// persistent KV (test_session.c); synth_path: a model of another shape, or NULL
void test_session(const test_env *env, const char *synth_path);

void test_kv(const test_env *env) {
    test_crc();
    test_uring_stall(); // skipped (counted) without liburing, io_uring or KVT_NO_URING: kvt_uring_open says why
    test_read_many();
    test_write_many();
    test_policies();
    test_fork_cow();
    test_readers_beside_forks();
    test_warm();
    test_sliding_window();
    test_window_blocks();
    char stories[512];
    const bool have_stories = test_data(env, "stories260K.gguf", stories, sizeof stories) != NULL;
    char synth[64];
    bool have_synth = make_synth(synth, sizeof synth);
    if (!have_synth) test_result(false, "kv: synthetic model", "mkmodel failed");
    // KVT_KV_SOAK=N: N times the cases with other seeds (a soak run for races; not part of make test)
    const char *soak_env = getenv("KVT_KV_SOAK");
    const int soak = soak_env && atoi(soak_env) > 0 ? atoi(soak_env) : 1;
    const uint64_t sd = soak > 1 ? (uint64_t)time(NULL) : 0;
    if (soak > 1) printf("#    soak x%d, seed offset %llu\n", soak, (unsigned long long)sd);
    const int n = (env->quick ? 4 : 12) * soak;
    // the disk tier's tests run with each disk I/O engine: the pread/pwrite path (forced with
    // KVT_NO_URING=1, as a user can), then io_uring where this build and kernel have it; without
    // it the io_uring pass's cases are counted as skipped, one for one, so that the summary
    // counts the same cases with and without liburing
    const char *no_env = getenv("KVT_NO_URING");
    const bool forced = no_env && *no_env && strcmp(no_env, "0") != 0;
    const char *why = "KVT_NO_URING set";
    kvt_uring *probe = forced ? NULL : kvt_uring_open(0, 2, &why);
    const bool uring = probe != NULL;
    kvt_uring_close(probe);
    int n_disk_cases = 0;
    for (int pass = 0; pass < 2; pass++) {
        const int before = test_cases_recorded();
        if (pass == 1 && !uring) {
            for (int i = 0; i < n_disk_cases; i++) {
                char name[128], reason[512];
                snprintf(name, sizeof name, "kv: disk case %d of %d with io_uring", i + 1, n_disk_cases);
                snprintf(reason, sizeof reason, "io_uring not available (%s): ran with pread/pwrite above; liburing-dev enables it", why);
                test_skip(name, reason);
            }
            break;
        }
        if (pass == 0) setenv("KVT_NO_URING", "1", 1);
        printf("#    disk I/O engine: %s\n", pass == 1 ? "io_uring" : "threads (pread/pwrite)");
        if (have_stories) {
            property_model("stories260K", stories, n, 11 + sd, env->quick);
            test_disk_integrity(stories);
        } else {
            test_skip("kv: stories260K", test_data_missing(env, "stories260K.gguf"));
        }
        if (pass == 0 && !forced) unsetenv("KVT_NO_URING");
        n_disk_cases = test_cases_recorded() - before;
    }
    if (have_synth) property_model("synthetic 6-layer llama", synth, n, 23 + sd, env->quick);
    test_session(env, have_synth ? synth : NULL);
    if (have_synth) unlink(synth);
    char tiny[512];
    if (test_data(env, "qwen3-tiny.gguf", tiny, sizeof tiny))
        property_model("qwen3-tiny", tiny, (env->quick ? 2 : 6) * soak, 31 + sd, env->quick);
    else
        test_skip("kv: qwen3-tiny", test_data_missing(env, "qwen3-tiny.gguf"));
}
