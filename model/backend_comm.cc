#include "model/backend_comm.h"

#include <algorithm>
#include <numeric>

#include "core/status.h"

namespace cascade::model {

absl::StatusOr<BackendComm> BackendComm::Create(kernels::Backend* backend, comm::Communicator* comm) {
  if (comm->device_memory() && backend->host_memory()) {
    return absl::InvalidArgumentError(
        "a GPU-memory communicator (nccl) needs a GPU worker; use transport ucx for cpu devices");
  }
  BackendComm c;
  c.backend_ = backend;
  c.comm_ = comm;
  if (backend->host_memory()) {
    c.mode_ = Mode::kDirect;
  } else {
    c.mode_ = comm->device_memory() ? Mode::kSynchronized : Mode::kStaged;
  }
  return c;
}

absl::Status BackendComm::Prepare() {
  return mode_ == Mode::kSynchronized ? backend_->Synchronize() : absl::OkStatus();
}

absl::Status BackendComm::Stage(std::unique_ptr<kernels::Buffer>& buf, size_t bytes) {
  return kernels::GrowBuffer(*backend_, buf, bytes, /*staging=*/true);
}

absl::Status BackendComm::AllReduceSum(float* data, size_t n) {
  CASCADE_RETURN_IF_ERROR(Prepare());
  if (mode_ != Mode::kStaged) return comm_->AllReduceSum(data, n);
  const size_t bytes = n * sizeof(float);
  CASCADE_RETURN_IF_ERROR(Stage(in_, bytes));
  CASCADE_RETURN_IF_ERROR(backend_->CopyOut(in_->data(), data, bytes));
  CASCADE_RETURN_IF_ERROR(comm_->AllReduceSum(in_->f32(), n));
  return backend_->CopyIn(data, in_->data(), bytes);
}

absl::Status BackendComm::AllGather(const void* in, size_t bytes_per_rank, void* out) {
  CASCADE_RETURN_IF_ERROR(Prepare());
  if (mode_ != Mode::kStaged) return comm_->AllGather(in, bytes_per_rank, out);
  const size_t all = bytes_per_rank * static_cast<size_t>(comm_->size());
  CASCADE_RETURN_IF_ERROR(Stage(in_, bytes_per_rank));
  CASCADE_RETURN_IF_ERROR(Stage(out_, all));
  CASCADE_RETURN_IF_ERROR(backend_->CopyOut(in_->data(), in, bytes_per_rank));
  CASCADE_RETURN_IF_ERROR(comm_->AllGather(in_->data(), bytes_per_rank, out_->data()));
  return backend_->CopyIn(out, out_->data(), all);
}

absl::Status BackendComm::Send(const void* buf, size_t bytes, int peer, uint64_t tag) {
  CASCADE_RETURN_IF_ERROR(Prepare());
  if (mode_ != Mode::kStaged) return comm_->Send(buf, bytes, peer, tag);
  CASCADE_RETURN_IF_ERROR(Stage(in_, bytes));
  CASCADE_RETURN_IF_ERROR(backend_->CopyOut(in_->data(), buf, bytes));
  return comm_->Send(in_->data(), bytes, peer, tag);
}

absl::Status BackendComm::AllToAll(const void* send, std::span<const size_t> send_bytes, void* recv,
                                   std::span<const size_t> recv_bytes) {
  CASCADE_RETURN_IF_ERROR(Prepare());
  if (mode_ != Mode::kStaged) return comm_->AllToAll(send, send_bytes, recv, recv_bytes);
  const size_t out = std::accumulate(send_bytes.begin(), send_bytes.end(), size_t{0});
  const size_t in = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t{0});
  CASCADE_RETURN_IF_ERROR(Stage(in_, std::max<size_t>(out, 1)));
  CASCADE_RETURN_IF_ERROR(Stage(out_, std::max<size_t>(in, 1)));
  if (out > 0) CASCADE_RETURN_IF_ERROR(backend_->CopyOut(in_->data(), send, out));
  CASCADE_RETURN_IF_ERROR(comm_->AllToAll(in_->data(), send_bytes, out_->data(), recv_bytes));
  return in > 0 ? backend_->CopyIn(recv, out_->data(), in) : absl::OkStatus();
}

absl::Status BackendComm::Recv(void* buf, size_t bytes, int peer, uint64_t tag) {
  CASCADE_RETURN_IF_ERROR(Prepare());
  if (mode_ != Mode::kStaged) return comm_->Recv(buf, bytes, peer, tag);
  CASCADE_RETURN_IF_ERROR(Stage(out_, bytes));
  CASCADE_RETURN_IF_ERROR(comm_->Recv(out_->data(), bytes, peer, tag));
  return backend_->CopyIn(buf, out_->data(), bytes);
}

}  // namespace cascade::model
