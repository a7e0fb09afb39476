// fa_driver.h - what every phase driver does alike: make the inputs, ask the oracle, run an implementation, check
// it, time it, save it. A driver then reads as a script: parse, make inputs, run, verify, time, print.
#ifndef FA_DRIVER_H
#define FA_DRIVER_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>

#include "fa_cli.h"
#include "fa_oracle.h"
#include "fa_report.h"

// Inputs of a run: seeded random, or read from --load-dir. q and dout are [B,H,Sq,D]; k and v are [B,H,Sk,D].
typedef struct {
    float *q, *k, *v;
    float *dout;        // dO, only for the backward pass (NULL otherwise)
} fa_inputs;

// The oracle's answers for the heads it computed (see fa_oracle.h).
typedef struct {
    unsigned char *heads;       // B*H bytes: 1 where the oracle computed the head
    int heads_checked;
    double *o, *lse;            // forward
    double *dq, *dk, *dv;       // backward (NULL unless asked for)
    double tol_forward;         // tolerances for these inputs (fa_tolerance_for_inputs)
    double tol_backward;
    fa_magnitudes scale;        // what each output's errors are measured against (fa_oracle_magnitudes)
} fa_reference;

// One output of an implementation and what it is checked against.
typedef struct {
    const char *name;           // "O", "LSE", "dQ", ...
    float *host;                // the result lands here (a cuda run copies it here from `device`)
    float *device;              // cuda runs: where the kernel writes it
    int64_t dims[4];            // (b, h, s, d) sizes; LSE is (B, H, Sq, 1)
    const double *want;         // the oracle's answer
    double tolerance;
    double scale;               // what its errors are measured against (fa_verify_results_scaled)
    // FlashAttention's rule (fa_check_against_reference), where a straightforward implementation of the same step
    // ran earlier in the report: the label of its check rows ("naive backward cpu") and the factor; NULL for none.
    const char *reference_label;
    double reference_factor;
    // The heads the oracle computed for this output, when they are not the reference's (NULL: ref->heads). With GQA
    // (phase 6), dK and dV have H_kv heads, and their mask is over those.
    const unsigned char *heads;
} fa_output;

// One implementation of one step: how to run it once, and what it writes.
typedef struct {
    const char *label;          // "naive", "step 2 causal", ...
    int is_cuda;
    void (*run)(void *ctx);     // one complete run (a cuda run only launches; the harness synchronises)
    void *ctx;
    fa_output outputs[4];
    int n_outputs;
    double flops;
    int64_t extra_bytes;        // memory beyond inputs and outputs
    int64_t extra_bytes_per_thread;   // CPU: what each thread adds to it (its tiles): a row run on N threads needs N
    const char *extra_what;     // what it is, e.g. "S, P"
    int block_m, block_n;
    int causal;                 // for the timing table (a driver may run causal and non-causal side by side)
    int backward;               // 1 for a backward pass (the CSV's kind column; its flops are fa_flops_backward)
    double upload_ms;           // cuda: time the inputs took to reach the device
} fa_implementation;

// The tensor shapes of a run, as (b, h, s, d) sizes for fa_output.dims.
void fa_dims_q(const fa_shape *shape, int64_t dims[4]);      // (B, H, Sq, D)
void fa_dims_kv(const fa_shape *shape, int64_t dims[4]);     // (B, H, Sk, D)
void fa_dims_lse(const fa_shape *shape, int64_t dims[4]);    // (B, H, Sq, 1)

// Sets impl->outputs to O (and LSE when lse_host is not NULL), checked against the forward oracle.
// The device pointers are NULL for a CPU implementation.
void fa_forward_outputs(fa_implementation *impl, const fa_shape *shape, const fa_reference *ref,
                        float *o_host, float *o_device, float *lse_host, float *lse_device);

void fa_make_inputs(const fa_options *opt, int with_dout, fa_inputs *in);
void fa_free_inputs(fa_inputs *in);

