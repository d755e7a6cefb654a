#include "common.h"

#include "../plan/plan.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/file.h"
#include "../base/timer.h"
#include "../sched/grammar_tok.h"
#ifdef KVT_HAVE_JANSSON
#include "../serve/json_schema.h"
#endif
#include "../serve/chat_template.h"
#include "../exec/backend_cuda.h"

#include "../kv/kv_paged.h"
#include "../kv/kv_policy.h"
#include "../sparse/sparse.h"

bool cli_load_model(const char *cmd, const char *path, bool vocab_only, kvt_model **model, kvt_tokenizer **tok) {
    kvt_err err = {0};
    *model = NULL;
    if (!path) {
        fprintf(stderr, "kvtier %s: -m MODEL is required\n", cmd);
        return false;
    }
    if (kvt_model_load(path, vocab_only, model, &err)) {
        fprintf(stderr, "kvtier %s: %s\n", cmd, err.msg);
        return false;
    }
    if (tok) {
        if (kvt_tokenizer_init((*model)->gguf, tok, &err)) {
            fprintf(stderr, "kvtier %s: %s\n", cmd, err.msg);
            kvt_model_free(*model);
            *model = NULL;
            return false;
        }
        if (kvt_tokenizer_note(*tok)[0]) fprintf(stderr, "kvtier %s: note: %s\n", cmd, kvt_tokenizer_note(*tok));
    }
    return true;
}

const char *const cli_engine_help =
    "  -t, --threads N      worker threads (default: physical cores)\n"
    "  -c, --ctx-size N     context size in tokens (default: the model's training context)\n"
    "  --kv-type f16|f32    KV cache element type (default f16, as llama.cpp)\n"
    "  --ubatch N           tokens per forward micro-batch (default 512)\n"
    "  -ngl, --gpu-layers N run the last N layers on CUDA device 0, their KV in VRAM (N = layers: all; more:\n"
    "                       the logits too; needs build/libkvtier-cuda.so and a device; see docs/GPU.md)\n"
    "  --kv-vram BYTES      VRAM budget of the device layers' KV (default unlimited); the blocks past it stay in\n"
    "                       pinned host memory, fetched ahead layer by layer or read there (--kv-evict's policy)\n"
    "  --kv-pinned BYTES    pinned host budget of the device layers' KV (default unlimited; needs --kv-disk DIR):\n"
    "                       the blocks past it go to a disk file in DIR and come back through pinned memory\n"
    "  --kv-disk-sync       that disk I/O on the host after synchronizing both streams (default: a disk thread\n"
    "                       overlapping the kernels, ordered by events)\n"
    "  --kv-copy-dma        each device KV block copy its own DMA (default: copies under 1 MiB gathered into one\n"
    "                       batched copy kernel per fetch, up to 128 blocks each)\n"
    "  --cuda-graphs        run the device layers of each decode step as one CUDA graph when every KV block is in\n"
    "                       VRAM (captured, updated in place step to step; default off: not yet run on a GPU)\n"
    "  --kv-block N         positions per KV block (default 512)\n"
    "  KV tiers (any of these selects the tiered paged store):\n"
    "  --plan FILE          KV budgets, granularity and block size from `kvtier plan --json -o FILE`\n"
    "  --kv-granularity layer|head|group:G  KV heads per shard (default layer)\n"
    "  --kv-fast BYTES      budget of T0, the memory attention reads (default unlimited)\n"
    "  --kv-host BYTES      budget of T1, host DRAM (default: no host tier)\n"
    "  --kv-disk DIR        T2: a file in DIR (O_DIRECT, CRC32C per block), unlinked as soon as it is\n"
    "                       created, so nothing is left in DIR however the run ends (Ctrl-C too)\n"
    "  --kv-disk-max BYTES  budget of T2 (default unlimited)\n"
    "  --kv-evict POLICY    eviction policy: lru (default), lfu, lookahead, spread, attn-ema, static,\n"
    "                       oracle (docs/SIMULATOR.md, kv_policy.h)\n"
    "  --kv-prefetch K      blocks fetched ahead of use (default 16)\n"
    "  --kv-copy-threads N  copy threads at work at once on copies between memory tiers (default: the\n"
    "                       CPUs less -t, none where that is 0; blocks read from disk wake up to 4); 0: none,\n"
    "                       the compute threads run the queued copies between their own blocks and while\n"
    "                       they wait in the thread pool\n"
    "  --kv-keep            keep the disk file in DIR (kvtier-kv-XXXXXX)\n"
    "  --kv-timing          time the KV readers' path (acquire, lock, own loads: --json, /metrics, kvbench)\n"
    "  Sparse decode attention (docs/SPARSE.md; sequence 0 of generate and perplexity; prefill stays dense):\n"
    "  --sparse off|oracle|quest|asyncspade  how decode attention selects positions (default off: dense)\n"
    "  --sparse-budget K    positions attended per layer and KV head, or a fraction of the context (0.125)\n"
    "  --sparse-sink S      first positions always attended (default 4)\n"
    "  --sparse-recent R    last positions always attended (default 32)\n"
    "  --sparse-window W    asyncspade: queries of the regression window (default 16, at most 64)\n"
    "  --sparse-dense-layers N  first N layers attend densely (default 0)\n"
    "  --sparse-page P      quest: positions per page (default 16)\n"
    "  --sparse-block P     asyncspade: select whole pages of P positions (best position of each), to match\n"
    "                       the store's blocks (--kv-block P); default 0: token-level\n"
    "  --sparse-prefetch-layers N  asyncspade: prefetch a layer's selected blocks N layers before it is\n"
    "                       attended (default 0: as soon as selected, a step ahead)\n"
    "  --sparse-rerank F    asyncspade: F*K candidates by the predicted query, re-ranked by the real one\n"
    "  --sparse-block-sum   asyncspade with --sparse-block: a page's score is its predicted mass (the sum)\n"
    "  --sparse-rerank-block Q  asyncspade with --sparse-rerank: the real query keeps whole pages of Q\n"
    "                       positions (most candidate mass first), so the set fits a fast tier of K (0: token level)\n"
    "  --sparse-page-elems E  asyncspade: pages of --sparse-block / --sparse-rerank-block shrink to at most E key\n"
    "                       elements per KV head (max(1, E / head_dim) positions; acc: 256; 0: as given)\n"
    "  --sparse-keep H      asyncspade with --sparse-rerank-block: a page the previous step kept counts\n"
    "                       (1 + H) times its mass (fewer pages change per step; default 0: off)\n"
    "  --sparse-share       asyncspade with --sparse-rerank: a layer's KV heads share their budgets (the\n"
    "                       pages, or positions at token level, with the most mass over every head)\n"
    "  --sparse-share-layers  asyncspade with --sparse-share: the sparse layers share their budgets too (each\n"
    "                       layer's from the previous step's page or position masses of every layer;\n"
    "                       same total)\n"
    "  --sparse-layer-floor F  with --sparse-share-layers: each layer keeps at least F of its own budget (0)\n"
    "  --sparse-prefetch-top G  asyncspade with --sparse-rerank: the worker prefetches only the blocks of its\n"
    "                       G*K best candidates, best first (default 0: every candidate)\n"
    "  --sparse-sync        asyncspade: select when the query arrives (no worker thread)\n"
    "  --sparse-predictor ridge|last|ridge-head|simplex  asyncspade: the paper's ridge ensemble per KV group\n"
    "                       (default), the last query, the ridge ensemble per query head, or the ridge problem\n"
    "                       solved over simplex weights\n"
    "  --sparse-lambda L    asyncspade: ridge regularization, relative to the mean squared query (1e-3)\n"
    "  --sparse-rope-align  asyncspade: past queries rotated to the next position's RoPE phase before predicting\n"
    "  --sparse-real-layers N  asyncspade: the first N layers select with the real query (on the critical path)\n"
    "  --sparse-fallback C  asyncspade: heads whose predicted query has cosine < C with the real one are\n"
    "                       selected again with the real query (on the critical path; default 0: never)\n"
    "  --sparse-key-bits B  asyncspade: 8 (int8, default) or 4 (4-bit) key copies for the predicted query's scan\n"
    "  --sparse-rerank-bits B  asyncspade: key copies the real query scores (re-rank, fallback; default: key bits)\n"
    "  --sparse-rerank-qbits B  asyncspade: the re-rank's real query as int16 (16, default) or int8 (8)\n"
    "  --sparse-rerank-resid R  asyncspade: the re-rank as the worker's scores plus the residual (q - q^) . k on\n"
    "                       share R of the int8 key rows (those with the most residual energy), in the KV heads\n"
    "                       whose calibration passes the gate (default 0: always the exact pass)\n"
    "  --sparse-rerank-resid-gate G  with --sparse-rerank-resid: the residual only in KV heads whose first re-ranks\n"
    "                       (exact) kept on average >= G of their candidates' mass (default 0.8)\n"
    "  --sparse-rerank-resid-cal N  with --sparse-rerank-resid: those first re-ranks per layer and KV head (4)\n"
    "  --sparse-preset keep|doc|acc  asyncspade with a measured set of the flags above (docs/SPARSE.md): keep\n"
    "                       (pages of 16, re-rank x4, keep 0.25, int8 re-rank query), doc (x6 + share, pages of 16),\n"
    "                       acc (pages of 4, at most 256 key elements: 1 position at head_dim 256; x8 + share,\n"
    "                       1 dense first layer: the accuracy one; --kv-block 4 on a paged store);\n"
    "                       flags after it change its settings\n"
    "  --sparse-stats       per step: overlap with the oracle set and attention mass recall (an exact pass)\n"
    "  --sparse-seqs N      sequences whose key summaries --kv-fast reserves (default 1; beam and serve: theirs)\n"
    KVT_BYTES_HELP;

