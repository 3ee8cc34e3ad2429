// Disaggregated serving on the workers, in process: a prefill worker (one stage, TP 1)
// computes a prompt, then sends its KV over a KV group (UCX in process) to a decode
// pipeline of another split (PP 2 x TP 2, other block ids), which never saw the prompt and
// decodes on from it. Goldens are stories260K's greedy ids from ../shared/testdata/README.md
// (a float64 forward), and each token's logprob must be the prefill worker's own when it
// decodes the same tokens itself (to 1e-4: the TP split sums in another order), so a slice
// moved to the wrong layer, head or block shows. A
// transfer whose peer never sends fails alone: the step reports it and goes on.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <thread>

#include "comm/rendezvous.h"
#include "comm/ucx_communicator.h"
#include "tests/guarded_backend.h"
#include "tests/test_support.h"
#include "worker/stage_executor.h"

namespace cascade::worker {
namespace {

const std::vector<int32_t> kGolden = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298,
                                      315, 421, 395, 317, 426, 338, 401, 396, 267, 337};

std::string FreshGroup() {
  static std::atomic<int> counter{0};
  return "disagg-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

std::unique_ptr<comm::Communicator> Connect(comm::Rendezvous& rendezvous, const std::string& group, int rank, int size,
                                            int64_t timeout_ms = 60000) {
  comm::GroupOptions g{.group = group, .rank = rank, .size = size, .timeout_ms = timeout_ms};
  auto c = comm::UcxCommunicator::Create(g, &rendezvous);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

v1::StepSequence* AddSeq(v1::StepRequest& step, const std::vector<int32_t>& tokens, int64_t n_past,
                         const std::vector<int32_t>& table) {
  v1::StepSequence* s = step.add_seqs();
  s->set_seq_id(7);
  s->mutable_tokens()->Add(tokens.begin(), tokens.end());
  s->set_n_past(n_past);
  s->mutable_block_table()->Add(table.begin(), table.end());
  s->set_sample(true);
  s->mutable_sampling()->set_temperature(0);
  s->mutable_sampling()->set_top_p(1);
  s->mutable_sampling()->set_repetition_penalty(1);
  s->mutable_sampling()->set_logprobs(1);
  return s;
}

// A piece run by the worker of KV rank `rank`, with `peer`.
void AddPiece(v1::KvTransfer* t, int rank, bool send, int peer, int64_t l0, int64_t l1, int64_t h0, int64_t h1) {
  v1::KvTransferPiece* p = t->add_pieces();
  p->set_rank(rank);
  p->set_send(send);
  p->set_peer(peer);
  p->set_first_layer(l0);
  p->set_last_layer(l1);
  p->set_head_begin(h0);
  p->set_head_end(h1);
}

StageExecutorOptions Options(const std::string& path, int64_t l0, int64_t l1, int stage, int n_stages, int r, int tp,
                             int kv_rank = 0) {
  StageExecutorOptions o;
  o.kv_rank = kv_rank;
  o.model_path = path;
  o.first_layer = l0;
  o.last_layer = l1;
  o.stage = stage;
  o.n_stages = n_stages;
  o.kv_blocks = 8;
  o.kv_block_size = 4;
  o.tp_rank = r;
  o.tp_size = tp;
  return o;
}

TEST(DisaggregationTest, ADecodePipelineOfAnotherSplitGoesOnFromTheSentKv) {
  CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
  auto files = model::OpenModelFiles(path);
  ASSERT_TRUE(files.ok());
  const int64_t n_layers = files->config.n_layers, n_kv = files->config.n_kv_heads;
  ASSERT_EQ(n_kv % 2, 0);
  const std::string group = FreshGroup();
  comm::InProcessRendezvous rendezvous;
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298};  // BOS + 10 golden.
  const std::vector<int32_t> prefill_table = {0, 1, 2, 3, 4, 5, 6, 7}, decode_table = {6, 3, 0, 5, 1, 2, 4, 7};
  const int n_prompt_blocks = 3;  // 11 positions in blocks of 4.
  constexpr int kStages = 2, kTp = 2, kDecode = 6;
  constexpr uint64_t kTransfer = 42;
  std::atomic<int> failures{0}, decoders_done{0};
  std::vector<int32_t> decoded;
  std::vector<float> logprobs, reference;
  std::vector<std::thread> threads;
  // The prefill worker: rank 0 of the KV group.
  threads.emplace_back([&] {
    auto kv = Connect(rendezvous, group + "/kv", 0, 1 + kStages * kTp);
    auto e = StageExecutor::Create(Options(path, 0, n_layers, 0, 1, 0, 1), nullptr, nullptr, [](double) {});
    if (!e.ok() || kv == nullptr) {
      ADD_FAILURE() << "prefill: " << e.status();
      ++failures;
      return;
    }
    (*e)->set_kv_comm(kv.get());
    v1::StepRequest step;
    step.set_step_id(1);
    AddSeq(step, prompt, 0, prefill_table)->set_reset(true);
    auto r = (*e)->Execute(step);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->tokens_size(), 1);
    EXPECT_EQ(r->tokens(0).token(), kGolden[10]);
    // The KV goes to each decode worker: its layers, its heads.
    v1::StepRequest send;
    send.set_step_id(2);
    v1::KvTransfer* t = send.add_kv_transfers();
    t->set_id(kTransfer);
    t->mutable_blocks()->Add(prefill_table.begin(), prefill_table.begin() + n_prompt_blocks);
    for (int s = 0; s < kStages; ++s) {
      for (int q = 0; q < kTp; ++q) {
        AddPiece(t, 0, true, 1 + s * kTp + q, n_layers * s / kStages, n_layers * (s + 1) / kStages, n_kv * q / kTp,
                 n_kv * (q + 1) / kTp);
      }
    }
    r = (*e)->Execute(send);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->failed_transfers_size(), 0) << r->transfer_error();
    // The reference: the prefill worker decodes on by itself.
    std::vector<int32_t> seq = prompt;
    seq.push_back(kGolden[10]);
    for (int i = 0; i < kDecode; ++i) {
      v1::StepRequest step;
      step.set_step_id(3 + i);
      AddSeq(step, {seq.back()}, static_cast<int64_t>(seq.size()) - 1, prefill_table);
      r = (*e)->Execute(step);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->tokens_size(), 1);
      EXPECT_EQ(r->tokens(0).token(), kGolden[11 + i]);
      reference.push_back(r->tokens(0).logprob());
      seq.push_back(kGolden[11 + i]);
    }
    // A worker lives on: its KV group stays up until the receivers have taken what it sent
    // (a small message completes its send before the peer receives it).
    while (decoders_done < kStages * kTp && failures == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  for (int s = 0; s < kStages; ++s) {
    for (int q = 0; q < kTp; ++q) {
      threads.emplace_back([&, s, q] {
        auto kv = Connect(rendezvous, group + "/kv", 1 + s * kTp + q, 1 + kStages * kTp);
        auto tp = Connect(rendezvous, group + "/tp" + std::to_string(s), q, kTp);
        auto pp = Connect(rendezvous, group + "/pp" + std::to_string(q), s, kStages);
        const int64_t l0 = n_layers * s / kStages, l1 = n_layers * (s + 1) / kStages;
        auto e = StageExecutor::Create(
            Options(path, l0, l1, s, kStages, q, kTp, /*kv_rank=*/1 + s * kTp + q), pp.get(), tp.get(), [](double) {},
            std::make_unique<testing::GuardedBackend>());
        if (!e.ok() || kv == nullptr) {
          ADD_FAILURE() << "decode stage " << s << " tp " << q << ": " << e.status();
          ++failures;
          return;
        }
        (*e)->set_kv_comm(kv.get());
        std::vector<int32_t> seq = prompt;
        seq.push_back(kGolden[10]);
        for (int i = 0; i < kDecode; ++i) {
          v1::StepRequest step;
          step.set_step_id(i + 1);
          v1::StepSequence* d = AddSeq(step, {seq.back()}, static_cast<int64_t>(seq.size()) - 1, decode_table);
          if (i == 0) {
            // The first step takes the KV, then decodes on it: a fresh sequence to the sampler.
            d->set_reset(true);
            d->mutable_history()->Add(seq.begin(), seq.end());
            v1::KvTransfer* t = step.add_kv_transfers();
            t->set_id(kTransfer);
            t->mutable_blocks()->Add(decode_table.begin(), decode_table.begin() + n_prompt_blocks);
            // The whole decode side's pieces, as the coordinator sends them: each runs its own.
            for (int s2 = 0; s2 < kStages; ++s2) {
              for (int q2 = 0; q2 < kTp; ++q2) {
                AddPiece(t, 1 + s2 * kTp + q2, false, 0, n_layers * s2 / kStages, n_layers * (s2 + 1) / kStages,
                         n_kv * q2 / kTp, n_kv * (q2 + 1) / kTp);
              }
            }
          }
          auto r = (*e)->Execute(step);
          if (!r.ok()) {
            ADD_FAILURE() << "decode stage " << s << " tp " << q << " step " << i << ": " << r.status();
            ++failures;
            return;
          }
          EXPECT_EQ(r->failed_transfers_size(), 0) << r->transfer_error();
          if (s == kStages - 1 && q == 0) {
            EXPECT_EQ(r->tokens_size(), 1);
            decoded.push_back(r->tokens_size() > 0 ? r->tokens(0).token() : -1);
            logprobs.push_back(r->tokens_size() > 0 ? r->tokens(0).logprob() : 0.0f);
          }
          seq.push_back(kGolden[11 + i]);  // Every rank feeds the golden; a wrong KV shows in `decoded`.
        }
        ++decoders_done;
      });
    }
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures, 0);
  EXPECT_EQ(decoded, std::vector<int32_t>(kGolden.begin() + 11, kGolden.begin() + 11 + kDecode));
  ASSERT_EQ(logprobs.size(), reference.size());
  for (size_t i = 0; i < logprobs.size(); ++i) {
    EXPECT_NEAR(logprobs[i], reference[i], 1e-4) << "token " << i;
    EXPECT_LT(reference[i], 0.0f);  // A real logprob, not a default.
  }
}

TEST(DisaggregationTest, ATransferWhosePeerNeverSendsFailsAloneAndTheStepGoesOn) {
  CASCADE_REQUIRE_FILE(path, testing::TestDataPath("models/stories260K.gguf"));
  auto files = model::OpenModelFiles(path);
  ASSERT_TRUE(files.ok());
  const std::string group = FreshGroup();
  comm::InProcessRendezvous rendezvous;
  std::atomic<bool> done{false};
  std::thread silent([&] {  // Rank 0 joins the group and sends nothing.
    auto kv = Connect(rendezvous, group, 0, 2, 1000);
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  auto kv = Connect(rendezvous, group, 1, 2, 1000);
  auto e = StageExecutor::Create(Options(path, 0, files->config.n_layers, 0, 1, 0, 1, /*kv_rank=*/1), nullptr, nullptr,
                                 [](double) {});
  ASSERT_TRUE(e.ok()) << e.status();
  (*e)->set_kv_comm(kv.get());
  v1::StepRequest step;
  step.set_step_id(1);
  v1::KvTransfer* t = step.add_kv_transfers();
  t->set_id(5);
  t->add_blocks(0);
  AddPiece(t, 1, false, 0, 0, files->config.n_layers, 0, files->config.n_kv_heads);
  AddSeq(step, {1}, 0, {3})->set_reset(true);
  auto r = (*e)->Execute(step);
  done = true;
  silent.join();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->failed_transfers_size(), 1);
  EXPECT_EQ(r->failed_transfers(0), 5u);
  EXPECT_FALSE(r->transfer_error().empty());
  EXPECT_EQ(r->tokens_size(), 1);  // The step's own sequence ran.
}

}  // namespace
}  // namespace cascade::worker
