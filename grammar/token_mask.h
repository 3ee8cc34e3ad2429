// Grammars over a vocabulary: which tokens may come next (a bitmask the last stage applies
// to the logits) and the state after a token, for one request.
//
// The mask of a state walks the vocabulary's byte trie with the matcher, cutting every
// branch whose bytes the grammar refuses, so a state that allows few tokens costs little;
// masks are cached per state, and the states of a JSON text repeat (inside a string, after
// a comma), so most tokens cost a table lookup. The request's end tokens (EOS, end of
// turn) are allowed exactly where the grammar may end; control tokens never are.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace cascade::grammar {

// The vocabulary as a trie of the tokens' bytes. Immutable; one per tokenizer.
class TokenTrie {
 public:
  // `pieces[id]`: the bytes token `id` stands for; a token with `excluded[id]` set (control
  // tokens) or no bytes is never allowed by a grammar.
  TokenTrie(const std::vector<std::string>& pieces, const std::vector<bool>& excluded);

  int32_t n_vocab() const { return n_vocab_; }
  const std::string& piece(int32_t id) const { return pieces_[id]; }
  bool usable(int32_t id) const { return id >= 0 && id < n_vocab_ && usable_[id]; }

 private:
  friend class GrammarMasks;
  struct Edge {
    uint8_t byte;
    int32_t child;
  };
  // Node n's edges are edges_[edge_begin_[n], edge_begin_[n + 1]), the tokens whose bytes
  // end there token_ids_[token_begin_[n], token_begin_[n + 1]).
  std::vector<int32_t> edge_begin_, token_begin_;
  std::vector<Edge> edges_;
  std::vector<int32_t> token_ids_;
  std::vector<std::string> pieces_;
  std::vector<bool> usable_;
  int32_t n_vocab_ = 0;
};

// Bit t of word t / 64: token t allowed.
using TokenMask = std::vector<uint64_t>;

inline bool MaskAllows(std::span<const uint64_t> mask, int32_t t) {
  return t >= 0 && static_cast<size_t>(t / 64) < mask.size() && ((mask[t / 64] >> (t % 64)) & 1) != 0;
}

// A grammar over a vocabulary: its matcher and the masks of its states (without end
// tokens, which are each request's own), computed once and shared by every request that
// uses the grammar. Single owner (one serving loop's thread).
class GrammarMasks {
 public:
  using State = Matcher::State;

  GrammarMasks(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie);

  Matcher& matcher() { return matcher_; }
  bool overflowed() const { return matcher_.overflowed(); }
  const TokenTrie& trie() const { return *trie_; }
  // The tokens whose bytes `s` allows. The reference stays valid until the next call.
  const TokenMask& Mask(State s);

  // Counters for the cost of masks: how many were computed (not cached), the seconds spent
  // computing them, and the bytes the states and masks hold.
  int64_t masks_computed() const { return masks_computed_; }
  double mask_seconds() const { return mask_seconds_; }
  size_t bytes() const { return cache_bytes_ + matcher_.n_states() * 1024 + matcher_.n_stacks() * 16; }

 private:
  void Compute(State s, TokenMask& mask);

  Matcher matcher_;
  std::shared_ptr<const TokenTrie> trie_;
  absl::flat_hash_map<State, TokenMask> cache_;
  size_t cache_bytes_ = 0;
  int64_t masks_computed_ = 0;
  double mask_seconds_ = 0;
};

// One request's grammar over the vocabulary: its state and its end tokens, over masks it
// may share with other requests of the same grammar. Single owner (the serving loop).
class TokenConstraint {
 public:
  using State = Matcher::State;

  TokenConstraint(std::shared_ptr<GrammarMasks> masks, std::vector<int32_t> end_ids);
  // With masks of its own.
  TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie,
                  std::vector<int32_t> end_ids);

  // The state after the tokens accepted so far.
  State state() const { return state_; }
  // The tokens allowed at `s`. The reference stays valid until the next call.
  const TokenMask& Mask(State s);
  bool Allows(State s, int32_t token) { return MaskAllows(Mask(s), token); }
  // The state after `token` at `s`: Matcher::kDead when the grammar refuses it; an end
  // token leaves the state as it is.
  State Next(State s, int32_t token);
  // Moves the request on by `token`; InvalidArgument when the grammar refuses it.
  absl::Status Accept(int32_t token);
  bool IsEnd(int32_t token) const;

  const GrammarMasks& masks() const { return *masks_; }
  bool overflowed() const { return masks_->overflowed(); }
  int64_t masks_computed() const { return masks_->masks_computed(); }
  int32_t n_vocab() const { return masks_->trie().n_vocab(); }

 private:
  std::shared_ptr<GrammarMasks> masks_;
  std::vector<int32_t> end_ids_;
  State state_;
  TokenMask with_ends_;  // Mask's answer at a state where the grammar may end.
};

}  // namespace cascade::grammar
