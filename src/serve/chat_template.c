// chat_template.c - recognition of chat templates by marker strings and the built-in formatters.
#include "chat_template.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../base/grow.h"

typedef enum {
    FMT_CHATML,
    FMT_LLAMA3,
    FMT_LLAMA31,
    FMT_LLAMA2,
    FMT_MISTRAL_V0,
    FMT_MISTRAL_V1,
    FMT_MISTRAL_V3_TEKKEN,
    FMT_GEMMA,
    FMT_PHI3,
    FMT_COUNT
} chat_format;

static const char *const k_names[FMT_COUNT] = {
    "chatml", "llama3", "llama3.1", "llama2", "mistral-v0", "mistral-v1", "mistral-v3-tekken", "gemma", "phi3",
};

struct kvt_chat_template {
    chat_format fmt;
    char *bos, *eos, *date;
    char *default_system; // chatml only; NULL when the template has none
};

const char *kvt_chat_template_names(void) {
    return "chatml llama3 llama3.1 llama2 mistral-v0 mistral-v1 mistral-v3-tekken gemma phi3";
}

const char *kvt_chat_template_name(const kvt_chat_template *t) { return k_names[t->fmt]; }

const char *kvt_chat_template_default_system(const kvt_chat_template *t) { return t->default_system; }

static bool has(const char *text, const char *marker) { return strstr(text, marker) != NULL; }

// chatml's default system message: a literal "<|im_start|>system\n...<|im_end|>" inside one string
// constant of the template (the newline written either as a real newline or as the escape \n).
// Returns a malloc'ed copy with \n escapes decoded, NULL when absent; *oom on allocation failure.
static char *find_default_system(const char *text, bool *oom) {
    static const char open[] = "<|im_start|>system";
    for (const char *p = strstr(text, open); p; p = strstr(p + 1, open)) {
        const char *s = p + sizeof open - 1;
        if (*s == '\n') s += 1;
        else if (s[0] == '\\' && s[1] == 'n') s += 2;
        else continue;
        const char *e = strstr(s, "<|im_end|>");
        if (!e || e == s) continue;
        if (memchr(s, '\'', (size_t)(e - s)) || memchr(s, '"', (size_t)(e - s)) || memchr(s, '{', (size_t)(e - s)) ||
            memchr(s, '}', (size_t)(e - s)))
            continue; // not one literal: the system text comes from the messages
        char *out = malloc((size_t)(e - s) + 1);
        if (!out) {
            *oom = true;
            return NULL;
        }
        size_t n = 0;
        for (const char *q = s; q < e; q++) {
            if (q[0] == '\\' && q + 1 < e && (q[1] == 'n' || q[1] == 't' || q[1] == '\\')) {
                out[n++] = q[1] == 'n' ? '\n' : q[1] == 't' ? '\t' : '\\';
                q++;
            } else {
                out[n++] = *q;
            }
        }
        out[n] = 0;
        return out;
    }
    return NULL;
}

// Recognition by markers (the same facts llama.cpp's detection uses, restricted to our formats).
// Returns FMT_COUNT when the text is not one of them.
static chat_format detect(const char *text) {
    if (has(text, "<|im_start|>")) {
        if (has(text, "<|im_sep|>") || has(text, "<end_of_utterance>")) return FMT_COUNT; // phi-4, SmolVLM
        return FMT_CHATML;
    }
    if (strncmp(text, "mistral", 7) == 0 || has(text, "[INST]")) {
        if (has(text, "[SYSTEM_PROMPT]")) return FMT_COUNT; // mistral v7: not supported yet
        if (has(text, "' [INST] ' + system_message") || has(text, "[AVAILABLE_TOOLS]")) {
            if (has(text, " [INST]")) return FMT_MISTRAL_V1;
            if (has(text, "\"[INST]\"")) return FMT_MISTRAL_V3_TEKKEN;
            return FMT_COUNT; // mistral v3 (with spaces): not supported yet
        }
        if (has(text, "<<SYS>>")) {
            // the Llama 2 chat template: BOS before every [INST] and stripped contents
            if (has(text, "bos_token + '[INST] '") && has(text, "content.strip()")) return FMT_LLAMA2;
            return FMT_COUNT;
        }
        return FMT_MISTRAL_V0;
    }
    if (has(text, "<|assistant|>") && has(text, "<|end|>")) return FMT_PHI3;
    if (has(text, "<start_of_turn>")) return FMT_GEMMA;
    if (has(text, "<|start_header_id|>") && has(text, "<|end_header_id|>"))
        return has(text, "Cutting Knowledge Date") ? FMT_LLAMA31 : FMT_LLAMA3;
    return FMT_COUNT;
}

