// test_beam.c - the step-wise beam search driver (src/sched/beam.h) on stories260K:
// every schedule gives the beams and scores of `layerwise` and of an all-in-memory run,
// with a fast tier too small for the beams' KV; no blocks leak; bad arguments are refused.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../src/sched/beam.h"
#include "test.h"

enum { N_PROMPT = 13 };

typedef struct {
    kvt_beam_result r;
    kvt_kv_stats ks;  // after the run
    kvt_status st;
    char msg[KVT_ERR_MSG_MAX];
} run_out;

// fast: T0 budget in bytes (0: all in memory, the paged store without limits).
static void run(const kvt_model *m, const kvt_beam_params *bp, int64_t fast, run_out *o) {
    memset(o, 0, sizeof *o);
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 128;
    cp.n_threads = 2;
    cp.kv_block = 8;
    cp.kv_paged = true;
    if (fast > 0) {
        cp.kv_fast_bytes = fast;
        cp.kv_host_bytes = 64 << 20;
    }
    kvt_context *ctx = NULL;
    kvt_err err = {0};
    o->st = kvt_context_init(m, &cp, &ctx, &err);
    int32_t prompt[N_PROMPT];
    prompt[0] = 1;
    for (int i = 1; i < N_PROMPT; i++) prompt[i] = 3 + (i * 53) % (m->hp.n_vocab - 3);
    if (!o->st) o->st = kvt_beam_run(ctx, bp, prompt, N_PROMPT, &o->r, &err);
    if (ctx) kvt_context_kv_stats(ctx, &o->ks);
    snprintf(o->msg, sizeof o->msg, "%s", err.msg);
    kvt_context_free(ctx);
}

// Same beams (ids) and scores; tol: relative to |score| (0: bit for bit).
static bool same(const kvt_beam_result *a, const kvt_beam_result *b, double tol, char *why, size_t n_why) {
    if (a->n_beams != b->n_beams) {
        snprintf(why, n_why, "%d beams vs %d", a->n_beams, b->n_beams);
        return false;
    }
    for (int32_t i = 0; i < a->n_beams; i++) {
        const kvt_beam_out *x = &a->beams[i], *y = &b->beams[i];
        if (x->n != y->n || memcmp(x->ids, y->ids, (size_t)x->n * sizeof *x->ids) != 0) {
            snprintf(why, n_why, "beam %d: ids differ (%lld vs %lld tokens)", i, (long long)x->n, (long long)y->n);
            return false;
        }
        if (fabs(x->score - y->score) > tol * fabs(x->score)) {
            snprintf(why, n_why, "beam %d: score %.9g vs %.9g", i, x->score, y->score);
            return false;
        }
    }
    return true;
}

static int64_t moved(const kvt_kv_stats *s) {
    int64_t t = 0;
    for (int a = 0; a < KVT_TIER_COUNT; a++) {
        for (int b = 0; b < KVT_TIER_COUNT; b++) t += a != b ? s->moved_bytes[a][b] : 0;
    }
    return t;
}

