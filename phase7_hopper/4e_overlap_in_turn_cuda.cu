// 4e_overlap_in_turn_cuda.cu - phase 7, step 4e, on the GPU: both overlaps at once. The consumers still take turns
// on the tensor cores (ping-pong), and inside each turn the softmax of tile n runs while the tensor cores still add
// tile n - 1's P V; fp16 or bf16 inputs.
//
// What it changes against step 4d (phase7_hopper/4d_split_barriers_cuda.cu):
//   - after its turn a consumer waits for S_n only (wgmma_wait<1>: the groups complete in order, and P_{n-1} V_{n-1}
//     was committed after S_n), releases K_n's buffer, and computes tile n's mask and softmax on S_n's accumulators
//     while P_{n-1} V_{n-1} is still running; then wgmma_wait<0>, V_{n-1}'s buffer released, O rescaled.
//   - P_n is packed into its registers after that wait (pack_p, split out of softmax_tile): the product in flight
//     reads the previous P from the same registers, and a write to them before the wait would make ptxas keep the
//     products in order itself (C7513, step 5 explains it), undoing the overlap.
// In step 4d a consumer's softmax started only when both of its products were done; here it starts half a turn
// earlier, and the next turn's products are issued that much sooner. Step 5 made the same change on step 3, where
// without turns the two consumers' products and softmaxes collided; here the turns keep them apart.
// CPU twin:  phase5_tensor_cores/3_pipeline_cpu.c (the same sums in the same order per tile; only subnormal p differ)
// Diff:      diff -u phase7_hopper/4d_split_barriers_cuda.cu phase7_hopper/4e_overlap_in_turn_cuda.cu
// Run:       build/bin/phase7_hopper --impl cuda --step 4 --dtype bf16 --B 4 --H 16 --S 4096 --D 64
//                --block-m 192 --block-n 128
//
// Needs sm_90a (an H100 or H200): built only for it. Thread mapping: block = 1 + BLOCK_M / 64 warpgroups; consumer
// warpgroup c (warpgroup c + 1 of the block) owns query rows q_start + 64c .. + 63 and its warp w rows
// q_start + 64c + 16w .. + 15; lane L of a warp is "g = L / 4, t = L % 4" in every fragment.
#include "fa_cuda_check.h"
#include "fa_mma.cuh"    // pack_pair, exp2_ftz, the sizes of one mma (wgmma keeps its fragments)
#include "fa_warp.cuh"   // WARP_SIZE, FULL_WARP
#include "fa_half.h"
#include "fa_contract.h"
#include "hopper.h"
#include "tma.cuh"
#include "max_key.cuh"
#include "wgmma.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define WARPGROUP_ROWS 64   // query rows per warpgroup: the M of every wgmma
#define STAGES 2            // K/V buffers in the ring
#define WARPGROUP_THREADS 128
#define PRODUCER_REGISTERS 24    // setmaxnreg: what the producer keeps (it holds a few indices and addresses)
// What each consumer thread gets: the block's 65536 registers less the producer's, shared by the CONSUMERS
// warpgroups, in multiples of 8: 240 for two (24 + 2 x 240 = 504 <= 512 a thread slot), 160 for three.
template <int CONSUMERS> __host__ __device__ constexpr int consumer_registers() {
    return (65536 / WARPGROUP_THREADS - PRODUCER_REGISTERS) / CONSUMERS / 8 * 8;
}
#define TURN_BARRIER 1           // named barriers 1 to 3: consumer warpgroup c's turn on the tensor cores (0 is
                                 // __syncthreads')

// ---------------------------------------------------------------------------------------------------------------
// The PTX helpers: wgmma, its descriptors and its protocol in wgmma.cuh; TMA and mbarriers in tma.cuh; P's packing
// in fa_mma.cuh.

