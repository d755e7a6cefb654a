// json_schema.c - JSON schemas turned into GBNF grammar text with llama.cpp's language (json_schema.h).
//
// The schema is read as llama.cpp's converter reads it (json-schema.cpp picks one interpretation per node: $ref,
// then oneOf/anyOf, then a "type" array, const, enum, then the type or the structural keywords), and each node
// becomes the rules llama.cpp writes for it: no whitespace around the root or between a value and the ',' or '}'
// after it, `space` after '{', '[', ',' and ':' (and between a declared key and its ':'), its string characters
// and escapes, its 16-digit integral parts, its digit-range rules for bounded integers (json_schema_int.c), its
// property order (required properties in schema order, then optional ones in schema order, each optional one
// skippable), and its regular-expression subset for "pattern" (json_schema_pattern.c). Rule names follow llama.cpp's
// where that is harmless; the text differs where llama.cpp's would be broken (a property named "" taking the name
// "root", a property name with ']' or '\' inside a character class).
//
// Where llama.cpp silently ignores an assertion (a bound on a "number", "uniqueItems", "not", a pattern it cannot
// convert, a keyword beside $ref or anyOf), kvtier refuses the schema and names the path and the keyword: a
// grammar never accepts what its schema forbids, beyond the approximations llama.cpp makes by design (oneOf as
// anyOf, allOf merged as llama.cpp merges it). Annotations (title, description, default, examples, format
// values other than date, time, date-time and uuid, ...) and unknown keywords are ignored.
//
// Everything allocated during one conversion lives in a pool freed at the end; errors set c->st and return NULL.
#include "json_schema.h"
#include "json_schema_impl.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    MAX_DEPTH = 64,           // nested schemas and $ref hops on one path
    MAX_VISITS = 200000,      // schema nodes converted, $ref targets and allOf components included
    MAX_TYPE_PROBES = 10000,  // nodes inspected to learn the types a sub-schema admits
    MAX_KEY_CHARS = 1024,     // property names excluded from additional properties (a recursion per character)
};
#define MAX_OUTPUT ((size_t)32 << 20) // grammar text bytes
#define MAX_BOUND 1000000000000000000LL // |integer bounds| kvtier supports (1e18)

// JSON value types, as bits.
enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };

// How a schema node is read (llama.cpp's order of precedence).
typedef enum {
    K_BAD, K_ANY, K_REF, K_ANYOF, K_TYPES, K_CONST, K_ENUM, K_OBJECT, K_ALLOF, K_ARRAY, K_STRING, K_INT, K_NUM,
    K_BOOL, K_NULL
} kind;

typedef struct {
    char *name, *body;
} rule_t;

typedef struct {
    const char *ref;  // the $ref text
    const char *name; // its rule (reserved while active, final when done)
    int sdepth;       // structural depth when entered: a cycle at the same depth is left recursion
    bool done;
} ref_t;

struct kvt_js_cv {
    const json_t *root;
    const char *where;
    kvt_err *err;
    kvt_status st;
    void **pool;
    size_t npool, cpool;
    rule_t *rules;
    size_t nrules, crules;
    size_t *index; // open addressing: rule index + 1, 0 free
    size_t cindex;
    ref_t *refs;
    size_t nrefs, crefs;
    int depth, sdepth;
    long visits, probes;
    size_t bytes;
};

// ---- pooled strings ----

void *kvt_js_nomem(cv *c) {
    if (c->st == KVT_OK) c->st = kvt_errorf(c->err, KVT_ERR_NOMEM, "json schema: out of memory");
    return NULL;
}

void *kvt_js_fail(cv *c, const char *fmt, ...) {
    if (c->st != KVT_OK) return NULL;
    char msg[KVT_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = kvt_errorf(c->err, KVT_ERR_INVALID_ARG, "%s", msg);
    return NULL;
}

static char *own(cv *c, char *p) {
    if (!p) return kvt_js_nomem(c);
    if (!kvt_grow((void **)&c->pool, &c->cpool, c->npool + 1, sizeof *c->pool)) {
        free(p);
        return kvt_js_nomem(c);
    }
    c->pool[c->npool++] = p;
    return p;
}

// The builder's text, pooled ("" when empty), or NULL (out of memory).
char *kvt_js_take(cv *c, sb *s) {
    if (s->oom) {
        free(s->p);
        return kvt_js_nomem(c);
    }
    if (!s->p) return own(c, strdup(""));
    if (s->n > MAX_OUTPUT) {
        free(s->p);
        return kvt_js_fail(c, "%s: the grammar would exceed %zu MiB", c->where, MAX_OUTPUT >> 20);
    }
    return own(c, s->p);
}

char *kvt_js_pf(cv *c, const char *fmt, ...) {
    if (c->st != KVT_OK) return NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return kvt_js_nomem(c);
    if ((size_t)n > MAX_OUTPUT)
        return kvt_js_fail(c, "%s: the grammar would exceed %zu MiB", c->where, MAX_OUTPUT >> 20);
    char *p = malloc((size_t)n + 1);
    if (!p) return kvt_js_nomem(c);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return own(c, p);
}

// name joined to sub with '-' (just sub when name is empty).
static char *sub_name(cv *c, const char *name, const char *sub) {
    return *name ? kvt_js_pf(c, "%s-%s", name, sub) : kvt_js_pf(c, "%s", sub);
}

// ---- rules ----

static size_t hash_str(const char *s) {
    size_t h = 1469598103934665603ULL & SIZE_MAX;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * (size_t)1099511628211ULL;
    return h;
}

static rule_t *find_rule(const cv *c, const char *name) {
    if (!c->cindex) return NULL;
    for (size_t i = hash_str(name) & (c->cindex - 1);; i = (i + 1) & (c->cindex - 1)) {
        if (!c->index[i]) return NULL;
        rule_t *r = &c->rules[c->index[i] - 1];
        if (!strcmp(r->name, name)) return r;
    }
}

static bool index_put(size_t *index, size_t cap, const rule_t *rules, size_t k) {
    size_t i = hash_str(rules[k].name) & (cap - 1);
    while (index[i]) i = (i + 1) & (cap - 1);
    index[i] = k + 1;
    return true;
}

static bool new_rule(cv *c, char *name, char *body) {
    if (!kvt_grow((void **)&c->rules, &c->crules, c->nrules + 1, sizeof *c->rules)) return kvt_js_nomem(c), false;
    if (2 * (c->nrules + 1) > c->cindex) {
        size_t n = c->cindex ? c->cindex * 2 : 256;
        size_t *ix = calloc(n, sizeof *ix);
        if (!ix) return kvt_js_nomem(c), false;
        for (size_t k = 0; k < c->nrules; k++) index_put(ix, n, c->rules, k);
        free(c->index);
        c->index = ix;
        c->cindex = n;
    }
    c->rules[c->nrules] = (rule_t){name, body};
    index_put(c->index, c->cindex, c->rules, c->nrules++);
    c->bytes += strlen(name) + strlen(body) + 6;
    if (c->bytes > MAX_OUTPUT)
        return kvt_js_fail(c, "%s: the grammar would exceed %zu MiB", c->where, MAX_OUTPUT >> 20), false;
    return true;
}

static bool word_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
}

// name with each run of characters a rule name cannot hold turned into one '-'.
static char *sanitize(cv *c, const char *name) {
    sb s = {0};
    for (const char *p = name; *p;) {
        if (word_char(*p)) sb_putc(&s, *p++);
        else {
            sb_putc(&s, '-');
            while (*p && !word_char(*p)) p++;
        }
    }
    return kvt_js_take(c, &s);
}

// Defines `name ::= body` (name sanitized); a name taken by another body gets the first free numeric suffix.
// Returns the rule's name.
const char *kvt_js_add_rule(cv *c, const char *name, const char *body) {
    if (!name || !body) return NULL;
    char *esc = sanitize(c, name);
    if (!esc) return NULL;
    rule_t *r = find_rule(c, esc);
    if (r) {
        if (!strcmp(r->body, body)) return r->name;
        for (long i = 0;; i++) {
            char *cand = kvt_js_pf(c, "%s%ld", esc, i);
            if (!cand) return NULL;
            r = find_rule(c, cand);
            if (!r) {
                esc = cand;
                break;
            }
            if (!strcmp(r->body, body)) return r->name;
        }
    }
    char *b = own(c, strdup(body));
    if (!b || !new_rule(c, esc, b)) return NULL;
    return esc;
}

