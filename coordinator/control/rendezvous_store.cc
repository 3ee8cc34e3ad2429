#include "coordinator/control/rendezvous_store.h"

#include "absl/time/time.h"
#include "core/str_cat.h"

namespace cascade::coordinator {

void RendezvousStore::Put(const std::string& key, const std::string& value) {
  // Releasing mu_ wakes the Waits whose key is now present.
  absl::MutexLock lock(&mu_);
  values_[key] = value;
}

absl::StatusOr<std::string> RendezvousStore::Wait(const std::string& key,
                                                  std::chrono::system_clock::time_point deadline) {
  absl::MutexLock lock(&mu_);
  const auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return values_.count(key) > 0; };
  if (!mu_.AwaitWithDeadline(absl::Condition(&present), absl::FromChrono(deadline))) {
    return absl::DeadlineExceededError(StrCat("rendezvous key '", key, "' was not published in time"));
  }
  return values_[key];
}

void RendezvousStore::ErasePrefix(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  for (auto it = values_.lower_bound(prefix); it != values_.end() && it->first.rfind(prefix, 0) == 0;) {
    it = values_.erase(it);
  }
}

}  // namespace cascade::coordinator
