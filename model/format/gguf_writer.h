// Writes GGUF v3 files: metadata, then a tensor table, then aligned tensor data. Used by
// tests to build random-weight models and by tools that convert or quantize models.
// Single owner; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/dtype.h"

namespace cascade::model {

class GgufWriter {
 public:
  void SetString(const std::string& key, const std::string& value);
  void SetU32(const std::string& key, uint32_t value);
  void SetI32(const std::string& key, int32_t value);
  void SetF32(const std::string& key, float value);
  void SetBool(const std::string& key, bool value);
  void SetStringArray(const std::string& key, const std::vector<std::string>& values);
  void SetF32Array(const std::string& key, const std::vector<float>& values);
  void SetI32Array(const std::string& key, const std::vector<int32_t>& values);

  // Adds a tensor with `shape` outermost first (written innermost first, as GGUF wants);
  // `data` must hold exactly the tensor's bytes in `dtype`'s layout.
  void AddTensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape, std::string data);

  // The whole file as bytes.
  std::string Serialize() const;
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::string data;
  };
  void Key(const std::string& key, uint32_t type);
  std::string kv_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
  uint64_t alignment_ = 32;
};

// The GGUF (ggml_type) id of `dtype`; nullopt for a type GGUF cannot store (I4_G128),
// which Serialize writes as kNoGgmlType (readers refuse it) and WriteFile refuses.
std::optional<uint32_t> GgmlTypeId(DType dtype);
inline constexpr uint32_t kNoGgmlType = 0xffffffffu;

}  // namespace cascade::model
