#include "kernels/cpu/linear.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/cpu/block_codes.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/cpu_features.h"

namespace cascade::kernels::cpu {
namespace internal {

// Measured in linear_packed_avx512.cc; the AVX2 packed kernels use the same distance.
int64_t PackedPrefetchBytes() {
  static const int64_t bytes = GetCpuFeatures().amd ? 6656 : 16384;
  return bytes;
}

}  // namespace internal
namespace {

using internal::GemmArgs;
using internal::KernelTable;

// Tables per ISA level with the lower levels' kernels filled into the gaps.
struct MergedTables {
  KernelTable by_isa[3];
  MergedTables() {
    by_isa[0] = internal::GenericKernels();
    by_isa[1] = by_isa[0];
    if (CpuSupportsIsa(CpuIsa::kAvx2)) Overlay(internal::Avx2Kernels(), &by_isa[1]);
    by_isa[2] = by_isa[1];
    if (CpuSupportsIsa(CpuIsa::kAvx512)) Overlay(internal::Avx512Kernels(), &by_isa[2]);
  }
  static void Overlay(const KernelTable& top, KernelTable* t) {
    for (int i = 0; i < internal::kNumDTypes; ++i) {
      if (top.gemm[i] != nullptr) t->gemm[i] = top.gemm[i];
      if (top.packed[i] != nullptr) t->packed[i] = top.packed[i];
    }
    if (top.quant_q8_block != nullptr) t->quant_q8_block = top.quant_q8_block;
  }
};

const KernelTable& ActiveKernels() {
  static const MergedTables tables;
  return tables.by_isa[static_cast<int>(ActiveCpuIsa())];
}

int64_t FormatBlock(ActivationFormat f) {
  switch (f) {
    case ActivationFormat::kF32: return 1;
    case ActivationFormat::kQ8Block: return kQK;
    case ActivationFormat::kQ8K: return kQKK;
  }
  return 1;
}

// run(begin, end, thread) over tokens [0, n_tokens) of an activation pass over n values:
// split across the pool from 16384 values on (fewer cost less than a dispatch).
template <typename F>
void OverTokens(ThreadPool* pool, int64_t n_tokens, int64_t n, const F& run) {
  if (pool != nullptr && n >= 16384) {
    pool->ParallelFor(n_tokens, run);
  } else {
    run(0, n_tokens, 0);
  }
}

// Rows per work item: a multiple of 16 (the micro-kernels' row tile, and whole cache lines
// of f32 output), about four items per thread so that a slow thread can be helped.
int64_t RowChunk(int64_t n_out, int n_threads) {
  if (n_threads <= 1) return std::max<int64_t>(n_out, 1);
  const int64_t per = (n_out + 4 * n_threads - 1) / (4 * n_threads);
  return std::max<int64_t>(16, (per + 15) / 16 * 16);
}

// The shapes with nothing to multiply (no tokens, no outputs, or an empty inner
// dimension, whose products are all zero): the status to return, or nullopt to go on.
std::optional<absl::Status> TrivialLinear(std::span<const LinearPart> parts, int64_t n_tokens, int64_t n_in) {
  int64_t n_out = 0;
  for (const LinearPart& p : parts) n_out += p.rows;
  if (n_tokens == 0 || n_out == 0) return absl::OkStatus();
  for (const LinearPart& p : parts) {
    if (p.out == nullptr && p.rows > 0) return absl::InvalidArgumentError("Linear: null output");
  }
  if (n_in == 0) {
    for (const LinearPart& p : parts) std::fill(p.out, p.out + n_tokens * p.rows, 0.0f);
    return absl::OkStatus();
  }
  return std::nullopt;
}

absl::Status CheckParts(std::span<const LinearPart> parts, int64_t n_out, bool packed) {
  int64_t rows = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].rows < 0 || (packed && i + 1 < parts.size() && parts[i].rows % kPackRows != 0)) {
      return absl::InvalidArgumentError(absl::StrCat("Linear: part ", i, " of ", parts[i].rows, " rows",
                                                     packed ? " (packed parts need multiples of 16)" : ""));
    }
    rows += parts[i].rows;
  }
  if (rows != n_out) {
    return absl::InvalidArgumentError(absl::StrCat("Linear: parts of ", rows, " rows for a weight of ", n_out));
  }
  return absl::OkStatus();
}

