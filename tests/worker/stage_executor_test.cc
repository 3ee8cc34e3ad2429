// StageExecutor's speculative paths on a real model, in process (one stage, no data
// plane): verification of drafted tokens with KV rollback, and the drafter.
//  * Goldens are stories260K's 20 greedy ids from ../shared/testdata/README.md (a
//    float64 forward), so a verify step that accepts a wrong draft, or reads a rejected
//    draft's stale KV, changes the ids and fails.
//  * Rollback is the coordinator's: the next step's n_past says which positions are valid;
//    the test plays that role, as the scheduler does.
// And a pipeline of executors in threads (PP=2, optionally TP=2 in each stage) on
// testing::GuardedBackend, whose memory the host cannot touch between ops: the hand-off
// between stages and the TP gather go through host copies, as a GPU worker's do over UCX.
#include "worker/stage_executor.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "comm/rendezvous.h"
#include "comm/ucx_communicator.h"
#include "tests/guarded_backend.h"
#include "tests/test_support.h"

namespace cascade::worker {
namespace {

const std::vector<int32_t> kGolden = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298,
                                      315, 421, 395, 317, 426, 338, 401, 396, 267, 337};

std::unique_ptr<StageExecutor> Make(const std::string& path, bool draft = false, int64_t last_layer = -1) {
  StageExecutorOptions o;
  o.model_path = path;
  o.first_layer = 0;
  o.last_layer = last_layer;
  o.kv_blocks = 8;
  o.kv_block_size = 4;  // Small blocks: verify steps cross block boundaries.
  o.draft = draft;
  if (last_layer < 0) {
    auto files = model::OpenModelFiles(path);
    EXPECT_TRUE(files.ok());
    o.last_layer = files->config.n_layers;
  }
  auto e = StageExecutor::Create(o, nullptr, nullptr, [](double) {});
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

v1::StepSequence* AddSeq(v1::StepRequest& step, const std::vector<int32_t>& tokens, int64_t n_past, int n_draft = 0) {
  v1::StepSequence* s = step.add_seqs();
  s->set_seq_id(7);
  s->mutable_tokens()->Add(tokens.begin(), tokens.end());
  s->set_n_past(n_past);
  for (int b = 0; b < 8; ++b) s->add_block_table(7 - b);  // Not the identity: tables are honoured.
  s->set_sample(true);
  s->set_n_draft(n_draft);
  s->mutable_sampling()->set_temperature(0);
  s->mutable_sampling()->set_top_p(1);
  s->mutable_sampling()->set_repetition_penalty(1);
  return s;
}

std::vector<int32_t> Tokens(const v1::StepResult& r) {
  std::vector<int32_t> out;
  for (const auto& t : r.tokens()) out.push_back(t.token());
  return out;
}

// Drafts that are partly right and partly wrong: the emitted tokens are always the golden
// ones, 1..k+1 per step, and wrong drafts' KV never leaks into later steps.
TEST(StageExecutorTest, GreedyVerificationEmitsExactlyThePlainDecode) {
  CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
  auto e = Make(path);
  ASSERT_NE(e, nullptr);
  std::vector<int32_t> seq = {1};  // BOS, then generated tokens.
  int64_t step_id = 1, n_cached = 0;
  {
    v1::StepRequest step;
    step.set_step_id(step_id++);
    AddSeq(step, seq, 0)->set_reset(true);
    auto r = e->Execute(step);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(Tokens(*r), std::vector<int32_t>{kGolden[0]});
    seq.push_back(kGolden[0]);
    n_cached = 1;
  }
  int round = 0, max_emitted = 0;
  while (seq.size() < kGolden.size() + 1) {
    const int64_t done = static_cast<int64_t>(seq.size()) - 1;  // Golden tokens emitted.
    const int k = std::min<int64_t>(1 + round % 4, kGolden.size() - done);
    std::vector<int32_t> drafts(kGolden.begin() + done, kGolden.begin() + done + k);
    // Every third round, corrupt the draft at index round % k (a token never right there).
    const int wrong = round % 3 == 2 ? round % k : -1;
    if (wrong >= 0) drafts[wrong] = (drafts[wrong] + 1) % 512;
    std::vector<int32_t> fed = {seq.back()};
    fed.insert(fed.end(), drafts.begin(), drafts.end());
    v1::StepRequest step;
    step.set_step_id(step_id++);
    AddSeq(step, fed, n_cached, k);
    auto r = e->Execute(step);
    ASSERT_TRUE(r.ok()) << r.status();
    const std::vector<int32_t> got = Tokens(*r);
    const size_t expect_n = wrong >= 0 ? wrong + 1 : k + 1;
    ASSERT_EQ(got.size(), expect_n) << "round " << round;
    for (size_t i = 0; i < got.size() && done + i < kGolden.size(); ++i) {
      ASSERT_EQ(got[i], kGolden[done + i]) << "round " << round << " token " << i;
    }
    max_emitted = std::max<int>(max_emitted, static_cast<int>(got.size()));
    seq.insert(seq.end(), got.begin(), got.end());
    n_cached += static_cast<int64_t>(got.size());  // The fed token + the accepted drafts.
    ++round;
  }
  EXPECT_GE(max_emitted, 4);
}

// Penalties see each prompt token once however the prompt is chunked: the coordinator's
// first chunk carries the whole history (prompt and generated tokens), so later chunks
// add nothing to it. Sampled at temperature 1 with a frequency penalty over many seeds, a
// prompt fed in one step and the same prompt fed in two chunks give the same tokens.
TEST(StageExecutorTest, ChunkedPromptCountsEachTokenOnceForPenalties) {
  CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315};
  const auto sample = [&](uint64_t seed, bool chunked) {
    auto e = Make(path);
    const auto configure = [&](v1::StepSequence* s) {
      s->mutable_sampling()->set_temperature(4);  // A flat distribution: every logit counts.
      s->mutable_sampling()->set_frequency_penalty(2);
      s->mutable_sampling()->set_seed(seed);
    };
    v1::StepRequest first;
    first.set_step_id(1);
    const size_t n_first = chunked ? 6 : prompt.size();
    v1::StepSequence* s = AddSeq(first, std::vector<int32_t>(prompt.begin(), prompt.begin() + n_first), 0);
    s->set_reset(true);
    s->mutable_history()->Add(prompt.begin(), prompt.end());
    s->set_sample(!chunked);
    configure(s);
    auto r = e->Execute(first);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!chunked) return Tokens(*r);
    v1::StepRequest second;
    second.set_step_id(2);
    configure(AddSeq(second, std::vector<int32_t>(prompt.begin() + n_first, prompt.end()), n_first));
    r = e->Execute(second);
    EXPECT_TRUE(r.ok()) << r.status();
    return Tokens(*r);
  };
  for (uint64_t seed = 1; seed <= 24; ++seed) EXPECT_EQ(sample(seed, true), sample(seed, false)) << "seed " << seed;
}

