// 1_register_tiles_cuda.cu - phase 5, step 1, on the GPU: the forward of phase 3 step 3, with register tiles.
//
// What it adds over phase 3 step 3 (phase3_forward_4d/3_lse_cuda.cu): a thread no longer owns a query row. The
//   256 threads of a block compute the BLOCK_M x BLOCK_N tile of S together, as a blocked SGEMM does: each thread
//   ROWS x KEYS scores (8 x 4 at the default 128 x 64 tile) in registers, so that each value it reads from shared
//   memory feeds several multiply-adds (phase 3: one). The row max is combined across the 16 threads of a row with
//   warp shuffles; P goes through shared memory, and O += P V is register-tiled the same way. Same algorithm, same
//   arguments, same causal pruning and LSE.
// CPU twin:  phase5_tensor_cores/1_register_tiles_cpu.c
// Diff:      diff -u phase3_forward_4d/3_lse_cuda.cu phase5_tensor_cores/1_register_tiles_cuda.cu
// Run:       build/bin/phase5_tensor_cores --impl cuda --step 1 --B 4 --H 16 --S 4096 --D 64
//
// Thread mapping (256 threads = 16 x 16; tx = threadIdx.x % 16, ty = threadIdx.x / 16, so a warp is two values of
// ty and the 16 threads of a row are neighbouring lanes):
//
//            keys of the tile: tx, tx+16, tx+32, tx+48             O columns: float4 number tx, tx+16, ...
//   rows     +----------------------------------+                  +---------------------------+
//   ty*ROWS  |  s[r][c], r < ROWS, c < KEYS     |      P (shared)  |  acc[r][c], r < ROWS      |
//   ...      |  one thread: ROWS x KEYS scores  |  --------------> |  one thread: ROWS x D/16   |
//            +----------------------------------+                  +---------------------------+
//
// Shared memory, in floats (a row of a tile is padded by 4 floats, so that the rows start in different banks):
//   q_tile [BLOCK_M][D + 4]   k_tile [BLOCK_N][D + 4]   v_tile [BLOCK_N][D + 4]   p_tile [BLOCK_N][BLOCK_M + 4]
// Bank conflicts: shared memory serves a float4 load 8 threads at a time, from 32 banks of 4 bytes. Threads tx and
// tx+1 read keys tx and tx+1 of k_tile, whose rows are (D + 4) / 4 float4s apart: an odd number (17 at D = 64), so 8
// neighbouring threads hit 8 different groups of 4 banks. The same padding serves p_tile (written by key) and v_tile
// (read along a row: consecutive float4s); q_tile and p_tile are read by 8 threads of one ty at the same address
// (a broadcast).
#include "fa_cuda_check.h"
#include "fa_warp.cuh"   // FULL_WARP
#include "fa_contract.h"
#include "register_tiles.h"

#include <math.h>
#include <stdint.h>

// m_i and l_i are in base 2: LSE = LN2 * m_i + ln(l_i) (LOG2E and LN2: common/fa_math.h)
#define MAX_GRID_X 2147483647LL     // the hardware limit of gridDim.x; gridDim.y's is MAX_GRID_Y (fa_contract.h):
                                    // more heads or more Q tiles take more launches
#define THREADS 256
#define THREADS_N 16                // threads along a row of S (keys) and of O (dimensions): tx
#define THREADS_M 16                // threads along the rows: ty
#define PAD REGTILE_CUDA_PAD        // floats added to each row of a shared tile
#define TWO_BLOCKS_SMEM_BYTES (110 * 1024)   // at most this much shared memory per block lets two share an SM

// The sizes one instantiation works with.
template <int D, int BLOCK_M, int BLOCK_N> struct regtile {
    static constexpr int ROWS = BLOCK_M / THREADS_M;                  // query rows of one thread
    static constexpr int KEYS = BLOCK_N / THREADS_N;                  // keys of one thread
    static constexpr int D4 = D / 4;                                  // float4s in a row of Q, K, V, O
    static constexpr int O_CHUNKS = D4 >= THREADS_N ? D4 / THREADS_N : 1;   // float4s of O per thread and row
    static constexpr int LD4 = (D + PAD) / 4;                         // float4s per row of q/k/v_tile (odd)
    static constexpr int LDP4 = (BLOCK_M + PAD) / 4;                  // float4s per row of p_tile (odd)
    static constexpr int SMEM_FLOAT4 = (BLOCK_M + 2 * BLOCK_N) * LD4 + BLOCK_N * LDP4;
    // Two blocks fit on an SM (an H100 has 228 KiB of shared memory per SM) when each needs at most 110 KiB (D = 64,
    // or D = 128 with 64 x 32 tiles); then each thread may use 128 registers, else 255.
    static constexpr int MIN_BLOCKS = SMEM_FLOAT4 * 16 <= TWO_BLOCKS_SMEM_BYTES ? 2 : 1;
};

