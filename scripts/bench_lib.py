"""Helpers the benchmark scripts share (scripts/bench_scale.sh, scripts/bench_moe.sh):
Cascade's single-process run and llama.cpp's llama-bench on one model, each with the peak
RSS of its own process. Run from the repository root."""
import json
import os
import random
import resource  # noqa: F401  (used by the child wrapper below)
import subprocess
import sys


def rss_run(cmd):
    """Runs cmd; returns (stdout, peak RSS MiB) of that child alone."""
    wrap = [sys.executable, "-c",
            "import resource,subprocess,sys; r=subprocess.run(sys.argv[1:],capture_output=True,text=True); "
            "sys.stdout.write(r.stdout); sys.stderr.write(r.stderr); "
            "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
            "sys.exit(r.returncode)"] + cmd
    p = subprocess.run(wrap, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd[:4])} failed:\n{p.stderr[-2000:]}")
    kb = int([l for l in p.stderr.splitlines() if l.startswith("PEAK_RSS_KB")][-1].split()[1])
    return p.stdout, kb / 1024


def read_probe(threads, out_dir, quiet=False):
    """build/bin/read_bandwidth up to max(threads): {threads: GB/s}, printed unless quiet; its
    JSON goes to out_dir/read_bandwidth.json."""
    probe_json = os.path.join(out_dir, "read_bandwidth.json")
    subprocess.run(["build/bin/read_bandwidth", f"--threads={max(threads)}", f"--json={probe_json}"], check=True,
                   capture_output=True)
    with open(probe_json) as f:
        bw = {int(k): v for k, v in json.load(f)["threads"].items()}
    if not quiet:
        print("read bandwidth probe: " + ", ".join(f"{t} thread(s) {bw[t]:.1f} GB/s" for t in threads), flush=True)
    return bw


def prompt_ids(n, seed=1):
    """n random token ids of SmolLM2's vocabulary (llama-bench's prompts are random too)."""
    rng = random.Random(seed)
    return ",".join(str(rng.randrange(100, 40000)) for _ in range(n))


def cascade_run(model, n_prompt, n_decode, threads, repeats=1, extra=()):
    """`cascade run` (with the flags `extra`) prefill and decode tok/s (the best of `repeats`
    by decode), peak RSS, and the run's JSON (expert load on MoE models)."""
    best = None
    for _ in range(repeats):
        out, rss = rss_run(["build/bin/cascade", "run", "--model", model, "--prompt-ids", prompt_ids(n_prompt),
                            "--max-tokens", str(n_decode), "--ignore-eos", "--temperature", "0", "--threads",
                            str(threads), "--json", *extra])
        j = json.loads(out.strip().splitlines()[-1])
        row = {"prefill": j["timings"]["prefill_tok_s"], "decode": j["timings"]["decode_tok_s"], "rss_mib": rss,
               "json": j}
        if best is None or row["decode"] > best["decode"]:
            best = row
    return best


def llama_bench(llama_bin, model, n_prompt, n_decode, threads, repeats=2):
    """llama-bench's prefill (-p) and decode (-n) tok/s, the best of its repetitions (as
    cascade_run keeps its best run: a shared VM's noise only ever slows a run down), with
    the mean beside it, and peak RSS."""
    out, rss = rss_run([f"{llama_bin}/llama-bench", "-m", model, "-p", str(n_prompt), "-n", str(n_decode), "-t",
                        str(threads), "-r", str(max(repeats, 2)), "-o", "json"])
    rows = json.loads(out)
    pp = [r for r in rows if r["n_prompt"] > 0][0]
    tg = [r for r in rows if r["n_gen"] > 0][0]
    best = lambda r: max(r.get("samples_ts") or [r["avg_ts"]])  # noqa: E731
    return {"prefill": best(pp), "decode": best(tg), "prefill_mean": pp["avg_ts"], "decode_mean": tg["avg_ts"],
            "rss_mib": rss}
