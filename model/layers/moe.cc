#include "model/layers/moe.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <string>

#include "absl/container/inlined_vector.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/arch/moe.h"

namespace cascade::model {

using arch::MoeTensor;
using kernels::GrowBuffer;

void RouteToken(std::span<const float> logits, int64_t k, bool norm, std::span<int32_t> experts,
                std::span<float> weights) {
  const int64_t n = static_cast<int64_t>(logits.size());
  // Softmax over every expert (the chosen weights are its probabilities, as transformers'
  // MoE blocks compute them), in double so the renormalised weights lose nothing.
  const float mx = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float v : logits) z += std::exp(static_cast<double>(v - mx));
  // Top k by logit (the softmax is monotonic), lower id first on ties.
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  absl::InlinedVector<double, 16> p(k);
  double chosen = 0;
  for (int64_t i = 0; i < k; ++i) {
    experts[i] = order[i];
    chosen += p[i] = std::exp(static_cast<double>(logits[order[i]] - mx)) / z;
  }
  for (int64_t i = 0; i < k; ++i) weights[i] = static_cast<float>(norm ? p[i] / chosen : p[i]);
}

namespace {

// Where one expert's (or the shared expert's) gate, up and down are stored.
struct ExpertNames {
  arch::ExpertMatrix gate, up, down;
};

// Columns [f0, f1) of an FFN whose matrices are stored at `n` (each expert's rows of a
// merged tensor, or a tensor of its own).
template <typename Expert>
absl::StatusOr<Expert> LoadFfnAs(WeightLoader& w, const ModelConfig& c, const ExpertNames& n, int64_t n_ff, int64_t f0,
                                 int64_t f1, bool fuse) {
  Expert e;
  const std::string names[] = {n.gate.name, n.up.name};
  const int64_t rows[] = {n.gate.stored_rows, n.up.stored_rows};
  const IndexRange ranges[] = {{n.gate.row_begin + f0, n.gate.row_begin + f1},
                               {n.up.row_begin + f0, n.up.row_begin + f1}};
  CASCADE_ASSIGN_OR_RETURN(e.gate_up, StackedLinear::LoadColumn(w, names, rows, c.n_embd, ranges, fuse));
  CASCADE_ASSIGN_OR_RETURN(e.down, Linear::LoadRow(w, n.down.name, n.down.stored_rows, n_ff, {f0, f1}, nullptr,
                                                   {n.down.row_begin, n.down.row_begin + c.n_embd}));
  return e;
}

}  // namespace

