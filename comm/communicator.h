// The data plane's door: `Communicator`, one member of a fixed group of ranks
// that moves bytes point to point (stage hand-off of hidden states) and runs
// the collectives of a tensor-parallel group (all-reduce, all-gather,
// broadcast, barrier) over host memory. Also `Rendezvous`, the key/value store
// a group bootstraps through (the coordinator's key RPCs in production;
// `comm/rendezvous.h` has in-process and directory-backed ones).
//
// Every blocking call honours the group's timeout (`GroupOptions::timeout_ms`)
// and comes back as a Status, never hangs and never exits: `DeadlineExceeded`
// when the time ran out, `Unavailable` (naming the rank) when a peer is gone.
//
// Thread-safety: a `Communicator` has a single owner (the device thread); none
// of its methods may run concurrently. `Rendezvous` implementations are
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cascade::comm {

// The largest user tag `Send`/`Recv` accept (47 bits); the bits above are
// reserved for the collectives and the low 16 bits carry the source rank.
inline constexpr uint64_t kMaxUserTag = (uint64_t{1} << 47) - 1;
// The largest group `UcxCommunicator` supports (the source rank fits in 16 tag
// bits).
inline constexpr int kMaxGroupSize = 1 << 16;

// Who a communicator is inside which group. Shared by every backend.
struct GroupOptions {
  // Name of the group; prefixes every rendezvous key ("<group>/ucx/<rank>"), so
  // two groups (e.g. the TP group of stage 0 and the PP link 0→1) never mix.
  // REQUIRES non-empty and unique among the groups that share one `Rendezvous`
  // (a `FileRendezvous` directory keeps keys of earlier runs: use a fresh
  // directory or a fresh name).
  std::string group = "default";
  // This member's rank. REQUIRES 0 <= rank < size.
  int rank = 0;
  // Number of ranks. REQUIRES 1 <= size <= kMaxGroupSize.
  int size = 1;
  // Upper bound, in milliseconds, on every blocking call: group creation
  // (rendezvous and connection), each Send/Recv, each whole collective.
  // REQUIRES > 0. Default 30 s.
  int64_t timeout_ms = 30000;
};

// One member of a group of `size()` ranks. Buffers are host memory (GPU memory where
// `device_memory()`), borrowed
// for the duration of the call only. Calls block until done, failed, or timed
// out.
//
// State after a failure:
//  * `Recv` that timed out or whose peer died: the receive is cancelled, `buf`
//  holds
//    unspecified bytes, the communicator stays usable with the other peers.
//  * `Send` that timed out: the link to `peer` is closed (the buffer is
//  released), and
//    later calls that involve `peer` return `Unavailable`.
//  * A failed collective leaves the ranks out of step: the communicator is then
//  broken,
//    every later call returns `FailedPrecondition` with the first error;
//    recreate the group. Output buffers hold unspecified bytes.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // True when the buffers of every call are GPU memory (NCCL); false for host memory
  // (UCX), which a GPU worker then stages through.
  virtual bool device_memory() const { return false; }

  // Sends `bytes` bytes from `buf` to rank `peer` under `tag`. Returns once
  // `buf` may be reused (the bytes may still be on the way). Messages with the
  // same (peer, tag) arrive in order. `InvalidArgument`: peer out of range or
  // == rank(), tag > kMaxUserTag.
  virtual absl::Status Send(const void* buf, size_t bytes, int peer, uint64_t tag) = 0;
  // Receives exactly `bytes` bytes sent by rank `peer` under `tag` into `buf`;
  // matches only that peer's messages. A message of another size is
  // `InvalidArgument` (and is consumed). `DeadlineExceeded` after the timeout,
  // `Unavailable` when `peer` died.
  virtual absl::Status Recv(void* buf, size_t bytes, int peer, uint64_t tag) = 0;

  // In-place element-wise sum over all ranks: data: [n] on every rank, same n
  // everywhere. Every rank ends with the same bytes (ring reduce-scatter +
  // all-gather, so the summation order per element is fixed by the ring, not by
  // the rank).
  virtual absl::Status AllReduceSum(float* data, size_t n) = 0;
  // in: [bytes_per_rank]; out: [size() * bytes_per_rank], rank r's block at
  // offset r * bytes_per_rank. `in` may alias out's own block. Same
  // bytes_per_rank everywhere.
  virtual absl::Status AllGather(const void* in, size_t bytes_per_rank, void* out) = 0;
  // Copies root's `buf` ([bytes]) into every rank's `buf`. Same bytes
  // everywhere.
  virtual absl::Status Broadcast(void* buf, size_t bytes, int root) = 0;
  // Returns once every rank has entered the barrier.
  virtual absl::Status Barrier() = 0;
  // Personalised all-to-all (expert parallelism's dispatch and combine): this rank sends
  // send_bytes[q] bytes to every rank q and receives recv_bytes[q] from it. `send` and
  // `recv` hold one block per rank in rank order, each block right after the one before;
  // the own block is copied. Both spans have size() entries, and the sizes must agree pair
  // by pair (send_bytes[q] here == recv_bytes[rank()] on q: callers exchange counts first);
  // a block of another size fails the call. `send` and `recv` must not overlap.
  virtual absl::Status AllToAll(const void* send, std::span<const size_t> send_bytes, void* recv,
                                std::span<const size_t> recv_bytes) = 0;
};

// A key/value store for bootstrapping a group: each rank publishes its
// connection details and waits for the others'. Keys are written once per group
// (a second Put of a key replaces the value). Thread-safe.
class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  // Publishes `value` (arbitrary bytes) under `key`.
  virtual absl::Status Put(std::string_view key, std::string_view value) = 0;
  // The value under `key`, waiting up to `timeout_ms` for it to appear;
  // `DeadlineExceeded` when it does not.
  virtual absl::StatusOr<std::string> Wait(std::string_view key, int64_t timeout_ms) = 0;
};

}  // namespace cascade::comm
