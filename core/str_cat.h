// `cascade::StrCat` / `cascade::StrAppend`: absl::StrCat that also takes std::string_view.
// Debian's Abseil is built with ABSL_OPTION_USE_STD_STRING_VIEW=0, so absl::string_view
// is its own type and absl::StrCat rejects std::string_view; we use std::string_view in
// our interfaces and convert here, once. Thread-safe (pure functions).
#pragma once

#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cascade {
namespace internal {
template <typename T>
decltype(auto) ToAbslArg(T&& v) {
  if constexpr (std::is_same_v<std::decay_t<T>, std::string_view>) {
    return absl::string_view(v.data(), v.size());
  } else {
    return std::forward<T>(v);
  }
}
}  // namespace internal

template <typename... Args>
std::string StrCat(Args&&... args) {
  return absl::StrCat(internal::ToAbslArg(std::forward<Args>(args))...);
}

template <typename... Args>
void StrAppend(std::string* out, Args&&... args) {
  absl::StrAppend(out, internal::ToAbslArg(std::forward<Args>(args))...);
}

inline std::string_view ToStd(absl::string_view s) { return {s.data(), s.size()}; }

}  // namespace cascade
