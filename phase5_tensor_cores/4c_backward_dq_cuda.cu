// 4c_backward_dq_cuda.cu - phase 5, step 4c, on the GPU: step 4b's dQ pass with the warp's Q and dO rows held in
// registers.
//
// What it adds over step 4b's dQ pass (phase5_tensor_cores/4b_backward_dq_cuda.cu): the block's Q and dO tiles never
//   change, yet step 4b reads the warp's A fragments of both from shared memory again for every K tile (2 D / 16
//   ldmatrix.x4 per tile, each feeding only KEY_BLOCKS mma). Step 4c reads them once, before the loop, and keeps them:
//   D / 2 registers a thread for the two (32 at D = 64, 64 at D = 128). At D = 64 they do not fit beside the rest in
//   the 128 registers that four blocks per SM allow (ptxas spills when asked for four), so the launch asks for three
//   (168 registers); at D = 128 shared memory allows two blocks whatever the registers. Only where the operands come
//   from changes: the same products, in the same order, so the same bits as step 4b, and step 4's CPU twin.
// CPU twin:  phase5_tensor_cores/4_backward_dq_cpu.c (step 4's)
// Diff:      diff -u phase5_tensor_cores/4b_backward_dq_cuda.cu phase5_tensor_cores/4c_backward_dq_cuda.cu
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
            const float p = visible ? exp2_ftz(fmaf(s[kb][e], qk_scale, -lse2[e / 2])) : 0.0f;
            dp[kb][e] = p * (dp[kb][e] - delta[e / 2]);
        }
}

