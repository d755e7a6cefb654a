// test_session.c - persistent KV (src/exec/session.h): a saved and reloaded
// cache gives the ids and logits of a run that recomputes the prompt, across
// the contiguous cache and the paged store; corrupted, truncated and foreign
// files are refused with a clear error. Run from the kv suite (test_kv.c).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/exec/context.h"
#include "../src/exec/session.h"
#include "../src/model/model.h"
#include "test.h"

#define N_PROMPT 50
#define N_SAVE 32 // positions saved (a prefix of the prompt, a multiple of n_ubatch: the KV rows then come from
                  // the micro-batches of the reference run, and the logits equal its logits bit for bit)
#define N_GEN 8

// Greedy ids [N_GEN] and logits [N_GEN, n_vocab] after prompt; with `load`, positions restored from the
// file first and only the rest of the prompt decoded. Returns the status; *n_loaded: positions restored.
static kvt_status greedy(const kvt_model *m, const kvt_context_params *cp, const int32_t *prompt, const char *load,
                         int32_t *ids, float *logits, int64_t *n_loaded, kvt_err *err) {
    const int32_t V = m->hp.n_vocab;
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(m, cp, &ctx, err);
    int64_t done = 0;
    if (!st && load) {
        kvt_session_info info;
        st = kvt_context_kv_load(ctx, 0, load, prompt, N_PROMPT, N_PROMPT - 1, &info, err);
        done = info.n_loaded;
    }
    if (n_loaded) *n_loaded = done;
    // as kvt_generate_cached: the first micro-batch ends at a multiple of n_ubatch
    const int64_t ub = cp->n_ubatch, first = done % ub ? ub - done % ub : N_PROMPT - done;
    if (!st) st = kvt_decode(ctx, prompt + done, first, false, err);
    if (!st && done + first < N_PROMPT) st = kvt_decode(ctx, prompt + done + first, N_PROMPT - done - first, false, err);
    for (int i = 0; !st && i < N_GEN; i++) {
        const float *l = kvt_context_logits(ctx);
        memcpy(logits + (int64_t)i * V, l, (size_t)V * sizeof(float));
        int32_t best = 0;
        for (int32_t j = 1; j < V; j++) best = l[j] > l[best] ? j : best;
        ids[i] = best;
        st = kvt_decode(ctx, &best, 1, false, err);
    }
    kvt_context_free(ctx);
    return st;
}

// Prefills prompt[0, N_SAVE) in a context of cp and saves it to path.
static kvt_status save_prefix(const kvt_model *m, const kvt_context_params *cp, const int32_t *prompt, const char *path,
                              kvt_err *err) {
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(m, cp, &ctx, err);
    if (!st) st = kvt_decode(ctx, prompt, N_SAVE, false, err);
    if (!st) st = kvt_context_kv_save(ctx, 0, prompt, N_SAVE, path, err);
    kvt_context_free(ctx);
    return st;
}

// Loads path into a fresh context of cp; returns the status (err set).
static kvt_status try_load(const kvt_model *m, const kvt_context_params *cp, const char *path, kvt_err *err) {
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(m, cp, &ctx, err);
    if (!st) st = kvt_context_kv_load(ctx, 0, path, NULL, 0, -1, NULL, err);
    kvt_context_free(ctx);
    return st;
}

static bool copy_file(const char *src, const char *dst, long cut, long flip) {
    FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
    bool ok = a && b;
    int c;
    long i = 0;
    while (ok && (c = fgetc(a)) != EOF) {
        if (cut >= 0 && i >= cut) break;
        if (i == flip) c ^= 0x10;
        ok = fputc(c, b) != EOF;
        i++;
    }
    if (a) fclose(a);
    if (b && fclose(b) != 0) ok = false;
    return ok;
}

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

