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
// first read (RepackedSource). OpenAI's own release (quantization_config quant_method
// mxfp4) stores the experts as MXFP4 codes and scales, output-major:
//   mlp.experts.gate_up_proj_blocks [E, 2I, H/32, 16] (U8: two E2M1 codes a byte, the even
//   element low) and _scales [E, 2I, H/32] (U8: E8M0), rows 2r gate and 2r + 1 up
//   -> mlp.experts.e.{gate,up}_proj.weight [I, H] in GGUF's MXFP4 blocks (DType::kMXFP4);
//   mlp.experts.down_proj_blocks [E, H, I/32, 16] and _scales -> down_proj.weight [H, I];
// their biases as above. The codes and exponents are kept exactly, only reordered.
// Thread-safe after construction.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "model/format/weight_source.h"

namespace cascade::model {

// Whether `stored` holds gpt-oss's merged experts (some `*.mlp.experts.gate_up_proj`, or
// its `_blocks`).
bool HasGptOssExperts(const WeightSource& stored);

// Wraps `stored` as above. DataLoss naming the tensor when a merged tensor's shape does not
// match its partners' or a bias is missing.
absl::StatusOr<std::unique_ptr<WeightSource>> OpenGptOssExperts(std::unique_ptr<WeightSource> stored);

}  // namespace cascade::model
