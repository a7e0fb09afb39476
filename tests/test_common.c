// test_common.c - unit tests of common/: verify_results, .npy, the oracle, shapes, random inputs.
// Usage: test_common <verify|npy|oracle_hand|oracle_gradcheck|shape|random> <scratch-dir>
#include "fa_npy.h"
#include "fa_oracle.h"
#include "fa_shape.h"
#include "fa_tensor.h"
#include "fa_verify.h"
#include "fa_test_expect.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


// ---------------------------------------------------------------------------------------------------------------
static void test_verify(void) {
    const int64_t dims[4] = {2, 3, 5, 4};
    const int64_t n = 2 * 3 * 5 * 4;
    float *got = malloc(n * sizeof(float));
    double *want = malloc(n * sizeof(double));
    fa_fill_random(got, n, 7, 1, 1.0f);
    for (int64_t i = 0; i < n; i++) want[i] = got[i];

    fa_check c = fa_verify_results("exact", "O", got, want, dims, NULL, FA_TOL_FORWARD);
    EXPECT(c.pass && c.max_abs_err == 0.0 && c.compared == n && c.nonfinite == 0);

    // One wrong element, at (1, 2, 3, 1): caught, and located.
    const int64_t bad = ((1 * 3 + 2) * 5 + 3) * 4 + 1;
    got[bad] += 1e-3f;
    c = fa_verify_results("one wrong", "O", got, want, dims, NULL, FA_TOL_FORWARD);
    EXPECT(!c.pass);
    EXPECT(c.worst[0] == 1 && c.worst[1] == 2 && c.worst[2] == 3 && c.worst[3] == 1);
    EXPECT(fabs(c.max_abs_err - 1e-3) < 1e-6);
    got[bad] = (float)want[bad];

    // An error within tolerance passes; the rel error is measured against the largest reference value.
    got[bad] += 1e-7f;
    c = fa_verify_results("tiny error", "O", got, want, dims, NULL, FA_TOL_FORWARD);
    EXPECT(c.pass);
    got[bad] = (float)want[bad];

    // A NaN fails even when everything else is exact.
    got[5] = NAN;
    c = fa_verify_results("nan", "O", got, want, dims, NULL, FA_TOL_FORWARD);
    EXPECT(!c.pass && c.nonfinite == 1 && c.worst[3] == 1 && c.worst[2] == 1);
    got[5] = (float)want[5];
    got[6] = INFINITY;
    c = fa_verify_results("inf", "O", got, want, dims, NULL, FA_TOL_FORWARD);
    EXPECT(!c.pass && c.nonfinite == 1);
    got[6] = (float)want[6];

    // An element the kernel never wrote stays poisoned (NaN) and fails the check.
    fa_poison(got, n);
    for (int64_t i = 0; i < n; i++)
        if (i != 77) got[i] = (float)want[i];
    c = fa_verify_results("unwritten", "O", got, want, dims, NULL, FA_TOL_FORWARD);
    EXPECT(!c.pass && c.nonfinite == 1);
    got[77] = (float)want[77];

    // With a head mask, only the computed heads are compared, but NaN is caught in every head.
    unsigned char heads[6] = {1, 0, 0, 0, 0, 1};
    double *partial = malloc(n * sizeof(double));
    for (int64_t i = 0; i < n; i++) partial[i] = (i / 20 == 0 || i / 20 == 5) ? want[i] : 1e30;   // junk elsewhere
    c = fa_verify_results("masked", "O", got, partial, dims, heads, FA_TOL_FORWARD);
    EXPECT(c.pass && c.compared == 40);
    got[30] = NAN;   // head 1, not compared, still scanned
    c = fa_verify_results("masked nan", "O", got, partial, dims, heads, FA_TOL_FORWARD);
    EXPECT(!c.pass && c.nonfinite == 1);
    free(partial);
    free(got);
    free(want);
}

