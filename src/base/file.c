// file.c - reading a whole file into memory; writing one whole or not at all.
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

kvt_status kvt_file_open_regular(const char *path, const char *what, int *fd, int64_t *size, kvt_err *err) {
    *fd = -1;
    const char *sep = what && *what ? " " : "";
    if (!what) what = "";
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f < 0) return kvt_errorf(err, KVT_ERR_IO, "%s%s%s: cannot open: %s", what, sep, path, strerror(errno));
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        const int e = errno;
        close(f);
        return kvt_errorf(err, KVT_ERR_IO, "%s%s%s: cannot stat: %s", what, sep, path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        return kvt_errorf(err, KVT_ERR_IO, "%s%s%s: not a regular file (%s)", what, sep, path,
                          S_ISFIFO(sb.st_mode) ? "a FIFO" : S_ISDIR(sb.st_mode) ? "a directory" : "a device or socket");
    }
    const int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        const int e = errno;
        close(f);
        return kvt_errorf(err, KVT_ERR_IO, "%s%s%s: fcntl: %s", what, sep, path, strerror(e));
    }
    *fd = f;
    *size = (int64_t)sb.st_size;
    return KVT_OK;
}

kvt_status kvt_read_stream(FILE *f, const char *name, char **out, size_t *len, kvt_err *err) {
    *out = NULL;
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
    const int bad = ferror(f), e = errno; // EISDIR for a directory
    if (!buf) return kvt_errorf(err, KVT_ERR_NOMEM, "%s: out of memory after %zu bytes", name, n);
    if (bad) {
        free(buf);
        return kvt_errorf(err, KVT_ERR_IO, "%s: read failed: %s", name, strerror(e));
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return KVT_OK;
}

kvt_status kvt_read_text(const char *path, char **out, size_t *len, kvt_err *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return kvt_errorf(err, KVT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    const kvt_status st = kvt_read_stream(f, path, out, len, err);
    fclose(f);
    return st;
}

kvt_status kvt_file_write_atomic(const char *path, void (*write)(void *ctx, FILE *f), void *ctx, kvt_err *err) {
    if (!path[0]) return kvt_errorf(err, KVT_ERR_IO, "cannot write a file with an empty path");
    const size_t n = strlen(path) + 5;
    char *tmp = malloc(n);
    if (!tmp) return kvt_errorf(err, KVT_ERR_NOMEM, "%s: out of memory", path);
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        kvt_status st = kvt_errorf(err, KVT_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        free(tmp);
        return st;
    }
    write(ctx, f);
    int e = fflush(f) != 0 || ferror(f) ? (errno ? errno : EIO) : 0;
    if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
    if (!e && rename(tmp, path) != 0) e = errno;
    kvt_status st = KVT_OK;
    if (e) {
        unlink(tmp);
        st = kvt_errorf(err, KVT_ERR_IO, "%s: write failed: %s", path, strerror(e));
    }
    free(tmp);
    return st;
}