static char *dup_or_empty(const char *s, const char *dflt) {
    if (!s) s = dflt;
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

kvt_status kvt_chat_template_create(const char *text, const char *name, const kvt_chat_tokens *tokens,
                                    kvt_chat_template **out, kvt_err *err) {
    *out = NULL;
    chat_format fmt = FMT_COUNT;
    if (name) {
        for (int i = 0; i < FMT_COUNT; i++)
            if (!strcmp(name, k_names[i])) fmt = (chat_format)i;
        if (fmt == FMT_COUNT)
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--chat-template: unknown format '%s' (one of: %s)", name,
                              kvt_chat_template_names());
    } else {
        if (!text || !*text)
            return kvt_errorf(err, KVT_ERR_NOT_FOUND,
                              "the model has no tokenizer.chat_template; pass --chat-template NAME (one of: %s)",
                              kvt_chat_template_names());
        fmt = detect(text);
        if (fmt == FMT_COUNT) {
            char head[64 * 2 + 1];
            size_t n = 0;
            for (const char *p = text; *p && n + 2 < sizeof head && p - text < 60; p++) {
                if (*p == '\n') {
                    head[n++] = '\\';
                    head[n++] = 'n';
                } else {
                    head[n++] = *p;
                }
            }
            head[n] = 0;
            return kvt_errorf(err, KVT_ERR_UNSUPPORTED,
                              "tokenizer.chat_template not recognized: \"%s%s\"; pass --chat-template NAME (one of: %s)",
                              head, strlen(text) > 60 ? "..." : "", kvt_chat_template_names());
        }
    }
    kvt_chat_template *t = calloc(1, sizeof *t);
    if (!t) return kvt_errorf(err, KVT_ERR_NOMEM, "chat template: out of memory");
    t->fmt = fmt;
    bool oom = false;
    if (fmt == FMT_CHATML && text) t->default_system = find_default_system(text, &oom);
    t->bos = dup_or_empty(tokens ? tokens->bos : NULL, "");
    t->eos = dup_or_empty(tokens ? tokens->eos : NULL, "");
    t->date = dup_or_empty(tokens ? tokens->date : NULL, "26 Jul 2024");
    if (oom || !t->bos || !t->eos || !t->date) {
        kvt_chat_template_free(t);
        return kvt_errorf(err, KVT_ERR_NOMEM, "chat template: out of memory");
    }
    *out = t;
    return KVT_OK;
}

void kvt_chat_template_free(kvt_chat_template *t) {
    if (!t) return;
    free(t->bos);
    free(t->eos);
    free(t->date);
    free(t->default_system);
    free(t);
}

// ---- output buffer ----

typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void put_n(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (!kvt_grow((void **)&b->p, &b->cap, b->len + n + 1, 1)) {
        b->oom = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void put(sbuf *b, const char *s) { put_n(b, s, strlen(s)); }

// Length in bytes of the Python-whitespace character (str.isspace) at s[0..n), 0 if none.
static size_t space_at(const unsigned char *s, size_t n) {
    if (n >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x20))) return 1;
    if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (n >= 3) {
        uint32_t c = ((uint32_t)(s[0] & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
        if ((s[0] & 0xf0) == 0xe0 && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80 &&
            (c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
             c == 0x205f || c == 0x3000))
            return 3;
    }
    return 0;
}

// Appends s with leading and trailing whitespace removed, as Python's str.strip() (Jinja's trim).
static void put_trim(sbuf *b, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), k;
    while (n && (k = space_at(p, n))) {
        p += k;
        n -= k;
    }
    // trailing: step back over UTF-8 characters while they are whitespace
    for (;;) {
        size_t start = n;
        while (start && (p[start - 1] & 0xc0) == 0x80 && n - start < 3) start--;
        if (!start) break;
        start--;
        if (space_at(p + start, n - start) != n - start) break;
        n = start;
    }
    put_n(b, (const char *)p, n);
}

// ---- validation ----

static bool is_role(const char *r, const char *want) { return strcmp(r, want) == 0; }

static kvt_status check_messages(const kvt_chat_template *t, const kvt_chat_msg *m, size_t n, kvt_err *err) {
    if (n == 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "messages: at least one message is required");
    bool alternate = t->fmt == FMT_LLAMA2 || t->fmt == FMT_MISTRAL_V0 || t->fmt == FMT_MISTRAL_V1 ||
                     t->fmt == FMT_MISTRAL_V3_TEKKEN || t->fmt == FMT_GEMMA;
    size_t first = n && m[0].role && is_role(m[0].role, "system") ? 1 : 0;
    for (size_t i = 0; i < n; i++) {
        if (!m[i].role)
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "messages[%zu].role: missing", i);
        if (!m[i].content)
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "messages[%zu].content: missing", i);
        if (!is_role(m[i].role, "system") && !is_role(m[i].role, "user") && !is_role(m[i].role, "assistant"))
            return kvt_errorf(err, KVT_ERR_INVALID_ARG,
                              "messages[%zu].role: '%s' is not one of system, user, assistant", i, m[i].role);
        if (!alternate || i < first) continue;
        const char *want = (i - first) % 2 == 0 ? "user" : "assistant";
        if (!is_role(m[i].role, want))
            return kvt_errorf(err, KVT_ERR_INVALID_ARG,
                              "messages[%zu].role: '%s' where '%s' was expected (the %s chat format needs user and "
                              "assistant turns to alternate after an optional first system message)",
                              i, m[i].role, want, k_names[t->fmt]);
    }
    return KVT_OK;
}

