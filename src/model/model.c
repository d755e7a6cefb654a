// model.c - read hyperparameters and map weights of llama / qwen2 / qwen3 / gemma3 GGUFs.
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../kernels/f16.h"
#include "../kernels/quant.h"

static const char *k_arch_names[KVT_ARCH_COUNT] = {"llama", "qwen2", "qwen3", "gemma3"};

const char *kvt_arch_name(kvt_arch a) { return (unsigned)a < KVT_ARCH_COUNT ? k_arch_names[a] : "?"; }

// Reads "<arch>.<suffix>" as a positive int32; `required` turns absence into an error.
static kvt_status get_arch_i32(const kvt_gguf *g, const char *arch, const char *suffix, bool required, int32_t *out,
                               kvt_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    kvt_status st = kvt_gguf_get_i64(g, key, &v, err);
    if (st == KVT_ERR_NOT_FOUND) {
        if (!required) return KVT_OK;
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: missing metadata '%s'", kvt_gguf_path(g), key);
    }
    if (st) return st;
    if (v <= 0 || v > (1 << 30)) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: metadata '%s' = %lld out of range", kvt_gguf_path(g), key, (long long)v);
    }
    *out = (int32_t)v;
    return KVT_OK;
}

static kvt_status get_arch_f32(const kvt_gguf *g, const char *arch, const char *suffix, float *out, kvt_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    kvt_status st = kvt_gguf_get_f32(g, key, out, err);
    return st == KVT_ERR_NOT_FOUND ? KVT_OK : st;
}

// The gemma3 specifics (llama.cpp's reading of the same keys): GeGLU, embeddings scaled by sqrt(n_embd),
// sliding-window layers (every swa_period-th layer global, the default period 6) whose rope base is
// rope.freq_base_swa (10000 unless given) with no rope scaling, optional final logit soft-capping.
static kvt_status gemma3_hparams(const kvt_gguf *g, kvt_hparams *hp, kvt_err *err) {
    const char *an = k_arch_names[KVT_ARCH_GEMMA3];
    hp->ffn_act = KVT_FFN_GEGLU;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    // Gemma 3 27B scales queries by 1/sqrt(n_embd / n_head), the others by 1/sqrt(head_dim)
    if (hp->n_layer == 62) hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    hp->swa_period = 6;
    hp->rope_freq_base_swa = 10000.0f;
    hp->rope_freq_scale_swa = 1.0f;
    kvt_status st;
    if ((st = get_arch_i32(g, an, "attention.sliding_window", false, &hp->n_swa, err)) ||
        (st = get_arch_i32(g, an, "attention.sliding_window_pattern", false, &hp->swa_period, err)) ||
        (st = get_arch_f32(g, an, "rope.freq_base_swa", &hp->rope_freq_base_swa, err)) ||
        (st = get_arch_f32(g, an, "final_logit_softcapping", &hp->logit_softcap, err))) {
        return st;
    }
    if (!(hp->rope_freq_base_swa > 0.0f) || !isfinite(hp->rope_freq_base_swa) || !(hp->logit_softcap >= 0.0f) ||
        !isfinite(hp->logit_softcap)) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: %s.rope.freq_base_swa or final_logit_softcapping out of range",
                          kvt_gguf_path(g), an);
    }
    return KVT_OK;
}

// Refuses tensors of layers past block_count ("blk.N." with N >= n_layer): the file is inconsistent and
// running only the first n_layer layers would give another model's output.
static kvt_status check_layers(const kvt_gguf *g, const char *arch, int32_t n_layer, kvt_err *err) {
    for (int64_t i = 0; i < kvt_gguf_n_tensors(g); i++) {
        const kvt_str nm = kvt_gguf_tensor_at(g, i)->name;
        if (nm.len < 5 || memcmp(nm.ptr, "blk.", 4) != 0) continue;
        int64_t il = 0;
        uint64_t k = 4;
        while (k < nm.len && k < 14 && nm.ptr[k] >= '0' && nm.ptr[k] <= '9') il = il * 10 + (nm.ptr[k++] - '0');
        if (k > 4 && il >= n_layer) {
            return kvt_errorf(err, KVT_ERR_FORMAT, "%s: metadata '%s.block_count' = %d, but tensor '%.*s' belongs to layer %lld",
                              kvt_gguf_path(g), arch, n_layer, (int)(nm.len > 96 ? 96 : nm.len), nm.ptr, (long long)il);
        }
    }
    return KVT_OK;
}

