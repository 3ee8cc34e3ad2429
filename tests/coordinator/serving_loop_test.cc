// ServingLoop and StageWorkers against a fake worker: an in-process Worker service over real gRPC on
// loopback that loads nothing and answers each step with the token its position calls
// for (TokenAt). What the serving loop streams is then known exactly, so the tests see the
// scheduling itself: every sequence's positions follow on without a gap or a repeat
// (checked by the worker on every step), batches of several requests, preemption by a
// small KV pool and recomputation, cancellation, and the blocks coming back.
#include "coordinator/serving/serving_loop.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <thread>

#include "coordinator/planner.h"
#include "coordinator/serving/replicas.h"
#include "grpcpp/server_builder.h"
#include "model/format/tokenizer_files.h"
#include "tests/test_support.h"

namespace cascade::coordinator {
namespace {

// The token the fake worker samples for the position `pos` of any sequence.
int32_t TokenAt(int64_t pos) { return static_cast<int32_t>(100 + pos % 50); }

class FakeWorker final : public v1::Worker::Service {
 public:
  grpc::Status LoadShard(grpc::ServerContext*, const v1::LoadShardRequest*,
                         grpc::ServerWriter<v1::LoadProgress>* writer) override {
    v1::LoadProgress p;
    p.set_fraction(1.0);
    p.set_done(true);
    writer->Write(p);
    return grpc::Status::OK;
  }

  grpc::Status Step(grpc::ServerContext*, grpc::ServerReaderWriter<v1::StepResult, v1::StepRequest>* stream) override {
    v1::StepRequest req;
    while (stream->Read(&req)) {
      if (steps_ == die_at_step_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the fake worker died");
      v1::StepResult result;
      result.set_step_id(req.step_id());
      for (const v1::StepSequence& s : req.seqs()) {
        Check(s);
        if (!s.sample()) continue;
        v1::SampledToken* t = result.add_tokens();
        t->set_seq_id(s.seq_id());
        t->set_token(TokenAt(s.n_past() + s.tokens_size()));
      }
      steps_ += 1;
      stream->Write(result);
    }
    return grpc::Status::OK;
  }

  // Sequence entries that broke the positions: an entry that is not a reset (a sequence's
  // first chunk, or its recomputation, which may start past prefix-cached blocks) must start
  // at the position after the last one fed; and a generated token (>= 100: prompts here use
  // ids below) must come back at the position TokenAt gave it for.
  int violations() const { return violations_.load(); }
  int steps() const { return steps_.load(); }
  // Ends the step stream with an error instead of answering step `n` (a worker's death).
  void DieAtStep(int n) { die_at_step_ = n; }

 private:
  void Check(const v1::StepSequence& s) {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t& next = next_pos_[s.seq_id()];
    if (!s.reset() && s.n_past() != next) ++violations_;
    for (int i = 0; i < s.tokens_size(); ++i) {
      if (s.tokens(i) >= 100 && s.tokens(i) != TokenAt(s.n_past() + i)) ++violations_;
    }
    next = s.n_past() + s.tokens_size();
  }

  std::mutex mu_;
  std::map<int64_t, int64_t> next_pos_;
  std::atomic<int> violations_{0}, steps_{0}, die_at_step_{-1};
};

// One PP=1 cluster on a fake worker, and a serving loop over it.
class ServingLoopTest : public ::testing::Test {
 protected:
  // A fake worker's gRPC server on loopback; its address.
  std::string Serve(FakeWorker& worker, std::unique_ptr<grpc::Server>& server) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&worker);
    server = builder.BuildAndStart();
    return server != nullptr ? "127.0.0.1:" + std::to_string(port) : "";
  }

  // Registers the worker at `address` for the cluster's one stage.
  void Register(const std::string& address) {
    v1::RegisterRequest reg;
    reg.set_address(address);
    reg.set_node("n0");
    reg.set_device("cpu");
    ASSERT_TRUE(workers_->Register(reg).ok());
  }

  void Start(int32_t kv_blocks, int max_num_seqs = 8) {
    CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
    auto tokenizer = model::LoadTokenizerAt(path);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    const std::string address = Serve(worker_, server_);
    ASSERT_FALSE(address.empty());
    PlannerInput in;
    in.layer_bytes = {1, 1};
    in.devices = {{"n0", "127.0.0.1", Device{}}};
    absl::StatusOr<Plan> plan = PlanStages(in);
    ASSERT_TRUE(plan.ok()) << plan.status();
    StageWorkersOptions options;
    options.model_path = path;
    options.kv_blocks = kv_blocks;
    options.kv_block_size = 16;
    options.dead_after_ms = 600000;  // The fake sends no heartbeats.
    workers_ = std::make_unique<StageWorkers>(*plan, options);
    Register(address);
    ASSERT_TRUE(workers_->BringUp(std::chrono::seconds(20)).ok());
    SchedulerOptions sched;
    sched.max_num_seqs = max_num_seqs;
    sched.kv_block_size = 16;
    loop_ = std::make_unique<ServingLoop>(workers_.get(), tokenizer_.get(), sched);
    loop_->ResetKvBlocks(kv_blocks);
    loop_->Start();
  }

