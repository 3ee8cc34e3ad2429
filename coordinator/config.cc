#include "coordinator/config.h"

#include <yaml-cpp/yaml.h>

#include <exception>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "core/cpu_prefill_activations.h"
#include "core/kv_cache_dtype.h"
#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::coordinator {
namespace {

// The most ranks a pipeline or tensor group may have.
constexpr int64_t kMaxRanks = 1 << 16;

// Validation context: the source name for messages.
class Parser {
 public:
  explicit Parser(std::string_view source) : source_(source) {}

  absl::StatusOr<ClusterConfig> Parse(const YAML::Node& root);

 private:
  // "source:line: key: message" (the line is omitted when yaml-cpp has no mark).
  absl::Status Error(const YAML::Node& at, std::string_view key, std::string_view message) const {
    std::string where = source_;
    if (at.IsDefined()) {
      const YAML::Mark mark = at.Mark();
      if (mark.line >= 0) StrAppend(&where, ":", mark.line + 1);
    }
    return absl::InvalidArgumentError(StrCat(where, ": ", key, ": ", message));
  }

  // `node` must be a mapping whose keys are all in `allowed`, each once. A null node
  // (`section:` with nothing after it) counts as an empty mapping.
  absl::Status CheckMap(const YAML::Node& node, std::string_view path,
                        std::initializer_list<std::string_view> allowed) const {
    if (node.IsNull()) return absl::OkStatus();
    if (!node.IsMap()) return Error(node, path, "expected a mapping");
    std::set<std::string> seen;
    for (const auto& kv : node) {
      const std::string key_path = path.empty() ? std::string() : StrCat(path, ".");
      if (!kv.first.IsScalar()) return Error(kv.first, path, "keys must be plain names");
      const std::string key = kv.first.Scalar();
      bool known = false;
      for (std::string_view a : allowed) known = known || a == key;
      if (!known) {
        std::vector<std::string> names(allowed.begin(), allowed.end());
        return Error(kv.first, StrCat(key_path, key),
                     StrCat("unknown key (expected one of: ", absl::StrJoin(names, ", "), ")"));
      }
      if (!seen.insert(key).second) {
        return Error(kv.first, StrCat(key_path, key), "duplicate key");
      }
    }
    return absl::OkStatus();
  }

