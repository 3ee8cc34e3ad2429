#include "model/format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "core/utf8.h"
#include "model/format/fp8_checkpoint.h"
#include "model/format/gpt_oss_experts.h"
#include "model/format/hf_model.h"
#include "model/format/int4_checkpoint.h"
#include "model/format/mxfp4_checkpoint.h"

namespace cascade::model {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// Valid safetensors headers nest at most three levels (root / tensor / shape); a much
// deeper document is corrupt, and refusing it bounds the parser's work.
constexpr int kMaxJsonDepth = 16;

// The dtypes of the safetensors format that Cascade does not load.
constexpr std::string_view kKnownUnsupportedDTypes[] = {
    "BOOL", "I8", "I16", "U16", "U32", "I64", "U64", "F64", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64",
};

std::optional<DType> DTypeFromSafetensors(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  if (name == "I32") return DType::kI32;
  if (name == "F8_E4M3") return DType::kF8_E4M3;  // With its scales: fp8_checkpoint.h.
  if (name == "U8") return DType::kU8;            // gpt-oss's MXFP4 codes: gpt_oss_experts.h.
  return std::nullopt;
}

// Debian's Abseil has its own `absl::string_view`; this converts from the standard one.
absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string ShapeText(const std::vector<int64_t>& dims) { return cascade::StrCat("[", absl::StrJoin(dims, ", "), "]"); }

// Maximum nesting depth of arrays/objects outside strings (a cheap pre-scan).
int JsonNestingDepth(std::string_view s) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > kMaxJsonDepth) return max_depth;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

// A non-negative JSON integer, or an error text.
absl::StatusOr<uint64_t> NonNegativeInt(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x < 0) return absl::DataLossError(cascade::StrCat("negative value ", x));
    return static_cast<uint64_t>(x);
  }
  return absl::DataLossError(cascade::StrCat("expected a non-negative integer, got ", v.dump()));
}

struct ParsedEntry {
  TensorInfo info;
  uint64_t begin = 0;  // Relative to the start of the data section.
  uint64_t end = 0;
};

// A "shape" array: non-negative dimensions whose product fits in 64 bits.
absl::StatusOr<std::vector<int64_t>> ParseShape(const Json& shape) {
  std::vector<int64_t> dims;
  int64_t n_elements = 1;
  for (const Json& d : shape) {
    absl::StatusOr<uint64_t> v = NonNegativeInt(d);
    if (!v.ok()) return Annotate(v.status(), "bad dimension in \"shape\"");
    if (*v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::DataLossError(cascade::StrCat("dimension ", *v, " in \"shape\" is too large"));
    }
    const int64_t dim = static_cast<int64_t>(*v);
    dims.push_back(dim);
    if (__builtin_mul_overflow(n_elements, dim, &n_elements)) {
      return absl::DataLossError(cascade::StrCat("shape ", ShapeText(dims), " overflows the 64-bit element count"));
    }
  }
  return dims;
}

