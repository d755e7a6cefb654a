#include "perplexity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../exec/numerics.h"

// log p(tok) under softmax(logits), summed in double
static double log_softmax_at(const float *logits, int32_t n, int32_t tok) {
    float mx = logits[0];
    for (int32_t i = 1; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)(logits[i] - mx));
    return (double)(logits[tok] - mx) - log(sum);
}

// one scored prediction into the running sums
static void score(kvt_ppl_result *out, double nll) {
    out->nll += nll;
    out->nll2 += nll * nll;
    out->n_scored++;
}

kvt_status kvt_perplexity(kvt_context *ctx, const int32_t *ids, int64_t n_tokens, int64_t n_ctx, int32_t bos,
                          int64_t max_chunks, kvt_ppl_progress progress, void *user, kvt_ppl_result *out,
                          kvt_err *err) {
    memset(out, 0, sizeof *out);
    if (n_ctx < 4) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "perplexity needs chunks of at least 4 tokens");
    if (n_tokens < 2 * n_ctx) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "text has %lld tokens; at least 2*CTX = %lld are needed",
                          (long long)n_tokens, (long long)(2 * n_ctx));
    }
    if (n_ctx > kvt_context_n_ctx(ctx)) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "chunk of %lld tokens exceeds the context size %lld", (long long)n_ctx,
                          (long long)kvt_context_n_ctx(ctx));
    }
    const int32_t n_vocab = kvt_context_model(ctx)->hp.n_vocab;
    int64_t n_chunks = n_tokens / n_ctx;
    if (max_chunks > 0 && max_chunks < n_chunks) n_chunks = max_chunks;
    int32_t *chunk = malloc((size_t)n_ctx * sizeof *chunk);
    if (!chunk) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    const int64_t first = n_ctx / 2;
    kvt_status st = KVT_OK;
    for (int64_t c = 0; c < n_chunks; c++) {
        memcpy(chunk, ids + c * n_ctx, (size_t)n_ctx * sizeof *chunk);
        if (bos >= 0) chunk[0] = bos;
        kvt_context_truncate(ctx, 0);
        const float *logits = NULL;
        if (kvt_context_sparse(ctx)) { // sparse attention acts on decode: the scored half is decoded token by token
            if ((st = kvt_decode(ctx, chunk, first + 1, false, err))) break;
            for (int64_t j = first; j < n_ctx - 1 && !st; j++) {
                if (j > first && (st = kvt_decode(ctx, chunk + j, 1, false, err))) break;
                score(out, -log_softmax_at(kvt_context_logits(ctx), n_vocab, ids[c * n_ctx + j + 1]));
            }
            if (st) break;
        } else {
            if ((st = kvt_decode(ctx, chunk, n_ctx, true, err))) break;
            logits = kvt_context_logits(ctx);
            for (int64_t j = first; j < n_ctx - 1; j++) {
                score(out, -log_softmax_at(logits + j * n_vocab, n_vocab, ids[c * n_ctx + j + 1]));
            }
        }
        if (!isfinite(out->nll)) { // a non-finite logit makes its log-softmax NaN or infinite
            for (int64_t j = first; logits && j < n_ctx - 1 && !st; j++) {
                char what[96];
                snprintf(what, sizeof what, "position %lld of perplexity chunk %lld", (long long)j, (long long)c);
                st = kvt_check_logits(kvt_context_model(ctx), logits + j * n_vocab, n_vocab, what, err);
            }
            if (!st) st = kvt_errorf(err, KVT_ERR_FORMAT, "perplexity chunk %lld: the log-likelihood is not finite", (long long)c);
            break;
        }
        out->n_chunks = c + 1;
        out->ppl = exp(out->nll / (double)out->n_scored);
        if (progress) progress(user, c, out->ppl);
    }
    if (!st && out->n_scored > 1) { // as llama-perplexity: the sample variance of the NLL, its mean's error times ppl
        const double n = (double)out->n_scored, mean = out->nll / n, var = out->nll2 / n - mean * mean;
        out->ppl_err = var > 0 ? sqrt(var / (n - 1)) * out->ppl : 0.0;
    }
    free(chunk);
    return st;
}
