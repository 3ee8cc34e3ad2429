#include "coordinator/front/openai_api.h"

#include <chrono>
#include <limits>
#include <optional>
#include <random>

#include "absl/strings/str_format.h"
#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::coordinator {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxChoices = 16;

absl::Status Bad(std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(StrCat(field, ": ", why));
}

// Typed, range-checked reads of a request body's optional fields (absent and null alike
// mean "not given").
class Fields {
 public:
  Fields(const json& body, std::string_view text) : body_(body), text_(text) {}

  // The body as it came.
  std::string_view text() const { return text_; }

  const json* Get(const char* key) const {
    auto it = body_.find(key);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  }
  absl::Status Number(const char* key, double lo, double hi, std::optional<double>* out) const {
    const json* v = Get(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number()) return Bad(key, "expected a number");
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi)) return Bad(key, StrCat(x, " is outside [", lo, ", ", hi, "]"));
    *out = x;
    return absl::OkStatus();
  }
  absl::Status Int(const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) const {
    const json* v = Get(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number_integer()) return Bad(key, "expected an integer");
    // An unsigned JSON integer may exceed every int64_t (`hi + 1` would overflow).
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
      return Bad(key, StrCat(v->get<uint64_t>(), " is outside [", lo, ", ", hi, "]"));
    }
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) return Bad(key, StrCat(x, " is outside [", lo, ", ", hi, "]"));
    *out = x;
    return absl::OkStatus();
  }
  absl::Status Bool(const char* key, std::optional<bool>* out) const {
    const json* v = Get(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_boolean()) return Bad(key, "expected true or false");
    *out = v->get<bool>();
    return absl::OkStatus();
  }

 private:
  const json& body_;
  std::string_view text_;
};

// `obj[key]` when it is a string, else "" (absent, or of another type). Unlike
// json::value(key, ""), which throws when the member is not a string.
std::string StringMember(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A chat message's content: a string, or text parts ([{"type": "text", "text": ...}]).
absl::StatusOr<std::string> MessageContent(const json& content, size_t i) {
  const std::string field = StrCat("messages[", i, "].content");
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return Bad(field, "expected a string or an array of text parts");
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || StringMember(part, "type") != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      return Bad(field, "only text parts ({\"type\": \"text\", \"text\": ...}) are supported; this model reads text");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

// An assistant message's tool_calls and a tool message's tool_call_id and name.
absl::Status ParseToolFields(const json& m, size_t i, v1::ChatMessage* out) {
  if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
    const std::string field = StrCat("messages[", i, "].tool_calls");
    if (out->role() != "assistant" || !calls->is_array())
      return Bad(field, "expected an array, on an assistant message");
    for (size_t k = 0; k < calls->size(); ++k) {
      const json& c = (*calls)[k];
      const json* f = c.is_object() && c.contains("function") && c["function"].is_object() ? &c["function"] : nullptr;
      if (f == nullptr || !f->contains("name") || !(*f)["name"].is_string()) {
        return Bad(StrCat(field, "[", k, "]"),
                   "expected {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
      }
      v1::ToolCall* call = out->add_tool_calls();
      call->set_id(StringMember(c, "id"));
      call->set_name((*f)["name"].get<std::string>());
      const auto args = f->find("arguments");
      call->set_arguments(args == f->end() || args->is_null() ? "{}"
                          : args->is_string()                 ? args->get<std::string>()
                                                              : args->dump());
    }
  }
  if (out->role() == "tool") {
    if (m.contains("tool_call_id") && !m["tool_call_id"].is_string()) {
      return Bad(StrCat("messages[", i, "].tool_call_id"), "expected a string");
    }
    out->set_tool_call_id(StringMember(m, "tool_call_id"));
    out->set_name(StringMember(m, "name"));
  }
  return absl::OkStatus();
}

absl::Status ParseMessages(const json& body, v1::GenerateRequest* req) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array()) return Bad("messages", "required: an array of {role, content} messages");
  if (it->empty()) return Bad("messages", "empty: give at least one message");
  v1::ChatMessages* chat = req->mutable_prompt()->mutable_chat();
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    if (!m.is_object()) return Bad(StrCat("messages[", i, "]"), "expected an object with role and content");
    if (m.contains("role") && !m["role"].is_string()) return Bad(StrCat("messages[", i, "].role"), "expected a string");
    const std::string role = StringMember(m, "role");
    std::string mapped;
    if (role == "system" || role == "developer") {
      mapped = "system";
    } else if (role == "user" || role == "assistant" || role == "tool") {
      mapped = role;
    } else {
      return Bad(StrCat("messages[", i, "].role"),
                 StrCat("'", role, "' is not supported (system, developer, user, assistant or tool)"));
    }
    auto content = MessageContent(m.contains("content") ? m["content"] : json(), i);
    if (!content.ok()) return content.status();
    v1::ChatMessage* out = chat->add_messages();
    out->set_role(mapped);
    out->set_content(*content);
    CASCADE_RETURN_IF_ERROR(ParseToolFields(m, i, out));
  }
  // Variables for the model's template (vLLM's and SGLang's name), e.g. enable_thinking.
  if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null()) {
    if (!kw->is_object()) return Bad("chat_template_kwargs", "expected an object of template variables");
    if (!kw->empty()) chat->set_template_kwargs_json(kw->dump());
  }
  return absl::OkStatus();
}

