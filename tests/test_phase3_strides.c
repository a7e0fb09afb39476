// test_phase3_strides.c - the phase 3 kernels on non-contiguous tensors, passed as strided views.
//
// Usage: test_phase3_strides cpu|cuda      (cuda exits 77, skipped, without a GPU)
//
// The tensors are [B, H, S, D] views of buffers laid out differently, as a framework hands them over:
//   Q  a [B, Sq, H, D] buffer ("BSHD", the layout of a projection before the heads are split off)
//   K  a [B, Sk, H, D] buffer
//   V  a [B, H, Sk, D + 4] buffer: rows padded to D + 4 floats
//   O  a [B, Sq, H, D + 4] buffer: BSHD with padded rows; the padding holds a sentinel that must survive
// and, on the CPU only (the CUDA kernels read rows as float4s and need stride d = 1), K once more as a [B, H, D, Sk]
// buffer: the transposed layout, stride d = Sk. Every step runs on every view (steps 2 and 3 causal and not), and
// the result, gathered back to a contiguous tensor, is checked against the float64 oracle.
#include "fa_gpu.h"
#include "fa_test_device.h"
#include "fa_oracle.h"
#include "fa_tensor.h"
#include "fa_verify.h"
#include "forward4d.h"
#include "fa_test_expect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B 2
#define H 3
#define S_Q 70
#define S_K 45
#define D 32
#define PAD 4
#define BLOCK_M 64
#define BLOCK_N 32
#define SENTINEL 12345.0f


static int64_t at(fa_strides s, int64_t b, int64_t h, int64_t i, int64_t d) {
    return b * s.b + h * s.h + i * s.s + d * s.d;
}

// Copies the [B, H, S, D] view of x (strides s) into a contiguous array, or back.
static void gather(const float *x, fa_strides s, int64_t S, float *out) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < S; i++)
                for (int64_t d = 0; d < D; d++) out[((b * H + h) * S + i) * D + d] = x[at(s, b, h, i, d)];
}
static void scatter(const float *in, fa_strides s, int64_t S, float *x) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < S; i++)
                for (int64_t d = 0; d < D; d++) x[at(s, b, h, i, d)] = in[((b * H + h) * S + i) * D + d];
}

typedef struct {
    const char *what;
    fa_strides q_s, k_s, v_s, o_s;
    int64_t q_n, k_n, v_n, o_n;   // floats in each buffer
} layout;

// Runs one step on one layout, on the CPU or the GPU; returns the O buffer's contents in o_buf and LSE in lse.
static void run_step(int on_gpu, int step, const fa_shape *shape, const layout *L, const float *q_buf,
                     const float *k_buf, const float *v_buf, float *o_buf, float *lse) {
    if (!on_gpu) {
        const forward_tensors t = {q_buf, k_buf, v_buf, L->q_s, L->k_s, L->v_s, o_buf, L->o_s, lse, NULL};
        if (step == 1) flash_forward_grid4d_cpu(shape, BLOCK_M, BLOCK_N, &t, NULL);
        if (step == 2) flash_forward_causal_cpu(shape, BLOCK_M, BLOCK_N, &t, NULL);
        if (step == 3) flash_forward_lse_cpu(shape, BLOCK_M, BLOCK_N, &t, NULL);
        return;
    }
#if FA_HAVE_CUDA
    float *q = fa_gpu_alloc(L->q_n, "Q"), *k = fa_gpu_alloc(L->k_n, "K"), *v = fa_gpu_alloc(L->v_n, "V");
    float *o = fa_gpu_alloc(L->o_n, "O"), *l = fa_gpu_alloc(B * H * S_Q, "LSE");
    fa_gpu_upload(q, q_buf, L->q_n);
    fa_gpu_upload(k, k_buf, L->k_n);
    fa_gpu_upload(v, v_buf, L->v_n);
    fa_gpu_upload(o, o_buf, L->o_n);   // the sentinels in the padding
    fa_gpu_poison(l, B * H * S_Q);
    const forward_tensors t = {q, k, v, L->q_s, L->k_s, L->v_s, o, L->o_s, l, NULL};
    if (step == 1) flash_forward_grid4d_cuda(shape, BLOCK_M, BLOCK_N, &t);
    if (step == 2) flash_forward_causal_cuda(shape, BLOCK_M, BLOCK_N, &t);
    if (step == 3) flash_forward_lse_cuda(shape, BLOCK_M, BLOCK_N, &t);
    fa_gpu_synchronize("phase 3 strides test");
    fa_gpu_download(o_buf, o, L->o_n);
    fa_gpu_download(lse, l, B * H * S_Q);
    fa_gpu_free(q);
    fa_gpu_free(k);
    fa_gpu_free(v);
    fa_gpu_free(o);
    fa_gpu_free(l);
#endif
}

