// extensions.h - phase 6: the features real models use, each a short diff from phase 3 step 3.
//
//   gqa_*       GQA / MQA: H query heads share H_kv K/V heads, query head h reads K/V head h / (H / H_kv).
//   window_*    sliding window (FlashAttention's window_size = (LEFT, RIGHT)): row i sees keys i - LEFT .. i + RIGHT
//               (-1: no bound on that side); K tiles wholly outside every row's band are never loaded.
//   softcap_*   softcapping (Gemma 2): a score s becomes C * tanh(s / C) before the softmax.
//   align_*     causal alignment: bottom-right (FlashAttention's, for Sq != Sk) shifts the diagonal by Sk - Sq, so
//               the last query row sees the whole cache; a row that sees no key writes O = 0.
//   varlen_*    variable-length batches: sequences packed as [total, H, D] with cumulative offsets (cu_seqlens); the
//               grid covers only the real Q tiles, and nothing is padded.
//   dropout_*   dropout: each probability of P is kept with probability 1 - p (and scaled by 1 / (1 - p)) or dropped,
//               by a mask regenerated from counters (Philox, philox.h) in the forward, the backward and the oracle.
//   splitkv_*   split-KV decoding: the keys of one head are split over many blocks, each writes a partial O and its
//               running max and sum, and a combine pass merges the partials by their maxima (the online softmax once
//               more).
//
// Each feature file is phase3_forward_4d/3_lse_cpu.c (or 3_lse_cuda.cu) with that one feature added: `diff -u`
// against it shows exactly the feature (docs/08-extensions.md lists the commands and their sizes). The tensors,
// strides and tile sizes are phase 3's (forward4d.h): Q and O [B, H, Sq, D], K and V [B, H_kv, Sk, D], LSE
// [B, H, Sq] contiguous.
//
// A row that sees no key at all (a window past the last key, bottom-right alignment with Sq > Sk) writes O = 0 and
// LSE = EMPTY_ROW_LSE. The math says log(0) = -inf; FlashAttention writes +inf, which makes every P = exp(s - LSE)
// of the backward 0. The suite writes the largest finite float instead, which does the same in exp and can be
// checked against the oracle like any other number (a check fails on every Inf).
#ifndef EXTENSIONS_H
#define EXTENSIONS_H

#include <float.h>

#include "fa_contract.h"
#include "philox.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EMPTY_ROW_LSE FLT_MAX

// --- What the features ask for: the oracle and the driver take this; each kernel takes its own part. -------------
typedef struct {
    int64_t H_kv;                      // K/V heads (H when GQA is off); H % H_kv == 0
    int64_t window_left, window_right; // -1: unbounded on that side (both -1: no window)
    float softcap;                     // 0: off
    int bottom_right;                  // causal alignment: 0 top-left (the suite's default), 1 bottom-right
    float dropout_p;                   // the probability that a probability is dropped, 0 <= p < 1 (0: off)
    uint64_t dropout_seed;             // the generator's key (the driver's --seed)
} ext_options;

// The first key of the diagonal: row i of a causal attention sees keys j <= i + key_offset.
FA_HOST_DEVICE static inline int64_t ext_key_offset(int bottom_right, int64_t S_q, int64_t S_k) {
    return bottom_right ? S_k - S_q : 0;
}

// The keys row i sees, [*first, *last] (empty when *first > *last): the one rule every feature's mask follows, and
// the oracle's. Causal is a window with RIGHT = 0; a window's band is centred on the diagonal i + key_offset.
FA_HOST_DEVICE static inline void ext_key_range(int causal, const ext_options *e, int64_t S_q, int64_t S_k, int64_t i,
                                                int64_t *first, int64_t *last) {
    const int64_t diagonal = i + ext_key_offset(e->bottom_right, S_q, S_k);
    const int64_t right = causal ? 0 : e->window_right;
    *first = e->window_left >= 0 && diagonal - e->window_left > 0 ? diagonal - e->window_left : 0;
    *last = right >= 0 && diagonal + right < S_k - 1 ? diagonal + right : S_k - 1;
}

