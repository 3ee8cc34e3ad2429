#include "model/format/gguf.h"

#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "core/utf8.h"

namespace cascade::model {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian.
constexpr int kMaxArrayDepth = 4;
constexpr uint64_t kMaxAlignment = 1 << 20;

// GGUF tensor type ids (ggml_type) that Cascade reads.
std::optional<DType> DTypeFromGgml(uint32_t t) {
  switch (t) {
    case 0: return DType::kF32;
    case 1: return DType::kF16;
    case 2: return DType::kQ4_0;
    case 3: return DType::kQ4_1;
    case 6: return DType::kQ5_0;
    case 7: return DType::kQ5_1;
    case 8: return DType::kQ8_0;
    case 10: return DType::kQ2_K;
    case 11: return DType::kQ3_K;
    case 12: return DType::kQ4_K;
    case 13: return DType::kQ5_K;
    case 14: return DType::kQ6_K;
    case 20: return DType::kIQ4_NL;
    case 23: return DType::kIQ4_XS;
    case 26: return DType::kI32;
    case 30: return DType::kBF16;
    case 39: return DType::kMXFP4;
    default: return std::nullopt;
  }
}

std::string GgmlTypeName(uint32_t t) {
  static constexpr const char* kNames[] = {
      "F32",      "F16",      "Q4_0",    "Q4_1",  "Q4_2",       "Q4_3",       "Q5_0",       "Q5_1",
      "Q8_0",     "Q8_1",     "Q2_K",    "Q3_K",  "Q4_K",       "Q5_K",       "Q6_K",       "Q8_K",
      "IQ2_XXS",  "IQ2_XS",   "IQ3_XXS", "IQ1_S", "IQ4_NL",     "IQ3_S",      "IQ2_S",      "IQ4_XS",
      "I8",       "I16",      "I32",     "I64",   "F64",        "IQ1_M",      "BF16",       "Q4_0_4_4",
      "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",   "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  if (t < std::size(kNames)) return cascade::StrCat(kNames[t], " (type ", t, ")");
  return cascade::StrCat("unknown type ", t);
}

size_t ScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool: return 1;
    case GgufType::kU16:
    case GgufType::kI16: return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32: return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64: return 8;
    default: return 0;
  }
}

// A bounds-checked little-endian cursor over the file bytes.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& name) : data_(data), size_(size), name_(name) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  absl::Status Need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      return absl::DataLossError(absl::StrFormat(
          "%s: truncated file: %s needs %u bytes at offset %u but only %u remain", name_, what, n, pos_, remaining()));
    }
    return absl::OkStatus();
  }
  template <typename T>
  absl::StatusOr<T> Read(std::string_view what) {
    CASCADE_RETURN_IF_ERROR(Need(sizeof(T), what));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  absl::StatusOr<std::string_view> ReadString(std::string_view what) {
    CASCADE_ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(what));
    CASCADE_RETURN_IF_ERROR(Need(len, what));
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }
  const uint8_t* here() const { return data_ + pos_; }
  void Skip(size_t n) { pos_ += n; }

 private:
  const uint8_t* data_;
  size_t size_;
  const std::string& name_;
  size_t pos_ = 0;
};

// Reads one value of type `type` (recursing into arrays) into `out`.
absl::Status ReadValue(Cursor& c, GgufType type, GgufValue& out, int depth, const std::string& name,
                       std::string_view key);

// An integer scalar: `out.u` and `out.i` both hold it (the other's two's complement).
template <typename T>
absl::Status ReadInteger(Cursor& c, std::string_view key, GgufValue& out) {
  CASCADE_ASSIGN_OR_RETURN(T v, c.Read<T>(key));
  out.u = static_cast<uint64_t>(v);
  out.i = static_cast<int64_t>(v);
  return absl::OkStatus();
}

