// plan.c - exhaustive partition search (helm.txt Algorithm 1) and KV placement.
#include "plan.h"

#include "../base/file.h"
#include "../base/json.h"
#include "../exec/context.h"
#include "../kv/kv_paged.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GB 1e9

kvt_plan_req kvt_plan_req_default(void) {
    kvt_plan_req r = {4096, 1, -1, -1, 0, NULL, 128};
    return r;
}

void kvt_plan_granularity_str(int32_t group_heads, int32_t n_head_kv, char *buf, size_t n) {
    if (group_heads <= 0 || group_heads == n_head_kv) snprintf(buf, n, "layer");
    else if (group_heads == 1) snprintf(buf, n, "head");
    else snprintf(buf, n, "group:%d", group_heads);
}

bool kvt_plan_granularity_parse(const char *s, int32_t *group_heads) {
    if (!strcmp(s, "layer")) *group_heads = 0;
    else if (!strcmp(s, "head")) *group_heads = 1;
    else if (!strncmp(s, "group:", 6)) {
        char *end;
        long g = strtol(s + 6, &end, 10);
        if (*end || g < 1 || g > 4096) return false;
        *group_heads = (int32_t)g;
    } else {
        return false;
    }
    return true;
}

// ---------------------------------------------------------------- KV placement

typedef struct {
    int64_t B, ctx;
    int64_t append;       // positions a prefill chunk appends at once (the context's n_ubatch)
    int32_t layers_fast;  // layers whose attention reads the fast tier
    int32_t layers_host;  // layers whose attention reads host DRAM directly (CPU side of a split)
    const int32_t *win_fast, *win_host; // [layers_*] each layer's sliding window as its store frees it (0: a global
                                        // layer: the whole context; the paged store and a split's device KV alike)
    int32_t h_kv;
    int64_t head_tok;     // K+V bytes of one head for one token
    int64_t fast_cap, host_cap, disk_cap;
    bool shared_dram;     // CPU backend: fast and host are the same DRAM (host = staging only)
    double link_gbps, link_lat_us, disk_gbps, disk_lat_us;
} kv_in;

typedef struct {
    bool ok;
    int32_t g;
    int64_t b, bb;        // tokens and bytes per block
    int64_t fast_blocks, host_blocks, disk_blocks, off_blocks, shards_f, shards_h;
    int64_t need_blocks;  // blocks the store holds at ctx, every shard (sliding windows: their window)
    double t_ms;
    int64_t overflow;     // bytes beyond the last tier
    bool fast_short;      // the fast tier cannot even hold the tails + window
} kv_opt;

// Blocks of ctx positions in one shard of each of n layers, as the paged store holds them (a sliding-window layer
// its window, kvt_kv_paged_shard_blocks), summed.
static int64_t layer_blocks(const int32_t *win, int32_t n, int64_t ctx, int64_t b, int64_t append) {
    int64_t s = 0;
    for (int32_t l = 0; l < n; l++) s += kvt_kv_paged_shard_blocks(ctx, win[l], b, append);
    return s;
}

static kv_opt kv_try(const kv_in *in, int32_t g, int64_t b) {
    kv_opt o;
    memset(&o, 0, sizeof o);
    o.g = g;
    o.b = b;
    o.bb = b * in->B * g * in->head_tok;
    o.shards_f = (int64_t)in->layers_fast * (in->h_kv / g);
    o.shards_h = (int64_t)in->layers_host * (in->h_kv / g);
    const int64_t gs = in->h_kv / g; // shards per layer
    const int64_t need_f = gs * layer_blocks(in->win_fast, in->layers_fast, in->ctx, b, in->append);
    const int64_t need_h = gs * layer_blocks(in->win_host, in->layers_host, in->ctx, b, in->append);
    o.need_blocks = need_f + need_h;
    int64_t host_free = in->shared_dram ? 0 : in->host_cap / o.bb;
    int64_t disk_free = in->disk_cap / o.bb;
    // KV of host-side layers lives in host DRAM (overflow to disk)
    int64_t h_home = need_h < host_free ? need_h : host_free;
    int64_t h_disk = need_h - h_home;
    host_free -= h_home;
    int64_t fcap = in->fast_cap / o.bb;
    if (need_f <= fcap) {
        o.fast_blocks = need_f;
    } else {
        // streaming: tails of every shard + a 2-block window stay in the fast tier
        int64_t res = fcap - 2 - (in->shared_dram ? 2 : 0);
        if (res < o.shards_f) {
            o.overflow = (o.shards_f + 2 + (in->shared_dram ? 2 : 0)) * o.bb - in->fast_cap;
            o.fast_short = true;
            return o;
        }
        o.off_blocks = need_f - res;
        o.fast_blocks = res + 2;
        int64_t off_h = o.off_blocks < host_free ? o.off_blocks : host_free;
        int64_t off_d = o.off_blocks - off_h;
        o.host_blocks = off_h + (in->shared_dram && off_d > 0 ? 2 : 0);
        o.disk_blocks = off_d;
        const double bb = (double)o.bb;
        const double t_link = in->link_lat_us / 1e3 + bb / in->link_gbps / 1e6;
        const double t_disk = in->disk_gbps > 0 ? in->disk_lat_us / 1e3 + bb / in->disk_gbps / 1e6 : 1e9;
        o.t_ms = (double)off_h * t_link + (double)off_d * (t_disk + t_link);
    }
    o.host_blocks += h_home;
    o.disk_blocks += h_disk;
    o.t_ms += (double)h_disk * (in->disk_gbps > 0 ? in->disk_lat_us / 1e3 + (double)o.bb / in->disk_gbps / 1e6 : 1e9);
    if (o.disk_blocks > disk_free) {
        o.overflow = (o.disk_blocks - disk_free) * o.bb;
        return o;
    }
    o.ok = true;
    return o;
}

