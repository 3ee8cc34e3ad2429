// Single-process generation: one model, one backend, one sequence at a time. The engine
// behind `cascade run` and the reference that distributed runs are compared with.
// Prefill runs the whole prompt in one forward pass; decode runs one token per step
// over the paged KV cache.
// Single owner; not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/ops.h"
#include "model/format/model_files.h"
#include "model/transformer.h"
#include "sampling/sampler.h"
#include "text/output_filter.h"
#include "text/tokenizer.h"

namespace cascade::model {

struct LocalEngineOptions {
  int n_threads = 1;             // CPU threads, the caller's included.
  int64_t kv_block_size = 16;    // Positions per KV block.
  DType kv_dtype = DType::kF16;  // KV cache element type (f32, f16, q8_0).
  int64_t max_context = 0;       // Positions per sequence; 0 = the model's trained context.
  // The sink + window policy (StageOptions::kv_window_tokens; scheduler.kv_policy), as a
  // cluster would run it; window 0: exact attention.
  int64_t kv_window_tokens = 0;
  int64_t kv_sink_tokens = 0;
  // Prompt tokens per forward pass at most: a longer prompt is prefilled in pieces, as a
  // cluster's scheduler does by scheduler.max_batched_tokens (whose default this is). The
  // pass's workspace grows with its tokens (an 8B's gate and up rows alone are 2 x 14336
  // floats a token: 0.94 GB at 8192 tokens in one pass). REQUIRES >= 1.
  int64_t max_batched_tokens = 2048;
  // Prefills of FP8 weights round activations to bf16 where the CPU multiplies bf16 pairs
  // (kernels::CpuBackendOptions::bf16_prefill; scheduler.cpu_prefill_activations).
  bool cpu_bf16_prefill = false;
  // Called while the weights are faulted in, with the fraction done (optional).
  std::function<void(double)> on_load_progress;
};

struct GenerateRequest {
  std::vector<int32_t> prompt_ids;  // REQUIRES non-empty.
  sampling::SamplingParams sampling;
  int32_t max_tokens = 256;                                      // Generated tokens at most. REQUIRES >= 1.
  text::StopConditions stops;                                    // EOS handling, stop strings and stop ids.
  text::OutputFormat output_format = text::OutputFormat::kText;  // kHarmony: reasoning apart.
};

struct GenerateResult {
  std::vector<int32_t> token_ids;              // Generated ids (an ending EOS/stop id included).
  std::vector<sampling::SampledToken> tokens;  // Per generated id: logprob and top-n.
  std::string text;                            // Decoded output, without any stop string.
  std::string reasoning;                       // kHarmony: the analysis channel's text.
  text::FinishReason finish_reason = text::FinishReason::kLength;
  double prefill_s = 0;  // Prompt forward time.
  double decode_s = 0;   // Time of the remaining steps.
  int64_t n_decode_steps = 0;
};

class LocalEngine {
 public:
  // The CPU kernel level this machine computes with and the rule that chose it
  // (kernels::DescribeActiveCpuIsa), for `cascade info`.
  static std::string CpuKernels();
  // The CUDA kernel choices the environment makes, each with its source
  // (kernels::DescribeCudaKernels), for `cascade info`; with or without a GPU.
  static std::string CudaKernels();
  // What `options` make of the prefill activations on this CPU
  // (kernels::DescribeCpuPrefillActivations), for `cascade run --json`.
  static std::string CpuPrefillActivations(const LocalEngineOptions& options);

  // Opens the model and its tokenizer and faults the weights in.
  static absl::StatusOr<std::unique_ptr<LocalEngine>> Create(const std::string& model_path,
                                                             const LocalEngineOptions& options);

  // Bytes of the KV cache (allocated for max_context positions; pages become resident as
  // sequences write them).
  int64_t kv_bytes() const;
  const ModelConfig& config() const { return files_.config; }
  const text::Tokenizer& tokenizer() const { return *tokenizer_; }
  const ModelFiles& files() const { return files_; }
  int64_t max_context() const { return max_context_; }
  // The transformer (for its expert load counts on MoE models).
  const Transformer& transformer() const { return *transformer_; }

  // Generates for one request; `on_text` (optional) receives the text as it becomes
  // safe to show (complete UTF-8, not part of a possible stop string), `on_reasoning`
  // (optional) the reasoning of a kHarmony answer as it becomes known.
  // InvalidArgument for a bad request (empty or too long prompt, bad ids or params).
  absl::StatusOr<GenerateResult> Generate(const GenerateRequest& request,
                                          const std::function<void(std::string_view)>& on_text = {},
                                          const std::function<void(std::string_view)>& on_reasoning = {});

  // Logits [ids.size() - first_row, n_vocab] of rows [first_row, ids.size()) after one
  // prefill of `ids` from position 0: teacher forcing, for comparisons with reference
  // implementations. InvalidArgument unless 0 <= first_row < ids.size() <= max_context.
  absl::StatusOr<std::vector<float>> PromptLogits(const std::vector<int32_t>& ids, int64_t first_row);
  // The same rows a piece of the prefill at a time (max_batched_tokens positions):
  // fn(row, logits) with `logits` [rows, n_vocab] of rows [row, row + rows), in order, so
  // that a long prompt's logits need not be held at once. Stops at fn's first error.
  absl::Status ForEachPromptLogits(const std::vector<int32_t>& ids, int64_t first_row,
                                   const std::function<absl::Status(int64_t row, std::span<const float> logits)>& fn);

 private:
  LocalEngine() = default;
  absl::Status Step(std::span<const int32_t> tokens, int64_t n_past, std::vector<float>& logits);

  ModelFiles files_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<Transformer> transformer_;
  std::unique_ptr<KvCache> cache_;
  std::vector<int32_t> block_table_;
  std::vector<int32_t> positions_;
  int64_t max_context_ = 0;
  int64_t max_batched_tokens_ = 0;
};

}  // namespace cascade::model
