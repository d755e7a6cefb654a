// cmd_chat.c - `kvtier chat`: a conversation on the terminal (or through a pipe), one user message a line, the
// model's chat template applied, the KV of earlier turns kept (src/serve/conversation.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/json.h"
#include "../base/timer.h"
#include "../serve/conversation.h"
#include "commands.h"
#include "common.h"

static const char *k_help =
    "usage: kvtier chat -m MODEL [-p FIRST_MESSAGE | -f FILE] [options] [engine flags]\n"
    "  Reads the user's messages from stdin, one a line (\"> \" is shown when stdin is a terminal), and answers\n"
    "  each with the model's chat template applied to the whole conversation; the KV of earlier turns is kept,\n"
    "  so a turn decodes only its new tokens (the replies are those of `generate` on the rendered conversation).\n"
    "  A message past the context or holding a NUL byte is refused by name and the conversation goes on without\n"
    "  it (exit 1 at the end).\n"
    "  -p TEXT / -f FILE     the first user message (then stdin's lines)\n" CLI_ESCAPE_HELP
    "  --system TEXT         the system message (default: none, or the template's own)\n"
    "  --chat-template NAME  the prompt format instead of the GGUF's tokenizer.chat_template\n"
    "                        (chatml llama3 llama3.1 llama2 mistral-v0 mistral-v1 mistral-v3-tekken gemma phi3)\n"
    "  -n N                  tokens a reply at most (default: until end-of-generation or the context's end)\n"
    "  -c N                  context of the whole conversation (default: the training context, at most 4096)\n"
    CLI_SAMPLING_HELP
    "  --json                one JSON object a turn (reply, tokens, reused, timings) instead of the text\n"
    CLI_PROGRESS_HELP;

typedef struct {
    const kvt_tokenizer *tok;
    char *piece;
    size_t cap;
} print_ctx;

static bool print_token(void *user, int32_t id) {
    print_ctx *p = user;
    if (kvt_token_is_eog(p->tok, id)) return true;
    const int64_t n = cli_token_piece(p->tok, id, &p->piece, &p->cap);
    if (n < 0) return false; // out of memory: stop the reply
    fwrite(p->piece, 1, (size_t)n, stdout);
    fflush(stdout);
    return true;
}

// The next user message from in (a line without its end; empty lines skipped) into *line (getline's buffer), *len
// its bytes; false at the end of the input.
static bool next_message(FILE *in, bool prompt, char **line, size_t *cap, size_t *len) {
    for (;;) {
        if (prompt) {
            fputs("> ", stderr);
            fflush(stderr);
        }
        ssize_t n = getline(line, cap, in);
        if (n < 0) return false;
        while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r')) (*line)[--n] = 0;
        *len = (size_t)n;
        if (n > 0) return true;
    }
}

// A turn that was not answered: the reason on stderr and, with --json, as the turn's object.
static void turn_refused(int64_t turn, bool json, const char *why) {
    fprintf(stderr, "\nkvtier chat: turn %lld: %s\n", (long long)turn, why);
    if (!json) return;
    kvt_json j;
    kvt_json_init(&j, stdout);
    kvt_json_obj_begin(&j);
    kvt_json_kv_int(&j, "turn", turn);
    kvt_json_key(&j, "error");
    kvt_json_strn(&j, why, strlen(why));
    kvt_json_obj_end(&j);
    fflush(stdout);
}

static void json_turn(int64_t turn, const char *reply, const kvt_conversation_stats *st) {
    kvt_json j;
    kvt_json_init(&j, stdout);
    kvt_json_obj_begin(&j);
    kvt_json_kv_int(&j, "turn", turn);
    kvt_json_key(&j, "reply");
    kvt_json_strn(&j, reply, strlen(reply));
    kvt_json_kv_int(&j, "n_tokens", st->n_tokens);
    kvt_json_kv_int(&j, "n_reused", st->n_reused);
    kvt_json_kv_int(&j, "n_gen", st->n_gen);
    kvt_json_kv_bool(&j, "stopped_at_eog", st->hit_eog);
    kvt_json_kv_num(&j, "prefill_ms", st->prefill_ms);
    kvt_json_kv_num(&j, "decode_ms", st->decode_ms);
    kvt_json_obj_end(&j);
    fflush(stdout);
}

