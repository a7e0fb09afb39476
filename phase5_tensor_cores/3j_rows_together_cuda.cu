// 3j_rows_together_cuda.cu - phase 5, step 3j, on the GPU: step 3i with the maxima of each lane's four rows found
// side by side; fp16 or bf16 inputs.
//
// What it changes against step 3i (phase5_tensor_cores/3i_key_offsets_cuda.cu): a lane holds scores of four rows
//   (rows g and g + 8 of its two row blocks), and step 3i found their maxima one row after the other: the row's
//   chain of FMNMX over its 16 or 32 scores, two shuffles across the quad, then the vote and the branch that search
//   for the max key where the max moved. The branch closes the row: nothing of the next row starts before it, so the
//   warp waits out the latency of each FMNMX and shuffle of one row, then those of the next. Here one loop over the
//   key blocks feeds the four chains, the eight shuffles go out four by four, and the searches follow (phase 7 step
//   4j does the same for its two rows, and chapter 09 shows the profiler's samples). A max is the same in any
//   order: the same bits as step 3i.
// CPU twin:  phase5_tensor_cores/3_pipeline_cpu.c (the CPU has no copy: step 3's twin computes what this step computes)
// Diff:      diff -u phase5_tensor_cores/3i_key_offsets_cuda.cu phase5_tensor_cores/3j_rows_together_cuda.cu
// Run:       build/bin/phase5_tensor_cores --impl cuda --step 3 --dtype fp16 --B 4 --H 16 --S 4096 --D 64
//            and with --block-n 128 (steps 3i and 3j alone): the 128 x 128 tile (docs/06)
//
// Needs sm_80 or newer (mma.m16n8k16 with bf16, cp.async). Thread mapping: block = BLOCK_M / 32 warps; warp w owns
// query rows q_start + 32w .. q_start + 32w + 31, as two row blocks rb = 0, 1 of 16 rows (rows 32w + 16rb ..
// 32w + 16rb + 15); lane L of a warp is "g = L / 4, t = L % 4" in every fragment drawn below and in
// common/fa_mma.cuh (the PTX helpers).
#include "fa_cuda_check.h"
#include "fa_mma.cuh"    // the PTX helpers: ldmatrix, mma.sync, ex2, cp.async, and their fragment layouts
#include "fa_warp.cuh"   // WARP_SIZE, FULL_WARP
#include "fa_half.h"
#include "fa_contract.h"
#include "tensor_cores.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

// m_i is in raw-score units: LSE = scale * m_i + log(l_i), where scale * m_i is the max key's score again, in double
// (fa_math.h, score_in_double; LOG2E there too)

#define SWIZZLE_ROWS 8 // rows whose chunks the swizzle spreads over the 8 chunk positions of a 128-byte line
#define ROW_BLOCKS 2    // 16-row blocks of queries per warp: each K or V fragment feeds this many mma

// ---------------------------------------------------------------------------------------------------------------
// Where chunk `chunk` (16 bytes, dimensions 8 chunk .. 8 chunk + 7) of tile row `row` lives, in halves from the start
// of a tile of rows D halves long: the chunk position is XORed with row % 8.
//
//   D = 64 (8 chunks per row)      chunk:  0 1 2 3 4 5 6 7
//   row 0 stores its chunks at position   0 1 2 3 4 5 6 7
//   row 1                                 1 0 3 2 5 4 7 6
//   row 2                                 2 3 0 1 6 7 4 5
//   ...
//   row 7                                 7 6 5 4 3 2 1 0
//   so chunk c of rows 0-7 (what one ldmatrix matrix reads) lands at 8 different positions: 8 different bank groups.
template <int D> __device__ __forceinline__ int swizzle(int row, int chunk) {
    return row * D + (chunk ^ (row % SWIZZLE_ROWS)) * CHUNK;
}

