#!/usr/bin/env python3
"""Expert parallelism across hosts (scripts/bench_moe.sh, section 4): EP ranks, one worker
(one thread) per network-namespace host (scripts/netns_hosts.py: a bridge, each host's link
shaped to NET), the coordinator in host 0, UCX over TCP, so every byte between two ranks
crosses a link. For each EP size, three forms of the same model:

  all_reduce  parallel.expert: attention tensor parallel, every rank sees every token, the
              MoE layer's partial sums (and the attention output's) all-reduced;
  eplb        the same with parallel.redundant_experts (SLOTS per rank, placed every 20 steps);
  all_to_all  parallel.expert_comm: all_to_all: attention data parallel (each rank its own
              sequences), each MoE layer dispatching tokens to their experts' ranks and
              combining them back.

Measured at concurrency CONCURRENCY (REQUESTS requests of PROMPT_TOKENS + MAX_TOKENS):
throughput and TPOT (`cascade bench --json`), the bytes each host's link sent per token the
cluster processed (tx_bytes of its veth), and of them the data plane's TCP payload (UCX
sockets, `ss -ti`; the rest is gRPC) per processed token. Beside the measurement, what each
form's collectives imply (`model_bytes`, below): per layer and token, and per processed
token in all (layers, embedding and logits), so the model is checked against the links and
the per-layer comparison rests on it.

Usage (root): bench_moe_hosts.py BIN_DIR MODEL N_LAYERS N_EMBD N_EXPERTS TOP_K N_VOCAB OUT_JSON
Env: EPS ("2 4"), FORMS ("all_reduce eplb all_to_all"), NET (10g; none: links unshaped),
CONCURRENCY (16), REQUESTS (32), PROMPT_TOKENS (32), MAX_TOKENS (64), SLOTS (4), KV_MB (256, a
worker's scheduler.kv_cache_mb), NFQ_DELAY (path; needed on a kernel without sch_netem).
"""
import json
import os
import re
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_hosts import NET_SPECS, HostCluster, Hosts  # noqa: E402

BIN, MODEL = sys.argv[1], sys.argv[2]
N_LAYERS, N_EMBD, N_EXPERTS, TOP_K, N_VOCAB = (int(a) for a in sys.argv[3:8])
OUT = sys.argv[8]
ENV = os.environ
EPS = [int(e) for e in ENV.get("EPS", "2 4").split()]
FORMS = ENV.get("FORMS", "all_reduce eplb all_to_all").split()
NET = ENV.get("NET", "10g")
CONCURRENCY, REQUESTS = int(ENV.get("CONCURRENCY", "16")), int(ENV.get("REQUESTS", "32"))
PROMPT, MAX_TOKENS, SLOTS = int(ENV.get("PROMPT_TOKENS", "32")), int(ENV.get("MAX_TOKENS", "64")), int(ENV.get("SLOTS", "4"))
KV_MB = int(ENV.get("KV_MB", "256"))
TAG = f"cmh{os.getpid() % 100000}"


def parallel_of(ep, form):
    extra = {"all_reduce": "", "eplb": f", redundant_experts: {SLOTS}, eplb_interval_steps: 20",
             "all_to_all": ", expert_comm: all_to_all"}[form]
    return f"{{pipeline: 1, tensor: {ep}, expert: true{extra}}}"


