// plan.h - placement search: CPU/GPU split (helm.txt Algorithm 1) and KV
// placement over the tiers (fast, host DRAM, disk) with granularity and block
// size (headinfer.txt's adaptive head groups), plus the plan file the engine
// reads (`--plan FILE`).
//
// Units: bytes, tokens, milliseconds. A plan's KV part is expressed exactly in
// the KV store's terms: --kv-fast BYTES --kv-host BYTES --kv-disk DIR
// --kv-disk-max BYTES --kv-block N --kv-granularity layer|head|group:G.
#ifndef KVT_PLAN_PLAN_H
#define KVT_PLAN_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../base/status.h"
#include "cost.h"
#include "profile.h"

// KV store settings (what the KV store's flags set). Strings are borrowed.
typedef struct {
    int64_t fast_bytes;   // T0 budget (GPU VRAM with CUDA, a host arena on the CPU backend)
    int64_t host_bytes;   // T1 budget (host DRAM)
    int64_t disk_bytes;   // T2 budget (0: no disk tier)
    const char *disk_dir; // T2 directory (NULL: none)
    int64_t block_tokens; // positions per KV block
    int32_t group_heads;  // KV heads per shard; 0 = layer-wise (all heads of a layer)
    int64_t vram_bytes;   // the device layers' KV in VRAM (--kv-vram): a plan with GPU units gives its fast tier here
                          // and leaves the CPU store's fast_bytes 0 (the CPU layers' KV at home in DRAM); 0: none
} kvt_kv_settings;

// The request: workload and memory limits (-1 = take from the profile).
typedef struct {
    int64_t ctx;          // context length the latency is predicted at and the KV is sized for
    int64_t batch;        // sequences decoded together (B)
    int64_t vram_bytes;   // total VRAM (the profile's vram_reserved_bytes is still kept free)
    int64_t ram_bytes;    // total host RAM (ram_reserved_bytes kept free)
    int64_t disk_bytes;   // disk budget for KV (0: no disk tier)
    const char *disk_dir; // NULL: the profile's disk_dir, else /tmp
    int64_t prompt;       // prompt tokens for the prefill prediction (0: 128)
} kvt_plan_req;

kvt_plan_req kvt_plan_req_default(void);

typedef struct {
    int32_t cpu_units, gpu_units;
    bool feasible;
    int64_t cpu_bytes, gpu_bytes;   // resident weights + scratch per device
    double t_cpu_ms, t_gpu_ms, t_comm_ms, t_overhead_ms;
    double t_pred_ms;               // roofline T_plan (Eq. 4.7)
    double t_hat_ms;                // + per-unit overhead (helm §6.4.4)
    char why[160];                  // why infeasible
} kvt_plan_cand;

#define KVT_PLAN_MAX_CAND 512

typedef struct {
    char model[128];
    char model_shape[192];       // kvt_hparams_shape_str of the model: --plan FILE is refused for another
    char warning[160];           // e.g. ctx past the model's training context ("" if none)
    char profile[96];
    int64_t ctx, batch, prompt;
    int64_t vram_avail, ram_avail, disk_avail; // after reserves
    bool has_gpu;
    // layer placement: units [0, cpu_units) on the CPU, the rest on the GPU
    int32_t n_units, cpu_units, gpu_units;
    bool feasible;               // weights placed and KV fits somewhere
    bool all_gpu_feasible;
    double t_cpu_ms, t_gpu_ms, t_comm_ms, t_kv_ms, t_overhead_ms;
    double roofline_ms_per_token;    // T_pred: Eq. 4.7 + KV transfers
    double predicted_ms_per_token;   // T_hat = T_pred + N * delta
    double prefill_ms_per_token;     // prompt of `prompt` tokens, per token
    int n_cand;
    kvt_plan_cand cands[KVT_PLAN_MAX_CAND];
    // KV placement
    int64_t kv_bytes_per_token;  // all layers, one sequence
    int64_t kv_full_bytes;       // batch x ctx x kv_bytes_per_token: every layer at the whole context (the contiguous
                                 // store's allocation, which keeps no windows)
    int64_t kv_total_bytes;      // what the paged store (and a split's device KV) hold at most at ctx x batch with the
                                 // plan's block size: a sliding-window layer only its window, the block being filled and a prefill chunk's
                                 // overshoot (kvt_kv_paged_shard_blocks); placed over kv_fast, kv_host and kv_disk
                                 // (which add the streaming window's blocks when some KV is streamed)
    int32_t kv_window_layers;    // layers whose store keeps only their sliding window (0: none)
    int32_t kv_window;           // their window in positions (the largest)
    int64_t kv_window_held;      // positions such a layer holds at most (whole blocks)
    int64_t kv_fast_bytes, kv_host_bytes, kv_disk_bytes;
    char kv_disk_dir[256];
    int64_t kv_block_tokens;
    int32_t kv_group_heads;      // 0 layer-wise, 1 head-wise, else group size
    int64_t kv_offloaded_bytes;  // bytes read from host/disk per decode step
    int64_t max_ctx_fast, max_ctx_fast_host, max_ctx_all; // per tier configuration (0: tier absent)
    char error[320];             // infeasibility: the tier that overflows and by how many bytes
} kvt_plan;

// Runs the search. Returns KVT_OK with plan->feasible, or KVT_ERR_BUDGET with
// plan->error (also in err) naming the overflowing tier; plan is filled either way.
kvt_status kvt_plan_search(const kvt_costs *c, const kvt_profile *p, const kvt_plan_req *r, kvt_plan *plan, kvt_err *err);

// Granularity text: "layer", "head" or "group:G".
void kvt_plan_granularity_str(int32_t group_heads, int32_t n_head_kv, char *buf, size_t n);
bool kvt_plan_granularity_parse(const char *s, int32_t *group_heads);

// Human-readable report (table of candidates, chosen split, KV placement).
void kvt_plan_print(const kvt_plan *plan, FILE *f);
// JSON (also the plan file format): cpu_units, gpu_units, predicted_ms_per_token,
// all_gpu_feasible, candidates[], kv_fast_bytes, kv_host_bytes, kv_disk_bytes,
// kv_disk_dir, kv_block_tokens, kv_granularity, ...
void kvt_plan_write_json(const kvt_plan *plan, FILE *f);
// Writes the plan file; an infeasible plan is refused (KVT_ERR_BUDGET with plan->error, which names the
// overflowing tier) and nothing is written.
kvt_status kvt_plan_save(const kvt_plan *plan, const char *path, kvt_err *err);
// Reads a plan file (the JSON above; candidates are not read back). A file without "model_shape" (the
// model it was made for) is refused.
kvt_status kvt_plan_load(const char *path, kvt_plan *plan, kvt_err *err);
kvt_status kvt_plan_parse(const char *text, kvt_plan *plan, kvt_err *err);
// Sets the KV settings from a plan (disk_dir points into plan). A plan with GPU units: its fast tier is the VRAM of the
// device layers' KV (vram_bytes), the CPU store unbudgeted (fast_bytes 0).
void kvt_plan_apply(const kvt_plan *plan, kvt_kv_settings *kv);

#endif
