// cuda_fake.c - a CPU emulation of the CUDA backend table (src/cuda/kvt_cuda.h), for checking the
// suite `cuda` itself (tests/test_cuda.c: its buffers, block tables, poisoning and comparisons) on
// machines without a GPU: `make cuda-check` builds it into build/libkvtier-cuda-fake.so and runs
// `KVT_CUDA_LIB=build/libkvtier-cuda-fake.so build/kvtier-tests cuda`. "Device" memory is host
// memory (so is pinned memory: host_device_ptr is the identity). The kernels follow the contracts of
// kvt_cuda.h with plain C (the attention with the same chunked online-softmax as src/cuda/cuda_attn.cu);
// they say nothing about the CUDA kernels' correctness. Test-only: never loaded by kvtier.
//
// Streams. Every kernel, memset and copy is an operation queued on its stream; event_record marks a point of a
// stream and stream_wait queues a wait for that point on another. How the queues run is chosen by the
// environment variable KVT_FAKE_ORDER, so that a caller's missing event shows as wrong bytes:
//   unset      both streams run each operation at once (in program order);
//   copy-late  COMPUTE runs at once (until it reaches a wait not yet satisfied); COPY runs only when something
//              forces it: a wait of COMPUTE on one of its events, a synchronization, a free. A kernel that reads
//              what a copy brings, without waiting for the copy's event, reads the old bytes;
//   compute-late  the reverse: a copy that overwrites what a kernel queued before it still has to read, without
//              waiting for that kernel, runs first.
// As CUDA does: a copy from pageable (not host_malloc) host memory reads its source when queued; a copy to
// pageable host memory returns once done (it forces its stream); dev_free, host_free, ctx_free and the
// synchronizing entries run what they wait for. An operation that fails while deferred reports its error at the
// next synchronizing entry (as a fault inside a CUDA kernel does).
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/cuda/kvt_cuda.h"
#include "../../src/kernels/f16.h"
#include "../../src/kernels/quant.h"
#include "../../src/kernels/vec.h"

// One queued operation of a stream (the arguments of the entry that queued it).
enum { OP_WAIT, OP_COPY, OP_BATCH, OP_MEMSET, OP_MMV, OP_MM, OP_DEQ, OP_NORM, OP_ROPE, OP_SWIGLU, OP_GEGLU, OP_ADD, OP_ROWS,
       OP_ARGMAX, OP_ATTN };
typedef struct {
    int kind, type, byte;
    int flag;            // OP_ARGMAX: flag_nonfinite
    int wait_stream;     // OP_WAIT: the stream waited for, until it has run wait_pos operations
    int64_t wait_pos;
    const void *a, *b;   // inputs
    void *c;             // output
    void *own;           // a snapshot of a pageable source (freed once run)
    int64_t n0, n1, n2;
    size_t bytes;
    float f;
    kvt_cuda_rope_args rope;
    kvt_cuda_attn_args attn;
} op;

enum { ORDER_AT_ONCE, ORDER_COPY_LATE, ORDER_COMPUTE_LATE };

struct kvt_cuda_ctx {
    char err[KVT_CUDA_ERR_MAX];
    int order;                           // KVT_FAKE_ORDER
    op *q[KVT_CUDA_STREAM_COUNT];        // pending operations of each stream: q[s][head[s] .. len[s])
    int64_t head[KVT_CUDA_STREAM_COUNT], len[KVT_CUDA_STREAM_COUNT], cap[KVT_CUDA_STREAM_COUNT];
    int64_t done[KVT_CUDA_STREAM_COUNT]; // operations run since the context was made
    int64_t total[KVT_CUDA_STREAM_COUNT];// operations queued since the context was made
    int pending_rc;                      // the first error of an operation run after its entry returned
    struct { char *p; size_t n; } *pinned; // host_malloc allocations
    int n_pinned, cap_pinned;
    // a capture (graph_begin .. graph_end): the operations of the captured streams go to cap, in the order queued
    bool capturing, spoiled;
    bool in_cap[KVT_CUDA_STREAM_COUNT];     // the stream is captured (COMPUTE, and those that waited on it)
    int64_t cap_n[KVT_CUDA_STREAM_COUNT];   // its operations captured so far
    int64_t joined[KVT_CUDA_STREAM_COUNT];  // of those, how many COMPUTE waited for
    int64_t graph_ends, graph_fail_at; // KVT_FAKE_GRAPH_FAIL=k: the k-th launching graph_end fails (tests' fallback)
    struct cap_op { int stream; op o; } *capq;
    int64_t n_cap, capq_cap;
};
// An executable graph: the kinds and streams of its operations (its topology), to tell an update from a new one.
struct kvt_cuda_graph {
    int *topo; // [n] stream * 64 + kind
    int64_t n;
};
// An event: the point `pos` (operations queued before it) of stream `stream` (-1: never recorded); captured: recorded
// inside a capture, pos counting the stream's captured operations.
struct kvt_cuda_event {
    int stream;
    int64_t pos;
    bool captured;
};

static int fail(kvt_cuda_ctx *ctx, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
    return code;
}

