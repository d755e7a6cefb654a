// test_model_ref.c - the forward pass against llama.cpp's golden outputs:
// logits after the prompt within 1% of the largest reference logit, greedy ids
// equal while the top-two gap exceeds that tolerance, and perplexity within
// 0.2% of llama-perplexity's.
//
// For the quantized SmolLM2 the golden data also hold llama.cpp's results with
// its other attention path (flash attention off): on this model llama.cpp's
// two paths differ by ~4% of the largest logit and ~1% in perplexity, because
// the Q8 quantization of activations amplifies rounding differences. There the
// logits tolerance is widened by llama.cpp's own spread (documented in
// tools/golden/make_golden.sh), and perplexity may lie outside llama.cpp's band
// by as much as llama.cpp's two paths differ at any context of the file (0.94%
// here): our own kernel paths differ by as much on the 383-token text
// (KVT_ISA=scalar 11.122, avx2 11.089, avx512 within 0.2% of the band, ctx
// 64). The F32/F16 models keep the strict bounds.
//
// Gemma 3 270M (Q4_K_M, `make model-gemma3`, KVT_GEMMA3) adds a long-context case: greedy ids after a
// 1636-token prompt (past its 512-position sliding window) equal llama.cpp's, with the contiguous cache
// and with the paged store, whose local layers keep only the blocks their window still sees. Its
// 262144-entry logit vectors are stored sparsely ("id value" lines: llama.cpp's top 2048 ids and every
// 64th id) to keep the repository small; the tolerance is taken over the same ids. Its perplexity
// tolerance is the 0.5% of issue 11 (llama.cpp's own paths differ by 0.25% at ctx 800; ours is 0.43%
// above llama.cpp's at ctx 128, 0.1% at ctx 800). The model moves its logits by about 1 for any
// rounding change (our F16 vs F32 KV cache: 1.5; our scalar vs AVX2 kernels: 1.0-1.2), so on one
// short prompt the band is a noisy sample: on "The capital of France is" ours was 1.32 off with a
// band of 1.10, on the 26-token prompt used here 0.79-1.10 with a band of 1.11-1.26.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/exec/context.h"
#include "../src/model/tokenizer.h"
#include "../src/sched/perplexity.h"
#include "../src/sched/sampler.h"
#include "test.h"
#include "test_util.h"

typedef struct {
    const char *name;     // for messages
    const char *model;    // GGUF path
    const char *greedy;   // *.greedy.json path
    const char *logits;   // *.logits.txt path
    const char *ppl;      // *.ppl.json path
    const char *logits_alt; // llama.cpp's logits from its other attention path, or NULL
    const char *ppl_text; // text of the perplexity runs (NULL: the shared story.txt)
    const char *missing;  // skip reason when the model file is absent (NULL: SmolLM2's)
    double ppl_tol;       // perplexity tolerance at least this (0: llama.cpp's spread, at least 0.2%)
} golden;

// Logits file: one value per line (dense), or "id value" per line (sparse: the ids listed only).
// Returns the values in a vector of n_vocab entries and the ids present (*ids, *n); NULL on error.
static float *read_logits(const char *path, int32_t n_vocab, int32_t **ids, int64_t *n) {
    size_t len;
    char *txt = test_read_file(path, &len);
    float *v = txt ? calloc((size_t)n_vocab, sizeof *v) : NULL;
    *ids = txt ? malloc((size_t)n_vocab * sizeof **ids) : NULL;
    *n = 0;
    bool ok = v && *ids;
    for (char *line = txt; ok && line && *line;) {
        char *nl = strchr(line, '\n'), *end;
        if (nl) *nl = 0;
        double a = strtod(line, &end), b;
        char *end2;
        b = strtod(end, &end2);
        const bool sparse = end2 != end;
        const int64_t id = sparse ? (int64_t)a : *n;
        ok = end != line && id >= 0 && id < n_vocab && *n < n_vocab;
        if (ok) {
            v[id] = (float)(sparse ? b : a);
            (*ids)[(*n)++] = (int32_t)id;
        }
        line = nl ? nl + 1 : NULL;
    }
    free(txt);
    if (!ok || *n == 0) {
        free(v);
        free(*ids);
        *ids = NULL;
        return NULL;
    }
    return v;
}

