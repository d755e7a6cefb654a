// sampler.h - token sampling from a logit vector.
//
// Chain (as llama.cpp's default order): (a grammar's mask, when the grammar rejected a first draw: below) logit
// biases -> penalties over the last `penalty_last_n` tokens (repetition, frequency, presence: llama.cpp's penalties sampler) -> DRY -> top-n-sigma ->
// top-k -> typical-p -> top-p -> min-p -> XTC -> infill (when asked) -> temperature (or dynamic temperature) -> draw
// (or adaptive-p's).
// temp <= 0 is greedy (argmax, ties to the lowest id; with typical-p, XTC or infill, which can drop the argmax, the
// argmax of what they keep, as llama.cpp's temperature after them). Deterministic for a given seed.
//
// Cost per token: O(n_vocab) with top-k (a bounded heap keeps the k best, then k
// are sorted); a full sort of the vocabulary only without top-k. Either way the
// same draws as sorting everything (candidates ordered by logit, then id). The infill filter adds
// O(m^2) comparisons of token texts over the m candidates the cuts leave (llama.cpp's cost too).
#ifndef KVT_SAMPLER_H
#define KVT_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "dry.h"
#include "grammar.h"

// A bias added to one token's logit before anything else (llama.cpp's logit_bias; -INFINITY bans the token, +INFINITY
// forces it: the tokens at +inf share the draw; every token banned draws greedily, id 0). A ban wins over every other
// bias of its token (+inf included, in any order), so no logit becomes NaN; a NaN bias is refused.
typedef struct {
    int32_t token;
    float bias;
} kvt_logit_bias;

// What a draw leaves behind when asked (kvt_sampler_params.report, llama-server's post_sampling_probs): the drawn
// token's probability in the chain's final distribution (after every cut, the temperature, mirostat or adaptive-p;
// a greedy draw's is 1) and the k most likely of that distribution whose probability is above 0, most likely first.
#define KVT_SAMPLER_REPORT_MAX 20
typedef struct {
    int32_t k;        // set by the caller: how many to keep (0..KVT_SAMPLER_REPORT_MAX)
    int32_t n;        // kept by the last draw
    int32_t ids[KVT_SAMPLER_REPORT_MAX];
    float probs[KVT_SAMPLER_REPORT_MAX];
    float chosen;     // the drawn token's probability
} kvt_sampler_report;

