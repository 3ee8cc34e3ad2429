#include "worker/kv_channel.h"

#include <chrono>
#include <future>

namespace cascade::worker {

KvChannel::KvChannel(comm::Communicator* comm, int send_delay_ms)
    : comm_(comm), send_delay_ms_(send_delay_ms), thread_([this] { Run(); }) {}

KvChannel::~KvChannel() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void KvChannel::Enqueue(std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  jobs_.push_back(std::move(job));
}

void KvChannel::Send(uint64_t id, int peer, std::vector<uint8_t> bytes) {
  Enqueue([this, id, peer, bytes = std::move(bytes)] {
    if (send_delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(send_delay_ms_));
    const absl::Status st = comm_->Send(bytes.data(), bytes.size(), peer, id);
    if (st.ok()) return;
    absl::MutexLock lock(&mu_);
    failures_.emplace_back(id, std::string(st.message()));
  });
}

absl::Status KvChannel::Recv(uint64_t id, int peer, std::span<uint8_t> out) {
  std::promise<absl::Status> done;
  std::future<absl::Status> result = done.get_future();
  Enqueue([&] { done.set_value(comm_->Recv(out.data(), out.size(), peer, id)); });
  return result.get();
}

std::vector<std::pair<uint64_t, std::string>> KvChannel::TakeFailures() {
  absl::MutexLock lock(&mu_);
  return std::exchange(failures_, {});
}

void KvChannel::Run() {
  for (;;) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !jobs_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (jobs_.empty()) return;  // Stopping, with nothing left.
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace cascade::worker
