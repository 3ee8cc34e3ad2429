#include "coordinator/front/http_front.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "coordinator/front/metrics_page.h"
#include "coordinator/front/openai_api.h"
#include "core/logging.h"
#include "core/str_cat.h"
#include "httplib.h"

namespace cascade::coordinator {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kKeepAlive = std::chrono::seconds(1);
constexpr absl::Duration kPoll = absl::Milliseconds(100);

void SendJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(DumpJson(body), "application/json");
}

void SendError(httplib::Response& res, const absl::Status& status) {
  const OpenAiError e = ToOpenAiError(status);
  SendJson(res, e.http_status, e.body);
}

bool WriteText(httplib::DataSink& sink, const std::string& text) { return sink.write(text.data(), text.size()); }

bool WriteEvent(httplib::DataSink& sink, const json& data) {
  return WriteText(sink, StrCat("data: ", DumpJson(data), "\n\n"));
}

using Calls = std::vector<std::shared_ptr<InferenceCall>>;

bool AllEnded(const Calls& calls) {
  return std::all_of(calls.begin(), calls.end(), [](const auto& c) { return c->ended(); });
}

// The first error among the choices' calls, or OK.
absl::Status FirstError(const Calls& calls) {
  for (const auto& c : calls) {
    if (c->ended() && !c->status().ok()) return c->status();
  }
  return absl::OkStatus();
}

void CancelAll(const Calls& calls, std::string_view why) {
  for (const auto& c : calls) c->Cancel(why);
}

// One OpenAI request after its first output: streams the rest of its choices' output into
// `sink` (SSE events, or one JSON body for a whole response), writing keep-alives while
// nothing comes. Returns when every choice ended, one failed (the others are cancelled),
// or the client went away (which cancels them all). `pending[i]`: choice i's unsent output.
void Finish(const Calls& calls, OpenAiResponder& responder, const OpenAiRequest& request,
            std::vector<std::vector<v1::GenerateResponse>> pending, httplib::DataSink& sink) {
  auto last_write = Clock::now();
  bool alive = true;
  size_t turn = 0;  // The call waited on when none has output: each in turn.
  while (alive) {
    bool any = false;
    for (size_t i = 0; i < calls.size(); ++i) {
      for (const v1::GenerateResponse& m : pending[i]) {
        any = true;
        if (!request.stream) {
          responder.Add(m, static_cast<int>(i));
          continue;
        }
        for (const json& chunk : responder.Chunks(m, static_cast<int>(i))) alive = alive && WriteEvent(sink, chunk);
        last_write = Clock::now();
      }
      pending[i].clear();
    }
    if (!alive || AllEnded(calls) || !FirstError(calls).ok()) break;
    if (calls.size() == 1) {
      calls[0]->Read(kPoll, &pending[0]);
    } else {
      for (size_t i = 0; i < calls.size(); ++i) calls[i]->Read(absl::ZeroDuration(), &pending[i]);
      // Nothing came: wait on the next call in turn that has not ended. Every call may have
      // ended since the check above (the loop's top then sees it); a search without that
      // bound spun forever on such a request (seen once in http_n_choices, 100% CPU).
      for (size_t k = 0; !any && k < calls.size(); ++k) {
        const size_t i = turn++ % calls.size();
        if (calls[i]->ended()) continue;
        calls[i]->Read(kPoll / static_cast<int64_t>(calls.size()), &pending[i]);
        break;
      }
    }
    // A whole response writes nothing until the end, however much output comes.
    if (!AllEnded(calls) && Clock::now() - last_write > kKeepAlive) {
      // SSE comments and leading JSON whitespace are ignored by clients; a gone client
      // fails the write.
      alive = WriteText(sink, request.stream ? ": keep-alive\n\n" : " ");
      last_write = Clock::now();
    }
  }
  if (!alive) {
    CancelAll(calls, "the HTTP client went away");
    return;
  }
  const absl::Status status = FirstError(calls);
  if (!status.ok()) CancelAll(calls, "another choice of the request failed");
  if (request.stream) {
    if (!status.ok()) {
      WriteEvent(sink, ToOpenAiError(status).body);
    } else if (request.include_usage) {
      WriteEvent(sink, responder.UsageChunk());
    }
    WriteText(sink, "data: [DONE]\n\n");
  } else {
    WriteText(sink, DumpJson(status.ok() ? responder.Whole() : ToOpenAiError(status).body));
  }
  sink.done();
}

