// AdviseHugePages: which mappings of this process carry the advice, read from
// /proc/self/smaps (a mapping's VmFlags hold `hg` once MADV_HUGEPAGE applies to it, and
// madvise splits a mapping where the advised range starts and ends). Whether the kernel then
// backs them with huge pages depends on its THP setting and free memory, so that is not
// asserted; the advice is.
#include "core/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace cascade {
namespace {

constexpr uintptr_t kHuge = uintptr_t{2} << 20;

// The VmFlags line of the mapping holding `addr` ("" if none does).
std::string VmFlagsAt(uintptr_t addr) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = addr >= lo && addr < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

bool Advised(uintptr_t addr) { return VmFlagsAt(addr).find(" hg") != std::string::npos; }

// A kernel built without THP refuses the advice (AdviseHugePages then does nothing).
bool KernelHasThp() { return std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good(); }

// 12 MiB starting 4 KiB past a 2 MiB boundary: the advice covers the five whole 2 MiB pages
// inside, not the head or tail around them.
TEST(HugePagesTest, AdvisesTheAlignedInteriorOnly) {
  if (!KernelHasThp()) GTEST_SKIP() << "this kernel has no transparent huge pages";
  const size_t span = 16 << 20;
  void* region = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(region, MAP_FAILED);
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(region) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t begin = aligned + 4096;
  const size_t bytes = 12 << 20;
  ASSERT_FALSE(Advised(begin));
  AdviseHugePages(reinterpret_cast<void*>(begin), bytes);
  EXPECT_FALSE(Advised(begin)) << "the head before the first 2 MiB boundary";
  EXPECT_TRUE(Advised(aligned + kHuge)) << VmFlagsAt(aligned + kHuge);
  EXPECT_TRUE(Advised(aligned + 6 * kHuge - 1));
  EXPECT_FALSE(Advised(aligned + 6 * kHuge)) << "the tail after the last whole 2 MiB page";
  ::munmap(region, span);
}

TEST(HugePagesTest, LeavesSmallBuffersAlone) {
  const size_t span = 8 << 20;
  void* region = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(region, MAP_FAILED);
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(region) + kHuge - 1) & ~(kHuge - 1);
  AdviseHugePages(reinterpret_cast<void*>(aligned), kHuge + 4096);  // Under 4 MiB: no advice.
  EXPECT_FALSE(Advised(aligned));
  AdviseHugePages(nullptr, 64 << 20);  // No buffer: nothing happens.
  ::munmap(region, span);
}

}  // namespace
}  // namespace cascade
