// UcxCommunicator: UCP tag matching over one worker per rank. See
// ucx_communicator.h for the contract and the tag layout.
//
// Waiting: every call posts non-blocking UCP operations and then runs
// `WaitAll`, which progresses the worker until they complete, a peer involved
// fails, or the deadline passes; it busy-polls for `UcxOptions::spin_us`, then
// sleeps on the worker's event fd (UCP_FEATURE_WAKEUP) in slices of at most
// `kSleepSliceMs`. On failure it cancels receives and force-closes the
// endpoints of unfinished sends, so UCX never touches a caller's buffer after
// the call returned.
//
// Collectives: ring reduce-scatter + ring all-gather for AllReduceSum
// (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
// workstations", JPDC 2009), ring AllGather, direct Broadcast from the root,
// dissemination Barrier (Hensgen, Finkel & Manber 1988).
#include "comm/ucx_communicator.h"

#include <poll.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/str_cat.h"

namespace cascade::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kCollectiveBit = uint64_t{1} << 63;
constexpr uint64_t kFullMask = ~uint64_t{0};
// Longest single sleep on the event fd, so peer failures and deadlines are seen
// promptly.
constexpr int kSleepSliceMs = 20;
// Bound on shutdown steps (flush, endpoint close) and on draining cancelled
// operations.
constexpr int64_t kShutdownMs = 2000;

uint64_t UserTag(uint64_t tag, int src) { return (tag << 16) | static_cast<uint64_t>(src); }
uint64_t CollectiveTag(uint32_t seq, uint32_t step, int src) {
  return kCollectiveBit | (static_cast<uint64_t>(seq & 0x7FFFFFFFu) << 32) |
         (static_cast<uint64_t>(step & 0xFFFFu) << 16) | static_cast<uint64_t>(src);
}

std::string UcsString(ucs_status_t s) { return ucs_status_string(s); }

// One non-blocking operation in flight.
struct Op {
  void* request = nullptr;  // UCX request; null when it completed at once or was freed
  bool done = true;         // set by Poll()
  bool is_send = false;
  ucs_status_t status = UCS_OK;
  size_t expected_bytes = 0;
  size_t received_bytes = 0;
  int peer = -1;
};

// Updates `op` from its UCX request (completion is polled, not signalled:
// UCX 1.13 does not report the received length of a receive that completed at
// once).
void Poll(Op& op) {
  if (op.done) return;
  if (op.is_send) {
    const ucs_status_t status = ucp_request_check_status(op.request);
    if (status == UCS_INPROGRESS) return;
    op.status = status;
  } else {
    ucp_tag_recv_info_t info{};
    const ucs_status_t status = ucp_tag_recv_request_test(op.request, &info);
    if (status == UCS_INPROGRESS) return;
    op.status = status;
    if (status == UCS_OK) op.received_bytes = info.length;
  }
  op.done = true;
}

// Waits (progressing `worker`) until `request` is no longer in progress or `ms`
// passed, then frees it (UCX releases an unfinished request once it completes).
void WaitAndFree(ucp_worker_h worker, ucs_status_ptr_t request, int64_t ms) {
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  const auto limit = Clock::now() + std::chrono::milliseconds(ms);
  while (ucp_request_check_status(request) == UCS_INPROGRESS && Clock::now() < limit) {
    if (ucp_worker_progress(worker) == 0) std::this_thread::yield();
  }
  ucp_request_free(request);
}

class UcxGroupMember final : public Communicator {
 public:
  UcxGroupMember(const GroupOptions& group, const UcxOptions& ucx)
      : group_(group),
        ucx_(ucx),
        eps_(group.size, nullptr),
        slots_(group.size),
        peer_error_(group.size),
        ops_(2 * std::max(1, group.size)) {
    for (int i = 0; i < group.size; ++i) slots_[i] = {this, i};
  }
  ~UcxGroupMember() override;
  UcxGroupMember(const UcxGroupMember&) = delete;
  UcxGroupMember& operator=(const UcxGroupMember&) = delete;

  // Context, worker, rendezvous, endpoints, and one message each way on every
  // link.
  absl::Status Connect(Rendezvous* rendezvous);

