// cuda_api.cu - the backend table (kvt_cuda.h): devices, contexts, memory, transfers, streams and
// events, plus the context's error message and workspace. Kernels live in the other .cu files.
#include <cstdlib>
#include <cstring>
#include <new>

#include "cuda_common.cuh"

// ---------------------------------------------------------------- errors and workspace

int ctx_fail(kvt_cuda_ctx *ctx, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
    return code;
}

int ctx_fail_cuda(kvt_cuda_ctx *ctx, const char *what, cudaError_t e) {
    const int code = e == cudaErrorMemoryAllocation ? KVT_CUDA_ERR_NOMEM
                     : (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInvalidDevice)
                         ? KVT_CUDA_ERR_NO_DEVICE
                         : KVT_CUDA_ERR_RUNTIME;
    return ctx_fail(ctx, code, "CUDA %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

int ctx_check_launch(kvt_cuda_ctx *ctx, const char *kernel) {
    const cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return KVT_CUDA_OK;
    char what[160];
    snprintf(what, sizeof what, "launch of %s", kernel);
    return ctx_fail_cuda(ctx, what, e);
}

namespace {
// *buf (of *have bytes) grown to at least `bytes`, synchronizing COMPUTE before the old one is freed
int grow_buffer(kvt_cuda_ctx *ctx, void **buf, size_t *have, size_t bytes) {
    if (bytes > *have) {
        KVT_CU_CHECK(ctx, cudaStreamSynchronize(ctx->stream[KVT_CUDA_STREAM_COMPUTE]));
        if (*buf) KVT_CU_CHECK(ctx, cudaFree(*buf));
        *buf = nullptr;
        *have = 0;
        const size_t grown = bytes + bytes / 4; // some headroom: shapes grow a little at a time
        KVT_CU_CHECK(ctx, cudaMalloc(buf, grown));
        *have = grown;
    }
    return KVT_CUDA_OK;
}
} // namespace

int ctx_workspace(kvt_cuda_ctx *ctx, size_t bytes, void **out) {
    const int rc = grow_buffer(ctx, &ctx->ws, &ctx->ws_bytes, bytes);
    *out = ctx->ws;
    return rc;
}

int ctx_q8_1_buffer(kvt_cuda_ctx *ctx, size_t bytes, void **out) {
    const int rc = grow_buffer(ctx, &ctx->q8, &ctx->q8_bytes, bytes);
    *out = ctx->q8;
    return rc;
}

namespace {

// A message into a caller buffer (entries without a context).
int buf_fail(char *err, int err_len, int code, const char *what, cudaError_t e) {
    if (err && err_len > 0) snprintf(err, (size_t)err_len, "CUDA %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return code;
}

int stream_of(kvt_cuda_ctx *ctx, int stream, cudaStream_t *out) {
    if (stream < 0 || stream >= KVT_CUDA_STREAM_COUNT) return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "stream id %d does not exist", stream);
    *out = ctx->stream[stream];
    return KVT_CUDA_OK;
}

// ---------------------------------------------------------------- devices

int device_count(int *out, char *err, int err_len) {
    *out = 0;
    const cudaError_t e = cudaGetDeviceCount(out);
    if (e != cudaSuccess) {
        *out = 0;
        return buf_fail(err, err_len, KVT_CUDA_ERR_NO_DEVICE, "cudaGetDeviceCount", e);
    }
    if (*out == 0) {
        if (err && err_len > 0) snprintf(err, (size_t)err_len, "cudaGetDeviceCount found no CUDA device");
        return KVT_CUDA_ERR_NO_DEVICE;
    }
    return KVT_CUDA_OK;
}

// KVT_CUDA_OK if device `device` exists, else KVT_CUDA_ERR_NO_DEVICE with a message in err.
int check_device(int device, char *err, int err_len) {
    int n = 0;
    int rc = device_count(&n, err, err_len);
    if (rc) return rc;
    if (device < 0 || device >= n) {
        if (err && err_len > 0) snprintf(err, (size_t)err_len, "CUDA device %d does not exist (%d devices)", device, n);
        return KVT_CUDA_ERR_NO_DEVICE;
    }
    return KVT_CUDA_OK;
}

int device_info(int device, kvt_cuda_device_info *out, char *err, int err_len) {
    memset(out, 0, sizeof *out);
    int rc = check_device(device, err, err_len);
    if (rc) return rc;
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) return buf_fail(err, err_len, KVT_CUDA_ERR_RUNTIME, "cudaGetDeviceProperties", e);
    snprintf(out->name, sizeof out->name, "%.95s", prop.name);
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    out->n_sm = prop.multiProcessorCount;
    int cur = 0;
    if ((e = cudaGetDevice(&cur)) != cudaSuccess) return buf_fail(err, err_len, KVT_CUDA_ERR_RUNTIME, "cudaGetDevice", e);
    if ((e = cudaSetDevice(device)) != cudaSuccess) return buf_fail(err, err_len, KVT_CUDA_ERR_RUNTIME, "cudaSetDevice", e);
    size_t free_b = 0, total_b = 0;
    e = cudaMemGetInfo(&free_b, &total_b);
    cudaSetDevice(cur);
    if (e != cudaSuccess) return buf_fail(err, err_len, KVT_CUDA_ERR_RUNTIME, "cudaMemGetInfo", e);
    out->vram_bytes = (int64_t)total_b;
    out->vram_free_bytes = (int64_t)free_b;
    return KVT_CUDA_OK;
}

// ---------------------------------------------------------------- contexts

void ctx_free(kvt_cuda_ctx *ctx) {
    if (!ctx) return;
    cudaSetDevice(ctx->device);
    for (int i = 0; i < KVT_CUDA_STREAM_COUNT; i++) {
        if (ctx->stream[i]) {
            cudaStreamSynchronize(ctx->stream[i]);
            cudaStreamDestroy(ctx->stream[i]);
        }
    }
    if (ctx->cublas) cublasDestroy(ctx->cublas);
    if (ctx->ws) cudaFree(ctx->ws);
    if (ctx->q8) cudaFree(ctx->q8);
    delete ctx;
}

// The environment variable `name` as one of n values (unset or empty: values[0], the default): *idx its index, or
// KVT_CUDA_ERR_ARG with the message naming the variable, what it held and the values it takes.
static int env_choice(const char *name, const char *const *values, int n, int *idx, char *err, int err_len) {
    const char *v = getenv(name);
    *idx = 0;
    if (!v || !*v) return KVT_CUDA_OK;
    for (int i = 0; i < n; i++)
        if (!strcmp(v, values[i])) return *idx = i, KVT_CUDA_OK;
    if (err && err_len > 0) {
        int k = snprintf(err, (size_t)err_len, "%s=%.64s: one of", name, v);
        for (int i = 0; i < n && k > 0 && k < err_len; i++) k += snprintf(err + k, (size_t)(err_len - k), " %s", values[i]);
    }
    return KVT_CUDA_ERR_ARG;
}

int ctx_init(int device, kvt_cuda_ctx **out, char *err, int err_len) {
    *out = nullptr;
    // The context's choices from the environment, each value's default first:
    // KVT_CUDA_MMV: mul_mat_vec's activations, q8_1 (the default since an H200 measured it, 2026-11-30: decode of a
    //   llama3-8b Q4_K_M 2.23x the f32 path's) or f32 (cuda_matvec.cu);
    // KVT_CUDA_ATTN: attn_paged of prefill rows, chunked or tiled (cuda_attn.cu);
    // KVT_CUDA_ATTN_DECODE: the chunk states (decode and short calls), head (one block per query head) or gqa (one
    //   block per KV head for its query heads; the same bits);
    // KVT_CUDA_MMVQ_ROWS / KVT_CUDA_MMVQ_ILP: the weight rows a warp (2, 1 or 4) and the items a lane has in flight
    //   (1 or 2) of the q8_1 matvec of q4_K / q6_K at one activation row (the same bits; suite cuda times each).
    static const char *const mmv_v[] = {"q8_1", "f32"}, *const attn_v[] = {"chunked", "tiled"},
                             *const dec_v[] = {"head", "gqa"}, *const rows_v[] = {"2", "1", "4"}, *const ilp_v[] = {"1", "2"};
    static const int rows_of[] = {2, 1, 4};
    int mmv = 0, attn = 0, dec = 0, rows = 0, ilp = 0;
    int rc = env_choice("KVT_CUDA_MMV", mmv_v, 2, &mmv, err, err_len);
    if (!rc) rc = env_choice("KVT_CUDA_ATTN", attn_v, 2, &attn, err, err_len);
    if (!rc) rc = env_choice("KVT_CUDA_ATTN_DECODE", dec_v, 2, &dec, err, err_len);
    if (!rc) rc = env_choice("KVT_CUDA_MMVQ_ROWS", rows_v, 3, &rows, err, err_len);
    if (!rc) rc = env_choice("KVT_CUDA_MMVQ_ILP", ilp_v, 2, &ilp, err, err_len);
    if (rc) return rc;
    rc = check_device(device, err, err_len);
    if (rc) return rc;
    kvt_cuda_ctx *ctx = new (std::nothrow) kvt_cuda_ctx();
    if (!ctx) {
        if (err && err_len > 0) snprintf(err, (size_t)err_len, "out of host memory for a CUDA context");
        return KVT_CUDA_ERR_NOMEM;
    }
    ctx->device = device;
    cudaError_t e = cudaSetDevice(device);
    const char *what = "cudaSetDevice";
    for (int i = 0; e == cudaSuccess && i < KVT_CUDA_STREAM_COUNT; i++) {
        e = cudaStreamCreateWithFlags(&ctx->stream[i], cudaStreamNonBlocking);
        what = "cudaStreamCreateWithFlags";
    }
    ctx->mmv_q8_1 = mmv == 0;
    ctx->attn_tiled = attn == 1;
    ctx->attn_gqa = dec == 1;
    ctx->mmvq_rows = rows_of[rows];
    ctx->mmvq_ilp = ilp + 1;
    if (e == cudaSuccess && ctx->mmv_q8_1) { // rows of up to 65536 columns without growing (q8_1_bytes)
        ctx->q8_bytes = (size_t)KVT_CUDA_MMV_MAX_ROWS * 65536 + (size_t)KVT_CUDA_MMV_MAX_ROWS * 2048 * 8;
        e = cudaMalloc(&ctx->q8, ctx->q8_bytes);
        what = "cudaMalloc (q8_1 activations)";
        if (e != cudaSuccess) ctx->q8 = nullptr, ctx->q8_bytes = 0;
    }
    if (e != cudaSuccess) {
        rc = buf_fail(err, err_len, e == cudaErrorMemoryAllocation ? KVT_CUDA_ERR_NOMEM : KVT_CUDA_ERR_RUNTIME, what, e);
        ctx_free(ctx);
        return rc;
    }
    cublasStatus_t cs = cublasCreate(&ctx->cublas);
    if (cs == CUBLAS_STATUS_SUCCESS) cs = cublasSetStream(ctx->cublas, ctx->stream[KVT_CUDA_STREAM_COMPUTE]);
    if (cs != CUBLAS_STATUS_SUCCESS) {
        if (err && err_len > 0) snprintf(err, (size_t)err_len, "cuBLAS cublasCreate/cublasSetStream failed: %s", cublasGetStatusString(cs));
        ctx_free(ctx);
        return KVT_CUDA_ERR_CUBLAS;
    }
    *out = ctx;
    return KVT_CUDA_OK;
}

const char *last_error(const kvt_cuda_ctx *ctx) { return ctx ? ctx->err : "no CUDA context"; }

// ---------------------------------------------------------------- memory

int dev_malloc(kvt_cuda_ctx *ctx, size_t bytes, void **out) {
    *out = nullptr;
    KVT_CU_CHECK(ctx, cudaMalloc(out, bytes));
    return KVT_CUDA_OK;
}
int dev_free(kvt_cuda_ctx *ctx, void *p) {
    if (p) KVT_CU_CHECK(ctx, cudaFree(p));
    return KVT_CUDA_OK;
}
int host_malloc(kvt_cuda_ctx *ctx, size_t bytes, void **out) {
    *out = nullptr;
    KVT_CU_CHECK(ctx, cudaHostAlloc(out, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
    return KVT_CUDA_OK;
}
int host_free(kvt_cuda_ctx *ctx, void *p) {
    if (p) KVT_CU_CHECK(ctx, cudaFreeHost(p));
    return KVT_CUDA_OK;
}
int host_device_ptr(kvt_cuda_ctx *ctx, void *host, void **out) {
    *out = nullptr;
    KVT_CU_CHECK(ctx, cudaHostGetDevicePointer(out, host, 0));
    return KVT_CUDA_OK;
}
int memset_dev(kvt_cuda_ctx *ctx, void *dst, int byte, size_t bytes) {
    KVT_CU_CHECK(ctx, cudaMemsetAsync(dst, byte, bytes, ctx->stream[KVT_CUDA_STREAM_COMPUTE]));
    return KVT_CUDA_OK;
}

// ---------------------------------------------------------------- transfers, streams, events

int copy_kind(kvt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, int stream, cudaMemcpyKind kind) {
    cudaStream_t s = nullptr;
    int rc = stream_of(ctx, stream, &s);
    if (rc) return rc;
    KVT_CU_CHECK(ctx, cudaMemcpyAsync(dst, src, bytes, kind, s));
    return KVT_CUDA_OK;
}
int copy_h2d(kvt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, int stream) {
    return copy_kind(ctx, dst, src, bytes, stream, cudaMemcpyHostToDevice);
}
int copy_d2h(kvt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, int stream) {
    return copy_kind(ctx, dst, src, bytes, stream, cudaMemcpyDeviceToHost);
}
int copy_d2d(kvt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, int stream) {
    return copy_kind(ctx, dst, src, bytes, stream, cudaMemcpyDeviceToDevice);
}

int event_create(kvt_cuda_ctx *ctx, kvt_cuda_event **out) {
    cudaEvent_t ev = nullptr;
    *out = nullptr;
    KVT_CU_CHECK(ctx, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    *out = (kvt_cuda_event *)ev;
    return KVT_CUDA_OK;
}
int event_free(kvt_cuda_ctx *ctx, kvt_cuda_event *ev) {
    if (ev) KVT_CU_CHECK(ctx, cudaEventDestroy((cudaEvent_t)ev));
    return KVT_CUDA_OK;
}
int event_record(kvt_cuda_ctx *ctx, kvt_cuda_event *ev, int stream) {
    cudaStream_t s = nullptr;
    int rc = stream_of(ctx, stream, &s);
    if (rc) return rc;
    KVT_CU_CHECK(ctx, cudaEventRecord((cudaEvent_t)ev, s));
    return KVT_CUDA_OK;
}
int stream_wait(kvt_cuda_ctx *ctx, int stream, kvt_cuda_event *ev) {
    cudaStream_t s = nullptr;
    int rc = stream_of(ctx, stream, &s);
    if (rc) return rc;
    KVT_CU_CHECK(ctx, cudaStreamWaitEvent(s, (cudaEvent_t)ev, 0));
    return KVT_CUDA_OK;
}
int event_sync(kvt_cuda_ctx *ctx, kvt_cuda_event *ev) {
    KVT_CU_CHECK(ctx, cudaEventSynchronize((cudaEvent_t)ev));
    return KVT_CUDA_OK;
}
int stream_sync(kvt_cuda_ctx *ctx, int stream) {
    cudaStream_t s = nullptr;
    int rc = stream_of(ctx, stream, &s);
    if (rc) return rc;
    KVT_CU_CHECK(ctx, cudaStreamSynchronize(s));
    return KVT_CUDA_OK;
}

// ---- CUDA graphs (ABI 7)

} // namespace
struct kvt_cuda_graph {
    cudaGraphExec_t exec; // the executable graph of the last capture (NULL: none yet)
    size_t n_nodes;       // its graph's node count: a capture with another count is instantiated anew, not updated
};
namespace {

int graph_begin(kvt_cuda_ctx *ctx) {
    KVT_CU_CHECK(ctx, cudaStreamBeginCapture(ctx->stream[KVT_CUDA_STREAM_COMPUTE], cudaStreamCaptureModeThreadLocal));
    return KVT_CUDA_OK;
}

int graph_end(kvt_cuda_ctx *ctx, kvt_cuda_graph **g, int launch, int *updated) {
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(ctx->stream[KVT_CUDA_STREAM_COMPUTE], &graph);
    if (e != cudaSuccess || !graph) {
        (void)cudaGetLastError(); // a spoiled capture's error is reported here, not left for the next call
        if (graph) cudaGraphDestroy(graph);
        return ctx_fail_cuda(ctx, "cudaStreamEndCapture (a spoiled capture or an unjoined stream)", e);
    }
    if (!launch) {
        cudaGraphDestroy(graph);
        return KVT_CUDA_OK;
    }
    if (!*g && !(*g = (kvt_cuda_graph *)calloc(1, sizeof **g))) {
        cudaGraphDestroy(graph);
        return ctx_fail(ctx, KVT_CUDA_ERR_NOMEM, "out of host memory for a graph");
    }
    *updated = 0;
    size_t n_nodes = 0;
    if (cudaGraphGetNodes(graph, nullptr, &n_nodes) != cudaSuccess) n_nodes = 0, (void)cudaGetLastError();
    if ((*g)->exec && (n_nodes == 0 || n_nodes != (*g)->n_nodes)) { // another topology for sure: no update tried (a
        cudaGraphExecDestroy((*g)->exec);                           // refused update is an API error to a sanitizer)
        (*g)->exec = nullptr;
    }
    (*g)->n_nodes = n_nodes;
    if ((*g)->exec) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate((*g)->exec, graph, &info) == cudaSuccess) {
            *updated = 1;
        } else { // another topology: instantiate anew (KVT_CUDA_GRAPH_DEBUG=1: why, on stderr)
            (void)cudaGetLastError();
            if (getenv("KVT_CUDA_GRAPH_DEBUG")) {
                cudaGraphNodeType t = cudaGraphNodeTypeCount;
                if (info.errorNode) (void)cudaGraphNodeGetType(info.errorNode, &t);
                fprintf(stderr, "kvt cuda graph: update refused: result %d, node type %d\n", (int)info.result, (int)t);
            }
            cudaGraphExecDestroy((*g)->exec);
            (*g)->exec = nullptr;
        }
    }
    cudaError_t ei = (*g)->exec ? cudaSuccess : cudaGraphInstantiate(&(*g)->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (ei != cudaSuccess) {
        (*g)->exec = nullptr;
        return ctx_fail_cuda(ctx, "cudaGraphInstantiate", ei);
    }
    KVT_CU_CHECK(ctx, cudaGraphLaunch((*g)->exec, ctx->stream[KVT_CUDA_STREAM_COMPUTE]));
    return KVT_CUDA_OK;
}

int graph_free(kvt_cuda_ctx *ctx, kvt_cuda_graph *g) {
    if (!g) return KVT_CUDA_OK;
    const cudaError_t e = g->exec ? cudaGraphExecDestroy(g->exec) : cudaSuccess;
    free(g);
    return e == cudaSuccess ? KVT_CUDA_OK : ctx_fail_cuda(ctx, "cudaGraphExecDestroy", e);
}

int workspace_reserve(kvt_cuda_ctx *ctx, size_t bytes) {
    void *ws;
    return ctx_workspace(ctx, bytes, &ws);
}

const kvt_cuda_api k_api = {
    KVT_CUDA_ABI_VERSION,
    (int)sizeof(kvt_cuda_api),
    device_count,
    device_info,
    ctx_init,
    ctx_free,
    last_error,
    dev_malloc,
    dev_free,
    host_malloc,
    host_free,
    memset_dev,
    copy_h2d,
    copy_d2h,
    copy_d2d,
    event_create,
    event_free,
    event_record,
    stream_wait,
    event_sync,
    stream_sync,
    kvt_cu_mul_mat_vec,
    kvt_cu_mul_mat_vec_multi,
    kvt_cu_mul_mat_gemm,
    kvt_cu_dequant_f16,
    kvt_cu_rmsnorm,
    kvt_cu_rope,
    kvt_cu_swiglu,
    kvt_cu_geglu,
    kvt_cu_add,
    kvt_cu_get_rows,
    kvt_cu_argmax,
    kvt_cu_attn_paged,
    host_device_ptr,
    kvt_cu_copy_batch,
    graph_begin,
    graph_end,
    graph_free,
    workspace_reserve,
};

} // namespace

extern "C" __attribute__((visibility("default"))) const kvt_cuda_api *kvt_cuda_get_api(int abi_version) {
    return abi_version == KVT_CUDA_ABI_VERSION ? &k_api : nullptr;
}
