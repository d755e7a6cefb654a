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

int64_t kvt_perplexity_window(int64_t n_ctx, int64_t stride) {
    return stride > 0 ? (n_ctx + stride / 2 + 255) / 256 * 256 : n_ctx;
}

kvt_status kvt_perplexity(kvt_context *ctx, const int32_t *ids, int64_t n_tokens, int64_t n_ctx, int32_t bos,
                          int64_t max_chunks, kvt_ppl_progress progress, void *user, kvt_ppl_result *out,
                          kvt_err *err) {
    kvt_ppl_params p = {.n_ctx = n_ctx, .bos = bos, .max_chunks = max_chunks, .progress = progress, .user = user};
    return kvt_perplexity_ex(ctx, ids, n_tokens, &p, out, err);
}

kvt_status kvt_perplexity_ex(kvt_context *ctx, const int32_t *ids, int64_t n_tokens, const kvt_ppl_params *p,
                             kvt_ppl_result *out, kvt_err *err) {
    memset(out, 0, sizeof *out);
    const int64_t stride = p->stride;
    if (p->n_ctx < 4) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "perplexity needs chunks of at least 4 tokens");
    if (stride < 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "perplexity stride %lld is negative", (long long)stride);
    const int64_t n_ctx = kvt_perplexity_window(p->n_ctx, stride);
    // the first scored position, whose logits predict the token after it
    const int64_t first = stride ? n_ctx - stride - 1 : n_ctx / 2;
    if (first < 0) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "a stride of %lld scores more positions than a window of %lld holds",
                          (long long)stride, (long long)n_ctx);
    }
    if (!p->short_text && n_tokens < 2 * n_ctx) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "text has %lld tokens; at least 2*CTX = %lld are needed",
                          (long long)n_tokens, (long long)(2 * n_ctx));
    }
    if (n_tokens < n_ctx + (stride ? 1 : 0)) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "%lld tokens do not fill a chunk of %lld", (long long)n_tokens,
                          (long long)n_ctx);
    }
    if (n_ctx > kvt_context_n_ctx(ctx)) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "chunk of %lld tokens exceeds the context size %lld", (long long)n_ctx,
                          (long long)kvt_context_n_ctx(ctx));
    }
    const int32_t n_vocab = kvt_context_model(ctx)->hp.n_vocab;
    // disjoint chunks, or (stride) windows every `stride` tokens as long as one ends inside the text
    int64_t n_chunks = stride ? (n_tokens - n_ctx + stride - 1) / stride : n_tokens / n_ctx;
    if (p->max_chunks > 0 && p->max_chunks < n_chunks) n_chunks = p->max_chunks;
    // as llama-perplexity: its strided windows keep their first token (its BOS replacement comes after the decode)
    const int32_t bos = stride ? -1 : p->bos;
    int32_t *chunk = malloc((size_t)n_ctx * sizeof *chunk);
    if (!chunk) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    kvt_status st = KVT_OK;
    for (int64_t c = 0; c < n_chunks; c++) {
        const int32_t *src = ids + c * (stride ? stride : n_ctx);
        memcpy(chunk, src, (size_t)n_ctx * sizeof *chunk);
        if (bos >= 0) chunk[0] = bos;
        kvt_context_truncate(ctx, 0);
        const float *logits = NULL;
        if (kvt_context_sparse(ctx)) { // sparse attention acts on decode: the scored positions are decoded token by token
            if ((st = kvt_decode(ctx, chunk, first + 1, false, err))) break;
            for (int64_t j = first; j < n_ctx - 1 && !st; j++) {
                if (j > first && (st = kvt_decode(ctx, chunk + j, 1, false, err))) break;
                const float *row = kvt_context_logits(ctx);
                score(out, -log_softmax_at(row, n_vocab, src[j + 1]));
                if (p->row) st = p->row(p->row_user, c, j - first, row, src[j + 1], err);
            }
            if (st) break;
        } else {
            if ((st = kvt_decode(ctx, chunk, n_ctx, true, err))) break;
            logits = kvt_context_logits(ctx);
            for (int64_t j = first; j < n_ctx - 1 && !st; j++) {
                score(out, -log_softmax_at(logits + j * n_vocab, n_vocab, src[j + 1]));
                if (p->row) st = p->row(p->row_user, c, j - first, logits + j * n_vocab, src[j + 1], err);
            }
            if (st) break;
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
        if (p->progress) p->progress(p->user, c, out->ppl);
    }
    if (!st && out->n_scored > 1) { // as llama-perplexity: the sample variance of the NLL, its mean's error times ppl
        const double n = (double)out->n_scored, mean = out->nll / n, var = out->nll2 / n - mean * mean;
        out->ppl_err = var > 0 ? sqrt(var / (n - 1)) * out->ppl : 0.0;
    }
    free(chunk);
    return st;
}