// An array value: its element type and count, then its elements (strings and nested
// arrays read to validate them and dropped, scalars skipped: readers index them in place).
absl::Status ReadArray(Cursor& c, GgufValue& out, int depth, const std::string& name, std::string_view key) {
  const auto bad = [&](std::string_view problem) {
    return absl::DataLossError(cascade::StrCat(name, ": metadata key '", key, "': ", problem));
  };
  if (depth >= kMaxArrayDepth) return bad("arrays nested too deeply");
  CASCADE_ASSIGN_OR_RETURN(uint32_t et, c.Read<uint32_t>(key));
  if (et > static_cast<uint32_t>(GgufType::kF64)) return bad(cascade::StrCat("unknown array element type ", et));
  out.elem_type = static_cast<GgufType>(et);
  CASCADE_ASSIGN_OR_RETURN(out.count, c.Read<uint64_t>(key));
  out.elems = c.here();
  // Every element takes at least one byte (8 for a string's length): refuse counts that
  // cannot fit before allocating anything.
  const size_t min_elem = out.elem_type == GgufType::kString  ? 8
                          : out.elem_type == GgufType::kArray ? 12
                                                              : ScalarSize(out.elem_type);
  if (out.count > c.remaining() / min_elem) {
    return bad(cascade::StrCat("array of ", out.count, " ", GgufTypeName(out.elem_type),
                               " elements does not fit in the ", c.remaining(), " bytes left in the file"));
  }
  if (out.elem_type == GgufType::kString) {
    for (uint64_t k = 0; k < out.count; ++k) CASCADE_RETURN_IF_ERROR(c.ReadString(key).status());
  } else if (out.elem_type == GgufType::kArray) {
    for (uint64_t k = 0; k < out.count; ++k) {
      GgufValue inner;
      CASCADE_RETURN_IF_ERROR(ReadValue(c, GgufType::kArray, inner, depth + 1, name, key));
    }
  } else {
    c.Skip(out.count * min_elem);
  }
  return absl::OkStatus();
}

absl::Status ReadValue(Cursor& c, GgufType type, GgufValue& out, int depth, const std::string& name,
                       std::string_view key) {
  out.type = type;
  switch (type) {
    case GgufType::kU8: return ReadInteger<uint8_t>(c, key, out);
    case GgufType::kI8: return ReadInteger<int8_t>(c, key, out);
    case GgufType::kU16: return ReadInteger<uint16_t>(c, key, out);
    case GgufType::kI16: return ReadInteger<int16_t>(c, key, out);
    case GgufType::kU32: return ReadInteger<uint32_t>(c, key, out);
    case GgufType::kI32: return ReadInteger<int32_t>(c, key, out);
    case GgufType::kU64: return ReadInteger<uint64_t>(c, key, out);
    case GgufType::kI64: return ReadInteger<int64_t>(c, key, out);
    case GgufType::kF32: {
      CASCADE_ASSIGN_OR_RETURN(float v, c.Read<float>(key));
      out.f = v;
      return absl::OkStatus();
    }
    case GgufType::kF64: {
      CASCADE_ASSIGN_OR_RETURN(double v, c.Read<double>(key));
      out.f = v;
      return absl::OkStatus();
    }
    case GgufType::kBool: {
      CASCADE_ASSIGN_OR_RETURN(uint8_t v, c.Read<uint8_t>(key));
      if (v > 1) {
        return absl::DataLossError(
            cascade::StrCat(name, ": metadata key '", key, "': bool value ", v, " is neither 0 nor 1"));
      }
      out.u = v;
      out.i = v;
      return absl::OkStatus();
    }
    case GgufType::kString: {
      CASCADE_ASSIGN_OR_RETURN(out.str, c.ReadString(key));
      return absl::OkStatus();
    }
    case GgufType::kArray: return ReadArray(c, out, depth, name, key);
  }
  return absl::DataLossError(
      cascade::StrCat(name, ": metadata key '", key, "': unknown value type ", static_cast<uint32_t>(type)));
}

