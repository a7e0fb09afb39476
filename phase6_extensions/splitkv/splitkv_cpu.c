// splitkv_cpu.c - phase 6, on the CPU: split-KV decoding (the CPU twin of splitkv_cuda.cu).
//
// A decode step has a few query rows (S_q <= SPLITKV_MAX_SQ) and a long cache of keys. Phase 3's grid gives a head
// one Q tile, so one thread block would walk all S_k keys alone while the GPU idles. Split-KV cuts the keys of each
// head into splits of SPLITKV_KEYS_PER_SPLIT keys, one program per (head, split), and then merges the partials:
//   pass 1 (split):   for the keys of split s, the online softmax of phase 2 as usual; it ends with the partial
//                     output O_s (normalised by its own sum), its running max m_s (base 2), its sum l_s, and the key
//                     that gave m_s;
//   pass 2 (combine): per row, M = max_s m_s, L = sum_s l_s 2^(m_s - M), O = sum_s l_s 2^(m_s - M) O_s / L.
// Pass 2 is the online softmax once more: a split is a tile, and merging tiles by their maxima is what the rescale
// alpha did in phase 2. The row's largest score is the largest of the splits' maxima, so its key is the max key of
// the split whose m_s is M: LSE comes from that one score, computed again in double (fa_math.h, score_in_double),
// as in every forward of the suite.
// Causal masks are aligned bottom-right (row i sees keys j <= i + S_k - S_q, extensions.h), as a decode step needs.
// CUDA twin: phase6_extensions/splitkv/splitkv_cuda.cu
// Run:       build/bin/phase6_extensions --impl cpu --B 1 --H 8 --Sq 1 --Sk 32768 --D 128
#include "extensions.h"

#include <math.h>
#include <stdlib.h>

#include "fa_math.h"
#include "fa_tensor.h"
#include "fa_simd.h"   // FA_SIMD_CLONES: the hot loops in the CPU's widest vectors

// Pass 1 for one (head, split): what one CUDA thread block does.
FA_SIMD_CLONES
static void split_program(const fa_shape *shape, int64_t key_offset, int64_t bh, int64_t split, const float *q,
                          const float *k, const float *v, const splitkv_partials *p, float *acc) {
    const int64_t S_q = shape->Sq, S_k = shape->Sk, D = shape->D, n_splits = splitkv_num_splits(S_k);
    const float qk_scale = shape->scale * LOG2E;
    const int64_t k_first = split * SPLITKV_KEYS_PER_SPLIT;
    const int64_t k_end = k_first + SPLITKV_KEYS_PER_SPLIT < S_k ? k_first + SPLITKV_KEYS_PER_SPLIT : S_k;
    k += bh * S_k * D;
    v += bh * S_k * D;
    for (int64_t r = 0; r < S_q; r++) {
        const float *q_r = q + (bh * S_q + r) * D;
        const int64_t part = (bh * n_splits + split) * S_q + r;   // this row's partial in p
        // The last key row r sees (causal: its bottom-right diagonal).
        const int64_t last_key = shape->causal && r + key_offset < k_end - 1 ? r + key_offset : k_end - 1;
        float m_i = -INFINITY, l_i = 0.0f;
        int64_t max_key = -1;   // the key that gave m_i (fa_math.h, score_in_double)
        for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
        for (int64_t j = k_first; j <= last_key; j++) {
            float dot = 0.0f;
            for (int64_t d = 0; d < D; d++) dot += q_r[d] * k[j * D + d];
            const float s = qk_scale * dot;   // base 2
            // The online softmax, one key at a time (the GPU does the same per lane).
            if (s > m_i) max_key = j;
            const float m_new = s > m_i ? s : m_i;
            const float alpha = exp2f(m_i - m_new), p = exp2f(s - m_new);
            l_i = l_i * alpha + p;
            for (int64_t d = 0; d < D; d++) acc[d] = acc[d] * alpha + p * v[j * D + d];
            m_i = m_new;
        }
        // The split's partial: normalised output and its state (m_i = -inf, l_i = 0: the row sees no key here).
        const float inv_l = l_i > 0.0f ? 1.0f / l_i : 0.0f;
        for (int64_t d = 0; d < D; d++) p->o[part * D + d] = acc[d] * inv_l;
        p->m[part] = m_i;
        p->l[part] = l_i;
        p->max_key[part] = max_key;
    }
}

// Pass 2 for one row: merges the n_splits partials by their maxima, as phase 2 merges tiles.
static void combine_row(const fa_shape *shape, int64_t bh, int64_t r, const float *q, const float *k,
                        const splitkv_partials *p, float *o, float *lse) {
    const int64_t S_q = shape->Sq, S_k = shape->Sk, D = shape->D, n_splits = splitkv_num_splits(S_k);
    const int64_t first_part = bh * n_splits * S_q + r;   // split s of this row is first_part + s * S_q
    float *o_r = o + (bh * S_q + r) * D;
    // The row's max, and its key: the max key of the first split that holds it.
    float m = -INFINITY;
    int64_t max_key = -1;
    for (int64_t s = 0; s < n_splits; s++)
        if (p->m[first_part + s * S_q] > m) {
            m = p->m[first_part + s * S_q];
            max_key = p->max_key[first_part + s * S_q];
        }
    for (int64_t d = 0; d < D; d++) o_r[d] = 0.0f;
    if (m == -INFINITY) {   // no split saw a key: the row sees none (extensions.h)
        lse[bh * S_q + r] = EMPTY_ROW_LSE;
        return;
    }
    float l = 0.0f;
    for (int64_t s = 0; s < n_splits; s++) {
        const int64_t part = first_part + s * S_q;
        const float weight = p->l[part] * exp2f(p->m[part] - m);   // the split's sum, rescaled by alpha of phase 2
        l += weight;
        for (int64_t d = 0; d < D; d++) o_r[d] += weight * p->o[part * D + d];
    }
    for (int64_t d = 0; d < D; d++) o_r[d] /= l;
    const double s_max = score_in_double(q + (bh * S_q + r) * D, 1, k + bh * S_k * D, D, 1, max_key, D, shape->scale);
    float residual;
    lse[bh * S_q + r] = lse_from_max_score(s_max, m, l, &residual);
}

void flash_decode_splitkv_cpu(const fa_shape *shape, int bottom_right, const float *q, const float *k, const float *v,
                              float *o, float *lse, float *partials) {
    const int64_t BH = shape->B * shape->H, n_splits = splitkv_num_splits(shape->Sk);
    const int64_t key_offset = ext_key_offset(bottom_right, shape->Sq, shape->Sk);
    const splitkv_partials p = splitkv_partials_of(partials, shape);
#pragma omp parallel
    {
        float *acc = malloc((size_t)shape->D * sizeof(float));
        if (!acc) fa_die("out of host memory: a split's accumulator");
        // The two loops are the CUDA grid of pass 1, (blockIdx.y, blockIdx.x) = (bh, split).
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t split = 0; split < n_splits; split++)
                split_program(shape, key_offset, bh, split, q, k, v, &p, acc);
        free(acc);
        // Pass 2: one row each (a warp each on the GPU). The implicit barrier of the loop above separates them.
#pragma omp for collapse(2)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t r = 0; r < shape->Sq; r++) combine_row(shape, bh, r, q, k, &p, o, lse);
    }
}
