#include "model/graph_step.h"

#include "core/status.h"
#include "kernels/cuda_backend.h"

namespace cascade::model {

bool GraphableBatch(const ForwardBatch& batch) {
  if (static_cast<int64_t>(batch.tokens.size()) > kMaxGraphRows) return false;
  for (const kernels::AttentionSeq& s : batch.seqs) {
    if (s.n_new > kMaxGraphRowsPerSeq) return false;
  }
  return true;
}

absl::Status RunGraphStep(kernels::Backend& backend, const std::function<absl::Status()>& ops) {
  auto* gpu = dynamic_cast<kernels::CudaBackend*>(&backend);
  if (gpu == nullptr) return ops();
  for (const kernels::GraphPass pass :
       {kernels::GraphPass::kDry, kernels::GraphPass::kCapture, kernels::GraphPass::kEager}) {
    CASCADE_RETURN_IF_ERROR(gpu->BeginGraphStep(pass));
    if (absl::Status st = ops(); !st.ok()) {
      gpu->AbortGraphStep();
      return st;
    }
    CASCADE_ASSIGN_OR_RETURN(const bool ran, gpu->EndGraphStep());
    if (ran) return gpu->Synchronize();
  }
  return absl::InternalError("a graph step's eager pass did not run");
}

}  // namespace cascade::model
