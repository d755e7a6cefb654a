// test_serve_api.c - the request converters and answer writers of the APIs kvtier serves beside OpenAI's chat
// completions: Anthropic's Messages (anthropic.h) and OpenAI's Responses (responses_api.h). Part of the serve suite
// (test_serve.c calls test_serve_api); the HTTP cases are in tools/serve_test.py.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

void test_serve_api(void);

#ifdef KVT_HAVE_JANSSON
#include <jansson.h>

#include "../src/serve/anthropic.h"
#include "../src/serve/responses_api.h"

typedef kvt_status (*parse_fn)(const char *, size_t, const kvt_req_defaults *, kvt_request **, kvt_api_error *);

static kvt_request *parse(parse_fn fn, const char *body, kvt_api_error *e) {
    kvt_request *r = NULL;
    *e = (kvt_api_error){0};
    return fn(body, strlen(body), NULL, &r, e) == KVT_OK ? r : NULL;
}

typedef struct {
    const char *body, *param;
} refusal;

// Each body refused with a 400 naming its field (param, first in the message too).
static void check_refusals(parse_fn fn, const refusal *bad, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++) {
        kvt_api_error e;
        kvt_request *r = parse(fn, bad[i].body, &e);
        test_result(!r && e.http_status == 400 && !strcmp(e.param, bad[i].param) &&
                        !strncmp(e.message, e.param, strlen(e.param)),
                    name, "%s: status %d param '%s': %s", bad[i].body, e.http_status, e.param, e.message);
        kvt_request_free(r);
    }
}

static void test_anthropic_parse(void) {
    kvt_api_error e;
    kvt_request *r = parse(kvt_anthropic_parse,
                           "{\"model\":\"m\",\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\"},{\"type\":\"text\","
                           "\"text\":\" Answer.\",\"cache_control\":{}}],\"messages\":[{\"role\":\"user\",\"content\":"
                           "[{\"type\":\"text\",\"text\":\"What is\"},{\"type\":\"thinking\",\"thinking\":\"hm\"},"
                           "{\"type\":\"text\",\"text\":\"2+2?\"}]},{\"role\":\"assistant\"},{\"role\":\"assistant\","
                           "\"content\":[{\"type\":\"thinking\",\"thinking\":\"x\"}]},{\"role\":\"assistant\",\"content\":"
                           "\"4\"},{\"role\":\"user\",\"content\":\"Sure?\"}],\"stop_sequences\":[\"\\n\\n\"],"
                           "\"temperature\":0,\"top_k\":5,\"top_p\":0.5,\"metadata\":{\"user_id\":\"u\"},"
                           "\"tool_choice\":{\"type\":\"auto\"},\"thinking\":{\"type\":\"disabled\"}}",
                           &e);
    const kvt_request_params *p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->kind == KVT_REQ_CHAT && p->api == KVT_API_ANTHROPIC && p->n_messages == 4 &&
                    !strcmp(p->messages[0].role, "system") && !strcmp(p->messages[0].content, "Be brief. Answer.") &&
                    !strcmp(p->messages[1].role, "user") && !strcmp(p->messages[1].content, "What is\n2+2?") &&
                    !strcmp(p->messages[2].role, "assistant") && !strcmp(p->messages[2].content, "4") &&
                    !strcmp(p->messages[3].content, "Sure?") && p->n_stop == 1 && !strcmp(p->stop[0], "\n\n") &&
                    p->temperature == 0 && p->top_k == 5 && p->top_p == 0.5 && p->max_tokens == 4096 &&
                    !strcmp(p->model, "m") && !p->stream && p->n == 1,
                "serve.anthropic: system blocks joined, text blocks as text parts, thinking and empty messages left "
                "out, stop_sequences, max_tokens 4096 when absent", "%s", r ? "fields" : e.message);
    kvt_request_free(r);

    static const refusal bad[] = {
        {"{\"max_tokens\":5}", "messages"},
        {"[1]", ""},
        {"{\"messages\":{}}", "messages"},
        {"{\"messages\":[]}", "messages"},
        {"{\"messages\":[7]}", "messages[0]"},
        {"{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role"},
        {"{\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "messages[0].role"},
        {"{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "messages[0].role"},
        {"{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":true}]}", "messages[0].content"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", "messages[0].content"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}", "messages[0].content[0]"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}", "messages[0].content[0].type"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\"}]}]}", "messages[0].content[0].type"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", "messages[0].content[0].text"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[]}]}", "messages"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"system\":{}}", "system"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"system\":[{\"type\":\"text\",\"text\":2}]}",
         "system[0].text"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":3e12}", "max_tokens"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":-1}", "max_tokens"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop_sequences\":[\"a\",3]}", "stop_sequences[1]"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_k\":\"x\"}", "top_k"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":1}", "stream"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"f\"}]}", "tools"},
    };
    check_refusals(kvt_anthropic_parse, bad, sizeof bad / sizeof bad[0],
                   "serve.anthropic: a hostile body is a 400 naming the field");
}

