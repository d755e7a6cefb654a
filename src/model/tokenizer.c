// tokenizer.c - vocabulary loading, special tokens, tokenize / detokenize
// entry points. The SPM and BPE cores are in tokenizer_spm.c / tokenizer_bpe.c.
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

#include "../base/grow.h"
#include "unicode.h"

// ---------------------------------------------------------------------------
// small helpers

void kvt_ivec_push(kvt_ivec *a, int32_t x) {
    if (a->oom) return;
    if (!kvt_grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v)) {
        a->oom = true;
        return;
    }
    a->v[a->n++] = x;
}

#define FNV_OFFSET 1469598103934665603ull
#define FNV_PRIME 1099511628211ull

static uint64_t fnv(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= FNV_PRIME;
    }
    return h;
}

static uint32_t slot_of(uint64_t h, uint32_t mask) {
    return (uint32_t)(h ^ (h >> 29)) & mask;
}

static uint32_t table_size(uint64_t n) {
    uint32_t sz = 16;
    while (sz < 2 * n) {
        sz *= 2;
    }
    return sz;
}

int32_t kvt_tok_find(const kvt_tokenizer *t, const char *s, size_t n) {
    uint32_t i = slot_of(fnv(FNV_OFFSET, s, n), t->tok_mask);
    for (;;) {
        uint32_t v = t->tok_slots[i];
        if (v == 0) {
            return -1;
        }
        const kvt_tok_entry *e = &t->toks[v - 1];
        if (e->len == n && memcmp(t->text + e->off, s, n) == 0) {
            return (int32_t)(v - 1);
        }
        i = (i + 1) & t->tok_mask;
    }
}

int32_t kvt_merge_rank(const kvt_tokenizer *t, const char *l, size_t ln, const char *r, size_t rn) {
    if (t->n_merges == 0) {
        return -1;
    }
    uint64_t h = fnv(FNV_OFFSET, l, ln);
    h = fnv(h, " ", 1);
    h = fnv(h, r, rn);
    uint32_t i = slot_of(h, t->merge_mask);
    for (;;) {
        uint32_t v = t->merge_slots[i];
        if (v == 0) {
            return -1;
        }
        const char *m = t->merge_text + t->merge_off[v - 1];
        if (t->merge_len[v - 1] == ln + 1 + rn && memcmp(m, l, ln) == 0 && m[ln] == ' ' &&
            memcmp(m + ln + 1, r, rn) == 0) {
            return (int32_t)(v - 1);
        }
        i = (i + 1) & t->merge_mask;
    }
}

// Position of needle in hay, or -1.
static int64_t find_bytes(const char *hay, size_t hn, const char *needle, size_t nn) {
    if (nn == 0 || nn > hn) {
        return -1;
    }
    const char *p = hay, *end = hay + hn - nn + 1;
    while (p < end) {
        const char *q = memchr(p, needle[0], (size_t)(end - p));
        if (!q) {
            return -1;
        }
        if (memcmp(q, needle, nn) == 0) {
            return q - hay;
        }
        p = q + 1;
    }
    return -1;
}

// ---------------------------------------------------------------------------
// pre-tokenizer names (llama.cpp's tokenizer.ggml.pre values and the flags
// each one sets)

typedef struct {
    const char *name;
    kvt_pre_kind kind;
    bool clean_spaces;
    bool ignore_merges;
    bool add_bos;
    bool no_bos;
} pre_info;

static const pre_info k_pre[] = {
    {"default", KVT_PRE_DEFAULT, true, false, false, false},
    {"llama3", KVT_PRE_LLAMA3, true, true, true, false},
    {"llama-v3", KVT_PRE_LLAMA3, true, true, true, false},
    {"llama-bpe", KVT_PRE_LLAMA3, true, true, true, false},
    {"falcon3", KVT_PRE_LLAMA3, true, true, true, false},
    {"falcon-h1", KVT_PRE_LLAMA3, true, true, true, false},
    {"pixtral", KVT_PRE_LLAMA3, true, true, true, false},
    {"midm-2.0", KVT_PRE_LLAMA3, true, true, true, false},
    {"lfm2", KVT_PRE_LLAMA3, true, true, true, false},
    {"dbrx", KVT_PRE_LLAMA3, true, false, false, false},
    {"smaug-bpe", KVT_PRE_LLAMA3, true, false, false, false},
    {"chatglm-bpe", KVT_PRE_LLAMA3, true, false, false, true},
    {"glm4", KVT_PRE_LLAMA3, true, true, false, true},
    {"glm5", KVT_PRE_LLAMA3, true, true, false, true},
    {"falcon", KVT_PRE_FALCON, true, false, false, false},
    {"deepseek-llm", KVT_PRE_DEEPSEEK_LLM, false, false, false, false},
    {"deepseek-coder", KVT_PRE_DEEPSEEK_CODER, false, false, false, false},
    {"mpt", KVT_PRE_GPT2, true, false, false, false},
    {"olmo", KVT_PRE_GPT2, true, false, false, false},
    {"jais", KVT_PRE_GPT2, true, false, false, false},
    {"gpt-2", KVT_PRE_GPT2, true, false, false, false},
    {"gpt2", KVT_PRE_GPT2, true, false, false, false}, // not a llama.cpp name; alias
    {"phi-2", KVT_PRE_GPT2, true, false, false, false},
    {"gigachat", KVT_PRE_GPT2, true, false, false, false},
    {"a.x-4.0", KVT_PRE_GPT2, true, false, false, false},
    {"mellum", KVT_PRE_GPT2, true, false, false, false},
    {"exaone4", KVT_PRE_GPT2, true, false, false, false},
    {"trillion", KVT_PRE_GPT2, false, false, false, false},
    {"granite-docling", KVT_PRE_GPT2, false, false, false, false},
    {"starcoder", KVT_PRE_SMOLLM, true, false, false, false},
    {"refact", KVT_PRE_SMOLLM, true, false, false, false},
    {"command-r", KVT_PRE_SMOLLM, false, false, false, false},
    {"smollm", KVT_PRE_SMOLLM, false, false, false, false},
    {"codeshell", KVT_PRE_SMOLLM, true, false, false, false},
    {"exaone", KVT_PRE_SMOLLM, true, false, false, false},
    {"minerva-7b", KVT_PRE_SMOLLM, true, false, false, false},
    {"mellum2", KVT_PRE_SMOLLM, true, false, false, false},
    {"qwen2", KVT_PRE_QWEN2, false, false, false, false},
    {"deepseek-r1-qwen", KVT_PRE_QWEN2, false, false, false, false},
    {"kormo", KVT_PRE_QWEN2, false, false, false, false},
    {"f2llmv2", KVT_PRE_QWEN2, false, false, false, false},
    {"stablelm2", KVT_PRE_QWEN2, true, false, false, false},
    {"megrez", KVT_PRE_QWEN2, true, false, false, false},
    {"hunyuan", KVT_PRE_QWEN2, false, false, false, false},
    {"grok-2", KVT_PRE_QWEN2, false, false, false, false},
    {"solar-open", KVT_PRE_QWEN2, false, false, false, false},
    {"qwen35", KVT_PRE_QWEN35, false, false, false, false},
    {"gemma4", KVT_PRE_GEMMA4, true, false, false, false}, // SentencePiece-style BPE
};

