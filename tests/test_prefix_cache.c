// test_prefix_cache.c - the serving scheduler's prefix cache (src/sched/prefix_cache.h): chain keys, attach after
// insert gives the logits of computing the prompt bit for bit (full and partial blocks, shared prefixes), trim,
// cached blocks surviving a tiny fast tier in the host and disk tiers, and a second-level store (an in-memory
// mock of prefix_store.h) filled by insert and read back by attach in another context.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/cli/commands.h"
#include "../src/exec/context.h"
#include "../src/kv/kv_block_io.h"
#include "../src/sched/prefix_cache.h"
#include "../src/sparse/sparse.h"
#include "test.h"

enum { BT = 8, NP = 45 }; // block size; prompt length (5 full blocks and 5 positions)

static int32_t tok(uint32_t variant, int i) { return (int32_t)(1 + ((uint32_t)i * 37u + variant * 101u + 5u) % 290u); }

// the paged store's demotion under a model (test_kv_sched.c)
void test_kv_sched_demote_model(const kvt_model *m, const char *disk);

// --- keys ------------------------------------------------------------------------------------------------

static void keys(void) {
    int32_t a[BT], b[BT];
    for (int i = 0; i < BT; i++) a[i] = b[i] = tok(0, i);
    b[BT - 1]++;
    const kvt_block_key ka = kvt_prefix_key_next(NULL, a, BT), ka2 = kvt_prefix_key_next(NULL, a, BT);
    const kvt_block_key kb = kvt_prefix_key_next(NULL, b, BT);
    // the same block after different prefixes, and a block of one token fewer
    const kvt_block_key kaa = kvt_prefix_key_next(&ka, a, BT), kba = kvt_prefix_key_next(&kb, a, BT);
    const kvt_block_key kshort = kvt_prefix_key_next(NULL, a, BT - 1);
    bool ok = ka.lo == ka2.lo && ka.hi == ka2.hi;
    ok = ok && (ka.lo != kb.lo && ka.hi != kb.hi) && (kaa.lo != kba.lo && kaa.hi != kba.hi) &&
         (kshort.lo != ka.lo && kshort.hi != ka.hi) && (kaa.lo != ka.lo && kaa.hi != ka.hi);
    // fixed across processes and machines: the first key of tokens 1..8 is a constant
    int32_t one[BT];
    for (int i = 0; i < BT; i++) one[i] = i + 1;
    const kvt_block_key k1 = kvt_prefix_key_next(NULL, one, BT);
    const bool fixed = k1.lo == 0x52b567fc09735469ull && k1.hi == 0xc3a8a317af28bb05ull;
    test_result(ok, "prefix_cache: chain keys are deterministic and differ for other blocks or other prefixes",
                "a key repeated across different inputs");
    test_result(fixed, "prefix_cache: the key of tokens 1..8 is a fixed constant", "got %016llx %016llx",
                (unsigned long long)k1.lo, (unsigned long long)k1.hi);
    // 20000 chained keys over blocks differing in one token: no lane repeats
    enum { NK = 20000 };
    kvt_block_key *ks = malloc(NK * sizeof *ks);
    int dup = 0;
    if (ks) {
        kvt_block_key prev = ka;
        for (int i = 0; i < NK; i++) {
            int32_t t[BT];
            for (int j = 0; j < BT; j++) t[j] = j == i % BT ? i : 7;
            ks[i] = kvt_prefix_key_next(i % 3 ? &prev : NULL, t, BT);
            if (i % 5 == 0) prev = ks[i];
        }
        for (int i = 0; i < NK; i++)
            for (int j = i + 1; j < NK; j++) dup += ks[i].lo == ks[j].lo || ks[i].hi == ks[j].hi;
    }
    test_result(ks && dup == 0, "prefix_cache: 20000 keys of near-identical blocks have distinct lanes", "%d repeats", dup);
    free(ks);
}

// --- a second-level store in memory ----------------------------------------------------------------------

typedef struct {
    kvt_prefix_store base;
    kvt_block_key *keys;
    uint8_t *data; // [cap][payload_bytes]
    int64_t n, cap;
    kvt_prefix_store_stats st;
} mock_store;

