#include "kernels/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/fp8.h"
#include "core/half.h"
#include "core/quant_blocks.h"
#include "kernels/cpu/block_codes.h"

namespace cascade::kernels::cpu {
namespace {

inline int NearestInt(float x) { return static_cast<int>(std::lrintf(x)); }

absl::Status CheckRow(DType dtype, int64_t n) {
  if (n < 0 || n % BlockElems(dtype) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("row of ", n, " elements is not a multiple of ", BlockElems(dtype),
                                                   " (", std::string(DTypeName(dtype)), " block)"));
  }
  return absl::OkStatus();
}

// ---- Dequantization --------------------------------------------------------------------

void DequantQ8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = d * x[i].qs[j];
  }
}

void DequantQ4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * ((x[i].qs[j] & 0x0f) - 8);
      y[j + kQK / 2] = d * ((x[i].qs[j] >> 4) - 8);
    }
  }
}

void DequantQ4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    const float m = F16ToF32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * (x[i].qs[j] & 0x0f) + m;
      y[j + kQK / 2] = d * (x[i].qs[j] >> 4) + m;
    }
  }
}

void DequantF8E4M3B128(const BlockF8E4M3B128* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 128) {
    for (int j = 0; j < 128; ++j) y[j] = x[i].d * E4M3ToF32(x[i].qs[j]);
  }
}

void DequantI4G128(const BlockI4G128* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQG) {
    const float d = F16ToF32(x[i].d), z = F16ToF32(x[i].z);
    for (int j = 0; j < kQG; ++j) y[j] = d * (static_cast<float>(I4G128Quant(x[i], j)) - z);
  }
}

void DequantQ4_K(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d);
    const float dmin = F16ToF32(x[i].dmin);
    for (int pair = 0; pair < 4; ++pair, y += 64) {
      uint8_t sc0, mn0, sc1, mn1;
      UnpackQ4KScaleMin(x[i].scales, 2 * pair, &sc0, &mn0);
      UnpackQ4KScaleMin(x[i].scales, 2 * pair + 1, &sc1, &mn1);
      const uint8_t* q = x[i].qs + 32 * pair;
      for (int l = 0; l < 32; ++l) {
        y[l] = d * sc0 * (q[l] & 0x0f) - dmin * mn0;
        y[l + 32] = d * sc1 * (q[l] >> 4) - dmin * mn1;
      }
    }
  }
}

// Q6_K layout, per half h (128 elements) of the super-block and l in [0, 32):
// elements l, l+32, l+64, l+96 of the half take their low nibbles from ql[64h + l] (low),
// ql[64h + l + 32] (low), ql[64h + l] (high), ql[64h + l + 32] (high), and their two high
// bits from bits 0-1, 2-3, 4-5, 6-7 of qh[32h + l]. Element e of the block uses scale e / 16.
void DequantQ6_K(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = x[i].ql + 64 * h;
      const uint8_t* qh = x[i].qh + 32 * h;
      const int8_t* sc = x[i].scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int q0 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[l / 16 + 0] * q0;
        y[l + 32] = d * sc[l / 16 + 2] * q1;
        y[l + 64] = d * sc[l / 16 + 4] * q2;
        y[l + 96] = d * sc[l / 16 + 6] * q3;
      }
    }
  }
}

// The other block types through their common decoded form (block_codes.h).
void DequantCodes(DType dtype, const void* src, float* y, int64_t n) {
  const int8_t* table = CodeFormatOf(dtype).table;
  BlockCodes c;
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    DecodeBlock(dtype, static_cast<const uint8_t*>(src), b, &c);
    for (int e = 0; e < kQK; ++e) {
      const float v = table != nullptr ? static_cast<float>(table[c.code[e]]) : static_cast<float>(c.code[e]);
      y[e] = c.d[e / 16] * v + c.m[e / 16];
    }
  }
}

void DequantQ8_K(const BlockQ8_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    for (int j = 0; j < kQKK; ++j) y[j] = x[i].d * x[i].qs[j];
  }
}

