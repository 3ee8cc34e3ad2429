// `cascade info --model PATH [--json]`: the model's config, tensor counts by type, sizes, the
// CPU kernel level `cascade run` computes with here, and the CUDA kernel choices the
// environment makes (each with its source).
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "client/cli/commands.h"
#include "core/args.h"
#include "core/str_cat.h"
#include "model/format/gguf.h"
#include "model/format/model_files.h"
#include "model/format/model_size.h"
#include "model/format/tokenizer_files.h"
#include "model/local_engine.h"
#include "text/chat_format.h"
#include "text/tool_calls.h"

namespace cascade::cli {
namespace {

nlohmann::json ConfigJson(const model::ModelConfig& c) {
  nlohmann::json j = {
      {"arch", c.arch},
      {"name", c.name},
      {"n_layers", c.n_layers},
      {"n_embd", c.n_embd},
      {"n_heads", c.n_heads},
      {"n_kv_heads", c.n_kv_heads},
      {"head_dim", c.head_dim},
      {"n_ff", c.n_ff},
      {"n_vocab", c.n_vocab},
      {"n_ctx_train", c.n_ctx_train},
      {"rope_theta", c.rope_theta},
      {"rope_layout", c.rope_layout == model::RopeLayout::kAdjacentPairs ? "adjacent_pairs" : "rotate_half"},
      {"rope_scaling", std::string(model::RopeScalingName(c.rope_scaling))},
      {"rope_scaling_factor", c.rope_scaling_factor},
      {"norm_eps", c.norm_eps},
      {"tied_embeddings", c.tied_embeddings},
      {"qkv_bias", c.qkv_bias},
      {"defaulted", nlohmann::json::array()}};
  if (c.rope_scaling != model::RopeScaling::kNone) {
    j["rope_original_ctx"] = c.rope_original_ctx;
    j["rope_attention_factor"] = c.rope_attention_factor;
  }
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  if (!c.hf_dtype.empty()) j["dtype"] = c.hf_dtype;
  for (const model::DefaultedKey& d : c.defaulted) {
    j["defaulted"].push_back({{"key", d.key}, {"value", d.value}, {"rule", d.rule}});
  }
  if (c.is_moe()) {
    j["moe"] = {{"n_experts", c.n_experts},           {"n_experts_used", c.n_experts_used},
                {"n_ff_expert", c.n_ff_expert},       {"n_ff_shared_expert", c.n_ff_shared_expert},
                {"norm_topk_prob", c.norm_topk_prob}, {"moe_layers", c.n_moe_layers()}};
  }
  return j;
}

}  // namespace

int InfoCommand(int argc, char** argv) {
  Args args("cascade info", "--model PATH [--json]",
            {{"model", "PATH", "a GGUF file or Hugging Face directory (required)"},
             {"json", "", "print the config, tensor counts and sizes as JSON"}});
  if (auto s = args.Parse(argc, argv, 2); !s.ok()) return Fail("info", s);
  if (args.help_requested()) {
    std::fputs(args.Usage().c_str(), stdout);
    return 0;
  }
  auto path = args.Require("model");
  if (!path.ok()) return Fail("info", path.status());
  auto files = model::OpenModelFiles(*path);
  if (!files.ok()) return Fail("info", files.status());

  std::map<std::string, std::pair<int64_t, uint64_t>> by_type;  // dtype -> (count, bytes)
  uint64_t total_bytes = 0;
  int64_t total_params = 0;
  for (const model::TensorInfo& t : files->weights->tensors()) {
    auto& slot = by_type[std::string(DTypeName(t.dtype))];
    ++slot.first;
    slot.second += t.n_bytes;
    total_bytes += t.n_bytes;
    total_params += t.NumElements();
  }
  // How a chat is rendered for this model (text/chat_format.h): its own template, or why not.
  std::string chat_format = "none (no tokenizer)", tool_calls = "none (no tokenizer)";
  if (absl::StatusOr<std::unique_ptr<text::Tokenizer>> tok = model::LoadTokenizer(*files); tok.ok()) {
    absl::StatusOr<text::ChatFormat> format = text::ResolveChatFormat("", (*tok)->chat_template());
    chat_format = format.ok() ? format->Describe() : StrCat("none (", format.status().message(), ")");
    // The syntax the server reads calls in when server.tool_call_format is auto.
    tool_calls = StrCat(text::ToolCallFormatName(text::DetectToolCallFormat((*tok)->chat_template())),
                        " (from the chat template)");
  }
  const int64_t step_bytes = model::MeasureModel(*files).DecodeStepBytes(files->config);
  if (args.Has("json")) {
    nlohmann::json j;
    j["chat_format"] = chat_format;
    j["tool_calls"] = tool_calls;
    j["cpu_kernels"] = model::LocalEngine::CpuKernels();
    j["cuda_kernels"] = model::LocalEngine::CudaKernels();
    j["path"] = *path;
    j["format"] = std::string(model::ModelFormatName(files->format));
    j["config"] = ConfigJson(files->config);
    j["n_tensors"] = files->weights->tensors().size();
    j["n_params"] = total_params;
    j["tensor_bytes"] = total_bytes;
    j["decode_step_bytes"] = step_bytes;
    for (const auto& [type, cb] : by_type) j["tensors_by_type"][type] = {{"count", cb.first}, {"bytes", cb.second}};
    if (files->gguf != nullptr) j["gguf_version"] = files->gguf->version();
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model           %s (%s)\n", path->c_str(), std::string(model::ModelFormatName(files->format)).c_str());
  std::fputs(files->config.ToString().c_str(), stdout);
  std::printf("chat format     %s\n", chat_format.c_str());
  std::printf("tool calls      %s\n", tool_calls.c_str());
  std::printf("cpu kernels     %s\n", model::LocalEngine::CpuKernels().c_str());
  std::printf("cuda kernels    %s\n", model::LocalEngine::CudaKernels().c_str());
  std::printf("tensors         %zu (%.2f M parameters, %.2f MiB)\n", files->weights->tensors().size(),
              total_params / 1e6, total_bytes / 1048576.0);
  std::printf("decode reads    %.2f MiB of weights a token (batch 1%s)\n", step_bytes / 1048576.0,
              files->config.is_moe() ? ", the routed experts' share" : "");
  for (const auto& [type, cb] : by_type) {
    std::printf("  %-6s        %4lld tensors  %10.2f MiB\n", type.c_str(), static_cast<long long>(cb.first),
                cb.second / 1048576.0);
  }
  return 0;
}

}  // namespace cascade::cli
