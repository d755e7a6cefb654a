// cmd_kvbench.c - `kvtier kvbench`: decode time per token (TPOT) at a long
// context with the KV cache spread over tiers, against the all-in-memory run
// (T_compute) and the time the links alone need (T_link = bytes moved per
// token / bandwidth measured here), for the set-ups of docs/BENCHMARKS.md
// ("KV tiers"): (a) fast 1/4 + disk, (b) fast 1/8 + host 1/8 + disk, (c) fast
// 1/4 + host rest (a link faster than compute), per
// eviction policy, and the granularity ablation. Prints markdown tables, or with --json one JSON object holding
// the same rows and every byte moved between each pair of tiers.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "../base/json.h"
#include "../base/timer.h"
#include "../kv/kv_paged.h"
#include "../plan/profile.h"
#include "../sched/sampler.h"
#include "commands.h"
#include "common.h"

static const char *k_help =
    "usage: kvtier kvbench -m MODEL [options]\n"
    "  --ctx N          prompt positions before decoding (default 4096)\n"
    "  -n N             decoded tokens timed (default 16)\n"
    "  --dir DIR        disk tier directory (default /tmp)\n"
    "  --only LIST      comma list of sections: base,p,a,b,c,d,gran (default all)\n"
    "  --policies LIST  comma list of policies (default lru,lfu,lookahead,spread)\n"
    "  --json           one JSON object instead of the tables, printed at the end: the set-up, the links, and per\n"
    "                   section its rows (the columns of both tables, the bytes and transfers between each pair of\n"
    "                   tiers over the timed steps and over the whole run); docs/BENCHMARKS.md\n"
    "  engine flags (-t, --kv-block, --kv-prefetch, ...) apply to every run\n";

typedef struct {
    double tpot_ms; // decode time per token (timed steps)
    double tc_ms;   // the all-in-memory context's time per token on the same tokens, interleaved (0: none)
    kvt_kv_stats pre, post; // after the first decode step, after decode
    double csw_vol, csw_invol; // the process's context switches during the timed steps (getrusage)
    int32_t *ids;
    bool ok;
} bench_run;

static double now_ms(void) { return kvt_time_ms(); }

// Disk I/O engine of the last run with a disk tier ("io_uring" or "threads"; env KVT_NO_URING=1 forces threads).
static const char *g_disk_engine;

// Tokens per window of the interleaved timing (run_one).
#define WINDOW 8