static void schedules_agree(const kvt_model *m, bool batched, float temp, int64_t fast) {
    kvt_beam_params bp = kvt_beam_params_default();
    bp.n_beams = 4;
    bp.width = 2;
    bp.step = 8;
    bp.n_tokens = 24;
    bp.temp = temp;
    bp.seed = 7;
    bp.batched = batched;
    bp.stop_at_eog = false;
    // batched or not: a row's logits do not depend on the rows beside it (tests/test_determ.c)
    const double tol = 0;
    char name[200], why[200] = "";
    run_out ref, mem, o;
    bp.schedule = KVT_BEAM_SCHED_LAYERWISE;
    run(m, &bp, 0, &mem);
    run(m, &bp, fast, &ref);
    snprintf(name, sizeof name, "beam: %s, temp %.1f: layerwise with a small fast tier = all in memory%s",
             batched ? "batched" : "one by one", temp, " (bit for bit)");
    bool ok = !mem.st && !ref.st && same(&mem.r, &ref.r, tol, why, sizeof why) && ref.r.n_beams == 4;
    test_result(ok, name, "%s", mem.st ? mem.msg : ref.st ? ref.msg : why);
    bool moves = moved(&ref.ks) > 0;
    for (int s = KVT_BEAM_SCHED_BEAM; s < KVT_BEAM_SCHED_COUNT; s++) {
        bp.schedule = (kvt_beam_sched)s;
        run(m, &bp, fast, &o);
        snprintf(name, sizeof name, "beam: %s, temp %.1f: %s = layerwise, KV beyond the fast tier%s",
                 batched ? "batched" : "one by one", temp, kvt_beam_sched_name(bp.schedule), " (bit for bit)");
        bool many = false;
        for (int32_t i = 0; i < o.r.n_steps; i++) many |= o.r.groups_per_step[i] > 1;
        ok = !o.st && same(&ref.r, &o.r, tol, why, sizeof why) && many;
        test_result(ok, name, "%s", o.st ? o.msg : !many ? "one group per step: the KV fits, the test proves nothing" : why);
        // no leak: every block released once the search ends (forks freed, sequence 0 emptied)
        if (s == KVT_BEAM_SCHED_BALANCED && !batched && temp == 0) {
            int64_t used = o.ks.used_bytes[0] + o.ks.used_bytes[1] + o.ks.used_bytes[2];
            test_result(!o.st && used == 0 && o.ks.peak_bytes[0] <= fast,
                        "beam: after the search no KV block is held; T0 never above its budget",
                        "%lld bytes still used, T0 peak %lld of %lld", (long long)used,
                        (long long)o.ks.peak_bytes[0], (long long)fast);
        }
        kvt_beam_result_free(&o.r);
    }
    if (!batched && temp == 0) {
        test_result(moves, "beam: the small fast tier makes KV move (the comparison means something)",
                    "no bytes moved");
    }
    kvt_beam_result_free(&ref.r);
    kvt_beam_result_free(&mem.r);
}

// Sampling at a low temperature draws the same continuation many times: the kept beams must still be
// distinct (coinciding candidates merged before selection), and there must still be n_beams of them.
static void distinct_when_sampled(const kvt_model *m) {
    kvt_beam_params bp = kvt_beam_params_default();
    bp.n_beams = 4;
    bp.width = 4;
    bp.step = 4;
    bp.n_tokens = 12;
    bp.temp = 0.3f;
    bp.seed = 3;
    bp.stop_at_eog = false;
    int dup_runs = 0, bad = 0;
    char why[KVT_ERR_MSG_MAX + 100] = "";
    for (int t = 0; t < 2; t++) {
        bp.temp = t ? 0.7f : 0.3f;
        run_out o;
        run(m, &bp, 0, &o);
        if (o.st || o.r.n_beams != bp.n_beams) {
            snprintf(why, sizeof why, "temp %.1f: status %d, %d beams: %s", bp.temp, o.st, o.r.n_beams, o.msg);
            bad++;
        }
        for (int32_t i = 0; i < o.r.n_beams; i++) {
            for (int32_t j = 0; j < i; j++) {
                const kvt_beam_out *x = &o.r.beams[i], *y = &o.r.beams[j];
                if (x->n == y->n && !memcmp(x->ids, y->ids, (size_t)x->n * sizeof *x->ids)) {
                    snprintf(why, sizeof why, "temp %.1f: beams %d and %d have the same ids", bp.temp, j, i);
                    dup_runs++;
                }
            }
        }
        kvt_beam_result_free(&o.r);
    }
    test_result(!bad && !dup_runs, "beam: sampled (--temp > 0) beams are distinct, n_beams of them", "%s", why);
}

