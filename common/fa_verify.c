// fa_verify.c - verify_results, row by row.
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

// How far along its allowance a row is: err / allowed (0 for an exact row; Inf when the allowance is 0 and it is not).
static double used(double err, double allowed) {
    if (err == 0.0) return 0.0;
    return allowed > 0.0 ? err / allowed : INFINITY;
}

// The largest finite |want| of the compared heads: the scale of tests that give none.
static double max_abs_want(const double *want, int64_t total, int64_t per_head, const unsigned char *heads) {
    double m = 0.0;
    for (int64_t i = 0; i < total; i++)
        if ((!heads || heads[i / per_head]) && isfinite(want[i])) m = fmax(m, fabs(want[i]));
    return m;
}

double fa_row_tolerance(const fa_rule *rule, int64_t r, int64_t rows_per_head) {
    const double logit = rule->bounds.logit && isfinite(rule->bounds.logit[r]) ? rule->bounds.logit[r] : 0.0;
    return rule->tolerance + logit + (rule->head_extra ? rule->head_extra[r / rows_per_head] : 0.0);
}

fa_check fa_verify_rows(const char *label, const char *tensor, const float *got, const double *want,
                        const int64_t dims[4], const unsigned char *heads, const fa_rule *rule) {
    fa_check c;
    memset(&c, 0, sizeof c);
    snprintf(c.label, sizeof c.label, "%s", label);
    snprintf(c.tensor, sizeof c.tensor, "%s", tensor);
    c.ref_err = -1.0;
    c.total = dims[0] * dims[1] * dims[2] * dims[3];
    const int64_t D = dims[3], rows = dims[0] * dims[1] * dims[2], per_head = dims[2] * dims[3];
    double uniform = rule->uniform_scale;
    if (!rule->bounds.scale && !(uniform > 0.0 && isfinite(uniform))) {
        uniform = max_abs_want(want, c.total, per_head, heads);
        if (uniform == 0.0) uniform = 1.0;   // a reference of all zeros: compared in absolute terms
    }
    // FlashAttention's rule: a reference that failed (NaN, or far off) gives no bound, and fails the result.
    const fa_check *ref = rule->reference;
    if (ref) {
        c.ref_err = ref->max_rel_err;
        c.ref_factor = rule->reference_factor;
    }

    int64_t worst_index = 0, first_nonfinite = -1;
    double worst_used = -1.0;
    int all_within = 1;
    for (int64_t r = 0; r < rows; r++) {
        const float *g = got + r * D;
        const double *w = want + r * D;
        const int compared = !heads || heads[r / dims[2]];
        double err = 0.0;
        int64_t err_at = r * D;
        for (int64_t d = 0; d < D; d++) {
            if (!isfinite(g[d])) {
                if (first_nonfinite < 0) first_nonfinite = r * D + d;
                c.nonfinite++;
                continue;
            }
            if (!compared) continue;
            c.compared++;
            // The math gives NaN or Inf here (the inputs hold one) and the result is a finite number: a plausible
            // value where there is none must fail, never pass (a comparison with NaN is false).
            const double e = isfinite(w[d]) ? fabs((double)g[d] - w[d]) : INFINITY;
            if (e > err) err = e, err_at = r * D + d;
        }
        if (!compared) continue;
        const double scale = rule->bounds.scale ? rule->bounds.scale[r] : uniform;
        const double logit = rule->bounds.logit && isfinite(rule->bounds.logit[r]) ? rule->bounds.logit[r] : 0.0;
        const double tol = fa_row_tolerance(rule, r, dims[2]);
        // The rel err past what underflow may lose: what FlashAttention's rule compares.
        const double rel = err == 0.0 ? 0.0 : fmax(0.0, err - (rule->bounds.tiny ? rule->bounds.tiny[r] : 0.0)) / scale;
        if (rel > c.max_rel_err || isnan(rel)) c.max_rel_err = rel;
        const double tiny = rule->bounds.tiny ? rule->bounds.tiny[r] : 0.0;   // underflow, absolute
        double u = used(err, tol * scale + tiny);
        if (ref) {
            const double ratio_tol = ref->pass ? rule->reference_factor * ref->max_rel_err + FA_REFERENCE_FLOOR + logit
                                               : 0.0;
            u = fmax(u, used(err, ratio_tol * scale + tiny));
        }
        if (!(u <= 1.0)) all_within = 0;
        if (u > worst_used || (isnan(u) && worst_used >= 0.0)) {
            worst_used = isnan(u) ? INFINITY : u;
            worst_index = err_at;
            c.max_abs_err = err;
            c.scale = scale;
            c.rel_err = rel;
            c.tolerance = tol;
        }
    }
    if (c.nonfinite > 0) {
        worst_index = first_nonfinite;
        c.max_abs_err = c.rel_err = c.max_rel_err = INFINITY;
    }
    unflatten(worst_index, dims, c.worst);
    c.pass = c.nonfinite == 0 && c.compared > 0 && all_within;
    return c;
}

fa_check fa_verify_results_scaled(const char *label, const char *tensor, const float *got, const double *want,
                                  const int64_t dims[4], const unsigned char *heads, double tolerance, double scale) {
    const fa_rule rule = {.tolerance = tolerance, .uniform_scale = scale};
    return fa_verify_rows(label, tensor, got, want, dims, heads, &rule);
}

fa_check fa_verify_results(const char *label, const char *tensor, const float *got, const double *want,
                           const int64_t dims[4], const unsigned char *heads, double tolerance) {
    return fa_verify_results_scaled(label, tensor, got, want, dims, heads, tolerance, 0.0);
}

void fa_head_errors(const float *got, const double *want, const int64_t dims[4], const unsigned char *heads,
                    const fa_row_bounds *bounds, double *out) {
    const int64_t D = dims[3], n_heads = dims[0] * dims[1];
    for (int64_t h = 0; h < n_heads; h++) {
        out[h] = 0.0;
        if (heads && !heads[h]) continue;
        for (int64_t r = h * dims[2]; r < (h + 1) * dims[2]; r++) {
            double err = 0.0;
            for (int64_t d = 0; d < D; d++) err = fmax(err, fabs((double)got[r * D + d] - want[r * D + d]));
            const double rel = err == 0.0 ? 0.0 : fmax(0.0, err - bounds->tiny[r]) / bounds->scale[r];
            if (isfinite(rel)) out[h] = fmax(out[h], rel);   // fmax leaves a NaN row out
        }
    }
}
