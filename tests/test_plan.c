// test_plan.c - the planner: cost model units, the thesis' running example,
// infeasible cases, KV placement, plan and profile file round trips.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/kv/kv_paged.h"
#include "../src/plan/plan.h"
#include "test.h"

static bool load_4060(kvt_profile *p) {
    kvt_err err = {0};
    if (kvt_profile_load("profiles/rtx4060-laptop.json", p, &err)) {
        test_result(false, "plan: load profiles/rtx4060-laptop.json", "%s", err.msg);
        return false;
    }
    return true;
}

static void test_units(void) {
    kvt_costs c;
    kvt_err err = {0};
    const kvt_shape *s = kvt_shape_find("qwen3-8b");
    bool ok = s && kvt_costs_from_shape(s, KVT_TYPE_BF16, &c, &err) == KVT_OK;
    test_result(ok, "plan: qwen3-8b partition units", "%s", err.msg);
    if (!ok) return;
    // helm Eqs. 4.1-4.5: 386 MB per block, 38 units, W_kv = 4096 bytes per token per block
    const int64_t wp = kvt_unit_read_bytes(&c.units[1]);
    test_result(c.n_units == 38 && wp > 385000000 && wp < 387000000 && c.units[1].kv_bytes_per_tok == 4096 &&
                    c.units[1].act_bytes == 4096 * 4,
                "plan: W_param 386 MB, W_kv 4 KiB/token, W_act per block (Eqs. 4.3-4.5)",
                "units %d, W_param %lld, W_kv %lld", c.n_units, (long long)wp, (long long)c.units[1].kv_bytes_per_tok);
    kvt_costs_free(&c);
}