// llama.cpp's built-in rules (the space rule is always there).
static const char SPACE_BODY[] = "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}";
static const struct prim {
    const char *name, *body, *deps[6];
} PRIMS[] = {
    {"boolean", "(\"true\" | \"false\")", {0}},
    {"decimal-part", "[0-9]{1,16}", {0}},
    {"integral-part", "[0] | [1-9] [0-9]{0,15}", {0}},
    {"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)?",
     {"integral-part", "decimal-part", 0}},
    {"integer", "(\"-\"? integral-part)", {"integral-part", 0}},
    {"value", "object | array | string | number | boolean | null",
     {"object", "array", "string", "number", "boolean", "null"}},
    {"object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? space \"}\"",
     {"string", "value", 0}},
    {"array", "\"[\" space ( value (\",\" space value)* )? space \"]\"", {"value", 0}},
    {"uuid",
     "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
     "[0-9a-fA-F]{12} \"\\\"\"",
     {0}},
    {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})", {0}},
    {"string", "\"\\\"\" char* \"\\\"\"", {"char", 0}},
    {"null", "\"null\"", {0}},
    {"date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1] )", {0}},
    {"time",
     "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? ( \"Z\" | ( \"+\" | \"-\" ) "
     "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
     {0}},
    {"date-time", "date \"T\" time", {"date", "time", 0}},
    {"date-string", "\"\\\"\" date \"\\\"\"", {"date", 0}},
    {"time-string", "\"\\\"\" time \"\\\"\"", {"time", 0}},
    {"date-time-string", "\"\\\"\" date-time \"\\\"\"", {"date-time", 0}},
};

static const struct prim *prim(const char *name) {
    for (size_t i = 0; i < sizeof PRIMS / sizeof *PRIMS; i++)
        if (!strcmp(PRIMS[i].name, name)) return &PRIMS[i];
    return NULL;
}

static bool reserved(const char *name) { return !strcmp(name, "root") || prim(name); }

// Adds the built-in rule `type` (under `as`, e.g. "root") and the built-ins it needs; returns its name.
static const char *add_prim(cv *c, const char *as, const char *type) {
    const struct prim *p = prim(type);
    const char *n = kvt_js_add_rule(c, as, p->body);
    for (int i = 0; n && i < 6 && p->deps[i]; i++)
        if (!find_rule(c, p->deps[i]) && !add_prim(c, p->deps[i], p->deps[i])) return NULL;
    return n;
}

// ---- JSON text as llama.cpp writes it (nlohmann's dump: compact, UTF-8 kept) and GBNF literals ----

static void dump_double(sb *s, double d) {
    char buf[40];
    int prec = 1;
    for (; prec <= 17; prec++) { // the shortest %e form that reads back the same
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d) break;
    }
    char digits[24];
    int nd = 0;
    const char *p = buf;
    if (*p == '-') {
        sb_putc(s, '-');
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (nd == 1 && digits[0] == '0') exp10 = 0;
    digits[nd] = 0;
    const int n = exp10 + 1; // digits before the point
    if (nd <= n && n <= 15) {
        sb_puts(s, digits);
        for (int i = nd; i < n; i++) sb_putc(s, '0');
        sb_puts(s, ".0");
    } else if (0 < n && n <= 15) {
        sb_putn(s, digits, (size_t)n);
        sb_putc(s, '.');
        sb_puts(s, digits + n);
    } else if (-4 < n && n <= 0) {
        sb_puts(s, "0.");
        for (int i = n; i < 0; i++) sb_putc(s, '0');
        sb_puts(s, digits);
    } else {
        sb_putc(s, digits[0]);
        if (nd > 1) {
            sb_putc(s, '.');
            sb_puts(s, digits + 1);
        }
        const int e = n - 1;
        sb_printf(s, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

static void dump_string(sb *s, const char *x, size_t n) {
    sb_putc(s, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)x[i];
        switch (ch) {
        case '"': sb_puts(s, "\\\""); break;
        case '\\': sb_puts(s, "\\\\"); break;
        case '\b': sb_puts(s, "\\b"); break;
        case '\f': sb_puts(s, "\\f"); break;
        case '\n': sb_puts(s, "\\n"); break;
        case '\r': sb_puts(s, "\\r"); break;
        case '\t': sb_puts(s, "\\t"); break;
        default:
            if (ch < 0x20) sb_printf(s, "\\u%04x", ch);
            else sb_putc(s, (char)ch);
        }
    }
    sb_putc(s, '"');
}

static void dump_json(sb *s, const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *e;
        bool first = true;
        sb_putc(s, '{');
        json_object_foreach((json_t *)v, k, e) {
            if (!first) sb_putc(s, ',');
            first = false;
            dump_string(s, k, strlen(k));
            sb_putc(s, ':');
            dump_json(s, e);
        }
        sb_putc(s, '}');
        break;
    }
    case JSON_ARRAY:
        sb_putc(s, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) sb_putc(s, ',');
            dump_json(s, json_array_get(v, i));
        }
        sb_putc(s, ']');
        break;
    case JSON_STRING: dump_string(s, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER: sb_printf(s, "%lld", (long long)json_integer_value(v)); break;
    case JSON_REAL: dump_double(s, json_real_value(v)); break;
    case JSON_TRUE: sb_puts(s, "true"); break;
    case JSON_FALSE: sb_puts(s, "false"); break;
    case JSON_NULL: sb_puts(s, "null"); break;
    }
}

// The GBNF literal matching exactly the JSON text of v.
static char *json_literal(cv *c, const json_t *v) {
    sb d = {0}, s = {0};
    dump_json(&d, v);
    if (d.oom) {
        free(d.p);
        return kvt_js_nomem(c);
    }
    sb_putc(&s, '"');
    for (size_t i = 0; i < d.n; i++) {
        char ch = d.p[i];
        if (ch == '"' || ch == '\\') sb_putc(&s, '\\');
        if (ch == '\r') sb_puts(&s, "\\r");
        else if (ch == '\n') sb_puts(&s, "\\n");
        else sb_putc(&s, ch);
    }
    sb_putc(&s, '"');
    free(d.p);
    return kvt_js_take(c, &s);
}

static char *key_literal(cv *c, const char *key) {
    json_t *k = json_string(key);
    if (!k) return kvt_js_nomem(c);
    char *r = json_literal(c, k);
    json_decref(k);
    return r;
}

static unsigned value_type(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE:
    case JSON_FALSE: return T_BOOL;
    case JSON_INTEGER: return T_INT;
    case JSON_REAL: return T_NUM;
    case JSON_STRING: return T_STR;
    case JSON_ARRAY: return T_ARR;
    default: return T_OBJ;
    }
}

// Types a "type" name admits (0: unknown).
static unsigned type_bits(const char *t) {
    static const struct {
        const char *n;
        unsigned b;
    } T[] = {{"null", T_NULL},          {"boolean", T_BOOL}, {"integer", T_INT}, {"number", T_NUM | T_INT},
             {"string", T_STR},         {"array", T_ARR},    {"object", T_OBJ}};
    for (size_t i = 0; i < sizeof T / sizeof *T; i++)
        if (!strcmp(T[i].n, t)) return T[i].b;
    return 0;
}

// ---- keywords ----

static const json_t *get(const json_t *s, const char *k) { return json_is_object(s) ? json_object_get(s, k) : NULL; }

