// fuzz_tokenizer.c - fuzz target for the tokenizers: arbitrary bytes as text, tokenized with the
// fixed vocabulary of KVT_FUZZ_VOCAB (a GGUF: SentencePiece `llama` or byte-level BPE `gpt2`
// vocabulary; make fuzz runs it once per vocabulary), then detokenized piece by piece and whole.
// The first input byte picks add_special / parse_special; the rest is the text.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/gguf/gguf.h"
#include "../src/model/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kvt_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *path = getenv("KVT_FUZZ_VOCAB");
    kvt_gguf *g;
    kvt_err err;
    if (!path || kvt_gguf_open(path, &g, &err) != KVT_OK) {
        fprintf(stderr, "fuzz_tokenizer: set KVT_FUZZ_VOCAB to a vocabulary GGUF (%s)\n", path ? err.msg : "unset");
        exit(2);
    }
    if (kvt_tokenizer_init(g, &g_tok, &err) != KVT_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
        exit(2);
    }
    kvt_gguf_free(g);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const bool add_special = data[0] & 1, parse_special = data[0] & 2;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    int64_t cap = (int64_t)len + 4;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    kvt_err err;
    int64_t n = kvt_tokenize(g_tok, text, len, add_special, parse_special, ids, cap, &err);
    if (n > cap) { // more ids than bytes + 4: possible with special tokens; call again as documented
        cap = n;
        ids = realloc(ids, (size_t)cap * sizeof *ids);
        n = kvt_tokenize(g_tok, text, len, add_special, parse_special, ids, cap, &err);
    }
    if (n > 0) {
        const int32_t nv = kvt_tokenizer_n_vocab(g_tok);
        for (int64_t i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= nv) abort(); // an id outside the vocabulary
            char piece[256];
            kvt_token_to_piece(g_tok, ids[i], piece, sizeof piece);
        }
        for (int mode = 0; mode < 2; mode++) {
            const int64_t need = kvt_detokenize_ex(g_tok, ids, n, NULL, 0, mode, mode);
            if (need > 0) {
                char *out = malloc((size_t)need);
                if (kvt_detokenize_ex(g_tok, ids, n, out, need, mode, mode) != need) abort(); // same length twice
                free(out);
            }
        }
    }
    free(ids);
    return 0;
}
