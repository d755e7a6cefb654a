#include "grammar_tok.h"

#include <stdlib.h>

#include "../model/tokenizer.h"

kvt_status kvt_grammar_vocab_from_tokenizer(const kvt_tokenizer *t, kvt_grammar_vocab **out, kvt_err *err) {
    *out = NULL;
    const int32_t n = kvt_tokenizer_n_vocab(t);
    if (n <= 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "grammar: the tokenizer has no tokens");
    size_t total = 0; // bytes of every piece
    for (int32_t i = 0; i < n; i++) total += (size_t)kvt_token_to_piece_ex(t, i, NULL, 0, 0, true);
    char *buf = malloc(total + 1);                          // the pieces back to back
    const char **pieces = malloc((size_t)n * sizeof *pieces); // [n] into buf
    size_t *lens = malloc((size_t)n * sizeof *lens);          // [n]
    bool *eog = malloc((size_t)n * sizeof *eog);              // [n]
    kvt_status st = KVT_OK;
    if (!buf || !pieces || !lens || !eog) {
        st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the texts of %d tokens (%zu bytes)", (int)n, total);
    } else {
        size_t at = 0;
        for (int32_t i = 0; i < n; i++) {
            const int64_t len = kvt_token_to_piece_ex(t, i, buf + at, (int64_t)(total - at), 0, true);
            pieces[i] = buf + at;
            lens[i] = (size_t)len;
            eog[i] = kvt_token_is_eog(t, i);
            at += (size_t)len;
        }
        st = kvt_grammar_vocab_init(n, pieces, lens, eog, out, err);
    }
    free(buf);
    free(pieces);
    free(lens);
    free(eog);
    return st;
}

static int32_t lookup(void *ctx, const char *text, size_t len) { return kvt_token_lookup(ctx, text, len); }

kvt_status kvt_grammar_parse_tok(const char *src, size_t len, const kvt_tokenizer *t, kvt_grammar **out, kvt_err *err) {
    kvt_grammar_params p = kvt_grammar_params_default();
    if (t) {
        p.token_lookup = lookup;
        p.token_lookup_ctx = (void *)t;
    }
    return kvt_grammar_parse(src, len, "root", &p, out, err);
}