static int device_count(int *out, char *err, int err_len) {
    (void)err, (void)err_len;
    *out = 1;
    return KVT_CUDA_OK;
}
static int device_info(int device, kvt_cuda_device_info *out, char *err, int err_len) {
    memset(out, 0, sizeof *out);
    if (device != 0) {
        snprintf(err, (size_t)err_len, "fake device %d does not exist (1 device)", device);
        return KVT_CUDA_ERR_NO_DEVICE;
    }
    snprintf(out->name, sizeof out->name, "fake CUDA device (CPU emulation, tests only)");
    out->cc_major = 9, out->n_sm = 1, out->vram_bytes = out->vram_free_bytes = (int64_t)1 << 30;
    return KVT_CUDA_OK;
}
static int ctx_init(int device, kvt_cuda_ctx **out, char *err, int err_len) {
    kvt_cuda_device_info info;
    int rc = device_info(device, &info, err, err_len);
    *out = rc ? NULL : calloc(1, sizeof **out);
    if (!rc && !*out) return KVT_CUDA_ERR_NOMEM;
    const char *gf = rc ? NULL : getenv("KVT_FAKE_GRAPH_FAIL");
    if (gf && *gf) (*out)->graph_fail_at = atoll(gf);
    const char *order = rc ? NULL : getenv("KVT_FAKE_ORDER");
    if (order && *order) {
        if (!strcmp(order, "copy-late")) (*out)->order = ORDER_COPY_LATE;
        else if (!strcmp(order, "compute-late")) (*out)->order = ORDER_COMPUTE_LATE;
        else {
            snprintf(err, (size_t)err_len, "KVT_FAKE_ORDER=%s: copy-late or compute-late", order);
            free(*out);
            *out = NULL;
            return KVT_CUDA_ERR_ARG;
        }
    }
    return rc;
}
static const char *last_error(const kvt_cuda_ctx *ctx) { return ctx->err; }

// Row r of W as f32 into out[n_cols].
static int weight_row(kvt_cuda_ctx *ctx, int type, const void *W, int64_t r, int64_t n_cols, float *out) {
    const kvt_type_ops *ops = kvt_type_ops_ref((kvt_type)type);
    const int64_t rb = kvt_row_size((kvt_type)type, n_cols);
    if (!ops || rb < 0 || n_cols % 8) return fail(ctx, KVT_CUDA_ERR_ARG, "type %d x %lld columns not handled", type, (long long)n_cols);
    ops->to_float((const char *)W + r * rb, out, n_cols);
    return KVT_CUDA_OK;
}

// y = W x in double sums; f16: both operands rounded to f16 first, as the device's GEMM (cuda_gemm.cu) takes them, so
// that a layer path that lets the batch choose between the matvec and the GEMM shows here as on a GPU
static int k_mul_mat(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const float *x,
                   int64_t n_tok, float *y, bool f16) {
    float *w = malloc((size_t)n_cols * sizeof *w);
    int rc = w ? KVT_CUDA_OK : KVT_CUDA_ERR_NOMEM;
    for (int64_t r = 0; !rc && r < n_rows; r++) {
        rc = weight_row(ctx, type, W, r, n_cols, w);
        for (int64_t k = 0; f16 && k < n_cols; k++) w[k] = kvt_f16_to_f32(kvt_f32_to_f16(w[k]));
        for (int64_t t = 0; !rc && t < n_tok; t++) {
            double s = 0;
            for (int64_t k = 0; k < n_cols; k++) {
                const float a = x[t * n_cols + k];
                s += (double)w[k] * (f16 ? kvt_f16_to_f32(kvt_f32_to_f16(a)) : a);
            }
            y[t * n_rows + r] = (float)s;
        }
    }
    free(w);
    return rc;
}
static int k_mul_mat_vec(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const float *x,
                       int64_t n_tok, float *y) {
    if (type == KVT_CUDA_F32 || n_tok < 1 || n_tok > KVT_CUDA_MMV_BATCH_MAX)
        return fail(ctx, KVT_CUDA_ERR_ARG, "mul_mat_vec: type %d, %lld rows", type, (long long)n_tok);
    return k_mul_mat(ctx, type, W, n_rows, n_cols, x, n_tok, y, false);
}
static int k_dequant_f16(kvt_cuda_ctx *ctx, int type, const void *src, int64_t n, uint16_t *dst) {
    float *f = malloc((size_t)n * sizeof *f);
    int rc = f ? weight_row(ctx, type, src, 0, n, f) : KVT_CUDA_ERR_NOMEM;
    for (int64_t i = 0; !rc && i < n; i++) dst[i] = kvt_f32_to_f16(f[i]);
    free(f);
    return rc;
}

