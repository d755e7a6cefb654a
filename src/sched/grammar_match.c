// grammar_match.c - the matcher of grammar.h: llama.cpp's parse stacks (advance_stack, accept of a code point, partial
// UTF-8, reject_candidates), with the work grouped so that a whole vocabulary is checked in one pass.
//
// Within one call the stacks are hash-consed: a stack is a node (top element, the stack below), so equal stacks are
// equal ids and a push shares the rest. A set of stacks is interned too, and the move of a set on a code point is
// cached (what llama.cpp's reject_candidates_for_stack shares per stack, here shared per set): the successor of a
// stack on any character its top class takes is the same, so it is computed once per stack. A full filter walks a trie
// of the token texts (built once per vocabulary), one cached move per trie node, skipping a subtree as soon as no
// stack is left. A state keeps its stacks as plain element lists between calls.
#include "grammar_impl.h"
#include "../base/grow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- UTF-8 as llama.cpp's decode_utf8 reads a piece -----------------------------------------------------------------

typedef struct {
    uint32_t value; // bits so far
    int32_t rem;    // bytes still to come; -1: invalid sequence
} utf8_part;

// Decodes p[0..n) continuing `in`: full code points into cps (n entries at most), their byte offsets into at (may be
// NULL). Returns the count; *out: the trailing partial sequence (rem -1: invalid), *bad: the offending byte's offset
// when invalid, where the trailing sequence starts when one is pending (0: it started before p).
// As llama.cpp: a continuation byte where a sequence starts is invalid, the bytes after a lead byte are taken whatever
// they are, and a pending sequence continued by a non-continuation byte is invalid.
static size_t decode(const uint8_t *p, size_t n, utf8_part in, uint32_t *cps, size_t *at, utf8_part *out, size_t *bad) {
    static const int8_t len_of[16] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};
    size_t i = 0, k = 0, start = 0;
    uint32_t v = in.value;
    int32_t rem = in.rem > 0 ? in.rem : 0;
    for (; i < n && rem > 0; i++, rem--) {
        if ((p[i] >> 6) != 2) {
            *out = (utf8_part){0, -1};
            *bad = i;
            return 0;
        }
        v = (v << 6) + (p[i] & 0x3F);
    }
    if (in.rem > 0 && rem == 0) {
        if (at) at[k] = 0;
        cps[k++] = v;
    }
    while (i < n) {
        start = i;
        rem = len_of[p[i] >> 4] - 1;
        if (rem < 0) {
            *out = (utf8_part){0, -1};
            *bad = i;
            return 0;
        }
        v = p[i++] & ((1u << (7 - rem)) - 1);
        for (; i < n && rem > 0; i++, rem--) v = (v << 6) + (p[i] & 0x3F);
        if (rem == 0) {
            if (at) at[k] = start;
            cps[k++] = v;
        }
    }
    *out = (utf8_part){rem > 0 ? v : 0, rem};
    *bad = start;
    return k;
}

// --- the vocabulary --------------------------------------------------------------------------------------------------

struct kvt_grammar_vocab {
    atomic_int refs;
    int32_t n;
    char *bytes;     // pieces, each cut at its first NUL (as llama.cpp's C strings)
    int64_t *off;    // [n + 1]: piece i is bytes[off[i] .. off[i + 1])
    uint8_t *eog;    // [n]
    uint32_t *cps;   // full code points of each piece decoded from a fresh start
    int64_t *cp_off; // [n + 1]
    utf8_part *tail; // [n]: the trailing partial sequence (rem -1: invalid UTF-8: never allowed)
    // trie of the matchable tokens' code points, nodes in preorder (node 0: the root, no code point)
    int32_t n_nodes;
    uint32_t *nd_cp;   // [n_nodes]
    int32_t *nd_depth; // [n_nodes]
    int32_t *nd_end;   // [n_nodes]: the first node past the subtree
    int32_t *nd_tok;   // [n_nodes + 1]: tokens whose code points end at node i: tok[nd_tok[i] .. nd_tok[i + 1])
    int32_t *tok;      // [n_matchable]
    int32_t max_depth;
};

// A token other than end-of-generation whose text can advance a grammar.
static bool matchable(const kvt_grammar_vocab *v, int32_t id) {
    return !v->eog[id] && v->off[id + 1] > v->off[id] && v->tail[id].rem >= 0;
}

typedef struct {
    const uint32_t *cp;
    int32_t n, id;
} tok_key;

static int cmp_tok(const void *x, const void *y) {
    const tok_key *a = x, *b = y;
    const int32_t m = a->n < b->n ? a->n : b->n;
    for (int32_t i = 0; i < m; i++)
        if (a->cp[i] != b->cp[i]) return a->cp[i] < b->cp[i] ? -1 : 1;
    return a->n != b->n ? (a->n < b->n ? -1 : 1) : (a->id > b->id) - (a->id < b->id);
}

void kvt_grammar_vocab_free(kvt_grammar_vocab *v) {
    if (!v || atomic_fetch_sub(&v->refs, 1) > 1) return;
    free(v->bytes);
    free(v->off);
    free(v->eog);
    free(v->cps);
    free(v->cp_off);
    free(v->tail);
    free(v->nd_cp);
    free(v->nd_depth);
    free(v->nd_end);
    free(v->nd_tok);
    free(v->tok);
    free(v);
}

kvt_grammar_vocab *kvt_grammar_vocab_ref(const kvt_grammar_vocab *v) {
    kvt_grammar_vocab *m = (kvt_grammar_vocab *)v;
    if (m) atomic_fetch_add(&m->refs, 1);
    return m;
}

int32_t kvt_grammar_vocab_n(const kvt_grammar_vocab *v) { return v ? v->n : 0; }

static kvt_status vocab_oom(kvt_grammar_vocab *v, kvt_err *err) {
    kvt_grammar_vocab_free(v);
    return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a grammar vocabulary");
}

