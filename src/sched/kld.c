// kld.c - the base log-probability file of llama-perplexity and the KL-divergence statistics (kld.h).
#include "kld.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/file.h"

#define KLD_MAX_CTX (1 << 24)
#define KLD_MAX_VOCAB (1 << 24)

int64_t kvt_kld_row_words(int32_t n_vocab) { return 2 * (((int64_t)n_vocab + 1) / 2) + 4; }

static int64_t scored_rows(int32_t n_ctx) { return (int64_t)n_ctx - 1 - n_ctx / 2; }

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ---- writer ----

struct kvt_kld_writer {
    FILE *f;
    char *path, *tmp;
    int32_t n_vocab;
    int64_t rows_left;
    uint16_t *words; // one row
    uint8_t *bytes;  // the row little-endian
};

static kvt_status writer_fail(kvt_kld_writer *w, kvt_err *err, const char *what) {
    return kvt_errorf(err, KVT_ERR_IO, "%s: cannot write %s: %s", w->path, what, strerror(errno ? errno : EIO));
}

kvt_status kvt_kld_writer_open(const char *path, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const int32_t *tokens,
                               kvt_kld_writer **out, kvt_err *err) {
    *out = NULL;
    if (n_ctx < 4 || n_vocab < 1 || n_chunk < 1) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "%s: base file of %d-token chunks, %d entries, %d chunks: nothing to write",
                          path, (int)n_ctx, (int)n_vocab, (int)n_chunk);
    }
    kvt_kld_writer *w = calloc(1, sizeof *w);
    const size_t plen = strlen(path);
    const int64_t nw = kvt_kld_row_words(n_vocab);
    if (w) {
        w->path = malloc(plen + 1);
        w->tmp = malloc(plen + 5);
        w->words = calloc((size_t)nw, sizeof *w->words);
        w->bytes = malloc((size_t)nw * 2);
    }
    if (!w || !w->path || !w->tmp || !w->words || !w->bytes) {
        kvt_kld_writer_finish(w, false, NULL);
        return kvt_errorf(err, KVT_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(w->path, path, plen + 1);
    snprintf(w->tmp, plen + 5, "%s.tmp", path);
    w->n_vocab = n_vocab;
    w->rows_left = (int64_t)n_chunk * scored_rows(n_ctx);
    errno = 0;
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        kvt_status st = kvt_errorf(err, KVT_ERR_IO, "%s: cannot create: %s", w->tmp, strerror(errno));
        kvt_kld_writer_finish(w, false, NULL);
        return st;
    }
    uint8_t head[KVT_KLD_HEADER_BYTES];
    memcpy(head, KVT_KLD_MAGIC, 8);
    put_le32(head + 8, (uint32_t)n_ctx);
    put_le32(head + 12, (uint32_t)n_vocab);
    put_le32(head + 16, (uint32_t)n_chunk);
    bool ok = fwrite(head, 1, sizeof head, w->f) == sizeof head;
    for (int64_t i = 0; ok && i < (int64_t)n_chunk * n_ctx; i++) {
        uint8_t t[4];
        put_le32(t, (uint32_t)tokens[i]);
        ok = fwrite(t, 1, 4, w->f) == 4;
    }
    if (!ok) {
        kvt_status st = writer_fail(w, err, "the header");
        kvt_kld_writer_finish(w, false, NULL);
        return st;
    }
    *out = w;
    return KVT_OK;
}

// round half to even, as the float bias trick of the reference rounds
static uint16_t quantize(float x) {
    float r = nearbyintf(x);
    return r <= 0.0f ? 0 : r >= 65535.0f ? 65535 : (uint16_t)r;
}

