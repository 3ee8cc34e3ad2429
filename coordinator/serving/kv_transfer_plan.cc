#include "coordinator/serving/kv_transfer_plan.h"

#include <algorithm>

#include "core/str_cat.h"

namespace cascade::coordinator {

absl::StatusOr<std::vector<KvPiece>> PlanKvTransfer(std::span<const KvHolder> senders,
                                                    std::span<const KvHolder> receivers) {
  // Replicated heads: ranks holding the same layers and heads as an earlier one send nothing.
  std::vector<KvHolder> unique;
  for (const KvHolder& s : senders) {
    const auto same = [&](const KvHolder& u) {
      return u.first_layer == s.first_layer && u.last_layer == s.last_layer && u.head_begin == s.head_begin &&
             u.head_end == s.head_end;
    };
    if (std::none_of(unique.begin(), unique.end(), same)) unique.push_back(s);
  }
  std::vector<KvPiece> pieces;
  for (const KvHolder& r : receivers) {
    int64_t covered = 0;
    for (const KvHolder& s : unique) {
      const KvPiece p{s.rank,
                      r.rank,
                      std::max(s.first_layer, r.first_layer),
                      std::min(s.last_layer, r.last_layer),
                      std::max(s.head_begin, r.head_begin),
                      std::min(s.head_end, r.head_end)};
      if (p.first_layer >= p.last_layer || p.head_begin >= p.head_end) continue;
      covered += (p.last_layer - p.first_layer) * (p.head_end - p.head_begin);
      pieces.push_back(p);
    }
    // Unique senders are disjoint (a pipeline x TP grid), so the cells add up.
    if (covered != (r.last_layer - r.first_layer) * (r.head_end - r.head_begin)) {
      return absl::InvalidArgumentError(StrCat("KV transfer: the senders hold ", covered, " of the ",
                                               (r.last_layer - r.first_layer) * (r.head_end - r.head_begin),
                                               " layer x head cells of KV rank ", r.rank));
    }
  }
  return pieces;
}

void AddKvTransfer(uint64_t id, std::span<const int32_t> blocks, std::span<const KvPiece> pieces, bool send,
                   v1::StepRequest* step) {
  v1::KvTransfer* t = step->add_kv_transfers();
  t->set_id(id);
  t->mutable_blocks()->Add(blocks.begin(), blocks.end());
  for (const KvPiece& p : pieces) {
    v1::KvTransferPiece* out = t->add_pieces();
    out->set_send(send);
    out->set_rank(send ? p.sender : p.receiver);
    out->set_peer(send ? p.receiver : p.sender);
    out->set_first_layer(p.first_layer);
    out->set_last_layer(p.last_layer);
    out->set_head_begin(p.head_begin);
    out->set_head_end(p.head_end);
  }
}

}  // namespace cascade::coordinator
