// Coordinator bring-up (coordinator/bring_up.h) on a random-weight model written here: the
// KV pool counts each stage's most KV heads per TP rank (an uneven split gives one rank
// ceil(n_kv_heads / tp)), the drafter's blocks use its own heads, and bad plans are
// refused naming the config key. The block arithmetic is written out in each case.
#include "coordinator/bring_up.h"

#include <string>

#include "core/status.h"
#include "tests/random_model.h"
#include "tests/test_support.h"

namespace cascade::coordinator {
namespace {

using ::cascade::testing::StatusIs;
using ::testing::HasSubstr;

// 3 layers, 6 query heads and 3 KV heads of 64: TP 2 splits the KV heads 2 + 1.
std::string WriteModel(const cascade::testing::TempDir& dir) {
  const std::string path = dir.path() + "/model.gguf";
  cascade::testing::WriteRandomModel({.n_layers = 3, .n_embd = 384, .n_heads = 6, .n_kv_heads = 3, .n_ff = 256}, path);
  return path;
}

absl::StatusOr<ServingPlan> Plan(const std::string& model, const std::string& extra) {
  const std::string yaml = "model: {path: " + model + "}\n" + extra;
  CASCADE_ASSIGN_OR_RETURN(ClusterConfig config, ParseClusterConfig(yaml, "test.yaml"));
  CASCADE_ASSIGN_OR_RETURN(ServedModels models, OpenServedModels(config));
  return PlanServing(config, models);
}

TEST(BringUpTest, KvPoolCountsTheBusiestRanksHeads) {
  cascade::testing::TempDir dir;
  const std::string model = WriteModel(dir);
  auto plan = Plan(model,
                   "parallel: {pipeline: 1, tensor: 2}\n"
                   "nodes: [{name: a, host: 127.0.0.1, devices: [cpu, cpu]}]\n"
                   "scheduler: {kv_block_size: 16, kv_cache_mb: 1, kv_cache_dtype: f32}\n");
  ASSERT_TRUE(plan.ok()) << plan.status();
  // K and V, f32: 2 * 3 layers * 16 positions * 2 heads * 64 * 4 bytes = 49152.
  ASSERT_EQ(plan->plan.stages.size(), 1u);
  EXPECT_EQ(plan->plan.stages[0].kv_block_bytes, 49152);
  EXPECT_EQ(plan->workers.kv_blocks, 1048576 / 49152);  // 21 blocks in 1 MiB.
  EXPECT_EQ(plan->scheduler.n_kv_blocks, 21);
  EXPECT_EQ(plan->max_context, 256);  // The model's context: 21 blocks of 16 hold 336.
}

// All-to-all expert parallelism: each lane's worker holds every KV head (its sequences'
// whole KV), the scheduler has a lane per rank; a dense model is refused naming the key; the
// form is described for the log and ModelInfo, the default said to be one.
TEST(BringUpTest, AllToAllLanesHoldEveryKvHead) {
  cascade::testing::TempDir dir;
  const std::string moe = dir.path() + "/moe.gguf";
  cascade::testing::WriteRandomModel({.n_layers = 2, .moe = cascade::testing::MoeFamily::kQwen3Moe, .n_experts = 8},
                                     moe);
  const std::string nodes =
      "nodes: [{name: a, host: 127.0.0.1, devices: [cpu]}, {name: b, host: 127.0.0.2, "
      "devices: [cpu]}]\nscheduler: {kv_block_size: 16, kv_cache_mb: 1, kv_cache_dtype: f32}\n";
  auto plan = Plan(moe, "parallel: {tensor: 2, expert: true, expert_comm: all_to_all}\n" + nodes);
  ASSERT_TRUE(plan.ok()) << plan.status();  // The expert group spans nodes a and b.
  // K and V, f32: 2 * 2 layers * 16 positions * 2 KV heads (all of them) * 64 * 4 bytes.
  EXPECT_EQ(plan->plan.stages[0].kv_block_bytes, 32768);
  EXPECT_EQ(plan->scheduler.n_lanes, 2);
  EXPECT_EQ(plan->scheduler.n_kv_blocks, 1048576 / 32768);  // Per lane.
  auto reduce = Plan(moe, "parallel: {tensor: 2, expert: true}\n" + nodes);
  ASSERT_TRUE(reduce.ok()) << reduce.status();
  EXPECT_EQ(reduce->plan.stages[0].kv_block_bytes, 16384);  // One KV head a rank.
  EXPECT_EQ(reduce->scheduler.n_lanes, 1);
  cascade::testing::TempDir dense_dir;
  EXPECT_THAT(
      Plan(WriteModel(dense_dir), "parallel: {tensor: 2, expert: true, expert_comm: all_to_all}\n" + nodes).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("parallel.expert_comm: all-to-all expert "
                                                             "parallelism needs a mixture-of-experts model")));
  ParallelSection p;
  EXPECT_EQ(ExpertCommDescription(p), "");
  p.expert = true;
  p.tensor = 2;
  EXPECT_EQ(ExpertCommDescription(p), "all_reduce (defaulted: parallel.expert_comm)");
  p.expert_all_to_all = p.expert_comm_given = true;
  EXPECT_EQ(ExpertCommDescription(p), "all_to_all (attention data parallel over the tp ranks)");
}

// scheduler.cpu_prefill_activations as the ready line and ModelInfo name it.
TEST(BringUpTest, CpuPrefillActivationsAreNamed) {
  SchedulerSection s;
  EXPECT_EQ(CpuPrefillActivationsDescription(s), "f32");
  s.cpu_bf16_prefill = true;
  EXPECT_EQ(CpuPrefillActivationsDescription(s), "bf16 (FP8 weights' prefills on CPU workers with AVX512_BF16)");
}

TEST(BringUpTest, SelfDrafterBlocksUseItsLayersAndAllHeads) {
  cascade::testing::TempDir dir;
  const std::string model = WriteModel(dir);
  auto plan = Plan(model,
                   "parallel: {pipeline: 1}\n"
                   "nodes: [{name: a, host: 127.0.0.1, devices: [cpu]}]\n"
                   "draft: {self: {layers: 1}}\n"
                   "scheduler: {kv_block_size: 16, kv_cache_mb: 1}\n");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->workers.draft);
  EXPECT_EQ(plan->workers.draft_layers, 1);
  // The default f16 cache: 2 * 1 layer * 16 * 3 heads * 64 * 2 = 12288; the target's
  // 2 * 3 * 16 * 3 * 64 * 2 = 36864 is the tighter, so 1 MiB holds 28 blocks.
  EXPECT_EQ(plan->workers.draft_block_bytes, 12288);
  EXPECT_EQ(plan->plan.stages[0].kv_block_bytes, 36864);
  EXPECT_EQ(plan->workers.kv_blocks, 28);
  EXPECT_EQ(plan->scheduler.max_in_flight_batches, 2);  // One stage plus the drafter.
}