static int k_rmsnorm(kvt_cuda_ctx *ctx, const float *x, const float *w, float *y, int64_t n_rows, int64_t n, float eps) {
    (void)ctx;
    for (int64_t r = 0; r < n_rows; r++) kvt_rmsnorm_f32(y + r * n, x + r * n, w, n, eps);
    return KVT_CUDA_OK;
}
static int k_rope(kvt_cuda_ctx *ctx, float *x, const kvt_cuda_rope_args *a) {
    float cs[KVT_CUDA_ATTN_MAX_HEAD_DIM * 2];
    if (a->n_rot > 2 * KVT_CUDA_ATTN_MAX_HEAD_DIM) return fail(ctx, KVT_CUDA_ERR_ARG, "rope: n_rot %d", a->n_rot);
    const kvt_rope_params p = {a->n_rot, a->neox, a->freq_base, a->freq_scale, a->freq_factors};
    for (int t = 0; t < a->n_tok; t++) {
        kvt_rope_cache(&p, a->pos[t], cs);
        for (int h = 0; h < a->n_head; h++) kvt_rope_apply(&p, cs, x + ((int64_t)t * a->n_head + h) * a->head_dim);
    }
    return KVT_CUDA_OK;
}
static int k_swiglu(kvt_cuda_ctx *ctx, float *g, const float *u, int64_t n) {
    (void)ctx;
    kvt_swiglu_f32(g, u, n);
    return KVT_CUDA_OK;
}
static int k_geglu(kvt_cuda_ctx *ctx, float *g, const float *u, int64_t n) {
    (void)ctx;
    kvt_geglu_f32(g, u, n);
    return KVT_CUDA_OK;
}
static int k_add(kvt_cuda_ctx *ctx, float *y, const float *x, int64_t n) {
    (void)ctx;
    kvt_vec_add_f32(y, x, n);
    return KVT_CUDA_OK;
}
static int k_get_rows(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const int32_t *ids,
                    int64_t n_ids, float *out) {
    for (int64_t t = 0; t < n_ids; t++) {
        if (ids[t] < 0 || ids[t] >= n_rows) return fail(ctx, KVT_CUDA_ERR_ARG, "get_rows: id %d", ids[t]);
        int rc = weight_row(ctx, type, W, ids[t], n_cols, out + t * n_cols);
        if (rc) return rc;
    }
    return KVT_CUDA_OK;
}
static int k_argmax(kvt_cuda_ctx *ctx, const float *x, int64_t n_rows, int64_t n, int32_t *out, int flag_nonfinite) {
    (void)ctx;
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t best = 0;
        bool bad = false;
        for (int64_t i = 0; i < n; i++) {
            bad |= !(fabsf(x[r * n + i]) <= FLT_MAX);
            best = x[r * n + i] > x[r * n + best] ? i : best;
        }
        out[r] = flag_nonfinite && bad ? -1 : (int32_t)best;
    }
    return KVT_CUDA_OK;
}

// The chunked online softmax of cuda_attn.cu, sequentially: chunk states (m, s, o) folded in order.
static int k_attn_paged(kvt_cuda_ctx *ctx, const kvt_cuda_attn_args *a) {
    const int D = a->head_dim;
    if (D > KVT_CUDA_ATTN_MAX_HEAD_DIM || a->n_head % a->n_kv_head) return fail(ctx, KVT_CUDA_ERR_ARG, "attn_paged: shape");
    float sc[KVT_CUDA_ATTN_CHUNK], oc[KVT_CUDA_ATTN_MAX_HEAD_DIM], o[KVT_CUDA_ATTN_MAX_HEAD_DIM];
    for (int row = 0; row < a->n_q; row++) {
        const int64_t len = a->seq_len[row], s = a->row_seq ? a->row_seq[row] : row;
        if (len < 1 || len > a->max_seq_len) return fail(ctx, KVT_CUDA_ERR_ARG, "attn_paged: seq_len %lld", (long long)len);
        for (int h = 0; h < a->n_head; h++) {
            const int kvh = h / (a->n_head / a->n_kv_head);
            const int64_t rs = a->row_stride > 0 ? a->row_stride : (int64_t)a->n_head * D; // floats per row
            const float *q = a->q + row * rs + (int64_t)h * D;
            float m = -INFINITY, sum = 0;
            memset(o, 0, sizeof o);
            const int64_t lo = a->window > 0 && len > a->window ? len - a->window : 0; // a sliding window's first position
            for (int64_t p0 = lo; p0 < len; p0 += KVT_CUDA_ATTN_CHUNK) {
                const int n = (int)(len - p0 < KVT_CUDA_ATTN_CHUNK ? len - p0 : KVT_CUDA_ATTN_CHUNK);
                float mc = -INFINITY, sc_sum = 0;
                for (int i = 0; i < n; i++) {
                    const int64_t p = p0 + i, b = p / a->block_len;
                    const uint16_t *k = (const uint16_t *)a->k_blocks[(int64_t)s * a->max_blocks + b] +
                                        ((p % a->block_len) * a->n_kv_head + kvh) * D;
                    float dot = 0;
                    for (int d = 0; d < D; d++) dot += q[d] * kvt_f16_to_f32(k[d]);
                    sc[i] = dot * a->scale;
                    mc = fmaxf(mc, sc[i]);
                }
                memset(oc, 0, sizeof oc);
                for (int i = 0; i < n; i++) {
                    const int64_t p = p0 + i, b = p / a->block_len;
                    const uint16_t *v = (const uint16_t *)a->v_blocks[(int64_t)s * a->max_blocks + b] +
                                        ((p % a->block_len) * a->n_kv_head + kvh) * D;
                    const float e = expf(sc[i] - mc);
                    sc_sum += e;
                    for (int d = 0; d < D; d++) oc[d] += e * kvt_f16_to_f32(v[d]);
                }
                const float mn = fmaxf(m, mc), a0 = expf(m - mn), a1 = expf(mc - mn);
                sum = sum * a0 + sc_sum * a1;
                for (int d = 0; d < D; d++) o[d] = o[d] * a0 + oc[d] * a1;
                m = mn;
            }
            for (int d = 0; d < D; d++) a->out[row * rs + (int64_t)h * D + d] = o[d] / sum;
        }
    }
    return KVT_CUDA_OK;
}

