// Tests for the OpenAI translation layer (coordinator/front/openai_api.h): request bodies map to
// GenerateRequest with OpenAI's defaults, every unsupported or bad field is refused naming
// it, statuses map to OpenAI's error shape and HTTP codes, and responses have OpenAI's
// shapes (whole and streamed). The SDK-level behaviour is tests/integration/http_test.py.
#include "coordinator/front/openai_api.h"

#include <limits>

#include "core/logging.h"
#include "tests/test_support.h"
#include "text/tokenizer_spec.h"

namespace cascade::coordinator {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr char kModel[] = "m";

OpenAiRequest Parse(OpenAiEndpoint e, const json& body) {
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(e, body.dump(), kModel);
  EXPECT_TRUE(r.ok()) << r.status() << " for " << body.dump();
  return r.ok() ? *r : OpenAiRequest{};
}

absl::Status ParseError(OpenAiEndpoint e, std::string_view body) {
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(e, body, kModel);
  EXPECT_FALSE(r.ok()) << "accepted: " << body;
  return r.status();
}

const json kChat = {{"model", kModel}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};

TEST(OpenAiApiTest, ChatMapsMessagesAndOpenAiDefaults) {
  json body = kChat;
  body["messages"] = {
      {{"role", "developer"}, {"content", "be brief"}},
      {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
      {{"role", "assistant"}, {"content", nullptr}}};
  const OpenAiRequest r = Parse(OpenAiEndpoint::kChat, body);
  const v1::ChatMessages& chat = r.request.prompt().chat();
  ASSERT_EQ(chat.messages_size(), 3);
  EXPECT_EQ(chat.messages(0).role(), "system");  // developer is the newer name of system.
  EXPECT_EQ(chat.messages(1).content(), "ab");
  EXPECT_EQ(chat.messages(2).content(), "");
  EXPECT_EQ(chat.template_kwargs_json(), "");
  // OpenAI's defaults, not `cascade run`'s (0.8 / 40 / 0.95 / 0.05).
  EXPECT_EQ(r.request.sampling().temperature(), 1.0f);
  EXPECT_EQ(r.request.sampling().top_p(), 1.0f);
  EXPECT_EQ(r.request.sampling().top_k(), 0);
  EXPECT_EQ(r.request.sampling().min_p(), 0.0f);
  EXPECT_EQ(r.request.max_tokens(), std::numeric_limits<int32_t>::max());  // To the end of the context.
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.logprobs);
  EXPECT_EQ(r.request.logprobs(), 0);
}

// vLLM's and SGLang's extension: variables for the model's own chat template.
TEST(OpenAiApiTest, ChatTemplateKwargsGoToTheTemplate) {
  json body = kChat;
  body["chat_template_kwargs"] = {{"enable_thinking", false}, {"reasoning_effort", "low"}};
  const OpenAiRequest r = Parse(OpenAiEndpoint::kChat, body);
  EXPECT_EQ(json::parse(r.request.prompt().chat().template_kwargs_json()), body["chat_template_kwargs"]);
  body["chat_template_kwargs"] = nullptr;
  EXPECT_EQ(Parse(OpenAiEndpoint::kChat, body).request.prompt().chat().template_kwargs_json(), "");
}

TEST(OpenAiApiTest, SamplingLimitsAndStops) {
  json body = kChat;
  body.update({{"temperature", 0},
               {"top_p", 0.5},
               {"seed", 42},
               {"max_tokens", 7},
               {"max_completion_tokens", 9},
               {"presence_penalty", -1.5},
               {"frequency_penalty", 2},
               {"stop", {"a", "", "b"}},
               {"top_k", 5},
               {"min_p", 0.1},
               {"ignore_eos", true},
               {"stop_token_ids", {3, 4}}});
  const OpenAiRequest r = Parse(OpenAiEndpoint::kChat, body);
  EXPECT_EQ(r.request.sampling().temperature(), 0.0f);
  EXPECT_EQ(r.request.sampling().top_p(), 0.5f);
  EXPECT_EQ(r.request.sampling().seed(), 42u);
  EXPECT_EQ(r.request.max_tokens(), 9);  // max_completion_tokens replaces max_tokens.
  EXPECT_EQ(r.request.sampling().presence_penalty(), -1.5f);
  EXPECT_EQ(r.request.sampling().frequency_penalty(), 2.0f);
  ASSERT_EQ(r.request.stop_size(), 2);  // Empty stops dropped.
  EXPECT_EQ(r.request.stop(1), "b");
  EXPECT_EQ(r.request.sampling().top_k(), 5);
  EXPECT_FLOAT_EQ(r.request.sampling().min_p(), 0.1f);
  EXPECT_TRUE(r.request.ignore_eos());
  EXPECT_EQ(r.request.stop_ids_size(), 2);
  // One stop string alone.
  body["stop"] = "x";
  EXPECT_EQ(Parse(OpenAiEndpoint::kChat, body).request.stop(0), "x");
}

TEST(OpenAiApiTest, CompletionPromptForms) {
  const json base = {{"model", kModel}};
  json body = base;
  body["prompt"] = "hello";
  OpenAiRequest r = Parse(OpenAiEndpoint::kCompletions, body);
  EXPECT_EQ(r.request.prompt().text(), "hello");
  EXPECT_EQ(r.request.max_tokens(), 16);  // OpenAI's completions default.
  body["prompt"] = {"one"};
  EXPECT_EQ(Parse(OpenAiEndpoint::kCompletions, body).request.prompt().text(), "one");
  body["prompt"] = {1, 2, 3};
  r = Parse(OpenAiEndpoint::kCompletions, body);
  ASSERT_EQ(r.request.prompt().ids().ids_size(), 3);
  EXPECT_EQ(r.request.prompt().ids().ids(2), 3);
  body["prompt"] = {{5, 6}};
  EXPECT_EQ(Parse(OpenAiEndpoint::kCompletions, body).request.prompt().ids().ids_size(), 2);
  // Without `model`: the served one.
  EXPECT_TRUE(ParseOpenAiRequest(OpenAiEndpoint::kCompletions, R"({"prompt": "x"})", kModel).ok());
}

TEST(OpenAiApiTest, StreamAndLogprobs) {
  json body = {{"prompt", "x"}, {"stream", true}, {"stream_options", {{"include_usage", true}}}, {"logprobs", 0}};
  OpenAiRequest r = Parse(OpenAiEndpoint::kCompletions, body);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.logprobs);  // logprobs: 0 still reports the chosen token's.
  EXPECT_EQ(r.top_logprobs, 0);
  EXPECT_EQ(r.request.logprobs(), 1);
  json chat = kChat;
  chat.update({{"logprobs", true}, {"top_logprobs", 4}});
  r = Parse(OpenAiEndpoint::kChat, chat);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 4);
  EXPECT_EQ(r.request.logprobs(), 4);
}

