// anthropic.c - Anthropic Messages requests turned into chat requests, and their answers (anthropic.h).
#include "anthropic.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "native.h"
#include "response.h"
#include "sse.h"

#define DEFAULT_MAX_TOKENS 4096 // llama-server's, when max_tokens is absent (Anthropic requires it)

// system: a string, or text blocks whose texts are joined with nothing between; the chat's first message.
static kvt_status convert_system(json_t *root, json_t *msgs, kvt_api_error *e) {
    json_t *sys = kvt_req_field(root, "system");
    if (!sys) return KVT_OK;
    const char *s;
    char *joined = NULL;
    if (json_is_string(sys)) {
        if (kvt_req_check_str(sys, "system", &s, e)) return KVT_ERR_INVALID_ARG;
    } else if (json_is_array(sys)) {
        size_t total = 0, n = json_array_size(sys);
        for (size_t i = 0; i < n; i++) {
            json_t *b = json_array_get(sys, i), *type = json_object_get(b, "type");
            char param[48];
            snprintf(param, sizeof param, "system[%zu]", i);
            if (!json_is_object(b)) return kvt_req_wrong_type(e, param, "a text block", b);
            if (!json_is_string(type) || strcmp(json_string_value(type), "text"))
                return kvt_req_bad(e, param, "only {\"type\": \"text\"} blocks are accepted in system");
            snprintf(param, sizeof param, "system[%zu].text", i);
            json_t *t = json_object_get(b, "text");
            if (!t) return kvt_req_bad(e, param, "required");
            if (kvt_req_check_str(t, param, &s, e)) return KVT_ERR_INVALID_ARG;
            total += json_string_length(t);
        }
        if (!(joined = malloc(total + 1))) return kvt_req_nomem(e);
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            json_t *t = json_object_get(json_array_get(sys, i), "text");
            memcpy(joined + o, json_string_value(t), json_string_length(t));
            o += json_string_length(t);
        }
        joined[o] = 0;
        s = joined;
    } else {
        return kvt_req_wrong_type(e, "system", "a string or a list of text blocks", sys);
    }
    json_t *m = json_pack("{s:s,s:s}", "role", "system", "content", s);
    free(joined);
    if (!m || json_array_append_new(msgs, m)) return kvt_req_nomem(e);
    return KVT_OK;
}

// One message's content: a string, or blocks whose text blocks are kept (as chat text parts, into *parts: NULL
// when none is left).
static kvt_status convert_content(json_t *c, size_t i, json_t **parts, kvt_api_error *e) {
    char param[80];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    const char *s;
    if (json_is_string(c)) {
        if (kvt_req_check_str(c, param, &s, e)) return KVT_ERR_INVALID_ARG;
        *parts = json_incref(c);
        return KVT_OK;
    }
    if (!json_is_array(c)) return kvt_req_wrong_type(e, param, "a string or a list of content blocks", c);
    json_t *out = json_array();
    if (!out) return kvt_req_nomem(e);
    for (size_t j = 0; j < json_array_size(c); j++) {
        json_t *b = json_array_get(c, j), *type = json_object_get(b, "type");
        snprintf(param, sizeof param, "messages[%zu].content[%zu]", i, j);
        if (!json_is_object(b)) {
            json_decref(out);
            return kvt_req_wrong_type(e, param, "a content block", b);
        }
        snprintf(param, sizeof param, "messages[%zu].content[%zu].type", i, j);
        if (!json_is_string(type)) {
            json_decref(out);
            return type ? kvt_req_wrong_type(e, param, "a string", type) : kvt_req_bad(e, param, "required");
        }
        const char *ty = json_string_value(type);
        if (!strcmp(ty, "thinking") || !strcmp(ty, "redacted_thinking")) continue; // earlier reasoning: not replayed
        if (strcmp(ty, "text")) {
            kvt_api_errorf(e, 400, "invalid_request_error", param, "%s: \"%.40s\" blocks are not supported by kvtier "
                           "(text only)", param, ty);
            json_decref(out);
            return KVT_ERR_INVALID_ARG;
        }
        snprintf(param, sizeof param, "messages[%zu].content[%zu].text", i, j);
        json_t *t = json_object_get(b, "text");
        if (!t || kvt_req_check_str(t, param, &s, e)) {
            json_decref(out);
            return t ? KVT_ERR_INVALID_ARG : kvt_req_bad(e, param, "required");
        }
        json_t *part = json_pack("{s:s,s:O}", "type", "text", "text", t);
        if (!part || json_array_append_new(out, part)) {
            json_decref(out);
            return kvt_req_nomem(e);
        }
    }
    if (json_array_size(out) == 0) {
        json_decref(out);
        out = NULL;
    }
    *parts = out;
    return KVT_OK;
}

