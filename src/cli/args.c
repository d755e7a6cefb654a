#include "args.h"

#include "../base/file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool kvt_args_next(kvt_args *a, const char **flag) {
    if (a->i >= a->argc) return false;
    *flag = a->argv[a->i++];
    return true;
}

const char *kvt_args_value(kvt_args *a, const char *flag) {
    if (a->i >= a->argc) {
        fprintf(stderr, "kvtier %s: %s needs a value\n", a->cmd, flag);
        return NULL;
    }
    return a->argv[a->i++];
}

bool kvt_args_int(kvt_args *a, const char *flag, int64_t lo, int64_t hi, int64_t *out) {
    const char *v = kvt_args_value(a, flag);
    if (!v) return false;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end) {
        fprintf(stderr, "kvtier %s: %s: '%s' is not an integer\n", a->cmd, flag, v);
        return false;
    }
    if (x < lo || x > hi) {
        fprintf(stderr, "kvtier %s: %s: %lld out of range [%lld, %lld]\n", a->cmd, flag, x, (long long)lo, (long long)hi);
        return false;
    }
    *out = x;
    return true;
}

bool kvt_args_float(kvt_args *a, const char *flag, double lo, double hi, double *out) {
    const char *v = kvt_args_value(a, flag);
    if (!v) return false;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) {
        fprintf(stderr, "kvtier %s: %s: '%s' is not a number\n", a->cmd, flag, v);
        return false;
    }
    if (x < lo || x > hi) {
        fprintf(stderr, "kvtier %s: %s: %g out of range [%g, %g]\n", a->cmd, flag, x, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

bool kvt_parse_bytes(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || end == s || !(x >= 0)) return false;
    double mul = 1;
    if (*end) {
        static const struct {
            const char *suf;
            double mul;
        } k[] = {{"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}, {"T", 1099511627776.0},
                 {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
                 {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}};
        bool found = false;
        for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
            if (strcasecmp(end, k[i].suf) == 0) {
                mul = k[i].mul;
                found = true;
                break;
            }
        }
        if (!found) return false;
    }
    double v = x * mul;
    if (v > 9.2e18) return false;
    *out = (int64_t)v;
    return true;
}

bool kvt_args_bytes(kvt_args *a, const char *flag, int64_t *out) {
    const char *v = kvt_args_value(a, flag);
    if (!v) return false;
    if (!kvt_parse_bytes(v, out)) {
        fprintf(stderr, "kvtier %s: %s: '%s' is not a byte size (e.g. 4096, 512M, 7G; KB/MB/GB are powers of 1000)\n", a->cmd,
                flag, v);
        return false;
    }
    return true;
}

bool kvt_args_bytes_pos(kvt_args *a, const char *flag, int64_t *out) {
    const char *v = kvt_args_value(a, flag);
    if (!v) return false;
    int64_t x;
    if (!kvt_parse_bytes(v, &x) || x <= 0) {
        fprintf(stderr, "kvtier %s: %s: '%s' is not a positive byte size (e.g. 4096, 512M, 7G; KB/MB/GB are powers of 1000)\n",
                a->cmd, flag, v);
        return false;
    }
    *out = x;
    return true;
}

bool kvt_args_unknown(kvt_args *a, const char *flag) {
    fprintf(stderr, "kvtier %s: unknown flag '%s' (see kvtier %s --help)\n", a->cmd, flag, a->cmd);
    return false;
}

char *kvt_read_file(const char *cmd, const char *path, size_t *len) {
    char *text;
    kvt_err err = {0};
    if (kvt_read_text(path, &text, len, &err)) {
        fprintf(stderr, "kvtier %s: %s\n", cmd, err.msg);
        return NULL;
    }
    return text;
}
