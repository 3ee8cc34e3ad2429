// The CPU's own layout for block-quantized weight matrices, made once at load time
// (`PackedWeight::Pack`) so that the matrix kernels stream one contiguous buffer with no
// gathers and no per-block shuffles (kernels/cpu/linear_packed_avx512.cc). Every GGUF type
// the CPU runs, Q8_0 and the 4-to-6-bit types of block_codes.h, is packed this way.
//
// Rows are interleaved in groups of `kPackRows` (16; the last group is padded with zero
// rows). Group g holds rows [16 g, 16 g + 16) as, with nb = n_in / 32 blocks per row:
//   quants  nb x QuantBytes: block b of the group is 16 rows x 32 weights, in the operand
//           order of `vpdpbusd` with a broadcast dword of the Q8 activations (16 rows x 4
//           consecutive weights per 64 bytes once unpacked):
//           4-6-bit codes (256 + 64 per extra bit): 4 chunks k of 64 bytes, row i's dword
//           at 64 k + 4 i holds in its low nibbles the low 4 bits of codes 4k..4k+3 and in
//           its high nibbles those of codes 16+4k..16+4k+3, so one AND (0x0f / 0xf0) gives
//           16 rows x 4 consecutive weights. Then the code bits above 4:
//           5-bit codes: one 64-byte plane whose byte 4 i + j holds in bit 2 k + h the
//             fifth bit of code 16 h + 4 k + j of row i: the bytes in the chunk's order, so
//             AVX-512 tests one bit per operand into a byte mask (`vptestmb`) and AVX2 puts
//             it in place with one shift and one AND;
//           6-bit codes: two 64-byte vectors (h = 0, 1) whose byte 4 i + j holds in bits
//             [2 k, 2 k + 2) bits 4-5 of code 16 h + 4 k + j of row i, so one shift and one
//             `vpternlogd` per operand put them in place (PackedCode below).
//           2-3-bit codes (128, 192): the low 2 bits as the 6-bit codes' two vectors (bits
//             [2 k, 2 k + 2) of byte 4 i + j of vector h: code 16 h + 4 k + j), one shift and
//             one AND per operand; a third bit as the 5-bit codes' mask plane (bit 2).
//           Q8_0 (512 bytes): 8 chunks k of 64 bytes, row i's dword at 64 k + 4 i is
//           elements 4k..4k+3 stored as q + 128 (u8), so `vpdpbusd` needs no sign fix; the
//           kernels subtract 128 * d * sum(x) instead.
//   scales, for the types with one scale per block (Q8_0, Q4_0/1, Q5_0/1, IQ4_NL, MXFP4):
//     d     nb x 16 f16 scales of the 16 rows, one 32-byte vector per block; MXFP4's
//           16 bytes, each the block's E8M0 exponent e - 1, so that its scale 2^(e - 128)
//           is the byte shifted into an f32's exponent field (PackedExponentScale; a
//           subnormal scale, e < 2, leaves the weight unpacked);
//     m     (Q4_1, Q5_1: a stored min) the offsets, likewise.
//   The super-block types (the K types and IQ4_XS, SubScales in block_codes.h) keep the
//   file's integer sub-scales under its f16 super-block scales, as ggml reads them, and
//   interleave them with the quants, one chunk per super-block of 256 weights (8 blocks),
//   so that a group is one stream: the chunk is the 8 blocks' quants, then
//     sub   8 x BlockScaleBytes: per block (per half for Q2_K, Q6_K), the 16 rows'
//           sub-scales in 16 bytes: Q6_K / IQ4_XS an i8 scale (IQ4_XS: the 6-bit value -
//           32), Q2_K one byte of 4-bit scale (low) and min (high); Q4_K / Q5_K their 6-bit
//           scales and mins, Q3_K its two halves' 6-bit scales (value + 32), in 6 bits:
//           192 bytes for the super-block (kSixBitPairBytes below);
//     super the 16 rows' f16 d (and dmin) vectors;
//   padded to a multiple of 32 bytes. Block b's scale is then d * sc (f32, ggml's own
//   product) and its offset -(dmin * mn). (A chunk as one stream read ~10% faster on one
//   core than the quants, sub-scales and super-scales as three sections of the group.)
//   The 6-bit types (Q3_K, Q4_K, Q5_K) put sub and super first, ahead of the quants
//   (PackedGeometry::head): their kernels read all of a super-block's sub-scales at its
//   first block, and one thread's Q4_K decode measured 2-3% faster with them leading the
//   chunk than trailing it.
// So x = d * V(code) + m, with V the IQ4_NL / MXFP4 table for the table types
// (block_codes.h) and the offset a fixed multiple of d for the types without a min
// (CodeFormat::min_factor). Bits per weight match the file's: Q2_K 2.625, Q3_K 3.4375,
// Q4_K 4.5, Q5_K 5.5, Q6_K 6.5625, MXFP4 4.25; IQ4_XS comes close (4.3125 against 4.25: a
// byte holds each 6-bit sub-scale).
// A chunk is a multiple of 32 bytes, not 64, so that Q3_K (1760 bytes) and Q6_K (3360)
// keep the file's bits: every other chunk of theirs starts 32 bytes into a cache line, and
// the AVX-512 kernels load chunks unaligned. The group stride is rounded up to 64 bytes
// and the buffer is 64-byte aligned.
//
// Thread-safety: immutable after Pack; const methods are safe from any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/block_codes.h"

