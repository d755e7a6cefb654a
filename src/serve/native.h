// native.h - llama-server's native endpoints: POST /completion requests and answers, GET /props (built with jansson).
//
// So that a script written for llama-server works unchanged (docs/SERVING.md, "llama-server's native endpoints").
// A /completion request is a kvt_request of kind KVT_REQ_NATIVE: request.c parses the fields it shares with
// /v1/completions (n_predict/max_tokens, temperature, top_k, top_p, min_p, seed, stop, stream, ignore_eos, the shared
// refusals) and calls kvt_native_parse before them and kvt_native_finish after them for the rest:
//   prompt          a string; a list of token ids (no BOS added); a list mixing strings and token ids (BOS as the model
//                   asks only when the first element is a string); {"prompt_string": one of those}; a list holding
//                   one of those. Several prompts (a list of strings or lists) are refused: one request per prompt.
//   n_probs         integer 0..KVT_REQ_MAX_TOP_LOGPROBS ("logprobs" when n_probs is absent): completion_probabilities
//   return_tokens   boolean: the generated token ids in "tokens"
//   id_slot         integer >= -1: accepted and ignored (every sequence shares the prefix cache, so the slot never
//                   changes the answer); cache_prompt, timings_per_token, return_progress, verbose, n_keep,
//                   n_discard, n_cache_reuse, sse_ping_interval, backend_sampling: accepted and ignored likewise
//   samplers        a list of sampler names or a string of sampler characters: accepted when the samplers kvtier
//                   implements (penalties, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, infill, temperature) that
//                   are listed keep that order; one left out of the list is not applied (as llama-server: top_k 0,
//                   top_p 1, min_p 0, temperature 1, ...); with mirostat the list does not apply (llama-server's)
//   n_predict       wins over max_tokens (as llama-server); -1: until an end-of-generation token or the context's end
//   seed            -1 (or 4294967295) is a random seed, as llama-server
//   temperature, top_k, min_p, top_p above 1: clamped into range as llama-server clamps them; absent: the server's
//                   defaults (request.h, kvt_req_defaults), as on every endpoint
//   n_indent        integer >= 0, t_max_predict_ms number (<= 0: off): as llama-server (request.h; on /v1 too,
//                   kvt_llama_extras); response_fields list of strings (kvt_native_ext below); the editor plugins
//                   llama.vim and llama.vscode send them; t_max_prompt_ms is ignored, as llama-server ignores it
// Refused (400 naming the field) when they ask for something: n > 1 (n_cmpl), reasoning_budget_tokens, lora,
// multimodal_data, and the implemented samplers in another order when more than one of them acts.
#ifndef KVT_NATIVE_H
#define KVT_NATIVE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../model/tokenizer.h"
#include "request.h"
#include "response.h"

// One element of a prompt given as a list mixing strings and token ids.
typedef struct {
    const char *text; // a string (points into the request's JSON), or NULL for a token id
    int32_t id;
} kvt_native_piece;

// The /completion fields beyond kvt_request_params (owned by the request).
struct kvt_native_ext {
    kvt_native_piece *pieces; // the prompt as a mixed list; NULL otherwise
    size_t n_pieces;
    int32_t *ids;             // storage of p->prompt_ids when the prompt is a list of token ids
    struct kvt_infill *infill; // POST /infill: its fields (infill.h), the prompt built from them; NULL otherwise
    int32_t n_probs;          // alternatives per token in completion_probabilities (0: none)
    bool post_sampling_probs; // llama-server's: the probabilities of the sampling chain's final distribution
    bool return_tokens;
    int64_t id_slot;          // as given (-1: any)
    const char **response_fields; // [n_response_fields] paths ("timings/prompt_n") into the JSON text of the request;
    size_t n_response_fields;     // the final answer holds only these, each under its path (none: all)
};

// request.c's field readers (request.h describes them), for native.c.
kvt_status kvt_req_get_int(json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *present,
                           kvt_api_error *e);
kvt_status kvt_req_get_bool(json_t *obj, const char *key, bool *out, kvt_api_error *e);
kvt_status kvt_req_check_str(json_t *v, const char *param, const char **out, kvt_api_error *e);
const char *kvt_req_type_name(const json_t *v);
// For the converters of other APIs (anthropic.c, responses_api.c): a 400 "param: what"; a 400 "param: must be want,
// got <v's type>"; the 500 of out of memory (KVT_ERR_NOMEM); a field's value, NULL when absent or null.
kvt_status kvt_req_bad(kvt_api_error *e, const char *param, const char *what);
kvt_status kvt_req_wrong_type(kvt_api_error *e, const char *param, const char *want, const json_t *v);
kvt_status kvt_req_nomem(kvt_api_error *e);
json_t *kvt_req_field(json_t *obj, const char *key);
// body[0..len) as a JSON object (a new reference), or NULL with a 400 in *e (malformed, or not an object).
json_t *kvt_req_load(const char *body, size_t len, kvt_api_error *e);
// A chat completions body built by a converter (taken; NULL: out of memory) parsed as kvt_request_parse does, the
// request marked as come by api.
kvt_status kvt_request_parse_chat(json_t *chat, kvt_req_api api, const kvt_req_defaults *d, kvt_request **out,
                                  kvt_api_error *e);

