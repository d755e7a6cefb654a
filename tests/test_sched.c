// test_sched.c - the continuous-batching scheduler (src/sched/scheduler.h) and its mixed prefill/decode pass
// (kvt_decode_runs), on a small model made here by `kvtier mkmodel`:
//  - kvt_decode_runs: random prompt chunks and decode rows of several sequences in one pass give each
//    sequence the logits it gets alone, bit for bit;
//  - the scheduler under seeded random arrivals, n_parallel and token budgets: every greedy request's ids
//    equal kvt_generate alone on the same prompt (n = 1 and n = 2 choices);
//  - preemption by swap under tiny fast/host tiers with a disk tier: preempted and resumed requests give the
//    same ids; the prefix cache gives a repeated prompt's blocks by reference with the same ids; cancel.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../src/cli/commands.h"
#include "../src/exec/context.h"
#include "../src/kv/kv_block_io.h"
#include "../src/sched/generate.h"
#include "../src/sched/scheduler.h"
#include "../src/serve/engine.h"
#include "../src/sparse/sparse.h"
#include "test.h"

static uint64_t rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static int64_t rng_in(uint64_t *s, int64_t lo, int64_t hi) { return lo + (int64_t)(rng(s) % (uint64_t)(hi - lo + 1)); }

static bool make_model(const char *path) {
    const char *args[] = {"-q", "-o", path, "--arch", "llama", "--dim", "64", "--layers", "2", "--heads", "2", "--ff", "128",
                          "--vocab", "300", "--ctx", "1024", "--seed", "5", "--type", "q8_0", "-t", "1", NULL};
    return cmd_mkmodel((int)(sizeof args / sizeof *args) - 1, (char **)args) == 0;
}

// ------------------------------------------------------------------ kvt_decode_runs

enum { RS = 4, RP = 50, RG = 12 }; // sequences, prompt tokens, decoded tokens

static void runs_invariant(const kvt_model *m) {
    const int32_t V = m->hp.n_vocab;
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    cp.n_ubatch = 16; // runs span micro-batches
    cp.kv_paged = true;
    cp.kv_block = 16;
    int32_t toks[RS][RP + RG];
    uint64_t seed = 7;
    for (int s = 0; s < RS; s++) {
        for (int i = 0; i < RP + RG; i++) toks[s][i] = (int32_t)rng_in(&seed, 1, V - 1);
    }
    float *ref = malloc(sizeof(float) * RS * (RP + RG) * V);
    kvt_err err = {0};
    kvt_status st = KVT_OK;
    bool ok = ref != NULL;
    for (int s = 0; ok && !st && s < RS; s++) { // alone: the prompt at once, then token by token
        kvt_context *ctx = NULL;
        st = kvt_context_init(m, &cp, &ctx, &err);
        if (!st) st = kvt_decode(ctx, toks[s], RP, true, &err);
        if (!st) memcpy(ref + (int64_t)s * (RP + RG) * V, kvt_context_logits(ctx), sizeof(float) * RP * V);
        for (int i = RP; !st && i < RP + RG; i++) {
            st = kvt_decode(ctx, &toks[s][i], 1, false, &err);
            if (!st) memcpy(ref + ((int64_t)s * (RP + RG) + i) * V, kvt_context_logits(ctx), sizeof(float) * V);
        }
        kvt_context_free(ctx);
    }
    kvt_context *ctx = NULL;
    if (!st) st = kvt_context_init(m, &cp, &ctx, &err);
    int32_t seqs[RS];
    int64_t done[RS] = {0};
    for (int s = 0; !st && s < RS; s++) st = kvt_context_seq_fork(ctx, 0, &seqs[s], &err);
    int64_t checked = 0, mismatch = -1;
    while (!st && ok) { // each pass: a random chunk of every unfinished sequence (1 once its prompt is in)
        kvt_batch_run runs[RS];
        int idx[RS];
        int n = 0;
        for (int s = 0; s < RS; s++) {
            if (done[s] == RP + RG || rng(&seed) % 4 == 0) continue;
            int64_t c = done[s] < RP ? rng_in(&seed, 1, RP - done[s]) : 1;
            runs[n] = (kvt_batch_run){seqs[s], toks[s] + done[s], c, rng(&seed) % 3 != 0, false};
            idx[n++] = s;
        }
        bool all_done = true;
        for (int s = 0; s < RS; s++) all_done = all_done && done[s] == RP + RG;
        if (all_done) break;
        if (!n) continue;
        st = kvt_decode_runs(ctx, runs, n, &err);
        int64_t k = 0;
        for (int i = 0; !st && i < n; i++) {
            const int s = idx[i];
            done[s] += runs[i].n;
            if (!runs[i].logits) continue;
            const float *want = ref + ((int64_t)s * (RP + RG) + done[s] - 1) * V;
            if (memcmp(kvt_context_logits(ctx) + k * V, want, sizeof(float) * V) != 0 && mismatch < 0) mismatch = done[s] - 1;
            k++, checked++;
        }
    }
    // a sequence twice and a missing one are refused, with no change
    kvt_batch_run twice[2] = {{seqs[0], toks[0], 1, true, false}, {seqs[0], toks[0], 1, true, false}};
    bool refuses = ctx && kvt_decode_runs(ctx, twice, 2, &err) == KVT_ERR_INVALID_ARG &&
                   kvt_context_seq_n_past(ctx, seqs[0]) == RP + RG;
    test_result(!st && ok && mismatch < 0 && checked > RS && refuses,
                "sched: kvt_decode_runs of random prompt chunks and decode rows = each sequence alone, bit for bit",
                "%s; %lld rows checked, first mismatch at position %lld, refuses %d", st ? err.msg : "", (long long)checked,
                (long long)mismatch, refuses);
    kvt_context_free(ctx);
    free(ref);
}

// ------------------------------------------------------------------ the scheduler

enum { NR = 10, MAXG = 24 };

typedef struct {
    int32_t ids[2][MAXG];
    int n_ids[2];
    int finished[2];
    int done;
    kvt_sched_result res;
} rec;

static bool on_tok(void *user, int32_t index, int32_t id, const float *logits) {
    (void)logits;
    rec *r = user;
    if (r->n_ids[index] < MAXG) r->ids[index][r->n_ids[index]++] = id;
    return true;
}
static void on_fin(void *user, int32_t index, kvt_sched_finish why) { ((rec *)user)->finished[index] = (int)why + 1; }
static void on_done(void *user, const kvt_sched_result *res) {
    rec *r = user;
    r->done++;
    r->res = *res;
}

typedef struct {
    int32_t prompt[80];
    int64_t n_prompt, max_tokens;
    int32_t n;
    int64_t arrive; // iteration
    int32_t want[MAXG];
    int64_t n_want;
} workload;

static void make_workload(const kvt_model *m, uint64_t seed, workload *w, int nr, int64_t max_prompt) {
    for (int i = 0; i < nr; i++) {
        w[i].n_prompt = rng_in(&seed, 2, max_prompt);
        for (int64_t t = 0; t < w[i].n_prompt; t++) w[i].prompt[t] = (int32_t)rng_in(&seed, 1, m->hp.n_vocab - 1);
        if (i % 3 == 2) memcpy(w[i].prompt, w[0].prompt, (size_t)(w[0].n_prompt < w[i].n_prompt ? w[0].n_prompt : w[i].n_prompt) * 4);
        w[i].max_tokens = rng_in(&seed, 1, MAXG);
        w[i].n = i % 4 == 1 ? 2 : 1;
        w[i].arrive = rng_in(&seed, 0, 30);
    }
}

static kvt_sampler_params greedy(void) {
    kvt_sampler_params sp = kvt_sampler_params_default();
    sp.temp = 0;
    return sp;
}

