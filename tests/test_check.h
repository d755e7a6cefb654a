// test_check.h - CHECK(name, cond, fmt, ...) of the kernel suites (test_kernels.c, test_kernels_cpu.c), which print
// their own case lines: "ok NAME", or "FAIL NAME: detail" and one more in the includer's static int g_fail.
#ifndef KVT_TEST_CHECK_H
#define KVT_TEST_CHECK_H
#include <stdio.h>

#define CHECK(name, cond, ...)                                                                       \
    do {                                                                                             \
        if (cond) {                                                                                  \
            printf("ok %s\n", name);                                                                 \
        } else {                                                                                     \
            printf("FAIL %s: ", name);                                                               \
            printf(__VA_ARGS__);                                                                     \
            printf("\n");                                                                            \
            g_fail++;                                                                                \
        }                                                                                            \
    } while (0)

#endif
