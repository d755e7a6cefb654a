// test_tokenizer.c - tokenizer suite: llama.cpp's vocabulary test vectors,
// the reference prompts of the small models, SmolLM2 goldens made by
// llama-tokenize (tools/golden_tokenizer.sh), special tokens, pieces,
// detokenization and the Unicode tables.
//
// Suite entry: test_tokenizer(env). Built with -DKVT_TEST_STANDALONE (and test_util.c) it is a
// program of its own: test_tokenizer [SHARED_DIR] (default ../shared; SmolLM2
// from $KVT_SMOLLM2 or ~/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>

#include "../src/gguf/gguf.h"
#include "../src/model/tokenizer.h"
#include "../src/model/tokenizer_impl.h"
#include "../src/model/unicode.h"
#include "test.h"

#define SEP "\n__ggml_vocab_test__\n"
#define LOWB "\xe2\x96\x81" // U+2581

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) {
            fclose(f);
            return NULL;
        }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) {
            break;
        }
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
        } else {
            buf = nb;
        }
    }
    fclose(f);
    buf[n] = 0;
    if (len) {
        *len = n;
    }
    return buf;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static kvt_tokenizer *open_tok(const char *path, kvt_gguf **g, double *ms) {
    kvt_err err = {0};
    *g = NULL;
    double t0 = now_ms();
    if (kvt_gguf_open(path, g, &err) != KVT_OK) {
        printf("# %s: %s\n", path, err.msg);
        return NULL;
    }
    kvt_tokenizer *t = NULL;
    if (kvt_tokenizer_init(*g, &t, &err) != KVT_OK) {
        printf("# %s: %s\n", path, err.msg);
        kvt_gguf_free(*g);
        *g = NULL;
        return NULL;
    }
    if (ms) {
        *ms = now_ms() - t0;
    }
    return t;
}

// Tokenizes into a malloc'd array (exercising the "call again" protocol).
static int32_t *tok(const kvt_tokenizer *t, const char *s, size_t n, bool add, bool parse, int64_t *cnt) {
    int32_t small[4];
    kvt_err err = {0};
    int64_t need = kvt_tokenize(t, s, n, add, parse, small, 4, &err);
    if (need < 0) {
        *cnt = -1;
        return NULL;
    }
    int32_t *ids = malloc((size_t)(need ? need : 1) * sizeof *ids);
    int64_t got = kvt_tokenize(t, s, n, add, parse, ids, need, &err);
    if (got != need || (need <= 4 && memcmp(ids, small, (size_t)need * sizeof *ids) != 0)) {
        *cnt = -2;
        free(ids);
        return NULL;
    }
    *cnt = need;
    return ids;
}

static void fmt_ids(char *out, size_t cap, const int32_t *ids, int64_t n) {
    size_t k = 0;
    out[0] = 0;
    for (int64_t i = 0; i < n && k + 16 < cap; i++) {
        k += (size_t)snprintf(out + k, cap - k, "%s%d", i ? " " : "", ids[i]);
    }
    if (k + 16 >= cap) {
        snprintf(out + k, cap - k, " ...");
    }
}

// Parses "1 2 3" into ids; returns count.
static int64_t parse_ids(const char *line, size_t n, int32_t *ids, int64_t cap) {
    int64_t k = 0;
    size_t i = 0;
    while (i < n) {
        while (i < n && (line[i] == ' ' || line[i] == ',' || line[i] == '[' || line[i] == ']')) i++;
        if (i >= n) break;
        long v = strtol(line + i, NULL, 10);
        if (k < cap) ids[k] = (int32_t)v;
        k++;
        while (i < n && line[i] != ' ' && line[i] != ',' && line[i] != ']') i++;
    }
    return k;
}

