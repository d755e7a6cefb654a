// cmd_serve.c - `kvtier serve`: the OpenAI-compatible HTTP server (issue 12, docs/SERVING.md).
//
// Listens first (GET /health answers 503 "loading"), then loads the model, recognizes its chat template
// (or takes --chat-template), starts the engine (src/serve/engine.h: for now one context, one request at
// a time, first come first served) and serves until SIGINT/SIGTERM: then it stops accepting, cancels what
// runs, frees the context (the KV disk tier's file was unlinked at creation) and exits 0.
// --print-prompt FILE renders a /v1/chat/completions body with the chat template instead.
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gguf/gguf.h"
#include "../sched/scheduler.h"
#include "../serve/chat_template.h"
#include "../serve/embed.h"
#include "args.h"
#include "commands.h"
#include "common.h"
#ifdef KVT_HAVE_JANSSON
#include "../serve/request.h"
#endif
#if defined(KVT_HAVE_JANSSON) && defined(KVT_HAVE_MICROHTTPD)
#define KVT_SERVE_HTTP 1
#define KVT_SERVE_DRAIN_MS 30000 // on SIGINT/SIGTERM: how long the cancelled requests' responses may take to go out
#include "../serve/engine.h"
#include "../serve/http.h"
#include "../exec/session.h"
#include "../kv/kv_block_io.h"
#include "../kv/prefix_store.h"
#endif

