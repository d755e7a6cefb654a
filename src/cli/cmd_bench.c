// cmd_bench.c - `kvtier bench`: llama-bench style throughput of prompt
// processing (ppN: N tokens in one batch from an empty cache) and generation
// (tgN: N tokens one at a time), mean +- stddev over -r repetitions after a
// warm-up, plus the weight bytes streamed per generated token as GB/s next
// to this machine's measured read bandwidth. -p and -n take comma lists as
// llama-bench's do (-p 32,128,512: one pp test each).
// -d N[,N..] (llama-bench's n_depth): each test runs once per depth, after N tokens already in the KV cache: before
// every repetition (and the warm-up) the cache is emptied and N prompt tokens are decoded as one batch, not timed;
// the timed pp or tg tokens then follow at positions N, N+1, ... The md output names the test "pp512 @ d4096" and
// the json carries "n_depth", as llama-bench's do. The tests run depth by depth, each depth's pp then tg tests.
// The read bandwidth of a tg test is probed right after its repetitions, with
// the engine's thread count: the best of BW_PROBES passes over a 512 MiB
// buffer, each thread XOR-reading 64 KiB chunks in turn (sequential streams,
// as decode's row ranges are). On a shared VM that rate moves by 30% within
// minutes, so it is measured beside each test, and the best pass is kept.
// Since the rate moves between repetitions too, a tg test also probes once (one
// pass of each access pattern, the best kept) before its first repetition and
// after each: a repetition's weight read rate over the larger of the probes on
// either side of it is its share of the bandwidth of that moment, and the
// median of those shares over the repetitions is reported beside the best-of-5
// figure (json "dram_pct_adjacent"; "probe_adjacent_gbps" holds the probes).
// The token-paired share (json "dram_pct_paired", on by default, --probe): after the timed repetitions, as many
// paired ones, not timed as a whole: after every second generated token the engine's own pool (its threads, warm)
// reads a buffer of the test's bytes per token once (allocated and faulted in once per run; the access pattern the
// fastest of the four (membw.h) in a calibration of 3 passes each). The share is the median over those tokens of (probe
// seconds / token seconds) x (token bytes / probe bytes): the token's weight read rate over the rate of a same-size
// read taken right beside it (the VM's bandwidth drifts by 10-25% between the adjacent probes of one run, much less
// within a token and its probe). Only tokens that follow a token, not a probe, count, and the timed repetitions have
// no probe between their tokens: a token right after a probe ran ~10% slower (SmolLM2 Q4_1, 96 MB a token, on an AMD
// Zen 3 with a 32 MB L3: part of a token's weights is still cached for the next one, which a probe evicts;
// docs/log/BENCHMARKS-kernels-5.md, dp). The probes read a buffer of their own: no token or logit changes.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/json.h"
#include "../base/membw.h"
#include "../base/timer.h"
#include "commands.h"
#include "common.h"

typedef struct {
    const char *name; // "pp" or "tg"
    int64_t n_prompt, n_gen;
    int64_t n_depth;  // tokens in the KV cache before each repetition (filled untimed)
    double *ns;       // [reps] nanoseconds per repetition
    double mem_bw;    // tg: DRAM read bytes/s probed right after the repetitions (0: not measured)
    double *adj;      // tg: [reps + 1] DRAM read bytes/s probed before repetition 0 and after each (NULL: not measured)
    double *pair;     // tg with paired probes: [n_pair] each probed token's (probe seconds / token seconds), then sorted
    double *pair_bw;  // and [n_pair] each probe's read bytes/s (NULL: not measured)
    int64_t n_pair;
    kvt_read_pattern pat; // the paired probe's access pattern (the calibration's fastest)
} bench_test;

static const char *const pattern_name[KVT_READ_N_PATTERNS] = {"one_stream", "four_streams", "four_streams_pf",
                                                                       "two_streams_pf_l1"};