// --- The window's tile rule (window_*), the sliding-window twin of causal_tile_stage (forward4d.h) ---------------
// For the tile of rows q_start .. q_start + block_m - 1 and keys k_start .. k_start + block_n - 1 (cut at S_q, S_k):
//   TILE_FUTURE    no row sees any key of it or of a later tile: the K-tile loop stops;
//   TILE_FULL      every key is inside every row's band: compute, no mask;
//   TILE_DIAGONAL  a band edge crosses the tile: compute, then mask each element.
// Tiles wholly before every row's band are never reached: the loop starts at window_first_tile.
FA_HOST_DEVICE static inline int window_tile_stage(int64_t left, int64_t right, int64_t q_start, int64_t k_start,
                                                   int block_m, int block_n, int64_t S_q, int64_t S_k) {
    const int64_t q_last = (q_start + block_m < S_q ? q_start + block_m : S_q) - 1;
    const int64_t k_last = (k_start + block_n < S_k ? k_start + block_n : S_k) - 1;
    if (right >= 0 && k_start > q_last + right) return TILE_FUTURE;
    // Wholly before every row's band: the loop starts at the band (window_first_tile), so this is reached only when
    // the band starts past the last key (S_q > S_k): the tile is the last one, its rows see no key, the loop ends.
    if (left >= 0 && k_last < q_start - left) return TILE_FUTURE;
    const int inside_right = right < 0 || k_last <= q_start + right;   // for the tile's first row, so for all
    const int inside_left = left < 0 || k_start >= q_last - left;      // for the tile's last row, so for all
    return inside_right && inside_left ? TILE_FULL : TILE_DIAGONAL;
}
// Whether row i sees key j inside the band (-1: no bound on that side). The element mask of a tile a band edge
// crosses; keys past S_k are the caller's to test.
FA_HOST_DEVICE static inline int window_sees(int64_t left, int64_t right, int64_t i, int64_t j) {
    return (left < 0 || j >= i - left) && (right < 0 || j <= i + right);
}
// The first K tile holding a key some row of the Q tile sees: the tile of key q_start - left.
FA_HOST_DEVICE static inline int64_t window_first_tile(int64_t left, int64_t q_start, int block_n) {
    if (left < 0 || q_start - left <= 0) return 0;
    return (q_start - left) / block_n * block_n;
}

// --- Dropout's mask (dropout_*): regenerated from counters wherever it is needed, never stored. -----------------
// Element (bh, i, j) (head bh = b * H + h, query row i, key j) is dropped or kept the same way in every pass that
// asks: Philox4x32-10 (philox.h) of the counter (j / 4, i, low and high 32 bits of bh) under the key (low and high
// 32 bits of the seed) gives four words, one for each of the keys 4 (j / 4) .. 4 (j / 4) + 3, and key j is kept
// when its word is at least threshold = p * 2^32 (dropout_params_for): kept with probability 1 - p. One call of the
// generator serves four neighbouring keys, which the GPU's loops over a tile take together.
// What a kernel needs of it: the seed, the threshold, and the scale 1 / (1 - p) of the kept probabilities.
typedef struct {
    uint64_t seed;
    uint32_t threshold;   // 0 when p = 0: every key is kept, the mask is off
    float keep_scale;
} dropout_params;
static inline dropout_params dropout_params_for(float p, uint64_t seed) {   // 0 <= p < 1
    const dropout_params d = {seed, (uint32_t)((double)p * 4294967296.0), 1.0f / (1.0f - p)};
    return d;
}
// Bit jj of the result: whether key 4 * j4 + jj of row i of head bh is kept.
FA_HOST_DEVICE static inline unsigned dropout_keep4(uint64_t seed, uint32_t threshold, int64_t bh, int64_t i,
                                                    int64_t j4) {
    philox4 counter;
    counter.w[0] = (uint32_t)j4;
    counter.w[1] = (uint32_t)i;
    counter.w[2] = (uint32_t)bh;
    counter.w[3] = (uint32_t)((uint64_t)bh >> 32);
    const philox4 r = philox4x32_10(counter, (uint32_t)seed, (uint32_t)(seed >> 32));
    return (unsigned)(r.w[0] >= threshold) | (unsigned)(r.w[1] >= threshold) << 1 |
           (unsigned)(r.w[2] >= threshold) << 2 | (unsigned)(r.w[3] >= threshold) << 3;
}
// Whether key j of row i of head bh is kept (one key of dropout_keep4's four).
FA_HOST_DEVICE static inline int dropout_keep(uint64_t seed, uint32_t threshold, int64_t bh, int64_t i, int64_t j) {
    return (int)(dropout_keep4(seed, threshold, bh, i, j / 4) >> (j % 4) & 1u);
}

