// max_key.cuh - phase 7: the log-sum-exp at large logits, the device helpers every forward step shares.
//
// LSE = s_max + log(sum_j exp(s_j - s_max)), and at logits of a few hundred the first term is nearly all of it, so
// the stored LSE is only as good as s_max. The kernel's running max m_i is a float32 sum of D products (wgmma adds
// them in its own order), a few units in float32's last place at that size. So each row remembers which key gave
// its max (the running max moves rarely: only then is the key looked for), and at the end that one score is
// computed again in double from the half inputs (every product of two halves is exact in double), and the LSE is
// built from it (common/fa_math.h, lse_from_max_score), as phase 3 step 3 does.
//
// In wgmma's accumulator layout (wgmma.cuh) a row is spread over the 4 lanes of a quad (same g, t = 0..3): lane t
// holds keys 8kb + 2t and 8kb + 2t + 1 of every 8-key block kb. Every lane looks among its own scores for the tile's
// max (m_tile, already the same in all four), and two shuffles take the smallest key that has it: all four lanes
// agree, whichever of them holds it, and a tie goes to the first key.
#ifndef MAX_KEY_CUH
#define MAX_KEY_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <stdint.h>

#include "fa_math.h"     // lse_from_max_score
#include "fa_mma.cuh"    // MMA_N, quad_score_in_double
#include "fa_warp.cuh"   // FULL_WARP

// The first key of this tile whose score in row half r (0: row g, 1: row g + 8) equals m_tile; INT_MAX if none.
// Every lane of the warp must call it (shuffles): call it under a warp-uniform condition.
template <int KEY_BLOCKS>
__device__ __forceinline__ int tile_max_key(const float s[KEY_BLOCKS][4], int r, float m_tile, int64_t k_start,
                                            int t) {
    int key = INT_MAX;
#pragma unroll
    for (int kb = KEY_BLOCKS - 1; kb >= 0; kb--)   // backwards, so that the first key that has it is kept
#pragma unroll
        for (int e = 1; e >= 0; e--)
            if (s[kb][2 * r + e] == m_tile) key = (int)k_start + kb * MMA_N + 2 * t + e;
    key = min(key, __shfl_xor_sync(FULL_WARP, key, 1));
    key = min(key, __shfl_xor_sync(FULL_WARP, key, 2));
    return key;
}

// After the quad has reduced row half r's m_tile and before m_i takes it: where the max moved, max_key takes the
// key that holds it. The look-up runs only when some row of the warp moved (rare after the first tiles); the test is
// the same in every lane of the warp, as the shuffles need.
template <int KEY_BLOCKS>
__device__ __forceinline__ void update_max_key(int &max_key, const float s[KEY_BLOCKS][4], int r, float m_tile,
                                               float m_i, int64_t k_start, int t) {
    if (__any_sync(FULL_WARP, m_tile > m_i)) {
        const int key = tile_max_key<KEY_BLOCKS>(s, r, m_tile, k_start, t);
        if (m_tile > m_i) max_key = key;
    }
}

// The row's LSE (natural log) from its max key's score in double and the kernel's m_i (raw score) and l_i (the sum
// of 2^(s_j qk_scale - m_i qk_scale)). The four lanes of the row's quad compute the score together
// (common/fa_mma.cuh, quad_score_in_double), so every lane of the warp calls it, and each gets the LSE; key < 0
// (the row saw no key, or is past S_q) loads nothing, and lse_from_max_score falls back on the kernel's own max.
template <typename T, int D>
__device__ __forceinline__ float row_lse(const T *q_row, const T *k_head, int64_t k_stride_s, int key, float scale,
                                         float qk_scale, float m_i, float l_i, int t) {
    const double s_max = quad_score_in_double<T, D>(q_row, k_head, k_stride_s, key == INT_MAX ? -1 : key, scale, t);
    float residual;   // what a float32 LSE does not hold; the phase 7 forward does not store it
    return lse_from_max_score(s_max, m_i * qk_scale, l_i, &residual);
}

#endif
