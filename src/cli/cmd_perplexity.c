// cmd_perplexity.c - `kvtier perplexity`, computed as llama.cpp's llama-perplexity:
// the text (less one trailing newline, as llama.cpp's -f reads a file) is
// tokenized with BOS (when the model adds it), split into chunks of CTX tokens
// whose first token is replaced by BOS, and the negative log likelihood of the
// tokens after position CTX/2 of each chunk is averaged.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/json.h"
#include "../base/timer.h"
#include "../sched/perplexity.h"
#include "commands.h"
#include "common.h"

static void on_chunk(void *user, int64_t chunk, double ppl) {
    if (!*(bool *)user) fprintf(stderr, "[%lld]%.4f ", (long long)(chunk + 1), ppl);
}

int cmd_perplexity(int argc, char **argv) {
    kvt_args a = {"perplexity", argc, argv, 0};
    const char *model_path = NULL, *file = NULL;
    bool json = false;
    int64_t max_chunks = -1;
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 512;
    const char *flag;
    while (kvt_args_next(&a, &flag)) {
        int e = cli_engine_flag(&a, flag, &cp);
        if (e < 0) return 2;
        if (e > 0) continue;
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            printf("usage: kvtier perplexity -m MODEL -f FILE [-c CTX] [--chunks N] [--json]\n"
                   "  -c CTX here is the chunk size, default 512 as llama-perplexity (not the training context\n"
                   "  that the engine flags below give the other commands)\n"
                   "  --chunks N   score at most the first N chunks\n"
                   "%s",
                   cli_engine_help);
            return 0;
        } else if (!strcmp(flag, "-m") || !strcmp(flag, "--model")) {
            if (!(model_path = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "-f") || !strcmp(flag, "--file")) {
            if (!(file = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--chunks")) {
            if (!kvt_args_int(&a, flag, 1, INT32_MAX, &max_chunks)) return 2;
        } else if (!strcmp(flag, "--json")) {
            json = true;
        } else {
            kvt_args_unknown(&a, flag);
            return 2;
        }
    }
    if (!file) {
        fprintf(stderr, "kvtier perplexity: -f FILE is required\n");
        return 2;
    }
    if (cp.n_ctx < 4) {
        fprintf(stderr, "kvtier perplexity: -c must be at least 4\n");
        return 2;
    }
    size_t len;
    char *text = kvt_read_file("perplexity", file, &len);
    if (!text) return 1;
    // as llama.cpp's -f: one trailing newline of the file is not part of the text
    if (len > 0 && text[len - 1] == '\n') text[--len] = 0;
    kvt_model *model;
    kvt_tokenizer *tok;
    if (!cli_load_model("perplexity", model_path, false, &model, &tok)) {
        free(text);
        return 1;
    }
    int rc = 1;
    int64_t n_tok = 0;
    kvt_context *ctx = NULL;
    int32_t *ids = cli_tokenize("perplexity", tok, text, len, true, false, &n_tok);
    const int64_t n_ctx = cp.n_ctx;
    if (!ids) goto done;
    if (n_tok < 2 * n_ctx) {
        fprintf(stderr, "kvtier perplexity: %s has %lld tokens; at least 2*CTX = %lld are needed\n", file,
                (long long)n_tok, (long long)(2 * n_ctx));
        goto done;
    }
    if (cp.n_ubatch > n_ctx) cp.n_ubatch = n_ctx;
    kvt_err err = {0};
    if (!cli_context_init("perplexity", model, &cp, &ctx)) goto done;
    const int32_t bos = kvt_tokenizer_add_bos(tok) ? kvt_token_bos(tok) : -1;
    kvt_ppl_result res;
    double t0 = kvt_time_ms();
    if (kvt_perplexity(ctx, ids, n_tok, n_ctx, bos, max_chunks, on_chunk, &json, &res, &err)) {
        fprintf(stderr, "kvtier perplexity: %s\n", err.msg);
        goto done;
    }
    const double ppl = res.ppl;
    const int64_t n_chunks = res.n_chunks, count = res.n_scored;
    double ms = kvt_time_ms() - t0;
    if (json) {
        kvt_json j;
        kvt_json_init(&j, stdout);
        kvt_json_obj_begin(&j);
        kvt_json_kv_num(&j, "ppl", ppl);
        kvt_json_kv_num(&j, "ppl_err", res.ppl_err);
        kvt_json_kv_int(&j, "n_chunks", n_chunks);
        kvt_json_kv_int(&j, "n_tokens", n_tok);
        kvt_json_kv_int(&j, "n_ctx", n_ctx);
        kvt_json_kv_int(&j, "n_scored", count);
        kvt_json_kv_num(&j, "ms", ms);
        cli_json_sparse(&j, ctx, false);
        kvt_json_obj_end(&j);
    } else {
        fprintf(stderr, "\n");
        printf("Final estimate: PPL = %.4f +/- %.5f (%lld chunks of %lld tokens, %lld tokens in text, %.1f s)\n", ppl,
               res.ppl_err, (long long)n_chunks, (long long)n_ctx, (long long)n_tok, ms / 1e3);
    }
    rc = 0;
done:
    kvt_context_free(ctx);
    free(ids);
    free(text);
    kvt_tokenizer_free(tok);
    kvt_model_free(model);
    return rc;
}
