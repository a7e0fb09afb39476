// fa_half.h - half precision (phase 5 on): fp16 and bf16 storage, conversions, and the straightforward reference
// that half-precision results are judged against.
//
// Storage: a half tensor lives on the host as uint16_t bits ([B, H, S, D] like every tensor). The arithmetic is
// float32 throughout (tensor cores multiply half inputs exactly and accumulate in float32).
//   fp16 (IEEE binary16): 1 sign, 5 exponent, 10 mantissa bits; unit roundoff 2^-11; largest finite 65504.
//   bf16 (bfloat16):      1 sign, 8 exponent,  7 mantissa bits; unit roundoff 2^-8;  the range of float32.
// Both conversions from float round to nearest, ties to even (what the GPU's __float2half_rn and
// __float2bfloat16_rn do), keep Inf, keep NaN a NaN, and overflow to Inf.
//
// Inputs: the random float32 inputs are rounded to the half type in place (fa_round_floats), so that the float64
// oracle, the CPU and the GPU all see the same numbers: float32 holds every fp16 and bf16 value exactly.
#ifndef FA_HALF_H
#define FA_HALF_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>

#include "fa_shape.h"

enum { FA_DTYPE_FP32 = 0, FA_DTYPE_FP16 = 1, FA_DTYPE_BF16 = 2 };

const char *fa_dtype_name(int dtype);          // "fp32", "fp16", "bf16"
int fa_dtype_parse(const char *text);          // FA_DTYPE_*, or -1 for anything else
double fa_dtype_unit_roundoff(int dtype);      // the largest relative rounding error: 2^-24, 2^-11, 2^-8

uint16_t fa_float_to_fp16(float x);
float fa_fp16_to_float(uint16_t h);
uint16_t fa_float_to_bf16(float x);
float fa_bf16_to_float(uint16_t h);

// The two above, chosen by dtype (FA_DTYPE_FP16 or FA_DTYPE_BF16).
uint16_t fa_float_to_half(float x, int dtype);
float fa_half_to_float(uint16_t h, int dtype);
// x rounded to dtype and back to float (exact); FA_DTYPE_FP32 returns x.
float fa_round_to_dtype(float x, int dtype);

// score_in_double (fa_math.h) for half inputs: scale * q_row . k_row(max_key), in double, from the half values a
// tensor-core kernel multiplies (each exact in float, each product exact in double). max_key < 0 gives NaN.
double fa_half_score_in_double(const uint16_t *q_row, int64_t stride_qd, const uint16_t *k, int64_t stride_ks,
                               int64_t stride_kd, int64_t max_key, int64_t D, float scale, int dtype);

// Rounds x[0..n) to dtype in place.
void fa_round_floats(float *x, int64_t n, int dtype);
// h[i] = the bits of x[i] in dtype.
void fa_floats_to_half(const float *x, uint16_t *h, int64_t n, int dtype);

// The straightforward implementation at the same precision, the yardstick of the half-precision check
// (docs/architecture.md, "Conventions"): attention with the softmax materialised, rounding where the tensor-core kernels round:
//   S = scale * Q K^T   float32 sums of products of the half inputs (exact products, as on a tensor core)
//   P = softmax(S)      float32, then rounded to dtype (the kernels round P before P V)
//   O = P V             float32 sums;  LSE_i = log(sum_j exp(S_ij)) in float32
// q, k, v hold values already rounded to dtype (fa_round_floats); contiguous [B, H, S, D]. Only the heads marked in
// `heads` (NULL = all) are computed; o and lse are indexed like the full tensors. float32, on the CPU, in parallel.
void fa_half_reference_forward(const fa_shape *shape, int dtype, const float *q, const float *k, const float *v,
                               const unsigned char *heads, float *o, float *lse);

// The straightforward backward at the same precision (step 4's yardstick): the gradients of the reference above,
// with the softmax materialised row by row and the rounding points of the tensor-core backward:
//   P       as in the forward reference (float32), O = round(P) V, Delta_i = sum_d dO_id O_id   (float32)
//   dP = dO V^T,  dS = P * (dP - Delta)        float32, from the unrounded P
//   dV = round(P)^T dO,  dK = scale round(dS)^T Q,  dQ = scale round(dS) K     float32 sums, round() to dtype
// q, k, v, dout hold values already rounded to dtype; contiguous [B, H, S, D]. Only the heads marked in `heads`
// (NULL = all) are computed. float32, on the CPU, in parallel (over query rows for dQ, over key rows for dK, dV).
void fa_half_reference_backward(const fa_shape *shape, int dtype, const float *q, const float *k, const float *v,
                                const float *dout, const unsigned char *heads, float *dq, float *dk, float *dv);

#ifdef __cplusplus
}
#endif

#endif
