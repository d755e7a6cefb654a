// responses_api.c - OpenAI Responses requests turned into chat requests, and their answers (responses_api.h).
#include "responses_api.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "native.h"
#include "response.h"
#include "sse.h"

// One input item's content: a string, or input_text / output_text parts (as chat text parts, into *parts).
static kvt_status convert_parts(json_t *c, size_t i, json_t **parts, kvt_api_error *e) {
    char param[80];
    const char *s;
    snprintf(param, sizeof param, "input[%zu].content", i);
    if (!c) return kvt_req_bad(e, param, "required");
    if (json_is_string(c)) {
        if (kvt_req_check_str(c, param, &s, e)) return KVT_ERR_INVALID_ARG;
        *parts = json_incref(c);
        return KVT_OK;
    }
    if (!json_is_array(c)) return kvt_req_wrong_type(e, param, "a string or a list of content parts", c);
    json_t *out = json_array();
    kvt_status st = out ? KVT_OK : kvt_req_nomem(e);
    for (size_t j = 0; !st && j < json_array_size(c); j++) {
        json_t *p = json_array_get(c, j), *type = json_object_get(p, "type"), *t = json_object_get(p, "text");
        snprintf(param, sizeof param, "input[%zu].content[%zu]", i, j);
        if (!json_is_object(p)) {
            st = kvt_req_wrong_type(e, param, "a content part", p);
            break;
        }
        const char *ty = json_is_string(type) ? json_string_value(type) : "";
        if (strcmp(ty, "input_text") && strcmp(ty, "output_text")) {
            snprintf(param, sizeof param, "input[%zu].content[%zu].type", i, j);
            st = kvt_req_bad(e, param, "only \"input_text\" and \"output_text\" parts are supported by kvtier");
            break;
        }
        snprintf(param, sizeof param, "input[%zu].content[%zu].text", i, j);
        if (!t) st = kvt_req_bad(e, param, "required");
        else if (!kvt_req_check_str(t, param, &s, e)) {
            json_t *part = json_pack("{s:s,s:O}", "type", "text", "text", t);
            if (!part || json_array_append_new(out, part)) st = kvt_req_nomem(e);
        } else st = KVT_ERR_INVALID_ARG;
    }
    if (!st && json_array_size(out) == 0) st = kvt_req_bad(e, param, "at least one content part is required");
    if (st) json_decref(out);
    else *parts = out;
    return st;
}

static kvt_status convert_input(json_t *root, json_t *msgs, kvt_api_error *e) {
    json_t *in = kvt_req_field(root, "input");
    if (!in) return kvt_req_bad(e, "input", "required");
    if (json_is_string(in)) {
        const char *s;
        if (kvt_req_check_str(in, "input", &s, e)) return KVT_ERR_INVALID_ARG;
        json_t *m = json_pack("{s:s,s:O}", "role", "user", "content", in);
        return m && !json_array_append_new(msgs, m) ? KVT_OK : kvt_req_nomem(e);
    }
    if (!json_is_array(in)) return kvt_req_wrong_type(e, "input", "a string or a list of messages", in);
    if (json_array_size(in) == 0) return kvt_req_bad(e, "input", "at least one item is required");
    for (size_t i = 0; i < json_array_size(in); i++) {
        json_t *it = json_array_get(in, i), *type, *role, *parts = NULL;
        char param[48];
        snprintf(param, sizeof param, "input[%zu]", i);
        if (!json_is_object(it)) return kvt_req_wrong_type(e, param, "an object", it);
        if ((type = kvt_req_field(it, "type")) && (!json_is_string(type) || strcmp(json_string_value(type), "message"))) {
            snprintf(param, sizeof param, "input[%zu].type", i);
            return kvt_req_bad(e, param, "only \"message\" items are supported by kvtier");
        }
        snprintf(param, sizeof param, "input[%zu].role", i);
        if (!(role = kvt_req_field(it, "role"))) return kvt_req_bad(e, param, "required");
        if (!json_is_string(role)) return kvt_req_wrong_type(e, param, "a string", role);
        const char *r = json_string_value(role);
        if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "assistant"))
            return kvt_req_bad(e, param, "must be \"user\", \"system\", \"developer\" or \"assistant\"");
        kvt_status st = convert_parts(kvt_req_field(it, "content"), i, &parts, e);
        if (st) return st;
        json_t *m = json_pack("{s:s,s:o}", "role", r, "content", parts);
        if (!m || json_array_append_new(msgs, m)) return kvt_req_nomem(e);
    }
    return KVT_OK;
}