// scale * q_row . k_row(key) in double (fa_math.h, score_in_double), by the THREADS_N threads of the row together:
// thread tx multiplies the float4s tx, tx + 16, ... of the two rows, with all of its loads in flight at once, and
// four shuffles add the 16 partial sums. (One thread walking the D products alone would wait for each load in turn,
// at the end of the kernel, where no other work hides the wait.) Called by the whole warp, with the same key in the
// row's 16 threads; key < 0 (the row saw no key, or is past S_q) loads nothing and gives NaN.
template <int D>
__device__ __forceinline__ double row_score_in_double(const float *q_row, const float *k, int64_t stride_ks,
                                                      int64_t key, float scale, int tx) {
    constexpr int D4 = D / 4;
    double dot = 0.0;
    if (key >= 0) {
        const float4 *q4 = reinterpret_cast<const float4 *>(q_row);
        const float4 *k4 = reinterpret_cast<const float4 *>(k + key * stride_ks);
#pragma unroll
        for (int i = 0; i < (D4 + THREADS_N - 1) / THREADS_N; i++) {
            const int c = tx + THREADS_N * i;
            if (c >= D4) break;
            const float4 a = q4[c], b = k4[c];
            dot += (double)a.x * b.x + (double)a.y * b.y + (double)a.z * b.z + (double)a.w * b.w;
        }
    }
#pragma unroll
    for (int offset = 1; offset < THREADS_N; offset *= 2) dot += __shfl_xor_sync(FULL_WARP, dot, offset);
    return key < 0 ? NAN : (double)scale * dot;
}

__device__ __forceinline__ float dot4(float4 a, float4 b, float sum) {
    sum = fmaf(a.x, b.x, sum);
    sum = fmaf(a.y, b.y, sum);
    sum = fmaf(a.z, b.z, sum);
    return fmaf(a.w, b.w, sum);
}

__device__ __forceinline__ void fma4(float p, float4 v, float4 &acc) {
    acc.x = fmaf(p, v.x, acc.x);
    acc.y = fmaf(p, v.y, acc.y);
    acc.z = fmaf(p, v.z, acc.z);
    acc.w = fmaf(p, v.w, acc.w);
}

// Copies rows [first, first + BLOCK) of x (a [S, D] head with row stride stride_s) into a shared tile of row
// length LD4 float4s, times `factor`; rows past S become zeros. All threads together, consecutive threads on
// consecutive float4s of a row (coalesced reads, conflict-free writes).
template <int D, int BLOCK, int LD4>
__device__ __forceinline__ void load_tile(float4 *tile, const float *x, int64_t stride_s, int64_t first, int64_t S,
                                          float factor) {
    constexpr int D4 = D / 4;
#pragma unroll
    for (int f = threadIdx.x; f < BLOCK * D4; f += THREADS) {
        const int row = f / D4, c4 = f % D4;
        float4 x4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (first + row < S) x4 = reinterpret_cast<const float4 *>(x + (first + row) * stride_s)[c4];
        tile[row * LD4 + c4] = make_float4(x4.x * factor, x4.y * factor, x4.z * factor, x4.w * factor);
    }
}

