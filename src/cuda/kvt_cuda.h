// kvt_cuda.h - the C interface of kvtier's CUDA backend (src/cuda/*.cu, built by nvcc into
// build/libkvtier-cuda.so and loaded with dlopen by src/exec/backend_cuda.c, so that kvtier never
// links the CUDA runtime). Plain C: included by C11 and by CUDA C++.
//
// The library exports ONE symbol, kvt_cuda_get_api(abi_version), returning a table of function
// pointers (as ggml's backends do). Conventions of every entry:
//   - returns int: KVT_CUDA_OK (0) or one of the KVT_CUDA_ERR_* codes below; never exits or aborts
//     (two exceptions: ctx_free returns nothing, there being no context left to hold a message, and
//     last_error returns the message itself);
//   - on failure the message (naming the CUDA or cuBLAS call that failed and its error string) is
//     kept in the context and read with api->last_error(ctx); entries without a context write it to
//     a caller buffer err[err_len];
//   - "device" pointers are from api->dev_malloc (or inside such an allocation), "pinned" pointers
//     from api->host_malloc; plain host pointers are named "host";
//   - sizes are in elements unless the name says bytes; every matrix is row-major;
//   - kernels are enqueued on the context's compute stream (KVT_CUDA_STREAM_COMPUTE) and return
//     once launched: their device outputs are ready after api->stream_sync(ctx, COMPUTE) or an
//     event recorded after them. A launch error is reported at once; a fault inside a kernel by
//     the next synchronizing entry;
//   - a context is used by one host thread at a time; its entries are not re-entrant.
#ifndef KVT_CUDA_H
#define KVT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_CUDA_ABI_VERSION 9 // 2: kvt_cuda_attn_args.window; 3: host_device_ptr, host memory mapped;
                               // 4: kvt_cuda_attn_args.row_stride; 5: copy_batch; 6: argmax's flag_nonfinite;
                               // 7: CUDA graphs (graph_begin, graph_end, graph_free), workspace_reserve;
                               // 8: mul_mat_vec takes up to KVT_CUDA_MMV_BATCH_MAX rows (tiles of 8);
                               // 9: mul_mat_vec_multi
#define KVT_CUDA_API_SYMBOL "kvt_cuda_get_api"
// File name of the library (build/ beside the kvtier binaries)
#define KVT_CUDA_LIB_FILE "libkvtier-cuda.so"

// Status codes of every entry.
enum {
    KVT_CUDA_OK = 0,
    KVT_CUDA_ERR_ARG = 1,      // bad argument (type not handled, shape, null pointer, stream id)
    KVT_CUDA_ERR_RUNTIME = 2,  // a CUDA runtime call or kernel launch failed (message names it)
    KVT_CUDA_ERR_CUBLAS = 3,   // a cuBLAS call failed
    KVT_CUDA_ERR_NOMEM = 4,    // device or pinned host allocation failed
    KVT_CUDA_ERR_NO_DEVICE = 5 // no CUDA device, no driver, or the device id does not exist
};

// One copy of a batch (copy_batch): `bytes` bytes from src to dst, each a device address: device memory, or pinned
// host memory's device address (host_device_ptr).
typedef struct {
    void *dst;
    const void *src;
    uint64_t bytes;
} kvt_cuda_copy;
#define KVT_CUDA_COPY_BATCH_MAX 128 // copies of one copy_batch call (its list travels as the kernel's argument)

// Stream ids of a context: kernels run on COMPUTE; COPY carries transfers that overlap them.
enum { KVT_CUDA_STREAM_COMPUTE = 0, KVT_CUDA_STREAM_COPY = 1, KVT_CUDA_STREAM_COUNT = 2 };

// Weight / element types, numbered as kvt_type (src/kernels/dtype.h, GGUF's ids). Blocks are laid
// out exactly as in src/kernels/quant.h.
enum {
    KVT_CUDA_F32 = 0,
    KVT_CUDA_F16 = 1,
    KVT_CUDA_Q4_0 = 2,
    KVT_CUDA_Q4_1 = 3,
    KVT_CUDA_Q8_0 = 8,
    KVT_CUDA_Q4_K = 12,
    KVT_CUDA_Q5_K = 13,
    KVT_CUDA_Q6_K = 14,
    KVT_CUDA_BF16 = 30
};