#define BW_PROBES 5
#define BW_PROBE_BYTES ((int64_t)512 << 20)

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// The median over t's repetitions of (bpt bytes x n_gen tokens / the repetition's seconds) / the larger of the probes
// before and after it, as a percentage; 0 when not measured. sc: scratch of reps doubles.
static double adjacent_pct(const bench_test *t, int reps, int64_t bpt, double *sc) {
    if (!t->adj || reps <= 0) return 0;
    for (int k = 0; k < reps; k++) {
        const double bw = t->adj[k] > t->adj[k + 1] ? t->adj[k] : t->adj[k + 1];
        if (bw <= 0) return 0;
        sc[k] = 100.0 * (double)bpt * (double)t->n_gen / (t->ns[k] / 1e9) / bw;
    }
    qsort(sc, (size_t)reps, sizeof *sc, cmp_double);
    return reps % 2 ? sc[reps / 2] : 0.5 * (sc[reps / 2 - 1] + sc[reps / 2]);
}

// The paired share of t (percent): the median over its tokens of probe seconds / token seconds, scaled by the bytes
// each read (bpt for the token, pb for the probe); 0 when not measured. Sorts t->pair.
static double paired_pct(bench_test *t, int64_t bpt, int64_t pb) {
    if (!t->pair || pb <= 0 || t->n_pair <= 0) return 0;
    return 100.0 * (double)bpt / (double)pb * kvt_median_f64(t->pair, t->n_pair);
}

// The paired probe's pattern: 3 passes of each, in turns; the one with the shortest median pass.
static kvt_read_pattern probe_calibrate(kvt_read_probe *pr, kvt_threadpool *pool) {
    double s[KVT_READ_N_PATTERNS][3];
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < KVT_READ_N_PATTERNS; k++) s[k][r] = kvt_read_probe_pass(pr, pool, (kvt_read_pattern)k);
    int best = 0;
    for (int k = 0; k < KVT_READ_N_PATTERNS; k++) {
        if (kvt_median_f64(s[k], 3) < kvt_median_f64(s[best], 3)) best = k;
    }
    return (kvt_read_pattern)best;
}

// Weight bytes one decode step reads: every layer matrix and the output matrix.
static int64_t bytes_per_token(const kvt_model *m) {
    int64_t b = kvt_row_size(m->output.type, m->output.cols) * m->output.rows;
    for (int32_t i = 0; i < m->hp.n_layer; i++) {
        const kvt_layer *L = &m->layers[i];
        const kvt_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t k = 0; k < sizeof w / sizeof w[0]; k++) b += kvt_row_size(w[k]->type, w[k]->cols) * w[k]->rows;
    }
    return b;
}

// A comma list of sizes (llama-bench's -p 32,128) appended to *v (grown); false with a message on a bad item.
static bool parse_sizes(const char *flag, const char *text, int64_t **v, int *n) {
    for (const char *p = text;;) {
        char *end;
        long long x = strtoll(p, &end, 10);
        if (end == p || x < 0 || x > (1 << 20) || (*end && *end != ',')) {
            fprintf(stderr, "kvtier bench: %s: '%s' is not a comma list of integers in [0, %d]\n", flag, text, 1 << 20);
            return false;
        }
        int64_t *g = realloc(*v, (size_t)(*n + 1) * sizeof *g);
        if (!g) return false;
        *v = g;
        g[(*n)++] = x;
        if (!*end) return true;
        p = end + 1;
    }
}

// Empties the cache and fills the test's depth (toks[0, n_depth), one batch): not timed.
static bool fill_depth(kvt_context *ctx, const bench_test *t, const int32_t *toks, kvt_err *err) {
    kvt_context_truncate(ctx, 0);
    return t->n_depth <= 0 || kvt_decode(ctx, toks, t->n_depth, false, err) == KVT_OK;
}

