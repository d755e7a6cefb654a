// http.c - the OpenAI-compatible HTTP server (libmicrohttpd, one thread per connection).
#include "http.h"
#include "infill.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../base/timer.h"
#include "../sched/generate.h"
#include "../sched/grammar_tok.h"
#include "anthropic.h"
#include "conversation.h"
#include "embed_api.h"
#include "http_job.h"
#include "native.h"
#include "request.h"
#include "response.h"
#include "responses_api.h"

#define DEFAULT_MAX_BODY ((size_t)8 << 20)
#define STREAM_BLOCK 4096

struct kvt_http {
    struct MHD_Daemon *d;
    kvt_http_params p;
    char *api_key;
    int port;
    int listen_fd;           // after quiesce: ours to close
    atomic_bool ready, stopping;
    kvt_engine *engine;      // set before ready
    kvt_embedder *embedder;  // --embeddings (kvt_http_set_embedder; NULL: the embeddings endpoints answer 501)
    const kvt_tokenizer *tok;
    const kvt_chat_template *tmpl;
    char *model_id;
    char *model_path, *chat_template_src; // GET /props (kvt_http_set_info); NULL: unknown
    kvt_resp_model_meta meta;             // GET /v1/models' "meta" (kvt_http_set_info), when has_meta
    bool has_meta;
    int64_t started;
    atomic_ullong serial;
    atomic_llong answers[6]; // responses by status class: [2] 2xx, [4] 4xx, [5] 5xx
    atomic_llong streams_cancelled;
    atomic_llong embd_cancelled; // embeddings requests stopped because their client hung up
    atomic_llong open_jobs;  // requests with an engine job whose response is not yet complete (kvt_http_drain)
    // the DRY breakers' table of the last set asked for (dry_table), keyed by its strings: clients send the same set
    // in every request (SillyTavern llama.cpp's default), and a table reads every token's text (~40 ms for 262K)
    kvt_req_defaults defaults; // requests start from these (kvt_http_params.defaults); its breakers point into:
    kvt_req_text *dry_default; // [defaults.n_dry_breakers] owned, each string malloc'd (NULL: none set)
    pthread_mutex_t dry_mu;
    char *dry_key;
    size_t dry_key_len;
    kvt_dry_breakers *dry_cached;
    // the vocabulary's texts for grammars (grammar_tok.h), built by the first request with a grammar (~40 ms for
    // 262K tokens) and kept
    pthread_mutex_t gvocab_mu;
    kvt_grammar_vocab *gvocab;
};

// One request on a connection (libmicrohttpd's con_cls).
typedef struct {
    char *body;
    size_t len, cap;
    bool too_big, seen;
    kvt_http_job *job;       // a completion in flight: this connection's reference
} conn;

static const char *k_json = "application/json; charset=utf-8";

