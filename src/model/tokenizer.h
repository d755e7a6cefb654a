// tokenizer.h - text <-> token ids, matching llama.cpp's tokenizers id for id.
//
// Vocabulary kinds, chosen by the GGUF key tokenizer.ggml.model:
//   "llama"  - SentencePiece style (SPM): spaces become U+2581, an optional
//              space prefix, merges by token score, <0xXX> byte fallback.
//   "gpt2"   - byte-level BPE: a pre-tokenizer (tokenizer.ggml.pre) splits the
//              text into words, bytes map to printable code points, merges by
//              rank (tokenizer.ggml.merges).
//   "gemma4" - BPE merges by rank over raw UTF-8 with spaces escaped to U+2581
//              (as SPM), words split at newline runs, <0xXX> byte fallback.
// Supported pre-tokenizers: default, gpt-2 (alias gpt2), llama3 / llama-bpe /
// llama-v3 (and dbrx, smaug-bpe, chatglm-bpe, glm4, ...), qwen2 (and
// stablelm2, megrez, hunyuan, ...), qwen35, smollm (and starcoder, refact,
// command-r, codeshell, exaone, minerva-7b), falcon, mpt, olmo, deepseek-llm,
// deepseek-coder. Any other tokenizer model or pre-tokenizer name is
// KVT_ERR_UNSUPPORTED with the name in the message; nothing is tokenized
// with a guessed substitute. Only tokenizer.* keys are read: the
// architecture does not matter.
//
// Special tokens (token types control=3, user-defined=4, unknown=2) are found
// in the text before the normal tokenizer runs: user-defined ones always,
// control and unknown ones only with parse_special.
//
// A tokenizer is immutable after init: all functions may be called from
// several threads at once.
#ifndef KVT_TOKENIZER_H
#define KVT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "../gguf/gguf.h"

typedef struct kvt_tokenizer kvt_tokenizer;

typedef enum {
    KVT_VOCAB_SPM = 1, // tokenizer.ggml.model = "llama"
    KVT_VOCAB_BPE = 2, // tokenizer.ggml.model = "gpt2"
} kvt_vocab_type;

// Token attributes (bit values as llama.cpp's llama_token_attr).
enum {
    KVT_TOKEN_ATTR_UNKNOWN = 1 << 0,
    KVT_TOKEN_ATTR_UNUSED = 1 << 1,
    KVT_TOKEN_ATTR_NORMAL = 1 << 2,
    KVT_TOKEN_ATTR_CONTROL = 1 << 3,
    KVT_TOKEN_ATTR_USER_DEFINED = 1 << 4,
    KVT_TOKEN_ATTR_BYTE = 1 << 5,
    KVT_TOKEN_ATTR_LSTRIP = 1 << 7,
    KVT_TOKEN_ATTR_RSTRIP = 1 << 8,
};

// Reads tokenizer.ggml.* from the metadata and builds the lookup tables (the
// token texts and merges are copied; the gguf may be freed afterwards).
kvt_status kvt_tokenizer_init(const kvt_gguf *g, kvt_tokenizer **out, kvt_err *err);
void kvt_tokenizer_free(kvt_tokenizer *t);

// Tokenizes text (len bytes of UTF-8; len is authoritative, NUL bytes are
// text). add_special adds BOS/EOS as the model asks (tokenizer.ggml.add_bos_token
// / add_eos_token, else llama.cpp's default for the vocabulary kind);
// parse_special turns control-token strings such as "<|im_start|>" in the
// text into those tokens. Writes up to cap ids and returns the number of ids
// of the whole result (> cap: call again with a bigger buffer), or -1 on
// error (err filled).
int64_t kvt_tokenize(const kvt_tokenizer *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t *ids, int64_t cap, kvt_err *err);

// Bytes of one token, for streaming output: control and unknown tokens (BOS,
// EOS, <|im_end|> ...) give no bytes; user-defined tokens give their text.
// Writes up to cap bytes (no NUL) and returns the piece's length (> cap: call
// again); 0 for an id out of range. A piece may be part of a UTF-8 sequence.
int64_t kvt_token_to_piece(const kvt_tokenizer *t, int32_t id, char *buf, int64_t cap);
// Same, with llama.cpp's knobs: lstrip removes up to that many leading spaces;
// special renders control/unknown tokens as their text.
int64_t kvt_token_to_piece_ex(const kvt_tokenizer *t, int32_t id, char *buf, int64_t cap,
                              int32_t lstrip, bool special);

// Text of a sequence, as llama_detokenize(remove_special = false,
// unparse_special = false): control tokens vanish, the space that SPM puts in
// front of the first word is dropped, and for the vocabularies that ask for
// it (gpt2 / llama3 pre-tokenizers) spaces before . , ! ? and some
// contractions are cleaned. Writes up to cap bytes (no NUL); returns the
// length of the whole text (> cap: call again), or -1 if out of memory.
int64_t kvt_detokenize(const kvt_tokenizer *t, const int32_t *ids, int64_t n, char *buf,
                       int64_t cap);
// remove_special: drop a leading BOS / trailing EOS that the model adds;
// unparse_special: render control tokens as text.
int64_t kvt_detokenize_ex(const kvt_tokenizer *t, const int32_t *ids, int64_t n, char *buf,
                          int64_t cap, bool remove_special, bool unparse_special);

// What kvt_tokenizer_init set aside without refusing the file, for the caller to show (the first special token id
// outside the vocabulary, which keeps its default as in llama.cpp); "" when nothing.
const char *kvt_tokenizer_note(const kvt_tokenizer *t);

kvt_vocab_type kvt_tokenizer_type(const kvt_tokenizer *t);
int32_t kvt_tokenizer_n_vocab(const kvt_tokenizer *t);
// Special ids, -1 if none.
int32_t kvt_token_bos(const kvt_tokenizer *t);
int32_t kvt_token_eos(const kvt_tokenizer *t);
int32_t kvt_token_eot(const kvt_tokenizer *t);
int32_t kvt_token_unk(const kvt_tokenizer *t);
int32_t kvt_token_pad(const kvt_tokenizer *t);
bool kvt_tokenizer_add_bos(const kvt_tokenizer *t);
bool kvt_tokenizer_add_eos(const kvt_tokenizer *t);
// Fill-in-the-middle tokens (tokenizer.ggml.fim_*_token_id, or found by their text as llama.cpp finds them:
// <|fim_prefix|>, <fim_prefix>, <|repo_name|>, <|file_sep|>, ...): prefix, suffix, middle, pad, repository name,
// file separator. -1 if the vocabulary has none.
typedef enum { KVT_FIM_PRE, KVT_FIM_SUF, KVT_FIM_MID, KVT_FIM_PAD, KVT_FIM_REP, KVT_FIM_SEP } kvt_fim_token;
int32_t kvt_token_fim(const kvt_tokenizer *t, kvt_fim_token k);
// End of generation: EOS, EOT, EOM, and tokens llama.cpp recognises by text
// (<|im_end|>, <|endoftext|>, <|eot_id|>, <end_of_turn>, ...).
bool kvt_token_is_eog(const kvt_tokenizer *t, int32_t id);
// Raw vocabulary entry (not NUL-terminated; len 0 for an id out of range).
const char *kvt_token_text(const kvt_tokenizer *t, int32_t id, size_t *len);
uint32_t kvt_token_attr(const kvt_tokenizer *t, int32_t id); // 0 if out of range
float kvt_token_score(const kvt_tokenizer *t, int32_t id);
// Id of a token with exactly this text, or -1.
int32_t kvt_token_lookup(const kvt_tokenizer *t, const char *text, size_t len);

#endif