// ---------------------------------------------------------------- streams (see the header comment)

static int run_op(kvt_cuda_ctx *ctx, op *o) {
    switch (o->kind) {
    case OP_WAIT: return KVT_CUDA_OK;
    case OP_COPY: memcpy(o->c, o->a, o->bytes); return KVT_CUDA_OK;
    case OP_BATCH: // (own: the list, taken at the call)
        for (int64_t i = 0; i < o->n0; i++) {
            const kvt_cuda_copy *c = (const kvt_cuda_copy *)o->own + i;
            memcpy(c->dst, c->src, (size_t)c->bytes);
        }
        return KVT_CUDA_OK;
    case OP_MEMSET: memset(o->c, o->byte, o->bytes); return KVT_CUDA_OK;
    case OP_MMV: return k_mul_mat_vec(ctx, o->type, o->a, o->n0, o->n1, o->b, o->n2, o->c);
    case OP_MM: return k_mul_mat(ctx, o->type, o->a, o->n0, o->n1, o->b, o->n2, o->c, true);
    case OP_DEQ: return k_dequant_f16(ctx, o->type, o->a, o->n0, o->c);
    case OP_NORM: return k_rmsnorm(ctx, o->a, o->b, o->c, o->n0, o->n1, o->f);
    case OP_ROPE: return k_rope(ctx, o->c, &o->rope);
    case OP_SWIGLU: return k_swiglu(ctx, o->c, o->a, o->n0);
    case OP_GEGLU: return k_geglu(ctx, o->c, o->a, o->n0);
    case OP_ADD: return k_add(ctx, o->c, o->a, o->n0);
    case OP_ROWS: return k_get_rows(ctx, o->type, o->a, o->n0, o->n1, o->b, o->n2, o->c);
    case OP_ARGMAX: return k_argmax(ctx, o->a, o->n0, o->n1, o->c, o->flag);
    case OP_ATTN: return k_attn_paged(ctx, &o->attn);
    }
    return fail(ctx, KVT_CUDA_ERR_ARG, "fake: operation %d", o->kind);
}

// Runs the first pending operation of stream s (its wait, if any, satisfied).
static void run_next(kvt_cuda_ctx *ctx, int s) {
    op *o = &ctx->q[s][ctx->head[s]++];
    const int rc = run_op(ctx, o);
    if (rc && !ctx->pending_rc) ctx->pending_rc = rc;
    free(o->own);
    ctx->done[s]++;
    if (ctx->head[s] == ctx->len[s]) ctx->head[s] = ctx->len[s] = 0;
}

// Runs stream s until it has run `upto` operations, and what its waits need of the other stream.
static void force(kvt_cuda_ctx *ctx, int s, int64_t upto) {
    while (ctx->done[s] < upto && ctx->head[s] < ctx->len[s]) {
        const op *o = &ctx->q[s][ctx->head[s]];
        if (o->kind == OP_WAIT && ctx->done[o->wait_stream] < o->wait_pos) force(ctx, o->wait_stream, o->wait_pos);
        run_next(ctx, s);
    }
}
static void drain(kvt_cuda_ctx *ctx) {
    for (int s = 0; s < KVT_CUDA_STREAM_COUNT; s++) force(ctx, s, ctx->total[s]);
    for (int s = 0; s < KVT_CUDA_STREAM_COUNT; s++) force(ctx, s, ctx->total[s]); // (the second stream's waits)
}
static int take_rc(kvt_cuda_ctx *ctx) {
    const int rc = ctx->pending_rc;
    ctx->pending_rc = KVT_CUDA_OK;
    return rc;
}
static bool eager(const kvt_cuda_ctx *ctx, int s) {
    return ctx->order == ORDER_AT_ONCE || (ctx->order == ORDER_COPY_LATE) == (s == KVT_CUDA_STREAM_COMPUTE);
}
// Runs the eager streams' operations until each is empty or at a wait for the lazy stream.
static void pump(kvt_cuda_ctx *ctx) {
    for (bool moved = true; moved;) {
        moved = false;
        for (int s = 0; s < KVT_CUDA_STREAM_COUNT; s++) {
            while (eager(ctx, s) && ctx->head[s] < ctx->len[s]) {
                const op *o = &ctx->q[s][ctx->head[s]];
                if (o->kind == OP_WAIT && ctx->done[o->wait_stream] < o->wait_pos) {
                    if (!eager(ctx, o->wait_stream)) break;
                    force(ctx, o->wait_stream, o->wait_pos);
                }
                run_next(ctx, s);
                moved = true;
            }
        }
    }
}
// A call CUDA forbids during a capture (the host would wait, or allocate): it fails and spoils the capture.
static int spoil(kvt_cuda_ctx *ctx, const char *what) {
    ctx->spoiled = true;
    return fail(ctx, KVT_CUDA_ERR_RUNTIME, "fake: %s during a stream capture (cudaErrorStreamCaptureUnsupported)", what);
}
// Appends *o to the capture (stream s is captured).
static int capture(kvt_cuda_ctx *ctx, int s, const op *o) {
    if (ctx->spoiled) {
        free(o->own);
        return fail(ctx, KVT_CUDA_ERR_RUNTIME, "fake: the capture was invalidated (cudaErrorStreamCaptureInvalidated)");
    }
    if (ctx->n_cap == ctx->capq_cap) {
        const int64_t cap = ctx->capq_cap ? 2 * ctx->capq_cap : 256;
        struct cap_op *c = realloc(ctx->capq, (size_t)cap * sizeof *c);
        if (!c) {
            free(o->own);
            return fail(ctx, KVT_CUDA_ERR_NOMEM, "fake: out of memory for a capture");
        }
        ctx->capq = c, ctx->capq_cap = cap;
    }
    ctx->capq[ctx->n_cap++] = (struct cap_op){s, *o};
    ctx->cap_n[s]++;
    return KVT_CUDA_OK;
}