// Runs every string of INP against the lines of OUT (llama.cpp's vocab test
// format). Also checks detokenize(tokenize(s)) == s when roundtrip is set.
static void vocab_file_case(const char *name, const kvt_tokenizer *t, const char *inp_path,
                            const char *out_path, bool parse_special, const char *rt_name) {
    size_t ni = 0, no = 0;
    char *inp = slurp(inp_path, &ni);
    char *out = slurp(out_path, &no);
    if (!inp || !out) {
        test_result(false, name, "cannot read %s / %s", inp_path, out_path);
        free(inp);
        free(out);
        return;
    }
    int n_str = 0, n_bad = 0, n_rt_bad = 0;
    char detail[600] = "", rt_detail[300] = "";
    const char *p = inp, *end = inp + ni, *o = out, *oend = out + no;
    int32_t *exp = malloc(65536 * sizeof *exp);
    while (p < end) {
        // strings end at the separator; the last one may end at the end of the file
        const char *q = strstr(p, SEP);
        if (!q) q = end;
        if (o >= oend) {
            snprintf(detail, sizeof detail, "%s has fewer lines than %s has strings", out_path, inp_path);
            n_bad++;
            break;
        }
        const char *ol = memchr(o, '\n', (size_t)(oend - o));
        if (!ol) ol = oend;
        int64_t ne = parse_ids(o, (size_t)(ol - o), exp, 65536);
        int64_t ng;
        int32_t *got = tok(t, p, (size_t)(q - p), false, parse_special, &ng);
        if (ng != ne || (ng > 0 && memcmp(got, exp, (size_t)ng * sizeof *got) != 0)) {
            if (n_bad == 0) {
                char a[200], b[200];
                fmt_ids(a, sizeof a, exp, ne);
                fmt_ids(b, sizeof b, got, ng);
                snprintf(detail, sizeof detail, "string %d (%.40s): want [%s] got [%s]", n_str, p, a, b);
            }
            n_bad++;
        }
        if (rt_name && ng >= 0) {
            size_t want = (size_t)(q - p);
            char *txt = malloc(want + 64);
            int64_t len = kvt_detokenize(t, got, ng, txt, (int64_t)want + 64);
            if (len != (int64_t)want || memcmp(txt, p, want) != 0) {
                if (n_rt_bad == 0) {
                    snprintf(rt_detail, sizeof rt_detail, "string %d (%.40s): got %lld bytes '%.*s'",
                             n_str, p, (long long)len, (int)(len > 40 ? 40 : len < 0 ? 0 : len), txt);
                }
                n_rt_bad++;
            }
            free(txt);
        }
        free(got);
        n_str++;
        p = q < end ? q + strlen(SEP) : end;
        o = ol < oend ? ol + 1 : oend;
    }
    if (o < oend && n_bad == 0) {
        snprintf(detail, sizeof detail, "%s has more lines than %s has strings", out_path, inp_path);
        n_bad++;
    }
    free(exp);
    if (n_bad) {
        test_result(false, name, "%d of %d strings differ; first: %s", n_bad, n_str, detail);
    } else {
        test_result(n_str > 0, name, "no strings");
    }
    if (rt_name) {
        test_result(n_rt_bad == 0, rt_name, "%d of %d strings do not round-trip; first: %s", n_rt_bad,
                    n_str, rt_detail);
    }
    free(inp);
    free(out);
}

static void reference_prompt_case(const test_env *env, const char *model) {
    char name[128], mfile[128], jfile[128], mpath[512], jpath[512];
    snprintf(name, sizeof name, "tokenizer.ref.%s", model);
    snprintf(mfile, sizeof mfile, "%s.gguf", model);
    snprintf(jfile, sizeof jfile, "%s.greedy.json", model);
    if (!test_data(env, mfile, mpath, sizeof mpath) || !test_data(env, jfile, jpath, sizeof jpath)) {
        test_skip(name, test_data_missing(env, test_file_exists(mpath) ? jfile : mfile));
        return;
    }
    char *js = slurp(jpath, NULL);
    kvt_gguf *g;
    kvt_tokenizer *t = js ? open_tok(mpath, &g, NULL) : NULL;
    if (!t) {
        test_result(false, name, "cannot load %s or %s", mpath, jpath);
        free(js);
        return;
    }
    const char *k = strstr(js, "\"prompt_ids\"");
    const char *lb = k ? strchr(k, '[') : NULL;
    const char *rb = lb ? strchr(lb, ']') : NULL;
    const char *pk = strstr(js, "\"prompt\"");
    int32_t exp[256];
    int64_t ne = (lb && rb) ? parse_ids(lb, (size_t)(rb - lb + 1), exp, 256) : -1;
    // the prompt string (plain ASCII in these files)
    char prompt[256] = "";
    if (pk) {
        const char *q1 = strchr(pk + 8, '"');
        const char *q2 = q1 ? strchr(q1 + 1, '"') : NULL;
        if (q1 && q2 && q2 - q1 - 1 < (long)sizeof prompt) {
            memcpy(prompt, q1 + 1, (size_t)(q2 - q1 - 1));
            prompt[q2 - q1 - 1] = 0;
        }
    }
    int64_t ng;
    int32_t *got = tok(t, prompt, strlen(prompt), true, true, &ng);
    bool ok = ne > 0 && ng == ne && memcmp(got, exp, (size_t)ne * sizeof *got) == 0;
    char a[200], b[200];
    fmt_ids(a, sizeof a, exp, ne);
    fmt_ids(b, sizeof b, got, ng);
    test_result(ok, name, "'%s': want [%s] got [%s]", prompt, a, b);
    free(got);
    kvt_tokenizer_free(t);
    kvt_gguf_free(g);
    free(js);
}

