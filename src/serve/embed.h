// embed.h - embeddings for `kvtier serve --embeddings` (llama-server's --embeddings --pooling): pooling of a
// prompt's hidden states, their normalisation, and the embedder that computes them on a context of its own.
//
// Shapes and units: hidden states are f32 rows [n, n_embd], a row per token, the model's hidden state after the output
// norm (kvt_decode_embd: the LM head's input). A pooled embedding is one row [n_embd] f32. Normalisation (llama.cpp's
// embd_normalize): -1 none, 0 the largest magnitude scaled to 32760 (an int16 range), 2 euclidean (unit length, the
// default), p > 0 the p-norm; the sums are taken in double, a zero vector stays zero.
//
// The embedder owns a kvt_context of its own on the model (borrowed: it must outlive the embedder), with a plain
// contiguous KV of n_ctx positions on the CPU: an embedding request never touches the serving engine's sequences, KV
// tiers or prefix cache. Requests are serialised by the embedder's mutex; each runs on sequence 0 from position 0,
// which kvt_decode_embd leaves empty again, so a result depends on its tokens only (bit for bit: not on the requests
// before it, n_ubatch or the thread count). Its compute threads share the cores with the engine's while both work.
#ifndef KVT_EMBED_H
#define KVT_EMBED_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "../exec/context.h"
#include "../gguf/gguf.h"
#include "../model/model.h"

// How a prompt's rows become one embedding (llama.cpp's pooling types): NONE keeps every row (no normalisation, as
// llama-server), MEAN averages them, CLS takes the first, LAST the last.
typedef enum { KVT_POOL_NONE, KVT_POOL_MEAN, KVT_POOL_CLS, KVT_POOL_LAST } kvt_pooling;

// "none", "mean", "cls", "last" -> *out; false for another name.
bool kvt_pooling_parse(const char *name, kvt_pooling *out);
const char *kvt_pooling_name(kvt_pooling p);

// The pooling a server starts with, llama-server's rule: *given when the command line names one (it wins; the GGUF is
// not read then), else the GGUF's `<general.architecture>.pooling_type` (an integer; llama.cpp's numbering: 0 none,
// 1 mean, 2 cls, 3 last, 4 rank), else MEAN: kvtier's fallback for models that carry no key (chat models;
// llama-server takes none there). *from_gguf (may be NULL): whether the key decided. Errors, naming the file and the
// key: KVT_ERR_UNSUPPORTED for 4 (rank: a reranking head, which kvtier does not have), KVT_ERR_FORMAT for another
// value or a key of another type. g is borrowed.
kvt_status kvt_embd_pooling_choose(const kvt_gguf *g, const kvt_pooling *given, kvt_pooling *out, bool *from_gguf,
                                   kvt_err *err);

// out[E] from h[n, E] (n >= 1) by p (MEAN, CLS or LAST; NONE copies the last row). MEAN sums in double, in row order.
void kvt_embd_pool(kvt_pooling p, const float *h, int64_t n, int64_t E, float *out);
// out[E] = in[E] normalised by norm (above; out may be in). false for norm < -1 (out untouched).
bool kvt_embd_normalize(const float *in, float *out, int64_t E, int norm);

typedef struct kvt_embedder kvt_embedder;

// An embedder on model m: cp gives n_ctx, n_threads, n_ubatch and kv_type (the rest of it is not used: no tiers, no
// sparse attention, no device layers). Errors: kvt_context_init's.
kvt_status kvt_embedder_create(const kvt_model *m, const kvt_context_params *cp, kvt_pooling pooling,
                               kvt_embedder **out, kvt_err *err);
void kvt_embedder_free(kvt_embedder *e);
kvt_pooling kvt_embedder_pooling(const kvt_embedder *e);
int64_t kvt_embedder_n_embd(const kvt_embedder *e);
// Positions a prompt may have at most.
int64_t kvt_embedder_n_ctx(const kvt_embedder *e);
// The embedding of tokens[0..n): pooled and normalised by norm ([n_embd] into out), or with pooling NONE every row
// as computed ([n, n_embd]). Thread-safe (serialised). KVT_ERR_INVALID_ARG for n < 1, a bad token id or norm < -1;
// KVT_ERR_BUDGET for n over n_ctx; KVT_ERR_NOMEM. cancel (NULL: none; kvt_decode_embd's) is asked before each
// micro-batch, and every 50 ms while the call waits for another call (input) to finish; on true it ends
// KVT_ERR_CANCELLED (out partial), the embedder ready for the next request, whose result it does not change.
kvt_status kvt_embedder_run(kvt_embedder *e, const int32_t *tokens, int64_t n, int norm, float *out,
                            kvt_cancel_fn cancel, void *cancel_user, kvt_err *err);

#endif
