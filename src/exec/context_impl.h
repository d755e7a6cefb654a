// context_impl.h - the inference context's private state (forward.c) and the CPU backend over it (backend_cpu.c).
// Not for use outside src/exec.
#ifndef KVT_CONTEXT_IMPL_H
#define KVT_CONTEXT_IMPL_H

#include "../sparse/sparse.h"
#include "backend.h"
#include "context.h"
#include "weight_pf.h"

// A stage of the split: backend b runs layers [il0, il1), and the output when head is set (backend.h).
typedef struct {
    kvt_backend *b;
    int32_t il0, il1;
    bool head;
} kvt_stage;

// Decode micro-batches of up to this many tokens run the FFN's gated activation inside the gate/up job
// (backend_cpu.c).
#define KVT_FFN_FUSE_TOKENS 4

struct kvt_context {
    const kvt_model *m;
    kvt_context_params p;
    kvt_threadpool *pool;
    kvt_kv *kv;
    int64_t *n_past;     // [cap_seq] positions held per sequence (-1: sequence free)
    int32_t cap_seq;
    // activations of the CPU pass for a micro-batch of ub = p.n_ubatch tokens
    float *x;      // [ub, n_embd] residual stream (also what crosses to and from a device stage)
    float *xn;     // [ub, n_embd] normed input
    float *q;      // [ub, n_head*head_dim]
    float *k;      // [ub, n_head_kv*head_dim]
    float *v;      // [ub, n_head_kv*head_dim_v]
    float *att;    // [ub, n_head*head_dim_v]
    float *gate;   // [ub, n_ff]
    float *up;     // [ub, n_ff]
    float *tmp;    // [ub, n_embd] projection output
    void *qact;    // kvt_matmul_scratch_bytes(max_width, ub): activations in the weights' dot types
    void *qffn;    // kvt_matmul_scratch_bytes(n_ff, KVT_FFN_FUSE_TOKENS): decode's gated FFN activation in w_down's
                   // dot type, written by the gate/up job's tasks (backend_cpu.c) while they still read qact
    float *qkv_y;  // [KVT_FFN_FUSE_TOKENS, q + k + v rows] decode's fused q/k/v product (kvt_mm_opts' fused_y)
    _Atomic int *head_rows; // [n_head + n_head_kv] rows of each q, then k head computed in decode's q/k/v job
    _Atomic int *ffn_pair; // [n_ff / KVT_MATMUL_MIN_CHUNK_ROWS + 1] per row chunk of gate/up: how many of the two are done (backend_cpu.c)
    float *rope_cs;// [2, ub, n_rot] cos/sin per token: global layers, then local (sliding-window) layers
    float *logits; // [logits_rows, n_vocab]
    int64_t logits_rows;
    int64_t n_out;
    void **attn_scratch; // [n_threads] -> kvt_attn_scratch_bytes
    void *attn_ws;       // kvt_attn_workspace_bytes: chunk states of decode attention
    int64_t scratch_bytes;
    kvt_sparse *sp;      // sparse decode attention (NULL: off)
    // The split (backend.h): stages in layer order; the CPU backend is cpu_be (this context's own pass), a device's
    // is gpu_be (owned; NULL without -ngl / a plan's GPU units).
    kvt_backend cpu_be;
    kvt_backend *gpu_be;
    kvt_stage stages[3];
    int32_t n_stages;
    int32_t *ub_seq;     // [ub] the micro-batch's sequence per row (kvt_ubatch.row_seq)
    int64_t *ub_pos;     // [ub] its position per row (kvt_ubatch.row_pos)
    // Logits a stage kept in its backend (kvt_head.logits NULL): rows [lazy_row0, lazy_row0 + lazy_rows) of
    // logits, fetched by kvt_context_logits or only their greedy ids by kvt_context_argmax. lazy_be NULL: none.
    kvt_backend *lazy_be;
    int64_t lazy_row0, lazy_rows;
    bool lazy_failed;    // fetching them failed (the rows are NaN; kvt_context_argmax returns lazy_err)
    kvt_err lazy_err;
    // Decode's weight prefetch in the pool's idle time (weight_pf.h): the window of the next product job, posted by
    // backend_cpu.c, stepped by the pool's idle function (forward.c); wpf_budget bytes at most a window (0: off).
    kvt_wpf wpf;
    int64_t wpf_budget;
    float *embd;         // during kvt_decode_embd: where the micro-batch's normed rows go ([ub, n_embd]); else NULL
};

// The CPU backend of context c (its ops; c->cpu_be.ops = &kvt_backend_cpu_ops): the layers and the output as the
// CPU forward pass has always run them, over c's buffers and KV store; x must be c->x.
extern const kvt_backend_ops kvt_backend_cpu_ops;

#endif