// kvt_generate alone for every request (sparse: decode attention settings, NULL: dense).
static kvt_status reference(const kvt_model *m, workload *w, int nr, const kvt_sparse_params *sparse, kvt_err *err) {
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    if (sparse) { // attention over a selected set sums block by block: the blocks of run_sched's store
        cp.sparse = *sparse;
        cp.kv_paged = true;
        cp.kv_block = 16;
    }
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(m, &cp, &ctx, err);
    for (int i = 0; !st && i < nr; i++) {
        kvt_context_truncate(ctx, 0);
        kvt_generate_params gp = kvt_generate_params_default();
        gp.n_predict = w[i].max_tokens;
        gp.sampling = greedy();
        gp.stop_at_eog = false;
        kvt_generate_stats gs;
        st = kvt_generate(ctx, NULL, w[i].prompt, w[i].n_prompt, &gp, w[i].want, NULL, NULL, NULL, &gs, err);
        w[i].n_want = gs.n_gen;
    }
    kvt_context_free(ctx);
    return st;
}

// Greedy under bans only (ignore_eos's -inf biases) reads just the argmax and falls back to the sampler when it is
// banned: the ids equal those of the sampler's path (the same bans plus a 0 bias, which turns the shortcut off).
static void generate_bans(const kvt_model *m) {
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    kvt_context *ctx = NULL;
    kvt_err err = {0};
    const int32_t prompt[] = {1, 5, 9, 13, 2, 7};
    int32_t a[12], b[12], c[12];
    kvt_generate_stats gs;
    kvt_generate_params gp = kvt_generate_params_default();
    gp.n_predict = 12;
    gp.sampling = greedy();
    gp.stop_at_eog = false;
    kvt_status st = kvt_context_init(m, &cp, &ctx, &err);
    if (!st) st = kvt_generate(ctx, NULL, prompt, 6, &gp, a, NULL, NULL, NULL, &gs, &err);
    kvt_logit_bias bias[3] = {{a[0], -INFINITY}, {a[3], -INFINITY}, {a[0] == 0 ? 1 : 0, 0.0f}};
    gp.sampling.logit_bias = bias;
    gp.sampling.n_logit_bias = 2;
    bool shortcut = kvt_sampler_params_bans_only(&gp.sampling);
    kvt_context_truncate(ctx, 0);
    if (!st) st = kvt_generate(ctx, NULL, prompt, 6, &gp, b, NULL, NULL, NULL, &gs, &err);
    gp.sampling.n_logit_bias = 3;
    shortcut = shortcut && !kvt_sampler_params_bans_only(&gp.sampling);
    kvt_context_truncate(ctx, 0);
    if (!st) st = kvt_generate(ctx, NULL, prompt, 6, &gp, c, NULL, NULL, NULL, &gs, &err);
    bool ok = !st && shortcut && !memcmp(b, c, sizeof b) && b[0] != a[0];
    for (int i = 0; ok && i < 12; i++) ok = b[i] != a[0] && b[i] != a[3];
    test_result(ok, "sched: greedy with bans only (ignore_eos) equals the sampler's path; banned ids never come",
                "%s: a[0] %d, b[0] %d, c[0] %d", st ? err.msg : "ids", (int)a[0], (int)b[0], (int)c[0]);
    kvt_context_free(ctx);
}

typedef struct {
    int64_t fast_blocks, host_blocks; // 0: unlimited fast, no host
    const char *disk;
    bool preempt, prefix;
    const char *store_dir;   // a --kv-cache-dir store under the prefix cache (NULL: none)
    kvt_kv_stats *kv;        // the store's counters at the end (NULL: not wanted)
    const kvt_sparse_params *sparse; // sparse decode attention (NULL: dense); its key summaries come on top of
                                     // fast_blocks
    bool no_queries;         // the prefix cache keeps no asyncspade query window nor key summaries (prefix_query_bytes
                             // and prefix_key_bytes 0)
    int64_t disk_blocks;     // --kv-disk-max in blocks (0: unbounded)
    bool failed_ok;          // a request that failed as a pass it ran could not be repeated (asyncspade) passes
} tiers;

// Runs the workload through a scheduler; fills recs; *why on a mismatch. Returns false on failure.
static bool run_sched(const kvt_model *m, const workload *w, int nr, int32_t n_parallel, int64_t budget, const tiers *t,
                      rec *recs, kvt_sched_stats *ss, char *why, size_t cap) {
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    cp.n_ubatch = 32;
    cp.kv_paged = true;
    cp.kv_block = 16;
    kvt_err err = {0};
    kvt_context *ctx = NULL;
    kvt_sched *s = NULL;
    if (t && t->sparse) cp.sparse = *t->sparse;
    if (kvt_context_init(m, &cp, &ctx, &err) == KVT_OK && t) {
        const int64_t bb = kvt_context_kv_block_bytes(ctx) / m->hp.n_layer; // the store's blocks are per layer
        kvt_context_free(ctx);
        ctx = NULL;
        const kvt_sparse_dims sd = {m->hp.n_layer, m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim, m->hp.head_dim_v,
                                    cp.n_ctx, cp.n_threads, cp.kv_type, {0}, true, 0};
        cp.kv_fast_bytes = t->fast_blocks * bb + (t->fast_blocks > 0 ? kvt_sparse_summary_bytes(&cp.sparse, &sd) : 0);
        cp.kv_host_bytes = t->host_blocks * bb;
        cp.kv_disk_dir = t->disk;
        cp.kv_disk_max = t->disk_blocks * bb;
        kvt_context_init(m, &cp, &ctx, &err);
    }
    kvt_sched_params sp = kvt_sched_params_default();
    sp.n_parallel = n_parallel;
    sp.token_budget = budget;
    sp.preempt = t && t->preempt;
    sp.prefix_cache = t && t->prefix;
    if (t && t->no_queries) sp.prefix_query_bytes = sp.prefix_key_bytes = 0;
    kvt_prefix_store *ps = NULL;
    if (ctx && t && t->store_dir) { // puts written synchronously: the next run sees every block
        kvt_prefix_identity id;
        memset(&id, 0, sizeof id);
        kvt_kv_block_identity(kvt_context_kv(ctx), &id);
        kvt_prefix_store_dir_params dp = kvt_prefix_store_dir_params_default();
        dp.inflight_bytes = 0;
        if (kvt_prefix_store_dir_open_params(t->store_dir, &id, kvt_kv_block_payload_bytes(kvt_context_kv(ctx)), &dp, &ps,
                                             &err)) {
            kvt_context_free(ctx);
            ctx = NULL;
        }
        sp.prefix_store = ps;
    }
    kvt_sched_callbacks cb = {on_tok, on_fin, on_done};
    if (!ctx || kvt_sched_init(ctx, NULL, &sp, &cb, &s, &err)) {
        snprintf(why, cap, "init: %.400s", err.msg);
        kvt_context_free(ctx);
        kvt_prefix_store_free(ps);
        return false;
    }
    memset(recs, 0, sizeof(rec) * (size_t)nr);
    bool ok = true;
    int submitted = 0;
    for (int64_t it = 0; ok && it < 5000; it++) {
        for (int i = 0; i < nr; i++) {
            if (w[i].arrive != it) continue;
            kvt_sched_request rq = {w[i].prompt, w[i].n_prompt, w[i].max_tokens, greedy(), w[i].n, false, &recs[i]};
            uint64_t id;
            ok = ok && kvt_sched_submit(s, &rq, &id, &err) == KVT_OK;
            submitted++;
        }
        int64_t rows;
        if (kvt_sched_step(s, &rows, &err) && !(t && t->failed_ok)) { // (failed_ok: the failed requests are checked below)
            snprintf(why, cap, "step %lld: %.400s", (long long)it, err.msg);
            ok = false;
        }
        if (submitted == nr && kvt_sched_idle(s)) break;
    }
    kvt_sched_stats_get(s, ss);
    if (t && t->kv) kvt_context_kv_stats(ctx, t->kv);
    kvt_sched_free(s);
    kvt_context_free(ctx);
    kvt_prefix_store_free(ps);
    for (int i = 0; ok && i < nr; i++) {
        if (t && t->failed_ok && recs[i].done == 1 && recs[i].res.outcome == KVT_SCHED_FAILED &&
            strstr(recs[i].res.err.msg, "not run again")) {
            continue;
        }
        for (int c = 0; ok && c < w[i].n; c++) {
            ok = recs[i].done == 1 && recs[i].res.outcome == KVT_SCHED_DONE && recs[i].n_ids[c] == w[i].n_want &&
                 !memcmp(recs[i].ids[c], w[i].want, (size_t)w[i].n_want * 4) && recs[i].finished[c] == KVT_SCHED_LENGTH + 1;
            if (!ok) {
                snprintf(why, cap, "request %d choice %d: done %d outcome %d, %d ids (want %lld)%s", i, c, recs[i].done,
                         recs[i].res.outcome, recs[i].n_ids[c], (long long)w[i].n_want,
                         recs[i].done ? "" : " (never finished)");
            }
        }
    }
    return ok;
}

