// test_util.h - file and tiny-JSON helpers for tests (golden data readers).
#ifndef KVT_TEST_UTIL_H
#define KVT_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvt_tokenizer;
struct kvt_gguf;

// Whole file, NUL-terminated, malloc'ed; NULL if unreadable.
char *test_read_file(const char *path, size_t *len);
// The integer array of "key": [..] in a JSON text, malloc'ed; NULL if absent.
int32_t *test_json_int_array(const char *json, const char *key, int64_t *n);
// One float per line, malloc'ed; NULL if unreadable.
float *test_read_floats(const char *path, int64_t *n);
// Runs a shell command: its exit status (-1 if killed by a signal) and its stdout in out (NUL-terminated,
// at most cap - 1 bytes).
int test_run(const char *cmd, char *out, size_t cap);
// The next value of the xorshift64 sequence in *state (13, 7, 17), as a float in [-1, 1) from its top 53 bits.
float test_xorshift_unit(uint64_t *state);

// A byte-level BPE vocabulary without merges but "a b" (one token per character): the letters, digits, ".", "-", "_",
// space (U+0120, id 39) and newline (U+010A, id 40), "<s>" (41), then the control tokens given, then the words given
// (normal tokens); eos >= 0: its EOS id. Written to a temporary file and opened (*g: the file, for the caller to
// free after the tokenizer). NULL on failure.
struct kvt_tokenizer *test_vocab_words(const char *const *ctl, int n_ctl, const char *const *words, int n_words,
                                       int32_t eos, bool add_bos, struct kvt_gguf **g);

#endif
