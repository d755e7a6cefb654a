// cmd_beam.c - `kvtier beam`: step-wise beam search over the tiered paged KV store
// with the locality-aware schedules (src/sched/beam.h, docs/BEAM.md).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/json.h"
#include "../base/timer.h"
#include "../sched/beam.h"
#include "../sched/dm_model.h"
#include "../sparse/sparse.h"
#include "commands.h"
#include "common.h"

static const char *k_help =
    "usage: kvtier beam -m MODEL (-p PROMPT | -f FILE) [options]\n"
    CLI_ESCAPE_HELP
    "  --beams N            beams kept after each step (default 4)\n"
    "  --width W            continuations per beam and step (default 2)\n"
    "  --step S             tokens per step (default 16)\n"
    "  -n N                 tokens a beam generates at most (default 64)\n"
    "  --step-delim TEXT    a step also ends after this text (escapes \\n \\t \\\\), e.g. \"\\n\\n\"\n"
    "  --temp T             0 (default): the W continuations start with the top-W tokens, then greedy;\n"
    "                       > 0: sampled, one seeded random stream per continuation\n"
    "  --seed S             sampling seed (default 1)\n"
    "  --schedule NAME      layerwise (default) | beam | prefix | balanced\n"
    "  --prm MODEL          rate candidates by a second GGUF (process reward model): mean token\n"
    "                       log-probability of the candidate under it (same vocabulary)\n"
    "  --rescore-dense      after the search, rate every kept beam again by the same model with dense attention\n"
    "                       (mean token log-probability; its own contiguous KV cache in RAM of -c positions):\n"
    "                       what --sparse cost the beams (the JSON's dense_score; equal to score without --sparse)\n"
    "  --no-batch           one forward pass per continuation and token (bit-exact across schedules)\n"
    "  --ignore-eos         do not end beams at end-of-generation tokens\n"
    "  --no-special         do not parse special-token text in the prompt\n"
    "  --json               one JSON object: beams, kv, groups_per_step, time_ms, predicted bytes\n" CLI_PROGRESS_HELP
    "Without a KV tier flag the paged store runs with unlimited fast memory.\n";

// Copies s with \n, \t, \\ replaced; malloc'ed.
static char *unescape(const char *s) {
    char *o = malloc(strlen(s) + 1), *d = o;
    if (!o) return NULL;
    for (; *s; s++) {
        if (s[0] == '\\' && s[1]) {
            s++;
            *d++ = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s == 'r' ? '\r' : *s;
        } else *d++ = *s;
    }
    *d = 0;
    return o;
}

static int64_t moved_total(const kvt_kv_stats *s) {
    int64_t t = 0;
    for (int a = 0; a < KVT_TIER_COUNT; a++) {
        for (int b = 0; b < KVT_TIER_COUNT; b++) t += s->moved_bytes[a][b];
    }
    return t;
}

