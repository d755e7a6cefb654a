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

// Code point ranges (inclusive, sorted) of the bracket classes that some
// pre-tokenizers spell out literally.
typedef struct {
    uint32_t lo, hi;
} urange;

// DeepSeek LLM's letter class: Latin, Greek, Cyrillic, Armenian, Georgian,
// Cherokee, ... letters with case, and the fullwidth Latin letters.
static const urange k_ds_letters[] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA},
    {0x1BC, 0x1BF}, {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377}, {0x37B, 0x37D},
    {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5},
    {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5},
    {0x13F8, 0x13FD}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D},
    {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D},
    {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC},
    {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC},
    {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D},
    {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134},
    {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2184},
    {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3}, {0xA640, 0xA66D},
    {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF},
    {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F},
    {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2},
    {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
// DeepSeek LLM's punctuation class: ASCII ! to / and : to ~ (letters
// included), quotation marks, ideographic comma and full stop, fullwidth forms.
static const urange k_ds_punct[] = {
    {0x21, 0x2F}, {0x3A, 0x7E}, {0x2018, 0x201F}, {0x3000, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
};
// DeepSeek's CJK class: U+0800 to U+9FA5 and the Hangul syllables.
static const urange k_ds_cjk[] = {{0x800, 0x9FA5}, {0xAC00, 0xD7FF}};

static bool in_ranges(uint32_t c, const urange *r, size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c > r[mid].hi) {
            lo = mid + 1;
        } else if (c < r[mid].lo) {
            hi = mid;
        } else {
            return true;
        }
    }
    return false;
}

#define N_RANGES(a) (sizeof a / sizeof a[0])

// Class passes, as llama.cpp's std::regex fallback sees them: it replaces
// every non-ASCII white-space code point by U+000B first, so such code points
// are in no class but \s.
typedef enum {
    CLS_NUMBER,       // \p{N}
    CLS_LETTER,       // \p{L}
    CLS_PUNCT,        // \p{P}
    CLS_PUNCT_ISO,    // [\p{P}\$\+<=>\^~\|]
    CLS_PUNCT_ISO_BT, // [\p{P}\$\+<=>\^~\|`]
    CLS_RN,           // [\r\n]
    CLS_DS_LETTER,    // k_ds_letters
    CLS_DS_PUNCT,     // k_ds_punct
    CLS_DS_CJK,       // k_ds_cjk
} cls_kind;

// Inlined into each pass_class call, whose kind is a constant there, so the
// switch folds away (the number pass runs on every SmolLM2 token).
#define INLINE static inline __attribute__((always_inline))

INLINE bool in_class(const span *s, size_t pos, cls_kind k) {
    const uint32_t c = s->cp[pos];
    const uint32_t f = s->fl[pos];
    // no \p{N} code point is white space, and white space below 128 is in
    // none of the classes: only the other classes need the check
    const bool wide_space = c >= 128 && (f & C_SPACE);
    switch (k) {
    case CLS_NUMBER: return (f & C_NUM) != 0;
    case CLS_LETTER: return (f & C_LET) && !wide_space;
    case CLS_PUNCT: return (f & KVT_UCAT_PUNCT) && !wide_space;
    case CLS_PUNCT_ISO:
    case CLS_PUNCT_ISO_BT:
        if (c < 128 && strchr("$+<=>^~|", (int)c) && c != 0) {
            return true;
        }
        if (k == CLS_PUNCT_ISO_BT && c == '`') {
            return true;
        }
        return (f & KVT_UCAT_PUNCT) && !wide_space;
    case CLS_RN: return is_rn(c);
    case CLS_DS_LETTER: return !wide_space && in_ranges(c, k_ds_letters, N_RANGES(k_ds_letters));
    case CLS_DS_PUNCT: return !wide_space && in_ranges(c, k_ds_punct, N_RANGES(k_ds_punct));
    case CLS_DS_CJK: return !wide_space && in_ranges(c, k_ds_cjk, N_RANGES(k_ds_cjk));
    }
    return false;
}

