#include "text/output_filter.h"

#include <algorithm>
#include <utility>

namespace cascade::text {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
  }
  return "";
}

OutputFilter::OutputFilter(const Tokenizer& tokenizer, StopConditions stops, OutputFormat format)
    : tokenizer_(&tokenizer),
      ignore_eos_(stops.ignore_eos),
      stop_ids_(std::move(stops.stop_ids)),
      detok_(tokenizer, {.skip_special = format != OutputFormat::kHarmony}),
      stops_(std::move(stops.stop_strings)) {
  if (format == OutputFormat::kHarmony) harmony_.emplace();
  if (format == OutputFormat::kThinking || format == OutputFormat::kThinkingOpened) {
    think_.emplace(format == OutputFormat::kThinkingOpened);
  }
}

OutputFormat OutputFormatOf(const ChatFormat& chat, std::string_view rendered_prompt) {
  if (chat.harmony) return OutputFormat::kHarmony;
  if (!chat.thinking || PromptClosesThinking(rendered_prompt)) return OutputFormat::kText;
  return PromptOpensThinking(rendered_prompt) ? OutputFormat::kThinkingOpened : OutputFormat::kThinking;
}

namespace {

// `decoded` through a parser that splits reasoning from content (harmony's or the think
// block's), with what it holds back at the end: (reasoning, content).
template <typename Parser>
std::pair<std::string, std::string> Split(Parser& parser, const std::string& decoded, bool at_end) {
  auto d = parser.Push(decoded);
  if (at_end) {
    auto rest = parser.Flush();
    d.reasoning += rest.reasoning;
    d.content += rest.content;
  }
  return {std::move(d.reasoning), std::move(d.content)};
}

}  // namespace

std::string OutputFilter::Route(const std::string& decoded, bool at_end) {
  if (!think_ && !harmony_) return stops_.Push(decoded);
  auto [reasoning, content] = think_ ? Split(*think_, decoded, at_end) : Split(*harmony_, decoded, at_end);
  reasoning_ += reasoning;
  return stops_.Push(content);
}

std::string OutputFilter::Push(int32_t id, bool last_allowed) {
  const bool eog = !ignore_eos_ && tokenizer_->IsEog(id);
  if (eog || std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) {
    reason_ = FinishReason::kStop;
    return {};
  }
  std::string shown = Route(detok_.Feed(id), /*at_end=*/false);
  if (stops_.stopped()) {
    reason_ = FinishReason::kStop;
  } else if (last_allowed) {
    reason_ = FinishReason::kLength;
  }
  return shown;
}

std::string OutputFilter::Flush() {
  // After a stop string the rest of the text is cut; otherwise what the detokenizer holds
  // back (an unfinished character) still goes through the stop matcher.
  std::string shown = stops_.stopped() ? std::string() : Route(detok_.Flush(), /*at_end=*/true);
  shown += stops_.Flush();
  return shown;
}

}  // namespace cascade::text
