// response.h - OpenAI response bodies and stream chunks (built with jansson).
//
// Shapes (compact JSON, one line):
//   completion         {"id","object":"text_completion","created","model","choices":[{"index","text",
//                       "logprobs","finish_reason"}],"usage"}
//   chat.completion    {"id","object":"chat.completion","created","model","choices":[{"index",
//                       "message":{"role":"assistant","content"},"logprobs","finish_reason"}],"usage"}
//   chat.completion.chunk  choices[].delta {"role"?, "content"?} instead of message; a completion
//                       chunk is a text_completion object with the piece of text
//   usage              {"prompt_tokens","completion_tokens","total_tokens",
//                       "prompt_tokens_details":{"cached_tokens"}}
//   logprobs (chat)    {"content":[{"token","logprob","bytes":[..],"top_logprobs":[{"token","logprob","bytes"}]}]}
//   logprobs (completions, legacy) {"tokens":[..],"token_logprobs":[..],"top_logprobs":[{token: logprob}],
//                       "text_offset":[..]}
// Text and token bytes that are not valid UTF-8 are written with U+FFFD in place of invalid bytes
// (the "bytes" arrays keep the raw bytes); stream text through kvt_utf8_stream first so that
// characters are never split across chunks.
#ifndef KVT_RESPONSE_H
#define KVT_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "request.h"

// One alternative at a position: raw token bytes and its log-probability.
typedef struct {
    const char *token;
    size_t len;
    double logprob;
    int32_t id;                   // the token id (written by native.c's completion_probabilities only)
} kvt_resp_alt;

// The chosen token at one position, its alternatives (most likely first) and, for completions,
// the byte offset of the token in the choice's text.
typedef struct {
    kvt_resp_alt chosen;
    const kvt_resp_alt *top;
    size_t n_top;
    int64_t text_offset;
} kvt_resp_logprob;

typedef struct {
    int32_t index;
    const char *text;             // content, delta or completion text; NULL: none (chunk without content)
    size_t len;
    const char *finish_reason;    // "stop", "length" ...; NULL writes null
    bool has_logprobs;            // false writes "logprobs": null
    const kvt_resp_logprob *logprobs;
    size_t n_logprobs;
    bool role;                    // chat chunk: the delta carries "role": "assistant" (the first chunk)
} kvt_resp_choice;

typedef struct {
    int64_t prompt_tokens, completion_tokens, cached_tokens;
} kvt_resp_usage;

// A request's wall times (llama-server's "timings" fields), measured by serve: prompt_ms from the request's arrival (parsed,
// then submitted to the engine) to its first generated token (queue wait, cached prefix and prompt computation), predicted_ms from then to
// its end. prompt_n counts the prompt tokens computed (not the cached_n reused), predicted_n the tokens generated (every
// choice). The per-token and per-second fields are derived (0 where n or ms is 0).
// With sparse (decode steps attend a selection: --sparse quest or asyncspade) "timings" also holds "sparse", the
// request's decode steps over every choice: steps, the positions attended (selected) of those held (context) summed
// over the sparse (layer, KV head) pairs and their ratio, the K/V and key-summary bytes read, and the time the steps
// waited for selections (stall_ms; wait_ms of it for the asyncspade worker), in all and per step.
typedef struct {
    int64_t prompt_n, cache_n, predicted_n;
    double prompt_ms, predicted_ms;
    bool sparse;
    int64_t sparse_steps, sparse_selected, sparse_context, sparse_kv_read_bytes, sparse_summary_read_bytes;
    double sparse_stall_ms, sparse_wait_ms;
} kvt_resp_timings;

