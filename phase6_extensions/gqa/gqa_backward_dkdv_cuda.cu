// gqa_backward_dkdv_cuda.cu - phase 6: the backward pass of GQA / MQA, on the GPU.
//
// What it adds to phase 4 (phase4_backward/backward_dkdv_cuda.cu):
//   H query heads share H_kv K/V heads (group = H / H_kv, phase6_extensions/gqa/gqa_cpu.c). dQ of query head h reads K/V
//   head h / group. dK and dV of K/V head g are sums over the query heads of its group: one program per (K/V head, key
//   tile) walks the Q tiles of each of the group's heads in turn, in a fixed order, so the sums need no atomics and
//   are the same on every run.
// Twin:      phase6_extensions/gqa/gqa_backward_dkdv_cpu.c
// Diff:      diff -u phase4_backward/backward_dkdv_cuda.cu phase6_extensions/gqa/gqa_backward_dkdv_cuda.cu
// Run:       build/bin/phase6_extensions --impl cuda --backward --B 4 --H 32 --H-kv 8 --S 4096 --D 128
#include "backward_ext.h"
#include "fa_row_split.cuh"
#include "fa_cuda_check.h"

// The tiles one thread block keeps in shared memory (dynamic shared memory: with D = 128 they pass the 48 KiB that a
// static __shared__ array may have).
template <int D, int BLOCK_M, int BLOCK_N, bool ATOMIC_DQ>
struct DkdvShared {
    float q[BLOCK_M][D];         // the Q tile, times qk_scale (as the forward held it)
    float dout[BLOCK_M][D];      // the dO tile
    float lse2_hi[BLOCK_M];      // LSE_i * LOG2E = lse2_hi + lse2_lo (lse_to_base2 in fa_math.h)
    float lse2_lo[BLOCK_M];
    float delta[BLOCK_M];        // Delta_i
    // Atomic dQ only: dQ_tile += scale * dS_tile K_tile needs every K_j of the tile and the whole dS tile. The dS row
    // is one float longer than the tile so that the threads of a warp, each reading its own row, hit different banks.
    float k[ATOMIC_DQ ? BLOCK_N : 1][D];
    float ds[ATOMIC_DQ ? BLOCK_M : 1][BLOCK_N + 1];
};

template <int D, int BLOCK_M, int BLOCK_N, bool ATOMIC_DQ>
__global__ void __launch_bounds__(BLOCK_N * BackwardRowSplit<D>::THREADS_PER_ROW,
                                  min_blocks_per_sm(BLOCK_N * BackwardRowSplit<D>::THREADS_PER_ROW))
