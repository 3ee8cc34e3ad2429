// A Jinja2 interpreter for chat templates: the template a model file carries (GGUF
// `tokenizer.chat_template`, Hugging Face `chat_template.jinja`) rendered as Hugging Face
// transformers renders it, i.e. jinja2 3.1 in an ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks and loop controls (break/continue), its `generation` block,
// `tojson` as json.dumps(ensure_ascii=False) and the globals raise_exception(msg) and
// strftime_now(fmt), besides jinja2's own range, namespace and dict globals and its loop
// object (index, first, last, length, previtem, nextitem, cycle, ...). Not supported:
// include/import/extends/block (a chat template is one file), recursive loops, loop.changed,
// *args/**kwargs in calls, str.format specs; Python's ints are 64-bit here.
// tests/text/jinja_golden_test.cc holds it byte for byte to Python's jinja2 over the real
// templates of llama.cpp's collection.
//
// Lexer (jinja_lexer.h) -> syntax tree (jinja_parser.h) -> tree-walking renderer
// (jinja_render.cc) over Python-like values (jinja_value.h). A template is parsed once and
// rendered many times; rendering is bounded (output size, loop iterations, macro
// recursion), so a hostile template fails with an error rather than hanging or crashing.
// Thread safety: a parsed JinjaTemplate is immutable; Render may run on many threads at
// once (each render builds its own values).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "text/jinja_value.h"

namespace cascade::text {

using JinjaValue = jinja::Value;

struct JinjaRenderOptions {
  // What strftime_now() formats; nullopt: the local time at the call (transformers'
  // datetime.now()). Tests fix it for deterministic output.
  std::optional<std::tm> now;
  // Loop iterations and macro calls a render may take before it fails (ResourceExhausted):
  // a hostile template must not spin. Real templates take a few per message, some
  // quadratic ones (Gemma 4's) millions for 2000 messages (~1.4 s); this default
  // bounds a render to ~10 s.
  int64_t max_steps = 30'000'000;
};

class JinjaTemplate {
 public:
  // Parses `source` once. InvalidArgument "template line N: ..." for a syntax error.
  static absl::StatusOr<JinjaTemplate> Parse(std::string_view source);

  // Renders with the variables of `context` (a dict: messages, tools, bos_token,
  // add_generation_prompt, ...). Errors name the line: raise_exception's message, type
  // errors, calls of undefined values, limits hit. InvalidArgument unless a limit
  // (ResourceExhausted).
  absl::StatusOr<std::string> Render(const JinjaValue& context, const JinjaRenderOptions& options = {}) const;

 private:
  struct Parsed;
  explicit JinjaTemplate(std::shared_ptr<const Parsed> parsed) : parsed_(std::move(parsed)) {}
  std::shared_ptr<const Parsed> parsed_;
};

}  // namespace cascade::text
