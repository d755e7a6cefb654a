// fuzz_request.c - fuzz target for the OpenAI request parser and what consumes its output.
//
// The first input byte picks /v1/completions or /v1/chat/completions and a chat format; the rest
// is the request body. Parsed requests go through the chat template and the response builder;
// every body's bytes also go through the UTF-8 boundary buffer in pieces, whose output must be
// valid UTF-8 with no character split, and the prompt through the request's stop strings (a
// violation traps).
// A request's grammar (`grammar`, or `json_schema` / `response_format` converted) is compiled and matched against the
// body's bytes; a grammar converted from a schema that does not compile traps (the converter's bug).
// Seeds (fuzz/seeds/request) hold the selector byte first: '0' completions, '1' chat, 0x80
// /tokenize, 0x81 /detokenize, 0xC0 llama-server's /completion (native.h: its answers and /props are built too),
// 0xA0 Anthropic's /v1/messages and 0xE0 OpenAI's /v1/responses (anthropic.h, responses_api.h: converted into a
// chat request, which then goes the chat's way; their answers and both APIs' stream events are built too).
// With clang: libFuzzer entry point (make fuzz). Without: KVT_FUZZ_STANDALONE builds a small
// mutation driver: `fuzz_request SECONDS seed...`.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/serve/anthropic.h"
#include "../src/serve/chat_template.h"
#include "../src/serve/infill.h"
#include "../src/serve/native.h"
#include "../src/serve/request.h"
#include "../src/serve/response.h"
#include "../src/serve/responses_api.h"
#include "../src/serve/sse.h"
#include "../src/serve/stop.h"
#include "../src/serve/utf8_stream.h"
#include "../src/sched/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const k_formats[] = {"chatml", "llama3", "llama3.1", "llama2", "mistral-v0",
                                        "mistral-v1", "mistral-v3-tekken", "gemma", "phi3"};

static void check_utf8(const char *body, size_t n, size_t piece) {
    kvt_utf8_stream s = {{0}, 0};
    char *out = malloc(KVT_UTF8_OUT_MAX(piece));
    if (!out) return;
    for (size_t i = 0; i < n; i += piece) {
        size_t k = n - i < piece ? n - i : piece;
        size_t o = kvt_utf8_stream_push(&s, body + i, k, out);
        if (o > KVT_UTF8_OUT_MAX(k) || !kvt_utf8_valid(out, o)) __builtin_trap();
    }
    size_t o = kvt_utf8_stream_flush(&s, out);
    if (!kvt_utf8_valid(out, o)) __builtin_trap();
    free(out);
}

// The request's stop strings over `text` fed in pieces: what is emitted must be the text before
// the earliest match (a violation traps).
static void check_stop(const kvt_request_params *p, const char *text, size_t piece) {
    kvt_stop *st = NULL;
    if (kvt_stop_create(p->stop, p->n_stop, &st, NULL) != KVT_OK) __builtin_trap();
    size_t n = strlen(text), want = n, want_end = SIZE_MAX, got = 0; // the first stop string completed
    for (size_t i = 0; i < p->n_stop; i++) {
        const size_t sl = strlen(p->stop[i]);
        const char *m = memmem(text, n, p->stop[i], sl);
        if (m && ((size_t)(m - text) + sl < want_end || ((size_t)(m - text) + sl == want_end && (size_t)(m - text) < want)))
            want = (size_t)(m - text), want_end = want + sl;
    }
    bool matched = false;
    const char *e;
    size_t el;
    for (size_t i = 0; i < n && !matched; i += piece) {
        matched = kvt_stop_feed(st, text + i, n - i < piece ? n - i : piece, &e, &el, NULL, NULL);
        if (got + el > want || memcmp(e, text + got, el) != 0) __builtin_trap();
        got += el;
    }
    if (!matched) {
        kvt_stop_flush(st, &e, &el);
        if (got + el > want || memcmp(e, text + got, el) != 0) __builtin_trap();
        got += el;
    }
    if (got != want || matched != (want < n)) __builtin_trap();
    kvt_stop_free(st);
}