// Completions' prompt: a string, token ids, or a one-element array of either.
absl::Status ParsePrompt(const json& body, v1::GenerateRequest* req) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return Bad("prompt", "required: a string or an array of token ids");
  const json* p = &*it;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    req->mutable_prompt()->set_text(p->get<std::string>());
    return absl::OkStatus();
  }
  if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
    v1::TokenIds* ids = req->mutable_prompt()->mutable_ids();
    for (const json& id : *p) {
      if (!id.is_number_integer()) return Bad("prompt", "a token-id prompt must hold integers only");
      const int64_t v = id.get<int64_t>();
      if (v < 0 || v > std::numeric_limits<int32_t>::max())
        return Bad("prompt", StrCat("token id ", v, " is negative or too large"));
      ids->add_ids(static_cast<int32_t>(v));
    }
    return absl::OkStatus();
  }
  if (p->is_array() && p->size() > 1) {
    return Bad("prompt", "batches of prompts are not supported: send one request per prompt");
  }
  return Bad("prompt", "expected a string or an array of token ids");
}

absl::Status ParseStop(const json& body, v1::GenerateRequest* req) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (it->is_string()) {
    req->add_stop(it->get<std::string>());
    return absl::OkStatus();
  }
  if (!it->is_array() || it->size() > 16) return Bad("stop", "expected a string or an array of at most 16 strings");
  for (const json& s : *it) {
    if (!s.is_string()) return Bad("stop", "expected strings");
    if (!s.get<std::string>().empty()) req->add_stop(s.get<std::string>());
  }
  return absl::OkStatus();
}

// Options that would change the answer's meaning: refused, never silently ignored.
absl::Status RefuseUnsupported(const Fields& f) {
  std::optional<int64_t> best_of;
  if (auto st = f.Int("best_of", 1, 128, &best_of); !st.ok()) return st;
  if (best_of && *best_of != 1) return Bad("best_of", "only 1 is supported");
  std::optional<bool> echo;
  if (auto st = f.Bool("echo", &echo); !st.ok()) return st;
  if (echo.value_or(false)) return Bad("echo", "echoing the prompt is not supported");
  if (const json* s = f.Get("suffix"); s != nullptr && !(s->is_string() && s->get<std::string>().empty())) {
    return Bad("suffix", "insertion (suffix) is not supported");
  }
  if (const json* b = f.Get("logit_bias"); b != nullptr && !b->empty()) return Bad("logit_bias", "not supported");
  if (const json* t = f.Get("functions"); t != nullptr && !t->empty()) {
    return Bad("functions", "the deprecated functions API is not supported (send tools)");
  }
  return absl::OkStatus();
}

