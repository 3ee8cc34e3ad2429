// Tests of coordinator::HealthWatch against a recording health service: both services
// start NOT_SERVING, change together and only on a change, and a cluster that is not
// whole (starting, or a worker dead) is NOT_SERVING. The SERVING side with real workers,
// and a worker killed and restarted, is tests/integration/cluster_test.py's
// `reflection_and_health`. To add a case, add a TEST below.
#include "coordinator/front/health_watch.h"

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace cascade::coordinator {
namespace {

// Records every SetServingStatus call as (service, serving).
class RecordingHealth : public grpc::HealthCheckServiceInterface {
 public:
  void SetServingStatus(const std::string& service_name, bool serving) override {
    calls.emplace_back(service_name, serving);
  }
  void SetServingStatus(bool serving) override { calls.emplace_back("*", serving); }
  std::vector<std::pair<std::string, bool>> calls;
};

using Calls = std::vector<std::pair<std::string, bool>>;

// One CPU stage of two layers.
Plan OneStagePlan() {
  Plan plan;
  plan.n_layers = 2;
  StagePlan stage;
  stage.last_layer = 2;
  stage.node = "n0";
  plan.stages.push_back(stage);
  return plan;
}

// Its cluster, no worker registered yet.
StageWorkers OneStageCluster(int64_t dead_after_ms) {
  StageWorkersOptions options;
  options.dead_after_ms = dead_after_ms;
  return StageWorkers(OneStagePlan(), options);
}

TEST(HealthWatchTest, StartsNotServingForBothServices) {
  RecordingHealth health;
  HealthWatch watch(&health);
  EXPECT_EQ(health.calls, (Calls{{"", false}, {"cascade.v1.Inference", false}}));
  EXPECT_FALSE(watch.serving());
}

TEST(HealthWatchTest, ChangesBothServicesOnlyOnAChange) {
  RecordingHealth health;
  HealthWatch watch(&health);
  health.calls.clear();
  watch.Set(true, "ready");
  EXPECT_EQ(health.calls, (Calls{{"", true}, {"cascade.v1.Inference", true}}));
  EXPECT_TRUE(watch.serving());
  watch.Set(true, "ready");
  EXPECT_EQ(health.calls.size(), 2u);
  watch.Set(false, "degraded");
  EXPECT_EQ(health.calls,
            (Calls{{"", true}, {"cascade.v1.Inference", true}, {"", false}, {"cascade.v1.Inference", false}}));
  EXPECT_FALSE(watch.serving());
}

TEST(HealthWatchTest, ClusterNotWholeIsNotServing) {
  const Plan plan = OneStagePlan();
  StageWorkersOptions options;
  options.dead_after_ms = 0;
  SchedulerOptions scheduler;
  scheduler.n_kv_blocks = 16;
  Replicas replicas({plan}, options, /*tokenizer=*/nullptr, scheduler, {});
  StageWorkers& cluster = replicas.workers(0);
  RecordingHealth health;
  HealthWatch watch(&health);
  watch.Set(true, "as if it had been ready");
  health.calls.clear();
  watch.Update(replicas);  // Starting: no worker registered.
  EXPECT_EQ(health.calls, (Calls{{"", false}, {"cascade.v1.Inference", false}}));

  // A worker registers and its heartbeats stop: the cluster is degraded, still NOT_SERVING.
  v1::RegisterRequest reg;
  reg.set_address("127.0.0.1:1");
  reg.set_node("n0");
  reg.set_device("cpu");
  ASSERT_TRUE(cluster.Register(reg).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_NE(cluster.CheckHeartbeats(), "");
  watch.Update(replicas);
  EXPECT_FALSE(watch.serving());
  EXPECT_EQ(health.calls.size(), 2u);
}

// A worker declared dead whose slot a restarted worker took must hear "exit" on its next
// heartbeat, and must not keep the slot looking alive (the successor's heartbeats do).
TEST(ClusterTest, AReplacedWorkerIsToldToExit) {
  StageWorkers cluster = OneStageCluster(/*dead_after_ms=*/0);
  v1::RegisterRequest reg;
  reg.set_address("127.0.0.1:1");
  reg.set_node("n0");
  reg.set_device("cpu");
  absl::StatusOr<v1::RegisterResponse> old_worker = cluster.Register(reg);
  ASSERT_TRUE(old_worker.ok());
  EXPECT_TRUE(cluster.Heartbeat(old_worker->rank(), old_worker->worker_id()));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_NE(cluster.CheckHeartbeats(), "");  // Dead: its slot is open again.
  EXPECT_FALSE(cluster.Heartbeat(old_worker->rank(), old_worker->worker_id()));
  reg.set_address("127.0.0.1:2");
  absl::StatusOr<v1::RegisterResponse> successor = cluster.Register(reg);
  ASSERT_TRUE(successor.ok());
  EXPECT_EQ(successor->rank(), old_worker->rank());
  EXPECT_NE(successor->worker_id(), old_worker->worker_id());
  EXPECT_FALSE(cluster.Heartbeat(old_worker->rank(), old_worker->worker_id()));
  EXPECT_TRUE(cluster.Heartbeat(successor->rank(), successor->worker_id()));
}

}  // namespace
}  // namespace cascade::coordinator
