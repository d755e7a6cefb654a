// profile.h - a measured (or hand-written) hardware profile for the planner.
//
// The profile holds the device capabilities of helm.txt §4.1.2 (Eq. 4.6:
// DeviceProfile (P_dec, P_pre, M, C_L3, B_L3) per device and LinkProfile
// (B_link, l_link)), plus what the KV tiers need: memory sizes and the disk's
// sequential bandwidth and latency. It is stored as one flat JSON object whose
// key names carry the unit ("cpu_read_gbps", "l3_bytes", "h2d_latency_us"):
//   *_gbps     10^9 bytes per second     *_gflops  10^9 floating-point ops / s
//   *_bytes    bytes                     *_us / *_ms  microseconds / milliseconds
// Absent keys read as 0 = unknown; the cost model then falls back (GEMV
// bandwidth -> cpu_read_gbps, B_L3 -> 3 x M as in helm.txt). GPU keys are
// present only when a CUDA device was measured or the file was written by hand.
#ifndef KVT_PLAN_PROFILE_H
#define KVT_PLAN_PROFILE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../base/file.h"
#include "../base/status.h"
#include "../kernels/dtype.h"

typedef struct {
    char name[96];                         // free text, e.g. "rtx4060-laptop (helm.txt)"
    // CPU
    int32_t cpu_threads;                   // threads used for the measurements
    double cpu_read_gbps;                  // M: sustained multithreaded DRAM read bandwidth
    int64_t l3_bytes;                      // C_L3 (0 unknown)
    double l3_read_gbps;                   // B_L3 (0: 3 x cpu_read_gbps, helm.txt §4.1.2)
    double cpu_gemv_gbps[KVT_TYPE_COUNT];  // achieved weight bytes/s of our GEMV per weight type, 4096-wide rows (0 unmeasured)
    double cpu_gemv_gbps_1024[KVT_TYPE_COUNT]; // the same with 1024-wide rows (0: unmeasured, use the 4096 figure)
    double cpu_gemv_gbps_2048[KVT_TYPE_COUNT]; // the same with 2048-wide rows
    double cpu_gemm_gflops[KVT_TYPE_COUNT];// achieved FLOP/s of our GEMM at n_tok = 128 per weight type
    double cpu_gemm_gflops_1024[KVT_TYPE_COUNT]; // GEMM with 1024 inputs x 2048 outputs (0: use cpu_gemm_gflops)
    double cpu_gemm_gflops_2048[KVT_TYPE_COUNT]; // GEMM with 2048 inputs x 4096 outputs
    double cpu_attn_gflops;                // achieved FLOP/s of our attention, one token over 2048 positions (decode)
    double cpu_attn_prefill_gflops;        // the same for a 128-token causal prompt (prefill)
    double cpu_attn_prefill_deep_gflops;   // the same for a deep prompt chunk: 512 queries at positions 1536..2047
                                           // (0: unmeasured, cpu_attn_prefill_gflops at every depth)
    double cpu_swiglu_gelems;              // SwiGLU elements/s (10^9) of our kernel over a [128, 4096] prefill
                                           // activation, split over the threads as the forward pass splits it
    double cpu_block_overhead_ms;          // delta: fixed cost per transformer block per token (helm §6.4.4)
    double cpu_prefill_overhead_ms;        // delta_pre: the same in prefill, per partition unit per prompt token
    int64_t ram_bytes;                     // host DRAM size
    int64_t ram_reserved_bytes;            // kept free for the OS and other programs
    // disk (the KV tier T2)
    char disk_dir[256];                    // where the disk figures were measured
    double disk_read_gbps, disk_write_gbps;        // sequential, O_DIRECT, 1 MiB requests
    double disk_read_latency_us, disk_write_latency_us; // one 4 KiB O_DIRECT request (write: + O_DSYNC)
    int64_t disk_free_bytes;               // free space in disk_dir at measurement time
    bool disk_o_direct;                    // O_DIRECT worked (false: page-cache figures)
    // GPU (has_gpu false: all zero)
    bool has_gpu;
    char gpu_name[96];
    int64_t vram_bytes;                    // device memory
    int64_t vram_reserved_bytes;           // CUDA context, runtime, prefill activations
    double gpu_mem_gbps;                   // M_GPU
    double gpu_gemm_gflops;                // P_pre on GPU ((128,H) x (H,H))
    double h2d_gbps, d2h_gbps;             // pinned memory, large copies
    double h2d_latency_us, d2h_latency_us; // l_link: one small pinned copy
    double gpu_block_overhead_ms;          // delta on the GPU (helm Table 6.5: 0.14 ms on the RTX 4060)
    double gpu_gemv_gbps[KVT_TYPE_COUNT];  // achieved weight bytes/s of kvtier's own device matvec (the backend table's
                                           // mul_mat_vec, 4096 x 4096, one row; 0 unmeasured: gpu_mem_gbps is used)
    double gpu_kv_copy_gbps;               // the device KV's batched copies (copy_batch), pinned host -> VRAM, 16 KiB blocks
} kvt_profile;

typedef struct {
    const char *dir;     // disk measurement directory (NULL: /tmp)
    int n_threads;       // 0: physical cores
    bool quick;          // smaller buffers, fewer types (seconds, not tens of seconds)
    FILE *log;           // progress lines (NULL: silent)
} kvt_profile_opts;

void kvt_profile_init(kvt_profile *p); // zero, name "unknown"

