#include "model/format/gpt_oss_experts.h"

#include <cstring>
#include <map>
#include <string>

#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/repacked_source.h"

namespace cascade::model {
namespace {

constexpr std::string_view kGateUp = ".mlp.experts.gate_up_proj";

// Where a virtual tensor's elements come from: element (r, c) of expert `expert` is
// element (expert, r * row_step + c * col_step + offset) of `stored` (flat within the expert).
struct Source {
  std::string stored;
  int64_t expert = 0;
  int64_t expert_elems = 0;  // Elements of one expert in `stored`.
  int64_t row_step = 0, col_step = 0, offset = 0;
};

class GptOssExpertsSource final : public RepackedSource {
 public:
  explicit GptOssExpertsSource(std::unique_ptr<WeightSource> stored) : RepackedSource(std::move(stored)) {}

  absl::Status Init() {
    for (const TensorInfo& t : packed().tensors()) {
      if (t.name.ends_with(kGateUp)) CASCADE_RETURN_IF_ERROR(AddLayer(t.name.substr(0, t.name.size() - 13)));
    }
    return Finish();
  }

 private:
  // `prefix` is "model.layers.L.mlp.experts".
  absl::Status AddLayer(const std::string& prefix) {
    const std::string gate_up = prefix + ".gate_up_proj", down = prefix + ".down_proj";
    const std::string gate_up_bias = gate_up + "_bias", down_bias = down + "_bias";
    const TensorInfo* gu = packed().FindTensor(gate_up);
    const TensorInfo* d = packed().FindTensor(down);
    const TensorInfo* gub = packed().FindTensor(gate_up_bias);
    const TensorInfo* db = packed().FindTensor(down_bias);
    if (d == nullptr || gub == nullptr || db == nullptr) {
      return Bad(gate_up, StrCat("needs ", down, ", ", gate_up_bias, " and ", down_bias, " beside it"));
    }
    if (gu->n_dims != 3 || gu->shape[2] % 2 != 0) return Bad(gate_up, StrCat("is ", gu->ShapeString()));
    const int64_t e = gu->shape[0], h = gu->shape[1], i = gu->shape[2] / 2;
    const bool shapes = d->n_dims == 3 && d->shape[0] == e && d->shape[1] == i && d->shape[2] == h &&
                        gub->NumElements() == e * 2 * i && db->NumElements() == e * h;
    if (!shapes) {
      return Bad(gate_up, StrCat(gu->ShapeString(), " against ", down, " ", d->ShapeString(), ", ", gate_up_bias, " ",
                                 gub->ShapeString(), ", ", down_bias, " ", db->ShapeString()));
    }
    const std::vector<std::string> behind = {gate_up, down, gate_up_bias, down_bias};
    for (int64_t x = 0; x < e; ++x) {
      const std::string p = StrCat(prefix, ".", x, ".");
      // gate row r = stored column 2r over the H inputs: element (r, c) at c * 2I + 2r.
      Add(p + "gate_proj.weight", gu->dtype, i, h, {gate_up, x, h * 2 * i, 2, 2 * i, 0}, behind);
      Add(p + "up_proj.weight", gu->dtype, i, h, {gate_up, x, h * 2 * i, 2, 2 * i, 1}, behind);
      Add(p + "down_proj.weight", d->dtype, h, i, {down, x, i * h, 1, h, 0}, behind);
      Add(p + "gate_proj.bias", gub->dtype, 1, i, {gate_up_bias, x, 2 * i, 0, 2, 0}, behind);
      Add(p + "up_proj.bias", gub->dtype, 1, i, {gate_up_bias, x, 2 * i, 0, 2, 1}, behind);
      Add(p + "down_proj.bias", db->dtype, 1, h, {down_bias, x, h, 0, 1, 0}, behind);
    }
    return absl::OkStatus();
  }

  void Add(const std::string& name, DType dtype, int64_t rows, int64_t cols, Source src,
           const std::vector<std::string>& behind) {
    TensorInfo info;
    info.name = name;
    info.dtype = dtype;
    info.n_dims = 2;
    info.shape = {rows, cols, 0, 0};
    info.n_bytes = static_cast<uint64_t>(rows * RowBytes(dtype, cols));
    AddVirtual(info, behind);
    sources_.emplace(name, std::move(src));
  }

  absl::Status Repack(const TensorInfo& info, int64_t r0, int64_t r1, uint8_t* dst) const override {
    const Source& s = sources_.at(info.name);
    CASCADE_ASSIGN_OR_RETURN(const TensorView stored, packed().Read(s.stored));
    const size_t es = static_cast<size_t>(BlockBytes(info.dtype));
    const auto* base = static_cast<const uint8_t*>(stored.data) + s.expert * s.expert_elems * es;
    const int64_t cols = info.shape[1];
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < cols; ++c, dst += es) {
        std::memcpy(dst, base + (r * s.row_step + c * s.col_step + s.offset) * es, es);
      }
    }
    return absl::OkStatus();
  }

  std::map<std::string, Source> sources_;
};

}  // namespace

bool HasGptOssExperts(const WeightSource& stored) {
  for (const TensorInfo& t : stored.tensors()) {
    if (t.name.ends_with(kGateUp)) return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<WeightSource>> OpenGptOssExperts(std::unique_ptr<WeightSource> stored) {
  auto source = std::make_unique<GptOssExpertsSource>(std::move(stored));
  CASCADE_RETURN_IF_ERROR(source->Init());
  return std::unique_ptr<WeightSource>(std::move(source));
}

}  // namespace cascade::model