// Runs `gemm` over every part's rows, split across the pool in RowChunk pieces of the
// stacked rows. A piece that crosses parts is cut at the boundary; each part sees the
// weight from its first row (`row_offset` bytes per stacked row: one row of the GGUF
// layout, or 1/16 of a packed group), so kernels index its rows from 0 and store to its
// own output.
void RunRows(internal::GemmFn gemm, const internal::GemmArgs& args, std::span<const LinearPart> parts, bool packed,
             ThreadPool* pool) {
  int64_t n_out = 0;
  for (const LinearPart& p : parts) n_out += p.rows;
  const auto run = [&](int64_t begin, int64_t end) {
    int64_t first = 0;
    for (const LinearPart& p : parts) {
      const int64_t lo = std::max(begin, first), hi = std::min(end, first + p.rows);
      if (lo < hi) {
        internal::GemmArgs a = args;
        a.out = p.out;
        a.ld_out = p.rows;
        a.w = args.w + (packed ? first / kPackRows * args.w_row_bytes : first * args.w_row_bytes);
        gemm(a, lo - first, hi - first);
      }
      first += p.rows;
    }
  };
  const int n_threads = pool == nullptr ? 1 : pool->n_threads();
  if (n_threads == 1) {
    run(0, n_out);
    return;
  }
  pool->ParallelForChunked(n_out, RowChunk(n_out, n_threads),
                           [&](int64_t begin, int64_t end, int) { run(begin, end); });
}

absl::Status CheckWeight(const TensorView& weight) {
  if (weight.device.kind != DeviceKind::kCpu) {
    return absl::UnimplementedError("Linear: the CPU kernel needs a CPU weight");
  }
  if (!LinearSupports(weight.dtype)) {
    return absl::UnimplementedError(
        absl::StrCat("Linear: unsupported weight dtype ", std::string(DTypeName(weight.dtype))));
  }
  if (weight.n_dims != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear: weight must be 2-D [n_out, n_in], got ", weight.ShapeString()));
  }
  if (weight.data == nullptr && weight.NumElements() != 0) {
    return absl::InvalidArgumentError("Linear: null weight data");
  }
  const int64_t n_in = weight.Cols();
  if (n_in % BlockElems(weight.dtype) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Linear: n_in ", n_in, " is not a multiple of the ",
                                                   std::string(DTypeName(weight.dtype)), " block (",
                                                   BlockElems(weight.dtype), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

bool LinearSupports(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kQ8_0 || d == DType::kI4_G128 ||
         d == DType::kF8_E4M3_B128 || HasBlockCodes(d);
}

// The GGUF-layout Q4_K / Q6_K kernels take Q8_K activations; every other quantized type
// (and every packed weight) Q8 blocks of 32.
ActivationFormat ActivationFormatFor(DType d) {
  if (d == DType::kQ4_K || d == DType::kQ6_K) return ActivationFormat::kQ8K;
  if (d == DType::kQ8_0 || d == DType::kI4_G128 || HasBlockCodes(d)) return ActivationFormat::kQ8Block;
  return ActivationFormat::kF32;
}

absl::Status QuantizedActivations::Quantize(const float* in, int64_t n_tokens, int64_t n_in, ActivationFormat format,
                                            ThreadPool* pool) {
  n_tokens_ = 0;
  n_in_ = 0;
  f32_ = nullptr;
  has_bf16_ = false;
  format_ = format;
  const int64_t block = FormatBlock(format);
  if (n_tokens < 0 || n_in < 0 || n_in % block != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("QuantizeActivations: n_in ", n_in, " is not a multiple of ", block, " or a size is negative"));
  }
  if (in == nullptr && n_tokens * n_in != 0) {
    return absl::InvalidArgumentError("QuantizeActivations: null input");
  }
  const int64_t n = n_tokens * n_in;
  switch (format) {
    case ActivationFormat::kF32: f32_ = in; break;
    case ActivationFormat::kQ8Block: {
      if (static_cast<int64_t>(q8_quants_.size()) < n) q8_quants_.resize(n);
      if (static_cast<int64_t>(q8_scales_.size()) < n / kQK) {
        q8_scales_.resize(n / kQK);
        q8_sums_.resize(n / kQK);
        q8_sums16_.resize(n / 16);
        q8_isums16_.resize(n / 16);
      }
      const internal::QuantQ8BlockFn quant = ActiveKernels().quant_q8_block;
      const int64_t nb = n_in / kQK;
      auto run = [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; ++t) {
          quant(in + t * n_in, n_in, q8_quants_.data() + t * n_in, q8_scales_.data() + t * nb, q8_sums_.data() + t * nb,
                q8_sums16_.data() + t * 2 * nb, q8_isums16_.data() + t * 2 * nb);
        }
      };
      OverTokens(pool, n_tokens, n, run);
      break;
    }
    case ActivationFormat::kQ8K: {
      if (static_cast<int64_t>(q8k_.size()) < n / kQKK) q8k_.resize(n / kQKK);
      const int64_t nb = n_in / kQKK;
      auto run = [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; ++t) {
          internal::QuantizeQ8K(in + t * n_in, n_in, q8k_.data() + t * nb);
        }
      };
      OverTokens(pool, n_tokens, n, run);
      break;
    }
  }
  n_tokens_ = n_tokens;
  n_in_ = n_in;
  return absl::OkStatus();
}

