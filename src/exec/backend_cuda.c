// backend_cuda.c - dlopen loader of the CUDA backend table (backend_cuda.h).
#include "backend_cuda.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/dtype.h"

// The backend numbers weight types as kvt_type does (GGUF's ids), so a kvt_type passes unchanged.
#define SAME_ID(a, b) _Static_assert((int)(a) == (int)(b), #a " is " #b)
SAME_ID(KVT_CUDA_F32, KVT_TYPE_F32);
SAME_ID(KVT_CUDA_F16, KVT_TYPE_F16);
SAME_ID(KVT_CUDA_BF16, KVT_TYPE_BF16);
SAME_ID(KVT_CUDA_Q4_0, KVT_TYPE_Q4_0);
SAME_ID(KVT_CUDA_Q4_1, KVT_TYPE_Q4_1);
SAME_ID(KVT_CUDA_Q8_0, KVT_TYPE_Q8_0);
SAME_ID(KVT_CUDA_Q4_K, KVT_TYPE_Q4_K);
SAME_ID(KVT_CUDA_Q5_K, KVT_TYPE_Q5_K);
SAME_ID(KVT_CUDA_Q6_K, KVT_TYPE_Q6_K);

void kvt_cuda_lib_path(char *buf, size_t n) {
    if (n == 0) return;
    const char *env = getenv("KVT_CUDA_LIB");
    if (env && *env) {
        snprintf(buf, n, "%s", env);
        return;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        snprintf(buf, n, "%s", KVT_CUDA_LIB_FILE);
        return;
    }
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(buf, n, "%s/%s", exe, KVT_CUDA_LIB_FILE);
}

kvt_status kvt_cuda_backend_open(kvt_cuda_backend *b, kvt_err *err) {
    memset(b, 0, sizeof *b);
    char path[sizeof b->path];
    kvt_cuda_lib_path(path, sizeof path);
    if (access(path, R_OK) != 0) return kvt_errorf(err, KVT_ERR_NOT_FOUND, "no CUDA library at %s", path);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        return kvt_errorf(err, KVT_ERR_IO, "cannot load %s: %s", path, why ? why : "unknown dlopen error");
    }
    kvt_cuda_get_api_fn get;
    *(void **)&get = dlsym(lib, KVT_CUDA_API_SYMBOL);
    if (!get) {
        dlclose(lib);
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s lacks %s", path, KVT_CUDA_API_SYMBOL);
    }
    const kvt_cuda_api *api = get(KVT_CUDA_ABI_VERSION);
    if (!api || api->abi_version != KVT_CUDA_ABI_VERSION || api->struct_size != (int)sizeof(kvt_cuda_api)) {
        dlclose(lib);
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: CUDA backend ABI differs from this kvtier's (version %d, table of %d bytes): rebuild it",
                          path, KVT_CUDA_ABI_VERSION, (int)sizeof(kvt_cuda_api));
    }
    char msg[256] = "";
    int n = 0;
    if (api->device_count(&n, msg, (int)sizeof msg) != KVT_CUDA_OK || n < 1) {
        dlclose(lib);
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "%s", msg[0] ? msg : "no CUDA device");
    }
    b->lib = lib;
    b->api = api;
    b->n_devices = n;
    snprintf(b->path, sizeof b->path, "%s", path);
    return KVT_OK;
}

void kvt_cuda_backend_close(kvt_cuda_backend *b) {
    if (b->lib) dlclose(b->lib);
    memset(b, 0, sizeof *b);
}
