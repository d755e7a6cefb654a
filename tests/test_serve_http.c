// test_serve_http.c - `kvtier serve` (issue 12). First the engine seam (src/serve/engine.h) driven
// directly: the FCFS engine's order, ids equal to kvt_generate, n choices, the bounded queue and
// cancellation. Then HTTP: tools/serve_test.py starts the server on free loopback ports with a model made
// by `kvtier mkmodel` (and SmolLM2 when cached, for the comparison with `kvtier generate`) and drives it
// with Python's http.client and raw sockets; each of its lines is one case.
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/cli/common.h"
#include "../src/sched/generate.h"
#include "../src/serve/engine.h"
#include "test.h"
#include "test_util.h"

#define EJ 4   // jobs at most per case
#define EMAX 16 // tokens recorded per choice

// What the callbacks of the engine saw.
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_done, order[EJ];
    int32_t ids[EJ][2][EMAX];
    int n_ids[EJ][2], n_tokens[EJ];
    int finish[EJ][2];
    kvt_engine_outcome outcome[EJ];
    bool threads_overlap; // two callbacks of one job at once
    int in_cb[EJ];
} erec;
typedef struct {
    erec *r;
    int k;
} ejob;

static bool e_token(void *user, int32_t index, const kvt_engine_token *t) {
    ejob *u = user;
    erec *r = u->r;
    pthread_mutex_lock(&r->mu);
    if (r->in_cb[u->k]++) r->threads_overlap = true;
    if (index < 2 && r->n_ids[u->k][index] < EMAX) r->ids[u->k][index][r->n_ids[u->k][index]++] = t->id;
    r->n_tokens[u->k]++;
    r->in_cb[u->k]--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return true;
}
static void e_finish(void *user, int32_t index, kvt_finish why) {
    ejob *u = user;
    pthread_mutex_lock(&u->r->mu);
    if (index < 2) u->r->finish[u->k][index] = (int)why + 1;
    pthread_mutex_unlock(&u->r->mu);
}
static void e_done(void *user, const kvt_engine_result *res) {
    ejob *u = user;
    pthread_mutex_lock(&u->r->mu);
    u->r->outcome[u->k] = res->outcome;
    u->r->order[u->r->n_done++] = u->k;
    pthread_cond_broadcast(&u->r->cv);
    pthread_mutex_unlock(&u->r->mu);
}
// Waits until cond(r) holds (at most 30 s); false on timeout.
static bool e_wait(erec *r, bool (*cond)(const erec *, int), int arg) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 30;
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    while (!cond(r, arg) && rc == 0) rc = pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    bool ok = cond(r, arg);
    pthread_mutex_unlock(&r->mu);
    return ok;
}
static bool done_at_least(const erec *r, int n) { return r->n_done >= n; }
static bool has_tokens(const erec *r, int k) { return r->n_tokens[k] > 0; }

// The engine under test: FCFS, or the scheduler's (paged store, n_parallel sequences at once).
static kvt_status engine_create(bool sched, const kvt_model *m, kvt_context_params cp, const kvt_tokenizer *tok,
                                int32_t n_parallel, int32_t queue, kvt_engine **e, kvt_err *err) {
    kvt_context *ctx = NULL;
    cp.kv_paged = sched;
    kvt_status st = kvt_context_init(m, &cp, &ctx, err);
    if (st) return st;
    if (!sched) return kvt_engine_fcfs_create(ctx, tok, 512, queue, e, err);
    kvt_sched_params sp = kvt_sched_params_default();
    sp.n_parallel = n_parallel;
    sp.token_budget = 5; // prompts in chunks, beside the decode rows of the others
    sp.prefix_cache = true;
    return kvt_engine_sched_create(ctx, tok, &sp, queue, e, err);
}

