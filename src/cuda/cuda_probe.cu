// cuda_probe.cu - measures a CUDA device for the planner's profile (helm.txt §4.1.2):
// device memory bandwidth, pinned host<->device bandwidth and latency, GEMM FLOP/s.
// Built into build/libkvtier-cuda.so and loaded with dlopen (see cuda_probe.h).
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <vector>

#include "cuda_probe.h"

namespace {

// Each thread sums float4 loads over a grid-stride loop; one partial per thread keeps the loads live.
__global__ void read_kernel(const float4 *__restrict__ src, int64_t n, float *__restrict__ sink) {
    float acc = 0.0f;
    const int64_t S = (int64_t)gridDim.x * blockDim.x;
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (; i + 3 * S < n; i += 4 * S) { // 4 loads in flight per thread
        const float4 a = src[i], b = src[i + S], c = src[i + 2 * S], d = src[i + 3 * S];
        acc += (a.x + a.y + a.z + a.w) + (b.x + b.y + b.z + b.w) + (c.x + c.y + c.z + c.w) + (d.x + d.y + d.z + d.w);
    }
    for (; i < n; i += S) {
        const float4 v = src[i];
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 12345.678f) sink[0] = acc; // practically never true; stops the loads being dropped
}

__global__ void fill_half(__half *p, int64_t n, float value) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        p[i] = __float2half(value);
    }
}

struct probe_state {
    char *err;
    int err_len;
    bool fail(const char *what, cudaError_t e) {
        snprintf(err, (size_t)err_len, "CUDA %s failed: %s", what, cudaGetErrorString(e));
        return false;
    }
};

#define CK(call)                                   \
    do {                                           \
        cudaError_t e_ = (call);                   \
        if (e_ != cudaSuccess) return S.fail(#call, e_); \
    } while (0)

// Milliseconds of fn() between two events, best of reps.
template <class F> bool time_best(probe_state &S, int reps, F fn, float *best_ms) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float best = 1e30f;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(a));
        if (!fn()) return false;
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        best = std::min(best, ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    *best_ms = best;
    return true;
}

