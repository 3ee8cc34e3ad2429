// Tests for PlanKvTransfer (coordinator/serving/kv_transfer_plan.cc): every receiver's
// layers x KV heads come exactly once, from the senders that hold them, across pipeline
// and TP splits that disagree and TP sizes past the KV heads (replicated heads sent once);
// a gap is refused; AddKvTransfer puts each piece on the side that runs it.
#include <vector>

#include "coordinator/serving/kv_transfer_plan.h"
#include "tests/test_support.h"

namespace cascade::coordinator {
namespace {

// Each receiver cell (layer, head) must be covered once, by a sender that holds it.
void ExpectExactCover(const std::vector<KvHolder>& senders, const std::vector<KvHolder>& receivers,
                      const std::vector<KvPiece>& pieces) {
  for (const KvHolder& r : receivers) {
    for (int64_t l = r.first_layer; l < r.last_layer; ++l) {
      for (int64_t h = r.head_begin; h < r.head_end; ++h) {
        int n = 0;
        for (const KvPiece& p : pieces) {
          if (p.receiver != r.rank || l < p.first_layer || l >= p.last_layer || h < p.head_begin || h >= p.head_end) {
            continue;
          }
          ++n;
          bool held = false;
          for (const KvHolder& s : senders) {
            held = held || (s.rank == p.sender && l >= s.first_layer && l < s.last_layer && h >= s.head_begin &&
                            h < s.head_end);
          }
          EXPECT_TRUE(held) << "rank " << p.sender << " does not hold layer " << l << " head " << h;
        }
        EXPECT_EQ(n, 1) << "receiver " << r.rank << " layer " << l << " head " << h;
      }
    }
  }
}

// `stages` x `tp` workers from rank `base` over 8 layers and 4 KV heads (TP beyond 4 replicates).
std::vector<KvHolder> Grid(int base, int stages, int tp) {
  std::vector<KvHolder> out;
  for (int s = 0; s < stages; ++s) {
    for (int r = 0; r < tp; ++r) {
      const int64_t h0 = tp <= 4 ? 4 * r / tp : r * 4 / tp;
      const int64_t h1 = tp <= 4 ? 4 * (r + 1) / tp : h0 + 1;
      out.push_back({base + s * tp + r, 8 * s / stages, 8 * (s + 1) / stages, h0, h1});
    }
  }
  return out;
}

TEST(KvTransferPlanTest, EveryReceiverCellComesOnceFromAHolder) {
  for (const auto& [ps, pt, ds, dt] : std::vector<std::array<int, 4>>{{1, 1, 1, 1},
                                                                      {1, 1, 1, 2},
                                                                      {1, 2, 1, 1},
                                                                      {2, 2, 1, 1},
                                                                      {1, 1, 2, 2},
                                                                      {2, 1, 3, 2},
                                                                      {1, 4, 1, 8},
                                                                      {1, 8, 2, 2}}) {
    SCOPED_TRACE(::testing::Message() << "prefill PP " << ps << " TP " << pt << ", decode PP " << ds << " TP " << dt);
    const std::vector<KvHolder> senders = Grid(0, ps, pt), receivers = Grid(ps * pt, ds, dt);
    absl::StatusOr<std::vector<KvPiece>> pieces = PlanKvTransfer(senders, receivers);
    ASSERT_OK(pieces);
    ExpectExactCover(senders, receivers, *pieces);
    // Receiver by receiver, in order: the order every worker runs its pieces in.
    for (size_t i = 1; i < pieces->size(); ++i) EXPECT_LE((*pieces)[i - 1].receiver, (*pieces)[i].receiver);
  }
  // TP 8 over 4 heads: ranks 2r and 2r+1 hold head r; only the first sends.
  absl::StatusOr<std::vector<KvPiece>> pieces = PlanKvTransfer(Grid(0, 1, 8), Grid(8, 1, 1));
  ASSERT_OK(pieces);
  ASSERT_EQ(pieces->size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ((*pieces)[i].sender, static_cast<int>(2 * i));
}

TEST(KvTransferPlanTest, AGapIsRefused) {
  const std::vector<KvHolder> senders = {{0, 0, 4, 0, 4}};  // Layers 4-7 held by nobody.
  EXPECT_THAT(PlanKvTransfer(senders, Grid(1, 1, 1)),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("16 of the 32")));
}

TEST(KvTransferPlanTest, EachSideRunsItsOwnPieces) {
  const std::vector<KvPiece> pieces = {{0, 2, 0, 8, 0, 2}, {1, 2, 0, 8, 2, 4}};
  const std::vector<int32_t> blocks = {5, 9};
  v1::StepRequest send, recv;
  AddKvTransfer(7, blocks, pieces, true, &send);
  AddKvTransfer(7, blocks, pieces, false, &recv);
  ASSERT_EQ(send.kv_transfers_size(), 1);
  const v1::KvTransfer& s = send.kv_transfers(0);
  EXPECT_EQ(s.id(), 7u);
  EXPECT_EQ(std::vector<int32_t>(s.blocks().begin(), s.blocks().end()), blocks);
  ASSERT_EQ(s.pieces_size(), 2);
  EXPECT_TRUE(s.pieces(1).send());
  EXPECT_EQ(s.pieces(1).rank(), 1);
  EXPECT_EQ(s.pieces(1).peer(), 2);
  EXPECT_EQ(s.pieces(1).head_begin(), 2);
  const v1::KvTransfer& r = recv.kv_transfers(0);
  EXPECT_FALSE(r.pieces(1).send());
  EXPECT_EQ(r.pieces(1).rank(), 2);
  EXPECT_EQ(r.pieces(1).peer(), 1);
}

}  // namespace
}  // namespace cascade::coordinator
