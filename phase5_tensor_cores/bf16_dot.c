// bf16_dot.c - the products along d of step 4's CPU twin on AVX512_BF16 (bf16_dot.h says what and when).
#include "bf16_dot.h"

#include "fa_half.h"     // FA_DTYPE_BF16
#include "fa_tensor.h"   // fa_die

#include <string.h>

// The dot-product instruction, where the compiler has it (GCC 10, Clang 9 on): built always, run where the CPU has it.
#if defined(__GNUC__) && defined(__x86_64__) && (defined(__clang__) || __GNUC__ >= 10)
#include <immintrin.h>
#define HAVE_BF16_DOT 1
#else
#define HAVE_BF16_DOT 0
#endif

int bf16_dot_available(int dtype) {
#if HAVE_BF16_DOT
    __builtin_cpu_init();
    return dtype == FA_DTYPE_BF16 && __builtin_cpu_supports("avx512bf16");
#else
    (void)dtype;
    return 0;
#endif
}

const char *bf16_dot_products(int dtype) {
    if (bf16_dot_available(dtype)) return "products along d on AVX512_BF16 (vdpbf16ps), the others float32 FMAs";
    if (dtype != FA_DTYPE_BF16) return "float32 FMAs";
    return HAVE_BF16_DOT ? "float32 FMAs (this CPU has no AVX512_BF16)"
                         : "float32 FMAs (this build cannot compile for AVX512_BF16)";
}

void bf16_dot_stage(const uint16_t *x, fa_strides strides, int64_t first, int64_t count, int64_t exist, int64_t D,
                    int64_t D_pad, uint16_t *rows, uint16_t *pairs, int64_t pairs_pad) {
    for (int64_t r = 0; r < count; r++)
        for (int64_t d = 0; d < D; d++) {
            const uint16_t bits = first + r < exist ? x[(first + r) * strides.s + d * strides.d] : 0;
            if (rows) rows[r * D_pad + d] = bits;
            if (pairs) pairs[((d / 2) * pairs_pad + r) * 2 + d % 2] = bits;
        }
}

// Per pair of dims d, d + 1: two 64-byte loads of b (columns 0-15 and 16-31) and, for each row, a broadcast of a's
// pair and two vdpbf16ps:
//
//   lane jj of sum[r][h] += a[r][d] * b[16h+jj][d] + a[r][d+1] * b[16h+jj][d+1]    (16 lanes = 16 columns)
//        b (one zmm, h = 0): | b[0][d] b[0][d+1] | b[1][d] b[1][d+1] | ... | b[15][d] b[15][d+1] |
//        a (broadcast):      | a[r][d] a[r][d+1] | a[r][d] a[r][d+1] | ... | a[r][d]  a[r][d+1]  |
//
// 8 rows x 2 halves: 16 sums, each of which waits only for its own previous vdpbf16ps (bf16_dot.h says why 16).
// The product of two bf16 values is exact in float32; the instruction adds the two of a lane to the sum one after the
// other (d + 1 first), rounding each time, and treats denormal inputs as zero. A float32 sum of exact products, as
// the float32 micro-kernel's and the tensor core's: the half rule holds alike.
#if HAVE_BF16_DOT
__attribute__((target("avx512bf16,avx512f"))) static void dot_rows(const uint16_t *a, int64_t D_pad,
                                                                   const uint16_t *b_pairs, int64_t b_pad, int64_t D,
                                                                   float *out, int64_t out_pad) {
    __m512 sum[BF16_DOT_ROWS][2];   // [row][columns 0-15, 16-31]
    for (int r = 0; r < BF16_DOT_ROWS; r++) sum[r][0] = sum[r][1] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += 2) {   // D odd: dim D is padding, zero
        const uint16_t *b_d = b_pairs + d * b_pad;   // pair d / 2: 32 x 2 bf16
        const __m512i b_lo = _mm512_loadu_si512((const void *)b_d), b_hi = _mm512_loadu_si512((const void *)(b_d + 32));
#pragma GCC unroll 8
        for (int r = 0; r < BF16_DOT_ROWS; r++) {
            int32_t pair;
            memcpy(&pair, a + r * D_pad + d, sizeof pair);
            const __m512bh a_r = (__m512bh)_mm512_set1_epi32(pair);
            sum[r][0] = _mm512_dpbf16_ps(sum[r][0], a_r, (__m512bh)b_lo);
            sum[r][1] = _mm512_dpbf16_ps(sum[r][1], a_r, (__m512bh)b_hi);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < BF16_DOT_ROWS; r++) {
        _mm512_storeu_ps(out + r * out_pad, sum[r][0]);
        _mm512_storeu_ps(out + r * out_pad + 16, sum[r][1]);
    }
}
#endif

void bf16_dot_along_d(const uint16_t *a, int64_t D_pad, const uint16_t *b_pairs, int64_t b_pad, int64_t D, float *out,
                      int64_t out_pad) {
#if HAVE_BF16_DOT
    if (bf16_dot_available(FA_DTYPE_BF16)) {
        dot_rows(a, D_pad, b_pairs, b_pad, D, out, out_pad);
        return;
    }
#endif
    (void)a, (void)D_pad, (void)b_pairs, (void)b_pad, (void)D, (void)out, (void)out_pad;
    fa_die("bf16_dot_along_d called on a CPU without AVX512_BF16 (bf16_dot_available() says 0)");
}
