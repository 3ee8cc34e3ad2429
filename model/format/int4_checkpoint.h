// GPTQ and AWQ 4-bit checkpoints: Hugging Face directories whose config.json carries a
// `quantization_config` with quant_method "gptq" or "awq". Each quantized linear layer
// stores `P.qweight`, `P.qzeros` and `P.scales` (GPTQ also `P.g_idx`); the source below
// shows them as one ordinary tensor `P.weight` [n_out, n_in] of dtype I4_G128 (see
// core/quant_blocks.h), so the transformer, TP sharding and every backend treat it
// like any other weight. The repack is exact: scales and zero points are copied, each
// group's 32-bit words keep GPTQ's nibble order, nothing is re-rounded.
//
// Layouts (int32 words of 8 nibbles, nibble k = bits [4 k, 4 k + 4)):
//   GPTQ qweight [n_in / 8, n_out]: word (r, o) holds inputs 8 r .. 8 r + 7 of output o.
//        qzeros [n_groups, n_out / 8]: nibble k of word (g, c) is output 8 c + k's zero,
//        stored minus one unless checkpoint_format is "gptq_v2".
//   AWQ  qweight [n_in, n_out / 8]: word (i, c) holds input i of outputs 8 c .. 8 c + 7,
//        output 8 c + j in nibble kAwqNibble[j] = {0, 4, 1, 5, 2, 6, 3, 7}[j] (AutoAWQ's
//        interleaved "gemm" packing); qzeros [n_groups, n_out / 8] packed the same way.
//   Both: scales F16 [n_groups, n_out]; value = scale * (q - zero).
//
// Groups: 128 inputs, a multiple of 128 (each 128-block repeats its group's scale and
// zero), or -1 (one group per output row). Act-order GPTQ (desc_act: a g_idx that is not
// i / group): the inputs are reordered by group (stably) so that each group is contiguous,
// and the order is published as `P.input_order` (I32 [1, n_in]): the weight multiplies the
// activations taken in that order (model/layers/linear.h gathers them). Other packings
// (AWQ gemv/exllama/marlin) are refused with a message.
// Thread-safe: rows are repacked on first read under a lock and cached until released
// (WeightSource::ReleasePages) or the source is destroyed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "model/format/weight_source.h"

namespace cascade::model {

struct Int4Scheme {
  enum class Method { kGptq, kAwq };
  Method method = Method::kGptq;
  int64_t group_size = 128;  // -1: one group spans the whole input dimension.
  int zero_offset = 0;       // Added to stored zeros (1 for GPTQ's v1 checkpoint format).
};

// The scheme of config.json text `config_text` (`source` names it in messages): nullopt
// for a checkpoint without `quantization_config`; Unimplemented for a quantization Cascade
// cannot run (another method, bits != 4, a group size that is not -1 or a multiple of 128,
// an AWQ packing other than "gemm", AWQ without zero points); InvalidArgument for a
// malformed object.
absl::StatusOr<std::optional<Int4Scheme>> Int4SchemeFromHfConfig(const std::string& config_text,
                                                                 const std::string& source);

// Wraps `packed` (a checkpoint's safetensors tensors) so that every `P.qweight` triple
// reads as `P.weight` of dtype I4_G128; other tensors pass through. DataLoss when a
// triple is incomplete or its shapes or dtypes disagree (naming the tensor);
// Unimplemented for act-order groups of unequal sizes or an n_in that is not a multiple
// of 128.
absl::StatusOr<std::unique_ptr<WeightSource>> OpenInt4Checkpoint(std::unique_ptr<WeightSource> packed,
                                                                 const Int4Scheme& scheme);

}  // namespace cascade::model
