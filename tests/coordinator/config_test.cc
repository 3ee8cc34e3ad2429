// Tests for ParseClusterConfig / LoadClusterConfig (coordinator/config.cc): a full config
// parses to the expected values, defaults apply, configs/local-cpu.yaml loads with its
// model path resolved, and every validation error is InvalidArgument naming its key.
// To add an error case: append {yaml, key} to `kBadConfigs` (the YAML is a complete
// document; start from `kGood` with one change).

#include <string>

#include "coordinator/config.h"
#include "tests/test_support.h"

namespace cascade::coordinator {
namespace {

using ::cascade::testing::StatusMessage;
using ::cascade::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kGood[] = R"(
model: {path: /models/m.gguf}
parallel: {pipeline: 3, tensor: 1}
nodes:
  - {name: n0, host: 10.0.0.1, devices: [cpu, cpu], launch: local}
  - name: n1
    host: node1.example
    devices: [cuda:0, cuda:1]
    launch: external
server: {listen: 0.0.0.0:6000}
scheduler: {max_num_seqs: 8, max_batched_tokens: 512, kv_block_size: 32, kv_cache_mb: 128, kv_cache_dtype: q8_0,
            prefix_caching: false, device_sampling: false, cuda_graphs: true, host_kv_cache_mb: 2048,
            cpu_prefill_activations: bf16}
transport: {activations: ucx}
draft: {ngram: {n: 3}}
security: {cluster_dir: /etc/cascade/trust}
)";

TEST(ConfigTest, FullConfigParses) {
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(kGood, "good.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.path, "/models/m.gguf");
  EXPECT_EQ(c->parallel.pipeline, 3);
  EXPECT_EQ(c->parallel.tensor, 1);
  ASSERT_EQ(c->nodes.size(), 2u);
  EXPECT_EQ(c->nodes[0].name, "n0");
  EXPECT_EQ(c->nodes[0].host, "10.0.0.1");
  ASSERT_EQ(c->nodes[0].devices.size(), 2u);
  EXPECT_EQ(c->nodes[0].devices[0], (Device{DeviceKind::kCpu, 0}));
  EXPECT_EQ(c->nodes[0].launch, LaunchMode::kLocal);
  EXPECT_EQ(c->nodes[1].name, "n1");
  EXPECT_EQ(c->nodes[1].host, "node1.example");
  EXPECT_EQ(c->nodes[1].devices[1], (Device{DeviceKind::kCuda, 1}));
  EXPECT_EQ(c->nodes[1].launch, LaunchMode::kExternal);
  EXPECT_EQ(c->TotalDevices(), 4);
  EXPECT_EQ(c->server.listen, "0.0.0.0:6000");
  EXPECT_EQ(c->server.listen_host, "0.0.0.0");
  EXPECT_EQ(c->server.listen_port, 6000);
  EXPECT_EQ(c->server.cluster_listen, "0.0.0.0:6001");
  EXPECT_EQ(c->security.cluster_dir, "/etc/cascade/trust");
  EXPECT_EQ(c->scheduler.max_num_seqs, 8);
  EXPECT_EQ(c->scheduler.max_batched_tokens, 512);
  EXPECT_EQ(c->scheduler.kv_block_size, 32);
  EXPECT_EQ(c->scheduler.kv_cache_mb, 128);
  EXPECT_TRUE(c->scheduler.kv_cache_mb_given);
  EXPECT_EQ(c->scheduler.host_kv_cache_mb, 2048);
  EXPECT_EQ(c->scheduler.kv_cache_dtype, DType::kQ8_0);
  EXPECT_FALSE(c->scheduler.prefix_caching);
  EXPECT_FALSE(c->scheduler.device_sampling);
  EXPECT_TRUE(c->scheduler.cuda_graphs);
  EXPECT_TRUE(c->scheduler.cpu_bf16_prefill);
  EXPECT_EQ(c->scheduler.gpu_memory_fraction, 0.9);
  EXPECT_EQ(c->transport.activations, ActivationTransport::kUcx);
  EXPECT_EQ(c->draft.kind, DraftKind::kNgram);
  EXPECT_EQ(c->draft.ngram_n, 3);
  EXPECT_EQ(c->draft.node, "n0");  // The first node by default.
  EXPECT_EQ(c->draft.num_tokens, 4);
  EXPECT_EQ(c->source, "good.yaml");
}

TEST(ConfigTest, DefaultsApply) {
  absl::StatusOr<ClusterConfig> c =
      ParseClusterConfig("model: {path: m.gguf}\nnodes: [{name: a, host: localhost, devices: [cpu]}]\n", "min.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.path, "m.gguf");  // Kept as written without a file.
  EXPECT_EQ(c->parallel.pipeline, 1);
  EXPECT_EQ(c->parallel.tensor, 1);
  EXPECT_FALSE(c->parallel.expert);
  EXPECT_FALSE(c->parallel.expert_all_to_all);  // parallel.expert_comm: all_reduce.
  EXPECT_EQ(c->nodes[0].launch, LaunchMode::kLocal);
  EXPECT_EQ(c->server.listen, "127.0.0.1:50051");
  EXPECT_EQ(c->server.listen_port, 50051);
  EXPECT_EQ(c->scheduler.max_num_seqs, 64);
  EXPECT_EQ(c->scheduler.max_batched_tokens, 2048);
  EXPECT_EQ(c->scheduler.kv_block_size, 16);
  EXPECT_EQ(c->scheduler.kv_cache_mb, 512);
  EXPECT_FALSE(c->scheduler.kv_cache_mb_given);
  EXPECT_EQ(c->scheduler.host_kv_cache_mb, 0);  // No host tier.
  EXPECT_FALSE(c->scheduler.kv_sink_window);    // Exact attention.
  EXPECT_TRUE(c->scheduler.prefix_caching);
  EXPECT_TRUE(c->scheduler.device_sampling);
  EXPECT_FALSE(c->scheduler.cuda_graphs);
  EXPECT_FALSE(c->scheduler.cpu_bf16_prefill);  // Exact products.
  EXPECT_EQ(c->transport.activations, ActivationTransport::kUcx);
  EXPECT_EQ(c->draft.kind, DraftKind::kNone);
}

// scheduler.kv_policy: sink_window with its window, and the sinks given or defaulted by
// StreamingLLM's rule (the ready line and ModelInfo say which: KvPolicyDescription).
TEST(ConfigTest, SinkWindowPolicy) {
  auto c = ParseClusterConfig(
      "model: {path: m}\nscheduler: {kv_policy: sink_window, kv_window_tokens: 512}\n"
      "nodes: [{name: a, host: h, devices: [cpu]}]\n",
      "w.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->scheduler.kv_sink_window);
  EXPECT_EQ(c->scheduler.kv_window_tokens, 512);
  EXPECT_EQ(c->scheduler.kv_sink_tokens, 4);
  EXPECT_FALSE(c->scheduler.kv_sink_tokens_given);
  c = ParseClusterConfig(
      "model: {path: m}\nscheduler: {kv_policy: sink_window, kv_window_tokens: 512, kv_sink_tokens: 0}\n"
      "nodes: [{name: a, host: h, devices: [cpu]}]\n",
      "w.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->scheduler.kv_sink_tokens, 0);
  EXPECT_TRUE(c->scheduler.kv_sink_tokens_given);
}

TEST(ConfigTest, Ipv6Listen) {
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(
      "model: {path: m}\nnodes: [{name: a, host: h, devices: [cpu]}]\n"
      "server: {listen: '[::1]:7000'}\n",
      "v6.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server.listen_host, "::1");
  EXPECT_EQ(c->server.listen_port, 7000);

  // Port 0: any free port (tests).
  c = ParseClusterConfig(
      "model: {path: m}\nnodes: [{name: a, host: h, devices: [cpu]}]\n"
      "server: {listen: '127.0.0.1:0'}\n",
      "any.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server.listen_port, 0);
}

TEST(ConfigTest, HttpFront) {
  // Off unless set; the OpenAI model name defaults to the file's name without .gguf.
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(
      "model: {path: /m/SmolLM2.Q4_1.gguf}\nnodes: [{name: a, host: h, devices: [cpu]}]\n", "a.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server.http_listen, "");
  EXPECT_EQ(c->server.http_threads, 64);
  EXPECT_EQ(c->server.drain_timeout_s, 30);
  EXPECT_EQ(c->server.model_name, "SmolLM2.Q4_1");
  c = ParseClusterConfig(
      "model: {path: /m/llama-dir/}\nnodes: [{name: a, host: h, devices: [cpu]}]\n"
      "server: {http_listen: '127.0.0.1:8000', http_threads: 16}\n",
      "b.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server.http_host, "127.0.0.1");
  EXPECT_EQ(c->server.http_port, 8000);
  EXPECT_EQ(c->server.http_threads, 16);
  EXPECT_EQ(c->server.model_name, "llama-dir");
  c = ParseClusterConfig(
      "model: {path: m.gguf}\nnodes: [{name: a, host: h, devices: [cpu]}]\nserver: {model_name: my-model}\n", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server.model_name, "my-model");
}

TEST(ConfigTest, SecurityKeysFileIsRelativeToTheConfig) {
  TempDir dir;
  const std::string path = dir.WriteFile(
      "c.yaml",
      "model: {path: m.gguf}\nnodes: [{name: a, host: h, devices: [cpu]}]\nsecurity: {api_keys_file: keys}\n");
  absl::StatusOr<ClusterConfig> c = LoadClusterConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->security.api_keys_file, dir.path() + "/keys");
  EXPECT_FALSE(c->security.health_needs_key);
  EXPECT_FALSE(c->security.metrics_needs_key);
  EXPECT_EQ(c->server.recovery_timeout_s, 60);
  EXPECT_EQ(c->scheduler.max_queued, 4096);
}

TEST(ConfigTest, ControlPlaneListensApartByDefault) {
  const char* nodes = "model: {path: m.gguf}\nnodes: [{name: a, host: h, devices: [cpu]}]\n";
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(nodes, "a.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server.cluster_listen, "127.0.0.1:50052");  // The next port after server.listen's.
  EXPECT_FALSE(c->security.insecure);
  c = ParseClusterConfig(std::string(nodes) + "server: {listen: 127.0.0.1:0}\n", "b.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server.cluster_port, 0);  // Any free port beside an ephemeral API.
  c = ParseClusterConfig(std::string(nodes) +
                             "server: {listen: '[::1]:7000', cluster_listen: '10.0.0.1:7100'}\n"
                             "security: {insecure: true}\n",
                         "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server.cluster_host, "10.0.0.1");
  EXPECT_EQ(c->server.cluster_port, 7100);
  EXPECT_TRUE(c->security.insecure);
  EXPECT_EQ(HostPort("::1", 7000), "[::1]:7000");
  c = ParseClusterConfig(std::string(nodes) + "server: {listen: '127.0.0.1:7000', cluster_listen: '127.0.0.1:7000'}\n",
                         "d.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("server.cluster_listen"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("needs its own"));
}

TEST(ConfigTest, ExternalNodesNeedTheClusterDir) {
  const char* external = "model: {path: m.gguf}\nnodes: [{name: a, host: h, devices: [cpu], launch: external}]\n";
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(external, "a.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("security.cluster_dir"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("node 'a'"));
  EXPECT_TRUE(ParseClusterConfig(std::string(external) + "security: {insecure: true}\n", "b.yaml").ok());
  TempDir dir;
  const std::string path = dir.WriteFile("c.yaml", std::string(external) + "security: {cluster_dir: trust}\n");
  c = LoadClusterConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->security.cluster_dir, dir.path() + "/trust");  // Relative to the config file.
}

TEST(ConfigTest, PublicTlsFilesAreRelativeToTheConfig) {
  absl::StatusOr<ClusterConfig> c =
      ParseClusterConfig("model: {path: m.gguf}\nnodes: [{name: a, host: h, devices: [cpu]}]\n", "a.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server.tls_cert_file, "");  // Plaintext by default.
  EXPECT_EQ(c->server.tls_key_file, "");
  TempDir dir;
  const std::string path = dir.WriteFile("c.yaml",
                                         "model: {path: m.gguf}\nnodes: [{name: a, host: h, devices: [cpu]}]\n"
                                         "server: {tls_cert_file: tls/server.pem, tls_key_file: /etc/k.pem}\n");
  c = LoadClusterConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server.tls_cert_file, dir.path() + "/tls/server.pem");
  EXPECT_EQ(c->server.tls_key_file, "/etc/k.pem");  // Absolute: kept.
}

TEST(ConfigTest, SampleLocalGpuConfigLoads) {
  absl::StatusOr<ClusterConfig> c = LoadClusterConfig(::cascade::testing::SourceDir() + "/configs/local-gpu.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->parallel.tensor, 2);
  ASSERT_EQ(c->nodes.size(), 1u);
  EXPECT_EQ(c->nodes[0].devices, (std::vector<Device>{{DeviceKind::kCuda, 0}, {DeviceKind::kCuda, 1}}));
  EXPECT_EQ(c->transport.activations, ActivationTransport::kNccl);
  EXPECT_FALSE(c->scheduler.kv_cache_mb_given);  // The GPUs' free memory sizes the KV pool.
  EXPECT_EQ(c->scheduler.gpu_memory_fraction, 0.9);
  EXPECT_EQ(c->scheduler.kv_cache_dtype, DType::kF16);  // The default.
}

TEST(ConfigTest, SampleLocalCpuConfigLoads) {
  const std::string path = ::cascade::testing::SourceDir() + "/configs/local-cpu.yaml";
  absl::StatusOr<ClusterConfig> c = LoadClusterConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.path, ::cascade::testing::SourceDir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  EXPECT_EQ(c->parallel.pipeline, 2);
  ASSERT_EQ(c->nodes.size(), 1u);
  EXPECT_EQ(c->nodes[0].name, "n0");
  EXPECT_EQ(c->nodes[0].host, "127.0.0.1");
  EXPECT_EQ(c->nodes[0].devices.size(), 2u);
  EXPECT_EQ(c->nodes[0].launch, LaunchMode::kLocal);
  EXPECT_EQ(c->server.listen, "127.0.0.1:50051");
  EXPECT_EQ(c->scheduler.kv_cache_mb, 256);
  EXPECT_EQ(c->source, path);
}

TEST(ConfigTest, SampleDisaggregatedConfigLoads) {
  absl::StatusOr<ClusterConfig> c =
      LoadClusterConfig(::cascade::testing::SourceDir() + "/configs/disaggregated-cpu.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->parallel.disaggregated);
  const std::vector<ReplicaShape> replicas = c->parallel.Replicas();
  ASSERT_EQ(replicas.size(), 2u);
  EXPECT_EQ(replicas[0].role, ReplicaRole::kPrefill);
  EXPECT_EQ(replicas[0].tensor, 1);
  EXPECT_EQ(replicas[1].role, ReplicaRole::kDecode);
  EXPECT_EQ(replicas[1].tensor, 2);
  EXPECT_EQ(c->parallel.local_prefill_tokens, 128);
  EXPECT_EQ(c->nodes[0].devices.size(), 3u);
  EXPECT_EQ(c->draft.kind, DraftKind::kNgram);
}

TEST(ConfigTest, RelativeModelPathResolvesAgainstConfigDir) {
  TempDir dir;
  const std::string path =
      dir.WriteFile("c.yaml", "model: {path: sub/../w.gguf}\nnodes: [{name: a, host: h, devices: [cpu]}]\n");
  absl::StatusOr<ClusterConfig> c = LoadClusterConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.path, dir.path() + "/w.gguf");

  const std::string abs =
      dir.WriteFile("d.yaml", "model: {path: /abs/w.gguf}\nnodes: [{name: a, host: h, devices: [cpu]}]\n");
  c = LoadClusterConfig(abs);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.path, "/abs/w.gguf");
}

TEST(ConfigTest, MissingFileIsNotFound) {
  absl::StatusOr<ClusterConfig> c = LoadClusterConfig("/nonexistent/cluster.yaml");
  EXPECT_STATUS_CODE(c, kNotFound);
  EXPECT_THAT(StatusMessage(c.status()), HasSubstr("/nonexistent/cluster.yaml"));
}

TEST(ConfigTest, NcclActivationsOnCudaDevices) {
  auto c = ParseClusterConfig(
      "model: {path: m}\ntransport: {activations: nccl}\nparallel: {pipeline: 2}\n"
      "nodes: [{name: a, host: h, devices: ['cuda:0']}, {name: b, host: h2, devices: ['cuda:0']}]\n",
      "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->transport.activations, ActivationTransport::kNccl);
  EXPECT_EQ(ActivationTransportName(c->transport.activations), "nccl");
}

TEST(ConfigTest, PpHandoff) {
  const std::string nodes = "nodes: [{name: a, host: h, devices: [cpu, cpu, cpu, cpu]}]\n";
  auto c = ParseClusterConfig("model: {path: m}\n" + nodes, "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->transport.pp_handoff, PpHandoff::kSplit);  // The default.
  c = ParseClusterConfig("model: {path: m}\ntransport: {pp_handoff: full}\n" + nodes, "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->transport.pp_handoff, PpHandoff::kFull);
  EXPECT_EQ(c->transport.activations, ActivationTransport::kUcx);
  EXPECT_EQ(PpHandoffName(c->transport.pp_handoff), "full");
  c = ParseClusterConfig("model: {path: m}\ntransport: {activations: ucx, pp_handoff: split}\n" + nodes, "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->transport.pp_handoff, PpHandoff::kSplit);
  EXPECT_EQ(PpHandoffName(c->transport.pp_handoff), "split");
}

TEST(ConfigTest, ExpertComm) {
  const auto parse = [](const std::string& parallel) {
    return ParseClusterConfig(
        "model: {path: m}\nparallel: " + parallel +
            "\nnodes: [{name: a, host: h, devices: [cpu]}, {name: b, host: h2, devices: [cpu]}]\n",
        "t.yaml");
  };
  auto c = parse("{tensor: 2, expert: true, expert_comm: all_to_all}");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->parallel.expert_all_to_all);
  c = parse("{tensor: 2, expert: true, redundant_experts: 1, expert_comm: all_to_all}");
  ASSERT_TRUE(c.ok()) << c.status();  // Redundant experts work in either form.
  c = parse("{tensor: 2, expert: true, expert_comm: all_reduce}");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->parallel.expert_all_to_all);
  for (const auto& [parallel, error] : std::vector<std::pair<std::string, std::string>>{
           {"{tensor: 2, expert: true, expert_comm: alltoall}", "parallel.expert_comm: 'alltoall' is neither"},
           {"{tensor: 2, expert_comm: all_to_all}", "parallel.expert_comm: all_to_all needs expert parallelism"},
           {"{tensor: 1, expert: true, expert_comm: all_to_all}", "parallel.expert_comm: all_to_all needs expert"}}) {
    c = parse(parallel);
    ASSERT_FALSE(c.ok()) << parallel;
    EXPECT_NE(std::string(c.status().message()).find(error), std::string::npos) << c.status();
  }
}

TEST(ConfigTest, DataParallelReplicas) {
  auto c = ParseClusterConfig("model: {path: m}\nnodes: [{name: a, host: h, devices: [cpu]}]\n", "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->parallel.data, 1);  // The default: one pipeline.
  c = ParseClusterConfig(
      "model: {path: m}\nparallel: {data: 2, pipeline: 2}\ndraft: {ngram: {n: 3}}\n"
      "nodes: [{name: a, host: h, devices: [cpu, cpu]}, {name: b, host: h2, devices: [cpu, cpu]}]\n",
      "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();  // Prompt lookup needs no drafter worker.
  EXPECT_EQ(c->parallel.data, 2);
  EXPECT_EQ(c->parallel.pipeline, 2);
  EXPECT_FALSE(c->parallel.route_by_prefix);  // The default: by load alone.
  c = ParseClusterConfig(
      "model: {path: m}\nparallel: {data: 2, route_by_prefix: true}\nnodes: [{name: a, host: h, devices: [cpu, "
      "cpu]}]\n",
      "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->parallel.route_by_prefix);
}

TEST(ConfigTest, ParseDevice) {
  EXPECT_EQ(*ParseDevice("cpu"), (Device{DeviceKind::kCpu, 0}));
  EXPECT_EQ(*ParseDevice("cuda:0"), (Device{DeviceKind::kCuda, 0}));
  EXPECT_EQ(*ParseDevice("cuda:12"), (Device{DeviceKind::kCuda, 12}));
  for (const char* bad : {"gpu7", "cuda", "cuda:", "cuda:-1", "cuda:x", "CPU", "cuda:1 ", ""}) {
    EXPECT_STATUS_CODE(ParseDevice(bad), kInvalidArgument);
  }
}

struct BadConfig {
  const char* yaml;
  const char* key;  // Must appear in the message.
};

const BadConfig kBadConfigs[] = {
    // Document shape.
    {"- a\n- b\n", "top level"},
    {"model: {path: m}\nnodez: []\n", "nodez: unknown key"},
    {"model: {path: m}\nnodes: [{name: a, host: h, devices: [cpu]}]\nnodes: []\n", "nodes: duplicate key"},
    {"model: {path: [unclosed\n", "invalid YAML"},
    // model
    {"nodes: [{name: a, host: h, devices: [cpu]}]\n", "model.path: required"},
    {"model: {}\nnodes: [{name: a, host: h, devices: [cpu]}]\n", "model.path: required"},
    {"model: {path: ''}\nnodes: [{name: a, host: h, devices: [cpu]}]\n", "model.path: must not"},
    {"model: {path: [a]}\nnodes: [{name: a, host: h, devices: [cpu]}]\n", "model.path: expected"},
    {"model: {path: m, pth: x}\nnodes: [{name: a, host: h, devices: [cpu]}]\n", "model.pth"},
    {"model: m\nnodes: [{name: a, host: h, devices: [cpu]}]\n", "model: expected a mapping"},
    // parallel
    {"model: {path: m}\nparallel: {pipeline: 0}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "parallel.pipeline: must be"},
    {"model: {path: m}\nparallel: {pipeline: two}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "parallel.pipeline: expected an integer"},
    {"model: {path: m}\nparallel: {pipeline: 1.5}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "parallel.pipeline: expected an integer"},
    {"model: {path: m}\nparallel: {tensor: 0}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "parallel.tensor: must be"},
    {"model: {path: m}\nparallel: {expert: 2}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "parallel.expert: expected true or false"},
    {"model: {path: m}\nparallel: {pipelines: 2}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "parallel.pipelines: unknown key"},
    {"model: {path: m}\nparallel: {pipeline: 3}\nnodes: [{name: a, host: h, devices: [cpu, cpu]}]\n",
     "parallel.pipeline: pipeline 3 x tensor 1 needs 3 devices, but nodes list 2"},
    {"model: {path: m}\nparallel: {data: 2, pipeline: 2}\nnodes: [{name: a, host: h, devices: [cpu, cpu, cpu]}]\n",
     "parallel.pipeline: data 2 x pipeline 2 x tensor 1 needs 4 devices, but nodes list 3"},
    {"model: {path: m}\nparallel: {data: 0}\nnodes: [{name: a, host: h, devices: [cpu]}]\n", "parallel.data:"},
    {"model: {path: m}\nparallel: {disaggregation: {prefill: {}}}\nnodes: [{name: a, host: h, devices: [cpu, cpu]}]\n",
     "parallel.disaggregation.decode: required key is missing"},
    {"model: {path: m}\nparallel: {disaggregation: {prefill: {tp: 2}, decode: {}}}\n"
     "nodes: [{name: a, host: h, devices: [cpu, cpu]}]\n",
     "parallel.disaggregation.prefill.tp: unknown key"},
    {"model: {path: m}\nparallel: {data: 2, disaggregation: {prefill: {}, decode: {}}}\n"
     "nodes: [{name: a, host: h, devices: [cpu, cpu]}]\n",
     "parallel.data: parallel.disaggregation sets each role's"},
    {"model: {path: m}\nparallel: {disaggregation: {prefill: {replicas: 0}, decode: {}}}\n"
     "nodes: [{name: a, host: h, devices: [cpu, cpu]}]\n",
     "parallel.disaggregation.prefill.replicas: must be >= 1"},
    {"model: {path: m}\nparallel: {disaggregation: {prefill: {}, decode: {}, local_prefill_tokens: -1}}\n"
     "nodes: [{name: a, host: h, devices: [cpu, cpu]}]\n",
     "parallel.disaggregation.local_prefill_tokens: must be >= 0"},
    {"model: {path: m}\nparallel: {disaggregation: {prefill: {}, decode: {}}}\n"
     "nodes: [{name: a, host: h, devices: [cpu, cpu]}]\ndraft: {self: {layers: 1}}\n",
     "parallel.disaggregation: a drafter worker"},
    {"model: {path: m}\nparallel: {data: 2}\ndraft: {self: {layers: 1}}\nnodes: [{name: a, host: h, devices: [cpu, "
     "cpu]}]\n",
     "parallel.data: replicas with a drafter worker"},
    // nodes
    {"model: {path: m}\n", "nodes: required"},
    {"model: {path: m}\nnodes: []\n", "nodes: expected a non-empty list"},
    {"model: {path: m}\nnodes: {name: a}\n", "nodes: expected a non-empty list"},
    {"model: {path: m}\nnodes: [cpu]\n", "nodes[0]: expected a mapping"},
    {"model: {path: m}\nnodes: [{host: h, devices: [cpu]}]\n", "nodes[0].name: required"},
    {"model: {path: m}\nnodes: [{name: a, devices: [cpu]}]\n", "nodes[0].host: required"},
    {"model: {path: m}\nnodes: [{name: a, host: h}]\n", "nodes[0].devices: required"},
    {"model: {path: m}\nnodes: [{name: a, host: h, devices: []}]\n", "nodes[0].devices: expected"},
    {"model: {path: m}\nnodes: [{name: a, host: h, devices: cpu}]\n", "nodes[0].devices: expected"},
    {"model: {path: m}\nnodes:\n  - {name: a, host: h, devices: [cpu]}\n"
     "  - {name: b, host: h, devices: [gpu7]}\n",
     "nodes[1].devices[0]: unknown device 'gpu7' (cpu or cuda:N)"},
    {"model: {path: m}\nnodes: [{name: a, host: h, devices: [cpu, [x]]}]\n", "nodes[0].devices[1]: expected a string"},
    {"model: {path: m}\nnodes: [{name: a, host: h, devices: [cuda:0, cuda:0]}]\n",
     "nodes[0].devices[1]: duplicate device 'cuda:0'"},
    {"model: {path: m}\nnodes:\n  - {name: a, host: h, devices: [cpu]}\n"
     "  - {name: a, host: h2, devices: [cpu]}\n",
     "nodes[1].name: duplicate node name 'a'"},
    {"model: {path: m}\nnodes: [{name: a, host: h, devices: [cpu], launch: ssh}]\n",
     "nodes[0].launch: unknown launch mode 'ssh' (local or external)"},
    {"model: {path: m}\nnodes: [{name: a, host: h, devices: [cpu], lanch: local}]\n", "nodes[0].lanch: unknown key"},
    // server
    {"model: {path: m}\nserver: {listen: localhost}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "server.listen: expected HOST:PORT"},
    {"model: {path: m}\nserver: {listen: 'h:x'}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "server.listen: expected HOST:PORT with a port"},
    {"model: {path: m}\nserver: {listen: 'h:-1'}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "server.listen: expected HOST:PORT with a port"},
    {"model: {path: m}\nserver: {listen: 'h:70000'}\nnodes: [{name: a, host: h, devices: [cpu]}]\n", "server.listen"},
    {"model: {path: m}\nserver: {listen: ':80'}\nnodes: [{name: a, host: h, devices: [cpu]}]\n", "server.listen"},
    {"model: {path: m}\nserver: {listen: '::1:80'}\nnodes: [{name: a, host: h, devices: [cpu]}]\n", "server.listen"},
    {"model: {path: m}\nserver: {port: 80}\nnodes: [{name: a, host: h, devices: [cpu]}]\n", "server.port: unknown key"},
    {"model: {path: m}\nserver: {http_listen: 8000}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "server.http_listen: expected HOST:PORT"},
    {"model: {path: m}\nserver: {http_listen: 'h:99999'}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "server.http_listen: expected HOST:PORT with a port"},
    {"model: {path: m}\nserver: {http_threads: 0}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "server.http_threads: must be >= 1"},
    {"model: {path: m}\nserver: {drain_timeout_s: 4000}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "server.drain_timeout_s: must be <= 3600"},
    {"model: {path: m}\nserver: {recovery_timeout_s: 0}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "server.recovery_timeout_s: must be >= 1"},
    {"model: {path: m}\nscheduler: {max_queued: 0}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.max_queued: must be >= 1"},
    {"model: {path: m}\nsecurity: {api_keys: [a]}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "security.api_keys: unknown key"},
    {"model: {path: m}\nsecurity: {metrics_needs_key: yes please}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "security.metrics_needs_key: expected true or false"},
    {"model: {path: m}\nserver: {model_name: ''}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "server.model_name: must not be empty"},
    // scheduler
    {"model: {path: m}\nscheduler: {max_num_seqs: 0}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.max_num_seqs: must be >= 1"},
    {"model: {path: m}\nscheduler: {max_batched_tokens: -5}\n"
     "nodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.max_batched_tokens: must be >= 1"},
    {"model: {path: m}\nscheduler: {kv_block_size: 24}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.kv_block_size: must be a positive power of two"},
    {"model: {path: m}\nscheduler: {kv_block_size: 0}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.kv_block_size: must be a positive power of two"},
    {"model: {path: m}\nscheduler: {kv_cache_mb: 0}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.kv_cache_mb: must be"},
    {"model: {path: m}\nscheduler: {kv_cache_mb: lots}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.kv_cache_mb: expected an integer"},
    {"model: {path: m}\nscheduler: {host_kv_cache_mb: -1}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.host_kv_cache_mb: must be >= 0"},
    // The sink + window policy: named, its window required, its keys only with it.
    {"model: {path: m}\nscheduler: {kv_policy: streaming}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.kv_policy: unknown policy 'streaming' (full or sink_window)"},
    {"model: {path: m}\nscheduler: {cpu_prefill_activations: fp16}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.cpu_prefill_activations: must be f32 or bf16, got 'fp16'"},
    {"model: {path: m}\nscheduler: {kv_policy: sink_window}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.kv_window_tokens: required with scheduler.kv_policy: sink_window"},
    {"model: {path: m}\nscheduler: {kv_window_tokens: 64}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.kv_window_tokens: only with scheduler.kv_policy: sink_window"},
    {"model: {path: m}\nscheduler: {kv_policy: full, kv_sink_tokens: 4}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.kv_sink_tokens: only with scheduler.kv_policy: sink_window"},
    {"model: {path: m}\nscheduler: {kv_policy: sink_window, kv_window_tokens: 0}\n"
     "nodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.kv_window_tokens: must be >= 1"},
    {"model: {path: m}\nscheduler: {kv_policy: sink_window, kv_window_tokens: 64}\ndraft: {self: {layers: 2}}\n"
     "nodes: [{name: a, host: h, devices: [cpu, cpu]}]\n",
     "scheduler.kv_policy: sink_window with disaggregation or a drafter worker"},
    {"model: {path: m}\nscheduler: {max_num_seq: 8}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.max_num_seq: unknown key"},
    {"model: {path: m}\nscheduler: {gpu_memory_fraction: 0}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.gpu_memory_fraction: must be a number in (0, 1], got '0'"},
    {"model: {path: m}\nscheduler: {gpu_memory_fraction: 1.5}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.gpu_memory_fraction: must be a number in (0, 1], got '1.5'"},
    {"model: {path: m}\nscheduler: {gpu_memory_fraction: most}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.gpu_memory_fraction: must be a number in (0, 1], got 'most'"},
    {"model: {path: m}\nscheduler: {kv_cache_dtype: q4_0}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.kv_cache_dtype: must be one of f32, f16, q8_0, fp8_e4m3, got 'q4_0'"},
    {"model: {path: m}\nscheduler: {prefix_caching: yes}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.prefix_caching: expected true or false"},
    {"model: {path: m}\nscheduler: {max_num_seqs: 99999999999}\n"
     "nodes: [{name: a, host: h, devices: [cpu]}]\n",
     "scheduler.max_num_seqs: must be <= 2147483647"},
    // server TLS: both or neither, and not empty.
    {"model: {path: m}\nnodes: [{name: a, host: h, devices: [cpu]}]\nserver: {tls_cert_file: c.pem}\n",
     "server.tls_key_file: required with server.tls_cert_file (both or neither)"},
    {"model: {path: m}\nnodes: [{name: a, host: h, devices: [cpu]}]\nserver: {tls_key_file: k.pem}\n",
     "server.tls_cert_file: required with server.tls_key_file (both or neither)"},
    {"model: {path: m}\nnodes: [{name: a, host: h, devices: [cpu]}]\nserver: {tls_cert_file: '', tls_key_file: k}\n",
     "server.tls_cert_file: must not be empty"},
    {"model: {path: m}\nnodes: [{name: a, host: h, devices: [cpu]}]\nserver: {tls_cert_file: c, tls_key_file: [k]}\n",
     "server.tls_key_file: expected a string"},
    // transport
    {"model: {path: m}\ntransport: {activations: tcp}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "transport.activations: unknown transport 'tcp'"},
    {"model: {path: m}\ntransport: {activations: nccl}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "transport.activations: nccl moves GPU memory, but nodes[0].devices[0] is cpu"},
    {"model: {path: m}\ntransport: {weights: ucx}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "transport.weights: unknown key"},
    {"model: {path: m}\ntransport: {pp_handoff: gather}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "transport.pp_handoff: unknown hand-off 'gather' (split or full)"},
    {"model: {path: m}\ntransport: {pp_handoff: [full]}\nnodes: [{name: a, host: h, devices: [cpu]}]\n",
     "transport.pp_handoff: expected a string"},
};

TEST(ConfigTest, EveryErrorNamesItsKey) {
  for (const BadConfig& bad : kBadConfigs) {
    SCOPED_TRACE(bad.yaml);
    absl::StatusOr<ClusterConfig> c = ParseClusterConfig(bad.yaml, "bad.yaml");
    EXPECT_THAT(c, testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(bad.key)))
        << "expected an error about " << bad.key;
    EXPECT_THAT(StatusMessage(c.status()), HasSubstr("bad.yaml"));
  }
}

TEST(ConfigTest, ErrorsCarryTheLine) {
  absl::StatusOr<ClusterConfig> c =
      ParseClusterConfig("model: {path: m}\nnodes:\n  - name: a\n    host: h\n    devices: [cpu, tpu]\n", "x.yaml");
  EXPECT_THAT(c, testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                   "x.yaml:5: nodes[0].devices[1]: unknown device 'tpu' (cpu or cuda:N)"));
}

TEST(ConfigTest, NullSectionsMeanDefaults) {
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(
      "model: {path: m}\nscheduler:\nparallel:\ndraft:\n"
      "nodes: [{name: a, host: h, devices: [cpu]}]\n",
      "null.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->scheduler.max_num_seqs, 64);
  EXPECT_EQ(c->draft.kind, DraftKind::kNone);
}

TEST(ConfigTest, DraftForms) {
  const std::string nodes = "nodes: [{name: a, host: h, devices: [cpu]}, {name: b, host: h2, devices: [cpu]}]\n";
  auto c = ParseClusterConfig(
      "model: {path: m}\n" + nodes + "draft: {self: {layers: 4}, num_tokens: 6, adaptive: false, max_batch: 0}\n",
      "self.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->draft.kind, DraftKind::kSelf);
  EXPECT_EQ(c->draft.self_layers, 4);
  EXPECT_EQ(c->draft.num_tokens, 6);
  EXPECT_FALSE(c->draft.adaptive);
  EXPECT_EQ(c->draft.max_batch, 0);
  c = ParseClusterConfig("model: {path: m}\n" + nodes + "draft: {model: d.gguf, node: b, devices: [cpu], tensor: 1}\n",
                         "model.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->draft.kind, DraftKind::kModel);
  EXPECT_EQ(c->draft.model_path, "d.gguf");
  EXPECT_EQ(c->draft.node, "b");
}

TEST(ConfigTest, DraftErrorsNameTheKey) {
  const std::string head = "model: {path: m}\nnodes: [{name: a, host: h, devices: [cpu]}]\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"draft: {ngram: {n: 3}, self: {layers: 2}}", "draft: needs exactly one drafter"},
      {"draft: {num_tokens: 4}", "draft: needs exactly one drafter"},
      {"draft: {ngram: {n: 0}}", "draft.ngram.n: must be >= 1"},
      {"draft: {self: {}}", "draft.self.layers: required key is missing"},
      {"draft: {model: d, node: zz}", "draft.node: no node is named 'zz'"},
      {"draft: {model: d, devices: [cpu, cpu]}", "draft.devices: expected a list of one device"},
      {"draft: {model: d, tensor: 2}", "draft.tensor: must be <= 1"},
      {"draft: {model: d, num_tokens: 17}", "draft.num_tokens: must be <= 16"},
      {"draft: {model: d, adaptive: maybe}", "draft.adaptive: expected true or false"},
      {"draft: {model: d, speed: 2}", "draft.speed: unknown key"},
  };
  for (const auto& [yaml, want] : cases) {
    auto c = ParseClusterConfig(head + yaml + "\n", "d.yaml");
    EXPECT_THAT(c, testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(want))) << yaml;
  }
}

TEST(ConfigTest, EmptyDocumentIsInvalid) {
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig("", "empty.yaml");
  EXPECT_STATUS_CODE(c, kInvalidArgument);
  EXPECT_THAT(StatusMessage(c.status()), HasSubstr("empty.yaml"));
}

}  // namespace
}  // namespace cascade::coordinator
