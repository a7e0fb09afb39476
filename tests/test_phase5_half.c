// test_phase5_half.c - half precision: the fp16/bf16 conversions (common/fa_half.c), their inlined, branch-free
// form (common/fa_half_inline.h, step 4's CPU twin's) giving the bits of their definition, and the half-precision rule
// (common/fa_driver.c) passing a correct result of phase 5 step 2 and step 3 and failing a planted wrong element.
// Usage: test_phase5_half convert|inline|rule
#include "backward_tiles.h"   // round_to_half: step 4's CPU twin's rounding loop
#include "fa_half_inline.h"
#include "fa_driver.h"
#include "fa_half.h"
#include "fa_tensor.h"
#include "tensor_cores.h"
#include "fa_test_expect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


// ---------------------------------------------------------------------------------------------------------------
// The conversions, against a reference written the other way: in double precision, from the definition. A finite x
// rounds to a multiple of its ulp (2^(e - mantissa_bits), e = floor(log2|x|), never below the smallest normal
// exponent: that is where the subnormals' fixed spacing comes from), to nearest, ties to the even multiple; at or
// past the overflow threshold (the largest finite value plus half its ulp) it becomes Inf.
static double reference_round(double x, int mantissa_bits, int min_exponent, double overflow) {
    if (isnan(x) || isinf(x)) return x;
    const double a = fabs(x);
    if (a >= overflow) return copysign(INFINITY, x);
    if (a == 0.0) return x;
    int e = (int)floor(log2(a));
    if (e < min_exponent) e = min_exponent;
    const double ulp = ldexp(1.0, e - mantissa_bits), units = a / ulp, below = floor(units);
    const double rest = units - below;
    const double r = rest > 0.5 ? below + 1 : rest < 0.5 ? below : (fmod(below, 2.0) == 0 ? below : below + 1);
    return copysign(r * ulp, x);
}
static double reference_fp16(float x) { return reference_round(x, 10, -14, 65520.0); }
static double reference_bf16(float x) { return reference_round(x, 7, -126, ldexp(2.0 - ldexp(1.0, -8), 127)); }

static float float_of_bits(uint32_t bits) {
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

// x through the conversion (float -> half -> float) equals the reference, signed zeros and NaN included.
static int converts_right(float x, int dtype) {
    const float got = fa_round_to_dtype(x, dtype);
    const double want = dtype == FA_DTYPE_FP16 ? reference_fp16(x) : reference_bf16(x);
    if (isnan(want)) return isnan(got);
    return (double)got == want && !!signbit(got) == !!signbit(want);
}

static void test_convert(void) {
    // Every fp16 decodes to the value its bits define: (-1)^s * 2^(e-15) * 1.m, or 2^-14 * 0.m for e = 0.
    for (uint32_t h = 0; h < 65536; h++) {
        const uint32_t e = (h >> 10) & 31u, m = h & 1023u;
        const double magnitude = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, (int)e - 25);
        const float got = fa_fp16_to_float((uint16_t)h);
        if (e == 31) {
            EXPECT(m == 0 ? isinf(got) : isnan(got));
        } else {
            EXPECT((double)fabsf(got) == magnitude);
            // and encodes back to itself
            EXPECT(fa_float_to_fp16(got) == h);
        }
        EXPECT(!!signbit(got) == !!(h & 0x8000u));
        // every bf16 is the top half of a float32, and encodes back to itself (NaNs stay NaN)
        const float b = fa_bf16_to_float((uint16_t)h);
        EXPECT(isnan(b) ? isnan(fa_bf16_to_float(fa_float_to_bf16(b))) : fa_float_to_bf16(b) == h);
    }
    // Ties between neighbouring fp16 values go to the even one; a hair above goes up (both are floats exactly).
    for (uint16_t h = 0; h < 0x7bff; h++) {
        const double lo = fa_fp16_to_float(h), hi = fa_fp16_to_float((uint16_t)(h + 1)), mid = (lo + hi) / 2;
        EXPECT(fa_float_to_fp16((float)mid) == ((h & 1u) ? h + 1 : h));
        EXPECT(fa_float_to_fp16(nextafterf((float)mid, INFINITY)) == h + 1);
        EXPECT(fa_float_to_fp16(nextafterf((float)mid, 0.0f)) == h);
    }
    // A sweep over the whole float32 range (every 997th bit pattern: all exponents, both signs, NaNs, Infs).
    int64_t wrong16 = 0, wrong_bf16 = 0;
    for (uint64_t bits = 0; bits < (UINT64_C(1) << 32); bits += 997) {
        const float x = float_of_bits((uint32_t)bits);
        wrong16 += !converts_right(x, FA_DTYPE_FP16);
        wrong_bf16 += !converts_right(x, FA_DTYPE_BF16);
    }
    EXPECT(wrong16 == 0);
    EXPECT(wrong_bf16 == 0);
    // The edges, by name.
    const float edges[] = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 0x1p-14f, 0x1p-24f, 0x1p-25f,
                           0x1.000002p-25f, 0x1.8p-24f, 3.0e38f, 3.3961776e38f, 3.4028235e38f, INFINITY, -INFINITY,
                           NAN, 1.0f / 3.0f, -2.71828f, 1e-40f, -1e-45f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        EXPECT(converts_right(edges[i], FA_DTYPE_FP16));
        EXPECT(converts_right(edges[i], FA_DTYPE_BF16));
    }
    EXPECT(fa_float_to_fp16(65519.99f) == 0x7bff && fa_float_to_fp16(65520.0f) == 0x7c00);
    EXPECT(fa_float_to_bf16(1.0f) == 0x3f80 && fa_float_to_bf16(-2.0f) == 0xc000);
    EXPECT(isnan(fa_fp16_to_float(fa_float_to_fp16(float_of_bits(0x7f800001u)))));   // a NaN whose payload is low
    EXPECT(isnan(fa_bf16_to_float(fa_float_to_bf16(float_of_bits(0x7f800001u)))));
    EXPECT(fa_dtype_parse("fp16") == FA_DTYPE_FP16 && fa_dtype_parse("bf16") == FA_DTYPE_BF16 &&
           fa_dtype_parse("fp32") == FA_DTYPE_FP32 && fa_dtype_parse("half") == -1);
    printf("convert: %lld + %lld sweep values, every fp16 and bf16 bit pattern, %d failure(s)\n",
           (long long)((UINT64_C(1) << 32) / 997), (long long)((UINT64_C(1) << 32) / 997), failures);
}