// Prefill n_prompt tokens, then decode n_gen greedily, timing every decode step but the first (which fills
// the prefetch pipeline). With `ref` (the all-in-memory context, prefilled with the same prompt, that chose
// `ref_ids`), every WINDOW timed steps ref decodes the same tokens at the same positions (truncated back
// first), timed as r->tc_ms: this machine's speed drifts by up to +-25% between runs minutes apart, so
// TPOT and T_compute are taken side by side. (The run's copy engine keeps prefetching while ref decodes:
// at most `prefetch` blocks per window come early.) The context is returned in *keep when keep is given.
static bool run_one(const kvt_model *m, const kvt_context_params *cp, const int32_t *prompt, int64_t n_prompt,
                    int64_t n_gen, kvt_context *ref, const int32_t *ref_ids, bench_run *r, kvt_context **keep) {
    memset(r, 0, sizeof *r);
    kvt_err err = {0};
    kvt_context *ctx = NULL;
    r->ids = calloc((size_t)n_gen, sizeof *r->ids);
    if (!r->ids || !cli_context_init("kvbench", m, cp, &ctx) || kvt_decode(ctx, prompt, n_prompt, false, &err)) {
        if (!r->ids || err.status) fprintf(stderr, "kvtier kvbench: %s\n", r->ids ? err.msg : "out of memory");
        kvt_context_free(ctx);
        free(r->ids);
        r->ids = NULL;
        return false;
    }
    const int32_t V = m->hp.n_vocab;
    double run_ms = 0, ref_ms = 0;
    int64_t pending = 0; // timed steps since ref last caught up
    for (int64_t i = 0; i < n_gen && !err.status; i++) {
        r->ids[i] = kvt_argmax(kvt_context_logits(ctx), V);
        if (i + 1 == n_gen) break; // the last id needs no decode
        struct rusage u0, u1;
        getrusage(RUSAGE_SELF, &u0);
        const double t0 = now_ms();
        if (kvt_decode(ctx, &r->ids[i], 1, false, &err)) break;
        const double dt = now_ms() - t0;
        getrusage(RUSAGE_SELF, &u1);
        if (i == 0) {
            kvt_context_kv_stats(ctx, &r->pre);
            continue;
        }
        run_ms += dt;
        r->csw_vol += (double)(u1.ru_nvcsw - u0.ru_nvcsw);
        r->csw_invol += (double)(u1.ru_nivcsw - u0.ru_nivcsw);
        pending++;
        if (ref && (pending == WINDOW || i + 2 == n_gen)) {
            const int64_t i0 = i + 1 - pending;
            kvt_context_truncate(ref, n_prompt + i0);
            for (int64_t j = i0; j <= i && !err.status; j++) {
                const double u0 = now_ms();
                if (!kvt_decode(ref, &ref_ids[j], 1, false, &err)) ref_ms += now_ms() - u0;
            }
            pending = 0;
        }
    }
    kvt_context_kv_stats(ctx, &r->post);
    const char *eng = kvt_kv_paged_disk_engine(kvt_context_kv(ctx));
    if (eng) g_disk_engine = eng;
    if (keep && !err.status) *keep = ctx;
    else kvt_context_free(ctx);
    if (err.status) {
        fprintf(stderr, "kvtier kvbench: %s\n", err.msg);
        free(r->ids);
        r->ids = NULL;
        return false;
    }
    r->tpot_ms = run_ms / (double)(n_gen - 2);
    r->tc_ms = ref ? ref_ms / (double)(n_gen - 2) : 0;
    r->ok = true;
    return true;
}

typedef struct {
    double mem_gbps;   // memcpy host <-> fast (both host DRAM on the CPU backend)
    double disk_read_gbps, disk_write_gbps;
} links;

static double measure_memcpy(int64_t block) {
    int64_t n = (int64_t)256 << 20;
    uint8_t *a = malloc((size_t)n), *b = malloc((size_t)n);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, (size_t)n);
    memset(b, 2, (size_t)n);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_ms();
        for (int64_t o = 0; o + block <= n; o += block) memcpy(b + o, a + o, (size_t)block);
        double s = (now_ms() - t0) / 1e3;
        double g = (double)(n / block * block) / s / 1e9;
        if (g > best) best = g;
    }
    free(a);
    free(b);
    return best;
}

// Per-token decode traffic of a run and the time the links need for it (links in parallel: the slowest).
static void link_time(const bench_run *r, int64_t n_tok, const links *L, double *bytes_tok, double *t_link_ms) {
    double mem = 0, dr = 0, dw = 0, all = 0;
    for (int a = 0; a < KVT_TIER_COUNT; a++) {
        for (int b = 0; b < KVT_TIER_COUNT; b++) {
            double x = (double)(r->post.moved_bytes[a][b] - r->pre.moved_bytes[a][b]) / (double)n_tok;
            if (a == b) continue;
            all += x;
            if (a == KVT_TIER_DISK) dr += x;
            else if (b == KVT_TIER_DISK) dw += x;
            else mem += x;
        }
    }
    *bytes_tok = all;
    double tm = L->mem_gbps > 0 ? mem / (L->mem_gbps * 1e6) : 0;
    double td = (L->disk_read_gbps > 0 ? dr / (L->disk_read_gbps * 1e6) : 0) +
                (L->disk_write_gbps > 0 ? dw / (L->disk_write_gbps * 1e6) : 0);
    *t_link_ms = tm > td ? tm : td;
}

