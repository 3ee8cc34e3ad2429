// UTF-8 validation helpers (RFC 3629: no overlongs, no surrogates, max U+10FFFF).
// Thread-safe (pure functions).
#pragma once

#include <cstddef>
#include <string_view>

namespace cascade {

// True when `s` is entirely well-formed UTF-8.
bool IsValidUtf8(std::string_view s);

// Length of the longest prefix of `s` made of complete, valid sequences, stopping
// before a trailing incomplete sequence (a streaming decoder holds that back).
size_t CompleteUtf8Prefix(std::string_view s);

}  // namespace cascade
