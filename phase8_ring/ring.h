// ring.h - phase 8: ring (context-parallel) attention, the sequence split over N ranks, in four steps.
//
// When a sequence outgrows one GPU, each rank (one GPU) holds a shard of its tokens: their queries, keys and values.
// The queries stay where they are; the keys and values travel around a ring. At step s (s = 0 .. N-1) rank r holds
// the K/V block of rank ring_source(r, s) = (r - s) mod N, computes one block of attention of its queries against it
// with the single-GPU kernel (O and LSE of the block), merges the block into its running O and LSE (the split-KV merge
// of phase 6, between ranks), and sends the block on to rank r + 1 while it receives the next from rank r - 1. After
// N steps every rank has seen every key, and its O and LSE are those of attention over the whole sequence.
//
//   step 1 (1_ring_cpu.c):     the ring on the CPU: the ranks' buffers in one process, the ranks run in turn, a send
//                              is a copy into the next rank's receive buffer; the merge in double.
//   step 2 (2_ring_cuda.cu):   the same on GPUs: the blocks on each rank's default stream, the next block's transfer on
//                              a communication stream of its own, overlapped with this block's compute, through a
//                              transport (ring_transport.h): NCCL between GPUs, or a loopback on one GPU.
//   step 3 (3_zigzag_*):       + the zigzag layout for causal attention: rank r holds chunks r and 2N-1-r of 2N, so
//                              that every rank has the same causal work at every step.
//   step 4 (4_backward_*):     + the backward: dK and dV travel the ring with their K and V and come back to their
//                              owner after N steps; dQ stays with its queries.
//
// The plan below (who holds which rows, and which rows meet which keys at a step) is the one both the CPU and the GPU
// code follow, and the one tools/ring_schedule.c prints for the chapter's figures (docs/10-ring.md).
#ifndef RING_H
#define RING_H

#include <stdint.h>

#include "fa_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

// Ring attention shards one sequence: its queries, keys and values are the same tokens, so Sq == Sk (the driver
// refuses cross attention). The ranks are at most RING_MAX_RANKS.
#define RING_MAX_RANKS 64

// --- Who holds which rows -------------------------------------------------------------------------------------------
// Rows first .. first + rows - 1 of the sequence.
typedef struct {
    int64_t first, rows;
} ring_span;

// Chunk c of a sequence of S rows cut into n_chunks chunks: sizes differ by at most one row, the first S % n_chunks
// chunks one row longer. S need not divide by n_chunks; a chunk may be empty when S < n_chunks.
static inline ring_span ring_chunk(int64_t S, int64_t n_chunks, int64_t c) {
    const int64_t base = S / n_chunks, extra = S % n_chunks;
    const ring_span span = {c * base + (c < extra ? c : extra), base + (c < extra ? 1 : 0)};
    return span;
}

// The two layouts. CONTIGUOUS: rank r holds chunk r of N. ZIGZAG: rank r holds chunks r and 2N-1-r of 2N, in that
// order (step 3): with a causal mask, the first rank's early chunk sees few keys and its late chunk many, and every
// rank gets one of each.
enum { RING_CONTIGUOUS = 0, RING_ZIGZAG = 1 };

// A rank's shard: one or two spans of the sequence, stored one after the other in the rank's buffers (the rank's
// local row i is row part[0].first + i of the sequence for i < part[0].rows, then the rows of part[1]).
typedef struct {
    ring_span part[2];
    int64_t rows;       // part[0].rows + part[1].rows
} ring_shard;

static inline ring_shard ring_shard_of(int layout, int64_t S, int n_ranks, int rank) {
    ring_shard shard;
    if (layout == RING_ZIGZAG) {
        shard.part[0] = ring_chunk(S, 2 * (int64_t)n_ranks, rank);
        shard.part[1] = ring_chunk(S, 2 * (int64_t)n_ranks, 2 * (int64_t)n_ranks - 1 - rank);
    } else {
        shard.part[0] = ring_chunk(S, n_ranks, rank);
        shard.part[1] = (ring_span){shard.part[0].first + shard.part[0].rows, 0};
    }
    shard.rows = shard.part[0].rows + shard.part[1].rows;
    return shard;
}

// The most rows any rank holds: every rank's buffers have room for this many, so that a K/V block of any rank fits
// the buffer it arrives in, and every message has the same size.
static inline int64_t ring_max_rows(int layout, int64_t S, int n_ranks) {
    int64_t most = 0;
    for (int r = 0; r < n_ranks; r++) {
        const int64_t rows = ring_shard_of(layout, S, n_ranks, r).rows;
        most = rows > most ? rows : most;
    }
    return most;
}