// Tolerance of a logits comparison: 1% of the largest |reference logit| over the listed ids, widened by
// llama.cpp's own spread between its two attention paths where the alternative file is given.
static float logits_tolerance(const golden *G, const float *ref, const int32_t *ids, int64_t n, int32_t n_vocab) {
    float maxref = 0;
    for (int64_t i = 0; i < n; i++) maxref = fmaxf(maxref, fabsf(ref[ids[i]]));
    float tol = 0.01f * maxref;
    int32_t *alt_ids = NULL;
    int64_t n_alt = 0;
    float *alt = G->logits_alt ? read_logits(G->logits_alt, n_vocab, &alt_ids, &n_alt) : NULL;
    if (alt && n_alt == n) {
        float spread = 0;
        for (int64_t i = 0; i < n; i++) spread = fmaxf(spread, fabsf(alt[ids[i]] - ref[ids[i]]));
        printf("     (llama.cpp's own attention paths differ by %.5f: tolerance widened to %.5f)\n", spread, tol + spread);
        tol += spread;
    }
    free(alt);
    free(alt_ids);
    return tol;
}

// Greedy continuation from the context's current logits: equal ids while our top-two gap exceeds tol.
// Returns false (after reporting) on a real mismatch; *out (if not NULL) gets the ids generated.
static bool greedy_matches(kvt_context *ctx, const kvt_model *m, const int32_t *ref_ids, int64_t n_gen, float tol,
                           const char *name, int32_t *out) {
    int64_t matched = 0;
    bool stopped = false;
    kvt_err err = {0};
    char tie[128] = "";
    for (int64_t i = 0; i < n_gen; i++) {
        const float *l = kvt_context_logits(ctx);
        int32_t id = kvt_argmax(l, m->hp.n_vocab);
        if (out) out[i] = id;
        float best = l[id], second = -INFINITY;
        for (int32_t k = 0; k < m->hp.n_vocab; k++) {
            if (k != id && l[k] > second) second = l[k];
        }
        if (id != ref_ids[i]) {
            // a near-tie may legitimately break the other way: accept and stop comparing
            stopped = true;
            if (!(best - second <= tol || best - l[ref_ids[i]] <= tol)) {
                test_result(false, name, "step %lld: ours %d, ref %d (our gap to ref %.5f > tol %.5f)", (long long)i, id,
                            ref_ids[i], best - l[ref_ids[i]], tol);
                return false;
            }
            for (int64_t j = i + 1; out && j < n_gen; j++) out[j] = -1;
            snprintf(tie, sizeof tie, ", then a near-tie: ours %d, ref %d, %.5f apart", id, ref_ids[i], best - l[ref_ids[i]]);
            break;
        }
        matched++;
        if (i + 1 < n_gen && kvt_decode(ctx, &id, 1, false, &err)) {
            test_result(false, name, "%s", err.msg);
            return false;
        }
    }
    printf("     (%lld of %lld ids equal%s)\n", (long long)matched, (long long)n_gen, stopped ? tie : "");
    return true;
}

