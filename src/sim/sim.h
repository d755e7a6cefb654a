// sim.h - `kvtier sim`: a discrete-event simulator of a serving engine whose
// KV cache lives in a tiered store (fast tier: HBM; host: DRAM; SSD), driving
// the store's own eviction policies (kv_policy.h, unchanged) on a virtual clock.
//
// What is simulated (docs/SIMULATOR.md has the full set-up):
//   - requests arrive by a seeded Poisson process, with prompt / output lengths
//     drawn from a workload (uniform, chat, code, summarization, mixed);
//   - a batch scheduler (kvt_sim_sched_fn: the serving scheduler's own decisions,
//     kvt_sim_sched_kvtier over src/sched/sched_policy.h, or plain FCFS) picks each
//     iteration's batch, prompt chunks and preemptions by swap;
//   - an iteration prefills the prompt chunks it is given (their blocks are created
//     in the fast tier) and decodes one token for the others: attention reads every
//     block of every decoding request in batch order (the "scan"), the
//     iteration's compute spread evenly over the scan's block reads. A block
//     missing from the fast tier stalls the scan until it arrives (a page fault);
//   - KV blocks (block_tokens tokens of one request, all layers) live in the
//     fast tier (capacity fast_blocks), host (host_blocks) or SSD; transfers use
//     processor-sharing links (sim_core.h): host->fast, fast->host, SSD read,
//     SSD write. SSD-resident blocks reach the fast tier in two hops (SSD ->
//     host -> fast);
//   - victims are chosen by the paged store's own victim search (kv_victim.h:
//     kvt_victim_pick over a window of the resident blocks: blocks in flight never,
//     the plan rank first, clean blocks first where the policy asks, then
//     kvt_evict_pick's rule);
//   - policies lookahead and oracle prefetch the next blocks of the schedule
//     (this iteration and the next: K = 1), attn-ema prefetches the blocks whose
//     attention EMA predicts them important, the others are reactive. A prefetch
//     is issued only if the policy would not evict the incoming block itself
//     (kvt_evict_pick over the window plus the incoming block). With
//     copy_prefetch > 0 the reactive ones prefetch as the paged store's copy
//     engine does (kv_prefetch.h: the next blocks of the request after each read,
//     a victim only among blocks needed later than the one it brings).
// Ticks (the policies' clock) are block reads; times are simulated seconds.
#ifndef KVT_SIM_H
#define KVT_SIM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../base/status.h"
#include "../kv/kv_policy.h"
#include "../plan/cost.h"
#include "../plan/profile.h"
#include "../sched/sched_policy.h"

// KVT_WL_FIXED: every request has kvt_sim_config.fixed_prompt / fixed_out tokens (a real run's set-up).
typedef enum { KVT_WL_UNIFORM, KVT_WL_CHAT, KVT_WL_CODE, KVT_WL_SUMMARIZATION, KVT_WL_MIXED, KVT_WL_FIXED, KVT_WL_COUNT } kvt_sim_workload;

// "uniform" ... "fixed"; KVT_WL_COUNT if unknown.
kvt_sim_workload kvt_sim_workload_find(const char *name);
const char *kvt_sim_workload_name(kvt_sim_workload w);
// "uniform|chat|code|summarization|mixed|fixed"
const char *kvt_sim_workload_names(void);
// The simulator's policies: "lru|lfu|attn-ema|static|lookahead|oracle" (all kv_policy.c policies).
const char *kvt_sim_policy_names(void);

// One request as the scheduler sees it.
typedef struct {
    double arrival;      // s
    int64_t prompt;      // prompt tokens
    int64_t out;         // tokens to generate (the simulator knows; a real scheduler only its max)
    int64_t generated;   // tokens generated so far (the first one by the prefill's last chunk)
    int64_t n_blocks;    // KV blocks it holds (0 until admitted)
    int32_t state;       // KVT_SIM_WAITING, RUNNING (admitted, holds KV), DONE
    int64_t prefilled;   // prompt tokens in its KV (RUNNING: < prompt while its prompt is computed in chunks)
    bool swapped;        // preempted by swap (RUNNING): its blocks went down to SSD; it does not run until resumed
} kvt_sim_req;

enum { KVT_SIM_NOT_ARRIVED, KVT_SIM_WAITING, KVT_SIM_RUNNING, KVT_SIM_DONE };
enum { KVT_SIM_TRACE_NEW, KVT_SIM_TRACE_READ, KVT_SIM_TRACE_FREE, KVT_SIM_TRACE_ATTN }; // kvt_sim_config.on_trace

