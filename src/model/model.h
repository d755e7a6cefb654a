// model.h - hyperparameters and weight views of a GGUF model.
//
// A kvt_model maps the GGUF file (weights are used in place, never copied,
// except small norm/bias vectors converted to f32) and knows the shapes of
// every architecture kvtier runs: llama (Llama 1/2/3, Mistral, SmolLM),
// qwen2 (q/k/v biases), qwen3 (per-head q/k RMS norm, free head_dim) and
// gemma3 (GELU-gated FFN, post-attention/post-FFN norms, embedding scaled by
// sqrt(n_embd), per-layer sliding-window attention with its own rope base,
// optional final logit soft-capping). The differences are data in
// kvt_hparams / kvt_layer: the forward pass is one for all.
#ifndef KVT_MODEL_H
#define KVT_MODEL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "../gguf/gguf.h"
#include "../kernels/dtype.h"

typedef enum { KVT_ARCH_LLAMA, KVT_ARCH_QWEN2, KVT_ARCH_QWEN3, KVT_ARCH_GEMMA3, KVT_ARCH_COUNT } kvt_arch;
typedef enum { KVT_ROPE_NORMAL, KVT_ROPE_NEOX } kvt_rope_type;
// Activation of the gated FFN: silu(gate) * up (SwiGLU) or gelu_tanh(gate) * up (GeGLU, gemma3).
typedef enum { KVT_FFN_SWIGLU, KVT_FFN_GEGLU } kvt_ffn_act;

const char *kvt_arch_name(kvt_arch a);

typedef struct {
    kvt_arch arch;
    int32_t n_vocab;
    int32_t n_embd;     // residual width
    int32_t n_layer;
    int32_t n_head;     // query heads
    int32_t n_head_kv;  // key/value heads (GQA: n_head % n_head_kv == 0)
    int32_t head_dim;   // per-head q/k width (qwen3: may differ from n_embd/n_head)
    int32_t head_dim_v; // per-head v width
    int32_t n_ff;
    int32_t n_ctx_train;
    int32_t n_rot;      // rotated dims per head (<= head_dim)
    kvt_rope_type rope_type;
    float rope_freq_base;
    float rope_freq_scale; // 1 / linear scaling factor
    float rms_eps;
    kvt_ffn_act ffn_act;
    float embd_scale;      // token embeddings are multiplied by this (gemma3: sqrt(n_embd); else 1)
    float attn_scale;      // query scale of attention (1/sqrt(head_dim) unless the architecture says otherwise)
    float logit_softcap;   // > 0: logits = softcap * tanh(logits / softcap); 0: none
    // sliding-window attention (gemma3): a local layer attends the last n_swa positions (its own included)
    int32_t n_swa;         // 0: every layer global
    int32_t swa_period;    // layer il is local iff il % swa_period < swa_period - 1 (every period-th global)
    float rope_freq_base_swa;  // rope base and scale of the local layers
    float rope_freq_scale_swa;
} kvt_hparams;

// Attention window of layer il in positions (0: the whole context).
int32_t kvt_hparams_layer_window(const kvt_hparams *hp, int32_t il);

// A 2-D weight used in place: [rows, cols] of `type`, rows packed, where
// cols = GGUF ne[0] (input width) and rows = ne[1] (output width).
// data/type are what the CPU kernels read: the file's bytes, or a repacked copy (kvt_model_repack, called by
// kvt_context_init, repacks the layer and output matrices whose type has a kvt_type_repack, e.g. q4_K ->
// q4_K_x8, unless KVT_REPACK=0; a tied output only if its repacking has row_to_float, and then token_embd reads
// the repacked copy too: kvt_matrix_row_to_float); file_data/file_type are always the GGUF's (the GPU uploads those).
typedef struct {
    const void *data;
    kvt_type type;
    int64_t cols;
    int64_t rows;
    const void *file_data; // NULL in a weight not loaded from a file: then data/type
    kvt_type file_type;
} kvt_weight;
static inline const void *kvt_weight_file_data(const kvt_weight *w) { return w->file_data ? w->file_data : w->data; }
static inline kvt_type kvt_weight_file_type(const kvt_weight *w) { return w->file_data ? w->file_type : w->type; }

