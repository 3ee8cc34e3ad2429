// Constrained decoding in the serving loop (docs/ARCHITECTURE.md §5): the coordinator owns
// each constrained request's grammar state, as it owns the rest of a sequence's state, and
// every step tells the last stage which tokens each sampled row may take as a bitmask
// (StepSequence.allowed_tokens). Drafts are checked against the grammar before they are
// sent, and cut at the first it refuses, so verification only ever meets valid drafts and
// the rejection rule stays lossless for the masked distribution.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "cascade/v1/cluster.pb.h"
#include "grammar/grammar.h"
#include "grammar/token_mask.h"
#include "text/output_filter.h"
#include "text/tokenizer.h"

namespace cascade::coordinator {

// The vocabulary as grammars see it, built on the first constrained request: the byte
// trie of every token's piece (control tokens excluded) and the end-of-generation ids;
// and each grammar's masks, shared by the requests with the same grammar (agents send
// the same schema on every call), so that a state's mask is walked once.
// Single owner: the serving loop's thread.
class ConstraintVocabulary {
 public:
  explicit ConstraintVocabulary(const text::Tokenizer* tokenizer) : tokenizer_(tokenizer) {}

  // A request's grammar over the vocabulary; it may end with an end-of-generation token
  // or one of the request's stop ids.
  std::unique_ptr<grammar::TokenConstraint> Start(std::shared_ptr<const grammar::Grammar> grammar,
                                                  const text::StopConditions& stops);

 private:
  void Build();

  const text::Tokenizer* tokenizer_;
  std::shared_ptr<const grammar::TokenTrie> trie_;
  std::vector<int32_t> eog_ids_;
  // By grammar source. Requests hold their masks themselves: dropping an entry (too many
  // grammars, or one grown too big) only means the next request starts afresh.
  absl::flat_hash_map<std::string, std::shared_ptr<grammar::GrammarMasks>> masks_;
};

// Cuts the drafts of `s` (its last n_draft tokens) at the first one the grammar refuses
// from the request's state, and sets `s.allowed_tokens` to one mask per sampled row: the
// state before each kept draft, then the one after them all. InvalidArgument when the
// grammar turned out too ambiguous to follow (grammar::Matcher::kMaxStacks).
absl::Status ConstrainStep(grammar::TokenConstraint& constraint, v1::StepSequence& s);

}  // namespace cascade::coordinator