static bool in_list(const char *list, const char *item) {
    if (!list) return true;
    size_t n = strlen(item);
    for (const char *p = list; (p = strstr(p, item)); p += n) {
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return true;
    }
    return false;
}

// A comma list of names (--only, --policies): every item must be one of `allowed` (NULL-terminated); an empty item
// or an unknown one is refused by name, before the model loads and the benchmark starts. Returns false after printing.
static bool check_list(const char *flag, const char *list, const char *const *allowed) {
    if (!list) return true;
    const char *p = list;
    for (;;) {
        size_t n = strcspn(p, ",");
        bool ok = false;
        for (const char *const *a = allowed; n > 0 && *a; a++) ok = ok || (strlen(*a) == n && !strncmp(*a, p, n));
        if (!ok) {
            fprintf(stderr, "kvtier kvbench: %s: %s item '%.*s' in '%s' (one of:", flag, n ? "unknown" : "empty", (int)n, p,
                    list);
            for (const char *const *a = allowed; *a; a++) fprintf(stderr, " %s", *a);
            fprintf(stderr, ")\n");
            return false;
        }
        if (!p[n]) return true;
        p += n + 1;
    }
}

// Where a run's decode time goes, per timed token (kvt_kv_stats: the readers' acquire time and its parts, the
// copy threads' CPU time) and the process's context switches per token: the time table's columns after TPOT, named
// as in a row's "per_token" (--json).
enum { N_TIME = 11 };
static const char *const k_time_names[N_TIME] = {
    "acquire_ms", "lock_wait_ms", "wait_busy_ms", "wait_room_ms", "own_loads_ms", "copy_threads_cpu_ms", "queue_entries",
    "queue_entries_idle", "wakeups", "context_switches_voluntary", "context_switches_involuntary"};

static void time_values(const bench_run *r, int64_t n_tok, double v[N_TIME]) {
    const kvt_kv_stats *a = &r->pre, *b = &r->post;
    const double x[N_TIME] = {b->acquire_ms - a->acquire_ms, b->lock_ms - a->lock_ms, b->wait_busy_ms - a->wait_busy_ms,
                              b->wait_room_ms - a->wait_room_ms, b->load_ms - a->load_ms, b->io_cpu_ms - a->io_cpu_ms,
                              (double)(b->io_items - a->io_items), (double)(b->io_idle - a->io_idle),
                              (double)(b->wakeups - a->wakeups), r->csw_vol, r->csw_invol};
    for (int k = 0; k < N_TIME; k++) v[k] = x[k] / (double)n_tok;
}

// Printed under each table.
static void time_row(const char *label, const bench_run *r, int64_t n_tok) {
    double v[N_TIME];
    time_values(r, n_tok, v);
    printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f (%.0f idle) | %.0f | %.0f / %.0f |\n", label, r->tpot_ms,
           v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]);
}

// The same, as a row's "per_token" object (--json).
static void time_json(kvt_json *j, const bench_run *r, int64_t n_tok) {
    double v[N_TIME];
    time_values(r, n_tok, v);
    kvt_json_key(j, "per_token");
    kvt_json_obj_begin(j);
    for (int k = 0; k < N_TIME; k++) kvt_json_kv_num(j, k_time_names[k], v[k]);
    kvt_json_obj_end(j);
}

