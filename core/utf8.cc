#include "core/utf8.h"

#include <cstdint>

namespace cascade {
namespace {

// Length of the valid sequence starting at s[i]: >0 valid, 0 invalid, -1 incomplete
// (valid so far but cut off by the end of `s`).
int SequenceAt(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  int len;
  uint8_t lo = 0x80, hi = 0xbf;  // Allowed range of the second byte.
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;  // No surrogates.
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  for (int k = 1; k < len; ++k) {
    if (i + k >= s.size()) return -1;
    const uint8_t x = b(i + k);
    if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xbf)) return 0;
  }
  return len;
}

}  // namespace

size_t FirstInvalidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const int n = SequenceAt(s, i);
    if (n <= 0) return i;
    i += static_cast<size_t>(n);
  }
  return std::string_view::npos;
}

size_t CompleteUtf8Prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const int n = SequenceAt(s, i);
    if (n == -1) break;
    i += n > 0 ? static_cast<size_t>(n) : 1;  // Invalid bytes are passed through as-is.
  }
  return i;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t DecodeUtf8At(std::string_view s, size_t i, uint32_t* cp) {
  const int n = SequenceAt(s, i);
  if (n <= 0) return 0;
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[k])); };
  uint32_t v = n == 1 ? b(i) : b(i) & (0x7Fu >> n);
  for (int k = 1; k < n; ++k) v = (v << 6) | (b(i + k) & 0x3F);
  *cp = v;
  return static_cast<size_t>(n);
}

}  // namespace cascade
