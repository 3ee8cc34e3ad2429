// Tests of core/load_balance.h: the even split's parts tile the items in order with sizes
// that differ by at most one (the larger first), EvenSplitPart inverts it, and the max/mean
// ratio of counts.
#include "core/load_balance.h"

#include <vector>

#include "tests/test_support.h"

namespace cascade {
namespace {

TEST(LoadBalanceTest, EvenSplitTilesAndEvenSplitPartInvertsIt) {
  for (int64_t n = 0; n <= 40; ++n) {
    for (int64_t parts = 1; parts <= 7; ++parts) {
      int64_t next = 0;
      for (int64_t i = 0; i < parts; ++i) {
        const auto [begin, end] = EvenSplit(n, parts, i);
        EXPECT_EQ(begin, next) << n << " / " << parts << " part " << i;
        EXPECT_EQ(end - begin, n / parts + (i < n % parts ? 1 : 0));
        for (int64_t item = begin; item < end; ++item) EXPECT_EQ(EvenSplitPart(n, parts, item), i) << item;
        next = end;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(LoadBalanceTest, MaxMeanRatio) {
  EXPECT_DOUBLE_EQ(MaxMeanRatio(std::vector<int64_t>{5, 5, 5, 5}), 1.0);
  EXPECT_DOUBLE_EQ(MaxMeanRatio(std::vector<int64_t>{8, 0, 0, 0}), 4.0);
  EXPECT_DOUBLE_EQ(MaxMeanRatio(std::vector<int64_t>{0, 0}), 0.0);
}

}  // namespace
}  // namespace cascade
