// `cascade tokenize --model PATH (--text T | --chat T) [--add-special] [--json]`.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "client/cli/commands.h"
#include "client/cli/prompt.h"
#include "core/args.h"
#include "model/format/tokenizer_files.h"

namespace cascade::cli {

int TokenizeCommand(int argc, char** argv) {
  Args args("cascade tokenize", "--model PATH (--text T | --chat T) [options]",
            {{"model", "PATH", "a GGUF file (vocabulary-only ones too) or Hugging Face directory (required)"},
             {"text", "TEXT", "the text to tokenize"},
             {"chat", "TEXT", "a user message, rendered with the chat template first"},
             {"system", "TEXT", "a system message before --chat"},
             {"chat-template", "NAME", "chatml, llama2, llama3 or harmony (default: the model's own)"},
             {"add-special", "", "add BOS/EOS as the tokenizer says (--text)"},
             {"json", "", "print ids and pieces as JSON"}});
  if (auto s = args.Parse(argc, argv, 2); !s.ok()) return Fail("tokenize", s);
  if (args.help_requested()) {
    std::fputs(args.Usage().c_str(), stdout);
    return 0;
  }
  auto path = args.Require("model");
  if (!path.ok()) return Fail("tokenize", path.status());
  // The tokenizer alone: any GGUF (vocabulary-only ones included) or HF directory.
  auto tokenizer = model::LoadTokenizerAt(*path);
  if (!tokenizer.ok()) return Fail("tokenize", tokenizer.status());
  auto ids = PromptIds(args, **tokenizer, "text", args.Has("add-special"));
  if (!ids.ok()) return Fail("tokenize", ids.status());
  if (args.Has("json")) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : *ids) {
      // Pieces are bytes; a piece that is not valid UTF-8 on its own is shown escaped.
      pieces.push_back((*tokenizer)->TokenText(id));
    }
    nlohmann::json j{{"ids", *ids}, {"pieces", pieces}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  for (size_t i = 0; i < ids->size(); ++i) std::printf("%s%d", i ? " " : "", (*ids)[i]);
  std::printf("\n");
  return 0;
}

}  // namespace cascade::cli
