// test_serve_native.c - llama-server's /completion request parsing (native.c through kvt_request_parse) and its
// answers' and /props' JSON (the HTTP cases are in tools/serve_test.py).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "test_util.h"

#ifdef KVT_HAVE_JANSSON
#include <jansson.h>

#include "../src/gguf/gguf.h"
#include "../src/sched/sampler.h"
#include "../src/serve/infill.h"
#include "../src/serve/native.h"
#include "../src/serve/request.h"

// body parsed as a request of kind; NULL with *e filled when refused.
static kvt_request *parse_as(kvt_req_kind kind, const char *body, kvt_api_error *e) {
    kvt_request *r = NULL;
    *e = (kvt_api_error){0};
    return kvt_request_parse(body, strlen(body), kind, &r, e) == KVT_OK ? r : NULL;
}
// body parsed as a /completion request
static kvt_request *parse(const char *body, kvt_api_error *e) { return parse_as(KVT_REQ_NATIVE, body, e); }

static void test_native_ok(void) {
    kvt_api_error e;
    kvt_request *r = parse("{\"prompt\":\"Hi\",\"n_predict\":-1,\"max_tokens\":5,\"n_probs\":3,\"return_tokens\":true,"
                           "\"id_slot\":-1,\"cache_prompt\":false,\"seed\":-1,\"temperature\":7,\"top_k\":-1,"
                           "\"stop\":[\"\\n\"],\"stream\":true}", &e);
    const kvt_request_params *p = r ? kvt_request_get(r) : NULL;
    test_result(p && !strcmp(p->prompt, "Hi") && p->max_tokens == -1 && p->logprobs && p->top_logprobs == 3 &&
                    p->native && p->native->return_tokens && p->native->n_probs == 3 && !p->has_seed &&
                    p->temperature == 7 && p->top_k == 0 && p->n_stop == 1 && p->stream,
                "serve.native: n_predict wins, n_probs, return_tokens, seed -1 random, temperature 7 and top_k -1 as "
                "llama-server takes them", "%s", r ? "fields" : e.message);
    kvt_request_free(r);

    r = parse("{\"prompt\":[1,5,9],\"logprobs\":2}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->n_prompt_ids == 3 && p->prompt_ids[2] == 9 && !p->prompt && p->top_logprobs == 2 &&
                    !p->native->pieces && p->temperature == 0.8 && p->top_k == 40 && p->top_p == 0.95 &&
                    p->min_p == 0.05 && p->max_tokens == -1,
                "serve.native: a token-id prompt; logprobs is n_probs' alias; llama-server's sampling defaults", "%s",
                r ? "fields" : e.message);
    kvt_request_free(r);

    r = parse("{\"prompt\":[\"Once\",12,\" upon\"]}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->native->n_pieces == 3 && !strcmp(p->native->pieces[0].text, "Once") &&
                    !p->native->pieces[1].text && p->native->pieces[1].id == 12 &&
                    !strcmp(p->native->pieces[2].text, " upon") && !p->prompt && !p->prompt_ids,
                "serve.native: a prompt mixing strings and token ids", "%s", r ? "fields" : e.message);
    kvt_request_free(r);

    static const char *const forms[] = {"{\"prompt\":{\"prompt_string\":\"x y\"}}", "{\"prompt\":[\"x y\"]}",
                                        "{\"prompt\":[{\"prompt_string\":\"x y\"}]}"};
    for (size_t i = 0; i < 3; i++) {
        r = parse(forms[i], &e);
        p = r ? kvt_request_get(r) : NULL;
        test_result(p && p->prompt && !strcmp(p->prompt, "x y"), "serve.native: prompt_string and one-element lists",
                    "%s: %s", forms[i], r ? "fields" : e.message);
        kvt_request_free(r);
    }

    // samplers: the default order (names, aliases, characters) is accepted; one left out is not applied
    r = parse("{\"prompt\":\"x\",\"samplers\":[\"penalties\",\"Top-K\",\"typ_p\",\"nucleus\",\"min_p\",\"temp\"],"
              "\"top_k\":5,\"top_p\":0.5,\"min_p\":0.1,\"temperature\":0.7}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->top_k == 5 && p->top_p == 0.5 && p->min_p == 0.1 && p->temperature == 0.7,
                "serve.native: samplers in the default order", "%s", r ? "values" : e.message);
    kvt_request_free(r);
    r = parse("{\"prompt\":\"x\",\"samplers\":\"kt\",\"top_k\":5,\"top_p\":0.5,\"min_p\":0.1,\"temperature\":0.7}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->top_k == 5 && p->top_p == 1.0 && p->min_p == 0.0 && p->temperature == 0.7,
                "serve.native: samplers left out of the chain are not applied", "%s", r ? "values" : e.message);
    kvt_request_free(r);
    r = parse("{\"prompt\":\"x\",\"samplers\":[\"temperature\",\"top_k\"],\"temperature\":0}", &e);
    test_result(r != NULL, "serve.native: another order with one active sampler is accepted", "%s", e.message);
    kvt_request_free(r);
}

