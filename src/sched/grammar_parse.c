// grammar_parse.c - the GBNF compiler of grammar.h: llama.cpp's grammar syntax read into llama.cpp's element form,
// with its repetition expansion (S{m,n} -> m copies of S then n-m nested optional rules), its checks (undefined
// rules, left recursion) and bounds on everything a hostile text can make large.
#include "grammar_impl.h"
#include "../base/grow.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    GP_MAX_NEST = 512,     // groups nested deeper than this are refused (the parser recurses once per group)
    GP_EL_PER_RULE = 64,   // elements (after expansion) are bounded by GP_EL_PER_RULE * max_rules
};

kvt_grammar_params kvt_grammar_params_default(void) {
    return (kvt_grammar_params){.max_repeat = 2000, .max_stacks = 10000, .max_rules = 100000};
}

typedef struct {
    gr_elem *e; // [n]
    size_t n, cap;
} gvec;

// A symbol: a user's rule name (a span of the source) or a generated one (base name + "_" + id).
typedef struct {
    size_t off, len; // the name, or the base name of a generated symbol
    bool generated;
} gsym;

typedef struct {
    const char *src;
    size_t len;
    int64_t max_repeat, max_rules, max_el;
    int32_t (*lookup)(void *, const char *, size_t);
    void *lookup_ctx;
    kvt_err *err;
    kvt_status st;
    gsym *sym; // [n_sym]
    size_t n_sym, cap_sym;
    int32_t *map; // [map_cap]: open-addressed table of user symbol ids by name, -1 empty
    size_t map_cap;
    gvec *rules; // [n_rules]: rule id -> its elements (n == 0: not defined yet)
    size_t n_rules, cap_rules;
    int64_t n_written; // elements written into any rule so far (the bound on expansion)
    int depth;
} gp;

static int ch(const gp *g, size_t i) { return i < g->len ? (unsigned char)g->src[i] : 0; }

static void line_col(const gp *g, size_t at, size_t *line, size_t *col) {
    size_t l = 1, c = 1;
    for (size_t i = 0; i < at && i < g->len; i++) {
        if (g->src[i] == '\n') l++, c = 1;
        else c++;
    }
    *line = l, *col = c;
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static bool syntax(gp *g, size_t at, const char *fmt, ...) {
    if (g->st != KVT_OK) return false;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t line, col;
    line_col(g, at, &line, &col);
    g->st = kvt_errorf(g->err, KVT_ERR_INVALID_ARG, "grammar line %zu column %zu: %s", line, col, msg);
    return false;
}

static bool oom(gp *g) {
    if (g->st == KVT_OK) g->st = kvt_errorf(g->err, KVT_ERR_NOMEM, "out of memory compiling a grammar");
    return false;
}

static bool grow(gp *g, void **buf, size_t *cap, size_t need, size_t elem) {
    return kvt_grow(buf, cap, need, elem) || oom(g);
}

static bool push(gp *g, gvec *v, uint32_t type, uint32_t value) {
    if (++g->n_written > g->max_el) {
        if (g->st == KVT_OK)
            g->st = kvt_errorf(g->err, KVT_ERR_INVALID_ARG, "grammar expands to more than %lld elements (%d x "
                               "max_rules=%lld)", (long long)g->max_el, GP_EL_PER_RULE, (long long)g->max_rules);
        return false;
    }
    if (!grow(g, (void **)&v->e, &v->cap, v->n + 1, sizeof *v->e)) return false;
    v->e[v->n++] = (gr_elem){type, value};
    return true;
}

static bool append(gp *g, gvec *v, const gr_elem *e, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!push(g, v, e[i].type, e[i].value)) return false;
    return true;
}

// --- symbols ---------------------------------------------------------------------------------------------------------

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static bool new_symbol(gp *g, size_t at, size_t off, size_t len, bool generated, int32_t *id) {
    if ((int64_t)g->n_sym >= g->max_rules)
        return syntax(g, at, "more than max_rules=%lld rules after expansion", (long long)g->max_rules);
    if (!grow(g, (void **)&g->sym, &g->cap_sym, g->n_sym + 1, sizeof *g->sym)) return false;
    g->sym[g->n_sym] = (gsym){off, len, generated};
    *id = (int32_t)g->n_sym++;
    return true;
}

