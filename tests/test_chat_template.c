// test_chat_template.c - chat template recognition and formatting against Jinja2 renderings.
//
// tests/data/chat/<source>.txt (written by tools/golden/chat_golden.py) hold, per real template,
// the format it must be recognized as, its detection markers and the Jinja2 renderings of the
// conversations in tests/data/chat/conversations.txt; every rendering must equal ours byte for byte.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/gguf/gguf.h"
#include "../src/serve/chat_template.h"
#include "test.h"
#include "test_util.h"

#define CHAT_DIR "tests/data/chat"
#define MAX_MSGS 512

typedef struct {
    char conv[8];
    char *role, *content;
} conv_msg;

// Decodes \n \t \\ in place.
static void unescape(char *s) {
    char *o = s;
    for (char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1]) {
            p++;
            *o++ = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
}

static size_t load_conversations(char *text, conv_msg *msgs) {
    size_t n = 0;
    for (char *line = strtok(text, "\n"); line && n < MAX_MSGS; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        if (!t2 || t1 - line >= (long)sizeof msgs[n].conv) continue;
        *t1 = *t2 = 0;
        snprintf(msgs[n].conv, sizeof msgs[n].conv, "%s", line);
        msgs[n].role = t1 + 1;
        msgs[n].content = t2 + 1;
        unescape(msgs[n].content);
        n++;
    }
    return n;
}

static size_t pick(const conv_msg *all, size_t n_all, const char *conv, kvt_chat_msg *out) {
    size_t n = 0;
    for (size_t i = 0; i < n_all; i++)
        if (!strcmp(all[i].conv, conv)) out[n++] = (kvt_chat_msg){all[i].role, all[i].content};
    return n;
}

// Checks one source file; returns the number of renderings compared (or -1 on a parse error).
static void check_source(const char *file, const conv_msg *all, size_t n_all) {
    char path[512], name[600];
    snprintf(path, sizeof path, CHAT_DIR "/%s", file);
    size_t len;
    char *text = test_read_file(path, &len);
    if (!text) {
        test_result(false, file, "cannot read %s", path);
        return;
    }
    char format[64] = "", bos[64] = "", eos[64] = "";
    char *markers = calloc(len + 1, 1);
    size_t mlen = 0;
    char *p = text, *end = text + len;
    while (p < end && strncmp(p, "=== ", 4) != 0) { // header lines
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break;
        *nl = 0;
        if (!strncmp(p, "format ", 7)) snprintf(format, sizeof format, "%s", p + 7);
        else if (!strncmp(p, "bos ", 4)) snprintf(bos, sizeof bos, "%s", p + 4);
        else if (!strncmp(p, "eos ", 4)) snprintf(eos, sizeof eos, "%s", p + 4);
        else if (!strncmp(p, "marker ", 7)) {
            unescape(p + 7);
            mlen += (size_t)sprintf(markers + mlen, "%s\n", p + 7);
        }
        p = nl + 1;
    }
    unescape(bos);
    unescape(eos);
    kvt_chat_tokens tok = {bos, eos, NULL};
    kvt_chat_template *t = NULL;
    kvt_err err = {0};
    snprintf(name, sizeof name, "chat.%s: markers recognized as %s", file, format);
    kvt_status st = kvt_chat_template_create(markers, NULL, &tok, &t, &err);
    test_result(st == KVT_OK && !strcmp(kvt_chat_template_name(t), format), name, "got %s (%s)",
                st == KVT_OK ? kvt_chat_template_name(t) : "error", err.msg);
    if (st != KVT_OK) {
        free(markers);
        free(text);
        return;
    }
    int compared = 0, failed = 0;
    char first_fail[KVT_ERR_MSG_MAX + 128] = "";
    while (p < end && !strncmp(p, "=== ", 4)) {
        char conv[16];
        int gen;
        size_t rlen;
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl || sscanf(p, "=== %15s %d %zu", conv, &gen, &rlen) != 3 || (size_t)(end - nl - 1) < rlen) {
            failed++;
            snprintf(first_fail, sizeof first_fail, "bad record at byte %ld", (long)(p - text));
            break;
        }
        const char *want = nl + 1;
        kvt_chat_msg msgs[MAX_MSGS];
        size_t n = pick(all, n_all, conv, msgs);
        char *got = NULL;
        size_t glen = 0;
        st = kvt_chat_template_apply(t, msgs, n, gen != 0, &got, &glen, &err);
        compared++;
        if (st != KVT_OK || glen != rlen || memcmp(got, want, rlen) != 0) {
            if (!failed++) {
                size_t d = 0;
                while (got && d < glen && d < rlen && got[d] == want[d]) d++;
                snprintf(first_fail, sizeof first_fail, "%s gen=%d: %s; lengths %zu vs %zu, first difference at byte %zu",
                         conv, gen, st == KVT_OK ? "differs" : err.msg, glen, rlen, d);
            }
        }
        free(got);
        p = (char *)want + rlen + 1;
    }
    snprintf(name, sizeof name, "chat.%s: %d Jinja2 renderings equal ours byte for byte", file, compared);
    test_result(failed == 0 && compared > 0, name, "%d of %d differ; first: %s", failed, compared, first_fail);
    kvt_chat_template_free(t);
    free(markers);
    free(text);
}