static void sched_random(const kvt_model *m, bool quick) {
    static const struct {
        int32_t np;
        int64_t budget;
    } cfg[] = {{1, 512}, {3, 7}, {4, 20}, {8, 64}, {2, 3}};
    const int n_cfg = quick ? 2 : (int)(sizeof cfg / sizeof *cfg);
    workload w[NR];
    kvt_err err = {0};
    make_workload(m, 42, w, NR, 70);
    bool ok = reference(m, w, NR, NULL, &err) == KVT_OK;
    char why[640] = "";
    if (!ok) snprintf(why, sizeof why, "reference: %s", err.msg);
    rec recs[NR];
    kvt_sched_stats ss;
    int c = 0;
    for (; ok && c < n_cfg; c++) ok = run_sched(m, w, NR, cfg[c].np, cfg[c].budget, NULL, recs, &ss, why, sizeof why);
    test_result(ok, "sched: random arrivals, n_parallel 1..8, token budgets 3..512, n = 1 and 2: every request's greedy ids "
                "= kvt_generate alone", "config %d: %s", c - 1, why);
}

// A fresh temporary directory from the template dir ("/tmp/...XXXXXX", rewritten); false (reported) on failure.
static bool tmp_dir(char *dir) {
    if (mkdtemp(dir)) return true;
    test_result(false, "sched: temporary directory", "mkdtemp failed");
    return false;
}

// Removes dir and what it holds (a failure is printed, not a test failure).
static void tmp_dir_remove(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("     could not remove %s\n", dir);
}

static void sched_tiers(const kvt_model *m, bool quick) {
    char dir[] = "/tmp/kvt_test_sched_XXXXXX";
    if (!tmp_dir(dir)) return;
    workload w[NR];
    kvt_err err = {0};
    make_workload(m, 9, w, NR, 70);
    for (int i = 0; i < NR; i++) w[i].arrive = i / 3; // a burst: more demand than fast + host
    bool ok = reference(m, w, NR, NULL, &err) == KVT_OK;
    char why[640] = "";
    if (!ok) snprintf(why, sizeof why, "reference: %s", err.msg);
    rec recs[NR];
    kvt_sched_stats ss = {0};
    // fast + host hold 12 position blocks of the 30-odd the requests need at once: preemption swaps some out
    tiers t = {2 * 2, 2 * 4, dir, true, false, NULL, NULL, NULL, false, 0, false};
    ok = ok && run_sched(m, w, NR, 8, 40, &t, recs, &ss, why, sizeof why);
    test_result(ok && ss.preemptions > 0 && ss.resumes > 0,
                "sched: preemption by swap to disk under tiny fast/host tiers; resumed requests give the same greedy ids",
                "%s; %lld preemptions, %lld resumes, %lld plans", why, (long long)ss.preemptions, (long long)ss.resumes,
                (long long)ss.plans);
    // random tiers and budgets, with the prefix cache
    uint64_t seed = 77;
    int rounds = quick ? 1 : 3, r = 0;
    for (; ok && r < rounds; r++) {
        tiers tr = {2 * rng_in(&seed, 2, 6), 2 * rng_in(&seed, 0, 8), dir, r % 2 == 1, true, NULL, NULL, NULL, false, 0, false}; // no preemption: a plan
        ok = run_sched(m, w, NR, (int32_t)rng_in(&seed, 1, 6), rng_in(&seed, 2, 64), &tr, recs, &ss, why, sizeof why);
    }
    test_result(ok && ss.cached_tokens > 0 && ss.plans > 0, "sched: random fast/host/disk budgets, preemption on or off "
                "(off: the plan published), prefix cache on: the same greedy ids; repeated prompt prefixes are reused",
                "round %d: %s; %lld cached tokens, %lld plans", r - 1, why, (long long)ss.cached_tokens, (long long)ss.plans);
    tmp_dir_remove(dir);
}

// Sparse decode attention (quest, asyncspade with its worker) for every running sequence: batched with
// chunked prefills, n = 2 forks, the prefix cache (cached blocks read back into the key summaries; asyncspade
// computes its query window of the prompt), preemption by swap to disk: every request's greedy ids = kvt_generate
// alone under the same settings.
// Every request's sparse figures (kvt_sched_result.sparse_steps): one decode step per generated token after the first,
// in each choice, with fewer positions attended than held.
static bool sparse_counted(const rec *recs, const workload *w, int nr, char *why, size_t cap) {
    for (int i = 0; i < nr; i++) {
        const kvt_sparse_totals *t = &recs[i].res.sparse_steps;
        int64_t want = 0;
        for (int c = 0; c < w[i].n; c++) want += recs[i].n_ids[c] - 1;
        if (!recs[i].res.sparse || t->steps != want || t->selected <= 0 || t->selected > t->context ||
            (want > 0 && t->kv_read_bytes <= 0) || t->stall_ms < 0 || t->wait_ms > t->stall_ms + 1e-9) {
            snprintf(why, cap, "request %d: sparse %d, %lld steps (want %lld), selected %lld of %lld, %lld K/V bytes, stall "
                     "%.3f ms, wait %.3f ms", i, recs[i].res.sparse, (long long)t->steps, (long long)want,
                     (long long)t->selected, (long long)t->context, (long long)t->kv_read_bytes, t->stall_ms, t->wait_ms);
            return false;
        }
    }
    return true;
}

// The sparse settings of these tests: a quarter of the context, 2 sink and 4 recent positions, pages of `page`
// (0: the default), asyncspade's window of `window` queries.
static kvt_sparse_params small_sparse(kvt_sparse_mode mode, int32_t page, int32_t window) {
    kvt_sparse_params sp = {0};
    sp.mode = mode;
    sp.budget_frac = 0.25;
    sp.sink = 2;
    sp.recent = 4;
    sp.page = page;
    sp.window = window;
    return sp;
}

// A failed reference run (kvt_generate alone) as the test's reason: false then.
static bool reference_ok(const kvt_model *m, workload *w, int nr, const kvt_sparse_params *sp, char *why, size_t cap) {
    kvt_err err = {0};
    if (reference(m, w, nr, sp, &err) == KVT_OK) return true;
    snprintf(why, cap, "reference: %s", err.msg);
    return false;
}

static void sched_sparse(const kvt_model *m) {
    char dir[] = "/tmp/kvt_test_sched_sparse_XXXXXX";
    if (!tmp_dir(dir)) return;
    workload w[NR];
    make_workload(m, 9, w, NR, 70);
    for (int i = 0; i < NR; i++) w[i].arrive = i / 3;
    const kvt_sparse_mode modes[] = {KVT_SPARSE_QUEST, KVT_SPARSE_ASYNCSPADE};
    for (int mi = 0; mi < 2; mi++) {
        kvt_sparse_params sp = small_sparse(modes[mi], 4, 4);
        sp.seqs = 2 * NR; // preempted sequences keep their summaries
        char why[640] = "";
        bool ok = reference_ok(m, w, NR, &sp, why, sizeof why);
        rec recs[NR];
        kvt_sched_stats ss = {0}, ss2 = {0};
        tiers plain = {0, 0, NULL, false, false, NULL, NULL, &sp, false, 0, false};
        ok = ok && run_sched(m, w, NR, 3, 7, &plain, recs, &ss, why, sizeof why) && sparse_counted(recs, w, NR, why, sizeof why);
        tiers small = {2 * 2, 2 * 4, dir, true, true, NULL, NULL, &sp, false, 0, false};
        ok = ok && run_sched(m, w, NR, 8, 40, &small, recs, &ss, why, sizeof why) && sparse_counted(recs, w, NR, why, sizeof why);
        tiers cache = {0, 0, NULL, false, true, NULL, NULL, &sp, false, 0, false};
        ok = ok && run_sched(m, w, NR, 4, 20, &cache, recs, &ss2, why, sizeof why) && sparse_counted(recs, w, NR, why, sizeof why);
        char name[256];
        snprintf(name, sizeof name, "sched: sparse %s for every sequence (batched, chunked, n = 2, prefix cache, preemption "
                 "to disk): every request's greedy ids = kvt_generate alone; its sparse figures one step per token after the first",
                 kvt_sparse_mode_name(sp.mode));
        test_result(ok && ss.preemptions > 0 && ss2.cached_tokens > 0, name, "%s; %lld preemptions, %lld cached tokens", why,
                    (long long)ss.preemptions, (long long)ss2.cached_tokens);
    }
    tmp_dir_remove(dir);
}

