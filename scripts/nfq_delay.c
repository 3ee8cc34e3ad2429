// nfq_delay QUEUE DELAY_US: holds every packet of netfilter queue QUEUE for DELAY_US
// microseconds, then accepts it (in order). It stands in for `tc qdisc netem delay` on
// kernels built without sch_netem (scripts/bench_multinode.sh); route packets to it with
// `iptables -A OUTPUT -o DEV -j NFQUEUE --queue-num QUEUE` in the same network namespace.
// Raw netlink (no libnetfilter_queue); only packet ids cross to user space (COPY_META), and
// GSO packets are queued whole. Runs until SIGTERM or SIGINT. Linux only.
//
// Build: cc -O2 -o nfq_delay scripts/nfq_delay.c
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { kRing = 1 << 20 };               // Packets held at most; past that they pass at once.
static const uint64_t kSpinNs = 40000;  // See the main loop.

static volatile sig_atomic_t g_stop = 0;
static void OnSignal(int sig) {
  (void)sig;
  g_stop = 1;
}

static uint64_t NowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// One netlink message of nfnetlink_queue: header, nfgenmsg, then attributes.
struct Msg {
  char buf[256];
  size_t len;
};

static void Begin(struct Msg* m, uint16_t type, uint16_t queue, uint16_t flags) {
  memset(m, 0, sizeof(*m));
  struct nlmsghdr* nh = (struct nlmsghdr*)m->buf;
  nh->nlmsg_type = (NFNL_SUBSYS_QUEUE << 8) | type;
  nh->nlmsg_flags = NLM_F_REQUEST | flags;
  struct nfgenmsg* g = (struct nfgenmsg*)NLMSG_DATA(nh);
  g->nfgen_family = AF_UNSPEC;
  g->version = NFNETLINK_V0;
  g->res_id = htons(queue);
  m->len = NLMSG_LENGTH(sizeof(struct nfgenmsg));
}

static void Attr(struct Msg* m, uint16_t type, const void* data, size_t n) {
  struct nlattr* a = (struct nlattr*)(m->buf + m->len);
  a->nla_type = type;
  a->nla_len = (uint16_t)(NLA_HDRLEN + n);
  memcpy((char*)a + NLA_HDRLEN, data, n);
  m->len += NLA_ALIGN(a->nla_len);
}

static int Send(int fd, struct Msg* m) {
  ((struct nlmsghdr*)m->buf)->nlmsg_len = (uint32_t)m->len;
  struct sockaddr_nl to = {.nl_family = AF_NETLINK};
  return sendto(fd, m->buf, m->len, 0, (struct sockaddr*)&to, sizeof(to)) < 0 ? -1 : 0;
}