typedef struct {
    const float *attn_norm;                 // [n_embd] f32
    kvt_weight wq, wk, wv, wo;              // [n_head*hd, n_embd], [n_kv*hd, n_embd], .., [n_embd, n_head*hd_v]
    const float *bq, *bk, *bv;              // qwen2 biases or NULL
    const float *q_norm, *k_norm;           // qwen3: [head_dim] f32 or NULL
    const float *post_attn_norm;            // gemma3: [n_embd] f32 norm of the attention output, or NULL
    const float *ffn_norm;                  // [n_embd] f32
    const float *post_ffn_norm;             // gemma3: [n_embd] f32 norm of the FFN output, or NULL
    kvt_weight w_gate, w_up, w_down;        // [n_ff, n_embd], [n_ff, n_embd], [n_embd, n_ff]
    int32_t window;                         // attention window in positions (0: whole context)
    bool rope_local;                        // rope with the local-layer base (rope_freq_base_swa)
} kvt_layer;

typedef struct kvt_model {
    kvt_gguf *gguf;      // owns the mapping
    kvt_hparams hp;
    kvt_weight tok_embd; // [n_vocab, n_embd]
    const float *output_norm;
    kvt_weight output;   // [n_vocab, n_embd] (tied: same data as tok_embd)
    bool tied_output;
    const float *rope_freqs; // [n_rot/2] frequency divisors (llama3.1) or NULL
    kvt_layer *layers;   // [n_layer]
    float *f32_store;    // owned storage for norms/biases converted to f32
    int64_t weight_bytes;
    int64_t n_params;
    void *repack_buf;     // owned anonymous mapping of the repacked matrices (the file's pages of those are released)
    int64_t repack_bytes; // its size (0: nothing to repack), known at init; resident in place of those file pages
    _Atomic int repack_done; // kvt_model_repack has run (repack_buf set if anything was repacked)
    pthread_mutex_t repack_lock; // serializes kvt_model_repack's first call
    _Atomic uint64_t identity_cache; // 0, or 1 << 32 | the CRC32C of kvt_session_model_fingerprint (computed once)
} kvt_model;

// Loads hyperparameters and weight views from an open GGUF (takes ownership
// of g on success and on failure). vocab_only: check metadata only, no weights.
kvt_status kvt_model_init(kvt_gguf *g, bool vocab_only, kvt_model **out, kvt_err *err);
// Opens and loads a file.
kvt_status kvt_model_load(const char *path, bool vocab_only, kvt_model **out, kvt_err *err);
void kvt_model_free(kvt_model *m);
// Repacks the matrices the CPU kernels read faster in another layout (model.c: model_repack; repack_bytes of
// them), once: kvt_context_init calls it, so commands that only read metadata (info, tokenize) never pay for it.
// Thread-safe against itself; the model's weights must not be in use by another thread on the first call.
void kvt_model_repack(const kvt_model *m);

// The model's description as llama-bench prints it, one line into buf (n bytes, NUL-terminated, truncated to fit):
// "arch size ftype", e.g. "gemma3 270M Q4_K - Medium": size from `general.size_label` ("?B" without it), the file
// type's name from `general.file_type`, or "(guessed) NAME" from the most common tensor type where the file lacks
// it (llama.cpp's rule).
void kvt_model_desc(const kvt_model *m, char *buf, size_t n);
// The file type's part of it, as llama.cpp's llama_ftype_name: "Q4_K - Medium", "(guessed) Q8_0", "unknown".
void kvt_model_ftype_name(const kvt_model *m, char *buf, size_t n);

// Reads only hyperparameters (no tensors validated); for `plan` and `info`.
kvt_status kvt_hparams_read(const kvt_gguf *g, kvt_hparams *hp, kvt_err *err);

// Bytes of K+V per token for a KV element type (all layers).
int64_t kvt_hparams_kv_bytes_per_token(const kvt_hparams *hp, kvt_type kv_type);

// The shape that identifies a model for settings made for it (a plan file), one line into buf (n bytes,
// NUL-terminated, truncated to fit): "llama layers 30 embd 576 heads 9/3 head_dim 64/64 ff 1536 vocab 49152".
void kvt_hparams_shape_str(const kvt_hparams *hp, char *buf, size_t n);

#endif
