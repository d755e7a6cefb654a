// responses_api.h - OpenAI's Responses API (POST /v1/responses, not streamed) over kvtier's chat completions, as
// llama-server serves it (built with jansson).
//
// A request is checked field by field and turned into a chat request (kvt_request of kind KVT_REQ_CHAT, api
// KVT_API_RESPONSES):
//   instructions        a string: the first message, role "system"
//   input               required: a string (one user message), or a non-empty list of messages {role: "user" |
//                       "system" | "developer" | "assistant", content, type: "message" (optional)}; content a string
//                       or a list of {type: "input_text" | "output_text", text} parts. Other items (function_call,
//                       function_call_output, reasoning, ...) and parts (input_image, input_file) are refused
//   max_output_tokens   integer >= 1 (the chat's max_tokens)
//   temperature, top_p, top_k, seed, model   as the chat completions read them
//   stream              only false: a streamed answer is refused (not implemented)
//   previous_response_id  refused (kvtier keeps no responses); tools refused unless empty; text.format only
//                       {"type": "text"}; store, metadata, user, parallel_tool_calls, truncation: ignored
// Errors: 400 naming the field ("input[2].content[0].type").
// The answer (llama-server's shape): {"id":"resp_N","object":"response","created_at","completed_at","model",
// "status":"completed","output":[{"id":"msg_N","type":"message","role":"assistant","status":"completed",
// "content":[{"type":"output_text","text","annotations":[],"logprobs":[]}]}],"usage":{"input_tokens",
// "output_tokens","total_tokens","input_tokens_details":{"cached_tokens"}}}.
#ifndef KVT_RESPONSES_API_H
#define KVT_RESPONSES_API_H

#include <stddef.h>
#include <stdint.h>

#include "request.h"

// Parses body[0..len) as a Responses request into *out (caller frees with kvt_request_free). Errors as
// kvt_request_parse.
kvt_status kvt_oairesp_parse(const char *body, size_t len, kvt_request **out, kvt_api_error *e);

typedef struct {
    const char *id, *msg_id, *model;
    int64_t created, completed; // Unix seconds
    const char *text;
    size_t len;
    int64_t input_tokens, cached_tokens, output_tokens;
} kvt_oairesp;

// The answer's JSON text (a new string, caller frees; *len its length, may be NULL); NULL when out of memory.
char *kvt_oairesp_json(const kvt_oairesp *r, size_t *len);

#endif
