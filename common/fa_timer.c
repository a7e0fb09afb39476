// fa_timer.c - host wall-clock timing.
#define _POSIX_C_SOURCE 200809L
#include "fa_timer.h"

#include <stdlib.h>
#include <time.h>

double fa_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double fa_median(double *values, int n) {
    if (n <= 0) return 0.0;
    qsort(values, (size_t)n, sizeof *values, compare_doubles);
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

fa_timing fa_time_host(void (*fn)(void *ctx), void *ctx, int warmup, int iters) {
    for (int i = 0; i < warmup; i++) fn(ctx);
    fa_timing t = {0.0, 0.0, iters};
    if (iters <= 0) return t;
    double *ms = malloc((size_t)iters * sizeof *ms);
    for (int i = 0; i < iters; i++) {
        double start = fa_now_ms();
        fn(ctx);
        ms[i] = fa_now_ms() - start;
    }
    t.median_ms = fa_median(ms, iters);
    t.min_ms = ms[0];   // sorted by fa_median
    free(ms);
    return t;
}
