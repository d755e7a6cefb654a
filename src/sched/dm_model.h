// dm_model.h - the analytical KV data-movement model of step-wise beam search
// (locality-aware-beam-scheduling.txt, Eqs. 1-5 and Figure 7).
//
// All sizes are bytes; positions and lengths are tokens. The model counts the
// KV bytes moved from the slow tier (host) to the fast tier (GPU / fast arena)
// over one request of `gen` generated tokens after a `prompt`-token prompt:
//
// Token-by-token, layer-wise offload (the baseline), per generated token at
// position s (s = prompt .. prompt+gen-1):
//   KV_layer(s) = beams * s * kv_token_layer               one layer, all beams
//   L_in(s)     = min(n_layer, floor(mem / KV_layer(s)))     layers kept resident (Eq. 1)
//   DM_token(s) = (n_layer - L_in(s)) * KV_layer(s)           reloaded per token  (Eq. 2)
//   DM_req      = sum over the generated tokens of DM_token   (Eq. 3)
//
// Beam (step-wise) scheduling: each beam's KV crosses once per step (Eq. 4),
// summed over the steps (Eq. 5). The paper's Figure 7 numbers are reproduced
// exactly (to the GiB) by this reading, which we call the Figure 7 convention:
//   s_end(i)   = prompt + min((i+1)*step, gen)       tokens of a beam at the end of step i
//   DM_step(i) = beams * KV_beam(s_end(i))   if beams * KV_beam(s_end(i)) > mem, else 0
// i.e. the KV a beam has when its step finishes (its KV at the step start, loaded,
// plus the step's new tokens, written back), and nothing moves while every
// beam's KV still fits the budget (as Eq. 1 gives for the baseline). Eq. 5 as
// printed (s = i*step + prompt, no fit test) gives 2010 / 990 / 480 GiB instead
// of Figure 7's 2052 / 1044 / 540 for OPT-6.7B; it is returned too (beam_eq5_bytes).
//
// Units: the paper's "GB" are GiB (2^30 bytes): with mem = 7 * 2^30 the
// baseline is 53,012.45 GiB (Figure 7: 53,012 GB); with mem = 7e9 it would be
// 53,857. Figure 7's 2,052 / 1,044 / 540 are likewise exact GiB values.
#ifndef KVT_DM_MODEL_H
#define KVT_DM_MODEL_H

#include <stdint.h>

#include "../base/status.h"

typedef struct {
    int32_t n_layer;
    int64_t kv_token_layer; // K+V bytes of one token, one layer, one beam (F16: 2 * n_head_kv * head_dim * 2)
    int64_t beams;          // N_beam: beams alive in every step
    int64_t step;           // N_step: tokens per step (>= 1)
    int64_t prompt;         // S_prompt: prompt tokens (KV present before the first step)
    int64_t gen;            // N_gen: tokens generated per beam; a final partial step is counted when step does not divide gen
    int64_t mem;            // Mem_GPU: fast-tier bytes reserved for KV
} kvt_dm_params;

typedef struct {
    int64_t token_by_token_bytes; // Eqs. 1-3
    int64_t beam_bytes;           // Eqs. 4-5, Figure 7 convention
    int64_t beam_eq5_bytes;       // Eq. 5 exactly as printed: sum of beams * KV_beam(i*step + prompt) over floor(gen/step) steps
    int64_t n_steps;              // ceil(gen / step)
    int64_t offload_from;         // first position at which the baseline offloads a layer; -1 if it never does
    int64_t steps_offloaded;      // steps in which beam scheduling moves KV (DM_step > 0)
    int64_t beams_per_group_last; // beams per group in the last step: min(beams, floor(mem / KV_beam(prompt+gen)))
    int64_t groups_last;          // groups in the last step: ceil(beams / beams_per_group_last)
} kvt_dm_result;

// Checks p and evaluates both strategies. KVT_ERR_INVALID_ARG for a bad value or
// a result beyond int64; KVT_ERR_BUDGET when one beam's KV at the end of some
// step does not fit mem (no group of beam scheduling could run it).
kvt_status kvt_dm_model_eval(const kvt_dm_params *p, kvt_dm_result *out, kvt_err *err);

// Eq. 2 for a total one-layer KV of kv_layer bytes (all beams): bytes reloaded
// for one token when n_layer layers share mem; 0 when kv_layer is 0; -1 on overflow.
int64_t kvt_dm_token_bytes(int32_t n_layer, int64_t kv_layer, int64_t mem);

// Layer-wise offload over n_tokens consecutive tokens whose one-layer KV (all
// beams) is kv_layer0 + t * kv_layer_growth at token t: sum of Eq. 2. -1 on overflow.
int64_t kvt_dm_layerwise_bytes(int32_t n_layer, int64_t kv_layer0, int64_t kv_layer_growth, int64_t n_tokens, int64_t mem);

#endif
