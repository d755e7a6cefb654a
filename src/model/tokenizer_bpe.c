// tokenizer_bpe.c - byte-level BPE: pre-tokenizer passes and rank merges.
//
// The pre-tokenizer regexes of llama.cpp are implemented as hand-written
// splitters over code points. A pre-tokenizer is a sequence of passes; the
// text starts as one chunk and each pass re-splits every chunk on its own
// (a pass never looks across a chunk boundary), which is how llama.cpp
// applies a list of regexes. The splitters reproduce llama.cpp's behaviour,
// including where it departs from a true regex engine (e.g. "\s+(?!\S)" at
// the end of a chunk takes all the white space).
#include <stdlib.h>
#include <string.h>

#include "../base/grow.h"
#include "tokenizer_impl.h"

#include "../base/grow.h"
#include "unicode.h"

// ---------------------------------------------------------------------------
// chunk lists

typedef struct {
    size_t *v;
    size_t n, cap;
    bool oom;
} lenvec;

static void lv_push(lenvec *a, size_t x) {
    if (a->oom) return;
    if (!kvt_grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v)) {
        a->oom = true;
        return;
    }
    a->v[a->n++] = x;
}

// State of one pass over one chunk [ini, end).
typedef struct {
    const uint32_t *cp;
    const uint16_t *fl; // kvt_uflags per code point
    size_t ini, end;
    size_t prev;        // end of the last emitted piece
    lenvec *out;
} span;

static uint32_t F(const span *s, size_t pos) {
    return (pos >= s->ini && pos < s->end) ? s->fl[pos] : 0u;
}

static void emit(span *s, size_t to) {
    if (to > s->prev) {
        lv_push(s->out, to - s->prev);
    }
    s->prev = to;
}

static bool is_rn(uint32_t c) {
    return c == '\r' || c == '\n';
}

// Contractions 's 't 'm 'd 're 've 'll at pos; returns their length or 0.
static size_t contraction(const span *s, size_t pos, bool any_case) {
    if (s->cp[pos] != '\'' || pos + 1 >= s->end) {
        return 0;
    }
    uint32_t a = s->cp[pos + 1];
    if (any_case) {
        a = kvt_utolower(a);
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        return 2;
    }
    if (pos + 2 < s->end) {
        uint32_t b = s->cp[pos + 2];
        if (any_case) {
            b = kvt_utolower(b);
        }
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
            return 3;
        }
    }
    return 0;
}

#define C_SPACE KVT_UFLAG_SPACE
#define C_LET KVT_UCAT_LETTER
#define C_NUM KVT_UCAT_NUMBER
#define C_MARK KVT_UCAT_MARK

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
static void pass_gpt2(span *s) {
    size_t pos = s->ini;
    while (pos < s->end) {
        const uint32_t c = s->cp[pos];
        size_t k = contraction(s, pos, false);
        if (k) {
            pos += k;
            emit(s, pos);
            continue;
        }
        const uint32_t f2 = (c == ' ') ? F(s, pos + 1) : F(s, pos);
        if (f2 & C_LET) {
            pos += (c == ' ');
            while (F(s, pos) & C_LET) {
                pos++;
            }
            emit(s, pos);
            continue;
        }
        if (f2 & C_NUM) {
            pos += (c == ' ');
            while (F(s, pos) & C_NUM) {
                pos++;
            }
            emit(s, pos);
            continue;
        }
        if (!(f2 & (C_SPACE | C_LET | C_NUM)) && f2 != 0) {
            pos += (c == ' ');
            while (!(F(s, pos) & (C_SPACE | C_LET | C_NUM)) && F(s, pos) != 0) {
                pos++;
            }
            emit(s, pos);
            continue;
        }
        size_t nws = 0;
        while (F(s, pos + nws) & C_SPACE) {
            nws++;
        }
        if (nws > 1 && pos + nws < s->end) { // \s+(?!\S): leave the last one
            pos += nws - 1;
        } else if (nws > 0) {
            pos += nws;
        } else {
            pos++; // matches nothing: a piece of its own
        }
        emit(s, pos);
    }
}