// Everything one launch needs, passed as one __grid_constant__ parameter: the tensor maps of Q, K and V (TMA reads
// them from parameter space), then the outputs and the problem.
typedef struct {
    CUtensorMap q_map, k_map, v_map;   // [B, H, S, D] in T, boxes of 64 halves x BLOCK_M (Q) or BLOCK_N (K, V) rows
    float *o;                          // [B, H, S_q, D] float32
    fa_strides o_strides;
    float *lse;                        // [B, H, S_q]
    int64_t S_q, S_k, H, bh_first;
    float scale, qk_scale;
    int causal;
    const void *q, *k;                 // Q and K again, for the LSE's max score in double (max_key.cuh)
    fa_strides q_strides, k_strides;
} forward_params;

// How many K tiles the block visits: up to the end of K or, causal, up to the first tile in the future.
template <int BLOCK_M, int BLOCK_N>
__device__ __forceinline__ int64_t tiles_to_visit(const forward_params &p, int64_t q_start) {
    int64_t n = 0;
    while (n * BLOCK_N < p.S_k &&
           causal_tile_stage(p.causal, q_start, n * BLOCK_N, BLOCK_M, BLOCK_N, p.S_q, p.S_k) != TILE_FUTURE)
        n++;
    return n;
}

// One K or V tile into its ring buffer, announced on the buffer's "landed" barrier, once the consumers have emptied
// the buffer (from its second use on: the (n / STAGES - 1)-th completion of its "empty" barrier).
template <typename T, int D, int BLOCK_N>
__device__ __forceinline__ void produce_tile(T *tile, const CUtensorMap *map, uint64_t *landed, uint64_t *empty,
                                             int64_t n, int64_t k_start, int64_t h, int64_t b) {
    if (n >= STAGES) mbarrier_wait(empty, (uint32_t)(n / STAGES - 1) % 2);
    mbarrier_arrive_expect_tx(landed, BLOCK_N * D * sizeof(T));
    for (int c = 0; c < D / ATOM_HALVES; c++)
        tma_load_4d(tile + c * BLOCK_N * ATOM_HALVES, map, c * ATOM_HALVES, (int)k_start, (int)h, (int)b, landed);
}

// The producer: one thread asks the copy engine for the Q tile, then for every K tile and V tile the block needs,
// in order: tile n goes into ring buffer n % STAGES of its kind.
template <typename T, int D, int BLOCK_M, int BLOCK_N>
__device__ __forceinline__ void produce_tiles(const forward_params &p, T *q_tile, T *k_tiles, T *v_tiles,
                                              uint64_t *q_landed, uint64_t *k_landed, uint64_t *k_empty,
                                              uint64_t *v_landed, uint64_t *v_empty, int64_t q_start, int64_t h,
                                              int64_t b) {
    constexpr int TILE = BLOCK_N * D;
    mbarrier_arrive_expect_tx(q_landed, BLOCK_M * D * sizeof(T));
    for (int c = 0; c < D / ATOM_HALVES; c++)
        tma_load_4d(q_tile + c * BLOCK_M * ATOM_HALVES, &p.q_map, c * ATOM_HALVES, (int)q_start, (int)h, (int)b,
                    q_landed);
    const int64_t n_tiles = tiles_to_visit<BLOCK_M, BLOCK_N>(p, q_start);
    for (int64_t n = 0, k_start = 0; n < n_tiles; n++, k_start += BLOCK_N) {
        const int buffer = (int)(n % STAGES);
        produce_tile<T, D, BLOCK_N>(k_tiles + buffer * TILE, &p.k_map, &k_landed[buffer], &k_empty[buffer], n,
                                    k_start, h, b);
        produce_tile<T, D, BLOCK_N>(v_tiles + buffer * TILE, &p.v_map, &v_landed[buffer], &v_empty[buffer], n,
                                    k_start, h, b);
    }
}

