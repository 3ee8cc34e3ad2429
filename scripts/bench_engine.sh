#!/usr/bin/env bash
# Engine benchmark: prefill (512-token prompt) and decode (128 tokens) tokens/s and peak
# RSS of `cascade run` on SmolLM2-135M-Instruct Q4_1 at 1 and 2 threads, and, in the
# same run, llama.cpp on the same prompt ids where llama-cpp-python is installed
# (venv at $LLAMA_CPP_VENV, default ~/.cache/cascade/golden-venv). Prints a table and
# writes JSON to ${1:-build/bench_engine.json}. Each row is the best of $REPEATS runs.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_engine.json}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
REPEATS=${REPEATS:-3}
VENV=${LLAMA_CPP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/cascade/golden-venv}
[[ -x build/bin/cascade ]] || ./scripts/build.sh >/dev/null
[[ -f $MODEL ]] || ./scripts/setup.sh
PY=python3
[[ -x $VENV/bin/python ]] && "$VENV/bin/python" -c "import llama_cpp" 2>/dev/null && PY=$VENV/bin/python
exec "$PY" - "$MODEL" "$OUT" "$REPEATS" <<'PYEOF'
import json, os, resource, subprocess, sys, time
model, out_path, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
N_PROMPT, N_DECODE = 512, 128
text = " ".join(f"Section {i}: the coordinator plans stages, the workers run layers, and activations flow between them." for i in range(200))
ids = json.loads(subprocess.check_output(["build/bin/cascade", "tokenize", "--model", model, "--text", text, "--json"]))["ids"][:N_PROMPT]
assert len(ids) == N_PROMPT, len(ids)
csv = ",".join(map(str, ids))

def run_cascade(threads):
    best = None
    for _ in range(repeats):
        # Peak RSS of this child alone: run it through a fresh python that reports it.
        cmd = [sys.executable, "-c",
               "import resource,subprocess,sys; r=subprocess.run(sys.argv[1:],capture_output=True,text=True); "
               "print(r.stdout); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(r.returncode)",
               "build/bin/cascade", "run", "--model", model, "--prompt-ids", csv, "--max-tokens", str(N_DECODE),
               "--ignore-eos", "--temperature", "0", "--threads", str(threads), "--json"]
        p = subprocess.run(cmd, capture_output=True, text=True, check=True)
        j = json.loads(p.stdout.strip().splitlines()[0])
        rss_mib = int(p.stderr.strip().splitlines()[-1]) / 1024
        row = {"prefill_tok_s": j["timings"]["prefill_tok_s"], "decode_tok_s": j["timings"]["decode_tok_s"],
               "peak_rss_mib": rss_mib, "n_generated": len(j["token_ids"])}
        if best is None or row["decode_tok_s"] + row["prefill_tok_s"] / 10 > best["decode_tok_s"] + best["prefill_tok_s"] / 10:
            best = row
    return best

def run_llama_cpp(threads):
    try:
        import llama_cpp
    except ImportError:
        return None
    best = None
    for _ in range(repeats):
        llm = llama_cpp.Llama(model_path=model, n_ctx=1024, n_batch=512, n_threads=threads, n_threads_batch=threads, verbose=False)
        import numpy as np
        # Greedy through the C API's logits of the last evaluated token (what llama.cpp's
        # own tools do; no per-token copies of all rows).
        last = lambda: int(np.ctypeslib.as_array(llama_cpp.llama_get_logits(llm.ctx), shape=(llm.n_vocab(),)).argmax())
        t0 = time.perf_counter(); llm.eval(ids); tok = last(); t1 = time.perf_counter()
        t2 = time.perf_counter()
        for _ in range(N_DECODE - 1):
            llm.eval([tok])
            tok = last()
        t3 = time.perf_counter()
        row = {"prefill_tok_s": N_PROMPT / (t1 - t0), "decode_tok_s": (N_DECODE - 1) / (t3 - t2),
               "version": llama_cpp.__version__}
        del llm
        if best is None or row["decode_tok_s"] > best["decode_tok_s"]:
            best = row
    return best

results = {"model": os.path.basename(model), "n_prompt": N_PROMPT, "n_decode": N_DECODE, "repeats": repeats,
           "cpu": open("/proc/cpuinfo").read().split("model name")[1].split(":")[1].split("\n")[0].strip(),
           "rows": []}
for threads in (1, 2):
    results["rows"].append({"engine": "cascade", "threads": threads, **run_cascade(threads)})
    ref = run_llama_cpp(threads)
    if ref:
        results["rows"].append({"engine": "llama.cpp", "threads": threads, **ref})

print(f"{'engine':<10} {'thr':>3} {'prefill tok/s':>14} {'decode tok/s':>13} {'peak RSS MiB':>13}")
for r in results["rows"]:
    rss = f"{r['peak_rss_mib']:.0f}" if "peak_rss_mib" in r else "-"
    print(f"{r['engine']:<10} {r['threads']:>3} {r['prefill_tok_s']:>14.1f} {r['decode_tok_s']:>13.1f} {rss:>13}")
by = {(r["engine"], r["threads"]): r for r in results["rows"]}
for t in (1, 2):
    if ("llama.cpp", t) in by:
        c, l = by[("cascade", t)], by[("llama.cpp", t)]
        print(f"ratio cascade/llama.cpp, {t} thread(s): prefill {c['prefill_tok_s']/l['prefill_tok_s']:.2f}x, decode {c['decode_tok_s']/l['decode_tok_s']:.2f}x")
os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
json.dump(results, open(out_path, "w"), indent=1)
print(f"wrote {out_path}")
PYEOF
