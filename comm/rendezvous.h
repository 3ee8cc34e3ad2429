// Two `Rendezvous` implementations that need no coordinator:
// `InProcessRendezvous` (a map, for groups of threads in one process, i.e.
// tests) and `FileRendezvous` (a directory on a shared file system, for
// processes on one machine, multi-process tests and workers launched without a
// coordinator). The coordinator's key RPCs implement the same interface
// elsewhere. Thread-safety: both are thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "comm/communicator.h"

namespace cascade::comm {

// Keys in a mutex-guarded map; `Wait` sleeps on the mutex until the key
// appears.
class InProcessRendezvous final : public Rendezvous {
 public:
  InProcessRendezvous() = default;
  InProcessRendezvous(const InProcessRendezvous&) = delete;
  InProcessRendezvous& operator=(const InProcessRendezvous&) = delete;

  absl::Status Put(std::string_view key, std::string_view value) override;
  absl::StatusOr<std::string> Wait(std::string_view key, int64_t timeout_ms) override;

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string, std::less<>> values_ ABSL_GUARDED_BY(mu_);
};

// One file per key in a directory. `Put` writes a temporary file and renames it
// into place, so a reader sees a whole value or none; `Wait` polls (1 ms
// growing to 20 ms). Key bytes outside [A-Za-z0-9._-] are escaped as %XX in the
// file name. Keys of earlier runs stay in the directory: give each run a fresh
// directory or fresh group names.
class FileRendezvous final : public Rendezvous {
 public:
  // Uses `dir`, creating it (and its parents) when missing. `InvalidArgument`
  // for an empty path, `Unavailable` when it cannot be created.
  static absl::StatusOr<std::unique_ptr<FileRendezvous>> Create(std::string dir);

  FileRendezvous(const FileRendezvous&) = delete;
  FileRendezvous& operator=(const FileRendezvous&) = delete;

  absl::Status Put(std::string_view key, std::string_view value) override;
  absl::StatusOr<std::string> Wait(std::string_view key, int64_t timeout_ms) override;

  const std::string& dir() const { return dir_; }

 private:
  explicit FileRendezvous(std::string dir) : dir_(std::move(dir)) {}
  std::string PathFor(std::string_view key) const;

  const std::string dir_;
};

}  // namespace cascade::comm