// What a batch scheduler sees before each iteration.
typedef struct {
    const kvt_sim_req *reqs;  // all requests [n_reqs]
    int64_t n_reqs;
    const int64_t *running;   // admitted requests (hold KV), in admission order, swapped ones included [n_running]
    int64_t n_running;
    const int64_t *waiting;   // arrived, not admitted, in arrival order [n_waiting]
    int64_t n_waiting;
    int64_t max_batch;
    int64_t block_tokens;
    int64_t fast_blocks;      // fast-tier capacity in blocks
    int64_t host_blocks;      // host capacity in blocks (0: unlimited)
    double now;               // s
} kvt_sim_sched_view;

// One iteration's schedule, written by a kvt_sim_sched_fn into arrays the simulator owns.
typedef struct {
    int64_t *ids;        // requests that run, in batch order [room: max_batch]
    int64_t *tokens;     // [room: max_batch] tokens each computes: 1 for a decoding request; for a waiting request
                         // (admitted by this) or a prefilling one a prompt chunk of 1 .. prompt - prefilled
                         // tokens (its blocks are created; a later chunk reads the earlier ones; the chunk that
                         // ends the prompt gives the first token)
    int64_t *swap_out;   // running, not swapped requests preempted before the iteration: their blocks go to SSD
    int64_t n_swap_out;  // [room: n_running]
    int64_t *swap_in;    // swapped requests resumed before the iteration (their blocks come back as the scan
    int64_t n_swap_in;   // reads them) [room: n_running]
    int64_t *admit;      // waiting requests admitted before the iteration, whether or not they run in it (a
    int64_t n_admit;     // waiting request in ids is admitted anyway) [room: n_waiting]
} kvt_sim_batch;

// Picks the next iteration's batch: fills b (ids, tokens; swap_out, swap_in and admit with their counts, 0
// when the scheduler does not use them) and returns how many requests run (<= v->max_batch), -1 if it failed (out of
// memory). Running requests left out are paused (their KV stays where it is). The iteration after the last
// one of a request never contains it.
typedef int64_t (*kvt_sim_sched_fn)(const kvt_sim_sched_view *v, kvt_sim_batch *b, void *ud);
// FCFS continuous batching: every running request, then waiting ones in arrival order (whole prompts), up to
// max_batch; no token budget, no preemption (src/sim/sim_sched.c).
int64_t kvt_sim_sched_fcfs(const kvt_sim_sched_view *v, kvt_sim_batch *b, void *ud);

// The serving scheduler's own decisions (src/sched/sched_policy.h, as scheduler.c runs them): FCFS admission
// within n_parallel = max_batch sequences and, with preemption, fast + host blocks; decode rows then prompt
// chunks under token_budget; preemption by swap of the latest-admitted running request when the running
// requests' blocks (plus one each) exceed fast + host blocks (only with a host capacity), resumption of the
// earliest swapped one that fits. ud: a kvt_sim_kvtier_sched (src/sim/sim_sched.c).
typedef struct {
    int64_t token_budget;     // rows of one iteration (raised to max_batch + 1, as the serving scheduler does)
    bool preempt;             // preemption by swap (and admission by memory)
    // scratch, grown as needed (kvt_sim_kvtier_sched_free)
    kvt_sched_policy_req *view;
    kvt_sched_policy_run *split;
    int64_t *ids, *pick, cap;
} kvt_sim_kvtier_sched;
// Token budget and preemption of the serving scheduler's defaults (kvt_sched_params_default: 512, and preemption
// on, as `kvtier serve` has it with a disk tier).
void kvt_sim_kvtier_sched_init(kvt_sim_kvtier_sched *k);
void kvt_sim_kvtier_sched_free(kvt_sim_kvtier_sched *k);
int64_t kvt_sim_sched_kvtier(const kvt_sim_sched_view *v, kvt_sim_batch *b, void *ud);

