// The names scheduler.cpu_prefill_activations and `--cpu-prefill-activations` take: f32
// (exact, the default) or bf16 (FP8 prefills round activations to bf16 on AVX512_BF16
// CPUs; lossy). One parser, so the config and the CLI take and refuse the same names.
// Thread-safe (pure functions).
#pragma once

#include <optional>
#include <string_view>

namespace cascade {

// For error messages and help text.
inline constexpr std::string_view kCpuPrefillActivationNames = "f32 or bf16";

// Whether `name` asks for bf16 activations (true) or f32 (false); nullopt for any other name.
inline std::optional<bool> CpuPrefillActivationsAreBf16(std::string_view name) {
  if (name == "f32") return false;
  if (name == "bf16") return true;
  return std::nullopt;
}

}  // namespace cascade
