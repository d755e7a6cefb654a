// test_cli_user.c - what a user of the kvtier command hit (issue 11, sections 7 and 8): Ctrl-C leaves no
// KV disk file, contradictory flags are refused, FIFOs never block, long tokens are never cut, plans
// belong to one model, a context past the training context warns, byte sizes follow one rule.
// Every model here is made on the fly by `kvtier mkmodel` (no shared data needed).
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/cli/args.h"
#include "../src/gguf/gguf.h"
#include "test.h"
#include "test_util.h"

// The command fails with exit `code` and its stderr contains every needle (NULL-terminated list).
static void expect_fail(const char *name, const char *cli, const char *args, int code, const char *const *needles) {
    char cmd[4096];
    static char out[1 << 16];
    // the limit only catches a hang (FIFO, blocked read): generous, since make tsan runs 5-15x slower
    snprintf(cmd, sizeof cmd, "timeout 120 %s %s 2>&1 >/dev/null", cli, args);
    int rc = test_run(cmd, out, sizeof out);
    bool ok = rc == code;
    for (const char *const *n = needles; ok && *n; n++) ok = strstr(out, *n) != NULL;
    test_result(ok, name, "exit %d (want %d): %.600s", rc, code, out);
}

// The sum of the integers of the JSON object that follows "key": at or after from (-1: absent).
static long long json_obj_sum(const char *from, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":{", key);
    const char *p = from ? strstr(from, k) : NULL;
    if (!p) return -1;
    long long sum = 0;
    for (p += strlen(k); *p && *p != '}'; p++) {
        if (*p == ':') sum += strtoll(p + 1, NULL, 10);
    }
    return sum;
}

// kvbench --json: one JSON object on stdout (no table), every section's rows with the bytes moved between each pair
// of tiers, over the timed steps (moved_bytes_per_token x timed tokens) and over the whole run (the help named
// --json, which kvbench did not have, until 2026-12-06).
static void kvbench_json(const char *cli, const char *model, const char *dir) {
    char cmd[4096];
    static char out[1 << 17];
    snprintf(cmd, sizeof cmd, "timeout 120 %s kvbench -m %s --ctx 256 -n 5 --only p,c --policies lru --kv-block 16 --dir %s "
             "--json 2>/dev/null", cli, model, dir);
    int rc = test_run(cmd, out, sizeof out);
    const char *nl = strchr(out, '\n'), *c = strstr(out, "{\"name\":\"c\",");
    const char *per = c ? strstr(c, "\"moved_bytes_per_token\":") : NULL, *tt = strstr(out, "\"timed_tokens\":3,");
    const long long timed = json_obj_sum(c, "moved_bytes"), run = json_obj_sum(c, "run_moved_bytes");
    const double per_tok = per ? atof(per + strlen("\"moved_bytes_per_token\":")) : -1;
    bool ok = rc == 0 && out[0] == '{' && nl && nl[-1] == '}' && !nl[1] && !strstr(out, "| set-up |") && tt &&
              strstr(out, "\"sections\":[{\"name\":\"p\",") && c && strstr(c, "\"setup\":\"lru\"") &&
              strstr(c, "\"run_moved_bytes\":{\"fast_to_host\":") && strstr(c, "\"per_token\":{\"acquire_ms\":") &&
              strstr(c, "\"peak_bytes\":{\"fast\":") && run > 0 && timed >= 0 && timed <= run &&
              per_tok * 3 > timed - 1 && per_tok * 3 < timed + 1 && strstr(out, "\"links\":{\"memcpy_gbps\":");
    test_result(ok, "cli: kvbench --json: one object, each section's rows with the bytes moved between each pair of tiers",
                "exit %d, timed %lld, run %lld, per token %g: %.600s", rc, timed, run, per_tok, out);
}

// kvtier-kv-* files in dir.
static int count_kv_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += !strncmp(e->d_name, "kvtier-kv-", 10);
    closedir(d);
    return n;
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        char p[1024];
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