  // A child of a (checked) mapping; undefined when absent or when `map` is null.
  static YAML::Node Child(const YAML::Node& map, const char* key) {
    if (!map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    return map[key];
  }

  absl::StatusOr<std::string> GetString(const YAML::Node& node, std::string_view path) const {
    if (!node.IsScalar()) return Error(node, path, "expected a string");
    if (node.Scalar().empty()) return Error(node, path, "must not be empty");
    return node.Scalar();
  }

  absl::StatusOr<int64_t> GetInt(const YAML::Node& node, std::string_view path, int64_t min, int64_t max) const {
    int64_t value = 0;
    if (!node.IsScalar() || !absl::SimpleAtoi(node.Scalar(), &value)) {
      return Error(node, path, StrCat("expected an integer, got '", node.IsScalar() ? node.Scalar() : "", "'"));
    }
    if (value < min) return Error(node, path, StrCat("must be >= ", min, ", got ", value));
    if (value > max) return Error(node, path, StrCat("must be <= ", max, ", got ", value));
    return value;
  }

  absl::Status ParseModel(const YAML::Node& node, ModelSection* out) const;
  absl::Status ParseParallel(const YAML::Node& node, ParallelSection* out) const;
  absl::Status ParseNodes(const YAML::Node& node, std::vector<NodeSection>* out) const;
  absl::Status ParseServer(const YAML::Node& node, ServerSection* out) const;
  // A `HOST:PORT` (IPv6 as `[ADDR]:PORT`) at `key`.
  absl::Status ParseHostPort(const YAML::Node& node, std::string_view key, std::string* host, int* port) const;
  absl::Status ParseScheduler(const YAML::Node& node, SchedulerSection* out) const;
  absl::Status ParseKvPolicy(const YAML::Node& node, SchedulerSection* out) const;
  absl::Status ParseRedundantExperts(const YAML::Node& node, ParallelSection* out) const;
  absl::Status ParseDisaggregation(const YAML::Node& node, ParallelSection* out) const;
  absl::Status ParseTransport(const YAML::Node& node, const std::vector<NodeSection>& nodes,
                              TransportSection* out) const;
  absl::Status ParseDraft(const YAML::Node& node, const std::vector<NodeSection>& nodes, DraftSection* out) const;
  absl::Status ParseSecurity(const YAML::Node& node, SecuritySection* out) const;

  absl::StatusOr<bool> GetBool(const YAML::Node& node, std::string_view path) const {
    if (node.IsScalar() && (node.Scalar() == "true" || node.Scalar() == "false")) return node.Scalar() == "true";
    return Error(node, path, "expected true or false");
  }

  std::string source_;
};

absl::Status Parser::ParseModel(const YAML::Node& node, ModelSection* out) const {
  if (!node.IsDefined()) return Error(node, "model.path", "required key is missing");
  CASCADE_RETURN_IF_ERROR(CheckMap(node, "model", {"path"}));
  const YAML::Node path = Child(node, "path");
  if (!path.IsDefined()) return Error(node, "model.path", "required key is missing");
  CASCADE_ASSIGN_OR_RETURN(out->path, GetString(path, "model.path"));
  return absl::OkStatus();
}

absl::Status Parser::ParseParallel(const YAML::Node& node, ParallelSection* out) const {
  if (!node.IsDefined()) return absl::OkStatus();
  CASCADE_RETURN_IF_ERROR(CheckMap(node, "parallel",
                                   {"pipeline", "tensor", "expert", "data", "route_by_prefix", "disaggregation",
                                    "redundant_experts", "eplb_interval_steps", "expert_comm"}));
  CASCADE_RETURN_IF_ERROR(ParseDisaggregation(node, out));
  if (const YAML::Node n = Child(node, "route_by_prefix"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->route_by_prefix, GetBool(n, "parallel.route_by_prefix"));
  }
  if (const YAML::Node n = Child(node, "data"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->data, GetInt(n, "parallel.data", 1, 256));
  }
  if (const YAML::Node n = Child(node, "pipeline"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->pipeline, GetInt(n, "parallel.pipeline", 1, kMaxRanks));
  }
  if (const YAML::Node n = Child(node, "tensor"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->tensor, GetInt(n, "parallel.tensor", 1, kMaxRanks));
  }
  if (const YAML::Node n = Child(node, "expert"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->expert, GetBool(n, "parallel.expert"));
  }
  CASCADE_RETURN_IF_ERROR(ParseRedundantExperts(node, out));
  if (const YAML::Node n = Child(node, "expert_comm"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(const std::string comm, GetString(n, "parallel.expert_comm"));
    if (comm != "all_reduce" && comm != "all_to_all") {
      return Error(n, "parallel.expert_comm", StrCat("'", comm, "' is neither all_reduce nor all_to_all"));
    }
    out->expert_all_to_all = comm == "all_to_all";
    out->expert_comm_given = true;
    if (out->expert_all_to_all && (!out->expert || out->tensor < 2 || out->disaggregated)) {
      return Error(n, "parallel.expert_comm",
                   "all_to_all needs expert parallelism: parallel.expert: true with tensor >= 2 (not with "
                   "disaggregation yet)");
    }
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseDisaggregation(const YAML::Node& node, ParallelSection* out) const {
  const YAML::Node d = Child(node, "disaggregation");
  if (!d.IsDefined()) return absl::OkStatus();
  for (const char* key : {"data", "pipeline", "tensor"}) {
    if (Child(node, key).IsDefined()) {
      return Error(Child(node, key), StrCat("parallel.", key),
                   "parallel.disaggregation sets each role's replicas, pipeline and tensor: leave this key out");
    }
  }
  CASCADE_RETURN_IF_ERROR(CheckMap(d, "parallel.disaggregation", {"prefill", "decode", "local_prefill_tokens"}));
  out->disaggregated = true;
  for (const char* role : {"prefill", "decode"}) {
    const std::string path = StrCat("parallel.disaggregation.", role);
    const YAML::Node r = Child(d, role);
    if (!r.IsDefined()) return Error(d, path, "required key is missing");
    CASCADE_RETURN_IF_ERROR(CheckMap(r, path, {"replicas", "pipeline", "tensor"}));
    ReplicaShape& shape = std::string_view(role) == "prefill" ? out->prefill : out->decode;
    int& replicas = std::string_view(role) == "prefill" ? out->prefill_replicas : out->decode_replicas;
    if (const YAML::Node n = Child(r, "replicas"); n.IsDefined()) {
      CASCADE_ASSIGN_OR_RETURN(replicas, GetInt(n, StrCat(path, ".replicas"), 1, 128));
    }
    if (const YAML::Node n = Child(r, "pipeline"); n.IsDefined()) {
      CASCADE_ASSIGN_OR_RETURN(shape.pipeline, GetInt(n, StrCat(path, ".pipeline"), 1, kMaxRanks));
    }
    if (const YAML::Node n = Child(r, "tensor"); n.IsDefined()) {
      CASCADE_ASSIGN_OR_RETURN(shape.tensor, GetInt(n, StrCat(path, ".tensor"), 1, kMaxRanks));
    }
  }
  if (const YAML::Node n = Child(d, "local_prefill_tokens"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->local_prefill_tokens,
                             GetInt(n, "parallel.disaggregation.local_prefill_tokens", 0, 1 << 30));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseRedundantExperts(const YAML::Node& node, ParallelSection* out) const {
  const YAML::Node slots = Child(node, "redundant_experts"), interval = Child(node, "eplb_interval_steps");
  if (slots.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->redundant_experts, GetInt(slots, "parallel.redundant_experts", 0, 1 << 20));
  }
  if (out->redundant_experts == 0) {
    if (interval.IsDefined()) {
      return Error(interval, "parallel.eplb_interval_steps", "only with parallel.redundant_experts > 0");
    }
    return absl::OkStatus();
  }
  if (!out->expert || out->disaggregated || out->tensor < 2) {
    return Error(slots, "parallel.redundant_experts",
                 "needs expert parallelism: parallel.expert: true with tensor >= 2 (not with disaggregation yet)");
  }
  out->eplb_interval_steps = 100;
  if (interval.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->eplb_interval_steps,
                             GetInt(interval, "parallel.eplb_interval_steps", 1, std::numeric_limits<int>::max()));
    out->eplb_interval_given = true;
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseNodes(const YAML::Node& node, std::vector<NodeSection>* out) const {
  if (!node.IsDefined()) return Error(node, "nodes", "required key is missing");
  if (!node.IsSequence() || node.size() == 0) {
    return Error(node, "nodes", "expected a non-empty list of nodes");
  }
  std::set<std::string> names;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node entry = node[i];
    const std::string path = StrCat("nodes[", i, "]");
    if (!entry.IsMap()) {
      return Error(entry, path, "expected a mapping {name, host, devices, launch}");
    }
    CASCADE_RETURN_IF_ERROR(CheckMap(entry, path, {"name", "host", "devices", "launch"}));
    NodeSection section;

    const YAML::Node name = Child(entry, "name");
    if (!name.IsDefined()) return Error(entry, StrCat(path, ".name"), "required key is missing");
    CASCADE_ASSIGN_OR_RETURN(section.name, GetString(name, StrCat(path, ".name")));
    if (!names.insert(section.name).second) {
      return Error(name, StrCat(path, ".name"), StrCat("duplicate node name '", section.name, "'"));
    }

    const YAML::Node host = Child(entry, "host");
    if (!host.IsDefined()) return Error(entry, StrCat(path, ".host"), "required key is missing");
    CASCADE_ASSIGN_OR_RETURN(section.host, GetString(host, StrCat(path, ".host")));

    const YAML::Node devices = Child(entry, "devices");
    const std::string devices_path = StrCat(path, ".devices");
    if (!devices.IsDefined()) return Error(entry, devices_path, "required key is missing");
    if (!devices.IsSequence() || devices.size() == 0) {
      return Error(devices, devices_path, "expected a non-empty list such as [cpu, cpu] or [cuda:0]");
    }
    for (size_t d = 0; d < devices.size(); ++d) {
      const std::string device_path = StrCat(devices_path, "[", d, "]");
      CASCADE_ASSIGN_OR_RETURN(const std::string text, GetString(devices[d], device_path));
      absl::StatusOr<Device> device = ParseDevice(text);
      if (!device.ok()) return Error(devices[d], device_path, ToStd(device.status().message()));
      if (device->kind == DeviceKind::kCuda) {
        for (const Device& other : section.devices) {
          if (other == *device) {
            return Error(devices[d], device_path, StrCat("duplicate device '", text, "'"));
          }
        }
      }
      section.devices.push_back(*device);
    }

    if (const YAML::Node launch = Child(entry, "launch"); launch.IsDefined()) {
      const std::string launch_path = StrCat(path, ".launch");
      CASCADE_ASSIGN_OR_RETURN(const std::string mode, GetString(launch, launch_path));
      if (mode == "local") {
        section.launch = LaunchMode::kLocal;
      } else if (mode == "external") {
        section.launch = LaunchMode::kExternal;
      } else {
        return Error(launch, launch_path, StrCat("unknown launch mode '", mode, "' (local or external)"));
      }
    }
    out->push_back(std::move(section));
  }
  return absl::OkStatus();
}

// "models/SmolLM2-135M-Instruct.Q4_1.gguf" -> "SmolLM2-135M-Instruct.Q4_1"; a directory's name.
std::string DefaultModelName(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const size_t slash = path.rfind('/');
  std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (name.size() > 5 && name.substr(name.size() - 5) == ".gguf") name.remove_suffix(5);
  return std::string(name);
}

absl::Status Parser::ParseHostPort(const YAML::Node& node, std::string_view key, std::string* host_out,
                                   int* port_out) const {
  CASCADE_ASSIGN_OR_RETURN(const std::string text, GetString(node, key));
  std::string host;
  std::string port_text;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find("]:");
    if (close == std::string::npos) return Error(node, key, StrCat("expected [IPV6]:PORT, got '", text, "'"));
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon) {
      return Error(node, key, StrCat("expected HOST:PORT (IPv6 as [ADDR]:PORT), got '", text, "'"));
    }
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  int port = 0;
  if (host.empty() || !absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535) {
    return Error(node, key,
                 StrCat("expected HOST:PORT with a port in [0, 65535] (0 = any free port), got '", text, "'"));
  }
  *host_out = host;
  *port_out = port;
  return absl::OkStatus();
}

absl::Status Parser::ParseSecurity(const YAML::Node& node, SecuritySection* out) const {
  if (!node.IsDefined() || node.IsNull()) return absl::OkStatus();
  CASCADE_RETURN_IF_ERROR(CheckMap(
      node, "security", {"api_keys_file", "health_needs_key", "metrics_needs_key", "insecure", "cluster_dir"}));
  if (const YAML::Node n = Child(node, "insecure"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->insecure, GetBool(n, "security.insecure"));
  }
  if (const YAML::Node n = Child(node, "cluster_dir"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->cluster_dir, GetString(n, "security.cluster_dir"));
  }
  if (const YAML::Node n = Child(node, "api_keys_file"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->api_keys_file, GetString(n, "security.api_keys_file"));
  }
  if (const YAML::Node n = Child(node, "health_needs_key"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->health_needs_key, GetBool(n, "security.health_needs_key"));
  }
  if (const YAML::Node n = Child(node, "metrics_needs_key"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->metrics_needs_key, GetBool(n, "security.metrics_needs_key"));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseServer(const YAML::Node& node, ServerSection* out) const {
  if (!node.IsDefined()) return absl::OkStatus();
  CASCADE_RETURN_IF_ERROR(
      CheckMap(node, "server",
               {"listen", "cluster_listen", "http_listen", "http_threads", "model_name", "drain_timeout_s",
                "recovery_timeout_s", "tls_cert_file", "tls_key_file", "tool_call_format"}));
  if (const YAML::Node n = Child(node, "tool_call_format"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->tool_call_format, GetString(n, "server.tool_call_format"));
    const std::string& f = out->tool_call_format;
    if (f != "auto" && f != "hermes" && f != "llama3" && f != "mistral" && f != "deepseek" && f != "none") {
      return Error(n, "server.tool_call_format",
                   StrCat("'", f, "': expected auto, hermes, llama3, mistral, deepseek or none"));
    }
  }
  if (const YAML::Node listen = Child(node, "listen"); listen.IsDefined()) {
    CASCADE_RETURN_IF_ERROR(ParseHostPort(listen, "server.listen", &out->listen_host, &out->listen_port));
    out->listen = listen.Scalar();
  }
  if (const YAML::Node cluster = Child(node, "cluster_listen"); cluster.IsDefined()) {
    CASCADE_RETURN_IF_ERROR(ParseHostPort(cluster, "server.cluster_listen", &out->cluster_host, &out->cluster_port));
    out->cluster_listen = cluster.Scalar();
    if (out->cluster_port != 0 && out->cluster_port == out->listen_port) {
      return Error(cluster, "server.cluster_listen",
                   StrCat("port ", out->cluster_port, " is server.listen's: the control plane needs its own"));
    }
  }
  if (const YAML::Node http = Child(node, "http_listen"); http.IsDefined()) {
    CASCADE_RETURN_IF_ERROR(ParseHostPort(http, "server.http_listen", &out->http_host, &out->http_port));
    out->http_listen = http.Scalar();
  }
  if (const YAML::Node n = Child(node, "http_threads"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->http_threads, GetInt(n, "server.http_threads", 1, 4096));
  }
  if (const YAML::Node n = Child(node, "recovery_timeout_s"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->recovery_timeout_s, GetInt(n, "server.recovery_timeout_s", 1, 86400));
  }
  if (const YAML::Node n = Child(node, "drain_timeout_s"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->drain_timeout_s, GetInt(n, "server.drain_timeout_s", 0, 3600));
  }
  if (const YAML::Node n = Child(node, "model_name"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->model_name, GetString(n, "server.model_name"));
  }
  const YAML::Node cert = Child(node, "tls_cert_file");
  const YAML::Node key = Child(node, "tls_key_file");
  if (cert.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->tls_cert_file, GetString(cert, "server.tls_cert_file"));
  }
  if (key.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->tls_key_file, GetString(key, "server.tls_key_file"));
  }
  if (cert.IsDefined() != key.IsDefined()) {  // TLS needs both; neither is plaintext.
    return cert.IsDefined() ? Error(cert, "server.tls_key_file", "required with server.tls_cert_file (both or neither)")
                            : Error(key, "server.tls_cert_file", "required with server.tls_key_file (both or neither)");
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseScheduler(const YAML::Node& node, SchedulerSection* out) const {
  if (!node.IsDefined()) return absl::OkStatus();
  CASCADE_RETURN_IF_ERROR(
      CheckMap(node, "scheduler",
               {"max_num_seqs", "max_batched_tokens", "kv_block_size", "kv_cache_mb", "host_kv_cache_mb",
                "gpu_memory_fraction", "kv_cache_dtype", "prefix_caching", "max_queued", "device_sampling",
                "cuda_graphs", "kv_policy", "kv_window_tokens", "kv_sink_tokens", "cpu_prefill_activations"}));
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (const YAML::Node n = Child(node, "max_num_seqs"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->max_num_seqs, GetInt(n, "scheduler.max_num_seqs", 1, kIntMax));
  }
  if (const YAML::Node n = Child(node, "max_batched_tokens"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->max_batched_tokens, GetInt(n, "scheduler.max_batched_tokens", 1, kIntMax));
  }
  if (const YAML::Node n = Child(node, "kv_block_size"); n.IsDefined()) {
    int64_t value = 0;
    if (!n.IsScalar() || !absl::SimpleAtoi(n.Scalar(), &value) || value < 1 || value > 1024 ||
        (value & (value - 1)) != 0) {
      return Error(
          n, "scheduler.kv_block_size",
          StrCat("must be a positive power of two (at most 1024), got '", n.IsScalar() ? n.Scalar() : "", "'"));
    }
    out->kv_block_size = static_cast<int>(value);
  }
  if (const YAML::Node n = Child(node, "kv_cache_mb"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->kv_cache_mb, GetInt(n, "scheduler.kv_cache_mb", 1, int64_t{1} << 30));
    out->kv_cache_mb_given = true;
  }
  if (const YAML::Node n = Child(node, "host_kv_cache_mb"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->host_kv_cache_mb, GetInt(n, "scheduler.host_kv_cache_mb", 0, int64_t{1} << 30));
  }
  if (const YAML::Node n = Child(node, "gpu_memory_fraction"); n.IsDefined()) {
    double value = 0;
    if (!n.IsScalar() || !absl::SimpleAtod(n.Scalar(), &value) || !(value > 0 && value <= 1)) {
      return Error(n, "scheduler.gpu_memory_fraction",
                   StrCat("must be a number in (0, 1], got '", n.IsScalar() ? n.Scalar() : "", "'"));
    }
    out->gpu_memory_fraction = value;
  }
  if (const YAML::Node n = Child(node, "kv_cache_dtype"); n.IsDefined()) {
    const absl::StatusOr<DType> d = KvCacheDTypeFromName(n.IsScalar() ? n.Scalar() : "");
    if (!d.ok()) {
      return Error(n, "scheduler.kv_cache_dtype",
                   StrCat("must be one of ", kKvCacheDTypeNames, ", got '", n.IsScalar() ? n.Scalar() : "", "'"));
    }
    out->kv_cache_dtype = *d;
  }
  if (const YAML::Node n = Child(node, "max_queued"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->max_queued, GetInt(n, "scheduler.max_queued", 1, 1000000));
  }
  if (const YAML::Node n = Child(node, "prefix_caching"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->prefix_caching, GetBool(n, "scheduler.prefix_caching"));
  }
  if (const YAML::Node n = Child(node, "device_sampling"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->device_sampling, GetBool(n, "scheduler.device_sampling"));
  }
  if (const YAML::Node n = Child(node, "cuda_graphs"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->cuda_graphs, GetBool(n, "scheduler.cuda_graphs"));
  }
  if (const YAML::Node n = Child(node, "cpu_prefill_activations"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(const std::string name, GetString(n, "scheduler.cpu_prefill_activations"));
    const std::optional<bool> bf16 = CpuPrefillActivationsAreBf16(name);
    if (!bf16.has_value()) {
      return Error(n, "scheduler.cpu_prefill_activations",
                   StrCat("must be ", kCpuPrefillActivationNames, ", got '", name, "'"));
    }
    out->cpu_bf16_prefill = *bf16;
  }
  return ParseKvPolicy(node, out);
}

absl::Status Parser::ParseKvPolicy(const YAML::Node& node, SchedulerSection* out) const {
  const YAML::Node policy = Child(node, "kv_policy"), window = Child(node, "kv_window_tokens"),
                   sinks = Child(node, "kv_sink_tokens");
  if (policy.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(const std::string name, GetString(policy, "scheduler.kv_policy"));
    if (name != "full" && name != "sink_window") {
      return Error(policy, "scheduler.kv_policy", StrCat("unknown policy '", name, "' (full or sink_window)"));
    }
    out->kv_sink_window = name == "sink_window";
  }
  if (!out->kv_sink_window) {
    if (window.IsDefined() || sinks.IsDefined()) {
      return Error(window.IsDefined() ? window : sinks,
                   window.IsDefined() ? "scheduler.kv_window_tokens" : "scheduler.kv_sink_tokens",
                   "only with scheduler.kv_policy: sink_window");
    }
    return absl::OkStatus();
  }
  if (!window.IsDefined()) {
    return Error(policy, "scheduler.kv_window_tokens", "required with scheduler.kv_policy: sink_window");
  }
  CASCADE_ASSIGN_OR_RETURN(out->kv_window_tokens, GetInt(window, "scheduler.kv_window_tokens", 1, int64_t{1} << 30));
  out->kv_sink_tokens = 4;
  if (sinks.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->kv_sink_tokens, GetInt(sinks, "scheduler.kv_sink_tokens", 0, int64_t{1} << 30));
    out->kv_sink_tokens_given = true;
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseTransport(const YAML::Node& node, const std::vector<NodeSection>& nodes,
                                    TransportSection* out) const {
  if (!node.IsDefined()) return absl::OkStatus();
  CASCADE_RETURN_IF_ERROR(CheckMap(node, "transport", {"activations", "pp_handoff"}));
  if (const YAML::Node handoff = Child(node, "pp_handoff"); handoff.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(const std::string name, GetString(handoff, "transport.pp_handoff"));
    if (name == "split") {
      out->pp_handoff = PpHandoff::kSplit;
    } else if (name == "full") {
      out->pp_handoff = PpHandoff::kFull;
    } else {
      return Error(handoff, "transport.pp_handoff", StrCat("unknown hand-off '", name, "' (split or full)"));
    }
  }
  const YAML::Node activations = Child(node, "activations");
  if (!activations.IsDefined()) return absl::OkStatus();
  CASCADE_ASSIGN_OR_RETURN(const std::string name, GetString(activations, "transport.activations"));
  if (name == "ucx") {
    out->activations = ActivationTransport::kUcx;
  } else if (name == "nccl") {
    // NCCL moves GPU memory only: a cpu worker anywhere in the pipeline could not take part.
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (size_t d = 0; d < nodes[i].devices.size(); ++d) {
        if (nodes[i].devices[d].kind == DeviceKind::kCuda) continue;
        return Error(
            activations, "transport.activations",
            StrCat("nccl moves GPU memory, but nodes[", i, "].devices[", d, "] is cpu (use ucx, or cuda:N devices)"));
      }
    }
    out->activations = ActivationTransport::kNccl;
  } else {
    return Error(activations, "transport.activations", StrCat("unknown transport '", name, "' (ucx or nccl)"));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseDraft(const YAML::Node& node, const std::vector<NodeSection>& nodes,
                                DraftSection* out) const {
  if (!node.IsDefined() || node.IsNull()) return absl::OkStatus();
  CASCADE_RETURN_IF_ERROR(CheckMap(
      node, "draft", {"ngram", "self", "model", "node", "devices", "tensor", "num_tokens", "adaptive", "max_batch"}));
  int kinds = 0;
  if (const YAML::Node n = Child(node, "ngram"); n.IsDefined()) {
    ++kinds;
    out->kind = DraftKind::kNgram;
    CASCADE_RETURN_IF_ERROR(CheckMap(n, "draft.ngram", {"n"}));
    if (const YAML::Node v = Child(n, "n"); v.IsDefined()) {
      CASCADE_ASSIGN_OR_RETURN(out->ngram_n, GetInt(v, "draft.ngram.n", 1, 16));
    }
  }
  if (const YAML::Node n = Child(node, "self"); n.IsDefined()) {
    ++kinds;
    out->kind = DraftKind::kSelf;
    CASCADE_RETURN_IF_ERROR(CheckMap(n, "draft.self", {"layers"}));
    const YAML::Node v = Child(n, "layers");
    if (!v.IsDefined()) return Error(n, "draft.self.layers", "required key is missing");
    CASCADE_ASSIGN_OR_RETURN(out->self_layers, GetInt(v, "draft.self.layers", 1, 1 << 16));
  }
  if (const YAML::Node n = Child(node, "model"); n.IsDefined()) {
    ++kinds;
    out->kind = DraftKind::kModel;
    CASCADE_ASSIGN_OR_RETURN(out->model_path, GetString(n, "draft.model"));
  }
  if (kinds != 1) {
    return Error(node, "draft", "needs exactly one drafter: ngram: {n: N}, self: {layers: N} or model: PATH");
  }
  if (const YAML::Node n = Child(node, "node"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->node, GetString(n, "draft.node"));
    bool known = false;
    for (const NodeSection& ns : nodes) known = known || ns.name == out->node;
    if (!known) return Error(n, "draft.node", StrCat("no node is named '", out->node, "'"));
  } else if (!nodes.empty()) {
    out->node = nodes[0].name;
  }
  if (const YAML::Node n = Child(node, "devices"); n.IsDefined()) {
    if (!n.IsSequence() || n.size() != 1) return Error(n, "draft.devices", "expected a list of one device, e.g. [cpu]");
    CASCADE_ASSIGN_OR_RETURN(const std::string text, GetString(n[0], "draft.devices[0]"));
    auto device = ParseDevice(text);
    if (!device.ok()) return Error(n[0], "draft.devices[0]", std::string(device.status().message()));
    out->devices = {*device};
  } else {
    out->devices = {Device{DeviceKind::kCpu, 0}};
  }
  if (const YAML::Node n = Child(node, "tensor"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->tensor, GetInt(n, "draft.tensor", 1, 1));
  }
  if (const YAML::Node n = Child(node, "num_tokens"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->num_tokens, GetInt(n, "draft.num_tokens", 1, 16));
  }
  if (const YAML::Node n = Child(node, "adaptive"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->adaptive, GetBool(n, "draft.adaptive"));
  }
  if (const YAML::Node n = Child(node, "max_batch"); n.IsDefined()) {
    CASCADE_ASSIGN_OR_RETURN(out->max_batch, GetInt(n, "draft.max_batch", 0, 1 << 20));
  }
  return absl::OkStatus();
}

absl::StatusOr<ClusterConfig> Parser::Parse(const YAML::Node& root) {
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        StrCat(source_, ": expected a mapping with model, parallel, nodes, ... at the top level"));
  }
  CASCADE_RETURN_IF_ERROR(
      CheckMap(root, "", {"model", "draft", "parallel", "nodes", "server", "scheduler", "transport", "security"}));
  ClusterConfig config;
  config.source = source_;
  CASCADE_RETURN_IF_ERROR(ParseModel(root["model"], &config.model));
  const YAML::Node parallel = root["parallel"];
  CASCADE_RETURN_IF_ERROR(ParseParallel(parallel, &config.parallel));
  CASCADE_RETURN_IF_ERROR(ParseNodes(root["nodes"], &config.nodes));
  CASCADE_RETURN_IF_ERROR(ParseServer(root["server"], &config.server));
  ServerSection& server = config.server;
  if (server.cluster_listen.empty()) {  // The next port; any free one beside an ephemeral API.
    server.cluster_host = server.listen_host;
    server.cluster_port = server.listen_port == 0 || server.listen_port == 65535 ? 0 : server.listen_port + 1;
    server.cluster_listen = HostPort(server.cluster_host, server.cluster_port);
  }
  if (config.server.model_name.empty()) config.server.model_name = DefaultModelName(config.model.path);
  CASCADE_RETURN_IF_ERROR(ParseScheduler(root["scheduler"], &config.scheduler));
  CASCADE_RETURN_IF_ERROR(ParseTransport(root["transport"], config.nodes, &config.transport));
  CASCADE_RETURN_IF_ERROR(ParseDraft(root["draft"], config.nodes, &config.draft));
  CASCADE_RETURN_IF_ERROR(ParseSecurity(root["security"], &config.security));
  for (const NodeSection& n : config.nodes) {
    if (n.launch == LaunchMode::kExternal && config.security.cluster_dir.empty() && !config.security.insecure) {
      return Error(root["nodes"], "security.cluster_dir",
                   StrCat("node '", n.name,
                          "' is launch: external: its workers need the cluster's CA bundle and join token, which "
                          "live in security.cluster_dir; set it (or security.insecure: true for a plaintext "
                          "cluster)"));
    }
  }

  int64_t needed = 0;
  for (const ReplicaShape& r : config.parallel.Replicas()) needed += int64_t{r.pipeline} * r.tensor;
  if (config.parallel.disaggregated && config.TotalDevices() < needed) {
    return Error(
        parallel, "parallel.disaggregation",
        StrCat(config.parallel.prefill_replicas, " prefill replica(s) of pipeline ", config.parallel.prefill.pipeline,
               " x tensor ", config.parallel.prefill.tensor, " and ", config.parallel.decode_replicas,
               " decode replica(s) of pipeline ", config.parallel.decode.pipeline, " x tensor ",
               config.parallel.decode.tensor, " need ", needed, " devices, but nodes list ", config.TotalDevices()));
  }
  if (config.TotalDevices() < needed) {
    return Error(parallel.IsDefined() ? parallel : root["nodes"], "parallel.pipeline",
                 StrCat(config.parallel.data > 1 ? StrCat("data ", config.parallel.data, " x ") : std::string(),
                        "pipeline ", config.parallel.pipeline, " x tensor ", config.parallel.tensor, " needs ", needed,
                        " devices, but nodes list ", config.TotalDevices()));
  }
  if (config.parallel.disaggregated &&
      (config.draft.kind == DraftKind::kSelf || config.draft.kind == DraftKind::kModel)) {
    return Error(parallel, "parallel.disaggregation",
                 "a drafter worker (draft.self / draft.model) with disaggregation is not supported yet; use "
                 "draft.ngram");
  }
  if (config.scheduler.kv_sink_window && (config.parallel.disaggregated || config.draft.kind == DraftKind::kSelf ||
                                          config.draft.kind == DraftKind::kModel)) {
    return Error(root["scheduler"]["kv_policy"], "scheduler.kv_policy",
                 "sink_window with disaggregation or a drafter worker (draft.self / draft.model) is not supported "
                 "yet (their KV moves whole); use draft.ngram");
  }
  if (config.parallel.data > 1 && (config.draft.kind == DraftKind::kSelf || config.draft.kind == DraftKind::kModel)) {
    return Error(parallel, "parallel.data",
                 "replicas with a drafter worker (draft.self / draft.model) are not supported yet; use draft.ngram "
                 "or parallel.data: 1");
  }
  return config;
}

}  // namespace

std::string HostPort(std::string_view host, int port) {
  const bool v6 = host.find(':') != std::string_view::npos;
  return StrCat(v6 ? "[" : "", host, v6 ? "]:" : ":", port);
}

bool IsLoopbackHost(std::string_view host) {
  return host == "localhost" || host == "::1" || host.substr(0, 4) == "127.";
}

std::string_view ReplicaRoleName(ReplicaRole role) {
  switch (role) {
    case ReplicaRole::kServe: return "serve";
    case ReplicaRole::kPrefill: return "prefill";
    case ReplicaRole::kDecode: return "decode";
  }
  return "?";
}

std::vector<ReplicaShape> ParallelSection::Replicas() const {
  if (!disaggregated) return std::vector<ReplicaShape>(data, ReplicaShape{pipeline, tensor, ReplicaRole::kServe});
  std::vector<ReplicaShape> out(prefill_replicas, prefill);
  out.insert(out.end(), decode_replicas, decode);
  return out;
}

std::string_view LaunchModeName(LaunchMode mode) {
  switch (mode) {
    case LaunchMode::kLocal: return "local";
    case LaunchMode::kExternal: return "external";
  }
  return "?";
}

std::string_view DraftKindName(DraftKind kind) {
  switch (kind) {
    case DraftKind::kNone: return "";
    case DraftKind::kNgram: return "ngram";
    case DraftKind::kSelf: return "self";
    case DraftKind::kModel: return "model";
  }
  return "?";
}

std::string_view ActivationTransportName(ActivationTransport transport) {
  switch (transport) {
    case ActivationTransport::kUcx: return "ucx";
    case ActivationTransport::kNccl: return "nccl";
  }
  return "?";
}

std::string_view PpHandoffName(PpHandoff handoff) {
  switch (handoff) {
    case PpHandoff::kSplit: return "split";
    case PpHandoff::kFull: return "full";
  }
  return "?";
}

int ClusterConfig::TotalDevices() const {
  int n = 0;
  for (const NodeSection& node : nodes) n += static_cast<int>(node.devices.size());
  return n;
}

absl::StatusOr<ClusterConfig> ParseClusterConfig(std::string_view yaml_text, std::string_view source_name) {
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    return Parser(source_name).Parse(root);
  } catch (const YAML::Exception& e) {
    // ParserException and friends: the mark is 0-based; `msg` is the bare message.
    std::string where(source_name);
    if (e.mark.line >= 0) StrAppend(&where, ":", e.mark.line + 1, ":", e.mark.column + 1);
    return absl::InvalidArgumentError(StrCat(where, ": invalid YAML: ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(StrCat(source_name, ": ", e.what()));
  }
}

absl::StatusOr<ClusterConfig> LoadClusterConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot open config file '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::NotFoundError(StrCat("cannot read config file '", path, "'"));
  CASCADE_ASSIGN_OR_RETURN(ClusterConfig config, ParseClusterConfig(text.str(), path));
  const std::filesystem::path model(config.model.path);
  if (model.is_relative()) {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    config.model.path = (dir / model).lexically_normal().string();
  }
  const std::filesystem::path keys(config.security.api_keys_file);
  if (!config.security.api_keys_file.empty() && keys.is_relative()) {
    config.security.api_keys_file = (std::filesystem::path(path).parent_path() / keys).lexically_normal().string();
  }
  const std::filesystem::path cluster_dir(config.security.cluster_dir);
  if (!config.security.cluster_dir.empty() && cluster_dir.is_relative()) {
    config.security.cluster_dir = (std::filesystem::path(path).parent_path() / cluster_dir).lexically_normal().string();
  }
  for (std::string* tls : {&config.server.tls_cert_file, &config.server.tls_key_file}) {
    if (!tls->empty() && std::filesystem::path(*tls).is_relative()) {
      *tls = (std::filesystem::path(path).parent_path() / *tls).lexically_normal().string();
    }
  }
  const std::filesystem::path draft(config.draft.model_path);
  if (!config.draft.model_path.empty() && draft.is_relative()) {
    config.draft.model_path = (std::filesystem::path(path).parent_path() / draft).lexically_normal().string();
  }
  return config;
}

}  // namespace cascade::coordinator
