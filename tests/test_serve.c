// test_serve.c - the serving layer without the scheduler: UTF-8 boundary buffer, SSE framing,
// OpenAI request parsing/validation and response/chunk builders (the last two need jansson).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "../src/serve/sse.h"
#include "../src/serve/stop.h"
#include "../src/serve/utf8_stream.h"
#include "test.h"

#ifdef KVT_HAVE_JANSSON
#include <jansson.h>

#include "../src/serve/request.h"
#include "../src/serve/response.h"
#endif

// ---- UTF-8 boundary buffer ----

// Pushes in[0..n) in pieces cut at cuts[0..nc) (ascending) plus a final flush; writes the
// concatenated output to out (returns its length) and sets *pieces_ok false when any piece's
// output is not valid UTF-8 on its own (a split character).
static size_t push_pieces(const char *in, size_t n, const size_t *cuts, size_t nc, char *out, bool *pieces_ok) {
    kvt_utf8_stream s = {{0}, 0};
    size_t o = 0, prev = 0;
    char piece[KVT_UTF8_OUT_MAX(64)];
    for (size_t i = 0; i <= nc; i++) {
        size_t end = i < nc ? cuts[i] : n;
        size_t k = kvt_utf8_stream_push(&s, in + prev, end - prev, piece);
        if (!kvt_utf8_valid(piece, k)) *pieces_ok = false;
        memcpy(out + o, piece, k);
        o += k;
        prev = end;
    }
    size_t k = kvt_utf8_stream_flush(&s, piece);
    memcpy(out + o, piece, k);
    return o + k;
}

static void test_utf8_splits(void) {
    // 1-, 2-, 3- and 4-byte characters side by side
    static const char *texts[] = {"a\xc3\xa9\xe2\x82\xac\xf0\x9f\x99\x82z", // a é € 🙂 z
                                  "\xe6\x97\xa5\xe6\x9c\xac\xf0\x9f\x98\x80\xc3\xbc",
                                  "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd\xc2\xa0"};
    int bad = 0, cases = 0;
    char msg[160] = "";
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        const char *in = texts[t];
        size_t n = strlen(in);
        for (size_t a = 0; a <= n; a++) {
            for (size_t b = a; b <= n; b++) { // every pair of cut points: 1, 2 and 3 pieces
                size_t cuts[2] = {a, b};
                char out[KVT_UTF8_OUT_MAX(64)];
                bool pieces_ok = true;
                size_t o = push_pieces(in, n, cuts, 2, out, &pieces_ok);
                cases++;
                if (!pieces_ok || o != n || memcmp(out, in, n) != 0) {
                    if (!bad++) snprintf(msg, sizeof msg, "text %zu cut at %zu,%zu", t, a, b);
                }
            }
        }
        // one byte at a time
        size_t cuts[64];
        for (size_t i = 0; i + 1 < n; i++) cuts[i] = i + 1;
        char out[KVT_UTF8_OUT_MAX(64)];
        bool pieces_ok = true;
        size_t o = push_pieces(in, n, cuts, n - 1, out, &pieces_ok);
        cases++;
        if (!pieces_ok || o != n || memcmp(out, in, n) != 0) {
            if (!bad++) snprintf(msg, sizeof msg, "text %zu byte by byte", t);
        }
    }
    test_result(bad == 0, "serve.utf8: 2-, 3-, 4-byte characters split at every offset never leave a piece with a split character",
                "%d of %d cases failed; first: %s", bad, cases, msg);
}

static void test_utf8_invalid(void) {
    // expected outputs are Python's bytes.decode("utf-8", "replace")
    static const struct {
        const char *in, *want;
    } k[] = {
        {"\x80", "\xef\xbf\xbd"},
        {"a\xc0\xaf" "b", "a\xef\xbf\xbd\xef\xbf\xbd" "b"},         // overlong
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  // surrogate
        {"\xe2\x82" "A", "\xef\xbf\xbd" "A"},                      // cut by an ASCII byte
        {"\xf5\x80", "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, // above U+10FFFF
        {"ok\xf0\x9f\x99", "ok\xef\xbf\xbd"},                      // truncated at the end: flushed
    };
    int bad = 0;
    char msg[128] = "";
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        size_t n = strlen(k[i].in);
        char whole[KVT_UTF8_OUT_MAX(16)];
        bool ok = true;
        size_t wl = push_pieces(k[i].in, n, NULL, 0, whole, &ok);
        if (wl != strlen(k[i].want) || memcmp(whole, k[i].want, wl) != 0) {
            if (!bad++) snprintf(msg, sizeof msg, "case %zu whole", i);
        }
        for (size_t a = 0; a <= n; a++) { // the same output whatever the cut
            char out[KVT_UTF8_OUT_MAX(16)];
            size_t o = push_pieces(k[i].in, n, &a, 1, out, &ok);
            if (o != wl || memcmp(out, whole, wl) != 0 || !ok) {
                if (!bad++) snprintf(msg, sizeof msg, "case %zu cut at %zu", i, a);
            }
        }
    }
    test_result(bad == 0, "serve.utf8: invalid bytes become U+FFFD as Python's 'replace' does, whatever the cuts",
                "%d failures; first: %s", bad, msg);
}

