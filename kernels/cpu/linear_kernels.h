// Private to kernels/cpu/linear*.cc: the per-ISA kernel entry points behind `Linear`.
// Every kernel computes rows [row_begin, row_end) of the output for all tokens; the
// dispatcher (linear.cc) validates shapes first, so kernels assume them.
// Thread-safety: kernels are pure functions of their arguments; concurrent calls on
// disjoint output rows are safe.
#pragma once

#include <xmmintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/quant_blocks.h"
#include "kernels/cpu/block_codes.h"

namespace cascade::kernels::cpu::internal {

struct GemmArgs {
  float* out = nullptr;  // [n_tokens, ld_out]; row r of token t at out[t * ld_out + r].
  int64_t ld_out = 0;
  // GGUF layout: [n_out, n_in] in the weight dtype, rows `w_row_bytes` apart.
  // Packed layout (packed_weight.h, `KernelTable::packed`): the groups of 16 rows,
  // `w_row_bytes` = PackedWeight::group_bytes() apart; row ranges then start at a multiple
  // of 16 and rows past `row_end` in the last group are computed but not stored.
  const uint8_t* w = nullptr;
  int64_t w_row_bytes = 0;
  int64_t n_in = 0;
  int64_t n_tokens = 0;
  // Activations, per ActivationFormat of the weight dtype.
  const float* x = nullptr;       // kF32: [n_tokens, n_in].
  const int8_t* xq = nullptr;     // kQ8Block: [n_tokens, n_in].
  const float* xd = nullptr;      //   [n_tokens, n_in / 32] scales.
  const float* xs = nullptr;      //   [n_tokens, n_in / 32] scale * sum of quants.
  const float* xs16 = nullptr;    //   [n_tokens, n_in / 16] the same per 16 elements.
  const int16_t* xi16 = nullptr;  //   [n_tokens, n_in / 16] sums of the quants per 16.
  const BlockQ8_K* xk = nullptr;  // kQ8K: [n_tokens, n_in / 256].
  // kF32 activations rounded to bf16 [n_tokens, n_in] (QuantizedActivations::RoundToBf16),
  // set where a kernel multiplies bf16 pairs (LinearOptions::bf16_prefill): then the
  // F8_E4M3_B128 prefill on AVX512_BF16 CPUs runs on them (GemmF8Avx512). Null otherwise.
  const uint16_t* xb = nullptr;
};

using GemmFn = void (*)(const GemmArgs& args, int64_t row_begin, int64_t row_end);

// How far ahead of its read position a weight row is prefetched into L2 (`_MM_HINT_T1`) by
// the AVX2 float and FP8 kernels (a stream per row). Measured in linear_packed_avx512.cc
// (Intel) and linear_float_avx512.cc (AMD): shorter distances left batch-1 decode waiting
// on memory, and into L1 that far ahead evicts the lines in use. 32 KiB since a Zen 5 VM
// (41 GB/s a core), where the AVX-512 kernels, then prefetching the same way, streamed the
// 1B FP8 and BF16 decodes' weights at 26-27 GB/s on one thread at 16 KiB, 29.5-30.4 at
// 32 KiB, 28-30 at 64 and 128 KiB, 26-27 at 4 KiB (`linear_bench --model=1b --quick`); a
// Zen 3 VM read a BF16 head at 27.9 / 50.5 GB/s (1 / 2 threads) at 16 KiB, 29.7 / 63.0 at
// 32 KiB; not re-measured on Intel.
inline constexpr int64_t kPrefetchBytes = 32768;

// The AVX-512 row-major kernels (float, FP8) prefetch instead the rows of a tile ahead,
// which follow the current tile's rows in memory, as one sequential stream into L2: at each
// step, `bytes` from `offset` on past `tile` (TileToPrefetch), the same share of it as the
// step reads of the current tile. Their R row streams, each prefetched kPrefetchBytes
// ahead, read 29-30 GB/s on one thread of a Zen 5 VM whose probe reads 41; one stream
// reads 40-41 (BF16 and F16 weights of the 1B decode, `linear_bench --model=1b --quick`,
// interleaved; two threads 67-76 against 36-56, FP8 34 against 29-30 on one thread).
inline void PrefetchNextTile(const uint8_t* tile, int64_t offset, int64_t bytes) {
  for (int64_t l = 0; l < bytes; l += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(tile + offset + l), _MM_HINT_T1);
  }
}
// Where the FP8 GEMV's tile at `tile` points PrefetchNextTile: the first tile of
// `tile_bytes` at least kPrefetchBytes ahead, or null when that lies past `range_end` (the
// end of the kernel's rows: nothing of them left to fetch; PrefetchRangeStart fetched the
// first ones). The next tile was too close: the FP8 tile of 4 rows of 2048 inputs is 8.4
// KB, and the 1B FP8 decode ran 19.1-20.0 tok/s on one thread of a Zen 5 VM against
// 20.6-21.6 / 21.3-21.7 / 21.8-21.9 two, four and eight tiles ahead (`linear_bench
// --model=1b`, interleaved, three runs). The float tiles (8 rows, 32 KB at 1B) keep the
// next tile: through this function, whose answer was the same for them, GCC put their
// prefetches ahead of the step's loads and BF16 decode lost 8-10% (14.0 against 15.6 tok/s).
inline int64_t TilesAhead(int64_t tile_bytes) {
  return std::max<int64_t>(1, (kPrefetchBytes + tile_bytes - 1) / tile_bytes);
}
inline const uint8_t* TileToPrefetch(const uint8_t* tile, int64_t tile_bytes, const uint8_t* range_end) {
  const int64_t distance = TilesAhead(tile_bytes) * tile_bytes;
  return distance < range_end - tile ? tile + distance : nullptr;
}
// At the start of a kernel's rows: the tiles between the first and the one it prefetches,
// which no tile's stream reaches. Two threads split a MoE expert into chunks of 64 rows (67
// KB at 1024 inputs); without this, a chunk's second to eighth tiles went unfetched and
// the Qwen3-30B-A3B-shaped FP8 model decoded 5% slower on two threads than with the next
// tile (142-146 tok/s against 146-157).
inline void PrefetchRangeStart(const uint8_t* first_tile, int64_t tile_bytes, const uint8_t* range_end) {
  const int64_t end = std::min<int64_t>(range_end - first_tile, TilesAhead(tile_bytes) * tile_bytes);
  for (int64_t l = tile_bytes; l < end; l += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(first_tile + l), _MM_HINT_T1);
  }
}
// The same for the packed kernels' one stream per group of 16 rows, chosen once by vendor
// (measurements in linear_packed_avx512.cc): 16 KiB on Intel, 6.5 KiB on AMD. The AVX2
// packed kernels use it too.
int64_t PackedPrefetchBytes();
// Quantizes x [n] (n a multiple of 32) to quants [n], scales d and sums s [n / 32] (scale
// times the block's sum of quants), and the same per 16 elements [n / 16]: s16 (scale times
// the sum) and i16 (the sum itself), for the weights with 16-element groups.
using QuantQ8BlockFn = void (*)(const float* x, int64_t n, int8_t* q, float* d, float* s, float* s16, int16_t* i16);
// Block b's entries of those outputs, from its scale and its halves' sums of quants (every
// QuantQ8BlockFn stores them so, for the same bits on every ISA).
inline void StoreQ8BlockSums(int64_t b, float scale, int32_t lo, int32_t hi, float* d, float* s, float* s16,
                             int16_t* i16) {
  d[b] = scale;
  s[b] = scale * static_cast<float>(lo + hi);
  s16[2 * b] = scale * static_cast<float>(lo);
  s16[2 * b + 1] = scale * static_cast<float>(hi);
  i16[2 * b] = static_cast<int16_t>(lo);  // |sum| <= 16 x 127.
  i16[2 * b + 1] = static_cast<int16_t>(hi);
}

