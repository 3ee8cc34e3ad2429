// UTF-8 validation helpers (RFC 3629: no overlongs, no surrogates, max U+10FFFF).
// Thread-safe (pure functions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cascade {

// Offset of the first byte that does not start a complete, valid sequence, or
// std::string_view::npos when `s` is entirely well-formed.
size_t FirstInvalidUtf8(std::string_view s);

// True when `s` is entirely well-formed UTF-8.
inline bool IsValidUtf8(std::string_view s) { return FirstInvalidUtf8(s) == std::string_view::npos; }

// Length of the longest prefix of `s` made of complete, valid sequences, stopping
// before a trailing incomplete sequence (a streaming decoder holds that back).
size_t CompleteUtf8Prefix(std::string_view s);

// Appends the UTF-8 encoding of code point `cp` (REQUIRES cp <= 0x10FFFF) to `out`.
void AppendUtf8(uint32_t cp, std::string& out);
inline std::string Utf8Of(uint32_t cp) {
  std::string out;
  AppendUtf8(cp, out);
  return out;
}

// The code point of the valid sequence at s[i] into `cp`, and its length in bytes; 0
// when the bytes there are not a complete, valid sequence.
size_t DecodeUtf8At(std::string_view s, size_t i, uint32_t* cp);

}  // namespace cascade