static void test_example(void) {
    kvt_profile p;
    if (!load_4060(&p)) return;
    kvt_costs c;
    kvt_err err = {0};
    kvt_costs_from_shape(kvt_shape_find("qwen3-8b"), KVT_TYPE_BF16, &c, &err);
    kvt_plan *pl = malloc(sizeof *pl);
    kvt_plan_req r = kvt_plan_req_default();
    kvt_status st = kvt_plan_search(&c, &p, &r, pl, &err);
    test_result(st == KVT_OK && pl->feasible && !pl->all_gpu_feasible, "plan: qwen3-8b on rtx4060: all-GPU infeasible, a split is feasible",
                "st %d, %s", st, err.msg);
    test_result(pl->cpu_units >= 18 && pl->cpu_units <= 21 && pl->cpu_units + pl->gpu_units == 38,
                "plan: qwen3-8b on rtx4060 chooses 18..21 CPU units (thesis: 21 text/Table 6.5, 18 Fig. 4.4)", "cpu %d gpu %d",
                pl->cpu_units, pl->gpu_units);
    test_result(pl->predicted_ms_per_token >= 186 && pl->predicted_ms_per_token <= 263.5,
                "plan: qwen3-8b predicted ms/token within the thesis range 186..263.5", "%.1f ms", pl->predicted_ms_per_token);
    // KV: GPU-side KV overflows the little VRAM left, streamed from host; all of it placed
    test_result(pl->kv_fast_bytes > 0 && pl->kv_host_bytes > 0 && pl->kv_disk_bytes == 0 &&
                    pl->kv_fast_bytes + pl->kv_host_bytes >= pl->kv_total_bytes && pl->max_ctx_fast_host >= r.ctx,
                "plan: qwen3-8b KV placed over fast + host", "fast %lld host %lld total %lld",
                (long long)pl->kv_fast_bytes, (long long)pl->kv_host_bytes, (long long)pl->kv_total_bytes);
    // Figure 4.4's k = 18 comes from using the whole 8 GiB (no reserve)
    p.vram_reserved_bytes = 0;
    kvt_plan_search(&c, &p, &r, pl, &err);
    test_result(pl->cpu_units == 18, "plan: qwen3-8b without the 1 GiB reserve chooses 18 CPU units (Figure 4.4)", "cpu %d",
                pl->cpu_units);

    // plan file round trip + apply
    load_4060(&p);
    r.disk_bytes = 16LL << 30;
    r.disk_dir = "/tmp/kvt-disk";
    r.ctx = 100000;
    st = kvt_plan_search(&c, &p, &r, pl, &err);
    char path[64];
    snprintf(path, sizeof path, "/tmp/kvt-test-plan-%d.json", (int)getpid());
    kvt_plan *back = malloc(sizeof *back);
    bool ok = st == KVT_OK && pl->kv_disk_bytes > 0 && kvt_plan_save(pl, path, &err) == KVT_OK &&
              kvt_plan_load(path, back, &err) == KVT_OK;
    unlink(path);
    kvt_kv_settings kv;
    memset(&kv, 0, sizeof kv);
    if (ok) kvt_plan_apply(back, &kv);
    const bool gpu = pl->gpu_units > 0; // a split plan's fast tier is the device KV's VRAM, the CPU store unbudgeted
    test_result(ok && kv.fast_bytes == (gpu ? 0 : pl->kv_fast_bytes) && kv.vram_bytes == (gpu ? pl->kv_fast_bytes : 0) &&
                    kv.host_bytes == pl->kv_host_bytes &&
                    kv.disk_bytes == pl->kv_disk_bytes && kv.disk_dir && !strcmp(kv.disk_dir, "/tmp/kvt-disk") &&
                    kv.block_tokens == pl->kv_block_tokens && kv.group_heads == pl->kv_group_heads &&
                    back->cpu_units == pl->cpu_units && fabs(back->predicted_ms_per_token - pl->predicted_ms_per_token) < 1e-3,
                "plan: plan file round trip and kvt_plan_apply (ctx 100000 with a disk tier)", "st %d %s; disk %lld", st, err.msg,
                (long long)pl->kv_disk_bytes);
    free(back);

    // infeasible: the KV cache of a huge context without a disk tier names host and the overflow
    r = kvt_plan_req_default();
    r.ctx = 4000000;
    st = kvt_plan_search(&c, &p, &r, pl, &err);
    test_result(st == KVT_ERR_BUDGET && strstr(pl->error, "host DRAM") && strstr(pl->error, "overflows by"),
                "plan: KV overflow names the tier and the bytes", "st %d: %s", st, pl->error);
    r.disk_bytes = 1LL << 30;
    st = kvt_plan_search(&c, &p, &r, pl, &err);
    test_result(st == KVT_ERR_BUDGET && strstr(pl->error, "disk tier") && strstr(pl->error, "overflows by"),
                "plan: KV overflow of the disk tier", "st %d: %s", st, pl->error);
    kvt_costs_free(&c);

    // infeasible weights: qwen3-32b bf16 on the 4060 (64 GB of weights, 7.5 + 15 GB of memory)
    kvt_costs_from_shape(kvt_shape_find("qwen3-32b"), KVT_TYPE_BF16, &c, &err);
    r = kvt_plan_req_default();
    st = kvt_plan_search(&c, &p, &r, pl, &err);
    test_result(st == KVT_ERR_BUDGET && strstr(pl->error, "overflows by") && !pl->feasible,
                "plan: qwen3-32b on the 4060 is infeasible with the overflowing tier named", "st %d: %s", st, pl->error);
    kvt_costs_free(&c);

    // CPU only: smollm2-135m fits; granularity/blocks for a small context
    kvt_profile_init(&p);
    p.cpu_read_gbps = 20;
    p.ram_bytes = 8LL << 30;
    kvt_costs_from_shape(kvt_shape_find("smollm2-135m"), KVT_TYPE_Q8_0, &c, &err);
    r = kvt_plan_req_default();
    r.ctx = 100;
    st = kvt_plan_search(&c, &p, &r, pl, &err);
    test_result(st == KVT_OK && pl->n_cand == 1 && pl->cpu_units == c.n_units && pl->kv_block_tokens == 128 &&
                    pl->kv_group_heads == 0 && pl->kv_host_bytes == 0 && pl->kv_fast_bytes >= pl->kv_total_bytes,
                "plan: CPU-only profile: one candidate, KV in the fast arena, layer-wise", "st %d %s block %lld", st, err.msg,
                (long long)pl->kv_block_tokens);
    // CPU only with tight RAM and a disk tier: KV streams from disk with host staging
    p.ram_bytes = 200LL << 20;
    r.ctx = 200000;
    r.disk_bytes = 10LL << 30;
    st = kvt_plan_search(&c, &p, &r, pl, &err);
    test_result(st == KVT_OK && pl->kv_disk_bytes > 0 && pl->kv_host_bytes > 0 && pl->t_kv_ms > 0,
                "plan: tight RAM spills KV to disk with staging", "st %d %s", st, err.msg);
    kvt_costs_free(&c);
    free(pl);
}

