// fa_test_lse.h - how the large-logit tests (test_large_logits*.c, test_hopper_large_logits.c) measure an LSE against
// float64: its largest absolute error, and the float32 ulp at its largest value (the unit their bounds are given in).
#ifndef FA_TEST_LSE_H
#define FA_TEST_LSE_H

#include <math.h>
#include <stdint.h>

// The largest |got - want| over n elements.
static double max_abs_err(const float *got, const double *want, int64_t n) {
    double err = 0.0;
    for (int64_t i = 0; i < n; i++) err = fmax(err, fabs((double)got[i] - want[i]));
    return err;
}

// One float32 ulp at the largest |LSE|: the spacing of floats where the LSE's rounding is coarsest.
static double ulp_of_largest(const double *lse, int64_t n) {
    float largest = 0.0f;
    for (int64_t i = 0; i < n; i++) largest = fmaxf(largest, fabsf((float)lse[i]));
    return (double)nextafterf(largest, INFINITY) - (double)largest;
}

#endif
