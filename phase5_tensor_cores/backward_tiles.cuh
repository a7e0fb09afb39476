// backward_tiles.cuh - phase 5, step 4 on the GPU: what its two passes share (4_backward_dkdv_cuda.cu, the dK/dV
// pass, and 4_backward_dq_cuda.cu, the dQ pass): the block's shape, the swizzled tiles and their cp.async loads, the
// two mma loops every product runs in (mma_along_d, mma_along_rows), and the mask of an element of S.
// 4_backward_cuda.cu runs the preprocess and the two passes in order.
#ifndef BACKWARD_TILES_CUH
#define BACKWARD_TILES_CUH

#include "fa_cuda_check.h"
#include "fa_mma.cuh"    // the PTX helpers: ldmatrix, mma.sync, cp.async, and their fragment layouts
#include "fa_warp.cuh"   // WARP_SIZE, FULL_WARP
#include "fa_half.h"
#include "fa_contract.h"
#include "tensor_cores.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

// P = exp(scale s - LSE) = exp2(s * scale * LOG2E - LSE * LOG2E): one FMA, one exp2 (LOG2E: common/fa_math.h)
#define WARPS 4        // warps per block in both passes: BLOCK_N = BLOCK_M = 4 x 16
#define SWIZZLE_ROWS 8 // rows whose chunks the swizzle spreads over the 8 chunk positions of a 128-byte line
#define THREADS (WARPS * WARP_SIZE)

// Where chunk `chunk` (16 bytes, elements 8 chunk .. 8 chunk + 7) of tile row `row` lives, in halves from the start
// of a tile whose rows are WIDTH halves long: the chunk position is XORed with row % 8, as in step 3
// (3_pipeline_cuda.cu draws it), so the 8 rows one ldmatrix matrix reads sit in 8 different bank groups. Every tile
// of the two passes (K, V, Q, dO: WIDTH = D; dS^T: WIDTH = BLOCK_M) is written and read through it.
template <int WIDTH> __device__ __forceinline__ int swizzle(int row, int chunk) {
    return row * WIDTH + (chunk ^ (row % SWIZZLE_ROWS)) * CHUNK;
}

// The A fragment of rows row0 .. row0 + 15, dims 16ds .. 16ds + 15 of a row-major [rows][D] half tile: lanes 0-15
// point at rows 0-15 of the first 8 dims (a[0], a[1]), lanes 16-31 at the next 8 (a[2], a[3]).
template <int D, typename T>
__device__ __forceinline__ void load_a_rows(uint32_t a[4], const T *tile, int row0, int ds) {
    const int lane = threadIdx.x % WARP_SIZE;
    ldmatrix_x4(a, tile + swizzle<D>(row0 + lane % 16, ds * 2 + lane / 16));
}

// acc[nb] += A * B^T for the 8-row column blocks nb of B^T, B^T a row-major [rows][D] half tile whose rows
// n0 .. n0 + 8 NB - 1 are the columns of the product, summed along d (16 dims, step ds): "S = Q K^T" in the forward.
// One ldmatrix.x4 gives the B operands of two column blocks: lanes 0-7 rows 0-7, dims 0-7 (b0 of block nb); lanes
// 8-15 the same rows, dims 8-15 (b1); lanes 16-31 rows 8-15 (block nb + 1).
template <int D, int NB, typename T>
__device__ __forceinline__ void mma_along_d(float acc[NB][4], const uint32_t a[4], const T *tile, int ds) {
    const int lane = threadIdx.x % WARP_SIZE;
#pragma unroll
    for (int nb = 0; nb < NB; nb += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, tile + swizzle<D>(nb * MMA_N + lane % 8 + lane / 16 * 8, ds * 2 + lane / 8 % 2));
        mma_m16n8k16(acc[nb], a, b[0], b[1], T());
        mma_m16n8k16(acc[nb + 1], a, b[2], b[3], T());
    }
}

// acc[db] += A * B for every 8-dim block db of B = rows 16ks .. 16ks + 15 of a row-major [rows][D] half tile,
// summed along its rows: "O += P V" in the forward. The transposing ldmatrix gives B: lanes 0-7 rows 0-7, dims 0-7
// (b0 of block db); lanes 8-15 rows 8-15 (b1); lanes 16-31 the same for dims 8-15 (block db + 1).
template <int D, typename T>
__device__ __forceinline__ void mma_along_rows(float acc[D / MMA_N][4], const uint32_t a[4], const T *tile, int ks) {
    const int lane = threadIdx.x % WARP_SIZE;
#pragma unroll
    for (int db = 0; db < D / MMA_N; db += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, tile + swizzle<D>(ks * MMA_K + lane % 8 + lane / 8 % 2 * 8, db + lane / 16));
        mma_m16n8k16(acc[db], a, b[0], b[1], T());
        mma_m16n8k16(acc[db + 1], a, b[2], b[3], T());
    }
}

