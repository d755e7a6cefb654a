// beam.h - step-wise beam search over the paged KV store, with the locality-aware
// schedules of locality-aware-beam-scheduling.txt (docs/BEAM.md).
//
// Each step: expansion (each of the live beams produces `width` continuations of
// up to `step` tokens (the first step expands the prompt into n_beams x width, so
// every step runs n_beams x width continuations), ending early at the step delimiter or at end of generation;
// a continuation is a fork of its beam's sequence, sharing its KV blocks by
// reference), rating (a pluggable scorer, default the mean token log-probability
// of everything the beam generated), selection (the best `n_beams` of the
// finished beams kept so far and the new continuations; losers' sequences are
// freed, which releases their blocks; with temp > 0, continuations whose ids coincide
// are one candidate, kept once at its best rank, so the kept beams are distinct). The schedule only orders the work:
//   layerwise  every live continuation advances one token per forward pass (one batch)
//   beam       groups of continuations whose KV fits the fast tier run the whole step,
//              one group after the other, in continuation order
//   prefix     the same, groups chosen by Algorithm 1 (shared prefix blocks)
//   balanced   prefix groups of balanced sizes; while a group computes, a helper
//              thread loads the next group's full blocks into the headroom it leaves
// All schedules give the same beams and scores: every continuation draws from its own
// random stream (seeded by seed, step and its index), so the draws do not depend on
// the order of work. With `batched` the forward pass runs several continuations at
// once (kvt_decode_batch); a row's logits do not depend on the rows beside it or on
// the thread count (fixed summation orders), so the guarantee is bit for bit either way.
#ifndef KVT_BEAM_H
#define KVT_BEAM_H

#include <stdbool.h>
#include <stdint.h>

#include "../exec/context.h"
#include "../kv/kv.h"
#include "../model/tokenizer.h"
#include "beam_group.h"

// What a scorer rates: one candidate after the step's expansion.
typedef struct {
    const int32_t *prompt;   // [n_prompt] prompt ids
    int64_t n_prompt;
    const int32_t *ids;      // [n] every id the beam generated, oldest first
    const float *logprobs;   // [n] log-probability of each id under the model (temperature 1)
    int64_t n;
    int64_t step_start;      // ids[step_start .. n) are this step's continuation
    bool finished;           // ended by end of generation or the token limit
} kvt_beam_cand;

// Rates a candidate (higher is better). Must be deterministic.
typedef kvt_status (*kvt_beam_scorer)(void *user, const kvt_beam_cand *c, double *score, kvt_err *err);

// Default scorer: mean of c->logprobs (0 for an empty candidate). user is unused.
kvt_status kvt_beam_score_mean_logprob(void *user, const kvt_beam_cand *c, double *score, kvt_err *err);

// Process reward model: a second model whose mean token log-probability of the
// candidate's ids (after the prompt) is the score. Same vocabulary size required.
typedef struct kvt_beam_prm kvt_beam_prm;
// The model is borrowed; cp: its context (contiguous cache; n_ctx must hold prompt + tokens).
kvt_status kvt_beam_prm_init(const kvt_model *prm, const kvt_context_params *cp, kvt_beam_prm **out, kvt_err *err);
void kvt_beam_prm_free(kvt_beam_prm *p);
// Scorer for kvt_beam_params.scorer with user = the kvt_beam_prm.
kvt_status kvt_beam_prm_score(void *user, const kvt_beam_cand *c, double *score, kvt_err *err);

typedef struct {
    int32_t n_beams;          // beams kept after each step (N)
    int32_t width;            // continuations per beam and step (W)
    int32_t step;             // tokens per step (S)
    int64_t n_tokens;         // tokens a beam generates at most
    const char *step_delim;   // a step also ends after a token whose text ends with this (NULL/"": off); needs tok
    float temp;               // 0: the W continuations start with the top-W tokens, then greedy
    uint64_t seed;            // temp > 0: random streams per continuation
    kvt_beam_sched schedule;
    bool batched;             // kvt_decode_batch (default) or one kvt_decode_seq per token
    bool stop_at_eog;         // end a beam at end-of-generation tokens (needs tok)
    const kvt_tokenizer *tok; // borrowed; NULL: no delimiter and no EOG
    kvt_beam_scorer scorer;   // NULL: kvt_beam_score_mean_logprob
    void *scorer_user;
    int64_t fast_budget;      // fast-tier bytes for grouping (0: the context's kv_fast_bytes, or without one its device
                              // layers' --kv-vram x n_layer / device layers; -1: unlimited)
} kvt_beam_params;

kvt_beam_params kvt_beam_params_default(void);

typedef struct {
    int32_t *ids;      // [n] generated ids (prompt excluded)
    int64_t n;
    double score;
    bool finished;     // ended by end of generation or the token limit
    bool rescored;     // kvt_beam_result_rescore ran: rescore holds its score
    double rescore;    // the second scorer's mean token log-probability of ids (0 unless rescored)
} kvt_beam_out;

typedef struct {
    kvt_beam_out *beams;       // [n_beams] best first
    int32_t n_beams;
    int32_t n_steps;
    int32_t *groups_per_step;  // [n_steps]
    int64_t n_decoded;         // tokens run through the model after the prompt
    int64_t n_forward;         // forward passes (batches) after the prompt
    double total_ms, prefill_ms, compute_ms, stall_ms, select_ms, prefetch_ms;
    // kvt_beam_step_predict summed over the steps, per schedule (share = true: refcounted blocks)
    int64_t pred_load[KVT_BEAM_SCHED_COUNT], pred_store[KVT_BEAM_SCHED_COUNT];
    int64_t prefetched_blocks; // balanced: blocks the helper thread acquired ahead of their group
    // Device layers (-ngl): a fork shares the parent's full KV blocks and copies its partly filled last block (gpu_kv.h;
    // the CPU store copies it at the first write): the blocks of block_tokens positions the forks copied (each holds
    // every device layer's and head group's block; 0 on the CPU path), and the device KV's bytes they took (measured:
    // gpu_kv's fork_bytes over the run). The groups and pred_load / pred_store count shared blocks once, as on the CPU.
    int64_t fork_blocks, fork_copy_bytes;
} kvt_beam_result;

// Runs the search on ctx (paged store; sequence 0 must be empty) from prompt ids.
// *res is filled (free with kvt_beam_result_free, also after an error).
kvt_status kvt_beam_run(kvt_context *ctx, const kvt_beam_params *p, const int32_t *prompt, int64_t n_prompt,
                        kvt_beam_result *res, kvt_err *err);
void kvt_beam_result_free(kvt_beam_result *res);

// Rates every kept beam of res again with p, after the search (the search itself is untouched): beams[i].rescore = p's
// mean token log-probability of beams[i].ids after the prompt, and beams[i].rescored = true. With p built on the same
// model and a dense context (kvt_context_params_default), it shows what a sparse search (--sparse) cost its beams: the
// beams' log-probability under exact attention beside their own score. On an error the beams rated so far keep theirs.
kvt_status kvt_beam_result_rescore(kvt_beam_prm *p, const int32_t *prompt, int64_t n_prompt, kvt_beam_result *res,
                                   kvt_err *err);

#endif
