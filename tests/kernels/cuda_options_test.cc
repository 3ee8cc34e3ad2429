// CASCADE_CUDA_KERNELS, read without a GPU: the reference kernels unless it says tuned, and a
// clear error naming it for anything else.
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

}  // namespace
}  // namespace cascade::kernels