static void mock_get(kvt_prefix_store *s, const kvt_block_key *k, void *dst, bool *hit) {
    mock_store *m = (mock_store *)s;
    m->st.gets++;
    *hit = false;
    for (int64_t i = 0; i < m->n && !*hit; i++) {
        if (m->keys[i].lo == k->lo && m->keys[i].hi == k->hi) {
            memcpy(dst, m->data + i * s->payload_bytes, (size_t)s->payload_bytes);
            *hit = true;
        }
    }
    m->st.hits += *hit;
    m->st.misses += !*hit;
}

static void mock_put(kvt_prefix_store *s, const kvt_block_key *k, const void *payload) {
    mock_store *m = (mock_store *)s;
    m->st.puts++;
    for (int64_t i = 0; i < m->n; i++)
        if (m->keys[i].lo == k->lo && m->keys[i].hi == k->hi) return;
    if (m->n == m->cap) {
        m->st.put_failed++;
        return;
    }
    m->keys[m->n] = *k;
    memcpy(m->data + m->n * s->payload_bytes, payload, (size_t)s->payload_bytes);
    m->n++;
    m->st.bytes_written += s->payload_bytes;
}

static void mock_flush(kvt_prefix_store *s) { (void)s; }
static void mock_stats(kvt_prefix_store *s, kvt_prefix_store_stats *o) { *o = ((mock_store *)s)->st; }
static void mock_free(kvt_prefix_store *s) {
    mock_store *m = (mock_store *)s;
    free(m->keys);
    free(m->data);
}

static const kvt_prefix_store_ops k_mock_ops = {
    .name = "mock", .get = mock_get, .put = mock_put, .flush = mock_flush, .stats = mock_stats, .free = mock_free};

static bool mock_init(mock_store *m, kvt_kv *kv, int64_t cap) {
    memset(m, 0, sizeof *m);
    m->base.ops = &k_mock_ops;
    kvt_kv_block_identity(kv, &m->base.id);
    m->base.payload_bytes = kvt_kv_block_payload_bytes(kv);
    m->cap = cap;
    m->keys = calloc((size_t)cap, sizeof *m->keys);
    m->data = malloc((size_t)(cap * m->base.payload_bytes));
    return m->keys && m->data;
}

// --- the cache on a model ----------------------------------------------------------------------------------

static bool make_model(const char *path) {
    const char *args[] = {"-q", "-o", path, "--arch", "llama", "--dim", "64", "--layers", "2", "--heads", "4",
                          "--kv-heads", "2", "--ff", "128", "--vocab", "300", "--ctx", "256", "--seed", "5", "--type",
                          "f32", "-t", "1", NULL};
    return cmd_mkmodel((int)(sizeof args / sizeof *args) - 1, (char **)args) == 0;
}

static kvt_context_params ctx_params(const char *disk) {
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    cp.kv_block = BT;
    cp.kv_paged = true;
    if (disk) { // a fast tier of 6 blocks, a host tier of 4, the rest on disk
        const int64_t blk = (int64_t)BT * 2 * 2 * 16 * 2; // positions x (K+V) x kv heads x head dim x f16
        cp.kv_fast_bytes = 6 * blk;
        cp.kv_host_bytes = 4 * blk;
        cp.kv_disk_dir = disk;
    }
    return cp;
}

// Logits of tokens[n0 .. n) run on seq after its first n0 positions (already there), last token's row, into out.
static kvt_status run_rest(kvt_context *ctx, int32_t seq, const int32_t *tokens, int64_t n0, int64_t n, float *out,
                           kvt_err *err) {
    kvt_status st = kvt_decode_seq(ctx, seq, tokens + n0, n - n0, false, err);
    if (!st) memcpy(out, kvt_context_logits(ctx), (size_t)kvt_context_model(ctx)->hp.n_vocab * sizeof *out);
    return st;
}

// Reference logits of the last token of each prompt length in lens, computed alone in a fresh context.
static kvt_status reference(const kvt_model *m, const kvt_context_params *cp, const int32_t *tokens, int64_t n,
                            float *out, kvt_err *err) {
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(m, cp, &ctx, err);
    if (!st) st = run_rest(ctx, 0, tokens, 0, n, out, err);
    kvt_context_free(ctx);
    return st;
}