// Gemma 3 270M (sliding-window layers of 512 positions, `make model-gemma3`): a paged store frees the blocks a window
// left, and --kv-save read every block of every layer, so it failed on any prompt past the window ("KV block 0 of
// layer 0 group 0 was freed"). A 700-token prompt saved from a paged store and loaded into a paged and a contiguous
// one: the 8 greedy steps after it are those of the run that saved it, bit for bit.
static void session_window(void) {
    const char *name = "kv: session of a sliding-window model (Gemma 3) saved from a paged store and loaded into paged "
                       "and contiguous stores: the same greedy logits as the run that saved it";
    const char *path = getenv("KVT_GEMMA3");
    if (!test_file_exists(path)) {
        test_skip(name, "Gemma 3 not in cache: run `make model-gemma3`");
        return;
    }
    kvt_model *m = NULL;
    kvt_err err = {0};
    kvt_status st = kvt_model_load(path, false, &m, &err);
    enum { NP = 700, NG = 8 };
    const int32_t V = st ? 0 : m->hp.n_vocab;
    int32_t *prompt = malloc(NP * sizeof *prompt);
    float *ref = malloc((size_t)NG * V * sizeof(float)), *got = malloc((size_t)NG * V * sizeof(float));
    char file[64];
    snprintf(file, sizeof file, "/tmp/kvt_session_g3_%d.kvs", (int)getpid());
    kvt_context_params paged = kvt_context_params_default();
    paged.n_ctx = 1024;
    paged.n_threads = 2;
    paged.kv_block = 64;
    paged.kv_fast_bytes = (int64_t)64 << 20;
    kvt_context_params contig = paged;
    contig.kv_fast_bytes = 0;
    bool same = true;
    for (int run = 0; !st && run < 3; run++) { // 0: prefill, save, decode (the reference); 1: paged load; 2: contiguous
        kvt_context *ctx = NULL;
        float *out = run ? got : ref;
        if (!(st = kvt_context_init(m, run == 2 ? &contig : &paged, &ctx, &err))) {
            for (int i = 0; i < NP; i++) prompt[i] = 2 + (i * 7919 + 13) % (V - 2);
            if (run == 0) { // the last token alone, as a step: the store then frees what the window left
                if (!(st = kvt_decode(ctx, prompt, NP - 1, false, &err))) st = kvt_decode(ctx, prompt + NP - 1, 1, false, &err);
                if (!st) st = kvt_context_kv_save(ctx, 0, prompt, NP, file, &err);
            } else {
                kvt_session_info info;
                if (!(st = kvt_context_kv_load(ctx, 0, file, prompt, NP, NP - 1, &info, &err))) {
                    st = kvt_decode(ctx, prompt + info.n_loaded, NP - info.n_loaded, false, &err);
                }
            }
        }
        for (int i = 0; !st && i < NG; i++) {
            const float *l = kvt_context_logits(ctx);
            memcpy(out + (int64_t)i * V, l, (size_t)V * sizeof(float));
            int32_t best = 0;
            for (int32_t j = 1; j < V; j++) best = l[j] > l[best] ? j : best;
            st = kvt_decode(ctx, &best, 1, false, &err);
        }
        if (!st && run) same = same && memcmp(ref, got, (size_t)NG * V * sizeof(float)) == 0;
        kvt_context_free(ctx);
    }
    test_result(!st && same, name, "%s", st ? err.msg : "logits differ");
    unlink(file);
    free(prompt), free(ref), free(got);
    kvt_model_free(m);
}

