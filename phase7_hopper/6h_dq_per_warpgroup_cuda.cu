// 6h_dq_per_warpgroup_cuda.cu - phase 7, step 6h, on the GPU: step 6g with dQ's shares in a buffer of their own,
// each warpgroup handing its columns to the TMA behind a barrier of its own 128 threads; fp16 or bf16.
//
// What it changes against step 6g (phase7_hopper/6g_q_tiles_by_tma_cuda.cu): in step 6g a Q tile's share of dQ goes
//   into the buffer that held the tile's Q and dO. That saves shared memory and ties the two warpgroups together
//   three times a tile:
//     - a warpgroup may not store its dQ columns before the other has finished dK += dS^T Q, which reads that Q: so
//       the barrier before the reduce-adds is the whole block's;
//     - thread 0 may not load the next Q tile into the buffer before the TMA has read the share out of it: it waits
//       (bulk_wait_read) in the middle of the tile, and its warp, and with it its warpgroup's next wgmma, waits too;
//     - the next tile's dS^T stores wait for the other warpgroup's dQ products, which read both halves of dS^T: the
//       same block barrier.
//   Here dQ's share has a buffer of its own, [D / 32][BLOCK_M][32] float32 as before, and dS^T two (tile n in buffer
//   n % 2): 48 KiB more at D = 128 (194 KiB in all, one block per SM as before). Each warpgroup's dQ columns are TMA
//   boxes of their own (one of 32 columns at D = 64, two at D = 128), so
//     - a warpgroup stores its columns once its own dQ products are done, meets only its own 128 threads at a named
//       barrier (named_barrier_sync, tma.cuh), and its first thread issues its boxes' reduce-adds;
//     - that thread waits for them to be read (bulk_wait_read) just before the next tile's dS^T barrier, a whole tile
//       later, where nobody is kept from the tensor cores;
//     - thread 0 loads the next Q tile into its buffer as soon as the products are issued, with nothing to wait for:
//       the last readers of that buffer (tile n - 1's dV and dK) finished before tile n - 1's dS^T barrier.
//   What a tile still needs of the whole block: the barrier after dS^T's stores (dQ reads both warpgroups' dS^T).
// CPU twin:  phase5_tensor_cores/4_backward_cpu.c
// Diff:      diff -u phase7_hopper/6g_q_tiles_by_tma_cuda.cu phase7_hopper/6h_dq_per_warpgroup_cuda.cu
// Run:       build/bin/phase7_hopper --impl cuda --step 6 --dtype bf16 --B 4 --H 16 --S 4096 --D 128 --dq atomic
//
// Needs sm_90a (wgmma, TMA). Lane L of a warp is "g = L / 4, t = L % 4" in every fragment drawn below, in wgmma.cuh
// and in common/fa_mma.cuh.
#include "fa_cuda_check.h"
#include "fa_mma.cuh"    // cp.async, pack_pair, exp2_ftz and the mma shapes (MMA_K, MMA_N, CHUNK) the fragments follow
#include "fa_warp.cuh"   // WARP_SIZE, FULL_WARP
#include "fa_half.h"
#include "fa_contract.h"
#include "hopper.h"
#include "tma.cuh"     // the TMA's loads, mbarriers, reduce-add, its bulk groups, and the tensor maps
#include "wgmma.cuh"   // swizzle atoms, descriptors, wgmma and its protocol

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

// P = exp(scale s - LSE) = exp2(s * scale * LOG2E - LSE * LOG2E): one FMA, one exp2 (LOG2E: common/fa_math.h)
#define WARPS 8        // warps per block: two warpgroups of 4, each 4 x 16 keys; BLOCK_M = 64 queries
#define SWIZZLE_ROWS 8 // rows whose chunks the swizzle spreads over the 8 chunk positions of a 128-byte line
#define THREADS (WARPS * WARP_SIZE)
#define WARPGROUP_THREADS 128
#define WARPGROUPS (THREADS / WARPGROUP_THREADS)

// Every tile of this file (Q, dO: [64][D]; a warpgroup's K, V: [64][D]; its dS^T: [64][64]) has TILE_ROWS = 64
// rows and is stored in wgmma's 128-byte swizzle atoms: swizzle<TILE_ROWS>(row, chunk) (wgmma.cuh) is where chunk
// `chunk` (16 bytes, elements 8 chunk .. 8 chunk + 7) of tile row `row` lives, in halves. A warp's stores of dS^T
// (the same chunk of 8 consecutive keys, rows g and g + 8 of its fragments) land in 8 different bank groups there,
// as with phase 5's swizzle.
#define TILE_ROWS 64

// dQ's share of a Q tile, [BLOCK_M][D] float32, goes to the TMA in boxes of DQ_BOX_COLUMNS = 32 columns (128 bytes a
// row, the most its 128-byte swizzle takes): box cb holds columns 32cb .. 32cb + 31 of every row, rows 128 bytes apart,
// and the 16-byte chunk c (columns 4c .. 4c + 3 of the box) of row r at chunk position c ^ (r % 8), the XOR of
// wgmma's atoms with float32 elements. So the float2s a warp stores (rows g and g + 8, columns 2t, 2t + 1 of every
// 8-column block) fall on 8 different chunk positions for the 8 values of g: no bank conflicts, where a plain
// [row][D] tile would put all eight rows of a column in one bank.
#define DQ_BOX_COLUMNS 32
template <int ROWS> __device__ __forceinline__ int dq_swizzle(int row, int column) {
    const int box = column / DQ_BOX_COLUMNS, chunk = column % DQ_BOX_COLUMNS / 4;
    return box * ROWS * DQ_BOX_COLUMNS + row * DQ_BOX_COLUMNS + (chunk ^ (row % ATOM_ROWS)) * 4 + column % 4;
}

