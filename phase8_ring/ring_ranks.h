// ring_ranks.h - phase 8: the ranks' buffers, on the host (the CPU twin) or each on its own GPU, and the copies that
// put a problem's shards in place and bring the results back.
//
// Every rank holds the same buffers. The [B, H, rows, D] tensors are allocated for the most rows any rank holds
// (ring_max_rows) and share one set of strides, ring_ranks.strides = contiguous (H, max_rows, D): a K/V block of any
// rank then fits any rank's buffer, and every message has the same size. Row-statistics (LSE, Delta) are contiguous
// [B, H, rows] for the rows they describe, as the single-GPU kernels write them.
#ifndef RING_RANKS_H
#define RING_RANKS_H

#include "ring.h"
#include "ring_blocks.h"   // ring_dtype_bytes

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    ring_shard shard;       // the sequence's rows it holds (ring_shard_of)
    int device;             // its GPU (the GPU steps)
    void *q, *dout;         // its queries (and dO), the run's type
    void *kv_own;           // its keys then its values, the run's type: K at kv_own, V one tensor further on
    void *kv_ring[2];       // the K/V block it computes with and the one arriving, in turn
    float *o, *lse;         // its running O and LSE, final after the last step ([B, H, rows])
    float *lse_lo;          // [B, H, rows]: what the float LSE does not hold of the merges' double one (1_ring_cpu.c)
    float *o_block, *lse_block;   // one block's O and LSE
    // The backward (step 4).
    float *dq, *dq_block;   // its dQ, and one block's
    float *dkv_ring[2];     // the dK then dV travelling with a K/V block, and the ones arriving, in turn
    float *dkv_block;       // one block's dK then dV
    float *delta;           // [B, H, rows]: Delta = rowsum(dO * O) of a block's rows
} ring_rank;

typedef struct {
    fa_shape shape;         // the whole problem
    ring_config config;
    int64_t max_rows;
    fa_strides strides;     // of every [B, H, max_rows, D] tensor
    int64_t tensor_elems;   // B * H * max_rows * D: where V starts after K in kv_*, dV after dK in dkv_*
    int backward;           // the backward's buffers were allocated
    ring_rank rank[RING_MAX_RANKS];
} ring_ranks;

// V in a K/V buffer (K is at its start).
static inline const void *ring_v_of(const ring_ranks *r, const void *kv) {
    return (const char *)kv + (size_t)r->tensor_elems * ring_dtype_bytes(r->config.dtype);
}
// Bytes of one K/V block, and of one dK/dV block: what one message of the ring carries.
static inline size_t ring_kv_bytes(const ring_ranks *r) {
    return 2 * (size_t)r->tensor_elems * ring_dtype_bytes(r->config.dtype);
}
static inline size_t ring_dkv_bytes(const ring_ranks *r) { return 2 * (size_t)r->tensor_elems * sizeof(float); }

// Bytes the ranks' buffers take in all (what a ring needs beyond the whole problem's inputs and outputs, which a real
// run would not hold at all): per rank, Q, its own K/V and two ring buffers in the run's type, O and a block's O in
// float32; the backward adds dO, dQ and a block's, two travelling dK/dV buffers and a block's; and the row statistics.
static inline int64_t ring_ranks_bytes(const fa_shape *shape, const ring_config *config, int backward) {
    const int64_t n = shape->B * shape->H * ring_max_rows(config->layout, shape->Sq, config->n_ranks) * shape->D;
    const int64_t elem = (int64_t)ring_dtype_bytes(config->dtype), rows = n / shape->D;
    int64_t per_rank = n * (7 * elem + 2 * 4) + 4 * rows * 4;
    if (backward) per_rank += n * (elem + 2 * 4 + 4 * 4 + 2 * 4) + rows * 4;
    return config->n_ranks * per_rank;
}

// On the host (the CPU twin). t holds the whole problem: create allocates and copies in the shards (q, k, v; with
// backward also dO, and the forward's O and LSE from t->o and t->lse); the gathers write t's outputs.
void ring_ranks_create_cpu(ring_ranks *ranks, const fa_shape *shape, const ring_config *config, int backward,
                           const ring_tensors *t);
void ring_ranks_gather_forward_cpu(const ring_ranks *ranks, float *o, float *lse);
void ring_ranks_gather_backward_cpu(const ring_ranks *ranks, float *dq, float *dk, float *dv);
void ring_ranks_free_cpu(ring_ranks *ranks);

// On GPUs: rank r on GPU devices[r] (all 0 for the loopback). t holds host pointers. gather_* write device pointers
// on GPU devices[0] (the driver's).
void ring_ranks_create_cuda(ring_ranks *ranks, const fa_shape *shape, const ring_config *config, int backward,
                            const int *devices, const ring_tensors *t);
void ring_ranks_gather_forward_cuda(const ring_ranks *ranks, float *o, float *lse);
void ring_ranks_gather_backward_cuda(const ring_ranks *ranks, float *dq, float *dk, float *dv);
void ring_ranks_free_cuda(ring_ranks *ranks);

#ifdef __cplusplus
}
#endif

#endif
