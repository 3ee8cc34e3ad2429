#include "kernels/cpu_features.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace cascade::kernels {
namespace {

#if defined(__x86_64__) || defined(__i386__)
uint64_t ReadXcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}
#endif

CpuFeatures Detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax, ebx, ecx, edx;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    // The vendor string is ebx, edx, ecx: "Auth" "enti" "cAMD".
    f.amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;
  }
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = (ecx >> 27) & 1;
  const bool fma = (ecx >> 12) & 1;
  const bool f16c = (ecx >> 29) & 1;
  const bool avx = (ecx >> 28) & 1;
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = ReadXcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;    // SSE + AVX state.
  const bool zmm_state = (xcr0 & 0xe6) == 0xe6;  // + opmask, ZMM_Hi256, Hi16_ZMM.
  if (!ymm_state) return f;
  f.fma = fma;
  f.f16c = f16c;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  f.avx2 = (ebx >> 5) & 1;
  if (zmm_state) {
    f.avx512f = (ebx >> 16) & 1;
    f.avx512dq = (ebx >> 17) & 1;
    f.avx512bw = (ebx >> 30) & 1;
    f.avx512vl = (ebx >> 31) & 1;
    f.avx512vnni = (ecx >> 11) & 1;
  }
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  f.avx_vnni = (eax >> 4) & 1;
  if (zmm_state) f.avx512bf16 = (eax >> 5) & 1;
#endif
  return f;
}

// The cap starts at $CASCADE_CPU_ISA (generic | avx2 | avx512) when set: to measure the
// lower ISAs' kernels on a machine that has the higher ones.
int InitialMaxIsa() {
  const char* env = std::getenv("CASCADE_CPU_ISA");
  if (env == nullptr) return static_cast<int>(CpuIsa::kAvx512);
  for (CpuIsa isa : kAllCpuIsas) {
    if (CpuIsaName(isa) == env) return static_cast<int>(isa);
  }
  std::fprintf(stderr, "CASCADE_CPU_ISA=%s is not generic, avx2 or avx512; ignored\n", env);
  return static_cast<int>(CpuIsa::kAvx512);
}

std::atomic<int>& MaxIsa() {
  static std::atomic<int> max_isa{InitialMaxIsa()};
  return max_isa;
}

// -1: by vendor; 0 / 1: forced by a test.
std::atomic<int>& DenormalOverride() {
  static std::atomic<int> forced{-1};
  return forced;
}

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

std::string_view CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kGeneric: return "generic";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "unknown";
}

bool CpuSupportsIsa(CpuIsa isa) {
  const CpuFeatures& f = GetCpuFeatures();
  switch (isa) {
    case CpuIsa::kGeneric: return true;
    case CpuIsa::kAvx2: return f.avx2 && f.fma && f.f16c;
    case CpuIsa::kAvx512:
      return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni;
  }
  return false;
}

CpuIsa BestCpuIsa() {
  static const CpuIsa best = [] {
    if (CpuSupportsIsa(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
    if (CpuSupportsIsa(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
    return CpuIsa::kGeneric;
  }();
  return best;
}

std::string DescribeActiveCpuIsa() {
  const CpuIsa active = ActiveCpuIsa(), best = BestCpuIsa();
  std::string d(CpuIsaName(active));
  if (active == best) return d + " (the best this CPU runs)";
  const char* env = std::getenv("CASCADE_CPU_ISA");
  d += env != nullptr ? std::string(" (capped by CASCADE_CPU_ISA=") + env : std::string(" (capped for testing");
  return d + "; this CPU runs " + std::string(CpuIsaName(best)) + ")";
}

CpuIsa ActiveCpuIsa() {
  const int cap = MaxIsa().load(std::memory_order_relaxed);
  const int best = static_cast<int>(BestCpuIsa());
  return static_cast<CpuIsa>(cap < best ? cap : best);
}

void SetMaxCpuIsaForTesting(CpuIsa isa) { MaxIsa().store(static_cast<int>(isa), std::memory_order_relaxed); }

bool DenormalOperandsFast() {
  const int forced = DenormalOverride().load(std::memory_order_relaxed);
  return forced >= 0 ? forced == 1 : GetCpuFeatures().amd;
}

void SetDenormalOperandsFastForTesting(bool fast) { DenormalOverride().store(fast ? 1 : 0, std::memory_order_relaxed); }

void ResetDenormalOperandsFastForTesting() { DenormalOverride().store(-1, std::memory_order_relaxed); }

}  // namespace cascade::kernels
