// test_model_ref.c - the forward pass against llama.cpp's golden outputs, one mechanism for
// every model: logits after the prompt, greedy ids, and perplexity.
//
// Tolerance (the same rule for every model): llama.cpp itself has two attention paths (flash
// attention on, the goldens' default, and off: STEM.logits-fa-off.txt) whose logits differ by a
// "band" measured per file, band = max |fa_on - fa_off| / max |fa_on logit|. Our logits must be
// as close to llama.cpp as its two paths are to each other: max |ours - ref| / max |fa_on logit|
// <= max(band, 1%), ref being the nearer of llama.cpp's two paths (each is llama.cpp's answer).
// The 1% floor covers llama.cpp's F16 KV cache (~0.3% of the range alone) where the band is
// smaller; goldens without fa-off logits have band 0. Quantized models widen the band: llama.cpp
// rounds activations to 8 bits for its quantized matmuls, and a rounding that flips one way in one
// path and the other in another moves logits by ~1-2% of the largest (random-weight llama files
// of tools/golden/make_quant.sh) and ~4% on SmolLM2 Q4_1. kvtier computes llama.cpp's attention
// (over an F16 cache's first KVT_ATTN_CHUNK positions, which the goldens' prompts stay within; later positions
// accumulate in f32: src/attn/attention.h), Q4_1 matmul, RoPE, RMSNorm and SwiGLU operation for operation, so on
// the Q4_1 and Q6_K files and SmolLM2 it is within 0.0005% of the flash-attention logits; other types stay 0.2-1.4% off, inside
// their bands (docs/BENCHMARKS.md, "Agreement with llama.cpp"). Greedy ids must be equal while the top-two gap
// exceeds the tolerance. Perplexity must lie within llama.cpp's two paths ("ppl", "ppl_fa_off"),
// widened by their largest relative spread at any context of the file and at least by 0.2% (our
// own kernel paths differ by that much on SmolLM2's 383-token text: KVT_ISA=scalar 11.122, avx2
// 11.089 at ctx 64).
//
// Models: tests/data (stories260K, llama-2-tiny-random, qwen3-tiny, quant-q4_k_m), the shared
// folder when present (qwen3-synth-f16), SmolLM2 from the cache ($KVT_SMOLLM2; `make model`),
// and the quantized set that tools/golden/make_quant.sh writes ($KVT_QUANT_DIR: `make quant`, then
// `make test-quant`).
//
// Gemma 3 270M (Q4_K_M, `make model-gemma3`, KVT_GEMMA3) adds a long-context case: greedy ids after a
// 1636-token prompt (past its 512-position sliding window) equal llama.cpp's, with the contiguous cache
// and with the paged store, whose local layers keep only the blocks their window still sees. Its
// 262144-entry logit vectors are stored sparsely ("id value" lines: llama.cpp's top 2048 ids and every
// 64th id) to keep the repository small; the tolerance is taken over the same ids. Its perplexity
// tolerance is the 0.5% of issue 11, over gemma3-270m.ppl.txt (6338 tokens; llama.cpp's own paths differ by
// 0.36% at ctx 128 and 0.18% at ctx 800 there). The 1636-token long text gave too few predictions for 0.5%:
// a change of kvtier's AVX2 q4_K summation order to llama.cpp's own moved ours from 0.07% to 0.64% outside. The model moves its logits by about 1 for any
// rounding change (our F16 vs F32 KV cache: 1.5; our scalar vs AVX2 kernels: 1.0-1.2), so on one
// short prompt the band is a noisy sample: on "The capital of France is" ours was 1.17-1.32 off with a
// tolerance of 1.10, on the 26-token prompt used here 0.79-1.10 with a band of 1.01 (absolute logits).
// So its band is sampled over five prompts (gemma3-270m.bandK.*, K = 1..4, beside the first): llama.cpp's
// band and our distance (to the nearer path) are each the largest over the five. Measured 2026-11-28 on a
// 2-vCPU AMD EPYC with AVX-512 (where llama.cpp reproduces these goldens exactly): llama.cpp's per-prompt
// bands 2.87-5.39% of the largest logit; ours per prompt 2.2-4.5% (AVX-512 kernels) and 2.5-4.2% (AVX2),
// kvtier's own AVX-512 vs AVX2 kernels 4.1% apart on the first prompt: one prompt's band (4.21% there) is
// below what any rounding change gives on some prompt.
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
    const char *bos_logits; // llama.cpp's logits after BOS alone, or NULL
    const char *ppl_text; // text of the perplexity runs (NULL: story.txt) and of the long-context check
    double ppl_tol;       // perplexity tolerance at least this (0: llama.cpp's spread, at least 0.2%)
    const char *band_stem; // with n_band > 0: more prompts band_stem.bandK.{json,logits.txt,logits-fa-off.txt}, K = 1..n_band
    int n_band;
} golden;

