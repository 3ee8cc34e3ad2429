// The CPU's own layout for Q8_0 / Q4_0 / Q4_1 weight matrices, made once at load time
// (`PackedWeight::Pack`) so that the matrix-vector kernels stream one contiguous buffer with
// no gathers and no per-block shuffles (kernels/cpu/linear_packed_avx512.cc).
//
// Rows are interleaved in groups of `kPackRows` (16; the last group is padded with zero
// rows). Group g holds rows [16 g, 16 g + 16) as, with nb = n_in / 32 blocks per row:
//   quants  nb x kQuantBytes: block b of the group is 16 rows x 32 weights;
//           Q4_0/Q4_1 (256 bytes): 4 chunks k of 64 bytes, row i's dword at 64 k + 4 i is
//           bytes qs[4 k .. 4 k + 3] of the GGUF block: low nibbles are elements 4k..4k+3,
//           high nibbles elements 16+4k..16+4k+3, so one AND (0x0f / 0xf0) gives 16 rows x
//           4 consecutive weights, the operand order of `vpdpbusd` with a broadcast dword of
//           the Q8 activations.
//           Q8_0 (512 bytes): 8 chunks k of 64 bytes, row i's dword at 64 k + 4 i is
//           elements 4k..4k+3 stored as q + 128 (u8), so `vpdpbusd` needs no sign fix; the
//           kernels subtract 128 * d * sum(x) instead.
//   d       nb x 16 f16: the block scales of the 16 rows, one 32-byte vector per block.
//   m       (Q4_1 only) nb x 16 f16: the block mins, likewise.
// The group stride is rounded up to 64 bytes and the buffer is 64-byte aligned. The bytes
// per weight equal the GGUF layout's (plus the row padding), so decode streams as little.
//
// Thread-safety: immutable after Pack; const methods are safe from any thread.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace cascade::kernels::cpu {

inline constexpr int kPackRows = 16;

class PackedWeight {
 public:
  // Whether `Pack` accepts weights of `dtype` (Q8_0, Q4_0, Q4_1).
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

  // Bytes of one block of 16 rows' quants (256 for Q4_0/Q4_1, 512 for Q8_0).
  static int64_t QuantBytes(DType dtype) { return dtype == DType::kQ8_0 ? 512 : 256; }

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
