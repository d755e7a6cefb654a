// embed_api.h - the embeddings endpoints of `kvtier serve --embeddings` (llama-server's): POST /v1/embeddings in
// OpenAI's shape, POST /embeddings and /embedding in llama-server's own.
//
// Request: "input" (or "content", which gives the native answer on /v1/embeddings too, as llama-server): a string, an
// array of token ids, or an array of those (one embedding each); "encoding_format" "float" (default) or "base64"
// (OpenAI: the f32 bytes, little-endian); "embd_normalize" (embed.h; default 2: unit length); "model" echoed. Each
// input is tokenized with the model's special tokens (BOS where it adds one) and control-token strings parsed, as
// llama-server does.
// Answer (OpenAI): {"model", "object":"list", "usage":{"prompt_tokens","total_tokens"}, "data":[{"embedding":[..],
// "index":i, "object":"embedding"}]}; pooling none is refused there (400), as llama-server does. Native:
// [{"index":i, "embedding":[[..]]}]: one row (pooled), or with pooling none every token's row, not normalised.
// Errors (OpenAI error objects naming the field): 400 no or empty input, a wrong type, a token id out of range, an
// input longer than the context; 501 when the server runs without --embeddings.
#ifndef KVT_EMBED_API_H
#define KVT_EMBED_API_H

#include <stdbool.h>
#include <stddef.h>

#include "../model/tokenizer.h"
#include "embed.h"

// Answers one request: *status the HTTP status, *out the JSON body (malloc'd, caller frees; an OpenAI error object when
// *status != 200; NULL only when out of memory). e NULL: embeddings are off (501). body: len bytes; model_id: the
// "model" of the answer when the request names none. Thread-safe (the embedder serialises the computation).
// cancel (NULL: none) is kvt_embedder_run's: asked before each micro-batch of each input (and while waiting for the
// embedder); on true the answer is 503 "the request was cancelled" and nothing more is computed.
void kvt_embd_answer(kvt_embedder *e, const kvt_tokenizer *tok, const char *model_id, bool oai, const char *body,
                     size_t len, kvt_cancel_fn cancel, void *cancel_user, int *status, char **out);

#endif