// ---------------------------------------------------------------------------
// token texts recognised by llama.cpp (U+FF5C fullwidth bar, U+2581 lower block)

#define FWBAR "\xef\xbd\x9c"
#define LOWB "\xe2\x96\x81"

static const char *const k_eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<" FWBAR "end" LOWB "of" LOWB "sentence" FWBAR ">",
    "<end_of_utterance>", NULL};
static const char *const k_eom_texts[] = {"<|eom_id|>", NULL};
static const char *const k_fim_pre_texts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<" FWBAR "fim" LOWB "begin" FWBAR ">",
    "<PRE>", LOWB "<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const k_fim_suf_texts[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<" FWBAR "fim" LOWB "hole" FWBAR ">",
    "<SUF>", LOWB "<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const k_fim_mid_texts[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<" FWBAR "fim" LOWB "end" FWBAR ">",
    "<MID>", LOWB "<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const k_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                              "[PAD]", NULL};
static const char *const k_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                              "<REPO>", "<reponame>", NULL};
static const char *const k_fim_sep_texts[] = {"<|file_sep|>", NULL};
static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<" FWBAR "end" LOWB "of" LOWB "sentence" FWBAR ">", "[e~[", NULL};
static const char *const k_always_user_defined[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                    "<|constrain|>", NULL};

static bool tok_is(const kvt_tokenizer *t, int32_t id, const char *s) {
    const kvt_tok_entry *e = &t->toks[id];
    size_t n = strlen(s);
    return e->len == n && memcmp(t->text + e->off, s, n) == 0;
}

static int32_t find_cstr(const kvt_tokenizer *t, const char *s) {
    return kvt_tok_find(t, s, strlen(s));
}

// ---------------------------------------------------------------------------
// init

void kvt_tokenizer_free(kvt_tokenizer *t) {
    if (!t) {
        return;
    }
    free(t->text);
    free(t->toks);
    free(t->tok_slots);
    free(t->merge_text);
    free(t->merge_off);
    free(t->merge_len);
    free(t->merge_slots);
    free(t->special);
    free(t);
}

static kvt_status read_bool(const kvt_gguf *g, const char *key, bool *v, kvt_err *err) {
    kvt_status st = kvt_gguf_get_bool(g, key, v, err);
    return st == KVT_ERR_NOT_FOUND ? KVT_OK : st;
}

typedef struct {
    size_t len;
    int32_t id;
} len_id;

static int cmp_special(const void *a, const void *b) {
    const len_id *x = a, *y = b;
    if (x->len != y->len) {
        return x->len > y->len ? -1 : 1;
    }
    return (x->id > y->id) - (x->id < y->id);
}

static kvt_status load_tokens(kvt_tokenizer *t, const kvt_gguf *g, const char *path, kvt_err *err) {
    kvt_gguf_arr toks, scores, types;
    kvt_status st = kvt_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, err);
    if (st == KVT_ERR_NOT_FOUND) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: no tokenizer.ggml.tokens", path);
    }
    if (st) {
        return st;
    }
    if (toks.type != KVT_GGUF_STRING) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: tokenizer.ggml.tokens is not a string array", path);
    }
    if (toks.n == 0 || toks.n > (uint64_t)INT32_MAX / 4) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries", path,
                          (unsigned long long)toks.n);
    }
    const uint32_t n = (uint32_t)toks.n;
    t->n_vocab = (int32_t)n;

    bool have_scores = false, scores_i32 = false, have_types = false;
    st = kvt_gguf_get_arr(g, "tokenizer.ggml.scores", &scores, err);
    if (st == KVT_OK) {
        if (scores.type != KVT_GGUF_F32 && scores.type != KVT_GGUF_I32) {
            return kvt_errorf(err, KVT_ERR_FORMAT, "%s: tokenizer.ggml.scores has element type %d",
                              path, (int)scores.type);
        }
        if (scores.n < n) {
            return kvt_errorf(err, KVT_ERR_FORMAT, "%s: %llu scores for %u tokens", path,
                              (unsigned long long)scores.n, n);
        }
        have_scores = true;
        scores_i32 = scores.type == KVT_GGUF_I32;
    } else if (st != KVT_ERR_NOT_FOUND) {
        return st;
    }
    st = kvt_gguf_get_arr(g, "tokenizer.ggml.token_type", &types, err);
    if (st == KVT_OK) {
        if (types.type != KVT_GGUF_I32) {
            return kvt_errorf(err, KVT_ERR_FORMAT, "%s: tokenizer.ggml.token_type has element type %d",
                              path, (int)types.type);
        }
        if (types.n < n) {
            return kvt_errorf(err, KVT_ERR_FORMAT, "%s: %llu token types for %u tokens", path,
                              (unsigned long long)types.n, n);
        }
        have_types = true;
    } else if (st != KVT_ERR_NOT_FOUND) {
        return st;
    }

    // texts (an empty token becomes "[EMPTY_<id>]", as in llama.cpp)
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        kvt_str s = kvt_gguf_arr_str(g, &toks, i);
        total += s.len ? s.len : 32;
    }
    if (total > UINT32_MAX) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: token texts too large", path);
    }
    t->text = malloc(total ? total : 1);
    t->toks = calloc(n, sizeof *t->toks);
    t->tok_mask = table_size(n) - 1;
    t->tok_slots = calloc((size_t)t->tok_mask + 1, sizeof *t->tok_slots);
    if (!t->text || !t->toks || !t->tok_slots) {
        return kvt_errorf(err, KVT_ERR_NOMEM, "%s: no memory for %u tokens", path, n);
    }
    uint32_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        kvt_str s = kvt_gguf_arr_str(g, &toks, i);
        kvt_tok_entry *e = &t->toks[i];
        e->off = off;
        if (s.len) {
            memcpy(t->text + off, s.ptr, s.len);
            e->len = (uint32_t)s.len;
        } else {
            e->len = (uint32_t)snprintf(t->text + off, 32, "[EMPTY_%u]", i);
        }
        off += e->len;
        if (have_scores) {
            if (scores_i32) {
                int32_t v;
                memcpy(&v, (const char *)scores.data + 4 * (size_t)i, 4);
                e->score = (float)v;
            } else {
                memcpy(&e->score, (const char *)scores.data + 4 * (size_t)i, 4);
            }
        }
        e->attr = KVT_TOKEN_ATTR_NORMAL;
        if (have_types) {
            int32_t ty;
            memcpy(&ty, (const char *)types.data + 4 * (size_t)i, 4);
            switch (ty) {
            case 1: e->attr = KVT_TOKEN_ATTR_NORMAL; break;
            case 2: e->attr = KVT_TOKEN_ATTR_UNKNOWN; break;
            case 3: e->attr = KVT_TOKEN_ATTR_CONTROL; break;
            case 4: e->attr = KVT_TOKEN_ATTR_USER_DEFINED; break;
            case 5: e->attr = KVT_TOKEN_ATTR_UNUSED; break;
            case 6: e->attr = KVT_TOKEN_ATTR_BYTE; break;
            default: e->attr = 0; break; // undefined
            }
        }
        // a byte token's value is read from its text at [3, 5) (llama.cpp's token_to_byte: substr(3, 2), which
        // throws and fails the load for a shorter text)
        if (e->attr == KVT_TOKEN_ATTR_BYTE && e->len < 3) {
            return kvt_errorf(err, KVT_ERR_FORMAT, "%s: tokenizer.ggml.tokens entry %u is a byte token (token_type 6) but its text '%.*s' is not <0xXX>",
                              path, i, (int)e->len, t->text + e->off);
        }
        // text -> id; two entries with one text are refused (llama.cpp asserts against them when loading: which
        // id the text stands for would be undefined)
        uint32_t h = slot_of(fnv(FNV_OFFSET, t->text + e->off, e->len), t->tok_mask);
        for (;;) {
            uint32_t v = t->tok_slots[h];
            if (v == 0) {
                t->tok_slots[h] = i + 1;
                break;
            }
            const kvt_tok_entry *o = &t->toks[v - 1];
            if (o->len == e->len && memcmp(t->text + o->off, t->text + e->off, e->len) == 0) {
                return kvt_errorf(err, KVT_ERR_FORMAT, "%s: tokenizer.ggml.tokens entries %u and %u are both '%.*s' (duplicate token text)",
                                  path, v - 1, i, (int)(e->len > 64 ? 64 : e->len), t->text + e->off);
            }
            h = (h + 1) & t->tok_mask;
        }
    }
    return KVT_OK;
}