bool probe(int device, bool quick, kvt_cuda_probe_result *out, probe_state &S) {
    int n_dev = 0;
    CK(cudaGetDeviceCount(&n_dev));
    if (device < 0 || device >= n_dev) {
        snprintf(S.err, (size_t)S.err_len, "CUDA device %d does not exist (%d devices)", device, n_dev);
        return false;
    }
    CK(cudaSetDevice(device));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, device));
    snprintf(out->name, sizeof out->name, "%.95s", prop.name);
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b));
    out->vram_bytes = (int64_t)total_b;
    out->vram_free_bytes = (int64_t)free_b;

    const size_t bytes = (quick ? 64u : 512u) << 20; // [bytes] device buffer and pinned host buffer
    void *dbuf = nullptr, *hbuf = nullptr;
    float *sink = nullptr;
    CK(cudaMalloc(&dbuf, bytes));
    CK(cudaMalloc(&sink, sizeof(float)));
    CK(cudaHostAlloc(&hbuf, bytes, cudaHostAllocDefault));
    // non-zero data: zeros can read faster than real data on some parts
    fill_half<<<prop.multiProcessorCount * 8, 256>>>((__half *)dbuf, (int64_t)(bytes / sizeof(__half)), 0.5f);
    CK(cudaGetLastError());
    memset(hbuf, 0x3c, bytes);
    const int reps = quick ? 3 : 5;
    float ms = 0;

    // device memory read bandwidth: 1 GiB (20 times an H200's L2; the quick profile's 64 MiB was about its L2 and a
    // read of ~20 us, where a launch's latency shows), read twice per sample
    const size_t rbytes = (size_t)1 << 30;
    void *rbuf = nullptr;
    CK(cudaMalloc(&rbuf, rbytes));
    const int grid = prop.multiProcessorCount * 8;
    fill_half<<<grid, 256>>>((__half *)rbuf, (int64_t)(rbytes / sizeof(__half)), 0.5f);
    CK(cudaGetLastError());
    const int64_t n4 = (int64_t)(rbytes / sizeof(float4));
    if (!time_best(S, reps, [&] {
            for (int k = 0; k < 2; k++) read_kernel<<<grid, 256>>>((const float4 *)rbuf, n4, sink);
            cudaError_t e = cudaGetLastError();
            return e == cudaSuccess ? true : S.fail("read_kernel launch", e);
        }, &ms))
        return false;
    CK(cudaFree(rbuf));
    out->mem_gbps = 2.0 * (double)rbytes / (ms * 1e-3) / 1e9;

    // pinned copies, large
    if (!time_best(S, reps, [&] {
            cudaError_t e = cudaMemcpyAsync(dbuf, hbuf, bytes, cudaMemcpyHostToDevice);
            return e == cudaSuccess ? true : S.fail("cudaMemcpyAsync(H2D)", e);
        }, &ms))
        return false;
    out->h2d_gbps = (double)bytes / (ms * 1e-3) / 1e9;
    if (!time_best(S, reps, [&] {
            cudaError_t e = cudaMemcpyAsync(hbuf, dbuf, bytes, cudaMemcpyDeviceToHost);
            return e == cudaSuccess ? true : S.fail("cudaMemcpyAsync(D2H)", e);
        }, &ms))
        return false;
    out->d2h_gbps = (double)bytes / (ms * 1e-3) / 1e9;

    // latency: one small synchronous pinned copy, median of 101
    for (int dir = 0; dir < 2; dir++) {
        std::vector<double> us;
        for (int i = 0; i < 101; i++) {
            cudaEvent_t a, b;
            CK(cudaEventCreate(&a));
            CK(cudaEventCreate(&b));
            CK(cudaEventRecord(a));
            if (dir == 0) CK(cudaMemcpyAsync(dbuf, hbuf, 4, cudaMemcpyHostToDevice));
            else CK(cudaMemcpyAsync(hbuf, dbuf, 4, cudaMemcpyDeviceToHost));
            CK(cudaEventRecord(b));
            CK(cudaEventSynchronize(b));
            float t = 0;
            CK(cudaEventElapsedTime(&t, a, b));
            us.push_back(t * 1e3);
            cudaEventDestroy(a);
            cudaEventDestroy(b);
        }
        std::sort(us.begin(), us.end());
        (dir == 0 ? out->h2d_latency_us : out->d2h_latency_us) = us[us.size() / 2];
    }
    CK(cudaFreeHost(hbuf));
    CK(cudaFree(dbuf));

    // GEMM: C[H, T] = W[H, H] x X[H, T], f16 inputs, f32 accumulate (the prefill shape of helm.txt:
    // one weight matrix of a 4096-wide model against a 512-token micro-batch), kGemms of them back to back per sample:
    // one GEMM of this size runs in ~30 us on an H200, and a sample of one timed cuBLAS's host work with it (the quick
    // profile's 2048 x 2048 x 128 said 61 TFLOP/s on an H200 on 2026-12-04, where the layers' GEMMs ran at 614)
    const int H = 4096, T = 512, kGemms = 10;
    __half *W = nullptr, *X = nullptr;
    float *C = nullptr;
    CK(cudaMalloc(&W, (size_t)H * H * sizeof(__half)));
    CK(cudaMalloc(&X, (size_t)H * T * sizeof(__half)));
    CK(cudaMalloc(&C, (size_t)H * T * sizeof(float)));
    fill_half<<<grid, 256>>>(W, (int64_t)H * H, 0.01f);
    fill_half<<<grid, 256>>>(X, (int64_t)H * T, 0.02f);
    CK(cudaGetLastError());
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        snprintf(S.err, (size_t)S.err_len, "cuBLAS cublasCreate failed");
        return false;
    }
    const float alpha = 1.0f, beta = 0.0f;
    bool ok = time_best(S, reps + 2, [&] {
        for (int k = 0; k < kGemms; k++) {
            cublasStatus_t cs = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, H, T, H, &alpha, W, CUDA_R_16F, H, X, CUDA_R_16F, H,
                                             &beta, C, CUDA_R_32F, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            if (cs != CUBLAS_STATUS_SUCCESS) {
                snprintf(S.err, (size_t)S.err_len, "cuBLAS cublasGemmEx failed (status %d)", (int)cs);
                return false;
            }
        }
        return true;
    }, &ms);
    ms /= kGemms;
    cublasDestroy(h);
    cudaFree(W);
    cudaFree(X);
    cudaFree(C);
    cudaFree(sink);
    if (!ok) return false;
    out->gemm_gflops = 2.0 * H * H * T / (ms * 1e-3) / 1e9;
    return true;
}

} // namespace

extern "C" __attribute__((visibility("default"))) int kvt_cuda_probe(int device, int quick, kvt_cuda_probe_result *out, char *err, int err_len) {
    *out = kvt_cuda_probe_result{};
    probe_state S{err, err_len};
    if (err_len > 0) err[0] = 0;
    return probe(device, quick != 0, out, S) ? 0 : 1;
}
