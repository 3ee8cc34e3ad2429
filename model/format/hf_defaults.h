// The defaults of transformers' config classes for the model types Cascade serves: the
// value a config.json key takes when the file omits it, as transformers itself loads the
// file. Read off the classes' signatures in transformers 4.57.6 and 5.25.0, which agree on
// every key listed. A key listed as `null` is the class's None, which the reader resolves
// by transformers' rule for that key (head_dim: hidden_size / num_attention_heads, ...).
// Thread-safe (constant data).
#pragma once

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace cascade::model {

inline constexpr std::string_view kTransformersVersions = "transformers 4.57.6 and 5.25.0";

// The class default of `key` for `model_type`, as JSON text ("1e-06", "null", "false"), or
// nullopt when the class has no such parameter.
std::optional<std::string_view> HfClassDefault(std::string_view model_type, std::string_view key);

// Every (key, JSON text) the table lists for `model_type` (the tests hold it against
// transformers itself).
std::vector<std::pair<std::string_view, std::string_view>> HfClassDefaults(std::string_view model_type);

// The config class of `model_type`, for messages: "MixtralConfig" (empty when unknown).
std::string_view HfConfigClassName(std::string_view model_type);

}  // namespace cascade::model
