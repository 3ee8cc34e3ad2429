// libFuzzer target: any text given as the coordinator's YAML config must become a
// `ClusterConfig` or an InvalidArgument, never a crash, hang or escaped yaml-cpp
// exception. An accepted config must keep the promises config.h makes of it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "coordinator/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = cascade::coordinator::ParseClusterConfig(text, "fuzz.yaml");
  if (!config.ok()) {
    if (config.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (config->model.path.empty()) std::abort();
  if (config->parallel.pipeline < 1 || config->parallel.tensor < 1) std::abort();
  if (config->nodes.empty()) std::abort();
  for (const auto& node : config->nodes) {
    if (node.name.empty() || node.devices.empty()) std::abort();
  }
  if (static_cast<int64_t>(config->TotalDevices()) <
      static_cast<int64_t>(config->parallel.pipeline) * config->parallel.tensor) {
    std::abort();
  }
  if (config->server.listen_port < 0 || config->server.listen_port > 65535) std::abort();
  const int block = config->scheduler.kv_block_size;
  if (block < 1 || block > 1024 || (block & (block - 1)) != 0) std::abort();
  if (config->scheduler.max_num_seqs < 1 || config->scheduler.max_batched_tokens < 1) std::abort();
  if (!(config->scheduler.gpu_memory_fraction > 0 && config->scheduler.gpu_memory_fraction <= 1)) std::abort();
  if (config->draft.num_tokens < 1 || config->draft.num_tokens > 16) std::abort();
  return 0;
}
