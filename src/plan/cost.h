// cost.h - per-partition-unit costs of a model and the roofline cost model
// of helm.txt §4.1 (Eqs. 4.1-4.15).
//
// A model is cut into partition units (helm §4.1.1): one embedding unit, one
// unit per transformer block, one output unit (norm + projection), so
// Qwen3-8B has 38. Each unit carries, for one sequence and one decode token:
//   param_bytes  weight bytes resident on the device that holds the unit
//   W_param      weight bytes read per decode token, per weight type (Eq. 4.3;
//                the embedding unit reads one row per sequence, not its table)
//   W_act        activation bytes crossing a stage boundary after the unit (Eq. 4.4;
//                f32 here, as kvtier's forward pass keeps activations in f32)
//   W_kv         K+V bytes per context token (Eq. 4.5), read once per decode step
// Times are milliseconds; bandwidths 10^9 B/s; FLOP counts are 2 x multiply-adds.
#ifndef KVT_PLAN_COST_H
#define KVT_PLAN_COST_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "../gguf/gguf.h"
#include "../model/model.h"
#include "../model/shapes.h"
#include "profile.h"

typedef enum { KVT_UNIT_EMBED, KVT_UNIT_BLOCK, KVT_UNIT_OUTPUT } kvt_unit_kind;

#define KVT_UNIT_MAX_PARTS 6
typedef struct {
    kvt_type type;
    int64_t bytes;       // weight bytes of this type read per decode token
    int64_t macs;        // multiply-adds per token on them (prefill GEMM)
} kvt_unit_part;

typedef struct {
    kvt_unit_kind kind;
    int32_t layer;                 // block index, -1 for embedding / output
    int64_t param_bytes;           // resident weight bytes
    int n_parts;
    kvt_unit_part parts[KVT_UNIT_MAX_PARTS]; // W_param by weight type (sum = W_param)
    int64_t act_bytes;             // W_act per sequence per token
    int64_t kv_bytes_per_tok;      // W_kv per context token per sequence (K+V, kv type)
    int64_t attn_flops_per_tok;    // F_attn per context token per sequence (Eq. 4.11: 4 h_a d_h)
    int32_t window;                // sliding-window layer: positions a query attends (0: the whole context)
} kvt_unit;

typedef struct {
    char name[128];
    kvt_hparams hp;
    kvt_type kv_type;       // element type of the KV cache (F16)
    int n_units;            // n_layer + 2
    kvt_unit *units;        // [n_units] owned: embed, blocks 0..n_layer-1, output
    int64_t tied_bytes;     // > 0: embedding and output share this many bytes (counted once per device)
    int64_t weight_bytes;   // all weights (tied counted once)
} kvt_costs;

// From a GGUF's metadata and tensor table (no weight data is read).
kvt_status kvt_costs_from_gguf(const kvt_gguf *g, kvt_costs *c, kvt_err *err);
// From a named shape with every matrix of type wt (norms f32).
kvt_status kvt_costs_from_shape(const kvt_shape *s, kvt_type wt, kvt_costs *c, kvt_err *err);
void kvt_costs_free(kvt_costs *c);
int64_t kvt_unit_read_bytes(const kvt_unit *u); // W_param

// Roofline view of one device (helm Eq. 4.6, DeviceProfile).
typedef struct {
    bool gpu;
    double mem_gbps;                         // M
    double gemv_gbps[KVT_TYPE_COUNT];        // achieved weight bandwidth per type, 4096-wide rows (0: M)
    double gemv_gbps_w[2][KVT_TYPE_COUNT];   // the same for rows of 1024 and 2048 (0: use gemv_gbps)
    double prefill_gflops[KVT_TYPE_COUNT];   // P_pre per weight type (0: use prefill_gflops_any)
    double prefill_gflops_w[2][KVT_TYPE_COUNT]; // the same for 1024- and 2048-wide models (0: use prefill_gflops)
    double prefill_gflops_any;               // P_pre fallback (0: no compute ceiling)
    double attn_gflops;                      // attention FLOP/s in decode (0: no compute ceiling)
    double attn_prefill_gflops;              // attention FLOP/s over a short causal prompt (prefill)
    double attn_prefill_deep_gflops;         // the same for a prompt chunk deep in a long prompt (0: attn_prefill_gflops)
    int64_t prefill_chunk;                   // prompt tokens per forward call (the engine's n_ubatch; 0: the whole prompt)
    double swiglu_gelems;                    // FFN SwiGLU elements/s (10^9) in prefill (0: not counted)
    int64_t l3_bytes;                        // C_L3 (0: no cache blend)
    double l3_gbps;                          // B_L3
    double block_overhead_ms;                // delta per partition unit (helm §6.4.4)
    double prefill_overhead_ms;              // delta_pre per partition unit per prompt token
    double eta_m, eta_c;                     // efficiency coefficients (1 when figures are measured)
} kvt_device;

kvt_device kvt_device_cpu(const kvt_profile *p);
kvt_device kvt_device_gpu(const kvt_profile *p); // meaningful only when p->has_gpu

// Roofline decode time of units [u0, u1) on device d for batch B at context c
// (Eqs. 4.8-4.14; the L3 blend alpha uses the stage's whole KV working set),
// without the per-block overhead. Per step (B tokens), in ms.
double kvt_stage_decode_ms(const kvt_costs *c, int u0, int u1, const kvt_device *d, int64_t B, int64_t ctx);
// Prefill time of n_tok prompt tokens through units [u0, u1) (one sequence), in ms:
// per unit max(2 * macs * n_tok / P_pre, W_param / M) + SwiGLU at d->swiglu_gelems + d->prefill_overhead_ms
// (delta_pre) per token, + causal attention over the prompt in chunks of d->prefill_chunk, each at the rate the
// profile measured for its depth (cpu_attn_prefill_gflops short, cpu_attn_prefill_deep_gflops deep, interpolated).
double kvt_stage_prefill_ms(const kvt_costs *c, int u0, int u1, const kvt_device *d, int64_t n_tok);
// Communication at a CPU/GPU boundary after unit u (Eq. 4.15), in ms.
double kvt_comm_ms(const kvt_costs *c, int u, int64_t B, double link_gbps, double link_latency_us);
// Resident bytes of units [u0, u1) (tied matrix counted once when both ends are inside).
int64_t kvt_stage_param_bytes(const kvt_costs *c, int u0, int u1);
// Scratch (activation) bytes of the forward pass for ub tokens per micro-batch.
int64_t kvt_scratch_bytes(const kvt_hparams *hp, int64_t ub);

#endif