// --- Who holds which K/V block when -------------------------------------------------------------------------------
// At step s, rank r computes with the K/V block that started on rank (r - s) mod N: each step passes every block one
// rank on, to r + 1.
static inline int ring_source(int rank, int step, int n_ranks) { return ((rank - step) % n_ranks + n_ranks) % n_ranks; }

// What one step computes on one rank: its local rows q.first .. (of its shard) against the keys k.first .. of the
// K/V block it holds (local rows of the source's shard), with the top-left causal mask or without. q.rows == 0 (or
// k.rows == 0): nothing to compute at this step.
typedef struct {
    ring_span q, k;
    int causal;
} ring_block;

// The rule of each layout. Rows and keys are the same tokens only on the diagonal (source == rank): there a causal
// attention is the single-GPU kernel's own causal mask on the local rows (in the zigzag layout too: the late chunk's
// rows come after the early chunk's, in the sequence as in the shard). Off the diagonal a block is either wholly
// visible or wholly in the future, so its part is computed without a mask:
//   CONTIGUOUS, causal: a source before the rank is all in the past: every row against every key; a source after it
//                       is all in the future: nothing. (The ranks late in the sequence do all the work.)
//   ZIGZAG, causal:     a source before the rank: every row against the source's early chunk only (its late chunk
//                       lies after both of the rank's chunks); a source after the rank: only the rank's late chunk,
//                       against both of the source's chunks. Half a block on every rank at every step.
static inline ring_block ring_block_of(int layout, int causal, const ring_shard *mine, const ring_shard *theirs,
                                       int rank, int source) {
    ring_block all = {{0, mine->rows}, {0, theirs->rows}, 0};
    const ring_block nothing = {{0, 0}, {0, 0}, 0};
    if (!causal) return all;
    if (source == rank) {
        all.causal = 1;
        return all;
    }
    if (layout == RING_CONTIGUOUS) return source < rank ? all : nothing;
    if (source < rank) {
        all.k.rows = theirs->part[0].rows;                            // their early chunk
    } else {
        all.q = (ring_span){mine->part[0].rows, mine->part[1].rows};  // my late chunk
    }
    return all;
}

// --- The steps ------------------------------------------------------------------------------------------------------
// How a run is cut: the inputs' type (FA_DTYPE_FP32, or FA_DTYPE_FP16 / FA_DTYPE_BF16 with float32 accumulation: the
// K/V blocks then travel in that type, half the bytes), the ranks, the layout, and the tiles of the block kernels.
typedef struct {
    int dtype;
    int n_ranks;
    int layout;            // RING_CONTIGUOUS or RING_ZIGZAG (steps 3 and 4; steps 1 and 2 are contiguous)
    int block_m, block_n;
} ring_config;

// How the GPU steps pass blocks between ranks (ring_transport.h): NCCL between GPUs, or a loopback on one GPU.
enum { RING_LOOPBACK = 0, RING_NCCL = 1 };

// The whole problem, contiguous [B, H, S, D] (LSE [B, H, S]): host pointers for the CPU steps, which cut it into the
// ranks' shards, run the ring and put every rank's results back in place.
typedef struct {
    const void *q, *k, *v;     // the run's type (float, or the bits of a half)
    float *o, *lse;            // the forward writes them; the backward reads them (the forward's)
    const void *dout;          // backward: dO, the run's type
    float *dq, *dk, *dv;       // backward: written
} ring_tensors;

// Step 1: the ring on the CPU, contiguous shards (config->layout is not read).
void ring_forward_cpu(const fa_shape *shape, const ring_config *config, const ring_tensors *t);
// Step 3: the same with config->layout (the zigzag layout, or step 1's).
void ring_zigzag_forward_cpu(const fa_shape *shape, const ring_config *config, const ring_tensors *t);
// Step 4: the backward, dQ, dK and dV, from the forward's O and LSE (t->o, t->lse), with config->layout.
void ring_backward_cpu(const fa_shape *shape, const ring_config *config, const ring_tensors *t);

// The GPU steps (2_ring_cuda.cu, 3_zigzag_cuda.cu, 4_backward_cuda.cu) work on ranks whose buffers already live on
// their GPUs (ring_ranks.h): a GPU of a real run holds its shard before attention starts.

#ifdef __cplusplus
}
#endif

#endif