// A parsed /completion request through its answers: a token event and the summary (text the prompt's), and /props.
static void check_native(const kvt_request_params *p, const char *text) {
    if (!p->native) __builtin_trap();
    kvt_resp_alt alt = {text, strlen(text) < 4 ? strlen(text) : 4, -1.0, 7};
    kvt_resp_logprob lp = {alt, &alt, 1, 0};
    const int32_t *ids = p->prompt_ids;
    size_t n_ids = (size_t)p->n_prompt_ids;
    kvt_resp_timings t = {.prompt_n = 3, .predicted_n = 2, .prompt_ms = 1.5};
    for (int stop = 0; stop < 2; stop++) {
        kvt_native_resp r = {.stop = stop, .content = text, .len = strlen(text), .tokens = ids, .n_tokens = n_ids,
                             .probs = &lp, .n_probs = 1, .has_probs = p->logprobs, .model = p->model,
                             .prompt = text, .prompt_len = strlen(text), .params = p,
                             .n_probs_asked = p->top_logprobs, .stop_type = "word",
                             .stopping_word = p->n_stop ? p->stop[0] : "", .timings = stop ? &t : NULL,
                             .fields = p->native->response_fields, .n_fields = p->native->n_response_fields};
        char *json = NULL;
        if (kvt_native_resp_json(&r, &json, NULL, NULL) == KVT_OK) free(json);
    }
    kvt_native_props pr = {2048, 1, p->model, text, text, "chatml", "<s>", "</s>", true};
    char *json = NULL;
    if (kvt_native_props_json(&pr, &json, NULL) == KVT_OK) free(json);
}

// A converted request's answers: Anthropic's message and every stream event, or the Responses answer.
static void check_api_answers(const kvt_request_params *p, const char *text) {
    const size_t len = strlen(text);
    char *json = NULL;
    if (p->api == KVT_API_RESPONSES) {
        const kvt_resp_timings t = {.prompt_n = 3, .predicted_n = 4, .prompt_ms = 1.5};
        const kvt_oairesp a = {"resp_1", "msg_1", p->model ? p->model : "", 1, 2, text, len, 9, 3, 4, p->stream ? &t : NULL};
        free(kvt_oairesp_json(&a, NULL));
        for (int k = KVT_OAIRESP_CREATED; k <= KVT_OAIRESP_COMPLETED; k++) { // a stream's events, one line of data each
            size_t el = 0;
            char *ev = kvt_oairesp_event((kvt_oairesp_event_kind)k, &a, &el);
            const char *data = ev ? strstr(ev, "\ndata: ") : NULL;
            if (ev && (!data || strchr(data + 7, '\n') != ev + el - 2 || strlen(ev) != el)) __builtin_trap();
            free(ev);
        }
        return;
    }
    kvt_anthropic_msg m = {"msg_1", p->model ? p->model : "", text, len, 0, "stop_sequence",
                           p->n_stop ? p->stop[0] : NULL, 9, 3, 4};
    free(kvt_anthropic_message_json(&m, NULL));
    for (int k = KVT_ANTHROPIC_MESSAGE_START; k <= KVT_ANTHROPIC_MESSAGE_STOP; k++)
        free(kvt_anthropic_event((kvt_anthropic_event_kind)k, &m, NULL));
    kvt_api_error ae;
    kvt_api_errorf(&ae, 500, "server_error", NULL, "%s", text);
    json = kvt_api_error_json(&ae);
    free(kvt_anthropic_error_event(json, NULL));
}

