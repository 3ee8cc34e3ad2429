// FP8 checkpoints: Hugging Face directories whose config.json carries a
// `quantization_config` with
//   quant_method "fp8" (DeepSeek-V3/R1, the official Qwen3 FP8 releases): `P.weight` in
//     F8_E4M3 [n_out, n_in] and `P.weight_scale_inv` (F32 or BF16) holding the multiplier
//     of each block of `weight_block_size` (rows x columns, default 128 x 128):
//     [ceil(n_out / rows), ceil(n_in / cols)]; without a block size, one multiplier for
//     the whole tensor;
//   quant_method "compressed-tensors" with float 8-bit weights (most Llama FP8 releases):
//     `P.weight` in F8_E4M3 and `P.weight_scale`, one per tensor ([] or [1]), per output
//     channel ([n_out] or [n_out, 1]) or per block (strategy "block", `block_structure`).
// Either way the value is e4m3(q) x scale. The source below shows each such pair as one
// tensor `P.weight` of dtype F8_E4M3_B128 (core/quant_blocks.h): every 128 inputs of a row
// carry the scale of the block they lie in, copied exactly (bf16 scales widen to f32
// exactly), the codes copied as they are; so the transformer, TP sharding and every
// backend treat it like any other weight. Tensors the checkpoint left unquantized (its
// `ignore` list, norms, often the LM head) pass through.
//
// Activations are not quantized (W8A16): `input_scale` tensors (static activation
// scales) are accepted and not used. The KV cache keeps its own dtype; calibrated KV
// scales (`self_attn.k_scale` / `v_scale`) pass through to an fp8_e4m3 cache
// (model/format/kv_cache_scales.h).
// Refused with a message: other float widths (F8_E5M2), integer compressed-tensors
// schemes, block widths that are not a multiple of 128, n_in not a multiple of 128.
// Thread-safe after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "model/format/weight_source.h"

namespace cascade::model {

struct Fp8Scheme {
  // Rows and columns of a scale block when the scales form a grid (0: as the scale
  // tensor's shape says: one per tensor or one per row).
  int64_t block_rows = 0, block_cols = 0;
};

// The scheme of config.json text `config_text` (`source` names it in messages): nullopt
// when its quantization is not FP8 (none, or another method, for the INT4 reader to
// judge); Unimplemented for an FP8 variant Cascade cannot run; InvalidArgument for a
// malformed object.
absl::StatusOr<std::optional<Fp8Scheme>> Fp8SchemeFromHfConfig(const std::string& config_text,
                                                               const std::string& source);

// Wraps `stored` (a checkpoint's safetensors tensors) so that every F8_E4M3 `P.weight`
// with its scale reads as `P.weight` of dtype F8_E4M3_B128. DataLoss when a scale is
// missing or its shape fits no scheme (naming the tensor); Unimplemented for an n_in that
// is not a multiple of 128.
absl::StatusOr<std::unique_ptr<WeightSource>> OpenFp8Checkpoint(std::unique_ptr<WeightSource> stored,
                                                                const Fp8Scheme& scheme);

}  // namespace cascade::model