// The schema as the body spells it: `json` holds an object's keys sorted, and a schema's
// properties are generated in their declared order, so read the body again, keeping it.
std::string OrderedSchema(const Fields& f, const json& sorted) {
  const auto body = nlohmann::ordered_json::parse(f.text(), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return sorted.dump();
  return body["response_format"]["json_schema"]["schema"].dump();
}

// Structured output: OpenAI's response_format, or llama.cpp's `grammar` (GBNF) and a
// `regex`, at most one of them. Compiled (and refused, naming what) by request validation.
absl::Status ParseConstraint(const Fields& f, v1::GenerateRequest* req) {
  v1::OutputConstraint c;
  int given = 0;
  if (const json* r = f.Get("response_format"); r != nullptr) {
    if (!r->is_object()) return Bad("response_format", "expected an object");
    const std::string type = StringMember(*r, "type");
    if (type == "json_object") {
      c.set_json_object(true);
      ++given;
    } else if (type == "json_schema") {
      const auto js = r->find("json_schema");
      if (js == r->end() || !js->is_object()) return Bad("response_format.json_schema", "expected an object");
      const auto schema = js->find("schema");
      if (schema == js->end() || !(schema->is_object() || schema->is_boolean())) {
        return Bad("response_format.json_schema.schema", "expected a JSON Schema (an object)");
      }
      c.set_json_schema(OrderedSchema(f, *schema));
      ++given;
    } else if (type != "text") {
      return Bad("response_format.type", "expected \"text\", \"json_object\" or \"json_schema\"");
    }
  }
  for (const char* key : {"grammar", "regex"}) {
    const json* v = f.Get(key);
    if (v == nullptr) continue;
    if (!v->is_string()) return Bad(key, "expected a string");
    if (std::string_view(key) == "grammar") {
      c.set_grammar(v->get<std::string>());
    } else {
      c.set_regex(v->get<std::string>());
    }
    ++given;
  }
  if (given > 1) return Bad("response_format", "give one of response_format (JSON), grammar or regex");
  if (given == 1) *req->mutable_constraint() = std::move(c);
  return absl::OkStatus();
}

absl::Status ParseSampling(const Fields& f, v1::GenerateRequest* req) {
  v1::SamplingParams* s = req->mutable_sampling();
  std::optional<double> temperature, top_p, min_p, presence, frequency, repetition;
  std::optional<int64_t> top_k, seed;
  CASCADE_RETURN_IF_ERROR(f.Number("temperature", 0, 2, &temperature));
  CASCADE_RETURN_IF_ERROR(f.Number("top_p", 0, 1, &top_p));
  if (top_p && *top_p <= 0) return Bad("top_p", "must be > 0");
  CASCADE_RETURN_IF_ERROR(f.Number("presence_penalty", -2, 2, &presence));
  CASCADE_RETURN_IF_ERROR(f.Number("frequency_penalty", -2, 2, &frequency));
  // Beyond OpenAI, with vLLM's names.
  CASCADE_RETURN_IF_ERROR(f.Int("top_k", -1, std::numeric_limits<int32_t>::max(), &top_k));
  CASCADE_RETURN_IF_ERROR(f.Number("min_p", 0, 1, &min_p));
  CASCADE_RETURN_IF_ERROR(f.Number("repetition_penalty", 1e-6, 1e6, &repetition));
  CASCADE_RETURN_IF_ERROR(
      f.Int("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &seed));
  // OpenAI's defaults: temperature 1, top_p 1, no top-k or min-p (not `cascade run`'s).
  s->set_temperature(static_cast<float>(temperature.value_or(1.0)));
  s->set_top_p(static_cast<float>(top_p.value_or(1.0)));
  s->set_top_k(static_cast<int32_t>(top_k && *top_k > 0 ? *top_k : 0));
  s->set_min_p(static_cast<float>(min_p.value_or(0.0)));
  s->set_repetition_penalty(static_cast<float>(repetition.value_or(1.0)));
  s->set_presence_penalty(static_cast<float>(presence.value_or(0.0)));
  s->set_frequency_penalty(static_cast<float>(frequency.value_or(0.0)));
  // Without a seed, each request samples differently, as OpenAI's do.
  s->set_seed(seed ? static_cast<uint64_t>(*seed)
                   : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}());
  return absl::OkStatus();
}

absl::Status ParseLimits(const Fields& f, OpenAiEndpoint endpoint, OpenAiRequest* out) {
  std::optional<int64_t> max_tokens, max_completion;
  CASCADE_RETURN_IF_ERROR(f.Int("max_tokens", 1, std::numeric_limits<int32_t>::max(), &max_tokens));
  CASCADE_RETURN_IF_ERROR(f.Int("max_completion_tokens", 1, std::numeric_limits<int32_t>::max(), &max_completion));
  // Completions default to 16 tokens (OpenAI's rule); chat runs to the end of the context
  // (the serving loop caps max_tokens at what the context leaves).
  const int64_t limit = max_completion.value_or(
      max_tokens.value_or(endpoint == OpenAiEndpoint::kCompletions ? 16 : std::numeric_limits<int32_t>::max()));
  out->request.set_max_tokens(static_cast<int32_t>(limit));
  std::optional<bool> ignore_eos;
  CASCADE_RETURN_IF_ERROR(f.Bool("ignore_eos", &ignore_eos));
  out->request.set_ignore_eos(ignore_eos.value_or(false));
  if (const json* ids = f.Get("stop_token_ids"); ids != nullptr) {
    if (!ids->is_array()) return Bad("stop_token_ids", "expected an array of token ids");
    for (const json& id : *ids) {
      if (!id.is_number_integer()) return Bad("stop_token_ids", "expected integers");
      // get<int32_t> would wrap a larger id onto another token's.
      if (id.is_number_unsigned() ? id.get<uint64_t>() > uint64_t{std::numeric_limits<int32_t>::max()}
                                  : id.get<int64_t>() < 0 || id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return Bad("stop_token_ids", StrCat("token id ", id.dump(), " is negative or too large"));
      }
      out->request.add_stop_ids(id.get<int32_t>());
    }
  }
  return absl::OkStatus();
}

absl::Status ParseLogprobs(const Fields& f, OpenAiEndpoint endpoint, OpenAiRequest* out) {
  std::optional<int64_t> top;
  if (endpoint == OpenAiEndpoint::kCompletions) {
    // `logprobs: n` (0..20 here; OpenAI allows 5): the chosen token's and the top n.
    CASCADE_RETURN_IF_ERROR(f.Int("logprobs", 0, 20, &top));
    out->logprobs = top.has_value();
  } else {
    std::optional<bool> on;
    CASCADE_RETURN_IF_ERROR(f.Bool("logprobs", &on));
    CASCADE_RETURN_IF_ERROR(f.Int("top_logprobs", 0, 20, &top));
    if (top && !on.value_or(false)) return Bad("top_logprobs", "needs logprobs: true");
    out->logprobs = on.value_or(false);
  }
  out->top_logprobs = static_cast<int>(top.value_or(0));
  // The serving loop reports the chosen token's logprob with the top n, n >= 1.
  if (out->logprobs) out->request.set_logprobs(std::max(1, out->top_logprobs));
  return absl::OkStatus();
}

absl::Status ParseStream(const Fields& f, OpenAiRequest* out) {
  std::optional<bool> stream;
  CASCADE_RETURN_IF_ERROR(f.Bool("stream", &stream));
  out->stream = stream.value_or(false);
  if (const json* so = f.Get("stream_options"); so != nullptr) {
    if (!out->stream) return Bad("stream_options", "only allowed with stream: true");
    if (!so->is_object()) return Bad("stream_options", "expected an object");
    std::optional<bool> usage;
    CASCADE_RETURN_IF_ERROR(Fields(*so, "").Bool("include_usage", &usage));
    out->include_usage = usage.value_or(false);
  }
  return absl::OkStatus();
}

std::string RandomId(std::string_view prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("%s-%016x%08x", prefix, rng(), static_cast<uint32_t>(rng()));
}

std::string_view FinishName(v1::FinishReason r) { return r == v1::FINISH_REASON_LENGTH ? "length" : "stop"; }

}  // namespace

// `tools` and `tool_choice`: the tools go to the model's template; a required or named
// choice becomes the grammar of a call in the template's syntax.
absl::Status ParseTools(std::string_view body, OpenAiRequest* out) {
  const auto ordered = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  CASCADE_ASSIGN_OR_RETURN(out->tools, ParseOpenAiTools(ordered));
  if (!out->tools.any()) return absl::OkStatus();
  if (out->endpoint != OpenAiEndpoint::kChat) return Bad("tools", "only /v1/chat/completions takes tools");
  out->request.mutable_prompt()->mutable_chat()->set_tools_json(out->tools.tools.dump());
  const bool forced =
      out->tools.choice == OpenAiTools::Choice::kRequired || out->tools.choice == OpenAiTools::Choice::kNamed;
  if (!forced) return absl::OkStatus();
  if (out->request.has_constraint())
    return Bad("tool_choice", "a required tool call cannot take a response_format too");
  CASCADE_ASSIGN_OR_RETURN(const std::string gbnf, ToolCallGbnf(out->tool_format, out->tools));
  out->request.mutable_constraint()->set_grammar(gbnf);
  return absl::OkStatus();
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, std::string_view body,
                                                 std::string_view model_id, text::ToolCallFormat tool_format) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("body", "not valid JSON");
  if (!j.is_object()) return Bad("body", "expected a JSON object");
  const Fields f(j, body);
  if (const json* model = f.Get("model"); model != nullptr) {
    if (!model->is_string()) return Bad("model", "expected a string");
    if (model->get<std::string>() != model_id) {
      return absl::NotFoundError(StrCat("model: the model '", model->get<std::string>(),
                                        "' does not exist; this server serves '", model_id, "' (GET /v1/models)"));
    }
  }
  OpenAiRequest out;
  out.endpoint = endpoint;
  out.tool_format = tool_format;
  CASCADE_RETURN_IF_ERROR(RefuseUnsupported(f));
  CASCADE_RETURN_IF_ERROR(endpoint == OpenAiEndpoint::kChat ? ParseMessages(j, &out.request)
                                                            : ParsePrompt(j, &out.request));
  CASCADE_RETURN_IF_ERROR(ParseSampling(f, &out.request));
  CASCADE_RETURN_IF_ERROR(ParseLimits(f, endpoint, &out));
  CASCADE_RETURN_IF_ERROR(ParseStop(j, &out.request));
  CASCADE_RETURN_IF_ERROR(ParseConstraint(f, &out.request));
  if (f.Get("tools") != nullptr || f.Get("tool_choice") != nullptr) CASCADE_RETURN_IF_ERROR(ParseTools(body, &out));
  std::optional<int64_t> n;
  CASCADE_RETURN_IF_ERROR(f.Int("n", 1, kMaxChoices, &n));
  out.n = static_cast<int>(n.value_or(1));
  CASCADE_RETURN_IF_ERROR(ParseLogprobs(f, endpoint, &out));
  CASCADE_RETURN_IF_ERROR(ParseStream(f, &out));
  if (const json* user = f.Get("user"); user != nullptr && user->is_string()) {
    out.request.set_request_id(user->get<std::string>().substr(0, 128));
  }
  return out;
}

