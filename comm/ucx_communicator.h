// `Communicator` over UCX (tag matching API) for host memory: shared memory
// between processes on one machine, TCP between machines, whichever UCX picks
// (or `UcxOptions::transports` restricts it to). The implementation is private
// to ucx_communicator.cc; this header only exposes the factory.
//
// Wire format: a UCX tag is (user tag << 16 | source rank) for Send/Recv, and
// has bit 63 set, a per-collective sequence number and a step number for
// collectives, so user messages, collectives and different peers never match
// each other.
//
// Thread-safety: single owner. The returned communicator, its UCX context and
// worker belong to one thread at a time (the device thread); calls never run
// concurrently.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace cascade::comm {

// UCX-specific knobs, read once by the caller (config, flags) and passed here;
// nothing in comm/ reads environment variables itself (UCX itself still honours
// `UCX_*`).
struct UcxOptions {
  // UCX transport list (the `UCX_TLS` syntax, e.g. "tcp" or "shm,tcp"); empty
  // keeps UCX's choice ($UCX_TLS when set, else every transport available).
  // Default empty.
  std::string transports;
  // Detect dead peers (UCP_ERR_HANDLING_MODE_PEER, keepalive every
  // `keepalive_interval`): a call that waits on a peer
  // whose connection failed returns `Unavailable` naming it. Default true.
  // Turning it off leaves a dead peer to the timeout. NOTE: Debian's UCX
  // disables error handling on its shared-memory transports, so in this mode
  // ranks on one machine talk over TCP/CMA (~3x the small-message latency)
  // unless the process environment has UCX_POSIX_ERROR_HANDLING=y and
  // UCX_SYSV_ERROR_HANDLING=y (UCX reads those only from the environment; the
  // launcher should set them for workers).
  bool detect_peer_failure = true;
  // With detect_peer_failure: how often idle links are probed (UCX's
  // KEEPALIVE_INTERVAL syntax), so a dead peer is seen within seconds even with
  // no operation in flight to it. Empty keeps UCX's own value
  // ($UCX_KEEPALIVE_INTERVAL, else 20 s). Default "1s".
  std::string keepalive_interval = "1s";
  // How long, in microseconds, a waiting call busy-polls before it sleeps on
  // the worker's event fd (0 = sleep at once). Spinning may save the wake-up (a
  // few µs) on a machine with idle cores; on an oversubscribed one it starves
  // the very peer it waits for (measured on a loaded 2-core box: 4 KiB one-way
  // 8 µs at 0, ~20 µs at 20, ~300 µs at 200). Default 0.
  int64_t spin_us = 0;
};

class UcxCommunicator {
 public:
  // Creates this rank's member of `group`: a UCP context (tag matching) and
  // worker, publishes the worker address under "<group>/ucx/<rank>" in
  // `rendezvous`, waits for every other rank's, connects, and returns after a
  // barrier that proves every link works. The whole call is bounded by
  // `group.timeout_ms`: `DeadlineExceeded` when a rank never shows up,
  // `InvalidArgument` for bad options, `Unavailable` / `Internal` when UCX
  // fails. `rendezvous` is borrowed for the duration of the call. Every rank of
  // the group must call Create with the same group name and size.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(const GroupOptions& group, Rendezvous* rendezvous,
                                                              const UcxOptions& ucx = {});
};

}  // namespace cascade::comm
