// Starts the local workers of a plan as child processes (`launch: local` nodes): each in
// its own process group, with an explicit environment, killed when the coordinator dies
// (PR_SET_PDEATHSIG). Their output is forwarded line by line with a "[stage N]" prefix,
// and the last lines are kept so a worker that dies can be explained. A worker that dies
// is started again after `restart_delay` (it registers anew and the cluster recovers).
// Thread-safety: Launch/StopAll (and OnExit, before the first Launch) from one thread; the
// log threads are internal. Each child's output tail and stopping flag are guarded by its
// `mu`; see Child for the fields that are not.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace cascade::coordinator {

struct WorkerLaunch {
  int stage = 0;       // Pipeline stage, for log prefixes; -1 for the drafter.
  bool draft = false;  // The drafter worker (`--draft`).
  std::string node;
  std::string device;  // "cpu".
  int n_threads = 1;
  std::vector<std::string> extra_args;  // After the launcher's own (the cluster's trust).
  std::vector<std::string> extra_env;   // "KEY=VALUE" added to the worker's environment.
};

class Launcher {
 public:
  // `worker_binary`: path of cascade-worker; `coordinator_address`: what workers dial.
  Launcher(std::string worker_binary, std::string coordinator_address,
           std::chrono::milliseconds restart_delay = std::chrono::milliseconds(1000));
  ~Launcher();  // Stops every worker (SIGTERM, then SIGKILL after a grace period).

  absl::Status Launch(const WorkerLaunch& launch);
  // Called (from a log thread) when a worker exits, with its stage, the reason, and
  // whether it stays down (it refused its arguments, exit 64: not restarted).
  // Set it before the first Launch: the log threads read it unlocked.
  void OnExit(std::function<void(int stage, const std::string& why, bool final)> fn) { on_exit_ = std::move(fn); }
  void StopAll();

 private:
  struct Child {
    WorkerLaunch launch;  // Set before its log thread starts; read-only afterwards.
    // pid and out_fd are written under `mu` (Spawn) but not annotated: the log thread, their
    // only writer once it runs (a restart), reads them without it. Other threads (StopAll)
    // read pid under `mu`; a restart that raced StopAll stops its new child itself (Spawn).
    int pid = -1;
    int out_fd = -1;
    std::thread logger;  // Launch/StopAll's thread only.
    absl::Mutex mu;
    std::deque<std::string> tail ABSL_GUARDED_BY(mu);  // The last lines of output.
    bool stopping ABSL_GUARDED_BY(mu) = false;
  };
  void Supervise(Child* child);
  absl::Status Spawn(Child* child);

  // Set at construction (on_exit_ by OnExit before the first Launch), read-only afterwards:
  // the log threads read them unlocked.
  std::string worker_binary_;
  std::string coordinator_address_;
  std::chrono::milliseconds restart_delay_;
  std::function<void(int, const std::string&, bool)> on_exit_;
  // Launch/StopAll's thread only (a log thread holds its own Child*); not guarded.
  std::vector<std::unique_ptr<Child>> children_;
};

// The cascade-worker beside the running executable (same bin/ directory).
std::string DefaultWorkerBinary();

}  // namespace cascade::coordinator
