// grammar.h - GBNF grammars (llama.cpp's grammar format) and the matcher that constrains sampling to them.
//
// A grammar is a set of rules `name ::= alternatives` over literals ("..."), character classes ([a-z], [^"\\], .),
// rule references, groups and repetitions (*, +, ?, {m}, {m,}, {m,n}), with llama.cpp's escapes and comments, and
// token references (<[id]>, !<[id]>, <|text|> looked up through kvt_grammar_params.token_lookup). The same text
// defines the same language as in llama.cpp (its grammars/README.md), so a llama-server user's grammar, and a
// JSON schema turned into one (json_schema.h), constrain kvtier's sampling to exactly the same strings.
//
// Compilation (kvt_grammar_parse) checks everything a grammar can get wrong before any token is drawn: syntax (the
// line and column named), undefined rules, left recursion (named), repetition bounds (max_repeat). The compiled
// grammar is immutable and shared by reference (one per request, any number of sequences).
//
// The matcher (kvt_grammar_state) is a set of parse stacks, each a path through the rules, as llama.cpp's: a byte
// string is accepted when, code point by code point, some stack matches it; a token whose bytes end inside a UTF-8
// sequence is accepted when the sequence can still be completed to a code point some stack takes. An
// end-of-generation token is allowed only when some stack is empty (the root is complete). The number of stacks is
// bounded (kvt_grammar_params.max_stacks): an ambiguous grammar that would exceed it fails with a status, never by
// exhausting memory.
//
// Limits and choices (grammar_parse.c, grammar_match.c):
// - Groups nest at most 512 deep (deeper: a syntax error); the elements after expansion are bounded by
//   64 x max_rules; a NUL byte in the text is a syntax error. {m,n} with n < m is a syntax error (llama.cpp loops).
// - One matcher call holds at most 512 x max_stacks stack nodes and set entries (its working memory), and one
//   expansion of a stack visits at most 8 x max_stacks + (grammar elements) stacks; past either, the max_stacks
//   status. Left recursion is llama.cpp's check (a rule reached first through rules with an empty alternative).
// - Text is decoded as llama.cpp's decode_utf8: the bytes after a lead byte are taken whatever they are within one
//   piece, a pending sequence must go on with continuation bytes, a continuation byte where a character starts is
//   invalid. A piece is cut at its first NUL (as llama.cpp's C strings); accept_bytes and match reject a NUL.
// - Token references (<[id]>, !<[id]>, <|text|>) match a whole token by id through kvt_grammar_state_filter and
//   _accept (a token whose text has at least one full code point; not while a UTF-8 sequence is pending); raw bytes
//   (accept_bytes, match) never match them, so a text reaching one is rejected there.
#ifndef KVT_GRAMMAR_H
#define KVT_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"

typedef struct {
    int32_t max_repeat;  // largest m or n of {m,n} and the bound on the rules a repetition copies (llama.cpp: 2000)
    int64_t max_stacks;  // most parse stacks alive at once in a matcher (default 10000): beyond, a status
    int64_t max_rules;   // most rules after repetitions are expanded (default 100000)
    // <|text|> token references: returns the id of the token whose text is exactly text[0..len), or -1. NULL: such
    // a reference is refused at parse time ("no vocabulary to look up <|...|>"). text is the whole reference, angle
    // brackets included ("<|im_end|>"; as llama.cpp, any <...> that is not <[id]> is looked up).
    int32_t (*token_lookup)(void *ctx, const char *text, size_t len);
    void *token_lookup_ctx;
} kvt_grammar_params;

kvt_grammar_params kvt_grammar_params_default(void);

typedef struct kvt_grammar kvt_grammar;

// Compiles src[0..len) (len bytes; no NUL needed) with root rule `root` (NULL: "root"). p NULL: the defaults.
// KVT_ERR_INVALID_ARG (syntax: "grammar line L column C: expecting ..."; "undefined rule 'x'"; "left recursion in
// rule 'x'"; "no rule 'root'"; a bound over p's), KVT_ERR_NOMEM. *out owned by the caller (kvt_grammar_free).
kvt_status kvt_grammar_parse(const char *src, size_t len, const char *root, const kvt_grammar_params *p,
                             kvt_grammar **out, kvt_err *err);