// Attaches tokens[0, n) on seq 0 (empty), computes the rest, compares the last logits with ref bit for bit.
static bool attach_run(kvt_prefix_cache *pc, kvt_context *ctx, const int32_t *tokens, int64_t n, const float *ref,
                       int64_t want_cached, char *why, size_t cap) {
    const int32_t V = kvt_context_model(ctx)->hp.n_vocab;
    float *lg = malloc((size_t)V * sizeof *lg);
    kvt_err err = {0};
    int64_t got = -1;
    kvt_status st = lg ? kvt_prefix_cache_attach(pc, 0, tokens, n, n - 1, &got, &err) : KVT_ERR_NOMEM;
    if (!st && kvt_context_seq_n_past(ctx, 0) != got) st = kvt_errorf(&err, KVT_ERR_INVALID_ARG, "n_past not set");
    if (!st) st = run_rest(ctx, 0, tokens, got, n, lg, &err);
    bool ok = !st && got == want_cached && !memcmp(lg, ref, (size_t)V * sizeof *lg);
    if (st) snprintf(why, cap, "%s", err.msg);
    else if (!ok) snprintf(why, cap, "%lld positions cached (want %lld), logits %s", (long long)got, (long long)want_cached,
                           memcmp(lg, ref, (size_t)V * sizeof *lg) ? "differ" : "equal");
    kvt_context_seq_truncate(ctx, 0, 0);
    free(lg);
    return ok;
}

// Prompts: P (45 tokens), P cut to 41, 40 and 5 tokens, Q sharing P's first 3 blocks, R unrelated.
typedef struct {
    int32_t p[NP], q[NP], r[NP];
    float *ref_p, *ref_p41, *ref_p40, *ref_p5, *ref_q, *ref_r;
} prompts;

static bool prompts_init(prompts *w, const kvt_model *m, const kvt_context_params *cp, kvt_err *err) {
    for (int i = 0; i < NP; i++) {
        w->p[i] = tok(1, i);
        w->q[i] = i < 3 * BT ? w->p[i] : tok(2, i);
        w->r[i] = tok(3, i);
    }
    const size_t V = (size_t)m->hp.n_vocab;
    float *all = malloc(6 * V * sizeof *all);
    if (!all) return false;
    w->ref_p = all, w->ref_p41 = all + V, w->ref_p40 = all + 2 * V, w->ref_p5 = all + 3 * V, w->ref_q = all + 4 * V,
    w->ref_r = all + 5 * V;
    return !reference(m, cp, w->p, NP, w->ref_p, err) && !reference(m, cp, w->p, 41, w->ref_p41, err) &&
           !reference(m, cp, w->p, 40, w->ref_p40, err) && !reference(m, cp, w->p, 5, w->ref_p5, err) &&
           !reference(m, cp, w->q, NP, w->ref_q, err) && !reference(m, cp, w->r, NP, w->ref_r, err);
}

// Computes tokens[0, n) on seq 0 (empty) and inserts them.
static kvt_status compute_insert(kvt_prefix_cache *pc, kvt_context *ctx, const int32_t *tokens, int64_t n, kvt_err *err) {
    kvt_status st = kvt_decode_seq(ctx, 0, tokens, n, false, err);
    if (!st) st = kvt_prefix_cache_insert(pc, 0, tokens, n, err);
    kvt_context_seq_truncate(ctx, 0, 0);
    return st;
}

