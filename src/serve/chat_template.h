// chat_template.h - chat prompt formats recognized from a GGUF's tokenizer.chat_template.
//
// kvtier does not run Jinja. It recognizes a template by distinctive marker strings in its
// text (the facts llama.cpp's llm_chat_detect_template relies on; the code is ours) and then
// formats messages with a built-in formatter whose output equals, byte for byte, what Jinja
// renders from the real template (tests/test_chat_template.c checks this against renderings
// made by tools/golden/chat_golden.py). Formats and their names (also the --chat-template
// override names):
//   chatml      <|im_start|>role\n...<|im_end|>\n (SmolLM2, Qwen2/2.5/3 without tools); a default
//               system message found in the template text is emitted when messages[0] is not system
//   llama3      Llama 3.0: <|start_header_id|>role<|end_header_id|>\n\n trim(content) <|eot_id|>
//   llama3.1    Llama 3.1/3.2/3.3: always a system header with "Cutting Knowledge Date" and
//               "Today Date: <date>" (default "26 Jul 2024", as the templates default to)
//   llama2      Llama 2 chat: <s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s>
//   mistral-v0  old Mistral/Mixtral [INST] without system support
//   mistral-v1  Mistral v1: " [INST] sys\n\nuser [/INST]" (system folded into the first user turn)
//   mistral-v3-tekken  Mistral Nemo: "[INST]user[/INST]" (system folded into the last user turn)
//   gemma       Gemma 2/3: <start_of_turn>user|model ... ; a system message is folded into the
//               first user turn as "system\n\n" (Gemma 3 style; Gemma 2's own template refuses it)
//   phi3        Phi-3/3.5: <|system|>/<|user|>/<|assistant|> ... <|end|>\n
// Roles accepted: "system", "user", "assistant". Formats whose templates require alternation
// (llama2, mistral-*, gemma) return KVT_ERR_INVALID_ARG naming the offending message.
#ifndef KVT_CHAT_TEMPLATE_H
#define KVT_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "../base/status.h"

typedef struct kvt_chat_template kvt_chat_template; // opaque

// One chat message; both strings are borrowed (NUL-terminated UTF-8).
typedef struct {
    const char *role;
    const char *content;
} kvt_chat_msg;

// Special-token texts the formats insert (borrowed during create; copied). NULL means "".
typedef struct {
    const char *bos;  // e.g. "<s>", "<|begin_of_text|>", "<bos>"
    const char *eos;  // e.g. "</s>", "<|eot_id|>", "<|endoftext|>"
    const char *date; // llama3.1 "Today Date"; NULL: "26 Jul 2024"
} kvt_chat_tokens;

// Recognizes `text` (the GGUF's tokenizer.chat_template) or, when `name` is non-NULL, uses the
// named format (see above) and ignores `text` except for chatml's default system message.
// Errors: KVT_ERR_UNSUPPORTED for an unrecognized template (the message quotes its first ~60
// characters and says to pass --chat-template NAME), KVT_ERR_INVALID_ARG for an unknown name
// (the message lists the names), KVT_ERR_NOMEM. On success *out is owned by the caller.
kvt_status kvt_chat_template_create(const char *text, const char *name, const kvt_chat_tokens *tokens,
                                    kvt_chat_template **out, kvt_err *err);
void kvt_chat_template_free(kvt_chat_template *t);

// kvt_chat_template_create for a model file: the text of tokenizer.chat_template (may be absent
// when name is given) and the BOS/EOS token texts of its vocabulary (tokenizer.ggml.tokens at
// tokenizer.ggml.bos_token_id / eos_token_id). Errors as kvt_chat_template_create, and
// KVT_ERR_FORMAT naming the key when a token id is out of the vocabulary. A file without
// tokenizer.chat_template and no name gets chatml, as llama-server does; *fallback (may be NULL) is then
// set true, so that the caller can say so. (chat_gguf.c)
typedef struct kvt_gguf kvt_gguf;
kvt_status kvt_chat_template_from_gguf(const kvt_gguf *g, const char *name, kvt_chat_template **out, bool *fallback,
                                       kvt_err *err);

// The format's name, e.g. "chatml".
const char *kvt_chat_template_name(const kvt_chat_template *t);
// chatml's default system message taken from the template text, or NULL when there is none.
const char *kvt_chat_template_default_system(const kvt_chat_template *t);
// Space-separated list of the names kvt_chat_template_create accepts.
const char *kvt_chat_template_names(void);

// Formats n messages into a newly allocated NUL-terminated string *out (caller frees; *out_len
// its length in bytes, may be NULL). add_generation_prompt appends the assistant turn's opening.
// Errors: KVT_ERR_INVALID_ARG naming messages[i].role / messages[i].content; KVT_ERR_NOMEM.
kvt_status kvt_chat_template_apply(const kvt_chat_template *t, const kvt_chat_msg *msgs, size_t n,
                                   bool add_generation_prompt, char **out, size_t *out_len, kvt_err *err);

// A chat request's prompt, as llama-server renders it (its --prefill-assistant, on by default): the messages
// with the generation prompt, or, when the last of two or more messages is the assistant's, the messages
// before it with the generation prompt and then that message's content as it is, not closed, so that the
// answer continues it ("prefill"; the answer holds only the continuation). Two assistant messages at the end
// are refused (KVT_ERR_INVALID_ARG), as llama-server refuses them. Errors and *out as kvt_chat_template_apply.
kvt_status kvt_chat_template_apply_request(const kvt_chat_template *t, const kvt_chat_msg *msgs, size_t n, char **out,
                                           size_t *out_len, kvt_err *err);

#endif