static int bytes_flag(kvt_args *a, const char *flag, int64_t *out) { return kvt_args_bytes_pos(a, flag, out) ? 1 : -1; }

// --plan FILE: the KV part of a plan written by `kvtier plan --json` (budgets, granularity,
// block size). Flags after --plan override it.
static int cli_apply_plan(kvt_args *a, const char *flag, kvt_context_params *p) {
    const char *path = kvt_args_value(a, flag);
    if (!path) return -1;
    kvt_plan *plan = calloc(1, sizeof *plan);
    kvt_err err = {0};
    if (!plan || kvt_plan_load(path, plan, &err)) {
        fprintf(stderr, "kvtier %s: --plan: %s\n", a->cmd, plan ? err.msg : "out of memory");
        free(plan);
        return -1;
    }
    kvt_kv_settings kv = {0};
    kvt_plan_apply(plan, &kv);
    p->kv_fast_bytes = kv.fast_bytes > 0 ? kv.fast_bytes : 0;
    p->kv_host_bytes = kv.host_bytes > 0 ? kv.host_bytes : 0;
    p->kv_disk_max = kv.disk_bytes > 0 ? kv.disk_bytes : 0;
    // the directory outlives the plan: the context borrows it for the process' lifetime
    p->kv_disk_dir = kv.disk_dir && kv.disk_bytes > 0 ? strdup(kv.disk_dir) : NULL;
    if (kv.block_tokens > 0) p->kv_block = kv.block_tokens;
    p->kv_group = kv.group_heads;
    // the plan's CPU/GPU split (helm.txt): its GPU units are the last layers and the output (the embedding rows stay
    // on the CPU: one row read per token). Where no GPU can be used, the CPU runs them (said on stderr): a plan made
    // for another machine still gives the same tokens
    if (plan->gpu_units > 0) {
        kvt_cuda_backend be;
        kvt_err e = {0};
        if (!kvt_cuda_backend_open(&be, &e)) {
            kvt_cuda_backend_close(&be);
            const int32_t nl = plan->n_units - 2; // embedding, layers, output
            p->n_gpu_layers = plan->gpu_units - 1 < nl ? plan->gpu_units - 1 : nl;
            p->gpu_output = true;
            p->kv_vram_bytes = kv.vram_bytes; // the device layers' KV within the plan's fast tier
        } else {
            fprintf(stderr, "kvtier %s: --plan: the plan puts %d of its %d units on a GPU, but %s: running them on the CPU\n",
                    a->cmd, plan->gpu_units, plan->n_units, e.msg);
        }
    }
    p->kv_paged = true;
    p->plan_file = path;
    snprintf(p->plan_model, sizeof p->plan_model, "%s", plan->model);
    snprintf(p->plan_shape, sizeof p->plan_shape, "%s", plan->model_shape);
    free(plan);
    return 1;
}

static void progress_show(void *user, int64_t done, int64_t total) {
    cli_progress *pr = user;
    const double now = kvt_time_ms();
    if (done <= 0 || done > total) return;
    if (done < total && pr->shown && now - pr->last_ms < 250) return;
    if (done == total) {
        if (pr->shown) fputs("\r\033[K", stderr); // erase the line: the output that follows starts clean
        pr->shown = false;
        pr->last_ms = 0;
        return;
    }
    const double s = (now - pr->t0_ms) / 1e3;
    fprintf(stderr, "\r\033[Kkvtier: prefill %lld/%lld tokens (%.0f%%)", (long long)done, (long long)total,
            100.0 * (double)done / (double)total);
    if (s > 0) fprintf(stderr, ", %.1f tok/s", (double)done / s);
    fflush(stderr);
    pr->shown = true;
    pr->last_ms = now;
}

void cli_progress_on(cli_progress *pr, kvt_context_params *cp, bool on) {
    memset(pr, 0, sizeof *pr);
    if (!on || !isatty(STDERR_FILENO)) return;
    cp->progress = progress_show;
    cp->progress_user = pr;
}

// The first --sparse-* flag that does nothing under the chosen mode (given without --sparse, or a flag of
// another mode), or NULL. The CLI's parameters start from kvt_context_params_default, so a field that differs
// from its default was given.
static const char *sparse_flag_unused(const kvt_sparse_params *p, const char **mode_needed) {
    const kvt_sparse_mode m = p->mode;
    const bool off = m == KVT_SPARSE_OFF, as = m == KVT_SPARSE_ASYNCSPADE;
    *mode_needed = "oracle, quest or asyncspade";
    if (off) {
        if (p->budget || p->budget_frac) return "--sparse-budget";
        if (p->sink != -1) return "--sparse-sink";
        if (p->recent != -1) return "--sparse-recent";
        if (p->dense_layers) return "--sparse-dense-layers";
        if (p->stats) return "--sparse-stats";
    }
    *mode_needed = "quest";
    if (m != KVT_SPARSE_QUEST && p->page) return "--sparse-page";
    *mode_needed = "asyncspade";
    if (!as) {
        const struct {
            bool set;
            const char *flag;
        } k[] = {{p->window != 0, "--sparse-window"},
                 {p->block != 0, "--sparse-block"},
                 {p->prefetch_layers != 0, "--sparse-prefetch-layers"},
                 {p->rerank != 0, "--sparse-rerank"},
                 {p->block_sum, "--sparse-block-sum"},
                 {p->rerank_block != 0, "--sparse-rerank-block"},
                 {p->page_elems != 0, "--sparse-page-elems"},
                 {p->keep != 0, "--sparse-keep"},
                 {p->share, "--sparse-share"},
                 {p->share_layers, "--sparse-share-layers"},
                 {p->layer_floor != 0, "--sparse-layer-floor"},
                 {p->prefetch_top != 0, "--sparse-prefetch-top"},
                 {p->sync, "--sparse-sync"},
                 {p->predictor != KVT_SPARSE_PRED_RIDGE, "--sparse-predictor"},
                 {p->lambda != 0, "--sparse-lambda"},
                 {p->rope_align, "--sparse-rope-align"},
                 {p->real_layers != 0, "--sparse-real-layers"},
                 {p->fallback != 0, "--sparse-fallback"},
                 {p->key_bits != 0, "--sparse-key-bits"},
                 {p->rerank_bits != 0, "--sparse-rerank-bits"},
                 {p->rerank_qbits != 0, "--sparse-rerank-qbits"},
                 {p->rerank_resid != 0, "--sparse-rerank-resid"},
                 {p->rerank_resid_gate != 0, "--sparse-rerank-resid-gate"},
                 {p->rerank_resid_cal != 0, "--sparse-rerank-resid-cal"}};
        for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
            if (k[i].set) return k[i].flag;
    }
    return NULL;
}