// A store that fills up: fast 4 blocks, no host, disk 8 (one request's 4 position blocks x 2 layers, not two), the
// prefix cache on, one request at a time (49-token prompts, 12 tokens each: no block past the prompt's). Each request's
// prompt finds the previous one's cached blocks in the store: its pass fails (KVT_ERR_BUDGET), the cache is trimmed
// and the pass runs again; then 40-token prompts and a disk of 10 blocks: the prompt fits beside the cached one, its
// decode's next block (at position 48) does not, so a decode step fails and runs again. Dense and asyncspade (its
// failed pass taken back: kvt_sparse_seq_undo; a repeat without that gave other ids, found by a differential fuzz of
// the scheduler): every request's greedy ids = kvt_generate alone. asyncspade with --sparse-rerank-resid, whose pass
// is not repeatable (kvt_context_pass_repeatable): the prompt's request starts again (req_restart), the decoding one
// fails, named; the others as alone.
static void sched_store_full(const kvt_model *m) {
    char dir[] = "/tmp/kvt_test_sched_full_XXXXXX";
    if (!tmp_dir(dir)) return;
    enum { NF = 4 };
    workload w[NF];
    uint64_t seed = 17;
    for (int i = 0; i < NF; i++) {
        for (int64_t t = 0; t < 49; t++) w[i].prompt[t] = (int32_t)rng_in(&seed, 1, m->hp.n_vocab - 1);
        w[i].max_tokens = 12, w[i].n = 1, w[i].arrive = 0;
    }
    static const char *const names[3] = {"dense", "asyncspade", "asyncspade with --sparse-rerank-resid"};
    for (int v = 0; v < 3; v++) {
        kvt_sparse_params sp = small_sparse(KVT_SPARSE_ASYNCSPADE, 4, 4);
        sp.seqs = 2 * NF;
        if (v == 2) sp.rerank = 2, sp.rerank_resid = 0.25;
        const kvt_sparse_params *spp = v ? &sp : NULL;
        const bool repeat = v < 2;
        char why[640] = "", name[256];
        rec recs[NF];
        kvt_sched_stats ss = {0};
        for (int i = 0; i < NF; i++) w[i].n_prompt = 49;
        bool ok = reference_ok(m, w, NF, spp, why, sizeof why);
        tiers t = {4, 0, dir, false, true, NULL, NULL, spp, false, 8, false};
        ok = ok && run_sched(m, w, NF, 1, 64, &t, recs, &ss, why, sizeof why);
        snprintf(name, sizeof name, "sched: %s, a store too small for a prompt beside the cached one: %s, the same greedy "
                 "ids as alone", names[v], repeat ? "the failed pass runs again" : "its request starts again");
        test_result(ok && ss.prefix_trimmed > 0 && (repeat ? ss.restarts == 0 : ss.restarts > 0), name,
                    "%s; %lld cached blocks trimmed, %lld restarts", why, (long long)ss.prefix_trimmed, (long long)ss.restarts);
        for (int i = 0; i < NF; i++) w[i].n_prompt = 40;
        ok = reference_ok(m, w, NF, spp, why, sizeof why);
        tiers d = {4, 0, dir, false, true, NULL, NULL, spp, false, 10, !repeat};
        ok = ok && run_sched(m, w, NF, 1, 64, &d, recs, &ss, why, sizeof why);
        int failed = 0;
        for (int i = 0; i < NF; i++) failed += recs[i].res.outcome == KVT_SCHED_FAILED;
        snprintf(name, sizeof name, "sched: %s, a decode step without room beside the cached prompt: %s", names[v],
                 repeat ? "run again, the same greedy ids as alone" : "its request fails, named; the others as alone");
        test_result(ok && ss.prefix_trimmed > 0 && (repeat ? failed == 0 : failed > 0), name,
                    "%s; %lld cached blocks trimmed, %d failed", why, (long long)ss.prefix_trimmed, failed);
    }
    tmp_dir_remove(dir);
}

// asyncspade's query windows in the prefix cache (window 16: a prompt's last 17 queries): a 67-token prompt (4 full
// blocks of 16 and 3 positions) is sent, then with 3 more tokens, then as it was, then cut to 60 tokens; then an
// 80-token prompt (5 whole blocks) twice; one at a time. With the windows kept at the prompts' ends, the second and
// third get 64 cached positions where the window rule alone gives 48 (70 - 17 and 67 - 17 -> 3 blocks); the fourth
// cannot use it (its prompt ends before the window: 32); the second 80-token one gets 64 (its window kept at block 5
// serves block 4's end), not 48. Three windows are kept (the 60-token prompt's too, at its block 3). The ended
// sequences' key summaries are kept too (at blocks 3, 2 and 4 of the first, fourth and fifth prompts): the second,
// third and sixth share them for their 64 cached positions, the fourth the first's for its 32 (its chain stops inside
// the first's). Every request's
// greedy ids = kvt_generate alone, with the windows and summaries kept and without.
static void sched_sparse_queries(const kvt_model *m) {
    enum { NQ = 6 };
    static const int64_t len[NQ] = {67, 70, 67, 60, 80, 80};
    workload w[NQ];
    uint64_t seed = 5;
    for (int i = 0; i < NQ; i++) {
        w[i].n_prompt = len[i];
        for (int64_t t = 0; t < len[i]; t++) w[i].prompt[t] = (int32_t)rng_in(&seed, 1, m->hp.n_vocab - 1);
        const int src = i < 4 ? 0 : 4;
        if (i != src) memcpy(w[i].prompt, w[src].prompt, (size_t)(len[i] < len[src] ? len[i] : len[src]) * 4);
        w[i].max_tokens = 12;
        w[i].n = 1;
        w[i].arrive = 40 * i; // each one alone
    }
    const kvt_sparse_params sp = small_sparse(KVT_SPARSE_ASYNCSPADE, 0, 16);
    char why[640] = "";
    bool ok = reference_ok(m, w, NQ, &sp, why, sizeof why);
    rec recs[NQ];
    kvt_sched_stats on = {0}, off = {0};
    tiers with = {0, 0, NULL, false, true, NULL, NULL, &sp, false, 0, false}, without = {0, 0, NULL, false, true, NULL, NULL, &sp, true, 0, false};
    static const int64_t want_on[NQ] = {0, 64, 64, 32, 0, 64}, want_off[NQ] = {0, 48, 48, 32, 0, 48};
    int64_t got_on[NQ] = {0}, got_off[NQ] = {0};
    ok = ok && run_sched(m, w, NQ, 2, 20, &with, recs, &on, why, sizeof why);
    for (int i = 0; ok && i < NQ; i++) got_on[i] = recs[i].res.cached_tokens;
    ok = ok && run_sched(m, w, NQ, 2, 20, &without, recs, &off, why, sizeof why);
    for (int i = 0; ok && i < NQ; i++) got_off[i] = recs[i].res.cached_tokens;
    test_result(ok && !memcmp(got_on, want_on, sizeof want_on) && !memcmp(got_off, want_off, sizeof want_off) &&
                    on.query_hits == 3 && on.query_tokens == 48 && on.query_windows == 3 && on.query_bytes > 0 &&
                    off.query_hits == 0 && off.query_windows == 0 && on.key_hits == 4 && on.key_tokens == 224 &&
                    on.key_sums == 3 && on.key_bytes > 0 && off.key_hits == 0 && off.key_sums == 0,
                "sched: asyncspade's query window kept at a prompt's end: a repeated or extended prompt gets the cached "
                "blocks as dense does (64 positions, not 48), shares the ended sequences' key summaries, and the same "
                "greedy ids as kvt_generate alone (and as without the windows and summaries)",
                "%s; cached %lld %lld %lld %lld %lld (without: %lld %lld %lld %lld %lld), %lld query hits (%lld tokens), "
                "%lld windows (%lld bytes), %lld key hits (%lld tokens), %lld summaries (%lld bytes)", why, (long long)got_on[1], (long long)got_on[2], (long long)got_on[3],
                (long long)got_on[4], (long long)got_on[5], (long long)got_off[1], (long long)got_off[2],
                (long long)got_off[3], (long long)got_off[4], (long long)got_off[5], (long long)on.query_hits,
                (long long)on.query_tokens, (long long)on.query_windows, (long long)on.query_bytes, (long long)on.key_hits,
                (long long)on.key_tokens, (long long)on.key_sums, (long long)on.key_bytes);
}