static kvt_status convert_messages(json_t *root, json_t *msgs, kvt_api_error *e) {
    json_t *v = kvt_req_field(root, "messages");
    if (!v) return kvt_req_bad(e, "messages", "required");
    if (!json_is_array(v)) return kvt_req_wrong_type(e, "messages", "a list", v);
    if (json_array_size(v) == 0) return kvt_req_bad(e, "messages", "at least one message is required");
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *m = json_array_get(v, i), *role = json_is_object(m) ? json_object_get(m, "role") : NULL;
        char param[48];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) return kvt_req_wrong_type(e, param, "an object", m);
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!role) return kvt_req_bad(e, param, "required");
        if (!json_is_string(role)) return kvt_req_wrong_type(e, param, "a string", role);
        const char *r = json_string_value(role);
        if (strcmp(r, "user") && strcmp(r, "assistant"))
            return kvt_req_bad(e, param, "must be \"user\" or \"assistant\" (a system prompt goes in the field system)");
        json_t *c = kvt_req_field(m, "content"), *parts = NULL;
        if (!c) {
            if (!strcmp(r, "assistant")) continue; // as llama-server: nothing to replay
            snprintf(param, sizeof param, "messages[%zu].content", i);
            return kvt_req_bad(e, param, "required");
        }
        kvt_status st = convert_content(c, i, &parts, e);
        if (st) return st;
        if (!parts) continue; // no text left (only thinking blocks, or none): left out, as llama-server
        json_t *msg = json_pack("{s:s,s:o}", "role", r, "content", parts);
        if (!msg || json_array_append_new(msgs, msg)) return kvt_req_nomem(e);
    }
    if (json_array_size(msgs) == 0 || (json_array_size(msgs) == 1 && kvt_req_field(root, "system")))
        return kvt_req_bad(e, "messages", "no message with content is left (every one is empty or holds only thinking)");
    return KVT_OK;
}

// stop_sequences: checked here so that errors name it; the chat request takes it as stop.
static kvt_status convert_stop(json_t *root, json_t *chat, kvt_api_error *e) {
    json_t *v = kvt_req_field(root, "stop_sequences");
    if (!v) return KVT_OK;
    if (!json_is_array(v)) return kvt_req_wrong_type(e, "stop_sequences", "a list of strings", v);
    if (json_array_size(v) > KVT_REQ_MAX_STOP)
        return kvt_api_errorf(e, 400, "invalid_request_error", "stop_sequences", "stop_sequences: at most %d strings, "
                              "got %zu", KVT_REQ_MAX_STOP, json_array_size(v));
    for (size_t i = 0; i < json_array_size(v); i++) {
        char param[40];
        const char *s;
        snprintf(param, sizeof param, "stop_sequences[%zu]", i);
        if (kvt_req_check_str(json_array_get(v, i), param, &s, e)) return KVT_ERR_INVALID_ARG;
        if (!s[0]) return kvt_req_bad(e, param, "must not be empty");
    }
    return json_array_size(v) && json_object_set(chat, "stop", v) ? kvt_req_nomem(e) : KVT_OK;
}

kvt_status kvt_anthropic_parse(const char *body, size_t len, const kvt_req_defaults *d, kvt_request **out,
                               kvt_api_error *e) {
    *out = NULL;
    json_t *root = kvt_req_load(body, len, e);
    if (!root) return KVT_ERR_INVALID_ARG;
    json_t *chat = json_object(), *msgs = json_array();
    kvt_status st = chat && msgs && !json_object_set(chat, "messages", msgs) ? KVT_OK : kvt_req_nomem(e);
    if (!st) st = convert_system(root, msgs, e);
    if (!st) st = convert_messages(root, msgs, e);
    if (!st) st = convert_stop(root, chat, e);
    static const char *const keep[] = {"model", "max_tokens", "temperature", "top_p", "top_k", "stream", "tools"};
    for (size_t i = 0; !st && i < sizeof keep / sizeof keep[0]; i++) {
        json_t *v = json_object_get(root, keep[i]);
        if (v && json_object_set(chat, keep[i], v)) st = kvt_req_nomem(e);
    }
    if (!st && !json_object_get(root, "max_tokens") &&
        json_object_set_new(chat, "max_tokens", json_integer(DEFAULT_MAX_TOKENS)))
        st = kvt_req_nomem(e);
    json_decref(msgs);
    json_decref(root);
    if (st) {
        json_decref(chat);
        return st;
    }
    return kvt_request_parse_chat(chat, KVT_API_ANTHROPIC, d, out, e);
}