// The trie over the matchable tokens (v->cps decoded).
static bool build_trie(kvt_grammar_vocab *v) {
    const int32_t n = v->n;
    int32_t n_m = 0;
    for (int32_t i = 0; i < n; i++) n_m += matchable(v, i);
    const int64_t max_nodes = (int64_t)v->cp_off[n] + 1;
    tok_key *keys = malloc((size_t)(n_m ? n_m : 1) * sizeof *keys);
    int32_t *node_of = malloc((size_t)(n_m ? n_m : 1) * sizeof *node_of), *stk = NULL;
    v->nd_cp = malloc((size_t)max_nodes * sizeof *v->nd_cp);
    v->nd_depth = malloc((size_t)max_nodes * sizeof *v->nd_depth);
    v->nd_end = malloc((size_t)max_nodes * sizeof *v->nd_end);
    v->tok = malloc((size_t)(n_m ? n_m : 1) * sizeof *v->tok);
    bool ok = keys && node_of && v->nd_cp && v->nd_depth && v->nd_end && v->tok;
    int32_t *path = NULL;
    if (ok) {
        int32_t k = 0, md = 0;
        for (int32_t i = 0; i < n; i++)
            if (matchable(v, i)) {
                keys[k++] = (tok_key){v->cps + v->cp_off[i], (int32_t)(v->cp_off[i + 1] - v->cp_off[i]), i};
                if (keys[k - 1].n > md) md = keys[k - 1].n;
            }
        qsort(keys, (size_t)n_m, sizeof *keys, cmp_tok);
        v->max_depth = md;
        path = malloc((size_t)(md + 1) * sizeof *path);
        ok = path != NULL;
    }
    if (ok) {
        int32_t nn = 1, plen = 0; // plen: depth of the previous token's path
        v->nd_cp[0] = 0, v->nd_depth[0] = 0;
        path[0] = 0;
        for (int32_t t = 0; t < n_m; t++) {
            int32_t common = 0;
            if (t > 0) {
                const tok_key *a = &keys[t - 1], *b = &keys[t];
                while (common < a->n && common < b->n && a->cp[common] == b->cp[common]) common++;
            }
            if (common > plen) common = plen;
            for (int32_t d = common + 1; d <= keys[t].n; d++) {
                v->nd_cp[nn] = keys[t].cp[d - 1];
                v->nd_depth[nn] = d;
                path[d] = nn++;
            }
            plen = keys[t].n;
            node_of[t] = path[keys[t].n];
        }
        v->n_nodes = nn;
        // subtree ends: the first later node no deeper
        stk = malloc((size_t)nn * sizeof *stk);
        v->nd_tok = calloc((size_t)nn + 1, sizeof *v->nd_tok);
        ok = stk && v->nd_tok;
        if (ok) {
            int32_t top = 0;
            for (int32_t j = 0; j < nn; j++) {
                while (top > 0 && v->nd_depth[stk[top - 1]] >= v->nd_depth[j]) v->nd_end[stk[--top]] = j;
                stk[top++] = j;
            }
            while (top > 0) v->nd_end[stk[--top]] = nn;
            for (int32_t t = 0; t < n_m; t++) v->nd_tok[node_of[t] + 1]++;
            for (int32_t j = 0; j < nn; j++) v->nd_tok[j + 1] += v->nd_tok[j];
            int32_t *fill = calloc((size_t)nn, sizeof *fill);
            ok = fill != NULL;
            for (int32_t t = 0; ok && t < n_m; t++) v->tok[v->nd_tok[node_of[t]] + fill[node_of[t]]++] = keys[t].id;
            free(fill);
        }
    }
    free(keys);
    free(node_of);
    free(stk);
    free(path);
    return ok;
}

kvt_status kvt_grammar_vocab_init(int32_t n_vocab, const char *const *pieces, const size_t *lens, const bool *eog,
                                  kvt_grammar_vocab **out, kvt_err *err) {
    *out = NULL;
    if (n_vocab <= 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "grammar vocabulary of %d tokens", (int)n_vocab);
    kvt_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return vocab_oom(NULL, err);
    atomic_init(&v->refs, 1);
    v->n = n_vocab;
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const char *z = lens[i] ? memchr(pieces[i], 0, lens[i]) : NULL;
        total += z ? (size_t)(z - pieces[i]) : lens[i];
    }
    v->bytes = malloc(total ? total : 1);
    v->off = malloc(((size_t)n_vocab + 1) * sizeof *v->off);
    v->eog = malloc((size_t)n_vocab);
    v->cps = malloc((total ? total : 1) * sizeof *v->cps);
    v->cp_off = malloc(((size_t)n_vocab + 1) * sizeof *v->cp_off);
    v->tail = malloc((size_t)n_vocab * sizeof *v->tail);
    if (!v->bytes || !v->off || !v->eog || !v->cps || !v->cp_off || !v->tail) return vocab_oom(v, err);
    int64_t at = 0, nc = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const char *z = lens[i] ? memchr(pieces[i], 0, lens[i]) : NULL;
        const size_t l = z ? (size_t)(z - pieces[i]) : lens[i];
        if (l) memcpy(v->bytes + at, pieces[i], l);
        v->off[i] = at;
        v->eog[i] = eog && eog[i];
        v->cp_off[i] = nc;
        size_t bad;
        nc += (int64_t)decode((const uint8_t *)v->bytes + at, l, (utf8_part){0, 0}, v->cps + nc, NULL, &v->tail[i],
                              &bad);
        at += (int64_t)l;
    }
    v->off[n_vocab] = at;
    v->cp_off[n_vocab] = nc;
    if (!build_trie(v)) return vocab_oom(v, err);
    *out = v;
    return KVT_OK;
}

// --- the per-call matcher --------------------------------------------------------------------------------------------

enum {
    ASCII_N = 128,        // code points with a direct move table per set
    WORK_PER_STACK = 512, // one call's stack nodes and set entries are bounded by WORK_PER_STACK * max_stacks
};