bool cli_context_init(const char *cmd, const kvt_model *m, const kvt_context_params *cp, kvt_context **ctx) {
    kvt_err err = {0};
    const char *need = NULL, *unused = sparse_flag_unused(&cp->sparse, &need);
    if (unused) {
        fprintf(stderr, "kvtier %s: %s does nothing with --sparse %s: it needs --sparse %s\n", cmd, unused,
                kvt_sparse_mode_name(cp->sparse.mode), need);
        *ctx = NULL;
        return false;
    }
    if (kvt_context_init(m, cp, ctx, &err)) {
        fprintf(stderr, "kvtier %s: %s\n", cmd, err.msg);
        return false;
    }
    const int64_t n_ctx = kvt_context_n_ctx(*ctx), train = m->hp.n_ctx_train;
    if (train > 0 && n_ctx > train) {
        fprintf(stderr,
                "kvtier %s: warning: the context of %lld tokens exceeds the model's training context (%lld): "
                "output past %lld tokens may degrade\n",
                cmd, (long long)n_ctx, (long long)train, (long long)train);
    }
    return true;
}

// The --sparse-* flags into p->sparse: 1 consumed, 0 not one, -1 bad value (message printed).
static int cli_sparse_flag(kvt_args *a, const char *flag, kvt_sparse_params *sp) {
    int64_t v;
    double f;
    if (!strcmp(flag, "--sparse-preset")) {
        const char *s = kvt_args_value(a, flag);
        if (!s) return -1;
        if (!kvt_sparse_params_preset(s, sp)) {
            fprintf(stderr, "kvtier %s: --sparse-preset: '%s' is not keep, doc or acc\n", a->cmd, s);
            return -1;
        }
        return 1;
    }
    if (!strcmp(flag, "--sparse")) {
        const char *s = kvt_args_value(a, flag);
        if (!s) return -1;
        if (!kvt_sparse_mode_parse(s, &sp->mode)) {
            fprintf(stderr, "kvtier %s: --sparse: '%s' is not off, oracle, quest or asyncspade\n", a->cmd, s);
            return -1;
        }
        return 1;
    }
    if (!strcmp(flag, "--sparse-budget")) {
        const char *s = kvt_args_value(a, flag);
        if (!s) return -1;
        if (strchr(s, '.')) { // a fraction of the context
            a->i--;
            if (!kvt_args_float(a, flag, 1e-6, 1.0, &f)) return -1;
            sp->budget_frac = f;
            sp->budget = 0;
        } else {
            a->i--;
            if (!kvt_args_int(a, flag, 1, (int64_t)1 << 30, &v)) return -1;
            sp->budget = v;
        }
        return 1;
    }
    int32_t *ints[] = {&sp->sink, &sp->recent, &sp->window, &sp->dense_layers, &sp->page, &sp->real_layers, &sp->block,
                       &sp->prefetch_layers, &sp->seqs, &sp->rerank_block, &sp->key_bits, &sp->rerank_bits,
                       &sp->page_elems};
    const char *names[] = {"--sparse-sink", "--sparse-recent", "--sparse-window", "--sparse-dense-layers", "--sparse-page",
                           "--sparse-real-layers", "--sparse-block", "--sparse-prefetch-layers", "--sparse-seqs",
                           "--sparse-rerank-block", "--sparse-key-bits", "--sparse-rerank-bits", "--sparse-page-elems"};
    const int64_t lo[] = {0, 1, 1, 0, 1, 0, 0, 0, 1, 0, 4, 4, 0};
    const int64_t hi[] = {1 << 20, 1 << 20, 64, 1 << 16, 1 << 16, 1 << 16, 1 << 16, 1 << 16, 1 << 16, 1 << 16, 8, 8, 1 << 20};
    for (int i = 0; i < 13; i++) {
        if (strcmp(flag, names[i])) continue;
        if (!kvt_args_int(a, flag, lo[i], hi[i], &v)) return -1;
        if ((i == 10 || i == 11) && v != 4 && v != 8) {
            fprintf(stderr, "kvtier %s: %s: 4 or 8 bits\n", a->cmd, flag);
            return -1;
        }
        *ints[i] = (int32_t)v;
        if (ints[i] == &sp->block || ints[i] == &sp->rerank_block) sp->page_elems = 0; // an explicit page size is kept
        return 1;
    }
    if (!strcmp(flag, "--sparse-rerank-qbits")) {
        if (!kvt_args_int(a, flag, 8, 16, &v)) return -1;
        if (v != 8 && v != 16) {
            fprintf(stderr, "kvtier %s: %s: 8 or 16 bits\n", a->cmd, flag);
            return -1;
        }
        sp->rerank_qbits = (int32_t)v;
        return 1;
    }
    if (!strcmp(flag, "--sparse-rerank-resid-gate")) {
        if (!kvt_args_float(a, flag, 0.0, 1.0, &f)) return -1;
        sp->rerank_resid_gate = f;
        return 1;
    }
    if (!strcmp(flag, "--sparse-rerank-resid-cal")) {
        if (!kvt_args_int(a, flag, 1, 1 << 20, &v)) return -1;
        sp->rerank_resid_cal = (int32_t)v;
        return 1;
    }
    if (!strcmp(flag, "--sparse-rerank-resid")) {
        if (!kvt_args_float(a, flag, 0.0, 1.0, &f)) return -1;
        sp->rerank_resid = f;
        return 1;
    }
    if (!strcmp(flag, "--sparse-rerank")) {
        if (!kvt_args_float(a, flag, 0.0, 64.0, &f)) return -1;
        sp->rerank = f;
        return 1;
    }
    if (!strcmp(flag, "--sparse-keep")) {
        if (!kvt_args_float(a, flag, 0.0, 1e6, &f)) return -1;
        sp->keep = f;
        return 1;
    }
    if (!strcmp(flag, "--sparse-share")) return (sp->share = true), 1;
    if (!strcmp(flag, "--sparse-share-layers")) return (sp->share_layers = true), 1;
    if (!strcmp(flag, "--sparse-layer-floor")) {
        if (!kvt_args_float(a, flag, 0.0, 1.0, &f)) return -1;
        sp->layer_floor = f;
        return 1;
    }
    if (!strcmp(flag, "--sparse-prefetch-top")) {
        if (!kvt_args_float(a, flag, 0.0, 64.0, &f)) return -1;
        sp->prefetch_top = f;
        return 1;
    }
    if (!strcmp(flag, "--sparse-block-sum")) return (sp->block_sum = true), 1;
    if (!strcmp(flag, "--sparse-sync")) return (sp->sync = true), 1;
    if (!strcmp(flag, "--sparse-rope-align")) return (sp->rope_align = true), 1;
    if (!strcmp(flag, "--sparse-lambda")) {
        if (!kvt_args_float(a, flag, 1e-12, 1e12, &f)) return -1;
        sp->lambda = f;
        return 1;
    }
    if (!strcmp(flag, "--sparse-fallback")) {
        if (!kvt_args_float(a, flag, 0.0, 1.0, &f)) return -1;
        sp->fallback = f;
        return 1;
    }
    if (!strcmp(flag, "--sparse-predictor")) {
        const char *s = kvt_args_value(a, flag);
        if (!s) return -1;
        if (!kvt_sparse_pred_parse(s, &sp->predictor)) {
            fprintf(stderr, "kvtier %s: --sparse-predictor: '%s' is not ridge, last, ridge-head or simplex\n", a->cmd, s);
            return -1;
        }
        return 1;
    }
    if (!strcmp(flag, "--sparse-stats")) return (sp->stats = true), 1;
    return 0;
}

