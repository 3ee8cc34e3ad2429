// model::MeasureModel against an independent count over the file's tensor table: every
// tensor named "blk.<l>." (MoE experts included) belongs to layer l, "token_embd.weight" is the embedding, the
// rest is the head (final norm and LM head), and a tied head reads the embedding again; a
// decode token reads its share of the routed experts (ffn_{gate,up,down}_exps).
// To add a case, add a RandomModelSpec to the list.
#include "model/format/model_size.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/random_model.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

ModelSize CountByName(const ModelFiles& files) {
  ModelSize want;
  want.layer_bytes.assign(files.config.n_layers, 0);
  for (const TensorInfo& t : files.weights->tensors()) {
    const auto bytes = static_cast<int64_t>(t.n_bytes);
    if (t.name.rfind("blk.", 0) == 0) {
      want.layer_bytes[std::stoll(t.name.substr(4))] += bytes;
      for (const char* routed : {".ffn_gate_exps.weight", ".ffn_up_exps.weight", ".ffn_down_exps.weight"}) {
        if (t.name.ends_with(routed)) want.routed_expert_bytes += bytes;
      }
    } else if (t.name == "token_embd.weight") {
      want.embedding_bytes += bytes;
    } else {
      want.head_bytes += bytes;
    }
  }
  if (files.config.tied_embeddings) want.head_bytes += want.embedding_bytes;
  return want;
}

TEST(ModelSizeTest, PartsMatchTheTensorTable) {
  testing::RandomModelSpec untied{.weight_type = DType::kQ8_0, .n_layers = 3, .qkv_bias = true};
  testing::RandomModelSpec tied{.weight_type = DType::kQ4_0, .n_layers = 2, .tied = true};
  // MoE layers: the router and the merged expert tensors count for their layer (the
  // planner balances stages by bytes, experts included).
  testing::RandomModelSpec moe{.weight_type = DType::kQ8_0, .n_layers = 3, .moe = testing::MoeFamily::kQwen2Moe};
  for (const testing::RandomModelSpec& spec : {untied, tied, moe}) {
    testing::TempDir dir;
    const std::string path = dir.path() + "/model.gguf";
    testing::WriteRandomModel(spec, path);
    auto files = OpenModelFiles(path);
    ASSERT_TRUE(files.ok()) << files.status();
    const ModelSize got = MeasureModel(*files), want = CountByName(*files);
    EXPECT_EQ(got.layer_bytes, want.layer_bytes) << "tied " << spec.tied;
    EXPECT_EQ(got.embedding_bytes, want.embedding_bytes);
    EXPECT_EQ(got.head_bytes, want.head_bytes);
    EXPECT_EQ(got.routed_expert_bytes, want.routed_expert_bytes);
    // A decode token reads every layer's tensors but the routed experts it is not sent to
    // (Qwen2-MoE's shared expert always), and the head.
    int64_t step = want.head_bytes;
    for (int64_t b : want.layer_bytes) step += b;
    if (spec.moe != testing::MoeFamily::kNone) {
      EXPECT_GT(want.routed_expert_bytes, 0);
      step -= want.routed_expert_bytes / spec.n_experts * (spec.n_experts - files->config.n_experts_used);
    }
    EXPECT_EQ(got.DecodeStepBytes(files->config), step);
    EXPECT_GT(got.layer_bytes[0], 0);
    if (spec.moe != testing::MoeFamily::kNone) {  // 8 experts of 3 x 128 x 256 Q8_0 dominate.
      EXPECT_GT(got.layer_bytes[0], spec.n_experts * 3 * RowBytes(DType::kQ8_0, 256) * 128);
    }
    // A drafter of one layer holds layer 0, the embedding and the head.
    EXPECT_EQ(got.PrefixBytes(1), want.layer_bytes[0] + want.embedding_bytes + want.head_bytes);
  }
}

}  // namespace
}  // namespace cascade::model