// --- One tile's three stages, for one consumer warpgroup ---------------------------------------------------------
// S = Q K^T, 64 rows x BLOCK_N keys: s[kb] is this lane's accumulator fragment of keys 8kb .. 8kb + 7, the layout of
// phase 5 (wgmma.cuh). One wgmma covers all BLOCK_N keys (64 or 128) and 16 dimensions; A (Q) and B (K, stored
// [key][d]: "K-major", as the product wants) are both read from shared memory. Issued and committed as one group.
template <typename T, int D, int BLOCK_M, int BLOCK_N>
__device__ __forceinline__ void issue_scores(float s[][4], const T *q_rows, const T *k_tile) {
    constexpr int KEY_BLOCKS = BLOCK_N / MMA_N;
#pragma unroll
    for (int kb = 0; kb < KEY_BLOCKS; kb++) s[kb][0] = s[kb][1] = s[kb][2] = s[kb][3] = 0.0f;
    keep_in_registers<KEY_BLOCKS>(s);
    wgmma_fence();
#pragma unroll
    for (int ds = 0; ds < D / MMA_K; ds++) {
        const uint64_t q_desc = smem_descriptor(q_rows + swizzle<BLOCK_M>(0, ds * MMA_K / CHUNK), 16, ATOM_BYTES);
        const T *keys = k_tile + swizzle<BLOCK_N>(0, ds * MMA_K / CHUNK);
        wgmma_ss<BLOCK_N>(s, q_desc, smem_descriptor(keys, 16, ATOM_BYTES), T());
    }
    wgmma_commit();
}

// O += P V. V is stored [key][d]: the sum runs across its rows, so wgmma reads it "MN-major" (transposed), 16 keys x
// all D dimensions per instruction (at D = 128 its two 64-column blocks, BLOCK_N x 128 bytes apart); P is the A operand,
// in registers. Issued and committed as one group.
template <typename T, int D, int BLOCK_N>
__device__ __forceinline__ void issue_values(float o_acc[][4], uint32_t p_frag[][4], const T *v_tile) {
    constexpr int D_BLOCKS = D / MMA_N;
    keep_in_registers<D_BLOCKS>(o_acc);
    wgmma_fence();   // o_acc was rescaled and p_frag written by ordinary instructions
#pragma unroll
    for (int ks = 0; ks < BLOCK_N / MMA_K; ks++) {
        const T *values = v_tile + swizzle<BLOCK_N>(ks * MMA_K, 0);
        wgmma_rs<D>(o_acc, p_frag[ks], smem_descriptor(values, BLOCK_N * 128, ATOM_BYTES), T());
    }
    wgmma_commit();
}

// The mask and the online softmax of one tile of scores: m_i and l_i move on, alpha is what O must be multiplied by
// before this tile's P V is added, and s becomes P in float32, in place (l_i sums it unrounded; pack_p rounds it to
// T later). The lane's rows are row_g and row_g + 8; a row's BLOCK_N scores are spread over the 4 lanes of a quad.
template <typename T, int BLOCK_N>
__device__ __forceinline__ void softmax_tile(float s[][4], float m_i[2], float l_i[2], int max_tile[2],
                                             float2 *max_copies, int warp, int lane, float alpha[2], int stage,
                                             int64_t k_start, int64_t row_g, int64_t S_k, float qk_scale, int t) {
    constexpr int KEY_BLOCKS = BLOCK_N / MMA_N;
    // Mask: keys past the last one a row may see (S_k; on a diagonal tile, the row itself) get -INFINITY. Only the
    // diagonal tiles and the last tile have any (a test uniform over the block). The scores stay raw.
    if (stage == TILE_DIAGONAL || k_start + BLOCK_N > S_k) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int64_t row = row_g + 8 * r, last_key = stage == TILE_DIAGONAL && row < S_k - 1 ? row : S_k - 1;
#pragma unroll
            for (int kb = 0; kb < KEY_BLOCKS; kb++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    if (k_start + kb * MMA_N + 2 * t + e > last_key) s[kb][2 * r + e] = -INFINITY;
        }
    }
    float m_scaled[2], row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float m_tile = -INFINITY;
