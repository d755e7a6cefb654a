/*
 * llama_golden.c - produce golden reference vectors from llama.cpp (the peer).
 *
 * Built against an out-of-tree llama.cpp checkout + build (see make_golden.sh);
 * it is not part of the kvtier library build. Uses only the public llama.h API.
 *
 * Usage: llama_golden -m MODEL -p PROMPT [-n N] [-t THREADS] [-c CTX]
 *                     -o OUT.greedy.json [-l OUT.logits.txt]
 *
 * Tokenization: llama_tokenize(add_special=true, parse_special=true), i.e. BOS/EOS
 * are added exactly when the model's metadata asks for it (SmolLM2: add_bos=false).
 * The prompt is decoded in one batch (F16 KV cache, the llama.cpp default), then
 * N tokens are generated greedily (argmax; ties -> lowest id) one at a time.
 *
 * Outputs:
 *   OUT.greedy.json: {"prompt": ..., "prompt_ids": [...], "greedy_ids": [...],
 *                     "top2_gaps": [...], "greedy_text": ...}
 *     top2_gaps[i] = best - second-best logit at generation step i.
 *   OUT.logits.txt : the full logit vector after the last prompt token, "%.6f" per line.
 *
 * Environment: GOLDEN_FA_OFF (llama.cpp's attention without flash attention), GOLDEN_NO_REPACK (its plain row
 * kernels: no repacked weights, use_extra_bufts = false).
 */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s -m MODEL -p PROMPT [-n N=32] [-t THREADS=2] [-c CTX=512]\n"
            "          -o OUT.greedy.json [-l OUT.logits.txt]\n", argv0);
}

/* Write s as a JSON string literal (UTF-8 passed through, controls escaped). */
static void json_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"':  fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20) fprintf(f, "\\u%04x", c);
            else fputc(c, f);
        }
    }
    fputc('"', f);
}

static void json_ids(FILE *f, const llama_token *ids, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", (int)ids[i]);
    fputc(']', f);
}

/* argmax (first max wins) and gap to the runner-up */
static llama_token argmax2(const float *v, int n, float *gap) {
    int best = 0;
    for (int i = 1; i < n; i++) if (v[i] > v[best]) best = i;
    float second = -1e30f;
    for (int i = 0; i < n; i++) if (i != best && v[i] > second) second = v[i];
    *gap = v[best] - second;
    return (llama_token)best;
}