static void check_logits_and_greedy(const golden *G, kvt_model *m, bool quick) {
    char name[256];
    size_t len;
    char *js = test_read_file(G->greedy, &len);
    int64_t n_prompt = 0, n_ref = 0, n_vocab_ref = 0;
    int32_t *prompt = js ? test_json_int_array(js, "prompt_ids", &n_prompt) : NULL;
    int32_t *ref_ids = js ? test_json_int_array(js, "greedy_ids", &n_ref) : NULL;
    int32_t *lid = NULL;
    float *ref_logits = read_logits(G->logits, m->hp.n_vocab, &lid, &n_vocab_ref);
    snprintf(name, sizeof name, "%s: golden files", G->name);
    if (!prompt || !ref_ids || !ref_logits) {
        test_result(false, name, "cannot read %s / %s", G->greedy, G->logits);
        goto out;
    }
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    kvt_context *ctx;
    kvt_err err = {0};
    snprintf(name, sizeof name, "%s: context", G->name);
    if (kvt_context_init(m, &cp, &ctx, &err)) {
        test_result(false, name, "%s", err.msg);
        goto out;
    }
    snprintf(name, sizeof name, "%s: logits after prompt within 1%% of max |logit|", G->name);
    if (kvt_decode(ctx, prompt, n_prompt, false, &err)) {
        test_result(false, name, "%s", err.msg);
        kvt_context_free(ctx);
        goto out;
    }
    const float *l = kvt_context_logits(ctx);
    float maxdiff = 0;
    int64_t worst = lid[0];
    for (int64_t i = 0; i < n_vocab_ref; i++) {
        float d = fabsf(l[lid[i]] - ref_logits[lid[i]]);
        if (d > maxdiff) {
            maxdiff = d;
            worst = lid[i];
        }
    }
    const float tol = logits_tolerance(G, ref_logits, lid, n_vocab_ref, m->hp.n_vocab);
    const bool dense_ok = n_vocab_ref == m->hp.n_vocab || n_vocab_ref < lid[n_vocab_ref - 1] + 1;
    printf("     max |ours - llama.cpp| %.5f over %lld ids, tolerance %.5f\n", maxdiff, (long long)n_vocab_ref, tol);
    test_result(dense_ok && maxdiff <= tol, name,
                "max |diff| %.5f at id %lld (ours %.5f, ref %.5f), tolerance %.5f, vocab %lld vs %d", maxdiff,
                (long long)worst, l[worst], ref_logits[worst], tol, (long long)n_vocab_ref, m->hp.n_vocab);
    // greedy continuation: equal ids while our top-two gap exceeds the tolerance
    snprintf(name, sizeof name, "%s: greedy ids match llama.cpp", G->name);
    int64_t n_gen = quick && n_ref > 8 ? 8 : n_ref;
    if (greedy_matches(ctx, m, ref_ids, n_gen, tol, name, NULL)) test_result(true, name, "");
    kvt_context_free(ctx);
out:
    free(js);
    free(prompt);
    free(ref_ids);
    free(ref_logits);
    free(lid);
}

static void check_ppl(const golden *G, kvt_model *m, const char *text_path, bool quick) {
    char name[256];
    size_t len, tlen;
    char *js = test_read_file(G->ppl, &len);
    char *text = test_read_file(text_path, &tlen);
    kvt_tokenizer *tok = NULL;
    kvt_err err = {0};
    snprintf(name, sizeof name, "%s: perplexity inputs", G->name);
    if (!js || !text || kvt_tokenizer_init(m->gguf, &tok, &err)) {
        test_result(false, name, "cannot read %s / %s or tokenizer: %s", G->ppl, text_path, err.msg);
        goto out;
    }
    int64_t cap = (int64_t)tlen + 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int64_t n = kvt_tokenize(tok, text, tlen, true, false, ids, cap, &err);
    // entries look like {"ctx": 32, "ppl": 106791.3657[, "ppl_fa_off": ...]}
    double tol = fmax(0.002, G->ppl_tol); // llama.cpp's largest spread between its two paths, where the file has both
    for (const char *e = strstr(js, "\"ppl\""); e; e = strstr(e + 1, "\"ppl\"")) {
        const char *alt = strstr(e, "\"ppl_fa_off\""), *next = strstr(e + 1, "\"ppl\"");
        if (!alt || (next && alt > next)) continue;
        const double a = atof(strchr(e, ':') + 1), b = atof(strchr(alt, ':') + 1);
        tol = fmax(tol, fabs(a - b) / fmin(a, b));
    }
    const char *p = js;
    while ((p = strstr(p, "\"ctx\""))) {
        int ctxn = atoi(strchr(p, ':') + 1);
        const char *q = strstr(p, "\"ppl\"");
        if (!q) break;
        double ref = atof(strchr(q, ':') + 1), lo = ref, hi = ref;
        const char *alt = strstr(q, "\"ppl_fa_off\"");
        const char *next = strstr(q, "\"ctx\"");
        if (alt && (!next || alt < next)) { // llama.cpp's other attention path: accept its band
            double r2 = atof(strchr(alt, ':') + 1);
            lo = fmin(ref, r2);
            hi = fmax(ref, r2);
        }
        p = q;
        if (quick && ctxn > 64) continue;
        snprintf(name, sizeof name, "%s: perplexity at ctx %d within %.2f%% of llama.cpp", G->name, ctxn, tol * 100);
        kvt_context_params cp = kvt_context_params_default();
        cp.n_ctx = ctxn;
        cp.n_threads = 2;
        kvt_context *ctx;
        kvt_ppl_result r;
        if (n < 0 || kvt_context_init(m, &cp, &ctx, &err)) {
            test_result(false, name, "%s", err.msg);
            continue;
        }
        int32_t bos = kvt_tokenizer_add_bos(tok) ? kvt_token_bos(tok) : -1;
        kvt_status st = kvt_perplexity(ctx, ids, n, ctxn, bos, 0, NULL, NULL, &r, &err);
        kvt_context_free(ctx);
        double rel = r.ppl < lo ? (lo - r.ppl) / lo : r.ppl > hi ? (r.ppl - hi) / hi : 0.0;
        printf("     ppl ours %.4f, llama.cpp %.4f", r.ppl, ref);
        if (hi > lo) printf(" (fa off %.4f)", lo == ref ? hi : lo);
        printf("\n");
        test_result(st == KVT_OK && rel <= tol, name, "ours %.4f, llama.cpp [%.4f, %.4f] (%.3f%% outside) %s", r.ppl, lo,
                    hi, rel * 100, st ? err.msg : "");
    }
    free(ids);
out:
    kvt_tokenizer_free(tok);
    free(js);
    free(text);
}

