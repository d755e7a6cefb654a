// tokenizer_spm.c - SentencePiece-style tokenization as llama.cpp does it.
//
// The (already escaped) text starts as one symbol per UTF-8 character. Every
// pair of neighbouring symbols whose concatenation is a vocabulary token is a
// candidate; the candidate whose token has the highest score is merged first
// (ties: the leftmost), and new candidates with the neighbours are added.
// Symbols left at the end that are not tokens are emitted byte by byte as
// <0xXX> tokens.
#include <stdlib.h>

#include "tokenizer_impl.h"
#include "unicode.h"

typedef struct {
    int32_t prev, next;
    uint32_t off, n;
} sym;


typedef struct {
    const kvt_tokenizer *t;
    const char *text;
    sym *s;
    kvt_bigram_heap h;
} spm_ctx;

static void try_pair(spm_ctx *c, int32_t l, int32_t r) {
    if (l < 0 || r < 0) {
        return;
    }
    // neighbours are adjacent in the text
    uint32_t size = c->s[l].n + c->s[r].n;
    int32_t id = kvt_tok_find(c->t, c->text + c->s[l].off, size);
    if (id < 0) {
        return;
    }
    kvt_bigram g = {c->t->toks[id].score, l, r, size};
    kvt_bigram_heap_push(&c->h, g);
}

bool kvt_spm_tokenize(const kvt_tokenizer *t, const char *text, size_t n, kvt_ivec *out) {
    if (n == 0) {
        return true;
    }
    sym *s = malloc(n * sizeof *s);
    if (!s) {
        return false;
    }
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t cl = kvt_utf8_len((unsigned char)text[off]);
        if (cl > n - off) {
            cl = n - off;
        }
        s[ns].prev = ns - 1;
        s[ns].off = (uint32_t)off;
        s[ns].n = (uint32_t)cl;
        off += cl;
        s[ns].next = off == n ? -1 : ns + 1;
        ns++;
    }
    spm_ctx c = {t, text, s, {0}};
    for (int32_t i = 1; i < ns; i++) {
        try_pair(&c, i - 1, i);
    }
    while (c.h.n > 0 && !c.h.oom) {
        kvt_bigram g = kvt_bigram_heap_pop(&c.h);
        sym *l = &s[g.left], *r = &s[g.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != g.size) {
            continue; // one side already merged elsewhere
        }
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) {
            s[r->next].prev = g.left;
        }
        try_pair(&c, l->prev, g.left);
        try_pair(&c, g.left, l->next);
    }
    bool ok = !c.h.oom;
    free(c.h.v);
    for (int32_t i = 0; ok && i != -1; i = s[i].next) {
        int32_t id = kvt_tok_find(t, text + s[i].off, s[i].n);
        if (id >= 0) {
            kvt_ivec_push(out, id);
            continue;
        }
        // Only single characters can be left unmatched (every merge makes a
        // token): byte fallback.
        for (uint32_t k = 0; k < s[i].n; k++) {
            int32_t bid = t->spm_byte_tok[(uint8_t)text[s[i].off + k]];
            if (bid < 0) {
                bid = t->unk;
            }
            if (bid >= 0) {
                kvt_ivec_push(out, bid);
            }
        }
    }
    free(s);
    return ok && !out->oom;
}