// ---------------------------------------------------------------------------------------------------------------
// The inlined, branch-free conversions (common/fa_half_inline.h): step 4's CPU twin runs them in vector loops, and
// fa_half.c's fa_half_to_float() and fa_round_to_dtype() are them. Since fa_half.c now shares their code, they are
// checked bit for bit against the definitions, computed here another way: every half bit pattern decoded with ldexp;
// every float32 whose dropped bits are a tie or next to one (0, 1, half - 1, half, half + 1, all ones: every upper
// part, so every exponent, sign, Inf and NaN) and every 997th bit pattern rounded in double (reference_round()).
// fa_float_to_fp16(), which rounds on the bits case by case, must give the same bits as well. The build's kernels are
// also compiled with FMA contraction; the rounding has no product to contract but the exact 1.5 * 2^13 * 2^e, so
// either way it rounds the same.
static uint32_t bits_of_float(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits;
}

// The float32 bits of a half bit pattern's value, from the definition: (-1)^s * 2^(e - bias) * 1.m, or
// 2^(1 - bias) * 0.m where e = 0; where e is all ones, Inf (m = 0) or a NaN whose payload m is kept at the top.
static uint32_t defined_half_bits(uint32_t h, int dtype) {
    const int mantissa_bits = dtype == FA_DTYPE_FP16 ? 10 : 7, bias = dtype == FA_DTYPE_FP16 ? 15 : 127;
    const uint32_t sign = h >> 15, e = (h & 0x7fffu) >> mantissa_bits, m = h & ((1u << mantissa_bits) - 1u);
    if (e == 0x7fffu >> mantissa_bits) return (sign << 31) | 0x7f800000u | (m << (23 - mantissa_bits));
    const double magnitude = e == 0 ? ldexp(m, 1 - bias - mantissa_bits)
                                    : ldexp((1u << mantissa_bits) + m, (int)e - bias - mantissa_bits);
    return bits_of_float((float)(sign ? -magnitude : magnitude));
}

// The bits of x rounded to dtype: reference_round()'s value (signed zeros kept), or for a NaN its sign, the top of
// its payload that fits (10 bits in fp16, 7 in bf16) and the quiet bit.
static uint32_t rounded_bits_wanted(uint32_t bits, int dtype) {
    const float x = float_of_bits(bits);
    if (isnan(x)) return (bits & (dtype == FA_DTYPE_FP16 ? 0xffffe000u : 0xffff0000u)) | 0x00400000u;
    return bits_of_float((float)(dtype == FA_DTYPE_FP16 ? reference_fp16(x) : reference_bf16(x)));
}

