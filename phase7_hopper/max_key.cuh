// max_key.cuh - phase 7: the log-sum-exp at large logits, the device helpers every forward step shares.
//
// LSE = s_max + log(sum_j exp(s_j - s_max)), and at logits of a few hundred the first term is nearly all of it, so
// the stored LSE is only as good as s_max. The kernel's running max m_i is a float32 sum of D products (wgmma adds
// them in its own order), a few units in float32's last place at that size. So the LSE is built from the max key's
// score computed again in double from the half inputs (every product of two halves is exact in double; common/
// fa_math.h, lse_from_max_score), as phase 3 step 3 does. Which key that is, is found in two halves:
//
// - In the loop, where the max moves (m_tile > m_i, the same in the 4 lanes of a quad), each lane copies its own
//   scores of that row and tile to shared memory and notes the tile's first key (update_max_tile): a few stores,
//   no search, no vote, no shuffle, on the path the tensor cores wait for. After the first tiles the max seldom moves.
// - After the loop, each lane looks among the copied scores for the row's final max (the max of the last tile where
//   it moved, copied then), and two shuffles take the smallest key that has it: all four lanes agree, and a tie goes
//   to the first key (max_key_of_row).
//
// In wgmma's accumulator layout (wgmma.cuh) a row is spread over the 4 lanes of a quad (same g, t = 0..3): lane t
// holds keys 8kb + 2t and 8kb + 2t + 1 of every 8-key block kb, in s[kb][2r] and s[kb][2r + 1], two registers next
// to each other. Its copy of one row is KEY_BLOCKS float2s, each such pair as it is: one 8-byte store straight from
// the accumulator's registers. (Packing four scores into a float4 takes fewer stores but first gathers them into
// four consecutive registers, a move per score, and the compiler issues those moves on every tile, not only where
// the max moved.) In shared memory the float2 kb of lane L sits at [warp][r][kb][L], so that the 32 lanes' stores of
// one kb are 256 consecutive bytes (no bank conflict); a block needs one float per score of its BLOCK_M x BLOCK_N
// tile (hopper.h).
#ifndef MAX_KEY_CUH
#define MAX_KEY_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <stdint.h>

#include "fa_math.h"     // lse_from_max_score
#include "fa_mma.cuh"    // MMA_N, quad_score_in_double
#include "fa_warp.cuh"   // FULL_WARP

// Lane `lane` of consumer warp `warp`: where its copy of row half r (0: row g, 1: row g + 8) starts; its float2s are
// WARP_SIZE apart.
template <int KEY_BLOCKS, typename F2>   // F2: float2 or const float2
__device__ __forceinline__ F2 *row_copy(F2 *copies, int warp, int r, int lane) {
    return copies + (warp * 2 + r) * KEY_BLOCKS * WARP_SIZE + lane;
}

// After the quad has reduced row half r's m_tile and before m_i takes it: where the max moved, keep the lane's
// scores of that row (masked, raw) and the tile's first key.
template <int KEY_BLOCKS>
__device__ __forceinline__ void update_max_tile(int &max_tile, float2 *copies, int warp, int lane,
                                                const float s[KEY_BLOCKS][4], int r, float m_tile, float m_i,
                                                int64_t k_start) {
    if (m_tile > m_i) {
        max_tile = (int)k_start;
        float2 *copy = row_copy<KEY_BLOCKS>(copies, warp, r, lane);
#pragma unroll
        for (int kb = 0; kb < KEY_BLOCKS; kb++) copy[kb * WARP_SIZE] = make_float2(s[kb][2 * r], s[kb][2 * r + 1]);
    }
}

// After the loop: the first key of row half r whose score is the row's max m_i, from the copy of the last tile
// where the max moved (max_tile < 0: none, the row saw no key or is past S_q). -1 when there is none. Every lane of
// the warp must call it (shuffles).
template <int KEY_BLOCKS>
__device__ __forceinline__ int max_key_of_row(const float2 *copies, int warp, int lane, int r, int max_tile,
                                              float m_i) {
    const int t = lane % 4;
    int key = INT_MAX;
    if (max_tile >= 0) {
        const float2 *copy = row_copy<KEY_BLOCKS>(copies, warp, r, lane);
#pragma unroll
        for (int kb = KEY_BLOCKS - 1; kb >= 0; kb--) {   // backwards, so that the first key that has it is kept
            const float2 v = copy[kb * WARP_SIZE];
            const int key0 = max_tile + kb * MMA_N + 2 * t;   // v.x; v.y is the next key
            if (v.y == m_i) key = key0 + 1;
            if (v.x == m_i) key = key0;
        }
    }
    key = min(key, __shfl_xor_sync(FULL_WARP, key, 1));
    key = min(key, __shfl_xor_sync(FULL_WARP, key, 2));
    return key == INT_MAX ? -1 : key;
}

// The row's LSE (natural log) from its max key's score in double and the kernel's m_i (raw score) and l_i (the sum
// of 2^(s_j qk_scale - m_i qk_scale)). The four lanes of the row's quad compute the score together
// (common/fa_mma.cuh, quad_score_in_double), so every lane of the warp calls it, and each gets the LSE; key < 0
// (the row saw no key, or is past S_q) loads nothing, and lse_from_max_score falls back on the kernel's own max.
template <typename T, int D>
__device__ __forceinline__ float row_lse(const T *q_row, const T *k_head, int64_t k_stride_s, int key, float scale,
                                         float qk_scale, float m_i, float l_i, int t) {
    const double s_max = quad_score_in_double<T, D>(q_row, k_head, k_stride_s, key, scale, t);
    float residual;   // what a float32 LSE does not hold; the phase 7 forward does not store it
    return lse_from_max_score(s_max, m_i * qk_scale, l_i, &residual);
}

#endif
