// http_job.h - one completion request in flight: the engine's callbacks turned into OpenAI output.
//
// Internal to the HTTP layer (http.c); needs jansson. A kvt_http_job is shared by three owners, each
// holding one reference: the engine (until on_done), the connection (until libmicrohttpd's
// request-completed callback) and, for streams, the response object (until its free callback). The
// last kvt_http_job_unref frees it. Streamed output accumulates as SSE bytes that the connection's
// reader takes with kvt_http_job_read; a whole response is built by kvt_http_job_body after done.
#ifndef KVT_HTTP_JOB_H
#define KVT_HTTP_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine.h"
#include "request.h"

typedef struct kvt_http_job kvt_http_job;

// Takes ownership of req (freed with the job). model: echoed in responses (copied). With refs 3 for a
// stream (engine, connection, response), 2 otherwise. NULL when out of memory (req freed then).
kvt_http_job *kvt_http_job_create(kvt_request *req, const kvt_tokenizer *tok, const char *model, uint64_t serial,
                                  int refs);
void kvt_http_job_unref(kvt_http_job *j);
const kvt_request_params *kvt_http_job_params(const kvt_http_job *j);
// llama-server's /completion (KVT_REQ_NATIVE), before submitting: the prompt's text (owned from now on; NULL: ""),
// the seed sampling uses and the prompt's length in tokens, for its answers.
void kvt_http_job_set_native(kvt_http_job *j, char *prompt_text, size_t prompt_len, uint64_t seed, int64_t n_prompt);
// The DRY breakers' table the job's samplers use (its reference, dropped with the job; NULL: none), before submitting.
void kvt_http_job_set_dry(kvt_http_job *j, kvt_dry_breakers *b);
// The compiled grammar the job's samplers use (its reference, dropped with the job; NULL: none), before submitting.
void kvt_http_job_set_grammar(kvt_http_job *j, kvt_grammar *g);
// The prompt's length in tokens (an Anthropic stream's message_start tells it), before submitting.
void kvt_http_job_set_n_prompt(kvt_http_job *j, int64_t n_prompt);
// The callbacks to submit with (user = j).
kvt_engine_callbacks kvt_http_job_callbacks(kvt_http_job *j);
// Records the engine's id once submitted; the connection's end cancels it when the job is not done.
void kvt_http_job_set_id(kvt_http_job *j, kvt_engine *e, uint64_t id);
// Called when the client's connection ends: cancels the job unless it is done.
void kvt_http_job_abandon(kvt_http_job *j);

// While they wait, kvt_http_job_read and kvt_http_job_body watch the client's socket fd (-1: none) every
// 100 ms and cancel the job when the client has hung up (so a client that leaves while its request waits
// in the queue, or before a whole answer is ready, frees its place; a client that only shuts down its
// sending side counts as gone).
// True when the client on socket fd (>= 0) has hung up or shut down its sending side (the poll above, once).
bool kvt_http_fd_hung_up(int fd);
// Streams: copies up to max bytes of pending SSE output into buf, waiting for some; returns the number
// copied, or -1 at the end of the stream ([DONE] sent).
ssize_t kvt_http_job_read(kvt_http_job *j, int fd, char *buf, size_t max);

// Whole responses: waits for the end of the job; then *status is the HTTP status and *body the JSON text
// (newly allocated; NULL when out of memory): the response, or an error object (500 when the engine failed,
// 503 when it was cancelled by shutdown).
void kvt_http_job_body(kvt_http_job *j, int fd, int *status, char **body);

#endif