static void quiet_log(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *out_json = NULL, *out_logits = NULL;
    int n_gen = 32, n_threads = 2, n_ctx = 512;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) { usage(argv[0]); return 2; }
        if      (!strcmp(a, "-m")) model_path = argv[++i];
        else if (!strcmp(a, "-p")) prompt     = argv[++i];
        else if (!strcmp(a, "-n")) n_gen      = atoi(argv[++i]);
        else if (!strcmp(a, "-t")) n_threads  = atoi(argv[++i]);
        else if (!strcmp(a, "-c")) n_ctx      = atoi(argv[++i]);
        else if (!strcmp(a, "-o")) out_json   = argv[++i];
        else if (!strcmp(a, "-l")) out_logits = argv[++i];
        else { usage(argv[0]); return 2; }
    }
    if (!model_path || !prompt || !out_json || n_gen < 0 || n_threads < 1 || n_ctx < 16) {
        usage(argv[0]);
        return 2;
    }

    llama_log_set(quiet_log, NULL);
    llama_backend_init();

    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    if (getenv("GOLDEN_NO_REPACK")) mp.use_extra_bufts = false; // llama.cpp's plain row kernels, no repacked weights
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) { fprintf(stderr, "failed to load %s\n", model_path); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    /* tokenize: add_special=true, parse_special=true */
    const int plen = (int)strlen(prompt);
    int n_prompt = -llama_tokenize(vocab, prompt, plen, NULL, 0, true, true);
    if (n_prompt <= 0) { fprintf(stderr, "tokenize failed\n"); return 1; }
    llama_token *toks = malloc(sizeof(llama_token) * (size_t)(n_prompt + n_gen + 1));
    if (!toks) return 1;
    if (llama_tokenize(vocab, prompt, plen, toks, n_prompt, true, true) != n_prompt) {
        fprintf(stderr, "tokenize failed\n");
        return 1;
    }
    if (n_prompt + n_gen > n_ctx) { fprintf(stderr, "prompt + n exceeds ctx\n"); return 1; }

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = (uint32_t)n_ctx;
    cp.n_ubatch = (uint32_t)n_ctx;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.no_perf = true;
    if (getenv("GOLDEN_FA_OFF")) cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED; // llama.cpp's other attention path
    /* type_k / type_v left at the default (F16) */
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "failed to create context\n"); return 1; }

    /* prompt in one batch; llama_batch_get_one requests logits for the last token */
    if (llama_decode(ctx, llama_batch_get_one(toks, n_prompt)) != 0) {
        fprintf(stderr, "decode(prompt) failed\n");
        return 1;
    }

    llama_token *gen = malloc(sizeof(llama_token) * (size_t)(n_gen > 0 ? n_gen : 1));
    float *gaps = malloc(sizeof(float) * (size_t)(n_gen > 0 ? n_gen : 1));
    if (!gen || !gaps) return 1;

    float *logits = llama_get_logits_ith(ctx, -1);
    if (!logits) { fprintf(stderr, "no logits\n"); return 1; }
    if (out_logits) {
        FILE *lf = fopen(out_logits, "w");
        if (!lf) { perror(out_logits); return 1; }
        for (int i = 0; i < n_vocab; i++) fprintf(lf, "%.6f\n", logits[i]);
        fclose(lf);
    }

    for (int s = 0; s < n_gen; s++) {
        if (s > 0) {
            llama_token t = gen[s - 1];
            if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) {
                fprintf(stderr, "decode(step %d) failed\n", s);
                return 1;
            }
            logits = llama_get_logits_ith(ctx, -1);
            if (!logits) { fprintf(stderr, "no logits\n"); return 1; }
        }
        gen[s] = argmax2(logits, n_vocab, &gaps[s]);
    }

    /* decoded continuation (special tokens rendered) */
    size_t cap = 256, len = 0;
    char *text = malloc(cap);
    if (!text) return 1;
    for (int s = 0; s < n_gen; s++) {
        char buf[256];
        int k = llama_token_to_piece(vocab, gen[s], buf, (int)sizeof buf, 0, true);
        if (k < 0) { fprintf(stderr, "token_to_piece failed for %d\n", gen[s]); return 1; }
        while (len + (size_t)k + 1 > cap) {
            cap *= 2;
            char *nt = realloc(text, cap);
            if (!nt) return 1;
            text = nt;
        }
        memcpy(text + len, buf, (size_t)k);
        len += (size_t)k;
    }

    FILE *jf = fopen(out_json, "w");
    if (!jf) { perror(out_json); return 1; }
    fputs("{\"prompt\": ", jf);
    json_str(jf, prompt, (size_t)plen);
    fputs(", \"prompt_ids\": ", jf);
    json_ids(jf, toks, n_prompt);
    fputs(", \"greedy_ids\": ", jf);
    json_ids(jf, gen, n_gen);
    fputs(", \"top2_gaps\": [", jf);
    for (int s = 0; s < n_gen; s++) fprintf(jf, "%s%.6f", s ? ", " : "", gaps[s]);
    fputs("], \"greedy_text\": ", jf);
    json_str(jf, text, len);
    fputs("}\n", jf);
    fclose(jf);

    fprintf(stderr, "llama_golden: n_vocab=%d add_bos=%d n_prompt=%d n_gen=%d -> %s\n",
            n_vocab, (int)llama_vocab_get_add_bos(vocab), n_prompt, n_gen, out_json);

    free(text); free(gaps); free(gen); free(toks);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