static void test_anthropic_answers(void) {
    kvt_anthropic_msg m = {.id = "msg_7", .model = "smol", .text = "Hi \xff", .len = 4, .stop_reason = "stop_sequence",
                           .stop_sequence = "\n", .input_tokens = 30, .cached_tokens = 10, .output_tokens = 5};
    char *s = kvt_anthropic_message_json(&m, NULL);
    test_result(s && !strcmp(s, "{\"id\":\"msg_7\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":"
                                "\"text\",\"text\":\"Hi \xef\xbf\xbd\"}],\"model\":\"smol\",\"stop_reason\":"
                                "\"stop_sequence\",\"stop_sequence\":\"\\n\",\"usage\":{\"cache_read_input_tokens\":10,"
                                "\"input_tokens\":20,\"output_tokens\":5}}"),
                "serve.anthropic: the message's fields (llama-server's), invalid UTF-8 as U+FFFD", "%s", s ? s : "NULL");
    free(s);
    m.len = 0;
    m.stop_reason = "end_turn";
    m.stop_sequence = NULL;
    s = kvt_anthropic_message_json(&m, NULL);
    test_result(s && strstr(s, "\"content\":[]") && strstr(s, "\"stop_sequence\":null"),
                "serve.anthropic: no text, no content block", "%s", s ? s : "NULL");
    free(s);
    static const struct {
        kvt_anthropic_event_kind k;
        const char *want;
    } ev[] = {
        {KVT_ANTHROPIC_MESSAGE_START, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"
                                      "\"msg_7\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":"
                                      "\"smol\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{"
                                      "\"cache_read_input_tokens\":10,\"input_tokens\":20,\"output_tokens\":0}}}\n\n"},
        {KVT_ANTHROPIC_BLOCK_START, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
                                    "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"},
        {KVT_ANTHROPIC_BLOCK_DELTA, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
                                    "\"delta\":{\"type\":\"text_delta\",\"text\":\"a\\nb\"}}\n\n"},
        {KVT_ANTHROPIC_BLOCK_STOP, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"},
        {KVT_ANTHROPIC_MESSAGE_DELTA, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{"
                                      "\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{"
                                      "\"output_tokens\":5}}\n\n"},
        {KVT_ANTHROPIC_MESSAGE_STOP, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"},
    };
    m.text = "a\nb";
    m.len = 3;
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++) {
        size_t n = 0;
        s = kvt_anthropic_event(ev[i].k, &m, &n);
        test_result(s && !strcmp(s, ev[i].want) && n == strlen(s), "serve.anthropic: stream events as llama-server's",
                    "%s", s ? s : "NULL");
        free(s);
    }
    s = kvt_anthropic_error_event(strdup("{\"error\":{\"message\":\"x\",\"code\":500}}"), NULL);
    test_result(s && !strncmp(s, "event: error\ndata: {", 20) && strstr(s, "\"type\":\"error\""),
                "serve.anthropic: the error event", "%s", s ? s : "NULL");
    free(s);
}

static void test_responses_api(void) {
    kvt_api_error e;
    kvt_request *r = parse(kvt_oairesp_parse, "{\"instructions\":\"Be brief.\",\"input\":\"Hi\",\"max_output_tokens\":7,"
                                              "\"temperature\":0,\"store\":false,\"stream\":false}", &e);
    const kvt_request_params *p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->api == KVT_API_RESPONSES && p->n_messages == 2 && !strcmp(p->messages[0].role, "system") &&
                    !strcmp(p->messages[0].content, "Be brief.") && !strcmp(p->messages[1].role, "user") &&
                    !strcmp(p->messages[1].content, "Hi") && p->max_tokens == 7 && p->temperature == 0,
                "serve.responses: instructions and a string input", "%s", r ? "fields" : e.message);
    kvt_request_free(r);
    r = parse(kvt_oairesp_parse, "{\"input\":[{\"role\":\"developer\",\"content\":\"S\"},{\"type\":\"message\","
                                 "\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},{\"type\":"
                                 "\"input_text\",\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":[{\"type\":"
                                 "\"output_text\",\"text\":\"c\"}]}]}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->n_messages == 3 && !strcmp(p->messages[0].role, "system") &&
                    !strcmp(p->messages[1].content, "a\nb") && !strcmp(p->messages[2].role, "assistant") &&
                    !strcmp(p->messages[2].content, "c") && p->max_tokens == -1,
                "serve.responses: a list of messages, input_text and output_text parts", "%s", r ? "fields" : e.message);
    kvt_request_free(r);
    static const refusal bad[] = {
        {"{}", "input"},
        {"{\"input\":[]}", "input"},
        {"{\"input\":{}}", "input"},
        {"{\"input\":[{\"type\":\"reasoning\"}]}", "input[0].type"},
        {"{\"input\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "input[0].role"},
        {"{\"input\":[{\"role\":\"user\"}]}", "input[0].content"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\"}]}]}", "input[0].content[0].type"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[]}]}", "input[0].content"},
        {"{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens"},
        {"{\"input\":\"x\",\"stream\":\"yes\"}", "stream"},
        {"{\"input\":\"x\",\"ignore_eos\":1}", "ignore_eos"},
        {"{\"input\":\"x\",\"stop\":[\"\"]}", "stop[0]"},
        {"{\"input\":\"x\",\"previous_response_id\":\"r\"}", "previous_response_id"},
        {"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}}", "text.format"},
        {"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"strin\"}}}}",
         "text.format.schema"},
        {"{\"input\":\"x\",\"instructions\":[]}", "instructions"},
        {"{\"input\":\"x\",\"temperature\":9}", "temperature"},
    };
    check_refusals(kvt_oairesp_parse, bad, sizeof bad / sizeof bad[0],
                   "serve.responses: a hostile body is a 400 naming the field");
    r = parse(kvt_oairesp_parse, "{\"input\":\"Hi\",\"stream\":true,\"stop\":[\"x\",\"yz\"],\"ignore_eos\":true}", &e);
    p = r ? kvt_request_get(r) : NULL;
    test_result(p && p->stream && p->ignore_eos && p->n_stop == 2 && !strcmp(p->stop[1], "yz"),
                "serve.responses: stream, stop and ignore_eos are passed on to the chat request (as llama-server)", "%s",
                r ? "fields" : e.message);
    kvt_request_free(r);
    const kvt_oairesp a = {"resp_3", "msg_3", "smol", 100, 101, "Hi", 2, 20, 4, 6, NULL};
    char *s = kvt_oairesp_json(&a, NULL);
    test_result(s && !strcmp(s, "{\"id\":\"resp_3\",\"object\":\"response\",\"created_at\":100,\"completed_at\":101,"
                                "\"model\":\"smol\",\"status\":\"completed\",\"output\":[{\"id\":\"msg_3\",\"type\":"
                                "\"message\",\"role\":\"assistant\",\"status\":\"completed\",\"content\":[{\"type\":"
                                "\"output_text\",\"text\":\"Hi\",\"annotations\":[],\"logprobs\":[]}]}],\"usage\":{"
                                "\"input_tokens\":20,\"output_tokens\":6,\"total_tokens\":26,\"input_tokens_details\":{"
                                "\"cached_tokens\":4}}}"),
                "serve.responses: the answer's fields (llama-server's)", "%s", s ? s : "NULL");
    free(s);
    // a stream's events: llama-server's names, fields and key orders (its stream captured on SmolLM2)
    static const char *const want[] = {
        "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_3\",\"object\":"
        "\"response\",\"status\":\"in_progress\"}}\n\n",
        "event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"response\":{\"id\":\"resp_3\",\"object\":"
        "\"response\",\"status\":\"in_progress\"}}\n\n",
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"content\":[],"
        "\"id\":\"msg_3\",\"role\":\"assistant\",\"status\":\"in_progress\",\"type\":\"message\"}}\n\n",
        "event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"item_id\":\"msg_3\",\"part\":"
        "{\"type\":\"output_text\",\"text\":\"\"}}\n\n",
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_3\",\"delta\":"
        "\"Hi\"}\n\n",
        "event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"item_id\":\"msg_3\",\"text\":"
        "\"Hi\"}\n\n",
        "event: response.content_part.done\ndata: {\"type\":\"response.content_part.done\",\"item_id\":\"msg_3\",\"part\":"
        "{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"Hi\"}}\n\n",
        "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"message\","
        "\"status\":\"completed\",\"id\":\"msg_3\",\"content\":[{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":"
        "[],\"text\":\"Hi\"}],\"role\":\"assistant\"}}\n\n",
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_3\",\"object\":"
        "\"response\",\"created_at\":100,\"status\":\"completed\",\"model\":\"smol\",\"output\":[{\"type\":\"message\","
        "\"status\":\"completed\",\"id\":\"msg_3\",\"content\":[{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":"
        "[],\"text\":\"Hi\"}],\"role\":\"assistant\"}],\"usage\":{\"input_tokens\":20,\"output_tokens\":6,\"total_tokens\":"
        "26,\"input_tokens_details\":{\"cached_tokens\":4}}}}\n\n"};
    for (int k = KVT_OAIRESP_CREATED; k <= KVT_OAIRESP_COMPLETED; k++) {
        size_t n = 0;
        s = kvt_oairesp_event((kvt_oairesp_event_kind)k, &a, &n);
        test_result(s && !strcmp(s, want[k]) && n == strlen(s), "serve.responses: a stream event as llama-server's",
                    "%s", s ? s : "NULL");
        free(s);
    }
    const kvt_resp_timings t = {.prompt_n = 16, .cache_n = 4, .predicted_n = 6};
    const kvt_oairesp none = {"resp_4", "msg_4", "smol", 100, 101, "", 0, 20, 4, 6, &t};
    s = kvt_oairesp_event(KVT_OAIRESP_COMPLETED, &none, NULL);
    test_result(s && strstr(s, "\"output\":[],") && strstr(s, "}},\"timings\":{") && strstr(s, "\"predicted_n\":6"),
                "serve.responses: response.completed without text has no output item; timings beside the response",
                "%s", s ? s : "NULL");
    free(s);
}

void test_serve_api(void) {
    test_anthropic_parse();
    test_anthropic_answers();
    test_responses_api();
}
#else
void test_serve_api(void) { test_skip("serve.anthropic and serve.responses", "built without libjansson"); }
#endif
