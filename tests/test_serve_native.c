// test_serve_native.c - llama-server's /completion request parsing (native.c through kvt_request_parse) and its
// answers' and /props' JSON (the HTTP cases are in tools/serve_test.py).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KVT_HAVE_JANSSON
#include <jansson.h>

#include "../src/serve/native.h"
#include "../src/serve/request.h"

// body parsed as a /completion request; NULL with *e filled when refused.
static kvt_request *parse(const char *body, kvt_api_error *e) {
    kvt_request *r = NULL;
    *e = (kvt_api_error){0};
    return kvt_request_parse(body, strlen(body), KVT_REQ_NATIVE, &r, e) == KVT_OK ? r : NULL;
}

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
        {"{\"prompt\":\"x\",\"mirostat\":2}", "mirostat", "not supported"},
        {"{\"prompt\":\"x\",\"repeat_penalty\":-1}", "repeat_penalty", "out of range"},
        {"{\"prompt\":\"x\",\"repeat_penalty\":1.1,\"samplers\":[\"top_k\",\"penalties\"]}", "samplers", "that order"},
        {"{\"prompt\":\"x\",\"dynatemp_range\":0.5}", "dynatemp_range", "not supported"},
        {"{\"prompt\":\"x\",\"top_n_sigma\":1}", "top_n_sigma", "not supported"},
        {"{\"prompt\":\"x\",\"min_keep\":5}", "min_keep", "not supported"},
        {"{\"prompt\":\"x\",\"post_sampling_probs\":true}", "post_sampling_probs", "not supported"},
        {"{\"prompt\":\"x\",\"lora\":[{\"id\":0,\"scale\":1}]}", "lora", "not supported"},
        {"{\"prompt\":\"x\",\"response_fields\":[\"content\"]}", "response_fields", "not supported"},
        {"{\"prompt\":\"x\",\"grammar\":\"root ::= x\"}", "grammar", "not supported"},
        {"{\"prompt\":\"x\",\"cache_prompt\":\"yes\"}", "cache_prompt", "must be a boolean"},
        {"{\"prompt\":\"x\",\"samplers\":5}", "samplers", "must be a list"},
        {"{\"prompt\":\"x\",\"samplers\":[\"top_k\",3]}", "samplers", "samplers[1]"},
        {"{\"prompt\":\"x\",\"samplers\":\"ki\"}", "samplers", "infill"},
        {"{\"prompt\":\"x\",\"samplers\":[\"adaptive_p\"]}", "samplers", "adaptive_p"},
        {"{\"prompt\":\"x\",\"samplers\":[\"temperature\",\"top_k\"],\"top_k\":5,\"temperature\":0.7}", "samplers",
         "order"},
        {"{\"prompt\":\"x\",\"samplers\":[\"top_p\",\"top_p\"],\"top_p\":0.5}", "samplers", "twice"},
        {"{\"prompt\":\"x\",\"top_p\":0}", "top_p", "out of range"},
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
    kvt_native_props pr = {4096, 2, "m.gguf", "/x/m.gguf", "{{ t }}", "chatml", "<s>", "</s>", false};
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
#endif

void test_serve_native(const test_env *env) {
    (void)env;
#ifdef KVT_HAVE_JANSSON
    test_native_ok();
    test_native_errors();
    test_native_answers();
#else
    test_skip("serve.native", "built without libjansson (apt-get install libjansson-dev)");
#endif
}