#pragma unroll
        for (int kb = 0; kb < KEY_BLOCKS; kb++) m_tile = fmaxf(m_tile, fmaxf(s[kb][2 * r], s[kb][2 * r + 1]));
        m_tile = fmaxf(m_tile, __shfl_xor_sync(FULL_WARP, m_tile, 1));
        m_tile = fmaxf(m_tile, __shfl_xor_sync(FULL_WARP, m_tile, 2));
        update_max_tile<KEY_BLOCKS>(max_tile[r], max_copies, warp, lane, s, r, m_tile, m_i[r], k_start);
        const float m_new = fmaxf(m_i[r], m_tile);
        // A row that has seen no key yet has m_new = -inf; subtracting it would give -inf - -inf = NaN.
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        m_scaled[r] = m_use * qk_scale;
        // Everything accumulated so far was relative to the old max: alpha moves it to the new one.
        alpha[r] = exp2_ftz((m_i[r] - m_use) * qk_scale);
        m_i[r] = m_new;
    }
#pragma unroll
    for (int kb = 0; kb < KEY_BLOCKS; kb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[kb][e] = exp2_ftz(fmaf(s[kb][e], qk_scale, -m_scaled[e / 2]));   // p_ij: one FFMA, one MUFU.EX2
            row_sum[e / 2] += s[kb][e];
        }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        row_sum[r] += __shfl_xor_sync(FULL_WARP, row_sum[r], 1);
        row_sum[r] += __shfl_xor_sync(FULL_WARP, row_sum[r], 2);
        l_i[r] = l_i[r] * alpha[r] + row_sum[r];
    }
}

// P_n, rounded to T, as the A operand of P_n V_n: the A operand of keys 16ks .. 16ks + 15 is the two S fragments of
// key blocks 2ks and 2ks + 1. Called only when no product in flight reads p_frag.
template <typename T, int BLOCK_N>
__device__ __forceinline__ void pack_p(const float s[][4], uint32_t p_frag[][4]) {
#pragma unroll
    for (int ks = 0; ks < BLOCK_N / MMA_K; ks++) {
        p_frag[ks][0] = pack_pair(s[2 * ks][0], s[2 * ks][1], T());
        p_frag[ks][1] = pack_pair(s[2 * ks][2], s[2 * ks][3], T());
        p_frag[ks][2] = pack_pair(s[2 * ks + 1][0], s[2 * ks + 1][1], T());
        p_frag[ks][3] = pack_pair(s[2 * ks + 1][2], s[2 * ks + 1][3], T());
    }
}