// Measures this machine (CPU, memory, disk; no GPU unless a CUDA build adds it).
kvt_status kvt_profile_measure(const kvt_profile_opts *o, kvt_profile *p, kvt_err *err);
// Individual measurements (also used by tests with small sizes).
int64_t kvt_profile_l3_bytes(void);                         // from sysfs; 0 if unknown
int64_t kvt_profile_ram_bytes(void);                        // physical memory
// GEMV bytes/s of kvt_matmul_rows for weight type t over `bytes` of weights (n_tok = 1);
// GEMM FLOP/s at n_tok tokens (gflops may be NULL). 0 if t cannot be computed.
// The prefill attention points the profile measures: a KVT_PROFILE_ATTN_PROMPT-token prompt from position 0, and a
// chunk of KVT_PROFILE_ATTN_DEEP_N queries from position KVT_PROFILE_ATTN_DEEP_POS (the engine's prompt chunk, deep in
// a long prompt). The cost model interpolates between them by the positions a query attends (src/plan/cost.c).
#define KVT_PROFILE_ATTN_PROMPT 128
#define KVT_PROFILE_ATTN_DEEP_POS 1536
#define KVT_PROFILE_ATTN_DEEP_N 512
// Measures cpu_attn_gflops, cpu_attn_prefill_gflops and cpu_attn_prefill_deep_gflops (src/plan/profile_attn.c):
// kvt_attention on an F16 contiguous cache, 16 query heads over 4 KV heads of 64; FLOPs = 4 x heads x head_dim per
// attended position. Best of at least reps runs and 0.2 s.
kvt_status kvt_profile_attn(int n_threads, int reps, kvt_profile *p, kvt_err *err);
// Measures cpu_swiglu_gelems (src/plan/profile_attn.c): kvt_swiglu_par (the forward pass's split)
// over 128 x 4096 elements, median of at least reps runs and 0.1 s (the expf of each element is what
// costs; a prefill spends it once per layer per token on n_ff elements).
kvt_status kvt_profile_swiglu(int n_threads, int reps, kvt_profile *p, kvt_err *err);
// GEMV bandwidth of type t over rows of `width` inputs (a multiple of 256) in a buffer of about `bytes`;
// with gemm_gflops, also the GEMM rate at gemm_tok tokens on min(rows, 4096) rows.
double kvt_profile_gemv_gbps(kvt_type t, int64_t width, int64_t bytes, int n_threads, int reps, double *gemm_gflops,
                             int gemm_tok);
kvt_status kvt_profile_disk(const char *dir, int64_t bytes, kvt_profile *p, kvt_err *err);
// GPU figures of CUDA device `device` through the CUDA probe (build/libkvtier-cuda.so, loaded with dlopen:
// $KVT_CUDA_LIB or beside the executable). KVT_ERR_UNSUPPORTED with the reason when the probe or a
// device is absent; p is changed only on success.
kvt_status kvt_profile_gpu(int device, bool quick, kvt_profile *p, kvt_err *err);
// The real device path's rates through the CUDA backend's table (device 0): kvtier's matvec per weight type (quick: Q4_K
// and F16; else also Q8_0, Q4_0, Q6_K) into p->gpu_gemv_gbps and the device KV's batched copies into p->gpu_kv_copy_gbps.
// dev: the device's name (the table's CPU emulation says "emulation" in it: its figures are no GPU's). KVT_ERR_UNSUPPORTED
// without a library or device; the figures are set whatever p->has_gpu (a profile saves them only with a GPU).
kvt_status kvt_profile_gpu_kernels(bool quick, kvt_profile *p, char *dev, size_t n_dev, kvt_err *err);

// Effective GEMV bandwidth for a type: measured figure, else cpu_read_gbps.
double kvt_profile_cpu_gemv(const kvt_profile *p, kvt_type t);
// B_L3 with the helm default.
double kvt_profile_l3_gbps(const kvt_profile *p);

// JSON (flat object; see the header comment for units).
void kvt_profile_write(const kvt_profile *p, FILE *f);
kvt_status kvt_profile_save(const kvt_profile *p, const char *path, kvt_err *err);
kvt_status kvt_profile_parse(const char *text, kvt_profile *p, kvt_err *err);
kvt_status kvt_profile_load(const char *path, kvt_profile *p, kvt_err *err);

// ---- a small JSON reader shared by the plan code (objects, arrays, numbers, strings, bools) ----
typedef enum { KVT_JV_NULL, KVT_JV_BOOL, KVT_JV_NUM, KVT_JV_STR, KVT_JV_ARR, KVT_JV_OBJ } kvt_jv_kind;
typedef struct kvt_jv {
    kvt_jv_kind kind;
    char *key;            // member name inside an object (owned), else NULL
    double num;           // NUM, BOOL (0/1)
    char *str;            // STR (owned, unescaped)
    struct kvt_jv *kids;  // ARR / OBJ members (owned array)
    int n_kids;
} kvt_jv;

// Parses text into *out (free with kvt_jv_free). Depth <= 32.
kvt_status kvt_jv_parse(const char *text, kvt_jv *out, kvt_err *err);
void kvt_jv_free(kvt_jv *v);
const kvt_jv *kvt_jv_get(const kvt_jv *obj, const char *key); // member or NULL
double kvt_jv_num(const kvt_jv *obj, const char *key, double dflt);
const char *kvt_jv_str(const kvt_jv *obj, const char *key, const char *dflt);

#endif
