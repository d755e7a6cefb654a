// gpu_layers.h - a model's last layers run on a CUDA device (llama.cpp's -ngl N, HELM's CPU/GPU split by
// layers): the CPU runs layers [0, il0), hands the residual stream over once per micro-batch, the device runs
// layers [il0, n_layer) with their weights and their KV cache in VRAM and hands the stream back for the output
// norm and the logits. Everything goes through the CUDA backend's table (src/cuda/kvt_cuda.h, loaded by
// backend_cuda.c), so this file is plain C and runs unchanged over the table's CPU emulation
// (tests/cuda/cuda_fake.c): the tests check the layer logic on machines without a GPU.
//
// The device KV cache (gpu_kv.h): per (sequence, layer) a table of blocks of block_len positions, K [block_len,
// n_head_kv, head_dim] f16 then V alike (the layout attn_paged reads), in VRAM within vram_kv_bytes and in pinned
// host memory past it (fetched ahead layer by layer on the COPY stream, or read there by the attention kernel). The
// tables live in VRAM too, one [seq_cap, max_blocks] array of block addresses per layer for K and one for V.
#ifndef KVT_GPU_LAYERS_H
#define KVT_GPU_LAYERS_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "../model/model.h"
#include "backend.h"
#include "backend_cuda.h"
#include "gpu_kv.h"

typedef struct {
    int32_t il0;           // first device layer; layers [il0, n_layer) run there (n_layer: none, with output)
    int64_t n_ubatch;      // most rows of one call
    int64_t n_ctx;         // most positions of a sequence
    int64_t block_len;     // positions per KV block
    int64_t vram_kv_bytes; // VRAM budget of the device KV blocks (0: unlimited; the rest in pinned host: gpu_kv.h)
    const char *evict;     // eviction policy of the VRAM tier (kv_policy.h; NULL: lru); borrowed
    int device;            // CUDA device id
    bool output;           // the output norm and the logits on the device too (llama.cpp: -ngl > n_layer)
    int32_t group_heads;   // KV heads per device KV block (--kv-granularity: 0 all, 1 head-wise, G group:G; divides
                           // n_head_kv): each group's blocks are fetched, evicted and read apart (gpu_kv.h)
    int64_t pinned_kv_bytes; // pinned host budget of the device KV blocks (0: unlimited; needs disk_dir: T2 below)
    const char *disk_dir;  // the device KV's disk tier (T2: a file there; NULL: none); borrowed for init only
    int64_t disk_kv_bytes; // its budget (0: unlimited)
    int64_t copy_min;      // the device KV's copies shorter than this cross in batched copy kernels (gpu_kv.h; 0: 1 MiB,
                           // < 0: every copy its own DMA)
    bool graphs;           // a micro-batch of at most KVT_CUDA_MMV_MAX_ROWS rows whose KV is all in VRAM (no VRAM or
                           // pinned budget): its layers captured as one CUDA graph and launched (updated in place when
                           // only arguments changed); a capture that fails fails the call and turns graphs off
    bool disk_sync;        // the device KV's disk I/O on the host after synchronizing both streams (gpu_kv.h), not on
                           // its disk thread
} kvt_gpu_layers_params;

typedef struct kvt_gpu_layers kvt_gpu_layers;

// Uploads the weights of layers [il0, n_layer) and sizes the device scratch for n_ubatch rows. b: an open
// backend (borrowed, must outlive the result); m: borrowed. KVT_ERR_UNSUPPORTED for what the device path does not
// run yet (named: an f32 or bf16 weight, head_dim_v != head_dim, a head_dim past KVT_CUDA_ATTN_MAX_HEAD_DIM);
// KVT_ERR_IO with the backend's message when a CUDA call fails; KVT_ERR_NOMEM.
kvt_status kvt_gpu_layers_init(const kvt_cuda_backend *b, const kvt_model *m, const kvt_gpu_layers_params *p,
                               kvt_gpu_layers **out, kvt_err *err);
void kvt_gpu_layers_free(kvt_gpu_layers *g);

// Runs the device layers over n rows (1 <= n <= n_ubatch): row t is the token of sequence seqs[t] at position
// pos[t], appended to that sequence's device KV (rows of one sequence consecutive, positions increasing, each
// sequence's first row at the position it holds: as kvt_decode_* give them). x: host [n, n_embd] f32, the residual
// stream after layer il0 - 1 on entry, after the last layer on return (without p.output). With p.output the device
// also computes the logits of rows out[0 .. n_out) (increasing; out NULL: the last n_out rows) into logits, host
// [n_out, n_vocab] (logits NULL: they stay in VRAM for kvt_gpu_layers_logits / _argmax until the next run), and x is
// not written back. Synchronous.
kvt_status kvt_gpu_layers_run(kvt_gpu_layers *g, int64_t n, const int32_t *seqs, const int64_t *pos, float *x,
                              const int64_t *out, int64_t n_out, float *logits, kvt_err *err);

