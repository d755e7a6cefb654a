// cmd_tokenize.c - `kvtier tokenize`: the ids of a text, with llama-tokenize's flags and defaults (special-token
// text parsed, escapes processed, BOS as the model asks); printed space separated, or as llama-tokenize prints them.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/file.h"
#include "commands.h"
#include "common.h"

static const char usage[] =
    "usage: kvtier tokenize -m MODEL (-p TEXT | -f FILE | --stdin) [flags]\n"
    "  Reads only the tokenizer.* keys, so vocabulary-only GGUF files of any architecture work. The defaults are\n"
    "  llama-tokenize's: special-token text such as <|im_start|> is parsed, escapes are processed, BOS (and EOS)\n"
    "  are added when the model adds BOS. The same command line gives llama-tokenize's ids.\n"
    "  -m, --model FILE       the GGUF file\n"
    "  -p, --prompt TEXT      the text (an empty TEXT counts as none, as in llama-tokenize)\n"
    "  -f, --file FILE        the text is FILE's bytes, all of them (a trailing newline is tokenized)\n"
    "  --stdin                the text is standard input, read to its end\n"
    "                         (--stdin wins over -f, and -f over -p, as in llama-tokenize; a note says so)\n"
    "  --ids                  print the ids as llama-tokenize --ids does: [1, 2, 3]\n"
    "  --pieces               print llama-tokenize's default table: one line a token, '%6d -> 'PIECE''\n"
    "  --show-count           then print 'Total number of tokens: N'\n"
    "  --no-bos               add no BOS/EOS even if the model asks for them\n"
    "  --no-parse-special     special-token text is plain text (default: parsed)\n"
    "  --special              parse special-token text (the default; kept for older command lines)\n"
    "  -e, --escape           process \\n \\r \\t \\' \\\" \\\\ \\xHH in the text (the default)\n"
    "  --no-escape            take the text as it is\n"
    "  --log-disable          no notes on stderr (errors are still printed)\n"
    "  Deliberate differences from llama-tokenize: without --ids or --pieces the ids are printed space separated\n"
    "  on one line (kvtier's format since its first version); usage errors exit 2 (llama: 1); --log-disable keeps\n"
    "  the error line.\n";

static void print_ids(const int32_t *ids, int64_t n, bool list) {
    if (list) printf("[");
    for (int64_t i = 0; i < n; i++) printf(i ? (list ? ", %d" : " %d") : "%d", ids[i]);
    printf(list ? "]\n" : "\n");
}

// llama-tokenize's default output: the id right-aligned in 6 columns, then the token's bytes (special tokens as
// their text) in single quotes; invalid UTF-8 is written as it is (as llama-tokenize does outside Windows).
static bool print_pieces(const kvt_tokenizer *tok, const int32_t *ids, int64_t n) {
    char small[256], *buf = small;
    int64_t cap = sizeof small;
    bool ok = true;
    for (int64_t i = 0; i < n && ok; i++) {
        int64_t k = kvt_token_to_piece_ex(tok, ids[i], buf, cap, 0, true);
        if (k > cap) {
            char *b = malloc((size_t)k);
            if (!b) {
                ok = false;
                break;
            }
            if (buf != small) free(buf);
            buf = b;
            cap = k;
            k = kvt_token_to_piece_ex(tok, ids[i], buf, cap, 0, true);
        }
        printf("%6d -> '", ids[i]);
        fwrite(buf, 1, strnlen(buf, (size_t)k), stdout); // as llama-tokenize's printf("%s"): up to a NUL byte
        printf("'\n");
    }
    if (buf != small) free(buf);
    if (!ok) fprintf(stderr, "kvtier tokenize: out of memory\n");
    return ok;
}

// A flag without a value that sets one bool.
typedef struct {
    const char *name, *alias; // alias may be NULL
    bool *target;
    bool value;
} tok_switch;

// Applies flag if it is one of the switches; false if it is none of them.
static bool switch_flag(const char *flag, const tok_switch *sw, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(flag, sw[i].name) || (sw[i].alias && !strcmp(flag, sw[i].alias))) {
            *sw[i].target = sw[i].value;
            return true;
        }
    }
    return false;
}

