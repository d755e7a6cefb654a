// request.c - OpenAI request bodies parsed with jansson and validated field by field (request.h).
#include "request.h"

#include "json_schema.h"

#include "native.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kvt_request {
    kvt_request_params p;
    json_t *root;      // strings of p point into it
    kvt_chat_msg *msgs;
    char **owned;      // concatenated content parts
    size_t n_owned;
    int32_t *ids;
    const char **stops;
    kvt_req_logit_bias *bias_given;
    kvt_logit_bias *bias;          // resolved (kvt_request_set_logit_bias)
    struct kvt_native_ext *native; // KVT_REQ_NATIVE
};

kvt_status kvt_api_errorf(kvt_api_error *e, int http_status, const char *type, const char *param, const char *fmt,
                          ...) {
    if (!e) return KVT_ERR_INVALID_ARG;
    e->http_status = http_status;
    e->type = type ? type : "invalid_request_error";
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    e->n_prompt_tokens = e->n_ctx = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return KVT_ERR_INVALID_ARG;
}

char *kvt_api_error_json(const kvt_api_error *e) {
    json_t *err = json_object(), *root = json_object();
    if (!err || !root) {
        json_decref(err);
        json_decref(root);
        return NULL;
    }
    // messages are built from our format strings and request text already checked as UTF-8;
    // a message cut by the buffer size may end inside a character: drop an invalid tail
    size_t ml = strlen(e->message);
    json_t *msg = NULL;
    while (!(msg = json_stringn(e->message, ml)) && ml) ml--;
    json_object_set_new(err, "message", msg ? msg : json_string(""));
    json_object_set_new(err, "type", json_string(e->type ? e->type : "invalid_request_error"));
    json_object_set_new(err, "param", e->param[0] ? json_string(e->param) : json_null());
    json_object_set_new(err, "code", json_integer(e->http_status));
    if (e->n_ctx > 0) {
        json_object_set_new(err, "n_prompt_tokens", json_integer(e->n_prompt_tokens));
        json_object_set_new(err, "n_ctx", json_integer(e->n_ctx));
    }
    json_object_set_new(root, "error", err);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

// "param: what" as a 400 error naming param.
static kvt_status bad(kvt_api_error *e, const char *param, const char *what) {
    return kvt_api_errorf(e, 400, "invalid_request_error", param, "%s: %s", param, what);
}

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

// Field lookup: NULL when absent or null.
static json_t *field(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

// An integer in [lo, hi]; integral reals are accepted. *present false when absent.
static kvt_status get_int(json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *present,
                          kvt_api_error *e) {
    json_t *v = field(obj, key);
    if (present) *present = v != NULL;
    if (!v) return KVT_OK;
    int64_t x;
    if (json_is_integer(v)) {
        x = (int64_t)json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9.0e18) {
        x = (int64_t)json_real_value(v);
    } else {
        return kvt_api_errorf(e, 400, NULL, key, "%s: must be an integer, got %s", key,
                              json_is_real(v) ? "a fractional number" : type_name(v));
    }
    if (x < lo || x > hi)
        return kvt_api_errorf(e, 400, NULL, key, "%s: %lld is out of range [%lld, %lld]", key, (long long)x,
                              (long long)lo, (long long)hi);
    *out = x;
    return KVT_OK;
}

// A number in [lo, hi] (lo excluded when lo_open).
static kvt_status get_num(json_t *obj, const char *key, double lo, double hi, bool lo_open, double *out,
                          kvt_api_error *e) {
    json_t *v = field(obj, key);
    if (!v) return KVT_OK;
    if (!json_is_number(v)) return kvt_api_errorf(e, 400, NULL, key, "%s: must be a number, got %s", key, type_name(v));
    double x = json_number_value(v);
    if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
        return kvt_api_errorf(e, 400, NULL, key, "%s: %g is out of range %s%g, %g]", key, x, lo_open ? "(" : "[", lo,
                              hi);
    *out = x;
    return KVT_OK;
}

static kvt_status get_bool(json_t *obj, const char *key, bool *out, kvt_api_error *e) {
    json_t *v = field(obj, key);
    if (!v) return KVT_OK;
    if (!json_is_boolean(v)) return kvt_api_errorf(e, 400, NULL, key, "%s: must be a boolean, got %s", key, type_name(v));
    *out = json_is_true(v);
    return KVT_OK;
}

// A string without NUL characters; *out points into the JSON tree.
static kvt_status check_str(json_t *v, const char *param, const char **out, kvt_api_error *e) {
    if (!json_is_string(v)) return kvt_api_errorf(e, 400, NULL, param, "%s: must be a string, got %s", param, type_name(v));
    if (strlen(json_string_value(v)) != json_string_length(v))
        return bad(e, param, "contains a NUL character");
    *out = json_string_value(v);
    return KVT_OK;
}

static kvt_status nomem(kvt_api_error *e) {
    kvt_api_errorf(e, 500, "server_error", NULL, "out of memory parsing the request");
    return KVT_ERR_NOMEM;
}

// A list of token ids (each in [0, 2^31)).
static kvt_status get_ids(kvt_request *r, json_t *arr, const char *param, kvt_api_error *e) {
    size_t n = json_array_size(arr);
    if (n == 0 && r->p.kind != KVT_REQ_DETOKENIZE) return bad(e, param, "the prompt is empty");
    r->ids = malloc((n ? n : 1) * sizeof *r->ids);
    if (!r->ids) return nomem(e);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return kvt_api_errorf(e, 400, NULL, param, "%s[%zu]: a token id must be an integer in [0, 2147483647]",
                                  param, i);
        r->ids[i] = (int32_t)json_integer_value(v);
    }
    r->p.prompt_ids = r->ids;
    r->p.n_prompt_ids = (int64_t)n;
    return KVT_OK;
}

static kvt_status parse_prompt(kvt_request *r, json_t *root, kvt_api_error *e) {
    json_t *v = field(root, "prompt");
    if (!v) return bad(e, "prompt", "required");
    if (json_is_string(v)) return check_str(v, "prompt", &r->p.prompt, e);
    if (!json_is_array(v))
        return kvt_api_errorf(e, 400, NULL, "prompt", "prompt: must be a string or a list, got %s", type_name(v));
    if (json_array_size(v) == 0) return bad(e, "prompt", "the prompt is empty");
    json_t *first = json_array_get(v, 0);
    // a list of token ids: its first element a number (a fractional one is refused by get_ids, named)
    if (json_is_number(first)) return get_ids(r, v, "prompt", e);
    if (json_array_size(v) > 1)
        return bad(e, "prompt", "a list of several prompts is not supported; send one request per prompt");
    if (json_is_string(first)) return check_str(first, "prompt[0]", &r->p.prompt, e);
    if (json_is_array(first)) return get_ids(r, first, "prompt[0]", e);
    return kvt_api_errorf(e, 400, NULL, "prompt[0]", "prompt[0]: must be a string, a token id or a list of token ids, got %s",
                          type_name(first));
}

// Gives r a malloc'd buffer to free with it (NULL, or no room to hold it: p freed, false).
static bool own(kvt_request *r, char *p) {
    char **owned = p ? realloc(r->owned, (r->n_owned + 1) * sizeof *owned) : NULL;
    if (!owned) {
        free(p);
        return false;
    }
    r->owned = owned;
    r->owned[r->n_owned++] = p;
    return true;
}

// content: a string or a list of {type: "text", text: string} parts, joined as llama-server joins them
// (common/chat.cpp): a newline before a part once the text so far is not empty.
static kvt_status parse_content(kvt_request *r, json_t *c, size_t i, const char **out, kvt_api_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (!c) return kvt_api_errorf(e, 400, NULL, param, "%s: required", param);
    if (json_is_string(c)) return check_str(c, param, out, e);
    if (!json_is_array(c))
        return kvt_api_errorf(e, 400, NULL, param, "%s: must be a string or a list of text parts, got %s", param,
                              type_name(c));
    size_t total = 0, n = json_array_size(c);
    for (size_t j = 0; j < n; j++) {
        json_t *part = json_array_get(c, j), *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        char pp[96];
        snprintf(pp, sizeof pp, "%s[%zu]", param, j);
        if (!json_is_object(part))
            return kvt_api_errorf(e, 400, NULL, pp, "%s: must be an object, got %s", pp, type_name(part));
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") != 0)
            return kvt_api_errorf(e, 400, NULL, pp, "%s.type: only \"text\" parts are supported", pp);
        const char *s;
        snprintf(pp, sizeof pp, "%s[%zu].text", param, j);
        if (!text) return kvt_api_errorf(e, 400, NULL, pp, "%s: required", pp);
        if (check_str(text, pp, &s, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
        total += json_string_length(text) + 1;
    }
    char *buf = malloc(total + 1);
    if (!own(r, buf)) return nomem(e);
    size_t o = 0;
    for (size_t j = 0; j < n; j++) {
        json_t *text = json_object_get(json_array_get(c, j), "text");
        if (o > 0) buf[o++] = '\n';
        memcpy(buf + o, json_string_value(text), json_string_length(text));
        o += json_string_length(text);
    }
    buf[o] = 0;
    *out = buf;
    return KVT_OK;
}

static kvt_status parse_messages(kvt_request *r, json_t *root, kvt_api_error *e) {
    json_t *v = field(root, "messages");
    if (!v) return bad(e, "messages", "required");
    if (!json_is_array(v))
        return kvt_api_errorf(e, 400, NULL, "messages", "messages: must be a list, got %s", type_name(v));
    size_t n = json_array_size(v);
    if (n == 0) return bad(e, "messages", "at least one message is required");
    r->msgs = calloc(n, sizeof *r->msgs);
    if (!r->msgs) return nomem(e);
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(v, i);
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m))
            return kvt_api_errorf(e, 400, NULL, param, "%s: must be an object, got %s", param, type_name(m));
        json_t *role = json_object_get(m, "role");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!role) return kvt_api_errorf(e, 400, NULL, param, "%s: required", param);
        if (check_str(role, param, &r->msgs[i].role, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
        // OpenAI's "developer" messages (the system role of its newer models, which clients send) are system
        // messages, as llama-server maps them (map_developer_role_to_system)
        if (!strcmp(r->msgs[i].role, "developer")) r->msgs[i].role = "system";
        // an assistant message's content may be null or absent (OpenAI's clients send null beside tool calls):
        // empty, as llama-server takes it
        json_t *content = field(m, "content");
        if (!content && !strcmp(r->msgs[i].role, "assistant")) {
            r->msgs[i].content = "";
            continue;
        }
        kvt_status st = parse_content(r, content, i, &r->msgs[i].content, e);
        if (st != KVT_OK) return st;
    }
    r->p.messages = r->msgs;
    r->p.n_messages = n;
    return KVT_OK;
}

static kvt_status parse_stop(kvt_request *r, json_t *root, kvt_api_error *e) {
    json_t *v = field(root, "stop");
    if (!v) return KVT_OK;
    bool one = json_is_string(v);
    if (!one && !json_is_array(v))
        return kvt_api_errorf(e, 400, NULL, "stop", "stop: must be a string or a list of strings, got %s", type_name(v));
    size_t n = one ? 1 : json_array_size(v);
    if (n > KVT_REQ_MAX_STOP)
        return kvt_api_errorf(e, 400, NULL, "stop", "stop: at most %d strings, got %zu", KVT_REQ_MAX_STOP, n);
    r->stops = calloc(n ? n : 1, sizeof *r->stops);
    if (!r->stops) return nomem(e);
    for (size_t i = 0; i < n; i++) {
        char param[32];
        if (one) snprintf(param, sizeof param, "stop");
        else snprintf(param, sizeof param, "stop[%zu]", i);
        if (check_str(one ? v : json_array_get(v, i), param, &r->stops[i], e) != KVT_OK) return KVT_ERR_INVALID_ARG;
        if (!r->stops[i][0]) return bad(e, param, "must not be empty");
    }
    r->p.stop = r->stops;
    r->p.n_stop = n;
    return KVT_OK;
}

static kvt_status parse_sampling(kvt_request *r, json_t *root, kvt_api_error *e) {
    kvt_request_params *p = &r->p;
    int64_t x;
    bool given;
    const bool nat = p->kind == KVT_REQ_NATIVE; // llama-server clamps these into range (kvt_native_finish)
    // n_predict: llama-server's name (-1: no limit); max_tokens and max_completion_tokens win over it
    if (get_int(root, "n_predict", -1, INT32_MAX, &x, &given, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    if (given && x == 0) return bad(e, "n_predict", "0 is out of range: -1 (no limit) or at least 1");
    if (given) p->max_tokens = x;
    if (get_int(root, "max_tokens", 1, INT32_MAX, &p->max_tokens, NULL, e) != KVT_OK ||
        get_int(root, "max_completion_tokens", 1, INT32_MAX, &p->max_tokens, NULL, e) != KVT_OK ||
        get_num(root, "temperature", nat ? -HUGE_VAL : 0, nat ? HUGE_VAL : 2, false, &p->temperature, e) != KVT_OK ||
        get_num(root, "top_p", 0, nat ? HUGE_VAL : 1, true, &p->top_p, e) != KVT_OK ||
        get_num(root, "min_p", nat ? -HUGE_VAL : 0, nat ? HUGE_VAL : 1, false, &p->min_p, e) != KVT_OK)
        return KVT_ERR_INVALID_ARG;
    if (get_int(root, "top_k", nat ? INT32_MIN : 0, INT32_MAX, &x, &given, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    if (given) p->top_k = (int32_t)x;
    const double pen = nat ? 1e6 : 2; // OpenAI's range; llama-server's /completion takes any number
    if (get_num(root, "presence_penalty", -pen, pen, false, &p->presence_penalty, e) != KVT_OK ||
        get_num(root, "frequency_penalty", -pen, pen, false, &p->frequency_penalty, e) != KVT_OK ||
        get_num(root, "repeat_penalty", 0, 1e6, true, &p->repeat_penalty, e) != KVT_OK ||
        get_int(root, "repeat_last_n", 0, INT32_MAX, &p->repeat_last_n, NULL, e) != KVT_OK)
        return KVT_ERR_INVALID_ARG;
    if (get_int(root, "seed", INT64_MIN, INT64_MAX, &x, &given, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    if (given) p->has_seed = true, p->seed = (uint64_t)x; // (absent: the server's default, a random one without)
    if (get_int(root, "n", 1, KVT_REQ_MAX_N, &x, &given, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    if (given) p->n = (int32_t)x;
    if (get_bool(root, "ignore_eos", &p->ignore_eos, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    return KVT_OK;
}

static kvt_status parse_logprobs_stream(kvt_request *r, json_t *root, kvt_api_error *e) {
    kvt_request_params *p = &r->p;
    int64_t x;
    bool given;
    if (p->kind == KVT_REQ_COMPLETION) { // legacy: logprobs is the number of alternatives
        if (get_int(root, "logprobs", 0, KVT_REQ_MAX_TOP_LOGPROBS, &x, &given, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
        p->logprobs = given;
        p->top_logprobs = given ? (int32_t)x : 0;
    } else if (p->kind == KVT_REQ_CHAT) { // (native: n_probs, kvt_native_parse)
        if (get_bool(root, "logprobs", &p->logprobs, e) != KVT_OK ||
            get_int(root, "top_logprobs", 0, KVT_REQ_MAX_TOP_LOGPROBS, &x, &given, e) != KVT_OK)
            return KVT_ERR_INVALID_ARG;
        if (given && x > 0 && !p->logprobs)
            return bad(e, "top_logprobs", "requires logprobs to be true");
        p->top_logprobs = given ? (int32_t)x : 0;
    }
    if (get_bool(root, "stream", &p->stream, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    json_t *so = field(root, "stream_options");
    if (so) {
        if (!json_is_object(so))
            return kvt_api_errorf(e, 400, NULL, "stream_options", "stream_options: must be an object, got %s",
                                  type_name(so));
        if (!p->stream) return bad(e, "stream_options", "only allowed when stream is true");
        json_t *iu = field(so, "include_usage");
        if (iu && !json_is_boolean(iu))
            return kvt_api_errorf(e, 400, NULL, "stream_options.include_usage",
                                  "stream_options.include_usage: must be a boolean, got %s", type_name(iu));
        p->include_usage = iu && json_is_true(iu);
    }
    return KVT_OK;
}

// Fields that would change the answer and that kvtier does not implement: refused when they ask for something
// (a neutral value, as clients send by default, is accepted), so that no answer silently ignores them.
static kvt_status parse_unsupported(const kvt_request *r, json_t *root, kvt_api_error *e) {
    static const struct {
        const char *key;
        double neutral; // numbers: the value that asks for nothing
    } num[] = {{"n_probs", 0}, {"tfs_z", 1}};
    for (size_t i = 0; i < sizeof num / sizeof num[0]; i++) {
        if (r->p.kind == KVT_REQ_NATIVE && !strcmp(num[i].key, "n_probs")) continue; // implemented there
        json_t *v = field(root, num[i].key);
        if (v && (!json_is_number(v) || json_number_value(v) != num[i].neutral))
            return kvt_api_errorf(e, 400, NULL, num[i].key, "%s: not supported by kvtier (only %g, its neutral value, "
                                  "is accepted)", num[i].key, num[i].neutral);
    }
    json_t *ps = field(root, "post_sampling_probs"); // (native.c takes it)
    if (r->p.kind != KVT_REQ_NATIVE && ps && !json_is_false(ps))
        return kvt_api_errorf(e, 400, NULL, "post_sampling_probs", "post_sampling_probs: kvtier gives the sampling "
                              "chain's probabilities on /completion and /infill only");
    // objects, lists and strings: only an empty one (or false) is accepted
    static const char *const other[] = {"suffix", "echo", "tools", "functions", "logits_processors", "guided_json",
                                        "guided_regex"};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        json_t *v = field(root, other[i]);
        bool neutral = !v || json_is_false(v) || (json_is_object(v) && json_object_size(v) == 0) ||
                       (json_is_array(v) && json_array_size(v) == 0) || (json_is_string(v) && json_string_length(v) == 0);
        if (!neutral) return kvt_api_errorf(e, 400, NULL, other[i], "%s: not supported by kvtier", other[i]);
    }
    json_t *bo = field(root, "best_of");
    if (bo && (!json_is_integer(bo) || json_integer_value(bo) != r->p.n))
        return bad(e, "best_of", "not supported by kvtier (only best_of equal to n is accepted)");
    return KVT_OK;
}

// A schema's object member (NULL: absent or null); a present one that is not an object (or true) is an error.
static kvt_status schema_member(json_t *obj, const char *key, const char *param, json_t **out, kvt_api_error *e) {
    *out = field(obj, key);
    if (*out && !json_is_object(*out) && !json_is_true(*out))
        return kvt_api_errorf(e, 400, NULL, param, "%s: must be a JSON schema (an object), got %s", param,
                              type_name(*out));
    return KVT_OK;
}

// `grammar`, `json_schema` and `response_format` (request.h) into p->grammar: llama-server's rules (its /completion
// handler and its chat parser), the schema converted (json_schema.h) into a grammar the request owns.
static kvt_status parse_grammar(kvt_request *r, json_t *root, kvt_api_error *e) {
    kvt_request_params *p = &r->p;
    const char *gtext = NULL;
    json_t *g = field(root, "grammar"), *schema, *rf = field(root, "response_format");
    if (g && check_str(g, "grammar", &gtext, e)) return KVT_ERR_INVALID_ARG;
    const char *where = "json_schema";
    if (schema_member(root, "json_schema", where, &schema, e)) return KVT_ERR_INVALID_ARG;
    if (p->kind == KVT_REQ_NATIVE && g) schema = NULL; // (/completion: a grammar given wins, even an empty one)
    if (p->kind != KVT_REQ_NATIVE && schema && gtext && *gtext)
        return bad(e, "json_schema", "cannot be used together with grammar (give one of them)");
    if (rf) {
        json_t *t = json_is_object(rf) ? field(rf, "type") : NULL;
        const char *type = json_is_string(t) ? json_string_value(t) : NULL;
        if (!json_is_object(rf) || (t && !type))
            return bad(e, "response_format", "must be an object {\"type\": \"text\" | \"json_object\" | "
                       "\"json_schema\", ...}");
        if (type && !strcmp(type, "json_object")) {
            json_t *s2;
            if (schema_member(rf, "schema", "response_format.schema", &s2, e)) return KVT_ERR_INVALID_ARG;
            if (s2 || !schema) schema = s2, where = "response_format.schema";
            if (!schema) schema = json_object(), json_object_set_new(rf, "schema", schema); // any object (below)
        } else if (type && !strcmp(type, "json_schema")) {
            json_t *w = field(rf, "json_schema");
            if (w && !json_is_object(w))
                return kvt_api_errorf(e, 400, NULL, "response_format.json_schema", "response_format.json_schema: "
                                      "must be an object {\"schema\": ...}, got %s", type_name(w));
            where = "response_format.json_schema.schema";
            if (schema_member(w ? w : rf, "schema", where, &schema, e)) return KVT_ERR_INVALID_ARG;
            if (!schema) {
                if (!w) w = json_object(), json_object_set_new(rf, "json_schema", w);
                schema = json_object(), json_object_set_new(w, "schema", schema);
            }
        } else if (type && *type && strcmp(type, "text") != 0) {
            return kvt_api_errorf(e, 400, NULL, "response_format.type", "response_format.type: must be \"text\", "
                                  "\"json_object\" or \"json_schema\", got \"%s\"", type);
        }
    }
    if (!schema) {
        if (gtext && *gtext) p->grammar = gtext, p->grammar_field = "grammar";
        return KVT_OK;
    }
    if (json_is_object(schema) && json_object_size(schema) == 0) // {}: any object, as llama-server
        json_object_set_new(schema, "type", json_string("object"));
    char *text = NULL;
    kvt_err err = {0};
    kvt_status st = kvt_json_schema_to_grammar(schema, where, &text, &err);
    if (st) return st == KVT_ERR_NOMEM ? nomem(e) : kvt_api_errorf(e, 400, NULL, where, "%s", err.msg);
    if (!own(r, text)) return nomem(e);
    p->grammar = text;
    p->grammar_field = where;
    return KVT_OK;
}

// A logit_bias value: a number, or false (a ban).
static bool bias_value(json_t *v, float *out) {
    if (json_is_number(v)) {
        *out = (float)json_number_value(v);
        return true;
    }
    if (json_is_false(v)) {
        *out = -INFINITY;
        return true;
    }
    return false;
}

// A logit_bias key or first element, as llama-server reads them: a key is an id when strtol reads all of it (leading
// blanks and a sign included: " 5" and "+5" are id 5, "-1" a negative id, refused), else a text; a pair's first
// element is an id when a JSON integer, a text when a string (always: ["12", 1] biases the text "12", as there).
static kvt_status bias_target(json_t *v, const char *key, const char *param, kvt_req_logit_bias *b, kvt_api_error *e) {
    const char *s = key ? key : json_is_string(v) ? json_string_value(v) : NULL;
    b->id = -1;
    b->text = NULL;
    if (!key && json_is_integer(v)) {
        b->id = (int64_t)json_integer_value(v);
    } else if (s && !*s) {
        return kvt_api_errorf(e, 400, NULL, "logit_bias", "%s: an empty text", param);
    } else if (key) {
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (end != s && !*end) {
            if (errno) // beyond long long: llama-server's strtol saturates it to an id it skips
                return kvt_api_errorf(e, 400, NULL, "logit_bias", "%s: token id %.40s is negative or too large", param, s);
            b->id = x;
        } else {
            b->text = s;
        }
    } else if (s) {
        b->text = s;
    } else {
        return kvt_api_errorf(e, 400, NULL, "logit_bias", "%s: the token must be an integer id or a text, got %s", param,
                              type_name(v));
    }
    if (!b->text && (b->id < 0 || b->id > INT32_MAX))
        return kvt_api_errorf(e, 400, NULL, "logit_bias", "%s: token id %lld is negative or too large", param,
                              (long long)b->id);
    return KVT_OK;
}

// logit_bias: llama-server's object {"id" or "text": bias or false} or list [[id or "text", bias or false], ...];
// where llama-server skips an entry it cannot read, kvtier refuses the request naming it.
static kvt_status parse_logit_bias(kvt_request *r, json_t *root, kvt_api_error *e) {
    json_t *v = field(root, "logit_bias");
    if (!v) return KVT_OK;
    if (!json_is_object(v) && !json_is_array(v))
        return kvt_api_errorf(e, 400, NULL, "logit_bias", "logit_bias: must be an object {token: bias} or a list of "
                              "[token, bias] pairs, got %s", type_name(v));
    const size_t n = json_is_object(v) ? json_object_size(v) : json_array_size(v);
    if (n == 0) return KVT_OK;
    if (!(r->bias_given = calloc(n, sizeof *r->bias_given))) return nomem(e);
    size_t i = 0;
    char param[96];
    if (json_is_object(v)) {
        const char *key;
        json_t *val;
        json_object_foreach(v, key, val) {
            kvt_req_logit_bias *b = &r->bias_given[i++];
            snprintf(param, sizeof param, "logit_bias[\"%.60s\"]", key);
            if (bias_target(NULL, key, param, b, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
            if (!bias_value(val, &b->bias))
                return kvt_api_errorf(e, 400, NULL, "logit_bias", "%s: the bias must be a number or false, got %s", param,
                                      type_name(val));
        }
    } else {
        for (; i < n; i++) {
            json_t *el = json_array_get(v, i);
            kvt_req_logit_bias *b = &r->bias_given[i];
            snprintf(param, sizeof param, "logit_bias[%zu]", i);
            if (!json_is_array(el) || json_array_size(el) != 2)
                return kvt_api_errorf(e, 400, NULL, "logit_bias", "%s: must be a [token, bias] pair", param);
            if (bias_target(json_array_get(el, 0), NULL, param, b, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
            if (!bias_value(json_array_get(el, 1), &b->bias))
                return kvt_api_errorf(e, 400, NULL, "logit_bias", "%s: the bias must be a number or false, got %s", param,
                                      type_name(json_array_get(el, 1)));
        }
    }
    r->p.bias_given = r->bias_given;
    r->p.n_bias_given = n;
    return KVT_OK;
}

void kvt_request_set_logit_bias(kvt_request *r, kvt_logit_bias *v, int32_t n) {
    free(r->bias);
    r->bias = v;
    r->p.logit_bias = v;
    r->p.n_logit_bias = v ? n : 0;
}

// /tokenize and /detokenize bodies.
static kvt_status parse_tokens_req(kvt_request *r, json_t *root, kvt_api_error *e) {
    kvt_request_params *p = &r->p;
    if (p->kind == KVT_REQ_DETOKENIZE) {
        json_t *v = field(root, "tokens");
        if (!v) return bad(e, "tokens", "required");
        if (!json_is_array(v))
            return kvt_api_errorf(e, 400, NULL, "tokens", "tokens: must be a list of token ids, got %s", type_name(v));
        return get_ids(r, v, "tokens", e);
    }
    json_t *v = field(root, "content");
    if (!v) return bad(e, "content", "required");
    p->parse_special = true;
    if (check_str(v, "content", &p->prompt, e) != KVT_OK || get_bool(root, "add_special", &p->add_special, e) != KVT_OK ||
        get_bool(root, "parse_special", &p->parse_special, e) != KVT_OK ||
        get_bool(root, "with_pieces", &p->with_pieces, e) != KVT_OK)
        return KVT_ERR_INVALID_ARG;
    return KVT_OK;
}

kvt_req_defaults kvt_req_defaults_llama(void) {
    kvt_req_defaults d = {.temperature = 0.8, .top_p = 0.95, .min_p = 0.05, .typical_p = 1.0, .xtc_threshold = 0.1,
                          .dynatemp_exponent = 1.0, .repeat_penalty = 1.0, .mirostat_tau = 5.0, .mirostat_eta = 0.1,
                          .dry_base = 1.75, .adaptive_target = -1.0, .adaptive_decay = 0.9, .top_k = 40,
                          .dry_allowed_length = 2, .dry_penalty_last_n = 64, .repeat_last_n = 64};
    return d;
}

void kvt_req_defaults_apply(const kvt_req_defaults *d, kvt_request_params *p) {
    p->temperature = d->temperature, p->top_p = d->top_p, p->min_p = d->min_p, p->top_k = d->top_k;
    p->repeat_penalty = d->repeat_penalty, p->frequency_penalty = d->frequency_penalty;
    p->presence_penalty = d->presence_penalty, p->repeat_last_n = d->repeat_last_n;
    p->has_seed = d->has_seed, p->seed = d->seed, p->ignore_eos = d->ignore_eos;
    p->top_n_sigma = d->top_n_sigma, p->typical_p = d->typical_p;
    p->xtc_probability = d->xtc_probability, p->xtc_threshold = d->xtc_threshold;
    p->dynatemp_range = d->dynatemp_range, p->dynatemp_exponent = d->dynatemp_exponent;
    p->mirostat = d->mirostat, p->mirostat_tau = d->mirostat_tau, p->mirostat_eta = d->mirostat_eta;
    p->dry_multiplier = d->dry_multiplier, p->dry_base = d->dry_base;
    p->dry_allowed_length = d->dry_allowed_length, p->dry_penalty_last_n = d->dry_penalty_last_n;
    p->adaptive_target = d->adaptive_target, p->adaptive_decay = d->adaptive_decay, p->min_keep = d->min_keep;
    p->dry_breakers = (kvt_req_text *)d->dry_breakers, p->n_dry_breakers = d->n_dry_breakers;
}

kvt_status kvt_request_parse(const char *body, size_t len, kvt_req_kind kind, kvt_request **out,
                             kvt_api_error *aerr) {
    return kvt_request_parse_with(body, len, kind, NULL, out, aerr);
}

kvt_status kvt_request_parse_with(const char *body, size_t len, kvt_req_kind kind, const kvt_req_defaults *dflt,
                                  kvt_request **out, kvt_api_error *aerr) {
    *out = NULL;
    const kvt_req_defaults d = dflt ? *dflt : kvt_req_defaults_llama();
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_ALLOW_NUL, &jerr); // NUL in strings: refused by field
    if (!root)
        return kvt_api_errorf(aerr, 400, "invalid_request_error", NULL,
                              "malformed JSON at line %d, column %d: %s", jerr.line, jerr.column, jerr.text);
    if (!json_is_object(root)) {
        kvt_api_errorf(aerr, 400, "invalid_request_error", NULL, "the request body must be a JSON object, got %s",
                       type_name(root));
        json_decref(root);
        return KVT_ERR_INVALID_ARG;
    }
    const bool infill = kind == KVT_REQ_INFILL; // /completion's request, the prompt from /infill's fields
    if (infill) kind = KVT_REQ_NATIVE;
    kvt_request *r = calloc(1, sizeof *r);
    if (!r) {
        json_decref(root);
        return nomem(aerr);
    }
    r->root = root;
    kvt_request_params *p = &r->p;
    *p = (kvt_request_params){.kind = kind, .max_tokens = -1, .n = 1};
    kvt_req_defaults_apply(&d, p);
    if (p->dry_breakers) { // the server's breakers: the request's own copy of the list (the strings stay the server's)
        kvt_req_text *own = malloc((p->n_dry_breakers + 1) * sizeof *own);
        if (own) memcpy(own, p->dry_breakers, p->n_dry_breakers * sizeof *own);
        p->dry_breakers = own;
        if (!own) {
            kvt_request_free(r);
            return nomem(aerr);
        }
    }
    kvt_status st = KVT_OK;
    json_t *model = field(root, "model");
    if (model) st = check_str(model, "model", &p->model, aerr);
    if (kind == KVT_REQ_TOKENIZE || kind == KVT_REQ_DETOKENIZE) {
        if (st == KVT_OK) st = parse_tokens_req(r, root, aerr);
    } else {
        if (st == KVT_OK) {
            st = kind == KVT_REQ_CHAT     ? parse_messages(r, root, aerr)
                 : kind == KVT_REQ_NATIVE ? kvt_native_parse(root, infill, p, &r->native, aerr)
                                          : parse_prompt(r, root, aerr);
            p->native = r->native;
        }
        if (st == KVT_OK) st = parse_sampling(r, root, aerr);
        if (st == KVT_OK) st = parse_logit_bias(r, root, aerr);
        if (st == KVT_OK) st = parse_stop(r, root, aerr);
        if (st == KVT_OK) st = parse_logprobs_stream(r, root, aerr);
        if (st == KVT_OK) st = parse_unsupported(r, root, aerr);
        if (st == KVT_OK) st = parse_grammar(r, root, aerr);
        if (st == KVT_OK && kind == KVT_REQ_NATIVE) st = kvt_native_finish(root, p, r->native, aerr);
        else if (st == KVT_OK) st = kvt_llama_extras(root, p, aerr); // /v1: llama-server takes them there too
    }
    if (st != KVT_OK) {
        kvt_request_free(r);
        return st;
    }
    *out = r;
    return KVT_OK;
}

void kvt_request_free(kvt_request *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_owned; i++) free(r->owned[i]);
    free(r->owned);
    free(r->msgs);
    free(r->ids);
    free(r->stops);
    free(r->bias_given);
    free(r->bias);
    free(r->p.dry_breakers);
    kvt_native_free(r->native);
    json_decref(r->root);
    free(r);
}

const kvt_request_params *kvt_request_get(const kvt_request *r) { return &r->p; }


// The field readers, for native.c (native.h).
kvt_status kvt_req_get_int(json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *present,
                           kvt_api_error *e) {
    return get_int(obj, key, lo, hi, out, present, e);
}
kvt_status kvt_req_get_bool(json_t *obj, const char *key, bool *out, kvt_api_error *e) { return get_bool(obj, key, out, e); }
kvt_status kvt_req_check_str(json_t *v, const char *param, const char **out, kvt_api_error *e) {
    return check_str(v, param, out, e);
}
const char *kvt_req_type_name(const json_t *v) { return type_name(v); }
kvt_status kvt_req_bad(kvt_api_error *e, const char *param, const char *what) { return bad(e, param, what); }
kvt_status kvt_req_wrong_type(kvt_api_error *e, const char *param, const char *want, const json_t *v) {
    return kvt_api_errorf(e, 400, NULL, param, "%s: must be %s, got %s", param, want, type_name(v));
}
kvt_status kvt_req_nomem(kvt_api_error *e) { return nomem(e); }
json_t *kvt_req_field(json_t *obj, const char *key) { return field(obj, key); }

json_t *kvt_req_load(const char *body, size_t len, kvt_api_error *e) {
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_ALLOW_NUL, &jerr);
    if (!root) {
        kvt_api_errorf(e, 400, "invalid_request_error", NULL, "malformed JSON at line %d, column %d: %s", jerr.line,
                       jerr.column, jerr.text);
    } else if (!json_is_object(root)) {
        kvt_api_errorf(e, 400, "invalid_request_error", NULL, "the request body must be a JSON object, got %s",
                       type_name(root));
        json_decref(root);
        root = NULL;
    }
    return root;
}

kvt_status kvt_request_parse_chat(json_t *chat, kvt_req_api api, const kvt_req_defaults *d, kvt_request **out,
                                  kvt_api_error *e) {
    *out = NULL;
    char *text = chat ? json_dumps(chat, JSON_COMPACT) : NULL;
    json_decref(chat);
    if (!text) return nomem(e);
    kvt_status st = kvt_request_parse_with(text, strlen(text), KVT_REQ_CHAT, d, out, e);
    free(text);
    if (st == KVT_OK) (*out)->p.api = api;
    return st;
}