struct Refusal {
  OpenAiEndpoint endpoint;
  const char* body;
  absl::StatusCode code;
  const char* message;  // Starts with the field: OpenAI's `param`.
};

TEST(OpenAiApiTest, RefusesBadAndUnsupportedFieldsNamingThem) {
  const auto C = OpenAiEndpoint::kCompletions;
  const auto H = OpenAiEndpoint::kChat;
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const Refusal refusals[] = {
      {C, "not json", kInvalid, "body: not valid JSON"},
      {C, "[1]", kInvalid, "body: expected a JSON object"},
      {C, R"({"prompt": "x", "model": "gpt-4"})", absl::StatusCode::kNotFound,
       "model: the model 'gpt-4' does not exist"},
      {C, R"({"prompt": "x", "model": 3})", kInvalid, "model: expected a string"},
      {C, R"({})", kInvalid, "prompt: required"},
      {C, R"({"prompt": ["a", "b"]})", kInvalid, "prompt: batches of prompts are not supported"},
      {C, R"({"prompt": [1, "a"]})", kInvalid, "prompt: a token-id prompt must hold integers only"},
      {C, R"({"prompt": [-1]})", kInvalid, "prompt: token id -1"},
      {C, R"({"prompt": {}})", kInvalid, "prompt: expected a string or an array of token ids"},
      {C, R"({"prompt": "x", "n": 17})", kInvalid, "n: 17 is outside [1, 16]"},
      {C, R"({"prompt": "x", "best_of": 3})", kInvalid, "best_of: only 1"},
      {C, R"({"prompt": "x", "echo": true})", kInvalid, "echo:"},
      {C, R"({"prompt": "x", "suffix": "y"})", kInvalid, "suffix:"},
      {C, R"({"prompt": "x", "logit_bias": {"1": 2}})", kInvalid, "logit_bias:"},
      {C, R"({"prompt": "x", "temperature": 2.5})", kInvalid, "temperature: 2.5 is outside [0, 2]"},
      {C, R"({"prompt": "x", "temperature": "hot"})", kInvalid, "temperature: expected a number"},
      {C, R"({"prompt": "x", "top_p": 0})", kInvalid, "top_p: must be > 0"},
      {C, R"({"prompt": "x", "presence_penalty": 3})", kInvalid, "presence_penalty:"},
      {C, R"({"prompt": "x", "max_tokens": 0})", kInvalid, "max_tokens: 0 is outside"},
      {C, R"({"prompt": "x", "max_tokens": 1.5})", kInvalid, "max_tokens: expected an integer"},
      {C, R"({"prompt": "x", "logprobs": 21})", kInvalid, "logprobs: 21 is outside [0, 20]"},
      {C, R"({"prompt": "x", "stop": [1]})", kInvalid, "stop: expected strings"},
      {C, R"({"prompt": "x", "stream": "yes"})", kInvalid, "stream: expected true or false"},
      {C, R"({"prompt": "x", "stream_options": {"include_usage": true}})", kInvalid,
       "stream_options: only allowed with stream: true"},
      {H, R"({})", kInvalid, "messages: required"},
      {H, R"({"messages": []})", kInvalid, "messages: empty"},
      {H, R"({"messages": [{"role": "function", "content": "x"}]})", kInvalid,
       "messages[0].role: 'function' is not supported"},
      {H, R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", kInvalid,
       "messages[0].tool_calls: expected an array, on an assistant message"},
      {H, R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "c"}]}]})", kInvalid,
       "messages[0].tool_calls[0]: expected"},
      {C, R"({"prompt": "x", "tools": [{"type": "function", "function": {"name": "f"}}]})", kInvalid,
       "tools: only /v1/chat/completions"},
      {H, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", kInvalid,
       "messages[0].content: only text parts"},
      {H, R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", kInvalid,
       "tools[0]: expected"},
      {H, R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}})", kInvalid,
       "response_format.json_schema: expected an object"},
      {H,
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"schema": 3}}})",
       kInvalid, "response_format.json_schema.schema: expected a JSON Schema"},
      {H, R"({"messages": [{"role": "user", "content": "x"}], "grammar": 1})", kInvalid, "grammar: expected a string"},
      {C, R"({"prompt": "x", "grammar": "root ::= \"a\"", "regex": "a"})", kInvalid, "response_format: give one of"},
      {H, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", kInvalid,
       "top_logprobs: needs logprobs: true"},
      // Found with tests/fuzz/openai_request_fuzz.cc (by it: "role": null; the others while
      // writing it; inputs in its seed corpus): a member of another type than the one read
      // used to throw json::type_error out of the parser, and an unsigned integer above
      // INT64_MAX overflowed `hi + 1`.
      {H, R"({"messages": [{"role": "developer", "role": null}]})", kInvalid, "messages[0].role: expected a string"},
      {H, R"({"messages": [{"role": 1, "content": "x"}]})", kInvalid, "messages[0].role: expected a string"},
      {H, R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": [1]})", kInvalid,
       "chat_template_kwargs: expected an object"},
      {H, R"({"messages": [{"role": "user", "content": [{"type": 1, "text": "x"}]}]})", kInvalid,
       "messages[0].content: only text parts"},
      {H, R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": 1}})", kInvalid,
       "response_format.type: expected"},
      {C, R"({"prompt": "x", "seed": 18446744073709551615})", kInvalid,
       "seed: 18446744073709551615 is outside [-9223372036854775808, 9223372036854775807]"},
      {C, R"({"prompt": "x", "max_tokens": 18446744073709551615})", kInvalid,
       "max_tokens: 18446744073709551615 is outside [1, 2147483647]"},
      // And a stop id beyond int32 used to wrap onto another token's id (4294967298 -> 2).
      {C, R"({"prompt": "x", "stop_token_ids": [4294967298]})", kInvalid,
       "stop_token_ids: token id 4294967298 is negative or too large"},
      {C, R"({"prompt": "x", "stop_token_ids": [-1]})", kInvalid, "stop_token_ids: token id -1"},
  };
  for (const Refusal& r : refusals) {
    const absl::Status st = ParseError(r.endpoint, r.body);
    EXPECT_EQ(st.code(), r.code) << r.body;
    EXPECT_THAT(std::string(st.message()), ::testing::StartsWith(r.message)) << r.body;
  }
}

