// splitkv_cuda.cu - phase 6, on the GPU: split-KV decoding, two kernels (splitkv_cpu.c explains the algorithm).
//
//   pass 1, splitkv_partial_kernel: grid (splits, heads), SPLIT_WARPS warps a block. The keys of one split are
//     dealt out to the warps; inside a warp, KEYS_PER_WARP = 32 / (D / 4) keys at a time, one float4 of the key per
//     lane (D = 128: a whole warp reads one 512-byte row of K, then of V: coalesced). Each lane keeps its own online
//     softmax for its key slot and its 4 dims of acc; the slots of a warp, then the warps of a block, are merged by
//     their running maxima (the rescale alpha of phase 2) into the split's partial: O, m, l and the max key.
//   pass 2, splitkv_combine_kernel: one warp per (head, query row) merges the splits' partials by their maxima; LSE
//     comes from the score of the max key of the split with the largest m, in double (fa_math.h, score_in_double).
// Decoding is bound by reading K and V once: the kernels are judged by the bandwidth they reach, not FLOP/s.
// CPU twin:  phase6_extensions/splitkv/splitkv_cpu.c
// Run:       build/bin/phase6_extensions --impl cuda --B 4 --H 32 --Sq 1 --Sk 131072 --D 128 --check-heads 2
#include "fa_cuda_check.h"
#include "fa_warp.cuh"
#include "extensions.h"

#include <math.h>
#include <stdint.h>

#include "fa_math.h"
#define SPLIT_WARPS 4      // warps of a pass-1 block
#define KEY_UNROLL 4       // keys a lane loads before it uses the first: loads in flight hide memory latency
#define COMBINE_WARPS 4    // rows per pass-2 block

// The online softmax state of one query row, as a lane holds it: running max m (base 2), running sum l, the lane's
// 4 dims of acc, and the key that gave m (fa_math.h, score_in_double). merge() folds another state into this one:
// the tile merge of phase 2, in both directions.
struct row_state {
    float m, l;
    float4 acc;
    int64_t max_key;
    __device__ void merge(float m_b, float l_b, float4 acc_b, int64_t max_key_b) {
        if (m_b > m) max_key = max_key_b;
        const float m_new = fmaxf(m, m_b);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;   // both empty: keep 0 * anything = 0
        const float a = exp2f(m - m_use), b = exp2f(m_b - m_use);
        l = l * a + l_b * b;
        acc = make_float4(acc.x * a + acc_b.x * b, acc.y * a + acc_b.y * b, acc.z * a + acc_b.z * b,
                          acc.w * a + acc_b.w * b);
        m = m_new;
    }
};