static void cache_cases(const kvt_model *m, const char *disk, const prompts *w) {
    const char *tag = disk ? " (fast tier of 6 blocks, host 4, disk)" : "";
    char name[256], why[512] = "";
    kvt_err err = {0};
    const kvt_context_params cp = ctx_params(disk);
    kvt_context *ctx = NULL;
    kvt_prefix_cache *pc = NULL;
    kvt_status st = kvt_context_init(m, &cp, &ctx, &err);
    if (!st) st = kvt_prefix_cache_init(ctx, NULL, &pc, &err);
    if (!st) st = compute_insert(pc, ctx, w->p, NP, &err);
    kvt_prefix_cache_stats ps;
    if (!st) kvt_prefix_cache_stats_get(pc, &ps);
    snprintf(name, sizeof name, "prefix_cache: insert registers the 5 full blocks of a 45-token prompt%s", tag);
    test_result(!st && ps.blocks == 5 && ps.inserted == 5, name, "%s (blocks %lld)", st ? err.msg : "", (long long)ps.blocks);
    if (st) goto done;
    if (disk) { // push the cached blocks down: another prompt through the tiny fast tier
        st = kvt_decode_seq(ctx, 0, w->r, NP, false, &err);
        kvt_context_seq_truncate(ctx, 0, 0);
        kvt_kv_stats ks;
        kvt_context_kv_stats(ctx, &ks);
        const int64_t down = ks.moved_count[KVT_TIER_FAST][KVT_TIER_HOST] + ks.moved_count[KVT_TIER_FAST][KVT_TIER_DISK];
        test_result(!st && down >= 5, "prefix_cache: cached blocks move down the tiers under a tiny fast tier",
                    "%s (%lld blocks moved down)", st ? err.msg : "", (long long)down);
    }
    snprintf(name, sizeof name, "prefix_cache: attach gives 40 positions and the prompt's logits bit for bit%s", tag);
    test_result(attach_run(pc, ctx, w->p, NP, w->ref_p, 40, why, sizeof why), name, "%s", why);
    // a prompt that is a prefix of the cached one: the positions of its partial block are copied from the cached block
    snprintf(name, sizeof name, "prefix_cache: partial blocks: prompts of 41, 40 and 5 tokens reuse 40, 39, 4%s", tag);
    bool ok = attach_run(pc, ctx, w->p, 41, w->ref_p41, 40, why, sizeof why) &&
              attach_run(pc, ctx, w->p, 40, w->ref_p40, 39, why, sizeof why) &&
              attach_run(pc, ctx, w->p, 5, w->ref_p5, 4, why, sizeof why);
    test_result(ok, name, "%s", why);
    snprintf(name, sizeof name, "prefix_cache: a prompt sharing 3 blocks reuses 24 positions, exact%s", tag);
    test_result(attach_run(pc, ctx, w->q, NP, w->ref_q, 24, why, sizeof why), name, "%s", why);
    kvt_prefix_cache_stats_get(pc, &ps);
    snprintf(name, sizeof name, "prefix_cache: stats count lookups and hit positions%s", tag);
    test_result(ps.lookups == 5 && ps.hit_tokens == 40 + 40 + 39 + 4 + 24 && ps.store_hit_tokens == 0 &&
                ps.part_hits == 2 && ps.part_tokens == 7 + 4, name,
                "lookups %lld, hit %lld", (long long)ps.lookups, (long long)ps.hit_tokens);
    if (!disk) {
        // trim: blocks held by a running sequence stay; then least recently used leaves go first
        st = compute_insert(pc, ctx, w->q, NP, &err); // Q adds its blocks 3, 4 (P's 0..2 are shared)
        int64_t got = 0;
        if (!st) st = kvt_prefix_cache_attach(pc, 0, w->p, NP, NP - 1, &got, &err); // P used last, held by seq 0
        const int64_t r0 = st ? -1 : kvt_prefix_cache_trim(pc, 0);
        kvt_prefix_cache_stats_get(pc, &ps);
        ok = !st && got == 40 && r0 == 2 && ps.blocks == 5;
        kvt_context_seq_truncate(ctx, 0, 0);
        const int64_t r1 = ok ? kvt_prefix_cache_trim(pc, 3) : -1;
        ok = ok && r1 == 2 && attach_run(pc, ctx, w->p, NP, w->ref_p, 24, why, sizeof why);
        test_result(ok, "prefix_cache: trim releases least recently used prefixes, never blocks a sequence holds",
                    "%s; trim(0) with P attached released %lld (want Q's 2), then trim(3) %lld (want 2); %s",
                    st ? err.msg : "", (long long)r0, (long long)r1, why);
    }
    if (!disk) { // max_blocks 3: each insert trims what no sequence holds to 3 blocks
        kvt_prefix_cache *pm = NULL;
        kvt_prefix_cache_params pp = kvt_prefix_cache_params_default();
        pp.max_blocks = 3;
        st = kvt_prefix_cache_init(ctx, &pp, &pm, &err);
        if (!st) st = compute_insert(pm, ctx, w->p, NP, &err);
        if (!st) st = kvt_decode_seq(ctx, 0, w->r, NP, false, &err);
        if (!st) st = kvt_prefix_cache_insert(pm, 0, w->r, NP, &err); // R's 5 held by seq 0; P's 5 down to 3
        kvt_context_seq_truncate(ctx, 0, 0);
        kvt_prefix_cache_stats_get(pm, &ps);
        ok = !st && ps.blocks == 8 && ps.dropped == 2 && attach_run(pm, ctx, w->p, NP, w->ref_p, 24, why, sizeof why);
        test_result(ok, "prefix_cache: max_blocks bounds the blocks only the cache holds", "%s%s (blocks %lld, dropped %lld)",
                    st ? err.msg : "", why, (long long)ps.blocks, (long long)ps.dropped);
        kvt_prefix_cache_free(pm);
    }
done:
    if (st) test_result(false, disk ? "prefix_cache: cases with tiers" : "prefix_cache: cases", "%s", err.msg);
    kvt_prefix_cache_free(pc);
    kvt_context_free(ctx);
}