// The id of the user rule named src[off..off+len), made when new (llama.cpp's get_symbol_id). Generated names contain
// '_', which a user's name cannot, so the two never meet.
static bool symbol_id(gp *g, size_t off, size_t len, int32_t *id) {
    if (2 * (g->n_sym + 1) > g->map_cap) {
        size_t cap = g->map_cap ? g->map_cap * 2 : 64;
        int32_t *m = malloc(cap * sizeof *m);
        if (!m) return oom(g);
        for (size_t i = 0; i < cap; i++) m[i] = -1;
        for (size_t i = 0; i < g->map_cap; i++) {
            const int32_t s = g->map[i];
            if (s < 0) continue;
            size_t k = hash_bytes(g->src + g->sym[s].off, g->sym[s].len) & (cap - 1);
            while (m[k] >= 0) k = (k + 1) & (cap - 1);
            m[k] = s;
        }
        free(g->map);
        g->map = m;
        g->map_cap = cap;
    }
    size_t k = hash_bytes(g->src + off, len) & (g->map_cap - 1);
    for (; g->map[k] >= 0; k = (k + 1) & (g->map_cap - 1)) {
        const gsym *s = &g->sym[g->map[k]];
        if (s->len == len && !memcmp(g->src + s->off, g->src + off, len)) {
            *id = g->map[k];
            return true;
        }
    }
    if (!new_symbol(g, off, off, len, false, id)) return false;
    g->map[k] = *id;
    return true;
}

static int32_t find_symbol(const gp *g, const char *name, size_t len) {
    if (!g->map_cap) return -1;
    for (size_t k = hash_bytes(name, len) & (g->map_cap - 1); g->map[k] >= 0; k = (k + 1) & (g->map_cap - 1)) {
        const gsym *s = &g->sym[g->map[k]];
        if (s->len == len && !memcmp(g->src + s->off, name, len)) return g->map[k];
    }
    return -1;
}

// "name" or "base_id" into buf.
static const char *symbol_name(const gp *g, int32_t id, char *buf, size_t cap) {
    const gsym *s = &g->sym[id];
    const int n = s->len > 200 ? 200 : (int)s->len;
    if (s->generated) snprintf(buf, cap, "%.*s_%d", n, g->src + s->off, (int)id);
    else snprintf(buf, cap, "%.*s", n, g->src + s->off);
    return buf;
}

// Stores rule id (taking v's elements; v is left empty).
static bool add_rule(gp *g, int32_t id, gvec *v) {
    if ((size_t)id >= g->n_rules) {
        if (!grow(g, (void **)&g->rules, &g->cap_rules, (size_t)id + 1, sizeof *g->rules)) return false;
        memset(g->rules + g->n_rules, 0, ((size_t)id + 1 - g->n_rules) * sizeof *g->rules);
        g->n_rules = (size_t)id + 1;
    }
    free(g->rules[id].e);
    g->rules[id] = *v;
    *v = (gvec){0};
    return true;
}

// --- lexical pieces --------------------------------------------------------------------------------------------------

static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_word(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || is_digit(c); }

// Skips blanks and '#' comments, and line ends when newline_ok.
static size_t skip_space(const gp *g, size_t i, bool newline_ok) {
    for (;;) {
        const int c = ch(g, i);
        if (c == '#') {
            while (ch(g, i) && ch(g, i) != '\r' && ch(g, i) != '\n') i++;
        } else if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
            i++;
        } else {
            return i;
        }
    }
}

