// cmd_sim.c - `kvtier sim`: the discrete-event simulator of a serving engine over
// tiered KV (src/sim, docs/SIMULATOR.md): one configuration over seeds, or a
// sweep over policies x oversubscription written as one table.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/json.h"
#include "../model/shapes.h"
#include "../plan/cost.h"
#include "../sim/sim.h"
#include "args.h"
#include "commands.h"

#define CMD "sim"
#define MAX_LIST 32

static const char *k_help =
    "usage: kvtier sim --profile P --shape S --workload W --rho R --policy POL --seeds N [--json]\n"
    "       kvtier sim --sweep [--policies a,b,..] [--rhos 1,1.5,..] [-o TABLE.md] (other flags as above)\n"
    "  Simulates continuous-batching decode with the KV cache in a fast tier of 1/rho of the peak\n"
    "  KV footprint, the rest in host memory (and SSD), driving the store's eviction policies\n"
    "  (docs/SIMULATOR.md).\n"
    "  --profile P       machine profile (default profiles/tierkv-h100.json): links h2d/d2h, disk, RAM;\n"
    "                    sim_iter_ms / sim_prefill_ms_per_tok keys when present, else the planner's cost model\n"
    "  --shape S         model shape (kvtier mkmodel --list-shapes; default llama2-7b): block bytes, compute\n"
    "  --workload W      uniform|chat|code|summarization|mixed|fixed (default uniform); fixed: every request\n"
    "                    has --prompt N (512) prompt and --gen N (128) output tokens\n"
    "  --burst           every request arrives at t = 0 (a closed batch of --requests; --load unused)\n"
    "  --rho R           oversubscription: peak KV footprint / fast-tier capacity (default 1)\n"
    "  --policy POL      lru|lfu|attn-ema|static|lookahead|oracle (default lookahead)\n"
    "  --seeds N         runs with seeds S..S+N-1 (default 3); --seed S first seed (default 1)\n"
    "  --json            one JSON object: tpot_ms_mean, tpot_ms_p95, throughput_tok_s, hit_rate, moved_bytes, ...\n"
    "                    (with --sched kvtier also sched, token_budget, preempt, preemptions, resumes), each per run:\n"
    "                    the mean over the seeds (p95 and hit rate pool them); per_seed: [each seed's own]\n"
    "  --requests N      requests per run (default 256)    --load X   arrival rate / decode capacity (default 0.8)\n"
    "  --batch N         max batch (default 32)             --block N  tokens per KV block (default 16)\n"
    "  --iter-ms X       decode iteration time, overrides the profile (0: cost model); with\n"
    "  --iter-ms-per-seq X, --iter-us-per-ctx X  the iteration is X + per-seq x decoding requests +\n"
    "                    per-ctx x 1e-3 x KV positions they read, X the iteration at batch 1\n"
    "                    (profile: sim_iter_ms_per_seq, sim_iter_us_per_ctx)\n"
    "  --prefill-ms-per-tok X  prefill compute per prompt token (profile: sim_prefill_ms_per_tok)\n"
    "  --fast-blocks N   fast-tier capacity in blocks (overrides --rho; at least --prefetch-depth + 2)\n"
    "  --host-blocks N   host capacity (0: profile RAM)\n"
    "  --fast-bytes B, --host-bytes B  the same in bytes, as kvtier serve's --kv-fast / --kv-host (whole blocks)\n"
    "  --prefetch-depth N  transfers a prefetching policy keeps in flight (default 4)\n"
    "  --kv-prefetch N   lru|lfu|static|attn-ema: the paged store's copy-engine prefetch, the next N blocks of\n"
    "                    the request after each read (kvtier serve --kv-prefetch with --layers; default 0: none;\n"
    "                    attn-ema also queues the blocks its attention EMA finds important, as the real store)\n"
    "  --plan N          the serving scheduler's plan of the next N iterations, as kvtier serve --lookahead N:\n"
    "                    victims by plan rank first, planned blocks prefetched with --kv-prefetch (default 0: none)\n"
    "  --layers N        split each request block into N blocks of one layer, read layer by layer over the\n"
    "                    batch, as the paged store's shards (capacities then count those; default 1: all layers)\n"
    "  --victim-window N   resident blocks examined per eviction (default 64; the paged store examines 256)\n"
    "  --clean-below host|ssd  which copy below makes a fast block a clean (preferred) victim: host or SSD\n"
    "                    (default host, the tables of docs/SIMULATOR.md); ssd is the paged store's rule\n"
    "  --link-gbps X     fast <-> host link bandwidth per direction, 10^9 B/s (overrides the profile's h2d/d2h)\n"
    "  --link-latency-us X  its latency (a CPU profile: each copy's CPU time besides the bytes)\n"
    "  --copy-on-compute 0|1  fast <-> host copies take the compute cores, no overlap (default: 1 on a CPU profile)\n"
    "  --sched S         kvtier|fcfs (default kvtier): kvtier runs the serving scheduler's own decisions\n"
    "                    (src/sched/sched_policy.c: FCFS admission, token budget with chunked prefill,\n"
    "                    preemption by swap to SSD when fast + host cannot hold the running requests);\n"
    "                    fcfs admits whole prompts up to --batch and never preempts (the figures before issue 14)\n"
    "  --token-budget N  kvtier: tokens of one iteration, decode rows + prompt chunks (default 512, as kvtier serve)\n"
    "  --no-preempt      kvtier: never swap a running request out\n"
    "  --sweep           every policy of --policies at every --rhos, N seeds each: one markdown table\n";