// Validates one header entry. Messages returned here are prefixed by the caller with
// the file and tensor name.
absl::StatusOr<ParsedEntry> ParseEntry(const std::string& name, const Json& entry, uint64_t data_bytes) {
  if (!entry.is_object()) {
    return absl::DataLossError(cascade::StrCat("entry is a JSON ", entry.type_name(), ", expected an object"));
  }
  const auto dtype_it = entry.find("dtype");
  const auto shape_it = entry.find("shape");
  const auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    return absl::DataLossError("missing or non-string \"dtype\"");
  }
  if (shape_it == entry.end() || !shape_it->is_array()) {
    return absl::DataLossError("missing or non-array \"shape\"");
  }
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    return absl::DataLossError("missing \"data_offsets\" or not an array of two integers");
  }

  CASCADE_ASSIGN_OR_RETURN(const std::vector<int64_t> dims, ParseShape(*shape_it));
  int64_t n_elements = 1;
  for (int64_t dim : dims) n_elements *= dim;  // ParseShape checked the product.

  const std::string dtype_name = dtype_it->get<std::string>();
  const std::optional<DType> dtype = DTypeFromSafetensors(dtype_name);
  if (!dtype.has_value()) {
    const bool known = std::find(std::begin(kKnownUnsupportedDTypes), std::end(kKnownUnsupportedDTypes), dtype_name) !=
                       std::end(kKnownUnsupportedDTypes);
    if (known) {
      return absl::UnimplementedError(
          cascade::StrCat("dtype ", dtype_name, " is not supported (supported: F32, F16, BF16, I32)"));
    }
    return absl::DataLossError(cascade::StrCat("unknown dtype \"", absl::CHexEscape(dtype_name), "\""));
  }
  if (dims.size() > static_cast<size_t>(kMaxDims)) {
    return absl::UnimplementedError(cascade::StrCat("shape ", ShapeText(dims), " has ", dims.size(),
                                                    " dimensions; at most ", kMaxDims, " are supported"));
  }
  int64_t n_bytes = 0;
  if (__builtin_mul_overflow(n_elements, BlockBytes(*dtype), &n_bytes)) {
    return absl::DataLossError(
        cascade::StrCat("shape ", ShapeText(dims), " of ", dtype_name, " overflows the byte size"));
  }

  absl::StatusOr<uint64_t> begin = NonNegativeInt((*offsets_it)[0]);
  if (!begin.ok()) return Annotate(begin.status(), "bad \"data_offsets\" begin");
  absl::StatusOr<uint64_t> end = NonNegativeInt((*offsets_it)[1]);
  if (!end.ok()) return Annotate(end.status(), "bad \"data_offsets\" end");
  if (*begin > *end) {
    return absl::DataLossError(cascade::StrCat("data_offsets [", *begin, ", ", *end, ") are reversed"));
  }
  if (*end > data_bytes) {
    return absl::DataLossError(cascade::StrCat("data_offsets [", *begin, ", ", *end,
                                               ") run past the end of the data section (", data_bytes, " bytes)"));
  }
  if (*end - *begin != static_cast<uint64_t>(n_bytes)) {
    return absl::DataLossError(cascade::StrCat("data_offsets [", *begin, ", ", *end, ") hold ", *end - *begin,
                                               " bytes but shape ", ShapeText(dims), " of ", dtype_name, " needs ",
                                               n_bytes));
  }

  ParsedEntry out;
  out.info.name = name;
  out.info.dtype = *dtype;
  out.info.n_dims = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) out.info.shape[i] = dims[i];
  out.info.n_bytes = static_cast<uint64_t>(n_bytes);
  out.begin = *begin;
  out.end = *end;
  return out;
}

// Rejects a header that is not valid UTF-8 or nests too deeply, before the JSON parser sees it.
absl::Status CheckHeaderText(std::string_view header, const std::string& file) {
  if (const size_t bad = FirstInvalidUtf8(header); bad != std::string_view::npos) {
    // Show the text just before the bad byte: it is usually the start of the tensor name.
    const size_t from = bad >= 40 ? bad - 40 : 0;
    const size_t quote = header.rfind('"', bad);
    const size_t ctx = (quote != std::string_view::npos && quote >= from) ? quote : from;
    return absl::DataLossError(
        cascade::StrCat(file, ": header is not valid UTF-8 at byte ", 8 + bad,
                        " (in a tensor name or string "
                        "near \"",
                        absl::CHexEscape(AbslView(header.substr(ctx, std::min<size_t>(bad - ctx + 4, 64)))), "\")"));
  }
  if (JsonNestingDepth(header) > kMaxJsonDepth) {
    return absl::DataLossError(cascade::StrCat(file, ": header JSON nests deeper than ", kMaxJsonDepth, " levels"));
  }
  return absl::OkStatus();
}

