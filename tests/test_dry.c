// test_dry.c - llama.cpp's DRY penalty (src/sched/dry.h): llama.cpp's own test vectors, a brute-force reference on
// random windows, the sequence breakers made from strings, and DRY in the sampler's chain.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/gguf/gguf.h"
#include "../src/model/tokenizer.h"
#include "../src/sched/dry.h"
#include "../src/sched/sampler.h"
#include "test.h"
#include "test_util.h"

// logits log(p) over n tokens after the window `hist` and DRY (multiplier, base, allowed, last_n, breakers), then
// the softmax: out[n]. Returns false when the state cannot be made.
static bool dry_probs(const float *p, int n, const int32_t *hist, int nh, float mult, float base, int allowed,
                      int last_n, const kvt_dry_breakers *b, float *out) {
    kvt_dry_params dp = {mult, base, allowed, last_n};
    kvt_dry *d;
    if (kvt_dry_init(&dp, b, n, &d, NULL) != KVT_OK) return false;
    for (int i = 0; i < nh; i++) kvt_dry_accept(d, hist[i]);
    float l[64];
    for (int i = 0; i < n; i++) l[i] = logf(p[i]);
    const int32_t *tok;
    const float *pen;
    const int32_t k = kvt_dry_penalties(d, &tok, &pen);
    for (int32_t i = 0; i < k; i++) l[tok[i]] -= pen[i];
    double s = 0;
    for (int i = 0; i < n; i++) s += exp(l[i]);
    for (int i = 0; i < n; i++) out[i] = (float)(exp(l[i]) / s);
    kvt_dry_free(d);
    return true;
}

// llama.cpp's tests/test-sampling.cpp test_dry cases: probabilities, window, expected probabilities, multiplier, base,
// allowed length, last_n, the breakers as token sequences.
static void test_dry_llama_vectors(void) {
    static const struct {
        int n;
        float p[5];
        int nh;
        int32_t hist[8];
        float want[5];
        float mult, base;
        int allowed, last_n;
        int nb; // breakers: one single-token sequence {3} when 1
    } v[] = {
        {4, {.25f, .25f, .25f, .25f}, 2, {0, 1}, {.25f, .25f, .25f, .25f}, 1.0f, 1.1f, 2, 4, 0},
        {4, {.25f, .25f, .25f, .25f}, 5, {0, 1, 2, 0, 1}, {.296923f, .296923f, .109232f, .296923f}, 1.0f, 1.1f, 2, 5, 0},
        {5, {.2f, .2f, .2f, .2f, .2f}, 6, {0, 1, 3, 4, 0, 1}, {.2f, .2f, .2f, .2f, .2f}, 1.0f, 1.1f, 2, 6, 1},
        {5, {.2f, .2f, .2f, .2f, .2f}, 5, {0, 1, 2, 0, 1}, {.241818f, .241818f, .032727f, .241818f, .241818f}, 2.0f, 1.1f,
         2, 5, 0},
        {5, {.2f, .2f, .2f, .2f, .2f}, 7, {0, 1, 2, 3, 4, 0, 1}, {.2f, .2f, .2f, .2f, .2f}, 1.0f, 1.1f, 4, 7, 0},
    };
    int bad = 0;
    char why[256] = "";
    for (size_t c = 0; c < sizeof v / sizeof v[0]; c++) {
        const int32_t three = 3, *seq = &three, one = 1;
        kvt_dry_breakers *b = NULL;
        if (v[c].nb && kvt_dry_breakers_from_tokens(&seq, &one, 1, &b, NULL) != KVT_OK) {
            bad++;
            continue;
        }
        float got[5];
        bool ok = dry_probs(v[c].p, v[c].n, v[c].hist, v[c].nh, v[c].mult, v[c].base, v[c].allowed, v[c].last_n, b, got);
        for (int i = 0; ok && i < v[c].n; i++) ok = fabsf(got[i] - v[c].want[i]) < 1e-5f;
        if (!ok) {
            bad++;
            snprintf(why, sizeof why, "case %zu: %.6f %.6f %.6f %.6f", c, got[0], got[1], got[2], got[3]);
        }
        kvt_dry_breakers_free(b);
    }
    test_result(bad == 0, "sampler.dry: llama.cpp's five test-sampling vectors", "%d wrong; %s", bad, why);
}