// Key summaries taken from a running sequence (kvt_prefix_cache: hold_keys): an 80-token prompt decodes 24 tokens; the
// same prompt arrives while it runs (iteration 8, its prefill done), then one sharing its first 70 tokens (iteration
// 12): both are admitted before the first ends, so no finished sequence has kept summaries yet; the first gives its own
// (once: the second's attach takes them, the third shares the same copy). Every request's greedy ids = kvt_generate alone,
// with and without the cache keeping summaries.
static void sched_sparse_live(const kvt_model *m) {
    enum { NL = 3 };
    workload w[NL];
    uint64_t seed = 11;
    for (int i = 0; i < NL; i++) {
        w[i].n_prompt = i == 2 ? 76 : 80;
        for (int64_t t = 0; t < w[i].n_prompt; t++) w[i].prompt[t] = (int32_t)rng_in(&seed, 1, m->hp.n_vocab - 1);
        if (i > 0) memcpy(w[i].prompt, w[0].prompt, (size_t)(i == 2 ? 70 : 80) * 4);
        w[i].max_tokens = i == 0 ? MAXG : 6;
        w[i].n = 1;
        w[i].arrive = i == 0 ? 0 : 4 + 4 * i;
    }
    const kvt_sparse_mode modes[] = {KVT_SPARSE_QUEST, KVT_SPARSE_ASYNCSPADE};
    for (int mi = 0; mi < 2; mi++) {
        const kvt_sparse_params sp = small_sparse(modes[mi], 4, 4);
        char why[640] = "";
        bool ok = reference_ok(m, w, NL, &sp, why, sizeof why);
        rec recs[NL];
        kvt_sched_stats on = {0}, off = {0};
        tiers with = {0, 0, NULL, false, true, NULL, NULL, &sp, false, 0, false}, without = {0, 0, NULL, false, true, NULL, NULL, &sp, true, 0, false};
        ok = ok && run_sched(m, w, NL, 3, 20, &with, recs, &on, why, sizeof why);
        const bool ran = ok && recs[0].n_ids[0] == MAXG; // (the first was still decoding when the others came)
        ok = ok && run_sched(m, w, NL, 3, 20, &without, recs, &off, why, sizeof why);
        char name[300];
        snprintf(name, sizeof name, "sched: %s: requests admitted while the first with their prefix still runs share its key "
                 "summaries (taken from it once, no copy); the same greedy ids as kvt_generate alone (and as without)",
                 kvt_sparse_mode_name(sp.mode));
        test_result(ok && ran && on.key_live == 1 && on.key_hits == 2 && on.key_tokens == 64 + 64 && off.key_live == 0 &&
                        off.key_hits == 0,
                    name, "%s; %lld taken from running sequences, %lld key hits (%lld tokens); without: %lld, %lld", why,
                    (long long)on.key_live, (long long)on.key_hits, (long long)on.key_tokens, (long long)off.key_live,
                    (long long)off.key_hits);
    }
}

// Admission and preemption under sparse selection (quest, asyncspade with page-aligned selections) over a bounded fast
// tier with a disk tier: three 200-token prompts whose KV together is 2.5x the fast tier. Round 1 (cold: each prompt
// prefilled in several chunks, counted whole) runs them one at a time in every mode. Round 2 sends them again: the
// prefix cache leaves each one chunk, so a sparse request is counted at its decode working set (the selected blocks,
// kvt_context_decode_bytes) and the three decode together; dense still one at a time. Every request's greedy ids =
// kvt_generate alone with the same settings.
enum { SA_N = 3, SA_PROMPT = 200, SA_GEN = 8 };
static void sched_sparse_admission(const kvt_model *m) {
    char dir[] = "/tmp/kvt_test_sched_sa_XXXXXX";
    if (!tmp_dir(dir)) return;
    uint64_t seed = 3;
    int32_t prompts[SA_N][SA_PROMPT];
    for (int i = 0; i < SA_N; i++) {
        for (int t = 0; t < SA_PROMPT; t++) prompts[i][t] = (int32_t)rng_in(&seed, 1, m->hp.n_vocab - 1);
    }
    for (int mi = 0; mi < 3; mi++) { // dense, quest, asyncspade
        kvt_sparse_params sp = {0};
        sp.mode = mi == 0 ? KVT_SPARSE_OFF : mi == 1 ? KVT_SPARSE_QUEST : KVT_SPARSE_ASYNCSPADE;
        sp.budget = 16;
        sp.sink = 2;
        sp.recent = 4;
        sp.page = 4;
        sp.window = 4;
        sp.block = 4; // asyncspade: whole pages of 4 = the store's blocks
        sp.seqs = SA_N;
        kvt_context_params cp = kvt_context_params_default();
        cp.n_ctx = 512;
        cp.n_threads = 2;
        cp.n_ubatch = 32;
        cp.kv_paged = true;
        cp.kv_block = 4;
        cp.sparse = sp;
        kvt_err err = {0};
        char why[640] = "";
        bool ok = true;
        // the reference: kvt_generate alone, same settings, every block in RAM
        int32_t want[SA_N][SA_GEN];
        kvt_context *ctx = NULL;
        ok = !kvt_context_init(m, &cp, &ctx, &err);
        const int64_t bb = ok ? kvt_context_kv_block_bytes(ctx) : 0;
        const int64_t ws = ok ? kvt_context_decode_bytes(ctx, SA_PROMPT + 1) : 0; // a decode step's working set
        const bool ws_ok = mi == 0 ? ws == (SA_PROMPT / 4 + 1) * bb : ws * 2 < (SA_PROMPT / 4 + 1) * bb;
        for (int i = 0; ok && i < SA_N; i++) {
            kvt_context_truncate(ctx, 0);
            kvt_generate_params gp = kvt_generate_params_default();
            gp.n_predict = SA_GEN;
            gp.sampling = greedy();
            gp.stop_at_eog = false;
            kvt_generate_stats gs;
            ok = !kvt_generate(ctx, NULL, prompts[i], SA_PROMPT, &gp, want[i], NULL, NULL, NULL, &gs, &err) && gs.n_gen == SA_GEN;
        }
        kvt_context_free(ctx);
        ctx = NULL;
        if (!ok) snprintf(why, sizeof why, "reference: %.400s", err.msg);
        // the fast tier: 60 blocks (the three prompts: 150), no host tier, a disk tier
        const kvt_sparse_dims sd = {m->hp.n_layer, m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim, m->hp.head_dim_v,
                                    cp.n_ctx, cp.n_threads, cp.kv_type, {0}, true, 0};
        cp.kv_fast_bytes = 60 * bb + kvt_sparse_summary_bytes(&cp.sparse, &sd);
        cp.kv_disk_dir = dir;
        kvt_sched *s = NULL;
        kvt_sched_params spp = kvt_sched_params_default();
        spp.n_parallel = SA_N;
        spp.token_budget = 64;
        spp.preempt = true;
        spp.prefix_cache = true;
        kvt_sched_callbacks cb = {on_tok, on_fin, on_done};
        ok = ok && !kvt_context_init(m, &cp, &ctx, &err) && !kvt_sched_init(ctx, NULL, &spp, &cb, &s, &err);
        if (!ok && !why[0]) snprintf(why, sizeof why, "init: %.400s", err.msg);
        int64_t most[2] = {0, 0}; // sequences running at once at most, per round
        for (int round = 0; ok && round < 2; round++) {
            rec recs[SA_N];
            memset(recs, 0, sizeof recs);
            for (int i = 0; ok && i < SA_N; i++) {
                kvt_sched_request rq = {prompts[i], SA_PROMPT, round ? SA_GEN : 1, greedy(), 1, false, &recs[i]};
                uint64_t id;
                ok = !kvt_sched_submit(s, &rq, &id, &err);
            }
            for (int it = 0; ok && it < 2000 && !kvt_sched_idle(s); it++) {
                int64_t rows;
                ok = !kvt_sched_step(s, &rows, &err);
                kvt_sched_stats ss;
                kvt_sched_stats_get(s, &ss);
                if (ss.running > most[round]) most[round] = ss.running;
            }
            if (!ok) snprintf(why, sizeof why, "round %d: %.400s", round, err.msg);
            for (int i = 0; ok && i < SA_N; i++) {
                const int n = round ? SA_GEN : 1;
                ok = recs[i].done == 1 && recs[i].res.outcome == KVT_SCHED_DONE && recs[i].n_ids[0] == n &&
                     !memcmp(recs[i].ids[0], want[i], (size_t)n * 4);
                if (!ok) snprintf(why, sizeof why, "round %d request %d: done %d, %d ids, outcome %d", round, i, recs[i].done,
                                  recs[i].n_ids[0], recs[i].res.outcome);
            }
        }
        kvt_sched_stats ss = {0};
        if (s) kvt_sched_stats_get(s, &ss);
        kvt_sched_free(s);
        kvt_context_free(ctx);
        const bool together = mi == 0 ? most[1] == 1 : most[1] == SA_N;
        char name[300];
        snprintf(name, sizeof name, "sched: %s over a fast tier of 2/5 of three cached prompts: %s; greedy ids = kvt_generate "
                 "alone", kvt_sparse_mode_name(sp.mode), mi == 0 ? "admitted one at a time (each counted at all its KV)"
                 : "the cache hits decode together (counted at their selected blocks), the cold prefills one at a time");
        test_result(ok && ws_ok && most[0] == 1 && together, name, "%s; working set %lld of %lld bytes, at most %lld / %lld "
                    "running (cold / hit), %lld preemptions", why, (long long)ws, (long long)((SA_PROMPT / 4 + 1) * bb),
                    (long long)most[0], (long long)most[1], (long long)ss.preemptions);
    }
    tmp_dir_remove(dir);
}