// Key summaries kept as sequences end (quest, page 4), within key_bytes: a budget of one prompt's copy keeps the
// latest (the older one dropped), a hit on it shares it, a hit on the dropped one reads back; a smaller budget keeps none.
static kvt_status compute_keep(kvt_prefix_cache *pc, kvt_context *ctx, const int32_t *tokens, kvt_err *err) {
    kvt_status st = kvt_decode_seq(ctx, 0, tokens, NP, false, err);
    if (!st) st = kvt_prefix_cache_insert(pc, 0, tokens, NP, err);
    if (!st) kvt_prefix_cache_keep_keys(pc, 0, tokens, NP);
    kvt_context_seq_truncate(ctx, 0, 0);
    return st;
}

// The context of the key-summary cases: quest, a budget of 16 positions, pages of 4.
static kvt_context_params quest_params(void) {
    kvt_context_params cp = ctx_params(NULL);
    cp.sparse.mode = KVT_SPARSE_QUEST;
    cp.sparse.budget = 16;
    cp.sparse.page = 4;
    return cp;
}

static void kept_keys_budget(const kvt_model *m, const prompts *w) {
    const kvt_context_params cp = quest_params();
    kvt_err err = {0};
    kvt_context *ctx = NULL;
    kvt_prefix_cache_stats s1 = {0}, s2 = {0}, s3 = {0}, s0 = {0};
    char why[512] = "";
    bool hits = false;
    kvt_status st = kvt_context_init(m, &cp, &ctx, &err);
    for (int round = 0; !st && round < 3; round++) {
        kvt_prefix_cache *pc = NULL;
        kvt_prefix_cache_params pp = kvt_prefix_cache_params_default();
        pp.key_bytes = round == 0 ? pp.key_bytes : round == 1 ? s1.key_bytes / 2 : s1.key_bytes / 2 - 1;
        st = kvt_prefix_cache_init(ctx, &pp, &pc, &err);
        if (!st) st = compute_keep(pc, ctx, w->p, &err);
        if (!st) st = compute_keep(pc, ctx, w->r, &err);
        if (!st) kvt_prefix_cache_stats_get(pc, round == 0 ? &s1 : round == 1 ? &s2 : &s3);
        if (!st && round == 1) { // R's copy kept: a hit on R shares it (40 positions), one on P reads back
            hits = attach_run(pc, ctx, w->r, NP, w->ref_r, 40, why, sizeof why);
            kvt_prefix_cache_stats_get(pc, &s0);
            hits = hits && s0.key_hits == 1 && s0.key_tokens == 40 && attach_run(pc, ctx, w->p, NP, w->ref_p, 40, why, sizeof why);
            kvt_prefix_cache_stats_get(pc, &s0);
            hits = hits && s0.key_hits == 1;
        }
        kvt_prefix_cache_free(pc);
    }
    const kvt_sparse *sp = ctx ? kvt_context_sparse(ctx) : NULL;
    kvt_sparse_totals t = {0};
    if (sp) kvt_sparse_totals_get(sp, &t);
    kvt_context_free(ctx);
    test_result(!st && s1.key_sums == 2 && s1.key_bytes > 0 && s2.key_sums == 1 && s2.key_bytes == s1.key_bytes / 2 &&
                    hits && s3.key_sums == 0 && t.summary_kept == 0,
                "prefix_cache: key summaries kept within key_bytes, least recently used out (a hit shares the kept one, "
                "the dropped one reads back; too small a budget keeps none; freed with the cache)",
                "%s%s (kept %lld / %lld bytes, then %lld / %lld, then %lld; key hits %lld; kept at the end %lld)",
                st ? err.msg : "", why, (long long)s1.key_sums, (long long)s1.key_bytes, (long long)s2.key_sums,
                (long long)s2.key_bytes, (long long)s3.key_sums, (long long)s0.key_hits, (long long)t.summary_kept);
}