// grid: (splits, heads of this launch), block: SPLIT_WARPS * 32 threads. ROWS >= S_q query rows are kept in
// registers (a compile-time count, so that the arrays stay in registers; rows r >= S_q are skipped).
// q, partials: see extensions.h; q, k, v contiguous. Shared memory: every warp's merged state, for the block merge.
template <int D, int ROWS>
__global__ void __launch_bounds__(SPLIT_WARPS * 32)
splitkv_partial_kernel(const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
                       const splitkv_partials p, int64_t S_q, int64_t S_k, int64_t bh_first, float qk_scale,
                       int causal, int64_t key_offset) {
    constexpr int LANES_PER_KEY = D / 4, KEYS_PER_WARP = 32 / LANES_PER_KEY;
    __shared__ float4 warp_acc[SPLIT_WARPS][ROWS][LANES_PER_KEY];
    __shared__ float warp_m[SPLIT_WARPS][ROWS], warp_l[SPLIT_WARPS][ROWS];
    __shared__ int64_t warp_key[SPLIT_WARPS][ROWS];

    const int64_t bh = bh_first + blockIdx.y, split = blockIdx.x, n_splits = gridDim.x;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int chunk = lane % LANES_PER_KEY, slot = lane / LANES_PER_KEY;   // this lane's float4 and key slot
    const int64_t k_first = split * SPLITKV_KEYS_PER_SPLIT;
    const int64_t k_end = k_first + SPLITKV_KEYS_PER_SPLIT < S_k ? k_first + SPLITKV_KEYS_PER_SPLIT : S_k;
    k += bh * S_k * D;
    v += bh * S_k * D;

    float4 q_r[ROWS];
    row_state st[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < S_q) x = reinterpret_cast<const float4 *>(q + (bh * S_q + r) * D)[chunk];
        q_r[r] = make_float4(x.x * qk_scale, x.y * qk_scale, x.z * qk_scale, x.w * qk_scale);
        st[r].m = -INFINITY;
        st[r].l = 0.0f;
        st[r].acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        st[r].max_key = -1;
    }

    // The warp's keys: KEYS_PER_WARP at a time, KEY_UNROLL groups per step. The loop bounds are the same for all
    // lanes of a warp, so every lane reaches every shuffle.
    constexpr int KEYS_PER_STEP = SPLIT_WARPS * KEYS_PER_WARP;
    for (int64_t base = k_first + warp * KEYS_PER_WARP; base < k_end; base += KEY_UNROLL * KEYS_PER_STEP) {
        float4 k4[KEY_UNROLL], v4[KEY_UNROLL];
#pragma unroll
        for (int u = 0; u < KEY_UNROLL; u++) {
            const int64_t key = base + u * KEYS_PER_STEP + slot;
            k4[u] = v4[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (key < k_end) {
                k4[u] = reinterpret_cast<const float4 *>(k + key * D)[chunk];
                v4[u] = reinterpret_cast<const float4 *>(v + key * D)[chunk];
            }
        }
#pragma unroll
        for (int u = 0; u < KEY_UNROLL; u++) {
            const int64_t key = base + u * KEYS_PER_STEP + slot;
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                if (r >= S_q) break;
                float s = q_r[r].x * k4[u].x + q_r[r].y * k4[u].y + q_r[r].z * k4[u].z + q_r[r].w * k4[u].w;
                // The lanes of one key (neighbours in the warp) add up their parts of the dot product.
#pragma unroll
                for (int offset = 1; offset < LANES_PER_KEY; offset *= 2) s += __shfl_xor_sync(FULL_WARP, s, offset);
                const int64_t last_key = causal && r + key_offset < k_end - 1 ? r + key_offset : k_end - 1;
                if (key > last_key) continue;   // past the split, or past the row's diagonal: no weight
                // The online softmax with a tile of one key: p = 2^(s - m_new), the old state rescaled by alpha.
                st[r].merge(s, 1.0f, v4[u], key);
            }
        }
    }

    // Merge the key slots of the warp (lanes chunk, chunk + LANES_PER_KEY, ...) into every lane of the chunk.
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        if (r >= S_q) break;
#pragma unroll
        for (int offset = LANES_PER_KEY; offset < 32; offset *= 2) {
            const float m_b = __shfl_xor_sync(FULL_WARP, st[r].m, offset);
            const float l_b = __shfl_xor_sync(FULL_WARP, st[r].l, offset);
            float4 acc_b;
            acc_b.x = __shfl_xor_sync(FULL_WARP, st[r].acc.x, offset);
            acc_b.y = __shfl_xor_sync(FULL_WARP, st[r].acc.y, offset);
            acc_b.z = __shfl_xor_sync(FULL_WARP, st[r].acc.z, offset);
            acc_b.w = __shfl_xor_sync(FULL_WARP, st[r].acc.w, offset);
            const int64_t key_b = __shfl_xor_sync(FULL_WARP, st[r].max_key, offset);
            st[r].merge(m_b, l_b, acc_b, key_b);
        }
        if (slot == 0) {
            warp_acc[warp][r][chunk] = st[r].acc;
            if (chunk == 0) {
                warp_m[warp][r] = st[r].m;
                warp_l[warp][r] = st[r].l;
                warp_key[warp][r] = st[r].max_key;
            }
        }
    }
    __syncthreads();

    // Merge the warps: warp 0's first LANES_PER_KEY lanes, one float4 of each row each; then the split's partial:
    // the normalised output and the state (m = -inf, l = 0, max key -1 when the row sees no key in this split).
    if (warp != 0 || slot != 0) return;
    for (int r = 0; r < S_q && r < ROWS; r++) {
        row_state all = {warp_m[0][r], warp_l[0][r], warp_acc[0][r][chunk], warp_key[0][r]};
        for (int w = 1; w < SPLIT_WARPS; w++)
            all.merge(warp_m[w][r], warp_l[w][r], warp_acc[w][r][chunk], warp_key[w][r]);
        const float inv_l = all.l > 0.0f ? 1.0f / all.l : 0.0f;
        const int64_t part = (bh * n_splits + split) * S_q + r;
        reinterpret_cast<float4 *>(p.o + part * D)[chunk] =
            make_float4(all.acc.x * inv_l, all.acc.y * inv_l, all.acc.z * inv_l, all.acc.w * inv_l);
        if (chunk == 0) {
            p.m[part] = all.m;
            p.l[part] = all.l;
            p.max_key[part] = all.max_key;
        }
    }
}

