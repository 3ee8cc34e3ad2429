// Peak memory of serving a GGUF model on the CPU: loading it (every matrix repacked, the
// file's pages dropped as the copies are made, PackedWeight at the file's bits) and running
// a short prompt must raise the process's peak resident set by at most 5% over the file's
// size (issue 31's goal). The process's fixed cost (libraries, the test binary) is left
// out: the peak is reset (/proc/self/clear_refs) and measured from the resident set before
// loading. Models: random weights in real layouts (16 layers of width 1024), written by
// tests/random_model.h; their sizes are the files'.
#include <malloc.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "model/local_engine.h"
#include "tests/random_model.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

// A field of /proc/self/status in bytes (-1 if absent).
int64_t StatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(field + ":")) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

// Resets VmHWM to the current resident set (Linux 4.0+); false if /proc refuses.
bool ResetPeak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good();
}

struct Case {
  const char* name;
  DType weight_type;
  bool q4_k_m;
};

class PeakMemoryTest : public ::testing::TestWithParam<Case> {};

TEST_P(PeakMemoryTest, LoadingAndAShortPromptStayWithinFivePercentOfTheFile) {
  const Case& c = GetParam();
  testing::TempDir dir;
  const std::string path = dir.path() + "/model.gguf";
  testing::RandomModelSpec spec;
  spec.weight_type = c.weight_type;
  spec.q4_k_m = c.q4_k_m;
  spec.tied = true;  // The embedding is then the packed head, as Llama-3.2-1B's.
  spec.n_layers = 16;
  spec.n_embd = 1024;
  spec.n_heads = 16;
  spec.n_kv_heads = 4;
  spec.n_ff = 4096;
  spec.n_vocab = 32000;
  spec.distinct_values = 4096;
  testing::WriteRandomModel(spec, path);
  const int64_t file_bytes = static_cast<int64_t>(std::filesystem::file_size(path));
  malloc_trim(0);  // The writer's freed buffers go back, not into the baseline's slack.
  if (!ResetPeak()) GTEST_SKIP() << "cannot reset the peak resident set: /proc/self/clear_refs refused the write";
  const int64_t before = StatusBytes("VmRSS");
  ASSERT_GT(before, 0);
  {
    LocalEngineOptions options;
    options.n_threads = 2;
    options.max_context = 64;
    absl::StatusOr<std::unique_ptr<LocalEngine>> e = LocalEngine::Create(path, options);
    ASSERT_TRUE(e.ok()) << e.status();
    GenerateRequest r;
    r.prompt_ids = {1, 2, 3, 4, 5, 6, 7, 8};
    r.sampling.temperature = 0;
    r.max_tokens = 4;
    r.stops.ignore_eos = true;
    ASSERT_TRUE((*e)->Generate(r).ok());
  }
  const int64_t peak = StatusBytes("VmHWM") - before;
  const double ratio = static_cast<double>(peak) / static_cast<double>(file_bytes);
  std::printf("%s: file %.1f MiB, peak above the baseline %.1f MiB (%.3fx)\n", c.name, file_bytes / 1048576.0,
              peak / 1048576.0, ratio);
  EXPECT_LE(ratio, 1.05) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Formats, PeakMemoryTest,
                         ::testing::Values(Case{"Q4_K_M", DType::kQ4_K, true}, Case{"Q8_0", DType::kQ8_0, false},
                                           Case{"MXFP4", DType::kMXFP4, false}),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace cascade::model
