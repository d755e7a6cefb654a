// tokenizer_impl.h - internals shared by tokenizer.c, tokenizer_spm.c and
// tokenizer_bpe.c. Not part of the public API.
#ifndef KVT_TOKENIZER_IMPL_H
#define KVT_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

// Pre-tokenizer families (each is a fixed sequence of splitting passes).
typedef enum {
    KVT_PRE_DEFAULT, // punctuation runs, gpt2, number runs, ASCII digit triples
    KVT_PRE_GPT2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
    KVT_PRE_LLAMA3,  // contractions (any case), letters, \p{N}{1,3}, ...
    KVT_PRE_QWEN2,   // as llama3 but \p{N} one at a time
    KVT_PRE_QWEN35,  // as qwen2 but letter runs include \p{M}
    KVT_PRE_SMOLLM,  // each \p{N} isolated, then gpt2
    KVT_PRE_FALCON,  // punctuation runs (with `), gpt2, ASCII digit triples
    KVT_PRE_DEEPSEEK_LLM,   // [\r\n], letters, punctuation, trailing space, CJK, numbers
    KVT_PRE_DEEPSEEK_CODER, // [\r\n], \s?\p{L}+, \s?\p{P}+, CJK, each \p{N}
    KVT_PRE_GEMMA4,  // newline runs only (SentencePiece-style BPE on raw UTF-8)
} kvt_pre_kind;

typedef struct {
    uint32_t off;   // into text arena
    uint32_t len;
    float score;
    uint16_t attr;  // KVT_TOKEN_ATTR_*
    uint8_t eog;
} kvt_tok_entry;

struct kvt_tokenizer {
    kvt_vocab_type type;
    kvt_pre_kind pre;
    int32_t n_vocab;

    char *text;           // all token texts
    kvt_tok_entry *toks;
    uint32_t *tok_slots;  // open addressing, id + 1 (0 = empty)
    uint32_t tok_mask;

    char *merge_text;     // all merge strings ("left right")
    uint32_t *merge_off;  // per rank
    uint32_t *merge_len;
    uint32_t n_merges;
    uint32_t *merge_slots; // rank + 1
    uint32_t merge_mask;

    int32_t *special;     // control / user-defined / unknown ids, longest text first
    int32_t n_special;

    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;

    bool add_bos, add_eos, add_space_prefix, clean_spaces, ignore_merges;
    // BPE on raw UTF-8 with spaces escaped to U+2581 and <0xXX> byte tokens
    // (tokenizer model "gemma4"), instead of GPT-2's byte-level encoding
    bool spm_style;

    int32_t spm_byte_tok[256]; // SPM: <0xXX> token (or the 1-byte token), -1 none
    int32_t raw_byte_tok[256]; // BPE fallback: token whose text is that one byte
    char bpe_byte_utf8[256][2]; // BPE: UTF-8 of the code point standing for a byte
    uint8_t bpe_byte_utf8_len[256];
    int16_t cpt_byte[324];      // BPE inverse: code point -> byte, -1 none
    char note[KVT_ERR_MSG_MAX]; // what loading set aside (kvt_tokenizer_note); "" none
};

// Growable id vector; oom is sticky.
typedef struct {
    int32_t *v;
    size_t n, cap;
    bool oom;
} kvt_ivec;
void kvt_ivec_push(kvt_ivec *a, int32_t x);

// A candidate merge of the adjacent symbols left and right (size: bytes of
// both). SPM and BPE share the merge loop's priority queue: the bigram with
// the highest priority pops first, ties to the leftmost. SPM uses the merged
// token's score as priority, BPE the negated merge rank (ranks are < 2^24,
// exact in a float).
typedef struct {
    float priority;
    int32_t left, right;
    uint32_t size;
} kvt_bigram;

// Binary max-heap of bigrams; oom is sticky (push drops the item).
typedef struct {
    kvt_bigram *v;
    size_t n, cap;
    bool oom;
} kvt_bigram_heap;
void kvt_bigram_heap_push(kvt_bigram_heap *h, kvt_bigram x);
kvt_bigram kvt_bigram_heap_pop(kvt_bigram_heap *h); // h->n > 0

// Token id with exactly this text, or -1.
int32_t kvt_tok_find(const kvt_tokenizer *t, const char *s, size_t n);
// Rank of merge "left right", or -1.
int32_t kvt_merge_rank(const kvt_tokenizer *t, const char *l, size_t ln, const char *r, size_t rn);

// Tokenize one plain-text fragment (no special tokens inside); return false
// on allocation failure.
bool kvt_spm_tokenize(const kvt_tokenizer *t, const char *text, size_t n, kvt_ivec *out);
bool kvt_bpe_tokenize(const kvt_tokenizer *t, const char *text, size_t n, kvt_ivec *out);

// Pre-tokenizer: splits text (n bytes) into words, returning their code point
// lengths through *lens / *n_lens and the decoded code points in *cpts
// (malloc'd, caller frees both). Exposed for tests.
bool kvt_pretokenize(kvt_pre_kind kind, const char *text, size_t n, uint32_t **cpts,
                     size_t *n_cpts, size_t **lens, size_t *n_lens);

#endif
