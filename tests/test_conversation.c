// test_conversation.c - `kvtier chat`'s conversation (src/serve/conversation.h): every turn's reply is, token for
// token, that of a fresh context generating from the whole rendered conversation; earlier turns' KV is kept; a turn
// that does not fit leaves the conversation as it was. Part of the chat suite.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/gguf/gguf.h"
#include "../src/model/model.h"
#include "../src/serve/conversation.h"
#include "test.h"
#include "test_util.h"

typedef struct {
    int32_t ids[64];
    int n;
} id_log;

static bool log_token(void *user, int32_t id) {
    id_log *l = user;
    if (l->n < 64) l->ids[l->n++] = id;
    return true;
}

// Greedy generation on a fresh context from msgs rendered whole: the ids into *l.
static bool reference(const kvt_model *m, const kvt_tokenizer *tok, const kvt_chat_template *t, const kvt_chat_msg *msgs,
                      size_t n_msgs, const kvt_context_params *cp, const kvt_generate_params *gp, id_log *l, kvt_err *err) {
    char *text = NULL;
    size_t len = 0;
    kvt_context *ctx = NULL;
    int32_t *ids = NULL, out[64];
    int64_t n = 0;
    kvt_generate_stats gs;
    l->n = 0;
    bool ok = !kvt_chat_template_apply(t, msgs, n_msgs, true, &text, &len, err) &&
              (ids = kvt_chat_prompt_ids(tok, text, len, &n, err));
    ok = ok && n > 0 && !kvt_context_init(m, cp, &ctx, err) &&
         !kvt_generate(ctx, tok, ids, n, gp, out, NULL, log_token, l, &gs, err);
    kvt_context_free(ctx);
    free(ids);
    free(text);
    return ok;
}

// A model, its chat template (tmpl NULL: the GGUF's) and a conversation over a fresh context of cp.
typedef struct {
    kvt_model *m;
    kvt_tokenizer *tok;
    kvt_gguf *g;
    kvt_chat_template *t;
    kvt_context *ctx;
    kvt_conversation *c;
} rig;

static bool rig_open(rig *r, const char *path, const kvt_context_params *cp, const char *tmpl, const char *system,
                     kvt_err *err) {
    memset(r, 0, sizeof *r);
    kvt_conversation_params vp = kvt_conversation_params_default();
    vp.system = system;
    vp.n_align = cp->n_ubatch;
    return !kvt_model_load(path, false, &r->m, err) && !kvt_tokenizer_init(r->m->gguf, &r->tok, err) &&
           !kvt_gguf_open(path, &r->g, err) && !kvt_chat_template_from_gguf(r->g, tmpl, &r->t, NULL, err) &&
           !kvt_context_init(r->m, cp, &r->ctx, err) && !kvt_conversation_init(r->ctx, r->tok, r->t, &vp, &r->c, err);
}

static void rig_close(rig *r) {
    kvt_conversation_free(r->c);
    kvt_context_free(r->ctx);
    kvt_chat_template_free(r->t);
    kvt_gguf_free(r->g);
    kvt_tokenizer_free(r->tok);
    kvt_model_free(r->m);
}