// The definition, by brute force: the newest restart bounds the repetition (rep_limit); for each k, the longest
// common run of the window's newest tokens and those ending k back (capped at rep_limit); the token after such a run
// of at least `allowed` gets multiplier x base ^ (its longest run - allowed), unless it restarts alone. pen[n_vocab].
static void dry_reference(const int32_t *hist, int nh, int last_n, int allowed, float mult, float base,
                          const int32_t *const *seqs, const int32_t *lens, int nb, int n_vocab, float *pen) {
    for (int i = 0; i < n_vocab; i++) pen[i] = 0;
    const int L = nh < last_n ? nh : last_n;
    if (L <= allowed) return;
    int32_t r[256];
    for (int i = 0; i < L; i++) r[i] = hist[nh - 1 - i];
    int rep_limit = L;
    for (int i = 0; i < L && rep_limit == L; i++) {
        int longest = -1;
        for (int s = 0; s < nb; s++) {
            const int tl = lens[s] - 1 < 20 ? lens[s] - 1 : 20;
            if (seqs[s][0] != r[i] || tl > i || tl <= longest) continue;
            bool m = true;
            for (int o = 0; o < tl && m; o++) m = seqs[s][1 + o] == r[i - o - 1];
            if (m) longest = tl;
        }
        if (longest >= 0) rep_limit = i - longest;
    }
    if (rep_limit < allowed) return;
    int best[64];
    for (int i = 0; i < n_vocab; i++) best[i] = -1;
    for (int k = 1; k < L; k++) {
        int n = 0;
        while (n + k < L && r[n] == r[n + k]) n++;
        n = n < rep_limit ? n : rep_limit;
        if (n >= allowed && n > best[r[k - 1]]) best[r[k - 1]] = n;
    }
    int max_exp = base > 1.000001f ? (int)(88.7228391f / logf(base)) : 0;
    for (int t = 0; t < n_vocab; t++) {
        if (best[t] < 0) continue;
        bool alone = false;
        for (int s = 0; s < nb; s++) alone |= seqs[s][0] == t && lens[s] == 1;
        if (alone) continue;
        int e = best[t] - allowed;
        if (max_exp > 0 && e > max_exp) e = max_exp;
        pen[t] = (float)((double)mult * pow((double)base, (double)e));
    }
}

// Random windows over a small alphabet (repetitions abound), random breakers of one to three tokens: the
// Z-algorithm's penalties equal the brute force's, bit for bit.
static void test_dry_reference(void) {
    uint64_t rng = 0x1234567u;
    int bad = 0;
    char why[160] = "";
    enum { V = 6 };
    for (int trial = 0; trial < 3000; trial++) {
        int32_t hist[200], s0[3], s1[3], s2[3];
        const int32_t *seqs[3] = {s0, s1, s2};
        int32_t lens[3];
        const int nh = 1 + (int)((test_xorshift_unit(&rng) + 1) * 90);
        const int last_n = 1 + (int)((test_xorshift_unit(&rng) + 1) * 100);
        const int allowed = (int)((test_xorshift_unit(&rng) + 1) * 3);
        const int nb = (int)((test_xorshift_unit(&rng) + 1) * 1.6);
        for (int i = 0; i < nh; i++) hist[i] = (int32_t)((test_xorshift_unit(&rng) + 1) * (trial % 2 ? 1.5 : V / 2.0));
        for (int s = 0; s < nb; s++) {
            lens[s] = 1 + (int)((test_xorshift_unit(&rng) + 1) * 1.5);
            for (int j = 0; j < lens[s]; j++) ((int32_t *)seqs[s])[j] = (int32_t)((test_xorshift_unit(&rng) + 1) * V / 2);
        }
        kvt_dry_breakers *b = NULL;
        kvt_dry_params dp = {0.8f, 1.75f, allowed, last_n};
        kvt_dry *d = NULL;
        if (kvt_dry_breakers_from_tokens(seqs, lens, nb, &b, NULL) != KVT_OK ||
            kvt_dry_init(&dp, b, V, &d, NULL) != KVT_OK) {
            bad++;
            kvt_dry_breakers_free(b);
            continue;
        }
        for (int i = 0; i < nh; i++) kvt_dry_accept(d, hist[i]);
        float want[V], got[V] = {0};
        dry_reference(hist, nh, last_n, allowed, 0.8f, 1.75f, seqs, lens, nb, V, want);
        const int32_t *tok;
        const float *pen;
        const int32_t k = kvt_dry_penalties(d, &tok, &pen);
        for (int32_t i = 0; i < k; i++) got[tok[i]] += pen[i];
        // a second call on the same window gives the same (the scratch is reset)
        const int32_t k2 = kvt_dry_penalties(d, &tok, &pen);
        if (memcmp(got, want, sizeof got) || k2 != k) {
            if (!bad) snprintf(why, sizeof why, "trial %d (nh %d last_n %d allowed %d): token 0 %.4f vs %.4f", trial, nh,
                               last_n, allowed, got[0], want[0]);
            bad++;
        }
        kvt_dry_free(d);
        kvt_dry_breakers_free(b);
    }
    test_result(bad == 0, "sampler.dry: the penalties of 3000 random windows equal a brute-force reference", "%d wrong; %s",
                bad, why);
}

