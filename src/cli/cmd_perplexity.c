// cmd_perplexity.c - `kvtier perplexity`, computed as llama.cpp's llama-perplexity:
// the text (less one trailing newline, as llama.cpp's -f reads a file) is
// tokenized with BOS (when the model adds it), split into chunks of CTX tokens
// whose first token is replaced by BOS, and the negative log likelihood of the
// tokens after position CTX/2 of each chunk is averaged. --kl-divergence-base FILE
// also saves the scored log-probabilities in llama-perplexity's file format;
// --kl-divergence then compares a model against such a file (src/sched/kld.h);
// --ppl-stride N scores overlapping windows as llama-perplexity's strided path.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/json.h"
#include "../base/timer.h"
#include "../sched/kld.h"
#include "../sched/perplexity.h"
#include "commands.h"
#include "common.h"

static void on_chunk(void *user, int64_t chunk, double ppl) {
    if (!*(bool *)user) fprintf(stderr, "[%lld]%.4f ", (long long)(chunk + 1), ppl);
}

// --kl-divergence-base FILE while computing the perplexity: every scored row into the file
static kvt_status put_base_row(void *user, int64_t chunk, int64_t row, const float *logits, int32_t next, kvt_err *err) {
    (void)chunk, (void)row, (void)next;
    return kvt_kld_writer_row(user, logits, err);
}

typedef struct {
    kvt_kld_base *base;
    kvt_kld_stats stats;
    uint16_t *words; // one base row
    int32_t n_vocab;
    bool json;
} kld_run;

static kvt_status add_kld_row(void *user, int64_t chunk, int64_t row, const float *logits, int32_t next, kvt_err *err) {
    kld_run *k = user;
    kvt_status st = kvt_kld_base_row(k->base, chunk, row, k->words, err);
    if (!st) kvt_kld_stats_add(&k->stats, logits, k->words, k->n_vocab, next);
    return st;
}

// llama-perplexity's table line per chunk: PPL, ln(PPL(Q)/PPL(base)), KL divergence, Δp RMS, same top p
static void on_kld_chunk(void *user, int64_t chunk, double ppl) {
    (void)ppl;
    kld_run *k = user;
    if (k->json) return;
    kvt_kld_summary s;
    kvt_kld_summarize(&k->stats, &s);
    if (chunk == 0) {
        fprintf(stderr, "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              "
                        "\xce\x94p RMS            Same top p\n");
    }
    fprintf(stderr, "%4lld    %9.4f \xc2\xb1 %9.4f    %10.5f \xc2\xb1 %10.5f    %10.5f \xc2\xb1 %10.5f    %6.3f \xc2\xb1 %6.3f %%"
                    "    %6.3f \xc2\xb1 %6.3f %%\n",
            (long long)(chunk + 1), s.ppl.val, s.ppl.err, s.ln_ratio.val, s.ln_ratio.err, s.kld.val, s.kld.err,
            100.0 * s.p_rms.val, 100.0 * s.p_rms.err, 100.0 * s.same_top.val, 100.0 * s.same_top.err);
}

static const char *const kld_q_name[11] = {"Maximum", "99.9%  ", "99.0%  ", "95.0%  ", "90.0%  ", "Median ",
                                           "10.0%  ", " 5.0%  ", " 1.0%  ", " 0.1%  ", "Minimum"};
static const char *const kld_q_key[11] = {"max", "p99_9", "p99", "p95", "p90", "median", "p10", "p5", "p1", "p0_1", "min"};
static const char *const dp_q_name[13] = {"Maximum", "99.9%  ", "99.0%  ", "95.0%  ", "90.0%  ", "75.0%  ", "Median ",
                                          "25.0%  ", "10.0%  ", " 5.0%  ", " 1.0%  ", " 0.1%  ", "Minimum"};
static const char *const dp_q_key[13] = {"max", "p99_9", "p99", "p95", "p90", "p75", "median", "p25", "p10", "p5", "p1", "p0_1", "min"};

