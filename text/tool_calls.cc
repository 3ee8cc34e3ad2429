#include "text/tool_calls.h"

#include <algorithm>
#include <utility>

#include "nlohmann/json.hpp"
#include "text/stop_matcher.h"

namespace cascade::text {
namespace {

using Json = nlohmann::ordered_json;  // Arguments keep the model's order.

constexpr std::string_view kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";
constexpr std::string_view kMistralTag = "[TOOL_CALLS]", kPythonTag = "<|python_tag|>";
constexpr std::string_view kDeepSeekOpen = "<｜tool▁calls▁begin｜>", kDeepSeekClose = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDeepSeekCall = "<｜tool▁call▁begin｜>", kDeepSeekCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDeepSeekSep = "<｜tool▁sep｜>";

std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  return s;
}

// {"name": f, <args_key>: {...}} as a call; false for anything else.
bool CallOf(const Json& j, ParsedToolCall* call) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  for (const char* key : {"arguments", "parameters"}) {
    if (!j.contains(key)) continue;
    const Json& args = j[key];
    if (args.is_string()) {  // Some models write the arguments as a JSON string.
      const Json inner = Json::parse(args.get<std::string>(), nullptr, false);
      if (!inner.is_object()) return false;
      *call = {j["name"].get<std::string>(), inner.dump()};
      return true;
    }
    if (!args.is_object()) return false;
    *call = {j["name"].get<std::string>(), args.dump()};
    return true;
  }
  *call = {j["name"].get<std::string>(), "{}"};
  return true;
}

// Every call in `text` (one object, or an array of them); false when any is not one.
bool CallsOf(std::string_view text, std::vector<ParsedToolCall>& calls) {
  const Json j = Json::parse(text, nullptr, false);
  std::vector<ParsedToolCall> found;
  ParsedToolCall call;
  if (j.is_array()) {
    for (const Json& item : j) {
      if (!CallOf(item, &call)) return false;
      found.push_back(call);
    }
  } else if (CallOf(j, &call)) {
    found.push_back(call);
  }
  if (found.empty()) return false;
  calls.insert(calls.end(), found.begin(), found.end());
  return true;
}

// A DeepSeek block's calls: "function<sep>NAME\n```json\nARGS\n```" (V3, R1) or
// "NAME<sep>ARGS" (V3.1) between call tags. ARGS is an object, or a JSON string of one.
bool DeepSeekCallsOf(std::string_view block, std::vector<ParsedToolCall>& calls) {
  std::vector<ParsedToolCall> found;
  for (size_t at = block.find(kDeepSeekCall); at != std::string_view::npos; at = block.find(kDeepSeekCall, at)) {
    at += kDeepSeekCall.size();
    const size_t end = block.find(kDeepSeekCallEnd, at);
    if (end == std::string_view::npos) return false;
    std::string_view body = block.substr(at, end - at);
    at = end + kDeepSeekCallEnd.size();
    const size_t sep = body.find(kDeepSeekSep);
    if (sep == std::string_view::npos) return false;
    std::string_view name = body.substr(0, sep), args = body.substr(sep + kDeepSeekSep.size());
    if (name == "function") {  // V3 / R1: the name, then the arguments in a json fence.
      const size_t nl = args.find('\n');
      if (nl == std::string_view::npos) return false;
      name = args.substr(0, nl);
      args = args.substr(nl + 1);
      if (args.substr(0, 7) == "```json") args.remove_prefix(7);
      while (!args.empty() && (args.back() == '\n' || args.back() == '`')) args.remove_suffix(1);
    }
    Json j = Json::parse(args, nullptr, false);
    if (j.is_string()) j = Json::parse(j.get<std::string>(), nullptr, false);
    if (!j.is_object() || name.empty()) return false;
    found.push_back({std::string(name), j.dump()});
  }
  if (found.empty()) return false;
  calls.insert(calls.end(), found.begin(), found.end());
  return true;
}

}  // namespace

