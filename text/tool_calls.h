// A model's function calls, read back out of its text: each family writes them in its own
// syntax, which its chat template teaches it (and which a required tool_choice's grammar
// forces, coordinator/front/openai_tools.h).
//
//   kHermes   (Hermes 2/3, Qwen 2.5/3, QwQ)  <tool_call>\n{"name": f, "arguments": {...}}\n</tool_call>
//   kLlama3   (Llama 3.1/3.2/3.3 JSON)       {"name": f, "parameters": {...}} as the whole answer
//                                            (after <|python_tag|> when the model writes one)
//   kMistral  (Mistral, Devstral)            [TOOL_CALLS][{"name": f, "arguments": {...}}, ...]
//   kDeepSeek (DeepSeek V3, R1 and V3.1)     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f
//                                            ```json {...} ```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//                                            (V3.1: f<｜tool▁sep｜>{...}, no fence)
//
// gpt-oss's (harmony) call syntax is not read: its calls stay in the text.
// Thread-safety: a ToolCallParser has a single owner.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cascade::text {

enum class ToolCallFormat { kNone, kHermes, kLlama3, kMistral, kDeepSeek };

// The family a chat template writes calls in, from its text (what it teaches the model);
// kNone when it shows no call syntax.
ToolCallFormat DetectToolCallFormat(std::string_view chat_template);
// "hermes", "llama3", "mistral", "deepseek" or "none"; and back (false for an unknown name).
std::string_view ToolCallFormatName(ToolCallFormat format);
bool ParseToolCallFormat(std::string_view name, ToolCallFormat* format);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // A JSON object, as text.
};

// Splits a streamed answer into content and calls. Text that might still turn into a call
// is held back until it is known; a call that does not parse stays content.
class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat format) : format_(format) {}

  // Feeds the next piece of the answer: returns the content that is now certain, and
  // appends the calls it completed to `calls`.
  std::string Push(std::string_view text, std::vector<ParsedToolCall>& calls);
  // The answer ended: what is held back, as calls or as content.
  std::string Flush(std::vector<ParsedToolCall>& calls);

 private:
  // Hermes and DeepSeek: calls in blocks between an opening and a closing tag, content
  // around them.
  std::string PushBlocks(std::vector<ParsedToolCall>& calls);

  ToolCallFormat format_;
  std::string held_;      // Text not yet known to be content.
  bool whole_ = false;    // kLlama3 / kMistral: the answer is a call; everything is held.
  bool started_ = false;  // Any text seen (kLlama3 decides on the first characters).
};

}  // namespace cascade::text
