// bf16_dot.c - the 32 x 32 blocks of step 4's bf16 products on AMX, AVX512_BF16 or plain C (bf16_dot.h says what
// and when), and the staging of the tiles they read.
#include "bf16_dot.h"

#include "fa_half.h"          // FA_DTYPE_BF16
#include "fa_half_inline.h"   // fa_half_to_float_inline: a bf16 value in float32, for the emulated block
#include "fa_tensor.h"   // fa_die
#include "fa_cpu_units.h"   // which units this CPU has; AMX asked of Linux and configured

#include <stdlib.h>
#include <string.h>

// The instructions, where the compiler has them (FA_CPU_UNITS, common/fa_cpu_units.h): built always, run where the
// CPU has them.
#if FA_CPU_UNITS
#include <immintrin.h>
#endif

static int forced = -1;   // bf16_dot_force()'s unit, or -1: the best this CPU has

static bf16_dot_unit best_unit(void) {
    if (fa_cpu_amx_granted()) return BF16_DOT_AMX;   // asks Linux for AMX's registers, once
    return fa_cpu_has_avx512_bf16() ? BF16_DOT_AVX512 : BF16_DOT_NONE;
}

bf16_dot_unit bf16_dot_unit_for(int dtype) {
    if (dtype != FA_DTYPE_BF16) return BF16_DOT_NONE;
    return forced >= 0 ? (bf16_dot_unit)forced : best_unit();
}

void bf16_dot_force(bf16_dot_unit unit) {
    if (unit == BF16_DOT_AMX && !fa_cpu_amx_granted())
        fa_die("--cpu-bf16 amx: this CPU has no AMX-BF16 (or Linux did not grant it, or this build cannot compile it)");
    if (unit == BF16_DOT_AVX512 && !fa_cpu_has_avx512_bf16())
        fa_die("--cpu-bf16 avx512: this CPU has no AVX512_BF16 (or this build cannot compile it)");
    forced = (int)unit;
}

const char *bf16_dot_products(int dtype) {
    switch (bf16_dot_unit_for(dtype)) {
    case BF16_DOT_AMX: return "every product on AMX-BF16 tiles (tdpbf16ps), 32 x 32 blocks";
    case BF16_DOT_AVX512: return "every product on AVX512_BF16 (vdpbf16ps), 32 x 32 blocks";
    case BF16_DOT_EMULATED: return "every product in bf16 pairs by plain C (the units' sums, emulated)";
    case BF16_DOT_NONE: break;
    }
    if (dtype != FA_DTYPE_BF16) return "float32 FMAs";
    if (forced == BF16_DOT_NONE && best_unit() != BF16_DOT_NONE) return "float32 FMAs (--cpu-bf16 fma)";
    return FA_CPU_UNITS ? "float32 FMAs (this CPU has neither AMX-BF16 nor AVX512_BF16)"
                        : "float32 FMAs (this build cannot compile for AMX-BF16 or AVX512_BF16)";
}

// Plain C: each lane adds its two products one after the other, as the instructions do (both are exact in float32).
static void emulated_block(const uint16_t *a, int64_t a_pad, const uint16_t *b_pairs, int64_t b_pad, int64_t n,
                           float *out, int64_t out_pad, int accumulate) {
    for (int r = 0; r < BF16_DOT_BLOCK; r++)
        for (int c = 0; c < BF16_DOT_BLOCK; c++) {
            float sum = accumulate ? out[r * out_pad + c] : 0.0f;
            for (int64_t k = 0; k < n; k += 2) {
                const uint16_t *b_kc = b_pairs + ((k / 2) * b_pad + c) * 2;
                sum += fa_half_to_float_inline(a[r * a_pad + k], FA_DTYPE_BF16) *
                       fa_half_to_float_inline(b_kc[0], FA_DTYPE_BF16);
                sum += fa_half_to_float_inline(a[r * a_pad + k + 1], FA_DTYPE_BF16) *
                       fa_half_to_float_inline(b_kc[1], FA_DTYPE_BF16);
            }
            out[r * out_pad + c] = sum;
        }
}

