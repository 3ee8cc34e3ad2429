// A tokenizer whose ids are bytes (SPM byte tokens <0x00>..<0xFF>) plus EOS "</s>" at id
// 256 (`kByteEos`), so a test can feed any byte sequence and state its expectations as
// plain string arithmetic; optional control tokens (chat markup) follow from id 257.
// Shared by the text tests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace cascade::testing {

inline constexpr int32_t kByteEos = 256;

std::unique_ptr<text::Tokenizer> ByteTokenizer(const std::vector<std::string>& specials = {});

}  // namespace cascade::testing