// The fields with no chat counterpart: refused when they ask for what kvtier does not do.
static kvt_status check_unsupported(json_t *root, kvt_api_error *e) {
    json_t *v = kvt_req_field(root, "previous_response_id");
    if (v && !(json_is_string(v) && json_string_length(v) == 0))
        return kvt_req_bad(e, "previous_response_id", "not supported by kvtier (it keeps no responses): send the "
                           "conversation in input");
    return KVT_OK;
}

// text.format (OpenAI's {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "schema": S, "name",
// "strict"}) as the chat request's response_format ({"type": "json_schema", "json_schema": {"schema": S}}), so that the
// answer follows it (request.h); llama-server's converter drops text.format.
static kvt_status convert_format(json_t *root, json_t *chat, kvt_api_error *e) {
    json_t *v = kvt_req_field(root, "text");
    json_t *f = json_is_object(v) ? kvt_req_field(v, "format") : NULL;
    json_t *ft = json_is_object(f) ? json_object_get(f, "type") : NULL;
    const char *type = json_is_string(ft) ? json_string_value(ft) : NULL;
    if (v && !json_is_object(v)) return kvt_req_bad(e, "text", "must be an object {\"format\": ...}");
    if (f && (!type || (strcmp(type, "text") && strcmp(type, "json_object") && strcmp(type, "json_schema"))))
        return kvt_req_bad(e, "text.format", "must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                           "{\"type\": \"json_schema\", \"schema\": ...}");
    if (!type || !strcmp(type, "text")) return KVT_OK;
    json_t *schema = json_object_get(f, "schema"), *rf;
    if (!strcmp(type, "json_object")) rf = json_pack("{s:s}", "type", "json_object");
    else if (schema) rf = json_pack("{s:s,s:{s:O}}", "type", "json_schema", "json_schema", "schema", schema);
    else rf = json_pack("{s:s}", "type", "json_schema");
    return rf && !json_object_set_new(chat, "response_format", rf) ? KVT_OK : kvt_req_nomem(e);
}

// An error about the converted response_format named as the request names it (text.format).
static void rename_format(kvt_api_error *e) {
    static const char *const from[] = {"response_format.json_schema.schema", "response_format.schema",
                                       "response_format"};
    static const char *const to[] = {"text.format.schema", "text.format.schema", "text.format"};
    for (size_t i = 0; i < sizeof from / sizeof from[0]; i++) {
        const size_t n = strlen(from[i]);
        if (strncmp(e->param, from[i], n)) continue;
        char buf[KVT_ERR_MSG_MAX], param[sizeof e->param];
        snprintf(param, sizeof param, "%s%.*s", to[i], (int)(sizeof param - 1), e->param + n);
        memcpy(e->param, param, sizeof param);
        const char *at = strstr(e->message, from[i]);
        if (at) {
            snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - e->message), e->message, to[i], at + n);
            memcpy(e->message, buf, sizeof buf);
        }
        return;
    }
}

