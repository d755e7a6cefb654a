// json_schema_impl.h - what the schema walk (json_schema.c), the "pattern" converter (json_schema_pattern.c) and the
// integer-range rules (json_schema_int.c) share. Not part of the API: only those three files include it.
//
// One conversion's state (cv) is opaque here; everything allocated through it (the kvt_js_pf and kvt_js_take
// strings, the rules) lives in its pool until the conversion ends, freed with it. The first error is the conversion's:
// a function that fails sets it (unless one is set) and returns NULL.
#ifndef KVT_JSON_SCHEMA_IMPL_H
#define KVT_JSON_SCHEMA_IMPL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../base/grow.h"

enum { MAX_REPEAT = 2000 }; // llama.cpp's grammar parser refuses larger repetition counts

typedef struct kvt_js_cv cv; // one conversion (json_schema.c)

// A growable string: p NUL-terminated once anything is put (NULL before), n bytes, cap allocated (malloc'd; the
// owner frees p or hands it to kvt_js_take). oom latches: later puts do nothing.
typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} sb;

// Appends n bytes of x.
static inline void sb_putn(sb *s, const char *x, size_t n) {
    if (s->oom) return;
    if (!kvt_grow((void **)&s->p, &s->cap, s->n + n + 1, 1)) {
        s->oom = true;
        return;
    }
    memcpy(s->p + s->n, x, n);
    s->n += n;
    s->p[s->n] = 0;
}
static inline void sb_puts(sb *s, const char *x) { sb_putn(s, x, strlen(x)); }
static inline void sb_putc(sb *s, char ch) { sb_putn(s, &ch, 1); }
// Appends the printf-formatted text: only short numbers (under 64 bytes; longer sets oom).
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline void sb_printf(sb *s, const char *fmt, ...) {
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf) s->oom = true; // only short numbers are formatted
    else sb_putn(s, buf, (size_t)n);
}

// Sets KVT_ERR_NOMEM (unless an error is set). Returns NULL.
void *kvt_js_nomem(cv *c);
// Sets KVT_ERR_INVALID_ARG with the printf-formatted message (unless an error is set). Returns NULL.
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void *kvt_js_fail(cv *c, const char *fmt, ...);
// The printf-formatted text, pooled; NULL when an error is set, out of memory or over the grammar's size limit.
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
char *kvt_js_pf(cv *c, const char *fmt, ...);
// s's text, pooled ("" when empty): s->p is taken (freed on failure). NULL when out of memory (s->oom included) or
// over the grammar's size limit.
char *kvt_js_take(cv *c, sb *s);
// Defines `name ::= body` (name sanitized; body copied into the pool); a name taken by another body gets the first
// free numeric suffix. Returns the rule's name (pooled), or NULL (also when name or body is NULL).
const char *kvt_js_add_rule(cv *c, const char *name, const char *body);
// item repeated mn..mx times (mx < 0: unbounded), the items separated by sep (NULL: none). Returns the GBNF text
// (pooled; "" when mx is 0), or NULL (also when item is NULL).
char *kvt_js_repeat(cv *c, const char *item, long mn, long mx, const char *sep);

// json_schema_pattern.c: the rule `rule_name` for a string matching "pattern" pv (llama.cpp's regular-expression
// subset, anchored with ^ and $); path names the schema node in messages. Returns the rule's name (pooled), or NULL
// with the path and the unsupported construct named.
const char *kvt_js_visit_pattern(cv *c, const json_t *pv, const char *rule_name, const char *path);

// json_schema_int.c: appends to o the GBNF alternatives accepting exactly the integers in [mn, mx] (INT64_MIN /
// INT64_MAX: unbounded on that side; |bounds| within 1e18), llama.cpp's construction: at most `dec` digits on an
// unbounded side; top is true at the top level (below it, a leading zero may follow a fixed first digit). The caller
// wraps the text in parentheses.
void kvt_js_int_range(sb *o, int64_t mn, int64_t mx, int dec, bool top);

#endif
