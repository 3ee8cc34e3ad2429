// The rendezvous key/value store behind PutKey/WaitKey: workers publish their data-plane
// addresses here and wait for their peers'. Keys are write-once per cluster run.
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"

namespace cascade::coordinator {

class KeyValueStore {
 public:
  void Put(const std::string& key, const std::string& value);
  // The value, waiting until `deadline`; DeadlineExceeded naming the key otherwise.
  absl::StatusOr<std::string> Wait(const std::string& key, std::chrono::system_clock::time_point deadline);
  // Drops keys starting with `prefix` (a new cluster run reuses no stale addresses).
  void ErasePrefix(const std::string& prefix);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

}  // namespace cascade::coordinator
