// gqa_cuda.cu - phase 6, on the GPU: GQA / MQA, K/V heads shared by groups of query heads.
//
// What it adds to phase 3 step 3 (phase3_forward_4d/3_lse_cuda.cu):
//   query head h reads K/V head h / group, group = H / H_kv query heads in a row (MQA: H_kv = 1, one K/V head for
//   all). K and V are [B, H_kv, Sk, D].
// CPU twin:  phase6_extensions/gqa/gqa_cpu.c
// Diff:      diff -u phase3_forward_4d/3_lse_cuda.cu phase6_extensions/gqa/gqa_cuda.cu
// Run:       build/bin/phase6_extensions --impl cuda --B 4 --H 32 --H-kv 8 --S 4096 --D 128
//
// Thread mapping (docs/02-online-softmax.md draws it):
//   - one query row per thread, or per pair of threads when D = 128: a thread holds at most 64 dimensions
//     of q and acc in registers (FORWARD_MAX_DIMS_PER_THREAD; 128 would need too many); the pair adds its two halves
//     of each dot product with one __shfl_xor_sync, then both hold the full score;
//   - the BLOCK_N scores of the current tile are a register array (every loop below has a compile-time trip count
//     and is unrolled, which is what lets an array live in registers);
//   - the K and V tiles are loaded by all threads together, float4 by float4 (consecutive threads read consecutive
//     16 bytes: coalesced), into shared memory, where every thread of a row reads the same element at the same
//     time (a broadcast: no bank conflict).
#include "fa_cuda_check.h"
#include "fa_row_split.cuh"
#include "extensions.h"

#include <math.h>

#include "fa_math.h"   // LOG2E, LN2 and the log-sum-exp conversions

