// 4d_backward_dkdv_cuda.cu - phase 5, step 4d, on the GPU: step 4b's dK/dV pass with room for one more block per SM.
//
// What it adds over step 4b's dK/dV pass (phase5_tensor_cores/4b_backward_dkdv_cuda.cu): at D = 64 step 4b's
//   deterministic kernel runs two blocks of 4 warps on an SM, 8 warps, and its schedulers find no warp ready to issue
//   in two cycles of three: one warp waits for its ldmatrix or its mma, and there is rarely another to take its turn.
//   Two things kept the third block out, and step 4d removes both:
//   - shared memory: the deterministic kernel still reserved the atomic variant's dS^T tile (BLOCK_N x BLOCK_M
//     halves, 8 KiB); it now asks only for what it uses, about 50 KiB, three times that fits in an SM's 228 KiB;
//   - registers: left alone, ptxas gives the kernel 187 a thread (sm_90, nvcc 13), more than the 170 of three blocks;
//     the launch bounds now ask for three blocks (168 registers, which it fits with a 16-byte spill).
//   At D = 128 shared memory holds two blocks in any case; asking for two only changes how ptxas allocates the 255
//   registers it already had (it spills 16 bytes instead of 80). The atomic variant keeps step 4b's bounds. Nothing
//   computed changes: the same bits as step 4b, and step 4's CPU twin.
// CPU twin:  phase5_tensor_cores/4_backward_dkdv_cpu.c (step 4's)
// Diff:      diff -u phase5_tensor_cores/4b_backward_dkdv_cuda.cu phase5_tensor_cores/4d_backward_dkdv_cuda.cu
// Run:       build/bin/phase5_tensor_cores --impl cuda --step 4 --dtype fp16 --B 4 --H 16 --S 4096 --D 64 --dq both
//
// Needs sm_80 or newer. Lane L of a warp is "g = L / 4, t = L % 4" in every fragment drawn here, in
// backward_tiles.cuh and in common/fa_mma.cuh (the PTX helpers).
#include "backward_tiles.cuh"   // the tiles, loads and mma loops both passes share

// The Q tile's LSE (times LOG2E: P in base 2) and Delta into shared memory, ordinary loads and stores (BLOCK_M floats
// each, next to the cp.async of the Q and dO tiles, one per thread); 0 for rows past S_q, which are masked anyway.
template <int BLOCK_M>
__device__ __forceinline__ void load_row_stats(float *lse2_tile, float *delta_tile, const float *lse,
                                               const float *delta, int64_t q_start, int64_t S_q) {
    static_assert(BLOCK_M <= THREADS, "one row per thread");
    const int i = threadIdx.x;
    if (i < BLOCK_M) {
        const int exists = q_start + i < S_q;
        lse2_tile[i] = exists ? lse[q_start + i] * LOG2E : 0.0f;
        delta_tile[i] = exists ? delta[q_start + i] : 0.0f;
    }
}

