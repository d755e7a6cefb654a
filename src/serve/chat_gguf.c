// chat_gguf.c - the chat template of a model file (kvt_chat_template_from_gguf, chat_template.h).
#include <stdlib.h>
#include <string.h>

#include "../gguf/gguf.h"
#include "chat_template.h"

// Text of token `id_key`'s id in tokenizer.ggml.tokens, malloc'ed into *out; *out NULL when the
// model has no such id.
static kvt_status token_text(const kvt_gguf *g, const char *id_key, char **out, kvt_err *err) {
    *out = NULL;
    int64_t id;
    if (kvt_gguf_get_i64(g, id_key, &id, err) != KVT_OK) return KVT_OK; // absent: no such token
    kvt_gguf_arr arr;
    if (kvt_gguf_get_arr(g, "tokenizer.ggml.tokens", &arr, err) != KVT_OK || arr.type != KVT_GGUF_STRING)
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: tokenizer.ggml.tokens missing or not strings", kvt_gguf_path(g));
    if (id < 0 || (uint64_t)id >= arr.n)
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: %s = %lld is outside the vocabulary of %llu tokens",
                          kvt_gguf_path(g), id_key, (long long)id, (unsigned long long)arr.n);
    kvt_str s = kvt_gguf_arr_str(g, &arr, (uint64_t)id);
    if (!(*out = strndup(s.ptr, s.len))) return kvt_errorf(err, KVT_ERR_NOMEM, "chat template: out of memory");
    return KVT_OK;
}

kvt_status kvt_chat_template_from_gguf(const kvt_gguf *g, const char *name, kvt_chat_template **out, bool *fallback,
                                       kvt_err *err) {
    *out = NULL;
    if (fallback) *fallback = false;
    char *text = NULL, *bos = NULL, *eos = NULL;
    kvt_str s;
    kvt_status st = KVT_OK;
    if (kvt_gguf_get_str(g, "tokenizer.chat_template", &s, NULL) == KVT_OK && !(text = strndup(s.ptr, s.len)))
        st = kvt_errorf(err, KVT_ERR_NOMEM, "chat template: out of memory");
    if (st == KVT_OK) st = token_text(g, "tokenizer.ggml.bos_token_id", &bos, err);
    if (st == KVT_OK) st = token_text(g, "tokenizer.ggml.eos_token_id", &eos, err);
    if (st == KVT_OK) {
        kvt_chat_tokens tok = {bos, eos, NULL};
        if (!name && (!text || !*text)) {
            name = "chatml";
            if (fallback) *fallback = true;
        }
        st = kvt_chat_template_create(text, name, &tok, out, err);
        if (st != KVT_OK) kvt_err_prefix(err, kvt_gguf_path(g));
    }
    free(text);
    free(bos);
    free(eos);
    return st;
}