// grid: (number of Q tiles, heads of this launch: fa_contract.h), block: BLOCK_M * THREADS_PER_ROW threads.
// q, o: [B, H, S_q, D]; k, v: [B, H, S_k, D], strided (d: 1); lse: [B, H, S_q], contiguous. Shared memory: the K
// tile and the V tile, [BLOCK_N, D].
template <int D, int BLOCK_M, int BLOCK_N>
__global__ void __launch_bounds__(BLOCK_M * ForwardRowSplit<D>::THREADS_PER_ROW)
flash_forward_gqa_kernel(const forward_tensors t, const fa_shape shape, int64_t bh_first, float qk_scale,
                         int64_t group) {
    constexpr int THREADS_PER_ROW = ForwardRowSplit<D>::THREADS_PER_ROW, CHUNKS = ForwardRowSplit<D>::CHUNKS;
    constexpr int THREADS = BLOCK_M * THREADS_PER_ROW;
    constexpr int ROW_FLOAT4 = D / 4;                        // float4s in one row of K or V
    constexpr int TILE_FLOAT4 = BLOCK_N * ROW_FLOAT4;        // float4s in one K (or V) tile
    extern __shared__ float4 smem[];
    float4 *k_tile = smem;                                   // [BLOCK_N][D / 4]
    float4 *v_tile = smem + TILE_FLOAT4;                     // [BLOCK_N][D / 4]

    const int64_t S_q = shape.Sq, S_k = shape.Sk;
    // The grid's second index is the head: (b, h) from bh, and where that head starts in each tensor.
    const int64_t bh = bh_first + blockIdx.y, b = bh / shape.H, h = bh % shape.H;
    const float *__restrict__ q = t.q + b * t.q_strides.b + h * t.q_strides.h;
    // GQA: the `group` query heads h = g * group .. g * group + group - 1 share K/V head g.
    const float *__restrict__ k = t.k + b * t.k_strides.b + h / group * t.k_strides.h;
    const float *__restrict__ v = t.v + b * t.v_strides.b + h / group * t.v_strides.h;
    float *__restrict__ o = t.o + b * t.o_strides.b + h * t.o_strides.h;

    // The Q tile order. Causal, the last Q tiles see the most keys: blockIdx.x = 0 takes the last one, so that the
    // longest blocks start first and the short ones fill the GPU at the end, instead of a few long ones running last.
    const int64_t q_start = (int64_t)(gridDim.x - 1 - blockIdx.x) * BLOCK_M;
    const int part = threadIdx.x % THREADS_PER_ROW;          // which chunks of the row this thread holds
    const int r = threadIdx.x / THREADS_PER_ROW;             // this thread's row in the tile
    const int64_t i = q_start + r;                           // and in the head
    const bool row_exists = i < S_q;   // rows past S_q compute like the others (no thread skips a barrier)
                                       // but load zeros and store nothing

    // The row of Q, times qk_scale (scores come out in base 2), and the statistics, all in registers.
    float4 q_i[CHUNKS], acc[CHUNKS];
#pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row_exists) x = reinterpret_cast<const float4 *>(q + i * t.q_strides.s)[ForwardRowSplit<D>::chunk(c, part)];
        q_i[c] = make_float4(x.x * qk_scale, x.y * qk_scale, x.z * qk_scale, x.w * qk_scale);
        acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float m_i = -INFINITY, l_i = 0.0f;

    for (int64_t k_start = 0; k_start < S_k; k_start += BLOCK_N) {
        // The three causal stages: a tile entirely in the future ends the loop before it is loaded (every later
        // tile lies further in the future); a tile entirely in the past needs no mask; a diagonal tile does.
        // The stage depends on the block's indices only, so all its threads leave the loop together.
        const int stage = causal_tile_stage(shape.causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) break;
        // Every thread has finished reading the previous tile before anyone overwrites it.
        __syncthreads();
        // Stage the K and V tiles: all threads together, consecutive threads on consecutive float4s.
        // Keys past S_k are stored as zeros (their scores are masked below).
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

        // Scores s[j] = qk_scale * q_i . k_j, each summed in PARTS interleaved parts added in pairs: the order in which
        // phase 4 sums the same scores (fa_contract.h, SCORE_PART_DIMS). Each float4 from shared memory feeds 4 FMAs.
        float s[BLOCK_N];
#pragma unroll
        for (int j = 0; j < BLOCK_N; j++) {
            float part_sum[ForwardRowSplit<D>::SCORE_PARTS] = {};
#pragma unroll
            for (int c = 0; c < CHUNKS; c++)
                dot4_parts(q_i[c], k_tile[j * ROW_FLOAT4 + ForwardRowSplit<D>::chunk(c, part)], part_sum);
            s[j] = add_in_pairs(part_sum);
        }
        // D = 128: the threads of a row (neighbouring lanes of one warp) add up their parts of each dot product;
        // afterwards every one of them holds the full scores, and the same m_i and l_i.
#pragma unroll
        for (int offset = 1; offset < THREADS_PER_ROW; offset *= 2) {
#pragma unroll
            for (int j = 0; j < BLOCK_N; j++) s[j] += __shfl_xor_sync(FULL_WARP, s[j], offset);
        }

        // The last key this row may see: the last one there is, and on a diagonal tile the row itself (row i sees
        // keys j <= i). A tile in the past keeps step 1's test against S_k alone: no element mask.
        const int64_t last_key = stage == TILE_DIAGONAL && i < S_k - 1 ? i : S_k - 1;

        // The online softmax. Keys past last_key get -INFINITY: exp2(-inf) = 0, they take no part.
        float m_tile = -INFINITY;
#pragma unroll
        for (int j = 0; j < BLOCK_N; j++) {
            if (k_start + j > last_key) s[j] = -INFINITY;
            m_tile = fmaxf(m_tile, s[j]);
        }
        const float m_new = fmaxf(m_i, m_tile);
        // A row that has seen no key yet has m_new = -inf; subtracting it would give -inf - -inf = NaN.
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        float row_sum = 0.0f;
#pragma unroll
        for (int j = 0; j < BLOCK_N; j++) {
            s[j] = exp2f(s[j] - m_use);   // p_ij, relative to the new max
            row_sum += s[j];
        }
        // Everything accumulated so far was relative to the old max: alpha moves it to the new one.
        const float alpha = exp2f(m_i - m_use);
        l_i = l_i * alpha + row_sum;
        m_i = m_new;

        // acc = acc * alpha + p V_tile: the loop over j outside, so the 4 * CHUNKS sums of acc advance together.
#pragma unroll
        for (int c = 0; c < CHUNKS; c++) {
            acc[c].x *= alpha;
            acc[c].y *= alpha;
            acc[c].z *= alpha;
            acc[c].w *= alpha;
        }
#pragma unroll
        for (int j = 0; j < BLOCK_N; j++) {
#pragma unroll
            for (int c = 0; c < CHUNKS; c++) {
                const float4 v4 = v_tile[j * ROW_FLOAT4 + ForwardRowSplit<D>::chunk(c, part)];
                acc[c].x = fmaf(s[j], v4.x, acc[c].x);
                acc[c].y = fmaf(s[j], v4.y, acc[c].y);
                acc[c].z = fmaf(s[j], v4.z, acc[c].z);
                acc[c].w = fmaf(s[j], v4.w, acc[c].w);
            }
        }
    }

    // One division per row, at the very end; and the row's log-sum-exp, the one number the backward pass needs to
    // rebuild its row of P: P_ij = exp(scale * q_i . k_j - LSE_i); and what its rounding lost (fa_math.h says why).
    // The threads of a row hold the same m_i and l_i.
    if (!row_exists) return;
    const float inv_l = 1.0f / l_i;
#pragma unroll
    for (int c = 0; c < CHUNKS; c++)
        reinterpret_cast<float4 *>(o + i * t.o_strides.s)[ForwardRowSplit<D>::chunk(c, part)] =
            make_float4(acc[c].x * inv_l, acc[c].y * inv_l, acc[c].z * inv_l, acc[c].w * inv_l);
    float residual;
    const float row_lse = lse_from_base2(m_i, l_i, &residual);
    if (part == 0) t.lse[bh * S_q + i] = row_lse;
    if (part == 0 && t.lse_residual) t.lse_residual[bh * S_q + i] = residual;
}