// Named barriers (tma.cuh) 1 + warpgroup: the 128 threads of one warpgroup wait for each other, and no one else, before
// its first thread hands their dQ to the TMA (barrier 0 is __syncthreads's, the whole block's).
#define DQ_STORED_BARRIER 1

// Starts copying rows first_row .. first_row + ROWS - 1 of a [S, D] half tensor into a swizzled [ROWS][D] tile in
// shared memory, 16 bytes per thread per step (coalesced). Rows past n_rows are zeros. The copy lands later:
// cp_async_wait_all and a barrier come before anyone reads the tile.
// A thread copies the same chunk of every ROWS_PER_STEP-th row: from one step to the next its source moves on by
// ROWS_PER_STEP rows and, ROWS_PER_STEP being a multiple of the swizzle's 8 rows, its destination too (row % 8, and
// with it the swizzled chunk position, stays the same). The loop stays rolled (unroll 1) on purpose: unrolled, the
// compiler works out every step's addresses ahead and holds them in registers through the whole tile loop.
template <typename T, int D, int ROWS>
__device__ __forceinline__ void load_tile_async(T *tile, const T *src, int64_t stride_s, int64_t first_row,
                                                int64_t n_rows) {
    constexpr int ROW_CHUNKS = D / CHUNK, ROWS_PER_STEP = THREADS / ROW_CHUNKS;
    static_assert(THREADS % ROW_CHUNKS == 0 && ROWS % ROWS_PER_STEP == 0, "every thread copies whole steps");
    static_assert(ROWS_PER_STEP % SWIZZLE_ROWS == 0, "a step keeps row % 8, and with it the swizzle");
    const int64_t rows = n_rows - first_row;   // the tile's rows 0 .. rows - 1 exist
    const unsigned int tid = threadIdx.x;      // unsigned: / and % are a shift and a mask
    const int chunk = (int)(tid % ROW_CHUNKS);
    int row = (int)(tid / ROW_CHUNKS);
    const T *from = src + (first_row + row) * stride_s + chunk * CHUNK;
    T *to = tile + swizzle<TILE_ROWS>(row, chunk);
    static_assert(ROWS == TILE_ROWS, "every tile has TILE_ROWS rows");
#pragma unroll 1
    for (int step = 0; step < ROWS / ROWS_PER_STEP; step++) {
        const bool exists = row < rows;
        // A row that does not exist reads nothing (0 source bytes): its pointer, past the end of the tensor, is only
        // advanced, never read; the copy gets the valid placeholder src instead.
        cp_async_16(to, exists ? from : src, exists ? 16 : 0);
        row += ROWS_PER_STEP;
        from += ROWS_PER_STEP * stride_s;
        to += ROWS_PER_STEP * ATOM_HALVES;   // the same column block of the atoms, ROWS_PER_STEP rows on
    }
}

// The Q tile's LSE (times LOG2E: P in base 2) and Delta into shared memory, ordinary loads and stores (BLOCK_M floats
// each, next to the TMA's loads of the Q and dO tiles, one per thread); 0 for rows past S_q, which are masked anyway.
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