static void test_native_errors(void) {
    static const struct {
        const char *body, *param, *msg;
    } bad[] = {
        {"{}", "prompt", "required"},
        {"{\"prompt\":[]}", "prompt", "empty"},
        {"{\"prompt\":[\"a\",\"b\"]}", "prompt", "several prompts"},
        {"{\"prompt\":[1,2.5]}", "prompt", "prompt[1]"},
        {"{\"prompt\":[1,-2]}", "prompt", "token id"},
        {"{\"prompt\":{\"prompt_string\":\"a\",\"multimodal_data\":[\"eA==\"]}}", "multimodal_data", "not supported"},
        {"{\"prompt\":{\"x\":1}}", "prompt.prompt_string", "required"},
        {"{\"prompt\":{\"prompt_string\":{\"prompt_string\":\"a\"}}}", "prompt.prompt_string", "must be a string"},
        {"{\"prompt\":\"x\",\"n_probs\":21}", "n_probs", "out of range"},
        {"{\"prompt\":\"x\",\"n_probs\":\"2\"}", "n_probs", "must be an integer"},
        {"{\"prompt\":\"x\",\"return_tokens\":1}", "return_tokens", "must be a boolean"},
        {"{\"prompt\":\"x\",\"id_slot\":-2}", "id_slot", "out of range"},
        {"{\"prompt\":\"x\",\"n_predict\":0}", "n_predict", "out of range"},
        {"{\"prompt\":\"x\",\"n\":2}", "n", "one completion"},
        {"{\"prompt\":\"x\",\"n_cmpl\":3}", "n_cmpl", "not supported"},
        {"{\"prompt\":\"x\",\"mirostat\":3}", "mirostat", "out of range"},
        {"{\"prompt\":\"x\",\"mirostat_tau\":\"5\"}", "mirostat_tau", "must be a number"},
        {"{\"prompt\":\"x\",\"repeat_penalty\":-1}", "repeat_penalty", "out of range"},
        {"{\"prompt\":\"x\",\"repeat_penalty\":1.1,\"samplers\":[\"top_k\",\"penalties\"]}", "samplers", "that order"},
        {"{\"prompt\":\"x\",\"dynatemp_range\":\"0.5\"}", "dynatemp_range", "must be a number"},
        {"{\"prompt\":\"x\",\"xtc_probability\":0.5,\"min_p\":0.1,\"samplers\":[\"xtc\",\"min_p\"]}", "samplers", "order"},
        {"{\"prompt\":\"x\",\"top_n_sigma\":\"1\"}", "top_n_sigma", "must be a number"},
        {"{\"prompt\":\"x\",\"top_n_sigma\":1,\"top_k\":5,\"samplers\":[\"top_k\",\"top_n_sigma\"]}", "samplers", "order"},
        {"{\"prompt\":\"x\",\"min_keep\":-1}", "min_keep", "out of range"},
        {"{\"prompt\":\"x\",\"post_sampling_probs\":1}", "post_sampling_probs", "must be a boolean"},
        {"{\"prompt\":\"x\",\"lora\":[{\"id\":0,\"scale\":1}]}", "lora", "not supported"},
        {"{\"prompt\":\"x\",\"response_fields\":\"content\"}", "response_fields", "list of strings"},
        {"{\"prompt\":\"x\",\"response_fields\":[\"content\",3]}", "response_fields[1]", "must be a string"},
        {"{\"prompt\":\"x\",\"n_indent\":-1}", "n_indent", "out of range"},
        {"{\"prompt\":\"x\",\"n_indent\":\"4\"}", "n_indent", "must be an integer"},
        {"{\"prompt\":\"x\",\"t_max_predict_ms\":\"500\"}", "t_max_predict_ms", "must be a number"},
        {"{\"prompt\":\"x\",\"samplers\":[\"top_k\",\"temperature\",\"infill\"],\"temperature\":0}", "samplers",
         "infill, temperature in that order"},
        {"{\"prompt\":\"x\",\"samplers\":[\"infill\",\"top_k\"]}", "samplers", "order"},
        {"{\"prompt\":\"x\",\"grammar\":[\"root ::= x\"]}", "grammar", "must be a string"},
        {"{\"prompt\":\"x\",\"json_schema\":{\"type\":\"object\",\"minProperties\":\"2\"}}", "json_schema",
         "minProperties"},
        {"{\"prompt\":\"x\",\"cache_prompt\":\"yes\"}", "cache_prompt", "must be a boolean"},
        {"{\"prompt\":\"x\",\"samplers\":5}", "samplers", "must be a list"},
        {"{\"prompt\":\"x\",\"samplers\":[\"top_k\",3]}", "samplers", "samplers[1]"},
        {"{\"prompt\":\"x\",\"adaptive_decay\":0.995}", "adaptive_decay", "out of range"},
        {"{\"prompt\":\"x\",\"adaptive_decay\":\"0.5\"}", "adaptive_decay", "must be a number"},
        {"{\"prompt\":\"x\",\"samplers\":[\"temperature\",\"top_k\"],\"top_k\":5,\"temperature\":0.7}", "samplers",
         "order"},
        {"{\"prompt\":\"x\",\"samplers\":[\"top_p\",\"top_p\"],\"top_p\":0.5}", "samplers", "twice"},
        {"{\"prompt\":\"x\",\"top_p\":0}", "top_p", "out of range"},
        {"{\"prompt\":\"x\",\"dry_multiplier\":\"0.8\"}", "dry_multiplier", "must be a number"},
        {"{\"prompt\":\"x\",\"dry_allowed_length\":-1}", "dry_allowed_length", "out of range"},
        {"{\"prompt\":\"x\",\"dry_penalty_last_n\":-1}", "dry_penalty_last_n", "out of range"},
        {"{\"prompt\":\"x\",\"dry_sequence_breakers\":[]}", "dry_sequence_breakers", "non-empty list"},
        {"{\"prompt\":\"x\",\"dry_sequence_breakers\":\"\\n\"}", "dry_sequence_breakers", "non-empty list"},
        {"{\"prompt\":\"x\",\"dry_sequence_breakers\":[\"a\",2]}", "dry_sequence_breakers", "[1]: must be a string"},
        {"{\"prompt\":\"x\",\"dry_multiplier\":0.8,\"top_k\":5,\"samplers\":[\"top_k\",\"dry\"]}", "samplers",
         "penalties, dry, top_n_sigma"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kvt_api_error e;
        kvt_request *r = parse(bad[i].body, &e);
        test_result(!r && e.http_status == 400 && !strcmp(e.param, bad[i].param) && strstr(e.message, bad[i].msg),
                    "serve.native: refused with 400 naming the field", "%s: status %d param '%s' message '%s'",
                    bad[i].body, e.http_status, e.param, e.message);
        kvt_request_free(r);
    }
}

static void test_native_answers(void) {
    kvt_api_error e;
    kvt_request *r = parse("{\"prompt\":\"x\",\"n_predict\":4,\"stop\":[\"ab\"],\"n_probs\":1}", &e);
    if (!r) {
        test_result(false, "serve.native: answers", "%s", e.message);
        return;
    }
    const kvt_request_params *p = kvt_request_get(r);
    kvt_resp_alt alt = {"\xff" "a", 2, -0.5, 42};
    kvt_resp_logprob lp = {alt, &alt, 1, 0};
    const int32_t toks[2] = {42, 7};
    kvt_resp_timings t = {.prompt_n = 2, .predicted_n = 2, .prompt_ms = 4, .predicted_ms = 8};
    kvt_native_resp nr = {.stop = true, .content = "hi\n", .len = 3, .tokens = toks, .n_tokens = 2, .probs = &lp,
                          .n_probs = 1, .has_probs = true, .tokens_predicted = 2, .tokens_evaluated = 2,
                          .model = "m", .prompt = "x", .prompt_len = 1, .params = p, .n_probs_asked = 1, .seed = 5,
                          .has_new_line = true, .stop_type = "word", .stopping_word = "ab", .tokens_cached = 3,
                          .timings = &t};
    char *s = NULL;
    json_t *o = NULL;
    if (kvt_native_resp_json(&nr, &s, NULL, NULL) == KVT_OK) o = json_loads(s, 0, NULL);
    json_t *g = json_object_get(o, "generation_settings"), *cp = json_array_get(json_object_get(o, "completion_probabilities"), 0);
    test_result(o && json_is_true(json_object_get(o, "stop")) && !strcmp(json_string_value(json_object_get(o, "content")), "hi\n") &&
                    json_array_size(json_object_get(o, "tokens")) == 2 &&
                    !strcmp(json_string_value(json_object_get(o, "stop_type")), "word") &&
                    !strcmp(json_string_value(json_object_get(o, "stopping_word")), "ab") &&
                    json_integer_value(json_object_get(o, "tokens_cached")) == 3 &&
                    json_integer_value(json_object_get(g, "n_predict")) == 4 && json_integer_value(json_object_get(g, "seed")) == 5 &&
                    json_integer_value(json_object_get(cp, "id")) == 42 &&
                    !strcmp(json_string_value(json_object_get(cp, "token")), "\xef\xbf\xbd" "a") &&
                    json_array_size(json_object_get(cp, "bytes")) == 2 &&
                    json_array_size(json_object_get(cp, "top_logprobs")) == 1 &&
                    json_real_value(json_object_get(json_object_get(o, "timings"), "predicted_per_second")) == 250,
                "serve.native: the summary's fields (generation_settings, completion_probabilities with ids, timings)",
                "%s", s ? s : "null");
    json_decref(o);
    free(s);
    s = NULL;
    o = NULL;
    nr.stop = false;
    nr.timings = NULL;
    nr.has_probs = false;
    if (kvt_native_resp_json(&nr, &s, NULL, NULL) == KVT_OK) o = json_loads(s, 0, NULL);
    test_result(o && json_is_false(json_object_get(o, "stop")) && !json_object_get(o, "generation_settings") &&
                    !json_object_get(o, "completion_probabilities") && json_object_get(o, "tokens_predicted"),
                "serve.native: a token event has no summary fields", "%s", s ? s : "null");
    json_decref(o);
    free(s);
    s = NULL;
    o = NULL;
    kvt_native_props pr = {4096, 2, "m.gguf", "/x/m.gguf", "{{ t }}", "chatml", "<s>", "</s>", false, NULL};
    if (kvt_native_props_json(&pr, &s, NULL) == KVT_OK) o = json_loads(s, 0, NULL);
    json_t *d = json_object_get(o, "default_generation_settings");
    test_result(o && json_integer_value(json_object_get(d, "n_ctx")) == 4096 &&
                    json_integer_value(json_object_get(json_object_get(d, "params"), "seed")) == 4294967295 &&
                    json_integer_value(json_object_get(o, "total_slots")) == 2 &&
                    !strcmp(json_string_value(json_object_get(o, "model_path")), "/x/m.gguf") &&
                    json_is_false(json_object_get(json_object_get(o, "modalities"), "vision")),
                "serve.native: /props", "%s", s ? s : "null");
    json_decref(o);
    free(s);
    kvt_request_free(r);
}

// ---- POST /infill (infill.h) ----

static kvt_request *parse_infill(const char *body, kvt_api_error *e) { return parse_as(KVT_REQ_INFILL, body, e); }

// The fields the editor plugins send beside the FIM ones (llama.vim's request, as it sends it), and response_fields.
static void test_editor_fields(void) {
    kvt_api_error e;
    kvt_request *r = parse_infill("{\"input_prefix\":\"def f(\",\"input_suffix\":\"\\n\",\"input_extra\":[],\"prompt\":\"\","
                                  "\"n_predict\":128,\"n_indent\":4,\"top_k\":40,\"top_p\":0.99,\"stream\":false,"
                                  "\"samplers\":[\"top_k\",\"top_p\",\"infill\"],\"cache_prompt\":true,"
                                  "\"t_max_prompt_ms\":500,\"t_max_predict_ms\":3000,"
                                  "\"response_fields\":[\"content\",\"timings/prompt_n\",\"nope/x\"]}", &e);
    const kvt_request_params *p = r ? kvt_request_get(r) : NULL;
    const struct kvt_native_ext *x = p ? p->native : NULL;
    test_result(x && p->infill_sampler && p->n_indent == 4 && p->t_max_predict_ms == 3000 && p->top_k == 40 &&
                    fabs(p->top_p - 0.99) < 1e-12 && p->min_p == 0 && p->temperature == 1 && x->n_response_fields == 3 &&
                    !strcmp(x->response_fields[1], "timings/prompt_n"),
                "serve.infill: llama.vim's request (n_indent, the infill sampler, t_max_predict_ms, response_fields) is "
                "accepted with its values", "%s", r ? "values" : e.message);
    // the summary holds only the paths asked, each under its path; a path not found is left out
    kvt_resp_timings t = {.prompt_n = 2, .predicted_n = 2, .prompt_ms = 4, .predicted_ms = 8};
    kvt_native_resp nr = {.stop = true, .content = "ab", .len = 2, .params = p, .stop_type = "limit", .timings = &t,
                          .fields = x ? x->response_fields : NULL, .n_fields = x ? x->n_response_fields : 0};
    char *s = NULL;
    json_t *o = p && kvt_native_resp_json(&nr, &s, NULL, NULL) == KVT_OK ? json_loads(s, 0, NULL) : NULL;
    test_result(o && json_object_size(o) == 2 && !strcmp(json_string_value(json_object_get(o, "content")), "ab") &&
                    json_integer_value(json_object_get(o, "timings/prompt_n")) == 2,
                "serve.native: response_fields keeps the paths asked, each under its path (llama-server's shape)", "%s",
                s ? s : "null");
    json_decref(o);
    free(s);
    s = NULL;
    nr.n_fields = 0; // none asked: every field
    o = p && kvt_native_resp_json(&nr, &s, NULL, NULL) == KVT_OK ? json_loads(s, 0, NULL) : NULL;
    json_t *smp = json_object_get(json_object_get(o, "generation_settings"), "samplers");
    test_result(o && json_object_get(o, "tokens_cached") && json_array_size(smp) == 10 &&
                    !strcmp(json_string_value(json_array_get(smp, 1)), "dry") &&
                    !strcmp(json_string_value(json_array_get(smp, 8)), "infill"),
                "serve.native: without response_fields the whole summary; generation_settings lists the infill sampler",
                "%s", s ? s : "null");
    json_decref(o);
    free(s);
    kvt_request_free(r);
    // off values: n_indent 0, t_max_predict_ms <= 0; infill by its character; llama.vim's warm-up request
    r = parse("{\"prompt\":\"x\",\"n_indent\":0,\"t_max_predict_ms\":-1,\"samplers\":\"kpi\",\"response_fields\":[]}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->n_indent == 0 && p->t_max_predict_ms == 0 && p->infill_sampler && p->native->n_response_fields == 0,
                "serve.native: n_indent 0 and t_max_predict_ms -1 are off; 'i' is the infill sampler", "%s",
                r ? "values" : e.message);
    kvt_request_free(r);
    r = parse_infill("{\"input_prefix\":\"\",\"input_suffix\":\"\",\"input_extra\":[],\"prompt\":\"\",\"n_predict\":1,"
                     "\"temperature\":0.0,\"stream\":false,\"samplers\":[\"temperature\"],\"cache_prompt\":true,"
                     "\"t_max_prompt_ms\":1,\"t_max_predict_ms\":1}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && !p->infill_sampler && p->t_max_predict_ms == 1 && p->temperature == 0,
                "serve.infill: llama.vim's cache warm-up request (empty prefix and prompt) is accepted", "%s",
                r ? "values" : e.message);
    kvt_request_free(r);
    // /v1 takes them as llama-server does: a chain without top_p leaves it off; n_indent; infill; the refusals
    r = parse_as(KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"top_p\":0.5,\"samplers\":[\"top_k\",\"infill\"],\"n_indent\":2,"
                 "\"t_max_predict_ms\":70}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->infill_sampler && p->top_p == 1 && p->n_indent == 2 && p->t_max_predict_ms == 70,
                "serve.v1: samplers, n_indent and t_max_predict_ms are taken on /v1/completions too (llama-server's)",
                "%s", r ? "values" : e.message);
    kvt_request_free(r);
    r = parse_as(KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"min_keep\":3}", &e);
    test_result(r && kvt_request_get(r)->min_keep == 3, "serve.v1: min_keep is taken on /v1/chat/completions too",
                "%s", r ? "" : e.message);
    kvt_request_free(r);
    r = parse_as(KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_n_sigma\":1.5}", &e);
    p = r ? kvt_request_get(r) : NULL;
    const bool on = p && p->top_n_sigma == 1.5;
    kvt_request_free(r);
    r = parse("{\"prompt\":\"x\",\"top_n_sigma\":1.5,\"samplers\":\"kt\"}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(on && p && p->top_n_sigma == 0 && p->top_k == 40,
                "serve.native: top_n_sigma is taken (on /v1 too), and off when samplers leaves it out", "%s",
                r ? "values" : e.message);
    kvt_request_free(r);
    r = parse_as(KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"xtc_probability\":0.5,\"xtc_threshold\":0.2,"
                 "\"dynatemp_range\":0.3,\"dynatemp_exponent\":2,\"typical_p\":0.9}", &e);
    p = r ? kvt_request_get(r) : NULL;
    const bool v1 = p && p->xtc_probability == 0.5 && p->xtc_threshold == 0.2 && p->dynatemp_range == 0.3 &&
                    p->dynatemp_exponent == 2 && p->typical_p == 0.9;
    kvt_request_free(r);
    r = parse("{\"prompt\":\"x\",\"xtc_probability\":0.5,\"dynatemp_range\":0.3,\"samplers\":\"k\"}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(v1 && p && p->xtc_probability == 0 && p->dynatemp_range == 0 && p->xtc_threshold == 0.1,
                "serve.native: xtc_* and dynatemp_* are taken (on /v1 too), and off when samplers leaves out xtc and "
                "temperature", "%s", r ? "values" : e.message);
    kvt_request_free(r);
    // DRY: llama-server's defaults (off), its fields on /v1 too (a base under 1 is 1.75), the breakers as given
    // (a NUL inside one kept), off when samplers leaves dry out, on by its character
    r = parse("{\"prompt\":\"x\"}", &e);
    p = r ? kvt_request_get(r) : NULL;
    const bool dflt = p && p->dry_multiplier == 0 && p->dry_base == 1.75 && p->dry_allowed_length == 2 &&
                      p->dry_penalty_last_n == 64 && !p->dry_breakers;
    kvt_request_free(r);
    r = parse_as(KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"dry_multiplier\":0.8,"
                 "\"dry_base\":0.5,\"dry_allowed_length\":3,\"dry_penalty_last_n\":128,"
                 "\"dry_sequence_breakers\":[\"\\n\",\"a\\u0000b\"]}", &e);
    p = r ? kvt_request_get(r) : NULL;
    const bool chat = p && p->dry_multiplier == 0.8 && p->dry_base == 1.75 && p->dry_allowed_length == 3 &&
                      p->dry_penalty_last_n == 128 && p->n_dry_breakers == 2 && p->dry_breakers[1].len == 3 &&
                      !memcmp(p->dry_breakers[1].s, "a\0b", 3);
    kvt_request_free(r);
    r = parse("{\"prompt\":\"x\",\"dry_multiplier\":0.8,\"samplers\":[\"top_k\",\"temperature\"]}", &e);
    p = r ? kvt_request_get(r) : NULL;
    const bool left_out = p && p->dry_multiplier == 0;
    kvt_request_free(r);
    r = parse("{\"prompt\":\"x\",\"dry_multiplier\":0.8,\"samplers\":\"edkt\"}", &e);
    p = r ? kvt_request_get(r) : NULL;
    const bool dry_chars = p && p->dry_multiplier == 0.8;
    kvt_request_free(r);
    // adaptive-p: on only when samplers lists it (anywhere, any alias), its target clamped to 1
    r = parse("{\"prompt\":\"x\",\"adaptive_target\":2,\"adaptive_decay\":0.5,\"samplers\":[\"adaptive-p\",\"top_k\"]}",
              &e);
    p = r ? kvt_request_get(r) : NULL;
    const bool ap = p && p->adaptive_p && p->adaptive_target == 1 && p->adaptive_decay == 0.5;
    kvt_request_free(r);
    r = parse("{\"prompt\":\"x\",\"adaptive_target\":0.3}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(ap && p && !p->adaptive_p && p->adaptive_decay == 0.9, "serve.native: adaptive_p is on when samplers "
                "lists it (its target clamped to 1), off otherwise", "%d %s", ap, r ? "" : e.message);
    test_result(dflt && chat && left_out && dry_chars,
                "serve.native: DRY's fields (llama-server's defaults, on /v1 too, a base under 1 is 1.75, the breakers "
                "as given), off when samplers leaves dry out", "%d %d %d %s", dflt, chat, left_out,
                r ? "" : e.message);
    kvt_request_free(r);
}

static void test_infill_parse(void) {
    kvt_api_error e;
    kvt_request *r = parse_infill("{\"input_prefix\":[\"ab\",7],\"input_suffix\":\"c\",\"prompt\":\"x\",\"n_predict\":3,"
                                  "\"input_extra\":[{\"text\":\"t\",\"filename\":\"f\"},{\"text\":\"u\"}]}", &e);
    const kvt_request_params *p = r ? kvt_request_get(r) : NULL;
    const struct kvt_infill *in = p && p->native ? p->native->infill : NULL;
    test_result(in && p->kind == KVT_REQ_NATIVE && p->max_tokens == 3 && !p->prompt && in->n_prefix == 2 &&
                    !strcmp(in->prefix[0].text, "ab") && !in->prefix[1].text && in->prefix[1].id == 7 &&
                    in->n_suffix == 1 && !strcmp(in->suffix[0].text, "c") && !strcmp(in->prompt, "x") &&
                    in->n_extra == 2 && !strcmp(in->extra[0].filename, "f") && !strcmp(in->extra[1].filename, "tmp") &&
                    !strcmp(in->extra[1].text, "u"),
                "serve.infill: the fields parsed, a /completion request otherwise", "%s", r ? "" : e.message);
    kvt_request_free(r);
    static const struct {
        const char *body, *param;
    } bad[] = {
        {"{\"input_suffix\":\"c\"}", "input_prefix"},
        {"{\"input_prefix\":\"a\"}", "input_suffix"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":3}", "input_suffix"},
        {"{\"input_prefix\":[\"a\",-1],\"input_suffix\":\"\"}", "input_prefix[1]"},
        {"{\"input_prefix\":[\"a\",1.5],\"input_suffix\":\"\"}", "input_prefix[1]"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"\",\"input_extra\":\"x\"}", "input_extra"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"\",\"input_extra\":[3]}", "input_extra[0]"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"\",\"input_extra\":[{\"filename\":\"f\"}]}", "input_extra[0].text"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"\",\"input_extra\":[{\"text\":\"t\",\"filename\":1}]}",
         "input_extra[0].filename"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"\",\"prompt\":[1,2]}", "prompt"},
        {"{\"input_prefix\":\"a\\u0000b\",\"input_suffix\":\"\"}", "input_prefix"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"\",\"n_probs\":99}", "n_probs"},
    };
    int fails = 0;
    char why[1024] = "";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = parse_infill(bad[i].body, &e);
        if (r || e.http_status != 400 || strcmp(e.param, bad[i].param)) {
            fails++;
            snprintf(why, sizeof why, "%s: %d param '%s' (%s)", bad[i].body, e.http_status, e.param, e.message);
        }
        kvt_request_free(r);
    }
    test_result(fails == 0, "serve.infill: bad fields are a 400 naming the field", "%d wrong; %s", fails, why);
}

