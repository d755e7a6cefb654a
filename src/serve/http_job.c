// http_job.c - the engine's callbacks for one request turned into OpenAI responses and stream chunks.
#include "http_job.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/timer.h"
#include "anthropic.h"
#include "native.h"
#include "response.h"
#include "responses_api.h"
#include "sse.h"
#include "stop.h"
#include "utf8_stream.h"

// A growable byte buffer.
typedef struct {
    char *p;
    size_t len, cap;
} bytes;

static bool bytes_add(bytes *b, const void *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

// One generated position of a choice with logprobs: the token's bytes and its alternatives.
typedef struct {
    kvt_resp_logprob lp;
    kvt_resp_alt alts[KVT_ENGINE_MAX_TOP];
    char *chosen_bytes;            // owned; alts[i].token are owned too
} lp_entry;

// The response's view of entry e: lp with its alternatives pointing into e (not stored in e: the entries move when
// their array grows).
static kvt_resp_logprob lp_view(const lp_entry *e) {
    kvt_resp_logprob v = e->lp;
    v.top = e->alts;
    return v;
}

typedef struct {
    kvt_utf8_stream u8;
    kvt_stop *stop;
    bool stopped;                  // a stop string matched
    bool role_sent;                // chat stream: the first chunk carried the role
    bytes text;                    // whole response: the choice's text
    lp_entry *lps;                 // logprobs of the positions (whole response), or of the current chunk (stream)
    size_t n_lps, cap_lps;
    const char *finish;
    // llama-server's /completion (KVT_REQ_NATIVE)
    bytes pend;                    // a stream: the text emitted for the current token
    int32_t *ids;                  // return_tokens: the generated ids (end-of-generation included, as llama-server)
    size_t n_ids, cap_ids;
    int64_t n_gen, raw_len;        // tokens seen; bytes of their pieces (a position's offset in the raw text)
    size_t which;                  // the stop string that matched (stopped)
    bool nl;                       // a stream: a newline was sent
    // n_indent / t_max_predict_ms (llama-server's limits for editors): the pieces' bytes (n_indent only), whether a
    // piece held a newline, the offset after the newline whose line is checked next (0: none yet), where the answer
    // was cut (the raw offset; -1: not), and whether a limit ended it (stop_type "limit")
    bytes raw;
    bool gen_nl;
    size_t line_at;
    int64_t cut_at;
    bool limit;
    bool block;                    // an Anthropic stream: the text block was opened (content_block_start sent);
                                   // a Responses stream: the message item and its part (output_item.added sent)
} choice;

struct kvt_http_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    kvt_request *req;
    kvt_dry_breakers *dry; // a reference to the DRY breakers' table of the job's samplers (NULL: none)
    kvt_grammar *grammar;  // a reference to the compiled grammar of the job's samplers (NULL: none)
    const kvt_request_params *p;
    const kvt_tokenizer *tok;
    char *model;
    char id[48];
    int64_t created;
    kvt_engine *engine;
    uint64_t job_id;
    bool submitted, done, failed_oom, hung_up;
    bool started;                  // an Anthropic stream: message_start was sent (Responses: response.created)
    int64_t t_submit, t_first, t_done; // kvt_time_ns when the job was made (the request parsed, then submitted), at the first
                                       // generated token (0: none yet), at on_done
    kvt_engine_result res;
    choice *ch;
    bytes out;                     // streamed SSE bytes not yet read
    size_t out_pos;
    char *piece;                   // scratch: a token's bytes
    size_t piece_cap;
    char *prompt_text;             // native: the prompt's text (kvt_http_job_set_native)
    size_t prompt_len;
    uint64_t seed;
    int64_t n_prompt;
};

static const char *k_empty = "";

static void lps_clear(choice *c) {
    for (size_t i = 0; i < c->n_lps; i++) {
        free(c->lps[i].chosen_bytes);
        for (size_t k = 0; k < c->lps[i].lp.n_top; k++) free((char *)c->lps[i].alts[k].token);
    }
    c->n_lps = 0;
}

