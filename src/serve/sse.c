// sse.c - server-sent events framing (see sse.h).
#include "sse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kvt_status kvt_sse_frame(const char *payload, size_t n, char **out, size_t *out_len, kvt_err *err) {
    *out = NULL;
    size_t lines = 1;
    for (size_t i = 0; i < n; i++)
        if (payload[i] == '\n' || (payload[i] == '\r' && (i + 1 == n || payload[i + 1] != '\n'))) lines++;
    if (n > ((size_t)-1) / 2 - 8 * lines)
        return kvt_errorf(err, KVT_ERR_NOMEM, "sse: event of %zu bytes is too large", n);
    size_t cap = n + 7 * lines + 2;
    char *o = malloc(cap);
    if (!o) return kvt_errorf(err, KVT_ERR_NOMEM, "sse: out of memory framing %zu bytes", n);
    size_t len = 0;
    memcpy(o, "data: ", 6);
    len = 6;
    for (size_t i = 0; i < n; i++) {
        char c = payload[i];
        if (c == '\r' || c == '\n') {
            if (c == '\r' && i + 1 < n && payload[i + 1] == '\n') i++;
            memcpy(o + len, "\ndata: ", 7);
            len += 7;
        } else {
            o[len++] = c;
        }
    }
    o[len++] = '\n';
    o[len++] = '\n';
    o[len] = 0;
    *out = o;
    if (out_len) *out_len = len;
    return KVT_OK;
}

char *kvt_sse_named(const char *name, char *json, size_t *len) {
    if (!json) return NULL;
    size_t n = strlen(name) + strlen(json) + 20;
    char *s = malloc(n);
    int k = s ? snprintf(s, n, "event: %s\ndata: %s\n\n", name, json) : -1;
    free(json);
    if (k < 0) {
        free(s);
        return NULL;
    }
    if (len) *len = (size_t)k;
    return s;
}
