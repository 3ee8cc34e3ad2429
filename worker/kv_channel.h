// The worker's side of disaggregation's KV group: one thread owns the group's communicator
// (a Communicator has a single owner), so that a prefill worker's sends run behind its
// compute instead of holding it (a large message waits for its receiver to post its
// receive, which the decode replica does when its own step gets there), while a decode
// worker's receives still complete before the step that needs them computes.
//
// Thread-safe: Send, Recv and TakeFailures may be called from any thread (the worker's step
// thread calls them); jobs run in the order they were queued.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "comm/communicator.h"

namespace cascade::worker {

class KvChannel {
 public:
  // Borrows `comm`, which must outlive the channel. `send_delay_ms`: fault injection for
  // tests, a wait before each send.
  explicit KvChannel(comm::Communicator* comm, int send_delay_ms = 0);
  ~KvChannel();  // Finishes the jobs queued (each bounded by the group's timeout).
  KvChannel(const KvChannel&) = delete;
  KvChannel& operator=(const KvChannel&) = delete;

  // Sends `bytes` to rank `peer` under tag `id` in the background; a failure is kept for
  // TakeFailures.
  void Send(uint64_t id, int peer, std::vector<uint8_t> bytes);
  // Receives into `out` from rank `peer` under tag `id`, after every job queued before it.
  absl::Status Recv(uint64_t id, int peer, std::span<uint8_t> out);
  // Background sends that failed since the last call: (transfer id, why).
  std::vector<std::pair<uint64_t, std::string>> TakeFailures();

 private:
  void Run();
  void Enqueue(std::function<void()> job);

  comm::Communicator* comm_;  // Touched by thread_ only.
  const int send_delay_ms_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<uint64_t, std::string>> failures_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace cascade::worker
