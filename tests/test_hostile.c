// test_hostile.c - files nobody here made: crafted GGUFs (huge, inconsistent or NaN-holding) and
// session files are refused with a message naming the problem, never run, never a crash (the
// asan run checks the latter under UBSan). Every model is written here with the GGUF writer, so
// the suite needs no data file.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/base/timer.h"
#include "../src/exec/context.h"
#include "../src/exec/numerics.h"
#include "../src/exec/session.h"
#include "../src/gguf/gguf.h"
#include "../src/model/model.h"
#include "../src/model/tokenizer.h"
#include "../src/sched/generate.h"
#include "../src/sched/kld.h"
#include "../src/sched/perplexity.h"
#include "test.h"

enum { E = 64, NH = 4, NKV = 2, FF = 96, NL = 2, V = 40 };

// What a crafted model gets wrong (zero: nothing).
typedef struct {
    int32_t block_count;   // written block_count (0: NL)
    int32_t n_tokens;      // vocabulary entries (0: V)
    int32_t embd_meta;     // written embedding_length (0: E)
    int32_t heads_meta;    // written head_count and head_count_kv (0: NH, NKV)
    bool dup_key;          // general.architecture twice
    float rms_eps;         // 0: 1e-5
    float rope_base;       // 0: 10000
    int nan_layer;         // >= 0: one NaN in blk.<nan_layer>.ffn_down.weight
    float tail;            // added to token_embd values past its first 4 KiB
    bool overlap;          // output_norm's data offset moved onto token_embd's
    const char *extra;     // an extra [E] F32 tensor of that name (one the model does not read)
    int32_t n_rot;         // written rope.dimension_count (0: none)
    int rope_scaling;      // 1: rope.scale_linear 4 (the older key), 2: scaling type none with factor 4
    bool dup_token;        // token 5's text is token 4's
    bool short_byte;       // token 6 ("t6") typed as a byte token
    const char *special;   // a tokenizer.ggml.*_token_id key written as special_as says
    int special_as;        // 1: the string "1", 2: f32 1.0, 3: an array of u32, 4: u32 V + 5, 5: i32 -1, 6: u32 3
} spec;

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffff) / 65536.0f - 0.5f;
}