backward_gqa_dkdv_kernel(backward_tensors t, int64_t H, int64_t bh_first, int64_t S_q, int64_t S_k, float scale,
                         int causal, int64_t group) {
    constexpr int DIMS_PER_THREAD = BackwardRowSplit<D>::DIMS_PER_THREAD;
    constexpr int THREADS_PER_ROW = BackwardRowSplit<D>::THREADS_PER_ROW;
    constexpr int THREADS = BLOCK_N * THREADS_PER_ROW;
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    using Shared = DkdvShared<D, BLOCK_M, BLOCK_N, ATOMIC_DQ>;
    Shared &sh = *reinterpret_cast<Shared *>(shared_bytes);

    const int c = threadIdx.x / THREADS_PER_ROW;      // this thread's key row in the tile
    const int part = threadIdx.x % THREADS_PER_ROW;   // which of the row's dims it holds (RowSplit::dim)
    const float qk_scale = scale * LOG2E;
    const int64_t kv_start = (int64_t)blockIdx.x * BLOCK_N;
    const int64_t keys = S_k - kv_start < BLOCK_N ? S_k - kv_start : BLOCK_N;   // key rows in this tile
    const int64_t j = kv_start + c;
    const bool key_valid = c < keys;   // threads past S_k still run every loop (they take part in the shuffles
                                       // and __syncthreads) with zeros, and write nothing
    const int64_t n_q_tiles = (S_q + BLOCK_M - 1) / BLOCK_M;

    // The grid's second index is the K/V head: (b, g) from bh (GQA: B * H_kv of them), and where it starts.
    const int64_t bh = bh_first + blockIdx.y, H_kv = H / group, b = bh / H_kv, g = bh % H_kv;
    const float *k_head = t.k + b * t.k_strides.b + g * t.k_strides.h;
    const float *v_head = t.v + b * t.v_strides.b + g * t.v_strides.h;

    // K_j and V_j in registers, and the accumulators dK_j, dV_j.
    float k_j[DIMS_PER_THREAD], v_j[DIMS_PER_THREAD], dk_j[DIMS_PER_THREAD], dv_j[DIMS_PER_THREAD];
#pragma unroll
    for (int u = 0; u < DIMS_PER_THREAD; u++) {
        const int d = BackwardRowSplit<D>::dim(part, u);
        k_j[u] = key_valid ? k_head[j * t.k_strides.s + d * t.k_strides.d] : 0.0f;
        v_j[u] = key_valid ? v_head[j * t.v_strides.s + d * t.v_strides.d] : 0.0f;
        dk_j[u] = dv_j[u] = 0.0f;
    }
    if (ATOMIC_DQ) {   // the K tile in shared memory, coalesced (zeros past S_k)
        for (int e = threadIdx.x; e < BLOCK_N * D; e += THREADS) {
            const int r = e / D, d = e % D;
            sh.k[r][d] = r < keys ? k_head[(kv_start + r) * t.k_strides.s + d * t.k_strides.d] : 0.0f;
        }
    }

    // Causal: Q tiles that end before this K/V tile starts see none of its keys and are skipped.
    const int64_t first_q_tile = causal ? kv_start / BLOCK_M : 0, q_tiles = n_q_tiles - first_q_tile;
    // GQA: dK_j and dV_j sum over every query head h of the group; the loop walks the Q tiles of each head in turn,
    // always in this order, so the sums are the same on every run (no atomics).
    for (int64_t step = 0; step < group * q_tiles; step++) {
        const int64_t h = g * group + step / q_tiles, q_tile = first_q_tile + step % q_tiles;
        const float *q_head = t.q + b * t.q_strides.b + h * t.q_strides.h;
        const float *do_head = t.dout + b * t.do_strides.b + h * t.do_strides.h;
        const float *lse_head = t.lse + (b * H + h) * S_q, *delta_head = t.delta + (b * H + h) * S_q;
        const int64_t q_start = q_tile * BLOCK_M;
        // The causal stage of this (Q tile, K tile) pair (fa_contract.h). Past first_q_tile a tile is in the future
        // only where S_q ends before this K/V tile starts (Sq < Sk): none of its rows sees a key here.
        const int stage = causal_tile_stage(causal, q_start, kv_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) continue;
        const int rows = (int)(S_q - q_start < BLOCK_M ? S_q - q_start : BLOCK_M);   // query rows in the tile

        // Stage the Q tile, the dO tile, LSE and Delta: consecutive threads read consecutive elements of a row.
        __syncthreads();   // every thread is done with the previous tile
        for (int e = threadIdx.x; e < BLOCK_M * D; e += THREADS) {
            const int r = e / D, d = e % D;
            const int64_t i = q_start + r;
            sh.q[r][d] = r < rows ? q_head[i * t.q_strides.s + d * t.q_strides.d] * qk_scale : 0.0f;
            sh.dout[r][d] = r < rows ? do_head[i * t.do_strides.s + d * t.do_strides.d] : 0.0f;
        }
        for (int r = threadIdx.x; r < BLOCK_M; r += THREADS) {
            const float residual =
                r < rows && t.lse_residual ? t.lse_residual[(b * H + h) * S_q + q_start + r] : 0.0f;
            lse_to_base2(r < rows ? lse_head[q_start + r] : 0.0f, residual, &sh.lse2_hi[r], &sh.lse2_lo[r]);
            sh.delta[r] = r < rows ? delta_head[q_start + r] : 0.0f;
        }
        __syncthreads();

        for (int r = 0; r < rows; r++) {   // the same bound in every thread: the shuffles see all lanes
            const int64_t i = q_start + r;
            float s = 0.0f, dp = 0.0f;
#pragma unroll
            for (int u = 0; u < DIMS_PER_THREAD; u++) {
                const int d = BackwardRowSplit<D>::dim(part, u);
                s = fmaf(sh.q[r][d], k_j[u], s);   // S_ij * LOG2E, summed as the forward summed it
                dp += sh.dout[r][d] * v_j[u];  // dP_ij = dO_i . V_j
            }
            s = row_sum<THREADS_PER_ROW>(s);
            dp = row_sum<THREADS_PER_ROW>(dp);
            // P_ij recomputed from the saved log-sum-exp. A masked key, or a thread past S_k, gets p = 0
            // directly, never exp2 of an infinity.
            const bool visible = key_valid && !(stage == TILE_DIAGONAL && j > i);   // only a diagonal tile masks
            const float p = visible ? exp2f((s - sh.lse2_hi[r]) - sh.lse2_lo[r]) : 0.0f;
            const float ds = p * (dp - sh.delta[r]);   // dS_ij = P_ij (dP_ij - Delta_i)
#pragma unroll
            for (int u = 0; u < DIMS_PER_THREAD; u++) {
                const int d = BackwardRowSplit<D>::dim(part, u);
                dv_j[u] += p * sh.dout[r][d];   // dV_j += P_ij dO_i
                dk_j[u] += ds * sh.q[r][d];     // dK_j += dS_ij Q_i  (in units of qk_scale Q_i, see below)
            }
            if (ATOMIC_DQ && part == 0) sh.ds[r][c] = ds;
        }

        if (ATOMIC_DQ) {
            // This tile's share of dQ: dQ_i += scale * sum_j dS_ij K_j. Now each thread takes a query row of the
            // Q tile (the layout of the dQ pass: THREADS_PER_ROW threads per row, RowSplit's dims each), walks the
            // tile's keys and adds its dims of the row into dQ. Blocks of other K/V tiles add into the same rows
            // at the same time, so the additions are atomic: correct, but in whatever order the blocks run.
            __syncthreads();   // the whole dS tile is written
            float *dq_head = t.dq + b * t.dq_strides.b + h * t.dq_strides.h;
            for (int r = c; r < rows; r += BLOCK_N) {   // BLOCK_N rows per sweep of the block's threads
                float acc[DIMS_PER_THREAD] = {0.0f};
                for (int cc = 0; cc < keys; cc++) {
                    const float ds = sh.ds[r][cc];
#pragma unroll
                    for (int u = 0; u < DIMS_PER_THREAD; u++)
                        acc[u] += ds * sh.k[cc][BackwardRowSplit<D>::dim(part, u)];
                }
                float *dq_row = dq_head + (q_start + r) * t.dq_strides.s;
#pragma unroll
                for (int u = 0; u < DIMS_PER_THREAD; u++)
                    atomicAdd(&dq_row[BackwardRowSplit<D>::dim(part, u) * t.dq_strides.d], scale * acc[u]);
            }
        }
    }

    // Each dK_j and dV_j is written exactly once, by the thread that owns key row j. dk_j summed dS_ij times the
    // staged qk_scale * Q_i, so dK_j = scale * sum_i dS_ij Q_i = (scale / qk_scale) * dk_j = LN2 * dk_j.
    if (key_valid) {
        float *dk_row = t.dk + b * t.dk_strides.b + g * t.dk_strides.h + j * t.dk_strides.s;
        float *dv_row = t.dv + b * t.dv_strides.b + g * t.dv_strides.h + j * t.dv_strides.s;
#pragma unroll
        for (int u = 0; u < DIMS_PER_THREAD; u++) {
            const int d = BackwardRowSplit<D>::dim(part, u);
            dk_row[d * t.dk_strides.d] = LN2 * dk_j[u];
            dv_row[d * t.dv_strides.d] = dv_j[u];
        }
    }
}

