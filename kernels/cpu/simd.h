// Portable vectorisation helpers for the CPU kernels that are not matmuls. Hot loops are
// plain C++ with `#pragma omp simd` (enabled by -fopenmp-simd, no OpenMP runtime) and are
// compiled three times by `CASCADE_SIMD_CLONES` (AVX-512, AVX2+FMA, baseline) with the
// best clone picked once at load time through an ifunc.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CASCADE_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CASCADE_SIMD_CLONES
#endif