// A long prompt prefilled in chunks: its filled blocks join the prefix cache chunk by chunk, so a request with the
// same prompt arriving before the first one's prefill ends shares them (cached tokens), with the same ids.
static void sched_prefix_chunks(const kvt_model *m) {
    workload w[2];
    kvt_err err = {0};
    make_workload(m, 5, w, 2, 70);
    w[0].n_prompt = w[1].n_prompt = 70;
    for (int64_t t = 0; t < 70; t++) w[0].prompt[t] = w[1].prompt[t] = (int32_t)(1 + (t * 37) % (m->hp.n_vocab - 1));
    w[0].n = w[1].n = 1;
    w[0].arrive = 0;
    w[1].arrive = 2; // after two 16-token chunks of the first prompt's five
    bool ok = reference(m, w, 2, NULL, &err) == KVT_OK;
    char why[640] = "";
    if (!ok) snprintf(why, sizeof why, "reference: %s", err.msg);
    rec recs[2];
    kvt_sched_stats ss = {0};
    tiers t = {0, 0, NULL, false, true, NULL, NULL, NULL, false, 0, false};
    ok = ok && run_sched(m, w, 2, 2, 16, &t, recs, &ss, why, sizeof why);
    test_result(ok && ss.cached_tokens >= 32,
                "sched: a prompt's blocks join the prefix cache chunk by chunk: a second request arriving mid-prefill "
                "shares them, same ids", "%s; %lld cached tokens (want >= 32)", why, (long long)ss.cached_tokens);
}

// A second-level store (a cache directory) filled by a first scheduler, read by a second one whose fast tier is
// bounded over a host tier: the blocks found there are imported into the host tier and reach the fast tier through
// the store's loads; the greedy ids are those of kvt_generate alone.
static void sched_store_host(const kvt_model *m) {
    char dir[] = "/tmp/kvt_test_sched_store_XXXXXX";
    if (!tmp_dir(dir)) return;
    workload w[NR];
    kvt_err err = {0};
    make_workload(m, 31, w, NR, 70);
    bool ok = reference(m, w, NR, NULL, &err) == KVT_OK;
    char why[640] = "";
    if (!ok) snprintf(why, sizeof why, "reference: %s", err.msg);
    rec recs[NR];
    kvt_sched_stats ss = {0};
    kvt_kv_stats ks;
    memset(&ks, 0, sizeof ks);
    tiers cold = {0, 0, NULL, false, true, dir, NULL, NULL, false, 0, false};
    ok = ok && run_sched(m, w, NR, 3, 24, &cold, recs, &ss, why, sizeof why);
    tiers warm = {2 * 6, 2 * 40, NULL, false, true, dir, &ks, NULL, false, 0, false};
    ok = ok && run_sched(m, w, NR, 3, 24, &warm, recs, &ss, why, sizeof why);
    const int64_t up = ks.moved_count[KVT_TIER_HOST][KVT_TIER_FAST];
    test_result(ok && ss.cached_tokens > 0 && ks.host_imports > 0 && up >= ks.host_imports,
                "sched: prefix blocks from a cache directory land in the host tier under a bounded fast tier and come up "
                "by the store's loads; the same greedy ids as kvt_generate alone",
                "%s; %lld cached tokens, %lld host imports, %lld host -> fast loads (%lld prefetched)", why,
                (long long)ss.cached_tokens, (long long)ks.host_imports, (long long)up, (long long)ks.prefetches);
    tmp_dir_remove(dir);
}

// --- the engine's background fetch of prefix blocks (src/serve/engine_sched.c, src/sched/prefix_fetch.h) ---------