template <int D, int BLOCK_M, int BLOCK_N, bool ATOMIC_DQ>
static void launch(const fa_shape *shape, const backward_tensors *t, int64_t H_kv) {
    const size_t shared_bytes = sizeof(DkdvShared<D, BLOCK_M, BLOCK_N, ATOMIC_DQ>);
    auto kernel = backward_gqa_dkdv_kernel<D, BLOCK_M, BLOCK_N, ATOMIC_DQ>;
    // A kernel that wants more than 48 KiB of dynamic shared memory has to say so first.
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared_bytes));
    const unsigned int kv_tiles = (unsigned int)((shape->Sk + BLOCK_N - 1) / BLOCK_N);
    const int threads = BLOCK_N * BackwardRowSplit<D>::THREADS_PER_ROW;
    const int64_t BH = shape->B * H_kv;   // GQA: one program per K/V head and key tile
    for (int64_t bh_first = 0; bh_first < BH; bh_first += MAX_GRID_Y) {   // at most MAX_GRID_Y heads a launch
        kernel<<<dim3(kv_tiles, heads_in_launch(BH, bh_first)), threads, shared_bytes>>>(
            *t, shape->H, bh_first, shape->Sq, shape->Sk, shape->scale, shape->causal, shape->H / H_kv);
        FA_CUDA_CHECK_LAUNCH();
    }
}

