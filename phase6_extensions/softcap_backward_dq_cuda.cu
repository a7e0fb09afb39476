// softcap_backward_dq_cuda.cu - phase 6: the backward pass of softcapping, on the GPU.
//
// What it adds to phase 4 (phase4_backward/backward_dq_cuda.cu):
//   the forward's score was c = cap2 * tanh(s / cap2) (phase6_extensions/softcap_cpu.c, in base 2), so P is recomputed
//   from c, and dS, the gradient of the score, is carried back through the cap: dS_ij = P_ij (dP_ij - Delta_i) * (1 -
//   tanh^2(s_ij / cap2)). dQ and dK are then the sums of phase 4, of this dS.
// Twin:      phase6_extensions/softcap_backward_dq_cpu.c
// Diff:      diff -u phase4_backward/backward_dq_cuda.cu phase6_extensions/softcap_backward_dq_cuda.cu
// Run:       build/bin/phase6_extensions --impl cuda --backward --softcap 30 --B 4 --H 16 --S 4096 --D 64
//
// The mapping: one thread per query row i (THREADS_PER_ROW threads when D > 16), with Q_i, dO_i, the accumulator
// dQ_i, LSE_i and Delta_i in registers; the K/V tiles pass through shared memory one after the other:
//   s = (qk_scale Q_i) . K_j,  p = exp2(s - LSE_i * LOG2E),  dp = dO_i . V_j,  ds = p (dp - Delta_i),  dQ_i += ds K_j
// Every dQ_i is summed by one thread in a fixed order, so two runs give the same bits.
#include "backward_ext.h"
#include "backward_cuda.cuh"
#include "fa_cuda_check.h"

// The K/V tile in shared memory (dynamic: with D = 128 it passes the 48 KiB a static __shared__ array may have).
template <int D, int BLOCK_N>
struct DqShared {
    float k[BLOCK_N][D];
    float v[BLOCK_N][D];
};

template <int D, int BLOCK_M, int BLOCK_N>
__global__ void __launch_bounds__(BLOCK_M * RowSplit<D>::THREADS_PER_ROW,
                                  min_blocks_per_sm(BLOCK_M * RowSplit<D>::THREADS_PER_ROW))
backward_softcap_dq_kernel(backward_tensors t, int64_t H, int64_t BH, int64_t S_q, int64_t S_k, float scale,
                             int causal, float cap2) {
    constexpr int DIMS_PER_THREAD = RowSplit<D>::DIMS_PER_THREAD, THREADS_PER_ROW = RowSplit<D>::THREADS_PER_ROW;
    constexpr int THREADS = BLOCK_M * THREADS_PER_ROW;
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    DqShared<D, BLOCK_N> &sh = *reinterpret_cast<DqShared<D, BLOCK_N> *>(shared_bytes);

    const int r = threadIdx.x / THREADS_PER_ROW;      // this thread's query row in the tile
    const int part = threadIdx.x % THREADS_PER_ROW;   // which of the row's dims it holds (RowSplit::dim)
    const float qk_scale = scale * LOG2E;
    const int64_t q_start = (int64_t)blockIdx.x * BLOCK_M;
    const int64_t rows = S_q - q_start < BLOCK_M ? S_q - q_start : BLOCK_M;   // query rows in this tile
    const int64_t i = q_start + r;
    const bool query_valid = r < rows;   // threads past S_q run every loop with zeros and write nothing
    const int64_t n_kv_tiles = (S_k + BLOCK_N - 1) / BLOCK_N;
    // Causal: the tile's last row sees no key after itself, so the K/V tiles past it are skipped (the forward's
    // pruning, exactly).
    int64_t end_kv_tile = n_kv_tiles;
    if (causal) {
        const int64_t last_key = q_start + rows - 1 < S_k - 1 ? q_start + rows - 1 : S_k - 1;
        end_kv_tile = last_key / BLOCK_N + 1;
    }

    // blockIdx.y is (b, h); a grid has at most 65535 of them, so a block may serve more than one.
    for (int64_t bh = blockIdx.y; bh < BH; bh += gridDim.y) {
        const int64_t b = bh / H, h = bh % H;
        const float *q_row = t.q + b * t.q_strides.b + h * t.q_strides.h + i * t.q_strides.s;
        const float *do_row = t.dout + b * t.do_strides.b + h * t.do_strides.h + i * t.do_strides.s;
        const float *k_head = t.k + b * t.k_strides.b + h * t.k_strides.h;
        const float *v_head = t.v + b * t.v_strides.b + h * t.v_strides.h;

        float q_i[DIMS_PER_THREAD], do_i[DIMS_PER_THREAD], dq_i[DIMS_PER_THREAD];
#pragma unroll
        for (int u = 0; u < DIMS_PER_THREAD; u++) {
            const int d = RowSplit<D>::dim(part, u);
            q_i[u] = query_valid ? q_row[d * t.q_strides.d] * qk_scale : 0.0f;   // as the forward held it
            do_i[u] = query_valid ? do_row[d * t.do_strides.d] : 0.0f;
            dq_i[u] = 0.0f;
        }
        float lse2_hi, lse2_lo;   // LSE_i * LOG2E (lse_to_base2 in fa_math.h)
        const float residual = query_valid && t.lse_residual ? t.lse_residual[bh * S_q + i] : 0.0f;
        lse_to_base2(query_valid ? t.lse[bh * S_q + i] : 0.0f, residual, &lse2_hi, &lse2_lo);
        const float delta_i = query_valid ? t.delta[bh * S_q + i] : 0.0f;

        for (int64_t kv_tile = 0; kv_tile < end_kv_tile; kv_tile++) {
            const int64_t kv_start = kv_tile * BLOCK_N;
            const int keys = (int)(S_k - kv_start < BLOCK_N ? S_k - kv_start : BLOCK_N);   // key rows in the tile

            // Stage the K and V tiles: consecutive threads read consecutive elements of a row (zeros past S_k).
            __syncthreads();   // every thread is done with the previous tile
            for (int e = threadIdx.x; e < BLOCK_N * D; e += THREADS) {
                const int c = e / D, d = e % D;
                const int64_t j = kv_start + c;
                sh.k[c][d] = c < keys ? k_head[j * t.k_strides.s + d * t.k_strides.d] : 0.0f;
                sh.v[c][d] = c < keys ? v_head[j * t.v_strides.s + d * t.v_strides.d] : 0.0f;
            }
            __syncthreads();

            const bool needs_mask = causal && kv_start + keys - 1 > q_start;   // the tile crosses the diagonal
            for (int c = 0; c < keys; c++) {   // the same bound in every thread: the shuffles see all lanes
                const int64_t j = kv_start + c;
                float s = 0.0f, dp = 0.0f;
#pragma unroll
                for (int u = 0; u < DIMS_PER_THREAD; u++) {
                    const int d = RowSplit<D>::dim(part, u);
                    s = fmaf(q_i[u], sh.k[c][d], s);   // S_ij * LOG2E, summed as the forward summed it
                    dp += do_i[u] * sh.v[c][d];
                }
                s = row_sum<THREADS_PER_ROW>(s);
                dp = row_sum<THREADS_PER_ROW>(dp);
                const bool visible = query_valid && !(needs_mask && j > i);
                // Softcapping: the forward's score was cap2 * tanh(s / cap2), and 1 - tanh^2 is its slope.
                const float th = tanhf(s / cap2);
                const float p = visible ? exp2f((cap2 * th - lse2_hi) - lse2_lo) : 0.0f;
                const float ds = p * (dp - delta_i) * (1.0f - th * th);
#pragma unroll
                for (int u = 0; u < DIMS_PER_THREAD; u++) dq_i[u] += ds * sh.k[c][RowSplit<D>::dim(part, u)];
            }
        }

        if (query_valid) {
            float *dq_row = t.dq + b * t.dq_strides.b + h * t.dq_strides.h + i * t.dq_strides.s;
#pragma unroll
            for (int u = 0; u < DIMS_PER_THREAD; u++)
                dq_row[RowSplit<D>::dim(part, u) * t.dq_strides.d] = scale * dq_i[u];
        }
    }
}