// max |a[k] - b[k]| over k = ids[0..n) (ids NULL: k = 0..n); *at gets that k
static float max_abs_diff(const float *a, const float *b, const int32_t *ids, int64_t n, int64_t *at) {
    float m = 0;
    *at = ids ? ids[0] : 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t k = ids ? ids[i] : i;
        if (fabsf(a[k] - b[k]) > m) {
            m = fabsf(a[k] - b[k]);
            *at = k;
        }
    }
    return m;
}

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

// llama.cpp's band on a file: the spread of its two attention paths over the listed ids, relative to
// max |ref| (*maxref); 0 without a fa-off file. *alt_out gets the fa-off logits (caller frees, NULL
// without); *band_ok is false when the fa-off file is named but unreadable or lists other ids.
static float logits_band(const golden *G, const float *ref, const int32_t *ids, int64_t n, int32_t n_vocab, float **alt_out,
                         float *maxref, bool *band_ok) {
    *maxref = 0;
    for (int64_t i = 0; i < n; i++) *maxref = fmaxf(*maxref, fabsf(ref[ids[i]]));
    int32_t *alt_ids = NULL;
    int64_t n_alt = 0, at;
    float *alt = G->logits_alt ? read_logits(G->logits_alt, n_vocab, &alt_ids, &n_alt) : NULL;
    *band_ok = !G->logits_alt || (alt && n_alt == n && memcmp(alt_ids, ids, (size_t)n * sizeof *ids) == 0);
    free(alt_ids);
    if (!*band_ok) {
        free(alt);
        alt = NULL;
    }
    *alt_out = alt;
    return alt ? max_abs_diff(alt, ref, ids, n, &at) / *maxref : 0;
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

// The logits after BOS alone: one position, so no attention mixing and llama.cpp's two paths
// agree exactly; what remains is the matmuls with their activation quantization, which kvtier
// computes as llama.cpp does. Tolerance 0.01% of the largest logit (the goldens print 6 decimals;
// float sums in another order).
static void check_bos_logits(const golden *G, kvt_model *m) {
    char name[256];
    snprintf(name, sizeof name, "%s: logits after BOS alone equal llama.cpp's (0.01%% of max |logit|)", G->name);
    int64_t n = 0, worst = 0;
    float *ref = test_read_floats(G->bos_logits, &n);
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 16;
    cp.n_threads = 2;
    kvt_context *ctx = NULL;
    kvt_err err = {0};
    kvt_tokenizer *tok = NULL;
    if (!ref || n != m->hp.n_vocab || kvt_tokenizer_init(m->gguf, &tok, &err) || kvt_context_init(m, &cp, &ctx, &err)) {
        test_result(false, name, "%s: %lld values for vocab %d %s", G->bos_logits, (long long)n, m->hp.n_vocab, err.msg);
    } else {
        const int32_t bos = kvt_token_bos(tok);
        if (kvt_decode(ctx, &bos, 1, false, &err)) {
            test_result(false, name, "%s", err.msg);
        } else {
            float maxref = 0;
            for (int64_t i = 0; i < n; i++) maxref = fmaxf(maxref, fabsf(ref[i]));
            const float *l = kvt_context_logits(ctx);
            const float d = max_abs_diff(l, ref, NULL, n, &worst);
            printf("     (after BOS alone: ours - llama.cpp max %.2e = %.5f%% of max |logit|)\n", d, 100 * d / maxref);
            test_result(d <= 1e-4f * maxref, name, "max |diff| %.2e at id %lld (ours %.6f, ref %.6f)", d, (long long)worst,
                        l[worst], ref[worst]);
        }
    }
    kvt_context_free(ctx);
    kvt_tokenizer_free(tok);
    free(ref);
}

// One prompt's logits against llama.cpp's two paths: decodes prompt_ids of `json` in a fresh context and
// returns, relative to max |fa-on logit| over the listed ids (*maxref), llama.cpp's band (fa on vs off, 0
// without a fa-off file) and our distance to each path (*err_off INFINITY without). *ctx_out (if not NULL)
// keeps the context for a greedy continuation (caller frees). false after reporting a failure under `name`.
typedef struct {
    float maxref, band, err_on, err_off;
    int64_t worst, worst_alt; // ids of our largest distance to each path
    float ours, ref;          // our logit and llama.cpp's (fa on) at `worst`
} prompt_dist;

static bool prompt_distance(kvt_model *m, const char *json, const char *logits, const char *logits_alt, const char *name,
                            prompt_dist *d, kvt_context **ctx_out) {
    size_t len;
    char *js = test_read_file(json, &len);
    int64_t n_prompt = 0, n_vocab_ref = 0;
    int32_t *prompt = js ? test_json_int_array(js, "prompt_ids", &n_prompt) : NULL, *lid = NULL;
    float *ref = read_logits(logits, m->hp.n_vocab, &lid, &n_vocab_ref), *alt = NULL;
    kvt_context *ctx = NULL;
    kvt_err err = {0};
    bool ok = false, band_ok = false;
    golden g = {.logits_alt = logits_alt};
    if (!prompt || !ref) {
        test_result(false, name, "cannot read %s / %s", json, logits);
        goto out;
    }
    d->band = logits_band(&g, ref, lid, n_vocab_ref, m->hp.n_vocab, &alt, &d->maxref, &band_ok);
    if (!band_ok) {
        test_result(false, name, "cannot read %s (want the %lld ids of %s)", logits_alt, (long long)n_vocab_ref, logits);
        goto out;
    }
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    if (kvt_context_init(m, &cp, &ctx, &err) || kvt_decode(ctx, prompt, n_prompt, false, &err)) {
        test_result(false, name, "%s", err.msg);
        goto out;
    }
    const float *l = kvt_context_logits(ctx);
    d->err_on = max_abs_diff(l, ref, lid, n_vocab_ref, &d->worst) / d->maxref;
    d->err_off = alt ? max_abs_diff(l, alt, lid, n_vocab_ref, &d->worst_alt) / d->maxref : INFINITY;
    d->ours = l[d->worst];
    d->ref = ref[d->worst];
    ok = true;
out:
    if (ctx_out && ok) *ctx_out = ctx;
    else kvt_context_free(ctx);
    free(js);
    free(prompt);
    free(ref);
    free(alt);
    free(lid);
    return ok;
}

static void check_logits_and_greedy(const golden *G, kvt_model *m, bool quick) {
    char name[256];
    size_t len;
    char *js = test_read_file(G->greedy, &len);
    int64_t n_ref = 0;
    int32_t *ref_ids = js ? test_json_int_array(js, "greedy_ids", &n_ref) : NULL;
    free(js);
    snprintf(name, sizeof name, "%s: golden files", G->name);
    if (!ref_ids) {
        test_result(false, name, "cannot read greedy_ids of %s", G->greedy);
        return;
    }
    snprintf(name, sizeof name, "%s: logits within max(llama.cpp's fa on/off band, 1%%) of max |logit|", G->name);
    kvt_context *ctx = NULL;
    prompt_dist d;
    if (!prompt_distance(m, G->greedy, G->logits, G->logits_alt, name, &d, &ctx)) {
        free(ref_ids);
        return;
    }
    // our distance to llama.cpp: to the nearer of its two paths (each is llama.cpp's answer)
    float band = d.band, err = fminf(d.err_on, d.err_off);
    if (G->logits_alt)
        printf("     (llama.cpp's band %.3f%%; ours %.3f%% from fa on, %.3f%% from fa off, of max |logit| %.5f)\n",
               d.band * 100, d.err_on * 100, d.err_off * 100, d.maxref);
    else
        printf("     (no fa-off logits: band 0; ours %.3f%% of max |logit| %.5f)\n", d.err_on * 100, d.maxref);
    // more prompts (G->band_stem.K.*): on a model whose logits move by several % of the largest for any
    // rounding change, one prompt's band is a noisy sample; the band and our distance are then both the
    // largest over all the prompts
    for (int k = 1; k <= G->n_band; k++) {
        char stem[1100], json[1200], lg[1200], la[1200];
        snprintf(stem, sizeof stem, "%s.band%d", G->band_stem, k);
        snprintf(json, sizeof json, "%s.json", stem);
        snprintf(lg, sizeof lg, "%s.logits.txt", stem);
        snprintf(la, sizeof la, "%s.logits-fa-off.txt", stem);
        prompt_dist e;
        if (!prompt_distance(m, json, lg, la, name, &e, NULL)) {
            kvt_context_free(ctx);
            free(ref_ids);
            return;
        }
        printf("     (prompt %d: llama.cpp's band %.3f%%; ours %.3f%% from fa on, %.3f%% from fa off)\n", k + 1,
               e.band * 100, e.err_on * 100, e.err_off * 100);
        band = fmaxf(band, e.band);
        err = fmaxf(err, fminf(e.err_on, e.err_off));
    }
    const float rel_tol = fmaxf(band, 0.01f), tol = rel_tol * d.maxref;
    if (G->n_band) printf("     (over %d prompts: llama.cpp's band %.3f%%, ours %.3f%%)\n", G->n_band + 1, band * 100, err * 100);
    test_result(err <= rel_tol, name,
                "%.3f%% from fa on (id %lld: ours %.5f, ref %.5f), %.3f%% from fa off (id %lld); largest %.3f%%, tolerance %.3f%%",
                d.err_on * 100, (long long)d.worst, d.ours, d.ref, d.err_off * 100, (long long)d.worst_alt, err * 100,
                rel_tol * 100);
    // greedy continuation: equal ids while our top-two gap exceeds the tolerance
    snprintf(name, sizeof name, "%s: greedy ids match llama.cpp", G->name);
    int64_t n_gen = quick && n_ref > 8 ? 8 : n_ref;
    if (greedy_matches(ctx, m, ref_ids, n_gen, tol, name, NULL)) test_result(true, name, "");
    kvt_context_free(ctx);
    free(ref_ids);
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
    float maxref = 0, *alt = NULL;
    bool band_ok = false;
    const float band = ok ? logits_band(G, ref_logits, lid, n_lid, m->hp.n_vocab, &alt, &maxref, &band_ok) : 0;
    free(alt);
    const float tol = fmaxf(band, 0.01f) * maxref;
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

// Runs every check of one golden set; the model must exist (callers skip otherwise).
static void run_golden(const test_env *env, const golden *G) {
    char name[256], text[1024];
    kvt_model *m;
    kvt_err err = {0};
    snprintf(name, sizeof name, "%s: load", G->name);
    if (kvt_model_load(G->model, false, &m, &err)) {
        test_result(false, name, "%s", err.msg);
        return;
    }
    test_result(true, name, "");
    check_logits_and_greedy(G, m, env->quick);
    if (G->bos_logits) check_bos_logits(G, m);
    if (G->ppl_text) {
        check_ppl(G, m, G->ppl_text, env->quick);
        check_long_context(G, m, env->quick);
    } else if (!test_data(env, "story.txt", text, sizeof text)) {
        snprintf(name, sizeof name, "%s: perplexity", G->name);
        test_skip(name, test_data_missing(env, "story.txt"));
    } else {
        check_ppl(G, m, text, env->quick);
    }
    kvt_model_free(m);
}

// The golden files of STEM: STEM.gguf (unless model is given), STEM.greedy.json, STEM.logits.txt,
// STEM.logits-fa-off.txt (optional) and STEM.ppl.json, from DIR when given, else where
// test_data() finds them. Returns NULL and writes the skip reason to why when the model or a
// required golden file is missing.
typedef struct {
    char model[1024], greedy[1024], logits[1024], alt[1024], ppl[1024], bos[1024];
    golden g;
} golden_files;

static const golden *golden_find(const test_env *env, const char *dir, const char *stem, const char *model,
                                 golden_files *f, char *why, size_t why_cap) {
    static const char *const ext[] = {".gguf",     ".greedy.json", ".logits.txt", ".logits-fa-off.txt",
                                      ".ppl.json", ".bos-logits.txt"};
    char *dst[] = {f->model, f->greedy, f->logits, f->alt, f->ppl, f->bos};
    bool have[6];
    for (int i = 0; i < 6; i++) {
        char file[256];
        snprintf(file, sizeof file, "%s%s", stem, ext[i]);
        const bool direct = dir || (i == 0 && model);
        if (i == 0 && model) snprintf(dst[i], sizeof f->model, "%s", model);
        else if (dir) snprintf(dst[i], sizeof f->model, "%s/%s", dir, file);
        have[i] = direct ? test_file_exists(dst[i]) : test_data(env, file, dst[i], sizeof f->model) != NULL;
        if (!have[i] && i != 3 && i != 5) { // the fa-off (3) and BOS-alone (5) logits are optional
            if (direct) snprintf(why, why_cap, "%s not found", dst[i]);
            else snprintf(why, why_cap, "%s", test_data_missing(env, file));
            return NULL;
        }
    }
    f->g = (golden){stem, f->model, f->greedy, f->logits, f->ppl, have[3] ? f->alt : NULL, have[5] ? f->bos : NULL, NULL, 0, NULL, 0};
    return &f->g;
}

// llama-quantize's types of the quantized set (tools/golden/make_quant.sh)
static const char *const quant_types[] = {"bf16",   "q8_0",   "q4_0",   "q4_1",   "q4_k_m", "q5_k_m", "q6_k",
                                          "q2_k",   "q3_k_s", "q3_k_m", "q3_k_l", "q5_1",   "iq4_nl", "iq4_xs"};

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
    static golden_files f; // large: not on the stack
    char why[1200], name[256];
    // tests/data first, then the shared folder (qwen3-synth-f16 lives there only)
    static const char *const models[] = {"stories260K", "llama-2-tiny-random", "qwen3-tiny", "quant-q4_k_m", "qwen3-synth-f16"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        const golden *G = golden_find(env, NULL, models[i], NULL, &f, why, sizeof why);
        snprintf(name, sizeof name, "%s: reference checks", models[i]);
        if (G) run_golden(env, G);
        else test_skip(name, why);
    }
    // SmolLM2 (real weights, Q4_1) from the cache; its goldens are in tests/data
    const golden *G = golden_find(env, NULL, "smollm2", env->smollm2 ? env->smollm2 : "", &f, why, sizeof why);
    if (G) {
        f.g.name = "smollm2-135m-q4_1";
        run_golden(env, G);
    } else {
        test_skip("smollm2-135m-q4_1: reference checks",
                  test_file_exists(env->smollm2) ? why : "SmolLM2 not in cache: run `make model`");
    }
    // Gemma 3 270M (Q4_K_M, sliding-window layers) from the cache; its goldens and texts are in tests/data:
    // perplexity over gemma3-270m.ppl.txt (6338 tokens), the long-context greedy check on the -long prompt
    const char *gemma3 = getenv("KVT_GEMMA3");
    char ppl_text[1024];
    G = test_file_exists(gemma3) ? golden_find(env, NULL, "gemma3-270m", gemma3, &f, why, sizeof why) : NULL;
    if (G && test_data(env, "gemma3-270m.ppl.txt", ppl_text, sizeof ppl_text)) {
        f.g.name = "gemma3-270m-q4_k_m";
        f.g.ppl_text = ppl_text;
        f.g.ppl_tol = 0.005; // issue 11: within 0.5% of llama.cpp
        // four more prompts for the logits band (tools/golden/gemma3_golden.sh, step band): beside its
        // gemma3-270m.logits.txt
        char band_stem[1024];
        const char *dot = strstr(f.g.logits, ".logits.txt");
        snprintf(band_stem, sizeof band_stem, "%.*s", dot ? (int)(dot - f.g.logits) : 0, f.g.logits);
        f.g.band_stem = band_stem;
        f.g.n_band = dot ? 4 : 0;
        run_golden(env, G);
    } else {
        test_skip("gemma3-270m-q4_k_m: reference checks",
                  test_file_exists(gemma3) ? why : "Gemma 3 not in cache: run `make model-gemma3`");
    }
    // the quantized set made by llama-quantize from one BF16 file (tools/golden/make_quant.sh)
    const char *qdir = getenv("KVT_QUANT_DIR");
    if (!qdir || !*qdir || !test_file_exists(qdir)) {
        snprintf(why, sizeof why, "%s%s: `make quant` makes it (needs llama.cpp built: tools/golden/make_quant.sh), `make test-quant` checks it",
                 qdir && *qdir ? qdir : "KVT_QUANT_DIR", qdir && *qdir ? " absent" : " not set");
        test_skip("quant set (bf16 q8_0 q4_0 q4_1 q4_k_m q5_k_m q6_k q2_k q3_k_s/m/l q5_1 iq4_nl iq4_xs by llama-quantize): "
                  "reference checks", why);
        return;
    }
    for (size_t i = 0; i < sizeof quant_types / sizeof quant_types[0]; i++) {
        char stem[64];
        snprintf(stem, sizeof stem, "quant-%s", quant_types[i]);
        snprintf(name, sizeof name, "quant set %s: reference checks", stem);
        G = golden_find(env, qdir, stem, NULL, &f, why, sizeof why);
        if (!G) {
            char reason[1400];
            snprintf(reason, sizeof reason, "%s: `make quant` makes the set (needs llama.cpp built, see tools/golden)", why);
            test_skip(name, reason);
            continue;
        }
        snprintf(name, sizeof name, "quant set %s", stem);
        f.g.name = name;
        run_golden(env, G);
    }
}
