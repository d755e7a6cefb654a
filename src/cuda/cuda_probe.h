// cuda_probe.h - the C interface of the CUDA device probe (src/cuda/cuda_probe.cu).
//
// The probe is built by nvcc into build/libkvtier-cuda.so (when nvcc exists) and
// loaded at run time with dlopen by the planner's profiler (src/plan/profile_gpu.c, the library's
// path from kvt_cuda_lib_path in src/exec/backend_cuda.h),
// so that kvtier itself never links the CUDA runtime and runs on machines without
// it. Plain C types only: this header is included by C11 and by CUDA C++.
#ifndef KVT_CUDA_PROBE_H
#define KVT_CUDA_PROBE_H

#include <stdint.h>

#include "kvt_cuda.h"

typedef struct {
    char name[96];          // device name
    int64_t vram_bytes;     // total device memory
    int64_t vram_free_bytes;// free at probe time (after the CUDA context exists)
    double mem_gbps;        // device memory read bandwidth (a streaming read kernel), 1e9 B/s
    double gemm_gflops;     // cuBLAS GEMM f16 x f16 -> f32, (n_tok x H) x (H x H), 1e9 FLOP/s
    double h2d_gbps;        // pinned host -> device, large copies
    double d2h_gbps;        // device -> pinned host, large copies
    double h2d_latency_us;  // one 4-byte pinned copy, synchronous, median
    double d2h_latency_us;
} kvt_cuda_probe_result;

// Measures device `device`. quick: smaller buffers (about 64 MiB instead of 512 MiB).
// Returns 0 on success; else non-zero with a message in err[err_len] (no device,
// out of device memory, a CUDA or cuBLAS error named with the call that failed).
typedef int (*kvt_cuda_probe_fn)(int device, int quick, kvt_cuda_probe_result *out, char *err, int err_len);

#define KVT_CUDA_PROBE_SYMBOL "kvt_cuda_probe"
#define KVT_CUDA_LIB_NAME KVT_CUDA_LIB_FILE // one name for both (kvt_cuda.h)

#endif
