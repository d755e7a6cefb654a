// dry.h - llama.cpp's DRY ("don't repeat yourself") penalty: a token that would extend a repetition of the recent
// context by more than an allowed length loses multiplier x base ^ (length - allowed) from its logit.
//
// Sequence breakers (strings such as "\n", ":", "\"", "*", llama.cpp's default) end a repetition: a token whose text
// holds a breaker stops the scan there, as does the token sequence whose texts spell one across token boundaries
// (a token whose text ends with the breaker's first bytes, followed by the tokenization of the rest, at most 20
// tokens). kvt_dry_breakers_init builds that table from the strings once (it reads every token's text, O(n_vocab)
// per string); each sampler holds a reference (sampler.h, kvt_sampler_params.dry_breakers), so one table serves any
// number of samplers and requests, and outlives its creator's kvt_dry_breakers_free while a sampler uses it.
//
// kvt_dry_penalties is llama.cpp's algorithm step for step (Koboldcpp's, by pi6am): the last restart of the window bounds
// the repetition; a reversed Z-algorithm gives, for each position of the window, the length of the suffix of the
// window that ends there; the token after each such match is penalized by the longest match it would extend; a token
// that is a breaker on its own is never penalized. O(window) per draw plus one pass over the touched tokens.
#ifndef KVT_DRY_H
#define KVT_DRY_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"

struct kvt_tokenizer;

typedef struct kvt_dry_breakers kvt_dry_breakers;

// Builds the table for strings strs[i] of lens[i] bytes (i < n). As llama.cpp: an empty string is skipped, a string
// longer than 40 bytes is cut to 40. n == 0 (or only empty strings): a valid, empty table (no breaker).
// Returns KVT_ERR_NOMEM, or KVT_ERR_INVALID_ARG when the tokenizer cannot tokenize a tail (named). *out owned by the
// caller (kvt_dry_breakers_free).
kvt_status kvt_dry_breakers_init(const struct kvt_tokenizer *t, const char *const *strs, const size_t *lens, int32_t n,
                                 kvt_dry_breakers **out, kvt_err *err);
// A table from token sequences directly (llama.cpp's test entry point): seqs[i] of lens[i] tokens, the first the
// head. For unit tests and for callers that already hold tokens.
kvt_status kvt_dry_breakers_from_tokens(const int32_t *const *seqs, const int32_t *lens, int32_t n,
                                        kvt_dry_breakers **out, kvt_err *err);
// Drops a reference (the creator's, or one of kvt_dry_breakers_ref); the last frees the table. Thread-safe.
void kvt_dry_breakers_free(kvt_dry_breakers *b);
// A new reference to b (NULL: NULL).
kvt_dry_breakers *kvt_dry_breakers_ref(const kvt_dry_breakers *b);
// Entries of the table (head token and tail), for tests and logs.
int32_t kvt_dry_breakers_count(const kvt_dry_breakers *b);

typedef struct {
    float multiplier;       // 0: off
    float base;             // < 1: off (llama-server replaces it by 1.75 before)
    int32_t allowed_length; // a repetition up to this long is free
    int32_t last_n;         // the window: the last last_n tokens accepted (0: off)
} kvt_dry_params;

// Per-sampler state: the window ring and the scratch of one draw. n_vocab bounds the token ids.
typedef struct kvt_dry kvt_dry;
// NULL breakers: no breaker; else d holds a reference until kvt_dry_free. KVT_ERR_NOMEM.
kvt_status kvt_dry_init(const kvt_dry_params *p, const kvt_dry_breakers *breakers, int32_t n_vocab, kvt_dry **out,
                        kvt_err *err);
void kvt_dry_free(kvt_dry *d);
// True when the parameters make DRY act (multiplier != 0, base >= 1, last_n > 0).
int kvt_dry_params_on(const kvt_dry_params *p);
// Records an accepted token (prompt or generated).
void kvt_dry_accept(kvt_dry *d, int32_t token);
// The penalties of the next draw: *tokens[i] loses (*penalties)[i] from its logit (i < the count returned; each token
// once; arrays owned by d, valid until the next call). 0 when nothing is penalized.
int32_t kvt_dry_penalties(kvt_dry *d, const int32_t **tokens, const float **penalties);

#endif