static kvt_tokenizer *infill_vocab(const char *const *ctl, int n_ctl, bool add_bos, kvt_gguf **g) {
    return test_vocab_words(ctl, n_ctl, NULL, 0, -1, add_bos, g);
}

// Draws of a sampler (top_k k, temperature temp, the infill filter on t or off) over logits [n]: a bitmap of the ids
// drawn in `draws` draws (ids < 64), or -1 when the sampler cannot be made.
static int64_t drawn(const kvt_tokenizer *t, const float *logits, int32_t n, int32_t k, float temp, int draws) {
    kvt_sampler_params sp = kvt_sampler_params_default();
    sp.top_k = k;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.temp = temp;
    sp.seed = 11;
    sp.infill = t;
    kvt_sampler *smp = NULL;
    if (kvt_sampler_init(&sp, n, &smp, NULL) != KVT_OK) return -1;
    int64_t seen = 0;
    for (int i = 0; i < draws; i++) {
        const int32_t id = kvt_sampler_sample(smp, logits);
        seen |= id >= 0 && id < 64 ? (int64_t)1 << id : 0;
    }
    kvt_sampler_free(smp);
    return seen;
}

// llama.cpp's infill sampler (sampler.h) on a vocabulary with words that begin one another: 42 <|endoftext|> (EOS,
// end of generation), 43 "ab", 44 "abc", 45 "xyz"; the letters a, b, c are 0, 1, 2.
static void test_infill_sampler(void) {
    static const char *const ctl[] = {"<|endoftext|>"}, *const words[] = {"ab", "abc", "xyz"};
    kvt_gguf *g = NULL;
    kvt_tokenizer *t = test_vocab_words(ctl, 1, words, 3, 42, false, &g);
    enum { N = 46, EOT = 42, AB = 43, XYZ = 45 };
    if (!t || kvt_tokenizer_n_vocab(t) != N || !kvt_token_is_eog(t, EOT) || kvt_token_is_eog(t, 11)) {
        test_result(false, "sampler.infill", "cannot make the test vocabulary (or its EOS is not 42)");
        kvt_tokenizer_free(t);
        kvt_gguf_free(g);
        return;
    }
    float l[N];
    const int64_t bit_a = 1, bit_eot = (int64_t)1 << EOT, bit_ab = (int64_t)1 << AB, bit_xyz = (int64_t)1 << XYZ;
    // the end-of-generation mass x 3 x the 4 candidates outweighs the text's: only EOG tokens are left (greedy too)
    for (int i = 0; i < N; i++) l[i] = -30.0f;
    l[EOT] = 2.0f, l[0] = 2.0f, l[1] = 1.0f, l[2] = 0.5f;
    int64_t on = drawn(t, l, N, 4, 0.0f, 1), off = drawn(NULL, l, N, 4, 0.0f, 1);
    test_result(on == bit_eot && off == bit_a, "sampler.infill: too little text mass leaves the end-of-generation "
                "tokens alone (a greedy draw then ends the answer)", "on %llx off %llx", (long long)on, (long long)off);
    // "a" takes "ab" (a prefix of it, and likelier): a (.356 + .29) and xyz (.35 >= 1/3) are left, "ab" never drawn
    for (int i = 0; i < N; i++) l[i] = -30.0f;
    l[0] = 1.2f, l[XYZ] = 1.19f, l[AB] = 1.0f;
    on = drawn(t, l, N, 3, 1.0f, 400), off = drawn(NULL, l, N, 3, 1.0f, 400);
    test_result(on == (bit_a | bit_xyz) && off == (bit_a | bit_xyz | bit_ab),
                "sampler.infill: a token whose text begins another's takes its probability; the other is never drawn",
                "on %llx off %llx", (long long)on, (long long)off);
    // the same with xyz at 1.15: after the merge xyz holds .333 of the mass, under 1 / (2 + 1): "a" alone is left
    l[XYZ] = 1.15f, l[AB] = 1.1f;
    on = drawn(t, l, N, 3, 1.0f, 200);
    test_result(on == bit_a, "sampler.infill: a text token under 1 / (texts left + 1) leaves", "on %llx",
                (long long)on);
    // eight letters of 0.125 each: none reaches 0.2, so EOT alone
    for (int i = 0; i < N; i++) l[i] = i < 8 ? 1.0f : -30.0f;
    on = drawn(t, l, N, 8, 0.0f, 1), off = drawn(NULL, l, N, 8, 0.7f, 50);
    test_result(on == bit_eot && !(off & bit_eot), "sampler.infill: no text token at 0.2 or more leaves EOT alone",
                "on %llx off %llx", (long long)on, (long long)off);
    kvt_tokenizer_free(t);
    kvt_gguf_free(g);
}

