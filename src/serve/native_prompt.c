// native_prompt.c - the token ids of a /completion prompt that mixes strings and token ids (native.h). Apart from
// native.c, which the request fuzz target links without the tokenizer.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "native.h"

int32_t *kvt_native_prompt_ids(const struct kvt_native_ext *x, const kvt_tokenizer *tok, int64_t *n, kvt_api_error *e) {
    const int32_t n_vocab = kvt_tokenizer_n_vocab(tok);
    int64_t total = 0, cap = 0;
    int32_t *ids = NULL;
    for (size_t i = 0; i < x->n_pieces; i++) {
        const kvt_native_piece *pc = &x->pieces[i];
        if (!pc->text && pc->id >= n_vocab) {
            free(ids);
            kvt_api_errorf(e, 400, NULL, "prompt", "prompt[%zu] = %d is not a token id (0..%d)", i, pc->id, n_vocab - 1);
            return NULL;
        }
        kvt_err err = {0};
        const size_t len = pc->text ? strlen(pc->text) : 0;
        const bool add_special = i == 0; // BOS as the model asks only before a first string (as llama-server)
        int64_t k = pc->text ? kvt_tokenize(tok, pc->text, len, add_special, true, NULL, 0, &err) : 1;
        if (k < 0) {
            free(ids);
            kvt_api_errorf(e, 400, NULL, "prompt", "cannot tokenize prompt[%zu]: %s", i, err.msg);
            return NULL;
        }
        if (total + k + 1 > cap) {
            cap = 2 * (total + k + 1);
            int32_t *g = realloc(ids, (size_t)cap * sizeof *ids);
            if (!g) {
                free(ids);
                kvt_api_errorf(e, 500, "server_error", NULL, "out of memory for the prompt");
                return NULL;
            }
            ids = g;
        }
        if (pc->text) kvt_tokenize(tok, pc->text, len, add_special, true, ids + total, k, &err);
        else ids[total] = pc->id;
        total += k;
    }
    *n = total;
    return ids;
}
