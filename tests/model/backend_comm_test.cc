// BackendComm's three modes, with a one-rank communicator that records the pointers it is
// handed: host memory goes through untouched; backend memory the host cannot read is
// staged (copied out, handed over, copied back); a GPU-memory communicator with a
// host-memory backend is refused.
#include "model/backend_comm.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/guarded_backend.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

// One rank: the sum is the input, the gather is a copy, Send/Recv loop back.
class LoopbackComm final : public comm::Communicator {
 public:
  explicit LoopbackComm(bool device_memory) : device_memory_(device_memory) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool device_memory() const override { return device_memory_; }
  absl::Status Send(const void* buf, size_t bytes, int, uint64_t) override {
    last = buf;
    sent.assign(static_cast<const uint8_t*>(buf), static_cast<const uint8_t*>(buf) + bytes);
    return absl::OkStatus();
  }
  absl::Status Recv(void* buf, size_t bytes, int, uint64_t) override {
    last = buf;
    std::memcpy(buf, sent.data(), std::min(bytes, sent.size()));
    return absl::OkStatus();
  }
  absl::Status AllReduceSum(float* data, size_t n) override {
    last = data;
    for (size_t i = 0; i < n; ++i) data[i] *= 2;  // Not a sum of one rank: shows the call ran on these bytes.
    return absl::OkStatus();
  }
  absl::Status AllGather(const void* in, size_t bytes, void* out) override {
    last = out;
    std::memmove(out, in, bytes);
    return absl::OkStatus();
  }
  absl::Status Broadcast(void*, size_t, int) override { return absl::OkStatus(); }
  absl::Status Barrier() override { return absl::OkStatus(); }
  absl::Status AllToAll(const void* send, std::span<const size_t> send_bytes, void* recv,
                        std::span<const size_t>) override {
    last = recv;
    std::memcpy(recv, send, send_bytes[0]);
    return absl::OkStatus();
  }

  const void* last = nullptr;
  std::vector<uint8_t> sent;

 private:
  bool device_memory_;
};

TEST(BackendCommTest, HostMemoryGoesThroughUntouched) {
  auto cpu = kernels::MakeCpuBackend({});
  LoopbackComm comm(false);
  auto bc = BackendComm::Create(cpu.get(), &comm);
  ASSERT_TRUE(bc.ok()) << bc.status();
  std::vector<float> x = {1, 2, 3};
  ASSERT_TRUE(bc->AllReduceSum(x.data(), x.size()).ok());
  EXPECT_EQ(comm.last, x.data());
  EXPECT_EQ(x, (std::vector<float>{2, 4, 6}));
}

TEST(BackendCommTest, BackendMemoryIsStagedThroughTheHost) {
  testing::GuardedBackend guarded;
  LoopbackComm comm(false);
  auto bc = BackendComm::Create(&guarded, &comm);
  ASSERT_TRUE(bc.ok()) << bc.status();
  {
    auto buf = guarded.Allocate(3 * sizeof(float));
    ASSERT_TRUE(buf.ok());
    const std::vector<float> x = {1, 2, 3};
    ASSERT_TRUE(guarded.CopyIn((*buf)->data(), x.data(), 12).ok());
    // The communicator never sees backend memory (reading it would crash the test).
    ASSERT_TRUE(bc->AllReduceSum((*buf)->f32(), 3).ok());
    EXPECT_NE(comm.last, (*buf)->data());
    ASSERT_TRUE(bc->AllGather((*buf)->data(), 12, (*buf)->data()).ok());
    EXPECT_NE(comm.last, (*buf)->data());
    ASSERT_TRUE(bc->Send((*buf)->data(), 12, 0, 1).ok());
    ASSERT_TRUE(bc->Recv((*buf)->data(), 12, 0, 1).ok());
    std::vector<float> back(3);
    ASSERT_TRUE(guarded.CopyOut(back.data(), (*buf)->data(), 12).ok());
    EXPECT_EQ(back, (std::vector<float>{2, 4, 6}));
  }
}

TEST(BackendCommTest, GpuCommunicatorNeedsAGpuBackend) {
  auto cpu = kernels::MakeCpuBackend({});
  LoopbackComm comm(true);
  auto bc = BackendComm::Create(cpu.get(), &comm);
  EXPECT_STATUS_CODE(bc, kInvalidArgument);
  EXPECT_NE(testing::StatusMessage(bc.status()).find("nccl"), std::string::npos);
}

}  // namespace
}  // namespace cascade::model