// The gradients of a backward run: host copies (checked) and, for a cuda run, where its kernels write them.
typedef struct {
    float *dq, *dk, *dv;
} fa_grads;
// Sets impl->outputs to dQ, dK, dV ([B, H, S, D] of shape), each checked against the oracle's gradient with its
// tolerance (tol: dQ, dK, dV). A driver adjusts an output afterwards where it needs more (a reference row to compare
// with, K/V heads of their own).
void fa_backward_outputs(fa_implementation *impl, const fa_shape *shape, const fa_reference *ref, const double tol[3],
                         fa_grads host, fa_grads device);

// Runs the oracle on the heads --check-heads (or the time budget) selects; prints a line while it works.
void fa_make_reference(const fa_options *opt, const fa_inputs *in, int backward, fa_reference *ref);
void fa_free_reference(fa_reference *ref);
// How many heads the oracle checks: --check-heads, or as many as its time budget allows at this cost per head.
int64_t fa_heads_to_check(const fa_options *opt, double flops_per_head);
// Marks `count` of the BH bytes of heads with 1, spread evenly over 0..BH-1, always the first and the last (all of
// them when count >= BH); the others 0. fa_make_reference samples the heads it checks with it.
void fa_choose_heads(unsigned char *heads, int64_t BH, int64_t count);

// The pieces of --save-dir and --load-dir, for a driver whose inputs have shapes of their own (phase 6: GQA's K
// and V are [B, H_kv, Sk, D]). fa_save_command writes opt->argv as DIR/command.txt; fa_save_tensor writes NAME.npy
// (lower case; LSE as [B, H, Sq]) when --save-dir is set; fa_load_tensor reads NAME.npy from --load-dir and exits 2
// with one line unless it holds exactly dims.
void fa_save_command(const fa_options *opt);
void fa_save_tensor(const fa_options *opt, const char *name, const float *x, const int64_t dims[4]);
float *fa_load_tensor(const fa_options *opt, const char *name, const int64_t dims[4]);

// The tolerance of a check on these inputs: `base` (FA_TOL_FORWARD or FA_TOL_BACKWARD), raised when the logits are
// large. A float32 dot product of D terms carries an error of about eps * sqrt(D) * scale * max|q| * max|k|, and an
// error in a logit is a relative error of the same size in exp(logit): with --scale 20 the logits reach 100 and the
// error grows with them, while the algorithm is still right. The factor 20 leaves a margin over that estimate.
double fa_tolerance_for_inputs(const fa_shape *shape, const fa_inputs *in, double base);

// Sets OpenMP's thread count for the CPU runs that follow.
void fa_set_threads(int threads);

// Whether the GPU rows run: 1 when --impl asks for cuda and a GPU is there. With --impl cuda and no GPU it prints
// "skipped: ..." and exits 77; with --impl all it adds a note to the report and returns 0.
int fa_use_gpu(const fa_options *opt, fa_report *report);

// Poisons the outputs, runs the implementation once, checks every output against the oracle (check rows), then
// times it (timing rows): a CPU implementation with 1 thread and with --threads, a cuda one with CUDA events.
// With --save-dir, the outputs are written as .npy files named after them (the last implementation run wins).
void fa_check_and_time(fa_report *report, const fa_options *opt, const fa_reference *ref, fa_implementation *impl);

// A buffer the run needs could not be had: records a row with status "oom" in --csv (a lesson, not a crash),
// prints one line with the bytes needed and exits 2.
void fa_exit_out_of_memory(fa_report *report, const char *label, const char *impl, double bytes, const char *what)
    __attribute__((noreturn));

// Prints the report, appends --csv rows, and returns the exit status: 0 when every check passed, 1 otherwise.
int fa_finish(fa_report *report, const fa_options *opt);