// Multiplies with overflow detection; false when a * b > limit.
bool MulWithin(uint64_t a, uint64_t b, uint64_t limit, uint64_t* out) {
  if (a != 0 && b > limit / a) return false;
  *out = a * b;
  return true;
}

// Reads metadata key/value pair #`k`: a non-empty UTF-8 key, its value type and value.
absl::StatusOr<std::pair<std::string_view, GgufValue>> ReadMetadataEntry(Cursor& c, uint64_t k,
                                                                         const std::string& name) {
  CASCADE_ASSIGN_OR_RETURN(std::string_view key, c.ReadString("metadata key"));
  if (!IsValidUtf8(key)) {
    return absl::DataLossError(cascade::StrCat(name, ": metadata key #", k, " is not valid UTF-8"));
  }
  if (key.empty()) return absl::DataLossError(cascade::StrCat(name, ": metadata key #", k, " is empty"));
  CASCADE_ASSIGN_OR_RETURN(uint32_t type, c.Read<uint32_t>(key));
  if (type > static_cast<uint32_t>(GgufType::kF64)) {
    return absl::DataLossError(cascade::StrCat(name, ": metadata key '", key, "': unknown value type ", type));
  }
  GgufValue value;
  CASCADE_RETURN_IF_ERROR(ReadValue(c, static_cast<GgufType>(type), value, 0, name, key));
  return std::make_pair(key, std::move(value));
}

// A tensor info as read from the table; `rel_offset` is relative to the data section.
struct RawTensor {
  TensorInfo info;
  uint64_t rel_offset = 0;
};

// Reads and validates tensor info #`t` (name, shape, type, aligned data offset); `file_offset` is left unset.
absl::StatusOr<RawTensor> ReadTensorInfo(Cursor& c, uint64_t t, const std::string& name, uint64_t alignment) {
  CASCADE_ASSIGN_OR_RETURN(std::string_view tname, c.ReadString("tensor name"));
  if (!IsValidUtf8(tname) || tname.empty()) {
    return absl::DataLossError(cascade::StrCat(name, ": tensor #", t, " has an empty or non-UTF-8 name"));
  }
  RawTensor raw;
  TensorInfo& info = raw.info;
  info.name = std::string(tname);
  const auto bad = [&](std::string_view problem) {
    return absl::DataLossError(cascade::StrCat(name, ": tensor '", info.name, "': ", problem));
  };
  CASCADE_ASSIGN_OR_RETURN(uint32_t n_dims, c.Read<uint32_t>(tname));
  if (n_dims == 0 || n_dims > 4) return bad(cascade::StrCat("has ", n_dims, " dimensions (1 to 4 allowed)"));
  info.n_dims = static_cast<int>(n_dims);
  uint64_t n_elems = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    CASCADE_ASSIGN_OR_RETURN(uint64_t ne, c.Read<uint64_t>(tname));
    if (ne == 0 || !MulWithin(n_elems, ne, uint64_t{1} << 48, &n_elems)) {
      return bad(cascade::StrCat("dimension ", d, " = ", ne, " is zero or makes the tensor absurdly large"));
    }
    info.shape[n_dims - 1 - d] = static_cast<int64_t>(ne);  // GGUF lists innermost first.
  }
  CASCADE_ASSIGN_OR_RETURN(uint32_t ggml_type, c.Read<uint32_t>(tname));
  const std::optional<DType> dtype = DTypeFromGgml(ggml_type);
  if (!dtype) {
    return absl::UnimplementedError(
        cascade::StrCat(name, ": tensor '", info.name, "': unsupported tensor type ", GgmlTypeName(ggml_type)));
  }
  info.dtype = *dtype;
  if (info.Cols() % BlockElems(info.dtype) != 0) {
    return bad(cascade::StrCat("row length ", info.Cols(), " is not a multiple of the ", DTypeName(info.dtype),
                               " block of ", BlockElems(info.dtype)));
  }
  info.n_bytes = static_cast<uint64_t>(info.Rows()) * RowBytes(info.dtype, info.Cols());
  CASCADE_ASSIGN_OR_RETURN(raw.rel_offset, c.Read<uint64_t>(tname));
  if (raw.rel_offset % alignment != 0) {
    return bad(cascade::StrCat("data offset ", raw.rel_offset, " is not a multiple of the alignment ", alignment));
  }
  return raw;
}

