// fuzz_embd.c - fuzz target for the embeddings endpoints' request handling (src/serve/embed_api.c, embed.c): the
// first input byte picks the pooling (bits 0-1: none, mean, cls, last) and the shape (bit 2: OpenAI's /v1/embeddings,
// else llama-server's /embedding); the rest is the request body, answered by kvt_embd_answer on an embedder of the
// model KVT_FUZZ_MODEL (32 positions, one thread), so valid bodies run the forward pass, the pooling and the
// normalisation too. Every answer must be 200 or 400 with a JSON body (a violation traps). At start a few valid bodies
// are written to $KVT_FUZZ_SEED_DIR (when set) to seed the corpus.
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/model/model.h"
#include "fuzz_model.h"
#include "../src/model/tokenizer.h"
#include "../src/serve/embed.h"
#include "../src/serve/embed_api.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kvt_model *g_model;
static kvt_tokenizer *g_tok;
static kvt_embedder *g_emb[4]; // by pooling: none, mean, cls, last

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    kvt_err err;
    g_model = fuzz_load_model("fuzz_embd");
    if (kvt_tokenizer_init(g_model->gguf, &g_tok, &err)) fuzz_fail("fuzz_embd", "tokenizer", &err);
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 32;
    cp.n_threads = 1;
    const kvt_pooling pools[4] = {KVT_POOL_NONE, KVT_POOL_MEAN, KVT_POOL_CLS, KVT_POOL_LAST};
    for (int i = 0; i < 4; i++)
        if (kvt_embedder_create(g_model, &cp, pools[i], &g_emb[i], &err)) fuzz_fail("fuzz_embd", "embedder", &err);
    static const char *const seeds[] = {
        "\x05{\"input\":\"Once upon a time\"}",
        "\x06{\"input\":[\"a\",\"b c\"],\"encoding_format\":\"base64\"}",
        "\x01{\"content\":[1,2,3],\"embd_normalize\":-1}",
        "\x07{\"input\":[[1,2],[3]],\"model\":\"m\"}",
        "\x00{\"input\":\"x\",\"embd_normalize\":0}",
    };
    fuzz_write_seeds("fuzz_embd", seeds, sizeof seeds / sizeof seeds[0]);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int sel = data[0];
    int status = 0;
    char *out = NULL;
    kvt_embd_answer(g_emb[sel & 3], g_tok, "fuzz", (sel & 4) != 0, (const char *)data + 1, size - 1, NULL, NULL, &status,
                    &out);
    if (!out || (status != 200 && status != 400)) __builtin_trap();
    json_t *j = json_loads(out, 0, NULL);
    if (!j) __builtin_trap();
    json_decref(j);
    free(out);
    return 0;
}