absl::StatusOr<MoeBlock> MoeBlock::Load(WeightLoader& w, const ModelFiles& files, int64_t l, const TpShard& s,
                                        BackendComm* group, bool fuse) {
  const ModelConfig& c = files.config;
  MoeBlock m;
  m.backend_ = w.backend();
  m.group_ = group;
  m.n_embd_ = c.n_embd;
  m.n_experts_ = c.n_experts;
  m.top_k_ = c.n_experts_used;
  m.norm_topk_ = c.norm_topk_prob;
  m.expert_begin_ = s.expert_begin;
  m.n_ff_ = s.n_ff_expert();
  m.n_ff_shared_ = s.n_ff_shared();
  const auto name = [&](MoeTensor t) { return arch::MoeTensorName(c, files.format, t, l); };
  CASCADE_ASSIGN_OR_RETURN(m.router_, Linear::LoadReplicated(w, name(MoeTensor::kRouter), c.n_experts, c.n_embd));
  m.swiglu_limit_ = static_cast<float>(c.swiglu_limit);
  m.swiglu_alpha_ = static_cast<float>(c.swiglu_alpha);
  if (c.router_bias) {
    CASCADE_ASSIGN_OR_RETURN(m.router_bias_, w.Vector(name(MoeTensor::kRouterBias), c.n_experts));
  }
  m.expert_parallel_ = s.expert_parallel && group != nullptr;
  m.all_to_all_ = s.expert_all_to_all && group != nullptr;
  m.fuse_ = fuse;
  m.rank_ = group != nullptr ? group->rank() : 0;
  m.n_ranks_ = group != nullptr ? group->size() : 1;
  m.slot_of_expert_.assign(c.n_experts, -1);
  const int64_t before = w.weight_bytes();
  for (int64_t e = s.expert_begin; e < s.expert_end; ++e) {
    const bool adds_down = s.expert_parallel || group == nullptr || group->rank() == 0;  // (Always, all-to-all.)
    CASCADE_ASSIGN_OR_RETURN(Expert ex, LoadExpert(w, files, l, e, s.ffe_begin, s.ffe_end, adds_down, fuse));
    m.slot_of_expert_[e] = static_cast<int32_t>(m.experts_.size());
    m.expert_of_slot_.push_back(e);
    m.experts_.push_back(std::move(ex));
  }
  m.expert_bytes_ = w.weight_bytes() - before;
  if (c.n_ff_shared_expert > 0) {
    const int64_t f = c.n_ff_shared_expert;
    const ExpertNames n{{name(MoeTensor::kSharedGate), 0, f},
                        {name(MoeTensor::kSharedUp), 0, f},
                        {name(MoeTensor::kSharedDown), 0, c.n_embd}};
    CASCADE_ASSIGN_OR_RETURN(m.shared_, LoadFfnAs<Expert>(w, c, n, f, s.ffs_begin, s.ffs_end, fuse));
    CASCADE_ASSIGN_OR_RETURN(m.shared_router_, Linear::LoadReplicated(w, name(MoeTensor::kSharedRouter), 1, c.n_embd));
  }
  CASCADE_RETURN_IF_ERROR(m.PrepareDeviceExperts());
  return m;
}

absl::StatusOr<MoeBlock::Expert> MoeBlock::LoadExpert(WeightLoader& w, const ModelFiles& files, int64_t l, int64_t e,
                                                      int64_t f0, int64_t f1, bool adds_down, bool fuse) {
  const ModelConfig& c = files.config;
  const auto matrix = [&](MoeTensor t) { return arch::ExpertMatrixOf(c, files.format, t, l, e); };
  const ExpertNames n{matrix(MoeTensor::kGate), matrix(MoeTensor::kUp), matrix(MoeTensor::kDown)};
  CASCADE_ASSIGN_OR_RETURN(Expert ex, LoadFfnAs<Expert>(w, c, n, c.n_ff_expert, f0, f1, fuse));
  if (c.expert_bias) CASCADE_RETURN_IF_ERROR(LoadExpertBiases(w, files, l, e, f0, f1, adds_down, ex));
  return ex;
}

absl::Status MoeBlock::SetReplicas(WeightLoader& w, const ModelFiles& files, int64_t layer,
                                   std::span<const std::pair<int32_t, int32_t>> extra) {
  if (!expert_parallel_) {
    return absl::FailedPreconditionError(StrCat("layer ", layer, ": replicated experts need expert parallelism"));
  }
  std::vector<std::vector<int32_t>> holders(n_experts_);
  for (const auto& [e, r] : extra) {
    if (e < 0 || e >= n_experts_ || r < 0 || r >= n_ranks_) {
      return absl::InvalidArgumentError(StrCat("layer ", layer, ": replica of expert ", e, " on rank ", r,
                                               " is outside ", n_experts_, " experts and ", n_ranks_, " ranks"));
    }
    std::vector<int32_t>& h = holders[e];
    if (h.empty()) h.push_back(TpShard::ExpertRank(n_experts_, n_ranks_, e));
    if (std::find(h.begin(), h.end(), r) != h.end()) {
      return absl::InvalidArgumentError(
          StrCat("layer ", layer, ": expert ", e, " is placed on rank ", r, " twice (or on its own rank)"));
    }
    h.push_back(r);
  }
  // Keep the own experts and the replicas still held here; load the new ones.
  std::vector<Expert> kept;
  std::vector<int64_t> ids;
  std::vector<int32_t> slots(n_experts_, -1);
  for (size_t slot = 0; slot < experts_.size(); ++slot) {
    const int64_t e = expert_of_slot_[slot];
    const std::vector<int32_t>& h = holders[e];
    const bool own = TpShard::ExpertRank(n_experts_, n_ranks_, e) == rank_;
    if (!own && std::find(h.begin(), h.end(), rank_) == h.end()) continue;
    slots[e] = static_cast<int32_t>(kept.size());
    ids.push_back(e);
    kept.push_back(std::move(experts_[slot]));
  }
  for (const auto& [e, r] : extra) {
    if (r != rank_ || slots[e] >= 0) continue;
    CASCADE_ASSIGN_OR_RETURN(Expert ex, LoadExpert(w, files, layer, e, 0, n_ff_, /*adds_down=*/true, fuse_));
    slots[e] = static_cast<int32_t>(kept.size());
    ids.push_back(e);
    kept.push_back(std::move(ex));
  }
  experts_ = std::move(kept);
  expert_of_slot_ = std::move(ids);
  slot_of_expert_ = std::move(slots);
  holders_ = std::move(holders);
  device_experts_.reset();  // Its kernels know the own experts' range only.
  return extra.empty() ? PrepareDeviceExperts() : absl::OkStatus();
}