namespace cascade::kernels::cpu {

inline constexpr int kPackRows = 16;
inline constexpr int kBlocksPerSuper = 8;  // 32-element blocks per 256-weight super-block.
inline constexpr int kChunkBlocks = 8;     // Blocks per chunk of the group's stream.

// The bit of a mask plane (the 5-bit codes' fifth bit, the 3-bit codes' third: bit 2 k + h
// of byte 4 i + j) and the 2-bit fields (bits [2 k, 2 k + 2) of byte 4 i + j of 64-byte
// vector h) for code e = 16 h + 4 k + j of row i (layouts above).
inline int PackedMaskBit(const uint8_t* plane, int i, int e) {
  const int h = e / 16, k = (e % 16) / 4, j = e % 4;
  return (plane[4 * i + j] >> (2 * k + h)) & 1;
}
inline int PackedTwoBits(const uint8_t* plane, int i, int e) {
  const int h = e / 16, k = (e % 16) / 4, j = e % 4;
  return (plane[64 * h + 4 * i + j] >> (2 * k)) & 3;
}

// The 6-bit sub-scales of one super-block in the file's 6 bits: 12 bytes per row, as in
// the file, two values (s = 0, 1) per block: Q4_K / Q5_K's scale and min, Q3_K's scales of
// halves 0 and 1 (+ 32). Row i's are in dword lane i of three 64-byte vectors:
//   A  bytes [0, 64):    byte 4 i + k holds the low 4 bits of block k's value 0 (low
//                        nibble) and of block k + 4's (high nibble), k = 0..3;
//   B  bytes [64, 128):  the same of the values 1;
//   C  bytes [128, 192): byte 4 i + k holds bits 4-5 of block k's value 0 in bits 0-1, of
//                        block k + 4's value 0 in 2-3, of block k's value 1 in 4-5, of
//                        block k + 4's value 1 in 6-7.
// So a kernel forms, per super-block, the blocks' values as bytes of the row lanes with a
// few whole-vector steps (SixBitPairBytes: values 0 of blocks 0-3, of 4-7, values 1 of
// 0-3, of 4-7, byte k of lane i block k's or k + 4's), then block t's is one byte of each
// lane: a shift and an AND per block, all in registers.
inline constexpr int64_t kSixBitPairBytes = 192;
// Row i's value s (0, 1: scale or min, Q3_K's half) of block t (0..7).
inline int SixBitPairValue(const uint8_t* p, int s, int t, int i) {
  const int low = (p[64 * s + 4 * i + t % 4] >> (4 * (t / 4))) & 0x0f;
  const int high = (p[128 + 4 * i + t % 4] >> (2 * (2 * s + t / 4))) & 3;
  return low | high << 4;
}
// Sets it to v (0..63) in zeroed bytes at `p`.
inline void SetSixBitPairValue(uint8_t* p, int s, int t, int i, int v) {
  p[64 * s + 4 * i + t % 4] |= static_cast<uint8_t>((v & 0x0f) << (4 * (t / 4)));
  p[128 + 4 * i + t % 4] |= static_cast<uint8_t>((v >> 4 & 3) << (2 * (2 * s + t / 4)));
}

// MXFP4's packed scale byte (its E8M0 exponent e - 1, e >= 2) as the f32 2^(e - 128):
// Mxfp4Scale(e), bit for bit.
inline float PackedExponentScale(uint8_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Code e (0..31) of row i in a packed block of `bits`-bit codes (layouts above): the
// scalar reading of DequantizeRow and the portable kernels. Inline, so that a kernel's
// constant `bits` folds the branches.
inline int PackedCode(const uint8_t* block, int bits, int i, int e) {
  if (bits <= 3) return PackedTwoBits(block, i, e) | (bits == 3 ? PackedMaskBit(block + 128, i, e) << 2 : 0);
  const int h = e / 16, k = (e % 16) / 4, j = e % 4;
  const int low = (block[64 * k + 4 * i + j] >> (4 * h)) & 0x0f;
  if (bits == 5) return low | PackedMaskBit(block + 256, i, e) << 4;
  if (bits == 6) return low | PackedTwoBits(block + 256, i, e) << 4;
  return low;
}

// Where things lie in a group of a packed dtype (layout above). Made by PackedGeometryOf;
// a kernel for one dtype holds it as a compile-time constant, so the offsets fold.
struct PackedGeometry {
  bool super_scaled = false;  // Chunks carry sub-scales and super-scales.
  int64_t quant = 0;          // Bytes of one block's quants.
  int64_t block_scale = 0;    // Bytes of one block's scales: f16 vectors, or sub-scales.
  int64_t super = 0;          // Bytes of one super-block's f16 d (and dmin) vectors.
  int64_t chunk = 0;          // Bytes of a chunk of 8 blocks, a multiple of 32.
  int64_t head = 0;           // The 6-bit types: the scales lead the chunk (this many bytes).

  constexpr int64_t QuantAt(int64_t b) const { return b / kChunkBlocks * chunk + head + b % kChunkBlocks * quant; }
  // The last chunk of a row of nb blocks may hold fewer than 8 (never a super-block type's).
  constexpr int64_t ScaleAt(int64_t nb, int64_t b) const {
    const int64_t c = b / kChunkBlocks;
    const int64_t quants = head != 0 ? 0 : std::min<int64_t>(kChunkBlocks, nb - c * kChunkBlocks) * quant;
    return c * chunk + quants + b % kChunkBlocks * block_scale;
  }
  constexpr int64_t SuperAt(int64_t sb) const {
    return sb * chunk + kChunkBlocks * block_scale + (head != 0 ? 0 : kChunkBlocks * quant);
  }
  // The sub-scales of super-block `sb` (ScaleAt of its first block).
  constexpr int64_t SubAt(int64_t sb) const { return sb * chunk + (head != 0 ? 0 : kChunkBlocks * quant); }
  // Bytes of a group's stream (before its rounding to 64), and per block.
  constexpr int64_t StreamBytes(int64_t nb) const {
    return nb / kChunkBlocks * chunk + nb % kChunkBlocks * (quant + block_scale);
  }
  constexpr int64_t StreamBytesPerBlock() const { return chunk / kChunkBlocks; }
};

class PackedWeight {
 public:
  // Whether `Pack` accepts weights of `dtype` (Q8_0 and every HasBlockCodes type).
  static bool Supports(DType dtype);
  // Repacks `weight` [n_out, n_in] (2-D, CPU, contiguous rows, n_in a multiple of 32) into
  // a new buffer; `weight` is only read during the call. Groups are packed on `pool`'s
  // threads when given (packing runs over every weight at load: one core packs a GGUF
  // K type at ~0.3-0.5 GB/s). Unimplemented for another dtype, InvalidArgument for a bad
  // shape or null data; ResourceExhausted if allocation fails.
  static absl::StatusOr<PackedWeight> Pack(const TensorView& weight, ThreadPool* pool = nullptr);

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

  // Bytes of one block of 16 rows' quants: 64 per code bit, 64 more for the 4-6-bit codes'
  // nibble split of 4 and 128 for the 2-3-bit codes' 2-bit planes (see above); 512 for Q8_0.
  static constexpr int64_t QuantBytes(DType dtype) {
    if (dtype == DType::kQ8_0) return 512;
    const int bits = CodeFormatOf(dtype).bits;
    return bits >= 4 ? 256 + 64 * (bits - 4) : 128 + 64 * (bits - 2);
  }
  // Scales per block and row: 2 for the 16-element-group types (one per half), else 1.
  static constexpr int Halves(DType dtype) { return dtype != DType::kQ8_0 && CodeFormatOf(dtype).sub16 ? 2 : 1; }
  // Whether `dtype` keeps integer sub-scales under f16 super-block scales.
  static constexpr bool SuperScaled(DType dtype) {
    return dtype != DType::kQ8_0 && CodeFormatOf(dtype).sub_scales != SubScales::kNone;
  }
  static constexpr bool StoredMin(DType dtype) { return dtype != DType::kQ8_0 && CodeFormatOf(dtype).stored_min; }
  // Bytes per block of the per-block scales: f16 vectors (types with a scale per block) or
  // the sub-scale bytes (super-block types; the 6-bit ones an eighth of kSixBitPairBytes).
  static constexpr int64_t BlockScaleBytes(DType dtype) {
    if (dtype == DType::kMXFP4) return 16;
    if (!SuperScaled(dtype)) return 32 * (StoredMin(dtype) ? 2 : 1);
    if (CodeFormatOf(dtype).sub_scales == SubScales::kSixBitPairs) return kSixBitPairBytes / kBlocksPerSuper;
    return 16 * Halves(dtype);
  }
  // Bytes per super-block of the f16 d (and dmin) vectors; 0 for the other types.
  static constexpr int64_t SuperBytes(DType dtype) { return SuperScaled(dtype) ? 32 * (StoredMin(dtype) ? 2 : 1) : 0; }

  // The scale d and offset m of half h of block b of row i in the group at `group` (nb
  // blocks per row), so that x = d * V(code) + m: the portable kernels' and
  // DequantizeRow's reading of the scales (the AVX-512 kernels read 16 rows at once).
  static void BlockScale(DType dtype, const uint8_t* group, int64_t nb, int64_t b, int h, int i, float* d, float* m);

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

constexpr PackedGeometry PackedGeometryOf(DType dtype) {
  PackedGeometry g;
  g.super_scaled = PackedWeight::SuperScaled(dtype);
  g.quant = PackedWeight::QuantBytes(dtype);
  g.block_scale = PackedWeight::BlockScaleBytes(dtype);
  g.super = PackedWeight::SuperBytes(dtype);
  g.chunk = (kChunkBlocks * (g.quant + g.block_scale) + g.super + 31) / 32 * 32;
  if (CodeFormatOf(dtype).sub_scales == SubScales::kSixBitPairs) g.head = kChunkBlocks * g.block_scale + g.super;
  return g;
}

// The scale d and offset m of half h of block b of row i in a group of nb blocks per row
// (x = d * V(code) + m), for a dtype of format `f` and geometry `geo` (Q8_0: CodeFormat
// with min_factor -128, its codes stored + 128). Inline, so that the portable kernels'
// constant format folds; PackedWeight::BlockScale is the same for a run-time dtype.
inline void PackedBlockScale(const CodeFormat& f, const PackedGeometry& geo, const uint8_t* group, int64_t nb,
                             int64_t b, int h, int i, float* d, float* m) {
  const uint8_t* s = group + geo.ScaleAt(nb, b);
  if (f.table == kMxfp4Values) {
    *d = PackedExponentScale(s[i]);
    *m = 0.0f;
    return;
  }
  if (f.sub_scales == SubScales::kNone) {
    const auto* v = reinterpret_cast<const uint16_t*>(s);
    *d = F16ToF32(v[i]);
    *m = f.stored_min ? F16ToF32(v[kPackRows + i]) : f.min_factor * *d;
    return;
  }
  const auto* sup = reinterpret_cast<const uint16_t*>(group + geo.SuperAt(b / kBlocksPerSuper));
  const uint8_t* v = s + 16 * (f.sub16 ? h : 0);
  int sc = 0, mn = 0;
  switch (f.sub_scales) {
    case SubScales::kSixBitPairs: {  // Scale and min, or (Q3_K) half h's scale.
      const uint8_t* p = group + geo.SubAt(b / kBlocksPerSuper);
      const int t = static_cast<int>(b % kBlocksPerSuper);
      sc = SixBitPairValue(p, f.sub16 ? h : 0, t, i) - f.sub_bias;
      if (!f.sub16) mn = SixBitPairValue(p, 1, t, i);
      break;
    }
    case SubScales::kI8: sc = static_cast<int8_t>(v[i]); break;
    case SubScales::kNibbles:
      sc = v[i] & 0x0f;
      mn = v[i] >> 4;
      break;
    case SubScales::kNone: break;
  }
  *d = F16ToF32(sup[i]) * static_cast<float>(sc);
  *m = f.stored_min ? -(F16ToF32(sup[kPackRows + i]) * static_cast<float>(mn)) : f.min_factor * *d;
}

}  // namespace cascade::kernels::cpu