// ids of text (plain, no BOS) appended to v at *k
static void add_text(const kvt_tokenizer *t, const char *s, int32_t *v, int64_t *k) {
    kvt_err err = {0};
    *k += kvt_tokenize(t, s, strlen(s), false, false, v + *k, 256, &err);
}

// The prompt of body under lim against want[0..nw); false with why filled.
static bool infill_ids_are(const kvt_tokenizer *t, const char *body, const kvt_infill_limits *lim, const int32_t *want,
                           int64_t nw, char *why, size_t cap) {
    kvt_api_error e;
    kvt_request *r = parse_infill(body, &e);
    int64_t n = -1;
    int32_t *ids = r ? kvt_infill_prompt_ids(kvt_request_get(r)->native->infill, t, lim, &n, &e) : NULL;
    bool ok = ids && n == nw && !memcmp(ids, want, (size_t)nw * sizeof *want);
    if (!ok) {
        int o = snprintf(why, cap, "%s: %s; got %lld:", body, ids ? "ids differ" : e.message, (long long)n);
        for (int64_t i = 0; ids && i < n && o > 0 && (size_t)o < cap; i++) o += snprintf(why + o, cap - (size_t)o, " %d", ids[i]);
        if (o > 0 && (size_t)o < cap) o += snprintf(why + o, cap - (size_t)o, "; want");
        for (int64_t i = 0; i < nw && o > 0 && (size_t)o < cap; i++) o += snprintf(why + o, cap - (size_t)o, " %d", want[i]);
    }
    free(ids);
    kvt_request_free(r);
    return ok;
}