  int rank() const override { return group_.rank; }
  int size() const override { return group_.size; }
  absl::Status Send(const void* buf, size_t bytes, int peer, uint64_t tag) override;
  absl::Status Recv(void* buf, size_t bytes, int peer, uint64_t tag) override;
  absl::Status AllReduceSum(float* data, size_t n) override;
  absl::Status AllGather(const void* in, size_t bytes_per_rank, void* out) override;
  absl::Status Broadcast(void* buf, size_t bytes, int root) override;
  absl::Status Barrier() override;
  absl::Status AllToAll(const void* send, std::span<const size_t> send_bytes, void* recv,
                        std::span<const size_t> recv_bytes) override;

 private:
  struct PeerSlot {
    UcxGroupMember* self = nullptr;
    int peer = -1;
  };
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);

  Clock::time_point Deadline() const { return Clock::now() + std::chrono::milliseconds(group_.timeout_ms); }
  absl::Status CheckUsable() const;
  absl::Status CheckPeerArg(int peer, const char* what) const;
  absl::Status PeerUnavailable(int peer, const char* what) const;
  // Remembers `status` as the reason the communicator is broken and returns it.
  absl::Status Break(absl::Status status);

  void PostSend(Op* op, const void* buf, size_t bytes, int peer, uint64_t tag);
  void PostRecv(Op* op, void* buf, size_t bytes, int peer, uint64_t tag);
  // Completes ops[0, n) or fails (cancelling what is left). `what` names the
  // call.
  absl::Status WaitAll(Op* ops, int n, Clock::time_point deadline, const char* what);
  void Abort(Op* ops, int n);
  void Sleep(Clock::time_point deadline);
  void ForceClose(int peer);
  // One send and one receive at once (a ring step); both must finish.
  absl::Status Exchange(const void* send_buf, size_t send_bytes, int to, void* recv_buf, size_t recv_bytes, int from,
                        uint32_t seq, uint32_t step, Clock::time_point deadline, const char* what);
  absl::Status ConnectAll(Clock::time_point deadline);

  const GroupOptions group_;
  const UcxOptions ucx_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_address_t* address_ = nullptr;
  size_t address_bytes_ = 0;
  int event_fd_ = -1;            // -1: no wake-up support, Sleep() yields instead
  std::vector<ucp_ep_h> eps_;    // [size]; null for self and for closed links
  std::vector<PeerSlot> slots_;  // [size]; error-callback arguments, never move
  // [size]; UCS_OK while the link is healthy, else why it failed (set by the
  // endpoint error callback, or UCS_ERR_CANCELED when we closed it after a send
  // timed out).
  std::vector<std::atomic<int>> peer_error_;
  absl::Status broken_;         // OK until a collective failed
  uint32_t seq_ = 0;            // collectives started so far; the same on every rank
  std::vector<float> scratch_;  // AllReduceSum receive chunk, grows only
  std::vector<Op> ops_;         // [2 * size]; one collective's operations
};

void UcxGroupMember::OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* slot = static_cast<PeerSlot*>(arg);
  int expected = UCS_OK;
  slot->self->peer_error_[slot->peer].compare_exchange_strong(expected, status);
}

absl::Status UcxGroupMember::CheckUsable() const {
  if (broken_.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      StrCat("group '", group_.group, "' rank ", group_.rank,
             ": communicator unusable after an earlier error: ", ToStd(broken_.message())));
}

absl::Status UcxGroupMember::CheckPeerArg(int peer, const char* what) const {
  if (peer < 0 || peer >= group_.size || peer == group_.rank) {
    return absl::InvalidArgumentError(StrCat(what, ": peer ", peer, " is not another rank of a group of ", group_.size,
                                             " (this is rank ", group_.rank, ")"));
  }
  if (peer_error_[peer].load(std::memory_order_relaxed) != UCS_OK) return PeerUnavailable(peer, what);
  return absl::OkStatus();
}

absl::Status UcxGroupMember::PeerUnavailable(int peer, const char* what) const {
  const auto error = static_cast<ucs_status_t>(peer_error_[peer].load(std::memory_order_relaxed));
  const std::string why = error == UCS_ERR_CANCELED ? std::string("link closed after an earlier send timed out")
                                                    : StrCat("connection failed: ", UcsString(error));
  return absl::UnavailableError(StrCat(what, ": group '", group_.group, "' rank ", peer, " is unreachable from rank ",
                                       group_.rank, " (", why, ")"));
}

absl::Status UcxGroupMember::Break(absl::Status status) {
  if (broken_.ok()) broken_ = status;
  return status;
}

