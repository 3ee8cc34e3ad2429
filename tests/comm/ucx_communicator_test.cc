// Tests of cascade::comm::UcxCommunicator and the rendezvous stores:
// point-to-point (sizes, tags, per-peer matching, size mismatch), collectives
// against naive references for 1–4 ranks, timeouts, separate processes over
// TCP, and a peer killed with SIGKILL. Groups of threads share an
// InProcessRendezvous, each thread with its own communicator; multi-process
// cases re-run this binary as a child (see `RunChildIfRequested`). To add a
// case: write a TEST that calls `RunGroup(n, body)`; `body(comm)` runs on every
// rank. Timing numbers are printed as `[ info ]`, never asserted (shared CI
// machines).
#include "comm/ucx_communicator.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "comm/rendezvous.h"
#include "gtest/gtest.h"
#include "tests/test_support.h"

extern char** environ;

namespace cascade::comm {
namespace {

using Clock = std::chrono::steady_clock;
using ::cascade::testing::StatusMessage;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

uint8_t PatternByte(size_t i, int src, int salt) { return static_cast<uint8_t>(i * 131 + src * 17 + salt * 7 + 1); }

std::vector<uint8_t> Pattern(size_t bytes, int src, int salt) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = PatternByte(i, src, salt);
  return v;
}

// Index of the first byte that differs from the pattern, or -1.
int64_t FirstMismatch(const std::vector<uint8_t>& v, int src, int salt) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != PatternByte(i, src, salt)) return static_cast<int64_t>(i);
  }
  return -1;
}

std::string UniqueGroup(const std::string& base) {
  static std::atomic<int> counter{0};
  return base + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

// Runs `body(comm, rank)` on `n` threads, each with its own communicator of one
// group.
void RunGroup(int n, const std::function<void(Communicator&)>& body, int64_t timeout_ms = 20000, UcxOptions ucx = {}) {
  InProcessRendezvous rendezvous;
  const std::string group = UniqueGroup("threads");
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      GroupOptions options;
      options.group = group;
      options.rank = r;
      options.size = n;
      options.timeout_ms = timeout_ms;
      absl::StatusOr<std::unique_ptr<Communicator>> comm = UcxCommunicator::Create(options, &rendezvous, ucx);
      ASSERT_TRUE(comm.ok()) << "rank " << r << ": " << comm.status();
      ASSERT_EQ((*comm)->rank(), r);
      ASSERT_EQ((*comm)->size(), n);
      body(**comm);
    });
  }
  for (auto& t : threads) t.join();
}

// ---- Rendezvous
// ------------------------------------------------------------------------

TEST(InProcessRendezvousTest, WaitSeesPutFromAnotherThreadAndTimesOut) {
  InProcessRendezvous rendezvous;
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(rendezvous.Put("g/ucx/1", std::string("a\0b", 3)).ok());
  });
  absl::StatusOr<std::string> value = rendezvous.Wait("g/ucx/1", 5000);
  writer.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, std::string("a\0b", 3));
  const auto start = Clock::now();
  EXPECT_STATUS_CODE(rendezvous.Wait("g/ucx/2", 50), kDeadlineExceeded);
  EXPECT_GE(MsSince(start), 45);
}

TEST(FileRendezvousTest, PutWaitEscapingAndTimeout) {
  cascade::testing::TempDir dir;
  absl::StatusOr<std::unique_ptr<FileRendezvous>> rendezvous = FileRendezvous::Create(dir.path() + "/sub/dir");
  ASSERT_TRUE(rendezvous.ok()) << rendezvous.status();
  std::string binary(300, '\0');
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>(i);
  ASSERT_TRUE((*rendezvous)->Put("group/ucx/0", binary).ok());
  ASSERT_TRUE((*rendezvous)->Put(".hidden key", "x").ok());
  absl::StatusOr<std::string> value = (*rendezvous)->Wait("group/ucx/0", 1000);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, binary);
  value = (*rendezvous)->Wait(".hidden key", 1000);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "x");
  ASSERT_TRUE((*rendezvous)->Put("group/ucx/0", "replaced").ok());
  EXPECT_EQ(*(*rendezvous)->Wait("group/ucx/0", 1000), "replaced");
  // A second store on the same directory (another process in real use) sees the
  // keys.
  absl::StatusOr<std::unique_ptr<FileRendezvous>> other = FileRendezvous::Create(dir.path() + "/sub/dir");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*(*other)->Wait("group/ucx/0", 1000), "replaced");
  const auto start = Clock::now();
  EXPECT_STATUS_CODE((*rendezvous)->Wait("group/ucx/1", 60), kDeadlineExceeded);
  EXPECT_GE(MsSince(start), 55);
  EXPECT_STATUS_CODE(FileRendezvous::Create(""), kInvalidArgument);
}