// Greedy logits [NG, V] of prompt[0, np) in a fresh context of cp; with `load`, the file's common prefix with the
// prompt restored first (capped at np - 1, as generate does). *n_loaded: positions restored.
static kvt_status window_run(const kvt_model *m, const kvt_context_params *cp, const int32_t *prompt, int64_t np,
                             const char *load, int ng, float *out, int64_t *n_loaded, kvt_err *err) {
    const int32_t V = m->hp.n_vocab;
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(m, cp, &ctx, err);
    kvt_session_info info = {0, 0, 0};
    if (!st && load) st = kvt_context_kv_load(ctx, 0, load, prompt, np, np - 1, &info, err);
    if (n_loaded) *n_loaded = info.n_loaded;
    if (!st) st = kvt_decode(ctx, prompt + info.n_loaded, np - info.n_loaded, false, err);
    for (int i = 0; !st && i < ng; i++) {
        const float *l = kvt_context_logits(ctx);
        memcpy(out + (int64_t)i * V, l, (size_t)V * sizeof(float));
        int32_t best = 0;
        for (int32_t j = 1; j < V; j++) best = l[j] > l[best] ? j : best;
        st = kvt_decode(ctx, &best, 1, false, err);
    }
    kvt_context_free(ctx);
    return st;
}

// A sliding-window layer's rows before the window are saved as zeros (whole blocks of the saver's block size), and the
// loader used to restore any common prefix n: the next query, at n, then attended to those zeros wherever n - window + 1
// fell before their end. Found 2026-12-06 with `generate --kv-save` / `--kv-load` on Gemma 3: the same prompt saved
// from a store of 1-position blocks, or a prompt that leaves the saved tokens 100 positions before their end, gave
// other tokens than a run without the file. Now such a prefix restores nothing (the prompt is recomputed), and one
// whose window the file holds is still restored: each run's logits are those of a run without the file, bit for bit.
static void session_window_prefix(void) {
    const char *name = "kv: session of a sliding-window model (Gemma 3): a prefix whose window reaches the saved zeros "
                       "(same prompt from 1-position blocks; a prompt leaving the saved tokens early) is recomputed, "
                       "the others (a prompt inside the window too) restored: the logits of a run without the file";
    const char *path = getenv("KVT_GEMMA3");
    if (!test_file_exists(path)) {
        test_skip(name, "Gemma 3 not in cache: run `make model-gemma3`");
        return;
    }
    kvt_model *m = NULL;
    kvt_err err = {0};
    kvt_status st = kvt_model_load(path, false, &m, &err);
    enum { NP = 640, NG = 4, DIVERGE = 540 };
    const int32_t V = st ? 0 : m->hp.n_vocab;
    int32_t *prompt = malloc(NP * sizeof *prompt), *other = malloc(NP * sizeof *other);
    float *ref = malloc((size_t)NG * V * sizeof(float)), *got = malloc((size_t)NG * V * sizeof(float));
    char file[64];
    snprintf(file, sizeof file, "/tmp/kvt_session_g3p_%d.kvs", (int)getpid());
    for (int i = 0; !st && i < NP; i++) {
        prompt[i] = 2 + (i * 7919 + 13) % (V - 2);
        other[i] = i < DIVERGE ? prompt[i] : 2 + (i * 104729 + 7) % (V - 2);
    }
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 1024;
    cp.n_threads = 2;
    cp.kv_fast_bytes = (int64_t)64 << 20;
    // case: saver's block size, prompt length saved and loaded, the prompt loaded, positions it may restore (0: none)
    const struct { int64_t block, np; const int32_t *load; int64_t want; } cs[] = {
        {1, NP, prompt, 0},          // n = NP - 1 sees position NP - 512, zeroed by 1-position blocks
        {64, NP, other, 0},          // n = DIVERGE sees positions from 29 on; blocks [0, 128) zeroed
        {64, NP, prompt, NP - 1},    // n = NP - 1 sees from 128 on: restored
        {1, 100, prompt, 99},        // inside the window: nothing zeroed, restored
    };
    const char *why = "";
    for (size_t c = 0; !st && c < sizeof cs / sizeof cs[0] && !*why; c++) {
        kvt_context *ctx = NULL;
        cp.kv_block = cs[c].block;
        if (!(st = kvt_context_init(m, &cp, &ctx, &err))) { // the saved run: the prompt, then a step
            int32_t next = 5;
            const int64_t np = cs[c].np;
            if (!(st = kvt_decode(ctx, prompt, np, false, &err))) st = kvt_decode(ctx, &next, 1, false, &err);
            int32_t *ids = malloc((size_t)(np + 1) * sizeof *ids);
            memcpy(ids, prompt, (size_t)np * sizeof *ids);
            ids[np] = next;
            if (!st) st = kvt_context_kv_save(ctx, 0, ids, np + 1, file, &err);
            free(ids);
        }
        kvt_context_free(ctx);
        cp.kv_block = 16; // the loading store's own block size
        int64_t n_loaded = -1;
        if (!st) st = window_run(m, &cp, cs[c].load, cs[c].np, NULL, NG, ref, NULL, &err);
        if (!st) st = window_run(m, &cp, cs[c].load, cs[c].np, file, NG, got, &n_loaded, &err);
        if (!st && n_loaded != cs[c].want) why = "positions restored";
        if (!st && memcmp(ref, got, (size_t)NG * V * sizeof(float)) != 0) why = "logits differ";
        if (*why) fprintf(stderr, "  case %zu (saved with blocks of %lld): %s (%lld restored, %lld expected)\n", c,
                          (long long)cs[c].block, why, (long long)n_loaded, (long long)cs[c].want);
    }
    test_result(!st && !*why, name, "%s", st ? err.msg : why);
    unlink(file);
    free(prompt), free(other), free(ref), free(got);
    kvt_model_free(m);
}