// ---------------------------------------------------------------------------------------------------------------
// A tensor whose exact value is zero (dQ with all keys equal): errors are measured against the size of the terms
// that were summed, so float32 rounding passes, and one wrong element fails; and the ratio rule against a reference.
static void test_verify_zero_tensor(void) {
    const int64_t dims[4] = {1, 2, 8, 4};
    const int64_t n = 64;
    float *got = malloc(n * sizeof(float));
    double *want = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) want[i] = 1e-17 * (double)(i % 3 - 1);   // the oracle's zero: its own rounding
    fa_fill_random(got, n, 3, 1, 3e-8f);          // what float32 sums of terms of size ~0.5 leave behind
    const double terms = 0.5;                     // the size of the terms (fa_oracle_magnitudes' scale)

    fa_check c = fa_verify_results_scaled("zero dQ", "dQ", got, want, dims, NULL, FA_TOL_BACKWARD, terms);
    EXPECT(c.pass && c.scale == terms);
    // Measured against its own largest value (1e-17), the same correct tensor would fail: why the scale exists.
    c = fa_verify_results("zero dQ, no scale", "dQ", got, want, dims, NULL, FA_TOL_BACKWARD);
    EXPECT(!c.pass);

    got[13] = 1e-3f;                              // one wrong element, small in absolute terms
    c = fa_verify_results_scaled("zero dQ, one wrong", "dQ", got, want, dims, NULL, FA_TOL_BACKWARD, terms);
    EXPECT(!c.pass && c.worst[1] == 0 && c.worst[2] == 3 && c.worst[3] == 1);

    // FlashAttention's rule: 3x a reference's error passes, 3.5x fails; a failed reference gives no bound; and a
    // reference that happens to be exact leaves a floor of one float32 epsilon of the scale.
    fa_fill_random(got, n, 3, 1, 3e-6f);          // errors well above the floor, so that the factor decides
    fa_check result = fa_verify_results_scaled("flash", "dQ", got, want, dims, NULL, FA_TOL_BACKWARD, terms);
    fa_check reference = result;
    fa_rule rule = {.tolerance = FA_TOL_BACKWARD, .uniform_scale = terms, .reference = &reference,
                    .reference_factor = 3.0};
    reference.max_rel_err = result.max_rel_err / 3.0 * 1.01;
    fa_check ruled = fa_verify_rows("flash", "dQ", got, want, dims, NULL, &rule);
    EXPECT(ruled.pass && ruled.ref_err == reference.max_rel_err);
    reference.max_rel_err = result.max_rel_err / 3.5;
    EXPECT(!fa_verify_rows("flash", "dQ", got, want, dims, NULL, &rule).pass);
    reference.pass = 0;
    reference.max_rel_err = result.max_rel_err;
    EXPECT(!fa_verify_rows("flash", "dQ", got, want, dims, NULL, &rule).pass);
    reference.pass = 1;
    reference.max_rel_err = 0.0;
    for (int64_t i = 0; i < n; i++) got[i] = 0.0f;
    got[5] = (float)(0.5 * FA_REFERENCE_FLOOR * terms);
    EXPECT(fa_verify_rows("one rounding", "dQ", got, want, dims, NULL, &rule).pass);
    free(got);
    free(want);
}

// ---------------------------------------------------------------------------------------------------------------
// The check is local: one large input loosens only the rows it reaches. q holds 1e3 in one element of row 0 of head 0
// (logits near 1e3 in that row); the correct result passes; a wrong element of relative size 1e-3 fails in every
// other row, of head 0 and of head 1 (a tolerance scaled by the run's largest |q| would let it pass everywhere); and
// --scale-sized logits in every row are refused, not checked with a tolerance that passes anything.
static void test_verify_local(void) {
    fa_shape s = {.B = 1, .H = 2, .Sq = 16, .Sk = 24, .D = 32, .causal = 0, .scale = 0.17677669f};
    const int64_t nq = fa_numel_q(&s), nkv = fa_numel_kv(&s), nl = fa_numel_lse(&s);
    float *qf = fa_alloc_floats(nq, "q"), *kf = fa_alloc_floats(nkv, "k"), *vf = fa_alloc_floats(nkv, "v");
    fa_fill_random(qf, nq, 5, 1, 1.0f);
    fa_fill_random(kf, nkv, 5, 2, 1.0f);
    fa_fill_random(vf, nkv, 5, 3, 1.0f);
    qf[3] = 1e3f;
    double *q = fa_to_double(qf, nq, "q"), *k = fa_to_double(kf, nkv, "k"), *v = fa_to_double(vf, nkv, "v");
    double *o = fa_alloc_doubles(nq, "o"), *lse = fa_alloc_doubles(nl, "lse");
    fa_oracle_forward(&s, q, k, v, NULL, o, lse);
    fa_magnitudes mag;
    fa_oracle_magnitudes(&s, q, k, v, NULL, o, lse, NULL, &mag);
    int64_t dims[4] = {s.B, s.H, s.Sq, s.D};
    fa_refuse_unjudgeable_rows("O", &mag.o, dims, NULL);   // logits of 1e3 in one row: still judged (no exit)
    EXPECT(mag.o.logit[0] > 10.0 * mag.o.logit[1]);       // row 0's logit part is its own
    float *got = fa_alloc_floats(nq, "got");
    for (int64_t i = 0; i < nq; i++) got[i] = (float)o[i];
    const fa_rule rule = {.tolerance = FA_TOL_FORWARD, .bounds = mag.o};
    EXPECT(fa_verify_rows("local", "O", got, o, dims, NULL, &rule).pass);
    const int64_t rows[3] = {1, 7, s.Sq + 5};             // head 0 rows 1 and 7, head 1 row 5
    for (int r = 0; r < 3; r++) {
        const int64_t at = rows[r] * s.D + 2;
        got[at] = (float)(o[at] + 1e-3 * mag.o.scale[rows[r]]);
        EXPECT_MSG(!fa_verify_rows("local", "O", got, o, dims, NULL, &rule).pass,
                   "a wrong element in row %lld passes beside a large q in row 0", (long long)rows[r]);
        got[at] = (float)o[at];
    }
    fa_free_magnitudes(&mag);
    free(qf), free(kf), free(vf), free(q), free(k), free(v), free(o), free(lse), free(got);
}

