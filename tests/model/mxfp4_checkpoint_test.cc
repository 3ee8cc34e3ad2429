// AMD Quark's MXFP4 checkpoints (model/format/mxfp4_checkpoint.h): a dense Qwen3 and a
// Qwen3-MoE whose projections (experts included) the writer quantized to E2M1 codes with one
// E8M0 exponent per 32 inputs, stored as Quark exports them (U8 `P.weight` two codes a
// byte, U8 `P.weight_scale`), and, in a GGUF file, as the f32 values they decode to by the
// OCP definition (tests/random_model.cc, tests/test_support.h's OcpE2M1). So:
//  * every weight Cascade reads decodes exactly to those values;
//  * its logits follow the naive double forward of the values within the bound of the
//    CPU's MXFP4 kernel, which quantizes activations to 8 bits (2e-2 per product,
//    tests/kernels/linear_test.cc), while quantizing moved the reference far past it;
//  * 32 greedy ids equal those of Cascade on the GGUF file of the values;
//  * TP 2 (and EP 2 for the experts) equal TP 1 (tests/model/tp_transformer_test.cc).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cpu/quantize.h"
#include "model/format/model_files.h"
#include "model/format/safetensors.h"
#include "tests/greedy_trace.h"
#include "tests/model/naive_forward.h"
#include "tests/random_model.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using namespace naive;  // NOLINT: the reference's vocabulary throughout.
using testing::MoeFamily;

testing::RandomModelSpec Spec(MoeFamily moe, bool quark) {
  testing::RandomModelSpec s{.weight_type = DType::kF32, .n_layers = 2, .qk_norm = true, .quark_mxfp4 = quark};
  if (moe != MoeFamily::kNone) {
    s.moe = moe;
    s.n_experts = 8;
    s.n_experts_used = 2;
    s.n_ff_expert = 128;
  }
  return s;
}

// Weight `name` as Cascade reads it decodes exactly to what the stored bytes mean by the
// format (`stored`: the directory's tensors as they are): element c of row r is
// E2M1(code) x 2^(exponent - 127), the code in nibble c % 2 of byte c / 2, the exponent
// that of group c / 32.
void ExpectFormatValues(const ModelFiles& quark, const WeightSource& stored, const std::string& name) {
  SCOPED_TRACE(name);
  const TensorInfo* t = quark.weights->FindTensor(name);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::kMXFP4);
  EXPECT_EQ(quark.weights->FindTensor(name + "_scale"), nullptr) << "the exponents are read as part of the weight";
  auto got = quark.weights->Read(name);
  auto codes = stored.Read(name);
  auto exponents = stored.Read(name + "_scale");
  ASSERT_TRUE(got.ok() && codes.ok() && exponents.ok());
  const int64_t rows = t->shape[0], cols = t->shape[1];
  const auto* q = static_cast<const uint8_t*>(codes->data);
  const auto* x = static_cast<const uint8_t*>(exponents->data);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_TRUE(kernels::cpu::DequantizeRow(DType::kMXFP4,
                                            static_cast<const uint8_t*>(got->data) + r * RowBytes(DType::kMXFP4, cols),
                                            row.data(), cols)
                    .ok());
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = q[(r * cols + c) / 2];
      const double want =
          std::ldexp(testing::OcpE2M1(c % 2 == 0 ? byte & 15 : byte >> 4), x[(r * cols + c) / 32] - 127);
      ASSERT_EQ(row[c], want) << "[" << r << ", " << c << "]";
    }
  }
}

class QuarkMxfp4Test : public ::testing::TestWithParam<MoeFamily> {};

TEST_P(QuarkMxfp4Test, MatchesTheNaiveForwardOfItsValues) {
  constexpr double kBound = 5e-2;
  const testing::RandomModelSpec spec = Spec(GetParam(), true);
  testing::TempDir dir;
  const std::string hf_dir = dir.path() + "/quark", gguf = dir.path() + "/values.gguf";
  const std::string plain = dir.path() + "/unquantized.gguf";
  testing::WriteRandomHfModel(spec, hf_dir);
  testing::WriteRandomModel(spec, gguf);
  testing::WriteRandomModel(Spec(GetParam(), false), plain);
  auto hf = OpenModelFiles(hf_dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  auto values = OpenModelFiles(gguf);
  auto unquantized = OpenModelFiles(plain);
  ASSERT_TRUE(values.ok() && unquantized.ok());

  auto stored = SafetensorsSource::OpenDirectory(hf_dir);
  ASSERT_TRUE(stored.ok()) << stored.status();
  int n_mxfp4 = 0;
  for (const TensorInfo& t : hf->weights->tensors()) {
    if (t.dtype != DType::kMXFP4) continue;
    ExpectFormatValues(*hf, **stored, t.name);
    ++n_mxfp4;
  }
  EXPECT_EQ(n_mxfp4, spec.n_layers * (GetParam() == MoeFamily::kNone ? 7 : 4 + 3 * spec.n_experts));

  const RefRouting routing{spec.n_experts_used, spec.norm_topk_prob};
  const std::vector<int32_t> ids = TestIds(hf->config.n_vocab);
  const auto ref = RefForward(LoadRef(*values, {}, routing), ids);
  const double moved = WorstRelL2(ref, RefForward(LoadRef(*unquantized, {}, routing), ids));
  EXPECT_GT(moved, 4 * kBound) << "quantizing to MXFP4 should move the logits";
  const double err = WorstRelL2(ref, CascadeLogits(*hf, ids, 2), kBound);
  std::printf("[ info ] Quark MXFP4: worst relative L2 %.3g (bound %.3g); MXFP4 moved the reference by %.3g\n", err,
              kBound, moved);

  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 8);
  EXPECT_EQ(testing::LocalGreedy(hf_dir, prompt, 32), testing::LocalGreedy(gguf, prompt, 32));
}

INSTANTIATE_TEST_SUITE_P(Families, QuarkMxfp4Test, ::testing::Values(MoeFamily::kNone, MoeFamily::kQwen3Moe),
                         [](const auto& info) { return info.param == MoeFamily::kNone ? "Qwen3" : "Qwen3Moe"; });

}  // namespace
}  // namespace cascade::model
