// test_phase2_exp2.c - accuracy of fa_exp2() (common/fa_exp2.h), the vectorisable 2^x of the CPU flash kernels.
//
// Compares fa_exp2(x) with exp2() in double precision over every float step of a dense sweep of [-126, 127] and
// at the values the kernels depend on: exp2(-inf) = 0 exactly (a masked score), exp2(0) = 1 exactly (the row max),
// exact powers of two at integers, and a clean 0 below the float range. Fails when the error passes 2 ulp.
#include "fa_exp2.h"
#include "fa_test_expect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_ULP 2.0


// The distance from got to the exact value, in units of the last place of the exact value (as a float).
static double ulp_error(float got, double exact) {
    int exponent;
    frexp(exact, &exponent);                     // exact = m * 2^exponent with m in [0.5, 1)
    const double ulp = ldexp(1.0, exponent - 24);   // float has a 24-bit significand
    return fabs((double)got - exact) / ulp;
}

static void expect_equal(float x, float got, float want) {
    EXPECT_MSG(got == want, "fa_exp2(%g) = %.9g, expected exactly %.9g", (double)x, (double)got, (double)want);
}

int main(void) {
    // 1. A sweep over [-126, 127]: 2^24 points, every one checked against double precision.
    double worst = 0.0;
    float worst_x = 0.0f;
    const int points = 1 << 24;
    for (int n = 0; n <= points; n++) {
        const float x = -126.0f + 253.0f * (float)n / (float)points;
        const double err = ulp_error(fa_exp2(x), exp2((double)x));
        if (err > worst) {
            worst = err;
            worst_x = x;
        }
    }
    // And every float in [0.5, 1.5]: there n = round(x) is 1 (or 0) and f = x - n runs over the whole interval of
    // the polynomial, [-0.5, 0.5], at full float resolution.
    for (float x = 0.5f; x <= 1.5f; x = nextafterf(x, 2.0f)) {
        const double err = ulp_error(fa_exp2(x), exp2((double)x));
        if (err > worst) {
            worst = err;
            worst_x = x;
        }
    }
    printf("fa_exp2: worst error %.3f ulp at x = %.9g (limit %.1f ulp)\n", worst, (double)worst_x, MAX_ULP);
    EXPECT(worst <= MAX_ULP);

    // 2. The values the online softmax relies on.
    expect_equal(-INFINITY, fa_exp2(-INFINITY), 0.0f);   // a masked key contributes nothing
    expect_equal(0.0f, fa_exp2(0.0f), 1.0f);             // the row's max scores exactly 1
    expect_equal(-200.0f, fa_exp2(-200.0f), 0.0f);       // far below the float range: 0, not garbage
    for (int n = -126; n <= 127; n++) expect_equal((float)n, fa_exp2((float)n), ldexpf(1.0f, n));
    EXPECT_MSG(isnan(fa_exp2(NAN)), "fa_exp2(NaN) is not NaN");

    if (failures) fprintf(stderr, "%d failure(s)\n", failures);
    else printf("all fa_exp2 checks passed\n");
    return failures ? 1 : 0;
}
