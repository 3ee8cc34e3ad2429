#include "coordinator/engine.h"

#include <algorithm>

#include "core/logging.h"
#include "core/str_cat.h"

namespace cascade::coordinator {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ToProto(const model::SamplingParams& p, v1::StepSampling* s) {
  s->set_temperature(p.temperature);
  s->set_top_k(p.top_k);
  s->set_top_p(p.top_p);
  s->set_min_p(p.min_p);
  s->set_repetition_penalty(p.repetition_penalty);
  s->set_presence_penalty(p.presence_penalty);
  s->set_frequency_penalty(p.frequency_penalty);
  s->set_seed(p.seed);
  s->set_logprobs(p.n_logprobs);
}

}  // namespace

Engine::Engine(Cluster* cluster, const model::Tokenizer* tokenizer, const SchedulerOptions& options)
    : cluster_(cluster), tokenizer_(tokenizer), scheduler_(options) {
  stats_.scheduler = scheduler_.Stats();
}

Engine::~Engine() {
  stop_ = true;
  Wake();
  if (thread_.joinable()) thread_.join();
}

void Engine::Start() { thread_ = std::thread([this] { Loop(); }); }

void Engine::Wake() { cv_.notify_all(); }

std::shared_ptr<RequestChannel> Engine::Submit(EngineRequest request) {
  auto a = std::make_shared<Active>();
  a->channel = std::make_shared<RequestChannel>();
  a->detok = std::make_unique<model::Detokenizer>(*tokenizer_);
  a->stops = std::make_unique<model::StopMatcher>(request.stop_strings);
  a->arrival = std::chrono::steady_clock::now();
  a->req = std::move(request);
  auto channel = a->channel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    submitted_.emplace_back(next_seq_id_++, std::move(a));
  }
  cv_.notify_all();
  return channel;
}

EngineStats Engine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::Push(RequestChannel& c, v1::GenerateResponse msg, bool done, absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.out.push_back(std::move(msg));
    if (done) {
      c.done = true;
      c.status = std::move(status);
    }
  }
  c.cv.notify_all();
}

void Engine::Loop() {
  auto last_check = std::chrono::steady_clock::now();
  while (!stop_) {
    Admit();
    DropCancelled();
    if (Since(last_check) > 0.2) {
      last_check = std::chrono::steady_clock::now();
      if (const std::string dead = cluster_->CheckHeartbeats(); !dead.empty() && !active_.empty()) {
        FailAll(absl::UnavailableError(dead));
      }
    }
    if (in_flight_.empty() && cluster_->CanRecover()) {
      // A restarted worker registered: rebuild the pipeline, then serve again.
      if (absl::Status st = cluster_->Recover(); !st.ok()) CASCADE_LOG(Error) << "recovery failed: " << st.ToString();
      continue;
    }
    const bool sent = FillPipeline();
    if (!in_flight_.empty()) {
      auto r = cluster_->NextResult(std::chrono::milliseconds(100));
      if (r.ok()) {
        OnResult(*r);
      } else if (r.status().code() == absl::StatusCode::kUnavailable) {
        FailAll(r.status());
      }
      continue;
    }
    if (!sent) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return !submitted_.empty() || stop_; });
    }
  }
  FailAll(absl::UnavailableError("the coordinator is shutting down"));
}

void Engine::Admit() {
  std::vector<std::pair<int64_t, std::shared_ptr<Active>>> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(submitted_);
  }
  for (auto& [id, a] : batch) {
    if (!cluster_->Healthy()) {
      v1::GenerateResponse last;
      Push(*a->channel, last, true, absl::UnavailableError(StrCat("the cluster is degraded, not serving: ", [&] {
             v1::ClusterStatus st;
             cluster_->FillStatus(&st);
             return st.detail().empty() ? st.state() : st.detail();
           }())));
      continue;
    }
    SequenceSpec spec;
    spec.id = id;
    spec.prompt = a->req.prompt;
    spec.max_tokens = a->req.max_tokens;
    spec.user_tag = static_cast<uint64_t>(id);
    if (absl::Status s = scheduler_.Add(spec); !s.ok()) {
      Push(*a->channel, {}, true, s);
      continue;
    }
    active_[id] = a;
  }
}

void Engine::DropCancelled() {
  bool dropped = false;
  for (auto it = active_.begin(); it != active_.end();) {
    if (it->second->channel->cancelled) {
      (void)scheduler_.Cancel(it->first);
      release_.push_back(it->first);
      Push(*it->second->channel, {}, true, absl::CancelledError("the client cancelled the request"));
      active_.erase(it++);
      dropped = true;
    } else {
      ++it;
    }
  }
  if (dropped) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.scheduler = scheduler_.Stats();
  }
}

