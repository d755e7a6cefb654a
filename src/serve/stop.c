// stop.c - stop strings over streamed text (stop.h).
#include "stop.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../base/grow.h"

struct kvt_stop {
    char **stops;
    size_t *lens;
    size_t n;
    char *buf; // held bytes at buf[start..len)
    size_t start, len, cap;
    bool matched;
};

kvt_status kvt_stop_create(const char *const *stops, size_t n, kvt_stop **out, kvt_err *err) {
    *out = NULL;
    for (size_t i = 0; i < n; i++)
        if (!stops[i] || !stops[i][0]) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "stop[%zu]: must not be empty", i);
    kvt_stop *s = calloc(1, sizeof *s);
    if (!s) return kvt_errorf(err, KVT_ERR_NOMEM, "stop: out of memory");
    s->stops = calloc(n ? n : 1, sizeof *s->stops);
    s->lens = calloc(n ? n : 1, sizeof *s->lens);
    if (!s->stops || !s->lens) {
        kvt_stop_free(s);
        return kvt_errorf(err, KVT_ERR_NOMEM, "stop: out of memory");
    }
    s->n = n;
    for (size_t i = 0; i < n; i++) {
        s->lens[i] = strlen(stops[i]);
        if (!(s->stops[i] = strdup(stops[i]))) {
            kvt_stop_free(s);
            return kvt_errorf(err, KVT_ERR_NOMEM, "stop: out of memory");
        }
    }
    *out = s;
    return KVT_OK;
}

void kvt_stop_free(kvt_stop *s) {
    if (!s) return;
    for (size_t i = 0; s->stops && i < s->n; i++) free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->buf);
    free(s);
}

// Length of the longest suffix of b[0..n) that is a proper prefix of some stop string.
static size_t held_suffix(const kvt_stop *s, const char *b, size_t n) {
    size_t best = 0;
    for (size_t i = 0; i < s->n; i++) {
        size_t max = s->lens[i] - 1 < n ? s->lens[i] - 1 : n;
        for (size_t k = max; k > best; k--) {
            if (!memcmp(b + n - k, s->stops[i], k)) {
                best = k;
                break;
            }
        }
    }
    return best;
}

bool kvt_stop_feed(kvt_stop *s, const char *text, size_t n, const char **emit, size_t *emit_len, size_t *which,
                   kvt_err *err) {
    *emit = "";
    *emit_len = 0;
    if (s->matched) return false;
    // drop what was emitted last time; keep the held bytes
    if (s->start) {
        memmove(s->buf, s->buf + s->start, s->len - s->start);
        s->len -= s->start;
        s->start = 0;
    }
    if (!kvt_grow((void **)&s->buf, &s->cap, s->len + n + 1, 1)) {
        kvt_errorf(err, KVT_ERR_NOMEM, "stop: out of memory holding %zu bytes", s->len + n);
        return false;
    }
    memcpy(s->buf + s->len, text, n);
    s->len += n;
    s->buf[s->len] = 0;
    // the first stop string completed in the text (the earliest end; on a tie the earliest start): the text would
    // have ended there, so the cut does not depend on the pieces (the earliest start would: a stop string inside
    // another completes first). Text may contain NUL bytes: compare with memcmp.
    size_t pos = s->len, end = SIZE_MAX, hit = 0;
    for (size_t i = 0; i < s->n; i++) {
        for (size_t p = 0; p + s->lens[i] <= s->len && p + s->lens[i] <= end; p++) {
            if (!memcmp(s->buf + p, s->stops[i], s->lens[i])) {
                if (p + s->lens[i] < end || p < pos) pos = p, end = p + s->lens[i], hit = i;
                break;
            }
        }
    }
    *emit = s->buf;
    if (pos < s->len) {
        s->matched = true;
        *emit_len = pos;
        s->start = s->len; // nothing held after a match
        if (which) *which = hit;
        return true;
    }
    *emit_len = s->len - held_suffix(s, s->buf, s->len);
    s->start = *emit_len;
    return false;
}

void kvt_stop_flush(kvt_stop *s, const char **emit, size_t *emit_len) {
    *emit = s->buf ? s->buf + s->start : "";
    *emit_len = s->len - s->start;
    s->start = s->len;
}