// Matches are maximal runs (run = true) or single code points, with one
// optional white-space code point in front (lead_space: "\s?[...]+"); the
// text between matches stays as pieces of its own.
INLINE void pass_class(span *s, cls_kind k, bool run, bool lead_space) {
    size_t pos = s->ini;
    while (pos < s->end) {
        size_t from = pos;
        if (lead_space && (s->fl[pos] & C_SPACE) && pos + 1 < s->end && in_class(s, pos + 1, k)) {
            pos++;
        } else if (!in_class(s, pos, k)) {
            pos++;
            continue;
        }
        emit(s, from); // the gap before
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

// \s+$: the white space at the end of the chunk.
static void pass_trailing_space(span *s) {
    size_t pos = s->end;
    while (pos > s->ini && (s->fl[pos - 1] & C_SPACE)) {
        pos--;
    }
    emit(s, pos);
    emit(s, s->end);
}

// [^\n]+|[\n]+: runs of newlines and runs of anything else.
static void pass_newlines(span *s) {
    size_t pos = s->ini;
    while (pos < s->end) {
        const bool nl = s->cp[pos] == '\n';
        while (pos < s->end && (s->cp[pos] == '\n') == nl) {
            pos++;
        }
        emit(s, pos);
    }
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

typedef enum {
    P_GPT2,
    P_LLAMA3,
    P_QWEN2,
    P_QWEN35,
    P_NUM1,      // \p{N}
    P_NUMRUN,    // \p{N}+
    P_PUNCT,     // [\p{P}\$\+<=>\^~\|]+
    P_PUNCT_BT,  // [\p{P}\$\+<=>\^~\|`]+
    P_DIGIT3,    // [0-9][0-9][0-9]
    P_RN,        // [\r\n]
    P_SP_LETTER, // \s?\p{L}+
    P_SP_PUNCT,  // \s?\p{P}+
    P_DS_LETTER, // \s?[A-Za-z...]+ (k_ds_letters)
    P_DS_PUNCT,  // \s?[!-/:-~...]+ (k_ds_punct)
    P_DS_CJK,    // [...]+ (k_ds_cjk)
    P_TRAIL_WS,  // \s+$
    P_NEWLINES,  // [^\n]+|[\n]+
} pass_id;

static void run_pass(span *s, pass_id p) {
    switch (p) {
    case P_GPT2: pass_gpt2(s); break;
    case P_LLAMA3: pass_llama3(s, 3, false); break;
    case P_QWEN2: pass_llama3(s, 1, false); break;
    case P_QWEN35: pass_llama3(s, 1, true); break;
    case P_NUM1: pass_class(s, CLS_NUMBER, false, false); break;
    case P_NUMRUN: pass_class(s, CLS_NUMBER, true, false); break;
    case P_PUNCT: pass_class(s, CLS_PUNCT_ISO, true, false); break;
    case P_PUNCT_BT: pass_class(s, CLS_PUNCT_ISO_BT, true, false); break;
    case P_DIGIT3: pass_digit3(s); break;
    case P_RN: pass_class(s, CLS_RN, false, false); break;
    case P_SP_LETTER: pass_class(s, CLS_LETTER, true, true); break;
    case P_SP_PUNCT: pass_class(s, CLS_PUNCT, true, true); break;
    case P_DS_LETTER: pass_class(s, CLS_DS_LETTER, true, true); break;
    case P_DS_PUNCT: pass_class(s, CLS_DS_PUNCT, true, true); break;
    case P_DS_CJK: pass_class(s, CLS_DS_CJK, true, false); break;
    case P_TRAIL_WS: pass_trailing_space(s); break;
    case P_NEWLINES: pass_newlines(s); break;
    }
}

#define MAX_PASSES 6

// The passes of each pre-tokenizer (llama.cpp's list of regexes for it).
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
    case KVT_PRE_DEEPSEEK_LLM:
        p[0] = P_RN; p[1] = P_DS_LETTER; p[2] = P_DS_PUNCT; p[3] = P_TRAIL_WS; p[4] = P_DS_CJK;
        p[5] = P_NUMRUN;
        return 6;
    case KVT_PRE_DEEPSEEK_CODER:
        p[0] = P_RN; p[1] = P_SP_LETTER; p[2] = P_SP_PUNCT; p[3] = P_DS_CJK; p[4] = P_NUM1;
        return 5;
    case KVT_PRE_GEMMA4: p[0] = P_NEWLINES; return 1;
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
    pass_id passes[MAX_PASSES];
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
        if (t->spm_style) { // raw UTF-8
            for (size_t i = start; i < start + wlen; i++) {
                wn += kvt_utf8_encode(cp[i], w + wn);
            }
        } else {
            for (size_t i = start; i < start + wlen; i++) {
                char u[4];
                size_t ul = kvt_utf8_encode(cp[i], u);
                for (size_t k = 0; k < ul; k++) {
                    uint8_t byte = (uint8_t)u[k];
                    memcpy(w + wn, t->bpe_byte_utf8[byte], t->bpe_byte_utf8_len[byte]);
                    wn += t->bpe_byte_utf8_len[byte];
                }
            }
        }
        start += wlen;
        // whole-word tokens: every word with ignore_merges, a newline run for
        // Gemma 4 (its words are newline runs or free of newlines)
        if (t->ignore_merges || (t->pre == KVT_PRE_GEMMA4 && w[0] == '\n')) {
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
            // a one-byte token (<0xXX> for raw UTF-8) exists; llama.cpp
            // drops the others
            const int32_t *byte_tok = t->spm_style ? t->spm_byte_tok : t->raw_byte_tok;
            for (uint32_t k = 0; k < syms[i].n; k++) {
                int32_t bid = byte_tok[(uint8_t)w[syms[i].off + k]];
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
