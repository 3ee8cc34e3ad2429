// Tests for the validation of public GenerateRequests (coordinator/front/request_validation.h),
// what `InferenceService::Prepare` runs for the gRPC and HTTP fronts: prompt kinds, the
// defaults unset fields keep, every refusal naming its field, and the context limit.
// To add a case: build a `v1::GenerateRequest`, validate it with `Validate`, and assert on
// the `ServingRequest` or on the status (code and field).
#include "coordinator/front/request_validation.h"

#include <limits>
#include <memory>

#include "core/logging.h"
#include "core/str_cat.h"
#include "grammar/grammar.h"
#include "tests/test_support.h"
#include "text/tokenizer_spec.h"

namespace cascade::coordinator {
namespace {

using ::cascade::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kMaxContext = 8;

// A tiny SPM vocabulary ("Hi!" is "▁Hi" "!") with ChatML's tokens and template.
std::unique_ptr<text::Tokenizer> TinyTokenizer() {
  text::TokenizerSpec spec;
  spec.tokens = {"<unk>",        "<s>", "</s>", "\xE2\x96\x81Hi", "!", "<|im_start|>", "<|im_end|>",
                 "\xE2\x96\x81", "H",   "i",    "\xE2\x96\x81H"};
  spec.token_types = {2, 3, 3, 1, 1, 3, 3, 1, 1, 1, 1};
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.unk_id = 0;
  spec.add_bos = true;
  spec.chat_template = "<|im_start|>";
  auto t = text::Tokenizer::FromSpec(spec);
  CASCADE_CHECK(t.ok()) << t.status();
  return std::move(*t);
}

class RequestValidationTest : public ::testing::Test {
 protected:
  absl::StatusOr<ServingRequest> Validate(const v1::GenerateRequest& req) const {
    return ValidateGenerateRequest(req, *tokenizer_, tokenizer_->n_vocab(), kMaxContext);
  }

