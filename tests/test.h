// test.h - the tiny test harness of kvtier's suite.
//
// Each suite is a function `void test_<name>(const test_env *env)` that calls
// test_result() once per case; the runner (test_main.c) prints one line per
// case and the closing line "N passed, N failed, N skipped".
#ifndef KVT_TEST_H
#define KVT_TEST_H

#include <stdbool.h>

typedef struct {
    const char *shared;  // path of the shared folder (golden data, small models)
    const char *smollm2; // path of SmolLM2-135M-Instruct.Q4_1.gguf (may not exist)
    const char *cli;     // path of the kvtier binary
    bool quick;          // sanitizer builds: smaller sizes
} test_env;

// Records a case: prints "ok NAME" or "FAIL NAME: <fmt...>".
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void test_result(bool ok, const char *name, const char *fmt, ...);
// Records a skipped case with its reason.
void test_skip(const char *name, const char *reason);
// True if the file exists and is readable.
bool test_file_exists(const char *path);

#endif