static void test_infill_prompt(void) {
    // with FIM_REP and FIM_SEP: 42 <|fim_prefix|>, 43 suffix, 44 middle, 45 pad, 46 <|repo_name|>, 47 <|file_sep|>
    static const char *const ctl[] = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>",
                                      "<|repo_name|>", "<|file_sep|>"};
    kvt_gguf *g = NULL, *g2 = NULL, *g3 = NULL;
    kvt_tokenizer *t = infill_vocab(ctl, 6, false, &g);
    if (!t) {
        test_result(false, "serve.infill: the prompt", "cannot write or open the test vocabulary");
        kvt_gguf_free(g);
        return;
    }
    const int32_t PRE = 42, SUF = 43, MID = 44, PAD = 45, REP = 46, SEP = 47;
    const bool ids_ok = kvt_token_fim(t, KVT_FIM_PRE) == PRE && kvt_token_fim(t, KVT_FIM_SUF) == SUF &&
                        kvt_token_fim(t, KVT_FIM_MID) == MID && kvt_token_fim(t, KVT_FIM_PAD) == PAD &&
                        kvt_token_fim(t, KVT_FIM_REP) == REP && kvt_token_fim(t, KVT_FIM_SEP) == SEP &&
                        kvt_token_is_eog(t, PAD) && kvt_token_is_eog(t, REP) && kvt_token_is_eog(t, SEP) &&
                        !kvt_token_is_eog(t, MID);
    test_result(ids_ok, "serve.infill: FIM tokens found by their text (pad, repo and file separator end generation)",
                "pre %d suf %d mid %d pad %d rep %d sep %d", kvt_token_fim(t, KVT_FIM_PRE), kvt_token_fim(t, KVT_FIM_SUF),
                kvt_token_fim(t, KVT_FIM_MID), kvt_token_fim(t, KVT_FIM_PAD), kvt_token_fim(t, KVT_FIM_REP),
                kvt_token_fim(t, KVT_FIM_SEP));
    char why[1024] = "";
    int32_t w[512];
    int64_t k = 0;
    // the whole layout: repository, two files (one without a name), the current file, prefix + prompt, suffix
    w[k++] = REP, add_text(t, "myproject\n", w, &k);
    w[k++] = SEP, add_text(t, "x.py\n", w, &k), add_text(t, "def", w, &k);
    w[k++] = SEP, add_text(t, "tmp\n", w, &k), add_text(t, "b", w, &k);
    w[k++] = SEP, add_text(t, "filename\n", w, &k);
    w[k++] = PRE, add_text(t, "ab", w, &k), w[k++] = 7, add_text(t, " <|fim_pad|>", w, &k), w[k++] = PAD;
    w[k++] = SUF, add_text(t, "c", w, &k), w[k++] = MID;
    const kvt_infill_limits lim = {4096, 2048, -1, false};
    bool ok = infill_ids_are(t,
                             "{\"input_prefix\":[\"ab\",7,\" <|fim_pad|>\"],\"input_suffix\":\"c\",\"prompt\":"
                             "\"<|fim_pad|>\",\"input_extra\":[{\"filename\":\"x.py\",\"text\":\"def\"},{\"text\":\"b\"}]}",
                             &lim, w, k, why, sizeof why);
    // spm: suffix part first
    k = 0;
    w[k++] = REP, add_text(t, "myproject\n", w, &k), w[k++] = SEP, add_text(t, "filename\n", w, &k);
    w[k++] = SUF, add_text(t, "c", w, &k), w[k++] = PRE, add_text(t, "ab", w, &k), w[k++] = MID;
    const kvt_infill_limits spm = {4096, 2048, -1, true};
    ok = ok && infill_ids_are(t, "{\"input_prefix\":\"ab\",\"input_suffix\":\"c\"}", &spm, w, k, why, sizeof why);
    // the budgets: b = 16: the last 12 prefix tokens, the first 4 - 2 - 1 (prompt) = 1 suffix token; the last
    // n_ctx - b + 2 = 10 tokens of the extra context
    int32_t ex[64];
    int64_t ne = 0;
    ex[ne++] = REP, add_text(t, "myproject\n", ex, &ne), ex[ne++] = SEP, add_text(t, "f\n", ex, &ne);
    add_text(t, "abcdefghij", ex, &ne), ex[ne++] = SEP, add_text(t, "filename\n", ex, &ne);
    k = 0;
    memcpy(w, ex + ne - 10, 10 * sizeof *w), k = 10;
    w[k++] = PRE, add_text(t, "ijklmnopqrst", w, &k), add_text(t, "z", w, &k), w[k++] = SUF, add_text(t, "x", w, &k);
    w[k++] = MID;
    const kvt_infill_limits small = {24, 16, -1, false};
    ok = ok && infill_ids_are(t,
                              "{\"input_prefix\":\"abcdefghijklmnopqrst\",\"input_suffix\":\"xyz\",\"prompt\":\"z\","
                              "\"input_extra\":[{\"filename\":\"f\",\"text\":\"abcdefghij\"}]}",
                              &small, w, k, why, sizeof why);
    // a prompt longer than the suffix budget leaves no suffix; n_ctx - b - 2 n_predict <= 0 leaves no extra context
    k = 0;
    w[k++] = PRE, add_text(t, "a", w, &k), add_text(t, "zzz", w, &k), w[k++] = SUF, w[k++] = MID;
    const kvt_infill_limits tight = {16, 16, 4, false};
    ok = ok && infill_ids_are(t, "{\"input_prefix\":\"a\",\"input_suffix\":\"xyz\",\"prompt\":\"zzz\",\"input_extra\":"
                              "[{\"text\":\"q\"}]}", &tight, w, k, why, sizeof why);
    test_result(ok, "serve.infill: llama-server's layout: repository, files, prefix + prompt, suffix; spm; budgets",
                "%s", why);

    // a token id past the vocabulary: 400 naming the field
    kvt_api_error e;
    kvt_request *r = parse_infill("{\"input_prefix\":\"a\",\"input_suffix\":[\"b\",4000]}", &e);
    int64_t n = 0;
    int32_t *ids = r ? kvt_infill_prompt_ids(kvt_request_get(r)->native->infill, t, &lim, &n, &e) : NULL;
    test_result(r && !ids && e.http_status == 400 && !strcmp(e.param, "input_suffix"),
                "serve.infill: a token id past the vocabulary is a 400 naming the field", "%d %s: %s", e.http_status,
                e.param, e.message);
    free(ids);

    // without FIM_REP / FIM_SEP: each file led by the snippet line; BOS as the model asks, after the extra context
    static const char *const ctl2[] = {"<fim-prefix>", "<fim-suffix>", "<fim-middle>"};
    kvt_tokenizer *t2 = infill_vocab(ctl2, 3, true, &g2);
    k = 0;
    if (t2) {
        add_text(t2, "\n\n--- snippet ---\n\n", w, &k), add_text(t2, "q", w, &k);
        w[k++] = 41, w[k++] = 42, add_text(t2, "a", w, &k), w[k++] = 43, add_text(t2, "b", w, &k), w[k++] = 44;
    }
    ok = t2 && infill_ids_are(t2, "{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"input_extra\":[{\"text\":\"q\"}]}",
                              &lim, w, k, why, sizeof why);
    test_result(ok, "serve.infill: without repository and file tokens: the snippet line, BOS after the extra context",
                "%s", t2 ? why : "cannot open the second vocabulary");

    // no FIM tokens: 501 not_supported_error naming the missing ones
    static const char *const ctl3[] = {"<fim-prefix>"};
    kvt_tokenizer *t3 = infill_vocab(ctl3, 1, false, &g3);
    e = (kvt_api_error){0};
    const bool sup = t3 ? kvt_infill_supported(t3, &e) : true;
    test_result(t3 && !sup && e.http_status == 501 && !strcmp(e.type, "not_supported_error") &&
                    !strstr(e.message, "prefix token") && strstr(e.message, "suffix token is missing") &&
                    strstr(e.message, "middle token is missing"),
                "serve.infill: a vocabulary without FIM tokens is a 501 naming the missing ones", "%d %s",
                e.http_status, e.message);
    kvt_request_free(r);
    kvt_tokenizer_free(t), kvt_tokenizer_free(t2), kvt_tokenizer_free(t3);
    kvt_gguf_free(g), kvt_gguf_free(g2), kvt_gguf_free(g3);
}
#endif