int cli_engine_flag(kvt_args *a, const char *flag, kvt_context_params *p) {
    if (!strncmp(flag, "--sparse", 8)) return cli_sparse_flag(a, flag, &p->sparse);
    int64_t v;
    if (!strcmp(flag, "-t") || !strcmp(flag, "--threads")) {
        if (!kvt_args_int(a, flag, 1, 1024, &v)) return -1;
        p->n_threads = (int32_t)v;
        return 1;
    }
    if (!strcmp(flag, "-c") || !strcmp(flag, "--ctx-size")) {
        if (!kvt_args_int(a, flag, 1, (int64_t)1 << 24, &v)) return -1;
        p->n_ctx = v;
        return 1;
    }
    if (!strcmp(flag, "--ubatch") || !strcmp(flag, "-ub")) {
        if (!kvt_args_int(a, flag, 1, 1 << 16, &v)) return -1;
        p->n_ubatch = v;
        return 1;
    }
    if (!strcmp(flag, "-ngl") || !strcmp(flag, "--gpu-layers") || !strcmp(flag, "--n-gpu-layers")) {
        if (!kvt_args_int(a, flag, 0, 1 << 20, &v)) return -1;
        p->n_gpu_layers = (int32_t)v;
        return 1;
    }
    if (!strcmp(flag, "--kv-block")) {
        if (!kvt_args_int(a, flag, 1, 1 << 20, &v)) return -1;
        p->kv_block = v;
        return 1;
    }
    if (!strcmp(flag, "--kv-fast")) return bytes_flag(a, flag, &p->kv_fast_bytes);
    if (!strcmp(flag, "--kv-vram")) return bytes_flag(a, flag, &p->kv_vram_bytes);
    if (!strcmp(flag, "--kv-pinned")) return bytes_flag(a, flag, &p->kv_pinned_bytes);
    if (!strcmp(flag, "--cuda-graphs")) { // decode steps of the device layers as CUDA graphs (off until run on a device)
        p->gpu_graphs = true;
        return 1;
    }
    if (!strcmp(flag, "--kv-disk-sync")) { // the device KV's disk I/O on the host after both streams (no disk thread)
        p->kv_disk_sync = true;
        return 1;
    }
    if (!strcmp(flag, "--kv-copy-dma")) { // every device KV copy its own DMA (no batched copy kernels)
        p->kv_copy_min = -1;
        return 1;
    }
    if (!strcmp(flag, "--kv-host")) return bytes_flag(a, flag, &p->kv_host_bytes);
    if (!strcmp(flag, "--kv-disk-max")) return bytes_flag(a, flag, &p->kv_disk_max);
    if (!strcmp(flag, "--plan")) return cli_apply_plan(a, flag, p);
    if (!strcmp(flag, "--kv-disk")) return (p->kv_disk_dir = kvt_args_value(a, flag)) ? 1 : -1;
    if (!strcmp(flag, "--kv-keep")) {
        p->kv_keep = true;
        return 1;
    }
    if (!strcmp(flag, "--kv-timing")) {
        p->kv_timing = true;
        return 1;
    }
    if (!strcmp(flag, "--kv-prefetch")) {
        if (!kvt_args_int(a, flag, 0, 1 << 20, &v)) return -1;
        p->kv_prefetch = (int32_t)v;
        return 1;
    }
    if (!strcmp(flag, "--kv-copy-threads")) {
        if (!kvt_args_int(a, flag, 0, 64, &v)) return -1;
        p->kv_copy_threads = v > 0 ? (int32_t)v : -1; // 0: none (-1 in the context's parameters)
        return 1;
    }
    if (!strcmp(flag, "--kv-evict")) {
        const char *s = kvt_args_value(a, flag);
        if (!s) return -1;
        if (!kvt_evict_policy_find(s)) {
            fprintf(stderr, "kvtier %s: --kv-evict: '%s' is not %s\n", a->cmd, s, kvt_evict_policy_names());
            return -1;
        }
        p->kv_evict = s;
        return 1;
    }
    if (!strcmp(flag, "--kv-granularity")) {
        const char *s = kvt_args_value(a, flag);
        if (!s) return -1;
        char *end = NULL;
        long g = -1;
        if (!strcmp(s, "layer")) g = 0;
        else if (!strcmp(s, "head")) g = 1;
        else if (!strncmp(s, "group:", 6)) {
            g = strtol(s + 6, &end, 10);
            if (end == s + 6 || *end || g < 1 || g > 1 << 20) g = -1;
        }
        if (g < 0) {
            fprintf(stderr, "kvtier %s: --kv-granularity: '%s' is not layer, head or group:G\n", a->cmd, s);
            return -1;
        }
        p->kv_group = (int32_t)g;
        p->kv_paged = true;
        return 1;
    }
    if (!strcmp(flag, "--kv-type")) {
        const char *s = kvt_args_value(a, flag);
        if (!s) return -1;
        if (!strcmp(s, "f16")) p->kv_type = KVT_TYPE_F16;
        else if (!strcmp(s, "f32")) p->kv_type = KVT_TYPE_F32;
        else {
            fprintf(stderr, "kvtier %s: --kv-type: '%s' is not f16 or f32\n", a->cmd, s);
            return -1;
        }
        return 1;
    }
    return 0;
}

void cli_json_sparse(kvt_json *j, kvt_context *ctx, bool steps) {
    kvt_sparse *sp = kvt_context_sparse(ctx);
    if (!sp) return;
    const kvt_sparse_params *p = kvt_sparse_get_params(sp);
    kvt_sparse_summary sm;
    kvt_err err = {0};
    if (kvt_sparse_summarize(sp, &sm, &err)) fprintf(stderr, "kvtier: %s\n", err.msg);
    kvt_json_key(j, "sparse");
    kvt_json_obj_begin(j);
    kvt_json_kv_str(j, "mode", kvt_sparse_mode_name(p->mode));
    kvt_json_kv_int(j, "budget", p->budget);
    kvt_json_kv_num(j, "budget_frac", p->budget > 0 ? 0.0 : p->budget_frac);
    kvt_json_kv_int(j, "sink", p->sink);
    kvt_json_kv_int(j, "recent", p->recent);
    kvt_json_kv_int(j, "window", p->window);
    kvt_json_kv_int(j, "dense_layers", p->dense_layers);
    kvt_json_kv_int(j, "page", p->page);
    kvt_json_kv_int(j, "block", p->block);
    kvt_json_kv_int(j, "prefetch_layers", p->prefetch_layers);
    kvt_json_kv_num(j, "rerank", p->rerank);
    kvt_json_kv_int(j, "rerank_block", p->rerank_block);
    kvt_json_kv_bool(j, "block_sum", p->block_sum);
    kvt_json_kv_num(j, "prefetch_top", p->prefetch_top);
    kvt_json_kv_num(j, "keep", p->keep);
    kvt_json_kv_bool(j, "share", p->share);
    kvt_json_kv_bool(j, "share_layers", p->share_layers);
    kvt_json_kv_num(j, "layer_floor", p->layer_floor);
    kvt_json_kv_bool(j, "sync", p->sync);
    kvt_json_kv_str(j, "predictor", kvt_sparse_pred_name(p->predictor));
    kvt_json_kv_num(j, "lambda", p->lambda);
    kvt_json_kv_bool(j, "rope_align", p->rope_align);
    kvt_json_kv_num(j, "fallback", p->fallback);
    kvt_json_kv_int(j, "real_layers", p->real_layers);
    kvt_json_kv_int(j, "key_bits", p->key_bits);
    kvt_json_kv_int(j, "rerank_bits", p->rerank_bits);
    kvt_json_kv_int(j, "rerank_qbits", p->rerank_qbits);
    kvt_json_kv_num(j, "rerank_resid", p->rerank_resid);
    kvt_json_kv_num(j, "rerank_resid_gate", p->rerank_resid_gate);
    kvt_json_kv_int(j, "rerank_resid_cal", p->rerank_resid_cal);
    kvt_json_kv_num(j, "rerank_resid_rows", sm.rerank_resid_rows);
    kvt_json_kv_num(j, "rerank_resid_exact_frac", sm.rerank_resid_exact_frac);
    kvt_json_kv_int(j, "summary_bytes", sm.summary_bytes);
    kvt_json_kv_int(j, "summary_peak_bytes", sm.summary_peak_bytes);
    kvt_json_kv_int(j, "seqs", p->seqs);
    kvt_json_kv_int(j, "n_steps", sm.n_steps);
    kvt_json_kv_num(j, "selected_frac", sm.selected_frac);
    kvt_json_kv_num(j, "kv_read_bytes_per_step", sm.kv_read_bytes);
    kvt_json_kv_num(j, "summary_read_bytes_per_step", sm.summary_read_bytes);
    kvt_json_kv_num(j, "stall_ms_per_step", sm.stall_ms);
    kvt_json_kv_num(j, "wait_ms_per_step", sm.wait_ms);
    kvt_json_kv_num(j, "worker_ms_per_step", sm.worker_ms);
    kvt_json_kv_num(j, "worker_cpu_ms_per_step", sm.worker_cpu_ms);
    kvt_json_kv_num(j, "oracle_overlap", sm.oracle_overlap);
    kvt_json_kv_num(j, "mass_recall", sm.mass_recall);
    kvt_json_kv_num(j, "mass_recall_p5", sm.mass_recall_p5);
    kvt_json_kv_num(j, "query_cos", sm.query_cos);
    kvt_json_kv_num(j, "fallback_frac", sm.fallback_frac);
    if (p->stats) { // per layer, one value per KV head (-1: no stats, e.g. a dense layer)
        const kvt_sparse_dims *d = kvt_sparse_get_dims(sp);
        const char *names[] = {"mass_recall", "oracle_overlap", "query_cos", "fallback_frac"};
        kvt_json_key(j, "layers");
        kvt_json_arr_begin(j);
        for (int32_t l = 0; l < d->n_layer; l++) {
            kvt_json_obj_begin(j);
            for (int f = 0; f < 4; f++) {
                kvt_json_key(j, names[f]);
                kvt_json_arr_begin(j);
                for (int32_t kh = 0; kh < d->n_head_kv; kh++) {
                    kvt_sparse_pair_stat ps;
                    kvt_sparse_pair_stats(sp, l, kh, &ps);
                    const double v[] = {ps.mass_recall, ps.oracle_overlap, ps.query_cos, ps.fallback_frac};
                    kvt_json_num(j, v[f]);
                }
                kvt_json_arr_end(j);
            }
            kvt_json_obj_end(j);
        }
        kvt_json_arr_end(j);
    }
    if (steps) {
        int64_t n = 0;
        const kvt_sparse_step *st = kvt_sparse_steps(sp, 0, &n);
        kvt_json_key(j, "steps");
        kvt_json_arr_begin(j);
        for (int64_t i = 0; i < n; i++) {
            kvt_json_obj_begin(j);
            kvt_json_kv_int(j, "pos", st[i].pos);
            kvt_json_kv_int(j, "selected", st[i].selected);
            kvt_json_kv_int(j, "context", st[i].context);
            kvt_json_kv_int(j, "kv_read_bytes", st[i].kv_read_bytes);
            kvt_json_kv_int(j, "summary_read_bytes", st[i].summary_read_bytes);
            kvt_json_kv_num(j, "oracle_overlap", st[i].oracle_overlap);
            kvt_json_kv_num(j, "mass_recall", st[i].mass_recall);
            kvt_json_kv_num(j, "stall_ms", st[i].stall_ms);
            kvt_json_obj_end(j);
        }
        kvt_json_arr_end(j);
    }
    kvt_json_obj_end(j);
}

