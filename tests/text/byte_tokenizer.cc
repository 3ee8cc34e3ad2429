#include "tests/text/byte_tokenizer.h"

#include <string>

#include "gtest/gtest.h"

namespace cascade::testing {

std::unique_ptr<text::Tokenizer> ByteTokenizer(const std::vector<std::string>& specials) {
  text::TokenizerSpec spec;
  spec.kind = text::TokenizerSpec::Kind::kSentencePieceBpe;
  spec.add_space_prefix = false;
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    spec.tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
    spec.token_types.push_back(text::kTokenTypeByte);
  }
  spec.tokens.push_back("</s>");
  spec.token_types.push_back(text::kTokenTypeControl);
  for (const std::string& s : specials) {
    spec.tokens.push_back(s);
    spec.token_types.push_back(text::kTokenTypeControl);
  }
  spec.eos_id = kByteEos;
  auto tok = text::Tokenizer::FromSpec(spec);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

}  // namespace cascade::testing
