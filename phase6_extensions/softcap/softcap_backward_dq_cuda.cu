// softcap_backward_dq_cuda.cu - phase 6: the backward pass of softcapping, on the GPU.
//
// What it adds to phase 4 (phase4_backward/backward_dq_cuda.cu):
//   the forward's score was c = cap2 * tanh(s / cap2) (phase6_extensions/softcap/softcap_cpu.c, in base 2), so P is recomputed
//   from c, and dS, the gradient of the score, is carried back through the cap: dS_ij = P_ij (dP_ij - Delta_i) * (1 -
//   tanh^2(s_ij / cap2)). dQ and dK are then the sums of phase 4, of this dS.
// Twin:      phase6_extensions/softcap/softcap_backward_dq_cpu.c
// Diff:      diff -u phase4_backward/backward_dq_cuda.cu phase6_extensions/softcap/softcap_backward_dq_cuda.cu
// Run:       build/bin/phase6_extensions --impl cuda --backward --softcap 30 --B 4 --H 16 --S 4096 --D 64
#include "backward_ext.h"
#include "fa_row_split.cuh"
#include "fa_cuda_check.h"

#include <math.h>

// grid: (number of Q tiles, heads of this launch: fa_contract.h), block: BLOCK_M * THREADS_PER_ROW threads.
// q, do, dq: [B, H, S_q, D]; k, v: [B, H, S_k, D], strided (d: 1 for k and v); lse, delta: [B, H, S_q], contiguous.
// Shared memory: the K tile and the V tile, [BLOCK_N, D].
template <int D, int BLOCK_M, int BLOCK_N>
__global__ void __launch_bounds__(BLOCK_M * BackwardRowSplit<D>::THREADS_PER_ROW,
                                  min_blocks_per_sm(BLOCK_M * BackwardRowSplit<D>::THREADS_PER_ROW))
