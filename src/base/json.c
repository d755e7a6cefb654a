#include "json.h"

#include <math.h>
#include <string.h>

void kvt_json_init(kvt_json *j, FILE *f) {
    j->f = f;
    j->depth = 0;
    j->first[0] = true;
    j->after_key = false;
}

static void sep(kvt_json *j) {
    if (j->after_key) {
        j->after_key = false;
        return;
    }
    if (!j->first[j->depth]) fputc(',', j->f);
    j->first[j->depth] = false;
}

static void open_(kvt_json *j, char c) {
    sep(j);
    fputc(c, j->f);
    if (j->depth < KVT_JSON_MAX_DEPTH - 1) j->depth++;
    j->first[j->depth] = true;
}

static void close_(kvt_json *j, char c) {
    if (j->depth > 0) j->depth--;
    fputc(c, j->f);
    if (j->depth == 0) fputc('\n', j->f);
}

void kvt_json_obj_begin(kvt_json *j) { open_(j, '{'); }
void kvt_json_obj_end(kvt_json *j) { close_(j, '}'); }
void kvt_json_arr_begin(kvt_json *j) { open_(j, '['); }
void kvt_json_arr_end(kvt_json *j) { close_(j, ']'); }

static void write_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        // validate UTF-8 sequences; escape anything invalid byte-wise
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && i + (size_t)len <= n;
        for (int k = 1; ok && k < len; k++) ok = (p[i + k] & 0xC0) == 0x80;
        if (!ok) {
            fprintf(f, "\\u%04x", c);
            continue;
        }
        if (len > 1) {
            fwrite(p + i, 1, (size_t)len, f);
            i += (size_t)len - 1;
            continue;
        }
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
            else fputc(c, f);
        }
    }
    fputc('"', f);
}

void kvt_json_key(kvt_json *j, const char *key) {
    sep(j);
    write_str(j->f, key, strlen(key));
    fputc(':', j->f);
    j->after_key = true;
}

void kvt_json_strn(kvt_json *j, const char *s, size_t n) {
    sep(j);
    write_str(j->f, s, n);
}
void kvt_json_str(kvt_json *j, const char *s) { kvt_json_strn(j, s, strlen(s)); }
void kvt_json_int(kvt_json *j, int64_t v) {
    sep(j);
    fprintf(j->f, "%lld", (long long)v);
}
void kvt_json_num(kvt_json *j, double v) {
    sep(j);
    if (isfinite(v)) fprintf(j->f, "%.10g", v);
    else fputs("null", j->f);
}
void kvt_json_bool(kvt_json *j, bool v) {
    sep(j);
    fputs(v ? "true" : "false", j->f);
}
void kvt_json_null(kvt_json *j) {
    sep(j);
    fputs("null", j->f);
}
void kvt_json_kv_int(kvt_json *j, const char *key, int64_t v) { kvt_json_key(j, key); kvt_json_int(j, v); }
void kvt_json_kv_num(kvt_json *j, const char *key, double v) { kvt_json_key(j, key); kvt_json_num(j, v); }
void kvt_json_kv_str(kvt_json *j, const char *key, const char *s) { kvt_json_key(j, key); kvt_json_str(j, s); }
void kvt_json_kv_bool(kvt_json *j, const char *key, bool v) { kvt_json_key(j, key); kvt_json_bool(j, v); }
