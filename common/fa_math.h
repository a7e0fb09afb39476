// fa_math.h - the constants of the base-2 softmax, and the two conversions of the log-sum-exp between base e and
// base 2, in one place for the CPU and the CUDA code.
//
// The kernels compute scores in base 2 (q is multiplied by qk_scale = scale * LOG2E once), so that every exponential
// is a cheap 2^x: exp(x) = 2^(x * LOG2E). The log-sum-exp the forward stores is in base e, as PyTorch's is.
#ifndef FA_MATH_H
#define FA_MATH_H

#include <math.h>

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

// The row's log-sum-exp in base 2 as two floats, hi + lo, exact to about 1e-12: the backward then computes
// p = exp2((s - hi) - lo), where s - hi is exact for every key that matters (s and hi are close: Sterbenz's lemma)
// and the small lo is subtracted after. (A single float would round at the large magnitude again.)
FA_HOST_DEVICE static inline void lse_to_base2(float lse, float residual, float *hi, float *lo) {
    const double lse2 = (double)lse * 1.4426950408889634 + (double)residual;
    *hi = (float)lse2;
    *lo = (float)(lse2 - (double)*hi);
}

#endif