inline constexpr int kNumDTypes = static_cast<int>(DType::kMXFP4) + 1;  // Every DType.

// Null entries fall back to the next lower ISA's kernel.
struct KernelTable {
  GemmFn gemm[kNumDTypes] = {};
  GemmFn packed[kNumDTypes] = {};  // Over a PackedWeight (packed_weight.h).
  QuantQ8BlockFn quant_q8_block = nullptr;
};

const KernelTable& GenericKernels();  // Complete: every supported dtype.
const KernelTable& Avx2Kernels();     // linear_avx2.cc
const KernelTable& Avx512Kernels();   // linear_avx512.cc
// F8_E4M3_B128 on AVX2 (linear_f8_avx2.cc), an entry of Avx2Kernels().
void GemmF8Avx2(const GemmArgs& a, int64_t row_begin, int64_t row_end);
// F32 for many tokens on AVX2 (linear_avx2.cc): rows in k-major panels of 16, outer
// products 6 tokens at a time; the FP8 kernel's f32 GEMM over its decoded rows.
void GemmF32PanelsAvx2(const GemmArgs& a, int64_t row_begin, int64_t row_end);
// F8_E4M3_B128 on AVX-512 (linear_f8_avx512.cc), an entry of Avx512Kernels().
void GemmF8Avx512(const GemmArgs& a, int64_t row_begin, int64_t row_end);
// Its prefill with activations rounded to bf16 (linear_f8_avx512bf16.cc, GemmArgs::xb), on
// CPUs with AVX512_BF16 only.
void GemmF8Bf16Avx512(const GemmArgs& a, int64_t row_begin, int64_t row_end);
// Whether the active kernels run an F8_E4M3_B128 product of n_tokens on bf16 activations
// when LinearOptions::bf16_prefill asks (AVX-512 kernels, AVX512_BF16, enough tokens).
bool F8Bf16PrefillRuns(int64_t n_tokens);
// x [n] (a multiple of 32) rounded to nearest bf16 into `out`; AVX512_BF16 CPUs only.
void RoundToBf16Avx512(const float* x, int64_t n, uint16_t* out);
// F32, F16 and BF16 on AVX-512 (linear_float_avx512.cc), entries of Avx512Kernels().
void GemmF32Avx512(const GemmArgs& a, int64_t row_begin, int64_t row_end);
void GemmF16Avx512(const GemmArgs& a, int64_t row_begin, int64_t row_end);
void GemmBF16Avx512(const GemmArgs& a, int64_t row_begin, int64_t row_end);

