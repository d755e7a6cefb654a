// test_cli.c - the kvtier command end to end: outputs and clean failures on
// bad input (one error line, non-zero exit, never a crash).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "test_util.h"

// Runs a shell command; returns its exit status (-1 if killed by a signal) and its output.
static int run(const char *cmd, char *out, size_t cap) {
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    if (WIFSIGNALED(st)) return -1;
    return WEXITSTATUS(st);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

// Expects a failure with exit code `code`, exactly one line on stderr containing `needle`.
static void expect_error(const char *name, const char *cli, const char *args, int code, const char *needle) {
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1 >/dev/null", cli, args);
    int rc = run(cmd, out, sizeof out);
    test_result(rc == code && count_lines(out) == 1 && strstr(out, needle) != NULL, name,
                "exit %d (want %d), stderr: %s", rc, code, out);
}

// Expects `kvtier ARGS` (stdin from /dev/null unless ARGS pipes) to exit 0 and print exactly want on stdout.
static void expect_out(const char *name, const char *cli, const char *args, const char *want) {
    char cmd[4096], out[8192];
    snprintf(cmd, sizeof cmd, "%s %s 2>/dev/null </dev/null", cli, args);
    int rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && !strcmp(out, want), name, "exit %d, want %s got %s", rc, want, out);
}

// `kvtier tokenize` with llama-tokenize's flags and defaults: the ids below are llama-tokenize's (the peer built from
// llama-cpp-python 0.3.36) for the same command line, e.g. `llama-tokenize -m M -p '<|im_start|>hi\nthere' --ids`.
static void cli_tokenize_llama(const test_env *env, const char *vocab) {
    char args[2048];
    // the vocabulary-only llama SPM file of tests/data: escapes processed and <s> parsed by default
    snprintf(args, sizeof args, "tokenize -m %s -p 'Hello\\tworld <s>' --ids", vocab);
    expect_out("cli: tokenize -p 'Hello\\tworld <s>' --ids: llama-tokenize's ids (escape, special text parsed)", env->cli,
               args, "[1, 15043, 12, 11526, 29871, 1]\n");
    snprintf(args, sizeof args, "tokenize -m %s -p 'Hello\\tworld <s>'", vocab);
    expect_out("cli: tokenize without --ids: the same defaults, the ids space separated", env->cli, args,
               "1 15043 12 11526 29871 1\n");
    snprintf(args, sizeof args, "tokenize -m %s -p 'Hello\\tworld <s>' --ids --no-escape --no-parse-special", vocab);
    expect_out("cli: tokenize --no-escape --no-parse-special: llama-tokenize's ids", env->cli, args,
               "[1, 15043, 29905, 7516, 1613, 529, 29879, 29958]\n");
    snprintf(args, sizeof args, "tokenize -m %s -p 'Hello\\tworld <s>' --pieces --show-count", vocab);
    expect_out("cli: tokenize --pieces --show-count: llama-tokenize's default table and count line", env->cli, args,
               "     1 -> '<s>'\n 15043 -> ' Hello'\n    12 -> '\t'\n 11526 -> 'world'\n 29871 -> ' '\n"
               "     1 -> '<s>'\nTotal number of tokens: 6\n");
    snprintf(args, sizeof args, "tokenize -m %s -p ''", vocab);
    expect_error("cli: tokenize -p '': refused as no text, as llama-tokenize", env->cli, args, 2, "-p TEXT, -f FILE or --stdin");
    if (!env->smollm2 || !test_file_exists(env->smollm2)) {
        test_skip("cli: tokenize on SmolLM2 against llama-tokenize", "SmolLM2 model file missing (set KVT_SMOLLM2)");
    } else {
        snprintf(args, sizeof args, "tokenize -m %s -p '<|im_start|>hi\\nthere' --ids", env->smollm2);
        expect_out("cli: tokenize -m SmolLM2 -p '<|im_start|>hi\\nthere' --ids: llama-tokenize's ids", env->cli, args,
                   "[1, 6004, 198, 11527]\n");
        snprintf(args, sizeof args, "tokenize -m %s -p '<|im_start|>hi\\nthere' --ids --no-parse-special --no-escape",
                 env->smollm2);
        expect_out("cli: tokenize -m SmolLM2 --no-parse-special --no-escape --ids: llama-tokenize's ids", env->cli, args,
                   "[44, 108, 306, 79, 3738, 108, 46, 6004, 76, 399, 1531]\n");
        char cmd[2048], out[4096];
        snprintf(cmd, sizeof cmd, "printf '<|im_start|>user\\nHi<|im_end|>\\n' | %s tokenize -m %s --stdin --ids --show-count",
                 env->cli, env->smollm2);
        int rc = run(cmd, out, sizeof out);
        test_result(rc == 0 && !strcmp(out, "[1, 4093, 198, 26843, 2, 198]\nTotal number of tokens: 6\n"),
                    "cli: tokenize -m SmolLM2 --stdin --ids --show-count: llama-tokenize's ids and count", "exit %d: %s", rc,
                    out);
    }
    const char *gemma = getenv("KVT_GEMMA3");
    if (!gemma || !test_file_exists(gemma)) {
        test_skip("cli: tokenize on Gemma 3 against llama-tokenize", "Gemma 3 GGUF absent (make model-gemma3, KVT_GEMMA3)");
    } else {
        snprintf(args, sizeof args, "tokenize -m %s -p '<start_of_turn>user\\nHi<end_of_turn>' --ids", gemma);
        expect_out("cli: tokenize -m Gemma3 -p '<start_of_turn>user\\nHi<end_of_turn>' --ids: llama-tokenize's ids", env->cli,
                   args, "[2, 105, 2364, 107, 10979, 106]\n");
    }
}

