// http.h - the OpenAI-compatible HTTP server of `kvtier serve` (libmicrohttpd + jansson).
//
// Built only with both libraries (KVT_HAVE_MICROHTTPD and KVT_HAVE_JANSSON). One thread per connection
// (libmicrohttpd's), so a slow client never holds up another; completions are jobs of a kvt_engine
// (engine.h), which the server only submits and cancels. Endpoints:
//   GET  /health               503 {"error":{...},"status":"loading"} until kvt_http_set_ready, then 200 {"status":"ok"}
//   GET  /v1/models            the one model, with llama-server's "meta" (kvt_http_set_info)
//   POST /v1/completions, /v1/chat/completions   (request.h lists the fields; stream: SSE, data: [DONE])
//   POST /tokenize, /detokenize
//   GET  /metrics              Prometheus text (501 unless params.metrics)
//   POST /completion, GET /props   llama-server's native shapes (native.h); GET /slots: 501
//   POST /infill               fill in the middle (infill.h): /completion's answer; 501 without FIM tokens
//   POST /v1/embeddings, /embeddings, /embedding   embeddings (embed_api.h; 501 without kvt_http_set_embedder)
// Errors are OpenAI error objects: 400 (malformed JSON, bad fields, prompt longer than the context),
// 401 (api_key set, no "Authorization: Bearer KEY"; /health is open), 404 unknown path, 405 wrong
// method (with Allow), 413 body over max_body, 503 + Retry-After (queue full, loading, stopping).
// A client that disconnects cancels its job.
#ifndef KVT_HTTP_H
#define KVT_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "chat_template.h"
#include "embed.h"
#include "engine.h"
#include "request.h"
#include "response.h"

typedef struct {
    const char *host;       // address to listen on (e.g. "127.0.0.1", "::1", "0.0.0.0")
    int port;               // 0: any free port (kvt_http_port says which)
    const char *api_key;    // NULL: no authentication
    bool metrics;           // serve GET /metrics
    size_t max_body;        // bytes of a request body at most (0: 8 MiB)
    int max_connections;    // simultaneous connections (0: 256)
    int timeout_s;          // idle connection timeout in seconds (0: 600)
    int64_t infill_batch;   // POST /infill's prefix and suffix budget, llama-server's -b (0: 2048, its default)
    bool spm_infill;        // POST /infill: suffix before prefix (llama-server's --spm-infill)
    // the sampling settings requests start from (the server's sampling flags; its DRY breakers, when set, the
    // breakers of a request that sends none); NULL: llama-server's defaults. Copied, the breakers' strings too.
    const kvt_req_defaults *defaults;
} kvt_http_params;

typedef struct kvt_http kvt_http;

// Listens and answers at once (/health: loading). Errors: KVT_ERR_IO naming host:port; KVT_ERR_NOMEM.
kvt_status kvt_http_start(const kvt_http_params *p, kvt_http **out, kvt_err *err);
// The port listened on.
int kvt_http_port(const kvt_http *h);
// Serving starts: the engine, tokenizer and chat template (all borrowed; they must outlive
// kvt_http_stop) and the model's name for responses (copied).
void kvt_http_set_ready(kvt_http *h, kvt_engine *e, const kvt_tokenizer *tok, const kvt_chat_template *tmpl,
                        const char *model_id);
// What GET /props reports beyond the engine: the model file's path and the GGUF's chat template text (len bytes;
// NULL when kvtier does not use it, e.g. --chat-template NAME), copied; and what GET /v1/models' "meta" tells of
// the model (copied; NULL: no "meta"). Call before kvt_http_set_ready.
void kvt_http_set_info(kvt_http *h, const char *model_path, const char *chat_template, size_t chat_template_len,
                       const kvt_resp_model_meta *meta);
// The embedder of the embeddings endpoints (borrowed: it must outlive kvt_http_stop); without one they answer 501.
// Call before kvt_http_set_ready.
void kvt_http_set_embedder(kvt_http *h, kvt_embedder *e);
// Stops accepting connections (requests on open connections get 503 from now on).
void kvt_http_quiesce(kvt_http *h);
// Waits until every request that had an engine job has sent its whole response (after kvt_engine_shutdown: a
// stream its error event and [DONE], a whole answer its 503), at most timeout_ms; false when some had not.
bool kvt_http_drain(kvt_http *h, int64_t timeout_ms);
// Closes every connection and stops the server's threads; then frees. Cancel or finish the engine's jobs
// first (kvt_engine_shutdown, then kvt_http_drain) so that no response waits for one or is cut off.
void kvt_http_stop(kvt_http *h);

#endif