static kvt_status load_merges(kvt_tokenizer *t, const kvt_gguf *g, const char *path, kvt_err *err) {
    kvt_gguf_arr m;
    kvt_status st = kvt_gguf_get_arr(g, "tokenizer.ggml.merges", &m, err);
    if (st == KVT_ERR_NOT_FOUND) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: BPE vocabulary without tokenizer.ggml.merges", path);
    }
    if (st) {
        return st;
    }
    if (m.type != KVT_GGUF_STRING) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: tokenizer.ggml.merges is not a string array", path);
    }
    if (m.n > (uint64_t)INT32_MAX / 4) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: %llu merges", path, (unsigned long long)m.n);
    }
    const uint32_t n = (uint32_t)m.n;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        total += kvt_gguf_arr_str(g, &m, i).len;
    }
    if (total > UINT32_MAX) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: merges too large", path);
    }
    t->n_merges = n;
    t->merge_text = malloc(total ? total : 1);
    t->merge_off = malloc((n ? n : 1) * sizeof *t->merge_off);
    t->merge_len = malloc((n ? n : 1) * sizeof *t->merge_len);
    t->merge_mask = table_size(n) - 1;
    t->merge_slots = calloc((size_t)t->merge_mask + 1, sizeof *t->merge_slots);
    if (!t->merge_text || !t->merge_off || !t->merge_len || !t->merge_slots) {
        return kvt_errorf(err, KVT_ERR_NOMEM, "%s: no memory for %u merges", path, n);
    }
    uint32_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        kvt_str s = kvt_gguf_arr_str(g, &m, i);
        memcpy(t->merge_text + off, s.ptr, s.len);
        t->merge_off[i] = off;
        t->merge_len[i] = (uint32_t)s.len;
        const char *ms = t->merge_text + off;
        off += (uint32_t)s.len;
        // the first occurrence of a merge keeps its rank
        uint32_t h = slot_of(fnv(FNV_OFFSET, ms, s.len), t->merge_mask);
        for (;;) {
            uint32_t v = t->merge_slots[h];
            if (v == 0) {
                t->merge_slots[h] = i + 1;
                break;
            }
            if (t->merge_len[v - 1] == s.len && memcmp(t->merge_text + t->merge_off[v - 1], ms, s.len) == 0) {
                break;
            }
            h = (h + 1) & t->merge_mask;
        }
    }
    return KVT_OK;
}