backward_softcap_dq_kernel(const backward_tensors t, const fa_shape shape, int64_t bh_first, float qk_scale,
                           float cap2) {
    constexpr int THREADS_PER_ROW = BackwardRowSplit<D>::THREADS_PER_ROW;
    constexpr int DIMS_PER_THREAD = BackwardRowSplit<D>::DIMS_PER_THREAD;
    constexpr int THREADS = BLOCK_M * THREADS_PER_ROW;
    constexpr int ROW_FLOAT4 = D / 4;                        // float4s in one row of K or V
    constexpr int TILE_FLOAT4 = BLOCK_N * ROW_FLOAT4;        // float4s in one K (or V) tile
    extern __shared__ float4 smem[];
    float4 *k_tile = smem;                                   // [BLOCK_N][D / 4]
    float4 *v_tile = smem + TILE_FLOAT4;                     // [BLOCK_N][D / 4]
    // The same tiles float by float, [BLOCK_N][D]: a thread reads the dims RowSplit::dim gives it.
    const float *k_tile_f = reinterpret_cast<const float *>(k_tile);
    const float *v_tile_f = reinterpret_cast<const float *>(v_tile);

    const int64_t S_q = shape.Sq, S_k = shape.Sk;
    // The grid's second index is the head: (b, h) from bh, and where that head starts in each tensor.
    const int64_t bh = bh_first + blockIdx.y, b = bh / shape.H, h = bh % shape.H;
    const float *__restrict__ q = t.q + b * t.q_strides.b + h * t.q_strides.h;
    const float *__restrict__ k = t.k + b * t.k_strides.b + h * t.k_strides.h;
    const float *__restrict__ v = t.v + b * t.v_strides.b + h * t.v_strides.h;
    const float *__restrict__ dout = t.dout + b * t.do_strides.b + h * t.do_strides.h;
    float *__restrict__ dq = t.dq + b * t.dq_strides.b + h * t.dq_strides.h;

    // The Q tile order. Causal, the last Q tiles see the most keys: blockIdx.x = 0 takes the last one, so that the
    // longest blocks start first and the short ones fill the GPU at the end, instead of a few long ones running last.
    const int64_t q_start = (int64_t)(gridDim.x - 1 - blockIdx.x) * BLOCK_M;
    const int part = threadIdx.x % THREADS_PER_ROW;          // which dims of the row this thread holds
    const int r = threadIdx.x / THREADS_PER_ROW;             // this thread's row in the tile
    const int64_t i = q_start + r;                           // and in the head
    const bool row_exists = i < S_q;   // rows past S_q compute like the others (no thread skips a barrier or a
                                       // shuffle) but load zeros and store nothing

    // Q_i (times qk_scale, as the forward held it), dO_i, LSE_i and Delta_i, and the accumulator, all in registers.
    float q_i[DIMS_PER_THREAD], do_i[DIMS_PER_THREAD], dq_i[DIMS_PER_THREAD];
#pragma unroll
    for (int u = 0; u < DIMS_PER_THREAD; u++) {
        const int d = BackwardRowSplit<D>::dim(part, u);
        q_i[u] = row_exists ? q[i * t.q_strides.s + d * t.q_strides.d] * qk_scale : 0.0f;
        do_i[u] = row_exists ? dout[i * t.do_strides.s + d * t.do_strides.d] : 0.0f;
        dq_i[u] = 0.0f;
    }
    float lse2_hi, lse2_lo;   // LSE_i * LOG2E (lse_to_base2 in fa_math.h)
    const float residual = row_exists && t.lse_residual ? t.lse_residual[bh * S_q + i] : 0.0f;
    lse_to_base2(row_exists ? t.lse[bh * S_q + i] : 0.0f, residual, &lse2_hi, &lse2_lo);
    const float delta_i = row_exists ? t.delta[bh * S_q + i] : 0.0f;

    for (int64_t k_start = 0; k_start < S_k; k_start += BLOCK_N) {
        // The three causal stages: a tile entirely in the future ends the loop before it is loaded (every later
        // tile lies further in the future); a tile entirely in the past needs no mask; a diagonal tile does.
        // The stage depends on the block's indices only, so all its threads leave the loop together.
        const int stage = causal_tile_stage(shape.causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) break;
        // Every thread has finished reading the previous tile before anyone overwrites it.
        __syncthreads();
        // Stage the K and V tiles: all threads together, consecutive threads on consecutive float4s.
        // Keys past S_k are stored as zeros (the loop below stops before them).
#pragma unroll
        for (int f = threadIdx.x; f < TILE_FLOAT4; f += THREADS) {
            const int64_t key = k_start + f / ROW_FLOAT4;
            float4 k4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v4 = k4;
            if (key < S_k) {
                k4 = reinterpret_cast<const float4 *>(k + key * t.k_strides.s)[f % ROW_FLOAT4];
                v4 = reinterpret_cast<const float4 *>(v + key * t.v_strides.s)[f % ROW_FLOAT4];
            }
            k_tile[f] = k4;
            v_tile[f] = v4;
        }
        __syncthreads();

        // The last key this row may see: the last one there is, and on a diagonal tile the row itself (row i sees
        // keys j <= i). A tile in the past keeps the test against S_k alone: no element mask.
        const int64_t last_key = stage == TILE_DIAGONAL && i < S_k - 1 ? i : S_k - 1;
        const int keys = (int)(S_k - k_start < BLOCK_N ? S_k - k_start : BLOCK_N);   // keys in this tile

        // The backward's loop body, one key at a time. The same bound in every thread: the shuffles see all lanes.
        for (int j = 0; j < keys; j++) {
            float s = 0.0f, dp = 0.0f;
#pragma unroll
            for (int u = 0; u < DIMS_PER_THREAD; u++) {
                const int d = BackwardRowSplit<D>::dim(part, u);
                s = fmaf(q_i[u], k_tile_f[j * D + d], s);   // S_ij * LOG2E, summed as the forward summed it
                dp += do_i[u] * v_tile_f[j * D + d];
            }
            s = row_sum<THREADS_PER_ROW>(s);
            dp = row_sum<THREADS_PER_ROW>(dp);
            // P_ij from the saved log-sum-exp (0 past last_key), dS_ij = P_ij (dP_ij - Delta_i), dQ_i += dS_ij K_j.
            const bool visible = row_exists && k_start + j <= last_key;
            // Softcapping: the forward's score was cap2 * tanh(s / cap2), and 1 - tanh^2 is its slope.
            const float th = tanhf(s / cap2);
            const float p = visible ? exp2f((cap2 * th - lse2_hi) - lse2_lo) : 0.0f;
            const float ds = p * (dp - delta_i) * (1.0f - th * th);
#pragma unroll
            for (int u = 0; u < DIMS_PER_THREAD; u++)
                dq_i[u] += ds * k_tile_f[j * D + BackwardRowSplit<D>::dim(part, u)];
        }
    }

    // dQ = scale * the sum (the scores were in base 2, the gradient is of the natural-log softmax).
    if (!row_exists) return;
#pragma unroll
    for (int u = 0; u < DIMS_PER_THREAD; u++)
        dq[i * t.dq_strides.s + BackwardRowSplit<D>::dim(part, u) * t.dq_strides.d] = shape.scale * dq_i[u];
}