static void test_profile_io(void) {
    kvt_profile p, q;
    kvt_profile_init(&p);
    snprintf(p.name, sizeof p.name, "t \"quoted\"");
    p.cpu_read_gbps = 12.5;
    p.cpu_gemv_gbps[KVT_TYPE_Q8_0] = 11.25;
    p.cpu_gemm_gflops[KVT_TYPE_Q4_K] = 99;
    p.l3_bytes = 1 << 25;
    p.has_gpu = true;
    p.vram_bytes = 1LL << 33;
    p.gpu_mem_gbps = 200;
    p.h2d_gbps = 10;
    p.cpu_swiglu_gelems = 1.5;
    p.cpu_attn_prefill_deep_gflops = 33.5;
    p.cpu_prefill_overhead_ms = 0.0125;
    char path[64];
    snprintf(path, sizeof path, "/tmp/kvt-test-prof-%d.json", (int)getpid());
    kvt_err err = {0};
    bool ok = kvt_profile_save(&p, path, &err) == KVT_OK && kvt_profile_load(path, &q, &err) == KVT_OK;
    unlink(path);
    test_result(ok && !strcmp(q.name, p.name) && q.cpu_read_gbps == 12.5 && q.cpu_gemv_gbps[KVT_TYPE_Q8_0] == 11.25 &&
                    q.cpu_gemm_gflops[KVT_TYPE_Q4_K] == 99 && q.has_gpu && q.vram_bytes == p.vram_bytes && q.l3_bytes == p.l3_bytes &&
                    q.cpu_swiglu_gelems == 1.5 && q.cpu_attn_prefill_deep_gflops == 33.5 && q.cpu_prefill_overhead_ms == 0.0125,
                "plan: profile JSON round trip", "%s", err.msg);
    test_result(kvt_profile_parse("{\"cpu_read_gbps\": }", &q, &err) == KVT_ERR_FORMAT &&
                    kvt_profile_parse("{\"name\":\"x\"}", &q, &err) == KVT_ERR_FORMAT,
                "plan: malformed and incomplete profiles are rejected", "accepted");
    // a small GEMV measurement runs and gives a positive figure
    double gf = 0, bw = kvt_profile_gemv_gbps(KVT_TYPE_Q8_0, 4096, 1 << 20, 1, 1, &gf, 8);
    test_result(bw > 0 && gf > 0, "plan: GEMV/GEMM micro-benchmark", "bw %g gflops %g", bw, gf);
    // the types the model repacks at load are timed repacked (f16 / bf16 panels of 16 rows, q5_K_x8): positive too,
    // with rows rounded up to the panel (1 MiB of f16 rows of 1024: 512 rows)
    static const kvt_type repacked[] = {KVT_TYPE_F16, KVT_TYPE_BF16, KVT_TYPE_Q5_K};
    for (size_t i = 0; i < sizeof repacked / sizeof repacked[0]; i++) {
        double g2 = 0, b2 = kvt_profile_gemv_gbps(repacked[i], 1024, (1 << 20) + 3000, 1, 1, &g2, 8);
        test_result(b2 > 0 && g2 > 0, "plan: GEMV/GEMM micro-benchmark of a type repacked at load", "%s: bw %g gflops %g",
                    kvt_type_name(repacked[i]), b2, g2);
    }
    // the SwiGLU rate: positive, and it adds n_ff elements per token per block to the prefill prediction
    kvt_profile_init(&q);
    ok = kvt_profile_swiglu(2, 1, &q, &err) == KVT_OK && q.cpu_swiglu_gelems > 0;
    q.cpu_read_gbps = 10; // finite weight-streaming terms
    kvt_costs c;
    kvt_device d = kvt_device_cpu(&q);
    ok = ok && kvt_costs_from_shape(kvt_shape_find("smollm2-135m"), KVT_TYPE_Q8_0, &c, &err) == KVT_OK;
    if (ok) {
        const double with = kvt_stage_prefill_ms(&c, 0, c.n_units, &d, 128);
        d.swiglu_gelems = 0;
        const double without = kvt_stage_prefill_ms(&c, 0, c.n_units, &d, 128);
        const double expect = 30.0 * 1536 * 128 / q.cpu_swiglu_gelems / 1e6; // 30 blocks x n_ff x tokens
        ok = fabs((with - without) - expect) < 1e-9 * (1 + expect);
        kvt_costs_free(&c);
    }
    test_result(ok, "plan: SwiGLU rate measured and counted in prefill", "%s (%.3f G elements/s)", err.msg, q.cpu_swiglu_gelems);
}

// delta_pre (helm §6.4.4's calibration carried to prefill): each CPU unit adds it once per prompt token.
static void test_prefill_overhead(void) {
    kvt_profile p;
    if (!load_4060(&p)) return;
    p.has_gpu = false;
    kvt_costs c = {0};
    kvt_err err = {0};
    bool ok = kvt_costs_from_shape(kvt_shape_find("qwen3-0.6b"), KVT_TYPE_Q8_0, &c, &err) == KVT_OK;
    kvt_plan_req r = kvt_plan_req_default();
    r.ctx = 256;
    r.prompt = 128;
    kvt_plan *a = calloc(2, sizeof *a);
    ok = ok && a && kvt_plan_search(&c, &p, &r, &a[0], &err) == KVT_OK;
    p.cpu_prefill_overhead_ms = 0.01;
    ok = ok && kvt_plan_search(&c, &p, &r, &a[1], &err) == KVT_OK;
    const double diff = ok ? a[1].prefill_ms_per_token - a[0].prefill_ms_per_token : -1;
    ok = ok && fabs(diff - c.n_units * 0.01) < 1e-9 && a[1].predicted_ms_per_token == a[0].predicted_ms_per_token;
    test_result(ok, "plan: delta_pre adds units x delta_pre per prompt token to prefill only", "%s (diff %g ms, %d units)",
                err.msg, diff, c.n_units);
    free(a);
    if (c.units) kvt_costs_free(&c);
}

// The GPU probe is optional: without a device (or without build/libkvtier-cuda.so) the profiler gets a
// clear "unsupported" answer and the profile stays as it was; a missing library is named.
static void test_gpu_probe(void) {
    const char *name = "plan: GPU probe answers cleanly with or without a CUDA device";
    kvt_profile p;
    kvt_profile_init(&p);
    kvt_err err = {0};
    kvt_status st = kvt_profile_gpu(0, true, &p, &err);
    bool ok = st ? (st == KVT_ERR_UNSUPPORTED && !p.has_gpu && err.msg[0]) : (p.has_gpu && p.gpu_mem_gbps > 0);
    if (st) printf("#    %s\n", err.msg);
    const char *old = getenv("KVT_CUDA_LIB");
    char *saved = old ? strdup(old) : NULL;
    setenv("KVT_CUDA_LIB", "/nonexistent/libkvtier-cuda.so", 1);
    kvt_profile q;
    kvt_profile_init(&q);
    st = kvt_profile_gpu(0, true, &q, &err);
    ok = ok && st == KVT_ERR_UNSUPPORTED && strstr(err.msg, "/nonexistent/libkvtier-cuda.so") && !q.has_gpu;
    if (saved) setenv("KVT_CUDA_LIB", saved, 1);
    else unsetenv("KVT_CUDA_LIB");
    free(saved);
    test_result(ok, name, "%s", err.msg);
}