// Llama 3 / Qwen2 / Qwen3.5 family:
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?W+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// with W = \p{L} (or [\p{L}\p{M}] for qwen35, which also keeps \p{M} out of
// the punctuation class) and D = 3 (llama3) or 1 (qwen).
static void pass_llama3(span *s, size_t max_digits, bool marks) {
    const uint32_t word = C_LET | (marks ? C_MARK : 0u);
    const uint32_t excl = C_SPACE | C_LET | C_NUM | (marks ? C_MARK : 0u);
    size_t pos = s->ini;
    while (pos < s->end) {
        const uint32_t c = s->cp[pos];
        const uint32_t f = F(s, pos);
        size_t k = contraction(s, pos, true);
        if (k) {
            pos += k;
            emit(s, pos);
            continue;
        }
        if (!(is_rn(c) || (f & C_NUM))) {
            if ((f & word) || (F(s, pos + 1) & word)) {
                pos++;
                while (F(s, pos) & word) {
                    pos++;
                }
                emit(s, pos);
                continue;
            }
        }
        if (f & C_NUM) {
            if (max_digits <= 1) {
                pos++;
            } else {
                size_t run = pos;
                while (F(s, pos) & C_NUM) {
                    pos++;
                    if (pos - run >= max_digits) {
                        emit(s, pos);
                        run = pos;
                    }
                }
            }
            emit(s, pos);
            continue;
        }
        const uint32_t f2 = (c == ' ') ? F(s, pos + 1) : f;
        if (!(f2 & excl) && f != 0) {
            pos += (c == ' ');
            while (!(F(s, pos) & excl) && F(s, pos) != 0) {
                pos++;
            }
            while (pos < s->end && is_rn(s->cp[pos])) {
                pos++;
            }
            emit(s, pos);
            continue;
        }
        size_t nws = 0, last_rn = 0;
        while (F(s, pos + nws) & C_SPACE) {
            if (is_rn(s->cp[pos + nws])) {
                last_rn = pos + nws + 1;
            }
            nws++;
        }
        if (last_rn > 0) { // \s*[\r\n]+
            pos = last_rn;
        } else if (nws > 1 && pos + nws < s->end) { // \s+(?!\S)
            pos += nws - 1;
        } else if (nws > 0) {
            pos += nws;
        } else {
            pos++;
        }
        emit(s, pos);
    }
}

// Class passes, as llama.cpp's std::regex fallback sees them (code points
// reduced to one byte per category class).
typedef enum {
    CLS_NUMBER,       // \p{N}
    CLS_PUNCT_ISO,    // [\p{P}\$\+<=>\^~\|]
    CLS_PUNCT_ISO_BT, // [\p{P}\$\+<=>\^~\|`]
} cls_kind;

static bool in_class(const span *s, size_t pos, cls_kind k) {
    uint32_t c = s->cp[pos];
    uint32_t f = s->fl[pos];
    switch (k) {
    case CLS_NUMBER:
        return (f & C_NUM) != 0;
    case CLS_PUNCT_ISO:
    case CLS_PUNCT_ISO_BT:
        if (c < 128 && strchr("$+<=>^~|", (int)c) && c != 0) {
            return true;
        }
        if (k == CLS_PUNCT_ISO_BT && c == '`') {
            return true;
        }
        return (f & KVT_UCAT_PUNCT) && !(f & C_SPACE);
    }
    return false;
}

// Matches are maximal runs (run = true) or single code points; the text
// between matches stays as pieces of its own.
static void pass_class(span *s, cls_kind k, bool run) {
    size_t pos = s->ini;
    while (pos < s->end) {
        if (!in_class(s, pos, k)) {
            pos++;
            continue;
        }
        emit(s, pos); // the gap before
        pos++;
        if (run) {
            while (pos < s->end && in_class(s, pos, k)) {
                pos++;
            }
        }
        emit(s, pos);
    }
    emit(s, s->end);
}

// [0-9][0-9][0-9], leftmost first.
static void pass_digit3(span *s) {
    size_t pos = s->ini;
    while (pos < s->end) {
        if (pos + 2 < s->end && s->cp[pos] - '0' < 10u && s->cp[pos + 1] - '0' < 10u &&
            s->cp[pos + 2] - '0' < 10u) {
            emit(s, pos);
            pos += 3;
            emit(s, pos);
        } else {
            pos++;
        }
    }
    emit(s, s->end);
}

