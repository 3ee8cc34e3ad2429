#!/usr/bin/env python3
"""End-to-end tests of the `cascade` binary: real processes, real files, checked output.

Usage: cli_test.py CASCADE_BINARY TEST_NAME. Each test is registered with ctest
separately (tests/cli/CMakeLists.txt). Tests needing ../shared/testdata or the default
model print a reason and exit 0 with "SKIP" when the file is absent (ctest maps the
SKIP output to a skipped test). To add a test, write a `test_<name>` function and list
it in CMakeLists.txt.
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile

BIN = sys.argv[1]
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testdata import ROOT, SMOL, STORIES, STORIES_IDS, TINY_GGUF, TINY_HF, as_transformers5, hf_copy, need  # noqa: E402


def cascade(*args, expect_rc=0):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300)
    assert p.returncode == expect_rc, f"cascade {' '.join(args)}: rc {p.returncode}, stderr: {p.stderr}"
    return p


def fails_cleanly(*args, mention):
    p = cascade(*args, expect_rc=2)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one error line, got: {p.stderr!r}"
    assert mention in lines[0], f"error {lines[0]!r} should mention {mention!r}"
    assert "Check failed" not in p.stderr and "terminate" not in p.stderr


def test_tokenize_vocab_only():
    """`cascade tokenize` reads the tokenizer alone: llama.cpp's vocabulary-only GGUF files
    (any architecture, e.g. gpt2) give the ids of their .inp/.out golden pairs (made by
    the reference tokenizers), without the special tokens."""
    vocab_dir = os.path.join(os.path.dirname(STORIES), "..", "vocab")
    files = sorted(f for f in os.listdir(vocab_dir) if f.endswith(".gguf")) if os.path.isdir(vocab_dir) else []
    if not files:
        need(os.path.join(vocab_dir, "ggml-vocab-gpt-2.gguf"))
    checked = 0
    for name in files:
        path = os.path.join(vocab_dir, name)
        texts = open(path + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
        texts[-1] = texts[-1].removesuffix("\n__ggml_vocab_test__")
        wants = open(path + ".out").read().split("\n")
        # Arguments cannot carry every case (empty text, NUL): take the printable ones.
        for text, want in list(zip(texts, wants))[:40]:
            if not text.strip() or "\0" in text:
                continue
            got = cascade("tokenize", "--model", path, "--text", text).stdout.split()
            assert [int(x) for x in got] == [int(x) for x in want.split()], (name, text, got, want)
            checked += 1
    assert checked > 0
    print(f"{checked} golden cases of {len(files)} vocabulary-only GGUF files tokenized as the reference")


def test_info_configs():
    need(STORIES, TINY_HF, TINY_GGUF, SMOL)
    # Values from ../shared/testdata/README.md.
    expected = {
        STORIES: dict(n_embd=64, n_layers=5, n_heads=8, n_kv_heads=4, n_ff=172, head_dim=8, n_vocab=512, tied_embeddings=True),
        TINY_HF: dict(n_embd=128, n_layers=2, n_heads=8, n_kv_heads=4, n_ff=384, n_vocab=2048, n_ctx_train=512,
                      rope_theta=10000.0, norm_eps=1e-6, tied_embeddings=True, rope_layout="rotate_half"),
        TINY_GGUF: dict(n_embd=128, n_layers=2, n_heads=8, n_kv_heads=4, n_ff=384, n_vocab=2048, n_ctx_train=512,
                        rope_theta=10000.0, tied_embeddings=True, rope_layout="adjacent_pairs"),
        SMOL: dict(n_embd=576, n_layers=30, n_heads=9, n_kv_heads=3, head_dim=64, n_ff=1536, n_vocab=49152,
                   rope_theta=100000.0, norm_eps=1e-5, tied_embeddings=True),
    }
    for path, want in expected.items():
        info = json.loads(cascade("info", "--model", path, "--json").stdout)
        for k, v in want.items():
            got = info["config"][k]
            ok = abs(got - v) <= 1e-6 * abs(v) if isinstance(v, float) else got == v
            assert ok, f"{path}: {k} = {got}, expected {v}"
        assert info["n_tensors"] > 0 and sum(t["count"] for t in info["tensors_by_type"].values()) == info["n_tensors"]
    smol = json.loads(cascade("info", "--model", SMOL, "--json").stdout)
    assert set(smol["tensors_by_type"]) == {"f32", "q4_1", "q8_0"}, smol["tensors_by_type"]
    text = cascade("info", "--model", SMOL).stdout
    assert "n_layers        30" in text and "q4_1" in text


def test_info_defaulted():
    """`cascade info` lists each key the file does not give, with the value taken and its
    rule; the TinyStories checkpoint (transformers 4.41) omits only head_dim. Re-saved as
    transformers 5 writes it (rope_parameters, dtype), it is the same model; without its
    base and epsilon, it gets LlamaConfig's and says so, in the listing and in the load log
    (`cascade run` with CASCADE_LOG=info, as the servers always log)."""
    need(TINY_HF)
    info = json.loads(cascade("info", "--model", TINY_HF, "--json").stdout)["config"]
    assert [d["key"] for d in info["defaulted"]] == ["head_dim"], info["defaulted"]
    assert info["defaulted"][0]["value"] == "16" and "hidden_size / num_attention_heads" in info["defaulted"][0]["rule"]

    def without_base(c):
        del c["rope_theta"], c["rms_norm_eps"]

    with tempfile.TemporaryDirectory() as tmp:
        v5 = json.loads(cascade("info", "--model", hf_copy(TINY_HF, tmp + "/v5", as_transformers5), "--json").stdout)["config"]
        assert {**v5, "name": ""} == {**info, "name": ""}, (v5, info)
        bare = hf_copy(TINY_HF, tmp + "/bare", without_base)
        got = json.loads(cascade("info", "--model", bare, "--json").stdout)["config"]
        listed = {d["key"]: d for d in got["defaulted"]}
        assert set(listed) == {"head_dim", "rope_theta", "rms_norm_eps"}, listed
        assert listed["rope_theta"]["value"] == "10000.0" and "LlamaConfig default" in listed["rope_theta"]["rule"]
        assert listed["rms_norm_eps"]["value"] == "1e-06"
        p = cascade("info", "--model", bare)
        assert "defaulted       3 keys the file does not give:" in p.stdout, p.stdout
        assert "  rope_theta = 10000.0 (LlamaConfig default, transformers 4.57.6 and 5.25.0)" in p.stdout, p.stdout
        assert p.stderr == "", p.stderr  # The CLI's stderr is for errors and warnings ...
        env = {**os.environ, "CASCADE_LOG": "info"}  # ... and the load log when asked for.
        p = subprocess.run([BIN, "run", "--model", bare, "--prompt-ids", "1", "--max-tokens", "2"], capture_output=True,
                           text=True, timeout=60, env=env)
        assert p.returncode == 0, p.stderr
        assert "rope_theta = 10000.0 (not in the file: LlamaConfig default" in p.stderr, p.stderr
    print("defaulted keys listed by cascade info and logged; the 5.x layout is the same model")


def test_info_cpu_kernels():
    """The CPU kernel level moves results (f32 summation order), so `cascade info` names it and
    the rule that chose it, and `cascade run` logs it: the best this CPU runs, or the cap that
    CASCADE_CPU_ISA sets."""
    need(STORIES)
    levels = ("generic", "avx2", "avx512")
    best = json.loads(cascade("info", "--model", STORIES, "--json").stdout)["cpu_kernels"]
    assert best.split(" ")[0] in levels and best.endswith("(the best this CPU runs)"), best
    assert f"cpu kernels     {best}\n" in cascade("info", "--model", STORIES).stdout
    capped = subprocess.run([BIN, "info", "--model", STORIES, "--json"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "CASCADE_CPU_ISA": "generic"})
    got = json.loads(capped.stdout)["cpu_kernels"]
    if best.startswith("generic"):
        assert got == best, got
    else:
        assert got == f"generic (capped by CASCADE_CPU_ISA=generic; this CPU runs {best.split(' ')[0]})", got
    p = subprocess.run([BIN, "run", "--model", STORIES, "--prompt-ids", "1", "--max-tokens", "2"], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "CASCADE_LOG": "info", "CASCADE_CPU_ISA": "generic"})
    assert p.returncode == 0 and f"cpu kernels: {got}" in p.stderr, p.stderr
    print(f"cascade info: cpu kernels {best}; capped: {got}")


def test_info_cuda_kernels():
    """The CUDA kernel choices move results on a GPU, so `cascade info` names each, with the
    variable that set it or the rule that defaults it, with or without a GPU here."""
    need(STORIES)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_CUDA_")}
    got = json.loads(subprocess.run([BIN, "info", "--model", STORIES, "--json"], capture_output=True, text=True,
                                    timeout=60, env=env).stdout)["cuda_kernels"]
    assert got.startswith("reference (CASCADE_CUDA_KERNELS unset: the tuned kernels stay off until measured"), got
    assert "bf16 (CASCADE_CUDA_QUANT_GEMM unset" in got and "f32 (CASCADE_CUDA_PREFILL_ATTENTION unset" in got, got
    tuned = subprocess.run([BIN, "info", "--model", STORIES], capture_output=True, text=True, timeout=60,
                           env={**env, "CASCADE_CUDA_KERNELS": "tuned", "CASCADE_CUDA_QUANT_GEMM": "int8"}).stdout
    line = next(l for l in tuned.splitlines() if l.startswith("cuda kernels    "))
    assert "tuned (CASCADE_CUDA_KERNELS=tuned)" in line and "int8 (CASCADE_CUDA_QUANT_GEMM=int8)" in line, line
    print(f"cascade info: cuda kernels {got}")


def test_tokenize():
    need(STORIES, SMOL)
    plain = json.loads(cascade("tokenize", "--model", STORIES, "--text", "Once upon a time", "--json").stdout)
    special = json.loads(cascade("tokenize", "--model", STORIES, "--text", "Once upon a time", "--add-special", "--json").stdout)
    assert plain["ids"][:3] == [403, 407, 261], plain  # "Once upon a" as in the README's greedy run.
    assert special["ids"] == [1] + plain["ids"], special
    assert len(plain["pieces"]) == len(plain["ids"])
    chat = json.loads(cascade("tokenize", "--model", SMOL, "--chat", "Hi", "--json").stdout)
    # ChatML: <|im_start|> (1) ... <|im_end|> (2), ending with the assistant header.
    assert chat["ids"][0] == 1 and 2 in chat["ids"] and chat["pieces"][-1] == "Ċ", chat
    ids_line = cascade("tokenize", "--model", STORIES, "--text", "Once upon a time").stdout.split()
    assert list(map(int, ids_line)) == plain["ids"]


def test_run_json_stories():
    need(STORIES)
    out = json.loads(cascade("run", "--model", STORIES, "--prompt-ids", "1", "--temperature", "0",
                             "--max-tokens", "20", "--json").stdout)
    assert set(out) == {"prompt_ids", "token_ids", "text", "finish_reason", "timings", "kv_cache",
                        "cpu_prefill_activations", "max_batched_tokens"}, out.keys()
    assert out["max_batched_tokens"] == 2048, out  # The default: scheduler.max_batched_tokens'.
    assert out["kv_cache"]["dtype"] == "f16" and out["kv_cache"]["bytes"] > 0, out["kv_cache"]  # The default.
    assert out["cpu_prefill_activations"] == "f32", out  # The default: exact products.
    assert set(out["timings"]) == {"load_s", "prefill_tok_s", "decode_tok_s"}
    assert out["prompt_ids"] == [1]
    assert out["token_ids"] == STORIES_IDS, out["token_ids"]
    assert out["finish_reason"] == "length"
    assert out["text"].startswith("Once upon a time, there was a little girl named Lily.")
    # Multi-token prompt (prefill path): continue from the first 10 reference ids.
    cont = json.loads(cascade("run", "--model", STORIES, "--prompt-ids", ",".join(map(str, [1] + STORIES_IDS[:10])),
                              "--temperature", "0", "--max-tokens", "10", "--json").stdout)
    assert cont["token_ids"] == STORIES_IDS[10:], cont["token_ids"]
    # The same prompt prefilled 4 tokens a pass (4 + 4 + 3) continues the same way.
    pieces = json.loads(cascade("run", "--model", STORIES, "--prompt-ids", ",".join(map(str, [1] + STORIES_IDS[:10])),
                                "--temperature", "0", "--max-tokens", "10", "--max-batched-tokens", "4",
                                "--json").stdout)
    assert pieces["token_ids"] == STORIES_IDS[10:] and pieces["max_batched_tokens"] == 4, pieces
    fails_cleanly("run", "--model", STORIES, "--prompt-ids", "1", "--max-batched-tokens", "0",
                  mention="--max-batched-tokens must be >= 1")


def test_perplexity_sink_window():
    """`cascade perplexity`: the same rows score the same with and without sink + window
    attention until the window first leaves a position behind (rows before sinks + window
    are exact), differ after it, and the perplexity is exp of the mean NLL it reports. The
    window prefilled 48 tokens a pass (48 + 48 + 48 + 16) scores every row as one pass does."""
    need(SMOL)
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(open("/usr/share/common-licenses/GPL-3").read()[:4000])
        f.flush()
        run = lambda *extra: json.loads(cascade("perplexity", "--model", SMOL, "--file", f.name, "--ctx", "160",
                                                "--json", *extra).stdout)
        exact, narrow = run(), run("--kv-window-tokens", "40", "--kv-sink-tokens", "4")
        pieces = run("--max-batched-tokens", "48")
    assert len(exact["nll"]) == len(narrow["nll"]) == 159
    assert pieces["nll"] == exact["nll"]
    assert narrow["narrowed_rows"] == 159 - 44 and exact["narrowed_rows"] == 0
    assert narrow["nll"][:44] == exact["nll"][:44]
    assert narrow["nll"][44:] != exact["nll"][44:]
    assert abs(exact["perplexity"] - math.exp(sum(exact["nll"]) / 159)) < 1e-6 * exact["perplexity"]
    assert 1 < exact["perplexity"] < 1000, exact["perplexity"]
    print(f"perplexity exact {exact['perplexity']:.3f}, sink + window {narrow['perplexity']:.3f}")


def test_run_streams_text():
    need(STORIES)
    p = cascade("run", "--model", STORIES, "--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "30")
    assert "little girl named Lily" in p.stdout, p.stdout


def test_run_seed():
    need(STORIES)
    args = ["run", "--model", STORIES, "--prompt-ids", "1", "--temperature", "1.0", "--max-tokens", "24", "--json"]
    a = json.loads(cascade(*args, "--seed", "3").stdout)["token_ids"]
    b = json.loads(cascade(*args, "--seed", "3").stdout)["token_ids"]
    c = json.loads(cascade(*args, "--seed", "4").stdout)["token_ids"]
    assert a == b and a != c, (a, b, c)


def test_chat_smollm2():
    need(SMOL)
    # The model's own template (its GGUF's Jinja) renders the chat: without a system message
    # it opens with the template's default one, which the built-in ChatML leaves out.
    question = ["--chat", "What is the capital of France?", "--max-tokens", "1", "--json"]
    own = json.loads(cascade("run", "--model", SMOL, *question).stdout)["prompt_ids"]
    builtin = json.loads(cascade("run", "--model", SMOL, *question, "--chat-template", "chatml").stdout)["prompt_ids"]
    assert len(own) > len(builtin) and own[-len(builtin):] == builtin, (own, builtin)
    # (The question names the language: without it the first token is a near tie between
    # "The" and "La", 0.02-0.13 nats, that rounding differences between CPUs decide.)
    out = json.loads(cascade("run", "--model", SMOL, "--chat", "What is the capital of France? Answer in English.", "--system",
                             "You are a helpful assistant.", "--temperature", "0", "--max-tokens", "32",
                             "--json").stdout)
    assert "Paris" in out["text"], out["text"]
    assert out["finish_reason"] == "stop"  # Ends with <|im_end|>, which is not in the text.
    assert "<|im_end|>" not in out["text"]


def test_errors_are_one_line_exit_2():
    need(STORIES)
    fails_cleanly("info", mention="--model")
    fails_cleanly("info", "--model", "/nonexistent/x.gguf", mention="/nonexistent/x.gguf")
    fails_cleanly("info", "--model", STORIES, "--bogus", mention="--bogus")
    fails_cleanly("nosuchcommand", mention="nosuchcommand")
    with tempfile.TemporaryDirectory() as d:
        cut = os.path.join(d, "cut.gguf")
        with open(STORIES, "rb") as f, open(cut, "wb") as g:
            g.write(f.read()[:300000])
        fails_cleanly("run", "--model", cut, "--prompt-ids", "1", mention="cut.gguf")
        junk = os.path.join(d, "junk.gguf")
        with open(junk, "wb") as g:
            g.write(b"not a model at all")
        fails_cleanly("info", "--model", junk, mention="not a GGUF file")
    fails_cleanly("run", "--model", STORIES, "--prompt-ids", "1,x", mention="prompt-ids")
    fails_cleanly("run", "--model", STORIES, "--prompt-ids", "100000", mention="vocabulary")
    fails_cleanly("run", "--model", STORIES, "--prompt-ids", "1", "--temperature", "-1", mention="temperature")
    fails_cleanly("run", "--model", STORIES, "--prompt-ids", "1", "--top-p", "0", mention="top_p")
    fails_cleanly("run", "--model", STORIES, "--prompt", "a", "--chat", "b", mention="exactly one")
    fails_cleanly("run", "--model", STORIES, "--prompt-ids", "1", "--cpu-prefill-activations", "fp16",
                  mention="--cpu-prefill-activations must be f32 or bf16, got 'fp16'")
    # stories260K has no chat template: the error names the way out.
    fails_cleanly("run", "--model", STORIES, "--chat", "hello", mention="--chat-template")
    # An oversized prompt is refused, not truncated.
    fails_cleanly("run", "--model", STORIES, "--ctx", "8", "--prompt-ids", ",".join(["1"] * 9), mention="context")


# Every option of every binary (and `cascade` subcommand), as its --help must list it.
GENERATION = ["max-tokens", "temperature", "top-k", "top-p", "min-p", "seed", "repeat-penalty", "presence-penalty",
              "frequency-penalty", "logprobs", "stop", "stop-ids", "ignore-eos"]
PROMPT = ["prompt", "prompt-ids", "chat", "system", "chat-template"]
OPTIONS = {
    ("cascade-coordinator",): ["config", "worker-threads", "startup-timeout", "list-workers"],
    ("cascade-worker",): ["coordinator", "node", "device", "threads", "listen", "advertise", "draft", "ca",
                          "token-file", "insecure", "join-timeout", "refuse-token-for-testing"],
    ("cascade", "info"): ["model", "json"],
    ("cascade", "tokenize"): ["model", "text", "chat", "system", "chat-template", "add-special", "json"],
    ("cascade", "run"): ["model", *PROMPT, *GENERATION, "threads", "ctx", "kv-type", "max-batched-tokens", "json",
                         "kv-window-tokens",
                         "kv-sink-tokens", "cpu-prefill-activations"],
    ("cascade", "perplexity"): ["model", "file", "ctx", "threads", "max-batched-tokens", "json", "kv-window-tokens",
                                "kv-sink-tokens", "cpu-prefill-activations"],
    ("cascade", "generate"): ["server", "tls-ca", *PROMPT, *GENERATION, "no-speculate", "draft-tokens",
                               "json-schema", "json-object", "grammar", "regex", "timeout", "json"],
    ("cascade", "chat"): ["server", "tls-ca", "system", *[g for g in GENERATION if g != "logprobs"], "timeout"],
    ("cascade", "status"): ["server", "tls-ca", "wait", "timeout"],
    ("cascade", "bench"): ["server", "tls-ca", "requests", "concurrency", "prompt-tokens", "max-tokens", "temperature", "chat",
                           "prompt-ids", "no-speculate", "draft-tokens", "label", "json", "ids-out"],
}


def test_help_every_binary():
    """`--help` and `-h` print the usage on stdout and exit 0 for every binary and `cascade`
    command, one line per option; every option listed is accepted (`--name=x --help` still
    exits 0), and an unknown option fails pointing to --help."""
    bin_dir = os.path.dirname(BIN)
    for command, options in OPTIONS.items():
        argv = [os.path.join(bin_dir, command[0]), *command[1:]]
        name = " ".join(command)
        for flag in ("--help", "-h"):
            p = subprocess.run([*argv, flag], capture_output=True, text=True, timeout=60)
            assert p.returncode == 0 and p.stderr == "", f"{name} {flag}: rc {p.returncode}, stderr {p.stderr!r}"
            assert p.stdout.startswith(f"usage: {name} "), p.stdout
        listed = re.findall(r"^  --([a-z-]+)\b", p.stdout, re.M)
        assert listed == options, f"{name} --help lists {listed}, want {options}:\n{p.stdout}"
        for line in p.stdout.splitlines()[2:]:
            assert re.match(r"^  (-h, )?--[a-z-]+( \S+)?  +\S", line), f"{name}: option line without help: {line!r}"
        for option in options:
            p = subprocess.run([*argv, f"--{option}=x", "--help"], capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, f"{name} --{option}=x --help: rc {p.returncode}: {p.stderr}"
        p = subprocess.run([*argv, "--no-such-option"], capture_output=True, text=True, timeout=60)
        assert p.returncode in (2, 64) and f"unknown option '--no-such-option' (see `{name} --help`)" in p.stderr, \
            (name, p.returncode, p.stderr)
    p = subprocess.run([BIN, "-h"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "cascade COMMAND --help" in p.stdout, p
    print(f"{len(OPTIONS)} commands: --help lists every option")


if __name__ == "__main__":
    globals()["test_" + sys.argv[2]]()
    print("PASS")