static bool ids_eq(const kvt_tokenizer *t, const char *s, bool add, bool parse, const int32_t *exp,
                   int64_t ne, char *detail, size_t dcap) {
    int64_t ng;
    int32_t *got = tok(t, s, strlen(s), add, parse, &ng);
    bool ok = ng == ne && (ne == 0 || memcmp(got, exp, (size_t)ne * sizeof *got) == 0);
    if (!ok && detail[0] == 0) {
        char a[200], b[200];
        fmt_ids(a, sizeof a, exp, ne);
        fmt_ids(b, sizeof b, got, ng);
        snprintf(detail, dcap, "'%s' (add=%d parse=%d): want [%s] got [%s]", s, add, parse, a, b);
    }
    free(got);
    return ok;
}

static bool piece_is(const kvt_tokenizer *t, int32_t id, bool special, const char *want) {
    char buf[64];
    int64_t n = kvt_token_to_piece_ex(t, id, buf, sizeof buf, 0, special);
    return n == (int64_t)strlen(want) && memcmp(buf, want, (size_t)n) == 0;
}

static void qwen2_cases(const kvt_tokenizer *t) {
    char d[600] = "";
    // chat markup: only with parse_special do the control strings become tokens
    const int32_t chat_special[] = {151644, 872, 198, 6023, 151645, 198};
    bool ok = ids_eq(t, "<|im_start|>user\nhi<|im_end|>\n", false, true, chat_special, 6, d, sizeof d);
    int64_t n;
    int32_t *plain = tok(t, "<|im_start|>", 12, false, false, &n);
    bool no_special = n > 1;
    for (int64_t i = 0; i < n; i++) {
        no_special = no_special && plain[i] != 151644;
    }
    free(plain);
    test_result(ok && no_special, "tokenizer.qwen2.parse_special", "%s%s", d,
                no_special ? "" : " (parse_special=false made a control token)");

    // BOS is not added for qwen2 (no add_bos_token key, BPE default false)
    d[0] = 0;
    const int32_t hello[] = {9707, 1879};
    ok = ids_eq(t, "Hello world", true, false, hello, 2, d, sizeof d);
    test_result(ok && !kvt_tokenizer_add_bos(t) && kvt_token_bos(t) == 151643, "tokenizer.qwen2.bos", "%s",
                d);

    bool eog = kvt_token_is_eog(t, 151643) && kvt_token_is_eog(t, 151645) && !kvt_token_is_eog(t, 151644) &&
               !kvt_token_is_eog(t, 9707) && !kvt_token_is_eog(t, -1) && !kvt_token_is_eog(t, 1 << 30);
    test_result(eog, "tokenizer.qwen2.eog", "end-of-generation set wrong");

    bool pieces = piece_is(t, 9707, false, "Hello") && piece_is(t, 1879, false, " world") &&
                  piece_is(t, 151645, false, "") && piece_is(t, 151645, true, "<|im_end|>") &&
                  piece_is(t, 198, false, "\n") && piece_is(t, -5, true, "");
    // a character spread over several tokens: each piece is raw bytes, together the UTF-8
    int32_t *ids = tok(t, "\xf0\x9f\xa6\x99", 4, false, false, &n);
    char buf[16];
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        total += (size_t)kvt_token_to_piece(t, ids[i], buf + total, (int64_t)(sizeof buf - total));
    }
    pieces = pieces && total == 4 && memcmp(buf, "\xf0\x9f\xa6\x99", 4) == 0;
    free(ids);
    test_result(pieces, "tokenizer.qwen2.pieces", "token pieces differ");

    // detokenize with control tokens: hidden by default, shown with unparse_special
    const int32_t seq[] = {151644, 872, 198, 6023, 151645};
    char out[64];
    int64_t l1 = kvt_detokenize(t, seq, 5, out, sizeof out);
    bool dt = l1 == 7 && memcmp(out, "user\nhi", 7) == 0;
    int64_t l2 = kvt_detokenize_ex(t, seq, 5, out, sizeof out, false, true);
    dt = dt && l2 == 29 && memcmp(out, "<|im_start|>user\nhi<|im_end|>", 29) == 0;
    // capacity protocol: the needed size comes back, only cap bytes written
    memset(out, 'x', sizeof out);
    int64_t l3 = kvt_detokenize_ex(t, seq, 5, out, 3, false, true);
    dt = dt && l3 == 29 && memcmp(out, "<|ix", 4) == 0;
    test_result(dt, "tokenizer.qwen2.detokenize", "got %lld/%lld/%lld", (long long)l1, (long long)l2,
                (long long)l3);
}