// Greedy after a prompt longer than the sliding window (tests/data/<prefix>-long.greedy.json), with the
// contiguous cache and with the paged store in small blocks: ids equal llama.cpp's (while the top-two gap
// exceeds the short prompt's tolerance) and each other's; the paged store holds, per local layer, only
// the blocks of its window plus one micro-batch, whatever the context.
static void check_long_context(const golden *G, kvt_model *m, bool quick) {
    char name[256], path[512];
    snprintf(name, sizeof name, "%s: greedy after a prompt past the sliding window, contiguous and paged", G->name);
    if (quick) {
        test_skip(name, "sanitizer build (KVT_TEST_QUICK): long prefill skipped");
        return;
    }
    const char *suffix = strstr(G->greedy, ".greedy.json"); // ".../x.greedy.json" -> ".../x-long.greedy.json"
    snprintf(path, sizeof path, "%.*s-long.greedy.json", suffix ? (int)(suffix - G->greedy) : (int)strlen(G->greedy),
             G->greedy);
    size_t len;
    char *js = test_read_file(path, &len);
    int64_t n_prompt = 0, n_ref = 0, n_lid = 0;
    int32_t *prompt = js ? test_json_int_array(js, "prompt_ids", &n_prompt) : NULL;
    int32_t *ref_ids = js ? test_json_int_array(js, "greedy_ids", &n_ref) : NULL;
    int32_t *lid = NULL;
    float *ref_logits = read_logits(G->logits, m->hp.n_vocab, &lid, &n_lid);
    int32_t ids[2][64];
    kvt_kv_stats st = {0};
    bool ok = prompt && ref_ids && ref_logits && n_ref <= 64;
    const float tol = ok ? logits_tolerance(G, ref_logits, lid, n_lid, m->hp.n_vocab) : 0;
    const int64_t bt = 64;
    kvt_err err = {0};
    for (int paged = 0; ok && paged < 2; paged++) {
        kvt_context_params cp = kvt_context_params_default();
        cp.n_ctx = n_prompt + n_ref;
        cp.n_threads = 2;
        cp.kv_block = bt;
        cp.kv_paged = paged;
        kvt_context *ctx;
        ok = !kvt_context_init(m, &cp, &ctx, &err) && !kvt_decode(ctx, prompt, n_prompt, false, &err);
        if (!ok) {
            test_result(false, name, "%s", err.msg);
            break;
        }
        ok = greedy_matches(ctx, m, ref_ids, n_ref, tol, name, ids[paged]);
        if (paged) kvt_context_kv_stats(ctx, &st);
        kvt_context_free(ctx);
    }
    if (ok) {
        // blocks a layer may hold: global ones the whole context; local ones their window plus one
        // micro-batch of 512 positions, plus a partial block at either end
        const int64_t n = n_prompt + n_ref, W = m->hp.n_swa;
        int64_t bound = 0, full = 0;
        for (int32_t l = 0; l < m->hp.n_layer; l++) {
            const int64_t all = (n + bt - 1) / bt;
            const int64_t win = (W + 512 + bt - 1) / bt + 1;
            bound += m->layers[l].window > 0 && win < all ? win : all;
            full += all;
        }
        const int64_t held = st.peak_bytes[KVT_TIER_FAST] / st.block_bytes;
        printf("     paged store: peak %lld blocks of %lld bytes (bound %lld; %lld without the window)\n", (long long)held,
               (long long)st.block_bytes, (long long)bound, (long long)full);
        ok = memcmp(ids[0], ids[1], (size_t)n_ref * sizeof ids[0][0]) == 0;
        if (!ok) test_result(false, name, "paged store's ids differ from the contiguous cache's");
        else if (held > bound || held >= full) {
            ok = false;
            test_result(false, name, "paged store held %lld blocks, bound %lld", (long long)held, (long long)bound);
        }
        if (ok) test_result(true, name, "");
    } else if (!prompt || !ref_ids || !ref_logits) {
        test_result(false, name, "cannot read %s / %s", path, G->logits);
    }
    free(js);
    free(prompt);
    free(ref_ids);
    free(ref_logits);
    free(lid);
}

