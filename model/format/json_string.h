// The string at `key` of a JSON object, or `fallback` when the key is absent or not a
// string: how the quantized-checkpoint readers (fp8_, int4_, mxfp4_checkpoint.cc) read
// quantization_config's names, each then refusing by name what it cannot run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cascade::model {

inline std::string JsonString(const nlohmann::json& obj, const char* key, const char* fallback = "") {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
}

}  // namespace cascade::model
