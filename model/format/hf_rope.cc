#include "model/format/hf_rope.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::model {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kRopeUtils = "transformers' modeling_rope_utils.py";

// The RoPE parameter object and how messages name it: 5.x's `rope_parameters` (the entry of
// the layers' type when given per layer type), else 4.x's `rope_scaling`; nullptr when the
// file has neither (unscaled RoPE).
absl::StatusOr<const Json*> RopeObject(const HfKeys& keys, const std::vector<std::string>& layer_types,
                                       const std::string& source, std::string& name) {
  const Json* params = keys.Find("rope_parameters");
  const Json* scaling = keys.Find("rope_scaling");
  if (params != nullptr && scaling != nullptr && *params != *scaling) {
    return absl::InvalidArgumentError(
        cascade::StrCat(source, ": \"rope_parameters\" and \"rope_scaling\" are both given and disagree"));
  }
  if (params == nullptr) {
    name = "rope_scaling";
    if (scaling != nullptr && !scaling->is_object()) return keys.Bad("rope_scaling", *scaling, "expected an object");
    return scaling;
  }
  name = "rope_parameters";
  if (!params->is_object()) return keys.Bad("rope_parameters", *params, "expected an object");
  const bool per_layer_type = params->contains("full_attention") || params->contains("sliding_attention");
  if (!per_layer_type) return params;
  const Json* chosen = nullptr;
  for (const std::string& type : layer_types) {
    const auto it = params->find(type);
    if (it == params->end() || !it->is_object()) {
      return keys.Bad("rope_parameters", *params, cascade::StrCat("has no object for the layers' type \"", type, "\""));
    }
    if (chosen != nullptr && *chosen != *it) {
      return absl::UnimplementedError(cascade::StrCat(
          source, ": \"rope_parameters\" differ between layer types: RoPE per layer type is not supported"));
    }
    chosen = &*it;
    name = cascade::StrCat("rope_parameters.", type);
  }
  return chosen;
}

// YaRN's attention factor when the file gives none: 0.1 ln(factor) + 1 (the paper's
// mscale), or the ratio of two such with DeepSeek's mscale and mscale_all_dim.
double YarnMscale(double factor, double mscale) { return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0; }

absl::Status ParseYarn(const HfKeys& rk, ModelConfig& c) {
  if (const Json* a = rk.Find("attention_factor"); a != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(c.rope_attention_factor, rk.Double("attention_factor"));
  } else {
    const Json* mscale = rk.Find("mscale");
    const Json* all_dim = rk.Find("mscale_all_dim");
    const bool ratio = mscale != nullptr && all_dim != nullptr && mscale->is_number() && all_dim->is_number() &&
                       mscale->get<double>() != 0 && all_dim->get<double>() != 0;
    c.rope_attention_factor = ratio ? YarnMscale(c.rope_scaling_factor, mscale->get<double>()) /
                                          YarnMscale(c.rope_scaling_factor, all_dim->get<double>())
                                    : YarnMscale(c.rope_scaling_factor, 1.0);
    rk.Record(
        rk.prefix() + "attention_factor", cascade::StrCat(c.rope_attention_factor),
        cascade::StrCat(kRopeUtils, ": ",
                        ratio ? "mscale(factor, mscale) / mscale(factor, mscale_all_dim)" : "0.1 ln(factor) + 1"));
  }
  CASCADE_ASSIGN_OR_RETURN(c.rope_beta_fast, rk.Double("beta_fast", 32.0, kRopeUtils));
  CASCADE_ASSIGN_OR_RETURN(c.rope_beta_slow, rk.Double("beta_slow", 1.0, kRopeUtils));
  CASCADE_ASSIGN_OR_RETURN(c.rope_yarn_truncate, rk.Bool("truncate", true, kRopeUtils));
  return absl::OkStatus();
}

