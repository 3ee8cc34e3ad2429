// SentencePiece-style BPE ("▁" for spaces, byte fallback to <0xAB> tokens).
//
// Score-ranked vocabularies (GGUF `tokenizer.ggml.model = llama`) follow llama.cpp's
// `llm_tokenizer_spm_session` (src/llama-vocab.cpp, itself after
// https://github.com/google/sentencepiece bpe_model.cc): start from UTF-8 characters and
// repeatedly merge the adjacent pair whose concatenation is the highest-scoring token
// (leftmost first among equal scores); characters left outside the vocabulary become byte
// tokens. Merge-ranked vocabularies (Hugging Face "BPE" with a Metaspace-style
// normalizer) apply the ranked merges instead, with Hugging Face's byte fallback and
// `fuse_unk` rules (tokenizers/src/models/bpe/model.rs `merge_word`).
#include <cstring>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "text/tokenizer.h"
#include "text/tokenizer_vocab.h"

namespace cascade::text {
namespace {

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(std::unique_ptr<const Vocab> vocab) : Tokenizer(std::move(vocab)) {}

 protected:
  void EncodeText(std::string_view text, bool after_special, std::vector<int32_t>& out) const override {
    if (text.empty()) return;
    // Escape: optional dummy prefix, then every space as "▁".
    std::string s;
    s.reserve(text.size() + text.size() / 2 + 3);
    if (vocab().spec().add_space_prefix && after_special) s.append(kSpmSpace);
    for (char c : text) {
      if (c == ' ') {
        s.append(kSpmSpace);
      } else {
        s += c;
      }
    }
    if (vocab().has_merges()) {
      EncodeByMerges(s, out);
    } else {
      EncodeByScores(s, out);
    }
  }

 private:
  // Appends the ids for a symbol that is not a token: its byte tokens when all exist (and
  // byte fallback is on), else one unknown token, fused with an unknown just before it.
  void EmitUnknown(std::string_view sym, bool& last_unk, std::vector<int32_t>& out) const {
    const Vocab& v = vocab();
    bool bytes_ok = v.spec().byte_fallback;
    for (size_t k = 0; k < sym.size() && bytes_ok; ++k) {
      bytes_ok = v.byte_token(static_cast<uint8_t>(sym[k])) >= 0;
    }
    if (bytes_ok) {
      for (char c : sym) out.push_back(v.byte_token(static_cast<uint8_t>(c)));
      last_unk = false;
      return;
    }
    if (v.spec().unk_id >= 0 && !last_unk) out.push_back(v.spec().unk_id);
    last_unk = true;
  }

  void EncodeByScores(std::string_view s, std::vector<int32_t>& out) const {
    const Vocab& v = vocab();
    struct Symbol {
      uint32_t start, n;
      int32_t prev, next;
    };
    struct Bigram {
      float score;
      int32_t left, right;
      uint32_t size;
    };
    auto lower = [](const Bigram& a, const Bigram& b) {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::vector<Symbol> syms;
    syms.reserve(s.size());
    for (size_t offs = 0; offs < s.size();) {
      const size_t len = std::min(Utf8SequenceLength(static_cast<uint8_t>(s[offs])), s.size() - offs);
      const int32_t index = static_cast<int32_t>(syms.size());
      offs += len;
      syms.push_back({static_cast<uint32_t>(offs - len), static_cast<uint32_t>(len), index - 1,
                      offs == s.size() ? -1 : index + 1});
    }
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower)> queue(lower);
    auto try_add = [&](int32_t left, int32_t right) {
      if (left < 0 || right < 0) return;
      const uint32_t size = syms[left].n + syms[right].n;
      const int32_t id = v.Find(s.substr(syms[left].start, size));
      if (id < 0) return;
      queue.push({v.score(id), left, right, size});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& l = syms[b.left];
      Symbol& r = syms[b.right];
      if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) syms[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    bool last_unk = false;
    for (int32_t i = 0; i >= 0 && !syms.empty(); i = syms[i].next) {
      const std::string_view text = s.substr(syms[i].start, syms[i].n);
      const int32_t id = v.Find(text);
      if (id >= 0) {
        out.push_back(id);
        last_unk = false;
      } else {
        EmitUnknown(text, last_unk, out);
      }
    }
  }

  void EncodeByMerges(std::string_view s, std::vector<int32_t>& out) const {
    const Vocab& v = vocab();
    std::vector<int32_t> ids;
    ids.reserve(s.size());
    bool last_unk = false;
    for (size_t offs = 0; offs < s.size();) {
      const size_t len = std::min(Utf8SequenceLength(static_cast<uint8_t>(s[offs])), s.size() - offs);
      const std::string_view ch = s.substr(offs, len);
      offs += len;
      const int32_t id = v.Find(ch);
      if (id >= 0) {
        ids.push_back(id);
        last_unk = false;
      } else {
        EmitUnknown(ch, last_unk, ids);
      }
    }
    ApplyRankedMerges(v, ids);
    out.insert(out.end(), ids.begin(), ids.end());
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> NewSpmTokenizer(std::unique_ptr<const Vocab> vocab) {
  return std::unique_ptr<Tokenizer>(new SpmTokenizer(std::move(vocab)));
}

}  // namespace cascade::text