void UcxGroupMember::PostSend(Op* op, const void* buf, size_t bytes, int peer, uint64_t tag) {
  *op = Op{};
  op->is_send = true;
  op->peer = peer;
  op->expected_bytes = bytes;
  if (eps_[peer] == nullptr) {
    op->status = UCS_ERR_NOT_CONNECTED;
    return;
  }
  ucp_request_param_t param{};
  const ucs_status_ptr_t request = ucp_tag_send_nbx(eps_[peer], buf, bytes, tag, &param);
  if (UCS_PTR_IS_ERR(request)) {
    op->status = UCS_PTR_STATUS(request);
  } else if (request != nullptr) {
    op->request = request;
    op->done = false;
  }
}

void UcxGroupMember::PostRecv(Op* op, void* buf, size_t bytes, int peer, uint64_t tag) {
  *op = Op{};
  op->peer = peer;
  op->expected_bytes = bytes;
  ucp_request_param_t param{};
  // UCX 1.13 leaves `recv_info` unfilled on immediate completion, so the
  // received length is only known from the request: always take the request
  // path.
  param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  const ucs_status_ptr_t request = ucp_tag_recv_nbx(worker_, buf, bytes, tag, kFullMask, &param);
  if (UCS_PTR_IS_ERR(request)) {
    op->status = UCS_PTR_STATUS(request);
  } else if (request != nullptr) {
    op->request = request;
    op->done = false;
  }
}

void UcxGroupMember::Sleep(Clock::time_point deadline) {
  if (event_fd_ < 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    return;
  }
  // Arm returns BUSY when events are already pending: progress again instead.
  if (ucp_worker_arm(worker_) != UCS_OK) return;
  const auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count() + 1;
  pollfd fd{event_fd_, POLLIN, 0};
  ::poll(&fd, 1, static_cast<int>(std::clamp<int64_t>(left_ms, 0, kSleepSliceMs)));
}

absl::Status UcxGroupMember::WaitAll(Op* ops, int n, Clock::time_point deadline, const char* what) {
  const auto spin_until = Clock::now() + std::chrono::microseconds(ucx_.spin_us);
  bool drained = false;
  while (true) {
    int pending = -1;
    int failed_peer = -1;
    for (int i = 0; i < n; ++i) {
      Poll(ops[i]);
      if (ops[i].done) continue;
      if (pending < 0) pending = i;
      if (peer_error_[ops[i].peer].load(std::memory_order_relaxed) != UCS_OK) {
        failed_peer = ops[i].peer;
        break;
      }
    }
    if (pending < 0) break;
    if (failed_peer >= 0) {
      // Data the peer sent before it failed is ahead of the failure in its
      // stream: drain it before giving up on the operations it may complete.
      if (!drained) {
        drained = true;
        while (ucp_worker_progress(worker_) != 0) {
        }
        continue;
      }
      Abort(ops, n);
      return PeerUnavailable(failed_peer, what);
    }
    if (ucp_worker_progress(worker_) != 0) continue;
    const auto now = Clock::now();
    if (now >= deadline) {
      const int peer = ops[pending].peer;
      const bool is_send = ops[pending].is_send;
      Abort(ops, n);
      return absl::DeadlineExceededError(StrCat(what, ": group '", group_.group, "' rank ", group_.rank,
                                                " timed out after ", group_.timeout_ms, " ms waiting to ",
                                                is_send ? "send to" : "receive from", " rank ", peer));
    }
    if (now >= spin_until) Sleep(deadline);
  }
  absl::Status result;
  for (int i = 0; i < n; ++i) {
    Op& op = ops[i];
    if (op.request != nullptr) {
      ucp_request_free(op.request);
      op.request = nullptr;
    }
    if (!result.ok()) continue;
    if (op.status == UCS_ERR_MESSAGE_TRUNCATED) {
      result = absl::InvalidArgumentError(
          StrCat(what, ": rank ", op.peer, " sent a message larger than the ", op.expected_bytes, " bytes expected"));
    } else if (op.status != UCS_OK) {
      if (peer_error_[op.peer].load(std::memory_order_relaxed) != UCS_OK) {
        result = PeerUnavailable(op.peer, what);
      } else {
        result = absl::UnavailableError(StrCat(what, ": ", op.is_send ? "send to" : "receive from", " group '",
                                               group_.group, "' rank ", op.peer, " failed: ", UcsString(op.status)));
      }
    } else if (!op.is_send && op.received_bytes != op.expected_bytes) {
      result = absl::InvalidArgumentError(
          StrCat(what, ": rank ", op.peer, " sent ", op.received_bytes, " bytes, expected ", op.expected_bytes));
    }
  }
  return result;
}