// Queues *o on stream s and runs what may run (during a capture of s: captures it). Returns the error of *o if it ran
// at once and failed (or of an earlier deferred operation), else OK.
static int submit(kvt_cuda_ctx *ctx, int s, const op *o) {
    if (s < 0 || s >= KVT_CUDA_STREAM_COUNT) {
        free(o->own);
        return fail(ctx, KVT_CUDA_ERR_ARG, "stream id %d does not exist", s);
    }
    if (ctx->capturing && ctx->in_cap[s]) return capture(ctx, s, o);
    if (ctx->len[s] == ctx->cap[s]) {
        const int64_t cap = ctx->cap[s] ? 2 * ctx->cap[s] : 64;
        op *q = realloc(ctx->q[s], (size_t)cap * sizeof *q);
        if (!q) {
            free(o->own);
            return fail(ctx, KVT_CUDA_ERR_NOMEM, "fake: out of memory for a stream's queue");
        }
        ctx->q[s] = q, ctx->cap[s] = cap;
    }
    ctx->q[s][ctx->len[s]++] = *o;
    const int64_t idx = ctx->total[s]++;
    pump(ctx);
    return ctx->done[s] > idx ? take_rc(ctx) : KVT_CUDA_OK;
}

static bool is_pinned(const kvt_cuda_ctx *ctx, const void *p) {
    for (int i = 0; i < ctx->n_pinned; i++) {
        if ((const char *)p >= ctx->pinned[i].p && (const char *)p < ctx->pinned[i].p + ctx->pinned[i].n) return true;
    }
    return false;
}
// A copy touching pinned memory must stay inside one allocation (CUDA answers cudaErrorInvalidValue to a DMA that
// spans two, even two lying side by side, as an H200 showed on 2026-11-30).
static bool pinned_span_bad(const kvt_cuda_ctx *ctx, const void *p, size_t bytes) {
    for (int i = 0; i < ctx->n_pinned; i++) {
        const char *a = ctx->pinned[i].p, *c = p;
        if (c >= a && c < a + ctx->pinned[i].n) return bytes > (size_t)(a + ctx->pinned[i].n - c);
    }
    return false;
}

