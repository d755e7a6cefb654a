// profile_gpu.c - fills a profile's GPU figures through the CUDA probe, in the CUDA backend's library
// (loaded by kvt_cuda_backend_open, dlopen) so that kvtier runs (and builds) without the CUDA runtime.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "../base/timer.h"
#include "../cuda/cuda_probe.h"
#include "../exec/backend_cuda.h"
#include "profile.h"

kvt_status kvt_profile_gpu(int device, bool quick, kvt_profile *p, kvt_err *err) {
    kvt_cuda_backend be;
    kvt_err berr = {0};
    if (kvt_cuda_backend_open(&be, &berr)) return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "no CUDA probe: %s", berr.msg);
    kvt_cuda_probe_fn fn;
    *(void **)&fn = dlsym(be.lib, KVT_CUDA_PROBE_SYMBOL);
    if (!fn) {
        kvt_errorf(err, KVT_ERR_UNSUPPORTED, "no CUDA probe: %s lacks %s", be.path, KVT_CUDA_PROBE_SYMBOL);
        kvt_cuda_backend_close(&be);
        return KVT_ERR_UNSUPPORTED;
    }
    kvt_cuda_probe_result r;
    char msg[256];
    int rc = fn(device, quick ? 1 : 0, &r, msg, (int)sizeof msg);
    kvt_cuda_backend_close(&be);
    if (rc) return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "CUDA probe: %s", msg);
    p->has_gpu = true;
    snprintf(p->gpu_name, sizeof p->gpu_name, "%s", r.name);
    p->vram_bytes = r.vram_bytes;
    // what the CUDA context and runtime already hold, plus 1 GiB for activations and workspaces
    // (helm.txt reserves about 1 GB of the RTX 4060's 8 GB); a constant, so that `plan --vram`
    // on a smaller card keeps the same reserve
    int64_t reserved = r.vram_bytes - r.vram_free_bytes;
    reserved += (int64_t)1 << 30;
    p->vram_reserved_bytes = reserved;
    p->gpu_mem_gbps = r.mem_gbps;
    p->gpu_gemm_gflops = r.gemm_gflops;
    p->h2d_gbps = r.h2d_gbps;
    p->d2h_gbps = r.d2h_gbps;
    p->h2d_latency_us = r.h2d_latency_us;
    p->d2h_latency_us = r.d2h_latency_us;
    return KVT_OK;
}

// The buffers of one measurement (freed by bufs_free).
typedef struct {
    float *x, *y;
    void *W;
    uint8_t *h, *d;
} bufs;
static void bufs_free(const kvt_cuda_api *A, kvt_cuda_ctx *c, bufs *b) {
    A->dev_free(c, b->x), A->dev_free(c, b->y), A->dev_free(c, b->W), A->dev_free(c, b->d), A->host_free(c, b->h);
    *b = (bufs){0};
}

