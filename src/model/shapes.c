// shapes.c - hyperparameters of well-known models, from their config.json.
#include "shapes.h"

#include <stddef.h>
#include <strings.h>

// Columns: name, arch, vocab, embd, layers, heads, kv heads, head_dim, ff,
// ctx, rope base, rms eps, tied, qk_norm, qkv_bias, note.
static const kvt_shape k_shapes[] = {
    // TinyLlama/TinyLlama-1.1B-Chat-v1.0 config.json
    {"tinyllama-1.1b", KVT_ARCH_LLAMA, 32000, 2048, 22, 32, 4, 64, 5632, 2048, 10000.0f, 1e-5f, false, false, false,
     "TinyLlama 1.1B (Llama-2 architecture, GQA 8:1)"},
    // HuggingFaceTB/SmolLM2-135M config.json
    {"smollm2-135m", KVT_ARCH_LLAMA, 49152, 576, 30, 9, 3, 64, 1536, 8192, 100000.0f, 1e-5f, true, false, false,
     "SmolLM2 135M (tied embeddings)"},
    // HuggingFaceTB/SmolLM2-360M config.json
    {"smollm2-360m", KVT_ARCH_LLAMA, 49152, 960, 32, 15, 5, 64, 2560, 8192, 100000.0f, 1e-5f, true, false, false,
     "SmolLM2 360M (tied embeddings)"},
    // meta-llama/Llama-2-7b-hf config.json
    {"llama2-7b", KVT_ARCH_LLAMA, 32000, 4096, 32, 32, 32, 128, 11008, 4096, 10000.0f, 1e-5f, false, false, false,
     "Llama 2 7B (no GQA)"},
    // meta-llama/Llama-2-13b-hf config.json
    {"llama2-13b", KVT_ARCH_LLAMA, 32000, 5120, 40, 40, 40, 128, 13824, 4096, 10000.0f, 1e-5f, false, false, false,
     "Llama 2 13B (no GQA)"},
    // huggyllama/llama-30b config.json (LLaMA 1 33B, "30B"; tierkv.txt's 30B point)
    {"llama-30b", KVT_ARCH_LLAMA, 32000, 6656, 60, 52, 52, 128, 17920, 2048, 10000.0f, 1e-6f, false, false, false,
     "LLaMA 1 30B (33B; no GQA)"},
    // meta-llama/Llama-2-70b-hf config.json
    {"llama2-70b", KVT_ARCH_LLAMA, 32000, 8192, 80, 64, 8, 128, 28672, 4096, 10000.0f, 1e-5f, false, false, false,
     "Llama 2 70B (GQA 8:1)"},
    // meta-llama/Meta-Llama-3-8B config.json
    {"llama3-8b", KVT_ARCH_LLAMA, 128256, 4096, 32, 32, 8, 128, 14336, 8192, 500000.0f, 1e-5f, false, false, false,
     "Llama 3 8B"},
    // mistralai/Mistral-7B-v0.1 config.json (sliding window not modelled)
    {"mistral-7b", KVT_ARCH_LLAMA, 32000, 4096, 32, 32, 8, 128, 14336, 32768, 10000.0f, 1e-5f, false, false, false,
     "Mistral 7B v0.1 (sliding window ignored)"},
    // facebook/opt-6.7b config.json: hidden 4096, 32 layers, 32 heads, ffn_dim
    // 16384, vocab 50272, 2048 positions. OPT really has LayerNorm, learned
    // positions and a 2-matrix ReLU MLP: this llama-like entry is for
    // data-movement / planning arithmetic (FlexGen comparisons) only; a GGUF
    // made from it has an extra gate matrix and is not OPT.
    {"opt-6.7b", KVT_ARCH_LLAMA, 50272, 4096, 32, 32, 32, 128, 16384, 2048, 10000.0f, 1e-5f, false, false, false,
     "OPT-6.7B recorded llama-like, for planning math only"},
    // Qwen/Qwen2.5-0.5B config.json
    {"qwen2.5-0.5b", KVT_ARCH_QWEN2, 151936, 896, 24, 14, 2, 64, 4864, 32768, 1000000.0f, 1e-6f, true, false, true,
     "Qwen2.5 0.5B (tied, q/k/v biases)"},
    // Qwen/Qwen2.5-7B-Instruct config.json (the base model lists 131072 positions)
    {"qwen2.5-7b", KVT_ARCH_QWEN2, 152064, 3584, 28, 28, 4, 128, 18944, 32768, 1000000.0f, 1e-6f, false, false, true,
     "Qwen2.5 7B (q/k/v biases)"},
    // Qwen/Qwen3-0.6B config.json
    {"qwen3-0.6b", KVT_ARCH_QWEN3, 151936, 1024, 28, 16, 8, 128, 3072, 40960, 1000000.0f, 1e-6f, true, true, false,
     "Qwen3 0.6B (tied, head_dim 128 > embd/heads)"},
    // Qwen/Qwen3-1.7B config.json
    {"qwen3-1.7b", KVT_ARCH_QWEN3, 151936, 2048, 28, 16, 8, 128, 6144, 40960, 1000000.0f, 1e-6f, true, true, false,
     "Qwen3 1.7B (tied)"},
    // Qwen/Qwen3-4B config.json
    {"qwen3-4b", KVT_ARCH_QWEN3, 151936, 2560, 36, 32, 8, 128, 9728, 40960, 1000000.0f, 1e-6f, true, true, false,
     "Qwen3 4B (tied)"},
    // Qwen/Qwen3-8B config.json
    {"qwen3-8b", KVT_ARCH_QWEN3, 151936, 4096, 36, 32, 8, 128, 12288, 40960, 1000000.0f, 1e-6f, false, true, false,
     "Qwen3 8B"},
    // Qwen/Qwen3-14B config.json
    {"qwen3-14b", KVT_ARCH_QWEN3, 151936, 5120, 40, 40, 8, 128, 17408, 40960, 1000000.0f, 1e-6f, false, true, false,
     "Qwen3 14B"},
    // Qwen/Qwen3-32B config.json (64 query heads of 128 = 8192 > n_embd)
    {"qwen3-32b", KVT_ARCH_QWEN3, 151936, 5120, 64, 64, 8, 128, 25600, 40960, 1000000.0f, 1e-6f, false, true, false,
     "Qwen3 32B"},
};

#define N_SHAPES ((int)(sizeof k_shapes / sizeof k_shapes[0]))

int kvt_shape_count(void) { return N_SHAPES; }

const kvt_shape *kvt_shape_at(int i) { return i >= 0 && i < N_SHAPES ? &k_shapes[i] : NULL; }

const kvt_shape *kvt_shape_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < N_SHAPES; i++) {
        if (strcasecmp(k_shapes[i].name, name) == 0) return &k_shapes[i];
    }
    return NULL;
}
