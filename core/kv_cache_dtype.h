// The element types a KV cache may hold, by the names the config (scheduler.kv_cache_dtype)
// and `cascade run --kv-type` take: f32, f16 (the default), q8_0 (34 bytes per 32 elements)
// and fp8_e4m3 (one byte per element, OCP E4M3 as core/fp8.h, times a scale per layer and
// KV head: see model/kv_cache.h). One list, so every reader refuses the same names.
// Thread-safe (pure functions).
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace cascade {

// "f32, f16, q8_0, fp8_e4m3": for error messages and help text.
inline constexpr std::string_view kKvCacheDTypeNames = "f32, f16, q8_0, fp8_e4m3";

bool IsKvCacheDType(DType d);
// The config's name of a KV dtype ("fp8_e4m3" for DType::kF8_E4M3).
std::string_view KvCacheDTypeName(DType d);
// Parses a name of kKvCacheDTypeNames (case-insensitive; "f8_e4m3" too, DTypeName's
// spelling). InvalidArgument naming the list otherwise.
absl::StatusOr<DType> KvCacheDTypeFromName(std::string_view name);

}  // namespace cascade