// A new reference (NULL: NULL). Thread-safe.
kvt_grammar *kvt_grammar_ref(const kvt_grammar *g);
// Drops a reference; the last frees. Thread-safe.
void kvt_grammar_free(kvt_grammar *g);
// Rules after expansion (for tests and logs).
int64_t kvt_grammar_n_rules(const kvt_grammar *g);

// The token texts the matcher checks, decoded once per vocabulary (code points and a trailing partial UTF-8 sequence
// per token) and shared by reference between samplers.
typedef struct kvt_grammar_vocab kvt_grammar_vocab;

// pieces[i] of lens[i] bytes: token i's text as llama.cpp's grammar sees it (llama_token_to_piece with special
// tokens rendered: kvt_token_to_piece_ex(t, i, .., 0, true)); an empty piece is never allowed (a token with no
// text cannot advance a grammar). eog[i]: token i ends generation. Both copied. KVT_ERR_INVALID_ARG (n_vocab <= 0),
// KVT_ERR_NOMEM.
kvt_status kvt_grammar_vocab_init(int32_t n_vocab, const char *const *pieces, const size_t *lens, const bool *eog,
                                  kvt_grammar_vocab **out, kvt_err *err);
kvt_grammar_vocab *kvt_grammar_vocab_ref(const kvt_grammar_vocab *v);
void kvt_grammar_vocab_free(kvt_grammar_vocab *v);
int32_t kvt_grammar_vocab_n(const kvt_grammar_vocab *v);

// One sequence's matcher. Holds a reference to the grammar.
typedef struct kvt_grammar_state kvt_grammar_state;

// At the start of the root rule. KVT_ERR_INVALID_ARG when the start already exceeds max_stacks; KVT_ERR_NOMEM.
kvt_status kvt_grammar_state_init(const kvt_grammar *g, kvt_grammar_state **out, kvt_err *err);
void kvt_grammar_state_free(kvt_grammar_state *s);
// A copy with its own stacks (beams, speculative checks). KVT_ERR_NOMEM.
kvt_status kvt_grammar_state_clone(const kvt_grammar_state *s, kvt_grammar_state **out, kvt_err *err);

// allowed[i] = 1 when token ids[i] may come next, else 0 (i < n): an end-of-generation token when the state is
// complete; any other token when its piece is non-empty and continues some stack (a trailing partial UTF-8 sequence
// allowed when it can still be completed to a code point a stack takes). Ids outside the vocabulary: 0.
// The state is not changed. KVT_ERR_INVALID_ARG when checking a token would exceed max_stacks; KVT_ERR_NOMEM.
kvt_status kvt_grammar_state_filter(const kvt_grammar_state *s, const kvt_grammar_vocab *v, const int32_t *ids,
                                    int64_t n, uint8_t *allowed, kvt_err *err);
// Advances past token id. An end-of-generation token leaves the state as it is (allowed only when complete). A
// token the state does not allow: KVT_ERR_INVALID_ARG naming it, the state unchanged. KVT_ERR_NOMEM.
kvt_status kvt_grammar_state_accept(kvt_grammar_state *s, const kvt_grammar_vocab *v, int32_t id, kvt_err *err);
// Advances past raw bytes b[0..n) (tests, checking a text against a grammar). Rejected bytes: KVT_ERR_INVALID_ARG
// naming the byte offset, the state unchanged.
kvt_status kvt_grammar_state_accept_bytes(kvt_grammar_state *s, const char *b, size_t n, kvt_err *err);
// True when some stack is empty: the text so far is a complete sentence of the grammar (and no partial UTF-8
// sequence is pending; llama.cpp allows the end with one pending).
bool kvt_grammar_state_complete(const kvt_grammar_state *s);
// True when no stack is left that can take more input, i.e. only the end is allowed (complete and nothing else).
bool kvt_grammar_state_done(const kvt_grammar_state *s);

// Checks a whole text against a grammar from its start: true when the text is a complete sentence (tests, tools).
// KVT_ERR_INVALID_ARG / KVT_ERR_NOMEM as above (a rejected text is `false` with KVT_OK).
kvt_status kvt_grammar_match(const kvt_grammar *g, const char *text, size_t len, bool *complete, kvt_err *err);

#endif
