#include "test_util.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/gguf/gguf.h"
#include "../src/model/tokenizer.h"

int test_run(const char *cmd, char *out, size_t cap) {
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFSIGNALED(st) ? -1 : WEXITSTATUS(st);
}

char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = sz >= 0 ? malloc((size_t)sz + 1) : NULL;
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[sz] = 0;
        if (len) *len = (size_t)sz;
    }
    return b;
}

int32_t *test_json_int_array(const char *json, const char *key, int64_t *n) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(json, pat);
    if (!p || !(p = strchr(p, '['))) return NULL;
    p++;
    int64_t cap = 64, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    while (v) {
        while (*p == ' ' || *p == ',' || *p == '\n') p++;
        if (*p == ']' || !*p) break;
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p) break;
        p = end;
        if (k == cap) {
            int32_t *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return NULL;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
    }
    *n = k;
    return v;
}

float *test_read_floats(const char *path, int64_t *n) {
    size_t len;
    char *s = test_read_file(path, &len);
    if (!s) return NULL;
    int64_t cap = 1024, k = 0;
    float *v = malloc((size_t)cap * sizeof *v);
    char *p = s;
    while (v) {
        char *end;
        float x = strtof(p, &end);
        if (end == p) break;
        p = end;
        if (k == cap) {
            float *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                v = NULL;
                break;
            }
            v = nv;
        }
        v[k++] = x;
    }
    free(s);
    *n = k;
    return v;
}

// test_data: tests/data first, then the shared folder's layout (see test.h)
const char *test_data(const test_env *env, const char *name, char *buf, size_t cap) {
    static const char *const shared_dirs[] = {"models", "vectors/reference", "vectors/tokenizer", "vectors/text"};
    snprintf(buf, cap, "tests/data/%s", name);
    if (test_file_exists(buf)) return buf;
    for (size_t i = 0; env && env->shared && *env->shared && i < sizeof shared_dirs / sizeof shared_dirs[0]; i++) {
        snprintf(buf, cap, "%s/%s/%s", env->shared, shared_dirs[i], name);
        if (test_file_exists(buf)) return buf;
    }
    snprintf(buf, cap, "tests/data/%s", name);
    return NULL;
}

const char *test_data_missing(const test_env *env, const char *name) {
    static char why[1024];
    snprintf(why, sizeof why, "%s is in neither tests/data nor the shared folder %s (make test SHARED=DIR adds it)", name,
             env && env->shared ? env->shared : "(none)");
    return why;
}

float test_xorshift_unit(uint64_t *state) {
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return (float)((x >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

// A byte-level BPE vocabulary without merges (one token per character): the letters, digits, ".", "-", "_", space
// (U+0120) and newline (U+010A), "<s>" (41), then the control tokens given, then the words given (normal tokens); eos
// >= 0: its EOS id. Written to a temporary file and opened.
kvt_tokenizer *test_vocab_words(const char *const *ctl, int n_ctl, const char *const *words, int n_words, int32_t eos,
                                       bool add_bos, kvt_gguf **g) {
    const char *toks[128];
    char chars[64][2];
    int n = 0;
    const char *set = "abcdefghijklmnopqrstuvwxyz0123456789.-_";
    for (int i = 0; set[i]; i++) chars[i][0] = set[i], chars[i][1] = 0, toks[n++] = chars[i];
    toks[n++] = "\xc4\xa0"; // space
    toks[n++] = "\xc4\x8a"; // newline
    int32_t ty[128];
    for (int i = 0; i < n; i++) ty[i] = 1;
    toks[n] = "<s>", ty[n++] = 3;
    for (int i = 0; i < n_ctl; i++) toks[n] = ctl[i], ty[n++] = 3;
    for (int i = 0; i < n_words; i++) toks[n] = words[i], ty[n++] = 1;
    char path[] = "/tmp/kvt-infill-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return NULL;
    close(fd);
    kvt_gguf_writer *w = kvt_gguf_writer_init();
    static const char *const merges[] = {"a b"};
    kvt_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    kvt_gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    kvt_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n);
    kvt_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", KVT_GGUF_I32, ty, (uint64_t)n);
    kvt_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    kvt_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
    kvt_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 41); // "<s>"
    if (eos >= 0) kvt_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    kvt_err err = {0};
    kvt_tokenizer *t = NULL;
    if (kvt_gguf_writer_write(w, path, &err) != KVT_OK || kvt_gguf_open(path, g, &err) != KVT_OK ||
        kvt_tokenizer_init(*g, &t, &err) != KVT_OK)
        t = NULL;
    kvt_gguf_writer_free(w);
    unlink(path);
    return t;
}
