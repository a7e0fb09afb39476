// fa_contract.h - the kernel contract: what every attention kernel of the suite shares, CPU and CUDA alike.
//
// The phases' kernels are two base kernels (phase 3 step 3's forward and phase 4's two backward passes) and the
// steps and features derived from them; every one of them takes its tensors in the structs below, splits its grid
// the same way, sums a score in the same order and prunes causal tiles by the same rule. Those rules live here, once,
// so that a derived kernel and its base cannot drift apart on them (docs/architecture.md: the foundation).
//
// Every tensor comes with its strides (fa_strides, in elements: element (b, h, s, d) of Q is at
// q[b * q_strides.b + h * q_strides.h + s * q_strides.s + d * q_strides.d], the chapter's stride_qb, stride_qh,
// stride_qs, stride_qd), so a view of a larger tensor, such as a [B, S, H, D] buffer seen as [B, H, S, D], needs no
// copy. LSE and Delta are always contiguous [B, H, Sq].
#ifndef FA_CONTRACT_H
#define FA_CONTRACT_H

#include <stdint.h>

#include "fa_math.h"    // FA_HOST_DEVICE
#include "fa_shape.h"
#include "fa_tensor.h"  // fa_die

#ifdef __cplusplus
extern "C" {
#endif

// --- The tensors of one call ---------------------------------------------------------------------------------------
// The CPU functions take host pointers, the CUDA functions device pointers.

// A forward (phase 3 and every forward derived from it). Step 1 reads q, k, v and writes o; step 3 also writes lse
// (and lse_residual when it is not NULL).
typedef struct {
    const float *q, *k, *v;      // q [B, H, Sq, D], k and v [B, H, Sk, D]
    fa_strides q_strides, k_strides, v_strides;
    float *o;                    // [B, H, Sq, D]
    fa_strides o_strides;
    float *lse, *lse_residual;   // step 3: contiguous [B, H, Sq]; the others leave them alone
} forward_tensors;

// A backward (phase 4 and every backward derived from it).
typedef struct {
    const float *q, *k, *v;      // the forward's inputs: q [B, H, Sq, D], k and v [B, H, Sk, D]
    const float *o, *lse;        // what the forward saved: o [B, H, Sq, D], lse [B, H, Sq] (natural log)
    const float *dout;           // dO = dL/dO, [B, H, Sq, D]
    fa_strides q_strides, k_strides, v_strides, o_strides, do_strides;
    float *delta;                // workspace [B, H, Sq]: Delta = rowsum(dO * O), written by the preprocess
    float *dq, *dk, *dv;         // the gradients: dq [B, H, Sq, D], dk and dv [B, H, Sk, D]
    fa_strides dq_strides, dk_strides, dv_strides;
    const float *lse_residual;   // [B, H, Sq]: what LSE's float32 rounding lost (phase 3 step 3, fa_math.h); NULL = 0
} backward_tensors;

// --- What the float32 CUDA kernels are compiled for -----------------------------------------------------------------
// Each (D, BLOCK_M, BLOCK_N) is one template instantiation per kernel, and every one costs compile time for every GPU
// architecture of the build, so the lists are short. The CPU functions take any sizes.
// The forward (phase 3 and the forwards of phase 6):
#define FLASH4D_CUDA_HEAD_DIMS {16, 32, 64, 128, 0}
#define FLASH4D_CUDA_TILES_TEXT "64x32, 64x64 or 128x64"
static inline int flash4d_cuda_supports_tiles(int block_m, int block_n) {
    return (block_m == 64 && (block_n == 32 || block_n == 64)) || (block_m == 128 && block_n == 64);
}
// The backward passes (phase 4 and the backward passes of phase 6), D in {16, 32, 64, 128}:
#define BACKWARD_CUDA_TILES_TEXT "64x64, 32x64, 64x32"
static inline int backward_cuda_supports_tiles(int block_m, int block_n) {
    return (block_m == 64 && block_n == 64) || (block_m == 32 && block_n == 64) || (block_m == 64 && block_n == 32);
}

// The float32 CUDA kernels read and write rows as float4s: every row of Q, K, V and O must start on 16 bytes, with
// its D floats next to each other (true of every contiguous tensor at the D they support). Exits 2 with one line
// when one does not.
static inline void check_float4_rows(const char *name, const float *x, fa_strides strides) {
    const int aligned = ((uintptr_t)x % 16 == 0) && strides.b % 4 == 0 && strides.h % 4 == 0 && strides.s % 4 == 0;
    if (strides.d != 1 || !aligned)
        fa_die("the CUDA kernels need %s with stride d = 1, the other strides multiples of 4 and a 16-byte "
               "aligned pointer (got strides %lld, %lld, %lld, %lld)", name, (long long)strides.b,
               (long long)strides.h, (long long)strides.s, (long long)strides.d);
}
static inline void check_float4_tensors(const forward_tensors *t) {
    check_float4_rows("Q", t->q, t->q_strides);
    check_float4_rows("K", t->k, t->k_strides);
    check_float4_rows("V", t->v, t->v_strides);
    check_float4_rows("O", t->o, t->o_strides);
}

// --- The grid of the kernels of phases 3 and 4 (and of phase 5's steps 2, 3 and 4, and phase 6) -------------------
// blockIdx.x is the tile (a Q tile in the forward and the dQ pass, a K tile in the dK/dV pass) and blockIdx.y the
// head, bh = b * H + h. gridDim.y is at most 65,535 (a hardware limit), and B * H may be more: the launcher then
// launches the kernel once for every MAX_GRID_Y heads, passing the first head of the launch (bh_first), and the
// kernel's head is bh_first + blockIdx.y. heads_in_launch() is how many heads the launch starting at bh_first has.
#define MAX_GRID_Y 65535
static inline unsigned int heads_in_launch(int64_t BH, int64_t bh_first) {
    return (unsigned int)(BH - bh_first < MAX_GRID_Y ? BH - bh_first : MAX_GRID_Y);
}

// --- How the GPU kernels sum a score q_i . k_j: the forward (phase 3) and the backward (phase 4) alike ------------
// A score is summed as SCORE_PARTS = D / SCORE_PART_DIMS partial sums, part p over the dims p, p + SCORE_PARTS,
// p + 2 * SCORE_PARTS, ... in increasing order, and the parts are then added in pairs: (part 0 + part 1) +
// (part 2 + part 3), and so on. That is the order of the backward, which splits a row over SCORE_PARTS threads. Why
// the forward follows it: the backward recomputes P_ij = exp(s_ij - LSE_i), and only when its s_ij has the very bits
// the forward's had does the largest p of a row come back as accurately as the stored LSE allows. Summed in another
// order, the two scores differ by float32 rounding, which at logits of a few hundred is 1e-5 or more, and every
// gradient inherits it (docs/04-backward.md measures it). fa_row_split.cuh holds the split and the sums.
#define SCORE_PART_DIMS 16
// The CPU code, forward and backward alike, sums a score in CPU_SCORE_PARTS = 4 parts, dim d in part d % 4, added in
// pairs: the order of the lanes of a 4-float SIMD register, which is how standard attention's vectorised dot product
// (phase 1) sums. (In one part, a sum of 64 or 128 products loses 2-4x more than that at large logits.)
#define CPU_SCORE_PARTS 4

// --- The causal rule, shared by the kernels, the tile-count test and the figure -----------------------------------
// Row i sees key j when j <= i (top-left aligned). For one (Q tile, K tile) pair, the tile of rows
// q_start .. q_start + block_m - 1 and keys k_start .. k_start + block_n - 1 (cut at S_q and S_k) is
//   TILE_FUTURE    every key comes after every row: nothing to see; the K-tile loop stops here (and at every later
//                  tile, which lies further in the future), so the tile is never even loaded;
//   TILE_FULL      every key is at or before every row (or the attention is not causal): compute, no mask;
//   TILE_DIAGONAL  the diagonal i = j crosses the tile: compute, then mask s[i][j] to -INFINITY where j > i.
enum { TILE_FULL = 0, TILE_DIAGONAL = 1, TILE_FUTURE = 2 };

FA_HOST_DEVICE static inline int causal_tile_stage(int causal, int64_t q_start, int64_t k_start, int block_m,
                                                   int block_n, int64_t S_q, int64_t S_k) {
    if (!causal) return TILE_FULL;
    const int64_t q_last = (q_start + block_m < S_q ? q_start + block_m : S_q) - 1;   // the last row that exists
    const int64_t k_last = (k_start + block_n < S_k ? k_start + block_n : S_k) - 1;   // the last key that exists
    if (k_start > q_last) return TILE_FUTURE;   // its first key is after the tile's last row
    if (k_last <= q_start) return TILE_FULL;    // its last key is at or before the tile's first row
    return TILE_DIAGONAL;
}

// What a Q tile's K loop can work out once from that rule, before the loop (phase 5 step 3g, phase 7 step 4g):
// - how many K tiles it visits: those that exist and, causal, whose first key is not after the Q tile's last row
//   (the TILE_FUTURE tiles all come after the others);
// - the first that needs the mask: causal, the first whose last key is after the Q tile's first row (a diagonal
//   tile), else the last tile when S_k cuts it short. Every visited tile from there on needs it, none before.
// tests/test_phase3_tiles.c checks both against causal_tile_stage() tile by tile.
FA_HOST_DEVICE static inline int64_t k_tiles_visited(int causal, int64_t q_start, int block_m, int block_n,
                                                     int64_t S_q, int64_t S_k) {
    const int64_t all = (S_k + block_n - 1) / block_n;
    if (!causal) return all;
    const int64_t q_last = (q_start + block_m < S_q ? q_start + block_m : S_q) - 1;
    return q_last / block_n + 1 < all ? q_last / block_n + 1 : all;
}
FA_HOST_DEVICE static inline int64_t first_masked_tile(int causal, int64_t q_start, int block_n, int64_t S_k) {
    const int64_t whole = S_k / block_n;   // tiles whose block_n keys all exist
    return causal && (q_start + 1) / block_n < whole ? (q_start + 1) / block_n : whole;
}

#ifdef __cplusplus
}
#endif

#endif
