// shapes.h - a table of well-known model shapes (hyperparameters only).
//
// Used by `kvtier mkmodel` to synthesize random-weight GGUFs of real sizes
// and by planning code that needs the dimensions of models it does not have
// on disk. Values come from each model's published config.json (Hugging Face);
// the source of every entry is noted next to it in shapes.c.
#ifndef KVT_SHAPES_H
#define KVT_SHAPES_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

typedef struct {
    const char *name;     // lookup key, e.g. "tinyllama-1.1b"
    kvt_arch arch;
    int32_t n_vocab;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;     // per-head q/k/v width
    int32_t n_ff;
    int32_t n_ctx_train;
    float rope_freq_base;
    float rms_eps;
    bool tied_output;     // output projection shares token_embd
    bool qk_norm;         // per-head q/k RMS norm (qwen3)
    bool qkv_bias;        // q/k/v projection biases (qwen2)
    const char *note;     // one line: what the entry is for / caveats
} kvt_shape;

// Entry by name (case-insensitive), or NULL.
const kvt_shape *kvt_shape_find(const char *name);
int kvt_shape_count(void);
// i-th entry (0 <= i < kvt_shape_count()), or NULL.
const kvt_shape *kvt_shape_at(int i);

#endif
