// Tests for PlanStages (coordinator/planner.cc): contiguous [first, last) ranges that
// cover every layer, balance by bytes (embedding on the first stage, head on the last),
// optimality against brute force, device/rank mapping, the printed table, and the errors.
// To add a case: build a `PlannerInput` with `Input()` and check the ranges.

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "coordinator/config.h"
#include "coordinator/planner.h"
#include "tests/test_support.h"

namespace cascade::coordinator {
namespace {

using ::testing::HasSubstr;

PlannerInput Input(std::vector<int64_t> layers, int stages, int64_t embedding = 0, int64_t head = 0) {
  PlannerInput in;
  in.layer_bytes = std::move(layers);
  in.pipeline_size = stages;
  in.embedding_bytes = embedding;
  in.head_bytes = head;
  for (int i = 0; i < stages + 1; ++i) {
    in.devices.push_back({i < 2 ? "n0" : "n1", i < 2 ? "10.0.0.1" : "10.0.0.2", Device{DeviceKind::kCpu, 0}});
  }
  return in;
}

using RangeList = std::vector<std::pair<int, int>>;

RangeList Ranges(const Plan& plan) {
  RangeList r;
  for (const StagePlan& s : plan.stages) r.push_back({s.first_layer, s.last_layer});
  return r;
}

void ExpectCovers(const Plan& plan, int n_layers) {
  ASSERT_FALSE(plan.stages.empty());
  EXPECT_EQ(plan.n_layers, n_layers);
  EXPECT_EQ(plan.stages.front().first_layer, 0);
  EXPECT_EQ(plan.stages.back().last_layer, n_layers);
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    EXPECT_GE(plan.stages[s].n_layers(), 1) << "stage " << s;
    EXPECT_EQ(plan.stages[s].pp_stage, static_cast<int>(s));
    if (s > 0) {
      EXPECT_EQ(plan.stages[s].first_layer, plan.stages[s - 1].last_layer);
    }
  }
}

TEST(PlannerTest, EqualLayersSplitEvenly) {
  absl::StatusOr<Plan> plan = PlanStages(Input(std::vector<int64_t>(30, 100), 2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCovers(*plan, 30);
  EXPECT_EQ(Ranges(*plan), (RangeList{{0, 15}, {15, 30}}));
  EXPECT_EQ(plan->stages[0].weight_bytes, 1500);
  EXPECT_EQ(plan->MaxStageBytes(), 1500);

  plan = PlanStages(Input(std::vector<int64_t>(12, 7), 3));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Ranges(*plan), (RangeList{{0, 4}, {4, 8}, {8, 12}}));
}

TEST(PlannerTest, EmbeddingAndHeadShiftLayers) {
  // Embedding worth 4 layers on stage 0: 12 layers + 4 => stage 0 gets 4, stage 1 gets 8.
  absl::StatusOr<Plan> plan = PlanStages(Input(std::vector<int64_t>(12, 10), 2, 40, 0));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Ranges(*plan), (RangeList{{0, 4}, {4, 12}}));
  EXPECT_EQ(plan->stages[0].weight_bytes, 80);
  EXPECT_EQ(plan->stages[1].weight_bytes, 80);

  // Head worth 4 layers on the last stage.
  plan = PlanStages(Input(std::vector<int64_t>(12, 10), 2, 0, 40));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Ranges(*plan), (RangeList{{0, 8}, {8, 12}}));

  // Both, three stages: 9 layers of 10 + 30 + 30 = 150 => 50 per stage.
  plan = PlanStages(Input(std::vector<int64_t>(9, 10), 3, 30, 30));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Ranges(*plan), (RangeList{{0, 2}, {2, 7}, {7, 9}}));
  EXPECT_EQ(plan->MaxStageBytes(), 50);
}

TEST(PlannerTest, HugeEmbeddingStillLeavesOneLayerPerStage) {
  absl::StatusOr<Plan> plan = PlanStages(Input({1, 1, 1, 1}, 3, 1000, 0));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectCovers(*plan, 4);
  EXPECT_EQ(plan->stages[0].n_layers(), 1);
}

TEST(PlannerTest, SingleStageHoldsEverything) {
  absl::StatusOr<Plan> plan = PlanStages(Input({5, 6, 7}, 1, 100, 50));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Ranges(*plan), (RangeList{{0, 3}}));
  EXPECT_EQ(plan->stages[0].weight_bytes, 168);
}

TEST(PlannerTest, OneLayerPerStageWhenStagesEqualLayers) {
  absl::StatusOr<Plan> plan = PlanStages(Input({9, 1, 1}, 3));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Ranges(*plan), (RangeList{{0, 1}, {1, 2}, {2, 3}}));
}

// The smallest possible largest stage, by enumerating every split.
int64_t BruteForceBest(const PlannerInput& in) {
  const int n = static_cast<int>(in.layer_bytes.size());
  const int stages = in.pipeline_size;
  int64_t best = INT64_MAX;
  std::vector<int> cuts;  // First layer of stages 1..S-1.
  std::function<void(int, int)> rec = [&](int stage, int first) {
    if (stage == stages - 1) {
      int64_t worst = 0;
      int begin = 0;
      for (int s = 0; s < stages; ++s) {
        const int end = s < stages - 1 ? cuts[s] : n;
        int64_t bytes = 0;
        for (int i = begin; i < end; ++i) bytes += in.layer_bytes[i];
        if (s == 0) bytes += in.embedding_bytes;
        if (s == stages - 1) bytes += in.head_bytes;
        worst = std::max(worst, bytes);
        begin = end;
      }
      best = std::min(best, worst);
      return;
    }
    for (int c = first + 1; c <= n - (stages - 1 - stage); ++c) {
      cuts.push_back(c);
      rec(stage + 1, c);
      cuts.pop_back();
    }
  };
  rec(0, 0);
  return best;
}