// The dK/dV pass (keys are the rows): element e of fragment qb is key key_g + 8 (e / 2), query q_start + i with
// i = 8qb + 2t + e % 2. Its LSE (base 2) and Delta are entry i of the tile's row stats in shared memory: elements
// e = 0, 2 and e = 1, 3 share them, so one float2 of each per fragment serves all four.
template <bool MASKED, int Q_BLOCKS>
__device__ __forceinline__ void p_and_ds_by_keys(float st[Q_BLOCKS][4], float dpt[Q_BLOCKS][4],
                                                 const float *lse2_tile, const float *delta_tile, float qk_scale,
                                                 int64_t key_g, int64_t q_start, int64_t S_q, int64_t S_k, int stage) {
    const int t = threadIdx.x % WARP_SIZE % 4;
#pragma unroll
    for (int qb = 0; qb < Q_BLOCKS; qb++) {
        const float2 lse2 = *reinterpret_cast<const float2 *>(lse2_tile + qb * MMA_N + 2 * t);
        const float2 delta = *reinterpret_cast<const float2 *>(delta_tile + qb * MMA_N + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int64_t key = key_g + 8 * (e / 2), row = q_start + qb * MMA_N + 2 * t + e % 2;
            const bool visible = !MASKED || is_visible(row, key, S_q, S_k, stage);
            const float p = visible ? exp2_ftz(fmaf(st[qb][e], qk_scale, -(e % 2 ? lse2.y : lse2.x))) : 0.0f;
            st[qb][e] = p;
            dpt[qb][e] = p * (dpt[qb][e] - (e % 2 ? delta.y : delta.x));
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// dK and dV: one block per K/V tile (and, with ATOMIC_DQ, each Q tile's share of dQ). ATOMIC_DQ is a template
// parameter, not a flag read at run time: the deterministic variant's kernel then carries none of the atomic path's
// code, and none of its registers.
// grid: (number of K/V tiles, heads of this launch), block: 4 warps; warp w owns keys k_start + 16w .. + 15.
// Shared memory: K, V tiles [BLOCK_N][D], two buffers of the Q and dO tiles [BLOCK_M][D], with ATOMIC_DQ dS^T
// [BLOCK_N][BLOCK_M] (T, all swizzled), and two buffers of the Q tile's LSE in base 2 and its Delta [BLOCK_M]
// (float32). The deterministic kernel asks for 3 blocks per SM at D = 64 and 2 at D = 128 (what 4d adds).
template <typename T, int D, int BLOCK_M, int BLOCK_N, bool ATOMIC_DQ>
__global__ void __launch_bounds__(THREADS, ATOMIC_DQ ? 1 : D == 64 ? 3 : 2)
backward_occupancy_dkdv_kernel(const T *__restrict__ q, fa_strides q_strides, const T *__restrict__ k,
                     fa_strides k_strides,
                     const T *__restrict__ v, fa_strides v_strides, const T *__restrict__ dout, fa_strides do_strides,
                     const float *__restrict__ lse, const float *__restrict__ delta, float *__restrict__ dq,
                     fa_strides dq_strides, float *__restrict__ dk, fa_strides dk_strides, float *__restrict__ dv,
                     fa_strides dv_strides, int64_t S_q, int64_t S_k, int64_t H, int64_t bh_first, float scale,
                     int causal) {
    static_assert(BLOCK_N == WARPS * WARP_ROWS, "one warp per 16 keys");
    constexpr int D_STEPS = D / MMA_K;              // mma steps along d (S^T, dP^T)
    constexpr int D_BLOCKS = D / MMA_N;             // 8-dim column blocks of dK, dV
    constexpr int Q_BLOCKS = BLOCK_M / MMA_N;       // 8-query column blocks of S^T, dP^T
    constexpr int Q_STEPS = BLOCK_M / MMA_K;        // mma steps along the queries (dV, dK)
    constexpr int K_STEPS = BLOCK_N / MMA_K;        // mma steps along the keys (dQ)
    constexpr int DQ_UNITS = (BLOCK_M / WARP_ROWS) * (D / MMA_K);   // dQ's 16x16 pieces, shared out over the warps
    constexpr int Q_TILE = BLOCK_M * D;            // halves in one Q (or dO) buffer
    extern __shared__ uint4 smem_raw[];
    // The XOR addresses need every tile to start on a multiple of a row's bytes: the launch asks for one row more.
    constexpr int ROW_BYTES = D * (int)sizeof(T);
    uint8_t *smem = align_shared<ROW_BYTES>(smem_raw);
    T *k_tile = reinterpret_cast<T *>(smem);        // [BLOCK_N][D]
    T *v_tile = k_tile + BLOCK_N * D;               // [BLOCK_N][D]
    T *q_tiles = v_tile + BLOCK_N * D;              // [2][BLOCK_M][D]
    T *do_tiles = q_tiles + 2 * Q_TILE;             // [2][BLOCK_M][D]
    T *ds_tile = do_tiles + 2 * Q_TILE;             // [BLOCK_N][BLOCK_M]: dS^T, for the atomic dQ only
    float *lse2_tiles = reinterpret_cast<float *>(ds_tile + (ATOMIC_DQ ? BLOCK_N * BLOCK_M : 0));   // [2][BLOCK_M]
    float *delta_tiles = lse2_tiles + 2 * BLOCK_M;                                // [2][BLOCK_M]

    const int64_t bh = bh_first + blockIdx.y, b = bh / H, h = bh % H;
    q += b * q_strides.b + h * q_strides.h;
    k += b * k_strides.b + h * k_strides.h;
    v += b * v_strides.b + h * v_strides.h;
    dout += b * do_strides.b + h * do_strides.h;
    dq += b * dq_strides.b + h * dq_strides.h;
    dk += b * dk_strides.b + h * dk_strides.h;
    dv += b * dv_strides.b + h * dv_strides.h;
    lse += bh * S_q;
    delta += bh * S_q;
    const float qk_scale = scale * LOG2E;

    const int64_t k_start = (int64_t)blockIdx.x * BLOCK_N;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, g = lane / 4, t = lane % 4;
    const int key0 = warp * WARP_ROWS;   // the warp's first key in the tile
    // This lane's two keys: key_g (C elements 0 and 1 of every fragment) and key_g + 8 (elements 2 and 3).
    const int64_t key_g = k_start + key0 + g;

    // The K and V tiles stay in shared memory for the whole block; the warp reads its A fragments from them at each
    // use (holding them in registers as well would spill at D = 128, beside the dK and dV accumulators).
    load_tile_async<T, D, BLOCK_N>(k_tile, k, k_strides.s, k_start, S_k);
    load_tile_async<T, D, BLOCK_N>(v_tile, v, v_strides.s, k_start, S_k);

    // Causal: query row i sees key j only when j <= i: the Q tiles that end before this K/V tile starts are skipped.
    // From the first tile that sees a key of this one on, every later tile does too (tile_end: where they stop).
    const int64_t n_q_tiles = (S_q + BLOCK_M - 1) / BLOCK_M, first_q_tile = causal ? k_start / BLOCK_M : 0;
    const int64_t tile_end =
        first_q_tile < n_q_tiles &&
                causal_tile_stage(causal, first_q_tile * BLOCK_M, k_start, BLOCK_M, BLOCK_N, S_q, S_k) != TILE_FUTURE
            ? n_q_tiles
            : first_q_tile;
    // The first Q tile goes into buffer 0 with K and V, in one group of copies.
    if (first_q_tile < tile_end) {
        load_tile_async<T, D, BLOCK_M>(q_tiles, q, q_strides.s, first_q_tile * BLOCK_M, S_q);
        load_tile_async<T, D, BLOCK_M>(do_tiles, dout, do_strides.s, first_q_tile * BLOCK_M, S_q);
        load_row_stats<BLOCK_M>(lse2_tiles, delta_tiles, lse, delta, first_q_tile * BLOCK_M, S_q);
    }
    cp_async_commit();

    // What every Q tile shares. A Q tile needs the mask when a key of this tile comes after one of its rows (causal:
    // the tiles before first_full, the diagonal ones, come first), when its last rows do not exist (from
    // n_whole_q_tiles on), or always when this K tile's last keys do not exist.
    const int64_t k_last = (k_start + BLOCK_N < S_k ? k_start + BLOCK_N : S_k) - 1;
    const int64_t n_whole_q_tiles = S_q / BLOCK_M;
    const int64_t first_full = k_start + BLOCK_N > S_k ? tile_end : causal ? (k_last + BLOCK_M - 1) / BLOCK_M : 0;
    // This thread's chunk of the next Q and dO tiles (tile first_q_tile + 1, then one tile on after each copy).
    const T *q_from = copy_source<T, D>(q, q_strides.s, (first_q_tile + 1) * BLOCK_M);
    const T *do_from = copy_source<T, D>(dout, do_strides.s, (first_q_tile + 1) * BLOCK_M);
    // Each lane's ldmatrix addresses (backward_tiles.cuh): K and V as A operands, Q and dO (buffer 0) as B operands
    // read along d and along their rows.
    const uint32_t k_lane = a_rows_lane<D>(k_tile, key0), v_lane = a_rows_lane<D>(v_tile, key0);
    const uint32_t q_along_d = along_d_lane<D>(q_tiles), do_along_d = along_d_lane<D>(do_tiles);
    const uint32_t q_along_rows = along_rows_lane<D>(q_tiles), do_along_rows = along_rows_lane<D>(do_tiles);

    float dk_acc[D_BLOCKS][4], dv_acc[D_BLOCKS][4];   // the warp's 16 keys x D, float32
#pragma unroll
    for (int db = 0; db < D_BLOCKS; db++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk_acc[db][e] = dv_acc[db][e] = 0.0f;

    for (int64_t q_tile_index = first_q_tile, n = 0; q_tile_index < tile_end; q_tile_index++, n++) {
        const int64_t q_start = q_tile_index * BLOCK_M;
        // Q tile n has landed (the only copies in flight), and every warp is done with tile n - 1 (and its dS^T),
        // whose buffers the next copies overwrite: one barrier says both.
        cp_async_wait_all();
        __syncthreads();
        // The pipeline: request Q tile n + 1 now; it arrives while tile n is computed.
        // A whole tile is copied without row tests; only a short last tile takes load_tile_async, which tests them.
        if (q_tile_index + 1 < tile_end) {
            const int next = (int)((n + 1) % 2);
            if (q_tile_index + 1 < n_whole_q_tiles) {
                load_full_tile_async<T, D, BLOCK_M>(q_tiles + next * Q_TILE, q_from, q_strides.s);
                load_full_tile_async<T, D, BLOCK_M>(do_tiles + next * Q_TILE, do_from, do_strides.s);
            } else {
                load_tile_async<T, D, BLOCK_M>(q_tiles + next * Q_TILE, q, q_strides.s, q_start + BLOCK_M, S_q);
                load_tile_async<T, D, BLOCK_M>(do_tiles + next * Q_TILE, dout, do_strides.s, q_start + BLOCK_M, S_q);
            }
            q_from += BLOCK_M * q_strides.s;
            do_from += BLOCK_M * do_strides.s;
            load_row_stats<BLOCK_M>(lse2_tiles + next * BLOCK_M, delta_tiles + next * BLOCK_M, lse, delta,
                                    q_start + BLOCK_M, S_q);
            cp_async_commit();
        }
        const uint32_t buffer = n % 2 * Q_TILE * (int)sizeof(T);   // bytes from buffer 0 to this tile's buffer
        const float *lse2_tile = lse2_tiles + n % 2 * BLOCK_M, *delta_tile = delta_tiles + n % 2 * BLOCK_M;

        // S^T = K Q^T and dP^T = V dO^T: 16 keys x BLOCK_M queries each, st[qb] and dpt[qb] the accumulator
        // fragments of queries 8qb .. 8qb + 7. The B operands are the Q and dO tiles read as they are stored.
        float st[Q_BLOCKS][4], dpt[Q_BLOCKS][4];
#pragma unroll
        for (int qb = 0; qb < Q_BLOCKS; qb++)
#pragma unroll
            for (int e = 0; e < 4; e++) st[qb][e] = dpt[qb][e] = 0.0f;
#pragma unroll
        for (int ds = 0; ds < D_STEPS; ds++) {
            uint32_t a[4];
            load_a_rows_at<T>(a, k_lane, ds);
            mma_along_d_at<D, Q_BLOCKS, T>(st, a, q_along_d + buffer, ds);
            load_a_rows_at<T>(a, v_lane, ds);
            mma_along_d_at<D, Q_BLOCKS, T>(dpt, a, do_along_d + buffer, ds);
        }

        // P^T = exp(scale S^T - LSE) from the forward's log-sum-exp, in float32, and dS^T = P^T (dP^T - Delta); the
        // mask only on the tiles that need it (one branch per tile, the same for the whole block).
        if (q_tile_index < first_full || q_tile_index >= n_whole_q_tiles) {
            const int stage = causal_tile_stage(causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
            p_and_ds_by_keys<true, Q_BLOCKS>(st, dpt, lse2_tile, delta_tile, qk_scale, key_g, q_start, S_q, S_k, stage);
        } else {
            p_and_ds_by_keys<false, Q_BLOCKS>(st, dpt, lse2_tile, delta_tile, qk_scale, key_g, q_start, S_q, S_k,
                                              TILE_FULL);
        }

        // dV += P^T dO and dK += dS^T Q: the A operands are P^T and dS^T rounded to T in registers (keys 16 of the
        // warp x queries 16qs .. 16qs + 15: fragments 2qs and 2qs + 1); B is dO or Q read with ldmatrix.trans.
#pragma unroll
        for (int qs = 0; qs < Q_STEPS; qs++) {
            const uint32_t p_frag[4] = {pack_pair(st[2 * qs][0], st[2 * qs][1], T()),
                                        pack_pair(st[2 * qs][2], st[2 * qs][3], T()),
                                        pack_pair(st[2 * qs + 1][0], st[2 * qs + 1][1], T()),
                                        pack_pair(st[2 * qs + 1][2], st[2 * qs + 1][3], T())};
            const uint32_t ds_frag[4] = {pack_pair(dpt[2 * qs][0], dpt[2 * qs][1], T()),
                                         pack_pair(dpt[2 * qs][2], dpt[2 * qs][3], T()),
                                         pack_pair(dpt[2 * qs + 1][0], dpt[2 * qs + 1][1], T()),
                                         pack_pair(dpt[2 * qs + 1][2], dpt[2 * qs + 1][3], T())};
            mma_along_rows_at<D, T>(dv_acc, p_frag, do_along_rows + buffer, qs);
            mma_along_rows_at<D, T>(dk_acc, ds_frag, q_along_rows + buffer, qs);
            if (ATOMIC_DQ) {
                // dS^T, rounded as dK used it, to shared memory: register r of ds_frag is rows g (r even) or g + 8
                // (r odd) of the warp's keys, queries 16qs + 2t, +1 (r < 2) or 16qs + 8 + 2t, +1 (r >= 2).
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int key = key0 + g + 8 * (r % 2), i = qs * MMA_K + 8 * (r / 2) + 2 * t;
                    *reinterpret_cast<uint32_t *>(ds_tile + swizzle<BLOCK_M>(key, i / CHUNK) + i % CHUNK) = ds_frag[r];
                }
            }
        }

        if (ATOMIC_DQ) {
            __syncthreads();   // dS^T of all four warps is in shared memory
            // dQ += scale dS K for the Q tile, in 16 x 16 pieces (16 queries, 16 dims) shared out over the warps.
            // A = dS, queries 16mb.. x keys 16ks..: ldmatrix.trans of dS^T [key][query]; lanes 8i .. 8i + 7 point at
            // keys 16ks + 8 (i / 2) + 0..7, queries 16mb + 8 (i % 2): matrix i is then a[i] as drawn above.
            // B = K rows 16ks .. 16ks + 15, read with ldmatrix.trans (mma_along_rows, two 8-dim blocks).
            for (int unit = warp; unit < DQ_UNITS; unit += WARPS) {
                const int mb = unit / (D / MMA_K), dpair = unit % (D / MMA_K);
                float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
                for (int ks = 0; ks < K_STEPS; ks++) {
                    uint32_t a[4], bk[4];
                    ldmatrix_x4_trans(a, ds_tile + swizzle<BLOCK_M>(ks * MMA_K + lane / 16 * 8 + lane % 8,
                                                                    mb * 2 + lane / 8 % 2));
                    ldmatrix_x4_trans(bk, k_tile + swizzle<D>(ks * MMA_K + lane % 8 + lane / 8 % 2 * 8,
                                                              dpair * 2 + lane / 16));
                    mma_m16n8k16(acc[0], a, bk[0], bk[1], T());
                    mma_m16n8k16(acc[1], a, bk[2], bk[3], T());
                }
                // Other blocks add into the same rows of dQ from their K/V tiles at the same time: atomic adds,
                // race-free but in an order that changes from run to run (and with it the last bits of dQ).
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int64_t row = q_start + mb * WARP_ROWS + g + 8 * (e / 2);
                        if (row < S_q)
                            atomicAdd(dq + row * dq_strides.s + dpair * MMA_K + j * MMA_N + 2 * t + e % 2,
                                      scale * acc[j][e]);
                    }
            }
        }
    }

    cp_async_wait_all();   // a block that saw no Q tile still has its K and V copies to wait for

    // Each dK_j and dV_j is written once, by the one block that owns its K/V tile; dK takes the scale here.
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t key = key_g + 8 * r;
        if (key >= S_k) continue;
#pragma unroll
        for (int db = 0; db < D_BLOCKS; db++) {
            *reinterpret_cast<float2 *>(dk + key * dk_strides.s + db * MMA_N + 2 * t) =
                make_float2(scale * dk_acc[db][2 * r], scale * dk_acc[db][2 * r + 1]);
            *reinterpret_cast<float2 *>(dv + key * dv_strides.s + db * MMA_N + 2 * t) =
                make_float2(dv_acc[db][2 * r], dv_acc[db][2 * r + 1]);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
template <typename T, int D, int BLOCK_M, int BLOCK_N>
static void launch(const fa_shape *shape, int atomic_dq, const tc_backward_tensors *t) {
    const int64_t BH = shape->B * shape->H, S_q = shape->Sq, S_k = shape->Sk;
    const T *q = static_cast<const T *>(t->q), *k = static_cast<const T *>(t->k), *v = static_cast<const T *>(t->v);
    const T *dout = static_cast<const T *>(t->dout);
    auto dkdv = atomic_dq ? backward_occupancy_dkdv_kernel<T, D, BLOCK_M, BLOCK_N, true>
                          : backward_occupancy_dkdv_kernel<T, D, BLOCK_M, BLOCK_N, false>;
    // It passes the 48 KiB a kernel gets without asking at D = 128, so it asks for what it uses (+ one row: the
    // alignment of the tiles); the deterministic kernel has no dS^T tile.
    const int unused_ds_bytes = atomic_dq ? 0 : BLOCK_N * BLOCK_M * (int)sizeof(T);
    const int dkdv_smem =
        (int)flash_backward_tc_cuda_smem_bytes(D, BLOCK_M, BLOCK_N) + D * (int)sizeof(T) - unused_ds_bytes;
    FA_CUDA_CHECK(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, dkdv_smem));
    const unsigned int kv_tiles = (unsigned int)((S_k + BLOCK_N - 1) / BLOCK_N);
    for (int64_t bh_first = 0; bh_first < BH; bh_first += MAX_GRID_Y) {
        const unsigned int heads = heads_in_launch(BH, bh_first);   // fa_contract.h: the grid limit
        dkdv<<<dim3(kv_tiles, heads), THREADS, dkdv_smem>>>(
            q, t->q_strides, k, t->k_strides, v, t->v_strides, dout, t->do_strides, t->lse, t->delta, t->dq,
            t->dq_strides, t->dk, t->dk_strides, t->dv, t->dv_strides, S_q, S_k, shape->H, bh_first, shape->scale,
            shape->causal);
        FA_CUDA_CHECK_LAUNCH();
    }
}

template <typename T>
static void launch_head_dim(const fa_shape *shape, int atomic_dq, const tc_backward_tensors *t) {
    switch (shape->D) {
    case 64: launch<T, 64, TC_BACKWARD_CUDA_BLOCK_M, TC_BACKWARD_CUDA_BLOCK_N>(shape, atomic_dq, t); break;
    case 128: launch<T, 128, TC_BACKWARD_CUDA_BLOCK_M, TC_BACKWARD_CUDA_BLOCK_N>(shape, atomic_dq, t); break;
    default: fa_die("the tensor-core backward supports D in {64, 128}, not %lld", (long long)shape->D);
    }
}

extern "C" void backward_occupancy_dkdv_cuda(const fa_shape *shape, int dtype, int atomic_dq,
                                             const tc_backward_tensors *t) {
    if (dtype == FA_DTYPE_FP16)
        launch_head_dim<__half>(shape, atomic_dq, t);
    else
        launch_head_dim<__nv_bfloat16>(shape, atomic_dq, t);
}