static void cap_discard(kvt_cuda_ctx *ctx);
static void ctx_free(kvt_cuda_ctx *ctx) {
    if (!ctx) return;
    drain(ctx);
    for (int s = 0; s < KVT_CUDA_STREAM_COUNT; s++) free(ctx->q[s]);
    cap_discard(ctx);
    free(ctx->capq);
    free(ctx->pinned);
    free(ctx);
}
static int dev_malloc(kvt_cuda_ctx *ctx, size_t bytes, void **out) {
    if (ctx->capturing) return *out = NULL, spoil(ctx, "cudaMalloc");
    *out = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
    return *out ? KVT_CUDA_OK : fail(ctx, KVT_CUDA_ERR_NOMEM, "fake malloc of %zu bytes failed", bytes);
}
static int dev_free(kvt_cuda_ctx *ctx, void *p) { // as cudaFree: waits for the device
    if (ctx->capturing) return spoil(ctx, "cudaFree");
    drain(ctx);
    free(p);
    return take_rc(ctx);
}
static int host_malloc(kvt_cuda_ctx *ctx, size_t bytes, void **out) {
    if (ctx->capturing) return *out = NULL, spoil(ctx, "cudaHostAlloc");
    if (ctx->n_pinned == ctx->cap_pinned) {
        const int cap = ctx->cap_pinned ? 2 * ctx->cap_pinned : 16;
        void *np = realloc(ctx->pinned, (size_t)cap * sizeof *ctx->pinned);
        if (!np) return fail(ctx, KVT_CUDA_ERR_NOMEM, "fake: out of memory");
        ctx->pinned = np, ctx->cap_pinned = cap;
    }
    int rc = dev_malloc(ctx, bytes, out);
    if (!rc) {
        ctx->pinned[ctx->n_pinned].p = *out;
        ctx->pinned[ctx->n_pinned++].n = bytes;
    }
    return rc;
}
static int host_free(kvt_cuda_ctx *ctx, void *p) {
    for (int i = 0; p && i < ctx->n_pinned; i++) {
        if (ctx->pinned[i].p == p) ctx->pinned[i] = ctx->pinned[--ctx->n_pinned];
    }
    return dev_free(ctx, p);
}
static int host_device_ptr(kvt_cuda_ctx *ctx, void *host, void **out) {
    *out = host;
    return is_pinned(ctx, host) ? KVT_CUDA_OK : fail(ctx, KVT_CUDA_ERR_ARG, "host_device_ptr: %p is not pinned host memory", host);
}
static int memset_dev(kvt_cuda_ctx *ctx, void *dst, int byte, size_t bytes) {
    return submit(ctx, KVT_CUDA_STREAM_COMPUTE, &(op){.kind = OP_MEMSET, .c = dst, .byte = byte, .bytes = bytes});
}
static int copy_h2d(kvt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, int stream) {
    op o = {.kind = OP_COPY, .c = dst, .a = src, .bytes = bytes};
    if (pinned_span_bad(ctx, src, bytes)) 
        return fail(ctx, KVT_CUDA_ERR_RUNTIME, "fake cudaMemcpyAsync: invalid argument (%zu bytes past one pinned allocation)",
                    bytes);
    if (!is_pinned(ctx, src)) { // pageable: read now
        if (ctx->capturing && ctx->in_cap[stream]) return spoil(ctx, "a copy from pageable host memory");
        if (!(o.own = malloc(bytes ? bytes : 1))) return fail(ctx, KVT_CUDA_ERR_NOMEM, "fake: out of memory");
        memcpy(o.own, src, bytes);
        o.a = o.own;
    }
    return submit(ctx, stream, &o);
}
static int copy_d2h(kvt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, int stream) {
    if (ctx->capturing && !is_pinned(ctx, dst)) return spoil(ctx, "a copy to pageable host memory");
    if (pinned_span_bad(ctx, dst, bytes)) 
        return fail(ctx, KVT_CUDA_ERR_RUNTIME, "fake cudaMemcpyAsync: invalid argument (%zu bytes past one pinned allocation)",
                    bytes);
    int rc = submit(ctx, stream, &(op){.kind = OP_COPY, .c = dst, .a = src, .bytes = bytes});
    if (rc || is_pinned(ctx, dst)) return rc;
    force(ctx, stream, ctx->total[stream]); // pageable: returns once done
    return take_rc(ctx);
}
static int copy_d2d(kvt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, int stream) {
    return submit(ctx, stream, &(op){.kind = OP_COPY, .c = dst, .a = src, .bytes = bytes});
}
static int copy_batch(kvt_cuda_ctx *ctx, const kvt_cuda_copy *list, int n, int stream) {
    if (n < 1 || n > KVT_CUDA_COPY_BATCH_MAX || !list) return fail(ctx, KVT_CUDA_ERR_ARG, "copy_batch: %d copies", n);
    op o = {.kind = OP_BATCH, .n0 = n};
    if (!(o.own = malloc((size_t)n * sizeof *list))) return fail(ctx, KVT_CUDA_ERR_NOMEM, "fake: out of memory");
    memcpy(o.own, list, (size_t)n * sizeof *list);
    return submit(ctx, stream, &o);
}
static int event_create(kvt_cuda_ctx *ctx, kvt_cuda_event **out) {
    *out = malloc(sizeof **out);
    if (!*out) return fail(ctx, KVT_CUDA_ERR_NOMEM, "fake: out of memory");
    **out = (kvt_cuda_event){-1, 0, false};
    return KVT_CUDA_OK;
}
static int event_free(kvt_cuda_ctx *ctx, kvt_cuda_event *ev) { // the waits queued on it keep their own copy
    (void)ctx;
    free(ev);
    return KVT_CUDA_OK;
}
static int event_record(kvt_cuda_ctx *ctx, kvt_cuda_event *ev, int stream) {
    if (stream < 0 || stream >= KVT_CUDA_STREAM_COUNT) return fail(ctx, KVT_CUDA_ERR_ARG, "stream id %d", stream);
    const bool cap = ctx->capturing && ctx->in_cap[stream];
    *ev = (kvt_cuda_event){stream, cap ? ctx->cap_n[stream] : ctx->total[stream], cap};
    return KVT_CUDA_OK;
}
static int stream_wait(kvt_cuda_ctx *ctx, int stream, kvt_cuda_event *ev) {
    if (stream < 0 || stream >= KVT_CUDA_STREAM_COUNT) return fail(ctx, KVT_CUDA_ERR_ARG, "stream id %d", stream);
    if (ev->stream < 0) return KVT_CUDA_OK; // never recorded: nothing to wait for (as CUDA)
    if (ev->captured != (ctx->capturing && (ctx->in_cap[stream] || ev->captured))) {
        // a captured stream waiting for an event from outside the capture, or any stream for one of a finished capture
        if (ctx->capturing) return spoil(ctx, "a wait for an event recorded outside the capture");
        return fail(ctx, KVT_CUDA_ERR_RUNTIME, "fake: a wait for an event recorded in a capture (cudaErrorStreamCaptureIsolation)");
    }
    if (ev->captured) { // the stream joins the capture; COMPUTE waiting for another captured stream joins it back
        ctx->in_cap[stream] = true;
        if (stream == KVT_CUDA_STREAM_COMPUTE && ev->pos > ctx->joined[ev->stream]) ctx->joined[ev->stream] = ev->pos;
    }
    return submit(ctx, stream, &(op){.kind = OP_WAIT, .wait_stream = ev->stream, .wait_pos = ev->pos});
}
static int event_sync(kvt_cuda_ctx *ctx, kvt_cuda_event *ev) {
    if (ctx->capturing) return spoil(ctx, "cudaEventSynchronize");
    if (ev->stream >= 0) force(ctx, ev->stream, ev->pos);
    return take_rc(ctx);
}
static int stream_sync(kvt_cuda_ctx *ctx, int stream) {
    if (stream < 0 || stream >= KVT_CUDA_STREAM_COUNT) return fail(ctx, KVT_CUDA_ERR_ARG, "stream id %d", stream);
    if (ctx->capturing) return spoil(ctx, "cudaStreamSynchronize");
    force(ctx, stream, ctx->total[stream]);
    return take_rc(ctx);
}