void UcxGroupMember::Abort(Op* ops, int n) {
  for (int i = 0; i < n; ++i) {
    if (ops[i].done) continue;
    if (ops[i].is_send) {
      // UCX 1.13 cannot cancel a send; closing the endpoint completes it (with
      // an error).
      ForceClose(ops[i].peer);
    } else {
      ucp_request_cancel(worker_, ops[i].request);
    }
  }
  const auto limit = Clock::now() + std::chrono::milliseconds(kShutdownMs);
  auto all_done = [&] {
    for (int i = 0; i < n; ++i) {
      Poll(ops[i]);
      if (!ops[i].done) return false;
    }
    return true;
  };
  while (!all_done() && Clock::now() < limit) ucp_worker_progress(worker_);
  for (int i = 0; i < n; ++i) {
    if (ops[i].request == nullptr) continue;
    if (!ops[i].done) {
      // Should not happen after a cancel or a forced close; UCX frees it when
      // it ends.
      Break(absl::InternalError("UCX did not release a cancelled operation")).IgnoreError();
      ucp_request_free(ops[i].request);
    } else {
      ucp_request_free(ops[i].request);
    }
    ops[i].request = nullptr;
  }
}

void UcxGroupMember::ForceClose(int peer) {
  int expected = UCS_OK;
  peer_error_[peer].compare_exchange_strong(expected, UCS_ERR_CANCELED);
  if (eps_[peer] == nullptr) return;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  WaitAndFree(worker_, ucp_ep_close_nbx(eps_[peer], &param), kShutdownMs);
  eps_[peer] = nullptr;
}

absl::Status UcxGroupMember::Exchange(const void* send_buf, size_t send_bytes, int to, void* recv_buf,
                                      size_t recv_bytes, int from, uint32_t seq, uint32_t step,
                                      Clock::time_point deadline, const char* what) {
  PostRecv(&ops_[0], recv_buf, recv_bytes, from, CollectiveTag(seq, step, from));
  PostSend(&ops_[1], send_buf, send_bytes, to, CollectiveTag(seq, step, group_.rank));
  return WaitAll(ops_.data(), 2, deadline, what);
}

absl::Status UcxGroupMember::Send(const void* buf, size_t bytes, int peer, uint64_t tag) {
  CASCADE_RETURN_IF_ERROR(CheckUsable());
  CASCADE_RETURN_IF_ERROR(CheckPeerArg(peer, "Send"));
  if (tag > kMaxUserTag) return absl::InvalidArgumentError(StrCat("Send: tag ", tag, " exceeds kMaxUserTag"));
  const auto deadline = Deadline();
  PostSend(&ops_[0], buf, bytes, peer, UserTag(tag, group_.rank));
  return WaitAll(ops_.data(), 1, deadline, "Send");
}

absl::Status UcxGroupMember::Recv(void* buf, size_t bytes, int peer, uint64_t tag) {
  CASCADE_RETURN_IF_ERROR(CheckUsable());
  CASCADE_RETURN_IF_ERROR(CheckPeerArg(peer, "Recv"));
  if (tag > kMaxUserTag) return absl::InvalidArgumentError(StrCat("Recv: tag ", tag, " exceeds kMaxUserTag"));
  const auto deadline = Deadline();
  PostRecv(&ops_[0], buf, bytes, peer, UserTag(tag, peer));
  return WaitAll(ops_.data(), 1, deadline, "Recv");
}