kvt_status kvt_kld_writer_row(kvt_kld_writer *w, const float *logits, kvt_err *err) {
    if (w->rows_left <= 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "%s: more rows than the header announced", w->path);
    const int32_t n = w->n_vocab;
    float mx = logits[0], mn = logits[0];
    for (int32_t i = 1; i < n; i++) {
        mx = logits[i] > mx ? logits[i] : mx;
        mn = logits[i] < mn ? logits[i] : mn;
    }
    if (mn < mx - 16.0f) mn = mx - 16.0f; // the 16 nats below the largest are kept
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += expf(logits[i] - mx);
    const float lse = (float)log(sum);
    const float lo = mn - mx - lse, scale = (mx - mn) / 65535.0f;
    const uint32_t sb = f32_bits(scale), lb = f32_bits(lo);
    w->words[0] = (uint16_t)sb, w->words[1] = (uint16_t)(sb >> 16);
    w->words[2] = (uint16_t)lb, w->words[3] = (uint16_t)(lb >> 16);
    uint16_t *q = w->words + 4;
    if (scale > 0.0f) {
        const float inv = 1.0f / scale;
        for (int32_t i = 0; i < n; i++) q[i] = logits[i] > mn ? quantize(inv * (logits[i] - mn)) : 0;
    } else {
        memset(q, 0, (size_t)n * sizeof *q);
    }
    const int64_t nw = kvt_kld_row_words(n);
    for (int64_t i = 0; i < nw; i++) w->bytes[2 * i] = (uint8_t)w->words[i], w->bytes[2 * i + 1] = (uint8_t)(w->words[i] >> 8);
    errno = 0;
    if (fwrite(w->bytes, 2, (size_t)nw, w->f) != (size_t)nw) return writer_fail(w, err, "a row");
    w->rows_left--;
    return KVT_OK;
}

kvt_status kvt_kld_writer_finish(kvt_kld_writer *w, bool keep, kvt_err *err) {
    if (!w) return KVT_OK;
    kvt_status st = KVT_OK;
    if (keep && w->rows_left != 0) {
        st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "%s: %lld rows short of the header", w->path, (long long)w->rows_left);
    }
    if (w->f) {
        errno = 0;
        const bool flushed = fflush(w->f) == 0 && !ferror(w->f);
        const bool closed = fclose(w->f) == 0;
        if (keep && !st && !(flushed && closed)) st = writer_fail(w, err, "the file");
        if (keep && !st && rename(w->tmp, w->path) != 0) {
            st = kvt_errorf(err, KVT_ERR_IO, "%s: cannot rename %s to it: %s", w->path, w->tmp, strerror(errno));
        }
        if (!keep || st) unlink(w->tmp);
    }
    free(w->path);
    free(w->tmp);
    free(w->words);
    free(w->bytes);
    free(w);
    return st;
}

// ---- reader ----

struct kvt_kld_base {
    int fd;
    char *path;
    int32_t n_ctx, n_vocab, n_chunk;
    int32_t *tokens;
    int64_t rows_at; // offset of chunk 0's first row
    uint8_t *bytes;  // one row as read
};

void kvt_kld_base_close(kvt_kld_base *b) {
    if (!b) return;
    if (b->fd >= 0) close(b->fd);
    free(b->path);
    free(b->tokens);
    free(b->bytes);
    free(b);
}

// reads n bytes at off; false at a short read (the size was checked at open: only a file changed under us)
static bool read_at(int fd, void *buf, int64_t n, int64_t off) {
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, (size_t)(n < (1 << 30) ? n : (1 << 30)), (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r, n -= r, off += r;
    }
    return true;
}

