// test_main.c - runs every suite and prints the closing summary line.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/base/timer.h"
#include "test.h"

static int g_passed, g_failed, g_skipped;

void test_result(bool ok, const char *name, const char *fmt, ...) {
    if (ok) {
        g_passed++;
        printf("ok   %s\n", name);
    } else {
        g_failed++;
        printf("FAIL %s: ", name);
        va_list ap;
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
    }
    fflush(stdout);
}

void test_skip(const char *name, const char *reason) {
    g_skipped++;
    printf("skip %s: %s\n", name, reason);
    fflush(stdout);
}

bool test_file_exists(const char *path) { return path && access(path, R_OK) == 0; }

int test_cases_recorded(void) { return g_passed + g_failed + g_skipped; }

#define SUITES(X) X(pool) X(gguf) X(kernels) X(quant_lowbit) X(tokenizer) X(sampler) X(grammar) X(json_schema) X(mkmodel) X(model_ref) X(kv) X(kv_attn) X(prefix_cache) X(kv_sched) X(batch) X(beam_group) X(beam) X(cli) X(cli_user) X(cli_attack) X(plan) X(chat) X(embd) X(serve) X(serve_native) X(serve_http) X(determ) X(hostile) X(sim) X(prefix_store) X(sparse) X(sparse_seq) X(sched) X(sched_policy) X(cuda) X(cuda_layers)
// Suites that run only when named: `kvtier-tests vocab` (make test-vocab).
#define EXTRA_SUITES(X) X(vocab)
#define DECL(n) void test_##n(const test_env *env);
SUITES(DECL)
EXTRA_SUITES(DECL)

// The kernel suite (test-backend-ops style) prints its own case lines and
// returns its failure count.
int test_kernels_main(void);
void test_kernels(const test_env *env) {
    (void)env;
    int f = test_kernels_main();
    test_result(f == 0, "kernels: every SIMD kernel matches its scalar reference", "%d case(s) failed", f);
}

typedef struct {
    const char *name;
    void (*fn)(const test_env *);
} suite;

// True if `name` is one of the space-separated words of `list`.
static bool suite_listed(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n) {
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return true;
    }
    return false;
}

int main(int argc, char **argv) {
    test_env env = {getenv("KVT_SHARED"), getenv("KVT_SMOLLM2"), getenv("KVT_CLI"), getenv("KVT_TEST_QUICK") != NULL};
    if (!env.shared) env.shared = "../shared";
    if (!env.cli) env.cli = "build/kvtier";
#define ENTRY(n) {#n, test_##n},
    static const suite suites[] = {SUITES(ENTRY) EXTRA_SUITES(ENTRY)};
    const size_t n_default = sizeof (suite[]){SUITES(ENTRY)} / sizeof(suite);
    const char *only = argc > 1 ? argv[1] : NULL;
    const char *skip = getenv("KVT_TEST_SKIP"); // space-separated suite names (make tsan: single-threaded suites)
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++) {
        if (only ? strcmp(only, suites[i].name) != 0 : i >= n_default) continue;
        if (skip && suite_listed(skip, suites[i].name)) {
            char name[64];
            snprintf(name, sizeof name, "suite %s", suites[i].name);
            test_skip(name, "listed in KVT_TEST_SKIP");
            continue;
        }
        printf("# suite %s\n", suites[i].name);
        double t0 = kvt_time_ms();
        suites[i].fn(&env);
        printf("# suite %s: %.0f ms\n", suites[i].name, kvt_time_ms() - t0);
    }
    printf("%d passed, %d failed, %d skipped\n", g_passed, g_failed, g_skipped);
    return g_failed ? 1 : 0;
}
