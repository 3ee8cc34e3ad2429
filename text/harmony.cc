#include "text/harmony.h"

#include <algorithm>
#include <array>
#include <span>

namespace cascade::text {
namespace {

constexpr std::string_view kMessage = "<|message|>", kChannel = "<|channel|>", kStart = "<|start|>";
constexpr std::array<std::string_view, 3> kEnds = {"<|end|>", "<|return|>", "<|call|>"};

// Whether `s` is a prefix of `marker` or starts with it.
bool Compatible(std::string_view s, std::string_view marker) {
  const size_t n = std::min(s.size(), marker.size());
  return s.substr(0, n) == marker.substr(0, n);
}

// The length of the longest suffix of `s` that is a proper prefix of one of `markers`: the
// part of a marker that the next piece may complete.
size_t HeldBack(std::string_view s, std::span<const std::string_view> markers) {
  for (size_t len = std::min<size_t>(s.size(), 11); len > 0; --len) {
    const std::string_view tail = s.substr(s.size() - len);
    for (std::string_view m : markers) {
      if (len < m.size() && m.substr(0, len) == tail) return len;
    }
  }
  return 0;
}

// The channel a header names: the word after <|channel|> (before " to=..." or a content
// type), or "" when it names none.
std::string ChannelOf(std::string_view header) {
  const size_t at = header.find(kChannel);
  if (at == std::string_view::npos) return "";
  std::string_view rest = header.substr(at + kChannel.size());
  const size_t end = rest.find_first_of(" <");
  return std::string(rest.substr(0, end));
}

}  // namespace

void HarmonyParser::Emit(Delta& out, std::string_view text) const {
  (channel_ == "analysis" ? out.reasoning : out.content).append(text);
}

void HarmonyParser::Drain(Delta& out, bool at_end) {
  while (!pending_.empty()) {
    if (state_ == State::kHeader) {
      const size_t m = pending_.find(kMessage);
      if (m != std::string::npos) {
        channel_ = ChannelOf(std::string_view(pending_).substr(0, m));
        pending_.erase(0, m + kMessage.size());
        state_ = State::kBody;
        continue;
      }
      // A header starts with <|channel|> (the first, after the prompt's "<|start|>assistant")
      // or <|start|> (the next ones); anything else is text outside the format: content.
      if (Compatible(pending_, kChannel) || Compatible(pending_, kStart)) {
        if (!at_end) return;  // The header is not complete yet.
        pending_.clear();     // Markup cut short by the end of the stream: not text.
        return;
      }
      channel_.clear();
      state_ = State::kBody;
      continue;
    }
    size_t end = std::string::npos, marker = 0;
    for (std::string_view e : kEnds) {
      const size_t at = pending_.find(e);
      if (at < end) {
        end = at;
        marker = e.size();
      }
    }
    if (end != std::string::npos) {
      Emit(out, std::string_view(pending_).substr(0, end));
      pending_.erase(0, end + marker);
      state_ = State::kHeader;
      continue;
    }
    const size_t keep = at_end ? 0 : HeldBack(pending_, kEnds);
    Emit(out, std::string_view(pending_).substr(0, pending_.size() - keep));
    pending_.erase(0, pending_.size() - keep);
    return;
  }
}

HarmonyParser::Delta HarmonyParser::Push(std::string_view text) {
  pending_.append(text);
  Delta out;
  Drain(out, /*at_end=*/false);
  return out;
}

HarmonyParser::Delta HarmonyParser::Flush() {
  Delta out;
  Drain(out, /*at_end=*/true);
  return out;
}

}  // namespace cascade::text
