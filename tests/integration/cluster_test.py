#!/usr/bin/env python3
"""Integration tests of a real cluster: a real `cascade-coordinator` on a loopback port,
real `cascade-worker` processes it launches, UCX between the stages, and the `cascade`
CLI as the client. References are `cascade run` (one process) and, through it, the
independent references of the engine tests.

Usage: cluster_test.py BUILD_BIN_DIR TEST_NAME (one ctest per test; see CMakeLists.txt).
Tests needing ../shared/testdata or the default model print SKIP when they are absent.
To add a test, write `test_<name>` and list it in CMakeLists.txt.
"""
import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

BIN = sys.argv[1]
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testdata import ROOT, SMOL, STORIES, STORIES_IDS, TINY_GGUF, TINY_HF, as_transformers5, hf_copy, need  # noqa: E402
CASCADE = os.path.join(BIN, "cascade")
COORDINATOR = os.path.join(BIN, "cascade-coordinator")


def config_yaml(model, pipeline, kv_cache_mb=64, max_num_seqs=32, extra="", tensor=1, kv_cache_dtype="f16",
                prefix_caching=True, data=1, route_by_prefix=False):
    return (f"model: {{path: {model}}}\n"
            f"parallel: {{data: {data}, route_by_prefix: {'true' if route_by_prefix else 'false'},"
            f" pipeline: {pipeline}, tensor: {tensor}}}\n"
            f"nodes:\n  - {{name: n0, host: 127.0.0.1, devices: [{', '.join(['cpu'] * data * pipeline * tensor)}],"
            " launch: local}\n"
            f"server: {{listen: 127.0.0.1:0}}\n"
            f"scheduler: {{max_num_seqs: {max_num_seqs}, max_batched_tokens: 1024, kv_block_size: 16, kv_cache_mb: {kv_cache_mb},"
            f" kv_cache_dtype: {kv_cache_dtype}, prefix_caching: {'true' if prefix_caching else 'false'}}}\n"
            + extra)


@contextlib.contextmanager
def cluster(model, pipeline, **kw):
    with cluster_from_yaml(config_yaml(model, pipeline, **kw)) as c:
        yield c


