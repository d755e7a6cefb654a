// embed_api.c - the embeddings endpoints (embed_api.h).
#include "embed_api.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "native.h"
#include "request.h"

// One input: its tokens (owned).
typedef struct {
    int32_t *ids;
    int64_t n;
} embd_input;

static bool is_id_array(const json_t *v) {
    if (!json_is_array(v) || json_array_size(v) == 0) return false;
    return json_is_integer(json_array_get(v, 0));
}

// One input (a string or an array of token ids) at param into *in.
static kvt_status tokenize_one(const kvt_tokenizer *tok, json_t *v, const char *param, embd_input *in,
                               kvt_api_error *ae) {
    const int32_t n_vocab = kvt_tokenizer_n_vocab(tok);
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        const size_t len = json_string_length(v);
        kvt_err err = {0};
        const int64_t n = kvt_tokenize(tok, s, len, true, true, NULL, 0, &err);
        if (n < 0) return kvt_api_errorf(ae, 400, NULL, param, "%s: cannot tokenize: %s", param, err.msg);
        if (!(in->ids = malloc((size_t)(n + 1) * sizeof *in->ids))) return kvt_req_nomem(ae);
        in->n = kvt_tokenize(tok, s, len, true, true, in->ids, n, &err);
    } else if (json_is_array(v)) {
        const size_t n = json_array_size(v);
        if (!(in->ids = malloc((n + 1) * sizeof *in->ids))) return kvt_req_nomem(ae);
        for (size_t i = 0; i < n; i++) {
            const json_t *x = json_array_get(v, i);
            if (!json_is_integer(x)) return kvt_req_wrong_type(ae, param, "a string or an array of token ids", v);
            const json_int_t id = json_integer_value(x);
            if (id < 0 || id >= n_vocab) {
                return kvt_api_errorf(ae, 400, NULL, param, "%s[%zu] = %lld is not a token id (0..%d)", param, i,
                                      (long long)id, n_vocab - 1);
            }
            in->ids[i] = (int32_t)id;
        }
        in->n = (int64_t)n;
    } else {
        return kvt_req_wrong_type(ae, param, "a string, an array of token ids, or an array of those", v);
    }
    if (in->n < 1) return kvt_api_errorf(ae, 400, NULL, param, "%s: the input is empty (no tokens)", param);
    return KVT_OK;
}

// The inputs of the request: input (or content) as one input or an array of them.
static kvt_status parse_inputs(json_t *root, const kvt_tokenizer *tok, bool oai, embd_input **out, size_t *n_out,
                               kvt_api_error *ae) {
    const char *key = "input";
    json_t *v = kvt_req_field(root, "input");
    if (!v && !oai && (v = kvt_req_field(root, "content"))) key = "content";
    if (!v) return kvt_api_errorf(ae, 400, NULL, "input", oai ? "input: required" : "input (or content): required");
    const bool many = json_is_array(v) && !is_id_array(v);
    const size_t n = many ? json_array_size(v) : 1;
    if (many && n == 0) return kvt_api_errorf(ae, 400, NULL, key, "%s: the array is empty", key);
    embd_input *in = calloc(n, sizeof *in);
    if (!in) return kvt_req_nomem(ae);
    *out = in;
    *n_out = n;
    for (size_t i = 0; i < n; i++) {
        char param[64];
        if (many) snprintf(param, sizeof param, "%s[%zu]", key, i);
        else snprintf(param, sizeof param, "%s", key);
        kvt_status st = tokenize_one(tok, many ? json_array_get(v, i) : v, param, &in[i], ae);
        if (st) return st;
    }
    return KVT_OK;
}

static const char k_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The bytes of x[0..n) (f32, the host's little-endian order) in base64; NULL when out of memory.
static json_t *base64_floats(const float *x, int64_t n) {
    const unsigned char *b = (const unsigned char *)x;
    const size_t len = (size_t)n * sizeof *x, olen = (len + 2) / 3 * 4;
    char *s = malloc(olen + 1);
    if (!s) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        const unsigned v = (unsigned)b[i] << 16 | (i + 1 < len ? (unsigned)b[i + 1] << 8 : 0) |
                           (i + 2 < len ? b[i + 2] : 0);
        s[o++] = k_b64[v >> 18 & 63];
        s[o++] = k_b64[v >> 12 & 63];
        s[o++] = i + 1 < len ? k_b64[v >> 6 & 63] : '=';
        s[o++] = i + 2 < len ? k_b64[v & 63] : '=';
    }
    s[o] = 0;
    json_t *j = json_stringn(s, o);
    free(s);
    return j;
}

