// fa_cli.h - the command line every phase binary shares, parsed once with getopt_long.
#ifndef FA_CLI_H
#define FA_CLI_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>

#include "fa_shape.h"

enum { FA_IMPL_CPU = 1, FA_IMPL_CUDA = 2, FA_IMPL_ALL = 3 };
enum { FA_DQ_DETERMINISTIC = 1, FA_DQ_ATOMIC = 2, FA_DQ_BOTH = 3 };

// What a phase binary accepts beyond the shared flags, and its defaults.
typedef struct {
    const char *program;          // "phase1_naive"
    const char *summary;          // one line for --help
    fa_shape defaults;            // default sizes (scale 0 means 1/sqrt(D))
    int default_block_m;          // 0 when the phase has no tiles
    int default_block_n;
    int two_d;                    // phase 2: [N, d] tensors, B and H must stay 1
    int max_step;                 // > 0: accepts --step 1..max_step|all (phase 3)
    int has_dq_mode;              // accepts --dq deterministic|atomic|both (phase 4)
    int has_compare_causal;       // accepts --compare-causal (phase 3)
    int has_baselines;            // accepts --no-baselines (phase 5: its rows beside the steps)
    const int *cuda_head_dims;    // head dims the CUDA kernels support, ending with 0; NULL = any
    int has_dtype;                // accepts --dtype fp32|fp16|bf16 (phase 5)
    int has_cpu_bf16;             // accepts --cpu-bf16 UNIT (phase 5: what step 4's bf16 CPU products run on)
} fa_cli_spec;

typedef struct {
    fa_shape shape;
    int block_m, block_n;
    int impl;                     // FA_IMPL_CPU | FA_IMPL_CUDA
    int threads;                  // OpenMP threads of the parallel CPU run (default: all cores)
    int threads_only;             // --threads-only: no 1-thread timing run (tools/cpu_compare.py saves the time)
    int no_baselines;             // --no-baselines: the steps' rows only
    uint64_t seed;
    int warmup, iters;
    int check_heads;              // heads the oracle checks; 0 = as many as a time budget allows
    const char *save_dir, *load_dir, *csv;
    int step;                     // phase 3: 0 = all steps
    int dq_mode;                  // phase 4
    int compare_causal;           // phase 3: also run steps 2 and 3 with the causal mask flipped (labelled, not saved)
    int argc;                     // the command line, kept for --save-dir's command.txt
    char **argv;
    int dtype;                    // FA_DTYPE_FP32 (default), FA_DTYPE_FP16 or FA_DTYPE_BF16 (fa_half.h)
    const char *cpu_bf16;         // --cpu-bf16: auto (default), amx, avx512, emulated or fma
} fa_options;

// Parses argv. Prints --help and exits 0; prints one line and exits 2 on anything it cannot accept.
void fa_parse_options(int argc, char **argv, const fa_cli_spec *spec, fa_options *opt);

// The value of an integer flag, checked as typed: an integer (no other text), between lo and hi. Anything else, a
// number too long for 64 bits included, exits 2 with one line: "FLAG expects an integer, got 'TEXT'" or "FLAG must be
// between LO and HI (got TEXT)".
int64_t fa_parse_int(const char *flag, const char *text, int64_t lo, int64_t hi);
// The value of a real-valued flag as the float32 the run will use, checked as typed and after conversion: a number
// (no other text) with lo <= value <= hi (lo_open: lo < value), whose float32 is finite and, unless the typed value is
// 0, not 0 (1e-46 would become 0). Exits 2 with one line otherwise.
float fa_parse_float32(const char *flag, const char *text, double lo, int lo_open, double hi, int hi_open);

// 1 when D is one of the spec's CUDA head dims (or the spec has no list).
int fa_cuda_supports_head_dim(const fa_cli_spec *spec, int64_t D);

#ifdef __cplusplus
}
#endif

#endif
