// cmd_generate.c - `kvtier generate`: prompt in, continuation out.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/json.h"
#include "../base/timer.h"
#include "../exec/session.h"
#include "../sched/generate.h"
#include "commands.h"
#include "common.h"

static const char *k_help =
    "usage: kvtier generate -m MODEL (-p PROMPT | -f FILE) [options]\n"
    CLI_ESCAPE_HELP
    "  -n N                 tokens to generate (default 128)\n" CLI_SAMPLING_HELP
    "  --no-special         do not parse special-token text (e.g. <|im_start|>) in the prompt\n"
    "  --json               print one JSON object (ids, text, timings) instead of the text\n" CLI_PROGRESS_HELP
    "  --dump-logits FILE   write the logits after the last prompt token, one per line\n"
    "  --kv-load FILE       before the prompt: restore the KV of a session file (kvtier's own format,\n"
    "                       CRC32C and model identity checked); only the prompt tokens after the\n"
    "                       saved ones are decoded. A prompt that leaves the saved tokens reuses their\n"
    "                       common prefix and recomputes the rest (a note on stderr)\n"
    "  --kv-save FILE       after generation: write the KV of prompt + generated tokens to FILE\n";

typedef struct {
    const kvt_tokenizer *tok;
    bool stream;
    char *piece;     // a token's bytes, grown to fit (no length limit)
    size_t cap;
    const char *prompt; // echoed before the first token unless echoed
    size_t plen;
    bool echoed;
    // --json: the time of each generated token (ms, kvt_time_ms) and the KV counters when the first one
    // came (the end of the prefill), so that the decode steps are reported apart from the prefill
    kvt_context *ctx;
    double *tok_ms;  // [n_tok_ms], grown to fit (owned)
    int64_t n_tok_ms, cap_tok_ms;
    kvt_kv_stats kv_at_first;
    kvt_gpu_layers_stats gpu_at_first; // the device layers' counters at the first token (zero without them)
} stream_ctx;