// Whether a context of ctx positions fits the capacities with option o's shards and block: everything at home, or
// (use_host / use_disk) the fast side's tails and streaming window in the fast tier and the rest in the tiers allowed.
static bool kv_fits(const kv_in *in, const kv_opt *o, int64_t ctx, bool use_host, bool use_disk) {
    const int64_t gs = in->h_kv / o->g, bb = o->bb;
    const int64_t nf = gs * layer_blocks(in->win_fast, in->layers_fast, ctx, o->b, in->append);
    const int64_t nh = gs * layer_blocks(in->win_host, in->layers_host, ctx, o->b, in->append);
    const int64_t f = in->fast_cap / bb, h = in->shared_dram ? 0 : in->host_cap / bb, d = in->disk_cap / bb;
    if (nf <= f && nh <= h) return true; // nothing streamed
    if (!use_host && !use_disk) return false;
    const int64_t win = 2 + (in->shared_dram && use_disk ? 2 : 0);
    const int64_t total = (f > win ? f - win : 0) + (use_host ? h : 0) + (use_disk ? d : 0);
    return f - win >= o->shards_f && nf + nh <= total;
}

// Largest context (multiple of b) whose KV fits the given capacities with option o's shards; 2^40 for unbounded
// (every layer a sliding window, or the fit holds that far). Sliding-window layers stop growing at their window, so
// the blocks needed are not linear in the context: a bisection over it (the need only grows with the context).
static int64_t kv_max_ctx(const kv_in *in, const kv_opt *o, bool use_host, bool use_disk) {
    const int64_t cap = ((int64_t)1 << 40) / o->b;
    if (kv_fits(in, o, cap * o->b, use_host, use_disk)) return (int64_t)1 << 40;
    int64_t lo = 0, hi = cap; // fits(lo * b), not fits(hi * b)
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (kv_fits(in, o, mid * o->b, use_host, use_disk)) lo = mid;
        else hi = mid;
    }
    return lo * o->b;
}

static void kv_place(const kv_in *in, kvt_plan *pl) {
    static const int64_t blocks[] = {1024, 512, 256, 128, 64, 32, 16};
    kv_opt best;
    memset(&best, 0, sizeof best);
    int64_t least_over = INT64_MAX;
    kv_opt first_fit = kv_try(in, in->h_kv, 256);
    if (first_fit.ok && first_fit.off_blocks == 0) {
        // no streaming: layer-wise blocks of 256 (or the smallest power of two >= ctx)
        int64_t b = 16;
        while (b < 256 && b < in->ctx) b *= 2;
        best = kv_try(in, in->h_kv, b);
    } else {
        // adaptive head groups (headinfer.txt): every divisor g of h_kv and block size;
        // least transfer time wins, ties go to the larger group and block.
        for (int32_t g = in->h_kv; g >= 1; g--) {
            if (in->h_kv % g) continue;
            for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
                kv_opt o = kv_try(in, g, blocks[i]);
                if (!o.ok) {
                    if (o.overflow < least_over) {
                        least_over = o.overflow;
                        if (!best.ok) best = o;
                    }
                    continue;
                }
                if (!best.ok || o.t_ms < best.t_ms * (1 - 1e-9)) best = o;
            }
        }
    }
    pl->kv_block_tokens = best.b;
    pl->kv_group_heads = best.g == in->h_kv ? 0 : best.g;
    pl->t_kv_ms = best.ok ? best.t_ms : 0;
    pl->kv_fast_bytes = best.fast_blocks * best.bb;
    pl->kv_host_bytes = best.host_blocks * best.bb;
    pl->kv_disk_bytes = best.disk_blocks * best.bb;
    pl->kv_offloaded_bytes = best.off_blocks * best.bb;
    pl->kv_total_bytes = best.need_blocks * best.bb;
    if (best.bb > 0) {
        pl->max_ctx_fast = kv_max_ctx(in, &best, false, false);
        pl->max_ctx_fast_host = in->shared_dram ? pl->max_ctx_fast : kv_max_ctx(in, &best, true, false);
        pl->max_ctx_all = in->disk_cap > 0 ? kv_max_ctx(in, &best, true, true) : 0;
    }
    if (!best.ok) {
        const double over = (double)best.overflow;
        if (best.fast_short) {
            snprintf(pl->error, sizeof pl->error,
                     "KV does not fit: the fast tier (%.3f GB left after weights) overflows by %lld bytes (%.3f GB): "
                     "it must hold the last block of every KV shard plus the streaming window",
                     (double)in->fast_cap / GB, (long long)best.overflow, over / GB);
        } else {
            const char *tier = in->disk_cap > 0 ? "the disk tier" : "host DRAM (no disk tier; give --disk BYTES)";
            snprintf(pl->error, sizeof pl->error,
                     "KV cache of %lld bytes (ctx %lld, batch %lld) does not fit: %s overflows by %lld bytes (%.3f GB)",
                     (long long)pl->kv_total_bytes, (long long)in->ctx, (long long)in->B, tier, (long long)best.overflow,
                     over / GB);
        }
    }
}