absl::Status UcxGroupMember::AllReduceSum(float* data, size_t n) {
  CASCADE_RETURN_IF_ERROR(CheckUsable());
  const uint32_t seq = seq_++;
  const int p = group_.size;
  if (p == 1 || n == 0) return absl::OkStatus();
  const auto deadline = Deadline();
  const int r = group_.rank;
  const int right = (r + 1) % p;
  const int left = (r + p - 1) % p;
  // Chunk c is [Begin(c), Begin(c + 1)): the first n % p chunks get one extra
  // element.
  const size_t base = n / static_cast<size_t>(p);
  const size_t extra = n % static_cast<size_t>(p);
  auto begin = [&](int c) { return base * static_cast<size_t>(c) + std::min<size_t>(static_cast<size_t>(c), extra); };
  auto length = [&](int c) { return begin(c + 1) - begin(c); };
  if (scratch_.size() < base + 1) scratch_.resize(base + 1);
  // Reduce-scatter: after step s, chunk (r - s - 1) holds the sum over s + 2
  // ranks; after p - 1 steps rank r owns the full sum of chunk (r + 1) % p.
  for (int s = 0; s < p - 1; ++s) {
    const int send_c = (r - s + p) % p;
    const int recv_c = (r - s - 1 + p) % p;
    absl::Status status = Exchange(data + begin(send_c), length(send_c) * sizeof(float), right, scratch_.data(),
                                   length(recv_c) * sizeof(float), left, seq, s, deadline, "AllReduceSum");
    if (!status.ok()) return Break(std::move(status));
    float* out = data + begin(recv_c);
    const size_t len = length(recv_c);
    for (size_t i = 0; i < len; ++i) out[i] += scratch_[i];
  }
  // All-gather of the reduced chunks, received in place.
  for (int s = 0; s < p - 1; ++s) {
    const int send_c = (r + 1 - s + p) % p;
    const int recv_c = (r - s + p) % p;
    absl::Status status = Exchange(data + begin(send_c), length(send_c) * sizeof(float), right, data + begin(recv_c),
                                   length(recv_c) * sizeof(float), left, seq, p - 1 + s, deadline, "AllReduceSum");
    if (!status.ok()) return Break(std::move(status));
  }
  return absl::OkStatus();
}

absl::Status UcxGroupMember::AllGather(const void* in, size_t bytes_per_rank, void* out) {
  CASCADE_RETURN_IF_ERROR(CheckUsable());
  const uint32_t seq = seq_++;
  const int p = group_.size;
  const int r = group_.rank;
  auto* blocks = static_cast<char*>(out);
  char* own = blocks + static_cast<size_t>(r) * bytes_per_rank;
  if (own != in && bytes_per_rank > 0) std::memmove(own, in, bytes_per_rank);
  if (p == 1 || bytes_per_rank == 0) return absl::OkStatus();
  const auto deadline = Deadline();
  const int right = (r + 1) % p;
  const int left = (r + p - 1) % p;
  for (int s = 0; s < p - 1; ++s) {
    const int send_b = (r - s + p) % p;
    const int recv_b = (r - s - 1 + p) % p;
    absl::Status status = Exchange(blocks + static_cast<size_t>(send_b) * bytes_per_rank, bytes_per_rank, right,
                                   blocks + static_cast<size_t>(recv_b) * bytes_per_rank, bytes_per_rank, left, seq, s,
                                   deadline, "AllGather");
    if (!status.ok()) return Break(std::move(status));
  }
  return absl::OkStatus();
}

absl::Status UcxGroupMember::Broadcast(void* buf, size_t bytes, int root) {
  CASCADE_RETURN_IF_ERROR(CheckUsable());
  if (root < 0 || root >= group_.size) {
    return absl::InvalidArgumentError(StrCat("Broadcast: root ", root, " is outside a group of ", group_.size));
  }
  const uint32_t seq = seq_++;
  const int p = group_.size;
  if (p == 1) return absl::OkStatus();
  const auto deadline = Deadline();
  int n = 0;
  if (group_.rank == root) {
    for (int peer = 0; peer < p; ++peer) {
      if (peer != root) PostSend(&ops_[n++], buf, bytes, peer, CollectiveTag(seq, 0, root));
    }
  } else {
    PostRecv(&ops_[n++], buf, bytes, root, CollectiveTag(seq, 0, root));
  }
  absl::Status status = WaitAll(ops_.data(), n, deadline, "Broadcast");
  if (!status.ok()) return Break(std::move(status));
  return absl::OkStatus();
}

absl::Status UcxGroupMember::Barrier() {
  CASCADE_RETURN_IF_ERROR(CheckUsable());
  const uint32_t seq = seq_++;
  const int p = group_.size;
  const int r = group_.rank;
  const auto deadline = Deadline();
  char token = 0;
  char sink = 0;
  uint32_t round = 0;
  for (int k = 1; k < p; k <<= 1, ++round) {
    absl::Status status =
        Exchange(&token, 0, (r + k) % p, &sink, 0, (r - k % p + p) % p, seq, round, deadline, "Barrier");
    if (!status.ok()) return Break(std::move(status));
  }
  return absl::OkStatus();
}

