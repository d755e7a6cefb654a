// infill.c - the fields of llama-server's POST /infill (infill.h). Apart from the prompt's token ids
// (native_prompt.c), so that the request fuzz target links it without the tokenizer.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infill.h"

static kvt_status oom(kvt_api_error *e) {
    return kvt_api_errorf(e, 500, "server_error", NULL, "out of memory for the request");
}

// input_prefix / input_suffix: a string (one piece) or a list of strings and token ids.
static kvt_status pieces(json_t *root, const char *key, kvt_native_piece **out, size_t *n, kvt_api_error *e) {
    json_t *v = kvt_req_field(root, key);
    if (!v) return kvt_api_errorf(e, 400, NULL, key, "%s: required", key);
    if (json_is_string(v)) {
        if (!(*out = calloc(1, sizeof **out))) return oom(e);
        *n = 1;
        return kvt_req_check_str(v, key, &(*out)[0].text, e);
    }
    if (!json_is_array(v)) return kvt_req_wrong_type(e, key, "a string or a list of strings and token ids", v);
    const size_t k = json_array_size(v);
    if (k && !(*out = calloc(k, sizeof **out))) return oom(e);
    *n = k;
    for (size_t i = 0; i < k; i++) {
        json_t *x = json_array_get(v, i);
        char pp[64];
        snprintf(pp, sizeof pp, "%s[%zu]", key, i);
        if (json_is_string(x)) {
            if (kvt_req_check_str(x, pp, &(*out)[i].text, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
        } else if (json_is_integer(x) && json_integer_value(x) >= 0 && json_integer_value(x) <= INT32_MAX) {
            (*out)[i].id = (int32_t)json_integer_value(x);
        } else {
            return kvt_req_wrong_type(e, pp, "a string or a token id (an integer in [0, 2147483647])", x);
        }
    }
    return KVT_OK;
}

static kvt_status extra(json_t *root, struct kvt_infill *in, kvt_api_error *e) {
    json_t *v = kvt_req_field(root, "input_extra");
    if (!v || json_is_null(v)) return KVT_OK;
    if (!json_is_array(v))
        return kvt_req_wrong_type(e, "input_extra", "a list of {\"filename\": string, \"text\": string}", v);
    const size_t k = json_array_size(v);
    if (k && !(in->extra = calloc(k, sizeof *in->extra))) return oom(e);
    in->n_extra = k;
    for (size_t i = 0; i < k; i++) {
        json_t *c = json_array_get(v, i);
        char pp[64];
        snprintf(pp, sizeof pp, "input_extra[%zu]", i);
        if (!json_is_object(c)) return kvt_req_wrong_type(e, pp, "an object {\"filename\": string, \"text\": string}", c);
        json_t *t = kvt_req_field(c, "text"), *f = kvt_req_field(c, "filename");
        snprintf(pp, sizeof pp, "input_extra[%zu].text", i);
        if (!t) return kvt_api_errorf(e, 400, NULL, pp, "%s: required", pp);
        if (kvt_req_check_str(t, pp, &in->extra[i].text, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
        snprintf(pp, sizeof pp, "input_extra[%zu].filename", i);
        in->extra[i].filename = "tmp";
        if (f && kvt_req_check_str(f, pp, &in->extra[i].filename, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    }
    return KVT_OK;
}

kvt_status kvt_infill_parse(json_t *root, struct kvt_infill **out, kvt_api_error *e) {
    struct kvt_infill *in = calloc(1, sizeof *in);
    *out = in;
    if (!in) return oom(e);
    in->prompt = "";
    kvt_status st = pieces(root, "input_prefix", &in->prefix, &in->n_prefix, e);
    if (st == KVT_OK) st = pieces(root, "input_suffix", &in->suffix, &in->n_suffix, e);
    if (st == KVT_OK) st = extra(root, in, e);
    json_t *p = kvt_req_field(root, "prompt");
    if (st == KVT_OK && p) st = kvt_req_check_str(p, "prompt", &in->prompt, e);
    return st == KVT_OK ? KVT_OK : e->http_status == 500 ? KVT_ERR_NOMEM : KVT_ERR_INVALID_ARG;
}

void kvt_infill_free(struct kvt_infill *in) {
    if (!in) return;
    free(in->prefix);
    free(in->suffix);
    free(in->extra);
    free(in);
}