static void spm_cases(const kvt_tokenizer *t) {
    char d[600] = "";
    // BOS added by default for SPM; the space prefix goes in front of the text
    const int32_t w[] = {1, 15043, 3186};
    bool ok = ids_eq(t, "Hello world", true, false, w, 3, d, sizeof d);
    // parse_special: "<s>" becomes BOS, and the text after a special token
    // gets the space prefix again
    const int32_t s2[] = {1, 15043, 1, 3186};
    ok = ok && ids_eq(t, "Hello<s>world", false, true, s2 + 1, 3, d, sizeof d);
    const int32_t s3[] = {1, 1, 15043};
    ok = ok && ids_eq(t, "<s>Hello", true, true, s3, 3, d, sizeof d);
    // empty text: BOS only / nothing
    ok = ok && ids_eq(t, "", true, false, w, 1, d, sizeof d) && ids_eq(t, "", false, false, w, 0, d, sizeof d);
    test_result(ok, "tokenizer.spm.special", "%s", d);

    bool pieces = piece_is(t, 15043, false, " Hello") && piece_is(t, 13, false, "\n") &&
                  piece_is(t, 1, false, "") && piece_is(t, 1, true, "<s>") && piece_is(t, 0, true, "<unk>");
    char buf[16];
    int64_t n = kvt_token_to_piece_ex(t, 15043, buf, sizeof buf, 1, false); // lstrip
    pieces = pieces && n == 5 && memcmp(buf, "Hello", 5) == 0;
    test_result(pieces, "tokenizer.spm.pieces", "token pieces differ");

    // detokenize: the leading space of the first word goes, unless a BOS leads
    const int32_t seq[] = {1, 15043, 3186};
    char out[64];
    int64_t l1 = kvt_detokenize(t, seq + 1, 2, out, sizeof out);
    bool dt = l1 == 11 && memcmp(out, "Hello world", 11) == 0;
    int64_t l2 = kvt_detokenize(t, seq, 3, out, sizeof out); // BOS took the lstrip
    dt = dt && l2 == 12 && memcmp(out, " Hello world", 12) == 0;
    int64_t l3 = kvt_detokenize_ex(t, seq, 3, out, sizeof out, true, false);
    dt = dt && l3 == 12 && memcmp(out, " Hello world", 12) == 0;
    int64_t l4 = kvt_detokenize_ex(t, seq, 3, out, sizeof out, false, true);
    dt = dt && l4 == 15 && memcmp(out, "<s> Hello world", 15) == 0;
    test_result(dt, "tokenizer.spm.detokenize", "got %lld/%lld/%lld/%lld", (long long)l1, (long long)l2,
                (long long)l3, (long long)l4);

    bool eog = kvt_token_is_eog(t, 2) && !kvt_token_is_eog(t, 1) && kvt_token_eos(t) == 2 &&
               kvt_token_bos(t) == 1 && kvt_tokenizer_add_bos(t) && !kvt_tokenizer_add_eos(t) &&
               kvt_tokenizer_n_vocab(t) == 32000 && kvt_tokenizer_type(t) == KVT_VOCAB_SPM;
    test_result(eog, "tokenizer.spm.meta", "special ids / flags wrong");
}

static void smollm2_cases(const char *model) {
    if (!model || access(model, R_OK) != 0) {
        test_skip("tokenizer.smollm2", "SmolLM2 model file missing (set KVT_SMOLLM2)");
        return;
    }
    kvt_gguf *g;
    double ms = 0;
    kvt_tokenizer *t = open_tok(model, &g, &ms);
    if (!t) {
        test_result(false, "tokenizer.smollm2", "cannot load %s", model);
        return;
    }
    vocab_file_case("tokenizer.smollm2.plain", t, "tests/data/smollm2.tok.inp", "tests/data/smollm2.tok.out",
                    false, "tokenizer.smollm2.roundtrip");
    vocab_file_case("tokenizer.smollm2.special", t, "tests/data/smollm2.tok.inp",
                    "tests/data/smollm2.tok.special.out", true, NULL);
    bool eog = kvt_token_is_eog(t, 0) && kvt_token_is_eog(t, 2) && !kvt_token_is_eog(t, 1) &&
               !kvt_tokenizer_add_bos(t);
    test_result(eog, "tokenizer.smollm2.eog", "end-of-generation set / add_bos wrong");
    kvt_tokenizer_free(t);
    kvt_gguf_free(g);
}

