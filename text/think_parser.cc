#include "text/think_parser.h"

#include <algorithm>
#include <utility>
#include "text/stop_matcher.h"

namespace cascade::text {
namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace

ThinkParser::Delta ThinkParser::Push(std::string_view text) {
  held_.append(text);
  Delta d;
  if (state_ == State::kUndecided) {
    // Leading whitespace, then the opening tag or anything else.
    const size_t start = std::find_if_not(held_.begin(), held_.end(), IsSpace) - held_.begin();
    const std::string_view head = std::string_view(held_).substr(start);
    if (head.size() < kOpen.size() && kOpen.substr(0, head.size()) == head) return d;  // Still undecided.
    if (head.substr(0, kOpen.size()) == kOpen) {
      state_ = State::kReasoning;
      held_.erase(0, start + kOpen.size());
    } else {
      state_ = State::kContent;
    }
  }
  if (state_ == State::kReasoning) {
    const size_t close = held_.find(kClose);
    if (close == std::string::npos) {
      const size_t keep = PartialTagSuffix(held_, kClose);
      d.reasoning = held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return d;
    }
    d.reasoning = held_.substr(0, close);
    held_.erase(0, close + kClose.size());
    state_ = State::kContent;
  }
  d.content = std::exchange(held_, "");
  return d;
}

ThinkParser::Delta ThinkParser::Flush() {
  Delta d;
  // An undecided answer was whitespace or the start of a tag: content. An unclosed block
  // is reasoning to the end.
  (state_ == State::kReasoning ? d.reasoning : d.content) = std::exchange(held_, "");
  return d;
}

bool PromptClosesThinking(std::string_view rendered_prompt) {
  while (!rendered_prompt.empty() && IsSpace(rendered_prompt.back())) rendered_prompt.remove_suffix(1);
  return rendered_prompt.size() >= kClose.size() &&
         rendered_prompt.substr(rendered_prompt.size() - kClose.size()) == kClose;
}

bool PromptOpensThinking(std::string_view rendered_prompt) {
  const size_t open = rendered_prompt.rfind(kOpen);
  if (open == std::string_view::npos) return false;
  const size_t close = rendered_prompt.rfind(kClose);
  return close == std::string_view::npos || close < open;
}

}  // namespace cascade::text