// Verification at temperature > 0 emits 1..k+1 tokens whose logprobs are the model's.
TEST(StageExecutorTest, SampledVerificationReportsEachTokensLogprob) {
  CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
  auto e = Make(path);
  ASSERT_NE(e, nullptr);
  v1::StepRequest step;
  step.set_step_id(1);
  v1::StepSequence* s = AddSeq(step, {1, kGolden[0], kGolden[1], kGolden[2]}, 0, 2);
  s->set_reset(true);
  s->mutable_sampling()->set_temperature(1);
  s->mutable_sampling()->set_seed(3);
  s->mutable_sampling()->set_logprobs(1);
  auto r = e->Execute(step);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GE(r->tokens_size(), 1);
  ASSERT_LE(r->tokens_size(), 3);
  for (const auto& t : r->tokens()) {
    EXPECT_LT(t.logprob(), 0.0f);
    EXPECT_GT(t.logprob(), -30.0f);
  }
}

// The rows of a step are sampled in parallel over the worker's threads: each sequence's
// sampler is its own and seeds by position, so six sequences (greedy, sampled with
// different seeds and penalties, and one verifying drafts) draw, step after step, exactly
// what one thread draws, and report the same logprobs.
TEST(StageExecutorTest, ParallelSamplingDrawsWhatOneThreadDraws) {
  CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
  std::vector<std::vector<std::pair<int32_t, float>>> runs;
  for (int threads : {1, 3}) {
    StageExecutorOptions o;
    o.model_path = path;
    o.last_layer = 5;
    o.kv_blocks = 64;
    o.kv_block_size = 4;
    o.n_threads = threads;
    auto e = StageExecutor::Create(o, nullptr, nullptr, [](double) {});
    ASSERT_TRUE(e.ok()) << e.status();
    std::vector<int64_t> n_past(6, 0);
    std::vector<int32_t> last(6, 1);
    std::vector<std::pair<int32_t, float>> got;
    for (int step_id = 1; step_id <= 6; ++step_id) {
      v1::StepRequest step;
      step.set_step_id(step_id);
      for (int q = 0; q < 6; ++q) {
        v1::StepSequence* s = step.add_seqs();
        s->set_seq_id(q);
        const bool verify = q == 5 && step_id > 1;
        std::vector<int32_t> tokens = step_id == 1 ? std::vector<int32_t>{1, 403, 407} : std::vector<int32_t>{last[q]};
        if (verify) tokens.insert(tokens.end(), {261, 378});  // Two drafts.
        s->mutable_tokens()->Add(tokens.begin(), tokens.end());
        s->set_n_past(n_past[q]);
        for (int b = 0; b < 10; ++b) s->add_block_table(q * 10 + b);
        s->set_sample(true);
        s->set_n_draft(verify ? 2 : 0);
        if (step_id == 1) {
          s->set_reset(true);
          v1::StepSampling* p = s->mutable_sampling();
          p->set_temperature(q == 0 ? 0.0f : 1.0f);
          p->set_top_k(q == 2 ? 8 : 0);
          p->set_top_p(q == 3 ? 0.9f : 1.0f);
          p->set_repetition_penalty(q == 4 ? 1.5f : 1.0f);
          p->set_seed(100 + q);
          p->set_logprobs(q == 1 ? 3 : 0);
        }
      }
      auto r = (*e)->Execute(step);
      ASSERT_TRUE(r.ok()) << r.status();
      std::vector<int> emitted(6, 0);
      for (const auto& t : r->tokens()) {
        got.emplace_back(t.token(), t.logprob());
        for (float lp : t.top_logprobs()) got.emplace_back(-1, lp);
        last[t.seq_id()] = t.token();
        ++emitted[t.seq_id()];
      }
      for (int q = 0; q < 6; ++q) {
        ASSERT_GE(emitted[q], 1);
        // Fed positions, less the drafts that were rejected (the next step overwrites them).
        n_past[q] += step.seqs(q).tokens_size() - step.seqs(q).n_draft() + (emitted[q] - 1);
      }
    }
    runs.push_back(std::move(got));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

// The drafter holding the whole model proposes the model's own greedy continuation; an
// early-exit drafter (first layer + head) proposes in-vocabulary tokens.
TEST(StageExecutorTest, DrafterProposesGreedyTokens) {
  CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
  auto full = Make(path, /*draft=*/true);
  auto early = Make(path, /*draft=*/true, /*last_layer=*/1);
  ASSERT_NE(full, nullptr);
  ASSERT_NE(early, nullptr);
  for (StageExecutor* e : {full.get(), early.get()}) {
    v1::StepRequest step;
    step.set_step_id(1);
    std::vector<int32_t> prompt = {1, kGolden[0], kGolden[1]};
    v1::StepSequence* s = AddSeq(step, prompt, 0);
    s->set_sample(false);
    s->set_propose(6);
    auto r = e->Execute(step);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->draft());
    const std::vector<int32_t> got = Tokens(*r);
    ASSERT_EQ(got.size(), 6u);
    if (e == full.get()) {
      EXPECT_EQ(got, std::vector<int32_t>(kGolden.begin() + 2, kGolden.begin() + 8));
    } else {
      for (int32_t t : got) EXPECT_TRUE(t >= 0 && t < 512) << t;
    }
  }
}

TEST(StageExecutorTest, MalformedSpeculativeFieldsAreRefused) {
  CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
  auto e = Make(path);
  ASSERT_NE(e, nullptr);
  {
    v1::StepRequest step;
    AddSeq(step, {1, 2}, 0, 2);  // n_draft must be below the token count.
    EXPECT_STATUS_CODE(e->Execute(step), kInvalidArgument);
  }
  {
    v1::StepRequest step;
    AddSeq(step, {1, 2}, 0)->set_propose(3);  // Only drafters propose.
    auto r = e->Execute(step);
    EXPECT_STATUS_CODE(r, kInvalidArgument);
    EXPECT_NE(testing::StatusMessage(r.status()).find("does not draft"), std::string::npos);
  }
  {
    v1::StepRequest step;
    AddSeq(step, {1, 2, 3}, 0, 1)->set_sample(false);  // Verification needs sample.
    EXPECT_STATUS_CODE(e->Execute(step), kInvalidArgument);
  }
}

// Bad ids and block tables are refused (InvalidArgument) before any compute, and the
// executor then serves the next step as if the refused one never came.
TEST(StageExecutorTest, MalformedIdsAndBlocksAreRefusedAndTheNextStepRuns) {
  CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
  auto e = Make(path);
  ASSERT_NE(e, nullptr);
  using ::cascade::testing::StatusIs;
  using ::testing::HasSubstr;
  {
    v1::StepRequest step;
    AddSeq(step, {1, 512}, 0);  // stories260K has 512 tokens.
    EXPECT_THAT(e->Execute(step), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("token id 512")));
  }
  {
    v1::StepRequest step;
    AddSeq(step, {1, 2}, 0)->set_block_table(3, 8);  // The cache has blocks [0, 8).
    EXPECT_THAT(e->Execute(step), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("KV block 8")));
  }
  {
    v1::StepRequest step;
    v1::StepSequence* s = AddSeq(step, {1, 2, 3, 4, 5}, 0);
    s->mutable_block_table()->Truncate(1);  // 4 positions per block: 5 need two.
    EXPECT_THAT(e->Execute(step), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("do not cover 5")));
  }
  v1::StepRequest step;
  AddSeq(step, {1}, 0);  // BOS: the golden's first token follows.
  auto r = e->Execute(step);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Tokens(*r), std::vector<int32_t>{kGolden[0]});
}