// Comma-separated list into out (pointers into s, which is modified); count or -1.
static int split_list(char *s, const char **out) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        if (n == MAX_LIST) return -1;
        out[n++] = tok;
    }
    return n;
}

static void print_json(const kvt_sim_config *c, const char *profile, const char *shape, const kvt_sim_summary *s,
                       const kvt_sim_kvtier_sched *ks) {
    kvt_json j;
    kvt_json_init(&j, stdout);
    kvt_json_obj_begin(&j);
    kvt_json_kv_str(&j, "profile", profile);
    kvt_json_kv_str(&j, "shape", shape);
    kvt_json_kv_str(&j, "workload", kvt_sim_workload_name(c->workload));
    kvt_json_kv_str(&j, "policy", c->policy);
    kvt_json_kv_num(&j, "rho", c->rho);
    kvt_json_kv_int(&j, "seeds", s->n_seeds);
    kvt_json_kv_num(&j, "tpot_ms_mean", s->tpot_ms_mean);
    kvt_json_kv_num(&j, "tpot_ms_p95", s->tpot_ms_p95);
    kvt_json_kv_num(&j, "throughput_tok_s", s->throughput_tok_s);
    kvt_json_kv_num(&j, "hit_rate", s->hit_rate);
    kvt_json_kv_num(&j, "moved_bytes", s->moved_bytes);
    kvt_json_kv_num(&j, "stall_s", s->stall_s);
    kvt_json_kv_int(&j, "fast_blocks", s->fast_blocks);
    kvt_json_kv_int(&j, "block_bytes", c->block_bytes);
    kvt_json_kv_num(&j, "transfers", s->transfers);
    kvt_json_kv_num(&j, "reads", s->reads);
    kvt_json_kv_num(&j, "iterations", s->iterations);
    kvt_json_kv_num(&j, "wall_s", s->wall_s);
    kvt_json_kv_num(&j, "transfers_per_s", kvt_sim_summary_rate(s));
    if (c->plan_iters > 0) kvt_json_kv_int(&j, "plan_iters", c->plan_iters); // only with --plan: other outputs unchanged
    if (ks) { // kvtier only: fcfs prints what it printed before --sched
        kvt_json_kv_str(&j, "sched", "kvtier");
        kvt_json_kv_int(&j, "token_budget", ks->token_budget);
        kvt_json_kv_bool(&j, "preempt", ks->preempt);
        kvt_json_kv_num(&j, "preemptions", s->preemptions);
        kvt_json_kv_num(&j, "resumes", s->resumes);
    }
    // the figures above are per run, the mean over the seeds (tpot_ms_p95 and hit_rate pool them); each seed's own:
    kvt_json_key(&j, "per_seed");
    kvt_json_arr_begin(&j);
    for (int k = 0; k < s->n_seeds; k++) {
        const kvt_sim_result *r = &s->runs[k];
        kvt_json_obj_begin(&j);
        kvt_json_kv_int(&j, "seed", (int64_t)c->seed + k);
        kvt_json_kv_num(&j, "tpot_ms_mean", r->tpot_ms_mean);
        kvt_json_kv_num(&j, "tpot_ms_p95", r->tpot_ms_p95);
        kvt_json_kv_num(&j, "throughput_tok_s", r->throughput_tok_s);
        kvt_json_kv_num(&j, "hit_rate", r->hit_rate);
        kvt_json_kv_num(&j, "moved_bytes", r->moved_bytes);
        kvt_json_kv_num(&j, "stall_s", r->stall_s);
        kvt_json_kv_int(&j, "transfers", r->transfers);
        kvt_json_kv_int(&j, "reads", r->reads);
        kvt_json_kv_int(&j, "iterations", r->iterations);
        kvt_json_kv_num(&j, "wall_s", r->wall_s);
        if (ks) {
            kvt_json_kv_int(&j, "preemptions", r->preemptions);
            kvt_json_kv_int(&j, "resumes", r->resumes);
        }
        kvt_json_obj_end(&j);
    }
    kvt_json_arr_end(&j);
    kvt_json_obj_end(&j);
    printf("\n");
}

