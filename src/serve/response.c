// response.c - OpenAI response and chunk JSON (response.h).
#include "response.h"

#include <math.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "utf8_stream.h"

// A JSON string of s[0..n) with invalid UTF-8 replaced by U+FFFD; NULL when out of memory.
static json_t *jtext(const char *s, size_t n) {
    if (kvt_utf8_valid(s, n)) return json_stringn(s, n);
    char *buf = malloc(KVT_UTF8_OUT_MAX(n));
    if (!buf) return NULL;
    kvt_utf8_stream st = {{0}, 0};
    size_t o = kvt_utf8_stream_push(&st, s, n, buf);
    o += kvt_utf8_stream_flush(&st, buf + o);
    json_t *v = json_stringn(buf, o);
    free(buf);
    return v;
}

static json_t *jbytes(const char *s, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

// Sets key to v (which may be NULL after a failed allocation: then *ok becomes false).
static void set(json_t *obj, const char *key, json_t *v, bool *ok) {
    if (!v || json_object_set_new(obj, key, v) != 0) *ok = false;
}

static void append(json_t *arr, json_t *v, bool *ok) {
    if (!v || json_array_append_new(arr, v) != 0) *ok = false;
}

// {"token", "logprob", "bytes"} of an alternative, and its "id" when ids (llama-server's native shape); probs: "prob",
// the probability, in place of "logprob".
static json_t *chat_alt(const kvt_resp_alt *a, bool ids, bool probs, bool *ok) {
    json_t *o = json_object();
    if (!o) {
        *ok = false;
        return NULL;
    }
    if (ids) set(o, "id", json_integer(a->id), ok);
    set(o, "token", jtext(a->token, a->len), ok);
    if (probs) set(o, "prob", json_real(expf(a->logprob)), ok);
    else set(o, "logprob", json_real(a->logprob), ok);
    set(o, "bytes", jbytes(a->token, a->len), ok);
    return o;
}

json_t *kvt_resp_logprob_list(const kvt_resp_logprob *lps, size_t n, bool ids, bool probs, bool *ok) {
    json_t *content = json_array();
    if (!content) *ok = false;
    for (size_t i = 0; content && i < n; i++) {
        const kvt_resp_logprob *lp = &lps[i];
        json_t *e = chat_alt(&lp->chosen, ids, probs, ok), *top = json_array();
        for (size_t k = 0; top && k < lp->n_top; k++) append(top, chat_alt(&lp->top[k], ids, probs, ok), ok);
        if (e) set(e, probs ? "top_probs" : "top_logprobs", top, ok);
        else json_decref(top);
        append(content, e, ok);
    }
    return content;
}

static json_t *chat_logprobs(const kvt_resp_choice *c, bool *ok) {
    json_t *o = json_object();
    if (!o) *ok = false;
    else set(o, "content", kvt_resp_logprob_list(c->logprobs, c->n_logprobs, false, false, ok), ok);
    return o;
}

static json_t *legacy_logprobs(const kvt_resp_choice *c, bool *ok) {
    json_t *o = json_object(), *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    if (!o) *ok = false;
    for (size_t i = 0; o && i < c->n_logprobs; i++) {
        const kvt_resp_logprob *lp = &c->logprobs[i];
        if (tokens) append(tokens, jtext(lp->chosen.token, lp->chosen.len), ok);
        if (lps) append(lps, json_real(lp->chosen.logprob), ok);
        if (offs) append(offs, json_integer(lp->text_offset), ok);
        json_t *m = json_object();
        for (size_t k = 0; m && k < lp->n_top; k++) {
            json_t *t = jtext(lp->top[k].token, lp->top[k].len);
            if (t) set(m, json_string_value(t), json_real(lp->top[k].logprob), ok);
            else *ok = false;
            json_decref(t);
        }
        if (tops) append(tops, m, ok);
        else json_decref(m);
    }
    if (!o) {
        json_decref(tokens);
        json_decref(lps);
        json_decref(tops);
        json_decref(offs);
        return NULL;
    }
    set(o, "tokens", tokens, ok);
    set(o, "token_logprobs", lps, ok);
    set(o, "top_logprobs", tops, ok);
    set(o, "text_offset", offs, ok);
    return o;
}

static json_t *choice_json(const kvt_resp *r, const kvt_resp_choice *c, bool *ok) {
    json_t *o = json_object();
    if (!o) {
        *ok = false;
        return NULL;
    }
    set(o, "index", json_integer(c->index), ok);
    if (r->kind == KVT_REQ_COMPLETION) {
        set(o, "text", c->text ? jtext(c->text, c->len) : json_string(""), ok);
    } else {
        json_t *m = json_object();
        if (m && (!r->chunk || c->role)) set(m, "role", json_string("assistant"), ok);
        if (m && (c->text || !r->chunk)) set(m, "content", c->text ? jtext(c->text, c->len) : json_string(""), ok);
        set(o, r->chunk ? "delta" : "message", m, ok);
    }
    if (!c->has_logprobs) set(o, "logprobs", json_null(), ok);
    else set(o, "logprobs", r->kind == KVT_REQ_CHAT ? chat_logprobs(c, ok) : legacy_logprobs(c, ok), ok);
    set(o, "finish_reason", c->finish_reason ? json_string(c->finish_reason) : json_null(), ok);
    return o;
}

static json_t *usage_json(const kvt_resp_usage *u, bool *ok) {
    json_t *o = json_object(), *d = json_object();
    if (!o || !d) {
        json_decref(o);
        json_decref(d);
        *ok = false;
        return NULL;
    }
    set(o, "prompt_tokens", json_integer(u->prompt_tokens), ok);
    set(o, "completion_tokens", json_integer(u->completion_tokens), ok);
    set(o, "total_tokens", json_integer(u->prompt_tokens + u->completion_tokens), ok);
    set(d, "cached_tokens", json_integer(u->cached_tokens), ok);
    set(o, "prompt_tokens_details", d, ok);
    return o;
}

static json_t *sparse_json(const kvt_resp_timings *t, bool *ok) {
    json_t *o = json_object();
    if (!o) {
        *ok = false;
        return NULL;
    }
    const double n = t->sparse_steps > 0 ? (double)t->sparse_steps : 1.0;
    set(o, "steps", json_integer(t->sparse_steps), ok);
    set(o, "selected", json_integer(t->sparse_selected), ok);
    set(o, "context", json_integer(t->sparse_context), ok);
    set(o, "selected_frac", json_real(t->sparse_context > 0 ? (double)t->sparse_selected / (double)t->sparse_context : 0.0), ok);
    set(o, "kv_read_bytes", json_integer(t->sparse_kv_read_bytes), ok);
    set(o, "summary_read_bytes", json_integer(t->sparse_summary_read_bytes), ok);
    set(o, "stall_ms", json_real(t->sparse_stall_ms), ok);
    set(o, "stall_per_step_ms", json_real(t->sparse_stall_ms / n), ok);
    set(o, "wait_ms", json_real(t->sparse_wait_ms), ok);
    return o;
}

static json_t *timings_json(const kvt_resp_timings *t, bool *ok) {
    json_t *o = json_object();
    if (!o) {
        *ok = false;
        return NULL;
    }
    set(o, "cache_n", json_integer(t->cache_n), ok);
    set(o, "prompt_n", json_integer(t->prompt_n), ok);
    set(o, "prompt_ms", json_real(t->prompt_ms), ok);
    set(o, "prompt_per_token_ms", json_real(t->prompt_n > 0 ? t->prompt_ms / (double)t->prompt_n : 0.0), ok);
    set(o, "prompt_per_second", json_real(t->prompt_ms > 0 ? 1e3 * (double)t->prompt_n / t->prompt_ms : 0.0), ok);
    set(o, "predicted_n", json_integer(t->predicted_n), ok);
    set(o, "predicted_ms", json_real(t->predicted_ms), ok);
    set(o, "predicted_per_token_ms", json_real(t->predicted_n > 0 ? t->predicted_ms / (double)t->predicted_n : 0.0), ok);
    set(o, "predicted_per_second", json_real(t->predicted_ms > 0 ? 1e3 * (double)t->predicted_n / t->predicted_ms : 0.0), ok);
    if (t->sparse) set(o, "sparse", sparse_json(t, ok), ok);
    return o;
}

kvt_status kvt_resp_json(const kvt_resp *r, char **out, size_t *out_len, kvt_err *err) {
    *out = NULL;
    bool ok = true;
    json_t *root = json_object(), *choices = json_array();
    if (!root || !choices) {
        json_decref(root);
        json_decref(choices);
        return kvt_errorf(err, KVT_ERR_NOMEM, "response: out of memory");
    }
    const char *object = r->kind == KVT_REQ_COMPLETION ? "text_completion"
                         : r->chunk                   ? "chat.completion.chunk"
                                                      : "chat.completion";
    set(root, "id", json_string(r->id ? r->id : ""), &ok);
    set(root, "object", json_string(object), &ok);
    set(root, "created", json_integer(r->created), &ok);
    set(root, "model", r->model ? jtext(r->model, strlen(r->model)) : json_string(""), &ok);
    for (size_t i = 0; i < r->n_choices; i++) append(choices, choice_json(r, &r->choices[i], &ok), &ok);
    set(root, "choices", choices, &ok);
    if (r->usage) set(root, "usage", usage_json(r->usage, &ok), &ok);
    else if (r->usage_null) set(root, "usage", json_null(), &ok);
    if (r->timings) set(root, "timings", timings_json(r->timings, &ok), &ok);
    char *s = ok ? json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(root);
    if (!s) return kvt_errorf(err, KVT_ERR_NOMEM, "response: out of memory building %s", object);
    *out = s;
    if (out_len) *out_len = strlen(s);
    return KVT_OK;
}

// Dumps root (consumed) into *out; ok false or a failed dump is out of memory.
static kvt_status dump(json_t *root, bool ok, const char *what, char **out, kvt_err *err) {
    *out = ok && root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!*out) return kvt_errorf(err, KVT_ERR_NOMEM, "response: out of memory building %s", what);
    return KVT_OK;
}