// Stages x tp executors on guarded backends, connected by UCX in process; each runs the
// same steps (a prefill of BOS, then greedy decode), and the last stage's TP rank 0 answers.
// `full_handoff`: every TP rank sends all rows and nothing is gathered (transport.pp_handoff).
std::vector<int32_t> RunGuardedPipeline(const std::string& path, int n_stages, int tp, int n_tokens,
                                        bool full_handoff = false) {
  auto files = model::OpenModelFiles(path);
  EXPECT_TRUE(files.ok());
  const int64_t n_layers = files->config.n_layers;
  static std::atomic<int> counter{0};
  const std::string group = "pipe-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  comm::InProcessRendezvous rendezvous;
  std::vector<int32_t> out;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int stage = 0; stage < n_stages; ++stage) {
    for (int r = 0; r < tp; ++r) {
      threads.emplace_back([&, stage, r] {
        const auto connect = [&](const std::string& name, int rank, int size) {
          comm::GroupOptions g;
          g.group = group + name;
          g.rank = rank;
          g.size = size;
          g.timeout_ms = 60000;
          auto c = comm::UcxCommunicator::Create(g, &rendezvous);
          EXPECT_TRUE(c.ok()) << c.status();
          return c.ok() ? std::move(*c) : nullptr;
        };
        std::unique_ptr<comm::Communicator> tp_comm = tp > 1 ? connect("/tp" + std::to_string(stage), r, tp) : nullptr;
        std::unique_ptr<comm::Communicator> pp_comm = connect("/pp" + std::to_string(r), stage, n_stages);
        StageExecutorOptions o;
        o.model_path = path;
        o.first_layer = n_layers * stage / n_stages;
        o.last_layer = n_layers * (stage + 1) / n_stages;
        o.stage = stage;
        o.n_stages = n_stages;
        o.kv_blocks = 8;
        o.kv_block_size = 4;
        o.tp_rank = r;
        o.tp_size = tp;
        o.full_handoff = full_handoff;
        auto backend = std::make_unique<testing::GuardedBackend>();
        testing::GuardedBackend* guarded = backend.get();
        auto e = StageExecutor::Create(
            o, pp_comm.get(), tp_comm.get(), [](double) {}, std::move(backend));
        if (!e.ok()) {
          ADD_FAILURE() << "stage " << stage << " tp " << r << ": " << e.status();
          ++failures;
          return;
        }
        std::vector<int32_t> seq = {1};
        for (int i = 0; i < n_tokens; ++i) {
          v1::StepRequest step;
          step.set_step_id(i + 1);
          AddSeq(step, i == 0 ? seq : std::vector<int32_t>{seq.back()}, i == 0 ? 0 : i)->set_reset(i == 0);
          auto result = (*e)->Execute(step);
          if (!result.ok()) {
            ADD_FAILURE() << "stage " << stage << " tp " << r << " step " << i << ": " << result.status();
            ++failures;
            return;
          }
          // Every rank needs the next token to feed it: the last stage's rank 0 samples,
          // and the test, like the coordinator, hands it to all (a barrier over the group).
          if (stage == n_stages - 1 && r == 0) {
            EXPECT_EQ(result->tokens_size(), 1);
            out.push_back(result->tokens(0).token());
          }
          seq.push_back(kGolden[i]);  // The others feed the golden ids; a wrong one fails the check.
        }
        // Stages hand hidden states on through host copies, so each moved bytes out and in.
        if (n_stages > 1) {
          EXPECT_GT(guarded->bytes_out(), 0u) << "stage " << stage;
          EXPECT_GT(guarded->bytes_in(), 0u) << "stage " << stage;
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  return failures == 0 ? out : std::vector<int32_t>{};
}

TEST(StageExecutorTest, GuardedPipelineDecodesTheGolden) {
  CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
  const std::vector<int32_t> want(kGolden.begin(), kGolden.begin() + 12);
  EXPECT_EQ(RunGuardedPipeline(path, 2, 1, 12), want) << "PP=2";
  EXPECT_EQ(RunGuardedPipeline(path, 2, 2, 12), want) << "PP=2 x TP=2";
  EXPECT_EQ(RunGuardedPipeline(path, 2, 2, 12, /*full_handoff=*/true), want) << "PP=2 x TP=2, full hand-off";
}

// A cuda:N stage on a machine without that GPU fails at Create, naming the device and the
// runtime's reason (on a GPU machine tests/gpu runs it for real).
TEST(StageExecutorTest, MissingGpuIsACleanError) {
  CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
  StageExecutorOptions o;
  o.model_path = path;
  o.last_layer = 5;
  o.kv_blocks = 4;
  o.device = Device{DeviceKind::kCuda, 99};
  auto e = StageExecutor::Create(o, nullptr, nullptr, [](double) {});
  // The code depends on the machine (no driver, or too few GPUs); the message names the device.
  EXPECT_THAT(e, testing::StatusIs(::testing::Not(absl::StatusCode::kOk), ::testing::HasSubstr("cuda:99")));
}

}  // namespace
}  // namespace cascade::worker
