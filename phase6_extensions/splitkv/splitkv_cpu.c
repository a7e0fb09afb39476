// splitkv_cpu.c - phase 6, on the CPU: split-KV decoding (the CPU twin of splitkv_cuda.cu).
//
// A decode step has a few query rows (S_q <= SPLITKV_MAX_SQ) and a long cache of keys. Phase 3's grid gives a head
// one Q tile, so one thread block would walk all S_k keys alone while the GPU idles. Split-KV cuts the keys of each
// head into splits of SPLITKV_KEYS_PER_SPLIT keys, one program per (head, split), and then merges the partials:
//   pass 1 (split):   for the keys of split s, the online softmax of phase 2 as usual; it ends with the partial
//                     output O_s (normalised by its own sum) and its log-sum-exp in base 2, LSE2_s = m_s + log2(l_s);
//   pass 2 (combine): per row, M = max_s LSE2_s, L = sum_s 2^(LSE2_s - M), O = sum_s 2^(LSE2_s - M) O_s / L,
//                     LSE = ln 2 * (M + log2 L).
// Pass 2 is the online softmax once more: a split is a tile whose running max is LSE2_s and whose running sum is 1
// (O_s is already divided by l_s), and merging tiles by their maxima is what the rescale alpha did in phase 2.
// Causal masks are aligned bottom-right (row i sees keys j <= i + S_k - S_q, extensions.h), as a decode step needs.
// CUDA twin: phase6_extensions/splitkv/splitkv_cuda.cu
// Run:       build/bin/phase6_extensions --impl cpu --B 1 --H 8 --Sq 1 --Sk 32768 --D 128
#include "extensions.h"

#include <math.h>
#include <stdlib.h>

#include "fa_math.h"
#include "fa_tensor.h"

// Pass 1 for one (head, split): what one CUDA thread block does.
static void split_program(const fa_shape *shape, int64_t key_offset, int64_t bh, int64_t split, const float *q,
                          const float *k, const float *v, float *o_part, float *lse_part, float *acc) {
    const int64_t S_q = shape->Sq, S_k = shape->Sk, D = shape->D, n_splits = splitkv_num_splits(S_k);
    const float qk_scale = shape->scale * LOG2E;
    const int64_t k_first = split * SPLITKV_KEYS_PER_SPLIT;
    const int64_t k_end = k_first + SPLITKV_KEYS_PER_SPLIT < S_k ? k_first + SPLITKV_KEYS_PER_SPLIT : S_k;
    k += bh * S_k * D;
    v += bh * S_k * D;
    for (int64_t r = 0; r < S_q; r++) {
        const float *q_r = q + (bh * S_q + r) * D;
        const int64_t part = (bh * n_splits + split) * S_q + r;   // this row's partial in o_part and lse_part
        // The last key row r sees (causal: its bottom-right diagonal).
        const int64_t last_key = shape->causal && r + key_offset < k_end - 1 ? r + key_offset : k_end - 1;
        float m_i = -INFINITY, l_i = 0.0f;
        for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
        for (int64_t j = k_first; j <= last_key; j++) {
            float dot = 0.0f;
            for (int64_t d = 0; d < D; d++) dot += q_r[d] * k[j * D + d];
            const float s = qk_scale * dot;   // base 2
            // The online softmax, one key at a time (the GPU does the same per lane).
            const float m_new = s > m_i ? s : m_i;
            const float alpha = exp2f(m_i - m_new), p = exp2f(s - m_new);
            l_i = l_i * alpha + p;
            for (int64_t d = 0; d < D; d++) acc[d] = acc[d] * alpha + p * v[j * D + d];
            m_i = m_new;
        }
        // The split's partial: normalised output and log-sum-exp in base 2 (-inf: the row sees no key here).
        const float inv_l = l_i > 0.0f ? 1.0f / l_i : 0.0f;
        for (int64_t d = 0; d < D; d++) o_part[part * D + d] = acc[d] * inv_l;
        lse_part[part] = l_i > 0.0f ? m_i + log2f(l_i) : -INFINITY;
    }
}

// Pass 2 for one row: merges the n_splits partials by their LSEs.
static void combine_row(const fa_shape *shape, int64_t bh, int64_t r, const float *o_part, const float *lse_part,
                        float *o, float *lse) {
    const int64_t S_q = shape->Sq, D = shape->D, n_splits = splitkv_num_splits(shape->Sk);
    float *o_r = o + (bh * S_q + r) * D;
    float m = -INFINITY;
    for (int64_t s = 0; s < n_splits; s++) m = fmaxf(m, lse_part[(bh * n_splits + s) * S_q + r]);
    for (int64_t d = 0; d < D; d++) o_r[d] = 0.0f;
    if (m == -INFINITY) {   // no split saw a key: the row sees none (extensions.h)
        lse[bh * S_q + r] = EMPTY_ROW_LSE;
        return;
    }
    float l = 0.0f;
    for (int64_t s = 0; s < n_splits; s++) {
        const int64_t part = (bh * n_splits + s) * S_q + r;
        const float weight = exp2f(lse_part[part] - m);   // alpha of phase 2, for a tile whose sum is 1
        l += weight;
        for (int64_t d = 0; d < D; d++) o_r[d] += weight * o_part[part * D + d];
    }
    for (int64_t d = 0; d < D; d++) o_r[d] /= l;
    float residual;
    lse[bh * S_q + r] = lse_from_base2(m, l, &residual);
}

void flash_decode_splitkv_cpu(const fa_shape *shape, int bottom_right, const float *q, const float *k, const float *v,
                              float *o, float *lse, float *partials) {
    const int64_t BH = shape->B * shape->H, n_splits = splitkv_num_splits(shape->Sk);
    const int64_t key_offset = ext_key_offset(bottom_right, shape->Sq, shape->Sk);
    float *o_part = partials, *lse_part = partials + BH * n_splits * shape->Sq * shape->D;
#pragma omp parallel
    {
        float *acc = malloc((size_t)shape->D * sizeof(float));
        if (!acc) fa_die("out of host memory: a split's accumulator");
        // The two loops are the CUDA grid of pass 1, (blockIdx.y, blockIdx.x) = (bh, split).
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t split = 0; split < n_splits; split++)
                split_program(shape, key_offset, bh, split, q, k, v, o_part, lse_part, acc);
        free(acc);
        // Pass 2: one row each (a warp each on the GPU). The implicit barrier of the loop above separates them.
#pragma omp for collapse(2)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t r = 0; r < shape->Sq; r++) combine_row(shape, bh, r, o_part, lse_part, o, lse);
    }
}