// grid: (heads of this launch, Q tiles of this launch), block: 256 threads. Phase 3's grid is the other way round;
// see q_start below for why.
// q, o: [B, H, S_q, D]; k, v: [B, H, S_k, D], with strides (stride d is 1); lse: [B, H, S_q], contiguous.
template <int D, int BLOCK_M, int BLOCK_N>
__global__ void __launch_bounds__(THREADS, regtile<D, BLOCK_M, BLOCK_N>::MIN_BLOCKS)
flash_forward_regtile_kernel(const float *__restrict__ q, fa_strides q_strides, const float *__restrict__ k,
                             fa_strides k_strides, const float *__restrict__ v, fa_strides v_strides,
                             float *__restrict__ o, fa_strides o_strides, float *__restrict__ lse, int64_t S_q,
                             int64_t S_k, int64_t H, int64_t bh_first, int64_t q_tile_top, float scale,
                             float qk_scale, int causal) {
    using cfg = regtile<D, BLOCK_M, BLOCK_N>;
    constexpr int ROWS = cfg::ROWS, KEYS = cfg::KEYS, D4 = cfg::D4, O_CHUNKS = cfg::O_CHUNKS;
    constexpr int LD4 = cfg::LD4, LDP4 = cfg::LDP4;
    extern __shared__ float4 smem[];
    float4 *q_tile = smem;                       // [BLOCK_M][LD4]
    float4 *k_tile = q_tile + BLOCK_M * LD4;     // [BLOCK_N][LD4]
    float4 *v_tile = k_tile + BLOCK_N * LD4;     // [BLOCK_N][LD4]
    float4 *p_tile = v_tile + BLOCK_N * LD4;     // [BLOCK_N][LDP4]: P transposed, a key per row

    // The grid's first index is the head: (b, h) from bh, and where that head starts in each tensor.
    const int64_t bh = bh_first + blockIdx.x, b = bh / H, h = bh % H;
    q += b * q_strides.b + h * q_strides.h;
    k += b * k_strides.b + h * k_strides.h;
    v += b * v_strides.b + h * v_strides.h;
    o += b * o_strides.b + h * o_strides.h;
    lse += bh * S_q;

    const int tx = threadIdx.x % THREADS_N, ty = threadIdx.x / THREADS_N;
    // Causal: the last Q tiles see the most keys. The GPU starts blocks in the order of their index, x first:
    // blockIdx.y = 0 is the last Q tile (q_tile_top) of every head, so that all the longest blocks start first and
    // the short ones fill the GPU at the end, instead of a few long ones running alone.
    const int64_t q_start = (q_tile_top - blockIdx.y) * BLOCK_M;
    const int row0 = ty * ROWS;   // this thread's rows: q_start + row0 + r, r < ROWS
    // This thread's float4 columns of O: tx + 16 c. With D < 64 there are fewer than 16 of them and the threads past
    // them compute a copy of another thread's column (no branch in the loop) and store nothing.
    int o_col4[O_CHUNKS];
#pragma unroll
    for (int c = 0; c < O_CHUNKS; c++) o_col4[c] = (tx + THREADS_N * c) % D4;
    const bool stores_o = tx < D4;

    // The Q tile, times qk_scale (scores come out in base 2); rows past S_q are zeros, computed and never stored.
    load_tile<D, BLOCK_M, LD4>(q_tile, q, q_strides.s, q_start, S_q, qk_scale);

    float4 acc[ROWS][O_CHUNKS];
    float m_i[ROWS], l_i[ROWS];   // l_i: this thread's share of the row sum (its KEYS keys of every tile)
    // The key that gave each row's m_i (fa_math.h, score_in_double), kept by the row's thread tx = 0. In shared
    // memory, not in registers: a thread's 8 rows would take 16 more registers, and at 128 the kernel would spill.
    __shared__ int64_t max_key[BLOCK_M];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
#pragma unroll
        for (int c = 0; c < O_CHUNKS; c++) acc[r][c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        m_i[r] = -INFINITY;
        l_i[r] = 0.0f;
        if (tx == 0) max_key[row0 + r] = -1;
    }

    for (int64_t k_start = 0; k_start < S_k; k_start += BLOCK_N) {
        // The three causal stages: a tile entirely in the future ends the loop before it is loaded (every later
        // tile lies further in the future); a tile entirely in the past needs no mask; a diagonal tile does.
        // The stage depends on the block's indices only, so all its threads leave the loop together.
        const int stage = causal_tile_stage(causal, q_start, k_start, BLOCK_M, BLOCK_N, S_q, S_k);
        if (stage == TILE_FUTURE) break;
        // Every thread has finished reading the previous K, V and P tiles before anyone overwrites them.
        __syncthreads();
        load_tile<D, BLOCK_N, LD4>(k_tile, k, k_strides.s, k_start, S_k, 1.0f);
        load_tile<D, BLOCK_N, LD4>(v_tile, v, v_strides.s, k_start, S_k, 1.0f);
        __syncthreads();

        // The register tile of scores: s[r][c] = qk_scale * q_(row0 + r) . k_(tx + 16 c). Per float4 of d, a thread
        // reads KEYS float4s of K and ROWS of Q, and does ROWS * KEYS * 4 multiply-adds with them (8 x 4 x 4 = 128
        // for 12 loads; phase 3: 4 for 1).
        float s[ROWS][KEYS];
#pragma unroll
        for (int r = 0; r < ROWS; r++)
#pragma unroll
            for (int c = 0; c < KEYS; c++) s[r][c] = 0.0f;
        // Unrolled, the loop lets the compiler load the next float4s while it computes with these: that hides the
        // loads' latency, in registers. With two blocks per SM (128 registers a thread) there are no registers to
        // spare, but twice the warps to hide the latency: the loop stays rolled.
#pragma unroll(cfg::MIN_BLOCKS == 2 ? 1 : 4)
        for (int d4 = 0; d4 < D4; d4++) {
            float4 k4[KEYS];
#pragma unroll
            for (int c = 0; c < KEYS; c++) k4[c] = k_tile[(tx + THREADS_N * c) * LD4 + d4];
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                const float4 q4 = q_tile[(row0 + r) * LD4 + d4];
#pragma unroll
                for (int c = 0; c < KEYS; c++) s[r][c] = dot4(q4, k4[c], s[r][c]);
            }
        }

        // Keys after the last one a row may see get -INFINITY: exp2(-inf) = 0, they take no part. Only diagonal
        // tiles (row i sees keys j <= i) and the last tile (keys past S_k) have any.
        if (stage == TILE_DIAGONAL || k_start + BLOCK_N > S_k) {
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                const int64_t row = q_start + row0 + r;
                const int64_t last_key = stage == TILE_DIAGONAL && row < S_k - 1 ? row : S_k - 1;
#pragma unroll
                for (int c = 0; c < KEYS; c++)
                    if (k_start + tx + THREADS_N * c > last_key) s[r][c] = -INFINITY;
            }
        }

        // The online softmax, row by row. A row's max: each thread's KEYS scores, then the 16 threads of the row
        // (lanes that differ in their lowest 4 bits) exchange theirs with butterfly shuffles, 4 steps.
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            float m_tile = -INFINITY;
#pragma unroll
            for (int c = 0; c < KEYS; c++) m_tile = fmaxf(m_tile, s[r][c]);
