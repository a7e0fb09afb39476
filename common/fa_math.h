// fa_math.h - the constants of the base-2 softmax, and the two conversions of the log-sum-exp between base e and
// base 2, in one place for the CPU and the CUDA code.
//
// The kernels compute scores in base 2 (q is multiplied by qk_scale = scale * LOG2E once), so that every exponential
// is a cheap 2^x: exp(x) = 2^(x * LOG2E). The log-sum-exp the forward stores is in base e, as PyTorch's is.
#ifndef FA_MATH_H
#define FA_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define FA_HOST_DEVICE __host__ __device__   // the CUDA kernels call the same function as the CPU code
#else
#define FA_HOST_DEVICE
#endif

#define LOG2E 1.4426950408889634f   // log2(e): exp(x) = exp2(x * LOG2E)
#define LN2 0.6931471805599453f     // ln(2) = 1 / LOG2E

// The log-sum-exp and the accuracy of the backward pass. At logits of a few hundred the log-sum-exp is a number of a
// few hundred too, where float32 steps by 3e-5: however carefully it is rounded, a float32 LSE is off by up to 1.5e-5,
// and every probability the backward recomputes from it, P_ij = exp(S_ij - LSE_i), is off by that relative amount.
// That made dV four times less accurate than standard attention's (docs/04-backward.md measures it). So the forward
// also saves what the rounding lost, `lse_residual`, one float per row beside LSE, and the backward adds it back.

// LSE = ln(2) * (m + log2(l)) for a row whose running max is m and running sum l (both in base 2), rounded once; and
// in *residual (base 2) the part of m + log2(l) that the float32 LSE does not hold.
FA_HOST_DEVICE static inline float lse_from_base2(float m, float l, float *residual) {
    const double lse2 = (double)m + log2((double)l);
    const float lse = (float)(0.6931471805599453 * lse2);
    *residual = isfinite(lse) ? (float)(lse2 - (double)lse * 1.4426950408889634) : 0.0f;   // (NaN inputs: NaN LSE)
    return lse;
}

// The row's largest score. LSE = s_max + log(sum_j exp(s_j - s_max)), and at logits of a few hundred the first term
// is nearly all of it, so LSE is only as accurate as s_max. The kernels' m is a float32 dot product of D terms at
// that size, summed in base 2 from a Q already rounded once more by the factor qk_scale: a few units in float32's
// last place, which standard attention's float32 max has too, but which the LSE need not inherit. So the kernels
// remember which key gave m (max_key: its row in k, the head's K), and at the end compute that one score again, in
// double: every product of two floats is exact in double, and D of them add with an error near 1e-16 of their size.
// max_key < 0 (the row saw no key) gives NaN.
FA_HOST_DEVICE static inline double score_in_double(const float *q_row, int64_t stride_qd, const float *k,
                                                    int64_t stride_ks, int64_t stride_kd, int64_t max_key, int64_t D,
                                                    float scale) {
    if (max_key < 0) return NAN;
    const float *k_row = k + max_key * stride_ks;
    double dot = 0.0;
    for (int64_t d = 0; d < D; d++) dot += (double)q_row[d * stride_qd] * (double)k_row[d * stride_kd];
    return (double)scale * dot;
}

// LSE from the largest score in double (s_max; NaN: not known, then m stands in for it) and the kernel's m and l
// (base 2), rounded once: s_max + ln(l), where l = sum_j 2^(s_j - m) keeps the kernel's own value (it is near 1 at
// large logits, and its error is float32's relative one). The backward recomputes the forward's own float32 scores
// bit for bit, so what it needs is their log-sum-exp, m + log2(l) in base 2; *residual is that minus LSE * LOG2E.
FA_HOST_DEVICE static inline float lse_from_max_score(double s_max, float m, float l, float *residual) {
    const double lse2 = (double)m + log2((double)l);
    const double top = isnan(s_max) ? 0.6931471805599453 * (double)m : s_max;
    const float lse = (float)(top + 0.6931471805599453 * log2((double)l));
    *residual = isfinite(lse) ? (float)(lse2 - (double)lse * 1.4426950408889634) : 0.0f;   // (NaN inputs: NaN LSE)
    return lse;
}

// The row's log-sum-exp in base 2 as two floats, hi + lo, exact to about 1e-12: the backward then computes
// p = exp2((s - hi) - lo), where s - hi is exact for every key that matters (s and hi are close: Sterbenz's lemma)
// and the small lo is subtracted after. (A single float would round at the large magnitude again.)
FA_HOST_DEVICE static inline void lse_to_base2(float lse, float residual, float *hi, float *lo) {
    const double lse2 = (double)lse * 1.4426950408889634 + (double)residual;
    *hi = (float)lse2;
    *lo = (float)(lse2 - (double)*hi);
}

#endif