TEST(OpenAiApiTest, StructuredOutputFieldsBecomeTheConstraint) {
  json body = kChat;
  body["response_format"] = {{"type", "json_schema"},
                             {"json_schema", {{"name", "a"}, {"strict", true}, {"schema", {{"type", "integer"}}}}}};
  EXPECT_EQ(json::parse(Parse(OpenAiEndpoint::kChat, body).request.constraint().json_schema()),
            json({{"type", "integer"}}));
  // Properties keep the order the body gives them (the grammar generates them in it).
  const std::string ordered =
      R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": )"
      R"({"schema": {"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "string"}}}}}})";
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(OpenAiEndpoint::kChat, ordered, kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.constraint().json_schema(),
            R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}}})");
  body["response_format"] = {{"type", "json_object"}};
  EXPECT_TRUE(Parse(OpenAiEndpoint::kChat, body).request.constraint().json_object());
  body["response_format"] = {{"type", "text"}};
  EXPECT_FALSE(Parse(OpenAiEndpoint::kChat, body).request.has_constraint());
  const json completion = {{"prompt", "x"}, {"grammar", "root ::= \"a\""}};
  EXPECT_EQ(Parse(OpenAiEndpoint::kCompletions, completion).request.constraint().grammar(), "root ::= \"a\"");
  EXPECT_EQ(Parse(OpenAiEndpoint::kCompletions, {{"prompt", "x"}, {"regex", "[0-9]+"}}).request.constraint().regex(),
            "[0-9]+");
}