// Key summaries taken from a running sequence (quest, page 4; hold_keys): A computes and inserts P and goes on holding
// it; a hit on P takes A's summaries (once: a second hit shares the copy kept since); C computes and inserts Q and is
// freed without the cache being told (its mark left behind), a new sequence in its place holds R: a hit on Q passes the
// stale mark over and reads its keys back. Every hit's logits = the prompt alone.
static void live_marks(const kvt_model *m, const prompts *w) {
    const kvt_context_params cp = quest_params();
    kvt_err err = {0};
    kvt_context *ctx = NULL;
    kvt_prefix_cache *pc = NULL;
    kvt_prefix_cache_stats s1 = {0}, s2 = {0}, s3 = {0};
    char why[512] = "";
    bool ok = true;
    int32_t a = -1, c = -1, d = -1;
    kvt_status st = kvt_context_init(m, &cp, &ctx, &err);
    if (!st) st = kvt_prefix_cache_init(ctx, NULL, &pc, &err);
    if (!st) st = kvt_context_seq_fork(ctx, 0, &a, &err);
    if (!st) st = kvt_decode_seq(ctx, a, w->p, NP, false, &err);
    if (!st) st = kvt_prefix_cache_insert(pc, a, w->p, NP, &err);
    if (!st) ok = attach_run(pc, ctx, w->p, NP, w->ref_p, 40, why, sizeof why), kvt_prefix_cache_stats_get(pc, &s1);
    if (!st && ok) ok = attach_run(pc, ctx, w->p, NP, w->ref_p, 40, why, sizeof why), kvt_prefix_cache_stats_get(pc, &s2);
    if (!st && ok) st = kvt_context_seq_fork(ctx, 0, &c, &err);
    if (!st && ok) st = kvt_decode_seq(ctx, c, w->q, NP, false, &err);
    if (!st && ok) st = kvt_prefix_cache_insert(pc, c, w->q, NP, &err);
    if (!st && ok) kvt_context_seq_free(ctx, c), st = kvt_context_seq_fork(ctx, 0, &d, &err);
    if (!st && ok) st = kvt_decode_seq(ctx, d, w->r, NP, false, &err);
    if (!st && ok) ok = attach_run(pc, ctx, w->q, NP, w->ref_q, 40, why, sizeof why), kvt_prefix_cache_stats_get(pc, &s3);
    kvt_prefix_cache_free(pc);
    kvt_context_free(ctx);
    test_result(!st && ok && s1.key_live == 1 && s1.key_hits == 1 && s1.key_tokens == 40 && s2.key_live == 1 &&
                    s2.key_hits == 2 && s3.key_live == 1 && s3.key_hits == 2,
                "prefix_cache: a hit takes a running sequence's key summaries once (then shares the kept copy); a mark "
                "whose sequence no longer holds the blocks is passed over; the logits of the prompt alone",
                "%s%s (taken %lld, %lld, %lld; key hits %lld, %lld, %lld; sequences %d %d %d)", st ? err.msg : "", why,
                (long long)s1.key_live, (long long)s2.key_live, (long long)s3.key_live, (long long)s1.key_hits,
                (long long)s2.key_hits, (long long)s3.key_hits, a, c, d);
}

