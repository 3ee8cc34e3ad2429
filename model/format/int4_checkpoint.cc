#include "model/format/int4_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <utility>
#include <vector>

#include "core/half.h"
#include "core/quant_blocks.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/json_string.h"
#include "model/format/repacked_source.h"

namespace cascade::model {
namespace {

using Json = nlohmann::json;

constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // Nibble of output 8 c + j.

// Reads an integer key that may be spelled two ways (transformers' and AutoAWQ's names).
absl::StatusOr<std::optional<int64_t>> IntKey(const Json& q, const char* key, const char* alt,
                                              const std::string& source) {
  for (const char* k : {key, alt}) {
    if (k == nullptr) continue;
    const auto it = q.find(k);
    if (it == q.end() || it->is_null()) continue;
    if (!it->is_number_integer()) {
      return absl::InvalidArgumentError(StrCat(source, ": quantization_config.", k, " must be an integer"));
    }
    return std::optional<int64_t>(it->get<int64_t>());
  }
  return std::optional<int64_t>();
}

}  // namespace

absl::StatusOr<std::optional<Int4Scheme>> Int4SchemeFromHfConfig(const std::string& config_text,
                                                                 const std::string& source) {
  const Json config = Json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(StrCat(source, ": not a JSON object"));
  }
  const auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return std::optional<Int4Scheme>();
  const Json& q = *it;
  if (!q.is_object()) return absl::InvalidArgumentError(StrCat(source, ": quantization_config must be an object"));
  const std::string method = JsonString(q, "quant_method", "");
  Int4Scheme s;
  if (method == "gptq") {
    s.method = Int4Scheme::Method::kGptq;
    const std::string format = JsonString(q, "checkpoint_format", "gptq");
    if (format != "gptq" && format != "gptq_v2") {
      return absl::UnimplementedError(StrCat(source, ": GPTQ checkpoint_format '", format,
                                             "' is not supported (Cascade reads 'gptq' and 'gptq_v2')"));
    }
    s.zero_offset = format == "gptq" ? 1 : 0;
  } else if (method == "awq") {
    s.method = Int4Scheme::Method::kAwq;
    const std::string version = JsonString(q, "version", "gemm");
    if (version != "gemm" && version != "GEMM") {
      return absl::UnimplementedError(
          StrCat(source, ": AWQ version '", version, "' is not supported (Cascade reads the 'gemm' packing)"));
    }
    const auto zp = q.find("zero_point");
    if (zp != q.end() && zp->is_boolean() && !zp->get<bool>()) {
      return absl::UnimplementedError(StrCat(source, ": AWQ without zero points is not supported"));
    }
  } else {
    return absl::UnimplementedError(StrCat(source, ": quantization_config.quant_method '", method,
                                           "' is not supported (Cascade loads 'gptq' and 'awq' 4-bit "
                                           "checkpoints, 'fp8' and compressed-tensors FP8 ones, or "
                                           "unquantized ones)"));
  }
  CASCADE_ASSIGN_OR_RETURN(std::optional<int64_t> bits, IntKey(q, "bits", "w_bit", source));
  if (bits.value_or(4) != 4) {
    return absl::UnimplementedError(StrCat(source, ": ", method, " with bits ", *bits,
                                           " is not supported (Cascade's INT4 kernels take 4-bit weights)"));
  }
  CASCADE_ASSIGN_OR_RETURN(std::optional<int64_t> group, IntKey(q, "group_size", "q_group_size", source));
  s.group_size = group.value_or(128);
  if (s.group_size != -1 && (s.group_size <= 0 || s.group_size % kQG != 0)) {
    return absl::UnimplementedError(StrCat(source, ": ", method, " group_size ", s.group_size,
                                           " is not supported (Cascade's INT4 kernels take groups of 128, "
                                           "a multiple of 128, or -1)"));
  }
  return std::optional<Int4Scheme>(s);
}

namespace {

// One quantized linear layer: its three packed tensors and its logical shape.
struct Int4Tensor {
  TensorInfo info;  // The `P.weight` it stands for: I4_G128 [n_out, n_in].
  std::string qweight, qzeros, scales;
  int64_t n_groups = 1;
  // Act-order: input j of `info` is stored input order[j] (inputs sorted by group, stably);
  // empty when groups are contiguous.
  std::vector<int32_t> order;
};

class Int4Source final : public RepackedSource {
 public:
  Int4Source(std::unique_ptr<WeightSource> packed, Int4Scheme scheme)
      : RepackedSource(std::move(packed)), scheme_(scheme) {}

