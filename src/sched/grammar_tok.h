// grammar_tok.h - grammars (grammar.h) against a model's tokenizer: the vocabulary's texts for the matcher, and
// parsing with <|text|> token references looked up in the vocabulary.
#ifndef KVT_GRAMMAR_TOK_H
#define KVT_GRAMMAR_TOK_H

#include "../base/status.h"
#include "grammar.h"

struct kvt_tokenizer;

// Every token's text as llama.cpp's grammar sees it (special tokens rendered as their text) and whether it ends
// generation (kvt_token_is_eog). O(n_vocab). *out owned by the caller (kvt_grammar_vocab_free). KVT_ERR_NOMEM.
kvt_status kvt_grammar_vocab_from_tokenizer(const struct kvt_tokenizer *t, kvt_grammar_vocab **out, kvt_err *err);

// kvt_grammar_parse of src[0..len) with root "root", <|text|> references resolved by t's vocabulary (t NULL: refused).
kvt_status kvt_grammar_parse_tok(const char *src, size_t len, const struct kvt_tokenizer *t, kvt_grammar **out,
                                 kvt_err *err);

#endif