static void run_golden(const test_env *env, const golden *G) {
    char name[256];
    if (!test_file_exists(G->model)) {
        snprintf(name, sizeof name, "%s: reference checks", G->name);
        test_skip(name, G->missing ? G->missing : "model file not present (run `make model` to fetch SmolLM2)");
        return;
    }
    kvt_model *m;
    kvt_err err = {0};
    snprintf(name, sizeof name, "%s: load", G->name);
    if (kvt_model_load(G->model, false, &m, &err)) {
        test_result(false, name, "%s", err.msg);
        return;
    }
    test_result(true, name, "");
    check_logits_and_greedy(G, m, env->quick);
    char text[1024];
    snprintf(text, sizeof text, "%s/vectors/text/story.txt", env->shared);
    check_ppl(G, m, G->ppl_text ? G->ppl_text : text, env->quick);
    if (G->ppl_text) check_long_context(G, m, env->quick);
    kvt_model_free(m);
}

// The local/global layer pattern as llama.cpp reads gemma3 files: layer il is local iff il % period <
// period - 1 (every period-th layer global), and no window at all without attention.sliding_window.
static void check_window_pattern(void) {
    kvt_hparams hp = {0};
    hp.n_layer = 18;
    hp.n_swa = 512;
    hp.swa_period = 6;
    bool ok = true;
    for (int32_t l = 0; l < hp.n_layer; l++) ok = ok && kvt_hparams_layer_window(&hp, l) == (l % 6 == 5 ? 0 : 512);
    hp.n_swa = 0;
    ok = ok && kvt_hparams_layer_window(&hp, 0) == 0;
    test_result(ok, "gemma3: sliding-window layer pattern (layers 5, 11, 17 of 18 global)", "wrong pattern");
}

void test_model_ref(const test_env *env) {
    check_window_pattern();
    static const char *shared_models[] = {"stories260K", "llama-2-tiny-random", "qwen3-synth-f16"};
    char p[4][1024];
    for (size_t i = 0; i < sizeof shared_models / sizeof shared_models[0]; i++) {
        const char *n = shared_models[i];
        snprintf(p[0], sizeof p[0], "%s/models/%s.gguf", env->shared, n);
        snprintf(p[1], sizeof p[1], "%s/vectors/reference/%s.greedy.json", env->shared, n);
        snprintf(p[2], sizeof p[2], "%s/vectors/reference/%s.logits.txt", env->shared, n);
        snprintf(p[3], sizeof p[3], "%s/vectors/reference/%s.ppl.json", env->shared, n);
        golden G = {n, p[0], p[1], p[2], p[3], NULL, NULL, NULL, 0};
        run_golden(env, &G);
    }
    golden S = {"smollm2-135m-q4_1", env->smollm2, "tests/data/smollm2.greedy.json", "tests/data/smollm2.logits.txt",
                "tests/data/smollm2.ppl.json", "tests/data/smollm2.logits-fa-off.txt", NULL, NULL, 0};
    run_golden(env, &S);
    const char *gemma3 = getenv("KVT_GEMMA3");
    golden G3 = {"gemma3-270m-q4_k_m", gemma3 ? gemma3 : "", "tests/data/gemma3-270m.greedy.json",
                 "tests/data/gemma3-270m.logits.txt", "tests/data/gemma3-270m.ppl.json",
                 "tests/data/gemma3-270m.logits-fa-off.txt", "tests/data/gemma3-270m.long.txt",
                 "Gemma 3 not in cache: run `make model-gemma3`", 0.005};
    run_golden(env, &G3);
}
