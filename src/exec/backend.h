// backend.h - the table of function pointers behind which the forward pass runs a model's layers (ggml's backends,
// at the grain of a layer range): the forward pass (forward.c) embeds a micro-batch's tokens into the residual stream
// on the host, then hands it to each stage of its split in layer order, a stage being a backend, a layer range
// [il0, il1) and whether it computes the output (the final norm and the logits). The CPU pass is one instance
// (backend_cpu.c: the layers exactly as before, logits bit for bit); the CUDA device layers are another
// (backend_gpu.c over gpu_layers.h, loaded at run time: kvtier without the CUDA library or a device has the CPU
// stage alone and behaves as before). A split of -ngl N is [cpu 0..n_layer-N] [cuda n_layer-N..n_layer] [cpu output];
// a plan's or -ngl > n_layer puts the output in the cuda stage. The residual stream crosses between stages on the
// host ([n, n_embd] f32, one transfer each way per device stage and micro-batch).
//
// Why layer ranges and not ops: the CPU pass fuses its element-wise work across op boundaries (a layer's residual
// add with the next layer's pre-norm, per token on the pool) and the device keeps its activations, weights and KV in
// VRAM for the whole range; an op-level table would add a host/device boundary per op or change the CPU's order of
// operations (and so its bits). Buffers are each backend's own (allocated at its init, freed by `free`); every entry
// is synchronous: when it returns, the host's buffers hold its results and the backend holds no reference to them.
#ifndef KVT_BACKEND_H
#define KVT_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"

// A micro-batch of n tokens: either a run of one sequence at positions [pos0, pos0 + n) (seqs == NULL), or rows of
// several sequences (row t: sequence seqs[t] at position pos[t]; a sequence's rows consecutive, positions
// increasing). row_seq / row_pos give every row's sequence and position in both forms. All borrowed for a call.
typedef struct {
    const int32_t *tokens;      // [n]
    int64_t n;
    int32_t seq;                // the sequence of a run
    int64_t pos0;               // first position of a run
    const int32_t *seqs;        // [n] sequences of a batch across sequences, or NULL
    const int64_t *pos;         // [n] their positions
    bool prompt;                // a run: its tokens are a prompt's (sparse attention: dense, whatever their number)
    const uint8_t *prompt_rows; // [n] across sequences: row t is a prompt's (NULL: none)
    const int32_t *row_seq;     // [n] every row's sequence
    const int64_t *row_pos;     // [n] every row's position
} kvt_ubatch;

// The output of a stage that computes it: the logits of rows out[0 .. n_out) (increasing; out NULL: the last n_out
// rows) into logits, host [n_out, n_vocab] f32 (final softcap applied). logits NULL: a backend with a `logits` entry
// may keep them (in VRAM) for `logits` / `argmax` to fetch until its next eval; one without writes them nowhere.
// embd (not NULL): instead of the logits, the rows' hidden states after the output norm (the LM head's input) into
// embd, host [n_out, n_embd] f32; the LM head is skipped and logits is ignored. The CPU backend alone offers it
// (forward.c refuses it for an output on a device).
typedef struct {
    const int64_t *out;
    int64_t n_out;
    float *logits;
    float *embd;
} kvt_head;

typedef struct kvt_backend kvt_backend;

typedef struct {
    const char *name; // "cpu", "cuda"
    // Runs layers [il0, il1) (il0 == il1: none) over u. x: host [n, n_embd] f32, the residual stream after layer
    // il0 - 1 on entry, after layer il1 - 1 on return (when head is NULL; with a head x may be left as it was).
    // head: also the output of u's rows (kvt_head). Returns the backend's status, with a message naming what failed
    // (KVT_ERR_IO: a device call; the KV store's and attention's statuses on the CPU).
    kvt_status (*eval)(kvt_backend *b, const kvt_ubatch *u, int32_t il0, int32_t il1, float *x, const kvt_head *head,
                       kvt_err *err);
    // Logits kept by the last eval whose head had logits NULL: rows [0, n_out) into dst, host [n_out, n_vocab] f32.
    // NULL entry: the backend always writes the host's logits in eval.
    kvt_status (*logits)(kvt_backend *b, int64_t n_out, float *dst, kvt_err *err);
    // Of the same kept logits, only the greedy ids: ids[r] = kvt_argmax of row r (src/sched/sampler.c: ties to the
    // lowest index; a NaN at index 0 wins, elsewhere never), or -1 where row r holds a NaN or an infinity (the caller
    // then fetches the logits to diagnose them). Only n_out ids cross to the host. NULL entry: not offered.
    kvt_status (*argmax)(kvt_backend *b, int64_t n_out, int32_t *ids, kvt_err *err);
    // The backend's own KV of its layers (NULL entries: it keeps none beyond the CPU store, which forward.c handles):
    // dst gets a copy of src's; truncate keeps positions [0, n_keep) (0 frees the sequence); the serving scheduler's
    // plan of its next iterations (a hint: only the order of copies changes).
    kvt_status (*seq_fork)(kvt_backend *b, int32_t src, int32_t dst, kvt_err *err);
    void (*seq_truncate)(kvt_backend *b, int32_t seq, int64_t n_keep);
    void (*set_plan)(kvt_backend *b, const int32_t *seqs, int64_t n);
    // Frees b and everything it holds (NULL entry: b is not owned by the caller).
    void (*free)(kvt_backend *b);
} kvt_backend_ops;

struct kvt_backend {
    const kvt_backend_ops *ops;
};

#endif
