// fa_cpu_units.h - the CPU's bf16 units, found and set up: AVX512_BF16 (vdpbf16ps, 16 float32 lanes each += a pair
// of bf16 products) and AMX-BF16 (tdpbf16ps on tile registers). Phase 5's bf16 backward runs its products on them
// (phase5_tensor_cores/bf16_dot.h) and tools/fma_peak measures their peaks.
#ifndef FA_CPU_UNITS_H
#define FA_CPU_UNITS_H

// 1 where this build can compile for both units (GCC 11 or Clang 12 on, x86-64 Linux): only then can the functions
// below say 1, and only then does code that uses the units' instructions compile them.
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && \
    (defined(__clang__) ? __clang_major__ >= 12 : __GNUC__ >= 11)
#define FA_CPU_UNITS 1
#else
#define FA_CPU_UNITS 0
#endif

#ifdef __cplusplus
extern "C" {
#endif

// 1 when the CPU has AVX512_BF16.
int fa_cpu_has_avx512_bf16(void);
// 1 when the CPU has AMX-BF16 and Linux granted this process AMX's tile registers (large, 8 x 1 KiB, so Linux hands
// them out only when asked: arch_prctl(ARCH_REQ_XCOMP_PERM), once). Call it before any parallel region.
int fa_cpu_amx_granted(void);
// AMX's tile shapes, loaded into the calling thread's configuration (ldtilecfg): all eight tiles 16 rows x 64 bytes.
// A thread calls fa_amx_thread_begin() before its first tile instruction and fa_amx_thread_end() after its last.
void fa_amx_thread_begin(void);
void fa_amx_thread_end(void);

#ifdef __cplusplus
}
#endif

#endif
