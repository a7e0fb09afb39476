// fa_exp2.h - a vectorisable 2^x for the CPU kernels (phases 2 to 4).
//
// Why: in the CPU flash kernels every score goes through one exponential. The C library's expf is a function
// call the compiler cannot vectorise, and it takes longer than the 4*D multiply-adds the score costs, so a loop
// that calls it runs at the speed of expf. fa_exp2() is a few multiply-adds and bit operations with no branch and
// no call: inside a loop, the compiler turns it into vector instructions like the rest of the loop.
// (CUDA has its own: exp2f compiles to the GPU's hardware exponential unit.)
//
// How:  2^x = 2^n * 2^f   with n = round(x) an integer and f = x - n in [-0.5, 0.5].
//   2^n is exact: it is the float whose exponent bits are n + 127 (and mantissa 0).
//   2^f lies in [0.707, 1.414] and a degree-6 polynomial matches it to 3e-9 (a fit on Chebyshev nodes, so that the
//   error is spread evenly over the interval); float32 rounding of the polynomial then dominates: 1-2 ulp in all
//   (tests/test_phase2_exp2.c measures it against the C library in double precision).
// Range: x is clamped to [-127, 127]. Below -127 the answer rounds to 0 (2^-127 would be a denormal float; we flush
// it): exp2(-INFINITY) is exactly 0, which is what a masked score needs. A NaN x gives NaN (through p).
#ifndef FA_EXP2_H
#define FA_EXP2_H

#include "fa_simd.h"   // FA_SIMD_INLINE: inlined into each SIMD version of the kernels that call it

#include <math.h>
#include <stdint.h>
#include <string.h>

// Adding 1.5 * 2^23 to a float of magnitude below 2^22 leaves no bits for its fraction: the sum is rounded to an
// integer (round to nearest), and subtracting the constant again gives round(x) as a float, with no branch.
#define FA_EXP2_ROUND_MAGIC 12582912.0f

// fa_exp2_clamped(x, lowest, highest): the same 2^x with x clamped to [lowest, highest] first, a range within
// [-127, 127] (fa_exp2 passes -127 and 127). A caller that reads the bounds from memory, where the compiler cannot
// see their values, gets one vector max and one min for the clamps: with the constants in sight, GCC 12 follows the
// clamped value through the polynomial (for x = -127 it knows the answer) and computes both outcomes with compares
// and selects, about twice the instructions (phase5_tensor_cores/5_backward_f32_cpu.c, where with fa_exp2 the
// exponentials take close to a tenth of the time). The results are the same bits either way.
FA_SIMD_INLINE float fa_exp2_clamped(float x, float lowest, float highest) {
    // isless/isgreater are the quiet comparisons: a plain `<` may raise an exception on NaN, and that keeps GCC
    // (without -ffast-math) from turning the choice into a vector select, so the whole loop would stay scalar.
    x = isless(x, lowest) ? lowest : x;
    x = isgreater(x, highest) ? highest : x;
    const float n = (x + FA_EXP2_ROUND_MAGIC) - FA_EXP2_ROUND_MAGIC;   // round(x)
    const float f = x - n;                                             // in [-0.5, 0.5]
    // 2^f by Horner's rule; the coefficients approximate ln(2)^k / k!.
    float p = 1.5469732e-4f;
    p = p * f + 1.3400432e-3f;
    p = p * f + 9.6180256e-3f;
    p = p * f + 5.5503272e-2f;
    p = p * f + 2.4022651e-1f;
    p = p * f + 6.9314721e-1f;
    p = p * f + 1.0f;
    // 2^n: put n + 127 into the exponent field (bits 23..30). n = -127 gives the bits of +0.0f. A NaN x has a NaN n,
    // and converting NaN to an integer is undefined behaviour: it takes n = 0 instead (p is NaN already).
    // (n + 127) * 2^23 is an integer below 2^31 and exact in float, so converting it gives the bits directly: a
    // float multiply and a conversion, which AVX has in 256-bit vectors, where the shift (n + 127) << 23 would need
    // AVX2's integer instructions, and the "fma" version of FA_SIMD_CLONES (common/fa_simd.h) would fall back to
    // 128-bit vectors for the whole loop.
    const float n_finite = n == n ? n : 0.0f;
    const uint32_t bits = (uint32_t)(int32_t)((n_finite + 127.0f) * 8388608.0f);   // 8388608 = 2^23
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);   // reinterpret the bits; compilers turn this into a register move
    return p * two_n;
}

FA_SIMD_INLINE float fa_exp2(float x) { return fa_exp2_clamped(x, -127.0f, 127.0f); }

#endif
