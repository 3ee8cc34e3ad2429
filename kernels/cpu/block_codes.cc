#include "kernels/cpu/block_codes.h"

#include "core/half.h"
#include "core/quant_blocks.h"

namespace cascade::kernels::cpu {
namespace {

// The super-block of type B that holds 32-element block `b` of a row; `*sub` is b's index
// among its 8 sub-blocks.
template <typename B>
const B& SuperBlock(const uint8_t* row, int64_t b, int* sub) {
  constexpr int kPer = kQKK / kQK;
  *sub = static_cast<int>(b % kPer);
  return reinterpret_cast<const B*>(row)[b / kPer];
}

void SetScales(BlockCodes* out, float d0, float m0, float d1, float m1) {
  out->d[0] = d0;
  out->m[0] = m0;
  out->d[1] = d1;
  out->m[1] = m1;
}

// Q4_0 / Q4_1 / IQ4_NL order: qs[j] holds element j (low nibble) and j + 16 (high).
void SplitNibbles(const uint8_t* qs, uint8_t* code) {
  for (int j = 0; j < 16; ++j) {
    code[j] = qs[j] & 0x0f;
    code[j + 16] = qs[j] >> 4;
  }
}

void DecodeQ4_0(const uint8_t* row, int64_t b, BlockCodes* out) {
  const auto& x = reinterpret_cast<const BlockQ4_0*>(row)[b];
  SplitNibbles(x.qs, out->code);
  const float d = F16ToF32(x.d);
  SetScales(out, d, -8.0f * d, d, -8.0f * d);
}

void DecodeQ4_1(const uint8_t* row, int64_t b, BlockCodes* out) {
  const auto& x = reinterpret_cast<const BlockQ4_1*>(row)[b];
  SplitNibbles(x.qs, out->code);
  const float d = F16ToF32(x.d), m = F16ToF32(x.m);
  SetScales(out, d, m, d, m);
}

uint32_t HighBits(const uint8_t qh[4]) {
  return static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 | static_cast<uint32_t>(qh[2]) << 16 |
         static_cast<uint32_t>(qh[3]) << 24;
}

void DecodeQ5_0(const uint8_t* row, int64_t b, BlockCodes* out) {
  const auto& x = reinterpret_cast<const BlockQ5_0*>(row)[b];
  SplitNibbles(x.qs, out->code);
  const uint32_t qh = HighBits(x.qh);
  for (int e = 0; e < 32; ++e) out->code[e] |= static_cast<uint8_t>(((qh >> e) & 1) << 4);
  const float d = F16ToF32(x.d);
  SetScales(out, d, -16.0f * d, d, -16.0f * d);
}

void DecodeQ5_1(const uint8_t* row, int64_t b, BlockCodes* out) {
  const auto& x = reinterpret_cast<const BlockQ5_1*>(row)[b];
  SplitNibbles(x.qs, out->code);
  const uint32_t qh = HighBits(x.qh);
  for (int e = 0; e < 32; ++e) out->code[e] |= static_cast<uint8_t>(((qh >> e) & 1) << 4);
  const float d = F16ToF32(x.d), m = F16ToF32(x.m);
  SetScales(out, d, m, d, m);
}

void DecodeIQ4_NL(const uint8_t* row, int64_t b, BlockCodes* out) {
  const auto& x = reinterpret_cast<const BlockIQ4_NL*>(row)[b];
  SplitNibbles(x.qs, out->code);
  const float d = F16ToF32(x.d);
  SetScales(out, d, 0.0f, d, 0.0f);
}

// Q4_K / Q5_K nibbles: sub-block s of the super-block uses qs[32 (s / 2) + l], the low
// nibble for even s.
void KNibbles(const uint8_t* qs, int s, uint8_t* code) {
  const uint8_t* q = qs + 32 * (s / 2);
  const int shift = 4 * (s % 2);
  for (int l = 0; l < 32; ++l) code[l] = (q[l] >> shift) & 0x0f;
}

// The factors of a super-block type's scales: d[h] = super_d * sc[h] (and m[h] =
// -(super_m * mn[h]) where `min_factor` is 0, else min_factor * d[h]).
void SetSuperScales(BlockCodes* out, uint16_t d16, uint16_t dmin16, int sc0, int mn0, int sc1, int mn1,
                    float min_factor) {
  out->super_d = F16ToF32(d16);
  out->super_m = F16ToF32(dmin16);
  out->sc[0] = sc0;
  out->sc[1] = sc1;
  out->mn[0] = mn0;
  out->mn[1] = mn1;
  const float d0 = out->super_d * static_cast<float>(sc0), d1 = out->super_d * static_cast<float>(sc1);
  if (min_factor != 0.0f) {
    SetScales(out, d0, min_factor * d0, d1, min_factor * d1);
  } else {
    SetScales(out, d0, -(out->super_m * static_cast<float>(mn0)), d1, -(out->super_m * static_cast<float>(mn1)));
  }
}

void KScaleMin(const uint8_t* scales, uint16_t d16, uint16_t dmin16, int s, BlockCodes* out) {
  uint8_t sc, mn;
  UnpackQ4KScaleMin(scales, s, &sc, &mn);
  SetSuperScales(out, d16, dmin16, sc, mn, sc, mn, 0.0f);
}

void DecodeQ4_K(const uint8_t* row, int64_t b, BlockCodes* out) {
  int s;
  const auto& x = SuperBlock<BlockQ4_K>(row, b, &s);
  KNibbles(x.qs, s, out->code);
  KScaleMin(x.scales, x.d, x.dmin, s, out);
}

void DecodeQ5_K(const uint8_t* row, int64_t b, BlockCodes* out) {
  int s;
  const auto& x = SuperBlock<BlockQ5_K>(row, b, &s);
  KNibbles(x.qs, s, out->code);
  for (int l = 0; l < 32; ++l) out->code[l] |= static_cast<uint8_t>(((x.qh[l] >> s) & 1) << 4);
  KScaleMin(x.scales, x.d, x.dmin, s, out);
}

void DecodeQ6_K(const uint8_t* row, int64_t b, BlockCodes* out) {
  int s;
  const auto& x = SuperBlock<BlockQ6_K>(row, b, &s);
  // Elements 32 s + l: half h = s / 4 of the super-block, quarter q = s % 4 within it.
  const int h = s / 4, q = s % 4;
  const uint8_t* ql = x.ql + 64 * h + 32 * (q % 2);
  const uint8_t* qh = x.qh + 32 * h;
  for (int l = 0; l < 32; ++l) {
    const int low = (ql[l] >> (4 * (q / 2))) & 0x0f;
    const int high = (qh[l] >> (2 * q)) & 3;
    out->code[l] = static_cast<uint8_t>(low | high << 4);
  }
  SetSuperScales(out, x.d, 0, x.scales[2 * s], 0, x.scales[2 * s + 1], 0, -32.0f);
}

// Q2_K / Q3_K 2-bit fields: element 32 s + l of the super-block is bits [2 j, 2 j + 2) of
// qs[32 n + l] with n = s / 4, j = s % 4.
void TwoBits(const uint8_t* qs, int s, uint8_t* code) {
  const uint8_t* q = qs + 32 * (s / 4);
  const int shift = 2 * (s % 4);
  for (int l = 0; l < 32; ++l) code[l] = (q[l] >> shift) & 3;
}

void DecodeQ2_K(const uint8_t* row, int64_t b, BlockCodes* out) {
  int s;
  const auto& x = SuperBlock<BlockQ2_K>(row, b, &s);
  TwoBits(x.qs, s, out->code);
  const uint8_t g0 = x.scales[2 * s], g1 = x.scales[2 * s + 1];
  SetSuperScales(out, x.d, x.dmin, g0 & 0x0f, g0 >> 4, g1 & 0x0f, g1 >> 4, 0.0f);
}

void DecodeQ3_K(const uint8_t* row, int64_t b, BlockCodes* out) {
  int s;
  const auto& x = SuperBlock<BlockQ3_K>(row, b, &s);
  TwoBits(x.qs, s, out->code);
  for (int l = 0; l < 32; ++l) out->code[l] |= static_cast<uint8_t>(((x.hmask[l] >> s) & 1) << 2);
  uint8_t sc[16];
  UnpackQ3KScales(x.scales, sc);
  SetSuperScales(out, x.d, 0, sc[2 * s] - 32, 0, sc[2 * s + 1] - 32, 0, -4.0f);
}

void DecodeMXFP4(const uint8_t* row, int64_t b, BlockCodes* out) {
  const auto& x = reinterpret_cast<const BlockMXFP4*>(row)[b];
  SplitNibbles(x.qs, out->code);
  const float d = Mxfp4Scale(x.e);
  SetScales(out, d, 0.0f, d, 0.0f);
}

void DecodeIQ4_XS(const uint8_t* row, int64_t b, BlockCodes* out) {
  int s;
  const auto& x = SuperBlock<BlockIQ4_XS>(row, b, &s);
  SplitNibbles(x.qs + 16 * s, out->code);
  const int ls = ((x.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) | (((x.scales_h >> (2 * s)) & 3) << 4);
  SetSuperScales(out, x.d, 0, ls - 32, 0, ls - 32, 0, 0.0f);
  out->m[0] = out->m[1] = 0.0f;  // A table type: no offset.
}

}  // namespace

void DecodeBlock(DType dtype, const uint8_t* row, int64_t b, BlockCodes* out) {
  switch (dtype) {
    case DType::kQ4_0: DecodeQ4_0(row, b, out); return;
    case DType::kQ4_1: DecodeQ4_1(row, b, out); return;
    case DType::kQ5_0: DecodeQ5_0(row, b, out); return;
    case DType::kQ5_1: DecodeQ5_1(row, b, out); return;
    case DType::kQ2_K: DecodeQ2_K(row, b, out); return;
    case DType::kQ3_K: DecodeQ3_K(row, b, out); return;
    case DType::kQ4_K: DecodeQ4_K(row, b, out); return;
    case DType::kQ5_K: DecodeQ5_K(row, b, out); return;
    case DType::kQ6_K: DecodeQ6_K(row, b, out); return;
    case DType::kIQ4_NL: DecodeIQ4_NL(row, b, out); return;
    case DType::kIQ4_XS: DecodeIQ4_XS(row, b, out); return;
    case DType::kMXFP4: DecodeMXFP4(row, b, out); return;
    default: return;
  }
}

}  // namespace cascade::kernels::cpu