#if FA_HAVE_CUDA
typedef struct {
    float *q, *k, *v, *dout;
    double upload_ms;
} fa_device_inputs;
void fa_upload_inputs(const fa_options *opt, const fa_inputs *in, fa_device_inputs *dev);
void fa_free_device_inputs(fa_device_inputs *dev);
#endif

// --- Half precision (phase 5, --dtype fp16|bf16; fa_half.h) ----------------------------------------------------
// fa_make_inputs has already rounded the float32 inputs to opt->dtype, so the oracle runs on the numbers the kernels
// see. The kernels read these half copies (uint16_t bits, [B, H, S, D]).
typedef struct {
    int dtype;
    uint16_t *q, *k, *v;
    uint16_t *dout;                  // dO, when the inputs have one (the backward); else NULL
} fa_half_inputs;
void fa_make_half_inputs(const fa_options *opt, const fa_inputs *in, fa_half_inputs *half);
void fa_free_half_inputs(fa_half_inputs *half);

// The half-precision check (docs/architecture.md, "Conventions"), FlashAttention's rule: a result passes when its error is at
// most 2x the error of the straightforward implementation at the same precision (fa_half_reference_forward), run
// on the same inputs in the same run, plus the float32 tolerance (ref->tol_forward): the accumulation is float32
// everywhere, so a float32-sized difference (tensor cores add in another order) is always allowed, and a reference
// error of exactly zero cannot fail a correct result. Errors are relative to the oracle's scale of each output
// (fa_oracle_magnitudes), like every check. The reference is itself checked, against the bound its arithmetic guarantees (rounding P costs at
// most 2u * max|V| in O, u the dtype's unit roundoff; LSE is float32), so a broken reference cannot loosen the rule.
typedef struct {
    int dtype;
    double ref_err_o, ref_err_lse;   // the reference's relative errors against the oracle (fa_reference.scale)
    double tol_o, tol_lse;           // 2 x those + the float32 tolerance
    // The backward (fa_make_half_backward_rule): the reference backward's errors, and 3 x those + the float32
    // backward tolerance.
    double ref_err_dq, ref_err_dk, ref_err_dv;
    double tol_dq, tol_dk, tol_dv;
} fa_half_rule;
// Runs the reference on the oracle's heads, adds its two rows ("fp16 reference", O and LSE) to the check block and
// a note with the rule, and fills rule. opt->dtype must be fp16 or bf16.
void fa_make_half_rule(fa_report *report, const fa_options *opt, const fa_inputs *in, const fa_reference *ref,
                       fa_half_rule *rule);
// fa_forward_outputs, checked by the rule instead of the float32 tolerance.
void fa_half_forward_outputs(fa_implementation *impl, const fa_shape *shape, const fa_reference *ref,
                             const fa_half_rule *rule, float *o_host, float *o_device, float *lse_host,
                             float *lse_device);
// The same rule for gradients (FlashAttention's factor 3): runs fa_half_reference_backward on the oracle's heads (the
// inputs need dO), adds its three rows ("fp16 backward ref": dQ, dK, dV, each checked against the bound its
// arithmetic keeps) and a note, and fills the backward fields of rule. Needs a reference made with the backward.
// fa_backward_outputs then takes {rule.tol_dq, rule.tol_dk, rule.tol_dv} as its tolerances.
void fa_make_half_backward_rule(fa_report *report, const fa_options *opt, const fa_inputs *in,
                                const fa_reference *ref, fa_half_rule *rule);
#if FA_HAVE_CUDA
typedef struct {
    void *q, *k, *v;                 // device copies of fa_half_inputs
    void *dout;                      // NULL when the host copy has none
    double upload_ms;
} fa_device_half_inputs;
void fa_upload_half_inputs(const fa_options *opt, const fa_half_inputs *half, fa_device_half_inputs *dev);
void fa_free_device_half_inputs(fa_device_half_inputs *dev);
#endif

#ifdef __cplusplus
}
#endif

#endif