absl::Status MoeBlock::LoadExpertBiases(WeightLoader& w, const ModelFiles& files, int64_t l, int64_t e, int64_t f0,
                                        int64_t f1, bool adds_down, Expert& ex) {
  const ModelConfig& c = files.config;
  const auto bias = [&](MoeTensor t, int64_t b0, int64_t b1) -> absl::StatusOr<TensorView> {
    const arch::ExpertMatrix m = arch::ExpertBiasOf(c, files.format, t, l, e);
    return w.Vector(m.name, m.stored_rows, {m.row_begin + b0, m.row_begin + b1});
  };
  CASCADE_ASSIGN_OR_RETURN(ex.gate_bias, bias(MoeTensor::kGate, f0, f1));
  CASCADE_ASSIGN_OR_RETURN(ex.up_bias, bias(MoeTensor::kUp, f0, f1));
  if (adds_down) {
    CASCADE_ASSIGN_OR_RETURN(ex.down_bias, bias(MoeTensor::kDown, 0, c.n_embd));
  }
  return absl::OkStatus();
}

absl::Status MoeBlock::Activate(const TensorView& gate, const TensorView& up) const {
  if (swiglu_limit_ > 0) return backend_->ClampedSwiglu(gate, gate, up, swiglu_alpha_, swiglu_limit_);
  return backend_->SiluMul(gate, gate, up);
}

absl::Status MoeBlock::PrepareDeviceExperts() {
  // All-to-all dispatch routes on the host, where it exchanges the tokens. A shared expert
  // (Qwen2-MoE) runs after the routed ones either way (RunShared); a router bias (gpt-oss)
  // is in the router's logits.
  if (experts_.empty() || all_to_all_) {
    host_reason_ = experts_.empty() ? "no experts held" : "all-to-all dispatch";
    return absl::OkStatus();
  }
  std::vector<kernels::Backend::ExpertWeights> weights;
  for (const Expert& e : experts_) {
    const StackedLinear& gu = e.gate_up;
    // Act-order GPTQ matrices pass their input orders: the device gathers each row's inputs.
    kernels::Backend::ExpertWeights w{.down = &e.down.weight(),
                                      .down_order = e.down.input_order(),
                                      .gate_bias = e.gate_bias,
                                      .up_bias = e.up_bias,
                                      .down_bias = e.down_bias};
    if (gu.stacked()) {
      w.gate = w.up = gu.stacked_weight();
      w.up_row0 = n_ff_;
    } else {
      w.gate = &gu.part_weight(0);
      w.up = &gu.part_weight(1);
      w.gate_order = gu.part_input_order(0);
      w.up_order = gu.part_input_order(1);
    }
    weights.push_back(w);
  }
  auto prepared =
      backend_->PrepareExperts(weights, n_ff_, {.swiglu_alpha = swiglu_alpha_, .swiglu_limit = swiglu_limit_});
  if (absl::IsUnimplemented(prepared.status())) {  // Routed on the host.
    host_reason_ = std::string(prepared.status().message());
    return absl::OkStatus();
  }
  CASCADE_RETURN_IF_ERROR(prepared.status());
  device_experts_ = *std::move(prepared);
  host_reason_.clear();
  return absl::OkStatus();
}