@contextlib.contextmanager
def cluster_from_yaml(text):
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "cluster.yaml")
        with open(cfg, "w") as f:
            f.write(text)
        log_path = os.path.join(d, "coordinator.log")
        log = open(log_path, "w")
        proc = subprocess.Popen([COORDINATOR, "--config", cfg], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        address = None
        deadline = time.time() + 120
        while time.time() < deadline and address is None:
            time.sleep(0.1)
            text = open(log_path).read()
            m = re.search(r"ready on (\S+)", text)
            if m:
                address = m.group(1)
            if proc.poll() is not None:
                raise AssertionError(f"coordinator exited with {proc.returncode}:\n{text}")
        assert address, "coordinator not ready in 120 s:\n" + open(log_path).read()
        try:
            yield address, proc, log_path
        finally:
            stop(proc)
            log.close()


def run_json(*args):
    p = subprocess.run([CASCADE, *args, "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"cascade {' '.join(args)}: {p.stderr}"
    return json.loads(p.stdout)


def stop(proc):
    """SIGTERM to the process group, SIGKILL after 10 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:  # Exited already (a test stopped it), workers with it.
        proc.wait()
        return
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def generate(address, *args, expect_rc=0):
    p = subprocess.run([CASCADE, "generate", "--server", address, *args, "--json"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == expect_rc, f"generate {' '.join(args)}: rc {p.returncode}: {p.stderr}"
    return json.loads(p.stdout) if expect_rc == 0 else p.stderr


def status(address):
    p = subprocess.run([CASCADE, "status", "--server", address, "--wait", "0"], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def check_parity(model, prompts, pipelines, n_tokens, tensors=(1,)):
    """Greedy ids through the cluster equal `cascade run` for every prompt and TP x PP."""
    local = {}
    for prompt in prompts:
        local[prompt] = run_json("run", "--model", model, *prompt, "--temperature", "0", "--max-tokens", str(n_tokens),
                                 "--ignore-eos")["token_ids"]
    for tp in tensors:
        for pp in pipelines:
            with cluster(model, pp, tensor=tp) as (address, _, _):
                for prompt in prompts:
                    got = generate(address, *prompt, "--temperature", "0", "--max-tokens", str(n_tokens), "--ignore-eos")
                    assert got["token_ids"] == local[prompt], f"TP={tp} PP={pp} {prompt}: {got['token_ids']} != {local[prompt]}"
            print(f"TP={tp} PP={pp}: {len(prompts)} prompts identical to cascade run")


def test_parity_stories():
    need(STORIES)
    prompts = [("--prompt-ids", "1"), ("--prompt", "Once upon a time"), ("--prompt", "The cat sat on the mat and")]
    check_parity(STORIES, prompts, [1, 2, 3], 40)
    # And the README's independent reference through PP=3.
    with cluster(STORIES, 3) as (address, _, _):
        got = generate(address, "--prompt-ids", "1", "--temperature", "0", "--max-tokens", "20")
        assert got["token_ids"] == [403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401,
                                    396, 267, 337], got


def test_parity_tinystories():
    need(TINY_HF, TINY_GGUF)
    prompts = [("--prompt-ids", "1"), ("--prompt", "Lily and Ben went to the park")]
    for model in (TINY_HF, TINY_GGUF):  # Two layers: PP = 1, 2.
        check_parity(model, prompts, [1, 2], 32)


def write_gptq(src, dst):
    """tinystories-656k (F32 safetensors) quantized round-to-nearest to 4 bits in groups of
    128 and packed as AutoGPTQ writes it (v1 format: qweight [in/8, out] with input 8r+k of
    output o in nibble k, qzeros [groups, out/8] holding zero - 1, f16 scales); written here
    in plain Python, independently of the C++ loader."""
    import array
    import struct
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}  # name -> (dtype, shape, bytes)
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        data = raw[base + a:base + b]
        if not name.endswith("_proj.weight"):
            out[name] = (t["dtype"], t["shape"], data)
            continue
        n_out, n_in = t["shape"]
        w = array.array("f", data)
        groups = n_in // 128
        q = [0] * (n_out * n_in)
        scales = [0.0] * (groups * n_out)
        zeros = [0] * (groups * n_out)
        for o in range(n_out):
            for g in range(groups):
                row = w[o * n_in + g * 128:o * n_in + g * 128 + 128]
                lo, hi = min(min(row), 0.0), max(max(row), 0.0)
                d = struct.unpack("<e", struct.pack("<e", max((hi - lo) / 15, 1e-6)))[0]
                z = min(max(round(-lo / d), 1), 15)  # v1 cannot store a zero of 0.
                scales[g * n_out + o] = d
                zeros[g * n_out + o] = z
                for i, x in enumerate(row):
                    q[o * n_in + g * 128 + i] = min(max(round(x / d) + z, 0), 15)
        qweight = array.array("i", [0] * (n_in // 8 * n_out))
        for r in range(n_in // 8):
            for o in range(n_out):
                word = 0
                for k in range(8):
                    word |= q[o * n_in + 8 * r + k] << (4 * k)
                qweight[r * n_out + o] = word - (1 << 32) if word >= 1 << 31 else word
        qzeros = array.array("i", [0] * (groups * n_out // 8))
        for g in range(groups):
            for c in range(n_out // 8):
                word = 0
                for k in range(8):
                    word |= (zeros[g * n_out + 8 * c + k] - 1) << (4 * k)
                qzeros[g * (n_out // 8) + c] = word - (1 << 32) if word >= 1 << 31 else word
        p = name[:-len(".weight")]
        out[p + ".qweight"] = ("I32", [n_in // 8, n_out], qweight.tobytes())
        out[p + ".qzeros"] = ("I32", [groups, n_out // 8], qzeros.tobytes())
        out[p + ".scales"] = ("F16", [groups, n_out], struct.pack(f"<{len(scales)}e", *scales))
        out[p + ".g_idx"] = ("I32", [n_in], array.array("i", [i // 128 for i in range(n_in)]).tobytes())
    new_header, blob = {}, b""
    for name in sorted(out, key=lambda k: out[k][0] == "F16"):  # 4-byte types first: all aligned.
        dtype, shape, data = out[name]
        new_header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    text = json.dumps(new_header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob)
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False,
                                     "sym": False, "checkpoint_format": "gptq"}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f)
    for name in os.listdir(src):
        if name.startswith("tokenizer") or name in ("special_tokens_map.json", "generation_config.json"):
            shutil.copy(os.path.join(src, name), dst)


def test_parity_gptq():
    """A GPTQ 4-bit checkpoint served by the cluster (workers repack it at load, PP=1 and 2)
    gives `cascade run`'s greedy ids; the INT4 path really ran (I4_G128 weights reported)."""
    need(TINY_HF)
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tinystories-gptq")
        write_gptq(TINY_HF, model)
        info = run_json("info", "--model", model, "--json")
        assert "i4_g128" in json.dumps(info), info
        check_parity(model, [("--prompt-ids", "1"), ("--prompt", "Lily and Ben went to the park")], [1, 2], 32)


def test_parity_smollm2():
    need(SMOL)
    prompts = [("--chat", "What is the capital of France?"), ("--prompt", "The quick brown fox"),
               ("--prompt", "def fibonacci(n):")]
    check_parity(SMOL, prompts, [1, 2, 3], 24)


def test_kv_cache_dtypes():
    """scheduler.kv_cache_dtype end to end: the same 8 MiB budget holds 2x the blocks in f16
    128/34x in q8_0 and 4x in fp8_e4m3 (each block's bytes halved / 34/128 / a quarter of
    f32's, from `cascade status`), and a 2-stage cluster's greedy ids equal `cascade run
    --kv-type` with the same dtype."""
    need(SMOL)
    per_block = {}
    for dtype in ("f32", "f16", "q8_0", "fp8_e4m3"):
        with cluster(SMOL, 2, kv_cache_mb=8, kv_cache_dtype=dtype) as (address, _, _):
            rc, text = status(address)
            assert rc == 0, text
            assert f"block size 16, {dtype})" in text, text
            total = int(re.search(r"kv blocks \d+ free of (\d+)", text).group(1))
            kv_mib = [float(m) for m in re.findall(r"MiB +([0-9.]+) MiB", text)]
            assert len(kv_mib) == 2, text
            per_block[dtype] = max(kv_mib) * 1048576 / total
            got = generate(address, "--prompt", "The quick brown fox", "--temperature", "0", "--max-tokens", "16",
                           "--ignore-eos")["token_ids"]
        local = run_json("run", "--model", SMOL, "--prompt", "The quick brown fox", "--temperature", "0",
                         "--max-tokens", "16", "--ignore-eos", "--kv-type", dtype)
        assert local["kv_cache"]["dtype"] == dtype, local["kv_cache"]
        assert got == local["token_ids"], f"{dtype}: cluster {got} != local {local['token_ids']}"
        print(f"kv {dtype}: {total} blocks in 8 MiB per stage, {per_block[dtype]:.0f} bytes per block (stage of 15 layers)")
    assert abs(per_block["f16"] / per_block["f32"] - 0.5) < 0.01, per_block
    assert abs(per_block["q8_0"] / per_block["f32"] - 34 / 128) < 0.01, per_block
    assert abs(per_block["fp8_e4m3"] / per_block["f32"] - 1 / 4) < 0.01, per_block


def test_tp_parity_stories():
    need(STORIES)
    # 8 heads / 4 KV heads: TP=3 splits unevenly, TP=4 gives one KV head per rank.
    check_parity(STORIES, [("--prompt-ids", "1"), ("--prompt", "Once upon a time")], [1, 2], 32, tensors=(2, 3, 4))


def test_tp_parity_tinystories():
    need(TINY_HF, TINY_GGUF)
    for model in (TINY_HF, TINY_GGUF):
        check_parity(model, [("--prompt-ids", "1")], [1, 2], 24, tensors=(2, 4))


def test_transformers5_checkpoint():
    """TinyStories-656k given a RoPE base of 1e6 (as Qwen and Mistral have), saved the way
    transformers 4.x writes config.json and the way 5.x does (rope_parameters, dtype): a
    TP 2 x PP 2 cluster on the 5.x copy gives the greedy ids of `cascade run` on the 4.x copy
    (the engine tests hold both layouts to the float64 forward), and those differ from the
    base-10000 model's, so a base read wrongly (issue 27: defaulted to 10000) would fail."""
    need(TINY_HF)

    def base_1e6(config):
        config["rope_theta"] = 1e6

    with tempfile.TemporaryDirectory() as d:
        v4 = hf_copy(TINY_HF, os.path.join(d, "v4"), base_1e6)
        v5 = hf_copy(TINY_HF, os.path.join(d, "v5"), lambda c: (base_1e6(c), as_transformers5(c)))
        assert "rope_theta" not in json.load(open(os.path.join(v5, "config.json")))
        args = ("--prompt", "Lily and Ben went to the park", "--temperature", "0", "--max-tokens", "32", "--ignore-eos")
        ref = run_json("run", "--model", v4, *args)["token_ids"]
        assert ref != run_json("run", "--model", TINY_HF, *args)["token_ids"], "the base must change the ids"
        assert run_json("run", "--model", v5, *args)["token_ids"] == ref
        with cluster(v5, 2, tensor=2) as (address, _, log_path):
            got = generate(address, *args)["token_ids"]
            log = open(log_path).read()
        assert got == ref, f"cluster on the 5.x layout {got} != cascade run on the 4.x layout {ref}"
        # The load log (coordinator and workers share it) says the one key the file omits.
        assert "head_dim = 16 (not in the file: transformers' rule: hidden_size / num_attention_heads)" in log, log
    print("transformers 5 layout: TP 2 x PP 2 cluster identical to cascade run on the 4.x layout")


def test_tp_parity_smollm2():
    """SmolLM2 (9 heads / 3 KV heads: TP=2 splits them 2 + 1) at TP=2 x PP=1, 2.

    Q4_1 weights take 8-bit-quantized activations, and the TP all-reduce sums partial
    products in another order, so a 1e-7 difference can flip one rounding and move logits
    by ~1% through 30 layers (the sharding itself is exact to 2e-7: tests/model/
    tp_transformer_test.cc; TP=2 vs TP=1 logits differ by 2.7e-2 relative L2, the size
    of TP=1's own drift after a 1e-7 nudge to its input). With logits up to ~25 that is
    up to ~0.7 nats on one token. So: ids identical to `cascade run` up to the first
    position where they differ, and there the run's token must be in the cluster's top 5
    and within TIE_NATS of its best (a near-tie at the noise level). A broken shard gives
    unrelated tokens and fails both."""
    need(SMOL)
    TIE_NATS = 1.0
    prompts = [("--chat", "What is the capital of France?"), ("--prompt", "The quick brown fox"),
               ("--prompt", "def fibonacci(n):")]
    n = 24
    local = {p: run_json("run", "--model", SMOL, *p, "--temperature", "0", "--max-tokens", str(n), "--ignore-eos")["token_ids"]
             for p in prompts}
    for pp in (1, 2):
        with cluster(SMOL, pp, tensor=2) as (address, _, _):
            for p in prompts:
                got = generate(address, *p, "--temperature", "0", "--max-tokens", str(n), "--ignore-eos", "--logprobs", "5")
                ids = got["token_ids"]
                same = next((i for i, (a, b) in enumerate(zip(ids, local[p])) if a != b), n)
                if same < n:
                    top = got["logprobs"][same]["top"]
                    mine = {t["id"]: t["logprob"] for t in top}
                    assert local[p][same] in mine, f"TP=2 PP={pp} {p}: position {same}: run's token not in top 5 {top}"
                    gap = top[0]["logprob"] - mine[local[p][same]]
                    assert gap < TIE_NATS, f"TP=2 PP={pp} {p}: diverged at {same} with a gap of {gap:.3f} nats"
                print(f"TP=2 PP={pp} {p[1][:30]!r}: identical for {same}/{n}" + ("" if same == n else f", then a tie"))


def test_pp_handoff_parity():
    """`transport.pp_handoff: full` (every TP rank sends the whole hidden state to its peer,
    no all-gather) against the default `split` at TP=2 x PP=2. Both hand the next stage the
    same hidden states, so ids and logprobs must be equal bit for bit: on stories260K (and
    there equal to `cascade run`) and on SmolLM2 Q4_1 (whose TP ids are not cascade run's
    bit for bit, see test_tp_parity_smollm2, so split is its reference)."""
    need(STORIES, SMOL)
    cases = [(STORIES, [("--prompt-ids", "1"), ("--prompt", "Once upon a time")], 32),
             (SMOL, [("--prompt", "The quick brown fox"), ("--chat", "What is the capital of France?")], 24)]
    for model, prompts, n in cases:
        got = {}
        for handoff in ("split", "full"):
            with cluster(model, 2, tensor=2, extra=f"transport: {{pp_handoff: {handoff}}}\n") as (address, _, log_path):
                log = open(log_path).read()
                # The coordinator says it, and each of the 4 workers took it (their lines reach this log).
                assert f"{handoff} hand-off" in log.split("ready on")[1] and log.count(f", {handoff} hand-off") == 5, log
                got[handoff] = [generate(address, *p, "--temperature", "0", "--max-tokens", str(n), "--ignore-eos",
                                         "--logprobs", "2") for p in prompts]
        for p, split, full in zip(prompts, got["split"], got["full"]):
            assert full["token_ids"] == split["token_ids"], f"{p}: full {full['token_ids']} != split {split['token_ids']}"
            assert full["logprobs"] == split["logprobs"], f"{p}: logprobs differ"
        if model == STORIES:
            for p, split in zip(prompts, got["split"]):
                local = run_json("run", "--model", model, *p, "--temperature", "0", "--max-tokens", str(n),
                                 "--ignore-eos")["token_ids"]
                assert split["token_ids"] == local, f"{p}: TP=2 x PP=2 {split['token_ids']} != cascade run {local}"
        print(f"{os.path.basename(model)}: TP=2 x PP=2, full and split hand-offs give the same ids and logprobs"
              f" for {len(prompts)} prompts")


def test_chat_session():
    """`cascade chat`: two turns typed on stdin, answers streamed, history kept."""
    need(SMOL)
    with cluster(SMOL, 1) as (address, _, _):
        p = subprocess.run([CASCADE, "chat", "--server", address, "--system", "You are a helpful assistant.",
                            "--temperature", "0", "--max-tokens", "24"],
                           input="What is the capital of France? Answer in English.\nAnd of Italy?\n\n", capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        answers = [line for line in p.stdout.splitlines() if line.strip()]
        assert len(answers) >= 2 and "Paris" in answers[0], p.stdout
        assert "Rome" in p.stdout, p.stdout  # The second turn saw the first.


def test_concurrent_streams():
    need(STORIES)
    with cluster(STORIES, 2, max_num_seqs=16) as (address, _, _):
        reqs = []
        for i in range(16):
            n = 8 + (i * 7) % 50
            if i % 2 == 0:
                reqs.append(("--prompt", f"Once upon a time {i}", "--temperature", "0", "--max-tokens", str(n), "--ignore-eos"))
            else:
                reqs.append(("--prompt-ids", "1", "--temperature", "1.0", "--top-k", "20", "--seed", str(i),
                             "--max-tokens", str(n), "--ignore-eos"))
        alone = {r: generate(address, *r)["token_ids"] for r in reqs}
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            together = dict(zip(reqs, ex.map(lambda r: generate(address, *r)["token_ids"], reqs)))
        for r in reqs:
            assert len(together[r]) == int(r[r.index("--max-tokens") + 1]), r
            if "0" == r[r.index("--temperature") + 1]:
                assert together[r] == alone[r], f"{r}: batched {together[r]} != alone {alone[r]}"
        rc, text = status(address)
        assert rc == 0, text
        m = re.search(r"kv blocks (\d+) free of (\d+)", text)
        assert m and m.group(1) == m.group(2), text
        batch = int(re.search(r"largest batch (\d+)", text).group(1))
        assert batch > 1, text
        print(f"16 concurrent requests finished; largest batch {batch}; all KV blocks free")


def test_invalid_requests():
    need(STORIES)
    with cluster(STORIES, 2, kv_cache_mb=1) as (address, _, _):
        err = generate(address, "--prompt-ids", "1", "--top-p", "0", expect_rc=2)
        assert "INVALID_ARGUMENT" in err and "top_p" in err, err
        err = generate(address, "--prompt-ids", "1", "--temperature", "-1", expect_rc=2)
        assert "INVALID_ARGUMENT" in err and "temperature" in err, err
        err = generate(address, "--prompt-ids", "1", "--max-tokens", "0", expect_rc=2)
        assert "INVALID_ARGUMENT" in err and "max_tokens" in err, err
        err = generate(address, "--prompt-ids", "1,100000", expect_rc=2)
        assert "INVALID_ARGUMENT" in err and "prompt" in err, err
        long_prompt = ",".join(["1"] * 5000)
        err = generate(address, "--prompt-ids", long_prompt, expect_rc=2)
        assert "INVALID_ARGUMENT" in err and "prompt" in err and "context" in err, err
        # The cluster still serves after rejecting them.
        assert generate(address, "--prompt-ids", "1", "--max-tokens", "3")["finish_reason"] == "length"


def test_deadline_and_cancel():
    # Streams that must outlast a 1 s deadline and a 1 s wait: SmolLM2's 2047 tokens take
    # seconds (12.6 s on a 2-core Zen 5 VM), where stories260K's ran out in 0.86 s there
    # (rc 0 instead of DEADLINE_EXCEEDED).
    need(SMOL)
    with cluster(SMOL, 2) as (address, _, _):
        # A 1-second deadline on a long request: DEADLINE_EXCEEDED, blocks freed at once.
        p = subprocess.run([CASCADE, "generate", "--server", address, "--prompt-ids", "1", "--temperature", "0",
                            "--max-tokens", str(LONGEST_STREAM), "--ignore-eos", "--timeout", "1"], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 2 and "DEADLINE_EXCEEDED" in p.stderr, (p.returncode, p.stderr)
        # A client that goes away mid-stream (killed) cancels its request.
        stream = subprocess.Popen([CASCADE, "generate", "--server", address, "--prompt-ids", "1", "--temperature", "0",
                                   "--max-tokens", str(LONGEST_STREAM), "--ignore-eos"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        stream.kill()
        stream.wait()
        deadline = time.time() + 5
        while time.time() < deadline:
            rc, text = status(address)
            m = re.search(r"kv blocks (\d+) free of (\d+)", text)
            if m and m.group(1) == m.group(2) and "running 0" in text:
                break
            time.sleep(0.2)
        assert m and m.group(1) == m.group(2) and "running 0" in text, text
        assert generate(address, "--prompt-ids", "1", "--max-tokens", "3")["finish_reason"] == "length"


def netns_or_skip():
    """Two namespaces joined by a veth pair, 10.77.0.1 (A) and 10.77.0.2 (B)."""
    if shutil.which("ip") is None:
        print("SKIP: no `ip` command (iproute2) to build network namespaces")
        sys.exit(0)
    tag = f"c{os.getpid() % 100000}"
    a, b = f"{tag}a", f"{tag}b"
    cmds = [f"ip netns add {a}", f"ip netns add {b}",
            f"ip link add {tag}va type veth peer name {tag}vb",
            f"ip link set {tag}va netns {a}", f"ip link set {tag}vb netns {b}",
            f"ip netns exec {a} ip addr add 10.77.0.1/24 dev {tag}va", f"ip netns exec {b} ip addr add 10.77.0.2/24 dev {tag}vb",
            f"ip netns exec {a} ip link set {tag}va up", f"ip netns exec {b} ip link set {tag}vb up",
            f"ip netns exec {a} ip link set lo up", f"ip netns exec {b} ip link set lo up"]
    for c in cmds:
        p = subprocess.run(c.split(), capture_output=True, text=True)
        if p.returncode != 0:
            subprocess.run(["ip", "netns", "del", a], capture_output=True)
            subprocess.run(["ip", "netns", "del", b], capture_output=True)
            print(f"SKIP: cannot build two network namespaces here ({c}: {p.stderr.strip()})")
            sys.exit(0)
    return a, b


def test_two_nodes():
    """PP=2 and TP=2 x PP=2 across two network namespaces: stage 0 on node A (launched by
    the coordinator), stage 1 on node B (external workers), UCX over TCP between them."""
    need(STORIES)
    for tp in (1, 2):
        two_nodes(tp)


@contextlib.contextmanager
def two_namespace_cluster(model, parallel, devices_a, devices_b, extra=""):
    """A cluster over two network namespaces, UCX over TCP between them: the coordinator and
    node a's workers (launched by it) in namespace A (10.77.0.1), node b's workers started
    apart (external, joining with the cluster's token) in namespace B (10.77.0.2). Yields
    (run, address, log_path), where run(*argv) runs a command in namespace A; None when
    namespaces cannot be built here (printed SKIP)."""
    if os.geteuid() != 0:
        print("SKIP: network namespaces need root")
        yield None
        return
    ns_a, ns_b = netns_or_skip()
    env = dict(os.environ, UCX_TLS="tcp")
    try:
        with tempfile.TemporaryDirectory() as d:
            cfg = os.path.join(d, "two.yaml")
            open(cfg, "w").write(
                f"model: {{path: {model}}}\nparallel: {parallel}\n"
                f"nodes:\n  - {{name: a, host: 10.77.0.1, devices: [{', '.join(['cpu'] * devices_a)}], launch: local}}\n"
                f"  - {{name: b, host: 10.77.0.2, devices: [{', '.join(['cpu'] * devices_b)}], launch: external}}\n"
                "server: {listen: 10.77.0.1:0}\nscheduler: {kv_cache_mb: 16}\n"
                f"security: {{cluster_dir: {d}/cluster}}\n" + extra)
            log_path = os.path.join(d, "coordinator.log")
            log = open(log_path, "w")
            coord = subprocess.Popen(["ip", "netns", "exec", ns_a, COORDINATOR, "--config", cfg], stdout=log,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
            workers = []
            try:
                # The control plane (mutual TLS) is where workers go; the public API is "ready on".
                control = wait_for_log(log_path, r"waiting for \d+ worker\(s\) on (\S+) \(mutual TLS\)", 300).group(1)
                workers = [subprocess.Popen(["ip", "netns", "exec", ns_b, os.path.join(BIN, "cascade-worker"),
                                             "--coordinator", control, "--node", "b", "--device", "cpu", "--listen",
                                             "10.77.0.2:0", "--ca", f"{d}/cluster/ca.pem", "--token-file",
                                             f"{d}/cluster/join.token"],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                            start_new_session=True)
                           for _ in range(devices_b)]
                address = wait_for_log(log_path, r"ready on (\S+)", 600).group(1)

                def run(*argv):
                    return subprocess.run(["ip", "netns", "exec", ns_a, *argv], capture_output=True, text=True,
                                          timeout=300)
                yield run, address, log_path
            finally:
                for proc in (*workers, coord):
                    stop(proc)
                log.close()
    finally:
        subprocess.run(["ip", "netns", "del", ns_a], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns_b], capture_output=True)


def two_nodes(tp):
    need(STORIES)
    with two_namespace_cluster(STORIES, f"{{pipeline: 2, tensor: {tp}}}", tp, tp) as c:
        if c is None:
            return
        run, address, _ = c
        p = run(CASCADE, "generate", "--server", address, "--prompt-ids", "1", "--temperature", "0", "--max-tokens", "20",
                "--json")
        assert p.returncode == 0, p.stderr
        got = json.loads(p.stdout)["token_ids"]
        assert got == [403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267,
                       337], got
        print(f"two nodes, TP={tp} x PP=2 (UCX over TCP): greedy ids match the reference")


def test_refused_step():
    """A worker refuses a malformed step (here: one feeding a token it was told to refuse,
    --refuse-token-for-testing): the request in it fails with INVALID_ARGUMENT, every stage
    keeps its worker (same pids, cluster ready), and the next request succeeds with the
    reference's greedy ids. PP=2, so both stages refuse the step alike without a hang."""
    need(STORIES)
    refused = 500
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "external.yaml")
        open(cfg, "w").write(
            f"model: {{path: {STORIES}}}\nparallel: {{pipeline: 2, tensor: 1}}\n"
            "nodes:\n  - {name: x, host: 127.0.0.1, devices: [cpu, cpu], launch: external}\n"
            "server: {listen: 127.0.0.1:0}\nscheduler: {kv_cache_mb: 16}\n"
            f"security: {{cluster_dir: {d}/cluster}}\n")
        log_path = os.path.join(d, "coordinator.log")
        log = open(log_path, "w")
        coord = subprocess.Popen([COORDINATOR, "--config", cfg], stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        workers = []
        try:
            control = wait_for_log(log_path, r"waiting for \d+ worker\(s\) on (\S+)", 300).group(1)
            workers = [subprocess.Popen([os.path.join(BIN, "cascade-worker"), "--coordinator", control, "--node", "x",
                                         "--device", "cpu", "--refuse-token-for-testing", str(refused),
                                         "--ca", f"{d}/cluster/ca.pem", "--token-file", f"{d}/cluster/join.token"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
                       for _ in range(2)]
            address = wait_for_log(log_path, r"ready on (\S+)", 600).group(1)
            err = generate(address, "--prompt-ids", f"1,{refused}", "--max-tokens", "4", expect_rc=2)
            assert "INVALID_ARGUMENT" in err and f"token id {refused} refused" in err, err
            rc, out = status(address)
            assert rc == 0 and "cluster ready" in out, out
            assert all(w.poll() is None for w in workers), "a worker exited after refusing a step"
            got = generate(address, "--prompt-ids", "1", "--temperature", "0", "--max-tokens", "20")
            assert got["token_ids"] == [403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338,
                                        401, 396, 267, 337], got
            assert "is dead" not in open(log_path).read(), open(log_path).read()
            print("refused step: INVALID_ARGUMENT for its request, both workers kept, the next request matches")
        finally:
            for proc in (*workers, coord):
                stop(proc)
            log.close()


def wait_for_log(log_path, pattern, tries):
    """The first match of `pattern` in the log, polled every 0.1 s `tries` times; fails with the log."""
    for _ in range(tries):
        m = re.search(pattern, open(log_path).read())
        if m:
            return m
        time.sleep(0.1)
    raise AssertionError(open(log_path).read())


def test_config_errors_exit_2():
    need(STORIES)
    with tempfile.TemporaryDirectory() as d:
        cases = {
            "parallel: {pipeline: 2}\nnodes: []\n": "model",
            f"model: {{path: {STORIES}}}\nparallel: {{pipeline: 0}}\nnodes: [{{name: a, host: h, devices: [cpu]}}]\n": "parallel.pipeline",
            f"model: {{path: {STORIES}}}\nnodes: [{{name: a, host: h, devices: [gpu7]}}]\n": "nodes[0].devices[0]",
            f"model: {{path: {STORIES}}}\nnodes: [{{name: a, host: h, devices: [cpu]}}]\nscheduler: {{kv_block_size: 3}}\n": "scheduler.kv_block_size",
            f"model: {{path: {STORIES}}}\nnodes: [{{name: a, host: h, devices: [cpu]}}]\n"
            "transport: {activations: nccl}\n": "transport.activations",
            f"model: {{path: /nonexistent.gguf}}\nnodes: [{{name: a, host: h, devices: [cpu]}}]\n": "model.path",
            # TP larger than a node's devices: the group would span nodes.
            f"model: {{path: {STORIES}}}\nparallel: {{tensor: 2}}\n"
            "nodes: [{name: a, host: h, devices: [cpu]}, {name: b, host: h, devices: [cpu]}]\n": "parallel.tensor",
            # TP that cannot split the heads: 16 ranks over 4 KV heads of 2 query heads each.
            f"model: {{path: {STORIES}}}\nparallel: {{tensor: 16}}\n"
            f"nodes: [{{name: a, host: h, devices: [{', '.join(['cpu'] * 16)}]}}]\n": "parallel.tensor",
        }
        for text, key in cases.items():
            cfg = os.path.join(d, "bad.yaml")
            open(cfg, "w").write(text)
            p = subprocess.run([COORDINATOR, "--config", cfg], capture_output=True, text=True, timeout=60)
            assert p.returncode == 2, (text, p.returncode, p.stderr)
            assert key in p.stderr and len(p.stderr.strip().splitlines()) == 1, (key, p.stderr)
        # A cuda:N worker on a machine without a usable GPU refuses its device (exit 64, not
        # restarted); the coordinator stops waiting at once and says why on its last line.
        if os.path.exists("/dev/nvidia0"):
            print("a GPU is present: the no-GPU refusal case does not apply")
            return
        cfg = os.path.join(d, "gpu.yaml")
        open(cfg, "w").write(f"model: {{path: {STORIES}}}\nnodes: [{{name: a, host: 127.0.0.1, devices: ['cuda:0']}}]\n"
                             "server: {listen: '127.0.0.1:0'}\n")
        t0 = time.time()
        p = subprocess.run([COORDINATOR, "--config", cfg], capture_output=True, text=True, timeout=60)
        last = p.stderr.strip().splitlines()[-1]
        assert p.returncode == 2, (p.returncode, p.stderr)
        assert last.startswith("cascade-coordinator: ") and "cuda:0" in last and "no usable GPU" in last, p.stderr
        assert time.time() - t0 < 20, f"took {time.time() - t0:.1f} s"
        print(f"cuda:0 without a GPU: refused in {time.time() - t0:.1f} s: {last}")


def test_worker_killed_mid_stream():
    """A worker killed mid-stream loses no request: the stream pauses while the launcher
    restarts the worker and the cluster rebuilds, then goes on where it was (its KV
    recomputed from the tokens the coordinator holds) with the same greedy ids as without
    the kill; a request arriving meanwhile waits and is served."""
    need(STORIES)
    with cluster(STORIES, 2) as (address, proc, log_path):
        t0 = time.time()
        reference = generate(address, "--prompt-ids", "1", "--temperature", "0", "--max-tokens", "2000",
                             "--ignore-eos")["token_ids"]
        alone_s = time.time() - t0
        workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(workers) == 2, workers
        stream = subprocess.Popen([CASCADE, "generate", "--server", address, "--prompt-ids", "1", "--temperature", "0",
                                   "--max-tokens", "2000", "--ignore-eos", "--json"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        time.sleep(min(0.3, alone_s / 3))
        assert stream.poll() is None, "the stream ended before the kill"
        victim = workers[1]
        os.kill(int(victim), signal.SIGKILL)
        time.sleep(0.2)
        late = subprocess.Popen([CASCADE, "generate", "--server", address, "--prompt-ids", "1", "--temperature", "0",
                                 "--max-tokens", "20", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        out, err = stream.communicate(timeout=120)
        assert stream.returncode == 0, err
        assert json.loads(out)["token_ids"] == reference, "the resumed stream's ids differ from the run without a kill"
        out, err = late.communicate(timeout=120)
        assert late.returncode == 0, err
        assert json.loads(out)["token_ids"] == reference[:20]
        log = open(log_path).read()
        assert "wait for the cluster to rebuild" in log and "resuming" in log, log
        assert proc.poll() is None
        print(f"kill -9 of worker {victim} mid-stream: {len(reference)} tokens, identical to the run without a kill "
              f"({time.time() - t0:.1f} s in all, {alone_s:.1f} s alone); a request sent while it rebuilt was served")


def replica_lines(address):
    """{replica: (serving, finished)} from `cascade status`."""
    _, text = status(address)
    return {int(m.group(1)): (m.group(2) == "serving", int(m.group(3)))
            for m in re.finditer(r"^replica (\d+)(?: \(\w+\))?: (serving|down);.*finished (\d+)$", text, re.M)}


def test_dp_parity():
    """parallel.data: 2 runs two whole pipelines behind one coordinator; every request's
    greedy ids, and its seeded sampled ids, equal `cascade run`'s whichever replica served
    it. Stories260K at PP=2 per replica under 12 concurrent requests (they spread over
    both replicas); then the default model (SmolLM2) at PP=1, each request twice at once:
    one copy per replica, the same ids from both. (SmolLM2's Q4_1 ids may differ at a
    near-tie between batch sizes, GEMV vs tiled GEMM, so its copies run at batch 1, as
    `cascade run` does.)"""
    need(STORIES)
    modes = [("--temperature", "0"), ("--temperature", "0.8", "--seed", "7")]
    prompts = [("--prompt-ids", "1"), ("--prompt", "Once upon a time"), ("--prompt", "The cat sat on the mat and")]
    jobs = [(p, m) for p in prompts for m in modes]
    reference = {job: run_json("run", "--model", STORIES, *job[0], *job[1], "--max-tokens", "60",
                               "--ignore-eos")["token_ids"] for job in jobs}
    with cluster(STORIES, 2, data=2) as (address, _, _):
        rc, text = status(address)
        assert rc == 0 and "replicas: 2 of 2 serving" in text, text
        with concurrent.futures.ThreadPoolExecutor(len(jobs) * 2) as pool:
            futures = {pool.submit(generate, address, *job[0], *job[1], "--max-tokens", "60", "--ignore-eos"): job
                       for job in jobs * 2}
            for f, job in futures.items():
                got = f.result()["token_ids"]
                assert got == reference[job], f"{job}: {got} != {reference[job]}"
        rows = replica_lines(address)
        assert sorted(rows) == [0, 1] and all(serving for serving, _ in rows.values()), text
        finished = [rows[r][1] for r in (0, 1)]
        assert sum(finished) == 2 * len(jobs) and min(finished) > 0, finished
    print(f"DP=2 x PP=2 stories260K: {2 * len(jobs)} concurrent requests (greedy and seeded), finished per replica "
          f"{finished}, every one identical to cascade run")
    if not os.path.exists(SMOL):
        print(f"SKIP part: {SMOL} absent")
        return
    prompts = [("--prompt", "The capital of France is"), ("--prompt", "Write a haiku about rain.")]
    jobs = [(p, m) for p in prompts for m in modes]
    reference = {job: run_json("run", "--model", SMOL, *job[0], *job[1], "--max-tokens", "24",
                               "--ignore-eos")["token_ids"] for job in jobs}
    with cluster(SMOL, 1, data=2) as (address, _, _):
        for k, job in enumerate(jobs):
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                pair = [pool.submit(generate, address, *job[0], *job[1], "--max-tokens", "24", "--ignore-eos")
                        for _ in range(2)]
                got = [f.result()["token_ids"] for f in pair]
            assert got[0] == got[1] == reference[job], f"{job}: {got} != {reference[job]}"
            finished = [replica_lines(address)[r][1] for r in (0, 1)]
            assert finished == [k + 1, k + 1], f"each pair is one request per replica: {finished}"
    print(f"DP=2 SmolLM2: {len(jobs)} requests twice at once, one copy on each replica, both identical to cascade run")


def test_dp_worker_killed():
    """A worker of one replica killed mid-stream: that replica's requests move to the other
    replica and go on there from the tokens they hold, with the ids of an undisturbed run
    (greedy and seeded); the dead replica rebuilds and serves again."""
    need(STORIES)
    modes = [("--temperature", "0"), ("--temperature", "0.9", "--seed", "3"), ("--temperature", "0.7", "--seed", "11")]
    n = 1500
    with cluster(STORIES, 2, data=2) as (address, proc, log_path):
        t0 = time.time()
        reference = {m: generate(address, "--prompt-ids", "1", *m, "--max-tokens", str(n), "--ignore-eos")["token_ids"]
                     for m in modes}
        alone_s = (time.time() - t0) / len(modes)
        workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(workers) == 4, workers
        streams = [(m, subprocess.Popen([CASCADE, "generate", "--server", address, "--prompt-ids", "1", *m,
                                         "--max-tokens", str(n), "--ignore-eos", "--json"], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)) for m in modes * 2]
        time.sleep(min(0.5, alone_s / 3))
        assert all(s.poll() is None for _, s in streams), "a stream ended before the kill"
        os.kill(int(workers[-1]), signal.SIGKILL)
        for m, s in streams:
            out, err = s.communicate(timeout=300)
            assert s.returncode == 0, err
            assert json.loads(out)["token_ids"] == reference[m], f"{m}: the moved stream's ids differ"
        log = open(log_path).read()
        moved = re.search(r"[^\n]*moved to another replica[^\n]*", log)
        assert moved, log
        deadline = time.time() + 120
        while time.time() < deadline and not all(serving for serving, _ in replica_lines(address).values()):
            time.sleep(0.5)
        rows = replica_lines(address)
        assert len(rows) == 2 and all(serving for serving, _ in rows.values()), status(address)[1]
        after = generate(address, "--prompt-ids", "1", *modes[1], "--max-tokens", "50", "--ignore-eos")["token_ids"]
        assert after == reference[modes[1]][:50]
        print(f"kill -9 of worker {workers[-1]} under {len(streams)} streams of {n} tokens: every stream identical to "
              f"its undisturbed run ({moved.group(0).strip()}); "
              f"both replicas serving again, finished per replica {[rows[r][1] for r in (0, 1)]}")


def test_dp_prefix_affinity():
    """With parallel.route_by_prefix, a chat's next turn goes to the replica that holds its earlier
    turn's prefix even when that replica is busier (within Replicas::kAffinitySlack): its
    prompt blocks are served from the cache there, and its greedy ids equal `cascade run`'s.
    Without the affinity the idler replica, whose cache is empty, would take it."""
    need(STORIES)
    story = run_json("run", "--model", STORIES, "--prompt-ids", "1", "--temperature", "0", "--max-tokens", "60",
                     "--ignore-eos")["token_ids"]
    turn1 = [1] + story[:47]  # 48 tokens: 3 full blocks of 16.
    ids = ",".join
    with cluster(STORIES, 1, data=2, route_by_prefix=True) as (address, _, _):
        first = generate(address, "--prompt-ids", ids(map(str, turn1)), "--temperature", "0", "--max-tokens", "8")
        served = [r for r, (_, n) in replica_lines(address).items() if n == 1]
        assert len(served) == 1, replica_lines(address)
        # A long stream with the same opening goes where that opening was (the affinity).
        stream = subprocess.Popen([CASCADE, "generate", "--server", address, "--prompt-ids", ids(map(str, turn1)),
                                   "--temperature", "0", "--max-tokens", str(LONGEST_STREAM + 1 - len(turn1)),
                                   "--ignore-eos", "--json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)
        _, text = status(address)
        busy = [int(m.group(1)) for m in re.finditer(r"^replica (\d+): serving; running 1,", text, re.M)]
        assert busy == served, text
        turn2 = turn1 + first["token_ids"] + story[47:55]
        reference = run_json("run", "--model", STORIES, "--prompt-ids", ids(map(str, turn2)), "--temperature", "0",
                             "--max-tokens", "16")["token_ids"]
        got = generate(address, "--prompt-ids", ids(map(str, turn2)), "--temperature", "0", "--max-tokens", "16")
        stream.kill()
        stream.wait()
        assert got["token_ids"] == reference, (got["token_ids"], reference)
        cached = got["usage"]["cached_tokens"]
        assert cached >= 48, f"turn 2 found {cached} cached tokens: it went to the other replica"
        rows = replica_lines(address)
        assert rows[served[0]][1] == 2, rows  # Turns 1 and 2 both there.
    print(f"turn 2 followed turn 1 to replica {served[0]} though it was running a stream: {cached} of {len(turn2)} "
          f"prompt tokens from its prefix cache, ids equal to cascade run")


def http_health(http_address):
    """GET /health on the HTTP front: the status code."""
    try:
        with urllib.request.urlopen(f"http://{http_address}/health", timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_dp_one_replica_down():
    """One replica's worker stopped (SIGSTOP: declared dead, and not restarted, past
    server.recovery_timeout_s): its requests move and finish on the other replica with
    their undisturbed ids, none fails; /health stays 200 and `cascade status` shows the
    replica down; arrivals are served meanwhile; after SIGCONT it rejoins."""
    need(STORIES)
    text = config_yaml(STORIES, 1, data=2).replace(
        "server: {listen: 127.0.0.1:0}", "server: {listen: 127.0.0.1:0, http_listen: 127.0.0.1:0, recovery_timeout_s: 2}")
    mode = ("--temperature", "0.9", "--seed", "5")
    with cluster_from_yaml(text) as (address, proc, log_path):
        http_address = re.search(r"http front on (\S+)", open(log_path).read()).group(1)
        reference = generate(address, "--prompt-ids", "1", *mode, "--max-tokens", "800", "--ignore-eos")["token_ids"]
        workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(workers) == 2, workers
        streams = [subprocess.Popen([CASCADE, "generate", "--server", address, "--prompt-ids", "1", *mode,
                                     "--max-tokens", "800", "--ignore-eos", "--json"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for _ in range(4)]
        # Stop a worker once both replicas run streams (on a fast core stories260K's 800
        # tokens take under a second: a fixed wait could stop it after its streams ended).
        t0 = time.time()
        while True:
            running = [int(n) for n in re.findall(r"^replica \d: serving; running (\d+)", status(address)[1], re.M)]
            if len(running) == 2 and min(running) >= 1:
                break
            assert time.time() - t0 < 20, status(address)[1]
            time.sleep(0.02)
        os.kill(int(workers[1]), signal.SIGSTOP)
        try:
            t0 = time.time()
            while "replicas: 1 of 2 serving" not in status(address)[1]:
                assert time.time() - t0 < 20, status(address)[1]
                assert http_health(http_address) == 200
                time.sleep(0.2)
            _, text = status(address)
            assert re.search(r"^replica [01]: down;", text, re.M), text
            for s in streams:
                out, err = s.communicate(timeout=120)
                assert s.returncode == 0, err
                assert json.loads(out)["token_ids"] == reference, "a moved stream's ids differ"
            time.sleep(2.5)  # Past the dead replica's recovery timeout: still serving.
            assert http_health(http_address) == 200
            got = generate(address, "--prompt-ids", "1", *mode, "--max-tokens", "40", "--ignore-eos")["token_ids"]
            assert got == reference[:40]
            down_s = time.time() - t0
        finally:
            os.kill(int(workers[1]), signal.SIGCONT)
        t0 = time.time()
        while "replicas: 2 of 2 serving" not in status(address)[1]:
            assert time.time() - t0 < 60, status(address)[1]
            time.sleep(0.3)
        assert "moved to another replica" in open(log_path).read()
        print(f"one replica down {down_s:.1f} s (SIGSTOP): its streams moved; all 4 finished identical, /health 200 "
              f"throughout, an arrival served; both replicas serving {time.time() - t0:.1f} s after SIGCONT")


def test_reflection_and_health():
    """The coordinator serves gRPC reflection (its services listed, the Inference service's
    file resolvable; the workers' too) and grpc.health.v1 follows the cluster: SERVING when
    ready, NOT_SERVING while a SIGKILLed worker is dead, SERVING again once the restarted
    worker is back, for the whole server ("") and for cascade.v1.Inference alike. Runs
    under scripts/python_deps.sh (grpcio, grpcio-reflection, grpcio-health-checking)."""
    need(STORIES)
    import grpc
    from google.protobuf.descriptor_pool import DescriptorPool
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
    serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    names = ("", "cascade.v1.Inference")
    with tempfile.TemporaryDirectory() as d, \
            cluster_from_yaml(config_yaml(STORIES, 2) + f"security: {{cluster_dir: {d}}}\n") as (address, proc, log_path), \
            grpc.insecure_channel(address) as channel:
        db = ProtoReflectionDescriptorDatabase(channel)
        services = set(db.get_services())
        # The public port: the API, health and reflection; the control plane listens apart.
        assert {"cascade.v1.Inference", "grpc.health.v1.Health"} <= services, services
        assert "cascade.v1.Coordinator" not in services, services
        inference = DescriptorPool(db).FindServiceByName("cascade.v1.Inference")
        assert inference.file.name == "cascade/v1/inference.proto", inference.file.name
        assert {m.name for m in inference.methods} == {"Generate", "Complete", "Tokenize", "GetModelInfo",
                                                        "GetClusterStatus"}, [m.name for m in inference.methods]
        assert inference.methods_by_name["Generate"].output_type.full_name == "cascade.v1.GenerateResponse"
        rc, text = status(address)
        worker_addresses = re.findall(r"\b(127\.0\.0\.1:\d+)\b", text)
        assert rc == 0 and len(worker_addresses) == 2, text
        # Workers speak mutual TLS; reflection needs only the cluster CA to verify them.
        creds = grpc.ssl_channel_credentials(open(os.path.join(d, "ca.pem"), "rb").read())
        with grpc.secure_channel(worker_addresses[0], creds,
                                 options=[("grpc.ssl_target_name_override", "worker.cascade")]) as w:
            assert "cascade.v1.Worker" in ProtoReflectionDescriptorDatabase(w).get_services()
        print(f"reflection lists {sorted(services)}; the workers' list cascade.v1.Worker")

        health = health_pb2_grpc.HealthStub(channel)

        def check():
            return [health.Check(health_pb2.HealthCheckRequest(service=n), timeout=5).status for n in names]

        def wait_for(want, seconds):
            t0 = time.time()
            while time.time() - t0 < seconds:
                got = check()
                if got == [want, want]:
                    return time.time() - t0
                time.sleep(0.05)
            raise AssertionError(f"health {got} (want {want} for {names}) after {seconds} s:\n" + open(log_path).read())

        assert check() == [serving, serving], check()
        workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(workers) == 2, workers
        os.kill(int(workers[1]), signal.SIGKILL)
        down = wait_for(not_serving, 5)
        rc, text = status(address)
        assert rc == 1 and "degraded" in text, text  # Still dead: the restart waits a second.
        print(f"NOT_SERVING {down:.2f} s after kill -9 of worker {workers[1]}, while the cluster is degraded")
        up = wait_for(serving, 60)
        rc, text = status(address)
        assert rc == 0, text
        got = generate(address, "--prompt-ids", "1", "--temperature", "0", "--max-tokens", "20")
        assert got["token_ids"] == STORIES_IDS, got
        print(f"SERVING again {up:.1f} s later, with the restarted worker; same greedy ids")


def test_worker_not_back_fails_clearly():
    """A dead worker that does not come back within server.recovery_timeout_s fails its
    requests with UNAVAILABLE saying so, arrivals are refused until it is back, and the
    cluster serves again once it is. On SmolLM2: stories260K's longest stream took 0.86 s
    on a Zen 5 core, close to ending before the SIGSTOP (as cluster_deadline_and_cancel's did)."""
    need(SMOL)
    local = run_json("run", "--model", SMOL, "--prompt-ids", "1", "--temperature", "0", "--max-tokens", "20")
    text = config_yaml(SMOL, 2).replace("server: {listen: 127.0.0.1:0}",
                                          "server: {listen: 127.0.0.1:0, recovery_timeout_s: 2}")
    with cluster_from_yaml(text) as (address, proc, _):
        workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        stream = start_stream(address, LONGEST_STREAM)
        time.sleep(0.3)
        assert stream.poll() is None, "the stream ended before SIGSTOP"
        os.kill(int(workers[1]), signal.SIGSTOP)  # Stopped, not exited: the launcher cannot restart it.
        t0 = time.time()
        out, err = stream.communicate(timeout=60)
        took = time.time() - t0
        assert stream.returncode == 2 and "UNAVAILABLE" in err and "did not rebuild within 2 s" in err, err
        assert 2 <= took < 15, took
        err = generate(address, "--prompt-ids", "1", "--max-tokens", "3", expect_rc=2)
        assert "UNAVAILABLE" in err and "degraded" in err, err
        print(f"the stream failed {took:.1f} s after SIGSTOP: {err.strip()[:160]}")
        os.kill(int(workers[1]), signal.SIGCONT)  # It finds it was declared dead, exits, is restarted.
        t0 = time.time()
        while time.time() - t0 < 60:
            if status(address)[0] == 0:
                break
            time.sleep(0.3)
        got = generate(address, "--prompt-ids", "1", "--temperature", "0", "--max-tokens", "20")
        assert got["token_ids"] == local["token_ids"], (got, local)
        print(f"serving again {time.time() - t0:.1f} s after SIGCONT")


def drain_cluster(drain_timeout_s, model=STORIES):
    text = config_yaml(model, 2).replace("server: {listen: 127.0.0.1:0}",
                                          f"server: {{listen: 127.0.0.1:0, drain_timeout_s: {drain_timeout_s}}}")
    return cluster_from_yaml(text)


# The longest answer to a 1-token prompt that stories260K's 2048-position context holds (a
# longer max_tokens is refused): streams meant to outlast what a test does to the cluster.
LONGEST_STREAM = 2047


def start_stream(address, n_tokens):
    return subprocess.Popen([CASCADE, "generate", "--server", address, "--prompt-ids", "1", "--temperature", "0",
                             "--max-tokens", str(n_tokens), "--ignore-eos", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigterm_drain():
    """SIGTERM: in-flight streams run to their end, new requests are refused with
    UNAVAILABLE, the workers stop, and the coordinator exits 0; past the drain timeout the
    rest end with UNAVAILABLE and it still exits 0."""
    need(STORIES)
    with drain_cluster(60) as (address, proc, log_path):
        workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        # The longest streams: 600 tokens of stories260K could end within the 0.7 s before
        # the new request, and the coordinator exit with them (connection refused, seen once).
        streams = [start_stream(address, LONGEST_STREAM) for _ in range(3)]
        time.sleep(0.5)
        assert all(s.poll() is None for s in streams), "the streams ended before SIGTERM"
        t0 = time.time()
        os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.2)
        err = generate(address, "--prompt-ids", "1", "--max-tokens", "3", expect_rc=2)
        assert "UNAVAILABLE" in err and "shutting down" in err, err
        for s in streams:
            out, err = s.communicate(timeout=120)
            assert s.returncode == 0, err
            got = json.loads(out)
            assert len(got["token_ids"]) == LONGEST_STREAM and got["finish_reason"] == "length", got["finish_reason"]
            assert got["token_ids"][:3] == [403, 407, 261], got["token_ids"][:3]
        assert proc.wait(timeout=30) == 0, open(log_path).read()
        print(f"3 streams of {LONGEST_STREAM} tokens completed, a new request refused, exit 0 {time.time() - t0:.1f} s after SIGTERM")
        time.sleep(0.5)
        alive = [w for w in workers if os.path.exists(f"/proc/{w}") and "zombie" not in open(f"/proc/{w}/status").read()]
        assert not alive, f"workers still running: {alive}"
        log = open(log_path).read()
        assert "draining: 3 request(s) in flight" in log, log
        # A clean shutdown is quiet: the workers it stops are not reported dead.
        errors = [line for line in log.splitlines() if line.startswith("E ")]
        assert not errors, "\n".join(errors)
    # A stream that must outlast the 1 s drain: SmolLM2's 2047 tokens take seconds, where
    # stories260K's ran out within 1.5 s on a fast core (rc 0, seen on an Intel Xeon VM).
    need(SMOL)
    with drain_cluster(1, SMOL) as (address, proc, log_path):
        stream = start_stream(address, LONGEST_STREAM)
        time.sleep(0.5)
        t0 = time.time()
        os.kill(proc.pid, signal.SIGTERM)
        out, err = stream.communicate(timeout=60)
        assert stream.returncode == 2 and "UNAVAILABLE" in err and "shutting down" in err, (stream.returncode, err)
        assert proc.wait(timeout=30) == 0
        took = time.time() - t0
        assert 1 <= took < 10, took
        assert "drain ended with 1 request(s) unfinished" in open(log_path).read()
        print(f"past a 1 s drain timeout: the stream ended with UNAVAILABLE, exit 0 {took:.1f} s after SIGTERM")


# --- Mixture of experts ----------------------------------------------------------------

def moe_model(d, hot_expert=None):
    """A random-weight Qwen3-MoE GGUF (scripts/make_random_gguf.py moe-tiny: 4 layers, 8
    experts, top-2, SmolLM2's tokenizer) in `d`."""
    need(SMOL)
    path = os.path.join(d, "moe-tiny.gguf")
    extra = ["--hot-expert", str(hot_expert)] if hot_expert is not None else []
    subprocess.run([os.path.join(ROOT, "scripts", "python_deps.sh"), os.path.join(ROOT, "scripts", "make_random_gguf.py"),
                    "moe-tiny", SMOL, path, *extra], check=True, capture_output=True)
    return path


def worker_rows(text):
    """(stage, weights MiB, expert range or None, expert bytes) of each worker in `cascade status`."""
    rows = []
    for m in re.finditer(r"^(\d+|draft)\s+\[.*?MiB\s+[\d.]+ MiB(?:\s+experts \[(\d+), (\d+)\)( sliced)? (\d+) B)?$",
                         text, re.M):
        rows.append((m.group(1), (int(m.group(2)), int(m.group(3))) if m.group(2) else None,
                     m.group(4) is not None, int(m.group(5) or 0)))
    return rows


# One routed expert of one moe-tiny layer: gate and up [128, 256], down [256, 128], F16.
MOE_TINY_EXPERT_BYTES = 3 * 128 * 256 * 2


def test_moe_parity():
    """Greedy ids through the cluster equal `cascade run`'s for a MoE model: experts sharded
    whole (parallel.expert) over TP 2 and 3, x PP 1 and 2, with and without speculation,
    and sliced by columns (expert: false). Each worker holds only its experts' bytes."""
    with tempfile.TemporaryDirectory() as d:
        model = moe_model(d)
        per_expert = MOE_TINY_EXPERT_BYTES
        prompts = [("--prompt", "The experts of a mixture"), ("--prompt-ids", "1,2,3,4,5,6,7,8")]
        ref = {p: run_json("run", "--model", model, *p, "--temperature", "0", "--max-tokens", "24",
                           "--ignore-eos")["token_ids"] for p in prompts}
        assert len(set(ref[prompts[0]])) > 4, ref  # The text varies: a meaningful comparison.
        for pp, tp, ep, draft in [(1, 2, True, None), (1, 3, True, None), (2, 2, True, None), (2, 3, True, None),
                                  (2, 2, False, None), (1, 3, False, None),
                                  (2, 2, True, "{ngram: {n: 2}, adaptive: false}"),
                                  (1, 2, True, "{self: {layers: 2}, num_tokens: 3, adaptive: false}")]:
            extra = f"draft: {draft}\n" if draft else ""
            cfg = config_yaml(model, pp, tensor=tp, extra=extra).replace(
                f"tensor: {tp}}}", f"tensor: {tp}, expert: {'true' if ep else 'false'}}}")
            with cluster_from_yaml(cfg) as (address, _, _):
                for prompt in prompts:
                    got = generate(address, *prompt, "--temperature", "0", "--max-tokens", "24", "--ignore-eos")
                    assert got["token_ids"] == ref[prompt], f"PP={pp} TP={tp} EP={ep} {draft}: {got['token_ids']} != {ref[prompt]}"
                    if draft and "self" in draft:  # (Random text gives n-grams little to draft.)
                        assert got.get("speculative", {}).get("steps", 0) > 0, got
                rc, text = status(address)
                assert rc == 0, text
                workers = [w for w in worker_rows(text) if w[0] != "draft"]
                assert len(workers) == pp * tp, text
                for stage in range(pp):
                    ranks = [w for w in workers if w[0] == str(stage)]
                    layers = 4 // pp
                    if ep:  # Disjoint whole experts covering all 8, each worker holding exactly their bytes.
                        ranges = sorted(w[1] for w in ranks)
                        assert ranges[0][0] == 0 and ranges[-1][1] == 8, text
                        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), text
                        for w in ranks:
                            assert not w[2] and w[3] == (w[1][1] - w[1][0]) * layers * per_expert, (w, per_expert, text)
                    else:  # Every expert, sliced: the stage's experts once in all.
                        assert all(w[2] and w[1] == (0, 8) for w in ranks), text
                        assert sum(w[3] for w in ranks) == 8 * layers * per_expert, text
            print(f"PP={pp} TP={tp} EP={ep} draft={draft}: identical to cascade run; experts held as planned")


def test_moe_redundant_experts():
    """parallel.redundant_experts (EPLB) on a router biased to expert 5 (every token picks it):
    every few steps the coordinator places replicas of the hottest experts on the other
    ranks from the loads measured since the last placement, the workers read them and split
    each expert's tokens among its holders. Greedy ids equal `cascade run`'s at EP 2 and 3,
    PP 1 and 2, with n-gram speculation, while the placement changes under the requests;
    status shows the replicas and the busiest rank over the mean falling."""
    with tempfile.TemporaryDirectory() as d:
        model = moe_model(d, hot_expert=5)
        prompts = [("--prompt", "The experts of a mixture"), ("--prompt-ids", "1,2,3,4,5,6,7,8"),
                   ("--prompt", "Once upon a time")]
        ref = {p: run_json("run", "--model", model, *p, "--temperature", "0", "--max-tokens", "32",
                           "--ignore-eos")["token_ids"] for p in prompts}
        for pp, tp in [(1, 2), (2, 2), (1, 3)]:
            cfg = config_yaml(model, pp, tensor=tp, extra="draft: {ngram: {n: 2}, adaptive: false}\n").replace(
                f"tensor: {tp}}}", f"tensor: {tp}, expert: true, redundant_experts: 1, eplb_interval_steps: 3}}")
            with cluster_from_yaml(cfg) as (address, _, log_path):
                for _ in range(2):  # The second round runs on the placement the first measured.
                    for prompt in prompts:
                        got = generate(address, *prompt, "--temperature", "0", "--max-tokens", "32", "--ignore-eos")
                        assert got["token_ids"] == ref[prompt], f"PP={pp} EP={tp}: {got['token_ids']} != {ref[prompt]}"
                rc, text = status(address)
                log = open(log_path).read()
            assert rc == 0, text
            placed = re.findall(r"moe layer +(\d+): redundant experts \(expert@rank\) (.*); busiest rank over the "
                                r"mean ([\d.]+) -> ([\d.]+)", text)
            assert len(placed) == 4, text  # Every MoE layer, on every stage.
            for layer, replicas, before, after in placed:
                assert "5@" in replicas, (layer, replicas, text)  # The hot expert is replicated.
                assert float(after) < float(before), (layer, before, after)
            assert "redundant expert(s) per rank, placed every 3 steps" in log, log
            print(f"PP={pp} EP={tp}: identical to cascade run under placements; " +
                  "; ".join(f"layer {l}: {r}, {b} -> {a}" for l, r, b, a in placed))


def test_moe_all_to_all():
    """All-to-all expert parallelism (parallel.expert_comm: all_to_all) with expert groups
    spanning two network-namespace hosts (UCX over TCP): attention data parallel over each
    stage's ranks, every MoE layer dispatching tokens to their experts' ranks and combining
    them back. EP 2 and 3 x PP 1 and 2 with speculation (n-grams; the self drafter, whose
    drafts random text does not starve, at PP 1 x EP 2): three requests at once (so lanes
    run different sequences, and some steps leave a lane idle) give `cascade run`'s greedy
    ids; each worker holds its share of the experts, and each lane has a KV pool of its own.
    With redundant experts too (EP 3, placed every 3 steps while the requests run)."""
    with tempfile.TemporaryDirectory() as d:
        model = moe_model(d)
        prompts = [("--prompt", "The experts of a mixture"), ("--prompt-ids", "1,2,3,4,5,6,7,8"),
                   ("--prompt", "Once upon a time, in a land of many experts")]
        ref = {p: run_json("run", "--model", model, *p, "--temperature", "0", "--max-tokens", "32",
                           "--ignore-eos")["token_ids"] for p in prompts}
        # (pipeline, ep, devices on a, devices on b): every layout puts a group across both hosts.
        ngram, self_draft = "{ngram: {n: 2}, adaptive: false}", "{self: {layers: 2}, num_tokens: 3, adaptive: false}"
        eplb = ", redundant_experts: 1, eplb_interval_steps: 3"
        for pp, ep, on_a, on_b, draft, more in [(1, 2, 1, 1, self_draft, ""), (2, 2, 3, 1, ngram, ""),
                                                (1, 3, 2, 1, ngram, ""), (2, 3, 4, 2, ngram, ""),
                                                (1, 3, 2, 1, ngram, eplb)]:
            parallel = f"{{pipeline: {pp}, tensor: {ep}, expert: true, expert_comm: all_to_all{more}}}"
            with two_namespace_cluster(model, parallel, on_a, on_b, f"draft: {draft}\n") as c:
                if c is None:
                    return
                run, address, log_path = c
                def one(prompt):
                    p = run(CASCADE, "generate", "--server", address, *prompt, "--temperature", "0", "--max-tokens", "32",
                            "--ignore-eos", "--json")
                    assert p.returncode == 0, p.stderr
                    out = json.loads(p.stdout)
                    if draft == self_draft:
                        assert out.get("speculative", {}).get("steps", 0) > 0, out
                    return out["token_ids"]
                for _ in range(2):
                    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
                        got = dict(zip(prompts, pool.map(one, prompts)))
                    for prompt in prompts:
                        assert got[prompt] == ref[prompt], f"PP={pp} EP={ep}: {got[prompt]} != {ref[prompt]}"
                p = run(CASCADE, "status", "--server", address, "--wait", "0")
                assert p.returncode == 0, p.stderr
                log = open(log_path).read()
            assert "experts all_to_all (attention data parallel over the tp ranks)" in log, log
            # Each lane has a pool of its own: the cluster holds EP times a worker's blocks.
            per_worker = int(re.search(r"ready on \S+ \(.*?, (\d+) KV blocks of", log).group(1))
            pool = re.search(r"kv blocks (\d+) free of (\d+)", p.stdout)
            assert pool and int(pool.group(2)) == ep * per_worker, (per_worker, p.stdout)
            if more:  # Redundant experts placed while the requests ran, in every MoE layer.
                assert len(re.findall(r"moe layer +\d+: redundant experts \(expert@rank\)", p.stdout)) == 4, p.stdout
            workers = [w for w in worker_rows(p.stdout) if w[0] != "draft"]
            assert len(workers) == pp * ep, p.stdout
            for stage in range(pp):
                ranges = sorted(w[1] for w in workers if w[0] == str(stage))
                assert ranges[0][0] == 0 and ranges[-1][1] == 8, p.stdout
                assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), p.stdout
            print(f"all-to-all PP={pp} EP={ep}{more} across two hosts, 3 requests at once, draft {draft}: identical to "
                  "cascade run")


def test_gpt_oss_parity():
    """A gpt-oss model (scripts/make_random_gpt_oss.py: sinks, sliding windows of 16 on the
    even layers, biases, the clamped SwiGLU, 8 experts top-4; SmolLM2's tokenizer) through
    the cluster at PP 2 x TP 2, experts sliced and expert-parallel, with speculation (the
    self drafter and n-grams): greedy ids equal `cascade run`'s over 40 tokens, past the
    window."""
    need(SMOL)
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "gpt-oss-tiny")
        subprocess.run([os.path.join(ROOT, "scripts", "python_deps.sh"),
                        os.path.join(ROOT, "scripts", "make_random_gpt_oss.py"), SMOL, model],
                       check=True, capture_output=True)
        prompts = [("--prompt", "The experts of a mixture"), ("--prompt-ids", "1,2,3,4,5,6,7,8")]
        ref = {p: run_json("run", "--model", model, *p, "--temperature", "0", "--max-tokens", "40",
                           "--ignore-eos")["token_ids"] for p in prompts}
        assert len(set(ref[prompts[0]])) > 10, ref  # The text varies: a meaningful comparison.
        for ep, draft in [(True, "{self: {layers: 2}, num_tokens: 3, adaptive: false}"),
                          (False, "{ngram: {n: 2}, adaptive: false}")]:
            cfg = config_yaml(model, 2, tensor=2, extra=f"draft: {draft}\n").replace(
                "tensor: 2}", f"tensor: 2, expert: {'true' if ep else 'false'}}}")
            with cluster_from_yaml(cfg) as (address, _, _):
                for prompt in prompts:
                    got = generate(address, *prompt, "--temperature", "0", "--max-tokens", "40", "--ignore-eos")
                    assert got["token_ids"] == ref[prompt], f"EP={ep} {draft}: {got['token_ids']} != {ref[prompt]}"
                    if "self" in draft:
                        assert got.get("speculative", {}).get("steps", 0) > 0, got
            print(f"gpt-oss PP=2 TP=2 EP={ep} draft={draft}: identical to cascade run over 40 tokens")


def test_fp8_bf16_prefill():
    """scheduler.cpu_prefill_activations: bf16 on a block-FP8 checkpoint (moe-tiny through
    scripts/make_format_models.py fp8-hf: every projection, the experts' too, in E4M3 with
    128 x 128 scales). A 40-token prompt puts 8 or more tokens through the dense projections
    and most experts. The cluster (PP 2) gives `cascade run --cpu-prefill-activations
    bf16`'s ids and logprobs, which differ from f32's where the CPU has AVX512_BF16 (the
    workers took the key) and equal them where it has not (and `cascade run` says why)."""
    need(SMOL)
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "moe-tiny-fp8")
        subprocess.run([os.path.join(ROOT, "scripts", "python_deps.sh"), os.path.join(ROOT, "scripts",
                        "make_format_models.py"), moe_model(d), "fp8-hf", model], check=True, capture_output=True)
        ids = ",".join(str(100 + i * 7919 % 20000) for i in range(40))
        args = ("--prompt-ids", ids, "--temperature", "0", "--max-tokens", "8", "--ignore-eos", "--logprobs", "1")
        runs = {a: run_json("run", "--model", model, *args, "--cpu-prefill-activations", a) for a in ("f32", "bf16")}
        assert runs["f32"]["cpu_prefill_activations"] == "f32", runs["f32"]
        bf16_served = runs["bf16"]["cpu_prefill_activations"].startswith("bf16 (")
        assert bf16_served or "no AVX512_BF16" in runs["bf16"]["cpu_prefill_activations"], runs["bf16"]

        def logprobs(res):
            return [t["logprob"] for t in res["logprobs"]]

        gap = max(abs(a - b) for a, b in zip(logprobs(runs["f32"]), logprobs(runs["bf16"])))
        assert gap > 1e-5 if bf16_served else gap == 0, (gap, runs)
        cfg = config_yaml(model, 2).replace("prefix_caching: true}", "prefix_caching: true, cpu_prefill_activations: bf16}")
        with cluster_from_yaml(cfg) as (address, _, log_path):
            got = generate(address, *args)
            log = open(log_path).read()
        assert got["token_ids"] == runs["bf16"]["token_ids"], (got["token_ids"], runs["bf16"]["token_ids"])
        off = max(abs(a - b) for a, b in zip(logprobs(got), logprobs(runs["bf16"])))
        assert off < 1e-6, (off, gap)
        assert "prefill activations bf16" in log, log
        assert log.count("cpu prefill activations: " + runs["bf16"]["cpu_prefill_activations"]) == 2, log
        print(f"FP8 PP=2 with bf16 prefill activations: cascade run's ids, logprobs within {off:.1e} "
              f"(f32's are {gap:.1e} away); served as {runs['bf16']['cpu_prefill_activations']}")


def test_moe_expert_load():
    """A router biased to expert 3: every token chooses it, so `cascade status` shows expert
    3 busiest in every MoE layer at max/mean = 8 experts / top-2 = 4.00, and the request's
    usage carries the same ratio."""
    with tempfile.TemporaryDirectory() as d:
        model = moe_model(d, hot_expert=3)
        with cluster(model, 2, tensor=2) as (address, _, _):
            got = generate(address, "--prompt", "Balance the load", "--max-tokens", "8", "--temperature", "0")
            assert abs(got["usage"]["expert_load_max_mean"] - 4.0) < 1e-9, got
            rc, text = status(address)
            assert rc == 0, text
            lines = re.findall(r"^moe layer +(\d+): max/mean ([\d.]+) \(busiest expert (\d+)\), tokens per expert: (.*)$",
                               text, re.M)
            assert [int(l[0]) for l in lines] == [0, 1, 2, 3], text
            for layer, ratio, busiest, tokens in lines:
                counts = [int(t) for t in tokens.split()]
                assert ratio == "4.00" and busiest == "3" and counts[3] * 2 == sum(counts), text
            print(text)


# --- Prefix caching ----------------------------------------------------------------

PREFIX_STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with "
                "her friends. One day, she saw a big red ball under a tree.")


def prefix_workload(address, extra=()):
    """Requests sharing long prefixes, one at a time (the batches, and so the numerics,
    are then the same with prefix caching on and off): three continuations of one story
    opening, then turns 2 and 3 of the first, each prompt extending the previous prompt
    and answer (as ids, the way a chat's next turn resends its history). Returns
    (name, response) pairs."""
    def g(*args, n=24):
        return generate(address, *args, "--temperature", "0", "--max-tokens", str(n), "--ignore-eos", *extra)
    out = [("turn1", g("--prompt", PREFIX_STORY + " Lily said", n=32)),
           ("shared2", g("--prompt", PREFIX_STORY + " Her mom")),
           ("shared3", g("--prompt", PREFIX_STORY + " The ball was"))]
    turn1 = out[0][1]
    ids = turn1["prompt_ids"] + turn1["token_ids"] + out[1][1]["prompt_ids"][-6:]
    out.append(("turn2", g("--prompt-ids", ",".join(map(str, ids)))))
    turn2 = out[-1][1]
    ids = turn2["prompt_ids"] + turn2["token_ids"] + out[2][1]["prompt_ids"][-7:]
    out.append(("turn3", g("--prompt-ids", ",".join(map(str, ids)), n=16)))
    return out


def prefix_hits(address):
    rc, text = status(address)
    assert rc == 0, text
    m = re.search(r"prefix cache: on, hit (\d+)/(\d+) tokens", text)
    return (int(m.group(1)), int(m.group(2))) if m else None, text


def test_prefix_cache_parity():
    """Greedy ids are the same with prefix caching on and off (PP 1, 2; TP 1, 2; with the
    n-gram and self drafters), on stories260K (F32) and the default SmolLM2 (Q4_1); hits
    happen when on (status and each response's cached_tokens) and never when off.

    Only blocks a prefill computed are reused (coordinator/serving/scheduler.cc
    RegisterCachedBlocks): on the quantized path a decode step's KV differs from a
    prefill's in the last bits, so a next turn recomputes the previous answer, and a reused
    block is then bit-identical to a recomputed one."""
    t0 = time.time()
    for model in (STORIES, SMOL):
        need(model)
        name = os.path.basename(model)
        reference = {}
        for pp, tp in [(1, 1), (2, 1), (1, 2), (2, 2)]:
            runs = {}
            for on in (False, True):
                with cluster(model, pp, tensor=tp, prefix_caching=on) as (address, _, _):
                    runs[on] = prefix_workload(address)
                    hits, text = prefix_hits(address)
                cached = {n: r["usage"]["cached_tokens"] for n, r in runs[on]}
                if not on:
                    assert hits is None and "prefix cache: off" in text, text
                    assert not any(cached.values()), cached
                    continue
                assert hits and hits[0] == sum(cached.values()), (text, cached)
                assert cached["turn1"] == 0 and cached["shared2"] >= 32 and cached["shared3"] >= 32, cached
                # Turn 2 reuses every full block of turn 1's prompt (its answer was decoded),
                # turn 3 every full block of turn 2's prompt.
                prompts = {n: len(r["prompt_ids"]) for n, r in runs[on]}
                assert cached["turn2"] == 16 * (prompts["turn1"] // 16), (cached, prompts)
                assert cached["turn3"] == 16 * (prompts["turn2"] // 16), (cached, prompts)
                print(f"{name} PP={pp} TP={tp}: identical; hit {hits[0]}/{hits[1]} tokens, cached per request {cached}")
            for (n, off), (_, on) in zip(runs[False], runs[True]):
                assert on["token_ids"] == off["token_ids"], \
                    f"{name} PP={pp} TP={tp} {n}: {on['token_ids']} != {off['token_ids']}"
            if (pp, tp) == (1, 1):
                reference = {n: r["token_ids"] for n, r in runs[False]}
        # Speculation on top: the drafter worker rewrites shared blocks in its own cache.
        for kind, draft in [("ngram", "{ngram: {n: 3}, num_tokens: 3, adaptive: false}"),
                            ("self", "{self: {layers: 2}, num_tokens: 3, adaptive: false}")]:
            for pp in (1, 2):
                with cluster(model, pp, extra=f"draft: {draft}\n") as (address, _, _):
                    got = prefix_workload(address)
                    hits, text = prefix_hits(address)
                assert hits and hits[0] > 0, text
                assert f"speculative ({kind} drafter)" in text, text
                for n, r in got:
                    assert r["token_ids"] == reference[n], f"{name} {kind} PP={pp} {n}: {r['token_ids']} != {reference[n]}"
                assert sum(r.get("speculative", {}).get("steps", 0) for _, r in got) > 0, f"{kind}: nothing verified"
                print(f"{name} {kind} drafter PP={pp}: identical, hit {hits[0]}/{hits[1]} tokens")
    print(f"{time.time() - t0:.0f} s")


def host_tier_workload(address, extra=()):
    """A chat's first turn, then enough unrelated prompts (one at a time) to evict every
    block of it from a small KV pool, then its second turn. Returns (name, response) pairs."""
    def g(*args, n=16):
        return generate(address, *args, "--temperature", "0", "--max-tokens", str(n), "--ignore-eos", *extra)
    out = [("turn1", g("--prompt", " ".join([PREFIX_STORY] * 3) + " Lily said", n=32))]
    for i in range(6):  # 6 x 160 distinct prompt tokens: more than any pool below holds.
        ids = [100 + (i * 7919 + k * 104729) % 40000 for k in range(160)]
        out.append((f"filler{i}", g("--prompt-ids", ",".join(map(str, ids)), n=8)))
    turn1 = out[0][1]
    ids = turn1["prompt_ids"] + turn1["token_ids"] + turn1["prompt_ids"][-6:]
    out.append(("turn2", g("--prompt-ids", ",".join(map(str, ids)), n=24)))
    return out


def test_host_kv_tier():
    """scheduler.host_kv_cache_mb: a chat's second turn, after its first turn's blocks were
    evicted from a KV pool too small to keep them, gets them back from the host tier on
    every worker (PP 1 and PP 2 x TP 2) instead of recomputing them; without the tier it
    recomputes them. Greedy ids are the same either way, and status shows the copies."""
    need(SMOL)
    for pp, tp, kv_mb in [(1, 1, 5), (2, 2, 5)]:
        runs = {}
        for host_mb in (0, 64):
            extra_sched = f"host_kv_cache_mb: {host_mb}"
            text = config_yaml(SMOL, pp, tensor=tp, kv_cache_mb=kv_mb).replace(
                "prefix_caching: true}", f"prefix_caching: true, {extra_sched}}}")
            with cluster_from_yaml(text) as (address, _, log_path):
                runs[host_mb] = host_tier_workload(address)
                rc, st = status(address)
                log = open(log_path).read()
            assert rc == 0, st
            cached = {n: r["usage"]["cached_tokens"] for n, r in runs[host_mb]}
            turn1_blocks = 16 * (len(runs[host_mb][0][1]["prompt_ids"]) // 16)
            m = re.search(r"host tier: (\d+) of (\d+) blocks hold evicted prefixes; (\d+) blocks copied out, "
                          r"(\d+) back; (\d+) hit tokens from it", st)
            if host_mb == 0:
                assert cached["turn2"] == 0, f"PP={pp} TP={tp}: the workload did not evict turn 1: {cached}"
                assert m is None, st
            else:
                assert m, st
                assert cached["turn2"] == turn1_blocks, (cached, turn1_blocks)
                assert int(m.group(4)) >= turn1_blocks // 16 and int(m.group(5)) >= turn1_blocks, st
                assert re.search(r"\+ \d+ in the host tier", log), log
                print(f"PP={pp} TP={tp}: turn 2 took {cached['turn2']} tokens from the host tier; {m.group(0)}")
        for (n, off), (_, on) in zip(runs[0], runs[64]):
            assert on["token_ids"] == off["token_ids"], f"PP={pp} TP={tp} {n}: {on['token_ids']} != {off['token_ids']}"
        print(f"PP={pp} TP={tp}: identical ids with and without the host tier")


# --- Sink + window: long generations in bounded memory -------------------------------

def test_kv_sink_window():
    """scheduler.kv_policy: sink_window. A KV pool of 14 blocks (224 positions) cannot hold a
    960-token generation: without the policy the request is refused, naming the context and
    the policy; with it (4 sinks, a 64-token window) the generation, more than 4x what the
    pool holds (PP 1: 14 blocks; PP 2: 11 blocks a stage), runs to the end, its
    greedy ids equal `cascade run --kv-window-tokens 64` (PP 1 and PP 2, n-gram speculation
    on; TP 2 runs to the end too), equal exact attention's until the window first leaves a
    position behind, and its usage says how many positions its last token did not see (gRPC
    and the OpenAI API; /metrics counts the requests and positions)."""
    need(SMOL)
    window, sinks, n_new, prompt = 64, 4, 960, "Once upon a time"
    base = config_yaml(SMOL, 1, kv_cache_mb=5).replace("max_batched_tokens: 1024", "max_batched_tokens: 64")
    with cluster_from_yaml(base) as (address, _, _):
        err = generate(address, "--prompt", prompt, "--temperature", "0", "--max-tokens", str(n_new), "--ignore-eos",
                       expect_rc=2)
        m = re.search(r"context of (\d+) positions", err)
        assert m and int(m.group(1)) * 3 < n_new and "kv_policy: sink_window" in err, err
        print(f"without the policy: refused: {err.strip()}")
    exact = run_json("run", "--model", SMOL, "--prompt", prompt, "--temperature", "0", "--max-tokens", str(n_new),
                     "--ignore-eos")
    local = run_json("run", "--model", SMOL, "--prompt", prompt, "--temperature", "0", "--max-tokens", str(n_new),
                     "--ignore-eos", "--kv-window-tokens", str(window), "--kv-sink-tokens", str(sinks))
    n_prompt = len(local["prompt_ids"])
    exact_until = window + sinks - n_prompt  # Tokens sampled before any row's window left a position.
    assert local["token_ids"][:exact_until] == exact["token_ids"][:exact_until]
    differs = next((i for i, (a, b) in enumerate(zip(local["token_ids"], exact["token_ids"])) if a != b), None)
    print(f"cascade run: exact attention and sink + window agree on the first {exact_until} tokens, then first "
          f"differ at token {differs}")
    for pp, tp, kv_mb in ((1, 1, 5), (2, 1, 2), (1, 2, 5)):
        text = (config_yaml(SMOL, pp, kv_cache_mb=kv_mb, tensor=tp).replace("max_batched_tokens: 1024", "max_batched_tokens: 64")
                .replace("prefix_caching: true}", "prefix_caching: true, kv_policy: sink_window, "
                         f"kv_window_tokens: {window}, kv_sink_tokens: {sinks}}}")
                .replace("server: {listen: 127.0.0.1:0}", "server: {listen: 127.0.0.1:0, http_listen: 127.0.0.1:0}")
                + "draft: {ngram: {n: 3}, num_tokens: 3, adaptive: false}\n")
        with cluster_from_yaml(text) as (address, _, log_path):
            got = generate(address, "--prompt", prompt, "--temperature", "0", "--max-tokens", str(n_new),
                           "--ignore-eos")
            # TP on Q4_1 sums its partial products in another order (test_tp_parity_smollm2): TP 2
            # is held to run to the end with the same narrowing, PP to `cascade run`'s ids.
            assert len(got["token_ids"]) == n_new
            assert tp > 1 or got["token_ids"] == local["token_ids"], f"PP={pp}: differs from cascade run at " + str(
                next(i for i, (a, b) in enumerate(zip(got["token_ids"], local["token_ids"])) if a != b))
            hidden = n_prompt + n_new - 1 - window - sinks
            assert got["usage"]["kv_hidden_tokens"] == hidden, got["usage"]
            log = open(log_path).read()
            assert f"KV policy sink_window (sinks {sinks}, window {window})" in log, log
            blocks = int(re.search(r"(\d+) KV blocks of 16", log).group(1))
            assert tp > 1 or n_prompt + n_new > 4 * 16 * blocks, (blocks, log)
            m = re.search(r"http front on (\S+)", log)
            body = json.dumps({"prompt": prompt, "max_tokens": 300, "temperature": 0, "ignore_eos": True}).encode()
            req = urllib.request.Request(f"http://{m.group(1)}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=300) as r:
                usage = json.loads(r.read())["usage"]
            assert usage["kv_policy"] == {"name": "sink_window", "hidden_tokens": n_prompt + 300 - 1 - window - sinks}, usage
            metrics = metrics_text(log_path)
            assert "cascade_kv_policy_narrowed_requests_total 2" in metrics, metrics
            assert f"cascade_kv_policy_hidden_tokens_total {hidden + usage['kv_policy']['hidden_tokens']}" in metrics
        print(f"PP={pp} TP={tp}: {n_new} tokens through a pool of {blocks} blocks ({16 * blocks} positions), "
              f"{'identical to cascade run' if tp == 1 else 'to the end'}; "
              f"{hidden} positions hidden from the last; OpenAI usage {usage['kv_policy']}")


# --- Disaggregated serving -----------------------------------------------------------

def disagg_yaml(model, prefill, decode, extra=""):
    """A cluster of one prefill replica (PP x TP = `prefill`) and one decode replica
    (`decode`), n-gram speculation on."""
    n = prefill[0] * prefill[1] + decode[0] * decode[1]
    return (f"model: {{path: {model}}}\n"
            f"parallel: {{disaggregation: {{prefill: {{pipeline: {prefill[0]}, tensor: {prefill[1]}}},"
            f" decode: {{pipeline: {decode[0]}, tensor: {decode[1]}}}}}}}\n"
            f"nodes:\n  - {{name: n0, host: 127.0.0.1, devices: [{', '.join(['cpu'] * n)}], launch: local}}\n"
            "server: {listen: 127.0.0.1:0, http_listen: 127.0.0.1:0}\n"
            "scheduler: {max_num_seqs: 16, max_batched_tokens: 1024, kv_block_size: 16, kv_cache_mb: 64}\n"
            "draft: {ngram: {n: 3}, num_tokens: 3, adaptive: false}\n" + extra)


def metrics_text(log_path):
    m = re.search(r"http front on (\S+)", open(log_path).read())
    assert m, open(log_path).read()
    with urllib.request.urlopen(f"http://{m.group(1)}/metrics", timeout=30) as r:
        return r.read().decode()


def test_disaggregation_parity():
    """Prefill on one replica, decode on another of another split: greedy ids equal `cascade
    run` with n-gram speculation on, every request's KV moved (status: the decode replica
    finished them all; /metrics: one transfer per request, its bytes per token).

    stories260K (F32) changes TP between the phases (1 -> 2, PP 2 -> TP 2, TP 2 -> 1). SmolLM2
    Q4_1 changes PP and keeps TP 1 against `cascade run`, and keeps TP 2 (1 -> 2 stages)
    against a plain TP-2 cluster: with quantized weights a TP size sums the row-parallel
    partial products in its own order, and TP 2 alone already differs from `cascade run` at
    a near-tie of the longer prompt (token 27); a prompt's KV from one TP size and its answer
    from another are a third rounding again. The transfer itself moves bits
    (tests/worker/disaggregation_test.cc)."""
    tp2_reference = {}
    for model, splits in ((STORIES, [((1, 1), (1, 2)), ((2, 1), (1, 2)), ((1, 2), (1, 1))]),
                          (SMOL, [((2, 1), (1, 1)), ((1, 1), (2, 1)), ((1, 2), (2, 2))])):
        need(model)
        name = os.path.basename(model)
        prompts = [("--prompt", "Once upon a time"), ("--prompt", PREFIX_STORY), ("--prompt", "The cat sat on the mat and")]
        local = {p: run_json("run", "--model", model, *p, "--temperature", "0", "--max-tokens", "32", "--ignore-eos")["token_ids"]
                 for p in prompts}
        if model == SMOL:
            with cluster(model, 1, tensor=2) as (address, _, _):
                tp2_reference = {p: generate(address, *p, "--temperature", "0", "--max-tokens", "32",
                                             "--ignore-eos")["token_ids"] for p in prompts}
        for prefill, decode in splits:
            want = tp2_reference if model == SMOL and prefill[1] == 2 else local
            _, transfers, moved, tokens = serve_disaggregated(disagg_yaml(model, prefill, decode), prompts, want,
                                                              f"{name} {prefill}->{decode}")
            assert transfers == len(prompts) and tokens > 0, (transfers, tokens)
            print(f"{name} prefill PP x TP {prefill} -> decode {decode}: identical to "
                  f"{'a TP-2 cluster' if want is tp2_reference else 'cascade run'}; "
                  f"{transfers} transfers, {moved / tokens:.0f} KV bytes per token")
        if model == STORIES:
            check_local_prefill(local, prompts)


def serve_disaggregated(yaml, prompts, want, label):
    """Serves `prompts` greedily through the cluster of `yaml`: ids equal `want`'s, with
    speculation, and the decode replica finished them all. The log, and from /metrics the
    KV transfers, their bytes and their positions."""
    with cluster_from_yaml(yaml) as (address, _, log_path):
        for p in prompts:
            got = generate(address, *p, "--temperature", "0", "--max-tokens", "32", "--ignore-eos")
            assert got["token_ids"] == want[p], f"{label} {p}: {got['token_ids']} != {want[p]}"
            assert got.get("speculative", {}).get("steps", 0) > 0, got
        rc, st = status(address)
        metrics = metrics_text(log_path)
        log = open(log_path).read()
    assert rc == 0, st
    rows = re.findall(r"replica (\d+) \((\w+)\): .*?finished (\d+)", st)
    assert [(role, int(done)) for _, role, done in rows] == [("prefill", 0), ("decode", len(prompts))], st
    value = lambda name: float(re.search(rf"^{name} (\S+)", metrics, re.M).group(1))  # noqa: E731
    return (log, int(value("cascade_kv_transfer_bytes_count")), value("cascade_kv_transfer_bytes_sum"),
            int(value("cascade_kv_transfer_tokens_total")))


def check_local_prefill(want, prompts):
    """Conditional disaggregation (parallel.disaggregation.local_prefill_tokens: 16): the
    two short prompts (5 and 11 tokens) are prefilled on the decode replica and move no KV,
    the long one (55) moves its KV; the greedy ids stay `cascade run`'s."""
    yaml = disagg_yaml(STORIES, (1, 1), (1, 2)).replace("}}}\n", "}, local_prefill_tokens: 16}}\n", 1)
    log, transfers, _, tokens = serve_disaggregated(yaml, prompts, want, "local prefill")
    assert "prompts of <= 16 tokens prefilled on the decode side" in log, log
    assert (transfers, tokens) == (1, 55), (transfers, tokens)
    print("stories260K with local_prefill_tokens 16: identical to cascade run; the 5- and 11-token prompts "
          "prefilled on the decode replica, only the 55-token prompt's KV moved (1 transfer, 55 positions)")


def listening_pid(port, pids):
    """Which of `pids` listens on TCP `port` (from /proc: the socket's inode among its fds)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            for line in open(table).read().splitlines()[1:]:
                f = line.split()
                if int(f[1].split(":")[1], 16) == port and f[3] == "0A":  # LISTEN.
                    inodes.add(f[9])
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").strip("socket:[]") in inodes:
                    return pid
            except OSError:
                pass
    raise AssertionError(f"no worker listens on port {port}")


def replica_worker_pids(address, proc):
    """The worker pids in replica order (cascade status lists the workers replica by replica)."""
    pids = [int(w) for w in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()]
    _, text = status(address)
    ports = [int(m.group(1)) for m in re.finditer(r"^\S+\s+\[.*?\s127\.0\.0\.1:(\d+)\s", text, re.M)]
    assert len(ports) == len(pids), (text, pids)
    return [listening_pid(port, pids) for port in ports]


def test_disaggregation_worker_killed():
    """No request is lost when a worker of either side dies (kill -9) while KV moves: every
    KV send is held 2 s (CASCADE_KV_SEND_DELAY_MS_FOR_TESTING, fault injection the local
    workers inherit), and the kill lands inside that window. The prefill worker killed: the
    decode side's receive fails and the request recomputes its KV there; requests still
    queued or prefilling move to the decode replica and prefill there. The decode worker
    killed: its replica gives up the receive, and its requests move to the prefill replica,
    which decodes them itself. Every stream ends with the ids of an undisturbed run (greedy
    and seeded: the sampler's draws are keyed by position); the dead replica rebuilds, every
    worker joins a new KV group, and a new request's KV moves again."""
    need(STORIES)
    modes = [("--temperature", "0"), ("--temperature", "0.9", "--seed", "3")]
    n = 400
    prompts = [("--prompt-ids", "1"), ("--prompt", PREFIX_STORY)]
    jobs = [(p, m) for p in prompts for m in modes]
    # Undisturbed: one replica with the same n-gram speculation (a seeded draw depends on it).
    with cluster(STORIES, 1, extra="draft: {ngram: {n: 3}, num_tokens: 3, adaptive: false}\n") as (address, _, _):
        reference = {j: generate(address, *j[0], *j[1], "--max-tokens", str(n), "--ignore-eos")["token_ids"]
                     for j in jobs}
    os.environ["CASCADE_KV_SEND_DELAY_MS_FOR_TESTING"] = "2000"
    try:
        for side in ("prefill", "decode"):
            with cluster_from_yaml(disagg_yaml(STORIES, (1, 1), (1, 1))) as (address, proc, log_path):
                workers = replica_worker_pids(address, proc)  # [prefill, decode].
                victim = workers[0] if side == "prefill" else workers[1]
                streams = [(j, subprocess.Popen([CASCADE, "generate", "--server", address, *j[0], *j[1],
                                                 "--max-tokens", str(n), "--ignore-eos", "--json"],
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
                           for j in jobs]
                time.sleep(1.0)  # The first transfer waits in its 2 s hold.
                assert all(s.poll() is None for _, s in streams), "a stream ended before the kill"
                os.kill(victim, signal.SIGKILL)
                for j, s in streams:
                    out, err = s.communicate(timeout=300)
                    assert s.returncode == 0, err
                    assert json.loads(out)["token_ids"] == reference[j], f"{side} killed, {j}: ids differ"
                deadline = time.time() + 120
                while time.time() < deadline and not all(serving for serving, _ in replica_lines(address).values()):
                    time.sleep(0.5)
                rows = replica_lines(address)
                assert len(rows) == 2 and all(serving for serving, _ in rows.values()), status(address)[1]
                wait_for_log(log_path, r"(?s)rejoined the KV group.*rejoined the KV group", 1200)
                count = r"^cascade_kv_transfer_bytes_count (\d+)"
                moved_before = int(re.search(count, metrics_text(log_path), re.M).group(1))
                after = generate(address, *prompts[0], *modes[1], "--max-tokens", "50", "--ignore-eos")["token_ids"]
                assert after == reference[(prompts[0], modes[1])][:50]
                assert int(re.search(count, metrics_text(log_path), re.M).group(1)) == moved_before + 1, \
                    "no KV moved after the KV group was rejoined"
                log = open(log_path).read()
            lost = re.findall(r"KV transfer \d+ failed \(.*recomputes its KV here", log)
            moved = re.findall(r"moved to another replica", log)
            # The prefill side's death: a receive fails and recomputes (or requests not yet
            # handed off move). The decode side's: its requests move to the prefill replica.
            assert lost or moved if side == "prefill" else moved, log
            print(f"kill -9 of the {side} worker while KV moved, {len(streams)} streams of {n} tokens: every stream "
                  f"identical to an undisturbed run ({len(lost)} transfer(s) lost, {len(moved)} evacuation(s)); both "
                  "replicas serving again, in a new KV group, and KV moves again")
    finally:
        del os.environ["CASCADE_KV_SEND_DELAY_MS_FOR_TESTING"]


# --- Speculative decoding -----------------------------------------------------------

def spec_topologies():
    return [(1, 1), (2, 1), (1, 2), (2, 2)]  # (pipeline, tensor)


def check_spec_parity(model, prompts, drafts, n_tokens, reference=None, topologies=None):
    """Greedy ids with speculation equal those without, for every drafter and PP x TP.

    `reference` maps a prompt to ids that every topology must give (cascade run's, for
    models whose TP logits are exact); without it each cluster's own --no-speculate run
    is the reference. Each drafter must also have verified drafts (the stats say so).

    The clusters draft num_tokens every step (adaptive: false): the adaptive policy picks
    k from measured step times, so it may rightly decide that drafting does not pay on a
    tiny model and verify nothing, while parity must hold, and be checked, for any k."""
    for name, draft in drafts.items():
        fixed = draft[:-1] + ", adaptive: false}"
        for pp, tp in topologies or spec_topologies():
            with cluster(model, pp, tensor=tp, extra=f"draft: {fixed}\n") as (address, _, _):
                accepted = 0
                for prompt in prompts:
                    args = (*prompt, "--temperature", "0", "--max-tokens", str(n_tokens), "--ignore-eos")
                    got = generate(address, *args)
                    want = reference[prompt] if reference else generate(address, *args, "--no-speculate")["token_ids"]
                    assert got["token_ids"] == want, f"{name} PP={pp} TP={tp} {prompt}: {got['token_ids']} != {want}"
                    spec = got.get("speculative")
                    assert spec and spec["steps"] > 0, f"{name} PP={pp} TP={tp}: no verify step ran: {got}"
                    accepted += spec["accepted_tokens"]
                rc, text = status(address)
                assert rc == 0 and f"speculative ({name.split('-')[0]} drafter)" in text, text
                print(f"{name} PP={pp} TP={tp}: identical, {accepted} drafts accepted")


def test_spec_parity_stories():
    need(STORIES)
    prompts = [("--prompt-ids", "1"), ("--prompt", "Once upon a time")]
    ref = {p: run_json("run", "--model", STORIES, *p, "--temperature", "0", "--max-tokens", "40", "--ignore-eos")["token_ids"]
           for p in prompts}
    assert ref[prompts[0]][:20] == STORIES_IDS
    check_spec_parity(STORIES, prompts, {"ngram": "{ngram: {n: 3}}", "self": "{self: {layers: 2}, num_tokens: 3}",
                                         "model": f"{{model: {STORIES}, num_tokens: 5}}"}, 40, ref)


def test_spec_parity_tinystories():
    """The F32 safetensors target with its Q8_0 GGUF copy as the draft model."""
    need(TINY_HF, TINY_GGUF)
    prompts = [("--prompt-ids", "1"), ("--prompt", "Lily and Ben went to the park")]
    ref = {p: run_json("run", "--model", TINY_HF, *p, "--temperature", "0", "--max-tokens", "32", "--ignore-eos")["token_ids"]
           for p in prompts}
    check_spec_parity(TINY_HF, prompts, {"ngram": "{ngram: {n: 2}}", "self": "{self: {layers: 1}}",
                                         "model": f"{{model: {TINY_GGUF}}}"}, 32, ref)


def test_spec_parity_smollm2():
    """SmolLM2 against its own plain decoding in the same cluster (at TP=2 the cluster's
    ids are not cascade run's bit for bit: see test_tp_parity_smollm2)."""
    need(SMOL)
    prompts = [("--chat", "Repeat exactly: the cat sat on the mat, the cat sat on the hat."),
               ("--prompt", "def fibonacci(n):")]
    check_spec_parity(SMOL, prompts, {"ngram": "{ngram: {n: 3}}"}, 24)
    check_spec_parity(SMOL, prompts[:1], {"self": "{self: {layers: 20}}",
                                          "model": f"{{model: {SMOL}, num_tokens: 3}}"}, 16,
                      topologies=[(1, 1), (2, 2)])


def chi_square_critical(df):
    """Chi-square critical value at p = 0.001 (Wilson-Hilferty)."""
    z, a = 3.0902, 2.0 / (9.0 * df)
    return df * (1 - a + z * a ** 0.5) ** 3


def test_spec_sampling_distribution():
    """Temperature 1 on stories260K: the tokens speculation emits follow the same law as
    plain sampling. 20,000 fixed-seed requests each way, 3 tokens from BOS; tokens 2 and 3
    come out of verify steps (greedy drafts by a drafter worker holding the same model, so
    a draft passes with probability p(argmax): both outcomes are frequent). Two-sample
    chi-square per position over the tokens seen >= 20 times (the rest pooled), p > 0.001."""
    need(STORIES)
    n = 20000
    with cluster(STORIES, 1, extra=f"draft: {{model: {STORIES}, num_tokens: 2, max_batch: 0, adaptive: false}}\n") as (address, _, _):
        with tempfile.TemporaryDirectory() as d:
            runs = {}
            for label, flags in (("spec", []), ("plain", ["--no-speculate"])):
                out = os.path.join(d, label + ".jsonl")
                subprocess.run([CASCADE, "bench", "--server", address, "--requests", str(n), "--concurrency", "16",
                                "--prompt-ids", "1", "--max-tokens", "3", "--temperature", "1", "--ids-out", out, *flags],
                               check=True, capture_output=True, timeout=900)
                runs[label] = [json.loads(line) for line in open(out)]
                assert len(runs[label]) == n and all(len(r) == 3 for r in runs[label]), label
        rc, text = status(address)
        m = re.search(r"acceptance ([\d.]+)%", text)
        assert m and 1 < float(m.group(1)) < 99, text  # Drafts were both accepted and rejected.
    for pos in (1, 2):
        a = [r[pos] for r in runs["spec"]]
        b = [r[pos] for r in runs["plain"]]
        counts = {}
        for t in a:
            counts.setdefault(t, [0, 0])[0] += 1
        for t in b:
            counts.setdefault(t, [0, 0])[1] += 1
        cats, rest = [], [0, 0]
        for t, (x, y) in counts.items():
            if x + y >= 20:
                cats.append((x, y))
            else:
                rest[0] += x
                rest[1] += y
        if sum(rest) > 0:
            cats.append(tuple(rest))
        chi2 = 0.0
        for x, y in cats:
            e = (x + y) / 2  # Equal sample sizes.
            chi2 += (x - e) ** 2 / e + (y - e) ** 2 / e
        crit = chi_square_critical(len(cats) - 1)
        print(f"position {pos}: {len(cats)} categories, chi2 {chi2:.1f} < {crit:.1f}; {text.splitlines()[-1]}")
        assert chi2 < crit, f"position {pos}: chi2 {chi2:.1f} >= {crit:.1f}"


def test_spec_errors():
    """Bad drafter configs exit 2 naming the key; a bad per-request field is refused."""
    need(STORIES, SMOL)
    with tempfile.TemporaryDirectory() as d:
        cases = {
            f"model: {{path: {SMOL}}}\nnodes: [{{name: a, host: h, devices: [cpu]}}]\ndraft: {{model: {STORIES}}}\n":
                "target vocab 49152 tokens, draft vocab 512",
            f"model: {{path: {STORIES}}}\nnodes: [{{name: a, host: h, devices: [cpu]}}]\ndraft: {{self: {{layers: 5}}}}\n":
                "draft.self.layers: 5 must be below the model's 5 layers",
            f"model: {{path: {STORIES}}}\nnodes: [{{name: a, host: h, devices: [cpu]}}]\ndraft: {{model: /nope.gguf}}\n":
                "draft.model",
        }
        for text, want in cases.items():
            cfg = os.path.join(d, "bad.yaml")
            open(cfg, "w").write(text)
            p = subprocess.run([COORDINATOR, "--config", cfg], capture_output=True, text=True, timeout=60)
            assert p.returncode == 2 and want in p.stderr, (text, p.returncode, p.stderr)
    with cluster(STORIES, 1, extra="draft: {ngram: {n: 3}}\n") as (address, _, _):
        err = generate(address, "--prompt-ids", "1", "--draft-tokens", "17", expect_rc=2)
        assert "INVALID_ARGUMENT" in err and "speculative.num_tokens" in err, err
        got = generate(address, "--prompt-ids", "1", "--temperature", "0", "--max-tokens", "20", "--no-speculate")
        assert got["token_ids"] == STORIES_IDS and "speculative" not in got, got


if __name__ == "__main__":
    globals()["test_" + sys.argv[2]]()
    print("PASS")