// Found by fuzz/fuzz_plan.c: integer fields read as doubles and converted to int32_t (cpu_threads of a profile;
// n_units, cpu_units, gpu_units of a plan) converted out of range undefined (UBSan: "outside the range of
// representable values of type 'int'"). They are range-checked now, and a plan's units must add up.
static void test_json_int_ranges(void) {
    kvt_profile q;
    kvt_err err = {0};
    bool ok = kvt_profile_parse("{\"cpu_read_gbps\": 10, \"cpu_threads\": 3741821073741824}", &q, &err) == KVT_ERR_FORMAT &&
              strstr(err.msg, "cpu_threads");
    ok = ok && kvt_profile_parse("{\"cpu_read_gbps\": 10, \"cpu_threads\": -1}", &q, &err) == KVT_ERR_FORMAT;
    ok = ok && kvt_profile_parse("{\"cpu_read_gbps\": 10, \"cpu_threads\": 16}", &q, &err) == KVT_OK && q.cpu_threads == 16;
    test_result(ok, "plan: profile cpu_threads out of int32 range is a format error (fuzz_plan)", "%s", err.msg);
    kvt_plan *pl = calloc(1, sizeof *pl);
    const char *base = "{\"model_shape\": \"s\", \"kv_fast_bytes\": 1024, \"kv_host_bytes\": 0, \"kv_disk_bytes\": 0, "
                       "\"kv_block_tokens\": 16, \"kv_granularity\": \"layer\", ";
    const char *units[] = {"\"n_units\": 32, \"cpu_units\": 3e9, \"gpu_units\": 0}",
                           "\"n_units\": -5e18, \"cpu_units\": 0, \"gpu_units\": 0}",
                           "\"n_units\": 32, \"cpu_units\": 30, \"gpu_units\": 30}",
                           "\"n_units\": 1, \"cpu_units\": 0, \"gpu_units\": 1}"};
    char text[512];
    ok = pl != NULL;
    for (size_t i = 0; ok && i < sizeof units / sizeof units[0]; i++) {
        snprintf(text, sizeof text, "%s%s", base, units[i]);
        ok = kvt_plan_parse(text, pl, &err) == KVT_ERR_FORMAT && strstr(err.msg, "units");
        if (!ok) printf("#    accepted or other error: %s (%s)\n", units[i], err.msg);
    }
    snprintf(text, sizeof text, "%s%s", base, "\"n_units\": 32, \"cpu_units\": 20, \"gpu_units\": 12}");
    ok = ok && kvt_plan_parse(text, pl, &err) == KVT_OK && pl->cpu_units == 20 && pl->gpu_units == 12;
    test_result(ok, "plan: plan unit counts out of range or not adding up are format errors (fuzz_plan)", "%s", err.msg);
    free(pl);
}