kvt_status kvt_kld_base_open(const char *path, int32_t expect_vocab, kvt_kld_base **out, kvt_err *err) {
    *out = NULL;
    kvt_kld_base *b = calloc(1, sizeof *b);
    if (!b) return kvt_errorf(err, KVT_ERR_NOMEM, "%s: out of memory", path);
    b->fd = -1;
    const size_t plen = strlen(path);
    if (!(b->path = malloc(plen + 1))) {
        kvt_kld_base_close(b);
        return kvt_errorf(err, KVT_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(b->path, path, plen + 1);
    int64_t size = 0;
    kvt_status st = kvt_file_open_regular(path, "base log-probability file", &b->fd, &size, err);
    if (st) {
        kvt_kld_base_close(b);
        return st;
    }
    uint8_t head[KVT_KLD_HEADER_BYTES] = {0};
    static const char *const field[] = {"magic", "magic", "n_ctx", "n_vocab", "n_chunk"};
    if (!read_at(b->fd, head, size < KVT_KLD_HEADER_BYTES ? size : KVT_KLD_HEADER_BYTES, 0)) {
        st = kvt_errorf(err, KVT_ERR_IO, "%s: cannot read the header: %s", path, strerror(errno ? errno : EIO));
    } else if (size >= 8 && memcmp(head, KVT_KLD_MAGIC, 8) != 0) {
        char seen[33] = {0};
        for (int i = 0; i < 8; i++) snprintf(seen + 4 * i, 5, "\\x%02x", head[i]);
        st = kvt_errorf(err, KVT_ERR_FORMAT,
                        "%s: magic at offset 0 is \"%s\", not \"%s\": not a base log-probability file of --kl-divergence-base",
                        path, seen, KVT_KLD_MAGIC);
    } else if (size < KVT_KLD_HEADER_BYTES) { // the field the file ends in
        const int64_t at = size < 8 ? 0 : size / 4 * 4, end = at ? at + 4 : 8;
        st = kvt_errorf(err, KVT_ERR_FORMAT, "%s: truncated: %s at offset %lld runs to byte %lld, the file has %lld bytes", path,
                        field[at / 4], (long long)at, (long long)end, (long long)size);
    }
    if (st) {
        kvt_kld_base_close(b);
        return st;
    }
    const int32_t n_ctx = (int32_t)get_le32(head + 8), n_vocab = (int32_t)get_le32(head + 12),
                  n_chunk = (int32_t)get_le32(head + 16);
    if (n_ctx < 4 || n_ctx > KLD_MAX_CTX) {
        st = kvt_errorf(err, KVT_ERR_FORMAT, "%s: n_ctx at offset 8 is %d, outside [4, %d]", path, (int)n_ctx, KLD_MAX_CTX);
    } else if (n_vocab < 1 || n_vocab > KLD_MAX_VOCAB) {
        st = kvt_errorf(err, KVT_ERR_FORMAT, "%s: n_vocab at offset 12 is %d, outside [1, %d]", path, (int)n_vocab,
                        KLD_MAX_VOCAB);
    } else if (expect_vocab > 0 && n_vocab != expect_vocab) {
        st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "%s: n_vocab at offset 12 is %d; the model's vocabulary has %d entries", path,
                        (int)n_vocab, (int)expect_vocab);
    } else if (n_chunk < 1) {
        st = kvt_errorf(err, KVT_ERR_FORMAT, "%s: n_chunk at offset 16 is %d, not at least 1", path, (int)n_chunk);
    }
    if (st) {
        kvt_kld_base_close(b);
        return st;
    }
    // the size the header announces, checked piece by piece (a chunk's rows fit in 2^50 bytes; n_chunk < 2^31)
    const int64_t tok_bytes = (int64_t)n_chunk * n_ctx * 4, chunk_bytes = scored_rows(n_ctx) * kvt_kld_row_words(n_vocab) * 2;
    const int64_t rows_at = KVT_KLD_HEADER_BYTES + tok_bytes;
    if (size < rows_at) {
        st = kvt_errorf(err, KVT_ERR_FORMAT, "%s: truncated: tokens at offset %d need %lld bytes (n_chunk %d x n_ctx %d), the file has %lld",
                        path, KVT_KLD_HEADER_BYTES, (long long)tok_bytes, (int)n_chunk, (int)n_ctx,
                        (long long)(size - KVT_KLD_HEADER_BYTES));
    } else if ((size - rows_at) / chunk_bytes < n_chunk) {
        const int64_t whole = (size - rows_at) / chunk_bytes;
        st = kvt_errorf(err, KVT_ERR_FORMAT,
                        "%s: truncated: the log-probabilities of chunk %lld at offset %lld need %lld bytes, the file has %lld "
                        "(%lld of %d chunks whole)",
                        path, (long long)whole, (long long)(rows_at + whole * chunk_bytes), (long long)chunk_bytes,
                        (long long)(size - rows_at - whole * chunk_bytes), (long long)whole, (int)n_chunk);
    } else if (size - rows_at > (int64_t)n_chunk * chunk_bytes) {
        const int64_t end = rows_at + (int64_t)n_chunk * chunk_bytes;
        st = kvt_errorf(err, KVT_ERR_FORMAT, "%s: %lld bytes past the last chunk's log-probabilities, at offset %lld", path,
                        (long long)(size - end), (long long)end);
    }
    if (!st && (!(b->tokens = malloc((size_t)tok_bytes)) || !(b->bytes = malloc((size_t)kvt_kld_row_words(n_vocab) * 2)))) {
        st = kvt_errorf(err, KVT_ERR_NOMEM, "%s: out of memory for %lld tokens", path, (long long)n_chunk * n_ctx);
    }
    if (!st && !read_at(b->fd, b->tokens, tok_bytes, KVT_KLD_HEADER_BYTES)) {
        st = kvt_errorf(err, KVT_ERR_IO, "%s: cannot read the tokens: %s", path, strerror(errno ? errno : EIO));
    }
    for (int64_t i = 0; !st && i < (int64_t)n_chunk * n_ctx; i++) {
        const int32_t t = (int32_t)get_le32((const uint8_t *)(b->tokens + i));
        if (t < 0 || t >= n_vocab) {
            st = kvt_errorf(err, KVT_ERR_FORMAT, "%s: token %lld at offset %lld is %d, outside the vocabulary of %d", path,
                            (long long)i, (long long)(KVT_KLD_HEADER_BYTES + 4 * i), (int)t, (int)n_vocab);
        }
        b->tokens[i] = t;
    }
    if (st) {
        kvt_kld_base_close(b);
        return st;
    }
    b->n_ctx = n_ctx, b->n_vocab = n_vocab, b->n_chunk = n_chunk, b->rows_at = rows_at;
    *out = b;
    return KVT_OK;
}

int32_t kvt_kld_base_n_ctx(const kvt_kld_base *b) { return b->n_ctx; }
int32_t kvt_kld_base_n_vocab(const kvt_kld_base *b) { return b->n_vocab; }
int32_t kvt_kld_base_n_chunk(const kvt_kld_base *b) { return b->n_chunk; }
const int32_t *kvt_kld_base_tokens(const kvt_kld_base *b) { return b->tokens; }

kvt_status kvt_kld_base_row(kvt_kld_base *b, int64_t chunk, int64_t row, uint16_t *words, kvt_err *err) {
    const int64_t rows = scored_rows(b->n_ctx), nw = kvt_kld_row_words(b->n_vocab);
    if (chunk < 0 || chunk >= b->n_chunk || row < 0 || row >= rows) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "%s: no row %lld of chunk %lld (%lld rows, %d chunks)", b->path, (long long)row,
                          (long long)chunk, (long long)rows, (int)b->n_chunk);
    }
    const int64_t off = b->rows_at + (chunk * rows + row) * nw * 2;
    if (!read_at(b->fd, b->bytes, nw * 2, off)) {
        return kvt_errorf(err, KVT_ERR_IO, "%s: cannot read %lld bytes at offset %lld (the file changed?)", b->path,
                          (long long)(nw * 2), (long long)off);
    }
    for (int64_t i = 0; i < nw; i++) words[i] = (uint16_t)(b->bytes[2 * i] | b->bytes[2 * i + 1] << 8);
    const float scale = bits_f32((uint32_t)words[0] | (uint32_t)words[1] << 16),
                lo = bits_f32((uint32_t)words[2] | (uint32_t)words[3] << 16);
    if (!isfinite(scale) || scale < 0.0f) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: scale at offset %lld (chunk %lld, row %lld) is %g, not a finite value >= 0",
                          b->path, (long long)off, (long long)chunk, (long long)row, (double)scale);
    }
    if (!isfinite(lo)) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: min_log_prob at offset %lld (chunk %lld, row %lld) is %g, not finite", b->path,
                          (long long)(off + 4), (long long)chunk, (long long)row, (double)lo);
    }
    return KVT_OK;
}