  std::unique_ptr<text::Tokenizer> tokenizer_ = TinyTokenizer();
};

TEST_F(RequestValidationTest, TextPromptKeepsDefaultsAndCapsMaxTokens) {
  v1::GenerateRequest req;
  req.set_request_id("r");
  req.mutable_prompt()->set_text("Hi!");
  auto r = Validate(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request_id, "r");
  EXPECT_THAT(r->prompt, ElementsAre(1, 3, 4));  // BOS added.
  const sampling::SamplingParams defaults;
  EXPECT_EQ(r->sampling.temperature, defaults.temperature);
  EXPECT_EQ(r->sampling.top_k, defaults.top_k);
  EXPECT_EQ(r->max_tokens, kMaxContext - 3);  // The default 256, capped to the room left.
  EXPECT_TRUE(r->speculate);
  EXPECT_EQ(r->num_tokens, 0);
}

// An explicit max_tokens the context cannot hold is refused, naming the context and the
// policy that serves longer generations; 2^31 - 1 (OpenAI chat's default) still means "all
// that is left", and a length that fits is kept.
TEST_F(RequestValidationTest, AnExplicitLengthPastTheContextIsRefused) {
  v1::GenerateRequest req;
  req.mutable_prompt()->set_text("Hi!");  // 3 tokens.
  req.set_max_tokens(kMaxContext - 2);
  EXPECT_THAT(Validate(req), StatusIs(absl::StatusCode::kInvalidArgument,
                                      AllOf(HasSubstr("max_tokens"), HasSubstr(StrCat("context of ", kMaxContext)),
                                            HasSubstr("kv_policy: sink_window"))));
  req.set_max_tokens(kMaxContext - 3);
  auto r = Validate(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_tokens, kMaxContext - 3);
  req.set_max_tokens(std::numeric_limits<int32_t>::max());
  r = Validate(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_tokens, kMaxContext - 3);
}

TEST_F(RequestValidationTest, FieldsAreCopied) {
  v1::GenerateRequest req;
  req.mutable_prompt()->mutable_ids()->add_ids(3);
  req.mutable_sampling()->set_temperature(0);
  req.mutable_sampling()->set_top_k(5);
  req.mutable_sampling()->set_seed(9);
  req.set_max_tokens(2);
  req.add_stop("!");
  req.add_stop_ids(4);
  req.set_ignore_eos(true);
  req.set_logprobs(3);
  req.mutable_speculative()->set_num_tokens(16);
  auto r = Validate(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->prompt, ElementsAre(3));  // Ids as given, no BOS.
  EXPECT_EQ(r->sampling.temperature, 0.0f);
  EXPECT_EQ(r->sampling.top_k, 5);
  EXPECT_EQ(r->sampling.seed, 9u);
  EXPECT_EQ(r->sampling.n_logprobs, 3);
  EXPECT_EQ(r->max_tokens, 2);
  EXPECT_THAT(r->stops.stop_strings, ElementsAre("!"));
  EXPECT_THAT(r->stops.stop_ids, ElementsAre(4));
  EXPECT_TRUE(r->stops.ignore_eos);
  EXPECT_TRUE(r->speculate);  // `enabled` unset means on.
  EXPECT_EQ(r->num_tokens, 16);
}

TEST_F(RequestValidationTest, ChatUsesTheModelsTemplateOrTheNamedOne) {
  v1::GenerateRequest req;
  v1::ChatMessage* m = req.mutable_prompt()->mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Hi");
  // The rendered turn takes more than kMaxContext tokens.
  auto r = ValidateGenerateRequest(req, *tokenizer_, tokenizer_->n_vocab(), /*max_context=*/64);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt.front(), 5);  // <|im_start|>: ChatML, detected from the template.
  req.mutable_prompt()->mutable_chat()->set_chat_template("llama3");
  r = ValidateGenerateRequest(req, *tokenizer_, tokenizer_->n_vocab(), /*max_context=*/64);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->prompt.front(), 5);  // "<|start_header_id|>" is no token here: plain text.
  req.mutable_prompt()->mutable_chat()->set_chat_template("nope");
  EXPECT_THAT(Validate(req), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown chat template")));
}

// A chat rendered in harmony is answered in it (reasoning apart); other chats and text
// prompts are plain text, even when the text is harmony markup.
TEST_F(RequestValidationTest, OnlyAHarmonyChatIsAnsweredInHarmony) {
  v1::GenerateRequest req;
  v1::ChatMessage* m = req.mutable_prompt()->mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Hi");
  auto r = ValidateGenerateRequest(req, *tokenizer_, tokenizer_->n_vocab(), /*max_context=*/256);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output_format, text::OutputFormat::kText);  // ChatML.
  req.mutable_prompt()->mutable_chat()->set_chat_template("harmony");
  r = ValidateGenerateRequest(req, *tokenizer_, tokenizer_->n_vocab(), /*max_context=*/256);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output_format, text::OutputFormat::kHarmony);
  req.mutable_prompt()->set_text("<|start|>user<|message|>Hi<|end|><|start|>assistant");
  r = ValidateGenerateRequest(req, *tokenizer_, tokenizer_->n_vocab(), /*max_context=*/256);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output_format, text::OutputFormat::kText);
}