#if FA_CPU_UNITS
// AVX512_BF16: 8 rows x 32 columns at a time, 16 zmm sums, each of which waits only for its own previous vdpbf16ps
// (several cycles) while the core could start one or two a cycle; four such make the block. Per pair k, k + 1: two
// 64-byte loads of b (columns 0-15 and 16-31) and, for each row, a broadcast of a's pair and two vdpbf16ps:
//
//   lane c of sum[r][h] += a[r][k] * b[k][16h+c] + a[r][k+1] * b[k+1][16h+c]    (16 lanes = 16 columns)
//        b (one zmm, h = 0): | b[k][0] b[k+1][0] | b[k][1] b[k+1][1] | ... | b[k][15] b[k+1][15] |
//        a (broadcast):      | a[r][k] a[r][k+1] | a[r][k] a[r][k+1] | ... | a[r][k]  a[r][k+1]  |
__attribute__((target("avx512bf16,avx512f"))) static void avx512_rows(const uint16_t *a, int64_t a_pad,
                                                                      const uint16_t *b_pairs, int64_t b_pad,
                                                                      int64_t n, float *out, int64_t out_pad,
                                                                      int accumulate) {
    __m512 sum[8][2];   // [row][columns 0-15, 16-31]
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        sum[r][0] = accumulate ? _mm512_loadu_ps(out + r * out_pad) : _mm512_setzero_ps();
        sum[r][1] = accumulate ? _mm512_loadu_ps(out + r * out_pad + 16) : _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < n; k += 2) {
        const uint16_t *b_k = b_pairs + k * b_pad;   // pair k / 2: b_pad x 2 bf16
        const __m512i b_lo = _mm512_loadu_si512((const void *)b_k), b_hi = _mm512_loadu_si512((const void *)(b_k + 32));
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            int32_t pair;
            memcpy(&pair, a + r * a_pad + k, sizeof pair);
            const __m512bh a_r = (__m512bh)_mm512_set1_epi32(pair);
            sum[r][0] = _mm512_dpbf16_ps(sum[r][0], a_r, (__m512bh)b_lo);
            sum[r][1] = _mm512_dpbf16_ps(sum[r][1], a_r, (__m512bh)b_hi);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        _mm512_storeu_ps(out + r * out_pad, sum[r][0]);
        _mm512_storeu_ps(out + r * out_pad + 16, sum[r][1]);
    }
}

// AMX: eight tile registers, each up to 16 rows of 64 bytes, configured once per thread (bf16_dot_thread_begin,
// common/fa_cpu_units.c):
//
//   tmm0 tmm1    the block's sums, float32: rows 0-15 x columns 0-15 | 0-15 x 16-31
//   tmm2 tmm3                               rows 16-31 x columns 0-15 | 16-31 x 16-31
//   tmm4 tmm5    a, rows 0-15 | rows 16-31, 32 values of k (64 bytes a row)
//   tmm6 tmm7    b, 16 pairs of k (a row each) x columns 0-15 | 16-31 (a pair, 4 bytes, per column)
//
// tdpbf16ps C, A, B: C[m][c] += sum over pairs p of A[m][2p] * B[p][c].lo + A[m][2p + 1] * B[p][c].hi, a 16 x 16
// float32 tile plus a 16 x 32 times 32 x 16 bf16 product (16 x 16 x 32 multiply-adds), in one instruction. Per 32
// values of k: four tile loads and four tdpbf16ps.
__attribute__((target("amx-tile,amx-bf16"))) static void amx_block(const uint16_t *a, int64_t a_pad,
                                                                   const uint16_t *b_pairs, int64_t b_pad, int64_t n,
                                                                   float *out, int64_t out_pad, int accumulate) {
    const int64_t out_stride = out_pad * 4, a_stride = a_pad * 2, b_stride = b_pad * 4;   // bytes per row
    if (accumulate) {
        _tile_loadd(0, out, out_stride);
        _tile_loadd(1, out + 16, out_stride);
        _tile_loadd(2, out + 16 * out_pad, out_stride);
        _tile_loadd(3, out + 16 * out_pad + 16, out_stride);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int64_t k = 0; k < n; k += 32) {
        _tile_loadd(4, a + k, a_stride);
        _tile_loadd(5, a + 16 * a_pad + k, a_stride);
        _tile_loadd(6, b_pairs + k * b_pad, b_stride);        // pairs k / 2 .. k / 2 + 15, columns 0-15
        _tile_loadd(7, b_pairs + k * b_pad + 32, b_stride);   // columns 16-31
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, out_stride);
    _tile_stored(1, out + 16, out_stride);
    _tile_stored(2, out + 16 * out_pad, out_stride);
    _tile_stored(3, out + 16 * out_pad + 16, out_stride);
}
#endif

