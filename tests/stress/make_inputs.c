// make_inputs.c - writes the .npy inputs of one stress or bad-file case (q, k, v and do of shape [B, H, S, D]) into a
// folder, for a phase binary to read with --load-dir. No NumPy needed: valid files come from fa_npy_save(), broken
// ones are written byte by byte here.
//
// Usage: stress_inputs CASE DIR B H Sq Sk D
//
// Every case starts from seeded random inputs in [-1, 1). The numerical cases then plant one value in the LAST head
// (b, h) = (B-1, H-1), at row r = min(5, S-1) and column c = min(3, D-1), so that its effect is easy to predict:
//   random     nothing planted (the control)
//   nan_q      q[b,h,r,c] = NaN    -> row r of O and LSE is NaN
//   nan_k      k[b,h,r,c] = NaN    -> every row that sees key r is NaN (causal: rows >= r)
//   nan_v      v[b,h,r,c] = NaN    -> column c of O is NaN in every row that sees key r; LSE is unaffected
//   nan_do     dO[b,h,r,c] = NaN   -> (phase 4) the gradients that row r of dO reaches
//   inf_q      q[b,h,r,c] = +Inf   -> row r's logits are +-Inf: exp(Inf - Inf) makes row r NaN
//   inf_v      v[b,h,r,c] = +Inf   -> column c of O is +Inf in every row that sees key r
//   neginf_k   k[b,h,r,c] = -Inf and q[b,h,:,c] > 0 -> key r's logit is -Inf in every row: it gets weight exactly 0
//              (a mask written into the data); every output is finite and must match the oracle
//   equal_k    every key row of a head equals its row 0 -> all scores of a row are equal, P is uniform
//   zero_q     q = 0 -> all scores are 0, P is uniform
//   f64        all inputs stored as float64 (the reader converts them)
//   v3         q stored with a version 3.0 header
// The bad-file cases break q.npy (k, v, do stay valid) in one way each; the binary must refuse them with exit 2:
//   bad_truncated_header, bad_truncated_data, bad_dtype, bad_big_endian, bad_fortran, bad_rank, bad_shape,
//   bad_huge_shape (a shape whose element count overflows 64 bits), bad_huge_declared (2^40 elements, 4 TiB),
//   bad_magic, bad_empty, bad_nul, bad_version, bad_missing_k (no k.npy at all), bad_directory (q.npy is a folder),
//   bad_duplicate_key ('shape' twice: NumPy would read the second), bad_extra_key, bad_minor_version (1.1),
//   bad_fifo (q.npy is a pipe)
// And finite values at the planted place that the checks must handle: huge_q (q = 3e38: logits no float32 check can
// judge, refused), large_q (q = 1e5: fits bf16, checked; its own row's tolerance grows, no other's), large_v
// (v = 1e5: does not fit fp16, refused).
#include "fa_npy.h"
#include "fa_tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    int64_t B, H, Sq, Sk, D;
} dims;

static int64_t parse_size(const char *text) {
    char *end;
    long long value = strtoll(text, &end, 10);
    if (*end != '\0' || value <= 0) fa_die("make_inputs: '%s' is not a positive size", text);
    return value;
}

static void save(const char *dir, const char *name, const void *x, int itemsize, int ndim, const int64_t *shape) {
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    if (fa_npy_save(path, x, itemsize, ndim, shape, err, sizeof err) != 0) fa_die("%s", err);
}

// A .npy file with a header of our choosing: format version, dtype, fortran_order and shape as text, then
// `payload_bytes` bytes of data taken from `data` (zeros past its end). With nul_at > 0 the header text gets a NUL
// byte at that offset.
static void write_raw(const char *dir, const char *name, int version, const char *descr, const char *fortran,
                      const char *shape, const void *data, size_t data_bytes, size_t payload_bytes, int nul_at) {
    char path[4096], dict[512];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }", descr, fortran, shape);
    FILE *f = fopen(path, "wb");
    if (!f) fa_die("make_inputs: cannot write %s", path);
    const size_t prefix = version == 1 ? 10 : 12, text = strlen(dict);
    if (nul_at > 0) dict[nul_at] = '\0';
    size_t padded = text + 1;
    padded += (64 - (prefix + padded) % 64) % 64;
    unsigned char head[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)version, 0,
                              (unsigned char)(padded & 0xff), (unsigned char)(padded >> 8), 0, 0};
    fwrite(head, 1, prefix, f);
    fwrite(dict, 1, text, f);
    for (size_t i = text; i + 1 < padded; i++) fputc(' ', f);
    fputc('\n', f);
    for (size_t i = 0; i < payload_bytes; i++) fputc(i < data_bytes ? ((const unsigned char *)data)[i] : 0, f);
    fclose(f);
}

