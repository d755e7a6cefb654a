// test_cli_attack.c - what the attack run of 2026-11-30 found in the kvtier command (docs/log/ATTACK-2026-11-30.md):
// output files are whole or absent (a directory, an empty path, a missing folder refused before any work; a full
// disk or a file size limit leaves no partial or temporary file, and an earlier plan stays), a vocabulary-only
// GGUF planned without a leak, profiles with inf/nan/huge numbers refused, --sparse-* flags that would do nothing
// refused, --rhos inf, an empty --api-key. The server's findings are in test_serve.c and tools/serve_test.py.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/plan/profile.h"
#include "test.h"
#include "test_util.h"

// Runs `cli ARGS` (stdout to /dev/null) under sh, with `pre` before it (e.g. "ulimit -f 1;"): exit code, stderr in out.
static int run_cli(const char *pre, const char *cli, const char *args, char *out, size_t cap) {
    char cmd[8192];
    // the limit only catches a hang: generous, since make tsan runs 5-15x slower
    snprintf(cmd, sizeof cmd, "%s timeout 120 %s %s 2>&1 >/dev/null", pre, cli, args);
    return test_run(cmd, out, cap);
}

// The command exits with `code` and its stderr holds every needle (NULL-terminated).
static void expect(const char *name, const char *pre, const char *cli, const char *args, int code,
                   const char *const *needles) {
    static char out[1 << 16];
    int rc = run_cli(pre, cli, args, out, sizeof out);
    bool ok = rc == code;
    for (const char *const *n = needles; ok && *n; n++) ok = strstr(out, *n) != NULL;
    test_result(ok, name, "exit %d (want %d): %.600s", rc, code, out);
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void profile_numbers(void) {
    static const char *const bad[] = {
        "{\"cpu_read_gbps\": 1e400}",                     // inf
        "{\"cpu_read_gbps\": nan}",                       // strtod takes it, JSON does not
        "{\"cpu_read_gbps\": inf}",
        "{\"cpu_read_gbps\": 0x10}",                      // hex
        "{\"cpu_read_gbps\": 20, \"ram_bytes\": 1e300}",  // finite but past int64_t: an undefined conversion
        "{\"cpu_read_gbps\": 20, \"ram_bytes\": -1e19}",
    };
    int wrong = 0;
    char first[KVT_ERR_MSG_MAX + 128] = "";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kvt_profile p;
        kvt_err err = {0};
        kvt_status st = kvt_profile_parse(bad[i], &p, &err);
        if ((st == KVT_OK || !strstr(err.msg, "JSON")) && !wrong++) snprintf(first, sizeof first, "%s: %s", bad[i], err.msg);
    }
    test_result(wrong == 0, "cli_attack: profile JSON with inf, nan, hex or numbers past int64_t is refused",
                "%d accepted; first: %s", wrong, first);
    kvt_profile p;
    kvt_err err = {0};
    kvt_status st = kvt_profile_parse("{\"cpu_read_gbps\": 2.5e1, \"ram_bytes\": 8589934592, \"cpu_block_overhead_ms\": -0}",
                                      &p, &err);
    test_result(st == KVT_OK && p.cpu_read_gbps == 25.0 && p.ram_bytes == 8589934592LL,
                "cli_attack: ordinary profile numbers still parse", "%s", err.msg);
}