TEST(OpenAiApiTest, ToolMessagesAndToolsReachTheChat) {
  json body = kChat;
  body["messages"] = json::parse(R"([
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny"}])");
  body["tools"] = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  const OpenAiRequest r = Parse(OpenAiEndpoint::kChat, body);
  const v1::ChatMessages& chat = r.request.prompt().chat();
  ASSERT_EQ(chat.messages_size(), 3);
  ASSERT_EQ(chat.messages(1).tool_calls_size(), 1);
  EXPECT_EQ(chat.messages(1).tool_calls(0).id(), "call_1");
  EXPECT_EQ(chat.messages(1).tool_calls(0).name(), "get_weather");
  EXPECT_EQ(chat.messages(1).tool_calls(0).arguments(), "{\"city\": \"Paris\"}");
  EXPECT_EQ(chat.messages(2).role(), "tool");
  EXPECT_EQ(chat.messages(2).tool_call_id(), "call_1");
  EXPECT_EQ(json::parse(chat.tools_json()), body["tools"]);
  EXPECT_FALSE(r.request.has_constraint());  // "auto": nothing forced.
  // A required choice is a grammar in the model's syntax; without one, it is refused.
  body["tool_choice"] = "required";
  absl::StatusOr<OpenAiRequest> forced =
      ParseOpenAiRequest(OpenAiEndpoint::kChat, body.dump(), kModel, text::ToolCallFormat::kHermes);
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_NE(forced->request.constraint().grammar().find("<tool_call>"), std::string::npos);
  EXPECT_EQ(ParseOpenAiRequest(OpenAiEndpoint::kChat, body.dump(), kModel).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OpenAiApiTest, ErrorsTakeOpenAiShapeAndStatus) {
  OpenAiError e = ToOpenAiError(absl::InvalidArgumentError("temperature: 3 is outside [0, 2]"));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e.body["error"]["param"], "temperature");
  EXPECT_EQ(e.body["error"]["message"], "temperature: 3 is outside [0, 2]");
  // A message without a leading field has no param.
  e = ToOpenAiError(absl::InvalidArgumentError("prompt of 9 tokens: too long"));
  EXPECT_TRUE(e.body["error"]["param"].is_null());
  e = ToOpenAiError(absl::NotFoundError("model: no"));
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.body["error"]["code"], "model_not_found");
  EXPECT_EQ(ToOpenAiError(absl::UnavailableError("the cluster is degraded")).http_status, 503);
  EXPECT_EQ(ToOpenAiError(absl::ResourceExhaustedError("full")).http_status, 429);
  EXPECT_EQ(ToOpenAiError(absl::UnauthenticatedError("key")).http_status, 401);
  EXPECT_EQ(ToOpenAiError(absl::InternalError("bug")).http_status, 500);
}

