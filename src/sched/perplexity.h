// perplexity.h - perplexity as llama.cpp's llama-perplexity computes it.
//
// The token stream is split into chunks of n_ctx tokens (n_tokens / n_ctx of
// them); each chunk starts from an empty cache with its first token replaced
// by `bos` (when bos >= 0), and the negative log-likelihood of every token
// predicted from positions [n_ctx/2, n_ctx-1) is averaged over all chunks.
// With sparse decode attention on (kvt_context_sparse), each chunk's first half is prefilled and the scored
// half decoded one token at a time (sparse attention acts on decode only).
#ifndef KVT_PERPLEXITY_H
#define KVT_PERPLEXITY_H

#include <stdbool.h>
#include <stdint.h>

#include "../exec/context.h"

typedef struct {
    double ppl;
    double nll;        // total negative log-likelihood (nats)
    int64_t n_chunks;
    int64_t n_scored;  // predictions scored
    double nll2;       // sum of the squared per-prediction negative log-likelihoods
    double ppl_err;    // llama-perplexity's "+/-": ppl times the standard error of the mean NLL (0: under 2 predictions)
} kvt_ppl_result;

// Called after each chunk with the running estimate (may be NULL).
typedef void (*kvt_ppl_progress)(void *user, int64_t chunk, double ppl);

// ctx must have n_ctx >= chunk tokens. max_chunks <= 0: all.
kvt_status kvt_perplexity(kvt_context *ctx, const int32_t *ids, int64_t n_tokens, int64_t n_chunk_tokens, int32_t bos,
                          int64_t max_chunks, kvt_ppl_progress progress, void *user, kvt_ppl_result *out,
                          kvt_err *err);

// Called for every scored position: `row` counts from the chunk's first scored position, `logits` are the
// model's [n_vocab] there, `next` the token they predict. A status other than KVT_OK stops the run with it.
typedef kvt_status (*kvt_ppl_row)(void *user, int64_t chunk, int64_t row, const float *logits, int32_t next, kvt_err *err);

typedef struct {
    int64_t n_ctx;          // chunk size (-c)
    int32_t bos;            // replaces each chunk's first token when >= 0
    int64_t max_chunks;     // <= 0: all
    // > 0: llama-perplexity's --ppl-stride: windows of kvt_perplexity_window(n_ctx, stride) tokens starting every
    // `stride` tokens (as many as (n_tokens - window + stride - 1) / stride), the last `stride` predictions of each
    // scored, the first token kept as it is (llama's strided path replaces it with BOS only after the decode)
    int64_t stride;
    bool short_text;        // accept fewer than 2 windows of tokens (the tokens of a base file: one chunk is enough)
    kvt_ppl_row row;
    void *row_user;
    kvt_ppl_progress progress;
    void *user;
} kvt_ppl_params;

// Tokens per window: n_ctx, or with a stride the context llama-perplexity makes for it and then reads back as
// its window: n_ctx + stride/2 rounded up to a multiple of 256 (llama.cpp pads every context so; as it runs
// with -b <= -c; a larger -b multiplies n_ctx by b/c first).
int64_t kvt_perplexity_window(int64_t n_ctx, int64_t stride);

// kvt_perplexity with a stride, a per-position hook and the 2*CTX rule optional. ctx must hold a window.
kvt_status kvt_perplexity_ex(kvt_context *ctx, const int32_t *ids, int64_t n_tokens, const kvt_ppl_params *p,
                             kvt_ppl_result *out, kvt_err *err);

#endif
