// Starts the local workers of a plan as child processes (`launch: local` nodes): each in
// its own process group, with an explicit environment, killed when the coordinator dies
// (PR_SET_PDEATHSIG). Their output is forwarded line by line with a "[stage N]" prefix,
// and the last lines are kept so a worker that dies can be explained. A worker that dies
// is started again after `restart_delay` (it registers anew and the cluster recovers).
// Thread-safety: Launch/StopAll from one thread; the log threads are internal.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace cascade::coordinator {

struct WorkerLaunch {
  int stage = 0;                  // Pipeline stage, for log prefixes; -1 for the drafter.
  bool draft = false;             // The drafter worker (`--draft`).
  std::string node;
  std::string device;             // "cpu".
  int n_threads = 1;
  std::vector<std::string> extra_env;  // "KEY=VALUE" added to the worker's environment.
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
  void OnExit(std::function<void(int stage, const std::string& why, bool final)> fn) { on_exit_ = std::move(fn); }
  void StopAll();

 private:
  struct Child {
    WorkerLaunch launch;
    int pid = -1;
    int out_fd = -1;
    std::thread logger;
    std::mutex mu;
    std::deque<std::string> tail;
    bool stopping = false;
  };
  void Supervise(Child* child);
  absl::Status Spawn(Child* child);

  std::string worker_binary_;
  std::string coordinator_address_;
  std::chrono::milliseconds restart_delay_;
  std::function<void(int, const std::string&, bool)> on_exit_;
  std::vector<std::unique_ptr<Child>> children_;
};

// The cascade-worker beside the running executable (same bin/ directory).
std::string DefaultWorkerBinary();

}  // namespace cascade::coordinator