// A store in front of another whose lookups first sleep delay_ms (a slow remote server).
typedef struct {
    kvt_prefix_store base;
    kvt_prefix_store *in;
    int delay_ms;
} slow_store;
static void slow_sleep(const slow_store *s) {
    struct timespec ts = {s->delay_ms / 1000, (long)(s->delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}
static void slow_get(kvt_prefix_store *s, const kvt_block_key *k, void *dst, bool *hit) {
    slow_sleep((slow_store *)s);
    kvt_prefix_store_get(((slow_store *)s)->in, k, dst, hit);
}
static void slow_get_many(kvt_prefix_store *s, const kvt_block_key *k, int n, void *const *dsts, bool *hits) {
    slow_sleep((slow_store *)s);
    kvt_prefix_store_get_many(((slow_store *)s)->in, k, n, dsts, hits);
}
static void slow_put(kvt_prefix_store *s, const kvt_block_key *k, const void *p) { kvt_prefix_store_put(((slow_store *)s)->in, k, p); }
static void slow_flush(kvt_prefix_store *s) { kvt_prefix_store_flush(((slow_store *)s)->in); }
static void slow_stats(kvt_prefix_store *s, kvt_prefix_store_stats *o) { kvt_prefix_store_stats_get(((slow_store *)s)->in, o); }
static void slow_free(kvt_prefix_store *s) { (void)s; }
static const kvt_prefix_store_ops k_slow_ops = {"slow", slow_get, slow_put, slow_flush, slow_stats, slow_free, slow_get_many, NULL};

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    rec r[NR];
} erecs;
typedef struct {
    erecs *all;
    int k;
} eref;
static bool e_tok(void *user, int32_t index, const kvt_engine_token *t) {
    eref *u = user;
    pthread_mutex_lock(&u->all->mu);
    rec *r = &u->all->r[u->k];
    if (r->n_ids[index] < MAXG) r->ids[index][r->n_ids[index]++] = t->id;
    pthread_mutex_unlock(&u->all->mu);
    return true;
}
static void e_fin(void *user, int32_t index, kvt_finish why) {
    eref *u = user;
    pthread_mutex_lock(&u->all->mu);
    u->all->r[u->k].finished[index] = (int)why + 1;
    pthread_mutex_unlock(&u->all->mu);
}
static void e_done(void *user, const kvt_engine_result *res) {
    eref *u = user;
    pthread_mutex_lock(&u->all->mu);
    u->all->r[u->k].done++;
    u->all->r[u->k].res.outcome = res->outcome == KVT_ENGINE_DONE ? KVT_SCHED_DONE : KVT_SCHED_FAILED;
    u->all->r[u->k].res.cached_tokens = res->cached_tokens;
    u->all->done++;
    pthread_cond_broadcast(&u->all->cv);
    pthread_mutex_unlock(&u->all->mu);
}

// Runs the workload through the sched engine (all jobs at once) over store with fast/host tiers (blocks of one
// layer; 0 0: unbounded); *es the engine's counters at the end. false with why on a mismatch.
static bool run_engine(const kvt_model *m, const workload *w, int nr, kvt_prefix_store *store, int64_t fast_blocks,
                       int64_t host_blocks, int32_t wait_ms, kvt_engine_stats *es, char *why, size_t cap) {
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    cp.n_ubatch = 32;
    cp.kv_paged = true;
    cp.kv_block = 16;
    kvt_err err = {0};
    kvt_context *ctx = NULL;
    if (kvt_context_init(m, &cp, &ctx, &err) == KVT_OK && fast_blocks > 0) {
        const int64_t bb = kvt_context_kv_block_bytes(ctx) / m->hp.n_layer;
        kvt_context_free(ctx);
        ctx = NULL;
        cp.kv_fast_bytes = fast_blocks * bb;
        cp.kv_host_bytes = host_blocks * bb;
        kvt_context_init(m, &cp, &ctx, &err);
    }
    kvt_sched_params sp = kvt_sched_params_default();
    sp.n_parallel = 3;
    sp.token_budget = 24;
    sp.prefix_cache = true;
    sp.prefix_store = store;
    sp.prefix_fetch_wait_ms = wait_ms;
    kvt_engine *e = NULL;
    if (!ctx || kvt_engine_sched_create(ctx, NULL, &sp, 16, &e, &err)) {
        snprintf(why, cap, "engine: %.400s", err.msg);
        return false;
    }
    static erecs all;
    memset(&all, 0, sizeof all);
    pthread_mutex_init(&all.mu, NULL);
    pthread_cond_init(&all.cv, NULL);
    eref u[NR];
    bool ok = true;
    for (int i = 0; ok && i < nr; i++) {
        u[i] = (eref){&all, i};
        kvt_engine_job job = {w[i].prompt, w[i].n_prompt, w[i].max_tokens, greedy(), w[i].n, false, 0, true, false};
        kvt_engine_callbacks cb = {e_tok, e_fin, e_done, &u[i]};
        uint64_t id;
        if (kvt_engine_submit(e, &job, &cb, &id, &err)) {
            snprintf(why, cap, "submit %d: %.400s", i, err.msg);
            ok = false;
        }
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 60;
    pthread_mutex_lock(&all.mu);
    while (ok && all.done < nr && pthread_cond_timedwait(&all.cv, &all.mu, &ts) == 0) {
    }
    const int done = all.done;
    pthread_mutex_unlock(&all.mu);
    kvt_engine_stats_get(e, es);
    kvt_engine_free(e);
    if (ok && done < nr) snprintf(why, cap, "%d of %d jobs ended in 60 s", done, nr), ok = false;
    for (int i = 0; ok && i < nr; i++) {
        for (int c = 0; ok && c < w[i].n; c++) {
            const rec *r = &all.r[i];
            ok = r->done == 1 && r->res.outcome == KVT_SCHED_DONE && r->n_ids[c] == w[i].n_want &&
                 !memcmp(r->ids[c], w[i].want, (size_t)w[i].n_want * 4);
            if (!ok) snprintf(why, cap, "job %d choice %d: done %d, %d ids (want %lld)", i, c, r->done, r->n_ids[c], (long long)w[i].n_want);
        }
    }
    pthread_mutex_destroy(&all.mu);
    pthread_cond_destroy(&all.cv);
    return ok;
}

// A cache directory store for ctx's blocks, its puts written synchronously in the caller's thread (inflight_bytes 0).
static kvt_status open_dir_store(kvt_context *ctx, const char *dir, kvt_prefix_store **ds, kvt_err *err) {
    kvt_prefix_identity id;
    memset(&id, 0, sizeof id);
    kvt_kv_block_identity(kvt_context_kv(ctx), &id);
    kvt_prefix_store_dir_params dp = kvt_prefix_store_dir_params_default();
    dp.inflight_bytes = 0;
    return kvt_prefix_store_dir_open_params(dir, &id, kvt_kv_block_payload_bytes(kvt_context_kv(ctx)), &dp, ds, err);
}

// A cache directory filled by one engine, read by another through the background fetch: the prompts' blocks are
// staged before admission and imported from memory (into the host tier under a bounded fast tier), the ids those of
// kvt_generate alone; with a store slower than the wait bound every job falls back to admission's own reads.
static void engine_fetch(const kvt_model *m) {
    char dir[] = "/tmp/kvt_test_fetch_XXXXXX";
    if (!tmp_dir(dir)) return;
    workload w[NR];
    kvt_err err = {0};
    make_workload(m, 57, w, NR, 70);
    for (int i = 0; i < NR; i++) { // 2 full blocks at least
        for (int64_t t = w[i].n_prompt; t < 40 + i; t++) w[i].prompt[t] = (int32_t)(1 + (t * 13 + i) % (m->hp.n_vocab - 1));
        if (w[i].n_prompt < 40 + i) w[i].n_prompt = 40 + i;
    }
    bool ok = reference(m, w, NR, NULL, &err) == KVT_OK;
    char why[640] = "";
    if (!ok) snprintf(why, sizeof why, "reference: %s", err.msg);
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 256;
    cp.kv_paged = true;
    cp.kv_block = 16;
    kvt_context *ctx = NULL;
    kvt_prefix_store *ds = NULL;
    if (ok && !kvt_context_init(m, &cp, &ctx, &err)) {
        ok = !open_dir_store(ctx, dir, &ds, &err);
        if (!ok) snprintf(why, sizeof why, "store: %s", err.msg);
    }
    kvt_context_free(ctx);
    kvt_engine_stats cold, warm, slow;
    memset(&warm, 0, sizeof warm);
    memset(&slow, 0, sizeof slow);
    ok = ok && run_engine(m, w, NR, ds, 0, 0, 500, &cold, why, sizeof why);
    ok = ok && run_engine(m, w, NR, ds, 2 * 6, 2 * 40, 10000, &warm, why, sizeof why);
    test_result(ok && warm.prefix_fetches > 0 && warm.prefix_staged_blocks_total > 0 && warm.prefix_fetch_timeouts == 0 &&
                    warm.prefix_staged_blocks == 0 && warm.prefix_staged_bytes == 0 && warm.kv.host_imports > 0 &&
                    warm.cached_tokens > 0 && warm.prefix_attach_seconds > 0,
                "sched engine: prompts' blocks in the cache directory are fetched in the background, staged and imported "
                "at admission (into the host tier under a bounded fast tier); the same ids as kvt_generate alone",
                "%s; %lld fetches, %lld blocks staged (%lld held at the end), %lld timeouts, %lld host imports, %lld cached",
                why, (long long)warm.prefix_fetches, (long long)warm.prefix_staged_blocks_total,
                (long long)warm.prefix_staged_blocks, (long long)warm.prefix_fetch_timeouts, (long long)warm.kv.host_imports,
                (long long)warm.cached_tokens);
    if (getenv("KVT_TEST_VERBOSE"))
        printf("     warm: %lld fetches, %lld staged, %lld host imports, %lld host->fast, %lld cached; slow: %lld timeouts\n",
               (long long)warm.prefix_fetches, (long long)warm.prefix_staged_blocks_total, (long long)warm.kv.host_imports,
               (long long)warm.kv.moved_count[KVT_TIER_HOST][KVT_TIER_FAST], (long long)warm.cached_tokens,
               (long long)slow.prefix_fetch_timeouts);
    slow_store ss = {{&k_slow_ops, ds ? ds->id : (kvt_prefix_identity){0}, ds ? ds->payload_bytes : 0}, ds, 300};
    bool ok2 = ok && run_engine(m, w, NR, &ss.base, 0, 0, 20, &slow, why, sizeof why);
    test_result(ok2 && slow.prefix_fetch_timeouts > 0 && slow.prefix_staged_blocks == 0 && slow.cached_tokens > 0,
                "sched engine: a fetch slower than the wait bound: the job is admitted without it (admission reads the "
                "store), the same ids; the abandoned fetch's copies are freed",
                "%s; %lld fetches, %lld timeouts, %lld blocks held at the end", why, (long long)slow.prefix_fetches,
                (long long)slow.prefix_fetch_timeouts, (long long)slow.prefix_staged_blocks);
    kvt_prefix_store_free(ds);
    tmp_dir_remove(dir);
}

// Under asyncspade the prefix cache gives a prompt only the blocks before its query window (kvt_context_prompt_tail):
// a prompt whose window crosses a block boundary, sent twice to one engine, is fetched from the second level once (the
// first time, from an empty directory); the second time every block attach may give is in memory, so no fetch starts
// (the fetch had counted to the block of position n_prompt - 1, past what attach takes, and started on every hit).
// Since the prefix cache keeps the first prompt's query window, attach gives the second one 48 positions, not 32.
static void engine_fetch_tail(const kvt_model *m) {
    const char *name = "sched engine, asyncspade: a prompt whose blocks attach may give are all in memory starts no "
                       "fetch from the second level (blocks before the query window only)";
    char dir[] = "/tmp/kvt_test_fetch_tail_XXXXXX";
    if (!tmp_dir(dir)) return;
    kvt_err err = {0};
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    cp.kv_paged = true;
    cp.kv_block = 16;
    cp.sparse.mode = KVT_SPARSE_ASYNCSPADE;
    cp.sparse.budget = 12;
    cp.sparse.sink = 2;
    cp.sparse.recent = 4;
    cp.sparse.window = 4; // the last 5 prompt positions are computed: 50 tokens give blocks [0, 2), not 3
    kvt_context *ctx = NULL;
    kvt_prefix_store *ds = NULL;
    kvt_engine *e = NULL;
    bool ok = !kvt_context_init(m, &cp, &ctx, &err) && !open_dir_store(ctx, dir, &ds, &err);
    kvt_sched_params sp = kvt_sched_params_default();
    sp.n_parallel = 2;
    sp.prefix_cache = true;
    sp.prefix_store = ds;
    sp.prefix_fetch_wait_ms = 10000;
    if (ok) ok = !kvt_engine_sched_create(ctx, NULL, &sp, 16, &e, &err);
    else kvt_context_free(ctx);
    int32_t prompt[50];
    for (int t = 0; t < 50; t++) prompt[t] = 1 + (t * 29 + 3) % (m->hp.n_vocab - 1);
    static erecs all;
    memset(&all, 0, sizeof all);
    pthread_mutex_init(&all.mu, NULL);
    pthread_cond_init(&all.cv, NULL);
    eref u[2] = {{&all, 0}, {&all, 1}};
    kvt_engine_stats es[2];
    memset(es, 0, sizeof es);
    for (int i = 0; ok && i < 2; i++) { // one after the other: the first one's blocks are in memory for the second
        kvt_engine_job job = {prompt, 50, 4, greedy(), 1, false, 0, true, false};
        kvt_engine_callbacks cb = {e_tok, e_fin, e_done, &u[i]};
        uint64_t jid;
        ok = !kvt_engine_submit(e, &job, &cb, &jid, &err);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 60;
        pthread_mutex_lock(&all.mu);
        while (ok && all.done < i + 1 && pthread_cond_timedwait(&all.cv, &all.mu, &ts) == 0) {
        }
        ok = ok && all.done == i + 1 && all.r[i].res.outcome == KVT_SCHED_DONE;
        pthread_mutex_unlock(&all.mu);
        kvt_engine_stats_get(e, &es[i]);
    }
    kvt_engine_free(e);
    test_result(ok && es[0].prefix_fetches == 1 && es[1].prefix_fetches == 1 && all.r[1].res.cached_tokens == 48 &&
                    all.r[1].n_ids[0] == 4 && !memcmp(all.r[0].ids[0], all.r[1].ids[0], 4 * sizeof(int32_t)),
                name, "%s; fetches %lld then %lld, the second request's cached tokens %lld (want 1, 1, 48)", ok ? "" : err.msg,
                (long long)es[0].prefix_fetches, (long long)es[1].prefix_fetches, (long long)all.r[1].res.cached_tokens);
    pthread_mutex_destroy(&all.mu);
    pthread_cond_destroy(&all.cv);
    kvt_prefix_store_free(ds);
    tmp_dir_remove(dir);
}

// Cancel of a waiting and of a running request: on_done CANCELLED once, the others unaffected.
static void sched_cancel(const kvt_model *m) {
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    cp.kv_paged = true;
    kvt_err err = {0};
    kvt_context *ctx = NULL;
    kvt_sched *s = NULL;
    kvt_sched_params sp = kvt_sched_params_default();
    sp.n_parallel = 1;
    kvt_sched_callbacks cb = {on_tok, on_fin, on_done};
    rec recs[3];
    memset(recs, 0, sizeof recs);
    bool ok = !kvt_context_init(m, &cp, &ctx, &err) && !kvt_sched_init(ctx, NULL, &sp, &cb, &s, &err);
    const int32_t prompt[4] = {1, 2, 3, 4};
    uint64_t id[3];
    for (int i = 0; ok && i < 3; i++) {
        kvt_sched_request rq = {prompt, 4, 50, greedy(), 1, false, &recs[i]};
        ok = !kvt_sched_submit(s, &rq, &id[i], &err);
    }
    int64_t rows;
    for (int i = 0; ok && i < 3; i++) ok = !kvt_sched_step(s, &rows, &err);
    kvt_sched_stats ss;
    if (ok) kvt_sched_stats_get(s, &ss);
    const bool before = ok && ss.running == 1 && ss.waiting == 2 && recs[0].n_ids[0] == 3;
    if (ok) kvt_sched_cancel(s, id[1]), kvt_sched_cancel(s, id[0]), kvt_sched_cancel(s, id[0]);
    while (ok && !kvt_sched_idle(s)) ok = !kvt_sched_step(s, &rows, &err);
    test_result(ok && before && recs[0].done == 1 && recs[1].done == 1 && recs[0].res.outcome == KVT_SCHED_CANCELLED &&
                    recs[1].res.outcome == KVT_SCHED_CANCELLED && recs[1].n_ids[0] == 0 && recs[2].done == 1 &&
                    recs[2].res.outcome == KVT_SCHED_DONE && recs[2].n_ids[0] == 24 && recs[2].res.completion_tokens == 50 &&
                    recs[0].res.computed_tokens == 4 && recs[1].res.computed_tokens == 0 && recs[2].res.computed_tokens == 4,
                "sched: cancel of a running and a waiting request ends each once (CANCELLED); the next one runs to its end; "
                "prompt positions computed counted as run (none for the waiting one)",
                "%s; before %d, done %d %d %d, outcomes %d %d %d, computed %lld %lld %lld", err.msg, before, recs[0].done,
                recs[1].done, recs[2].done, recs[0].res.outcome, recs[1].res.outcome, recs[2].res.outcome,
                (long long)recs[0].res.computed_tokens, (long long)recs[1].res.computed_tokens,
                (long long)recs[2].res.computed_tokens);
    kvt_sched_free(s);
    kvt_context_free(ctx);
}

void test_sched(const test_env *env) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/kvt_test_sched_%d.gguf", (int)getpid());
    kvt_model *m = NULL;
    kvt_err err = {0};
    if (!make_model(path) || kvt_model_load(path, false, &m, &err)) {
        test_result(false, "sched: mkmodel", "%s", err.msg);
        unlink(path);
        return;
    }
    runs_invariant(m);
    generate_bans(m);
    sched_random(m, env->quick);
    sched_tiers(m, env->quick);
    sched_prefix_chunks(m);
    sched_sparse(m);
    sched_store_full(m);
    sched_sparse_queries(m);
    sched_sparse_live(m);
    sched_sparse_admission(m);
    sched_store_host(m);
    engine_fetch(m);
    engine_fetch_tail(m);
    sched_cancel(m);
    kvt_model_free(m);
    unlink(path);
}
