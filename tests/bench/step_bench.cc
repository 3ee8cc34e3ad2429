// A worker's decode step against its forward (not a test; scripts/bench_step.sh runs it):
// the same model, batch and context on the same backend, timed two ways.
//  * forward: Transformer::Forward with the LM head, the logit rows copied to the host, as
//    a worker's forward does: the floor a step can reach.
//  * step: StageExecutor::Execute of a one-stage worker on a StepRequest proto, which adds
//    what a worker does around the forward (flattening and checking the request, the
//    sequences' histories, per-row sampling with its logprob, the result proto).
//  * host sampler: sampling::Sampler over the forward's rows, one after the other as the
//    worker samples them: the share of the step that sampling on the host costs.
// Every sequence holds `context` tokens (prefilled first), then `steps` decode steps of one
// token per sequence are timed; each figure is the median step. Greedy by default (the
// case the issue measured); --sampled uses temperature 0.8, top-k 40, top-p 0.95.
// Usage: step_bench --model GGUF [--batches 1,32] [--context 128] [--steps 8] [--threads N]
//                   [--sampled] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kernels/ops.h"
#include "model/format/model_files.h"
#include "model/kv_cache.h"
#include "model/transformer.h"
#include "sampling/sampler.h"
#include "tests/bench/bench_util.h"
#include "worker/stage_executor.h"

