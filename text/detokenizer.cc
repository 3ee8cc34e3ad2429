// Incremental detokenizer; see detokenizer.h.
#include "text/detokenizer.h"

#include <string_view>

namespace cascade::text {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the UTF-8 sequence led by `c`, 0 when `c` cannot lead one.
int LeadLength(uint8_t c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

// Whether `c` may follow lead `lead` as continuation number `k` (1-based), rejecting
// overlong forms, surrogates and code points above U+10FFFF (RFC 3629 table).
bool ValidContinuation(uint8_t lead, int k, uint8_t c) {
  if (k == 1) {
    if (lead == 0xE0) return c >= 0xA0 && c <= 0xBF;
    if (lead == 0xED) return c >= 0x80 && c <= 0x9F;
    if (lead == 0xF0) return c >= 0x90 && c <= 0xBF;
    if (lead == 0xF4) return c >= 0x80 && c <= 0x8F;
  }
  return c >= 0x80 && c <= 0xBF;
}

}  // namespace

std::string TakeCompleteUtf8(std::string* bytes, bool final) {
  std::string out;
  const std::string& b = *bytes;
  size_t i = 0;
  out.reserve(b.size());
  while (i < b.size()) {
    const uint8_t lead = static_cast<uint8_t>(b[i]);
    const int len = LeadLength(lead);
    if (len == 0) {
      out.append(kReplacement);
      ++i;
      continue;
    }
    int k = 1;
    while (k < len && i + k < b.size() && ValidContinuation(lead, k, static_cast<uint8_t>(b[i + k]))) {
      ++k;
    }
    if (k == len) {
      out.append(b, i, len);
      i += len;
    } else if (i + k == b.size() && !final) {
      break;  // Valid so far; wait for the rest.
    } else {
      out.append(kReplacement);  // The maximal invalid subpart becomes one U+FFFD.
      i += k;
    }
  }
  bytes->erase(0, i);
  return out;
}

Detokenizer::Detokenizer(const Tokenizer& tokenizer, DetokenizerOptions options)
    : tokenizer_(&tokenizer), options_(options) {}

std::string Detokenizer::Feed(int32_t id) {
  if (id < 0 || id >= tokenizer_->n_vocab()) return "";
  if (options_.skip_special && tokenizer_->IsSpecial(id)) return "";
  std::string_view piece = tokenizer_->TokenPiece(id);
  if (first_ && tokenizer_->strips_leading_space() && !piece.empty() && piece[0] == ' ') {
    piece.remove_prefix(1);
  }
  first_ = false;
  pending_.append(piece);
  return TakeCompleteUtf8(&pending_, /*final=*/false);
}

std::string Detokenizer::Flush() {
  std::string out = TakeCompleteUtf8(&pending_, /*final=*/true);
  Reset();
  return out;
}

void Detokenizer::Reset() {
  pending_.clear();
  first_ = true;
}

}  // namespace cascade::text