// --- Step 4b: the same three from addresses worked out once (the forward's step 3h) ------------------------------
// swizzle<D>(row, chunk) XORs the chunk with row % 8. The rows a lane points at in the three helpers above all have
// row % 8 = lane % 8, and their chunk is the lane's own part c0 plus an even number that the loop steps through
// (2ds, or db): since 2c + c0 = 2c ^ c0, the address at step c is the address at step 0 XOR the step's bytes, as long
// as the tile starts on a multiple of a row's bytes (D halves; the step-4b kernels align their shared memory so).
// lane_address is this lane's row and chunk at step 0, as a shared-memory byte address: rows and chunk below.
//   load_a_rows_at:    row row0 + lane % 16,                chunk lane / 16       (then XOR 32 ds)
//   mma_along_d_at:    row lane % 8 + lane / 16 * 8,        chunk lane / 8 % 2    (then XOR 32 ds, + 8 nb rows)
//   mma_along_rows_at: row lane % 8 + lane / 8 % 2 * 8,     chunk lane / 16       (then XOR 16 db, + 16 ks rows)
template <int D, typename T> __device__ __forceinline__ uint32_t lane_address(const T *tile, int row, int chunk) {
    return (uint32_t)__cvta_generic_to_shared(tile + swizzle<D>(row, chunk));
}
template <int D, typename T> __device__ __forceinline__ uint32_t a_rows_lane(const T *tile, int row0) {
    const int lane = threadIdx.x % WARP_SIZE;
    return lane_address<D>(tile, row0 + lane % 16, lane / 16);
}
template <int D, typename T> __device__ __forceinline__ uint32_t along_d_lane(const T *tile) {
    const int lane = threadIdx.x % WARP_SIZE;
    return lane_address<D>(tile, lane % 8 + lane / 16 * 8, lane / 8 % 2);
}
template <int D, typename T> __device__ __forceinline__ uint32_t along_rows_lane(const T *tile) {
    const int lane = threadIdx.x % WARP_SIZE;
    return lane_address<D>(tile, lane % 8 + lane / 8 % 2 * 8, lane / 16);
}
template <typename T> __device__ __forceinline__ void load_a_rows_at(uint32_t a[4], uint32_t lane_address, int ds) {
    ldmatrix_x4_at(a, lane_address ^ ds * MMA_K * (int)sizeof(T));
}
template <int D, int NB, typename T>
__device__ __forceinline__ void mma_along_d_at(float acc[NB][4], const uint32_t a[4], uint32_t lane_address, int ds) {
    const uint32_t step = lane_address ^ ds * MMA_K * (int)sizeof(T);
#pragma unroll
    for (int nb = 0; nb < NB; nb += 2) {
        uint32_t b[4];
        ldmatrix_x4_at(b, step + nb * MMA_N * D * (int)sizeof(T));
        mma_m16n8k16(acc[nb], a, b[0], b[1], T());
        mma_m16n8k16(acc[nb + 1], a, b[2], b[3], T());
    }
}
template <int D, typename T>
__device__ __forceinline__ void mma_along_rows_at(float acc[D / MMA_N][4], const uint32_t a[4], uint32_t lane_address,
                                                  int ks) {
#pragma unroll
    for (int db = 0; db < D / MMA_N; db += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans_at(b, (lane_address ^ db * MMA_N * (int)sizeof(T)) + ks * MMA_K * D * (int)sizeof(T));
        mma_m16n8k16(acc[db], a, b[0], b[1], T());
        mma_m16n8k16(acc[db + 1], a, b[2], b[3], T());
    }
}

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
    T *to = tile + swizzle<D>(row, chunk);
#pragma unroll 1
    for (int step = 0; step < ROWS / ROWS_PER_STEP; step++) {
        const bool exists = row < rows;
        // A row that does not exist reads nothing (0 source bytes): its pointer, past the end of the tensor, is only
        // advanced, never read; the copy gets the valid placeholder src instead.
        cp_async_16(to, exists ? from : src, exists ? 16 : 0);
        row += ROWS_PER_STEP;
        from += ROWS_PER_STEP * stride_s;
        to += ROWS_PER_STEP * D;
    }
}

// Step 4b: copies one whole [ROWS][D] tile (every row exists), the same chunks per thread as load_tile_async, from
// `from`, this thread's chunk in the tile's first row it copies (row threadIdx.x / ROW_CHUNKS, which the kernel
// keeps and moves one tile on after each copy): no row test, one 64-bit add per step.
template <typename T, int D, int ROWS>
__device__ __forceinline__ void load_full_tile_async(T *tile, const T *from, int64_t stride_s) {
    constexpr int ROW_CHUNKS = D / CHUNK, ROWS_PER_STEP = THREADS / ROW_CHUNKS;
    const unsigned int tid = threadIdx.x;
    const int chunk = (int)(tid % ROW_CHUNKS), row = (int)(tid / ROW_CHUNKS);
    T *to = tile + swizzle<D>(row, chunk);
#pragma unroll
    for (int step = 0; step < ROWS / ROWS_PER_STEP; step++) {
        cp_async_16(to + step * ROWS_PER_STEP * D, from, 16);
        from += ROWS_PER_STEP * stride_s;
    }
}
// This thread's chunk of row `first_row` + threadIdx.x / ROW_CHUNKS of a [S, D] tensor: where load_full_tile_async
// starts a tile whose first row is first_row.
template <typename T, int D>
__device__ __forceinline__ const T *copy_source(const T *src, int64_t stride_s, int64_t first_row) {
    constexpr int ROW_CHUNKS = D / CHUNK;
    const unsigned int tid = threadIdx.x;
    return src + (first_row + (int)(tid / ROW_CHUNKS)) * stride_s + (int)(tid % ROW_CHUNKS) * CHUNK;
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

// The two passes, backward_tc_dkdv_cuda() (4_backward_dkdv_cuda.cu: dK, dV, and with atomic_dq each tile's share of
// dQ) and backward_tc_dq_cuda() (4_backward_dq_cuda.cu: the deterministic dQ), are declared in fa_baselines.h: they
// run on tensors the entry point has checked (4_backward_cuda.cu, flash_backward_tc_cuda).

#endif