// ---- formatters ----

static void fmt_chatml(const kvt_chat_template *t, const kvt_chat_msg *m, size_t n, bool gen, sbuf *b) {
    if (t->default_system && !is_role(m[0].role, "system")) {
        put(b, "<|im_start|>system\n");
        put(b, t->default_system);
        put(b, "<|im_end|>\n");
    }
    for (size_t i = 0; i < n; i++) {
        put(b, "<|im_start|>");
        put(b, m[i].role);
        put(b, "\n");
        put(b, m[i].content);
        put(b, "<|im_end|>\n");
    }
    if (gen) put(b, "<|im_start|>assistant\n");
}

static void llama3_turn(sbuf *b, const char *role, const char *content) {
    put(b, "<|start_header_id|>");
    put(b, role);
    put(b, "<|end_header_id|>\n\n");
    put_trim(b, content);
    put(b, "<|eot_id|>");
}

static void fmt_llama3(const kvt_chat_template *t, const kvt_chat_msg *m, size_t n, bool gen, sbuf *b) {
    put(b, t->bos);
    size_t i = 0;
    if (t->fmt == FMT_LLAMA31) { // the system header is always there, with the dates
        put(b, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
        put(b, t->date);
        put(b, "\n\n");
        if (is_role(m[0].role, "system")) put_trim(b, m[i++].content);
        put(b, "<|eot_id|>");
    }
    for (; i < n; i++) llama3_turn(b, m[i].role, m[i].content);
    if (gen) put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Llama 2 chat and the [INST] formats of Mistral: system message (if any) is messages[0], the rest
// alternate user/assistant (checked before).
static void fmt_inst(const kvt_chat_template *t, const kvt_chat_msg *m, size_t n, sbuf *b) {
    const char *sys = is_role(m[0].role, "system") ? m[0].content : NULL;
    size_t first = sys ? 1 : 0;
    if (t->fmt != FMT_LLAMA2) put(b, t->bos);
    for (size_t i = first; i < n; i++) {
        bool user = is_role(m[i].role, "user");
        bool first_turn = i == first, last_turn = i + 1 == n;
        switch (t->fmt) {
        case FMT_LLAMA2:
            if (user) {
                put(b, t->bos);
                put(b, "[INST] ");
                if (first_turn && sys) { // the <<SYS>> block is part of the stripped content
                    sbuf c = {0};
                    put(&c, "<<SYS>>\n");
                    put(&c, sys);
                    put(&c, "\n<</SYS>>\n\n");
                    put(&c, m[i].content);
                    if (c.oom) b->oom = true;
                    else put_trim(b, c.p);
                    free(c.p);
                } else {
                    put_trim(b, m[i].content);
                }
                put(b, " [/INST]");
            } else {
                put(b, " ");
                put_trim(b, m[i].content);
                put(b, " ");
                put(b, t->eos);
            }
            break;
        default: { // the Mistral formats differ in spacing and in where the system message goes
            bool v1 = t->fmt == FMT_MISTRAL_V1, tekken = t->fmt == FMT_MISTRAL_V3_TEKKEN;
            if (user) {
                put(b, v1 ? " [INST] " : tekken ? "[INST]" : "[INST] ");
                if (sys && (tekken ? last_turn : first_turn)) { // v0 has no system role: folded like v1
                    put(b, sys);
                    put(b, "\n\n");
                }
                put(b, m[i].content);
                put(b, tekken ? "[/INST]" : " [/INST]");
            } else {
                put(b, v1 ? " " : "");
                put(b, m[i].content);
                put(b, t->eos);
            }
            break;
        }
        }
    }
}

static void fmt_gemma(const kvt_chat_template *t, const kvt_chat_msg *m, size_t n, bool gen, sbuf *b) {
    const char *sys = is_role(m[0].role, "system") ? m[0].content : NULL;
    size_t first = sys ? 1 : 0;
    put(b, t->bos);
    for (size_t i = first; i < n; i++) {
        put(b, "<start_of_turn>");
        put(b, is_role(m[i].role, "assistant") ? "model" : m[i].role);
        put(b, "\n");
        if (i == first && sys) {
            put(b, sys);
            put(b, "\n\n");
        }
        put_trim(b, m[i].content);
        put(b, "<end_of_turn>\n");
    }
    if (gen) put(b, "<start_of_turn>model\n");
}

static void fmt_phi3(const kvt_chat_template *t, const kvt_chat_msg *m, size_t n, bool gen, sbuf *b) {
    for (size_t i = 0; i < n; i++) {
        if (is_role(m[i].role, "system") && !*m[i].content) continue; // the template skips an empty system
        put(b, "<|");
        put(b, m[i].role);
        put(b, "|>\n");
        put(b, m[i].content);
        put(b, "<|end|>\n");
    }
    put(b, gen ? "<|assistant|>\n" : t->eos);
}

kvt_status kvt_chat_template_apply(const kvt_chat_template *t, const kvt_chat_msg *msgs, size_t n,
                                   bool add_generation_prompt, char **out, size_t *out_len, kvt_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    kvt_status st = check_messages(t, msgs, n, err);
    if (st != KVT_OK) return st;
    sbuf b = {0};
    put(&b, ""); // an empty result is still a string
    switch (t->fmt) {
    case FMT_CHATML: fmt_chatml(t, msgs, n, add_generation_prompt, &b); break;
    case FMT_LLAMA3:
    case FMT_LLAMA31: fmt_llama3(t, msgs, n, add_generation_prompt, &b); break;
    case FMT_GEMMA: fmt_gemma(t, msgs, n, add_generation_prompt, &b); break;
    case FMT_PHI3: fmt_phi3(t, msgs, n, add_generation_prompt, &b); break;
    default: fmt_inst(t, msgs, n, &b); break; // the [INST] templates add no generation prompt
    }
    if (b.oom) {
        free(b.p);
        return kvt_errorf(err, KVT_ERR_NOMEM, "chat template: out of memory formatting %zu messages", n);
    }
    *out = b.p;
    if (out_len) *out_len = b.len;
    return KVT_OK;
}

kvt_status kvt_chat_template_apply_request(const kvt_chat_template *t, const kvt_chat_msg *msgs, size_t n, char **out,
                                           size_t *out_len, kvt_err *err) {
    if (n < 2 || !msgs[n - 1].role || !is_role(msgs[n - 1].role, "assistant") || !msgs[n - 1].content)
        return kvt_chat_template_apply(t, msgs, n, true, out, out_len, err);
    if (msgs[n - 2].role && is_role(msgs[n - 2].role, "assistant")) {
        *out = NULL;
        if (out_len) *out_len = 0;
        return kvt_errorf(err, KVT_ERR_INVALID_ARG,
                          "messages[%zu].role: two assistant messages at the end (the last one is a prefill that the "
                          "answer continues; llama-server refuses this too)",
                          n - 1);
    }
    size_t len = 0;
    char *head = NULL;
    kvt_status st = kvt_chat_template_apply(t, msgs, n - 1, true, &head, &len, err);
    if (st != KVT_OK) return st;
    const size_t add = strlen(msgs[n - 1].content);
    char *p = realloc(head, len + add + 1);
    if (!p) {
        free(head);
        *out = NULL;
        if (out_len) *out_len = 0;
        return kvt_errorf(err, KVT_ERR_NOMEM, "chat template: out of memory formatting %zu messages", n);
    }
    memcpy(p + len, msgs[n - 1].content, add + 1);
    *out = p;
    if (out_len) *out_len = len + add;
    return KVT_OK;
}
