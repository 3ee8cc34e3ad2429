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

std::string OutputFilter::Route(const std::string& decoded, bool at_end) {
  if (think_) {
    ThinkParser::Delta d = think_->Push(decoded);
    if (at_end) {
      ThinkParser::Delta rest = think_->Flush();
      d.reasoning += rest.reasoning;
      d.content += rest.content;
    }
    reasoning_ += d.reasoning;
    return stops_.Push(d.content);
  }
  if (!harmony_) return stops_.Push(decoded);
  HarmonyParser::Delta d = harmony_->Push(decoded);
  if (at_end) {
    HarmonyParser::Delta rest = harmony_->Flush();
    d.reasoning += rest.reasoning;
    d.content += rest.content;
  }
  reasoning_ += d.reasoning;
  return stops_.Push(d.content);
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