// Writes the crafted llama model to path; false on failure.
static bool write_model(const char *path, const spec *sp) {
    kvt_gguf_writer *w = kvt_gguf_writer_init();
    if (!w) return false;
    kvt_gguf_writer_set_str(w, "general.architecture", "llama");
    if (sp->dup_key) kvt_gguf_writer_set_str(w, "general.architecture", "llama");
    kvt_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)(sp->embd_meta ? sp->embd_meta : E));
    kvt_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)(sp->block_count ? sp->block_count : NL));
    kvt_gguf_writer_set_u32(w, "llama.feed_forward_length", FF);
    kvt_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)(sp->heads_meta ? sp->heads_meta : NH));
    kvt_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)(sp->heads_meta ? sp->heads_meta : NKV));
    kvt_gguf_writer_set_u32(w, "llama.context_length", 256);
    kvt_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", sp->rms_eps != 0.0f ? sp->rms_eps : 1e-5f);
    kvt_gguf_writer_set_f32(w, "llama.rope.freq_base", sp->rope_base != 0.0f ? sp->rope_base : 10000.0f);
    if (sp->n_rot) kvt_gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)sp->n_rot);
    if (sp->rope_scaling == 1) kvt_gguf_writer_set_f32(w, "llama.rope.scale_linear", 4.0f);
    if (sp->rope_scaling == 2) {
        kvt_gguf_writer_set_str(w, "llama.rope.scaling.type", "none");
        kvt_gguf_writer_set_f32(w, "llama.rope.scaling.factor", 4.0f);
    }
    const int32_t nt = sp->n_tokens ? sp->n_tokens : V;
    char names[V][16];
    const char *toks[V];
    float scores[V];
    int32_t types[V];
    for (int i = 0; i < nt; i++) {
        snprintf(names[i], sizeof names[i], i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : "t%d", i);
        toks[i] = names[i];
        scores[i] = -(float)i;
        types[i] = i < 3 ? (i == 0 ? 2 : 3) : 1;
    }
    if (sp->dup_token) snprintf(names[5], sizeof names[5], "t4");
    if (sp->short_byte) types[6] = 6;
    kvt_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    kvt_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)nt);
    kvt_gguf_writer_set_arr(w, "tokenizer.ggml.scores", KVT_GGUF_F32, scores, (uint64_t)nt);
    kvt_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", KVT_GGUF_I32, types, (uint64_t)nt);
    if (sp->special) {
        const uint32_t one = 1;
        switch (sp->special_as) {
        case 1: kvt_gguf_writer_set_str(w, sp->special, "1"); break;
        case 2: kvt_gguf_writer_set_f32(w, sp->special, 1.0f); break;
        case 3: kvt_gguf_writer_set_arr(w, sp->special, KVT_GGUF_U32, &one, 1); break;
        case 4: kvt_gguf_writer_set_u32(w, sp->special, V + 5); break;
        case 5: kvt_gguf_writer_set_i32(w, sp->special, -1); break;
        default: kvt_gguf_writer_set_u32(w, sp->special, 3); break;
        }
    }
    // tensors: one F32 buffer, carved
    const int64_t hd = E / NH;
    const int64_t sizes[] = {(int64_t)E * V, E,  (int64_t)E * E, (int64_t)NKV * hd * E, (int64_t)NKV * hd * E,
                             (int64_t)E * E, E,  (int64_t)FF * E, (int64_t)FF * E,    (int64_t)E * FF};
    int64_t total = sizes[0] + sizes[1];
    for (int k = 2; k < 10; k++) total += NL * sizes[k];
    float *buf = malloc((size_t)total * sizeof *buf), *p = buf;
    if (!buf) {
        kvt_gguf_writer_free(w);
        return false;
    }
    uint64_t s = 42;
    for (int64_t i = 0; i < total; i++) buf[i] = 0.2f * frand(&s);
    for (int64_t i = 1024; i < sizes[0]; i++) buf[i] += sp->tail; // token_embd, past its first 4096 bytes
    int64_t ne[2] = {E, V};
    kvt_gguf_writer_add_tensor(w, "token_embd.weight", KVT_TYPE_F32, 2, ne, p);
    p += sizes[0];
    for (int i = 0; i < E; i++) p[i] = 1.0f;
    kvt_gguf_writer_add_tensor(w, "output_norm.weight", KVT_TYPE_F32, 1, ne, p);
    p += sizes[1];
    static const char *lt[] = {"attn_q", "attn_k", "attn_v", "attn_output", "attn_norm", "ffn_gate", "ffn_up", "ffn_down"};
    const int64_t shapes[8][2] = {{E, E}, {E, NKV * hd}, {E, NKV * hd}, {E, E}, {E, 1}, {E, FF}, {E, FF}, {FF, E}};
    for (int il = 0; il < NL; il++) {
        for (int k = 0; k < 8; k++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", il, lt[k]);
            if (k == 4) {
                for (int i = 0; i < E; i++) p[i] = 1.0f;
            }
            if (k == 7 && il == sp->nan_layer) p[5 * FF + 7] = NAN;
            kvt_gguf_writer_add_tensor(w, name, KVT_TYPE_F32, k == 4 ? 1 : 2, shapes[k], p);
            p += shapes[k][0] * shapes[k][1];
        }
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", il);
        const int64_t n1[1] = {E};
        kvt_gguf_writer_add_tensor(w, name, KVT_TYPE_F32, 1, n1, buf + sizes[0]); // the output norm's ones
    }
    if (sp->extra) {
        const int64_t n1[1] = {E};
        kvt_gguf_writer_add_tensor(w, sp->extra, KVT_TYPE_F32, 1, n1, buf + sizes[0]);
    }
    kvt_err err;
    bool ok = kvt_gguf_writer_write(w, path, &err) == KVT_OK;
    kvt_gguf_writer_free(w);
    free(buf);
    if (ok && sp->overlap) { // output_norm.weight's offset field := 0 (token_embd's data)
        FILE *f = fopen(path, "r+b");
        char hdr[8192];
        size_t n = f ? fread(hdr, 1, sizeof hdr, f) : 0;
        const char *key = "output_norm.weight";
        char *at = n ? memmem(hdr, n, key, strlen(key)) : NULL;
        ok = at != NULL;
        if (ok) { // name, n_dims u32, ne[1] u64, type u32, offset u64
            const long off = (long)(at - hdr) + (long)strlen(key) + 4 + 8 + 4;
            const uint64_t zero = 0;
            ok = fseek(f, off, SEEK_SET) == 0 && fwrite(&zero, 8, 1, f) == 1;
        }
        if (f) fclose(f);
    }
    return ok;
}

static bool tmp_model(char *path, size_t cap, const char *tag) {
    snprintf(path, cap, "/tmp/kvt_hostile_%s_%d.gguf", tag, (int)getpid());
    return true;
}

// Loads a crafted model; the case passes if loading fails and the message holds `want`.
static void expect_refused(const char *name, const spec *sp, const char *want) {
    char path[256];
    tmp_model(path, sizeof path, "bad");
    kvt_model *m = NULL;
    kvt_err err = {0};
    if (!write_model(path, sp)) {
        test_result(false, name, "cannot write %s", path);
        return;
    }
    kvt_status st = kvt_model_load(path, false, &m, &err);
    test_result(st != KVT_OK && strstr(err.msg, want) != NULL, name, "status %d, message '%s' (want '%s')", (int)st,
                st ? err.msg : "", want);
    kvt_model_free(m);
    unlink(path);
}