static void test_sse(void) {
    char *o = NULL;
    size_t n = 0;
    kvt_err err = {0};
    kvt_status st = kvt_sse_frame("{\"a\":1}", 7, &o, &n, &err);
    test_result(st == KVT_OK && n == strlen(o) && !strcmp(o, "data: {\"a\":1}\n\n"), "serve.sse: one JSON event", "%s",
                o ? o : err.msg);
    free(o);
    st = kvt_sse_frame("a\nb\r\nc\rd", 8, &o, &n, &err);
    test_result(st == KVT_OK && !strcmp(o, "data: a\ndata: b\ndata: c\ndata: d\n\n"),
                "serve.sse: a multi-line payload becomes one data line per line", "%s", o ? o : err.msg);
    free(o);
    test_result(!strcmp(KVT_SSE_DONE, "data: [DONE]\n\n"), "serve.sse: the closing event", "%s", KVT_SSE_DONE);
}

// Stop strings: random texts of a few pieces (some multi-byte) fed in random whole-character
// pieces emit exactly the text before the earliest match, never a split character.
static void test_stop(void) {
    static const char *atoms[] = {"a", "b", "\n", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x99\x82", "EN", "D"};
    static const char *stop_sets[][3] = {{"\n\n", NULL, NULL},
                                         {"END", "\xe2\x82\xac\xf0\x9f\x99\x82", NULL},
                                         {"ab", "b\n", "\xc3\xa9\xc3\xa9"},
                                         {"EN\nD", "N\n", NULL}, // one inside another: the inner completes first
                                         {NULL, NULL, NULL}};
    uint64_t r = 12345;
    int bad = 0, cases = 0;
    char msg[KVT_ERR_MSG_MAX] = "";
    for (int set = 0; set < 5; set++) {
        size_t ns = 0;
        while (ns < 3 && stop_sets[set][ns]) ns++;
        for (int trial = 0; trial < 300; trial++) {
            char text[256];
            size_t bounds[64], nb = 0, len = 0;
            for (int k = 0; k < 40; k++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                const char *a = atoms[(r >> 33) % 8];
                memcpy(text + len, a, strlen(a));
                len += strlen(a);
                if ((r >> 20) % 3 == 0 && nb < 63) bounds[nb++] = len; // piece ends on a character boundary
            }
            bounds[nb++] = len;
            size_t want = len, want_end = SIZE_MAX; // the first stop string completed (earliest end, then start)
            for (size_t i = 0; i < ns; i++) {
                const size_t sl = strlen(stop_sets[set][i]);
                const char *m = memmem(text, len, stop_sets[set][i], sl);
                if (m && ((size_t)(m - text) + sl < want_end || ((size_t)(m - text) + sl == want_end && (size_t)(m - text) < want)))
                    want = (size_t)(m - text), want_end = want + sl;
            }
            kvt_stop *st = NULL;
            kvt_err err = {0};
            if (kvt_stop_create(stop_sets[set], ns, &st, &err) != KVT_OK) {
                bad++;
                snprintf(msg, sizeof msg, "%s", err.msg);
                break;
            }
            char got[256];
            size_t glen = 0, prev = 0;
            bool matched = false, pieces_ok = true;
            for (size_t b = 0; b < nb && !matched; b++) {
                const char *e;
                size_t el;
                matched = kvt_stop_feed(st, text + prev, bounds[b] - prev, &e, &el, NULL, &err);
                if (!kvt_utf8_valid(e, el)) pieces_ok = false;
                memcpy(got + glen, e, el);
                glen += el;
                prev = bounds[b];
            }
            if (!matched) {
                const char *e;
                size_t el;
                kvt_stop_flush(st, &e, &el);
                memcpy(got + glen, e, el);
                glen += el;
            }
            cases++;
            if (!pieces_ok || glen != want || memcmp(got, text, want) != 0 || matched != (want < len)) {
                if (!bad++) snprintf(msg, sizeof msg, "set %d trial %d: emitted %zu bytes, want %zu", set, trial, glen, want);
            }
            kvt_stop_free(st);
        }
    }
    test_result(bad == 0, "serve.stop: streamed stop strings emit exactly the text before the earliest match",
                "%d of %d cases wrong; first: %s", bad, cases, msg);
    kvt_stop *st = NULL;
    kvt_err err = {0};
    const char *empty[] = {"x", ""};
    kvt_status status = kvt_stop_create(empty, 2, &st, &err);
    test_result(status == KVT_ERR_INVALID_ARG && strstr(err.msg, "stop[1]"), "serve.stop: an empty stop string is an error naming it",
                "%s", err.msg);
}

#ifdef KVT_HAVE_JANSSON

static kvt_request *parse(kvt_req_kind kind, const char *body, kvt_api_error *e) {
    kvt_request *r = NULL;
    memset(e, 0, sizeof *e);
    if (kvt_request_parse(body, strlen(body), kind, &r, e) != KVT_OK) return NULL;
    return r;
}

static void test_request_ok(void) {
    kvt_api_error e;
    kvt_request *r = parse(KVT_REQ_COMPLETION,
                           "{\"model\":\"m\",\"prompt\":\"Once upon\",\"max_tokens\":12,\"temperature\":0.5,\"top_p\":0.9,"
                           "\"top_k\":40,\"min_p\":0.05,\"seed\":7,\"stop\":[\"\\n\",\"END\"],\"n\":3,\"logprobs\":2,"
                           "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"unknown_field\":[1,2]}",
                           &e);
    const kvt_request_params *p = r ? kvt_request_get(r) : NULL;
    test_result(p && !strcmp(p->model, "m") && !strcmp(p->prompt, "Once upon") && !p->prompt_ids && p->max_tokens == 12 &&
                    p->temperature == 0.5 && p->top_p == 0.9 && p->top_k == 40 && p->min_p == 0.05 && p->has_seed &&
                    p->seed == 7 && p->n_stop == 2 && !strcmp(p->stop[0], "\n") && !strcmp(p->stop[1], "END") &&
                    p->n == 3 && p->logprobs && p->top_logprobs == 2 && p->stream && p->include_usage,
                "serve.request: a completion with every field", "%s", r ? "wrong values" : e.message);
    kvt_request_free(r);

    r = parse(KVT_REQ_COMPLETION, "{\"prompt\":\"x\"}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->max_tokens == -1 && p->temperature == 0.8 && p->top_p == 0.95 && p->top_k == 40 &&
                    p->min_p == 0.05 && !p->has_seed && p->n_stop == 0 && p->n == 1 && !p->logprobs && !p->stream &&
                    !p->model,
                "serve.request: defaults (llama-server's, on /v1 too: temperature 0.8, top_k 40, top_p 0.95, min_p "
                "0.05)", "%s", r ? "wrong defaults" : e.message);
    kvt_request_free(r);
    r = NULL;
    // the server's defaults (its sampling flags): a request starts from them on every endpoint, its fields win
    kvt_req_defaults d = kvt_req_defaults_llama();
    d.temperature = 0.6, d.top_k = 20, d.min_p = 0, d.has_seed = true, d.seed = 9, d.dry_multiplier = 0.8;
    d.ignore_eos = true;
    static const struct {
        kvt_req_kind kind;
        const char *body;
    } dk[] = {{KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"top_k\":5}"},
              {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_k\":5}"},
              {KVT_REQ_NATIVE, "{\"prompt\":\"x\",\"top_k\":5}"}};
    bool dok = true;
    for (size_t i = 0; i < sizeof dk / sizeof dk[0]; i++) {
        kvt_request *q = NULL;
        dok = dok && kvt_request_parse_with(dk[i].body, strlen(dk[i].body), dk[i].kind, &d, &q, &e) == KVT_OK;
        const kvt_request_params *qp = q ? kvt_request_get(q) : NULL;
        dok = dok && qp && qp->temperature == 0.6 && qp->top_k == 5 && qp->min_p == 0 && qp->top_p == 0.95 &&
              qp->has_seed && qp->seed == 9 && qp->dry_multiplier == 0.8 && qp->ignore_eos;
        kvt_request_free(q);
    }
    test_result(dok, "serve.request: the server's defaults (its sampling flags) start every endpoint's request, its "
                "fields win", "%s", e.message);
    kvt_request_free(r);

    static const char *ids_forms[] = {"{\"prompt\":[1,2,3]}", "{\"prompt\":[[1,2,3]]}"};
    for (int i = 0; i < 2; i++) {
        r = parse(KVT_REQ_COMPLETION, ids_forms[i], &e);
        p = r ? kvt_request_get(r) : NULL;
        test_result(p && !p->prompt && p->n_prompt_ids == 3 && p->prompt_ids[2] == 3,
                    i ? "serve.request: prompt as a list holding one list of token ids" : "serve.request: prompt as token ids",
                    "%s", r ? "wrong ids" : e.message);
        kvt_request_free(r);
    }
    r = parse(KVT_REQ_COMPLETION, "{\"prompt\":[\"only one\"],\"stop\":\"###\",\"max_tokens\":4.0}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && !strcmp(p->prompt, "only one") && p->n_stop == 1 && !strcmp(p->stop[0], "###") && p->max_tokens == 4,
                "serve.request: prompt as a list of one string, stop as a string, an integral real", "%s",
                r ? "wrong values" : e.message);
    kvt_request_free(r);

    r = parse(KVT_REQ_CHAT,
              "{\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":[{\"type\":"
              "\"text\",\"text\":\"Hello, \"},{\"type\":\"text\",\"text\":\"w\\u00f6rld\"}]}],\"max_tokens\":5,"
              "\"max_completion_tokens\":9,\"logprobs\":true,\"top_logprobs\":3}",
              &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->n_messages == 2 && !strcmp(p->messages[0].role, "system") &&
                    !strcmp(p->messages[1].content, "Hello, \nw\xc3\xb6rld") && p->max_tokens == 9 && p->logprobs &&
                    p->top_logprobs == 3,
                "serve.request: chat with text parts (joined by a newline, as llama-server), developer read as system; "
                "max_completion_tokens wins over max_tokens",
                "%s",
                r ? "wrong values" : e.message);
    kvt_request_free(r);

    r = parse(KVT_REQ_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":null},"
              "{\"role\":\"user\",\"content\":\"b\"}]}",
              &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->n_messages == 3 && !strcmp(p->messages[1].content, ""),
                "serve.request: an assistant message's content null is empty (as llama-server; a user's is still required)",
                "%s", r ? "wrong values" : e.message);
    kvt_request_free(r);

    // neutral values of the fields kvtier does not implement are accepted (clients send them by default);
    // n_predict is llama-server's max_tokens
    r = parse(KVT_REQ_COMPLETION,
              "{\"prompt\":\"x\",\"n_predict\":7,\"logit_bias\":{},\"echo\":false,\"suffix\":null,\"best_of\":1,"
              "\"presence_penalty\":0,\"frequency_penalty\":0.0,\"repeat_penalty\":1,\"response_format\":{\"type\":\"text\"},"
              "\"tools\":[]}",
              &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->max_tokens == 7, "serve.request: neutral values of unimplemented fields accepted; n_predict as max_tokens",
                "%s", r ? "wrong max_tokens" : e.message);
    kvt_request_free(r);
    r = parse(KVT_REQ_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"presence_penalty\":0.5,"
              "\"frequency_penalty\":-1.5,\"repeat_penalty\":1.1,\"repeat_last_n\":32}",
              &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->presence_penalty == 0.5 && p->frequency_penalty == -1.5 && p->repeat_penalty == 1.1 &&
                    p->repeat_last_n == 32,
                "serve.request: presence, frequency and repeat penalties and repeat_last_n read", "%s",
                r ? "wrong values" : e.message);
    kvt_request_free(r);
    // logit_bias in llama-server's two forms: ids (an integer, or a key of digits), texts, false as a ban
    r = parse(KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"15\":-2.5,\" hi\":false}}", &e);
    p = r ? kvt_request_get(r) : NULL;
    bool lb = p && p->n_bias_given == 2 && p->bias_given[0].id == 15 && p->bias_given[0].bias == -2.5f &&
              !p->bias_given[0].text && p->bias_given[1].id == -1 && !strcmp(p->bias_given[1].text, " hi") &&
              isinf(p->bias_given[1].bias) && p->bias_given[1].bias < 0;
    kvt_request_free(r);
    r = parse(KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":[[7,1],[\"ab\",false],[\"12\",3]]}", &e);
    p = r ? kvt_request_get(r) : NULL;
    lb &= p && p->n_bias_given == 3 && p->bias_given[0].id == 7 && p->bias_given[1].text &&
          p->bias_given[2].id == -1 && p->bias_given[2].text && !strcmp(p->bias_given[2].text, "12") &&
          p->bias_given[2].bias == 3.0f && !p->logit_bias;
    test_result(lb, "serve.request: logit_bias as an object and as a list (ids, texts, false bans)", "%s",
                r ? "wrong values" : e.message);
    kvt_request_free(r);
    // keys as llama-server's strtol reads them: blanks and a sign before the digits still make an id ("-1" and one
    // beyond range refused, where before they were biased as the texts "-1" and "9999..."); "1e2" and "5 " are texts
    r = parse(KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\" 5\":1,\"+6\":2,\"1e2\":3,\"7 \":4}}", &e);
    p = r ? kvt_request_get(r) : NULL;
    lb = p && p->n_bias_given == 4 && p->bias_given[0].id == 5 && !p->bias_given[0].text && p->bias_given[1].id == 6 &&
         !p->bias_given[1].text && p->bias_given[2].text && !strcmp(p->bias_given[2].text, "1e2") &&
         p->bias_given[3].text && !strcmp(p->bias_given[3].text, "7 ");
    kvt_request_free(r);
    r = parse(KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"-1\":1}}", &e);
    lb &= !r && strstr(e.message, "token id -1 is negative");
    kvt_request_free(r);
    r = parse(KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"99999999999999999999\":1}}", &e);
    lb &= !r && strstr(e.message, "negative or too large");
    kvt_request_free(r);
    test_result(lb, "serve.request: logit_bias keys read as llama-server's strtol (\" 5\", \"+6\" ids; \"-1\" refused)",
                "%s", e.message);
    r = parse(KVT_REQ_COMPLETION, "{\"prompt\":\"x\"}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->presence_penalty == 0 && p->frequency_penalty == 0 && p->repeat_penalty == 1 &&
                    p->repeat_last_n == 64,
                "serve.request: the penalties default to off (repeat_last_n 64, as llama-server)", "%s",
                r ? "wrong values" : e.message);
    kvt_request_free(r);
    r = parse(KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"n_predict\":-1,\"max_tokens\":3}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->max_tokens == 3, "serve.request: max_tokens wins over n_predict", "%s", r ? "wrong" : e.message);
    kvt_request_free(r);
}

static void test_request_errors(void) {
    static const struct {
        kvt_req_kind kind;
        const char *body, *param, *text; // expected param ("" none) and a substring of the message
    } k[] = {
        {KVT_REQ_COMPLETION, "{\"prompt\": \"x\",", "", "malformed JSON"},
        {KVT_REQ_COMPLETION, "[1,2]", "", "must be a JSON object"},
        {KVT_REQ_COMPLETION, "{}", "prompt", "required"},
        {KVT_REQ_COMPLETION, "{\"prompt\":5}", "prompt", "must be a string or a list"},
        {KVT_REQ_COMPLETION, "{\"prompt\":[]}", "prompt", "empty"},
        {KVT_REQ_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", "prompt", "several prompts"},
        {KVT_REQ_COMPLETION, "{\"prompt\":[1,\"b\"]}", "prompt", "prompt[1]"},
        {KVT_REQ_COMPLETION, "{\"prompt\":[1,-2]}", "prompt", "token id"},
        {KVT_REQ_COMPLETION, "{\"prompt\":[1.5,2]}", "prompt", "prompt[0]: a token id must be an integer"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"a\\u0000b\"}", "prompt", "NUL"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"model\":3}", "model", "must be a string"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"temperature\":\"hot\"}", "temperature", "must be a number"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"temperature\":true}", "temperature", "must be a number"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"temperature\":2.5}", "temperature", "out of range"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"top_p\":0}", "top_p", "out of range"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"min_p\":-0.1}", "min_p", "out of range"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"top_k\":-1}", "top_k", "out of range"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":1.5}", "max_tokens", "must be an integer"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens", "out of range"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"max_completion_tokens\":\"9\"}", "max_completion_tokens",
         "must be an integer"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"seed\":\"7\"}", "seed", "must be an integer"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"n\":0}", "n", "out of range"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"n\":1000}", "n", "out of range"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"stop\":[\"a\",3]}", "stop[1]", "must be a string"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"stop\":\"\"}", "stop", "must not be empty"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"stop\":{}}", "stop", "string or a list"},
        {KVT_REQ_COMPLETION,
         "{\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\","
         "\"14\",\"15\",\"16\",\"17\"]}",
         "stop", "at most 16"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs", "must be an integer"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs", "out of range"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"stream\":1}", "stream", "must be a boolean"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", "stream_options",
         "only allowed when stream is true"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}",
         "stream_options.include_usage", "must be a boolean"},
        {KVT_REQ_CHAT, "{\"prompt\":\"x\"}", "messages", "required"},
        {KVT_REQ_CHAT, "{\"messages\":{}}", "messages", "must be a list"},
        {KVT_REQ_CHAT, "{\"messages\":[]}", "messages", "at least one"},
        {KVT_REQ_CHAT, "{\"messages\":[\"hi\"]}", "messages[0]", "must be an object"},
        {KVT_REQ_CHAT, "{\"messages\":[{\"content\":\"hi\"}]}", "messages[0].role", "required"},
        {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", "required"},
        {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":7}]}",
         "messages[1].content", "must be a string or a list"},
        {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
         "messages[0].content[0]", "only \"text\""},
        {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":3}", "logprobs",
         "must be a boolean"},
        {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":3}", "top_logprobs",
         "requires logprobs"},
        // fields kvtier does not implement that would change the answer (attack run 2026-11-30: silently ignored)
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":7}", "logit_bias", "must be an object"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":[[5]]}", "logit_bias", "logit_bias[0]: must be a [token, bias] pair"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":true}}", "logit_bias", "number or false"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":[[-3,1]]}", "logit_bias", "negative"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":[[[1],1]]}", "logit_bias", "integer id or a text"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", "echo", "not supported"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"suffix\":\"end\"}", "suffix", "not supported"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"best_of\":3}", "best_of", "not supported"},
        // the penalties (llama-server's): OpenAI's range for presence and frequency; repeat_penalty > 0
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"presence_penalty\":2.5}", "presence_penalty", "out of range"},
        {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"frequency_penalty\":\"1\"}",
         "frequency_penalty", "must be a number"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"repeat_penalty\":0}", "repeat_penalty", "out of range"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"repeat_last_n\":-1}", "repeat_last_n", "out of range"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"n_probs\":5}", "n_probs", "not supported"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"grammar\":5}", "grammar", "must be a string"},
        {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"xml\"}}",
         "response_format.type", "\"json_object\""},
        {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"json_schema\":{},\"grammar\":\"root ::= \\\"a\\\"\"}",
         "json_schema", "together with grammar"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"json_schema\":[1]}", "json_schema", "must be a JSON schema"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"response_format\":\"json\"}", "response_format", "must be an object"},
        {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"json_schema\","
         "\"json_schema\":{\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"stringy\"}}}}}}",
         "response_format.json_schema.schema", "stringy"},
        {KVT_REQ_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"function\"}]}", "tools",
         "not supported"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"n_predict\":0}", "n_predict", "out of range"},
        {KVT_REQ_COMPLETION, "{\"prompt\":\"x\",\"n_predict\":-2}", "n_predict", "out of range"},
    };
    int bad = 0;
    char msg[KVT_ERR_MSG_MAX + 128] = "";
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        kvt_api_error e;
        kvt_request *r = parse(k[i].kind, k[i].body, &e);
        bool ok = !r && e.http_status == 400 && !strcmp(e.type, "invalid_request_error") && !strcmp(e.param, k[i].param) &&
                  strstr(e.message, k[i].text) && (!k[i].param[0] || strstr(e.message, k[i].param));
        if (!ok && !bad++)
            snprintf(msg, sizeof msg, "body %s: got %s status %d param '%s' message '%s'", k[i].body, r ? "success" : "error",
                     e.http_status, e.param, e.message);
        kvt_request_free(r);
    }
    test_result(bad == 0, "serve.request: malformed JSON, missing, mistyped and out-of-range fields are 400 naming the field",
                "%d of %zu wrong; first: %s", bad, sizeof k / sizeof k[0], msg);

    kvt_api_error e;
    kvt_api_errorf(&e, 400, NULL, "temperature", "temperature: %s", "must be a number");
    char *s = kvt_api_error_json(&e);
    json_t *j = s ? json_loads(s, 0, NULL) : NULL, *o = json_object_get(j, "error");
    test_result(o && !strcmp(json_string_value(json_object_get(o, "message")), "temperature: must be a number") &&
                    !strcmp(json_string_value(json_object_get(o, "type")), "invalid_request_error") &&
                    !strcmp(json_string_value(json_object_get(o, "param")), "temperature") &&
                    json_integer_value(json_object_get(o, "code")) == 400,
                "serve.request: errors in the OpenAI shape {\"error\": {message, type, param, code}}", "%s", s ? s : "NULL");
    json_decref(j);
    free(s);
}

static void test_tokenize_requests(void) {
    kvt_api_error e;
    kvt_request *r = parse(KVT_REQ_TOKENIZE, "{\"content\":\"Hi <|im_end|>\",\"add_special\":true,\"with_pieces\":true}", &e);
    const kvt_request_params *p = r ? kvt_request_get(r) : NULL;
    test_result(p && !strcmp(p->prompt, "Hi <|im_end|>") && p->add_special && p->parse_special && p->with_pieces,
                "serve.request: /tokenize body (content, add_special, parse_special default true, with_pieces)", "%s",
                r ? "wrong values" : e.message);
    kvt_request_free(r);
    r = parse(KVT_REQ_DETOKENIZE, "{\"tokens\":[]}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->n_prompt_ids == 0, "serve.request: /detokenize with no tokens", "%s", r ? "wrong" : e.message);
    kvt_request_free(r);
    static const struct {
        kvt_req_kind kind;
        const char *body, *param;
    } k[] = {{KVT_REQ_TOKENIZE, "{}", "content"},
             {KVT_REQ_TOKENIZE, "{\"content\":1}", "content"},
             {KVT_REQ_TOKENIZE, "{\"content\":\"x\",\"with_pieces\":\"yes\"}", "with_pieces"},
             {KVT_REQ_DETOKENIZE, "{\"tokens\":\"1 2\"}", "tokens"},
             {KVT_REQ_DETOKENIZE, "{\"tokens\":[1,2.5]}", "tokens"}};
    int bad = 0;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        r = parse(k[i].kind, k[i].body, &e);
        if (r || e.http_status != 400 || strcmp(e.param, k[i].param) != 0) bad++;
        kvt_request_free(r);
    }
    test_result(bad == 0, "serve.request: bad /tokenize and /detokenize bodies are 400 naming the field", "%d wrong", bad);
}

// Builds r and parses the result back.
static json_t *build(const kvt_resp *r) {
    char *s = NULL;
    kvt_err err = {0};
    if (kvt_resp_json(r, &s, NULL, &err) != KVT_OK) return NULL;
    json_t *j = json_loads(s, 0, NULL);
    free(s);
    return j;
}

#define JGET(j, path) json_path(j, path)
// Small path lookup: "choices.0.message.content".
static json_t *json_path(json_t *j, const char *path) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *tok = strtok(buf, "."); tok && j; tok = strtok(NULL, "."))
        j = (tok[0] >= '0' && tok[0] <= '9') ? json_array_get(j, (size_t)atoi(tok)) : json_object_get(j, tok);
    return j;
}

