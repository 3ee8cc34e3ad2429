// Writes safetensors files for tests: the header JSON, then each tensor's bytes in the
// order given (list wider dtypes first to keep every tensor aligned), padded like the
// reference writer so that aligned offsets give aligned addresses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cascade::testing {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "F16", "I32", ...
  std::vector<int64_t> shape;
  std::string data;  // Raw little-endian bytes.
};

// 8-byte little-endian header length, the header text, then the data section.
std::string SafetensorsFileBytes(const std::string& header, const std::string& data = "");

// A valid file holding `entries` (with a `__metadata__` entry when asked).
std::string SafetensorsBytes(const std::vector<SafetensorsEntry>& entries, bool with_metadata = true);

// Writes a Hugging Face directory `dir` (created): config.json holding `config_json` and one
// model.safetensors of `entries`. Returns `dir`.
std::string WriteHfDirectory(const std::string& dir, const std::string& config_json,
                             const std::vector<SafetensorsEntry>& entries);

// The bytes of a vector, for SafetensorsEntry::data.
template <typename T>
std::string RawBytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace cascade::testing