// ---------------------------------------------------------------------------------------------------------------
// dQ, deterministic: one block per Q tile, the forward's orientation. grid: (number of Q tiles, heads of this
// launch), block: 4 warps; warp w owns queries q_start + 16w .. + 15. Shared memory: Q, dO tiles [BLOCK_M][D],
// two buffers of the K and V tiles [BLOCK_N][D] (T, swizzled). Each dQ_i is summed by one warp, over the K tiles in
// order: no atomics.
//
// At D = 64 the kernel's 48 KiB of shared memory would leave room for 4 blocks on an SM, but 4 cap the registers at
// 128 (65536 / (4 x 128)), too few beside the held Q and dO: the launch bounds ask for 3 (168 registers). At D = 128
// its 96 KiB allow 2 blocks whatever the registers.
template <typename T, int D, int BLOCK_M, int BLOCK_N>
__global__ void __launch_bounds__(THREADS, D == 64 ? 3 : 1)
backward_held_dq_kernel(const T *__restrict__ q, fa_strides q_strides, const T *__restrict__ k, fa_strides k_strides,
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
    extern __shared__ uint4 smem_raw[];
    // The XOR addresses need every tile to start on a multiple of a row's bytes: the launch asks for one row more.
    constexpr int ROW_BYTES = D * (int)sizeof(T);
    uint8_t *smem = align_shared<ROW_BYTES>(smem_raw);
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

    // What every K tile shares: the tiles the block visits (causal: not past its last row, phase 3's TILE_FUTURE),
    // and from which one on they need the mask (the first diagonal tile, or a short last K tile); every tile does when
    // the block's last rows do not exist.
    const int64_t q_last = (q_start + BLOCK_M < S_q ? q_start + BLOCK_M : S_q) - 1;
    const int64_t keys_visited = causal && q_last + 1 < S_k ? q_last + 1 : S_k;
    const int n_tiles = (int)((keys_visited + BLOCK_N - 1) / BLOCK_N);
    const int n_whole_tiles = (int)(S_k / BLOCK_N);   // tiles whose BLOCK_N keys all exist
    int first_masked = q_start + BLOCK_M > S_q ? 0 : n_whole_tiles;
    if (causal && (q_start + 1) / BLOCK_N < first_masked) first_masked = (int)((q_start + 1) / BLOCK_N);
    // This thread's chunk of the next K and V tiles (tile 1, then one tile on after each copy).
    const T *k_from = copy_source<T, D>(k, k_strides.s, BLOCK_N), *v_from = copy_source<T, D>(v, v_strides.s, BLOCK_N);
    // Each lane's ldmatrix addresses (backward_tiles.cuh): K and V (buffer 0) as B operands read along d, K along its
    // rows.
    const uint32_t k_along_d = along_d_lane<D>(k_tiles), v_along_d = along_d_lane<D>(v_tiles);
    const uint32_t k_along_rows = along_rows_lane<D>(k_tiles);

    // The warp's Q and dO rows as A fragments, read once: the first group of copies (Q, dO, K/V tile 0) has to land
    // first, and the loop's first wait then finds nothing left to wait for.
    uint32_t q_frags[D_STEPS][4], do_frags[D_STEPS][4];
    cp_async_wait_all();
    __syncthreads();
    const uint32_t q_lane = a_rows_lane<D>(q_tile, row0), do_lane = a_rows_lane<D>(do_tile, row0);
#pragma unroll
    for (int ds = 0; ds < D_STEPS; ds++) {
        load_a_rows_at<T>(q_frags[ds], q_lane, ds);
        load_a_rows_at<T>(do_frags[ds], do_lane, ds);
    }

    for (int n = 0; n < n_tiles; n++) {
        const int64_t k_start = (int64_t)n * BLOCK_N;
        // K/V tile n has landed, and every warp is done with tile n - 1, whose buffers the next copies overwrite.
        cp_async_wait_all();
        __syncthreads();
        // The pipeline: request tile n + 1 now, when it is visited at all; it arrives while tile n is computed. A
        // whole tile is copied without row tests; only a short last tile takes load_tile_async, which tests them.
        if (n + 1 < n_tiles) {
            const int next = (n + 1) % 2;
            if (n + 1 < n_whole_tiles) {
                load_full_tile_async<T, D, BLOCK_N>(k_tiles + next * KV_TILE, k_from, k_strides.s);
                load_full_tile_async<T, D, BLOCK_N>(v_tiles + next * KV_TILE, v_from, v_strides.s);
            } else {
                load_tile_async<T, D, BLOCK_N>(k_tiles + next * KV_TILE, k, k_strides.s, k_start + BLOCK_N, S_k);
                load_tile_async<T, D, BLOCK_N>(v_tiles + next * KV_TILE, v, v_strides.s, k_start + BLOCK_N, S_k);
            }
            cp_async_commit();
            k_from += BLOCK_N * k_strides.s;
            v_from += BLOCK_N * v_strides.s;
        }
        const uint32_t buffer = n % 2 * KV_TILE * (int)sizeof(T);   // bytes from buffer 0 to this tile's buffer

        // S = Q K^T and dP = dO V^T, 16 queries x BLOCK_N keys: the A operands are the warp's Q and dO rows, held in
        // registers, the B operands the K and V tiles read as they are stored.
        float s[KEY_BLOCKS][4], dp[KEY_BLOCKS][4];
#pragma unroll
        for (int kb = 0; kb < KEY_BLOCKS; kb++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[kb][e] = dp[kb][e] = 0.0f;
#pragma unroll
        for (int ds = 0; ds < D_STEPS; ds++) {
            mma_along_d_at<D, KEY_BLOCKS, T>(s, q_frags[ds], k_along_d + buffer, ds);
            mma_along_d_at<D, KEY_BLOCKS, T>(dp, do_frags[ds], v_along_d + buffer, ds);
        }

        // P and dS, as in the dK/dV pass (dp becomes dS; s is not needed again), the mask only where needed.
        if (n >= first_masked) {
            const int stage = causal_tile_stage(causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
            p_and_ds_by_queries<true, KEY_BLOCKS>(s, dp, lse2, delta_r, qk_scale, row_g, k_start, S_q, S_k, stage);
        } else {
            p_and_ds_by_queries<false, KEY_BLOCKS>(s, dp, lse2, delta_r, qk_scale, row_g, k_start, S_q, S_k,
                                                   TILE_FULL);
        }

        // dQ += dS K: dS, rounded to T in registers, is the A operand (fragments 2ks, 2ks + 1); K by ldmatrix.trans.
#pragma unroll
        for (int ks = 0; ks < KEY_STEPS; ks++) {
            const uint32_t ds_frag[4] = {pack_pair(dp[2 * ks][0], dp[2 * ks][1], T()),
                                         pack_pair(dp[2 * ks][2], dp[2 * ks][3], T()),
                                         pack_pair(dp[2 * ks + 1][0], dp[2 * ks + 1][1], T()),
                                         pack_pair(dp[2 * ks + 1][2], dp[2 * ks + 1][3], T())};
            mma_along_rows_at<D, T>(dq_acc, ds_frag, k_along_rows + buffer, ks);
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
    auto dq = backward_held_dq_kernel<T, D, BLOCK_M, BLOCK_N>;
    // It passes the 48 KiB a kernel gets without asking at D = 128, so it asks for what it uses (+ one row: the
    // alignment of the tiles).
    const int dq_smem = (2 * BLOCK_M + 4 * BLOCK_N + 1) * D * (int)sizeof(T);
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

extern "C" void backward_held_dq_cuda(const fa_shape *shape, int dtype, const tc_backward_tensors *t) {
    if (dtype == FA_DTYPE_FP16)
        launch_head_dim<__half>(shape, t);
    else
        launch_head_dim<__nv_bfloat16>(shape, t);
}