// The assertion keywords and the types they constrain; anything else is an annotation or unknown, and ignored.
static const struct {
    const char *kw;
    unsigned types;
} ASSERTIONS[] = {
    {"type", T_ALL},         {"enum", T_ALL},          {"const", T_ALL},         {"allOf", T_ALL},
    {"anyOf", T_ALL},        {"oneOf", T_ALL},         {"not", T_ALL},           {"if", T_ALL},
    {"then", T_ALL},         {"else", T_ALL},          {"$ref", T_ALL},          {"$dynamicRef", T_ALL},
    {"$recursiveRef", T_ALL}, {"minimum", T_INT | T_NUM}, {"maximum", T_INT | T_NUM},
    {"exclusiveMinimum", T_INT | T_NUM}, {"exclusiveMaximum", T_INT | T_NUM}, {"multipleOf", T_INT | T_NUM},
    {"minLength", T_STR},    {"maxLength", T_STR},     {"pattern", T_STR},       {"items", T_ARR},
    {"prefixItems", T_ARR},  {"minItems", T_ARR},      {"maxItems", T_ARR},      {"uniqueItems", T_ARR},
    {"contains", T_ARR},     {"minContains", T_ARR},   {"maxContains", T_ARR},   {"unevaluatedItems", T_ARR},
    {"properties", T_OBJ},   {"required", T_OBJ},      {"additionalProperties", T_OBJ},
    {"patternProperties", T_OBJ}, {"minProperties", T_OBJ}, {"maxProperties", T_OBJ}, {"propertyNames", T_OBJ},
    {"dependentRequired", T_OBJ}, {"dependentSchemas", T_OBJ}, {"dependencies", T_OBJ},
    {"unevaluatedProperties", T_OBJ},
};

// A value of the keyword that constrains nothing.
static bool vacuous(const char *k, const json_t *v) {
    if (!strcmp(k, "uniqueItems")) return json_is_false(v);
    if (!strcmp(k, "additionalProperties") || !strcmp(k, "unevaluatedProperties") || !strcmp(k, "unevaluatedItems"))
        return json_is_true(v);
    if (!strcmp(k, "required")) return json_is_array(v) && json_array_size(v) == 0;
    if (!strcmp(k, "minItems") || !strcmp(k, "minLength") || !strcmp(k, "minProperties") ||
        !strcmp(k, "minContains"))
        return json_is_integer(v) && json_integer_value(v) == 0;
    return false;
}

// Refuses an assertion keyword of s that constrains one of `types` and is not in handled (NULL-terminated).
static bool check_kw(cv *c, const json_t *s, const char *path, unsigned types, const char *const *handled) {
    if (!json_is_object(s)) return true;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        unsigned app = 0;
        for (size_t i = 0; i < sizeof ASSERTIONS / sizeof *ASSERTIONS; i++)
            if (!strcmp(ASSERTIONS[i].kw, k)) app = ASSERTIONS[i].types;
        if (!(app & types) || vacuous(k, v)) continue;
        bool ok = false;
        for (const char *const *h = handled; h && *h && !ok; h++) ok = !strcmp(*h, k);
        if (!ok) {
            const char *why = "";
            if (!strcmp(k, "type"))
                why = " here (it would not restrict the values the rest of the schema admits)";
            else if (get(s, "$ref") || get(s, "anyOf") || get(s, "oneOf"))
                why = " beside $ref/anyOf/oneOf";
            else if (app == (T_INT | T_NUM) && (types & T_NUM) && strcmp(k, "multipleOf"))
                why = " on a number (only integers are bounded)";
            return kvt_js_fail(c, "%s.%s: not supported by kvtier%s", path, k, why), false;
        }
    }
    return true;
}

static bool known_format(const char *f) {
    return !strcmp(f, "date") || !strcmp(f, "time") || !strcmp(f, "date-time") || !strcmp(f, "uuid") ||
           (strlen(f) == 5 && !strncmp(f, "uuid", 4) && f[4] >= '1' && f[4] <= '5');
}

// llama.cpp's reading of a node; forced: the type of one branch of a "type" array.
static kind classify(const json_t *s, const char *forced) {
    if (json_is_true(s)) return K_ANY;
    if (!json_is_object(s)) return K_BAD;
    if (get(s, "$ref")) return K_REF;
    if (get(s, "oneOf") || get(s, "anyOf")) return K_ANYOF;
    const json_t *t = forced ? NULL : get(s, "type");
    if (json_is_array(t)) return K_TYPES;
    if (get(s, "const")) return K_CONST;
    if (get(s, "enum")) return K_ENUM;
    if (t && !json_is_string(t)) return K_BAD;
    const char *tn = forced ? forced : t ? json_string_value(t) : NULL;
    const json_t *ap = get(s, "additionalProperties");
    const bool hp = get(s, "properties") || (ap && !json_is_true(ap));
    const json_t *f = get(s, "format");
    if (!tn) {
        if (hp) return K_OBJECT;
        if (get(s, "allOf")) return K_ALLOF;
        if (get(s, "items") || get(s, "prefixItems")) return K_ARRAY;
        if (get(s, "pattern") || get(s, "minLength") || get(s, "maxLength") ||
            (json_is_string(f) && known_format(json_string_value(f))))
            return K_STRING;
        return K_ANY;
    }
    if (!strcmp(tn, "object")) return !hp && get(s, "allOf") ? K_ALLOF : K_OBJECT;
    if (!strcmp(tn, "string")) return get(s, "allOf") ? K_ALLOF : K_STRING;
    if (!strcmp(tn, "array")) return K_ARRAY;
    if (!strcmp(tn, "integer")) return K_INT;
    if (!strcmp(tn, "number")) return K_NUM;
    if (!strcmp(tn, "boolean")) return K_BOOL;
    if (!strcmp(tn, "null")) return K_NULL;
    return K_BAD;
}

// ---- $ref ----

// The target of a local reference "#/a/b/0" (JSON pointer, ~0 ~1 unescaped); *tpath: its path for messages.
static const json_t *resolve(cv *c, const char *ref, const char *path, const char **tpath, bool quiet) {
    if (strncmp(ref, "#/", 2)) {
        if (!quiet)
            kvt_js_fail(c, "%s.$ref: '%s' not supported by kvtier (only local references \"#/...\")", path, ref);
        return NULL;
    }
    const json_t *t = c->root;
    sb tp = {0}, tok = {0};
    sb_puts(&tp, c->where);
    for (const char *p = ref + 2;; p++) {
        tok.n = 0;
        sb_putn(&tok, "", 0);
        for (; *p && *p != '/'; p++) {
            if (*p == '~' && p[1] == '1') sb_putc(&tok, '/'), p++;
            else if (*p == '~' && p[1] == '0') sb_putc(&tok, '~'), p++;
            else sb_putc(&tok, *p);
        }
        if (tok.oom || tp.oom) break;
        const json_t *n = NULL;
        if (json_is_object(t)) n = json_object_get(t, tok.p);
        else if (json_is_array(t)) {
            char *end;
            unsigned long long i = strtoull(tok.p, &end, 10);
            if (*tok.p >= '0' && *tok.p <= '9' && !*end) n = json_array_get(t, (size_t)i);
        }
        if (!n) {
            if (!quiet) kvt_js_fail(c, "%s.$ref: cannot resolve '%s' ('%s' not found)", path, ref, tok.p);
            free(tok.p);
            free(tp.p);
            return NULL;
        }
        sb_putc(&tp, '.');
        sb_puts(&tp, tok.p);
        t = n;
        if (!*p) break;
    }
    free(tok.p);
    if (tok.oom || tp.oom) {
        free(tp.p);
        return kvt_js_nomem(c);
    }
    *tpath = kvt_js_take(c, &tp);
    return *tpath ? t : NULL;
}

// Follows $refs from s (at most MAX_DEPTH hops); NULL (quietly) when one cannot be followed.
static const json_t *deref(cv *c, const json_t *s, const char **path, bool quiet) {
    for (int hops = 0; classify(s, NULL) == K_REF; hops++) {
        const json_t *r = get(s, "$ref");
        if (hops >= MAX_DEPTH || !json_is_string(r)) {
            if (!quiet)
                kvt_js_fail(c, "%s.$ref: %s", *path,
                            json_is_string(r) ? "cyclic or too long a chain" : "must be a string");
            return NULL;
        }
        s = resolve(c, json_string_value(r), *path, path, quiet);
        if (!s) return NULL;
    }
    return s;
}