static void conversation_case(const char *label, const char *path, int64_t n_predict, kvt_sparse_mode sparse) {
    char name[256];
    snprintf(name, sizeof name, "chat.conversation (%s): 3 turns, each = generate on the whole rendered conversation; earlier KV kept", label);
    kvt_err err = {0};
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 512;
    cp.n_threads = 2;
    if (sparse != KVT_SPARSE_OFF) { // a small budget, so that selection matters; the paged store sparse decoding reads
        cp.kv_paged = true;
        cp.kv_block = 8;
        cp.sparse.mode = sparse;
        cp.sparse.budget = 24;
        cp.sparse.sink = 2;
        cp.sparse.recent = 4;
        if (sparse == KVT_SPARSE_QUEST) cp.sparse.page = 4;
        else cp.sparse.window = 4;
    }
    kvt_generate_params gp = kvt_generate_params_default();
    gp.sampling.temp = 0;
    gp.n_predict = n_predict;
    const char *system = "Answer in one short sentence.";
    rig r;
    bool ok = rig_open(&r, path, &cp, NULL, system, &err);
    kvt_model *m = r.m;
    kvt_tokenizer *tok = r.tok;
    kvt_chat_template *t = r.t;
    kvt_conversation *c = r.c;
    static const char *const user[3] = {"Hello! Who are you?", "Tell me a story about a cat.", "Thanks, and one more?"};
    kvt_chat_msg msgs[8] = {{"system", system}};
    char *replies[3] = {0};
    size_t n_msgs = 1;
    char why[KVT_ERR_MSG_MAX + 128] = "";
    for (int k = 0; ok && k < 3; k++) {
        id_log got = {0}, want = {0};
        const char *reply = NULL;
        kvt_conversation_stats st;
        ok = !kvt_conversation_turn(c, user[k], &gp, log_token, &got, &reply, &st, &err);
        msgs[n_msgs++] = (kvt_chat_msg){"user", user[k]};
        ok = ok && reference(m, tok, t, msgs, n_msgs, &cp, &gp, &want, &err);
        if (ok && (got.n != want.n || memcmp(got.ids, want.ids, (size_t)got.n * sizeof got.ids[0]) != 0)) {
            snprintf(why, sizeof why, "turn %d: %d ids against %d, first ids %d / %d", k + 1, got.n, want.n,
                     got.n ? got.ids[0] : -1, want.n ? want.ids[0] : -1);
            ok = false;
        }
        if (ok && k > 0 && st.n_reused < 8) {
            snprintf(why, sizeof why, "turn %d kept %lld positions of %lld", k + 1, (long long)st.n_reused, (long long)st.n_tokens);
            ok = false;
        }
        if (ok && st.n_gen != got.n) {
            snprintf(why, sizeof why, "turn %d: stats n_gen %lld, %d ids", k + 1, (long long)st.n_gen, got.n);
            ok = false;
        }
        replies[k] = ok ? strdup(reply) : NULL;
        msgs[n_msgs++] = (kvt_chat_msg){"assistant", replies[k] ? replies[k] : ""};
    }
    test_result(ok, name, "%s%s", why, why[0] ? "" : err.msg);

    // a message that does not fit: refused, named; the conversation and its KV as they were
    snprintf(name, sizeof name, "chat.conversation (%s): a message past the context is refused, named; the next turn as if it was never sent", label);
    bool ok2 = ok;
    if (ok2) {
        char *big = malloc(8000);
        for (int i = 0; i < 7999; i++) big[i] = "ab cd "[i % 6];
        big[7999] = 0;
        kvt_conversation_stats st;
        const kvt_status s = kvt_conversation_turn(c, big, &gp, NULL, NULL, NULL, &st, &err);
        free(big);
        ok2 = s == KVT_ERR_BUDGET && strstr(err.msg, "context of 512");
        if (!ok2) snprintf(why, sizeof why, "status %d: %s", s, err.msg);
        id_log got = {0}, want = {0};
        ok2 = ok2 && !kvt_conversation_turn(c, "Bye.", &gp, log_token, &got, NULL, &st, &err);
        msgs[n_msgs++] = (kvt_chat_msg){"user", "Bye."};
        ok2 = ok2 && reference(m, tok, t, msgs, n_msgs, &cp, &gp, &want, &err) && got.n == want.n &&
              !memcmp(got.ids, want.ids, (size_t)got.n * sizeof got.ids[0]) && st.n_reused > 16;
        if (!ok2 && !why[0]) snprintf(why, sizeof why, "%d ids against %d, kept %lld: %s", got.n, want.n, (long long)st.n_reused, err.msg);
    }
    test_result(ok2, name, "%s", why);
    for (int k = 0; k < 3; k++) free(replies[k]);
    rig_close(&r);
}

// Turns over a context of cp (a store, sparse decode attention), template tmpl (NULL: the GGUF's), each reply equal to
// the reference's on a fresh context of the same cp. false with why filled on a difference or an error.
static bool turns_equal(const char *path, const kvt_context_params *cp, const char *tmpl, const char *system,
                        const char *const *user, int n_turns, int64_t n_predict, char *why, size_t why_cap) {
    kvt_err err = {0};
    kvt_generate_params gp = kvt_generate_params_default();
    gp.sampling.temp = 0;
    gp.n_predict = n_predict;
    rig r;
    bool ok = rig_open(&r, path, cp, tmpl, system, &err);
    kvt_chat_msg msgs[16];
    char *replies[8] = {0};
    size_t n_msgs = 0;
    if (system) msgs[n_msgs++] = (kvt_chat_msg){"system", system};
    snprintf(why, why_cap, "%s", ok ? "" : err.msg);
    for (int k = 0; ok && k < n_turns && k < 8; k++) {
        id_log got = {0}, want = {0};
        const char *reply = NULL;
        kvt_conversation_stats st;
        if (kvt_conversation_turn(r.c, user[k], &gp, log_token, &got, &reply, &st, &err)) {
            snprintf(why, why_cap, "turn %d: %s", k + 1, err.msg);
            ok = false;
            break;
        }
        msgs[n_msgs++] = (kvt_chat_msg){"user", user[k]};
        if (!reference(r.m, r.tok, r.t, msgs, n_msgs, cp, &gp, &want, &err)) {
            snprintf(why, why_cap, "reference of turn %d: %s", k + 1, err.msg);
            ok = false;
            break;
        }
        if (got.n != want.n || memcmp(got.ids, want.ids, (size_t)got.n * sizeof got.ids[0]) != 0) {
            int d = 0;
            while (d < got.n && d < want.n && got.ids[d] == want.ids[d]) d++;
            snprintf(why, why_cap, "turn %d (%lld of %lld positions kept): %d ids against %d, first difference at %d",
                     k + 1, (long long)st.n_reused, (long long)st.n_tokens, got.n, want.n, d);
            ok = false;
        }
        replies[k] = strdup(reply);
        msgs[n_msgs++] = (kvt_chat_msg){"assistant", replies[k] ? replies[k] : ""};
    }
    for (int k = 0; k < 8; k++) free(replies[k]);
    rig_close(&r);
    return ok;
}