// Sets each tensor's `file_offset` from the data section at `data_start`, checking its bytes fit in the file.
absl::Status PlaceTensorData(uint64_t data_start, size_t file_size, const std::vector<uint64_t>& rel_offsets,
                             const std::string& name, std::vector<TensorInfo>& tensors) {
  if (!tensors.empty() && data_start > file_size) {
    return absl::DataLossError(cascade::StrCat(name, ": truncated file: tensor data would start at byte ", data_start,
                                               " of a ", file_size, "-byte file"));
  }
  const uint64_t data_bytes = file_size > data_start ? file_size - data_start : 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    TensorInfo& info = tensors[t];
    if (rel_offsets[t] > data_bytes || info.n_bytes > data_bytes - rel_offsets[t]) {
      return absl::DataLossError(cascade::StrCat(name, ": tensor '", info.name, "': data [", rel_offsets[t], ", ",
                                                 rel_offsets[t] + info.n_bytes, ") runs past the end of the file's ",
                                                 data_bytes, " data bytes (truncated file?)"));
    }
    info.file_offset = data_start + rel_offsets[t];
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view GgufTypeName(GgufType type) {
  static constexpr const char* kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(type);
  return i < std::size(kNames) ? kNames[i] : "?";
}

bool GgufValue::IsInteger() const {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64: return true;
    default: return false;
  }
}

