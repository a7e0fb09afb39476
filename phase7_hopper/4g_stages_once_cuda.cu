// 4g_stages_once_cuda.cu - phase 7, step 4g, on the GPU: step 4f with the causal bookkeeping of a Q tile worked out
// once, before its K loop; fp16 or bf16 inputs.
//
// What it changes against step 4f (phase7_hopper/4f_persistent_cuda.cu): Nsight Compute's per-instruction counts of
//   step 4e, causal against not (docs/09-hopper.md, "Beside cuDNN, under the profiler"), found work that a causal run
//   does in every tile and a non-causal run never: each tile's stage (causal_tile_stage: past the diagonal, on it or
//   in the future), worked out again per tile in 64-bit arithmetic, and the tiles counted one by one the same way;
//   and, on a diagonal tile, a mask of two 64-bit comparisons per score. Here, as phase 5 step 3g and 3i do:
//   - the number of K tiles is one formula, and so is the first tile that needs the mask (the first that reaches a
//     row's own key, or the short last tile): a tile is masked when its index reaches it, one comparison;
//   - on a masked tile, each row's last visible key becomes an offset in the lane's part of the tile, one 32-bit
//     number per row, and each score is compared with it as a constant of the unrolled loop.
// The same tiles are masked, the same scores get -inf: the same bits as step 4f.
// CPU twin:  phase5_tensor_cores/3_pipeline_cpu.c (the same sums in the same order per tile; only subnormal p differ)
// Diff:      diff -u phase7_hopper/4f_persistent_cuda.cu phase7_hopper/4g_stages_once_cuda.cu
// Run:       build/bin/phase7_hopper --impl cuda --step 4 --dtype bf16 --B 4 --H 16 --S 4096 --D 64
//                --block-m 192 --block-n 128
//
// Needs sm_90a (an H100 or H200): built only for it. Thread mapping: block = 1 + BLOCK_M / 64 warpgroups; in each
// tile, consumer warpgroup c (warpgroup c + 1 of the block) owns query rows q_start + 64c .. + 63 and its warp w rows
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
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define WARPGROUP_ROWS 64   // query rows per warpgroup: the M of every wgmma
#define STAGES 2            // K/V buffers in the ring
#define WARPGROUP_THREADS 128
#define PRODUCER_REGISTERS 32    // setmaxnreg: what the producer keeps (its queue and ring indices, addresses)
// What each consumer thread gets: the registers it had at entry (the SM's 65536 shared by the block's threads, in
// multiples of 8: 168 for 384 threads, 128 for 512) and its share of those the producer gives back. setmaxnreg.inc
// takes registers only from what setmaxnreg.dec released, not from those the launch left unallocated: asking for
// more waits for ever. 232 for two consumers, 160 for three. (Step 4e's producer keeps 24, which leaves its two
// consumers 240; the queue's producer needs 32 to keep its indices without spilling.)
template <int CONSUMERS> __host__ __device__ constexpr int consumer_registers() {
    constexpr int entry = 65536 / ((CONSUMERS + 1) * WARPGROUP_THREADS) / 8 * 8;
    return (entry + (entry - PRODUCER_REGISTERS) / CONSUMERS) / 8 * 8;
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
    int64_t S_q, S_k, H;
    int BH, q_tiles;                   // B H heads, q_tiles Q tiles per head: BH q_tiles tiles in all (an int)
    int head_group;                    // the queue's order (tile_at): heads whose tiles it lists together
    int *next_tile;                    // the queue: the number of the next tile nobody has taken yet
    float scale, qk_scale;
    int causal;
    const void *q, *k;                 // Q and K again, for the LSE's max score in double (max_key.cuh)
    fa_strides q_strides, k_strides;
} forward_params;

// How many K tiles the block visits: up to the end of K or, causal, up to the first tile in the future; one formula
// (fa_contract.h, beside the rule it follows).
template <int BLOCK_M, int BLOCK_N>
__device__ __forceinline__ int64_t tiles_to_visit(const forward_params &p, int64_t q_start) {
    return k_tiles_visited(p.causal, q_start, BLOCK_M, BLOCK_N, p.S_q, p.S_k);
}

