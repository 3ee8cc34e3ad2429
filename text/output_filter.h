// The output side of generation, shared by the coordinator's engine and `cascade run`:
// generated ids in, streamable text out. It detokenizes incrementally, holds back text
// that could begin a stop string, and decides when and why generation ends: an
// end-of-generation id (unless ignored) or a stop id ends it with `kStop` and adds no
// text; a stop string ends it with `kStop` and is never shown; the last id allowed by the
// token budget ends it with `kLength`.
// Single owner; not thread-safe. Borrows the tokenizer, which must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/detokenizer.h"
#include "text/stop_matcher.h"
#include "text/tokenizer.h"

namespace cascade::text {

// Why a sequence stopped. The names are OpenAI's `finish_reason` values.
enum class FinishReason {
  kNone,    // Still generating.
  kStop,    // EOS / end of turn, a stop id or a stop string.
  kLength,  // The token budget (max_tokens or the context) ran out.
};

// "stop", "length"; "" for kNone.
std::string_view FinishReasonName(FinishReason reason);

struct StopConditions {
  bool ignore_eos = false;                // Keep going past end-of-generation ids.
  std::vector<std::string> stop_strings;  // Text that ends generation (not shown).
  std::vector<int32_t> stop_ids;          // Ids that end generation (kept in the ids).
};

class OutputFilter {
 public:
  OutputFilter(const Tokenizer& tokenizer, StopConditions stops);

  // Feeds one generated id; `last_allowed` says the budget allows no more after it.
  // Returns the text that became safe to show (possibly empty). REQUIRES !done().
  std::string Push(int32_t id, bool last_allowed);
  // Ends the stream (at done(), or when the caller stops early): the text still held
  // back, with a stop string cut out. Call once.
  std::string Flush();

  bool done() const { return reason_ != FinishReason::kNone; }
  FinishReason reason() const { return reason_; }
  // All text shown so far (what Push and Flush returned).
  const std::string& text() const { return stops_.emitted(); }

 private:
  const Tokenizer* tokenizer_;  // Borrowed.
  bool ignore_eos_;
  std::vector<int32_t> stop_ids_;
  Detokenizer detok_;
  StopMatcher stops_;
  FinishReason reason_ = FinishReason::kNone;
};

}  // namespace cascade::text