// ---------------------------------------------------------------------------------------------------------------
static void write_bytes(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, len, f);
    fclose(f);
}

// A v1.0 .npy with the given header dict and `payload` bytes of data.
static void write_npy(const char *path, const char *dict, size_t payload) {
    unsigned char buf[512 + 4096];
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    size_t n = strlen(dict);
    buf[8] = (unsigned char)(n & 0xff);
    buf[9] = (unsigned char)(n >> 8);
    memcpy(buf + 10, dict, n);
    memset(buf + 10 + n, 0, payload);
    write_bytes(path, buf, 10 + n + payload);
}

static int load_fails(const char *path, int ndim, const int64_t *shape, const char *expect_in_message) {
    char err[512] = "";
    float *x = fa_npy_load_f32(path, ndim, shape, err, sizeof err);
    if (x) {
        free(x);
        fprintf(stderr, "%s: loaded, but should have been refused\n", path);
        return 0;
    }
    if (!strstr(err, expect_in_message)) {
        fprintf(stderr, "%s: refused with '%s', expected it to mention '%s'\n", path, err, expect_in_message);
        return 0;
    }
    return 1;
}

static void test_npy(const char *dir) {
    mkdir(dir, 0777);
    char path[1024], err[512];
    const int64_t shape[4] = {2, 3, 4, 5};
    const int64_t n = 120;
    float x[120];
    double xd[120];
    fa_fill_random(x, n, 3, 9, 1.0f);
    for (int i = 0; i < n; i++) xd[i] = (double)x[i] * 1.5;

    // float32 round trip: bit-exact.
    snprintf(path, sizeof path, "%s/x32.npy", dir);
    EXPECT(fa_npy_save(path, x, 4, 4, shape, err, sizeof err) == 0);
    float *back = fa_npy_load_f32(path, 4, shape, err, sizeof err);
    EXPECT(back && memcmp(back, x, sizeof x) == 0);
    free(back);
    // The header is padded so that the data starts on a 64-byte boundary, as NumPy writes it.
    struct stat st;
    stat(path, &st);
    EXPECT((st.st_size - n * 4) % 64 == 0);

    // float64 is read and converted to float32.
    snprintf(path, sizeof path, "%s/x64.npy", dir);
    EXPECT(fa_npy_save(path, xd, 8, 4, shape, err, sizeof err) == 0);
    back = fa_npy_load_f32(path, 4, shape, err, sizeof err);
    EXPECT(back != NULL);
    for (int i = 0; back && i < n; i++) EXPECT(back[i] == (float)xd[i]);
    free(back);

    // A 3-D array (LSE-like) round trip.
    const int64_t shape3[3] = {2, 3, 4};
    snprintf(path, sizeof path, "%s/x3.npy", dir);
    EXPECT(fa_npy_save(path, x, 4, 3, shape3, err, sizeof err) == 0);
    back = fa_npy_load_f32(path, 3, shape3, err, sizeof err);
    EXPECT(back && memcmp(back, x, 24 * sizeof(float)) == 0);
    free(back);

    // Refusals, each with a reason that names the problem.
    const int64_t s2[2] = {2, 3};
    snprintf(path, sizeof path, "%s/missing.npy", dir);
    EXPECT(load_fails(path, 2, s2, "cannot open"));
    snprintf(path, sizeof path, "%s/magic.npy", dir);
    write_bytes(path, "PK\x03\x04 not numpy at all", 22);
    EXPECT(load_fails(path, 2, s2, "bad magic"));
    snprintf(path, sizeof path, "%s/truncated.npy", dir);
    write_bytes(path, "\x93NUMPY\x01\x00\x76\x00{'descr'", 17);
    EXPECT(load_fails(path, 2, s2, "truncated"));
    snprintf(path, sizeof path, "%s/int.npy", dir);
    write_npy(path, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }\n", 24);
    EXPECT(load_fails(path, 2, s2, "float32 or float64"));
    snprintf(path, sizeof path, "%s/bigendian.npy", dir);
    write_npy(path, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }\n", 24);
    EXPECT(load_fails(path, 2, s2, "little-endian"));
    snprintf(path, sizeof path, "%s/fortran.npy", dir);
    write_npy(path, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", 24);
    EXPECT(load_fails(path, 2, s2, "Fortran"));
    snprintf(path, sizeof path, "%s/rank.npy", dir);
    write_npy(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }\n", 24);
    EXPECT(load_fails(path, 2, s2, "shape (6)"));
    snprintf(path, sizeof path, "%s/shape.npy", dir);
    write_npy(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }\n", 24);
    EXPECT(load_fails(path, 2, s2, "expects (2,3)"));
    snprintf(path, sizeof path, "%s/short.npy", dir);
    write_npy(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 20);
    EXPECT(load_fails(path, 2, s2, "data is 20 bytes"));
    snprintf(path, sizeof path, "%s/huge.npy", dir);
    write_npy(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }\n", 24);
    EXPECT(load_fails(path, 2, s2, "too large"));
    snprintf(path, sizeof path, "%s/noshape.npy", dir);
    write_npy(path, "{'descr': '<f4', 'fortran_order': False, }\n", 24);
    EXPECT(load_fails(path, 2, s2, "no 'shape'"));
    snprintf(path, sizeof path, "%s/version.npy", dir);
    write_bytes(path, "\x93NUMPY\x07\x00\x10\x00{}              ", 26);
    EXPECT(load_fails(path, 2, s2, "version"));
}

// ---------------------------------------------------------------------------------------------------------------
// Worked by hand (D = 1, scale = 1): q = [1, 0], k = [0, ln 3], v = [2, 6].
//   row 0: S = [0, ln 3], exp(S) = [1, 3], P = [1/4, 3/4], O = 2/4 + 18/4 = 5, LSE = ln 4
//   row 1: S = [0, 0],    P = [1/2, 1/2],  O = 4, LSE = ln 2
//   causal: row 0 sees key 0 only: P = [1], O = 2, LSE = 0; row 1 is unchanged.
static void test_oracle_hand(void) {
    fa_shape s = {.B = 1, .H = 1, .Sq = 2, .Sk = 2, .D = 1, .causal = 0, .scale = 1.0f};
    const double q[2] = {1.0, 0.0}, k[2] = {0.0, log(3.0)}, v[2] = {2.0, 6.0};
    double o[2], lse[2];
    fa_oracle_forward(&s, q, k, v, NULL, o, lse);
    EXPECT(fabs(o[0] - 5.0) < 1e-14 && fabs(o[1] - 4.0) < 1e-14);
    EXPECT(fabs(lse[0] - log(4.0)) < 1e-14 && fabs(lse[1] - log(2.0)) < 1e-14);
    s.causal = 1;
    fa_oracle_forward(&s, q, k, v, NULL, o, lse);
    EXPECT(fabs(o[0] - 2.0) < 1e-14 && fabs(o[1] - 4.0) < 1e-14);
    EXPECT(fabs(lse[0]) < 1e-14 && fabs(lse[1] - log(2.0)) < 1e-14);

    // Backward by hand, non-causal, dO = [1, 0] (so L = O_0): dV = P^T dO = P[0] = [1/4, 3/4];
    // dP_0 = dO_0 * v = [2, 6], Delta_0 = dO_0 * O_0 = 5, dS_0 = P_0 * (dP_0 - 5) = [-3/4, 3/4];
    // dQ_0 = dS_0 . k = 3/4 ln 3, dK = dS_0 * q_0 = [-3/4, 3/4]; row 1 has dO = 0 so contributes nothing.
    s.causal = 0;
    const double dout[2] = {1.0, 0.0};
    double dq[2], dk[2], dv[2];
    fa_oracle_forward(&s, q, k, v, NULL, o, lse);
    fa_oracle_backward(&s, q, k, v, dout, o, lse, NULL, dq, dk, dv);
    EXPECT(fabs(dv[0] - 0.25) < 1e-14 && fabs(dv[1] - 0.75) < 1e-14);
    EXPECT(fabs(dq[0] - 0.75 * log(3.0)) < 1e-14 && fabs(dq[1]) < 1e-14);
    EXPECT(fabs(dk[0] + 0.75) < 1e-14 && fabs(dk[1] - 0.75) < 1e-14);
}

// ---------------------------------------------------------------------------------------------------------------
// The oracle's backward against central finite differences of its forward, for L = sum(O * dO).
static double loss(const fa_shape *s, const double *q, const double *k, const double *v, const double *dout) {
    int64_t n = fa_numel_q(s);
    double *o = malloc(n * sizeof(double)), *lse = malloc(fa_numel_lse(s) * sizeof(double));
    fa_oracle_forward(s, q, k, v, NULL, o, lse);
    double l = 0.0;
    for (int64_t i = 0; i < n; i++) l += o[i] * dout[i];
    free(o);
    free(lse);
    return l;
}

static double max_fd_error(const fa_shape *s, double *x, const double *grad, int64_t n, const double *q,
                           const double *k, const double *v, const double *dout) {
    const double h = 1e-6;
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + h;
        double up = loss(s, q, k, v, dout);
        x[i] = saved - h;
        double down = loss(s, q, k, v, dout);
        x[i] = saved;
        double fd = (up - down) / (2 * h);
        double err = fabs(fd - grad[i]) / (1.0 + fabs(grad[i]));
        if (err > worst) worst = err;
    }
    return worst;
}

