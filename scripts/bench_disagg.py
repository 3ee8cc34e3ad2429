#!/usr/bin/env python3
"""Disaggregated against aggregated serving on two network-namespace hosts (issue 33;
scripts/netns_hosts.py has the hosts and their shaped link). Same cores on both sides: one
CPU worker of THREADS threads per host. Aggregated: two data-parallel replicas, one per host.
Disaggregated: a prefill replica on host 0 and a decode replica on host 1, the KV of every
request longer than LOCAL_PREFILL_TOKENS moving over the link (UCX over TCP); shorter
prompts are prefilled on the decode replica (parallel.disaggregation.local_prefill_tokens).
The coordinator and the client sit in host 0.

The load (scripts/openai_load.py mixed): STREAMS clients decode back to back (PROMPT_TOKENS
prompts, MAX_TOKENS tokens each) while a LONG_PROMPT_TOKENS prompt arrives every LONG_EVERY_S
seconds (LONG_MAX_TOKENS tokens each), for DURATION_S. Reported per layout: the streams'
inter-token latency p50 / p99, the long prompts' TTFT, the throughput (output tokens over
the counted window), every host's link bytes, and, disaggregated, the data plane's payload bytes
(UCX sockets, from `ss -ti`) per KV position transferred (cascade_kv_transfer_tokens_total).
Goal: ITL p99 >= 2x lower disaggregated, at >= 0.9x the throughput.

Usage (root): bench_disagg.py BIN_DIR NFQ_DELAY_BIN OUT_JSON; scripts/bench_disagg.sh has the settings.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_hosts import NET_SPECS, Hosts, sh, stop, wait_for  # noqa: E402

BIN, NFQ_DELAY, OUT = sys.argv[1:4]
ENV = os.environ
MODEL = os.path.abspath(ENV.get("MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
NET = ENV.get("NET", "10g")
THREADS = int(ENV.get("THREADS", "1"))
LOAD = {k: ENV.get(k.upper(), v) for k, v in {"streams": "32", "prompt_tokens": "64", "max_tokens": "128",
                                              "long_prompt_tokens": "512", "long_max_tokens": "16",
                                              "long_every_s": "", "duration_s": "90", "warmup_s": "20",
                                              "stagger_s": "20"}.items()}
# Without LONG_EVERY_S, the long prompts' interval is the measured prefill time of one (TTFT
# on the idle aggregated cluster) over PREFILL_LOAD: how busy the prefill replica is kept.
PREFILL_LOAD = float(ENV.get("PREFILL_LOAD", "0.95"))
UCX_TLS = ENV.get("UCX_TLS", "tcp")
LOCAL_PREFILL_TOKENS = int(ENV.get("LOCAL_PREFILL_TOKENS", "256"))
MAX_BATCHED_TOKENS = int(ENV.get("MAX_BATCHED_TOKENS", "2048"))
TAG = f"cdg{os.getpid() % 100000}"
LAYOUTS = {
    "aggregated": "parallel: {data: 2, pipeline: 1, tensor: 1}",
    "disaggregated": "parallel: {disaggregation: {prefill: {replicas: 1}, decode: {replicas: 1}, "
                     f"local_prefill_tokens: {LOCAL_PREFILL_TOKENS}}}}}",
}


def metric(hosts, http, name):
    text = sh("curl", "-sf", f"http://{http}/metrics", ns=hosts.names[0]).stdout
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def calibrate(hosts, http):
    """One long prompt's TTFT on the idle cluster (the second of two: warm), in seconds."""
    out = []
    for _ in range(2):
        row = json.loads(sh("python3", "scripts/openai_load.py", "load", f"http://{http}", "--requests", "1",
                            "--concurrency", "1", "--prompt-tokens", LOAD["long_prompt_tokens"], "--max-tokens", "1",
                            ns=hosts.names[0]).stdout)
        out.append(row["ttft_ms"]["p50"] / 1e3)
    print(f"a {LOAD['long_prompt_tokens']}-token prefill takes {out[-1]:.2f} s here: a long prompt every "
          f"{out[-1] / PREFILL_LOAD:.2f} s keeps the prefill replica {PREFILL_LOAD:.0%} busy", flush=True)
    return out[-1]