TEST(OpenAiApiTest, DumpJsonReplacesInvalidUtf8) {
  EXPECT_EQ(DumpJson(json{{"t", std::string("a\xE2\x82")}}), "{\"t\":\"a\xEF\xBF\xBD\"}");
}

// A four-token SentencePiece vocabulary: enough to name tokens in logprobs.
std::unique_ptr<text::Tokenizer> TinyTokenizer() {
  text::TokenizerSpec spec;
  spec.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81Hi", "!"};
  spec.token_types = {2, 3, 3, 1, 1};
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.unk_id = 0;
  auto t = text::Tokenizer::FromSpec(spec);
  CASCADE_CHECK(t.ok()) << t.status();
  return std::move(*t);
}

v1::GenerateResponse Message(std::vector<int32_t> ids, std::string text, bool last = false) {
  v1::GenerateResponse m;
  for (int32_t id : ids) {
    m.add_token_ids(id);
    v1::TokenLogprob* lp = m.add_logprobs();
    lp->set_id(id);
    lp->set_logprob(-0.5f);
    for (int32_t alt : {id, 4, 3}) {
      v1::TopLogprob* top = lp->add_top();
      top->set_id(alt);
      top->set_logprob(alt == id ? -0.5f : -2.0f);
    }
  }
  m.set_text(std::move(text));
  if (last) {
    m.set_finish(v1::FINISH_REASON_LENGTH);
    m.mutable_usage()->set_prompt_tokens(5);
    m.mutable_usage()->set_completion_tokens(3);
    m.mutable_usage()->set_cached_tokens(4);
  }
  return m;
}

