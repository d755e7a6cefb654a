#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

int test_run(const char *cmd, char *out, size_t cap) {
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFSIGNALED(st) ? -1 : WEXITSTATUS(st);
}

char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = sz >= 0 ? malloc((size_t)sz + 1) : NULL;
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[sz] = 0;
        if (len) *len = (size_t)sz;
    }
    return b;
}

int32_t *test_json_int_array(const char *json, const char *key, int64_t *n) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(json, pat);
    if (!p || !(p = strchr(p, '['))) return NULL;
    p++;
    int64_t cap = 64, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    while (v) {
        while (*p == ' ' || *p == ',' || *p == '\n') p++;
        if (*p == ']' || !*p) break;
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p) break;
        p = end;
        if (k == cap) {
            int32_t *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return NULL;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
    }
    *n = k;
    return v;
}

float *test_read_floats(const char *path, int64_t *n) {
    size_t len;
    char *s = test_read_file(path, &len);
    if (!s) return NULL;
    int64_t cap = 1024, k = 0;
    float *v = malloc((size_t)cap * sizeof *v);
    char *p = s;
    while (v) {
        char *end;
        float x = strtof(p, &end);
        if (end == p) break;
        p = end;
        if (k == cap) {
            float *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                v = NULL;
                break;
            }
            v = nv;
        }
        v[k++] = x;
    }
    free(s);
    *n = k;
    return v;
}
