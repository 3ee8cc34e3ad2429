// Reasoning written between <think> and </think> at the start of an answer (Qwen3, QwQ,
// DeepSeek-R1 and their distills), kept apart from the content, as harmony's analysis
// channel is (text/harmony.h). A template that shows `</think>` marks a thinking model
// (text/chat_format.h); its answer opens the block itself, or the prompt already opened it
// (a generation prompt ending in "<think>\n", DeepSeek-R1's), and an answer that does not
// begin with the tag is all content (Qwen3 with enable_thinking false).
// Single owner; not thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace cascade::text {

class ThinkParser {
 public:
  struct Delta {
    std::string reasoning;
    std::string content;
  };
  // `opened`: the prompt ends inside the block (the answer starts as reasoning).
  explicit ThinkParser(bool opened) : state_(opened ? State::kReasoning : State::kUndecided) {}

  // The next piece of the answer, split. Text that may still be a tag is held back.
  Delta Push(std::string_view text);
  // The answer ended: what is held back, where it belongs.
  Delta Flush();

 private:
  enum class State { kUndecided, kReasoning, kContent };
  State state_;
  std::string held_;
};

// Whether `rendered_prompt` ends inside a think block (its last "<think>" is not closed).
bool PromptOpensThinking(std::string_view rendered_prompt);
// Whether `rendered_prompt` ends with a closed (empty) think block: the template turned
// thinking off (Qwen3 with enable_thinking false), and the answer is all content.
bool PromptClosesThinking(std::string_view rendered_prompt);

}  // namespace cascade::text
