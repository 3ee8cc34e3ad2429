// The CUDA graphs of CudaBackend's graph steps (kernels/cuda_backend.h, BeginGraphStep):
// the pass a step is in, the signature its ops hash their arguments into, the capture, and
// the captured graphs by signature (at most CudaBackend::kMaxGraphs, least recently used
// dropped). The backend's ops ask `dry()` before launching anything and `Sign` what a
// launch depends on.
//
// Thread-safety: single owner (the backend's).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <unordered_map>
#include <unordered_set>

#include "absl/status/statusor.h"
#include "kernels/cuda_backend.h"

namespace cascade::kernels::cuda {

class StepGraphs {
 public:
  explicit StepGraphs(cudaStream_t stream) : stream_(stream) {}
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Opens a step in `pass` (a capture starts on the stream). REQUIRES: no step open.
  absl::Status Begin(GraphPass pass);
  // Closes it: launches the signature's graph (dry), instantiates and launches the
  // captured one (capture), or nothing (eager); whether the step ran (see cuda_backend.h).
  absl::StatusOr<bool> End();
  // Closes the step launching nothing (its ops failed).
  void Abort();

  bool open() const { return open_; }
  // No launch may happen now: a dry pass, or a capture given up.
  bool dry() const { return open_ && (pass_ == GraphPass::kDry || abandoned_); }
  bool capturing() const { return open_ && pass_ == GraphPass::kCapture && !abandoned_; }
  // Inside a dry or capture pass: ops run at End, if at all.
  bool recording() const { return open_ && pass_ != GraphPass::kEager; }
  // Hashes what a launch depends on into the step's signature.
  void Sign(std::initializer_list<uint64_t> values);
  // Gives up the capture (something in the step cannot be captured): ends it, and the
  // step's remaining ops launch nothing; End then answers false.
  void Abandon();

  int64_t captured() const { return captured_; }
  int64_t launched() const { return launched_; }

 private:
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    uint64_t last_used = 0;
  };
  absl::Status Launch(Graph& g);
  void EvictOne();

  cudaStream_t stream_;
  bool open_ = false;
  GraphPass pass_ = GraphPass::kEager;
  bool abandoned_ = false;
  uint64_t signature_ = 0;
  std::unordered_map<uint64_t, Graph> graphs_;
  // Signatures whose capture CUDA refused: their capture pass is skipped. The signature
  // of a capture pass is the dry pass's before it (kept in signature_ until Begin).
  std::unordered_set<uint64_t> uncapturable_;
  uint64_t clock_ = 0;
  int64_t captured_ = 0, launched_ = 0;
};

// The bits of a pointer or a float, for Sign.
inline uint64_t Bits(const void* p) { return reinterpret_cast<uintptr_t>(p); }
uint64_t Bits(float f);

}  // namespace cascade::kernels::cuda