static kvt_status kernels(const kvt_cuda_api *A, kvt_cuda_ctx *c, bool quick, kvt_profile *p, bufs *b, kvt_err *err) {
    static const kvt_type types[] = {KVT_TYPE_Q4_K, KVT_TYPE_F16, KVT_TYPE_Q8_0, KVT_TYPE_Q4_0, KVT_TYPE_Q6_K};
    const int64_t n = 4096, reps = quick ? 3 : 10;
    if (A->dev_malloc(c, (size_t)n * sizeof(float), (void **)&b->x) || A->dev_malloc(c, (size_t)n * sizeof(float), (void **)&b->y) ||
        A->memset_dev(c, b->x, 0, (size_t)n * sizeof(float)))
        return kvt_errorf(err, KVT_ERR_IO, "CUDA: %s", A->last_error(c));
    for (int k = 0; k < (quick ? 2 : 5); k++) {
        const kvt_type t = types[k];
        const size_t bytes = (size_t)kvt_row_size(t, n) * (size_t)n;
        // weights: a constant byte (small f16 scales; the time does not depend on the values)
        if (A->dev_malloc(c, bytes, &b->W) || A->memset_dev(c, b->W, 0x11, bytes) || A->stream_sync(c, KVT_CUDA_STREAM_COMPUTE) ||
            A->mul_mat_vec(c, t, b->W, n, n, b->x, 1, b->y) || A->stream_sync(c, KVT_CUDA_STREAM_COMPUTE)) // (warm-up)
            return kvt_errorf(err, KVT_ERR_IO, "CUDA matvec of %s: %s", kvt_type_name(t), A->last_error(c));
        const double t0 = kvt_time_ms();
        for (int64_t r = 0; r < reps; r++) {
            if (A->mul_mat_vec(c, t, b->W, n, n, b->x, 1, b->y)) return kvt_errorf(err, KVT_ERR_IO, "CUDA: %s", A->last_error(c));
        }
        if (A->stream_sync(c, KVT_CUDA_STREAM_COMPUTE)) return kvt_errorf(err, KVT_ERR_IO, "CUDA: %s", A->last_error(c));
        const double ms = kvt_time_ms() - t0;
        p->gpu_gemv_gbps[t] = ms > 0 ? (double)bytes * (double)reps / (ms * 1e6) : 0;
        A->dev_free(c, b->W);
        b->W = NULL;
    }
    // the device KV's copies: blocks of 16 KiB, pinned host -> VRAM, KVT_CUDA_COPY_BATCH_MAX to a kernel
    const size_t blk = 16 << 10, total = (size_t)(quick ? 16 : 64) << 20, nb = total / blk;
    uint8_t *hd = NULL, *d;
    kvt_cuda_copy list[KVT_CUDA_COPY_BATCH_MAX];
    if (A->host_malloc(c, total, (void **)&b->h)) return kvt_errorf(err, KVT_ERR_IO, "CUDA: %s", A->last_error(c));
    memset(b->h, 0x22, total);
    if (A->host_device_ptr(c, b->h, (void **)&hd) || A->dev_malloc(c, total, (void **)&b->d))
        return kvt_errorf(err, KVT_ERR_IO, "CUDA: %s", A->last_error(c));
    d = b->d;
    double best = 0;
    for (int r = 0; r < 3; r++) { // (the first a warm-up: the best of the other two)
        const double t0 = kvt_time_ms();
        for (size_t i = 0; i < nb; i += KVT_CUDA_COPY_BATCH_MAX) {
            const int m = nb - i < KVT_CUDA_COPY_BATCH_MAX ? (int)(nb - i) : KVT_CUDA_COPY_BATCH_MAX;
            for (int j = 0; j < m; j++) list[j] = (kvt_cuda_copy){d + (i + (size_t)j) * blk, hd + (i + (size_t)j) * blk, blk};
            if (A->copy_batch(c, list, m, KVT_CUDA_STREAM_COPY)) break;
        }
        const int rc = A->stream_sync(c, KVT_CUDA_STREAM_COPY);
        const double ms = kvt_time_ms() - t0, gbps = ms > 0 ? (double)total / (ms * 1e6) : 0;
        if (rc) return kvt_errorf(err, KVT_ERR_IO, "CUDA batched copies: %s", A->last_error(c));
        if (r > 0 && gbps > best) best = gbps;
    }
    p->gpu_kv_copy_gbps = best;
    return KVT_OK;
}

kvt_status kvt_profile_gpu_kernels(bool quick, kvt_profile *p, char *dev, size_t n_dev, kvt_err *err) {
    if (n_dev) dev[0] = 0;
    kvt_cuda_backend be;
    kvt_err berr = {0};
    if (kvt_cuda_backend_open(&be, &berr)) return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "%s", berr.msg);
    char msg[KVT_CUDA_ERR_MAX] = "";
    kvt_cuda_device_info info;
    kvt_cuda_ctx *c = NULL;
    kvt_status st = KVT_OK;
    if (be.api->device_info(0, &info, msg, (int)sizeof msg) || be.api->ctx_init(0, &c, msg, (int)sizeof msg))
        st = kvt_errorf(err, KVT_ERR_UNSUPPORTED, "CUDA device 0: %s", msg);
    else {
        snprintf(dev, n_dev, "%s", info.name);
        bufs b = {0};
        st = kernels(be.api, c, quick, p, &b, err);
        bufs_free(be.api, c, &b);
    }
    if (c) be.api->ctx_free(c);
    kvt_cuda_backend_close(&be);
    return st;
}