typedef struct {
    // model and machine
    int64_t block_tokens;        // tokens per KV block (16)
    int64_t block_bytes;         // bytes of one block, all layers, K and V (with layers > 1: of one layer)
    int32_t layers;              // > 1: a request's token block is `layers` blocks of one layer each, as the paged
                                 // store's shards, read layer by layer over the batch (the engine's decode order);
                                 // fast_blocks, host_blocks and block_bytes are then per layer block. 0 or 1
                                 // (default, the tables of docs/SIMULATOR.md): one block of all layers
    double h2d_gbps, d2h_gbps;   // host <-> fast link, 10^9 B/s per direction
    double h2d_latency_us, d2h_latency_us;
    double ssd_read_gbps, ssd_write_gbps, ssd_latency_us;
    int64_t fast_blocks;         // fast-tier capacity (0: from rho)
    int64_t host_blocks;         // host capacity (0: unlimited)
    double rho;                  // oversubscription: peak KV footprint / fast capacity (used when fast_blocks = 0)
    // compute
    double iter_ms;              // > 0: decode iteration time: iter_ms + iter_ms_per_seq x (decoding requests - 1)
                                 // + iter_us_per_ctx x 1e-3 x KV positions they read (iter_ms: batch 1 at no context)
    double iter_ms_per_seq;      // (0 in the paper's set-up: a constant iteration)
    double iter_us_per_ctx;
    const kvt_costs *costs;      // iter_ms == 0: the planner's roofline on `device` at the batch and mean context
    kvt_device device;
    double prefill_ms_per_tok;   // prefill compute per admitted prompt token (0: free, as in tierkv.txt)
    bool copy_on_compute;        // the fast <-> host copies run on the compute cores (a CPU engine's memcpy): the
                                 // scan makes no progress while a host->fast or fast->host copy is in its byte
                                 // phase, and the link latency is that copy's per-block CPU time (bookkeeping),
                                 // spent in the byte phase too; false: a separate link (PCIe) overlapping compute
    // workload
    kvt_sim_workload workload;
    int64_t fixed_prompt, fixed_out; // KVT_WL_FIXED: tokens of every prompt / output (512 / 128 if 0)
    int64_t n_requests;          // requests per run
    double load;                 // arrival rate as a share of the decode capacity max_batch / (E[out] * iter)
    bool burst;                  // every request arrives at t = 0 (load unused)
    int64_t max_batch;
    uint64_t seed;
    // policy
    const char *policy;          // kv_policy.c name
    int64_t prefetch_depth;      // transfers a prefetching policy keeps in flight (4; the store's copy threads)
    int64_t copy_prefetch;       // lru, lfu, static, attn-ema: after each read the store's copy engine prefetches the
                                 // next copy_prefetch blocks of the request (kv_prefetch.h, as kv_paged.c with
                                 // --kv-prefetch; attn-ema then does not prefetch by attention, as the paged store's
                                 // does not); 0 (default, the tables of docs/SIMULATOR.md): none
    int32_t plan_iters;          // > 0: the serving scheduler's plan, as `kvtier serve --lookahead N` publishes it to the
                                 // paged store (kvt_sched_policy_plan: this iteration's batch, then the swapped requests,
                                 // for plan_iters iterations; kvt_plan_ranks): before each iteration every block gets
                                 // its request's plan rank, which comes first in every victim search (kv_victim.h),
                                 // and with copy_prefetch > 0 the planned blocks below the fast tier join the copy
                                 // engine's queue (kvt_plan_prefetch), each load displacing only later ranks. The
                                 // store's staging of a planned block from disk to host when it finds no room is not
                                 // modelled. 0 (default): no plan
    int64_t victim_window;       // resident blocks examined per eviction (64; the paged store examines 256)
    bool clean_ssd_only;         // a fast block is clean (preferred victim where the policy is clean_first) only with
                                 // an SSD copy, as the paged store has it (kv_paged.c pick_victim: a host copy never
                                 // counts in T0); false (default, the tables of docs/SIMULATOR.md): a host copy too
    double attn_alpha;           // EMA weight of the newest attention mass (0.5)
    // scheduler (NULL: kvt_sim_sched_fcfs)
    kvt_sim_sched_fn sched;
    void *sched_ud;
    // optional trace of every eviction decision: the candidates as given to kvt_evict_pick, the tick and
    // the index it returned (tests check the decisions against kvt_evict_pick)
    void (*on_pick)(void *ud, const kvt_evict_info *cands, int64_t n, uint64_t now, int64_t picked);
    void *on_pick_ud;
    // optional trace of what the paged store would be asked, for a replay through it (tests): kind
    // KVT_SIM_TRACE_NEW: block idx of layer `layer` of request req is created (mass: its attention EMA then),
    // KVT_SIM_TRACE_READ: read by the scan (mass: the attention mass this read adds to its EMA with weight
    // attn_alpha; called before its policy state changes), KVT_SIM_TRACE_FREE: the request's blocks are freed
    // (layer, idx, mass unused), KVT_SIM_TRACE_ATTN: attn-ema's prefetch looks at blocks 0 .. idx of the layer with
    // share `mass` (kvt_kv_paged_attn_prefetch; after the read's trace); on_plan: the plan published before an iteration (request ids, in plan order)
    void (*on_trace)(void *ud, int kind, int64_t req, int32_t layer, int64_t idx, double mass);
    void (*on_plan)(void *ud, const int32_t *reqs, int64_t n);
    void *on_trace_ud;
} kvt_sim_config;

