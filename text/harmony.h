// gpt-oss's harmony format (OpenAI's), the assistant's side: after the generation prompt
// "<|start|>assistant" the model writes one or more messages
//   <|channel|>CHANNEL[ to=RECIPIENT]<|message|>TEXT<|end|>
// each but the last followed by "<|start|>assistant" for the next, the last ending with
// <|return|> (the answer is done) or <|call|> (a tool call). HarmonyParser splits the text
// it is fed, as the detokenizer produces it with the special tokens rendered, into
// reasoning (the "analysis" channel) and content (the "final" channel; a message of another
// channel, "commentary", goes to content too, as does text outside any message when the
// model does not follow the format). A marker split across two pieces is held back until
// it is whole, so streamed deltas never show part of one.
// Single owner; not thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace cascade::text {

class HarmonyParser {
 public:
  struct Delta {
    std::string reasoning;
    std::string content;
    bool empty() const { return reasoning.empty() && content.empty(); }
  };

  // Feeds the next piece of generated text; returns what became known.
  Delta Push(std::string_view text);
  // Ends the stream: returns what was held back (an unfinished marker, as text).
  Delta Flush();
  // The channel of the message being read ("" before the first header ends).
  const std::string& channel() const { return channel_; }

 private:
  enum class State { kHeader, kBody };
  // Consumes as much of pending_ as is decidable, appending to `out`.
  void Drain(Delta& out, bool at_end);
  void Emit(Delta& out, std::string_view text) const;

  State state_ = State::kHeader;
  std::string channel_;
  std::string pending_;  // Fed text not yet consumed.
};

}  // namespace cascade::text