typedef enum { P_GPT2, P_LLAMA3, P_QWEN2, P_QWEN35, P_NUM1, P_NUMRUN, P_PUNCT, P_PUNCT_BT, P_DIGIT3 } pass_id;

static void run_pass(span *s, pass_id p) {
    switch (p) {
    case P_GPT2: pass_gpt2(s); break;
    case P_LLAMA3: pass_llama3(s, 3, false); break;
    case P_QWEN2: pass_llama3(s, 1, false); break;
    case P_QWEN35: pass_llama3(s, 1, true); break;
    case P_NUM1: pass_class(s, CLS_NUMBER, false); break;
    case P_NUMRUN: pass_class(s, CLS_NUMBER, true); break;
    case P_PUNCT: pass_class(s, CLS_PUNCT_ISO, true); break;
    case P_PUNCT_BT: pass_class(s, CLS_PUNCT_ISO_BT, true); break;
    case P_DIGIT3: pass_digit3(s); break;
    }
}

static size_t passes_of(kvt_pre_kind kind, pass_id *p) {
    switch (kind) {
    case KVT_PRE_DEFAULT:
        p[0] = P_PUNCT; p[1] = P_GPT2; p[2] = P_NUMRUN; p[3] = P_DIGIT3;
        return 4;
    case KVT_PRE_FALCON:
        p[0] = P_PUNCT_BT; p[1] = P_GPT2; p[2] = P_DIGIT3;
        return 3;
    case KVT_PRE_GPT2: p[0] = P_GPT2; return 1;
    case KVT_PRE_LLAMA3: p[0] = P_LLAMA3; return 1;
    case KVT_PRE_QWEN2: p[0] = P_QWEN2; return 1;
    case KVT_PRE_QWEN35: p[0] = P_QWEN35; return 1;
    case KVT_PRE_SMOLLM: p[0] = P_NUM1; p[1] = P_GPT2; return 2;
    }
    return 0;
}

bool kvt_pretokenize(kvt_pre_kind kind, const char *text, size_t n, uint32_t **cpts_out,
                     size_t *n_cpts, size_t **lens_out, size_t *n_lens) {
    *cpts_out = NULL;
    *lens_out = NULL;
    *n_cpts = 0;
    *n_lens = 0;
    uint32_t *cp = malloc((n ? n : 1) * sizeof *cp);
    uint16_t *fl = malloc((n ? n : 1) * sizeof *fl);
    lenvec a = {0}, b = {0};
    if (!cp || !fl) {
        free(cp);
        free(fl);
        return false;
    }
    size_t nc = 0;
    for (size_t off = 0; off < n;) {
        cp[nc] = kvt_utf8_decode(text, n, &off);
        fl[nc] = (uint16_t)kvt_uflags(cp[nc]);
        nc++;
    }
    if (nc > 0) {
        lv_push(&a, nc);
    }
    pass_id passes[4];
    size_t np = passes_of(kind, passes);
    for (size_t p = 0; p < np && !a.oom; p++) {
        b.n = 0;
        size_t start = 0;
        for (size_t i = 0; i < a.n; i++) {
            span s = {cp, fl, start, start + a.v[i], start, &b};
            run_pass(&s, passes[p]);
            start += a.v[i];
        }
        lenvec tmp = a;
        a = b;
        b = tmp;
        if (b.oom) {
            a.oom = true;
        }
    }
    free(fl);
    free(b.v);
    if (a.oom) {
        free(a.v);
        free(cp);
        return false;
    }
    *cpts_out = cp;
    *n_cpts = nc;
    *lens_out = a.v;
    *n_lens = a.n;
    return true;
}

// ---------------------------------------------------------------------------
// merges

typedef struct {
    int32_t prev, next;
    uint32_t off, n; // bytes of the encoded word
} sym;


typedef struct {
    const kvt_tokenizer *t;
    const char *w; // encoded word
    sym *s;
    kvt_bigram_heap h;
} bpe_ctx;