int cmd_sim(int argc, char **argv) {
    kvt_args a = {CMD, argc, argv, 0};
    const char *profile_path = "profiles/tierkv-h100.json", *shape_name = "llama2-7b", *wl = "uniform";
    const char *policy = "lookahead", *out_path = NULL, *sched = "kvtier", *clean = "host", *flag;
    char *pol_list = NULL, *rho_list = NULL;
    int64_t seeds = 3, seed = 1, requests = 256, batch = 32, block = 16, fast_blocks = 0, host_blocks = -1, depth = 4,
            window = 64, kv_prefetch = 0, layers = 1, token_budget = 512, plan = 0;
    int64_t prompt = 512, gen = 128, fast_bytes = 0, host_bytes = -1, copy_on_compute = -1;
    double rho = 1, load = 0.8, iter_ms = -1, link_gbps = 0, link_lat = -1, per_seq = -1, per_ctx = -1, prefill = -1;
    bool json = false, sweep = false, preempt = true, burst = false;
    while (kvt_args_next(&a, &flag)) {
        bool ok = true;
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            fputs(k_help, stdout);
            return 0;
        } else if (!strcmp(flag, "--profile")) ok = (profile_path = kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "--shape")) ok = (shape_name = kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "--workload")) ok = (wl = kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "--policy")) ok = (policy = kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "--rho")) ok = kvt_args_float(&a, flag, 0.01, 1000, &rho);
        else if (!strcmp(flag, "--seeds")) ok = kvt_args_int(&a, flag, 1, 1000, &seeds);
        else if (!strcmp(flag, "--seed")) ok = kvt_args_int(&a, flag, 0, INT64_MAX / 2, &seed);
        else if (!strcmp(flag, "--requests")) ok = kvt_args_int(&a, flag, 1, 1 << 24, &requests);
        else if (!strcmp(flag, "--load")) ok = kvt_args_float(&a, flag, 0.001, 100, &load);
        else if (!strcmp(flag, "--batch")) ok = kvt_args_int(&a, flag, 1, 1 << 16, &batch);
        else if (!strcmp(flag, "--block")) ok = kvt_args_int(&a, flag, 1, 1 << 16, &block);
        else if (!strcmp(flag, "--iter-ms")) ok = kvt_args_float(&a, flag, 0, 1e6, &iter_ms);
        else if (!strcmp(flag, "--iter-ms-per-seq")) ok = kvt_args_float(&a, flag, 0, 1e6, &per_seq);
        else if (!strcmp(flag, "--iter-us-per-ctx")) ok = kvt_args_float(&a, flag, 0, 1e6, &per_ctx);
        else if (!strcmp(flag, "--prefill-ms-per-tok")) ok = kvt_args_float(&a, flag, 0, 1e6, &prefill);
        else if (!strcmp(flag, "--prompt")) ok = kvt_args_int(&a, flag, 1, 1 << 24, &prompt);
        else if (!strcmp(flag, "--gen")) ok = kvt_args_int(&a, flag, 1, 1 << 24, &gen);
        else if (!strcmp(flag, "--burst")) burst = true;
        else if (!strcmp(flag, "--fast-bytes")) ok = kvt_args_int(&a, flag, 1, INT64_MAX / 2, &fast_bytes);
        else if (!strcmp(flag, "--host-bytes")) ok = kvt_args_int(&a, flag, 0, INT64_MAX / 2, &host_bytes);
        else if (!strcmp(flag, "--clean-below")) ok = (clean = kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "--copy-on-compute")) ok = kvt_args_int(&a, flag, 0, 1, &copy_on_compute);
        else if (!strcmp(flag, "--fast-blocks")) ok = kvt_args_int(&a, flag, 1, INT64_MAX / 2, &fast_blocks);
        else if (!strcmp(flag, "--host-blocks")) ok = kvt_args_int(&a, flag, 0, INT64_MAX / 2, &host_blocks);
        else if (!strcmp(flag, "--prefetch-depth")) ok = kvt_args_int(&a, flag, 1, 1 << 16, &depth);
        else if (!strcmp(flag, "--victim-window")) ok = kvt_args_int(&a, flag, 1, 1 << 20, &window);
        else if (!strcmp(flag, "--layers")) ok = kvt_args_int(&a, flag, 1, 4096, &layers);
        else if (!strcmp(flag, "--kv-prefetch")) ok = kvt_args_int(&a, flag, 0, 1 << 20, &kv_prefetch);
        else if (!strcmp(flag, "--plan")) ok = kvt_args_int(&a, flag, 0, 1 << 10, &plan);
        else if (!strcmp(flag, "--link-gbps")) ok = kvt_args_float(&a, flag, 1e-6, 1e6, &link_gbps);
        else if (!strcmp(flag, "--link-latency-us")) ok = kvt_args_float(&a, flag, 0, 1e9, &link_lat);
        else if (!strcmp(flag, "--sched")) ok = (sched = kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "--token-budget")) ok = kvt_args_int(&a, flag, 1, INT64_MAX / 2, &token_budget);
        else if (!strcmp(flag, "--no-preempt")) preempt = false;
        else if (!strcmp(flag, "--json")) json = true;
        else if (!strcmp(flag, "--sweep")) sweep = true;
        else if (!strcmp(flag, "--policies")) ok = (pol_list = (char *)kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "--rhos")) ok = (rho_list = (char *)kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "-o")) ok = (out_path = kvt_args_value(&a, flag)) != NULL;
        else ok = kvt_args_unknown(&a, flag);
        if (!ok) return 2;
    }
    const kvt_shape *shape = kvt_shape_find(shape_name);
    if (!shape) {
        fprintf(stderr, "kvtier sim: --shape: unknown shape '%s' (kvtier mkmodel --list-shapes)\n", shape_name);
        return 2;
    }
    if (strcmp(clean, "host") && strcmp(clean, "ssd")) {
        fprintf(stderr, "kvtier sim: --clean-below: '%s' is not host|ssd\n", clean);
        return 2;
    }
    if (strcmp(sched, "kvtier") && strcmp(sched, "fcfs")) {
        fprintf(stderr, "kvtier sim: --sched: '%s' is not kvtier|fcfs\n", sched);
        return 2;
    }
    kvt_sim_config c;
    kvt_sim_config_default(&c);
    c.workload = kvt_sim_workload_find(wl);
    if (c.workload == KVT_WL_COUNT) {
        fprintf(stderr, "kvtier sim: --workload: '%s' is not %s\n", wl, kvt_sim_workload_names());
        return 2;
    }
    if (!kvt_evict_policy_find(policy)) {
        fprintf(stderr, "kvtier sim: --policy: '%s' is not %s\n", policy, kvt_sim_policy_names());
        return 2;
    }
    kvt_err err = {0};
    kvt_costs costs = {0};
    kvt_status st = kvt_costs_from_shape(shape, KVT_TYPE_F16, &costs, &err);
    kvt_profile prof;
    char *text = NULL;
    if (!st) st = kvt_profile_load(profile_path, &prof, &err);
    if (!st && !(text = kvt_read_file(CMD, profile_path, NULL))) st = KVT_ERR_IO;
    c.block_tokens = block;
    c.layers = (int32_t)layers;
    c.block_bytes = kvt_sim_block_bytes(&costs.hp, block) / layers;
    if (!st) st = kvt_sim_config_from_profile(&c, &prof, text, &err);
    free(text);
    if (st) {
        if (st != KVT_ERR_IO || err.msg[0]) fprintf(stderr, "kvtier sim: %s\n", err.msg);
        kvt_costs_free(&costs);
        return 1;
    }
    c.costs = &costs;
    if (iter_ms >= 0) c.iter_ms = iter_ms;
    if (per_seq >= 0) c.iter_ms_per_seq = per_seq;
    if (per_ctx >= 0) c.iter_us_per_ctx = per_ctx;
    if (prefill >= 0) c.prefill_ms_per_tok = prefill;
    if (copy_on_compute >= 0) c.copy_on_compute = copy_on_compute == 1;
    c.fixed_prompt = prompt;
    c.fixed_out = gen;
    c.burst = burst;
    c.rho = rho;
    c.policy = policy;
    c.n_requests = requests;
    c.load = load;
    c.max_batch = batch;
    c.seed = (uint64_t)seed;
    c.fast_blocks = fast_blocks;
    if (fast_bytes > 0) c.fast_blocks = fast_bytes / c.block_bytes;
    const int64_t min_fast = kvt_sim_min_fast_blocks(depth);
    if ((fast_blocks > 0 || fast_bytes > 0) && c.fast_blocks < min_fast) { // it was raised to the minimum silently
        if (fast_bytes > 0)
            fprintf(stderr, "kvtier sim: --fast-bytes %lld holds %lld block(s) of %lld bytes, below the minimum of %lld "
                    "(%lld bytes)", (long long)fast_bytes, (long long)c.fast_blocks, (long long)c.block_bytes,
                    (long long)min_fast, (long long)(min_fast * c.block_bytes));
        else
            fprintf(stderr, "kvtier sim: --fast-blocks %lld is below the minimum of %lld", (long long)fast_blocks,
                    (long long)min_fast);
        fprintf(stderr, ": the fast tier must hold the --prefetch-depth (%lld) blocks a prefetch keeps in flight to it and "
                "2 more (the block a read waits for and the one decoding writes); a lower --prefetch-depth allows a "
                "smaller fast tier\n",
                (long long)depth);
        kvt_costs_free(&costs);
        return 2;
    }
    if (host_blocks >= 0) c.host_blocks = host_blocks;
    if (host_bytes >= 0) c.host_blocks = host_bytes / c.block_bytes;
    c.prefetch_depth = depth;
    c.victim_window = window;
    c.copy_prefetch = kv_prefetch;
    c.plan_iters = (int32_t)plan;
    c.clean_ssd_only = !strcmp(clean, "ssd");
    if (link_gbps > 0) c.h2d_gbps = c.d2h_gbps = link_gbps;
    if (link_lat >= 0) c.h2d_latency_us = c.d2h_latency_us = link_lat;
    kvt_sim_kvtier_sched ks;
    kvt_sim_kvtier_sched_init(&ks);
    ks.token_budget = token_budget;
    ks.preempt = preempt;
    const bool kvtier = !strcmp(sched, "kvtier");
    c.sched = kvtier ? kvt_sim_sched_kvtier : kvt_sim_sched_fcfs;
    c.sched_ud = kvtier ? &ks : NULL;
    int rc = 0;
    if (sweep) {
        const char *pols[MAX_LIST] = {"lru", "lfu", "attn-ema", "static", "lookahead", "oracle"};
        int np = 6, nr = 9;
        double rhos[MAX_LIST] = {1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5};
        const char *rs[MAX_LIST];
        if (pol_list && (np = split_list(pol_list, pols)) <= 0) {
            fprintf(stderr, "kvtier sim: --policies: expected a,b,c (at most %d)\n", MAX_LIST);
            rc = 2;
        }
        for (int i = 0; !rc && i < np; i++) {
            if (!kvt_evict_policy_find(pols[i])) {
                fprintf(stderr, "kvtier sim: --policies: '%s' is not %s\n", pols[i], kvt_sim_policy_names());
                rc = 2;
            }
        }
        if (!rc && rho_list) {
            nr = split_list(rho_list, rs);
            for (int i = 0; i < nr; i++) {
                char *end;
                rhos[i] = strtod(rs[i], &end);
                if (*end || end == rs[i] || !(rhos[i] >= 0.01 && rhos[i] <= 1000)) nr = -1; // --rho's range; no inf
            }
            if (nr <= 0) {
                fprintf(stderr, "kvtier sim: --rhos: expected numbers in [0.01, 1000] a,b,c (at most %d)\n", MAX_LIST);
                rc = 2;
            }
        }
        FILE *f = stdout;
        if (!rc && out_path && !(f = fopen(out_path, "w"))) {
            fprintf(stderr, "kvtier sim: -o %s: cannot write: %s\n", out_path, strerror(errno));
            rc = 1;
        }
        if (!rc) {
            fprintf(f, "kvtier sim --sweep: profile %s, shape %s, workload %s, %lld requests x %lld seeds, load %.2f, batch %lld, "
                    "sched %s\n\n", profile_path, shape_name, wl, (long long)requests, (long long)seeds, load, (long long)batch,
                    sched);
            st = kvt_sim_sweep(&c, pols, np, rhos, nr, (int)seeds, f, stderr, &err);
            if (st) {
                fprintf(stderr, "kvtier sim: %s\n", err.msg);
                rc = 1;
            }
            if (f != stdout) {
                const bool bad = ferror(f) != 0;
                if ((fclose(f) != 0 || bad) && !rc) {
                    fprintf(stderr, "kvtier sim: -o %s: write failed: %s\n", out_path, strerror(errno));
                    rc = 1;
                }
            }
            if (f != stdout && rc) unlink(out_path); // no partial table left
        }
    } else {
        kvt_sim_summary s;
        st = kvt_sim_run_seeds(&c, (int)seeds, &s, &err);
        if (st) {
            fprintf(stderr, "kvtier sim: %s\n", err.msg);
            rc = 1;
        } else if (json) {
            print_json(&c, profile_path, shape_name, &s, kvtier ? &ks : NULL);
        } else {
            printf("kvtier sim: %s, %s, %s, rho %.2f, policy %s, %d seed(s), sched %s\n", profile_path, shape_name, wl, rho,
                   policy, s.n_seeds, sched);
            printf("  per run, the mean over the seeds (p95 and hit rate over all their requests and reads):\n");
            if (kvtier)
                printf("  token budget %lld, preemption %s: %.1f preemptions, %.1f resumes\n", (long long)ks.token_budget,
                       ks.preempt ? "on" : "off", s.preemptions, s.resumes);
            printf("  TPOT mean %.2f ms, p95 %.2f ms; throughput %.0f tok/s; hit rate %.3f; moved %.2f GB\n",
                   s.tpot_ms_mean, s.tpot_ms_p95, s.throughput_tok_s, s.hit_rate, s.moved_bytes / 1e9);
            printf("  fast tier %lld blocks of %lld bytes; %.0f transfers in %.2f s wall (%.2fM transfers/s)\n",
                   (long long)s.fast_blocks, (long long)c.block_bytes, s.transfers, s.wall_s,
                   kvt_sim_summary_rate(&s) / 1e6);
        }
        kvt_sim_summary_free(&s);
    }
    kvt_sim_kvtier_sched_free(&ks);
    kvt_costs_free(&costs);
    return rc;
}