int cmd_tokenize(int argc, char **argv) {
    kvt_args a = {"tokenize", argc, argv, 0};
    const char *model_path = NULL, *file = NULL, *prompt = NULL;
    bool no_bos = false, parse_special = true, escape = true, use_stdin = false, ids_list = false, pieces = false,
         show_count = false, quiet = false;
    const tok_switch switches[] = {
        {"--stdin", NULL, &use_stdin, true},           {"--no-bos", NULL, &no_bos, true},
        {"--special", NULL, &parse_special, true},     {"--no-parse-special", NULL, &parse_special, false},
        {"--escape", "-e", &escape, true},             {"--no-escape", NULL, &escape, false},
        {"--ids", NULL, &ids_list, true},              {"--pieces", NULL, &pieces, true},
        {"--show-count", NULL, &show_count, true},     {"--log-disable", NULL, &quiet, true},
    };
    const char *flag;
    while (kvt_args_next(&a, &flag)) {
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(flag, "-m") || !strcmp(flag, "--model")) {
            if (!(model_path = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "-f") || !strcmp(flag, "--file")) {
            if (!(file = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "-p") || !strcmp(flag, "--prompt")) {
            if (!(prompt = kvt_args_value(&a, flag))) return 2;
        } else if (!switch_flag(flag, switches, sizeof switches / sizeof switches[0])) {
            kvt_args_unknown(&a, flag);
            return 2;
        }
    }
    if (prompt && !prompt[0]) prompt = NULL; // llama-tokenize: an empty -p is no prompt
    if (!use_stdin && !file && !prompt) {
        fprintf(stderr, "kvtier tokenize: give one of -p TEXT, -f FILE or --stdin\n");
        return 2;
    }
    if (ids_list && pieces) {
        fprintf(stderr, "kvtier tokenize: give --ids or --pieces, not both\n");
        return 2;
    }
    if (!model_path) {
        fprintf(stderr, "kvtier tokenize: -m MODEL is required\n");
        return 2;
    }
    if (!quiet && (use_stdin ? file || prompt : file && prompt)) {
        fprintf(stderr, "kvtier tokenize: note: the text is %s; %s%s%s ignored (as llama-tokenize)\n",
                use_stdin ? "standard input" : "-f's file", use_stdin && file ? "-f" : "",
                use_stdin && file && prompt ? " and " : "", prompt ? "-p" : "");
    }
    size_t len = 0;
    char *text = NULL;
    if (!use_stdin && file && !(text = kvt_read_file("tokenize", file, &len))) return 1;
    // only the tokenizer.* keys are read: any architecture will do
    kvt_err err = {0};
    kvt_gguf *g = NULL;
    kvt_tokenizer *tok = NULL;
    if (kvt_gguf_open(model_path, &g, &err) || kvt_tokenizer_init(g, &tok, &err)) {
        fprintf(stderr, "kvtier tokenize: %s\n", err.msg);
        kvt_gguf_free(g);
        free(text);
        return 1;
    }
    if (!quiet && kvt_tokenizer_note(tok)[0]) fprintf(stderr, "kvtier tokenize: note: %s\n", kvt_tokenizer_note(tok));
    int rc = 1;
    int32_t *ids = NULL;
    // standard input is read once the model is known to load, as llama-tokenize does
    if (use_stdin && kvt_read_stream(stdin, "standard input", &text, &len, &err)) {
        fprintf(stderr, "kvtier tokenize: %s\n", err.msg);
        goto done;
    }
    if (!text) {
        len = strlen(prompt);
        if (!(text = malloc(len + 1))) {
            fprintf(stderr, "kvtier tokenize: out of memory\n");
            goto done;
        }
        memcpy(text, prompt, len + 1);
    }
    if (escape) len = cli_process_escapes(text, len);
    // llama-tokenize adds the special tokens only when the model adds BOS, and then as the model asks (BOS, EOS)
    const bool add_special = kvt_tokenizer_add_bos(tok) && !no_bos;
    int64_t n = 0;
    if (!(ids = cli_tokenize("tokenize", tok, text, len, add_special, parse_special, &n))) goto done;
    if (pieces) {
        if (!print_pieces(tok, ids, n)) goto done;
    } else {
        print_ids(ids, n, ids_list);
    }
    if (show_count) printf("Total number of tokens: %lld\n", (long long)n);
    rc = 0;
done:
    free(ids);
    free(text);
    kvt_tokenizer_free(tok);
    kvt_gguf_free(g);
    return rc;
}
