// Typed access to the keys of one config.json object, for the Hugging Face config readers
// (hf_config.cc, hf_rope.cc); not a public door. Every error names the key and the file.
// No value is taken silently: a key is the file's, or the default of transformers' config
// class for the model type (hf_defaults.h), or a fallback with a named rule; the last two
// are appended to the config's `defaulted` list.
// Thread-compatible; the object, source and list must outlive it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/format/model_config.h"

namespace cascade::model {

class HfKeys {
 public:
  using Json = nlohmann::json;

  // `model_type` picks the class defaults ("" for a nested object such as rope_parameters,
  // whose defaults are rules the caller names); `prefix` is how messages spell the object
  // ("rope_parameters.").
  HfKeys(const Json& obj, const std::string& source, std::string prefix, std::string model_type,
         std::vector<DefaultedKey>* defaulted);

  // The file's value; nullptr when absent or null.
  const Json* Find(const char* key) const;
  // Whether the file writes the key at all (null included).
  bool Has(const char* key) const { return obj_.is_object() && obj_.contains(key); }

  // The file's value, else the class default; neither (or null) is an error naming the key.
  absl::StatusOr<int64_t> Int(const char* key) const;
  absl::StatusOr<double> Double(const char* key) const;
  absl::StatusOr<bool> Bool(const char* key) const;
  absl::StatusOr<std::string> String(const char* key) const;
  // The file's value, else the class default; when both are absent or null (the class's
  // None), `fallback`, recorded with `rule`.
  absl::StatusOr<int64_t> Int(const char* key, int64_t fallback, std::string_view rule) const;
  absl::StatusOr<double> Double(const char* key, double fallback, std::string_view rule) const;
  absl::StatusOr<bool> Bool(const char* key, bool fallback, std::string_view rule) const;

  void Record(std::string key, std::string value, std::string_view rule) const;
  absl::Status Missing(const char* key) const;
  absl::Status Bad(const char* key, const Json& v, std::string_view why) const;
  const std::string& prefix() const { return prefix_; }

 private:
  // The file's value, else the class default (held in `storage`, recorded); nullptr when
  // neither gives a non-null value.
  const Json* Resolve(const char* key, std::optional<Json>& storage) const;
  absl::StatusOr<int64_t> AsInt(const char* key, const Json& v) const;
  absl::StatusOr<double> AsDouble(const char* key, const Json& v) const;
  absl::StatusOr<bool> AsBool(const char* key, const Json& v) const;

  const Json& obj_;
  const std::string& source_;
  std::string prefix_;
  std::string model_type_;
  std::vector<DefaultedKey>* defaulted_;
};

}  // namespace cascade::model