// ---------------------------------------------------------------- search

static int32_t blocks_in(const kvt_costs *c, int u0, int u1) {
    int32_t n = 0;
    for (int i = u0; i < u1; i++) n += c->units[i].kind == KVT_UNIT_BLOCK;
    return n;
}

kvt_status kvt_plan_search(const kvt_costs *c, const kvt_profile *p, const kvt_plan_req *r, kvt_plan *pl, kvt_err *err) {
    memset(pl, 0, sizeof *pl);
    if (r->ctx < 1 || r->batch < 1) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "plan: ctx and batch must be >= 1");
    snprintf(pl->model, sizeof pl->model, "%s", c->name);
    kvt_hparams_shape_str(&c->hp, pl->model_shape, sizeof pl->model_shape);
    if (c->hp.n_ctx_train > 0 && r->ctx > c->hp.n_ctx_train) {
        snprintf(pl->warning, sizeof pl->warning, "ctx %lld exceeds the model's training context (%d): quality past it is not what "
                 "the model was trained for", (long long)r->ctx, c->hp.n_ctx_train);
    }
    snprintf(pl->profile, sizeof pl->profile, "%s", p->name);
    const int N = c->n_units;
    const int64_t B = r->batch;
    pl->ctx = r->ctx;
    pl->batch = B;
    pl->prompt = r->prompt > 0 ? r->prompt : 128;
    pl->n_units = N;
    pl->has_gpu = p->has_gpu;
    const int64_t vram = r->vram_bytes >= 0 ? r->vram_bytes : p->vram_bytes;
    const int64_t ram = r->ram_bytes >= 0 ? r->ram_bytes : p->ram_bytes;
    pl->vram_avail = p->has_gpu ? vram - p->vram_reserved_bytes : 0;
    pl->ram_avail = ram - p->ram_reserved_bytes;
    pl->disk_avail = r->disk_bytes > 0 ? r->disk_bytes : 0;
    const char *dir = r->disk_dir ? r->disk_dir : p->disk_dir[0] ? p->disk_dir : "/tmp";
    snprintf(pl->kv_disk_dir, sizeof pl->kv_disk_dir, "%s", pl->disk_avail > 0 ? dir : "");
    const kvt_device cpu = kvt_device_cpu(p), gpu = kvt_device_gpu(p);
    const int64_t ubatch = kvt_context_params_default().n_ubatch; // the engine's prefill chunk
    const int64_t cpu_scratch = kvt_scratch_bytes(&c->hp, ubatch), gpu_scratch = kvt_scratch_bytes(&c->hp, B);
    pl->kv_bytes_per_token = (int64_t)c->hp.n_layer * c->units[1].kv_bytes_per_tok;
    pl->kv_full_bytes = pl->kv_bytes_per_token * r->ctx * B;
    pl->kv_total_bytes = pl->kv_full_bytes; // until the placement: the paged store's bytes at its block size

    // Algorithm 1: k = units on the CPU, 0..N; without a GPU only k = N exists.
    double best_t = INFINITY;
    int best = -1;
    int64_t least_over = INT64_MAX;
    int least_k = N;
    for (int k = p->has_gpu ? 0 : N; k <= N && pl->n_cand < KVT_PLAN_MAX_CAND; k++) {
        kvt_plan_cand *cd = &pl->cands[pl->n_cand++];
        cd->cpu_units = k;
        cd->gpu_units = N - k;
        cd->cpu_bytes = k > 0 ? kvt_stage_param_bytes(c, 0, k) + cpu_scratch : 0;
        cd->gpu_bytes = k < N ? kvt_stage_param_bytes(c, k, N) + gpu_scratch : 0;
        const int64_t gpu_over = cd->gpu_bytes - pl->vram_avail, cpu_over = cd->cpu_bytes - pl->ram_avail;
        cd->t_cpu_ms = kvt_stage_decode_ms(c, 0, k, &cpu, B, r->ctx);
        cd->t_gpu_ms = k < N ? kvt_stage_decode_ms(c, k, N, &gpu, B, r->ctx) : 0;
        cd->t_comm_ms = k > 0 && k < N ? kvt_comm_ms(c, k - 1, B, p->h2d_gbps, p->h2d_latency_us) : 0;
        cd->t_overhead_ms = k * cpu.block_overhead_ms + (N - k) * gpu.block_overhead_ms;
        cd->t_pred_ms = cd->t_cpu_ms + cd->t_gpu_ms + cd->t_comm_ms;
        cd->t_hat_ms = cd->t_pred_ms + cd->t_overhead_ms;
        cd->feasible = gpu_over <= 0 && cpu_over <= 0; // Eq. 4.16 (KV offload on) + host weights fit
        if (gpu_over > 0) {
            snprintf(cd->why, sizeof cd->why, "VRAM overflows by %lld bytes (%.2f GB)", (long long)gpu_over, gpu_over / GB);
        } else if (cpu_over > 0) {
            snprintf(cd->why, sizeof cd->why, "host RAM overflows by %lld bytes (%.2f GB)", (long long)cpu_over, cpu_over / GB);
        }
        int64_t over = (gpu_over > 0 ? gpu_over : 0) + (cpu_over > 0 ? cpu_over : 0);
        if (over > 0 && over < least_over) {
            least_over = over;
            least_k = pl->n_cand - 1;
        }
        if (cd->feasible && cd->t_hat_ms < best_t) {
            best_t = cd->t_hat_ms;
            best = pl->n_cand - 1;
        }
        if (k == 0 && cd->feasible) pl->all_gpu_feasible = true;
    }
    if (best < 0) {
        const kvt_plan_cand *cd = &pl->cands[least_k];
        pl->cpu_units = cd->cpu_units;
        pl->gpu_units = cd->gpu_units;
        snprintf(pl->error, sizeof pl->error, "weights do not fit: closest split cpu(%d)+gpu(%d): %s", cd->cpu_units,
                 cd->gpu_units, cd->why);
        return kvt_errorf(err, KVT_ERR_BUDGET, "%s", pl->error);
    }
    const kvt_plan_cand *cd = &pl->cands[best];
    const int k = cd->cpu_units;
    pl->cpu_units = k;
    pl->gpu_units = N - k;
    pl->t_cpu_ms = cd->t_cpu_ms;
    pl->t_gpu_ms = cd->t_gpu_ms;
    pl->t_comm_ms = cd->t_comm_ms;
    pl->t_overhead_ms = cd->t_overhead_ms;

    // KV placement for the chosen split. The paged store (what the plan configures) frees what a CPU layer's sliding
    // window no longer sees, and the device layers' KV of a split (gpu_kv.c window_slide) the same blocks by the same
    // rule at the same block size and prefill chunk: every window counts as kvt_kv_paged_shard_blocks holds it.
    const int32_t nl = c->hp.n_layer;
    int32_t *win = calloc((size_t)nl + 1, sizeof *win); // [n_layer] as the stores free them
    if (!win) return kvt_errorf(err, KVT_ERR_NOMEM, "plan: out of memory");
    const bool split = p->has_gpu && k < N;
    const int32_t host_layers = split ? blocks_in(c, 0, k) : nl; // layers in the CPU's paged store: the first ones
    for (int32_t l = 0; l < nl; l++) win[l] = c->units[l + 1].window > 0 ? c->units[l + 1].window : 0;
    kv_in in;
    memset(&in, 0, sizeof in);
    in.B = B;
    in.ctx = r->ctx;
    in.append = ubatch;
    in.h_kv = c->hp.n_head_kv;
    in.head_tok = c->units[1].kv_bytes_per_tok / c->hp.n_head_kv;
    in.disk_cap = pl->disk_avail;
    in.disk_gbps = p->disk_read_gbps;
    in.disk_lat_us = p->disk_read_latency_us;
    if (split) {
        in.layers_fast = blocks_in(c, k, N);
        in.layers_host = host_layers;
        in.win_host = win;
        in.win_fast = win + host_layers; // the device layers'
        in.fast_cap = pl->vram_avail - cd->gpu_bytes;
        in.host_cap = pl->ram_avail - cd->cpu_bytes;
        in.link_gbps = p->h2d_gbps;
        in.link_lat_us = p->h2d_latency_us;
    } else {
        in.layers_fast = nl;
        in.win_fast = win;
        in.fast_cap = pl->ram_avail - cd->cpu_bytes;
        in.shared_dram = true;
        in.link_gbps = p->cpu_read_gbps / 2; // a copy reads and writes DRAM
    }
    kv_place(&in, pl);
    for (int32_t l = 0; l < nl; l++) {
        if (win[l] <= 0) continue;
        pl->kv_window_layers++;
        if (win[l] > pl->kv_window) pl->kv_window = win[l];
    }
    pl->kv_window_held = pl->kv_window_layers
                             ? kvt_kv_paged_shard_blocks(r->ctx, pl->kv_window, pl->kv_block_tokens, ubatch) * pl->kv_block_tokens
                             : 0;
    free(win);
    pl->roofline_ms_per_token = cd->t_pred_ms + pl->t_kv_ms;
    pl->predicted_ms_per_token = pl->roofline_ms_per_token + cd->t_overhead_ms;
    double pre = kvt_stage_prefill_ms(c, 0, k, &cpu, pl->prompt);
    if (k < N) pre += kvt_stage_prefill_ms(c, k, N, &gpu, pl->prompt);
    pre += cd->t_comm_ms + cd->t_overhead_ms; // one forward call for the whole prompt
    pl->prefill_ms_per_token = pre / (double)pl->prompt;
    if (pl->error[0]) return kvt_errorf(err, KVT_ERR_BUDGET, "%s", pl->error);
    pl->feasible = true;
    return KVT_OK;
}

