#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cli_load_model(const char *cmd, const char *path, bool vocab_only, kvt_model **model, kvt_tokenizer **tok) {
    kvt_err err = {0};
    *model = NULL;
    if (!path) {
        fprintf(stderr, "kvtier %s: -m MODEL is required\n", cmd);
        return false;
    }
    if (kvt_model_load(path, vocab_only, model, &err)) {
        fprintf(stderr, "kvtier %s: %s\n", cmd, err.msg);
        return false;
    }
    if (tok) {
        if (kvt_tokenizer_init((*model)->gguf, tok, &err)) {
            fprintf(stderr, "kvtier %s: %s\n", cmd, err.msg);
            kvt_model_free(*model);
            *model = NULL;
            return false;
        }
    }
    return true;
}

const char *const cli_engine_help =
    "  -t, --threads N      worker threads (default: physical cores)\n"
    "  -c, --ctx-size N     context size in tokens (default: the model's training context)\n"
    "  --kv-type f16|f32    KV cache element type (default f16, as llama.cpp)\n"
    "  --ubatch N           tokens per forward micro-batch (default 512)\n"
    "  --kv-block N         positions per KV block (default 256)\n";

int cli_engine_flag(kvt_args *a, const char *flag, kvt_context_params *p) {
    int64_t v;
    if (!strcmp(flag, "-t") || !strcmp(flag, "--threads")) {
        if (!kvt_args_int(a, flag, 1, 1024, &v)) return -1;
        p->n_threads = (int32_t)v;
        return 1;
    }
    if (!strcmp(flag, "-c") || !strcmp(flag, "--ctx-size")) {
        if (!kvt_args_int(a, flag, 1, (int64_t)1 << 24, &v)) return -1;
        p->n_ctx = v;
        return 1;
    }
    if (!strcmp(flag, "--ubatch") || !strcmp(flag, "-ub")) {
        if (!kvt_args_int(a, flag, 1, 1 << 16, &v)) return -1;
        p->n_ubatch = v;
        return 1;
    }
    if (!strcmp(flag, "--kv-block")) {
        if (!kvt_args_int(a, flag, 1, 1 << 20, &v)) return -1;
        p->kv_block = v;
        return 1;
    }
    if (!strcmp(flag, "--kv-type")) {
        const char *s = kvt_args_value(a, flag);
        if (!s) return -1;
        if (!strcmp(s, "f16")) p->kv_type = KVT_TYPE_F16;
        else if (!strcmp(s, "f32")) p->kv_type = KVT_TYPE_F32;
        else {
            fprintf(stderr, "kvtier %s: --kv-type: '%s' is not f16 or f32\n", a->cmd, s);
            return -1;
        }
        return 1;
    }
    return 0;
}

int32_t *cli_tokenize(const char *cmd, const kvt_tokenizer *tok, const char *text, size_t len, bool add_special,
                      bool parse_special, int64_t *n) {
    kvt_err err = {0};
    int64_t cap = (int64_t)len + 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "kvtier %s: out of memory\n", cmd);
        return NULL;
    }
    int64_t k = kvt_tokenize(tok, text, len, add_special, parse_special, ids, cap, &err);
    if (k > cap) {
        int32_t *b = realloc(ids, (size_t)k * sizeof *ids);
        if (!b) {
            free(ids);
            fprintf(stderr, "kvtier %s: out of memory\n", cmd);
            return NULL;
        }
        ids = b;
        k = kvt_tokenize(tok, text, len, add_special, parse_special, ids, k, &err);
    }
    if (k < 0) {
        fprintf(stderr, "kvtier %s: %s\n", cmd, err.msg);
        free(ids);
        return NULL;
    }
    *n = k;
    return ids;
}
