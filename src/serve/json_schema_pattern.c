// json_schema_pattern.c - a schema's "pattern" turned into a GBNF rule, llama.cpp's regular-expression subset
// (json_schema_impl.h): anchored with ^ and $; literals, '.', [classes], (groups), (?:groups), '|', '*', '+', '?' and
// {m}, {m,}, {,n}, {m,n}. Anything else (lookaround, anchors inside, escapes GBNF lacks, ...) is refused with the
// schema's path, never approximated. As llama.cpp, a {m,n} repetition of a non-literal item repeats a sub-rule named
// after the pattern's rule ("<name>-1", "<name>-2", ...), one per distinct item.
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema_impl.h"

enum { MAX_PATTERN_DEPTH = 100 }; // nested groups in a pattern (llama.cpp's bound)

typedef struct {
    cv *c;
    const char *p, *path, *name;
    size_t i, n;
    int depth;
    const char **memo_body, **memo_name; // sub-rules made for {m,n}
    size_t nmemo, cmemo;
} pat;

typedef struct {
    const char *s;
    bool lit;
} item;

static bool pat_fail(pat *x, const char *why) {
    kvt_js_fail(x->c, "%s.pattern: not supported by kvtier (%s)", x->path, why);
    return false;
}

static const char *as_rule(pat *x, item it) { return it.lit ? kvt_js_pf(x->c, "\"%s\"", it.s) : it.s; }

// Length of a GBNF escape at p (\xHH, \uHHHH, \UHHHHHHHH, \t \r \n \\ \" \[ \] \-), 0 if none.
static size_t gbnf_escape(const char *p, size_t left) {
    if (left < 2 || p[0] != '\\') return 0;
    size_t hex = 0;
    switch (p[1]) {
    case 'x': hex = 2; break;
    case 'u': hex = 4; break;
    case 'U': hex = 8; break;
    case 't': case 'r': case 'n': case '\\': case '"': case '[': case ']': case '-': return 2;
    default: return 0;
    }
    if (2 + hex > left) return 0;
    for (size_t i = 2; i < 2 + hex; i++) {
        char h = p[i];
        if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F'))) return 0;
    }
    return 2 + hex;
}

static bool special(char ch) { return ch && strchr("|.()[]{}*+?^$", ch); }