TEST(BringUpTest, HostTierBlocksAreTheLargestStagesBlocks) {
  cascade::testing::TempDir dir;
  const std::string model = WriteModel(dir);
  auto plan = Plan(model,
                   "parallel: {pipeline: 2}\n"
                   "nodes: [{name: a, host: 127.0.0.1, devices: [cpu, cpu]}]\n"
                   "draft: {self: {layers: 1}}\n"
                   "scheduler: {kv_block_size: 16, kv_cache_mb: 1, host_kv_cache_mb: 3}\n");
  ASSERT_TRUE(plan.ok()) << plan.status();
  // 3 layers over 2 stages: 2 and 1 layers, 2 * 16 * 3 heads * 64 * 2 bytes each (f16).
  ASSERT_EQ(plan->plan.stages.size(), 2u);
  EXPECT_EQ(plan->plan.stages[0].kv_block_bytes, 24576);
  EXPECT_EQ(plan->plan.stages[1].kv_block_bytes, 12288);
  EXPECT_EQ(plan->workers.host_kv_blocks, 3 * 1048576 / 24576);  // 128: the drafter has no host tier.
  EXPECT_EQ(plan->scheduler.n_host_kv_blocks, 128);
  // Off by default.
  plan = Plan(model, "nodes: [{name: a, host: 127.0.0.1, devices: [cpu]}]\n");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->scheduler.n_host_kv_blocks, 0);
}