// Lowest id among the tokens whose text is in the list, or -1; marks it control.
static int32_t detect(kvt_tokenizer *t, const char *const *list) {
    int32_t best = -1;
    for (; *list; list++) {
        int32_t id = find_cstr(t, *list);
        if (id >= 0 && (best < 0 || id < best)) {
            best = id;
        }
    }
    if (best >= 0) {
        t->toks[best].attr |= KVT_TOKEN_ATTR_CONTROL;
    }
    return best;
}

// The special ids of the metadata (tokenizer.ggml.*_token_id). A key of another kind than an integer is refused,
// as llama.cpp refuses it ("key ... has wrong type ... but expected type u32"; it read as the default before
// 2026-12-06). An id outside the vocabulary keeps the default, as llama.cpp ("bad special token"), and is named in
// t->note (the first such key; llama.cpp loads these files, warning).
static kvt_status special_tokens(kvt_tokenizer *t, const kvt_gguf *g, const char *path, kvt_err *err) {
    struct {
        const char *key;
        int32_t *id;
    } keys[] = {
        {"tokenizer.ggml.bos_token_id", &t->bos},
        {"tokenizer.ggml.eos_token_id", &t->eos},
        {"tokenizer.ggml.eot_token_id", &t->eot},
        {"tokenizer.ggml.eom_token_id", &t->eom},
        {"tokenizer.ggml.unknown_token_id", &t->unk},
        {"tokenizer.ggml.seperator_token_id", &t->sep}, // sic
        {"tokenizer.ggml.padding_token_id", &t->pad},
        {"tokenizer.ggml.mask_token_id", &t->mask},
        {"tokenizer.ggml.fim_pre_token_id", &t->fim_pre},
        {"tokenizer.ggml.fim_suf_token_id", &t->fim_suf},
        {"tokenizer.ggml.fim_mid_token_id", &t->fim_mid},
        {"tokenizer.ggml.fim_pad_token_id", &t->fim_pad},
        {"tokenizer.ggml.fim_rep_token_id", &t->fim_rep},
        {"tokenizer.ggml.fim_sep_token_id", &t->fim_sep},
        {"tokenizer.ggml.prefix_token_id", &t->fim_pre}, // older names
        {"tokenizer.ggml.suffix_token_id", &t->fim_suf},
        {"tokenizer.ggml.middle_token_id", &t->fim_mid},
    };
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        int32_t *id = keys[k].id;
        if (*id >= t->n_vocab) {
            *id = -1; // default out of range
        }
        const int64_t i = kvt_gguf_find_key(g, keys[k].key);
        if (i < 0) continue;
        const kvt_gguf_type ty = kvt_gguf_kv_type(g, i);
        if (!kvt_gguf_type_is_int(ty)) {
            return kvt_errorf(err, KVT_ERR_FORMAT, "%s: metadata '%s' has type %s, expected an integer token id (u32)",
                              path, keys[k].key, ty == KVT_GGUF_ARRAY ? "arr" : kvt_gguf_type_name(ty));
        }
        int64_t v;
        const bool read = kvt_gguf_get_i64(g, keys[k].key, &v, NULL) == KVT_OK; // false: a u64 past 2^63
        if (read && v >= 0 && v < t->n_vocab) {
            *id = (int32_t)v;
        } else if (!t->note[0]) {
            char val[32] = "past 2^63";
            if (read) snprintf(val, sizeof val, "%lld", (long long)v);
            snprintf(t->note, sizeof t->note, "%s: metadata '%s' = %s is outside the vocabulary (%d tokens): the default "
                     "id %d kept (-1: none), as llama.cpp does", path, keys[k].key, val, t->n_vocab, *id);
        }
    }
    return KVT_OK;
}

static void end_of_generation(kvt_tokenizer *t) {
    // ids found by text when the metadata has none
    if (t->eot < 0) t->eot = detect(t, k_eot_texts);
    if (t->eom < 0) t->eom = detect(t, k_eom_texts);
    if (t->fim_pre < 0) t->fim_pre = detect(t, k_fim_pre_texts);
    if (t->fim_suf < 0) t->fim_suf = detect(t, k_fim_suf_texts);
    if (t->fim_mid < 0) t->fim_mid = detect(t, k_fim_mid_texts);
    if (t->fim_pad < 0) t->fim_pad = detect(t, k_fim_pad_texts);
    if (t->fim_rep < 0) t->fim_rep = detect(t, k_fim_rep_texts);
    if (t->fim_sep < 0) t->fim_sep = detect(t, k_fim_sep_texts);

    const int32_t fims[3] = {t->fim_pad, t->fim_rep, t->fim_sep};
    for (int k = 0; k < 3; k++) {
        if (fims[k] >= 0) {
            t->toks[fims[k]].eog = 1;
        }
    }
    for (const char *const *s = k_eog_texts; *s; s++) {
        int32_t id = find_cstr(t, *s);
        if (id >= 0) {
            t->toks[id].eog = 1;
            t->toks[id].attr |= KVT_TOKEN_ATTR_CONTROL;
        }
    }
    for (const char *const *s = k_always_user_defined; *s; s++) {
        int32_t id = find_cstr(t, *s);
        if (id >= 0) {
            t->toks[id].attr = KVT_TOKEN_ATTR_USER_DEFINED;
        }
    }
    const int32_t ends[3] = {t->eos, t->eot, t->eom};
    for (int k = 0; k < 3; k++) {
        if (ends[k] >= 0) {
            t->toks[ends[k]].eog = 1;
        }
    }
    // gpt-oss / solar-open: <|end|> ends a message, not the generation
    bool has_return = false, has_call = false, has_flush = false, has_tool_resp = false;
    int32_t end_id = -1, s_id = -1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!t->toks[id].eog) {
            continue;
        }
        if (tok_is(t, id, "<|return|>")) has_return = true;
        else if (tok_is(t, id, "<|call|>") || tok_is(t, id, "<|calls|>")) has_call = true;
        else if (tok_is(t, id, "<|flush|>")) has_flush = true;
        else if (tok_is(t, id, "<|end|>")) end_id = id;
        if (tok_is(t, id, "<|tool_response>") || tok_is(t, id, "<|plamo:eos|>")) has_tool_resp = true;
        else if (tok_is(t, id, "</s>")) s_id = id;
    }
    if (end_id >= 0 && ((has_return && has_call) || (has_call && has_flush))) {
        t->toks[end_id].eog = 0;
        t->toks[end_id].attr = KVT_TOKEN_ATTR_USER_DEFINED;
    }
    // gemma4 / plamo: </s> is a normal token there
    if (has_tool_resp && s_id >= 0) {
        t->toks[s_id].eog = 0;
        t->toks[s_id].attr = KVT_TOKEN_ATTR_NORMAL;
    }
}

