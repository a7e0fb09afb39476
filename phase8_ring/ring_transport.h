// ring_transport.h - phase 8: how the GPU steps pass blocks around the ring, and the GPU steps themselves.
//
// One interface, two transports:
//   NCCL      rank r on GPU r, one process driving every GPU (ncclCommInitAll). An exchange is, on every rank at
//             once, ncclSend to rank r + 1 and ncclRecv from rank r - 1 in one ncclGroupStart/ncclGroupEnd, on the
//             rank's communication stream. Built only where CMake finds NCCL (FA_HAVE_NCCL).
//   loopback  every rank on GPU 0: an exchange is a cudaMemcpyAsync from rank r's buffer into rank r + 1's, on rank
//             r's communication stream. The same algorithm, the same streams and events, on one GPU: the ring can be
//             tested, and sanitized, where only one GPU exists. Needs no NCCL.
//
// Streams. The single-GPU kernels launch on their device's default stream (every kernel of the suite does), so the
// default stream is each rank's compute stream. The transfers go on communication streams created non-blocking
// (cudaStreamNonBlocking), which do not wait for the default stream: that is what lets the next block travel while
// this one computes. Events order the two where the data needs it:
//   - an exchange first waits until its rank's compute stream has reached the call (the buffer it receives into was
//     computed from one step earlier; the loopback also waits for the receiving rank, whose buffer it writes);
//   - ring_transport_wait makes every rank's compute stream wait until its send and its receive are both complete.
// There are three channels, each with its own streams and events, so that a wait for one does not wait for another:
//   RING_CHANNEL_KV           the forward's K/V blocks. Its streams have the GPU's highest priority. The next step
//                             waits for this transfer, and NCCL moves data with thread blocks of its own: at the
//                             default priority they would get SMs only as the running kernel's blocks drained, and
//                             the transfer would take the whole step; at the highest, the block scheduler places them
//                             first, and the transfer is over early in the step;
//   RING_CHANNEL_KV_BACKWARD  the backward's K/V blocks, and
//   RING_CHANNEL_DKV          its dK/dV blocks, both at the default priority: the backward's blocks take long enough
//                             to hide them either way, and a transfer's thread block placed first only takes an SM's
//                             slot from the blocks (chapter 10 measures both).
#ifndef RING_TRANSPORT_H
#define RING_TRANSPORT_H

#include <stddef.h>
#include <stdio.h>

#include "ring_ranks.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { RING_CHANNEL_KV = 0, RING_CHANNEL_KV_BACKWARD = 1, RING_CHANNEL_DKV = 2, RING_CHANNELS = 3 };

typedef struct ring_transport ring_transport;

// The transport a run of n_ranks gets when it does not ask: NCCL when this build has it, n_ranks > 1 and the machine
// has n_ranks GPUs; otherwise the loopback.
int ring_transport_auto(int n_ranks);
const char *ring_transport_name(int kind);   // "nccl", "loopback"
// NCCL needs n_ranks GPUs; the loopback one. NULL and one line in why when it cannot be had.
ring_transport *ring_transport_create(int kind, int n_ranks, char *why, size_t why_len);
void ring_transport_destroy(ring_transport *tr);
// The GPU of each rank (n_ranks entries), and how many GPUs the ring uses (1 for the loopback).
const int *ring_transport_devices(const ring_transport *tr);
int ring_transport_gpus(const ring_transport *tr);

// Every rank r sends `bytes` from send[r] to rank r + 1, which receives them into recv[r + 1]; returns at once.
void ring_transport_exchange(ring_transport *tr, int channel, void *const send[], void *const recv[], size_t bytes);
// Every rank's default stream waits for the channel's last exchange (no wait when it has none pending).
void ring_transport_wait(ring_transport *tr, int channel);
// Waits on the host until every rank's streams are idle.
void ring_transport_synchronize(ring_transport *tr);

// --- The timeline (--timeline): what each rank's streams did, measured from the run ------------------------------
// While a trace is on, every transport call also records a timing event on the rank's GPU:
//   on the compute stream: at an exchange (the step's blocks are queued after it), just before a wait and just after
//   it (between the two the stream stalls until the transfer is done: transfer time the blocks did not hide), and at
//   synchronize (after the last blocks);
//   on the communication stream: after an exchange's send and receive (the transfer is done).
// Timing events of two GPUs cannot be compared, so each GPU's times count from an origin event recorded on it when
// every GPU is idle (ring_transport_trace_begin): the GPUs' clocks then agree to within the few microseconds the
// host takes to record the origins.
void ring_transport_trace_begin(ring_transport *tr);
// Waits for the traced work, writes one CSV line per interval and ends the trace:
//   row,rank,gpu,what,index,start_us,end_us
// what: "blocks" (the compute stream ran the step's kernels), "K/V wait" or "dK/dV wait" (it stalled for a transfer),
// "K/V transfer" or "dK/dV transfer" (from the exchange call on the compute stream to the end of the send and
// receive); index: the step (a transfer: the channel's exchange, which is the step's). Times in microseconds from the
// GPU's origin. Returns the number of lines, or -1 when a write failed.
int ring_transport_trace_write(ring_transport *tr, FILE *out, const char *row);

// --- The GPU steps: ranks made by ring_ranks_create_cuda on ring_transport_devices(tr). ---------------------------
// Each launches every rank's work and returns when it is done; O and LSE (dQ, dK, dV) stay on the ranks.
void ring_forward_cuda(ring_ranks *ranks, ring_transport *tr);          // step 2 (contiguous shards)
void ring_zigzag_forward_cuda(ring_ranks *ranks, ring_transport *tr);   // step 3 (ranks->config.layout)
void ring_backward_cuda(ring_ranks *ranks, ring_transport *tr);         // step 4, after a forward on the same ranks

#ifdef __cplusplus
}
#endif

#endif