static void check_errors(void) {
    kvt_chat_template *t = NULL;
    kvt_err err = {0};
    const char *odd = "{% for m in messages %}<<custom>>{{ m.content }}\n{% endfor %} and a tail that is long enough";
    kvt_status st = kvt_chat_template_create(odd, NULL, NULL, &t, &err);
    test_result(st == KVT_ERR_UNSUPPORTED && strstr(err.msg, "{% for m in messages %}<<custom>>") &&
                    strstr(err.msg, "--chat-template") && !strstr(err.msg, "long enough"),
                "chat.unrecognized template: error quotes its first 60 characters and names --chat-template", "%s",
                err.msg);
    st = kvt_chat_template_create(NULL, NULL, NULL, &t, &err);
    test_result(st == KVT_ERR_NOT_FOUND && strstr(err.msg, "tokenizer.chat_template"),
                "chat.absent template: error names tokenizer.chat_template", "%s", err.msg);
    st = kvt_chat_template_create(odd, "vicuna", NULL, &t, &err);
    test_result(st == KVT_ERR_INVALID_ARG && strstr(err.msg, "vicuna") && strstr(err.msg, "chatml"),
                "chat.unknown --chat-template name: error names it and lists the formats", "%s", err.msg);

    st = kvt_chat_template_create(odd, "gemma", &(kvt_chat_tokens){"<bos>", "<eos>", NULL}, &t, &err);
    test_result(st == KVT_OK && !strcmp(kvt_chat_template_name(t), "gemma"),
                "chat.--chat-template gemma overrides an unrecognized text", "%s", err.msg);
    if (st != KVT_OK) return;
    // llama.cpp's tests/test-chat-template.cpp expects this for gemma with a system message: folded
    // into the first user turn followed by a blank line (Gemma 3's template does the same)
    kvt_chat_msg conv[] = {{"system", "You are a helpful assistant"}, {"user", "Hello"}, {"assistant", "Hi there"},
                           {"user", "Who are you"},   {"assistant", "   I am an assistant   "},
                           {"user", "Another question"}};
    const char *want = "<bos><start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\n"
                       "Hi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI "
                       "am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n"
                       "<start_of_turn>model\n";
    char *got = NULL;
    st = kvt_chat_template_apply(t, conv, 6, true, &got, NULL, &err);
    test_result(st == KVT_OK && !strcmp(got, want), "chat.gemma folds the system message into the first user turn",
                "got %s", got ? got : err.msg);
    free(got);
    kvt_chat_msg bad_alt[] = {{"user", "a"}, {"user", "b"}};
    st = kvt_chat_template_apply(t, bad_alt, 2, true, &got, NULL, &err);
    test_result(st == KVT_ERR_INVALID_ARG && strstr(err.msg, "messages[1].role") && strstr(err.msg, "alternate"),
                "chat.gemma: two user turns in a row are an error naming messages[1].role", "%s", err.msg);
    kvt_chat_msg bad_role[] = {{"user", "a"}, {"tool", "b"}};
    st = kvt_chat_template_apply(t, bad_role, 2, true, &got, NULL, &err);
    test_result(st == KVT_ERR_INVALID_ARG && strstr(err.msg, "messages[1].role") && strstr(err.msg, "tool"),
                "chat.unknown role is an error naming messages[1].role", "%s", err.msg);
    st = kvt_chat_template_apply(t, bad_role, 0, true, &got, NULL, &err);
    test_result(st == KVT_ERR_INVALID_ARG && strstr(err.msg, "messages"), "chat.no messages is an error", "%s", err.msg);

    // a request's prompt (kvt_chat_template_apply_request), as llama-server's --prefill-assistant: a last assistant
    // message is left open for the answer to continue, after the generation prompt of the turns before it
    const char *want_prefill = "<bos><start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
                               "<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you"
                               "<end_of_turn>\n<start_of_turn>model\n   I am an assistant   ";
    st = kvt_chat_template_apply_request(t, conv, 5, &got, NULL, &err);
    test_result(st == KVT_OK && got && !strcmp(got, want_prefill),
                "chat.request: a last assistant message is a prefill (the turns before it, the generation prompt, its "
                "content as it is)",
                "got %s", got ? got : err.msg);
    free(got);
    char *whole = NULL;
    st = kvt_chat_template_apply_request(t, conv, 6, &got, NULL, &err);
    kvt_chat_template_apply(t, conv, 6, true, &whole, NULL, &err);
    test_result(st == KVT_OK && got && whole && !strcmp(got, whole),
                "chat.request: a last user message gets the generation prompt, as kvt_chat_template_apply", "got %s",
                got ? got : err.msg);
    free(got);
    free(whole);
    kvt_chat_msg two[] = {{"user", "a"}, {"assistant", "b"}, {"assistant", "c"}};
    kvt_chat_template *ml = NULL;
    st = kvt_chat_template_create(NULL, "chatml", NULL, &ml, &err);
    if (st == KVT_OK) st = kvt_chat_template_apply_request(ml, two, 3, &got, NULL, &err);
    test_result(st == KVT_ERR_INVALID_ARG && !got && strstr(err.msg, "messages[2].role"),
                "chat.request: two assistant messages at the end are refused (as llama-server)", "%s", err.msg);
    st = kvt_chat_template_apply_request(ml, two, 2, &got, NULL, &err);
    test_result(st == KVT_OK && got && !strcmp(got, "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb"),
                "chat.request: chatml prefill", "got %s", got ? got : err.msg);
    free(got);
    kvt_chat_template_free(ml);
    kvt_chat_template_free(t);
}