// grid: (number of Q tiles, heads of this launch), block: 1 producer and BLOCK_M / 64 consumer warpgroups.
// Shared memory: the Q tile [BLOCK_M][D] and STAGES buffers of the K tile and the V tile [BLOCK_N][D], all T, in
// swizzle atoms, each tile starting on a 1024-byte boundary; then one mbarrier for Q and two per K or V buffer.
// The 1 in __launch_bounds__ gives the kernel a register cap at entry, which setmaxnreg needs.
template <typename T, int D, int BLOCK_M, int BLOCK_N>
__global__ void __launch_bounds__((BLOCK_M / WARPGROUP_ROWS + 1) * WARPGROUP_THREADS, 1)
flash_forward_overlap_in_turn_kernel(const __grid_constant__ forward_params p) {
    constexpr int KEY_BLOCKS = BLOCK_N / MMA_N;   // 8-key column blocks of S (one accumulator fragment each)
    constexpr int KEY_STEPS = BLOCK_N / MMA_K;    // wgmma steps of O += P V along the keys
    constexpr int D_BLOCKS = D / MMA_N;           // 8-dimension column blocks of O (one accumulator fragment each)
    extern __shared__ uint8_t smem_raw[];
    constexpr int TILE = BLOCK_N * D;             // halves in one K (or V) tile
    // wgmma's swizzle atoms start on 1024-byte boundaries: the launch asks for ATOM_BYTES more than the tiles need.
    uint8_t *smem = smem_raw + (ATOM_BYTES - (uint32_t)__cvta_generic_to_shared(smem_raw) % ATOM_BYTES) % ATOM_BYTES;
    T *q_tile = reinterpret_cast<T *>(smem);      // [BLOCK_M][D]
    T *k_tiles = q_tile + BLOCK_M * D;            // [STAGES][BLOCK_N][D]: buffer n % STAGES holds K tile n
    T *v_tiles = k_tiles + STAGES * TILE;         // [STAGES][BLOCK_N][D]
    float2 *max_copies = reinterpret_cast<float2 *>(v_tiles + STAGES * TILE);   // the score copies (max_key.cuh)
    uint64_t *q_landed = reinterpret_cast<uint64_t *>(max_copies + BLOCK_M * BLOCK_N / 2);
    uint64_t *k_landed = q_landed + 1;            // [STAGES]: K buffer s's tile has landed
    uint64_t *k_empty = k_landed + STAGES;        // [STAGES]: every consumer is done with K buffer s
    uint64_t *v_landed = k_empty + STAGES;        // [STAGES]: the same for the V buffers
    uint64_t *v_empty = v_landed + STAGES;

    // The grid's second index is the head: (b, h) from bh; TMA finds the head from its coordinates.
    const int64_t S_q = p.S_q, S_k = p.S_k, bh = p.bh_first + blockIdx.y, b = bh / p.H, h = bh % p.H;
    const int causal = p.causal;
    const float qk_scale = p.qk_scale;
    float *o = p.o + b * p.o_strides.b + h * p.o_strides.h;
    float *lse = p.lse + bh * S_q;
    const T *q_head = static_cast<const T *>(p.q) + b * p.q_strides.b + h * p.q_strides.h;
    const T *k_head = static_cast<const T *>(p.k) + b * p.k_strides.b + h * p.k_strides.h;

    // Causal: the last Q tiles see the most keys, and the first blocks launched get them.
    const int64_t q_start = (int64_t)(gridDim.x - 1 - blockIdx.x) * BLOCK_M;
    constexpr int CONSUMER_THREADS = BLOCK_M / WARPGROUP_ROWS * WARPGROUP_THREADS;
    if (threadIdx.x == 0) {
        mbarrier_init(q_landed, 1);
        for (int s = 0; s < STAGES; s++) {
            mbarrier_init(&k_landed[s], 1);
            mbarrier_init(&k_empty[s], CONSUMER_THREADS);
            mbarrier_init(&v_landed[s], 1);
            mbarrier_init(&v_empty[s], CONSUMER_THREADS);
        }
        fence_barrier_init();
    }
    __syncthreads();   // the barriers are initialised before anyone waits on them

    // The producer warpgroup: gives up registers, and its first thread moves every tile.
    if (threadIdx.x < WARPGROUP_THREADS) {
        setmaxnreg_dec<PRODUCER_REGISTERS>();
        if (threadIdx.x == 0)
            produce_tiles<T, D, BLOCK_M, BLOCK_N>(p, q_tile, k_tiles, v_tiles, q_landed, k_landed, k_empty, v_landed,
                                                  v_empty, q_start, h, b);
        return;
    }
    // The consumers: warp `warp` (0 .. BLOCK_M / 16 - 1) of the consumer warpgroups.
    setmaxnreg_inc<consumer_registers<BLOCK_M / WARPGROUP_ROWS>()>();
    const int warp = threadIdx.x / WARP_SIZE - WARPGROUP_THREADS / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 4, t = lane % 4, warpgroup = warp / 4;
    // This lane's two query rows: row_g (C elements 0 and 1 of every fragment) and row_g + 8 (elements 2 and 3).
    // Rows past S_q load zeros, compute like the others and store nothing.
    const int64_t row_g = q_start + warp * WARP_ROWS + g;
    mbarrier_wait(q_landed, 0);
    // Q stays in shared memory: each wgmma of S = Q K^T reads its warpgroup's 64 rows x 16 dimensions there.
    const T *q_rows = q_tile + warpgroup * WARPGROUP_ROWS * ATOM_HALVES;

    // O and the row statistics, in registers: o_acc[db] is the accumulator fragment of dimensions 8db .. 8db + 7.
    float o_acc[D_BLOCKS][4];
#pragma unroll
    for (int db = 0; db < D_BLOCKS; db++) o_acc[db][0] = o_acc[db][1] = o_acc[db][2] = o_acc[db][3] = 0.0f;
    float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.0f, 0.0f};   // rows row_g and row_g + 8, raw-score max
    int max_tile[2] = {-1, -1};   // the first key of the tile where each row's max last moved (max_key.cuh)

    // Every turn of a consumer but its first and last issues tile n's S = Q K^T and, behind it, tile n - 1's P V, and
    // computes tile n's softmax while that P V still runs. The first tile enters the pipeline alone (its scores, in
    // a turn of their own) and the last leaves it alone (its P V): n_tiles + 1 turns in all, as in step 4d. The
    // turns go round, 0, 1, 2, 0, ...: warpgroup 0 takes the first, which the last warpgroup gives it.
    const int64_t n_tiles = tiles_to_visit<BLOCK_M, BLOCK_N>(p, q_start);   // at least 1: row q_start sees key 0
    constexpr int CONSUMERS = BLOCK_M / WARPGROUP_ROWS, TURN_THREADS = 2 * WARPGROUP_THREADS;
    const int next = (warpgroup + 1) % CONSUMERS;
    if (warpgroup == CONSUMERS - 1) named_barrier_arrive(TURN_BARRIER, TURN_THREADS);
    float s[KEY_BLOCKS][4], alpha[2];
    uint32_t p_frag[KEY_STEPS][4];   // P of the tile whose P V is issued next

    // Tile 0: its scores, waited for, and its softmax (O is still 0: nothing to rescale).
    named_barrier_sync(TURN_BARRIER + warpgroup, TURN_THREADS);
    mbarrier_wait(&k_landed[0], 0);
    issue_scores<T, D, BLOCK_M, BLOCK_N>(s, q_rows, k_tiles);
    named_barrier_arrive(TURN_BARRIER + next, TURN_THREADS);
    wgmma_wait<0>();
    keep_in_registers<KEY_BLOCKS>(s);
    mbarrier_arrive(&k_empty[0]);
    softmax_tile<T, BLOCK_N>(s, m_i, l_i, max_tile, max_copies, warp, lane, alpha,
                             causal_tile_stage(causal, q_start, 0, BLOCK_M, BLOCK_N, S_q, S_k), 0, row_g, S_k,
                             qk_scale, t);
    pack_p<T, BLOCK_N>(s, p_frag);

    for (int64_t n = 1, k_start = BLOCK_N; n < n_tiles; n++, k_start += BLOCK_N) {
        // Tile n lands in buffer n % STAGES, the (n / STAGES)-th time that buffer fills: that parity of its barrier.
        const int buffer = (int)(n % STAGES), previous = (int)((n - 1) % STAGES);
        named_barrier_sync(TURN_BARRIER + warpgroup, TURN_THREADS);   // this warpgroup's turn
        mbarrier_wait(&k_landed[buffer], (uint32_t)(n / STAGES) % 2);
        issue_scores<T, D, BLOCK_M, BLOCK_N>(s, q_rows, k_tiles + buffer * TILE);
        mbarrier_wait(&v_landed[previous], (uint32_t)((n - 1) / STAGES) % 2);
        issue_values<T, D, BLOCK_N>(o_acc, p_frag, v_tiles + previous * TILE);
        // The next warpgroup's turn: its products queue behind these.
        named_barrier_arrive(TURN_BARRIER + next, TURN_THREADS);
        wgmma_wait<1>();   // S_n is done (groups complete in order); P_{n-1} V_{n-1} may still run
        keep_in_registers<KEY_BLOCKS>(s);
        mbarrier_arrive(&k_empty[buffer]);   // this warpgroup has read K_n: the producer may refill its buffer
        // Tile n's softmax, while the tensor cores add P_{n-1} V_{n-1} into O. The causal stage depends on the
        // block's indices only.
        const int stage = causal_tile_stage(causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        softmax_tile<T, BLOCK_N>(s, m_i, l_i, max_tile, max_copies, warp, lane, alpha, stage, k_start, row_g, S_k,
                                 qk_scale, t);
        wgmma_wait<0>();
        keep_in_registers<D_BLOCKS>(o_acc);
        keep_in_registers<KEY_STEPS>(p_frag);   // the product read p_frag until here: its registers stay untouched
        mbarrier_arrive(&v_empty[previous]);   // and V_{n-1}: its buffer too
        // O holds every tile before n, relative to the old max: alpha moves it to tile n's.
#pragma unroll
        for (int db = 0; db < D_BLOCKS; db++)
#pragma unroll
            for (int e = 0; e < 4; e++) o_acc[db][e] *= alpha[e / 2];
        pack_p<T, BLOCK_N>(s, p_frag);
    }

    // The last tile's P V, in a turn of its own. (The last warpgroup's last turn is handed to nobody: warpgroup 0
    // has finished.)
    const int last = (int)((n_tiles - 1) % STAGES);
    named_barrier_sync(TURN_BARRIER + warpgroup, TURN_THREADS);
    mbarrier_wait(&v_landed[last], (uint32_t)((n_tiles - 1) / STAGES) % 2);
    issue_values<T, D, BLOCK_N>(o_acc, p_frag, v_tiles + last * TILE);
    if (warpgroup < CONSUMERS - 1) named_barrier_arrive(TURN_BARRIER + next, TURN_THREADS);
    wgmma_wait<0>();
    keep_in_registers<D_BLOCKS>(o_acc);
    keep_in_registers<KEY_STEPS>(p_frag);
    mbarrier_arrive(&v_empty[last]);

    // One division per row, at the very end, and the row's log-sum-exp. Every lane of a quad holds the same m_i and
    // l_i; lane t stores dimensions 8db + 2t and 8db + 2t + 1 of its two rows.
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t row = row_g + 8 * r;
        // The LSE from the max key's score in double (max_key.cuh): the whole quad computes it, before the row test.
        const int key = max_key_of_row<KEY_BLOCKS>(max_copies, warp, lane, r, row < S_q ? max_tile[r] : -1, m_i[r]);
        const float lse_r = row_lse<T, D>(q_head + row * p.q_strides.s, k_head, p.k_strides.s,
                                         key, p.scale, qk_scale, m_i[r], l_i[r], t);
        if (row >= S_q) continue;
        const float inv_l = 1.0f / l_i[r];
#pragma unroll
        for (int db = 0; db < D_BLOCKS; db++)
            *reinterpret_cast<float2 *>(o + row * p.o_strides.s + db * MMA_N + 2 * t) =
                make_float2(o_acc[db][2 * r] * inv_l, o_acc[db][2 * r + 1] * inv_l);
        if (t == 0) lse[row] = lse_r;
    }
}