// ---------------------------------------------------------------- output

static void ctx_str(int64_t v, char *buf, size_t n) {
    if (v >= ((int64_t)1 << 40)) snprintf(buf, n, "unbounded");
    else snprintf(buf, n, "%lld", (long long)v);
}

void kvt_plan_print(const kvt_plan *pl, FILE *f) {
    fprintf(f, "model     %s: %d partition units (embedding, %d blocks, output)\n", pl->model, pl->n_units, pl->n_units - 2);
    fprintf(f, "shape     %s\n", pl->model_shape);
    if (pl->warning[0]) fprintf(f, "WARNING   %s\n", pl->warning);
    fprintf(f, "profile   %s\n", pl->profile);
    fprintf(f, "memory    VRAM available %.3f GB, RAM available %.3f GB, disk budget %.3f GB (after reserves)\n",
            pl->vram_avail / GB, pl->ram_avail / GB, pl->disk_avail / GB);
    fprintf(f, "workload  ctx %lld, batch %lld, prompt %lld\n\n", (long long)pl->ctx, (long long)pl->batch, (long long)pl->prompt);
    fprintf(f, "%5s %5s %9s %9s %9s %9s %8s %9s %9s  %s\n", "cpu", "gpu", "cpu GB", "gpu GB", "T_cpu ms", "T_gpu ms",
            "T_comm", "T_pred", "T_hat", "");
    for (int i = 0; i < pl->n_cand; i++) {
        const kvt_plan_cand *c = &pl->cands[i];
        const bool chosen = c->cpu_units == pl->cpu_units && pl->error[0] == 0;
        fprintf(f, "%5d %5d %9.3f %9.3f %9.2f %9.2f %8.4f %9.2f %9.2f  %s%s\n", c->cpu_units, c->gpu_units, c->cpu_bytes / GB,
                c->gpu_bytes / GB, c->t_cpu_ms, c->t_gpu_ms, c->t_comm_ms, c->t_pred_ms, c->t_hat_ms,
                c->feasible ? "" : "infeasible: ", c->feasible ? (chosen ? "<- chosen" : "") : c->why);
    }
    fprintf(f, "\nall-GPU   %s\n", !pl->has_gpu ? "no GPU in the profile" : pl->all_gpu_feasible ? "feasible" : "infeasible");
    if (pl->cpu_units + pl->gpu_units == pl->n_units && (pl->feasible || pl->t_cpu_ms + pl->t_gpu_ms > 0)) {
        fprintf(f, "split     cpu(%d) -> %s(%d)\n", pl->cpu_units, pl->has_gpu ? "cuda" : "none", pl->gpu_units);
        fprintf(f, "decode    predicted %.1f ms/token (%.2f tokens/s) = roofline %.1f (T_cpu %.1f + T_gpu %.1f + T_comm %.4f + "
                   "T_kv %.2f) + overhead %.1f\n",
                pl->predicted_ms_per_token, pl->predicted_ms_per_token > 0 ? 1000.0 / pl->predicted_ms_per_token : 0,
                pl->roofline_ms_per_token, pl->t_cpu_ms, pl->t_gpu_ms, pl->t_comm_ms, pl->t_kv_ms, pl->t_overhead_ms);
        fprintf(f, "prefill   predicted %.2f ms/token over a %lld-token prompt\n", pl->prefill_ms_per_token, (long long)pl->prompt);
    }
    char gran[32], a[32], b[32], c[32];
    kvt_plan_granularity_str(pl->kv_group_heads, 0, gran, sizeof gran);
    ctx_str(pl->max_ctx_fast, a, sizeof a);
    ctx_str(pl->max_ctx_fast_host, b, sizeof b);
    ctx_str(pl->max_ctx_all, c, sizeof c);
    fprintf(f, "KV        %lld bytes/token (all layers), %lld bytes at ctx %lld x batch %lld in %lld-token blocks\n",
            (long long)pl->kv_bytes_per_token, (long long)pl->kv_total_bytes, (long long)pl->ctx, (long long)pl->batch,
            (long long)pl->kv_block_tokens);
    if (pl->kv_window_layers > 0) {
        fprintf(f, "KV window %d of %d layers keep a sliding window of %d positions: at most %lld positions each (the window,\n"
                   "          the block being filled, a prefill chunk); every layer at the whole context would take %lld bytes\n",
                pl->kv_window_layers, pl->n_units - 2, pl->kv_window, (long long)pl->kv_window_held,
                (long long)pl->kv_full_bytes);
    }
    fprintf(f, "KV tiers  fast %lld B (%.3f GB), host %lld B (%.3f GB), disk %lld B (%.3f GB)%s%s\n", (long long)pl->kv_fast_bytes,
            pl->kv_fast_bytes / GB, (long long)pl->kv_host_bytes, pl->kv_host_bytes / GB, (long long)pl->kv_disk_bytes,
            pl->kv_disk_bytes / GB, pl->kv_disk_dir[0] ? " in " : "", pl->kv_disk_dir);
    fprintf(f, "KV layout granularity %s, block %lld tokens; streamed per step %lld bytes\n", gran,
            (long long)pl->kv_block_tokens, (long long)pl->kv_offloaded_bytes);
    fprintf(f, "max ctx   fast only %s, fast+host %s, fast+host+disk %s\n", a, b, pl->disk_avail > 0 ? c : "(no disk budget)");
    if (pl->error[0]) fprintf(f, "INFEASIBLE: %s\n", pl->error);
    else fprintf(f, "flags     %s %lld --kv-host %lld%s%s%s%lld --kv-block %lld --kv-granularity %s\n",
                 pl->gpu_units > 0 ? "-ngl (the split) --kv-vram" : "--kv-fast", (long long)pl->kv_fast_bytes, (long long)pl->kv_host_bytes, pl->kv_disk_dir[0] ? " --kv-disk " : "",
                 pl->kv_disk_dir, pl->kv_disk_dir[0] ? " --kv-disk-max " : " --kv-disk-max ", (long long)pl->kv_disk_bytes,
                 (long long)pl->kv_block_tokens, gran);
}

