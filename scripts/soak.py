#!/usr/bin/env python3
"""Soak of a real cluster through its HTTP front: N streamed /v1/completions requests, C at
a time, a share of them cancelled at a random point (the client closes its connection),
half greedy and half sampled with a seed. Run twice on fresh clusters: once undisturbed
(the reference), once with workers killed by SIGKILL at random moments. Every request
that was not cancelled must succeed, none may hang, no KV block may stay held, and every
completed request's text must equal the undisturbed run's (greedy and seeded alike:
recovery recomputes KV and the sampler's draws are keyed by position).

Usage: soak.py BIN_DIR MODEL OUT.json [--requests N] [--concurrency C] [--cancel 0.2]
                [--kills 2] [--max-tokens M] [--pipeline 2]
Prints a table; exits 1 when a check fails.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time


def start(bin_dir, model, pipeline, d):
    cfg = os.path.join(d, "soak.yaml")
    with open(cfg, "w") as f:
        f.write(f"model: {{path: {model}}}\n"
                f"parallel: {{pipeline: {pipeline}, tensor: 1}}\n"
                f"nodes: [{{name: n0, host: 127.0.0.1, devices: [{', '.join(['cpu'] * pipeline)}], launch: local}}]\n"
                "server: {listen: 127.0.0.1:0, http_listen: 127.0.0.1:0, http_threads: 160, recovery_timeout_s: 60}\n"
                "scheduler: {max_num_seqs: 64, max_batched_tokens: 1024, kv_block_size: 16, kv_cache_mb: 64}\n")
    log_path = os.path.join(d, f"coordinator-{time.time():.0f}.log")
    log = open(log_path, "w")
    proc = subprocess.Popen([os.path.join(bin_dir, "cascade-coordinator"), "--config", cfg], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    for _ in range(1200):
        text = open(log_path).read()
        m = re.search(r"http front on (\S+)", text)
        if m and "ready on" in text:
            return proc, m.group(1), log_path
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit(f"soak: the cluster did not start:\n{open(log_path).read()}")


def metric(address, name):
    host, port = address.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def one(address, spec, cancel_after):
    """Streams one request; ("ok", text) | ("cancelled", None) | ("failed", why)."""
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request("POST", "/v1/completions", json.dumps({**spec, "stream": True}), {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return "failed", f"HTTP {r.status}: {r.read()[:300]!r}"
        text, chunks = [], 0
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                return "ok", "".join(text)
            event = json.loads(line[6:])
            if "error" in event:
                return "failed", event["error"]["message"]
            for choice in event.get("choices", []):
                text.append(choice.get("text") or "")
            chunks += 1
            if cancel_after is not None and chunks >= cancel_after:
                return "cancelled", None
        return "failed", "the stream ended without [DONE]"
    except Exception as e:  # noqa: BLE001 - a failure to report, whatever it is.
        return "failed", repr(e)
    finally:
        conn.close()


def run(a, kills):
    rng = random.Random(7)
    specs, cancels = [], []
    for i in range(a.requests):
        greedy = i % 2 == 0
        prompt = [1] + [rng.randrange(3, 500) for _ in range(rng.randrange(4, 40))]
        specs.append({"prompt": prompt, "max_tokens": a.max_tokens, "ignore_eos": True,
                      "temperature": 0 if greedy else 0.9, "seed": 1000 + i})
        cancels.append(rng.randrange(1, a.max_tokens) if rng.random() < a.cancel else None)
    with tempfile.TemporaryDirectory() as d:
        proc, address, log_path = start(a.bin, a.model, a.pipeline, d)
        killed = []
        finished = [0]  # Requests ended so far (the killer strikes at a share of them).
        t0 = time.time()

        def killer():
            krng = random.Random(11)
            for k in range(kills):
                # The first death a quarter of the way in, the next ones later, each at a
                # random point of its window.
                at = a.requests * krng.uniform(0.15 + 0.45 * k / kills, 0.3 + 0.45 * k / kills)
                while finished[0] < at:
                    time.sleep(0.01)
                workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
                if not workers:
                    continue
                victim = workers[krng.randrange(len(workers))]
                os.kill(int(victim), signal.SIGKILL)
                killed.append((round(time.time() - t0, 2), int(victim)))

        def counted(spec, cancel_after):
            out = one(address, spec, cancel_after)
            finished[0] += 1
            return out
        kt = threading.Thread(target=killer)
        kt.start()
        with concurrent.futures.ThreadPoolExecutor(a.concurrency) as pool:
            futures = [pool.submit(counted, s, c) for s, c in zip(specs, cancels)]
            done, hung = concurrent.futures.wait(futures, timeout=600)
        kt.join()
        wall = time.time() - t0
        results = [f.result() if f in done else ("hung", None) for f in futures]
        time.sleep(0.5)
        used = metric(address, "cascade_kv_blocks_used")
        running = metric(address, "cascade_running_sequences")
        waiting = metric(address, "cascade_waiting_sequences")
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        log = open(log_path).read()
        recoveries = log.count("resuming")
        with open(f"{a.out}.{'kills' if kills else 'reference'}.log", "w") as f:
            f.write(log)  # Kept beside the JSON: what the coordinator saw.
    return {"results": results, "wall_s": wall, "kills": killed, "kv_blocks_used_after": used,
            "running_after": running, "waiting_after": waiting, "recoveries": recoveries}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("model")
    p.add_argument("out")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--cancel", type=float, default=0.2)
    p.add_argument("--kills", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--pipeline", type=int, default=2)
    a = p.parse_args()
    if not os.path.exists(a.model):
        print(f"SKIP: no model at {a.model}")
        return
    reference = run(a, kills=0)
    soak = run(a, kills=a.kills)
    rows, ok = [], True
    for name, r in (("no kills", reference), (f"{a.kills} kills", soak)):
        kinds = [k for k, _ in r["results"]]
        rows.append({"run": name, "requests": a.requests, "completed": kinds.count("ok"),
                     "cancelled": kinds.count("cancelled"), "failed": kinds.count("failed"), "hung": kinds.count("hung"),
                     "kv_blocks_used_after": r["kv_blocks_used_after"], "wall_s": round(r["wall_s"], 1),
                     "kills": r["kills"], "recoveries": r["recoveries"]})
    mismatched = [i for i, ((k1, t1), (k2, t2)) in enumerate(zip(reference["results"], soak["results"]))
                  if k1 == "ok" and k2 == "ok" and t1 != t2]
    for row in rows:
        ok = ok and row["failed"] == 0 and row["hung"] == 0 and row["kv_blocks_used_after"] == 0
    failures = [why for r in (reference, soak) for k, why in r["results"] if k == "failed"]
    ok = ok and not mismatched and len(soak["kills"]) == a.kills
    print(f"{a.requests} requests at concurrency {a.concurrency}, {a.cancel:.0%} cancelled at random points, "
          f"{a.max_tokens} tokens each, PP={a.pipeline}, {os.path.basename(a.model)}\n")
    print("| run | completed | cancelled | failed | hung | KV blocks held after | wall s | kills (s, pid) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['run']} | {r['completed']} | {r['cancelled']} | {r['failed']} | {r['hung']} | "
              f"{r['kv_blocks_used_after']:.0f} | {r['wall_s']} | {r['kills']} |")
    compared = sum(1 for (k1, _), (k2, _) in zip(reference["results"], soak["results"]) if k1 == k2 == "ok")
    print(f"\n{compared} requests completed in both runs; texts differing: {len(mismatched)}")
    for why in failures[:5]:
        print(f"failed: {why}")
    json.dump({"rows": rows, "compared": compared, "mismatched": mismatched, "failures": failures[:20]},
              open(a.out, "w"), indent=1)
    print(f"wrote {a.out}: {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
