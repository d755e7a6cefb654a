// generate.h - single-sequence generation: prefill the prompt, then decode
// token by token with a sampler until EOS/EOG or n_predict tokens.
#ifndef KVT_GENERATE_H
#define KVT_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "../exec/context.h"
#include "../model/tokenizer.h"
#include "sampler.h"

typedef struct {
    int64_t n_predict;        // tokens to generate at most
    kvt_sampler_params sampling;
    bool stop_at_eog;         // stop at end-of-generation tokens (EOS, <|im_end|>, ...)
} kvt_generate_params;

kvt_generate_params kvt_generate_params_default(void);

// llama.cpp's ignore_eos (llama-server's request field, llama-cli's --ignore-eos): every end-of-generation token
// banned. *out (malloc'd, caller frees; NULL when *n_out is 0) is in[0..n_in) followed by {id, -INFINITY} for each id
// kvt_token_is_eog marks, in increasing order. Give it to kvt_sampler_params.logit_bias: greedy stays deterministic
// (the argmax over the tokens left) and a run ends only at its length. KVT_ERR_NOMEM, KVT_ERR_INVALID_ARG (no tok).
kvt_status kvt_logit_bias_ban_eog(const kvt_tokenizer *tok, const kvt_logit_bias *in, int32_t n_in, kvt_logit_bias **out,
                                  int32_t *n_out, kvt_err *err);

// Called after each generated token; return false to stop early.
typedef bool (*kvt_token_cb)(void *user, int32_t id);

typedef struct {
    int64_t n_prompt;
    int64_t n_gen;          // tokens generated (the EOG token included when it ended the run)
    double prefill_ms;      // prompt processing
    double decode_ms;       // all decode steps after the first sampled token
    bool hit_eog;
} kvt_generate_stats;

// Runs the prompt through ctx (which must be empty or hold a prefix the
// prompt continues: positions continue from kvt_context_n_past), then
// generates. out_ids: [n_predict] generated ids. prompt_logits: optional
// [n_vocab] copy of the logits after the last prompt token.
kvt_status kvt_generate(kvt_context *ctx, const kvt_tokenizer *tok, const int32_t *prompt, int64_t n_prompt,
                        const kvt_generate_params *p, int32_t *out_ids, float *prompt_logits, kvt_token_cb cb,
                        void *user, kvt_generate_stats *stats, kvt_err *err);

// As kvt_generate, with the KV of prompt[0, n_cached) already in ctx (kvt_context_kv_load): only
// prompt[n_cached, n_prompt) is decoded (0 <= n_cached < n_prompt); the sampler still sees every
// prompt token (repeat penalty), so ids equal those of a run that decodes the whole prompt. n_align
// (the context's n_ubatch, 0: none): the first micro-batch ends at a multiple of it, so the micro-batches
// are those of a run that decodes the whole prompt and the logits equal its logits bit for bit (when
// the cached KV came from such a prefill; KV of generated tokens, decoded one at a time, may differ from
// a batched prefill in the last bits).
kvt_status kvt_generate_cached(kvt_context *ctx, const kvt_tokenizer *tok, const int32_t *prompt, int64_t n_prompt,
                               int64_t n_cached, int64_t n_align, const kvt_generate_params *p, int32_t *out_ids, float *prompt_logits,
                               kvt_token_cb cb, void *user, kvt_generate_stats *stats, kvt_err *err);

#endif