static kvt_status special_cache(kvt_tokenizer *t, const kvt_gguf *g, const char *path, kvt_err *err) {
    const uint16_t want = KVT_TOKEN_ATTR_CONTROL | KVT_TOKEN_ATTR_USER_DEFINED | KVT_TOKEN_ATTR_UNKNOWN;
    int32_t n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        n += (t->toks[id].attr & want) != 0;
    }
    len_id *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    t->special = malloc((size_t)(n ? n : 1) * sizeof *t->special);
    if (!tmp || !t->special) {
        free(tmp);
        return kvt_errorf(err, KVT_ERR_NOMEM, "%s: no memory for special tokens", path);
    }
    int32_t k = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (t->toks[id].attr & want) {
            tmp[k].len = t->toks[id].len;
            tmp[k].id = id;
            k++;
        }
    }
    // longest first (llama.cpp leaves equal lengths in unspecified order; id order here)
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_special);
    for (int32_t i = 0; i < n; i++) {
        t->special[i] = tmp[i].id;
    }
    t->n_special = n;
    free(tmp);

    // Phi-3: spaces after special tokens are dropped when tokenizing
    kvt_str name;
    if (kvt_gguf_get_str(g, "general.name", &name, NULL) == KVT_OK) {
        char low[256];
        size_t ln = name.len < sizeof low - 1 ? (size_t)name.len : sizeof low - 1;
        for (size_t i = 0; i < ln; i++) {
            low[i] = (char)tolower((unsigned char)name.ptr[i]);
        }
        low[ln] = 0;
        if (strstr(low, "phi-3") || strstr(low, "phi3")) {
            for (int32_t i = 0; i < n; i++) {
                t->toks[t->special[i]].attr |= KVT_TOKEN_ATTR_RSTRIP;
            }
            int32_t id = find_cstr(t, "</s>");
            if (id >= 0) t->toks[id].attr |= KVT_TOKEN_ATTR_RSTRIP;
            const char *keep[] = {"<unk>", "<s>", "<|endoftext|>"};
            for (int i = 0; i < 3; i++) {
                id = find_cstr(t, keep[i]);
                if (id >= 0) t->toks[id].attr &= (uint16_t)~KVT_TOKEN_ATTR_RSTRIP;
            }
        }
    }
    return KVT_OK;
}

static void byte_tables(kvt_tokenizer *t) {
    static const char hex[] = "0123456789ABCDEF";
    for (int i = 0; i < 324; i++) {
        t->cpt_byte[i] = -1;
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->raw_byte_tok[b] = kvt_tok_find(t, &c, 1);
        char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        int32_t id = kvt_tok_find(t, name, 6);
        t->spm_byte_tok[b] = id >= 0 ? id : t->raw_byte_tok[b];
        uint32_t cp = kvt_byte_to_cpt((uint8_t)b);
        t->bpe_byte_utf8_len[b] = (uint8_t)kvt_utf8_encode(cp, t->bpe_byte_utf8[b]);
        t->cpt_byte[cp] = (int16_t)b;
    }
}

kvt_status kvt_tokenizer_init(const kvt_gguf *g, kvt_tokenizer **out, kvt_err *err) {
    *out = NULL;
    const char *path = kvt_gguf_path(g);
    if (!path) {
        path = "gguf";
    }
    kvt_str model;
    kvt_status st = kvt_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (st == KVT_ERR_NOT_FOUND) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: no tokenizer.ggml.model", path);
    }
    if (st) {
        return st;
    }
    kvt_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        return kvt_errorf(err, KVT_ERR_NOMEM, "%s: no memory for the tokenizer", path);
    }
    t->eot = t->eom = t->sep = t->pad = t->mask = -1;
    t->fim_pre = t->fim_suf = t->fim_mid = t->fim_pad = t->fim_rep = t->fim_sep = -1;
    if (kvt_str_eq(model, "llama")) {
        t->type = KVT_VOCAB_SPM;
        t->pre = KVT_PRE_DEFAULT;
        t->bos = 1;
        t->eos = 2;
        t->unk = 0;
        t->add_space_prefix = true;
        t->add_bos = true;
    } else if (kvt_str_eq(model, "gpt2")) {
        t->type = KVT_VOCAB_BPE;
        t->bos = 11;
        t->eos = 11;
        t->unk = -1;
        kvt_str pre = {"", 0};
        st = kvt_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err);
        if (st && st != KVT_ERR_NOT_FOUND) {
            free(t);
            return st;
        }
        const pre_info *pi = NULL;
        if (pre.len == 0) {
            pi = &k_pre[0]; // missing: llama.cpp falls back to "default" (with a warning)
        }
        for (size_t i = 0; !pi && i < sizeof k_pre / sizeof k_pre[0]; i++) {
            if (kvt_str_eq(pre, k_pre[i].name)) {
                pi = &k_pre[i];
            }
        }
        if (!pi) {
            int pl = pre.len > 64 ? 64 : (int)pre.len;
            free(t);
            return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "%s: pre-tokenizer '%.*s' not supported", path,
                              pl, pre.ptr);
        }
        t->pre = pi->kind;
        t->spm_style = pi->kind == KVT_PRE_GEMMA4;
        t->clean_spaces = pi->clean_spaces;
        t->ignore_merges = pi->ignore_merges;
        t->add_bos = pi->add_bos;
        if (pi->no_bos) {
            t->bos = -1;
        }
    } else if (kvt_str_eq(model, "gemma4")) {
        // BPE merges over raw UTF-8, spaces escaped as in SPM, whatever
        // tokenizer.ggml.pre says (llama.cpp's "gemma4" pre-tokenizer)
        t->type = KVT_VOCAB_BPE;
        t->pre = KVT_PRE_GEMMA4;
        t->spm_style = true;
        t->clean_spaces = true;
        t->bos = t->eos = t->unk = -1;
    } else {
        int ml = model.len > 64 ? 64 : (int)model.len;
        free(t);
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "%s: tokenizer model '%.*s' not supported", path,
                          ml, model.ptr);
    }
    st = read_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err);
    if (!st) st = load_tokens(t, g, path, err);
    if (!st && t->type == KVT_VOCAB_BPE) st = load_merges(t, g, path, err);
    if (st) {
        kvt_tokenizer_free(t);
        return st;
    }
    byte_tables(t);
    st = special_tokens(t, g, path, err);
    if (!st) st = read_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err);
    if (!st) st = read_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err);
    if (t->pre == KVT_PRE_GEMMA4) {
        t->add_bos = true; // llama.cpp overrides add_bos_token = false for Gemma 4
    }
    if (st) {
        kvt_tokenizer_free(t);
        return st;
    }
    end_of_generation(t);
    st = special_cache(t, g, path, err);
    if (st) {
        kvt_tokenizer_free(t);
        return st;
    }
    *out = t;
    return KVT_OK;
}