OpenAiError ToOpenAiError(const absl::Status& status) {
  OpenAiError e;
  std::string type = "server_error";
  json code = nullptr;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      e.http_status = 400;
      type = "invalid_request_error";
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      type = "invalid_request_error";
      code = "model_not_found";
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      type = "authentication_error";
      break;
    case absl::StatusCode::kPermissionDenied:
      e.http_status = 403;
      type = "permission_error";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      type = "rate_limit_error";
      break;
    case absl::StatusCode::kUnavailable: e.http_status = 503; break;
    case absl::StatusCode::kDeadlineExceeded: e.http_status = 504; break;
    case absl::StatusCode::kCancelled: e.http_status = 499; break;  // Client closed request (nginx's code).
    default: e.http_status = 500; break;
  }
  // "field: why" names OpenAI's `param`.
  const std::string message(status.message());
  json param = nullptr;
  if (e.http_status == 400 || e.http_status == 404) {
    const size_t colon = message.find(':');
    if (colon != std::string::npos && message.find(' ') > colon) param = message.substr(0, colon);
  }
  e.body = {{"error", {{"message", message}, {"type", type}, {"param", param}, {"code", code}}}};
  return e;
}

std::string DumpJson(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

OpenAiResponder::OpenAiResponder(const OpenAiRequest& request, const text::Tokenizer& tokenizer, std::string model_id)
    : request_(request),
      tokenizer_(tokenizer),
      model_id_(std::move(model_id)),
      id_(RandomId(request.endpoint == OpenAiEndpoint::kChat ? "chatcmpl" : "cmpl")),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      choices_(std::max(1, request.n)) {
  for (Choice& c : choices_) {
    if (request_.endpoint == OpenAiEndpoint::kChat && request_.tools.parse_calls() &&
        request_.tool_format != text::ToolCallFormat::kNone) {
      c.reader.emplace(request_.tool_format);
    }
    if (request_.endpoint == OpenAiEndpoint::kChat) {
      c.logprobs = {{"content", json::array()}};
    } else {
      c.logprobs = {{"tokens", json::array()},
                    {"token_logprobs", json::array()},
                    {"top_logprobs", json::array()},
                    {"text_offset", json::array()}};
    }
  }
}

v1::GenerateRequest ChoiceRequest(const OpenAiRequest& request, int index) {
  v1::GenerateRequest r = request.request;
  if (index > 0) {
    r.mutable_sampling()->set_seed(r.sampling().seed() + static_cast<uint64_t>(index));
    if (!r.request_id().empty()) r.set_request_id(StrCat(r.request_id(), "/", index));
  }
  return r;
}

json OpenAiResponder::Envelope(std::string_view object) const {
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_id_}};
}