  absl::Status Init() {
    for (const TensorInfo& t : packed().tensors()) {
      const std::string suffix = ".qweight";
      if (t.name.size() <= suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      const std::string base = t.name.substr(0, t.name.size() - suffix.size());
      CASCADE_ASSIGN_OR_RETURN(Int4Tensor q, Describe(base, t));
      AddVirtual(q.info, {base + ".qweight", base + ".qzeros", base + ".scales", base + ".g_idx"});
      if (!q.order.empty()) {  // The order its inputs take: `P.input_order`, I32 [1, n_in].
        TensorInfo o;
        o.name = base + ".input_order";
        o.dtype = DType::kI32;
        o.n_dims = 2;
        o.shape = {1, static_cast<int64_t>(q.order.size()), 0, 0};
        o.n_bytes = q.order.size() * 4;
        AddVirtual(o, {});
        orders_.emplace(o.name, q.order);
      }
      tensors_.emplace(q.info.name, std::move(q));
    }
    return Finish();
  }

 private:
  absl::Status Repack(const TensorInfo& info, int64_t r0, int64_t r1, uint8_t* dst) const override {
    if (const auto it = orders_.find(info.name); it != orders_.end()) {
      std::memcpy(dst, it->second.data(), it->second.size() * 4);
      return absl::OkStatus();
    }
    return RepackRows(tensors_.at(info.name), r0, r1, reinterpret_cast<BlockI4G128*>(dst));
  }

  // Checks the triple of `base` against the layout of the scheme and gives its shape.
  absl::StatusOr<Int4Tensor> Describe(const std::string& base, const TensorInfo& qweight) const {
    const bool gptq = scheme_.method == Int4Scheme::Method::kGptq;
    Int4Tensor q;
    q.qweight = qweight.name;
    q.qzeros = base + ".qzeros";
    q.scales = base + ".scales";
    const TensorInfo* zeros = packed().FindTensor(q.qzeros);
    const TensorInfo* scales = packed().FindTensor(q.scales);
    if (zeros == nullptr || scales == nullptr) {
      return Bad(qweight.name, StrCat("has no ", zeros == nullptr ? q.qzeros : q.scales, " beside it"));
    }
    if (qweight.dtype != DType::kI32 || zeros->dtype != DType::kI32 || qweight.n_dims != 2 || zeros->n_dims != 2) {
      return Bad(qweight.name, "qweight and qzeros must be 2-D I32");
    }
    if (scales->dtype != DType::kF16 || scales->n_dims != 2) {
      return Bad(q.scales, StrCat("must be 2-D F16, is ", DTypeName(scales->dtype), " ", scales->ShapeString()));
    }
    const int64_t n_in = gptq ? qweight.shape[0] * 8 : qweight.shape[0];
    const int64_t n_out = gptq ? qweight.shape[1] : qweight.shape[1] * 8;
    q.n_groups = scheme_.group_size == -1 ? 1 : n_in / scheme_.group_size;
    if (n_in % kQG != 0) {
      return absl::UnimplementedError(StrCat(path(), ": tensor '", qweight.name, "': ", n_in,
                                             " inputs are not a multiple of 128 (Cascade's INT4 group)"));
    }
    if (scheme_.group_size != -1 && n_in % scheme_.group_size != 0) {
      return Bad(qweight.name, StrCat(n_in, " inputs are not whole groups of ", scheme_.group_size));
    }
    if (scales->shape[0] != q.n_groups || scales->shape[1] != n_out || zeros->shape[0] != q.n_groups ||
        zeros->shape[1] * 8 != n_out) {
      return Bad(qweight.name, StrCat("qweight ", qweight.ShapeString(), " (", n_out, " x ", n_in, ") needs scales [",
                                      q.n_groups, ", ", n_out, "] and qzeros [", q.n_groups, ", ", n_out / 8,
                                      "], found ", scales->ShapeString(), " and ", zeros->ShapeString()));
    }
    if (gptq) {
      CASCADE_ASSIGN_OR_RETURN(q.order, GroupOrder(base + ".g_idx", n_in));
    }
    q.info.name = base + ".weight";
    q.info.dtype = DType::kI4_G128;
    q.info.n_dims = 2;
    q.info.shape = {n_out, n_in, 0, 0};
    q.info.file_offset = qweight.file_offset;
    q.info.n_bytes = static_cast<uint64_t>(n_out * RowBytes(DType::kI4_G128, n_in));
    return q;
  }

  // GPTQ's g_idx: input i is in group g_idx[i]. Identity (i / group): contiguous groups,
  // nothing to reorder (empty). Act-order (desc_act): the inputs sorted by group (stably),
  // so that each group is contiguous in the repacked weight, which then multiplies the
  // activations taken in that order (`P.input_order`). Every group must hold group_size
  // inputs.
  absl::StatusOr<std::vector<int32_t>> GroupOrder(const std::string& name, int64_t n_in) const {
    if (packed().FindTensor(name) == nullptr) return std::vector<int32_t>();
    CASCADE_ASSIGN_OR_RETURN(TensorView g, packed().Read(name));
    if (g.dtype != DType::kI32 || g.NumElements() != n_in) {
      return Bad(name, StrCat("must be I32 [", n_in, "], is ", DTypeName(g.dtype), " ", g.ShapeString()));
    }
    const int64_t group = scheme_.group_size == -1 ? n_in : scheme_.group_size;
    std::vector<int32_t> gi(n_in);
    std::memcpy(gi.data(), g.data, n_in * 4);
    bool identity = true;
    std::vector<int64_t> members(n_in / group, 0);
    for (int64_t i = 0; i < n_in; ++i) {
      if (gi[i] < 0 || gi[i] >= n_in / group) {
        return Bad(name, StrCat("input ", i, " is in group ", gi[i], ", outside [0, ", n_in / group, ")"));
      }
      identity = identity && gi[i] == i / group;
      ++members[gi[i]];
    }
    if (identity) return std::vector<int32_t>();
    for (size_t k = 0; k < members.size(); ++k) {
      if (members[k] != group) {
        return absl::UnimplementedError(StrCat(path(), ": tensor '", name, "': act-order group ", k, " holds ",
                                               members[k], " inputs, not ", group,
                                               " (Cascade reorders whole groups of the checkpoint's size)"));
      }
    }
    std::vector<int32_t> order(n_in);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return gi[a] < gi[b]; });
    return order;
  }