absl::Status ParseLongRope(const HfKeys& keys, const HfKeys& rk, ModelConfig& c) {
  for (const char* key : {"short_factor", "long_factor"}) {
    const Json* v = rk.Find(key);
    if (v == nullptr) return rk.Missing(key);
    if (!v->is_array() || static_cast<int64_t>(v->size()) != c.head_dim / 2 ||
        !std::all_of(v->begin(), v->end(), [](const Json& x) { return x.is_number() && x.get<double>() > 0; })) {
      return rk.Bad(key, *v, cascade::StrCat("expected ", c.head_dim / 2, " positive numbers (head_dim / 2)"));
    }
  }
  for (const Json& x : *rk.Find("short_factor")) c.rope_ext_factors.push_back(x.get<double>());
  // Phi-3 writes the original context beside max_position_embeddings, not inside.
  if (rk.Find("original_max_position_embeddings") == nullptr &&
      keys.Find("original_max_position_embeddings") != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(c.rope_original_ctx, keys.Int("original_max_position_embeddings"));
  } else {
    CASCADE_ASSIGN_OR_RETURN(c.rope_original_ctx, rk.Int("original_max_position_embeddings", c.n_ctx_train,
                                                         "transformers' rule: max_position_embeddings"));
  }
  if (c.rope_original_ctx <= 0)
    return rk.Bad("original_max_position_embeddings", c.rope_original_ctx, "must be positive");
  const double ratio = static_cast<double>(c.n_ctx_train) / static_cast<double>(c.rope_original_ctx);
  CASCADE_ASSIGN_OR_RETURN(c.rope_scaling_factor,
                           rk.Double("factor", ratio, "transformers' rule: max_position_embeddings / original"));
  const double f = c.rope_scaling_factor;
  const double fallback =
      f <= 1 ? 1.0 : std::sqrt(1 + std::log(f) / std::log(static_cast<double>(c.rope_original_ctx)));
  CASCADE_ASSIGN_OR_RETURN(
      c.rope_attention_factor,
      rk.Double("attention_factor", fallback, cascade::StrCat(kRopeUtils, ": sqrt(1 + ln(factor) / ln(original))")));
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseHfRope(const HfKeys& keys, const std::vector<std::string>& layer_types, const std::string& source,
                         ModelConfig& c) {
  std::string name;
  CASCADE_ASSIGN_OR_RETURN(const Json* params, RopeObject(keys, layer_types, source, name));
  static const Json kEmpty = Json::object();
  const HfKeys rk(params != nullptr ? *params : kEmpty, source, name + ".", "", &c.defaulted);

  // The base: inside the parameters (5.x) or at the top level (4.x), else the class default.
  if (const Json* theta = rk.Find("rope_theta"); theta != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(c.rope_theta, rk.Double("rope_theta"));
    if (const Json* top = keys.Find("rope_theta"); top != nullptr && *top != *theta) {
      return keys.Bad("rope_theta", *top, cascade::StrCat("disagrees with \"", name, ".rope_theta\""));
    }
  } else {
    CASCADE_ASSIGN_OR_RETURN(c.rope_theta, keys.Double("rope_theta"));
  }
  for (const HfKeys* k : {&keys, &rk}) {
    if (const Json* p = k->Find("partial_rotary_factor"); p != nullptr && !(p->is_number() && p->get<double>() == 1)) {
      return absl::UnimplementedError(cascade::StrCat(source, ": \"", k->prefix(), "partial_rotary_factor\" = ",
                                                      p->dump(), ": RoPE over part of a head is not supported"));
    }
  }
  if (params == nullptr && c.arch == "gpt_oss") {  // Its class default is a YaRN dict: not guessed.
    return absl::InvalidArgumentError(cascade::StrCat(
        source, ": gpt_oss needs \"rope_scaling\" (or rope_parameters): GptOssConfig's default is YaRN, factor 32"));
  }
  if (params == nullptr) return absl::OkStatus();

  std::string type;
  if (rk.Find("rope_type") != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(type, rk.String("rope_type"));
  } else if (rk.Find("type") != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(type, rk.String("type"));
  } else {
    type = "default";
    rk.Record(name + ".rope_type", "\"default\"", "transformers' standardize_rope_params");
  }
  static const std::pair<std::string_view, RopeScaling> kTypes[] = {
      {"default", RopeScaling::kNone},  {"linear", RopeScaling::kLinear}, {"dynamic", RopeScaling::kDynamic},
      {"llama3", RopeScaling::kLlama3}, {"yarn", RopeScaling::kYarn},     {"longrope", RopeScaling::kLongRope}};
  const auto it = std::find_if(std::begin(kTypes), std::end(kTypes), [&](const auto& t) { return t.first == type; });
  if (it == std::end(kTypes)) {
    return absl::UnimplementedError(cascade::StrCat(source, ": \"", name, ".rope_type\" = '", type,
                                                    "' is not supported (default, linear, dynamic, llama3, yarn, "
                                                    "longrope)"));
  }
  c.rope_scaling = it->second;
  switch (c.rope_scaling) {
    case RopeScaling::kNone: return absl::OkStatus();
    case RopeScaling::kLongRope: return ParseLongRope(keys, rk, c);
    default: break;
  }
  CASCADE_ASSIGN_OR_RETURN(c.rope_scaling_factor, rk.Double("factor"));
  if (!(c.rope_scaling_factor > 0)) return rk.Bad("factor", *rk.Find("factor"), "must be positive");
  if (c.rope_scaling == RopeScaling::kLinear) return absl::OkStatus();
  CASCADE_ASSIGN_OR_RETURN(c.rope_original_ctx, rk.Int("original_max_position_embeddings", c.n_ctx_train,
                                                       "transformers' rule: max_position_embeddings"));
  if (c.rope_scaling == RopeScaling::kLlama3) {
    CASCADE_ASSIGN_OR_RETURN(c.rope_low_freq_factor, rk.Double("low_freq_factor"));
    CASCADE_ASSIGN_OR_RETURN(c.rope_high_freq_factor, rk.Double("high_freq_factor"));
  } else if (c.rope_scaling == RopeScaling::kYarn) {
    CASCADE_RETURN_IF_ERROR(ParseYarn(rk, c));
  }
  return absl::OkStatus();
}

}  // namespace cascade::model