// ---------------------------------------------------------------------------
// tokenize

typedef struct {
    int32_t id; // -1: text
    size_t off, len;
} frag;

typedef struct {
    frag *v;
    size_t n, cap;
    bool oom;
} fragvec;

static void fv_push(fragvec *a, int32_t id, size_t off, size_t len) {
    if (a->oom) {
        return;
    }
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 16;
        frag *nv = realloc(a->v, nc * sizeof *nv);
        if (!nv) {
            a->oom = true;
            return;
        }
        a->v = nv;
        a->cap = nc;
    }
    frag f = {id, off, len};
    a->v[a->n++] = f;
}

static bool c_space(char c) {
    return isspace((unsigned char)c) != 0;
}

// Splits the text fragments around every occurrence of each special token,
// longest tokens first.
static bool partition(const kvt_tokenizer *t, const char *text, fragvec *fv, bool parse_special) {
    fragvec other = {0};
    for (int32_t si = 0; si < t->n_special && !fv->oom; si++) {
        const int32_t id = t->special[si];
        const kvt_tok_entry *e = &t->toks[id];
        if (!parse_special && (e->attr & (KVT_TOKEN_ATTR_CONTROL | KVT_TOKEN_ATTR_UNKNOWN))) {
            continue; // user-defined tokens are split out even then
        }
        const char *s = t->text + e->off;
        bool any = false;
        for (size_t i = 0; i < fv->n && !any; i++) {
            any = fv->v[i].id < 0 && find_bytes(text + fv->v[i].off, fv->v[i].len, s, e->len) >= 0;
        }
        if (!any) {
            continue;
        }
        other.n = 0;
        for (size_t i = 0; i < fv->n; i++) {
            frag f = fv->v[i];
            if (f.id >= 0) {
                fv_push(&other, f.id, 0, 0);
                continue;
            }
            size_t base = f.off, blen = f.len;
            for (;;) {
                int64_t at = find_bytes(text + base, blen, s, e->len);
                if (at < 0) {
                    if (blen > 0) {
                        fv_push(&other, -1, base, blen);
                    }
                    break;
                }
                size_t llen = (size_t)at;
                if (e->attr & KVT_TOKEN_ATTR_LSTRIP) {
                    while (llen > 0 && c_space(text[base + llen - 1])) {
                        llen--;
                    }
                }
                if (llen > 0) {
                    fv_push(&other, -1, base, llen);
                }
                fv_push(&other, id, 0, 0);
                size_t roff = base + (size_t)at + e->len;
                size_t rlen = blen - (size_t)at - e->len;
                if (e->attr & KVT_TOKEN_ATTR_RSTRIP) {
                    while (rlen > 0 && c_space(text[roff])) {
                        roff++;
                        rlen--;
                    }
                }
                base = roff;
                blen = rlen;
            }
        }
        fragvec tmp = *fv;
        *fv = other;
        other = tmp;
        if (other.oom) {
            fv->oom = true;
        }
    }
    free(other.v);
    return !fv->oom;
}

// SentencePiece escaping of n bytes of text into *buf (realloc'd): ' ' ->
// U+2581, with one more in front when prefix is set. Returns the escaped
// length, SIZE_MAX when out of memory.
static size_t escape_spaces(const char *s, size_t n, bool prefix, char **buf) {
    size_t nsp = prefix ? 1 : 0;
    for (size_t k = 0; k < n; k++) {
        nsp += s[k] == ' ';
    }
    char *nb = realloc(*buf, n + 2 * nsp + 1);
    if (!nb) {
        return SIZE_MAX;
    }
    *buf = nb;
    size_t bn = 0;
    if (prefix) {
        memcpy(nb + bn, LOWB, 3);
        bn += 3;
    }
    for (size_t k = 0; k < n; k++) {
        if (s[k] == ' ') {
            memcpy(nb + bn, LOWB, 3);
            bn += 3;
        } else {
            nb[bn++] = s[k];
        }
    }
    return bn;
}