typedef struct {
    double tpot_ms_mean;       // mean over requests of (t_last - t_first) / (out - 1)
    double tpot_ms_p95;
    double throughput_tok_s;   // tokens generated / (last token time - first arrival)
    double hit_rate;           // block reads that found the block in the fast tier
    double moved_bytes;        // bytes over every link
    int64_t transfers;         // block transfers completed (all links)
    int64_t reads;             // block reads by attention
    int64_t iterations;
    int64_t preemptions, resumes; // requests the scheduler swapped out / resumed
    int64_t fast_blocks;       // capacity used
    double stall_s;            // scan time spent waiting for blocks
    double copy_s;             // time with at least one fast <-> host transfer in its byte phase
    double sim_s;              // simulated time
    double wall_s;             // wall-clock time of the run
    int64_t n_done;            // requests finished
    double *tpot_ms;           // per finished request [n_done] (owned; kvt_sim_result_free)
} kvt_sim_result;

// Defaults: the tierkv.txt machine (Table 3) with Llama-2-7B blocks, FCFS, 4.0 ms iterations.
void kvt_sim_config_default(kvt_sim_config *c);
// Takes links, capacities and compute from a profile (h2d/d2h, disk, ram; vram only for the record) and
// the profile file's sim_* keys from its JSON text (may be NULL): sim_iter_ms, sim_iter_ms_per_seq,
// sim_iter_us_per_ctx, sim_prefill_ms_per_tok; on a CPU profile (no GPU) sim_copy_gbps and
// sim_copy_block_us (the store's fast <-> host copy rate and per-block CPU time of one thread; default
// cpu_read_gbps, 0) and sim_copy_lanes (compute threads copying at once, default 1: the copy link runs at lanes x
// that rate, lanes x 1/that time), and copy_on_compute is set.
kvt_status kvt_sim_config_from_profile(kvt_sim_config *c, const kvt_profile *p, const char *json_text, kvt_err *err);
// Block bytes of a shape: layers x KV heads x (K + V head widths) x 2 (F16) x block_tokens.
int64_t kvt_sim_block_bytes(const kvt_hparams *hp, int64_t block_tokens);
// Peak KV footprint the fast-tier capacity is set from: max_batch x E[blocks of a request at its end].
double kvt_sim_footprint_blocks(const kvt_sim_config *c);
// The smallest fast tier a run takes, in blocks: the prefetch_depth blocks a prefetch keeps in flight to it and 2
// more (the block a read waits for and the one decoding writes). An explicit fast_blocks below it is refused
// (kvt_sim_run: KVT_ERR_INVALID_ARG; it was raised silently before 2026-12-06); ceil(F / rho) below it is raised
// to it (the result's fast_blocks says so).
int64_t kvt_sim_min_fast_blocks(int64_t prefetch_depth);

// One run. KVT_ERR_INVALID_ARG names a bad field; KVT_ERR_NOMEM.
kvt_status kvt_sim_run(const kvt_sim_config *c, kvt_sim_result *r, kvt_err *err);
void kvt_sim_result_free(kvt_sim_result *r);

// Runs over seeds c->seed .. c->seed + n_seeds - 1 (src/sim/sim_sweep.c). Every figure is one run's, the mean over
// the seeds (until 2026-12-06 transfers, reads, iterations, preemptions, resumes and wall_s were sums over them
// beside moved_bytes' mean), but the two that pool the runs: tpot_ms_p95 and hit_rate.
typedef struct {
    int n_seeds;
    double tpot_ms_mean;      // mean of the runs' means
    double tpot_ms_p95;       // 95th percentile of every finished request of every run (pooled)
    double throughput_tok_s;  // mean of the runs, tokens / s
    double hit_rate;          // reads that hit / reads, all runs (pooled: weighted by each run's reads)
    double moved_bytes;       // mean per run, bytes
    double stall_s;           // mean per run, simulated seconds
    double transfers, reads, iterations; // means per run
    double preemptions, resumes;         // means per run
    int64_t fast_blocks;      // capacity (the same for every seed)
    double wall_s;            // mean wall-clock seconds per run
    kvt_sim_result *runs;     // [n_seeds] each seed's own figures (tpot_ms NULL; owned: kvt_sim_summary_free)
} kvt_sim_summary;
kvt_status kvt_sim_run_seeds(const kvt_sim_config *c, int n_seeds, kvt_sim_summary *out, kvt_err *err);
void kvt_sim_summary_free(kvt_sim_summary *s);
// Block transfers simulated per second of wall-clock time (transfers / wall_s: the same for the means as the sums).
double kvt_sim_summary_rate(const kvt_sim_summary *s);

// A grid: every policy at every rho, n_seeds each; one markdown table (a row per rho and policy: TPOT
// mean and p95, throughput, hit rate, GB moved, transfers, wall time, each per run as kvt_sim_summary) to `table`;
// a line per cell to `progress` (may be NULL).
kvt_status kvt_sim_sweep(const kvt_sim_config *base, const char *const *policies, int n_policies, const double *rhos,
                         int n_rhos, int n_seeds, FILE *table, FILE *progress, kvt_err *err);

#endif
