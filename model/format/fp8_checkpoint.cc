#include "model/format/fp8_checkpoint.h"

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "core/half.h"
#include "core/logging.h"
#include "core/quant_blocks.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/json_string.h"
#include "model/format/repacked_source.h"

namespace cascade::model {
namespace {

using Json = nlohmann::json;

constexpr int64_t kBlock = 128;  // Inputs per F8_E4M3_B128 block.

// A [rows, cols] block size: each a positive integer, the columns a multiple of 128.
absl::Status ReadBlock(const Json& v, const std::string& key, const std::string& source, Fp8Scheme* s) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() ||
      v[0].get<int64_t>() < 1 || v[1].get<int64_t>() < 1) {
    return absl::InvalidArgumentError(StrCat(source, ": quantization_config ", key, " must be two positive integers"));
  }
  s->block_rows = v[0].get<int64_t>();
  s->block_cols = v[1].get<int64_t>();
  if (s->block_cols % kBlock != 0) {
    return absl::UnimplementedError(StrCat(source, ": FP8 scale blocks ", s->block_rows, " x ", s->block_cols,
                                           " are not supported (Cascade's FP8 blocks want columns in "
                                           "multiples of 128)"));
  }
  return absl::OkStatus();
}

// quant_method "fp8": e4m3 weights, an optional weight_block_size.
absl::StatusOr<Fp8Scheme> FromFp8(const Json& q, const std::string& source) {
  Fp8Scheme s;
  const std::string fmt = JsonString(q, "fmt");
  if (!fmt.empty() && fmt != "e4m3") {
    return absl::UnimplementedError(StrCat(source, ": FP8 format '", fmt, "' is not supported (Cascade reads e4m3)"));
  }
  const auto it = q.find("weight_block_size");
  if (it != q.end() && !it->is_null()) CASCADE_RETURN_IF_ERROR(ReadBlock(*it, "weight_block_size", source, &s));
  return s;
}

// quant_method "compressed-tensors": every config group's weights float 8-bit, by tensor,
// channel or block (one block structure for all).
absl::StatusOr<Fp8Scheme> FromCompressedTensors(const Json& q, const std::string& source) {
  const auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty()) {
    return absl::InvalidArgumentError(StrCat(source, ": compressed-tensors quantization_config has no config_groups"));
  }
  Fp8Scheme s;
  for (const auto& [name, group] : groups->items()) {
    const auto w = group.find("weights");
    if (w == group.end() || !w->is_object()) {
      return absl::InvalidArgumentError(StrCat(source, ": config_groups.", name, " has no weights"));
    }
    const std::string type = JsonString(*w, "type"), strategy = JsonString(*w, "strategy");
    const auto bits = w->find("num_bits");
    if (type != "float" || bits == w->end() || !bits->is_number_integer() || bits->get<int64_t>() != 8) {
      return absl::UnimplementedError(StrCat(source, ": compressed-tensors weights of type '", type,
                                             "' are not supported (Cascade reads float 8-bit weights)"));
    }
    if (strategy == "block") {
      const auto b = w->find("block_structure");
      if (b == w->end())
        return absl::InvalidArgumentError(StrCat(source, ": config_groups.", name, ": no block_structure"));
      Fp8Scheme g;
      CASCADE_RETURN_IF_ERROR(ReadBlock(*b, "block_structure", source, &g));
      if (s.block_rows != 0 && (s.block_rows != g.block_rows || s.block_cols != g.block_cols)) {
        return absl::UnimplementedError(StrCat(source, ": config groups with different block structures"));
      }
      s = g;
    } else if (strategy != "tensor" && strategy != "channel") {
      return absl::UnimplementedError(StrCat(source, ": compressed-tensors strategy '", strategy,
                                             "' is not supported (Cascade reads tensor, channel and block)"));
    }
  }
  return s;
}

// One FP8 weight and the scales that go with it.
struct Fp8Tensor {
  std::string weight, scale;
  enum class Scales { kTensor, kChannel, kGrid } scales = Scales::kTensor;
  int64_t grid_cols = 0;  // Of the scale grid.
};

class Fp8Source final : public RepackedSource {
 public:
  Fp8Source(std::unique_ptr<WeightSource> stored, Fp8Scheme scheme)
      : RepackedSource(std::move(stored)), scheme_(scheme) {}

  absl::Status Init() {
    for (const TensorInfo& t : packed().tensors()) {
      if (t.dtype != DType::kF8_E4M3) continue;
      CASCADE_ASSIGN_OR_RETURN(Fp8Tensor f, Describe(t));
      TensorInfo info = t;
      info.dtype = DType::kF8_E4M3_B128;
      info.n_bytes = static_cast<uint64_t>(t.shape[0] * RowBytes(DType::kF8_E4M3_B128, t.shape[1]));
      const std::string base = t.name.substr(0, t.name.size() - std::string(".weight").size());
      AddVirtual(info, {t.name, f.scale, base + ".input_scale"});
      if (packed().FindTensor(base + ".input_scale") != nullptr) ++unused_input_scales_;
      tensors_.emplace(t.name, std::move(f));
    }
    // Said, not silent: the checkpoint's activation scales do not change what runs here.
    CASCADE_LOG(Info) << path() << ": " << tensors_.size()
                      << " FP8 weights read as f8_e4m3_b128 (scales exact); activations stay f32 (W8A16)"
                      << (unused_input_scales_ > 0 ? StrCat(", its ", unused_input_scales_,
                                                            " input_scale tensors (static FP8 activations) unused")
                                                   : std::string());
    return Finish();
  }

