// The `Tokenizer` base: special-token splitting, BOS/EOS, decoding, and `FromSpec`.
#include "text/tokenizer.h"

#include <utility>

#include "core/status.h"
#include "text/tokenizer_vocab.h"

namespace cascade::text {
Tokenizer::Tokenizer(std::unique_ptr<const Vocab> vocab) : vocab_(std::move(vocab)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromSpec(TokenizerSpec spec) {
  const TokenizerSpec::Kind kind = spec.kind;
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<Vocab> vocab, Vocab::Build(std::move(spec)));
  if (kind == TokenizerSpec::Kind::kByteLevelBpe) return NewBpeTokenizer(std::move(vocab));
  return NewSpmTokenizer(std::move(vocab));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special) const {
  const TokenizerSpec& spec = vocab_->spec();
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && spec.add_bos && spec.bos_id >= 0) out.push_back(spec.bos_id);
  bool after_special = true;
  for (const TextFragment& f : vocab_->SplitSpecial(text)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
    } else {
      EncodeText(f.text, after_special, out);
      after_special = false;
    }
  }
  if (add_special && spec.add_eos && spec.eos_id >= 0) out.push_back(spec.eos_id);
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  bool first = true;
  const bool strip = strips_leading_space();
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) continue;
    if (skip_special && vocab_->is_special(id)) continue;
    std::string_view piece = vocab_->piece(id);
    if (first && strip && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    first = false;
    out.append(piece);
  }
  return out;
}

std::string_view Tokenizer::TokenPiece(int32_t id) const {
  return id >= 0 && id < n_vocab() ? vocab_->piece(id) : std::string_view();
}
std::string_view Tokenizer::TokenText(int32_t id) const {
  return id >= 0 && id < n_vocab() ? vocab_->text(id) : std::string_view();
}
int32_t Tokenizer::TokenId(std::string_view text) const { return vocab_->Find(text); }
int32_t Tokenizer::n_vocab() const { return vocab_->n_vocab(); }
int32_t Tokenizer::bos_id() const { return vocab_->spec().bos_id; }
int32_t Tokenizer::eos_id() const { return vocab_->spec().eos_id; }
bool Tokenizer::add_bos() const { return vocab_->spec().add_bos; }
bool Tokenizer::IsSpecial(int32_t id) const { return vocab_->is_special(id); }
bool Tokenizer::IsEog(int32_t id) const { return vocab_->is_eog(id); }
bool Tokenizer::strips_leading_space() const {
  return vocab_->spec().kind == TokenizerSpec::Kind::kSentencePieceBpe && vocab_->spec().add_space_prefix;
}
TokenizerSpec::Kind Tokenizer::kind() const { return vocab_->spec().kind; }
const std::string& Tokenizer::chat_template() const { return vocab_->spec().chat_template; }

}  // namespace cascade::text
