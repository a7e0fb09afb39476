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
    double rel_err;         // max_abs_err / max |want|: the error measured against the tensor's scale
    double tolerance;       // the check passes when rel_err <= tolerance (and nothing is NaN or Inf)
    int64_t worst[4];       // (b, h, s, d) of the worst element: the largest error, or the first NaN/Inf
    int64_t nonfinite;      // NaN or Inf elements anywhere in the result (an unwritten, poisoned element is NaN)
    int64_t compared;       // elements compared with the oracle (all heads, or the heads the oracle computed)
    int64_t total;          // elements in the tensor
    int pass;
} fa_check;

// Tolerances, as a fraction of the tensor's largest reference value. float32 has eps = 1.2e-7; the kernels sum at
// most a few thousand products per element in float32 and use exp2f, so the errors we measure sit near 1e-6 of the
// tensor's scale (see tests/test_common.c and the phase tests). The tolerances leave a margin of ten to fifty over
// that, and stay far below what a real bug gives: one key wrongly let through the causal mask, or one skipped
// rescale, moves an output by 1e-3 or more of the scale.
#define FA_TOL_FORWARD  2e-5   // O and LSE
#define FA_TOL_BACKWARD 1e-4   // dQ, dK, dV: longer float32 sums (over both Sq and Sk) and a subtraction dP - Delta

// Compares got (float32) with want (float64), both laid out as [dims[0], dims[1], dims[2], dims[3]] = (b, h, s, d);
// LSE passes dims (B, H, Sq, 1). heads (B*H bytes, NULL = all) says which heads the oracle computed: elements of
// other heads are only scanned for NaN and Inf.
fa_check fa_verify_results(const char *label, const char *tensor, const float *got, const double *want,
                           const int64_t dims[4], const unsigned char *heads, double tolerance);

#ifdef __cplusplus
}
#endif

#endif