typedef struct {
    const kvt_grammar *g;
    kvt_err *err;
    kvt_status st;
    int64_t max_stacks, work, work_max, visit_max;
    // stacks: node 0 is the empty stack
    int32_t *nd_el, *nd_up, *nd_succ; // [n_nd]: top element, the stack below, the set after the top (-1 unknown)
    uint32_t *nd_seen;                // [n_nd]: closure stamp
    int32_t n_nd;
    size_t cap_nd;
    int32_t *nd_tab; // [tab_cap]: node ids by (el, up), -1 empty
    size_t tab_cap;
    uint32_t stamp;
    // sets of stacks (sorted node ids): set 0 is the empty set
    int64_t *st_off;
    int32_t *st_len;
    int32_t **st_ascii; // [n_st]: moves on code points < 128 (lazily made, -1 unknown)
    int32_t n_st;
    size_t cap_st;
    int32_t *items; // [n_items]
    size_t n_items, cap_items;
    int32_t *st_tab;
    size_t st_tab_cap;
    uint64_t *tr_key; // moves on code points >= 128: (set << 32 | cp) -> tr_val; 0 empty
    int32_t *tr_val;
    size_t tr_cap, tr_n;
    int32_t *todo, *res, *sel, *mrg; // scratch
    size_t cap_todo, cap_res, cap_sel, cap_mrg;
} mctx;

static bool m_fail(mctx *m, kvt_status st, const char *what) {
    if (m->st == KVT_OK) {
        if (st == KVT_ERR_NOMEM) m->st = kvt_errorf(m->err, st, "out of memory matching a grammar");
        else m->st = kvt_errorf(m->err, st, "%s", what);
    }
    return false;
}

static bool m_grow(mctx *m, void **buf, size_t *cap, size_t need, size_t elem) {
    return kvt_grow(buf, cap, need, elem) || m_fail(m, KVT_ERR_NOMEM, NULL);
}

static bool m_stacks_bound(mctx *m) {
    char msg[160];
    snprintf(msg, sizeof msg, "grammar needs more than max_stacks=%lld parse stacks", (long long)m->max_stacks);
    return m_fail(m, KVT_ERR_INVALID_ARG, msg);
}

static bool m_work(mctx *m, int64_t n) {
    m->work += n;
    if (m->work <= m->work_max) return true;
    char msg[200];
    snprintf(msg, sizeof msg, "grammar matcher needs more than %lld stack entries in one call (%d x max_stacks=%lld)",
             (long long)m->work_max, WORK_PER_STACK, (long long)m->max_stacks);
    return m_fail(m, KVT_ERR_INVALID_ARG, msg);
}

static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static void m_free(mctx *m) {
    free(m->nd_el);
    free(m->nd_up);
    free(m->nd_succ);
    free(m->nd_seen);
    free(m->nd_tab);
    for (int32_t i = 0; i < m->n_st; i++) free(m->st_ascii[i]);
    free(m->st_off);
    free(m->st_len);
    free(m->st_ascii);
    free(m->items);
    free(m->st_tab);
    free(m->tr_key);
    free(m->tr_val);
    free(m->todo);
    free(m->res);
    free(m->sel);
    free(m->mrg);
}

static int32_t node(mctx *m, int32_t el, int32_t up);
static int32_t set_of(mctx *m, int32_t *ids, size_t n);

static bool m_init(mctx *m, const kvt_grammar *g, kvt_err *err) {
    *m = (mctx){.g = g, .err = err, .max_stacks = g->max_stacks};
    const int64_t ms = g->max_stacks < ((int64_t)1 << 40) ? g->max_stacks : (int64_t)1 << 40;
    m->work_max = ms * WORK_PER_STACK > (1 << 16) ? ms * WORK_PER_STACK : 1 << 16;
    m->visit_max = ms * 8 + g->n_el;
    m->tab_cap = 256;
    m->nd_tab = malloc(m->tab_cap * sizeof *m->nd_tab);
    m->st_tab_cap = 64;
    m->st_tab = malloc(m->st_tab_cap * sizeof *m->st_tab);
    if (!m->nd_tab || !m->st_tab) return m_fail(m, KVT_ERR_NOMEM, NULL);
    memset(m->nd_tab, 0xff, m->tab_cap * sizeof *m->nd_tab);
    memset(m->st_tab, 0xff, m->st_tab_cap * sizeof *m->st_tab);
    if (!m_grow(m, (void **)&m->nd_el, &m->cap_nd, 64, sizeof *m->nd_el)) return false;
    m->nd_up = malloc(m->cap_nd * sizeof *m->nd_up);
    m->nd_succ = malloc(m->cap_nd * sizeof *m->nd_succ);
    m->nd_seen = malloc(m->cap_nd * sizeof *m->nd_seen);
    if (!m->nd_up || !m->nd_succ || !m->nd_seen) return m_fail(m, KVT_ERR_NOMEM, NULL);
    m->nd_el[0] = -1, m->nd_up[0] = -1, m->nd_succ[0] = -1, m->nd_seen[0] = 0;
    m->n_nd = 1;
    return set_of(m, NULL, 0) == 0; // set 0: no stacks
}

static int32_t node(mctx *m, int32_t el, int32_t up) {
    if (2 * ((size_t)m->n_nd + 1) > m->tab_cap) {
        const size_t cap = m->tab_cap * 2;
        int32_t *t = malloc(cap * sizeof *t);
        if (!t) return m_fail(m, KVT_ERR_NOMEM, NULL), -1;
        memset(t, 0xff, cap * sizeof *t);
        for (int32_t i = 1; i < m->n_nd; i++) {
            size_t k = mix(((uint64_t)(uint32_t)m->nd_el[i] << 32) | (uint32_t)m->nd_up[i]) & (cap - 1);
            while (t[k] >= 0) k = (k + 1) & (cap - 1);
            t[k] = i;
        }
        free(m->nd_tab);
        m->nd_tab = t;
        m->tab_cap = cap;
    }
    size_t k = mix(((uint64_t)(uint32_t)el << 32) | (uint32_t)up) & (m->tab_cap - 1);
    for (; m->nd_tab[k] >= 0; k = (k + 1) & (m->tab_cap - 1)) {
        const int32_t i = m->nd_tab[k];
        if (m->nd_el[i] == el && m->nd_up[i] == up) return i;
    }
    if (!m_work(m, 1)) return -1;
    if ((size_t)m->n_nd + 1 > m->cap_nd) {
        size_t cap = m->cap_nd;
        if (!m_grow(m, (void **)&m->nd_el, &cap, (size_t)m->n_nd + 1, sizeof *m->nd_el)) return -1;
        int32_t *a = realloc(m->nd_up, cap * sizeof *a);
        if (a) m->nd_up = a;
        int32_t *b = realloc(m->nd_succ, cap * sizeof *b);
        if (b) m->nd_succ = b;
        uint32_t *c = realloc(m->nd_seen, cap * sizeof *c);
        if (c) m->nd_seen = c;
        if (!a || !b || !c) return m_fail(m, KVT_ERR_NOMEM, NULL), -1;
        m->cap_nd = cap;
    }
    const int32_t i = m->n_nd++;
    m->nd_el[i] = el, m->nd_up[i] = up, m->nd_succ[i] = -1, m->nd_seen[i] = 0;
    m->nd_tab[k] = i;
    return i;
}

