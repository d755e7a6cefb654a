// native.c - llama-server's /completion requests and answers and GET /props (native.h).
#include "native.h"
#include "infill.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static kvt_status oom(kvt_api_error *e) {
    kvt_api_errorf(e, 500, "server_error", NULL, "out of memory parsing the request");
    return KVT_ERR_NOMEM;
}

static json_t *field(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

// ---- the prompt ----

static bool has_number(const json_t *arr) {
    for (size_t i = 0; i < json_array_size(arr); i++)
        if (json_is_number(json_array_get(arr, i))) return true;
    return false;
}

static bool is_token_id(const json_t *v) {
    return json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= INT32_MAX;
}

// A list of token ids into x->ids / p->prompt_ids, or a list mixing strings and ids into x->pieces.
static kvt_status list_prompt(json_t *arr, const char *param, kvt_request_params *p, struct kvt_native_ext *x,
                              kvt_api_error *e) {
    const size_t n = json_array_size(arr);
    bool mixed = false;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (json_is_string(v)) {
            mixed = true;
        } else if (!is_token_id(v)) {
            return kvt_api_errorf(e, 400, NULL, param, "%s[%zu]: must be a token id (an integer in [0, 2147483647]) or "
                                  "a string", param, i);
        }
    }
    if (!mixed) {
        if (!(x->ids = malloc(n * sizeof *x->ids))) return oom(e);
        for (size_t i = 0; i < n; i++) x->ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
        p->prompt_ids = x->ids;
        p->n_prompt_ids = (int64_t)n;
        return KVT_OK;
    }
    if (!(x->pieces = calloc(n, sizeof *x->pieces))) return oom(e);
    x->n_pieces = n;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        char pp[96];
        snprintf(pp, sizeof pp, "%s[%zu]", param, i);
        if (!json_is_string(v)) x->pieces[i].id = (int32_t)json_integer_value(v);
        else if (kvt_req_check_str(v, pp, &x->pieces[i].text, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    }
    return KVT_OK;
}

// One prompt: a string, a list of ids or of strings and ids, or {"prompt_string": one of those} (not nested).
static kvt_status one_prompt(json_t *v, const char *param, bool in_object, kvt_request_params *p,
                             struct kvt_native_ext *x, kvt_api_error *e) {
    if (json_is_string(v)) return kvt_req_check_str(v, param, &p->prompt, e);
    if (json_is_array(v) && json_array_size(v) == 0)
        return kvt_api_errorf(e, 400, NULL, param, "%s: the prompt is empty", param);
    if (json_is_array(v) && has_number(v)) return list_prompt(v, param, p, x, e);
    if (json_is_object(v) && !in_object) {
        if (field(v, "multimodal_data"))
            return kvt_api_errorf(e, 400, NULL, "multimodal_data", "multimodal_data: not supported by kvtier (text only)");
        json_t *s = field(v, "prompt_string");
        char pp[96];
        snprintf(pp, sizeof pp, "%s.prompt_string", param);
        if (!s) return kvt_api_errorf(e, 400, NULL, pp, "%s: required", pp);
        return one_prompt(s, pp, true, p, x, e);
    }
    return kvt_api_errorf(e, 400, NULL, param, "%s: must be a string, a list of token ids, a list of strings and token "
                          "ids or {\"prompt_string\": ...}, got %s", param, kvt_req_type_name(v));
}

static kvt_status parse_prompt(json_t *root, kvt_request_params *p, struct kvt_native_ext *x, kvt_api_error *e) {
    json_t *v = field(root, "prompt");
    if (!v) return kvt_api_errorf(e, 400, NULL, "prompt", "prompt: required");
    if (json_is_array(v) && json_array_size(v) > 0 && !has_number(v)) { // a list of prompts (llama-server's batch)
        if (json_array_size(v) > 1)
            return kvt_api_errorf(e, 400, NULL, "prompt", "prompt: a list of several prompts is not supported; send one "
                                  "request per prompt");
        return one_prompt(json_array_get(v, 0), "prompt[0]", false, p, x, e);
    }
    return one_prompt(v, "prompt", false, p, x, e);
}

// ---- the other fields ----

// A number field whose values outside [lo, hi] ask for something kvtier does not implement.
static kvt_status refuse_range(json_t *root, const char *key, double lo, double hi, kvt_api_error *e) {
    json_t *v = field(root, key);
    if (!v) return KVT_OK;
    if (!json_is_number(v))
        return kvt_api_errorf(e, 400, NULL, key, "%s: must be a number, got %s", key, kvt_req_type_name(v));
    const double x = json_number_value(v);
    if (x < lo || x > hi)
        return kvt_api_errorf(e, 400, NULL, key, "%s: %g is not supported by kvtier (it accepts [%g, %g], where it "
                              "does nothing)", key, x, lo, hi);
    return KVT_OK;
}

// Fields that would change the answer and that kvtier does not implement, with the range of values that ask for
// nothing (llama-server's "disabled" values).
static kvt_status refuse_unsupported(json_t *root, kvt_api_error *e) {
    static const struct {
        const char *key;
        double lo, hi;
    } num[] = {{"n_cmpl", 1, 1}, {"reasoning_budget_tokens", -1, -1}};
    for (size_t i = 0; i < sizeof num / sizeof num[0]; i++)
        if (refuse_range(root, num[i].key, num[i].lo, num[i].hi, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    json_t *lora = field(root, "lora");
    if (lora && !(json_is_array(lora) && json_array_size(lora) == 0))
        return kvt_api_errorf(e, 400, NULL, "lora", "lora: not supported by kvtier");
    // accepted and ignored (they change neither the answer nor its fields): type-checked as llama-server reads them
    static const char *const flags[] = {"cache_prompt", "timings_per_token", "return_progress", "verbose",
                                        "backend_sampling"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        bool b;
        if (kvt_req_get_bool(root, flags[i], &b, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    }
    return KVT_OK;
}

// response_fields: a list of strings (paths into the answer, "/" between keys), kept as pointers into root's strings.
static kvt_status response_fields(json_t *root, struct kvt_native_ext *x, kvt_api_error *e) {
    json_t *v = field(root, "response_fields");
    if (!v) return KVT_OK;
    if (!json_is_array(v))
        return kvt_api_errorf(e, 400, NULL, "response_fields", "response_fields: must be a list of strings, got %s",
                              kvt_req_type_name(v));
    const size_t n = json_array_size(v);
    if (n && !(x->response_fields = malloc(n * sizeof *x->response_fields))) return oom(e);
    for (size_t i = 0; i < n; i++) {
        char pp[48];
        snprintf(pp, sizeof pp, "response_fields[%zu]", i);
        if (kvt_req_check_str(json_array_get(v, i), pp, &x->response_fields[i], e) != KVT_OK)
            return KVT_ERR_INVALID_ARG;
    }
    x->n_response_fields = n;
    return KVT_OK;
}

kvt_status kvt_native_parse(json_t *root, bool infill, kvt_request_params *p, struct kvt_native_ext **out,
                            kvt_api_error *e) {
    struct kvt_native_ext *x = calloc(1, sizeof *x);
    *out = x;
    if (!x) return oom(e);
    x->id_slot = -1;
    if ((infill ? kvt_infill_parse(root, &x->infill, e) : parse_prompt(root, p, x, e)) != KVT_OK)
        return e->http_status == 500 ? KVT_ERR_NOMEM : KVT_ERR_INVALID_ARG;
    int64_t v;
    bool given;
    const char *probs_key = field(root, "n_probs") ? "n_probs" : "logprobs"; // logprobs: llama-server's alias
    if (kvt_req_get_int(root, probs_key, 0, KVT_REQ_MAX_TOP_LOGPROBS, &v, &given, e) != KVT_OK)
        return KVT_ERR_INVALID_ARG;
    x->n_probs = given ? (int32_t)v : 0;
    p->logprobs = x->n_probs > 0;
    p->top_logprobs = x->n_probs;
    if (kvt_req_get_bool(root, "return_tokens", &x->return_tokens, e) != KVT_OK ||
        kvt_req_get_bool(root, "post_sampling_probs", &x->post_sampling_probs, e) != KVT_OK ||
        kvt_req_get_int(root, "id_slot", -1, INT64_MAX, &x->id_slot, NULL, e) != KVT_OK)
        return KVT_ERR_INVALID_ARG;
    if (response_fields(root, x, e) != KVT_OK) return e->http_status == 500 ? KVT_ERR_NOMEM : KVT_ERR_INVALID_ARG;
    return refuse_unsupported(root, e);
}

// ---- samplers ----

enum {
    S_IGNORED,
    S_PENALTIES,
    S_DRY,
    S_TOP_N_SIGMA,
    S_TOP_K,
    S_TYPICAL,
    S_TOP_P,
    S_MIN_P,
    S_XTC,
    S_INFILL,
    S_TEMP,
    S_ADAPTIVE // the draw: anywhere in the list
};

// A sampler name (llama-server's names and aliases, any case) or character; S_IGNORED for the samplers kvtier
// lacks (whose settings the other fields keep neutral) and for names llama-server does not know (it skips them).
static int sampler_of(const char *s, size_t n) {
    static const struct {
        const char *name;
        int kind;
    } names[] = {{"penalties", S_PENALTIES},     {"dry", S_DRY},                 {"top_n_sigma", S_TOP_N_SIGMA},
                 {"top-n-sigma", S_TOP_N_SIGMA},
                 {"topnsigma", S_TOP_N_SIGMA},   {"top_k", S_TOP_K},             {"top-k", S_TOP_K},
                 {"topk", S_TOP_K},              {"typ_p", S_TYPICAL},           {"typ-p", S_TYPICAL},
                 {"typp", S_TYPICAL},            {"typ", S_TYPICAL},             {"top_p", S_TOP_P},
                 {"top-p", S_TOP_P},             {"topp", S_TOP_P},              {"nucleus", S_TOP_P},
                 {"min_p", S_MIN_P},             {"min-p", S_MIN_P},             {"minp", S_MIN_P},
                 {"xtc", S_XTC},                 {"infill", S_INFILL},           {"temperature", S_TEMP},
                 {"temp", S_TEMP},               {"adaptive_p", S_ADAPTIVE},     {"adaptive-p", S_ADAPTIVE},
                 {"adaptivep", S_ADAPTIVE}};
    if (n == 1) {
        switch (s[0]) {
        case 'e': return S_PENALTIES;
        case 'd': return S_DRY;
        case 's': return S_TOP_N_SIGMA;
        case 'y': return S_TYPICAL;
        case 'x': return S_XTC;
        case 'k': return S_TOP_K;
        case 'p': return S_TOP_P;
        case 'm': return S_MIN_P;
        case 't': return S_TEMP;
        case 'i': return S_INFILL;
        case 'a': return S_ADAPTIVE;
        default: return S_IGNORED;
        }
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i].name) == n && !strncasecmp(names[i].name, s, n)) return names[i].kind;
    return S_IGNORED;
}

// samplers: the implemented samplers that act (non-neutral settings) must keep kvtier's order (penalties, top_k, top_p,
// min_p, temperature) and appear once; one left out is not applied (its setting becomes neutral, as in llama-server).
static kvt_status apply_samplers(json_t *root, kvt_request_params *p, kvt_api_error *e) {
    json_t *v = field(root, "samplers");
    if (!v) return KVT_OK;
    const bool chars = json_is_string(v);
    if (!chars && !json_is_array(v))
        return kvt_api_errorf(e, 400, NULL, "samplers", "samplers: must be a list of names or a string of sampler "
                              "characters, got %s", kvt_req_type_name(v));
    size_t n = chars ? json_string_length(v) : json_array_size(v);
    int count[S_ADAPTIVE + 1] = {0}, last = 0;
    bool ordered = true;
    for (size_t i = 0; i < n; i++) {
        int k;
        if (chars) {
            k = sampler_of(json_string_value(v) + i, 1);
        } else {
            json_t *s = json_array_get(v, i);
            if (!json_is_string(s))
                return kvt_api_errorf(e, 400, NULL, "samplers", "samplers[%zu]: must be a string, got %s", i,
                                      kvt_req_type_name(s));
            k = sampler_of(json_string_value(s), json_string_length(s));
        }
        count[k]++;
        if (k != S_IGNORED && k != S_ADAPTIVE) {
            if (k < last) ordered = false;
            last = k;
        }
    }
    if (p->mirostat) return KVT_OK; // mirostat's chain is fixed (temperature, mirostat): llama-server ignores the list
    if (!count[S_PENALTIES]) {
        p->repeat_penalty = 1.0;
        p->frequency_penalty = p->presence_penalty = 0.0;
    }
    if (!count[S_DRY]) p->dry_multiplier = 0;
    if (!count[S_TOP_N_SIGMA]) p->top_n_sigma = 0;
    if (!count[S_TOP_K]) p->top_k = 0;
    if (!count[S_TYPICAL]) p->typical_p = 1.0;
    if (!count[S_XTC]) p->xtc_probability = 0.0;
    if (!count[S_TEMP]) p->dynatemp_range = 0.0; // the dynamic temperature is the temperature sampler's
    if (!count[S_TOP_P]) p->top_p = 1.0;
    if (!count[S_MIN_P]) p->min_p = 0.0;
    if (!count[S_TEMP]) p->temperature = 1.0;
    p->infill_sampler = count[S_INFILL] > 0;
    p->adaptive_p = count[S_ADAPTIVE] > 0;
    // (beside infill, typical-p or XTC a greedy temperature acts too: where it stands decides whether they see one
    // candidate or all; a dynamic temperature always acts)
    const bool xtc = p->xtc_probability > 0 && p->xtc_threshold <= 0.5;
    const bool drop = p->infill_sampler || p->typical_p < 1.0 || xtc; // may drop the argmax
    const bool active[] = {false, p->repeat_last_n > 0 && (p->repeat_penalty != 1.0 || p->frequency_penalty != 0.0 ||
                                                           p->presence_penalty != 0.0),
                           p->dry_multiplier != 0 && p->dry_penalty_last_n > 0, p->top_n_sigma > 0, p->top_k > 0, p->typical_p < 1.0, p->top_p < 1.0, p->min_p > 0.0, xtc,
                           p->infill_sampler,
                           p->dynatemp_range > 0 || (p->temperature != 1.0 && (p->temperature > 0.0 || drop))};
    int n_active = 0;
    for (int k = S_PENALTIES; k <= S_TEMP; k++) {
        if (active[k] && count[k] > 1)
            return kvt_api_errorf(e, 400, NULL, "samplers", "samplers: a sampler listed twice is not supported by "
                                  "kvtier");
        n_active += active[k];
    }
    if (!ordered && n_active > 1)
        return kvt_api_errorf(e, 400, NULL, "samplers", "samplers: kvtier applies penalties, dry, top_n_sigma, "
                              "top_k, typ_p, top_p, min_p, xtc, infill, temperature in that order (llama-server's default, "
                              "infill before the temperature); another order is not supported");
    return KVT_OK;
}

// DRY's fields (request.h), as llama-server takes them: a base under 1 is its default, the lengths 0..INT32_MAX, the
// breakers a non-empty list of strings.
static kvt_status dry_fields(json_t *root, kvt_request_params *p, kvt_api_error *e) {
    int64_t v;
    bool given;
    if (p->dry_base < 1) p->dry_base = 1.75;
    if (kvt_req_get_int(root, "dry_allowed_length", 0, INT32_MAX, &v, &given, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    if (given) p->dry_allowed_length = (int32_t)v;
    if (kvt_req_get_int(root, "dry_penalty_last_n", 0, INT32_MAX, &v, &given, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    if (given) p->dry_penalty_last_n = (int32_t)v;
    json_t *b = field(root, "dry_sequence_breakers");
    if (!b) return KVT_OK;
    const size_t n = json_is_array(b) ? json_array_size(b) : 0;
    if (n == 0)
        return kvt_api_errorf(e, 400, NULL, "dry_sequence_breakers", "dry_sequence_breakers: must be a non-empty list "
                              "of strings, got %s", json_is_array(b) ? "an empty list" : kvt_req_type_name(b));
    free(p->dry_breakers);
    if (!(p->dry_breakers = malloc(n * sizeof *p->dry_breakers))) return oom(e);
    p->n_dry_breakers = n;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(b, i);
        if (!json_is_string(s))
            return kvt_api_errorf(e, 400, NULL, "dry_sequence_breakers", "dry_sequence_breakers[%zu]: must be a "
                                  "string, got %s", i, kvt_req_type_name(s));
        p->dry_breakers[i] = (kvt_req_text){json_string_value(s), json_string_length(s)};
    }
    return KVT_OK;
}

kvt_status kvt_llama_extras(json_t *root, kvt_request_params *p, kvt_api_error *e) {
    int64_t v;
    bool given;
    if (kvt_req_get_int(root, "min_keep", 0, INT32_MAX, &v, &given, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    if (given) p->min_keep = (int32_t)v;
    if (kvt_req_get_int(root, "n_indent", 0, INT32_MAX, &v, &given, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    p->n_indent = given ? (int32_t)v : 0;
    // the samplers' numbers, any value as llama-server reads them (absent: the server's defaults, request.h)
    static const struct {
        const char *key;
        size_t off;
    } nums[] = {{"top_n_sigma", offsetof(kvt_request_params, top_n_sigma)},
                {"typical_p", offsetof(kvt_request_params, typical_p)},
                {"xtc_probability", offsetof(kvt_request_params, xtc_probability)},
                {"xtc_threshold", offsetof(kvt_request_params, xtc_threshold)},
                {"dynatemp_range", offsetof(kvt_request_params, dynatemp_range)},
                {"dynatemp_exponent", offsetof(kvt_request_params, dynatemp_exponent)},
                {"mirostat_tau", offsetof(kvt_request_params, mirostat_tau)},
                {"mirostat_eta", offsetof(kvt_request_params, mirostat_eta)},
                {"dry_multiplier", offsetof(kvt_request_params, dry_multiplier)},
                {"dry_base", offsetof(kvt_request_params, dry_base)},
                {"adaptive_target", offsetof(kvt_request_params, adaptive_target)}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        json_t *f = field(root, nums[i].key);
        if (f && !json_is_number(f))
            return kvt_api_errorf(e, 400, NULL, nums[i].key, "%s: must be a number, got %s", nums[i].key,
                                  kvt_req_type_name(f));
        double *at = (double *)((char *)p + nums[i].off), x = f ? json_number_value(f) : *at; // (absent: the default)
        x = x < -1e30 ? -1e30 : x > 1e30 ? 1e30 : x; // float range in the sampler (a huge n keeps every logit)
        *at = x;
    }
    if (p->top_n_sigma < 0) p->top_n_sigma = 0; // llama-server's -1: off
    if (p->typical_p > 1) p->typical_p = 1;
    if (kvt_req_get_int(root, "mirostat", 0, 2, &v, &given, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    if (given) p->mirostat = (int32_t)v;
    if (dry_fields(root, p, e) != KVT_OK) return e->http_status == 500 ? KVT_ERR_NOMEM : KVT_ERR_INVALID_ARG;
    if (p->adaptive_target > 1) p->adaptive_target = 1; // llama-server's clamp
    json_t *ad = field(root, "adaptive_decay");
    if (ad && !json_is_number(ad))
        return kvt_api_errorf(e, 400, NULL, "adaptive_decay", "adaptive_decay: must be a number, got %s",
                              kvt_req_type_name(ad));
    if (ad) p->adaptive_decay = json_number_value(ad);
    if (!(p->adaptive_decay >= 0 && p->adaptive_decay <= 0.99))
        return kvt_api_errorf(e, 400, NULL, "adaptive_decay", "adaptive_decay: %g is out of range [0, 0.99]",
                              p->adaptive_decay);
    json_t *tm = field(root, "t_max_predict_ms"); // llama-server's integer milliseconds; <= 0: off
    if (tm && !json_is_number(tm))
        return kvt_api_errorf(e, 400, NULL, "t_max_predict_ms", "t_max_predict_ms: must be a number, got %s",
                              kvt_req_type_name(tm));
    const double ms = tm ? json_number_value(tm) : 0;
    p->t_max_predict_ms = ms >= 1 ? (ms < 1e15 ? (int64_t)ms : (int64_t)1e15) : 0;
    return apply_samplers(root, p, e);
}

kvt_status kvt_native_finish(json_t *root, kvt_request_params *p, struct kvt_native_ext *x, kvt_api_error *e) {
    (void)x;
    int64_t v;
    bool given;
    // n_predict wins over max_tokens and max_completion_tokens (llama-server's precedence); request.c checked it
    if (kvt_req_get_int(root, "n_predict", -1, INT32_MAX, &v, &given, e) != KVT_OK) return KVT_ERR_INVALID_ARG;
    if (given) p->max_tokens = v;
    if (p->has_seed && (p->seed == UINT64_MAX || p->seed == 0xFFFFFFFFu)) p->has_seed = false; // -1: random
    if (p->n != 1)
        return kvt_api_errorf(e, 400, NULL, "n", "n: one completion per /completion request (send several requests, "
                              "or use /v1/completions)");
    // llama-server clamps these into their ranges
    if (p->temperature < 0) p->temperature = 0;
    if (p->top_k < 0) p->top_k = 0;
    if (p->top_p > 1) p->top_p = 1;
    if (p->min_p < 0) p->min_p = 0;
    if (p->min_p > 1) p->min_p = 1;
    return kvt_llama_extras(root, p, e);
}

void kvt_native_free(struct kvt_native_ext *x) {
    if (!x) return;
    free(x->pieces);
    free(x->ids);
    free(x->response_fields);
    kvt_infill_free(x->infill);
    free(x);
}

// ---- answers ----

#define set kvt_resp_set       // response.c's: a failed part sets *ok false
#define append kvt_resp_append

// The sampling settings as llama-server's generation_settings (the samplers kvtier lacks at their neutral values).
// seed_known false: the default, a random seed (written as llama-server writes it, 4294967295).
static json_t *settings_json(const kvt_request_params *p, int32_t n_probs, bool seed_known, uint64_t seed, bool *ok) {
    json_t *o = json_object(), *stop = json_array(), *smp = json_array();
    if (!o || !stop || !smp) {
        json_decref(o);
        json_decref(stop);
        json_decref(smp);
        *ok = false;
        return NULL;
    }
    set(o, "seed", json_integer(seed_known ? (json_int_t)seed : (json_int_t)0xFFFFFFFFu), ok);
    set(o, "temperature", json_real(p->temperature), ok);
    set(o, "dynatemp_range", json_real(p->dynatemp_range), ok);
    set(o, "dynatemp_exponent", json_real(p->dynatemp_exponent), ok);
    set(o, "top_k", json_integer(p->top_k), ok);
    set(o, "top_p", json_real(p->top_p), ok);
    set(o, "min_p", json_real(p->min_p), ok);
    set(o, "top_n_sigma", json_real(p->top_n_sigma > 0 ? p->top_n_sigma : -1), ok);
    set(o, "xtc_probability", json_real(p->xtc_probability), ok);
    set(o, "xtc_threshold", json_real(p->xtc_threshold), ok);
    set(o, "typical_p", json_real(p->typical_p), ok);
    set(o, "repeat_last_n", json_integer((json_int_t)p->repeat_last_n), ok);
    set(o, "repeat_penalty", json_real(p->repeat_penalty), ok);
    set(o, "presence_penalty", json_real(p->presence_penalty), ok);
    set(o, "frequency_penalty", json_real(p->frequency_penalty), ok);
    set(o, "dry_multiplier", json_real(p->dry_multiplier), ok);
    set(o, "dry_base", json_real(p->dry_base), ok);
    set(o, "dry_allowed_length", json_integer(p->dry_allowed_length), ok);
    set(o, "dry_penalty_last_n", json_integer(p->dry_penalty_last_n), ok);
    json_t *brk = json_array();
    static const char *const dflt[] = {"\n", ":", "\"", "*"};
    for (size_t i = 0; brk && i < (p->dry_breakers ? p->n_dry_breakers : 4); i++)
        append(brk, p->dry_breakers ? kvt_resp_jtext(p->dry_breakers[i].s, p->dry_breakers[i].len) : json_string(dflt[i]),
               ok);
    set(o, "dry_sequence_breakers", brk, ok);
    set(o, "mirostat", json_integer(p->mirostat), ok);
    set(o, "mirostat_tau", json_real(p->mirostat_tau), ok);
    set(o, "mirostat_eta", json_real(p->mirostat_eta), ok);
    set(o, "adaptive_target", json_real(p->adaptive_target), ok);
    set(o, "adaptive_decay", json_real(p->adaptive_decay), ok);
    for (size_t i = 0; i < p->n_stop; i++) append(stop, kvt_resp_jtext(p->stop[i], strlen(p->stop[i])), ok);
    set(o, "stop", stop, ok);
    set(o, "max_tokens", json_integer(p->max_tokens), ok);
    set(o, "n_predict", json_integer(p->max_tokens), ok);
    set(o, "ignore_eos", json_boolean(p->ignore_eos), ok);
    set(o, "stream", json_boolean(p->stream), ok);
    json_t *lb = json_array();
    for (int32_t i = 0; lb && i < p->n_logit_bias; i++) { // llama-server's shape; a ban's -inf is null in JSON
        const float b = p->logit_bias[i].bias;
        json_t *e = json_object();
        set(e, "bias", isfinite(b) ? json_real(b) : json_null(), ok);
        set(e, "token", json_integer(p->logit_bias[i].token), ok);
        append(lb, e, ok);
    }
    set(o, "logit_bias", lb, ok);
    set(o, "n_probs", json_integer(n_probs), ok);
    set(o, "min_keep", json_integer(p->min_keep), ok);
    set(o, "grammar", json_string(p->grammar ? p->grammar : ""), ok);
    static const char *const chain[] = {"penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
                                        "infill", "temperature"};
    const bool infill = p->infill_sampler;
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++)
        if (infill || strcmp(chain[i], "infill")) append(smp, json_string(chain[i]), ok);
    if (p->adaptive_p) append(smp, json_string("adaptive_p"), ok);
    set(o, "samplers", smp, ok);
    set(o, "post_sampling_probs", json_boolean(p->native && p->native->post_sampling_probs), ok);
    return o;
}

// A new object holding, for each path of fields ("a/b": keys between the slashes) found in o, its value under the path
// as key; o is released. A path through a non-object or a missing key is left out (llama-server's
// json_get_nested_values).
static json_t *only_fields(json_t *o, const char *const *fields, size_t n, bool *ok) {
    json_t *r = json_object();
    for (size_t i = 0; r && i < n; i++) {
        json_t *cur = o;
        for (const char *k = fields[i]; cur;) {
            const char *sl = strchr(k, '/');
            const size_t kl = sl ? (size_t)(sl - k) : strlen(k);
            cur = json_is_object(cur) ? json_object_getn(cur, k, kl) : NULL;
            if (!sl) break;
            k = sl + 1;
        }
        if (cur) set(r, fields[i], json_incref(cur), ok);
    }
    if (!r) *ok = false;
    json_decref(o);
    return r;
}

kvt_status kvt_native_resp_json(const kvt_native_resp *r, char **out, size_t *out_len, kvt_err *err) {
    *out = NULL;
    bool ok = true;
    json_t *o = json_object(), *toks = json_array();
    for (size_t i = 0; toks && i < r->n_tokens; i++) append(toks, json_integer(r->tokens[i]), &ok);
    if (o) {
        set(o, "index", json_integer(0), &ok);
        set(o, "content", kvt_resp_jtext(r->content ? r->content : "", r->content ? r->len : 0), &ok);
        set(o, "tokens", toks, &ok);
    } else {
        json_decref(toks);
        ok = false;
    }
    set(o, "id_slot", json_integer(-1), &ok);
    set(o, "stop", json_boolean(r->stop), &ok);
    if (r->stop) {
        set(o, "model", kvt_resp_jtext(r->model ? r->model : "", r->model ? strlen(r->model) : 0), &ok);
        set(o, "tokens_predicted", json_integer(r->tokens_predicted), &ok);
        set(o, "tokens_evaluated", json_integer(r->tokens_evaluated), &ok);
        set(o, "generation_settings", settings_json(r->params, r->n_probs_asked, true, r->seed, &ok), &ok);
        set(o, "prompt", kvt_resp_jtext(r->prompt ? r->prompt : "", r->prompt ? r->prompt_len : 0), &ok);
        set(o, "has_new_line", json_boolean(r->has_new_line), &ok);
        set(o, "truncated", json_boolean(r->truncated), &ok);
        set(o, "stop_type", json_string(r->stop_type ? r->stop_type : "none"), &ok);
        set(o, "stopping_word", kvt_resp_jtext(r->stopping_word ? r->stopping_word : "",
                                               r->stopping_word ? strlen(r->stopping_word) : 0), &ok);
        set(o, "tokens_cached", json_integer(r->tokens_cached), &ok);
    } else {
        set(o, "tokens_predicted", json_integer(r->tokens_predicted), &ok);
        set(o, "tokens_evaluated", json_integer(r->tokens_evaluated), &ok);
    }
    if (r->timings) set(o, "timings", kvt_resp_timings_json(r->timings, &ok), &ok);
    if (r->has_probs)
        set(o, "completion_probabilities", kvt_resp_logprob_list(r->probs, r->n_probs, true, r->post_sampling, &ok),
            &ok);
    if (ok && r->stop && r->n_fields > 0) o = only_fields(o, r->fields, r->n_fields, &ok);
    char *s = ok ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    if (!s) return kvt_errorf(err, KVT_ERR_NOMEM, "response: out of memory building a /completion answer");
    *out = s;
    if (out_len) *out_len = strlen(s);
    return KVT_OK;
}

kvt_status kvt_native_props_json(const kvt_native_props *pr, char **out, kvt_err *err) {
    bool ok = true;
    json_t *o = json_object(), *dgs = json_object(), *mod = json_object();
    kvt_request_params def = {.kind = KVT_REQ_NATIVE, .max_tokens = -1, .n = 1};
    const kvt_req_defaults llama = kvt_req_defaults_llama();
    kvt_req_defaults_apply(pr->defaults ? pr->defaults : &llama, &def);
    if (dgs) {
        set(dgs, "params", settings_json(&def, 0, false, 0, &ok), &ok);
        set(dgs, "n_ctx", json_integer(pr->n_ctx), &ok);
    }
    if (mod) {
        set(mod, "vision", json_false(), &ok);
        set(mod, "video", json_false(), &ok);
        set(mod, "audio", json_false(), &ok);
    }
    if (!o || !dgs || !mod) {
        json_decref(o);
        json_decref(dgs);
        json_decref(mod);
        return kvt_errorf(err, KVT_ERR_NOMEM, "response: out of memory building /props");
    }
#define STR(k, v) set(o, k, kvt_resp_jtext((v) ? (v) : "", (v) ? strlen(v) : 0), &ok)
    set(o, "default_generation_settings", dgs, &ok);
    set(o, "total_slots", json_integer(pr->total_slots), &ok);
    STR("model_alias", pr->model_alias);
    STR("model_path", pr->model_path);
    set(o, "modalities", mod, &ok);
    set(o, "endpoint_slots", json_false(), &ok);
    set(o, "endpoint_props", json_false(), &ok);
    set(o, "endpoint_metrics", json_boolean(pr->metrics), &ok);
    STR("chat_template", pr->chat_template);
    STR("chat_format", pr->chat_format);
    STR("bos_token", pr->bos_token);
    STR("eos_token", pr->eos_token);
    set(o, "build_info", json_string("kvtier"), &ok);
    set(o, "is_sleeping", json_false(), &ok);
#undef STR
    *out = ok ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    if (!*out) return kvt_errorf(err, KVT_ERR_NOMEM, "response: out of memory building /props");
    return KVT_OK;
}