// Parses the header JSON, which must be an object without duplicate top-level keys.
absl::StatusOr<Json> ParseHeaderJson(std::string_view header, const std::string& file) {
  Json root;
  std::string duplicate;
  try {
    absl::flat_hash_set<std::string> seen;
    Json::parser_callback_t on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
      if (depth == 1 && event == Json::parse_event_t::key && parsed.is_string()) {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
      }
      return true;
    };
    root = Json::parse(header.begin(), header.end(), on_event);
  } catch (const Json::exception& e) {
    return absl::DataLossError(cascade::StrCat(file, ": header is not valid JSON: ", e.what()));
  } catch (const std::exception& e) {
    return absl::DataLossError(cascade::StrCat(file, ": cannot parse header: ", e.what()));
  }
  if (!duplicate.empty()) {
    return absl::DataLossError(cascade::StrCat(file, ": tensor '", duplicate, "' appears twice in the header"));
  }
  if (!root.is_object()) {
    return absl::DataLossError(cascade::StrCat(file, ": header is a JSON ", root.type_name(), ", expected an object"));
  }
  return root;
}

// Orders `entries` by data offset, rejecting overlapping ranges, and returns their infos.
absl::StatusOr<std::vector<TensorInfo>> SortAndCheckOverlaps(std::vector<ParsedEntry>& entries,
                                                             const std::string& file) {
  std::sort(entries.begin(), entries.end(), [](const ParsedEntry& a, const ParsedEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::vector<TensorInfo> out;
  out.reserve(entries.size());
  uint64_t max_end = 0;
  const ParsedEntry* max_end_owner = nullptr;
  for (const ParsedEntry& e : entries) {
    if (max_end_owner != nullptr && e.begin < max_end) {
      return absl::DataLossError(cascade::StrCat(file, ": tensor '", e.info.name, "' data_offsets [", e.begin, ", ",
                                                 e.end, ") overlap tensor '", max_end_owner->info.name, "' [",
                                                 max_end_owner->begin, ", ", max_end_owner->end, ")"));
    }
    if (max_end_owner == nullptr || e.end > max_end) {
      max_end = e.end;
      max_end_owner = &e;
    }
    out.push_back(e.info);
  }
  return out;
}

absl::StatusOr<std::vector<TensorInfo>> ParseHeaderImpl(std::string_view bytes, const std::string& file) {
  if (bytes.size() < 8) {
    return absl::DataLossError(
        cascade::StrCat(file, ": truncated: ", bytes.size(), " bytes, too short for the 8-byte header length"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  }
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return absl::DataLossError(cascade::StrCat(file, ": header length ", header_len, " exceeds the limit of ",
                                               kMaxSafetensorsHeaderBytes,
                                               " bytes (corrupt, or not a safetensors file)"));
  }
  if (header_len > bytes.size() - 8) {
    return absl::DataLossError(cascade::StrCat(file, ": truncated: header length ", header_len,
                                               " runs past the end of the file (", bytes.size(), " bytes)"));
  }
  const std::string_view header = bytes.substr(8, header_len);
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_bytes = bytes.size() - data_start;

  CASCADE_RETURN_IF_ERROR(CheckHeaderText(header, file));
  CASCADE_ASSIGN_OR_RETURN(const Json root, ParseHeaderJson(header, file));

  std::vector<ParsedEntry> entries;
  entries.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") continue;
    if (name.empty()) {
      return absl::DataLossError(cascade::StrCat(file, ": a tensor has an empty name"));
    }
    absl::StatusOr<ParsedEntry> parsed = ParseEntry(name, entry, data_bytes);
    if (!parsed.ok()) {
      return Annotate(parsed.status(), cascade::StrCat(file, ": tensor '", name, "'"));
    }
    parsed->info.file_offset = data_start + parsed->begin;
    entries.push_back(*std::move(parsed));
  }
  return SortAndCheckOverlaps(entries, file);
}

int64_t RowsOf(const TensorInfo& t) {
  if (t.n_dims == 0) return 1;
  int64_t rows = 1;
  for (int i = 0; i + 1 < t.n_dims; ++i) rows *= t.shape[i];
  return t.shape[t.n_dims - 1] == 0 ? 0 : rows;
}

// Reads a whole small text file (the index) through a mapping.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  return std::string(reinterpret_cast<const char*>(file->data()), file->size());
}

}  // namespace