static uint64_t hash_ids(const int32_t *ids, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++) h = mix(h ^ (uint32_t)ids[i]) + i;
    return h;
}

// The set of the sorted, distinct node ids[0..n) (ids may point into scratch, not into m->items).
static int32_t set_of(mctx *m, int32_t *ids, size_t n) {
    if ((int64_t)n > m->max_stacks) return m_stacks_bound(m), -1;
    if (2 * ((size_t)m->n_st + 1) > m->st_tab_cap) {
        const size_t cap = m->st_tab_cap * 2;
        int32_t *t = malloc(cap * sizeof *t);
        if (!t) return m_fail(m, KVT_ERR_NOMEM, NULL), -1;
        memset(t, 0xff, cap * sizeof *t);
        for (int32_t i = 0; i < m->n_st; i++) {
            size_t k = hash_ids(m->items + m->st_off[i], (size_t)m->st_len[i]) & (cap - 1);
            while (t[k] >= 0) k = (k + 1) & (cap - 1);
            t[k] = i;
        }
        free(m->st_tab);
        m->st_tab = t;
        m->st_tab_cap = cap;
    }
    size_t k = hash_ids(ids, n) & (m->st_tab_cap - 1);
    for (; m->st_tab[k] >= 0; k = (k + 1) & (m->st_tab_cap - 1)) {
        const int32_t s = m->st_tab[k];
        if ((size_t)m->st_len[s] == n && (n == 0 || !memcmp(m->items + m->st_off[s], ids, n * sizeof *ids))) return s;
    }
    if (!m_work(m, (int64_t)n + 4)) return -1;
    if ((size_t)m->n_st + 1 > m->cap_st) {
        size_t cap = m->cap_st;
        if (!m_grow(m, (void **)&m->st_off, &cap, (size_t)m->n_st + 1, sizeof *m->st_off)) return -1;
        int32_t *a = realloc(m->st_len, cap * sizeof *a);
        if (a) m->st_len = a;
        int32_t **b = realloc(m->st_ascii, cap * sizeof *b);
        if (b) m->st_ascii = b;
        if (!a || !b) return m_fail(m, KVT_ERR_NOMEM, NULL), -1;
        m->cap_st = cap;
    }
    if (!m_grow(m, (void **)&m->items, &m->cap_items, m->n_items + n, sizeof *m->items)) return -1;
    if (n) memcpy(m->items + m->n_items, ids, n * sizeof *ids);
    const int32_t s = m->n_st++;
    m->st_off[s] = (int64_t)m->n_items, m->st_len[s] = (int32_t)n, m->st_ascii[s] = NULL;
    m->n_items += n;
    m->st_tab[k] = s;
    return s;
}

static int cmp_i32(const void *x, const void *y) {
    const int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

static size_t sort_unique(int32_t *a, size_t n) {
    if (n < 2) return n;
    qsort(a, n, sizeof *a, cmp_i32);
    size_t k = 1;
    for (size_t i = 1; i < n; i++)
        if (a[i] != a[k - 1]) a[k++] = a[i];
    return k;
}

// llama.cpp's advance_stack: every stack that node `start` expands to through rule references, each topped by a
// terminal element or empty, as a set.
static int32_t closure(mctx *m, int32_t start) {
    const kvt_grammar *g = m->g;
    if (++m->stamp == 0) {
        memset(m->nd_seen, 0, (size_t)m->n_nd * sizeof *m->nd_seen);
        m->stamp = 1;
    }
    size_t n_todo = 0, n_res = 0;
    int64_t visited = 0;
    if (!m_grow(m, (void **)&m->todo, &m->cap_todo, 1, sizeof *m->todo)) return -1;
    m->todo[n_todo++] = start;
    while (n_todo) {
        const int32_t s = m->todo[--n_todo];
        if (m->nd_seen[s] == m->stamp) continue;
        m->nd_seen[s] = m->stamp;
        if (++visited > m->visit_max) return m_stacks_bound(m), -1;
        if (s != 0 && g->el[m->nd_el[s]].type == GR_RULE_REF) {
            const int32_t e = m->nd_el[s], r = (int32_t)g->el[e].value;
            int32_t base = m->nd_up[s];
            if (!gr_is_eos(g->el[e + 1].type) && (base = node(m, e + 1, base)) < 0) return -1;
            const int32_t na = g->alt_first[r + 1] - g->alt_first[r];
            if (!m_grow(m, (void **)&m->todo, &m->cap_todo, n_todo + (size_t)na, sizeof *m->todo)) return -1;
            for (int32_t a = g->alt_first[r]; a < g->alt_first[r + 1]; a++) {
                const int32_t at = g->alts[a];
                const int32_t ns = gr_is_eos(g->el[at].type) ? base : node(m, at, base);
                if (ns < 0) return -1;
                m->todo[n_todo++] = ns;
            }
        } else {
            if (!m_grow(m, (void **)&m->res, &m->cap_res, n_res + 1, sizeof *m->res)) return -1;
            m->res[n_res++] = s;
        }
    }
    n_res = sort_unique(m->res, n_res);
    return set_of(m, m->res, n_res);
}

// The set after the terminal on top of stack s (its class matched, or its token).
static int32_t succ(mctx *m, int32_t s) {
    if (m->nd_succ[s] >= 0) return m->nd_succ[s];
    const int32_t a = m->g->after[m->nd_el[s]];
    const int32_t ns = gr_is_eos(m->g->el[a].type) ? m->nd_up[s] : node(m, a, m->nd_up[s]);
    const int32_t r = ns < 0 ? -1 : closure(m, ns);
    if (r >= 0) m->nd_succ[s] = r;
    return r;
}

// llama.cpp's match_char: whether the class at el[e] takes code point c.
static bool match_char(const gr_elem *el, int32_t e, uint32_t c) {
    const bool pos = el[e].type != GR_CHAR_NOT;
    bool found = false;
    do {
        if (el[e + 1].type == GR_CHAR_RNG) {
            found = found || (el[e].value <= c && c <= el[e + 1].value);
            e += 2;
        } else if (el[e].type == GR_CHAR_ANY) {
            found = true;
            e += 1;
        } else {
            found = found || el[e].value == c;
            e += 1;
        }
    } while (el[e].type == GR_CHAR_ALT);
    return found == pos;
}

// llama.cpp's match_partial_char: whether some completion of the pending sequence p is a code point the class takes.
static bool match_partial(const gr_elem *el, int32_t e, utf8_part p) {
    const bool pos = el[e].type != GR_CHAR_NOT;
    if (p.rem < 0 || (p.rem == 1 && p.value < 2)) return false;
    uint32_t lo = p.value << (p.rem * 6);
    const uint32_t hi = lo | ((1u << (p.rem * 6)) - 1);
    if (lo == 0) lo = p.rem == 2 ? 1u << 11 : p.rem == 3 ? 1u << 16 : lo;
    do {
        if (el[e + 1].type == GR_CHAR_RNG) {
            if (el[e].value <= hi && lo <= el[e + 1].value) return pos;
            e += 2;
        } else if (el[e].type == GR_CHAR_ANY) {
            return true;
        } else {
            if (lo <= el[e].value && el[e].value <= hi) return pos;
            e += 1;
        }
    } while (el[e].type == GR_CHAR_ALT);
    return !pos;
}

static bool top_is_char(const mctx *m, int32_t s) { return s != 0 && gr_is_char_start(m->g->el[m->nd_el[s]].type); }

// The union of sets sel[0..n) as a set.
static int32_t set_union(mctx *m, size_t n) {
    if (n == 0) return 0;
    if (n == 1) return m->sel[0];
    size_t tot = 0;
    for (size_t i = 0; i < n; i++) tot += (size_t)m->st_len[m->sel[i]];
    if (!m_grow(m, (void **)&m->mrg, &m->cap_mrg, tot, sizeof *m->mrg)) return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(m->mrg + k, m->items + m->st_off[m->sel[i]], (size_t)m->st_len[m->sel[i]] * sizeof *m->mrg);
        k += (size_t)m->st_len[m->sel[i]];
    }
    k = sort_unique(m->mrg, k);
    return set_of(m, m->mrg, k);
}