static void test_oracle_gradcheck(void) {
    for (int causal = 0; causal <= 1; causal++) {
        for (int variant = 0; variant < 2; variant++) {
            // Sq > Sk and Sq < Sk, so that causal rows past Sk and keys no row sees are both covered.
            fa_shape s = {.B = 1, .H = 2, .Sq = variant ? 7 : 4, .Sk = variant ? 5 : 6, .D = 3, .causal = causal,
                          .scale = 0.7f};
            int64_t nq = fa_numel_q(&s), nk = fa_numel_kv(&s);
            float *tmp = malloc(nq * sizeof(float) + nk * sizeof(float));
            double *q = malloc(nq * sizeof(double)), *k = malloc(nk * sizeof(double)), *v = malloc(nk * sizeof(double));
            double *dout = malloc(nq * sizeof(double));
            double *dq = malloc(nq * sizeof(double)), *dk = malloc(nk * sizeof(double)), *dv = malloc(nk * sizeof(double));
            double *o = malloc(nq * sizeof(double)), *lse = malloc(s.B * s.H * s.Sq * sizeof(double));
            fa_fill_random(tmp, nq, 11, 1, 1.5f);
            for (int64_t i = 0; i < nq; i++) q[i] = tmp[i];
            fa_fill_random(tmp, nq, 11, 4, 1.0f);
            for (int64_t i = 0; i < nq; i++) dout[i] = tmp[i];
            fa_fill_random(tmp, nk, 11, 2, 1.5f);
            for (int64_t i = 0; i < nk; i++) k[i] = tmp[i];
            fa_fill_random(tmp, nk, 11, 3, 1.0f);
            for (int64_t i = 0; i < nk; i++) v[i] = tmp[i];
            fa_oracle_forward(&s, q, k, v, NULL, o, lse);
            fa_oracle_backward(&s, q, k, v, dout, o, lse, NULL, dq, dk, dv);
            double eq = max_fd_error(&s, q, dq, nq, q, k, v, dout);
            double ek = max_fd_error(&s, k, dk, nk, q, k, v, dout);
            double ev = max_fd_error(&s, v, dv, nk, q, k, v, dout);
            printf("gradcheck causal=%d Sq=%lld Sk=%lld: max error dQ %.2e dK %.2e dV %.2e\n", causal,
                   (long long)s.Sq, (long long)s.Sk, eq, ek, ev);
            // Central differences with h = 1e-6 in float64 are accurate to about 1e-9 here.
            EXPECT(eq < 1e-7 && ek < 1e-7 && ev < 1e-7);
            free(tmp); free(q); free(k); free(v); free(dout); free(dq); free(dk); free(dv); free(o); free(lse);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
static void test_shape(void) {
    char err[256];
    fa_shape s = {.B = 2, .H = 3, .Sq = 17, .Sk = 33, .D = 64, .scale = 0.125f};
    EXPECT(fa_shape_validate(&s, err, sizeof err) == 0);
    s.Sq = 0;
    EXPECT(fa_shape_validate(&s, err, sizeof err) != 0 && strstr(err, "Sq must be positive"));
    s.Sq = -4;
    EXPECT(fa_shape_validate(&s, err, sizeof err) != 0);
    s.Sq = INT64_C(1) << 31;
    s.Sk = INT64_C(1) << 31;
    EXPECT(fa_shape_validate(&s, err, sizeof err) != 0 && strstr(err, "2^40"));
    s.Sq = s.Sk = 4;
    s.scale = NAN;
    EXPECT(fa_shape_validate(&s, err, sizeof err) != 0);

    // FLOPs: 4*B*H*Sq*Sk*D, half when causal and square; visible pairs are counted exactly.
    fa_shape f = {.B = 1, .H = 1, .Sq = 4, .Sk = 4, .D = 2, .scale = 1.0f};
    EXPECT(fa_flops_forward(&f) == 4.0 * 16 * 2);
    f.causal = 1;
    EXPECT(fa_flops_forward(&f) == 2.0 * 16 * 2);
    EXPECT(fa_visible_pairs(&f) == 10.0);
    EXPECT(fa_flops_backward(&f) == 2.5 * fa_flops_forward(&f));
    f.Sq = 6;   // rows 4 and 5 see all 4 keys: 10 + 8
    EXPECT(fa_visible_pairs(&f) == 18.0);
}

static void test_random(void) {
    const int64_t n = 100000;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    omp_set_num_threads(1);
    fa_fill_random(a, n, 42, FA_STREAM_Q, 1.0f);
    omp_set_num_threads(2);
    fa_fill_random(b, n, 42, FA_STREAM_Q, 1.0f);
    EXPECT(memcmp(a, b, n * sizeof(float)) == 0);   // independent of the thread count
    fa_fill_random(b, n, 42, FA_STREAM_K, 1.0f);
    EXPECT(memcmp(a, b, n * sizeof(float)) != 0);   // another stream differs
    double sum = 0.0, lo = 1.0, hi = -1.0;
    for (int64_t i = 0; i < n; i++) {
        sum += a[i];
        lo = fmin(lo, a[i]);
        hi = fmax(hi, a[i]);
    }
    EXPECT(fabs(sum / n) < 0.01 && lo >= -1.0 && hi < 1.0 && lo < -0.99 && hi > 0.99);   // uniform on [-1, 1)
    free(a);
    free(b);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_common <test> [scratch-dir]\n");
        return 2;
    }
    const char *dir = argc > 2 ? argv[2] : "test_common_tmp";
    if (strcmp(argv[1], "verify") == 0) test_verify();
    else if (strcmp(argv[1], "verify_zero_tensor") == 0) test_verify_zero_tensor();
    else if (strcmp(argv[1], "verify_local") == 0) test_verify_local();
    else if (strcmp(argv[1], "npy") == 0) test_npy(dir);
    else if (strcmp(argv[1], "oracle_hand") == 0) test_oracle_hand();
    else if (strcmp(argv[1], "oracle_gradcheck") == 0) test_oracle_gradcheck();
    else if (strcmp(argv[1], "shape") == 0) test_shape();
    else if (strcmp(argv[1], "random") == 0) test_random();
    else {
        fprintf(stderr, "unknown test %s\n", argv[1]);
        return 2;
    }
    printf("%s: %s\n", argv[1], failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
