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

// One timing event of the timeline (ring_transport.h), in the order the host recorded it.
enum { MARK_EXCHANGE, MARK_WAIT_BEGIN, MARK_WAIT_END, MARK_SYNCHRONIZE, MARK_DONE };
typedef struct {
    cudaEvent_t event;
    int rank, channel, kind;   // MARK_*: MARK_DONE on the communication stream, the others on the compute stream
    int exchange;              // the channel's exchange it belongs to (for a wait: the one it waits for)
} ring_mark;

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
    // The timeline: marks is NULL when no trace is on.
    ring_mark *marks;
    int n_marks, capacity;
    int exchanges[RING_CHANNELS];          // exchanges so far, per channel
    cudaEvent_t origin[RING_MAX_RANKS];    // per GPU: the time 0 of its marks
};

// The compute stream: the default stream the single-GPU kernels launch on (the legacy one, which every blocking
// stream synchronises with, and the non-blocking communication streams do not).
#define COMPUTE_STREAM cudaStreamLegacy

// Records a mark of the timeline on `stream` of rank r's GPU (the current device), when a trace is on.
static void trace_mark(ring_transport *tr, int r, int channel, int kind, cudaStream_t stream) {
    if (!tr->marks) return;
    if (tr->n_marks == tr->capacity) {
        tr->capacity *= 2;
        tr->marks = (ring_mark *)realloc(tr->marks, (size_t)tr->capacity * sizeof *tr->marks);
        if (!tr->marks) fa_die("out of host memory: the timeline's marks");
    }
    ring_mark *m = &tr->marks[tr->n_marks++];
    const int waits = kind == MARK_WAIT_BEGIN || kind == MARK_WAIT_END;   // for the exchange before this call
    *m = (ring_mark){NULL, r, channel, kind, tr->exchanges[channel] - waits};
    FA_CUDA_CHECK(cudaEventCreate(&m->event));
    FA_CUDA_CHECK(cudaEventRecord(m->event, stream));
}

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
    int lowest = 0, highest = 0;   // the numbers of the lowest and highest stream priority (the same on every GPU)
    FA_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    for (int c = 0; c < RING_CHANNELS; c++)
        for (int r = 0; r < n_ranks; r++) {
            FA_CUDA_CHECK(cudaSetDevice(tr->devices[r]));
            FA_CUDA_CHECK(cudaStreamCreateWithPriority(&tr->stream[c][r], cudaStreamNonBlocking,
                                                       c == RING_CHANNEL_KV ? highest : lowest));
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
        trace_mark(tr, r, channel, MARK_EXCHANGE, COMPUTE_STREAM);
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
        trace_mark(tr, r, channel, MARK_DONE, stream[r]);
    }
    FA_CUDA_CHECK(cudaSetDevice(tr->devices[0]));
    tr->pending[channel] = 1;
    tr->exchanges[channel]++;
}

extern "C" void ring_transport_wait(ring_transport *tr, int channel) {
    if (!tr->pending[channel]) return;
    for (int r = 0; r < tr->n_ranks; r++) {
        FA_CUDA_CHECK(cudaSetDevice(tr->devices[r]));
        trace_mark(tr, r, channel, MARK_WAIT_BEGIN, COMPUTE_STREAM);
        FA_CUDA_CHECK(cudaStreamWaitEvent(COMPUTE_STREAM, tr->done[channel][r], 0));
        trace_mark(tr, r, channel, MARK_WAIT_END, COMPUTE_STREAM);
    }
    FA_CUDA_CHECK(cudaSetDevice(tr->devices[0]));
    tr->pending[channel] = 0;
}

static void synchronize_gpus(const ring_transport *tr) {
    for (int g = 0; g < tr->gpus; g++) {
        FA_CUDA_CHECK(cudaSetDevice(tr->devices[g]));
        FA_CUDA_CHECK(cudaDeviceSynchronize());
    }
    FA_CUDA_CHECK(cudaSetDevice(tr->devices[0]));
}

extern "C" void ring_transport_synchronize(ring_transport *tr) {
    for (int r = 0; r < tr->n_ranks && tr->marks; r++) {
        FA_CUDA_CHECK(cudaSetDevice(tr->devices[r]));
        trace_mark(tr, r, 0, MARK_SYNCHRONIZE, COMPUTE_STREAM);
    }
    synchronize_gpus(tr);
    for (int c = 0; c < RING_CHANNELS; c++) tr->pending[c] = 0;
}

