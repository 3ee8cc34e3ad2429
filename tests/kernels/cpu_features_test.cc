// The CPU kernel level's description: the level that runs and the rule that chose it, as
// the log and `cascade info` show it (the CLI test covers CASCADE_CPU_ISA's cap).
#include "kernels/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace cascade::kernels {
namespace {

std::string Name(CpuIsa isa) { return std::string(CpuIsaName(isa)); }

TEST(CpuFeaturesTest, DescriptionNamesTheActiveLevelAndItsRule) {
  if (std::getenv("CASCADE_CPU_ISA") != nullptr) GTEST_SKIP() << "CASCADE_CPU_ISA is set: the level is capped";
  ASSERT_EQ(ActiveCpuIsa(), BestCpuIsa());
  EXPECT_EQ(DescribeActiveCpuIsa(), Name(BestCpuIsa()) + " (the best this CPU runs)");
  if (BestCpuIsa() == CpuIsa::kGeneric) GTEST_SKIP() << "this CPU runs only the portable kernels: nothing to cap";
  SetMaxCpuIsaForTesting(CpuIsa::kGeneric);
  const std::string capped = DescribeActiveCpuIsa();
  SetMaxCpuIsaForTesting(BestCpuIsa());
  EXPECT_EQ(capped, "generic (capped for testing; this CPU runs " + Name(BestCpuIsa()) + ")");
}

}  // namespace
}  // namespace cascade::kernels