kvt_status kvt_oairesp_parse(const char *body, size_t len, const kvt_req_defaults *d, kvt_request **out,
                             kvt_api_error *e) {
    *out = NULL;
    json_t *root = kvt_req_load(body, len, e);
    if (!root) return KVT_ERR_INVALID_ARG;
    json_t *chat = json_object(), *msgs = json_array(), *ins = kvt_req_field(root, "instructions");
    kvt_status st = chat && msgs && !json_object_set(chat, "messages", msgs) ? KVT_OK : kvt_req_nomem(e);
    const char *s;
    if (!st && ins && !kvt_req_check_str(ins, "instructions", &s, e)) {
        json_t *m = json_pack("{s:s,s:O}", "role", "system", "content", ins);
        if (!m || json_array_append_new(msgs, m)) st = kvt_req_nomem(e);
    } else if (!st && ins) {
        st = KVT_ERR_INVALID_ARG;
    }
    if (!st) st = convert_input(root, msgs, e);
    if (!st) st = check_unsupported(root, e);
    if (!st) st = convert_format(root, chat, e);
    json_t *mt = kvt_req_field(root, "max_output_tokens");
    if (!st && mt && json_object_set(chat, "max_tokens", mt)) st = kvt_req_nomem(e);
    // the chat fields llama-server passes on as they are (it keeps the whole body): ignore_eos and stop too
    static const char *const keep[] = {"model",          "temperature",      "top_p",           "top_k",
                                       "min_p",          "seed",             "tools",           "ignore_eos",
                                       "stop",           "stream",           "logit_bias",      "presence_penalty",
                                       "frequency_penalty", "repeat_penalty", "repeat_last_n"};
    for (size_t i = 0; !st && i < sizeof keep / sizeof keep[0]; i++) {
        json_t *v = json_object_get(root, keep[i]);
        if (v && json_object_set(chat, keep[i], v)) st = kvt_req_nomem(e);
    }
    json_decref(msgs);
    json_decref(root);
    if (st) {
        json_decref(chat);
        return st;
    }
    st = kvt_request_parse_chat(chat, KVT_API_RESPONSES, d, out, e);
    if (st) rename_format(e);
    if (st && !strcmp(e->param, "max_tokens")) { // named as the request names it
        snprintf(e->param, sizeof e->param, "max_output_tokens");
        char msg[KVT_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "max_output_tokens%s", e->message + strlen("max_tokens"));
        memcpy(e->message, msg, sizeof msg);
    }
    return st;
}

// The output_text part: text first (the answer) or last (a stream's events, as llama-server orders them).
static json_t *part_of(const kvt_oairesp *r, bool text_first, bool *ok) {
    json_t *part = json_object();
    kvt_resp_set(part, "type", json_string("output_text"), ok);
    if (text_first) kvt_resp_set(part, "text", kvt_resp_jtext(r->text, r->len), ok);
    kvt_resp_set(part, "annotations", json_array(), ok);
    kvt_resp_set(part, "logprobs", json_array(), ok);
    if (!text_first) kvt_resp_set(part, "text", kvt_resp_jtext(r->text, r->len), ok);
    return part;
}

// The message item: whole (the answer's key order), added to a stream (in progress, no content) or done in a stream
// (llama-server's key orders of each).
typedef enum { I_WHOLE, I_ADDED, I_DONE } item_form;

static json_t *item_of(const kvt_oairesp *r, item_form form, bool *ok) {
    json_t *msg = json_object();
    if (form == I_ADDED) {
        kvt_resp_set(msg, "content", json_array(), ok);
        kvt_resp_set(msg, "id", json_string(r->msg_id), ok);
        kvt_resp_set(msg, "role", json_string("assistant"), ok);
        kvt_resp_set(msg, "status", json_string("in_progress"), ok);
        kvt_resp_set(msg, "type", json_string("message"), ok);
    } else if (form == I_DONE) {
        kvt_resp_set(msg, "type", json_string("message"), ok);
        kvt_resp_set(msg, "status", json_string("completed"), ok);
        kvt_resp_set(msg, "id", json_string(r->msg_id), ok);
        kvt_resp_set(msg, "content", json_pack("[o]", part_of(r, false, ok)), ok);
        kvt_resp_set(msg, "role", json_string("assistant"), ok);
    } else {
        kvt_resp_set(msg, "id", json_string(r->msg_id), ok);
        kvt_resp_set(msg, "type", json_string("message"), ok);
        kvt_resp_set(msg, "role", json_string("assistant"), ok);
        kvt_resp_set(msg, "status", json_string("completed"), ok);
        kvt_resp_set(msg, "content", json_pack("[o]", part_of(r, true, ok)), ok);
    }
    return msg;
}

// The response object: whole (the answer), in progress (id, object, status) or completed (a stream's last event).
typedef enum { R_WHOLE, R_IN_PROGRESS, R_COMPLETED } resp_form;

