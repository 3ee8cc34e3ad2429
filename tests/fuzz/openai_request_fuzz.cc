// libFuzzer target: any HTTP body sent to /v1/completions or /v1/chat/completions must
// become an `OpenAiRequest` or a Status, never a crash, hang or escaped JSON exception.
// The input is parsed for both endpoints. A refusal is turned into OpenAI's error object;
// an accepted request goes through the coordinator's validation (as the HTTP front does
// before `InferenceService::Begin`), and its response is built, streamed or whole, from
// synthetic engine messages (ids inside and outside the vocabulary, logprobs, a partial
// UTF-8 character, usage) and serialised with `DumpJson`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/front/openai_api.h"
#include "coordinator/front/request_validation.h"
#include "text/tokenizer.h"

namespace {

using cascade::coordinator::OpenAiEndpoint;
using cascade::coordinator::OpenAiRequest;
using cascade::coordinator::OpenAiResponder;
using cascade::v1::GenerateResponse;

constexpr char kModel[] = "m";

// tests/coordinator/openai_api_test.cc's tiny SPM vocabulary.
const cascade::text::Tokenizer& TinyTokenizer() {
  static const cascade::text::Tokenizer* const tokenizer = [] {
    cascade::text::TokenizerSpec spec;
    spec.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81Hi", "!"};
    spec.token_types = {2, 3, 3, 1, 1};
    spec.bos_id = 1;
    spec.eos_id = 2;
    spec.unk_id = 0;
    auto t = cascade::text::Tokenizer::FromSpec(spec);
    if (!t.ok()) std::abort();
    return t->release();
  }();
  return *tokenizer;
}

GenerateResponse Message(const std::vector<int32_t>& ids, std::string text, int top, cascade::v1::FinishReason finish) {
  GenerateResponse m;
  for (int32_t id : ids) {
    m.add_token_ids(id);
    cascade::v1::TokenLogprob* lp = m.add_logprobs();
    lp->set_id(id);
    lp->set_logprob(-0.5f);
    for (int i = 0; i < top; ++i) {
      cascade::v1::TopLogprob* alt = lp->add_top();
      alt->set_id(i == 0 ? id : i + 1);
      alt->set_logprob(-1.0f * i);
    }
  }
  m.set_text(std::move(text));
  if (finish != cascade::v1::FINISH_REASON_UNSPECIFIED) {
    m.set_finish(finish);
    m.set_finish_reason(finish == cascade::v1::FINISH_REASON_LENGTH ? "length" : "stop");
    m.mutable_usage()->set_prompt_tokens(3);
    m.mutable_usage()->set_completion_tokens(4);
    m.mutable_usage()->set_cached_tokens(1);
  }
  return m;
}

void Respond(const OpenAiRequest& request) {
  const cascade::text::Tokenizer& tok = TinyTokenizer();
  auto prepared = cascade::coordinator::ValidateGenerateRequest(request.request, tok, tok.n_vocab(), 64);
  if (!prepared.ok()) (void)cascade::coordinator::DumpJson(cascade::coordinator::ToOpenAiError(prepared.status()).body);
  const int top = request.request.logprobs();
  const std::vector<GenerateResponse> messages = {
      Message({3}, " Hi", top, cascade::v1::FINISH_REASON_UNSPECIFIED),
      Message({4, -1, 5, 1 << 30}, "!\xE2\x96", top, cascade::v1::FINISH_REASON_UNSPECIFIED),
      Message({2}, "", top, cascade::v1::FINISH_REASON_LENGTH)};
  OpenAiResponder responder(request, tok, kModel);
  if (request.stream) {
    for (const GenerateResponse& m : messages) {
      for (const auto& chunk : responder.Chunks(m)) (void)cascade::coordinator::DumpJson(chunk);
    }
    if (request.include_usage) (void)cascade::coordinator::DumpJson(responder.UsageChunk());
  } else {
    for (const GenerateResponse& m : messages) responder.Add(m);
    (void)cascade::coordinator::DumpJson(responder.Whole());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (OpenAiEndpoint endpoint : {OpenAiEndpoint::kCompletions, OpenAiEndpoint::kChat}) {
    auto request = cascade::coordinator::ParseOpenAiRequest(endpoint, body, kModel);
    if (!request.ok()) {
      const auto error = cascade::coordinator::ToOpenAiError(request.status());
      if (error.http_status != 400 && error.http_status != 404) std::abort();  // Only caller errors.
      (void)cascade::coordinator::DumpJson(error.body);
      continue;
    }
    if (request->endpoint != endpoint) std::abort();
    Respond(*request);
  }
  return 0;
}