char *cli_detokenize(const kvt_tokenizer *tok, const int32_t *ids, int64_t n, int64_t *len) {
    *len = 0;
    int64_t cap = 64 + n * 16;
    for (;;) { // at most twice: kvt_detokenize returns the whole length when cap is too small
        char *t = malloc((size_t)cap + 1);
        if (!t) return NULL;
        int64_t l = kvt_detokenize(tok, ids, n, t, cap);
        if (l < 0) {
            free(t);
            return NULL;
        }
        if (l <= cap) {
            t[l] = 0;
            *len = l;
            return t;
        }
        free(t);
        cap = l;
    }
}

int64_t cli_token_piece(const kvt_tokenizer *tok, int32_t id, char **buf, size_t *cap) {
    for (;;) {
        int64_t n = *buf ? kvt_token_to_piece(tok, id, *buf, (int64_t)*cap) : (int64_t)*cap + 1;
        if (n <= (int64_t)*cap) return n < 0 ? 0 : n;
        char *b = realloc(*buf, (size_t)n > 256 ? (size_t)n : 256);
        if (!b) return -1;
        *buf = b;
        *cap = (size_t)n > 256 ? (size_t)n : 256;
    }
}

int32_t *cli_tokenize(const char *cmd, const kvt_tokenizer *tok, const char *text, size_t len, bool add_special,
                      bool parse_special, int64_t *n) {
    kvt_err err = {0};
    int64_t cap = (int64_t)len + 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "kvtier %s: out of memory\n", cmd);
        return NULL;
    }
    int64_t k = kvt_tokenize(tok, text, len, add_special, parse_special, ids, cap, &err);
    if (k > cap) {
        int32_t *b = realloc(ids, (size_t)k * sizeof *ids);
        if (!b) {
            free(ids);
            fprintf(stderr, "kvtier %s: out of memory\n", cmd);
            return NULL;
        }
        ids = b;
        k = kvt_tokenize(tok, text, len, add_special, parse_special, ids, k, &err);
    }
    if (k < 0) {
        fprintf(stderr, "kvtier %s: %s\n", cmd, err.msg);
        free(ids);
        return NULL;
    }
    *n = k;
    return ids;
}

int64_t cli_json_moved(kvt_json *j, const char *prefix, const kvt_kv_stats *from, const kvt_kv_stats *to) {
    int64_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        char name[64];
        snprintf(name, sizeof name, "%s%s", prefix, pass ? "transfers" : "moved_bytes");
        kvt_json_key(j, name);
        kvt_json_obj_begin(j);
        for (int a = 0; a < KVT_TIER_COUNT; a++) {
            for (int b = 0; b < KVT_TIER_COUNT; b++) {
                const int64_t n = to->moved_count[a][b] - (from ? from->moved_count[a][b] : 0);
                if (!n) continue;
                char key[32];
                snprintf(key, sizeof key, "%s_to_%s", kvt_tier_name((kvt_tier)a), kvt_tier_name((kvt_tier)b));
                kvt_json_kv_int(j, key, pass ? n : to->moved_bytes[a][b] - (from ? from->moved_bytes[a][b] : 0));
                if (pass) total += n;
            }
        }
        kvt_json_obj_end(j);
    }
    return total;
}