  void TearDown() override {
    if (loop_ != nullptr) loop_->Stop();
    if (workers_ != nullptr) workers_->Close();
    if (server_ != nullptr) server_->Shutdown();
    if (replacement_server_ != nullptr) replacement_server_->Shutdown();
  }

  // A greedy request of `prompt_len` prompt ids (all below 100) for `max_tokens` tokens.
  static ServingRequest Request(int64_t prompt_len, int32_t max_tokens, const std::string& id) {
    ServingRequest r;
    r.request_id = id;
    for (int64_t i = 0; i < prompt_len; ++i) r.prompt.push_back(static_cast<int32_t>(3 + i % 90));
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.stops.ignore_eos = true;
    r.speculate = false;
    return r;
  }
  std::shared_ptr<RequestChannel> Submit(int64_t prompt_len, int32_t max_tokens, const std::string& id) {
    return loop_->Submit(Request(prompt_len, max_tokens, id));
  }

  // Every token of a request until it ends, its finish reason and final status.
  struct Output {
    std::vector<int32_t> ids;
    std::string finish_reason;
    absl::Status status;
  };
  static Output Drain(RequestChannel& ch) {
    Output out;
    for (;;) {
      absl::MutexLock lock(&ch.mu);
      ch.mu.Await(absl::Condition(
          +[](RequestChannel* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu) { return !c->out.empty() || c->done; }, &ch));
      while (!ch.out.empty()) {
        const v1::GenerateResponse& m = ch.out.front();
        out.ids.insert(out.ids.end(), m.token_ids().begin(), m.token_ids().end());
        if (!m.finish_reason().empty()) out.finish_reason = m.finish_reason();
        ch.out.pop_front();
      }
      if (ch.done) {
        out.status = ch.status;
        return out;
      }
    }
  }

  // The serving loop's stats once every block is free again (they are published by its loop),
  // or after 2 s.
  ServingStats SettledStats() {
    ServingStats st = loop_->Stats();
    for (int i = 0; i < 200 && st.scheduler.n_free_blocks != st.scheduler.n_total_blocks; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      st = loop_->Stats();
    }
    return st;
  }

  static std::vector<int32_t> Expected(int64_t prompt_len, int32_t n) {
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < n; ++i) ids.push_back(TokenAt(prompt_len + i));
    return ids;
  }

  FakeWorker worker_, replacement_;
  std::unique_ptr<grpc::Server> server_, replacement_server_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<StageWorkers> workers_;
  std::unique_ptr<ServingLoop> loop_;
};

TEST_F(ServingLoopTest, ConcurrentRequestsGetWhatTheirPositionsSample) {
  Start(/*kv_blocks=*/64);
  if (loop_ == nullptr) return;
  const int64_t lens[] = {1, 5, 17, 33, 40};
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 5; ++i) channels.push_back(Submit(lens[i], 20 + i, "r" + std::to_string(i)));
  for (int i = 0; i < 5; ++i) {
    const Output out = Drain(*channels[i]);
    EXPECT_TRUE(out.status.ok()) << out.status;
    EXPECT_EQ(out.ids, Expected(lens[i], 20 + i)) << "request " << i;
    EXPECT_EQ(out.finish_reason, "length");
  }
  EXPECT_EQ(worker_.violations(), 0);
  // Batched: far fewer steps than the 110 tokens one at a time would take.
  EXPECT_LT(worker_.steps(), 60);
  const ServingStats st = SettledStats();
  EXPECT_EQ(st.finished, 5);
  EXPECT_EQ(st.generation_tokens, 20 + 21 + 22 + 23 + 24);
  EXPECT_EQ(st.scheduler.n_free_blocks, st.scheduler.n_total_blocks);
}

TEST_F(ServingLoopTest, ASmallKvPoolPreemptsAndRecomputesTheSameTokens) {
  // 12 blocks of 16: four requests of 100 positions (7 blocks each) cannot all run.
  Start(/*kv_blocks=*/12);
  if (loop_ == nullptr) return;
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 4; ++i) channels.push_back(Submit(40, 60, "p" + std::to_string(i)));
  for (int i = 0; i < 4; ++i) {
    const Output out = Drain(*channels[i]);
    EXPECT_TRUE(out.status.ok()) << out.status;
    EXPECT_EQ(out.ids, Expected(40, 60)) << "request " << i;
  }
  EXPECT_EQ(worker_.violations(), 0);
  const ServingStats st = SettledStats();
  EXPECT_GT(st.scheduler.n_preemptions, 0) << "the pool never ran short: the test shows nothing";
  EXPECT_EQ(st.scheduler.n_free_blocks, st.scheduler.n_total_blocks);
}

