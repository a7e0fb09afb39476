// backward_ext.h - phase 6, the backward passes of the features: each pass a copy of phase 4's with the feature added
// (phase4_backward/backward.h has the tensors, the preprocess and the plan: Delta, then dK and dV, then dQ).
//
//   softcap_backward_dkdv_*, softcap_backward_dq_*   softcapping: dS carried back through C * tanh(s / C).
//   gqa_backward_dkdv_*, gqa_backward_dq_*           GQA / MQA: dK and dV of a K/V head summed over its group.
//   window_backward_dkdv_*, window_backward_dq_*     the sliding window: the tiles its band reaches, and its mask.
//   dropout_backward_dkdv_*, dropout_backward_dq_*   dropout: the forward's mask, regenerated, on dV and on dP.
//
// The passes take phase 4's backward_tensors; dQ is the deterministic pass (no atomic variant here), so a whole
// backward is backward_preprocess_* (phase 4) with zero_dq = 0, then the dK/dV pass with atomic_dq = 0, then dQ.
#ifndef BACKWARD_EXT_H
#define BACKWARD_EXT_H

#include "fa_baselines.h"

#ifdef __cplusplus
extern "C" {
#endif

// softcap > 0: the forward was phase6_extensions/softcap_*, whose O, LSE and LSE residual t holds.
void backward_dkdv_softcap_cpu(const fa_shape *shape, float softcap, int block_m, int block_n,
                               const backward_tensors *t, int atomic_dq);
void backward_dkdv_softcap_cuda(const fa_shape *shape, float softcap, int block_m, int block_n,
                                const backward_tensors *t, int atomic_dq);
void backward_dq_softcap_cpu(const fa_shape *shape, float softcap, int block_m, int block_n,
                             const backward_tensors *t);
void backward_dq_softcap_cuda(const fa_shape *shape, float softcap, int block_m, int block_n,
                              const backward_tensors *t);

// H_kv K/V heads (H % H_kv == 0): t's K, V, dK, dV are [B, H_kv, Sk, D]; the forward was phase6_extensions/gqa_*.
void backward_dkdv_gqa_cpu(const fa_shape *shape, int64_t H_kv, int block_m, int block_n, const backward_tensors *t,
                           int atomic_dq);
void backward_dkdv_gqa_cuda(const fa_shape *shape, int64_t H_kv, int block_m, int block_n, const backward_tensors *t,
                            int atomic_dq);
void backward_dq_gqa_cpu(const fa_shape *shape, int64_t H_kv, int block_m, int block_n, const backward_tensors *t);
void backward_dq_gqa_cuda(const fa_shape *shape, int64_t H_kv, int block_m, int block_n, const backward_tensors *t);

// The window (left, right), -1 for unbounded; right = 0 when causal (the forward was phase6_extensions/window_*).
void backward_dkdv_window_cpu(const fa_shape *shape, int64_t left, int64_t right, int block_m, int block_n,
                              const backward_tensors *t, int atomic_dq);
void backward_dkdv_window_cuda(const fa_shape *shape, int64_t left, int64_t right, int block_m, int block_n,
                               const backward_tensors *t, int atomic_dq);
void backward_dq_window_cpu(const fa_shape *shape, int64_t left, int64_t right, int block_m, int block_n,
                            const backward_tensors *t);
void backward_dq_window_cuda(const fa_shape *shape, int64_t left, int64_t right, int block_m, int block_n,
                             const backward_tensors *t);

// Dropout with probability dropout_p and the mask of `seed` (the forward was phase6_extensions/dropout_*).
void backward_dkdv_dropout_cpu(const fa_shape *shape, float dropout_p, uint64_t seed, int block_m, int block_n,
                               const backward_tensors *t, int atomic_dq);
void backward_dkdv_dropout_cuda(const fa_shape *shape, float dropout_p, uint64_t seed, int block_m, int block_n,
                                const backward_tensors *t, int atomic_dq);
void backward_dq_dropout_cpu(const fa_shape *shape, float dropout_p, uint64_t seed, int block_m, int block_n,
                             const backward_tensors *t);
void backward_dq_dropout_cuda(const fa_shape *shape, float dropout_p, uint64_t seed, int block_m, int block_n,
                              const backward_tensors *t);

#ifdef __cplusplus
}
#endif

#endif