// The types a value of s may have, as llama.cpp's grammar admits them.
static unsigned types_of(cv *c, const json_t *s, const char *forced, int depth) {
    if (++c->probes > MAX_TYPE_PROBES || depth > MAX_DEPTH) return T_ALL;
    unsigned m = 0;
    switch (classify(s, forced)) {
    case K_REF: {
        const char *p = "";
        const json_t *r = get(s, "$ref"), *t = json_is_string(r) ? resolve(c, json_string_value(r), p, &p, true) : NULL;
        return t ? types_of(c, t, NULL, depth + 1) : T_ALL;
    }
    case K_ANYOF: {
        const json_t *a = get(s, get(s, "oneOf") ? "oneOf" : "anyOf");
        for (size_t i = 0; i < json_array_size(a); i++) m |= types_of(c, json_array_get(a, i), NULL, depth + 1);
        return json_array_size(a) ? m : T_ALL;
    }
    case K_TYPES: {
        const json_t *t = get(s, "type");
        for (size_t i = 0; i < json_array_size(t); i++)
            m |= json_is_string(json_array_get(t, i)) ? types_of(c, s, json_string_value(json_array_get(t, i)), depth + 1)
                                                     : T_ALL;
        return m;
    }
    case K_CONST: return value_type(get(s, "const"));
    case K_ENUM: {
        const json_t *e = get(s, "enum");
        for (size_t i = 0; i < json_array_size(e); i++) m |= value_type(json_array_get(e, i));
        return json_array_size(e) ? m : T_ALL;
    }
    case K_ALLOF: {
        const json_t *a = get(s, "allOf");
        m = T_ALL;
        for (size_t i = 0; i < json_array_size(a); i++) m &= types_of(c, json_array_get(a, i), NULL, depth + 1);
        return m;
    }
    case K_OBJECT: return T_OBJ;
    case K_ARRAY: return T_ARR;
    case K_STRING: return T_STR;
    case K_INT: return T_INT;
    case K_NUM: return T_NUM | T_INT;
    case K_BOOL: return T_BOOL;
    case K_NULL: return T_NULL;
    default: return T_ALL;
    }
}

// True when "type" beside $ref/anyOf/oneOf admits every type the rest admits (so ignoring it changes nothing).
static bool type_redundant(cv *c, const json_t *s, unsigned rest) {
    const json_t *t = get(s, "type");
    unsigned allowed = 0;
    if (json_is_string(t)) allowed = type_bits(json_string_value(t));
    for (size_t i = 0; json_is_array(t) && i < json_array_size(t); i++)
        if (json_is_string(json_array_get(t, i))) allowed |= type_bits(json_string_value(json_array_get(t, i)));
    (void)c;
    return allowed && !(rest & ~allowed);
}

// ---- repetitions and integers ----

// item repeated min..max times (max < 0: unbounded), items separated by sep (NULL: none).
char *kvt_js_repeat(cv *c, const char *item, long mn, long mx, const char *sep) {
    if (!item) return NULL;
    if (mx == 0) return kvt_js_pf(c, "%s", "");
    if (mn == 0 && mx == 1) return kvt_js_pf(c, "%s?", item);
    if (!sep) {
        if (mn == 1 && mx < 0) return kvt_js_pf(c, "%s+", item);
        if (mn == 0 && mx < 0) return kvt_js_pf(c, "%s*", item);
        if (mx < 0) return kvt_js_pf(c, "%s{%ld,}", item, mn);
        return kvt_js_pf(c, "%s{%ld,%ld}", item, mn, mx);
    }
    char *inner = kvt_js_pf(c, "(%s %s)", sep, item);
    char *rest = kvt_js_repeat(c, inner, mn ? mn - 1 : 0, mx < 0 ? mx : mx - 1, NULL);
    if (!rest) return NULL;
    return mn ? kvt_js_pf(c, "%s %s", item, rest) : kvt_js_pf(c, "(%s %s)?", item, rest);
}

static bool check_count(cv *c, const char *path, const char *kw, long v) {
    if (v > MAX_REPEAT)
        return kvt_js_fail(c, "%s.%s: %ld is more than the %d repetitions a grammar allows", path, kw, v, MAX_REPEAT),
               false;
    return true;
}

// An integer bound: a number, a fractional one rounded towards the integers it admits.
static bool bound(cv *c, const json_t *s, const char *path, const char *kw, bool up, int64_t *out) {
    const json_t *v = get(s, kw);
    double d;
    if (json_is_integer(v)) d = (double)json_integer_value(v);
    else if (json_is_real(v)) d = up ? ceil(json_real_value(v)) : floor(json_real_value(v));
    else return kvt_js_fail(c, "%s.%s: must be a number", path, kw), false;
    if (d < (double)-MAX_BOUND || d > (double)MAX_BOUND)
        return kvt_js_fail(c, "%s.%s: out of the range kvtier supports (-1e18..1e18)", path, kw), false;
    *out = json_is_integer(v) ? (int64_t)json_integer_value(v) : (int64_t)d;
    return true;
}

// ---- objects ----

static const char *visit(cv *c, const json_t *s, const char *name, const char *path, const char *forced);

// A JSON string that is none of names[0..n): llama.cpp's trie over code points (a name's proper prefixes are
// excluded too, as there), run over each name's JSON text (llama.cpp's runs over the raw name, which differs for a
// name with '"', '\\' or a control character). Characters special in a class are written as \xHH.
typedef struct tnode {
    uint32_t cp;
    bool end;
    struct tnode *kid, *next;
} tnode;

static void class_char(sb *o, uint32_t cp) {
    if (cp < 0x20 || cp == ']' || cp == '\\' || cp == '^' || cp == '-' || cp == '"') sb_printf(o, "\\x%02X", cp);
    else if (cp < 0x80) sb_putc(o, (char)cp);
    else {
        char u[4];
        int k = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        u[0] = (char)(k == 2 ? 0xC0 | (cp >> 6) : k == 3 ? 0xE0 | (cp >> 12) : 0xF0 | (cp >> 18));
        for (int j = 1; j < k; j++) u[j] = (char)(0x80 | ((cp >> (6 * (k - 1 - j))) & 0x3F));
        sb_putn(o, u, (size_t)k);
    }
}

static void trie_out(sb *o, const tnode *t, const char *ch) {
    sb rej = {0};
    for (const tnode *k = t->kid; k; k = k->next) {
        if (k != t->kid) sb_puts(o, " | ");
        sb_putc(o, '[');
        class_char(o, k->cp);
        sb_putc(o, ']');
        class_char(&rej, k->cp);
        if (k->kid) {
            sb_puts(o, " (");
            trie_out(o, k, ch);
            sb_putc(o, ')');
        } else sb_printf(o, " %s+", ch);
    }
    if (t->kid) {
        sb_puts(o, " | [^\"");
        if (rej.p) sb_puts(o, rej.p);
        sb_printf(o, "] %s*", ch);
    }
    if (rej.oom) o->oom = true;
    free(rej.p);
}

static void trie_free(tnode *t) {
    while (t) {
        tnode *n = t->next;
        trie_free(t->kid);
        free(t);
        t = n;
    }
}

static uint32_t utf8_next(const char **p) {
    const unsigned char *s = (const unsigned char *)*p;
    uint32_t cp = s[0];
    int k = cp < 0x80 ? 0 : cp < 0xE0 ? 1 : cp < 0xF0 ? 2 : 3;
    if (k) cp &= 0x3F >> k;
    int j = 1;
    for (; j <= k && (s[j] & 0xC0) == 0x80; j++) cp = (cp << 6) | (s[j] & 0x3F);
    *p += j;
    return cp;
}