// Tile i of the queue: its head bh and its first query row. Groups of head_group heads one after the other (the last
// group may have fewer); inside a group, rank 0 of every head, then rank 1, ..., where rank r is the r-th Q tile
// from the end (causal: the r-th heaviest). The launch picks head_group: causal, all the heads (the heaviest tiles
// of every head first, the lightest last, where they fill the gaps); not causal, one (every tile costs the same, and
// the blocks that run at once share one head's K and V in L2).
// 32-bit arithmetic: the producer does it with the few registers it keeps.
__device__ __forceinline__ void tile_at(const forward_params &p, int i, int BLOCK_M, int *bh, int *q_start) {
    const int group = i / (p.head_group * p.q_tiles), first_head = group * p.head_group;
    const int heads = min(p.BH - first_head, p.head_group);
    const int in_group = i - group * p.head_group * p.q_tiles;
    *bh = first_head + in_group % heads;
    *q_start = (p.q_tiles - 1 - in_group / heads) * BLOCK_M;
}

// One K or V tile into its ring buffer, announced on the buffer's "landed" barrier, once the consumers have emptied
// the buffer (from its second use on: the (n / STAGES - 1)-th completion of its "empty" barrier). n counts the
// block's tiles of this kind over all its Q tiles: the ring runs on from one Q tile to the next.
template <typename T, int D, int BLOCK_N>
__device__ __forceinline__ void produce_tile(T *tile, const CUtensorMap *map, uint64_t *landed, uint64_t *empty,
                                             int64_t n, int64_t k_start, int64_t h, int64_t b) {
    if (n >= STAGES) mbarrier_wait(empty, (uint32_t)(n / STAGES - 1) % 2);
    mbarrier_arrive_expect_tx(landed, BLOCK_N * D * sizeof(T));
    for (int c = 0; c < D / ATOM_HALVES; c++)
        tma_load_4d(tile + c * BLOCK_N * ATOM_HALVES, map, c * ATOM_HALVES, (int)k_start, (int)h, (int)b, landed);
}

// The producer: one thread takes tiles from the queue until it is empty. For each, it publishes the tile's number in
// shared memory and asks the copy engine for its Q tile (once the consumers have read the previous one for the last
// time: the Q-empty barrier's previous phase), then for every K tile and V tile of it, into the ring. The number
// goes out with the Q tile's "landed" barrier (an arrival releases the store before it); a number past the queue's
// end arrives without bytes, and tells the consumers to stop.
template <typename T, int D, int BLOCK_M, int BLOCK_N>
__device__ __forceinline__ void produce_tiles(const forward_params &p, T *q_tile, T *k_tiles, T *v_tiles,
                                              int *tile_slot, uint64_t *q_landed, uint64_t *q_empty,
                                              uint64_t *k_landed, uint64_t *k_empty, uint64_t *v_landed,
                                              uint64_t *v_empty) {
    constexpr int TILE = BLOCK_N * D;
    const int n_all = p.BH * p.q_tiles;
    int tile = atomicAdd(p.next_tile, 1), ring = 0;   // ring: K (and V) tiles this block has loaded so far
    for (int local = 0;; local++) {
        if (local > 0) mbarrier_wait(q_empty, (uint32_t)(local - 1) % 2);
        *tile_slot = tile;
        if (tile >= n_all) {
            mbarrier_arrive(q_landed);
            return;
        }
        int bh, q_start;
        tile_at(p, tile, BLOCK_M, &bh, &q_start);
        const int b = bh / (int)p.H, h = bh % (int)p.H;
        mbarrier_arrive_expect_tx(q_landed, BLOCK_M * D * sizeof(T));
        for (int c = 0; c < D / ATOM_HALVES; c++)
            tma_load_4d(q_tile + c * BLOCK_M * ATOM_HALVES, &p.q_map, c * ATOM_HALVES, (int)q_start, (int)h, (int)b,
                        q_landed);
        tile = atomicAdd(p.next_tile, 1);   // the next one's number, while this one's tiles load
        const int n_tiles = (int)tiles_to_visit<BLOCK_M, BLOCK_N>(p, q_start);
        for (int n = 0, k_start = 0; n < n_tiles; n++, k_start += BLOCK_N, ring++) {
            const int buffer = (int)(ring % STAGES);
            produce_tile<T, D, BLOCK_N>(k_tiles + buffer * TILE, &p.k_map, &k_landed[buffer], &k_empty[buffer], ring,
                                        k_start, h, b);
            produce_tile<T, D, BLOCK_N>(v_tiles + buffer * TILE, &p.v_map, &v_landed[buffer], &v_empty[buffer], ring,
                                        k_start, h, b);
        }
    }
}