// Starts copying rows first_row .. first_row + ROWS - 1 of a [S, D] half tensor into a swizzled [ROWS][D] tile in
// shared memory, 16 bytes per thread per pass (consecutive threads on consecutive 16 bytes: coalesced reads). Rows
// past n_rows are zeros. The copy lands later: cp_async_wait_all and a barrier come before anyone reads the tile.
// Thread i copies chunk i % ROW_CHUNKS of rows i / ROW_CHUNKS, + ROWS_PER_PASS, + 2 ROWS_PER_PASS, ...: the same
// chunks as a walk from threadIdx.x in steps of THREADS, with everything that depends on the thread computed once.
template <typename T, int D, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile_async(T *tile, const T *src, int64_t stride_s, int64_t first_row,
                                                int64_t n_rows) {
    constexpr int ROW_CHUNKS = D / CHUNK;
    constexpr int ROWS_PER_PASS = THREADS / ROW_CHUNKS;   // rows the block's threads copy together in one pass
    static_assert(THREADS % ROW_CHUNKS == 0 && ROWS % ROWS_PER_PASS == 0, "a pass copies whole rows of the tile");
    const int first = threadIdx.x / ROW_CHUNKS, chunk = threadIdx.x % ROW_CHUNKS;
    const T *from = src + (first_row + first) * stride_s + chunk * CHUNK;
    const int64_t rows_left = n_rows - first_row - first;   // this thread's rows that exist: pass * ROWS_PER_PASS < it
#pragma unroll
    for (int pass = 0; pass < ROWS / ROWS_PER_PASS; pass++) {
        const bool exists = pass * ROWS_PER_PASS < rows_left;
        // A row that does not exist reads nothing (0 source bytes); its address is then only a valid placeholder.
        cp_async_16(tile + swizzle<D>(first + pass * ROWS_PER_PASS, chunk),
                    exists ? from + pass * ROWS_PER_PASS * stride_s : src, exists ? 16 : 0);
    }
}

// Copies one whole [ROWS][D] tile (every row exists) into a swizzled tile in shared memory, the same chunks per
// thread as load_tile_async. `from` is this thread's chunk in the tile's first row it copies (row
// threadIdx.x / ROW_CHUNKS): each pass moves it ROWS_PER_PASS rows down, a 64-bit add, with no test.
template <typename T, int D, int ROWS, int THREADS>
__device__ __forceinline__ void load_full_tile_async(T *tile, const T *from, int64_t stride_s) {
    constexpr int ROW_CHUNKS = D / CHUNK;
    constexpr int ROWS_PER_PASS = THREADS / ROW_CHUNKS;
    const int first = threadIdx.x / ROW_CHUNKS, chunk = threadIdx.x % ROW_CHUNKS;
#pragma unroll
    for (int pass = 0; pass < ROWS / ROWS_PER_PASS; pass++) {
        cp_async_16(tile + swizzle<D>(first + pass * ROWS_PER_PASS, chunk), from, 16);
        from += ROWS_PER_PASS * stride_s;
    }
}