static bool jstr_is(json_t *j, const char *path, const char *want) {
    json_t *v = json_path(j, path);
    return json_is_string(v) && !strcmp(json_string_value(v), want);
}

static bool jint_is(json_t *j, const char *path, long long want) {
    json_t *v = json_path(j, path);
    return json_is_integer(v) && json_integer_value(v) == want;
}

// Parses and frees *s when st is KVT_OK (a macro: *s is read after the builder ran).
static json_t *load_owned(kvt_status st, char **s) {
    json_t *j = st == KVT_OK ? json_loads(*s, 0, NULL) : NULL;
    free(*s);
    *s = NULL;
    return j;
}
#define load(call, s) load_owned((call), &(s))

static void test_small_responses(void) {
    int32_t ids[2] = {17, 4};
    const char *pieces[2] = {"Hi", "\xe2\x82"};
    size_t lens[2] = {2, 2};
    char *s = NULL;
    json_t *j = load(kvt_resp_tokenize_json(ids, 2, NULL, NULL, &s, NULL), s);
    test_result(j && jint_is(j, "tokens.0", 17) && jint_is(j, "tokens.1", 4), "serve.response: /tokenize ids", "shape differs");
    json_decref(j);
    j = load(kvt_resp_tokenize_json(ids, 2, pieces, lens, &s, NULL), s);
    test_result(j && jint_is(j, "tokens.0.id", 17) && jstr_is(j, "tokens.0.piece", "Hi") &&
                    jint_is(j, "tokens.1.piece.0", 0xe2) && jint_is(j, "tokens.1.piece.1", 0x82),
                "serve.response: /tokenize with pieces (a partial character as its bytes)", "shape differs");
    json_decref(j);
    j = load(kvt_resp_detokenize_json("ok\xf0\x9f", 4, &s, NULL), s);
    test_result(j && jstr_is(j, "content", "ok\xef\xbf\xbd"), "serve.response: /detokenize content", "shape differs");
    json_decref(j);
    j = load(kvt_resp_models_json("SmolLM2-135M-Instruct.Q4_1.gguf", 5, NULL, &s, NULL), s);
    test_result(j && jstr_is(j, "object", "list") && jstr_is(j, "data.0.id", "SmolLM2-135M-Instruct.Q4_1.gguf") &&
                    jstr_is(j, "data.0.object", "model") && jint_is(j, "data.0.created", 5) && !json_path(j, "data.0.meta"),
                "serve.response: /v1/models list", "shape differs");
    json_decref(j);
    // llama-server's "meta" (its get_res_model_info(): names, integers past 2^31 too, the file type's name)
    const kvt_resp_model_meta meta = {2, 49152, 2048, 8192, 576, 134515008, (int64_t)5 << 30, "Q4_1"};
    j = load(kvt_resp_models_json("m.gguf", 5, &meta, &s, NULL), s);
    test_result(j && jint_is(j, "data.0.meta.vocab_type", 2) && jint_is(j, "data.0.meta.n_vocab", 49152) &&
                    jint_is(j, "data.0.meta.n_ctx", 2048) && jint_is(j, "data.0.meta.n_ctx_train", 8192) &&
                    jint_is(j, "data.0.meta.n_embd", 576) && jint_is(j, "data.0.meta.n_params", 134515008) &&
                    jint_is(j, "data.0.meta.size", (int64_t)5 << 30) && jstr_is(j, "data.0.meta.ftype", "Q4_1") &&
                    json_object_size(json_path(j, "data.0.meta")) == 8,
                "serve.response: /v1/models meta (llama-server's vocab_type, n_vocab, n_ctx, n_ctx_train, n_embd, n_params, "
                "size, ftype)", "shape differs");
    json_decref(j);
}

