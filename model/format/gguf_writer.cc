#include "model/format/gguf_writer.h"

#include <fstream>

#include "core/logging.h"
#include "core/str_cat.h"

namespace cascade::model {
namespace {

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void PutString(std::string& out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out += s;
}

}  // namespace

std::optional<uint32_t> GgmlTypeId(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ5_0: return 6;
    case DType::kQ5_1: return 7;
    case DType::kQ8_0: return 8;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 11;
    case DType::kQ4_K: return 12;
    case DType::kQ5_K: return 13;
    case DType::kQ6_K: return 14;
    case DType::kIQ4_NL: return 20;
    case DType::kIQ4_XS: return 23;
    case DType::kQ8_K: return 15;
    case DType::kI32: return 26;
    case DType::kBF16: return 30;
    case DType::kMXFP4: return 39;
    case DType::kI4_G128:  // Cascade's own layouts; GGUF has none.
    case DType::kF8_E4M3:
    case DType::kF8_E4M3_B128:
    case DType::kU8: return std::nullopt;
  }
  return std::nullopt;
}

void GgufWriter::Key(const std::string& key, uint32_t type) {
  PutString(kv_, key);
  Put<uint32_t>(kv_, type);
  ++n_kv_;
}

void GgufWriter::SetString(const std::string& key, const std::string& value) {
  Key(key, 8);
  PutString(kv_, value);
}
void GgufWriter::SetU32(const std::string& key, uint32_t value) {
  Key(key, 4);
  Put(kv_, value);
}
void GgufWriter::SetI32(const std::string& key, int32_t value) {
  Key(key, 5);
  Put(kv_, value);
}
void GgufWriter::SetF32(const std::string& key, float value) {
  Key(key, 6);
  Put(kv_, value);
}
void GgufWriter::SetBool(const std::string& key, bool value) {
  Key(key, 7);
  Put<uint8_t>(kv_, value ? 1 : 0);
}
void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& values) {
  Key(key, 9);
  Put<uint32_t>(kv_, 8);
  Put<uint64_t>(kv_, values.size());
  for (const auto& v : values) PutString(kv_, v);
}
void GgufWriter::SetF32Array(const std::string& key, const std::vector<float>& values) {
  Key(key, 9);
  Put<uint32_t>(kv_, 6);
  Put<uint64_t>(kv_, values.size());
  for (float v : values) Put(kv_, v);
}
void GgufWriter::SetI32Array(const std::string& key, const std::vector<int32_t>& values) {
  Key(key, 9);
  Put<uint32_t>(kv_, 5);
  Put<uint64_t>(kv_, values.size());
  for (int32_t v : values) Put(kv_, v);
}

void GgufWriter::AddTensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape, std::string data) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  CASCADE_CHECK(static_cast<int64_t>(data.size()) == n / BlockElems(dtype) * BlockBytes(dtype))
      << name << ": " << data.size() << " bytes";
  tensors_.push_back({name, dtype, shape, std::move(data)});
}

std::string GgufWriter::Serialize() const {
  std::string out;
  Put<uint32_t>(out, 0x46554747);
  Put<uint32_t>(out, 3);
  Put<uint64_t>(out, tensors_.size());
  Put<uint64_t>(out, n_kv_);
  out += kv_;
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    PutString(out, t.name);
    Put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) Put<uint64_t>(out, *it);
    Put<uint32_t>(out, GgmlTypeId(t.dtype).value_or(kNoGgmlType));
    Put<uint64_t>(out, offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
  for (const Tensor& t : tensors_) {
    out += t.data;
    out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
  }
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  for (const Tensor& t : tensors_) {
    if (!GgmlTypeId(t.dtype).has_value()) {
      return absl::InvalidArgumentError(
          cascade::StrCat(path, ": tensor '", t.name, "' is ", DTypeName(t.dtype), ", which GGUF cannot store"));
    }
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const std::string bytes = Serialize();
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return absl::InternalError(cascade::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace cascade::model
