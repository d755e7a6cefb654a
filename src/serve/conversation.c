// conversation.c - a multi-turn chat over one context (conversation.h).
#include "conversation.h"

#include <stdlib.h>
#include <string.h>

#include "../base/grow.h"

typedef struct {
    char *p;
    size_t len, cap;
} text_buf;

struct kvt_conversation {
    kvt_context *ctx;
    const kvt_tokenizer *tok;
    const kvt_chat_template *tmpl;
    int64_t n_align;
    // the messages: [n_msgs] roles (static strings) and contents (owned); msgs[0] the system message when given
    kvt_chat_msg *msgs;
    size_t n_msgs, cap_msgs;
    // the tokens whose KV the context holds, in position order: held[0, n_held); of them the first n_prompted came
    // from a prompt pass (the last turn's prompt), the rest from decoding the reply
    int32_t *held;
    int64_t n_held, n_prompted;
    size_t cap_held;
    // the most positions the context held since it was last cleared: a paged store frees a sliding-window layer's
    // blocks that its window left behind (kv_paged.c: shard_slide), up to (past_max - window) / block blocks
    int64_t past_max;
    // this turn's reply: its pieces' text (reply.p NUL-terminated), and the user's callback
    text_buf reply;
    char *piece;
    size_t piece_cap;
    bool oom;
    kvt_token_cb cb;
    void *user;
};

kvt_conversation_params kvt_conversation_params_default(void) { return (kvt_conversation_params){NULL, 0}; }