// The contiguous cache (no sequences to share blocks between) and a sequence that already holds positions are
// refused with a message; inserting more positions than the sequence holds too.
static void refusals(const kvt_model *m, const int32_t *p) {
    kvt_err e1 = {0}, e2 = {0}, e3 = {0};
    kvt_context_params cp = ctx_params(NULL);
    cp.kv_paged = false;
    kvt_context *c = NULL, *d = NULL;
    kvt_prefix_cache *pc = NULL;
    kvt_status a = kvt_context_init(m, &cp, &c, &e1);
    if (!a) a = kvt_prefix_cache_init(c, NULL, &pc, &e1);
    kvt_prefix_cache_free(pc);
    pc = NULL;
    cp = ctx_params(NULL);
    kvt_status b = kvt_context_init(m, &cp, &d, &e2), ins = KVT_OK;
    if (!b) b = kvt_prefix_cache_init(d, NULL, &pc, &e2);
    if (!b) b = kvt_decode_seq(d, 0, p, 10, false, &e2);
    int64_t got = -1;
    const kvt_status att = b ? KVT_OK : kvt_prefix_cache_attach(pc, 0, p, NP, NP - 1, &got, &e2);
    if (!b) ins = kvt_prefix_cache_insert(pc, 0, p, 16, &e3);
    test_result(a == KVT_ERR_INVALID_ARG && !b && att == KVT_ERR_INVALID_ARG && got == 0 && ins == KVT_ERR_INVALID_ARG &&
                kvt_context_seq_n_past(d, 0) == 10,
                "prefix_cache: the contiguous cache, attach to a non-empty sequence, insert past n_past are refused",
                "init %d (%s), attach %d (%s), insert %d (%s)", (int)a, e1.msg, (int)att, e2.msg, (int)ins, e3.msg);
    kvt_prefix_cache_free(pc);
    kvt_context_free(c);
    kvt_context_free(d);
}

// Insert in one context fills the mock store; a fresh context's cache imports the blocks from it.
// Position-granular reuse at block size bt: a prompt repeated whole reuses all its positions but the last (its partial
// last block kept by keep_tail), a prompt diverging mid-block reuses up to the divergence, a prompt that is a prefix of
// a cached one reuses all but its last; the logits are those of computing each prompt alone, bit for bit.
static void partial_cases(const kvt_model *m, int32_t bt) {
    char name[256], why[512] = "";
    kvt_err err = {0};
    kvt_context_params cp = ctx_params(NULL);
    cp.kv_block = bt;
    enum { N = 77 };
    int32_t p[N], d[N];
    const int64_t cut = 2 * bt + bt / 2 + 1; // d diverges from p mid-block
    for (int i = 0; i < N; i++) p[i] = tok(4, i), d[i] = i < cut ? p[i] : tok(5, i);
    const size_t V = (size_t)m->hp.n_vocab;
    float *ref = malloc(3 * V * sizeof *ref);
    kvt_context *ctx = NULL;
    kvt_prefix_cache *pc = NULL;
    kvt_status st = ref ? KVT_OK : kvt_errorf(&err, KVT_ERR_NOMEM, "out of memory");
    if (!st) st = reference(m, &cp, p, N, ref, &err);
    if (!st) st = reference(m, &cp, d, N, ref + V, &err);
    if (!st) st = reference(m, &cp, p, 50, ref + 2 * V, &err);
    if (!st) st = kvt_context_init(m, &cp, &ctx, &err);
    if (!st) st = kvt_prefix_cache_init(ctx, NULL, &pc, &err);
    if (!st) st = kvt_decode_seq(ctx, 0, p, N, false, &err);
    if (!st) st = kvt_prefix_cache_insert(pc, 0, p, N, &err);
    if (!st) kvt_prefix_cache_keep_tail(pc, 0, p, N);
    if (!st) st = kvt_decode_seq(ctx, 0, p + N - 1, 1, false, &err); // seq 0 writes on: its tail block is copied first
    kvt_context_seq_truncate(ctx, 0, 0);
    if (!st) {
        snprintf(name, sizeof name, "prefix_cache: block %d: a repeated %d-token prompt reuses %d positions, logits exact",
                 bt, N, N - 1);
        test_result(attach_run(pc, ctx, p, N, ref, N - 1, why, sizeof why), name, "%s", why);
        snprintf(name, sizeof name, "prefix_cache: block %d: a prompt diverging mid-block at %lld reuses %lld, exact", bt,
                 (long long)cut, (long long)cut);
        test_result(attach_run(pc, ctx, d, N, ref + V, cut, why, sizeof why), name, "%s", why);
        snprintf(name, sizeof name, "prefix_cache: block %d: a 50-token prefix of a cached prompt reuses 49, exact", bt);
        test_result(attach_run(pc, ctx, p, 50, ref + 2 * V, 49, why, sizeof why), name, "%s", why);
        // the copy leaves the cached block as it was: the whole prompt again
        snprintf(name, sizeof name, "prefix_cache: block %d: the cached blocks are unchanged by the copies' writes", bt);
        test_result(attach_run(pc, ctx, p, N, ref, N - 1, why, sizeof why), name, "%s", why);
    } else test_result(false, "prefix_cache: partial cases", "%s", err.msg);
    kvt_prefix_cache_free(pc);
    kvt_context_free(ctx);
    free(ref);
}