static const char *not_strings(cv *c, const char *const *names, size_t n, const char *path) {
    const char *ch = add_prim(c, "char", "char");
    if (!ch) return NULL;
    tnode root = {0};
    bool oom = false;
    for (size_t i = 0; i < n && !oom; i++) {
        if (strlen(names[i]) > MAX_KEY_CHARS) {
            trie_free(root.kid);
            return kvt_js_fail(c, "%s.properties: a property name over %d bytes beside additionalProperties", path,
                               MAX_KEY_CHARS);
        }
        // the name as its JSON text spells it (what the property's literal matches), quotes dropped
        sb d = {0};
        dump_string(&d, names[i], strlen(names[i]));
        const char *lit = kvt_js_take(c, &d);
        if (!lit) {
            trie_free(root.kid);
            return NULL;
        }
        tnode *t = &root;
        for (const char *p = lit + 1; *p && p[1] && !oom;) { // inside the quotes
            uint32_t cp = utf8_next(&p);
            tnode **at = &t->kid;
            while (*at && (*at)->cp < cp) at = &(*at)->next;
            if (!*at || (*at)->cp != cp) {
                tnode *k = calloc(1, sizeof *k);
                if (!k) {
                    oom = true;
                    break;
                }
                k->cp = cp;
                k->next = *at;
                *at = k;
            }
            t = *at;
        }
        t->end = true;
    }
    sb o = {0};
    sb_puts(&o, "[\"] ( ");
    trie_out(&o, &root, ch);
    sb_puts(&o, root.end ? " )" : " )?");
    sb_puts(&o, " [\"]");
    trie_free(root.kid);
    if (oom) o.oom = true;
    return kvt_js_take(c, &o);
}

typedef struct {
    const char *key;         // property name
    const json_t *schema;
    const char *path;
    bool required;
    const char *kv;          // its "key": value rule
} prop;

// The object rule: required properties in order, then the optional ones in order (each skippable), then the
// additional ones (add: NULL none, else the value schema; any: additionalProperties admits any value).
static const char *object_rule(cv *c, prop *ps, size_t np, const json_t *add, bool any, const char *name,
                               const char *path, const char *add_path) {
    const char **names = malloc((np + 1) * sizeof *names);
    const char **opt = malloc((np + 2) * sizeof *opt);
    const char *result = NULL;
    if (!names || !opt) {
        kvt_js_nomem(c);
        goto out;
    }
    c->sdepth++;
    size_t nopt = 0;
    for (size_t i = 0; i < np; i++) {
        char *pn = *name ? kvt_js_pf(c, "%s-%s", name, ps[i].key) : kvt_js_pf(c, "%s", ps[i].key);
        if (pn && !*pn) pn = kvt_js_pf(c, "%s", "empty"); // never "root": that is the document's rule
        const char *vr = pn ? visit(c, ps[i].schema, pn, ps[i].path, NULL) : NULL;
        const char *lit = key_literal(c, ps[i].key);
        if (!vr || !lit) goto out;
        ps[i].kv = kvt_js_add_rule(c, kvt_js_pf(c, "%s-kv", pn), kvt_js_pf(c, "%s space \":\" space %s", lit, vr));
        if (!ps[i].kv) goto out;
        names[i] = ps[i].key;
        if (!ps[i].required) opt[nopt++] = ps[i].kv;
    }
    const char *add_kv = NULL;
    if (add || any) {
        char *sn = sub_name(c, name, "additional");
        const char *vr = !sn ? NULL
                         : any ? add_prim(c, "value", "value")
                               : visit(c, add, kvt_js_pf(c, "%s-value", sn), add_path, NULL);
        const char *kr = !vr ? NULL : np ? kvt_js_add_rule(c, kvt_js_pf(c, "%s-k", sn), not_strings(c, names, np, path))
                                         : add_prim(c, "string", "string");
        add_kv = kr ? kvt_js_add_rule(c, kvt_js_pf(c, "%s-kv", sn), kvt_js_pf(c, "%s \":\" space %s", kr, vr)) : NULL;
        if (!add_kv) goto out;
    }
    c->sdepth--;
    size_t nreq = 0;
    for (size_t i = 0; i < np; i++) nreq += ps[i].required;
    if (!nreq && !nopt && !add_kv) {
        result = kvt_js_pf(c, "%s", "\"{\" space \"}\"");
        goto out;
    }
    sb o = {0};
    sb_puts(&o, "\"{\" space ");
    size_t k = 0;
    for (size_t i = 0; i < np; i++)
        if (ps[i].required) {
            if (k++) sb_puts(&o, " \",\" space ");
            sb_puts(&o, ps[i].kv);
        }
    const size_t nall = nopt + (add_kv != NULL);
    if (nall) {
        // rest[j]: what may follow the j-th optional entry (its rule name), built from the last one back
        const char **rest = calloc(nall, sizeof *rest);
        if (!rest) {
            free(o.p);
            kvt_js_nomem(c);
            goto out;
        }
        if (add_kv) opt[nopt] = add_kv;
        // optional keys by name for the rest rules' names
        const char **keys = malloc(nall * sizeof *keys);
        if (!keys) {
            free(rest);
            free(o.p);
            kvt_js_nomem(c);
            goto out;
        }
        for (size_t i = 0, j = 0; i < np; i++)
            if (!ps[i].required) keys[j++] = ps[i].key;
        if (add_kv) keys[nopt] = "*";
        bool ok = true;
        for (size_t j = nall - 1; j-- > 0 && ok;) {
            const bool star = add_kv && j + 1 == nopt;
            char *body = kvt_js_pf(c, "( \",\" space %s )%s%s%s", opt[j + 1], star ? "*" : "?", rest[j + 1] ? " " : "",
                                   rest[j + 1] ? rest[j + 1] : "");
            char *rn = *name ? kvt_js_pf(c, "%s-%s-rest", name, keys[j]) : kvt_js_pf(c, "%s-rest", keys[j]);
            rest[j] = kvt_js_add_rule(c, rn, body);
            ok = rest[j] != NULL;
        }
        if (ok) {
            sb_puts(&o, " (");
            if (nreq) sb_puts(&o, " \",\" space ( ");
            for (size_t j = 0; j < nall; j++) { // starting with optional entry j
                if (j) sb_puts(&o, " | ");
                sb_puts(&o, opt[j]);
                if (add_kv && j == nopt) {
                    sb_puts(&o, " ( \",\" space ");
                    sb_puts(&o, add_kv);
                    sb_puts(&o, " )*");
                } else if (rest[j]) {
                    sb_putc(&o, ' ');
                    sb_puts(&o, rest[j]);
                }
            }
            if (nreq) sb_puts(&o, " )");
            sb_puts(&o, " )?");
        }
        free(rest);
        free(keys);
        if (!ok) {
            free(o.p);
            goto out;
        }
    }
    sb_puts(&o, " space \"}\"");
    result = kvt_js_take(c, &o);
out:
    free(names);
    free(opt);
    return result;
}

static bool is_any(const json_t *s) { return classify(s, NULL) == K_ANY; }

static const char *const OBJ_KW[] = {"type", "properties", "required", "additionalProperties", NULL};

static const char *visit_object(cv *c, const json_t *s, const char *name, const char *rule_name, const char *path) {
    if (!check_kw(c, s, path, T_OBJ, OBJ_KW)) return NULL;
    const json_t *props = get(s, "properties"), *req = get(s, "required"), *ap = get(s, "additionalProperties");
    if (props && !json_is_object(props)) return kvt_js_fail(c, "%s.properties: must be an object", path);
    if (req && !json_is_array(req)) return kvt_js_fail(c, "%s.required: must be an array of strings", path);
    for (size_t i = 0; i < json_array_size(req); i++) {
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) return kvt_js_fail(c, "%s.required.%zu: must be a string", path, i);
        if (!get(props, json_string_value(r)))
            return kvt_js_fail(c, "%s.required: '%s' is not among the properties (not supported by kvtier)", path,
                               json_string_value(r));
    }
    const json_t *add = NULL;
    bool any = false;
    if (ap) {
        if (json_is_true(ap)) any = true;
        else if (json_is_object(ap)) {
            if (is_any(ap)) {
                if (!check_kw(c, ap, kvt_js_pf(c, "%s.additionalProperties", path), T_ALL, NULL)) return NULL;
                any = true;
            } else add = ap;
        } else if (!json_is_false(ap))
            return kvt_js_fail(c, "%s.additionalProperties: must be a boolean or a schema", path);
    } else if (!props) any = true;
    const size_t np = json_object_size(props);
    if (!np && any) return kvt_js_add_rule(c, rule_name, add_prim(c, "object", "object"));
    prop *ps = calloc(np + 1, sizeof *ps);
    if (!ps) return kvt_js_nomem(c);
    size_t k = 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)props, key, v) {
        bool r = false;
        for (size_t i = 0; i < json_array_size(req); i++) r |= !strcmp(json_string_value(json_array_get(req, i)), key);
        ps[k++] = (prop){key, v, kvt_js_pf(c, "%s.properties.%s", path, key), r, NULL};
    }
    const char *body = object_rule(c, ps, np, add, any, name, path, kvt_js_pf(c, "%s.additionalProperties", path));
    free(ps);
    return body ? kvt_js_add_rule(c, rule_name, body) : NULL;
}