 private:
  // The scale of `t` beside it and how it is laid out.
  absl::StatusOr<Fp8Tensor> Describe(const TensorInfo& t) const {
    if (t.n_dims != 2 || !t.name.ends_with(".weight")) {
      return Bad(t.name, StrCat("an FP8 tensor must be a 2-D weight 'P.weight', is ", t.ShapeString()));
    }
    const int64_t n_out = t.shape[0], n_in = t.shape[1];
    if (n_in % kBlock != 0) {
      return absl::UnimplementedError(
          StrCat(path(), ": tensor '", t.name, "': ", n_in, " inputs are not a multiple of 128 (Cascade's FP8 block)"));
    }
    Fp8Tensor f;
    f.weight = t.name;
    const TensorInfo* s = nullptr;
    for (const char* suffix : {"_scale_inv", "_scale"}) {
      if ((s = packed().FindTensor(t.name + suffix)) != nullptr) {
        f.scale = t.name + suffix;
        break;
      }
    }
    if (s == nullptr) return Bad(t.name, "has no weight_scale_inv or weight_scale beside it");
    if (s->dtype != DType::kF32 && s->dtype != DType::kBF16) {
      return Bad(f.scale, StrCat("must be F32 or BF16, is ", DTypeName(s->dtype)));
    }
    const int64_t n = s->NumElements();
    const int64_t br = scheme_.block_rows, bc = scheme_.block_cols;
    if (br > 0 && s->n_dims == 2 && s->shape[0] == (n_out + br - 1) / br && s->shape[1] == (n_in + bc - 1) / bc) {
      f.scales = Fp8Tensor::Scales::kGrid;
      f.grid_cols = s->shape[1];
    } else if (n == 1) {
      f.scales = Fp8Tensor::Scales::kTensor;
    } else if (n == n_out && (s->n_dims == 1 || (s->n_dims == 2 && s->shape[1] == 1))) {
      f.scales = Fp8Tensor::Scales::kChannel;
    } else {
      return Bad(f.scale, StrCat(s->ShapeString(), " fits no FP8 scheme of weight ", t.ShapeString(),
                                 br > 0 ? StrCat(" (blocks of ", br, " x ", bc, ")") : std::string()));
    }
    return f;
  }

  absl::Status Repack(const TensorInfo& info, int64_t r0, int64_t r1, uint8_t* dst) const override {
    const Fp8Tensor& f = tensors_.at(info.name);
    const int64_t n_in = info.shape[1], n_blocks = n_in / kBlock;
    CASCADE_ASSIGN_OR_RETURN(TensorView codes, packed().ReadRows(f.weight, r0, r1));
    CASCADE_ASSIGN_OR_RETURN(TensorView scales, packed().Read(f.scale));
    const auto scale = [&](int64_t i) {
      const uint8_t* p = static_cast<const uint8_t*>(scales.data);
      if (scales.dtype == DType::kBF16) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        return Bf16ToF32(h);
      }
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    };
    auto* out = reinterpret_cast<BlockF8E4M3B128*>(dst);
    const auto* q = static_cast<const uint8_t*>(codes.data);
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t b = 0; b < n_blocks; ++b, ++out) {
        switch (f.scales) {
          case Fp8Tensor::Scales::kTensor: out->d = scale(0); break;
          case Fp8Tensor::Scales::kChannel: out->d = scale(r); break;
          case Fp8Tensor::Scales::kGrid:
            out->d = scale((r / scheme_.block_rows) * f.grid_cols + b * kBlock / scheme_.block_cols);
            break;
        }
        std::memcpy(out->qs, q + (r - r0) * n_in + b * kBlock, kBlock);
      }
    }
    packed().ReleasePages(codes);
    return absl::OkStatus();
  }

  Fp8Scheme scheme_;
  std::map<std::string, Fp8Tensor> tensors_;  // By weight name.
  int64_t unused_input_scales_ = 0;
};

}  // namespace

absl::StatusOr<std::optional<Fp8Scheme>> Fp8SchemeFromHfConfig(const std::string& config_text,
                                                               const std::string& source) {
  const Json config = Json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(StrCat(source, ": not a JSON object"));
  }
  const auto it = config.find("quantization_config");
  if (it == config.end() || !it->is_object()) return std::optional<Fp8Scheme>();
  const std::string method = JsonString(*it, "quant_method");
  if (method == "fp8") {
    CASCADE_ASSIGN_OR_RETURN(Fp8Scheme s, FromFp8(*it, source));
    return std::optional<Fp8Scheme>(s);
  }
  if (method == "compressed-tensors") {
    CASCADE_ASSIGN_OR_RETURN(Fp8Scheme s, FromCompressedTensors(*it, source));
    return std::optional<Fp8Scheme>(s);
  }
  return std::optional<Fp8Scheme>();
}

absl::StatusOr<std::unique_ptr<WeightSource>> OpenFp8Checkpoint(std::unique_ptr<WeightSource> stored,
                                                                const Fp8Scheme& scheme) {
  auto source = std::make_unique<Fp8Source>(std::move(stored), scheme);
  CASCADE_RETURN_IF_ERROR(source->Init());
  return std::unique_ptr<WeightSource>(std::move(source));
}

}  // namespace cascade::model