enum { CHUNK = 4096 };
typedef struct {
    uint32_t bits[CHUNK];
    int n, dtype;
    int64_t tried, wrong;
} rounding_batch;

// Rounds the batch three ways, each against the wanted bits: step 4's loop (round_to_half(), backward_tiles.h),
// fa_round_to_dtype(), and through the half's own bit pattern (fa_float_to_half(), back with fa_half_to_float()).
static void check_batch(rounding_batch *b) {
    float x[CHUNK];
    for (int i = 0; i < b->n; i++) x[i] = float_of_bits(b->bits[i]);
    round_to_half(x, b->n, b->dtype);
    for (int i = 0; i < b->n; i++) {
        const float in = float_of_bits(b->bits[i]);
        const uint32_t want = rounded_bits_wanted(b->bits[i], b->dtype);
        const uint32_t loop = bits_of_float(x[i]), scalar = bits_of_float(fa_round_to_dtype(in, b->dtype));
        const uint32_t encoded = bits_of_float(fa_half_to_float(fa_float_to_half(in, b->dtype), b->dtype));
        const int differs = loop != want || scalar != want || encoded != want;
        if (differs && b->wrong < 5)
            fprintf(stderr, "%s %08x: want %08x, round_to_half %08x, fa_round_to_dtype %08x, encoded %08x\n",
                    fa_dtype_name(b->dtype), b->bits[i], want, loop, scalar, encoded);
        b->wrong += differs, b->tried++;
    }
    b->n = 0;
}

static void add_to_batch(rounding_batch *b, uint32_t bits) {
    b->bits[b->n++] = bits;
    if (b->n == CHUNK) check_batch(b);
}