static void test_engine(const char *model_path, bool sched) {
    const char *en = sched ? "sched" : "FCFS";
    kvt_model *m = NULL;
    kvt_tokenizer *tok = NULL;
    if (!cli_load_model("test", model_path, false, &m, &tok)) {
        test_result(false, "serve-engine: load the test model", "%s", model_path);
        return;
    }
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 2048;
    cp.n_threads = 2;
    kvt_err err = {0};
    kvt_context *ref = NULL;
    kvt_engine *e = NULL;
    static erec r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    ejob u[EJ];
    for (int k = 0; k < EJ; k++) u[k] = (ejob){&r, k};
    kvt_engine_callbacks cb = {e_token, e_finish, e_done, NULL};
    const int32_t prompts[3][6] = {{1, 40, 41, 42, 43, 44}, {1, 40, 41, 42, 90, 91}, {1, 200, 201, 202, 203, 204}};
    bool ok = engine_create(sched, m, cp, tok, 4, 8, &e, &err) == KVT_OK;
    if (!ok) {
        test_result(false, "serve-engine: create", "%s: %s", en, err.msg);
        goto done;
    }
    // three jobs, two greedy choices each: run in order, every choice equals kvt_generate alone
    kvt_engine_job job = {NULL, 6, 8, kvt_sampler_params_default(), 2, false, 0, false, false};
    job.sampling.temp = 0;
    job.sampling.repeat_penalty = 1;
    uint64_t id;
    for (int k = 0; k < 3; k++) {
        job.prompt = prompts[k];
        cb.user = &u[k];
        ok = ok && kvt_engine_submit(e, &job, &cb, &id, &err) == KVT_OK;
    }
    ok = ok && e_wait(&r, done_at_least, 3);
    bool same = ok && kvt_context_init(m, &cp, &ref, &err) == KVT_OK;
    for (int k = 0; same && k < 3; k++) {
        kvt_context_truncate(ref, 0);
        kvt_generate_params gp = kvt_generate_params_default();
        gp.n_predict = 8;
        gp.sampling = job.sampling;
        int32_t out[9];
        kvt_generate_stats gs;
        same = kvt_generate(ref, tok, prompts[k], 6, &gp, out, NULL, NULL, NULL, &gs, &err) == KVT_OK;
        same = same && (sched || r.order[k] == k) && r.outcome[k] == KVT_ENGINE_DONE && r.n_ids[k][0] == gs.n_gen &&
               r.n_ids[k][1] == gs.n_gen && !memcmp(r.ids[k][0], out, (size_t)gs.n_gen * sizeof *out) &&
               !memcmp(r.ids[k][1], out, (size_t)gs.n_gen * sizeof *out) && r.finish[k][0] && r.finish[k][1];
    }
    char name[256];
    snprintf(name, sizeof name, "%s",
             sched ? "serve-engine: sched runs 3 jobs of 2 choices at once (-np 4, prompts in chunks of 5 rows beside decode "
                     "rows); each greedy choice equals kvt_generate alone"
                   : "serve-engine: FCFS runs jobs in order; each of n greedy choices equals kvt_generate alone "
                     "(the second job reusing the first's prompt prefix)");
    test_result(same && !r.threads_overlap, name, "ok %d, order %d %d %d, overlap %d: %s", ok, r.order[0], r.order[1],
                r.order[2], r.threads_overlap, err.msg);
    kvt_engine_free(e);
    e = NULL;
    // a queue of one: the third job is refused (KVT_ERR_BUDGET); cancelled jobs end with CANCELLED
    memset(&r.n_done, 0, sizeof r - offsetof(erec, n_done));
    if (engine_create(sched, m, cp, tok, 1, 1, &e, &err)) {
        test_result(false, "serve-engine: create with a queue of one", "%s: %s", en, err.msg);
        goto done;
    }
    job.n = 1;
    job.max_tokens = 1500;
    job.prompt = prompts[0];
    uint64_t ids[3] = {0, 0, 0};
    kvt_status st[3];
    cb.user = &u[0];
    st[0] = kvt_engine_submit(e, &job, &cb, &ids[0], &err);
    bool running = st[0] == KVT_OK && e_wait(&r, has_tokens, 0); // job 0 runs: the queue is empty
    cb.user = &u[1];
    st[1] = kvt_engine_submit(e, &job, &cb, &ids[1], &err);
    cb.user = &u[2];
    st[2] = kvt_engine_submit(e, &job, &cb, &ids[2], &err);
    kvt_engine_stats es;
    kvt_engine_stats_get(e, &es);
    kvt_engine_cancel(e, ids[1]);
    kvt_engine_cancel(e, ids[0]);
    bool ended = e_wait(&r, done_at_least, 2);
    snprintf(name, sizeof name, "serve-engine: %s: a full queue refuses (KVT_ERR_BUDGET); cancel ends a running and a queued job", en);
    test_result(running && st[1] == KVT_OK && st[2] == KVT_ERR_BUDGET && es.queued == 1 && es.running == 1 && ended &&
                    r.outcome[0] == KVT_ENGINE_CANCELLED && r.outcome[1] == KVT_ENGINE_CANCELLED &&
                    r.n_tokens[0] < 1500 && r.n_tokens[1] == 0 && es.jobs_rejected == 1, name,
                "status %d %d %d, queued %lld running %lld, ended %d, outcomes %d %d, tokens %d %d", st[0], st[1], st[2],
                (long long)es.queued, (long long)es.running, ended, r.outcome[0], r.outcome[1], r.n_tokens[0],
                r.n_tokens[1]);
done:
    kvt_engine_free(e);
    kvt_context_free(ref);
    kvt_tokenizer_free(tok);
    kvt_model_free(m);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
}

