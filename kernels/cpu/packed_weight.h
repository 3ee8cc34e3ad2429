// The CPU's own layout for block-quantized weight matrices, made once at load time
// (`PackedWeight::Pack`) so that the matrix kernels stream one contiguous buffer with no
// gathers and no per-block shuffles (kernels/cpu/linear_packed_avx512.cc). Every GGUF type
// the CPU runs, Q8_0 and the 4-to-6-bit types of block_codes.h, is packed this way.
//
// Rows are interleaved in groups of `kPackRows` (16; the last group is padded with zero
// rows). Group g holds rows [16 g, 16 g + 16) as, with nb = n_in / 32 blocks per row:
//   quants  nb x QuantBytes: block b of the group is 16 rows x 32 weights;
//           4-6-bit codes (256 + 64 per extra bit): 4 chunks k of 64 bytes, row i's dword
//           at 64 k + 4 i holds in its low nibbles the low 4 bits of codes 4k..4k+3 and in
//           its high nibbles those of codes 16+4k..16+4k+3, so one AND (0x0f / 0xf0) gives
//           16 rows x 4 consecutive weights, the operand order of `vpdpbusd` with a
//           broadcast dword of the Q8 activations. Then the code bits above 4:
//           5-bit codes: one 64-byte plane of 8 little-endian u64 masks, mask 2 k + h holding
//             in bit 4 i + j the fifth bit of code 16 h + 4 k + j of row i: the byte order of
//             the chunk, so an AVX-512 masked add puts the bit in place;
//           6-bit codes: two 64-byte vectors (h = 0, 1) whose byte 4 i + j holds in bits
//             [2 k, 2 k + 2) bits 4-5 of code 16 h + 4 k + j of row i, so one shift and one
//             `vpternlogd` per operand put them in place (PackedHighBits below).
//           Q8_0 (512 bytes): 8 chunks k of 64 bytes, row i's dword at 64 k + 4 i is
//           elements 4k..4k+3 stored as q + 128 (u8), so `vpdpbusd` needs no sign fix; the
//           kernels subtract 128 * d * sum(x) instead.
//   d       nb x 16 f16 scales of the 16 rows, one 32-byte vector per block; types with
//           16-element groups (Q2_K, Q3_K, Q6_K) have two per block (halves 0, 1).
//   m       (types with a stored min: Q4_1, Q5_1, Q4_K, Q5_K, Q2_K) the offsets, likewise.
//           The others' offset is a fixed multiple of d (CodeFormat::min_factor).
// So x = d * V(code) + m, with V the IQ4_NL table for IQ4_NL / IQ4_XS (block_codes.h).
// The K types' scales are the f32 products d * sc and dmin * mn rounded to f16 (relative
// error <= 2^-11, far below the 4-bit step); the bytes per weight stay close to the
// file's: Q4_K 5.0 bits (file 4.5), Q5_K 6.0 (5.5), Q6_K 7.0 (6.56), IQ4_XS 4.5 (4.25),
// Q3_K 5.0 (3.44) and Q2_K 6.0 (2.63), the last two wider because their codes sit in nibbles.
// The group stride is rounded up to 64 bytes and the buffer is 64-byte aligned.
//
// Thread-safety: immutable after Pack; const methods are safe from any thread.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cpu/block_codes.h"

namespace cascade::kernels::cpu {

inline constexpr int kPackRows = 16;

// The code bits above the low 4 (0 for 4-bit codes) of code 16 h + 4 k + j of row i in a
// packed block of `bits`-bit codes, and the writer the packer uses (layouts above).
inline int PackedHighBits(const uint8_t* block, int bits, int i, int h, int k, int j) {
  if (bits == 5) {
    uint64_t mask;
    std::memcpy(&mask, block + 256 + 8 * (2 * k + h), 8);
    return static_cast<int>((mask >> (4 * i + j)) & 1);
  }
  if (bits == 6) return (block[256 + 64 * h + 4 * i + j] >> (2 * k)) & 3;
  return 0;
}
inline void SetPackedHighBits(uint8_t* block, int bits, int i, int h, int k, int j, int high) {
  if (bits == 5) {
    uint64_t mask;
    std::memcpy(&mask, block + 256 + 8 * (2 * k + h), 8);
    mask |= static_cast<uint64_t>(high & 1) << (4 * i + j);
    std::memcpy(block + 256 + 8 * (2 * k + h), &mask, 8);
  } else if (bits == 6) {
    block[256 + 64 * h + 4 * i + j] |= static_cast<uint8_t>((high & 3) << (2 * k));
  }
}

class PackedWeight {
 public:
  // Whether `Pack` accepts weights of `dtype` (Q8_0 and every HasBlockCodes type).
  static bool Supports(DType dtype);
  // Repacks `weight` [n_out, n_in] (2-D, CPU, contiguous rows, n_in a multiple of 32) into
  // a new buffer; `weight` is only read during the call. Unimplemented for another dtype,
  // InvalidArgument for a bad shape or null data; ResourceExhausted if allocation fails.
  static absl::StatusOr<PackedWeight> Pack(const TensorView& weight);

  PackedWeight(PackedWeight&&) = default;
  PackedWeight& operator=(PackedWeight&&) = default;
  PackedWeight(const PackedWeight&) = delete;
  PackedWeight& operator=(const PackedWeight&) = delete;

  DType dtype() const { return dtype_; }
  int64_t n_out() const { return n_out_; }
  int64_t n_in() const { return n_in_; }
  int64_t n_groups() const { return (n_out_ + kPackRows - 1) / kPackRows; }
  // Bytes from one group to the next (a multiple of 64).
  int64_t group_bytes() const { return group_bytes_; }
  int64_t bytes() const { return n_groups() * group_bytes_; }
  const uint8_t* data() const { return data_.get(); }

  // Bytes of one block of 16 rows' quants (256 + 64 per code bit above 4; 512 for Q8_0).
  static constexpr int64_t QuantBytes(DType dtype) {
    return dtype == DType::kQ8_0 ? 512 : 256 + 64 * (CodeFormatOf(dtype).bits - 4);
  }
  // f16 vectors of 16 scales per block (1 or 2), and of offsets (0, 1 or 2).
  static constexpr int64_t ScaleVectors(DType dtype) {
    return dtype == DType::kQ8_0 ? 1 : (CodeFormatOf(dtype).sub16 ? 2 : 1);
  }
  static constexpr int64_t MinVectors(DType dtype) {
    return dtype == DType::kQ8_0 || !CodeFormatOf(dtype).stored_min ? 0 : ScaleVectors(dtype);
  }

  // Row `r` (< n_out) as f32 [n_in] (the embedding lookup of a packed table).
  void DequantizeRow(int64_t r, float* out) const;

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  PackedWeight() = default;

  DType dtype_ = DType::kQ4_0;
  int64_t n_out_ = 0;
  int64_t n_in_ = 0;
  int64_t group_bytes_ = 0;
  std::unique_ptr<uint8_t[], Free> data_;
};

}  // namespace cascade::kernels::cpu
