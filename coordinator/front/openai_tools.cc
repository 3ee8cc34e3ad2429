#include "coordinator/front/openai_tools.h"

#include <random>
#include <set>

#include "absl/strings/str_format.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace cascade::coordinator {
namespace {

using Ordered = nlohmann::ordered_json;

absl::Status Bad(std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(StrCat(field, ": ", why));
}

absl::Status CheckTool(const Ordered& tool, size_t i, std::set<std::string>& names) {
  const std::string field = StrCat("tools[", i, "]");
  if (!tool.is_object() || tool.value("type", Ordered()) != "function" || !tool.contains("function") ||
      !tool["function"].is_object()) {
    return Bad(field, "expected {\"type\": \"function\", \"function\": {\"name\", \"parameters\"}}");
  }
  const Ordered& f = tool["function"];
  if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty()) {
    return Bad(StrCat(field, ".function.name"), "expected a non-empty string");
  }
  if (!names.insert(f["name"].get<std::string>()).second) {
    return Bad(StrCat(field, ".function.name"), StrCat("'", f["name"].get<std::string>(), "' is declared twice"));
  }
  if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object()) {
    return Bad(StrCat(field, ".function.parameters"), "expected a JSON Schema object");
  }
  return absl::OkStatus();
}

// {"name": <name>, <args_key>: <parameters>} as one schema, its definitions hoisted to
// `defs` (the schemas' `$ref`s point at the root).
absl::StatusOr<Ordered> CallSchema(const Ordered& function, const char* args_key, Ordered& defs) {
  Ordered params = function.contains("parameters") && function["parameters"].is_object()
                       ? function["parameters"]
                       : Ordered{{"type", "object"}, {"properties", Ordered::object()}};
  for (const char* key : {"$defs", "definitions"}) {
    if (!params.contains(key)) continue;
    for (const auto& item : params[key].items()) {
      if (defs.contains(item.key()) && defs[item.key()] != item.value()) {
        return Bad("tools", StrCat("two functions define '", item.key(), "' differently"));
      }
      defs[item.key()] = item.value();
    }
    params.erase(key);
  }
  return Ordered{{"type", "object"},
                 {"properties", {{"name", {{"const", function["name"]}}}, {args_key, params}}},
                 {"required", {"name", args_key}},
                 {"additionalProperties", false}};
}

std::string CallId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("call_%016x%08x", rng(), static_cast<uint32_t>(rng()));
}

}  // namespace

absl::StatusOr<OpenAiTools> ParseOpenAiTools(const Ordered& body) {
  OpenAiTools out;
  std::set<std::string> names;
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return Bad("tools", "expected an array of tools");
    for (size_t i = 0; i < it->size(); ++i) CASCADE_RETURN_IF_ERROR(CheckTool((*it)[i], i, names));
    out.tools = *it;
  }
  if (auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean()) return Bad("parallel_tool_calls", "expected true or false");
    out.parallel = p->get<bool>();
  }
  auto choice = body.find("tool_choice");
  if (choice == body.end() || choice->is_null()) return out;
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "auto") {
      out.choice = OpenAiTools::Choice::kAuto;
    } else if (c == "none") {
      out.choice = OpenAiTools::Choice::kNone;
    } else if (c == "required") {
      out.choice = OpenAiTools::Choice::kRequired;
    } else {
      return Bad("tool_choice", "expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", ...}");
    }
  } else if (choice->is_object() && choice->contains("function") && (*choice)["function"].is_object() &&
             (*choice)["function"].contains("name") && (*choice)["function"]["name"].is_string()) {
    out.choice = OpenAiTools::Choice::kNamed;
    out.named = (*choice)["function"]["name"].get<std::string>();
    if (!names.contains(out.named)) return Bad("tool_choice", StrCat("no tool is named '", out.named, "'"));
  } else {
    return Bad("tool_choice", "expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", ...}");
  }
  if (!out.any() && out.choice != OpenAiTools::Choice::kNone && out.choice != OpenAiTools::Choice::kAuto) {
    return Bad("tool_choice", "needs tools");
  }
  return out;
}

absl::StatusOr<std::string> ToolCallGbnf(text::ToolCallFormat format, const OpenAiTools& tools) {
  if (format != text::ToolCallFormat::kHermes && format != text::ToolCallFormat::kLlama3) {
    return Bad("tool_choice", StrCat("the model's chat template (tool call format '", text::ToolCallFormatName(format),
                                     "') has no call syntax a grammar can force; use \"auto\""));
  }
  const char* args_key = format == text::ToolCallFormat::kLlama3 ? "parameters" : "arguments";
  Ordered any_of = Ordered::array(), defs = Ordered::object();
  for (const Ordered& tool : tools.tools) {
    const Ordered& f = tool["function"];
    if (tools.choice == OpenAiTools::Choice::kNamed && f["name"] != tools.named) continue;
    CASCADE_ASSIGN_OR_RETURN(Ordered schema, CallSchema(f, args_key, defs));
    any_of.push_back(std::move(schema));
  }
  Ordered schema = any_of.size() == 1 ? any_of[0] : Ordered{{"anyOf", any_of}};
  if (!defs.empty()) schema["$defs"] = defs;
  absl::StatusOr<std::string> call = grammar::JsonSchemaToGbnf(schema);
  if (!call.ok()) return Bad("tools", std::string(call.status().message()));
  const std::string body = grammar::RenameGbnfRule(*call, "root", "call");
  if (format == text::ToolCallFormat::kLlama3) return StrCat("root ::= call\n", body);
  // Hermes: one <tool_call> block, or more, one per line, when calls may be parallel.
  const std::string one = "\"<tool_call>\\n\" call \"\\n</tool_call>\"";
  return StrCat("root ::= ", one, tools.parallel ? StrCat(" (\"\\n\" ", one, ")*") : "", "\n", body);
}

void ToolCallReader::Convert(std::vector<text::ParsedToolCall>& parsed, std::vector<nlohmann::json>& calls) {
  for (text::ParsedToolCall& c : parsed) {
    calls.push_back({{"index", n_calls_++},
                     {"id", CallId()},
                     {"type", "function"},
                     {"function", {{"name", std::move(c.name)}, {"arguments", std::move(c.arguments)}}}});
  }
  parsed.clear();
}

std::string ToolCallReader::Push(std::string_view text, std::vector<nlohmann::json>& calls) {
  std::vector<text::ParsedToolCall> parsed;
  std::string content = parser_.Push(text, parsed);
  Convert(parsed, calls);
  return content;
}

std::string ToolCallReader::Flush(std::vector<nlohmann::json>& calls) {
  std::vector<text::ParsedToolCall> parsed;
  std::string content = parser_.Flush(parsed);
  Convert(parsed, calls);
  return content;
}

}  // namespace cascade::coordinator
