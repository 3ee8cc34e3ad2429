#include "comm/rendezvous.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/time/time.h"
#include "core/str_cat.h"

namespace cascade::comm {

absl::Status InProcessRendezvous::Put(std::string_view key, std::string_view value) {
  absl::MutexLock lock(&mu_);
  values_.insert_or_assign(std::string(key), std::string(value));
  return absl::OkStatus();
}

absl::StatusOr<std::string> InProcessRendezvous::Wait(std::string_view key, int64_t timeout_ms) {
  absl::MutexLock lock(&mu_);
  auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return values_.find(key) != values_.end(); };
  const absl::Condition cond(&present);
  if (!mu_.AwaitWithTimeout(cond, absl::Milliseconds(std::max<int64_t>(timeout_ms, 0)))) {
    return absl::DeadlineExceededError(StrCat("rendezvous key '", key, "' did not appear within ", timeout_ms, " ms"));
  }
  return values_.find(key)->second;
}

absl::StatusOr<std::unique_ptr<FileRendezvous>> FileRendezvous::Create(std::string dir) {
  if (dir.empty()) return absl::InvalidArgumentError("FileRendezvous: empty directory path");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    return absl::UnavailableError(StrCat("FileRendezvous: cannot create directory '", dir, "': ", ec.message()));
  }
  return std::unique_ptr<FileRendezvous>(new FileRendezvous(std::move(dir)));
}

std::string FileRendezvous::PathFor(std::string_view key) const {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string name;
  name.reserve(key.size());
  for (unsigned char c : key) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
        c == '-') {
      name.push_back(static_cast<char>(c));
    } else {
      name.push_back('%');
      name.push_back(kHex[c >> 4]);
      name.push_back(kHex[c & 15]);
    }
  }
  if (!name.empty() && name[0] == '.') name.replace(0, 1, "%2E");  // never collide with temporaries
  return StrCat(dir_, "/", name);
}

absl::Status FileRendezvous::Put(std::string_view key, std::string_view value) {
  static std::atomic<uint64_t> counter{0};
  const std::string path = PathFor(key);
  const std::string tmp = StrCat(dir_, "/.tmp.", ::getpid(), ".", counter.fetch_add(1), ".",
                                 std::hash<std::thread::id>()(std::this_thread::get_id()));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::UnavailableError(StrCat("FileRendezvous: cannot create '", tmp, "': ", std::strerror(errno)));
  size_t done = 0;
  while (done < value.size()) {
    const ssize_t n = ::write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::UnavailableError(StrCat("FileRendezvous: writing '", tmp, "': ", std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::UnavailableError(StrCat("FileRendezvous: renaming to '", path, "': ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FileRendezvous::Wait(std::string_view key, int64_t timeout_ms) {
  const std::string path = PathFor(key);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
  auto sleep = std::chrono::milliseconds(1);
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream bytes;
      bytes << in.rdbuf();
      return std::move(bytes).str();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          StrCat("rendezvous key '", key, "' did not appear in ", dir_, " within ", timeout_ms, " ms"));
    }
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(sleep, deadline - now));
    sleep = std::min(sleep * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace cascade::comm
