#include "coordinator/serving/output_constraint.h"

#include <cstring>

#include <string>
#include <utility>
#include "core/str_cat.h"

namespace cascade::coordinator {
namespace {

// Grammars whose masks are kept for the next request, and the most one may hold.
constexpr size_t kMaxGrammars = 64;
constexpr size_t kMaxGrammarBytes = size_t{128} << 20;

}  // namespace

void ConstraintVocabulary::Build() {
  const int32_t n = tokenizer_->n_vocab();
  std::vector<std::string> pieces(n);
  std::vector<bool> excluded(n);
  for (int32_t id = 0; id < n; ++id) {
    pieces[id] = tokenizer_->TokenPiece(id);
    excluded[id] = tokenizer_->IsSpecial(id);
    if (tokenizer_->IsEog(id)) eog_ids_.push_back(id);
  }
  trie_ = std::make_shared<const grammar::TokenTrie>(pieces, excluded);
}

std::unique_ptr<grammar::TokenConstraint> ConstraintVocabulary::Start(std::shared_ptr<const grammar::Grammar> grammar,
                                                                      const text::StopConditions& stops) {
  if (trie_ == nullptr) Build();
  std::shared_ptr<grammar::GrammarMasks>& masks = masks_[grammar->source];
  if (masks == nullptr || masks->bytes() > kMaxGrammarBytes) {
    if (masks_.size() > kMaxGrammars) {
      masks_.clear();
      return Start(std::move(grammar), stops);
    }
    masks = std::make_shared<grammar::GrammarMasks>(std::move(grammar), trie_);
  }
  std::vector<int32_t> ends = stops.stop_ids;
  if (!stops.ignore_eos) ends.insert(ends.end(), eog_ids_.begin(), eog_ids_.end());
  return std::make_unique<grammar::TokenConstraint>(masks, std::move(ends));
}

absl::Status ConstrainStep(grammar::TokenConstraint& constraint, v1::StepSequence& s) {
  const int n_draft = s.n_draft();
  const int first_draft = s.tokens_size() - n_draft;
  grammar::TokenConstraint::State state = constraint.state();
  std::string masks;
  int kept = 0;
  for (int i = 0; i <= n_draft; ++i) {
    const grammar::TokenMask& mask = constraint.Mask(state);
    const size_t row_bytes = (static_cast<size_t>(constraint.n_vocab()) + 7) / 8;
    masks.append(reinterpret_cast<const char*>(mask.data()), row_bytes);  // Little-endian words: bit t is byte t / 8.
    if (i == n_draft) break;
    const int32_t draft = s.tokens(first_draft + i);
    if (!grammar::MaskAllows(mask, draft) || constraint.IsEnd(draft)) break;
    state = constraint.Next(state, draft);
    ++kept;
  }
  if (kept < n_draft) {
    s.mutable_tokens()->Truncate(first_draft + kept);
    s.set_n_draft(kept);
  }
  s.set_allowed_tokens(std::move(masks));
  if (constraint.overflowed()) {
    return absl::InvalidArgumentError(
        StrCat("constraint: the grammar keeps more than ", grammar::Matcher::kMaxStacks,
               " parses open at once (nested optional repetitions?); it is too ambiguous to follow"));
  }
  return absl::OkStatus();
}

}  // namespace cascade::coordinator