// Gemma 3 270M (SentencePiece, 262144 tokens, byte fallback, no space prefix): ids of
// tests/data/gemma3-270m.tok.inp equal llama-tokenize's (tools/golden/gemma3_golden.sh).
static void gemma3_cases(void) {
    const char *model = getenv("KVT_GEMMA3");
    if (!model || access(model, R_OK) != 0) {
        test_skip("tokenizer.gemma3", "Gemma 3 not in cache: run `make model-gemma3`");
        return;
    }
    kvt_gguf *g;
    kvt_tokenizer *t = open_tok(model, &g, NULL);
    if (!t) {
        test_result(false, "tokenizer.gemma3", "cannot load %s", model);
        return;
    }
    vocab_file_case("tokenizer.gemma3.plain", t, "tests/data/gemma3-270m.tok.inp", "tests/data/gemma3-270m.tok.out",
                    false, "tokenizer.gemma3.roundtrip");
    vocab_file_case("tokenizer.gemma3.special", t, "tests/data/gemma3-270m.tok.inp",
                    "tests/data/gemma3-270m.tok.special.out", true, NULL);
    const bool meta = kvt_tokenizer_type(t) == KVT_VOCAB_SPM && kvt_tokenizer_add_bos(t) && kvt_token_bos(t) == 2 &&
                      kvt_token_is_eog(t, 1) && kvt_tokenizer_n_vocab(t) == 262144;
    test_result(meta, "tokenizer.gemma3.meta", "vocabulary type, BOS or end-of-generation ids wrong");
    kvt_tokenizer_free(t);
    kvt_gguf_free(g);
}

static void unicode_cases(void) {
    bool ok = kvt_ucat('A') == KVT_UCAT_LETTER && kvt_ucat('7') == KVT_UCAT_NUMBER &&
              kvt_ucat(' ') == KVT_UCAT_SEPARATOR && kvt_ucat('$') == KVT_UCAT_SYMBOL &&
              kvt_ucat('_') == KVT_UCAT_PUNCT && kvt_ucat(0x0663) == KVT_UCAT_NUMBER &&
              kvt_ucat(0x0301) == KVT_UCAT_MARK && kvt_ucat(0x4E2D) == KVT_UCAT_LETTER &&
              kvt_ucat(0x2EBF0) == KVT_UCAT_LETTER /* CJK ext. I: Unicode 15.1 */ &&
              kvt_ucat(0x10D40) == KVT_UCAT_UNDEFINED /* Garay: Unicode 16 */ &&
              kvt_ucat(0x110000) == KVT_UCAT_UNDEFINED && kvt_ucat(0xD800) == KVT_UCAT_CONTROL &&
              kvt_uis_space(0x3000) && kvt_uis_space(0x85) && !kvt_uis_space(0x1C) && !kvt_uis_space(0x200B) &&
              kvt_utolower('Q') == 'q' && kvt_utolower(0x0130) == 'i' && kvt_utolower(0x212A) == 'k' &&
              kvt_utolower(0x0410) == 0x0430 && kvt_utolower(0x0100) == 0x0101 && kvt_utolower(0x0101) == 0x0101 &&
              kvt_byte_to_cpt(' ') == 0x120 && kvt_byte_to_cpt('a') == 'a' && kvt_cpt_to_byte(0x120) == ' ' &&
              kvt_cpt_to_byte(0x143) == 0xAD && kvt_cpt_to_byte(0x144) == -1;
    // decoding: invalid bytes become U+FFFD one byte at a time
    const char bad[] = "a\xe2\x82z\xc3\xa9";
    size_t off = 0;
    uint32_t c[5];
    for (int i = 0; i < 5 && off < sizeof bad - 1; i++) {
        c[i] = kvt_utf8_decode(bad, sizeof bad - 1, &off);
    }
    ok = ok && c[0] == 'a' && c[1] == 0xFFFD && c[2] == 0xFFFD && c[3] == 'z' && c[4] == 0xE9;
    test_result(ok, "tokenizer.unicode", "category / case / byte map tables wrong");

    // pre-tokenizer splits, in code points
    struct {
        kvt_pre_kind k;
        const char *s;
        const char *want; // lengths
    } sp[] = {
        {KVT_PRE_LLAMA3, "Hello world 12345!!\n\n  x", "5 6 1 3 2 4 1 2"},
        {KVT_PRE_QWEN2, "I'M 42", "1 2 1 1 1"},
        {KVT_PRE_GPT2, "I'M 42  ", "1 1 1 3 2"},
        {KVT_PRE_SMOLLM, "a 12", "1 1 1 1"},
        {KVT_PRE_DEFAULT, "x=1234 (y)", "1 1 3 1 1 1 1 1"},
        {KVT_PRE_DEEPSEEK_CODER, "a1b\n  x,y", "1 1 1 1 1 2 1 1"},
        {KVT_PRE_DEEPSEEK_LLM, "Ab 12  ", "2 1 2 2"},
        {KVT_PRE_GEMMA4, "a b\n\nc", "3 2 1"},
    };
    char d[200] = "";
    bool sok = true;
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
        uint32_t *cp;
        size_t *lens, ncp, nl;
        if (!kvt_pretokenize(sp[i].k, sp[i].s, strlen(sp[i].s), &cp, &ncp, &lens, &nl)) {
            sok = false;
            continue;
        }
        char got[100] = "";
        size_t k = 0;
        for (size_t j = 0; j < nl && k + 8 < sizeof got; j++) {
            k += (size_t)snprintf(got + k, sizeof got - k, "%s%zu", j ? " " : "", lens[j]);
        }
        if (strcmp(got, sp[i].want) != 0) {
            if (sok) snprintf(d, sizeof d, "'%s': want %s got %s", sp[i].s, sp[i].want, got);
            sok = false;
        }
        free(cp);
        free(lens);
    }
    test_result(sok, "tokenizer.pretokenize", "%s", d);
}

