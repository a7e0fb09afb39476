// ring_transport.cu - phase 8: the ring's two transports, NCCL between GPUs and a loopback on one GPU, behind one
// interface (ring_transport.h says how the streams and events order the transfers against the blocks).
#include "ring_transport.h"

#include <stdio.h>
#include <stdlib.h>

#include "fa_cuda_check.h"
#include "fa_tensor.h"

#if FA_HAVE_NCCL
#include <nccl.h>

static void fa_nccl_check_(ncclResult_t status, const char *what, const char *file, int line) {
    if (status != ncclSuccess) {
        fprintf(stderr, "error: %s:%d: %s failed: %s\n", file, line, what, ncclGetErrorString(status));
        exit(FA_EXIT_GPU_ERROR);
    }
}
#define FA_NCCL_CHECK(call) fa_nccl_check_((call), #call, __FILE__, __LINE__)
#endif

struct ring_transport {
    int kind, n_ranks, gpus;
    int devices[RING_MAX_RANKS];
    cudaStream_t stream[RING_CHANNELS][RING_MAX_RANKS];   // each rank's communication stream, one per channel
    cudaEvent_t ready[RING_CHANNELS][RING_MAX_RANKS];     // recorded on the rank's compute stream at the exchange
    cudaEvent_t sent[RING_CHANNELS][RING_MAX_RANKS];      // loopback: the rank's copy to the next rank is done
    cudaEvent_t done[RING_CHANNELS][RING_MAX_RANKS];      // the rank's send and receive are both done
    int pending[RING_CHANNELS];                           // an exchange no compute stream has waited for yet
#if FA_HAVE_NCCL
    ncclComm_t comms[RING_MAX_RANKS];
#endif
};

// The compute stream: the default stream the single-GPU kernels launch on (the legacy one, which every blocking
// stream synchronises with, and the non-blocking communication streams do not).
#define COMPUTE_STREAM cudaStreamLegacy

extern "C" int ring_transport_auto(int n_ranks) {
    int gpus = 0;
    FA_CUDA_CHECK(cudaGetDeviceCount(&gpus));
    return FA_HAVE_NCCL && n_ranks > 1 && gpus >= n_ranks ? RING_NCCL : RING_LOOPBACK;
}

extern "C" const char *ring_transport_name(int kind) { return kind == RING_NCCL ? "nccl" : "loopback"; }

extern "C" ring_transport *ring_transport_create(int kind, int n_ranks, char *why, size_t why_len) {
    int gpus = 0;
    FA_CUDA_CHECK(cudaGetDeviceCount(&gpus));
    if (kind == RING_NCCL && !FA_HAVE_NCCL) {
        snprintf(why, why_len, "this build has no NCCL (phase8_ring/CMakeLists.txt says where it looks)");
        return NULL;
    }
    if (kind == RING_NCCL && gpus < n_ranks) {
        snprintf(why, why_len, "%d ranks need %d GPUs, this machine has %d", n_ranks, n_ranks, gpus);
        return NULL;
    }
    ring_transport *tr = (ring_transport *)calloc(1, sizeof *tr);
    if (!tr) fa_die("out of host memory: the transport");
    tr->kind = kind;
    tr->n_ranks = n_ranks;
    tr->gpus = kind == RING_NCCL ? n_ranks : 1;
    for (int r = 0; r < n_ranks; r++) tr->devices[r] = kind == RING_NCCL ? r : 0;
    for (int c = 0; c < RING_CHANNELS; c++)
        for (int r = 0; r < n_ranks; r++) {
            FA_CUDA_CHECK(cudaSetDevice(tr->devices[r]));
            FA_CUDA_CHECK(cudaStreamCreateWithFlags(&tr->stream[c][r], cudaStreamNonBlocking));
            FA_CUDA_CHECK(cudaEventCreateWithFlags(&tr->ready[c][r], cudaEventDisableTiming));
            FA_CUDA_CHECK(cudaEventCreateWithFlags(&tr->sent[c][r], cudaEventDisableTiming));
            FA_CUDA_CHECK(cudaEventCreateWithFlags(&tr->done[c][r], cudaEventDisableTiming));
        }
#if FA_HAVE_NCCL
    // One process drives every GPU: one communicator per rank, made together.
    if (kind == RING_NCCL) FA_NCCL_CHECK(ncclCommInitAll(tr->comms, n_ranks, tr->devices));
#endif
    FA_CUDA_CHECK(cudaSetDevice(tr->devices[0]));
    return tr;
}

