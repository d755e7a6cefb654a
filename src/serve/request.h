// request.h - parse and validate OpenAI /v1/completions and /v1/chat/completions request bodies.
//
// Built only with jansson (the Makefile defines KVT_HAVE_JANSSON). Fields read (unknown fields are
// ignored, as llama-server does; but the known ones kvtier does not implement and that would change the
// answer are refused when they ask for something: echo, suffix, best_of other than n, tools, n_probs on /v1, ...:
// a neutral value is accepted):
//   model                   string (optional; echoed back)
//   prompt (completions)    a string, a list of token ids, or a list holding exactly one string or
//                           one list of token ids; several prompts in one request are refused (send
//                           one request per prompt; use n for several answers to one prompt)
//   messages (chat)         non-empty list of {role: string, content: string | [{type:"text",
//                           text: string}...]} (text parts joined by "\n", as llama-server); role is
//                           checked by the chat template (kvt_chat_template_apply); "developer"
//                           is read as "system" (as llama-server)
//   max_tokens, max_completion_tokens   integer >= 1 or null; the latter wins when both are given;
//                           absent: -1 (until the end of the context or an end-of-generation token);
//                           n_predict (llama-server's name; -1: no limit) when neither is given
//   temperature [0, 2] (default 1), top_p (0, 1] (default 1), top_k integer >= 0 (0: off),
//   min_p [0, 1] (default 0), seed integer (absent: random)
//   presence_penalty, frequency_penalty  [-2, 2] (default 0; /completion: any number within +-1e6),
//   repeat_penalty (0, 1e6] (default 1), repeat_last_n integer >= 0 (default 64; 0: off): llama-server's
//                           penalties over the last repeat_last_n tokens of the prompt and the answer
//   logit_bias              {"TOKEN_ID" or "text": bias or false, ...} or [[TOKEN_ID or "text", bias or false], ...]
//                           (llama-server's two forms; false bans; a text's tokens each get the bias); the ids are
//                           checked against the vocabulary when the request is tokenized (kvt_request_set_logit_bias)
//   stop                    string or list of up to KVT_REQ_MAX_STOP non-empty strings
//   n                       integer 1..KVT_REQ_MAX_N (default 1)
//   logprobs                completions: integer 0..KVT_REQ_MAX_TOP_LOGPROBS (the number of top
//                           alternatives); chat: boolean, with top_logprobs integer 0..20
//   stream                  boolean; stream_options {include_usage: boolean} only with stream true
//   grammar                 a GBNF grammar (llama.cpp's format; src/sched/grammar.h) the answer must follow; compiled
//                           (and refused with its line and column) when the request is tokenized (http.c)
//   json_schema             a JSON schema object (json_schema.h) the answer must follow; /completion and /infill:
//                           used when `grammar` is absent (llama-server's rule); the others: refused beside a
//                           non-empty `grammar`; {} means any object
//   response_format         {"type": "text"}, {"type": "json_object"[, "schema": S]} or {"type": "json_schema",
//                           "json_schema": {"schema": S}}: a JSON answer (any object, or S), as llama-server's chat
//                           endpoint; kvtier takes it on every completion endpoint
// POST /tokenize (llama-server's shape): content string (required), add_special boolean (default
// false), parse_special boolean (default true), with_pieces boolean (default false); the text
// lands in prompt. POST /detokenize: tokens, a list of token ids (may be empty), in prompt_ids.
// Numbers: integer fields accept integral JSON reals (2.0); null means "not given" everywhere.
#ifndef KVT_REQUEST_H
#define KVT_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "../sched/sampler.h"
#include "chat_template.h"

#define KVT_REQ_MAX_STOP 16
#define KVT_REQ_MAX_N 64
#define KVT_REQ_MAX_TOP_LOGPROBS 20

// KVT_REQ_NATIVE: llama-server's POST /completion (native.h lists its fields beyond the shared ones); KVT_REQ_INFILL:
// its POST /infill, given to kvt_request_parse only: parsed as /completion with /infill's fields for the prompt
// (infill.h), then a KVT_REQ_NATIVE request whose native->infill is set.
typedef enum { KVT_REQ_COMPLETION, KVT_REQ_CHAT, KVT_REQ_TOKENIZE, KVT_REQ_DETOKENIZE, KVT_REQ_NATIVE,
               KVT_REQ_INFILL } kvt_req_kind;

// The API a chat request came in by, which shapes its answer: OpenAI's chat completions, Anthropic's Messages
// (anthropic.h) or OpenAI's Responses (responses_api.h); the last two are converted into a chat request.
typedef enum { KVT_API_OPENAI, KVT_API_ANTHROPIC, KVT_API_RESPONSES } kvt_req_api;