int64_t kvt_tokenize(const kvt_tokenizer *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t *ids, int64_t cap, kvt_err *err) {
    if (!t || (!text && len > 0) || cap < 0 || (!ids && cap > 0)) {
        kvt_errorf(err, KVT_ERR_INVALID_ARG, "kvt_tokenize: bad arguments");
        return -1;
    }
    if (len > (size_t)INT32_MAX) {
        kvt_errorf(err, KVT_ERR_INVALID_ARG, "kvt_tokenize: %zu bytes of text (at most 2 GiB)", len);
        return -1;
    }
    fragvec fv = {0};
    kvt_ivec out = {0};
    char *buf = NULL;
    bool ok = true;
    if (len > 0) {
        fv_push(&fv, -1, 0, len);
        ok = partition(t, text, &fv, parse_special);
    }
    if (ok && t->type == KVT_VOCAB_SPM) {
        if (add_special && t->add_bos && t->bos >= 0) {
            kvt_ivec_push(&out, t->bos);
        }
        bool prev_special = true; // the first text gets the space prefix too
        for (size_t i = 0; ok && i < fv.n; i++) {
            const frag *f = &fv.v[i];
            if (f->id >= 0) {
                kvt_ivec_push(&out, f->id);
                prev_special = true;
                continue;
            }
            size_t bn = escape_spaces(text + f->off, f->len, t->add_space_prefix && prev_special, &buf);
            ok = bn != SIZE_MAX && kvt_spm_tokenize(t, buf, bn, &out);
            prev_special = false;
        }
        if (ok && add_special && t->add_eos && t->eos >= 0) {
            kvt_ivec_push(&out, t->eos);
        }
    } else if (ok) {
        if (add_special && t->add_bos && t->bos >= 0) {
            kvt_ivec_push(&out, t->bos);
        }
        for (size_t i = 0; ok && i < fv.n; i++) {
            const frag *f = &fv.v[i];
            if (f->id >= 0) {
                kvt_ivec_push(&out, f->id);
            } else if (t->spm_style) {
                size_t bn = escape_spaces(text + f->off, f->len, false, &buf);
                ok = bn != SIZE_MAX && kvt_bpe_tokenize(t, buf, bn, &out);
            } else {
                ok = kvt_bpe_tokenize(t, text + f->off, f->len, &out);
            }
        }
        if (ok && add_special && t->add_eos && t->eos >= 0) {
            kvt_ivec_push(&out, t->eos);
        }
    }
    free(buf);
    free(fv.v);
    if (!ok || out.oom) {
        free(out.v);
        kvt_errorf(err, KVT_ERR_NOMEM, "kvt_tokenize: out of memory (%zu bytes of text)", len);
        return -1;
    }
    size_t ncopy = out.n < (size_t)cap ? out.n : (size_t)cap;
    if (ncopy) {
        memcpy(ids, out.v, ncopy * sizeof *ids);
    }
    int64_t n = (int64_t)out.n;
    free(out.v);
    return n;
}

// ---------------------------------------------------------------------------
// pieces

// Byte sink: counts everything, stores what fits, drops up to `lstrip`
// leading spaces.
typedef struct {
    char *buf;
    size_t cap, n;
    int32_t lstrip;
    bool started;
} sink;

static void put(sink *k, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!k->started) {
            if (k->lstrip > 0 && s[i] == ' ') {
                k->lstrip--;
                continue;
            }
            k->started = true;
        }
        if (k->n < k->cap) {
            k->buf[k->n] = s[i];
        }
        k->n++;
    }
}

static void render(const kvt_tokenizer *t, int32_t id, bool special, sink *k) {
    if (id < 0 || id >= t->n_vocab) {
        return;
    }
    const kvt_tok_entry *e = &t->toks[id];
    const char *s = t->text + e->off;
    const uint16_t a = e->attr;
    if (a & (KVT_TOKEN_ATTR_UNKNOWN | KVT_TOKEN_ATTR_CONTROL)) {
        if (special) {
            put(k, s, e->len);
        }
        return;
    }
    if (a & KVT_TOKEN_ATTR_USER_DEFINED) {
        put(k, s, e->len);
        return;
    }
    if (a & KVT_TOKEN_ATTR_NORMAL) {
        if (t->type == KVT_VOCAB_SPM || t->spm_style) {
            size_t i = 0, from = 0;
            while (i + 3 <= e->len) {
                if (memcmp(s + i, LOWB, 3) == 0) {
                    put(k, s + from, i - from);
                    put(k, " ", 1);
                    i += 3;
                    from = i;
                } else {
                    i++;
                }
            }
            put(k, s + from, e->len - from);
        } else {
            for (size_t off = 0; off < e->len;) {
                uint32_t cp = kvt_utf8_decode(s, e->len, &off);
                int b = cp < 324 ? t->cpt_byte[cp] : -1;
                if (b >= 0) {
                    char c = (char)b;
                    put(k, &c, 1);
                    continue;
                }
                // llama.cpp's marker for a code point outside the byte map
                char u[4], hx[8];
                size_t ul = kvt_utf8_encode(cp, u);
                put(k, "[UNK_BYTE_0x", 12);
                for (size_t j = 0; j < ul; j++) {
                    snprintf(hx, sizeof hx, "%02x", (unsigned)(uint8_t)u[j]);
                    put(k, hx, 2);
                }
                put(k, s, e->len);
                put(k, "]", 1);
            }
        }
        return;
    }
    if (a & KVT_TOKEN_ATTR_BYTE) {
        // "<0xXX>": the two characters after "<0x", read as hex
        if (e->len < 3) {
            return;
        }
        unsigned v = 0;
        for (size_t i = 3; i < 5 && i < e->len && isxdigit((unsigned char)s[i]); i++) {
            char c = s[i];
            v = v * 16 + (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
        }
        char c = (char)v;
        put(k, &c, 1);
    }
    // unused / undefined tokens: nothing
}

int64_t kvt_token_to_piece_ex(const kvt_tokenizer *t, int32_t id, char *buf, int64_t cap,
                              int32_t lstrip, bool special) {
    if (!t || cap < 0 || (!buf && cap > 0)) {
        return 0;
    }
    sink k = {buf, (size_t)cap, 0, lstrip, false};
    render(t, id, special, &k);
    return (int64_t)k.n;
}

int64_t kvt_token_to_piece(const kvt_tokenizer *t, int32_t id, char *buf, int64_t cap) {
    return kvt_token_to_piece_ex(t, id, buf, cap, 0, false);
}

// llama.cpp's clean_up_tokenization_spaces, in place; returns the new length.
static size_t clean_spaces(char *s, size_t n) {
    if (n == 0) {
        return 0;
    }
    // 1: no space before ? ! . ,
    size_t w = 1;
    for (size_t i = 1; i < n; i++) {
        char x = s[i];
        if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) {
            w--;
        }
        s[w++] = x;
    }
    n = w;
    // 2: " ' " -> "'" (a space consumed here is not the left side of the next match)
    w = 1;
    bool prev_eaten = false;
    for (size_t i = 1; i < n; i++) {
        char x = s[i];
        if (x == '\'' && i + 1 < n && s[i - 1] == ' ' && !prev_eaten && s[i + 1] == ' ') {
            w--;
            s[w++] = x;
            i++; // drop the space after
            prev_eaten = true;
            continue;
        }
        prev_eaten = false;
        s[w++] = x;
    }
    n = w;
    // 3: " 's" " 'm" " 're" " 've" -> without the space
    w = 1;
    for (size_t i = 1; i < n; i++) {
        char x = s[i];
        if (s[i - 1] == ' ' && x == '\'' && i + 1 < n) {
            char x1 = s[i + 1];
            if (x1 == 's' || x1 == 'm') {
                w--;
            } else if (x1 != 't' && x1 != 'd' && i + 2 < n) {
                char x2 = s[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) {
                    w--;
                }
            }
        }
        s[w++] = x;
    }
    return w;
}

