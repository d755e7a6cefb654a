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

#endif