typedef struct {
    kvt_req_kind kind;            // KVT_REQ_COMPLETION or KVT_REQ_CHAT
    bool chunk;                   // a streamed chunk instead of the whole response
    const char *id;               // e.g. "chatcmpl-42"
    const char *model;
    int64_t created;              // Unix seconds
    const kvt_resp_choice *choices;
    size_t n_choices;
    const kvt_resp_usage *usage;  // NULL: no usage (or null, see below)
    bool usage_null;              // with usage NULL: write "usage": null (chunks of an include_usage stream)
    const kvt_resp_timings *timings; // NULL: no "timings"
} kvt_resp;

// Builds the JSON text of r into a newly allocated NUL-terminated *out (caller frees; *out_len its
// length, may be NULL). Errors: KVT_ERR_NOMEM.
kvt_status kvt_resp_json(const kvt_resp *r, char **out, size_t *out_len, kvt_err *err);

// Writers shared with native.c (jansson values; NULL when out of memory): text with invalid UTF-8 as U+FFFD, the
// list of a string's bytes, the "timings" object (*ok false when a part could not be made).
struct json_t;
struct json_t *kvt_resp_jtext(const char *s, size_t n);
struct json_t *kvt_resp_jbytes(const char *s, size_t n);
struct json_t *kvt_resp_timings_json(const kvt_resp_timings *t, bool *ok);
// obj[key] = v / arr += v, taking v (NULL after a failed allocation, or a failed set: *ok becomes false).
void kvt_resp_set(struct json_t *obj, const char *key, struct json_t *v, bool *ok);
void kvt_resp_append(struct json_t *arr, struct json_t *v, bool *ok);
// o's compact JSON text (a new string, caller frees; *len its length, may be NULL), o released; NULL when !ok or out of
// memory.
char *kvt_resp_dump(struct json_t *o, bool ok, size_t *len);
// The list [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}] of n positions (chat
// logprobs' "content"); ids: each alternative also has llama-server's "id"; probs: "prob" and "top_probs" (the
// probabilities) in place of "logprob" and "top_logprobs" (llama-server's post_sampling_probs).
struct json_t *kvt_resp_logprob_list(const kvt_resp_logprob *lps, size_t n, bool ids, bool probs, bool *ok);

// POST /tokenize answer: {"tokens":[ids]} or, with pieces, {"tokens":[{"id","piece"}]} where a
// piece is a string when its bytes are valid UTF-8, else the list of its bytes (as llama-server).
// pieces[i]/piece_lens[i] are the raw bytes of token i (pieces NULL: ids only).
kvt_status kvt_resp_tokenize_json(const int32_t *ids, size_t n, const char *const *pieces, const size_t *piece_lens,
                                  char **out, kvt_err *err);
// POST /detokenize answer: {"content": text} (invalid UTF-8 written as U+FFFD).
kvt_status kvt_resp_detokenize_json(const char *text, size_t len, char **out, kvt_err *err);
// What llama-server's GET /v1/models tells of the model, in its "meta" object (its names and units).
typedef struct {
    int32_t vocab_type;  // the tokenizer: 1 SentencePiece (tokenizer.ggml.model "llama"), 2 BPE (llama.cpp's numbers)
    int64_t n_vocab;     // tokens in the vocabulary
    int64_t n_ctx;       // context of one sequence, positions (llama-server: a slot's)
    int64_t n_ctx_train; // training context, positions
    int64_t n_embd;      // embedding width
    int64_t n_params;    // elements of every tensor of the file (kvtier info's n_params)
    int64_t size;        // bytes of every tensor of the file (kvtier info's weight_bytes)
    char ftype[64];      // the file type's name, as llama.cpp's llama_ftype_name ("Q4_K - Medium")
} kvt_resp_model_meta;

// GET /v1/models answer: {"object":"list","data":[{"id","object":"model","created","owned_by":"kvtier","meta":
// {"vocab_type","n_vocab","n_ctx","n_ctx_train","n_embd","n_params","size","ftype"}}]}; meta NULL: no "meta".
kvt_status kvt_resp_models_json(const char *model_id, int64_t created, const kvt_resp_model_meta *meta, char **out,
                                kvt_err *err);

#endif