  static uint32_t Word(const TensorView& v, int64_t row, int64_t col) {
    uint32_t w;
    std::memcpy(&w, static_cast<const uint8_t*>(v.data) + 4 * (row * v.Cols() + col), 4);
    return w;
  }

  // Output rows [r0, r1) of `q` into I4_G128 blocks at `dst`.
  absl::Status RepackRows(const Int4Tensor& q, int64_t r0, int64_t r1, BlockI4G128* dst) const {
    CASCADE_ASSIGN_OR_RETURN(TensorView qw, packed().Read(q.qweight));
    CASCADE_ASSIGN_OR_RETURN(TensorView qz, packed().Read(q.qzeros));
    CASCADE_ASSIGN_OR_RETURN(TensorView sc, packed().Read(q.scales));
    const int64_t n_in = q.info.shape[1], n_blocks = n_in / kQG;
    const int64_t per_group = scheme_.group_size == -1 ? n_blocks : scheme_.group_size / kQG;
    const bool gptq = scheme_.method == Int4Scheme::Method::kGptq;
    for (int64_t o = r0; o < r1; ++o) {
      BlockI4G128* row = dst + (o - r0) * n_blocks;
      const int zero_nibble = gptq ? static_cast<int>(o % 8) : kAwqNibble[o % 8];
      for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t g = b / per_group;
        std::memcpy(&row[b].d, static_cast<const uint8_t*>(sc.data) + 2 * (g * sc.Cols() + o), 2);
        const int zero = static_cast<int>((Word(qz, g, o / 8) >> (4 * zero_nibble)) & 0xf) + scheme_.zero_offset;
        row[b].z = F32ToF16(static_cast<float>(zero));  // Exact: an integer <= 16.
        for (int w = 0; w < kQG / 8; ++w) {
          if (gptq && !q.order.empty()) {  // Act-order: input j is stored input order[j].
            uint32_t word = 0;
            for (int j = 0; j < 8; ++j) {
              const int64_t in = q.order[b * kQG + 8 * w + j];
              word |= ((Word(qw, in / 8, o) >> (4 * (in % 8))) & 0xf) << (4 * j);
            }
            row[b].qs[w] = word;
          } else if (gptq) {
            row[b].qs[w] = Word(qw, b * (kQG / 8) + w, o);  // Already 8 inputs of output o.
          } else {
            uint32_t word = 0;
            for (int j = 0; j < 8; ++j) {
              const uint32_t nib = (Word(qw, b * kQG + 8 * w + j, o / 8) >> (4 * kAwqNibble[o % 8])) & 0xf;
              word |= nib << (4 * j);
            }
            row[b].qs[w] = word;
          }
        }
      }
    }
    return absl::OkStatus();
  }

  Int4Scheme scheme_;
  std::map<std::string, Int4Tensor> tensors_;           // By the name of the weight each stands for.
  std::map<std::string, std::vector<int32_t>> orders_;  // `P.input_order` of act-order weights.
};

}  // namespace

absl::StatusOr<std::unique_ptr<WeightSource>> OpenInt4Checkpoint(std::unique_ptr<WeightSource> packed,
                                                                 const Int4Scheme& scheme) {
  auto source = std::make_unique<Int4Source>(std::move(packed), scheme);
  CASCADE_RETURN_IF_ERROR(source->Init());
  return std::unique_ptr<WeightSource>(std::move(source));
}

}  // namespace cascade::model