// The set after code point c from set S (llama.cpp's accept over every stack), cached per (S, c).
static int32_t step(mctx *m, int32_t S, uint32_t c) {
    size_t tk = 0;
    if (c < ASCII_N) {
        if (m->st_ascii[S] && m->st_ascii[S][c] >= 0) return m->st_ascii[S][c];
    } else if (m->tr_cap) {
        const uint64_t key = ((uint64_t)(uint32_t)S << 32 | c) + 1;
        for (tk = mix(key) & (m->tr_cap - 1); m->tr_key[tk]; tk = (tk + 1) & (m->tr_cap - 1))
            if (m->tr_key[tk] == key) return m->tr_val[tk];
    }
    const int32_t len = m->st_len[S];
    size_t n_sel = 0;
    for (int32_t i = 0; i < len; i++) {
        const int32_t s = m->items[m->st_off[S] + i];
        if (!top_is_char(m, s) || !match_char(m->g->el, m->nd_el[s], c)) continue;
        const int32_t r = succ(m, s);
        if (r < 0) return -1;
        if (r == 0) continue;
        if (!m_grow(m, (void **)&m->sel, &m->cap_sel, n_sel + 1, sizeof *m->sel)) return -1;
        m->sel[n_sel++] = r;
    }
    const int32_t T = set_union(m, n_sel);
    if (T < 0) return -1;
    if (c < ASCII_N) {
        if (!m->st_ascii[S]) {
            if (!m_work(m, ASCII_N)) return -1;
            if (!(m->st_ascii[S] = malloc(ASCII_N * sizeof(int32_t)))) return m_fail(m, KVT_ERR_NOMEM, NULL), -1;
            memset(m->st_ascii[S], 0xff, ASCII_N * sizeof(int32_t));
        }
        m->st_ascii[S][c] = T;
    } else {
        if (2 * (m->tr_n + 1) > m->tr_cap) {
            const size_t cap = m->tr_cap ? m->tr_cap * 2 : 256;
            uint64_t *kk = calloc(cap, sizeof *kk);
            int32_t *vv = malloc(cap * sizeof *vv);
            if (!kk || !vv) {
                free(kk), free(vv);
                return m_fail(m, KVT_ERR_NOMEM, NULL), -1;
            }
            for (size_t i = 0; i < m->tr_cap; i++) {
                if (!m->tr_key[i]) continue;
                size_t j = mix(m->tr_key[i]) & (cap - 1);
                while (kk[j]) j = (j + 1) & (cap - 1);
                kk[j] = m->tr_key[i], vv[j] = m->tr_val[i];
            }
            free(m->tr_key), free(m->tr_val);
            m->tr_key = kk, m->tr_val = vv, m->tr_cap = cap;
        }
        const uint64_t key = ((uint64_t)(uint32_t)S << 32 | c) + 1;
        for (tk = mix(key) & (m->tr_cap - 1); m->tr_key[tk]; tk = (tk + 1) & (m->tr_cap - 1)) {}
        m->tr_key[tk] = key, m->tr_val[tk] = T;
        m->tr_n++;
    }
    return T;
}

// Whether a piece whose code points led to set S, ending in the pending sequence p, is allowed (llama.cpp's check at
// the end of a candidate's code points).
static bool leaf_ok(const mctx *m, int32_t S, utf8_part p) {
    if (p.rem == 0) return S != 0;
    for (int32_t i = 0; i < m->st_len[S]; i++) {
        const int32_t s = m->items[m->st_off[S] + i];
        if (top_is_char(m, s) && match_partial(m->g->el, m->nd_el[s], p)) return true;
    }
    return false;
}