static void usage(void) {
    printf("usage: kvtier serve -m MODEL [--host 127.0.0.1] [--port 8080] [-np N] [-c CTX] [--api-key KEY]\n"
           "                    [--metrics] [--chat-template NAME] [engine flags]\n"
           "  OpenAI-compatible HTTP server (docs/SERVING.md): GET /health, /v1/models, /metrics;\n"
           "  POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize, /v1/embeddings.\n"
           "  --host ADDR           address to listen on (default 127.0.0.1)\n"
           "  --port N              port (default 8080; 0: any free port, printed on stderr)\n"
           "  -np, --parallel N     sequences decoding at once (default 4): requests join and leave a\n"
           "                        running batch between iterations; n choices take n sequences\n"
           "  --batch-tokens N      rows of one iteration, decode rows plus prompt chunks (default: --ubatch)\n"
           "  --lookahead N         iterations of the scheduler's plan given to the KV store for prefetch and\n"
           "                        eviction (default 4; 0: none, the store's --kv-evict policy alone)\n"
           "  --kv-cache-dir DIR    the prefix cache's full blocks also go to files in DIR (checksummed, model\n"
           "                        identity checked), so a restarted server reuses them; --kv-cache-max BYTES\n"
           "                        bounds DIR (least recently used entries removed)\n"
           "  --kv-remote URL       the same on a Redis/Valkey server shared by several servers:\n"
           "                        redis://HOST[:PORT] or unix:///PATH (a missing, corrupt or unreachable entry\n"
           "                        is recomputed, never an error); with --kv-cache-dir, the directory is looked\n"
           "                        up first and keeps a copy of what the server gives\n"
           "  --kv-fetch-max BYTES  a new request's prefix blocks found there are read in the background and\n"
           "                        staged in host memory, at most BYTES at once, while other requests keep\n"
           "                        decoding; it is admitted when they are in (default 256M; 0: admission\n"
           "                        reads the store itself)\n"
           "  --kv-fetch-wait MS    admit a request whose background read is still running after MS ms\n"
           "                        without it (admission then reads the store; default 2000)\n"
           "  --kv-cache-queries BYTES  with --sparse asyncspade: the prefix cache keeps the last --sparse-window + 1\n"
           "                        queries of each prompt (1.2 MB for SmolLM2-135M), so that a hit recomputes the\n"
           "                        prompt's last tokens only, as dense does, not the window's (default 64M, least\n"
           "                        recently used dropped first; 0: none)\n"
           "  --kv-cache-keys BYTES  with --sparse quest or asyncspade: the prefix cache keeps the key summaries of\n"
           "                        each finished request's prompt (or takes them from a running one, for a hit\n"
           "                        that arrives before it ends), so that a hit shares them instead of reading\n"
           "                        its cached keys back to summarize them again (default 512M, least recently\n"
           "                        used dropped first; 0: none)\n"
           "  --kv-warm N           while idle, keep room for N more positions of a sequence made and faulted in\n"
           "                        ahead of use in the fast (and host) tier, within their budgets, so that the\n"
           "                        next requests do not pay the first touches of new memory (default: one\n"
           "                        context, -c, at most 512 MiB a tier; 0: none; /metrics kvtier_kv_warm_bytes_total);\n"
           "                        with --sparse quest|asyncspade, then key summary buffers for rooms of N, N/2,\n"
           "                        ... positions (kvtier_sparse_summary_warm_bytes_total)\n"
           "  --no-preempt          never swap a running request out (by default, with a disk tier below bounded\n"
           "                        fast and host tiers, the latest-admitted request is swapped out to disk\n"
           "                        when fast + host cannot hold the running ones, and resumed exactly later)\n"
           "  --api-key KEY         require \"Authorization: Bearer KEY\" (all but /health)\n"
           "  --metrics             serve GET /metrics (Prometheus text)\n"
           "  --embeddings, --embedding  serve POST /v1/embeddings, /embeddings, /embedding (else 501): the\n"
           "                        hidden states after the output norm, pooled, unit length unless embd_normalize\n"
           "                        says otherwise; computed on a context of their own (a KV of -c positions)\n"
           "  --pooling TYPE        mean, cls, last or none (one vector per token: /embeddings only); default: the\n"
           "                        GGUF's <arch>.pooling_type, mean without it\n"
           "  --spm-infill          POST /infill: the suffix before the prefix (as llama-server's flag)\n"
           "  -b, --batch-size N    POST /infill: the prefix and suffix budget (last 3N/4 prefix tokens, first\n"
           "                        N/4 suffix ones), as llama-server's -b sets it (default 2048); prompts are\n"
           "                        computed in --batch-tokens rows whatever it is\n"
           "  --queue N             requests waiting at most; more get 503 with Retry-After (default 64)\n"
           "  --timeout S           close a connection idle for S seconds (default 600)\n"
           "  --max-connections N   open connections at most, idle ones included (default 256); past it new\n"
           "                        connections are refused until one closes\n"
           "  --chat-template NAME  override the format recognized from tokenizer.chat_template\n"
           "                        (%s)\n"
           "  --print-prompt FILE   render the messages of a /v1/chat/completions JSON body with the\n"
           "                        chat template, print the prompt text and exit\n"
           "  Sampling flags: the defaults of every request (its fields override them), as llama-server's; but\n"
           "  -l / --logit-bias, --grammar and --json-schema (and their -file forms) are refused here: send logit_bias,\n"
           "  grammar, json_schema or response_format in the requests:\n"
           CLI_SAMPLING_HELP
           "%s",
           kvt_chat_template_names(), cli_engine_help);
}

#ifdef KVT_HAVE_JANSSON
// Parses the chat request in `file` and prints its prompt; returns the exit status.
static int print_prompt(const kvt_chat_template *t, const char *file) {
    size_t len;
    char *body = kvt_read_file("serve", file, &len);
    if (!body) return 1;
    kvt_request *r = NULL;
    kvt_api_error ae;
    int rc = 1;
    if (kvt_request_parse(body, len, KVT_REQ_CHAT, &r, &ae) != KVT_OK) {
        fprintf(stderr, "kvtier serve: %s: %s\n", file, ae.message);
    } else {
        const kvt_request_params *p = kvt_request_get(r);
        char *prompt = NULL;
        kvt_err err = {0};
        if (kvt_chat_template_apply_request(t, p->messages, p->n_messages, &prompt, NULL, &err) != KVT_OK) {
            fprintf(stderr, "kvtier serve: %s: %s\n", file, err.msg);
        } else {
            fputs(prompt, stdout);
            rc = 0;
        }
        free(prompt);
    }
    kvt_request_free(r);
    free(body);
    return rc;
}
#endif