absl::Status UcxGroupMember::AllToAll(const void* send, std::span<const size_t> send_bytes, void* recv,
                                      std::span<const size_t> recv_bytes) {
  CASCADE_RETURN_IF_ERROR(CheckUsable());
  const int p = group_.size, r = group_.rank;
  if (static_cast<int>(send_bytes.size()) != p || static_cast<int>(recv_bytes.size()) != p) {
    return absl::InvalidArgumentError(
        StrCat("AllToAll: ", send_bytes.size(), " send and ", recv_bytes.size(), " receive sizes for ", p, " ranks"));
  }
  if (send_bytes[r] != recv_bytes[r]) {
    return absl::InvalidArgumentError(
        StrCat("AllToAll: the own block is ", send_bytes[r], " bytes out and ", recv_bytes[r], " in"));
  }
  const uint32_t seq = seq_++;
  const auto* out = static_cast<const char*>(send);
  auto* in = static_cast<char*>(recv);
  size_t send_at = 0, recv_at = 0;
  int n = 0;
  // Every receive and send posted at once, then waited for together: no pair waits on
  // another, whatever the order the ranks reach here.
  for (int q = 0; q < p; ++q) {
    if (q == r) {
      if (send_bytes[q] > 0) std::memcpy(in + recv_at, out + send_at, send_bytes[q]);
    } else {
      PostRecv(&ops_[n++], in + recv_at, recv_bytes[q], q, CollectiveTag(seq, 0, q));
      PostSend(&ops_[n++], out + send_at, send_bytes[q], q, CollectiveTag(seq, 0, r));
    }
    send_at += send_bytes[q];
    recv_at += recv_bytes[q];
  }
  if (n == 0) return absl::OkStatus();
  absl::Status status = WaitAll(ops_.data(), n, Deadline(), "AllToAll");
  if (!status.ok()) return Break(std::move(status));
  return absl::OkStatus();
}

absl::Status UcxGroupMember::ConnectAll(Clock::time_point deadline) {
  // One zero-byte message each way on every link, so each endpoint is wired up
  // (UCX connects lazily) and a broken link fails here rather than in the first
  // step.
  const int p = group_.size;
  const int r = group_.rank;
  const uint32_t seq = seq_++;
  char token = 0;
  std::vector<char> sinks(p);
  std::vector<Op> ops(2 * static_cast<size_t>(p));
  int n = 0;
  for (int peer = 0; peer < p; ++peer) {
    if (peer == r) continue;
    PostRecv(&ops[n++], &sinks[peer], 0, peer, CollectiveTag(seq, 0, peer));
    PostSend(&ops[n++], &token, 0, peer, CollectiveTag(seq, 0, r));
  }
  return WaitAll(ops.data(), n, deadline, "connecting");
}

