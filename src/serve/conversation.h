// conversation.h - a multi-turn chat over one context (`kvtier chat`): each turn renders the whole conversation
// with the model's chat template, keeps the KV of the longest token prefix the context already holds, decodes the
// rest and generates the assistant's reply (kvt_generate_cached). So a turn costs the new messages, not the whole
// history, and its tokens are those of `kvtier generate` on the rendered conversation given whole (tested): the
// reuse changes no token. Under sparse decoding (quest, asyncspade) the last reply is computed again too (its KV rows
// came from sparse attention, a prompt's are dense) and asyncspade's query window with it. The reply goes back into the conversation as the text of its tokens' pieces, as a
// client of `kvtier serve` would send it back.
#ifndef KVT_CONVERSATION_H
#define KVT_CONVERSATION_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "../exec/context.h"
#include "../model/tokenizer.h"
#include "../sched/generate.h"
#include "chat_template.h"

// The ids of a rendered chat prompt (len bytes), as llama-server makes them: special-token text parsed, and the BOS
// the model asks for (tokenizer.ggml.add_bos_token) put first where the rendering did not begin with it (chatml on
// Gemma 3; a template that writes the BOS text gets no second one). malloc'ed with room for one id more, *n ids;
// NULL with err filled (KVT_ERR_NOMEM, or kvt_tokenize's error). Used by serve's chat requests and kvtier chat.
int32_t *kvt_chat_prompt_ids(const kvt_tokenizer *tok, const char *text, size_t len, int64_t *n, kvt_err *err);

typedef struct kvt_conversation kvt_conversation; // opaque

typedef struct {
    const char *system; // the system message (copied; NULL: none, the template's default where it has one)
    int64_t n_align;    // the context's micro-batch (kvt_generate_cached's n_align; 0: none)
} kvt_conversation_params;

kvt_conversation_params kvt_conversation_params_default(void);

// One turn's figures.
typedef struct {
    int64_t n_tokens;   // the rendered conversation's tokens (the prompt of this turn)
    int64_t n_reused;   // of them, the positions whose KV the context kept from earlier turns
    int64_t n_gen;      // tokens generated (the end-of-generation token included when it ended the reply)
    double prefill_ms;  // the n_tokens - n_reused new positions
    double decode_ms;
    bool hit_eog;       // the reply ended with an end-of-generation token (else: the -n limit or the context)
} kvt_conversation_stats;

// A conversation over ctx (borrowed, and used by nothing else meanwhile; it should be empty: the first turn
// truncates it to what it can reuse), tok and tmpl (borrowed). Errors: KVT_ERR_NOMEM.
kvt_status kvt_conversation_init(kvt_context *ctx, const kvt_tokenizer *tok, const kvt_chat_template *tmpl,
                                 const kvt_conversation_params *p, kvt_conversation **out, kvt_err *err);
void kvt_conversation_free(kvt_conversation *c);

// Adds the user message `text` (NUL-terminated UTF-8) and generates the reply: at most p->n_predict tokens and
// never past the context's end (p->n_predict < 0: until then). cb (may be NULL) sees each generated token as
// kvt_generate's does. On success the reply is part of the conversation and *reply (may be NULL) points at its text
// (owned by c, valid until the next turn). On an error the conversation is as it was before the call (the user
// message dropped) and the context is cleared; errors: KVT_ERR_BUDGET when the conversation leaves no room for a
// reply in the context (the message names both counts), those of kvt_chat_template_apply, kvt_tokenize and
// kvt_generate_cached.
kvt_status kvt_conversation_turn(kvt_conversation *c, const char *text, const kvt_generate_params *p, kvt_token_cb cb,
                                 void *user, const char **reply, kvt_conversation_stats *st, kvt_err *err);

#endif