// grid: ceil(rows / COMBINE_WARPS), block: COMBINE_WARPS * 32. One warp per (head, query row), rows = B * H * S_q.
// q, k: for the row's largest score in double (lane 0 computes it, once per row).
template <int D>
__global__ void __launch_bounds__(COMBINE_WARPS * 32)
splitkv_combine_kernel(const float *__restrict__ q, const float *__restrict__ k, const splitkv_partials p,
                       float *__restrict__ o, float *__restrict__ lse, int64_t rows, int64_t S_q, int64_t S_k,
                       int64_t n_splits, float scale) {
    const int64_t row = (int64_t)blockIdx.x * COMBINE_WARPS + threadIdx.x / 32;   // = bh * S_q + r
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;   // a whole warp leaves together
    const int64_t bh = row / S_q, r = row % S_q;
    const int64_t first_part = bh * n_splits * S_q + r;   // split s of this row is first_part + s * S_q
    // The row's max, and its key: each lane takes its splits' largest, then the warp's; the lowest lane that holds
    // the warp's max hands its key to all.
    float m_lane = -INFINITY;
    int64_t key_lane = -1;
    for (int64_t s = lane; s < n_splits; s += 32)
        if (p.m[first_part + s * S_q] > m_lane) {
            m_lane = p.m[first_part + s * S_q];
            key_lane = p.max_key[first_part + s * S_q];
        }
    const float m = warp_max(m_lane);
    const int64_t max_key = __shfl_sync(FULL_WARP, key_lane, __ffs(__ballot_sync(FULL_WARP, m_lane == m)) - 1);
    float4 *o_row = reinterpret_cast<float4 *>(o + row * D);
    if (m == -INFINITY) {   // no split saw a key: the row sees none (extensions.h)
        if (lane < D / 4) o_row[lane] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (lane == 0) lse[row] = EMPTY_ROW_LSE;
        return;
    }
    float l = 0.0f;
    for (int64_t s = lane; s < n_splits; s += 32) {
        const int64_t part = first_part + s * S_q;
        l += p.l[part] * exp2f(p.m[part] - m);
    }
    l = warp_sum(l);
    if (lane < D / 4) {
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int64_t s = 0; s < n_splits; s++) {
            const int64_t part = first_part + s * S_q;
            const float weight = p.l[part] * exp2f(p.m[part] - m);   // the split's sum, rescaled by alpha of phase 2
            const float4 x = reinterpret_cast<const float4 *>(p.o + part * D)[lane];
            acc = make_float4(acc.x + weight * x.x, acc.y + weight * x.y, acc.z + weight * x.z, acc.w + weight * x.w);
        }
        const float inv_l = 1.0f / l;
        o_row[lane] = make_float4(acc.x * inv_l, acc.y * inv_l, acc.z * inv_l, acc.w * inv_l);
    }
    if (lane == 0) {
        const double s_max = score_in_double(q + row * D, 1, k + bh * S_k * D, D, 1, max_key, D, scale);
        float residual;
        lse[row] = lse_from_max_score(s_max, m, l, &residual);
    }
}

template <int D, int ROWS>
static void launch(const fa_shape *shape, int64_t key_offset, const float *q, const float *k, const float *v,
                   float *o, float *lse, float *partials) {
    const int64_t BH = shape->B * shape->H, n_splits = splitkv_num_splits(shape->Sk);
    const splitkv_partials p = splitkv_partials_of(partials, shape);
    const float qk_scale = shape->scale * LOG2E;
    for (int64_t bh_first = 0; bh_first < BH; bh_first += MAX_GRID_Y) {   // at most MAX_GRID_Y heads a launch
        splitkv_partial_kernel<D, ROWS><<<dim3((unsigned int)n_splits, heads_in_launch(BH, bh_first)),
                                          SPLIT_WARPS * 32>>>(
            q, k, v, p, shape->Sq, shape->Sk, bh_first, qk_scale, shape->causal, key_offset);
        FA_CUDA_CHECK_LAUNCH();
    }
    const int64_t rows = BH * shape->Sq;
    splitkv_combine_kernel<D><<<(unsigned int)((rows + COMBINE_WARPS - 1) / COMBINE_WARPS), COMBINE_WARPS * 32>>>(
        q, k, p, o, lse, rows, shape->Sq, shape->Sk, n_splits, shape->scale);
    FA_CUDA_CHECK_LAUNCH();
}

// One query row (the decode step itself) gets its own instantiation; 2 to SPLITKV_MAX_SQ rows share one.
template <int D>
static void launch_rows(const fa_shape *shape, int64_t key_offset, const float *q, const float *k, const float *v,
                        float *o, float *lse, float *partials) {
    if (shape->Sq == 1) launch<D, 1>(shape, key_offset, q, k, v, o, lse, partials);
    else launch<D, SPLITKV_MAX_SQ>(shape, key_offset, q, k, v, o, lse, partials);
}

extern "C" void flash_decode_splitkv_cuda(const fa_shape *shape, int bottom_right, const float *q, const float *k,
                                          const float *v, float *o, float *lse, float *partials) {
    if (shape->Sq > SPLITKV_MAX_SQ)
        fa_die("split-KV decoding takes at most %d query rows, not %lld", SPLITKV_MAX_SQ, (long long)shape->Sq);
    const int64_t key_offset = ext_key_offset(bottom_right, shape->Sq, shape->Sk);
    switch (shape->D) {
    case 16: launch_rows<16>(shape, key_offset, q, k, v, o, lse, partials); break;
    case 32: launch_rows<32>(shape, key_offset, q, k, v, o, lse, partials); break;
    case 64: launch_rows<64>(shape, key_offset, q, k, v, o, lse, partials); break;
    case 128: launch_rows<128>(shape, key_offset, q, k, v, o, lse, partials); break;
    default: fa_die("the split-KV kernels support D in {16, 32, 64, 128}, not %lld", (long long)shape->D);
    }
}