typedef struct {
    float temp;            // <= 0: greedy
    int32_t top_k;         // <= 0: off
    float top_p;           // >= 1: off
    float min_p;           // <= 0: off
    float repeat_penalty;  // 1: off. A logit of a token in the window: > 0 divided by it, <= 0 multiplied
    int32_t penalty_last_n; // window of the penalties: the last N tokens accepted (prompt and generated); 0: off
    uint64_t seed;
    float frequency_penalty; // 0: off. Subtracted from a token's logit once per occurrence in the window
    float presence_penalty;  // 0: off. Subtracted once from the logit of a token present in the window
    const kvt_logit_bias *logit_bias; // [n_logit_bias] borrowed: kvt_sampler_init copies them (tokens < n_vocab; a token
    int32_t n_logit_bias;             // listed twice gets both biases)
    // llama.cpp's infill sampler (fill in the middle, llama-server's "infill" in `samplers`) after min-p, before the
    // temperature; NULL: off. Borrowed: the vocabulary must outlive the sampler. On the survivors' probabilities,
    // renormalized: when 3 x (their end-of-generation mass) x (their count) exceeds the text mass, only the
    // end-of-generation tokens stay; else a token whose text begins another's takes its probability (the likelier of
    // the two keeps both, the other leaves), text tokens under 0.2 leave, then those under 1 / (texts left + 1); no
    // text token left: EOT (else EOS) alone. The draw (or, at temp <= 0, the argmax) is then over those left, by
    // their logits. So a greedy draw can differ from the raw argmax.
    const struct kvt_tokenizer *infill;
    // llama.cpp's top-n-sigma (<= 0: off), after the penalties: a logit below max - top_n_sigma x (the standard
    // deviation of the finite logits) leaves (mean and deviation summed in float in id order, as llama.cpp's)
    float top_n_sigma;
    // llama.cpp's locally typical sampling (>= 1: off), after top-k: of the candidates left (all, sorted, without
    // top-k), the fewest whose |-log p - entropy| is smallest with probabilities summing past typical_p stay; top-p
    // and min-p then see them renormalized
    float typical_p;
    // llama.cpp's XTC (exclude top choices), after min-p: with probability xtc_probability (a draw of the sampler's
    // generator) the candidates at or above xtc_threshold, renormalized, leave but the least likely of them; off when
    // xtc_probability <= 0 or xtc_threshold > 0.5
    float xtc_probability, xtc_threshold;
    // llama.cpp's dynamic temperature (dynatemp_range > 0; else the plain temperature): the temperature is
    // max(0, temp - range) + 2 range x (entropy / log(count)) ^ dynatemp_exponent of the candidates left
    float dynatemp_range, dynatemp_exponent;
    // llama.cpp's mirostat (1 or 2; 0 off), which replaces the chain after the logit biases (no penalties, no cuts, as
    // in llama.cpp): the logits divided by temp (temp <= 0: the argmax), then version 1 keeps the k likeliest with k
    // from a Zipf estimate over the 100 likeliest and the target surprise mu, version 2 those whose surprise -log2 p
    // is at most mu (at least one); the draw's surprise moves mu (2 mirostat_tau at start) by mirostat_eta towards
    // mirostat_tau. Per sampler state: one sampler per sequence.
    int32_t mirostat;
    float mirostat_tau, mirostat_eta;
    // llama.cpp's DRY penalty (dry.h), after the penalties: off unless dry.multiplier != 0, dry.base >= 1 and
    // dry.last_n > 0 (the sampler keeps a window of dry.last_n tokens: callers bound it by the context). The sampler
    // holds a reference to the breakers (NULL: none) until freed. Not in mirostat's chain (llama.cpp's).
    kvt_dry_params dry;
    const kvt_dry_breakers *dry_breakers;
    // llama.cpp's adaptive-p (adaptive_target < 0: off), in place of the plain draw at the end of the chain: the
    // candidates' probabilities after the temperature, each turned into the logit 5 - 10 d^2 / (1 + d) with d =
    // |p - target'| / 0.3, are drawn from by their softmax; target' = 2 adaptive_target - (an average of the chosen
    // tokens' probabilities, their weights decaying by adaptive_decay (0..0.99) a token), clamped to [0, 1]. Per
    // sampler state (one per sequence); kvt_sampler_accept of the token drawn updates the average.
    float adaptive_target, adaptive_decay;
    // NULL, or where each draw writes what it kept (above); borrowed, the caller's until the sampler is freed
    kvt_sampler_report *report;
    // llama.cpp's min_keep (0 or 1: no effect): top-p, min-p, typical-p and XTC keep at least this many candidates
    int32_t min_keep;
    // A GBNF grammar (grammar.h; NULL: off) and the vocabulary's texts for it (required with it, n_vocab tokens), in
    // llama.cpp's order: the chain draws over the logits; when the grammar does not allow the drawn token, the chain
    // draws again over the logits with every token the grammar forbids at -inf (the first draw's generator steps and
    // mirostat / adaptive-p updates stay, as in llama.cpp). When the biases ban every token the grammar allows (say
    // ignore_eos once the grammar is complete), the likeliest allowed token by the raw logits is drawn: the grammar
    // outranks a ban. The sampler holds its own matcher (one per sequence) and references to both until freed;
    // kvt_sampler_draw advances the matcher past the token it returns (prompt tokens never enter it).
    const kvt_grammar *grammar;
    const kvt_grammar_vocab *grammar_vocab;
} kvt_sampler_params;

// True when the parameters can change a logit before the draw (a logit bias, or a penalty or DRY that acts).
bool kvt_sampler_params_adjust(const kvt_sampler_params *p);
// True when the only adjustments are bans (every logit bias -INFINITY, no penalty or DRY acts, no report is asked, and neither typical-p, XTC,
// infill nor a dynamic temperature is on): a greedy draw is then the raw argmax unless that token is banned
// (kvt_sampler_params_banned), so the logits need not be read for most draws.
bool kvt_sampler_params_bans_only(const kvt_sampler_params *p);
// True when p's logit biases list token with -INFINITY (O(n_logit_bias)).
bool kvt_sampler_params_banned(const kvt_sampler_params *p, int32_t token);

kvt_sampler_params kvt_sampler_params_default(void);

typedef struct kvt_sampler kvt_sampler;

// KVT_ERR_INVALID_ARG for an empty vocabulary or a logit bias whose token is outside it or whose bias is NaN (named),
// an infill vocabulary with neither EOT nor EOS, a grammar without its vocabulary or with one of another size;
// KVT_ERR_NOMEM.
kvt_status kvt_sampler_init(const kvt_sampler_params *p, int32_t n_vocab, kvt_sampler **out, kvt_err *err);
void kvt_sampler_free(kvt_sampler *s);
// Picks a token from logits [n_vocab] (not modified). With a grammar, as kvt_sampler_draw, whose failures it cannot
// report: it then returns the chain's pick unchecked (use kvt_sampler_draw).
int32_t kvt_sampler_sample(kvt_sampler *s, const float *logits);
// Picks a token into *out from logits [n_vocab] (not modified) and, with a grammar, advances the grammar past it.
// KVT_ERR_INVALID_ARG when the grammar allows no token of the vocabulary ("grammar: no token ... after N tokens") or
// its matcher bound is reached (grammar.h), KVT_ERR_NOMEM; *out is then -1 and the state as before.
kvt_status kvt_sampler_draw(kvt_sampler *s, const float *logits, int32_t *out, kvt_err *err);
// Records a token (prompt or generated) for the repetition penalty.
void kvt_sampler_accept(kvt_sampler *s, int32_t token);

// Index of the largest logit (lowest index on ties).
int32_t kvt_argmax(const float *logits, int64_t n);

#endif