// the statistics llama-perplexity prints at the end of --kl-divergence (it prints them from 100 positions on)
static void print_kld(const kvt_kld_summary *s) {
#define PM " \xc2\xb1 "
    printf("====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f" PM "%10.6f\n", s->ppl.val, s->ppl.err);
    printf("Mean PPL(base)                : %10.6f" PM "%10.6f\n", s->ppl_base.val, s->ppl_base.err);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * s->cor);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f" PM "%10.6f\n", s->ln_ratio.val, s->ln_ratio.err);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f" PM "%10.6f\n", s->ratio.val, s->ratio.err);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f" PM "%10.6f\n", s->diff.val, s->diff.err);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f" PM "%10.6f\n", s->kld.val, s->kld.err);
    for (int i = 0; i < 11; i++) printf("%s KLD: %10.6f\n", kld_q_name[i], s->kld_q[i]);
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    \xce\x94p: %6.3f" PM "%5.3f %%\n", 100.0 * s->p_diff.val, 100.0 * s->p_diff.err);
    for (int i = 0; i < 13; i++) printf("%s \xce\x94p: %6.3f%%\n", dp_q_name[i], 100.0 * s->p_diff_q[i]);
    printf("RMS \xce\x94p    : %6.3f" PM "%5.3f %%\n", 100.0 * s->p_rms.val, 100.0 * s->p_rms.err);
    printf("Same top p: %6.3f" PM "%5.3f %%\n", 100.0 * s->same_top.val, 100.0 * s->same_top.err);
#undef PM
}

static void json_kld(kvt_json *j, const kvt_kld_summary *s) {
    const struct {
        const char *key;
        kvt_kld_est e;
    } est[] = {{"ppl", s->ppl},   {"ppl_base", s->ppl_base}, {"ln_ppl_ratio", s->ln_ratio}, {"ppl_ratio", s->ratio},
               {"ppl_diff", s->diff}, {"kld", s->kld},       {"p_diff", s->p_diff},         {"p_diff_rms", s->p_rms},
               {"same_top", s->same_top}};
    char key[48];
    for (size_t i = 0; i < sizeof est / sizeof est[0]; i++) {
        kvt_json_kv_num(j, est[i].key, est[i].e.val);
        snprintf(key, sizeof key, "%s_err", est[i].key);
        kvt_json_kv_num(j, key, est[i].e.err);
    }
    kvt_json_kv_num(j, "ppl_cor", s->cor);
    for (int i = 0; i < 11; i++) {
        snprintf(key, sizeof key, "kld_%s", kld_q_key[i]);
        kvt_json_kv_num(j, key, s->kld_q[i]);
    }
    for (int i = 0; i < 13; i++) {
        snprintf(key, sizeof key, "p_diff_%s", dp_q_key[i]);
        kvt_json_kv_num(j, key, s->p_diff_q[i]);
    }
}