// ---- Creation
// --------------------------------------------------------------------------

TEST(UcxCommunicatorTest, CreateValidatesOptions) {
  InProcessRendezvous rendezvous;
  GroupOptions options;
  EXPECT_STATUS_CODE(UcxCommunicator::Create(options, nullptr), kInvalidArgument);
  options.size = 2;
  options.rank = 2;
  EXPECT_STATUS_CODE(UcxCommunicator::Create(options, &rendezvous), kInvalidArgument);
  options.rank = 0;
  options.group = "";
  EXPECT_STATUS_CODE(UcxCommunicator::Create(options, &rendezvous), kInvalidArgument);
  options.group = "g";
  options.timeout_ms = 0;
  EXPECT_STATUS_CODE(UcxCommunicator::Create(options, &rendezvous), kInvalidArgument);
}

TEST(UcxCommunicatorTest, SingleRankGroupIsTrivial) {
  RunGroup(1, [](Communicator& comm) {
    std::vector<float> data = {1.5f, -2.f, 3.f};
    ASSERT_TRUE(comm.AllReduceSum(data.data(), data.size()).ok());
    EXPECT_EQ(data, (std::vector<float>{1.5f, -2.f, 3.f}));
    std::vector<int> out(3);
    ASSERT_TRUE(comm.AllGather(data.data(), 3 * sizeof(float), out.data()).ok());
    EXPECT_EQ(std::memcmp(out.data(), data.data(), 12), 0);
    EXPECT_TRUE(comm.Broadcast(data.data(), 12, 0).ok());
    EXPECT_TRUE(comm.Barrier().ok());
    EXPECT_STATUS_CODE(comm.Send(data.data(), 4, 0, 1),
                       kInvalidArgument);  // no self-sends
  });
}

TEST(UcxCommunicatorTest, CreateTimesOutWhenARankNeverArrives) {
  InProcessRendezvous rendezvous;
  GroupOptions options;
  options.group = UniqueGroup("lonely");
  options.size = 2;
  options.timeout_ms = 300;
  const auto start = Clock::now();
  absl::StatusOr<std::unique_ptr<Communicator>> comm = UcxCommunicator::Create(options, &rendezvous);
  const double ms = MsSince(start);
  EXPECT_STATUS_CODE(comm, kDeadlineExceeded);
  EXPECT_LT(ms, 3000);
  EXPECT_GE(ms, 250);
}

TEST(UcxCommunicatorTest, CreateTimeIsPrinted) {
  for (int n : {2, 4}) {
    InProcessRendezvous rendezvous;
    const std::string group = UniqueGroup("create");
    std::vector<double> ms(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        GroupOptions options;
        options.group = group;
        options.rank = r;
        options.size = n;
        const auto start = Clock::now();
        auto comm = UcxCommunicator::Create(options, &rendezvous);
        ms[r] = MsSince(start);
        ASSERT_TRUE(comm.ok()) << comm.status();
      });
    }
    for (auto& t : threads) t.join();
    std::printf("[ info ] UcxCommunicator::Create, %d threads: %.1f ms (rank 0)\n", n, ms[0]);
  }
}

// ---- Point to point
// ---------------------------------------------------------------------

class UcxGroupTest : public ::testing::TestWithParam<int> {};