// Accepts every queued packet with an id up to `id`.
static void AcceptUpTo(int fd, uint16_t queue, uint32_t id) {
  struct Msg m;
  Begin(&m, NFQNL_MSG_VERDICT_BATCH, queue, 0);
  struct nfqnl_msg_verdict_hdr v = {.verdict = htonl(NF_ACCEPT), .id = htonl(id)};
  Attr(&m, NFQA_VERDICT_HDR, &v, sizeof(v));
  if (Send(fd, &m) != 0) perror("nfq_delay: verdict");
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s QUEUE DELAY_US\n", argv[0]);
    return 2;
  }
  const uint16_t queue = (uint16_t)atoi(argv[1]);
  const uint64_t delay_ns = (uint64_t)(atof(argv[2]) * 1000.0);
  prctl(PR_SET_TIMERSLACK, 1UL);  // Wake on time: the default slack is 50 us.
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  const int fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER);
  if (fd < 0) {
    perror("nfq_delay: socket");
    return 1;
  }
  const int rcvbuf = 16 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
  struct sockaddr_nl local = {.nl_family = AF_NETLINK};
  if (bind(fd, (struct sockaddr*)&local, sizeof(local)) < 0) {
    perror("nfq_delay: bind");
    return 1;
  }
  struct Msg m;
  Begin(&m, NFQNL_MSG_CONFIG, queue, NLM_F_ACK);
  struct nfqnl_msg_config_cmd cmd = {.command = NFQNL_CFG_CMD_BIND, .pf = htons(AF_INET)};
  Attr(&m, NFQA_CFG_CMD, &cmd, sizeof(cmd));
  struct nfqnl_msg_config_params params = {.copy_range = 0, .copy_mode = NFQNL_COPY_META};
  Attr(&m, NFQA_CFG_PARAMS, &params, sizeof(params));
  const uint32_t maxlen = htonl(kRing);
  Attr(&m, NFQA_CFG_QUEUE_MAXLEN, &maxlen, sizeof(maxlen));
  const uint32_t flags = htonl(NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN);
  Attr(&m, NFQA_CFG_MASK, &flags, sizeof(flags));
  Attr(&m, NFQA_CFG_FLAGS, &flags, sizeof(flags));
  if (Send(fd, &m) != 0) {
    perror("nfq_delay: config");
    return 1;
  }
  static char buf[1 << 16];
  ssize_t n = recv(fd, buf, sizeof(buf), 0);
  const struct nlmsghdr* ack = (const struct nlmsghdr*)buf;
  if (n < 0 || ack->nlmsg_type != NLMSG_ERROR || ((const struct nlmsgerr*)NLMSG_DATA(ack))->error != 0) {
    fprintf(stderr, "nfq_delay: binding queue %u refused (%s)\n", queue,
            n < 0 ? strerror(errno) : strerror(-((const struct nlmsgerr*)NLMSG_DATA(ack))->error));
    return 1;
  }
  fprintf(stderr, "nfq_delay: queue %u, %.1f us\n", queue, delay_ns / 1000.0);

  static uint32_t ids[kRing];
  static uint64_t due[kRing];
  size_t head = 0, tail = 0;  // Held packets: [head, tail) modulo kRing.
  while (!g_stop) {
    uint64_t now = NowNs();
    int release = 0;
    uint32_t last = 0;
    while (head != tail && due[head % kRing] <= now) {
      last = ids[head % kRing];
      release = 1;
      ++head;
    }
    if (release) AcceptUpTo(fd, queue, last);
    // Sleep until kSpinNs before the next release, then poll without sleeping: a wake-up
    // from a sleep comes tens of microseconds late.
    struct timespec wait = {0, 0}, *timeout = NULL;
    if (head != tail) {
      const uint64_t left = due[head % kRing] - now;
      const uint64_t sleep_ns = left > kSpinNs ? left - kSpinNs : 0;
      wait.tv_sec = (time_t)(sleep_ns / 1000000000ull);
      wait.tv_nsec = (long)(sleep_ns % 1000000000ull);
      timeout = &wait;
    }
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (ppoll(&p, 1, timeout, NULL) <= 0 || !(p.revents & POLLIN)) continue;
    while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
      now = NowNs();
      for (struct nlmsghdr* nh = (struct nlmsghdr*)buf; NLMSG_OK(nh, (size_t)n); nh = NLMSG_NEXT(nh, n)) {
        if (nh->nlmsg_type != ((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET)) continue;
        const int attrs_len = (int)nh->nlmsg_len - NLMSG_LENGTH(sizeof(struct nfgenmsg));
        struct nlattr* a = (struct nlattr*)((char*)NLMSG_DATA(nh) + NLMSG_ALIGN(sizeof(struct nfgenmsg)));
        for (int left = attrs_len; left >= NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= left;
             left -= NLA_ALIGN(a->nla_len), a = (struct nlattr*)((char*)a + NLA_ALIGN(a->nla_len))) {
          if ((a->nla_type & NLA_TYPE_MASK) != NFQA_PACKET_HDR) continue;
          const struct nfqnl_msg_packet_hdr* h = (const struct nfqnl_msg_packet_hdr*)((char*)a + NLA_HDRLEN);
          const uint32_t id = ntohl(h->packet_id);
          if (tail - head == kRing) {  // Full: let it through now (with all held before it).
            AcceptUpTo(fd, queue, id);
            head = tail;
            continue;
          }
          ids[tail % kRing] = id;
          due[tail % kRing] = now + delay_ns;
          ++tail;
        }
      }
    }
    if (n < 0 && errno == ENOBUFS) fprintf(stderr, "nfq_delay: netlink buffer overrun (packets held longer)\n");
  }
  if (head != tail) AcceptUpTo(fd, queue, ids[(tail - 1) % kRing]);
  close(fd);
  return 0;
}