// HTTPS with the options' certificate and key, or plain HTTP. Everything else (routes,
// pool, timeouts, keep-alives) is the same on both: SSLServer is a Server over TLS streams.
std::unique_ptr<httplib::Server> MakeServer(const HttpFrontOptions& options) {
  if (options.tls_cert_file.empty()) return std::make_unique<httplib::Server>();
  return std::make_unique<httplib::SSLServer>(options.tls_cert_file.c_str(), options.tls_key_file.c_str());
}

}  // namespace

HttpFront::HttpFront(InferenceService* inference, Replicas* replicas, const text::Tokenizer* tokenizer,
                     ServingMetrics* metrics, HttpFrontOptions options)
    : inference_(inference),
      replicas_(replicas),
      tokenizer_(tokenizer),
      metrics_(metrics),
      options_(std::move(options)),
      server_(MakeServer(options_)) {}

HttpFront::~HttpFront() { Stop(); }

absl::Status HttpFront::Start() {
  created_ =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (!server_->is_valid()) {  // An SSLServer whose certificate or key did not load.
    return absl::InvalidArgumentError(StrCat("server.tls_cert_file: the HTTP front cannot serve TLS with '",
                                             options_.tls_cert_file, "' and '", options_.tls_key_file, "'"));
  }
  const int threads = options_.threads;
  // Each streamed request holds a pool thread for its whole life: size the pool for the
  // concurrency served, not for the cores (httplib's default is max(8, cores - 1)).
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_read_timeout(30, 0);
  server_->set_write_timeout(30, 0);
  Route();
  // httplib 0.11 listens with a backlog of 5: a burst of connections overflows it and the
  // kernel resets some. Note the socket here, then listen() again with a real backlog
  // (Linux takes a second listen() as a new backlog).
  int listen_fd = -1;
  server_->set_socket_options([&listen_fd](socket_t fd) {
    httplib::default_socket_options(fd);
    listen_fd = fd;
  });
  port_ = options_.port == 0 ? server_->bind_to_any_port(options_.host)
                             : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port_ <= 0) {
    return absl::UnavailableError(
        StrCat("server.http_listen: cannot listen on ", options_.host, ":", options_.port, " (in use?)"));
  }
  if (listen_fd >= 0 && ::listen(listen_fd, SOMAXCONN) != 0) {
    return absl::UnavailableError(StrCat("server.http_listen: listen(): ", std::strerror(errno)));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return absl::OkStatus();
}

void HttpFront::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

namespace {

// The routes, each named once: registration, the 404 message and the metrics' labels all
// read these.
struct RouteName {
  const char* method;
  const char* path;
};
constexpr RouteName kCompletions{"POST", "/v1/completions"}, kChat{"POST", "/v1/chat/completions"},
    kModels{"GET", "/v1/models"}, kHealth{"GET", "/health"}, kMetrics{"GET", "/metrics"};
constexpr RouteName kRoutes[] = {kCompletions, kChat, kModels, kHealth, kMetrics};

bool KnownPath(const std::string& path) {
  return std::any_of(std::begin(kRoutes), std::end(kRoutes), [&](const RouteName& r) { return path == r.path; });
}

std::string RouteList() {
  std::string out;
  for (const RouteName& r : kRoutes) out += StrCat(out.empty() ? "" : ", ", r.method, " ", r.path);
  return out;
}

// An OpenAI-style error body with `message` (the type every route error has).
json ErrorBody(const std::string& message) {
  return {{"error", {{"message", message}, {"type", "invalid_request_error"}, {"param", nullptr}, {"code", nullptr}}}};
}

}  // namespace

void HttpFront::Route() {
  httplib::Server& s = *server_;
  // API keys first: a request without a valid one never reaches a handler.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return Authorize(req, res) ? httplib::Server::HandlerResponse::Unhandled
                               : httplib::Server::HandlerResponse::Handled;
  });
  s.Post(kCompletions.path, [this](const httplib::Request& req, httplib::Response& res) {
    Complete(OpenAiEndpoint::kCompletions, req, res);
  });
  s.Post(kChat.path,
         [this](const httplib::Request& req, httplib::Response& res) { Complete(OpenAiEndpoint::kChat, req, res); });
  s.Get(kModels.path, [this](const httplib::Request&, httplib::Response& res) { Models(res); });
  s.Get(kHealth.path, [this](const httplib::Request&, httplib::Response& res) { Health(res); });
  s.Get(kMetrics.path, [this](const httplib::Request&, httplib::Response& res) { Metrics(res); });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // A handler's own error (an unknown model is 404 too).
    SendJson(res, res.status,
             ErrorBody(res.status == 404 ? StrCat("no route ", req.method, " ", req.path, " (", RouteList(), ")")
                                         : StrCat("HTTP ", res.status)));
  });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    // Paths of known routes only, so a scanner cannot grow the label set.
    metrics_->CountHttp(KnownPath(req.path) ? req.path : "other", res.status);
  });
}

