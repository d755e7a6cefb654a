// cuda_copy.cu - copy_batch: many scattered copies (KV blocks between VRAM and mapped pinned host memory) as one
// kernel, so that small blocks cross PCIe in one transfer instead of one DMA (and one launch overhead) each.
#include "cuda_common.cuh"

namespace {

// The list travels as the kernel's argument (KVT_CUDA_COPY_BATCH_MAX x 24 bytes: within the 4 KiB parameter limit),
// so the caller's array may go at once.
struct copy_list {
    kvt_cuda_copy c[KVT_CUDA_COPY_BATCH_MAX];
};

// Block (x, y) copies its share of copy y: 16-byte words strided over the x blocks' threads (bytes where an address
// or the size is not a multiple of 16).
__global__ void copy_batch_kernel(const copy_list L) {
    const kvt_cuda_copy c = L.c[blockIdx.y];
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x, t0 = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
    if ((((uintptr_t)c.dst | (uintptr_t)c.src | c.bytes) & 15) == 0) {
        uint4 *d = (uint4 *)c.dst;
        const uint4 *s = (const uint4 *)c.src;
        for (uint64_t i = t0; i < c.bytes / 16; i += stride) d[i] = s[i];
    } else {
        uint8_t *d = (uint8_t *)c.dst;
        const uint8_t *s = (const uint8_t *)c.src;
        for (uint64_t i = t0; i < c.bytes; i += stride) d[i] = s[i];
    }
}

} // namespace

int kvt_cu_copy_batch(kvt_cuda_ctx *ctx, const kvt_cuda_copy *list, int n, int stream) {
    if (n < 1 || n > KVT_CUDA_COPY_BATCH_MAX || !list) return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "copy_batch: %d copies", n);
    if (stream < 0 || stream >= KVT_CUDA_STREAM_COUNT) return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "stream id %d does not exist", stream);
    cudaStream_t s = ctx->stream[stream];
    copy_list L;
    uint64_t most = 0;
    for (int i = 0; i < n; i++) {
        if (!list[i].dst || !list[i].src) return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "copy_batch: copy %d has a null address", i);
        L.c[i] = list[i];
        most = list[i].bytes > most ? list[i].bytes : most;
    }
    // enough 256-thread blocks per copy for a word per thread up to 64 KiB, at most 64 per copy (grid-stride past)
    const int64_t words = (int64_t)(most + 15) / 16;
    const unsigned bx = (unsigned)(words / 256 < 1 ? 1 : words / 256 > 64 ? 64 : words / 256);
    copy_batch_kernel<<<dim3(bx, (unsigned)n), 256, 0, s>>>(L);
    return ctx_check_launch(ctx, "copy_batch_kernel");
}