// allOf as llama.cpp merges it: objects (their properties all required) and anyOf alternatives that are objects
// (their properties optional), or enums (their common values).
static const char *visit_all_of(cv *c, const json_t *s, const char *name, const char *rule_name, const char *path) {
    const json_t *a = get(s, "allOf");
    if (!json_is_array(a) || !json_array_size(a))
        return kvt_js_fail(c, "%s.allOf: must be a non-empty array of schemas", path);
    if (!check_kw(c, s, path, T_ALL, (const char *const[]){"type", "allOf", NULL})) return NULL;
    const size_t n = json_array_size(a);
    size_t cap = 16, np = 0, nenum = 0, nobj = 0;
    prop *ps = malloc(cap * sizeof *ps);
    const json_t **enums = malloc(n * sizeof *enums);
    const char *result = NULL;
    if (!ps || !enums) {
        kvt_js_nomem(c);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const char *cp = kvt_js_pf(c, "%s.allOf.%zu", path, i);
        const json_t *comp = cp ? deref(c, json_array_get(a, i), &cp, false) : NULL;
        if (!comp) goto out;
        const json_t *alts = NULL;
        size_t nalt = 1;
        if (classify(comp, NULL) == K_ANYOF) {
            alts = get(comp, get(comp, "oneOf") ? "oneOf" : "anyOf");
            if (!json_is_array(alts) || !json_array_size(alts)) {
                kvt_js_fail(c, "%s: anyOf/oneOf must be a non-empty array", cp);
                goto out;
            }
            nalt = json_array_size(alts);
        }
        for (size_t j = 0; j < nalt; j++) {
            const char *p = alts ? kvt_js_pf(c, "%s.%s.%zu", cp, get(comp, "oneOf") ? "oneOf" : "anyOf", j) : cp;
            const json_t *x = alts ? (p ? deref(c, json_array_get(alts, j), &p, false) : NULL) : comp;
            if (!x) goto out;
            const kind k = classify(x, NULL);
            if (k == K_ENUM && !alts) {
                if (!check_kw(c, x, p, T_ALL, (const char *const[]){"enum", "type", NULL})) goto out;
                if (!json_is_array(get(x, "enum")) || !json_array_size(get(x, "enum"))) {
                    kvt_js_fail(c, "%s.enum: must be a non-empty array", p);
                    goto out;
                }
                enums[nenum++] = get(x, "enum");
                continue;
            }
            if (k != K_OBJECT) {
                kvt_js_fail(c, "%s: not supported by kvtier in allOf (only objects, anyOf of objects, or enums)", p);
                goto out;
            }
            nobj++;
            if (!check_kw(c, x, p, T_OBJ, OBJ_KW)) goto out;
            const json_t *props = get(x, "properties");
            if (props && !json_is_object(props)) {
                kvt_js_fail(c, "%s.properties: must be an object", p);
                goto out;
            }
            const char *key;
            json_t *v;
            json_object_foreach((json_t *)props, key, v) {
                for (size_t q = 0; q < np; q++)
                    if (!strcmp(ps[q].key, key)) {
                        kvt_js_fail(c, "%s.properties.%s: a property in two allOf components (not supported by kvtier)",
                                    p, key);
                        goto out;
                    }
                if (np == cap) {
                    prop *q = realloc(ps, (cap *= 2) * sizeof *q);
                    if (!q) {
                        kvt_js_nomem(c);
                        goto out;
                    }
                    ps = q;
                }
                ps[np++] = (prop){key, v, kvt_js_pf(c, "%s.properties.%s", p, key), !alts, NULL};
            }
        }
    }
    if (nenum && nobj) {
        kvt_js_fail(c, "%s.allOf: mixes enums and objects (not supported by kvtier)", path);
        goto out;
    }
    if (nenum) {
        sb o = {0};
        size_t kept = 0;
        sb_putc(&o, '(');
        for (size_t i = 0; i < json_array_size(enums[0]); i++) {
            const json_t *v = json_array_get(enums[0], i);
            bool all = true, dup = false;
            for (size_t q = 0; q < i && !dup; q++) dup = json_equal(json_array_get(enums[0], q), (json_t *)v);
            for (size_t e = 1; e < nenum && all; e++) {
                bool in = false;
                for (size_t q = 0; q < json_array_size(enums[e]) && !in; q++)
                    in = json_equal(json_array_get(enums[e], q), (json_t *)v);
                all = in;
            }
            if (!all || dup) continue;
            const char *lit = json_literal(c, v);
            if (!lit) {
                free(o.p);
                goto out;
            }
            if (kept++) sb_puts(&o, " | ");
            sb_puts(&o, lit);
        }
        sb_putc(&o, ')');
        if (!kept) {
            free(o.p);
            kvt_js_fail(c, "%s.allOf: the enums have no value in common", path);
            goto out;
        }
        result = kvt_js_add_rule(c, rule_name, kvt_js_take(c, &o));
        goto out;
    }
    const char *body = object_rule(c, ps, np, NULL, false, name, path, NULL);
    result = body ? kvt_js_add_rule(c, rule_name, body) : NULL;
out:
    free(ps);
    free(enums);
    return result;
}

// ---- the other kinds ----

static bool get_count(cv *c, const json_t *s, const char *path, const char *kw, long *out) {
    const json_t *v = get(s, kw);
    if (!v) return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return kvt_js_fail(c, "%s.%s: must be a non-negative integer", path, kw), false;
    if (!check_count(c, path, kw, json_integer_value(v) > LONG_MAX ? LONG_MAX : (long)json_integer_value(v)))
        return false;
    *out = (long)json_integer_value(v);
    return true;
}

static const char *visit_array(cv *c, const json_t *s, const char *name, const char *rule_name, const char *path) {
    const char *key = get(s, "items") ? "items" : get(s, "prefixItems") ? "prefixItems" : NULL;
    const json_t *items = key ? get(s, key) : NULL;
    long mn = 0, mx = -1;
    if (!get_count(c, s, path, "minItems", &mn) || !get_count(c, s, path, "maxItems", &mx)) return NULL;
    if (mx >= 0 && mn > mx) return kvt_js_fail(c, "%s.minItems: greater than maxItems", path);
    const char *sn = *name ? kvt_js_pf(c, "%s-", name) : kvt_js_pf(c, "%s", "");
    if (!sn) return NULL;
    if (json_is_array(items)) { // a tuple: exactly these items
        const long n = (long)json_array_size(items);
        const bool fits = mn <= n && (mx < 0 || n <= mx);
        if (!fits) return kvt_js_fail(c, "%s: minItems/maxItems exclude the tuple's %ld items", path, n);
        if (!check_kw(c, s, path, T_ARR, (const char *const[]){"type", key, "minItems", "maxItems", NULL}))
            return NULL;
        sb o = {0};
        sb_puts(&o, "\"[\" space ");
        c->sdepth++;
        for (long i = 0; i < n; i++) {
            const char *r = visit(c, json_array_get(items, (size_t)i), kvt_js_pf(c, "%stuple-%ld", sn, i),
                                  kvt_js_pf(c, "%s.%s.%ld", path, key, i), NULL);
            if (!r) {
                free(o.p);
                return NULL;
            }
            if (i) sb_puts(&o, " \",\" space ");
            sb_puts(&o, r);
        }
        c->sdepth--;
        sb_puts(&o, " space \"]\"");
        return kvt_js_add_rule(c, rule_name, kvt_js_take(c, &o));
    }
    if (!check_kw(c, s, path, T_ARR, (const char *const[]){"type", key ? key : "", "minItems", "maxItems", NULL}))
        return NULL;
    if (items && !json_is_object(items) && !json_is_true(items))
        return kvt_js_fail(c, "%s.%s: must be a schema or an array of schemas", path, key);
    const char *ipath = kvt_js_pf(c, "%s.%s", path, key ? key : "items");
    if (!items || is_any(items)) {
        if (items && !check_kw(c, items, ipath, T_ALL, NULL)) return NULL;
        if (mn == 0 && mx < 0) return add_prim(c, !strcmp(rule_name, "root") ? "root" : "array", "array");
    }
    c->sdepth++;
    const char *ir = visit(c, items ? items : json_true(), kvt_js_pf(c, "%sitem", sn), ipath, NULL);
    c->sdepth--;
    if (!ir) return NULL;
    const char *items_rule = kvt_js_repeat(c, ir, mn, mx, "\",\" space");
    return kvt_js_add_rule(c, rule_name, kvt_js_pf(c, "\"[\" space %s space \"]\"", items_rule));
}