void QuantizedActivations::RoundToBf16(ThreadPool* pool) {
  const int64_t n = n_tokens_ * n_in_;
  if (static_cast<int64_t>(bf16_.size()) < n) bf16_.resize(n);
  auto run = [&](int64_t begin, int64_t end, int) {
    internal::RoundToBf16Avx512(f32_ + begin * n_in_, (end - begin) * n_in_, bf16_.data() + begin * n_in_);
  };
  OverTokens(pool, n_tokens_, n, run);
  has_bf16_ = true;
}

namespace {

internal::GemmArgs ActivationArgs(const QuantizedActivations& in) {
  GemmArgs args;
  args.n_in = in.n_in();
  args.n_tokens = in.n_tokens();
  args.x = in.f32();
  args.xb = in.bf16();
  if (in.format() == ActivationFormat::kQ8Block) {
    args.xq = in.q8_quants();
    args.xd = in.q8_scales();
    args.xs = in.q8_sums();
    args.xs16 = in.q8_sums16();
    args.xi16 = in.q8_isums16();
  } else if (in.format() == ActivationFormat::kQ8K) {
    args.xk = in.q8k_blocks();
  }
  return args;
}

absl::Status LinearQuantizedParts(std::span<const LinearPart> parts, const QuantizedActivations& in,
                                  const TensorView& weight, ThreadPool* pool) {
  CASCADE_RETURN_IF_ERROR(CheckWeight(weight));
  CASCADE_RETURN_IF_ERROR(CheckParts(parts, weight.Rows(), false));
  const int64_t n_in = weight.Cols();
  if (in.format() != ActivationFormatFor(weight.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("Linear: activations are not in the format ",
                                                   std::string(DTypeName(weight.dtype)), " weights need"));
  }
  if (in.n_in() != n_in && in.n_tokens() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear: activations have n_in ", in.n_in(), ", weight ", weight.ShapeString()));
  }
  if (auto done = TrivialLinear(parts, in.n_tokens(), n_in)) return *done;
  GemmArgs args = ActivationArgs(in);
  args.w = static_cast<const uint8_t*>(weight.data);
  args.w_row_bytes = weight.RowBytes();
  const internal::GemmFn gemm = ActiveKernels().gemm[static_cast<int>(weight.dtype)];
  if (gemm == nullptr) {
    return absl::UnimplementedError(absl::StrCat("Linear: no kernel for ", std::string(DTypeName(weight.dtype))));
  }
  RunRows(gemm, args, parts, false, pool);
  return absl::OkStatus();
}

absl::Status LinearPackedParts(std::span<const LinearPart> parts, const QuantizedActivations& in,
                               const PackedWeight& weight, ThreadPool* pool) {
  CASCADE_RETURN_IF_ERROR(CheckParts(parts, weight.n_out(), true));
  const int64_t n_in = weight.n_in();
  if (in.format() != ActivationFormat::kQ8Block) {
    return absl::InvalidArgumentError("Linear: packed weights need kQ8Block activations");
  }
  if (in.n_in() != n_in && in.n_tokens() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Linear: activations have n_in ", in.n_in(), ", packed weight [",
                                                   weight.n_out(), ", ", n_in, "]"));
  }
  if (auto done = TrivialLinear(parts, in.n_tokens(), n_in)) return *done;
  GemmArgs args = ActivationArgs(in);
  args.w = weight.data();
  args.w_row_bytes = weight.group_bytes();
  const internal::GemmFn gemm = ActiveKernels().packed[static_cast<int>(weight.dtype())];
  if (gemm == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("Linear: no packed kernel for ", std::string(DTypeName(weight.dtype()))));
  }
  RunRows(gemm, args, parts, true, pool);  // RowChunk is a multiple of 16: chunks start on packed groups.
  return absl::OkStatus();
}