// The kernels' entries: queued on COMPUTE. Checks that need no device data are made at once (as a launch's).
#define COMPUTE KVT_CUDA_STREAM_COMPUTE
static int q_mul_mat_vec(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const float *x,
                         int64_t n_tok, float *y) {
    if (type == KVT_CUDA_F32 || n_tok < 1 || n_tok > KVT_CUDA_MMV_BATCH_MAX)
        return fail(ctx, KVT_CUDA_ERR_ARG, "mul_mat_vec: type %d, %lld rows", type, (long long)n_tok);
    return submit(ctx, COMPUTE, &(op){.kind = OP_MMV, .type = type, .a = W, .n0 = n_rows, .n1 = n_cols, .b = x, .n2 = n_tok, .c = y});
}
static int q_mul_mat_vec_multi(kvt_cuda_ctx *ctx, const kvt_cuda_mv *mv, int n, int64_t n_cols, const float *x, int64_t n_tok) {
    if (n < 1 || n > KVT_CUDA_MV_MULTI_MAX || !mv) return fail(ctx, KVT_CUDA_ERR_ARG, "mul_mat_vec_multi: %d products", n);
    for (int i = 0; i < n; i++) { // each as its own call (the device quantizes x once: the same bits)
        const int rc = q_mul_mat_vec(ctx, mv[i].type, mv[i].W, mv[i].n_rows, n_cols, x, n_tok, mv[i].y);
        if (rc) return rc;
    }
    return KVT_CUDA_OK;
}
static int q_mul_mat(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const float *x,
                     int64_t n_tok, float *y) {
    return submit(ctx, COMPUTE, &(op){.kind = OP_MM, .type = type, .a = W, .n0 = n_rows, .n1 = n_cols, .b = x, .n2 = n_tok, .c = y});
}
static int q_dequant_f16(kvt_cuda_ctx *ctx, int type, const void *src, int64_t n, uint16_t *dst) {
    return submit(ctx, COMPUTE, &(op){.kind = OP_DEQ, .type = type, .a = src, .n0 = n, .c = dst});
}
static int q_rmsnorm(kvt_cuda_ctx *ctx, const float *x, const float *w, float *y, int64_t n_rows, int64_t n, float eps) {
    return submit(ctx, COMPUTE, &(op){.kind = OP_NORM, .a = x, .b = w, .c = y, .n0 = n_rows, .n1 = n, .f = eps});
}
static int q_rope(kvt_cuda_ctx *ctx, float *x, const kvt_cuda_rope_args *a) {
    if (a->n_rot > 2 * KVT_CUDA_ATTN_MAX_HEAD_DIM) return fail(ctx, KVT_CUDA_ERR_ARG, "rope: n_rot %d", a->n_rot);
    return submit(ctx, COMPUTE, &(op){.kind = OP_ROPE, .c = x, .rope = *a});
}
static int q_swiglu(kvt_cuda_ctx *ctx, float *g, const float *u, int64_t n) {
    return submit(ctx, COMPUTE, &(op){.kind = OP_SWIGLU, .c = g, .a = u, .n0 = n});
}
static int q_geglu(kvt_cuda_ctx *ctx, float *g, const float *u, int64_t n) {
    return submit(ctx, COMPUTE, &(op){.kind = OP_GEGLU, .c = g, .a = u, .n0 = n});
}
static int q_add(kvt_cuda_ctx *ctx, float *y, const float *x, int64_t n) {
    return submit(ctx, COMPUTE, &(op){.kind = OP_ADD, .c = y, .a = x, .n0 = n});
}
static int q_get_rows(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const int32_t *ids,
                      int64_t n_ids, float *out) {
    return submit(ctx, COMPUTE, &(op){.kind = OP_ROWS, .type = type, .a = W, .n0 = n_rows, .n1 = n_cols, .b = ids, .n2 = n_ids, .c = out});
}
static int q_argmax(kvt_cuda_ctx *ctx, const float *x, int64_t n_rows, int64_t n, int32_t *out, int flag_nonfinite) {
    return submit(ctx, COMPUTE, &(op){.kind = OP_ARGMAX, .a = x, .n0 = n_rows, .n1 = n, .c = out, .flag = flag_nonfinite});
}
static int q_attn_paged(kvt_cuda_ctx *ctx, const kvt_cuda_attn_args *a) {
    if (a->head_dim > KVT_CUDA_ATTN_MAX_HEAD_DIM || a->n_head % a->n_kv_head) return fail(ctx, KVT_CUDA_ERR_ARG, "attn_paged: shape");
    return submit(ctx, COMPUTE, &(op){.kind = OP_ATTN, .attn = *a});
}