static void test_layout(int on_gpu, const layout *L, const float *q, const float *k, const float *v) {
    // The buffers: the view filled with the inputs, the rest with the sentinel.
    float *q_buf = malloc(sizeof(float) * L->q_n), *k_buf = malloc(sizeof(float) * L->k_n);
    float *v_buf = malloc(sizeof(float) * L->v_n), *o_buf = malloc(sizeof(float) * L->o_n);
    for (int64_t x = 0; x < L->q_n; x++) q_buf[x] = SENTINEL;
    for (int64_t x = 0; x < L->k_n; x++) k_buf[x] = SENTINEL;
    for (int64_t x = 0; x < L->v_n; x++) v_buf[x] = SENTINEL;
    scatter(q, L->q_s, S_Q, q_buf);
    scatter(k, L->k_s, S_K, k_buf);
    scatter(v, L->v_s, S_K, v_buf);
    float *o = malloc(sizeof(float) * B * H * S_Q * D), *lse = malloc(sizeof(float) * B * H * S_Q);
    double *qd = fa_to_double(q, B * H * S_Q * D, "Q"), *kd = fa_to_double(k, B * H * S_K * D, "K");
    double *vd = fa_to_double(v, B * H * S_K * D, "V");
    double *o_ref = fa_alloc_doubles(B * H * S_Q * D, "O"), *lse_ref = fa_alloc_doubles(B * H * S_Q, "LSE");
    const int64_t dims[4] = {B, H, S_Q, D}, lse_dims[4] = {B, H, S_Q, 1};
    // in_view[x]: 1 where element x of the O buffer belongs to the [B, H, Sq, D] view.
    float *ones = malloc(sizeof(float) * B * H * S_Q * D), *in_view = calloc((size_t)L->o_n, sizeof(float));
    for (int64_t x = 0; x < B * H * S_Q * D; x++) ones[x] = 1.0f;
    scatter(ones, L->o_s, S_Q, in_view);
    free(ones);

    for (int step = 1; step <= 3; step++)
        for (int causal = 0; causal <= (step > 1); causal++) {
            const fa_shape shape = {B, H, S_Q, S_K, D, causal, (float)(1.0 / sqrt((double)D))};
            fa_oracle_forward(&shape, qd, kd, vd, NULL, o_ref, lse_ref);
            // O's view poisoned (an element the kernel forgets stays NaN), its padding set to the sentinel.
            for (int64_t x = 0; x < L->o_n; x++) o_buf[x] = SENTINEL;
            fa_poison(o, B * H * S_Q * D);
            scatter(o, L->o_s, S_Q, o_buf);
            fa_poison(lse, B * H * S_Q);
            run_step(on_gpu, step, &shape, L, q_buf, k_buf, v_buf, o_buf, lse);

            gather(o_buf, L->o_s, S_Q, o);
            fa_check c = fa_verify_results("strides", "O", o, o_ref, dims, NULL, FA_TOL_FORWARD);
            int ok = c.pass;
            if (step == 3) ok = ok && fa_verify_results("strides", "LSE", lse, lse_ref, lse_dims, NULL,
                                                        FA_TOL_FORWARD).pass;
            // Nothing outside the view was written: the padding still holds the sentinel.
            int64_t touched = 0;
            for (int64_t x = 0; x < L->o_n; x++)
                if (in_view[x] == 0.0f && o_buf[x] != SENTINEL) touched++;
            ok = ok && touched == 0;
            printf("%s %-30s step %d causal=%d: O rel err %.1e, %lld elements outside the view written: %s\n",
                   on_gpu ? "cuda" : "cpu ", L->what, step, causal, c.rel_err, (long long)touched,
                   ok ? "ok" : "FAIL");
            EXPECT(ok);
        }
    free(q_buf);
    free(k_buf);
    free(v_buf);
    free(o_buf);
    free(in_view);
    free(o);
    free(lse);
    free(qd);
    free(kd);
    free(vd);
    free(o_ref);
    free(lse_ref);
}

int main(int argc, char **argv) {
    const int on_gpu = fa_test_wants_gpu(argc, argv);
    float *q = fa_alloc_floats(B * H * S_Q * D, "Q"), *k = fa_alloc_floats(B * H * S_K * D, "K");
    float *v = fa_alloc_floats(B * H * S_K * D, "V");
    fa_fill_random(q, B * H * S_Q * D, 5, FA_STREAM_Q, 1.0f);
    fa_fill_random(k, B * H * S_K * D, 5, FA_STREAM_K, 1.0f);
    fa_fill_random(v, B * H * S_K * D, 5, FA_STREAM_V, 1.0f);

    // Strides of each buffer, in elements, as (b, h, s, d).
    const fa_strides bshd_q = {S_Q * H * D, D, H * D, 1}, bshd_k = {S_K * H * D, D, H * D, 1};
    const fa_strides padded_v = {H * S_K * (D + PAD), S_K * (D + PAD), D + PAD, 1};
    const fa_strides bshd_padded_o = {S_Q * H * (D + PAD), D + PAD, H * (D + PAD), 1};
    const fa_strides transposed_k = {H * D * S_K, D * S_K, 1, S_K};
    const layout views = {"Q, K BSHD; V, O padded rows", bshd_q, bshd_k, padded_v, bshd_padded_o,
                          B * S_Q * H * D, B * S_K * H * D, B * H * S_K * (D + PAD), B * S_Q * H * (D + PAD)};
    const layout transposed = {"K transposed (stride d = Sk)", bshd_q, transposed_k, padded_v, bshd_padded_o,
                               B * S_Q * H * D, B * H * D * S_K, B * H * S_K * (D + PAD), B * S_Q * H * (D + PAD)};
    test_layout(on_gpu, &views, q, k, v);
    if (!on_gpu) test_layout(on_gpu, &transposed, q, k, v);

    free(q);
    free(k);
    free(v);
    if (failures) fprintf(stderr, "%d failure(s)\n", failures);
    else printf("all stride checks passed\n");
    return failures ? 1 : 0;
}
