// cmd_serve.c - `kvtier serve`: start-up checks of the OpenAI-compatible server (issue 12).
//
// The HTTP layer and the continuous-batching scheduler are not built yet (docs/SERVING.md); what
// runs now is the start-up part: the model's chat template is recognized (or named with
// --chat-template), and --print-prompt FILE renders a /v1/chat/completions body with it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gguf/gguf.h"
#include "../serve/chat_template.h"
#include "args.h"
#include "commands.h"
#ifdef KVT_HAVE_JANSSON
#include "../serve/request.h"
#endif

static void usage(void) {
    printf("usage: kvtier serve -m MODEL [--chat-template NAME] [--print-prompt FILE]\n"
           "  OpenAI-compatible server (docs/SERVING.md). Not complete yet: the HTTP layer and the scheduler\n"
           "  are still to come; today the command checks the model's chat template at start-up.\n"
           "  --chat-template NAME  override the format recognized from tokenizer.chat_template\n"
           "                        (%s)\n"
           "  --print-prompt FILE   render the messages of a /v1/chat/completions JSON body with the\n"
           "                        chat template and print the prompt text\n",
           kvt_chat_template_names());
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
        if (kvt_chat_template_apply(t, p->messages, p->n_messages, true, &prompt, NULL, &err) != KVT_OK) {
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

int cmd_serve(int argc, char **argv) {
    kvt_args a = {"serve", argc, argv, 0};
    const char *model_path = NULL, *tmpl_name = NULL, *prompt_file = NULL;
    const char *flag;
    while (kvt_args_next(&a, &flag)) {
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            usage();
            return 0;
        } else if (!strcmp(flag, "-m") || !strcmp(flag, "--model")) {
            if (!(model_path = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--chat-template")) {
            if (!(tmpl_name = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--print-prompt")) {
            if (!(prompt_file = kvt_args_value(&a, flag))) return 2;
        } else {
            kvt_args_unknown(&a, flag);
            return 2;
        }
    }
#ifndef KVT_HAVE_JANSSON
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
    kvt_gguf *g = NULL;
    kvt_chat_template *t = NULL;
    kvt_err err = {0};
    if (kvt_gguf_open(model_path, &g, &err) != KVT_OK ||
        kvt_chat_template_from_gguf(g, tmpl_name, &t, &err) != KVT_OK) {
        fprintf(stderr, "kvtier serve: %s\n", err.msg);
        kvt_gguf_free(g);
        return 1;
    }
    kvt_gguf_free(g);
    int rc;
    if (prompt_file) {
        rc = print_prompt(t, prompt_file);
    } else {
        fprintf(stderr, "kvtier serve: chat template %s%s; the HTTP server is not built yet (docs/SERVING.md)\n",
                kvt_chat_template_name(t), kvt_chat_template_default_system(t) ? " with a default system message" : "");
        rc = 1;
    }
    kvt_chat_template_free(t);
    return rc;
#endif
}
