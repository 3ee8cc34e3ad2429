// libFuzzer target: any bytes sent as a gRPC `cascade.v1.GenerateRequest` must, once
// protobuf accepts them, pass the coordinator's validation (`ValidateGenerateRequest`,
// what `InferenceService::Prepare` runs for both fronts) or be refused with a Status,
// never crash. An accepted request must keep the promises the engine relies on: a
// non-empty prompt of vocabulary ids that leaves room in the context, max_tokens in
// [1, room], valid sampling parameters. Its stop conditions then run through the engine's
// output filter over the prompt's ids, as if the model had generated them.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cascade/v1/inference.pb.h"
#include "coordinator/front/request_validation.h"
#include "google/protobuf/stubs/logging.h"
#include "text/output_filter.h"
#include "text/tokenizer.h"

namespace {

constexpr int64_t kMaxContext = 256;

// A small SPM vocabulary with byte fallback (so every input encodes), ChatML's special
// tokens and a ChatML template (so chat prompts render).
const cascade::text::Tokenizer& SmallTokenizer() {
  static const cascade::text::Tokenizer* const tokenizer = [] {
    cascade::text::TokenizerSpec spec;
    spec.tokens = {"<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"};
    spec.token_types = {2, 3, 3, 3, 3};
    for (int b = 0; b < 256; ++b) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
      spec.tokens.push_back(hex);
      spec.token_types.push_back(6);
    }
    for (const char* word : {"\xE2\x96\x81", "\xE2\x96\x81Hi", "\xE2\x96\x81the", "user", "assistant", "system", "!",
                             "\n", "H", "i", "t", "h", "e"}) {
      spec.tokens.push_back(word);
      spec.token_types.push_back(1);
    }
    spec.bos_id = 1;
    spec.eos_id = 2;
    spec.unk_id = 0;
    spec.add_bos = true;
    spec.chat_template =
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
        "<|im_end|>\n{% endfor %}";
    auto t = cascade::text::Tokenizer::FromSpec(spec);
    if (!t.ok()) std::abort();
    return t->release();
  }();
  return *tokenizer;
}

}  // namespace

// Protobuf logs every string field with invalid UTF-8 it refuses; that is the expected
// answer here, not news.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cascade::v1::GenerateRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  const cascade::text::Tokenizer& tok = SmallTokenizer();
  auto r = cascade::coordinator::ValidateGenerateRequest(req, tok, tok.n_vocab(), kMaxContext);
  if (!r.ok()) {
    if (r.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  const int64_t n = static_cast<int64_t>(r->prompt.size());
  if (n < 1 || n >= kMaxContext) std::abort();
  for (int32_t id : r->prompt) {
    if (id < 0 || id >= tok.n_vocab()) std::abort();
  }
  if (r->max_tokens < 1 || r->max_tokens > kMaxContext - n) std::abort();
  if (!r->sampling.Validate().ok()) std::abort();
  if (r->num_tokens < 0 || r->num_tokens > 16) std::abort();
  cascade::text::OutputFilter filter(tok, r->stops);
  for (int32_t i = 0; i < n && !filter.done(); ++i) {
    (void)filter.Push(r->prompt[i], /*last_allowed=*/i + 1 == r->max_tokens);
  }
  (void)filter.Flush();
  (void)filter.text();
  return 0;
}