absl::Status UcxGroupMember::Connect(Rendezvous* rendezvous) {
  const auto deadline = Deadline();
  auto ms_left = [&] {
    return std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
  };
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) return absl::InternalError(StrCat("ucp_config_read: ", UcsString(status)));
  if (!ucx_.transports.empty()) {
    status = ucp_config_modify(config, "TLS", ucx_.transports.c_str());
    if (status != UCS_OK) {
      ucp_config_release(config);
      return absl::InvalidArgumentError(StrCat("UCX transports '", ucx_.transports, "': ", UcsString(status)));
    }
  }
  if (ucx_.detect_peer_failure && !ucx_.keepalive_interval.empty()) {
    status = ucp_config_modify(config, "KEEPALIVE_INTERVAL", ucx_.keepalive_interval.c_str());
    if (status != UCS_OK) {
      ucp_config_release(config);
      return absl::InternalError(StrCat("ucp_config_modify KEEPALIVE_INTERVAL: ", UcsString(status)));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = static_cast<size_t>(group_.size);
  status = ucp_init(&params, config, &context_);
  if (status != UCS_OK) {
    // Some transport sets cannot wake a sleeping worker: poll instead.
    params.features = UCP_FEATURE_TAG;
    status = ucp_init(&params, config, &context_);
  }
  ucp_config_release(config);
  if (status != UCS_OK) {
    context_ = nullptr;
    return absl::UnavailableError(StrCat("ucp_init: ", UcsString(status)));
  }
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  status = ucp_worker_create(context_, &worker_params, &worker_);
  if (status != UCS_OK) {
    worker_ = nullptr;
    return absl::UnavailableError(StrCat("ucp_worker_create: ", UcsString(status)));
  }
  if ((params.features & UCP_FEATURE_WAKEUP) == 0 || ucp_worker_get_efd(worker_, &event_fd_) != UCS_OK) {
    event_fd_ = -1;
  }
  status = ucp_worker_get_address(worker_, &address_, &address_bytes_);
  if (status != UCS_OK) {
    address_ = nullptr;
    return absl::InternalError(StrCat("ucp_worker_get_address: ", UcsString(status)));
  }
  auto key = [&](int rank) { return StrCat(group_.group, "/ucx/", rank); };
  CASCADE_RETURN_IF_ERROR(Annotate(
      rendezvous->Put(key(group_.rank), std::string_view(reinterpret_cast<const char*>(address_), address_bytes_)),
      "publishing the UCX worker address"));
  for (int peer = 0; peer < group_.size; ++peer) {
    if (peer == group_.rank) continue;
    absl::StatusOr<std::string> address = rendezvous->Wait(key(peer), ms_left());
    if (!address.ok()) return Annotate(address.status(), StrCat("waiting for rank ", peer, "'s UCX address"));
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.address = reinterpret_cast<const ucp_address_t*>(address->data());
    ep_params.err_mode = ucx_.detect_peer_failure ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    if (ucx_.detect_peer_failure) {
      ep_params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep_params.err_handler.cb = &UcxGroupMember::OnEndpointError;
      ep_params.err_handler.arg = &slots_[peer];
    }
    status = ucp_ep_create(worker_, &ep_params, &eps_[peer]);
    if (status != UCS_OK) {
      eps_[peer] = nullptr;
      return absl::UnavailableError(StrCat("connecting to rank ", peer, ": ucp_ep_create: ", UcsString(status)));
    }
  }
  return ConnectAll(deadline);
}

UcxGroupMember::~UcxGroupMember() {
  if (worker_ != nullptr) {
    // Deliver what is still in flight, then drop every link.
    ucp_request_param_t flush{};
    WaitAndFree(worker_, ucp_worker_flush_nbx(worker_, &flush), std::min<int64_t>(group_.timeout_ms, kShutdownMs));
    for (int peer = 0; peer < group_.size; ++peer) {
      if (eps_[peer] == nullptr) continue;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      WaitAndFree(worker_, ucp_ep_close_nbx(eps_[peer], &param), kShutdownMs);
      eps_[peer] = nullptr;
    }
    if (address_ != nullptr) ucp_worker_release_address(worker_, address_);
    ucp_worker_destroy(worker_);
  }
  if (context_ != nullptr) ucp_cleanup(context_);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> UcxCommunicator::Create(const GroupOptions& group, Rendezvous* rendezvous,
                                                                      const UcxOptions& ucx) {
  if (rendezvous == nullptr) return absl::InvalidArgumentError("UcxCommunicator: null rendezvous");
  if (group.group.empty()) return absl::InvalidArgumentError("UcxCommunicator: empty group name");
  if (group.size < 1 || group.size > kMaxGroupSize) {
    return absl::InvalidArgumentError(
        StrCat("UcxCommunicator: group size ", group.size, " outside [1, ", kMaxGroupSize, "]"));
  }
  if (group.rank < 0 || group.rank >= group.size) {
    return absl::InvalidArgumentError(StrCat("UcxCommunicator: rank ", group.rank, " outside [0, ", group.size, ")"));
  }
  if (group.timeout_ms <= 0) return absl::InvalidArgumentError("UcxCommunicator: timeout_ms must be > 0");
  if (ucx.spin_us < 0) return absl::InvalidArgumentError("UcxCommunicator: spin_us must be >= 0");
  auto member = std::make_unique<UcxGroupMember>(group, ucx);
  CASCADE_RETURN_IF_ERROR(
      Annotate(member->Connect(rendezvous), StrCat("UCX group '", group.group, "' rank ", group.rank)));
  return std::unique_ptr<Communicator>(std::move(member));
}

}  // namespace cascade::comm