void test_cli(const test_env *env) {
    char model[1024], vocab[1024], text[1024], cmd[4096];
    static char out[1 << 20];
    if (!test_file_exists(env->cli)) {
        test_skip("cli", "kvtier binary not built");
        return;
    }
    const char *missing = !test_data(env, "stories260K.gguf", model, sizeof model)                ? "stories260K.gguf"
                          : !test_data(env, "ggml-vocab-llama-spm.gguf", vocab, sizeof vocab) ? "ggml-vocab-llama-spm.gguf"
                          : !test_data(env, "story.txt", text, sizeof text)                    ? "story.txt"
                                                                                              : NULL;
    if (missing) {
        test_skip("cli: commands on the test models", test_data_missing(env, missing));
        return;
    }
    // happy paths
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p 'Once upon a time' -n 8 --temp 0 --json", env->cli, model);
    int rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && strstr(out, "\"prompt_ids\":[1,438,113,346,318,115,265,263,260,326,104]") &&
                    strstr(out, "\"ids\":[463,449,306,461,458,327,473,372]") && strstr(out, "\"decode_tok_s\""),
                "cli: generate --json ids match llama.cpp", "exit %d: %.300s", rc, out);
    // llama.cpp's penalties, greedy: the ids llama-server (llama-cpp-python 0.3.36's llama.cpp) gave for the same
    // /completion request (temperature 0 with the same presence / frequency / repeat penalties and window; or with
    // typical_p, xtc_probability / xtc_threshold, top_n_sigma, dry_*; not typical_p after top_n_sigma, where llama.cpp's
    // entropy is NaN over the candidates top_n_sigma zeroed and kvtier counts 0 log 0 as 0)
    static const struct {
        const char *flags, *ids;
    } pen[] = {{"-n 16 -l 463-inf --logit-bias 306+2.5", // logit_bias [[463, false], [306, 2.5]]
                "\"ids\":[306,306,369,369,462,273,466,200,306,325,367,367,367,367,367,406]"},
               {"-n 24 --presence-penalty 1.5 --frequency-penalty 0.5 --repeat-penalty 1.3",
                "\"ids\":[463,449,306,461,458,327,473,372,465,466,325,13,477,295,417,305,434,288,433,451,354,277,330,275]"},
               {"-n 24 --presence-penalty 0.7",
                "\"ids\":[463,449,306,461,458,327,473,372,465,466,325,13,477,295,417,305,434,288,433,449,473,473,473,473]"},
               {"-n 24 --repeat-penalty 1.5 --repeat-last-n 8",
                "\"ids\":[463,449,306,461,458,327,473,372,465,466,325,13,477,295,417,305,434,288,433,449,473,465,466,228]"},
               // samplers that can drop the argmax, greedy after them (typical_p, with and without top-k; xtc_*)
               {"-n 16 --typical 0.3", "\"ids\":[306,420,445,473,341,330,387,387,372,465,438,338,477,283,290,419]"},
               {"-n 16 --xtc-probability 1 --xtc-threshold 0.05",
                "\"ids\":[462,323,271,346,422,417,407,462,470,463,402,299,442,347,472,477]"},
               {"-n 16 --typical 0.6 --top-k 0",
                "\"ids\":[463,449,306,494,499,369,426,292,303,462,458,477,477,52,434,294]"},
               {"-n 16 --top-nsigma 1 --xtc-probability 1 --xtc-threshold 0.1",
                "\"ids\":[458,292,465,465,465,465,466,483,314,299,475,479,479,326,281,303]"},
               // DRY (greedy alone: [463,449,306,461,458,327,473,372,327,327,361,361,361,324,384,465,465,466,466,465,...])
               {"-n 24 --dry-multiplier 3 --dry-base 1.3 --dry-allowed-length 1 --dry-penalty-last-n 16",
                "\"ids\":[463,449,306,461,458,327,473,372,327,327,361,361,324,384,465,465,465,466,466,465,466,158,295,330]"},
               {"-n 24 --dry-multiplier 20 --dry-base 3 --dry-allowed-length 0 --dry-penalty-last-n 8",
                "\"ids\":[463,449,306,461,458,327,473,372,465,466,325,13,477,295,417,305,434,288,433,449,473,465,466,228]"}};
    for (size_t i = 0; i < sizeof pen / sizeof pen[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s generate -m %s -p 'Once upon a time' --temp 0 %s --json", env->cli, model,
                 pen[i].flags);
        rc = run(cmd, out, sizeof out);
        test_result(rc == 0 && strstr(out, pen[i].ids), "cli: generate with llama.cpp's penalties / logit biases gives llama-server's ids",
                    "%s: exit %d: %.300s", pen[i].flags, rc, out);
    }
    // --grammar: greedy under a grammar gives llama-server's ids for the same /completion request (its `grammar`; the
    // end-of-generation token 2 once the grammar is complete); a bad grammar is refused naming its line and column
    static const struct {
        const char *grammar, *ids;
    } gram[] = {{"root ::= (\" \" [a-z]{1,6}){3} \".\"", "\"ids\":[447,260,295,466,111,470,391,49,2]"},
                {"root ::= \"{\\\"name\\\": \\\"\" [A-Za-z]{1,8} \"\\\"}\"",
                 "\"ids\":[126,37,113,100,112,104,37,61,35,37,434,434,430,333,37,128,2]"}};
    for (size_t i = 0; i < sizeof gram / sizeof gram[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s generate -m %s -p 'Once upon a time' --temp 0 -n 24 --grammar '%s' --json", env->cli,
                 model, gram[i].grammar);
        rc = run(cmd, out, sizeof out);
        test_result(rc == 0 && strstr(out, gram[i].ids), "cli: generate --grammar gives llama-server's ids",
                    "%s: exit %d: %.300s", gram[i].grammar, rc, out);
    }
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p x -n 4 --grammar 'root ::= (\"a\"' 2>&1", env->cli, model);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 2 && strstr(out, "--grammar") && strstr(out, "line 1 column"),
                "cli: a bad --grammar is refused (exit 2) naming its line and column", "exit %d: %.300s", rc, out);