#ifdef KVT_SERVE_HTTP
typedef struct {
    const char *host, *api_key;
    int port, n_parallel, queue, timeout_s, max_connections;
    bool metrics;
    int64_t batch_tokens, lookahead;
    bool preempt;
    const char *cache_dir;  // --kv-cache-dir: the prefix cache persists there (NULL: no)
    int64_t cache_max;      // --kv-cache-max: bound of that directory in bytes (0: none)
    const char *remote;     // --kv-remote: the prefix cache's blocks shared on a Redis server (NULL: no)
    int64_t fetch_max, fetch_wait_ms; // --kv-fetch-max, --kv-fetch-wait: the background read of that store
    int64_t query_bytes;    // --kv-cache-queries: asyncspade's query windows the prefix cache keeps
    int64_t key_bytes;      // --kv-cache-keys: the key summaries the prefix cache keeps
    int64_t warm_positions; // --kv-warm: room made and faulted in ahead of use while idle (-1: one context)
    bool embeddings;        // --embeddings: the embeddings endpoints, with pooling
    kvt_pooling pooling;
    bool pooling_given;     // --pooling named: it wins over the GGUF's pooling_type
    int64_t infill_batch;   // -b: POST /infill's budget (kvt_http_params)
    bool spm_infill;        // --spm-infill
    const kvt_generate_params *sampling; // the sampling flags: every request's defaults (seed UINT64_MAX: random)
    const cli_sampling_args *sa;         // and --dry-sequence-breaker's strings
} serve_opts;

// The requests' defaults from the sampling flags (kvt_sampler_params_default's values are llama-server's defaults).
static kvt_req_defaults serve_defaults(const kvt_generate_params *gp) {
    const kvt_sampler_params *s = &gp->sampling;
    kvt_req_defaults d = kvt_req_defaults_llama();
    d.temperature = s->temp, d.top_k = s->top_k, d.top_p = s->top_p, d.min_p = s->min_p;
    d.repeat_penalty = s->repeat_penalty, d.repeat_last_n = s->penalty_last_n;
    d.frequency_penalty = s->frequency_penalty, d.presence_penalty = s->presence_penalty;
    d.top_n_sigma = s->top_n_sigma > 0 ? s->top_n_sigma : 0, d.typical_p = s->typical_p;
    d.xtc_probability = s->xtc_probability, d.xtc_threshold = s->xtc_threshold;
    d.dynatemp_range = s->dynatemp_range, d.dynatemp_exponent = s->dynatemp_exponent;
    d.mirostat = s->mirostat, d.mirostat_tau = s->mirostat_tau, d.mirostat_eta = s->mirostat_eta;
    d.dry_multiplier = s->dry.multiplier, d.dry_base = s->dry.base;
    d.dry_allowed_length = s->dry.allowed_length, d.dry_penalty_last_n = s->dry.last_n;
    d.adaptive_target = s->adaptive_target, d.adaptive_decay = s->adaptive_decay, d.min_keep = s->min_keep;
    d.has_seed = s->seed != UINT64_MAX, d.seed = s->seed, d.ignore_eos = !gp->stop_at_eog;
    return d;
}

// A bounded KV store with no disk tier below it (--kv-fast, and --kv-host if any) that cannot hold -np full contexts
// serves until the sequences outgrow it, then fails those requests (500, the budget named): said once at start-up,
// with the positions it holds, so that the operator sizes it or adds --kv-disk before the first failure.
static void warn_small_kv(const kvt_context_params *cp, const kvt_context *ctx, int n_parallel) {
    if (cp->kv_disk_dir || cp->kv_fast_bytes <= 0) return;
    const int64_t n_ctx = kvt_context_n_ctx(ctx), blk = kvt_context_kv_block(ctx), bb = kvt_context_kv_block_bytes(ctx);
    if (blk <= 0 || bb <= 0) return;
    // what one full sequence holds: every block, but a sliding-window layer only its window (decode_bytes) where no
    // sparse selection leaves unread blocks resident
    const int64_t per_seq = kvt_context_sparse_selects(ctx) ? (n_ctx + blk - 1) / blk * bb : kvt_context_decode_bytes(ctx, n_ctx);
    const int64_t have = cp->kv_fast_bytes + (cp->kv_host_bytes > 0 ? cp->kv_host_bytes : 0);
    if (per_seq <= 0 || have >= (int64_t)n_parallel * per_seq) return;
    fprintf(stderr, "kvtier serve: warning: the KV budget (--kv-fast %lld%s bytes, no --kv-disk) holds about %lld of the "
            "%d x %lld positions that -np %d full contexts need: requests past it fail (raise --kv-fast, or add "
            "--kv-host/--kv-disk)\n", (long long)cp->kv_fast_bytes, cp->kv_host_bytes > 0 ? " + --kv-host" : "",
            (long long)(have / bb * blk), n_parallel, (long long)n_ctx, n_parallel);
}

