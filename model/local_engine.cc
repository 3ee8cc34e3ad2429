#include "model/local_engine.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "core/clock.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "kernels/cpu_features.h"
#include "kernels/cuda_backend.h"
#include "model/format/gguf.h"
#include "model/format/tokenizer_files.h"

namespace cascade::model {
namespace {

kernels::CpuBackendOptions BackendOptions(const LocalEngineOptions& options) {
  return {.n_threads = options.n_threads, .bf16_prefill = options.cpu_bf16_prefill};
}

}  // namespace

std::string LocalEngine::CpuKernels() { return kernels::DescribeActiveCpuIsa(); }
std::string LocalEngine::CudaKernels() { return kernels::DescribeCudaKernels(); }

std::string LocalEngine::CpuPrefillActivations(const LocalEngineOptions& options) {
  return kernels::DescribeCpuPrefillActivations(BackendOptions(options));
}

absl::StatusOr<std::unique_ptr<LocalEngine>> LocalEngine::Create(const std::string& model_path,
                                                                 const LocalEngineOptions& options) {
  if (options.max_batched_tokens < 1) {
    return absl::InvalidArgumentError(StrCat("max_batched_tokens = ", options.max_batched_tokens, ": must be >= 1"));
  }
  std::unique_ptr<LocalEngine> e(new LocalEngine());
  CASCADE_ASSIGN_OR_RETURN(e->files_, OpenModelFiles(model_path));
  CASCADE_ASSIGN_OR_RETURN(e->tokenizer_, LoadTokenizer(e->files_));
  if (e->tokenizer_->n_vocab() > e->files_.config.n_vocab) {
    return absl::InvalidArgumentError(StrCat(model_path, ": tokenizer has ", e->tokenizer_->n_vocab(),
                                             " tokens but the model only ", e->files_.config.n_vocab));
  }
  e->backend_ = kernels::MakeCpuBackend(BackendOptions(options));
  StageOptions stage;
  stage.kv_window_tokens = options.kv_window_tokens;
  stage.kv_sink_tokens = options.kv_sink_tokens;
  CASCADE_ASSIGN_OR_RETURN(e->transformer_, Transformer::Load(e->files_, e->backend_.get(), stage));
  LogDefaultedKeys(e->files_);
  e->transformer_->Prefault(options.on_load_progress);

  const ModelConfig& c = e->files_.config;
  e->max_context_ = options.max_context > 0 ? options.max_context : std::max<int64_t>(c.n_ctx_train, 1);
  e->max_batched_tokens_ = options.max_batched_tokens;
  const int64_t bs = options.kv_block_size;
  const int64_t n_blocks = (e->max_context_ + bs - 1) / bs;
  CASCADE_ASSIGN_OR_RETURN(
      KvCache cache, KvCache::Create(e->transformer_->CacheOptions(n_blocks, bs, options.kv_dtype), e->backend_.get()));
  e->cache_ = std::make_unique<KvCache>(std::move(cache));
  // One sequence owns every block, in order.
  for (int64_t b = 0; b < n_blocks; ++b) e->block_table_.push_back(static_cast<int32_t>(b));
  return e;
}

int64_t LocalEngine::kv_bytes() const { return cache_->bytes(); }

absl::Status LocalEngine::Step(std::span<const int32_t> tokens, int64_t n_past, std::vector<float>& logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  positions_.resize(n);
  for (int64_t i = 0; i < n; ++i) positions_[i] = static_cast<int32_t>(n_past + i);
  const kernels::AttentionSeq seq{0, n, n_past, block_table_};
  const int64_t last_row = n - 1;
  ForwardBatch batch{tokens, positions_, {&seq, 1}, {&last_row, 1}};
  logits.resize(config().n_vocab);
  return transformer_->Forward(batch, *cache_, TensorView(logits.data(), DType::kF32, {1, config().n_vocab}));
}

absl::StatusOr<std::vector<float>> LocalEngine::PromptLogits(const std::vector<int32_t>& ids, int64_t first_row) {
  std::vector<float> all;
  CASCADE_RETURN_IF_ERROR(ForEachPromptLogits(ids, first_row, [&](int64_t, std::span<const float> logits) {
    all.insert(all.end(), logits.begin(), logits.end());
    return absl::OkStatus();
  }));
  return all;
}

absl::Status LocalEngine::ForEachPromptLogits(
    const std::vector<int32_t>& ids, int64_t first_row,
    const std::function<absl::Status(int64_t row, std::span<const float> logits)>& fn) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n == 0 || n > max_context_ || first_row < 0 || first_row >= n) {
    return absl::InvalidArgumentError(
        StrCat("prompt of ", n, " tokens (1 to ", max_context_, " allowed), logits from row ", first_row));
  }
  const int64_t V = config().n_vocab;
  std::vector<int64_t> rows;
  std::vector<float> logits;
  for (int64_t p = 0; p < n; p += max_batched_tokens_) {
    const int64_t len = std::min(max_batched_tokens_, n - p);
    positions_.resize(len);
    for (int64_t i = 0; i < len; ++i) positions_[i] = static_cast<int32_t>(p + i);
    // A piece before first_row still fills the KV cache; its last row's logits go unused.
    const int64_t row0 = std::clamp(first_row - p, int64_t{0}, len - 1);
    rows.clear();
    for (int64_t r = row0; r < len; ++r) rows.push_back(r);
    const kernels::AttentionSeq seq{0, len, p, block_table_};
    logits.resize(rows.size() * V);
    CASCADE_RETURN_IF_ERROR(
        transformer_->Forward({std::span<const int32_t>(ids).subspan(p, len), positions_, {&seq, 1}, rows}, *cache_,
                              TensorView(logits.data(), DType::kF32, {static_cast<int64_t>(rows.size()), V})));
    if (p + row0 >= first_row) CASCADE_RETURN_IF_ERROR(fn(p + row0, logits));
  }
  return absl::OkStatus();
}