// One product of mul_mat_vec_multi: y = W x, W device n_rows rows of `type` (as mul_mat_vec's), y device
// [n_tok, n_rows] f32.
typedef struct {
    int type;
    const void *W;
    int64_t n_rows;
    float *y;
} kvt_cuda_mv;
// Most products of one mul_mat_vec_multi call.
#define KVT_CUDA_MV_MULTI_MAX 4

// Activation rows of one register tile of mul_mat_vec (its kernels hold this many sums per weight row).
#define KVT_CUDA_MMV_MAX_ROWS 8
// Most activation rows of one mul_mat_vec call: tiles of KVT_CUDA_MMV_MAX_ROWS, each row summed as in a call of its
// own (a row's result does not depend on the rows beside it: batch invariance up to this many rows).
#define KVT_CUDA_MMV_BATCH_MAX 64
// Positions per chunk of paged attention (each chunk one thread block; states merged in order).
#define KVT_CUDA_ATTN_CHUNK 64
// Largest head_dim paged attention handles.
#define KVT_CUDA_ATTN_MAX_HEAD_DIM 256
// Bytes of a context's error message buffer.
#define KVT_CUDA_ERR_MAX 512

typedef struct kvt_cuda_ctx kvt_cuda_ctx;     // opaque: device id, 2 streams, cuBLAS handle, workspace, message
typedef struct kvt_cuda_event kvt_cuda_event; // opaque: a cudaEvent_t
typedef struct kvt_cuda_graph kvt_cuda_graph; // opaque: an executable CUDA graph (cudaGraphExec_t), reused step to step

typedef struct {
    char name[96];
    int cc_major, cc_minor;      // compute capability
    int n_sm;                    // streaming multiprocessors
    int64_t vram_bytes;          // total device memory
    int64_t vram_free_bytes;     // free now (cudaMemGetInfo)
} kvt_cuda_device_info;

// Paged attention of n_q query rows over f16 KV blocks: decode (one row per sequence) and prefill or
// mixed batches (one row per token, each attending the prefix its position sees).
// K block: [block_len, n_kv_head, head_dim] f16, 4-byte aligned; V block likewise (same head_dim).
// Query row i belongs to sequence s = row_seq[i] (row_seq NULL: s = i) and attends positions
// [0, seq_len[i]) of it (causal prefill: seq_len[i] = its position + 1). Position p is row
// p % block_len of block p / block_len, whose K is k_blocks[s * max_blocks + p / block_len] (a device
// pointer), V in v_blocks alike; the last block may be partial (rows past seq_len are never read).
// Query head h reads KV head h / (n_head / n_kv_head) (GQA). window > 0 (a sliding-window layer): row i attends
// only its last `window` positions, [max(0, seq_len[i] - window), seq_len[i]). The positions are cut into chunks of
// KVT_CUDA_ATTN_CHUNK, each attended by one thread block from a fresh online-softmax state (m, s, o);
// the chunk states of a (row, head) are then merged in chunk order, so the result does not depend on
// scheduling, nor on the other rows of the call.
typedef struct {
    int32_t n_q;                // query rows, 1 .. 65535
    int32_t n_head, n_kv_head;  // n_head <= 65535, a multiple of n_kv_head
    int32_t head_dim;           // <= KVT_CUDA_ATTN_MAX_HEAD_DIM, a multiple of 2
    int32_t block_len;          // positions per KV block, >= 1
    int32_t max_blocks;         // row length of the block tables, >= ceil(max_seq_len / block_len)
    int32_t max_seq_len;        // host bound: every seq_len[i] <= max_seq_len (sizes the grid)
    float scale;                // score scale, usually 1/sqrt(head_dim)
    const float *q;             // device [n_q, n_head, head_dim] f32 (already roped)
    const void *const *k_blocks;// device [sequences, max_blocks] device pointers to K blocks
    const void *const *v_blocks;// device [sequences, max_blocks] device pointers to V blocks
    const int32_t *row_seq;     // device [n_q]: the block-table row of each query row, or NULL (row i)
    const int32_t *seq_len;     // device [n_q]: positions attended, each in [1, max_seq_len]
    float *out;                 // device [n_q, n_head, head_dim] f32
    int32_t window;             // > 0: positions attended per row (sliding window); 0: all of seq_len
    int32_t row_stride;         // floats from one query row to the next in q and out (0: n_head * head_dim): the
                                // heads of one KV head group of wider rows (the device KV's head-wise blocks)
} kvt_cuda_attn_args;