// The prefix cache's second level (--kv-cache-dir, --kv-remote, or both: the directory in front of the server), for
// ctx's KV layout and model; *out NULL when neither flag is given. false (message printed) when one cannot be opened.
static bool open_prefix_store(const serve_opts *o, const kvt_model *model, kvt_context *ctx, kvt_prefix_store **out) {
    *out = NULL;
    if (!o->cache_dir && !o->remote) return true;
    kvt_kv *kv = kvt_context_kv(ctx);
    kvt_prefix_identity id;
    memset(&id, 0, sizeof id); // the stores compare and hash every byte
    kvt_kv_block_identity(kv, &id);
    id.model_fingerprint = kvt_session_model_fingerprint(model);
    snprintf(id.arch, sizeof id.arch, "%s", kvt_arch_name(model->hp.arch));
    const int64_t payload = kvt_kv_block_payload_bytes(kv);
    kvt_err err = {0};
    kvt_prefix_store *dir = NULL, *remote = NULL;
    if (o->cache_dir && kvt_prefix_store_dir_open(o->cache_dir, &id, payload, o->cache_max, &dir, &err)) {
        fprintf(stderr, "kvtier serve: --kv-cache-dir: %s\n", err.msg);
        return false;
    }
    if (o->remote && kvt_prefix_store_redis_open(o->remote, &id, payload, NULL, &remote, &err)) {
        fprintf(stderr, "kvtier serve: --kv-remote: %s\n", err.msg);
        kvt_prefix_store_free(dir);
        return false;
    }
    if (dir && remote) {
        if (kvt_prefix_store_chain_open(dir, remote, out, &err)) {
            fprintf(stderr, "kvtier serve: %s\n", err.msg);
            return false;
        }
        return true;
    }
    *out = dir ? dir : remote;
    return true;
}

