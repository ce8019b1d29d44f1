// Function multiversioning for the addon's hot loops: on x86-64 Linux a function marked TORL_CPU_CLONES is
// built for AVX-512, AVX2 and baseline x86-64, and the loader picks one from the CPU (GCC ifuncs), so the
// build stays portable; elsewhere it is built once for the target. The addon is built with
// -ffp-contract=off, so the AVX-512 and AVX2 builds make no fused multiply-adds the baseline one lacks:
// every build computes the same bits.
#pragma once

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define TORL_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TORL_CPU_CLONES
#endif