static enum MHD_Result send_body(kvt_http *h, struct MHD_Connection *c, int status, char *body, const char *type,
                                 const char *hname, const char *hval) {
    if (!body) { // out of memory: an empty 500
        status = 500;
        body = strdup("");
        if (!body) return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    if (hname) MHD_add_response_header(r, hname, hval);
    if (status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (status / 100 < 6) atomic_fetch_add(&h->answers[status / 100], 1);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_api_error(kvt_http *h, struct MHD_Connection *c, const kvt_api_error *ae, const char *hname,
                                      const char *hval) {
    return send_body(h, c, ae->http_status, kvt_api_error_json(ae), k_json, hname, hval);
}

#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static enum MHD_Result send_error(kvt_http *h, struct MHD_Connection *c, int status, const char *type, const char *fmt,
                                  ...) {
    kvt_api_error ae;
    char msg[KVT_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kvt_api_errorf(&ae, status, type, NULL, "%s", msg);
    return send_api_error(h, c, &ae, NULL, NULL);
}

// ---- the routes ----

typedef enum { R_HEALTH, R_MODELS, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE, R_METRICS, R_NATIVE, R_PROPS,
               R_SLOTS, R_APPLY_TEMPLATE, R_MESSAGES, R_COUNT_TOKENS, R_RESPONSES, R_LORA, R_EMBD, R_EMBD_OAI, R_INFILL } route_id;
typedef struct {
    const char *path;
    const char *method;
    route_id id;
} route;
static const route k_routes[] = {
    {"/health", "GET", R_HEALTH},          {"/v1/health", "GET", R_HEALTH},
    {"/v1/models", "GET", R_MODELS},       {"/models", "GET", R_MODELS},
    {"/v1/completions", "POST", R_COMPLETIONS},
    {"/v1/chat/completions", "POST", R_CHAT},   {"/chat/completions", "POST", R_CHAT},
    {"/tokenize", "POST", R_TOKENIZE},     {"/detokenize", "POST", R_DETOKENIZE},
    {"/metrics", "GET", R_METRICS},
    // llama-server's native endpoints (native.h); /completions (no /v1) is its native /completion, as there
    {"/completion", "POST", R_NATIVE},     {"/completions", "POST", R_NATIVE},
    {"/infill", "POST", R_INFILL}, // infill.h
    {"/props", "GET", R_PROPS},            {"/slots", "GET", R_SLOTS},
    {"/apply-template", "POST", R_APPLY_TEMPLATE}, {"/lora-adapters", "GET", R_LORA},
    {"/v1/messages", "POST", R_MESSAGES},  {"/v1/messages/count_tokens", "POST", R_COUNT_TOKENS}, // anthropic.h
    {"/v1/responses", "POST", R_RESPONSES}, {"/responses", "POST", R_RESPONSES},                 // responses_api.h
    {"/v1/embeddings", "POST", R_EMBD_OAI}, {"/embeddings", "POST", R_EMBD}, {"/embedding", "POST", R_EMBD}, // embed_api.h
};

static enum MHD_Result answer_health(kvt_http *h, struct MHD_Connection *c) {
    if (atomic_load(&h->ready)) return send_body(h, c, 200, strdup("{\"status\":\"ok\"}"), k_json, NULL, NULL);
    json_t *o = json_pack("{s:{s:i,s:s,s:s},s:s}", "error", "code", 503, "message", "Loading model", "type",
                          "unavailable_error", "status", "loading");
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return send_body(h, c, 503, s, k_json, NULL, NULL);
}

// Token ids of a completion's prompt: text with BOS as the model asks and special-token parsing (as
// `kvtier generate`), a chat's rendered prompt with special-token parsing and the BOS added only where the
// template did not write it and the model asks for it, or the given ids (checked against the vocabulary).
// NULL with *ae filled on error.
static int32_t *prompt_ids(kvt_http *h, const kvt_request_params *p, int64_t *n, kvt_api_error *ae) {
    if (p->native && p->native->pieces) return kvt_native_prompt_ids(p->native, h->tok, n, ae); // strings and ids
    if (p->native && p->native->infill) { // POST /infill
        const kvt_infill_limits lim = {kvt_engine_n_ctx(h->engine), h->p.infill_batch > 0 ? h->p.infill_batch : 2048,
                                       -1, h->p.spm_infill};
        return kvt_infill_prompt_ids(p->native->infill, h->tok, &lim, n, ae);
    }
    const int32_t n_vocab = kvt_tokenizer_n_vocab(h->tok);
    if (p->prompt_ids) {
        for (int64_t i = 0; i < p->n_prompt_ids; i++) {
            if (p->prompt_ids[i] < 0 || p->prompt_ids[i] >= n_vocab) {
                kvt_api_errorf(ae, 400, "invalid_request_error", "prompt", "prompt[%lld] = %d is not a token id (0..%d)",
                               (long long)i, p->prompt_ids[i], n_vocab - 1);
                return NULL;
            }
        }
        int32_t *ids = malloc((size_t)(p->n_prompt_ids + 1) * sizeof *ids);
        if (!ids) goto oom;
        memcpy(ids, p->prompt_ids, (size_t)p->n_prompt_ids * sizeof *ids);
        *n = p->n_prompt_ids;
        return ids;
    }
    kvt_err err = {0};
    int32_t *ids = NULL;
    int64_t k = -1;
    if (p->kind == KVT_REQ_CHAT) {
        char *rendered = NULL;
        size_t len = 0;
        if (kvt_chat_template_apply_request(h->tmpl, p->messages, p->n_messages, &rendered, &len, &err)) {
            kvt_api_errorf(ae, err.status == KVT_ERR_NOMEM ? 500 : 400, "invalid_request_error", "messages", "%s", err.msg);
            return NULL;
        }
        ids = kvt_chat_prompt_ids(h->tok, rendered, len, &k, &err);
        free(rendered);
        if (!ids && err.status == KVT_ERR_NOMEM) goto oom;
    } else {
        const size_t len = strlen(p->prompt);
        k = kvt_tokenize(h->tok, p->prompt, len, true, true, NULL, 0, &err);
        if (k >= 0 && !(ids = malloc((size_t)(k + 1) * sizeof *ids))) goto oom;
        if (ids && (k = kvt_tokenize(h->tok, p->prompt, len, true, true, ids, k, &err)) < 0) {
            free(ids);
            ids = NULL;
        }
    }
    if (!ids) {
        kvt_api_errorf(ae, 400, "invalid_request_error", "prompt", "cannot tokenize the prompt: %s", err.msg);
        return NULL;
    }
    *n = k;
    return ids;
oom:
    kvt_api_errorf(ae, 500, "server_error", NULL, "out of memory for the prompt");
    return NULL;
}

// The request's logit_bias resolved to token ids (kvt_request_set_logit_bias): ids checked against the vocabulary, a
// text's tokens (no BOS, no special-token parsing, as llama-server) each given its bias. false with *ae filled.
// The DRY breakers' table of a request whose DRY acts (its strings, or llama.cpp's default "\n", ":", "\"", "*"): a new
// reference (the caller's; the HTTP job keeps it until the engine is done) to the server's cached table when the set
// is the last one built, else to a new one, which becomes the cached one. NULL with *ae filled on error.
static kvt_dry_breakers *dry_table(kvt_http *h, const kvt_request *req, kvt_api_error *ae) {
    const kvt_request_params *p = kvt_request_get(req);
    static const char *const dflt[] = {"\n", ":", "\"", "*"};
    const size_t n = p->dry_breakers ? p->n_dry_breakers : 4;
    const char **strs = malloc((n + 1) * sizeof *strs);
    size_t *lens = malloc((n + 1) * sizeof *lens), key_len = 0;
    for (size_t i = 0; strs && lens && i < n; i++) {
        strs[i] = p->dry_breakers ? p->dry_breakers[i].s : dflt[i];
        lens[i] = p->dry_breakers ? p->dry_breakers[i].len : 1;
        key_len += sizeof(size_t) + lens[i];
    }
    char *key = strs && lens ? malloc(key_len + 1) : NULL; // each string's length, then its bytes
    kvt_dry_breakers *b = NULL;
    kvt_err err = {0};
    kvt_status st = key ? KVT_OK : KVT_ERR_NOMEM;
    for (size_t i = 0, at = 0; key && i < n; at += sizeof(size_t) + lens[i], i++) {
        memcpy(key + at, &lens[i], sizeof(size_t));
        memcpy(key + at + sizeof(size_t), strs[i], lens[i]);
    }
    if (st == KVT_OK) {
        pthread_mutex_lock(&h->dry_mu);
        if (h->dry_cached && h->dry_key_len == key_len && !memcmp(h->dry_key, key, key_len))
            b = kvt_dry_breakers_ref(h->dry_cached);
        pthread_mutex_unlock(&h->dry_mu);
    }
    if (st == KVT_OK && !b) { // built outside the lock; two requests may build the same set at once
        st = kvt_dry_breakers_init(h->tok, strs, lens, (int32_t)n, &b, &err);
        if (st == KVT_OK) {
            pthread_mutex_lock(&h->dry_mu);
            kvt_dry_breakers_free(h->dry_cached);
            free(h->dry_key);
            h->dry_cached = kvt_dry_breakers_ref(b);
            h->dry_key = key;
            h->dry_key_len = key_len;
            key = NULL;
            pthread_mutex_unlock(&h->dry_mu);
        }
    }
    free(key);
    free(strs);
    free(lens);
    if (st != KVT_OK) {
        if (st == KVT_ERR_NOMEM) kvt_api_errorf(ae, 500, "server_error", NULL, "out of memory for the DRY breakers");
        else kvt_api_errorf(ae, 400, "invalid_request_error", "dry_sequence_breakers", "dry_sequence_breakers: %s",
                            err.msg);
        return NULL;
    }
    return b;
}

static bool resolve_logit_bias(kvt_http *h, kvt_request *req, kvt_api_error *ae) {
    const kvt_request_params *p = kvt_request_get(req);
    const int32_t n_vocab = kvt_tokenizer_n_vocab(h->tok);
    kvt_logit_bias *v = NULL;
    int64_t n = 0, cap = 0;
    for (size_t i = 0; i < p->n_bias_given; i++) {
        const kvt_req_logit_bias *b = &p->bias_given[i];
        kvt_err err = {0};
        const int64_t k = b->text ? kvt_tokenize(h->tok, b->text, strlen(b->text), false, false, NULL, 0, &err) : 1;
        if (k < 0) {
            kvt_api_errorf(ae, 400, "invalid_request_error", "logit_bias", "logit_bias[%zu]: cannot tokenize %.60s: %s",
                           i, b->text, err.msg);
            goto fail;
        }
        if (!b->text && b->id >= n_vocab) {
            kvt_api_errorf(ae, 400, "invalid_request_error", "logit_bias", "logit_bias[%zu]: token %lld is outside the "
                           "vocabulary (0..%d)", i, (long long)b->id, n_vocab - 1);
            goto fail;
        }
        if (n + k > cap) {
            cap = 2 * (n + k);
            kvt_logit_bias *w = realloc(v, (size_t)cap * sizeof *w);
            if (!w) {
                kvt_api_errorf(ae, 500, "server_error", NULL, "out of memory for logit_bias");
                goto fail;
            }
            v = w;
        }
        if (!b->text) {
            v[n++] = (kvt_logit_bias){(int32_t)b->id, b->bias};
            continue;
        }
        int32_t *ids = malloc((size_t)(k + 1) * sizeof *ids);
        if (!ids || kvt_tokenize(h->tok, b->text, strlen(b->text), false, false, ids, k, &err) != k) {
            free(ids);
            kvt_api_errorf(ae, 500, "server_error", NULL, "out of memory for logit_bias");
            goto fail;
        }
        for (int64_t t = 0; t < k; t++) v[n++] = (kvt_logit_bias){ids[t], b->bias};
        free(ids);
    }
    if (n > INT32_MAX) {
        kvt_api_errorf(ae, 400, "invalid_request_error", "logit_bias", "logit_bias: too many tokens");
        goto fail;
    }
    if (p->ignore_eos) { // llama-server: a -inf bias on each end-of-generation token, after the request's own
        kvt_logit_bias *w = NULL;
        int32_t nw = 0;
        kvt_err err = {0};
        if (kvt_logit_bias_ban_eog(h->tok, v, (int32_t)n, &w, &nw, &err)) {
            kvt_api_errorf(ae, err.status == KVT_ERR_NOMEM ? 500 : 400, err.status == KVT_ERR_NOMEM ? "server_error"
                           : "invalid_request_error", "ignore_eos", "ignore_eos: %s", err.msg);
            goto fail;
        }
        free(v);
        v = w;
        n = nw;
    }
    kvt_request_set_logit_bias(req, v, (int32_t)n);
    return true;
fail:
    free(v);
    return false;
}

// The request's grammar compiled against the server's vocabulary (*g NULL when it has none), and the vocabulary's
// texts in *v (the server's, built once). False with *ae filled (400 naming the field for a bad grammar).
static bool request_grammar(kvt_http *h, const kvt_request_params *p, kvt_grammar **g, const kvt_grammar_vocab **v,
                            kvt_api_error *ae) {
    *g = NULL;
    *v = NULL;
    if (!p->grammar) return true;
    kvt_err err = {0};
    kvt_status st = KVT_OK;
    pthread_mutex_lock(&h->gvocab_mu);
    if (!h->gvocab) st = kvt_grammar_vocab_from_tokenizer(h->tok, &h->gvocab, &err);
    *v = h->gvocab; // (kept until the server ends)
    pthread_mutex_unlock(&h->gvocab_mu);
    if (!st) st = kvt_grammar_parse_tok(p->grammar, strlen(p->grammar), h->tok, g, &err);
    if (!st) return true;
    if (st == KVT_ERR_NOMEM) kvt_api_errorf(ae, 500, "server_error", NULL, "%s", err.msg);
    else if (!strncmp(err.msg, p->grammar_field, strlen(p->grammar_field))) // (the parser's messages say "grammar")
        kvt_api_errorf(ae, 400, "invalid_request_error", p->grammar_field, "%s", err.msg);
    else kvt_api_errorf(ae, 400, "invalid_request_error", p->grammar_field, "%s: %s", p->grammar_field, err.msg);
    return false;
}

// A streamed response's reader: the job and the client's socket.
typedef struct {
    kvt_http_job *job;
    int fd;
} stream_src;

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_src *s = cls;
    ssize_t n = kvt_http_job_read(s->job, s->fd, buf, max);
    return n < 0 ? MHD_CONTENT_READER_END_OF_STREAM : n;
}

static void stream_free(void *cls) {
    stream_src *s = cls;
    kvt_http_job_unref(s->job);
    free(s);
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

// The embeddings' cancel check (user: the connection's fd): the client hung up.
static bool embd_client_gone(void *user) { return kvt_http_fd_hung_up(*(const int *)user); }

// The request body parsed as the API asks: kvt_request_parse of kind, or a conversion into a chat request.
static kvt_status parse_body(const conn *cn, const kvt_req_defaults *d, kvt_req_kind kind, kvt_req_api api,
                             kvt_request **req, kvt_api_error *ae) {
    const char *body = cn->body ? cn->body : "";
    if (api == KVT_API_ANTHROPIC) return kvt_anthropic_parse(body, cn->len, d, req, ae);
    if (api == KVT_API_RESPONSES) return kvt_oairesp_parse(body, cn->len, d, req, ae);
    return kvt_request_parse_with(body, cn->len, kind, d, req, ae);
}

static enum MHD_Result answer_completion(kvt_http *h, struct MHD_Connection *c, conn *cn, kvt_req_kind kind,
                                         kvt_req_api api) {
    kvt_request *req = NULL;
    kvt_api_error ae;
    if (kind == KVT_REQ_INFILL && !kvt_infill_supported(h->tok, &ae)) return send_api_error(h, c, &ae, NULL, NULL);
    if (parse_body(cn, &h->defaults, kind, api, &req, &ae)) return send_api_error(h, c, &ae, NULL, NULL);
    const kvt_request_params *p = kvt_request_get(req);
    kind = p->kind; // /infill: a /completion request from here on
    int64_t n_prompt = 0;
    int32_t *ids = prompt_ids(h, p, &n_prompt, &ae);
    if (!ids) {
        kvt_request_free(req);
        return send_api_error(h, c, &ae, NULL, NULL);
    }
    const int64_t n_ctx = kvt_engine_n_ctx(h->engine);
    if (n_prompt < 1 || n_prompt >= n_ctx) {
        free(ids);
        kvt_request_free(req);
        if (n_prompt < 1) return send_error(h, c, 400, "invalid_request_error", "the prompt has no tokens");
        // llama-server's type and fields, which its clients look for to tell this error from others
        kvt_api_errorf(&ae, 400, "exceed_context_size_error", NULL,
                       "the prompt has %lld tokens; the context of %lld tokens (-c) holds at most %lld",
                       (long long)n_prompt, (long long)n_ctx, (long long)(n_ctx - 1));
        ae.n_prompt_tokens = n_prompt;
        ae.n_ctx = n_ctx;
        return send_api_error(h, c, &ae, NULL, NULL);
    }
    if (!resolve_logit_bias(h, req, &ae)) {
        free(ids);
        kvt_request_free(req);
        return send_api_error(h, c, &ae, NULL, NULL);
    }
    kvt_engine_job job = {ids, n_prompt, p->max_tokens, kvt_sampler_params_default(), p->n, p->logprobs, p->top_logprobs,
                          p->ignore_eos, kind == KVT_REQ_NATIVE && p->native && p->native->post_sampling_probs};
    job.sampling.temp = (float)p->temperature;
    job.sampling.top_k = p->top_k;
    job.sampling.top_p = (float)p->top_p;
    job.sampling.min_p = (float)p->min_p;
    job.sampling.repeat_penalty = (float)p->repeat_penalty;
    job.sampling.frequency_penalty = (float)p->frequency_penalty;
    job.sampling.presence_penalty = (float)p->presence_penalty;
    job.sampling.logit_bias = p->logit_bias; // owned by req, which the HTTP job keeps until the engine is done
    job.sampling.n_logit_bias = p->n_logit_bias;
    job.sampling.top_n_sigma = (float)p->top_n_sigma;
    job.sampling.typical_p = (float)p->typical_p;
    job.sampling.xtc_probability = (float)p->xtc_probability;
    job.sampling.xtc_threshold = (float)p->xtc_threshold;
    job.sampling.dynatemp_range = (float)p->dynatemp_range;
    job.sampling.dynatemp_exponent = (float)p->dynatemp_exponent;
    job.sampling.mirostat = p->mirostat;
    job.sampling.mirostat_tau = (float)p->mirostat_tau;
    job.sampling.mirostat_eta = (float)p->mirostat_eta;
    if (p->infill_sampler) job.sampling.infill = h->tok; // the server's, alive as long as it
    job.sampling.min_keep = p->min_keep;
    job.sampling.adaptive_target = p->adaptive_p && p->mirostat == 0 ? (float)p->adaptive_target : -1.0f;
    job.sampling.adaptive_decay = (float)p->adaptive_decay;
    job.sampling.dry = (kvt_dry_params){(float)p->dry_multiplier, (float)p->dry_base, p->dry_allowed_length,
                                        p->dry_penalty_last_n < n_ctx ? p->dry_penalty_last_n : (int32_t)n_ctx};
    kvt_dry_breakers *dry = NULL; // (the HTTP job keeps the reference)
    if (kvt_dry_params_on(&job.sampling.dry) && p->mirostat == 0 && !(dry = dry_table(h, req, &ae))) {
        free(ids);
        kvt_request_free(req);
        return send_api_error(h, c, &ae, NULL, NULL);
    }
    job.sampling.dry_breakers = dry;
    kvt_grammar *gram = NULL; // (the HTTP job keeps the reference)
    if (!request_grammar(h, p, &gram, &job.sampling.grammar_vocab, &ae)) {
        free(ids);
        kvt_dry_breakers_free(dry);
        kvt_request_free(req);
        return send_api_error(h, c, &ae, NULL, NULL);
    }
    job.sampling.grammar = gram;
    // the window never holds more than the context (a larger one would only cost the sampler's memory)
    job.sampling.penalty_last_n = (int32_t)(p->repeat_last_n < n_ctx ? p->repeat_last_n : n_ctx);
    job.sampling.seed = p->has_seed ? p->seed
                                    : (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull + atomic_load(&h->serial) * 7919u;
    const bool stream = p->stream;
    uint64_t serial = atomic_fetch_add(&h->serial, 1) + 1;
    kvt_http_job *j = kvt_http_job_create(req, h->tok, p->model ? p->model : h->model_id, serial, stream ? 3 : 2);
    if (!j) {
        free(ids);
        kvt_dry_breakers_free(dry);
        kvt_grammar_free(gram);
        return send_error(h, c, 500, "server_error", "out of memory for the request");
    }
    kvt_http_job_set_dry(j, dry);
    kvt_http_job_set_grammar(j, gram);
    if (kind == KVT_REQ_NATIVE) { // the prompt's text (special tokens rendered, as llama-server) for the answer
        if (!p->has_seed) job.sampling.seed &= 0x7fffffff; // reported in generation_settings: 31 bits, as llama-server's
        int64_t len = kvt_detokenize_ex(h->tok, ids, n_prompt, NULL, 0, false, true);
        char *text = len >= 0 ? malloc((size_t)len + 1) : NULL;
        if (text) kvt_detokenize_ex(h->tok, ids, n_prompt, text, len, false, true);
        kvt_http_job_set_native(j, text, text ? (size_t)len : 0, job.sampling.seed, n_prompt);
    }
    kvt_http_job_set_n_prompt(j, n_prompt);
    kvt_engine_callbacks cb = kvt_http_job_callbacks(j);
    uint64_t id;
    kvt_err err = {0};
    kvt_status st = kvt_engine_submit(h->engine, &job, &cb, &id, &err);
    free(ids);
    if (st) { // refused: no callback will come, drop every reference
        for (int r = stream ? 3 : 2; r > 0; r--) kvt_http_job_unref(j);
        return send_error(h, c, st == KVT_ERR_BUDGET ? 503 : st == KVT_ERR_INVALID_ARG ? 400 : 500,
                          st == KVT_ERR_BUDGET ? "unavailable_error" : "invalid_request_error", "%s", err.msg);
    }
    kvt_http_job_set_id(j, h->engine, id);
    cn->job = j;
    atomic_fetch_add(&h->open_jobs, 1);
    if (!stream) {
        int status;
        char *body;
        kvt_http_job_body(j, conn_fd(c), &status, &body);
        return send_body(h, c, status, body, k_json, NULL, NULL);
    }
    stream_src *src = malloc(sizeof *src);
    struct MHD_Response *r = NULL;
    if (src) {
        src->job = j;
        src->fd = conn_fd(c);
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_reader, src, stream_free);
    }
    if (!r) {
        free(src);
        kvt_http_job_unref(j); // the response's reference
        return MHD_NO;         // the connection closes; its end cancels the job
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    atomic_fetch_add(&h->answers[2], 1);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

// POST /apply-template (a chat request's messages: {"prompt": the rendered template}) and POST
// /v1/messages/count_tokens (an Anthropic request: {"input_tokens": its prompt's tokens}), as llama-server.
static enum MHD_Result answer_template(kvt_http *h, struct MHD_Connection *c, conn *cn, bool count) {
    kvt_request *req = NULL;
    kvt_api_error ae;
    if (parse_body(cn, &h->defaults, KVT_REQ_CHAT, count ? KVT_API_ANTHROPIC : KVT_API_OPENAI, &req, &ae))
        return send_api_error(h, c, &ae, NULL, NULL);
    const kvt_request_params *p = kvt_request_get(req);
    json_t *o = NULL;
    if (count) {
        int64_t n = 0;
        int32_t *ids = prompt_ids(h, p, &n, &ae);
        kvt_request_free(req);
        if (!ids) return send_api_error(h, c, &ae, NULL, NULL);
        free(ids);
        o = json_pack("{s:I}", "input_tokens", (json_int_t)n);
    } else {
        char *rendered = NULL;
        size_t len = 0;
        kvt_err err = {0};
        kvt_status st = kvt_chat_template_apply_request(h->tmpl, p->messages, p->n_messages, &rendered, &len, &err);
        kvt_request_free(req);
        if (st) {
            kvt_api_errorf(&ae, st == KVT_ERR_NOMEM ? 500 : 400, "invalid_request_error", "messages", "%s", err.msg);
            return send_api_error(h, c, &ae, NULL, NULL);
        }
        o = json_object();
        bool ok = true;
        kvt_resp_set(o, "prompt", kvt_resp_jtext(rendered, len), &ok);
        free(rendered);
        if (!ok) {
            json_decref(o);
            o = NULL;
        }
    }
    char *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return out ? send_body(h, c, 200, out, k_json, NULL, NULL) : send_error(h, c, 500, "server_error", "out of memory");
}

static enum MHD_Result answer_tokenize(kvt_http *h, struct MHD_Connection *c, conn *cn, bool detok) {
    kvt_request *req = NULL;
    kvt_api_error ae;
    if (kvt_request_parse(cn->body ? cn->body : "", cn->len, detok ? KVT_REQ_DETOKENIZE : KVT_REQ_TOKENIZE, &req, &ae)) {
        return send_api_error(h, c, &ae, NULL, NULL);
    }
    const kvt_request_params *p = kvt_request_get(req);
    kvt_err err = {0};
    char *out = NULL, *text = NULL, **pieces = NULL;
    size_t *plens = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    if (detok) {
        const int32_t n_vocab = kvt_tokenizer_n_vocab(h->tok);
        for (int64_t i = 0; i < p->n_prompt_ids; i++) {
            if (p->prompt_ids[i] < 0 || p->prompt_ids[i] >= n_vocab) {
                const int32_t bad = p->prompt_ids[i]; // p points into req
                kvt_request_free(req);
                return send_error(h, c, 400, "invalid_request_error", "tokens[%lld] = %d is not a token id (0..%d)",
                                  (long long)i, bad, n_vocab - 1);
            }
        }
        // llama-server's text: the tokens' pieces one after another, control tokens shown (tokens_to_str: no
        // leading space dropped, no clean-up of spaces), as /tokenize's with_pieces gives them
        size_t len = 0;
        for (int64_t i = 0; i < p->n_prompt_ids; i++)
            len += (size_t)kvt_token_to_piece_ex(h->tok, p->prompt_ids[i], NULL, 0, 0, true);
        if ((text = malloc(len + 1))) {
            size_t o = 0;
            for (int64_t i = 0; i < p->n_prompt_ids; i++)
                o += (size_t)kvt_token_to_piece_ex(h->tok, p->prompt_ids[i], text + o, (int64_t)(len - o), 0, true);
            kvt_resp_detokenize_json(text, o, &out, &err);
        }
    } else {
        size_t len = strlen(p->prompt);
        n = kvt_tokenize(h->tok, p->prompt, len, p->add_special, p->parse_special, NULL, 0, &err);
        if (n < 0) {
            kvt_request_free(req);
            return send_error(h, c, 400, "invalid_request_error", "cannot tokenize: %s", err.msg);
        }
        bool ok = (ids = malloc((size_t)(n + 1) * sizeof *ids)) != NULL;
        if (ok) kvt_tokenize(h->tok, p->prompt, len, p->add_special, p->parse_special, ids, n, &err);
        if (ok && p->with_pieces) {
            pieces = calloc((size_t)n + 1, sizeof *pieces);
            plens = calloc((size_t)n + 1, sizeof *plens);
            ok = pieces && plens;
            for (int64_t i = 0; ok && i < n; i++) {
                int64_t k = kvt_token_to_piece_ex(h->tok, ids[i], NULL, 0, 0, true);
                ok = (pieces[i] = malloc((size_t)k + 1)) != NULL;
                if (ok) plens[i] = (size_t)kvt_token_to_piece_ex(h->tok, ids[i], pieces[i], k, 0, true);
            }
        }
        if (ok) kvt_resp_tokenize_json(ids, (size_t)n, (const char *const *)pieces, plens, &out, &err);
    }
    for (int64_t i = 0; pieces && i < n; i++) free(pieces[i]);
    free(pieces);
    free(plens);
    free(ids);
    free(text);
    kvt_request_free(req);
    if (!out) return send_error(h, c, 500, "server_error", "out of memory");
    return send_body(h, c, 200, out, k_json, NULL, NULL);
}

static enum MHD_Result answer_models(kvt_http *h, struct MHD_Connection *c) {
    char *out = NULL;
    kvt_resp_models_json(h->model_id, h->started, h->has_meta ? &h->meta : NULL, &out, NULL);
    return out ? send_body(h, c, 200, out, k_json, NULL, NULL) : send_error(h, c, 500, "server_error", "out of memory");
}

// GET /props: llama-server's server properties, the fields kvtier fills truthfully (native.h).
static enum MHD_Result answer_props(kvt_http *h, struct MHD_Connection *c) {
    kvt_engine_stats s;
    kvt_engine_stats_get(h->engine, &s);
    char *tok_text[2] = {NULL, NULL};
    const int32_t special[2] = {kvt_token_bos(h->tok), kvt_token_eos(h->tok)};
    for (int i = 0; i < 2; i++) {
        size_t len = 0;
        const char *t = special[i] >= 0 ? kvt_token_text(h->tok, special[i], &len) : "";
        tok_text[i] = strndup(t ? t : "", t ? len : 0);
    }
    kvt_native_props pr = {kvt_engine_n_ctx(h->engine), s.n_parallel > 0 ? s.n_parallel : 1, h->model_id,
                           h->model_path, h->chat_template_src, kvt_chat_template_name(h->tmpl), tok_text[0],
                           tok_text[1], h->p.metrics, &h->defaults};
    char *out = NULL;
    if (tok_text[0] && tok_text[1]) kvt_native_props_json(&pr, &out, NULL);
    free(tok_text[0]);
    free(tok_text[1]);
    return out ? send_body(h, c, 200, out, k_json, NULL, NULL) : send_error(h, c, 500, "server_error", "out of memory");
}

static enum MHD_Result answer_metrics(kvt_http *h, struct MHD_Connection *c) {
    if (!h->p.metrics) return send_error(h, c, 501, "not_supported_error", "metrics are off: start with --metrics");
    kvt_engine_stats s;
    kvt_engine_stats_get(h->engine, &s);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return send_error(h, c, 500, "server_error", "out of memory");
#define METRIC(name, type, help) fprintf(f, "# HELP kvtier_" name " " help "\n# TYPE kvtier_" name " " type "\n")
    METRIC("http_responses_total", "counter", "HTTP responses by status class.");
    for (int k = 2; k < 6; k++) fprintf(f, "kvtier_http_responses_total{code=\"%dxx\"} %lld\n", k, (long long)atomic_load(&h->answers[k]));
    METRIC("embeddings_cancelled_total", "counter", "Embeddings requests stopped because the client hung up.");
    fprintf(f, "kvtier_embeddings_cancelled_total %lld\n", (long long)atomic_load(&h->embd_cancelled));
    METRIC("requests_total", "counter", "Completion jobs by outcome.");
    fprintf(f, "kvtier_requests_total{outcome=\"done\"} %lld\n", (long long)s.jobs_done);
    fprintf(f, "kvtier_requests_total{outcome=\"cancelled\"} %lld\n", (long long)s.jobs_cancelled);
    fprintf(f, "kvtier_requests_total{outcome=\"failed\"} %lld\n", (long long)s.jobs_failed);
    fprintf(f, "kvtier_requests_total{outcome=\"rejected\"} %lld\n", (long long)s.jobs_rejected);
    METRIC("prompt_tokens_total", "counter", "Prompt tokens computed.");
    fprintf(f, "kvtier_prompt_tokens_total %lld\n", (long long)s.prompt_tokens);
    METRIC("cached_prompt_tokens_total", "counter", "Prompt tokens whose KV was reused.");
    fprintf(f, "kvtier_cached_prompt_tokens_total %lld\n", (long long)s.cached_tokens);
    METRIC("generated_tokens_total", "counter", "Tokens generated.");
    fprintf(f, "kvtier_generated_tokens_total %lld\n", (long long)s.generated_tokens);
    METRIC("prompt_seconds_total", "counter", "Time spent on prompts.");
    fprintf(f, "kvtier_prompt_seconds_total %.6f\n", s.prompt_seconds);
    METRIC("decode_seconds_total", "counter", "Time spent generating.");
    fprintf(f, "kvtier_decode_seconds_total %.6f\n", s.decode_seconds);
    METRIC("queue_length", "gauge", "Requests waiting.");
    fprintf(f, "kvtier_queue_length %lld\n", (long long)s.queued);
    METRIC("running_sequences", "gauge", "Sequences decoding now.");
    fprintf(f, "kvtier_running_sequences %lld\n", (long long)s.running);
    METRIC("n_parallel", "gauge", "Sequences decoding at once at most (-np).");
    fprintf(f, "kvtier_n_parallel %d\n", s.n_parallel);
    METRIC("iterations_total", "counter", "Forward passes of the batch scheduler.");
    fprintf(f, "kvtier_iterations_total %lld\n", (long long)s.iterations);
    METRIC("preemptions_total", "counter", "Requests swapped out to the disk tier when fast and host were full.");
    fprintf(f, "kvtier_preemptions_total %lld\n", (long long)s.preemptions);
    METRIC("resumes_total", "counter", "Swapped-out requests resumed.");
    fprintf(f, "kvtier_resumes_total %lld\n", (long long)s.resumes);
    METRIC("restarts_total", "counter", "Requests in their prompt started again after a pass failed for lack of room that "
           "could not run again (asyncspade with --sparse-rerank-resid).");
    fprintf(f, "kvtier_restarts_total %lld\n", (long long)s.restarts);
    METRIC("preempted_requests", "gauge", "Requests swapped out now.");
    fprintf(f, "kvtier_preempted_requests %lld\n", (long long)s.preempted);
    METRIC("prefetch_plans_total", "counter", "Plans of the next iterations' sequences given to the KV store for prefetch.");
    fprintf(f, "kvtier_prefetch_plans_total %lld\n", (long long)s.plans);
    METRIC("kv_used_bytes", "gauge", "KV bytes in use per tier (as of the last finished request).");
    for (int t = 0; t < KVT_TIER_COUNT; t++) fprintf(f, "kvtier_kv_used_bytes{tier=\"%s\"} %lld\n", kvt_tier_name((kvt_tier)t), (long long)s.kv.used_bytes[t]);
    METRIC("kv_peak_bytes", "gauge", "Highest KV bytes in use per tier.");
    for (int t = 0; t < KVT_TIER_COUNT; t++) fprintf(f, "kvtier_kv_peak_bytes{tier=\"%s\"} %lld\n", kvt_tier_name((kvt_tier)t), (long long)s.kv.peak_bytes[t]);
    METRIC("kv_budget_bytes", "gauge", "KV budget per tier (-1 unlimited, 0 absent).");
    for (int t = 0; t < KVT_TIER_COUNT; t++) fprintf(f, "kvtier_kv_budget_bytes{tier=\"%s\"} %lld\n", kvt_tier_name((kvt_tier)t), (long long)s.kv.budget_bytes[t]);
    METRIC("kv_warm_bytes_total", "counter", "KV arena bytes made and faulted in ahead of use while idle (--kv-warm).");
    for (int t = 0; t < KVT_TIER_COUNT; t++) {
        if (t != KVT_TIER_DISK) fprintf(f, "kvtier_kv_warm_bytes_total{tier=\"%s\"} %lld\n", kvt_tier_name((kvt_tier)t), (long long)s.kv.warm_bytes[t]);
    }
    METRIC("kv_moved_bytes_total", "counter", "KV bytes moved between tiers.");
    for (int a = 0; a < KVT_TIER_COUNT; a++) {
        for (int b = 0; b < KVT_TIER_COUNT; b++) {
            if (a == b) continue;
            fprintf(f, "kvtier_kv_moved_bytes_total{from=\"%s\",to=\"%s\"} %lld\n", kvt_tier_name((kvt_tier)a),
                    kvt_tier_name((kvt_tier)b), (long long)s.kv.moved_bytes[a][b]);
        }
    }
    { // sparse decode attention (--sparse; zeros when off): what generate --json's "sparse" reports per step, summed
        const kvt_sparse_totals *z = &s.sparse;
        METRIC("sparse_steps_total", "counter", "Sparse decode steps (tokens decoded by a sequence with sparse attention).");
        fprintf(f, "kvtier_sparse_steps_total %lld\n", (long long)z->steps);
        METRIC("sparse_positions_total", "counter", "Positions attended (selected) and held (context) by the sparse decode "
               "steps, summed over their sparse (layer, KV head) pairs.");
        fprintf(f, "kvtier_sparse_positions_total{kind=\"selected\"} %lld\n", (long long)z->selected);
        fprintf(f, "kvtier_sparse_positions_total{kind=\"context\"} %lld\n", (long long)z->context);
        METRIC("sparse_read_bytes_total", "counter", "Bytes the sparse decode steps read: K and V of the attended rows "
               "(kv, dense layers included) and key summaries scanned to select (summary).");
        fprintf(f, "kvtier_sparse_read_bytes_total{kind=\"kv\"} %lld\n", (long long)z->kv_read_bytes);
        fprintf(f, "kvtier_sparse_read_bytes_total{kind=\"summary\"} %lld\n", (long long)z->summary_read_bytes);
        METRIC("sparse_stall_seconds_total", "counter", "Time the sparse decode steps waited for their selections (the "
               "asyncspade worker, or selection on the caller: quest, oracle, re-rank, fallback).");
        fprintf(f, "kvtier_sparse_stall_seconds_total %.6f\n", z->stall_ms / 1e3);
        METRIC("sparse_summary_bytes", "gauge", "Bytes of the sparse key summaries: held now, held at the most (forks "
               "share their parent's: counted once), reserved for them in the fast tier (-1: no --kv-fast), and freed "
               "sequences' buffers kept for the next ones (pooled), and those the prefix cache keeps (kept).");
        fprintf(f, "kvtier_sparse_summary_bytes{kind=\"held\"} %lld\n", (long long)z->summary_held);
        fprintf(f, "kvtier_sparse_summary_bytes{kind=\"peak\"} %lld\n", (long long)z->summary_peak);
        fprintf(f, "kvtier_sparse_summary_bytes{kind=\"reserved\"} %lld\n", (long long)z->summary_reserved);
        fprintf(f, "kvtier_sparse_summary_bytes{kind=\"pooled\"} %lld\n", (long long)z->summary_pooled);
        fprintf(f, "kvtier_sparse_summary_bytes{kind=\"kept\"} %lld\n", (long long)z->summary_kept);
        METRIC("sparse_summary_reuses_total", "counter", "Sparse key summary buffers a new sequence took from freed ones "
               "instead of new memory.");
        fprintf(f, "kvtier_sparse_summary_reuses_total %lld\n", (long long)z->summary_reuses);
        METRIC("sparse_summary_warm_bytes_total", "counter", "Bytes of sparse key summary buffers made and faulted in "
               "while the engine was idle, pooled for the next sequences (--kv-warm).");
        fprintf(f, "kvtier_sparse_summary_warm_bytes_total %lld\n", (long long)z->summary_warm_bytes);
        METRIC("sparse_worker_wait_seconds_total", "counter", "Of sparse_stall_seconds_total, waiting for the asyncspade worker.");
        fprintf(f, "kvtier_sparse_worker_wait_seconds_total %.6f\n", z->wait_ms / 1e3);
        METRIC("sparse_worker_seconds_total", "counter", "The asyncspade worker's wall and thread CPU time in its jobs.");
        fprintf(f, "kvtier_sparse_worker_seconds_total{kind=\"wall\"} %.6f\n", z->worker_ms / 1e3);
        fprintf(f, "kvtier_sparse_worker_seconds_total{kind=\"cpu\"} %.6f\n", z->worker_cpu_ms / 1e3);
        METRIC("sparse_predicted_selections_total", "counter", "asyncspade: predicted (layer, KV head) selections used "
               "(predicted), of which selected again with the real query (fallback); counted only with --sparse-fallback or "
               "--sparse-stats.");
        fprintf(f, "kvtier_sparse_predicted_selections_total{result=\"predicted\"} %lld\n", (long long)z->predicted);
        fprintf(f, "kvtier_sparse_predicted_selections_total{result=\"fallback\"} %lld\n", (long long)z->fallbacks);
    }
    METRIC("kv_hits_total", "counter", "KV block acquires that found the block in the fast tier.");
    fprintf(f, "kvtier_kv_hits_total %lld\n", (long long)s.kv.hits);
    METRIC("kv_misses_total", "counter", "KV block acquires that waited for the block.");
    fprintf(f, "kvtier_kv_misses_total %lld\n", (long long)s.kv.misses);
    METRIC("kv_stall_seconds_total", "counter", "Time compute threads waited for KV blocks.");
    fprintf(f, "kvtier_kv_stall_seconds_total %.6f\n", s.kv.stall_ms / 1e3);
    METRIC("kv_reader_seconds_total", "counter",
           "Compute threads' time in KV acquires (acquire: all of it) and its parts: waiting for the store's lock (lock; "
           "copy threads' waits after a copy included), asleep until a block being moved is ready (wait_busy) or the fast "
           "tier has room (wait_room), loading blocks themselves (load).");
    {
        const char *part[] = {"acquire", "lock", "wait_busy", "wait_room", "load"};
        const double v[] = {s.kv.acquire_ms, s.kv.lock_ms, s.kv.wait_busy_ms, s.kv.wait_room_ms, s.kv.load_ms};
        for (int i = 0; i < 5; i++) fprintf(f, "kvtier_kv_reader_seconds_total{part=\"%s\"} %.6f\n", part[i], v[i] / 1e3);
    }
    METRIC("kv_wakeups_total", "counter", "Sleeps of threads on the KV store's condition that ended (blocks moved, room made).");
    fprintf(f, "kvtier_kv_wakeups_total %lld\n", (long long)s.kv.wakeups);
    METRIC("kv_disk_ring_cancels_total", "counter", "Disk requests of the io_uring engine cancelled after its stall time "
           "with no completion, then redone with pread/pwrite (0 on a healthy disk, or without io_uring).");
    fprintf(f, "kvtier_kv_disk_ring_cancels_total %lld\n", (long long)s.kv.io_ring_cancels);
    METRIC("kv_copy_thread_cpu_seconds_total", "counter", "CPU time of the KV copy engine's threads (with no copy thread "
           "on memory copies: the wall time of the copies that compute threads took).");
    fprintf(f, "kvtier_kv_copy_thread_cpu_seconds_total %.6f\n", s.kv.io_cpu_ms / 1e3);
    METRIC("kv_copy_help_seconds_total", "counter", "Of kv_copy_thread_cpu_seconds_total, the copies that compute threads "
           "took while waiting in the compute pool (time they would otherwise spin).");
    fprintf(f, "kvtier_kv_copy_help_seconds_total %.6f\n", s.kv.io_help_ms / 1e3);
    METRIC("kv_prefetch_queue_total", "counter", "Prefetch-queue entries the copy threads took (all) and those that loaded nothing (idle).");
    fprintf(f, "kvtier_kv_prefetch_queue_total{result=\"all\"} %lld\n", (long long)s.kv.io_items);
    fprintf(f, "kvtier_kv_prefetch_queue_total{result=\"idle\"} %lld\n", (long long)s.kv.io_idle);
    {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        METRIC("context_switches_total", "counter", "The server process's context switches (getrusage), voluntary (waits) and involuntary (preempted).");
        fprintf(f, "kvtier_context_switches_total{kind=\"voluntary\"} %ld\n", ru.ru_nvcsw);
        fprintf(f, "kvtier_context_switches_total{kind=\"involuntary\"} %ld\n", ru.ru_nivcsw);
        METRIC("process_cpu_seconds_total", "counter", "The server process's CPU time (user + system).");
        fprintf(f, "kvtier_process_cpu_seconds_total %.6f\n", (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                                                            (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
    }
    if (s.n_prefix > 0) { // the prefix cache's second level, per store: how lookups end, puts, bytes (one table)
        static const struct {
            const char *family, *help, *label, *value;
        } rows[] = {
            {"lookups", "Block lookups in the prefix cache's second level, by result.", "result", "hit"},
            {"lookups", NULL, "result", "miss"},
            {"lookups", NULL, "result", "corrupt"},
            {"lookups", NULL, "result", "unavailable"},
            {"puts", "Blocks written to the second level, by result.", "result", "asked"},
            {"puts", NULL, "result", "failed"},
            {"puts", NULL, "result", "dropped"},
            {"bytes", "Payload bytes read from / written to the second level.", "dir", "read"},
            {"bytes", NULL, "dir", "write"},
        };
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            if (rows[r].help)
                fprintf(f, "# HELP kvtier_prefix_store_%s_total %s\n# TYPE kvtier_prefix_store_%s_total counter\n",
                        rows[r].family, rows[r].help, rows[r].family);
            for (int32_t k = 0; k < s.n_prefix; k++) {
                const kvt_prefix_store_stats *P = &s.prefix[k];
                const int64_t n[] = {P->hits, P->misses - P->miss_corrupt - P->miss_unavailable, P->miss_corrupt,
                                     P->miss_unavailable, P->puts, P->put_failed, P->put_dropped, P->bytes_read,
                                     P->bytes_written}; // in the order of rows
                fprintf(f, "kvtier_prefix_store_%s_total{store=\"%s\",%s=\"%s\"} %lld\n", rows[r].family,
                        s.prefix_store[k], rows[r].label, rows[r].value, (long long)n[r]);
            }
        }
    }
    if (s.n_prefix > 0) { // the background fetch of prompts' prefix blocks from the second level
        METRIC("prefix_fetches_total", "counter", "Requests whose prefix blocks were looked up in the second level in the background before admission.");
        fprintf(f, "kvtier_prefix_fetches_total %lld\n", (long long)s.prefix_fetches);
        METRIC("prefix_fetch_timeouts_total", "counter", "Of those, admitted before their fetch ended (admission read the store itself).");
        fprintf(f, "kvtier_prefix_fetch_timeouts_total %lld\n", (long long)s.prefix_fetch_timeouts);
        METRIC("prefix_fetch_budget_stops_total", "counter", "Fetches ended early by the staging budget.");
        fprintf(f, "kvtier_prefix_fetch_budget_stops_total %lld\n", (long long)s.prefix_fetch_budget_stops);
        METRIC("prefix_staged_blocks", "gauge", "Prefix blocks staged in host memory now, waiting for admission.");
        fprintf(f, "kvtier_prefix_staged_blocks %lld\n", (long long)s.prefix_staged_blocks);
        METRIC("prefix_staged_bytes", "gauge", "Bytes of prefix blocks staged in host memory now.");
        fprintf(f, "kvtier_prefix_staged_bytes %lld\n", (long long)s.prefix_staged_bytes);
        METRIC("prefix_staged_blocks_total", "counter", "Prefix blocks staged in host memory by the background fetch.");
        fprintf(f, "kvtier_prefix_staged_blocks_total %lld\n", (long long)s.prefix_staged_blocks_total);
        METRIC("prefix_staged_bytes_total", "counter", "Bytes of prefix blocks staged in host memory by the background fetch.");
        fprintf(f, "kvtier_prefix_staged_bytes_total %lld\n", (long long)s.prefix_staged_bytes_total);
    }
    METRIC("prefix_attach_seconds_total", "counter", "Time the scheduler thread spent giving admitted prompts their cached prefix (memory references, imports, second-level reads it waited for).");
    fprintf(f, "kvtier_prefix_attach_seconds_total %.6f\n", s.prefix_attach_seconds);
    { // asyncspade's query windows kept by the prefix cache (prefix_cache.h; zeros otherwise)
        METRIC("prefix_query_hits_total", "counter", "Prefix-cache hits that took a kept query window (asyncspade) instead of recomputing the prompt's last window + 1 tokens.");
        fprintf(f, "kvtier_prefix_query_hits_total %lld\n", (long long)s.query_hits);
        METRIC("prefix_query_tokens_total", "counter", "Prompt tokens those hits did not recompute.");
        fprintf(f, "kvtier_prefix_query_tokens_total %lld\n", (long long)s.query_tokens);
        METRIC("prefix_query_windows", "gauge", "Query windows the prefix cache holds now.");
        fprintf(f, "kvtier_prefix_query_windows %lld\n", (long long)s.query_windows);
        METRIC("prefix_query_bytes", "gauge", "Bytes of those query windows (bounded by --kv-cache-queries).");
        fprintf(f, "kvtier_prefix_query_bytes %lld\n", (long long)s.query_bytes);
        METRIC("prefix_key_hits_total", "counter", "Prefix-cache hits given the sparse key summaries another sequence "
               "left (quest, asyncspade) instead of reading the cached keys back to summarize them.");
        fprintf(f, "kvtier_prefix_key_hits_total %lld\n", (long long)s.key_hits);
        METRIC("prefix_key_tokens_total", "counter", "Cached positions those hits did not read back.");
        fprintf(f, "kvtier_prefix_key_tokens_total %lld\n", (long long)s.key_tokens);
        METRIC("prefix_key_summaries", "gauge", "Sequences' key summaries the prefix cache keeps now.");
        fprintf(f, "kvtier_prefix_key_summaries %lld\n", (long long)s.key_sums);
        METRIC("prefix_key_bytes", "gauge", "Bytes of those key summaries (bounded by --kv-cache-keys).");
        fprintf(f, "kvtier_prefix_key_bytes %lld\n", (long long)s.key_bytes);
        METRIC("prefix_key_live_total", "counter", "Key summaries a running sequence gave the prefix cache for a request "
               "with its prefix admitted before it ended (shared as a fork shares, no copy).");
        fprintf(f, "kvtier_prefix_key_live_total %lld\n", (long long)s.key_live);
    }
    METRIC("kv_host_imports_total", "counter", "KV blocks of imported prefixes written straight into the host tier.");
    fprintf(f, "kvtier_kv_host_imports_total %lld\n", (long long)s.kv.host_imports);
    METRIC("n_ctx", "gauge", "Positions per sequence.");
    fprintf(f, "kvtier_n_ctx %lld\n", (long long)s.n_ctx);
#undef METRIC
    // llama-server's names for the same counts, so that its dashboards read this server unchanged
#define LCPP(name, type, help, fmt, v)                                                                                 \
    fprintf(f, "# HELP llamacpp:" name " " help "\n# TYPE llamacpp:" name " " type "\nllamacpp:" name " " fmt "\n", v)
    LCPP("prompt_tokens_total", "counter", "Prompt tokens computed (kvtier_prompt_tokens_total).", "%lld", (long long)s.prompt_tokens);
    LCPP("prompt_seconds_total", "counter", "Time spent on prompts (kvtier_prompt_seconds_total).", "%.6f", s.prompt_seconds);
    LCPP("tokens_predicted_total", "counter", "Tokens generated (kvtier_generated_tokens_total).", "%lld", (long long)s.generated_tokens);
    LCPP("tokens_predicted_seconds_total", "counter", "Time spent generating (kvtier_decode_seconds_total).", "%.6f", s.decode_seconds);
    LCPP("n_decode_total", "counter", "Forward passes (kvtier_iterations_total).", "%lld", (long long)s.iterations);
    LCPP("prompt_tokens_seconds", "gauge", "Prompt tokens a second, on the mean.", "%.6f",
         s.prompt_seconds > 0 ? (double)s.prompt_tokens / s.prompt_seconds : 0.0);
    LCPP("predicted_tokens_seconds", "gauge", "Generated tokens a second, on the mean.", "%.6f",
         s.decode_seconds > 0 ? (double)s.generated_tokens / s.decode_seconds : 0.0);
    LCPP("requests_processing", "gauge", "Requests decoding now (kvtier_running_sequences).", "%lld", (long long)s.running);
    LCPP("requests_deferred", "gauge", "Requests waiting (kvtier_queue_length).", "%lld", (long long)s.queued);
#undef LCPP
    if (fclose(f) != 0) {
        free(buf);
        return send_error(h, c, 500, "server_error", "out of memory");
    }
    return send_body(h, c, 200, buf, "text/plain; version=0.0.4; charset=utf-8", NULL, NULL);
}

// "Authorization: Bearer KEY" (or X-Api-Key: KEY) matches the key, compared in constant time.
static bool authorized(kvt_http *h, struct MHD_Connection *c) {
    if (!h->api_key) return true;
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (v && !strncasecmp(v, "Bearer ", 7)) v += 7;
    else v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    if (!v) return false;
    size_t a = strlen(v), b = strlen(h->api_key);
    unsigned diff = a != b;
    for (size_t i = 0; i < a && i < b; i++) diff |= (unsigned char)(v[i] ^ h->api_key[i]);
    return diff == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    kvt_http *h = cls;
    conn *cn = *con_cls;
    if (!cn) { // the headers: check the declared size before any body arrives
        if (!(cn = calloc(1, sizeof *cn))) return MHD_NO;
        *con_cls = cn;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > h->p.max_body) { // answered at once: the body is never read
            cn->seen = true;
            return send_error(h, c, 413, "invalid_request_error", "the request body (%s bytes) exceeds %zu bytes", cl,
                              h->p.max_body);
        }
        return MHD_YES;
    }
    if (*upload_size) { // a piece of the body
        if (!cn->too_big && cn->len + *upload_size > h->p.max_body) cn->too_big = true;
        if (!cn->too_big) {
            if (cn->len + *upload_size + 1 > cn->cap) {
                size_t cap = cn->cap ? cn->cap : 4096;
                while (cap < cn->len + *upload_size + 1) cap *= 2;
                char *b = realloc(cn->body, cap);
                if (!b) return MHD_NO;
                cn->body = b;
                cn->cap = cap;
            }
            memcpy(cn->body + cn->len, upload, *upload_size);
            cn->len += *upload_size;
            cn->body[cn->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (cn->seen) return MHD_YES;
    cn->seen = true;
    const route *rt = NULL;
    const char *allow = NULL;
    for (size_t i = 0; i < sizeof k_routes / sizeof k_routes[0]; i++) {
        if (strcmp(url, k_routes[i].path)) continue;
        allow = k_routes[i].method;
        if (!strcmp(method, k_routes[i].method)) rt = &k_routes[i];
    }
    if (!allow) return send_error(h, c, 404, "not_found_error", "no endpoint %s %s", method, url);
    if (!rt) {
        kvt_api_error ae;
        kvt_api_errorf(&ae, 405, "invalid_request_error", NULL, "%s takes %s, not %s", url, allow, method);
        return send_api_error(h, c, &ae, "Allow", allow);
    }
    if (cn->too_big) {
        return send_error(h, c, 413, "invalid_request_error", "the request body exceeds %zu bytes", h->p.max_body);
    }
    if (rt->id == R_HEALTH) return answer_health(h, c);
    if (!authorized(h, c)) {
        kvt_api_error ae;
        kvt_api_errorf(&ae, 401, "authentication_error", NULL, "invalid or missing API key (Authorization: Bearer KEY)");
        return send_api_error(h, c, &ae, "WWW-Authenticate", "Bearer");
    }
    if (atomic_load(&h->stopping)) return send_error(h, c, 503, "unavailable_error", "the server is stopping");
    if (!atomic_load(&h->ready)) return send_error(h, c, 503, "unavailable_error", "Loading model");
    switch (rt->id) {
    case R_MODELS: return answer_models(h, c);
    case R_COMPLETIONS: return answer_completion(h, c, cn, KVT_REQ_COMPLETION, KVT_API_OPENAI);
    case R_CHAT: return answer_completion(h, c, cn, KVT_REQ_CHAT, KVT_API_OPENAI);
    case R_MESSAGES: return answer_completion(h, c, cn, KVT_REQ_CHAT, KVT_API_ANTHROPIC);
    case R_RESPONSES: return answer_completion(h, c, cn, KVT_REQ_CHAT, KVT_API_RESPONSES);
    case R_COUNT_TOKENS: return answer_template(h, c, cn, true);
    case R_APPLY_TEMPLATE: return answer_template(h, c, cn, false);
    case R_LORA: return send_body(h, c, 200, strdup("[]"), k_json, NULL, NULL); // no LoRA adapters: none loaded
    case R_TOKENIZE: return answer_tokenize(h, c, cn, false);
    case R_DETOKENIZE: return answer_tokenize(h, c, cn, true);
    case R_METRICS: return answer_metrics(h, c);
    case R_NATIVE: return answer_completion(h, c, cn, KVT_REQ_NATIVE, KVT_API_OPENAI);
    case R_INFILL: return answer_completion(h, c, cn, KVT_REQ_INFILL, KVT_API_OPENAI);
    case R_PROPS: return answer_props(h, c);
    case R_EMBD:
    case R_EMBD_OAI: { // computed here, on the connection's own thread: its socket tells when the client has gone
        int status = 500, fd = conn_fd(c);
        char *out = NULL;
        kvt_embd_answer(h->embedder, h->tok, h->model_id, rt->id == R_EMBD_OAI, cn->body, cn->len,
                        fd >= 0 ? embd_client_gone : NULL, &fd, &status, &out);
        if (status == 503) atomic_fetch_add(&h->embd_cancelled, 1);
        return send_body(h, c, status, out, k_json, NULL, NULL);
    }
    case R_SLOTS:
        return send_error(h, c, 501, "not_supported_error", "GET /slots is not supported by kvtier: requests are not "
                          "bound to slots (the sequences share one prefix cache); GET /metrics has the engine's state");
    default: return answer_health(h, c);
    }
}

// The end of a request, however it ended: a client gone before its job finished cancels it.
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode code) {
    kvt_http *h = cls;
    (void)c;
    conn *cn = *con_cls;
    if (!cn) return;
    if (cn->job) {
        if (code != MHD_REQUEST_TERMINATED_COMPLETED_OK) atomic_fetch_add(&h->streams_cancelled, 1);
        kvt_http_job_abandon(cn->job);
        kvt_http_job_unref(cn->job);
        atomic_fetch_sub(&h->open_jobs, 1);
    }
    free(cn->body);
    free(cn);
    *con_cls = NULL;
}

static void free_dry_default(kvt_http *h) {
    for (size_t i = 0; h->dry_default && i < h->defaults.n_dry_breakers; i++) free((char *)h->dry_default[i].s);
    free(h->dry_default);
    h->dry_default = NULL;
}

kvt_status kvt_http_start(const kvt_http_params *p, kvt_http **out, kvt_err *err) {
    *out = NULL;
    kvt_http *h = calloc(1, sizeof *h);
    if (!h) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the server");
    pthread_mutex_init(&h->dry_mu, NULL); // (no resource to release on the error paths below)
    pthread_mutex_init(&h->gvocab_mu, NULL);
    h->p = *p;
    h->defaults = p->defaults ? *p->defaults : kvt_req_defaults_llama();
    h->p.defaults = NULL;
    const size_t nb = h->defaults.dry_breakers ? h->defaults.n_dry_breakers : 0;
    if (h->defaults.dry_breakers) { // the server's own copy (an empty set is a set: no breaker)
        bool ok = (h->dry_default = calloc(nb + 1, sizeof *h->dry_default)) != NULL;
        for (size_t i = 0; ok && i < nb; i++) {
            const kvt_req_text *t = &h->defaults.dry_breakers[i];
            char *c = malloc(t->len + 1);
            if ((ok = c != NULL)) memcpy(c, t->s, t->len), c[t->len] = 0;
            h->dry_default[i] = (kvt_req_text){c, t->len};
        }
        h->defaults.dry_breakers = h->dry_default;
        if (!ok) {
            free_dry_default(h);
            free(h);
            return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the server");
        }
    }
    if (!h->p.max_body) h->p.max_body = DEFAULT_MAX_BODY;
    if (!h->p.max_connections) h->p.max_connections = 256;
    if (!h->p.timeout_s) h->p.timeout_s = 600;
    h->listen_fd = -1;
    h->started = (int64_t)time(NULL);
    if (p->api_key && !(h->api_key = strdup(p->api_key))) {
        free_dry_default(h);
        free(h);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the server");
    }
    const char *host = p->host ? p->host : "127.0.0.1";
    char port[16];
    snprintf(port, sizeof port, "%d", p->port);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai || !ai) {
        free(h->api_key);
        free_dry_default(h);
        free(h);
        return kvt_errorf(err, KVT_ERR_IO, "cannot resolve --host %s: %s", host, gai_strerror(gai));
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    // the listening socket keeps libmicrohttpd's default, SO_REUSEADDR (a restart binds through TIME_WAIT), not
    // SO_REUSEPORT: with it a second server on the same port started too and the kernel split the connections between
    // the two (each with its own model and prefix cache), where llama-server's second instance fails to bind
    h->d = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)h->p.max_connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)h->p.timeout_s,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d) {
        free(h->api_key);
        free_dry_default(h);
        free(h);
        return kvt_errorf(err, KVT_ERR_IO, "cannot listen on %s:%d (address in use, or not an address of this machine?)",
                          host, p->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : p->port;
    *out = h;
    return KVT_OK;
}

int kvt_http_port(const kvt_http *h) { return h->port; }

void kvt_http_set_ready(kvt_http *h, kvt_engine *e, const kvt_tokenizer *tok, const kvt_chat_template *tmpl,
                        const char *model_id) {
    h->engine = e;
    h->tok = tok;
    h->tmpl = tmpl;
    h->model_id = strdup(model_id ? model_id : "model");
    atomic_store(&h->ready, true);
}

void kvt_http_set_embedder(kvt_http *h, kvt_embedder *e) { h->embedder = e; }

void kvt_http_set_info(kvt_http *h, const char *model_path, const char *chat_template, size_t chat_template_len,
                       const kvt_resp_model_meta *meta) {
    h->has_meta = meta != NULL;
    if (meta) h->meta = *meta;
    free(h->model_path);
    free(h->chat_template_src);
    h->model_path = model_path ? strdup(model_path) : NULL;
    h->chat_template_src = chat_template ? strndup(chat_template, chat_template_len) : NULL;
}

void kvt_http_quiesce(kvt_http *h) {
    atomic_store(&h->stopping, true);
    if (h->listen_fd < 0) h->listen_fd = (int)MHD_quiesce_daemon(h->d);
}

bool kvt_http_drain(kvt_http *h, int64_t timeout_ms) {
    const double t_end = kvt_time_ms() + (double)timeout_ms;
    while (h && atomic_load(&h->open_jobs) > 0) {
        if (kvt_time_ms() >= t_end) return false;
        const struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return true;
}

void kvt_http_stop(kvt_http *h) {
    if (!h) return;
    atomic_store(&h->stopping, true);
    MHD_stop_daemon(h->d);
    if (h->listen_fd >= 0) close(h->listen_fd);
    free(h->api_key);
    free(h->model_id);
    free(h->model_path);
    free(h->chat_template_src);
    kvt_dry_breakers_free(h->dry_cached);
    free(h->dry_key);
    free_dry_default(h);
    pthread_mutex_destroy(&h->dry_mu);
    kvt_grammar_vocab_free(h->gvocab);
    pthread_mutex_destroy(&h->gvocab_mu);
    free(h);
}
