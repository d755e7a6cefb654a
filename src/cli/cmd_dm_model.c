// cmd_dm_model.c - `kvtier dm-model`: the paper's analytical KV data-movement
// model (locality-aware-beam-scheduling.txt, Eqs. 1-5) for a named shape or a
// GGUF's hyperparameters: token-by-token layer-wise offload vs beam scheduling.
//
// The paper's "7 GB" is 7 GiB (the baseline of Figure 7, 53,012 GB, is 53,012.45
// GiB with a 7 * 2^30-byte budget and 53,857 with 7e9): --kv-mem 7G (the default)
// reproduces it; byte sizes follow kvtier's one rule (args.h: 7G = 7 GiB, 7GB = 7e9).
// Results are printed in GiB (2^30 bytes) and in bytes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/json.h"
#include "../gguf/gguf.h"
#include "../model/model.h"
#include "../model/shapes.h"
#include "../sched/dm_model.h"
#include "args.h"
#include "commands.h"

#define CMD "dm-model"

static const char *k_help =
    "usage: kvtier dm-model (--shape NAME | -m MODEL.gguf) [options]\n"
    "  KV bytes moved host -> fast tier by step-wise beam search over one request,\n"
    "  token-by-token layer-wise offload (Eqs. 1-3) vs beam scheduling (Eqs. 4-5),\n"
    "  as in Figure 7 of locality-aware-beam-scheduling (F16 KV).\n"
    "  --shape NAME     a known model shape (kvtier mkmodel --list-shapes), e.g. opt-6.7b\n"
    "  -m MODEL.gguf    read the shape from a GGUF's hyperparameters instead\n"
    "  --beams N        beams alive in every step (default 64)\n"
    "  --step S         tokens per step (default 32)\n"
    "  --prompt P       prompt tokens (default 128)\n"
    "  --gen G          tokens generated per beam (default 1920)\n"
    "  --kv-mem BYTES   fast-tier KV budget (default 7G = 7516192768 bytes, the paper's \"7 GB\",\n"
    "                   which is 7 GiB)\n"
    "  --json           one JSON object: token_by_token_gib, beam_scheduling_gib, ... (GiB = 2^30 bytes)\n"
    KVT_BYTES_HELP;

