// cmd_plan.c - `kvtier plan`: where layers run, how the KV cache is split over
// the tiers, and the predicted per-token latency; `--validate` runs the model
// here and compares the prediction with the measurement (helm.txt §6.4.4).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/timer.h"
#include "../exec/backend_cuda.h"
#include "../plan/plan.h"
#include "commands.h"
#include "common.h"

static double median(double *v, int n) {
    kvt_sort_f64(v, n);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct {
    int64_t prompt, n_gen;
    int reps, threads;
    bool calibrate;
    const char *profile_path;
    bool gpu;            // the plan's CPU/GPU split on the CUDA device (the profile's GPU), not this CPU alone
    int64_t vram;        // --vram for that plan (0: the profile's)
} validate_opts;

// --validate --gpu: the plan for the profile (with its GPU) at the validation's context, and its split as context
// parameters (as --plan FILE applies it). *dev: the device's name, "" when none can be used (*why says why).
static void gpu_split(const kvt_costs *costs, const kvt_profile *prof, const validate_opts *o, int32_t n_layer, kvt_plan *pl,
                      kvt_context_params *cp, char *dev, size_t n_dev, char *why, size_t n_why) {
    kvt_plan_req req = kvt_plan_req_default();
    req.ctx = o->prompt + o->n_gen / 2;
    req.prompt = o->prompt;
    req.vram_bytes = o->vram > 0 ? o->vram : -1;
    kvt_plan_search(costs, prof, &req, pl, NULL);
    if (pl->gpu_units > 0) {
        cp->n_gpu_layers = pl->gpu_units - 1 < n_layer ? pl->gpu_units - 1 : n_layer;
        cp->gpu_output = true;
    }
    cp->kv_paged = true;
    dev[0] = why[0] = 0;
    kvt_cuda_backend be;
    kvt_err e = {0};
    kvt_cuda_device_info info;
    char msg[256] = "";
    if (kvt_cuda_backend_open(&be, &e)) snprintf(why, n_why, "%s", e.msg);
    else if (be.api->device_info(0, &info, msg, (int)sizeof msg)) snprintf(why, n_why, "device 0: %s", msg);
    else snprintf(dev, n_dev, "%s", info.name);
    kvt_cuda_backend_close(&be);
}

// The GPU path's report: the plan's predictions (with the profile's GPU) beside the measured medians.
static void gpu_report(const char *model_path, const kvt_plan *pl, const kvt_context_params *cp, const char *dev,
                       const validate_opts *o, double meas_pre, double meas_dec, bool json) {
    const bool emulated = strstr(dev, "emulation") != NULL; // tests/cuda/cuda_fake.c: not a GPU measurement
    const double e_dec = (pl->predicted_ms_per_token - meas_dec) / meas_dec * 100;
    const double e_pre = (pl->prefill_ms_per_token - meas_pre) / meas_pre * 100;
    if (json) {
        printf("{\"model\":\"%s\",\"path\":\"gpu\",\"device\":\"%s\",\"emulated\":%s,\"n_units\":%d,\"cpu_units\":%d,"
               "\"gpu_units\":%d,\"n_gpu_layers\":%d,\"gpu_output\":%s,\"prompt\":%lld,\"n_gen\":%lld,\"reps\":%d,"
               "\"decode_roofline_ms\":%.4f,\"decode_pred_ms\":%.4f,\"decode_meas_ms\":%.4f,\"decode_err_pct\":%.2f,"
               "\"prefill_pred_ms\":%.4f,\"prefill_meas_ms\":%.4f,\"prefill_err_pct\":%.2f}\n",
               model_path, dev, emulated ? "true" : "false", pl->n_units, pl->cpu_units, pl->gpu_units, cp->n_gpu_layers,
               cp->gpu_output ? "true" : "false", (long long)o->prompt, (long long)o->n_gen, o->reps, pl->roofline_ms_per_token,
               pl->predicted_ms_per_token, meas_dec, e_dec, pl->prefill_ms_per_token, meas_pre, e_pre);
        return;
    }
    printf("validate  %s on GPU %s: the plan's split, %d CPU units + %d GPU units (-ngl %d%s), prompt %lld, %lld decoded "
           "tokens, median of %d\n", model_path, dev, pl->cpu_units, pl->gpu_units, cp->n_gpu_layers,
           cp->gpu_output ? " and the output" : "", (long long)o->prompt, (long long)o->n_gen, o->reps);
    if (emulated) printf("          EMULATION: the CUDA table runs on the CPU (tests); these figures are not GPU measurements\n");
    printf("%-9s %12s %12s %12s %8s\n", "ms/token", "roofline", "predicted", "measured", "error");
    printf("%-9s %12.3f %12.3f %12.3f %+7.1f%%\n", "decode", pl->roofline_ms_per_token, pl->predicted_ms_per_token, meas_dec, e_dec);
    printf("%-9s %12s %12.4f %12.4f %+7.1f%%\n", "prefill", "-", pl->prefill_ms_per_token, meas_pre, e_pre);
    printf("verdict   decode %s 15%%, prefill %s 15%%%s\n", e_dec < 15 && e_dec > -15 ? "within" : "NOT within",
           e_pre < 15 && e_pre > -15 ? "within" : "NOT within", emulated ? " (emulation: meaningless)" : "");
}

// Runs the model: prefill of `prompt` tokens, then n_gen single-token decodes; medians over reps.
static int validate(const char *model_path, kvt_profile *prof, const validate_opts *o, bool json) {
    kvt_model *m;
    if (!cli_load_model("plan", model_path, false, &m, NULL)) return 1;
    kvt_err err = {0};
    kvt_costs costs;
    if (kvt_costs_from_gguf(m->gguf, &costs, &err)) {
        fprintf(stderr, "kvtier plan: %s\n", err.msg);
        kvt_model_free(m);
        return 1;
    }
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = o->prompt + o->n_gen + 8;
    cp.n_threads = o->threads;
    kvt_plan gpl;
    char dev[96], why[600];
    if (o->gpu) {
        gpu_split(&costs, prof, o, m->hp.n_layer, &gpl, &cp, dev, sizeof dev, why, sizeof why);
        if (!dev[0]) { // no device here: said, not measured (exit 0: a skip, as the GPU suites skip)
            if (json) printf("{\"model\":\"%s\",\"path\":\"gpu\",\"skipped\":\"no CUDA device: %s\"}\n", model_path, why);
            else printf("validate  %s on the GPU: skipped, no CUDA device: %s\n", model_path, why);
            kvt_costs_free(&costs);
            kvt_model_free(m);
            return 0;
        }
    }
    kvt_context *ctx;
    if (kvt_context_init(m, &cp, &ctx, &err)) {
        fprintf(stderr, "kvtier plan: %s\n", err.msg);
        kvt_costs_free(&costs);
        kvt_model_free(m);
        return 1;
    }
    int64_t n_tok = o->prompt + o->n_gen;
    int32_t *toks = malloc((size_t)n_tok * sizeof(int32_t));
    double *pre = malloc((size_t)o->reps * sizeof(double)), *dec = malloc((size_t)o->reps * sizeof(double));
    int rc = 0;
    for (int64_t i = 0; i < n_tok; i++) toks[i] = (int32_t)((i * 2654435761u + 17) % (uint32_t)m->hp.n_vocab);
    for (int r = -1; r < o->reps && !rc; r++) { // r = -1: warm-up
        kvt_context_truncate(ctx, 0);
        double t0 = kvt_time_ms();
        if (kvt_decode(ctx, toks, o->prompt, false, &err)) rc = 1;
        double t1 = kvt_time_ms();
        for (int64_t i = 0; i < o->n_gen && !rc; i++) {
            if (kvt_decode(ctx, &toks[o->prompt + i], 1, false, &err)) rc = 1;
        }
        double t2 = kvt_time_ms();
        if (r >= 0) {
            pre[r] = (t1 - t0) / (double)o->prompt;
            dec[r] = (t2 - t1) / (double)o->n_gen;
        }
    }
    if (rc) {
        fprintf(stderr, "kvtier plan: %s\n", err.msg);
    } else if (o->gpu) {
        gpu_report(model_path, &gpl, &cp, dev, o, median(pre, o->reps), median(dec, o->reps), json);
    } else {
        const double meas_pre = median(pre, o->reps), meas_dec = median(dec, o->reps);
        kvt_plan_req req = kvt_plan_req_default();
        req.ctx = o->prompt + o->n_gen / 2; // mean context over the decoded tokens
        req.prompt = o->prompt;
        kvt_profile cpu_only = *prof; // this machine runs on its CPU only
        cpu_only.has_gpu = false;
        const double delta_used = cpu_only.cpu_block_overhead_ms, dpre_used = cpu_only.cpu_prefill_overhead_ms;
        cpu_only.cpu_block_overhead_ms = cpu_only.cpu_prefill_overhead_ms = 0;
        kvt_plan pl;
        kvt_plan_search(&costs, &cpu_only, &req, &pl, NULL);
        const int N = costs.n_units;
        const double t_pred = pl.roofline_ms_per_token, t_hat = t_pred + N * delta_used;
        // prefill: delta once per forward call (spread over the prompt), delta_pre per unit per prompt token
        const double pre_pred = pl.prefill_ms_per_token, pre_base = pre_pred + N * delta_used / (double)o->prompt;
        const double pre_hat = pre_base + N * dpre_used;
        const double delta_fit = (meas_dec - t_pred) / N, dpre_fit = (meas_pre - pre_base) / N;
        const double e_dec = (t_hat - meas_dec) / meas_dec * 100, e_pre = (pre_hat - meas_pre) / meas_pre * 100;
        if (json) {
            printf("{\"model\":\"%s\",\"n_units\":%d,\"threads\":%d,\"prompt\":%lld,\"n_gen\":%lld,\"reps\":%d,"
                   "\"delta_ms\":%.5f,\"delta_fit_ms\":%.5f,\"delta_prefill_ms\":%.6f,\"delta_prefill_fit_ms\":%.6f,"
                   "\"decode_pred_ms\":%.4f,\"decode_hat_ms\":%.4f,\"decode_meas_ms\":%.4f,\"decode_err_pct\":%.2f,"
                   "\"prefill_pred_ms\":%.4f,\"prefill_hat_ms\":%.4f,\"prefill_meas_ms\":%.4f,\"prefill_err_pct\":%.2f}\n",
                   model_path, N, kvt_context_n_threads(ctx), (long long)o->prompt, (long long)o->n_gen, o->reps, delta_used,
                   delta_fit, dpre_used, dpre_fit, t_pred, t_hat, meas_dec, e_dec, pre_pred, pre_hat, meas_pre, e_pre);
        } else {
            printf("validate  %s on this CPU (%d threads), %d units, prompt %lld, %lld decoded tokens, median of %d\n",
                   model_path, kvt_context_n_threads(ctx), N, (long long)o->prompt, (long long)o->n_gen, o->reps);
            printf("          delta (per-unit overhead, helm 6.4.4) used %.4f ms; this run alone implies %.4f ms\n", delta_used,
                   delta_fit);
            printf("          delta_pre (per unit per prompt token) used %.5f ms; this run alone implies %.5f ms\n", dpre_used,
                   dpre_fit);
            printf("%-9s %12s %12s %12s %8s\n", "ms/token", "roofline", "corrected", "measured", "error");
            printf("%-9s %12.3f %12.3f %12.3f %+7.1f%%\n", "decode", t_pred, t_hat, meas_dec, e_dec);
            printf("%-9s %12.4f %12.4f %12.4f %+7.1f%%\n", "prefill", pre_pred, pre_hat, meas_pre, e_pre);
            printf("verdict   decode %s 15%%, prefill %s 15%%\n", e_dec < 15 && e_dec > -15 ? "within" : "NOT within",
                   e_pre < 15 && e_pre > -15 ? "within" : "NOT within");
        }
        if (o->calibrate) {
            prof->cpu_block_overhead_ms = delta_fit > 0 ? delta_fit : 0;
            prof->cpu_prefill_overhead_ms = dpre_fit > 0 ? dpre_fit : 0;
            if (!o->profile_path || kvt_profile_save(prof, o->profile_path, &err)) {
                fprintf(stderr, "kvtier plan: --calibrate needs a writable --profile FILE%s%s\n", err.msg[0] ? ": " : "", err.msg);
                rc = 1;
            } else {
                fprintf(stderr, "calibrated cpu_block_overhead_ms = %.4f, cpu_prefill_overhead_ms = %.5f into %s\n",
                        prof->cpu_block_overhead_ms, prof->cpu_prefill_overhead_ms, o->profile_path);
            }
        }
    }
    free(toks);
    free(pre);
    free(dec);
    kvt_context_free(ctx);
    kvt_costs_free(&costs);
    kvt_model_free(m);
    return rc;
}

int cmd_plan(int argc, char **argv) {
    kvt_args a = {"plan", argc, argv, 0};
    const char *model_path = NULL, *shape_name = NULL, *profile_path = NULL, *out_path = NULL;
    kvt_type wt = KVT_TYPE_BF16;
    kvt_plan_req req = kvt_plan_req_default();
    bool json = false, do_validate = false, vram_given = false;
    validate_opts vo = {128, 64, 3, 0, false, NULL, false, 0};
    const char *flag;
    while (kvt_args_next(&a, &flag)) {
        int64_t v;
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            printf("usage: kvtier plan (-m MODEL.gguf | --shape NAME [--type T]) [--profile FILE] [--ctx N] [--batch B]\n"
                   "                  [--vram BYTES] [--ram BYTES] [--disk BYTES] [--disk-dir DIR] [--json] [-o PLAN.json]\n"
                   "       kvtier plan --validate -m MODEL.gguf [--profile FILE] [--calibrate | --gpu [--vram B]] [-t N] [--prompt P]\n"
                   "                  [-n N] [--reps R]\n"
                   "  Chooses the CPU/GPU split (helm.txt Algorithm 1), the KV placement over fast/host/disk tiers,\n"
                   "  granularity and block size, and predicts ms/token. -m reads GGUF metadata only. --shape uses\n"
                   "  a named shape with weights of type T (default bf16, as helm.txt). --vram/--ram are totals (the\n"
                   "  profile's reserves are kept free; --vram needs a profile with a GPU); --disk is the KV disk budget\n"
                   "  (default 0: no disk tier).\n"
                   "  Default profile: $KVT_PROFILE, else a quick measurement of this machine. -o writes the plan\n"
                   "  file that --plan FILE reads. --validate runs the model here and compares predicted and measured\n"
                   "  prefill/decode ms/token; --calibrate stores the per-unit overheads (delta for decode, delta_pre per\n"
                   "  prompt token for prefill) into --profile FILE. --gpu: the plan made for the profile's GPU (--vram: a\n"
                   "  smaller card) runs its CPU/GPU split on CUDA device 0 and its predictions are compared; without a\n"
                   "  device it says so and measures nothing (exit 0).\n" KVT_BYTES_HELP);
            return 0;
        } else if (!strcmp(flag, "-m") || !strcmp(flag, "--model")) {
            if (!(model_path = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--shape")) {
            if (!(shape_name = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--type")) {
            const char *s = kvt_args_value(&a, flag);
            if (!s) return 2;
            if (!kvt_type_from_name(s, &wt)) {
                fprintf(stderr, "kvtier plan: --type: unknown type '%s'\n", s);
                return 2;
            }
        } else if (!strcmp(flag, "--profile")) {
            if (!(profile_path = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--ctx") || !strcmp(flag, "-c")) {
            if (!kvt_args_int(&a, flag, 1, (int64_t)1 << 30, &req.ctx)) return 2;
        } else if (!strcmp(flag, "--batch")) {
            if (!kvt_args_int(&a, flag, 1, 1 << 20, &req.batch)) return 2;
        } else if (!strcmp(flag, "--vram")) {
            if (!kvt_args_bytes(&a, flag, &req.vram_bytes)) return 2;
            vo.vram = req.vram_bytes;
            vram_given = true;
        } else if (!strcmp(flag, "--ram")) {
            if (!kvt_args_bytes(&a, flag, &req.ram_bytes)) return 2;
        } else if (!strcmp(flag, "--disk")) {
            if (!kvt_args_bytes(&a, flag, &req.disk_bytes)) return 2;
        } else if (!strcmp(flag, "--disk-dir")) {
            if (!(req.disk_dir = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--json")) {
            json = true;
        } else if (!strcmp(flag, "-o")) {
            if (!(out_path = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--validate")) {
            do_validate = true;
        } else if (!strcmp(flag, "--gpu")) {
            vo.gpu = true;
        } else if (!strcmp(flag, "--calibrate")) {
            vo.calibrate = true;
        } else if (!strcmp(flag, "-t") || !strcmp(flag, "--threads")) {
            if (!kvt_args_int(&a, flag, 1, 1024, &v)) return 2;
            vo.threads = (int)v;
        } else if (!strcmp(flag, "--prompt")) {
            if (!kvt_args_int(&a, flag, 1, 1 << 16, &vo.prompt)) return 2;
            req.prompt = vo.prompt;
        } else if (!strcmp(flag, "-n")) {
            if (!kvt_args_int(&a, flag, 1, 1 << 16, &vo.n_gen)) return 2;
        } else if (!strcmp(flag, "--reps")) {
            if (!kvt_args_int(&a, flag, 1, 100, &v)) return 2;
            vo.reps = (int)v;
        } else {
            kvt_args_unknown(&a, flag);
            return 2;
        }
    }
    if (!model_path == !shape_name) {
        fprintf(stderr, "kvtier plan: give exactly one of -m MODEL.gguf or --shape NAME (kvtier plan --help)\n");
        return 2;
    }
    if (vo.gpu && (!do_validate || vo.calibrate)) {
        fprintf(stderr, "kvtier plan: --gpu goes with --validate (and not with --calibrate: it fits the CPU's overheads)\n");
        return 2;
    }
    if (vram_given && do_validate && !vo.gpu) {
        fprintf(stderr, "kvtier plan: --vram does nothing with --validate alone (it runs on this CPU): it goes with --gpu\n");
        return 2;
    }
    if (do_validate && !model_path) {
        fprintf(stderr, "kvtier plan: --validate needs -m MODEL.gguf\n");
        return 2;
    }
    // arguments and the model first: a bad one is reported before the profile measures the machine (~35 s)
    kvt_err err = {0};
    kvt_costs costs;
    if (model_path) {
        kvt_gguf *g = NULL;
        kvt_status gst = kvt_gguf_open(model_path, &g, &err);
        if (!gst) gst = kvt_costs_from_gguf(g, &costs, &err);
        kvt_gguf_free(g);
        if (gst) {
            fprintf(stderr, "kvtier plan: %s\n", err.msg);
            return 1;
        }
    } else {
        const kvt_shape *s = kvt_shape_find(shape_name);
        if (!s) {
            fprintf(stderr, "kvtier plan: --shape: unknown shape '%s' (known:", shape_name);
            for (int i = 0; i < kvt_shape_count(); i++) fprintf(stderr, " %s", kvt_shape_at(i)->name);
            fprintf(stderr, ")\n");
            return 2;
        }
        if (kvt_costs_from_shape(s, wt, &costs, &err)) {
            fprintf(stderr, "kvtier plan: %s\n", err.msg);
            return 1;
        }
    }
    kvt_profile prof;
    if (!profile_path) profile_path = getenv("KVT_PROFILE");
    if (profile_path) {
        if (kvt_profile_load(profile_path, &prof, &err)) {
            fprintf(stderr, "kvtier plan: %s\n", err.msg);
            kvt_costs_free(&costs);
            return 1;
        }
    } else {
        kvt_profile_opts po = {"/tmp", vo.threads, true, NULL};
        fprintf(stderr, "kvtier plan: no --profile: measuring this machine (quick)\n");
        if (kvt_profile_measure(&po, &prof, &err)) {
            fprintf(stderr, "kvtier plan: %s\n", err.msg);
            kvt_costs_free(&costs);
            return 1;
        }
    }
    vo.profile_path = profile_path;
    if (vram_given && !prof.has_gpu) { // the search would try the CPU alone and never read it
        fprintf(stderr, "kvtier plan: --vram does nothing: the profile %s has no GPU (make one with `kvtier profile` on a "
                "machine with a GPU, or take one from profiles/)\n", profile_path ? profile_path : "measured on this machine");
        kvt_costs_free(&costs);
        return 2;
    }
    if (vo.gpu && !prof.has_gpu) {
        fprintf(stderr, "kvtier plan: --validate --gpu needs a profile with a GPU (kvtier profile on the device, or profiles/)\n");
        kvt_costs_free(&costs);
        return 2;
    }
    if (do_validate) {
        kvt_costs_free(&costs);
        return validate(model_path, &prof, &vo, json);
    }

    kvt_plan *pl = malloc(sizeof *pl);
    if (!pl) {
        kvt_costs_free(&costs);
        return 1;
    }
    kvt_status st = kvt_plan_search(&costs, &prof, &req, pl, &err);
    if (st && st != KVT_ERR_BUDGET) {
        fprintf(stderr, "kvtier plan: %s\n", err.msg);
    } else {
        if (json) kvt_plan_write_json(pl, stdout);
        else kvt_plan_print(pl, stdout);
        if (pl->warning[0]) fprintf(stderr, "kvtier plan: warning: %s\n", pl->warning);
        if (st && !out_path) fprintf(stderr, "kvtier plan: infeasible: %s\n", pl->error);
        if (out_path && kvt_plan_save(pl, out_path, &err)) { // an infeasible plan is not written
            fprintf(stderr, "kvtier plan: -o %s\n", err.msg);
            if (!st) st = KVT_ERR_IO;
        }
    }
    free(pl);
    kvt_costs_free(&costs);
    return st ? 1 : 0;
}
