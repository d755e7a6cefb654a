// main.c - the `kvtier` command: dispatch to subcommands.
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} command;

static const command k_commands[] = {
    {"generate", cmd_generate, "generate text from a prompt"},
    {"chat", cmd_chat, "a conversation: one message a line on stdin, the chat template applied, earlier turns' KV kept"},
    {"tokenize", cmd_tokenize, "print the token ids of a file's text"},
    {"perplexity", cmd_perplexity, "perplexity of a text, as llama-perplexity computes it"},
    {"bench", cmd_bench, "prompt processing and generation speed (llama-bench style)"},
    {"info", cmd_info, "model shapes, types, sizes and memory needs"},
    {"mkmodel", cmd_mkmodel, "write a random-weight GGUF of a named or given shape"},
    {"beam", cmd_beam, "step-wise beam search over the tiered KV store, locality-aware schedules"},
    {"dm-model", cmd_dm_model, "beam search KV data movement: token-by-token vs beam scheduling (Eqs. 1-5)"},
    {"profile", cmd_profile, "measure this machine's bandwidths for the planner"},
    {"plan", cmd_plan, "choose layer and KV placement and predict ms/token"},
    {"kvbench", cmd_kvbench, "decode speed with the KV cache over memory tiers (docs/BENCHMARKS.md)"},
    {"sim", cmd_sim, "discrete-event simulator: KV tiering policies under serving (docs/SIMULATOR.md)"},
    {"serve", cmd_serve, "OpenAI-compatible server with continuous batching over the tiered KV store (docs/SERVING.md)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: kvtier <command> [options]   (kvtier <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++) {
        fprintf(f, "  %-11s %s\n", k_commands[i].name, k_commands[i].help);
    }
}

int main(int argc, char **argv) {
    // past a file size limit (ulimit -f) a write fails with EFBIG instead of killing the process, so the
    // error paths run: a message naming the file, temporary and partial files removed
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++) {
        if (!strcmp(argv[1], k_commands[i].name)) return k_commands[i].fn(argc - 2, argv + 2);
    }
    fprintf(stderr, "kvtier: unknown command '%s' (kvtier --help lists the commands)\n", argv[1]);
    return 2;
}