TensorView MoeBlock::View(const kernels::Buffer& b, int64_t rows, int64_t cols) const {
  return TensorView(b.data(), DType::kF32, {rows, cols}, backend_->device());
}

absl::Status MoeBlock::Grow(MoeScratch& s, int64_t n, int64_t grouped) const {
  kernels::Backend& b = *backend_;
  const auto f32 = [](int64_t rows, int64_t cols) { return static_cast<size_t>(rows * cols) * sizeof(float); };
  if (grouped < 0) grouped = n * top_k_;  // Every routed row, at most.
  n = std::max<int64_t>(n, 1);            // A rank with no tokens still gets buffers to point at.
  const int64_t ff = std::max(n_ff_, n_ff_shared_);
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, s.logits, f32(n, n_experts_)));
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, s.shared_logits, f32(n, 1)));
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, s.x, f32(std::max(grouped, n), n_embd_)));
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, s.gate, f32(std::max(grouped, n), ff)));
  CASCADE_RETURN_IF_ERROR(GrowBuffer(b, s.up, f32(std::max(grouped, n), ff)));
  if (group_ != nullptr) CASCADE_RETURN_IF_ERROR(GrowBuffer(b, s.partial, f32(n, n_embd_)));
  return absl::OkStatus();
}

absl::Status MoeBlock::RouteTokens(const TensorView& x, int64_t n, MoeScratch& s, std::vector<int32_t>& chosen,
                                   std::vector<float>& weights) const {
  const int64_t k = top_k_;
  chosen.resize(static_cast<size_t>(n * k));
  weights.resize(static_cast<size_t>(n * k));
  if (n == 0) return absl::OkStatus();
  const TensorView logits = View(*s.logits, n, n_experts_);
  CASCADE_RETURN_IF_ERROR(router_.Forward(logits, x, router_bias_));
  s.host_logits.resize(static_cast<size_t>(n * n_experts_));
  CASCADE_RETURN_IF_ERROR(backend_->CopyOut(s.host_logits.data(), logits.data, s.host_logits.size() * sizeof(float)));
  for (int64_t t = 0; t < n; ++t) {
    RouteToken(std::span<const float>(s.host_logits).subspan(t * n_experts_, n_experts_), k, norm_topk_,
               std::span(chosen).subspan(t * k, k), std::span(weights).subspan(t * k, k));
  }
  return absl::OkStatus();
}

absl::Status MoeBlock::Route(const TensorView& x, int64_t n, MoeScratch& s, std::span<int64_t> load) const {
  // Route every token, then list the held experts' rows expert by expert.
  const int64_t k = top_k_;
  std::vector<int32_t> chosen;
  std::vector<float> weights;
  CASCADE_RETURN_IF_ERROR(RouteTokens(x, n, s, chosen, weights));
  // The held slot that computes each (token, expert) pair, or -1: without replicas the own
  // experts' slot; with them, holder j mod |holders| of an expert's j-th pair.
  const int64_t held = static_cast<int64_t>(experts_.size());
  std::vector<int32_t> slot_of_pair(static_cast<size_t>(n * k));
  std::vector<int32_t> seen(holders_.empty() ? 0 : n_experts_, 0);
  for (int64_t i = 0; i < n * k; ++i) {
    const int32_t e = chosen[i];
    int32_t slot = -1;
    if (!expert_parallel_) {
      slot = e - static_cast<int32_t>(expert_begin_);
      if (slot < 0 || slot >= held) slot = -1;
    } else if (holders_.empty() || holders_[e].empty()) {
      slot = slot_of_expert_[e];
    } else {
      const std::vector<int32_t>& h = holders_[e];
      if (h[seen[e]++ % h.size()] == rank_) slot = slot_of_expert_[e];
    }
    slot_of_pair[i] = slot;
  }
  s.expert_rows.assign(held + 1, 0);
  for (int64_t i = 0; i < n * k; ++i) {
    if (!load.empty()) ++load[chosen[i]];
    if (slot_of_pair[i] >= 0) ++s.expert_rows[slot_of_pair[i] + 1];
  }
  std::partial_sum(s.expert_rows.begin(), s.expert_rows.end(), s.expert_rows.begin());
  s.token_of_row.resize(s.expert_rows[held]);
  s.weight_of_row.resize(s.expert_rows[held]);
  std::vector<int64_t> next(s.expert_rows.begin(), s.expert_rows.end() - 1);
  for (int64_t i = 0; i < n * k; ++i) {
    const int32_t slot = slot_of_pair[i];
    if (slot < 0) continue;
    s.token_of_row[next[slot]] = static_cast<int32_t>(i / k);
    s.weight_of_row[next[slot]++] = weights[i];
  }
  return absl::OkStatus();
}