#ifdef KVT_HAVE_JANSSON
// grammar, json_schema and response_format: which one a request's grammar comes from (llama-server's rules)
static void test_grammar_fields(void) {
    static const struct {
        kvt_req_kind kind;
        const char *body;
        const char *field; // NULL: no grammar
        const char *has;   // a piece of the grammar's text
    } cases[] = {
        {KVT_REQ_NATIVE, "{\"prompt\":\"x\",\"grammar\":\"root ::= \\\"a\\\"\"}", "grammar", "root ::= \"a\""},
        {KVT_REQ_NATIVE, "{\"prompt\":\"x\",\"json_schema\":{\"type\":\"integer\"}}", "json_schema", "root"},
        // /completion: a grammar given wins over json_schema, an empty one too (then none)
        {KVT_REQ_NATIVE, "{\"prompt\":\"x\",\"json_schema\":{},\"grammar\":\"root ::= \\\"b\\\"\"}", "grammar", "\"b\""},
        {KVT_REQ_NATIVE, "{\"prompt\":\"x\",\"json_schema\":{},\"grammar\":\"\"}", NULL, NULL},
        {KVT_REQ_NATIVE, "{\"prompt\":\"x\",\"grammar\":\"\"}", NULL, NULL},
        {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"json_object\"}}",
         "response_format.schema", "root"},
        {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"json_schema\","
         "\"json_schema\":{\"name\":\"n\",\"schema\":{\"enum\":[\"red\",\"blue\"]}}}}", "response_format.json_schema.schema",
         "red"},
        {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"text\"}}", NULL,
         NULL},
        // json_object keeps a json_schema given beside it (llama-server's chat parser)
        {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"json_schema\":{\"const\":\"zq\"},"
         "\"response_format\":{\"type\":\"json_object\"}}", "json_schema", "zq"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\",\"schema\":{\"const\":7}}}",
         "response_format.schema", "7"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvt_api_error e;
        kvt_request *r = parse_as(cases[i].kind, cases[i].body, &e);
        const kvt_request_params *p = r ? kvt_request_get(r) : NULL;
        const bool ok = p && (cases[i].field ? p->grammar && !strcmp(p->grammar_field, cases[i].field) &&
                                                   strstr(p->grammar, cases[i].has)
                                             : !p->grammar);
        if (!ok && bad++ < 3)
            printf("  %s: %s; grammar from %s: %.200s\n", cases[i].body, r ? "parsed" : e.message,
                   p && p->grammar ? p->grammar_field : "-", p && p->grammar ? p->grammar : "-");
        kvt_request_free(r);
    }
    test_result(bad == 0, "serve.native: grammar, json_schema and response_format give the request's grammar as "
                "llama-server's rules say", "%d of %zu cases wrong", bad, sizeof cases / sizeof cases[0]);
}
#endif

void test_serve_native(const test_env *env) {
    (void)env;
#ifdef KVT_HAVE_JANSSON
    test_native_ok();
    test_native_errors();
    test_native_answers();
    test_infill_parse();
    test_infill_prompt();
    test_editor_fields();
    test_infill_sampler();
    test_grammar_fields();
#else
    test_skip("serve.native", "built without libjansson (apt-get install libjansson-dev)");
#endif
}
