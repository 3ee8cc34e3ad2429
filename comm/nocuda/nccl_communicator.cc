#include "comm/nccl_communicator.h"

namespace cascade::comm {

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::Create(const GroupOptions&, Rendezvous*, int) {
  return absl::UnimplementedError(
      "this binary was built without CUDA, so without NCCL (CASCADE_WITH_CUDA=OFF or no nvcc)");
}

bool NcclCommunicator::Available() { return false; }

}  // namespace cascade::comm