absl::Status MoeBlock::RunExperts(TensorView acc, const TensorView& x, MoeScratch& s) const {
  const int64_t rows = static_cast<int64_t>(s.token_of_row.size());
  if (rows == 0) return absl::OkStatus();
  kernels::Backend& b = *backend_;
  // Gather each held expert's tokens into one block of rows (x read as an f32 table).
  CASCADE_RETURN_IF_ERROR(b.Embedding(View(*s.x, rows, n_embd_), x, s.token_of_row));
  // Every active expert's gate/up in one batch (one dispatch on the CPU), one SiluMul over
  // all their rows, every down in one batch.
  const size_t n = experts_.size();
  std::vector<std::array<TensorView, 2>> gate_up(n);
  std::vector<TensorView> xs(n), down(n);
  std::vector<kernels::Backend::LinearJob> gate_up_jobs, down_jobs;
  for (size_t e = 0; e < n; ++e) {
    const int64_t r0 = s.expert_rows[e], r1 = s.expert_rows[e + 1];
    if (r0 == r1) continue;
    const auto slice = [&](const kernels::Buffer& buf, int64_t cols) {
      return TensorView(static_cast<float*>(buf.data()) + r0 * cols, DType::kF32, {r1 - r0, cols}, b.device());
    };
    gate_up[e] = {slice(*s.gate, n_ff_), slice(*s.up, n_ff_)};
    xs[e] = slice(*s.x, n_embd_);
    down[e] = xs[e];  // Over its own inputs: gate/up have read them.
    const StackedLinear& gu = experts_[e].gate_up;
    if (gu.stacked()) {
      gate_up_jobs.push_back({gate_up[e], xs[e], gu.stacked_weight()});
    } else {
      CASCADE_RETURN_IF_ERROR(gu.Forward(gate_up[e], xs[e], {}));
    }
    if (!experts_[e].down.reorders_input()) {
      down_jobs.push_back({std::span(&down[e], 1), gate_up[e][0], &experts_[e].down.weight()});
    }
  }
  CASCADE_RETURN_IF_ERROR(b.LinearBatch(gate_up_jobs));
  for (size_t e = 0; e < n; ++e) {
    if (s.expert_rows[e] == s.expert_rows[e + 1] || experts_[e].gate_bias.data == nullptr) continue;
    CASCADE_RETURN_IF_ERROR(b.AddBias(gate_up[e][0], experts_[e].gate_bias));
    CASCADE_RETURN_IF_ERROR(b.AddBias(gate_up[e][1], experts_[e].up_bias));
  }
  const TensorView gate = View(*s.gate, rows, n_ff_);
  CASCADE_RETURN_IF_ERROR(Activate(gate, View(*s.up, rows, n_ff_)));
  CASCADE_RETURN_IF_ERROR(b.LinearBatch(down_jobs));
  for (size_t e = 0; e < n; ++e) {  // Act-order GPTQ downs gather their inputs themselves.
    if (s.expert_rows[e] == s.expert_rows[e + 1]) continue;
    if (experts_[e].down.reorders_input()) CASCADE_RETURN_IF_ERROR(experts_[e].down.Forward(down[e], gate_up[e][0]));
    if (experts_[e].down_bias.data != nullptr) CASCADE_RETURN_IF_ERROR(b.AddBias(down[e], experts_[e].down_bias));
  }
  return b.AddScaledRows(acc, View(*s.x, rows, n_embd_), s.token_of_row, s.weight_of_row);
}

