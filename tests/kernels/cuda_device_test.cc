// The CUDA switch: with the backend built, device discovery runs and says why there is no
// GPU (error 35 without a driver, 100 without a device); without it, it says so. GPU
// tests skip with that reason; they never pass silently.
#include "kernels/cuda_device.h"

#include "tests/test_support.h"

namespace cascade::kernels {
namespace {

TEST(CudaDeviceTest, ReportsDevicesOrTheReason) {
  const CudaAvailability a = QueryCudaDevices();
  if (a.device_count == 0) {
    EXPECT_FALSE(a.reason.empty());
    GTEST_SKIP() << "no usable GPU: " << a.reason;
  }
  EXPECT_TRUE(BuiltWithCuda());
  EXPECT_TRUE(a.reason.empty());
}

}  // namespace
}  // namespace cascade::kernels