static json_t *response_of(const kvt_oairesp *r, resp_form form, bool *ok) {
    json_t *o = json_object(), *u;
    kvt_resp_set(o, "id", json_string(r->id), ok);
    kvt_resp_set(o, "object", json_string("response"), ok);
    if (form == R_IN_PROGRESS) {
        kvt_resp_set(o, "status", json_string("in_progress"), ok);
        return o;
    }
    kvt_resp_set(o, "created_at", json_integer(r->created), ok);
    if (form == R_WHOLE) { // the answer's order; a stream's response.completed has llama-server's other one
        kvt_resp_set(o, "completed_at", json_integer(r->completed), ok);
        kvt_resp_set(o, "model", kvt_resp_jtext(r->model, strlen(r->model)), ok);
        kvt_resp_set(o, "status", json_string("completed"), ok);
    } else {
        kvt_resp_set(o, "status", json_string("completed"), ok);
        kvt_resp_set(o, "model", kvt_resp_jtext(r->model, strlen(r->model)), ok);
    }
    json_t *out = json_array();
    if ((form == R_WHOLE || r->len) && json_array_append_new(out, item_of(r, form == R_WHOLE ? I_WHOLE : I_DONE, ok)))
        *ok = false;
    kvt_resp_set(o, "output", out, ok);
    u = json_object();
    kvt_resp_set(u, "input_tokens", json_integer(r->input_tokens), ok);
    kvt_resp_set(u, "output_tokens", json_integer(r->output_tokens), ok);
    kvt_resp_set(u, "total_tokens", json_integer(r->input_tokens + r->output_tokens), ok);
    kvt_resp_set(u, "input_tokens_details", json_pack("{s:I}", "cached_tokens", (json_int_t)r->cached_tokens), ok);
    kvt_resp_set(o, "usage", u, ok);
    return o;
}

char *kvt_oairesp_json(const kvt_oairesp *r, size_t *len) {
    bool ok = true;
    json_t *o = response_of(r, R_WHOLE, &ok);
    return kvt_resp_dump(o, ok, len);
}

char *kvt_oairesp_event(kvt_oairesp_event_kind kind, const kvt_oairesp *r, size_t *len) {
    static const char *const names[] = {"response.created",          "response.in_progress",
                                        "response.output_item.added", "response.content_part.added",
                                        "response.output_text.delta", "response.output_text.done",
                                        "response.content_part.done", "response.output_item.done",
                                        "response.completed"};
    bool ok = true;
    json_t *d = json_object();
    kvt_resp_set(d, "type", json_string(names[kind]), &ok);
    switch (kind) {
    case KVT_OAIRESP_CREATED:
    case KVT_OAIRESP_IN_PROGRESS: kvt_resp_set(d, "response", response_of(r, R_IN_PROGRESS, &ok), &ok); break;
    case KVT_OAIRESP_ITEM_ADDED: kvt_resp_set(d, "item", item_of(r, I_ADDED, &ok), &ok); break;
    case KVT_OAIRESP_PART_ADDED:
        kvt_resp_set(d, "item_id", json_string(r->msg_id), &ok);
        kvt_resp_set(d, "part", json_pack("{s:s,s:s}", "type", "output_text", "text", ""), &ok);
        break;
    case KVT_OAIRESP_TEXT_DELTA:
    case KVT_OAIRESP_TEXT_DONE:
        kvt_resp_set(d, "item_id", json_string(r->msg_id), &ok);
        kvt_resp_set(d, kind == KVT_OAIRESP_TEXT_DELTA ? "delta" : "text", kvt_resp_jtext(r->text, r->len), &ok);
        break;
    case KVT_OAIRESP_PART_DONE:
        kvt_resp_set(d, "item_id", json_string(r->msg_id), &ok);
        kvt_resp_set(d, "part", part_of(r, false, &ok), &ok);
        break;
    case KVT_OAIRESP_ITEM_DONE: kvt_resp_set(d, "item", item_of(r, I_DONE, &ok), &ok); break;
    case KVT_OAIRESP_COMPLETED:
        kvt_resp_set(d, "response", response_of(r, R_COMPLETED, &ok), &ok);
        if (r->timings) kvt_resp_set(d, "timings", kvt_resp_timings_json(r->timings, &ok), &ok);
        break;
    }
    return kvt_sse_named(names[kind], kvt_resp_dump(d, ok, NULL), len);
}