absl::StatusOr<std::vector<TensorInfo>> ParseSafetensorsHeader(std::string_view file_bytes, const std::string& name) {
  try {
    return ParseHeaderImpl(file_bytes, name);
  } catch (const std::exception& e) {  // E.g. bad_alloc; nothing may escape.
    return absl::DataLossError(cascade::StrCat(name, ": cannot parse header: ", e.what()));
  }
}

absl::Status SafetensorsSource::AddShard(Shard shard) {
  CASCADE_ASSIGN_OR_RETURN(
      std::vector<TensorInfo> tensors,
      ParseSafetensorsHeader(std::string_view(reinterpret_cast<const char*>(shard.data), shard.size), shard.path));
  const size_t shard_index = shards_.size();
  for (TensorInfo& t : tensors) {
    auto [it, inserted] = tensor_index_.emplace(t.name, tensors_.size());
    if (!inserted) {
      return absl::DataLossError(cascade::StrCat(shard.path, ": tensor '", t.name, "' is also stored in ",
                                                 shards_[tensor_shard_[it->second]].path));
    }
    tensors_.push_back(std::move(t));
    tensor_shard_.push_back(shard_index);
  }
  shards_.push_back(std::move(shard));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SafetensorsSource>> SafetensorsSource::OpenFile(const std::string& path) {
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  std::unique_ptr<SafetensorsSource> source(new SafetensorsSource(path));
  Shard shard;
  shard.path = path;
  shard.data = file->data();
  shard.size = file->size();
  shard.file = std::move(file);
  CASCADE_RETURN_IF_ERROR(source->AddShard(std::move(shard)));
  return source;
}

absl::StatusOr<std::unique_ptr<SafetensorsSource>> SafetensorsSource::OpenBytes(std::string_view bytes,
                                                                                std::string name) {
  std::unique_ptr<SafetensorsSource> source(new SafetensorsSource(name));
  Shard shard;
  shard.path = std::move(name);
  shard.data = reinterpret_cast<const uint8_t*>(bytes.data());
  shard.size = bytes.size();
  CASCADE_RETURN_IF_ERROR(source->AddShard(std::move(shard)));
  return source;
}

namespace {

// The index's weight_map: tensor name -> shard file name (relative to the directory).
absl::StatusOr<std::map<std::string, std::string>> ReadWeightMap(const std::string& index_path) {
  CASCADE_ASSIGN_OR_RETURN(const std::string index_text, ReadSmallFile(index_path));
  std::map<std::string, std::string> weight_map;
  try {
    const Json index = Json::parse(index_text);
    if (!index.is_object()) {
      return absl::DataLossError(cascade::StrCat(index_path, ": not a JSON object"));
    }
    const auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) {
      return absl::DataLossError(cascade::StrCat(index_path, ": missing object \"weight_map\""));
    }
    for (const auto& [tensor, file] : wm->items()) {
      if (!file.is_string()) {
        return absl::DataLossError(
            cascade::StrCat(index_path, ": tensor '", tensor, "' maps to a non-string shard name"));
      }
      weight_map.emplace(tensor, file.get<std::string>());
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(cascade::StrCat(index_path, ": not valid JSON: ", e.what()));
  }
  if (weight_map.empty()) {
    return absl::DataLossError(cascade::StrCat(index_path, ": \"weight_map\" is empty"));
  }
  return weight_map;
}

// The distinct shards, sorted by name (model-00001-of-0000n first), each with one tensor it
// should hold, for messages. DataLoss for a name that is not a plain file name.
absl::StatusOr<std::map<std::string, std::string>> ShardsOf(const std::string& index_path,
                                                            const std::map<std::string, std::string>& weight_map) {
  std::map<std::string, std::string> shard_example;
  for (const auto& [tensor, file] : weight_map) {
    if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos || file == "." ||
        file == "..") {
      return absl::DataLossError(cascade::StrCat(index_path, ": tensor '", tensor, "' maps to invalid shard name \"",
                                                 absl::CHexEscape(file), "\""));
    }
    shard_example.emplace(file, tensor);
  }
  return shard_example;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsSource>> SafetensorsSource::OpenDirectory(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(cascade::StrCat(dir, ": not a directory"));
  }
  const std::string single = (fs::path(dir) / "model.safetensors").string();
  if (fs::exists(single, ec)) return OpenFile(single);

  const std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  if (!fs::exists(index_path, ec)) {
    return absl::NotFoundError(
        cascade::StrCat(dir, ": neither model.safetensors nor model.safetensors.index.json is present"));
  }
  CASCADE_ASSIGN_OR_RETURN(const auto weight_map, ReadWeightMap(index_path));

  CASCADE_ASSIGN_OR_RETURN(const auto shard_example, ShardsOf(index_path, weight_map));
  std::unique_ptr<SafetensorsSource> source(new SafetensorsSource(dir));
  std::map<std::string, size_t> shard_index;
  for (const auto& [file, example_tensor] : shard_example) {
    const std::string shard_path = (fs::path(dir) / file).string();
    absl::StatusOr<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(shard_path);
    if (!mapped.ok()) {
      return Annotate(mapped.status(),
                      cascade::StrCat(index_path, ": shard '", file, "' (holding tensor '", example_tensor, "')"));
    }
    Shard shard;
    shard.path = shard_path;
    shard.data = (*mapped)->data();
    shard.size = (*mapped)->size();
    shard.file = *std::move(mapped);
    shard_index[file] = source->shards_.size();
    CASCADE_RETURN_IF_ERROR(source->AddShard(std::move(shard)));
  }

  for (const auto& [tensor, file] : weight_map) {
    const auto it = source->tensor_index_.find(tensor);
    if (it == source->tensor_index_.end()) {
      return absl::DataLossError(cascade::StrCat(index_path, ": tensor '", tensor, "' is mapped to shard '", file,
                                                 "', which does not contain it"));
    }
    const size_t actual = source->tensor_shard_[it->second];
    if (actual != shard_index[file]) {
      return absl::DataLossError(cascade::StrCat(index_path, ": tensor '", tensor, "' is mapped to shard '", file,
                                                 "' but is stored in ", source->shards_[actual].path));
    }
  }
  return source;
}

void SafetensorsSource::ReleasePages(const TensorView& view) const {
  const auto* p = static_cast<const uint8_t*>(view.data);
  if (p == nullptr) return;
  for (const Shard& s : shards_) {
    if (s.file != nullptr && p >= s.data && p < s.data + s.size) {
      s.file->DontNeed(static_cast<size_t>(p - s.file->data()), static_cast<size_t>(view.NumBytes()));
      return;
    }
  }
}

void SafetensorsSource::ReleasePagesExcept(std::span<const TensorView> in_use) const {
  const std::vector<std::pair<const uint8_t*, size_t>> ranges = ByteRanges(in_use);
  for (const Shard& s : shards_) {
    if (s.file != nullptr) s.file->DontNeedExcept(ranges);
  }
}

const TensorInfo* SafetensorsSource::FindTensor(std::string_view name) const {
  const auto it = tensor_index_.find(AbslView(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const std::string& SafetensorsSource::ShardPathOf(std::string_view name) const {
  const auto it = tensor_index_.find(AbslView(name));
  CASCADE_CHECK(it != tensor_index_.end());
  return shards_[tensor_shard_[it->second]].path;
}

absl::StatusOr<TensorView> SafetensorsSource::ReadRows(std::string_view name, int64_t row_begin,
                                                       int64_t row_end) const {
  const auto it = tensor_index_.find(AbslView(name));
  if (it == tensor_index_.end()) {
    return absl::NotFoundError(cascade::StrCat(path_, ": no tensor named '", AbslView(name), "'"));
  }
  const TensorInfo& t = tensors_[it->second];
  const Shard& shard = shards_[tensor_shard_[it->second]];
  const int64_t rows = RowsOf(t);
  if (row_begin < 0 || row_begin > row_end || row_end > rows) {
    return absl::OutOfRangeError(cascade::StrCat(shard.path, ": tensor '", t.name, "': rows [", row_begin, ", ",
                                                 row_end, ") are outside [0, ", rows, ")"));
  }
  const int64_t cols = t.n_dims == 0 ? 1 : t.shape[t.n_dims - 1];
  const int64_t row_bytes = cols * BlockBytes(t.dtype);  // Dense types only.
  const uint8_t* data = shard.data + t.file_offset + row_begin * row_bytes;
  // The mapping is read-only; TensorView's pointer is non-const by design.
  return TensorView(const_cast<uint8_t*>(data), t.dtype, {row_end - row_begin, cols});
}

// config.json's quantization_config.quant_method, or "" (none, or not JSON: the readers
// below report that).
std::string QuantMethod(const std::string& config_text) {
  const Json config = Json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) return "";
  const auto q = config.find("quantization_config");
  if (q == config.end() || !q->is_object()) return "";
  const auto m = q->find("quant_method");
  return m != q->end() && m->is_string() ? m->get<std::string>() : "";
}

absl::StatusOr<std::unique_ptr<WeightSource>> OpenHfWeights(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsSource> file, SafetensorsSource::OpenFile(path));
    return std::unique_ptr<WeightSource>(std::move(file));
  }
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsSource> dir, SafetensorsSource::OpenDirectory(path));
  // A quantized checkpoint declares itself in config.json; its stored tensors are then
  // read through the FP8, MXFP4 or INT4 repacking source.
  const std::string config_path = (fs::path(path) / "config.json").string();
  if (!fs::exists(config_path, ec)) return std::unique_ptr<WeightSource>(std::move(dir));
  CASCADE_ASSIGN_OR_RETURN(std::string config_text, ReadSmallFile(config_path));
  CASCADE_ASSIGN_OR_RETURN(std::optional<Fp8Scheme> fp8, Fp8SchemeFromHfConfig(config_text, config_path));
  if (fp8.has_value()) return OpenFp8Checkpoint(std::move(dir), *fp8);
  CASCADE_ASSIGN_OR_RETURN(const bool quark, IsQuarkMxfp4(config_text, config_path));
  if (quark) return OpenQuarkMxfp4Checkpoint(std::move(dir));
  if (QuantMethod(config_text) == "mxfp4") {  // OpenAI's gpt-oss release: MXFP4 experts, the rest BF16.
    if (HasGptOssExperts(*dir)) return OpenGptOssExperts(std::move(dir));
    return absl::UnimplementedError(
        cascade::StrCat(config_path,
                        ": quantization_config.quant_method 'mxfp4' is read for gpt-oss's experts only (no "
                        "mlp.experts.gate_up_proj_blocks here)"));
  }
  CASCADE_ASSIGN_OR_RETURN(std::optional<Int4Scheme> scheme, Int4SchemeFromHfConfig(config_text, config_path));
  if (scheme.has_value()) return OpenInt4Checkpoint(std::move(dir), *scheme);
  if (HasGptOssExperts(*dir)) return OpenGptOssExperts(std::move(dir));
  return std::unique_ptr<WeightSource>(std::move(dir));
}

}  // namespace cascade::model
