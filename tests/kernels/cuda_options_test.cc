// CASCADE_CUDA_KERNELS, CASCADE_CUDA_QUANT_GEMM and CASCADE_CUDA_PREFILL_ATTENTION, read without
// a GPU: the reference kernels, the BF16 GEMM and the f32 attention tiles unless they say otherwise, and a clear error
// naming the variable for anything else.
#include <gtest/gtest.h>

#include <cstdlib>

#include "kernels/cuda_backend.h"

namespace cascade::kernels {
namespace {

TEST(CudaKernelsFromEnvTest, ReferenceUnlessToldTuned) {
  unsetenv("CASCADE_CUDA_KERNELS");
  EXPECT_EQ(*CudaKernelsFromEnv(), CudaKernels::kReference);
  setenv("CASCADE_CUDA_KERNELS", "tuned", 1);
  EXPECT_EQ(*CudaKernelsFromEnv(), CudaKernels::kTuned);
  setenv("CASCADE_CUDA_KERNELS", "reference", 1);
  EXPECT_EQ(*CudaKernelsFromEnv(), CudaKernels::kReference);
  setenv("CASCADE_CUDA_KERNELS", "fast", 1);
  const absl::StatusOr<CudaKernels> bad = CudaKernelsFromEnv();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("CASCADE_CUDA_KERNELS"), std::string_view::npos);
  unsetenv("CASCADE_CUDA_KERNELS");
  EXPECT_EQ(CudaKernelsName(CudaKernels::kTuned), "tuned");
}

TEST(QuantGemmFromEnvTest, Bf16UnlessToldInt8) {
  unsetenv("CASCADE_CUDA_QUANT_GEMM");
  EXPECT_EQ(*QuantGemmFromEnv(), QuantGemm::kBf16);
  setenv("CASCADE_CUDA_QUANT_GEMM", "int8", 1);
  EXPECT_EQ(*QuantGemmFromEnv(), QuantGemm::kInt8);
  setenv("CASCADE_CUDA_QUANT_GEMM", "bf16", 1);
  EXPECT_EQ(*QuantGemmFromEnv(), QuantGemm::kBf16);
  setenv("CASCADE_CUDA_QUANT_GEMM", "int4", 1);
  const absl::StatusOr<QuantGemm> bad = QuantGemmFromEnv();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("CASCADE_CUDA_QUANT_GEMM"), std::string_view::npos);
  unsetenv("CASCADE_CUDA_QUANT_GEMM");
  EXPECT_EQ(QuantGemmName(QuantGemm::kInt8), "int8");
}

TEST(PrefillAttentionFromEnvTest, F32UnlessToldF16) {
  unsetenv("CASCADE_CUDA_PREFILL_ATTENTION");
  EXPECT_EQ(*PrefillAttentionFromEnv(), PrefillAttention::kF32);
  setenv("CASCADE_CUDA_PREFILL_ATTENTION", "f16", 1);
  EXPECT_EQ(*PrefillAttentionFromEnv(), PrefillAttention::kF16);
  setenv("CASCADE_CUDA_PREFILL_ATTENTION", "f32", 1);
  EXPECT_EQ(*PrefillAttentionFromEnv(), PrefillAttention::kF32);
  setenv("CASCADE_CUDA_PREFILL_ATTENTION", "bf16", 1);
  const absl::StatusOr<PrefillAttention> bad = PrefillAttentionFromEnv();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("CASCADE_CUDA_PREFILL_ATTENTION"), std::string_view::npos);
  unsetenv("CASCADE_CUDA_PREFILL_ATTENTION");
  EXPECT_EQ(PrefillAttentionName(PrefillAttention::kF16), "f16");
}

// What `cascade info` shows and Create logs: each choice with its source, the rule when its
// variable is unset, and what is wrong with a bad value.
TEST(CudaChoicesTest, EachChoiceNamesItsSource) {
  unsetenv("CASCADE_CUDA_KERNELS");
  unsetenv("CASCADE_CUDA_QUANT_GEMM");
  unsetenv("CASCADE_CUDA_PREFILL_ATTENTION");
  EXPECT_EQ(CudaChoiceSource("CASCADE_CUDA_KERNELS"),
            "CASCADE_CUDA_KERNELS unset: the tuned kernels stay off until measured on a GPU");
  EXPECT_EQ(DescribeCudaKernels(),
            "reference (CASCADE_CUDA_KERNELS unset: the tuned kernels stay off until measured on a GPU); with the "
            "tuned ones: GEMM of quantized weights over many tokens bf16 (CASCADE_CUDA_QUANT_GEMM unset: the int8 "
            "tiles stay off until measured on a GPU), prefill attention f32 (CASCADE_CUDA_PREFILL_ATTENTION unset: "
            "the tensor-core tiles stay off until measured on a GPU)");
  setenv("CASCADE_CUDA_KERNELS", "tuned", 1);
  setenv("CASCADE_CUDA_QUANT_GEMM", "int8", 1);
  setenv("CASCADE_CUDA_PREFILL_ATTENTION", "f16", 1);
  EXPECT_EQ(DescribeCudaKernels(),
            "tuned (CASCADE_CUDA_KERNELS=tuned); with the tuned ones: GEMM of quantized weights over many tokens int8 "
            "(CASCADE_CUDA_QUANT_GEMM=int8), prefill attention f16 (CASCADE_CUDA_PREFILL_ATTENTION=f16)");
  setenv("CASCADE_CUDA_QUANT_GEMM", "int4", 1);
  EXPECT_NE(DescribeCudaKernels().find("invalid (CASCADE_CUDA_QUANT_GEMM = 'int4': must be bf16 or int8)"),
            std::string::npos);
  unsetenv("CASCADE_CUDA_KERNELS");
  unsetenv("CASCADE_CUDA_QUANT_GEMM");
  unsetenv("CASCADE_CUDA_PREFILL_ATTENTION");
}

}  // namespace
}  // namespace cascade::kernels
