// A grammar (grammar/grammar.h) run as a pushdown automaton over bytes, with its states
// interned so that a state is an integer and a transition a table lookup.
//
// A stack is the list of places the match must still go through: its top is the byte
// set the next byte must be in, each element below the place to continue from once the
// rule above it is done. A state is the set of stacks the bytes so far can be in (the
// grammar may be ambiguous), with the empty stack meaning "the whole grammar matched".
// Stacks are hash-consed as (top, rest) nodes, states as sorted node lists, and
// `Advance(state, byte)` is computed once and then read from the state's table: the lazy
// determinisation of the automaton, bounded by the stack depths the text reaches.
//
// Thread-safety: single owner (it grows its tables as it goes).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "grammar/grammar.h"

namespace cascade::grammar {

class Matcher {
 public:
  using State = int32_t;
  static constexpr State kDead = 0;  // No stack left: the bytes so far derive nothing.

  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  State start() const { return start_; }
  State Advance(State s, uint8_t byte);
  // After each byte of `bytes` in turn; kDead as soon as one does not fit.
  State Advance(State s, std::string_view bytes);
  // Whether the grammar may end at `s` (its root is complete).
  bool Accepting(State s) const { return states_[s].accepting; }
  // Whether some byte continues `s`.
  bool Continues(State s) const { return states_[s].continues; }

  // A state holds at most this many stacks (parses alive at once). An ambiguous grammar
  // can need more (nested optional repetitions: (("a"?){300}){300} keeps 180,000), and each
  // costs time on every byte: past the cap the matcher gives up, every state it then
  // reaches is kDead, and overflowed() says why.
  static constexpr size_t kMaxStacks = 4096;
  bool overflowed() const { return overflowed_; }
  // The stacks (parses alive) at `s`: what one Advance from it costs, roughly.
  size_t StackCount(State s) const { return states_[s].stacks.size(); }

  size_t n_states() const { return states_.size(); }
  size_t n_stacks() const { return nodes_.size(); }
  const Grammar& grammar() const { return *grammar_; }

 private:
  static constexpr int32_t kEmptyStack = 0;  // Node 0: the empty stack.
  struct Node {
    int32_t pos;     // An element index: the top's byte set, or where to resume below it.
    int32_t parent;  // The rest of the stack.
  };
  struct StateInfo {
    std::vector<int32_t> stacks;  // Sorted node ids.
    bool accepting = false;
    bool continues = false;
    std::unique_ptr<std::array<State, 256>> next;  // -1: not computed yet.
  };

  int32_t InternNode(int32_t pos, int32_t parent);
  State InternState(std::vector<int32_t> stacks);
  // Adds to `out` the stacks that resume at element `pos` over `parent`, expanded until
  // every top is a byte set (or the stack is empty).
  void Expand(int32_t pos, int32_t parent, std::vector<int32_t>& out);

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, int32_t> node_ids_;
  std::vector<StateInfo> states_;
  absl::flat_hash_map<std::vector<int32_t>, State> state_ids_;
  State start_ = kDead;
  bool overflowed_ = false;
  // Expand's scratch: (pos, parent) pairs already expanded in this call.
  absl::flat_hash_map<uint64_t, bool> seen_;
};

}  // namespace cascade::grammar