// A decimal count of {m,n}; false when not one.
static bool count_of(const char *s, size_t n, long *out) {
    if (!n || n > 9) return false;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

static bool push(cv *c, item **v, size_t *n, size_t *cap, item it) {
    if (!it.s) return false;
    if (!kvt_grow((void **)v, cap, *n + 1, sizeof **v)) return kvt_js_nomem(c), false;
    (*v)[(*n)++] = it;
    return true;
}

// One alternation level up to ')' or the end: the items joined (consecutive literals merged).
static const char *pat_seq(pat *x) {
    cv *c = x->c;
    item *v = NULL;
    size_t n = 0, cap = 0;
    const char *res = NULL;
    while (x->i < x->n) {
        const char ch = x->p[x->i];
        if (ch == '.') {
            x->i++;
            if (!push(c, &v, &n, &cap, (item){kvt_js_add_rule(c, "dot", "[^\\x0A\\x0D]"), false})) goto out;
        } else if (ch == '(') {
            x->i++;
            if (x->i < x->n && x->p[x->i] == '?') {
                if (x->i + 1 < x->n && x->p[x->i + 1] == ':') x->i += 2;
                else {
                    pat_fail(x, "lookaround, named group or flags");
                    goto out;
                }
            }
            if (++x->depth > MAX_PATTERN_DEPTH) {
                pat_fail(x, "groups nested too deep");
                goto out;
            }
            const char *inner = pat_seq(x);
            if (!inner || !push(c, &v, &n, &cap, (item){kvt_js_pf(c, "(%s)", inner), false})) goto out;
        } else if (ch == ')') {
            x->i++;
            if (x->depth == 0) {
                pat_fail(x, "unbalanced parentheses");
                goto out;
            }
            x->depth--;
            break;
        } else if (ch == '^' || ch == '$') {
            pat_fail(x, "an anchor inside the pattern");
            goto out;
        } else if (ch == '[') {
            sb cls = {0};
            sb_putc(&cls, '[');
            x->i++;
            while (x->i < x->n && x->p[x->i] != ']') {
                size_t e = x->p[x->i] == '\\' ? gbnf_escape(x->p + x->i, x->n - x->i) : 1;
                if (!e) {
                    free(cls.p);
                    pat_fail(x, "an escape in a character class other than \\t \\r \\n \\\\ \\\" \\[ \\] \\- \\x \\u");
                    goto out;
                }
                sb_putn(&cls, x->p + x->i, e);
                x->i += e;
            }
            if (x->i >= x->n) {
                free(cls.p);
                pat_fail(x, "unterminated character class");
                goto out;
            }
            sb_putc(&cls, ']');
            x->i++;
            if (!push(c, &v, &n, &cap, (item){kvt_js_take(c, &cls), false})) goto out;
        } else if (ch == '|') {
            x->i++;
            if (!push(c, &v, &n, &cap, (item){"|", false})) goto out;
        } else if (ch == '*' || ch == '+' || ch == '?') {
            x->i++;
            if (!n) {
                pat_fail(x, "nothing to repeat");
                goto out;
            }
            const char *r = as_rule(x, v[n - 1]);
            v[n - 1] = (item){r ? kvt_js_pf(c, "%s%c", r, ch) : NULL, false};
            if (!v[n - 1].s) goto out;
        } else if (ch == '{') {
            size_t start = ++x->i;
            while (x->i < x->n && x->p[x->i] != '}') x->i++;
            if (x->i >= x->n) {
                pat_fail(x, "unterminated {}");
                goto out;
            }
            const char *body = x->p + start, *comma = memchr(body, ',', x->i - start);
            const size_t len = x->i - start;
            x->i++;
            long mn = 0, mx = -1;
            bool ok;
            if (!comma) ok = count_of(body, len, &mn) && (mx = mn, true);
            else {
                size_t a = (size_t)(comma - body), b = len - a - 1;
                ok = !memchr(comma + 1, ',', b) && (!a || count_of(body, a, &mn)) && (!b || count_of(comma + 1, b, &mx));
            }
            if (!ok) {
                pat_fail(x, "a repetition other than {m}, {m,}, {,n} or {m,n}");
                goto out;
            }
            if (mn > MAX_REPEAT || mx > MAX_REPEAT) {
                kvt_js_fail(c, "%s.pattern: a repetition over %d is more than a grammar allows", x->path, MAX_REPEAT);
                goto out;
            }
            if (mx >= 0 && mn > mx) {
                pat_fail(x, "{m,n} with m > n");
                goto out;
            }
            if (!n) {
                pat_fail(x, "nothing to repeat");
                goto out;
            }
            item *last = &v[n - 1];
            const char *sub = last->s;
            if (last->lit) sub = kvt_js_pf(c, "\"%s\"", sub);
            else {
                size_t k = 0;
                while (k < x->nmemo && strcmp(x->memo_body[k], sub)) k++;
                if (k == x->nmemo) {
                    if (x->nmemo == x->cmemo) {
                        size_t m = x->cmemo ? x->cmemo * 2 : 8;
                        const char **b = realloc(x->memo_body, m * sizeof *b);
                        if (b) x->memo_body = b;
                        const char **nm = b ? realloc(x->memo_name, m * sizeof *nm) : NULL;
                        if (!nm) {
                            kvt_js_nomem(c);
                            goto out;
                        }
                        x->memo_name = nm;
                        x->cmemo = m;
                    }
                    char *rn = kvt_js_pf(c, "%s-%zu", x->name, x->nmemo + 1);
                    x->memo_body[k] = sub;
                    x->memo_name[k] = kvt_js_add_rule(c, rn, sub);
                    if (!x->memo_name[k]) goto out;
                    x->nmemo++;
                }
                sub = x->memo_name[k];
            }
            *last = (item){kvt_js_repeat(c, sub, mn, mx, NULL), false};
            if (!last->s) goto out;
        } else {
            sb lit = {0};
            while (x->i < x->n) {
                const char d = x->p[x->i];
                if (d == '\\') {
                    if (x->i + 1 == x->n) {
                        free(lit.p);
                        pat_fail(x, "a trailing backslash");
                        goto out;
                    }
                    if (special(x->p[x->i + 1])) {
                        sb_putc(&lit, x->p[x->i + 1]);
                        x->i += 2;
                    } else {
                        size_t e = gbnf_escape(x->p + x->i, x->n - x->i);
                        if (!e) {
                            char why[64];
                            snprintf(why, sizeof why, "the escape \\%c", x->p[x->i + 1]);
                            free(lit.p);
                            pat_fail(x, why);
                            goto out;
                        }
                        sb_putn(&lit, x->p + x->i, e);
                        x->i += e;
                    }
                } else if (d == '"') {
                    sb_puts(&lit, "\\\"");
                    x->i++;
                } else if (!special(d) && (x->i + 1 == x->n || !lit.n || x->p[x->i + 1] == '.' ||
                                           !special(x->p[x->i + 1]))) {
                    sb_putc(&lit, d);
                    x->i++;
                } else break;
            }
            if (!lit.n) {
                char why[48];
                snprintf(why, sizeof why, "the character '%c'", ch);
                free(lit.p);
                pat_fail(x, why);
                goto out;
            }
            if (!push(c, &v, &n, &cap, (item){kvt_js_take(c, &lit), true})) goto out;
        }
    }
    {
        sb o = {0};
        sb lit = {0};
        bool first = true;
        for (size_t k = 0; k <= n; k++) {
            if (k < n && v[k].lit) {
                sb_puts(&lit, v[k].s);
                continue;
            }
            if (lit.n) {
                if (!first) sb_putc(&o, ' ');
                first = false;
                sb_putc(&o, '"');
                sb_puts(&o, lit.p);
                sb_putc(&o, '"');
                lit.n = 0;
            }
            if (k < n) {
                if (!first) sb_putc(&o, ' ');
                first = false;
                sb_puts(&o, v[k].s);
            }
        }
        if (lit.oom) o.oom = true;
        free(lit.p);
        res = kvt_js_take(c, &o);
    }
out:
    free(v);
    return res;
}

const char *kvt_js_visit_pattern(cv *c, const json_t *pv, const char *rule_name, const char *path) {
    if (!json_is_string(pv)) return kvt_js_fail(c, "%s.pattern: must be a string", path);
    const char *p = json_string_value(pv);
    size_t n = json_string_length(pv);
    if (n < 2 || p[0] != '^' || p[n - 1] != '$')
        return kvt_js_fail(c, "%s.pattern: not supported by kvtier (only patterns anchored with ^ and $)", path);
    pat x = {.c = c, .p = p + 1, .path = path, .name = rule_name, .n = n - 2};
    const char *r = pat_seq(&x);
    if (r && (x.depth || x.i < x.n)) {
        pat_fail(&x, "unbalanced parentheses");
        r = NULL;
    }
    free(x.memo_body);
    free(x.memo_name);
    return r ? kvt_js_add_rule(c, rule_name, kvt_js_pf(c, "\"\\\"\" (%s) \"\\\"\"", r)) : NULL;
}
