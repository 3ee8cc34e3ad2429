#include "model/format/gpt_oss_experts.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/mxfp4_checkpoint.h"
#include "model/format/repacked_source.h"

namespace cascade::model {
namespace {

constexpr std::string_view kGateUp = ".mlp.experts.gate_up_proj";
constexpr std::string_view kGateUpBlocks = ".mlp.experts.gate_up_proj_blocks";

// Where a virtual tensor's elements come from: element (r, c) of expert `expert` is
// element (expert, r * row_step + c * col_step + offset) of `stored` (flat within the expert).
struct Source {
  std::string stored;
  int64_t expert = 0;
  int64_t expert_elems = 0;  // Elements of one expert in `stored`.
  int64_t row_step = 0, col_step = 0, offset = 0;
};

// Where an MXFP4 virtual tensor's rows come from: row r of expert `expert` is stored row
// expert * stored_rows + r * row_step + row_offset of `blocks` ([.., groups, 16] bytes, two
// E2M1 codes a byte, the even element in the low nibble) and `scales` ([.., groups] E8M0).
struct Mxfp4Source {
  std::string blocks, scales;
  int64_t expert = 0, stored_rows = 0, row_step = 1, row_offset = 0, groups = 0;
};

class GptOssExpertsSource final : public RepackedSource {
 public:
  explicit GptOssExpertsSource(std::unique_ptr<WeightSource> stored) : RepackedSource(std::move(stored)) {}

