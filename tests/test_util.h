// test_util.h - file and tiny-JSON helpers for tests (golden data readers).
#ifndef KVT_TEST_UTIL_H
#define KVT_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

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

#endif