// Gemma 3's sliding-window layers on a paged store (which frees the blocks a window left behind), and a template that
// moves the system message into the last user turn (mistral-v3-tekken), so a turn keeps only the first positions:
// the first new position's window reaches freed blocks; the turn must still run, with the in-memory run's reply.
static void sliding_window_case(void) {
    const char *gemma = getenv("KVT_GEMMA3");
    const char *name = "chat.conversation (Gemma 3, paged store with --kv-block 16): a turn that keeps less than its "
                       "sliding windows' freed blocks recomputes, the replies those of generate";
    if (!gemma || !test_file_exists(gemma)) {
        test_skip(name, "Gemma 3 GGUF absent (make model-gemma3, KVT_GEMMA3)");
        return;
    }
    char first[4096] = "Summarize: ";
    for (int i = 0; i < 90; i++) strcat(first, "the cat sat on the mat and ");
    const char *const user[2] = {first, "Thanks."};
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 1024;
    cp.n_threads = 2;
    cp.kv_block = 16;
    cp.kv_host_bytes = 64 << 20;
    char why[KVT_ERR_MSG_MAX + 128];
    test_result(turns_equal(gemma, &cp, "mistral-v3-tekken", "Be brief.", user, 2, 8, why, sizeof why), name, "%s", why);
}

// `kvtier chat --json` through a pipe: one object a turn, the second keeps the first's KV.
static void cli_case(const test_env *env) {
    const char *name = "chat.kvtier chat: two lines on stdin, two JSON turns, the second keeps the first's KV";
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "printf 'Hello there\\n\\nOne more?\\n' | timeout 120 %s chat -m tests/data/stories260K.gguf "
             "--temp 0 -n 6 --json 2>/dev/null", env->cli);
    const int rc = test_run(cmd, out, sizeof out);
    const char *t2 = strstr(out, "\"turn\": 2");
    if (!t2) t2 = strstr(out, "\"turn\":2");
    const char *r = t2 ? strstr(t2, "\"n_reused\"") : NULL;
    const long reused = r ? strtol(r + strcspn(r, "0123456789"), NULL, 10) : 0;
    test_result(rc == 0 && t2 && !strstr(t2, "\"turn\": 3") && reused > 8, name, "exit %d, kept %ld: %.400s", rc, reused, out);
}

// `kvtier chat` goes on past a message it cannot answer (past the context; a NUL byte), naming each, and exits 1.
static void cli_refused_case(const test_env *env) {
    const char *name = "chat.kvtier chat: a message past the context and one with a NUL byte are refused by name, the "
                       "conversation goes on (its KV kept), exit 1";
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "(printf 'hello\\n'; yes 'ab cd' | head -n 2000 | tr '\\n' ' '; printf '\\nx\\0y\\nagain\\n') | "
             "timeout 120 %s chat -m tests/data/stories260K.gguf --temp 0 -n 4 --json 2>/dev/null", env->cli);
    const int rc = test_run(cmd, out, sizeof out);
    const char *t2 = strstr(out, "\"turn\":2,\"error\"");
    const char *t3 = strstr(out, "\"turn\":3,\"error\"");
    const char *t4 = strstr(out, "\"turn\":4,\"reply\"");
    const char *r = t4 ? strstr(t4, "\"n_reused\"") : NULL;
    const long reused = r ? strtol(r + strcspn(r, "0123456789"), NULL, 10) : 0;
    test_result(rc == 1 && t2 && strstr(t2, "no room for a reply") && t3 && strstr(t3, "NUL byte") && reused > 8, name,
                "exit %d, turn 4 kept %ld: %.600s", rc, reused, out);
}

void test_chat_conversation(const test_env *env) {
    conversation_case("stories260K, chatml by fallback", "tests/data/stories260K.gguf", 12, KVT_SPARSE_OFF);
    // sparse decoding: a reply's KV rows come from sparse attention, a prefill's from dense, and asyncspade's query
    // history needs its window recomputed: the turn recomputes them, so the replies are still generate's
    conversation_case("stories260K, quest", "tests/data/stories260K.gguf", 12, KVT_SPARSE_QUEST);
    conversation_case("stories260K, asyncspade", "tests/data/stories260K.gguf", 12, KVT_SPARSE_ASYNCSPADE);
    if (test_file_exists(env->smollm2)) conversation_case("SmolLM2, its chatml template", env->smollm2, 24, KVT_SPARSE_OFF);
    else test_skip("chat.conversation (SmolLM2)", "SmolLM2 GGUF absent (make model)");
    sliding_window_case();
    cli_case(env);
    cli_refused_case(env);
}