std::string GgufValue::ToString() const {
  switch (type) {
    case GgufType::kString: {
      std::string s(str.substr(0, 80));
      if (str.size() > 80) cascade::StrAppend(&s, "…(", str.size(), " bytes)");
      for (char& ch : s)
        if (ch == '\n') ch = ' ';
      return cascade::StrCat("\"", s, "\"");
    }
    case GgufType::kArray: return cascade::StrCat("[", GgufTypeName(elem_type), " x ", count, "]");
    case GgufType::kBool: return u ? "true" : "false";
    case GgufType::kF32:
    case GgufType::kF64: return absl::StrFormat("%g", f);
    case GgufType::kU64: return cascade::StrCat(u);
    default: return cascade::StrCat(i);
  }
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  CASCADE_ASSIGN_OR_RETURN(auto mapped, MappedFile::Open(path));
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->name_ = path;
  f->data_ = mapped->data();
  f->size_ = mapped->size();
  f->file_ = std::move(mapped);
  CASCADE_RETURN_IF_ERROR(f->Parse());
  return f;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::OpenBytes(std::string_view bytes, std::string name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->name_ = std::move(name);
  f->data_ = reinterpret_cast<const uint8_t*>(bytes.data());
  f->size_ = bytes.size();
  CASCADE_RETURN_IF_ERROR(f->Parse());
  return f;
}

absl::Status GgufFile::Parse() {
  Cursor c(data_, size_, name_);
  CASCADE_ASSIGN_OR_RETURN(uint32_t magic, c.Read<uint32_t>("magic"));
  if (magic != kGgufMagic) {
    return absl::DataLossError(
        absl::StrFormat("%s: not a GGUF file (magic 0x%08x, expected 0x%08x \"GGUF\")", name_, magic, kGgufMagic));
  }
  CASCADE_ASSIGN_OR_RETURN(version_, c.Read<uint32_t>("version"));
  if (version_ != 2 && version_ != 3) {
    return absl::UnimplementedError(
        cascade::StrCat(name_, ": unsupported GGUF version ", version_, " (Cascade reads versions 2 and 3)"));
  }
  CASCADE_ASSIGN_OR_RETURN(uint64_t n_tensors, c.Read<uint64_t>("tensor count"));
  CASCADE_ASSIGN_OR_RETURN(uint64_t n_kv, c.Read<uint64_t>("metadata count"));
  // A key/value pair is at least 12 bytes, a tensor info at least 24.
  if (n_kv > c.remaining() / 12 || n_tensors > c.remaining() / 24) {
    return absl::DataLossError(cascade::StrCat(name_, ": header claims ", n_kv, " metadata keys and ", n_tensors,
                                               " tensors, more than the ", size_, "-byte file can hold"));
  }

  kv_.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    CASCADE_ASSIGN_OR_RETURN(auto entry, ReadMetadataEntry(c, k, name_));
    if (!kv_index_.emplace(entry.first, kv_.size()).second) {
      return absl::DataLossError(cascade::StrCat(name_, ": metadata key '", entry.first, "' appears twice"));
    }
    kv_.push_back(std::move(entry));
  }

  if (const GgufValue* a = Find("general.alignment"); a != nullptr) {
    if (!a->IsInteger() || a->u == 0 || a->u > kMaxAlignment || (a->u & (a->u - 1)) != 0) {
      return absl::DataLossError(cascade::StrCat(name_, ": general.alignment ", a->ToString(),
                                                 " is not a power of two up to ", kMaxAlignment));
    }
    alignment_ = a->u;
  }

  std::vector<uint64_t> rel_offsets;
  tensors_.reserve(n_tensors);
  rel_offsets.reserve(n_tensors);
  for (uint64_t t = 0; t < n_tensors; ++t) {
    CASCADE_ASSIGN_OR_RETURN(RawTensor raw, ReadTensorInfo(c, t, name_, alignment_));
    if (!tensor_index_.emplace(raw.info.name, tensors_.size()).second) {
      return absl::DataLossError(cascade::StrCat(name_, ": tensor '", raw.info.name, "': appears twice"));
    }
    rel_offsets.push_back(raw.rel_offset);
    tensors_.push_back(std::move(raw.info));
  }

  const uint64_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  header_bytes_ = data_start;
  return PlaceTensorData(data_start, size_, rel_offsets, name_, tensors_);
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

namespace {
absl::Status NotFoundKey(const std::string& file, std::string_view key) {
  return absl::NotFoundError(cascade::StrCat(file, ": metadata key '", key, "' is missing"));
}
absl::Status WrongType(const std::string& file, std::string_view key, const GgufValue& v, std::string_view wanted) {
  return absl::InvalidArgumentError(
      cascade::StrCat(file, ": metadata key '", key, "' is ", GgufTypeName(v.type), ", expected ", wanted));
}
}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(name_, key);
  if (v->type != GgufType::kString) return WrongType(name_, key, *v, "string");
  return std::string(v->str);
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(name_, key);
  if (!v->IsInteger()) return WrongType(name_, key, *v, "an integer");
  if (v->type == GgufType::kU64 && v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(
        cascade::StrCat(name_, ": metadata key '", key, "' = ", v->u, " is out of range"));
  }
  return v->i;
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(name_, key);
  if (v->IsFloat()) return v->f;
  if (v->IsInteger()) return static_cast<double>(v->i);
  return WrongType(name_, key, *v, "a number");
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(name_, key);
  if (v->type != GgufType::kBool) return WrongType(name_, key, *v, "bool");
  return v->u != 0;
}

absl::StatusOr<std::vector<std::string_view>> GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(name_, key);
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString) {
    return WrongType(name_, key, *v, "array of string");
  }
  std::vector<std::string_view> out(v->count);
  const uint8_t* p = v->elems;
  for (std::string_view& s : out) {  // In bounds: Open read each one.
    uint64_t len;
    std::memcpy(&len, p, sizeof(len));
    s = std::string_view(reinterpret_cast<const char*>(p + sizeof(len)), len);
    p += sizeof(len) + len;
  }
  return out;
}