// One row of a set-up's table; with j (--json) its object in the section's "rows", with the time table's columns.
static void row(kvt_json *j, const char *label, const bench_run *r, const bench_run *base, int64_t n_tok, const links *L,
                int64_t n_gen) {
    double bpt, tl;
    link_time(r, n_tok, L, &bpt, &tl);
    double stall = (r->post.stall_ms - r->pre.stall_ms) / (double)n_tok;
    double cpu = (r->post.copy_cpu_ms - r->pre.copy_cpu_ms) / (double)n_tok;
    double tc = r->tc_ms > 0 ? r->tc_ms : base->tpot_ms, bound = tc > tl ? tc : tl;
    bool same = !memcmp(r->ids, base->ids, (size_t)n_gen * sizeof(int32_t));
    if (j) {
        kvt_json_obj_begin(j);
        kvt_json_kv_str(j, "setup", label);
        kvt_json_kv_num(j, "tpot_ms", r->tpot_ms);
        kvt_json_kv_num(j, "t_compute_ms", tc);
        kvt_json_kv_num(j, "t_link_ms", tl);
        kvt_json_kv_num(j, "tpot_over_bound", r->tpot_ms / bound);
        kvt_json_kv_num(j, "stall_ms_per_token", stall);
        kvt_json_kv_num(j, "copy_cpu_ms_per_token", cpu);
        kvt_json_kv_num(j, "moved_bytes_per_token", bpt);
        cli_json_moved(j, "", &r->pre, &r->post); // the timed steps
        cli_json_moved(j, "run_", NULL, &r->post); // the whole run: prefill, the first step and the timed steps
        kvt_json_key(j, "peak_bytes");
        kvt_json_obj_begin(j);
        for (int t = 0; t < KVT_TIER_COUNT; t++) kvt_json_kv_int(j, kvt_tier_name((kvt_tier)t), r->post.peak_bytes[t]);
        kvt_json_obj_end(j);
        kvt_json_kv_bool(j, "ids_match", same);
        time_json(j, r, n_tok);
        kvt_json_obj_end(j);
        return;
    }
    printf("| %s | %.1f | %.1f | %.1f | %.2f | %.1f (%.0f%%) | %.1f | %.2f | %lld / %lld / %lld | %s |\n", label, r->tpot_ms,
           tc, tl, r->tpot_ms / bound, stall, 100.0 * stall / r->tpot_ms, cpu, bpt / 1e6,
           (long long)r->post.peak_bytes[0], (long long)r->post.peak_bytes[1], (long long)r->post.peak_bytes[2],
           same ? "yes" : "NO");
    fflush(stdout);
}