TEST(PlannerTest, OptimalAgainstBruteForce) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 9);
    const int stages = 1 + static_cast<int>(rng() % n);
    std::vector<int64_t> layers(n);
    for (int64_t& b : layers) b = rng() % 1000;
    PlannerInput in = Input(layers, stages, rng() % 2000, rng() % 2000);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " n " << n << " stages " << stages);
    absl::StatusOr<Plan> plan = PlanStages(in);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ExpectCovers(*plan, n);
    EXPECT_EQ(plan->MaxStageBytes(), BruteForceBest(in));
    int64_t total = 0;
    for (const StagePlan& s : plan->stages) total += s.weight_bytes;
    int64_t expected = in.embedding_bytes + in.head_bytes;
    for (int64_t b : layers) expected += b;
    EXPECT_EQ(total, expected);
  }
}

TEST(PlannerTest, StagesMapToDevicesInOrder) {
  absl::StatusOr<ClusterConfig> config = ParseClusterConfig(R"(
model: {path: m}
parallel: {pipeline: 3}
nodes:
  - {name: a, host: 10.0.0.1, devices: [cpu, cuda:1]}
  - {name: b, host: 10.0.0.2, devices: [cuda:0, cpu]}
)",
                                                            "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  PlannerInput in;
  in.layer_bytes = std::vector<int64_t>(6, 1);
  in.pipeline_size = config->parallel.pipeline;
  in.devices = ClusterDevices(*config);
  ASSERT_EQ(in.devices.size(), 4u);
  absl::StatusOr<Plan> plan = PlanStages(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages.size(), 3u);
  EXPECT_EQ(plan->stages[0].node, "a");
  EXPECT_EQ(plan->stages[0].device.ToString(), "cpu");
  EXPECT_EQ(plan->stages[1].node, "a");
  EXPECT_EQ(plan->stages[1].device.ToString(), "cuda:1");
  EXPECT_EQ(plan->stages[2].node, "b");
  EXPECT_EQ(plan->stages[2].host, "10.0.0.2");
  EXPECT_EQ(plan->stages[2].device.ToString(), "cuda:0");
  for (int s = 0; s < 3; ++s) EXPECT_EQ(plan->stages[s].rank, s);
}

TEST(PlannerTest, ToStringPrintsATable) {
  absl::StatusOr<Plan> plan = PlanStages(Input(std::vector<int64_t>(30, 3 << 20), 2, 10 << 20, 10 << 20));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string table = plan->ToString();
  EXPECT_THAT(table, HasSubstr("stage"));
  EXPECT_THAT(table, HasSubstr("[0, 15)"));
  EXPECT_THAT(table, HasSubstr("[15, 30)"));
  EXPECT_THAT(table, HasSubstr("10.0.0.1"));
  EXPECT_THAT(table, HasSubstr("55.0 MiB"));
  EXPECT_THAT(table, HasSubstr("30 layers over 2 stages"));
}

// A TP group must sit on one node; an all-to-all expert group (groups_span_nodes) may not.
TEST(PlannerTest, GroupsSpanNodesOnlyWhenAllowed) {
  PlannerInput in;
  in.layer_bytes = std::vector<int64_t>(4, 1);
  in.tensor_size = 2;
  in.devices = {{"a", "10.0.0.1", Device{}}, {"b", "10.0.0.2", Device{}}};
  absl::StatusOr<Plan> plan = PlanStages(in);
  EXPECT_STATUS_CODE(plan, kInvalidArgument);
  EXPECT_THAT(cascade::testing::StatusMessage(plan.status()), HasSubstr("would span nodes 'a' and 'b'"));
  in.groups_span_nodes = true;
  plan = PlanStages(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages[0].tp.size(), 2u);
  EXPECT_EQ(plan->stages[0].tp[0].node, "a");
  EXPECT_EQ(plan->stages[0].tp[1].node, "b");
}

TEST(PlannerTest, Errors) {
  EXPECT_STATUS_CODE(PlanStages(Input({}, 1)), kInvalidArgument);
  EXPECT_STATUS_CODE(PlanStages(Input({1, 2}, 0)), kInvalidArgument);
  absl::StatusOr<Plan> too_many = PlanStages(Input({1, 2}, 3));
  EXPECT_STATUS_CODE(too_many, kInvalidArgument);
  EXPECT_THAT(cascade::testing::StatusMessage(too_many.status()),
              HasSubstr("3 stages but the model has only 2 layers"));
  EXPECT_STATUS_CODE(PlanStages(Input({1, -2}, 1)), kInvalidArgument);
  EXPECT_STATUS_CODE(PlanStages(Input({1, 2}, 1, -1)), kInvalidArgument);
  PlannerInput few = Input({1, 2, 3}, 3);
  few.devices.resize(2);
  EXPECT_STATUS_CODE(PlanStages(few), kInvalidArgument);
}

}  // namespace
}  // namespace cascade::coordinator