static void print_json(kvt_context *ctx, const kvt_tokenizer *tok, const kvt_beam_params *bp, int64_t n_prompt,
                       const kvt_beam_result *r, const kvt_dm_result *dm, bool dm_ok) {
    kvt_json j;
    kvt_json_init(&j, stdout);
    kvt_json_obj_begin(&j);
    kvt_json_kv_str(&j, "schedule", kvt_beam_sched_name(bp->schedule));
    kvt_json_kv_int(&j, "n_beams", bp->n_beams);
    kvt_json_kv_int(&j, "width", bp->width);
    kvt_json_kv_int(&j, "step", bp->step);
    kvt_json_kv_int(&j, "n_tokens", bp->n_tokens);
    kvt_json_kv_int(&j, "n_prompt", n_prompt);
    kvt_json_kv_bool(&j, "batched", bp->batched);
    kvt_json_key(&j, "beams");
    kvt_json_arr_begin(&j);
    for (int32_t i = 0; i < r->n_beams; i++) {
        const kvt_beam_out *b = &r->beams[i];
        kvt_json_obj_begin(&j);
        kvt_json_key(&j, "ids");
        kvt_json_arr_begin(&j);
        for (int64_t k = 0; k < b->n; k++) kvt_json_int(&j, b->ids[k]);
        kvt_json_arr_end(&j);
        int64_t tl;
        char *t = cli_detokenize(tok, b->ids, b->n, &tl);
        kvt_json_key(&j, "text");
        kvt_json_strn(&j, t ? t : "", (size_t)(t ? tl : 0));
        free(t);
        kvt_json_kv_num(&j, "score", b->score);
        if (b->rescored) kvt_json_kv_num(&j, "dense_score", b->rescore);
        kvt_json_kv_bool(&j, "finished", b->finished);
        kvt_json_obj_end(&j);
    }
    kvt_json_arr_end(&j);
    kvt_json_kv_int(&j, "n_steps", r->n_steps);
    kvt_json_key(&j, "groups_per_step");
    kvt_json_arr_begin(&j);
    for (int32_t i = 0; i < r->n_steps; i++) kvt_json_int(&j, r->groups_per_step[i]);
    kvt_json_arr_end(&j);
    kvt_json_kv_int(&j, "n_decoded", r->n_decoded);
    kvt_json_kv_int(&j, "n_forward", r->n_forward);
    kvt_json_key(&j, "time_ms");
    kvt_json_obj_begin(&j);
    kvt_json_kv_num(&j, "total", r->total_ms);
    kvt_json_kv_num(&j, "prefill", r->prefill_ms);
    kvt_json_kv_num(&j, "compute", r->compute_ms);
    kvt_json_kv_num(&j, "stall", r->stall_ms);
    kvt_json_kv_num(&j, "select", r->select_ms);
    kvt_json_kv_num(&j, "prefetch_wait", r->prefetch_ms);
    kvt_json_obj_end(&j);
    kvt_json_kv_int(&j, "prefetched_blocks", r->prefetched_blocks);
    kvt_json_kv_int(&j, "fork_copied_blocks", r->fork_blocks); // the device layers' KV copied on forks (partly filled last blocks)
    kvt_json_kv_int(&j, "fork_copied_bytes", r->fork_copy_bytes);
    cli_json_kv_stats(&j, ctx);
    kvt_kv_stats ks;
    kvt_context_kv_stats(ctx, &ks);
    kvt_json_kv_int(&j, "moved_bytes_total", moved_total(&ks));
    cli_json_sparse(&j, ctx, false); // every beam's steps aggregated (nothing under --sparse off)
    // predictions: kvt_beam_step_predict over the steps actually run, per schedule
    kvt_json_key(&j, "predicted");
    kvt_json_obj_begin(&j);
    for (int s = 0; s < KVT_BEAM_SCHED_COUNT; s++) {
        kvt_json_key(&j, kvt_beam_sched_name((kvt_beam_sched)s));
        kvt_json_obj_begin(&j);
        kvt_json_kv_int(&j, "load_bytes", r->pred_load[s]);
        kvt_json_kv_int(&j, "store_bytes", r->pred_store[s]);
        kvt_json_obj_end(&j);
    }
    kvt_json_obj_end(&j);
    // Eqs. 1-5 (dm-model) for beams x width private sequences of prompt + n_tokens
    kvt_json_key(&j, "dm_model");
    if (dm_ok) {
        kvt_json_obj_begin(&j);
        kvt_json_kv_int(&j, "token_by_token_bytes", dm->token_by_token_bytes);
        kvt_json_kv_int(&j, "beam_bytes", dm->beam_bytes);
        kvt_json_obj_end(&j);
    } else kvt_json_null(&j);
    kvt_json_obj_end(&j);
}

static void print_text(kvt_context *ctx, const kvt_tokenizer *tok, const char *prompt, size_t plen,
                       const kvt_beam_params *bp, const kvt_beam_result *r) {
    for (int32_t i = 0; i < r->n_beams; i++) {
        const kvt_beam_out *b = &r->beams[i];
        int64_t tl;
        char *t = cli_detokenize(tok, b->ids, b->n, &tl);
        printf("=== beam %d  score %.4f", i + 1, b->score);
        if (b->rescored) printf("  dense %.4f", b->rescore);
        printf("  %lld tokens%s\n", (long long)b->n, b->finished ? "" : " (unfinished)");
        fwrite(prompt, 1, plen, stdout);
        if (t) fwrite(t, 1, (size_t)tl, stdout);
        printf("\n");
        free(t);
    }
    kvt_kv_stats ks;
    kvt_context_kv_stats(ctx, &ks);
    fprintf(stderr,
            "kvtier beam: %s, %d steps, %lld tokens in %lld forward passes; %.1f ms (compute %.1f, stall %.1f, "
            "select %.1f); KV moved %lld B (predicted load+store %lld B); forks copied %lld blocks, %lld B of device KV\n",
            kvt_beam_sched_name(bp->schedule), r->n_steps, (long long)r->n_decoded, (long long)r->n_forward,
            r->total_ms, r->compute_ms, r->stall_ms, r->select_ms, (long long)moved_total(&ks),
            (long long)(r->pred_load[bp->schedule] + r->pred_store[bp->schedule]), (long long)r->fork_blocks,
            (long long)r->fork_copy_bytes);
}