// The kernel reads rows of T 16 bytes at a time and writes O as float2s: each row must start on that many bytes,
// with its D elements next to each other.
static void check_rows(const char *name, const void *x, fa_strides strides, int element_bytes, int row_align) {
    const int64_t per = row_align / element_bytes;   // elements in one aligned unit
    const int aligned = ((uintptr_t)x % row_align == 0) && strides.b % per == 0 && strides.h % per == 0 &&
                        strides.s % per == 0;
    if (strides.d != 1 || !aligned)
        fa_die("the Hopper kernels need %s with stride d = 1, the other strides multiples of %lld and a "
               "%d-byte aligned pointer (got strides %lld, %lld, %lld, %lld)", name, (long long)per, row_align,
               (long long)strides.b, (long long)strides.h, (long long)strides.s, (long long)strides.d);
}

// Launches one instantiation. The tiles pass the 48 KiB a kernel gets without asking (D = 128, 128 x 128 tiles need
// 160 KiB with two K/V buffers), so the kernel asks for what it uses, plus the alignment and the barriers.
template <typename T, int D, int BLOCK_M, int BLOCK_N>
static void launch(const fa_shape *shape, const void *q, fa_strides q_strides, const void *k, fa_strides k_strides,
                   const void *v, fa_strides v_strides, float *o, fa_strides o_strides, float *lse) {
    auto kernel = flash_forward_overlap_in_turn_kernel<T, D, BLOCK_M, BLOCK_N>;
    const int smem_bytes = (int)flash_forward_split_barriers_cuda_smem_bytes(D, BLOCK_M, BLOCK_N);
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    const unsigned int q_tiles = (unsigned int)((shape->Sq + BLOCK_M - 1) / BLOCK_M);
    forward_params p = {make_tensor_map(q, q_strides, shape, shape->Sq, BLOCK_M),
                        make_tensor_map(k, k_strides, shape, shape->Sk, BLOCK_N),
                        make_tensor_map(v, v_strides, shape, shape->Sk, BLOCK_N),
                        o, o_strides, lse, shape->Sq, shape->Sk, shape->H, 0, shape->scale, shape->scale * LOG2E,
                        shape->causal, q, k, q_strides, k_strides};
    const int64_t BH = shape->B * shape->H;
    for (int64_t bh_first = 0; bh_first < BH; bh_first += MAX_GRID_Y) {   // fa_contract.h: the grid limit
        p.bh_first = bh_first;
        kernel<<<dim3(q_tiles, heads_in_launch(BH, bh_first)), (BLOCK_M / WARPGROUP_ROWS + 1) * WARPGROUP_THREADS,
                 smem_bytes>>>(p);
        FA_CUDA_CHECK_LAUNCH();
    }
}