// Sliding-window layers (gemma3's local layers) read at most their window: decode attends min(ctx, W) positions,
// a prompt's token i min(i + 1, W); the other layers the whole context.
static void test_sliding_window(void) {
    kvt_profile p;
    if (!load_4060(&p)) return;
    p.has_gpu = false;
    kvt_err err = {0};
    kvt_costs c = {0};
    bool ok = kvt_costs_from_shape(kvt_shape_find("smollm2-135m"), KVT_TYPE_Q8_0, &c, &err) == KVT_OK;
    if (ok) {
        kvt_device d = kvt_device_cpu(&p);
        d.l3_bytes = 0; // KV read at M alone: bytes scale linearly with the positions read
        d.attn_gflops = d.attn_prefill_gflops = 20; // a compute ceiling for attention in both
        const int64_t W = 512, ctx = 8192, n = 2048;
        const double dec_global_W = kvt_stage_decode_ms(&c, 0, c.n_units, &d, 1, W);
        const double pre_global = kvt_stage_prefill_ms(&c, 0, c.n_units, &d, n);
        for (int i = 0; i < c.n_units; i++) c.units[i].window = c.units[i].kind == KVT_UNIT_BLOCK ? (int32_t)W : 0;
        const double dec_local = kvt_stage_decode_ms(&c, 0, c.n_units, &d, 1, ctx);
        const double dec_short = kvt_stage_decode_ms(&c, 0, c.n_units, &d, 1, 100); // under the window: unchanged
        const double pre_local = kvt_stage_prefill_ms(&c, 0, c.n_units, &d, n);
        // prefill: the attention FLOPs drop from n(n+1)/2 to W(W+1)/2 + (n-W)W pairs per layer
        const double flops = (double)c.units[1].attn_flops_per_tok * c.hp.n_layer;
        const double drop = flops * ((double)n * (n + 1) / 2 - ((double)W * (W + 1) / 2 + (double)(n - W) * W)) /
                            (d.attn_prefill_gflops * d.eta_c) / 1e6;
        for (int i = 0; i < c.n_units; i++) c.units[i].window = 0;
        const double dec_short_global = kvt_stage_decode_ms(&c, 0, c.n_units, &d, 1, 100);
        ok = fabs(dec_local - dec_global_W) < 1e-9 * dec_global_W && dec_short == dec_short_global &&
             fabs((pre_global - pre_local) - drop) < 1e-6 * pre_global;
        test_result(ok, "plan: sliding-window layers attend at most their window (decode and prefill)",
                    "decode %.6f vs %.6f at ctx W; prefill %.6f -> %.6f, expected a drop of %.6f", dec_local, dec_global_W,
                    pre_global, pre_local, drop);
        kvt_costs_free(&c);
    } else {
        test_result(false, "plan: sliding-window layers attend at most their window (decode and prefill)", "%s", err.msg);
    }
    // the windows come from the GGUF: Gemma 3 270M has 15 local layers of 512 out of 18
    const char *gemma3 = getenv("KVT_GEMMA3");
    if (!test_file_exists(gemma3)) {
        test_skip("plan: Gemma 3 270M's local layers in the cost units", "Gemma 3 not in cache: run `make model-gemma3`");
        return;
    }
    kvt_gguf *g = NULL;
    ok = kvt_gguf_open(gemma3, &g, &err) == KVT_OK && kvt_costs_from_gguf(g, &c, &err) == KVT_OK;
    int local = 0, w = 0;
    for (int i = 0; ok && i < c.n_units; i++) {
        local += c.units[i].window > 0;
        if (c.units[i].window > 0) w = c.units[i].window;
    }
    test_result(ok && local == 15 && w == 512, "plan: Gemma 3 270M's local layers in the cost units", "%s: %d local, window %d",
                err.msg, local, w);
    if (ok) kvt_costs_free(&c);
    if (g) kvt_gguf_free(g);
}

// smollm2-135m's shape in q8_0 (a failure is recorded under the case's name).
static bool smollm2_costs(kvt_costs *c, const char *name) {
    kvt_err err = {0};
    if (kvt_costs_from_shape(kvt_shape_find("smollm2-135m"), KVT_TYPE_Q8_0, c, &err) == KVT_OK) return true;
    test_result(false, name, "%s", err.msg);
    return false;
}

// Prefill attention at depth: the profile's short-prompt rate (128 tokens from 0) and deep-chunk rate (512 queries at
// 1536), interpolated by the positions a chunk's queries attend; the prompt goes in chunks of the engine's n_ubatch.
static void test_prefill_attn_depth(void) {
    const char *name = "plan: prefill attention runs each prompt chunk at the rate measured for its depth";
    kvt_costs c = {0};
    if (!smollm2_costs(&c, name)) return;
    kvt_profile p;
    kvt_profile_init(&p);
    p.cpu_read_gbps = 20;
    p.cpu_attn_gflops = 20;
    p.cpu_attn_prefill_gflops = 10;
    p.cpu_attn_prefill_deep_gflops = 40;
    kvt_device d = kvt_device_cpu(&p), none = d, flat = d;
    none.attn_prefill_gflops = 0; // no attention term: what is left is the rest of prefill
    flat.attn_prefill_deep_gflops = 0;   // one rate at every depth (a profile without the deep point)
    const int N = c.n_units;
    // attention ms of an n-token prompt with device x
#define ATTN_MS(x, n) (kvt_stage_prefill_ms(&c, 0, N, &(x), (n)) - kvt_stage_prefill_ms(&c, 0, N, &none, (n)))
    const double F = (double)c.units[1].attn_flops_per_tok * c.hp.n_layer; // FLOPs per query-position pair, all layers
    const double pairs128 = 128.0 * 129 / 2, pairs1536 = 1536.0 * 1537 / 2, pairs4096 = 4096.0 * 4097 / 2;
    const double t128 = ATTN_MS(d, 128), t1536 = ATTN_MS(d, 1536), t4096 = ATTN_MS(d, 4096), f4096 = ATTN_MS(flat, 4096);
#undef ATTN_MS
    // a 128-token prompt: the short rate; chunks from 1536 on (their mean at least the deep point's): the deep rate;
    // in between faster than the short rate; without the deep point the short rate throughout
    const bool ok = d.prefill_chunk == 512 && fabs(t128 - F * pairs128 / 10 / 1e6) < 1e-9 * t128 &&
                    fabs((t4096 - t1536) - F * (pairs4096 - pairs1536) / 40 / 1e6) < 1e-9 * t4096 &&
                    t1536 < F * pairs1536 / 10 / 1e6 && t1536 > F * pairs1536 / 40 / 1e6 &&
                    fabs(f4096 - F * pairs4096 / 10 / 1e6) < 1e-9 * f4096;
    test_result(ok, name, "chunk %lld; 128: %.6f ms (want %.6f); 1536..4096: %.6f (want %.6f); 4096 flat %.6f (want %.6f)",
                (long long)d.prefill_chunk, t128, F * pairs128 / 10 / 1e6, t4096 - t1536,
                F * (pairs4096 - pairs1536) / 40 / 1e6, f4096, F * pairs4096 / 10 / 1e6);
    kvt_costs_free(&c);
}