// --- The timeline --------------------------------------------------------------------------------------------------
extern "C" void ring_transport_trace_begin(ring_transport *tr) {
    if (tr->marks) fa_die("ring_transport_trace_begin: a trace is already on");
    ring_transport_synchronize(tr);   // every GPU idle: the origins below are recorded at (nearly) the same moment
    tr->capacity = 256;
    tr->marks = (ring_mark *)malloc((size_t)tr->capacity * sizeof *tr->marks);
    if (!tr->marks) fa_die("out of host memory: the timeline's marks");
    tr->n_marks = 0;
    for (int c = 0; c < RING_CHANNELS; c++) tr->exchanges[c] = 0;
    for (int g = 0; g < tr->gpus; g++) {
        FA_CUDA_CHECK(cudaSetDevice(tr->devices[g]));
        FA_CUDA_CHECK(cudaEventCreate(&tr->origin[g]));
        FA_CUDA_CHECK(cudaEventRecord(tr->origin[g], COMPUTE_STREAM));
    }
    FA_CUDA_CHECK(cudaSetDevice(tr->devices[0]));
}

// One line of the CSV: what rank r did between two marks. Returns 0, or 1 when the write failed.
static int write_interval(FILE *out, const char *row, const ring_transport *tr, int r, const char *what, int index,
                          double start_us, double end_us) {
    return fprintf(out, "%s,%d,%d,%s,%d,%.1f,%.1f\n", row, r, tr->devices[r], what, index, start_us, end_us) < 0;
}

// Microseconds from the origin of the mark's GPU to the mark.
static double mark_us(const ring_transport *tr, const ring_mark *m) {
    float ms = 0.0f;
    FA_CUDA_CHECK(cudaEventElapsedTime(&ms, tr->origin[tr->devices[m->rank]], m->event));
    return 1000.0 * ms;
}

extern "C" int ring_transport_trace_write(ring_transport *tr, FILE *out, const char *row) {
    if (!tr->marks) fa_die("ring_transport_trace_write: no trace is on");
    synchronize_gpus(tr);
    int lines = 0, failed = 0;
    static const char *const TRANSFER[RING_CHANNELS] = {"K/V transfer", "K/V transfer", "dK/dV transfer"};
    static const char *const WAIT[RING_CHANNELS] = {"K/V wait", "K/V wait", "dK/dV wait"};
    for (int r = 0; r < tr->n_ranks; r++) {
        // The compute stream: consecutive marks bound an interval, and a wait's two marks bound the stall. A step
        // ends at its K/V wait (the last step at synchronize).
        const ring_mark *previous = NULL;
        int step = 0;
        for (int i = 0; i < tr->n_marks; i++) {
            const ring_mark *m = &tr->marks[i];
            if (m->rank != r || m->kind == MARK_DONE) continue;
            if (previous) {
                const int stall = previous->kind == MARK_WAIT_BEGIN && m->kind == MARK_WAIT_END;
                const double start = mark_us(tr, previous), end = mark_us(tr, m);
                if (end > start) {
                    failed |= write_interval(out, row, tr, r, stall ? WAIT[m->channel] : "blocks", step, start, end);
                    lines++;
                }
            }
            step += m->kind == MARK_WAIT_END && m->channel != RING_CHANNEL_DKV;
            previous = m;
        }
        // The transfers: from the exchange's mark on the compute stream to its end on the communication stream.
        for (int i = 0; i < tr->n_marks; i++) {
            const ring_mark *done = &tr->marks[i];
            if (done->rank != r || done->kind != MARK_DONE) continue;
            for (int j = 0; j < i; j++) {
                const ring_mark *m = &tr->marks[j];
                if (m->rank != r || m->kind != MARK_EXCHANGE || m->channel != done->channel ||
                    m->exchange != done->exchange)
                    continue;
                failed |= write_interval(out, row, tr, r, TRANSFER[done->channel], done->exchange, mark_us(tr, m),
                                         mark_us(tr, done));
                lines++;
            }
        }
    }
    for (int i = 0; i < tr->n_marks; i++) FA_CUDA_CHECK(cudaEventDestroy(tr->marks[i].event));
    for (int g = 0; g < tr->gpus; g++) FA_CUDA_CHECK(cudaEventDestroy(tr->origin[g]));
    free(tr->marks);
    tr->marks = NULL;
    return failed ? -1 : lines;
}
