#include "core/kv_cache_dtype.h"

#include <cctype>
#include <optional>
#include <string>

#include "core/str_cat.h"

namespace cascade {

bool IsKvCacheDType(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kQ8_0 || d == DType::kF8_E4M3;
}

std::string_view KvCacheDTypeName(DType d) { return d == DType::kF8_E4M3 ? "fp8_e4m3" : DTypeName(d); }

absl::StatusOr<DType> KvCacheDTypeFromName(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::optional<DType> d = lower == "fp8_e4m3" ? std::optional(DType::kF8_E4M3) : DTypeFromName(lower);
  if (!d || !IsKvCacheDType(*d)) {
    return absl::InvalidArgumentError(StrCat("KV cache dtype '", name, "' is not one of ", kKvCacheDTypeNames));
  }
  return *d;
}

}  // namespace cascade
