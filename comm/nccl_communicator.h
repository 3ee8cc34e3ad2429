// comm::Communicator over NCCL for buffers in GPU memory (the TP collectives and stage
// hand-off of CUDA workers). Bootstrapped like UCX: rank 0 publishes the NCCL unique id
// under "<group>/nccl/id" in the Rendezvous, the others wait for it. Built with the CUDA
// backend (comm/cuda/); without it, Create returns Unimplemented (comm/nocuda/).
//
// Every buffer passed to the Communicator methods is device memory on `device`. NCCL has
// no tags: messages between a pair of ranks match in call order, so `tag` is ignored.
// Each call enqueues on the communicator's stream and waits for it, polling
// ncclCommGetAsyncError; past `timeout_ms` the communicator is aborted and the call (and
// every later one) returns Unavailable instead of hanging. Creation is bounded the same
// way: the communicator is non-blocking, and a rank that never joins makes Create return
// DeadlineExceeded after `timeout_ms`. Any thread may call (each call makes `device`
// current first), one at a time.
// Thread-safety: single owner (the device thread).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace cascade::comm {

class NcclCommunicator {
 public:
  // `device` is the CUDA device index of this rank. Unimplemented without CUDA;
  // Unavailable when there is no GPU or NCCL fails to initialise (the reason named).
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(const GroupOptions& group, Rendezvous* rendezvous,
                                                              int device);
  // True when this binary has the NCCL communicator.
  static bool Available();
};

}  // namespace cascade::comm