TEST_P(UcxGroupTest, SendRecvSizesAroundTheRing) {
  const int n = GetParam();
  RunGroup(n, [n](Communicator& comm) {
    const int r = comm.rank();
    const int right = (r + 1) % n;
    const int left = (r + n - 1) % n;
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, size_t{3} << 20}) {
      const int salt = static_cast<int>(bytes % 251);
      const std::vector<uint8_t> out = Pattern(bytes, r, salt);
      std::vector<uint8_t> in(bytes, 0);
      // Rank 0 sends first, everyone else receives first: no cycle of blocked
      // sends.
      if (r == 0) {
        ASSERT_TRUE(comm.Send(out.data(), bytes, right, 40).ok());
        ASSERT_TRUE(comm.Recv(in.data(), bytes, left, 40).ok());
      } else {
        absl::Status s = comm.Recv(in.data(), bytes, left, 40);
        ASSERT_TRUE(s.ok()) << s;
        s = comm.Send(out.data(), bytes, right, 40);
        ASSERT_TRUE(s.ok()) << s;
      }
      EXPECT_EQ(FirstMismatch(in, left, salt), -1) << "bytes=" << bytes << " rank=" << r;
    }
  });
}

TEST_P(UcxGroupTest, AllReduceSumMatchesNaiveSum) {
  const int n = GetParam();
  for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{100003}}) {
    std::vector<std::vector<float>> results(n);
    auto value = [](int r, size_t i) { return static_cast<float>((r + 1) * static_cast<int>(i % 13)) - 0.25f * r; };
    RunGroup(n, [&](Communicator& comm) {
      const int r = comm.rank();
      std::vector<float> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = value(r, i);
      absl::Status s = comm.AllReduceSum(data.data(), count);
      ASSERT_TRUE(s.ok()) << s;
      // A second call on the same buffer size reuses the scratch and the
      // sequence.
      std::vector<float> ones(count, 1.0f);
      s = comm.AllReduceSum(ones.data(), count);
      ASSERT_TRUE(s.ok()) << s;
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(ones[i], static_cast<float>(n)) << i;
      results[r] = std::move(data);
    });
    for (size_t i = 0; i < count; ++i) {
      double expected = 0;
      for (int r = 0; r < n; ++r) expected += value(r, i);
      ASSERT_NEAR(results[0][i], expected, 1e-4) << "count=" << count << " i=" << i;
    }
    for (int r = 1; r < n; ++r) {
      EXPECT_EQ(std::memcmp(results[r].data(), results[0].data(), count * sizeof(float)), 0)
          << "rank " << r << " differs from rank 0 (count=" << count << ")";
    }
  }
}

TEST_P(UcxGroupTest, AllGatherPutsEachBlockInPlace) {
  const int n = GetParam();
  RunGroup(n, [n](Communicator& comm) {
    const int r = comm.rank();
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{1000}, (size_t{1} << 20) + 3}) {
      const std::vector<uint8_t> in = Pattern(bytes, r, 3);
      std::vector<uint8_t> out(bytes * n, 0xEE);
      absl::Status s = comm.AllGather(in.data(), bytes, out.data());
      ASSERT_TRUE(s.ok()) << s;
      for (int src = 0; src < n; ++src) {
        std::vector<uint8_t> block(out.begin() + src * bytes, out.begin() + (src + 1) * bytes);
        EXPECT_EQ(FirstMismatch(block, src, 3), -1) << "bytes=" << bytes << " block " << src;
      }
      // In place: the input already sits in its block.
      std::vector<uint8_t> inplace(bytes * n, 0);
      std::memcpy(inplace.data() + r * bytes, in.data(), bytes);
      s = comm.AllGather(inplace.data() + r * bytes, bytes, inplace.data());
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(inplace, out);
    }
  });
}