#pragma unroll
            for (int offset = 1; offset < THREADS_N; offset *= 2)
                m_tile = fmaxf(m_tile, __shfl_xor_sync(FULL_WARP, m_tile, offset));
            const float m_new = fmaxf(m_i[r], m_tile);
            // The max moved: remember which key holds it, for the LSE (fa_math.h, score_in_double): the last key of
            // the tile with that score, as on the CPU (each thread its own last one, then the largest of the 16).
            // After the first tiles the max seldom moves, so the warp searches only when one of its rows' did.
            const bool moved = m_tile > m_i[r];
            if (__any_sync(FULL_WARP, moved)) {
                int64_t key = -1;
#pragma unroll
                for (int c = 0; c < KEYS; c++)
                    if (s[r][c] == m_tile) key = k_start + tx + THREADS_N * c;
#pragma unroll
                for (int offset = 1; offset < THREADS_N; offset *= 2)
                    key = max(key, (int64_t)__shfl_xor_sync(FULL_WARP, (long long)key, offset));
                if (moved && tx == 0) max_key[row0 + r] = key;
            }
            // A row that has seen no key yet has m_new = -inf; subtracting it would give -inf - -inf = NaN.
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            float row_sum = 0.0f;
#pragma unroll
            for (int c = 0; c < KEYS; c++) {
                s[r][c] = exp2f(s[r][c] - m_use);   // p_ij, relative to the new max
                row_sum += s[r][c];
            }
            // Everything accumulated so far was relative to the old max: alpha moves it to the new one. The row
            // sum needs no shuffle here: every thread keeps its share, rescaled by the same alpha, and the 16
            // shares are added once, at the end.
            const float alpha = exp2f(m_i[r] - m_use);
            l_i[r] = l_i[r] * alpha + row_sum;
            m_i[r] = m_new;
