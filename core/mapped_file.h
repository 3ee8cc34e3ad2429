// A read-only memory map of a whole file. Pages are touched only when read, so a worker
// that reads one shard's rows never faults in the rest of the file.
// Thread-safe after Open (immutable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace cascade {

class MappedFile {
 public:
  // Maps `path` read-only. NotFound if it does not exist; DataLoss if it cannot be read.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Hints the kernel that [offset, offset + bytes) will be read soon (best effort).
  void WillNeed(size_t offset, size_t bytes) const;
  // Drops this process's pages of [offset, offset + bytes), rounded out to whole pages,
  // once a caller has copied what it needs (best effort). Safe because the mapping is
  // MAP_PRIVATE and read-only: its pages are never dirty, so `MADV_DONTNEED` only unmaps
  // them, and a later read faults the same bytes back in from the file (a neighbouring
  // tensor on a shared boundary page is re-read, never changed).
  void DontNeed(size_t offset, size_t bytes) const;
  // Drops every page of the file except those that a range (start, bytes) of `keep` lies
  // on, likewise (ranges outside the mapping are ignored). Loading calls it once done:
  // each page fault maps the cached pages around the one read (the kernel's fault-around,
  // 64 KiB, or a whole large folio), so the pages of tensors dropped earlier come back
  // with a neighbour's read and would stay mapped (~10 MB of a 1B model's file).
  void DontNeedExcept(std::vector<std::pair<const uint8_t*, size_t>> keep) const;

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size) : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace cascade