static void store_cases(const kvt_model *m, const prompts *w) {
    kvt_err err = {0};
    char why[512] = "";
    const kvt_context_params cp = ctx_params(NULL);
    kvt_context *a = NULL, *b = NULL;
    kvt_prefix_cache *pa = NULL, *pb = NULL;
    mock_store ms;
    bool have = false;
    kvt_status st = kvt_context_init(m, &cp, &a, &err);
    if (!st && !(have = mock_init(&ms, kvt_context_kv(a), 16))) st = kvt_errorf(&err, KVT_ERR_NOMEM, "mock store");
    kvt_prefix_cache_params pp = kvt_prefix_cache_params_default();
    pp.store = have ? &ms.base : NULL;
    if (!st) st = kvt_prefix_cache_init(a, &pp, &pa, &err);
    if (!st) st = compute_insert(pa, a, w->p, NP, &err);
    test_result(!st && ms.n == 5, "prefix_cache: insert puts the 5 new blocks into the second-level store",
                "%s (%lld stored)", err.msg, (long long)(have ? ms.n : -1));
    if (!st) st = kvt_context_init(m, &cp, &b, &err);
    if (!st) st = kvt_prefix_cache_init(b, &pp, &pb, &err);
    bool ok = !st && attach_run(pb, b, w->p, NP, w->ref_p, 40, why, sizeof why);
    kvt_prefix_cache_stats ps = {0};
    if (pb) kvt_prefix_cache_stats_get(pb, &ps);
    ok = ok && ps.store_hit_tokens == 40 && ps.hit_tokens == 0 && ps.blocks == 5;
    test_result(ok, "prefix_cache: another context imports the blocks from the store, logits bit for bit",
                "%s%s (store hits %lld, blocks %lld)", st ? err.msg : "", why, (long long)ps.store_hit_tokens,
                (long long)ps.blocks);
    ok = !st && attach_run(pb, b, w->q, NP, w->ref_q, 24, why, sizeof why);
    if (pb) kvt_prefix_cache_stats_get(pb, &ps);
    test_result(ok && ps.hit_tokens == 24 && ps.store_hit_tokens == 40,
                "prefix_cache: imported blocks join the memory cache", "%s (hits %lld)", why, (long long)ps.hit_tokens);
    kvt_prefix_cache_free(pa);
    kvt_prefix_cache_free(pb);
    kvt_context_free(a);
    kvt_context_free(b);
    if (have) mock_free(&ms.base);
}

void test_prefix_cache(const test_env *env) {
    (void)env;
    keys();
    char path[64];
    snprintf(path, sizeof path, "/tmp/kvt_test_pc_%d.gguf", (int)getpid());
    char dir[] = "/tmp/kvt_test_pc_XXXXXX";
    const char *disk = mkdtemp(dir);
    kvt_model *m = NULL;
    kvt_err err = {0};
    if (!make_model(path) || kvt_model_load(path, false, &m, &err)) {
        test_result(false, "prefix_cache: mkmodel", "%s", err.msg);
    } else {
        prompts w;
        const kvt_context_params cp = ctx_params(NULL);
        if (!prompts_init(&w, m, &cp, &err)) test_result(false, "prefix_cache: reference runs", "%s", err.msg);
        else {
            refusals(m, w.p);
            cache_cases(m, NULL, &w);
            partial_cases(m, BT);
            partial_cases(m, 16);
            kept_keys_budget(m, &w);
            live_marks(m, &w);
            if (disk) cache_cases(m, disk, &w);
            store_cases(m, &w);
            if (disk) test_kv_sched_demote_model(m, disk);
        }
        free(w.ref_p);
    }
    kvt_model_free(m);
    unlink(path);
    if (disk) rmdir(disk);
}