#pragma unroll
            for (int c = 0; c < O_CHUNKS; c++) {
                acc[r][c].x *= alpha;
                acc[r][c].y *= alpha;
                acc[r][c].z *= alpha;
                acc[r][c].w *= alpha;
            }
        }

        // P to shared memory, transposed (a row of p_tile per key), 4 rows of a thread in one float4.
#pragma unroll
        for (int c = 0; c < KEYS; c++)
#pragma unroll
            for (int r = 0; r < ROWS; r += 4)
                p_tile[(tx + THREADS_N * c) * LDP4 + (row0 + r) / 4] =
                    make_float4(s[r][c], s[r + 1][c], s[r + 2][c], s[r + 3][c]);
        __syncthreads();

        // acc += P V_tile (acc was rescaled above): per key j, ROWS / 4 float4s of P (a broadcast) and O_CHUNKS of
        // V, then ROWS * O_CHUNKS * 4 multiply-adds.
#pragma unroll 8
        for (int j = 0; j < BLOCK_N; j++) {
            float4 v4[O_CHUNKS];
#pragma unroll
            for (int c = 0; c < O_CHUNKS; c++) v4[c] = v_tile[j * LD4 + o_col4[c]];
#pragma unroll
            for (int r = 0; r < ROWS; r += 4) {
                const float4 p4 = p_tile[j * LDP4 + (row0 + r) / 4];
#pragma unroll
                for (int c = 0; c < O_CHUNKS; c++) {
                    fma4(p4.x, v4[c], acc[r][c]);
                    fma4(p4.y, v4[c], acc[r + 1][c]);
                    fma4(p4.z, v4[c], acc[r + 2][c]);
                    fma4(p4.w, v4[c], acc[r + 3][c]);
                }
            }
        }
    }

    // One division per row, at the very end; and the row's log-sum-exp, the one number the backward pass needs to
    // rebuild its row of P, from the max key's score in double (fa_math.h, score_in_double). The row's 16 threads
    // read the max_key that its thread tx = 0 wrote: the warp synchronises first.
    __syncwarp();
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        float l = l_i[r];
#pragma unroll
        for (int offset = 1; offset < THREADS_N; offset *= 2) l += __shfl_xor_sync(FULL_WARP, l, offset);
        const int64_t row = q_start + row0 + r;
        const double s_max = row_score_in_double<D>(q + row * q_strides.s, k, k_strides.s,
                                                    row < S_q ? max_key[row0 + r] : -1, scale, tx);
        if (row >= S_q) continue;
        const float inv_l = 1.0f / l;
        if (stores_o) {
#pragma unroll
            for (int c = 0; c < O_CHUNKS; c++)
                reinterpret_cast<float4 *>(o + row * o_strides.s)[o_col4[c]] =
                    make_float4(acc[r][c].x * inv_l, acc[r][c].y * inv_l, acc[r][c].z * inv_l, acc[r][c].w * inv_l);
        }
        if (tx == 0) {
            float residual;   // (step 1 stores no residual)
            lse[row] = lse_from_max_score(s_max, m_i[r], l, &residual);
        }
    }
}

// The kernel reads and writes whole rows as float4s: check_float4_rows() (common/fa_contract.h) checks that
// every row starts on 16 bytes, with its D floats next to each other.