static void test_response(void) {
    kvt_resp_usage u = {10, 5, 8};
    kvt_resp_choice c = {.index = 0, .text = "Hi \xf0\x9f\x99\x82", .len = 7, .finish_reason = "stop"};
    kvt_resp r = {.kind = KVT_REQ_COMPLETION, .id = "cmpl-1", .model = "smollm2", .created = 1700000000,
                  .choices = &c, .n_choices = 1, .usage = &u};
    json_t *j = build(&r);
    test_result(j && jstr_is(j, "object", "text_completion") && jstr_is(j, "id", "cmpl-1") &&
                    jint_is(j, "created", 1700000000) && jstr_is(j, "choices.0.text", "Hi \xf0\x9f\x99\x82") &&
                    jstr_is(j, "choices.0.finish_reason", "stop") && json_is_null(JGET(j, "choices.0.logprobs")) &&
                    jint_is(j, "usage.prompt_tokens", 10) && jint_is(j, "usage.completion_tokens", 5) &&
                    jint_is(j, "usage.total_tokens", 15) && jint_is(j, "usage.prompt_tokens_details.cached_tokens", 8),
                "serve.response: text_completion with usage and cached_tokens", "shape differs");
    json_decref(j);

    kvt_resp_alt top[2] = {{"Hi", 2, -0.1, 0}, {"\xe2\x82", 2, -2.5, 0}}; // the second is a partial character
    kvt_resp_logprob lp = {{"Hi", 2, -0.1, 0}, top, 2, 0};
    kvt_resp_choice cc = {.index = 1, .text = "Hi", .len = 2, .finish_reason = "length", .has_logprobs = true,
                          .logprobs = &lp, .n_logprobs = 1};
    r = (kvt_resp){.kind = KVT_REQ_CHAT, .id = "chatcmpl-2", .model = "m", .created = 1, .choices = &cc, .n_choices = 1,
                   .usage = &u};
    j = build(&r);
    test_result(j && jstr_is(j, "object", "chat.completion") && jstr_is(j, "choices.0.message.role", "assistant") &&
                    jstr_is(j, "choices.0.message.content", "Hi") && jint_is(j, "choices.0.index", 1) &&
                    jstr_is(j, "choices.0.finish_reason", "length") &&
                    jstr_is(j, "choices.0.logprobs.content.0.token", "Hi") &&
                    json_real_value(JGET(j, "choices.0.logprobs.content.0.logprob")) == -0.1 &&
                    jint_is(j, "choices.0.logprobs.content.0.bytes.1", 'i') &&
                    jstr_is(j, "choices.0.logprobs.content.0.top_logprobs.1.token", "\xef\xbf\xbd") &&
                    jint_is(j, "choices.0.logprobs.content.0.top_logprobs.1.bytes.0", 0xe2) &&
                    jint_is(j, "choices.0.logprobs.content.0.top_logprobs.1.bytes.1", 0x82),
                "serve.response: chat.completion with logprobs (a partial character: U+FFFD in token, raw bytes kept)",
                "shape differs");
    json_decref(j);

    kvt_resp_choice first = {.index = 0, .text = "", .len = 0, .role = true};
    r = (kvt_resp){.kind = KVT_REQ_CHAT, .chunk = true, .id = "c", .model = "m", .choices = &first, .n_choices = 1,
                   .usage_null = true};
    j = build(&r);
    test_result(j && jstr_is(j, "object", "chat.completion.chunk") && jstr_is(j, "choices.0.delta.role", "assistant") &&
                    jstr_is(j, "choices.0.delta.content", "") && json_is_null(JGET(j, "choices.0.finish_reason")) &&
                    json_is_null(JGET(j, "usage")) && !JGET(j, "choices.0.message"),
                "serve.response: first chat chunk carries the role; usage null while streaming", "shape differs");
    json_decref(j);
    kvt_resp_choice last = {.index = 0, .finish_reason = "stop"};
    r.choices = &last;
    r.usage_null = false;
    j = build(&r);
    test_result(j && json_object_size(JGET(j, "choices.0.delta")) == 0 && jstr_is(j, "choices.0.finish_reason", "stop") &&
                    !JGET(j, "usage"),
                "serve.response: last chat chunk has an empty delta and the finish reason", "shape differs");
    json_decref(j);
    r.choices = NULL;
    r.n_choices = 0;
    r.usage = &u;
    j = build(&r);
    test_result(j && json_array_size(JGET(j, "choices")) == 0 && jint_is(j, "usage.total_tokens", 15),
                "serve.response: the include_usage chunk has no choices and the usage", "shape differs");
    json_decref(j);

    kvt_resp_logprob lps[2] = {{{"Hi", 2, -0.1, 0}, top, 2, 0}, {{" there", 6, -0.7, 0}, top, 1, 2}};
    kvt_resp_choice lc = {.index = 0, .text = "Hi there", .len = 8, .has_logprobs = true, .logprobs = lps, .n_logprobs = 2};
    r = (kvt_resp){.kind = KVT_REQ_COMPLETION, .chunk = true, .id = "c", .model = "m", .choices = &lc, .n_choices = 1};
    j = build(&r);
    test_result(j && jstr_is(j, "object", "text_completion") && jstr_is(j, "choices.0.logprobs.tokens.1", " there") &&
                    json_real_value(JGET(j, "choices.0.logprobs.token_logprobs.1")) == -0.7 &&
                    jint_is(j, "choices.0.logprobs.text_offset.1", 2) &&
                    json_real_value(JGET(j, "choices.0.logprobs.top_logprobs.0.Hi")) == -0.1 &&
                    json_object_size(JGET(j, "choices.0.logprobs.top_logprobs.1")) == 1,
                "serve.response: legacy completion logprobs (tokens, token_logprobs, top_logprobs, text_offset)",
                "shape differs");
    json_decref(j);
}