static bool on_token(void *user, int32_t id) {
    stream_ctx *s = user;
    if (s->ctx) {
        const double now = kvt_time_ms();
        if (s->n_tok_ms == 0) kvt_context_kv_stats(s->ctx, &s->kv_at_first);
        if (s->n_tok_ms == 0 && !kvt_context_gpu_stats(s->ctx, &s->gpu_at_first)) memset(&s->gpu_at_first, 0, sizeof s->gpu_at_first);
        if (s->n_tok_ms == s->cap_tok_ms) {
            const int64_t cap = s->cap_tok_ms ? 2 * s->cap_tok_ms : 256;
            double *t = realloc(s->tok_ms, (size_t)cap * sizeof *t);
            if (!t) return false; // out of memory: stop generating
            s->tok_ms = t;
            s->cap_tok_ms = cap;
        }
        s->tok_ms[s->n_tok_ms++] = now;
    }
    if (!s->stream) return true;
    if (!s->echoed) {
        fwrite(s->prompt, 1, s->plen, stdout);
        s->echoed = true;
    }
    int64_t n = cli_token_piece(s->tok, id, &s->piece, &s->cap);
    if (n < 0) return false; // out of memory: stop generating
    fwrite(s->piece, 1, (size_t)n, stdout);
    fflush(stdout);
    return true;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// "decode": the decode steps apart from the prefill: step_ms (the time from one generated token to the
// next, one per step after the first token), its median, and the KV store's counters over those steps
// (moved bytes per tier pair, store stall, hits, misses, prefetches), totals and per step.
static void json_decode_steps(kvt_json *j, const stream_ctx *s) {
    const int64_t n = s->n_tok_ms > 1 ? s->n_tok_ms - 1 : 0;
    double *d = n ? malloc((size_t)n * sizeof *d) : NULL;
    kvt_json_key(j, "decode");
    kvt_json_obj_begin(j);
    kvt_json_kv_int(j, "n_steps", n);
    kvt_json_key(j, "step_ms");
    kvt_json_arr_begin(j);
    for (int64_t i = 0; i < n; i++) {
        const double v = s->tok_ms[i + 1] - s->tok_ms[i];
        kvt_json_num(j, v);
        if (d) d[i] = v;
    }
    kvt_json_arr_end(j);
    double med = 0;
    if (d) {
        qsort(d, (size_t)n, sizeof *d, cmp_double);
        med = n % 2 ? d[n / 2] : 0.5 * (d[n / 2 - 1] + d[n / 2]);
    }
    free(d);
    kvt_json_kv_num(j, "step_ms_median", med);
    if (s->ctx && s->n_tok_ms > 0) {
        kvt_kv_stats now;
        kvt_context_kv_stats(s->ctx, &now);
        const kvt_kv_stats *a = &s->kv_at_first;
        const double per = n ? 1.0 / (double)n : 0;
        kvt_json_key(j, "kv_moved_bytes_per_step");
        kvt_json_obj_begin(j);
        for (int x = 0; x < KVT_TIER_COUNT; x++) {
            for (int y = 0; y < KVT_TIER_COUNT; y++) {
                if (x == y) continue;
                char key[32];
                snprintf(key, sizeof key, "%s_to_%s", kvt_tier_name((kvt_tier)x), kvt_tier_name((kvt_tier)y));
                kvt_json_kv_num(j, key, (double)(now.moved_bytes[x][y] - a->moved_bytes[x][y]) * per);
            }
        }
        kvt_json_obj_end(j);
        kvt_json_kv_num(j, "kv_stall_ms_per_step", (now.stall_ms - a->stall_ms) * per);
        kvt_json_kv_num(j, "kv_hits_per_step", (double)(now.hits - a->hits) * per);
        kvt_json_kv_num(j, "kv_misses_per_step", (double)(now.misses - a->misses) * per);
        kvt_json_kv_num(j, "kv_prefetches_per_step", (double)(now.prefetches - a->prefetches) * per);
        // where the misses come from, and the state of the blocks handed over late (kv.h kvt_kv_stats)
        kvt_json_key(j, "kv_miss_kinds_per_step");
        kvt_json_obj_begin(j);
        kvt_json_kv_num(j, "queued_early", (double)(now.miss_queued_early - a->miss_queued_early) * per);
        kvt_json_kv_num(j, "queued_late", (double)(now.miss_queued_late - a->miss_queued_late) * per);
        kvt_json_kv_num(j, "inflight", (double)(now.miss_inflight - a->miss_inflight) * per);
        kvt_json_kv_num(j, "evicted", (double)(now.miss_evicted - a->miss_evicted) * per);
        kvt_json_kv_num(j, "cold", (double)(now.miss_cold - a->miss_cold) * per);
        kvt_json_kv_num(j, "evicted_unread", (double)(now.evicted_unread - a->evicted_unread) * per);
        kvt_json_kv_num(j, "prefetch_noroom", (double)(now.pf_noroom - a->pf_noroom) * per);
        kvt_json_kv_num(j, "io_batches", (double)(now.io_batches - a->io_batches) * per);
        kvt_json_kv_num(j, "io_batch_blocks", (double)(now.io_batch_blocks - a->io_batch_blocks) * per);
        kvt_json_kv_num(j, "io_batch_prep_ms", (now.io_batch_prep_ms - a->io_batch_prep_ms) * per);
        kvt_json_kv_num(j, "io_batch_read_ms", (now.io_batch_read_ms - a->io_batch_read_ms) * per);
        // victims without a disk copy written together before a late batch (kv_paged_io.c kvp_clean_victims): their
        // bytes are in kv_moved_bytes_per_step fast_to_disk
        kvt_json_kv_num(j, "io_clean_batches", (double)(now.io_clean_batches - a->io_clean_batches) * per);
        kvt_json_kv_num(j, "io_clean_blocks", (double)(now.io_clean_blocks - a->io_clean_blocks) * per);
        kvt_json_kv_num(j, "evict_dropped", (double)(now.evict_dropped - a->evict_dropped) * per);
        kvt_json_kv_num(j, "evict_searched", (double)(now.evict_searched - a->evict_searched) * per);
        kvt_json_kv_num(j, "wait_busy_ms", (now.wait_busy_ms - a->wait_busy_ms) * per);
        kvt_json_kv_num(j, "wait_room_ms", (now.wait_room_ms - a->wait_room_ms) * per);
        kvt_json_kv_num(j, "lock_ms", (now.lock_ms - a->lock_ms) * per);
        kvt_json_obj_end(j);
        static const char *const ho_name[KVT_HO_COUNT] = {"resident", "queued", "inflight", "evicted", "noroom", "absent"};
        for (int late = 0; late < 2; late++) {
            kvt_json_key(j, late ? "kv_handover_late_per_step" : "kv_handover_early_per_step");
            kvt_json_obj_begin(j);
            for (int k = 0; k < KVT_HO_COUNT; k++) {
                kvt_json_kv_num(j, ho_name[k], (double)(now.handover[late][k] - a->handover[late][k]) * per);
            }
            kvt_json_obj_end(j);
        }
        kvt_gpu_layers_stats g;
        if (kvt_context_gpu_stats(s->ctx, &g)) { // the device KV's tiers per step (gpu_kv.h): what crossed PCIe
            const kvt_gpu_kv_stats *k = &g.kv, *k0 = &s->gpu_at_first.kv;
            kvt_json_key(j, "gpu_kv_bytes_per_step");
            kvt_json_obj_begin(j);
            kvt_json_kv_num(j, "host_to_device", (double)(k->h2d_bytes - k0->h2d_bytes) * per);
            kvt_json_kv_num(j, "device_to_host", (double)(k->d2h_bytes - k0->d2h_bytes) * per);
            kvt_json_kv_num(j, "zero_copy_read", (double)(k->zero_copy_bytes - k0->zero_copy_bytes) * per);
            kvt_json_kv_num(j, "vram_read", (double)(k->vram_read_bytes - k0->vram_read_bytes) * per);
            kvt_json_obj_end(j);
        }
    }
    kvt_json_obj_end(j);
}

// false with errno set; a partly written file is removed
static bool write_logits(const char *path, const float *l, int32_t n) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    for (int32_t i = 0; i < n; i++) fprintf(f, "%.6f\n", l[i]);
    bool ok = !ferror(f);
    int e = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        unlink(path);
        errno = e;
    }
    return ok;
}