template <int D, int BLOCK_M, int BLOCK_N>
static void launch(const fa_shape *shape, float softcap, const backward_tensors *t) {
    const int64_t BH = shape->B * shape->H;
    const size_t shared_bytes = sizeof(DqShared<D, BLOCK_N>);
    auto kernel = backward_softcap_dq_kernel<D, BLOCK_M, BLOCK_N>;
    // A kernel that wants more than 48 KiB of dynamic shared memory has to say so first.
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared_bytes));
    const dim3 grid((unsigned int)((shape->Sq + BLOCK_M - 1) / BLOCK_M), grid_y_for(BH));
    const int threads = BLOCK_M * RowSplit<D>::THREADS_PER_ROW;
    kernel<<<grid, threads, shared_bytes>>>(*t, shape->H, BH, shape->Sq, shape->Sk, shape->scale, shape->causal,
                                            softcap * LOG2E);
    FA_CUDA_CHECK_LAUNCH();
}

template <int BLOCK_M, int BLOCK_N>
static void launch_for_head_dim(const fa_shape *shape, float softcap, const backward_tensors *t) {
    switch (shape->D) {
    case 16: launch<16, BLOCK_M, BLOCK_N>(shape, softcap, t); break;
    case 32: launch<32, BLOCK_M, BLOCK_N>(shape, softcap, t); break;
    case 64: launch<64, BLOCK_M, BLOCK_N>(shape, softcap, t); break;
    case 128: launch<128, BLOCK_M, BLOCK_N>(shape, softcap, t); break;
    default: fa_die("D=%lld is not supported by the CUDA backward (supported: 16, 32, 64, 128)", (long long)shape->D);
    }
}

// The (BLOCK_M, BLOCK_N) pairs here are exactly backward_cuda_supports_tiles() in backward.h.
extern "C" void backward_dq_softcap_cuda(const fa_shape *shape, float softcap, int block_m, int block_n,
                                         const backward_tensors *t) {
    if (block_m == 64 && block_n == 64) launch_for_head_dim<64, 64>(shape, softcap, t);
    else if (block_m == 32 && block_n == 64) launch_for_head_dim<32, 64>(shape, softcap, t);
    else if (block_m == 64 && block_n == 32) launch_for_head_dim<64, 32>(shape, softcap, t);
    else fa_die("the CUDA backward has no %dx%d tiles (BLOCK_M x BLOCK_N: " BACKWARD_CUDA_TILES_TEXT ")", block_m,
                block_n);
}