// An error to answer with, in the OpenAI shape (kvt_api_error_json).
typedef struct {
    int http_status;  // 400, 401, 404, 500, 503 ...
    const char *type; // "invalid_request_error", "authentication_error", "server_error", ...
    char param[64];   // the offending field ("messages[2].content"), "" when none
    char message[KVT_ERR_MSG_MAX];
    int64_t n_prompt_tokens, n_ctx; // > 0: a prompt over the context, sent as llama-server's fields of that name
} kvt_api_error;

// One logit_bias entry as given: a token id, or a text whose tokens each get the bias.
typedef struct {
    int64_t id;       // -1: text
    const char *text; // NULL: id
    float bias;       // -INFINITY for false
} kvt_req_logit_bias;

// The validated request; all pointers are owned by the kvt_request they came from.
// A string of the request's body: len bytes (a JSON string may hold NUL).
typedef struct kvt_req_text {
    const char *s;
    size_t len;
} kvt_req_text;

typedef struct {
    kvt_req_kind kind;
    kvt_req_api api;             // KVT_API_OPENAI unless converted (kvt_request_parse_chat)
    const char *model;           // NULL when absent
    const char *prompt;          // completions given as text; NULL otherwise
    const int32_t *prompt_ids;   // completions given as token ids; NULL otherwise
    int64_t n_prompt_ids;
    const kvt_chat_msg *messages; // chat; roles and contents are NUL-terminated UTF-8
    size_t n_messages;
    int64_t max_tokens;          // -1: not given
    double temperature, top_p, min_p;
    int32_t top_k;
    double repeat_penalty, frequency_penalty, presence_penalty; // 1, 0, 0: off
    int64_t repeat_last_n;       // the penalties' window in tokens (0: off)
    const kvt_req_logit_bias *bias_given; // logit_bias as given (n_bias_given entries)
    size_t n_bias_given;
    const kvt_logit_bias *logit_bias;     // the same resolved to token ids (kvt_request_set_logit_bias); NULL before
    int32_t n_logit_bias;
    bool has_seed;
    uint64_t seed;
    const char *const *stop;     // n_stop strings
    size_t n_stop;
    int32_t n;
    bool logprobs;               // return the chosen tokens' log-probabilities
    int32_t top_logprobs;        // and this many alternatives per position
    bool stream, include_usage;
    bool ignore_eos;             // llama-server's extension: every end-of-generation token banned (http.c adds the -inf
                                 // biases to logit_bias, kvt_logit_bias_ban_eog): max_tokens are generated
    // llama-server's extras, taken on every completion endpoint as llama-server takes them (native.c parses them,
    // kvt_llama_extras): `samplers` (the chain's members, the infill sampler among them), `top_n_sigma`, `typical_p`,
    // `xtc_probability`, `xtc_threshold`, `dynatemp_range`, `dynatemp_exponent`, `mirostat` (its chain then, as
    // llama-server's: `samplers` and the penalties do not apply), `mirostat_tau`, `mirostat_eta`, `n_indent` (> 0: a
    // generated line after the first indented by fewer spaces or tabs ends the answer before its text; 0 off) and
    // `t_max_predict_ms` (> 0: a token with a newline after that many ms of generation ends it; 0 off); http_job.c
    // applies the last two, stop_type "limit" / finish_reason "length"
    bool infill_sampler;
    int32_t n_indent;
    int64_t t_max_predict_ms;
    double top_n_sigma;          // llama.cpp's top-n-sigma (<= 0: off; sampler.h)
    double typical_p;            // llama.cpp's locally typical sampling (>= 1: off, the default; sampler.h)
    double xtc_probability, xtc_threshold;    // llama.cpp's XTC (0 and 0.1 by default: off; sampler.h)
    double dynatemp_range, dynatemp_exponent; // llama.cpp's dynamic temperature (0 and 1 by default: off)
    int32_t mirostat;                         // llama.cpp's mirostat 1 or 2 (0: off), its target and rate (5, 0.1)
    double mirostat_tau, mirostat_eta;
    // llama.cpp's DRY penalty (src/sched/dry.h): `dry_multiplier` (0: off, the default), `dry_base` (1.75; under 1 in
    // the request: 1.75, as llama-server), `dry_allowed_length` (2), `dry_penalty_last_n` (64; 0 off; http.c bounds it
    // by the context), `dry_sequence_breakers` (a non-empty list of strings; NULL here: llama.cpp's "\n", ":", "\"",
    // "*"): dry_breakers[n_dry_breakers] malloc'd and freed with the request, the strings in its body
    double dry_multiplier, dry_base;
    int32_t dry_allowed_length, dry_penalty_last_n;
    struct kvt_req_text *dry_breakers;
    size_t n_dry_breakers;
    // llama.cpp's adaptive-p: on when `samplers` lists `adaptive_p` (anywhere: it replaces the draw, as llama-server)
    // and `adaptive_target` >= 0 (-1 by default; above 1: 1); `adaptive_decay` 0..0.99 (0.9)
    bool adaptive_p;
    double adaptive_target, adaptive_decay;
    int32_t min_keep;            // llama.cpp's: top_p, min_p, typical_p and XTC keep at least this many (0: no effect)
    bool add_special, parse_special, with_pieces; // tokenize only
    const struct kvt_native_ext *native; // KVT_REQ_NATIVE: the /completion fields of native.h; NULL otherwise
    // The grammar the answer must follow (NUL-terminated GBNF text: `grammar`, or `json_schema` / response_format's
    // schema converted), NULL when none; grammar_field: the field it came from, for messages ("grammar",
    // "json_schema", "response_format.schema", "response_format.json_schema.schema")
    const char *grammar;
    const char *grammar_field;
} kvt_request_params;

