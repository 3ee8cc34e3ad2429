// The rendezvous store behind PutKey/WaitKey: workers publish their data-plane addresses
// here and wait for their peers'. Keys are write-once per cluster run. (Named for what it
// holds, apart from the KV cache and its budget, coordinator/control/kv_budget.h.)
// Thread-safe: every member is guarded by `mu_`.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace cascade::coordinator {

class RendezvousStore {
 public:
  void Put(const std::string& key, const std::string& value);
  // The value, waiting until `deadline`; DeadlineExceeded naming the key otherwise.
  absl::StatusOr<std::string> Wait(const std::string& key, std::chrono::system_clock::time_point deadline);
  // Drops keys starting with `prefix` (a new cluster run reuses no stale addresses).
  void ErasePrefix(const std::string& prefix);

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cascade::coordinator