// Fills a paged store made with the plan's KV settings (CPU only: its fast tier, no other tier) the way the engine
// fills it: n positions of every layer in chunks of `chunk` (the context's n_ubatch), after a first chunk of r0.
// Returns the store's peak bytes in the fast tier, -1 if an append failed (the plan's budget too small: *err).
static int64_t plan_store_peak(const kvt_costs *c, const kvt_plan *pl, const int32_t *win, int64_t n, int64_t chunk,
                               int64_t r0, kvt_err *err) {
    kvt_kv_settings ks;
    memset(&ks, 0, sizeof ks);
    kvt_plan_apply(pl, &ks);
    kvt_kv_paged_params pp = kvt_kv_paged_params_default();
    pp.type = KVT_TYPE_F16;
    pp.n_layer = c->hp.n_layer;
    pp.n_head_kv = c->hp.n_head_kv;
    pp.head_dim = c->hp.head_dim;
    pp.head_dim_v = c->hp.head_dim_v;
    pp.n_ctx = n;
    pp.block_tokens = ks.block_tokens;
    pp.group_heads = ks.group_heads;
    pp.fast_bytes = ks.fast_bytes;
    pp.host_bytes = ks.host_bytes;
    pp.layer_window = win;
    const int64_t width = (int64_t)c->hp.n_head_kv * c->hp.head_dim;
    float *kv_rows = calloc((size_t)(chunk > r0 ? chunk : r0) * (size_t)width, sizeof(float)); // K and V rows (zeros)
    kvt_kv *kv = NULL;
    int64_t peak = -1;
    if (kv_rows && !kvt_kv_paged_init(&pp, &kv, err)) {
        bool ok = true;
        for (int64_t pos = 0, m = r0; ok && pos < n; pos += m, m = chunk) {
            if (pos + m > n) m = n - pos;
            for (int32_t l = 0; ok && l < c->hp.n_layer; l++) ok = !kv->ops->append(kv, 0, l, pos, m, kv_rows, kv_rows, err);
        }
        kvt_kv_stats st;
        kvt_kv_get_stats(kv, &st);
        if (ok) peak = st.peak_bytes[KVT_TIER_FAST];
    }
    kvt_kv_free(kv);
    free(kv_rows);
    return peak;
}