ToolCallFormat DetectToolCallFormat(std::string_view t) {
  if (t.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (t.find(kDeepSeekOpen) != std::string_view::npos) return ToolCallFormat::kDeepSeek;
  if (t.find(kMistralTag) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (t.find(kPythonTag) != std::string_view::npos || t.find("\"parameters\": dictionary") != std::string_view::npos) {
    return ToolCallFormat::kLlama3;
  }
  return ToolCallFormat::kNone;
}

std::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3: return "llama3";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kDeepSeek: return "deepseek";
    case ToolCallFormat::kNone: break;
  }
  return "none";
}

bool ParseToolCallFormat(std::string_view name, ToolCallFormat* format) {
  for (ToolCallFormat f : {ToolCallFormat::kNone, ToolCallFormat::kHermes, ToolCallFormat::kLlama3,
                           ToolCallFormat::kMistral, ToolCallFormat::kDeepSeek}) {
    if (name == ToolCallFormatName(f)) {
      *format = f;
      return true;
    }
  }
  return false;
}

std::string ToolCallParser::Push(std::string_view text, std::vector<ParsedToolCall>& calls) {
  if (format_ == ToolCallFormat::kNone) return std::string(text);
  held_.append(text);
  if (format_ == ToolCallFormat::kHermes || format_ == ToolCallFormat::kDeepSeek) return PushBlocks(calls);
  if (!started_) {
    // A Llama 3 or Mistral answer is a call when it opens like one: decide on the first
    // characters, holding them while they may still be the opening.
    const std::string_view head = TrimLeft(held_);
    if (head.empty()) return "";
    const std::string_view open = format_ == ToolCallFormat::kMistral ? kMistralTag : kPythonTag;
    if (head.size() < open.size() && open.substr(0, head.size()) == head) return "";
    started_ = true;
    whole_ = head.substr(0, open.size()) == open || (format_ == ToolCallFormat::kLlama3 && head.front() == '{');
  }
  if (whole_) return "";
  return std::exchange(held_, "");
}

std::string ToolCallParser::PushBlocks(std::vector<ParsedToolCall>& calls) {
  const bool hermes = format_ == ToolCallFormat::kHermes;
  const std::string_view open_tag = hermes ? kHermesOpen : kDeepSeekOpen;
  const std::string_view close_tag = hermes ? kHermesClose : kDeepSeekClose;
  std::string content;
  while (true) {
    if (!whole_) {  // Outside a block: content up to the next opening (or a partial one).
      const size_t open = held_.find(open_tag);
      if (open == std::string::npos) {
        const size_t keep = PartialTagSuffix(held_, open_tag);
        content += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return content;
      }
      content += held_.substr(0, open);
      held_.erase(0, open + open_tag.size());
      whole_ = true;
    }
    const size_t close = held_.find(close_tag);
    if (close == std::string::npos) return content;
    const std::string body = held_.substr(0, close);
    if (!(hermes ? CallsOf(body, calls) : DeepSeekCallsOf(body, calls))) {  // Not calls: the text as it came.
      content.append(open_tag).append(body).append(close_tag);
    }
    held_.erase(0, close + close_tag.size());
    whole_ = false;
  }
}

std::string ToolCallParser::Flush(std::vector<ParsedToolCall>& calls) {
  std::string rest = std::exchange(held_, "");
  switch (format_) {
    case ToolCallFormat::kNone: return rest;
    case ToolCallFormat::kHermes: return whole_ ? std::string(kHermesOpen) + rest : rest;
    case ToolCallFormat::kDeepSeek: {
      // A model may end after its last call without closing the block.
      if (whole_ && DeepSeekCallsOf(rest, calls)) return std::string();
      return whole_ ? std::string(kDeepSeekOpen) + rest : rest;
    }
    case ToolCallFormat::kLlama3:
    case ToolCallFormat::kMistral: {
      if (!whole_) return rest;
      std::string_view body = TrimLeft(rest);
      const std::string_view open = format_ == ToolCallFormat::kMistral ? kMistralTag : kPythonTag;
      if (body.substr(0, open.size()) == open) body.remove_prefix(open.size());
      return CallsOf(body, calls) ? std::string() : rest;
    }
  }
  return rest;
}

}  // namespace cascade::text