def model_bytes(ep, form, sampled_share):
    """Data-plane bytes the form's collectives move, all ranks together, f32 activations, as
    (per layer and processed token, per processed token in all). A ring all-reduce of d
    floats over R ranks sends 2 (R - 1) d floats in all; the all-reduce form runs two per
    layer (attention output, MoE), one per token for the vocab-parallel embedding, and
    all-gathers each sampled row's logits ((R - 1) R ceil(V / R) floats; `sampled_share` of
    the processed tokens are sampled rows). The all-to-all form sends a token's row once to
    each other rank holding one of its top-k experts (expected 1 - (1 - 1/R)^k of the R - 1
    others, experts evenly spread) and one row back, plus 12 bytes per (token, expert) pair
    sent away; its embedding and head are whole on every rank. Per-step counts and message
    headers are left out."""
    d = 4 * N_EMBD
    if form == "all_to_all":
        remote_ranks = (ep - 1) * (1 - (1 - 1 / ep) ** TOP_K)
        layer = 2 * remote_ranks * d + 12 * TOP_K * (ep - 1) / ep
        return layer, N_LAYERS * layer
    layer = 2 * 2 * (ep - 1) * d
    logits = (ep - 1) * ep * -(-N_VOCAB // ep) * 4
    return layer, N_LAYERS * layer + 2 * (ep - 1) * d + sampled_share * logits


def run(hosts, ep, form, tmp):
    cluster = HostCluster(hosts, BIN, tmp, f"ep{ep}-{form}", MODEL, parallel_of(ep, form), [1] * ep,
                          f"scheduler: {{max_num_seqs: 32, kv_cache_mb: {KV_MB}, prefix_caching: false}}\n")
    try:
        cluster.bench(CONCURRENCY, CONCURRENCY, PROMPT, 16)  # Warm-up (and EPLB's first loads).
        tx0, ss0 = hosts.tx_bytes(), [hosts.socket_bytes(i) for i in range(hosts.n)]
        report = cluster.bench(CONCURRENCY, REQUESTS, PROMPT, MAX_TOKENS, os.path.join(tmp, f"ep{ep}-{form}.json"))
        tx1, ss1 = hosts.tx_bytes(), [hosts.socket_bytes(i) for i in range(hosts.n)]
        status = cluster.client("status", "--server", cluster.address).stdout
    finally:
        cluster.stop()
    processed = REQUESTS * PROMPT + report["output_tokens"]
    data = cluster.data_plane_bytes(ss0, ss1)
    per_layer, per_token = model_bytes(ep, form, report["output_tokens"] / processed)
    row = {"ep": ep, "form": form, "parallel": parallel_of(ep, form), "report": report, "processed_tokens": processed,
           "link_tx_bytes_per_token": [(b - a) / processed for a, b in zip(tx0, tx1)],
           "data_plane_bytes_per_token": data / processed, "model_bytes_per_token": per_token,
           "model_bytes_per_layer_token": per_layer,
           "expert_load_max_mean": max([float(m) for m in re.findall(r"max/mean ([\d.]+)", status)] or [0]),
           "rank_imbalance": [[float(a), float(b)] for a, b in
                              re.findall(r"busiest rank over the mean ([\d.]+) -> ([\d.]+)", status)]}
    print(f"  EP={ep} {form:10} {report['throughput_tok_s']:7.1f} tok/s  TPOT p50 {report['tpot_ms']['p50']:6.1f} ms  "
          f"data plane {data / processed:.0f} B per token (model {per_token:.0f}; per layer {per_layer:.0f})  link B/token "
          + " / ".join(f"{b:.0f}" for b in row["link_tx_bytes_per_token"]), flush=True)
    return row


def print_table(rows):
    print(f"\n## Expert parallelism across hosts: one worker per host ({NET} links), concurrency {CONCURRENCY}, "
          f"{REQUESTS} requests of {PROMPT} + {MAX_TOKENS} tokens, 1 thread per worker\n")
    print("| EP | form | throughput tok/s | over all_reduce | TPOT p50 ms | data plane B per processed token: measured "
          "(model) | measured over all_reduce | model B per layer and token | model over all_reduce "
          "| link tx B per token, all hosts | busiest rank over the mean (EPLB) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        base = next((b for b in rows if b["ep"] == r["ep"] and b["form"] == "all_reduce"), r)
        imb = max(r["rank_imbalance"], key=lambda ba: ba[0]) if r["rank_imbalance"] else None
        print(f"| {r['ep']} | {r['form']} | {r['report']['throughput_tok_s']:.1f} "
              f"| {r['report']['throughput_tok_s'] / base['report']['throughput_tok_s']:.2f}x "
              f"| {r['report']['tpot_ms']['p50']:.1f} | {r['data_plane_bytes_per_token']:.0f} "
              f"({r['model_bytes_per_token']:.0f}) "
              f"| {r['data_plane_bytes_per_token'] / base['data_plane_bytes_per_token']:.3f} "
              f"| {r['model_bytes_per_layer_token']:.0f} "
              f"| {r['model_bytes_per_layer_token'] / base['model_bytes_per_layer_token']:.3f} "
              f"| {sum(r['link_tx_bytes_per_token']):.0f} | {f'{imb[0]:.2f} -> {imb[1]:.2f}' if imb else '-'} |")


def main():
    if os.geteuid() != 0:
        raise SystemExit("bench_moe_hosts: network namespaces need root")
    rows, t0 = [], time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for ep in EPS:
            hosts = None
            try:
                hosts = Hosts(ep, TAG, ENV.get("NFQ_DELAY", ""))
                if NET != "none":
                    hosts.shape(NET)
                for form in FORMS:
                    print(f"== EP={ep} {form} on {ep} hosts", flush=True)
                    rows.append(run(hosts, ep, form, tmp))
            finally:
                if hosts is not None:
                    hosts.close()
    print_table(rows)
    print(f"\nwall {time.time() - t0:.0f} s; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    settings = {"net": NET_SPECS.get(NET, "unshaped"), "concurrency": CONCURRENCY, "requests": REQUESTS, "prompt_tokens": PROMPT,
                "max_tokens": MAX_TOKENS, "slots": SLOTS, "n_layers": N_LAYERS, "n_embd": N_EMBD,
                "n_experts": N_EXPERTS, "top_k": TOP_K, "n_vocab": N_VOCAB}
    json.dump({"settings": settings, "rows": rows}, open(OUT, "w"), indent=1)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    main()