// Breakers from strings on a small vocabulary (test_util.h): letters 0..25, space 39, newline 40, words from 42.
static void test_dry_strings(void) {
    static const char *const ctl[] = {"<|endoftext|>"}, *const words[] = {"xa", "zab"};
    kvt_gguf *g = NULL;
    kvt_tokenizer *t = test_vocab_words(ctl, 1, words, 2, 42, false, &g);
    if (!t) {
        test_result(false, "sampler.dry: breakers from strings", "cannot make the test vocabulary");
        return;
    }
    // "ab": "zab" holds it (restarts alone); "a" and "xa" end with its first byte, then the tokens of "b" ([1])
    const char *strs[] = {"ab", "", "\n"};
    const size_t lens[] = {2, 0, 1};
    kvt_dry_breakers *b = NULL;
    kvt_err err = {0};
    kvt_status st = kvt_dry_breakers_init(t, strs, lens, 3, &b, &err);
    test_result(st == KVT_OK && kvt_dry_breakers_count(b) == 4,
                "sampler.dry: breakers from strings (a token holding one restarts alone; one ending with its first "
                "bytes restarts with the rest's tokens after it; an empty string is skipped)",
                "status %d, %d entries: %s", (int)st, kvt_dry_breakers_count(b), err.msg);
    // the window "a b c d x a b c d" (allowed 2, base 2): "x" would extend "a b c d" (4 long: 2 ^ (4 - 2)), unless
    // the newest "a b" restarts: then the run counts from after it ("c d": 2 ^ 0)
    const int32_t w[] = {0, 1, 2, 3, 23, 0, 1, 2, 3};
    kvt_dry_params dp = {1.0f, 2.0f, 2, 64};
    float pen_x[2];
    const kvt_dry_breakers *use[2] = {b, NULL};
    for (int u = 0; u < 2; u++) {
        kvt_dry *d = NULL;
        pen_x[u] = -1;
        if (kvt_dry_init(&dp, use[u], kvt_tokenizer_n_vocab(t), &d, NULL) != KVT_OK) continue;
        for (int i = 0; i < 9; i++) kvt_dry_accept(d, w[i]);
        const int32_t *tok;
        const float *pen;
        const int32_t k = kvt_dry_penalties(d, &tok, &pen);
        pen_x[u] = 0;
        for (int32_t i = 0; i < k; i++)
            if (tok[i] == 23) pen_x[u] = pen[i];
        kvt_dry_free(d);
    }
    test_result(pen_x[0] == 1.0f && pen_x[1] == 4.0f, "sampler.dry: a breaker spelled across two tokens bounds the run",
                "with breakers %g, without %g (want 1, 4)", pen_x[0], pen_x[1]);
    kvt_dry_breakers_free(b);
    kvt_tokenizer_free(t);
    kvt_gguf_free(g);
}

// In the chain: greedy over equal logits picks the lowest id; DRY moves it off a token that would extend a repetition,
// and the sampler's window is the prompt plus what it accepted.
static void test_dry_chain(void) {
    enum { N = 8 };
    float l[N] = {1, 1, 1, 1, 1, 1, 1, 1};
    l[4] = 1.5f;
    kvt_sampler_params p = kvt_sampler_params_default();
    p.temp = 0;
    p.dry = (kvt_dry_params){0.8f, 1.75f, 2, 64};
    kvt_sampler *s = NULL;
    int32_t got[3] = {-1, -1, -1};
    if (kvt_sampler_init(&p, N, &s, NULL) == KVT_OK) {
        const int32_t prompt[] = {1, 2, 3, 4, 5, 1, 2, 3}; // "1 2 3" repeats: 4 would make it "1 2 3 4" again
        for (int i = 0; i < 8; i++) kvt_sampler_accept(s, prompt[i]);
        got[0] = kvt_sampler_sample(s, l); // 4 loses 0.8 x 1.75 = 1.4: 1.5 - 1.4 < 1, so 0
        kvt_sampler_free(s);
    }
    p.dry.multiplier = 0;
    if (kvt_sampler_init(&p, N, &s, NULL) == KVT_OK) {
        got[1] = kvt_sampler_sample(s, l);
        kvt_sampler_free(s);
    }
    p.dry.multiplier = 0.8f;
    p.mirostat = 2; // mirostat's chain has no DRY (llama.cpp's)
    if (kvt_sampler_init(&p, N, &s, NULL) == KVT_OK) {
        const int32_t prompt[] = {1, 2, 3, 4, 5, 1, 2, 3};
        for (int i = 0; i < 8; i++) kvt_sampler_accept(s, prompt[i]);
        got[2] = kvt_sampler_sample(s, l);
        kvt_sampler_free(s);
    }
    p.mirostat = 0;
    test_result(got[0] == 0 && got[1] == 4 && got[2] == 4 && !kvt_sampler_params_bans_only(&p) &&
                    kvt_sampler_params_adjust(&p),
                "sampler.dry: in the chain, a greedy draw leaves the token that would extend the repetition",
                "got %d %d %d", got[0], got[1], got[2]);
}

void test_dry_all(void) {
    test_dry_llama_vectors();
    test_dry_reference();
    test_dry_strings();
    test_dry_chain();
}