kvt_status kvt_resp_tokenize_json(const int32_t *ids, size_t n, const char *const *pieces, const size_t *piece_lens,
                                  char **out, kvt_err *err) {
    bool ok = true;
    json_t *root = json_object(), *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        if (!pieces) {
            append(arr, json_integer(ids[i]), &ok);
            continue;
        }
        json_t *t = json_object();
        if (t) {
            set(t, "id", json_integer(ids[i]), &ok);
            bool text = kvt_utf8_valid(pieces[i], piece_lens[i]);
            set(t, "piece", text ? json_stringn(pieces[i], piece_lens[i]) : jbytes(pieces[i], piece_lens[i]), &ok);
        }
        append(arr, t, &ok);
    }
    if (root) set(root, "tokens", arr, &ok);
    else json_decref(arr);
    return dump(root, ok, "the tokenize answer", out, err);
}

kvt_status kvt_resp_detokenize_json(const char *text, size_t len, char **out, kvt_err *err) {
    bool ok = true;
    json_t *root = json_object();
    if (root) set(root, "content", jtext(text, len), &ok);
    return dump(root, ok, "the detokenize answer", out, err);
}

kvt_status kvt_resp_models_json(const char *model_id, int64_t created, const kvt_resp_model_meta *meta, char **out,
                                kvt_err *err) {
    bool ok = true;
    json_t *root = json_object(), *data = json_array(), *m = json_object();
    if (m) {
        set(m, "id", jtext(model_id, strlen(model_id)), &ok);
        set(m, "object", json_string("model"), &ok);
        set(m, "created", json_integer(created), &ok);
        set(m, "owned_by", json_string("kvtier"), &ok);
        json_t *mm = meta ? json_object() : NULL;
        if (mm) {
            set(mm, "vocab_type", json_integer(meta->vocab_type), &ok);
            set(mm, "n_vocab", json_integer(meta->n_vocab), &ok);
            set(mm, "n_ctx", json_integer(meta->n_ctx), &ok);
            set(mm, "n_ctx_train", json_integer(meta->n_ctx_train), &ok);
            set(mm, "n_embd", json_integer(meta->n_embd), &ok);
            set(mm, "n_params", json_integer(meta->n_params), &ok);
            set(mm, "size", json_integer(meta->size), &ok);
            set(mm, "ftype", jtext(meta->ftype, strnlen(meta->ftype, sizeof meta->ftype)), &ok);
        }
        if (meta) set(m, "meta", mm, &ok);
    }
    if (data) append(data, m, &ok);
    else json_decref(m);
    if (root) {
        set(root, "object", json_string("list"), &ok);
        set(root, "data", data, &ok);
    } else {
        json_decref(data);
    }
    return dump(root, ok, "the model list", out, err);
}

json_t *kvt_resp_jtext(const char *s, size_t n) { return jtext(s, n); }
json_t *kvt_resp_jbytes(const char *s, size_t n) { return jbytes(s, n); }
json_t *kvt_resp_timings_json(const kvt_resp_timings *t, bool *ok) { return timings_json(t, ok); }
void kvt_resp_set(json_t *obj, const char *key, json_t *v, bool *ok) { set(obj, key, v, ok); }
void kvt_resp_append(json_t *arr, json_t *v, bool *ok) { append(arr, v, ok); }

char *kvt_resp_dump(json_t *o, bool ok, size_t *len) {
    char *s = ok && o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (s && len) *len = strlen(s);
    return s;
}
