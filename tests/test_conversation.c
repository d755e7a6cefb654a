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

static void conversation_case(const char *label, const char *path, int64_t n_predict, kvt_sparse_mode sparse) {
    char name[256];
    snprintf(name, sizeof name, "chat.conversation (%s): 3 turns, each = generate on the whole rendered conversation; earlier KV kept", label);
    kvt_model *m = NULL;
    kvt_tokenizer *tok = NULL;
    kvt_gguf *g = NULL;
    kvt_chat_template *t = NULL;
    kvt_context *ctx = NULL;
    kvt_conversation *c = NULL;
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
    kvt_conversation_params vp = kvt_conversation_params_default();
    vp.system = "Answer in one short sentence.";
    bool ok = !kvt_model_load(path, false, &m, &err) && !kvt_tokenizer_init(m->gguf, &tok, &err) &&
              !kvt_gguf_open(path, &g, &err) && !kvt_chat_template_from_gguf(g, NULL, &t, NULL, &err) &&
              !kvt_context_init(m, &cp, &ctx, &err) && !kvt_conversation_init(ctx, tok, t, &vp, &c, &err);
    static const char *const user[3] = {"Hello! Who are you?", "Tell me a story about a cat.", "Thanks, and one more?"};
    kvt_chat_msg msgs[8] = {{"system", vp.system}};
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
    kvt_conversation_free(c);
    kvt_context_free(ctx);
    kvt_chat_template_free(t);
    kvt_gguf_free(g);
    kvt_tokenizer_free(tok);
    kvt_model_free(m);
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

void test_chat_conversation(const test_env *env) {
    conversation_case("stories260K, chatml by fallback", "tests/data/stories260K.gguf", 12, KVT_SPARSE_OFF);
    // sparse decoding: a reply's KV rows come from sparse attention, a prefill's from dense, and asyncspade's query
    // history needs its window recomputed: the turn recomputes them, so the replies are still generate's
    conversation_case("stories260K, quest", "tests/data/stories260K.gguf", 12, KVT_SPARSE_QUEST);
    conversation_case("stories260K, asyncspade", "tests/data/stories260K.gguf", 12, KVT_SPARSE_ASYNCSPADE);
    if (test_file_exists(env->smollm2)) conversation_case("SmolLM2, its chatml template", env->smollm2, 24, KVT_SPARSE_OFF);
    else test_skip("chat.conversation (SmolLM2)", "SmolLM2 GGUF absent (make model)");
    cli_case(env);
}
