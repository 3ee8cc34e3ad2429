#include "coordinator/serving/replicas.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <thread>

#include "core/logging.h"
#include "core/str_cat.h"

namespace cascade::coordinator {

namespace {

// Adds `from` into `to`: counters summed, the largest batch kept, the means re-weighted.
void AddStats(const ServingStats& from, ServingStats& to) {
  to.scheduler += from.scheduler;
  to.steps += from.steps;
  to.finished += from.finished;
  to.prompt_tokens += from.prompt_tokens;
  to.generation_tokens += from.generation_tokens;
  to.kv_narrowed_requests += from.kv_narrowed_requests;
  to.kv_hidden_tokens += from.kv_hidden_tokens;
  to.prefix_caching = to.prefix_caching || from.prefix_caching;
  to.n_live += from.n_live;
  v1::SpeculativeStats& a = to.speculative;
  const v1::SpeculativeStats& b = from.speculative;
  const double emitted = a.mean_accepted_length() * a.steps() + b.mean_accepted_length() * b.steps();
  a.set_steps(a.steps() + b.steps());
  a.set_drafted_tokens(a.drafted_tokens() + b.drafted_tokens());
  a.set_accepted_tokens(a.accepted_tokens() + b.accepted_tokens());
  a.set_acceptance_rate(a.drafted_tokens() > 0 ? static_cast<double>(a.accepted_tokens()) / a.drafted_tokens() : 0);
  a.set_mean_accepted_length(a.steps() > 0 ? emitted / a.steps() : 0);
  a.set_draft_s(a.draft_s() + b.draft_s());
  a.set_verify_s(a.verify_s() + b.verify_s());
}

// MoE: tokens routed to each expert of each layer, summed over the replicas. Redundant
// experts are placed per replica: with one replica its placement is the cluster's.
void MergeExpertLoad(const std::vector<v1::ClusterStatus>& parts, v1::ClusterStatus* out) {
  if (parts.size() == 1) {
    *out->mutable_expert_load() = parts[0].expert_load();
    return;
  }
  std::map<int64_t, std::vector<int64_t>> by_layer;
  for (const v1::ClusterStatus& p : parts) {
    for (const v1::ExpertLoad& load : p.expert_load()) {
      std::vector<int64_t>& sum = by_layer[load.layer()];
      sum.resize(std::max<size_t>(sum.size(), load.tokens_size()));
      for (int e = 0; e < load.tokens_size(); ++e) sum[e] += load.tokens(e);
    }
  }
  for (const auto& [layer, tokens] : by_layer) {
    v1::ExpertLoad* load = out->add_expert_load();
    load->set_layer(layer);
    load->mutable_tokens()->Add(tokens.begin(), tokens.end());
    int64_t total = 0, most = 0;
    for (int64_t t : tokens) total += t, most = std::max(most, t);
    load->set_max_mean_ratio(total > 0 ? static_cast<double>(most) * tokens.size() / total : 0);
  }
}

}  // namespace

Replicas::Replicas(const std::vector<Plan>& plans, const StageWorkersOptions& options, const text::Tokenizer* tokenizer,
                   const SchedulerOptions& scheduler, const SpeculationOptions& speculation, bool route_by_prefix,
                   const ReplicaLayout& layout)
    : roles_(layout.roles),
      local_prefill_tokens_(layout.local_prefill_tokens),
      max_num_seqs_(std::max(1, scheduler.max_num_seqs)) {
  int kv_group_size = 0;  // Every target worker of every replica, when roles differ.
  if (!roles_.empty()) {
    for (const Plan& p : plans) kv_group_size += static_cast<int>(p.stages.size() * p.stages[0].tp.size());
  }
  int kv_rank = 0;
  if (route_by_prefix && scheduler.prefix_caching && plans.size() > 1) {
    affinity_ = std::make_unique<PrefixAffinity>(static_cast<int>(plans.size()), scheduler.kv_block_size,
                                                 static_cast<size_t>(std::max(0, scheduler.n_kv_blocks)));
  }
  for (size_t r = 0; r < plans.size(); ++r) {
    StageWorkersOptions o = options;
    o.replica = static_cast<int>(r);
    if (plans.size() > 1) o.group = StrCat(options.group, "/r", r);  // Rendezvous keys apart.
    if (kv_group_size > 0) {
      o.kv_group = StrCat(options.group, "/kv");
      o.kv_group_size = kv_group_size;
      o.kv_rank_base = kv_rank;
      kv_rank += static_cast<int>(plans[r].stages.size() * plans[r].stages[0].tp.size());
    }
    // Replicas of other pipeline sizes keep their own number of batches in flight.
    SchedulerOptions so = scheduler;
    so.max_in_flight_batches = static_cast<int>(plans[r].stages.size()) + (options.draft ? 1 : 0);
    Replica replica;
    replica.workers = std::make_unique<StageWorkers>(plans[r], o);
    replica.loop = std::make_unique<ServingLoop>(replica.workers.get(), tokenizer, so, speculation);
    if (r < layout.kv_holders.size()) replica.loop->SetKvHolders(layout.kv_holders[r]);
    replicas_.push_back(std::move(replica));
  }
  for (int r = 0; r < size() && !roles_.empty(); ++r) {
    replicas_[r].loop->OnRecovered([this] { RejoinKvGroup(); });
  }
  for (int r = 0; r < size(); ++r) {
    if (role(r) != ReplicaRole::kPrefill) continue;
    replicas_[r].loop->SetHandoff([this, r]() -> ServingLoop* {
      if (!replicas_[r].workers->kv_linked()) return nullptr;  // Rebuilt: no KV leaves it.
      const int to = PickLinkedDecode(r);
      return to >= 0 ? replicas_[to].loop.get() : nullptr;
    });
  }
  for (int r = 0; r < size(); ++r) {
    replicas_[r].loop->OnEvacuate([this, r](std::shared_ptr<ServingLoop::Active> request) {
      absl::MutexLock lock(&route_mu_);
      const int to = Pick(r);
      if (to < 0) return false;
      if (affinity_ != nullptr) affinity_->Record(to, request->req.prompt);
      replicas_[to].loop->Adopt(std::move(request));
      return true;
    });
  }
}

Replicas::~Replicas() { Stop(); }

std::vector<StageWorkers*> Replicas::all_workers() {
  std::vector<StageWorkers*> out;
  for (Replica& r : replicas_) out.push_back(r.workers.get());
  return out;
}

int Replicas::n_workers() const {
  int n = 0;
  for (const Replica& r : replicas_) n += r.workers->n_workers() + (r.workers->options().draft ? 1 : 0);
  return n;
}

void Replicas::SetMetrics(ServingMetrics* metrics) {
  for (Replica& r : replicas_) {
    r.workers->SetMetrics(metrics);
    r.loop->SetMetrics(metrics);
  }
}

void Replicas::SetRecoveryTimeout(std::chrono::seconds timeout) {
  for (Replica& r : replicas_) r.loop->SetRecoveryTimeout(timeout);
}

absl::Status Replicas::BringUp(std::chrono::milliseconds timeout) {
  std::vector<absl::Status> results(replicas_.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < replicas_.size(); ++r) {
    threads.emplace_back([&, r] { results[r] = replicas_[r].workers->BringUp(timeout); });
  }
  for (std::thread& t : threads) t.join();
  for (size_t r = 0; r < replicas_.size(); ++r) {
    if (!results[r].ok()) {
      return size() == 1 ? results[r]
                         : absl::Status(results[r].code(), StrCat("replica ", r, ": ", results[r].message()));
    }
    Replica& replica = replicas_[r];
    const int64_t blocks = replica.workers->kv_blocks();
    if (blocks != replica.workers->options().kv_blocks) {  // Its GPUs hold fewer than the budget.
      replica.loop->ResetKvBlocks(static_cast<int32_t>(std::min<int64_t>(blocks, INT32_MAX)));
    }
  }
  return absl::OkStatus();
}

int64_t Replicas::min_kv_blocks() const {
  int64_t blocks = INT64_MAX;
  for (const Replica& r : replicas_) blocks = std::min(blocks, r.workers->kv_blocks());
  return blocks;
}

void Replicas::Start() {
  for (Replica& r : replicas_) r.loop->Start();
}

void Replicas::Stop() {
  for (Replica& r : replicas_) r.loop->Stop();
  for (Replica& r : replicas_) r.workers->Close();  // Before the workers stop: no death reports.
}

double Replicas::Headroom(int r) const {
  const ServingStats st = replicas_[r].loop->Stats();
  const double kv = st.scheduler.n_total_blocks > 0
                        ? static_cast<double>(st.scheduler.n_free_blocks) / st.scheduler.n_total_blocks
                        : 1.0;
  return kv - static_cast<double>(st.n_live) / max_num_seqs_;
}

int Replicas::Pick(int except, ReplicaRole not_role) const {
  int best = -1;
  double best_room = 0;
  for (int r = 0; r < size(); ++r) {
    if (r == except || !replicas_[r].workers->Healthy()) continue;
    if (not_role != ReplicaRole::kServe && role(r) == not_role) continue;
    const double room = Headroom(r);
    if (best < 0 || room > best_room) best = r, best_room = room;
  }
  return best;
}

void Replicas::RejoinKvGroup() {
  absl::MutexLock lock(&kv_mu_);
  ++kv_generation_;
  for (Replica& replica : replicas_) replica.workers->set_kv_linked(false);  // No KV moves meanwhile.
  for (Replica& replica : replicas_) {
    const StageWorkersOptions& o = replica.workers->options();
    v1::KvGroupJoin join;
    join.set_group(StrCat(o.kv_group, "/g", kv_generation_));
    join.set_rank_base(o.kv_rank_base);
    join.set_size(o.kv_group_size);
    replica.loop->JoinKvGroup(std::move(join));
  }
  CASCADE_LOG(Info) << "a replica was rebuilt: every worker meets in KV group generation " << kv_generation_;
}

bool Replicas::Paired(int prefill, int decode) const {
  // Index among its role's replicas, and how many of each role there are.
  int p = 0, d = 0, n_prefill = 0, n_decode = 0;
  for (int r = 0; r < size(); ++r) {
    if (role(r) == ReplicaRole::kPrefill) p += r < prefill ? 1 : 0, ++n_prefill;
    if (role(r) == ReplicaRole::kDecode) d += r < decode ? 1 : 0, ++n_decode;
  }
  return n_prefill >= n_decode ? p % n_decode == d : d % n_prefill == p;
}

int Replicas::PickLinkedDecode(int prefill) const {
  int best = -1;
  double best_room = 0;
  for (int r = 0; r < size(); ++r) {
    if (role(r) != ReplicaRole::kDecode || !replicas_[r].workers->Healthy() || !replicas_[r].workers->kv_linked()) {
      continue;
    }
    if (prefill >= 0 && !Paired(prefill, r)) continue;
    const double room = Headroom(r);
    if (best < 0 || room > best_room) best = r, best_room = room;
  }
  return best;
}

int Replicas::Route(std::span<const int32_t> prompt) {
  if (!roles_.empty()) {
    // Disaggregated: to a prefill replica while KV can move on to a decode one; otherwise
    // every serving replica takes whole requests.
    bool linked_prefill = false;
    for (int r = 0; r < size(); ++r) {
      linked_prefill = linked_prefill || (role(r) == ReplicaRole::kPrefill && replicas_[r].workers->Healthy() &&
                                          replicas_[r].workers->kv_linked());
    }
    const int decode = linked_prefill ? PickLinkedDecode() : -1;
    if (decode < 0) return Pick(-1);
    return std::ssize(prompt) <= local_prefill_tokens_ ? decode : Pick(-1, ReplicaRole::kDecode);
  }
  const int best = Pick(-1);
  if (best < 0 || affinity_ == nullptr) return best;
  int holder = -1;
  int32_t most = 0;
  for (int r = 0; r < size(); ++r) {
    if (!replicas_[r].workers->Healthy()) {
      affinity_->Forget(r);
      continue;
    }
    // The longest match; among equal ones (a shared system prompt) the most headroom.
    const int32_t n = affinity_->Matched(r, prompt);
    if (n > most || (n == most && n > 0 && Headroom(r) > Headroom(holder))) holder = r, most = n;
  }
  if (holder < 0 || holder == best) return best;
  // What going there saves: the blocks it holds beyond what `best` holds, as a share of
  // the prompt's. It may be busier than `best` by that share of a quarter of the mean
  // load, rounded up: one request more at least (a chat's next turn meets its history),
  // never a pile-up behind a prefix that one replica happened to see first.
  const int64_t n_blocks = static_cast<int64_t>(prompt.size()) / affinity_->block_size();
  const double saved = static_cast<double>(most - affinity_->Matched(best, prompt)) / std::max<int64_t>(1, n_blocks);
  int64_t total_live = 0, serving = 0;
  for (int r = 0; r < size(); ++r) {
    if (replicas_[r].workers->Healthy()) total_live += replicas_[r].loop->Stats().n_live, ++serving;
  }
  const double mean_live = static_cast<double>(total_live) / std::max<int64_t>(1, serving);
  const auto allowance = static_cast<int64_t>(std::ceil(kAffinitySlack * saved * std::max(1.0, mean_live)));
  const ServingStats h = replicas_[holder].loop->Stats(), b = replicas_[best].loop->Stats();
  const bool kv_left = h.scheduler.n_free_blocks >= h.scheduler.n_total_blocks / 10;
  return kv_left && h.n_live <= b.n_live + allowance ? holder : best;
}

std::shared_ptr<RequestChannel> Replicas::Submit(ServingRequest request) {
  // One routing at a time: two requests arriving together would otherwise both see the
  // same idle replica and go there.
  absl::MutexLock lock(&route_mu_);
  int r = Route(request.prompt);
  if (r < 0) {  // None serves: the least loaded one's queue, to wait for its rebuild.
    r = 0;
    for (int i = 1; i < size(); ++i) {
      if (replicas_[i].loop->Stats().n_live < replicas_[r].loop->Stats().n_live) r = i;
    }
  }
  if (affinity_ != nullptr) affinity_->Record(r, request.prompt);
  return replicas_[r].loop->Submit(std::move(request));
}

void Replicas::Wake() {
  for (Replica& r : replicas_) r.loop->Wake();
}

ServingStats Replicas::Stats() const {
  ServingStats total;
  for (const Replica& r : replicas_) AddStats(r.loop->Stats(), total);
  return total;
}

bool Replicas::Serving() const {
  return std::any_of(replicas_.begin(), replicas_.end(), [](const Replica& r) { return r.workers->Healthy(); });
}

void Replicas::FillStatus(v1::ClusterStatus* st) const {
  std::vector<v1::ClusterStatus> parts(replicas_.size());
  bool ready = true, dead = false;
  int serving = 0;
  std::string detail;
  for (size_t r = 0; r < replicas_.size(); ++r) {
    v1::ClusterStatus& p = parts[r];
    replicas_[r].workers->FillStatus(&p);
    for (const v1::StageStatus& s : p.stages()) *st->add_stages() = s;
    ready = ready && p.ready();
    dead = dead || p.cluster_state() == v1::CLUSTER_STATE_DEGRADED;
    serving += p.ready() ? 1 : 0;
    const ServingStats e = replicas_[r].loop->Stats();
    v1::ReplicaStatus* rs = st->add_replicas();
    rs->set_replica(static_cast<int32_t>(r));
    rs->set_serving(p.ready());
    rs->set_running(e.scheduler.running());
    rs->set_waiting(e.scheduler.n_waiting);
    rs->set_kv_blocks_free(e.scheduler.n_free_blocks);
    rs->set_kv_blocks_total(e.scheduler.n_total_blocks);
    rs->set_steps(e.steps);
    rs->set_requests_finished(e.finished);
    rs->set_generation_tokens(e.generation_tokens);
    rs->set_role(std::string(ReplicaRoleName(role(static_cast<int>(r)))));
    if (!p.detail().empty()) {
      StrAppend(&detail, detail.empty() ? "" : "; ", size() > 1 ? StrCat("replica ", r, ": ") : "", p.detail());
    }
  }
  st->set_ready(ready);
  st->set_state(ready ? "ready" : dead ? "degraded" : "starting");
  st->set_cluster_state(ready  ? v1::CLUSTER_STATE_READY
                        : dead ? v1::CLUSTER_STATE_DEGRADED
                               : v1::CLUSTER_STATE_STARTING);
  st->set_detail(detail);
  st->set_n_replicas(size());
  st->set_replicas_serving(serving);
  MergeExpertLoad(parts, st);
}

}  // namespace cascade::coordinator
