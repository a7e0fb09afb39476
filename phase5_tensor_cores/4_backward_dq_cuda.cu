// 4_backward_dq_cuda.cu - phase 5, step 4, on the GPU: the deterministic dQ pass of the tensor-core backward.
//
// What it adds over phase 4's dQ pass (phase4_backward/backward_dq_cuda.cu): every product on mma.m16n8k16, in the
//   fragments of step 2, with the pipeline of step 3 (K and V tiles double-buffered with cp.async). The pass works in
//   the forward's orientation (queries are the rows, 16 per warp): it recomputes S = Q K^T and dP = dO V^T, forms
//   dS = P (dP - Delta), and dS comes out of its mma as the A operand of dQ += dS K directly, no trip through shared
//   memory. Each dQ_i is summed by one warp, over the K tiles in order: the same bits on every run.
//   4_backward_cuda.cu draws the five products and their operands; backward_tiles.cuh holds what the two passes share.
// CPU twin:  phase5_tensor_cores/4_backward_dq_cpu.c
// Diff:      diff -u phase4_backward/backward_dq_cuda.cu phase5_tensor_cores/4_backward_dq_cuda.cu
// Run:       build/bin/phase5_tensor_cores --impl cuda --step 4 --dtype fp16 --B 4 --H 16 --S 4096 --D 64
//
// Needs sm_80 or newer. Lane L of a warp is "g = L / 4, t = L % 4" in every fragment drawn here, in
// backward_tiles.cuh and in common/fa_mma.cuh (the PTX helpers).
#include "backward_tiles.cuh"   // the tiles, loads and mma loops both passes share

// The dQ pass (queries are the rows): element e of fragment kb is query row_g + 8 (e / 2), key k_start + 8kb + 2t +
// e % 2; the lane's two rows have their LSE (base 2) and Delta in registers.
template <bool MASKED, int KEY_BLOCKS>
__device__ __forceinline__ void p_and_ds_by_queries(float s[KEY_BLOCKS][4], float dp[KEY_BLOCKS][4],
                                                    const float lse2[2], const float delta[2], float qk_scale,
                                                    int64_t row_g, int64_t k_start, int64_t S_q, int64_t S_k,
                                                    int stage) {
    const int t = threadIdx.x % WARP_SIZE % 4;
#pragma unroll
    for (int kb = 0; kb < KEY_BLOCKS; kb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int64_t row = row_g + 8 * (e / 2), key = k_start + kb * MMA_N + 2 * t + e % 2;
            const bool visible = !MASKED || is_visible(row, key, S_q, S_k, stage);
            const float p = visible ? exp2f(fmaf(s[kb][e], qk_scale, -lse2[e / 2])) : 0.0f;
            dp[kb][e] = p * (dp[kb][e] - delta[e / 2]);
        }
}

