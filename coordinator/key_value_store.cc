#include "coordinator/key_value_store.h"

#include "core/str_cat.h"

namespace cascade::coordinator {

void KeyValueStore::Put(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
  }
  cv_.notify_all();
}

absl::StatusOr<std::string> KeyValueStore::Wait(const std::string& key,
                                                std::chrono::system_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_until(lock, deadline, [&] { return values_.count(key) > 0; })) {
    return absl::DeadlineExceededError(StrCat("rendezvous key '", key, "' was not published in time"));
  }
  return values_[key];
}

void KeyValueStore::ErasePrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = values_.lower_bound(prefix); it != values_.end() && it->first.rfind(prefix, 0) == 0;) {
    it = values_.erase(it);
  }
}

}  // namespace cascade::coordinator