void test_cli_attack(const test_env *env) {
    const char *cli = env->cli;
    profile_numbers();
    if (!test_file_exists(cli)) {
        test_skip("cli_attack", "kvtier binary not built");
        return;
    }
    char dir[] = "/tmp/kvt_attackXXXXXX";
    if (!mkdtemp(dir)) {
        test_result(false, "cli_attack: temporary directory", "%s", strerror(errno));
        return;
    }
    char model[512], args[4096], path[600], path2[600];
    static char out[1 << 16];
    snprintf(model, sizeof model, "%s/tiny.gguf", dir);
    snprintf(args, sizeof args, "mkmodel --arch llama --dim 64 --layers 2 --heads 2 --vocab 300 --ctx 4096 --type f32 -o %s -q",
             model);
    int rc = run_cli("", cli, args, out, sizeof out);
    if (rc != 0) {
        test_result(false, "cli_attack: mkmodel of the test model", "exit %d: %s", rc, out);
        rmdir(dir);
        return;
    }

    // output paths refused before any work (they failed after the generation, or gave "cannot rename .tmp to ")
    snprintf(args, sizeof args, "generate -m %s -p hi -n 2 --kv-save %s", model, dir);
    expect("cli_attack: --kv-save to a directory is refused before generating", "", cli, args, 1,
           (const char *const[]){"--kv-save", "is a directory", NULL});
    snprintf(args, sizeof args, "generate -m %s -p hi -n 2 --kv-save ''", model);
    expect("cli_attack: --kv-save '' is refused", "", cli, args, 1, (const char *const[]){"--kv-save", "empty", NULL});
    snprintf(args, sizeof args, "generate -m %s -p hi -n 2 --kv-save %s/nosuch/s.kv", model, dir);
    expect("cli_attack: --kv-save into a missing folder is refused, naming it", "", cli, args, 1,
           (const char *const[]){"--kv-save", "nosuch", "No such file", NULL});
    // profile: a bad -o or --dir is refused before measuring (it failed after the whole measurement)
    snprintf(args, sizeof args, "profile --quick -o %s/nosuch/p.json", dir);
    rc = run_cli("", cli, args, out, sizeof out);
    test_result(rc == 1 && strstr(out, "nosuch") && strstr(out, "No such file") && !strstr(out, "cpu:"),
                "cli_attack: profile -o into a missing folder is refused before measuring", "exit %d: %.600s", rc, out);
    snprintf(args, sizeof args, "profile --quick --dir %s/nosuch", dir);
    rc = run_cli("", cli, args, out, sizeof out);
    test_result(rc == 1 && strstr(out, "--dir") && strstr(out, "No such file") && !strstr(out, "cpu:"),
                "cli_attack: profile --dir of a missing folder is refused before measuring", "exit %d: %.600s", rc, out);
    snprintf(args, sizeof args, "generate -m %s -p hi -n 2 --dump-logits %s", model, dir);
    expect("cli_attack: --dump-logits to a directory is refused before generating", "", cli, args, 1,
           (const char *const[]){"--dump-logits", "is a directory", NULL});

    // a file size limit (ulimit -f: 512 or 1024-byte blocks) is an error, not SIGXFSZ: nothing is left behind
    snprintf(path, sizeof path, "%s/u.kv", dir);
    snprintf(path2, sizeof path2, "%s/u.kv.tmp", dir);
    snprintf(args, sizeof args, "generate -m %s -p hi -n 12 --ignore-eos --kv-save %s", model, path);
    expect("cli_attack: --kv-save past ulimit -f fails naming the file (no SIGXFSZ kill)", "ulimit -f 1;", cli, args, 1,
           (const char *const[]){"--kv-save", path, "File too large", NULL});
    test_result(!exists(path) && !exists(path2), "cli_attack: no session file or .tmp left after ulimit -f", "%s or %s exists",
                path, path2);
    snprintf(path, sizeof path, "%s/logits.txt", dir);
    snprintf(args, sizeof args, "generate -m %s -p hi -n 1 --dump-logits %s", model, path);
    expect("cli_attack: --dump-logits past ulimit -f fails with the reason", "ulimit -f 1;", cli, args, 1,
           (const char *const[]){"--dump-logits", "File too large", NULL});
    test_result(!exists(path), "cli_attack: no partial logits file left", "%s exists", path);

    // plan -o: written whole (PATH.tmp + rename); an earlier plan survives a failed write
    snprintf(path, sizeof path, "%s/plan.json", dir);
    snprintf(path2, sizeof path2, "%s/plan.json.tmp", dir);
    snprintf(args, sizeof args, "plan -m %s --ctx 512 --profile profiles/rtx4060-laptop.json -o %s", model, path);
    rc = run_cli("", cli, args, out, sizeof out);
    size_t len0 = 0, len1 = 0;
    char *before = rc == 0 ? test_read_file(path, &len0) : NULL;
    expect("cli_attack: plan -o past ulimit -f fails with the reason", "ulimit -f 1;", cli, args, 1,
           (const char *const[]){path, "write failed", "File too large", NULL});
    char *after = test_read_file(path, &len1);
    test_result(before && after && len0 > 1024 && len0 == len1 && !memcmp(before, after, len0) && !exists(path2),
                "cli_attack: the earlier plan is kept whole and no .tmp is left", "exit %d, %zu bytes before, %zu after%s", rc,
                len0, len1, exists(path2) ? ", .tmp left" : "");
    free(before);
    free(after);
    unlink(path);

    // plan -m of a GGUF without weights: an error, and (under make asan) no leak
    expect("cli_attack: plan -m of a vocabulary-only GGUF fails cleanly (exit 1, no leak)", "", cli,
           "plan -m tests/data/ggml-vocab-llama-spm.gguf --profile profiles/rtx4060-laptop.json", 1,
           (const char *const[]){"no token_embd.weight", NULL});

    // plan --vram where no GPU can take it: refused by name, as --gpu without --validate is (the search never read it)
    expect("cli_attack: plan --vram with a profile without a GPU is refused", "", cli,
           "plan --shape smollm2-135m --profile profiles/xeon-avx512-2vcpu.json --vram 8G", 2,
           (const char *const[]){"--vram", "no GPU", NULL});
    snprintf(args, sizeof args, "plan --validate -m %s --profile profiles/xeon-avx512-2vcpu.json --vram 8G", model);
    expect("cli_attack: plan --validate --vram without --gpu is refused", "", cli, args, 2,
           (const char *const[]){"--vram", "--gpu", NULL});
    expect("cli_attack: plan --vram with a GPU profile runs", "", cli,
           "plan --shape smollm2-135m --profile profiles/rtx4060-laptop.json --vram 4G", 0, (const char *const[]){NULL});

    // sparse flags that do nothing under the chosen mode
    snprintf(args, sizeof args, "generate -m %s -p hi -n 2 --sparse-budget 8", model);
    expect("cli_attack: --sparse-budget without --sparse is refused", "", cli, args, 1,
           (const char *const[]){"--sparse-budget", "--sparse off", NULL});
    snprintf(args, sizeof args, "generate -m %s -p hi -n 2 --sparse quest --sparse-window 4", model);
    expect("cli_attack: an asyncspade flag with --sparse quest is refused", "", cli, args, 1,
           (const char *const[]){"--sparse-window", "asyncspade", NULL});
    snprintf(args, sizeof args, "generate -m %s -p hi -n 2 --sparse asyncspade --sparse-page 4", model);
    expect("cli_attack: a quest flag with --sparse asyncspade is refused", "", cli, args, 1,
           (const char *const[]){"--sparse-page", "quest", NULL});
    snprintf(args, sizeof args, "generate -m %s -p hi -n 2 --sparse quest --sparse-page 4 --sparse-budget 8 --temp 0", model);
    expect("cli_attack: --sparse quest with its own flags runs", "", cli, args, 0, (const char *const[]){NULL});

    // other values
    expect("cli_attack: sim --rhos inf is refused", "", cli,
           "sim --sweep --profile profiles/rtx4060-laptop.json --shape qwen3-0.6b --rhos inf --seeds 1", 2,
           (const char *const[]){"--rhos", NULL});
    snprintf(args, sizeof args, "serve -m %s --port 0 --api-key ''", model);
    expect("cli_attack: serve --api-key '' (an empty password) is refused", "", cli, args, 2,
           (const char *const[]){"--api-key", "empty", NULL});
    snprintf(args, sizeof args, "serve -m %s --port 0 --kv-cache-dir ''", model);
    expect("cli_attack: serve --kv-cache-dir '' is refused by name", "", cli, args, 2,
           (const char *const[]){"--kv-cache-dir", "empty", NULL});
    snprintf(args, sizeof args, "serve -m %s --port 0 --kv-remote ''", model);
    expect("cli_attack: serve --kv-remote '' is refused by name", "", cli, args, 2,
           (const char *const[]){"--kv-remote", "empty", NULL});
    snprintf(args, sizeof args, "serve -m %s --port 0 --embeddings --pooling max", model);
    expect("cli_attack: serve --pooling max is refused by name", "", cli, args, 2,
           (const char *const[]){"--pooling max", "mean, cls, last or none", NULL});
    snprintf(args, sizeof args, "tokenize -m %s -f %s", model, dir);
    expect("cli_attack: tokenize -f DIRECTORY says why", "", cli, args, 1, (const char *const[]){"Is a directory", NULL});

    unlink(model);
    if (rmdir(dir) != 0) test_result(false, "cli_attack: the test directory is left empty", "%s: %s", dir, strerror(errno));
}
