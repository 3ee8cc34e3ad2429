// Run-time detection of the x86 SIMD extensions the CPU kernels use, and the choice of
// kernel ISA level. Detection runs once (thread-safe static init); the ISA override is an
// atomic, meant for tests that run every path against the others.
#pragma once

#include <string>
#include <string_view>

namespace cascade::kernels {

// What this CPU (and OS, for the wide register state) supports.
struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx_vnni = false;
  bool amd = false;  // Vendor "AuthenticAMD": some memory-stream tunings differ by vendor.
};

// Detected once, at first call. Thread-safe.
const CpuFeatures& GetCpuFeatures();

// Kernel ISA levels, ordered: each level's kernels need everything the lower ones need.
enum class CpuIsa : int {
  kGeneric = 0,  // Portable C++, any CPU.
  kAvx2 = 1,     // AVX2 + FMA + F16C.
  kAvx512 = 2,   // AVX-512 F/BW/VL/DQ/VNNI + AVX2/FMA/F16C.
};
inline constexpr CpuIsa kAllCpuIsas[] = {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512};

std::string_view CpuIsaName(CpuIsa isa);

// The best level this CPU supports.
CpuIsa BestCpuIsa();
// Whether this CPU can run kernels of `isa`.
bool CpuSupportsIsa(CpuIsa isa);

// The level the kernels dispatch to: `BestCpuIsa()` unless capped by the environment
// variable CASCADE_CPU_ISA (generic | avx2 | avx512, read once) or by
// `SetMaxCpuIsaForTesting`. Thread-safe (relaxed atomic read).
CpuIsa ActiveCpuIsa();

// The active level and the rule that chose it, for the log and `cascade info`: "avx2 (the
// best this CPU runs)", or "generic (capped by CASCADE_CPU_ISA=generic; this CPU runs
// avx512)". The level moves results by f32 summation order, so it is never left unsaid.
std::string DescribeActiveCpuIsa();

// Caps the kernels at `isa` (lower levels only; a level above `BestCpuIsa()` is clamped to
// it) until reset with `BestCpuIsa()`. For tests that compare paths; not for production.
void SetMaxCpuIsaForTesting(CpuIsa isa);

// Whether a kernel may give the FMA units denormal operands where that saves work (the FP8
// GEMVs decode E4M3 straight into f32 bits, its subnormal codes f32 denormals): AMD's
// cores take them at full speed (measured on Zen 3), Intel's through a microcode assist of
// ~100 cycles each. By vendor; the kernels that ask agree either way within f32 rounding
// (the same products, summed in another order), so the rule moves speed only.
// Thread-safe (relaxed atomic read).
bool DenormalOperandsFast();
// Forces the answer (for tests that run both paths; not for production) until reset with
// `ResetDenormalOperandsFastForTesting`.
void SetDenormalOperandsFastForTesting(bool fast);
void ResetDenormalOperandsFastForTesting();

}  // namespace cascade::kernels