// Disaggregation: a TP-1 prefill replica and a PP-2 x TP-2 decode replica on 5 devices.
// Every worker's layers and KV heads with its rank in the KV group, the pool as large as
// the tightest worker of either holds, and the roles in order.
TEST(BringUpTest, DisaggregatedReplicasHaveTheirOwnSplits) {
  cascade::testing::TempDir dir;
  const std::string model = WriteModel(dir);
  auto plan = Plan(model,
                   "parallel: {disaggregation: {prefill: {tensor: 1}, decode: {pipeline: 2, tensor: 2}}}\n"
                   "nodes: [{name: a, host: 127.0.0.1, devices: [cpu, cpu, cpu, cpu, cpu]}]\n"
                   "scheduler: {kv_block_size: 16, kv_cache_mb: 1, kv_cache_dtype: f32}\n");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->replicas.size(), 2u);
  EXPECT_EQ(plan->roles, (std::vector<ReplicaRole>{ReplicaRole::kPrefill, ReplicaRole::kDecode}));
  EXPECT_EQ(plan->replicas[0].stages.size(), 1u);
  EXPECT_EQ(plan->replicas[1].stages.size(), 2u);
  // The model: 3 layers, 3 KV heads (WriteModel); TP 2 gives ranks heads [0, 2) and [2, 3).
  EXPECT_EQ(plan->kv_holders[0], (std::vector<KvHolder>{{0, 0, 3, 0, 3}}));
  const int64_t cut = plan->replicas[1].stages[0].last_layer;
  EXPECT_EQ(plan->kv_holders[1],
            (std::vector<KvHolder>{{1, 0, cut, 0, 2}, {2, 0, cut, 2, 3}, {3, cut, 3, 0, 2}, {4, cut, 3, 2, 3}}));
  // f32: 2 * 3 layers * 16 * 3 heads * 64 * 4 = 73728 bytes on the prefill worker, the tightest.
  EXPECT_EQ(plan->replicas[0].stages[0].kv_block_bytes, 73728);
  EXPECT_EQ(plan->workers.kv_blocks, 1048576 / 73728);
  EXPECT_THAT(Plan(model,
                   "parallel: {disaggregation: {prefill: {tensor: 2}, decode: {tensor: 2}}}\n"
                   "nodes: [{name: a, host: 127.0.0.1, devices: [cpu, cpu, cpu]}]\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("need 4 devices, but nodes list 3")));
  EXPECT_THAT(Plan(model,
                   "parallel: {tensor: 2, disaggregation: {prefill: {}, decode: {}}}\n"
                   "nodes: [{name: a, host: 127.0.0.1, devices: [cpu, cpu]}]\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("parallel.tensor")));
}

TEST(BringUpTest, BadPlansNameTheirKey) {
  cascade::testing::TempDir dir;
  const std::string model = WriteModel(dir);
  EXPECT_THAT(Plan(model,
                   "nodes: [{name: a, host: 127.0.0.1, devices: [cpu]}]\n"
                   "draft: {self: {layers: 3}}\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("draft.self.layers")));
  EXPECT_THAT(Plan(model,
                   "nodes: [{name: a, host: 127.0.0.1, devices: [cpu]}]\n"
                   "scheduler: {kv_block_size: 16, kv_cache_mb: 0}\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kv_cache_mb")));
  EXPECT_THAT(Plan(model,
                   "nodes: [{name: a, host: 127.0.0.1, devices: [cpu]}]\n"
                   "scheduler: {prefix_caching: false, host_kv_cache_mb: 64}\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scheduler.host_kv_cache_mb")));
}

}  // namespace
}  // namespace cascade::coordinator