static const char *visit_string(cv *c, const json_t *s, const char *rule_name, const char *path) {
    const json_t *f = get(s, "format");
    if (f && !json_is_string(f)) return kvt_js_fail(c, "%s.format: must be a string", path);
    const char *fmt = f && known_format(json_string_value(f)) ? json_string_value(f) : NULL;
    long mn = 0, mx = -1;
    if (!get_count(c, s, path, "minLength", &mn) || !get_count(c, s, path, "maxLength", &mx)) return NULL;
    if (mx >= 0 && mn > mx) return kvt_js_fail(c, "%s.minLength: greater than maxLength", path);
    if (get(s, "pattern")) {
        if (!check_kw(c, s, path, T_STR, (const char *const[]){"type", "pattern", NULL})) return NULL;
        return kvt_js_visit_pattern(c, get(s, "pattern"), rule_name, path);
    }
    if (fmt) {
        // lengths the format's strings always have are implied; others are not supported
        const bool uuid = !strncmp(fmt, "uuid", 4);
        const long lo = uuid ? 36 : !strcmp(fmt, "date") ? 10 : !strcmp(fmt, "time") ? 9 : 20;
        const long hi = uuid ? 36 : !strcmp(fmt, "date") ? 10 : !strcmp(fmt, "time") ? 18 : 29;
        if (mn > lo || (mx >= 0 && mx < hi))
            return kvt_js_fail(c, "%s.%s: not supported by kvtier with format '%s'", path,
                               mn > lo ? "minLength" : "maxLength", fmt);
        if (!check_kw(c, s, path, T_STR, (const char *const[]){"type", "minLength", "maxLength", NULL})) return NULL;
        if (uuid) return add_prim(c, !strcmp(rule_name, "root") ? "root" : "uuid", "uuid");
        char *pn = kvt_js_pf(c, "%s-string", fmt);
        return pn ? kvt_js_add_rule(c, rule_name, add_prim(c, pn, pn)) : NULL;
    }
    if (!check_kw(c, s, path, T_STR, (const char *const[]){"type", "minLength", "maxLength", NULL})) return NULL;
    if (mn > 0 || mx >= 0) {
        const char *ch = add_prim(c, "char", "char");
        return kvt_js_add_rule(c, rule_name, kvt_js_pf(c, "\"\\\"\" %s \"\\\"\"", kvt_js_repeat(c, ch, mn, mx, NULL)));
    }
    return add_prim(c, !strcmp(rule_name, "root") ? "root" : "string", "string");
}