absl::StatusOr<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(name_, key);
  if (v->type != GgufType::kArray || (v->elem_type != GgufType::kF32 && v->elem_type != GgufType::kF64)) {
    return WrongType(name_, key, *v, "array of f32");
  }
  std::vector<float> out(v->count);
  for (uint64_t k = 0; k < v->count; ++k) {
    if (v->elem_type == GgufType::kF32) {
      std::memcpy(&out[k], v->elems + 4 * k, 4);
    } else {
      double d;
      std::memcpy(&d, v->elems + 8 * k, 8);
      out[k] = static_cast<float>(d);
    }
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(name_, key);
  GgufValue probe;
  probe.type = v->elem_type;
  if (v->type != GgufType::kArray || !probe.IsInteger()) {
    return WrongType(name_, key, *v, "array of integers");
  }
  const size_t es = ScalarSize(v->elem_type);
  std::vector<int64_t> out(v->count);
  for (uint64_t k = 0; k < v->count; ++k) {
    const uint8_t* p = v->elems + es * k;
    switch (v->elem_type) {
      case GgufType::kU8: out[k] = *p; break;
      case GgufType::kI8: out[k] = static_cast<int8_t>(*p); break;
      case GgufType::kU16: {
        uint16_t x;
        std::memcpy(&x, p, 2);
        out[k] = x;
        break;
      }
      case GgufType::kI16: {
        int16_t x;
        std::memcpy(&x, p, 2);
        out[k] = x;
        break;
      }
      case GgufType::kU32: {
        uint32_t x;
        std::memcpy(&x, p, 4);
        out[k] = x;
        break;
      }
      case GgufType::kI32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        out[k] = x;
        break;
      }
      default: {
        int64_t x;
        std::memcpy(&x, p, 8);
        out[k] = x;
        break;
      }
    }
  }
  return out;
}

const TensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::ReleasePages(const TensorView& view) const {
  if (file_ == nullptr || view.data == nullptr) return;
  const auto* p = static_cast<const uint8_t*>(view.data);
  if (p < data_ || p >= data_ + size_) return;  // Not ours.
  file_->DontNeed(static_cast<size_t>(p - file_->data()), static_cast<size_t>(view.NumBytes()));
}

void GgufFile::ReleasePagesExcept(std::span<const TensorView> in_use) const {
  if (file_ != nullptr) file_->DontNeedExcept(ByteRanges(in_use));
}

void GgufFile::ReleaseHeaderPages() const {
  if (file_ != nullptr) file_->DontNeed(0, static_cast<size_t>(header_bytes_));
}

absl::StatusOr<TensorView> GgufFile::ReadRows(std::string_view name, int64_t row_begin, int64_t row_end) const {
  const TensorInfo* info = FindTensor(name);
  if (info == nullptr) {
    return absl::NotFoundError(cascade::StrCat(name_, ": tensor '", name, "' is missing"));
  }
  if (row_begin < 0 || row_begin > row_end || row_end > info->Rows()) {
    return absl::OutOfRangeError(cascade::StrCat(name_, ": tensor '", name, "': rows [", row_begin, ", ", row_end,
                                                 ") outside [0, ", info->Rows(), ")"));
  }
  const int64_t row_bytes = RowBytes(info->dtype, info->Cols());
  TensorView v;
  v.data = const_cast<uint8_t*>(data_ + info->file_offset + row_begin * row_bytes);
  v.dtype = info->dtype;
  v.n_dims = 2;
  v.shape = {row_end - row_begin, info->Cols(), 0, 0};
  if (file_) file_->WillNeed(info->file_offset + row_begin * row_bytes, (row_end - row_begin) * row_bytes);
  return v;
}

}  // namespace cascade::model
