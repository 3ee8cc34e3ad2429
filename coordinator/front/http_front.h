// The coordinator's HTTP front (`server.http_listen`): OpenAI's `/v1/completions` and
// `/v1/chat/completions` (streamed as server-sent events or whole), `/v1/models`,
// `/health` (503 while the cluster is not ready) and Prometheus' `/metrics`. It runs
// every request through InferenceService::Execute, the path the gRPC API takes, so
// validation, limits, cancellation and outcomes are the same on both. Bodies are
// translated by coordinator/front/openai_api.h; this file is routing, status codes and I/O.
//
// A client that goes away cancels its request: a stream finds out at its next write, and
// while a request has nothing to send (queued, or a whole response still running) the
// front writes a keep-alive every second (an SSE comment, or a JSON-legal leading space),
// which fails once the client is gone.
//
// With a certificate and key in the options it serves HTTPS (httplib's SSLServer), the
// same routes with the same pool, keep-alives and disconnect detection.
//
// Thread-safety: Start/Stop from the owner's thread; handlers run on the server's pool.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "coordinator/control/serving_metrics.h"
#include "coordinator/front/api_keys.h"
#include "coordinator/front/inference_service.h"
#include "coordinator/front/openai_api.h"
#include "coordinator/serving/replicas.h"
#include "text/tokenizer.h"
#include "text/tool_calls.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace cascade::coordinator {

struct HttpFrontOptions {
  std::string host = "127.0.0.1";
  int port = 0;                   // 0: any free port.
  int threads = 64;               // Connections served at once (each stream holds one).
  std::string model_id;           // The `model` clients name, listed by /v1/models.
  const ApiKeys* keys = nullptr;  // Wanted by /v1/* (and /health, /metrics when set below).
  bool health_needs_key = false;
  bool metrics_needs_key = false;
  int64_t max_body_bytes = 16 << 20;
  // HTTPS with this PEM certificate (chain) and key (server.tls_cert_file / tls_key_file,
  // checked by coordinator/front/public_tls.h first); both empty: plain HTTP.
  std::string tls_cert_file;
  std::string tls_key_file;
  // The syntax function calls are read in and forced (server.tool_call_format, resolved).
  text::ToolCallFormat tool_format = text::ToolCallFormat::kNone;
};

class HttpFront {
 public:
  // Borrows everything; all must outlive the front.
  HttpFront(InferenceService* inference, Replicas* replicas, const text::Tokenizer* tokenizer, ServingMetrics* metrics,
            HttpFrontOptions options);
  ~HttpFront();

  // Binds and starts serving on a thread of its own. Unavailable when it cannot bind;
  // InvalidArgument when the TLS certificate or key does not load.
  absl::Status Start();
  int port() const { return port_; }
  void Stop();

 private:
  // Registers the routes and the key check, error page and request log around them.
  void Route();
  // True when `req` may proceed: it needs no API key, or carries a valid one; otherwise
  // `res` holds the 401 and it does not.
  bool Authorize(const httplib::Request& req, httplib::Response& res) const;
  // The routes: /v1/completions and /v1/chat/completions, /v1/models, /health, /metrics.
  void Complete(OpenAiEndpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void Models(httplib::Response& res) const;
  void Health(httplib::Response& res) const;
  void Metrics(httplib::Response& res) const;

  InferenceService* inference_;
  Replicas* replicas_;
  const text::Tokenizer* tokenizer_;
  ServingMetrics* metrics_;
  HttpFrontOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  int64_t created_ = 0;  // /v1/models' `created`: when the front started.
};

}  // namespace cascade::coordinator