int64_t kvt_detokenize_ex(const kvt_tokenizer *t, const int32_t *ids, int64_t n, char *buf,
                          int64_t cap, bool remove_special, bool unparse_special) {
    if (!t || n < 0 || (!ids && n > 0) || cap < 0 || (!buf && cap > 0)) {
        return 0;
    }
    int32_t lstrip = t->add_space_prefix ? 1 : 0;
    if (remove_special && t->add_bos && n > 0 && ids[0] == t->bos) {
        lstrip = 0;
        ids++;
        n--;
    }
    if (remove_special && t->add_eos && n > 0 && ids[n - 1] == t->eos) {
        n--;
    }
    sink k = {buf, (size_t)cap, 0, 0, false};
    char *tmp = NULL;
    if (t->clean_spaces) {
        // measure, then render whole and clean
        for (int64_t i = 0; i < n; i++) {
            sink m = {NULL, 0, 0, i == 0 ? lstrip : 0, false};
            render(t, ids[i], unparse_special, &m);
            k.n += m.n;
        }
        tmp = malloc(k.n ? k.n : 1);
        if (!tmp) {
            return -1;
        }
        k.buf = tmp;
        k.cap = k.n;
        k.n = 0;
    }
    for (int64_t i = 0; i < n; i++) {
        k.lstrip = i == 0 ? lstrip : 0; // only the first piece loses its space
        k.started = false;
        render(t, ids[i], unparse_special, &k);
    }
    if (!t->clean_spaces) {
        return (int64_t)k.n;
    }
    size_t len = clean_spaces(tmp, k.n);
    if (cap > 0) {
        memcpy(buf, tmp, len < (size_t)cap ? len : (size_t)cap);
    }
    free(tmp);
    return (int64_t)len;
}

int64_t kvt_detokenize(const kvt_tokenizer *t, const int32_t *ids, int64_t n, char *buf,
                       int64_t cap) {
    return kvt_detokenize_ex(t, ids, n, buf, cap, false, false);
}

// ---------------------------------------------------------------------------
// accessors

const char *kvt_tokenizer_note(const kvt_tokenizer *t) { return t->note; }
kvt_vocab_type kvt_tokenizer_type(const kvt_tokenizer *t) { return t->type; }
int32_t kvt_tokenizer_n_vocab(const kvt_tokenizer *t) { return t->n_vocab; }
int32_t kvt_token_bos(const kvt_tokenizer *t) { return t->bos; }
int32_t kvt_token_eos(const kvt_tokenizer *t) { return t->eos; }
int32_t kvt_token_eot(const kvt_tokenizer *t) { return t->eot; }
int32_t kvt_token_unk(const kvt_tokenizer *t) { return t->unk; }
int32_t kvt_token_pad(const kvt_tokenizer *t) { return t->pad; }
bool kvt_tokenizer_add_bos(const kvt_tokenizer *t) { return t->add_bos; }
bool kvt_tokenizer_add_eos(const kvt_tokenizer *t) { return t->add_eos; }
int32_t kvt_token_fim(const kvt_tokenizer *t, kvt_fim_token k) {
    switch (k) {
    case KVT_FIM_PRE: return t->fim_pre;
    case KVT_FIM_SUF: return t->fim_suf;
    case KVT_FIM_MID: return t->fim_mid;
    case KVT_FIM_PAD: return t->fim_pad;
    case KVT_FIM_REP: return t->fim_rep;
    case KVT_FIM_SEP: return t->fim_sep;
    }
    return -1;
}

bool kvt_token_is_eog(const kvt_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->toks[id].eog;
}

const char *kvt_token_text(const kvt_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) {
        if (len) *len = 0;
        return "";
    }
    if (len) *len = t->toks[id].len;
    return t->text + t->toks[id].off;
}

uint32_t kvt_token_attr(const kvt_tokenizer *t, int32_t id) {
    return (id >= 0 && id < t->n_vocab) ? t->toks[id].attr : 0u;
}

float kvt_token_score(const kvt_tokenizer *t, int32_t id) {
    return (id >= 0 && id < t->n_vocab) ? t->toks[id].score : 0.0f;
}

int32_t kvt_token_lookup(const kvt_tokenizer *t, const char *text, size_t len) {
    return kvt_tok_find(t, text, len);
}

// --- the merge loop's priority queue (shared by SPM and BPE) ---------------

// a pops before b: higher priority, then leftmost.
static bool bigram_before(const kvt_bigram *a, const kvt_bigram *b) {
    return a->priority > b->priority || (a->priority == b->priority && a->left < b->left);
}

void kvt_bigram_heap_push(kvt_bigram_heap *h, kvt_bigram x) {
    if (h->oom) return;
    if (!kvt_grow((void **)&h->v, &h->cap, h->n + 1, sizeof *h->v)) {
        h->oom = true;
        return;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&x, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = x;
}

kvt_bigram kvt_bigram_heap_pop(kvt_bigram_heap *h) {
    kvt_bigram top = h->v[0];
    kvt_bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bigram_before(&h->v[c + 1], &h->v[c])) c++;
        if (!bigram_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0) h->v[i] = last;
    return top;
}
