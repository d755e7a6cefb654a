// backend_cuda.h - loads kvtier's CUDA backend (build/libkvtier-cuda.so, src/cuda/kvt_cuda.h) at run
// time with dlopen, so that kvtier builds and runs without the CUDA runtime. Library code: no prints.
#ifndef KVT_BACKEND_CUDA_H
#define KVT_BACKEND_CUDA_H

#include <stddef.h>

#include "../base/status.h"
#include "../cuda/kvt_cuda.h"

typedef struct {
    void *lib;                 // dlopen handle, owned (closed by kvt_cuda_backend_close)
    const kvt_cuda_api *api;   // the library's table (static storage inside lib)
    int n_devices;             // CUDA devices found (>= 1 once open)
    char path[4096 + 32];      // the library loaded
} kvt_cuda_backend;

// Path of the CUDA library: $KVT_CUDA_LIB when set and non-empty, else libkvtier-cuda.so in the
// directory of the running executable (build/ for build/kvtier and build/kvtier-tests). Writes at
// most n bytes into buf (always NUL-terminated when n > 0).
void kvt_cuda_lib_path(char *buf, size_t n);

// Loads the library at kvt_cuda_lib_path, looks up kvt_cuda_get_api, checks its ABI version
// (KVT_CUDA_ABI_VERSION) and that at least one device exists. On success *b holds the handle and the
// table; on failure *b is zeroed, nothing stays loaded, and err says why:
//   KVT_ERR_NOT_FOUND    the library file does not exist (kvtier built without nvcc)
//   KVT_ERR_IO           the file exists but dlopen failed (dlerror's text: a missing libcublas ...)
//   KVT_ERR_FORMAT       the symbol is missing or the ABI version differs (a stale library)
//   KVT_ERR_UNSUPPORTED  no CUDA device or driver (the library's message: cudaGetDeviceCount's error)
kvt_status kvt_cuda_backend_open(kvt_cuda_backend *b, kvt_err *err);

// Unloads the library (contexts made through b->api must be freed before). A zeroed *b is a no-op.
void kvt_cuda_backend_close(kvt_cuda_backend *b);

#endif
