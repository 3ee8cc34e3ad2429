// The one interface over model weight files (GGUF, safetensors). A worker asks for
// exactly the rows of a tensor it owns; implementations read them through a memory map
// so the rest of the file is never touched.
// Thread-safe after construction (immutable; views point into the mapping).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace cascade::model {

// One stored tensor. `shape` is row-major, outermost first: a linear weight is
// [n_out, n_in], an embedding [n_vocab, n_embd], a norm [n_embd].
struct TensorInfo {
  std::string name;  // Name as stored in the file.
  DType dtype = DType::kF32;
  int n_dims = 0;
  std::array<int64_t, 4> shape{};
  uint64_t file_offset = 0;  // Absolute byte offset of the data in its file.
  uint64_t n_bytes = 0;

  int64_t NumElements() const;
  int64_t Cols() const { return n_dims == 0 ? 1 : shape[n_dims - 1]; }
  int64_t Rows() const { return Cols() == 0 ? 0 : NumElements() / Cols(); }
  std::string ShapeString() const;
};

// The bytes each view covers, as MappedFile::DontNeedExcept takes them.
std::vector<std::pair<const uint8_t*, size_t>> ByteRanges(std::span<const TensorView> views);

class WeightSource {
 public:
  virtual ~WeightSource() = default;

  // A short description for messages: the file or directory path.
  virtual const std::string& path() const = 0;
  virtual const std::vector<TensorInfo>& tensors() const = 0;
  // nullptr when absent.
  virtual const TensorInfo* FindTensor(std::string_view name) const = 0;

  // A read-only view of rows [row_begin, row_end) of tensor `name` seen as [Rows(), Cols()]
  // (for quantized types a row is whole blocks). NotFound for an unknown name,
  // OutOfRange for a bad row range. The view lives as long as this source.
  virtual absl::StatusOr<TensorView> ReadRows(std::string_view name, int64_t row_begin, int64_t row_end) const = 0;
  // The whole tensor, with its stored shape.
  absl::StatusOr<TensorView> Read(std::string_view name) const;
  // (optional) Tells the source that `view` (returned by ReadRows/Read) will not be read
  // again, so a file mapping may drop its pages (see MappedFile::DontNeed; reading such a
  // view later only faults the pages back in) and a source that converted the rows into
  // memory of its own may free it (the view then dangles: callers must keep their word).
  // The default does nothing (sources over memory they do not own must never release it).
  virtual void ReleasePages(const TensorView& view) const { (void)view; }
  // (optional) Drops the mapped pages of the source's files except those that a view of
  // `in_use` lies on (best effort; those dropped fault back in if read), once loading is
  // done (MappedFile::DontNeedExcept says why). Memory the source owns is never freed.
  virtual void ReleasePagesExcept(std::span<const TensorView> in_use) const { (void)in_use; }
};

}  // namespace cascade::model
