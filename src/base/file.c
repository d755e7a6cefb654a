// file.c - reading a whole file into memory.
#include "file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kvt_status kvt_read_text(const char *path, char **out, size_t *len, kvt_err *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return kvt_errorf(err, KVT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap); // [cap] bytes, grown by doubling
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - 1 - n, f);
        if (r == 0) break;
        n += r;
    }
    const int bad = ferror(f);
    fclose(f);
    if (!buf) return kvt_errorf(err, KVT_ERR_NOMEM, "%s: out of memory after %zu bytes", path, n);
    if (bad) {
        free(buf);
        return kvt_errorf(err, KVT_ERR_IO, "%s: read failed", path);
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return KVT_OK;
}