absl::Status CheckInput(const float* in, int64_t n_tokens, int64_t n_in) {
  if (n_tokens < 0) return absl::InvalidArgumentError("Linear: negative n_tokens");
  if (n_tokens > 0 && n_in > 0 && in == nullptr) return absl::InvalidArgumentError("Linear: null input or output");
  return absl::OkStatus();
}

}  // namespace

absl::Status LinearQuantized(float* out, const QuantizedActivations& in, const TensorView& weight, ThreadPool* pool) {
  const LinearPart part{out, weight.Rows()};
  return LinearQuantizedParts({&part, 1}, in, weight, pool);
}

absl::Status LinearParts(std::span<const LinearPart> parts, const float* in, const TensorView& weight, int64_t n_tokens,
                         ThreadPool* pool, const LinearOptions& options) {
  CASCADE_RETURN_IF_ERROR(CheckWeight(weight));
  CASCADE_RETURN_IF_ERROR(CheckInput(in, n_tokens, weight.Cols()));
  thread_local QuantizedActivations scratch;
  CASCADE_RETURN_IF_ERROR(scratch.Quantize(in, n_tokens, weight.Cols(), ActivationFormatFor(weight.dtype), pool));
  if (options.bf16_prefill && weight.dtype == DType::kF8_E4M3_B128 && internal::F8Bf16PrefillRuns(n_tokens)) {
    scratch.RoundToBf16(pool);
  }
  return LinearQuantizedParts(parts, scratch, weight, pool);
}

absl::Status Linear(float* out, const float* in, const TensorView& weight, int64_t n_tokens, ThreadPool* pool,
                    const LinearOptions& options) {
  if (n_tokens > 0 && weight.Cols() > 0 && weight.Rows() > 0 && out == nullptr) {
    return absl::InvalidArgumentError("Linear: null input or output");
  }
  const LinearPart part{out, weight.Rows()};
  return LinearParts({&part, 1}, in, weight, n_tokens, pool, options);
}

// Q8_0 / Q4_0 / Q4_1 have GGUF-layout kernels for every ISA, and packing pays only with
// AVX2 or AVX-512 (packed kernels of their own); every other type runs packed on every ISA
// (its GGUF-layout kernel is a slow dequantizing fallback).
bool PackedLayoutPreferred(DType dtype) {
  if (!PackedWeight::Supports(dtype)) return false;
  const bool classic = dtype == DType::kQ8_0 || dtype == DType::kQ4_0 || dtype == DType::kQ4_1;
  return !classic || ActiveCpuIsa() != CpuIsa::kGeneric;
}

