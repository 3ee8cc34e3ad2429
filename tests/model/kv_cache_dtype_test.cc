// The KV cache in f32, f16 (the default) and q8_0 on SmolLM2-135M (Q4_1), the real model,
// against llama.cpp's greedy ids (tests/golden/smollm2_q4_1_greedy.json, made by
// tests/golden/make_smollm2_goldens.py with llama.cpp's own f16 KV cache), and the bytes:
// f16 half of f32, q8_0 34/128 of it. (Comparing the dtypes to f32 directly says little on
// this model: SmolLM2 amplifies a 1e-7 relative input change to ~1.3e-2 in its logits,
// tests/model/tp_transformer_test.cc, so f16's 2^-11 rounding of K/V already moves logits
// by up to ~0.17 relative L2 and flips near-tied argmaxes; llama.cpp is the reference.)
#include <cstdio>
#include <string>

#include "model/local_engine.h"
#include "tests/model/smollm2_golden.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

std::unique_ptr<LocalEngine> Engine(const std::string& path, DType kv) {
  LocalEngineOptions options;
  options.n_threads = 2;
  options.max_context = 512;
  options.kv_dtype = kv;
  auto e = LocalEngine::Create(path, options);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// Teacher-forced over llama.cpp's 32 greedy ids per prompt (its KV cache is f16), with the
// tie rule of smollm2_golden.h, for each KV dtype; at least min_exact of the positions are
// exact (90%; f32 and f16 measure 152/160, q8_0 154/160).
TEST(KvCacheDTypeTest, SmolLM2MatchesLlamaCppGreedyWithEveryKvType) {
  CASCADE_REQUIRE_FILE(path, testing::DefaultModelPath());
  int64_t f32_bytes = 0;
  for (const auto& [kv, min_exact] :
       {std::pair{DType::kF32, 0.9}, std::pair{DType::kF16, 0.9}, std::pair{DType::kQ8_0, 0.9}}) {
    SCOPED_TRACE(DTypeName(kv));
    auto e = Engine(path, kv);
    ASSERT_NE(e, nullptr);
    const auto [exact, total, free_equal] = testing_golden::CompareWithLlamaCppGreedy(*e);
    EXPECT_GE(exact, total * min_exact) << exact << "/" << total;
    if (kv == DType::kF32) f32_bytes = e->kv_bytes();
    if (kv == DType::kF16) {
      EXPECT_EQ(e->kv_bytes() * 2, f32_bytes);
    } else if (kv == DType::kQ8_0) {
      EXPECT_EQ(e->kv_bytes() * 128, f32_bytes * 34);  // 34 bytes per 32 elements.
    }
    std::printf(
        "[ info ] kv %-5s vs llama.cpp: %d/%d teacher-forced positions exact, free-running equal for %d/%d; KV %.1f "
        "MiB\n",
        std::string(DTypeName(kv)).c_str(), exact, total, free_equal, total, e->kv_bytes() / 1048576.0);
  }
}

}  // namespace
}  // namespace cascade::model