static void try_merge(bpe_ctx *c, int32_t l, int32_t r) {
    if (l < 0 || r < 0) {
        return;
    }
    const sym *a = &c->s[l], *b = &c->s[r];
    int32_t rank = kvt_merge_rank(c->t, c->w + a->off, a->n, c->w + b->off, b->n);
    if (rank < 0) {
        return;
    }
    kvt_bigram g = {-(float)rank, l, r, a->n + b->n};
    kvt_bigram_heap_push(&c->h, g);
}

bool kvt_bpe_tokenize(const kvt_tokenizer *t, const char *text, size_t n, kvt_ivec *out) {
    uint32_t *cp = NULL;
    size_t *lens = NULL, ncp = 0, nw = 0;
    if (!kvt_pretokenize(t->pre, text, n, &cp, &ncp, &lens, &nw)) {
        return false;
    }
    bool ok = true;
    char *w = NULL;  // encoded word
    size_t wcap = 0;
    sym *syms = NULL;
    size_t scap = 0;
    bpe_ctx c = {t, NULL, NULL, {0}};
    size_t start = 0;
    for (size_t wi = 0; wi < nw && ok; wi++) {
        const size_t wlen = lens[wi];
        // byte-level encoding of the word's UTF-8
        if (wlen * 8 > wcap) {
            wcap = wlen * 8;
            char *nwp = realloc(w, wcap);
            if (!nwp) {
                ok = false;
                break;
            }
            w = nwp;
        }
        size_t wn = 0;
        for (size_t i = start; i < start + wlen; i++) {
            char u[4];
            size_t ul = kvt_utf8_encode(cp[i], u);
            for (size_t k = 0; k < ul; k++) {
                uint8_t byte = (uint8_t)u[k];
                memcpy(w + wn, t->bpe_byte_utf8[byte], t->bpe_byte_utf8_len[byte]);
                wn += t->bpe_byte_utf8_len[byte];
            }
        }
        start += wlen;
        if (t->ignore_merges) {
            int32_t id = kvt_tok_find(t, w, wn);
            if (id >= 0) {
                kvt_ivec_push(out, id);
                continue;
            }
        }
        // one symbol per character of the encoded word
        if (wn > scap) {
            scap = wn;
            sym *ns = realloc(syms, scap * sizeof *ns);
            if (!ns) {
                ok = false;
                break;
            }
            syms = ns;
        }
        int32_t ns = 0;
        for (size_t off = 0; off < wn;) {
            size_t cl = kvt_utf8_len((unsigned char)w[off]);
            if (cl > wn - off) {
                cl = wn - off;
            }
            syms[ns].prev = ns - 1;
            syms[ns].off = (uint32_t)off;
            syms[ns].n = (uint32_t)cl;
            off += cl;
            syms[ns].next = off == wn ? -1 : ns + 1;
            ns++;
        }
        c.w = w;
        c.s = syms;
        c.h.n = 0;
        for (int32_t i = 1; i < ns; i++) {
            try_merge(&c, i - 1, i);
        }
        while (c.h.n > 0 && !c.h.oom) {
            kvt_bigram g = kvt_bigram_heap_pop(&c.h);
            sym *l = &syms[g.left], *r = &syms[g.right];
            if (l->n == 0 || r->n == 0 || l->n + r->n != g.size) {
                continue; // stale
            }
            l->n += r->n;
            r->n = 0;
            l->next = r->next;
            if (r->next >= 0) {
                syms[r->next].prev = g.left;
            }
            try_merge(&c, l->prev, g.left);
            try_merge(&c, g.left, l->next);
        }
        if (c.h.oom) {
            ok = false;
            break;
        }
        for (int32_t i = 0; i < ns; i++) {
            if (syms[i].n == 0) {
                continue;
            }
            int32_t id = kvt_tok_find(t, w + syms[i].off, syms[i].n);
            if (id >= 0) {
                kvt_ivec_push(out, id);
                continue;
            }
            // no such token: one token per byte of the encoded text, where
            // a one-byte token exists (llama.cpp drops the others)
            for (uint32_t k = 0; k < syms[i].n; k++) {
                int32_t bid = t->raw_byte_tok[(uint8_t)w[syms[i].off + k]];
                if (bid >= 0) {
                    kvt_ivec_push(out, bid);
                }
            }
        }
    }
    free(c.h.v);
    free(syms);
    free(w);
    free(cp);
    free(lens);
    return ok && !out->oom;
}