// The stacks of S that can continue pending sequence p (all of S when none is pending), as a set.
static int32_t keep_partial(mctx *m, int32_t S, utf8_part p) {
    if (p.rem == 0) return S;
    size_t n = 0;
    for (int32_t i = 0; i < m->st_len[S]; i++) {
        const int32_t s = m->items[m->st_off[S] + i];
        if (!top_is_char(m, s) || !match_partial(m->g->el, m->nd_el[s], p)) continue;
        if (!m_grow(m, (void **)&m->mrg, &m->cap_mrg, n + 1, sizeof *m->mrg)) return -1;
        m->mrg[n++] = s;
    }
    return set_of(m, m->mrg, n);
}

// --- states ----------------------------------------------------------------------------------------------------------

struct kvt_grammar_state {
    kvt_grammar *g;
    int32_t *el;     // [n_el]: every stack's elements, bottom first
    int64_t *at;     // [n_stacks + 1]: stack i is el[at[i] .. at[i + 1])
    int64_t n_stacks;
    utf8_part part;  // a pending UTF-8 sequence of the text so far
    bool has_empty;  // some stack is empty
    bool only_empty; // the empty stack is the only one
};

// The state's stacks as a set of m.
static int32_t load(mctx *m, const kvt_grammar_state *s) {
    if (!m_grow(m, (void **)&m->res, &m->cap_res, (size_t)s->n_stacks, sizeof *m->res)) return -1;
    for (int64_t i = 0; i < s->n_stacks; i++) {
        int32_t nd = 0;
        for (int64_t k = s->at[i]; k < s->at[i + 1]; k++)
            if ((nd = node(m, s->el[k], nd)) < 0) return -1;
        m->res[i] = nd;
    }
    const size_t n = sort_unique(m->res, (size_t)s->n_stacks);
    return set_of(m, m->res, n);
}

// Replaces s's stacks by set S of m (s unchanged on failure).
static bool store(mctx *m, kvt_grammar_state *s, int32_t S) {
    const int32_t n = m->st_len[S];
    int64_t tot = 0;
    for (int32_t i = 0; i < n; i++)
        for (int32_t nd = m->items[m->st_off[S] + i]; nd != 0; nd = m->nd_up[nd]) tot++;
    int32_t *el = malloc((size_t)(tot ? tot : 1) * sizeof *el);
    int64_t *at = malloc(((size_t)n + 1) * sizeof *at);
    if (!el || !at) {
        free(el), free(at);
        return m_fail(m, KVT_ERR_NOMEM, NULL);
    }
    int64_t k = 0;
    bool has_empty = false;
    for (int32_t i = 0; i < n; i++) {
        const int32_t top = m->items[m->st_off[S] + i];
        int64_t d = 0;
        for (int32_t nd = top; nd != 0; nd = m->nd_up[nd]) d++;
        at[i] = k;
        int64_t j = k + d;
        for (int32_t nd = top; nd != 0; nd = m->nd_up[nd]) el[--j] = m->nd_el[nd];
        k += d;
        has_empty |= top == 0;
    }
    at[n] = k;
    free(s->el), free(s->at);
    s->el = el, s->at = at, s->n_stacks = n;
    s->has_empty = has_empty;
    s->only_empty = has_empty && n == 1;
    return true;
}

kvt_status kvt_grammar_state_init(const kvt_grammar *g, kvt_grammar_state **out, kvt_err *err) {
    *out = NULL;
    kvt_grammar_state *s = calloc(1, sizeof *s);
    if (!s) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a grammar state");
    s->g = kvt_grammar_ref(g);
    mctx m;
    bool ok = m_init(&m, g, err);
    // llama.cpp's initial stacks: each alternative of the root, advanced
    size_t n_sel = 0;
    for (int32_t a = g->alt_first[g->root]; ok && a < g->alt_first[g->root + 1]; a++) {
        const int32_t at = g->alts[a];
        const int32_t nd = gr_is_eos(g->el[at].type) ? 0 : node(&m, at, 0);
        const int32_t S = nd < 0 ? -1 : closure(&m, nd);
        ok = S >= 0 && m_grow(&m, (void **)&m.sel, &m.cap_sel, n_sel + 1, sizeof *m.sel);
        if (ok) m.sel[n_sel++] = S;
    }
    const int32_t S = ok ? set_union(&m, n_sel) : -1;
    ok = S >= 0 && store(&m, s, S);
    const kvt_status st = ok ? KVT_OK : m.st;
    m_free(&m);
    if (!ok) {
        kvt_grammar_state_free(s);
        return st;
    }
    *out = s;
    return KVT_OK;
}

void kvt_grammar_state_free(kvt_grammar_state *s) {
    if (!s) return;
    kvt_grammar_free(s->g);
    free(s->el);
    free(s->at);
    free(s);
}

kvt_status kvt_grammar_state_clone(const kvt_grammar_state *s, kvt_grammar_state **out, kvt_err *err) {
    *out = NULL;
    kvt_grammar_state *c = calloc(1, sizeof *c);
    const int64_t n_el = s->at[s->n_stacks];
    if (c) {
        c->el = malloc((size_t)(n_el ? n_el : 1) * sizeof *c->el);
        c->at = malloc(((size_t)s->n_stacks + 1) * sizeof *c->at);
    }
    if (!c || !c->el || !c->at) {
        if (c) free(c->el), free(c->at);
        free(c);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory cloning a grammar state");
    }
    if (n_el) memcpy(c->el, s->el, (size_t)n_el * sizeof *c->el);
    memcpy(c->at, s->at, ((size_t)s->n_stacks + 1) * sizeof *c->at);
    c->n_stacks = s->n_stacks;
    c->part = s->part;
    c->has_empty = s->has_empty;
    c->only_empty = s->only_empty;
    c->g = kvt_grammar_ref(s->g);
    *out = c;
    return KVT_OK;
}

bool kvt_grammar_state_complete(const kvt_grammar_state *s) { return s->part.rem == 0 && s->has_empty; }

bool kvt_grammar_state_done(const kvt_grammar_state *s) { return s->part.rem == 0 && s->only_empty; }