static void check_grammar(const kvt_request_params *p, const char *text, size_t n) {
    if (!p->grammar) return;
    kvt_grammar *g = NULL;
    kvt_err err;
    kvt_status st = kvt_grammar_parse(p->grammar, strlen(p->grammar), "root", NULL, &g, &err);
    if (st && st != KVT_ERR_NOMEM && strcmp(p->grammar_field, "grammar") != 0) __builtin_trap();
    bool complete;
    if (g) kvt_grammar_match(g, text, n < 256 ? n : 256, &complete, &err);
    kvt_grammar_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t sel = data[0];
    const char *body = (const char *)data + 1;
    size_t n = size - 1;
    check_utf8(body, n, 1 + sel % 5);
    const bool conv = (sel & 0xA0) == 0xA0; // Anthropic (0xA0) or Responses (0xE0)
    kvt_req_kind kind = conv          ? KVT_REQ_CHAT
                        : (sel & 0x80) ? ((sel & 1) ? KVT_REQ_DETOKENIZE : (sel & 0x40) ? ((sel & 0x10) ? KVT_REQ_INFILL : KVT_REQ_NATIVE) : KVT_REQ_TOKENIZE)
                        : (sel & 1)    ? KVT_REQ_CHAT
                                       : KVT_REQ_COMPLETION;
    kvt_request *r = NULL;
    kvt_api_error ae;
    kvt_status st = !conv ? kvt_request_parse(body, n, kind, &r, &ae)
                    : (sel & 0x40) ? kvt_oairesp_parse(body, n, NULL, &r, &ae)
                                   : kvt_anthropic_parse(body, n, NULL, &r, &ae);
    if (st != KVT_OK) {
        char *j = kvt_api_error_json(&ae);
        free(j);
        return 0;
    }
    const kvt_request_params *p = kvt_request_get(r);
    check_grammar(p, body, n);
    const char *text = p->prompt ? p->prompt : "";
    if (kind == KVT_REQ_TOKENIZE || kind == KVT_REQ_DETOKENIZE) {
        const char *pieces[1] = {text};
        size_t lens[1] = {strlen(text)};
        char *j = NULL;
        if (kind == KVT_REQ_TOKENIZE && kvt_resp_tokenize_json(p->prompt_ids, 0, pieces, lens, &j, NULL) == KVT_OK) free(j);
        if (kvt_resp_detokenize_json(text, strlen(text), &j, NULL) == KVT_OK) free(j);
        kvt_request_free(r);
        return 0;
    }
    if (kind == KVT_REQ_NATIVE || kind == KVT_REQ_INFILL) { // /infill: a /completion request, the prefix's text
        const struct kvt_infill *in = p->native->infill;
        if (p->native->pieces && p->native->n_pieces && p->native->pieces[0].text) text = p->native->pieces[0].text;
        if (in && in->n_prefix && in->prefix[0].text) text = in->prefix[0].text;
        check_native(p, text);
        check_stop(p, text, 1 + (sel >> 2) % 7);
        kvt_request_free(r);
        return 0;
    }
    char *prompt = NULL;
    if (kind == KVT_REQ_CHAT) {
        kvt_chat_template *t = NULL;
        kvt_chat_tokens tok = {"<s>", "</s>", NULL};
        if (kvt_chat_template_create(NULL, k_formats[(sel >> 1) % 9], &tok, &t, NULL) == KVT_OK) {
            if (kvt_chat_template_apply(t, p->messages, p->n_messages, (sel >> 5) & 1, &prompt, NULL, NULL) == KVT_OK)
                text = prompt;
            kvt_chat_template_free(t);
        }
    }
    check_stop(p, text, 1 + (sel >> 2) % 7);
    if (p->api != KVT_API_OPENAI) check_api_answers(p, text);
    kvt_resp_alt alt = {text, strlen(text) < 4 ? strlen(text) : 4, -1.0, 0};
    kvt_resp_logprob lp = {alt, &alt, 1, 0};
    kvt_resp_choice c = {.text = text, .len = strlen(text), .finish_reason = "stop", .has_logprobs = p->logprobs,
                         .logprobs = &lp, .n_logprobs = 1, .role = true};
    kvt_resp_usage u = {p->n_prompt_ids, p->max_tokens, 0};
    kvt_resp resp = {.kind = kind, .chunk = p->stream, .id = "x", .model = p->model, .choices = &c, .n_choices = 1,
                     .usage = p->include_usage ? &u : NULL};
    char *json = NULL, *ev = NULL;
    size_t jl = 0;
    if (kvt_resp_json(&resp, &json, &jl, NULL) == KVT_OK && kvt_sse_frame(json, jl, &ev, NULL, NULL) == KVT_OK) free(ev);
    free(json);
    free(prompt);
    kvt_request_free(r);
    return 0;
}

#ifdef KVT_FUZZ_STANDALONE
#include <time.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s SECONDS seed.json...\n", argv[0]);
        return 2;
    }
    double secs = atof(argv[1]);
    int ns = argc - 2;
    uint8_t *seeds[64];
    size_t lens[64];
    if (ns > 64) ns = 64;
    for (int i = 0; i < ns; i++) {
        seeds[i] = NULL;
        lens[i] = 0;
        FILE *f = fopen(argv[i + 2], "rb");
        if (!f) continue;
        seeds[i] = malloc(1 << 16);
        lens[i] = fread(seeds[i], 1, 1 << 16, f);
        fclose(f);
    }
    uint64_t r = 0x9e3779b97f4a7c15ull;
    long iters = 0;
    clock_t end = clock() + (clock_t)(secs * CLOCKS_PER_SEC);
    while (clock() < end) {
        int s = (int)(iters % ns);
        size_t n = lens[s];
        if (!seeds[s] || !n) {
            iters++;
            continue;
        }
        uint8_t *buf = malloc(n);
        memcpy(buf, seeds[s], n);
        // keep the endpoint (with bit 7: bits 6 and 5 too), vary the format
        const uint8_t keep = (buf[0] & 0x80) ? 0xe1 : 0x81;
        buf[0] = (uint8_t)((buf[0] & keep) | ((iters << 1) & 0x7e & ~keep));
        int k = (int)((r >> 7) % 4);
        for (int j = 0; j < k; j++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            buf[(r >> 17) % n] = (uint8_t)(r >> 40);
        }
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        size_t len = (r >> 50) % 4 == 0 ? (size_t)((r >> 20) % n) : n;
        LLVMFuzzerTestOneInput(buf, len);
        free(buf);
        iters++;
    }
    printf("fuzz_request: %ld inputs, no crash\n", iters);
    for (int i = 0; i < ns; i++) free(seeds[i]);
    return 0;
}
#endif
