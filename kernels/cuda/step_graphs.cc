#include "kernels/cuda/step_graphs.h"

#include <cstring>

#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::kernels::cuda {
namespace {

constexpr uint64_t kSeed = 0xcbf29ce484222325ull;  // FNV-1a's offset basis.

absl::Status Error(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(StrCat(what, ": CUDA error ", static_cast<int>(err), " (", cudaGetErrorString(err), ")"));
}

}  // namespace

uint64_t Bits(float f) {
  uint32_t b = 0;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

StepGraphs::~StepGraphs() {
  if (capturing()) Abandon();
  for (auto& [sig, g] : graphs_) cudaGraphExecDestroy(g.exec);
}

absl::Status StepGraphs::Begin(GraphPass pass) {
  if (open_) return absl::FailedPreconditionError("a graph step is already open");
  open_ = true;
  pass_ = pass;
  abandoned_ = false;
  if (pass == GraphPass::kCapture && uncapturable_.contains(signature_)) {
    abandoned_ = true;  // CUDA refused this step's capture before: straight to eager.
    return absl::OkStatus();
  }
  signature_ = kSeed;
  if (pass != GraphPass::kCapture) return absl::OkStatus();
  // Thread-local: only this thread's calls that could not be captured are refused.
  const absl::Status s = Error(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "begin capture");
  if (!s.ok()) open_ = false;
  return s;
}

void StepGraphs::Sign(std::initializer_list<uint64_t> values) {
  if (!open_ || pass_ == GraphPass::kEager) return;
  for (uint64_t v : values) {
    // FNV-1a over the value's 8 bytes, one multiply per value: enough to tell shapes and
    // buffers apart (a collision needs equal lengths and a 64-bit coincidence).
    signature_ = (signature_ ^ v) * 0x100000001b3ull;
    signature_ ^= signature_ >> 29;
  }
}

void StepGraphs::Abandon() {
  if (!capturing()) return;
  abandoned_ = true;
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(stream_, &g);
  if (g != nullptr) cudaGraphDestroy(g);
  cudaGetLastError();  // The capture's own error, if any, is not the step's.
}

void StepGraphs::Abort() {
  Abandon();
  open_ = false;
}

absl::Status StepGraphs::Launch(Graph& g) {
  g.last_used = ++clock_;
  ++launched_;
  return Error(cudaGraphLaunch(g.exec, stream_), "graph launch");
}

void StepGraphs::EvictOne() {
  auto oldest = graphs_.begin();
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
    if (it->second.last_used < oldest->second.last_used) oldest = it;
  }
  cudaGraphExecDestroy(oldest->second.exec);
  graphs_.erase(oldest);
}

absl::StatusOr<bool> StepGraphs::End() {
  if (!open_) return absl::FailedPreconditionError("no graph step is open");
  open_ = false;
  switch (pass_) {
    case GraphPass::kEager: return true;
    case GraphPass::kDry: {
      const auto it = graphs_.find(signature_);
      if (it == graphs_.end()) return false;
      CASCADE_RETURN_IF_ERROR(Launch(it->second));
      return true;
    }
    case GraphPass::kCapture: {
      if (abandoned_) return false;
      cudaGraph_t graph = nullptr;
      cudaError_t err = cudaStreamEndCapture(stream_, &graph);
      Graph g;
      if (err == cudaSuccess) err = cudaGraphInstantiate(&g.exec, graph, 0);
      if (graph != nullptr) cudaGraphDestroy(graph);
      if (err != cudaSuccess) {
        // CUDA invalidated the capture (an op it cannot record): this shape runs eagerly
        // from now on, and the step now.
        cudaGetLastError();
        uncapturable_.insert(signature_);
        return false;
      }
      if (const auto it = graphs_.find(signature_); it != graphs_.end()) {
        cudaGraphExecDestroy(it->second.exec);  // A recapture of the same signature.
        graphs_.erase(it);
      }
      if (static_cast<int>(graphs_.size()) >= CudaBackend::kMaxGraphs) EvictOne();
      ++captured_;
      Graph& stored = (graphs_[signature_] = g);
      CASCADE_RETURN_IF_ERROR(Launch(stored));
      return true;
    }
  }
  return absl::InternalError("unknown graph pass");
}

}  // namespace cascade::kernels::cuda