// Digits at *i as an integer no larger than lim; false (status set) when none or larger.
static bool parse_uint(gp *g, size_t *i, uint64_t lim, uint64_t *out) {
    const size_t start = *i;
    uint64_t v = 0;
    if (!is_digit(ch(g, *i))) return syntax(g, *i, "expecting integer");
    for (; is_digit(ch(g, *i)); (*i)++) {
        const unsigned d = (unsigned)(ch(g, *i) - '0');
        if (v > (lim - d) / 10) return syntax(g, start, "integer out of range");
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

// llama.cpp's lenient UTF-8 read of one character of grammar text: the length from the first byte, then that many
// following bytes whatever they are (up to the end).
static uint32_t read_utf8(const gp *g, size_t *i) {
    static const int len_of[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    const unsigned b = (unsigned)ch(g, *i);
    const int n = len_of[b >> 4];
    uint32_t v = b & ((1u << (8 - n)) - 1);
    const size_t end = *i + (size_t)n;
    for ((*i)++; *i < end && ch(g, *i); (*i)++) v = (v << 6) + ((unsigned)ch(g, *i) & 0x3F);
    return v;
}

static bool parse_hex(gp *g, size_t *i, int digits, uint32_t *out) {
    uint32_t v = 0;
    const size_t start = *i;
    for (int k = 0; k < digits; k++, (*i)++) {
        const int c = ch(g, *i);
        const int d = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
        if (d < 0) return syntax(g, start, "expecting %d hex chars", digits);
        v = (v << 4) + (uint32_t)d;
    }
    *out = v;
    return true;
}

// One character of a literal or class: an escape or a UTF-8 sequence.
static bool parse_char(gp *g, size_t *i, uint32_t *out) {
    const int c = ch(g, *i);
    if (c == '\\') {
        const int e = ch(g, *i + 1);
        *i += 2;
        switch (e) {
        case 'x': return parse_hex(g, i, 2, out);
        case 'u': return parse_hex(g, i, 4, out);
        case 'U': return parse_hex(g, i, 8, out);
        case 't': *out = '\t'; return true;
        case 'r': *out = '\r'; return true;
        case 'n': *out = '\n'; return true;
        case '\\': case '"': case '[': case ']': case '-': *out = (uint32_t)e; return true;
        default: return syntax(g, *i - 2, "unknown escape");
        }
    }
    if (!c) return syntax(g, *i, "unexpected end of input");
    *out = read_utf8(g, i);
    return true;
}

// <[id]> or <...> (a token's text, looked up) at *i.
static bool parse_token(gp *g, size_t *i, uint32_t *out) {
    const size_t start = *i;
    if (ch(g, *i) != '<') return syntax(g, *i, "expecting '<'");
    (*i)++;
    if (ch(g, *i) == '[') {
        (*i)++;
        uint64_t id;
        if (!parse_uint(g, i, UINT32_MAX, &id)) return false;
        if (ch(g, *i) != ']') return syntax(g, *i, "expecting ']'");
        if (ch(g, ++*i) != '>') return syntax(g, *i, "expecting '>'");
        (*i)++;
        *out = (uint32_t)id;
        return true;
    }
    if (!g->lookup) return syntax(g, start, "no vocabulary to look up <|...|>");
    while (ch(g, *i) && ch(g, *i) != '>') (*i)++;
    if (ch(g, *i) != '>') return syntax(g, *i, "expecting '>'");
    (*i)++;
    const int32_t id = g->lookup(g->lookup_ctx, g->src + start, *i - start);
    if (id < 0) {
        const int n = *i - start > 200 ? 200 : (int)(*i - start);
        return syntax(g, start, "invalid token '%.*s'", n, g->src + start);
    }
    *out = (uint32_t)id;
    return true;
}

// --- rules -----------------------------------------------------------------------------------------------------------

static bool parse_alternates(gp *g, size_t *i, int32_t name_sym, int32_t rule_id, bool nested);

// llama.cpp's repetition rewrite of rule->e[last..]: S{m,n} -> S (m times) S'(n-m), S'(x) ::= S S'(x-1) |,
// S'(1) ::= S |; S{m,} -> S (m times) S', S' ::= S S' |. no_max: n unbounded. *n_prev: the rules the item stands
// for (their product with the copies is bounded by max_repeat).
static bool repeat(gp *g, size_t at, gvec *rule, size_t last, int32_t name_sym, uint64_t min, uint64_t max,
                   bool no_max, uint64_t *n_prev) {
    if (last == rule->n) return syntax(g, at, "expecting preceding item to */+/?/{");
    uint64_t total = 1;
    if (!no_max && max > 0) total = max;
    else if (min > 0) total = min;
    if (*n_prev * total > (uint64_t)g->max_repeat)
        return syntax(g, at, "repetition copies more than max_repeat=%lld rules", (long long)g->max_repeat);
    const size_t n_item = rule->n - last;
    gvec item = {0};
    bool ok = grow(g, (void **)&item.e, &item.cap, n_item, sizeof *item.e);
    if (ok) memcpy(item.e, rule->e + last, n_item * sizeof *item.e), item.n = n_item;
    if (ok && min == 0) rule->n = last;
    for (uint64_t k = 1; ok && k < min; k++) ok = append(g, rule, item.e, n_item);
    const uint64_t n_opt = no_max ? 1 : max - min;
    int32_t last_rec = 0;
    for (uint64_t k = 0; ok && k < n_opt; k++) {
        gvec rec = {0};
        int32_t id = 0;
        ok = append(g, &rec, item.e, n_item) &&
             new_symbol(g, at, g->sym[name_sym].off, g->sym[name_sym].len, true, &id);
        if (ok && (k > 0 || no_max)) ok = push(g, &rec, GR_RULE_REF, (uint32_t)(no_max ? id : last_rec));
        ok = ok && push(g, &rec, GR_ALT, 0) && push(g, &rec, GR_END, 0) && add_rule(g, id, &rec);
        free(rec.e);
        last_rec = id;
    }
    if (ok && n_opt > 0) ok = push(g, rule, GR_RULE_REF, (uint32_t)last_rec);
    free(item.e);
    *n_prev *= total;
    return ok;
}

// One alternative's items into rule, up to the first character that starts none.
static bool parse_sequence(gp *g, size_t *i, int32_t name_sym, gvec *rule, bool nested) {
    size_t last = rule->n;
    uint64_t n_prev = 1;
    for (;;) {
        const int c = ch(g, *i);
        if (c == '"') {
            (*i)++;
            last = rule->n;
            n_prev = 1;
            while (ch(g, *i) != '"') {
                uint32_t cp;
                if (!ch(g, *i)) return syntax(g, *i, "unexpected end of input");
                if (!parse_char(g, i, &cp) || !push(g, rule, GR_CHAR, cp)) return false;
            }
            *i = skip_space(g, *i + 1, nested);
        } else if (c == '[') {
            (*i)++;
            uint32_t first = GR_CHAR;
            if (ch(g, *i) == '^') (*i)++, first = GR_CHAR_NOT;
            last = rule->n;
            n_prev = 1;
            while (ch(g, *i) != ']') {
                uint32_t cp;
                if (!ch(g, *i)) return syntax(g, *i, "unexpected end of input");
                if (!parse_char(g, i, &cp) || !push(g, rule, last < rule->n ? GR_CHAR_ALT : first, cp)) return false;
                if (ch(g, *i) == '-' && ch(g, *i + 1) != ']') {
                    if (!ch(g, *i + 1)) return syntax(g, *i + 1, "unexpected end of input");
                    (*i)++;
                    if (!parse_char(g, i, &cp) || !push(g, rule, GR_CHAR_RNG, cp)) return false;
                }
            }
            *i = skip_space(g, *i + 1, nested);
        } else if (c == '<' || c == '!') {
            uint32_t type = GR_TOKEN, id = 0;
            if (c == '!') type = GR_TOKEN_NOT, (*i)++;
            if (!parse_token(g, i, &id)) return false;
            last = rule->n;
            n_prev = 1;
            if (!push(g, rule, type, id)) return false;
            *i = skip_space(g, *i, nested);
        } else if (is_word(c)) {
            const size_t start = *i;
            while (is_word(ch(g, *i))) (*i)++;
            int32_t id;
            if (!symbol_id(g, start, *i - start, &id)) return false;
            *i = skip_space(g, *i, nested);
            last = rule->n;
            n_prev = 1;
            if (!push(g, rule, GR_RULE_REF, (uint32_t)id)) return false;
        } else if (c == '(') {
            if (g->depth >= GP_MAX_NEST) return syntax(g, *i, "groups nested more than %d deep", GP_MAX_NEST);
            *i = skip_space(g, *i + 1, true);
            const size_t before = g->n_sym;
            int32_t sub;
            if (!new_symbol(g, *i, g->sym[name_sym].off, g->sym[name_sym].len, true, &sub)) return false;
            g->depth++;
            const bool ok = parse_alternates(g, i, name_sym, sub, true);
            g->depth--;
            if (!ok) return false;
            n_prev = g->n_sym - before > 1 ? g->n_sym - before : 1;
            last = rule->n;
            if (!push(g, rule, GR_RULE_REF, (uint32_t)sub)) return false;
            if (ch(g, *i) != ')') return syntax(g, *i, "expecting ')'");
            *i = skip_space(g, *i + 1, nested);
        } else if (c == '.') {
            last = rule->n;
            n_prev = 1;
            if (!push(g, rule, GR_CHAR_ANY, 0)) return false;
            *i = skip_space(g, *i + 1, nested);
        } else if (c == '*' || c == '+' || c == '?') {
            *i = skip_space(g, *i + 1, nested);
            if (!repeat(g, *i, rule, last, name_sym, c == '+', c == '?', c != '?', &n_prev)) return false;
        } else if (c == '{') {
            const size_t at = *i;
            *i = skip_space(g, *i + 1, nested);
            if (!is_digit(ch(g, *i))) return syntax(g, *i, "expecting an int");
            uint64_t min, max = 0;
            bool no_max = true;
            if (!parse_uint(g, i, UINT64_MAX, &min)) return false;
            *i = skip_space(g, *i, nested);
            if (ch(g, *i) == '}') {
                max = min, no_max = false;
                *i = skip_space(g, *i + 1, nested);
            } else if (ch(g, *i) == ',') {
                *i = skip_space(g, *i + 1, nested);
                if (is_digit(ch(g, *i))) {
                    if (!parse_uint(g, i, UINT64_MAX, &max)) return false;
                    no_max = false;
                    *i = skip_space(g, *i, nested);
                }
                if (ch(g, *i) != '}') return syntax(g, *i, "expecting '}'");
                *i = skip_space(g, *i + 1, nested);
            } else {
                return syntax(g, *i, "expecting ','");
            }
            if (min > (uint64_t)g->max_repeat)
                return syntax(g, at, "repetition count %llu over max_repeat=%lld", (unsigned long long)min,
                              (long long)g->max_repeat);
            if (!no_max && max > (uint64_t)g->max_repeat) no_max = true; // llama.cpp: a large max means no max
            if (!no_max && max < min)
                return syntax(g, at, "repetition {%llu,%llu}: max below min", (unsigned long long)min,
                              (unsigned long long)max);
            if (!repeat(g, *i, rule, last, name_sym, min, max, no_max, &n_prev)) return false;
        } else {
            return true;
        }
    }
}

static bool parse_alternates(gp *g, size_t *i, int32_t name_sym, int32_t rule_id, bool nested) {
    gvec rule = {0};
    bool ok = parse_sequence(g, i, name_sym, &rule, nested);
    while (ok && ch(g, *i) == '|') {
        ok = push(g, &rule, GR_ALT, 0);
        *i = skip_space(g, *i + 1, true);
        ok = ok && parse_sequence(g, i, name_sym, &rule, nested);
    }
    ok = ok && push(g, &rule, GR_END, 0) && add_rule(g, rule_id, &rule);
    free(rule.e);
    return ok;
}

static bool parse_rule(gp *g, size_t *i) {
    const size_t start = *i;
    while (is_word(ch(g, *i))) (*i)++;
    if (*i == start) return syntax(g, start, "expecting name");
    int32_t id;
    if (!symbol_id(g, start, *i - start, &id)) return false;
    *i = skip_space(g, *i, false);
    if (!(ch(g, *i) == ':' && ch(g, *i + 1) == ':' && ch(g, *i + 2) == '=')) return syntax(g, *i, "expecting ::=");
    *i = skip_space(g, *i + 3, true);
    if (!parse_alternates(g, i, id, id, false)) return false;
    if (ch(g, *i) == '\r') *i += ch(g, *i + 1) == '\n' ? 2 : 1;
    else if (ch(g, *i) == '\n') (*i)++;
    else if (ch(g, *i)) return syntax(g, *i, "expecting newline or end");
    *i = skip_space(g, *i, true);
    return true;
}

// --- checks and the compiled form ------------------------------------------------------------------------------------

// llama.cpp's left-recursion check: rule r leads with s when some alternative of r starts with s after only rules that
// have an empty alternative of their own; a cycle of such edges is refused. Iterative (rules may chain deeply).
static bool check_left_recursion(gp *g, const kvt_grammar *c) {
    const int32_t n = c->n_rules;
    uint8_t *color = calloc((size_t)n, 1), *nullable = calloc((size_t)n, 1);
    int32_t *fr = malloc((size_t)n * 2 * sizeof *fr); // frames: (rule, element index)
    bool ok = color && nullable && fr;
    if (!ok) oom(g);
    for (int32_t r = 0; ok && r < n; r++) {
        bool at_start = true;
        for (int32_t e = c->rule_at[r];; e++) {
            if (gr_is_eos(c->el[e].type)) {
                if (at_start) {
                    nullable[r] = 1;
                    break;
                }
                at_start = true;
                if (c->el[e].type == GR_END) break;
            } else {
                at_start = false;
            }
        }
    }
    for (int32_t r0 = 0; ok && r0 < n; r0++) {
        if (color[r0]) continue;
        int32_t top = 0;
        fr[0] = r0, fr[1] = c->rule_at[r0];
        color[r0] = 1;
        bool lead = true; // the current frame's scan is still at the lead of an alternative
        while (ok && top >= 0) {
            int32_t *f = fr + 2 * top;
            const gr_elem e = c->el[f[1]];
            if (e.type == GR_END) {
                color[f[0]] = 2;
                top--;
                lead = false; // the caller moves past its reference below
                if (top >= 0) {
                    int32_t *p = fr + 2 * top;
                    lead = nullable[c->el[p[1]].value] != 0;
                    p[1]++;
                }
                continue;
            }
            if (e.type == GR_RULE_REF && lead) {
                const int32_t s = (int32_t)e.value;
                if (color[s] == 1) {
                    char nm[256];
                    ok = false;
                    g->st = kvt_errorf(g->err, KVT_ERR_INVALID_ARG, "left recursion in rule '%s'",
                                       symbol_name(g, s, nm, sizeof nm));
                } else if (color[s] == 0) {
                    color[s] = 1;
                    top++;
                    fr[2 * top] = s, fr[2 * top + 1] = c->rule_at[s];
                    lead = true;
                } else {
                    lead = nullable[s] != 0;
                    f[1]++;
                }
                continue;
            }
            lead = e.type == GR_ALT;
            f[1]++;
        }
    }
    free(color);
    free(nullable);
    free(fr);
    return ok;
}

static kvt_status compile(gp *g, const char *root, kvt_grammar **out) {
    char nm[256];
    if (g->n_rules == 0) return kvt_errorf(g->err, KVT_ERR_INVALID_ARG, "grammar has no rules");
    for (size_t r = 0; r < g->n_rules; r++) {
        if (!g->rules[r].n)
            return kvt_errorf(g->err, KVT_ERR_INVALID_ARG, "undefined rule '%s'",
                              symbol_name(g, (int32_t)r, nm, sizeof nm));
        for (size_t k = 0; k < g->rules[r].n; k++) {
            const gr_elem e = g->rules[r].e[k];
            if (e.type == GR_RULE_REF && (e.value >= g->n_rules || !g->rules[e.value].n))
                return kvt_errorf(g->err, KVT_ERR_INVALID_ARG, "undefined rule '%s'",
                                  symbol_name(g, (int32_t)e.value, nm, sizeof nm));
        }
    }
    const int32_t root_id = find_symbol(g, root, strlen(root));
    if (root_id < 0) return kvt_errorf(g->err, KVT_ERR_INVALID_ARG, "no rule '%.200s'", root);
    kvt_grammar *c = calloc(1, sizeof *c);
    if (!c) return kvt_errorf(g->err, KVT_ERR_NOMEM, "out of memory compiling a grammar");
    atomic_init(&c->refs, 1);
    c->n_rules = (int32_t)g->n_rules;
    c->root = root_id;
    size_t n_el = 0, n_alts = 0;
    for (size_t r = 0; r < g->n_rules; r++) {
        n_el += g->rules[r].n;
        for (size_t k = 0; k < g->rules[r].n; k++) n_alts += g->rules[r].e[k].type == GR_ALT;
        n_alts++;
    }
    c->n_el = (int32_t)n_el;
    c->el = malloc(n_el * sizeof *c->el);
    c->after = malloc(n_el * sizeof *c->after);
    c->rule_at = malloc(g->n_rules * sizeof *c->rule_at);
    c->alt_first = malloc((g->n_rules + 1) * sizeof *c->alt_first);
    c->alts = malloc(n_alts * sizeof *c->alts);
    if (!c->el || !c->after || !c->rule_at || !c->alt_first || !c->alts) {
        kvt_grammar_free(c);
        return kvt_errorf(g->err, KVT_ERR_NOMEM, "out of memory compiling a grammar");
    }
    int32_t at = 0, na = 0;
    for (size_t r = 0; r < g->n_rules; r++) {
        c->rule_at[r] = at;
        c->alt_first[r] = na;
        c->alts[na++] = at;
        memcpy(c->el + at, g->rules[r].e, g->rules[r].n * sizeof *c->el);
        for (size_t k = 0; k + 1 < g->rules[r].n; k++)
            if (g->rules[r].e[k].type == GR_ALT) c->alts[na++] = at + (int32_t)k + 1;
        at += (int32_t)g->rules[r].n;
    }
    c->alt_first[g->n_rules] = na;
    for (int32_t e = 0; e < c->n_el; e++) {
        const uint32_t t = c->el[e].type;
        int32_t p = -1;
        if (gr_is_token(t)) {
            p = e + 1;
        } else if (gr_is_char_start(t)) { // llama.cpp's walk over a class: [lo-hi] pairs and single members
            p = e;
            do p += c->el[p + 1].type == GR_CHAR_RNG ? 2 : 1;
            while (c->el[p].type == GR_CHAR_ALT);
        }
        c->after[e] = p;
    }
    if (!check_left_recursion(g, c)) {
        kvt_grammar_free(c);
        return g->st;
    }
    *out = c;
    return KVT_OK;
}

kvt_status kvt_grammar_parse(const char *src, size_t len, const char *root, const kvt_grammar_params *p,
                             kvt_grammar **out, kvt_err *err) {
    *out = NULL;
    const kvt_grammar_params def = kvt_grammar_params_default();
    if (!p) p = &def;
    if (!src && len) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "grammar text is NULL");
    if (p->max_repeat < 0 || p->max_rules < 1 || p->max_stacks < 1)
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "grammar bounds must be positive (max_repeat %d, max_rules %lld, "
                          "max_stacks %lld)", (int)p->max_repeat, (long long)p->max_rules, (long long)p->max_stacks);
    gp g = {.src = src, .len = len, .max_repeat = p->max_repeat, .lookup = p->token_lookup,
            .lookup_ctx = p->token_lookup_ctx, .err = err};
    g.max_rules = p->max_rules < (1 << 24) ? p->max_rules : (1 << 24); // element indices stay int32
    g.max_el = g.max_rules * GP_EL_PER_RULE;
    const char *nul = len ? memchr(src, 0, len) : NULL;
    size_t i = 0;
    if (nul) {
        syntax(&g, (size_t)(nul - src), "NUL byte in grammar text");
    } else {
        i = skip_space(&g, 0, true);
        while (i < len && parse_rule(&g, &i)) {}
    }
    kvt_status st = g.st;
    if (st == KVT_OK) st = compile(&g, root ? root : "root", out);
    for (size_t r = 0; r < g.n_rules; r++) free(g.rules[r].e);
    free(g.rules);
    free(g.sym);
    free(g.map);
    if (st == KVT_OK) (*out)->max_stacks = p->max_stacks;
    return st;
}

kvt_grammar *kvt_grammar_ref(const kvt_grammar *g) {
    kvt_grammar *m = (kvt_grammar *)g;
    if (m) atomic_fetch_add(&m->refs, 1);
    return m;
}

void kvt_grammar_free(kvt_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) > 1) return;
    free(g->el);
    free(g->after);
    free(g->rule_at);
    free(g->alt_first);
    free(g->alts);
    free(g);
}

int64_t kvt_grammar_n_rules(const kvt_grammar *g) { return g ? g->n_rules : 0; }