// Serves until SIGINT/SIGTERM (blocked in every thread, taken here with sigwait); returns the exit status.
static int run_server(const serve_opts *o, const char *model_path, const char *tmpl_name, kvt_context_params *cp) {
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); // before any thread starts: they inherit the mask
    signal(SIGPIPE, SIG_IGN);
    kvt_req_defaults dflt = serve_defaults(o->sampling);
    // --dry-sequence-breaker's strings, their escapes processed (as llama-server's -e, its default); the server
    // copies them
    const int32_t nb = o->sa->dry_given ? o->sa->n_dry : 0;
    kvt_req_text *brk = calloc((size_t)nb + 1, sizeof *brk);
    bool brk_ok = brk != NULL;
    for (int32_t i = 0; brk_ok && i < nb; i++) {
        char *c = strdup(o->sa->dry[i]);
        if ((brk_ok = c != NULL)) brk[i] = (kvt_req_text){c, cli_process_escapes(c, strlen(c))};
    }
    if (o->sa->dry_given) dflt.dry_breakers = brk, dflt.n_dry_breakers = (size_t)nb;
    kvt_http_params hp = {o->host,      o->port,         o->api_key,    o->metrics, 0, o->max_connections,
                          o->timeout_s, o->infill_batch, o->spm_infill, &dflt};
    kvt_http *h = NULL;
    kvt_err err = {0};
    kvt_status hst = brk_ok ? kvt_http_start(&hp, &h, &err) : kvt_errorf(&err, KVT_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; brk && i < nb; i++) free((char *)brk[i].s);
    free(brk);
    if (hst) {
        fprintf(stderr, "kvtier serve: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "kvtier serve: listening on http://%s:%d (loading %s)\n", o->host, kvt_http_port(h), model_path);
    kvt_model *model = NULL;
    kvt_tokenizer *tok = NULL;
    kvt_gguf *g = NULL;
    kvt_chat_template *t = NULL;
    kvt_context *ctx = NULL;
    kvt_engine *e = NULL;
    kvt_prefix_store *ps = NULL;
    kvt_embedder *emb = NULL;
    int rc = 1;
    if (!cli_load_model("serve", model_path, false, &model, &tok)) goto done;
    if (!cli_chat_template("serve", model_path, tmpl_name, true, &g, &t)) goto done;
    if (cp->sparse.seqs <= 0) cp->sparse.seqs = o->n_parallel; // sparse key summaries: one set per running sequence
    if (!cli_context_init("serve", model, cp, &ctx)) goto done;
    if (!open_prefix_store(o, model, ctx, &ps)) {
        kvt_context_free(ctx);
        goto done;
    }
    warn_small_kv(cp, ctx, o->n_parallel);
    int64_t ub = cp->n_ubatch > 0 ? cp->n_ubatch : 512; // the context's micro-batch, as kvt_context_init sets it
    if (ub > kvt_context_n_ctx(ctx)) ub = kvt_context_n_ctx(ctx);
    const int64_t n_ctx = kvt_context_n_ctx(ctx);
    const int n_threads = kvt_context_n_threads(ctx);
    kvt_sched_params sp = kvt_sched_params_default();
    sp.n_parallel = o->n_parallel;
    sp.token_budget = o->batch_tokens > 0 ? o->batch_tokens : ub;
    sp.prefix_cache = cp->n_gpu_layers <= 0; // the device layers' KV is not in the blocks the prefix cache shares
    // cached prefixes beyond the running sequences' blocks: at most as many as -np full contexts hold
    const int64_t blk = cp->kv_block > 0 ? cp->kv_block : 512;
    sp.prefix_max_blocks = (int64_t)o->n_parallel * ((n_ctx + blk - 1) / blk);
    sp.preempt = o->preempt; // acts only with a disk tier below bounded fast (and host) tiers
    sp.plan_iters = (int32_t)o->lookahead;
    sp.prefix_store = ps;
    sp.prefix_fetch_bytes = o->fetch_max;
    sp.prefix_fetch_wait_ms = (int32_t)o->fetch_wait_ms;
    sp.prefix_query_bytes = o->query_bytes;
    sp.prefix_key_bytes = o->key_bytes;
    if (o->warm_positions >= 0) { // as asked, not bounded further
        sp.warm_positions = o->warm_positions;
        sp.warm_max_bytes = -1;
    }
    if (o->embeddings) { // a context of its own: embeddings never touch the engine's sequences or prefix cache
        kvt_context_params ecp = *cp;
        ecp.n_ctx = n_ctx;
        ecp.n_threads = n_threads;
        kvt_pooling pool;
        bool from_gguf = false;
        if (kvt_embd_pooling_choose(model->gguf, o->pooling_given ? &o->pooling : NULL, &pool, &from_gguf, &err) ||
            kvt_embedder_create(model, &ecp, pool, &emb, &err)) {
            fprintf(stderr, "kvtier serve: --embeddings: %s\n", err.msg);
            kvt_context_free(ctx);
            kvt_prefix_store_free(ps);
            ps = NULL;
            goto done;
        }
        kvt_http_set_embedder(h, emb);
        fprintf(stderr, "kvtier serve: embeddings on, pooling %s (%s)\n", kvt_pooling_name(pool),
                o->pooling_given ? "--pooling" : from_gguf ? "the GGUF's pooling_type" : "the default: no pooling_type");
    }
    if (kvt_engine_sched_create(ctx, tok, &sp, o->queue, &e, &err)) { // owns ctx from here, also on error
        fprintf(stderr, "kvtier serve: %s\n", err.msg);
        goto done;
    }
    kvt_str tmpl_src = {NULL, 0}; // GET /props: the GGUF's template, when kvtier renders chats from it
    if (tmpl_name || kvt_gguf_get_str(g, "tokenizer.chat_template", &tmpl_src, NULL) != KVT_OK)
        tmpl_src.ptr = NULL;
    kvt_resp_model_meta meta = {kvt_tokenizer_type(tok), kvt_tokenizer_n_vocab(tok), n_ctx, model->hp.n_ctx_train,
                                model->hp.n_embd, model->n_params, model->weight_bytes, ""}; // as kvtier info
    kvt_model_ftype_name(model, meta.ftype, sizeof meta.ftype);
    kvt_http_set_info(h, model_path, tmpl_src.ptr, tmpl_src.len, &meta);
    char *path_copy = strdup(model_path);
    kvt_http_set_ready(h, e, tok, t, path_copy ? basename(path_copy) : model_path);
    free(path_copy);
    fprintf(stderr, "kvtier serve: ready: %s, chat template %s, context %lld per sequence, %d sequence(s) at once, "
            "%d thread(s)\n", model_path, kvt_chat_template_name(t), (long long)n_ctx, o->n_parallel, n_threads);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "kvtier serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
done:
    kvt_http_quiesce(h);                  // no new connections
    if (e) kvt_engine_shutdown(e, true);  // running and queued requests end (cancelled)
    // their responses go out whole first: a stream's error event and [DONE], a whole answer's 503 (the engine ends
    // its current iteration before it cancels: seconds for a long prompt chunk)
    if (h && !kvt_http_drain(h, KVT_SERVE_DRAIN_MS)) {
        fprintf(stderr, "kvtier serve: some responses were still open after %d s: closing them\n", KVT_SERVE_DRAIN_MS / 1000);
    }
    kvt_http_stop(h);                     // connections close, their threads end
    kvt_engine_free(e);                   // the worker ends; the context (and its KV tiers) is freed
    kvt_prefix_store_free(ps);            // after the engine, its user; flushes the writes in flight
    kvt_embedder_free(emb);               // after the connections' threads, its users
    kvt_chat_template_free(t);
    kvt_gguf_free(g);
    kvt_tokenizer_free(tok);
    kvt_model_free(model);
    return rc;
}
#endif

static int run_serve_cmd(int argc, char **argv, cli_sampling_args *sa) {
    kvt_args a = {"serve", argc, argv, 0};
    kvt_generate_params gp = kvt_generate_params_default(); // the sampling flags: the defaults of every request
    gp.sampling.seed = UINT64_MAX;                          // (no -s: a random seed per request)
    const char *model_path = NULL, *tmpl_name = NULL, *prompt_file = NULL;
    kvt_context_params cp = kvt_context_params_default();
    const char *host = "127.0.0.1", *api_key = NULL;
    int64_t port = 8080, n_parallel = 4, queue = 64, timeout_s = 600, batch_tokens = 0, lookahead = 4, max_conn = 256;
    bool preempt = true;
    const char *cache_dir = NULL, *remote = NULL;
    int64_t cache_max = 0, fetch_max = kvt_sched_params_default().prefix_fetch_bytes;
    int64_t fetch_wait_ms = kvt_sched_params_default().prefix_fetch_wait_ms;
    int64_t query_bytes = kvt_sched_params_default().prefix_query_bytes;
    int64_t key_bytes = kvt_sched_params_default().prefix_key_bytes;
    int64_t warm_positions = kvt_sched_params_default().warm_positions;
    cp.kv_paged = true; // sequences, forks and the prefix cache live in the paged store
    cp.kv_block = 0;    // 0 until a flag sets it: the server's default below
    bool metrics = false, embeddings = false, pooling_given = false, spm_infill = false;
    kvt_pooling pooling = KVT_POOL_MEAN;
    int64_t infill_batch = 2048;
    const char *flag;
    while (kvt_args_next(&a, &flag)) {
        int ef = cli_engine_flag(&a, flag, &cp);
        if (ef == 0) ef = cli_sampling_flag(&a, flag, &gp, sa);
        if (ef < 0) return 2;
        if (ef > 0) continue;
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            usage();
            return 0;
        } else if (!strcmp(flag, "-m") || !strcmp(flag, "--model")) {
            if (!(model_path = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--chat-template")) {
            if (!(tmpl_name = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--print-prompt")) {
            if (!(prompt_file = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--host")) {
            if (!(host = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--api-key")) {
            if (!(api_key = kvt_args_value(&a, flag))) return 2;
            if (!api_key[0]) { // an unset variable ("--api-key $KEY") would make an empty password
                fprintf(stderr, "kvtier serve: --api-key: the key is empty\n");
                return 2;
            }
        } else if (!strcmp(flag, "--port")) {
            if (!kvt_args_int(&a, flag, 0, 65535, &port)) return 2;
        } else if (!strcmp(flag, "-np") || !strcmp(flag, "--parallel")) {
            if (!kvt_args_int(&a, flag, 1, 4096, &n_parallel)) return 2;
        } else if (!strcmp(flag, "--batch-tokens")) {
            if (!kvt_args_int(&a, flag, 2, 1 << 20, &batch_tokens)) return 2;
        } else if (!strcmp(flag, "--lookahead")) {
            if (!kvt_args_int(&a, flag, 0, 64, &lookahead)) return 2;
        } else if (!strcmp(flag, "--kv-cache-dir")) {
            if (!(cache_dir = kvt_args_value(&a, flag))) return 2;
            if (!*cache_dir) {
                fprintf(stderr, "kvtier serve: --kv-cache-dir: the value is empty\n");
                return 2;
            }
        } else if (!strcmp(flag, "--kv-cache-max")) {
            if (!kvt_args_bytes_pos(&a, flag, &cache_max)) return 2;
        } else if (!strcmp(flag, "--kv-remote")) {
            if (!(remote = kvt_args_value(&a, flag))) return 2;
            if (!*remote) {
                fprintf(stderr, "kvtier serve: --kv-remote: the value is empty\n");
                return 2;
            }
        } else if (!strcmp(flag, "--kv-fetch-max")) {
            if (!kvt_args_bytes(&a, flag, &fetch_max)) return 2;
        } else if (!strcmp(flag, "--kv-cache-queries")) {
            if (!kvt_args_bytes(&a, flag, &query_bytes)) return 2;
        } else if (!strcmp(flag, "--kv-cache-keys")) {
            if (!kvt_args_bytes(&a, flag, &key_bytes)) return 2;
        } else if (!strcmp(flag, "--kv-warm")) {
            if (!kvt_args_int(&a, flag, 0, INT32_MAX, &warm_positions)) return 2;
        } else if (!strcmp(flag, "--kv-fetch-wait")) {
            if (!kvt_args_int(&a, flag, 0, 600000, &fetch_wait_ms)) return 2;
        } else if (!strcmp(flag, "--no-preempt")) {
            preempt = false;
        } else if (!strcmp(flag, "--queue")) {
            if (!kvt_args_int(&a, flag, 1, 1 << 20, &queue)) return 2;
        } else if (!strcmp(flag, "--timeout")) {
            if (!kvt_args_int(&a, flag, 1, 86400, &timeout_s)) return 2;
        } else if (!strcmp(flag, "--max-connections")) {
            if (!kvt_args_int(&a, flag, 1, 65536, &max_conn)) return 2;
        } else if (!strcmp(flag, "--metrics")) {
            metrics = true;
        } else if (!strcmp(flag, "--spm-infill")) {
            spm_infill = true;
        } else if (!strcmp(flag, "-b") || !strcmp(flag, "--batch-size")) {
            if (!kvt_args_int(&a, flag, 1, INT32_MAX, &infill_batch)) return 2;
        } else if (!strcmp(flag, "--embeddings") || !strcmp(flag, "--embedding")) {
            embeddings = true;
        } else if (!strcmp(flag, "--pooling")) {
            const char *v = kvt_args_value(&a, flag);
            if (!v) return 2;
            if (!kvt_pooling_parse(v, &pooling)) {
                fprintf(stderr, "kvtier serve: --pooling %s: must be mean, cls, last or none\n", v);
                return 2;
            }
            pooling_given = true;
        } else {
            kvt_args_unknown(&a, flag);
            return 2;
        }
    }
#ifndef KVT_HAVE_JANSSON
    (void)host, (void)api_key, (void)port, (void)n_parallel, (void)queue, (void)timeout_s, (void)max_conn, (void)metrics, (void)batch_tokens, (void)lookahead, (void)preempt, (void)cache_dir, (void)cache_max, (void)remote;
    (void)fetch_max, (void)fetch_wait_ms, (void)query_bytes, (void)key_bytes, (void)warm_positions, (void)embeddings, (void)pooling_given;
    (void)infill_batch, (void)spm_infill, (void)gp;
    (void)model_path;
    (void)tmpl_name;
    (void)prompt_file;
    fprintf(stderr, "kvtier serve: this kvtier was built without libjansson, so the server is not built; install "
                    "it (apt-get install libjansson-dev libmicrohttpd-dev) and rebuild (make)\n");
    return 1;
#else
    if (!model_path) {
        fprintf(stderr, "kvtier serve: -m MODEL is required\n");
        return 2;
    }
    if (prompt_file) {
        kvt_chat_template *t = NULL;
        if (!cli_chat_template("serve", model_path, tmpl_name, false, NULL, &t)) return 1;
        int rc = print_prompt(t, prompt_file);
        kvt_chat_template_free(t);
        return rc;
    }
#ifndef KVT_SERVE_HTTP
    (void)host, (void)api_key, (void)port, (void)n_parallel, (void)queue, (void)timeout_s, (void)max_conn, (void)metrics, (void)batch_tokens, (void)lookahead, (void)preempt, (void)cache_dir, (void)cache_max, (void)remote;
    (void)fetch_max, (void)fetch_wait_ms, (void)query_bytes, (void)key_bytes, (void)warm_positions, (void)embeddings, (void)pooling_given;
    (void)infill_batch, (void)spm_infill, (void)gp;
    fprintf(stderr, "kvtier serve: this kvtier was built without libmicrohttpd, so the HTTP server is not built; "
                    "install it (apt-get install libmicrohttpd-dev) and rebuild (make)\n");
    return 1;
#else
    if (sa->n > 0) {
        fprintf(stderr, "kvtier serve: -l / --logit-bias: not a server default here (send logit_bias in the "
                        "requests)\n");
        return 2;
    }
    if (sa->grammar || sa->grammar_file || sa->schema || sa->schema_file) {
        fprintf(stderr, "kvtier serve: --grammar, --json-schema: not a server default here (send grammar, "
                        "json_schema or response_format in the requests)\n");
        return 2;
    }
    if (cp.kv_block <= 0) cp.kv_block = 64; // the prefix cache reuses whole blocks: finer than generate's 512
    if (cache_max && !cache_dir) {
        fprintf(stderr, "kvtier serve: --kv-cache-max bounds --kv-cache-dir, which is not given\n");
        return 2;
    }
    serve_opts o = {host,         api_key,   (int)port, (int)n_parallel, (int)queue, (int)timeout_s, (int)max_conn, metrics,
                    batch_tokens, lookahead, preempt,   cache_dir,       cache_max,  remote,
                    fetch_max,    fetch_wait_ms, query_bytes, key_bytes, warm_positions, embeddings, pooling, pooling_given,
                    infill_batch, spm_infill, &gp, sa};
    return run_server(&o, model_path, tmpl_name, &cp);
#endif
#endif
}

int cmd_serve(int argc, char **argv) {
    cli_sampling_args sa = {.n = 0};
    const int rc = run_serve_cmd(argc, argv, &sa);
    cli_sampling_args_free(&sa);
    return rc;
}