static json_t *usage_of(const kvt_anthropic_msg *m, bool *ok) {
    json_t *u = json_object();
    kvt_resp_set(u, "cache_read_input_tokens", json_integer(m->cached_tokens), ok);
    kvt_resp_set(u, "input_tokens", json_integer(m->input_tokens - m->cached_tokens), ok);
    kvt_resp_set(u, "output_tokens", json_integer(m->output_tokens), ok);
    return u;
}

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

// The message object; start: message_start's (no content, no stop reason, no output yet).
static json_t *message_of(const kvt_anthropic_msg *m, bool start, bool *ok) {
    json_t *o = json_object(), *content = json_array();
    if (!start && m->len) {
        json_t *b = json_object();
        kvt_resp_set(b, "type", json_string("text"), ok);
        kvt_resp_set(b, "text", kvt_resp_jtext(m->text, m->len), ok);
        kvt_resp_append(content, b, ok);
    }
    kvt_resp_set(o, "id", json_string(m->id), ok);
    kvt_resp_set(o, "type", json_string("message"), ok);
    kvt_resp_set(o, "role", json_string("assistant"), ok);
    kvt_resp_set(o, "content", content, ok);
    kvt_resp_set(o, "model", kvt_resp_jtext(m->model, strlen(m->model)), ok);
    kvt_resp_set(o, "stop_reason", start ? json_null() : str_or_null(m->stop_reason), ok);
    kvt_resp_set(o, "stop_sequence", start ? json_null() : str_or_null(m->stop_sequence), ok);
    kvt_anthropic_msg u = *m;
    if (start) u.output_tokens = 0;
    kvt_resp_set(o, "usage", usage_of(&u, ok), ok);
    return o;
}

// The JSON text of o (taken) when *ok; NULL otherwise.
char *kvt_anthropic_message_json(const kvt_anthropic_msg *m, size_t *len) {
    bool ok = true;
    json_t *o = message_of(m, false, &ok);
    return kvt_resp_dump(o, ok, len);
}

char *kvt_anthropic_event(kvt_anthropic_event_kind kind, const kvt_anthropic_msg *m, size_t *len) {
    static const char *const names[] = {"message_start", "content_block_start", "content_block_delta",
                                        "content_block_stop", "message_delta", "message_stop"};
    bool ok = true;
    json_t *d = json_object(), *x;
    kvt_resp_set(d, "type", json_string(names[kind]), &ok);
    switch (kind) {
    case KVT_ANTHROPIC_MESSAGE_START: kvt_resp_set(d, "message", message_of(m, true, &ok), &ok); break;
    case KVT_ANTHROPIC_BLOCK_START:
        kvt_resp_set(d, "index", json_integer(m->index), &ok);
        kvt_resp_set(d, "content_block", json_pack("{s:s,s:s}", "type", "text", "text", ""), &ok);
        break;
    case KVT_ANTHROPIC_BLOCK_DELTA:
        kvt_resp_set(d, "index", json_integer(m->index), &ok);
        x = json_object();
        kvt_resp_set(x, "type", json_string("text_delta"), &ok);
        kvt_resp_set(x, "text", kvt_resp_jtext(m->text, m->len), &ok);
        kvt_resp_set(d, "delta", x, &ok);
        break;
    case KVT_ANTHROPIC_BLOCK_STOP: kvt_resp_set(d, "index", json_integer(m->index), &ok); break;
    case KVT_ANTHROPIC_MESSAGE_DELTA:
        x = json_object();
        kvt_resp_set(x, "stop_reason", str_or_null(m->stop_reason), &ok);
        kvt_resp_set(x, "stop_sequence", str_or_null(m->stop_sequence), &ok);
        kvt_resp_set(d, "delta", x, &ok);
        kvt_resp_set(d, "usage", json_pack("{s:I}", "output_tokens", (json_int_t)m->output_tokens), &ok);
        break;
    case KVT_ANTHROPIC_MESSAGE_STOP: break;
    }
    return kvt_sse_named(names[kind], kvt_resp_dump(d, ok, NULL), len);
}

char *kvt_anthropic_error_event(char *json, size_t *len) {
    json_t *o = json ? json_loads(json, 0, NULL) : NULL;
    free(json);
    bool ok = o != NULL;
    if (o) kvt_resp_set(o, "type", json_string("error"), &ok);
    return kvt_sse_named("error", kvt_resp_dump(o, ok, NULL), len);
}
