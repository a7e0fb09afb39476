// bf16_dot.h - phase 5, step 4's CPU twin with bf16 inputs: the products along d on AVX512_BF16 (vdpbf16ps), where the
// CPU has it (bf16_dot.c). One instruction adds 16 pairs of exact bf16 products to 16 float32 sums: the CPU's nearest
// thing to a tensor core's mma. Chosen at run time; everywhere else the float32 micro-kernel of backward_tiles.h runs.
// It computes the AVX-512 block of that micro-kernel, 8 x 32, with 16 independent sums (BF16_DOT_ROWS says why).
#ifndef BF16_DOT_H
#define BF16_DOT_H

#include <stdint.h>

#include "fa_shape.h"   // fa_strides

// The block bf16_dot_along_d() computes: 8 rows x 32 columns, two 512-bit registers of float32 sums per row. 16
// independent sums, because each vdpbf16ps waits for the one before it on the same sum (several cycles) while the
// core could start one or two a cycle: with one register per row of a 4-row block (4 sums) it waited most of the time.
// It is the AVX-512 block of the float32 micro-kernels (backward_tiles.h), and runs only on AVX-512 CPUs.
#define BF16_DOT_ROWS 8
#define BF16_DOT_COLS 32

// 1 when dtype is bf16 and this CPU has AVX512_BF16 (and the build could compile for it).
int bf16_dot_available(int dtype);
// What the products run on, for the report: "products along d on AVX512_BF16 (vdpbf16ps) ..." or "float32 FMAs ...".
const char *bf16_dot_products(int dtype);

// Rows first .. first + count - 1 of a [S, D] bf16 tensor, as bits: `rows` as [count][D_pad] and, when `pairs` is not
// NULL, in pairs along d, [D_pad / 2][pairs_pad][2]: element (r, d) at pairs[((d / 2) * pairs_pad + r) * 2 + d % 2],
// so that one 64-byte load holds dims d and d + 1 of 16 rows. Rows past `exist` are zeros; the padding is left alone
// (the caller zeroes the tiles first).
void bf16_dot_stage(const uint16_t *x, fa_strides strides, int64_t first, int64_t count, int64_t exist, int64_t D,
                    int64_t D_pad, uint16_t *rows, uint16_t *pairs, int64_t pairs_pad);

// out[r][jj] = sum_d a[r][d] * b[jj][d], float32 sums, for BF16_DOT_ROWS rows of a ([rows][D_pad] bf16) and
// BF16_DOT_COLS columns of b (staged in pairs, pairs_pad = b_pad), written to out ([BF16_DOT_ROWS][out_pad]). Only
// where bf16_dot_available() said 1.
void bf16_dot_along_d(const uint16_t *a, int64_t D_pad, const uint16_t *b_pairs, int64_t b_pad, int64_t D, float *out,
                      int64_t out_pad);

#endif