// ---- Quantization ----------------------------------------------------------------------

void QuantQ8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(NearestInt(x[j] * id));
  }
}

// As ggml: the scale maps the element of largest magnitude to -8 exactly.
void QuantQ4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::clamp(NearestInt(x[j] * id) + 8, 0, 15);
      const int q1 = std::clamp(NearestInt(x[j + kQK / 2] * id) + 8, 0, 15);
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void QuantQ4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < kQK; ++j) {
      lo = std::min(lo, x[j]);
      hi = std::max(hi, x[j]);
    }
    const float d = (hi - lo) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    y[i].m = F32ToF16(lo);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::clamp(NearestInt((x[j] - lo) * id), 0, 15);
      const int q1 = std::clamp(NearestInt((x[j + kQK / 2] - lo) * id), 0, 15);
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// Round-to-nearest over each group's range, with an integer zero point (as GPTQ's RTN
// baseline and AWQ's zero-point mode do): d = (max - min) / 15, z = round(-min / d).
// As gguf-py's MXFP4.quantize_blocks: the exponent e = floor(log2(amax)) - 2 + 127 (so the
// largest value lands near 6, E2M1's largest), then each element's nearest table value.
void QuantMXFP4(const float* x, BlockMXFP4* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const int e = amax > 0.0f ? std::clamp(static_cast<int>(std::floor(std::log2(amax))) - 2 + 127, 0, 255) : 0;
    y[i].e = static_cast<uint8_t>(e);
    const float d = Mxfp4Scale(y[i].e);
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j) {
      int best = 0;
      for (int c = 1; c < 16; ++c) {
        if (std::fabs(d * kMxfp4Values[c] - x[j]) < std::fabs(d * kMxfp4Values[best] - x[j])) best = c;
      }
      q[j] = static_cast<uint8_t>(best);
    }
    for (int j = 0; j < kQK / 2; ++j) y[i].qs[j] = static_cast<uint8_t>(q[j] | q[j + kQK / 2] << 4);
  }
}

// The scale maps the block's largest magnitude to E4M3's largest, 448 (as FP8 quantizers do).
void QuantF8E4M3B128(const float* x, BlockF8E4M3B128* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 128) {
    float amax = 0.0f;
    for (int j = 0; j < 128; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / kE4M3Max;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = d;
    for (int j = 0; j < 128; ++j) y[i].qs[j] = F32ToE4M3(x[j] * id);
  }
}

void QuantI4G128(const float* x, BlockI4G128* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQG) {
    float lo = 0.0f, hi = 0.0f;  // The range always covers 0, so z lands in [0, 15].
    for (int j = 0; j < kQG; ++j) {
      lo = std::min(lo, x[j]);
      hi = std::max(hi, x[j]);
    }
    const float d = F16ToF32(F32ToF16((hi - lo) / 15.0f));
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const int z = std::clamp(NearestInt(-lo * id), 0, 15);
    y[i].d = F32ToF16(d);
    y[i].z = F32ToF16(static_cast<float>(z));
    std::memset(y[i].qs, 0, sizeof(y[i].qs));
    for (int j = 0; j < kQG; ++j) {
      const int q = std::clamp(NearestInt(x[j] * id) + z, 0, 15);
      y[i].qs[j / 8] |= static_cast<uint32_t>(q) << (4 * (j % 8));
    }
  }
}

