// The CUDA backend's options that do not need CUDA to read (built with and without it).
#include <cstdlib>
#include <string>

#include "core/str_cat.h"
#include "kernels/cuda_backend.h"

namespace cascade::kernels {

std::string_view CudaKernelsName(CudaKernels k) { return k == CudaKernels::kTuned ? "tuned" : "reference"; }

absl::StatusOr<CudaKernels> CudaKernelsFromEnv() {
  const char* v = std::getenv("CASCADE_CUDA_KERNELS");
  if (v == nullptr || std::string_view(v).empty() || std::string_view(v) == "reference") return CudaKernels::kReference;
  if (std::string_view(v) == "tuned") return CudaKernels::kTuned;
  return absl::InvalidArgumentError(StrCat("CASCADE_CUDA_KERNELS = '", v, "': must be reference or tuned"));
}

std::string_view QuantGemmName(QuantGemm g) { return g == QuantGemm::kInt8 ? "int8" : "bf16"; }

absl::StatusOr<QuantGemm> QuantGemmFromEnv() {
  const char* v = std::getenv("CASCADE_CUDA_QUANT_GEMM");
  if (v == nullptr || std::string_view(v).empty() || std::string_view(v) == "bf16") return QuantGemm::kBf16;
  if (std::string_view(v) == "int8") return QuantGemm::kInt8;
  return absl::InvalidArgumentError(StrCat("CASCADE_CUDA_QUANT_GEMM = '", v, "': must be bf16 or int8"));
}

std::string_view PrefillAttentionName(PrefillAttention p) { return p == PrefillAttention::kF16 ? "f16" : "f32"; }

absl::StatusOr<PrefillAttention> PrefillAttentionFromEnv() {
  const char* v = std::getenv("CASCADE_CUDA_PREFILL_ATTENTION");
  if (v == nullptr || std::string_view(v).empty() || std::string_view(v) == "f32") return PrefillAttention::kF32;
  if (std::string_view(v) == "f16") return PrefillAttention::kF16;
  return absl::InvalidArgumentError(StrCat("CASCADE_CUDA_PREFILL_ATTENTION = '", v, "': must be f32 or f16"));
}

std::string CudaChoiceSource(const char* variable) {
  const char* v = std::getenv(variable);
  if (v != nullptr && *v != '\0') return StrCat(variable, "=", v);
  const std::string_view what = std::string_view(variable) == "CASCADE_CUDA_KERNELS"      ? "the tuned kernels"
                                : std::string_view(variable) == "CASCADE_CUDA_QUANT_GEMM" ? "the int8 tiles"
                                                                                          : "the tensor-core tiles";
  return StrCat(variable, " unset: ", what, " stay off until measured on a GPU");
}

namespace {

// "name (source)" of one choice, or what is wrong with its variable.
template <typename T>
std::string Describe(absl::StatusOr<T> (*from_env)(), std::string_view (*name)(T), const char* variable) {
  const absl::StatusOr<T> v = from_env();
  if (!v.ok()) return StrCat("invalid (", v.status().message(), ")");
  return StrCat(name(*v), " (", CudaChoiceSource(variable), ")");
}

}  // namespace

std::string DescribeCudaKernels() {
  return StrCat(Describe(&CudaKernelsFromEnv, &CudaKernelsName, "CASCADE_CUDA_KERNELS"),
                "; with the tuned ones: GEMM of quantized weights over many tokens ",
                Describe(&QuantGemmFromEnv, &QuantGemmName, "CASCADE_CUDA_QUANT_GEMM"), ", prefill attention ",
                Describe(&PrefillAttentionFromEnv, &PrefillAttentionName, "CASCADE_CUDA_PREFILL_ATTENTION"));
}

}  // namespace cascade::kernels
