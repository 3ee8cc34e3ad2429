// RoPE frequencies of every scaling type Cascade reads, in the formulas of transformers'
// modeling_rope_utils.py (4.57 and 5.x agree), in double and rounded once to f32.
#include <algorithm>
#include <cmath>

#include "model/format/model_config.h"

namespace cascade::model {
namespace {

// Llama 3.1: keep high frequencies, divide low ones by the factor, blend between.
double Llama3(double f, const ModelConfig& c) {
  const double old_ctx = static_cast<double>(c.rope_original_ctx);
  const double low_wavelen = old_ctx / c.rope_low_freq_factor;
  const double high_wavelen = old_ctx / c.rope_high_freq_factor;
  const double wavelen = 2 * M_PI / f;
  if (wavelen > low_wavelen) return f / c.rope_scaling_factor;
  if (wavelen < high_wavelen) return f;
  const double smooth =
      (old_ctx / wavelen - c.rope_low_freq_factor) / (c.rope_high_freq_factor - c.rope_low_freq_factor);
  return (1 - smooth) * f / c.rope_scaling_factor + smooth * f;
}

// YaRN: dimensions that turn fewer than beta_slow times over the original context are
// interpolated (divided by the factor), those that turn more than beta_fast times kept,
// with a linear ramp between; the ramp's ends in dimensions, rounded outwards when truncating.
std::vector<double> Yarn(const ModelConfig& c) {
  const double dim = static_cast<double>(c.head_dim), base = c.rope_theta;
  const auto correction_dim = [&](double rotations) {
    return dim * std::log(static_cast<double>(c.rope_original_ctx) / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  double low = correction_dim(c.rope_beta_fast), high = correction_dim(c.rope_beta_slow);
  if (c.rope_yarn_truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // As transformers: no division by zero.
  std::vector<double> inv(c.head_dim / 2);
  for (size_t i = 0; i < inv.size(); ++i) {
    const double extrapolated = std::pow(base, -2.0 * static_cast<double>(i) / dim);
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double keep = 1 - ramp;  // Share of the extrapolated (unscaled) frequency.
    inv[i] = extrapolated / c.rope_scaling_factor * (1 - keep) + extrapolated * keep;
  }
  return inv;
}

}  // namespace

std::vector<float> RopeInvFreq(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  const std::vector<double> yarn = c.rope_scaling == RopeScaling::kYarn ? Yarn(c) : std::vector<double>();
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    double f = std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
    switch (c.rope_scaling) {
      case RopeScaling::kNone: break;
      case RopeScaling::kDynamic: break;  // Unscaled up to the original context, where n_ctx_train is capped.
      case RopeScaling::kLinear: f /= c.rope_scaling_factor; break;
      case RopeScaling::kLlama3: f = Llama3(f, c); break;
      case RopeScaling::kYarn: f = yarn[i]; break;
      case RopeScaling::kLongRope: f /= c.rope_ext_factors[i]; break;  // Short factors; Validate checks the size.
    }
    inv[i] = static_cast<float>(f);
  }
  return inv;
}

}  // namespace cascade::model