// Launches one instantiation. The two tiles can pass the 48 KiB a kernel gets without asking (D = 128 with
// BLOCK_N = 64 needs 64 KiB), so the kernel asks for what it uses.
template <int D, int BLOCK_M, int BLOCK_N>
static void launch(const fa_shape *shape, const backward_tensors *t, float softcap) {
    auto kernel = backward_softcap_dq_kernel<D, BLOCK_M, BLOCK_N>;
    const int smem_bytes = 2 * BLOCK_N * D * (int)sizeof(float);
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    const unsigned int q_tiles = (unsigned int)((shape->Sq + BLOCK_M - 1) / BLOCK_M);
    const float qk_scale = shape->scale * LOG2E;
    const int64_t BH = shape->B * shape->H;
    for (int64_t bh_first = 0; bh_first < BH; bh_first += MAX_GRID_Y) {   // at most MAX_GRID_Y heads a launch
        kernel<<<dim3(q_tiles, heads_in_launch(BH, bh_first)), BLOCK_M * BackwardRowSplit<D>::THREADS_PER_ROW,
                 smem_bytes>>>(*t, *shape, bh_first, qk_scale, softcap * LOG2E);
        FA_CUDA_CHECK_LAUNCH();
    }
}

// The one dispatch: (D, BLOCK_M, BLOCK_N) to the instantiation compiled for it (the header lists them).
template <int D>
static void launch_tiles(const fa_shape *shape, int block_m, int block_n, const backward_tensors *t, float softcap) {
    if (block_m == 64 && block_n == 64) launch<D, 64, 64>(shape, t, softcap);
    else if (block_m == 32 && block_n == 64) launch<D, 32, 64>(shape, t, softcap);
    else if (block_m == 64 && block_n == 32) launch<D, 64, 32>(shape, t, softcap);
    else fa_die("the CUDA kernel is compiled for BLOCK_M x BLOCK_N = %s, not %d x %d",
                BACKWARD_CUDA_TILES_TEXT, block_m, block_n);
}

extern "C" void backward_dq_softcap_cuda(const fa_shape *shape, float softcap, int block_m, int block_n,
                                         const backward_tensors *t) {
    check_float4_rows("K", t->k, t->k_strides);   // fa_contract.h: the tiles are staged as float4s
    check_float4_rows("V", t->v, t->v_strides);
    switch (shape->D) {
    case 16: launch_tiles<16>(shape, block_m, block_n, t, softcap); break;
    case 32: launch_tiles<32>(shape, block_m, block_n, t, softcap); break;
    case 64: launch_tiles<64>(shape, block_m, block_n, t, softcap); break;
    case 128: launch_tiles<128>(shape, block_m, block_n, t, softcap); break;
    default: fa_die("the CUDA kernel supports D in {16, 32, 64, 128}, not %lld", (long long)shape->D);
    }
}