// Writes a vocabulary-only GGUF: tokens (type 1 unless types given), merges
// (may be NULL), the string keys given as key, value pairs, BOS id 2 and
// add_bos_token false.
static bool write_vocab(const char *path, const char *model, const char *const *toks, const int32_t *types,
                        int n, const char *const *merges, int n_merges, const char *const *kv, int n_kv) {
    kvt_gguf_writer *w = kvt_gguf_writer_init();
    int32_t ty[64];
    for (int i = 0; i < n && i < 64; i++) {
        ty[i] = types ? types[i] : 1;
    }
    kvt_gguf_writer_set_str(w, "tokenizer.ggml.model", model);
    for (int i = 0; i + 1 < 2 * n_kv; i += 2) {
        kvt_gguf_writer_set_str(w, kv[i], kv[i + 1]);
    }
    kvt_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n);
    kvt_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", KVT_GGUF_I32, ty, (uint64_t)n);
    if (merges) {
        kvt_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, (uint64_t)n_merges);
    }
    kvt_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    kvt_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 2);
    bool ok = kvt_gguf_writer_write(w, path, NULL) == KVT_OK;
    kvt_gguf_writer_free(w);
    return ok;
}

// Tokenizer of a file written by write_vocab; NULL with err filled if refused.
static kvt_tokenizer *open_vocab(const char *path, kvt_gguf **g, kvt_err *err) {
    *g = NULL;
    kvt_tokenizer *t = NULL;
    if (kvt_gguf_open(path, g, err) == KVT_OK && kvt_tokenizer_init(*g, &t, err) == KVT_OK) {
        return t;
    }
    kvt_gguf_free(*g);
    *g = NULL;
    return NULL;
}

