// The output side of generation, shared by the coordinator's engine and `cascade run`:
// generated ids in, streamable text out. It detokenizes incrementally, holds back text
// that could begin a stop string, and decides when and why generation ends: an
// end-of-generation id (unless ignored) or a stop id ends it with `kStop` and adds no
// text; a stop string ends it with `kStop` and is never shown; the last id allowed by the
// token budget ends it with `kLength`.
// In the harmony format (gpt-oss's chat format, text/harmony.h) the special tokens are
// rendered for the parser, which splits the text into reasoning (the analysis channel) and
// content; a thinking model's leading <think> block is reasoning too (text/think_parser.h).
// Stop strings and `text()` apply to the content, and the reasoning is taken apart with
// TakeReasoning.
// Single owner; not thread-safe. Borrows the tokenizer, which must outlive it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat_format.h"
#include "text/detokenizer.h"
#include "text/harmony.h"
#include "text/stop_matcher.h"
#include "text/think_parser.h"
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

// How generated text is shown: as decoded text (special tokens skipped), as harmony
// messages split into reasoning and content, or with a leading <think> block as reasoning
// (kThinkingOpened: the prompt opened the block, the answer starts inside it). A chat
// rendered with the harmony template is answered in kHarmony, one with a thinking model's
// template in kThinking(Opened); everything else in kText.
enum class OutputFormat { kText, kHarmony, kThinking, kThinkingOpened };
// The format a chat rendered with `chat` into `rendered_prompt` is answered in.
OutputFormat OutputFormatOf(const ChatFormat& chat, std::string_view rendered_prompt);

class OutputFilter {
 public:
  OutputFilter(const Tokenizer& tokenizer, StopConditions stops, OutputFormat format = OutputFormat::kText);

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
  // kHarmony: the reasoning that became known since the last call (after Push or Flush);
  // always "" in kText.
  std::string TakeReasoning() {
    std::string fresh = reasoning_.substr(reasoning_taken_);
    reasoning_taken_ = reasoning_.size();
    return fresh;
  }
  // All reasoning so far, taken or not.
  const std::string& reasoning() const { return reasoning_; }

 private:
  const Tokenizer* tokenizer_;  // Borrowed.
  bool ignore_eos_;
  std::vector<int32_t> stop_ids_;
  // Routes decoded text: in kHarmony through the parser (reasoning kept apart), then the
  // content through the stop matcher. Returns the content that became safe to show.
  std::string Route(const std::string& decoded, bool at_end);

  Detokenizer detok_;
  StopMatcher stops_;
  std::optional<HarmonyParser> harmony_;  // kHarmony only.
  std::optional<ThinkParser> think_;      // kThinking(Opened) only.
  std::string reasoning_;                 // All reasoning so far.
  size_t reasoning_taken_ = 0;            // Bytes of it TakeReasoning returned.
  FinishReason reason_ = FinishReason::kNone;
};

}  // namespace cascade::text