// Writes the crafted model and initializes its tokenizer alone: the status, the message (or the tokenizer's note) in
// msg, the BOS and EOS ids in ids (-2 when refused).
static kvt_status load_tokenizer(const spec *sp, char *msg, size_t cap, int32_t ids[2]) {
    char path[256];
    tmp_model(path, sizeof path, "vocab");
    kvt_gguf *g = NULL;
    kvt_tokenizer *tk = NULL;
    kvt_err err = {0};
    kvt_status st = write_model(path, sp) ? kvt_gguf_open(path, &g, &err) : KVT_ERR_IO;
    if (!st) st = kvt_tokenizer_init(g, &tk, &err);
    snprintf(msg, cap, "%s", st ? err.msg : kvt_tokenizer_note(tk));
    ids[0] = tk ? kvt_token_bos(tk) : -2;
    ids[1] = tk ? kvt_token_eos(tk) : -2;
    kvt_tokenizer_free(tk);
    kvt_gguf_free(g);
    unlink(path);
    return st;
}

// The model with a special token id key written as `as` says (spec.special_as), through load_tokenizer.
static kvt_status special_id_file(const spec *sp, const char *key, int as, char *msg, size_t cap, int32_t ids[2]) {
    spec s = *sp;
    s.special = key;
    s.special_as = as;
    return load_tokenizer(&s, msg, cap, ids);
}

