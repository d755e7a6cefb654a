// test_serve_http.c - `kvtier serve` over HTTP (issue 12): tools/serve_test.py starts the server on free
// loopback ports with a model made by `kvtier mkmodel` (and SmolLM2 when cached, for the comparison with
// `kvtier generate`) and drives it with Python's http.client and raw sockets; each of its lines is one case.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "test_util.h"

void test_serve_http(const test_env *env) {
    char out[4096];
    const char *cli = env->cli ? env->cli : "build/kvtier";
#if !defined(KVT_HAVE_MICROHTTPD) || !defined(KVT_HAVE_JANSSON)
    char cmd[1024];
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
        // no template in a mkmodel file: chatml is named; SmolLM2 brings its own
        snprintf(cmd, sizeof cmd, "timeout 300 python3 tools/serve_test.py --kvtier %s --model %s --chat-template chatml%s%s 2>&1",
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
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("     could not remove %s\n", dir);
#endif
}
