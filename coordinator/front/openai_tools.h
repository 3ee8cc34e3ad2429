// Tool calling in the OpenAI API: the request's `tools` and `tool_choice`, the grammar that
// makes a required (or named) choice a call in the model's own syntax
// (text/tool_calls.h), and the calls read back out of each choice's text, whole or as
// stream deltas.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "text/tool_calls.h"

namespace cascade::coordinator {

struct OpenAiTools {
  enum class Choice { kAuto, kNone, kRequired, kNamed };
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // As the body gives them.
  Choice choice = Choice::kAuto;
  std::string named;     // kNamed: the function.
  bool parallel = true;  // parallel_tool_calls: a forced answer may hold several calls.
  bool any() const { return !tools.empty(); }
  // Whether answers are read for calls.
  bool parse_calls() const { return any() && choice != Choice::kNone; }
};

// `tools` and `tool_choice` of a request body (read with its members in the body's order).
// InvalidArgument naming the field for a malformed tool, an unknown or duplicate function,
// or a tool_choice without tools.
absl::StatusOr<OpenAiTools> ParseOpenAiTools(const nlohmann::ordered_json& body);

// The GBNF (rule `root`) of the answers a required or named tool_choice allows: one call
// or more of the declared functions (of the named one), each with arguments valid under
// its `parameters` schema, in `format`'s syntax. InvalidArgument when the format has no
// syntax a grammar can write, or a schema is not supported.
absl::StatusOr<std::string> ToolCallGbnf(text::ToolCallFormat format, const OpenAiTools& tools);

// One choice's answer as content and calls, fed as it streams.
class ToolCallReader {
 public:
  explicit ToolCallReader(text::ToolCallFormat format) : parser_(format) {}

  // The content now certain, and the calls completed, as OpenAI's tool_calls entries
  // ({index, id, type, function: {name, arguments}}); `index` counts the choice's calls.
  std::string Push(std::string_view text, std::vector<nlohmann::json>& calls);
  std::string Flush(std::vector<nlohmann::json>& calls);
  int n_calls() const { return n_calls_; }

 private:
  void Convert(std::vector<text::ParsedToolCall>& parsed, std::vector<nlohmann::json>& calls);

  text::ToolCallParser parser_;
  int n_calls_ = 0;
};

}  // namespace cascade::coordinator
