// Communicator calls over a backend's memory. A CPU worker hands its buffers to the
// communicator as they are; a GPU worker with a GPU-memory communicator (NCCL) first waits
// for its compute stream, since the communicator runs on its own; a GPU worker with a
// host-memory communicator (UCX) stages each call through the backend's staging memory
// (page-locked on a GPU: copy out, call, copy in). Callers write one code path for all
// three.
//
// Thread-safety: single owner, like the backend and the communicator it borrows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "kernels/ops.h"

namespace cascade::model {

class BackendComm {
 public:
  // Both borrowed; they must outlive this. InvalidArgument when the communicator works on
  // GPU memory and the backend on host memory (a CPU worker cannot use NCCL).
  static absl::StatusOr<BackendComm> Create(kernels::Backend* backend, comm::Communicator* comm);
  BackendComm() = default;

  comm::Communicator* comm() const { return comm_; }
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }

  // As comm::Communicator's calls, on buffers of the backend's memory.
  absl::Status AllReduceSum(float* data, size_t n);
  absl::Status AllGather(const void* in, size_t bytes_per_rank, void* out);
  absl::Status Send(const void* buf, size_t bytes, int peer, uint64_t tag);
  absl::Status Recv(void* buf, size_t bytes, int peer, uint64_t tag);
  absl::Status AllToAll(const void* send, std::span<const size_t> send_bytes, void* recv,
                        std::span<const size_t> recv_bytes);

 private:
  enum class Mode { kDirect, kSynchronized, kStaged };
  absl::Status Prepare();  // Waits for the backend where the communicator runs beside it.
  absl::Status Stage(std::unique_ptr<kernels::Buffer>& buf, size_t bytes);  // Grows staging memory.

  kernels::Backend* backend_ = nullptr;
  comm::Communicator* comm_ = nullptr;
  Mode mode_ = Mode::kDirect;
  // Host staging (kStaged), grown to the largest call.
  std::unique_ptr<kernels::Buffer> in_, out_;
};

}  // namespace cascade::model