#ifdef KVT_HAVE_JANSSON
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p x --temp 0.9 -s 3 -n 24 -j '{\"enum\": [\"red\", 12, null]}' --json",
             env->cli, model);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && (strstr(out, "\"text\":\"\\\"red\\\"\"") || strstr(out, "\"text\":\"12\"") ||
                            strstr(out, "\"text\":\"null\"")),
                "cli: generate -j (a JSON schema) answers one of its values", "exit %d: %.300s", rc, out);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p x -n 4 -j '{\"type\": \"strin\"}' 2>&1", env->cli, model);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 2 && strstr(out, "strin"), "cli: a bad -j schema is refused (exit 2) naming the keyword",
                "exit %d: %.300s", rc, out);
#else
    test_skip("cli: generate -j (a JSON schema)", "built without libjansson (apt-get install libjansson-dev)");
    test_skip("cli: a bad -j schema is refused", "built without libjansson (apt-get install libjansson-dev)");
#endif
    // DRY's flags: a base under 1 is refused (llama-cli keeps its default silently); breakers through the escapes
    // of -p ("\\n" a newline: the same ids as DRY's default set, whose other members never occur here), "none"
    static const char *const dry_bad[][2] = {{"--dry-base", "0.5"}, {"--dry-allowed-length", "-1"},
                                             {"--dry-penalty-last-n", "x"}};
    for (size_t i = 0; i < sizeof dry_bad / sizeof dry_bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s generate -m %s -p x -n 1 --dry-multiplier 1 %s %s 2>&1", env->cli, model,
                 dry_bad[i][0], dry_bad[i][1]);
        rc = run(cmd, out, sizeof out);
        test_result(rc == 2 && strstr(out, dry_bad[i][0]) != NULL, "cli: a bad DRY flag is refused (exit 2) naming it",
                    "%s: exit %d: %.200s", dry_bad[i][0], rc, out);
    }
    char dry_out[2][512];
    const char *const dry_args[2] = {"", "--dry-sequence-breaker '\\n' --dry-sequence-breaker : "
                                         "--dry-sequence-breaker '\"' --dry-sequence-breaker '*'"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s generate -m %s -p 'Once upon a time' -n 24 --temp 0 --dry-multiplier 3 --dry-base "
                 "1.3 --dry-allowed-length 1 --dry-penalty-last-n 16 %s --json 2>/dev/null | grep -o '\"ids\":\\[[0-9,]*\\]'",
                 env->cli, model, dry_args[i]);
        rc = run(cmd, out, sizeof out);
        const size_t len = rc == 0 ? strnlen(out, sizeof dry_out[i] - 1) : 0;
        memcpy(dry_out[i], out, len);
        dry_out[i][len] = 0;
    }
    test_result(dry_out[0][0] && !strcmp(dry_out[0], dry_out[1]),
                "cli: --dry-sequence-breaker with -p's escapes gives the default set's ids", "%s / %s", dry_out[0],
                dry_out[1]);
    // --ignore-eos bans every end-of-generation token (llama.cpp's -inf bias), so even a +100 bias on EOS (id 2) does
    // not bring it: the ids llama-server gave for {"ignore_eos": true, "logit_bias": [[2, 100]], "temperature": 0}
    // (before 2026-12-06 kvtier emitted EOS 16 times and went on); greedy under the ban is deterministic, and a
    // sampled run with --ignore-eos makes exactly -n tokens, none of them EOS
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p 'Once upon a time' -n 16 --temp 0 --ignore-eos -l 2+100 --json", env->cli,
             model);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && strstr(out, "\"ids\":[463,449,306,461,458,327,473,372,327,327,361,361,361,324,384,465]"),
                "cli: generate --ignore-eos bans end-of-generation tokens (llama-server's ids)", "exit %d: %.300s", rc, out);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p 'Once upon a time' -n 64 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 -s 3 "
             "--ignore-eos -l 2+4 --json", env->cli, model);
    rc = run(cmd, out, sizeof out);
    const char *ids_at = strstr(out, "\"ids\":[");
    int n_ids = 0, n_eos = 0;
    for (const char *q = ids_at ? ids_at + 6 : ""; *q && *q != ']'; q++) {
        if (*q == '[' || *q == ',') {
            n_ids++;
            n_eos += atoi(q + 1) == 2;
        }
    }
    test_result(rc == 0 && n_ids == 64 && n_eos == 0, "cli: sampled generate --ignore-eos makes exactly -n tokens, none EOS",
                "exit %d: %d ids, %d EOS: %.200s", rc, n_ids, n_eos, out);
    // -p's escapes processed by default (llama.cpp's -e), taken as they are with --no-escape
    char esc[3][512];
    const char *const esc_args[3] = {"-p 'Once\\nupon'", "-p 'Once\\nupon' --no-escape", "-p \"$(printf 'Once\\nupon')\""};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s generate -m %s %s -n 1 --temp 0 --json 2>/dev/null | grep -o '\"prompt_ids\":\\[[0-9,]*\\]'",
                 env->cli, model, esc_args[i]);
        rc = run(cmd, out, sizeof out);
        size_t len = rc == 0 ? strnlen(out, sizeof esc[i] - 1) : 0;
        memcpy(esc[i], out, len);
        esc[i][len] = 0;
    }
    test_result(esc[0][0] && !strcmp(esc[0], esc[2]) && esc[1][0] && strcmp(esc[0], esc[1]) != 0,
                "cli: generate -p processes escapes (as llama.cpp's -e), --no-escape takes them as they are",
                "escaped %s, --no-escape %s, a real newline %s", esc[0], esc[1], esc[2]);
    // -s is --seed (llama.cpp's short flag)
    char sampled[2][512];
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s generate -m %s -p 'Once upon a time' -n 16 --temp 1 %s 7 --json 2>/dev/null | "
                 "grep -o '\"ids\":\\[[0-9,]*\\]'", env->cli, model, i ? "-s" : "--seed");
        rc = run(cmd, out, sizeof out);
        size_t len = rc == 0 ? strnlen(out, sizeof sampled[i] - 1) : 0;
        memcpy(sampled[i], out, len);
        sampled[i][len] = 0;
    }
    test_result(sampled[0][0] && !strcmp(sampled[0], sampled[1]), "cli: -s S samples as --seed S", "%s / %s", sampled[0],
                sampled[1]);
    char dump[] = "/tmp/kvt_logits_XXXXXX";
    int fd = mkstemp(dump);
    close(fd);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p 'Once upon a time' -n 1 --temp 0 --dump-logits %s >/dev/null 2>&1", env->cli,
             model, dump);
    rc = run(cmd, out, sizeof out);
    int64_t nl = 0;
    float *l = test_read_floats(dump, &nl);
    test_result(rc == 0 && nl == 512, "cli: --dump-logits writes one value per vocabulary entry", "exit %d, %lld values", rc,
                (long long)nl);
    free(l);
    unlink(dump);
    snprintf(cmd, sizeof cmd, "printf 'Hello world' > /tmp/kvt_tok.txt && %s tokenize -m %s -f /tmp/kvt_tok.txt", env->cli,
             vocab);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && !strcmp(out, "1 15043 3186\n"), "cli: tokenize on a vocabulary-only GGUF", "exit %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s -f /tmp/kvt_tok.txt --no-bos", env->cli, vocab);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && !strcmp(out, "15043 3186\n"), "cli: tokenize --no-bos", "exit %d: %s", rc, out);
    cli_tokenize_llama(env, vocab);
    // beam --rescore-dense: every beam's dense_score in the JSON (and, without --sparse, equal to its score)
    snprintf(cmd, sizeof cmd, "%s beam -m %s -p 'Once upon a time' --beams 2 --width 2 --step 4 -n 8 --rescore-dense --json",
             env->cli, model);
    rc = run(cmd, out, sizeof out);
    {
        const char *sc = strstr(out, "\"score\":"), *ds = strstr(out, "\"dense_score\":");
        bool same = sc && ds && !strncmp(sc + 8, ds + 14, 12);
        test_result(rc == 0 && same, "cli: beam --rescore-dense --json gives each beam's dense_score (= score without --sparse)",
                    "exit %d: %.400s", rc, out);
    }
    snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s -c 32 --json", env->cli, model, text);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && strstr(out, "\"ppl\":") && strstr(out, "\"n_chunks\":"), "cli: perplexity --json", "exit %d: %s",
                rc, out);
    { // llama-perplexity's -f drops one trailing newline of the file: the text ending in '\n' counts as the text without it
        char nl_out[4096];
        snprintf(cmd, sizeof cmd,
                 "printf '%%s' \"$(cat %s)\" > /tmp/kvt_ppl_nonl.txt && %s perplexity -m %s -f /tmp/kvt_ppl_nonl.txt -c 32 --chunks 1 --json",
                 text, env->cli, model);
        int rc1 = run(cmd, nl_out, sizeof nl_out);
        snprintf(cmd, sizeof cmd,
                 "printf '%%s\\n' \"$(cat %s)\" > /tmp/kvt_ppl_nl.txt && %s perplexity -m %s -f /tmp/kvt_ppl_nl.txt -c 32 --chunks 1 --json",
                 text, env->cli, model);
        rc = run(cmd, out, sizeof out);
        const char *a = strstr(nl_out, "\"n_tokens\":"), *b = strstr(out, "\"n_tokens\":");
        test_result(rc1 == 0 && rc == 0 && a && b && atoll(a + 11) == atoll(b + 11),
                    "cli: perplexity drops one trailing newline of -f FILE, as llama-perplexity", "exit %d/%d: %.200s | %.200s",
                    rc1, rc, nl_out, out);
        unlink("/tmp/kvt_ppl_nonl.txt");
        unlink("/tmp/kvt_ppl_nl.txt");
    }
    { // the final line carries llama-perplexity's "+/- ERR" (PPL times the standard error of the mean NLL)
        snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s -c 32 --chunks 4 2>/dev/null", env->cli, model, text);
        rc = run(cmd, out, sizeof out);
        double p = 0, e = 0;
        const char *f = strstr(out, "Final estimate: PPL = ");
        bool ok = f && sscanf(f, "Final estimate: PPL = %lf +/- %lf (", &p, &e) == 2;
        test_result(rc == 0 && ok && e > 0 && e < p, "cli: perplexity prints PPL +/- its error, as llama-perplexity",
                    "exit %d: %.300s", rc, out);
    }
    // perplexity's -c defaults to 512 (as llama-perplexity), not to the training context the engine help names
    snprintf(cmd, sizeof cmd, "%s perplexity --help", env->cli);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && strstr(out, "-c CTX here is the chunk size, default 512") && strstr(out, "--kl-divergence-base BASE") &&
                    strstr(out, "--kl-divergence ") && strstr(out, "--ppl-stride N") && strstr(out, "-b, --batch-size N"),
                "cli: perplexity --help names its -c default of 512", "exit %d: %.300s", rc, out);
    { // --kl-divergence-base / --kl-divergence, llama-perplexity's pair, on its file format
        char kld[64], cut[80], vocab_model[1024], llama_base[1024];
        snprintf(kld, sizeof kld, "/tmp/kvt_ppl_%d.kld", (int)getpid());
        snprintf(cut, sizeof cut, "/tmp/kvt_ppl_%d_cut.kld", (int)getpid());
        snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s -c 32 --chunks 2 --kl-divergence-base %s --json", env->cli, model,
                 text, kld);
        rc = run(cmd, out, sizeof out);
        FILE *f = fopen(kld, "rb");
        long size = -1;
        if (f && !fseek(f, 0, SEEK_END)) size = ftell(f);
        if (f) fclose(f);
        // 20 header bytes, 2 x 32 tokens, 2 chunks x 15 rows x (512 + 4) uint16
        test_result(rc == 0 && size == 20 + 2 * 32 * 4 + 2 * 15 * 516 * 2 && strstr(out, "\"ppl\":"),
                    "cli: perplexity --kl-divergence-base writes llama-perplexity's base file", "exit %d, %ld bytes: %.300s", rc,
                    size, out);
        snprintf(cmd, sizeof cmd, "%s perplexity -m %s --kl-divergence-base %s --kl-divergence --json", env->cli, model, kld);
        rc = run(cmd, out, sizeof out);
        const char *k = strstr(out, "\"kld\":"), *t = strstr(out, "\"same_top\":"), *n = strstr(out, "\"n_scored\":");
        // (not PPL(Q) = PPL(base): the file keeps 16 nats below the top, and this model puts many next tokens lower)
        const char *r = strstr(out, "\"p_diff_rms\":");
        test_result(rc == 0 && k && t && n && r && fabs(atof(k + 6)) < 1e-3 && atof(t + 11) > 0.99 && atoll(n + 11) == 30 &&
                        atof(r + 13) < 1e-4,
                    "cli: perplexity --kl-divergence of a model against its own base file: KL ~0, same top, no delta p, 30 positions",
                    "exit %d: %.600s", rc, out);
        snprintf(cmd, sizeof cmd, "%s perplexity -m %s --kl-divergence-base %s --kl-divergence 2>&1 >/dev/null", env->cli, model,
                 kld);
        run(cmd, out, sizeof out);
        snprintf(cmd, sizeof cmd, "%s perplexity -m %s --kl-divergence-base %s --kl-divergence 2>/dev/null", env->cli, model, kld);
        char txt[8192];
        rc = run(cmd, txt, sizeof txt);
        test_result(rc == 0 && strstr(txt, "Mean    KLD:") && strstr(txt, "Same top p:") && strstr(txt, "RMS \xce\x94p    :") &&
                        strstr(txt, "Mean PPL(Q)/PPL(base)         :") && strstr(out, "KL Divergence") && strstr(out, "\n   2 "),
                    "cli: perplexity --kl-divergence prints llama-perplexity's statistics (stdout) and chunk table (stderr)",
                    "exit %d: %.500s | %.300s", rc, txt, out);
        // a base file llama-perplexity wrote (stories260K, story.txt, -c 32 -b 32 --chunks 2): read as kvtier's own
        if (test_data(env, "stories260K.c32.kld", llama_base, sizeof llama_base)) {
            snprintf(cmd, sizeof cmd, "%s perplexity -m %s --kl-divergence-base %s --kl-divergence --json", env->cli, model,
                     llama_base);
            rc = run(cmd, out, sizeof out);
            k = strstr(out, "\"kld\":"), t = strstr(out, "\"same_top\":"), n = strstr(out, "\"n_scored\":");
            const char *pb = strstr(out, "\"ppl_base\":");
            test_result(rc == 0 && k && t && n && pb && fabs(atof(k + 6)) < 0.01 && atof(t + 11) > 0.9 && atoll(n + 11) == 30,
                        "cli: perplexity --kl-divergence reads a base file written by llama-perplexity (stories260K)",
                        "exit %d: %.600s", rc, out);
            // and kvtier's own base file holds the same tokens as llama's (same header and token block)
            char cmp[2300];
            snprintf(cmp, sizeof cmp, "cmp -n %d %s %s", 20 + 2 * 32 * 4, kld, llama_base);
            rc = system(cmp);
            test_result(rc == 0, "cli: kvtier's base file has llama-perplexity's header and tokens byte for byte", "cmp: %d",
                        rc);
        } else {
            test_skip("cli: perplexity --kl-divergence reads a base file of llama-perplexity",
                      test_data_missing(env, "stories260K.c32.kld"));
        }
        // hostile base files: one error line naming the file, the field and its offset
        snprintf(cmd, sizeof cmd, "head -c 1000 %s > %s", kld, cut);
        rc = system(cmd);
        snprintf(cmd, sizeof cmd, "perplexity -m %s --kl-divergence-base %s --kl-divergence", model, cut);
        expect_error("cli: perplexity --kl-divergence refuses a truncated base file by field and offset", env->cli, cmd, 1,
                     "truncated: the log-probabilities of chunk 0 at offset 276");
        snprintf(cmd, sizeof cmd, "perplexity -m %s --kl-divergence-base %s --kl-divergence", model, text);
        expect_error("cli: perplexity --kl-divergence refuses a file without the _logits_ magic", env->cli, cmd, 1,
                     "magic at offset 0 is");
        if (test_data(env, "llama-2-tiny-random.gguf", vocab_model, sizeof vocab_model)) {
            snprintf(cmd, sizeof cmd, "perplexity -m %s --kl-divergence-base %s --kl-divergence", vocab_model, kld);
            expect_error("cli: perplexity --kl-divergence refuses a base file of another vocabulary", env->cli, cmd, 1,
                         "n_vocab at offset 12 is 512; the model's vocabulary has 32000");
        }
        snprintf(cmd, sizeof cmd, "perplexity -m %s --kl-divergence", model);
        expect_error("cli: perplexity --kl-divergence without a base file", env->cli, cmd, 2, "--kl-divergence-base");
        unlink(kld);
        unlink(cut);
    }
    { // --ppl-stride as llama-perplexity's strided path; its figure on this file (-c 32 -b 32 --ppl-stride 16: windows
      // of 256 tokens every 16, the last 16 scored): [1]93401.0496, ... ((804 - 256 + 15) / 16 = 35 windows)
        snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s -c 32 --ppl-stride 16 --chunks 1 --json", env->cli, model, text);
        rc = run(cmd, out, sizeof out);
        const char *pp = strstr(out, "\"ppl\":"), *n = strstr(out, "\"n_scored\":");
        test_result(rc == 0 && pp && n && fabs(atof(pp + 6) / 93401.0496 - 1) < 0.02 && atoll(n + 11) == 16,
                    "cli: perplexity --ppl-stride 16 -c 32: llama-perplexity's first window (256 tokens, 16 scored) within 2%",
                    "exit %d: %.300s", rc, out);
        snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s -c 32 --ppl-stride 16 --json", env->cli, model, text);
        rc = run(cmd, out, sizeof out);
        const char *nc = strstr(out, "\"n_chunks\":");
        test_result(rc == 0 && nc && atoll(nc + 11) == 35, "cli: perplexity --ppl-stride: llama-perplexity's window count",
                    "exit %d: %.300s", rc, out);
        snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s -c 32 --chunks 2 -b 7 --json", env->cli, model, text);
        rc = run(cmd, out, sizeof out);
        char out2[4096];
        snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s -c 32 --chunks 2 --json", env->cli, model, text);
        int rc2 = run(cmd, out2, sizeof out2);
        const char *a = strstr(out, "\"ppl\":"), *b = strstr(out2, "\"ppl\":");
        test_result(rc == 0 && rc2 == 0 && a && b && !strncmp(a, b, 24), "cli: perplexity -b N (tokens per pass) leaves the figure",
                    "exit %d/%d: %.200s | %.200s", rc, rc2, out, out2);
    }
    if (test_file_exists(env->smollm2)) { // a real model: its own base file read back, and its per-position statistics
        char kld[64];
        snprintf(kld, sizeof kld, "/tmp/kvt_ppl_%d_smol.kld", (int)getpid());
        snprintf(cmd, sizeof cmd,
                 "%s perplexity -m %s -f %s -c 64 --chunks 2 --kl-divergence-base %s >/dev/null 2>&1 && "
                 "%s perplexity -m %s --kl-divergence-base %s --kl-divergence --json",
                 env->cli, env->smollm2, text, kld, env->cli, env->smollm2, kld);
        rc = run(cmd, out, sizeof out);
        const char *k = strstr(out, "\"kld\":"), *t = strstr(out, "\"same_top\":");
        test_result(rc == 0 && k && t && atof(k + 6) < 1e-3 && atof(t + 11) > 0.95,
                    "cli: perplexity --kl-divergence, SmolLM2 against its own base file: KL < 1e-3, same top > 95%",
                    "exit %d: %.500s", rc, out);
        unlink(kld);
    } else {
        test_skip("cli: perplexity --kl-divergence on SmolLM2", "KVT_SMOLLM2 unset or SmolLM2 not found (make model)");
    }
    snprintf(cmd, sizeof cmd, "%s info -m %s", env->cli, model);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && strstr(out, "llama") && strstr(out, "KV per token"), "cli: info", "exit %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s bench -m %s -p 16 -n 4 -r 2 -o json", env->cli, model);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && strstr(out, "\"avg_ts\"") && strstr(out, "\"n_prompt\":16"), "cli: bench -o json", "exit %d: %s",
                rc, out);
    { // the tg test's probes beside its repetitions: one before the first and one after each (2 reps: 3), and their median share
        const char *pa = strstr(out, "\"probe_adjacent_gbps\":[");
        int n_probes = 0;
        for (const char *c = pa ? strchr(pa, '[') : NULL; c && *c && *c != ']'; c++) n_probes += *c == ',' || *c == '[';
        test_result(rc == 0 && strstr(out, "\"dram_pct_adjacent\":") && n_probes == 3,
                    "cli: bench -o json: a tg test's adjacent probes (reps + 1) and their median share", "%d probes: %s", n_probes, out);
    }
    test_result(rc == 0 && strstr(out, "\"dram_pct_paired\":") && strstr(out, "\"probe_paired_gbps\":") &&
                    strstr(out, "\"probe_paired_pattern\":"),
                "cli: bench -o json: a tg test's token-paired share", "exit %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s bench -m %s -p 0 -n 3 -r 1 --probe none", env->cli, model);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && strstr(out, "| tg3 |") && !strstr(out, "adjacent") && !strstr(out, "paired"),
                "cli: bench --probe none: no shares", "exit %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s bench -m %s -p 0 -n 3 -r 1 --probe paired", env->cli, model);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && strstr(out, "paired ") && !strstr(out, "adjacent"), "cli: bench --probe paired: that share alone",
                "exit %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s bench -m %s -p 0 -n 3 -r 1 --probe adjacent,nope 2>&1", env->cli, model);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 2 && strstr(out, "--probe"), "cli: bench --probe with an unknown item: refused (exit 2)", "exit %d: %s",
                rc, out);
    snprintf(cmd, sizeof cmd, "%s bench -m %s -p 8,16 -n 0,4 -r 1", env->cli, model);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && strstr(out, "| pp8 |") && strstr(out, "| pp16 |") && strstr(out, "| tg4 |") && !strstr(out, "tg0"),
                "cli: bench -p 8,16 -n 0,4: one test per size, as llama-bench's lists", "exit %d: %s", rc, out);
    // -d (llama-bench's n_depth): every test again after that many tokens in the cache, named "@ dN", depth by depth
    snprintf(cmd, sizeof cmd, "%s bench -m %s -p 8 -n 2 -d 0,16 -r 1", env->cli, model);
    rc = run(cmd, out, sizeof out);
    {
        const char *t0 = strstr(out, "| pp8 |"), *t1 = strstr(out, "| tg2 |"), *t2 = strstr(out, "| pp8 @ d16 |"),
                   *t3 = strstr(out, "| tg2 @ d16 |");
        test_result(rc == 0 && t0 && t1 && t2 && t3 && t0 < t1 && t1 < t2 && t2 < t3,
                    "cli: bench -d 0,16: each test at each depth, named as llama-bench's (pp8 @ d16)", "exit %d: %s", rc, out);
    }
    snprintf(cmd, sizeof cmd, "%s bench -m %s -p 8 -n 0 -d 16 -r 1 -o json", env->cli, model);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && strstr(out, "\"n_depth\":16") && strstr(out, "\"n_prompt\":8") && !strstr(out, "\"n_depth\":0"),
                "cli: bench -d 16 -o json: n_depth as llama-bench's json", "exit %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s bench -m %s -p 8 -n 0 -d 16,x -r 1 2>&1", env->cli, model);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 2 && strstr(out, "-d"), "cli: bench -d 16,x: refused (exit 2)", "exit %d: %s", rc, out);
    // a plan file configures the KV store; ids stay those of llama.cpp
    snprintf(cmd, sizeof cmd,
             "%s plan -m %s --ctx 512 --profile profiles/rtx4060-laptop.json -o /tmp/kvt_plan.json >/dev/null && "
             "%s generate -m %s -p 'Once upon a time' -n 8 --temp 0 --plan /tmp/kvt_plan.json --json",
             env->cli, model, env->cli, model);
    rc = run(cmd, out, sizeof out);
    test_result(rc == 0 && strstr(out, "\"ids\":[463,449,306,461,458,327,473,372]") && strstr(out, "\"store\":\"paged\""),
                "cli: generate --plan FILE configures the paged KV store", "exit %d: %.300s", rc, out);
    unlink("/tmp/kvt_plan.json");
    // a disk tier: the disk batches' counters, the victims written together before a late batch among them, are printed
    // per decoded token (decode) and as totals (kv), beside the bytes moved between tiers
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s -p 'Once upon a time' -n 8 --temp 0 --kv-fast 16K --kv-disk /tmp --kv-block 16 --json",
             env->cli, model);
    rc = run(cmd, out, sizeof out);
    const char *dec = strstr(out, "\"kv_miss_kinds_per_step\""), *kvo = strstr(out, "\"transfers_total\":"); // kv comes first
    const char *kvc = kvo ? strstr(kvo, "\"io_clean_blocks\":") : NULL;
    test_result(rc == 0 && strstr(out, "\"ids\":[463,449,306,461,458,327,473,372]") && dec && kvc && kvc < dec &&
                    strstr(kvo, "\"io_clean_batches\":") && strstr(kvo, "\"io_batch_blocks\":") &&
                    strstr(kvo, "\"io_ring_cancels\":0") &&
                    strstr(dec, "\"io_clean_batches\":") && strstr(dec, "\"io_clean_blocks\":"),
                "cli: generate --kv-disk --json prints the disk batches' counters, io_clean_* and io_ring_cancels included", "exit %d: %.600s", rc,
                out);
    // bad input: one clear line, non-zero exit
    expect_error("cli: missing model file", env->cli, "generate -m /nonexistent.gguf -p hi", 1, "/nonexistent.gguf");
    expect_error("cli: unknown flag", env->cli, "generate --bogus", 2, "unknown flag");
    { // -ngl without a CUDA library: refused, naming the flag and the library looked for
        char args[1400];
        snprintf(args, sizeof args, "generate -m %s -p hi -n 1 -ngl 1", model);
        char cli[1200];
        snprintf(cli, sizeof cli, "KVT_CUDA_LIB=/nonexistent/libkvtier-cuda.so %s", env->cli);
        expect_error("cli: -ngl without a CUDA library names it", cli, args, 1, "1 layers on the GPU (--gpu-layers or a plan's split): no CUDA library at /nonexistent");
    }
    { // a logit bias outside the vocabulary, or not in llama.cpp's TOKEN_ID(+/-)BIAS form: refused before any output
        char args[1400];
        snprintf(args, sizeof args, "generate -m %s -p hi -n 1 -l 4630+1", model);
        expect_error("cli: --logit-bias outside the vocabulary is refused, naming the token", env->cli, args, 1,
                     "token 4630 is outside the model's vocabulary (0..511)");
        snprintf(args, sizeof args, "generate -m %s -p hi -n 1 --logit-bias 463x1", model);
        expect_error("cli: --logit-bias in another form is refused", env->cli, args, 2, "want TOKEN_ID+BIAS");
    }
    expect_error("cli: unknown command", env->cli, "frobnicate", 2, "unknown command");
    expect_error("cli: bad number", env->cli, "generate -n ten", 2, "not an integer");
    snprintf(cmd, sizeof cmd, "generate -m %s -p 'Once upon a time there was a little girl' -c 8 -n 4", model);
    expect_error("cli: prompt longer than the context", env->cli, cmd, 1, "exceed the context");
    snprintf(cmd, sizeof cmd, "head -c 3000 %s > /tmp/kvt_trunc.gguf", model);
    if (system(cmd) == 0) {
        expect_error("cli: truncated GGUF", env->cli, "generate -m /tmp/kvt_trunc.gguf -p hi", 1, "/tmp/kvt_trunc.gguf");
        unlink("/tmp/kvt_trunc.gguf");
    }
    snprintf(cmd, sizeof cmd, "perplexity -m %s -f %s -c 4096", model, text);
    expect_error("cli: perplexity text too short", env->cli, cmd, 1, "at least");
    unlink("/tmp/kvt_tok.txt");
}