// RoPE over [n_tok, n_head, head_dim] f32 in place; rotates the first n_rot dims of each head.
// neox = 0: pairs (2i, 2i+1); neox = 1: pairs (i, i + n_rot/2). theta_i = pos * freq_scale *
// base^(-2i/n_rot) / ff[i], computed as kvt_rope_cache does (src/kernels/vec.h).
typedef struct {
    int32_t n_tok, n_head, head_dim, n_rot; // n_rot even, <= head_dim
    int32_t neox;
    float freq_base, freq_scale;
    const float *freq_factors;  // device [n_rot/2] or NULL
    const int32_t *pos;         // device [n_tok] positions
} kvt_cuda_rope_args;

typedef struct {
    int abi_version;            // KVT_CUDA_ABI_VERSION of the library
    int struct_size;            // sizeof(kvt_cuda_api) of the library

    // ---- devices (no context) ----
    // *out = number of CUDA devices. 0 devices is KVT_CUDA_ERR_NO_DEVICE with a message (also for
    // a missing driver: cudaGetDeviceCount's error string).
    int (*device_count)(int *out, char *err, int err_len);
    // Fills *out for device `device`. KVT_CUDA_ERR_NO_DEVICE when it does not exist.
    int (*device_info)(int device, kvt_cuda_device_info *out, char *err, int err_len);

    // ---- context ----
    // Creates a context on device `device`: selects it, creates the COMPUTE and COPY streams
    // (non-blocking) and a cuBLAS handle bound to COMPUTE. *out is owned by the caller, freed with
    // ctx_free. On failure *out is NULL and the message is in err.
    int (*ctx_init)(int device, kvt_cuda_ctx **out, char *err, int err_len);
    // Synchronizes and frees everything the context owns (streams, handle, workspace). NULL is a no-op.
    void (*ctx_free)(kvt_cuda_ctx *ctx);
    // The message of the last failed entry of ctx ("" if none); storage owned by ctx.
    const char *(*last_error)(const kvt_cuda_ctx *ctx);

    // ---- memory ----
    // *out = device allocation of `bytes` bytes (256-byte aligned), owned by the caller.
    int (*dev_malloc)(kvt_cuda_ctx *ctx, size_t bytes, void **out);
    int (*dev_free)(kvt_cuda_ctx *ctx, void *p); // p from dev_malloc or NULL
    // *out = pinned (page-locked) host allocation of `bytes` bytes, owned by the caller; mapped into the device's
    // address space (host_device_ptr), so that kernels may read and write it over the bus (zero-copy).
    int (*host_malloc)(kvt_cuda_ctx *ctx, size_t bytes, void **out);
    int (*host_free)(kvt_cuda_ctx *ctx, void *p); // p from host_malloc or NULL
    // Sets `bytes` bytes of device memory to `byte`, on the COMPUTE stream (0xff fills f32 with NaN).
    int (*memset_dev)(kvt_cuda_ctx *ctx, void *dst, int byte, size_t bytes);

    // ---- transfers, streams, events ----
    // Copies `bytes` bytes on stream `stream`; asynchronous when host memory is pinned.
    // The host buffer must stay valid until the stream (or an event after it) completes.
    int (*copy_h2d)(kvt_cuda_ctx *ctx, void *dst_dev, const void *src_host, size_t bytes, int stream);
    int (*copy_d2h)(kvt_cuda_ctx *ctx, void *dst_host, const void *src_dev, size_t bytes, int stream);
    int (*copy_d2d)(kvt_cuda_ctx *ctx, void *dst_dev, const void *src_dev, size_t bytes, int stream);
    // Events (timing disabled): created by event_create, owned by the caller, freed by event_free.
    int (*event_create)(kvt_cuda_ctx *ctx, kvt_cuda_event **out);
    int (*event_free)(kvt_cuda_ctx *ctx, kvt_cuda_event *ev);
    int (*event_record)(kvt_cuda_ctx *ctx, kvt_cuda_event *ev, int stream); // ev completes after the work before it
    int (*stream_wait)(kvt_cuda_ctx *ctx, int stream, kvt_cuda_event *ev);  // later work on stream waits for ev
    int (*event_sync)(kvt_cuda_ctx *ctx, kvt_cuda_event *ev);               // host waits for ev
    int (*stream_sync)(kvt_cuda_ctx *ctx, int stream);                      // host waits for the stream

    // ---- matrix x activations ----
    // y[t, r] = sum_k W[r, k] * x[t, k] for t < n_tok, r < n_rows.
    // W: device, n_rows rows of n_cols elements of `type` (one of the weight types above but F32),
    //    each row kvt_row_size(type, n_cols) bytes, consecutive; n_cols a multiple of the type's block
    //    and of 8 (KVT_CUDA_ERR_ARG otherwise).
    // x: device [n_tok, n_cols] f32, 16-byte aligned; y: device [n_tok, n_rows] f32 (not overlapping x).
    // mul_mat_vec: 1 <= n_tok <= KVT_CUDA_MMV_BATCH_MAX; each weight element is read from memory once for all n_tok
    //   rows (tiles of KVT_CUDA_MMV_MAX_ROWS rows, the later tiles' weights from cache); every row's y bit for bit
    //   what a call with that row alone gives (same sums in the same order), so results do not depend on the batch;
    //   activations of the quantized types are quantized to q8_1 (blocks of 32, f32 scale) in a buffer of the context,
    //   with integer dot products (the default), or, in a context made while the environment has KVT_CUDA_MMV=f32
    //   (ctx_init refuses any value but f32 and q8_1), used as f32; F16 and BF16 always take f32 activations.
    int (*mul_mat_vec)(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols,
                       const float *x, int64_t n_tok, float *y);
    // mul_mat_vec_multi (ABI 9): the n products mv[0 .. n) (1 <= n <= KVT_CUDA_MV_MULTI_MAX) of the same x, each y bit
    //   for bit its mul_mat_vec call's; x is quantized to q8_1 once for all of them (a layer's q, k and v, or gate and
    //   up: one quantization launch, not one per product). No y may overlap x.
    int (*mul_mat_vec_multi)(kvt_cuda_ctx *ctx, const kvt_cuda_mv *mv, int n, int64_t n_cols, const float *x, int64_t n_tok);
    // mul_mat_gemm: any n_tok >= 1. Dequantizes W to f16 and x to f16 in the context's workspace
    //   (grown as needed: (n_rows + n_tok) * n_cols * 2 bytes), then cublasGemmEx f16 x f16 -> f32
    //   (CUBLAS_COMPUTE_32F).
    int (*mul_mat_gemm)(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols,
                        const float *x, int64_t n_tok, float *y);
    // dst[i] = element i of src as f16, n elements of `type` (F32 included), n a multiple of the block.
    int (*dequant_f16)(kvt_cuda_ctx *ctx, int type, const void *src, int64_t n, uint16_t *dst);

    // ---- element-wise (all device f32 unless noted) ----
    // y[r, :] = x[r, :] / rms(x[r, :]) * w  for r < n_rows, rows of n; w [n] or NULL (no weight).
    // Per-head q/k norm is this call with n = head_dim and n_rows = n_tok * n_head. y may be x.
    int (*rmsnorm)(kvt_cuda_ctx *ctx, const float *x, const float *w, float *y, int64_t n_rows, int64_t n, float eps);
    int (*rope)(kvt_cuda_ctx *ctx, float *x, const kvt_cuda_rope_args *a);
    // g[i] = silu(g[i]) * u[i] (swiglu) or gelu_tanh(g[i]) * u[i] (geglu), i < n.
    int (*swiglu)(kvt_cuda_ctx *ctx, float *g, const float *u, int64_t n);
    int (*geglu)(kvt_cuda_ctx *ctx, float *g, const float *u, int64_t n);
    // y[i] += x[i], i < n (residual add).
    int (*add)(kvt_cuda_ctx *ctx, float *y, const float *x, int64_t n);
    // out[t, :] = row ids[t] of W as f32, t < n_ids; W as for mul_mat_vec (F32 allowed); ids device
    // int32 [n_ids], each in [0, n_rows) (checked on the device: out-of-range rows give NaN).
    int (*get_rows)(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols,
                    const int32_t *ids, int64_t n_ids, float *out);
    // out[r] = kvt_argmax(x[r, :]) (src/sched/sampler.c: the index of the largest, ties to the lowest; a NaN at
    // index 0 wins, a NaN elsewhere never), r < n_rows; with flag_nonfinite, -1 for a row holding a NaN or an
    // infinity (ABI 6: greedy decoding downloads the ids alone and still detects non-finite logits).
    int (*argmax)(kvt_cuda_ctx *ctx, const float *x, int64_t n_rows, int64_t n, int32_t *out, int flag_nonfinite);

    // ---- attention ----
    // Paged attention of query rows (kvt_cuda_attn_args above). Uses the context's workspace for the
    // chunk states: n_q * n_head * ceil(max_seq_len / KVT_CUDA_ATTN_CHUNK) * (head_dim + 2) floats. In a context made
    // while the environment has KVT_CUDA_ATTN=tiled (ctx_init refuses any value but chunked and tiled), a call of at
    // least 16 rows runs instead one kernel over tiles of 8 rows and 32 positions (no workspace, no chunks; the
    // result differs from the chunked one's in rounding only).
    int (*attn_paged)(kvt_cuda_ctx *ctx, const kvt_cuda_attn_args *a);

    // ---- zero-copy (ABI 3) ----
    // *out = the device address of pinned host memory `host` (inside a host_malloc allocation), which kernels
    // may read and write over the bus (cudaHostGetDevicePointer; the same address on every system with unified
    // addressing). A kernel reading it sees the host bytes as they are when it runs (order it with events).
    int (*host_device_ptr)(kvt_cuda_ctx *ctx, void *host, void **out);

    // ---- batched copies (ABI 5) ----
    // The n copies of list (1 <= n <= KVT_CUDA_COPY_BATCH_MAX; list is read during the call: any host array) as ONE
    // kernel on stream `stream`: thread blocks copy 16 bytes at a time (bytewise where an address or size is not a
    // multiple of 16), reading or writing over the bus where an address is pinned host memory, so that many small
    // scattered blocks cross PCIe in one transfer instead of one DMA each. The copies must not overlap each other.
    int (*copy_batch)(kvt_cuda_ctx *ctx, const kvt_cuda_copy *list, int n, int stream);

    // ---- CUDA graphs (ABI 7) ----
    // graph_begin: from now on the work queued on COMPUTE is captured, not run (cudaStreamBeginCapture, thread-local
    //   mode). Until graph_end nothing may make the host wait or allocate: stream_sync, event_sync, dev_malloc/free,
    //   host_malloc/free, a copy from pageable host memory, a workspace that must grow (workspace_reserve first) fail
    //   and spoil the capture; a stream that waits for an event recorded in the capture joins it, and must be joined
    //   back (an event recorded on it after its last work, which COMPUTE waits for) before graph_end.
    // graph_end: ends the capture. launch = 0: discards it. launch = 1: the captured work becomes *g's executable graph
    //   (*g NULL the first time: created here, owned by the caller, freed by graph_free): updated in place when its
    //   topology is the one of *g's last (cudaGraphExecUpdate: only kernel arguments and copy addresses changed;
    //   *updated = 1), else instantiated anew (*updated = 0); then launched on COMPUTE. On failure (a spoiled capture,
    //   an unjoined stream, an instantiation error) nothing captured ran, the capture is over and the message says why.
    int (*graph_begin)(kvt_cuda_ctx *ctx);
    int (*graph_end)(kvt_cuda_ctx *ctx, kvt_cuda_graph **g, int launch, int *updated);
    int (*graph_free)(kvt_cuda_ctx *ctx, kvt_cuda_graph *g); // NULL is a no-op
    // Grows the context's workspace to at least `bytes` now (synchronizing COMPUTE if it grows), so that the kernels
    // of a capture find it large enough (attention's chunk states: see attn_paged).
    int (*workspace_reserve)(kvt_cuda_ctx *ctx, size_t bytes);
} kvt_cuda_api;

// The library's table if abi_version == KVT_CUDA_ABI_VERSION, else NULL. Static storage.
const kvt_cuda_api *kvt_cuda_get_api(int abi_version);
typedef const kvt_cuda_api *(*kvt_cuda_get_api_fn)(int abi_version);

#ifdef __cplusplus
}
#endif

#endif