kvt_http_job *kvt_http_job_create(kvt_request *req, const kvt_tokenizer *tok, const char *model, uint64_t serial,
                                  int refs) {
    kvt_http_job *j = calloc(1, sizeof *j);
    const kvt_request_params *p = kvt_request_get(req);
    if (j) j->ch = calloc((size_t)p->n, sizeof *j->ch);
    if (j) j->model = strdup(model ? model : k_empty);
    bool ok = j && j->ch && j->model;
    for (int32_t i = 0; ok && i < p->n; i++) {
        ok = kvt_stop_create(p->stop, p->n_stop, &j->ch[i].stop, NULL) == KVT_OK;
        j->ch[i].cut_at = -1;
    }
    if (!ok) {
        if (j) {
            for (int32_t i = 0; j->ch && i < p->n; i++) kvt_stop_free(j->ch[i].stop);
            free(j->ch);
            free(j->model);
        }
        free(j);
        kvt_request_free(req);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = refs;
    j->req = req;
    j->p = p;
    j->tok = tok;
    j->created = (int64_t)time(NULL);
    j->t_submit = kvt_time_ns();
    const char *prefix = p->api == KVT_API_ANTHROPIC ? "msg_" : p->api == KVT_API_RESPONSES ? "resp_"
                         : p->kind == KVT_REQ_CHAT       ? "chatcmpl-"
                                                         : "cmpl-";
    snprintf(j->id, sizeof j->id, "%s%llu", prefix, (unsigned long long)serial);
    return j;
}

void kvt_http_job_unref(kvt_http_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    for (int32_t i = 0; i < j->p->n; i++) {
        lps_clear(&j->ch[i]);
        free(j->ch[i].lps);
        free(j->ch[i].text.p);
        free(j->ch[i].pend.p);
        free(j->ch[i].ids);
        free(j->ch[i].raw.p);
        kvt_stop_free(j->ch[i].stop);
    }
    free(j->ch);
    free(j->out.p);
    free(j->piece);
    free(j->prompt_text);
    free(j->model);
    kvt_request_free(j->req);
    kvt_dry_breakers_free(j->dry);
    kvt_grammar_free(j->grammar);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

const kvt_request_params *kvt_http_job_params(const kvt_http_job *j) { return j->p; }

void kvt_http_job_set_dry(kvt_http_job *j, kvt_dry_breakers *b) {
    kvt_dry_breakers_free(j->dry);
    j->dry = b;
}

void kvt_http_job_set_grammar(kvt_http_job *j, kvt_grammar *g) {
    kvt_grammar_free(j->grammar);
    j->grammar = g;
}

void kvt_http_job_set_native(kvt_http_job *j, char *prompt_text, size_t prompt_len, uint64_t seed, int64_t n_prompt) {
    j->prompt_text = prompt_text;
    j->prompt_len = prompt_len;
    j->seed = seed;
    j->n_prompt = n_prompt;
}

void kvt_http_job_set_n_prompt(kvt_http_job *j, int64_t n_prompt) { j->n_prompt = n_prompt; }

void kvt_http_job_set_id(kvt_http_job *j, kvt_engine *e, uint64_t id) {
    pthread_mutex_lock(&j->mu);
    j->engine = e;
    j->job_id = id;
    j->submitted = true;
    pthread_mutex_unlock(&j->mu);
}

void kvt_http_job_abandon(kvt_http_job *j) {
    pthread_mutex_lock(&j->mu);
    bool cancel = j->submitted && !j->done;
    pthread_mutex_unlock(&j->mu);
    if (cancel) kvt_engine_cancel(j->engine, j->job_id);
}

// The bytes of token id into j->piece (grown); -1 when out of memory.
static int64_t piece_of(kvt_http_job *j, int32_t id) {
    for (;;) {
        int64_t n = kvt_token_to_piece(j->tok, id, j->piece, (int64_t)j->piece_cap);
        if (n <= (int64_t)j->piece_cap) return n;
        char *p = realloc(j->piece, (size_t)n);
        if (!p) return -1;
        j->piece = p;
        j->piece_cap = (size_t)n;
    }
}

// Appends one SSE event with the JSON text json[0..jl) (NULL: out of memory; freed) to the stream (j->mu held).
static void push_event(kvt_http_job *j, char *json, size_t jl) {
    char *ev = NULL;
    size_t el = 0;
    if (!json || kvt_sse_frame(json, jl, &ev, &el, NULL) || !bytes_add(&j->out, ev, el)) j->failed_oom = true;
    free(json);
    free(ev);
    pthread_cond_broadcast(&j->cv);
}

// Appends one SSE event with r's JSON to the stream (j->mu held).
static void stream_event(kvt_http_job *j, const kvt_resp *r) {
    char *json = NULL;
    size_t jl = 0;
    kvt_resp_json(r, &json, &jl, NULL);
    push_event(j, json, jl);
}

static kvt_resp resp_of(const kvt_http_job *j, bool chunk, const kvt_resp_choice *choices, size_t n,
                        const kvt_resp_usage *usage) {
    kvt_resp r = {j->p->kind, chunk, j->id, j->model, j->created, choices, n, usage, chunk && j->p->include_usage, NULL};
    return r;
}

// The request's timings (kvt_resp_timings) once it is done; under j->mu.
static kvt_resp_timings timings_of(const kvt_http_job *j) {
    const kvt_engine_result *r = &j->res;
    const int64_t first = j->t_first ? j->t_first : j->t_done;
    const kvt_sparse_totals *sp = &r->sparse_steps;
    return (kvt_resp_timings){r->prompt_tokens - r->cached_tokens, r->cached_tokens, r->completion_tokens,
                              (double)(first - j->t_submit) / 1e6, (double)(j->t_done - first) / 1e6,
                              r->sparse, sp->steps, sp->selected, sp->context, sp->kv_read_bytes,
                              sp->summary_read_bytes, sp->stall_ms, sp->wait_ms};
}

// What an Anthropic answer tells of choice 0 so far (the usage's counts once the job is done).
static kvt_anthropic_msg anthropic_of(const kvt_http_job *j) {
    const choice *c = &j->ch[0];
    const kvt_request_params *p = j->p;
    kvt_anthropic_msg m = {.id = j->id, .model = j->model, .text = c->text.p ? c->text.p : k_empty,
                           .len = c->text.len, .input_tokens = j->done ? j->res.prompt_tokens : j->n_prompt,
                           .cached_tokens = j->done ? j->res.cached_tokens : 0,
                           .output_tokens = j->res.completion_tokens};
    m.stop_reason = c->stopped ? "stop_sequence" : c->finish && !strcmp(c->finish, "length") ? "max_tokens" : "end_turn";
    if (c->stopped && c->which < p->n_stop) m.stop_sequence = p->stop[c->which];
    return m;
}

// Appends a named stream event ev[0..n) (NULL: out of memory; freed) (j->mu held).
static void named_push(kvt_http_job *j, char *ev, size_t n) {
    if (!ev || !bytes_add(&j->out, ev, n)) j->failed_oom = true;
    free(ev);
    pthread_cond_broadcast(&j->cv);
}

// Appends an Anthropic stream event (j->mu held).
static void anthropic_push(kvt_http_job *j, kvt_anthropic_event_kind kind, const kvt_anthropic_msg *m) {
    size_t n = 0;
    char *ev = kvt_anthropic_event(kind, m, &n);
    named_push(j, ev, n);
}

// An Anthropic stream's message_start, once (j->mu held).
static void anthropic_start(kvt_http_job *j) {
    if (j->started) return;
    j->started = true;
    kvt_anthropic_msg m = anthropic_of(j);
    anthropic_push(j, KVT_ANTHROPIC_MESSAGE_START, &m);
}

// An Anthropic stream's text: the block opened before its first piece, then a delta per piece (j->mu held).
static void anthropic_piece(kvt_http_job *j, int32_t i, const char *text, size_t n) {
    if (!n) return;
    kvt_anthropic_msg m = anthropic_of(j);
    m.text = text;
    m.len = n;
    anthropic_start(j);
    if (!j->ch[i].block) anthropic_push(j, KVT_ANTHROPIC_BLOCK_START, &m);
    j->ch[i].block = true;
    anthropic_push(j, KVT_ANTHROPIC_BLOCK_DELTA, &m);
}

// The end of an Anthropic stream: the block closed, the stop reason and output tokens, message_stop (j->mu held).
static void anthropic_end(kvt_http_job *j) {
    anthropic_start(j);
    kvt_anthropic_msg m = anthropic_of(j);
    if (j->ch[0].block) anthropic_push(j, KVT_ANTHROPIC_BLOCK_STOP, &m);
    anthropic_push(j, KVT_ANTHROPIC_MESSAGE_DELTA, &m);
    anthropic_push(j, KVT_ANTHROPIC_MESSAGE_STOP, &m);
}

// What an OpenAI Responses answer tells of choice 0 so far (msg_id: a buffer of 48 bytes for the item's id).
static kvt_oairesp oairesp_of(const kvt_http_job *j, char *msg_id) {
    const choice *c = &j->ch[0];
    snprintf(msg_id, 48, "msg_%s", j->id + strlen("resp_"));
    return (kvt_oairesp){j->id, msg_id, j->model, j->created, (int64_t)time(NULL), c->text.p ? c->text.p : k_empty,
                         c->text.len, j->done ? j->res.prompt_tokens : j->n_prompt, j->res.cached_tokens,
                         j->res.completion_tokens, NULL};
}

// Appends an OpenAI Responses stream event (j->mu held).
static void oairesp_push(kvt_http_job *j, kvt_oairesp_event_kind kind, const kvt_oairesp *r) {
    size_t n = 0;
    char *ev = kvt_oairesp_event(kind, r, &n);
    named_push(j, ev, n);
}

// A Responses stream's response.created and response.in_progress, once (j->mu held).
static void oairesp_start(kvt_http_job *j) {
    if (j->started) return;
    j->started = true;
    char msg_id[48];
    const kvt_oairesp r = oairesp_of(j, msg_id);
    oairesp_push(j, KVT_OAIRESP_CREATED, &r);
    oairesp_push(j, KVT_OAIRESP_IN_PROGRESS, &r);
}

// A Responses stream's text: the message item and its part opened before the first piece, then a delta per piece;
// the text is kept for the closing events (j->mu held).
static void oairesp_piece(kvt_http_job *j, const char *text, size_t n) {
    if (!n) return;
    choice *c = &j->ch[0];
    oairesp_start(j);
    char msg_id[48];
    kvt_oairesp r = oairesp_of(j, msg_id);
    if (!c->block) {
        oairesp_push(j, KVT_OAIRESP_ITEM_ADDED, &r);
        oairesp_push(j, KVT_OAIRESP_PART_ADDED, &r);
    }
    c->block = true;
    r.text = text;
    r.len = n;
    oairesp_push(j, KVT_OAIRESP_TEXT_DELTA, &r);
    if (!bytes_add(&c->text, text, n)) j->failed_oom = true;
}

// The end of a Responses stream: the text, its part and its item done (when there was text), response.completed.
static void oairesp_end(kvt_http_job *j) {
    oairesp_start(j);
    char msg_id[48];
    kvt_oairesp r = oairesp_of(j, msg_id);
    const kvt_resp_timings t = timings_of(j);
    r.timings = &t;
    if (r.len) {
        oairesp_push(j, KVT_OAIRESP_TEXT_DONE, &r);
        oairesp_push(j, KVT_OAIRESP_PART_DONE, &r);
        oairesp_push(j, KVT_OAIRESP_ITEM_DONE, &r);
    }
    oairesp_push(j, KVT_OAIRESP_COMPLETED, &r);
}

// Streams text[0..n) (and the logprobs gathered since the last chunk) of choice i, with finish when non-NULL.
static void stream_piece(kvt_http_job *j, int32_t i, const char *text, size_t n, const char *finish) {
    choice *c = &j->ch[i];
    if (j->p->kind == KVT_REQ_NATIVE) { // one event per token, sent by on_token (native_partial)
        if (!bytes_add(&c->pend, text, n)) j->failed_oom = true;
        return;
    }
    if (j->p->api == KVT_API_ANTHROPIC) {
        anthropic_piece(j, i, text, n);
        return;
    }
    if (j->p->api == KVT_API_RESPONSES) {
        oairesp_piece(j, text, n);
        return;
    }
    bool lp = j->p->logprobs && c->n_lps > 0;
    if (!n && !finish && !lp && (c->role_sent || j->p->kind != KVT_REQ_CHAT)) return;
    size_t n_lps = c->n_lps;
    kvt_resp_logprob *lps = malloc((n_lps + 1) * sizeof *lps);
    if (!lps) {
        j->failed_oom = true;
        return;
    }
    for (size_t k = 0; k < n_lps; k++) lps[k] = lp_view(&c->lps[k]);
    kvt_resp_choice rc = {i, text ? text : k_empty, n, finish, lp, lps, n_lps, !c->role_sent};
    if (j->p->kind == KVT_REQ_CHAT && finish && !n) rc.text = NULL; // the closing chunk has an empty delta
    c->role_sent = true;
    kvt_resp r = resp_of(j, true, &rc, 1, NULL);
    stream_event(j, &r);
    free(lps);
    lps_clear(c);
}

// Passes bytes of choice i through the UTF-8 buffer and the stop strings; returns false on a stop match.
static bool emit_text(kvt_http_job *j, int32_t i, const char *s, size_t n, bool flush, const char *finish) {
    choice *c = &j->ch[i];
    char small[256];
    char *u = KVT_UTF8_OUT_MAX(n) <= sizeof small ? small : malloc(KVT_UTF8_OUT_MAX(n));
    if (!u) {
        j->failed_oom = true;
        return false;
    }
    size_t un = n ? kvt_utf8_stream_push(&c->u8, s, n, u) : 0;
    if (flush) un += kvt_utf8_stream_flush(&c->u8, u + un);
    const char *emit = NULL;
    size_t elen = 0;
    bool matched = false;
    if (!c->stopped) {
        kvt_err err = {0};
        matched = kvt_stop_feed(c->stop, u, un, &emit, &elen, &c->which, &err);
        if (!matched && err.status) j->failed_oom = true;
    }
    bytes tail = {0};
    if (!c->stopped && !matched && flush) { // the end: what the stop strings held back goes out too
        const char *h;
        size_t hl;
        if (!bytes_add(&tail, emit, elen)) j->failed_oom = true;
        kvt_stop_flush(c->stop, &h, &hl);
        if (!bytes_add(&tail, h, hl)) j->failed_oom = true;
        emit = tail.p;
        elen = tail.len;
    }
    if (c->stopped) elen = 0;
    if (matched) c->stopped = true;
    if (j->p->stream) stream_piece(j, i, emit, elen, finish);
    else if (!bytes_add(&c->text, emit, elen)) j->failed_oom = true;
    free(tail.p);
    if (u != small) free(u);
    return !matched;
}

// A copy of the bytes of token id as an alternative.
static bool alt_of(kvt_http_job *j, int32_t id, float logprob, kvt_resp_alt *a) {
    int64_t n = piece_of(j, id);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s) return false;
    if (n > 0) memcpy(s, j->piece, (size_t)n); // (j->piece is still NULL while every piece so far was empty)
    a->token = s;
    a->len = (size_t)n;
    a->logprob = logprob;
    a->id = id;
    return true;
}

// arr (n elements of size elem used of *cap) with room for one more: arr itself or a larger copy (*cap doubled, or
// first at first); NULL when out of memory (arr is then unchanged).
static void *grow(void *arr, size_t n, size_t *cap, size_t elem, size_t first) {
    if (n < *cap) return arr;
    size_t c = *cap ? 2 * *cap : first;
    void *p = realloc(arr, c * elem);
    if (p) *cap = c;
    return p;
}

static bool record_logprobs(kvt_http_job *j, choice *c, const kvt_engine_token *t) {
    lp_entry *lps = grow(c->lps, c->n_lps, &c->cap_lps, sizeof *lps, 16);
    if (!lps) return false;
    c->lps = lps;
    lp_entry *e = &c->lps[c->n_lps];
    memset(e, 0, sizeof *e);
    if (!alt_of(j, t->id, t->logprob, &e->lp.chosen)) return false;
    e->chosen_bytes = (char *)e->lp.chosen.token;
    for (int32_t k = 0; k < t->n_top && k < j->p->top_logprobs; k++) {
        if (!alt_of(j, t->top_ids[k], t->top_logprobs[k], &e->alts[k])) return false;
        e->lp.n_top++;
    }
    e->lp.text_offset = (int64_t)c->text.len; // completions: where the token's text begins (non-stream)
    if (j->p->kind == KVT_REQ_NATIVE) e->lp.text_offset = c->raw_len; // its offset in the generated bytes
    c->n_lps++;
    return true;
}

// A native stream's event for one token (has_id) or for the text held back until the end: the text emitted since
// the last event and the token's probabilities (j->mu held).
static void native_partial(kvt_http_job *j, int32_t i, int32_t id, bool has_id) {
    choice *c = &j->ch[i];
    kvt_resp_logprob *lps = malloc((c->n_lps + 1) * sizeof *lps);
    if (!lps) {
        j->failed_oom = true;
        return;
    }
    for (size_t k = 0; k < c->n_lps; k++) lps[k] = lp_view(&c->lps[k]);
    if (c->pend.len && memchr(c->pend.p, '\n', c->pend.len)) c->nl = true;
    kvt_native_resp r = {.content = c->pend.p ? c->pend.p : k_empty, .len = c->pend.len, .tokens = &id,
                         .n_tokens = has_id, .probs = lps, .n_probs = c->n_lps,
                         .has_probs = j->p->logprobs && c->n_lps > 0,
                         .post_sampling = j->p->native && j->p->native->post_sampling_probs, .tokens_predicted = c->n_gen,
                         .tokens_evaluated = j->n_prompt};
    char *json = NULL;
    size_t jl = 0;
    kvt_native_resp_json(&r, &json, &jl, NULL);
    push_event(j, json, jl);
    free(lps);
    lps_clear(c);
    c->pend.len = 0;
}

// Native bookkeeping of a token before its text: its id (return_tokens), the count; false when out of memory.
static bool native_token(kvt_http_job *j, choice *c, int32_t id) {
    c->n_gen++;
    if (!j->p->native || !j->p->native->return_tokens || j->p->stream) return true;
    int32_t *ids = grow(c->ids, c->n_ids, &c->cap_ids, sizeof *ids, 64);
    if (!ids) return false;
    c->ids = ids;
    c->ids[c->n_ids++] = id;
    return true;
}

// llama-server's limits of an editor's request after a token whose bytes were piece[0..n) (j->mu held): n_indent (a
// line after the first newline indented less than n_indent spaces or tabs ends the answer before its text, checked a
// token behind, as llama-server checks it) and t_max_predict_ms (a newline after that long since the first token).
// False when the answer ends here.
static bool editor_limits(kvt_http_job *j, choice *c, const char *piece, int64_t n) {
    const kvt_request_params *x = j->p;
    if (x->n_indent <= 0 && x->t_max_predict_ms <= 0) return true;
    bool go = true;
    if (x->n_indent > 0) {
        if (n > 0 && !bytes_add(&c->raw, piece, (size_t)n)) j->failed_oom = true;
        if (c->gen_nl && c->line_at > 0) {
            size_t pos = c->line_at;
            int32_t ind = 0;
            while (pos < c->raw.len && (c->raw.p[pos] == ' ' || c->raw.p[pos] == '\t')) ind++, pos++;
            if (pos < c->raw.len && ind < x->n_indent) {
                c->cut_at = (int64_t)pos;
                go = false;
            }
        }
        if (c->gen_nl && c->line_at < c->raw.len) {
            const char *nl = memchr(c->raw.p + c->line_at, '\n', c->raw.len - c->line_at);
            if (nl) c->line_at = (size_t)(nl - c->raw.p) + 1;
        }
    }
    if (n > 0 && memchr(piece, '\n', (size_t)n)) {
        c->gen_nl = true;
        if (x->t_max_predict_ms > 0 && (kvt_time_ns() - j->t_first) / 1000000 > x->t_max_predict_ms) go = false;
    }
    if (!go) c->limit = true;
    return go;
}

static bool on_token(void *user, int32_t i, const kvt_engine_token *t) {
    kvt_http_job *j = user;
    pthread_mutex_lock(&j->mu);
    choice *c = &j->ch[i];
    const bool native = j->p->kind == KVT_REQ_NATIVE;
    if (!j->t_first) j->t_first = kvt_time_ns();
    if (j->p->api == KVT_API_ANTHROPIC && j->p->stream) anthropic_start(j); // with the first token, as llama-server
    if (j->p->api == KVT_API_RESPONSES && j->p->stream) oairesp_start(j);
    bool go = !c->stopped && !j->failed_oom;
    const bool live = go;
    if (go && native && !native_token(j, c, t->id)) j->failed_oom = true;
    if (go && !t->eog) {
        if (j->p->logprobs && !record_logprobs(j, c, t)) j->failed_oom = true;
        int64_t n = piece_of(j, t->id);
        if (n < 0) j->failed_oom = true;
        else go = emit_text(j, i, j->piece, (size_t)n, false, NULL);
        c->raw_len += n > 0 ? n : 0;
        if (go && n >= 0) go = editor_limits(j, c, j->piece, n);
    } else if (go) {
        // an end-of-generation token has probabilities too (its token ""), in llama-server's answers but for a /v1
        // stream's (no chunk carries it there)
        if (j->p->logprobs && (native || !j->p->stream) && !record_logprobs(j, c, t)) j->failed_oom = true;
        editor_limits(j, c, NULL, 0); // an end-of-generation token has no text, but the indent check runs (a cut
        c->limit = false;             // stands; the stop stays "eos", as llama-server's end-of-generation check is last)
    }
    if (native && j->p->stream && live && !j->failed_oom) native_partial(j, i, t->id, true);
    go = go && !j->failed_oom;
    pthread_mutex_unlock(&j->mu);
    return go;
}

static void on_finish(void *user, int32_t i, kvt_finish why) {
    kvt_http_job *j = user;
    pthread_mutex_lock(&j->mu);
    choice *c = &j->ch[i];
    c->finish = (why == KVT_FINISH_LENGTH && !c->stopped) || c->limit ? "length" : "stop"; // a limit: llama-server's
    emit_text(j, i, NULL, 0, true, c->finish);
    if (c->cut_at >= 0 && !j->p->stream) { // n_indent: the answer without the short line's text (a stream sent it)
        // (logprobs keep the cut positions, as llama-server's; the text alone loses them)
        const size_t drop = c->raw.len - (size_t)c->cut_at;
        if (c->text.len >= drop) c->text.len -= drop;
    }
    if (j->p->kind == KVT_REQ_NATIVE && j->p->stream && c->pend.len) native_partial(j, i, 0, false); // the held-back text
    pthread_mutex_unlock(&j->mu);
}

static void stream_error(kvt_http_job *j, int status, const char *type, const char *msg) {
    kvt_api_error ae;
    kvt_api_errorf(&ae, status, type, NULL, "%s", msg);
    char *json = kvt_api_error_json(&ae), *ev = NULL;
    size_t el = 0;
    if (j->p->api == KVT_API_ANTHROPIC) { // Anthropic's event "error"
        ev = kvt_anthropic_error_event(json, &el);
        json = NULL;
        if (ev) bytes_add(&j->out, ev, el);
    } else if (json && !kvt_sse_frame(json, strlen(json), &ev, &el, NULL)) bytes_add(&j->out, ev, el);
    free(json);
    free(ev);
}

// The native summary of choice 0 (the only one) as JSON text, *len its length (may be NULL): the whole answer, or a
// stream's last event (its text and tokens went in the token events). NULL when out of memory (j->mu held, job done).
// completion_probabilities leave out the positions whose text begins after the end of a stop-string-cut content.
static char *native_summary(kvt_http_job *j, size_t *len) {
    const choice *c = &j->ch[0];
    const kvt_request_params *p = j->p;
    const bool stream = p->stream, length = c->finish && !strcmp(c->finish, "length");
    size_t n_lps = stream ? 0 : c->n_lps;
    while (c->stopped && n_lps > 0 && c->lps[n_lps - 1].lp.text_offset >= (int64_t)c->text.len) n_lps--;
    kvt_resp_logprob *lps = malloc((n_lps + 1) * sizeof *lps);
    if (!lps) return NULL;
    for (size_t k = 0; k < n_lps; k++) lps[k] = lp_view(&c->lps[k]);
    const kvt_resp_timings t = timings_of(j);
    const int64_t held = j->res.prompt_tokens + j->res.completion_tokens - 1; // the last token is never evaluated
    kvt_native_resp r = {
        .stop = true,
        .content = !stream && c->text.p ? c->text.p : k_empty,
        .len = stream ? 0 : c->text.len,
        .tokens = c->ids,
        .n_tokens = stream ? 0 : c->n_ids,
        .probs = lps,
        .n_probs = n_lps,
        .has_probs = n_lps > 0,
        .post_sampling = p->native && p->native->post_sampling_probs,
        .tokens_predicted = j->res.completion_tokens,
        .tokens_evaluated = j->res.prompt_tokens,
        .model = j->model,
        .prompt = j->prompt_text,
        .prompt_len = j->prompt_len,
        .params = p,
        .n_probs_asked = p->top_logprobs,
        .seed = j->seed,
        .has_new_line = stream ? c->nl : c->text.len && memchr(c->text.p, '\n', c->text.len),
        .truncated = length && !c->limit && (p->max_tokens < 0 || c->n_gen < p->max_tokens), // the context's end
        .stop_type = c->stopped ? "word" : length ? "limit" : "eos",
        .stopping_word = c->stopped && c->which < p->n_stop ? p->stop[c->which] : k_empty,
        .tokens_cached = held > 0 ? held : 0,
        .timings = &t,
        .fields = p->native ? p->native->response_fields : NULL,
        .n_fields = p->native ? p->native->n_response_fields : 0,
    };
    char *json = NULL;
    kvt_native_resp_json(&r, &json, len, NULL);
    free(lps);
    return json;
}


// A request that failed because of its grammar (the draws' KVT_ERR_INVALID_ARG: no token continues it, or it needs
// more parse stacks than the bound): the client's error, a 400 naming the grammar's field.
static bool grammar_failed(const kvt_http_job *j, const kvt_engine_result *r) {
    return j->p->grammar && r->err.status == KVT_ERR_INVALID_ARG && !strncmp(r->err.msg, "grammar", 7);
}

static void on_done(void *user, const kvt_engine_result *r) {
    kvt_http_job *j = user;
    pthread_mutex_lock(&j->mu);
    j->res = *r;
    j->done = true;
    j->t_done = kvt_time_ns();
    if (j->p->stream) {
        if (r->outcome == KVT_ENGINE_FAILED && grammar_failed(j, r))
            stream_error(j, 400, "invalid_request_error", r->err.msg);
        else if (r->outcome == KVT_ENGINE_FAILED) stream_error(j, 500, "server_error", r->err.msg);
        else if (r->outcome == KVT_ENGINE_CANCELLED) stream_error(j, 503, "unavailable_error", "the request was cancelled");
        else if (j->failed_oom) stream_error(j, 500, "server_error", "out of memory while streaming");
        else if (j->p->kind == KVT_REQ_NATIVE) {
            size_t jl = 0;
            char *json = native_summary(j, &jl);
            push_event(j, json, jl);
        } else if (j->p->api == KVT_API_ANTHROPIC) {
            anthropic_end(j);
        } else if (j->p->api == KVT_API_RESPONSES) {
            oairesp_end(j);
        } else if (j->p->include_usage) {
            kvt_resp_usage u = {r->prompt_tokens, r->completion_tokens, r->cached_tokens};
            const kvt_resp_timings t = timings_of(j);
            kvt_resp resp = resp_of(j, true, NULL, 0, &u);
            resp.timings = &t;
            stream_event(j, &resp);
        }
        if (j->p->kind != KVT_REQ_NATIVE && j->p->api == KVT_API_OPENAI) // llama-server: none for the others
            bytes_add(&j->out, KVT_SSE_DONE, strlen(KVT_SSE_DONE));
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    kvt_http_job_unref(j);
}

kvt_engine_callbacks kvt_http_job_callbacks(kvt_http_job *j) {
    kvt_engine_callbacks cb = {on_token, on_finish, on_done, j};
    return cb;
}

bool kvt_http_fd_hung_up(int fd) {
    struct pollfd pf = {fd, POLLRDHUP, 0};
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

// Waits (j->mu held) for a signal of the job; every 100 ms checks whether the client has hung up (fd < 0:
// not watched) and then cancels the job, whose on_done follows soon.
static void wait_or_hangup(kvt_http_job *j, int fd) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    if (pthread_cond_timedwait(&j->cv, &j->mu, &ts) != ETIMEDOUT || fd < 0 || j->hung_up) return;
    if (kvt_http_fd_hung_up(fd)) {
        j->hung_up = true;
        if (j->submitted && !j->done) kvt_engine_cancel(j->engine, j->job_id);
    }
}

ssize_t kvt_http_job_read(kvt_http_job *j, int fd, char *buf, size_t max) {
    pthread_mutex_lock(&j->mu);
    while (j->out_pos == j->out.len && !j->done) wait_or_hangup(j, fd);
    size_t n = j->out.len - j->out_pos;
    if (n > max) n = max;
    if (n) memcpy(buf, j->out.p + j->out_pos, n);
    j->out_pos += n;
    if (j->out_pos == j->out.len) j->out_pos = j->out.len = 0;
    pthread_mutex_unlock(&j->mu);
    return n ? (ssize_t)n : -1;
}

void kvt_http_job_body(kvt_http_job *j, int fd, int *status, char **body) {
    pthread_mutex_lock(&j->mu);
    while (!j->done) wait_or_hangup(j, fd);
    *body = NULL;
    if (j->res.outcome != KVT_ENGINE_DONE || j->failed_oom) {
        kvt_api_error ae;
        if (j->res.outcome == KVT_ENGINE_CANCELLED) {
            kvt_api_errorf(&ae, 503, "unavailable_error", NULL, "the request was cancelled (the server is stopping)");
        } else if (!j->failed_oom && grammar_failed(j, &j->res)) {
            kvt_api_errorf(&ae, 400, "invalid_request_error", j->p->grammar_field, "%s", j->res.err.msg);
        } else {
            kvt_api_errorf(&ae, 500, "server_error", NULL, "%s",
                           j->failed_oom ? "out of memory for the response" : j->res.err.msg);
        }
        *status = ae.http_status;
        *body = kvt_api_error_json(&ae);
        pthread_mutex_unlock(&j->mu);
        return;
    }
    if (j->p->kind == KVT_REQ_NATIVE || j->p->api != KVT_API_OPENAI) {
        if (j->p->kind == KVT_REQ_NATIVE) *body = native_summary(j, NULL);
        else if (j->p->api == KVT_API_ANTHROPIC) {
            const kvt_anthropic_msg m = anthropic_of(j);
            *body = kvt_anthropic_message_json(&m, NULL);
        } else {
            char msg_id[48];
            const kvt_oairesp r = oairesp_of(j, msg_id);
            *body = kvt_oairesp_json(&r, NULL);
        }
        *status = *body ? 200 : 500;
        pthread_mutex_unlock(&j->mu);
        return;
    }
    kvt_resp_choice *rc = calloc((size_t)j->p->n, sizeof *rc);
    kvt_resp_logprob **lps = calloc((size_t)j->p->n, sizeof *lps);
    *status = 500;
    if (rc && lps) {
        bool ok = true;
        for (int32_t i = 0; i < j->p->n; i++) {
            choice *c = &j->ch[i];
            lps[i] = malloc((c->n_lps + 1) * sizeof **lps);
            ok = ok && lps[i];
            for (size_t k = 0; ok && k < c->n_lps; k++) lps[i][k] = lp_view(&c->lps[k]);
            kvt_resp_choice one = {i, c->text.p ? c->text.p : k_empty, c->text.len, c->finish, j->p->logprobs, lps[i],
                                   c->n_lps, false};
            rc[i] = one;
        }
        kvt_resp_usage u = {j->res.prompt_tokens, j->res.completion_tokens, j->res.cached_tokens};
        const kvt_resp_timings t = timings_of(j);
        kvt_resp r = resp_of(j, false, rc, (size_t)j->p->n, &u);
        r.timings = &t;
        if (ok && !kvt_resp_json(&r, body, NULL, NULL)) *status = 200;
        for (int32_t i = 0; i < j->p->n; i++) free(lps[i]);
    }
    free(rc);
    free(lps);
    pthread_mutex_unlock(&j->mu);
}
