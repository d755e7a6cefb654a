// profile_gpu.c - fills a profile's GPU figures through the CUDA probe, loaded
// with dlopen so that kvtier runs (and builds) without the CUDA runtime.
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../cuda/cuda_probe.h"
#include "profile.h"

// Path of the probe library: $KVT_CUDA_LIB, else libkvtier-cuda.so beside the running executable.
static void probe_path(char *buf, size_t n) {
    const char *env = getenv("KVT_CUDA_LIB");
    if (env && *env) {
        snprintf(buf, n, "%s", env);
        return;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        snprintf(buf, n, "%s", KVT_CUDA_LIB_NAME);
        return;
    }
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(buf, n, "%s/%s", exe, KVT_CUDA_LIB_NAME);
}

kvt_status kvt_profile_gpu(int device, bool quick, kvt_profile *p, kvt_err *err) {
    char path[PATH_MAX + 32];
    probe_path(path, sizeof path);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "no CUDA probe: cannot load %s (%s)", path, why ? why : "unknown");
    }
    kvt_cuda_probe_fn fn;
    *(void **)&fn = dlsym(lib, KVT_CUDA_PROBE_SYMBOL);
    if (!fn) {
        dlclose(lib);
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "no CUDA probe: %s lacks %s", path, KVT_CUDA_PROBE_SYMBOL);
    }
    kvt_cuda_probe_result r;
    char msg[256];
    int rc = fn(device, quick ? 1 : 0, &r, msg, (int)sizeof msg);
    dlclose(lib);
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