// One repetition: the test's tokens (toks[n_depth, ...)) after the depth fill_depth left; its nanoseconds into *ns
// (NULL: not timed). With pr (a tg test's paired repetition): after every second token (i odd: its predecessor was
// not followed by a probe) a probe pass on the context's pool, its ratio appended to t->pair and t->pair_bw.
static bool run_once(kvt_context *ctx, bench_test *t, const int32_t *toks, kvt_read_probe *pr, double *ns, kvt_err *err) {
    const int32_t *tk = toks + t->n_depth;
    const int64_t t0 = kvt_time_ns();
    if (t->n_prompt > 0) {
        if (kvt_decode(ctx, tk, t->n_prompt, false, err) != KVT_OK) return false;
        if (ns) *ns = (double)(kvt_time_ns() - t0);
        return true;
    }
    for (int64_t i = 0; i < t->n_gen; i++) {
        const int64_t a = kvt_time_ns();
        if (kvt_decode(ctx, &tk[i], 1, false, err)) return false;
        const double d = (double)(kvt_time_ns() - a);
        if (pr && t->pair && i % 2 == 1) {
            const double ps = kvt_read_probe_pass(pr, kvt_context_pool(ctx), t->pat);
            t->pair[t->n_pair] = ps * 1e9 / (d > 0 ? d : 1);
            t->pair_bw[t->n_pair++] = ps > 0 ? (double)kvt_read_probe_bytes(pr) / ps : 0;
        }
    }
    if (ns) *ns = (double)(kvt_time_ns() - t0);
    return true;
}

static void stats(const double *ns, int n, int64_t n_tok, double *avg_ns, double *sd_ns, double *avg_ts, double *sd_ts) {
    double s = 0, st = 0;
    for (int i = 0; i < n; i++) {
        s += ns[i];
        st += (double)n_tok * 1e9 / ns[i];
    }
    *avg_ns = s / n;
    *avg_ts = st / n;
    double v = 0, vt = 0;
    for (int i = 0; i < n; i++) {
        v += (ns[i] - *avg_ns) * (ns[i] - *avg_ns);
        double ts = (double)n_tok * 1e9 / ns[i];
        vt += (ts - *avg_ts) * (ts - *avg_ts);
    }
    *sd_ns = n > 1 ? sqrt(v / (n - 1)) : 0;
    *sd_ts = n > 1 ? sqrt(vt / (n - 1)) : 0;
}

