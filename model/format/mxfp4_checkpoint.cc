#include "model/format/mxfp4_checkpoint.h"

#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/logging.h"
#include "core/quant_blocks.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/json_string.h"
#include "model/format/repacked_source.h"

namespace cascade::model {
namespace {

using Json = nlohmann::json;

constexpr int64_t kGroup = 32;  // Inputs per E8M0 exponent (OCP MX).

// `spec` (a weight spec of global_quant_config) is MXFP4: fp4, per group of 32, E8M0.
absl::Status CheckWeightSpec(const Json& spec, const std::string& source) {
  const std::string key = "quantization_config.global_quant_config.weight";
  if (spec.is_array()) {
    return absl::UnimplementedError(StrCat(source, ": ", key, " is a list of specs (Cascade reads one MXFP4 spec)"));
  }
  if (!spec.is_object()) return absl::InvalidArgumentError(StrCat(source, ": ", key, " must be an object"));
  const auto group = spec.find("group_size");
  const bool mxfp4 = JsonString(spec, "dtype") == "fp4" && JsonString(spec, "qscheme") == "per_group" &&
                     group != spec.end() && group->is_number_integer() && group->get<int64_t>() == kGroup &&
                     JsonString(spec, "scale_format") == "e8m0";
  if (!mxfp4) {
    return absl::UnimplementedError(StrCat(source, ": ", key, " ", spec.dump(),
                                           " is not supported (Cascade reads Quark's MXFP4: dtype fp4, qscheme "
                                           "per_group, group_size 32, scale_format e8m0)"));
  }
  return absl::OkStatus();
}

class QuarkMxfp4Source final : public RepackedSource {
 public:
  explicit QuarkMxfp4Source(std::unique_ptr<WeightSource> stored) : RepackedSource(std::move(stored)) {}

  absl::Status Init() {
    int64_t n = 0;
    for (const TensorInfo& t : packed().tensors()) {
      if (t.dtype != DType::kU8 || !t.name.ends_with(".weight")) continue;
      const std::string scale = t.name + "_scale";
      const TensorInfo* s = packed().FindTensor(scale);
      if (s == nullptr) return Bad(t.name, StrCat("is U8 (packed FP4) without ", scale, " beside it"));
      const bool shapes = t.n_dims == 2 && s->n_dims == 2 && s->dtype == DType::kU8 && s->shape[0] == t.shape[0] &&
                          s->shape[1] * kGroup == t.shape[1] * 2;
      if (!shapes) {
        return Bad(t.name, StrCat(t.ShapeString(), " (two codes a byte) against ", scale, " ", s->ShapeString(),
                                  " (U8, one exponent per 32 inputs)"));
      }
      TensorInfo info = t;
      info.dtype = DType::kMXFP4;
      info.shape[1] = t.shape[1] * 2;
      info.n_bytes = static_cast<uint64_t>(t.shape[0] * RowBytes(DType::kMXFP4, info.shape[1]));
      AddVirtual(info, {t.name, scale});
      ++n;
    }
    // Said, not silent: FP4 activations, if the export asked for them, are not emulated.
    CASCADE_LOG(Info) << path() << ": " << n
                      << " Quark MXFP4 weights read as GGUF mxfp4 blocks (codes and exponents exact); activations "
                         "stay the backend's (W4A16)";
    return Finish();
  }

 private:
  absl::Status Repack(const TensorInfo& info, int64_t r0, int64_t r1, uint8_t* dst) const override {
    CASCADE_ASSIGN_OR_RETURN(const TensorView codes, packed().Read(info.name));
    CASCADE_ASSIGN_OR_RETURN(const TensorView scales, packed().Read(info.name + "_scale"));
    const int64_t groups = info.shape[1] / kGroup;
    const auto* c = static_cast<const uint8_t*>(codes.data);
    const auto* s = static_cast<const uint8_t*>(scales.data);
    const int64_t block = BlockBytes(DType::kMXFP4);
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t g = 0; g < groups; ++g, dst += block) {
        OcpPairsToMxfp4Block(c + (r * groups + g) * (kGroup / 2), s[r * groups + g], dst);
      }
    }
    return absl::OkStatus();
  }
};

}  // namespace

void OcpPairsToMxfp4Block(const uint8_t* pairs, uint8_t e8m0, uint8_t* block) {
  const auto code = [&](int k) { return k % 2 == 0 ? pairs[k / 2] & 0x0f : pairs[k / 2] >> 4; };
  block[0] = e8m0;
  for (int j = 0; j < 16; ++j) block[1 + j] = static_cast<uint8_t>(code(j) | code(j + 16) << 4);
}

absl::StatusOr<bool> IsQuarkMxfp4(const std::string& config_text, const std::string& source) {
  const Json config = Json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(StrCat(source, ": not a JSON object"));
  }
  const auto q = config.find("quantization_config");
  if (q == config.end() || !q->is_object() || JsonString(*q, "quant_method") != "quark") return false;
  for (const char* per_layer : {"layer_quant_config", "layer_type_quant_config"}) {
    const auto it = q->find(per_layer);
    if (it != q->end() && !it->is_null() && !it->empty()) {
      return absl::UnimplementedError(StrCat(source, ": quantization_config.", per_layer,
                                             " is not supported (Cascade reads one global MXFP4 scheme)"));
    }
  }
  const auto global = q->find("global_quant_config");
  if (global == q->end() || !global->is_object() || !global->contains("weight")) {
    return absl::InvalidArgumentError(StrCat(source, ": quantization_config.global_quant_config.weight is missing"));
  }
  CASCADE_RETURN_IF_ERROR(CheckWeightSpec(global->at("weight"), source));
  return true;
}

absl::StatusOr<std::unique_ptr<WeightSource>> OpenQuarkMxfp4Checkpoint(std::unique_ptr<WeightSource> stored) {
  auto source = std::make_unique<QuarkMxfp4Source>(std::move(stored));
  CASCADE_RETURN_IF_ERROR(source->Init());
  return std::unique_ptr<WeightSource>(std::move(source));
}

}  // namespace cascade::model
