#include "worker/stage_executor.h"

#include <algorithm>
#include <chrono>

#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::worker {
namespace {

model::SamplingParams FromProto(const v1::StepSampling& s) {
  model::SamplingParams p;
  p.temperature = s.temperature();
  p.top_k = s.top_k();
  p.top_p = s.top_p();
  p.min_p = s.min_p();
  p.repetition_penalty = s.repetition_penalty();
  p.presence_penalty = s.presence_penalty();
  p.frequency_penalty = s.frequency_penalty();
  p.seed = s.seed();
  p.n_logprobs = s.logprobs();
  return p;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StageExecutor>> StageExecutor::Create(
    const StageExecutorOptions& options, comm::Communicator* pp_comm, comm::Communicator* tp_comm,
    const std::function<void(double)>& progress) {
  std::unique_ptr<StageExecutor> e(new StageExecutor());
  e->options_ = options;
  e->comm_ = pp_comm;
  e->tp_comm_ = tp_comm;
  if (options.n_stages > 1 && pp_comm == nullptr) {
    return absl::InvalidArgumentError("a pipeline of several stages needs a communicator");
  }
  if (options.tp_size > 1 && tp_comm == nullptr) {
    return absl::InvalidArgumentError("a tensor-parallel stage needs its group's communicator");
  }
  CASCADE_ASSIGN_OR_RETURN(e->files_, model::OpenModelFiles(options.model_path));
  e->backend_ = kernels::MakeCpuBackend({.n_threads = options.n_threads});
  model::StageOptions stage;
  stage.first_layer = options.first_layer;
  stage.last_layer = options.last_layer;
  stage.tp_rank = options.tp_rank;
  stage.tp_size = options.tp_size;
  CASCADE_ASSIGN_OR_RETURN(e->transformer_, model::Transformer::Load(e->files_, e->backend_.get(), stage, tp_comm));
  if (e->transformer_->has_embedding() != (options.stage == 0) ||
      e->transformer_->has_head() != (options.stage == options.n_stages - 1)) {
    return absl::InvalidArgumentError(StrCat("stage ", options.stage, " of ", options.n_stages, " got layers [",
                                             options.first_layer, ", ", options.last_layer,
                                             "): the first stage must start at layer 0 and the last end at the last layer"));
  }
  e->transformer_->Prefault(progress);
  CASCADE_ASSIGN_OR_RETURN(model::KvCache cache, model::KvCache::Create(
                                                     e->transformer_->CacheOptions(options.kv_blocks, options.kv_block_size)));
  e->cache_ = std::make_unique<model::KvCache>(std::move(cache));
  return e;
}

absl::StatusOr<v1::StepResult> StageExecutor::Execute(const v1::StepRequest& step) {
  const auto t0 = std::chrono::steady_clock::now();
  v1::StepResult result;
  result.set_step_id(step.step_id());
  for (int64_t id : step.release()) seqs_.erase(id);

  // Flatten the batch: rows sequence by sequence.
  std::vector<int32_t> tokens, positions;
  std::vector<kernels::AttentionSeq> seqs;
  std::vector<int64_t> sample_rows;
  std::vector<std::vector<int32_t>> tables;
  tables.reserve(step.seqs_size());
  const int64_t max_pos = cache_->options().n_blocks * cache_->options().block_size;
  for (const v1::StepSequence& s : step.seqs()) {
    if (s.tokens_size() == 0) return absl::InvalidArgumentError(StrCat("step ", step.step_id(), ": sequence ", s.seq_id(), " has no tokens"));
    if (s.n_past() < 0 || s.n_past() + s.tokens_size() > max_pos) {
      return absl::InvalidArgumentError(StrCat("step ", step.step_id(), ": sequence ", s.seq_id(), " positions [",
                                               s.n_past(), ", ", s.n_past() + s.tokens_size(), ") exceed the cache"));
    }
    const int64_t row = static_cast<int64_t>(tokens.size());
    for (int i = 0; i < s.tokens_size(); ++i) {
      tokens.push_back(s.tokens(i));
      positions.push_back(static_cast<int32_t>(s.n_past() + i));
    }
    tables.emplace_back(s.block_table().begin(), s.block_table().end());
    seqs.push_back({row, s.tokens_size(), s.n_past(), tables.back()});
    if (s.sample()) sample_rows.push_back(static_cast<int64_t>(tokens.size()) - 1);
    const bool sampler_here = is_last() && options_.tp_rank == 0;
    if (sampler_here && (s.reset() || !seqs_.contains(s.seq_id()))) {
      SeqState& st = seqs_[s.seq_id()];
      st.sampler = std::make_unique<model::Sampler>(FromProto(s.sampling()));
      st.history.assign(s.history().begin(), s.history().end());
      if (st.history.empty()) st.history.assign(s.tokens().begin(), s.tokens().end());
    } else if (sampler_here && !s.reset()) {
      auto& h = seqs_[s.seq_id()].history;
      // Decode steps feed the token sampled last, which history already holds.
      if (s.tokens_size() > 1) h.insert(h.end(), s.tokens().begin(), s.tokens().end());
    }
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = transformer_->config().n_embd;
  hidden_.resize(n * n_embd);
  TensorView hidden(hidden_.data(), DType::kF32, {n, n_embd});
  const uint64_t tag = static_cast<uint64_t>(step.step_id());
  if (options_.stage == 0) {
    CASCADE_RETURN_IF_ERROR(transformer_->Embed(tokens, hidden));
  } else {
    CASCADE_RETURN_IF_ERROR(Annotate(ReceiveHidden(n, tag),
                                     StrCat("receiving step ", step.step_id(), " from stage ", options_.stage - 1)));
  }
  const model::ForwardBatch batch{tokens, positions, seqs, sample_rows};
  CASCADE_RETURN_IF_ERROR(transformer_->RunLayers(hidden, batch, *cache_));
  if (!is_last()) {
    CASCADE_RETURN_IF_ERROR(Annotate(SendHidden(n, tag),
                                     StrCat("sending step ", step.step_id(), " to stage ", options_.stage + 1)));
  } else if (!sample_rows.empty()) {
    // Logits are a collective over the TP group (vocab-parallel head); TP rank 0 samples.
    const int64_t V = transformer_->config().n_vocab;
    logits_.resize(sample_rows.size() * V);
    CASCADE_RETURN_IF_ERROR(transformer_->Logits(hidden, sample_rows,
                                                 TensorView(logits_.data(), DType::kF32, {static_cast<int64_t>(sample_rows.size()), V})));
    if (options_.tp_rank == 0) CASCADE_RETURN_IF_ERROR(Sample(step, sample_rows, result));
  }
  result.set_forward_s(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return result;
}

absl::Status StageExecutor::SendHidden(int64_t n, uint64_t tag) {
  const int64_t d = transformer_->config().n_embd;
  const int t = options_.tp_size;
  if (t == 1) return comm_->Send(hidden_.data(), hidden_.size() * sizeof(float), options_.stage + 1, tag);
  // Every TP rank holds the full hidden state: each sends its 1/t of the rows.
  const int64_t c = (n + t - 1) / t;
  slice_.assign(c * d, 0.0f);
  const int64_t begin = std::min(n, options_.tp_rank * c), end = std::min(n, begin + c);
  std::copy(hidden_.begin() + begin * d, hidden_.begin() + end * d, slice_.begin());
  return comm_->Send(slice_.data(), slice_.size() * sizeof(float), options_.stage + 1, tag);
}

absl::Status StageExecutor::ReceiveHidden(int64_t n, uint64_t tag) {
  const int64_t d = transformer_->config().n_embd;
  const int t = options_.tp_size;
  if (t == 1) return comm_->Recv(hidden_.data(), hidden_.size() * sizeof(float), options_.stage - 1, tag);
  const int64_t c = (n + t - 1) / t;
  slice_.assign(c * d * t, 0.0f);
  float* mine = slice_.data() + options_.tp_rank * c * d;
  CASCADE_RETURN_IF_ERROR(comm_->Recv(mine, c * d * sizeof(float), options_.stage - 1, tag));
  CASCADE_RETURN_IF_ERROR(tp_comm_->AllGather(mine, c * d * sizeof(float), slice_.data()));
  std::copy(slice_.begin(), slice_.begin() + n * d, hidden_.begin());
  return absl::OkStatus();
}

absl::Status StageExecutor::Sample(const v1::StepRequest& step, const std::vector<int64_t>& rows,
                                   v1::StepResult& result) {
  const int64_t V = transformer_->config().n_vocab;
  size_t r = 0;
  for (const v1::StepSequence& s : step.seqs()) {
    if (!s.sample()) continue;
    SeqState& st = seqs_[s.seq_id()];
    std::span<float> logits(logits_.data() + r * V, V);
    ++r;
    const model::SampledToken tok = st.sampler->Sample(logits, st.history);
    st.history.push_back(tok.id);
    v1::SampledToken* out = result.add_tokens();
    out->set_seq_id(s.seq_id());
    out->set_token(tok.id);
    out->set_logprob(tok.logprob);
    for (const auto& [id, lp] : tok.top) {
      out->add_top_ids(id);
      out->add_top_logprobs(lp);
    }
  }
  return absl::OkStatus();
}

}  // namespace cascade::worker