def run(hosts, layout, tmp):
    trust = os.path.join(tmp, "cluster")
    cfg = os.path.join(tmp, f"{layout}.yaml")
    open(cfg, "w").write(
        f"model: {{path: {MODEL}}}\n{LAYOUTS[layout]}\nnodes:\n"
        f"  - {{name: h0, host: {hosts.ip(0)}, devices: [cpu], launch: local}}\n"
        f"  - {{name: h1, host: {hosts.ip(1)}, devices: [cpu], launch: external}}\n"
        f"server: {{listen: {hosts.ip(0)}:0, http_listen: {hosts.ip(0)}:0}}\n"
        f"scheduler: {{max_num_seqs: 64, max_batched_tokens: {MAX_BATCHED_TOKENS}, kv_cache_mb: 512, "
        "prefix_caching: false}\n"
        f"security: {{cluster_dir: {trust}}}\n")
    env = dict(os.environ, UCX_TLS=UCX_TLS)
    log_path = os.path.join(tmp, f"{layout}.log")
    log = open(log_path, "w")
    procs = [subprocess.Popen(["ip", "netns", "exec", hosts.names[0], f"{BIN}/cascade-coordinator", "--config", cfg,
                               "--worker-threads", str(THREADS)], stdout=log, stderr=subprocess.STDOUT, env=env,
                              start_new_session=True)]
    try:
        control = wait_for(log_path, r"waiting for \d+ worker\(s\) on (\S+) \(mutual TLS\)", 120, procs).group(1)
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", hosts.names[1], f"{BIN}/cascade-worker", "--coordinator", control, "--node", "h1",
             "--device", "cpu", "--threads", str(THREADS), "--listen", f"{hosts.ip(1)}:0", "--ca", f"{trust}/ca.pem",
             "--token-file", f"{trust}/join.token"], stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True))
        address = wait_for(log_path, r"ready on (\S+)", 600, procs).group(1)
        http = wait_for(log_path, r"http front on (\S+)", 10, procs).group(1)
        status = sh(f"{BIN}/cascade", "status", "--server", address, ns=hosts.names[0]).stdout
        grpc_ports = {int(control.rsplit(":", 1)[1])} | {int(p) for p in re.findall(r"\d+\.\d+\.\d+\.\d+:(\d+)", status)}
        load = ["python3", "scripts/openai_load.py"]
        sh(*load, "load", f"http://{http}", "--requests", "4", "--concurrency", "4", "--max-tokens", "4",
           ns=hosts.names[0])  # Warm-up.
        if not LOAD["long_every_s"]:
            LOAD["long_every_s"] = f"{calibrate(hosts, http) / PREFILL_LOAD:.2f}"
        tx0, ss0 = hosts.tx_bytes(), [hosts.socket_bytes(i) for i in range(hosts.n)]
        kv0 = metric(hosts, http, "cascade_kv_transfer_tokens_total")
        out = os.path.join(tmp, f"{layout}.json")
        args = [f"--{k.replace('_', '-')}={v}" for k, v in LOAD.items()]
        sh(*load, "mixed", f"http://{http}", *args, "--label", layout, "--json", out, ns=hosts.names[0])
        tx1, ss1 = hosts.tx_bytes(), [hosts.socket_bytes(i) for i in range(hosts.n)]
        row = json.load(open(out))
        row["kv_tokens"] = metric(hosts, http, "cascade_kv_transfer_tokens_total") - kv0
        data = sum(v - ss0[i].get(k, 0) for i in range(hosts.n) for k, v in ss1[i].items()
                   if k[1] not in grpc_ports and k[3] not in grpc_ports)
        row["link_tx_bytes"] = [b - a for a, b in zip(tx0, tx1)]
        row["data_plane_payload_bytes"] = data
        row["kv_bytes_per_token"] = data / row["kv_tokens"] if row["kv_tokens"] else 0.0
        row["layout"] = layout
        return row
    finally:
        stop(procs)


def main():
    if os.geteuid() != 0:
        raise SystemExit("bench_disagg: network namespaces need root")
    load0 = os.getloadavg()
    rows, t0 = [], time.time()
    with tempfile.TemporaryDirectory() as tmp:
        hosts = Hosts(2, TAG, NFQ_DELAY)
        try:
            hosts.shape(NET)
            for layout in LAYOUTS:
                print(f"== {layout} on 2 hosts, {NET} link", flush=True)
                rows.append(run(hosts, layout, tmp))
        finally:
            hosts.close()
    a, d = rows
    print(f"\n{LOAD['streams']} streams of {LOAD['max_tokens']} tokens (prompts {LOAD['prompt_tokens']}), a "
          f"{LOAD['long_prompt_tokens']}-token prompt every {LOAD['long_every_s']} s for {LOAD['duration_s']} s; "
          f"{os.path.basename(MODEL)}, one {THREADS}-thread CPU worker per host, {NET} link "
          f"({NET_SPECS[NET][0]}, {NET_SPECS[NET][2]} us one-way); max_batched_tokens {MAX_BATCHED_TOKENS}; "
          f"disaggregated: prompts of <= {LOCAL_PREFILL_TOKENS} tokens prefilled on the decode side\n")
    print("| layout | ITL p50 / p99 / p99.9 / max ms | long-prompt TTFT p50 / p99 ms | stream TTFT p50 / p99 ms "
          "| tok/s | link tx MB (host 0 / 1) | KV B per transferred position | failed |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        kv = f"{r['kv_bytes_per_token']:.0f} ({int(r['kv_tokens'])} positions)" if r["kv_tokens"] else "-"
        i = r["itl_ms"]
        print(f"| {r['layout']} | {i['p50']:.1f} / {i['p99']:.1f} / {i['p999']:.0f} / {i['max']:.0f} | "
              f"{r['long_ttft_ms']['p50']:.0f} / {r['long_ttft_ms']['p99']:.0f} | "
              f"{r['ttft_ms']['p50']:.0f} / {r['ttft_ms']['p99']:.0f} | {r['throughput_tok_s']:.1f} | "
              + " / ".join(f"{b / 1e6:.1f}" for b in r["link_tx_bytes"]) + f" | {kv} | {r['failures']} |")
    itl = a["itl_ms"]["p99"] / max(1e-9, d["itl_ms"]["p99"])
    thr = d["throughput_tok_s"] / max(1e-9, a["throughput_tok_s"])
    print(f"\nITL p99 {itl:.2f}x lower disaggregated (goal >= 2x), at {thr:.2f}x the throughput (goal >= 0.9x)")
    load1 = os.getloadavg()
    print(f"wall {time.time() - t0:.0f} s; load average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end")
    json.dump({"settings": {**LOAD, "model": MODEL, "net": NET, "threads": THREADS, "prefill_load": PREFILL_LOAD,
                            "local_prefill_tokens": LOCAL_PREFILL_TOKENS, "max_batched_tokens": MAX_BATCHED_TOKENS},
               "rows": rows,
               "itl_p99_ratio": itl, "throughput_ratio": thr}, open(OUT, "w"), indent=1)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    main()