int32_t kvt_hparams_layer_window(const kvt_hparams *hp, int32_t il) {
    if (hp->n_swa <= 0 || hp->swa_period <= 0) return 0;
    return il % hp->swa_period < hp->swa_period - 1 ? hp->n_swa : 0;
}

kvt_status kvt_hparams_read(const kvt_gguf *g, kvt_hparams *hp, kvt_err *err) {
    memset(hp, 0, sizeof *hp);
    const char *path = kvt_gguf_path(g);
    kvt_str a;
    if (kvt_gguf_get_str(g, "general.architecture", &a, err)) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: missing metadata 'general.architecture'", path);
    }
    int ai = -1;
    for (int i = 0; i < KVT_ARCH_COUNT; i++) {
        if (kvt_str_eq(a, k_arch_names[i])) ai = i;
    }
    if (ai < 0) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "%s: unsupported architecture '%.*s' (kvtier runs llama, qwen2, qwen3, gemma3)",
                          path, (int)(a.len > 64 ? 64 : a.len), a.ptr);
    }
    hp->arch = (kvt_arch)ai;
    const char *an = k_arch_names[ai];
    kvt_status st;
    if ((st = get_arch_i32(g, an, "embedding_length", true, &hp->n_embd, err)) ||
        (st = get_arch_i32(g, an, "block_count", true, &hp->n_layer, err)) ||
        (st = get_arch_i32(g, an, "feed_forward_length", true, &hp->n_ff, err)) ||
        (st = get_arch_i32(g, an, "attention.head_count", true, &hp->n_head, err))) {
        return st;
    }
    hp->n_head_kv = hp->n_head;
    hp->n_ctx_train = 2048;
    if ((st = get_arch_i32(g, an, "attention.head_count_kv", false, &hp->n_head_kv, err)) ||
        (st = get_arch_i32(g, an, "context_length", false, &hp->n_ctx_train, err))) {
        return st;
    }
    if (hp->n_head_kv > hp->n_head || hp->n_head % hp->n_head_kv) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d", path, hp->n_head,
                          hp->n_head_kv);
    }
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((st = get_arch_i32(g, an, "attention.key_length", false, &hp->head_dim, err))) return st;
    hp->head_dim_v = hp->head_dim;
    if ((st = get_arch_i32(g, an, "attention.value_length", false, &hp->head_dim_v, err))) return st;
    if (hp->head_dim_v != hp->head_dim) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "%s: key_length %d != value_length %d is not supported", path,
                          hp->head_dim, hp->head_dim_v);
    }
    // widths the engine multiplies: each must fit in 31 bits, and one token's KV elements in 2^40
    const int64_t q_w = (int64_t)hp->n_head * hp->head_dim, kv_w = (int64_t)hp->n_head_kv * ((int64_t)hp->head_dim + hp->head_dim_v);
    if (q_w > INT32_MAX || kv_w > INT32_MAX || kv_w * hp->n_layer > ((int64_t)1 << 40)) {
        return kvt_errorf(err, KVT_ERR_FORMAT,
                          "%s: metadata '%s.attention.head_count' = %d, '%s.attention.head_count_kv' = %d, "
                          "'%s.attention.key_length' = %d, '%s.block_count' = %d: attention widths too large",
                          path, an, hp->n_head, an, hp->n_head_kv, an, hp->head_dim, an, hp->n_layer);
    }
    hp->n_rot = hp->head_dim;
    if ((st = get_arch_i32(g, an, "rope.dimension_count", false, &hp->n_rot, err))) return st;
    // llama.cpp refuses a partial rotation on llama ("invalid n_rot") and asserts against it on qwen2/qwen3
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 || (hp->arch != KVT_ARCH_GEMMA3 && hp->n_rot != hp->head_dim)) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: rope.dimension_count %d invalid for head_dim %d", path, hp->n_rot,
                          hp->head_dim);
    }
    hp->rope_type = hp->arch == KVT_ARCH_LLAMA ? KVT_ROPE_NORMAL : KVT_ROPE_NEOX;
    hp->rope_freq_base = 10000.0f;
    hp->rope_freq_scale = 1.0f;
    hp->rms_eps = 1e-5f;
    if ((st = get_arch_f32(g, an, "rope.freq_base", &hp->rope_freq_base, err)) ||
        (st = get_arch_f32(g, an, "attention.layer_norm_rms_epsilon", &hp->rms_eps, err))) {
        return st;
    }
    // llama.cpp's reading: the type defaults to linear; the factor is rope.scaling.factor, else the older
    // rope.scale_linear; type none never scales whatever the factor (llama-context.cpp)
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", an);
    kvt_str stype = {"linear", 6};
    st = kvt_gguf_get_str(g, key, &stype, err);
    if (st && st != KVT_ERR_NOT_FOUND) return st;
    const bool scale_none = kvt_str_eq(stype, "none");
    if (!scale_none && !kvt_str_eq(stype, "linear")) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "%s: rope scaling type '%.*s' not supported (none, linear are)", path,
                          (int)(stype.len > 32 ? 32 : stype.len), stype.ptr);
    }
    float factor = 0.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.factor", an);
    const bool have_factor = kvt_gguf_find_key(g, key) >= 0;
    if ((st = get_arch_f32(g, an, have_factor ? "rope.scaling.factor" : "rope.scale_linear", &factor, err))) return st;
    const struct {
        const char *suffix;
        float v;
        bool zero_ok;
    } fl[] = {{"rope.freq_base", hp->rope_freq_base, false},
              {"attention.layer_norm_rms_epsilon", hp->rms_eps, false},
              {have_factor ? "rope.scaling.factor" : "rope.scale_linear", factor, true}};
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) {
        if (!isfinite(fl[i].v) || fl[i].v < 0.0f || (fl[i].v == 0.0f && !fl[i].zero_ok)) {
            return kvt_errorf(err, KVT_ERR_FORMAT, "%s: metadata '%s.%s' = %g: must be a finite positive number", path, an,
                              fl[i].suffix, (double)fl[i].v);
        }
    }
    if (factor > 0.0f && !scale_none) hp->rope_freq_scale = 1.0f / factor;
    hp->ffn_act = KVT_FFN_SWIGLU;
    hp->embd_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    if (hp->arch == KVT_ARCH_GEMMA3 && (st = gemma3_hparams(g, hp, err))) return st;
    // vocabulary size: explicit key, else the token list, else the embedding
    hp->n_vocab = 0;
    if ((st = get_arch_i32(g, an, "vocab_size", false, &hp->n_vocab, err))) return st;
    kvt_gguf_arr toks;
    const bool have_toks = kvt_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, NULL) == KVT_OK;
    if (!hp->n_vocab && have_toks) hp->n_vocab = (int32_t)toks.n;
    const kvt_gguf_tensor *te = kvt_gguf_find_tensor(g, "token_embd.weight");
    if (te) {
        if (te->ne[1] > INT32_MAX) {
            return kvt_errorf(err, KVT_ERR_FORMAT, "%s: token_embd.weight has %lld rows", path, (long long)te->ne[1]);
        }
        hp->n_vocab = (int32_t)te->ne[1];
        // a token id the tokenizer can emit must have an embedding row, and every row a token (llama.cpp refuses both)
        if (have_toks && toks.n != (uint64_t)te->ne[1]) {
            return kvt_errorf(err, KVT_ERR_FORMAT, "%s: metadata 'tokenizer.ggml.tokens' has %llu entries, token_embd.weight %lld rows",
                              path, (unsigned long long)toks.n, (long long)te->ne[1]);
        }
    }
    if (hp->n_vocab <= 0) return kvt_errorf(err, KVT_ERR_FORMAT, "%s: cannot determine vocabulary size", path);
    return check_layers(g, an, hp->n_layer, err);
}

