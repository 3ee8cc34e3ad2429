// One step's backend ops run as a CUDA graph (kernels/cuda_backend.h, BeginGraphStep):
// decode steps repeat the same ops over the same buffers, so after the first step of a
// shape the whole forward is one launch instead of one per op (hundreds a step), and the
// host no longer paces the GPU. Steps whose shape has no graph yet are captured; steps
// that cannot be (a buffer had to grow) run eagerly and are captured the next time.
//
// Off by default until measured on a GPU (`scheduler.cuda_graphs`, gpu_model_bench
// --graphs). Only dense models without a TP group take it (MoE routing reads the router on
// the host mid-step; collectives of a TP group over host memory cannot be captured).
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "kernels/ops.h"
#include "model/transformer.h"

namespace cascade::model {

// Rows per sequence and per step up to which a step counts as decode (one token, or one
// plus up to 7 drafts to verify) and is run as a graph; prefill chunks run eagerly.
constexpr int64_t kMaxGraphRowsPerSeq = 8;
constexpr int64_t kMaxGraphRows = 512;

// Whether `batch` is decode-shaped as above.
bool GraphableBatch(const ForwardBatch& batch);

// Runs `ops` (the step's ops) as a CUDA graph when `backend` is a CudaBackend, or once as
// is on any other backend. `ops` may be called up to three times (a dry pass, a capture,
// an eager run), so the host state it changes must come out the same each time. Returns
// once the step's results are ready (CopyOut's bytes included); an error of `ops` as is.
absl::Status RunGraphStep(kernels::Backend& backend, const std::function<absl::Status()>& ops);

}  // namespace cascade::model
