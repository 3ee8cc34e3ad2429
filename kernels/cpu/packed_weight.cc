#include "kernels/cpu/packed_weight.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/half.h"
#include "core/quant_blocks.h"
#include "core/status.h"

namespace cascade::kernels::cpu {
namespace {

void PackQ8Group(const uint8_t* src, int64_t row_bytes, int64_t r0, int n_rows, int64_t nb, uint8_t* dst) {
  auto* d = reinterpret_cast<uint16_t*>(dst + nb * 512);
  for (int i = 0; i < n_rows; ++i) {
    const auto* w = reinterpret_cast<const BlockQ8_0*>(src + (r0 + i) * row_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* q = dst + b * 512;
      d[b * kPackRows + i] = w[b].d;
      for (int k = 0; k < 8; ++k) {
        for (int j = 0; j < 4; ++j) q[64 * k + 4 * i + j] = static_cast<uint8_t>(w[b].qs[4 * k + j] + 128);
      }
    }
  }
}

absl::Status ToF16(float v, int64_t row, uint16_t* out) {
  if (!std::isfinite(v) || std::fabs(v) > 65504.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("PackedWeight: row ", row, " has a block scale ", v, " outside the f16 range"));
  }
  *out = F32ToF16(v);
  return absl::OkStatus();
}

// Packs rows [r0, r0 + n_rows) of a HasBlockCodes dtype into the group at `dst`.
absl::Status PackCodeGroup(DType dtype, const uint8_t* src, int64_t row_bytes, int64_t r0, int n_rows, int64_t nb,
                           uint8_t* dst) {
  const CodeFormat f = CodeFormatOf(dtype);
  const int64_t qb = PackedWeight::QuantBytes(dtype);
  const int64_t halves = PackedWeight::ScaleVectors(dtype);
  auto* d = reinterpret_cast<uint16_t*>(dst + nb * qb);
  uint16_t* m = d + nb * halves * kPackRows;
  BlockCodes c;
  for (int i = 0; i < n_rows; ++i) {
    const uint8_t* row = src + (r0 + i) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      DecodeBlock(dtype, row, b, &c);
      uint8_t* q = dst + b * qb;
      for (int k = 0; k < 4; ++k) {
        for (int j = 0; j < 4; ++j) {
          q[64 * k + 4 * i + j] =
              static_cast<uint8_t>((c.code[4 * k + j] & 0x0f) | (c.code[16 + 4 * k + j] & 0x0f) << 4);
        }
      }
      for (int k = 0; k < 4 && f.bits > 4; ++k) {
        for (int h = 0; h < 2; ++h) {
          for (int j = 0; j < 4; ++j) SetPackedHighBits(q, f.bits, i, h, k, j, c.code[16 * h + 4 * k + j] >> 4);
        }
      }
      for (int h = 0; h < halves; ++h) {
        // MXFP4's power-of-two scales span 2^-128..2^127: those f16 cannot hold exactly
        // leave the weight unpacked (its kernels read the file's exponents as they are).
        if (dtype == DType::kMXFP4 && F16ToF32(F32ToF16(c.d[h])) != c.d[h]) {
          return absl::UnimplementedError(absl::StrCat("PackedWeight: row ", r0 + i, " has an MXFP4 scale ", c.d[h],
                                                       " that f16 does not hold exactly"));
        }
        CASCADE_RETURN_IF_ERROR(ToF16(c.d[h], r0 + i, &d[(b * halves + h) * kPackRows + i]));
        if (f.stored_min) CASCADE_RETURN_IF_ERROR(ToF16(c.m[h], r0 + i, &m[(b * halves + h) * kPackRows + i]));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool PackedWeight::Supports(DType dtype) { return dtype == DType::kQ8_0 || HasBlockCodes(dtype); }

absl::StatusOr<PackedWeight> PackedWeight::Pack(const TensorView& weight) {
  if (!Supports(weight.dtype)) {
    return absl::UnimplementedError(
        absl::StrCat("PackedWeight: no packed layout for ", std::string(DTypeName(weight.dtype))));
  }
  if (weight.device.kind != DeviceKind::kCpu || weight.n_dims != 2 || weight.Cols() % BlockElems(weight.dtype) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("PackedWeight: need a 2-D CPU weight with n_in a multiple of ",
                                                   BlockElems(weight.dtype), ", got ", weight.ShapeString()));
  }
  if (weight.data == nullptr && weight.NumElements() != 0) {
    return absl::InvalidArgumentError("PackedWeight: null weight data");
  }
  PackedWeight p;
  p.dtype_ = weight.dtype;
  p.n_out_ = weight.Rows();
  p.n_in_ = weight.Cols();
  const int64_t nb = p.n_in_ / kQK;
  const int64_t raw = nb * (QuantBytes(p.dtype_) + (ScaleVectors(p.dtype_) + MinVectors(p.dtype_)) * kPackRows * 2);
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
    if (p.dtype_ == DType::kQ8_0) {
      PackQ8Group(src, row_bytes, g * kPackRows, n_rows, nb, dst);
    } else {
      CASCADE_RETURN_IF_ERROR(PackCodeGroup(p.dtype_, src, row_bytes, g * kPackRows, n_rows, nb, dst));
    }
  }
  return p;
}

void PackedWeight::DequantizeRow(int64_t r, float* out) const {
  const int64_t nb = n_in_ / kQK;
  const int64_t qb = QuantBytes(dtype_);
  const int64_t halves = ScaleVectors(dtype_);
  const uint8_t* g = data_.get() + (r / kPackRows) * group_bytes_;
  const int i = static_cast<int>(r % kPackRows);
  const auto* d = reinterpret_cast<const uint16_t*>(g + nb * qb);
  const uint16_t* m = d + nb * halves * kPackRows;
  for (int64_t b = 0; b < nb; ++b, out += kQK) {
    const uint8_t* q = g + b * qb;
    if (dtype_ == DType::kQ8_0) {
      const float db = F16ToF32(d[b * kPackRows + i]);
      for (int e = 0; e < kQK; ++e) {
        out[e] = db * static_cast<float>(static_cast<int>(q[64 * (e / 4) + 4 * i + e % 4]) - 128);
      }
      continue;
    }
    const CodeFormat f = CodeFormatOf(dtype_);
    for (int e = 0; e < kQK; ++e) {
      const int h = e / 16, k = (e % 16) / 4, j = e % 4;
      const int code = ((q[64 * k + 4 * i + j] >> (4 * h)) & 0x0f) | PackedHighBits(q, f.bits, i, h, k, j) << 4;
      const int s = static_cast<int>((b * halves + (halves == 2 ? h : 0)) * kPackRows + i);
      const float db = F16ToF32(d[s]);
      const float off = f.stored_min ? F16ToF32(m[s]) : f.min_factor * db;
      out[e] = f.table != nullptr ? db * f.table[code] : db * static_cast<float>(code) + off;
    }
  }
}

}  // namespace cascade::kernels::cpu
