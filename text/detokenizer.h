// Incremental detokenizer for streaming: feed the ids of one sequence as they are
// generated and get back only complete UTF-8 text. A token may end in the middle of a
// character (byte-fallback tokens, byte-level BPE pieces); those bytes are held back
// until the character completes. Bytes that can never form a valid character come out
// as U+FFFD, so every returned string is valid UTF-8, and for ids whose `Decode` is valid
// UTF-8 the concatenated output equals `tokenizer.Decode(ids, skip_special)`.
//
// Thread safety: single owner (one per sequence). Borrows the tokenizer, which must
// outlive it; the tokenizer itself may be shared by any number of detokenizers.
#pragma once

#include <cstdint>
#include <string>

#include "text/tokenizer.h"

namespace cascade::text {

struct DetokenizerOptions {
  // Drop control and unknown tokens (EOS, "<|im_end|>", ...) from the text. Default true:
  // streamed text shows what the model said, not its markup.
  bool skip_special = true;
};

class Detokenizer {
 public:
  explicit Detokenizer(const Tokenizer& tokenizer, DetokenizerOptions options = {});

  // Appends token `id` (ids outside the vocabulary add nothing) and returns the text that
  // became complete, possibly empty.
  std::string Feed(int32_t id);
  // Ends the stream: returns what is still held back, an unfinished character as U+FFFD.
  // The detokenizer is then ready for a new stream (as after `Reset`).
  std::string Flush();
  // Forgets held-back bytes and starts a new stream.
  void Reset();
  // Bytes held back waiting for the rest of a character (0..3).
  size_t n_pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;  // Borrowed.
  DetokenizerOptions options_;
  std::string pending_;
  bool first_ = true;  // No token has produced text yet (SPM leading-space rule).
};

// Moves the longest prefix of `*bytes` that is complete UTF-8 into the result, with each
// invalid byte (or invalid maximal subpart) replaced by U+FFFD. An incomplete but so far
// valid sequence at the end stays in `*bytes`, unless `final`, when it becomes U+FFFD.
std::string TakeCompleteUtf8(std::string* bytes, bool final);

}  // namespace cascade::text