// Launches one instantiation. The two tiles can pass the 48 KiB a kernel gets without asking (D = 128 with
// BLOCK_N = 64 needs 64 KiB), so the kernel asks for what it uses.
template <int D, int BLOCK_M, int BLOCK_N>
static void launch(const fa_shape *shape, const forward_tensors *t, int64_t group) {
    auto kernel = flash_forward_gqa_kernel<D, BLOCK_M, BLOCK_N>;
    const int smem_bytes = 2 * BLOCK_N * D * (int)sizeof(float);
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    const unsigned int q_tiles = (unsigned int)((shape->Sq + BLOCK_M - 1) / BLOCK_M);
    const float qk_scale = shape->scale * LOG2E;
    const int64_t BH = shape->B * shape->H;
    for (int64_t bh_first = 0; bh_first < BH; bh_first += MAX_GRID_Y) {   // at most MAX_GRID_Y heads a launch
        kernel<<<dim3(q_tiles, heads_in_launch(BH, bh_first)), BLOCK_M * ForwardRowSplit<D>::THREADS_PER_ROW,
                 smem_bytes>>>(*t, *shape, bh_first, qk_scale, group);
        FA_CUDA_CHECK_LAUNCH();
    }
}

// The one dispatch: (D, BLOCK_M, BLOCK_N) to the instantiation compiled for it (the header lists them).
template <int D>
static void launch_tiles(const fa_shape *shape, int block_m, int block_n, const forward_tensors *t, int64_t group) {
    if (block_m == 64 && block_n == 32) launch<D, 64, 32>(shape, t, group);
    else if (block_m == 64 && block_n == 64) launch<D, 64, 64>(shape, t, group);
    else if (block_m == 128 && block_n == 64) launch<D, 128, 64>(shape, t, group);
    else fa_die("the CUDA kernel is compiled for BLOCK_M x BLOCK_N = %s, not %d x %d",
                FLASH4D_CUDA_TILES_TEXT, block_m, block_n);
}

extern "C" void flash_forward_gqa_cuda(const fa_shape *shape, int64_t H_kv, int block_m, int block_n,
                                       const forward_tensors *t) {
    check_float4_tensors(t);   // fa_contract.h
    switch (shape->D) {
    case 16: launch_tiles<16>(shape, block_m, block_n, t, shape->H / H_kv); break;
    case 32: launch_tiles<32>(shape, block_m, block_n, t, shape->H / H_kv); break;
    case 64: launch_tiles<64>(shape, block_m, block_n, t, shape->H / H_kv); break;
    case 128: launch_tiles<128>(shape, block_m, block_n, t, shape->H / H_kv); break;
    default: fa_die("the CUDA kernel supports D in {16, 32, 64, 128}, not %lld", (long long)shape->D);
    }
}