// ---- statistics ----

kvt_status kvt_kld_stats_init(kvt_kld_stats *s, int64_t n, kvt_err *err) {
    memset(s, 0, sizeof *s);
    if (n < 1) n = 1;
    s->kld_values = malloc((size_t)n * sizeof *s->kld_values);
    s->p_diff_values = malloc((size_t)n * sizeof *s->p_diff_values);
    if (!s->kld_values || !s->p_diff_values) {
        kvt_kld_stats_free(s);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for %lld KL-divergence values", (long long)n);
    }
    s->cap = n;
    return KVT_OK;
}

void kvt_kld_stats_free(kvt_kld_stats *s) {
    free(s->kld_values);
    free(s->p_diff_values);
    s->kld_values = s->p_diff_values = NULL;
    s->cap = 0;
}

void kvt_kld_stats_add(kvt_kld_stats *s, const float *logits, const uint16_t *base_row, int32_t n_vocab, int32_t next) {
    int32_t top = 0;
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) {
        if (logits[i] > mx) mx = logits[i], top = i;
    }
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) sum += expf(logits[i] - mx);
    const float lse = (float)log(sum);
    const float scale = bits_f32((uint32_t)base_row[0] | (uint32_t)base_row[1] << 16),
                lo = bits_f32((uint32_t)base_row[2] | (uint32_t)base_row[3] << 16);
    const uint16_t *q = base_row + 4;
    const float nll = mx + lse - logits[next], nll_base = -(scale * q[next] + lo);
    s->sum_nll += nll;
    s->sum_nll2 += (double)nll * nll;
    s->sum_nll_base += nll_base;
    s->sum_nll_base2 += (double)nll_base * nll_base;
    s->sum_nll_nll_base += (double)nll * nll_base;
    // KL(base || model) = sum_i p_base(i) (log p_base(i) - log p(i)), over the base entries above -16 nats
    const float norm = mx + lse;
    double kl = 0.0;
    int32_t top_base = 0;
    float best = 0.0f;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float lb = scale * q[i] + lo;
        if (i == 0 || lb > best) best = lb, top_base = i;
        if (lb > -16.0f) kl += expf(lb) * (lb - logits[i] + norm);
    }
    s->sum_kld += kl;
    s->sum_kld2 += kl * kl;
    s->n_same_top += top == top_base;
    const float dp = expf(-nll) - expf(-nll_base);
    const double dp2 = (double)dp * dp;
    s->sum_p_diff += dp;
    s->sum_p_diff2 += dp2;
    s->sum_p_diff4 += dp2 * dp2;
    if (fabsf(dp) > s->max_p_diff) s->max_p_diff = fabsf(dp);
    if (s->count < s->cap) {
        s->kld_values[s->count] = (float)kl;
        s->p_diff_values[s->count] = dp;
    }
    s->count++;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// mean and its standard error, as llama-perplexity: the error 0 unless the variance is positive and count > 10