TEST(OpenAiApiTest, ChatStreamChunks) {
  auto tok = TinyTokenizer();
  json body = kChat;
  body.update({{"stream", true}, {"stream_options", {{"include_usage", true}}}});
  OpenAiResponder r(Parse(OpenAiEndpoint::kChat, body), *tok, kModel);
  std::vector<json> chunks = r.Chunks(Message({3}, " Hi"));
  ASSERT_EQ(chunks.size(), 2u);  // The assistant role, then the content.
  EXPECT_EQ(chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["content"], " Hi");
  EXPECT_TRUE(chunks[1]["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(chunks[1]["usage"].is_null());  // include_usage: null until the last chunk.
  EXPECT_EQ(chunks[0]["id"], chunks[1]["id"]);
  chunks = r.Chunks(Message({4, 4}, "!!", /*last=*/true));
  ASSERT_EQ(chunks.size(), 2u);  // The text, then the finish reason with an empty delta.
  EXPECT_EQ(chunks[1]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(chunks[1]["choices"][0]["delta"].empty());
  const json usage = r.UsageChunk();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 8);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
}

TEST(OpenAiApiTest, WholeChatWithLogprobs) {
  auto tok = TinyTokenizer();
  json body = kChat;
  body.update({{"logprobs", true}, {"top_logprobs", 2}});
  OpenAiResponder r(Parse(OpenAiEndpoint::kChat, body), *tok, kModel);
  r.Add(Message({3}, " Hi"));
  r.Add(Message({4, 4}, "!!", true));
  const json whole = r.Whole();
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], " Hi!!");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(whole["usage"]["completion_tokens"], 3);
  const json& content = whole["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[2]["token"], "!");
  EXPECT_EQ(content[2]["bytes"], json::array({'!'}));
  EXPECT_EQ(content[2]["top_logprobs"].size(), 2u);  // top_logprobs, not the serving loop's 3.
}

// Harmony's reasoning travels as `reasoning_content`: deltas carry it alone while there is no
// content, and the whole message has both; a model without reasoning sends no such key.
TEST(OpenAiApiTest, ReasoningIsReasoningContent) {
  auto tok = TinyTokenizer();
  json body = kChat;
  body.update({{"stream", true}});
  OpenAiResponder streamed(Parse(OpenAiEndpoint::kChat, body), *tok, kModel);
  OpenAiResponder whole(Parse(OpenAiEndpoint::kChat, kChat), *tok, kModel);
  v1::GenerateResponse thinking = Message({3}, "");
  thinking.set_reasoning("Hmm.");
  v1::GenerateResponse answer = Message({4}, "Hi", /*last=*/true);
  std::vector<json> chunks = streamed.Chunks(thinking);
  ASSERT_EQ(chunks.size(), 2u);  // The role, then the reasoning.
  EXPECT_EQ(chunks[1]["choices"][0]["delta"], json({{"reasoning_content", "Hmm."}}));
  chunks = streamed.Chunks(answer);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], json({{"content", "Hi"}}));
  whole.Add(thinking);
  whole.Add(answer);
  EXPECT_EQ(whole.Whole()["choices"][0]["message"],
            json({{"role", "assistant"}, {"content", "Hi"}, {"reasoning_content", "Hmm."}}));
}

TEST(OpenAiApiTest, WholeCompletionLogprobOffsets) {
  auto tok = TinyTokenizer();
  OpenAiResponder r(Parse(OpenAiEndpoint::kCompletions, {{"prompt", "x"}, {"logprobs", 1}}), *tok, kModel);
  r.Add(Message({4}, "!"));
  r.Add(Message({4, 4}, "!!", true));
  const json whole = r.Whole();
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["choices"][0]["text"], "!!!");
  const json& lp = whole["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::array({"!", "!", "!"}));
  EXPECT_EQ(lp["text_offset"], json::array({0, 1, 2}));
  EXPECT_EQ(lp["top_logprobs"][0].size(), 1u);
  // Without logprobs asked: null.
  OpenAiResponder plain(Parse(OpenAiEndpoint::kCompletions, {{"prompt", "x"}}), *tok, kModel);
  plain.Add(Message({4}, "!", true));
  EXPECT_TRUE(plain.Whole()["choices"][0]["logprobs"].is_null());
}

}  // namespace
}  // namespace cascade::coordinator