// The sampling settings every completion request starts from, its fields overriding them: llama-server's defaults
// (kvt_req_defaults_llama: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, the other samplers off), or what the
// server's flags set (`kvtier serve --temp 0.6 --top-k 20 ...`, as llama-server's flags set its params_base). The same
// for /completion, /infill and the /v1, Anthropic and Responses endpoints, as in llama-server.
typedef struct {
    double temperature, top_p, min_p, top_n_sigma, typical_p, xtc_probability, xtc_threshold, dynatemp_range,
        dynatemp_exponent, repeat_penalty, frequency_penalty, presence_penalty, mirostat_tau, mirostat_eta,
        dry_multiplier, dry_base, adaptive_target, adaptive_decay;
    int32_t top_k, mirostat, dry_allowed_length, dry_penalty_last_n, min_keep;
    int64_t repeat_last_n;
    bool has_seed, ignore_eos;
    uint64_t seed;
    const struct kvt_req_text *dry_breakers; // [n_dry_breakers] borrowed (they must outlive the requests); NULL:
    size_t n_dry_breakers;                   // llama.cpp's "\n", ":", "\"", "*"
} kvt_req_defaults;
kvt_req_defaults kvt_req_defaults_llama(void);
// Sets p's sampling fields to d's (p->dry_breakers pointing at d's: a request parsed from d holds a copy).
void kvt_req_defaults_apply(const kvt_req_defaults *d, kvt_request_params *p);

typedef struct kvt_request kvt_request; // opaque

// Parses body[0..len) as a request of the given kind. On success *out is owned by the caller
// (kvt_request_free). On failure returns KVT_ERR_INVALID_ARG (or KVT_ERR_NOMEM) and fills *aerr
// (http_status 400 for malformed JSON and for missing, mistyped or out-of-range fields, naming
// the field in param and message; 500 for out of memory).
kvt_status kvt_request_parse(const char *body, size_t len, kvt_req_kind kind, kvt_request **out,
                             kvt_api_error *aerr);
// The same from the server's defaults d (NULL: kvt_req_defaults_llama's).
kvt_status kvt_request_parse_with(const char *body, size_t len, kvt_req_kind kind, const kvt_req_defaults *d,
                                  kvt_request **out, kvt_api_error *aerr);
void kvt_request_free(kvt_request *r);
// Gives r the logit biases resolved to token ids (v[n], malloc'd: r frees it), seen in p.logit_bias.
void kvt_request_set_logit_bias(kvt_request *r, kvt_logit_bias *v, int32_t n);
const kvt_request_params *kvt_request_get(const kvt_request *r);

// Fills *e (any status, type, param may be NULL) with a printf-style message (n_prompt_tokens, n_ctx 0);
// returns KVT_ERR_INVALID_ARG.
#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
kvt_status kvt_api_errorf(kvt_api_error *e, int http_status, const char *type, const char *param, const char *fmt,
                          ...);

// The error as the JSON text {"error": {"message", "type", "param", "code"}} (code: the HTTP
// status, as llama-server sends it; and "n_prompt_tokens", "n_ctx" when e->n_ctx > 0), newly allocated
// (caller frees); NULL when out of memory.
char *kvt_api_error_json(const kvt_api_error *e);

#endif
