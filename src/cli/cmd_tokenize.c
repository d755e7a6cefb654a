// cmd_tokenize.c - `kvtier tokenize`: the ids of a file's text, space separated.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"

int cmd_tokenize(int argc, char **argv) {
    kvt_args a = {"tokenize", argc, argv, 0};
    const char *model_path = NULL, *file = NULL, *prompt = NULL;
    bool add_bos = true, parse_special = false;
    const char *flag;
    while (kvt_args_next(&a, &flag)) {
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            printf("usage: kvtier tokenize -m MODEL (-f FILE | -p TEXT) [--no-bos] [--special]\n"
                   "  reads only the tokenizer.* keys, so vocabulary-only GGUF files of any architecture\n"
                   "  work; prints the ids space separated\n"
                   "  --no-bos    do not add BOS/EOS even if the model asks for them\n"
                   "  --special   parse special-token text such as <|im_start|>\n");
            return 0;
        } else if (!strcmp(flag, "-m") || !strcmp(flag, "--model")) {
            if (!(model_path = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "-f") || !strcmp(flag, "--file")) {
            if (!(file = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "-p") || !strcmp(flag, "--prompt")) {
            if (!(prompt = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--no-bos")) {
            add_bos = false;
        } else if (!strcmp(flag, "--special")) {
            parse_special = true;
        } else {
            kvt_args_unknown(&a, flag);
            return 2;
        }
    }
    if (!file == !prompt) {
        fprintf(stderr, "kvtier tokenize: %s\n", file ? "give -f FILE or -p TEXT, not both" : "-f FILE or -p TEXT is required");
        return 2;
    }
    size_t len = prompt ? strlen(prompt) : 0;
    char *text = NULL;
    if (file && !(text = kvt_read_file("tokenize", file, &len))) return 1;
    if (!model_path) {
        fprintf(stderr, "kvtier tokenize: -m MODEL is required\n");
        free(text);
        return 2;
    }
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
    if (kvt_tokenizer_note(tok)[0]) fprintf(stderr, "kvtier tokenize: note: %s\n", kvt_tokenizer_note(tok));
    int64_t n = 0;
    int32_t *ids = cli_tokenize("tokenize", tok, text ? text : prompt, len, add_bos, parse_special, &n);
    if (ids) {
        for (int64_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    free(ids);
    free(text);
    kvt_tokenizer_free(tok);
    kvt_gguf_free(g);
    return ids ? 0 : 1;
}