int64_t kvt_hparams_kv_bytes_per_token(const kvt_hparams *hp, kvt_type kv_type) {
    int64_t per_layer = kvt_row_size(kv_type, (int64_t)hp->n_head_kv * hp->head_dim) +
                        kvt_row_size(kv_type, (int64_t)hp->n_head_kv * hp->head_dim_v);
    return per_layer * hp->n_layer;
}

void kvt_hparams_shape_str(const kvt_hparams *hp, char *buf, size_t n) {
    snprintf(buf, n, "%s layers %d embd %d heads %d/%d head_dim %d/%d ff %d vocab %d", kvt_arch_name(hp->arch), hp->n_layer,
             hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->head_dim_v, hp->n_ff, hp->n_vocab);
}

void kvt_model_ftype_name(const kvt_model *m, char *buf, size_t n) {
    uint32_t ftype = UINT32_MAX;
    const bool guessed = kvt_gguf_get_u32(m->gguf, "general.file_type", &ftype, NULL) != KVT_OK;
    if (guessed) { // the most common tensor type, the first of those in type order on a tie
        int64_t count[KVT_TYPE_GGUF_END] = {0}, best = 0;
        for (int64_t i = 0; i < kvt_gguf_n_tensors(m->gguf); i++) {
            const uint32_t t = (uint32_t)kvt_gguf_tensor_at(m->gguf, i)->type;
            if (t < KVT_TYPE_GGUF_END) count[t]++;
        }
        for (uint32_t t = 0; t < KVT_TYPE_GGUF_END; t++) {
            if (count[t] > best) {
                best = count[t];
                ftype = kvt_gguf_ftype_guess(t);
            }
        }
    }
    const char *name = kvt_gguf_ftype_name(ftype);
    snprintf(buf, n, "%s%s", guessed ? "(guessed) " : "", name ? name : "unknown");
}

