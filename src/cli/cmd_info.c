// cmd_info.c - `kvtier info`: what a model is and what running it costs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/json.h"
#include "../kernels/quant.h"
#include "commands.h"
#include "common.h"

// Activation bytes of one micro-batch of ub tokens (the forward pass' scratch).
static int64_t activation_bytes(const kvt_hparams *hp, int64_t ub) {
    const int64_t Q = (int64_t)hp->n_head * hp->head_dim, K = (int64_t)hp->n_head_kv * hp->head_dim;
    return ub * 4 * (4 * (int64_t)hp->n_embd + 2 * Q + 2 * K + 3 * (int64_t)hp->n_ff) + (int64_t)hp->n_vocab * 4;
}

int cmd_info(int argc, char **argv) {
    kvt_args a = {"info", argc, argv, 0};
    const char *model_path = NULL;
    bool json = false;
    int64_t n_ctx = 0;
    const char *flag;
    while (kvt_args_next(&a, &flag)) {
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            printf("usage: kvtier info -m MODEL [-c CTX] [--json]\n"
                   "  prints architecture, shapes, tensor types, parameter count, weight bytes,\n"
                   "  KV bytes per token and the memory a context of CTX tokens needs (default: training context)\n");
            return 0;
        } else if (!strcmp(flag, "-m") || !strcmp(flag, "--model")) {
            if (!(model_path = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "-c") || !strcmp(flag, "--ctx-size")) {
            if (!kvt_args_int(&a, flag, 1, (int64_t)1 << 24, &n_ctx)) return 2;
        } else if (!strcmp(flag, "--json")) {
            json = true;
        } else {
            kvt_args_unknown(&a, flag);
            return 2;
        }
    }
    kvt_model *m;
    if (!cli_load_model("info", model_path, false, &m, NULL)) return 1;
    const kvt_hparams *hp = &m->hp;
    if (n_ctx == 0) n_ctx = hp->n_ctx_train;
    int64_t type_count[KVT_TYPE_COUNT] = {0}, type_bytes[KVT_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < kvt_gguf_n_tensors(m->gguf); i++) {
        const kvt_gguf_tensor *t = kvt_gguf_tensor_at(m->gguf, i);
        type_count[t->type]++;
        type_bytes[t->type] += (int64_t)t->size;
    }
    int32_t n_local = 0; // sliding-window layers
    for (int32_t l = 0; l < hp->n_layer; l++) n_local += kvt_hparams_layer_window(hp, l) > 0;
    const int64_t kv16 = kvt_hparams_kv_bytes_per_token(hp, KVT_TYPE_F16);
    const int64_t kv32 = kvt_hparams_kv_bytes_per_token(hp, KVT_TYPE_F32);
    const int64_t act = activation_bytes(hp, 512);
    const int64_t total = m->weight_bytes + kv16 * n_ctx + act;
    kvt_str name = {"", 0};
    kvt_gguf_get_str(m->gguf, "general.name", &name, NULL);
    char desc[96]; // llama-bench's "model" column
    kvt_model_desc(m, desc, sizeof desc);
    if (json) {
        kvt_json j;
        kvt_json_init(&j, stdout);
        kvt_json_obj_begin(&j);
        kvt_json_kv_str(&j, "file", model_path);
        kvt_json_key(&j, "name");
        kvt_json_strn(&j, name.ptr, name.len);
        kvt_json_kv_str(&j, "arch", kvt_arch_name(hp->arch));
        kvt_json_kv_str(&j, "description", desc);
        kvt_json_kv_int(&j, "gguf_version", kvt_gguf_version(m->gguf));
        kvt_json_kv_int(&j, "n_vocab", hp->n_vocab);
        kvt_json_kv_int(&j, "n_embd", hp->n_embd);
        kvt_json_kv_int(&j, "n_layer", hp->n_layer);
        kvt_json_kv_int(&j, "n_head", hp->n_head);
        kvt_json_kv_int(&j, "n_head_kv", hp->n_head_kv);
        kvt_json_kv_int(&j, "head_dim", hp->head_dim);
        kvt_json_kv_int(&j, "n_ff", hp->n_ff);
        kvt_json_kv_int(&j, "n_ctx_train", hp->n_ctx_train);
        kvt_json_kv_str(&j, "rope_type", hp->rope_type == KVT_ROPE_NEOX ? "neox" : "normal");
        kvt_json_kv_num(&j, "rope_freq_base", hp->rope_freq_base);
        kvt_json_kv_num(&j, "rope_freq_scale", hp->rope_freq_scale);
        kvt_json_kv_int(&j, "sliding_window", hp->n_swa);
        kvt_json_kv_int(&j, "n_layer_local", n_local);
        kvt_json_kv_bool(&j, "tied_output", m->tied_output);
        kvt_json_kv_int(&j, "n_params", m->n_params);
        kvt_json_kv_int(&j, "weight_bytes", m->weight_bytes);
        kvt_json_kv_int(&j, "repacked_bytes", m->repack_bytes);
        kvt_json_key(&j, "tensor_types");
        kvt_json_obj_begin(&j);
        for (int t = 0; t < KVT_TYPE_COUNT; t++) {
            if (type_count[t]) kvt_json_kv_int(&j, kvt_type_name((kvt_type)t), type_count[t]);
        }
        kvt_json_obj_end(&j);
        kvt_json_kv_int(&j, "kv_bytes_per_token_f16", kv16);
        kvt_json_kv_int(&j, "kv_bytes_per_token_f32", kv32);
        kvt_json_kv_int(&j, "n_ctx", n_ctx);
        kvt_json_kv_int(&j, "kv_bytes", kv16 * n_ctx);
        kvt_json_kv_int(&j, "activation_bytes", act);
        kvt_json_kv_int(&j, "total_bytes", total);
        kvt_json_obj_end(&j);
    } else {
        const double MiB = 1048576.0;
        printf("file          %s (GGUF v%u)\n", model_path, kvt_gguf_version(m->gguf));
        printf("name          %.*s\n", (int)name.len, name.ptr);
        printf("architecture  %s\n", kvt_arch_name(hp->arch));
        printf("description   %s\n", desc);
        printf("shape         vocab %d, embd %d, layers %d, heads %d (kv %d), head_dim %d, ff %d, ctx_train %d\n",
               hp->n_vocab, hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff, hp->n_ctx_train);
        printf("rope          %s, dims %d, base %g, scale %g; output %s\n", hp->rope_type == KVT_ROPE_NEOX ? "neox" : "normal",
               hp->n_rot, hp->rope_freq_base, hp->rope_freq_scale, m->tied_output ? "tied to token_embd" : "separate");
        if (hp->n_swa > 0) {
            printf("attention     sliding window %d on %d of %d layers (rope base %g there), the others global\n",
                   hp->n_swa, n_local, hp->n_layer, hp->rope_freq_base_swa);
        }
        printf("tensors      ");
        for (int t = 0; t < KVT_TYPE_COUNT; t++) {
            if (type_count[t]) printf(" %s x%lld (%.1f MiB)", kvt_type_name((kvt_type)t), (long long)type_count[t], type_bytes[t] / MiB);
        }
        printf("\nparameters    %.2f M\n", m->n_params / 1e6);
        printf("weights       %.2f MiB (%.3f bits/param)\n", m->weight_bytes / MiB, 8.0 * m->weight_bytes / (double)m->n_params);
        if (m->repack_bytes) { // the layouts this CPU's kernels repack the file's matrix types into (quant.h)
            printf("repacked      %.2f MiB of them when computing (", m->repack_bytes / MiB);
            for (int t = 0; t < KVT_TYPE_COUNT; t++) {
                const kvt_repack_ops *rp = type_count[t] ? kvt_type_repack((kvt_type)t) : NULL;
                if (rp && rp->to != (kvt_type)t) printf("%s -> %s, ", kvt_type_name((kvt_type)t), kvt_type_name(rp->to));
            }
            printf("the other matrices copied as they are, onto huge pages, for the CPU kernels), in place of the file's pages\n");
        }
        printf("KV per token  %lld bytes f16, %lld bytes f32\n", (long long)kv16, (long long)kv32);
        printf("memory @ctx %lld: weights %.1f MiB + KV f16 %.1f MiB + activations %.1f MiB = %.1f MiB\n",
               (long long)n_ctx, m->weight_bytes / MiB, kv16 * n_ctx / MiB, act / MiB, total / MiB);
    }
    kvt_model_free(m);
    return 0;
}
