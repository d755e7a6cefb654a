// responses_api.h - OpenAI's Responses API (POST /v1/responses, whole or streamed) over kvtier's chat completions, as
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
//   temperature, top_p, top_k, min_p, seed, model, stop, ignore_eos, logit_bias, the penalties   as the chat
//                       completions read them (llama-server passes the body's other fields on to its chat completions)
//   stream              boolean: the answer as events (below)
//   text.format         {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "schema": S}: the chat
//                       request's response_format (request.h: the answer follows the schema; errors name text.format)
//   previous_response_id  refused (kvtier keeps no responses); tools refused unless empty; store, metadata, user,
//                       parallel_tool_calls, truncation: ignored
// Errors: 400 naming the field ("input[2].content[0].type").
// The answer (llama-server's shape): {"id":"resp_N","object":"response","created_at","completed_at","model",
// "status":"completed","output":[{"id":"msg_N","type":"message","role":"assistant","status":"completed",
// "content":[{"type":"output_text","text","annotations":[],"logprobs":[]}]}],"usage":{"input_tokens",
// "output_tokens","total_tokens","input_tokens_details":{"cached_tokens"}}}.
// A stream (llama-server's events, each "event: NAME\ndata: JSON\n\n", no [DONE]): with the first generated token
// response.created and response.in_progress ({type, response: {id, object, status "in_progress"}}); before the first
// text response.output_item.added ({type, item: {id, type "message", role, status "in_progress", content []}}) and
// response.content_part.added ({type, item_id, part: {type "output_text", text ""}}); response.output_text.delta
// ({type, item_id, delta}) per piece of text; at the end, when there was text, response.output_text.done ({type,
// item_id, text}), response.content_part.done ({type, item_id, part}) and response.output_item.done ({type, item}),
// then response.completed ({type, response: the answer above without completed_at, timings}). An error: a data-only event
// {"error": ...} ends the stream (as llama-server).
#ifndef KVT_RESPONSES_API_H
#define KVT_RESPONSES_API_H

#include <stddef.h>
#include <stdint.h>

#include "request.h"
#include "response.h"

// Parses body[0..len) as a Responses request into *out (caller frees with kvt_request_free). Errors as
// kvt_request_parse.
kvt_status kvt_oairesp_parse(const char *body, size_t len, const kvt_req_defaults *d, kvt_request **out,
                             kvt_api_error *e);

typedef struct {
    const char *id, *msg_id, *model;
    int64_t created, completed; // Unix seconds
    const char *text;
    size_t len;
    int64_t input_tokens, cached_tokens, output_tokens;
    const kvt_resp_timings *timings; // response.completed's "timings" (as llama-server's); NULL: none
} kvt_oairesp;

// The answer's JSON text (a new string, caller frees; *len its length, may be NULL); NULL when out of memory.
char *kvt_oairesp_json(const kvt_oairesp *r, size_t *len);

typedef enum {
    KVT_OAIRESP_CREATED,      // response.created
    KVT_OAIRESP_IN_PROGRESS,  // response.in_progress
    KVT_OAIRESP_ITEM_ADDED,   // response.output_item.added
    KVT_OAIRESP_PART_ADDED,   // response.content_part.added
    KVT_OAIRESP_TEXT_DELTA,   // response.output_text.delta (r->text: the piece)
    KVT_OAIRESP_TEXT_DONE,    // response.output_text.done (r->text: the whole text)
    KVT_OAIRESP_PART_DONE,    // response.content_part.done
    KVT_OAIRESP_ITEM_DONE,    // response.output_item.done
    KVT_OAIRESP_COMPLETED,    // response.completed (output [] when r->len is 0, as llama-server)
} kvt_oairesp_event_kind;

// One stream event "event: NAME\ndata: JSON\n\n" (a new string, caller frees; *len its length, may be NULL); NULL
// when out of memory.
char *kvt_oairesp_event(kvt_oairesp_event_kind kind, const kvt_oairesp *r, size_t *len);

#endif