int cmd_perplexity(int argc, char **argv) {
    kvt_args a = {"perplexity", argc, argv, 0};
    const char *model_path = NULL, *file = NULL, *base_path = NULL;
    bool json = false, kld = false;
    int64_t max_chunks = -1, stride = 0;
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = -1; // -c not given: 512, or (--kl-divergence) the base file's chunk size
    const char *flag;
    while (kvt_args_next(&a, &flag)) {
        int e = cli_engine_flag(&a, flag, &cp);
        if (e < 0) return 2;
        if (e > 0) continue;
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            printf("usage: kvtier perplexity -m MODEL -f FILE [-c CTX] [--chunks N] [--ppl-stride N] [--json]\n"
                   "       kvtier perplexity -m MODEL -f FILE --kl-divergence-base BASE [-c CTX] [--chunks N]\n"
                   "       kvtier perplexity -m MODEL2 --kl-divergence-base BASE --kl-divergence [--chunks N] [--json]\n"
                   "  -c CTX here is the chunk size, default 512 as llama-perplexity (not the training context\n"
                   "  that the engine flags below give the other commands)\n"
                   "  --chunks N   score at most the first N chunks\n"
                   "  -b, --batch-size N  tokens per forward pass (= --ubatch; chunks are evaluated one at a time,\n"
                   "               and the figures do not depend on it)\n"
                   "  --ppl-stride N  llama-perplexity's strided perplexity: windows of CTX + N/2 tokens rounded up to a\n"
                   "               multiple of 256 (llama.cpp's context padding) every N tokens, the last N predictions\n"
                   "               of each scored, the window's first token not replaced by BOS (as llama with -b <= CTX)\n"
                   "  --kl-divergence-base BASE  save the scored log-probabilities in BASE, in llama-perplexity's format\n"
                   "               (either program reads the other's); with --kl-divergence: read them from BASE\n"
                   "  --kl-divergence  compare MODEL against BASE (tokens and CTX from BASE; -f not needed): KL divergence,\n"
                   "               PPL(Q)/PPL(base), token probability differences (delta p) and same top token, as\n"
                   "               llama-perplexity prints them (per chunk on stderr, the statistics on stdout)\n"
                   "%s",
                   cli_engine_help);
            return 0;
        } else if (!strcmp(flag, "-m") || !strcmp(flag, "--model")) {
            if (!(model_path = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "-f") || !strcmp(flag, "--file")) {
            if (!(file = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--chunks")) {
            if (!kvt_args_int(&a, flag, 1, INT32_MAX, &max_chunks)) return 2;
        } else if (!strcmp(flag, "--ppl-stride")) {
            if (!kvt_args_int(&a, flag, 1, INT32_MAX, &stride)) return 2;
        } else if (!strcmp(flag, "-b") || !strcmp(flag, "--batch-size")) {
            int64_t b;
            if (!kvt_args_int(&a, flag, 1, INT32_MAX, &b)) return 2;
            cp.n_ubatch = b;
        } else if (!strcmp(flag, "--kl-divergence-base")) {
            if (!(base_path = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--kl-divergence")) {
            kld = true;
        } else if (!strcmp(flag, "--json")) {
            json = true;
        } else {
            kvt_args_unknown(&a, flag);
            return 2;
        }
    }
    if (kld && !base_path) {
        fprintf(stderr, "kvtier perplexity: --kl-divergence needs --kl-divergence-base BASE (the base model's file)\n");
        return 2;
    }
    if (stride && base_path) {
        fprintf(stderr, "kvtier perplexity: --ppl-stride does not go with --kl-divergence-base (llama-perplexity's strided "
                        "path neither writes nor reads a base file)\n");
        return 2;
    }
    if (!kld && !file) {
        fprintf(stderr, "kvtier perplexity: -f FILE is required\n");
        return 2;
    }
    if (kld && file) fprintf(stderr, "kvtier perplexity: note: -f %s is not read: --kl-divergence takes the tokens of %s\n", file, base_path);
    const bool c_given = cp.n_ctx != -1;
    if (!c_given) cp.n_ctx = 512;
    if (cp.n_ctx < 4) {
        fprintf(stderr, "kvtier perplexity: -c must be at least 4\n");
        return 2;
    }
    size_t len = 0;
    char *text = NULL;
    if (!kld) {
        if (!(text = kvt_read_file("perplexity", file, &len))) return 1;
        // as llama.cpp's -f: one trailing newline of the file is not part of the text
        if (len > 0 && text[len - 1] == '\n') text[--len] = 0;
    }
    kvt_model *model;
    kvt_tokenizer *tok;
    if (!cli_load_model("perplexity", model_path, false, &model, &tok)) {
        free(text);
        return 1;
    }
    int rc = 1;
    int64_t n_tok = 0;
    kvt_context *ctx = NULL;
    int32_t *ids = NULL;
    kvt_kld_writer *writer = NULL;
    kld_run k = {0};
    kvt_err err = {0};
    const int32_t n_vocab = model->hp.n_vocab;
    if (kld) {
        if (kvt_kld_base_open(base_path, n_vocab, &k.base, &err)) {
            fprintf(stderr, "kvtier perplexity: %s\n", err.msg);
            goto done;
        }
        const int64_t base_ctx = kvt_kld_base_n_ctx(k.base);
        if (c_given && cp.n_ctx != base_ctx) {
            fprintf(stderr, "kvtier perplexity: note: -c %lld is not used: %s holds chunks of %lld tokens\n",
                    (long long)cp.n_ctx, base_path, (long long)base_ctx);
        }
        cp.n_ctx = base_ctx;
        n_tok = base_ctx * kvt_kld_base_n_chunk(k.base);
        int64_t used = kvt_kld_base_n_chunk(k.base);
        if (max_chunks > 0 && max_chunks < used) used = max_chunks;
        k.n_vocab = n_vocab;
        k.json = json;
        if (!(k.words = malloc((size_t)kvt_kld_row_words(n_vocab) * sizeof *k.words)) ||
            kvt_kld_stats_init(&k.stats, used * (base_ctx - 1 - base_ctx / 2), &err)) {
            fprintf(stderr, "kvtier perplexity: out of memory\n");
            goto done;
        }
    } else {
        if (!(ids = cli_tokenize("perplexity", tok, text, len, true, false, &n_tok))) goto done;
        const int64_t window = kvt_perplexity_window(cp.n_ctx, stride);
        if (n_tok < 2 * window) {
            fprintf(stderr, "kvtier perplexity: %s has %lld tokens; at least 2*CTX = %lld are needed\n", file,
                    (long long)n_tok, (long long)(2 * window));
            goto done;
        }
    }
    const int64_t n_ctx = cp.n_ctx;
    cp.n_ctx = kvt_perplexity_window(n_ctx, stride);
    if (cp.n_ubatch > cp.n_ctx) cp.n_ubatch = cp.n_ctx;
    if (!cli_context_init("perplexity", model, &cp, &ctx)) goto done;
    kvt_ppl_params pp = {.n_ctx = n_ctx, .bos = kvt_tokenizer_add_bos(tok) ? kvt_token_bos(tok) : -1,
                         .max_chunks = max_chunks, .stride = stride, .progress = on_chunk, .user = &json};
    if (kld) {
        pp.short_text = true;
        pp.row = add_kld_row, pp.row_user = &k;
        pp.progress = on_kld_chunk, pp.user = &k;
    } else if (base_path) {
        int64_t n_chunk = n_tok / n_ctx;
        if (max_chunks > 0 && max_chunks < n_chunk) n_chunk = max_chunks;
        if (kvt_kld_writer_open(base_path, (int32_t)n_ctx, n_vocab, (int32_t)n_chunk, ids, &writer, &err)) {
            fprintf(stderr, "kvtier perplexity: %s\n", err.msg);
            goto done;
        }
        pp.row = put_base_row, pp.row_user = writer;
    }
    kvt_ppl_result res;
    double t0 = kvt_time_ms();
    kvt_status st = kvt_perplexity_ex(ctx, kld ? kvt_kld_base_tokens(k.base) : ids, n_tok, &pp, &res, &err);
    if (!st && writer) {
        st = kvt_kld_writer_finish(writer, true, &err);
        writer = NULL;
    }
    if (st) {
        fprintf(stderr, "%skvtier perplexity: %s\n", json ? "" : "\n", err.msg);
        goto done;
    }
    const double ppl = res.ppl;
    const int64_t n_chunks = res.n_chunks, count = res.n_scored;
    double ms = kvt_time_ms() - t0;
    kvt_kld_summary sum;
    if (kld) kvt_kld_summarize(&k.stats, &sum);
    if (json) {
        kvt_json j;
        kvt_json_init(&j, stdout);
        kvt_json_obj_begin(&j);
        if (kld) {
            json_kld(&j, &sum);
        } else {
            kvt_json_kv_num(&j, "ppl", ppl);
            kvt_json_kv_num(&j, "ppl_err", res.ppl_err);
        }
        kvt_json_kv_int(&j, "n_chunks", n_chunks);
        kvt_json_kv_int(&j, "n_tokens", n_tok);
        kvt_json_kv_int(&j, "n_ctx", n_ctx);
        if (stride) kvt_json_kv_int(&j, "ppl_stride", stride);
        kvt_json_kv_int(&j, "n_scored", count);
        kvt_json_kv_num(&j, "ms", ms);
        cli_json_sparse(&j, ctx, false);
        kvt_json_obj_end(&j);
    } else if (kld) {
        fprintf(stderr, "\n");
        print_kld(&sum);
        printf("(%lld chunks of %lld tokens from %s, %lld positions, %.1f s)\n", (long long)n_chunks, (long long)n_ctx,
               base_path, (long long)count, ms / 1e3);
    } else {
        fprintf(stderr, "\n");
        printf("Final estimate: PPL = %.4f +/- %.5f (%lld chunks of %lld tokens", ppl, res.ppl_err, (long long)n_chunks,
               (long long)kvt_perplexity_window(n_ctx, stride));
        if (stride) printf(" every %lld", (long long)stride);
        printf(", %lld tokens in text, %.1f s)\n", (long long)n_tok, ms / 1e3);
        if (base_path) printf("saved the log-probabilities of %lld positions to %s\n", (long long)count, base_path);
    }
    rc = 0;
done:
    kvt_kld_writer_finish(writer, false, NULL);
    kvt_kld_base_close(k.base);
    kvt_kld_stats_free(&k.stats);
    free(k.words);
    kvt_context_free(ctx);
    free(ids);
    free(text);
    kvt_tokenizer_free(tok);
    kvt_model_free(model);
    return rc;
}
