// MappedFile: the bytes of the file, and which of its pages this process keeps mapped after
// DontNeed / DontNeedExcept, read from /proc/self/pagemap (bit 63: the page is present).
#include "core/mapped_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_support.h"

namespace cascade {
namespace {

constexpr size_t kPages = 16;

size_t PageSize() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

// Whether each of the mapping's pages is mapped in this process now.
std::vector<bool> Present(const MappedFile& f) {
  const size_t page = PageSize();
  std::vector<bool> present;
  const int fd = ::open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0) return present;
  for (size_t i = 0; i < f.size() / page; ++i) {
    uint64_t entry = 0;
    const off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(f.data() + i * page) / page * 8);
    if (::pread(fd, &entry, 8, at) != 8) break;
    present.push_back((entry >> 63) & 1);
  }
  ::close(fd);
  return present;
}

// Maps a file of kPages pages (page i filled with i) and reads every page.
std::unique_ptr<MappedFile> MapAndTouch(const testing::TempDir& dir) {
  std::string bytes;
  for (size_t i = 0; i < kPages; ++i) bytes.append(PageSize(), static_cast<char>(i));
  absl::StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(dir.WriteFile("f", bytes));
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return nullptr;
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < kPages; ++i) sink = sink + (*f)->data()[i * PageSize()];
  return *std::move(f);
}

TEST(MappedFileTest, DontNeedExceptKeepsOnlyThePagesTheRangesLieOn) {
  testing::TempDir dir;
  std::unique_ptr<MappedFile> f = MapAndTouch(dir);
  ASSERT_NE(f, nullptr);
  const std::vector<bool> before = Present(*f);
  if (before.size() != kPages) GTEST_SKIP() << "/proc/self/pagemap is not readable here";
  for (size_t i = 0; i < kPages; ++i) ASSERT_TRUE(before[i]) << "page " << i << " was read";
  const size_t page = PageSize();
  // Page 3's last byte and page 4 whole; pages 9-10 from inside page 9; a range outside.
  const std::vector<uint8_t> elsewhere(8);
  f->DontNeedExcept(
      {{f->data() + 9 * page + 100, page}, {f->data() + 4 * page - 1, page + 1}, {elsewhere.data(), elsewhere.size()}});
  const std::vector<bool> after = Present(*f);
  ASSERT_EQ(after.size(), kPages);
  for (size_t i = 0; i < kPages; ++i) {
    const bool kept = i == 3 || i == 4 || i == 9 || i == 10;
    EXPECT_EQ(after[i], kept) << "page " << i;
  }
  // Dropped pages read back the file's bytes.
  for (size_t i = 0; i < kPages; ++i) EXPECT_EQ(f->data()[i * page + 7], static_cast<uint8_t>(i)) << "page " << i;
}

TEST(MappedFileTest, DontNeedExceptNothingDropsEveryPage) {
  testing::TempDir dir;
  std::unique_ptr<MappedFile> f = MapAndTouch(dir);
  ASSERT_NE(f, nullptr);
  if (Present(*f).size() != kPages) GTEST_SKIP() << "/proc/self/pagemap is not readable here";
  f->DontNeedExcept({});
  const std::vector<bool> after = Present(*f);
  for (size_t i = 0; i < kPages; ++i) EXPECT_FALSE(after[i]) << "page " << i;
}

}  // namespace
}  // namespace cascade