// A Q tile into a buffer: its Q and dO by the TMA (thread 0 announces the bytes and issues one load per 64 columns of
// each; rows past S_q arrive as zeros), its row stats by threads 0 .. BLOCK_M - 1, each of which then arrives on the
// buffer's mbarrier (thread 0's arrival is the one that announces the bytes).
template <typename T, int D, int BLOCK_M>
__device__ __forceinline__ void load_q_tile(T *q_tile, float *lse2_tile, float *delta_tile, uint64_t *landed,
                                            const CUtensorMap *q_map, const CUtensorMap *do_map, const float *lse,
                                            const float *delta, int64_t q_start, int64_t S_q, int h, int b) {
    if (threadIdx.x >= BLOCK_M) return;
    load_row_stats<BLOCK_M>(lse2_tile, delta_tile, lse, delta, q_start, S_q);
    if (threadIdx.x != 0) {
        mbarrier_arrive(landed);
        return;
    }
    T *do_tile = q_tile + BLOCK_M * D;
    mbarrier_arrive_expect_tx(landed, 2 * BLOCK_M * D * sizeof(T));
    for (int c = 0; c < D / ATOM_HALVES; c++) {   // column block c: halves c * BLOCK_M * 64 on, as swizzle<> has it
        tma_load_4d(q_tile + c * BLOCK_M * ATOM_HALVES, q_map, c * ATOM_HALVES, (int)q_start, h, b, landed);
        tma_load_4d(do_tile + c * BLOCK_M * ATOM_HALVES, do_map, c * ATOM_HALVES, (int)q_start, h, b, landed);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// P and dS from the scores, element by element, in place: p = exp2(s scale LOG2E - LSE LOG2E) and ds = p (dp - Delta)
// (dp becomes dS; in the dK/dV pass, which needs P^T for dV, s becomes P too). The mask is needed only by the tiles on
// an edge or on the diagonal (MASKED): there p is 0 where the key is not there (past S_k), the query is not there (past
// S_q), or (diagonal tiles) the key comes after the query. An interior tile needs no mask: every key and query exists
// and no key is in a query's future (FlashAttention's "even M and N" case, and most tiles of a long sequence), so its
// version tests nothing. A visible element gets the same operations in both versions, bit for bit.
__device__ __forceinline__ bool is_visible(int64_t row, int64_t key, int64_t S_q, int64_t S_k, int stage) {
    return key < S_k && row < S_q && !(stage == TILE_DIAGONAL && key > row);
}
__device__ __forceinline__ bool tile_needs_mask(int stage, int64_t q_start, int64_t k_start, int block_m, int block_n,
                                                int64_t S_q, int64_t S_k) {
    return stage == TILE_DIAGONAL || q_start + block_m > S_q || k_start + block_n > S_k;
}

// The dK/dV pass (keys are the rows): element e of fragment qb is key key_g + 8 (e / 2), query q_start + i with
// i = 8qb + 2t + e % 2. Its LSE (base 2) and Delta are entry i of the tile's row stats in shared memory: elements
// e = 0, 2 and e = 1, 3 share them, so one float2 of each per fragment serves all four.
// P^T first (s becomes p), as soon as S^T is there; dS^T later, once dP^T is: a masked p is 0, and so is its ds.
template <bool MASKED, int Q_BLOCKS>
__device__ __forceinline__ void p_by_keys(float st[Q_BLOCKS][4], const float *lse2_tile, float qk_scale,
                                          int64_t key_g, int64_t q_start, int64_t S_q, int64_t S_k, int stage) {
    const int t = threadIdx.x % WARP_SIZE % 4;
#pragma unroll
    for (int qb = 0; qb < Q_BLOCKS; qb++) {
        const float2 lse2 = *reinterpret_cast<const float2 *>(lse2_tile + qb * MMA_N + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int64_t key = key_g + 8 * (e / 2), row = q_start + qb * MMA_N + 2 * t + e % 2;
            const bool visible = !MASKED || is_visible(row, key, S_q, S_k, stage);
            st[qb][e] = visible ? exp2_ftz(fmaf(st[qb][e], qk_scale, -(e % 2 ? lse2.y : lse2.x))) : 0.0f;
        }
    }
}
template <int Q_BLOCKS>
__device__ __forceinline__ void ds_by_keys(const float pt[Q_BLOCKS][4], float dpt[Q_BLOCKS][4],
                                           const float *delta_tile) {
    const int t = threadIdx.x % WARP_SIZE % 4;
#pragma unroll
    for (int qb = 0; qb < Q_BLOCKS; qb++) {
        const float2 delta = *reinterpret_cast<const float2 *>(delta_tile + qb * MMA_N + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; e++) dpt[qb][e] = pt[qb][e] * (dpt[qb][e] - (e % 2 ? delta.y : delta.x));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// 1. Preprocess: Delta_i = sum_d dO_id O_id, one warp per query row (lanes along d, then a butterfly sum), and
// dQ_i = 0 (the TMA adds into it). grid: (row blocks of WARPS rows, heads of this launch).
template <typename T, int D>
__global__ void __launch_bounds__(THREADS)
backward_preprocess_kernel(const float *__restrict__ o, fa_strides o_strides, const T *__restrict__ dout,
                           fa_strides do_strides, float *__restrict__ delta, float *__restrict__ dq,
                           fa_strides dq_strides, int64_t S_q, int64_t H, int64_t bh_first) {
    const int64_t bh = bh_first + blockIdx.y, b = bh / H, h = bh % H;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int64_t row = (int64_t)blockIdx.x * WARPS + warp;
    if (row >= S_q) return;   // a whole warp leaves together: the shuffles below see every lane
    const float *o_i = o + b * o_strides.b + h * o_strides.h + row * o_strides.s;
    const T *do_i = dout + b * do_strides.b + h * do_strides.h + row * do_strides.s;
    float sum = 0.0f;
    for (int d = lane; d < D; d += WARP_SIZE) sum += (float)do_i[d] * o_i[d];
#pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(FULL_WARP, sum, offset);
    if (lane == 0) delta[bh * S_q + row] = sum;
    float *dq_i = dq + b * dq_strides.b + h * dq_strides.h + row * dq_strides.s;
    for (int d = lane; d < D; d += WARP_SIZE) dq_i[d] = 0.0f;
}

// ---------------------------------------------------------------------------------------------------------------
// 2. dK, dV and dQ on wgmma: one block (two warpgroups) per K/V tile of 128 keys; each Q tile's share of dQ is added
// into dQ (float32, zeroed by the preprocess) by the TMA, through dq_map, each warpgroup's columns by its first thread.
// grid: (number of K/V tiles, heads of this launch), block: 8 warps; warp w of warpgroup wg owns keys
// k_start + 64 wg + 16 w .. + 15.
// Shared memory: K, V tiles [2][64][D] (one 64-row tile per warpgroup), two buffers of the Q and dO tiles
// [BLOCK_M][D], two buffers of dS^T [2][64][BLOCK_M] (T, all in swizzle atoms, each tile on a 1024-byte boundary),
// dQ's share [D / 32][BLOCK_M][32] (float32, in the TMA's 128-byte swizzle: dq_swizzle), and two buffers of the Q
// tile's LSE in base 2 and its Delta [BLOCK_M], and the Q buffers' two mbarriers.
template <typename T, int D, int BLOCK_M, int BLOCK_N>
__global__ void __launch_bounds__(THREADS, 1)
backward_dq_per_warpgroup_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap do_map,
                               const __grid_constant__ CUtensorMap dq_map, const T *__restrict__ k,
                               fa_strides k_strides, const T *__restrict__ v, fa_strides v_strides,
                               const float *__restrict__ lse, const float *__restrict__ delta, float *__restrict__ dk,
                               fa_strides dk_strides, float *__restrict__ dv, fa_strides dv_strides, int64_t S_q,
                               int64_t S_k, int64_t H, int64_t bh_first, float scale, int causal) {
    static_assert(BLOCK_N == WARPS * WARP_ROWS && BLOCK_N == WARPGROUPS * TILE_ROWS, "one warp per 16 keys");
    static_assert(BLOCK_M == 64, "one wgmma (N = 64) covers the Q tile's queries, and one (M = 64) dQ's");
    constexpr int D_STEPS = D / MMA_K;              // wgmma steps along d (S^T, dP^T)
    constexpr int D_BLOCKS = D / MMA_N;             // 8-dim column blocks of dK, dV
    constexpr int Q_BLOCKS = BLOCK_M / MMA_N;       // 8-query column blocks of S^T, dP^T
    constexpr int Q_STEPS = BLOCK_M / MMA_K;        // wgmma steps along the queries (dV, dK)
    constexpr int FRAGMENTS = 64 / MMA_N;           // accumulator fragments one wgmma writes (N = 64)
    constexpr int K_STEPS = BLOCK_N / MMA_K;        // wgmma steps along the keys (dQ: both warpgroups' keys)
    constexpr int DQ_COLUMNS = D / WARPGROUPS;      // dQ columns per warpgroup: one wgmma (N = 32 or 64) per step
    constexpr int DQ_BLOCKS = DQ_COLUMNS / MMA_N;   // their 8-column blocks
    constexpr int Q_TILE = BLOCK_M * D;            // halves in one Q (or dO) buffer
    extern __shared__ uint8_t smem_raw[];
    // wgmma's swizzle atoms start on 1024-byte boundaries: the launch asks for ATOM_BYTES more than the tiles need.
    uint8_t *smem = smem_raw + (ATOM_BYTES - (uint32_t)__cvta_generic_to_shared(smem_raw) % ATOM_BYTES) % ATOM_BYTES;
    T *k_tiles = reinterpret_cast<T *>(smem);       // [2][64][D]
    T *v_tiles = k_tiles + BLOCK_N * D;             // [2][64][D]
    // Buffer s of the Q tiles holds a Q tile and, right after it, its dO tile: [2][2][BLOCK_M][D].
    T *buffers = v_tiles + BLOCK_N * D;
    T *ds_tiles = buffers + 4 * Q_TILE;             // [2][2][64][BLOCK_M]: tile n's dS^T (buffer n % 2), dQ's A operand
    float *dq_tile = reinterpret_cast<float *>(ds_tiles + 2 * BLOCK_N * BLOCK_M);   // [D / 32][BLOCK_M][32]
    float *lse2_tiles = dq_tile + BLOCK_M * D;                                     // [2][BLOCK_M]
    float *delta_tiles = lse2_tiles + 2 * BLOCK_M;                                // [2][BLOCK_M]
    uint64_t *landed = reinterpret_cast<uint64_t *>(delta_tiles + 2 * BLOCK_M);   // [2]: buffer s has its tile

    const int64_t bh = bh_first + blockIdx.y, b = bh / H, h = bh % H;
    k += b * k_strides.b + h * k_strides.h;
    v += b * v_strides.b + h * v_strides.h;
    dk += b * dk_strides.b + h * dk_strides.h;
    dv += b * dv_strides.b + h * dv_strides.h;
    lse += bh * S_q;
    delta += bh * S_q;
    const float qk_scale = scale * LOG2E;

    const int64_t k_start = (int64_t)blockIdx.x * BLOCK_N;
    // The warpgroup index through a shuffle: the compiler then knows it is the same in every lane, and keeps what
    // derives from it (the descriptors) in uniform registers, where wgmma reads them.
    const int warpgroup = __shfl_sync(FULL_WARP, threadIdx.x / WARPGROUP_THREADS, 0);
    const int warp = threadIdx.x % WARPGROUP_THREADS / WARP_SIZE;   // in its warpgroup: rows 16w .. of a wgmma's D
    const int lane = threadIdx.x % WARP_SIZE, g = lane / 4, t = lane % 4;
    const int key0 = warp * WARP_ROWS;   // the warp's first key in its warpgroup's 64
    // This lane's two keys: key_g (C elements 0 and 1 of every fragment) and key_g + 8 (elements 2 and 3).
    const int64_t key_g = k_start + warpgroup * TILE_ROWS + key0 + g;
    // The warpgroup's own 64 keys of K and V; its first thread, which hands its dQ columns to the TMA.
    T *k_tile = k_tiles + warpgroup * TILE_ROWS * D, *v_tile = v_tiles + warpgroup * TILE_ROWS * D;
    const bool hands_dq = threadIdx.x % WARPGROUP_THREADS == 0;

    // The K and V tiles stay in shared memory for the whole block: wgmma reads them there as the A operand of S^T and
    // dP^T, and K as the B operand of dQ. Each 64-key half is a tile of its own.
    for (int half = 0; half < WARPGROUPS; half++) {
        load_tile_async<T, D, TILE_ROWS>(k_tiles + half * TILE_ROWS * D, k, k_strides.s, k_start + half * TILE_ROWS,
                                         S_k);
        load_tile_async<T, D, TILE_ROWS>(v_tiles + half * TILE_ROWS * D, v, v_strides.s, k_start + half * TILE_ROWS,
                                         S_k);
    }

    // Causal: query row i sees key j only when j <= i: the Q tiles that end before this K/V tile starts are skipped.
    // From the first tile that sees a key of this one on, every later tile does too (tile_end: where they stop).
    const int64_t n_q_tiles = (S_q + BLOCK_M - 1) / BLOCK_M, first_q_tile = causal ? k_start / BLOCK_M : 0;
    const int64_t tile_end =
        first_q_tile < n_q_tiles &&
                causal_tile_stage(causal, first_q_tile * BLOCK_M, k_start, BLOCK_M, BLOCK_N, S_q, S_k) != TILE_FUTURE
            ? n_q_tiles
            : first_q_tile;
    // The first Q tile goes into buffer 0 while K and V arrive; then everyone waits for K and V, once.
    if (threadIdx.x == 0) {
        for (int s = 0; s < 2; s++) mbarrier_init(&landed[s], BLOCK_M);   // the row stats' BLOCK_M arrivals
        fence_barrier_init();
    }
    __syncthreads();
    if (first_q_tile < tile_end)
        load_q_tile<T, D, BLOCK_M>(buffers, lse2_tiles, delta_tiles, &landed[0], &q_map, &do_map, lse, delta,
                                   first_q_tile * BLOCK_M, S_q, (int)h, (int)b);
    cp_async_commit();
    cp_async_wait_all();
    fence_proxy_async();   // this thread's cp.async writes of K and V, seen by wgmma after the barrier
    __syncthreads();

    float dk_acc[D_BLOCKS][4], dv_acc[D_BLOCKS][4];   // the warp's 16 keys x D, float32
#pragma unroll
    for (int db = 0; db < D_BLOCKS; db++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk_acc[db][e] = dv_acc[db][e] = 0.0f;

    // The descriptors of the tiles that stay, built once (descriptor_at moves them along a tile): the warpgroup's K
    // and V as the A operands of S^T and dP^T (K-major, summed along d), dS^T as the A operand of dQ and the
    // warpgroup's D / 2 columns of K as its B operand (MN-major, summed along the rows: both 64-key halves, the second
    // TILE_ROWS rows of halves further on).
    const uint64_t k_by_dims = smem_descriptor(k_tile, 16, ATOM_BYTES);
    const uint64_t v_by_dims = smem_descriptor(v_tile, 16, ATOM_BYTES);
    const uint64_t ds_by_rows = smem_descriptor(ds_tiles, TILE_ROWS * 128, ATOM_BYTES);
    const uint64_t k_columns_by_rows = smem_descriptor(k_tiles + swizzle<TILE_ROWS>(0, warpgroup * DQ_COLUMNS / CHUNK),
                                                       TILE_ROWS * 128, ATOM_BYTES);

    for (int64_t q_tile_index = first_q_tile, n = 0; q_tile_index < tile_end; q_tile_index++, n++) {
        const int64_t q_start = q_tile_index * BLOCK_M;
        const int stage = causal_tile_stage(causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        // Q tile n has landed: buffer n % 2's mbarrier completes its (n / 2)-th phase. Its dS^T goes into dS^T
        // buffer n % 2, whose last reader, tile n - 2's dQ, both warpgroups finished before tile n - 1's dS^T barrier.
        mbarrier_wait(&landed[n % 2], (uint32_t)(n / 2) % 2);
        T *ds_tile = ds_tiles + n % 2 * BLOCK_N * BLOCK_M + warpgroup * TILE_ROWS * BLOCK_M;
        T *q_tile = buffers + n % 2 * 2 * Q_TILE, *do_tile = q_tile + Q_TILE;
        // Tile n's Q and dO: K-major as the B operands of S^T and dP^T, MN-major as those of dK and dV.
        const uint64_t q_by_dims = smem_descriptor(q_tile, 16, ATOM_BYTES);
        const uint64_t do_by_dims = smem_descriptor(do_tile, 16, ATOM_BYTES);
        const uint64_t q_by_rows = smem_descriptor(q_tile, TILE_ROWS * 128, ATOM_BYTES);
        const uint64_t do_by_rows = smem_descriptor(do_tile, TILE_ROWS * 128, ATOM_BYTES);
        const float *lse2_tile = lse2_tiles + n % 2 * BLOCK_M, *delta_tile = delta_tiles + n % 2 * BLOCK_M;

        // S^T = K Q^T and dP^T = V dO^T: 64 keys x BLOCK_M queries each, one wgmma per 16 dims; this lane's
        // st[qb] and dpt[qb] are the accumulator fragments of queries 8qb .. 8qb + 7 for keys key_g and key_g + 8.
        // A is the warpgroup's K (or V) tile, B the whole Q (or dO) tile, both read as stored (K-major): the
        // descriptors are the forward's S = Q K^T ones, with Q and K swapped. Two groups, S^T's first: P^T needs
        // only S^T, and is computed while dP^T's products still run.
        float st[Q_BLOCKS][4], dpt[Q_BLOCKS][4];
#pragma unroll
        for (int qb = 0; qb < Q_BLOCKS; qb++)
#pragma unroll
            for (int e = 0; e < 4; e++) st[qb][e] = dpt[qb][e] = 0.0f;
        keep_in_registers<Q_BLOCKS>(st);
        keep_in_registers<Q_BLOCKS>(dpt);
        wgmma_fence();
#pragma unroll
        for (int ds = 0; ds < D_STEPS; ds++) {
            const int chunk = ds * MMA_K / CHUNK;   // 16 dims: chunks 2ds and 2ds + 1 of every row
            const uint32_t at = swizzle<TILE_ROWS>(0, chunk) * sizeof(T);   // bytes: a constant once unrolled
            wgmma_m64n64k16_ss(st, descriptor_at(k_by_dims, at), descriptor_at(q_by_dims, at), T());
        }
        wgmma_commit();
#pragma unroll
        for (int ds = 0; ds < D_STEPS; ds++) {
            const uint32_t at = swizzle<TILE_ROWS>(0, ds * MMA_K / CHUNK) * sizeof(T);
            wgmma_m64n64k16_ss(dpt, descriptor_at(v_by_dims, at), descriptor_at(do_by_dims, at), T());
        }
        wgmma_commit();

        // The pipeline: request Q tile n + 1 now; it arrives while tile n is computed. Its buffer's last readers,
        // tile n - 1's products and element-wise work, finished before tile n - 1's dS^T barrier.
        if (q_tile_index + 1 < tile_end)
            load_q_tile<T, D, BLOCK_M>(buffers + (n + 1) % 2 * 2 * Q_TILE, lse2_tiles + (n + 1) % 2 * BLOCK_M,
                                       delta_tiles + (n + 1) % 2 * BLOCK_M, &landed[(n + 1) % 2], &q_map, &do_map,
                                       lse, delta, q_start + BLOCK_M, S_q, (int)h, (int)b);
        wgmma_wait<1>();   // S^T is done; dP^T may still run
        keep_in_registers<Q_BLOCKS>(st);

        // P^T = exp(scale S^T - LSE) from the forward's log-sum-exp, in float32; the mask only on the tiles that
        // need it (one branch per tile, the same for the whole block).
        if (tile_needs_mask(stage, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k))
            p_by_keys<true, Q_BLOCKS>(st, lse2_tile, qk_scale, key_g, q_start, S_q, S_k, stage);
        else
            p_by_keys<false, Q_BLOCKS>(st, lse2_tile, qk_scale, key_g, q_start, S_q, S_k, stage);

        // dV += P^T dO: the A operand is P^T rounded to T in registers (keys 64 of the warpgroup x queries
        // 16qs .. 16qs + 15: this lane's fragments 2qs and 2qs + 1, the layout of wgmma's A from registers). B is 16
        // query rows x 64 dims of the dO tile, summed along its rows: MN-major (drawn at the top of the file), the
        // descriptor the forward's V gets. dK += dS^T Q below is the same with dS^T and Q.
        uint32_t p_frag[Q_STEPS][4], ds_frag[Q_STEPS][4];
#pragma unroll
        for (int qs = 0; qs < Q_STEPS; qs++) {
            p_frag[qs][0] = pack_pair(st[2 * qs][0], st[2 * qs][1], T());
            p_frag[qs][1] = pack_pair(st[2 * qs][2], st[2 * qs][3], T());
            p_frag[qs][2] = pack_pair(st[2 * qs + 1][0], st[2 * qs + 1][1], T());
            p_frag[qs][3] = pack_pair(st[2 * qs + 1][2], st[2 * qs + 1][3], T());
        }
        keep_in_registers<D_BLOCKS>(dv_acc);
        wgmma_fence();   // dv_acc and p_frag were written by ordinary instructions
#pragma unroll
        for (int qs = 0; qs < Q_STEPS; qs++)
#pragma unroll
            for (int db = 0; db < D_BLOCKS; db += FRAGMENTS) {
                // rows 16qs.., dims 8db.., in bytes
                const uint32_t at = swizzle<TILE_ROWS>(qs * MMA_K, db * MMA_N / CHUNK) * sizeof(T);
                wgmma_m64n64k16_rs(&dv_acc[db], p_frag[qs], descriptor_at(do_by_rows, at), T());
            }
        wgmma_commit();
        wgmma_wait<1>();   // dP^T is done; dV may still run
        keep_in_registers<Q_BLOCKS>(dpt);

        // dS^T = P^T (dP^T - Delta), float32, then rounded to T for dK += dS^T Q.
        ds_by_keys<Q_BLOCKS>(st, dpt, delta_tile);
#pragma unroll
        for (int qs = 0; qs < Q_STEPS; qs++) {
            ds_frag[qs][0] = pack_pair(dpt[2 * qs][0], dpt[2 * qs][1], T());
            ds_frag[qs][1] = pack_pair(dpt[2 * qs][2], dpt[2 * qs][3], T());
            ds_frag[qs][2] = pack_pair(dpt[2 * qs + 1][0], dpt[2 * qs + 1][1], T());
            ds_frag[qs][3] = pack_pair(dpt[2 * qs + 1][2], dpt[2 * qs + 1][3], T());
        }
        keep_in_registers<D_BLOCKS>(dk_acc);
        wgmma_fence();   // dk_acc and ds_frag were written by ordinary instructions
#pragma unroll
        for (int qs = 0; qs < Q_STEPS; qs++)
#pragma unroll
            for (int db = 0; db < D_BLOCKS; db += FRAGMENTS) {
                const uint32_t at = swizzle<TILE_ROWS>(qs * MMA_K, db * MMA_N / CHUNK) * sizeof(T);
                wgmma_m64n64k16_rs(&dk_acc[db], ds_frag[qs], descriptor_at(q_by_rows, at), T());
            }
        wgmma_commit();

        // dS^T, rounded as dK uses it, to shared memory while dV and dK run (the stores only read ds_frag): register
        // r of ds_frag[qs] is rows g (r even) or g + 8 (r odd) of the warp's keys, queries 16qs + 2t, +1 (r < 2) or
        // 16qs + 8 + 2t, +1 (r >= 2). Then the wait for dV and dK, before the barrier: past it, both warpgroups'
        // products that read Q and dO are done, and the buffer may take the next tile but one.
#pragma unroll
        for (int qs = 0; qs < Q_STEPS; qs++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int key = key0 + g + 8 * (r % 2), i = qs * MMA_K + 8 * (r / 2) + 2 * t;
                *reinterpret_cast<uint32_t *>(ds_tile + swizzle<TILE_ROWS>(key, i / CHUNK) + i % CHUNK) =
                    ds_frag[qs][r];
            }
        wgmma_wait<0>();
        keep_in_registers<D_BLOCKS>(dv_acc);
        keep_in_registers<D_BLOCKS>(dk_acc);
        fence_proxy_async();   // wgmma reads dS^T through the async proxy
        // The warpgroup's reduce-adds of tile n - 1 have read its columns of dq_tile, which this tile's take next.
        if (hands_dq) bulk_wait_read<0>();
        __syncthreads();   // dS^T of all eight warps, both warpgroups, is in shared memory; dq_tile is free

        // dQ_i = dS K for the Q tile, this warpgroup's DQ_COLUMNS columns: 64 queries x D / 2, 16 keys per wgmma, all
        // 128 keys (steps 0 .. 3 in warpgroup 0's tiles, 4 .. 7 in warpgroup 1's). A is dS^T [key][query] read
        // MN-major (the queries, A's M, run along its rows: 64 of them, one column block); B is 16 rows of the K
        // tile [key][d], the warpgroup's columns, summed along its rows, MN-major as in dK's products. Warp
        // w gets queries 16w .. 16w + 15.
        float dq_acc[DQ_BLOCKS][4];
#pragma unroll
        for (int db = 0; db < DQ_BLOCKS; db++)
#pragma unroll
            for (int e = 0; e < 4; e++) dq_acc[db][e] = 0.0f;
        keep_in_registers<DQ_BLOCKS>(dq_acc);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < K_STEPS; ks++) {
            const int half = ks * MMA_K / TILE_ROWS, row = ks * MMA_K % TILE_ROWS;   // whose 64 keys, which 16
            const uint32_t ds_at =
                (n % 2 * BLOCK_N * BLOCK_M + half * TILE_ROWS * BLOCK_M + swizzle<TILE_ROWS>(row, 0)) * sizeof(T);
            const uint32_t k_at = (half * TILE_ROWS * D + swizzle<TILE_ROWS>(row, 0)) * sizeof(T);
            wgmma_ss_mn<DQ_COLUMNS>(dq_acc, descriptor_at(ds_by_rows, ds_at), descriptor_at(k_columns_by_rows, k_at),
                                    T());
        }
        wgmma_commit();
        wgmma_wait<0>();
        keep_in_registers<DQ_BLOCKS>(dq_acc);

        // scale dS K into the warpgroup's columns of dq_tile, and its first thread asks the TMA to add them into dQ:
        // one reduce-add per 32 columns, its own boxes, once its 128 threads have stored them. Rows past S_q hold
        // zeros (their dS is 0), and the TMA leaves rows past the tensor's end alone anyway.
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int query = warp * WARP_ROWS + g + 8 * r;   // rows g and g + 8 of the warp's 16 queries
#pragma unroll
            for (int db = 0; db < DQ_BLOCKS; db++) {
                const int column = warpgroup * DQ_COLUMNS + db * MMA_N + 2 * t;
                *reinterpret_cast<float2 *>(dq_tile + dq_swizzle<BLOCK_M>(query, column)) =
                    make_float2(scale * dq_acc[db][2 * r], scale * dq_acc[db][2 * r + 1]);
            }
        }
        fence_proxy_async();   // the TMA reads dq_tile through the async proxy
        named_barrier_sync(DQ_STORED_BARRIER + warpgroup, WARPGROUP_THREADS);
        if (hands_dq) {
#pragma unroll
            for (int cb = warpgroup * DQ_COLUMNS / DQ_BOX_COLUMNS; cb < (warpgroup + 1) * DQ_COLUMNS / DQ_BOX_COLUMNS;
                 cb++)
                tma_reduce_add_4d(&dq_map, dq_tile + cb * BLOCK_M * DQ_BOX_COLUMNS, cb * DQ_BOX_COLUMNS,
                                  (int)q_start, (int)h, (int)b);
            bulk_commit();
        }
    }

    // The last reduce-adds must have read dq_tile before the block's shared memory goes away.
    if (hands_dq) bulk_wait<0>();

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
// The kernels read half rows 16 bytes at a time and read and write float32 rows as float2s (the preprocess reads O
// by elements): each row must start on that many bytes, with its D elements next to each other.
static void check_rows(const char *name, const void *x, fa_strides strides, int element_bytes, int row_align) {
    const int64_t per = row_align / element_bytes;
    const int aligned = ((uintptr_t)x % row_align == 0) && strides.b % per == 0 && strides.h % per == 0 &&
                        strides.s % per == 0;
    if (strides.d != 1 || !aligned)
        fa_die("the wgmma backward needs %s with stride d = 1, the other strides multiples of %lld and a "
               "%d-byte aligned pointer (got strides %lld, %lld, %lld, %lld)", name, (long long)per, row_align,
               (long long)strides.b, (long long)strides.h, (long long)strides.s, (long long)strides.d);
}

template <typename T, int D, int BLOCK_M, int BLOCK_N>
static void launch(const fa_shape *shape, const tc_backward_tensors *t) {
    const int64_t BH = shape->B * shape->H, S_q = shape->Sq, S_k = shape->Sk;
    const T *k = static_cast<const T *>(t->k), *v = static_cast<const T *>(t->v);
    const T *dout = static_cast<const T *>(t->dout);
    auto dkdv_dq = backward_dq_per_warpgroup_kernel<T, D, BLOCK_M, BLOCK_N>;
    // Step 6g's shared memory, a second dS^T buffer and dQ's: it passes the 48 KiB a kernel gets without asking, so it
    // asks for it.
    const int smem = (int)flash_backward_dq_per_warpgroup_cuda_smem_bytes(D, BLOCK_M, BLOCK_N);
    FA_CUDA_CHECK(cudaFuncSetAttribute(dkdv_dq, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    // dQ as the TMA adds into it: float32 [B, H, S_q, D], boxes of 32 columns x BLOCK_M rows in the 128-byte swizzle.
    const CUtensorMap dq_map = make_float_tensor_map(t->dq, t->dq_strides, shape, S_q, DQ_BOX_COLUMNS, BLOCK_M);
    // Q and dO as the TMA loads them: boxes of 64 columns x BLOCK_M rows, the tiles' swizzle atoms.
    const CUtensorMap q_map = make_tensor_map(t->q, t->q_strides, shape, S_q, BLOCK_M);
    const CUtensorMap do_map = make_tensor_map(t->dout, t->do_strides, shape, S_q, BLOCK_M);
    const unsigned int kv_tiles = (unsigned int)((S_k + BLOCK_N - 1) / BLOCK_N);
    const unsigned int row_blocks = (unsigned int)((S_q + WARPS - 1) / WARPS);
    for (int64_t bh_first = 0; bh_first < BH; bh_first += MAX_GRID_Y) {
        const unsigned int heads = heads_in_launch(BH, bh_first);   // fa_contract.h: the grid limit
        backward_preprocess_kernel<T, D><<<dim3(row_blocks, heads), THREADS>>>(
            t->o, t->o_strides, dout, t->do_strides, t->delta, t->dq, t->dq_strides, S_q, shape->H, bh_first);
        FA_CUDA_CHECK_LAUNCH();
        dkdv_dq<<<dim3(kv_tiles, heads), THREADS, smem>>>(
            q_map, do_map, dq_map, k, t->k_strides, v, t->v_strides, t->lse, t->delta, t->dk, t->dk_strides, t->dv,
            t->dv_strides, S_q, S_k, shape->H, bh_first, shape->scale, shape->causal);
        FA_CUDA_CHECK_LAUNCH();
    }
}

template <typename T> static void launch_head_dim(const fa_shape *shape, const tc_backward_tensors *t) {
    switch (shape->D) {
    case 64: launch<T, 64, TILE_ROWS, WARPGROUPS * TILE_ROWS>(shape, t); break;
    case 128: launch<T, 128, TILE_ROWS, WARPGROUPS * TILE_ROWS>(shape, t); break;
    default: fa_die("the wgmma backward supports D in {64, 128}, not %lld", (long long)shape->D);
    }
}

extern "C" void flash_backward_dq_per_warpgroup_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                                     int dq_mode, const tc_backward_tensors *t) {
    if (block_m != HOPPER_TWO_WARPGROUPS_BLOCK_M || block_n != HOPPER_TWO_WARPGROUPS_BLOCK_N)
        fa_die("step 6h is compiled for BLOCK_M x BLOCK_N = %s, not %d x %d", HOPPER_TWO_WARPGROUPS_TILES_TEXT,
               block_m, block_n);
    if (dq_mode != FA_DQ_ATOMIC)
        fa_die("step 6h sums dQ in the order the TMA's adds arrive: it has the atomic dQ only (--dq atomic)");
    check_rows("Q", t->q, t->q_strides, 2, 16);
    check_rows("K", t->k, t->k_strides, 2, 16);
    check_rows("V", t->v, t->v_strides, 2, 16);
    check_rows("dO", t->dout, t->do_strides, 2, 16);
    check_rows("O", t->o, t->o_strides, 4, 4);
    check_rows("dQ", t->dq, t->dq_strides, 4, 16);   // the TMA: 16-byte aligned rows and strides
    check_rows("dK", t->dk, t->dk_strides, 4, 8);
    check_rows("dV", t->dv, t->dv_strides, 4, 8);
    if (dtype == FA_DTYPE_FP16)
        launch_head_dim<__half>(shape, t);
    else if (dtype == FA_DTYPE_BF16)
        launch_head_dim<__nv_bfloat16>(shape, t);
    else
        fa_die("the wgmma backward takes fp16 or bf16 inputs, not %s", fa_dtype_name(dtype));
}
