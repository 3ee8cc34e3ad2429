// TpShard: the head, FFN and vocabulary splits of each rank, and the layouts it refuses.
#include "model/format/tp_shard.h"

#include "tests/test_support.h"

namespace cascade::model {
namespace {

ModelConfig Config(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t n_ff, int64_t n_vocab) {
  ModelConfig c;
  c.n_layers = 1;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = head_dim;
  c.n_embd = n_heads * head_dim;
  c.n_ff = n_ff;
  c.n_vocab = n_vocab;
  return c;
}

TpShard PlanOrDie(const ModelConfig& c, int rank, int size, int64_t ffn_block = 1, int64_t attn_block = 1) {
  absl::StatusOr<TpShard> s = TpShard::Plan(c, rank, size, ffn_block, attn_block);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : TpShard{};
}

TEST(TpShardTest, SingleRankOwnsEverything) {
  const ModelConfig c = Config(9, 3, 64, 1536, 49152);
  const TpShard s = PlanOrDie(c, 0, 1, 32, 32);
  EXPECT_EQ(s.kv_head_begin, 0);
  EXPECT_EQ(s.kv_head_end, 3);
  EXPECT_EQ(s.q_head_begin, 0);
  EXPECT_EQ(s.q_head_end, 9);
  EXPECT_EQ(s.ff_begin, 0);
  EXPECT_EQ(s.ff_end, 1536);
  EXPECT_EQ(s.vocab_begin, 0);
  EXPECT_EQ(s.vocab_end, 49152);
  EXPECT_FALSE(s.kv_replicated);
}

// SmolLM2: 9 heads / 3 KV heads at TP=2 -> 2 KV heads (6 q heads) and 1 (3 q heads).
TEST(TpShardTest, SmolLm2UnevenHeadsAtTp2) {
  const ModelConfig c = Config(9, 3, 64, 1536, 49152);
  const TpShard r0 = PlanOrDie(c, 0, 2, 32, 32), r1 = PlanOrDie(c, 1, 2, 32, 32);
  EXPECT_EQ(r0.kv_head_begin, 0);
  EXPECT_EQ(r0.kv_head_end, 2);
  EXPECT_EQ(r0.q_head_begin, 0);
  EXPECT_EQ(r0.q_head_end, 6);
  EXPECT_EQ(r1.kv_head_begin, 2);
  EXPECT_EQ(r1.kv_head_end, 3);
  EXPECT_EQ(r1.q_head_begin, 6);
  EXPECT_EQ(r1.q_head_end, 9);
  EXPECT_EQ(r0.n_heads(), 6);
  EXPECT_EQ(r1.n_heads(), 3);
  EXPECT_EQ(r0.q_dim(), 384);
  EXPECT_EQ(r1.kv_dim(), 64);
  EXPECT_EQ(r0.ff_begin, 0);
  EXPECT_EQ(r0.ff_end, 768);
  EXPECT_EQ(r1.ff_begin, 768);
  EXPECT_EQ(r1.ff_end, 1536);
  EXPECT_EQ(r0.vocab_end, 24576);
  EXPECT_EQ(r1.vocab_begin, 24576);
  EXPECT_EQ(r1.vocab_end, 49152);
}

// stories260K: 8 heads / 4 KV heads, FFN 172 (f32), vocab 512 at TP=3: 2/1/1 KV heads.
TEST(TpShardTest, EightHeadsFourKvAtTp3) {
  const ModelConfig c = Config(8, 4, 8, 172, 512);
  const TpShard s[3] = {PlanOrDie(c, 0, 3), PlanOrDie(c, 1, 3), PlanOrDie(c, 2, 3)};
  const int64_t kv[4] = {0, 2, 3, 4};
  const int64_t ff[4] = {0, 58, 115, 172};
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(s[r].ToString());
    EXPECT_EQ(s[r].kv_head_begin, kv[r]);
    EXPECT_EQ(s[r].kv_head_end, kv[r + 1]);
    EXPECT_EQ(s[r].q_head_begin, 2 * kv[r]);
    EXPECT_EQ(s[r].q_head_end, 2 * kv[r + 1]);
    EXPECT_EQ(s[r].ff_begin, ff[r]);
    EXPECT_EQ(s[r].ff_end, ff[r + 1]);
    EXPECT_EQ(s[r].vocab_chunk, 171);
    EXPECT_EQ(s[r].vocab_begin, 171 * r);
    EXPECT_FALSE(s[r].kv_replicated);
  }
  EXPECT_EQ(s[2].vocab_end, 512);
  EXPECT_EQ(s[2].n_vocab(), 170);
}

// TP=4 over 2 KV heads: each KV head is held by two ranks, which split its 2 q heads.
TEST(TpShardTest, MoreRanksThanKvHeadsReplicates) {
  const ModelConfig c = Config(4, 2, 64, 256, 96);
  for (int r = 0; r < 4; ++r) {
    const TpShard s = PlanOrDie(c, r, 4, 32, 32);
    SCOPED_TRACE(s.ToString());
    EXPECT_TRUE(s.kv_replicated);
    EXPECT_EQ(s.kv_head_begin, r / 2);
    EXPECT_EQ(s.n_kv_heads(), 1);
    EXPECT_EQ(s.q_head_begin, r);
    EXPECT_EQ(s.q_head_end, r + 1);
    EXPECT_EQ(s.ff_begin, 64 * r);
    EXPECT_EQ(s.ff_end, 64 * (r + 1));
  }
  // 8 heads / 2 KV heads at TP=3: KV head 0 on ranks 0-1 (2 q heads each), KV head 1 on rank 2.
  const ModelConfig c2 = Config(8, 2, 8, 96, 96);
  const TpShard a = PlanOrDie(c2, 0, 3), b = PlanOrDie(c2, 1, 3), d = PlanOrDie(c2, 2, 3);
  EXPECT_EQ(a.kv_head_begin, 0);
  EXPECT_EQ(b.kv_head_begin, 0);
  EXPECT_EQ(d.kv_head_begin, 1);
  EXPECT_EQ(a.q_head_begin, 0);
  EXPECT_EQ(a.q_head_end, 2);
  EXPECT_EQ(b.q_head_begin, 2);
  EXPECT_EQ(b.q_head_end, 4);
  EXPECT_EQ(d.q_head_begin, 4);
  EXPECT_EQ(d.q_head_end, 8);
}

// The FFN splits in whole blocks of the down weight: 384 = 12 blocks of 32 at TP=3 is 4 each;
// 1536 = 6 K-blocks of 256 at TP=4 is 2/2/1/1 blocks.
TEST(TpShardTest, FfnSplitsInWholeBlocks) {
  const ModelConfig c = Config(8, 4, 16, 384, 2048);
  for (int r = 0; r < 3; ++r) {
    const TpShard s = PlanOrDie(c, r, 3, 32, 32);
    EXPECT_EQ(s.ff_begin, 128 * r);
    EXPECT_EQ(s.ff_end, 128 * (r + 1));
  }
  const ModelConfig k = Config(8, 4, 64, 1536, 1000);
  const int64_t bounds[5] = {0, 512, 1024, 1280, 1536};
  for (int r = 0; r < 4; ++r) {
    const TpShard s = PlanOrDie(k, r, 4, 256, 1);
    EXPECT_EQ(s.ff_begin, bounds[r]);
    EXPECT_EQ(s.ff_end, bounds[r + 1]);
    EXPECT_EQ(s.ff_begin % 256, 0);
  }
}

TEST(TpShardTest, RefusesLayoutsThatCannotSplit) {
  const ModelConfig c = Config(8, 4, 16, 64, 512);
  // More ranks than FFN blocks (64 = 2 blocks of 32).
  absl::StatusOr<TpShard> s = TpShard::Plan(c, 0, 3, 32, 1);
  EXPECT_STATUS_CODE(s, kInvalidArgument);
  EXPECT_THAT(testing::StatusMessage(s.status()), ::testing::HasSubstr("FFN"));
  // A head-group boundary inside a weight block: 4 heads of 16 over 4 ranks start rank 1 at
  // column 16 of an attention output stored in 32-element blocks.
  const ModelConfig mha = Config(4, 4, 16, 256, 512);
  s = TpShard::Plan(mha, 0, 4, 32, 32);
  EXPECT_STATUS_CODE(s, kInvalidArgument);
  EXPECT_THAT(testing::StatusMessage(s.status()), ::testing::HasSubstr("inside a weight block"));
  // Q4_K attention output (256) with head_dim 64: TP=2 over 3 KV heads starts rank 1 at 384.
  const ModelConfig smol = Config(9, 3, 64, 1536, 49152);
  EXPECT_STATUS_CODE(TpShard::Plan(smol, 0, 2, 256, 256), kInvalidArgument);
  // More ranks sharing one KV head than it has query heads (2 heads / 2 KV heads at TP=4).
  EXPECT_STATUS_CODE(TpShard::Plan(Config(2, 2, 8, 256, 512), 0, 4), kInvalidArgument);
  // More ranks than vocabulary rows can fill.
  EXPECT_STATUS_CODE(TpShard::Plan(Config(8, 4, 8, 256, 5), 0, 4), kInvalidArgument);
  // A rank outside the group.
  EXPECT_STATUS_CODE(TpShard::Plan(c, 2, 2), kInvalidArgument);
  EXPECT_STATUS_CODE(TpShard::Plan(c, 0, 0), kInvalidArgument);
}

}  // namespace
}  // namespace cascade::model