static void errors(const kvt_model *m) {
    kvt_beam_params bp = kvt_beam_params_default();
    run_out o;
    bp.n_beams = 0;
    run(m, &bp, 0, &o);
    bool ok = o.st == KVT_ERR_INVALID_ARG && strstr(o.msg, "--beams");
    bp.n_beams = 2;
    bp.width = m->hp.n_vocab + 1;
    run(m, &bp, 0, &o);
    ok = ok && o.st == KVT_ERR_INVALID_ARG && strstr(o.msg, "vocabulary");
    bp.width = 2;
    bp.n_tokens = 1000; // context of 128
    run(m, &bp, 0, &o);
    ok = ok && o.st == KVT_ERR_BUDGET && strstr(o.msg, "context");
    bp.n_tokens = 8;
    bp.step_delim = "\n\n"; // without a tokenizer
    run(m, &bp, 0, &o);
    ok = ok && o.st == KVT_ERR_INVALID_ARG && strstr(o.msg, "tokenizer");
    test_result(ok, "beam: zero beams, width beyond the vocabulary, a full context, a delimiter without tokenizer are refused",
                "last: %s", o.msg);
    // the contiguous cache cannot fork
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    kvt_context *ctx = NULL;
    kvt_err err = {0};
    bp.step_delim = NULL;
    int32_t prompt[2] = {1, 5};
    kvt_beam_result r;
    kvt_status st = kvt_context_init(m, &cp, &ctx, &err);
    if (!st) st = kvt_beam_run(ctx, &bp, prompt, 2, &r, &err);
    test_result(st == KVT_ERR_UNSUPPORTED && strstr(err.msg, "paged"), "beam: the contiguous cache is refused by name",
                "status %d: %s", st, err.msg);
    kvt_beam_result_free(&r);
    kvt_context_free(ctx);
}

static void cli(const test_env *env, const char *model) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s beam -m %s -p 'Once upon a time' --beams 2 --width 2 --step 4 -n 8 --schedule prefix --kv-block 4 "
             "--kv-fast 20000 --kv-host 1MB -t 1 --json 2>&1",
             env->cli, model);
    FILE *f = popen(cmd, "r");
    char buf[65536];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    int rc = f ? pclose(f) : -1;
    buf[n] = 0;
    bool ok = rc == 0 && strstr(buf, "\"beams\":[{\"ids\":[") && strstr(buf, "\"groups_per_step\":[") &&
              strstr(buf, "\"time_ms\":{\"total\":") && strstr(buf, "\"moved_bytes\":") && strstr(buf, "\"predicted\":");
    test_result(ok, "beam: CLI --json has beams, groups_per_step, time_ms, kv and predicted bytes", "rc %d: %.300s", rc, buf);
    snprintf(cmd, sizeof cmd, "%s beam -m %s -p hi --schedule nope 2>&1", env->cli, model);
    f = popen(cmd, "r");
    n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    rc = f ? pclose(f) : -1;
    buf[n] = 0;
    test_result(WEXITSTATUS(rc) == 2 && strstr(buf, "nope"), "beam: CLI names an unknown schedule (exit 2)", "rc %d: %s", rc,
                buf);
}

void test_beam(const test_env *env) {
    char path[512];
    if (!test_data(env, "stories260K.gguf", path, sizeof path)) {
        test_skip("beam", test_data_missing(env, "stories260K.gguf"));
        return;
    }
    kvt_model *m = NULL;
    kvt_err err = {0};
    if (kvt_model_load(path, false, &m, &err)) {
        test_result(false, "beam: load stories260K", "%s", err.msg);
        return;
    }
    // one continuation at the end of the search: (13 + 24) positions -> 5 blocks of 8 per layer;
    // 3 continuations' KV fit, the 8 of a step do not
    const int64_t blk = 2LL * 8 * m->hp.n_head_kv * m->hp.head_dim * 2; // F16 K+V of one 8-position block, one layer
    const int64_t fast = 3 * 5 * blk * m->hp.n_layer;
    schedules_agree(m, false, 0.0f, fast);
    schedules_agree(m, false, 0.8f, fast);
    schedules_agree(m, true, 0.0f, fast);
    distinct_when_sampled(m);
    errors(m);
    kvt_model_free(m);
    cli(env, path);
}