// Overwrites bytes of a written file at `offset`.
static void patch_file(const char *dir, const char *name, long offset, const char *bytes, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    FILE *f = fopen(path, "r+b");
    if (!f || fseek(f, offset, SEEK_SET) != 0 || fwrite(bytes, 1, n, f) != n) fa_die("make_inputs: cannot patch %s", path);
    fclose(f);
}

// Cuts a file short (a cut-off download): by `cut_from_end` bytes, or when that is 0, to `keep` bytes.
static void truncate_file(const char *dir, const char *name, long cut_from_end, long keep) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    struct stat st;
    if (stat(path, &st) != 0) fa_die("make_inputs: %s is missing", path);
    long size = cut_from_end ? (long)st.st_size - cut_from_end : keep;
    if (truncate(path, size) != 0) fa_die("make_inputs: cannot truncate %s", path);
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s CASE DIR B H Sq Sk D\n", argv[0]);
        return 2;
    }
    const char *c = argv[1], *dir = argv[2];
    const dims s = {parse_size(argv[3]), parse_size(argv[4]), parse_size(argv[5]), parse_size(argv[6]),
                    parse_size(argv[7])};
    mkdir(dir, 0777);
    const char *names[4] = {"q", "k", "v", "do"};
    for (int t = 0; t < 4; t++) {   // a stale file of an earlier run must not survive into this case
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.npy", dir, names[t]);
        remove(path);
        rmdir(path);
    }

    const int64_t shape_q[4] = {s.B, s.H, s.Sq, s.D}, shape_kv[4] = {s.B, s.H, s.Sk, s.D};
    const int64_t n_q = s.B * s.H * s.Sq * s.D, n_kv = s.B * s.H * s.Sk * s.D;
    float *q = fa_alloc_floats(n_q, "q"), *k = fa_alloc_floats(n_kv, "k"), *v = fa_alloc_floats(n_kv, "v");
    float *dout = fa_alloc_floats(n_q, "do");
    fa_fill_random(q, n_q, 7, FA_STREAM_Q, 1.0f);
    fa_fill_random(k, n_kv, 7, FA_STREAM_K, 1.0f);
    fa_fill_random(v, n_kv, 7, FA_STREAM_V, 1.0f);
    fa_fill_random(dout, n_q, 7, FA_STREAM_DO, 1.0f);

    // The planted element: last head, row r, column col.
    const int64_t last = s.B * s.H - 1, col = s.D > 3 ? 3 : s.D - 1;
    const int64_t rq = s.Sq > 5 ? 5 : s.Sq - 1, rk = s.Sk > 5 ? 5 : s.Sk - 1;
    float *q_at = q + (last * s.Sq + rq) * s.D + col, *k_at = k + (last * s.Sk + rk) * s.D + col;
    float *v_at = v + (last * s.Sk + rk) * s.D + col, *do_at = dout + (last * s.Sq + rq) * s.D + col;

    int write_valid = 1;
    if (strcmp(c, "random") == 0 || strcmp(c, "f64") == 0 || strcmp(c, "v3") == 0) {
    } else if (strcmp(c, "nan_q") == 0) *q_at = NAN;
    else if (strcmp(c, "nan_k") == 0) *k_at = NAN;
    else if (strcmp(c, "nan_v") == 0) *v_at = NAN;
    else if (strcmp(c, "nan_do") == 0) *do_at = NAN;
    else if (strcmp(c, "inf_q") == 0) *q_at = INFINITY;
    else if (strcmp(c, "inf_v") == 0) *v_at = INFINITY;
    else if (strcmp(c, "huge_q") == 0) *q_at = 3e38f;   // finite: logits no float32 check can judge
    else if (strcmp(c, "large_q") == 0) *q_at = 1e5f;   // finite, fits bf16, not fp16
    else if (strcmp(c, "large_v") == 0) *v_at = 1e5f;
    else if (strcmp(c, "neginf_k") == 0) {
        *k_at = -INFINITY;
        for (int64_t i = 0; i < s.Sq; i++) {   // q . k_r = (positive) * (-Inf) + finite = -Inf in every row
            float *x = q + (last * s.Sq + i) * s.D + col;
            *x = fabsf(*x) + 0.5f;
        }
    } else if (strcmp(c, "equal_k") == 0) {
        for (int64_t bh = 0; bh <= last; bh++)
            for (int64_t j = 1; j < s.Sk; j++) memcpy(k + (bh * s.Sk + j) * s.D, k + bh * s.Sk * s.D, s.D * sizeof(float));
    } else if (strcmp(c, "zero_q") == 0) {
        memset(q, 0, (size_t)n_q * sizeof(float));
    } else if (strncmp(c, "bad_", 4) == 0) {
        write_valid = 0;
    } else {
        fa_die("make_inputs: unknown case '%s'", c);
    }

    if (strcmp(c, "f64") == 0) {
        double *qd = malloc((size_t)n_q * 8), *kd = malloc((size_t)n_kv * 8), *vd = malloc((size_t)n_kv * 8);
        double *dod = malloc((size_t)n_q * 8);
        for (int64_t i = 0; i < n_q; i++) qd[i] = q[i], dod[i] = dout[i];
        for (int64_t i = 0; i < n_kv; i++) kd[i] = k[i], vd[i] = v[i];
        save(dir, "q", qd, 8, 4, shape_q);
        save(dir, "k", kd, 8, 4, shape_kv);
        save(dir, "v", vd, 8, 4, shape_kv);
        save(dir, "do", dod, 8, 4, shape_q);
        free(qd), free(kd), free(vd), free(dod);
        write_valid = 0;
    }
    if (write_valid) {
        save(dir, "q", q, 4, 4, shape_q);
        save(dir, "k", k, 4, 4, shape_kv);
        save(dir, "v", v, 4, 4, shape_kv);
        save(dir, "do", dout, 4, 4, shape_q);
    }

    if (strcmp(c, "v3") == 0 || strncmp(c, "bad_", 4) == 0) {
        // k, v and do valid; q written (or broken) below.
        if (strncmp(c, "bad_", 4) == 0) {
            if (strcmp(c, "bad_missing_k") != 0) save(dir, "k", k, 4, 4, shape_kv);
            save(dir, "v", v, 4, 4, shape_kv);
            save(dir, "do", dout, 4, 4, shape_q);
        }
        const size_t q_bytes = (size_t)n_q * 4;
        char shape[160], shape_rank3[160], shape_plus1[160], shape_huge[160], shape_2p40[160];
        snprintf(shape, sizeof shape, "%lld, %lld, %lld, %lld", (long long)s.B, (long long)s.H, (long long)s.Sq,
                 (long long)s.D);
        snprintf(shape_rank3, sizeof shape_rank3, "%lld, %lld, %lld", (long long)(s.B * s.H), (long long)s.Sq,
                 (long long)s.D);
        snprintf(shape_plus1, sizeof shape_plus1, "%lld, %lld, %lld, %lld", (long long)s.B, (long long)s.H,
                 (long long)s.Sq + 1, (long long)s.D);
        snprintf(shape_huge, sizeof shape_huge, "%lld, 99999999999, 99999999999, %lld", (long long)s.B, (long long)s.D);
        snprintf(shape_2p40, sizeof shape_2p40, "%lld, %lld, %lld, %lld", (long long)s.B, (long long)s.H,
                 (long long)((INT64_C(1) << 40) / (s.B * s.H * s.D)), (long long)s.D);
        if (strcmp(c, "v3") == 0) {
            write_raw(dir, "q", 3, "<f4", "False", shape, q, q_bytes, q_bytes, 0);
        } else if (strcmp(c, "bad_truncated_header") == 0) {
            save(dir, "q", q, 4, 4, shape_q);
            truncate_file(dir, "q", 0, 40);
        } else if (strcmp(c, "bad_truncated_data") == 0) {
            save(dir, "q", q, 4, 4, shape_q);
            truncate_file(dir, "q", 4, 0);
        } else if (strcmp(c, "bad_dtype") == 0) {
            write_raw(dir, "q", 1, "<i4", "False", shape, q, q_bytes, q_bytes, 0);
        } else if (strcmp(c, "bad_big_endian") == 0) {
            write_raw(dir, "q", 1, ">f4", "False", shape, q, q_bytes, q_bytes, 0);
        } else if (strcmp(c, "bad_fortran") == 0) {
            write_raw(dir, "q", 1, "<f4", "True", shape, q, q_bytes, q_bytes, 0);
        } else if (strcmp(c, "bad_rank") == 0) {   // [B*H, Sq, D]: the right data, one dimension short
            write_raw(dir, "q", 1, "<f4", "False", shape_rank3, q, q_bytes, q_bytes, 0);
        } else if (strcmp(c, "bad_shape") == 0) {   // one query row more than the flags say, data to match
            write_raw(dir, "q", 1, "<f4", "False", shape_plus1, q, q_bytes, q_bytes + (size_t)(s.B * s.H * s.D * 4), 0);
        } else if (strcmp(c, "bad_huge_shape") == 0) {   // B * 99999999999^2 * D overflows int64
            write_raw(dir, "q", 1, "<f4", "False", shape_huge, q, q_bytes, q_bytes, 0);
        } else if (strcmp(c, "bad_huge_declared") == 0) {   // 2^40 elements: parses, but is not the run's shape
            write_raw(dir, "q", 1, "<f4", "False", shape_2p40, q, q_bytes, q_bytes, 0);
        } else if (strcmp(c, "bad_magic") == 0) {
            save(dir, "q", q, 4, 4, shape_q);
            patch_file(dir, "q", 0, "PK", 2);   // a zip file's magic where NumPy's should be
        } else if (strcmp(c, "bad_empty") == 0) {
            save(dir, "q", q, 4, 4, shape_q);
            truncate_file(dir, "q", 0, 0);
        } else if (strcmp(c, "bad_nul") == 0) {
            write_raw(dir, "q", 1, "<f4", "False", shape, q, q_bytes, q_bytes, 16);
        } else if (strcmp(c, "bad_version") == 0) {
            save(dir, "q", q, 4, 4, shape_q);
            patch_file(dir, "q", 6, "\x09", 1);   // format version 9.0 does not exist
        } else if (strcmp(c, "bad_duplicate_key") == 0) {   // NumPy reads the last 'shape', (B*H, 1, Sq, D)
            char twice[400];
            snprintf(twice, sizeof twice, "%s), 'shape': (%lld, 1, %lld, %lld", shape, (long long)(s.B * s.H),
                     (long long)s.Sq, (long long)s.D);
            write_raw(dir, "q", 1, "<f4", "False", twice, q, q_bytes, q_bytes, 0);
        } else if (strcmp(c, "bad_extra_key") == 0) {   // NumPy refuses a fourth key
            write_raw(dir, "q", 1, "<f4', 'extra': 'x", "False", shape, q, q_bytes, q_bytes, 0);
        } else if (strcmp(c, "bad_minor_version") == 0) {
            save(dir, "q", q, 4, 4, shape_q);
            patch_file(dir, "q", 7, "\x01", 1);   // format version 1.1 does not exist
        } else if (strcmp(c, "bad_fifo") == 0) {   // a pipe with no writer: reading it would wait forever
            char path[4096];
            snprintf(path, sizeof path, "%s/q.npy", dir);
            if (mkfifo(path, 0666) != 0) fa_die("make_inputs: cannot make the pipe %s", path);
        } else if (strcmp(c, "bad_missing_k") == 0) {
            save(dir, "q", q, 4, 4, shape_q);
        } else if (strcmp(c, "bad_directory") == 0) {
            char path[4096];
            snprintf(path, sizeof path, "%s/q.npy", dir);
            mkdir(path, 0777);
        } else {
            fa_die("make_inputs: unknown case '%s'", c);
        }
    }
    free(q), free(k), free(v), free(dout);
    printf("make_inputs: %s written to %s\n", c, dir);
    return 0;
}
