// The KV cache in f32, f16 (the default), q8_0 and fp8_e4m3 on SmolLM2-135M (Q4_1), the real model,
// against llama.cpp's greedy ids (tests/golden/smollm2_q4_1_greedy.json, made by
// tests/golden/make_smollm2_goldens.py with llama.cpp's own f16 KV cache), and the bytes:
// f16 half of f32, q8_0 34/128 of it, fp8 a quarter plus its scales. (Comparing the dtypes to f32 directly says little
// on this model: SmolLM2 amplifies a 1e-7 relative input change to ~1.3e-2 in its logits,
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
// exact (90%; f32 and f16 measure 152/160, q8_0 154/160, fp8_e4m3 150/160). A position
// that differs must be a near tie: within kTieNats (0.75) of our best, except for fp8,
// whose rounding of each K/V element (up to 2^-4 relative, against f16's 2^-11 and q8_0's
// ~2^-8 of its block's max) moves near-tied logits further. Measured with ten choices of
// the K and V scales from 1/16 to 2 that keep this model's K and V (max 21 and 12.8) in
// range: 147-155/160 exact, the largest gap per choice 0.76 (unit scales) to 1.65 nats.
// Two of Cascade's own kernel sets that differ only in f32 summation order (portable over
// GGUF rows, AVX2 over packed rows) put llama.cpp's token 1.65 and 2.83 nats below their
// best at one position (case 0, position 5; 0 nats with a q8_0 cache), so its allowance is
// 3 nats.
constexpr double kFp8TieNats = 3.0;
TEST(KvCacheDTypeTest, SmolLM2MatchesLlamaCppGreedyWithEveryKvType) {
  CASCADE_REQUIRE_FILE(path, testing::DefaultModelPath());
  int64_t f32_bytes = 0;
  for (const auto& [kv, min_exact] : {std::pair{DType::kF32, 0.9}, std::pair{DType::kF16, 0.9},
                                      std::pair{DType::kQ8_0, 0.9}, std::pair{DType::kF8_E4M3, 0.9}}) {
    SCOPED_TRACE(DTypeName(kv));
    auto e = Engine(path, kv);
    ASSERT_NE(e, nullptr);
    const auto [exact, total, free_equal] =
        testing_golden::CompareWithLlamaCppGreedy(*e, kv == DType::kF8_E4M3 ? kFp8TieNats : testing_golden::kTieNats);
    EXPECT_GE(exact, total * min_exact) << exact << "/" << total;
    if (kv == DType::kF32) f32_bytes = e->kv_bytes();
    if (kv == DType::kF16) {
      EXPECT_EQ(e->kv_bytes() * 2, f32_bytes);
    } else if (kv == DType::kQ8_0) {
      EXPECT_EQ(e->kv_bytes() * 128, f32_bytes * 34);  // 34 bytes per 32 elements.
    } else if (kv == DType::kF8_E4M3) {
      // A byte per element, and an f32 scale per layer and KV head for K and for V: 30 x 3.
      EXPECT_EQ(e->kv_bytes(), f32_bytes / 4 + 2 * 30 * 3 * 4);
    }
    std::printf(
        "[ info ] kv %-5s vs llama.cpp: %d/%d teacher-forced positions exact, free-running equal for %d/%d; KV %.1f "
        "MiB\n",
        std::string(KvCacheDTypeName(kv)).c_str(), exact, total, free_equal, total, e->kv_bytes() / 1048576.0);
  }
}

}  // namespace
}  // namespace cascade::model