static void time_header(void) {
    printf("where the time goes, per token (summed over threads): acquire = lock + wait busy + wait room + own loads + "
           "the rest (bookkeeping, prefetch queueing)\n\n");
    printf("| set-up | TPOT ms | acquire ms | lock wait ms | wait busy ms | wait room ms | own loads ms | copy threads CPU ms | "
           "queue entries | wake-ups | context switches vol / invol |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
}

static void header(void) {
    printf("| set-up | TPOT ms | T_compute ms | T_link ms | TPOT / max(Tc, Tl) | stall ms/token (%% of TPOT) | "
           "copy CPU ms/token | MB moved / token | peak fast / host / disk bytes | ids = all-in-memory |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
}

// A section: its markdown title and table header, or its object in "sections" (--json: j).
static void section_begin(kvt_json *j, const char *name, const char *title) {
    if (!j) {
        printf("### %s\n\n", title);
        header();
        return;
    }
    kvt_json_obj_begin(j);
    kvt_json_kv_str(j, "name", name);
    kvt_json_kv_str(j, "title", title);
    kvt_json_key(j, "rows");
    kvt_json_arr_begin(j);
}

static void section_end(kvt_json *j) {
    if (!j) {
        printf("\n");
        return;
    }
    kvt_json_arr_end(j);
    kvt_json_obj_end(j);
}

int cmd_kvbench(int argc, char **argv) {
    kvt_args a = {"kvbench", argc, argv, 0};
    const char *model_path = NULL, *dir = "/tmp", *only = NULL, *policies = "lru,lfu,lookahead,spread";
    int64_t n_ctx = 4096, n_gen = 16, iv;
    bool json = false;
    kvt_context_params cp = kvt_context_params_default();
    const char *flag;
    while (kvt_args_next(&a, &flag)) {
        int e = cli_engine_flag(&a, flag, &cp);
        if (e < 0) return 2;
        if (e > 0) continue;
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            printf("%s%s", k_help, cli_engine_help);
            return 0;
        } else if (!strcmp(flag, "-m") || !strcmp(flag, "--model")) {
            if (!(model_path = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--ctx")) {
            if (!kvt_args_int(&a, flag, 16, 1 << 22, &n_ctx)) return 2;
        } else if (!strcmp(flag, "-n")) {
            if (!kvt_args_int(&a, flag, 3, 1 << 16, &iv)) return 2;
            n_gen = iv;
        } else if (!strcmp(flag, "--dir")) {
            if (!(dir = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--only")) {
            if (!(only = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--policies")) {
            if (!(policies = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--json")) {
            json = true;
        } else {
            kvt_args_unknown(&a, flag);
            return 2;
        }
    }
    static const char *const k_sections[] = {"base", "p", "a", "b", "c", "d", "gran", NULL};
    static const char *const k_policies[] = {"lru", "lfu", "lookahead", "spread", NULL};
    if (!check_list("--only", only, k_sections) || !check_list("--policies", policies, k_policies)) return 2;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "kvtier kvbench: --dir '%s': %s\n", dir, stat(dir, &st) != 0 ? strerror(errno) : "not a directory");
        return 2;
    }
    kvt_model *m;
    if (!cli_load_model("kvbench", model_path, false, &m, NULL)) return 1;
    const kvt_hparams *hp = &m->hp;
    cp.n_ctx = n_ctx + n_gen;
    cp.kv_timing = true; // the table of where the time goes (time_row)
    if (cp.n_threads <= 0) cp.n_threads = kvt_physical_cores();
    int rc = 1;
    kvt_json jw, *j = NULL; // --json: the object, written to jf (a memory stream: jbuf, jlen)
    FILE *jf = NULL;
    char *jbuf = NULL;
    size_t jlen = 0;
    bench_run base = {0};
    kvt_context *ref = NULL; // the all-in-memory context: decodes beside every set-up (run_one)
    int32_t *prompt = malloc((size_t)n_ctx * sizeof *prompt);
    if (!prompt) goto done;
    uint64_t s = 12345;
    for (int64_t i = 0; i < n_ctx; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        prompt[i] = (int32_t)(100 + (s >> 33) % (uint64_t)(hp->n_vocab - 100));
    }
    const int64_t kv_bytes = (int64_t)hp->n_layer * cp.n_ctx * hp->n_head_kv * (hp->head_dim + hp->head_dim_v) *
                             (cp.kv_type == KVT_TYPE_F16 ? 2 : 4);
    // link bandwidths
    links L = {0};
    kvt_kv_paged_params pp = kvt_kv_paged_params_default();
    pp.type = cp.kv_type;
    pp.n_head_kv = hp->n_head_kv;
    pp.head_dim = hp->head_dim;
    pp.head_dim_v = hp->head_dim_v;
    pp.block_tokens = cp.kv_block;
    L.mem_gbps = measure_memcpy(kvt_kv_paged_block_bytes(&pp));
    kvt_profile prof;
    kvt_profile_init(&prof);
    kvt_err err = {0};
    if (kvt_profile_disk(dir, (int64_t)256 << 20, &prof, &err)) fprintf(stderr, "kvtier kvbench: %s\n", err.msg);
    L.disk_read_gbps = prof.disk_read_gbps;
    L.disk_write_gbps = prof.disk_write_gbps;
    const int prefetch = cp.kv_prefetch >= 0 ? cp.kv_prefetch : kvt_kv_paged_params_default().prefetch;
    const int64_t n_tok = n_gen - 2; // timed decode steps
    if (json) { // built in memory, printed whole at the end: no partial object when a set-up fails
        if (!(jf = open_memstream(&jbuf, &jlen))) {
            fprintf(stderr, "kvtier kvbench: out of memory\n");
            goto done;
        }
        kvt_json_init(&jw, jf);
        j = &jw;
        kvt_json_obj_begin(j);
        kvt_json_kv_str(j, "model", model_path);
        kvt_json_kv_int(j, "n_layer", hp->n_layer);
        kvt_json_kv_int(j, "n_head_kv", hp->n_head_kv);
        kvt_json_kv_int(j, "head_dim", hp->head_dim);
        kvt_json_kv_str(j, "kv_type", cp.kv_type == KVT_TYPE_F16 ? "f16" : "f32");
        kvt_json_kv_int(j, "ctx", n_ctx);
        kvt_json_kv_int(j, "n_gen", n_gen);
        kvt_json_kv_int(j, "timed_tokens", n_tok);
        kvt_json_kv_int(j, "kv_bytes", kv_bytes);
        kvt_json_kv_int(j, "block_tokens", cp.kv_block);
        kvt_json_kv_int(j, "threads", cp.n_threads);
        kvt_json_kv_int(j, "prefetch", prefetch);
        kvt_json_key(j, "links"); // GB/s (10^9 bytes per second), measured here
        kvt_json_obj_begin(j);
        kvt_json_kv_num(j, "memcpy_gbps", L.mem_gbps);
        kvt_json_kv_str(j, "disk_dir", dir);
        kvt_json_kv_bool(j, "disk_o_direct", prof.disk_o_direct);
        kvt_json_kv_num(j, "disk_read_gbps", L.disk_read_gbps);
        kvt_json_kv_num(j, "disk_write_gbps", L.disk_write_gbps);
        kvt_json_obj_end(j);
    } else {
        printf("model %s: %d layers, %d KV heads x %d, KV %s; context %lld + %lld decoded; KV total %.1f MB; "
               "block %lld positions; %d threads; prefetch %d\n",
               model_path, hp->n_layer, hp->n_head_kv, hp->head_dim, cp.kv_type == KVT_TYPE_F16 ? "f16" : "f32",
               (long long)n_ctx, (long long)n_gen, (double)kv_bytes / 1e6, (long long)cp.kv_block, cp.n_threads, prefetch);
        printf("links measured here: memcpy %.2f GB/s (block-sized copies); disk %s %s: read %.2f GB/s, write %.2f GB/s "
               "(1 MiB requests)\n\n",
               L.mem_gbps, dir, prof.disk_o_direct ? "O_DIRECT" : "buffered", L.disk_read_gbps, L.disk_write_gbps);
    }
    if (!run_one(m, &cp, prompt, n_ctx, n_gen, NULL, NULL, &base, &ref)) goto done;
    if (j) {
        kvt_json_kv_num(j, "t_compute_alone_ms", base.tpot_ms);
        kvt_json_key(j, "sections");
        kvt_json_arr_begin(j);
    } else {
        printf("### all in memory (T_compute)\n\nTPOT %.1f ms (alone). In the tables, T_compute is this context's time "
               "per token decoding the same tokens in windows of %d interleaved with the set-up's.\n\n",
               base.tpot_ms, WINDOW);
    }
    if (in_list(only, "p")) { // the paged store with no budget: what paging costs without any transfer
        kvt_context_params c = cp;
        c.kv_paged = true;
        bench_run r;
        if (!run_one(m, &c, prompt, n_ctx, n_gen, ref, base.ids, &r, NULL)) goto done;
        section_begin(j, "p", "paged store, everything in T0 (no transfers)");
        row(j, "paged", &r, &base, n_tok, &L, n_gen);
        section_end(j);
        free(r.ids);
    }
    const char *pols[] = {"lru", "lfu", "lookahead", "spread"};
    // set-ups: fast and host budgets in eighths of the KV (host 0: no host tier), disk for the rest
    static const struct {
        const char *name, *title;
        int fast8, host8;
        bool disk;
    } secs[] = {
        {"a", "(a) RAM (fast) 1/4 + disk rest", 2, 0, true},
        {"b", "(b) fast 1/8 + host 1/8 + disk rest (KV = 4 x (T0 + T1))", 1, 1, true},
        {"c", "(c) fast 1/4 + host rest, no disk (the link, memcpy, is faster than compute)", 2, 8, false},
        {"d", "(d) RAM (fast) 7/8 + disk rest (the disk link is faster than compute when a policy reads only the rest)", 7, 0,
         true},
    };
    for (size_t sec = 0; sec < sizeof secs / sizeof secs[0]; sec++) {
        if (!in_list(only, secs[sec].name)) continue;
        section_begin(j, secs[sec].name, secs[sec].title);
        bench_run done_runs[sizeof pols / sizeof pols[0]];
        const char *done_pols[sizeof pols / sizeof pols[0]];
        int n_done = 0;
        for (size_t p = 0; p < sizeof pols / sizeof pols[0]; p++) {
            if (!in_list(policies, pols[p])) continue;
            kvt_context_params c = cp;
            c.kv_fast_bytes = kv_bytes / 8 * secs[sec].fast8;
            c.kv_host_bytes = kv_bytes / 8 * secs[sec].host8;
            c.kv_disk_dir = secs[sec].disk ? dir : NULL;
            c.kv_evict = pols[p];
            bench_run r;
            if (!run_one(m, &c, prompt, n_ctx, n_gen, ref, base.ids, &r, NULL)) goto done;
            row(j, pols[p], &r, &base, n_tok, &L, n_gen);
            free(r.ids);
            r.ids = NULL;
            done_pols[n_done] = pols[p];
            done_runs[n_done++] = r;
        }
        section_end(j);
        if (!j) { // the rows' per_token in the JSON
            time_header();
            for (int i = 0; i < n_done; i++) time_row(done_pols[i], &done_runs[i], n_tok);
            printf("\n");
        }
    }
    if (in_list(only, "gran")) {
        section_begin(j, "gran", "granularity (fast 1/4 + disk rest, lookahead)");
        for (int32_t g = hp->n_head_kv; g >= 1; g--) {
            if (hp->n_head_kv % g) continue;
            kvt_context_params c = cp;
            c.kv_paged = true;
            c.kv_group = g;
            c.kv_fast_bytes = kv_bytes / 4;
            c.kv_disk_dir = dir;
            c.kv_evict = "lookahead";
            bench_run r;
            if (!run_one(m, &c, prompt, n_ctx, n_gen, ref, base.ids, &r, NULL)) goto done;
            char label[64];
            snprintf(label, sizeof label, g == hp->n_head_kv ? "layer (%d heads)" : g == 1 ? "head (%d)" : "group:%d", g);
            row(j, label, &r, &base, n_tok, &L, n_gen);
            free(r.ids);
        }
        section_end(j);
    }
    if (j) {
        kvt_json_arr_end(j);
        kvt_json_key(j, "disk_io"); // the disk I/O engine of the last run with a disk tier
        if (g_disk_engine) kvt_json_str(j, g_disk_engine);
        else kvt_json_null(j);
        kvt_json_obj_end(j);
        if (fclose(jf) != 0 || !jbuf) {
            jf = NULL;
            fprintf(stderr, "kvtier kvbench: out of memory\n");
            goto done;
        }
        jf = NULL;
        fputs(jbuf, stdout); // one line
    } else {
        printf("disk I/O engine: %s\n", g_disk_engine ? g_disk_engine : "none (no run with a disk tier)");
    }
    rc = 0;
done: // every path, errors included, frees the reference context, the ids, the prompt, the model and the JSON
    if (jf) fclose(jf);
    free(jbuf);
    kvt_context_free(ref);
    free(base.ids);
    free(prompt);
    kvt_model_free(m);
    return rc;
}