int cmd_dm_model(int argc, char **argv) {
    kvt_args a = {CMD, argc, argv, 0};
    const char *shape_name = NULL, *model_path = NULL, *flag;
    int64_t beams = 64, step = 32, prompt = 128, gen = 1920, mem = (int64_t)7 << 30;
    bool json = false;
    while (kvt_args_next(&a, &flag)) {
        bool ok = true;
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            fputs(k_help, stdout);
            return 0;
        } else if (!strcmp(flag, "--shape")) ok = (shape_name = kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "-m") || !strcmp(flag, "--model")) ok = (model_path = kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "--beams")) ok = kvt_args_int(&a, flag, 1, 1 << 20, &beams);
        else if (!strcmp(flag, "--step")) ok = kvt_args_int(&a, flag, 1, 1 << 26, &step);
        else if (!strcmp(flag, "--prompt")) ok = kvt_args_int(&a, flag, 0, 1 << 26, &prompt);
        else if (!strcmp(flag, "--gen")) ok = kvt_args_int(&a, flag, 1, 1 << 26, &gen);
        else if (!strcmp(flag, "--kv-mem")) ok = kvt_args_bytes_pos(&a, flag, &mem);
        else if (!strcmp(flag, "--json")) json = true;
        else ok = kvt_args_unknown(&a, flag);
        if (!ok) return 2;
    }
    if (!shape_name == !model_path) {
        fprintf(stderr, "kvtier " CMD ": give exactly one of --shape NAME and -m MODEL.gguf (see --help)\n");
        return 2;
    }
    kvt_hparams hp;
    memset(&hp, 0, sizeof hp);
    const char *source = shape_name ? shape_name : model_path;
    kvt_err err = {0};
    if (shape_name) {
        const kvt_shape *s = kvt_shape_find(shape_name);
        if (!s) {
            fprintf(stderr, "kvtier " CMD ": unknown shape '%s' (kvtier mkmodel --list-shapes)\n", shape_name);
            return 2;
        }
        hp.n_layer = s->n_layer;
        hp.n_head_kv = s->n_head_kv;
        hp.head_dim = hp.head_dim_v = s->head_dim;
    } else {
        kvt_gguf *g = NULL;
        kvt_status st = kvt_gguf_open(model_path, &g, &err);
        if (!st) {
            st = kvt_hparams_read(g, &hp, &err);
            kvt_gguf_free(g);
        }
        if (st) {
            fprintf(stderr, "kvtier " CMD ": %s\n", err.msg);
            return 1;
        }
    }
    const int64_t kv_token = kvt_hparams_kv_bytes_per_token(&hp, KVT_TYPE_F16); // one beam, all layers
    kvt_dm_params p = {hp.n_layer, hp.n_layer > 0 ? kv_token / hp.n_layer : 0, beams, step, prompt, gen, mem};
    kvt_dm_result r;
    if (kvt_dm_model_eval(&p, &r, &err)) {
        fprintf(stderr, "kvtier " CMD ": %s\n", err.msg);
        return 1;
    }
    const double GiB = 1073741824.0;
    const double ratio = r.token_by_token_bytes > 0 ? (double)r.beam_bytes / (double)r.token_by_token_bytes : 0.0;
    if (json) {
        kvt_json j;
        kvt_json_init(&j, stdout);
        kvt_json_obj_begin(&j);
        kvt_json_kv_str(&j, shape_name ? "shape" : "model", source);
        kvt_json_kv_int(&j, "n_layer", hp.n_layer);
        kvt_json_kv_int(&j, "kv_bytes_per_token", kv_token);
        kvt_json_kv_int(&j, "kv_bytes_per_token_layer", p.kv_token_layer);
        kvt_json_kv_int(&j, "beams", beams);
        kvt_json_kv_int(&j, "step", step);
        kvt_json_kv_int(&j, "prompt", prompt);
        kvt_json_kv_int(&j, "gen", gen);
        kvt_json_kv_int(&j, "kv_mem_bytes", mem);
        kvt_json_kv_num(&j, "token_by_token_gib", r.token_by_token_bytes / GiB);
        kvt_json_kv_num(&j, "beam_scheduling_gib", r.beam_bytes / GiB);
        kvt_json_kv_num(&j, "beam_scheduling_eq5_gib", r.beam_eq5_bytes / GiB);
        kvt_json_kv_int(&j, "token_by_token_bytes", r.token_by_token_bytes);
        kvt_json_kv_int(&j, "beam_scheduling_bytes", r.beam_bytes);
        kvt_json_kv_num(&j, "beam_over_token_by_token", ratio);
        kvt_json_kv_int(&j, "offload_from", r.offload_from);
        kvt_json_kv_int(&j, "n_steps", r.n_steps);
        kvt_json_kv_int(&j, "steps_offloaded", r.steps_offloaded);
        kvt_json_kv_int(&j, "beams_per_group_last", r.beams_per_group_last);
        kvt_json_kv_int(&j, "groups_last", r.groups_last);
        kvt_json_obj_end(&j);
        printf("\n");
    } else {
        printf("shape           %s: %d layers, F16 KV %lld B/token/layer, %lld B/token per beam\n", source, hp.n_layer,
               (long long)p.kv_token_layer, (long long)kv_token);
        printf("run             %lld beams, step %lld, prompt %lld, gen %lld, KV budget %lld B (%.2f GiB)\n", (long long)beams,
               (long long)step, (long long)prompt, (long long)gen, (long long)mem, mem / GiB);
        printf("token-by-token  %12.2f GiB   layer-wise offload, Eqs. 1-3", r.token_by_token_bytes / GiB);
        if (r.offload_from >= 0) printf(" (offloads from position %lld)\n", (long long)r.offload_from);
        else printf(" (never offloads)\n");
        printf("beam schedule   %12.2f GiB   Eqs. 4-5 (Figure 7), %.2f%% of token-by-token; KV moves in %lld of %lld steps; "
               "last step %lld beams/group, %lld groups\n",
               r.beam_bytes / GiB, 100.0 * ratio, (long long)r.steps_offloaded, (long long)r.n_steps,
               (long long)r.beams_per_group_last, (long long)r.groups_last);
        printf("Eq. 5 literal   %12.2f GiB   s = i*step + prompt, no fit test (see docs/BEAM.md)\n", r.beam_eq5_bytes / GiB);
    }
    return 0;
}
