// Stop-string handling for streamed text: decides how much of the generated text is
// safe to emit (it cannot be the start of a stop string) and where generation must end.
// Single owner; not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cascade::text {

// The length of the longest suffix of `text` that is a proper prefix of `tag`: text that
// may still become `tag` and must wait for more (stop strings, the tags of think blocks
// and tool calls).
size_t PartialTagSuffix(std::string_view text, std::string_view tag);

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends newly decoded text. Returns the text now safe to stream; after a stop string
  // is found, returns the text before it and `stopped()` turns true (the stop string
  // itself is never emitted, as in OpenAI's API).
  std::string Push(std::string_view text);
  // The text held back at the end of generation (a partial stop-string match).
  std::string Flush();
  bool stopped() const { return stopped_; }
  // All text emitted so far.
  const std::string& emitted() const { return emitted_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // Suffix that might begin a stop string.
  std::string emitted_;
  bool stopped_ = false;
};

}  // namespace cascade::text