void kvt_model_desc(const kvt_model *m, char *buf, size_t n) {
    kvt_str size = {"?B", 2};
    kvt_gguf_get_str(m->gguf, "general.size_label", &size, NULL);
    char ftype[64];
    kvt_model_ftype_name(m, ftype, sizeof ftype);
    snprintf(buf, n, "%s %.*s %s", kvt_arch_name(m->hp.arch), (int)(size.len < 32 ? size.len : 32), size.ptr, ftype);
}

typedef struct {
    kvt_model *m;
    kvt_err *err;
    int64_t f32_used, f32_cap;
    bool *used; // per tensor of the file: read by the model
} loader;

static kvt_status find_tensor(loader *L, const char *name, bool required, const kvt_gguf_tensor **out) {
    *out = kvt_gguf_find_tensor(L->m->gguf, name);
    if (*out) L->used[*out - kvt_gguf_tensor_at(L->m->gguf, 0)] = true;
    if (!*out && required) {
        return kvt_errorf(L->err, KVT_ERR_FORMAT, "%s: missing tensor '%s'", kvt_gguf_path(L->m->gguf), name);
    }
    return KVT_OK;
}

// Maps a 2-D weight and checks it is [rows, cols] of a supported type.
static kvt_status load_weight(loader *L, const char *name, int64_t cols, int64_t rows, bool required, kvt_weight *w) {
    const kvt_gguf_tensor *t;
    kvt_status st = find_tensor(L, name, required, &t);
    memset(w, 0, sizeof *w);
    if (st || !t) return st;
    const char *path = kvt_gguf_path(L->m->gguf);
    if (!kvt_type_supported(t->type)) {
        return kvt_errorf(L->err, KVT_ERR_UNSUPPORTED, "%s: unsupported type %s of tensor %s", path, kvt_type_name(t->type),
                          name);
    }
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1) {
        return kvt_errorf(L->err, KVT_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld, %lld], the metadata says [%lld, %lld]", path,
                          name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)cols,
                          (long long)rows);
    }
    w->data = w->file_data = t->data;
    w->type = w->file_type = t->type;
    w->cols = cols;
    w->rows = rows;
    return KVT_OK;
}