// --- checking tokens -------------------------------------------------------------------------------------------------

// What one call checks tokens against: the state's stacks as set S0 and its token references.
typedef struct {
    mctx m;
    const kvt_grammar_state *s;
    const kvt_grammar_vocab *v;
    int32_t S0;
    bool complete;
    uint32_t *cps; // scratch for a piece decoded after a pending sequence
    size_t cap_cps;
} tcheck;

// Whether token reference e (any element: false unless a token reference) takes token id.
static bool ref_takes(gr_elem e, int32_t id) {
    return (e.type == GR_TOKEN && e.value == (uint32_t)id) || (e.type == GR_TOKEN_NOT && e.value != (uint32_t)id);
}

// Whether token id may be matched by a token reference on top of a stack of S0 (no sequence pending, and the token
// has a code point: llama.cpp checks the id only of a piece that has one).
static bool token_ref_ok(const tcheck *t, int32_t id) {
    const mctx *m = &t->m;
    if (t->s->part.rem != 0 || t->v->cp_off[id + 1] == t->v->cp_off[id]) return false;
    for (int32_t i = 0; i < m->st_len[t->S0]; i++) {
        const int32_t s = m->items[m->st_off[t->S0] + i];
        if (s == 0) continue;
        if (ref_takes(m->g->el[m->nd_el[s]], id)) return true;
    }
    return false;
}

// Token id's code points and tail after the state's pending sequence (the vocabulary's own when none is pending).
// Returns false when the piece is empty or its UTF-8 is invalid there.
static bool token_text(tcheck *t, int32_t id, const uint32_t **cps, size_t *n, utf8_part *tail) {
    const kvt_grammar_vocab *v = t->v;
    const size_t len = (size_t)(v->off[id + 1] - v->off[id]);
    if (!len) return false;
    if (t->s->part.rem == 0) {
        *cps = v->cps + v->cp_off[id];
        *n = (size_t)(v->cp_off[id + 1] - v->cp_off[id]);
        *tail = v->tail[id];
        return tail->rem >= 0;
    }
    const uint8_t *p = (const uint8_t *)v->bytes + v->off[id];
    if ((p[0] >> 6) != 2) return false; // the pending sequence needs a continuation byte
    if (!m_grow(&t->m, (void **)&t->cps, &t->cap_cps, len, sizeof *t->cps)) return false;
    size_t bad;
    *n = decode(p, len, t->s->part, t->cps, NULL, tail, &bad);
    *cps = t->cps;
    return tail->rem >= 0;
}

// One token against S0: 1 allowed, 0 not, -1 error. *end (may be NULL): the set its code points lead to (0: none).
static int check_one(tcheck *t, int32_t id, int32_t *end, utf8_part *tail_out) {
    const kvt_grammar_vocab *v = t->v;
    if (end) *end = 0;
    if (id < 0 || id >= v->n) return 0;
    if (v->eog[id]) return t->complete;
    const uint32_t *cps;
    size_t n;
    utf8_part tail;
    if (!token_text(t, id, &cps, &n, &tail)) return t->m.st != KVT_OK ? -1 : 0;
    if (tail_out) *tail_out = tail;
    int32_t S = t->S0;
    for (size_t k = 0; k < n && S != 0; k++)
        if ((S = step(&t->m, S, cps[k])) < 0) return -1;
    const bool by_text = S != 0 && leaf_ok(&t->m, S, tail);
    if (end && by_text) *end = S;
    return by_text || token_ref_ok(t, id);
}

static bool tcheck_init(tcheck *t, const kvt_grammar_state *s, const kvt_grammar_vocab *v, kvt_err *err) {
    *t = (tcheck){.s = s, .v = v};
    if (!m_init(&t->m, s->g, err)) return false;
    t->S0 = load(&t->m, s);
    t->complete = kvt_grammar_state_complete(s);
    return t->S0 >= 0;
}

static void tcheck_free(tcheck *t) {
    m_free(&t->m);
    free(t->cps);
}

// Every token of the vocabulary at once into all[n_vocab]: the trie walk (no sequence pending).
static bool check_all(tcheck *t, uint8_t *all) {
    const kvt_grammar_vocab *v = t->v;
    mctx *m = &t->m;
    memset(all, 0, (size_t)v->n);
    int32_t *at_depth = malloc(((size_t)v->max_depth + 1) * sizeof *at_depth);
    if (!at_depth) return m_fail(m, KVT_ERR_NOMEM, NULL);
    at_depth[0] = t->S0;
    for (int32_t k = v->nd_tok[0]; k < v->nd_tok[1]; k++) all[v->tok[k]] = leaf_ok(m, t->S0, v->tail[v->tok[k]]);
    for (int32_t i = 1; i < v->n_nodes;) {
        const int32_t d = v->nd_depth[i];
        const int32_t S = step(m, at_depth[d - 1], v->nd_cp[i]);
        if (S < 0) {
            free(at_depth);
            return false;
        }
        if (S == 0) {
            i = v->nd_end[i];
            continue;
        }
        at_depth[d] = S;
        for (int32_t k = v->nd_tok[i]; k < v->nd_tok[i + 1]; k++) all[v->tok[k]] = leaf_ok(m, S, v->tail[v->tok[k]]);
        i++;
    }
    free(at_depth);
    // token references on top of S0, then the end-of-generation tokens
    int32_t n_not = 0;
    uint32_t not_v = 0;
    for (int32_t i = 0; i < m->st_len[t->S0]; i++) {
        const int32_t s = m->items[m->st_off[t->S0] + i];
        if (s == 0) continue;
        const gr_elem e = m->g->el[m->nd_el[s]];
        if (e.type == GR_TOKEN && e.value < (uint32_t)v->n && token_ref_ok(t, (int32_t)e.value)) all[e.value] = 1;
        if (e.type == GR_TOKEN_NOT && (n_not == 0 || e.value != not_v)) n_not++, not_v = e.value;
    }
    if (n_not)
        for (int32_t id = 0; id < v->n; id++)
            if (matchable(v, id) && v->cp_off[id + 1] > v->cp_off[id] && (n_not > 1 || (uint32_t)id != not_v))
                all[id] = 1;
    for (int32_t id = 0; id < v->n; id++)
        if (v->eog[id]) all[id] = t->complete;
    return true;
}

