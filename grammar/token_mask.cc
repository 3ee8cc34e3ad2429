#include "grammar/token_mask.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <utility>

#include "core/str_cat.h"

namespace cascade::grammar {
namespace {

// Masks kept per request before the cache starts over: a grammar whose states never
// repeat (a long free-form text under a regex) must not grow without bound.
constexpr size_t kMaxCacheBytes = size_t{64} << 20;

}  // namespace

TokenTrie::TokenTrie(const std::vector<std::string>& pieces, const std::vector<bool>& excluded)
    : pieces_(pieces), n_vocab_(static_cast<int32_t>(pieces.size())) {
  usable_.resize(pieces.size());
  std::vector<int32_t> order;
  for (size_t id = 0; id < pieces.size(); ++id) {
    usable_[id] = !pieces[id].empty() && !(id < excluded.size() && excluded[id]);
    if (usable_[id]) order.push_back(static_cast<int32_t>(id));
  }
  // Tokens in byte order: a node's subtree is then a contiguous run, and the trie can be
  // laid out breadth-first from the sorted list without a pointer-linked build.
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return pieces[a] < pieces[b]; });
  struct Build {
    std::vector<std::pair<uint8_t, int32_t>> children;
    std::vector<int32_t> tokens;
  };
  std::vector<Build> nodes(1);
  for (int32_t id : order) {
    int32_t n = 0;
    for (char ch : pieces[id]) {
      const uint8_t b = static_cast<uint8_t>(ch);
      auto& kids = nodes[n].children;
      if (kids.empty() || kids.back().first != b) {  // Sorted input: a new child is the last.
        kids.emplace_back(b, static_cast<int32_t>(nodes.size()));
        nodes.emplace_back();
      }
      n = nodes[n].children.back().second;
    }
    nodes[n].tokens.push_back(id);
  }
  edge_begin_.reserve(nodes.size() + 1);
  token_begin_.reserve(nodes.size() + 1);
  for (const Build& node : nodes) {
    edge_begin_.push_back(static_cast<int32_t>(edges_.size()));
    token_begin_.push_back(static_cast<int32_t>(token_ids_.size()));
    for (auto [b, child] : node.children) edges_.push_back({b, child});
    token_ids_.insert(token_ids_.end(), node.tokens.begin(), node.tokens.end());
  }
  edge_begin_.push_back(static_cast<int32_t>(edges_.size()));
  token_begin_.push_back(static_cast<int32_t>(token_ids_.size()));
}

GrammarMasks::GrammarMasks(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie)
    : matcher_(std::move(grammar)), trie_(std::move(trie)) {}

TokenConstraint::TokenConstraint(std::shared_ptr<GrammarMasks> masks, std::vector<int32_t> end_ids)
    : masks_(std::move(masks)), end_ids_(std::move(end_ids)), state_(masks_->matcher().start()) {}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie,
                                 std::vector<int32_t> end_ids)
    : TokenConstraint(std::make_shared<GrammarMasks>(std::move(grammar), std::move(trie)), std::move(end_ids)) {}

bool TokenConstraint::IsEnd(int32_t token) const {
  return std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end();
}

const TokenMask& TokenConstraint::Mask(State s) {
  const TokenMask& bytes = masks_->Mask(s);
  if (!masks_->matcher().Accepting(s) || end_ids_.empty()) return bytes;
  with_ends_ = bytes;
  for (int32_t id : end_ids_) {
    if (id >= 0 && id < n_vocab()) with_ends_[id / 64] |= uint64_t{1} << (id % 64);
  }
  return with_ends_;
}

const TokenMask& GrammarMasks::Mask(State s) {
  auto it = cache_.find(s);
  if (it != cache_.end()) return it->second;
  if (cache_bytes_ > kMaxCacheBytes) {
    cache_.clear();
    cache_bytes_ = 0;
  }
  TokenMask& mask = cache_[s];
  Compute(s, mask);
  cache_bytes_ += mask.size() * sizeof(uint64_t);
  return mask;
}

void GrammarMasks::Compute(State s, TokenMask& mask) {
  const auto t0 = std::chrono::steady_clock::now();
  const TokenTrie& trie = *trie_;
  mask.assign((trie.n_vocab_ + 63) / 64, 0);
  // Depth first over the trie, each node with the state its bytes lead to.
  std::vector<std::pair<int32_t, State>> todo;
  if (matcher_.Continues(s)) todo.emplace_back(0, s);
  while (!todo.empty()) {
    const auto [node, state] = todo.back();
    todo.pop_back();
    for (int32_t e = trie.edge_begin_[node]; e < trie.edge_begin_[node + 1]; ++e) {
      const TokenTrie::Edge edge = trie.edges_[e];
      const State next = matcher_.Advance(state, edge.byte);
      if (next == Matcher::kDead) continue;
      for (int32_t k = trie.token_begin_[edge.child]; k < trie.token_begin_[edge.child + 1]; ++k) {
        const int32_t id = trie.token_ids_[k];
        mask[id / 64] |= uint64_t{1} << (id % 64);
      }
      if (matcher_.Continues(next)) todo.emplace_back(edge.child, next);
    }
  }
  ++masks_computed_;
  mask_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TokenConstraint::State TokenConstraint::Next(State s, int32_t token) {
  Matcher& m = masks_->matcher();
  if (IsEnd(token) && m.Accepting(s)) return s;
  if (!masks_->trie().usable(token)) return Matcher::kDead;
  return m.Advance(s, masks_->trie().piece(token));
}

absl::Status TokenConstraint::Accept(int32_t token) {
  const State next = Next(state_, token);
  if (next == Matcher::kDead) {
    return absl::InvalidArgumentError(StrCat("token ", token, " does not fit the grammar here"));
  }
  state_ = next;
  return absl::OkStatus();
}

}  // namespace cascade::grammar
