// MXFP4 checkpoints from AMD Quark (config.json `quantization_config.quant_method: quark`,
// `global_quant_config.weight`: dtype fp4, qscheme per_group, group_size 32, scale_format
// e8m0), as vLLM and SGLang read them: `P.weight` in U8 [n_out, n_in / 2], two E2M1 codes a
// byte (element 2j in the low nibble, 2j + 1 in the high), and `P.weight_scale` in U8
// [n_out, n_in / 32], one E8M0 exponent per 32 inputs (the group's values are the E2M1
// values times 2^(e - 127)). The source below shows each such pair as one tensor
// `P.weight` of GGUF's MXFP4 blocks (DType::kMXFP4: the same exponent byte, then the 32
// codes with element j low and j + 16 high), so the transformer, TP sharding and every
// backend take it like the GGUF type. Codes and exponents are kept exactly, only
// reordered. Tensors the export left unquantized (its `exclude` list: the LM head,
// often the routers) pass through.
//
// Activations are not quantized: a checkpoint made for FP4 activations (`input_tensors`
// fp4, dynamic) runs with the backend's activations (W4A16), and the load log says so.
// Refused with a message naming the key: other weight dtypes or group sizes, per-layer
// schemes (`layer_quant_config`, `layer_type_quant_config`), lists of weight specs.
// Thread-safe after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/format/weight_source.h"

namespace cascade::model {

// Whether config.json text `config_text` (`source` names it in messages) declares a Quark
// MXFP4 checkpoint: false when its quantization is not Quark's; Unimplemented for a Quark
// scheme Cascade cannot run; InvalidArgument for a malformed object.
absl::StatusOr<bool> IsQuarkMxfp4(const std::string& config_text, const std::string& source);

// Wraps `stored` so that every U8 `P.weight` with its `P.weight_scale` reads as `P.weight`
// of dtype MXFP4. DataLoss naming the tensor when a scale is missing or the shapes
// disagree.
absl::StatusOr<std::unique_ptr<WeightSource>> OpenQuarkMxfp4Checkpoint(std::unique_ptr<WeightSource> stored);

// One 32-element group from OCP's pair packing (16 bytes: elements 2j low, 2j + 1 high)
// and its E8M0 exponent into GGUF's MXFP4 block (17 bytes: the exponent, then elements j
// low and j + 16 high). GGUF's doubled code values times 2^(e - 128) equal OCP's times
// 2^(e - 127), so the exponent byte is copied as it is. Used by both MXFP4 readers.
void OcpPairsToMxfp4Block(const uint8_t* pairs, uint8_t e8m0, uint8_t* block);

}  // namespace cascade::model
