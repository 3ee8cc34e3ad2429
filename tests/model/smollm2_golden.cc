#include "tests/model/smollm2_golden.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"

namespace cascade::model::testing_golden {

GoldenAgreement CompareWithLlamaCppGreedy(LocalEngine& e, double tie_nats) {
  GoldenAgreement a;
  std::ifstream in(testing::SourceDir() + "/tests/golden/smollm2_q4_1_greedy.json");
  if (!in.good()) {
    ADD_FAILURE() << "tests/golden/smollm2_q4_1_greedy.json is missing";
    return a;
  }
  const nlohmann::json golden = nlohmann::json::parse(in);
  EXPECT_GE(golden["cases"].size(), 3u);
  const int64_t V = e.config().n_vocab;
  for (const auto& c : golden["cases"]) {
    const std::vector<int32_t> prompt = c["prompt_ids"], ref = c["greedy_ids"];
    EXPECT_EQ(ref.size(), 32u);
    if (ref.size() != 32u) continue;
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), ref.begin(), ref.end() - 1);
    auto logits = e.PromptLogits(seq, static_cast<int64_t>(prompt.size()) - 1);
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) continue;
    int64_t first_tie = 32;
    for (int64_t i = 0; i < 32; ++i) {
      const float* row = logits->data() + i * V;
      const int32_t best = static_cast<int32_t>(std::max_element(row, row + V) - row);
      const double gap = row[best] - row[ref[i]];  // Logit gap = logprob gap.
      ++a.total;
      if (best == ref[i]) {
        ++a.exact;
      } else {
        first_tie = std::min(first_tie, i);
        EXPECT_LT(gap, tie_nats) << c["text"] << " position " << i << ": ours " << best << ", llama.cpp " << ref[i];
      }
    }
    GenerateRequest r;
    r.prompt_ids = prompt;
    r.sampling.temperature = 0;
    r.max_tokens = 32;
    r.stops.ignore_eos = true;
    auto run = e.Generate(r);
    EXPECT_TRUE(run.ok()) << run.status();
    int64_t same = 0;
    while (run.ok() && same < 32 && same < static_cast<int64_t>(run->token_ids.size()) &&
           run->token_ids[same] == ref[same]) {
      ++same;
    }
    a.free_equal += static_cast<int>(same);
    std::printf("[ info ] %-36s teacher-forced exact until %2lld, free-running equal for %2lld/32\n",
                std::string(c["text"]).c_str(), static_cast<long long>(first_tie), static_cast<long long>(same));
  }
  return a;
}

}  // namespace cascade::model::testing_golden