void cli_json_kv_stats(kvt_json *j, kvt_context *ctx) {
    kvt_kv_stats st;
    kvt_context_kv_stats(ctx, &st);
    kvt_json_key(j, "kv");
    kvt_json_obj_begin(j);
    kvt_json_kv_str(j, "store", kvt_context_kv(ctx)->ops->name);
    const char *eng = kvt_kv_paged_disk_engine(kvt_context_kv(ctx));
    if (eng) kvt_json_kv_str(j, "disk_io", eng); // "io_uring" or "threads"
    kvt_json_key(j, "peak_bytes");
    kvt_json_obj_begin(j);
    for (int t = 0; t < KVT_TIER_COUNT; t++) kvt_json_kv_int(j, kvt_tier_name((kvt_tier)t), st.peak_bytes[t]);
    kvt_json_obj_end(j);
    kvt_json_key(j, "budget_bytes");
    kvt_json_obj_begin(j);
    for (int t = 0; t < KVT_TIER_COUNT; t++) kvt_json_kv_int(j, kvt_tier_name((kvt_tier)t), st.budget_bytes[t]);
    kvt_json_obj_end(j);
    const int64_t transfers = cli_json_moved(j, "", NULL, &st);
    kvt_json_kv_int(j, "transfers_total", transfers);
    kvt_json_kv_num(j, "stall_ms", st.stall_ms);
    kvt_json_kv_num(j, "copy_cpu_ms", st.copy_cpu_ms);
    kvt_json_kv_int(j, "hits", st.hits);
    kvt_json_kv_int(j, "misses", st.misses);
    kvt_json_kv_int(j, "prefetches", st.prefetches);
    // the disk batches (kv_paged_io.c): loads read in batches, and victims without a disk copy written together
    // (their bytes are in moved_bytes fast_to_disk)
    kvt_json_kv_int(j, "io_batches", st.io_batches);
    kvt_json_kv_int(j, "io_batch_blocks", st.io_batch_blocks);
    kvt_json_kv_int(j, "io_clean_batches", st.io_clean_batches);
    kvt_json_kv_int(j, "io_clean_blocks", st.io_clean_blocks);
    if (eng) kvt_json_kv_int(j, "io_ring_cancels", st.io_ring_cancels); // disk requests redone after the ring's stall time
    kvt_json_kv_int(j, "block_bytes", st.block_bytes);
    kvt_json_obj_end(j);
    kvt_gpu_layers_stats gs;
    if (kvt_context_gpu_stats(ctx, &gs)) { // the device layers: what they hold in VRAM and what crossed PCIe
        kvt_json_key(j, "gpu");
        kvt_json_obj_begin(j);
        kvt_json_kv_int(j, "layers", gs.layers);
        kvt_json_kv_bool(j, "output", gs.output);
        kvt_json_kv_int(j, "weight_bytes", gs.weight_bytes);
        kvt_json_kv_int(j, "kv_bytes", gs.kv_bytes);
        kvt_json_key(j, "moved_bytes");
        kvt_json_obj_begin(j);
        kvt_json_kv_int(j, "host_to_device", gs.h2d_bytes);
        kvt_json_kv_int(j, "device_to_host", gs.d2h_bytes);
        kvt_json_kv_int(j, "device_to_device", gs.d2d_bytes);
        kvt_json_obj_end(j);
        kvt_json_kv_int(j, "calls", gs.calls);
        kvt_json_kv_int(j, "argmax_calls", gs.argmax_calls); // greedy ids taken on the device (only the ids came back)
        kvt_json_kv_int(j, "graph_steps", gs.graph_steps);     // micro-batches run as one CUDA graph (--cuda-graphs)
        kvt_json_kv_int(j, "graph_updates", gs.graph_updates); // of those, graphs updated in place (not instantiated)
        // host wall time in the device layers' calls: of it in the device KV's calls, and waiting for the device
        kvt_json_key(j, "time_ms");
        kvt_json_obj_begin(j);
        kvt_json_kv_num(j, "run", gs.run_ms);
        kvt_json_kv_num(j, "kv", gs.kv_ms);
        kvt_json_kv_num(j, "sync", gs.sync_ms);
        kvt_json_obj_end(j);
        const kvt_gpu_kv_stats *k = &gs.kv; // the KV tiers: VRAM over pinned host memory
        kvt_json_key(j, "kv");
        kvt_json_obj_begin(j);
        kvt_json_kv_int(j, "vram_budget_bytes", k->vram_cap_bytes);
        kvt_json_kv_int(j, "vram_bytes", k->vram_bytes);
        kvt_json_kv_int(j, "pinned_bytes", k->pinned_bytes);
        kvt_json_kv_int(j, "blocks_vram", k->blocks_vram);
        kvt_json_kv_int(j, "blocks_host", k->blocks_host);
        kvt_json_kv_int(j, "host_to_device_bytes", k->h2d_bytes);
        kvt_json_kv_int(j, "device_to_host_bytes", k->d2h_bytes);
        kvt_json_kv_int(j, "device_to_device_bytes", k->d2d_bytes);
        kvt_json_kv_int(j, "host_to_host_bytes", k->h2h_bytes);
        kvt_json_kv_int(j, "table_bytes", k->table_bytes);
        kvt_json_kv_int(j, "zero_copy_read_bytes", k->zero_copy_bytes);
        kvt_json_kv_int(j, "vram_read_bytes", k->vram_read_bytes);
        kvt_json_kv_int(j, "loads", k->loads);
        kvt_json_kv_int(j, "loads_ahead", k->loads_ahead);
        kvt_json_kv_int(j, "loads_first", k->loads_first);
        kvt_json_kv_int(j, "writebacks", k->writebacks);
        kvt_json_kv_int(j, "evictions", k->evictions);
        kvt_json_kv_int(j, "transfers", k->transfers);
        kvt_json_kv_int(j, "fork_copied_blocks", k->fork_blocks);       // blocks forks copied (partly filled last ones)
        kvt_json_kv_int(j, "fork_shared_blocks", k->fork_shared_blocks); // full blocks forks shared (a reference)
        kvt_json_kv_int(j, "cow_blocks", k->cow_blocks);                 // shared blocks copied before a write
        kvt_json_kv_int(j, "window_freed_blocks", k->window_freed);     // blocks a sliding window left (freed)
        kvt_json_kv_int(j, "pinned_budget_bytes", k->pinned_cap_bytes); // T2: disk below pinned host
        kvt_json_kv_int(j, "pinned_over_bytes", k->pinned_over_bytes);
        kvt_json_kv_int(j, "pinned_staging_bytes", k->pinned_staging_bytes); // the disk thread's, past the budget
        kvt_json_kv_int(j, "blocks_disk", k->blocks_disk);
        kvt_json_kv_int(j, "disk_bytes", k->disk_bytes);
        kvt_json_kv_int(j, "host_to_disk_bytes", k->disk_write_bytes);
        kvt_json_kv_int(j, "disk_to_host_bytes", k->disk_read_bytes);
        kvt_json_kv_int(j, "disk_writes", k->disk_writes);
        kvt_json_kv_int(j, "disk_reads", k->disk_reads);
        kvt_json_kv_int(j, "host_evictions", k->host_evictions);
        kvt_json_kv_int(j, "syncs", k->syncs);
        kvt_json_kv_int(j, "disk_thread_bytes", k->disk_async_bytes); // T2 I/O on the disk thread (overlapping kernels)
        kvt_json_kv_int(j, "disk_stalls", k->disk_stalls);
        kvt_json_kv_int(j, "disk_reclaims", k->disk_reclaims);
        kvt_json_kv_int(j, "batches", k->batches); // copy_batch kernels (in transfers) and the block copies in them
        kvt_json_kv_int(j, "batched_copies", k->batched_copies);
        kvt_json_obj_end(j);
        kvt_json_obj_end(j);
    }
}

// Processes the escapes of llama.cpp's common string_process_escapes in place: \n \r \t \' \" \\ and \xHH (two
// characters strtol reads whole as hex); any other backslash pair, and a backslash that ends the text, stay as
// they are. Returns the new length.
size_t cli_process_escapes(char *s, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '\\' || i + 1 >= len) {
            s[o++] = s[i];
            continue;
        }
        const char c = s[++i];
        switch (c) {
        case 'n': s[o++] = '\n'; continue;
        case 'r': s[o++] = '\r'; continue;
        case 't': s[o++] = '\t'; continue;
        case '\'':
        case '"':
        case '\\': s[o++] = c; continue;
        case 'x':
            if (i + 2 < len) {
                const char hex[3] = {s[i + 1], s[i + 2], 0};
                char *end = NULL;
                const long v = strtol(hex, &end, 16);
                if (end == hex + 2) {
                    i += 2;
                    s[o++] = (char)v;
                    continue;
                }
            }
            break;
        default: break;
        }
        s[o++] = '\\';
        s[o++] = c;
    }
    return o;
}

int cli_input_flag(kvt_args *a, const char *flag, cli_input *in, kvt_context_params *p) {
    int e = cli_engine_flag(a, flag, p);
    if (e != 0) {
        if (e > 0) in->ctx_given |= !strcmp(flag, "-c") || !strcmp(flag, "--ctx-size");
        return e;
    }
    const char **dst = NULL;
    if (!strcmp(flag, "-m") || !strcmp(flag, "--model")) dst = &in->model_path;
    else if (!strcmp(flag, "-p") || !strcmp(flag, "--prompt")) dst = &in->prompt;
    else if (!strcmp(flag, "-f") || !strcmp(flag, "--file")) dst = &in->prompt_file;
    else if (!strcmp(flag, "--no-progress")) {
        in->no_progress = true;
        return 1;
    } else if (!strcmp(flag, "-e") || !strcmp(flag, "--escape") || !strcmp(flag, "--no-escape")) {
        in->no_escape = !strcmp(flag, "--no-escape"); // the last one given wins
        return 1;
    } else return 0;
    if (!(*dst = kvt_args_value(a, flag))) return -1;
    if (in->prompt && in->prompt_file) {
        fprintf(stderr, "kvtier %s: give the prompt with -p PROMPT or -f FILE, not both\n", a->cmd);
        return -1;
    }
    return 1;
}

bool cli_input_prompt(const char *cmd, const cli_input *in, const char **text, size_t *len, char **owned) {
    *owned = NULL;
    if (!in->prompt && !in->prompt_file) {
        fprintf(stderr, "kvtier %s: a prompt is required (-p PROMPT or -f FILE)\n", cmd);
        return false;
    }
    if (in->prompt_file) {
        if (!(*owned = kvt_read_file(cmd, in->prompt_file, len))) return false;
        *text = *owned;
        return true;
    }
    *text = in->prompt;
    *len = strlen(in->prompt);
    if (!in->no_escape && strchr(in->prompt, '\\')) { // llama.cpp's default -e: escapes in -p processed
        if (!(*owned = strdup(in->prompt))) {
            fprintf(stderr, "kvtier %s: out of memory for the prompt\n", cmd);
            return false;
        }
        *len = cli_process_escapes(*owned, *len);
        (*owned)[*len] = 0;
        *text = *owned;
    }
    return true;
}

