// fa_verify.h - verify_results: compare one float32 result with the float64 oracle.
#ifndef FA_VERIFY_H
#define FA_VERIFY_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>

#include "fa_oracle.h"

// One row of the check block. The check is made row by row (a row: the D elements of one query or key row; an
// element of LSE), each row against its own scale and tolerance; the numbers kept here are those of the row that
// came closest to its tolerance (or of the first NaN/Inf).
typedef struct {
    char label[48];         // what was checked, e.g. "naive cuda" or "step 2 causal cpu"
    char tensor[8];         // "O", "LSE", "dQ", ...
    double max_abs_err;     // the worst row's max |got - want|
    double scale;           // ... the size of the sums that make its elements (what its error is measured against)
    double rel_err;         // ... max_abs_err / scale
    double tolerance;       // ... and its tolerance: the check passes when every row's rel err <= its tolerance
    double max_rel_err;     // the largest rel err of any row (FlashAttention's rule compares these)
    double ref_err;         // the max_rel_err of a straightforward implementation on the same inputs, or -1
    double ref_factor;      // ... and the check also asks rel err <= ref_factor * ref_err (+ a rounding floor)
    int64_t worst[4];       // (b, h, s, d) of the worst element: in the worst row, or the first NaN/Inf
    int64_t nonfinite;      // NaN or Inf elements anywhere in the result (an unwritten, poisoned element is NaN)
    int64_t compared;       // elements compared with the oracle (all heads, or the heads the oracle computed)
    int64_t total;          // elements in the tensor
    int pass;
} fa_check;

// Tolerances, as a fraction of each row's scale. float32 has eps = 1.2e-7; the kernels sum at most a few thousand
// products per element in float32 and use exp2f, so the errors we measure sit near 1e-6 of the row's scale (see
// tests/test_common.c and the phase tests). The tolerances leave a margin of ten to fifty over that, and stay far
// below what a real bug gives: one key wrongly let through the causal mask, or one skipped rescale, moves an output by
// 1e-3 or more of the scale. Each row adds its own logit part (fa_row_bounds.logit, fa_oracle.h).
#define FA_TOL_FORWARD  2e-5   // O and LSE
#define FA_TOL_BACKWARD 1e-4   // dQ, dK, dV: longer float32 sums (over both Sq and Sk) and a subtraction dP - Delta

// FlashAttention's own rule, added to a check: the result's rel err is at most `factor` times that of a
// straightforward implementation measured in the same run (for a float32 flash kernel, standard attention with S and P
// materialised), plus FA_REFERENCE_FLOOR and the row's logit part: a reference that happens to be exact (a single
// key: P = 1) cannot fail a result that is off by a rounding, and where the logits' rounding decides both errors
// (near-ties of large logits) the ratio of two lucky draws is not held against either.
#define FA_REFERENCE_FLOOR 1.2e-7   // one float32 epsilon of the scale

// How one tensor is checked, row by row. Row r of head h passes when
//   max_d |got - want| <= (tolerance + bounds.logit[r] + head_extra[h]) * bounds.scale[r]
// and, with a reference, also <= (reference_factor * reference->max_rel_err + FA_REFERENCE_FLOOR + bounds.logit[r])
// * bounds.scale[r].
typedef struct {
    double tolerance;             // relative to each row's scale, in every row
    fa_row_bounds bounds;         // per-row scale and logit part (fa_oracle_magnitudes); NULL arrays: every row's scale
                                  // is uniform_scale (or, when that is 0, the tensor's largest |want|), no logit part
    double uniform_scale;
    const double *head_extra;     // [dims[0] * dims[1]]: added to the tolerance of the head's rows (half rules), or NULL
    const fa_check *reference;    // FlashAttention's rule against this check of a straightforward implementation, or NULL
    double reference_factor;
} fa_rule;

// Row r's tolerance under rule (relative to its scale), in a tensor of rows_per_head rows per head.
double fa_row_tolerance(const fa_rule *rule, int64_t r, int64_t rows_per_head);

// Compares got (float32) with want (float64), both laid out as [dims[0], dims[1], dims[2], dims[3]] = (b, h, s, d);
// LSE passes dims (B, H, Sq, 1). heads (dims[0]*dims[1] bytes, NULL = all) says which heads the oracle computed:
// elements of other heads are only scanned for NaN and Inf. A result that is finite where the oracle says NaN or Inf
// fails, as does any NaN or Inf in the result.
fa_check fa_verify_rows(const char *label, const char *tensor, const float *got, const double *want,
                        const int64_t dims[4], const unsigned char *heads, const fa_rule *rule);

// fa_verify_rows with one scale for every row and no logit part: for tests whose reference is a plain tensor.
// Why the size of the terms and not the largest |want|: a float32 sum of large terms that cancel carries an error the
// size of its terms, not of its result. With all keys equal, for example, the exact dQ is zero and a correct float32
// dQ is a few 1e-8: measured against max |want| = 0 it would fail; measured against its terms it passes, while a wrong
// element, which is wrong on the scale of the terms, still fails.
fa_check fa_verify_results_scaled(const char *label, const char *tensor, const float *got, const double *want,
                                  const int64_t dims[4], const unsigned char *heads, double tolerance, double scale);

// fa_verify_results_scaled with scale = max |want|.
fa_check fa_verify_results(const char *label, const char *tensor, const float *got, const double *want,
                           const int64_t dims[4], const unsigned char *heads, double tolerance);

// The largest rel err of the rows of each head (out[dims[0] * dims[1]]; 0 for heads not compared, rows with NaN or Inf
// left out): the half-precision rules hold each head to its own reference's error.
void fa_head_errors(const float *got, const double *want, const int64_t dims[4], const unsigned char *heads,
                    const fa_row_bounds *bounds, double *out);

#ifdef __cplusplus
}
#endif

#endif
