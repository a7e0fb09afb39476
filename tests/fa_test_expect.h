// fa_test_expect.h - the assertions of the C test programs: a failed one prints where and what, counts, and lets the
// test go on, so that one run reports every failure; main() returns failures ? 1 : 0.
#ifndef FA_TEST_EXPECT_H
#define FA_TEST_EXPECT_H

#include <stdio.h>

static int failures = 0;

// EXPECT(cond): prints the condition that failed.
#define EXPECT(cond)                                                                  \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);       \
            failures++;                                                               \
        }                                                                             \
    } while (0)

// EXPECT_MSG(cond, format, ...): prints a message of its own, for conditions whose text would not say enough.
#define EXPECT_MSG(cond, ...)                                                         \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: FAILED: ", __FILE__, __LINE__);                   \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
            failures++;                                                               \
        }                                                                             \
    } while (0)

#endif