TEST_F(ServingLoopTest, ACancelledRequestEndsAndGivesItsBlocksBack) {
  Start(/*kv_blocks=*/64);
  if (loop_ == nullptr) return;
  std::shared_ptr<RequestChannel> long_one = Submit(8, 100000 / 16, "long");
  std::shared_ptr<RequestChannel> short_one = Submit(8, 10, "short");
  EXPECT_EQ(Drain(*short_one).ids, Expected(8, 10));
  long_one->cancelled = true;
  loop_->Wake();
  const Output out = Drain(*long_one);
  EXPECT_FALSE(out.status.ok());
  EXPECT_LT(out.ids.size(), static_cast<size_t>(100000 / 16));
  const ServingStats st = SettledStats();
  EXPECT_EQ(st.scheduler.n_free_blocks, st.scheduler.n_total_blocks);
  EXPECT_EQ(worker_.violations(), 0);
}

// No request is lost to a worker's death: the requests wait (suspended) until a
// replacement registers, then are recomputed there and go on where they stopped, with the
// tokens their positions call for.
TEST_F(ServingLoopTest, AWorkersDeathCostsARecomputeNotARequest) {
  Start(/*kv_blocks=*/64);
  if (loop_ == nullptr) return;
  worker_.DieAtStep(10);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 3; ++i) channels.push_back(Submit(12 + i, 40, "d" + std::to_string(i)));
  for (int i = 0; i < 200 && worker_.steps() < 10; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // The death is noticed.
  const std::string address = Serve(replacement_, replacement_server_);
  ASSERT_FALSE(address.empty());
  Register(address);
  for (int i = 0; i < 3; ++i) {
    const Output out = Drain(*channels[i]);
    EXPECT_TRUE(out.status.ok()) << out.status;
    EXPECT_EQ(out.ids, Expected(12 + i, 40)) << "request " << i;
  }
  EXPECT_EQ(worker_.steps(), 10) << "the first worker answered past its death";
  EXPECT_GT(replacement_.steps(), 0);
  EXPECT_EQ(replacement_.violations(), 0);
}

// Data parallelism over fake workers: two replicas of one stage each, on nodes n0 and n1.
// Requests spread over both and get their positions' tokens; when one replica's worker
// dies, its requests move to the other (Replicas' evacuation) and finish there.
class ReplicasTest : public ServingLoopTest {
 protected:
  void StartReplicas(int die_at_step) {
    CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
    auto tokenizer = model::LoadTokenizerAt(path);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    std::vector<Plan> plans;
    for (const char* node : {"n0", "n1"}) {
      PlannerInput in;
      in.layer_bytes = {1, 1};
      in.devices = {{node, "127.0.0.1", Device{}}};
      absl::StatusOr<Plan> plan = PlanStages(in);
      ASSERT_TRUE(plan.ok()) << plan.status();
      plans.push_back(*plan);
    }
    StageWorkersOptions options;
    options.model_path = path;
    options.kv_blocks = 64;
    options.kv_block_size = 16;
    options.dead_after_ms = 600000;
    SchedulerOptions sched;
    sched.kv_block_size = 16;
    sched.n_kv_blocks = 64;
    replicas_ = std::make_unique<Replicas>(plans, options, tokenizer_.get(), sched, SpeculationOptions{});
    replacement_.DieAtStep(die_at_step);  // Replica 1's worker.
    FakeWorker* workers[] = {&worker_, &replacement_};
    std::unique_ptr<grpc::Server>* servers[] = {&server_, &replacement_server_};
    for (int r = 0; r < 2; ++r) {
      const std::string address = Serve(*workers[r], *servers[r]);
      v1::RegisterRequest reg;
      reg.set_address(address);
      reg.set_node(r == 0 ? "n0" : "n1");
      reg.set_device("cpu");
      ASSERT_TRUE(replicas_->workers(r).Register(reg).ok());
    }
    ASSERT_TRUE(replicas_->BringUp(std::chrono::seconds(20)).ok());
    replicas_->Start();
  }

  void TearDown() override {
    if (replicas_ != nullptr) replicas_->Stop();
    ServingLoopTest::TearDown();
  }

  std::shared_ptr<RequestChannel> SubmitTo(int64_t prompt_len, int32_t max_tokens, const std::string& id) {
    return replicas_->Submit(Request(prompt_len, max_tokens, id));
  }

  std::unique_ptr<Replicas> replicas_;
};

TEST_F(ReplicasTest, RequestsSpreadAndADeadReplicasMoveToTheOther) {
  StartReplicas(/*die_at_step=*/15);
  if (replicas_ == nullptr) return;
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 6; ++i) channels.push_back(SubmitTo(10 + i, 50, "dp" + std::to_string(i)));
  for (int i = 0; i < 6; ++i) {
    const Output out = Drain(*channels[i]);
    EXPECT_TRUE(out.status.ok()) << out.status;
    EXPECT_EQ(out.ids, Expected(10 + i, 50)) << "request " << i;
  }
  EXPECT_EQ(replacement_.steps(), 15) << "replica 1's worker should have died at its 15th step";
  EXPECT_GT(worker_.steps(), 0);
  EXPECT_EQ(worker_.violations(), 0);
  EXPECT_EQ(replacement_.violations(), 0);
  v1::ClusterStatus status;
  replicas_->FillStatus(&status);
  EXPECT_EQ(status.replicas_serving(), 1);  // Replica 1 waits for a new worker.
}

}  // namespace
}  // namespace cascade::coordinator