bool Engine::FillPipeline() {
  bool sent = false;
  while (static_cast<int>(in_flight_.size()) < cluster_->n_stages()) {
    std::optional<Batch> batch = scheduler_.Schedule();
    if (!batch) break;
    v1::StepRequest step;
    step.set_step_id(batch->id);
    for (int64_t id : release_) step.add_release(id);
    release_.clear();
    for (const BatchEntry& e : batch->entries) {
      const Active& a = *active_.at(e.seq_id);
      v1::StepSequence* s = step.add_seqs();
      s->set_seq_id(e.seq_id);
      s->mutable_tokens()->Add(e.tokens.begin(), e.tokens.end());
      s->set_n_past(e.n_past);
      s->mutable_block_table()->Add(e.block_table.begin(), e.block_table.end());
      s->set_sample(e.wants_logits);
      if (e.n_past == 0) {
        // New, or recomputed after a preemption: the last stage starts its sampler and
        // penalty history afresh from everything the sequence holds.
        s->set_reset(true);
        ToProto(a.req.sampling, s->mutable_sampling());
        s->mutable_history()->Add(a.req.prompt.begin(), a.req.prompt.end());
        s->mutable_history()->Add(a.generated.begin(), a.generated.end());
      }
    }
    if (absl::Status st = cluster_->SendStep(step); !st.ok()) {
      (void)scheduler_.FailBatch(batch->id);
      FailAll(st);
      return sent;
    }
    in_flight_.push_back(batch->id);
    sent = true;
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.steps;
  }
  return sent;
}

void Engine::OnResult(const v1::StepResult& r) {
  if (!in_flight_.empty() && in_flight_.front() == r.step_id()) in_flight_.pop_front();
  std::vector<SampledToken> sampled;
  absl::flat_hash_map<int64_t, const v1::SampledToken*> by_seq;
  for (const v1::SampledToken& t : r.tokens()) {
    sampled.push_back({t.seq_id(), t.token()});
    by_seq[t.seq_id()] = &t;
  }
  auto events = scheduler_.Complete(r.step_id(), sampled);
  if (!events.ok()) {
    CASCADE_LOG(Error) << "step " << r.step_id() << " result rejected: " << events.status().ToString();
    (void)scheduler_.FailBatch(r.step_id());
    return;
  }
  for (const TokenEvent& ev : *events) {
    auto it = active_.find(ev.seq_id);
    if (it == active_.end()) continue;
    Active& a = *it->second;
    if (a.ttft_s < 0) a.ttft_s = Since(a.arrival);
    a.generated.push_back(ev.token);
    v1::GenerateResponse msg;
    msg.set_request_id(a.req.request_id);
    msg.add_token_ids(ev.token);
    if (auto t = by_seq.find(ev.seq_id); t != by_seq.end() && a.req.sampling.n_logprobs > 0) {
      v1::TokenLogprob* lp = msg.add_logprobs();
      lp->set_id(ev.token);
      lp->set_logprob(t->second->logprob());
      for (int i = 0; i < t->second->top_ids_size(); ++i) {
        auto* top = lp->add_top();
        top->set_id(t->second->top_ids(i));
        top->set_logprob(t->second->top_logprobs(i));
      }
    }
    const bool eog = !a.req.ignore_eos && tokenizer_->IsEog(ev.token);
    const bool stop_id = std::find(a.req.stop_ids.begin(), a.req.stop_ids.end(), ev.token) != a.req.stop_ids.end();
    if (eog || stop_id) {
      Finish(ev.seq_id, a, "stop", msg);
      active_.erase(it);
      continue;
    }
    msg.set_text(a.stops->Push(a.detok->Feed(ev.token)));
    if (a.stops->stopped()) {
      Finish(ev.seq_id, a, "stop", msg);
      active_.erase(it);
    } else if (ev.reached_max_tokens) {
      Finish(ev.seq_id, a, "length", msg);
      active_.erase(it);
    } else {
      Push(*a.channel, std::move(msg), false);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.scheduler = scheduler_.Stats();
}

void Engine::Finish(int64_t seq_id, Active& a, const std::string& reason, v1::GenerateResponse& last) {
  if (!a.stops->stopped()) last.mutable_text()->append(a.stops->Push(a.detok->Flush()));
  last.mutable_text()->append(a.stops->Flush());
  last.set_finish_reason(reason);
  v1::Usage* u = last.mutable_usage();
  u->set_prompt_tokens(static_cast<int32_t>(a.req.prompt.size()));
  u->set_completion_tokens(static_cast<int32_t>(a.generated.size()));
  u->set_ttft_s(a.ttft_s);
  u->set_total_s(Since(a.arrival));
  (void)scheduler_.Finish(seq_id);
  release_.push_back(seq_id);
  Push(*a.channel, std::move(last), true);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.finished;
  stats_.scheduler = scheduler_.Stats();
}

void Engine::FailAll(const absl::Status& status) {
  for (auto& [id, a] : active_) {
    (void)scheduler_.Cancel(id);
    Push(*a->channel, {}, true, status);
  }
  active_.clear();
  // Batches in flight will never complete: give them up.
  for (int64_t id : in_flight_) (void)scheduler_.FailBatch(id);
  in_flight_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.scheduler = scheduler_.Stats();
}

}  // namespace cascade::coordinator