// Special token ids of another type than an integer: refused, key and both types named, as llama.cpp refuses them
// (they read as the default before 2026-12-06); an id outside the vocabulary keeps its default, named in the note.
static void special_ids(const spec *sp) {
    static const struct {
        const char *key;
        int as;
        const char *found;
    } bad[] = {{"tokenizer.ggml.bos_token_id", 1, "has type str"},
               {"tokenizer.ggml.eos_token_id", 2, "has type f32"},
               {"tokenizer.ggml.padding_token_id", 3, "has type arr"},
               {"tokenizer.ggml.eot_token_id", 1, "has type str"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char msg[KVT_ERR_MSG_MAX], name[160];
        int32_t ids[2];
        kvt_status st = special_id_file(sp, bad[i].key, bad[i].as, msg, sizeof msg, ids);
        snprintf(name, sizeof name, "hostile: %s of type %s is refused, the key and both types named", bad[i].key,
                 bad[i].found + 9);
        test_result(st == KVT_ERR_FORMAT && strstr(msg, bad[i].key) && strstr(msg, bad[i].found) &&
                        strstr(msg, "expected an integer token id (u32)"),
                    name, "status %d: '%s'", (int)st, msg);
    }
    char msg[KVT_ERR_MSG_MAX];
    int32_t ids[2];
    kvt_status st = special_id_file(sp, "tokenizer.ggml.eos_token_id", 4, msg, sizeof msg, ids);
    test_result(st == KVT_OK && ids[1] == 2 && strstr(msg, "'tokenizer.ggml.eos_token_id' = 45 is outside the vocabulary (40"),
                "hostile: an eos_token_id past the vocabulary keeps the default (as llama.cpp), named in the note",
                "status %d, eos %d: '%s'", (int)st, ids[1], msg);
    st = special_id_file(sp, "tokenizer.ggml.bos_token_id", 5, msg, sizeof msg, ids);
    test_result(st == KVT_OK && ids[0] == 1 && strstr(msg, "'tokenizer.ggml.bos_token_id' = -1 is outside"),
                "hostile: a bos_token_id of i32 -1 keeps the default, named in the note", "status %d, bos %d: '%s'", (int)st,
                ids[0], msg);
    st = special_id_file(sp, "tokenizer.ggml.bos_token_id", 6, msg, sizeof msg, ids);
    test_result(st == KVT_OK && ids[0] == 3 && !msg[0], "hostile: a u32 bos_token_id in the vocabulary is read, no note",
                "status %d, bos %d: '%s'", (int)st, ids[0], msg);
}

static void test_inconsistent(void) {
    spec sp = {0};
    sp.nan_layer = -1;
    spec s = sp;
    s.block_count = 1;
    expect_refused("hostile: block_count smaller than the layers present", &s, "belongs to layer 1");
    s = sp;
    s.dup_key = true;
    expect_refused("hostile: duplicate metadata key", &s, "duplicate metadata key 'general.architecture'");
    s = sp;
    s.n_tokens = V - 3;
    expect_refused("hostile: fewer vocabulary entries than token_embd rows", &s, "has 37 entries, token_embd.weight 40 rows");
    s = sp;
    s.overlap = true;
    expect_refused("hostile: overlapping tensor data ranges", &s, "overlap");
    s = sp;
    s.rms_eps = NAN;
    expect_refused("hostile: rms epsilon NaN", &s, "'llama.attention.layer_norm_rms_epsilon' = nan");
    s = sp;
    s.rope_base = INFINITY;
    expect_refused("hostile: rope base infinite", &s, "'llama.rope.freq_base' = inf");
    // hyperparameters whose products overflowed int (UBSan aborted on them): refused, keys named
    s = sp;
    s.embd_meta = 1 << 30;
    s.heads_meta = 1;
    expect_refused("hostile: embedding_length 2^30 (2*n_embd overflowed)", &s, "llama.attention.key_length");
    s = sp;
    s.embd_meta = 1 << 30;
    s.heads_meta = 1 << 20;
    expect_refused("hostile: head_count 2^20 with embedding_length 2^30", &s, "'llama.attention.head_count_kv' = 1048576");
    // tensors the model would not read: llama.cpp applies the biases (llama arch) and refuses the rest, so
    // running without them gave another model's logits (2026-12-06 review)
    static const char *extras[] = {"blk.0.attn_output.bias", "blk.1.ffn_down.bias", "output.bias", "blk.0.attn_q_norm.weight",
                                   "blk.0.post_ffw_norm.weight", "blk.0.foo.weight"};
    for (size_t i = 0; i < sizeof extras / sizeof extras[0]; i++) {
        char name[128], want[128];
        s = sp;
        s.extra = extras[i];
        snprintf(name, sizeof name, "hostile: a tensor the llama model does not read (%s) is refused", extras[i]);
        snprintf(want, sizeof want, "tensor '%s' is not part of a llama model", extras[i]);
        expect_refused(name, &s, want);
    }
    s = sp; // llama.cpp: "invalid n_rot: 8, expected 16"
    s.n_rot = E / NH / 2;
    expect_refused("hostile: llama with a partial rotary dimension refused", &s, "rope.dimension_count 8 invalid for head_dim 16");
    for (int mode = 1; mode <= 2; mode++) { // llama.cpp's reading of the rope scaling keys
        s = sp;
        s.rope_scaling = mode;
        char path[256];
        tmp_model(path, sizeof path, "scale");
        kvt_model *m = NULL;
        kvt_err err = {0};
        const bool ok = write_model(path, &s) && kvt_model_load(path, false, &m, &err) == KVT_OK;
        const float want = mode == 1 ? 0.25f : 1.0f;
        test_result(ok && m->hp.rope_freq_scale == want,
                    mode == 1 ? "hostile: rope.scale_linear (the older key) scales as in llama.cpp"
                              : "hostile: rope scaling type none ignores the factor, as llama.cpp",
                    "%s: freq scale %g, want %g", ok ? "loaded" : err.msg, ok ? (double)m->hp.rope_freq_scale : 0.0,
                    (double)want);
        kvt_model_free(m);
        unlink(path);
    }
    // vocabularies llama.cpp refuses when loading (duplicate texts: GGML_ASSERT; a byte token shorter than
    // "<0xXX>": substr throws): refused by name, not tokenized with a guessed id
    for (int k = 0; k < 2; k++) {
        s = sp;
        if (k == 0) s.dup_token = true;
        else s.short_byte = true;
        char msg[KVT_ERR_MSG_MAX];
        int32_t ids[2];
        kvt_status st = load_tokenizer(&s, msg, sizeof msg, ids);
        const char *want = k == 0 ? "entries 4 and 5 are both 't4' (duplicate token text)" : "entry 6 is a byte token";
        test_result(st == KVT_ERR_FORMAT && strstr(msg, want),
                    k == 0 ? "hostile: a vocabulary with a duplicate token text is refused, both ids named"
                           : "hostile: a byte token whose text is not <0xXX> is refused",
                    "status %d '%s' (want '%s')", (int)st, msg, want);
    }
    special_ids(&sp);
    s = sp; // the model itself is fine
    char path[256];
    tmp_model(path, sizeof path, "ok");
    kvt_model *m = NULL;
    kvt_err err = {0};
    bool ok = write_model(path, &s) && kvt_model_load(path, false, &m, &err) == KVT_OK;
    test_result(ok, "hostile: the crafted model itself loads", "%s", err.msg);
    kvt_model_free(m);
    unlink(path);
}

// Saves the KV of 6 tokens decoded by model a to sess; returns the status.
static kvt_status save_session(const kvt_model *a, const char *sess, kvt_err *err) {
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    kvt_context *ctx = NULL;
    const int32_t toks[6] = {1, 5, 9, 12, 7, 30};
    kvt_status st = kvt_context_init(a, &cp, &ctx, err);
    if (!st) st = kvt_decode(ctx, toks, 6, false, err);
    if (!st) st = kvt_context_kv_save(ctx, 0, toks, 6, sess, err);
    kvt_context_free(ctx);
    return st;
}

static kvt_status load_session(const kvt_model *b, const char *sess, kvt_err *err) {
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    kvt_context *ctx = NULL;
    kvt_status st = kvt_context_init(b, &cp, &ctx, err);
    if (!st) st = kvt_context_kv_load(ctx, 0, sess, NULL, 0, -1, NULL, err);
    kvt_context_free(ctx);
    return st;
}

static void test_fingerprint_and_session(void) {
    char pa[256], pb[256], sess[256];
    snprintf(pa, sizeof pa, "/tmp/kvt_hostile_fp_a_%d.gguf", (int)getpid());
    snprintf(pb, sizeof pb, "/tmp/kvt_hostile_fp_b_%d.gguf", (int)getpid());
    snprintf(sess, sizeof sess, "/tmp/kvt_hostile_%d.kvsess", (int)getpid());
    spec sa = {0}, sb = {0};
    sa.nan_layer = sb.nan_layer = -1;
    sb.tail = 1e-3f; // token_embd differs only past its first 4 KiB
    kvt_model *a = NULL, *b = NULL;
    kvt_err err = {0};
    bool ok = write_model(pa, &sa) && write_model(pb, &sb) && !kvt_model_load(pa, false, &a, &err) &&
              !kvt_model_load(pb, false, &b, &err);
    kvt_status st = ok ? save_session(a, sess, &err) : KVT_ERR_IO;
    if (!ok || st) {
        test_result(false, "hostile: session from a model differing past 4 KiB of a tensor is refused", "set-up: %s", err.msg);
    } else {
        const bool same_ok = load_session(a, sess, &err) == KVT_OK;
        st = load_session(b, sess, &err);
        const char *ba = strrchr(pa, '/') + 1, *bb = strrchr(pb, '/') + 1;
        test_result(same_ok && st == KVT_ERR_INVALID_ARG && strstr(err.msg, ba) && strstr(err.msg, bb),
                    "hostile: session from a model differing past 4 KiB of a tensor is refused, both models named",
                    "same model loads: %d; other: status %d '%s'", same_ok, (int)st, err.msg);
        // the same weights with another rope base (a GGUF whose metadata was edited): other K rows, refused
        char pc[256];
        snprintf(pc, sizeof pc, "/tmp/kvt_hostile_fp_c_%d.gguf", (int)getpid());
        spec sc = sa;
        sc.rope_base = 500000.0f;
        kvt_model *c = NULL;
        const bool c_ok = write_model(pc, &sc) && !kvt_model_load(pc, false, &c, &err);
        st = c_ok ? load_session(c, sess, &err) : KVT_ERR_IO;
        test_result(c_ok && st == KVT_ERR_INVALID_ARG && strstr(err.msg, "hyperparameters"),
                    "hostile: session from the same weights with another rope base is refused",
                    "status %d '%s'", (int)st, err.msg);
        kvt_model_free(c);
        unlink(pc);
        // a header claiming 2^63 tokens (n_tokens * 4 overflowed after the check failed)
        FILE *f = fopen(sess, "r+b");
        const uint64_t huge = (uint64_t)1 << 63;
        bool patched = f && fseek(f, 64, SEEK_SET) == 0 && fwrite(&huge, 8, 1, f) == 1;
        if (f) fclose(f);
        st = patched ? load_session(a, sess, &err) : KVT_ERR_IO;
        test_result(st == KVT_ERR_FORMAT && strstr(err.msg, "implausible token count"),
                    "hostile: session header with 2^63 tokens refused", "status %d '%s'", (int)st, err.msg);
    }
    kvt_model_free(a);
    kvt_model_free(b);
    unlink(pa);
    unlink(pb);
    unlink(sess);
}

static void test_nan(void) {
    char path[256];
    tmp_model(path, sizeof path, "nan");
    spec sp = {0};
    sp.nan_layer = 1;
    kvt_model *m = NULL;
    kvt_err err = {0};
    if (!write_model(path, &sp) || kvt_model_load(path, false, &m, &err)) {
        test_result(false, "hostile: NaN weights", "set-up: %s", err.msg);
        unlink(path);
        return;
    }
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    kvt_context *ctx = NULL;
    int32_t prompt[4] = {1, 4, 8, 15}, ids[4];
    kvt_generate_params gp = kvt_generate_params_default();
    gp.n_predict = 4;
    gp.sampling.temp = 0.0f;
    kvt_generate_stats stats;
    kvt_status st = kvt_context_init(m, &cp, &ctx, &err);
    if (!st) st = kvt_generate(ctx, NULL, prompt, 4, &gp, ids, NULL, NULL, NULL, &stats, &err);
    test_result(st == KVT_ERR_FORMAT && strstr(err.msg, "blk.1.ffn_down.weight") && strstr(err.msg, "layer 1") &&
                    strstr(err.msg, "row 5, column 7"),
                "hostile: generate refuses NaN logits, naming the tensor and layer", "status %d '%s'", (int)st, err.msg);
    int32_t text[64];
    for (int i = 0; i < 64; i++) text[i] = 3 + (i * 7) % (V - 3);
    kvt_ppl_result res;
    st = kvt_perplexity(ctx, text, 64, 32, 1, 0, NULL, NULL, &res, &err);
    test_result(st == KVT_ERR_FORMAT && strstr(err.msg, "blk.1.ffn_down.weight"),
                "hostile: perplexity refuses NaN logits, naming the tensor", "status %d '%s' (ppl %g)", (int)st, err.msg,
                res.ppl);
    kvt_context_free(ctx);
    kvt_model_free(m);
    unlink(path);
    const float ok_vals[3] = {1.0f, -2.0f, 3e38f}, bad_vals[3] = {1.0f, INFINITY, 0.0f};
    test_result(kvt_all_finite(ok_vals, 3) && !kvt_all_finite(bad_vals, 3) && !kvt_all_finite((float[]){-NAN}, 1),
                "hostile: kvt_all_finite tells NaN and infinities from finite values", "wrong answer");
}

// Fingerprint cost on the real model (measured, printed; the case checks it is computed once).
static void test_fingerprint_cost(const test_env *env) {
    if (!test_file_exists(env->smollm2)) {
        test_skip("hostile: model fingerprint over every weight byte of SmolLM2", "SmolLM2 not in cache: run `make model`");
        return;
    }
    kvt_model *m = NULL;
    kvt_err err;
    if (kvt_model_load(env->smollm2, false, &m, &err)) {
        test_result(false, "hostile: model fingerprint over every weight byte of SmolLM2", "%s", err.msg);
        return;
    }
    double t0 = kvt_time_ms();
    const uint32_t f1 = kvt_session_model_fingerprint(m);
    const double t1 = kvt_time_ms();
    const uint32_t f2 = kvt_session_model_fingerprint(m);
    const double t2 = kvt_time_ms();
    printf("#   fingerprint of %.1f MB of weights: %.1f ms first call, %.3f ms cached\n", (double)m->weight_bytes / 1e6,
           t1 - t0, t2 - t1);
    test_result(f1 == f2, "hostile: model fingerprint over every weight byte of SmolLM2, cached", "0x%08x vs 0x%08x", f1, f2);
    kvt_model_free(m);
}

// Random bytes (invalid UTF-8, NULs, control-token fragments) through the SentencePiece and BPE
// tokenizers of the test vocabularies (tests/data, then the shared folder): every id in range, detokenizing never fails (the fuzz
// targets do the same for longer; this keeps a quick version in the suite).
static void test_tokenizer_bytes(const test_env *env) {
    static const char *vocabs[] = {"llama-spm", "qwen2"};
    for (int v = 0; v < 2; v++) {
        char path[1024], file[128], name[128];
        snprintf(file, sizeof file, "ggml-vocab-%s.gguf", vocabs[v]);
        snprintf(name, sizeof name, "hostile: random bytes through the %s tokenizer", vocabs[v]);
        kvt_gguf *g;
        kvt_tokenizer *t = NULL;
        kvt_err err;
        if (!test_data(env, file, path, sizeof path)) {
            test_skip(name, test_data_missing(env, file));
            continue;
        }
        kvt_status st = kvt_gguf_open(path, &g, &err);
        if (!st) {
            st = kvt_tokenizer_init(g, &t, &err);
            kvt_gguf_free(g);
        }
        if (st) {
            test_result(false, name, "%s", err.msg);
            continue;
        }
        static const char *frag[] = {"<s>", "</s>", "<|im_start|>", "\xe2\x96\x81", " ", "\n", "'s", "\xf0\x9f"};
        uint64_t s = 7 + (uint64_t)v;
        int64_t bad = 0;
        const int n_cases = env->quick ? 200 : 1000;
        for (int c = 0; c < n_cases && !bad; c++) {
            char text[96];
            size_t len = 0;
            while (len < sizeof text - 16) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                if ((s >> 60) < 3) { // a fragment
                    const char *f = frag[(s >> 40) % 8];
                    memcpy(text + len, f, strlen(f));
                    len += strlen(f);
                } else {
                    text[len++] = (char)(s >> 33);
                }
                if ((s >> 20) % 16 == 0) break;
            }
            int32_t ids[256];
            const int64_t n = kvt_tokenize(t, text, len, c & 1, c & 2, ids, 256, &err);
            for (int64_t i = 0; i < n && i < 256; i++) bad += ids[i] < 0 || ids[i] >= kvt_tokenizer_n_vocab(t);
            char out[2048];
            if (n < 0 || n > 256 || kvt_detokenize_ex(t, ids, n, out, sizeof out, c & 1, c & 2) < 0) bad++;
        }
        test_result(bad == 0, name, "%lld bad result(s)", (long long)bad);
        kvt_tokenizer_free(t);
    }
}

