// utf8_stream.c - incremental UTF-8 boundary buffer (see utf8_stream.h).
#include "utf8_stream.h"

#include <string.h>

static const char k_replacement[3] = {(char)0xef, (char)0xbf, (char)0xbd}; // U+FFFD

int kvt_utf8_char_len(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    int len;
    unsigned char lo = 0x80, hi = 0xbf; // allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0;      // no overlong forms
        else if (c == 0xed) hi = 0x9f; // no surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90;
        else if (c == 0xf4) hi = 0x8f; // nothing above U+10FFFF
    } else {
        return -1; // a continuation byte or C0, C1, F5-FF
    }
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return 0; // valid so far: wait for more
        unsigned char b = s[i];
        bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xbf);
        if (!ok) return -i;
    }
    return len;
}

bool kvt_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        int k = kvt_utf8_char_len(p + i, n - i);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

// Copies the complete characters of p[0..n) to out, starting characters only below `stop`;
// returns bytes written and sets *used to the bytes consumed (when *used < stop, what remains
// of p is an incomplete character, fewer than 4 bytes).
static size_t drain(const unsigned char *p, size_t n, size_t stop, char *out, size_t *used) {
    size_t i = 0, o = 0;
    while (i < n && i < stop) {
        int k = kvt_utf8_char_len(p + i, n - i);
        if (k == 0) break;
        bool valid = k > 0;
        memcpy(out + o, valid ? (const char *)p + i : k_replacement, valid ? (size_t)k : 3);
        o += valid ? (size_t)k : 3;
        i += valid ? (size_t)k : (size_t)-k;
    }
    *used = i;
    return o;
}

size_t kvt_utf8_stream_push(kvt_utf8_stream *s, const char *in, size_t n, char *out) {
    const unsigned char *p = (const unsigned char *)in;
    size_t o = 0, used;
    if (s->n_pend) { // finish the held bytes, completed by at most 4 input bytes
        unsigned char tmp[8];
        size_t np = s->n_pend, take = n < 4 ? n : 4, t = np + take;
        memcpy(tmp, s->pend, np);
        memcpy(tmp + np, p, take);
        o = drain(tmp, t, np, out, &used);
        if (used < np) { // still a prefix: then all input was taken and fewer than 4 bytes remain
            memmove(s->pend, tmp + used, t - used);
            s->n_pend = t - used;
            return o;
        }
        s->n_pend = 0;
        p += used - np;
        n -= used - np;
    }
    o += drain(p, n, n, out + o, &used);
    s->n_pend = n - used;
    memcpy(s->pend, p + used, s->n_pend);
    return o;
}

size_t kvt_utf8_stream_flush(kvt_utf8_stream *s, char *out) {
    if (!s->n_pend) return 0;
    s->n_pend = 0;
    memcpy(out, k_replacement, 3);
    return 3;
}

size_t kvt_utf8_stream_pending(const kvt_utf8_stream *s) { return s->n_pend; }