// Maps a 1-D vector of n values as f32 (converting F16/BF16 into owned storage).
static kvt_status load_vec(loader *L, const char *name, int64_t n, bool required, const float **out) {
    const kvt_gguf_tensor *t;
    kvt_status st = find_tensor(L, name, required, &t);
    *out = NULL;
    if (st || !t) return st;
    const char *path = kvt_gguf_path(L->m->gguf);
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1) {
        return kvt_errorf(L->err, KVT_ERR_FORMAT, "%s: tensor %s has %lld x %lld elements, expected %lld", path, name,
                          (long long)t->ne[0], (long long)t->ne[1], (long long)n);
    }
    if (t->type == KVT_TYPE_F32) {
        *out = t->data;
        return KVT_OK;
    }
    if (t->type != KVT_TYPE_F16 && t->type != KVT_TYPE_BF16) {
        return kvt_errorf(L->err, KVT_ERR_UNSUPPORTED, "%s: unsupported type %s of tensor %s", path, kvt_type_name(t->type),
                          name);
    }
    if (L->f32_used + n > L->f32_cap) {
        return kvt_errorf(L->err, KVT_ERR_FORMAT, "%s: too many converted vectors", path);
    }
    float *dst = L->m->f32_store + L->f32_used;
    L->f32_used += n;
    const uint8_t *src = t->data;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        dst[i] = t->type == KVT_TYPE_F16 ? kvt_f16_to_f32(h) : kvt_bf16_to_f32(h);
    }
    *out = dst;
    return KVT_OK;
}

static kvt_status load_layer(loader *L, int il, kvt_layer *ly) {
    const kvt_hparams *hp = &L->m->hp;
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, K = (int64_t)hp->n_head_kv * hp->head_dim,
                  V = (int64_t)hp->n_head_kv * hp->head_dim_v;
    char n[96];
    kvt_status st;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    if ((st = load_vec(L, NAME("attn_norm.weight"), E, true, &ly->attn_norm)) ||
        (st = load_weight(L, NAME("attn_q.weight"), E, Q, true, &ly->wq)) ||
        (st = load_weight(L, NAME("attn_k.weight"), E, K, true, &ly->wk)) ||
        (st = load_weight(L, NAME("attn_v.weight"), E, V, true, &ly->wv)) ||
        (st = load_weight(L, NAME("attn_output.weight"), (int64_t)hp->n_head * hp->head_dim_v, E, true, &ly->wo)) ||
        (st = load_vec(L, NAME("ffn_norm.weight"), E, true, &ly->ffn_norm)) ||
        (st = load_weight(L, NAME("ffn_gate.weight"), E, hp->n_ff, true, &ly->w_gate)) ||
        (st = load_weight(L, NAME("ffn_up.weight"), E, hp->n_ff, true, &ly->w_up)) ||
        (st = load_weight(L, NAME("ffn_down.weight"), hp->n_ff, E, true, &ly->w_down))) {
        return st;
    }
    bool biases = hp->arch == KVT_ARCH_QWEN2;
    if ((st = load_vec(L, NAME("attn_q.bias"), Q, biases, &ly->bq)) ||
        (st = load_vec(L, NAME("attn_k.bias"), K, biases, &ly->bk)) ||
        (st = load_vec(L, NAME("attn_v.bias"), V, biases, &ly->bv))) {
        return st;
    }
    bool qk_norm = hp->arch == KVT_ARCH_QWEN3 || hp->arch == KVT_ARCH_GEMMA3;
    bool post_norms = hp->arch == KVT_ARCH_GEMMA3;
    // only the architectures that have them read these (llama.cpp refuses them elsewhere: unused tensors)
    if (post_norms && ((st = load_vec(L, NAME("post_attention_norm.weight"), E, true, &ly->post_attn_norm)) ||
                       (st = load_vec(L, NAME("post_ffw_norm.weight"), E, true, &ly->post_ffn_norm)))) {
        return st;
    }
    ly->window = kvt_hparams_layer_window(hp, il);
    ly->rope_local = ly->window > 0;
    if (qk_norm && ((st = load_vec(L, NAME("attn_q_norm.weight"), hp->head_dim, true, &ly->q_norm)) ||
                    (st = load_vec(L, NAME("attn_k_norm.weight"), hp->head_dim, true, &ly->k_norm)))) {
        return st;
    }
#undef NAME
    return KVT_OK;
}