// The logits the last run kept in VRAM (p.output, its logits NULL; n_out <= the rows it computed, else
// KVT_ERR_INVALID_ARG): rows [0, n_out) into dst, host [n_out, n_vocab]; or only their greedy ids, host [n_out]
// (kvt_cuda_api.argmax with flag_nonfinite: kvt_argmax's id, -1 for a row holding a NaN or an infinity), n_out x 4
// bytes crossing instead of n_out x n_vocab x 4. Either may be called, and again, until the next run. Synchronous.
kvt_status kvt_gpu_layers_logits(kvt_gpu_layers *g, int64_t n_out, float *dst, kvt_err *err);
kvt_status kvt_gpu_layers_argmax(kvt_gpu_layers *g, int64_t n_out, int32_t *ids, kvt_err *err);

// The CUDA backend (backend.h) over the device layers: lib (opened by kvt_cuda_backend_open) is taken over (closed by
// the backend's free, or here on failure); p and m as for kvt_gpu_layers_init. Its eval runs layers [p.il0, n_layer)
// (a range that differs is KVT_ERR_INVALID_ARG) and with a head the output (p.output); keeps the logits in VRAM when
// the head's logits are NULL (final softcap then applied on fetching; argmax falls back to KVT_ERR_UNSUPPORTED with a
// softcap, which is not monotone-safe in f32 ties).
kvt_status kvt_backend_cuda_init(kvt_cuda_backend *lib, const kvt_model *m, const kvt_gpu_layers_params *p,
                                 kvt_backend **out, kvt_err *err);
// The device layers of a backend made by kvt_backend_cuda_init (borrowed).
kvt_gpu_layers *kvt_backend_cuda_layers(kvt_backend *b);

// Sequences: dst gets a copy of src's device KV (its positions [0, n_past(src))); truncate keeps positions
// [0, n_keep) (freeing the blocks past them; n_keep 0 frees the sequence). An unknown sequence is a no-op.
kvt_status kvt_gpu_layers_seq_fork(kvt_gpu_layers *g, int32_t src, int32_t dst, kvt_err *err);
void kvt_gpu_layers_seq_truncate(kvt_gpu_layers *g, int32_t seq, int64_t n_keep);
// The serving scheduler's plan for the device KV (kvt_gpu_kv_set_plan).
kvt_status kvt_gpu_layers_set_plan(kvt_gpu_layers *g, const int32_t *seqs, int64_t n, kvt_err *err);

// What the device layers hold and moved since init.
typedef struct {
    int32_t layers;        // device layers
    bool output;           // the output norm and the logits there too
    int64_t weight_bytes;  // VRAM held by weights and norms
    int64_t kv_bytes;      // VRAM held by KV blocks (in use or free for reuse)
    int64_t h2d_bytes;     // host -> device: the residual stream, positions, block-table rows, KV blocks loaded
    int64_t d2h_bytes;     // device -> host: the residual stream or the logits, KV blocks written back
    int64_t d2d_bytes;     // device -> device: KV blocks copied by forks
    int64_t calls;         // kvt_gpu_layers_run calls (micro-batches)
    int64_t argmax_calls;  // greedy ids taken on the device (kvt_gpu_layers_argmax: only the ids downloaded)
    int64_t graph_steps;   // micro-batches whose layers ran as one CUDA graph (p.graphs)
    int64_t graph_updates; // of those, the graph updated in place (else instantiated anew)
    // Host wall time, ms: in kvt_gpu_layers_run / _logits / _argmax calls (run), of it in the device KV's calls (kv: the
    // blocks' bookkeeping, fetches queued, waits for slots and copies) and waiting for the device at the calls' ends
    // (sync: the device's work the host's queuing did not cover). run - kv - sync: the host queuing the layers' kernels
    // (and, when the device's launch queue is full, launches that wait for it: a device-bound run whose kernels are
    // small can show its device time there rather than in sync).
    double run_ms, kv_ms, sync_ms;
    kvt_gpu_kv_stats kv;   // the KV cache's tiers and transfers (included in the totals above)
} kvt_gpu_layers_stats;
void kvt_gpu_layers_get_stats(const kvt_gpu_layers *g, kvt_gpu_layers_stats *out);

#endif