// Block (src -> dst) holds Pattern(size(src, dst), src * 16 + dst, 5): uneven sizes, empty
// blocks and the own block, each landing at its offset.
TEST_P(UcxGroupTest, AllToAllDeliversEveryBlockToItsRank) {
  const int n = GetParam();
  RunGroup(n, [n](Communicator& comm) {
    const int r = comm.rank();
    for (size_t scale : {size_t{0}, size_t{1}, size_t{4099}, size_t{300000}}) {
      const auto size = [&](int src, int dst) { return scale * static_cast<size_t>((src + 2 * dst) % 3); };
      std::vector<size_t> send_bytes(n), recv_bytes(n);
      std::vector<uint8_t> send;
      for (int q = 0; q < n; ++q) {
        send_bytes[q] = size(r, q);
        recv_bytes[q] = size(q, r);
        const std::vector<uint8_t> block = Pattern(send_bytes[q], r * 16 + q, 5);
        send.insert(send.end(), block.begin(), block.end());
      }
      std::vector<uint8_t> recv(std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t{0}), 0xEE);
      absl::Status s = comm.AllToAll(send.data(), send_bytes, recv.data(), recv_bytes);
      ASSERT_TRUE(s.ok()) << s;
      size_t at = 0;
      for (int q = 0; q < n; ++q) {
        std::vector<uint8_t> block(recv.begin() + at, recv.begin() + at + recv_bytes[q]);
        EXPECT_EQ(FirstMismatch(block, q * 16 + r, 5), -1) << "scale " << scale << " from " << q;
        at += recv_bytes[q];
      }
    }
    const std::vector<size_t> wrong(n + 1, 0);
    EXPECT_STATUS_CODE(comm.AllToAll(nullptr, wrong, nullptr, wrong), kInvalidArgument);
  });
}

TEST_P(UcxGroupTest, BroadcastFromEveryRoot) {
  const int n = GetParam();
  RunGroup(n, [n](Communicator& comm) {
    for (int root = 0; root < n; ++root) {
      for (size_t bytes : {size_t{0}, size_t{5}, size_t{3} << 20}) {
        std::vector<uint8_t> buf = comm.rank() == root ? Pattern(bytes, root, 9) : std::vector<uint8_t>(bytes, 0);
        absl::Status s = comm.Broadcast(buf.data(), bytes, root);
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_EQ(FirstMismatch(buf, root, 9), -1) << "root=" << root << " bytes=" << bytes;
      }
    }
    EXPECT_STATUS_CODE(comm.Broadcast(nullptr, 0, n), kInvalidArgument);
  });
}

