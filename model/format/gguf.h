// GGUF v2/v3 reader over a memory map (the format of llama.cpp:
// https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
// Open() validates the whole header (metadata and tensor table) up front; every
// inconsistency is a Status that names the file, the key or tensor, and the problem.
// Tensor data is never copied: views point into the mapping.
// Thread-safe after Open (immutable).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/mapped_file.h"
#include "model/format/weight_source.h"

namespace cascade::model {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view GgufTypeName(GgufType type);

// One metadata value. Strings and arrays are views into the mapping.
struct GgufValue {
  GgufType type = GgufType::kU8;
  // Scalars (integers widened; bools as 0/1).
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string_view str;
  // Arrays: element type, count, and where the elements start in the mapping.
  GgufType elem_type = GgufType::kU8;
  uint64_t count = 0;
  const uint8_t* elems = nullptr;  // Strings: each a u64 length and its bytes (validated at Open).

  bool IsInteger() const;
  bool IsFloat() const { return type == GgufType::kF32 || type == GgufType::kF64; }
  // A short human rendering ("30", "1e-05", "\"llama\"", "[f32 x 49152]").
  std::string ToString() const;
};

class GgufFile final : public WeightSource {
 public:
  // Maps and validates `path`. NotFound if missing, DataLoss for a truncated or corrupt
  // file, Unimplemented for an unsupported version or tensor type.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Same, over bytes already in memory (the fuzz target); `bytes` must outlive the file.
  static absl::StatusOr<std::unique_ptr<GgufFile>> OpenBytes(std::string_view bytes, std::string name);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string_view, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* Find(std::string_view key) const;
  // Typed getters: NotFound when absent, InvalidArgument for the wrong type.
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;   // Any integer type.
  absl::StatusOr<double> GetFloat(std::string_view key) const;  // Any float or integer type.
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  // Views into the mapping, read from the array on each call (Open only validates them, so
  // that a 128k-token vocabulary is not also held as a vector for the file's lifetime).
  absl::StatusOr<std::vector<std::string_view>> GetStringArray(std::string_view key) const;
  absl::StatusOr<std::vector<float>> GetFloatArray(std::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;

  // WeightSource.
  const std::string& path() const override { return name_; }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  const TensorInfo* FindTensor(std::string_view name) const override;
  absl::StatusOr<TensorView> ReadRows(std::string_view name, int64_t row_begin, int64_t row_end) const override;
  // Drops the mapping's pages under `view` (a no-op for OpenBytes).
  void ReleasePages(const TensorView& view) const override;
  void ReleasePagesExcept(std::span<const TensorView> in_use) const override;
  // Drops the pages of the header (metadata and tensor table) once a reader has copied what
  // it needs, such as a tokenizer's vocabulary (megabytes at a 128k vocabulary); a later
  // read of the metadata faults them back in.
  void ReleaseHeaderPages() const;

 private:
  GgufFile() = default;
  absl::Status Parse();

  std::string name_;
  std::unique_ptr<MappedFile> file_;  // Null for OpenBytes.
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t header_bytes_ = 0;  // Where the tensor data starts.
  std::vector<std::pair<std::string_view, GgufValue>> kv_;
  absl::flat_hash_map<std::string_view, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

}  // namespace cascade::model