static bool text_add(text_buf *b, const char *s, size_t n) {
    if (!kvt_grow((void **)&b->p, &b->cap, b->len + n + 1, 1)) return false;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

// Appends a message (content copied); false when out of memory.
static bool msg_push(kvt_conversation *c, const char *role, const char *content) {
    char *copy = kvt_grow((void **)&c->msgs, &c->cap_msgs, c->n_msgs + 1, sizeof *c->msgs) ? strdup(content) : NULL;
    if (!copy) return false;
    c->msgs[c->n_msgs++] = (kvt_chat_msg){role, copy};
    return true;
}

static void msg_pop(kvt_conversation *c) { free((char *)c->msgs[--c->n_msgs].content); }

kvt_status kvt_conversation_init(kvt_context *ctx, const kvt_tokenizer *tok, const kvt_chat_template *tmpl,
                                 const kvt_conversation_params *p, kvt_conversation **out, kvt_err *err) {
    *out = NULL;
    kvt_conversation *c = calloc(1, sizeof *c);
    if (!c) return kvt_errorf(err, KVT_ERR_NOMEM, "conversation: out of memory");
    c->ctx = ctx;
    c->tok = tok;
    c->tmpl = tmpl;
    c->n_align = p ? p->n_align : 0;
    c->n_held = -1; // unknown: the first turn clears the context
    if (p && p->system && !msg_push(c, "system", p->system)) {
        kvt_conversation_free(c);
        return kvt_errorf(err, KVT_ERR_NOMEM, "conversation: out of memory");
    }
    *out = c;
    return KVT_OK;
}

void kvt_conversation_free(kvt_conversation *c) {
    if (!c) return;
    while (c->n_msgs) msg_pop(c);
    free(c->msgs);
    free(c->held);
    free(c->reply.p);
    free(c->piece);
    free(c);
}

// kvt_generate's callback: the token's piece joins the reply (not an end-of-generation token's), then the user's.
static bool on_token(void *user, int32_t id) {
    kvt_conversation *c = user;
    if (!kvt_token_is_eog(c->tok, id)) {
        for (;;) {
            const int64_t n = kvt_token_to_piece(c->tok, id, c->piece, (int64_t)c->piece_cap);
            if (n <= (int64_t)c->piece_cap) {
                if (n > 0 && !text_add(&c->reply, c->piece, (size_t)n)) c->oom = true;
                break;
            }
            char *b = realloc(c->piece, (size_t)n);
            if (!b) {
                c->oom = true;
                break;
            }
            c->piece = b;
            c->piece_cap = (size_t)n;
        }
    }
    if (c->oom) return false;
    return c->cb ? c->cb(c->user, id) : true;
}

int32_t *kvt_chat_prompt_ids(const kvt_tokenizer *tok, const char *text, size_t len, int64_t *n, kvt_err *err) {
    *n = 0;
    int64_t k = kvt_tokenize(tok, text, len, false, true, NULL, 0, err);
    if (k < 0) return NULL;
    int32_t *ids = malloc((size_t)(k + 2) * sizeof *ids); // the BOS, and one more for the caller
    if (!ids) {
        kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a prompt of %lld tokens", (long long)k);
        return NULL;
    }
    if ((k = kvt_tokenize(tok, text, len, false, true, ids, k, err)) < 0) {
        free(ids);
        return NULL;
    }
    // llama-server strips a leading BOS text from the rendered prompt and tokenizes with BOS as the model asks
    // (common_chat_templates_apply, tokenize_input_prompts): the same ids
    const int32_t bos = kvt_token_bos(tok);
    if (bos >= 0 && kvt_tokenizer_add_bos(tok) && (k == 0 || ids[0] != bos)) {
        memmove(ids + 1, ids, (size_t)k * sizeof *ids);
        ids[0] = bos;
        k++;
    }
    *n = k;
    return ids;
}

// The rendered conversation with its generation prompt, tokenized: malloc'ed ids, *n their count; NULL on error.
static int32_t *render_ids(const kvt_conversation *c, int64_t *n, kvt_err *err) {
    char *text = NULL;
    size_t len = 0;
    *n = 0;
    if (kvt_chat_template_apply(c->tmpl, c->msgs, c->n_msgs, true, &text, &len, err)) return NULL;
    int32_t *ids = kvt_chat_prompt_ids(c->tok, text, len, n, err);
    free(text);
    return ids;
}

kvt_status kvt_conversation_turn(kvt_conversation *c, const char *text, const kvt_generate_params *p, kvt_token_cb cb,
                                 void *user, const char **reply, kvt_conversation_stats *st, kvt_err *err) {
    memset(st, 0, sizeof *st);
    if (reply) *reply = NULL;
    if (!msg_push(c, "user", text)) return kvt_errorf(err, KVT_ERR_NOMEM, "conversation: out of memory");
    int64_t n = 0;
    int32_t *ids = render_ids(c, &n, err);
    int32_t *out = NULL;
    kvt_status s = ids ? KVT_OK : err->status ? err->status : KVT_ERR_NOMEM;
    const int64_t n_ctx = kvt_context_n_ctx(c->ctx);
    if (!s && n == 0) s = kvt_errorf(err, KVT_ERR_INVALID_ARG, "conversation: the rendered conversation has no tokens");
    if (!s && n >= n_ctx) {
        s = kvt_errorf(err, KVT_ERR_BUDGET,
                       "the conversation (%lld tokens with this message) leaves no room for a reply in the context of "
                       "%lld tokens (-c)", (long long)n, (long long)n_ctx);
    }
    // the longest prefix of the tokens that the context holds already, short of the prompt's tail the context must
    // compute (the last token's logits choose the first reply token; asyncspade's query window refills its query
    // history). Under sparse decoding a reply's KV rows came from sparse attention where a prompt pass computes them
    // densely: only the last prompt's positions are kept, so that the reply is still generate's.
    int64_t keep = 0, limit = kvt_context_prompt_cacheable(c->ctx, n);
    if (kvt_context_sparse(c->ctx) && limit > c->n_prompted) limit = c->n_prompted;
    if (!s && c->n_held >= 0) {
        while (keep < c->n_held && keep < limit && c->held[keep] == ids[keep]) keep++;
    }
    // a sliding-window layer: the first new position's window must not reach blocks a paged store freed (the append
    // would be refused: a store must not change the outcome), so then nothing is kept, whatever the store
    if (keep > 0 && keep < c->past_max) {
        const kvt_hparams *hp = &kvt_context_model(c->ctx)->hp;
        const int64_t bt = kvt_context_kv_block(c->ctx) > 0 ? kvt_context_kv_block(c->ctx) : 1;
        for (int32_t l = 0; keep > 0 && l < hp->n_layer; l++) {
            const int64_t w = kvt_hparams_layer_window(hp, l);
            const int64_t freed = w > 0 && c->past_max > w ? (c->past_max - w) / bt * bt : 0;
            if (freed > 0 && keep - w + 1 < freed) keep = 0;
        }
    }
    kvt_generate_params gp = *p;
    if (gp.n_predict < 0 || gp.n_predict > n_ctx - n) gp.n_predict = n_ctx - n;
    if (!s && !(out = malloc((size_t)(gp.n_predict + 1) * sizeof *out))) {
        s = kvt_errorf(err, KVT_ERR_NOMEM, "conversation: out of memory");
    }
    if (!s && !kvt_grow((void **)&c->held, &c->cap_held, (size_t)(n + gp.n_predict), sizeof *c->held)) {
        s = kvt_errorf(err, KVT_ERR_NOMEM, "conversation: out of memory");
    }
    const bool ran = !s;
    if (!s) {
        kvt_context_truncate(c->ctx, keep);
        if (keep == 0) c->past_max = 0; // (a cleared store holds no freed blocks)
        c->reply.len = 0;
        c->oom = false;
        c->cb = cb;
        c->user = user;
        kvt_generate_stats gs;
        s = kvt_generate_cached(c->ctx, c->tok, ids, n, keep, c->n_align, &gp, out, NULL, on_token, c, &gs, err);
        if (!s && c->oom) s = kvt_errorf(err, KVT_ERR_NOMEM, "conversation: out of memory for the reply");
        if (!s && !text_add(&c->reply, "", 0)) s = kvt_errorf(err, KVT_ERR_NOMEM, "conversation: out of memory");
        if (!s && !msg_push(c, "assistant", c->reply.p)) s = kvt_errorf(err, KVT_ERR_NOMEM, "conversation: out of memory");
        if (!s) {
            // the context holds the prompt and the reply tokens that were decoded (the last one never is)
            memcpy(c->held, ids, (size_t)n * sizeof *ids);
            memcpy(c->held + n, out, (size_t)gs.n_gen * sizeof *out);
            c->n_held = kvt_context_n_past(c->ctx);
            c->n_prompted = n;
            if (c->n_held > c->past_max) c->past_max = c->n_held;
            *st = (kvt_conversation_stats){n, keep, gs.n_gen, gs.prefill_ms, gs.decode_ms, gs.hit_eog};
            if (reply) *reply = c->reply.p;
        }
    }
    if (s) { // the conversation as before the call; a context that ran part of the turn is cleared
        msg_pop(c);
        if (ran) {
            kvt_context_truncate(c->ctx, 0);
            c->n_held = c->n_prompted = c->past_max = 0;
        }
    }
    free(ids);
    free(out);
    return s;
}