void bf16_dot_thread_begin(bf16_dot_unit unit) {
    if (unit == BF16_DOT_AMX) fa_amx_thread_begin();
}

void bf16_dot_thread_end(bf16_dot_unit unit) {
    if (unit == BF16_DOT_AMX) fa_amx_thread_end();
}

void bf16_dot_block(bf16_dot_unit unit, const uint16_t *a, int64_t a_pad, const uint16_t *b_pairs, int64_t b_pad,
                    int64_t n, float *out, int64_t out_pad, int accumulate) {
    switch (unit) {
#if FA_CPU_UNITS
    case BF16_DOT_AMX: amx_block(a, a_pad, b_pairs, b_pad, n, out, out_pad, accumulate); return;
    case BF16_DOT_AVX512:
        for (int r0 = 0; r0 < BF16_DOT_BLOCK; r0 += 8)
            avx512_rows(a + r0 * a_pad, a_pad, b_pairs, b_pad, n, out + r0 * out_pad, out_pad, accumulate);
        return;
#endif
    case BF16_DOT_EMULATED: emulated_block(a, a_pad, b_pairs, b_pad, n, out, out_pad, accumulate); return;
    default: fa_die("bf16_dot_block: no bf16 unit to run on (bf16_dot_unit_for() said none)");
    }
}

// Row r of the tile as D_pad contiguous values: the tensor's row (zeros past D), or zeros for padding rows and for
// rows past S. The staging below reads every tile through it.
static void tile_row(const uint16_t *x, fa_strides strides, int64_t row, int inside, int64_t D, int64_t D_pad,
                     uint16_t *to) {
    for (int64_t d = 0; d < D_pad; d++) to[d] = 0;
    if (!inside) return;
    const uint16_t *from = x + row * strides.s;
    if (strides.d == 1) memcpy(to, from, (size_t)D * sizeof(uint16_t));
    else
        for (int64_t d = 0; d < D; d++) to[d] = from[d * strides.d];
}

// One loop per order, each reading whole rows, two at a time (bf16_dot.h draws the three orders). Staging runs once per
// pass but over every head, and a loop that fetched each value through the strides and tested the order for it was
// several times slower.
void bf16_dot_stage_tiles(const uint16_t *x, fa_strides strides, int64_t S, int64_t D, int block, int64_t padded,
                          int64_t D_pad, bf16_tile_order order, uint16_t *out) {
    const int64_t n_tiles = (S + block - 1) / block;
    uint16_t *rows2 = malloc(2 * (size_t)D_pad * sizeof(uint16_t));   // two rows of the tile, contiguous
    if (!rows2) fa_die("out of memory staging a bf16 tile");
    uint16_t *even = rows2, *odd = rows2 + D_pad;
    for (int64_t t = 0; t < n_tiles; t++) {
        uint16_t *tile = out + t * padded * D_pad;
        const int64_t first = t * block, rows = S - first < block ? S - first : block;   // rows that exist
        for (int64_t r = 0; r < padded; r += 2) {   // padded is even (a multiple of BF16_DOT_BLOCK)
            tile_row(x, strides, first + r, r < rows, D, D_pad, even);
            tile_row(x, strides, first + r + 1, r + 1 < rows, D, D_pad, odd);
            if (order == BF16_TILE_ROWS) {   // [padded][D_pad]
                memcpy(tile + r * D_pad, even, (size_t)D_pad * sizeof(uint16_t));
                memcpy(tile + (r + 1) * D_pad, odd, (size_t)D_pad * sizeof(uint16_t));
            } else if (order == BF16_TILE_PAIRS_ALONG_ROWS) {   // [padded / 2][D_pad][2]: rows r, r + 1 interleaved
                uint16_t *pairs = tile + r * D_pad;
                for (int64_t d = 0; d < D_pad; d++) pairs[2 * d] = even[d], pairs[2 * d + 1] = odd[d];
            } else {   // BF16_TILE_PAIRS_ALONG_D, [D_pad / 2][padded][2]: each row's pairs (d, d + 1) down its column
                for (int64_t p = 0; p < D_pad / 2; p++) {
                    uint16_t *at = tile + (p * padded + r) * 2;
                    at[0] = even[2 * p], at[1] = even[2 * p + 1], at[2] = odd[2 * p], at[3] = odd[2 * p + 1];
                }
            }
        }
    }
    free(rows2);
}
