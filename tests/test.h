// test.h - the tiny test harness of kvtier's suite.
//
// Each suite is a function `void test_<name>(const test_env *env)` that calls
// test_result() once per case; the runner (test_main.c) prints one line per
// case and the closing line "N passed, N failed, N skipped".
#ifndef KVT_TEST_H
#define KVT_TEST_H

#include <stdbool.h>
#include <stddef.h>

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
// Cases recorded so far (passed + failed + skipped): lets a suite skip, case for case, a
// variant it cannot run (e.g. the io_uring pass of the disk tests without liburing).
int test_cases_recorded(void);

// Where the suite finds a test input NAME (a file name such as "stories260K.gguf" or
// "story.txt"): first tests/data/NAME (committed with the repo), then NAME in the shared
// folder's models/, vectors/reference/, vectors/tokenizer/ or vectors/text/ (env->shared,
// ../shared by default; it adds inputs, never required). Writes the path found into buf
// (cap bytes) and returns buf; returns NULL when neither has it (buf then holds
// tests/data/NAME, for messages). Defined in test_util.c.
const char *test_data(const test_env *env, const char *name, char *buf, size_t cap);
// The skip reason for a test input NAME that test_data() did not find (static storage).
const char *test_data_missing(const test_env *env, const char *name);

#endif
