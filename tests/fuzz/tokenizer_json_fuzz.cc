// libFuzzer target: a Hugging Face tokenizer.json (and, after the input's first NUL byte,
// its tokenizer_config.json) must become a `TokenizerSpec` or a Status, never a crash,
// hang or exception. A spec that parses is built into a `Tokenizer`; one that builds
// encodes and decodes a few strings cut from the input, every id it returns must lie in
// the vocabulary, and the streaming detokenizer and the chat template detection run too.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "model/format/tokenizer_files.h"
#include "text/chat_template.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace {

void CheckIds(const cascade::text::Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.n_vocab()) std::abort();  // Encode promises vocabulary ids.
  }
}

void Exercise(const cascade::text::Tokenizer& tok, std::string_view text) {
  for (bool add_special : {false, true}) {
    const std::vector<int32_t> ids = tok.Encode(text, add_special);
    CheckIds(tok, ids);
    (void)tok.Decode(ids);
    (void)tok.Decode(ids, /*skip_special=*/true);
    cascade::text::Detokenizer detok(tok);
    for (int32_t id : ids) (void)detok.Feed(id);
    (void)detok.Flush();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view config = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  auto spec =
      cascade::model::TokenizerSpecFromHfJsonText(json, "fuzz/tokenizer.json", config, "fuzz/tokenizer_config.json");
  if (!spec.ok()) return 0;
  // Every token text seen, spaced, is input the vocabulary is sure to match.
  std::string tokens_text;
  for (size_t i = 0; i < spec->tokens.size() && tokens_text.size() < 256; ++i) {
    tokens_text += spec->tokens[i];
    tokens_text += ' ';
  }
  auto tok = cascade::text::Tokenizer::FromSpec(std::move(*spec));
  if (!tok.ok()) return 0;
  const cascade::text::Tokenizer& t = **tok;
  Exercise(t, "Hello world! 123 45678 \xC3\xA9\xE2\x82\xAC \n\n\t<s></s><|endoftext|> 's 'll");
  Exercise(t, tokens_text);
  Exercise(t, input.substr(0, 200));
  Exercise(t, input.substr(input.size() - std::min<size_t>(input.size(), 200)));
  // Ids around and outside the vocabulary render as something or nothing, never a crash.
  std::vector<int32_t> ids = {-1, 0, t.n_vocab() - 1, t.n_vocab(), t.bos_id(), t.eos_id()};
  for (size_t i = 0; i + 1 < std::min<size_t>(size, 64); i += 2) {
    ids.push_back(static_cast<int32_t>(data[i] | (data[i + 1] << 8)) % (t.n_vocab() + 2) - 1);
  }
  (void)t.Decode(ids);
  (void)t.Decode(ids, /*skip_special=*/true);
  for (int32_t id : ids) {
    (void)t.TokenPiece(id);
    (void)t.IsSpecial(id);
    (void)t.IsEog(id);
    if (t.TokenId(t.TokenText(id)) >= t.n_vocab()) std::abort();
  }
  if (auto kind = cascade::text::DetectChatTemplate(t.chat_template()); kind.ok()) {
    const std::vector<cascade::text::ChatMessage> chat = {{"system", "be brief"}, {"user", tokens_text}};
    Exercise(t, cascade::text::ApplyChatTemplate(*kind, chat, /*add_generation_prompt=*/true));
  }
  return 0;
}
