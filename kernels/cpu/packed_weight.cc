#include "kernels/cpu/packed_weight.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/half.h"
#include "core/huge_pages.h"
#include "core/quant_blocks.h"
#include "core/status.h"

namespace cascade::kernels::cpu {
namespace {

void PackQ8Group(const uint8_t* src, int64_t row_bytes, int64_t r0, int n_rows, int64_t nb, uint8_t* dst) {
  constexpr PackedGeometry kGeo = PackedGeometryOf(DType::kQ8_0);
  for (int i = 0; i < n_rows; ++i) {
    const auto* w = reinterpret_cast<const BlockQ8_0*>(src + (r0 + i) * row_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* q = dst + kGeo.QuantAt(b);
      reinterpret_cast<uint16_t*>(dst + kGeo.ScaleAt(nb, b))[i] = w[b].d;
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

// Writes row i's scales of block b (decoded as `c`) into the group at `dst`.
absl::Status PackScales(DType dtype, const CodeFormat& f, const PackedGeometry& geo, const BlockCodes& c, int64_t row,
                        int i, int64_t nb, int64_t b, uint8_t* dst) {
  uint8_t* s = dst + geo.ScaleAt(nb, b);
  if (dtype == DType::kMXFP4) {
    // 2^(e - 128) is (e - 1) << 23 as f32 bits for e >= 2; the two subnormal scales (e = 0,
    // 1: never a trained weight's) leave the weight unpacked, read by the file's kernels.
    uint32_t bits;
    std::memcpy(&bits, &c.d[0], 4);
    if ((bits & 0x807fffffu) != 0 || bits == 0) {
      return absl::UnimplementedError(
          absl::StrCat("PackedWeight: row ", row, " has an MXFP4 scale ", c.d[0], " below 2^-126"));
    }
    s[i] = static_cast<uint8_t>(bits >> 23);
    return absl::OkStatus();
  }
  if (f.sub_scales == SubScales::kNone) {
    auto* d = reinterpret_cast<uint16_t*>(s);
    CASCADE_RETURN_IF_ERROR(ToF16(c.d[0], row, &d[i]));
    if (f.stored_min) CASCADE_RETURN_IF_ERROR(ToF16(c.m[0], row, &d[kPackRows + i]));
    return absl::OkStatus();
  }
  for (int h = 0; h < (f.sub16 ? 2 : 1); ++h) {
    uint8_t* v = s + 16 * h;
    switch (f.sub_scales) {
      case SubScales::kSixBitPairs: {  // Scale and min, or (Q3_K) half h's scale.
        uint8_t* p = dst + geo.SubAt(b / kBlocksPerSuper);
        const int t = static_cast<int>(b % kBlocksPerSuper);
        if (f.sub16) {
          SetSixBitPairValue(p, h, t, i, c.sc[h] + f.sub_bias);
        } else {
          SetSixBitPairValue(p, 0, t, i, c.sc[0]);
          SetSixBitPairValue(p, 1, t, i, c.mn[0]);
        }
        break;
      }
      case SubScales::kI8: v[i] = static_cast<uint8_t>(static_cast<int8_t>(c.sc[h])); break;
      case SubScales::kNibbles: v[i] = static_cast<uint8_t>(c.sc[h] | c.mn[h] << 4); break;
      case SubScales::kNone: break;
    }
  }
  if (b % kBlocksPerSuper == 0) {  // The file's f16 values: exact.
    auto* sup = reinterpret_cast<uint16_t*>(dst + geo.SuperAt(b / kBlocksPerSuper));
    CASCADE_RETURN_IF_ERROR(ToF16(c.super_d, row, &sup[i]));
    if (f.stored_min) CASCADE_RETURN_IF_ERROR(ToF16(c.super_m, row, &sup[kPackRows + i]));
  }
  return absl::OkStatus();
}

// Row i's 32 codes into the (zeroed) packed block at `q` (layout in packed_weight.h), a
// whole byte or mask at a time: packing runs at load, over every weight.
void PackRowCodes(const uint8_t code[32], int bits, int i, uint8_t* q) {
  const auto or_mask = [&](uint8_t* plane, int shift) {  // Bit `shift` of each code.
    for (int j = 0; j < 4; ++j) {
      int byte = 0;
      for (int h = 0; h < 2; ++h) {
        for (int k = 0; k < 4; ++k) byte |= ((code[16 * h + 4 * k + j] >> shift) & 1) << (2 * k + h);
      }
      plane[4 * i + j] = static_cast<uint8_t>(byte);
    }
  };
  const auto two_bits = [&](uint8_t* plane, int shift) {  // Bits [shift, shift + 2).
    for (int h = 0; h < 2; ++h) {
      for (int j = 0; j < 4; ++j) {
        int byte = 0;
        for (int k = 0; k < 4; ++k) byte |= ((code[16 * h + 4 * k + j] >> shift) & 3) << (2 * k);
        plane[64 * h + 4 * i + j] = static_cast<uint8_t>(byte);
      }
    }
  };
  if (bits <= 3) {
    two_bits(q, 0);
    if (bits == 3) or_mask(q + 128, 2);
    return;
  }
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < 4; ++j) {
      q[64 * k + 4 * i + j] = static_cast<uint8_t>((code[4 * k + j] & 0x0f) | (code[16 + 4 * k + j] & 0x0f) << 4);
    }
  }
  if (bits == 5) or_mask(q + 256, 4);
  if (bits == 6) two_bits(q + 256, 4);
}

// Packs rows [r0, r0 + n_rows) of a HasBlockCodes dtype into the group at `dst` (zeroed).
absl::Status PackCodeGroup(DType dtype, const uint8_t* src, int64_t row_bytes, int64_t r0, int n_rows, int64_t nb,
                           uint8_t* dst) {
  const CodeFormat f = CodeFormatOf(dtype);
  const PackedGeometry geo = PackedGeometryOf(dtype);
  BlockCodes c;
  for (int i = 0; i < n_rows; ++i) {
    const uint8_t* row = src + (r0 + i) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      DecodeBlock(dtype, row, b, &c);
      PackRowCodes(c.code, f.bits, i, dst + geo.QuantAt(b));
      CASCADE_RETURN_IF_ERROR(PackScales(dtype, f, geo, c, r0 + i, i, nb, b, dst));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void PackedWeight::BlockScale(DType dtype, const uint8_t* group, int64_t nb, int64_t b, int h, int i, float* d,
                              float* m) {
  PackedBlockScale(dtype == DType::kQ8_0 ? CodeFormat{.min_factor = -128.0f} : CodeFormatOf(dtype),
                   PackedGeometryOf(dtype), group, nb, b, h, i, d, m);
}

bool PackedWeight::Supports(DType dtype) { return dtype == DType::kQ8_0 || HasBlockCodes(dtype); }

absl::StatusOr<PackedWeight> PackedWeight::Pack(const TensorView& weight, ThreadPool* pool) {
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
  p.group_bytes_ = (PackedGeometryOf(p.dtype_).StreamBytes(nb) + 63) / 64 * 64;
  const int64_t total = std::max<int64_t>(64, p.bytes());
  p.data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, static_cast<size_t>(total))));
  if (p.data_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("PackedWeight: cannot allocate ", total, " bytes"));
  }
  AdviseHugePages(p.data_.get(), static_cast<size_t>(total));  // Streamed whole every decode step.
  const auto* src = static_cast<const uint8_t*>(weight.data);
  const int64_t row_bytes = weight.RowBytes();
  if (p.n_groups() == 0) std::memset(p.data_.get(), 0, static_cast<size_t>(total));
  // Each group zeroed (padding rows: d = 0, q = 0) and packed by the thread that writes it.
  const auto pack_groups = [&](int64_t g0, int64_t g1) -> absl::Status {
    for (int64_t g = g0; g < g1; ++g) {
      const int n_rows = static_cast<int>(std::min<int64_t>(kPackRows, p.n_out_ - g * kPackRows));
      uint8_t* dst = p.data_.get() + g * p.group_bytes_;
      std::memset(dst, 0, static_cast<size_t>(p.group_bytes_));
      if (p.dtype_ == DType::kQ8_0) {
        PackQ8Group(src, row_bytes, g * kPackRows, n_rows, nb, dst);
      } else {
        CASCADE_RETURN_IF_ERROR(PackCodeGroup(p.dtype_, src, row_bytes, g * kPackRows, n_rows, nb, dst));
      }
    }
    return absl::OkStatus();
  };
  if (pool == nullptr) {
    CASCADE_RETURN_IF_ERROR(pack_groups(0, p.n_groups()));
    return p;
  }
  std::vector<absl::Status> errors(static_cast<size_t>(pool->n_threads()));  // The first per thread.
  pool->ParallelForChunked(p.n_groups(), 16, [&](int64_t g0, int64_t g1, int thread) {
    if (errors[thread].ok()) errors[thread] = pack_groups(g0, g1);
  });
  for (const absl::Status& e : errors) CASCADE_RETURN_IF_ERROR(e);
  return p;
}

void PackedWeight::DequantizeRow(int64_t r, float* out) const {
  const int64_t nb = n_in_ / kQK;
  const uint8_t* g = data_.get() + (r / kPackRows) * group_bytes_;
  const int i = static_cast<int>(r % kPackRows);
  for (int64_t b = 0; b < nb; ++b, out += kQK) {
    const uint8_t* q = g + PackedGeometryOf(dtype_).QuantAt(b);
    float d[2], m[2];
    for (int h = 0; h < 2; ++h) BlockScale(dtype_, g, nb, b, h, i, &d[h], &m[h]);
    if (dtype_ == DType::kQ8_0) {
      for (int e = 0; e < kQK; ++e) out[e] = d[0] * static_cast<float>(q[64 * (e / 4) + 4 * i + e % 4]) + m[0];
      continue;
    }
    const CodeFormat f = CodeFormatOf(dtype_);
    for (int e = 0; e < kQK; ++e) {
      const int code = PackedCode(q, f.bits, i, e);
      const int h = e / 16;
      out[e] = f.table != nullptr ? d[h] * f.table[code] : d[h] * static_cast<float>(code) + m[h];
    }
  }
}

}  // namespace cascade::kernels::cpu