TEST_P(UcxGroupTest, BarrierWaitsForTheLastRank) {
  const int n = GetParam();
  std::atomic<int> arrived{0};
  RunGroup(n, [&](Communicator& comm) {
    ASSERT_TRUE(comm.Barrier().ok());
    if (comm.rank() == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));
    arrived.fetch_add(1);
    absl::Status s = comm.Barrier();
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(arrived.load(), n) << "rank " << comm.rank() << " left the barrier early";
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(comm.Barrier().ok());
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, UcxGroupTest, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

TEST(UcxCommunicatorTest, RecvMatchesTagAndPeer) {
  RunGroup(3, [](Communicator& comm) {
    const int r = comm.rank();
    if (r == 0) {
      // Tags out of order, and the same tag from two peers: each Recv picks its
      // own.
      int32_t v = -1;
      ASSERT_TRUE(comm.Recv(&v, 4, 2, 5).ok());
      EXPECT_EQ(v, 205);
      absl::Status s1 = comm.Recv(&v, 4, 1, 5);
      ASSERT_TRUE(s1.ok()) << s1;
      EXPECT_EQ(v, 105);
      ASSERT_TRUE(comm.Recv(&v, 4, 1, 7).ok());
      EXPECT_EQ(v, 107);
      ASSERT_TRUE(comm.Recv(&v, 4, 2, kMaxUserTag).ok());
      EXPECT_EQ(v, 299);
    } else {
      int32_t a = r * 100 + 7, b = r * 100 + 5, c = r * 100 + 99;
      ASSERT_TRUE(comm.Send(&a, 4, 0, 7).ok());
      ASSERT_TRUE(comm.Send(&b, 4, 0, 5).ok());
      if (r == 2) {
        ASSERT_TRUE(comm.Send(&c, 4, 0, kMaxUserTag).ok());
      }
      EXPECT_STATUS_CODE(comm.Send(&a, 4, 0, kMaxUserTag + 1), kInvalidArgument);
      EXPECT_STATUS_CODE(comm.Send(&a, 4, 3, 1), kInvalidArgument);
    }
    ASSERT_TRUE(comm.Barrier().ok());
  });
}

TEST(UcxCommunicatorTest, SizeMismatchIsInvalidArgumentAndLeavesTheLinkUsable) {
  RunGroup(2, [](Communicator& comm) {
    std::vector<uint8_t> buf(64, 1);
    if (comm.rank() == 0) {
      ASSERT_TRUE(comm.Send(buf.data(), 8, 1, 1).ok());
      ASSERT_TRUE(comm.Send(buf.data(), 64, 1, 2).ok());
      ASSERT_TRUE(comm.Send(buf.data(), 16, 1, 3).ok());
    } else {
      absl::Status s = comm.Recv(buf.data(), 16, 0, 1);  // shorter message than expected
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      s = comm.Recv(buf.data(), 16, 0, 2);  // longer message than the buffer
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      s = comm.Recv(buf.data(), 16, 0, 3);
      EXPECT_TRUE(s.ok()) << s;
    }
    ASSERT_TRUE(comm.Barrier().ok());
  });
}

// ---- Timeouts
// ---------------------------------------------------------------------------

TEST(UcxCommunicatorTest, RecvFromSilentPeerTimesOutAndStaysUsable) {
  std::atomic<bool> timed_out{false};
  RunGroup(
      2,
      [&](Communicator& comm) {
        float x = 0;
        if (comm.rank() == 1) {
          const auto start = Clock::now();
          absl::Status s = comm.Recv(&x, sizeof(x), 0, 1);
          const double ms = MsSince(start);
          EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
          EXPECT_GE(ms, 450);
          EXPECT_LT(ms, 2500);
          EXPECT_NE(StatusMessage(s).find("rank 0"), std::string::npos) << s;
          timed_out = true;
          s = comm.Recv(&x, sizeof(x), 0, 2);
          EXPECT_TRUE(s.ok()) << s;
          EXPECT_EQ(x, 42.f);
        } else {
          while (!timed_out) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          x = 42.f;
          absl::Status s = comm.Send(&x, sizeof(x), 1, 2);
          EXPECT_TRUE(s.ok()) << s;
        }
      },
      /*timeout_ms=*/500);
}

TEST(UcxCommunicatorTest, SendNobodyReceivesTimesOutAndClosesTheLink) {
  std::atomic<bool> done{false};
  RunGroup(
      2,
      [&](Communicator& comm) {
        if (comm.rank() == 0) {
          std::vector<uint8_t> big(8 << 20, 1);  // rendezvous protocol: waits for the receiver
          const auto start = Clock::now();
          absl::Status s = comm.Send(big.data(), big.size(), 1, 1);
          EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
          EXPECT_LT(MsSince(start), 4000);
          big.assign(big.size(), 0);  // the buffer is ours again
          s = comm.Send(big.data(), 4, 1, 2);
          EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
          done = true;
        } else {
          while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      },
      /*timeout_ms=*/400);
}

TEST(UcxCommunicatorTest, FailedCollectiveBreaksTheCommunicator) {
  std::atomic<bool> done{false};
  RunGroup(
      2,
      [&](Communicator& comm) {
        if (comm.rank() == 0) {
          std::vector<float> data(10, 1.f);
          absl::Status s = comm.AllReduceSum(data.data(), data.size());
          EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
          s = comm.Barrier();
          EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
          done = true;
        } else {
          while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      },
      /*timeout_ms=*/300);
}

// ---- Separate processes
// -------------------------------------------------------------------

constexpr size_t kHiddenFloats = 576;  // SmolLM2-135M hidden size
constexpr char kChildEnv[] = "CASCADE_COMM_TEST_CHILD";

float HiddenValue(int src, size_t i) { return static_cast<float>(src * 1000 + static_cast<int>(i)) * 0.5f; }

// Child side of the multi-process tests: rank 1 of a 2-rank group over
// FileRendezvous. CASCADE_COMM_TEST_CHILD = "<mode>:<rendezvous dir>:<group>";
// returns the exit code.
int ChildMain(const std::string& spec) {
  const size_t a = spec.find(':');
  const size_t b = spec.rfind(':');
  if (a == std::string::npos || b == a) return 90;
  const std::string mode = spec.substr(0, a);
  absl::StatusOr<std::unique_ptr<FileRendezvous>> rendezvous = FileRendezvous::Create(spec.substr(a + 1, b - a - 1));
  if (!rendezvous.ok()) return 91;
  GroupOptions options;
  options.group = spec.substr(b + 1);
  options.rank = 1;
  options.size = 2;
  options.timeout_ms = 20000;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = UcxCommunicator::Create(options, rendezvous->get());
  if (!comm.ok()) {
    std::fprintf(stderr, "child: %s\n", comm.status().ToString().c_str());
    return 92;
  }
  std::vector<float> mine(kHiddenFloats);
  for (size_t i = 0; i < kHiddenFloats; ++i) mine[i] = HiddenValue(1, i);
  if (mode == "hang") {
    if (!(*comm)->Send(mine.data(), mine.size() * sizeof(float), 0, 1).ok()) return 93;
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));  // until SIGKILL
  }
  std::vector<float> theirs(kHiddenFloats);
  if (!(*comm)->Recv(theirs.data(), theirs.size() * sizeof(float), 0, 1).ok()) return 94;
  for (size_t i = 0; i < kHiddenFloats; ++i) {
    if (theirs[i] != HiddenValue(0, i)) return 95;
  }
  if (!(*comm)->Send(mine.data(), mine.size() * sizeof(float), 0, 2).ok()) return 96;
  std::vector<float> sum(kHiddenFloats, 1.f);
  if (!(*comm)->AllReduceSum(sum.data(), sum.size()).ok()) return 97;
  for (float v : sum) {
    if (v != 2.f) return 98;
  }
  if (!(*comm)->Barrier().ok()) return 99;
  return 0;
}

// Runs before main(): in a child started by `SpawnChild`, do the child's part
// and leave.
const bool kIsChild = [] {
  const char* spec = std::getenv(kChildEnv);
  if (spec == nullptr) return false;
  std::fflush(stdout);
  ::_exit(ChildMain(spec));
}();

// Starts this test binary as rank 1: over TCP only (`UCX_TLS=tcp`, separate
// "nodes"), or with shared memory in peer-failure mode (`shm_error_handling`,
// see UcxOptions).
pid_t SpawnChild(const std::string& mode, const std::string& dir, const std::string& group,
                 bool shm_error_handling = false) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "UCX_TLS=", 8) == 0 || std::strncmp(*e, kChildEnv, std::strlen(kChildEnv)) == 0) continue;
    env_strings.emplace_back(*e);
  }
  env_strings.push_back(std::string(kChildEnv) + "=" + mode + ":" + dir + ":" + group);
  if (shm_error_handling) {
    env_strings.push_back("UCX_POSIX_ERROR_HANDLING=y");
    env_strings.push_back("UCX_SYSV_ERROR_HANDLING=y");
  } else {
    env_strings.push_back("UCX_TLS=tcp");
  }
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::vector<char*> argv = {exe.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  return pid;
}