// Starts `kvtier generate` writing its KV to dir, waits until it streams tokens, sends sig and checks that
// dir holds no kvtier-kv-* file, while it runs and after it ended.
static void signal_leaves_no_file(const char *cli, const char *model, int sig, const char *signame) {
    char name[160];
    snprintf(name, sizeof name, "cli: %s during generate --kv-disk DIR leaves no kvtier-kv-* file in DIR", signame);
    char dir[] = "/tmp/kvt_sigXXXXXX";
    if (!mkdtemp(dir)) {
        test_result(false, name, "mkdtemp: %s", strerror(errno));
        return;
    }
    int fds[2];
    if (pipe(fds) != 0) {
        test_result(false, name, "pipe: %s", strerror(errno));
        rmdir(dir);
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        // A suite started as a background job of a non-interactive shell inherits SIGINT ignored, and exec
        // keeps an ignored signal ignored: give the child the default action a user's terminal gives it.
        if (sig != SIGKILL) signal(sig, SIG_DFL);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 2);
        execl(cli, cli, "generate", "-m", model, "-p", "hello", "-n", "3800", "--temp", "0", "--ignore-eos", "-t", "1",
              "--kv-fast", "64K", "--kv-disk", dir, "--kv-block", "16", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    // wait for the prompt and a few tokens: the context (and its disk file) exists by then
    char buf[4096];
    ssize_t got = 0, r;
    while (got < 64 && (r = read(fds[0], buf, sizeof buf)) > 0) got += r;
    const int during = count_kv_files(dir);
    int st = 0;
    bool killed = false;
    if (pid > 0) {
        killed = kill(pid, sig) == 0;
        while (read(fds[0], buf, sizeof buf) > 0) {
        }
        waitpid(pid, &st, 0);
    }
    close(fds[0]);
    const int after = count_kv_files(dir);
    const bool by_signal = WIFSIGNALED(st) && WTERMSIG(st) == sig;
    test_result(pid > 0 && got >= 64 && killed && by_signal && during == 0 && after == 0, name,
                "streamed %lld bytes, ended by the signal: %d (status 0x%x), files while running %d, after %d",
                (long long)got, by_signal, st, during, after);
    remove_dir(dir);
}

// A vocabulary-only GGUF whose pieces are all n_long bytes long (after <unk> <s> </s>).
static bool write_long_vocab(const char *path, int n_pieces, int n_long) {
    const int n = 3 + n_pieces;
    const char **toks = malloc((size_t)n * sizeof *toks);
    char *pool = malloc((size_t)n * (size_t)(n_long + 1));
    float *scores = calloc((size_t)n, sizeof *scores);
    int32_t *types = malloc((size_t)n * sizeof *types);
    bool ok = toks && pool && scores && types;
    for (int i = 0; ok && i < n; i++) {
        char *q = pool + (size_t)i * (size_t)(n_long + 1);
        toks[i] = q;
        if (i < 3) {
            strcpy(q, i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
            types[i] = i == 0 ? 2 : 3;
        } else {
            memset(q, 'a' + i % 26, (size_t)n_long);
            snprintf(q + n_long - 8, 9, "%08d", i);
            types[i] = 1;
            scores[i] = -(float)i;
        }
    }
    kvt_gguf_writer *w = ok ? kvt_gguf_writer_init() : NULL;
    kvt_err err = {0};
    if (w) {
        kvt_gguf_writer_set_str(w, "general.architecture", "llama");
        kvt_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
        kvt_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n);
        kvt_gguf_writer_set_arr(w, "tokenizer.ggml.scores", KVT_GGUF_F32, scores, (uint64_t)n);
        kvt_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", KVT_GGUF_I32, types, (uint64_t)n);
        kvt_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        kvt_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
        kvt_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
        ok = kvt_gguf_writer_write(w, path, &err) == KVT_OK;
        kvt_gguf_writer_free(w);
    }
    free(toks), free(pool), free(scores), free(types);
    return ok && w;
}

// Generated text with tokens of 300 bytes: --json "text" and the streamed text hold every byte.
static void long_tokens(const char *cli, const char *dir) {
    const char *name = "cli: tokens longer than 256 bytes reach --json text and the stream uncut";
    char vocab[512], model[512], cmd[4096];
    static char out[1 << 18];
    snprintf(vocab, sizeof vocab, "%s/longvocab.gguf", dir);
    snprintf(model, sizeof model, "%s/longtok.gguf", dir);
    if (!write_long_vocab(vocab, 40, 300)) {
        test_result(false, name, "cannot write %s", vocab);
        return;
    }
    snprintf(cmd, sizeof cmd, "%s mkmodel --arch llama --dim 64 --layers 1 --heads 2 --type f32 --vocab-from %s -o %s -q 2>&1",
             cli, vocab, model);
    int rc = test_run(cmd, out, sizeof out);
    if (rc != 0) {
        test_result(false, name, "mkmodel: exit %d: %s", rc, out);
        return;
    }
    const int n_gen = 12;
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p x -n %d --temp 0 --ignore-eos --json 2>/dev/null", cli, model, n_gen);
    rc = test_run(cmd, out, sizeof out);
    // every generated id >= 3 is a 300-byte piece; </s> (2) gives no text
    int64_t n_ids = 0, n_long = 0;
    const char *p = strstr(out, "\"ids\":[");
    for (p = p ? p + 7 : NULL; p && *p && *p != ']'; n_ids++) {
        long id = strtol(p, (char **)&p, 10);
        n_long += id >= 3;
        if (*p == ',') p++;
    }
    const char *t = strstr(out, "\"text\":\"");
    const char *te = t ? strchr(t + 8, '"') : NULL;
    const int64_t json_len = t && te ? (int64_t)(te - t - 8) : -1;
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p x -n %d --temp 0 --ignore-eos 2>/dev/null", cli, model, n_gen);
    int rc2 = test_run(cmd, out, sizeof out);
    const int64_t stream_len = (int64_t)strlen(out) - 2; // the prompt "x" and the closing newline
    const bool ok = rc == 0 && rc2 == 0 && n_ids == n_gen && n_long > 0 && json_len == 300 * n_long && stream_len == 300 * n_long;
    test_result(ok, name, "exit %d/%d, %lld ids (%lld long): json text %lld bytes, stream %lld bytes, want %lld", rc, rc2,
                (long long)n_ids, (long long)n_long, (long long)json_len, (long long)stream_len, (long long)(300 * n_long));
}

// Runs `sh -c cmd` with stderr on a pseudo-terminal (stdout as cmd redirects it); what the terminal got.
static int run_on_pty(const char *cmd, char *out, size_t cap) {
    out[0] = 0;
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0) {
        if (m >= 0) close(m);
        return -2;
    }
    const char *sname = ptsname(m);
    pid_t pid = sname ? fork() : -1;
    if (pid == 0) {
        setsid();
        int s = open(sname, O_RDWR);
        if (s < 0) _exit(126);
        dup2(s, 2);
        close(s);
        close(m);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    size_t n = 0;
    ssize_t r;
    while (pid > 0 && n + 1 < cap && (r = read(m, out + n, cap - 1 - n)) > 0) n += (size_t)r; // EIO once the child exits
    out[n] = 0;
    int st = 0;
    if (pid > 0) waitpid(pid, &st, 0);
    close(m);
    return pid > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Prefill progress: on stderr when it is a terminal, never with --no-progress, --json or a redirected stderr.
static void progress(const char *cli, const char *model, const char *dir) {
    char prompt[600], cmd[4096];
    static char out[1 << 16];
    snprintf(prompt, sizeof prompt, "%s/long.txt", dir);
    FILE *f = fopen(prompt, "w");
    for (int i = 0; f && i < 10; i++) fputs("Once upon a time there was a little girl. ", f);
    if (f) fclose(f);
    const char *base = "generate -m %s -f %s -n 2 --temp 0 --ubatch 32 -c 4096";
    char gen[2048];
    snprintf(gen, sizeof gen, base, model, prompt);
    snprintf(cmd, sizeof cmd, "%s %s >/dev/null", cli, gen);
    int rc = run_on_pty(cmd, out, sizeof out);
    if (rc == -2) {
        test_skip("cli: prefill progress", "no pseudo-terminal available");
        return;
    }
    test_result(rc == 0 && strstr(out, "prefill 32/") && strstr(out, " tokens (") && strstr(out, "tok/s") && strstr(out, "\r\033[K"),
                "cli: a long prefill shows progress (done/total, tok/s) when stderr is a terminal", "exit %d: %.300s", rc, out);
    snprintf(cmd, sizeof cmd, "%s %s --no-progress >/dev/null", cli, gen);
    rc = run_on_pty(cmd, out, sizeof out);
    test_result(rc == 0 && !strstr(out, "prefill"), "cli: --no-progress shows none", "exit %d: %.300s", rc, out);
    snprintf(cmd, sizeof cmd, "%s %s --json >/dev/null", cli, gen);
    rc = run_on_pty(cmd, out, sizeof out);
    test_result(rc == 0 && !strstr(out, "prefill"), "cli: --json shows no progress", "exit %d: %.300s", rc, out);
    snprintf(cmd, sizeof cmd, "%s %s 2>&1 >/dev/null | cat >&2", cli, gen);
    rc = run_on_pty(cmd, out, sizeof out);
    test_result(rc == 0 && !strstr(out, "prefill"), "cli: no progress when stderr is not a terminal", "exit %d: %.300s", rc, out);
}

// One rule for byte sizes everywhere: K/M/G/T (and KiB...) are powers of 1024, KB/MB/GB/TB powers of 1000.
static void byte_sizes(void) {
    static const struct {
        const char *s;
        int64_t v;
    } ok_cases[] = {{"4096", 4096},       {"64K", 65536},          {"64KiB", 65536},         {"1.5M", 1572864},
                    {"7G", 7516192768LL}, {"7GiB", 7516192768LL}, {"7GB", 7000000000LL},     {"7gb", 7000000000LL},
                    {"2T", 2199023255552LL}, {"3KB", 3000},         {"10B", 10},               {"1MB", 1000000}};
    static const char *bad[] = {"", "x", "7Q", "-1", "1e30", "7 G", "G"};
    bool ok = true;
    char why[256] = "";
    for (size_t i = 0; i < sizeof ok_cases / sizeof ok_cases[0]; i++) {
        int64_t v = -1;
        if (!kvt_parse_bytes(ok_cases[i].s, &v) || v != ok_cases[i].v) {
            ok = false;
            snprintf(why, sizeof why, "'%s' -> %lld, want %lld", ok_cases[i].s, (long long)v, (long long)ok_cases[i].v);
        }
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t v = -1;
        if (kvt_parse_bytes(bad[i], &v)) {
            ok = false;
            snprintf(why, sizeof why, "'%s' accepted as %lld", bad[i], (long long)v);
        }
    }
    test_result(ok, "cli: byte sizes: K/M/G/T = KiB/MiB/GiB/TiB, KB/MB/GB/TB = 10^3..10^12, garbage refused", "%s", why);
}

void test_cli_user(const test_env *env) {
    const char *cli = env->cli;
    byte_sizes();
    if (!test_file_exists(cli)) {
        test_skip("cli_user", "kvtier binary not built");
        return;
    }
    char dir[] = "/tmp/kvt_userXXXXXX";
    if (!mkdtemp(dir)) {
        test_result(false, "cli: temporary directory", "%s", strerror(errno));
        return;
    }
    char model[512], other[512], cmd[4096], args[4096];
    static char out[1 << 16];
    snprintf(model, sizeof model, "%s/tiny.gguf", dir);
    snprintf(other, sizeof other, "%s/other.gguf", dir);
    snprintf(cmd, sizeof cmd,
             "%s mkmodel --arch llama --dim 64 --layers 2 --heads 2 --vocab 300 --ctx 4096 --type f32 -o %s -q && "
             "%s mkmodel --arch llama --dim 64 --layers 3 --heads 2 --vocab 300 --ctx 4096 --type f32 -o %s -q",
             cli, model, cli, other);
    int rc = test_run(cmd, out, sizeof out);
    if (rc != 0) {
        test_result(false, "cli: mkmodel of the test models", "exit %d: %s", rc, out);
        remove_dir(dir);
        return;
    }
    // Ctrl-C, SIGTERM, SIGKILL: the KV disk file is unlinked at creation
    signal_leaves_no_file(cli, model, SIGINT, "SIGINT (Ctrl-C)");
    signal_leaves_no_file(cli, model, SIGTERM, "SIGTERM");
    signal_leaves_no_file(cli, model, SIGKILL, "SIGKILL");

    // contradictory or empty flags
    snprintf(args, sizeof args, "generate -m %s -p hi -f /etc/hostname -n 1", model);
    expect_fail("cli: -p together with -f is refused", cli, args, 2, (const char *const[]){"-p", "-f", "not both", NULL});
    snprintf(args, sizeof args, "generate -m %s -p hi -n 1 --kv-disk ''", model);
    expect_fail("cli: --kv-disk '' (an empty path) is refused", cli, args, 1, (const char *const[]){"--kv-disk", "empty", NULL});
    snprintf(args, sizeof args, "generate -m %s -p hi -n 1 --kv-fast 1M --kv-disk-max 1G", model);
    expect_fail("cli: --kv-disk-max without --kv-disk is refused", cli, args, 1,
                (const char *const[]){"--kv-disk-max", "without --kv-disk", NULL});

    // a FIFO is refused at once (the open never waits for a writer)
    char fifo[600];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    if (mkfifo(fifo, 0600) == 0) {
        snprintf(args, sizeof args, "info -m %s", fifo);
        expect_fail("cli: info -m FIFO is refused at once", cli, args, 1, (const char *const[]){fifo, "not a regular file", NULL});
        snprintf(args, sizeof args, "generate -m %s -p hi -n 1 --kv-fast 1M --kv-load %s", model, fifo);
        expect_fail("cli: generate --kv-load FIFO is refused at once", cli, args, 1,
                    (const char *const[]){fifo, "not a regular file", NULL});
    } else {
        test_skip("cli: FIFO inputs", "mkfifo failed");
    }

    // kvbench: an error in a later set-up (a fast tier of 1/4 of a 19-position KV holds no block) frees everything
    // (under `make asan` a leak would change the exit code)
    snprintf(args, sizeof args, "kvbench -m %s --ctx 16 -n 3 --only a --policies lru --dir %s", model, dir);
    expect_fail("cli: kvbench fails cleanly (exit 1, no leak) when a set-up cannot start", cli, args, 1,
                (const char *const[]){"--kv-fast", "holds no block", NULL});
    // kvbench: lists and the directory checked before the model loads (exit 2, the item named)
    snprintf(args, sizeof args, "kvbench -m %s --only a,,b", model);
    expect_fail("cli: kvbench --only with an empty item is refused", cli, args, 2,
                (const char *const[]){"--only", "empty item", NULL});
    snprintf(args, sizeof args, "kvbench -m %s --policies lru,fifo", model);
    expect_fail("cli: kvbench --policies with an unknown policy is refused by name", cli, args, 2,
                (const char *const[]){"--policies", "'fifo'", "lookahead", NULL});
    snprintf(args, sizeof args, "kvbench -m %s --dir %s", model, model);
    expect_fail("cli: kvbench --dir naming a file is refused", cli, args, 2,
                (const char *const[]){"--dir", "not a directory", NULL});
    snprintf(args, sizeof args, "kvbench -m %s --dir %s/nosuchdir", model, dir);
    expect_fail("cli: kvbench --dir naming no directory is refused", cli, args, 2,
                (const char *const[]){"nosuchdir", "No such file", NULL});

    kvbench_json(cli, model, dir);
    long_tokens(cli, dir);
    progress(cli, model, dir);

    // a context past the training context warns (generate and plan)
    snprintf(args, sizeof args, "%s generate -m %s -p hi -n 1 -c 5000 --temp 0 2>&1 >/dev/null", cli, model);
    rc = test_run(args, out, sizeof out);
    test_result(rc == 0 && strstr(out, "warning") && strstr(out, "5000") && strstr(out, "training context (4096)"),
                "cli: generate -c past the training context warns, naming both", "exit %d: %s", rc, out);
    snprintf(args, sizeof args, "%s plan -m %s --ctx 5000 --profile profiles/rtx4060-laptop.json 2>&1", cli, model);
    rc = test_run(args, out, sizeof out);
    test_result(rc == 0 && strstr(out, "WARNING") && strstr(out, "training context (4096)"),
                "cli: plan --ctx past the training context says so", "exit %d: %.400s", rc, out);

    // plans: argument errors before profiling; infeasible plans not written; a plan belongs to its model
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    expect_fail("cli: plan --shape nosuch is refused before profiling the machine", cli, "plan --shape nosuch", 2,
                (const char *const[]){"unknown shape 'nosuch'", NULL});
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    test_result(secs < 3, "cli: plan --shape nosuch answers at once", "%.1f s", secs);
    char plan[600];
    snprintf(plan, sizeof plan, "%s/plan.json", dir);
    snprintf(args, sizeof args, "plan --shape qwen3-8b --profile profiles/rtx4060-laptop.json --ram 1G -o %s", plan);
    expect_fail("cli: plan -o refuses to write an infeasible plan, naming the overflowing tier", cli, args, 1,
                (const char *const[]){"not written", "infeasible", "overflows", NULL});
    test_result(!test_file_exists(plan), "cli: no plan file is left after an infeasible plan", "%s exists", plan);
    snprintf(args, sizeof args, "%s plan -m %s --ctx 512 --profile profiles/rtx4060-laptop.json -o %s >/dev/null 2>&1 && "
                                "%s generate -m %s -p hi -n 2 --temp 0 --plan %s --json 2>&1",
             cli, model, plan, cli, model, plan);
    rc = test_run(args, out, sizeof out);
    test_result(rc == 0 && strstr(out, "\"store\":\"paged\""), "cli: a plan is accepted for the model it was made for",
                "exit %d: %.300s", rc, out);
    snprintf(args, sizeof args, "generate -m %s -p hi -n 2 --plan %s", other, plan);
    expect_fail("cli: a plan made for another model is refused, naming both", cli, args, 1,
                (const char *const[]){"--plan", model, other, "layers 2", "layers 3", NULL});
    remove_dir(dir);
}