void test_session(const test_env *env, const char *synth_path) {
    session_window();
    session_window_prefix();
    char stories[512];
    if (!test_data(env, "stories260K.gguf", stories, sizeof stories)) {
        test_skip("kv: session save/load", test_data_missing(env, "stories260K.gguf"));
        return;
    }
    kvt_model *m = NULL;
    kvt_err err = {0};
    if (kvt_model_load(stories, false, &m, &err)) {
        test_result(false, "kv: session save/load", "%s", err.msg);
        return;
    }
    const int32_t V = m->hp.n_vocab;
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = 3 + (i * 37 + 11) % (V - 3);
    char path[64], bad[80];
    snprintf(path, sizeof path, "/tmp/kvt_session_%d.kvs", (int)getpid());
    snprintf(bad, sizeof bad, "%s.bad", path);
    kvt_context_params contig = kvt_context_params_default();
    contig.n_ctx = 96;
    contig.n_threads = 2;
    contig.n_ubatch = 16;
    contig.kv_block = 16;
    kvt_context_params paged = contig; // tiny T0, host and disk below, another block size, head-wise
    paged.kv_block = 8;
    paged.kv_group = 1;
    paged.kv_fast_bytes = 6 * 4096;
    paged.kv_host_bytes = 4 * 4096;
    paged.kv_disk_dir = "/tmp";
    int32_t ref_ids[N_GEN], ids[N_GEN];
    float *ref_l = calloc((size_t)N_GEN * V, sizeof(float)), *l = calloc((size_t)N_GEN * V, sizeof(float));
    kvt_status st = ref_l && l ? greedy(m, &contig, prompt, NULL, ref_ids, ref_l, NULL, &err) : KVT_ERR_NOMEM;
    if (st) test_result(false, "kv: session reference run", "%s", err.msg);
    // (1) round trips: contiguous -> contiguous (bitwise), contiguous -> paged and paged -> contiguous (1e-5)
    {
        const char *name = "kv: session save/load round trip gives the recomputed ids and logits (contig, paged)";
        bool ok = !st;
        char why[700] = "";
        const kvt_context_params *from[3] = {&contig, &contig, &paged}, *to[3] = {&contig, &paged, &contig};
        for (int c = 0; ok && c < 3; c++) {
            int64_t n_loaded = 0;
            kvt_status s2 = save_prefix(m, from[c], prompt, path, &err);
            if (!s2) s2 = greedy(m, to[c], prompt, path, ids, l, &n_loaded, &err);
            if (s2) {
                ok = false;
                snprintf(why, sizeof why, "case %d: %s", c, err.msg);
                break;
            }
            double md = 0, mr = 1e-30;
            for (int64_t i = 0; i < (int64_t)N_GEN * V; i++) {
                double d = l[i] > ref_l[i] ? l[i] - ref_l[i] : ref_l[i] - l[i];
                md = d > md ? d : md;
                mr = ref_l[i] > mr ? ref_l[i] : -ref_l[i] > mr ? -ref_l[i] : mr;
            }
            bool same = !memcmp(ids, ref_ids, sizeof ids);
            bool exact = c != 0 || !memcmp(l, ref_l, (size_t)N_GEN * V * sizeof(float));
            if (!same || md / mr > 1e-5 || !exact || n_loaded != N_SAVE) {
                ok = false;
                snprintf(why, sizeof why, "case %d: ids %s, logits rel diff %.3g%s, %lld positions loaded", c,
                         same ? "same" : "differ", md / mr, exact ? "" : " (not bitwise)", (long long)n_loaded);
            }
        }
        test_result(ok, name, "%s", why);
    }
    // (2) a corrupted byte (in the K/V rows) -> checksum error naming the file
    if (!st && !save_prefix(m, &contig, prompt, path, &err)) {
        const long size = file_size(path);
        bool ok = copy_file(path, bad, -1, size - 100);
        kvt_status s2 = ok ? try_load(m, &contig, bad, &err) : KVT_ERR_IO;
        test_result(ok && s2 == KVT_ERR_CHECKSUM && strstr(err.msg, bad) && strstr(err.msg, "corrupt"),
                    "kv: session file with a corrupted byte -> checksum error", "status %d: %s", s2, err.msg);
        // (3) truncated -> format error saying so
        ok = copy_file(path, bad, size - 1000, -1);
        s2 = ok ? try_load(m, &contig, bad, &err) : KVT_ERR_IO;
        bool t1 = ok && s2 == KVT_ERR_FORMAT && strstr(err.msg, bad) && strstr(err.msg, "truncated");
        ok = copy_file(path, bad, 20, -1);
        s2 = ok ? try_load(m, &contig, bad, &err) : KVT_ERR_IO;
        test_result(t1 && s2 == KVT_ERR_FORMAT && strstr(err.msg, "truncated"),
                    "kv: truncated session file -> clear error", "status %d: %s", s2, err.msg);
        // (4) another model (the synthetic llama: other shape), other KV type, too small a context
        kvt_model *m2 = NULL;
        kvt_err e2 = {0};
        s2 = synth_path && !kvt_model_load(synth_path, false, &m2, &e2) ? try_load(m2, &contig, path, &err) : KVT_ERR_IO;
        bool w1 = s2 == KVT_ERR_INVALID_ARG && strstr(err.msg, "another model") && strstr(err.msg, path);
        char m1[KVT_ERR_MSG_MAX];
        snprintf(m1, sizeof m1, "%s", m2 ? err.msg : e2.msg);
        kvt_model_free(m2);
        kvt_context_params f32 = contig;
        f32.kv_type = KVT_TYPE_F32;
        s2 = try_load(m, &f32, path, &err);
        bool w2 = s2 == KVT_ERR_INVALID_ARG && strstr(err.msg, "KV") && strstr(err.msg, "f32");
        test_result(w1 && w2, "kv: session file of another model or KV type -> identity error", "'%s' / '%s'", m1,
                    err.msg);
        kvt_context_params small = contig;
        small.n_ctx = 16;
        s2 = try_load(m, &small, path, &err);
        test_result(s2 == KVT_ERR_BUDGET && strstr(err.msg, "context"), "kv: session longer than the context -> budget error",
                    "status %d: %s", s2, err.msg);
    } else if (!st) {
        test_result(false, "kv: session save", "%s", err.msg);
    }
    unlink(path);
    unlink(bad);
    free(ref_l);
    free(l);
    kvt_model_free(m);
}