bool cli_check_out_path(const char *cmd, const char *flag, const char *path) {
    if (!path[0]) {
        fprintf(stderr, "kvtier %s: %s: the path is empty\n", cmd, flag);
        return false;
    }
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "kvtier %s: %s: %s is a directory; give a file name\n", cmd, flag, path);
        return false;
    }
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) {
        snprintf(dir, sizeof dir, ".");
    } else if (slash == path) {
        snprintf(dir, sizeof dir, "/");
    } else if ((size_t)(slash - path) < sizeof dir) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = 0;
    } else {
        fprintf(stderr, "kvtier %s: %s: the path is too long\n", cmd, flag);
        return false;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) != 0) {
        const char *why = stat(dir, &st) != 0 ? strerror(errno) : !S_ISDIR(st.st_mode) ? "not a directory" : strerror(errno);
        fprintf(stderr, "kvtier %s: %s: cannot create %s: its folder %s: %s\n", cmd, flag, path, dir, why);
        return false;
    }
    return true;
}

// "TOKEN_ID(+/-)BIAS" (llama.cpp's --logit-bias: 15043+1, 15043-inf) into *b; false with a message.
static bool parse_logit_bias(const char *flag, const char *v, kvt_logit_bias *b) {
    char *end;
    errno = 0;
    long id = strtol(v, &end, 10);
    const char sign = *end;
    if (end == v || errno || id < 0 || id > INT32_MAX || (sign != '+' && sign != '-')) {
        fprintf(stderr, "kvtier: %s %s: want TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1, 15043-inf)\n", flag, v);
        return false;
    }
    const char *num = end + 1;
    float x = strtof(num, &end);
    if (end == num || *end || isnan(x) || *num == '+' || *num == '-') {
        fprintf(stderr, "kvtier: %s %s: the bias after '%c' is not a number (inf bans or forces the token)\n", flag, v,
                sign);
        return false;
    }
    *b = (kvt_logit_bias){(int32_t)id, sign == '-' ? -x : x};
    return true;
}

bool cli_check_logit_bias(const char *cmd, const cli_sampling_args *lb, int32_t n_vocab) {
    for (int32_t i = 0; i < lb->n; i++) {
        if (lb->v[i].token >= n_vocab) {
            fprintf(stderr, "kvtier %s: --logit-bias: token %d is outside the model's vocabulary (0..%d)\n", cmd,
                    (int)lb->v[i].token, (int)n_vocab - 1);
            return false;
        }
    }
    return true;
}

bool cli_ban_eog(const char *cmd, const kvt_tokenizer *tok, kvt_generate_params *gp, kvt_logit_bias **owned) {
    *owned = NULL;
    if (gp->stop_at_eog) return true;
    int32_t n = 0;
    kvt_err err = {0};
    if (kvt_logit_bias_ban_eog(tok, gp->sampling.logit_bias, gp->sampling.n_logit_bias, owned, &n, &err)) {
        fprintf(stderr, "kvtier %s: --ignore-eos: %s\n", cmd, err.msg);
        return false;
    }
    gp->sampling.logit_bias = *owned;
    gp->sampling.n_logit_bias = n;
    return true;
}

// The sampling flags that take a number into a float of kvt_sampler_params: names (llama.cpp's, an alias), range.
static const struct {
    const char *name, *alias;
    double lo, hi;
    size_t off;
} k_float_flags[] = {
    {"--temp", NULL, 0, 100, offsetof(kvt_sampler_params, temp)},
    {"--top-p", NULL, 0, 1, offsetof(kvt_sampler_params, top_p)},
    {"--min-p", NULL, 0, 1, offsetof(kvt_sampler_params, min_p)},
    {"--top-nsigma", "--top-n-sigma", -1, 1e30, offsetof(kvt_sampler_params, top_n_sigma)},
    {"--typical", "--typical-p", 0, 1, offsetof(kvt_sampler_params, typical_p)},
    {"--xtc-probability", NULL, 0, 1, offsetof(kvt_sampler_params, xtc_probability)},
    {"--xtc-threshold", NULL, 0, 1, offsetof(kvt_sampler_params, xtc_threshold)},
    {"--dynatemp-range", NULL, 0, 100, offsetof(kvt_sampler_params, dynatemp_range)},
    {"--dynatemp-exp", NULL, 0, 100, offsetof(kvt_sampler_params, dynatemp_exponent)},
    {"--repeat-penalty", NULL, 0.01, 100, offsetof(kvt_sampler_params, repeat_penalty)},
    {"--frequency-penalty", NULL, -100, 100, offsetof(kvt_sampler_params, frequency_penalty)},
    {"--presence-penalty", NULL, -100, 100, offsetof(kvt_sampler_params, presence_penalty)},
    {"--mirostat-ent", NULL, 0, 100, offsetof(kvt_sampler_params, mirostat_tau)},
    {"--mirostat-lr", NULL, 0, 100, offsetof(kvt_sampler_params, mirostat_eta)},
    {"--dry-multiplier", NULL, -1e6, 1e6, offsetof(kvt_sampler_params, dry.multiplier)},
    {"--dry-base", NULL, 1, 1e6, offsetof(kvt_sampler_params, dry.base)},
    {"--adaptive-target", NULL, -1e6, 1, offsetof(kvt_sampler_params, adaptive_target)},
    {"--adaptive-decay", NULL, 0, 0.99, offsetof(kvt_sampler_params, adaptive_decay)},
};

void cli_sampling_args_free(cli_sampling_args *sa) {
    free(sa->dry);
    sa->dry = NULL;
    sa->n_dry = 0;
    kvt_dry_breakers_free(sa->dry_table);
    sa->dry_table = NULL;
    kvt_grammar_free(sa->gram);
    sa->gram = NULL;
    kvt_grammar_vocab_free(sa->gvocab);
    sa->gvocab = NULL;
}

// The grammar's text from sa's flags into *text (malloc'd; NULL when no flag was given) and the flag it came from.
static bool grammar_text(const char *cmd, const cli_sampling_args *sa, char **text, const char **flag) {
    *text = NULL;
    kvt_err err = {0};
    size_t len = 0;
    char *src = NULL;
    *flag = sa->grammar ? "--grammar" : sa->grammar_file ? "--grammar-file" : sa->schema ? "--json-schema"
                                                                            : "--json-schema-file";
    if (sa->grammar || sa->schema) {
        src = strdup(sa->grammar ? sa->grammar : sa->schema);
        if (!src) kvt_errorf(&err, KVT_ERR_NOMEM, "out of memory");
    } else if (sa->grammar_file || sa->schema_file) {
        kvt_read_text(sa->grammar_file ? sa->grammar_file : sa->schema_file, &src, &len, &err);
        if (src && strlen(src) != len) {
            free(src);
            src = NULL;
            kvt_errorf(&err, KVT_ERR_INVALID_ARG, "%s holds a NUL byte", sa->grammar_file ? sa->grammar_file
                                                                                      : sa->schema_file);
        }
    } else {
        return true;
    }
    if (!src) {
        fprintf(stderr, "kvtier %s: %s: %s\n", cmd, *flag, err.msg);
        return false;
    }
    if (sa->grammar || sa->grammar_file) {
        *text = src;
        return true;
    }
#ifdef KVT_HAVE_JANSSON
    json_error_t je;
    json_t *schema = json_loads(src, JSON_DECODE_ANY, &je);
    free(src);
    if (!schema || !(json_is_object(schema) || json_is_true(schema))) {
        if (schema) fprintf(stderr, "kvtier %s: %s: a JSON schema is an object\n", cmd, *flag);
        else fprintf(stderr, "kvtier %s: %s: malformed JSON at line %d, column %d: %s\n", cmd, *flag, je.line,
                     je.column, je.text);
        json_decref(schema);
        return false;
    }
    if (json_is_object(schema) && json_object_size(schema) == 0) // {}: any object, as llama.cpp's
        json_object_set_new(schema, "type", json_string("object"));
    kvt_status st = kvt_json_schema_to_grammar(schema, *flag, text, &err);
    json_decref(schema);
    if (st) {
        fprintf(stderr, "kvtier %s: %s\n", cmd, err.msg);
        return false;
    }
    return true;
#else
    free(src);
    fprintf(stderr, "kvtier %s: %s: this kvtier was built without libjansson, which reads JSON schemas; install it "
                    "(apt-get install libjansson-dev) and rebuild (make), or give a GBNF grammar (--grammar)\n", cmd,
            *flag);
    return false;
#endif
}

