// Model-free drafting by prompt lookup (Saxena 2023, "Prompt Lookup Decoding"; the
// n-gram drafter of vLLM): find the most recent earlier occurrence of the sequence's last
// n tokens (trying n, n-1, ..., 1) and propose the tokens that followed it. It costs no
// model and shines on input-grounded tasks (editing, summarising, code), where the
// output repeats spans of the prompt.
// Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cascade::coordinator {

struct NgramOptions {
  int max_n = 3;    // Longest suffix to match. REQUIRES >= 1.
  int min_n = 1;    // Shortest suffix accepted as a match. REQUIRES 1 <= min_n <= max_n.
  int n_draft = 4;  // Tokens to propose at most. REQUIRES >= 1.
};

// Up to n_draft tokens continuing `history` [n_tokens] (prompt and generated), or none
// when no suffix of length >= min_n occurred before.
std::vector<int32_t> ProposeNgramDraft(std::span<const int32_t> history, const NgramOptions& options);

}  // namespace cascade::coordinator