TEST_F(RequestValidationTest, RefusalsNameTheField) {
  const auto refused = [&](const v1::GenerateRequest& req, const char* field) {
    EXPECT_THAT(Validate(req), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(field))) << req.DebugString();
  };
  v1::GenerateRequest req;
  refused(req, "prompt: give text, ids or chat");
  req.mutable_prompt()->mutable_chat();
  refused(req, "prompt.chat: no messages");
  req.mutable_prompt()->mutable_ids()->add_ids(11);
  refused(req, "prompt.ids: id 11 is outside the vocabulary [0, 11)");
  req.mutable_prompt()->mutable_ids()->set_ids(0, -1);
  refused(req, "prompt.ids: id -1");
  req.mutable_prompt()->mutable_ids()->clear_ids();
  refused(req, "prompt: empty");
  for (int i = 0; i < kMaxContext; ++i) req.mutable_prompt()->mutable_ids()->add_ids(3);
  refused(req, "prompt: 8 tokens, the context holds 8");

  v1::GenerateRequest ok;
  ok.mutable_prompt()->set_text("Hi");
  v1::GenerateRequest bad = ok;
  bad.mutable_sampling()->set_top_p(0);
  refused(bad, "sampling: top_p");
  bad = ok;
  bad.set_logprobs(21);
  refused(bad, "sampling: logprobs");
  bad = ok;
  bad.set_max_tokens(0);
  refused(bad, "max_tokens = 0");
  bad = ok;
  bad.mutable_speculative()->set_num_tokens(17);
  refused(bad, "speculative.num_tokens = 17");
  bad.mutable_speculative()->set_num_tokens(0);
  refused(bad, "speculative.num_tokens = 0");
}

TEST_F(RequestValidationTest, ConstraintsCompileOrAreRefusedNamingWhy) {
  v1::GenerateRequest req;
  req.mutable_prompt()->set_text("Hi");
  req.mutable_constraint()->set_json_schema(R"({"type": "object", "properties": {"a": {"type": "integer"}}})");
  absl::StatusOr<ServingRequest> r = Validate(req);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_NE(r->grammar, nullptr);
  EXPECT_TRUE(grammar::Accepts(*r->grammar, R"({"a": 12})"));
  EXPECT_FALSE(grammar::Accepts(*r->grammar, R"({"a": "x"})"));
  const auto refused = [&](const v1::OutputConstraint& c, const char* why) {
    v1::GenerateRequest bad = req;
    *bad.mutable_constraint() = c;
    EXPECT_THAT(Validate(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(why))) << c.DebugString();
  };
  v1::OutputConstraint c;
  c.set_json_schema("{");
  refused(c, "constraint.json_schema: not valid JSON");
  c.set_json_schema(R"({"type": "integer", "multipleOf": 3})");
  refused(c, "constraint.json_schema: /multipleOf");
  c.set_grammar("root ::= x");
  refused(c, "constraint.grammar: grammar line 1: rule 'x' is used but never defined");
  // Too ambiguous to follow: 90,000 optional "a"s alive at once (a hang, before the cap).
  c.set_grammar(R"(root ::= (("a"?){300}){300})");
  refused(c, "constraint.grammar: the grammar keeps more than 4096 parses open");
  c.set_regex("((a?){300}){300}");
  refused(c, "constraint.regex: the grammar keeps more than 4096 parses open");
  // Nesting past what the parsers recurse through.
  c.set_grammar("root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')'));
  refused(c, "groups nested deeper than 200");
  c.set_regex(std::string(300, '(') + "a" + std::string(300, ')'));
  refused(c, "groups nested deeper than 200");
  std::string deep = R"({"type": "integer"})";
  for (int i = 0; i < 150; ++i) deep = StrCat(R"({"type": "array", "items": )", deep, "}");
  c.set_json_schema(deep);
  refused(c, "schemas nested deeper than 100");
  c.set_json_object(false);
  refused(c, "constraint.json_object: set it to true");
  // ignore_eos leaves a finished grammar no token.
  v1::GenerateRequest no_end = req;
  no_end.set_ignore_eos(true);
  EXPECT_THAT(Validate(no_end), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ignore_eos")));
}

TEST_F(RequestValidationTest, SpeculationCanBeTurnedOff) {
  v1::GenerateRequest req;
  req.mutable_prompt()->set_text("Hi");
  req.mutable_speculative()->set_enabled(false);
  auto r = Validate(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->speculate);
}

}  // namespace
}  // namespace cascade::coordinator