template <typename T, int D>
static void launch_tiles(const fa_shape *shape, int block_m, int block_n, const void *q, fa_strides q_strides,
                         const void *k, fa_strides k_strides, const void *v, fa_strides v_strides, float *o,
                         fa_strides o_strides, float *lse) {
    if (block_m == 128 && block_n == 64)
        return launch<T, D, 128, 64>(shape, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
    if (block_m == 128 && block_n == 128)
        return launch<T, D, 128, 128>(shape, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
    if constexpr (D == 64) {
        if (block_m == 192 && block_n == 64)
            return launch<T, D, 192, 64>(shape, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
        if (block_m == 192 && block_n == 128)
            return launch<T, D, 192, 128>(shape, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
    }
    fa_die("the kernels of step 4e are compiled for BLOCK_M x BLOCK_N = %s, not %d x %d at D = %d",
           HOPPER_MANY_CONSUMERS_TILES_TEXT, block_m, block_n, D);
}

template <typename T>
static void launch_head_dim(const fa_shape *shape, int block_m, int block_n, const void *q, fa_strides q_strides,
                            const void *k, fa_strides k_strides, const void *v, fa_strides v_strides, float *o,
                            fa_strides o_strides, float *lse) {
    switch (shape->D) {
    case 64:
        launch_tiles<T, 64>(shape, block_m, block_n, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
        break;
    case 128:
        launch_tiles<T, 128>(shape, block_m, block_n, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
        break;
    default: fa_die("the Hopper kernels support D in {64, 128}, not %lld", (long long)shape->D);
    }
}

extern "C" void flash_forward_overlap_in_turn_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                                  const tc_forward_tensors *t) {
    const void *q = t->q, *k = t->k, *v = t->v;
    const fa_strides q_strides = t->q_strides, k_strides = t->k_strides, v_strides = t->v_strides;
    const fa_strides o_strides = t->o_strides;
    float *o = t->o, *lse = t->lse;
    check_rows("Q", q, q_strides, 2, 16);
    check_rows("K", k, k_strides, 2, 16);
    check_rows("V", v, v_strides, 2, 16);
    check_rows("O", o, o_strides, 4, 8);
    if (dtype == FA_DTYPE_FP16)
        launch_head_dim<__half>(shape, block_m, block_n, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
    else if (dtype == FA_DTYPE_BF16)
        launch_head_dim<__nv_bfloat16>(shape, block_m, block_n, q, q_strides, k, k_strides, v, v_strides, o,
                                       o_strides, lse);
    else
        fa_die("the Hopper kernels take fp16 or bf16 inputs, not %s", fa_dtype_name(dtype));
}