// AVX-512 VNNI kernels for 1..5 tokens over weights in GGUF layout (linear_gemv_avx512.cc).
void GemvQ8_0Avx512(const GemmArgs& args, int64_t row_begin, int64_t row_end);
void GemvQ4_0Avx512(const GemmArgs& args, int64_t row_begin, int64_t row_end);
void GemvQ4_1Avx512(const GemmArgs& args, int64_t row_begin, int64_t row_end);

// The dtypes PackedWeight packs (packed_weight.h), for explicit instantiations.
#define CASCADE_FOR_EACH_PACKED_DTYPE(X) X(DType::kQ8_0) CASCADE_FOR_EACH_CODE_DTYPE(X)

// AVX2 kernels over packed weights of dtype D (linear_packed_avx2.cc; instantiated for
// every CASCADE_FOR_EACH_PACKED_DTYPE): few tokens and tiles alike.
template <DType D>
void GemmPackedAvx2(const GemmArgs& args, int64_t row_begin, int64_t row_end);

// AVX-512 VNNI kernels for 1..5 tokens over packed weights of dtype D
// (linear_packed_avx512.cc; instantiated for every CASCADE_FOR_EACH_PACKED_DTYPE).
template <DType D>
void GemvPackedAvx512(const GemmArgs& args, int64_t row_begin, int64_t row_end);

// From this many tokens on, the FP8 kernels decode their rows to f32 once (each value times
// its scale, one rounding) and multiply them as k-major panels (AVX2: GemmDecodedRows and
// GemmF32PanelsAvx2; AVX-512 from 32 tokens on: panels_avx512.h, the same values summed in
// the same order; below 32, GemmDecodedRows and the F32 dot-product tiles); fewer tokens
// convert inside their own tiles.
inline constexpr int64_t kMinDecodedTokens = 6;

// The FP8 GEMVs' f32-bits decode (where DenormalOperandsFast()): codes become f32 values
// x 2^-120, activations are scaled by 2^64 (exactly, below 2^60 in magnitude), and each
// 128-block's sums are multiplied by its scale x 2^56 (2^120 / 2^64).
inline constexpr float kF8BitsXScale = 0x1p64f;
inline constexpr float kF8BitsBlockScale = 0x1p56f;

// Rows [rb, re) of a prefill in blocks of about 256 KiB of f32 (they stay in L2): each
// block decoded once by decode(r0, r1, out) into a per-thread buffer [r1 - r0, n_in], then
// every token multiplied over it by the F32 kernel `gemm_f32`. Decoding per tile of tokens
// instead cost each weight's conversion n_tokens / 3 times.
template <typename Decode>
void GemmDecodedRows(const GemmArgs& a, int64_t rb, int64_t re, const Decode& decode, GemmFn gemm_f32) {
  constexpr int64_t kBlockBytes = 256 * 1024;
  thread_local std::vector<float> decoded;
  const int64_t rows = std::max<int64_t>(4, kBlockBytes / (a.n_in * 4) / 4 * 4);
  decoded.resize(static_cast<size_t>(rows * a.n_in));
  for (int64_t r0 = rb; r0 < re; r0 += rows) {
    const int64_t r1 = std::min(re, r0 + rows);
    decode(r0, r1, decoded.data());
    GemmArgs f = a;
    f.w = reinterpret_cast<const uint8_t*>(decoded.data());
    f.w_row_bytes = a.n_in * 4;
    f.out = a.out + r0;
    gemm_f32(f, 0, r1 - r0);
  }
}

// Portable Q8_K activation quantizer (one super-block per 256 elements).
void QuantizeQ8K(const float* x, int64_t n, BlockQ8_K* y);

}  // namespace cascade::kernels::cpu::internal