int cmd_beam(int argc, char **argv) {
    kvt_args a = {"beam", argc, argv, 0};
    cli_input in = {0};
    const char *prm_path = NULL, *delim_arg = NULL;
    bool json = false, parse_special = true, rescore = false;
    kvt_context_params cp = kvt_context_params_default();
    kvt_beam_params bp = kvt_beam_params_default();
    kvt_err err = {0};
    const char *flag;
    int64_t iv;
    double fv;
    while (kvt_args_next(&a, &flag)) {
        int e = cli_input_flag(&a, flag, &in, &cp);
        if (e < 0) return 2;
        if (e > 0) continue;
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            printf("%s%s", k_help, cli_engine_help);
            return 0;
        } else if (!strcmp(flag, "--beams")) {
            if (!kvt_args_int(&a, flag, 1, 65536, &iv)) return 2;
            bp.n_beams = (int32_t)iv;
        } else if (!strcmp(flag, "--width")) {
            if (!kvt_args_int(&a, flag, 1, 1024, &iv)) return 2;
            bp.width = (int32_t)iv;
        } else if (!strcmp(flag, "--step")) {
            if (!kvt_args_int(&a, flag, 1, 1 << 24, &iv)) return 2;
            bp.step = (int32_t)iv;
        } else if (!strcmp(flag, "-n") || !strcmp(flag, "--n-predict")) {
            if (!kvt_args_int(&a, flag, 1, 1 << 24, &iv)) return 2;
            bp.n_tokens = iv;
        } else if (!strcmp(flag, "--step-delim")) {
            if (!(delim_arg = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--temp")) {
            if (!kvt_args_float(&a, flag, 0, 100, &fv)) return 2;
            bp.temp = (float)fv;
        } else if (!strcmp(flag, "--seed")) {
            if (!kvt_args_int(&a, flag, 0, INT64_MAX, &iv)) return 2;
            bp.seed = (uint64_t)iv;
        } else if (!strcmp(flag, "--schedule")) {
            const char *v = kvt_args_value(&a, flag);
            if (!v) return 2;
            if (kvt_beam_sched_parse(v, &bp.schedule, &err)) {
                fprintf(stderr, "kvtier beam: %s\n", err.msg);
                return 2;
            }
        } else if (!strcmp(flag, "--prm")) {
            if (!(prm_path = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--rescore-dense")) {
            rescore = true;
        } else if (!strcmp(flag, "--no-batch")) {
            bp.batched = false;
        } else if (!strcmp(flag, "--ignore-eos")) {
            bp.stop_at_eog = false;
        } else if (!strcmp(flag, "--no-special")) {
            parse_special = false;
        } else if (!strcmp(flag, "--json")) {
            json = true;
        } else {
            kvt_args_unknown(&a, flag);
            return 2;
        }
    }
    char *file_text = NULL, *delim = NULL;
    const char *prompt = NULL;
    size_t plen = 0;
    if (!cli_input_prompt("beam", &in, &prompt, &plen, &file_text)) return in.prompt || in.prompt_file ? 1 : 2;
    if (delim_arg && !(delim = unescape(delim_arg))) {
        free(file_text);
        return 1;
    }
    bp.step_delim = delim;
    if (!kvt_context_params_paged(&cp)) cp.kv_paged = true; // forks need the paged store
    kvt_model *model = NULL, *prm_model = NULL;
    kvt_tokenizer *tok = NULL;
    kvt_context *ctx = NULL;
    kvt_beam_prm *prm = NULL, *dense = NULL;
    kvt_beam_result res;
    memset(&res, 0, sizeof res);
    int32_t *ids = NULL;
    int rc = 1;
    if (!cli_load_model("beam", in.model_path, false, &model, &tok)) goto done;
    int64_t n_prompt = 0;
    if (!(ids = cli_tokenize("beam", tok, prompt, plen, true, parse_special, &n_prompt))) goto done;
    if (n_prompt == 0) {
        fprintf(stderr, "kvtier beam: the prompt has no tokens\n");
        goto done;
    }
    if (!in.ctx_given) {
        int64_t need = (n_prompt + bp.n_tokens + 255) / 256 * 256;
        cp.n_ctx = need < model->hp.n_ctx_train ? need : model->hp.n_ctx_train;
        if (cp.n_ctx < n_prompt + bp.n_tokens) cp.n_ctx = n_prompt + bp.n_tokens;
    }
    cli_progress prog;
    cli_progress_on(&prog, &cp, !in.no_progress && !json);
    // sparse key summaries: at most a parent and a step's beams x width continuations alive together (asyncspade's
    // share sequence 0's copies: each holds the positions it generates)
    if (cp.sparse.seqs <= 0) cp.sparse.seqs = kvt_sparse_fork_sets(&cp.sparse, cp.n_ctx, 1 + (int64_t)bp.n_beams * bp.width, bp.n_tokens);
    if (!cli_context_init("beam", model, &cp, &ctx)) goto done;
    if (prm_path) {
        if (!cli_load_model("beam", prm_path, false, &prm_model, NULL)) goto done;
        if (prm_model->hp.n_vocab != model->hp.n_vocab) {
            fprintf(stderr, "kvtier beam: --prm %s has %d tokens in its vocabulary, the model %d; they must match\n",
                    prm_path, prm_model->hp.n_vocab, model->hp.n_vocab);
            goto done;
        }
        kvt_context_params pc = kvt_context_params_default();
        pc.n_ctx = cp.n_ctx;
        pc.n_threads = cp.n_threads;
        if (kvt_beam_prm_init(prm_model, &pc, &prm, &err)) {
            fprintf(stderr, "kvtier beam: --prm: %s\n", err.msg);
            goto done;
        }
        bp.scorer = kvt_beam_prm_score;
        bp.scorer_user = prm;
    }
    bp.tok = tok;
    prog.t0_ms = kvt_time_ms();
    if (kvt_beam_run(ctx, &bp, ids, n_prompt, &res, &err)) {
        fprintf(stderr, "kvtier beam: %s\n", err.msg);
        goto done;
    }
    if (rescore) {
        // the same model, dense attention, a contiguous cache: none of the search's tier, sparse or device settings
        kvt_context_params dc = kvt_context_params_default();
        dc.n_ctx = cp.n_ctx;
        dc.n_threads = cp.n_threads;
        dc.kv_type = cp.kv_type;
        dc.n_ubatch = cp.n_ubatch;
        if (kvt_beam_prm_init(model, &dc, &dense, &err) || kvt_beam_result_rescore(dense, ids, n_prompt, &res, &err)) {
            fprintf(stderr, "kvtier beam: --rescore-dense: %s\n", err.msg);
            goto done;
        }
    }
    if (json) {
        kvt_kv_stats ks;
        kvt_context_kv_stats(ctx, &ks);
        kvt_kv *kv = kvt_context_kv(ctx);
        kvt_dm_params dp = {kv->n_layer, ks.block_bytes * kv->n_group / kv->block_tokens,
                            (int64_t)bp.n_beams * bp.width, bp.step, n_prompt, bp.n_tokens,
                            ks.budget_bytes[KVT_TIER_FAST] > 0 ? ks.budget_bytes[KVT_TIER_FAST] : INT64_MAX / 4};
        kvt_dm_result dm;
        kvt_err e2 = {0};
        bool dm_ok = kvt_dm_model_eval(&dp, &dm, &e2) == KVT_OK;
        print_json(ctx, tok, &bp, n_prompt, &res, &dm, dm_ok);
    } else print_text(ctx, tok, prompt, plen, &bp, &res);
    rc = 0;
done:
    kvt_beam_result_free(&res);
    kvt_beam_prm_free(prm);
    kvt_beam_prm_free(dense);
    kvt_context_free(ctx);
    kvt_model_free(prm_model);
    free(ids);
    kvt_tokenizer_free(tok);
    kvt_model_free(model);
    free(file_text);
    free(delim);
    return rc;
}
