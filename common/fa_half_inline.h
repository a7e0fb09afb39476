// fa_half_inline.h - the half types and float32, both ways, inlined and without branches (C only; the GPU has its
// own conversions).
//
// Why: a loop over a row that calls a function per value does not vectorise. Phase 5 step 4's CPU twin widens every
// half input to float32 and rounds every P and dS to the half type; as calls into fa_half.c, one per value, the two
// took a large share of the backward's time. Written here once, they are what fa_half.c's fa_half_to_float() and
// fa_round_to_dtype() run as well, so both give the same bits, NaN and Inf included, for every input
// (tests/test_phase5_half.c checks them against a computation in double precision).
//
// They are FA_SIMD_INLINE (fa_simd.h): inlined into each SIMD version of the kernels that call them.
#ifndef FA_HALF_INLINE_H
#define FA_HALF_INLINE_H

#include "fa_half.h"   // FA_DTYPE_*
#include "fa_simd.h"   // FA_SIMD_INLINE

#include <math.h>
#include <stdint.h>
#include <string.h>

// A float's bits and back; compilers turn the copy into a register move.
static inline uint32_t fa_float_bits(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits;
}

static inline float fa_bits_float(uint32_t bits) {
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

// A half value in float32 (exact). bf16: its bits are the top half of the float32's. fp16: the exponent rebiased
// (15 to 127) and the mantissa moved to the top; all ones (Inf, NaN) stays all ones; a subnormal fp16 (exponent 0)
// is its mantissa times 2^-24.
FA_SIMD_INLINE float fa_half_to_float_inline(uint16_t h, int dtype) {
    if (dtype == FA_DTYPE_BF16) return fa_bits_float((uint32_t)h << 16);
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    const uint32_t normal = exponent == 0x1fu ? 0x7f800000u | (mantissa << 13)
                                              : ((exponent + 112u) << 23) | (mantissa << 13);
    const uint32_t subnormal = fa_float_bits((float)mantissa * 0x1p-24f);
    return fa_bits_float(sign | (exponent == 0 ? subnormal : normal));
}

// x rounded to bf16, to nearest, ties to even. bf16 is the top half of a float32: add just under half of the 16
// bits dropped, plus one where the kept part is odd, then clear them (a carry bumps the exponent, past the largest
// bf16 to Inf). A NaN stays a (quiet) NaN.
FA_SIMD_INLINE float fa_round_to_bf16(float x) {
    const uint32_t bits = fa_float_bits(x);
    const int nan = (bits & 0x7fffffffu) > 0x7f800000u;
    return fa_bits_float(nan ? (bits & 0xffff0000u) | 0x00400000u
                             : (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u);
}

// x rounded to fp16, to nearest, ties to even. fp16 has 10 mantissa bits and 5 exponent bits: |x| rounds to a
// multiple of 2^(e - 10), e its exponent, but not below 2^-24 (the subnormal steps, e = -14); from 65520 (65504 +
// half a step) up it is Inf. The rounding is float32's own: |x| + 1.5 * 2^(e + 13) lies where float32's steps are
// 2^(e - 10), so the addition rounds |x| to such a step, ties to even (the constant is an even number of steps), and
// subtracting the constant again is exact. That needs float arithmetic done in float32 (not in a wider format) and
// not reassociated (no -ffast-math). Float operations and bit masks only, where the bit arithmetic of bf16 would
// need integer vectors, which the "fma" version of FA_SIMD_CLONES has only in 128 bits.
FA_SIMD_INLINE float fa_round_to_fp16(float x) {
    const uint32_t bits = fa_float_bits(x), sign = bits & 0x80000000u, magnitude = bits & 0x7fffffffu;
    const float a = fa_bits_float(magnitude), two_e = fa_bits_float(magnitude & 0x7f800000u);   // |x|, 2^e
    const float step_base = isgreater(two_e, 0x1p-14f) ? two_e : 0x1p-14f;
    const float constant = step_base * 12288.0f;   // 1.5 * 2^13 * 2^e
    float rounded = (a + constant) - constant;
    rounded = isgreaterequal(a, 65520.0f) ? INFINITY : rounded;
    const uint32_t nan = (magnitude & 0x7fffe000u) | 0x00400000u;   // a NaN stays a (quiet) NaN
    return fa_bits_float(sign | (isunordered(a, a) ? nan : fa_float_bits(rounded)));
}

#endif