// The matrices the CPU kernels read faster in another layout (quant.h: kvt_type_repack), repacked into one
// anonymous mapping (huge pages where the kernel gives them); the file's pages of the originals are then
// released (MADV_DONTNEED: they stay readable in the mapping, for the GPU upload and the fingerprint, and
// are read again from the page cache only then). Nothing repacked with KVT_REPACK=0 or when memory is short.
// A tied output matrix is repacked only if its repacking reads rows back (row_to_float: q8_0_x8): token_embd then
// points at the same repacked copy. The other matrices of a mapped file (F16, Q6_K, ..., a tied output whose
// repacking cannot read rows back) are copied there as they are (KVT_HUGE_COPY=0: not): the GEMVs then read
// every weight through huge pages (fewer TLB misses than the file's 4 KiB pages).
// pack 0: only the size (m->repack_bytes); pack 1: the repacking (kvt_model_repack, under m->repack_lock).
static void model_repack(kvt_model *m, int pack) {
    const char *env = getenv("KVT_REPACK");
    if (env && !strcmp(env, "0")) return;
    const char *hc = getenv("KVT_HUGE_COPY");
    const bool copy = !(hc && !strcmp(hc, "0")) && kvt_gguf_is_mapped(m->gguf);
    int64_t total = 0;
    for (int pass = 0; pass < 1 + pack; pass++) {
        int64_t off = 0;
        for (int32_t il = -1; il < m->hp.n_layer; il++) {
            kvt_layer *L = il >= 0 ? &m->layers[il] : NULL;
            kvt_weight *ws[] = {L ? &L->wq : &m->output, L ? &L->wk : NULL, L ? &L->wv : NULL,
                                L ? &L->wo : NULL, L ? &L->w_gate : NULL, L ? &L->w_up : NULL, L ? &L->w_down : NULL};
            for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) {
                kvt_weight *w = ws[k];
                const kvt_repack_ops *rp = w && w->data ? kvt_type_repack(w->type) : NULL;
                // a tied output (token_embd) repacked only where its repacking can read a row back for the embedding
                // lookup; else copied as it is
                if (rp && w == &m->output && m->tied_output && !rp->row_to_float) rp = NULL;
                if (rp && rp->col_align > 1 && w->cols % rp->col_align) rp = NULL; // copied as it is
                const int64_t rs = w && w->data ? kvt_row_size(w->type, w->cols) : -1;
                if (rs <= 0 || (rp && w->rows % rp->row_align)) continue;
                if (!rp && (!copy || w->data != w->file_data)) continue;
                const int64_t bytes = rs * w->rows;
                if (pass == 1) {
                    void *dst = (char *)m->repack_buf + off;
                    if (rp) rp->pack(w->data, dst, w->rows, w->cols);
                    else memcpy(dst, w->data, (size_t)bytes); // the same layout, on huge pages
                    if (kvt_gguf_is_mapped(m->gguf)) {
                        const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)w->data;
                        const uintptr_t s = (a + pg - 1) / pg * pg, e = (a + (uintptr_t)bytes) / pg * pg;
                        if (e > s) madvise((void *)s, e - s, MADV_DONTNEED);
                    }
                    w->data = dst;
                    if (rp) w->type = rp->to;
                    if (w == &m->output && m->tied_output) { // the embedding lookup reads it (kvt_matrix_row_to_float)
                        m->tok_embd.data = dst;
                        m->tok_embd.type = w->type;
                    }
                }
                off += (bytes + 63) & ~(int64_t)63;
            }
        }
        if (pass == 0) {
            total = off;
            m->repack_bytes = total;
            if (!total || !pack) return;
            void *buf = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (buf == MAP_FAILED) return;
            madvise(buf, (size_t)total, MADV_HUGEPAGE);
            m->repack_buf = buf;
        }
    }
    mprotect(m->repack_buf, (size_t)total, PROT_READ);
}

void kvt_model_repack(const kvt_model *cm) {
    kvt_model *m = (kvt_model *)cm; // allocated by kvt_model_init, never const itself
    if (atomic_load(&m->repack_done)) return;
    pthread_mutex_lock(&m->repack_lock);
    if (!atomic_load(&m->repack_done) && m->layers) {
        model_repack(m, 1);
        atomic_store(&m->repack_done, 1);
    }
    pthread_mutex_unlock(&m->repack_lock);
}