static int run_generate(int argc, char **argv, cli_sampling_args *sa) {
    kvt_args a = {"generate", argc, argv, 0};
    cli_input in = {0};
    const char *dump = NULL, *kv_save = NULL, *kv_load = NULL;
    bool json = false, parse_special = true;
    kvt_context_params cp = kvt_context_params_default();
    kvt_generate_params gp = kvt_generate_params_default();
    gp.sampling.seed = 1;
    const char *flag;
    int64_t iv;
    while (kvt_args_next(&a, &flag)) {
        int e = cli_input_flag(&a, flag, &in, &cp);
        if (e == 0) e = cli_sampling_flag(&a, flag, &gp, sa);
        if (e < 0) return 2;
        if (e > 0) continue;
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            printf("%s%s", k_help, cli_engine_help);
            return 0;
        } else if (!strcmp(flag, "-n") || !strcmp(flag, "--n-predict")) {
            if (!kvt_args_int(&a, flag, 0, 1 << 24, &iv)) return 2;
            gp.n_predict = iv;
        } else if (!strcmp(flag, "--no-special")) {
            parse_special = false;
        } else if (!strcmp(flag, "--json")) {
            json = true;
        } else if (!strcmp(flag, "--kv-save")) {
            if (!(kv_save = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--kv-load")) {
            if (!(kv_load = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--dump-logits")) {
            if (!(dump = kvt_args_value(&a, flag))) return 2;
        } else {
            kvt_args_unknown(&a, flag);
            return 2;
        }
    }
    if ((kv_save && !cli_check_out_path("generate", "--kv-save", kv_save)) ||
        (dump && !cli_check_out_path("generate", "--dump-logits", dump)))
        return 1;
    char *file_text = NULL;
    const char *prompt = NULL;
    size_t plen = 0;
    if (!cli_input_prompt("generate", &in, &prompt, &plen, &file_text)) return in.prompt || in.prompt_file ? 1 : 2;
    kvt_model *model;
    kvt_tokenizer *tok;
    if (!cli_load_model("generate", in.model_path, false, &model, &tok)) {
        free(file_text);
        return 1;
    }
    kvt_logit_bias *bans = NULL;
    if (!cli_check_logit_bias("generate", sa, model->hp.n_vocab) || !cli_ban_eog("generate", tok, &gp, &bans)) {
        kvt_tokenizer_free(tok);
        kvt_model_free(model);
        free(file_text);
        return 1;
    }
    int rc = 1;
    int64_t n_prompt = 0;
    int32_t *ids = cli_tokenize("generate", tok, prompt, plen, true, parse_special, &n_prompt);
    int32_t *out = malloc((size_t)(gp.n_predict + 1) * sizeof *out);
    float *plogits = malloc((size_t)model->hp.n_vocab * sizeof(float));
    kvt_context *ctx = NULL;
    kvt_err err = {0};
    stream_ctx sc;
    memset(&sc, 0, sizeof sc);
    sc.tok = tok;
    sc.prompt = prompt;
    sc.plen = plen;
    if (!ids || !out || !plogits) goto done;
    if (n_prompt == 0) {
        fprintf(stderr, "kvtier generate: the prompt has no tokens\n");
        goto done;
    }
    if (!in.ctx_given) {
        // enough for prompt + generation, rounded up, within the training context
        int64_t need = (n_prompt + gp.n_predict + 255) / 256 * 256;
        cp.n_ctx = need < model->hp.n_ctx_train ? need : model->hp.n_ctx_train;
        if (cp.n_ctx < n_prompt + gp.n_predict) cp.n_ctx = n_prompt + gp.n_predict;
    }
    if (n_prompt + gp.n_predict > cp.n_ctx) {
        fprintf(stderr, "kvtier generate: prompt of %lld tokens + %lld to generate exceed the context size %lld (-c)\n",
                (long long)n_prompt, (long long)gp.n_predict, (long long)cp.n_ctx);
        goto done;
    }
    if (!cli_dry_build("generate", tok, cp.n_ctx, in.no_escape, &gp, sa)) goto done;
    if (!cli_grammar_build("generate", tok, &gp, sa)) { // (a bad grammar or schema: a bad argument)
        rc = 2;
        goto done;
    }
    cli_progress prog;
    cli_progress_on(&prog, &cp, !in.no_progress && !json);
    if (!cli_context_init("generate", model, &cp, &ctx)) goto done;
    sc.stream = !json;
    sc.ctx = json ? ctx : NULL;
    kvt_generate_stats stats;
    kvt_session_info sinfo = {0, 0, 0};
    double load_ms = 0, save_ms = 0;
    if (kv_load) {
        double t0 = kvt_time_ms();
        // the prompt's last tokens are always decoded: their logits choose the first generated token, and under
        // asyncspade their queries fill its query window, as in a run without the file
        if (kvt_context_kv_load(ctx, 0, kv_load, ids, n_prompt, kvt_context_prompt_cacheable(ctx, n_prompt), &sinfo, &err)) {
            fprintf(stderr, "kvtier generate: --kv-load: %s\n", err.msg);
            goto done;
        }
        load_ms = kvt_time_ms() - t0;
        if (sinfo.n_common < sinfo.n_saved) {
            fprintf(stderr,
                    "kvtier generate: --kv-load: the prompt leaves the %lld saved tokens of %s at position %lld: "
                    "reusing %lld positions, recomputing %lld\n",
                    (long long)sinfo.n_saved, kv_load, (long long)sinfo.n_common, (long long)sinfo.n_loaded,
                    (long long)(n_prompt - sinfo.n_loaded));
        }
    }
    if (!json && !cp.progress) { // with a progress line the prompt is echoed after the prefill (on_token)
        fwrite(prompt, 1, plen, stdout);
        fflush(stdout);
        sc.echoed = true;
    }
    int64_t ub = cp.n_ubatch > 0 ? cp.n_ubatch : 512; // the context's micro-batch (as kvt_context_init sets it)
    if (ub > kvt_context_n_ctx(ctx)) ub = kvt_context_n_ctx(ctx);
    prog.t0_ms = kvt_time_ms();
    if (kvt_generate_cached(ctx, tok, ids, n_prompt, sinfo.n_loaded, ub, &gp, out, plogits, on_token, &sc, &stats, &err)) {
        fprintf(stderr, "\nkvtier generate: %s\n", err.msg);
        goto done;
    }
    if (kv_save) {
        // positions held: the prompt, then the generated tokens that were decoded
        const int64_t n_held = kvt_context_n_past(ctx);
        int32_t *all = malloc((size_t)(n_prompt + stats.n_gen + 1) * sizeof *all);
        if (!all) {
            fprintf(stderr, "kvtier generate: out of memory\n");
            goto done;
        }
        memcpy(all, ids, (size_t)n_prompt * sizeof *all);
        memcpy(all + n_prompt, out, (size_t)stats.n_gen * sizeof *all);
        double t0 = kvt_time_ms();
        kvt_status sst = kvt_context_kv_save(ctx, 0, all, n_held, kv_save, &err);
        save_ms = kvt_time_ms() - t0;
        free(all);
        if (sst) {
            fprintf(stderr, "kvtier generate: --kv-save: %s\n", err.msg);
            goto done;
        }
    }
    if (dump && !write_logits(dump, plogits, model->hp.n_vocab)) {
        fprintf(stderr, "kvtier generate: --dump-logits: cannot write %s: %s\n", dump, strerror(errno));
        goto done;
    }
    const int64_t n_prefilled = n_prompt - sinfo.n_loaded; // prompt tokens decoded here
    double prefill_tps = stats.prefill_ms > 0 ? (double)n_prefilled / (stats.prefill_ms / 1e3) : 0;
    int64_t n_dec = stats.n_gen > 1 ? stats.n_gen - 1 : 0;
    double decode_tps = stats.decode_ms > 0 && n_dec ? (double)n_dec / (stats.decode_ms / 1e3) : 0;
    if (json) {
        int64_t tl = 0;
        char *text = cli_detokenize(tok, out, stats.n_gen, &tl);
        if (!text) {
            fprintf(stderr, "kvtier generate: out of memory for the text\n");
            goto done;
        }
        kvt_json j;
        kvt_json_init(&j, stdout);
        kvt_json_obj_begin(&j);
        kvt_json_key(&j, "prompt_ids");
        kvt_json_arr_begin(&j);
        for (int64_t i = 0; i < n_prompt; i++) kvt_json_int(&j, ids[i]);
        kvt_json_arr_end(&j);
        kvt_json_key(&j, "ids");
        kvt_json_arr_begin(&j);
        for (int64_t i = 0; i < stats.n_gen; i++) kvt_json_int(&j, out[i]);
        kvt_json_arr_end(&j);
        kvt_json_key(&j, "text");
        kvt_json_strn(&j, text, (size_t)tl);
        kvt_json_kv_int(&j, "n_prompt", n_prompt);
        kvt_json_kv_int(&j, "n_gen", stats.n_gen);
        kvt_json_kv_bool(&j, "stopped_at_eog", stats.hit_eog);
        kvt_json_kv_num(&j, "prefill_ms", stats.prefill_ms);
        kvt_json_kv_int(&j, "n_prefilled", n_prefilled);
        if (kv_load) {
            kvt_json_kv_int(&j, "kv_loaded_tokens", sinfo.n_loaded);
            kvt_json_kv_int(&j, "kv_saved_tokens", sinfo.n_saved);
            kvt_json_kv_num(&j, "kv_load_ms", load_ms);
        }
        if (kv_save) kvt_json_kv_num(&j, "kv_save_ms", save_ms);
        kvt_json_kv_num(&j, "decode_ms", stats.decode_ms);
        kvt_json_kv_num(&j, "prefill_tok_s", prefill_tps);
        kvt_json_kv_num(&j, "decode_tok_s", decode_tps);
        kvt_json_kv_int(&j, "n_threads", kvt_context_n_threads(ctx));
        kvt_json_kv_int(&j, "n_ctx", kvt_context_n_ctx(ctx));
        cli_json_kv_stats(&j, ctx);
        json_decode_steps(&j, &sc);
        cli_json_sparse(&j, ctx, true);
        kvt_json_obj_end(&j);
        free(text);
    } else {
        if (!sc.echoed) fwrite(prompt, 1, plen, stdout); // -n 0
        printf("\n");
        fprintf(stderr, "\nkvtier: prompt %lld tokens in %.1f ms (%.2f tok/s), generated %lld tokens, %.2f tok/s\n",
                (long long)n_prefilled, stats.prefill_ms, prefill_tps, (long long)stats.n_gen, decode_tps);
        if (kv_load) {
            fprintf(stderr, "kvtier: --kv-load restored %lld of %lld saved positions in %.1f ms\n",
                    (long long)sinfo.n_loaded, (long long)sinfo.n_saved, load_ms);
        }
        if (kv_save) fprintf(stderr, "kvtier: --kv-save wrote %s in %.1f ms\n", kv_save, save_ms);
    }
    rc = 0;
done:
    free(bans);
    free(sc.piece);
    free(sc.tok_ms);
    kvt_context_free(ctx);
    free(ids);
    free(out);
    free(plogits);
    kvt_tokenizer_free(tok);
    kvt_model_free(model);
    free(file_text);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    cli_sampling_args sa = {.n = 0};
    const int rc = run_generate(argc, argv, &sa);
    cli_sampling_args_free(&sa);
    return rc;
}
