// The CUDA backend's options that do not need CUDA to read (built with and without it).
#include <cstdlib>
#include <string>

#include "core/str_cat.h"
#include "kernels/cuda_backend.h"

namespace cascade::kernels {

namespace {

// A two-way choice from `variable`: unset, empty or by_default's name gives by_default;
// other's name gives other; anything else InvalidArgument naming the variable.
template <typename T>
absl::StatusOr<T> TwoWayFromEnv(const char* variable, std::string_view (*name)(T), T by_default, T other) {
  const char* v = std::getenv(variable);
  if (v == nullptr || std::string_view(v).empty() || std::string_view(v) == name(by_default)) return by_default;
  if (std::string_view(v) == name(other)) return other;
  return absl::InvalidArgumentError(StrCat(variable, " = '", v, "': must be ", name(by_default), " or ", name(other)));
}

// "name (source)" of one choice, or what is wrong with its variable.
template <typename T>
std::string Describe(absl::StatusOr<T> (*from_env)(), std::string_view (*name)(T), const char* variable) {
  const absl::StatusOr<T> v = from_env();
  if (!v.ok()) return StrCat("invalid (", v.status().message(), ")");
  return StrCat(name(*v), " (", CudaChoiceSource(variable), ")");
}

}  // namespace

std::string_view CudaKernelsName(CudaKernels k) { return k == CudaKernels::kTuned ? "tuned" : "reference"; }
absl::StatusOr<CudaKernels> CudaKernelsFromEnv() {
  return TwoWayFromEnv("CASCADE_CUDA_KERNELS", &CudaKernelsName, CudaKernels::kReference, CudaKernels::kTuned);
}

std::string_view QuantGemmName(QuantGemm g) { return g == QuantGemm::kInt8 ? "int8" : "bf16"; }
absl::StatusOr<QuantGemm> QuantGemmFromEnv() {
  return TwoWayFromEnv("CASCADE_CUDA_QUANT_GEMM", &QuantGemmName, QuantGemm::kBf16, QuantGemm::kInt8);
}

std::string_view PrefillAttentionName(PrefillAttention p) { return p == PrefillAttention::kF16 ? "f16" : "f32"; }
absl::StatusOr<PrefillAttention> PrefillAttentionFromEnv() {
  return TwoWayFromEnv("CASCADE_CUDA_PREFILL_ATTENTION", &PrefillAttentionName, PrefillAttention::kF32,
                       PrefillAttention::kF16);
}

std::string CudaChoiceSource(const char* variable) {
  const char* v = std::getenv(variable);
  if (v != nullptr && *v != '\0') return StrCat(variable, "=", v);
  const std::string_view what = std::string_view(variable) == "CASCADE_CUDA_KERNELS"      ? "the tuned kernels"
                                : std::string_view(variable) == "CASCADE_CUDA_QUANT_GEMM" ? "the int8 tiles"
                                                                                          : "the tensor-core tiles";
  return StrCat(variable, " unset: ", what, " stay off until measured on a GPU");
}

std::string DescribeCudaKernels() {
  return StrCat(Describe(&CudaKernelsFromEnv, &CudaKernelsName, "CASCADE_CUDA_KERNELS"),
                "; with the tuned ones: GEMM of quantized weights over many tokens ",
                Describe(&QuantGemmFromEnv, &QuantGemmName, "CASCADE_CUDA_QUANT_GEMM"), ", prefill attention ",
                Describe(&PrefillAttentionFromEnv, &PrefillAttentionName, "CASCADE_CUDA_PREFILL_ATTENTION"));
}

}  // namespace cascade::kernels