void kvt_plan_write_json(const kvt_plan *pl, FILE *f) {
    kvt_json j;
    kvt_json_init(&j, f);
    kvt_json_obj_begin(&j);
    kvt_json_kv_str(&j, "model", pl->model);
    kvt_json_kv_str(&j, "model_shape", pl->model_shape);
    if (pl->warning[0]) kvt_json_kv_str(&j, "warning", pl->warning);
    kvt_json_kv_str(&j, "profile", pl->profile);
    kvt_json_kv_bool(&j, "feasible", pl->feasible);
    if (pl->error[0]) kvt_json_kv_str(&j, "error", pl->error);
    kvt_json_kv_int(&j, "ctx", pl->ctx);
    kvt_json_kv_int(&j, "batch", pl->batch);
    kvt_json_kv_int(&j, "prompt", pl->prompt);
    kvt_json_kv_int(&j, "vram_avail_bytes", pl->vram_avail);
    kvt_json_kv_int(&j, "ram_avail_bytes", pl->ram_avail);
    kvt_json_kv_int(&j, "disk_avail_bytes", pl->disk_avail);
    kvt_json_kv_int(&j, "n_units", pl->n_units);
    kvt_json_kv_int(&j, "cpu_units", pl->cpu_units);
    kvt_json_kv_int(&j, "gpu_units", pl->gpu_units);
    kvt_json_kv_bool(&j, "all_gpu_feasible", pl->all_gpu_feasible);
    kvt_json_kv_num(&j, "predicted_ms_per_token", pl->predicted_ms_per_token);
    kvt_json_kv_num(&j, "predicted_tokens_per_s", pl->predicted_ms_per_token > 0 ? 1000.0 / pl->predicted_ms_per_token : 0);
    kvt_json_kv_num(&j, "roofline_ms_per_token", pl->roofline_ms_per_token);
    kvt_json_kv_num(&j, "prefill_ms_per_token", pl->prefill_ms_per_token);
    kvt_json_kv_num(&j, "t_cpu_ms", pl->t_cpu_ms);
    kvt_json_kv_num(&j, "t_gpu_ms", pl->t_gpu_ms);
    kvt_json_kv_num(&j, "t_comm_ms", pl->t_comm_ms);
    kvt_json_kv_num(&j, "t_kv_ms", pl->t_kv_ms);
    kvt_json_kv_num(&j, "t_overhead_ms", pl->t_overhead_ms);
    kvt_json_kv_int(&j, "kv_bytes_per_token", pl->kv_bytes_per_token);
    kvt_json_kv_int(&j, "kv_total_bytes", pl->kv_total_bytes);
    kvt_json_kv_int(&j, "kv_full_bytes", pl->kv_full_bytes);
    kvt_json_kv_int(&j, "kv_window_layers", pl->kv_window_layers);
    kvt_json_kv_int(&j, "kv_window", pl->kv_window);
    kvt_json_kv_int(&j, "kv_window_held_tokens", pl->kv_window_held);
    kvt_json_kv_int(&j, "kv_fast_bytes", pl->kv_fast_bytes);
    kvt_json_kv_int(&j, "kv_host_bytes", pl->kv_host_bytes);
    kvt_json_kv_int(&j, "kv_disk_bytes", pl->kv_disk_bytes);
    kvt_json_kv_str(&j, "kv_disk_dir", pl->kv_disk_dir);
    kvt_json_kv_int(&j, "kv_block_tokens", pl->kv_block_tokens);
    char gran[32];
    kvt_plan_granularity_str(pl->kv_group_heads, 0, gran, sizeof gran);
    kvt_json_kv_str(&j, "kv_granularity", gran);
    kvt_json_kv_int(&j, "kv_offloaded_bytes_per_step", pl->kv_offloaded_bytes);
    kvt_json_kv_int(&j, "max_ctx_fast", pl->max_ctx_fast);
    kvt_json_kv_int(&j, "max_ctx_fast_host", pl->max_ctx_fast_host);
    kvt_json_kv_int(&j, "max_ctx_fast_host_disk", pl->max_ctx_all);
    kvt_json_key(&j, "candidates");
    kvt_json_arr_begin(&j);
    for (int i = 0; i < pl->n_cand; i++) {
        const kvt_plan_cand *c = &pl->cands[i];
        kvt_json_obj_begin(&j);
        kvt_json_kv_int(&j, "cpu_units", c->cpu_units);
        kvt_json_kv_int(&j, "gpu_units", c->gpu_units);
        kvt_json_kv_bool(&j, "feasible", c->feasible);
        kvt_json_kv_int(&j, "cpu_bytes", c->cpu_bytes);
        kvt_json_kv_int(&j, "gpu_bytes", c->gpu_bytes);
        kvt_json_kv_num(&j, "t_cpu_ms", c->t_cpu_ms);
        kvt_json_kv_num(&j, "t_gpu_ms", c->t_gpu_ms);
        kvt_json_kv_num(&j, "t_comm_ms", c->t_comm_ms);
        kvt_json_kv_num(&j, "t_pred_ms", c->t_pred_ms);
        kvt_json_kv_num(&j, "t_hat_ms", c->t_hat_ms);
        if (!c->feasible) kvt_json_kv_str(&j, "why", c->why);
        kvt_json_obj_end(&j);
    }
    kvt_json_arr_end(&j);
    kvt_json_obj_end(&j);
    fputc('\n', f);
}

