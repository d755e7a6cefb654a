// anthropic.h - Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) over kvtier's chat
// completions, as llama-server serves it (built with jansson).
//
// A request is checked field by field and turned into a chat request (kvt_request of kind KVT_REQ_CHAT, api
// KVT_API_ANTHROPIC), whose answer http_job.c writes in Anthropic's shape with the writers below:
//   system          a string, or a list of {type: "text", text} blocks (their texts joined with nothing between,
//                   as llama-server): the first message, role "system"
//   messages        required, a non-empty list of {role: "user" | "assistant", content}; content a string or a list
//                   of blocks: "text" blocks ({type, text}; joined as the chat completions join text parts),
//                   "thinking" / "redacted_thinking" blocks dropped; other blocks (image, tool_use, tool_result,
//                   document) refused. A message left with no block, and an assistant message without content, is
//                   left out (as llama-server)
//   max_tokens      integer >= 1 (absent: 4096, as llama-server)
//   stop_sequences  a list of up to KVT_REQ_MAX_STOP non-empty strings
//   temperature, top_p, top_k, stream, model   as the chat completions read them
//   tools           refused unless empty; tool_choice, metadata, thinking, service_tier: accepted and ignored
// Other fields are ignored. Errors: 400 naming the field (the request's own names: "system[1].text",
// "messages[0].content[2].type", "stop_sequences[0]").
// The answer: {"id","type":"message","role":"assistant","content":[{"type":"text","text"}] ([] when the text is
// empty),"model","stop_reason","stop_sequence","usage":{"cache_read_input_tokens","input_tokens","output_tokens"}}
// with stop_reason "end_turn" (an end-of-generation token), "max_tokens" (max_tokens or the context's end) or
// "stop_sequence" (stop_sequence then names it; llama-server says "end_turn" there), input_tokens the prompt's
// tokens not read from the prefix cache. A stream is the events message_start, content_block_start (before the
// first text), content_block_delta (each piece of text), content_block_stop, message_delta, message_stop, each
// "event: NAME\ndata: JSON\n\n", with no [DONE] (an error: the event "error").
#ifndef KVT_ANTHROPIC_H
#define KVT_ANTHROPIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "request.h"

// Parses body[0..len) as a Messages request into *out (caller frees with kvt_request_free). Errors as
// kvt_request_parse: KVT_ERR_INVALID_ARG with a 400 in *e naming the field, KVT_ERR_NOMEM with a 500.
kvt_status kvt_anthropic_parse(const char *body, size_t len, const kvt_req_defaults *d, kvt_request **out,
                               kvt_api_error *e);

// What the answer and its events tell.
typedef struct {
    const char *id, *model;
    const char *text;          // the message's text (text_delta: the piece)
    size_t len;
    int32_t index;             // the content block's index (content_block_*)
    const char *stop_reason;   // NULL writes null (message_start)
    const char *stop_sequence; // NULL writes null
    int64_t input_tokens, cached_tokens, output_tokens;
} kvt_anthropic_msg;

typedef enum {
    KVT_ANTHROPIC_MESSAGE_START,
    KVT_ANTHROPIC_BLOCK_START,
    KVT_ANTHROPIC_BLOCK_DELTA,
    KVT_ANTHROPIC_BLOCK_STOP,
    KVT_ANTHROPIC_MESSAGE_DELTA,
    KVT_ANTHROPIC_MESSAGE_STOP,
} kvt_anthropic_event_kind;

// The whole answer's JSON text (a new string, caller frees; *len its length, may be NULL); NULL when out of memory.
char *kvt_anthropic_message_json(const kvt_anthropic_msg *m, size_t *len);
// One stream event "event: NAME\ndata: JSON\n\n" (a new string, caller frees); NULL when out of memory.
char *kvt_anthropic_event(kvt_anthropic_event_kind kind, const kvt_anthropic_msg *m, size_t *len);
// The event "error" carrying json (an error object's text, taken: freed); NULL when out of memory.
char *kvt_anthropic_error_event(char *json, size_t *len);

#endif
