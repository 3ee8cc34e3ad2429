// Loads a stage's weights out of a WeightSource for one backend, and keeps everything that
// must live as long as they are used: the layers level (model/layers/) borrows from it.
//
//  * Matrices are cut to this rank's slice and prepared once (`Backend::PrepareWeight`). A
//    row slice is a view of just those rows of the file; a column slice (whole quantization
//    blocks) and a stack of several matrices (Backend::LinearParts) are copied into owned,
//    64-byte aligned buffers. When the backend keeps its own copy (the CPU repack, a GPU
//    upload) the file pages or the owned copy behind it are dropped at once, so the model
//    is resident about once, not twice.
//  * Vectors (norms, biases) are f32 in the backend's memory: a view of the file when it
//    is f32 on a host backend, otherwise converted and owned (host) or uploaded (device).
//  * It remembers which views are still read from the file (for Prefault) and how many
//    weight bytes the stage reads.
//
// Thread-safety: single owner (the device thread, like the backend it borrows). The
// prepared weights and views it hands out are immutable and live as long as the loader.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "kernels/ops.h"
#include "model/format/weight_source.h"

namespace cascade::model {

// Indices [begin, end) of one dimension of a tensor; end -1 means to the end.
struct IndexRange {
  int64_t begin = 0;
  int64_t end = -1;
};

class WeightLoader {
 public:
  // Both borrowed; they must outlive the loader (and everything it hands out).
  WeightLoader(const WeightSource* source, kernels::Backend* backend);
  ~WeightLoader();
  WeightLoader(const WeightLoader&) = delete;
  WeightLoader& operator=(const WeightLoader&) = delete;

  kernels::Backend* backend() const { return backend_; }
  const WeightSource& source() const { return *source_; }

  // Matrix `name` [rows, cols] (a stored tensor of more dimensions read as [Rows(), Cols()],
  // e.g. a GGUF merged expert tensor) in any type the backend can multiply by, cut to `row_range`
  // and `col_range`, prepared. NotFound for a missing tensor, InvalidArgument for another
  // shape or columns that are not whole blocks, Unimplemented for a type the backend lacks.
  absl::StatusOr<const kernels::PreparedWeight*> Matrix(const std::string& name, int64_t rows, int64_t cols,
                                                        IndexRange row_range = {}, IndexRange col_range = {});
  // Matrix `name` read only by row (a token embedding that is not also the LM head), cut
  // to `row_range`: on a host backend the file's rows as they are, neither repacked nor
  // prefaulted, so only the rows that tokens look up become resident (a packed copy of an
  // untied Qwen3-235B Q4_K_M embedding would hold 350 MB for a few rows a step); on another
  // backend, as Matrix.
  absl::StatusOr<const kernels::PreparedWeight*> LookupTable(const std::string& name, int64_t rows, int64_t cols,
                                                             IndexRange row_range);
  // Row ranges of matrices of one input (Q/K/V, gate/up) stacked into one owned weight for
  // Backend::LinearParts: names[i] is [rows[i], cols], its rows `ranges[i]` are kept. Null
  // (and nothing read) when they cannot stack: a tensor missing, of another shape or of
  // another type than the first, a type the backend lacks, or a part but the last that is
  // not whole row groups of kLinearPartRows. The caller then loads them one by one with
  // `Matrix`, which reports a bad tensor.
  absl::StatusOr<const kernels::PreparedWeight*> Stacked(std::span<const std::string> names,
                                                         std::span<const int64_t> rows, int64_t cols,
                                                         std::span<const IndexRange> ranges);
  // Vector `name` [len] as f32 in the backend's memory, only elements `range` kept.
  // InvalidArgument for another length.
  absl::StatusOr<TensorView> Vector(const std::string& name, int64_t len, IndexRange range = {});

  // Reads one byte per page of every weight still read from the file (those the backend
  // did not copy), so the first step does not pay the page faults, then drops the source's
  // other pages (WeightSource::ReleasePagesExcept): call once loading is done. `progress`
  // (optional) gets the fraction of bytes done.
  void Prefault(const std::function<void(double)>& progress) const;
  // Bytes of weights loaded so far (as read from the file, before any repack).
  int64_t weight_bytes() const { return weight_bytes_; }
  // Frees the spare copy buffer (below): call once a batch of loading is done.
  void ReleaseSpare() { spare_ = nullptr; }

 private:
  // A matrix cut to its slice, before it is prepared.
  struct Slice {
    std::string name;
    TensorView file;  // What the source returned (empty for a stack).
    TensorView kept;  // The file view, or the owned copy (the latest in owned_bytes_).
    bool owned = false;
  };
  absl::StatusOr<Slice> ReadSlice(const std::string& name, int64_t rows, int64_t cols, IndexRange row_range,
                                  IndexRange col_range);
  absl::StatusOr<const kernels::PreparedWeight*> Prepare(const Slice& slice);
  // A 64-byte aligned buffer of `bytes` in owned_bytes_ (a copy of part of `tensor`).
  absl::StatusOr<uint8_t*> OwnBytes(const std::string& tensor, size_t bytes);
  // An f32 vector in the backend's memory: the host view itself on a host backend, an
  // uploaded copy otherwise.
  absl::StatusOr<TensorView> Keep(std::span<const float> host);

  const WeightSource* source_;  // Borrowed.
  kernels::Backend* backend_;   // Borrowed.
  int64_t weight_bytes_ = 0;
  // Column slices and stacked copies of matrices, kept while their prepared weight reads
  // them (declared before prepared_, so they outlive the weights over them).
  struct FreeBytes {
    size_t size;
    bool mapped;  // Its own mapping (a copy of at least kMappedCopyBytes).
    void operator()(uint8_t* p) const;
  };
  using OwnedBytes = std::unique_ptr<uint8_t[], FreeBytes>;
  std::vector<OwnedBytes> owned_bytes_;
  // Copies of 2 MiB or more get their own mapping, so that freeing one returns its pages
  // at once (a 1B's stacked gate/up is 18 MB: kept as the spare below, it stayed resident
  // until loading ended, at the peak).
  static constexpr size_t kMappedCopyBytes = size_t{2} << 20;
  // The largest smaller copy a backend repacked (so no longer read), kept for the next copy
  // that fits it well: freeing each one left a hole in the heap that a small allocation
  // then split, so glibc could not reuse it for the next copy of the same size (gpt-oss-20b
  // scaled, a stacked gate/up per expert: 134 MB of free heap held after loading).
  OwnedBytes spare_;
  std::vector<std::unique_ptr<kernels::PreparedWeight>> prepared_;  // Every matrix.
  std::vector<TensorView> used_;           // Every weight view still read from the file (for Prefault).
  std::vector<std::vector<float>> owned_;  // Converted vectors (host backends).
  std::vector<std::unique_ptr<kernels::Buffer>> uploaded_;  // Vectors (other backends).
};

}  // namespace cascade::model
