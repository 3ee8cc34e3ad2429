#include "comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <string>
#include <thread>

#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::comm {
namespace {

// Check macros: a failing CUDA/NCCL call becomes a Status with file, line and the call.
#define CASCADE_CUDA_STATUS(call)                                                                                     \
  do {                                                                                                                \
    const cudaError_t e_ = (call);                                                                                    \
    if (e_ != cudaSuccess) {                                                                                          \
      return absl::UnavailableError(                                                                                  \
          ::cascade::StrCat(__FILE__, ":", __LINE__, ": ", #call, ": ", cudaGetErrorString(e_), " (", int(e_), ")")); \
    }                                                                                                                 \
  } while (0)
#define CASCADE_NCCL_STATUS(call)                                                                 \
  do {                                                                                            \
    const ncclResult_t r_ = (call);                                                               \
    if (r_ != ncclSuccess && r_ != ncclInProgress) {                                              \
      return absl::UnavailableError(                                                              \
          ::cascade::StrCat(__FILE__, ":", __LINE__, ": ", #call, ": ", ncclGetErrorString(r_))); \
    }                                                                                             \
  } while (0)

class NcclComm final : public Communicator {
 public:
  NcclComm(ncclComm_t comm, cudaStream_t stream, int device, int rank, int size, int64_t timeout_ms)
      : comm_(comm), stream_(stream), device_(device), rank_(rank), size_(size), timeout_ms_(timeout_ms) {}
  ~NcclComm() override {
    if (!broken_.ok()) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool device_memory() const override { return true; }

  absl::Status Send(const void* buf, size_t bytes, int peer, uint64_t) override {
    CASCADE_RETURN_IF_ERROR(CheckPeer(peer));
    cudaSetDevice(device_);
    CASCADE_NCCL_STATUS(ncclSend(buf, bytes, ncclUint8, peer, comm_, stream_));
    return Wait("send");
  }
  absl::Status Recv(void* buf, size_t bytes, int peer, uint64_t) override {
    CASCADE_RETURN_IF_ERROR(CheckPeer(peer));
    cudaSetDevice(device_);
    CASCADE_NCCL_STATUS(ncclRecv(buf, bytes, ncclUint8, peer, comm_, stream_));
    return Wait("recv");
  }
  absl::Status AllReduceSum(float* data, size_t n) override {
    CASCADE_RETURN_IF_ERROR(broken_);
    cudaSetDevice(device_);
    CASCADE_NCCL_STATUS(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream_));
    return Wait("all-reduce");
  }
  absl::Status AllGather(const void* in, size_t bytes_per_rank, void* out) override {
    CASCADE_RETURN_IF_ERROR(broken_);
    cudaSetDevice(device_);
    CASCADE_NCCL_STATUS(ncclAllGather(in, out, bytes_per_rank, ncclUint8, comm_, stream_));
    return Wait("all-gather");
  }
  absl::Status Broadcast(void* buf, size_t bytes, int root) override {
    CASCADE_RETURN_IF_ERROR(broken_);
    cudaSetDevice(device_);
    CASCADE_NCCL_STATUS(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream_));
    return Wait("broadcast");
  }
  absl::Status AllToAll(const void* send, std::span<const size_t> send_bytes, void* recv,
                        std::span<const size_t> recv_bytes) override {
    CASCADE_RETURN_IF_ERROR(broken_);
    if (static_cast<int>(send_bytes.size()) != size_ || static_cast<int>(recv_bytes.size()) != size_) {
      return absl::InvalidArgumentError(StrCat("nccl all-to-all: ", send_bytes.size(), " send and ", recv_bytes.size(),
                                               " receive sizes for ", size_, " ranks"));
    }
    cudaSetDevice(device_);
    const auto* out = static_cast<const char*>(send);
    auto* in = static_cast<char*>(recv);
    size_t send_at = 0, recv_at = 0;
    // One group of point-to-point calls (the own block included): NCCL runs them at once.
    CASCADE_NCCL_STATUS(ncclGroupStart());
    for (int q = 0; q < size_; ++q) {
      if (send_bytes[q] > 0) CASCADE_NCCL_STATUS(ncclSend(out + send_at, send_bytes[q], ncclUint8, q, comm_, stream_));
      if (recv_bytes[q] > 0) CASCADE_NCCL_STATUS(ncclRecv(in + recv_at, recv_bytes[q], ncclUint8, q, comm_, stream_));
      send_at += send_bytes[q];
      recv_at += recv_bytes[q];
    }
    CASCADE_NCCL_STATUS(ncclGroupEnd());
    return Wait("all-to-all");
  }
  absl::Status Barrier() override {
    CASCADE_RETURN_IF_ERROR(broken_);
    cudaSetDevice(device_);
    if (barrier_ == nullptr) CASCADE_CUDA_STATUS(cudaMalloc(&barrier_, sizeof(float)));
    CASCADE_NCCL_STATUS(ncclAllReduce(barrier_, barrier_, 1, ncclFloat32, ncclSum, comm_, stream_));
    return Wait("barrier");
  }

 private:
  absl::Status CheckPeer(int peer) const {
    CASCADE_RETURN_IF_ERROR(broken_);
    if (peer < 0 || peer >= size_ || peer == rank_) {
      return absl::InvalidArgumentError(StrCat("nccl: peer ", peer, " is not another rank of ", size_));
    }
    return absl::OkStatus();
  }
  // Polls NCCL's async state, then the stream; aborts past the timeout. The communicator
  // is non-blocking: a call may return before its work is even on the stream
  // (ncclInProgress), so the stream counts only once NCCL reports ncclSuccess.
  absl::Status Wait(const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
    while (true) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        return Break(StrCat("nccl ", what, ": ", ncclGetErrorString(async)));
      }
      if (async == ncclSuccess) {
        const cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaSuccess) return absl::OkStatus();
        if (e != cudaErrorNotReady) return Break(StrCat("nccl ", what, ": ", cudaGetErrorString(e)));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return Break(StrCat("nccl ", what, " did not finish within ", timeout_ms_, " ms (a peer is gone?)"));
      }
      std::this_thread::yield();
    }
  }
  absl::Status Break(const std::string& why) {
    broken_ = absl::UnavailableError(why);
    return broken_;
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  int device_;  // Made current before every call: callers may come from any thread.
  int rank_, size_;
  int64_t timeout_ms_;
  float* barrier_ = nullptr;
  absl::Status broken_;
};

absl::StatusOr<std::unique_ptr<Communicator>> CreateImpl(const GroupOptions& g, Rendezvous* rendezvous, int device) {
  if (g.size < 1 || g.rank < 0 || g.rank >= g.size || rendezvous == nullptr) {
    return absl::InvalidArgumentError(StrCat("nccl: bad group ", g.group, " rank ", g.rank, " of ", g.size));
  }
  int count = 0;  // cudaGetDeviceCount leaves it untouched on error 35 (no driver).
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0 || device < 0 || device >= count) {
    return absl::UnavailableError(StrCat("nccl: no CUDA device ", device, " (",
                                         e == cudaSuccess ? "found " : cudaGetErrorString(e),
                                         e == cudaSuccess ? std::to_string(count) + " devices" : "", ")"));
  }
  CASCADE_CUDA_STATUS(cudaSetDevice(device));
  ncclUniqueId id;
  const std::string key = StrCat(g.group, "/nccl/id");
  if (g.rank == 0) {
    CASCADE_NCCL_STATUS(ncclGetUniqueId(&id));
    CASCADE_RETURN_IF_ERROR(rendezvous->Put(key, std::string_view(reinterpret_cast<const char*>(&id), sizeof(id))));
  } else {
    CASCADE_ASSIGN_OR_RETURN(const std::string v, rendezvous->Wait(key, g.timeout_ms));
    if (v.size() != sizeof(id))
      return absl::DataLossError(StrCat("nccl: rendezvous key ", key, " has ", v.size(), " bytes"));
    std::memcpy(&id, v.data(), sizeof(id));
  }
  // Non-blocking, so a rank that never joins (dead, or its group misconfigured) ends in
  // DeadlineExceeded after the group's timeout instead of a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  CASCADE_NCCL_STATUS(ncclCommInitRankConfig(&comm, g.size, id, g.rank, &config));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(g.timeout_ms);
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    ncclCommGetAsyncError(comm, &state);
    if (state == ncclInProgress && std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(comm);
      return absl::DeadlineExceededError(StrCat("nccl: group ", g.group, ": rank ", g.rank, " of ", g.size,
                                                ": not every rank joined within ", g.timeout_ms, " ms"));
    }
    std::this_thread::yield();
  }
  if (state != ncclSuccess) {
    ncclCommAbort(comm);
    return absl::UnavailableError(StrCat("nccl: group ", g.group, ": init failed: ", ncclGetErrorString(state)));
  }
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    ncclCommDestroy(comm);
    return absl::UnavailableError("nccl: cannot create a CUDA stream");
  }
  return std::unique_ptr<Communicator>(new NcclComm(comm, stream, device, g.rank, g.size, g.timeout_ms));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::Create(const GroupOptions& group,
                                                                       Rendezvous* rendezvous, int device) {
  return CreateImpl(group, rendezvous, device);
}

bool NcclCommunicator::Available() { return true; }

}  // namespace cascade::comm