// ---------------------------------------------------------------------------------------------------------------
// dQ, deterministic: one block per Q tile, the forward's orientation. grid: (number of Q tiles, heads of this
// launch), block: 4 warps; warp w owns queries q_start + 16w .. + 15. Shared memory: Q, dO tiles [BLOCK_M][D],
// two buffers of the K and V tiles [BLOCK_N][D] (T, swizzled). Each dQ_i is summed by one warp, over the K tiles in
// order: no atomics.
//
// At D = 64 the kernel's 48 KiB of shared memory leave room for 4 blocks on an SM; asking for 4 in the launch bounds
// caps its registers at 128 (65536 / (4 x 128)), which it fits without spilling on sm_90 (nvcc 13; sm_80 spills 4
// bytes). At D = 128 its 96 KiB allow 2 blocks whatever the registers.
template <typename T, int D, int BLOCK_M, int BLOCK_N>
__global__ void __launch_bounds__(THREADS, D == 64 ? 4 : 1)
backward_dq_kernel(const T *__restrict__ q, fa_strides q_strides, const T *__restrict__ k, fa_strides k_strides,
                   const T *__restrict__ v, fa_strides v_strides, const T *__restrict__ dout, fa_strides do_strides,
                   const float *__restrict__ lse, const float *__restrict__ delta, float *__restrict__ dq,
                   fa_strides dq_strides, int64_t S_q, int64_t S_k, int64_t H, int64_t bh_first, float scale,
                   int causal) {
    static_assert(BLOCK_M == WARPS * WARP_ROWS, "one warp per 16 queries");
    constexpr int D_STEPS = D / MMA_K;
    constexpr int D_BLOCKS = D / MMA_N;
    constexpr int KEY_BLOCKS = BLOCK_N / MMA_N;   // 8-key column blocks of S, dP
    constexpr int KEY_STEPS = BLOCK_N / MMA_K;    // mma steps along the keys (dQ)
    constexpr int KV_TILE = BLOCK_N * D;          // halves in one K (or V) buffer
    extern __shared__ uint4 smem[];
    T *q_tile = reinterpret_cast<T *>(smem);      // [BLOCK_M][D]
    T *do_tile = q_tile + BLOCK_M * D;            // [BLOCK_M][D]
    T *k_tiles = do_tile + BLOCK_M * D;           // [2][BLOCK_N][D]
    T *v_tiles = k_tiles + 2 * KV_TILE;           // [2][BLOCK_N][D]

    const int64_t bh = bh_first + blockIdx.y, b = bh / H, h = bh % H;
    q += b * q_strides.b + h * q_strides.h;
    k += b * k_strides.b + h * k_strides.h;
    v += b * v_strides.b + h * v_strides.h;
    dout += b * do_strides.b + h * do_strides.h;
    dq += b * dq_strides.b + h * dq_strides.h;
    lse += bh * S_q;
    delta += bh * S_q;
    const float qk_scale = scale * LOG2E;

    // Causal: the last Q tiles see the most keys, and the first blocks launched get them.
    const int64_t q_start = (int64_t)(gridDim.x - 1 - blockIdx.x) * BLOCK_M;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, g = lane / 4, t = lane % 4;
    const int row0 = warp * WARP_ROWS;
    const int64_t row_g = q_start + row0 + g;   // this lane's rows: row_g (elements 0, 1) and row_g + 8 (2, 3)
    float lse2[2], delta_r[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t row = row_g + 8 * r;
        lse2[r] = row < S_q ? lse[row] * LOG2E : 0.0f;
        delta_r[r] = row < S_q ? delta[row] : 0.0f;
    }

    // Q, dO and K/V tile 0 in one group of copies. Tile 0 always exists and is never in the future (row q_start sees
    // key 0).
    load_tile_async<T, D, BLOCK_M>(q_tile, q, q_strides.s, q_start, S_q);
    load_tile_async<T, D, BLOCK_M>(do_tile, dout, do_strides.s, q_start, S_q);
    load_tile_async<T, D, BLOCK_N>(k_tiles, k, k_strides.s, 0, S_k);
    load_tile_async<T, D, BLOCK_N>(v_tiles, v, v_strides.s, 0, S_k);
    cp_async_commit();

    float dq_acc[D_BLOCKS][4];
#pragma unroll
    for (int db = 0; db < D_BLOCKS; db++) dq_acc[db][0] = dq_acc[db][1] = dq_acc[db][2] = dq_acc[db][3] = 0.0f;

    for (int64_t k_start = 0, n = 0; k_start < S_k; k_start += BLOCK_N, n++) {
        const int stage = causal_tile_stage(causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) break;   // no copy is in flight: tile n was requested only if it is needed
        // K/V tile n has landed, and every warp is done with tile n - 1, whose buffers the next copies overwrite.
        cp_async_wait_all();
        __syncthreads();
        // The pipeline: request tile n + 1 now, when it is needed at all; it arrives while tile n is computed.
        const int64_t k_next = k_start + BLOCK_N;
        if (k_next < S_k && causal_tile_stage(causal, q_start, k_next, BLOCK_M, BLOCK_N, S_q, S_k) != TILE_FUTURE) {
            const int next = (int)((n + 1) % 2);
            load_tile_async<T, D, BLOCK_N>(k_tiles + next * KV_TILE, k, k_strides.s, k_next, S_k);
            load_tile_async<T, D, BLOCK_N>(v_tiles + next * KV_TILE, v, v_strides.s, k_next, S_k);
            cp_async_commit();
        }
        const T *k_tile = k_tiles + n % 2 * KV_TILE, *v_tile = v_tiles + n % 2 * KV_TILE;

        // S = Q K^T and dP = dO V^T, 16 queries x BLOCK_N keys: the A operands are the warp's Q and dO rows, the B
        // operands the K and V tiles read as they are stored.
        float s[KEY_BLOCKS][4], dp[KEY_BLOCKS][4];
#pragma unroll
        for (int kb = 0; kb < KEY_BLOCKS; kb++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[kb][e] = dp[kb][e] = 0.0f;
#pragma unroll
        for (int ds = 0; ds < D_STEPS; ds++) {
            uint32_t a[4];
            load_a_rows<D>(a, q_tile, row0, ds);
            mma_along_d<D, KEY_BLOCKS>(s, a, k_tile, ds);
            load_a_rows<D>(a, do_tile, row0, ds);
            mma_along_d<D, KEY_BLOCKS>(dp, a, v_tile, ds);
        }

        // P and dS, as in the dK/dV pass (dp becomes dS; s is not needed again), the mask only where needed.
        if (tile_needs_mask(stage, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k))
            p_and_ds_by_queries<true, KEY_BLOCKS>(s, dp, lse2, delta_r, qk_scale, row_g, k_start, S_q, S_k, stage);
        else
            p_and_ds_by_queries<false, KEY_BLOCKS>(s, dp, lse2, delta_r, qk_scale, row_g, k_start, S_q, S_k, stage);

        // dQ += dS K: dS, rounded to T in registers, is the A operand (fragments 2ks, 2ks + 1); K by ldmatrix.trans.
#pragma unroll
        for (int ks = 0; ks < KEY_STEPS; ks++) {
            const uint32_t ds_frag[4] = {pack_pair(dp[2 * ks][0], dp[2 * ks][1], T()),
                                         pack_pair(dp[2 * ks][2], dp[2 * ks][3], T()),
                                         pack_pair(dp[2 * ks + 1][0], dp[2 * ks + 1][1], T()),
                                         pack_pair(dp[2 * ks + 1][2], dp[2 * ks + 1][3], T())};
            mma_along_rows<D>(dq_acc, ds_frag, k_tile, ks);
        }
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t row = row_g + 8 * r;
        if (row >= S_q) continue;
#pragma unroll
        for (int db = 0; db < D_BLOCKS; db++)
            *reinterpret_cast<float2 *>(dq + row * dq_strides.s + db * MMA_N + 2 * t) =
                make_float2(scale * dq_acc[db][2 * r], scale * dq_acc[db][2 * r + 1]);
    }
}

// ---------------------------------------------------------------------------------------------------------------
template <typename T, int D, int BLOCK_M, int BLOCK_N>
static void launch(const fa_shape *shape, const tc_backward_tensors *t) {
    const int64_t BH = shape->B * shape->H, S_q = shape->Sq, S_k = shape->Sk;
    const T *q = static_cast<const T *>(t->q), *k = static_cast<const T *>(t->k), *v = static_cast<const T *>(t->v);
    const T *dout = static_cast<const T *>(t->dout);
    auto dq = backward_dq_kernel<T, D, BLOCK_M, BLOCK_N>;
    // It passes the 48 KiB a kernel gets without asking at D = 128, so it asks for what it uses.
    const int dq_smem = (2 * BLOCK_M + 4 * BLOCK_N) * D * (int)sizeof(T);
    FA_CUDA_CHECK(cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, dq_smem));
    const unsigned int q_tiles = (unsigned int)((S_q + BLOCK_M - 1) / BLOCK_M);
    for (int64_t bh_first = 0; bh_first < BH; bh_first += MAX_GRID_Y) {
        const unsigned int heads = heads_in_launch(BH, bh_first);   // fa_contract.h: the grid limit
        dq<<<dim3(q_tiles, heads), THREADS, dq_smem>>>(q, t->q_strides, k, t->k_strides, v, t->v_strides, dout,
                                                       t->do_strides, t->lse, t->delta, t->dq, t->dq_strides, S_q,
                                                       S_k, shape->H, bh_first, shape->scale, shape->causal);
        FA_CUDA_CHECK_LAUNCH();
    }
}

template <typename T>
static void launch_head_dim(const fa_shape *shape, const tc_backward_tensors *t) {
    switch (shape->D) {
    case 64: launch<T, 64, TC_BACKWARD_CUDA_BLOCK_M, TC_BACKWARD_CUDA_BLOCK_N>(shape, t); break;
    case 128: launch<T, 128, TC_BACKWARD_CUDA_BLOCK_M, TC_BACKWARD_CUDA_BLOCK_N>(shape, t); break;
    default: fa_die("the tensor-core backward supports D in {64, 128}, not %lld", (long long)shape->D);
    }
}

extern "C" void backward_tc_dq_cuda(const fa_shape *shape, int dtype, const tc_backward_tensors *t) {
    if (dtype == FA_DTYPE_FP16)
        launch_head_dim<__half>(shape, t);
    else
        launch_head_dim<__nv_bfloat16>(shape, t);
}