// Small vocabularies made here: Gemma 4's SentencePiece-style BPE, refusals
// by name, and `kvtier tokenize` on an architecture the engine cannot run.
static void synthetic_cases(const test_env *env) {
    char path[] = "/tmp/kvt_test_vocab_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        test_result(false, "tokenizer.synthetic", "mkstemp failed");
        return;
    }
    close(fd);
    kvt_err err = {0};
    kvt_gguf *g;

    // Gemma 4: spaces escaped to U+2581, merges over raw UTF-8, a newline
    // run as one word, <0xXX> byte fallback, BOS although add_bos_token is false
    static const char *const gtoks[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<0x0A>", "<0xC3>", "<0xA9>", "\n",
                                        "\n\n", LOWB, "a", "b", "ab", LOWB "ab", LOWB "a"};
    static const int32_t gtypes[] = {3, 3, 3, 2, 6, 6, 6, 1, 1, 1, 1, 1, 1, 1, 1};
    static const char *const gmerges[] = {LOWB " a", LOWB "a b", "a b"};
    static const char *const gkv[] = {"general.architecture", "gemma4", "tokenizer.ggml.pre", "gemma4"};
    kvt_tokenizer *t = NULL;
    if (write_vocab(path, "gemma4", gtoks, gtypes, 15, gmerges, 3, gkv, 2)) {
        t = open_vocab(path, &g, &err);
    }
    if (t) {
        char d[600] = "";
        const char *text = "ab ab\n\n\xc3\xa9";
        const int32_t want[] = {2, 12, 13, 8, 5, 6};
        bool ok = ids_eq(t, text, true, false, want, 6, d, sizeof d);
        char out[32];
        int64_t n = kvt_detokenize(t, want + 1, 5, out, sizeof out);
        bool dt = n == (int64_t)strlen(text) && memcmp(out, text, (size_t)n) == 0;
        test_result(ok && dt, "tokenizer.synthetic.gemma4", "%s%s", d, dt ? "" : " (detokenize differs)");
        kvt_tokenizer_free(t);
        kvt_gguf_free(g);
    } else {
        test_result(false, "tokenizer.synthetic.gemma4", "%s", err.msg);
    }

    // refused by name: another tokenizer model, an unknown pre-tokenizer
    static const char *const btoks[] = {"H", "i", "Hi", "\xc4\xa0"};
    static const char *const bmerges[] = {"H i"};
    static const char *const bad_pre[] = {"tokenizer.ggml.pre", "nosuch-pre"};
    bool r1 = write_vocab(path, "bert", btoks, NULL, 4, NULL, 0, NULL, 0) && !open_vocab(path, &g, &err) &&
              err.status == KVT_ERR_UNSUPPORTED && strstr(err.msg, "'bert'");
    bool r2 = write_vocab(path, "gpt2", btoks, NULL, 4, bmerges, 1, bad_pre, 1) && !open_vocab(path, &g, &err) &&
              err.status == KVT_ERR_UNSUPPORTED && strstr(err.msg, "'nosuch-pre'");
    test_result(r1 && r2, "tokenizer.synthetic.refused", "bert %d, unknown pre %d: %s", r1, r2, err.msg);

    // `kvtier tokenize` reads only tokenizer.* keys: an architecture the
    // engine cannot run (gpt2) tokenizes
    static const char *const gpt2_kv[] = {"general.architecture", "gpt2", "tokenizer.ggml.pre", "gpt-2"};
    if (!env->cli || !test_file_exists(env->cli)) {
        test_skip("tokenizer.synthetic.cli", "kvtier binary missing");
    } else if (write_vocab(path, "gpt2", btoks, NULL, 4, bmerges, 1, gpt2_kv, 2)) {
        char cmd[700], out[64] = "";
        snprintf(cmd, sizeof cmd, "%s tokenize -m %s -p 'Hi Hi' 2>&1", env->cli, path);
        FILE *p = popen(cmd, "r");
        size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
        int rc = p ? pclose(p) : -1;
        out[n] = 0;
        test_result(rc == 0 && !strcmp(out, "2 3 2\n"), "tokenizer.synthetic.cli", "exit %d: %s", rc, out);
    } else {
        test_result(false, "tokenizer.synthetic.cli", "cannot write %s", path);
    }
    unlink(path);
}

void test_tokenizer(const test_env *env) {
    char path[512], inp[600], out[600];
    double ms = 0;
    kvt_gguf *g;

    unicode_cases();
    synthetic_cases(env);

    kvt_tokenizer *t = test_data(env, "ggml-vocab-llama-spm.gguf", path, sizeof path) ? open_tok(path, &g, &ms) : NULL;
    if (t) {
        snprintf(inp, sizeof inp, "%s.inp", path);
        snprintf(out, sizeof out, "%s.out", path);
        vocab_file_case("tokenizer.vocab.llama-spm", t, inp, out, false, "tokenizer.roundtrip.llama-spm");
        spm_cases(t);
        kvt_tokenizer_free(t);
        kvt_gguf_free(g);
    } else if (!test_file_exists(path)) {
        test_skip("tokenizer.vocab.llama-spm", test_data_missing(env, "ggml-vocab-llama-spm.gguf"));
    } else {
        test_result(false, "tokenizer.vocab.llama-spm", "cannot load %s", path);
    }

    // the Qwen2 BPE vocabulary (5.9 MB) is not committed: the shared folder adds it
    t = test_data(env, "ggml-vocab-qwen2.gguf", path, sizeof path) ? open_tok(path, &g, &ms) : NULL;
    if (t) {
        printf("# qwen2 vocab (151936 tokens, 151387 merges): open + init %.0f ms\n", ms);
        snprintf(inp, sizeof inp, "%s.inp", path);
        snprintf(out, sizeof out, "%s.out", path);
        vocab_file_case("tokenizer.vocab.qwen2", t, inp, out, false, "tokenizer.roundtrip.qwen2");
        qwen2_cases(t);
        kvt_tokenizer_free(t);
        kvt_gguf_free(g);
    } else if (!test_file_exists(path)) {
        test_skip("tokenizer.vocab.qwen2", test_data_missing(env, "ggml-vocab-qwen2.gguf"));
    } else {
        test_result(false, "tokenizer.vocab.qwen2", "cannot load %s", path);
    }

    reference_prompt_case(env, "stories260K");
    reference_prompt_case(env, "llama-2-tiny-random");
    reference_prompt_case(env, "qwen3-tiny");
    reference_prompt_case(env, "qwen3-synth-f16");

    smollm2_cases(env->smollm2);
    gemma3_cases();
}

