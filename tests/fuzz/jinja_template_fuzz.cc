// libFuzzer target: a chat template (the input up to its first NUL byte) rendered with a
// context (the JSON after it, or a fixed conversation with tools) must give text or a
// Status, never a crash, hang, exception or leak: the template comes with the model file.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "text/jinja_template.h"

namespace {

constexpr std::string_view kConversation = R"({
  "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true,
  "messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  absl::StatusOr<cascade::text::JinjaValue> context = cascade::text::jinja::ValueFromJson(kConversation);
  if (nul != std::string_view::npos) {
    absl::StatusOr<cascade::text::JinjaValue> own = cascade::text::jinja::ValueFromJson(input.substr(nul + 1));
    if (own.ok() && own->is_dict()) context = std::move(own);
  }
  absl::StatusOr<cascade::text::JinjaTemplate> t = cascade::text::JinjaTemplate::Parse(source);
  if (!t.ok()) return 0;
  cascade::text::JinjaRenderOptions options;
  options.now = std::tm{};
  options.max_steps = 100'000;  // Keeps each input fast; the limit's own path is covered too.
  (void)t->Render(*context, options);
  return 0;
}