namespace {

using namespace cascade;

constexpr int64_t kBlock = 16;

using cascade::SecondsSince;
void Check(const absl::Status& s, const std::string& what) { bench::Check(s, "step_bench", what); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Options {
  std::string model, json;
  std::vector<int> batches = {1, 32};
  int64_t context = 128;
  int steps = 8;
  int threads = 2;
  bool sampled = false;
};

// The token fed to sequence b at position p: any id, the same in both runs.
int32_t TokenAt(int b, int64_t p, int64_t vocab) { return static_cast<int32_t>((b * 131 + p * 7 + 3) % vocab); }

std::vector<int32_t> Table(int b, int64_t blocks_per_seq) {
  std::vector<int32_t> t(blocks_per_seq);
  std::iota(t.begin(), t.end(), static_cast<int32_t>(b * blocks_per_seq));
  return t;
}

// The in-process forward: Transformer::Forward with the LM head, logits to the host.
class ForwardRunner {
 public:
  ForwardRunner(const Options& o, const model::ModelFiles& files, int batch) : o_(o), batch_(batch) {
    backend_ = kernels::MakeCpuBackend({.n_threads = o.threads});
    auto t = model::Transformer::Load(files, backend_.get(), {});
    Check(t.status(), "load");
    t_ = *std::move(t);
    V_ = t_->config().n_vocab;
    per_seq_ = (o.context + o.steps + kBlock - 1) / kBlock;
    auto cache = model::KvCache::Create(t_->CacheOptions(per_seq_ * batch, kBlock, DType::kF16), backend_.get());
    Check(cache.status(), "kv cache");
    cache_ = std::make_unique<model::KvCache>(*std::move(cache));
    for (int b = 0; b < batch; ++b) Run(0, o.context, b, 1);
  }
  // Decode step s (one token per sequence); the logits stay in logits().
  void Step(int s) { Run(o_.context + s, 1, 0, batch_); }
  std::span<float> row(int b) { return std::span<float>(logits_.data() + static_cast<size_t>(b) * V_, V_); }

 private:
  void Run(int64_t past, int64_t n_new, int first, int count) {
    std::vector<int32_t> tokens, pos;
    std::vector<kernels::AttentionSeq> seqs;
    std::vector<int64_t> rows;
    for (int b = first; b < first + count; ++b) {
      tables_.resize(batch_);
      if (tables_[b].empty()) tables_[b] = Table(b, per_seq_);
      seqs.push_back({static_cast<int64_t>(tokens.size()), n_new, past, tables_[b]});
      for (int64_t i = 0; i < n_new; ++i) {
        tokens.push_back(TokenAt(b, past + i, V_));
        pos.push_back(static_cast<int32_t>(past + i));
      }
      rows.push_back(static_cast<int64_t>(tokens.size()) - 1);
    }
    logits_.resize(static_cast<size_t>(count) * V_);
    Check(t_->Forward({tokens, pos, seqs, rows}, *cache_, TensorView(logits_.data(), DType::kF32, {count, V_})),
          "forward");
  }

  const Options& o_;
  int batch_;
  int64_t V_ = 0, per_seq_ = 0;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<model::Transformer> t_;
  std::unique_ptr<model::KvCache> cache_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<float> logits_;
};

// A one-stage worker fed StepRequest protos, as the coordinator feeds it.
class WorkerRunner {
 public:
  WorkerRunner(const Options& o, const model::ModelFiles& files, int batch) : o_(o), batch_(batch) {
    V_ = files.config.n_vocab;
    per_seq_ = (o.context + o.steps + kBlock - 1) / kBlock;
    worker::StageExecutorOptions so;
    so.model_path = o.model;
    so.last_layer = files.config.n_layers;
    so.kv_blocks = per_seq_ * batch;
    so.kv_block_size = kBlock;
    so.n_threads = o.threads;
    auto e = worker::StageExecutor::Create(so, nullptr, nullptr, [](double) {});
    Check(e.status(), "worker");
    e_ = *std::move(e);
    for (int b = 0; b < batch; ++b) {
      v1::StepRequest req;
      req.set_step_id(++step_id_);
      Add(req, b, 0, o.context);
      Execute(req);
    }
  }
  void Step(int s) {
    v1::StepRequest req;
    req.set_step_id(++step_id_);
    for (int b = 0; b < batch_; ++b) Add(req, b, o_.context + s, 1);
    Execute(req);
  }

 private:
  void Add(v1::StepRequest& req, int b, int64_t past, int64_t n_new) const {
    v1::StepSequence* s = req.add_seqs();
    s->set_seq_id(b);
    s->set_n_past(past);
    for (int64_t i = 0; i < n_new; ++i) s->add_tokens(TokenAt(b, past + i, V_));
    for (int32_t block : Table(b, per_seq_)) s->add_block_table(block);
    s->set_sample(true);
    if (past == 0) {
      s->set_reset(true);
      v1::StepSampling* p = s->mutable_sampling();
      p->set_temperature(o_.sampled ? 0.8f : 0.0f);
      p->set_top_k(40);
      p->set_top_p(0.95f);
      p->set_seed(static_cast<uint64_t>(b) + 1);
      for (int64_t i = 0; i < n_new; ++i) s->add_history(TokenAt(b, i, V_));
    }
  }
  void Execute(const v1::StepRequest& req) {
    auto r = e_->Execute(req);
    Check(r.status(), "step");
    if (r->code() != 0) Check(absl::InternalError(r->error()), "step");
  }

  const Options& o_;
  int batch_;
  int64_t V_ = 0, per_seq_ = 0, step_id_ = 0;
  std::unique_ptr<worker::StageExecutor> e_;
};

struct Times {
  double forward = 0, step = 0, sample = 0;  // Medians, seconds.
};

// Both runners on the same batch, their steps interleaved so that both see the same
// machine (a shared one drifts), and today's host sampler over the forward's rows.
Times Measure(const Options& o, const model::ModelFiles& files, int batch) {
  ForwardRunner fwd(o, files, batch);
  WorkerRunner step(o, files, batch);
  const sampling::SamplingParams params{
      .temperature = o.sampled ? 0.8f : 0.0f, .top_k = 40, .top_p = 0.95f, .min_p = 0};
  const std::vector<int32_t> history(o.context, 1);
  std::vector<double> f, w, s;
  for (int i = 0; i < o.steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fwd.Step(i);
    f.push_back(SecondsSince(t0));
    t0 = std::chrono::steady_clock::now();
    for (int b = 0; b < batch; ++b) sampling::Sampler(params).Sample(fwd.row(b), history);
    s.push_back(SecondsSince(t0));
    t0 = std::chrono::steady_clock::now();
    step.Step(i);
    w.push_back(SecondsSince(t0));
  }
  return {Median(f), Median(w), Median(s)};
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) Check(absl::InvalidArgumentError(a + " needs a value"), "usage");
      return argv[++i];
    };
    if (a == "--model") {
      o.model = value();
    } else if (a == "--json") {
      o.json = value();
    } else if (a == "--batches") {
      o.batches.clear();
      for (absl::string_view b : absl::StrSplit(value(), ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(b, &n) || n <= 0) Check(absl::InvalidArgumentError("bad --batches"), "usage");
        o.batches.push_back(n);
      }
    } else if (a == "--context") {
      o.context = std::stoll(value());
    } else if (a == "--steps") {
      o.steps = std::stoi(value());
    } else if (a == "--threads") {
      o.threads = std::stoi(value());
    } else if (a == "--sampled") {
      o.sampled = true;
    } else {
      Check(absl::InvalidArgumentError("unknown option " + a), "usage");
    }
  }
  if (o.model.empty()) Check(absl::InvalidArgumentError("--model is required"), "usage");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  auto files = model::OpenModelFiles(o.model);
  Check(files.status(), o.model);
  std::printf("%s: vocabulary %lld, %d threads, context %lld, %s, median of %d decode steps\n", o.model.c_str(),
              static_cast<long long>(files->config.n_vocab), o.threads, static_cast<long long>(o.context),
              o.sampled ? "sampled (T 0.8, top-k 40, top-p 0.95)" : "greedy", o.steps);
  std::printf("%6s %12s %12s %8s %18s\n", "batch", "forward ms", "step ms", "ratio", "host sampler ms");
  nlohmann::json rows = nlohmann::json::array();
  for (int batch : o.batches) {
    const Times t = Measure(o, *files, batch);
    const double fwd = t.forward, step = t.step;
    std::printf("%6d %12.2f %12.2f %8.3f %18.2f\n", batch, fwd * 1e3, step * 1e3, step / fwd, t.sample * 1e3);
    std::fflush(stdout);
    rows.push_back({{"batch", batch},
                    {"forward_ms", fwd * 1e3},
                    {"step_ms", step * 1e3},
                    {"ratio", step / fwd},
                    {"host_sampler_ms", t.sample * 1e3}});
  }
  if (!o.json.empty()) {
    std::ofstream(o.json) << nlohmann::json{{"model", o.model},     {"n_vocab", files->config.n_vocab},
                                            {"threads", o.threads}, {"context", o.context},
                                            {"sampled", o.sampled}, {"rows", rows}}
                                 .dump(2)
                          << "\n";
  }
  return 0;
}