// `kvtier serve --print-prompt`: SmolLM2's template recognized at start-up, a chat body rendered.
static void test_serve_cli(const test_env *env) {
    const char *name = "serve.cli: kvtier serve --print-prompt renders a chat body with SmolLM2's template";
    if (!test_file_exists(env->smollm2) || !test_file_exists(env->cli)) {
        test_skip(name, "SmolLM2 GGUF or the kvtier binary absent");
        return;
    }
    char path[] = "/tmp/kvt_serve_req_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        test_result(false, name, "cannot create %s", path);
        return;
    }
    fputs("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", f);
    fclose(f);
    char cmd[1024], out[1024] = "";
    snprintf(cmd, sizeof cmd, "%s serve -m %s --print-prompt %s 2>&1", env->cli, env->smollm2, path);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    int rc = p ? pclose(p) : -1;
    unlink(path);
    test_result(rc == 0 && !strcmp(out, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                                         "Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
                name, "rc %d, output %s", rc, out);
}
#endif

void test_serve_api(void); // test_serve_api.c: Anthropic's Messages and OpenAI's Responses

void test_serve(const test_env *env) {
    test_utf8_splits();
    test_utf8_invalid();
    test_sse();
    test_stop();
#ifdef KVT_HAVE_JANSSON
    test_request_ok();
    test_request_errors();
    test_tokenize_requests();
    test_response();
    test_small_responses();
    test_serve_api();
    test_serve_cli(env);
#else
    (void)env;
    test_skip("serve.request and serve.response", "built without libjansson (apt-get install libjansson-dev)");
    test_serve_api();
#endif
}