  absl::Status Init() {
    for (const TensorInfo& t : packed().tensors()) {
      if (t.name.ends_with(kGateUp)) CASCADE_RETURN_IF_ERROR(AddLayer(t.name.substr(0, t.name.size() - 13)));
      if (t.name.ends_with(kGateUpBlocks)) {
        CASCADE_RETURN_IF_ERROR(AddMxfp4Layer(t.name.substr(0, t.name.size() - kGateUpBlocks.size() + 12)));
      }
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

  // OpenAI's MXFP4 release: `prefix` is "model.layers.L.mlp.experts"; the biases as in
  // the BF16 form.
  absl::Status AddMxfp4Layer(const std::string& prefix) {
    const std::string gu = prefix + ".gate_up_proj", d = prefix + ".down_proj";
    const TensorInfo* gub = packed().FindTensor(gu + "_blocks");
    const TensorInfo* gus = packed().FindTensor(gu + "_scales");
    const TensorInfo* db = packed().FindTensor(d + "_blocks");
    const TensorInfo* ds = packed().FindTensor(d + "_scales");
    const TensorInfo* gbias = packed().FindTensor(gu + "_bias");
    const TensorInfo* dbias = packed().FindTensor(d + "_bias");
    if (gus == nullptr || db == nullptr || ds == nullptr || gbias == nullptr || dbias == nullptr) {
      return Bad(gu + "_blocks", "needs its _scales, down_proj_blocks / _scales and both biases beside it");
    }
    const auto blocks_ok = [](const TensorInfo* b, const TensorInfo* s) {
      return b->dtype == DType::kU8 && s->dtype == DType::kU8 && b->n_dims == 4 && b->shape[3] == 16 &&
             s->n_dims == 3 && s->shape[0] == b->shape[0] && s->shape[1] == b->shape[1] && s->shape[2] == b->shape[2];
    };
    const int64_t e = gub->shape[0], two_i = gub->shape[1], h = gub->shape[2] * 32;
    if (!blocks_ok(gub, gus) || !blocks_ok(db, ds) || two_i % 2 != 0 || db->shape[0] != e || db->shape[1] != h ||
        db->shape[2] * 32 != two_i / 2 || gbias->NumElements() != e * two_i || dbias->NumElements() != e * h) {
      return Bad(gu + "_blocks", StrCat(gub->ShapeString(), " against its scales ", gus->ShapeString(), ", ", d,
                                        "_blocks ", db->ShapeString(), ", ", ds->ShapeString()));
    }
    const int64_t i = two_i / 2;
    const std::vector<std::string> behind = {gu + "_blocks", gu + "_scales", d + "_blocks",
                                             d + "_scales",  gu + "_bias",   d + "_bias"};
    for (int64_t x = 0; x < e; ++x) {
      const std::string p = StrCat(prefix, ".", x, ".");
      AddMxfp4(p + "gate_proj.weight", i, h, {gu + "_blocks", gu + "_scales", x, two_i, 2, 0, h / 32}, behind);
      AddMxfp4(p + "up_proj.weight", i, h, {gu + "_blocks", gu + "_scales", x, two_i, 2, 1, h / 32}, behind);
      AddMxfp4(p + "down_proj.weight", h, i, {d + "_blocks", d + "_scales", x, h, 1, 0, i / 32}, behind);
      Add(p + "gate_proj.bias", gbias->dtype, 1, i, {gu + "_bias", x, two_i, 0, 2, 0}, behind);
      Add(p + "up_proj.bias", gbias->dtype, 1, i, {gu + "_bias", x, two_i, 0, 2, 1}, behind);
      Add(p + "down_proj.bias", dbias->dtype, 1, h, {d + "_bias", x, h, 0, 1, 0}, behind);
    }
    return absl::OkStatus();
  }

  void AddMxfp4(const std::string& name, int64_t rows, int64_t cols, Mxfp4Source src,
                const std::vector<std::string>& behind) {
    AddMatrix(name, DType::kMXFP4, rows, cols, behind);
    mxfp4_.emplace(name, std::move(src));
  }

  // Each 32-element group becomes GGUF's block (OcpPairsToMxfp4Block).
  absl::Status RepackMxfp4(const Mxfp4Source& s, int64_t r0, int64_t r1, uint8_t* dst) const {
    CASCADE_ASSIGN_OR_RETURN(const TensorView blocks, packed().Read(s.blocks));
    CASCADE_ASSIGN_OR_RETURN(const TensorView scales, packed().Read(s.scales));
    const auto* b = static_cast<const uint8_t*>(blocks.data);
    const auto* sc = static_cast<const uint8_t*>(scales.data);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t row = s.expert * s.stored_rows + r * s.row_step + s.row_offset;
      for (int64_t g = 0; g < s.groups; ++g, dst += 17) {
        OcpPairsToMxfp4Block(b + (row * s.groups + g) * 16, sc[row * s.groups + g], dst);
      }
    }
    return absl::OkStatus();
  }

  void Add(const std::string& name, DType dtype, int64_t rows, int64_t cols, Source src,
           const std::vector<std::string>& behind) {
    AddMatrix(name, dtype, rows, cols, behind);
    sources_.emplace(name, std::move(src));
  }

  // Shows `name` [rows, cols] of `dtype` in place of the stored tensors `behind`.
  void AddMatrix(const std::string& name, DType dtype, int64_t rows, int64_t cols,
                 const std::vector<std::string>& behind) {
    TensorInfo info;
    info.name = name;
    info.dtype = dtype;
    info.n_dims = 2;
    info.shape = {rows, cols, 0, 0};
    info.n_bytes = static_cast<uint64_t>(rows * RowBytes(dtype, cols));
    AddVirtual(info, behind);
  }

  absl::Status Repack(const TensorInfo& info, int64_t r0, int64_t r1, uint8_t* dst) const override {
    if (const auto m = mxfp4_.find(info.name); m != mxfp4_.end()) return RepackMxfp4(m->second, r0, r1, dst);
    const Source& s = sources_.at(info.name);
    CASCADE_ASSIGN_OR_RETURN(const TensorView stored, packed().Read(s.stored));
    const int64_t es = BlockBytes(info.dtype);
    const auto* base = static_cast<const uint8_t*>(stored.data) + s.expert * s.expert_elems * es;
    const int64_t cols = info.shape[1];
    switch (es) {
      case 2: Gather(reinterpret_cast<const uint16_t*>(base), s, r0, r1, cols, reinterpret_cast<uint16_t*>(dst)); break;
      case 4: Gather(reinterpret_cast<const uint32_t*>(base), s, r0, r1, cols, reinterpret_cast<uint32_t*>(dst)); break;
      default: return Bad(s.stored, StrCat("is ", DTypeName(info.dtype), " (merged experts are BF16, F16 or F32)"));
    }
    return absl::OkStatus();
  }

  // dst[(r - r0) * cols + c] = src[r * row_step + c * col_step + offset] in tiles of 64 x 64:
  // the merged tensors are input-major, so a row of the result is a strided column of the
  // stored tensor; by tiles, each stored line read serves 64 rows (element by element, a
  // row at a time, the copy ran at 0.52 GB/s; by tiles 0.97 GB/s, gpt-oss-20b's shapes, one
  // core of the 2-core AMD VM).
  template <typename T>
  static void Gather(const T* src, const Source& s, int64_t r0, int64_t r1, int64_t cols, T* dst) {
    constexpr int64_t kTile = 64;
    for (int64_t rt = r0; rt < r1; rt += kTile) {
      const int64_t rt1 = std::min(r1, rt + kTile);
      for (int64_t ct = 0; ct < cols; ct += kTile) {
        const int64_t ct1 = std::min(cols, ct + kTile);
        for (int64_t c = ct; c < ct1; ++c) {
          const T* col = src + c * s.col_step + s.offset;
          for (int64_t r = rt; r < rt1; ++r) dst[(r - r0) * cols + c] = col[r * s.row_step];
        }
      }
    }
  }

  std::map<std::string, Source> sources_;
  std::map<std::string, Mxfp4Source> mxfp4_;
};

}  // namespace

bool HasGptOssExperts(const WeightSource& stored) {
  for (const TensorInfo& t : stored.tensors()) {
    if (t.name.ends_with(kGateUp) || t.name.ends_with(kGateUpBlocks)) return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<WeightSource>> OpenGptOssExperts(std::unique_ptr<WeightSource> stored) {
  auto source = std::make_unique<GptOssExpertsSource>(std::move(stored));
  CASCADE_RETURN_IF_ERROR(source->Init());
  return std::unique_ptr<WeightSource>(std::move(source));
}

}  // namespace cascade::model