static kvt_kld_est mean_err(double sum, double sum2, int64_t count) {
    kvt_kld_est e = {0, 0};
    if (count < 1) return e;
    e.val = sum / (double)count;
    const double var = sum2 / (double)count - e.val * e.val;
    e.err = var > 0 && count > 10 ? sqrt(var / (double)(count - 1)) : 0.0;
    return e;
}

static double covar(double a, double b, double ab, int64_t count) {
    if (count < 10) return 0.0;
    const double n = (double)count;
    return (ab / n - (a / n) * (b / n)) / (n - 1);
}

// linear interpolation between the two nearest of the sorted values
static double pct(const float *v, int64_t n, float frac) {
    if (frac <= 0) return v[0];
    if (frac >= 1) return v[n - 1];
    float p = frac * (float)(n - 1);
    const int64_t ip = (int64_t)p;
    p -= (float)ip;
    return (1 - p) * v[ip] + p * v[ip + 1 < n ? ip + 1 : n - 1];
}

static double median(const float *v, int64_t n) { return n % 2 ? v[n / 2] : 0.5f * (v[n / 2] + v[n / 2 - 1]); }

void kvt_kld_summarize(kvt_kld_stats *s, kvt_kld_summary *o) {
    memset(o, 0, sizeof *o);
    const int64_t n = s->count;
    o->count = n;
    if (n < 1) return;
    const kvt_kld_est l = mean_err(s->sum_nll, s->sum_nll2, n), lb = mean_err(s->sum_nll_base, s->sum_nll_base2, n);
    o->ppl = (kvt_kld_est){exp(l.val), exp(l.val) * l.err};
    o->ppl_base = (kvt_kld_est){exp(lb.val), exp(lb.val) * lb.err};
    const double cov = covar(s->sum_nll, s->sum_nll_base, s->sum_nll_nll_base, n);
    o->cor = l.err > 0 && lb.err > 0 ? cov / (l.err * lb.err) : 0.0;
    const double r_var = l.err * l.err + lb.err * lb.err - 2.0 * cov;
    o->ln_ratio = (kvt_kld_est){l.val - lb.val, r_var > 0 ? sqrt(r_var) : 0.0};
    o->ratio = (kvt_kld_est){exp(o->ln_ratio.val), exp(o->ln_ratio.val) * o->ln_ratio.err};
    const double d_var = o->ppl.err * o->ppl.err + o->ppl_base.err * o->ppl_base.err - 2.0 * o->ppl.val * o->ppl_base.val * cov;
    o->diff = (kvt_kld_est){o->ppl.val - o->ppl_base.val, d_var > 0 ? sqrt(d_var) : 0.0};
    o->kld = mean_err(s->sum_kld, s->sum_kld2, n);
    o->p_diff = mean_err(s->sum_p_diff, s->sum_p_diff2, n);
    const kvt_kld_est mse = mean_err(s->sum_p_diff2, s->sum_p_diff4, n);
    o->p_rms.val = sqrt(mse.val);
    o->p_rms.err = o->p_rms.val > 0 ? 0.5 / o->p_rms.val * mse.err : 0.0;
    o->same_top.val = (double)s->n_same_top / (double)n;
    o->same_top.err = n > 1 ? sqrt(o->same_top.val * (1.0 - o->same_top.val) / (double)(n - 1)) : 0.0;
    const int64_t m = n < s->cap ? n : s->cap;
    qsort(s->kld_values, (size_t)m, sizeof *s->kld_values, cmp_float);
    qsort(s->p_diff_values, (size_t)m, sizeof *s->p_diff_values, cmp_float);
    static const float kq[11] = {1, 0.999f, 0.99f, 0.95f, 0.90f, -1, 0.10f, 0.05f, 0.01f, 0.001f, 0};
    static const float pq[13] = {1, 0.999f, 0.99f, 0.95f, 0.90f, 0.75f, -1, 0.25f, 0.10f, 0.05f, 0.01f, 0.001f, 0};
    for (int i = 0; i < 11; i++) o->kld_q[i] = kq[i] < 0 ? median(s->kld_values, m) : pct(s->kld_values, m, kq[i]);
    for (int i = 0; i < 13; i++) o->p_diff_q[i] = pq[i] < 0 ? median(s->p_diff_values, m) : pct(s->p_diff_values, m, pq[i]);
}