kvt_status kvt_model_init(kvt_gguf *g, bool vocab_only, kvt_model **out, kvt_err *err) {
    *out = NULL;
    kvt_model *m = calloc(1, sizeof *m);
    if (!m) {
        kvt_gguf_free(g);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    }
    m->gguf = g;
    pthread_mutex_init(&m->repack_lock, NULL);
    kvt_status st = kvt_hparams_read(g, &m->hp, err);
    if (st || vocab_only) {
        if (st) kvt_model_free(m);
        else *out = m;
        return st;
    }
    const kvt_hparams *hp = &m->hp;
    // room for every norm/bias vector converted to f32: the 1-D F16/BF16 tensors of the file (bounded
    // by its size whatever the hyperparameters say)
    int64_t cap = 0;
    for (int64_t i = 0; i < kvt_gguf_n_tensors(g); i++) {
        const kvt_gguf_tensor *t = kvt_gguf_tensor_at(g, i);
        if ((t->type == KVT_TYPE_F16 || t->type == KVT_TYPE_BF16) && t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1) {
            cap += t->ne[0];
        }
    }
    m->f32_store = malloc((size_t)(cap > 0 ? cap : 1) * sizeof(float));
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    bool *used = calloc((size_t)kvt_gguf_n_tensors(g) + 1, sizeof *used);
    if (!m->f32_store || !m->layers || !used) {
        free(used);
        kvt_model_free(m);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for model tables");
    }
    loader L = {m, err, 0, cap, used};
    if ((st = load_weight(&L, "token_embd.weight", hp->n_embd, hp->n_vocab, true, &m->tok_embd)) ||
        (st = load_vec(&L, "output_norm.weight", hp->n_embd, true, &m->output_norm)) ||
        (st = load_weight(&L, "output.weight", hp->n_embd, hp->n_vocab, false, &m->output)) ||
        (hp->arch == KVT_ARCH_LLAMA && (st = load_vec(&L, "rope_freqs.weight", hp->n_rot / 2, false, &m->rope_freqs)))) {
        free(used);
        kvt_model_free(m);
        return st;
    }
    if (!m->output.data) {
        m->output = m->tok_embd;
        m->tied_output = true;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        if ((st = load_layer(&L, il, &m->layers[il]))) {
            free(used);
            kvt_model_free(m);
            return st;
        }
    }
    // a tensor the model does not read (an attention-output or FFN bias, a MoE router, a classifier head, ...):
    // llama.cpp applies it or refuses the file ("wrong number of tensors"); running without it would be
    // another model's output
    for (int64_t i = 0; i < kvt_gguf_n_tensors(g); i++) {
        if (used[i]) continue;
        const kvt_str nm = kvt_gguf_tensor_at(g, i)->name;
        int64_t n_unused = 0;
        for (int64_t j = 0; j < kvt_gguf_n_tensors(g); j++) n_unused += !used[j];
        st = kvt_errorf(err, KVT_ERR_UNSUPPORTED,
                        "%s: tensor '%.*s' is not part of a %s model as kvtier runs it (%lld of the file's %lld tensors unused; "
                        "llama.cpp would apply it or refuse the file)",
                        kvt_gguf_path(g), (int)(nm.len > 96 ? 96 : nm.len), nm.ptr, kvt_arch_name(hp->arch),
                        (long long)n_unused, (long long)kvt_gguf_n_tensors(g));
        free(used);
        kvt_model_free(m);
        return st;
    }
    free(used);
    for (int64_t i = 0; i < kvt_gguf_n_tensors(g); i++) {
        const kvt_gguf_tensor *t = kvt_gguf_tensor_at(g, i);
        m->weight_bytes += (int64_t)t->size;
        m->n_params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    }
    model_repack(m, 0); // the size only: the repacking waits for the first context (kvt_model_repack)
    *out = m;
    return KVT_OK;
}

kvt_status kvt_model_load(const char *path, bool vocab_only, kvt_model **out, kvt_err *err) {
    kvt_gguf *g;
    kvt_status st = kvt_gguf_open(path, &g, err);
    if (st) return st;
    return kvt_model_init(g, vocab_only, out, err);
}

void kvt_model_free(kvt_model *m) {
    if (!m) return;
    kvt_gguf_free(m->gguf);
    if (m->repack_buf) munmap(m->repack_buf, (size_t)m->repack_bytes);
    pthread_mutex_destroy(&m->repack_lock);
    free(m->f32_store);
    free(m->layers);
    free(m);
}