// Launches one instantiation. The tiles need more than the 48 KiB a kernel gets without asking (up to 165 KiB at
// D = 128), so the kernel asks for what it uses, after checking that this GPU has it.
template <int D, int BLOCK_M, int BLOCK_N>
static void launch(const fa_shape *shape, const float *q, fa_strides q_strides, const float *k, fa_strides k_strides,
                   const float *v, fa_strides v_strides, float *o, fa_strides o_strides, float *lse) {
    auto kernel = flash_forward_regtile_kernel<D, BLOCK_M, BLOCK_N>;
    const int bytes = regtile<D, BLOCK_M, BLOCK_N>::SMEM_FLOAT4 * (int)sizeof(float4);   // the tiles (dynamic)
    const int key_bytes = BLOCK_M * (int)sizeof(int64_t);                                // max_key (static)
    static_assert(regtile<D, BLOCK_M, BLOCK_N>::SMEM_FLOAT4 * 16 == (BLOCK_M + 2 * BLOCK_N) * (D + PAD) * 4 +
                  BLOCK_N * (BLOCK_M + PAD) * 4, "the header's smem bytes agree (+ max_key)");
    int device = 0, max_bytes = 0;
    FA_CUDA_CHECK(cudaGetDevice(&device));
    FA_CUDA_CHECK(cudaDeviceGetAttribute(&max_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (bytes + key_bytes > max_bytes)
        fa_die("phase 5 step 1 with D = %d and %d x %d tiles needs %d bytes of shared memory per block, this GPU has "
               "%d: use smaller tiles (--block-m 64 --block-n 32)", D, BLOCK_M, BLOCK_N, bytes + key_bytes, max_bytes);
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    const int64_t q_tiles = (shape->Sq + BLOCK_M - 1) / BLOCK_M, BH = shape->B * shape->H;
    const float qk_scale = shape->scale * LOG2E;
    // Q tiles from the last one down, MAX_GRID_Y at a time; in each, every head (MAX_GRID_X at a time).
    for (int64_t y_first = 0; y_first < q_tiles; y_first += MAX_GRID_Y) {
        const unsigned int tiles = (unsigned int)(q_tiles - y_first < MAX_GRID_Y ? q_tiles - y_first : MAX_GRID_Y);
        for (int64_t bh_first = 0; bh_first < BH; bh_first += MAX_GRID_X) {
            const unsigned int heads = (unsigned int)(BH - bh_first < MAX_GRID_X ? BH - bh_first : MAX_GRID_X);
            kernel<<<dim3(heads, tiles), THREADS, bytes>>>(q, q_strides, k, k_strides, v, v_strides, o, o_strides,
                                                           lse, shape->Sq, shape->Sk, shape->H, bh_first,
                                                           q_tiles - 1 - y_first, shape->scale, qk_scale,
                                                           shape->causal);
            FA_CUDA_CHECK_LAUNCH();
        }
    }
}

template <int D>
static void launch_tiles(const fa_shape *shape, int block_m, int block_n, const float *q, fa_strides q_strides,
                         const float *k, fa_strides k_strides, const float *v, fa_strides v_strides, float *o,
                         fa_strides o_strides, float *lse) {
    if (block_m == 128 && block_n == 64)
        launch<D, 128, 64>(shape, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
    else if (block_m == 64 && block_n == 64)
        launch<D, 64, 64>(shape, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
    else if (block_m == 64 && block_n == 32)
        launch<D, 64, 32>(shape, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
    else
        fa_die("the CUDA kernel of phase 5 step 1 is compiled for BLOCK_M x BLOCK_N = %s, not %d x %d",
               REGTILE_CUDA_TILES_TEXT, block_m, block_n);
}

extern "C" void flash_forward_regtile_cuda(const fa_shape *shape, int block_m, int block_n,
                                           const forward_tensors *t) {
    const float *q = t->q, *k = t->k, *v = t->v;
    const fa_strides q_strides = t->q_strides, k_strides = t->k_strides, v_strides = t->v_strides;
    const fa_strides o_strides = t->o_strides;
    float *o = t->o, *lse = t->lse;
    check_float4_rows("Q", q, q_strides);
    check_float4_rows("K", k, k_strides);
    check_float4_rows("V", v, v_strides);
    check_float4_rows("O", o, o_strides);
    switch (shape->D) {
    case 16:
        launch_tiles<16>(shape, block_m, block_n, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
        break;
    case 32:
        launch_tiles<32>(shape, block_m, block_n, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
        break;
    case 64:
        launch_tiles<64>(shape, block_m, block_n, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
        break;
    case 128:
        launch_tiles<128>(shape, block_m, block_n, q, q_strides, k, k_strides, v, v_strides, o, o_strides, lse);
        break;
    default: fa_die("the CUDA kernel of phase 5 step 1 supports D in {16, 32, 64, 128}, not %lld", (long long)shape->D);
    }
}
