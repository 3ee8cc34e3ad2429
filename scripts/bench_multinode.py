#!/usr/bin/env python3
"""Multi-node benchmark on one machine (issue 19): every "host" is a network namespace
joined to the others by a veth on one Linux bridge (10.78.0.x/24, all inside namespaces
of this run, removed on exit), each host's link shaped on its way out (rate by `tc tbf`,
one-way delay by `tc netem`, or, on kernels without sch_netem, by scripts/nfq_delay.c
behind an iptables NFQUEUE rule). The coordinator (and the stage-0 workers it launches)
and the `cascade bench` client run in host 0; every other stage's workers are external
workers in their own host, joined with the cluster's CA and token (as
tests/integration/cluster_test.py's two_nodes does), UCX over TCP.

For each model, layout and link setting it measures, at concurrency 1, 8 and 32:
throughput, TTFT and ITL percentiles (`cascade bench --json`); the bytes each host's
link sent per generated token (tx_bytes of its veth, read in its namespace before and
after the run), and of them the TCP payload of the data plane (UCX sockets, from
`ss -ti`; the rest is gRPC: steps, results, heartbeats); and at batch 1 the share of a
decode step spent outside the workers' compute, from the coordinator's /metrics:

  wall       = mean time per output token after the first (cascade_time_per_output_token_seconds),
               i.e. one decode step at batch 1 as the coordinator sees it;
  compute_s  = stage s's forward time minus its hand-off time (cascade_stage_step_seconds
               minus cascade_stage_handoff_seconds, TP rank 0);
  overhead   = 1 - sum_s compute_s / wall, split into
    coordinator = wall - the last stage's round trip (cascade_stage_round_trip_seconds: from
               the coordinator's sending the step to the result's arrival): the engine loop
               between a result and the next step (scheduling, building the step, emitting
               the token);
    trips    = the rest: the step's gRPC way to the workers and the result's way back, and
               the hand-offs between stages (data-plane transfers, a split hand-off's
               all-gather, the wake-ups around them). They overlap (the step reaches a later
               stage while an earlier one computes), so the script does not split them; the
               layout pp1 (one worker in host 0, no link, no hand-off) measures the gRPC
               trips alone.
TP collectives inside a stage count as compute. Decode-step means throughout: the batch-1
run's sums less one prefill step per request, each costed by a run of 1-token requests
just before it.

Usage (root): bench_multinode.py BIN_DIR NFQ_DELAY_BIN OUT_JSON; see scripts/bench_multinode.sh
for the settings (environment variables) and defaults.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_hosts import NET_SPECS, HostCluster, Hosts, sh  # noqa: E402

BIN, NFQ_DELAY, OUT = sys.argv[1:4]
ENV = os.environ
MODELS = ENV.get("MODELS", "models/SmolLM2-135M-Instruct.Q4_1.gguf").split()
LAYOUTS = ENV.get("LAYOUTS", "pp1 pp2 pp4 tp2pp2-split tp2pp2-full dp2").split()
NETS = ENV.get("NETS", "10g 1g").split()
CONCURRENCY = [int(c) for c in ENV.get("CONCURRENCY", "1 8 32").split()]
PROMPT = int(ENV.get("PROMPT_TOKENS", "16"))
MAX_TOKENS = int(ENV.get("MAX_TOKENS", "64"))
REQUESTS = {1: int(ENV.get("REQUESTS_C1", "8")), 8: int(ENV.get("REQUESTS_C8", "32")),
            32: int(ENV.get("REQUESTS_C32", "96"))}
UCX_TLS = ENV.get("UCX_TLS", "tcp")

# name: hosts, data, pipeline, tensor, pp_handoff. Host i holds `tensor` devices: stage i
# (its TP ranks together) under PP, replica i (a whole PP=1 pipeline) under DP.
LAYOUT_SPECS = {
    "pp1": (1, 1, 1, 1, "split"),  # The reference: one host, no link.
    "pp2": (2, 1, 2, 1, "split"),
    "pp4": (4, 1, 4, 1, "split"),
    "tp2pp2-split": (2, 1, 2, 2, "split"),
    "tp2pp2-full": (2, 1, 2, 2, "full"),
    "dp2": (2, 2, 1, 1, "split"),  # Two replicas, one per host; only replica 1's steps cross a link.
}
TAG = f"cmn{os.getpid() % 100000}"


class Cluster(HostCluster):
    """A LAYOUT_SPECS layout over the hosts (netns_hosts.HostCluster)."""

    def __init__(self, hosts, model, layout, tmp):
        n_hosts, dp, pp, tp, handoff = LAYOUT_SPECS[layout]
        super().__init__(hosts, BIN, tmp, layout, model, f"{{data: {dp}, pipeline: {pp}, tensor: {tp}}}", [tp] * n_hosts,
                         "scheduler: {max_num_seqs: 32, kv_cache_mb: 128, prefix_caching: false}\n"
                         f"transport: {{pp_handoff: {handoff}}}\n", UCX_TLS)

    def bench(self, concurrency, requests, max_tokens, json_path=None):
        return super().bench(concurrency, requests, PROMPT, max_tokens, json_path)

    def metrics(self):
        text = sh("curl", "-sf", f"http://{self.http}/metrics", ns=self.hosts.names[0]).stdout
        out = {}
        for line in text.splitlines():
            m = re.match(r"([a-z_]+)(?:\{(.*)\})? (\S+)$", line)
            if m:
                labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")))
                out[(m.group(1), labels)] = float(m.group(3))
        return out


def moved(a, b, name, **labels):
    key = (name, tuple(sorted(labels.items())))
    return b.get(key, 0.0) - a.get(key, 0.0)


def step_overhead(m0, m1, m2, pp):
    """Batch-1 decode: the coordinator's time per step against the stages' compute (see the
    module's docstring), from /metrics around 1-token requests (m0 -> m1: prefill steps
    alone, what one costs each stage) and the batch-1 run (m1 -> m2)."""
    n_req = REQUESTS[1]

    def per_decode_step(name, lab):  # Mean over the run's decode steps (see the docstring).
        pre = moved(m0, m1, name + "_sum", **lab) / moved(m0, m1, name + "_count", **lab)
        return (moved(m1, m2, name + "_sum", **lab) - n_req * pre) / (moved(m1, m2, name + "_count", **lab) - n_req)

    stages = []
    for s in range(pp):
        lab = dict(replica="0", stage=str(s), tp_rank="0")
        fwd = per_decode_step("cascade_stage_step_seconds", lab)
        hand = per_decode_step("cascade_stage_handoff_seconds", lab)
        trip = per_decode_step("cascade_stage_round_trip_seconds", lab)
        stages.append({"forward_ms": 1e3 * fwd, "handoff_ms": 1e3 * hand, "compute_ms": 1e3 * (fwd - hand),
                       "round_trip_ms": 1e3 * trip})
    wall = moved(m1, m2, "cascade_time_per_output_token_seconds_sum") / \
        moved(m1, m2, "cascade_time_per_output_token_seconds_count")
    wall_ms = 1e3 * wall
    compute = sum(s["compute_ms"] for s in stages)
    coordinator = wall_ms - stages[-1]["round_trip_ms"]
    return {"wall_ms": wall_ms, "compute_ms": compute, "overhead": 1 - compute / wall_ms,
            "coordinator_share": coordinator / wall_ms, "trips_share": (wall_ms - compute - coordinator) / wall_ms,
            "stages": stages}


def run_layout(hosts, model, layout, nets, tmp):
    _, dp, pp, tp, handoff = LAYOUT_SPECS[layout]
    rows = []
    cluster = Cluster(hosts, model, layout, tmp)
    try:
        for net in nets if hosts.n > 1 else ["none"]:
            if hosts.n > 1:
                hosts.shape(net)
            rtt = hosts.rtt_us() if hosts.n > 1 else 0.0
            cluster.bench(1, 2, 8)  # Warm-up.
            row = {"model": os.path.basename(model), "layout": layout, "data": dp, "pipeline": pp, "tensor": tp,
                   "pp_handoff": handoff, "hosts": hosts.n, "net": net, "rtt_us_measured": rtt, "runs": {}}
            if net in NET_SPECS:
                row.update(rate=NET_SPECS[net][0], delay_us=NET_SPECS[net][2],
                           delay_by="netem" if hosts.netem else "nfq_delay")
            for c in CONCURRENCY:
                if c == 1:
                    m0 = cluster.metrics()
                    cluster.bench(1, REQUESTS[1], 1)  # Prefill steps alone (see step_overhead).
                    m1 = cluster.metrics()
                tx0, ss0 = hosts.tx_bytes(), [hosts.socket_bytes(i) for i in range(hosts.n)]
                report = cluster.bench(c, REQUESTS[c], MAX_TOKENS, os.path.join(tmp, f"c{c}.json"))
                tx1, ss1 = hosts.tx_bytes(), [hosts.socket_bytes(i) for i in range(hosts.n)]
                if c == 1:
                    row["step"] = step_overhead(m0, m1, cluster.metrics(), pp)
                tokens = report["output_tokens"]
                data = cluster.data_plane_bytes(ss0, ss1)
                report["link_tx_bytes_per_token"] = [(b - a) / tokens for a, b in zip(tx0, tx1)]
                report["data_plane_payload_bytes_per_token"] = data / tokens
                row["runs"][str(c)] = report
                print(f"  {layout:13} {net:4} c={c:<2} {report['throughput_tok_s']:7.1f} tok/s  TTFT p50 "
                      f"{report['ttft_ms']['p50']:7.1f} ms  ITL p50 {report['itl_ms']['p50']:6.1f} ms  link B/token "
                      + " / ".join(f"{b:.0f}" for b in report["link_tx_bytes_per_token"])
                      + f"  (UCX payload {data / tokens:.0f})", flush=True)
            st = row["step"]
            print(f"  {layout:13} {net:4} batch-1 step {st['wall_ms']:.2f} ms, compute {st['compute_ms']:.2f} ms: "
                  f"outside compute {100 * st['overhead']:.1f}% = gRPC trips and hand-offs "
                  f"{100 * st['trips_share']:.1f}% + coordinator {100 * st['coordinator_share']:.1f}%; link RTT "
                  f"{rtt:.0f} us", flush=True)
            rows.append(row)
    finally:
        cluster.stop()
    return rows


def print_tables(rows):
    print("\n| model | layout | link | tok/s c=1 / 8 / 32 | TTFT p50 / p99 ms (c=8) | ITL p50 / p99 ms (c=8) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        ru = r["runs"]
        c8 = ru.get("8", ru[str(CONCURRENCY[-1])])
        print(f"| {r['model']} | {r['layout']} | {r['net']} | "
              + " / ".join(f"{ru[str(c)]['throughput_tok_s']:.1f}" for c in CONCURRENCY)
              + f" | {c8['ttft_ms']['p50']:.0f} / {c8['ttft_ms']['p99']:.0f} | {c8['itl_ms']['p50']:.1f} / "
              f"{c8['itl_ms']['p99']:.1f} |")
    hi = str(CONCURRENCY[-1])
    print(f"\n| model | layout | link (RTT) | link tx B/token c=1 | c={hi} | UCX payload B/token c=1 / {hi} "
          "| batch-1 step ms | compute ms | last stage's gRPC trips ms | outside compute | = trips + coordinator |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ru, st = r["runs"], r["step"]
        last = st["stages"][-1]
        link = f"{r['net']} ({r['rtt_us_measured']:.0f} us)" if r["hosts"] > 1 else "none"
        print(f"| {r['model']} | {r['layout']} | {link} | "
              + " / ".join(f"{b:.0f}" for b in ru["1"]["link_tx_bytes_per_token"]) + " | "
              + " / ".join(f"{b:.0f}" for b in ru[hi]["link_tx_bytes_per_token"])
              + f" | {ru['1']['data_plane_payload_bytes_per_token']:.0f} / "
              f"{ru[hi]['data_plane_payload_bytes_per_token']:.0f} | {st['wall_ms']:.2f} | {st['compute_ms']:.2f} | "
              f"{last['round_trip_ms'] - last['forward_ms']:.2f} | "
              f"{100 * st['overhead']:.1f}% | {100 * st['trips_share']:.1f}% + {100 * st['coordinator_share']:.1f}% |")


def main():
    if os.geteuid() != 0:
        raise SystemExit("bench_multinode: network namespaces need root")
    if 1 not in CONCURRENCY or any(c not in REQUESTS for c in CONCURRENCY):
        raise SystemExit("bench_multinode: CONCURRENCY is a subset of 1 8 32 that holds 1 (the batch-1 step)")
    for tool in ("ip", "tc", "ss", "curl"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench_multinode: `{tool}` is missing")
    load0 = os.getloadavg()
    print(f"load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} on {os.cpu_count()} CPUs")
    rows, t0 = [], time.time()
    with tempfile.TemporaryDirectory() as tmp:
        by_hosts = {}
        for layout in LAYOUTS:
            by_hosts.setdefault(LAYOUT_SPECS[layout][0], []).append(layout)
        for n_hosts, layouts in sorted(by_hosts.items()):
            hosts = None
            try:
                hosts = Hosts(n_hosts, TAG, NFQ_DELAY)
                for model in MODELS:
                    for layout in layouts:
                        print(f"== {os.path.basename(model)}, {layout} on {n_hosts} hosts", flush=True)
                        rows += run_layout(hosts, model, layout, NETS, tmp)
            finally:
                if hosts is not None:
                    hosts.close()
    print_tables(rows)
    load1 = os.getloadavg()
    print(f"\nwall {time.time() - t0:.0f} s; load average at the end {load1[0]:.2f} {load1[1]:.2f} "
          f"{load1[2]:.2f}")
    settings = {"load_average_start": load0, "load_average_end": load1, "cpus": os.cpu_count(), "prompt_tokens": PROMPT, "max_tokens": MAX_TOKENS, "requests": REQUESTS, "ucx_tls": UCX_TLS,
                "nets": {n: NET_SPECS[n] for n in NETS}}
    json.dump({"settings": settings, "rows": rows}, open(OUT, "w"), indent=1)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    main()
