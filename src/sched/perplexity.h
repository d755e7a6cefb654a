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

#endif