// Waits up to `ms` for `pid`; kills it when it is still running. Returns the
// exit code, or -1 when it had to be killed or died of a signal.
int WaitChild(pid_t pid, int ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::unique_ptr<Communicator> CreateParent(const std::string& dir, const std::string& group, int64_t timeout_ms,
                                           bool tcp = true) {
  absl::StatusOr<std::unique_ptr<FileRendezvous>> rendezvous = FileRendezvous::Create(dir);
  EXPECT_TRUE(rendezvous.ok()) << rendezvous.status();
  if (!rendezvous.ok()) return nullptr;
  GroupOptions options;
  options.group = group;
  options.rank = 0;
  options.size = 2;
  options.timeout_ms = timeout_ms;
  UcxOptions ucx;
  if (tcp) ucx.transports = "tcp";
  absl::StatusOr<std::unique_ptr<Communicator>> comm = UcxCommunicator::Create(options, rendezvous->get(), ucx);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? std::move(*comm) : nullptr;
}

TEST(UcxMultiProcessTest, HiddenStateBothWaysOverTcp) {
  cascade::testing::TempDir dir;
  const std::string group = UniqueGroup("procs");
  const pid_t child = SpawnChild("exchange", dir.path(), group);
  ASSERT_GT(child, 0);
  std::unique_ptr<Communicator> comm = CreateParent(dir.path(), group, 20000);
  if (comm == nullptr) {
    WaitChild(child, 0);
    FAIL();
  }
  std::vector<float> mine(kHiddenFloats);
  for (size_t i = 0; i < kHiddenFloats; ++i) mine[i] = HiddenValue(0, i);
  ASSERT_TRUE(comm->Send(mine.data(), mine.size() * sizeof(float), 1, 1).ok());
  std::vector<float> theirs(kHiddenFloats);
  absl::Status s = comm->Recv(theirs.data(), theirs.size() * sizeof(float), 1, 2);
  ASSERT_TRUE(s.ok()) << s;
  for (size_t i = 0; i < kHiddenFloats; ++i) ASSERT_EQ(theirs[i], HiddenValue(1, i)) << i;
  std::vector<float> sum(kHiddenFloats, 1.f);
  ASSERT_TRUE(comm->AllReduceSum(sum.data(), sum.size()).ok());
  for (float v : sum) ASSERT_EQ(v, 2.f);
  ASSERT_TRUE(comm->Barrier().ok());
  EXPECT_EQ(WaitChild(child, 20000), 0);
}

// Rank 1 (a child) sends one hidden state and is then killed with SIGKILL: the
// parent's next Recv from it must fail within seconds (timeout 5 s), never
// hang.
void CheckKilledPeer(bool tcp) {
  cascade::testing::TempDir dir;
  const std::string group = UniqueGroup("victim");
  const pid_t child = SpawnChild("hang", dir.path(), group, /*shm_error_handling=*/!tcp);
  ASSERT_GT(child, 0);
  std::unique_ptr<Communicator> comm = CreateParent(dir.path(), group, 5000, tcp);
  if (comm == nullptr) {
    WaitChild(child, 0);
    FAIL();
  }
  std::vector<float> theirs(kHiddenFloats);
  absl::Status s = comm->Recv(theirs.data(), theirs.size() * sizeof(float), 1, 1);
  ASSERT_TRUE(s.ok()) << s;
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  const auto start = Clock::now();
  s = comm->Recv(theirs.data(), theirs.size() * sizeof(float), 1, 2);
  const double ms = MsSince(start);
  EXPECT_TRUE(s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(ms, 8000);
  std::printf("[ info ] Recv from a SIGKILLed peer (%s): %s after %.0f ms: %s\n", tcp ? "tcp" : "shared memory",
              std::string(absl::StatusCodeToString(s.code())).c_str(), ms, StatusMessage(s).c_str());
  // Later calls to the dead peer fail too, without waiting for the whole
  // timeout again once the failure is known.
  const auto again = Clock::now();
  s = comm->Send(theirs.data(), 4, 1, 3);
  EXPECT_TRUE(s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(MsSince(again), 6000);
}

TEST(UcxMultiProcessTest, KilledPeerMakesRecvUnavailableOverTcp) { CheckKilledPeer(/*tcp=*/true); }

// Same over shared memory: needs UCX's shm error handling, which UCX reads only
// from the environment, so this test sets it for itself and its child.
TEST(UcxMultiProcessTest, KilledPeerMakesRecvUnavailableOverSharedMemory) {
  const bool had_posix = std::getenv("UCX_POSIX_ERROR_HANDLING") != nullptr;
  const bool had_sysv = std::getenv("UCX_SYSV_ERROR_HANDLING") != nullptr;
  if (!had_posix) ::setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
  if (!had_sysv) ::setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
  CheckKilledPeer(/*tcp=*/false);
  if (!had_posix) ::unsetenv("UCX_POSIX_ERROR_HANDLING");
  if (!had_sysv) ::unsetenv("UCX_SYSV_ERROR_HANDLING");
}

// ---- Speed (printed, not asserted)
// ------------------------------------------------------------

void MeasurePair(const char* label, UcxOptions ucx) {
  constexpr int kPingPongs = 2000;
  constexpr size_t kSmall = 4096;
  constexpr size_t kBig = 16 << 20;
  constexpr int kBigReps = 8;
  double pingpong_us = 0;
  double gbps = 0;
  RunGroup(
      2,
      [&](Communicator& comm) {
        std::vector<uint8_t> small(kSmall, 1);
        std::vector<uint8_t> big(kBig, 2);
        const int peer = 1 - comm.rank();
        auto pingpong = [&](int iters) {
          for (int i = 0; i < iters; ++i) {
            if (comm.rank() == 0) {
              ASSERT_TRUE(comm.Send(small.data(), kSmall, peer, 1).ok());
              ASSERT_TRUE(comm.Recv(small.data(), kSmall, peer, 1).ok());
            } else {
              ASSERT_TRUE(comm.Recv(small.data(), kSmall, peer, 1).ok());
              ASSERT_TRUE(comm.Send(small.data(), kSmall, peer, 1).ok());
            }
          }
        };
        pingpong(100);
        ASSERT_TRUE(comm.Barrier().ok());
        auto start = Clock::now();
        pingpong(kPingPongs);
        if (comm.rank() == 0) pingpong_us = MsSince(start) * 1000.0 / kPingPongs / 2;  // one way
        ASSERT_TRUE(comm.Barrier().ok());
        auto stream = [&](int reps) {
          for (int i = 0; i < reps; ++i) {
            if (comm.rank() == 0) {
              ASSERT_TRUE(comm.Send(big.data(), kBig, peer, 2).ok());
            } else {
              ASSERT_TRUE(comm.Recv(big.data(), kBig, peer, 2).ok());
            }
          }
          char ack = 0;
          if (comm.rank() == 0) {
            ASSERT_TRUE(comm.Recv(&ack, 1, peer, 3).ok());
          } else {
            ASSERT_TRUE(comm.Send(&ack, 1, peer, 3).ok());
          }
        };
        stream(1);
        start = Clock::now();
        stream(kBigReps);
        if (comm.rank() == 0) gbps = kBigReps * static_cast<double>(kBig) / (MsSince(start) * 1e6);
      },
      20000, ucx);
  std::printf("[ info ] %s: 4 KiB ping-pong %.1f us one way; 16 MiB %.2f GB/s\n", label, pingpong_us, gbps);
}

TEST(UcxCommunicatorSpeedTest, LatencyAndBandwidthBetweenTwoThreads) {
  MeasurePair("default transports, peer-failure detection", {});
  if (std::getenv("UCX_POSIX_ERROR_HANDLING") == nullptr && std::getenv("UCX_SYSV_ERROR_HANDLING") == nullptr) {
    ::setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
    ::setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
    MeasurePair(
        "default transports, peer-failure detection, "
        "UCX_{POSIX,SYSV}_ERROR_HANDLING=y",
        {});
    ::unsetenv("UCX_POSIX_ERROR_HANDLING");
    ::unsetenv("UCX_SYSV_ERROR_HANDLING");
  }
  UcxOptions no_detect;
  no_detect.detect_peer_failure = false;
  MeasurePair("default transports, no failure detection", no_detect);
  UcxOptions tcp;
  tcp.transports = "tcp";
  MeasurePair("tcp only", tcp);
  UcxOptions spin;
  spin.spin_us = 20;
  MeasurePair("default transports, busy-poll 20 us before sleeping", spin);
}

}  // namespace
}  // namespace cascade::comm
