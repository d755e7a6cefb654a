// kld.h - llama-perplexity's base log-probability file (--kl-divergence-base) and the statistics of
// --kl-divergence, which compares a model's predictions against the base file's.
//
// The file (little-endian, the layout llama-perplexity writes and reads, so either program reads the other's):
//   offset 0   "_logits_"                      8-byte magic
//   offset 8   int32 n_ctx                     the chunk size
//   offset 12  int32 n_vocab
//   offset 16  int32 n_chunk
//   offset 20  int32 tokens[n_chunk * n_ctx]   the text's ids (each chunk's first as tokenized, not the BOS run)
//   then, chunk after chunk, one row per scored position j in [n_ctx/2, n_ctx - 1), each row
//   nv = 2*((n_vocab + 1)/2) + 4 uint16 words: float scale, float min_log_prob, then q[n_vocab] (and one zero
//   word when n_vocab is odd); log p(i) = scale * q[i] + min_log_prob, the logits quantized to 16 bits over the
//   16 nats below the largest (anything lower is q = 0).
// Every reader check names the file, the field and its byte offset; the library only returns a status.
#ifndef KVT_KLD_H
#define KVT_KLD_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"

#define KVT_KLD_MAGIC "_logits_"
#define KVT_KLD_HEADER_BYTES 20

// uint16 words of one row of n_vocab log-probabilities
int64_t kvt_kld_row_words(int32_t n_vocab);

// ---- writing (--kl-divergence-base FILE) ----

typedef struct kvt_kld_writer kvt_kld_writer;

// Creates PATH.tmp and writes the header and the n_chunk*n_ctx tokens; kvt_kld_writer_finish renames it to
// path once every row is in, so that path never holds a partial file.
kvt_status kvt_kld_writer_open(const char *path, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const int32_t *tokens,
                               kvt_kld_writer **out, kvt_err *err);
// Appends the row of one scored position from its logits[n_vocab].
kvt_status kvt_kld_writer_row(kvt_kld_writer *w, const float *logits, kvt_err *err);
// keep: checks that every row was written, closes and renames; !keep (or any failure): removes PATH.tmp.
// Frees w in every case.
kvt_status kvt_kld_writer_finish(kvt_kld_writer *w, bool keep, kvt_err *err);

// ---- reading (--kl-divergence) ----

typedef struct kvt_kld_base kvt_kld_base;

// Opens and checks a base file: magic, n_ctx >= 4, n_vocab (== expect_vocab when expect_vocab > 0), n_chunk >= 1,
// the size against the header (truncated or trailing bytes refused), every token in [0, n_vocab). KVT_ERR_FORMAT
// naming path, field and offset; KVT_ERR_IO; KVT_ERR_INVALID_ARG for another vocabulary than expect_vocab.
kvt_status kvt_kld_base_open(const char *path, int32_t expect_vocab, kvt_kld_base **out, kvt_err *err);
int32_t kvt_kld_base_n_ctx(const kvt_kld_base *b);
int32_t kvt_kld_base_n_vocab(const kvt_kld_base *b);
int32_t kvt_kld_base_n_chunk(const kvt_kld_base *b);
const int32_t *kvt_kld_base_tokens(const kvt_kld_base *b); // n_chunk * n_ctx
// Reads row `row` (0 = position n_ctx/2) of chunk `chunk` into words[kvt_kld_row_words(n_vocab)]; checks that
// scale is finite and >= 0 and min_log_prob finite (KVT_ERR_FORMAT naming the offset).
kvt_status kvt_kld_base_row(kvt_kld_base *b, int64_t chunk, int64_t row, uint16_t *words, kvt_err *err);
void kvt_kld_base_close(kvt_kld_base *b);

// ---- statistics ----

typedef struct {
    double sum_nll, sum_nll2;           // the compared model's negative log-likelihood of each next token
    double sum_nll_base, sum_nll_base2; // the base file's
    double sum_nll_nll_base;
    double sum_kld, sum_kld2;           // KL(base || model) per position, over the base entries above -16 nats
    double sum_p_diff, sum_p_diff2, sum_p_diff4; // p(next) - p_base(next)
    float max_p_diff;
    int64_t n_same_top, count;
    float *kld_values, *p_diff_values; // [count] of cap, for the percentiles
    int64_t cap;
} kvt_kld_stats;

// Room for n scored positions (KVT_ERR_NOMEM); kvt_kld_stats_free releases it.
kvt_status kvt_kld_stats_init(kvt_kld_stats *s, int64_t n, kvt_err *err);
void kvt_kld_stats_free(kvt_kld_stats *s);
// One position: the model's logits[n_vocab], the base row (kvt_kld_base_row), the token that follows.
void kvt_kld_stats_add(kvt_kld_stats *s, const float *logits, const uint16_t *base_row, int32_t n_vocab, int32_t next);

typedef struct {
    double val, err;
} kvt_kld_est;

typedef struct {
    int64_t count;
    kvt_kld_est ppl, ppl_base, ln_ratio, ratio, diff; // PPL(Q), PPL(base), ln(PPL(Q)/PPL(base)), PPL(Q)/PPL(base), PPL(Q)-PPL(base)
    double cor;                                       // Cor(ln PPL(Q), ln PPL(base))
    kvt_kld_est kld, p_diff, p_rms, same_top;         // Δp RMS and same top as fractions
    // KLD: max, 99.9, 99, 95, 90, median, 10, 5, 1, 0.1 %, min
    double kld_q[11];
    // Δp: max, 99.9, 99, 95, 90, 75, median, 25, 10, 5, 1, 0.1 %, min
    double p_diff_q[13];
} kvt_kld_summary;

// The figures llama-perplexity prints (its uncertainties: 0 below 11 positions; the covariance 0 below 10).
// Sorts the value arrays.
void kvt_kld_summarize(kvt_kld_stats *s, kvt_kld_summary *out);

#endif