// ---- graphs: a capture is the list of its operations; a launch queues them on their streams, the waits between
// captured streams pointing at the launched operations, so the late orders run a graph as they run eager work.
static int graph_begin(kvt_cuda_ctx *ctx) {
    if (ctx->capturing) return fail(ctx, KVT_CUDA_ERR_RUNTIME, "fake: a capture is already under way");
    ctx->capturing = true, ctx->spoiled = false, ctx->n_cap = 0;
    for (int s = 0; s < KVT_CUDA_STREAM_COUNT; s++) ctx->in_cap[s] = s == COMPUTE, ctx->cap_n[s] = ctx->joined[s] = 0;
    return KVT_CUDA_OK;
}
static void cap_discard(kvt_cuda_ctx *ctx) {
    for (int64_t i = 0; i < ctx->n_cap; i++) free(ctx->capq[i].o.own);
    ctx->n_cap = 0;
}
static int graph_end(kvt_cuda_ctx *ctx, kvt_cuda_graph **g, int launch, int *updated) {
    if (!ctx->capturing) return fail(ctx, KVT_CUDA_ERR_RUNTIME, "fake: graph_end without a capture");
    ctx->capturing = false;
    int s_unjoined = -1;
    for (int s = 0; s < KVT_CUDA_STREAM_COUNT; s++) {
        if (s != COMPUTE && ctx->in_cap[s] && ctx->joined[s] < ctx->cap_n[s]) s_unjoined = s;
    }
    const bool planted = launch && ++ctx->graph_ends == ctx->graph_fail_at;
    if (ctx->spoiled || s_unjoined >= 0 || !launch || planted) {
        if (planted) return cap_discard(ctx), fail(ctx, KVT_CUDA_ERR_RUNTIME, "fake: cudaGraphInstantiate failed (planted)");
        cap_discard(ctx);
        if (ctx->spoiled) return fail(ctx, KVT_CUDA_ERR_RUNTIME, "fake: cudaStreamEndCapture: the capture was invalidated");
        if (s_unjoined >= 0) return fail(ctx, KVT_CUDA_ERR_RUNTIME, "fake: cudaStreamEndCapture: stream %d not joined", s_unjoined);
        return KVT_CUDA_OK;
    }
    if (!*g && !(*g = calloc(1, sizeof **g))) return cap_discard(ctx), fail(ctx, KVT_CUDA_ERR_NOMEM, "fake: out of memory");
    bool same = (*g)->n == ctx->n_cap;
    for (int64_t i = 0; same && i < ctx->n_cap; i++) same = (*g)->topo[i] == ctx->capq[i].stream * 64 + ctx->capq[i].o.kind;
    if (!same) {
        int *t = realloc((*g)->topo, (size_t)(ctx->n_cap ? ctx->n_cap : 1) * sizeof *t);
        if (!t) return cap_discard(ctx), fail(ctx, KVT_CUDA_ERR_NOMEM, "fake: out of memory");
        for (int64_t i = 0; i < ctx->n_cap; i++) t[i] = ctx->capq[i].stream * 64 + ctx->capq[i].o.kind;
        (*g)->topo = t, (*g)->n = ctx->n_cap;
    }
    *updated = same;
    int64_t base[KVT_CUDA_STREAM_COUNT];
    for (int s = 0; s < KVT_CUDA_STREAM_COUNT; s++) base[s] = ctx->total[s];
    int rc = KVT_CUDA_OK;
    for (int64_t i = 0; i < ctx->n_cap; i++) { // (submit runs what may run; an error surfaces at the next sync)
        op o = ctx->capq[i].o;
        if (o.kind == OP_WAIT) o.wait_pos += base[o.wait_stream];
        const int r = submit(ctx, ctx->capq[i].stream, &o);
        if (r && !rc) rc = r;
    }
    ctx->n_cap = 0;
    return rc;
}
static int graph_free(kvt_cuda_ctx *ctx, kvt_cuda_graph *g) {
    (void)ctx;
    if (g) free(g->topo);
    free(g);
    return KVT_CUDA_OK;
}
static int workspace_reserve(kvt_cuda_ctx *ctx, size_t bytes) { // the fake's kernels need no workspace
    (void)bytes;
    return ctx->capturing ? spoil(ctx, "cudaMalloc (a workspace grown)") : KVT_CUDA_OK;
}

static const kvt_cuda_api k_fake = {
    KVT_CUDA_ABI_VERSION, (int)sizeof(kvt_cuda_api), device_count, device_info, ctx_init, ctx_free, last_error,
    dev_malloc, dev_free, host_malloc, host_free, memset_dev, copy_h2d, copy_d2h, copy_d2d, event_create, event_free,
    event_record, stream_wait, event_sync, stream_sync, q_mul_mat_vec, q_mul_mat_vec_multi, q_mul_mat, q_dequant_f16, q_rmsnorm, q_rope,
    q_swiglu, q_geglu, q_add, q_get_rows, q_argmax, q_attn_paged, host_device_ptr, copy_batch, graph_begin, graph_end,
    graph_free, workspace_reserve,
};

const kvt_cuda_api *kvt_cuda_get_api(int abi_version) { return abi_version == KVT_CUDA_ABI_VERSION ? &k_fake : NULL; }
