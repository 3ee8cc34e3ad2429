#include "kernels/cpu/packed_weight.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/half.h"
#include "core/quant_blocks.h"

namespace cascade::kernels::cpu {
namespace {

int64_t ScaleVectors(DType dtype) { return dtype == DType::kQ4_1 ? 2 : 1; }

// Packs rows [16 g, 16 g + n_rows) of GGUF blocks (`row(i)` = row 16 g + i) into `dst`.
template <typename B>
void PackGroup(DType dtype, const uint8_t* src, int64_t row_bytes, int64_t r0, int n_rows, int64_t nb, uint8_t* dst) {
  const int64_t qb = PackedWeight::QuantBytes(dtype);
  uint8_t* quants = dst;
  auto* d = reinterpret_cast<uint16_t*>(dst + nb * qb);
  uint16_t* m = d + nb * kPackRows;
  for (int i = 0; i < n_rows; ++i) {
    const B* w = reinterpret_cast<const B*>(src + (r0 + i) * row_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* q = quants + b * qb;
      d[b * kPackRows + i] = w[b].d;
      if constexpr (std::is_same_v<B, BlockQ8_0>) {
        for (int k = 0; k < 8; ++k) {
          for (int j = 0; j < 4; ++j) {
            q[64 * k + 4 * i + j] = static_cast<uint8_t>(w[b].qs[4 * k + j] + 128);
          }
        }
      } else {
        for (int k = 0; k < 4; ++k) std::memcpy(q + 64 * k + 4 * i, w[b].qs + 4 * k, 4);
        if constexpr (std::is_same_v<B, BlockQ4_1>) m[b * kPackRows + i] = w[b].m;
      }
    }
  }
}

}  // namespace

bool PackedWeight::Supports(DType dtype) {
  return dtype == DType::kQ8_0 || dtype == DType::kQ4_0 || dtype == DType::kQ4_1;
}

absl::StatusOr<PackedWeight> PackedWeight::Pack(const TensorView& weight) {
  if (!Supports(weight.dtype)) {
    return absl::UnimplementedError(
        absl::StrCat("PackedWeight: no packed layout for ", std::string(DTypeName(weight.dtype))));
  }
  if (weight.device.kind != DeviceKind::kCpu || weight.n_dims != 2 || weight.Cols() % kQK != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PackedWeight: need a 2-D CPU weight with n_in a multiple of 32, got ", weight.ShapeString()));
  }
  if (weight.data == nullptr && weight.NumElements() != 0) {
    return absl::InvalidArgumentError("PackedWeight: null weight data");
  }
  PackedWeight p;
  p.dtype_ = weight.dtype;
  p.n_out_ = weight.Rows();
  p.n_in_ = weight.Cols();
  const int64_t nb = p.n_in_ / kQK;
  const int64_t raw = nb * (QuantBytes(p.dtype_) + ScaleVectors(p.dtype_) * kPackRows * 2);
  p.group_bytes_ = (raw + 63) / 64 * 64;
  const int64_t total = std::max<int64_t>(64, p.bytes());
  p.data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, static_cast<size_t>(total))));
  if (p.data_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("PackedWeight: cannot allocate ", total, " bytes"));
  }
  std::memset(p.data_.get(), 0, static_cast<size_t>(total));  // Padding rows: d = 0, q = 0.
  const auto* src = static_cast<const uint8_t*>(weight.data);
  const int64_t row_bytes = weight.RowBytes();
  for (int64_t g = 0; g < p.n_groups(); ++g) {
    const int n_rows = static_cast<int>(std::min<int64_t>(kPackRows, p.n_out_ - g * kPackRows));
    uint8_t* dst = p.data_.get() + g * p.group_bytes_;
    switch (p.dtype_) {
      case DType::kQ8_0: PackGroup<BlockQ8_0>(p.dtype_, src, row_bytes, g * kPackRows, n_rows, nb, dst); break;
      case DType::kQ4_0: PackGroup<BlockQ4_0>(p.dtype_, src, row_bytes, g * kPackRows, n_rows, nb, dst); break;
      default: PackGroup<BlockQ4_1>(p.dtype_, src, row_bytes, g * kPackRows, n_rows, nb, dst); break;
    }
  }
  return p;
}

void PackedWeight::DequantizeRow(int64_t r, float* out) const {
  const int64_t nb = n_in_ / kQK;
  const int64_t qb = QuantBytes(dtype_);
  const uint8_t* g = data_.get() + (r / kPackRows) * group_bytes_;
  const int i = static_cast<int>(r % kPackRows);
  const auto* d = reinterpret_cast<const uint16_t*>(g + nb * qb);
  const uint16_t* m = d + nb * kPackRows;
  for (int64_t b = 0; b < nb; ++b, out += kQK) {
    const uint8_t* q = g + b * qb;
    const float db = F16ToF32(d[b * kPackRows + i]);
    if (dtype_ == DType::kQ8_0) {
      for (int e = 0; e < kQK; ++e) {
        out[e] = db * static_cast<float>(static_cast<int>(q[64 * (e / 4) + 4 * i + e % 4]) - 128);
      }
      continue;
    }
    const float off = dtype_ == DType::kQ4_1 ? F16ToF32(m[b * kPackRows + i]) : -8.0f * db;
    for (int e = 0; e < 16; ++e) {
      const uint8_t byte = q[64 * (e / 4) + 4 * i + e % 4];
      out[e] = db * static_cast<float>(byte & 0x0f) + off;
      out[e + 16] = db * static_cast<float>(byte >> 4) + off;
    }
  }
}

}  // namespace cascade::kernels::cpu
