// fuzz_grammar.c - fuzz target for the GBNF compiler and matcher (src/sched/grammar.h). The input is a grammar text
// and a text to match, split at the first "\n---\n" (none: all grammar, no text). The grammar is compiled with small
// bounds (and a <|...|> lookup over the fixed vocabulary below); when it compiles, the text is matched whole
// (kvt_grammar_match), then fed to a state in pieces of 1 to 4 bytes, and a walk of up to 16 tokens over a fixed
// vocabulary of 40 pieces (split UTF-8 sequences, an invalid byte, an empty piece, specials, end-of-generation)
// checks the filter: the whole vocabulary at once, token by token and after a clone must agree, an allowed token must
// be accepted and a rejected one refused.
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/sched/grammar.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const g_pieces[] = {
    "</s>", "<|end|>", "{", "}", "[", "]", "\"", ":", ",", " ", "\n", "a", "b", "ab", "x", "0", "1", "12", "-", ".",
    "true", "null", "\\", "\\n", "\":", "{\"", "\xc3", "\xa9", "\xc3\xa9", "\xe2\x82", "\xac", "\xe2\x82\xac", "\xff",
    "", "(", ")", "+", "*", "abc", "a\xc3",
};
enum { N_VOCAB = sizeof g_pieces / sizeof g_pieces[0] };
static kvt_grammar_vocab *g_vocab;

static int32_t lookup(void *ctx, const char *text, size_t len) {
    (void)ctx;
    for (int32_t i = 0; i < N_VOCAB; i++)
        if (strlen(g_pieces[i]) == len && !memcmp(g_pieces[i], text, len)) return i;
    return -1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    size_t lens[N_VOCAB];
    bool eog[N_VOCAB] = {0};
    for (int i = 0; i < N_VOCAB; i++) lens[i] = strlen(g_pieces[i]);
    eog[0] = eog[1] = true;
    kvt_err err;
    if (kvt_grammar_vocab_init(N_VOCAB, g_pieces, lens, eog, &g_vocab, &err) != KVT_OK) {
        fprintf(stderr, "fuzz_grammar: %s\n", err.msg);
        exit(2);
    }
    return 0;
}

static void fail(const char *what, const kvt_err *err) {
    fprintf(stderr, "fuzz_grammar: %s (%s)\n", what, err ? err->msg : "");
    abort();
}

// The filter over the whole vocabulary, token by token, on a clone: all must agree, and with accept.
static void check_state(kvt_grammar_state *s, uint32_t seed) {
    int32_t ids[N_VOCAB];
    uint8_t all[N_VOCAB], one[N_VOCAB];
    kvt_err err;
    for (int32_t i = 0; i < N_VOCAB; i++) ids[i] = i;
    for (int step = 0; step < 16; step++) {
        if (kvt_grammar_state_filter(s, g_vocab, ids, N_VOCAB, all, &err) != KVT_OK) return; // a bound: a status
        for (int32_t i = 0; i < N_VOCAB; i++)
            if (kvt_grammar_state_filter(s, g_vocab, &ids[i], 1, &one[i], &err) != KVT_OK) return;
        if (memcmp(all, one, N_VOCAB)) fail("the filter over all tokens and token by token differ", NULL);
        if (all[0] != kvt_grammar_state_complete(s)) fail("end-of-generation allowed unlike complete()", NULL);
        if (all[33]) fail("the empty piece allowed", NULL);
        kvt_grammar_state *c;
        if (kvt_grammar_state_clone(s, &c, &err) != KVT_OK) return;
        int32_t pick = -1, n_ok = 0;
        for (int32_t i = 2; i < N_VOCAB; i++) {
            const kvt_status st = kvt_grammar_state_accept(c, g_vocab, i, &err);
            if (st == KVT_OK) {
                if (!all[i]) fail("a rejected token accepted", &err);
                if (n_ok++ == (int32_t)(seed % 7)) pick = i;
                kvt_grammar_state_free(c);
                if (kvt_grammar_state_clone(s, &c, &err) != KVT_OK) return;
            } else if (st == KVT_ERR_INVALID_ARG && all[i] && !strstr(err.msg, "max_stacks")) {
                fail("an allowed token refused", &err);
            }
        }
        kvt_grammar_state_free(c);
        if (pick < 0) return;
        if (kvt_grammar_state_accept(s, g_vocab, pick, &err) != KVT_OK) return;
        seed = seed * 1103515245u + 12345u;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    size_t glen = size;
    const char *text = "";
    size_t tlen = 0;
    for (size_t i = 0; i + 5 <= size; i++)
        if (!memcmp(data + i, "\n---\n", 5)) {
            glen = i;
            text = src + i + 5;
            tlen = size - i - 5;
            break;
        }
    kvt_grammar_params p = kvt_grammar_params_default();
    p.max_repeat = 64;
    p.max_rules = 4096;
    p.max_stacks = 256;
    p.token_lookup = lookup;
    kvt_grammar *g = NULL;
    kvt_err err;
    if (kvt_grammar_parse(src, glen, NULL, &p, &g, &err) != KVT_OK) {
        if (err.status != KVT_ERR_INVALID_ARG) fail("a compile status other than invalid-argument", &err);
        return 0;
    }
    bool whole = false;
    const kvt_status sm = kvt_grammar_match(g, text, tlen, &whole, &err);
    kvt_grammar_state *s;
    if (kvt_grammar_state_init(g, &s, &err) == KVT_OK) {
        bool ok = true, bound = false;
        for (size_t i = 0; ok && i < tlen;) {
            size_t k = 1 + (i * 7 + tlen) % 4;
            if (k > tlen - i) k = tlen - i;
            ok = kvt_grammar_state_accept_bytes(s, text + i, k, &err) == KVT_OK;
            bound = !ok && strstr(err.msg, "max_stacks");
            i += k;
        }
        // pieces accept only what the whole accepts (llama.cpp's lenient decoding takes a lead byte's followers
        // whatever they are within one piece, not across pieces), and ASCII is the same either way
        bool ascii = true;
        for (size_t i = 0; i < tlen; i++) ascii = ascii && (unsigned char)text[i] < 0x80 && text[i];
        const bool pieces = ok && kvt_grammar_state_complete(s);
        if (sm == KVT_OK && !bound && pieces && !whole) fail("a text matched in pieces but not whole", NULL);
        if (sm == KVT_OK && !bound && ascii && pieces != whole) fail("an ASCII text matched whole but not in pieces", NULL);
        kvt_grammar_state_free(s);
        if (kvt_grammar_state_init(g, &s, &err) == KVT_OK) {
            check_state(s, (uint32_t)size);
            kvt_grammar_state_free(s);
        }
    }
    kvt_grammar_free(g);
    return 0;
}
