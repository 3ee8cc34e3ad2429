// Reader for Hugging Face safetensors files (https://huggingface.co/docs/safetensors):
// an 8-byte little-endian header length, a JSON header mapping tensor names to
// {dtype, shape, data_offsets}, then the raw tensor bytes. A source is one file or the
// shards of one checkpoint (`model-0000i-of-0000n.safetensors` listed by
// `model.safetensors.index.json`); each tensor remembers which shard it lives in.
// Every header is validated up front: each inconsistency is a Status naming the file,
// the tensor and the problem. Tensor data is never copied: views point into the mapping.
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

// Largest JSON header accepted (the reference implementation uses the same bound).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Parses and validates the header of the safetensors file whose complete contents are
// `file_bytes`; `name` is used in messages. Returns the tensors ordered by data offset,
// with `file_offset` absolute within `file_bytes` and the data range checked to lie
// inside it. DataLoss for a truncated or corrupt header, Unimplemented for a dtype other
// than F32/F16/BF16/I32 or a tensor of more than 4 dimensions. `__metadata__` is ignored.
// Never throws; safe on arbitrary bytes (this is the fuzz target's entry point).
absl::StatusOr<std::vector<TensorInfo>> ParseSafetensorsHeader(std::string_view file_bytes, const std::string& name);

class SafetensorsSource final : public WeightSource {
 public:
  // Maps and validates one `.safetensors` file. NotFound if missing, DataLoss for a
  // truncated or corrupt file, Unimplemented for an unsupported dtype.
  static absl::StatusOr<std::unique_ptr<SafetensorsSource>> OpenFile(const std::string& path);

  // Opens a Hugging Face model directory: `model.safetensors` when present, else the
  // shards named by `model.safetensors.index.json` (`weight_map`: tensor -> shard file).
  // NotFound when the directory holds neither or a shard file is missing; DataLoss for a
  // corrupt shard or index, including an index that names a tensor its shard lacks and a
  // tensor stored in two shards.
  static absl::StatusOr<std::unique_ptr<SafetensorsSource>> OpenDirectory(const std::string& dir);

  // Same as OpenFile over bytes already in memory (tests, fuzzing); `bytes` must outlive
  // the source.
  static absl::StatusOr<std::unique_ptr<SafetensorsSource>> OpenBytes(std::string_view bytes, std::string name);

  SafetensorsSource(const SafetensorsSource&) = delete;
  SafetensorsSource& operator=(const SafetensorsSource&) = delete;

  // WeightSource. `path()` is the file, or the directory for a sharded checkpoint.
  const std::string& path() const override { return path_; }
  // Shard by shard (in index order), each by data offset.
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  const TensorInfo* FindTensor(std::string_view name) const override;
  // A view of shape [row_end - row_begin, Cols()] into the mapping. The format does not
  // promise alignment: the view is aligned to the element size when the writer aligned
  // the data (the reference writer pads the header to 8 bytes and orders tensors by
  // dtype, so Hugging Face files are); callers that need alignment check `data`.
  absl::StatusOr<TensorView> ReadRows(std::string_view name, int64_t row_begin, int64_t row_end) const override;
  // Drops the mapped pages behind `view` (a view this source returned; others are
  // ignored), as GgufFile does: read again, they fault back in from the file.
  void ReleasePages(const TensorView& view) const override;
  void ReleasePagesExcept(std::span<const TensorView> in_use) const override;

  // The file a tensor's `file_offset` refers to (for messages and prefetch hints).
  // REQUIRES: `name` is one of tensors().
  const std::string& ShardPathOf(std::string_view name) const;
  size_t num_shards() const { return shards_.size(); }

 private:
  struct Shard {
    std::string path;
    std::unique_ptr<MappedFile> file;  // Null for OpenBytes.
    const uint8_t* data = nullptr;
    size_t size = 0;
  };

  explicit SafetensorsSource(std::string path) : path_(std::move(path)) {}
  // Parses `shard`'s header and appends its tensors; DataLoss on a duplicate name.
  absl::Status AddShard(Shard shard);

  std::string path_;
  std::vector<Shard> shards_;
  std::vector<TensorInfo> tensors_;
  std::vector<size_t> tensor_shard_;  // Parallel to tensors_: index into shards_.
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

}  // namespace cascade::model
