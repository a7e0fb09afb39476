// fa_verify.c - verify_results.
#include "fa_verify.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void unflatten(int64_t index, const int64_t dims[4], int64_t out[4]) {
    for (int k = 3; k >= 0; k--) {
        out[k] = index % dims[k];
        index /= dims[k];
    }
}

fa_check fa_verify_results_scaled(const char *label, const char *tensor, const float *got, const double *want,
                                  const int64_t dims[4], const unsigned char *heads, double tolerance, double scale) {
    fa_check c;
    memset(&c, 0, sizeof c);
    snprintf(c.label, sizeof c.label, "%s", label);
    snprintf(c.tensor, sizeof c.tensor, "%s", tensor);
    c.tolerance = tolerance;
    c.ref_err = -1.0;
    c.total = dims[0] * dims[1] * dims[2] * dims[3];
    const int64_t per_head = dims[2] * dims[3];

    int64_t worst_index = 0, first_nonfinite = -1;
    double max_want = 0.0;
    for (int64_t i = 0; i < c.total; i++) {
        if (!isfinite(got[i])) {
            if (first_nonfinite < 0) first_nonfinite = i;
            c.nonfinite++;
            continue;
        }
        if (heads && !heads[i / per_head]) continue;
        if (!isfinite(want[i])) {
            // The math gives NaN or Inf here (the inputs hold one) and the result is a finite number: a plausible
            // value where there is none must fail, never pass (the comparison below would skip it: NaN > x is false).
            if (c.max_abs_err < INFINITY) worst_index = i;
            c.max_abs_err = INFINITY;
            c.compared++;
            continue;
        }
        double err = fabs((double)got[i] - want[i]);
        if (fabs(want[i]) > max_want) max_want = fabs(want[i]);
        if (err > c.max_abs_err) {
            c.max_abs_err = err;
            worst_index = i;
        }
        c.compared++;
    }
    // No scale given (or none that is finite: an Inf in the inputs): the tensor's largest value; a tensor whose reference is all zeros is compared in absolute terms.
    if (!(scale > 0.0) || !isfinite(scale)) scale = max_want > 0.0 ? max_want : 1.0;
    c.scale = scale;
    c.rel_err = c.max_abs_err / scale;
    if (c.nonfinite > 0) {
        worst_index = first_nonfinite;
        c.max_abs_err = c.rel_err = INFINITY;
    }
    unflatten(worst_index, dims, c.worst);
    c.pass = c.nonfinite == 0 && c.compared > 0 && c.rel_err <= tolerance;
    return c;
}

fa_check fa_verify_results(const char *label, const char *tensor, const float *got, const double *want,
                           const int64_t dims[4], const unsigned char *heads, double tolerance) {
    return fa_verify_results_scaled(label, tensor, got, want, dims, heads, tolerance, 0.0);
}

void fa_check_against_reference(fa_check *check, const fa_check *reference, double factor) {
    if (!reference) return;
    check->ref_err = reference->max_abs_err;
    check->ref_factor = factor;
    // A reference that failed (NaN, or far off) gives no bound: the rule then fails, never passes, the result.
    const int within = reference->pass && check->max_abs_err <= factor * reference->max_abs_err +
                                                                   FA_REFERENCE_FLOOR * check->scale;
    check->pass = check->pass && within;
}