absl::Status LinearPacked(float* out, const QuantizedActivations& in, const PackedWeight& weight, ThreadPool* pool) {
  const LinearPart part{out, weight.n_out()};
  return LinearPackedParts({&part, 1}, in, weight, pool);
}

absl::Status LinearPartsPacked(std::span<const LinearPart> parts, const float* in, const PackedWeight& weight,
                               int64_t n_tokens, ThreadPool* pool) {
  CASCADE_RETURN_IF_ERROR(CheckInput(in, n_tokens, weight.n_in()));
  thread_local QuantizedActivations scratch;
  CASCADE_RETURN_IF_ERROR(scratch.Quantize(in, n_tokens, weight.n_in(), ActivationFormat::kQ8Block, pool));
  return LinearPackedParts(parts, scratch, weight, pool);
}

absl::Status LinearPacked(float* out, const float* in, const PackedWeight& weight, int64_t n_tokens, ThreadPool* pool) {
  if (n_tokens > 0 && weight.n_in() > 0 && weight.n_out() > 0 && out == nullptr) {
    return absl::InvalidArgumentError("Linear: null input or output");
  }
  const LinearPart part{out, weight.n_out()};
  return LinearPartsPacked({&part, 1}, in, weight, n_tokens, pool);
}

absl::Status LinearPackedBatch(std::span<const PackedJob> jobs, ThreadPool* pool) {
  thread_local std::vector<std::unique_ptr<QuantizedActivations>> scratch;
  while (scratch.size() < jobs.size()) scratch.push_back(std::make_unique<QuantizedActivations>());
  // Every part of every job is a segment of one index space, each starting on a multiple
  // of 16 (RowChunk's pieces then start on packed groups; the padding rows run nothing).
  struct Segment {
    internal::GemmFn gemm;
    GemmArgs args;
    int64_t start, rows;
  };
  absl::InlinedVector<Segment, 32> segments;
  int64_t total = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const PackedJob& job = jobs[j];
    const PackedWeight& w = *job.weight;
    CASCADE_RETURN_IF_ERROR(CheckInput(job.in, job.n_tokens, w.n_in()));
    CASCADE_RETURN_IF_ERROR(CheckParts(job.parts, w.n_out(), true));
    if (TrivialLinear(job.parts, job.n_tokens, w.n_in()).has_value()) {
      CASCADE_RETURN_IF_ERROR(*TrivialLinear(job.parts, job.n_tokens, w.n_in()));
      continue;
    }
    const internal::GemmFn gemm = ActiveKernels().packed[static_cast<int>(w.dtype())];
    if (gemm == nullptr) {
      return absl::UnimplementedError(absl::StrCat("Linear: no packed kernel for ", std::string(DTypeName(w.dtype()))));
    }
    CASCADE_RETURN_IF_ERROR(scratch[j]->Quantize(job.in, job.n_tokens, w.n_in(), ActivationFormat::kQ8Block, pool));
    GemmArgs args = ActivationArgs(*scratch[j]);
    args.w_row_bytes = w.group_bytes();
    int64_t first = 0;
    for (const LinearPart& p : job.parts) {
      GemmArgs a = args;
      a.out = p.out;
      a.ld_out = p.rows;
      a.w = w.data() + first / kPackRows * w.group_bytes();
      segments.push_back({gemm, a, total, p.rows});
      total += (p.rows + kPackRows - 1) / kPackRows * kPackRows;
      first += p.rows;
    }
  }
  const auto run = [&](int64_t begin, int64_t end) {
    for (const Segment& s : segments) {
      const int64_t lo = std::max(begin, s.start) - s.start, hi = std::min(end - s.start, s.rows);
      if (lo < hi) s.gemm(s.args, lo, hi);
    }
  };
  const int n_threads = pool == nullptr ? 1 : pool->n_threads();
  if (n_threads == 1) {
    run(0, total);
  } else {
    pool->ParallelForChunked(total, RowChunk(total, n_threads), [&](int64_t b, int64_t e, int) { run(b, e); });
  }
  return absl::OkStatus();
}

}  // namespace cascade::kernels::cpu