// --- The feature kernels: phase 3 step 3's signature (forward4d.h) plus the feature's own parameters. ------------
// t holds the tensors and their strides (forward_tensors, forward4d.h); tiles_visited (CPU, may be NULL) counts the
// (Q tile, K tile) pairs processed, summed over all heads.
void flash_forward_gqa_cpu(const fa_shape *shape, int64_t H_kv, int block_m, int block_n, const forward_tensors *t,
                           int64_t *tiles_visited);
void flash_forward_gqa_cuda(const fa_shape *shape, int64_t H_kv, int block_m, int block_n, const forward_tensors *t);

// window_right must be 0 when shape->causal (causal is the window (LEFT, 0); the driver sees to it).
void flash_forward_window_cpu(const fa_shape *shape, int64_t window_left, int64_t window_right, int block_m,
                              int block_n, const forward_tensors *t, int64_t *tiles_visited);
void flash_forward_window_cuda(const fa_shape *shape, int64_t window_left, int64_t window_right, int block_m,
                               int block_n, const forward_tensors *t);

// softcap > 0 (the driver refuses anything else).
void flash_forward_softcap_cpu(const fa_shape *shape, float softcap, int block_m, int block_n,
                               const forward_tensors *t, int64_t *tiles_visited);
void flash_forward_softcap_cuda(const fa_shape *shape, float softcap, int block_m, int block_n,
                                const forward_tensors *t);

// Dropout with probability dropout_p (0 <= p < 1; 0 runs the kernel with its mask switched off) and the mask of
// `seed` (dropout_keep4). LSE is the softmax's, before dropout; O = (1 / (1 - p)) sum over the kept keys of P_ij V_j.
void flash_forward_dropout_cpu(const fa_shape *shape, float dropout_p, uint64_t seed, int block_m, int block_n,
                               const forward_tensors *t, int64_t *tiles_visited);
void flash_forward_dropout_cuda(const fa_shape *shape, float dropout_p, uint64_t seed, int block_m, int block_n,
                                const forward_tensors *t);

void flash_forward_align_cpu(const fa_shape *shape, int bottom_right, int block_m, int block_n,
                             const forward_tensors *t, int64_t *tiles_visited);
void flash_forward_align_cuda(const fa_shape *shape, int bottom_right, int block_m, int block_n,
                              const forward_tensors *t);