// The KV placement counts what the paged store (the store a plan configures) holds: a sliding-window layer its window,
// the block being filled and a prefill chunk's overshoot (kvt_kv_paged_shard_blocks), not the whole context.
// A synthetic gemma3-like model (smollm2-135m's shape with a window of 512 on 5 of every 6 layers, as gemma3's
// swa_period 6) on a CPU-only profile; a paged store built with the plan's settings and filled as the engine fills it
// never needs more than the plan's figure, and reaches it when the chunks meet the blocks at the worst offset.
static void test_window_kv(void) {
    const char *name = "plan: sliding-window layers count their window in the KV placement, as the paged store holds them";
    kvt_err err = {0};
    kvt_costs c = {0};
    if (!smollm2_costs(&c, name)) return;
    const int32_t W = 512, nl = c.hp.n_layer;
    int32_t win[64] = {0};
    int32_t n_local = 0;
    for (int32_t l = 0; l < nl; l++) {
        win[l] = l % 6 < 5 ? W : 0;
        c.units[l + 1].window = win[l];
        n_local += win[l] > 0;
    }
    kvt_profile p;
    kvt_profile_init(&p);
    p.cpu_read_gbps = 20;
    p.ram_bytes = 8LL << 30;
    kvt_plan *pl = malloc(sizeof *pl);
    kvt_plan_req r = kvt_plan_req_default();
    r.ctx = 32768;
    const int64_t ub = 512; // the engine's prefill chunk (kvt_context_params_default().n_ubatch)
    kvt_status st = kvt_plan_search(&c, &p, &r, pl, &err);
    const int64_t b = pl->kv_block_tokens, tok = c.units[1].kv_bytes_per_tok; // 768 bytes per token and layer
    // global layers: the whole context; local: ceil((W + ub - 2) / b) + 1 blocks
    const int64_t local_blocks = (W + ub - 2 + b - 1) / b + 1;
    const int64_t want = (nl - n_local) * ((r.ctx + b - 1) / b) * b * tok + n_local * local_blocks * b * tok;
    char why[400] = "";
    if (st || !pl->feasible) snprintf(why, sizeof why, "st %d: %.300s", st, err.msg);
    else if (pl->kv_total_bytes != want || pl->kv_fast_bytes != want || pl->kv_full_bytes != nl * r.ctx * tok ||
             pl->kv_window_layers != n_local || pl->kv_window != W || pl->kv_window_held != local_blocks * b)
        snprintf(why, sizeof why, "ctx 32768, block %lld: total %lld fast %lld (want %lld), full %lld, %d window layers "
                 "of %d holding %lld", (long long)b, (long long)pl->kv_total_bytes, (long long)pl->kv_fast_bytes,
                 (long long)want, (long long)pl->kv_full_bytes, pl->kv_window_layers, pl->kv_window,
                 (long long)pl->kv_window_held);
    // host memory for the weights and the windowed KV but not for a full cache: feasible with the windows, the same
    // model without them overflows (the plan used to count every layer at the whole context)
    if (!why[0]) {
        const int64_t weights = pl->cands[0].cpu_bytes;
        p.ram_bytes = weights + p.ram_reserved_bytes + want + want / 2;
        st = kvt_plan_search(&c, &p, &r, pl, &err);
        const bool windowed_fits = st == KVT_OK && pl->feasible && pl->kv_offloaded_bytes == 0 && pl->max_ctx_fast >= r.ctx;
        const int64_t max_ctx = pl->max_ctx_fast;
        for (int32_t l = 0; l < nl; l++) c.units[l + 1].window = 0;
        st = kvt_plan_search(&c, &p, &r, pl, &err);
        if (!windowed_fits || st != KVT_ERR_BUDGET || pl->max_ctx_fast >= r.ctx)
            snprintf(why, sizeof why, "RAM for the windows only: windowed fits %d (max ctx %lld); all global: st %d, max ctx %lld",
                     windowed_fits, (long long)max_ctx, st, (long long)pl->max_ctx_fast);
        for (int32_t l = 0; l < nl; l++) c.units[l + 1].window = win[l];
        p.ram_bytes = 8LL << 30;
    }
    // every layer a window: no context outgrows the memory
    if (!why[0]) {
        for (int32_t l = 0; l < nl; l++) c.units[l + 1].window = W;
        st = kvt_plan_search(&c, &p, &r, pl, &err);
        if (st || pl->max_ctx_fast != (int64_t)1 << 40)
            snprintf(why, sizeof why, "all local: st %d, max ctx %lld (want unbounded)", st, (long long)pl->max_ctx_fast);
        for (int32_t l = 0; l < nl; l++) c.units[l + 1].window = win[l];
    }
    // the store, with the plan's settings at ctx of about 4K: filled from position 0 in chunks of 512 it stays within
    // the plan's bytes; a first chunk of r0 = (W - 2) mod b positions puts every later chunk at the worst offset (its
    // window starts on a block's last position) and, with ctx = r0 + 8 chunks, the last chunk ends the context, so the
    // global layers' last block and the local layers' largest span meet: the store then holds exactly the plan's bytes
    if (!why[0]) {
        r.ctx = 4096;
        st = kvt_plan_search(&c, &p, &r, pl, &err);
        const int64_t r0 = (W - 2) % pl->kv_block_tokens > 0 ? (W - 2) % pl->kv_block_tokens : ub;
        r.ctx = r0 + 8 * ub;
        if (!st) st = kvt_plan_search(&c, &p, &r, pl, &err);
        const int64_t bt = pl->kv_block_tokens;
        const int64_t aligned = st ? -1 : plan_store_peak(&c, pl, win, r.ctx, ub, ub, &err);
        const int64_t worst = aligned < 0 ? -1 : plan_store_peak(&c, pl, win, r.ctx, ub, r0, &err);
        printf("#    gemma3-like smollm2 shape, ctx %lld, block %lld: plan %lld bytes; store peak %lld (chunks from 0), "
               "%lld (worst offset); full cache %lld\n", (long long)r.ctx, (long long)bt, (long long)pl->kv_total_bytes,
               (long long)aligned, (long long)worst, (long long)pl->kv_full_bytes);
        if (aligned < 0 || worst < 0 || aligned > pl->kv_total_bytes || worst != pl->kv_total_bytes ||
            pl->kv_fast_bytes != pl->kv_total_bytes)
            snprintf(why, sizeof why, "ctx %lld: plan %lld bytes (fast %lld), store peak %lld from 0, %lld at the worst offset: %.200s",
                     (long long)r.ctx, (long long)pl->kv_total_bytes, (long long)pl->kv_fast_bytes, (long long)aligned,
                     (long long)worst, err.msg);
    }
    test_result(!why[0], name, "%s", why);
    // a GPU split (a profile with a GPU that holds the weights and the KV: the plan puts layers there) counts its
    // device layers' windows as the CPU store's: the device KV (gpu_kv.c window_slide) frees the blocks a window left
    // by the store's rule at the plan's block size and the engine's prefill chunk. At ctx 32768 the same figure as
    // on the CPU (cpu(0)+gpu(32): 150,405,120 bytes; the device layers' windows used to count at the whole context:
    // 754,974,720)
    p.has_gpu = true;
    p.vram_bytes = 8LL << 30;
    p.gpu_mem_gbps = 300;
    p.h2d_gbps = 12;
    r.ctx = 32768;
    st = kvt_plan_search(&c, &p, &r, pl, &err);
    const int64_t bg = pl->kv_block_tokens, lg = (W + ub - 2 + bg - 1) / bg + 1;
    const int64_t want_gpu = (nl - n_local) * ((r.ctx + bg - 1) / bg) * bg * tok + n_local * lg * bg * tok;
    test_result(st == KVT_OK && pl->feasible && pl->gpu_units > 0 && pl->kv_total_bytes == want_gpu &&
                    pl->kv_window_layers == n_local && pl->kv_full_bytes == nl * r.ctx * tok,
                "plan: a GPU split counts its device layers' sliding windows as the paged store does (gpu_kv frees them)",
                "st %d %s: cpu(%d)+gpu(%d), block %lld: total %lld (want %lld), fast %lld, full %lld, %d window layers", st,
                err.msg, pl->cpu_units, pl->gpu_units, (long long)bg, (long long)pl->kv_total_bytes, (long long)want_gpu,
                (long long)pl->kv_fast_bytes, (long long)pl->kv_full_bytes, pl->kv_window_layers);
    printf("#    gemma3-like smollm2 shape on a GPU split cpu(%d)+gpu(%d), ctx 32768: plan KV %lld bytes (full %lld)\n",
           pl->cpu_units, pl->gpu_units, (long long)pl->kv_total_bytes, (long long)pl->kv_full_bytes);
    free(pl);
    kvt_costs_free(&c);
}