void QuantQ4_K(const float* x, BlockQ4_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    // Per sub-block: x ~= scale * q - min with q in [0, 15] and min >= 0 (ggml's convention).
    float scales[8], mins[8];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      const float* xs = x + 32 * j;
      float lo = xs[0], hi = xs[0];
      for (int l = 1; l < 32; ++l) {
        lo = std::min(lo, xs[l]);
        hi = std::max(hi, xs[l]);
      }
      lo = std::min(lo, 0.0f);
      scales[j] = (hi - lo) / 15.0f;
      mins[j] = -lo;
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    const float d = max_scale / 63.0f;
    const float dmin = max_min / 63.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float idmin = dmin != 0.0f ? 1.0f / dmin : 0.0f;
    y[i].d = F32ToF16(d);
    y[i].dmin = F32ToF16(dmin);
    const float d_stored = F16ToF32(y[i].d);
    const float dmin_stored = F16ToF32(y[i].dmin);
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; ++j) {
      // Round the scale up so that the sub-block's range never clips.
      ls[j] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::ceil(scales[j] * id)), 0, 63));
      lm[j] = static_cast<uint8_t>(std::clamp(NearestInt(mins[j] * idmin), 0, 63));
    }
    // Inverse of `UnpackQ4KScaleMin`.
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    for (int j = 0; j < 8; ++j) {
      if (j < 4) {
        y[i].scales[j] |= ls[j];
        y[i].scales[j + 4] |= lm[j];
      } else {
        y[i].scales[j + 4] = static_cast<uint8_t>((ls[j] & 0x0f) | ((lm[j] & 0x0f) << 4));
        y[i].scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
        y[i].scales[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
      }
    }
    uint8_t q[kQKK];
    for (int j = 0; j < 8; ++j) {
      const float sc = d_stored * ls[j];
      const float mn = dmin_stored * lm[j];
      const float isc = sc != 0.0f ? 1.0f / sc : 0.0f;
      for (int l = 0; l < 32; ++l) {
        q[32 * j + l] = static_cast<uint8_t>(std::clamp(NearestInt((x[32 * j + l] + mn) * isc), 0, 15));
      }
    }
    for (int pair = 0; pair < 4; ++pair) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[32 * pair + l] = static_cast<uint8_t>(q[64 * pair + l] | (q[64 * pair + 32 + l] << 4));
      }
    }
  }
}

void QuantQ6_K(const float* x, BlockQ6_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    // Per group of 16: the element of largest magnitude maps to -32 (as ggml's
    // make_qx_quants starting point); group scales are then quantized to int8 against the
    // largest one.
    float scales[16];
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int g = 0; g < 16; ++g) {
      float amax = 0.0f, max = 0.0f;
      for (int l = 0; l < 16; ++l) {
        const float v = x[16 * g + l];
        if (std::fabs(v) > amax) {
          amax = std::fabs(v);
          max = v;
        }
      }
      scales[g] = max / -32.0f;
      if (std::fabs(scales[g]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[g]);
        max_scale = scales[g];
      }
    }
    const float iscale = max_scale != 0.0f ? -128.0f / max_scale : 0.0f;
    const float d = iscale != 0.0f ? 1.0f / iscale : 0.0f;
    y[i].d = F32ToF16(d);
    const float d_stored = F16ToF32(y[i].d);
    uint8_t q[kQKK];
    for (int g = 0; g < 16; ++g) {
      y[i].scales[g] = static_cast<int8_t>(std::clamp(NearestInt(iscale * scales[g]), -128, 127));
      const float s = d_stored * y[i].scales[g];
      const float is = s != 0.0f ? 1.0f / s : 0.0f;
      for (int l = 0; l < 16; ++l) {
        q[16 * g + l] = static_cast<uint8_t>(std::clamp(NearestInt(x[16 * g + l] * is), -32, 31) + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* qq = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        y[i].ql[64 * h + l] = static_cast<uint8_t>((qq[l] & 0x0f) | ((qq[l + 64] & 0x0f) << 4));
        y[i].ql[64 * h + l + 32] = static_cast<uint8_t>((qq[l + 32] & 0x0f) | ((qq[l + 96] & 0x0f) << 4));
        y[i].qh[32 * h + l] = static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) | ((qq[l + 64] >> 4) << 4) |
                                                   ((qq[l + 96] >> 4) << 6));
      }
    }
  }
}

