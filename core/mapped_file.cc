#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/str_cat.h"

namespace cascade {

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = cascade::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(cascade::StrCat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::DataLossError(cascade::StrCat(path, ": mmap failed: ", std::strerror(err)));
    }
    data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // The mapping keeps the file alive.
  return std::unique_ptr<MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::WillNeed(size_t offset, size_t bytes) const {
  if (data_ == nullptr || offset >= size_) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t begin = offset / page * page;
  const size_t end = std::min(size_, offset + bytes);
  ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_WILLNEED);
}

void MappedFile::DontNeed(size_t offset, size_t bytes) const {
  if (data_ == nullptr || offset >= size_ || bytes == 0) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t begin = offset / page * page;
  const size_t end = std::min(size_, offset + bytes);
  ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);
}

void MappedFile::DontNeedExcept(std::vector<std::pair<const uint8_t*, size_t>> keep) const {
  if (data_ == nullptr) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::sort(keep.begin(), keep.end());
  size_t from = 0;  // Start of the next gap, page-aligned.
  for (const auto& [start, bytes] : keep) {
    if (bytes == 0 || start < data_ || start >= data_ + size_) continue;
    const size_t offset = static_cast<size_t>(start - data_);
    const size_t begin = offset / page * page;
    if (begin > from) DontNeed(from, begin - from);
    from = std::max(from, (std::min(size_, offset + bytes) + page - 1) / page * page);
  }
  if (from < size_) DontNeed(from, size_ - from);
}

}  // namespace cascade