// make test-vocab: every ggml-vocab-*.gguf of llama.cpp's models/ folder
// (folder in $KVT_VOCAB_DIR) with its .inp/.out vectors, tokenized without
// BOS/EOS and without parsing special tokens, as llama.cpp's
// test-tokenizer-0 does. A vocabulary whose tokenizer model is not one of
// ours ("llama", "gpt2", "gemma4") and that the tokenizer refuses by name is
// a skip; a refused vocabulary of ours, a load error or any id difference is
// a failure. Vocabularies without vectors only have to load or be refused by
// name.
static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void vocab_dir_case(const char *dir, const char *file) {
    char path[1024], inp[1100], out[1100], name[256], model[64] = "";
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(inp, sizeof inp, "%s.inp", path);
    snprintf(out, sizeof out, "%s.out", path);
    // "ggml-vocab-NAME.gguf" -> "vocab.NAME"
    snprintf(name, sizeof name, "vocab.%.*s", (int)(strlen(file) - strlen("ggml-vocab-") - strlen(".gguf")),
             file + strlen("ggml-vocab-"));
    bool vectors = test_file_exists(inp) && test_file_exists(out);
    kvt_err err = {0};
    kvt_gguf *g = NULL;
    if (kvt_gguf_open(path, &g, &err) != KVT_OK) {
        test_result(false, name, "%s", err.msg);
        return;
    }
    kvt_str m;
    if (kvt_gguf_get_str(g, "tokenizer.ggml.model", &m, NULL) == KVT_OK) {
        snprintf(model, sizeof model, "%.*s", (int)(m.len < 63 ? m.len : 63), m.ptr);
    }
    kvt_tokenizer *t = NULL;
    kvt_status st = kvt_tokenizer_init(g, &t, &err);
    bool ours = !strcmp(model, "llama") || !strcmp(model, "gpt2") || !strcmp(model, "gemma4");
    if (st == KVT_ERR_UNSUPPORTED && !ours) {
        char why[600];
        snprintf(why, sizeof why, "refused: %s", err.msg);
        test_skip(name, why);
    } else if (st != KVT_OK) {
        test_result(false, name, "%s", err.msg);
    } else if (!vectors) {
        test_skip(name, "loads; llama.cpp ships no .inp/.out vectors for it");
    } else {
        vocab_file_case(name, t, inp, out, false, NULL);
    }
    kvt_tokenizer_free(t);
    kvt_gguf_free(g);
}

void test_vocab(const test_env *env) {
    (void)env;
    const char *dir = getenv("KVT_VOCAB_DIR");
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) {
        test_skip("vocab", "no vocabulary folder (KVT_VOCAB_DIR unset or unreadable; `make test-vocab` fetches it)");
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, "ggml-vocab-", 11) != 0 || l < 16 || strcmp(e->d_name + l - 5, ".gguf") != 0) {
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) break;
            names = nn;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n == 0) {
        test_result(false, "vocab", "no ggml-vocab-*.gguf in %s", dir);
    }
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        vocab_dir_case(dir, names[i]);
        free(names[i]);
    }
    free(names);
}

#ifdef KVT_TEST_STANDALONE
static int g_failed, g_passed, g_skipped;

void test_result(bool ok, const char *name, const char *fmt, ...) {
    if (ok) {
        g_passed++;
        printf("ok   %s\n", name);
        return;
    }
    g_failed++;
    printf("FAIL %s: ", name);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

void test_skip(const char *name, const char *reason) {
    g_skipped++;
    printf("skip %s: %s\n", name, reason);
}

bool test_file_exists(const char *path) { return path && access(path, R_OK) == 0; }

// Returns the number of failed cases.
int test_tokenizer_main(const char *shared_dir) {
    static char cache[512];
    test_env env = {shared_dir, getenv("KVT_SMOLLM2"), NULL, false};
    if (!env.smollm2 && getenv("HOME")) {
        snprintf(cache, sizeof cache, "%s/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf", getenv("HOME"));
        env.smollm2 = cache;
    }
    g_failed = 0;
    test_tokenizer(&env);
    printf("%d passed, %d failed, %d skipped\n", g_passed, g_failed, g_skipped);
    return g_failed;
}

int main(int argc, char **argv) {
    return test_tokenizer_main(argc > 1 ? argv[1] : "../shared") ? 1 : 0;
}
#endif