absl::StatusOr<GenerateResult> LocalEngine::Generate(const GenerateRequest& req,
                                                     const std::function<void(std::string_view)>& on_text,
                                                     const std::function<void(std::string_view)>& on_reasoning) {
  CASCADE_RETURN_IF_ERROR(req.sampling.Validate());
  const int64_t n_prompt = static_cast<int64_t>(req.prompt_ids.size());
  if (n_prompt == 0) return absl::InvalidArgumentError("the prompt is empty");
  if (req.max_tokens < 1) return absl::InvalidArgumentError(StrCat("max_tokens = ", req.max_tokens, ": must be >= 1"));
  if (n_prompt >= max_context_) {
    return absl::InvalidArgumentError(StrCat("the prompt has ", n_prompt, " tokens; the context holds ", max_context_,
                                             " (leave room for at least one new token)"));
  }
  for (int32_t id : req.prompt_ids) {
    if (id < 0 || id >= config().n_vocab) {
      return absl::InvalidArgumentError(
          StrCat("prompt token id ", id, " is outside the vocabulary [0, ", config().n_vocab, ")"));
    }
  }
  const int64_t budget = std::min<int64_t>(req.max_tokens, max_context_ - n_prompt);

  GenerateResult res;
  sampling::Sampler sampler(req.sampling);
  text::OutputFilter output(*tokenizer_, req.stops, req.output_format);
  std::vector<int32_t> history = req.prompt_ids;
  std::vector<float> logits;
  const auto emit = [&](const std::string& text) {
    if (const std::string reasoning = output.TakeReasoning(); !reasoning.empty() && on_reasoning) {
      on_reasoning(reasoning);
    }
    if (!text.empty() && on_text) on_text(text);
  };

  auto t0 = std::chrono::steady_clock::now();
  CASCADE_RETURN_IF_ERROR(ForEachPromptLogits(req.prompt_ids, n_prompt - 1, [&](int64_t, std::span<const float> row) {
    logits.assign(row.begin(), row.end());
    return absl::OkStatus();
  }));
  res.prefill_s = SecondsSince(t0);
  t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < budget && !output.done(); ++i) {
    if (i > 0) {
      const int32_t last = res.token_ids.back();
      CASCADE_RETURN_IF_ERROR(Step({&last, 1}, n_prompt + i - 1, logits));
      ++res.n_decode_steps;
    }
    sampling::SampledToken tok = sampler.Sample(logits, history);
    res.token_ids.push_back(tok.id);
    history.push_back(tok.id);
    emit(output.Push(tok.id, i + 1 == budget));
    res.tokens.push_back(std::move(tok));
  }
  emit(output.Flush());
  res.text = output.text();
  res.reasoning = output.reasoning();
  res.finish_reason = output.reason();
  res.decode_s = SecondsSince(t0);
  return res;
}

}  // namespace cascade::model
