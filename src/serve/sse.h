// sse.h - server-sent events framing for streamed responses.
//
// An event is "data: <line>\n" for each line of the payload, then an empty line; the stream
// ends with the event "data: [DONE]". JSON payloads (compact) are one line.
#ifndef KVT_SSE_H
#define KVT_SSE_H

#include <stddef.h>

#include "../base/status.h"

// The closing event of an OpenAI stream.
#define KVT_SSE_DONE "data: [DONE]\n\n"

// Frames payload[0..n) as one event into a newly allocated NUL-terminated string *out (caller
// frees; *out_len its length). "\r\n" and "\r" in the payload count as line ends.
// Errors: KVT_ERR_NOMEM.
kvt_status kvt_sse_frame(const char *payload, size_t n, char **out, size_t *out_len, kvt_err *err);

// A named event "event: NAME\ndata: JSON\n\n" (Anthropic's and OpenAI Responses' streams; json one line, taken:
// freed), newly allocated (caller frees; *len its length, may be NULL). NULL when json is NULL or out of memory.
char *kvt_sse_named(const char *name, char *json, size_t *len);

#endif