bool cli_grammar_build(const char *cmd, const kvt_tokenizer *tok, kvt_generate_params *gp, cli_sampling_args *sa) {
    char *text;
    const char *flag;
    if (!grammar_text(cmd, sa, &text, &flag)) return false;
    if (!text) return true;
    kvt_err err = {0};
    kvt_status st = kvt_grammar_parse_tok(text, strlen(text), tok, &sa->gram, &err);
    free(text);
    if (!st) st = kvt_grammar_vocab_from_tokenizer(tok, &sa->gvocab, &err);
    if (st) {
        fprintf(stderr, "kvtier %s: %s: %s\n", cmd, flag, err.msg);
        return false;
    }
    gp->sampling.grammar = sa->gram;
    gp->sampling.grammar_vocab = sa->gvocab;
    return true;
}

bool cli_dry_build(const char *cmd, const kvt_tokenizer *tok, int64_t n_ctx, bool no_escape, kvt_generate_params *gp,
                   cli_sampling_args *sa) {
    kvt_sampler_params *sp = &gp->sampling;
    if (n_ctx > 0 && sp->dry.last_n > n_ctx) sp->dry.last_n = (int32_t)n_ctx; // the window never holds more
    if (!kvt_dry_params_on(&sp->dry) || sp->mirostat) return true;
    static const char *const dflt[] = {"\n", ":", "\"", "*"};
    const int32_t n = sa->dry_given ? sa->n_dry : 4;
    char **strs = calloc((size_t)n + 1, sizeof *strs);
    size_t *lens = calloc((size_t)n + 1, sizeof *lens);
    bool ok = strs && lens;
    for (int32_t i = 0; ok && i < n; i++) {
        ok = (strs[i] = strdup(sa->dry_given ? sa->dry[i] : dflt[i])) != NULL;
        if (ok) lens[i] = sa->dry_given && !no_escape ? cli_process_escapes(strs[i], strlen(strs[i])) : strlen(strs[i]);
    }
    kvt_err err = {0};
    kvt_status st = ok ? kvt_dry_breakers_init(tok, (const char *const *)strs, lens, n, &sa->dry_table, &err)
                       : kvt_errorf(&err, KVT_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; strs && i < n; i++) free(strs[i]);
    free(strs);
    free(lens);
    if (st) {
        fprintf(stderr, "kvtier %s: --dry-sequence-breaker: %s\n", cmd, err.msg);
        return false;
    }
    sp->dry_breakers = sa->dry_table;
    return true;
}

int cli_sampling_flag(kvt_args *a, const char *flag, kvt_generate_params *gp, cli_sampling_args *lb) {
    kvt_sampler_params *sp = &gp->sampling;
    int64_t iv;
    double fv;
    for (size_t i = 0; i < sizeof k_float_flags / sizeof k_float_flags[0]; i++) {
        if (strcmp(flag, k_float_flags[i].name) && (!k_float_flags[i].alias || strcmp(flag, k_float_flags[i].alias)))
            continue;
        if (!kvt_args_float(a, flag, k_float_flags[i].lo, k_float_flags[i].hi, &fv)) return -1;
        *(float *)((char *)sp + k_float_flags[i].off) = (float)fv;
        return 1;
    }
    if (!strcmp(flag, "--seed") || !strcmp(flag, "-s")) {
        if (!kvt_args_int(a, flag, 0, INT64_MAX, &iv)) return -1;
        sp->seed = (uint64_t)iv;
    } else if (!strcmp(flag, "--mirostat")) {
        if (!kvt_args_int(a, flag, 0, 2, &iv)) return -1;
        sp->mirostat = (int32_t)iv;
    } else if (!strcmp(flag, "--top-k")) {
        if (!kvt_args_int(a, flag, 0, 1 << 30, &iv)) return -1;
        sp->top_k = (int32_t)iv;
    } else if (!strcmp(flag, "--min-keep")) {
        if (!kvt_args_int(a, flag, 0, INT32_MAX, &iv)) return -1;
        sp->min_keep = (int32_t)iv;
    } else if (!strcmp(flag, "--repeat-last-n")) {
        if (!kvt_args_int(a, flag, 0, 1 << 20, &iv)) return -1;
        sp->penalty_last_n = (int32_t)iv;
    } else if (!strcmp(flag, "--dry-allowed-length") || !strcmp(flag, "--dry-penalty-last-n")) {
        if (!kvt_args_int(a, flag, 0, INT32_MAX, &iv)) return -1;
        if (!strcmp(flag, "--dry-allowed-length")) sp->dry.allowed_length = (int32_t)iv;
        else sp->dry.last_n = (int32_t)iv;
    } else if (!strcmp(flag, "--dry-sequence-breaker")) { // the first replaces llama.cpp's default set; "none" empties
        const char *v = kvt_args_value(a, flag);
        if (!v) return -1;
        if (!lb->dry_given) lb->n_dry = 0;
        lb->dry_given = true;
        if (!strcmp(v, "none")) {
            lb->n_dry = 0;
            return 1;
        }
        const char **d = realloc(lb->dry, ((size_t)lb->n_dry + 1) * sizeof *d);
        if (!d) {
            fprintf(stderr, "kvtier: %s: out of memory\n", flag);
            return -1;
        }
        lb->dry = d;
        lb->dry[lb->n_dry++] = v;
    } else if (!strcmp(flag, "--grammar") || !strcmp(flag, "--grammar-file") || !strcmp(flag, "-j") ||
               !strcmp(flag, "--json-schema") || !strcmp(flag, "-jf") || !strcmp(flag, "--json-schema-file")) {
        const char *v = kvt_args_value(a, flag);
        if (!v) return -1;
        lb->grammar = lb->grammar_file = lb->schema = lb->schema_file = NULL; // the last one wins
        if (!strcmp(flag, "--grammar")) lb->grammar = v;
        else if (!strcmp(flag, "--grammar-file")) lb->grammar_file = v;
        else if (!strcmp(flag, "-j") || !strcmp(flag, "--json-schema")) lb->schema = v;
        else lb->schema_file = v;
    } else if (!strcmp(flag, "--ignore-eos")) {
        gp->stop_at_eog = false;
    } else if (!strcmp(flag, "-l") || !strcmp(flag, "--logit-bias")) {
        const char *v = kvt_args_value(a, flag);
        if (!v) return -1;
        if (lb->n == CLI_MAX_LOGIT_BIAS) {
            fprintf(stderr, "kvtier: %s: at most %d logit biases\n", flag, CLI_MAX_LOGIT_BIAS);
            return -1;
        }
        if (!parse_logit_bias(flag, v, &lb->v[lb->n])) return -1;
        lb->n++;
        sp->logit_bias = lb->v;
        sp->n_logit_bias = lb->n;
    } else {
        return 0;
    }
    return 1;
}

bool cli_chat_template(const char *cmd, const char *model_path, const char *name, bool note_fallback, kvt_gguf **g,
                       kvt_chat_template **t) {
    kvt_gguf *f = NULL;
    kvt_err err = {0};
    bool fallback = false;
    *t = NULL;
    if (g) *g = NULL;
    if (kvt_gguf_open(model_path, &f, &err) || kvt_chat_template_from_gguf(f, name, t, &fallback, &err)) {
        fprintf(stderr, "kvtier %s: %s\n", cmd, err.msg);
        kvt_gguf_free(f);
        return false;
    }
    if (fallback && note_fallback) {
        fprintf(stderr, "kvtier %s: %s has no tokenizer.chat_template: chat prompts use chatml (--chat-template NAME "
                        "picks another)\n", cmd, model_path);
    }
    if (g) *g = f;
    else kvt_gguf_free(f);
    return true;
}