static void test_inline(void) {
    int64_t wrong = 0, tried = 0;
    for (int dtype = FA_DTYPE_FP16; dtype <= FA_DTYPE_BF16; dtype++)
        for (uint32_t h = 0; h < 65536; h++) {
            const uint32_t want = defined_half_bits(h, dtype);
            const uint32_t inlined = bits_of_float(fa_half_to_float_inline((uint16_t)h, dtype));
            const uint32_t called = bits_of_float(fa_half_to_float((uint16_t)h, dtype));
            wrong += inlined != want || called != want, tried++;
        }
    EXPECT(wrong == 0);
    printf("inline: %lld half bit patterns decoded, %lld differ from the definition\n", (long long)tried,
           (long long)wrong);

    static rounding_batch b;
    const struct { int dtype, dropped; } kinds[] = {{FA_DTYPE_FP16, 13}, {FA_DTYPE_BF16, 16}};
    for (int k = 0; k < 2; k++) {
        const int dropped = kinds[k].dropped;
        const uint32_t half = 1u << (dropped - 1), ones = (1u << dropped) - 1u;
        const uint32_t lows[] = {0, 1, half - 1, half, half + 1, ones};
        b.dtype = kinds[k].dtype, b.tried = b.wrong = 0;
        for (uint64_t upper = 0; upper < (UINT64_C(1) << (32 - dropped)); upper++)
            for (int l = 0; l < 6; l++) add_to_batch(&b, (uint32_t)(upper << dropped) | lows[l]);
        for (uint64_t bits = 0; bits < (UINT64_C(1) << 32); bits += 997) add_to_batch(&b, (uint32_t)bits);
        check_batch(&b);
        EXPECT(b.wrong == 0);
        printf("inline: %lld float32 values rounded to %s three ways, %lld differ from rounding in double\n",
               (long long)b.tried, fa_dtype_name(b.dtype), (long long)b.wrong);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The rule: a correct result (the CPU twins of steps 2 and 3) passes it; the same result with one element moved
// just past it, in O or in LSE, fails it.
static const fa_cli_spec SPEC = {.program = "test_phase5_half", .summary = "", .defaults = {1, 1, 1, 1, 1, 0, 0.0f},
                                 .default_block_m = 64, .default_block_n = 64, .has_dtype = 1};

static void test_rule_case(const char *dtype, const char *causal, int step) {
    char *argv[] = {"test_phase5_half", "--dtype", (char *)dtype, "--B", "2", "--H", "2", "--Sq", "130", "--Sk", "100",
                    "--D", "64", (char *)causal, NULL};
    const int argc = causal ? 14 : 13;
    fa_options opt;
    fa_parse_options(argc, argv, &SPEC, &opt);
    const fa_shape *s = &opt.shape;
    fa_report report;
    fa_report_init(&report, SPEC.program, &opt);
    fa_inputs in;
    fa_make_inputs(&opt, 0, &in);
    fa_reference ref;
    fa_make_reference(&opt, &in, 0, &ref);
    fa_half_rule rule = {0};   // the backward arrays stay NULL (fa_free_half_rule frees them all)
    fa_make_half_rule(&report, &opt, &in, &ref, &rule);
    EXPECT(report.n_checks == 2 && report.checks[0].pass && report.checks[1].pass);   // the reference's own rows
    EXPECT(rule.max_o > 0.0 && rule.max_lse > 0.0);

    fa_half_inputs half;
    fa_make_half_inputs(&opt, &in, &half);
    float *o = fa_alloc_floats(fa_numel_q(s), "O"), *lse = fa_alloc_floats(fa_numel_lse(s), "LSE");
    fa_poison(o, fa_numel_q(s));
    fa_poison(lse, fa_numel_lse(s));
    const fa_strides qs = fa_strides_contiguous(s->H, s->Sq, s->D), ks = fa_strides_contiguous(s->H, s->Sk, s->D);
    const tc_forward_tensors t = {half.q, half.k, half.v, qs, ks, ks, o, qs, lse};
    if (step == 2)
        flash_forward_mma_cpu(s, opt.dtype, 64, 64, &t, NULL);
    else
        flash_forward_pipeline_cpu(s, opt.dtype, 128, 64, &t, NULL);

    int64_t dims_o[4], dims_lse[4];
    fa_dims_q(s, dims_o);
    fa_dims_lse(s, dims_lse);
    const fa_rule rule_o = {.tolerance = ref.tol_forward, .bounds = ref.scale.o, .head_extra = rule.head_o};
    const fa_rule rule_lse = {.tolerance = ref.tol_forward, .bounds = ref.scale.lse, .head_extra = rule.head_lse};
    fa_check c_o = fa_verify_rows("cpu", "O", o, ref.o, dims_o, ref.heads, &rule_o);
    fa_check c_lse = fa_verify_rows("cpu", "LSE", lse, ref.lse, dims_lse, ref.heads, &rule_lse);
    EXPECT(c_o.pass && c_lse.pass);
    printf("rule %s%s step %d: 2 x reference O %.2e LSE %.2e; step O %.2e (tol %.2e) LSE %.2e (tol %.2e)\n", dtype,
           causal ? " causal" : "", step, rule.max_o, rule.max_lse, c_o.rel_err, c_o.tolerance, c_lse.rel_err,
           c_lse.tolerance);

    // One element of the last head, moved from the oracle's value by 1.01 x the allowed error: it must fail. The
    // rule's unit (the oracle's scale of the output) does not depend on the result, so the element alone decides.
    const int64_t at = fa_numel_q(s) - 5;
    const float saved = o[at];
    const int64_t row = at / s->D;
    o[at] = (float)(ref.o[at] + (ref.o[at] > 0 ? -1.01 : 1.01) * fa_row_tolerance(&rule_o, row, s->Sq) *
                                    ref.scale.o.scale[row]);
    EXPECT(!fa_verify_rows("planted", "O", o, ref.o, dims_o, ref.heads, &rule_o).pass);
    o[at] = saved;
    lse[7] = (float)(ref.lse[7] + 1.01 * fa_row_tolerance(&rule_lse, 7, s->Sq) * ref.scale.lse.scale[7]);
    EXPECT(!fa_verify_rows("planted", "LSE", lse, ref.lse, dims_lse, ref.heads, &rule_lse).pass);

    free(o);
    free(lse);
    fa_free_half_inputs(&half);
    fa_free_half_rule(&rule);
    fa_free_reference(&ref);
    fa_free_inputs(&in);
}

static void test_rule(void) {
    const char *dtypes[] = {"fp16", "bf16"};
    for (int d = 0; d < 2; d++)
        for (int step = 2; step <= 3; step++) {
            test_rule_case(dtypes[d], NULL, step);
            test_rule_case(dtypes[d], "--causal", step);
        }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s convert|inline|rule\n", argv[0]);
        return FA_EXIT_BAD_INPUT;
    }
    if (strcmp(argv[1], "convert") == 0) test_convert();
    else if (strcmp(argv[1], "inline") == 0) test_inline();
    else if (strcmp(argv[1], "rule") == 0) test_rule();
    else {
        fprintf(stderr, "unknown test '%s'\n", argv[1]);
        return FA_EXIT_BAD_INPUT;
    }
    if (failures) fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
