#include "text/stop_matcher.h"

#include <algorithm>

namespace cascade::text {

size_t PartialTagSuffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::Push(std::string_view text) {
  if (stopped_) return {};
  held_.append(text);
  // A complete stop string anywhere in the held text ends generation.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    std::string out = held_.substr(0, first);
    held_.clear();
    stopped_ = true;
    emitted_ += out;
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) keep = std::max(keep, PartialTagSuffix(held_, s));
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  emitted_ += out;
  return out;
}

std::string StopMatcher::Flush() {
  std::string out = stopped_ ? std::string() : held_;
  held_.clear();
  emitted_ += out;
  return out;
}

}  // namespace cascade::text