static const char *visit_integer(cv *c, const json_t *s, const char *rule_name, const char *path) {
    if (!check_kw(c, s, path, T_INT,
                  (const char *const[]){"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL}))
        return NULL;
    int64_t mn = INT64_MIN, mx = INT64_MAX, v;
    if (get(s, "minimum")) {
        if (!bound(c, s, path, "minimum", true, &v)) return NULL;
        mn = v;
    }
    if (get(s, "exclusiveMinimum")) {
        if (!bound(c, s, path, "exclusiveMinimum", false, &v)) return NULL;
        if (v + 1 > mn || mn == INT64_MIN) mn = v + 1;
    }
    if (get(s, "maximum")) {
        if (!bound(c, s, path, "maximum", false, &v)) return NULL;
        mx = v;
    }
    if (get(s, "exclusiveMaximum")) {
        if (!bound(c, s, path, "exclusiveMaximum", true, &v)) return NULL;
        if (v - 1 < mx) mx = v - 1;
    }
    if (mn == INT64_MIN && mx == INT64_MAX) return add_prim(c, !strcmp(rule_name, "root") ? "root" : "integer", "integer");
    if (mn != INT64_MIN && mx != INT64_MAX && mn > mx)
        return kvt_js_fail(c, "%s: no integer within minimum %lld and maximum %lld", path, (long long)mn,
                           (long long)mx);
    sb o = {0};
    sb_putc(&o, '(');
    kvt_js_int_range(&o, mn, mx, 16, true);
    sb_putc(&o, ')');
    return kvt_js_add_rule(c, rule_name, kvt_js_take(c, &o));
}

// const or enum: the JSON texts of the values; types: the types "type" allows (0: any).
static const char *visit_values(cv *c, const json_t *s, const char *rule_name, const char *path, unsigned types) {
    const json_t *cst = get(s, "const"), *e = get(s, "enum");
    const bool is_const = cst != NULL;
    if (!is_const && (!json_is_array(e) || !json_array_size(e)))
        return kvt_js_fail(c, "%s.enum: must be a non-empty array", path);
    const size_t n = is_const ? 1 : json_array_size(e);
    unsigned vt = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = is_const ? cst : json_array_get(e, i);
        vt |= value_type(v);
        if (types && !(value_type(v) & types))
            return is_const ? kvt_js_fail(c, "%s.const: not of the schema's type", path)
                            : kvt_js_fail(c, "%s.enum.%zu: not of the schema's type", path, i);
    }
    if (!check_kw(c, s, path, vt, (const char *const[]){"type", is_const ? "const" : "enum", NULL})) return NULL;
    if (is_const) return kvt_js_add_rule(c, rule_name, json_literal(c, cst));
    sb o = {0};
    sb_putc(&o, '(');
    for (size_t i = 0; i < n; i++) {
        const char *lit = json_literal(c, json_array_get(e, i));
        if (!lit) {
            free(o.p);
            return NULL;
        }
        if (i) sb_puts(&o, " | ");
        sb_puts(&o, lit);
    }
    sb_putc(&o, ')');
    return kvt_js_add_rule(c, rule_name, kvt_js_take(c, &o));
}

static const char *visit_ref(cv *c, const json_t *s, const char *rule_name, const char *path) {
    const json_t *r = get(s, "$ref");
    if (!json_is_string(r)) return kvt_js_fail(c, "%s.$ref: must be a string", path);
    const char *ref = json_string_value(r);
    const char *tpath = NULL;
    const json_t *target = resolve(c, ref, path, &tpath, false);
    if (!target) return NULL;
    c->probes = 0;
    const bool typed = get(s, "type") && type_redundant(c, s, types_of(c, target, NULL, 0));
    if (!check_kw(c, s, path, T_ALL, (const char *const[]){"$ref", typed ? "type" : "", NULL})) return NULL;
    ref_t *e = NULL;
    for (size_t i = 0; i < c->nrefs; i++)
        if (!strcmp(c->refs[i].ref, ref)) e = &c->refs[i];
    if (e && !e->done && e->sdepth == c->sdepth)
        return kvt_js_fail(c, "%s.$ref: '%s' refers back to itself with no object or array in between", path, ref);
    if (!e) {
        if (!kvt_grow((void **)&c->refs, &c->crefs, c->nrefs + 1, sizeof *c->refs)) return kvt_js_nomem(c);
        const char *frag = strchr(ref, '#');
        char *base = sanitize(c, kvt_js_pf(c, "ref%s", frag ? frag + 1 : ref));
        if (!base) return NULL;
        char *nm = base;
        for (long i = 0;; i++) { // a name no rule and no other $ref holds
            bool taken = find_rule(c, nm) != NULL;
            for (size_t k = 0; k < c->nrefs && !taken; k++) taken = !strcmp(c->refs[k].name, nm);
            if (!taken) break;
            if (!(nm = kvt_js_pf(c, "%s%ld", base, i))) return NULL;
        }
        const size_t ix = c->nrefs++;
        c->refs[ix] = (ref_t){ref, nm, c->sdepth, false};
        const char *res = visit(c, target, nm, tpath, NULL);
        if (!res) return NULL;
        c->refs[ix].name = res;
        c->refs[ix].done = true;
        e = &c->refs[ix];
    }
    return kvt_js_add_rule(c, rule_name, e->name);
}

// Rule `rule_name` ::= one alternative per member: each schema of `schemas` (anyOf / oneOf, named `kw` in paths), or s
// under each type of `types` (a type list). The rule's name, or NULL (c->st says why).
static const char *alternatives(cv *c, const json_t *s, const json_t *schemas, const json_t *types,
                                const char *rule_name, const char *name, const char *path, const char *kw) {
    const json_t *list = schemas ? schemas : types;
    sb o = {0};
    for (size_t i = 0; i < json_array_size(list); i++) {
        const char *an = *name ? kvt_js_pf(c, "%s-%zu", name, i) : kvt_js_pf(c, "alternative-%zu", i);
        const char *r = schemas ? visit(c, json_array_get(schemas, i), an, kvt_js_pf(c, "%s.%s.%zu", path, kw, i), NULL)
                                : visit(c, s, an, path, json_string_value(json_array_get(types, i)));
        if (!r) {
            free(o.p);
            return NULL;
        }
        if (i) sb_puts(&o, " | ");
        sb_puts(&o, r);
    }
    return c->st == KVT_OK ? kvt_js_add_rule(c, rule_name, kvt_js_take(c, &o)) : NULL;
}

static const char *visit(cv *c, const json_t *s, const char *name, const char *path, const char *forced) {
    if (!name || !path) return NULL;
    if (c->depth >= MAX_DEPTH) return kvt_js_fail(c, "%s: nested more than %d levels deep", path, MAX_DEPTH);
    if (++c->visits > MAX_VISITS)
        return kvt_js_fail(c, "%s: the schema is too large (over %d nodes)", path, MAX_VISITS);
    const char *rule_name =
        reserved(name) ? kvt_js_pf(c, "%s-", name) : *name ? name : c->depth == 0 ? "root" : "empty";
    if (!rule_name) return NULL;
    c->depth++;
    const char *res = NULL;
    const kind k = classify(s, forced);
    switch (k) {
    case K_BAD:
        if (json_is_false(s)) res = kvt_js_fail(c, "%s: the schema false is not supported by kvtier", path);
        else if (!json_is_object(s)) res = kvt_js_fail(c, "%s: must be a schema (an object or true)", path);
        else if (forced) res = kvt_js_fail(c, "%s.type: unrecognized type '%s'", path, forced);
        else if (json_is_string(get(s, "type")))
            res = kvt_js_fail(c, "%s.type: unrecognized type '%s'", path, json_string_value(get(s, "type")));
        else res = kvt_js_fail(c, "%s.type: must be a string or an array of strings", path);
        break;
    case K_ANY:
        if (check_kw(c, s, path, T_ALL, NULL)) res = kvt_js_add_rule(c, rule_name, add_prim(c, "value", "value"));
        break;
    case K_REF: res = visit_ref(c, s, rule_name, path); break;
    case K_ANYOF: {
        const char *kw = get(s, "oneOf") ? "oneOf" : "anyOf";
        const json_t *a = get(s, kw);
        if (!json_is_array(a) || !json_array_size(a)) {
            res = kvt_js_fail(c, "%s.%s: must be a non-empty array of schemas", path, kw);
            break;
        }
        c->probes = 0;
        const bool typed = get(s, "type") && type_redundant(c, s, types_of(c, s, NULL, 0) | 0);
        if (!check_kw(c, s, path, T_ALL, (const char *const[]){kw, typed ? "type" : "", NULL})) break;
        res = alternatives(c, s, a, NULL, rule_name, name, path, kw);
        break;
    }
    case K_TYPES: {
        const json_t *t = get(s, "type");
        unsigned types = 0;
        for (size_t i = 0; i < json_array_size(t); i++) {
            const json_t *ti = json_array_get(t, i);
            if (!json_is_string(ti)) {
                res = kvt_js_fail(c, "%s.type: must be a string or an array of strings", path);
                break;
            }
            if (!type_bits(json_string_value(ti))) {
                res = kvt_js_fail(c, "%s.type: unrecognized type '%s'", path, json_string_value(ti));
                break;
            }
            types |= type_bits(json_string_value(ti));
        }
        if (c->st != KVT_OK) break;
        if (!types) {
            res = kvt_js_fail(c, "%s.type: must not be empty", path);
            break;
        }
        if (get(s, "const") || get(s, "enum")) {
            res = visit_values(c, s, rule_name, path, types);
            break;
        }
        res = alternatives(c, s, NULL, t, rule_name, name, path, NULL);
        break;
    }
    case K_CONST:
    case K_ENUM: {
        const json_t *t = forced ? NULL : get(s, "type");
        unsigned types = forced ? type_bits(forced) : json_is_string(t) ? type_bits(json_string_value(t)) : 0;
        if (json_is_string(t) && !types)
            res = kvt_js_fail(c, "%s.type: unrecognized type '%s'", path, json_string_value(t));
        else if (t && !json_is_string(t))
            res = kvt_js_fail(c, "%s.type: must be a string or an array of strings", path);
        else res = visit_values(c, s, rule_name, path, types);
        break;
    }
    case K_OBJECT: res = visit_object(c, s, name, rule_name, path); break;
    case K_ALLOF: res = visit_all_of(c, s, name, rule_name, path); break;
    case K_ARRAY: res = visit_array(c, s, name, rule_name, path); break;
    case K_STRING: res = visit_string(c, s, rule_name, path); break;
    case K_INT: res = visit_integer(c, s, rule_name, path); break;
    case K_NUM:
        if (check_kw(c, s, path, T_NUM | T_INT, (const char *const[]){"type", NULL}))
            res = add_prim(c, !strcmp(rule_name, "root") ? "root" : "number", "number");
        break;
    case K_BOOL:
    case K_NULL:
        if (check_kw(c, s, path, k == K_BOOL ? T_BOOL : T_NULL, (const char *const[]){"type", NULL}))
            res = add_prim(c, !strcmp(rule_name, "root") ? "root" : k == K_BOOL ? "boolean" : "null",
                           k == K_BOOL ? "boolean" : "null");
        break;
    }
    c->depth--;
    return c->st == KVT_OK ? res : NULL;
}

static int cmp_rule(const void *a, const void *b) {
    return strcmp(((const rule_t *)a)->name, ((const rule_t *)b)->name);
}

kvt_status kvt_json_schema_to_grammar(const json_t *schema, const char *where, char **out, kvt_err *err) {
    if (!out) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "json schema: no output");
    *out = NULL;
    if (!where) where = "json_schema";
    if (!schema) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "%s: missing", where);
    cv c = {.root = schema, .where = where, .err = err};
    kvt_status st = KVT_OK;
    if (!json_is_object(schema) && !json_is_true(schema))
        st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "%s: must be a JSON schema object (or true)", where);
    else if (kvt_js_add_rule(&c, "space", SPACE_BODY) && visit(&c, schema, "", where, NULL)) {
        qsort(c.rules, c.nrules, sizeof *c.rules, cmp_rule);
        sb o = {0};
        for (size_t i = 0; i < c.nrules; i++) {
            sb_puts(&o, c.rules[i].name);
            sb_puts(&o, " ::= ");
            sb_puts(&o, c.rules[i].body);
            sb_putc(&o, '\n');
        }
        if (o.oom) {
            free(o.p);
            kvt_js_nomem(&c);
        } else *out = o.p;
    }
    if (st == KVT_OK) st = c.st;
    for (size_t i = 0; i < c.npool; i++) free(c.pool[i]);
    free(c.pool);
    free(c.rules);
    free(c.index);
    free(c.refs);
    return st;
}
