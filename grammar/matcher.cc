#include "grammar/matcher.h"

#include <algorithm>
#include <utility>

namespace cascade::grammar {
namespace {

uint64_t Key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  nodes_.push_back({-1, -1});  // kEmptyStack.
  InternState({});             // kDead.
  std::vector<int32_t> stacks;
  for (int32_t alt : grammar_->alternatives[grammar_->root]) Expand(alt, kEmptyStack, stacks);
  seen_.clear();
  start_ = InternState(std::move(stacks));
}

int32_t Matcher::InternNode(int32_t pos, int32_t parent) {
  auto [it, added] = node_ids_.try_emplace(Key(pos, parent), static_cast<int32_t>(nodes_.size()));
  if (added) nodes_.push_back({pos, parent});
  return it->second;
}

Matcher::State Matcher::InternState(std::vector<int32_t> stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  auto [it, added] = state_ids_.try_emplace(stacks, static_cast<State>(states_.size()));
  if (added) {
    StateInfo info;
    info.accepting = !stacks.empty() && stacks.front() == kEmptyStack;
    info.continues = !stacks.empty() && stacks.back() != kEmptyStack;
    info.stacks = std::move(stacks);
    states_.push_back(std::move(info));
  }
  return it->second;
}

void Matcher::Expand(int32_t pos, int32_t parent, std::vector<int32_t>& out) {
  // A work list, not recursion: the chain of places passed through without consuming a
  // byte can be as long as the grammar is large (in (("a"?){300}){300}, 90,000 optional
  // "a"s), far deeper than a thread's stack. Alternatives are pushed last first, so that
  // they are taken in order.
  std::vector<Node> todo = {{pos, parent}};
  while (!todo.empty()) {
    const Node next = todo.back();
    todo.pop_back();
    if (!seen_.try_emplace(Key(next.pos, next.parent), true).second) continue;
    const Element& e = grammar_->elements[next.pos];
    switch (e.kind) {
      case Element::kBytes:
        out.push_back(InternNode(next.pos, next.parent));
        if (out.size() > kMaxStacks) {
          overflowed_ = true;
          out.clear();
          return;
        }
        break;
      case Element::kEnd:
        // The alternative is done: resume below, or the whole grammar matched.
        if (next.parent == kEmptyStack) {
          out.push_back(kEmptyStack);
        } else {
          todo.push_back(nodes_[next.parent]);
        }
        break;
      case Element::kRule: {
        // A reference that ends its alternative resumes directly below: right recursion
        // (x*, lists) then keeps the stack as deep as it was.
        const int32_t below = grammar_->elements[next.pos + 1].kind == Element::kEnd
                                  ? next.parent
                                  : InternNode(next.pos + 1, next.parent);
        const std::vector<int32_t>& alts = grammar_->alternatives[e.arg];
        for (auto alt = alts.rbegin(); alt != alts.rend(); ++alt) todo.push_back({*alt, below});
        break;
      }
    }
  }
}

Matcher::State Matcher::Advance(State s, uint8_t byte) {
  if (s == kDead || overflowed_) return kDead;
  if (states_[s].next == nullptr) {
    states_[s].next = std::make_unique<std::array<State, 256>>();
    states_[s].next->fill(-1);
  }
  if (const State known = (*states_[s].next)[byte]; known >= 0) return known;
  std::vector<int32_t> stacks;
  // states_ may grow (and move) inside Expand: index it afresh each time.
  for (size_t i = 0; i < states_[s].stacks.size(); ++i) {
    const int32_t top = states_[s].stacks[i];
    if (top == kEmptyStack) continue;
    const Node node = nodes_[top];
    if (!grammar_->byte_sets[grammar_->elements[node.pos].arg].test(byte)) continue;
    Expand(node.pos + 1, node.parent, stacks);
  }
  seen_.clear();
  const State t = InternState(std::move(stacks));
  (*states_[s].next)[byte] = t;
  return t;
}

Matcher::State Matcher::Advance(State s, std::string_view bytes) {
  for (char c : bytes) {
    s = Advance(s, static_cast<uint8_t>(c));
    if (s == kDead) return kDead;
  }
  return s;
}

bool Accepts(const Grammar& grammar, std::string_view text) {
  // A copy that does not own the grammar: the matcher only borrows it here.
  Matcher m(std::shared_ptr<const Grammar>(&grammar, [](const Grammar*) {}));
  return m.Accepting(m.Advance(m.start(), text));
}

}  // namespace cascade::grammar