void QuantQ8_K(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float amax = 0.0f;
    for (int j = 0; j < kQKK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = d;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) {
        const int q = NearestInt(x[16 * g + l] * id);
        y[i].qs[16 * g + l] = static_cast<int8_t>(q);
        sum += q;
      }
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace

absl::Status DequantizeRow(DType dtype, const void* src, float* dst, int64_t n) {
  const absl::Status row = CheckRow(dtype, n);
  if (!row.ok()) return row;
  const int64_t nb = n / BlockElems(dtype);
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, n * sizeof(float)); return absl::OkStatus();
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return absl::OkStatus();
    }
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(s[i]);
      return absl::OkStatus();
    }
    case DType::kQ8_0: DequantQ8_0(static_cast<const BlockQ8_0*>(src), dst, nb); return absl::OkStatus();
    case DType::kQ4_0: DequantQ4_0(static_cast<const BlockQ4_0*>(src), dst, nb); return absl::OkStatus();
    case DType::kQ4_1: DequantQ4_1(static_cast<const BlockQ4_1*>(src), dst, nb); return absl::OkStatus();
    case DType::kQ4_K: DequantQ4_K(static_cast<const BlockQ4_K*>(src), dst, nb); return absl::OkStatus();
    case DType::kQ6_K: DequantQ6_K(static_cast<const BlockQ6_K*>(src), dst, nb); return absl::OkStatus();
    case DType::kQ8_K: DequantQ8_K(static_cast<const BlockQ8_K*>(src), dst, nb); return absl::OkStatus();
    case DType::kI4_G128: DequantI4G128(static_cast<const BlockI4G128*>(src), dst, nb); return absl::OkStatus();
    case DType::kF8_E4M3_B128:
      DequantF8E4M3B128(static_cast<const BlockF8E4M3B128*>(src), dst, nb);
      return absl::OkStatus();
    default:
      if (HasBlockCodes(dtype)) {  // The other block types, through their decoded form.
        DequantCodes(dtype, src, dst, n);
        return absl::OkStatus();
      }
      return absl::UnimplementedError(absl::StrCat("DequantizeRow: unsupported dtype ", std::string(DTypeName(dtype))));
  }
}

absl::Status QuantizeRow(DType dtype, const float* src, void* dst, int64_t n) {
  const absl::Status row = CheckRow(dtype, n);
  if (!row.ok()) return row;
  const int64_t nb = n / BlockElems(dtype);
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, n * sizeof(float)); return absl::OkStatus();
    case DType::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
      return absl::OkStatus();
    }
    case DType::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToBf16(src[i]);
      return absl::OkStatus();
    }
    case DType::kQ8_0: QuantQ8_0(src, static_cast<BlockQ8_0*>(dst), nb); return absl::OkStatus();
    case DType::kQ4_0: QuantQ4_0(src, static_cast<BlockQ4_0*>(dst), nb); return absl::OkStatus();
    case DType::kQ4_1: QuantQ4_1(src, static_cast<BlockQ4_1*>(dst), nb); return absl::OkStatus();
    case DType::kQ4_K: QuantQ4_K(src, static_cast<BlockQ4_K*>(dst), nb); return absl::OkStatus();
    case DType::kQ6_K: QuantQ6_K(src, static_cast<BlockQ6_K*>(dst), nb); return absl::OkStatus();
    case DType::kQ8_K: QuantQ8_K(src, static_cast<BlockQ8_K*>(dst), nb); return absl::OkStatus();
    case DType::kI4_G128: QuantI4G128(src, static_cast<BlockI4G128*>(dst), nb); return absl::OkStatus();
    case DType::kF8_E4M3_B128: QuantF8E4M3B128(src, static_cast<BlockF8E4M3B128*>(dst), nb); return absl::OkStatus();
    case DType::kMXFP4: QuantMXFP4(src, static_cast<BlockMXFP4*>(dst), nb); return absl::OkStatus();
    default:
      return absl::UnimplementedError(absl::StrCat("QuantizeRow: unsupported dtype ", std::string(DTypeName(dtype))));
  }
}

}  // namespace cascade::kernels::cpu