// The HTTP cases (tools/serve_test.py) against the model at `model`.
static void serve_http_cases(const test_env *env, const char *cli, const char *model) {
#if !defined(KVT_HAVE_MICROHTTPD) || !defined(KVT_HAVE_JANSSON)
    (void)env;
    (void)model;
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "%s serve -m /nonexistent.gguf 2>&1", cli);
    int rc0 = test_run(cmd, out, sizeof out);
    test_result(rc0 == 1 && strstr(out, "apt-get install"), "serve-http: built without the HTTP libraries, serve says what to install",
                "exit %d: %s", rc0, out);
    test_skip("serve-http", "built without libmicrohttpd or libjansson (apt-get install libmicrohttpd-dev libjansson-dev)");
    return;
#else
    if (system("python3 -c 'import http.client, json' >/dev/null 2>&1") != 0) {
        test_skip("serve-http", "python3 is not installed (the HTTP client of tools/serve_test.py)");
        return;
    }
    char cmd[2048];
    // no template in a mkmodel file: chatml is named; SmolLM2 brings its own
    snprintf(cmd, sizeof cmd, "timeout 600 python3 tools/serve_test.py --kvtier %s --model %s --chat-template chatml%s%s 2>&1",
             cli, model, test_file_exists(env->smollm2) ? " --smollm2 " : "",
             test_file_exists(env->smollm2) ? env->smollm2 : "");
    FILE *p = popen(cmd, "r");
    int n_fail = 0, n_lines = 0;
    char line[8192];
    while (p && fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        char *name = strstr(line, "serve-http: ");
        if (!strncmp(line, "ok ", 3) && name) {
            test_result(true, name, "%s", "");
        } else if (!strncmp(line, "FAIL ", 5) && name) {
            char *why = strstr(name + 12, ": ");
            if (why) *why = 0;
            test_result(false, name, "%s", why ? why + 2 : "failed");
            n_fail++;
        } else if (!strncmp(line, "skip ", 5) && name) {
            char *why = strstr(name + 12, ": ");
            if (why) *why = 0;
            test_skip(name, why ? why + 2 : "skipped");
        } else {
            printf("     %s\n", line); // notes and anything the script printed
            continue;
        }
        n_lines++;
    }
    int st = p ? pclose(p) : -1;
    int code = st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (!n_lines || (code != 0 && !n_fail)) {
        test_result(false, "serve-http: tools/serve_test.py", "exit %d after %d case(s)", code, n_lines);
    }
#endif
}

void test_serve_http(const test_env *env) {
    char out[4096];
    const char *cli = env->cli ? env->cli : "build/kvtier";
    char dir[] = "/tmp/kvt_serveXXXXXX";
    if (!mkdtemp(dir)) {
        test_result(false, "serve-http: temporary directory", "%s", strerror(errno));
        return;
    }
    char model[256], cmd[2048];
    snprintf(model, sizeof model, "%s/tiny.gguf", dir);
    snprintf(cmd, sizeof cmd, "%s mkmodel --arch llama --dim 64 --layers 2 --heads 2 --vocab 300 --ctx 4096 --type f32 -o %s -q 2>&1",
             cli, model);
    int rc = test_run(cmd, out, sizeof out);
    if (rc != 0) {
        test_result(false, "serve-http: mkmodel of the test model", "exit %d: %s", rc, out);
    } else {
        test_engine(model, false);
        test_engine(model, true);
        serve_http_cases(env, cli, model);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("     could not remove %s\n", dir);
}