// The real template of the SmolLM2 GGUF (when the model is present).
static void check_smollm2(const test_env *env) {
    const char *name = "chat.SmolLM2's tokenizer.chat_template is chatml with its default system message";
    if (!test_file_exists(env->smollm2)) {
        test_skip(name, "SmolLM2 GGUF absent (make model)");
        return;
    }
    kvt_gguf *g = NULL;
    kvt_err err = {0};
    kvt_str s;
    if (kvt_gguf_open(env->smollm2, &g, &err) != KVT_OK ||
        kvt_gguf_get_str(g, "tokenizer.chat_template", &s, &err) != KVT_OK) {
        test_result(false, name, "%s", err.msg);
        kvt_gguf_free(g);
        return;
    }
    char *text = strndup(s.ptr, s.len);
    kvt_chat_template *t = NULL;
    kvt_status st = kvt_chat_template_create(text, NULL, NULL, &t, &err);
    const char *ds = st == KVT_OK ? kvt_chat_template_default_system(t) : NULL;
    test_result(st == KVT_OK && !strcmp(kvt_chat_template_name(t), "chatml") && ds &&
                    !strcmp(ds, "You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
                name, "%s / %s", st == KVT_OK ? kvt_chat_template_name(t) : err.msg, ds ? ds : "(none)");
    kvt_chat_template_free(t);
    free(text);
    kvt_gguf_free(g);
}

// A model file without tokenizer.chat_template gets chatml (as llama-server does), and says so.
static void check_fallback(void) {
    const char *name = "chat.a GGUF without tokenizer.chat_template falls back to chatml, flagged";
    kvt_gguf *g = NULL;
    kvt_err err = {0};
    kvt_chat_template *t = NULL;
    bool fallback = false, named = true;
    kvt_str s;
    kvt_status st = kvt_gguf_open("tests/data/stories260K.gguf", &g, &err);
    bool absent = st == KVT_OK && kvt_gguf_get_str(g, "tokenizer.chat_template", &s, NULL) != KVT_OK;
    if (absent) st = kvt_chat_template_from_gguf(g, NULL, &t, &fallback, &err);
    test_result(absent && st == KVT_OK && fallback && !strcmp(kvt_chat_template_name(t), "chatml"), name, "%s",
                st == KVT_OK ? (absent ? kvt_chat_template_name(t) : "the file has a template") : err.msg);
    kvt_chat_template_free(t);
    t = NULL;
    if (g) st = kvt_chat_template_from_gguf(g, "llama3", &t, &named, &err);
    test_result(g && st == KVT_OK && !named && !strcmp(kvt_chat_template_name(t), "llama3"),
                "chat.--chat-template on a GGUF without a template: that format, no fallback flagged", "%s", err.msg);
    kvt_chat_template_free(t);
    kvt_gguf_free(g);
}

// The full template texts (llama.cpp's models/templates), when KVT_CHAT_TEMPLATES names that folder.
static void check_full_templates(void) {
    static const struct {
        const char *file, *format;
    } k[] = {{"Qwen-Qwen2.5-7B-Instruct.jinja", "chatml"},
             {"Qwen-Qwen3-0.6B.jinja", "chatml"},
             {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3.1"},
             {"meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3.1"},
             {"meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3.1"},
             {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-v3-tekken"},
             {"google-gemma-2-2b-it.jinja", "gemma"},
             {"microsoft-Phi-3.5-mini-instruct.jinja", "phi3"}};
    const char *dir = getenv("KVT_CHAT_TEMPLATES");
    const char *name = "chat.full template texts of llama.cpp's models/templates are recognized";
    if (!dir) {
        test_skip(name, "KVT_CHAT_TEMPLATES (llama.cpp's models/templates folder) not set");
        return;
    }
    int bad = 0;
    char msg[KVT_ERR_MSG_MAX + 256] = "";
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, k[i].file);
        char *text = test_read_file(path, NULL);
        kvt_chat_template *t = NULL;
        kvt_err err = {0};
        if (!text || kvt_chat_template_create(text, NULL, NULL, &t, &err) != KVT_OK ||
            strcmp(kvt_chat_template_name(t), k[i].format) != 0) {
            if (!bad++) snprintf(msg, sizeof msg, "%s: %s", k[i].file, text ? err.msg : "unreadable");
        }
        kvt_chat_template_free(t);
        free(text);
    }
    test_result(bad == 0, name, "%d wrong; first %s", bad, msg);
}

void test_chat_conversation(const test_env *env); // test_conversation.c

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void test_chat(const test_env *env) {
    char *conv_text = test_read_file(CHAT_DIR "/conversations.txt", NULL);
    static conv_msg all[MAX_MSGS];
    if (!conv_text) {
        test_result(false, "chat.conversations", "cannot read " CHAT_DIR "/conversations.txt");
        return;
    }
    size_t n_all = load_conversations(conv_text, all);
    DIR *d = opendir(CHAT_DIR);
    char *files[64];
    size_t nf = 0;
    for (struct dirent *e; d && (e = readdir(d)) && nf < 64;) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".txt") && strcmp(e->d_name, "conversations.txt") != 0)
            files[nf++] = strdup(e->d_name);
    }
    if (d) closedir(d);
    qsort(files, nf, sizeof files[0], cmp_str);
    for (size_t i = 0; i < nf; i++) {
        check_source(files[i], all, n_all);
        free(files[i]);
    }
    free(conv_text);
    check_errors();
    check_smollm2(env);
    check_fallback();
    check_full_templates();
    test_chat_conversation(env);
}