// Gemma 3 270M (18 layers, 15 with a 512-position window) at its 32K context: the plan's KV is the three global layers'
// 32K positions and the local layers' windows, not 18 x 32K (603979776 bytes).
static void test_window_gemma3(void) {
    const char *name = "plan: Gemma 3 270M at ctx 32768: KV of 3 global layers + 15 windows, not 18 x 32K";
    const char *gemma3 = getenv("KVT_GEMMA3");
    if (!test_file_exists(gemma3)) {
        test_skip(name, "Gemma 3 not in cache: run `make model-gemma3` (KVT_GEMMA3)");
        test_skip("plan: Gemma 3 270M at ctx 32768 on a GPU split: the device layers' windows counted as the CPU store's",
                  "Gemma 3 not in cache: run `make model-gemma3` (KVT_GEMMA3)");
        return;
    }
    kvt_err err = {0};
    kvt_gguf *g = NULL;
    kvt_costs c = {0};
    bool ok = kvt_gguf_open(gemma3, &g, &err) == KVT_OK && kvt_costs_from_gguf(g, &c, &err) == KVT_OK;
    kvt_plan *pl = malloc(sizeof *pl);
    if (ok) {
        kvt_profile p;
        kvt_profile_init(&p);
        p.cpu_read_gbps = 20;
        p.ram_bytes = 8LL << 30;
        kvt_plan_req r = kvt_plan_req_default();
        r.ctx = 32768;
        ok = kvt_plan_search(&c, &p, &r, pl, &err) == KVT_OK;
        // 1024 bytes per token and layer (1 KV head of 256, K and V in f16); blocks of 256: a window layer holds
        // ceil((512 + 510) / 256) + 1 = 5 blocks
        const int64_t b = pl->kv_block_tokens, want = 3 * 32768LL * 1024 + 15 * 5 * b * 1024;
        test_result(ok && b == 256 && pl->kv_total_bytes == want && pl->kv_fast_bytes == want &&
                        pl->kv_full_bytes == 603979776 && pl->kv_window_layers == 15 && pl->kv_window == 512,
                    name, "%s: block %lld, total %lld (want %lld), fast %lld, full %lld, %d window layers", err.msg,
                    (long long)b, (long long)pl->kv_total_bytes, (long long)want, (long long)pl->kv_fast_bytes,
                    (long long)pl->kv_full_bytes, pl->kv_window_layers);
        // on a GPU split the same figure: the device layers' windows freed as the CPU store's (gpu_kv.c); they used to
        // count at the whole context (603,979,776 with every layer on the device)
        p.has_gpu = true;
        p.vram_bytes = 8LL << 30;
        p.gpu_mem_gbps = 300;
        p.h2d_gbps = 12;
        const bool gok = kvt_plan_search(&c, &p, &r, pl, &err) == KVT_OK;
        test_result(gok && pl->gpu_units > 0 && pl->kv_total_bytes == want && pl->kv_window_layers == 15,
                    "plan: Gemma 3 270M at ctx 32768 on a GPU split: the device layers' windows counted as the CPU store's",
                    "%s: cpu(%d)+gpu(%d), block %lld, total %lld (want %lld)", err.msg, pl->cpu_units, pl->gpu_units,
                    (long long)pl->kv_block_tokens, (long long)pl->kv_total_bytes, (long long)want);
        printf("#    Gemma 3 270M on a GPU split cpu(%d)+gpu(%d) at ctx 32768: plan KV %lld bytes (full %lld)\n", pl->cpu_units,
               pl->gpu_units, (long long)pl->kv_total_bytes, (long long)pl->kv_full_bytes);
        kvt_costs_free(&c);
    } else {
        test_result(false, name, "%s", err.msg);
    }
    free(pl);
    if (g) kvt_gguf_free(g);
}

void test_plan(const test_env *env) {
    (void)env;
    test_units();
    test_example();
    test_profile_io();
    test_json_int_ranges();
    test_prefill_overhead();
    test_sliding_window();
    test_window_kv();
    test_prefill_attn_depth();
    test_window_gemma3();
    test_gpu_probe();
}
