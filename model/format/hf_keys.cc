#include "model/format/hf_keys.h"

#include "absl/strings/str_format.h"
#include "core/str_cat.h"
#include "model/format/hf_defaults.h"

namespace cascade::model {

HfKeys::HfKeys(const Json& obj, const std::string& source, std::string prefix, std::string model_type,
               std::vector<DefaultedKey>* defaulted)
    : obj_(obj),
      source_(source),
      prefix_(std::move(prefix)),
      model_type_(std::move(model_type)),
      defaulted_(defaulted) {}

const HfKeys::Json* HfKeys::Find(const char* key) const {
  if (!obj_.is_object()) return nullptr;
  const auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

const HfKeys::Json* HfKeys::Resolve(const char* key, std::optional<Json>& storage) const {
  if (Has(key)) return Find(key);
  const std::optional<std::string_view> d = HfClassDefault(model_type_, key);
  if (!d.has_value()) return nullptr;
  storage = Json::parse(*d);
  if (storage->is_null()) return nullptr;
  Record(prefix_ + key, storage->dump(),
         cascade::StrCat(HfConfigClassName(model_type_), " default, ", kTransformersVersions));
  return &*storage;
}

absl::StatusOr<int64_t> HfKeys::Int(const char* key) const {
  std::optional<Json> storage;
  const Json* v = Resolve(key, storage);
  return v == nullptr ? Missing(key) : AsInt(key, *v);
}
absl::StatusOr<double> HfKeys::Double(const char* key) const {
  std::optional<Json> storage;
  const Json* v = Resolve(key, storage);
  return v == nullptr ? Missing(key) : AsDouble(key, *v);
}
absl::StatusOr<bool> HfKeys::Bool(const char* key) const {
  std::optional<Json> storage;
  const Json* v = Resolve(key, storage);
  return v == nullptr ? Missing(key) : AsBool(key, *v);
}
absl::StatusOr<std::string> HfKeys::String(const char* key) const {
  std::optional<Json> storage;
  const Json* v = Resolve(key, storage);
  if (v == nullptr) return Missing(key);
  if (!v->is_string()) return Bad(key, *v, "expected a string");
  return v->get<std::string>();
}

absl::StatusOr<int64_t> HfKeys::Int(const char* key, int64_t fallback, std::string_view rule) const {
  std::optional<Json> storage;
  if (const Json* v = Resolve(key, storage); v != nullptr) return AsInt(key, *v);
  Record(prefix_ + key, cascade::StrCat(fallback), rule);
  return fallback;
}
absl::StatusOr<double> HfKeys::Double(const char* key, double fallback, std::string_view rule) const {
  std::optional<Json> storage;
  if (const Json* v = Resolve(key, storage); v != nullptr) return AsDouble(key, *v);
  Record(prefix_ + key, absl::StrFormat("%g", fallback), rule);
  return fallback;
}
absl::StatusOr<bool> HfKeys::Bool(const char* key, bool fallback, std::string_view rule) const {
  std::optional<Json> storage;
  if (const Json* v = Resolve(key, storage); v != nullptr) return AsBool(key, *v);
  Record(prefix_ + key, fallback ? "true" : "false", rule);
  return fallback;
}

void HfKeys::Record(std::string key, std::string value, std::string_view rule) const {
  if (defaulted_ != nullptr) defaulted_->push_back({std::move(key), std::move(value), std::string(rule)});
}

absl::Status HfKeys::Missing(const char* key) const {
  return absl::InvalidArgumentError(cascade::StrCat(source_, ": required key \"", prefix_, key, "\" is missing",
                                                    Has(key) ? " (null)" : "",
                                                    model_type_.empty() ? "" : " and has no transformers default"));
}

absl::Status HfKeys::Bad(const char* key, const Json& v, std::string_view why) const {
  std::string shown = v.dump();
  if (shown.size() > 60) shown = shown.substr(0, 60) + "...";
  return absl::InvalidArgumentError(cascade::StrCat(source_, ": key \"", prefix_, key, "\" = ", shown, ": ", why));
}

absl::StatusOr<int64_t> HfKeys::AsInt(const char* key, const Json& v) const {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t{1} << 62)) return Bad(key, v, "out of range");
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {  // Accept 4096.0, not 4096.5.
    const double d = v.get<double>();
    // Range first: converting a double outside int64_t is undefined behaviour.
    if (d >= -1e15 && d <= 1e15 && d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
  }
  return Bad(key, v, "expected an integer");
}

absl::StatusOr<double> HfKeys::AsDouble(const char* key, const Json& v) const {
  if (!v.is_number()) return Bad(key, v, "expected a number");
  return v.get<double>();
}

absl::StatusOr<bool> HfKeys::AsBool(const char* key, const Json& v) const {
  if (!v.is_boolean()) return Bad(key, v, "expected true or false");
  return v.get<bool>();
}

}  // namespace cascade::model
