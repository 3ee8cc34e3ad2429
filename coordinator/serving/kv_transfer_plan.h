// Disaggregated serving's KV transfer, as the coordinator plans it: which worker of the
// prefill replica sends which layers and KV heads of a sequence to which worker of the
// decode replica, whatever the two replicas' pipeline and tensor-parallel splits
// (model/kv_transfer.h moves the bytes). Every receiver's layers x heads are covered
// exactly once: where TP replicates KV heads (tp > n_kv_heads), only the first sender
// holding a head sends it. The pieces are ordered receiver by receiver, then sender by
// sender; each worker runs its own in that order, blocking on each, which cannot deadlock:
// both ends of the first piece not yet done have done all earlier ones and wait on it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "cascade/v1/cluster.pb.h"

namespace cascade::coordinator {

// A worker's part of the model: its rank in the KV group, its global layers
// [first_layer, last_layer) and KV heads [head_begin, head_end).
struct KvHolder {
  int rank = 0;
  int64_t first_layer = 0, last_layer = 0;
  int64_t head_begin = 0, head_end = 0;
  bool operator==(const KvHolder&) const = default;
};

// Layers x heads that `sender` sends to `receiver` (KV group ranks).
struct KvPiece {
  int sender = 0, receiver = 0;
  int64_t first_layer = 0, last_layer = 0;
  int64_t head_begin = 0, head_end = 0;
  bool operator==(const KvPiece&) const = default;
};

// The pieces (see above). InvalidArgument when some layer and head of a receiver is held
// by no sender.
absl::StatusOr<std::vector<KvPiece>> PlanKvTransfer(std::span<const KvHolder> senders,
                                                    std::span<const KvHolder> receivers);

// One side of transfer `id` as its replica's step carries it: the sequence's `blocks` on
// that replica and every piece, run by the senders (`send`) or by the receivers.
void AddKvTransfer(uint64_t id, std::span<const int32_t> blocks, std::span<const KvPiece> pieces, bool send,
                   v1::StepRequest* step);

}  // namespace cascade::coordinator