static void plan_write_cb(void *ctx, FILE *f) { kvt_plan_write_json(ctx, f); }

kvt_status kvt_plan_save(const kvt_plan *pl, const char *path, kvt_err *err) {
    if (!pl->feasible) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "%s: not written: the plan is infeasible: %s", path,
                          pl->error[0] ? pl->error : "no placement fits");
    }
    return kvt_file_write_atomic(path, plan_write_cb, (void *)pl, err); // a partial plan is never left
}

kvt_status kvt_plan_parse(const char *text, kvt_plan *pl, kvt_err *err) {
    kvt_jv root;
    kvt_status st = kvt_jv_parse(text, &root, err);
    if (st) return st;
    memset(pl, 0, sizeof *pl);
    st = KVT_OK;
    const char *need[] = {"model_shape", "kv_fast_bytes", "kv_host_bytes", "kv_disk_bytes", "kv_block_tokens", "kv_granularity"};
    for (size_t i = 0; i < sizeof need / sizeof need[0] && !st; i++) {
        if (!kvt_jv_get(&root, need[i])) {
            st = kvt_errorf(err, KVT_ERR_FORMAT, "plan: missing \"%s\"%s", need[i],
                            i == 0 ? " (the model it was made for): make it again with `kvtier plan -m MODEL -o FILE`" : "");
        }
    }
    if (!st) {
        snprintf(pl->model, sizeof pl->model, "%s", kvt_jv_str(&root, "model", ""));
        snprintf(pl->model_shape, sizeof pl->model_shape, "%s", kvt_jv_str(&root, "model_shape", ""));
        snprintf(pl->warning, sizeof pl->warning, "%s", kvt_jv_str(&root, "warning", ""));
        snprintf(pl->profile, sizeof pl->profile, "%s", kvt_jv_str(&root, "profile", ""));
        snprintf(pl->error, sizeof pl->error, "%s", kvt_jv_str(&root, "error", ""));
        pl->feasible = kvt_jv_num(&root, "feasible", 1) != 0;
        pl->ctx = (int64_t)kvt_jv_num(&root, "ctx", 0);
        pl->batch = (int64_t)kvt_jv_num(&root, "batch", 1);
        pl->prompt = (int64_t)kvt_jv_num(&root, "prompt", 0);
        // unit counts: range-checked before the int32_t conversion (a double past INT32_MAX converts undefined)
        const double n_units = kvt_jv_num(&root, "n_units", 0), cpu_units = kvt_jv_num(&root, "cpu_units", 0),
                     gpu_units = kvt_jv_num(&root, "gpu_units", 0), max_units = 1 << 20;
        const bool units_ok = n_units >= 0 && n_units <= max_units && cpu_units >= 0 && cpu_units <= max_units &&
                              gpu_units >= 0 && gpu_units <= max_units;
        if (units_ok) {
            pl->n_units = (int32_t)n_units;
            pl->cpu_units = (int32_t)cpu_units;
            pl->gpu_units = (int32_t)gpu_units;
        }
        pl->all_gpu_feasible = kvt_jv_num(&root, "all_gpu_feasible", 0) != 0;
        pl->predicted_ms_per_token = kvt_jv_num(&root, "predicted_ms_per_token", 0);
        pl->roofline_ms_per_token = kvt_jv_num(&root, "roofline_ms_per_token", 0);
        pl->prefill_ms_per_token = kvt_jv_num(&root, "prefill_ms_per_token", 0);
        pl->kv_bytes_per_token = (int64_t)kvt_jv_num(&root, "kv_bytes_per_token", 0);
        pl->kv_total_bytes = (int64_t)kvt_jv_num(&root, "kv_total_bytes", 0);
        pl->kv_full_bytes = (int64_t)kvt_jv_num(&root, "kv_full_bytes", (double)pl->kv_total_bytes);
        pl->kv_fast_bytes = (int64_t)kvt_jv_num(&root, "kv_fast_bytes", 0);
        pl->kv_host_bytes = (int64_t)kvt_jv_num(&root, "kv_host_bytes", 0);
        pl->kv_disk_bytes = (int64_t)kvt_jv_num(&root, "kv_disk_bytes", 0);
        snprintf(pl->kv_disk_dir, sizeof pl->kv_disk_dir, "%s", kvt_jv_str(&root, "kv_disk_dir", ""));
        pl->kv_block_tokens = (int64_t)kvt_jv_num(&root, "kv_block_tokens", 0);
        pl->max_ctx_fast = (int64_t)kvt_jv_num(&root, "max_ctx_fast", 0);
        pl->max_ctx_fast_host = (int64_t)kvt_jv_num(&root, "max_ctx_fast_host", 0);
        pl->max_ctx_all = (int64_t)kvt_jv_num(&root, "max_ctx_fast_host_disk", 0);
        if (!pl->feasible)
            st = kvt_errorf(err, KVT_ERR_BUDGET, "plan: infeasible (%s)", pl->error[0] ? pl->error : "no placement fits");
        else if (!units_ok || pl->cpu_units + pl->gpu_units != pl->n_units || (pl->n_units > 0 && pl->n_units < 3))
            st = kvt_errorf(err, KVT_ERR_FORMAT,
                            "plan: n_units, cpu_units, gpu_units must be 0..%d with cpu_units + gpu_units = n_units "
                            "(0, or 3 and more: embedding, layers, output)",
                            1 << 20);
        else if (pl->kv_fast_bytes < 0 || pl->kv_host_bytes < 0 || pl->kv_disk_bytes < 0 || pl->kv_block_tokens < 1)
            st = kvt_errorf(err, KVT_ERR_FORMAT, "plan: negative KV budget or block size < 1");
        else if (pl->kv_disk_bytes > 0 && !pl->kv_disk_dir[0])
            st = kvt_errorf(err, KVT_ERR_FORMAT, "plan: kv_disk_bytes > 0 but no kv_disk_dir");
        else if (!kvt_plan_granularity_parse(kvt_jv_str(&root, "kv_granularity", "?"), &pl->kv_group_heads))
            st = kvt_errorf(err, KVT_ERR_FORMAT, "plan: kv_granularity must be layer, head or group:G");
    }
    kvt_jv_free(&root);
    return st;
}

kvt_status kvt_plan_load(const char *path, kvt_plan *pl, kvt_err *err) {
    char *text;
    kvt_status st = kvt_read_text(path, &text, NULL, err);
    if (st) return st;
    st = kvt_plan_parse(text, pl, err);
    free(text);
    if (st) kvt_err_prefix(err, path);
    return st;
}

void kvt_plan_apply(const kvt_plan *pl, kvt_kv_settings *kv) {
    const bool gpu = pl->gpu_units > 0; // the split's fast tier is VRAM (plan.c's kv_in: layers_fast = the device's)
    kv->fast_bytes = gpu ? 0 : pl->kv_fast_bytes;
    kv->vram_bytes = gpu ? pl->kv_fast_bytes : 0;
    kv->host_bytes = pl->kv_host_bytes;
    kv->disk_bytes = pl->kv_disk_bytes;
    kv->disk_dir = pl->kv_disk_dir[0] ? pl->kv_disk_dir : NULL;
    kv->block_tokens = pl->kv_block_tokens;
    kv->group_heads = pl->kv_group_heads;
}