template <int BLOCK_M, int BLOCK_N, bool ATOMIC_DQ>
static void launch_for_head_dim(const fa_shape *shape, const backward_tensors *t, int64_t H_kv) {
    switch (shape->D) {
    case 16: launch<16, BLOCK_M, BLOCK_N, ATOMIC_DQ>(shape, t, H_kv); break;
    case 32: launch<32, BLOCK_M, BLOCK_N, ATOMIC_DQ>(shape, t, H_kv); break;
    case 64: launch<64, BLOCK_M, BLOCK_N, ATOMIC_DQ>(shape, t, H_kv); break;
    case 128: launch<128, BLOCK_M, BLOCK_N, ATOMIC_DQ>(shape, t, H_kv); break;
    default: fa_die("D=%lld is not supported by the CUDA backward (supported: 16, 32, 64, 128)", (long long)shape->D);
    }
}

// The (BLOCK_M, BLOCK_N) pairs here are exactly backward_cuda_supports_tiles() in fa_contract.h.
template <bool ATOMIC_DQ>
static void launch_for_tiles(const fa_shape *shape, int block_m, int block_n, const backward_tensors *t, int64_t H_kv) {
    if (block_m == 64 && block_n == 64) launch_for_head_dim<64, 64, ATOMIC_DQ>(shape, t, H_kv);
    else if (block_m == 32 && block_n == 64) launch_for_head_dim<32, 64, ATOMIC_DQ>(shape, t, H_kv);
    else if (block_m == 64 && block_n == 32) launch_for_head_dim<64, 32, ATOMIC_DQ>(shape, t, H_kv);
    else fa_die("the CUDA backward has no %dx%d tiles (BLOCK_M x BLOCK_N: " BACKWARD_CUDA_TILES_TEXT ")", block_m,
                block_n);
}

extern "C" void backward_dkdv_gqa_cuda(const fa_shape *shape, int64_t H_kv, int block_m, int block_n,
                                       const backward_tensors *t, int atomic_dq) {
    if (atomic_dq) launch_for_tiles<true>(shape, block_m, block_n, t, H_kv);
    else launch_for_tiles<false>(shape, block_m, block_n, t, H_kv);
}