// grid: (number of Q tiles, heads of this launch), block: BLOCK_M / 32 warps.
// q: [B, H, S_q, D], k, v: [B, H, S_k, D] in T (stride d is 1); o: [B, H, S_q, D] float32; lse: [B, H, S_q].
// Shared memory: the Q tile [BLOCK_M][D], and two buffers of the K tile and the V tile [BLOCK_N][D], all T, swizzled.
template <typename T, int D, int BLOCK_M, int BLOCK_N>
__global__ void __launch_bounds__(BLOCK_M / (ROW_BLOCKS * WARP_ROWS) * WARP_SIZE)
flash_forward_rows_together_kernel(const T *__restrict__ q, fa_strides q_strides, const T *__restrict__ k,
                              fa_strides k_strides, const T *__restrict__ v, fa_strides v_strides,
                              float *__restrict__ o, fa_strides o_strides, float *__restrict__ lse, int64_t S_q,
                              int64_t S_k, int64_t H, int64_t bh_first, float scale, float qk_scale, int causal) {
    constexpr int THREADS = BLOCK_M / (ROW_BLOCKS * WARP_ROWS) * WARP_SIZE;
    constexpr int D_STEPS = D / MMA_K;            // mma steps of S = Q K^T along d
    constexpr int KEY_BLOCKS = BLOCK_N / MMA_N;   // 8-key column blocks of S (one accumulator fragment each)
    constexpr int KEY_STEPS = BLOCK_N / MMA_K;    // mma steps of O += P V along the keys
    constexpr int D_BLOCKS = D / MMA_N;           // 8-dimension column blocks of O (one accumulator fragment each)
    extern __shared__ uint4 smem_raw[];
    constexpr int TILE = BLOCK_N * D;             // halves in one K (or V) tile
    constexpr int ROW_BYTES = D * (int)sizeof(T); // bytes in one tile row
    // The XOR addresses below need every tile to start on a multiple of ROW_BYTES: the launch asks for ROW_BYTES
    // more than the tiles need, and the tiles start at the first such boundary.
    uint8_t *smem = align_shared<ROW_BYTES>(smem_raw);
    T *q_tile = reinterpret_cast<T *>(smem);      // [BLOCK_M][D]
    T *k_tiles = q_tile + BLOCK_M * D;            // [2][BLOCK_N][D]: buffer n % 2 holds K tile n
    T *v_tiles = k_tiles + 2 * TILE;              // [2][BLOCK_N][D]

    // The grid's second index is the head: (b, h) from bh, and where that head starts in each tensor.
    const int64_t bh = bh_first + blockIdx.y, b = bh / H, h = bh % H;
    q += b * q_strides.b + h * q_strides.h;
    k += b * k_strides.b + h * k_strides.h;
    v += b * v_strides.b + h * v_strides.h;
    o += b * o_strides.b + h * o_strides.h;
    lse += bh * S_q;

    // Causal: the last Q tiles see the most keys, and the first blocks launched get them.
    const int64_t q_start = (int64_t)(gridDim.x - 1 - blockIdx.x) * BLOCK_M;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, g = lane / 4, t = lane % 4;
    // This lane's four query rows: row_g + 16rb (C elements 0 and 1 of row block rb's fragments) and row_g + 16rb + 8
    // (elements 2 and 3). Rows past S_q load zeros, compute like the others and store nothing.
    const int64_t row_g = q_start + warp * ROW_BLOCKS * WARP_ROWS + g;

    // The Q tile and the first K and V tiles are requested together, as one group of copies, and waited for at once.
    load_tile_async<T, D, BLOCK_M, THREADS>(q_tile, q + q_start * q_strides.s, q_strides.s, 0, S_q - q_start);
    load_tile_async<T, D, BLOCK_N, THREADS>(k_tiles, k, k_strides.s, 0, S_k);
    load_tile_async<T, D, BLOCK_N, THREADS>(v_tiles, v, v_strides.s, 0, S_k);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();

    // O and the row statistics, in registers: o_acc[rb][db] is the accumulator fragment of row block rb, dimensions
    // 8db .. 8db + 7; row i = 2rb + r of the lane is query row row_g + 16rb + 8r.
    float o_acc[ROW_BLOCKS][D_BLOCKS][4];
#pragma unroll
    for (int rb = 0; rb < ROW_BLOCKS; rb++)
#pragma unroll
        for (int db = 0; db < D_BLOCKS; db++)
            o_acc[rb][db][0] = o_acc[rb][db][1] = o_acc[rb][db][2] = o_acc[rb][db][3] = 0.0f;
    float m_i[2 * ROW_BLOCKS], l_i[2 * ROW_BLOCKS];   // raw-score max and sum of the lane's 4 rows
    int max_key[2 * ROW_BLOCKS];   // the keys that gave m_i (fa_math.h, score_in_double)
#pragma unroll
    for (int i = 0; i < 2 * ROW_BLOCKS; i++) m_i[i] = -INFINITY, l_i[i] = 0.0f, max_key[i] = -1;

    // What is the same for every key tile, worked out once. The block visits the tiles that exist and, causal, whose
    // first key is not after its last row (phase 3's TILE_FUTURE tiles are never reached). From tile first_masked on,
    // tiles need the mask: the diagonal ones (causal_tile_stage's TILE_DIAGONAL: their last key is after the block's
    // first row) and a last tile that S_k cuts short.
    const int64_t q_last = (q_start + BLOCK_M < S_q ? q_start + BLOCK_M : S_q) - 1;
    const int64_t keys_visited = causal && q_last + 1 < S_k ? q_last + 1 : S_k;
    const int n_tiles = (int)((keys_visited + BLOCK_N - 1) / BLOCK_N);
    const int n_whole_tiles = (int)(S_k / BLOCK_N);   // tiles whose BLOCK_N keys all exist
    int first_masked = n_whole_tiles;                  // S_k % BLOCK_N != 0: tile n_whole_tiles is the short one
    if (causal && (q_start + 1) / BLOCK_N < first_masked) first_masked = (int)((q_start + 1) / BLOCK_N);
    // This thread's chunk of the next K and V tiles: row threadIdx.x / ROW_CHUNKS of tile 1, then BLOCK_N rows
    // further down after each tile (load_full_tile_async walks the rows of one tile from there).
    constexpr int ROW_CHUNKS = D / CHUNK;
    const int copy_row = threadIdx.x / ROW_CHUNKS, copy_column = threadIdx.x % ROW_CHUNKS * CHUNK;
    const T *k_from = k + (BLOCK_N + copy_row) * k_strides.s + copy_column;
    const T *v_from = v + (BLOCK_N + copy_row) * v_strides.s + copy_column;

    // Each lane's ldmatrix addresses, once (shared-memory byte addresses). swizzle<D>(row, chunk) XORs the chunk with
    // row % 8. Every row a lane points at has row % 8 = lane % 8 (the loops move in whole 8-row blocks), and its
    // chunk is the lane's own part c0 (0 or 1) plus an even number 2c that the loops step through: since
    // 2c + c0 = 2c ^ c0, the swizzled chunk is (c0 ^ lane % 8) ^ 2c. So the address at step c is the address at
    // step 0 XOR 2c chunks (32c bytes, bits below ROW_BYTES, where the tile's start and the row offsets have none),
    // and other row blocks, key blocks and buffers are plain offsets, which the compiler folds into the instruction.
    // One LOP3 per step replaces the shifts, ANDs and XORs of swizzle<D> that step 3g computes for every ldmatrix.
    const int q_row = warp * ROW_BLOCKS * WARP_ROWS + lane % 16, k_row = lane % 8 + lane / 16 * 8,
              v_row = lane % 8 + lane / 8 % 2 * 8;   // rows of step 3g's ldmatrix at ds = 0, kb = 0, ks = 0
    const uint32_t q_lane = (uint32_t)__cvta_generic_to_shared(q_tile + swizzle<D>(q_row, lane / 16));
    const uint32_t k_lane = (uint32_t)__cvta_generic_to_shared(k_tiles + swizzle<D>(k_row, lane / 8 % 2));
    const uint32_t v_lane = (uint32_t)__cvta_generic_to_shared(v_tiles + swizzle<D>(v_row, lane / 16));
    constexpr int STEP_BYTES = MMA_K * (int)sizeof(T);   // two chunks: one step along d (S = Q K^T) ...
    constexpr int BLOCK_BYTES = MMA_N * (int)sizeof(T);  // ... one chunk: one 8-dimension block of O (P V)

    for (int n = 0; n < n_tiles; n++) {
        const int64_t k_start = (int64_t)n * BLOCK_N;
        // Tile n has landed (the only copy in flight), and every warp is done with tile n - 1, whose buffer the
        // next copy overwrites: one barrier says both.
        if (n > 0) {
            cp_async_wait_all();
            __syncthreads();
        }
        // The pipeline: request tile n + 1 now, when it is visited at all; it arrives while tile n is computed. A
        // whole tile is copied without row tests; only a short last tile takes step 3e's copy, which tests each row.
        if (n + 1 < n_tiles) {
            T *k_next = k_tiles + (n + 1) % 2 * TILE, *v_next = v_tiles + (n + 1) % 2 * TILE;
            if (n + 1 < n_whole_tiles) {
                load_full_tile_async<T, D, BLOCK_N, THREADS>(k_next, k_from, k_strides.s);
                load_full_tile_async<T, D, BLOCK_N, THREADS>(v_next, v_from, v_strides.s);
            } else {
                load_tile_async<T, D, BLOCK_N, THREADS>(k_next, k, k_strides.s, k_start + BLOCK_N, S_k);
                load_tile_async<T, D, BLOCK_N, THREADS>(v_next, v, v_strides.s, k_start + BLOCK_N, S_k);
            }
            cp_async_commit();
            k_from += BLOCK_N * k_strides.s;
            v_from += BLOCK_N * v_strides.s;
        }
        const uint32_t k_buffer = k_lane + n % 2 * TILE * (int)sizeof(T);   // this lane's row in buffer n % 2
        const uint32_t v_buffer = v_lane + n % 2 * TILE * (int)sizeof(T);

        // S = Q K^T, 32 rows x BLOCK_N keys: s[rb][kb] is the accumulator fragment of row block rb, keys 8kb ..
        // 8kb + 7. At each step along d, the Q fragments of the two row blocks come from shared memory (lanes 0-15
        // point at rows 0-15 of the first 8 dimensions: a[0], a[1]; lanes 16-31 at the next 8: a[2], a[3]). One
        // ldmatrix.x4 fetches the B operands of two key blocks, and each feeds both row blocks: K is stored [key][d],
        // which is B "by columns" as mma wants it. Lanes 0-7: keys 0-7, dims 0-7 (b0 of block kb); 8-15: keys 0-7,
        // dims 8-15 (b1); 16-31: keys 8-15 (kb + 1).
        float s[ROW_BLOCKS][KEY_BLOCKS][4];
#pragma unroll
        for (int rb = 0; rb < ROW_BLOCKS; rb++)
#pragma unroll
            for (int kb = 0; kb < KEY_BLOCKS; kb++) s[rb][kb][0] = s[rb][kb][1] = s[rb][kb][2] = s[rb][kb][3] = 0.0f;
#pragma unroll
        for (int ds = 0; ds < D_STEPS; ds++) {
            uint32_t q_frag[ROW_BLOCKS][4];
#pragma unroll
            for (int rb = 0; rb < ROW_BLOCKS; rb++)
                ldmatrix_x4_at(q_frag[rb], (q_lane ^ ds * STEP_BYTES) + rb * WARP_ROWS * ROW_BYTES);
#pragma unroll
            for (int kb = 0; kb < KEY_BLOCKS; kb += 2) {
                uint32_t b[4];
                ldmatrix_x4_at(b, (k_buffer ^ ds * STEP_BYTES) + kb * MMA_N * ROW_BYTES);
#pragma unroll
                for (int rb = 0; rb < ROW_BLOCKS; rb++) {
                    mma_m16n8k16(s[rb][kb], q_frag[rb], b[0], b[1], T());
                    mma_m16n8k16(s[rb][kb + 1], q_frag[rb], b[2], b[3], T());
                }
            }
        }

        // Mask: keys past the last one a row may see (S_k; causal, the row itself) get -INFINITY. Only the diagonal
        // tiles and a short last tile have any (from first_masked on). The scores stay raw.
        if (n >= first_masked) {
#pragma unroll
            for (int i = 0; i < 2 * ROW_BLOCKS; i++) {
                const int rb = i / 2, r = i % 2;
                const int64_t row = row_g + 16 * rb + 8 * r;
                const int64_t last_key = causal && row < S_k - 1 ? row : S_k - 1;
                // The same test on offsets: key k_start + 2t + 8kb + e is past last_key when 8kb + e, a constant,
                // is past last_offset (between -BLOCK_M - 2t and S_k: an int).
                const int last_offset = (int)(last_key - k_start) - 2 * t;
#pragma unroll
                for (int kb = 0; kb < KEY_BLOCKS; kb++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        if (kb * MMA_N + e > last_offset) s[rb][kb][2 * r + e] = -INFINITY;
            }
        }

        // The online softmax, per row. A row's BLOCK_N scores are spread over the 4 lanes of a quad (t = 0..3, the
        // same g): each lane reduces its own, then two shuffles within the quad combine them.
        float m_scaled[2 * ROW_BLOCKS], alpha[2 * ROW_BLOCKS], row_sum[2 * ROW_BLOCKS];
        // The lane's four rows side by side: one loop over the key blocks feeds all four maxima (four independent
        // chains of FMNMX), and their shuffles go out together. Row by row, each row's search for its max key (a
        // vote and a branch) closed its chain and shuffles before the next row's could start.
        float m_tiles[2 * ROW_BLOCKS];
#pragma unroll
        for (int i = 0; i < 2 * ROW_BLOCKS; i++) m_tiles[i] = -INFINITY;
#pragma unroll
        for (int kb = 0; kb < KEY_BLOCKS; kb++)
#pragma unroll
            for (int i = 0; i < 2 * ROW_BLOCKS; i++) {
                const int rb = i / 2, r = i % 2;
                m_tiles[i] = fmaxf(m_tiles[i], fmaxf(s[rb][kb][2 * r], s[rb][kb][2 * r + 1]));
            }
#pragma unroll
        for (int i = 0; i < 2 * ROW_BLOCKS; i++)
            m_tiles[i] = fmaxf(m_tiles[i], __shfl_xor_sync(FULL_WARP, m_tiles[i], 1));
#pragma unroll
        for (int i = 0; i < 2 * ROW_BLOCKS; i++)
            m_tiles[i] = fmaxf(m_tiles[i], __shfl_xor_sync(FULL_WARP, m_tiles[i], 2));
#pragma unroll
        for (int i = 0; i < 2 * ROW_BLOCKS; i++) {
            const int rb = i / 2, r = i % 2;
            const float m_tile = m_tiles[i];
            const float m_new = fmaxf(m_i[i], m_tile);
            // The max moved: remember which key holds it, for the LSE (fa_math.h, score_in_double); the quad agrees
            // on the tile's last key with that score (quad_last_key). After the first tiles the max seldom moves, so
            // the warp searches only when one of its rows' did.
            const bool moved = m_tile > m_i[i];
            if (__any_sync(FULL_WARP, moved)) {
                int offset = -1;   // the lane's last score equal to the max: key k_start + 2t + offset
#pragma unroll
                for (int kb = 0; kb < KEY_BLOCKS; kb++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        if (s[rb][kb][2 * r + e] == m_tile) offset = kb * MMA_N + e;
                const int key = quad_last_key(offset < 0 ? -1 : (int)k_start + 2 * t + offset);
                if (moved) max_key[i] = key;
            }
            // A row that has seen no key yet has m_new = -inf; subtracting it would give -inf - -inf = NaN.
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            m_scaled[i] = m_use * qk_scale;
            // Everything accumulated so far was relative to the old max: alpha moves it to the new one.
            alpha[i] = exp2_ftz((m_i[i] - m_use) * qk_scale);
            m_i[i] = m_new;
            row_sum[i] = 0.0f;
        }
#pragma unroll
        for (int rb = 0; rb < ROW_BLOCKS; rb++)
#pragma unroll
            for (int kb = 0; kb < KEY_BLOCKS; kb++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = 2 * rb + e / 2;
                    s[rb][kb][e] = exp2_ftz(fmaf(s[rb][kb][e], qk_scale, -m_scaled[i]));   // one FMA, one MUFU
                    row_sum[i] += s[rb][kb][e];
                }
#pragma unroll
        for (int i = 0; i < 2 * ROW_BLOCKS; i++) {
            row_sum[i] += __shfl_xor_sync(FULL_WARP, row_sum[i], 1);
            row_sum[i] += __shfl_xor_sync(FULL_WARP, row_sum[i], 2);
            l_i[i] = l_i[i] * alpha[i] + row_sum[i];
        }
#pragma unroll
        for (int rb = 0; rb < ROW_BLOCKS; rb++)
#pragma unroll
            for (int db = 0; db < D_BLOCKS; db++)
#pragma unroll
                for (int e = 0; e < 4; e++) o_acc[rb][db][e] *= alpha[2 * rb + e / 2];

        // O += P V. The A operand of keys 16ks .. 16ks + 15 is the two S fragments of key blocks 2ks and 2ks + 1,
        // rounded to T in registers (l_i summed them unrounded, in float32, above). V is stored [key][d]: the
        // transposing ldmatrix gives the B operand. Lanes 0-7: keys 0-7, dims 0-7 (b0 of block db); 8-15: keys 8-15
        // (b1); 16-31: the same for dims 8-15 (block db + 1). Each V fragment feeds both row blocks.
#pragma unroll
        for (int ks = 0; ks < KEY_STEPS; ks++) {
            uint32_t p_frag[ROW_BLOCKS][4];
#pragma unroll
            for (int rb = 0; rb < ROW_BLOCKS; rb++) {
                p_frag[rb][0] = pack_pair(s[rb][2 * ks][0], s[rb][2 * ks][1], T());
                p_frag[rb][1] = pack_pair(s[rb][2 * ks][2], s[rb][2 * ks][3], T());
                p_frag[rb][2] = pack_pair(s[rb][2 * ks + 1][0], s[rb][2 * ks + 1][1], T());
                p_frag[rb][3] = pack_pair(s[rb][2 * ks + 1][2], s[rb][2 * ks + 1][3], T());
            }
#pragma unroll
            for (int db = 0; db < D_BLOCKS; db += 2) {
                uint32_t b[4];
                ldmatrix_x4_trans_at(b, (v_buffer ^ db * BLOCK_BYTES) + ks * MMA_K * ROW_BYTES);
#pragma unroll
                for (int rb = 0; rb < ROW_BLOCKS; rb++) {
                    mma_m16n8k16(o_acc[rb][db], p_frag[rb], b[0], b[1], T());
                    mma_m16n8k16(o_acc[rb][db + 1], p_frag[rb], b[2], b[3], T());
                }
            }
        }
    }

    // One division per row, at the very end, and the row's log-sum-exp. Every lane of a quad holds the same m_i and
    // l_i; lane t stores dimensions 8db + 2t and 8db + 2t + 1 of its two rows.
#pragma unroll
    for (int i = 0; i < 2 * ROW_BLOCKS; i++) {
        const int rb = i / 2, r = i % 2;
        const int64_t row = row_g + 16 * rb + 8 * r;
        // The max key's score in double, by the four lanes of the quad (so before the row test: all lanes take part).
        const double s_max = quad_score_in_double<T, D>(q + row * q_strides.s, k, k_strides.s,
                                                        row < S_q ? max_key[i] : -1, scale, t);
        if (row >= S_q) continue;
        const float inv_l = 1.0f / l_i[i];
#pragma unroll
        for (int db = 0; db < D_BLOCKS; db++)
            *reinterpret_cast<float2 *>(o + row * o_strides.s + db * MMA_N + 2 * t) =
                make_float2(o_acc[rb][db][2 * r] * inv_l, o_acc[rb][db][2 * r + 1] * inv_l);
        if (t == 0) {   // LSE from the max key's score in double (m_i is raw: m_i * qk_scale is the max in base 2)
            float residual;   // (the tensor-core forward stores no residual)
            lse[row] = lse_from_max_score(s_max, m_i[i] * qk_scale, l_i[i], &residual);
        }
    }
}

// The kernel reads rows of T 16 bytes at a time and writes O as float2s: each row must start on that many bytes,
// with its D elements next to each other.
static void check_rows(const char *name, const void *x, fa_strides strides, int element_bytes, int row_align) {
    const int64_t per = row_align / element_bytes;   // elements in one aligned unit
    const int aligned = ((uintptr_t)x % row_align == 0) && strides.b % per == 0 && strides.h % per == 0 &&
                        strides.s % per == 0;
    if (strides.d != 1 || !aligned)
        fa_die("the tensor-core kernels need %s with stride d = 1, the other strides multiples of %lld and a "
               "%d-byte aligned pointer (got strides %lld, %lld, %lld, %lld)", name, (long long)per, row_align,
               (long long)strides.b, (long long)strides.h, (long long)strides.s, (long long)strides.d);
}

// Launches one instantiation. The tiles pass the 48 KiB a kernel gets without asking (D = 128, BLOCK_M = 128 needs
// 96 KiB with the two K/V buffers), so the kernel asks for what it uses.
template <typename T, int D, int BLOCK_M, int BLOCK_N>
static void launch(const fa_shape *shape, const void *q, fa_strides q_strides, const void *k, fa_strides k_strides,
                   const void *v, fa_strides v_strides, float *o, fa_strides o_strides, float *lse) {
    auto kernel = flash_forward_rows_together_kernel<T, D, BLOCK_M, BLOCK_N>;
    const int smem_bytes = (BLOCK_M + 4 * BLOCK_N + 1) * D * (int)sizeof(T);   // + one row: the alignment
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    const unsigned int q_tiles = (unsigned int)((shape->Sq + BLOCK_M - 1) / BLOCK_M);
    const float qk_scale = shape->scale * LOG2E;
    const int64_t BH = shape->B * shape->H;
    constexpr int THREADS = BLOCK_M / (ROW_BLOCKS * WARP_ROWS) * WARP_SIZE;
    for (int64_t bh_first = 0; bh_first < BH; bh_first += MAX_GRID_Y) {   // fa_contract.h: the grid limit
        kernel<<<dim3(q_tiles, heads_in_launch(BH, bh_first)), THREADS, smem_bytes>>>(
            static_cast<const T *>(q), q_strides, static_cast<const T *>(k), k_strides, static_cast<const T *>(v),
            v_strides, o, o_strides, lse, shape->Sq, shape->Sk, shape->H, bh_first, shape->scale, qk_scale,
            shape->causal);
        FA_CUDA_CHECK_LAUNCH();
    }
}

template <typename T, int D>
static void launch_tiles(const fa_shape *shape, int block_m, int block_n, const void *q, fa_strides q_strides,
                         const void *k, fa_strides k_strides, const void *v, fa_strides v_strides, float *o,
                         fa_strides o_strides, float *lse) {
    if (block_m == 64 && block_n == 64)
        launch<T, D, 64, 64>(shape, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
    else if (block_m == 128 && block_n == 64)
        launch<T, D, 128, 64>(shape, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
    else if (block_m == 128 && block_n == 128)
        launch<T, D, 128, 128>(shape, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
    else
        fa_die("step 3j is compiled for BLOCK_M x BLOCK_N = %s, not %d x %d", KEY_OFFSETS_CUDA_TILES_TEXT,
               block_m, block_n);
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
    default: fa_die("the tensor-core kernels support D in {64, 128}, not %lld", (long long)shape->D);
    }
}

extern "C" void flash_forward_rows_together_cuda(const fa_shape *shape, int dtype, int block_m, int block_n,
                                             const tc_forward_tensors *t) {
    const void *q = t->q, *k = t->k, *v = t->v;
    const fa_strides q_strides = t->q_strides, k_strides = t->k_strides, v_strides = t->v_strides;
    const fa_strides o_strides = t->o_strides;
    float *o = t->o, *lse = t->lse;
    if (shape->Sk > INT_MAX) fa_die("step 3j numbers keys in 32 bits: S_k = %lld is too long", (long long)shape->Sk);
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
        fa_die("the tensor-core kernels take fp16 or bf16 inputs, not %s", fa_dtype_name(dtype));
}