// --- One tile's three stages, for one consumer warpgroup ---------------------------------------------------------
// S = Q K^T, 64 rows x BLOCK_N keys: s[kb] is this lane's accumulator fragment of keys 8kb .. 8kb + 7, the layout of
// phase 5 (wgmma.cuh). One wgmma covers all BLOCK_N keys (64 or 128) and 16 dimensions; A (Q) and B (K, stored
// [key][d]: "K-major", as the product wants) are both read from shared memory. Issued and committed as one group.
// The first wgmma has scale-d 0 (wgmma.cuh): it writes the first 16 dimensions' sum instead of adding it to s, so s
// needs no zeros before it. (ptxas folds zeros stored just before a wgmma into the instruction where it sees them;
// inside this kernel's loop over Q tiles it does not, and would set the 64 registers of s one by one, every K tile.)
template <typename T, int D, int BLOCK_M, int BLOCK_N>
__device__ __forceinline__ void issue_scores(float s[][4], const T *q_rows, const T *k_tile) {
    constexpr int KEY_BLOCKS = BLOCK_N / MMA_N;
    keep_in_registers<KEY_BLOCKS>(s);
    wgmma_fence();
#pragma unroll
    for (int ds = 0; ds < D / MMA_K; ds++) {
        const uint64_t q_desc = smem_descriptor(q_rows + swizzle<BLOCK_M>(0, ds * MMA_K / CHUNK), 16, ATOM_BYTES);
        const T *keys = k_tile + swizzle<BLOCK_N>(0, ds * MMA_K / CHUNK);
        if (ds == 0)
            wgmma_ss<BLOCK_N, T, 0>(s, q_desc, smem_descriptor(keys, 16, ATOM_BYTES), T());
        else
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
                                             float2 *max_copies, int warp, int lane, float alpha[2], bool masked,
                                             const int64_t last_key[2], int64_t k_start, float qk_scale, int t) {
    constexpr int KEY_BLOCKS = BLOCK_N / MMA_N;
    // Mask: keys past the last one a row may see (last_key: S_k - 1, or causal the row itself) get -INFINITY. Only
    // the tiles from first_masked_tile() on (fa_contract.h) have any (a test uniform over the block). The lane's
    // score e of key block kb is key k_start + 2t + 8kb + e: against the row's last key less k_start + 2t, one 32-bit
    // number per row (clamped to the tile), 8kb + e is a constant. The scores stay raw.
    if (masked) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int64_t offset = last_key[r] - k_start - 2 * t;
            const int last = (int)(offset < -1 ? -1 : offset > BLOCK_N ? BLOCK_N : offset);
#pragma unroll
            for (int kb = 0; kb < KEY_BLOCKS; kb++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    if (kb * MMA_N + e > last) s[kb][2 * r + e] = -INFINITY;
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

// grid: as many blocks as fit on the GPU at once (at most one per tile), block: 1 producer and BLOCK_M / 64 consumer
// warpgroups. Shared memory: the Q tile [BLOCK_M][D] and STAGES buffers of the K tile and the V tile [BLOCK_N][D],
// all T, in swizzle atoms, each tile starting on a 1024-byte boundary; then the score copies, one mbarrier for Q
// landed, two per K or V buffer, one for Q empty, and the slot of the current tile's number.
// The 1 in __launch_bounds__ gives the kernel a register cap at entry, which setmaxnreg needs.
template <typename T, int D, int BLOCK_M, int BLOCK_N>
__global__ void __launch_bounds__((BLOCK_M / WARPGROUP_ROWS + 1) * WARPGROUP_THREADS, 1)
flash_forward_stages_once_kernel(const __grid_constant__ forward_params p) {
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
    uint64_t *q_empty = v_empty + STAGES;         // every consumer has issued its last S = Q K^T of the tile
    int *tile_slot = reinterpret_cast<int *>(q_empty + 1);   // the number of the block's current tile

    const int64_t S_q = p.S_q, S_k = p.S_k;
    const int causal = p.causal;
    const float qk_scale = p.qk_scale;
    constexpr int CONSUMER_THREADS = BLOCK_M / WARPGROUP_ROWS * WARPGROUP_THREADS;
    if (threadIdx.x == 0) {
        mbarrier_init(q_landed, 1);
        mbarrier_init(q_empty, CONSUMER_THREADS);
        for (int s = 0; s < STAGES; s++) {
            mbarrier_init(&k_landed[s], 1);
            mbarrier_init(&k_empty[s], CONSUMER_THREADS);
            mbarrier_init(&v_landed[s], 1);
            mbarrier_init(&v_empty[s], CONSUMER_THREADS);
        }
        fence_barrier_init();
    }
    __syncthreads();   // the barriers are initialised before anyone waits on them

    // The producer warpgroup: gives up registers, and its first thread moves every tile of every Q tile.
    if (threadIdx.x < WARPGROUP_THREADS) {
        setmaxnreg_dec<PRODUCER_REGISTERS>();
        if (threadIdx.x == 0)
            produce_tiles<T, D, BLOCK_M, BLOCK_N>(p, q_tile, k_tiles, v_tiles, tile_slot, q_landed, q_empty,
                                                  k_landed, k_empty, v_landed, v_empty);
        return;
    }
    // The consumers: warp `warp` (0 .. BLOCK_M / 16 - 1) of the consumer warpgroups.
    setmaxnreg_inc<consumer_registers<BLOCK_M / WARPGROUP_ROWS>()>();
    const int warp = threadIdx.x / WARP_SIZE - WARPGROUP_THREADS / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 4, t = lane % 4, warpgroup = warp / 4;
    // Q stays in shared memory: each wgmma of S = Q K^T reads its warpgroup's 64 rows x 16 dimensions there.
    const T *q_rows = q_tile + warpgroup * WARPGROUP_ROWS * ATOM_HALVES;
    constexpr int CONSUMERS = BLOCK_M / WARPGROUP_ROWS, TURN_THREADS = 2 * WARPGROUP_THREADS;
    const int next = (warpgroup + 1) % CONSUMERS;
    // The turns go round, 0, 1, 2, 0, ..., over all the block's tiles: warpgroup 0 takes the first, which the last
    // warpgroup gives it, and the last warpgroup gives its last turn of a tile to warpgroup 0's first of the next.
    if (warpgroup == CONSUMERS - 1) named_barrier_arrive(TURN_BARRIER, TURN_THREADS);
    int ring = 0;   // the block's K (and V) tiles before this Q tile's first: the ring's position

    for (int local = 0;; local++) {
        // The tile's number, and its Q tile: the (local)-th completion of the Q barrier.
        mbarrier_wait(q_landed, (uint32_t)local % 2);
        // Read through a shuffle: the compiler then knows the number is the same in every lane, and keeps what
        // derives from it (the ring's buffer, the wgmma descriptors) in uniform registers, as step 4e's loop counter.
        const int tile = __shfl_sync(FULL_WARP, *tile_slot, 0);
        if (tile >= p.BH * p.q_tiles) break;
        int bh_, q_start_;
        tile_at(p, tile, BLOCK_M, &bh_, &q_start_);
        const int64_t bh = bh_, q_start = q_start_;
        const int64_t b = bh / p.H, h = bh % p.H;
        float *o = p.o + b * p.o_strides.b + h * p.o_strides.h;
        float *lse = p.lse + bh * S_q;
        const T *q_head = static_cast<const T *>(p.q) + b * p.q_strides.b + h * p.q_strides.h;
        const T *k_head = static_cast<const T *>(p.k) + b * p.k_strides.b + h * p.k_strides.h;
        // This lane's two query rows: row_g (C elements 0 and 1 of every fragment) and row_g + 8 (elements 2 and 3).
        // Rows past S_q load zeros, compute like the others and store nothing.
        const int64_t row_g = q_start + warp * WARP_ROWS + g;

        // O and the row statistics, in registers: o_acc[db] is the accumulator fragment of dimensions 8db .. 8db + 7.
        float o_acc[D_BLOCKS][4];
#pragma unroll
        for (int db = 0; db < D_BLOCKS; db++) o_acc[db][0] = o_acc[db][1] = o_acc[db][2] = o_acc[db][3] = 0.0f;
        float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.0f, 0.0f};   // rows row_g and row_g + 8, raw-score max
        int max_tile[2] = {-1, -1};   // the first key of the tile where each row's max last moved (max_key.cuh)

        // Every turn of a consumer but its first and last issues tile n's S = Q K^T and, behind it, tile n - 1's P V,
        // and computes tile n's softmax while that P V still runs. The first tile enters the pipeline alone (its
        // scores, in a turn of their own) and the last leaves it alone (its P V): n_tiles + 1 turns in all.
        const int64_t n_tiles = tiles_to_visit<BLOCK_M, BLOCK_N>(p, q_start);   // at least 1: row q_start sees key 0
        // What the mask needs, worked out once for the Q tile: from which tile on, and each row's last visible key.
        const int64_t first_masked = first_masked_tile(p.causal, q_start, BLOCK_N, p.S_k);   // fa_contract.h
        int64_t last_key[2];
#pragma unroll
        for (int r = 0; r < 2; r++)
            last_key[r] = causal && row_g + 8 * r < S_k - 1 ? row_g + 8 * r : S_k - 1;
        float s[KEY_BLOCKS][4], alpha[2];
        uint32_t p_frag[KEY_STEPS][4];   // P of the tile whose P V is issued next

        // Tile 0: its scores, waited for, and its softmax (O is still 0: nothing to rescale). K tile n of this Q tile
        // is the block's K tile ring + n: buffer (ring + n) % STAGES, that buffer's (ring + n) / STAGES-th filling.
        const int first = (int)(ring % STAGES);
        named_barrier_sync(TURN_BARRIER + warpgroup, TURN_THREADS);
        mbarrier_wait(&k_landed[first], (uint32_t)(ring / STAGES) % 2);
        issue_scores<T, D, BLOCK_M, BLOCK_N>(s, q_rows, k_tiles + first * TILE);
        named_barrier_arrive(TURN_BARRIER + next, TURN_THREADS);
        wgmma_wait<0>();
        keep_in_registers<KEY_BLOCKS>(s);
        mbarrier_arrive(&k_empty[first]);
        softmax_tile<T, BLOCK_N>(s, m_i, l_i, max_tile, max_copies, warp, lane, alpha, first_masked == 0, last_key,
                                 0, qk_scale, t);
        pack_p<T, BLOCK_N>(s, p_frag);

        for (int64_t n = 1, k_start = BLOCK_N; n < n_tiles; n++, k_start += BLOCK_N) {
            // Tile n lands in buffer (ring + n) % STAGES, the (ring + n) / STAGES-th time that buffer fills.
            const int r = ring + (int)n;
            const int buffer = (int)(r % STAGES), previous = (int)((r - 1) % STAGES);
            named_barrier_sync(TURN_BARRIER + warpgroup, TURN_THREADS);   // this warpgroup's turn
            mbarrier_wait(&k_landed[buffer], (uint32_t)(r / STAGES) % 2);
            issue_scores<T, D, BLOCK_M, BLOCK_N>(s, q_rows, k_tiles + buffer * TILE);
            mbarrier_wait(&v_landed[previous], (uint32_t)((r - 1) / STAGES) % 2);
            issue_values<T, D, BLOCK_N>(o_acc, p_frag, v_tiles + previous * TILE);
            // The next warpgroup's turn: its products queue behind these.
            named_barrier_arrive(TURN_BARRIER + next, TURN_THREADS);
            wgmma_wait<1>();   // S_n is done (groups complete in order); P_{n-1} V_{n-1} may still run
            keep_in_registers<KEY_BLOCKS>(s);
            mbarrier_arrive(&k_empty[buffer]);   // this warpgroup has read K_n: the producer may refill its buffer
            // Tile n's softmax, while the tensor cores add P_{n-1} V_{n-1} into O.
            softmax_tile<T, BLOCK_N>(s, m_i, l_i, max_tile, max_copies, warp, lane, alpha, n >= first_masked,
                                     last_key, k_start, qk_scale, t);
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
        // Every S = Q K^T of the tile is done: the producer may load the next Q tile (and its number) now.
        mbarrier_arrive(q_empty);

        // The last tile's P V, in a turn of its own, handed on to the next warpgroup: the last warpgroup's goes to
        // warpgroup 0's first turn of the next tile (or of the end, where warpgroup 0 takes it before it stops).
        const int last = (int)((ring + n_tiles - 1) % STAGES);
        named_barrier_sync(TURN_BARRIER + warpgroup, TURN_THREADS);
        mbarrier_wait(&v_landed[last], (uint32_t)((ring + n_tiles - 1) / STAGES) % 2);
        issue_values<T, D, BLOCK_N>(o_acc, p_frag, v_tiles + last * TILE);
        named_barrier_arrive(TURN_BARRIER + next, TURN_THREADS);
        wgmma_wait<0>();
        keep_in_registers<D_BLOCKS>(o_acc);
        keep_in_registers<KEY_STEPS>(p_frag);
        mbarrier_arrive(&v_empty[last]);
        ring += n_tiles;

        // One division per row, at the very end, and the row's log-sum-exp. Every lane of a quad holds the same m_i
        // and l_i; lane t stores dimensions 8db + 2t and 8db + 2t + 1 of its two rows.
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int64_t row = row_g + 8 * r;
            // The LSE from the max key's score in double (max_key.cuh): the whole quad computes it, before the row
            // test.
            const int key = max_key_of_row<KEY_BLOCKS>(max_copies, warp, lane, r, row < S_q ? max_tile[r] : -1,
                                                       m_i[r]);
            const float lse_r = row_lse<T, D>(q_head + row * p.q_strides.s, k_head, p.k_strides.s, key, p.scale,
                                             qk_scale, m_i[r], l_i[r], t);
            if (row >= S_q) continue;
            const float inv_l = 1.0f / l_i[r];
#pragma unroll
            for (int db = 0; db < D_BLOCKS; db++)
                *reinterpret_cast<float2 *>(o + row * p.o_strides.s + db * MMA_N + 2 * t) =
                    make_float2(o_acc[db][2 * r] * inv_l, o_acc[db][2 * r + 1] * inv_l);
            if (t == 0) lse[row] = lse_r;
        }
    }
    // The end: the last warpgroup's last turn went to warpgroup 0, which takes it here, so that no named barrier is
    // left half-arrived.
    if (warpgroup == 0) named_barrier_sync(TURN_BARRIER, TURN_THREADS);
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

// The queue's counter: one int in global memory on the device of the first launch (the suite runs on one), set to 0
// before every launch.
static int *tile_counter(void) {
    static int *counter = NULL;
    if (!counter) FA_CUDA_CHECK(cudaMalloc(&counter, sizeof(int)));
    return counter;
}

// Launches one instantiation: as many blocks as the GPU holds at once (one per SM: a block takes most of an SM's
// shared memory), or fewer when there are fewer tiles. The tiles pass the 48 KiB a kernel gets without asking, so
// the kernel asks for what it uses, plus the alignment, the barriers and the tile slot.
template <typename T, int D, int BLOCK_M, int BLOCK_N>
static void launch(const fa_shape *shape, const void *q, fa_strides q_strides, const void *k, fa_strides k_strides,
                   const void *v, fa_strides v_strides, float *o, fa_strides o_strides, float *lse) {
    auto kernel = flash_forward_stages_once_kernel<T, D, BLOCK_M, BLOCK_N>;
    const int smem_bytes = (int)flash_forward_persistent_cuda_smem_bytes(D, BLOCK_M, BLOCK_N);
    const int threads = (BLOCK_M / WARPGROUP_ROWS + 1) * WARPGROUP_THREADS;
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    int device = 0, sms = 0, blocks_per_sm = 0;
    FA_CUDA_CHECK(cudaGetDevice(&device));
    FA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, threads, smem_bytes));
    const int64_t q_tiles = (shape->Sq + BLOCK_M - 1) / BLOCK_M, BH = shape->B * shape->H;
    const int64_t resident = (int64_t)sms * (blocks_per_sm > 0 ? blocks_per_sm : 1);
    const unsigned int blocks = (unsigned int)(BH * q_tiles < resident ? BH * q_tiles : resident);
    // Every block takes one number past the last tile before it stops: all of them must fit in an int.
    if (BH * q_tiles + blocks > INT_MAX)
        fa_die("step 4g numbers its tiles with an int: %lld heads x %lld Q tiles are too many", (long long)BH,
               (long long)q_tiles);
    int *counter = tile_counter();
    const int head_group = shape->causal ? (int)BH : 1;   // tile_at(): causal, every head's heaviest tile first
    forward_params p = {make_tensor_map(q, q_strides, shape, shape->Sq, BLOCK_M),
                        make_tensor_map(k, k_strides, shape, shape->Sk, BLOCK_N),
                        make_tensor_map(v, v_strides, shape, shape->Sk, BLOCK_N),
                        o, o_strides, lse, shape->Sq, shape->Sk, shape->H, (int)BH, (int)q_tiles, head_group, counter,
                        shape->scale, shape->scale * LOG2E, shape->causal, q, k, q_strides, k_strides};
    FA_CUDA_CHECK(cudaMemsetAsync(counter, 0, sizeof(int)));
    kernel<<<blocks, threads, smem_bytes>>>(p);
    FA_CUDA_CHECK_LAUNCH();
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
    fa_die("the kernels of step 4g are compiled for BLOCK_M x BLOCK_N = %s, not %d x %d at D = %d",
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

extern "C" void flash_forward_stages_once_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
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

