// NCCL communicator: collectives over device buffers against naive sums, for every rank
// count the machine's GPUs allow (threads, one device each). Without a GPU (or without a
// CUDA build) the tests skip and print why; they never pass silently.
#include "comm/nccl_communicator.h"

#include <numeric>
#include <thread>
#include <vector>

#include "comm/rendezvous.h"
#include "kernels/cuda_device.h"
#include "tests/test_support.h"

#if CASCADE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace cascade::comm {
namespace {

TEST(NcclCommunicatorTest, WithoutGpuSaysWhy) {
  const kernels::CudaAvailability cuda = kernels::QueryCudaDevices();
  if (cuda.device_count > 0) GTEST_SKIP() << "a GPU is present; the GPU tests below run instead";
  InProcessRendezvous rendezvous;
  auto c = NcclCommunicator::Create({"nccl-test", 0, 1, 2000}, &rendezvous, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.status().code() == absl::StatusCode::kUnavailable ||
              c.status().code() == absl::StatusCode::kUnimplemented)
      << c.status();
  GTEST_SKIP() << "no GPU: " << cuda.reason << " (NcclCommunicator says: " << c.status().message() << ")";
}

// A group of NCCL ranks, one per GPU (up to 4): skipped, saying why, without two GPUs and a
// CUDA build.
class NcclGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const kernels::CudaAvailability cuda = kernels::QueryCudaDevices();
    if (cuda.device_count < 2 || !NcclCommunicator::Available()) {
      GTEST_SKIP() << "needs 2+ GPUs and a CUDA build (one NCCL rank per device): "
                   << (cuda.device_count == 0 ? cuda.reason : std::to_string(cuda.device_count) + " GPU(s)");
    }
    n_ranks_ = std::min(cuda.device_count, 4);
  }
  int n_ranks_ = 0;
};

TEST_F(NcclGroupTest, AllReduceAndAllGatherOnGpus) {
#if CASCADE_WITH_CUDA
  const int n_ranks = n_ranks_;
  InProcessRendezvous rendezvous;
  const size_t n = 1000003;  // Not a multiple of the rank count.
  std::vector<std::vector<float>> out(n_ranks);
  std::vector<std::thread> threads;
  std::vector<absl::Status> status(n_ranks);
  for (int r = 0; r < n_ranks; ++r) {
    threads.emplace_back([&, r] {
      auto c = NcclCommunicator::Create({"nccl-allreduce", r, n_ranks, 30000}, &rendezvous, r);
      if (!c.ok()) {
        status[r] = c.status();
        return;
      }
      std::vector<float> host(n);
      for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>((i % 97) * (r + 1));
      float* dev = nullptr;
      cudaMalloc(&dev, n * sizeof(float));
      cudaMemcpy(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
      status[r] = (*c)->AllReduceSum(dev, n);
      out[r].resize(n);
      cudaMemcpy(out[r].data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost);
      cudaFree(dev);
    });
  }
  for (auto& t : threads) t.join();
  const float factor = n_ranks * (n_ranks + 1) / 2.0f;  // Sum of (r + 1).
  for (int r = 0; r < n_ranks; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    for (size_t i = 0; i < n; i += 997) ASSERT_EQ(out[r][i], static_cast<float>(i % 97) * factor) << r << " " << i;
  }
#endif
}

// Rank r sends (q + 1) * 1000 + r bytes of value r * 16 + q to every rank q, itself included.
TEST_F(NcclGroupTest, AllToAllOnGpus) {
#if CASCADE_WITH_CUDA
  const int n_ranks = n_ranks_;
  InProcessRendezvous rendezvous;
  const auto size = [](int src, int dst) { return static_cast<size_t>((dst + 1) * 1000 + src); };
  std::vector<absl::Status> status(n_ranks);
  std::vector<std::vector<uint8_t>> got(n_ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < n_ranks; ++r) {
    threads.emplace_back([&, r] {
      auto c = NcclCommunicator::Create({"nccl-alltoall", r, n_ranks, 30000}, &rendezvous, r);
      if (!c.ok()) {
        status[r] = c.status();
        return;
      }
      std::vector<size_t> send_bytes(n_ranks), recv_bytes(n_ranks);
      std::vector<uint8_t> host;
      for (int q = 0; q < n_ranks; ++q) {
        send_bytes[q] = size(r, q);
        recv_bytes[q] = size(q, r);
        host.insert(host.end(), send_bytes[q], static_cast<uint8_t>(r * 16 + q));
      }
      const size_t in = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t{0});
      void *send = nullptr, *recv = nullptr;
      cudaMalloc(&send, host.size());
      cudaMalloc(&recv, in);
      cudaMemcpy(send, host.data(), host.size(), cudaMemcpyHostToDevice);
      status[r] = (*c)->AllToAll(send, send_bytes, recv, recv_bytes);
      got[r].resize(in);
      cudaMemcpy(got[r].data(), recv, in, cudaMemcpyDeviceToHost);
      cudaFree(send);
      cudaFree(recv);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n_ranks; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    size_t at = 0;
    for (int q = 0; q < n_ranks; ++q) {
      for (size_t i = 0; i < size(q, r); ++i) ASSERT_EQ(got[r][at + i], q * 16 + r) << r << " from " << q;
      at += size(q, r);
    }
  }
#endif
}

}  // namespace
}  // namespace cascade::comm
