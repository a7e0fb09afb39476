// fa_verify.h - verify_results: compare one float32 result with the float64 oracle.
#ifndef FA_VERIFY_H
#define FA_VERIFY_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>

// One row of the check block.
typedef struct {
    char label[48];         // what was checked, e.g. "naive cuda" or "step 2 causal cpu"
    char tensor[8];         // "O", "LSE", "dQ", ...
    double max_abs_err;     // max |got - want| over the compared elements
    double scale;           // what errors are measured against: the size of the sums that make the elements
    double rel_err;         // max_abs_err / scale
    double tolerance;       // the check passes when rel_err <= tolerance (and nothing is NaN or Inf)
    double ref_err;         // the max abs error of a straightforward implementation on the same inputs, or -1
    double ref_factor;      // ... and the check also asks max_abs_err <= ref_factor * ref_err (+ a rounding floor)
    int64_t worst[4];       // (b, h, s, d) of the worst element: the largest error, or the first NaN/Inf
    int64_t nonfinite;      // NaN or Inf elements anywhere in the result (an unwritten, poisoned element is NaN)
    int64_t compared;       // elements compared with the oracle (all heads, or the heads the oracle computed)
    int64_t total;          // elements in the tensor
    int pass;
} fa_check;

// Tolerances, as a fraction of the tensor's scale (see fa_verify_results_scaled). float32 has eps = 1.2e-7; the kernels sum at
// most a few thousand products per element in float32 and use exp2f, so the errors we measure sit near 1e-6 of the
// tensor's scale (see tests/test_common.c and the phase tests). The tolerances leave a margin of ten to fifty over
// that, and stay far below what a real bug gives: one key wrongly let through the causal mask, or one skipped
// rescale, moves an output by 1e-3 or more of the scale.
#define FA_TOL_FORWARD  2e-5   // O and LSE
#define FA_TOL_BACKWARD 1e-4   // dQ, dK, dV: longer float32 sums (over both Sq and Sk) and a subtraction dP - Delta

// Compares got (float32) with want (float64), both laid out as [dims[0], dims[1], dims[2], dims[3]] = (b, h, s, d);
// LSE passes dims (B, H, Sq, 1). heads (B*H bytes, NULL = all) says which heads the oracle computed: elements of
// other heads are only scanned for NaN and Inf.
//
// `scale` is what the error is measured against: the size of the sums that make the elements, as the oracle measures
// it (fa_oracle_magnitudes: for O, the largest sum_j p_ij |v_jd|; for dQ, the largest scale * sum_j |dS terms| |k_jd|;
// ...). Why not the largest |want|: a float32 sum of large terms that cancel carries an error the size of its terms,
// not of its result. With all keys equal, for example, the exact dQ is zero and a correct float32 dQ is a few 1e-8:
// measured against max |want| = 0 it would fail; measured against its terms it passes, while a wrong element, which
// is wrong on the scale of the terms, still fails.
fa_check fa_verify_results_scaled(const char *label, const char *tensor, const float *got, const double *want,
                                  const int64_t dims[4], const unsigned char *heads, double tolerance, double scale);

// fa_verify_results_scaled with scale = max |want|, for tests whose reference is a plain nonzero tensor.
fa_check fa_verify_results(const char *label, const char *tensor, const float *got, const double *want,
                           const int64_t dims[4], const unsigned char *heads, double tolerance);

// FlashAttention's own rule, added to a check: the result's max abs error is at most `factor` times that of a
// straightforward implementation measured in the same run (`reference`: for a float32 flash kernel, standard
// attention with S and P materialised), plus FA_REFERENCE_FLOOR * scale, so that a reference that happens to be
// exact (a single key: P = 1) cannot fail a result that is off by a rounding.
#define FA_REFERENCE_FLOOR 1.2e-7   // one float32 epsilon of the scale
void fa_check_against_reference(fa_check *check, const fa_check *reference, double factor);

#ifdef __cplusplus
}
#endif

#endif