kvt_status kvt_grammar_state_filter(const kvt_grammar_state *s, const kvt_grammar_vocab *v, const int32_t *ids,
                                    int64_t n, uint8_t *allowed, kvt_err *err) {
    if (n <= 0) return KVT_OK;
    tcheck t;
    bool ok = tcheck_init(&t, s, v, err);
    if (ok && s->part.rem == 0 && n >= v->n / 4 && n >= 16) { // most of the vocabulary: one walk of the trie
        uint8_t *all = malloc((size_t)v->n);
        ok = all ? check_all(&t, all) : m_fail(&t.m, KVT_ERR_NOMEM, NULL);
        for (int64_t i = 0; ok && i < n; i++) allowed[i] = ids[i] >= 0 && ids[i] < v->n ? all[ids[i]] : 0;
        free(all);
    } else {
        for (int64_t i = 0; ok && i < n; i++) {
            const int r = check_one(&t, ids[i], NULL, NULL);
            ok = r >= 0;
            allowed[i] = r > 0;
        }
    }
    const kvt_status st = ok ? KVT_OK : t.m.st;
    tcheck_free(&t);
    return st;
}

kvt_status kvt_grammar_state_accept(kvt_grammar_state *s, const kvt_grammar_vocab *v, int32_t id, kvt_err *err) {
    if (id < 0 || id >= v->n)
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "token %d is outside the vocabulary", (int)id);
    tcheck t;
    bool ok = tcheck_init(&t, s, v, err);
    int32_t end = 0;
    utf8_part tail = {0, 0};
    const int r = ok ? check_one(&t, id, &end, &tail) : -1;
    ok = r >= 0;
    if (r == 0) {
        const int64_t l = v->off[id + 1] - v->off[id];
        t.m.st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "token %d ('%.*s') is not allowed by the grammar here", (int)id,
                            (int)(l > 60 ? 60 : l), v->bytes + v->off[id]);
        ok = false;
    }
    if (ok && !v->eog[id]) {
        size_t n_sel = 0;
        if (end != 0) {
            const int32_t k = keep_partial(&t.m, end, tail);
            ok = k >= 0 && m_grow(&t.m, (void **)&t.m.sel, &t.m.cap_sel, 1, sizeof *t.m.sel);
            if (ok && k != 0) t.m.sel[n_sel++] = k;
        }
        // stacks topped by a token reference that takes this token
        for (int32_t i = 0; ok && token_ref_ok(&t, id) && i < t.m.st_len[t.S0]; i++) {
            const int32_t nd = t.m.items[t.m.st_off[t.S0] + i];
            if (nd == 0) continue;
            const gr_elem e = s->g->el[t.m.nd_el[nd]];
            if (!ref_takes(e, id)) continue;
            const int32_t k = succ(&t.m, nd);
            ok = k >= 0 && m_grow(&t.m, (void **)&t.m.sel, &t.m.cap_sel, n_sel + 1, sizeof *t.m.sel);
            if (ok && k != 0) t.m.sel[n_sel++] = k;
        }
        const int32_t S = ok ? set_union(&t.m, n_sel) : -1;
        ok = S >= 0 && store(&t.m, s, S);
        if (ok) s->part = tail; // (as llama.cpp, also after a token matched by a reference)
    }
    const kvt_status st = ok ? KVT_OK : t.m.st;
    tcheck_free(&t);
    return st;
}

// accept_bytes' work: KVT_OK with *rejected = the offending byte offset (-1 none; the state unchanged when >= 0).
static kvt_status advance_bytes(kvt_grammar_state *s, const char *b, size_t n, int64_t *rejected, kvt_err *err) {
    *rejected = -1;
    if (n == 0) return KVT_OK;
    const char *z = memchr(b, 0, n);
    if (z) {
        *rejected = z - b;
        return KVT_OK;
    }
    uint32_t *cps = malloc(n * sizeof *cps);
    size_t *at = malloc(n * sizeof *at);
    mctx m;
    bool ok = m_init(&m, s->g, err);
    if (!cps || !at) ok = m_fail(&m, KVT_ERR_NOMEM, NULL);
    if (ok) {
        utf8_part tail;
        size_t bad = 0;
        const size_t k = decode((const uint8_t *)b, n, s->part, cps, at, &tail, &bad);
        int32_t S = load(&m, s);
        ok = S >= 0;
        if (ok && tail.rem < 0) *rejected = (int64_t)bad;
        for (size_t i = 0; ok && *rejected < 0 && i < k; i++) {
            ok = (S = step(&m, S, cps[i])) >= 0;
            if (ok && S == 0) *rejected = (int64_t)at[i];
        }
        if (ok && *rejected < 0) {
            ok = (S = keep_partial(&m, S, tail)) >= 0;
            if (ok && S == 0) *rejected = (int64_t)bad; // no stack takes the pending sequence
            else if (ok && (ok = store(&m, s, S))) s->part = tail;
        }
    }
    const kvt_status st = ok ? KVT_OK : m.st;
    m_free(&m);
    free(cps);
    free(at);
    return st;
}

kvt_status kvt_grammar_state_accept_bytes(kvt_grammar_state *s, const char *b, size_t n, kvt_err *err) {
    int64_t bad;
    const kvt_status st = advance_bytes(s, b, n, &bad, err);
    if (st != KVT_OK) return st;
    if (bad >= 0)
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "grammar rejects byte %lld (0x%02x) of %zu", (long long)bad,
                          (unsigned)(unsigned char)b[bad], n);
    return KVT_OK;
}

kvt_status kvt_grammar_match(const kvt_grammar *g, const char *text, size_t len, bool *complete, kvt_err *err) {
    *complete = false;
    kvt_grammar_state *s;
    kvt_status st = kvt_grammar_state_init(g, &s, err);
    if (st != KVT_OK) return st;
    int64_t bad;
    st = advance_bytes(s, text, len, &bad, err);
    if (st == KVT_OK) *complete = bad < 0 && kvt_grammar_state_complete(s);
    kvt_grammar_state_free(s);
    return st;
}