// --- Variable-length batches (varlen_*): B sequences packed as [total, H, D], FlashAttention's cu_seqlens. -------
// Sequence b holds tokens cu_seqlens[b] .. cu_seqlens[b + 1] - 1 (cu_seqlens[0] = 0, B + 1 entries); its queries see
// its own keys only (Sq = Sk = its length; causal is top-left = bottom-right). shape->B is the number of sequences,
// shape->Sq = shape->Sk the total token count; the strides are those of [total, H, D] (stride b unused); LSE is
// [total, H]. cu_q_tiles (B + 1 entries, varlen_q_tiles) numbers the real Q tiles sequence by sequence: the grid.
// On the GPU, cu_seqlens and cu_q_tiles are device arrays and n_q_tiles = cu_q_tiles[B] is passed from the host.
static inline void varlen_q_tiles(int64_t n_seqs, const int64_t *cu_seqlens, int block_m, int64_t *cu_q_tiles) {
    cu_q_tiles[0] = 0;
    for (int64_t b = 0; b < n_seqs; b++)
        cu_q_tiles[b + 1] = cu_q_tiles[b] + (cu_seqlens[b + 1] - cu_seqlens[b] + block_m - 1) / block_m;
}
// The sequence Q tile `tile` belongs to: the b with cu_q_tiles[b] <= tile < cu_q_tiles[b + 1] (binary search).
FA_HOST_DEVICE static inline int64_t varlen_tile_sequence(const int64_t *cu_q_tiles, int64_t n_seqs, int64_t tile) {
    int64_t lo = 0, hi = n_seqs - 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (cu_q_tiles[mid] <= tile) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
void flash_forward_varlen_cpu(const fa_shape *shape, const int64_t *cu_seqlens, const int64_t *cu_q_tiles,
                              int block_m, int block_n, const forward_tensors *t, int64_t *tiles_visited);
void flash_forward_varlen_cuda(const fa_shape *shape, const int64_t *cu_seqlens, const int64_t *cu_q_tiles,
                               int64_t n_q_tiles, int block_m, int block_n, const forward_tensors *t);

// --- Split-KV decoding (splitkv_*): Q, O, K, V contiguous [B, H, S, D]; S_q <= SPLITKV_MAX_SQ. ------------------
// The keys of each head are cut into splitkv_num_splits(S_k) splits of SPLITKV_KEYS_PER_SPLIT keys (the last one
// shorter). Pass 1 writes, per (head, split) and row, the partial output of the split's keys, already normalised, and
// the split's online-softmax state: its running max m (base 2, -inf where the row sees no key in the split), its sum
// l, and the key that gave m (max_key, -1 for none). Pass 2 (the combine) merges them per row as the online softmax
// merges tiles: M = max_s m_s, L = sum_s l_s 2^(m_s - M), O = sum_s l_s 2^(m_s - M) O_s / L; the row's largest
// score is the max key of the split whose m_s is M, and LSE comes from that key's score in double (fa_math.h).
// Causal uses bottom_right's alignment, as the kernels of align_* do.
#define SPLITKV_MAX_SQ 16
#define SPLITKV_KEYS_PER_SPLIT 1024
static inline int64_t splitkv_num_splits(int64_t S_k) {
    return (S_k + SPLITKV_KEYS_PER_SPLIT - 1) / SPLITKV_KEYS_PER_SPLIT;
}
// The partials, each [B*H, splits, S_q] (o: [B*H, splits, S_q, D]), carved from the one float buffer `partials` the
// caller provides (host or device memory alike: this is pointer arithmetic only).
typedef struct {
    float *o;             // the split's output, normalised by its own sum
    float *m, *l;         // the split's running max (base 2) and sum
    int64_t *max_key;     // the key that gave m (its row in the head's K), -1 when the row sees no key in the split
} splitkv_partials;
static inline int64_t splitkv_partial_rows(const fa_shape *shape) {
    return shape->B * shape->H * splitkv_num_splits(shape->Sk) * shape->Sq;
}
// o first (16-byte aligned for the GPU's float4), then the keys, 2 floats each, at an even float (8-byte aligned).
static inline int64_t splitkv_keys_offset(const fa_shape *shape) {
    const int64_t o_floats = splitkv_partial_rows(shape) * shape->D;
    return o_floats + o_floats % 2;
}
// Floats of the partials the caller provides as `partials`: o, max_key (2 floats each), m and l.
static inline int64_t splitkv_partial_floats(const fa_shape *shape) {
    return splitkv_keys_offset(shape) + 4 * splitkv_partial_rows(shape);
}
static inline splitkv_partials splitkv_partials_of(float *partials, const fa_shape *shape) {
    const int64_t rows = splitkv_partial_rows(shape), keys = splitkv_keys_offset(shape);
    const splitkv_partials p = {partials, partials + keys + 2 * rows, partials + keys + 3 * rows,
                                (int64_t *)(partials + keys)};
    return p;
}
void flash_decode_splitkv_cpu(const fa_shape *shape, int bottom_right, const float *q, const float *k, const float *v,
                              float *o, float *lse, float *partials);
void flash_decode_splitkv_cuda(const fa_shape *shape, int bottom_right, const float *q, const float *k,
                               const float *v, float *o, float *lse, float *partials);

#ifdef __cplusplus
}
#endif

#endif