static int run_chat(int argc, char **argv, cli_sampling_args *sa) {
    kvt_args a = {"chat", argc, argv, 0};
    cli_input in = {0};
    const char *system = NULL, *tmpl_name = NULL;
    bool json = false;
    kvt_context_params cp = kvt_context_params_default();
    kvt_generate_params gp = kvt_generate_params_default();
    gp.sampling.seed = 1;
    gp.n_predict = -1;
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
            if (!kvt_args_int(&a, flag, 1, 1 << 24, &iv)) return 2;
            gp.n_predict = iv;
        } else if (!strcmp(flag, "--system")) {
            if (!(system = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--chat-template")) {
            if (!(tmpl_name = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--json")) {
            json = true;
        } else {
            kvt_args_unknown(&a, flag);
            return 2;
        }
    }
    if (!in.model_path) {
        fprintf(stderr, "kvtier chat: -m MODEL is required\n%s", k_help);
        return 2;
    }
    char *first_owned = NULL;
    const char *first = NULL;
    size_t first_len = 0;
    if ((in.prompt || in.prompt_file) && !cli_input_prompt("chat", &in, &first, &first_len, &first_owned)) return 1;
    kvt_model *model = NULL;
    kvt_tokenizer *tok = NULL;
    kvt_chat_template *t = NULL;
    kvt_context *ctx = NULL;
    kvt_conversation *conv = NULL;
    char *line = NULL, *first_text = NULL;
    size_t line_cap = 0;
    print_ctx pc = {0};
    int rc = 1;
    kvt_err err = {0};
    kvt_logit_bias *bans = NULL;
    if (!cli_load_model("chat", in.model_path, false, &model, &tok) ||
        !cli_check_logit_bias("chat", sa, model->hp.n_vocab) || !cli_ban_eog("chat", tok, &gp, &bans))
        goto done;
    if (!cli_chat_template("chat", in.model_path, tmpl_name, true, NULL, &t)) goto done;
    if (!in.ctx_given) cp.n_ctx = model->hp.n_ctx_train < 4096 ? model->hp.n_ctx_train : 4096;
    cli_progress prog;
    cli_progress_on(&prog, &cp, !in.no_progress && !json);
    if (!cli_context_init("chat", model, &cp, &ctx)) goto done;
    if (!cli_dry_build("chat", tok, kvt_context_n_ctx(ctx), in.no_escape, &gp, sa)) goto done;
    if (!cli_grammar_build("chat", tok, &gp, sa)) { // (a bad grammar or schema: a bad argument)
        rc = 2;
        goto done;
    }
    kvt_conversation_params vp = kvt_conversation_params_default();
    vp.system = system;
    vp.n_align = cp.n_ubatch > 0 ? cp.n_ubatch : 512; // the context's micro-batch (as kvt_context_init sets it)
    if (kvt_conversation_init(ctx, tok, t, &vp, &conv, &err)) {
        fprintf(stderr, "kvtier chat: %s\n", err.msg);
        goto done;
    }
    if (first && !(first_text = strndup(first, first_len))) {
        fprintf(stderr, "kvtier chat: out of memory\n");
        goto done;
    }
    pc.tok = tok;
    const bool interactive = isatty(STDIN_FILENO) && !json;
    bool refused = false; // a turn was not answered: exit 1 at the end (the conversation goes on without it)
    for (int64_t turn = 1;; turn++) {
        const char *msg = turn == 1 && first_text ? first_text : NULL;
        size_t len = 0;
        if (!msg && !next_message(stdin, interactive, &line, &line_cap, &len)) break;
        if (!msg) msg = line;
        const char *raw = msg == line ? line : first; // -p / -f: the text as given (first_text stops at a NUL)
        const char *nul = memchr(raw, 0, msg == line ? len : first_len);
        if (nul) {
            char why[96];
            snprintf(why, sizeof why, "the message holds a NUL byte at byte %zu: not sent", (size_t)(nul - raw));
            turn_refused(turn, json, why);
            refused = true;
            continue;
        }
        const char *reply = NULL;
        kvt_conversation_stats st;
        prog.t0_ms = kvt_time_ms();
        const kvt_status ts = kvt_conversation_turn(conv, msg, &gp, json ? NULL : print_token, &pc, &reply, &st, &err);
        if (ts == KVT_ERR_BUDGET) { // the conversation is as before the message: later, shorter ones may still fit
            turn_refused(turn, json, err.msg);
            refused = true;
            continue;
        }
        if (ts) {
            fprintf(stderr, "\nkvtier chat: turn %lld: %s\n", (long long)turn, err.msg);
            goto done;
        }
        if (json) {
            json_turn(turn, reply, &st);
            continue;
        }
        printf("\n");
        fflush(stdout);
        const int64_t n_new = st.n_tokens - st.n_reused, n_dec = st.n_gen > 1 ? st.n_gen - 1 : 0;
        fprintf(stderr, "kvtier: turn %lld: %lld new prompt tokens (%lld of the conversation's KV kept) in %.1f ms, "
                        "generated %lld tokens, %.2f tok/s\n",
                (long long)turn, (long long)n_new, (long long)st.n_reused, st.prefill_ms, (long long)st.n_gen,
                st.decode_ms > 0 ? (double)n_dec / (st.decode_ms / 1e3) : 0.0);
    }
    rc = refused ? 1 : 0;
done:
    free(bans);
    free(pc.piece);
    free(line);
    free(first_text);
    kvt_conversation_free(conv);
    kvt_context_free(ctx);
    kvt_chat_template_free(t);
    kvt_tokenizer_free(tok);
    kvt_model_free(model);
    free(first_owned);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    cli_sampling_args sa = {.n = 0};
    const int rc = run_chat(argc, argv, &sa);
    cli_sampling_args_free(&sa);
    return rc;
}
