// gpt-oss's experts as Hugging Face checkpoints in BF16 store them (transformers'
// GptOssExperts parameters: one merged tensor per layer, input-major, gate and up
// interleaved) shown as one tensor per expert, in the names and [out, in] layout of the
// other MoE families here (model/format/arch/moe.h), so the MoE block loads them alike:
//   mlp.experts.gate_up_proj      [E, H, 2I]  -> mlp.experts.e.gate_proj.weight [I, H]
//                                                (columns 0, 2, 4, ... of expert e),
//                                                mlp.experts.e.up_proj.weight [I, H] (1, 3, ...)
//   mlp.experts.gate_up_proj_bias [E, 2I]     -> mlp.experts.e.{gate,up}_proj.bias [1, I]
//   mlp.experts.down_proj         [E, I, H]   -> mlp.experts.e.down_proj.weight [H, I]
//   mlp.experts.down_proj_bias    [E, H]      -> mlp.experts.e.down_proj.bias [1, H]
// Values are copied exactly, in the stored dtype (BF16, F16 or F32), expert by expert on
// first read (RepackedSource). OpenAI's MXFP4 release (`*_blocks` / `*_scales`) is not this
// layout and is refused by its quantization_config before it gets here.
// Thread-safe after construction.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "model/format/weight_source.h"

namespace cascade::model {

// Whether `stored` holds gpt-oss's merged experts (some `*.mlp.experts.gate_up_proj`).
bool HasGptOssExperts(const WeightSource& stored);

// Wraps `stored` as above. DataLoss naming the tensor when a merged tensor's shape does not
// match its partners' or a bias is missing.
absl::StatusOr<std::unique_ptr<WeightSource>> OpenGptOssExperts(std::unique_ptr<WeightSource> stored);

}  // namespace cascade::model