std::string OpenAiResponder::TokenString(int32_t id) const {
  const int32_t ids[] = {id};
  return tokenizer_.Decode(ids);
}

json OpenAiResponder::Logprobs(const v1::GenerateResponse& m, Choice& c) {
  if (request_.endpoint == OpenAiEndpoint::kChat) {
    json content = json::array();
    for (const v1::TokenLogprob& lp : m.logprobs()) {
      const std::string token = TokenString(lp.id());
      json top = json::array();
      for (int i = 0; i < std::min(lp.top_size(), request_.top_logprobs); ++i) {
        const std::string t = TokenString(lp.top(i).id());
        top.push_back(
            {{"token", t}, {"logprob", lp.top(i).logprob()}, {"bytes", std::vector<uint8_t>(t.begin(), t.end())}});
      }
      content.push_back({{"token", token},
                         {"logprob", lp.logprob()},
                         {"bytes", std::vector<uint8_t>(token.begin(), token.end())},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const v1::TokenLogprob& lp : m.logprobs()) {
    const std::string token = TokenString(lp.id());
    json top = json::object();
    for (int i = 0; i < std::min(lp.top_size(), request_.top_logprobs); ++i) {
      top[TokenString(lp.top(i).id())] = lp.top(i).logprob();
    }
    out["tokens"].push_back(token);
    out["token_logprobs"].push_back(lp.logprob());
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(c.text_offset);
    c.text_offset += static_cast<int64_t>(token.size());
  }
  return out;
}

json OpenAiResponder::UsageJson() const {
  const v1::Usage& first = choices_[0].usage;
  int64_t completion = 0;
  for (const Choice& c : choices_) completion += c.usage.completion_tokens();
  json usage = {{"prompt_tokens", first.prompt_tokens()},
                {"completion_tokens", completion},
                {"total_tokens", first.prompt_tokens() + completion},
                {"prompt_tokens_details", {{"cached_tokens", first.cached_tokens()}}}};
  // scheduler.kv_policy sink_window narrowed some choice's attention: said, never silent.
  int64_t hidden = 0;
  for (const Choice& c : choices_) hidden = std::max<int64_t>(hidden, c.usage.kv_hidden_tokens());
  if (hidden > 0) usage["kv_policy"] = {{"name", "sink_window"}, {"hidden_tokens", hidden}};
  return usage;
}

std::vector<json> OpenAiResponder::Chunks(const v1::GenerateResponse& m, int index) {
  const bool chat = request_.endpoint == OpenAiEndpoint::kChat;
  const bool last = m.finish() != v1::FINISH_REASON_UNSPECIFIED;
  Choice& ch = choices_.at(index);
  if (m.has_usage()) ch.usage = m.usage();
  std::vector<json> chunks;
  const auto chunk = [&](json choice) {
    json c = Envelope(chat ? "chat.completion.chunk" : "text_completion");
    choice["index"] = index;
    c["choices"] = json::array({std::move(choice)});
    if (request_.include_usage) c["usage"] = nullptr;
    chunks.push_back(std::move(c));
  };
  if (chat && !ch.sent_role) {
    ch.sent_role = true;
    chunk({{"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
  }
  // Calls come out of the text as they complete; what may still be one is held back.
  std::vector<json> calls;
  std::string text = ch.reader ? ch.reader->Push(m.text(), calls) : m.text();
  if (last && ch.reader) text += ch.reader->Flush(calls);
  if (!text.empty() || !m.reasoning().empty() || m.token_ids_size() > 0) {
    const json lp = request_.logprobs && m.logprobs_size() > 0 ? Logprobs(m, ch) : json(nullptr);
    if (!text.empty() || !m.reasoning().empty() || !lp.is_null()) {
      if (chat) {
        // Reasoning (harmony's analysis channel) travels as `reasoning_content`, vLLM's and
        // DeepSeek's name, beside the content.
        json delta = json::object();
        if (!text.empty() || m.reasoning().empty()) delta["content"] = text;
        if (!m.reasoning().empty()) delta["reasoning_content"] = m.reasoning();
        chunk({{"delta", std::move(delta)}, {"logprobs", lp}, {"finish_reason", nullptr}});
      } else {
        chunk({{"text", text}, {"logprobs", lp}, {"finish_reason", nullptr}});
      }
    }
  }
  if (!calls.empty()) chunk({{"delta", {{"tool_calls", calls}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
  if (last) {
    const std::string finish = FinishOf(ch, m.finish());
    if (chat) {
      chunk({{"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", finish}});
    } else {
      chunk({{"text", ""}, {"logprobs", nullptr}, {"finish_reason", finish}});
    }
  }
  return chunks;
}

std::string OpenAiResponder::FinishOf(const Choice& c, v1::FinishReason finish) {
  // A choice that called tools and stopped by itself (not cut by max_tokens) ends with them.
  if (c.reader && c.reader->n_calls() > 0 && finish == v1::FINISH_REASON_STOP) return "tool_calls";
  return std::string(FinishName(finish));
}

json OpenAiResponder::UsageChunk() const {
  json c = Envelope(request_.endpoint == OpenAiEndpoint::kChat ? "chat.completion.chunk" : "text_completion");
  c["choices"] = json::array();
  c["usage"] = UsageJson();
  return c;
}

void OpenAiResponder::Add(const v1::GenerateResponse& m, int index) {
  Choice& c = choices_.at(index);
  c.text += m.text();
  c.reasoning += m.reasoning();
  if (request_.logprobs && m.logprobs_size() > 0) {
    const json lp = Logprobs(m, c);
    for (auto& [key, values] : lp.items()) {
      for (const json& v : values) c.logprobs[key].push_back(v);
    }
  }
  if (m.finish() != v1::FINISH_REASON_UNSPECIFIED) c.finish = m.finish();
  if (m.has_usage()) c.usage = m.usage();
}

json OpenAiResponder::Whole() const {
  const bool chat = request_.endpoint == OpenAiEndpoint::kChat;
  json out = Envelope(chat ? "chat.completion" : "text_completion");
  out["choices"] = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json choice = {{"index", i}, {"logprobs", request_.logprobs ? c.logprobs : json(nullptr)}};
    if (chat) {
      // The calls read out of the whole text; a message that only calls has no content.
      Choice read;
      if (c.reader) read.reader.emplace(request_.tool_format);
      std::vector<json> calls;
      std::string content = read.reader ? read.reader->Push(c.text, calls) : c.text;
      if (read.reader) content += read.reader->Flush(calls);
      choice["message"] = {{"role", "assistant"}, {"content", content}};
      if (!calls.empty()) {
        if (content.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = calls;
      }
      if (!c.reasoning.empty()) choice["message"]["reasoning_content"] = c.reasoning;
      choice["finish_reason"] = FinishOf(read, c.finish);
    } else {
      choice["finish_reason"] = FinishName(c.finish);
      choice["text"] = c.text;
    }
    out["choices"].push_back(std::move(choice));
  }
  out["usage"] = UsageJson();
  return out;
}

}  // namespace cascade::coordinator
