// fa_shape.h - the problem size every phase shares, and the numbers derived from it.
//
// Tensors are float32, row-major, [B, H, S, D] contiguous: Q is [B, H, Sq, D], K and V are [B, H, Sk, D],
// O is [B, H, Sq, D], LSE is [B, H, Sq]. Phase 2 uses B = H = 1 and calls the sizes N (= Sq), Nk (= Sk), d (= D).
#ifndef FA_SHAPE_H
#define FA_SHAPE_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t B, H;      // batch, heads
    int64_t Sq, Sk;    // query and key sequence lengths (Sq != Sk is cross attention)
    int64_t D;         // head dimension
    int causal;        // row i sees keys j <= i (top-left aligned, like PyTorch's is_causal=True)
    float scale;       // softmax scale; 1/sqrt(D) unless the user gives --scale
} fa_shape;

// Largest size any one dimension may have, and largest element count of any one tensor: beyond these the
// suite refuses the shape instead of overflowing (2^40 floats is 4 TiB, more than any machine here holds).
#define FA_MAX_DIM   (INT64_C(1) << 31)
#define FA_MAX_NUMEL (INT64_C(1) << 40)

// Returns 0 when the shape is usable; otherwise writes one line (no newline) into err and returns -1.
int fa_shape_validate(const fa_shape *shape, char *err, size_t err_len);

int64_t fa_numel_q(const fa_shape *shape);    // B*H*Sq*D   (Q, O, dO, dQ)
int64_t fa_numel_kv(const fa_shape *shape);   // B*H*Sk*D   (K, V, dK, dV)
int64_t fa_numel_lse(const fa_shape *shape);  // B*H*Sq     (LSE, Delta)
int64_t fa_numel_scores(const fa_shape *shape); // B*H*Sq*Sk (S or P of the naive version)

// Number of (query, key) pairs the causal mask lets through: exact, counted row by row.
double fa_visible_pairs(const fa_shape *shape);
// Forward FLOPs by the suite's convention: 4*B*H*Sq*Sk*D, half of that when causal and square.
double fa_flops_forward(const fa_shape *shape);
// Backward FLOPs: 2.5 times the forward.
double fa_flops_backward(const fa_shape *shape);

// Strides of a [B, H, S, D] tensor, in elements: element (b, h, s, d) is at b*b_ + h*h_ + s*s_ + d*d_.
// Kernels take them explicitly (as the tutorial's stride_qb, stride_qh, stride_qs, stride_qd), so that a view of a
// larger tensor (a transposed layout, a slice) can be passed without a copy.
typedef struct {
    int64_t b, h, s, d;
} fa_strides;

// The strides of a contiguous [B, H, S, D] tensor: (H*S*D, S*D, D, 1).
fa_strides fa_strides_contiguous(int64_t H, int64_t S, int64_t D);

#ifdef __cplusplus
}
#endif

#endif