// llama-server's extras that every completion endpoint takes (/v1/completions and /v1/chat/completions as /completion):
// `samplers` (the chain; listing infill sets p->infill_sampler), the samplers' numbers (top_n_sigma, typical_p, xtc_*,
// dynatemp_*, mirostat*, dry_*, adaptive_*: request.h), `min_keep`, `n_indent`, `t_max_predict_ms`. After the
// shared sampling fields (p's settings are the endpoint's defaults or the request's). Errors: KVT_ERR_INVALID_ARG
// (400 in *e naming the field).
kvt_status kvt_llama_extras(json_t *root, kvt_request_params *p, kvt_api_error *e);

// Before the shared fields: the prompt (infill: /infill's fields instead, infill.h), n_probs, return_tokens, id_slot
// and the native refusals into p and a new *out (freed by kvt_native_free, also on error). Errors:
// KVT_ERR_INVALID_ARG (400 in *e naming the field), KVT_ERR_NOMEM.
kvt_status kvt_native_parse(json_t *root, bool infill, kvt_request_params *p, struct kvt_native_ext **out,
                            kvt_api_error *e);
// After the shared fields: n_predict's precedence, the random seed, the clamps, samplers and n. Errors as above.
kvt_status kvt_native_finish(json_t *root, kvt_request_params *p, struct kvt_native_ext *x, kvt_api_error *e);
void kvt_native_free(struct kvt_native_ext *x);

// The token ids of a mixed prompt (x->pieces): strings tokenized with special-token parsing, BOS as the model asks
// only for a first string; ids checked against the vocabulary. A new array (n + 1 entries, caller frees) and *n, or
// NULL with *e filled (400 for a bad id or text, 500 out of memory).
int32_t *kvt_native_prompt_ids(const struct kvt_native_ext *x, const kvt_tokenizer *tok, int64_t *n, kvt_api_error *e);

// A streamed token (stop false) or the summary (stop true: the whole answer, or a stream's last event).
typedef struct {
    bool stop;
    const char *content;            // the text (a stream's summary: "")
    size_t len;
    const int32_t *tokens;          // "tokens" (may be NULL with n_tokens 0)
    size_t n_tokens;
    const kvt_resp_logprob *probs;  // completion_probabilities (written when has_probs; alternatives with ids)
    size_t n_probs;
    bool has_probs;
    bool post_sampling;             // probs are of the sampling chain's final distribution: written as llama-server's
                                    // post_sampling_probs ("prob" and "top_probs", probabilities, not logarithms)
    int64_t tokens_predicted, tokens_evaluated;
    // the summary only
    const char *model;
    const char *prompt;             // the prompt's text (detokenized, as llama-server)
    size_t prompt_len;
    const kvt_request_params *params; // generation_settings
    int32_t n_probs_asked;
    uint64_t seed;                  // the seed used
    bool has_new_line, truncated;
    const char *stop_type;          // "eos", "limit", "word"
    const char *stopping_word;      // "" when none
    int64_t tokens_cached;
    const kvt_resp_timings *timings; // NULL: no "timings"
    const char *const *fields;      // response_fields: the summary holds only these paths, each under its path as its
    size_t n_fields;                // key (llama-server's json_get_nested_values; a path not found is left out)
} kvt_native_resp;

// The JSON text of r into a new *out (caller frees; *out_len its length, may be NULL). Errors: KVT_ERR_NOMEM.
kvt_status kvt_native_resp_json(const kvt_native_resp *r, char **out, size_t *out_len, kvt_err *err);

// What GET /props reports (all borrowed).
typedef struct {
    int64_t n_ctx;
    int32_t total_slots;
    const char *model_alias, *model_path;
    const char *chat_template;      // the GGUF's tokenizer.chat_template when kvtier uses it; "" otherwise
    const char *chat_format;        // kvtier's format name (chatml, llama3, ...)
    const char *bos_token, *eos_token;
    bool metrics;
    const kvt_req_defaults *defaults; // the server's sampling defaults (NULL: llama-server's)
} kvt_native_props;

// GET /props answer into a new *out (caller frees). Errors: KVT_ERR_NOMEM.
kvt_status kvt_native_props_json(const kvt_native_props *pr, char **out, kvt_err *err);

#endif
