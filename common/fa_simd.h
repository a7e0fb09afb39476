// fa_simd.h - one portable binary, the widest vectors of the CPU it runs on: FA_SIMD_CLONES.
//
// Why: a portable x86-64 build may assume only SSE2 (128 bits, four floats, no fused multiply-add), and a CPU kernel
// compiled for it runs at a quarter or less of what an AVX2 or AVX-512 core does, which would make every CPU/GPU ratio
// in the tables several times larger than the hardware's. Building with -march=native fixes the machine the binary
// runs on at compile time. Instead, the function that holds a kernel's hot loops is marked FA_SIMD_CLONES: GCC and
// Clang then compile it three times (function multiversioning), and the loader picks, once, the widest version the CPU
// has. The OpenMP parallel loops inside such a function are cloned with it.
//
//   "avx512f"  512-bit vectors (16 floats), FMA, 32 vector registers
//   "fma"      256-bit vectors (8 floats) with fused multiply-add: every AVX2 CPU has it
//   "default"  the build's baseline (SSE2 on x86-64)
//
// The versions name instruction sets, not CPUs ("arch=haswell"): GCC does not inline a function compiled for one
// -march into one compiled for another, and the small inline helpers (fa_exp2, the micro-kernels) must be inlined.
// GCC 12 vectorises fa_exp2's clamps inside such a version only when it may assume that comparing floats raises no
// exception: the CPU kernels are compiled with -fno-trapping-math (the top-level CMakeLists.txt), which changes no
// result (nothing here reads the floating-point exception flags).
//
// Rounding: the build compiles C with -ffp-contract=off, so a * b + c rounds twice in every version, as in the SSE2
// baseline, and the phases' checks and bit-for-bit relations hold alike on every machine; only phase 5's
// register-tiled steps fuse multiply-adds (phase5_tensor_cores/CMakeLists.txt). A given machine always runs the same
// version, whatever the thread count, so runs stay bit for bit reproducible there; the order of a vectorised sum
// follows the vector width, so machines of different widths may differ in the last bits, as two compilers would.
// fa_simd_hot_loops() names the version this machine runs, for the report's header.
#ifndef FA_SIMD_H
#define FA_SIMD_H

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__INTEL_COMPILER)
#define FA_SIMD_CLONES __attribute__((target_clones("avx512f", "fma", "default")))
#define FA_SIMD_HAVE_CLONES 1
#else
#define FA_SIMD_CLONES
#define FA_SIMD_HAVE_CLONES 0
#endif
// A function that a FA_SIMD_CLONES function calls in its hot loop, made part of each version: one that the compiler
// leaves out of line is compiled once, for the baseline, and every version would call that one.
#if defined(__GNUC__)
#define FA_SIMD_INLINE static inline __attribute__((always_inline))
#else
#define FA_SIMD_INLINE static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

// The version of every FA_SIMD_CLONES function that runs on this CPU, e.g. "AVX-512F (512-bit, FMA)", picked as the
// loader picks it (the widest the CPU has). Without multiversioning: the build's baseline.
const char *fa_simd_hot_loops(void);
// The floats in one vector of that version: 16 (AVX-512), 8 (AVX2 with FMA) or 4 (SSE2, NEON). A kernel whose tile
// is sized in vector registers picks its tile from it (phase 5 step 1's micro-kernel rows).
int fa_simd_vector_floats(void);

#ifdef __cplusplus
}
#endif

#endif
