// profile_gpu.c - fills a profile's GPU figures through the CUDA probe, in the CUDA backend's library
// (loaded by kvt_cuda_backend_open, dlopen) so that kvtier runs (and builds) without the CUDA runtime.
#include <dlfcn.h>
#include <stdio.h>

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