bool HttpFront::Authorize(const httplib::Request& req, httplib::Response& res) const {
  const bool needs_key = req.path.rfind("/v1/", 0) == 0 || (req.path == kHealth.path && options_.health_needs_key) ||
                         (req.path == kMetrics.path && options_.metrics_needs_key);
  if (!needs_key || options_.keys == nullptr) return true;
  absl::Status st = options_.keys->Check(req.get_header_value("Authorization"));
  if (st.ok()) return true;
  OpenAiError e = ToOpenAiError(st);
  e.body["error"]["code"] = "invalid_api_key";
  SendJson(res, e.http_status, e.body);
  return false;
}

void HttpFront::Complete(OpenAiEndpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  auto parsed = ParseOpenAiRequest(endpoint, req.body, options_.model_id, options_.tool_format);
  if (!parsed.ok()) {
    metrics_->CountRequest("http", RequestOutcomeOf(parsed.status(), v1::FINISH_REASON_UNSPECIFIED));
    return SendError(res, parsed.status());
  }
  auto call = inference_->Begin("http", ChoiceRequest(*parsed, 0));
  if (!call.ok()) return SendError(res, call.status());
  // Until the first output, errors (a full cache, a degraded cluster) still get their own
  // HTTP status; after it the status line is out.
  std::vector<std::vector<v1::GenerateResponse>> first(parsed->n);
  while (first[0].empty() && !(*call)->Read(kPoll, &first[0])) {
  }
  const bool output = std::any_of(first[0].begin(), first[0].end(), [](const v1::GenerateResponse& m) {
    return m.token_ids_size() > 0 || !m.text().empty() || !m.reasoning().empty();
  });
  if (!output && (*call)->ended() && !(*call)->status().ok()) return SendError(res, (*call)->status());
  Calls calls = {std::shared_ptr<InferenceCall>(std::move(*call))};
  // The other choices start once choice 0 has its first token: its prompt's full blocks
  // are in the prefix cache by then, so theirs come from it instead of being computed again.
  for (int i = 1; i < parsed->n; ++i) {
    auto more = inference_->Begin("http", ChoiceRequest(*parsed, i));
    if (!more.ok()) {
      CancelAll(calls, "another choice of the request was refused");
      return SendError(res, more.status());
    }
    calls.push_back(std::shared_ptr<InferenceCall>(std::move(*more)));
  }
  auto responder = std::make_shared<OpenAiResponder>(*parsed, *tokenizer_, options_.model_id);
  const OpenAiRequest request = *parsed;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      request.stream ? "text/event-stream" : "application/json",
      [calls, responder, request, first](size_t, httplib::DataSink& sink) mutable {
        Finish(calls, *responder, request, std::move(first), sink);
        return true;
      },
      // Runs when the response is over, written or not: a client gone before the provider
      // ran still cancels the request.
      [calls](bool) { CancelAll(calls, "the HTTP client went away"); });
}

void HttpFront::Models(httplib::Response& res) const {
  json model = {{"id", options_.model_id},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "cascade"},
                {"max_model_len", inference_->max_context()}};
  SendJson(res, 200, {{"object", "list"}, {"data", json::array({model})}});
}

void HttpFront::Health(httplib::Response& res) const {
  v1::ClusterStatus st;
  replicas_->FillStatus(&st);
  const bool draining = inference_->draining();
  json body = {{"status", draining ? "draining" : st.state()}};
  if (!st.detail().empty()) body["detail"] = st.detail();
  // With replicas, one serving replica serves (requests go to it).
  SendJson(res, st.replicas_serving() > 0 && !draining ? 200 : 503, body);
}

void HttpFront::Metrics(httplib::Response& res) const {
  v1::ClusterStatus st;
  replicas_->FillStatus(&st);
  res.set_content(RenderMetricsPage(*metrics_, replicas_->Stats(), st), "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace cascade::coordinator