absl::Status MoeBlock::RunShared(TensorView acc, const TensorView& x, MoeScratch& s) const {
  kernels::Backend& b = *backend_;
  const int64_t n = x.Rows();
  const TensorView g = View(*s.shared_logits, n, 1);
  CASCADE_RETURN_IF_ERROR(shared_router_.Forward(g, x));
  const TensorView gate = View(*s.gate, n, n_ff_shared_), up = View(*s.up, n, n_ff_shared_);
  const TensorView gate_up[] = {gate, up};
  CASCADE_RETURN_IF_ERROR(shared_.gate_up.Forward(gate_up, x, {}));
  CASCADE_RETURN_IF_ERROR(Activate(gate, up));
  const TensorView out = View(*s.x, n, n_embd_);  // Free: the routed rows are in acc already.
  CASCADE_RETURN_IF_ERROR(shared_.down.Forward(out, gate));
  return b.AddSigmoidGatedRows(acc, out, g);
}

absl::Status MoeBlock::Forward(TensorView hidden, const TensorView& x, MoeScratch& s, std::span<int64_t> load,
                               void* device_load) const {
  const int64_t n = x.Rows();
  if (x.Cols() != n_embd_ || hidden.Rows() != n || hidden.Cols() != n_embd_) {
    return absl::InvalidArgumentError(StrCat("moe: x ", x.ShapeString(), ", hidden ", hidden.ShapeString()));
  }
  if (!load.empty() && static_cast<int64_t>(load.size()) != n_experts_) {
    return absl::InvalidArgumentError(StrCat("moe: load counts for ", load.size(), " of ", n_experts_, " experts"));
  }
  if (all_to_all_) return ForwardAllToAll(hidden, x, s, load);
  CASCADE_RETURN_IF_ERROR(Grow(s, n));
  const bool on_device = device_experts_ != nullptr && backend_->RoutesExperts(n);
  if (!on_device) CASCADE_RETURN_IF_ERROR(Route(x, n, s, load));
  // Without TP the experts add straight into the residual stream; with TP into a zeroed
  // partial sum that the group reduces before it joins the residual.
  TensorView acc = hidden;
  if (group_ != nullptr) {
    acc = View(*s.partial, n, n_embd_);
    s.zeros.resize(static_cast<size_t>(n * n_embd_), 0.0f);
    CASCADE_RETURN_IF_ERROR(
        backend_->CopyIn(acc.data, s.zeros.data(), static_cast<size_t>(n * n_embd_) * sizeof(float)));
  }
  if (on_device) {
    const TensorView logits = View(*s.logits, n, n_experts_);
    CASCADE_RETURN_IF_ERROR(router_.Forward(logits, x, router_bias_));
    CASCADE_RETURN_IF_ERROR(backend_->RoutedExperts(acc, x, logits, *device_experts_,
                                                    {n_experts_, top_k_, expert_begin_, norm_topk_}, device_load));
  } else {
    CASCADE_RETURN_IF_ERROR(RunExperts(acc, x, s));
  }
  if (n_ff_shared_ > 0) CASCADE_RETURN_IF_ERROR(RunShared(acc, x, s));
  if (group_ == nullptr) return absl::OkStatus();
  CASCADE_RETURN_IF_ERROR(group_->AllReduceSum(acc.As<float>(), static_cast<size_t>(acc.NumElements())));
  return backend_->AddInPlace(hidden, acc);
}

}  // namespace cascade::model