static json_t *float_array(const float *x, int64_t n) {
    json_t *a = json_array();
    for (int64_t i = 0; a && i < n; i++) {
        if (json_array_append_new(a, json_real(x[i]))) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

// The answer's item for input i: vec [rows, E].
static json_t *item(bool oai, bool b64, size_t i, const float *vec, int64_t rows, int64_t E) {
    if (oai) {
        json_t *emb = b64 ? base64_floats(vec, E) : float_array(vec, E);
        if (!emb) return NULL;
        json_t *o = json_pack("{s:o,s:I,s:s}", "embedding", emb, "index", (json_int_t)i, "object", "embedding");
        if (o && b64) json_object_set_new(o, "encoding_format", json_string("base64"));
        return o;
    }
    json_t *rs = json_array();
    for (int64_t r = 0; rs && r < rows; r++) {
        json_t *row = float_array(vec + r * E, E);
        if (!row || json_array_append_new(rs, row)) {
            json_decref(rs);
            return NULL;
        }
    }
    return rs ? json_pack("{s:I,s:o}", "index", (json_int_t)i, "embedding", rs) : NULL;
}

static kvt_status answer(kvt_embedder *e, const kvt_tokenizer *tok, const char *model_id, bool oai, json_t *root,
                         kvt_cancel_fn cancel, void *cancel_user, json_t **res, kvt_api_error *ae) {
    const kvt_pooling pool = kvt_embedder_pooling(e);
    if (oai && pool == KVT_POOL_NONE) {
        return kvt_api_errorf(ae, 400, NULL, NULL, "pooling 'none' gives one vector per token, which the OpenAI shape "
                              "cannot carry: start the server with --pooling mean, cls or last, or use POST /embeddings");
    }
    // llama-server: "content" (without "input") is not OpenAI's field, so the answer takes the native shape there too,
    // and an error names the field the request used
    const bool by_content = !kvt_req_field(root, "input") && kvt_req_field(root, "content");
    if (by_content) oai = false;
    bool b64 = false;
    json_t *fmt = kvt_req_field(root, "encoding_format");
    if (fmt) {
        const char *f = json_is_string(fmt) ? json_string_value(fmt) : NULL;
        if (!f || (strcmp(f, "float") && strcmp(f, "base64"))) {
            return kvt_api_errorf(ae, 400, NULL, "encoding_format", "encoding_format: must be \"float\" or \"base64\"");
        }
        b64 = !strcmp(f, "base64");
    }
    int64_t norm = 2;
    kvt_status st = kvt_req_get_int(root, "embd_normalize", -1, 1000, &norm, NULL, ae);
    if (st) return st;
    json_t *model = kvt_req_field(root, "model");
    const char *name = model && json_is_string(model) ? json_string_value(model) : model_id;
    embd_input *in = NULL;
    size_t n = 0;
    st = parse_inputs(root, tok, oai, &in, &n, ae);
    const int64_t E = kvt_embedder_n_embd(e), n_ctx = kvt_embedder_n_ctx(e);
    const char *key = by_content ? "content" : "input"; // parse_inputs' choice
    for (size_t i = 0; !st && i < n; i++) {
        if (in[i].n > n_ctx) {
            char param[64];
            snprintf(param, sizeof param, "%s[%zu]", key, i);
            st = kvt_api_errorf(ae, 400, NULL, param, "%s: %lld tokens exceed the context of %lld (-c)", param,
                                (long long)in[i].n, (long long)n_ctx);
            ae->n_prompt_tokens = in[i].n;
            ae->n_ctx = n_ctx;
        }
    }
    json_t *data = st ? NULL : json_array();
    if (!st && !data) st = kvt_req_nomem(ae);
    int64_t total = 0;
    for (size_t i = 0; !st && i < n; i++) {
        const int64_t rows = pool == KVT_POOL_NONE ? in[i].n : 1;
        float *vec = malloc((size_t)(rows * E) * sizeof *vec);
        kvt_err err = {0};
        if (!vec) st = kvt_req_nomem(ae);
        else if (kvt_embedder_run(e, in[i].ids, in[i].n, (int)norm, vec, cancel, cancel_user, &err)) {
            if (err.status == KVT_ERR_CANCELLED) st = kvt_api_errorf(ae, 503, "unavailable_error", NULL, "the request "
                                                                     "was cancelled (input %zu: %s)", i, err.msg);
            else st = kvt_api_errorf(ae, 500, "server_error", NULL, "embedding input %zu: %s", i, err.msg);
        } else {
            json_t *it = item(oai, b64, i, vec, rows, E);
            if (!it || json_array_append_new(data, it)) st = kvt_req_nomem(ae);
        }
        total += in[i].n;
        free(vec);
    }
    for (size_t i = 0; in && i < n; i++) free(in[i].ids);
    free(in);
    if (st) {
        json_decref(data);
        return st;
    }
    if (!oai) {
        *res = data;
        return KVT_OK;
    }
    *res = json_pack("{s:s,s:s,s:{s:I,s:I},s:o}", "model", name ? name : "", "object", "list", "usage", "prompt_tokens",
                     (json_int_t)total, "total_tokens", (json_int_t)total, "data", data);
    return *res ? KVT_OK : kvt_req_nomem(ae);
}

void kvt_embd_answer(kvt_embedder *e, const kvt_tokenizer *tok, const char *model_id, bool oai, const char *body,
                     size_t len, kvt_cancel_fn cancel, void *cancel_user, int *status, char **out) {
    kvt_api_error ae;
    memset(&ae, 0, sizeof ae);
    json_t *root = NULL, *res = NULL;
    if (!e) {
        kvt_api_errorf(&ae, 501, "not_supported_error", NULL,
                       "embeddings are off: start kvtier serve with --embeddings");
    } else if ((root = kvt_req_load(body ? body : "", len, &ae))) {
        answer(e, tok, model_id, oai, root, cancel, cancel_user, &res, &ae);
    }
    json_decref(root);
    if (res) {
        *status = 200;
        *out = json_dumps(res, JSON_COMPACT | JSON_REAL_PRECISION(9)); // f32: 9 digits round-trip
        json_decref(res);
        return;
    }
    *status = ae.http_status ? ae.http_status : 500;
    *out = kvt_api_error_json(&ae);
}
