// fa_timer.h - host wall-clock timing: medians over repeated runs.
#ifndef FA_TIMER_H
#define FA_TIMER_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double median_ms;
    double min_ms;
    int runs;
} fa_timing;

// Milliseconds from a monotonic clock.
double fa_now_ms(void);

// Median of values[0..n) (sorts them in place). 0 when n == 0.
double fa_median(double *values, int n);

// Runs fn(ctx) `warmup` times untimed, then `iters` times timed; returns the median and the minimum.
fa_timing fa_time_host(void (*fn)(void *ctx), void *ctx, int warmup, int iters);

#ifdef __cplusplus
}
#endif

#endif