extern "C" void ring_transport_destroy(ring_transport *tr) {
    ring_transport_synchronize(tr);
#if FA_HAVE_NCCL
    if (tr->kind == RING_NCCL)
        for (int r = 0; r < tr->n_ranks; r++) FA_NCCL_CHECK(ncclCommDestroy(tr->comms[r]));
#endif
    for (int c = 0; c < RING_CHANNELS; c++)
        for (int r = 0; r < tr->n_ranks; r++) {
            FA_CUDA_CHECK(cudaSetDevice(tr->devices[r]));
            FA_CUDA_CHECK(cudaStreamDestroy(tr->stream[c][r]));
            FA_CUDA_CHECK(cudaEventDestroy(tr->ready[c][r]));
            FA_CUDA_CHECK(cudaEventDestroy(tr->sent[c][r]));
            FA_CUDA_CHECK(cudaEventDestroy(tr->done[c][r]));
        }
    FA_CUDA_CHECK(cudaSetDevice(tr->devices[0]));
    free(tr);
}

extern "C" const int *ring_transport_devices(const ring_transport *tr) { return tr->devices; }
extern "C" int ring_transport_gpus(const ring_transport *tr) { return tr->gpus; }

extern "C" void ring_transport_exchange(ring_transport *tr, int channel, void *const send[], void *const recv[],
                                        size_t bytes) {
    const int N = tr->n_ranks;
    cudaStream_t *stream = tr->stream[channel];
    // Each rank's transfer waits until its compute stream has reached this point: the buffer it receives into was
    // computed from one step earlier.
    for (int r = 0; r < N; r++) {
        FA_CUDA_CHECK(cudaSetDevice(tr->devices[r]));
        FA_CUDA_CHECK(cudaEventRecord(tr->ready[channel][r], COMPUTE_STREAM));
    }
    for (int r = 0; r < N; r++) {
        FA_CUDA_CHECK(cudaSetDevice(tr->devices[r]));
        FA_CUDA_CHECK(cudaStreamWaitEvent(stream[r], tr->ready[channel][r], 0));
    }
    if (tr->kind == RING_LOOPBACK) {
        // Rank r's copy writes rank r + 1's buffer: it also waits for rank r + 1's compute stream. A rank's exchange
        // is done when its own copy (its send) and rank r - 1's (its receive) are.
        for (int r = 0; r < N; r++) {
            FA_CUDA_CHECK(cudaStreamWaitEvent(stream[r], tr->ready[channel][(r + 1) % N], 0));
            FA_CUDA_CHECK(cudaMemcpyAsync(recv[(r + 1) % N], send[r], bytes, cudaMemcpyDeviceToDevice, stream[r]));
            FA_CUDA_CHECK(cudaEventRecord(tr->sent[channel][r], stream[r]));
        }
        for (int r = 0; r < N; r++)
            FA_CUDA_CHECK(cudaStreamWaitEvent(stream[r], tr->sent[channel][(r + N - 1) % N], 0));
    } else {
#if FA_HAVE_NCCL
        // Every rank's send and receive in one group: NCCL pairs rank r's send with rank r + 1's receive, and none
        // waits for another to be posted first.
        FA_NCCL_CHECK(ncclGroupStart());
        for (int r = 0; r < N; r++) {
            FA_NCCL_CHECK(ncclSend(send[r], bytes, ncclUint8, (r + 1) % N, tr->comms[r], stream[r]));
            FA_NCCL_CHECK(ncclRecv(recv[r], bytes, ncclUint8, (r + N - 1) % N, tr->comms[r], stream[r]));
        }
        FA_NCCL_CHECK(ncclGroupEnd());
#endif
    }
    for (int r = 0; r < N; r++) {
        FA_CUDA_CHECK(cudaSetDevice(tr->devices[r]));
        FA_CUDA_CHECK(cudaEventRecord(tr->done[channel][r], stream[r]));
    }
    FA_CUDA_CHECK(cudaSetDevice(tr->devices[0]));
    tr->pending[channel] = 1;
}

extern "C" void ring_transport_wait(ring_transport *tr, int channel) {
    if (!tr->pending[channel]) return;
    for (int r = 0; r < tr->n_ranks; r++) {
        FA_CUDA_CHECK(cudaSetDevice(tr->devices[r]));
        FA_CUDA_CHECK(cudaStreamWaitEvent(COMPUTE_STREAM, tr->done[channel][r], 0));
    }
    FA_CUDA_CHECK(cudaSetDevice(tr->devices[0]));
    tr->pending[channel] = 0;
}

extern "C" void ring_transport_synchronize(ring_transport *tr) {
    for (int r = 0; r < tr->gpus; r++) {
        FA_CUDA_CHECK(cudaSetDevice(tr->devices[r]));
        FA_CUDA_CHECK(cudaDeviceSynchronize());
    }
    FA_CUDA_CHECK(cudaSetDevice(tr->devices[0]));
    tr->pending[RING_CHANNEL_KV] = tr->pending[RING_CHANNEL_DKV] = 0;
}