int cmd_bench(int argc, char **argv) {
    kvt_args a = {"bench", argc, argv, 0};
    const char *model_path = NULL, *out_fmt = "md";
    int64_t *pp = NULL, *tg = NULL, *dp = NULL, reps = 5; // [n_pp], [n_tg]: sizes of the pp and tg tests; [n_dp] depths
    int n_pp = 0, n_tg = 0, n_dp = 0;
    bool ok = true, probe_adj = true, probe_pair = true;
    kvt_context_params cp = kvt_context_params_default();
    const char *flag;
    while (ok && kvt_args_next(&a, &flag)) {
        int e = cli_engine_flag(&a, flag, &cp);
        if (e < 0) ok = false;
        if (e > 0) continue;
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            printf("usage: kvtier bench -m MODEL [-p 512] [-n 128] [-d 0] [-r 5] [-t N] [-o md|json] [--probe adjacent,paired]\n"
                   "  -p N[,N..]  prompt tokens of the pp tests (0: skip)\n"
                   "  -n N[,N..]  generated tokens of the tg tests (0: skip)\n"
                   "  -d N[,N..]  depth (llama-bench's n_depth): each test again after N tokens already in the KV cache,\n"
                   "              filled before every repetition and not timed; named \"pp512 @ d4096\" (json: n_depth)\n"
                   "  -r N        repetitions (after one warm-up run)\n"
                   "  --probe L   a tg test's DRAM read probes, a comma list (default adjacent,paired; none: no probes):\n"
                   "              adjacent: 512 MiB read before the first repetition and after each (and the best of 5 after\n"
                   "              them); paired: -r more repetitions, not timed, where every second generated token is\n"
                   "              followed by a read of as many bytes as a token's weights on the engine's threads\n"
                   "A tg test's GB/s column: the weights read per second, \"of\" the best of 5 DRAM probes after its\n"
                   "repetitions; (adjacent) the median over the repetitions of each one's rate over the probes run just\n"
                   "before and after it; (paired) the median over the probed tokens of each one's rate over the rate of\n"
                   "the same-size probe right after it (json: dram_pct_adjacent, dram_pct_paired).\n%s",
                   cli_engine_help);
            free(pp);
            free(tg);
            free(dp);
            return 0;
        } else if (!strcmp(flag, "-m") || !strcmp(flag, "--model")) {
            ok = (model_path = kvt_args_value(&a, flag)) != NULL;
        } else if (!strcmp(flag, "-p") || !strcmp(flag, "--n-prompt") || !strcmp(flag, "-n") ||
                   !strcmp(flag, "--n-gen")) {
            const char *v = kvt_args_value(&a, flag);
            bool is_p = flag[1] == 'p' || !strcmp(flag, "--n-prompt");
            ok = v && parse_sizes(flag, v, is_p ? &pp : &tg, is_p ? &n_pp : &n_tg);
        } else if (!strcmp(flag, "-d") || !strcmp(flag, "--n-depth")) {
            const char *v = kvt_args_value(&a, flag);
            ok = v && parse_sizes(flag, v, &dp, &n_dp);
        } else if (!strcmp(flag, "--probe")) {
            const char *v = kvt_args_value(&a, flag);
            ok = v != NULL;
            probe_adj = probe_pair = false;
            for (const char *q = v; ok && q && *q;) {
                const size_t len = strcspn(q, ",");
                if (len == 8 && !strncmp(q, "adjacent", len)) probe_adj = true;
                else if (len == 6 && !strncmp(q, "paired", len)) probe_pair = true;
                else if (!(len == 4 && !strncmp(q, "none", len))) {
                    fprintf(stderr, "kvtier bench: --probe: '%s' is not a comma list of adjacent, paired or none\n", v);
                    ok = false;
                }
                q += len + (q[len] == ',');
            }
        } else if (!strcmp(flag, "-r") || !strcmp(flag, "--repetitions")) {
            ok = kvt_args_int(&a, flag, 1, 1000, &reps);
        } else if (!strcmp(flag, "-o") || !strcmp(flag, "--output")) {
            ok = (out_fmt = kvt_args_value(&a, flag)) != NULL;
            if (ok && strcmp(out_fmt, "md") && strcmp(out_fmt, "json")) {
                fprintf(stderr, "kvtier bench: -o: '%s' is not md or json\n", out_fmt);
                ok = false;
            }
        } else {
            kvt_args_unknown(&a, flag);
            ok = false;
        }
    }
    if (ok && !n_pp) ok = parse_sizes("-p", "512", &pp, &n_pp);
    if (ok && !n_tg) ok = parse_sizes("-n", "128", &tg, &n_tg);
    if (ok && !n_dp) ok = parse_sizes("-d", "0", &dp, &n_dp);
    if (!ok) {
        free(pp);
        free(tg);
        free(dp);
        return 2;
    }
    kvt_model *m = NULL;
    int rc = 1;
    kvt_context *ctx = NULL;
    kvt_threadpool *pool = NULL; // the adjacent bandwidth probes' (tg tests)
    kvt_read_probe *pr = NULL;   // the paired probes' buffer (tg tests)
    int64_t need = 0; // the most positions a test uses: its depth and its tokens
    for (int d = 0; d < n_dp; d++) {
        for (int i = 0; i < n_pp + n_tg; i++) {
            int64_t x = i < n_pp ? pp[i] : tg[i - n_pp];
            if (x > 0 && dp[d] + x > need) need = dp[d] + x;
        }
    }
    if (cp.n_ctx <= 0) cp.n_ctx = need > 0 ? need : 1;
    const int64_t n_max = (int64_t)n_dp * (n_pp + n_tg); // tests at most: (depth, size) pairs
    int32_t *toks = malloc((size_t)(need + 1) * sizeof *toks);
    bench_test *tests = calloc((size_t)n_max, sizeof *tests); // [n_tests] per depth in -d order, -p then -n order
    int n_tests = 0;
    double *ns = calloc((size_t)n_max * (size_t)reps, sizeof *ns);             // [n_max][reps]
    double *adj = calloc((size_t)n_max * (size_t)(reps + 1), sizeof *adj); // [n_max][reps + 1]
    double *sc = calloc((size_t)reps, sizeof *sc);                               // [reps] adjacent_pct's scratch
    kvt_err err = {0};
    if (!toks || !ns || !tests || !adj || !sc) goto done;
    if (!cli_load_model("bench", model_path, false, &m, NULL)) goto done;
    if (need > cp.n_ctx) {
        fprintf(stderr, "kvtier bench: %lld tokens exceed the context size %lld\n", (long long)need, (long long)cp.n_ctx);
        goto done;
    }
    if (!cli_context_init("bench", m, &cp, &ctx)) goto done;
    // layers on a device (-ngl, a plan's split): the host DRAM probes say nothing of its decode: left out
    kvt_gpu_layers_stats gst;
    const bool on_gpu = kvt_context_gpu_stats(ctx, &gst);
    if (on_gpu) probe_adj = probe_pair = false;
    const char *backend = on_gpu ? "CUDA" : "CPU";
    uint64_t r = 12345;
    for (int64_t i = 0; i < need; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((r >> 33) % (uint64_t)m->hp.n_vocab);
    }
    bool any_tg = false;
    for (int d = 0; d < n_dp; d++) {
        for (int i = 0; i < n_pp + n_tg; i++) {
            bool is_pp = i < n_pp;
            int64_t x = is_pp ? pp[i] : tg[i - n_pp];
            if (x <= 0) continue;
            tests[n_tests] = (bench_test){is_pp ? "pp" : "tg", is_pp ? x : 0, is_pp ? 0 : x, dp[d], ns + n_tests * reps, 0, NULL,
                                          NULL, NULL, 0, KVT_READ_FOUR_PF};
            n_tests++;
            any_tg = any_tg || !is_pp;
        }
    }
    const int64_t bpt = bytes_per_token(m);
    if (any_tg && probe_adj && kvt_threadpool_init(kvt_context_n_threads(ctx), &pool, NULL) != KVT_OK) pool = NULL;
    // below 256 MiB a token, 4 windows read in turns (SmolLM2 Q4_1, 96 MB: a window read every second token came 35%
    // faster than the DRAM rate at times, part of it still in the 32 MB L3 of an AMD Zen 3)
    const int64_t ring = bpt < ((int64_t)256 << 20) ? 4 * bpt : bpt;
    if (any_tg && probe_pair && kvt_read_probe_init(bpt, ring, kvt_context_n_threads(ctx), &pr, &err) != KVT_OK) goto fail;
    for (int ti = 0; ti < n_tests; ti++) {
        bench_test *t = &tests[ti];
        if (!fill_depth(ctx, t, toks, &err) || !run_once(ctx, t, toks, NULL, NULL, &err)) goto fail; // warm-up
        if (t->n_gen && pool) {
            t->adj = adj + (int64_t)ti * (reps + 1);
            t->adj[0] = kvt_measure_read_bw(pool, BW_PROBE_BYTES, 1);
        }
        for (int64_t k = 0; k < reps; k++) {
            if (!fill_depth(ctx, t, toks, &err)) goto fail;
            if (!run_once(ctx, t, toks, NULL, &t->ns[k], &err)) goto fail;
            if (t->adj) t->adj[k + 1] = kvt_measure_read_bw(pool, BW_PROBE_BYTES, 1);
        }
        if (t->n_gen && pool) t->mem_bw = kvt_measure_read_bw(pool, BW_PROBE_BYTES, BW_PROBES);
        if (t->n_gen > 1 && pr) { // the paired repetitions
            t->pair = calloc((size_t)(reps * (t->n_gen / 2)), sizeof *t->pair);
            t->pair_bw = calloc((size_t)(reps * (t->n_gen / 2)), sizeof *t->pair_bw);
            if (!t->pair || !t->pair_bw) {
                snprintf(err.msg, sizeof err.msg, "out of memory for the paired probes");
                goto fail;
            }
            t->pat = probe_calibrate(pr, kvt_context_pool(ctx));
            for (int64_t k = 0; k < reps; k++) {
                if (!fill_depth(ctx, t, toks, &err) || !run_once(ctx, t, toks, pr, NULL, &err)) goto fail;
            }
        }
    }
    kvt_threadpool_free(pool);
    pool = NULL;
    const int64_t pb = pr ? kvt_read_probe_bytes(pr) : 0;
    const char *fname = strrchr(model_path, '/') ? strrchr(model_path, '/') + 1 : model_path;
    char type_desc[96];
    kvt_model_desc(m, type_desc, sizeof type_desc);
    if (!strcmp(out_fmt, "json")) {
        kvt_json j;
        kvt_json_init(&j, stdout);
        kvt_json_arr_begin(&j);
        for (int ti = 0; ti < n_tests; ti++) {
            bench_test *t = &tests[ti];
            int64_t n_tok = t->n_prompt + t->n_gen;
            double an, sn, at, st;
            stats(t->ns, (int)reps, n_tok, &an, &sn, &at, &st);
            kvt_json_obj_begin(&j);
            kvt_json_kv_str(&j, "build_commit", "kvtier");
            kvt_json_kv_str(&j, "cpu_info", "cpu");
            kvt_json_kv_str(&j, "backends", backend);
            kvt_json_kv_str(&j, "model_filename", fname);
            kvt_json_kv_str(&j, "model_type", type_desc);
            kvt_json_kv_int(&j, "model_size", m->weight_bytes);
            kvt_json_kv_int(&j, "model_n_params", m->n_params);
            kvt_json_kv_int(&j, "n_batch", cp.n_ubatch);
            kvt_json_kv_int(&j, "n_ubatch", cp.n_ubatch);
            kvt_json_kv_int(&j, "n_threads", kvt_context_n_threads(ctx));
            kvt_json_kv_str(&j, "type_k", kvt_type_name(cp.kv_type));
            kvt_json_kv_str(&j, "type_v", kvt_type_name(cp.kv_type));
            kvt_json_kv_int(&j, "n_prompt", t->n_prompt);
            kvt_json_kv_int(&j, "n_gen", t->n_gen);
            kvt_json_kv_int(&j, "n_depth", t->n_depth);
            kvt_json_kv_int(&j, "avg_ns", (int64_t)an);
            kvt_json_kv_int(&j, "stddev_ns", (int64_t)sn);
            kvt_json_kv_num(&j, "avg_ts", at);
            kvt_json_kv_num(&j, "stddev_ts", st);
            if (t->n_gen) {
                kvt_json_kv_num(&j, "gbps", (double)bpt * at / 1e9);
                if (t->adj) kvt_json_kv_num(&j, "mem_read_gbps", t->mem_bw / 1e9);
            }
            if (t->pair) {
                kvt_json_kv_num(&j, "dram_pct_paired", paired_pct(t, bpt, pb));
                kvt_json_kv_num(&j, "probe_paired_gbps", kvt_median_f64(t->pair_bw, t->n_pair) / 1e9);
                kvt_json_kv_int(&j, "probe_paired_bytes", pb);
                kvt_json_kv_str(&j, "probe_paired_pattern", pattern_name[t->pat]);
            }
            if (t->adj) {
                kvt_json_kv_num(&j, "dram_pct_adjacent", adjacent_pct(t, (int)reps, bpt, sc));
                kvt_json_key(&j, "probe_adjacent_gbps");
                kvt_json_arr_begin(&j);
                for (int64_t k = 0; k <= reps; k++) kvt_json_num(&j, t->adj[k] / 1e9);
                kvt_json_arr_end(&j);
            }
            kvt_json_key(&j, "samples_ns");
            kvt_json_arr_begin(&j);
            for (int64_t k = 0; k < reps; k++) kvt_json_int(&j, (int64_t)t->ns[k]);
            kvt_json_arr_end(&j);
            kvt_json_key(&j, "samples_ts");
            kvt_json_arr_begin(&j);
            for (int64_t k = 0; k < reps; k++) kvt_json_num(&j, (double)n_tok * 1e9 / t->ns[k]);
            kvt_json_arr_end(&j);
            kvt_json_obj_end(&j);
        }
        kvt_json_arr_end(&j);
    } else {
        printf("| model | size | params | backend | threads | test | t/s | GB/s |\n");
        printf("| ----- | ---: | -----: | ------- | ------: | ---: | --: | ---: |\n");
        for (int ti = 0; ti < n_tests; ti++) {
            bench_test *t = &tests[ti];
            int64_t n_tok = t->n_prompt + t->n_gen;
            double an, sn, at, st;
            stats(t->ns, (int)reps, n_tok, &an, &sn, &at, &st);
            char gb[96] = "", shares[64] = "";
            if (t->adj) snprintf(shares, sizeof shares, "adjacent %.0f%%", adjacent_pct(t, (int)reps, bpt, sc));
            if (t->pair) {
                const size_t l = strlen(shares);
                snprintf(shares + l, sizeof shares - l, "%spaired %.0f%%", l ? ", " : "", paired_pct(t, bpt, pb));
            }
            if (t->n_gen && t->adj)
                snprintf(gb, sizeof gb, "%.1f of %.1f (%s)", (double)bpt * at / 1e9, t->mem_bw / 1e9, shares);
            else if (t->n_gen && t->pair)
                snprintf(gb, sizeof gb, "%.1f (%s)", (double)bpt * at / 1e9, shares);
            else if (t->n_gen)
                snprintf(gb, sizeof gb, "%.1f", (double)bpt * at / 1e9);
            char depth[32] = "";
            if (t->n_depth > 0) snprintf(depth, sizeof depth, " @ d%lld", (long long)t->n_depth);
            printf("| %s | %.2f MiB | %.2f M | %s | %d | %s%lld%s | %.2f ± %.2f | %s |\n", type_desc,
                   m->weight_bytes / 1048576.0, m->n_params / 1e6, backend, kvt_context_n_threads(ctx), t->name,
                   (long long)n_tok, depth, at, st, gb);
        }
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "kvtier bench: %s\n", err.msg);
done:
    if (ctx) { // KVT_POOL_STATS=1: where the compute pool's time went, every repetition together
        kvt_threadpool_stats ps;
        kvt_context_pool_stats(ctx, &ps);
        if (ps.jobs + ps.inline_jobs > 0)
            fprintf(stderr,
                    "pool stats (%d threads): %lld jobs dispatched (%lld tasks, %lld on the caller), %lld on the caller alone "
                    "(%.3f ms); caller ms: %.3f own tasks, %.3f waiting, %.3f outside the pool; workers ms: %.3f in tasks\n",
                    kvt_context_n_threads(ctx), (long long)ps.jobs, (long long)ps.tasks, (long long)ps.caller_tasks,
                    (long long)ps.inline_jobs, ps.inline_ms, ps.caller_ms, ps.wait_ms, ps.between_ms, ps.worker_ms);
    }
    kvt_threadpool_free(pool);
    kvt_read_probe_free(pr);
    for (int ti = 0; tests && ti < n_tests; ti++) {
        free(tests[ti].pair);
        free(tests[ti].pair_bw);
    }
    kvt_context_free(ctx);
    free(toks);
    free(ns);
    free(adj);
    free(sc);
    free(tests);
    free(pp);
    free(tg);
    free(dp);
    kvt_model_free(m);
    return rc;
}