// ---- llama-perplexity's base log-probability file (--kl-divergence-base / --kl-divergence) ----

static bool write_bytes(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(b, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static void le32_at(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

// opens bytes [0, n) of `file` written to `path`; the status and message
static kvt_status open_kld(const char *path, const uint8_t *file, size_t n, int32_t vocab, kvt_err *err) {
    if (!write_bytes(path, file, n)) return kvt_errorf(err, KVT_ERR_IO, "cannot write %s", path);
    kvt_kld_base *b = NULL;
    kvt_status st = kvt_kld_base_open(path, vocab, &b, err);
    if (!st) { // every row read too: the checks of the row reader
        uint16_t *w = malloc((size_t)kvt_kld_row_words(kvt_kld_base_n_vocab(b)) * 2);
        for (int64_t c = 0; !st && c < kvt_kld_base_n_chunk(b); c++) {
            for (int64_t r = 0; !st && r < kvt_kld_base_n_ctx(b) - 1 - kvt_kld_base_n_ctx(b) / 2; r++) {
                st = kvt_kld_base_row(b, c, r, w, err);
            }
        }
        free(w);
    }
    kvt_kld_base_close(b);
    return st;
}

static void test_kld_file(void) {
    enum { CTX = 8, VOCAB = 11, CHUNKS = 2, ROWS = CTX - 1 - CTX / 2 };
    char path[64], out[64];
    snprintf(path, sizeof path, "/tmp/kvt_hostile_%d.kld", (int)getpid());
    snprintf(out, sizeof out, "/tmp/kvt_hostile_%d_w.kld", (int)getpid());
    int32_t toks[CTX * CHUNKS];
    for (int i = 0; i < CTX * CHUNKS; i++) toks[i] = (3 * i + 2) % VOCAB;
    float logits[CHUNKS * ROWS][VOCAB];
    for (int r = 0; r < CHUNKS * ROWS; r++) {
        for (int i = 0; i < VOCAB; i++) logits[r][i] = 0.37f * (float)((i * 5 + r) % VOCAB) - (i == 4 ? 40.0f : 0.0f);
    }
    // a valid file through the writer: its size, its layout, and KL 0 against the logits it was written from
    kvt_err err = {0};
    kvt_kld_writer *w = NULL;
    kvt_status st = kvt_kld_writer_open(out, CTX, VOCAB, CHUNKS, toks, &w, &err);
    for (int r = 0; !st && r < CHUNKS * ROWS; r++) st = kvt_kld_writer_row(w, logits[r], &err);
    if (!st) st = kvt_kld_writer_finish(w, true, &err);
    const int64_t row_bytes = kvt_kld_row_words(VOCAB) * 2;
    const size_t size = KVT_KLD_HEADER_BYTES + 4 * CTX * CHUNKS + CHUNKS * ROWS * (size_t)row_bytes;
    uint8_t file[KVT_KLD_HEADER_BYTES + 4 * CTX * CHUNKS + CHUNKS * ROWS * 32 + 64];
    FILE *f = st ? NULL : fopen(out, "rb");
    size_t got = f ? fread(file, 1, sizeof file, f) : 0;
    if (f) fclose(f);
    test_result(!st && row_bytes == 2 * (12 + 4) && got == size && !memcmp(file, "_logits_", 8) && file[8] == CTX &&
                    file[12] == VOCAB && file[16] == CHUNKS && file[20] == toks[0] && file[20 + 4 * 5] == toks[5],
                "hostile: base file written in llama-perplexity's layout (magic, n_ctx, n_vocab, n_chunk, tokens, rows of "
                "2*((n_vocab+1)/2)+4 words)",
                "status %d '%s', %zu bytes of %zu", (int)st, err.msg, got, size);
    {
        kvt_kld_base *b = NULL;
        kvt_kld_stats ks;
        uint16_t words[16];
        st = kvt_kld_base_open(out, VOCAB, &b, &err);
        if (!st) st = kvt_kld_stats_init(&ks, CHUNKS * ROWS, &err);
        for (int c = 0; !st && c < CHUNKS; c++) {
            for (int r = 0; !st && r < ROWS; r++) {
                if (!(st = kvt_kld_base_row(b, c, r, words, &err))) {
                    kvt_kld_stats_add(&ks, logits[c * ROWS + r], words, VOCAB, toks[c * CTX + CTX / 2 + r + 1]);
                }
            }
        }
        kvt_kld_summary sum = {0};
        if (!st) {
            kvt_kld_summarize(&ks, &sum);
            kvt_kld_stats_free(&ks);
        }
        kvt_kld_base_close(b);
        test_result(!st && sum.count == CHUNKS * ROWS && fabs(sum.kld.val) < 1e-3 && sum.same_top.val == 1.0 &&
                        fabs(sum.ppl.val / sum.ppl_base.val - 1) < 1e-3 && fabs(sum.p_diff_q[0]) < 1e-3,
                    "hostile: a base file read back against the logits it holds: KL 0, same top 100%, PPL(Q) = PPL(base)",
                    "status %d '%s': count %lld, KL %g, same top %g, PPL %g / %g", (int)st, err.msg, (long long)sum.count,
                    sum.kld.val, sum.same_top.val, sum.ppl.val, sum.ppl_base.val);
    }
    // hostile variants of that file: each refused with the field and its offset named, never a crash
    uint8_t bad[sizeof file];
    const struct {
        const char *name;
        size_t len;     // bytes of the variant kept
        int at, value;  // an int32 put at `at` (at < 0: none)
        int32_t vocab;  // the model's vocabulary
        kvt_status want;
        const char *msg;
    } cases[] = {
        {"empty file", 0, -1, 0, VOCAB, KVT_ERR_FORMAT, "truncated: magic at offset 0"},
        {"6 bytes", 6, -1, 0, VOCAB, KVT_ERR_FORMAT, "truncated: magic at offset 0"},
        {"header cut in n_ctx", 10, -1, 0, VOCAB, KVT_ERR_FORMAT, "truncated: n_ctx at offset 8"},
        {"header cut in n_chunk", 18, -1, 0, VOCAB, KVT_ERR_FORMAT, "truncated: n_chunk at offset 16"},
        {"wrong magic", size, 0, 0x6f676f6c, VOCAB, KVT_ERR_FORMAT, "magic at offset 0 is"},
        {"n_ctx 3", size, 8, 3, VOCAB, KVT_ERR_FORMAT, "n_ctx at offset 8 is 3"},
        {"n_ctx negative", size, 8, -8, VOCAB, KVT_ERR_FORMAT, "n_ctx at offset 8 is -8"},
        {"n_vocab 0", size, 12, 0, VOCAB, KVT_ERR_FORMAT, "n_vocab at offset 12 is 0"},
        {"another vocabulary", size, -1, 0, 32000, KVT_ERR_INVALID_ARG,
         "n_vocab at offset 12 is 11; the model's vocabulary has 32000"},
        {"n_chunk 0", size, 16, 0, VOCAB, KVT_ERR_FORMAT, "n_chunk at offset 16 is 0"},
        {"n_chunk 2^31-1", size, 16, 0x7fffffff, VOCAB, KVT_ERR_FORMAT, "truncated: tokens at offset 20"},
        {"tokens cut", 40, -1, 0, VOCAB, KVT_ERR_FORMAT, "truncated: tokens at offset 20"},
        {"second chunk's rows cut", size - 3, -1, 0, VOCAB, KVT_ERR_FORMAT,
         "truncated: the log-probabilities of chunk 1 at offset 180"},
        {"n_chunk 3 over 2 chunks", size, 16, 3, VOCAB, KVT_ERR_FORMAT,
         "truncated: the log-probabilities of chunk 1 at offset 212"},
        {"token past the vocabulary", size, 20 + 4 * 9, VOCAB, VOCAB, KVT_ERR_FORMAT, "token 9 at offset 56 is 11"},
        {"negative token", size, 20 + 4 * 3, -1, VOCAB, KVT_ERR_FORMAT, "token 3 at offset 32 is -1"},
        {"NaN scale", size, 84 + 32 * 2, 0x7fc00000, VOCAB, KVT_ERR_FORMAT, "scale at offset 148 (chunk 0, row 2) is nan"},
        {"negative scale", size, 84, (int)0xbf800000, VOCAB, KVT_ERR_FORMAT, "scale at offset 84 (chunk 0, row 0) is -1"},
        {"infinite min_log_prob", size, 84 + 32 * 4 + 4, (int)0xff800000, VOCAB, KVT_ERR_FORMAT,
         "min_log_prob at offset 216 (chunk 1, row 1) is -inf"},
        {"trailing bytes", size + 5, -1, 0, VOCAB, KVT_ERR_FORMAT, "5 bytes past the last chunk's log-probabilities, at offset 276"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(bad, 0, sizeof bad);
        memcpy(bad, file, size);
        if (cases[i].at >= 0) le32_at(bad + cases[i].at, (uint32_t)cases[i].value);
        memset(&err, 0, sizeof err);
        st = open_kld(path, bad, cases[i].len, cases[i].vocab, &err);
        char name[160];
        snprintf(name, sizeof name, "hostile: base file (--kl-divergence), %s: refused naming the file, field and offset",
                 cases[i].name);
        test_result(st == cases[i].want && strstr(err.msg, path) && strstr(err.msg, cases[i].msg), name,
                    "status %d '%s' (want '%s')", (int)st, err.msg, cases[i].msg);
    }
    st = open_kld(path, file, size, VOCAB, &err);
    test_result(st == KVT_OK, "hostile: base file, the unmodified file opens and reads", "status %d '%s'", (int)st, err.msg);
    // a writer stopped half way leaves no file behind (nor its .tmp)
    unlink(out);
    st = kvt_kld_writer_open(out, CTX, VOCAB, CHUNKS, toks, &w, &err);
    if (!st) st = kvt_kld_writer_row(w, logits[0], &err);
    kvt_status st2 = st ? st : kvt_kld_writer_finish(w, true, &err);
    char tmp[80];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    test_result(!st && st2 == KVT_ERR_INVALID_ARG && strstr(err.msg, "rows short") && access(out, F_OK) != 0 &&
                    access(tmp, F_OK) != 0,
                "hostile: base file writer short of its rows refuses and leaves no file", "status %d/%d '%s'", (int)st, (int)st2,
                err.msg);
    unlink(path);
    unlink(out);
}

void test_hostile(const test_env *env) {
    test_kld_file();
    test_tokenizer_bytes(env);
    test_inconsistent();
    test_fingerprint_and_session();
    test_nan();
    test_fingerprint_cost(env);
}
