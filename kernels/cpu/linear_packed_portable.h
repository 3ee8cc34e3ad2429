// Private to kernels/cpu/linear_generic.cc: the portable kernel over packed weights of the
// block-code types (packed_weight.h), in plain C++ written so that the compiler vectorises
// it across the 16 rows of a group, for the baseline ISA (the reference the AVX2 and
// AVX-512 kernels are tested against).
//
// Per group and block: the 16 rows x 32 codes are unpacked once into values V (int16,
// element-major so that row i is the inner index), then every token's int8 activations
// meet them in int32 dot products per half (one scale per 16 or 32 elements), scaled in
// f32: out += d * xd * dot + m * xs (xs: the activation block sums, per 16 or 32).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/cpu/block_codes.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu/packed_weight.h"

// An unnamed namespace: each including file gets its own copy, compiled for its own ISA.
namespace cascade::kernels::cpu::internal {
namespace {
namespace portable {

// Values of block `q` (QuantBytes(D) bytes of one group), element-major: v[e][i].
template <DType D>
inline void UnpackBlock(const uint8_t* q, int16_t v[32][kPackRows]) {
  constexpr CodeFormat f = CodeFormatOf(D);
  // A byte (and a mask) at a time in the layout's order, row i's bytes at 4 i + j, which the
  // compiler vectorises; PackedCode (element by element) is the same reading, several times
  // slower. Bit 2 k + h of plane byte 4 i + j is that of code 16 h + 4 k + j of row i
  // (packed_weight.h).
  const auto mask = [q](int offset, int i, int j, int k, int h) { return (q[offset + 4 * i + j] >> (2 * k + h)) & 1; };
  if constexpr (f.bits <= 3) {
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; ++k) {
        for (int i = 0; i < kPackRows; ++i) {
          for (int j = 0; j < 4; ++j) {
            const int low = (q[64 * h + 4 * i + j] >> (2 * k)) & 3;
            const int third = f.bits == 3 ? mask(128, i, j, k, h) : 0;
            v[16 * h + 4 * k + j][i] = static_cast<int16_t>(low | third << 2);
          }
        }
      }
    }
  } else {
    for (int k = 0; k < 4; ++k) {
      for (int i = 0; i < kPackRows; ++i) {
        for (int j = 0; j < 4; ++j) {
          const uint8_t byte = q[64 * k + 4 * i + j];
          int lo = byte & 0x0f, hi = byte >> 4;
          if constexpr (f.bits == 5) {
            lo |= mask(256, i, j, k, 0) << 4;
            hi |= mask(256, i, j, k, 1) << 4;
          } else if constexpr (f.bits == 6) {
            lo |= PackedTwoBits(q + 256, i, 4 * k + j) << 4;
            hi |= PackedTwoBits(q + 256, i, 16 + 4 * k + j) << 4;
          }
          if constexpr (f.table != nullptr) {
            lo = f.table[lo];
            hi = f.table[hi];
          }
          v[4 * k + j][i] = static_cast<int16_t>(lo);
          v[16 + 4 * k + j][i] = static_cast<int16_t>(hi);
        }
      }
    }
  }
}

template <DType D>
void GemmPackedCodes(const GemmArgs& a, int64_t rb, int64_t re) {
  constexpr CodeFormat f = CodeFormatOf(D);
  constexpr int kH = f.sub16 ? 2 : 1;
  constexpr PackedGeometry kGeo = PackedGeometryOf(D);
  const int64_t nb = a.n_in / kQK;
  alignas(64) int16_t v[32][kPackRows];
  for (int64_t r0 = rb; r0 < re; r0 += kPackRows) {
    const uint8_t* g = a.w + (r0 / kPackRows) * a.w_row_bytes;
    const int n_rows = static_cast<int>(std::min<int64_t>(kPackRows, re - r0));
    for (int64_t t = 0; t < a.n_tokens; ++t) std::fill_n(a.out + t * a.ld_out + r0, n_rows, 0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      UnpackBlock<D>(g + kGeo.QuantAt(b), v);
      float d[kH][kPackRows], m[kH][kPackRows];
      for (int h = 0; h < kH; ++h) {
        for (int i = 0; i < kPackRows; ++i) PackedBlockScale(f, kGeo, g, nb, b, h, i, &d[h][i], &m[h][i]);
      }
      for (int64_t t = 0; t < a.n_tokens; ++t) {
        const int8_t* x = a.xq + t * a.n_in + b * kQK;
        int32_t dot[kH][kPackRows] = {};
        for (int e = 0; e < kQK; ++e) {
          const int h = kH == 2 ? e / 16 : 0;
          for (int i = 0; i < kPackRows; ++i) dot[h][i] += v[e][i] * x[e];
        }
        const float xd = a.xd[t * nb + b];
        float* o = a.out + t * a.ld_out + r0;
        for (int h = 0; h < kH; ++h) {
          const float xs = kH == 2 ? a.xs16[t * 2 * nb + 2 * b + h] : a.xs[t * nb + b];
          for (int i = 0; i < n_rows; ++i) o[i] += d[h][i] * xd * static_cast<float>(dot[h][i]) + m[h][i] * xs;
        }
      }
    }
  }
}

// Fills `t.packed` for every block-code dtype.
inline void AddPackedCodeKernels(KernelTable& t) {
#define CASCADE_PACKED_CODE_ENTRY(D) t.packed[static_cast<int>(D)] = GemmPackedCodes<D>;
  CASCADE_FOR_EACH_CODE_DTYPE(CASCADE_PACKED_CODE_ENTRY)
#undef CASCADE_PACKED_CODE_ENTRY
}

}  // namespace portable
}  // namespace
}  // namespace cascade::kernels::cpu::internal
