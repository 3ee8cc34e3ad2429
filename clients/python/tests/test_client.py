#!/usr/bin/env python3
"""End-to-end tests of cascade-client: the package is installed with pip into a temporary
directory (proving that it builds, stubs generated from proto/, and installs), then run
against a real cluster (a `cascade-coordinator` on a loopback port and its workers) of the
default model, SmolLM2-135M-Instruct.

Usage: test_client.py BUILD_BIN_DIR [unittest args]   (under scripts/python_deps.sh, which
provides grpcio, grpcio-tools, protobuf and wheel; ctest's `python_client` runs it so).
Prints SKIP when the model is absent. To add a case, add a `test_*` method to ClientTest.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(PACKAGE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from testdata import SMOL, need  # noqa: E402

BIN = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bin")
CONFIG = f"""model: {{path: {SMOL}}}
parallel: {{pipeline: 2, tensor: 1}}
nodes:
  - {{name: n0, host: 127.0.0.1, devices: [cpu, cpu], launch: local}}
server: {{listen: 127.0.0.1:0}}
scheduler: {{max_num_seqs: 8, max_batched_tokens: 1024, kv_block_size: 16, kv_cache_mb: 64}}
"""
# With a system message: without one, SmolLM2's own template opens with its default
# ("You are a helpful AI assistant named SmolLM..."), after which the 135M model rambles.
# The question names the language: without it SmolLM2-135M's first token is a near tie
# between "The" and "La" that rounding differences between CPUs decide.
QUESTION = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the capital of France? Answer in English."}]


def setUpModule():
    global TMP, INSTALLED, ADDRESS, COORDINATOR, LOG, LOG_FILE
    TMP = tempfile.TemporaryDirectory()
    INSTALLED = os.path.join(TMP.name, "site")
    # No build isolation: the build takes grpcio-tools (and setuptools, wheel) from the
    # environment python_deps.sh set up, so no network is needed.
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                        "--no-build-isolation", "--target", INSTALLED, PACKAGE], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, f"pip install {PACKAGE}: {p.stdout}\n{p.stderr}"
    sys.path.insert(0, INSTALLED)
    cfg = os.path.join(TMP.name, "cluster.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG)
    LOG = os.path.join(TMP.name, "coordinator.log")
    LOG_FILE = open(LOG, "w")
    COORDINATOR = subprocess.Popen([os.path.join(BIN, "cascade-coordinator"), "--config", cfg],
                                   stdout=LOG_FILE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        m = re.search(r"ready on (\S+)", read_log())
        if m:
            ADDRESS = m.group(1)
            return
        assert COORDINATOR.poll() is None, "coordinator exited:\n" + read_log()
        time.sleep(0.1)
    raise AssertionError("coordinator not ready in 120 s:\n" + read_log())


def read_log():
    with open(LOG) as f:
        return f.read()


def tearDownModule():
    if "COORDINATOR" in globals():
        os.killpg(COORDINATOR.pid, signal.SIGTERM)
        try:
            COORDINATOR.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(COORDINATOR.pid, signal.SIGKILL)
            COORDINATOR.wait()
        LOG_FILE.close()
    if "TMP" in globals():
        TMP.cleanup()


class ClientTest(unittest.TestCase):
    def setUp(self):
        import cascade_client
        self.cc = cascade_client
        self.client = cascade_client.Client(ADDRESS, timeout=120)

    def tearDown(self):
        self.client.close()

    def test_installed_from_the_temporary_directory(self):
        self.assertTrue(self.cc.__file__.startswith(INSTALLED), self.cc.__file__)
        from cascade_client._proto.cascade.v1 import inference_pb2
        self.assertEqual(inference_pb2.DESCRIPTOR.name, "cascade/v1/inference.proto")
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(inference_pb2.__file__), "inference.proto")))

    def test_health_and_cluster_status(self):
        self.assertEqual(self.client.health(), "SERVING")
        self.assertEqual(self.client.health("cascade.v1.Inference"), "SERVING")
        st = self.client.cluster_status()
        self.assertTrue(st.ready)
        self.assertEqual(st.state, "ready")
        self.assertEqual([(w.stage, w.state) for w in st.workers], [(0, "ready"), (1, "ready")])
        self.assertEqual(st.workers[0].first_layer, 0)
        self.assertEqual(st.workers[0].last_layer, st.workers[1].first_layer)
        self.assertGreater(st.kv_blocks_total, 0)

    def test_model_info(self):
        info = self.client.model_info()
        self.assertEqual(info.arch, "llama")
        self.assertEqual((info.n_layers, info.n_embd, info.n_heads, info.n_kv_heads, info.n_vocab),
                         (30, 576, 9, 3, 49152))
        self.assertEqual(info.path, SMOL)
        self.assertGreater(info.max_context, 0)
        self.assertEqual(info.n_experts, 0)

    def test_stream_concatenates_to_generate(self):
        """Greedy: the streamed chunks add up to the non-streamed answer, ids and text, and
        the last chunk alone carries finish_reason and usage."""
        whole = self.client.generate(messages=QUESTION, max_tokens=48, temperature=0)
        self.assertIn("Paris", whole.text)
        chunks = list(self.client.stream(messages=QUESTION, max_tokens=48, temperature=0))
        self.assertGreater(len(chunks), 1)
        self.assertEqual("".join(c.text for c in chunks), whole.text)
        self.assertEqual([i for c in chunks for i in c.token_ids], whole.token_ids)
        self.assertTrue(all(c.usage is None and c.finish_reason is None for c in chunks[:-1]))
        last = chunks[-1]
        self.assertEqual(last.finish_reason, whole.finish_reason)
        self.assertIn(whole.finish_reason, ("stop", "length"))
        # Usage counts: the prompt as the model saw it, and every generated id.
        self.assertEqual(whole.usage.prompt_tokens, len(whole.prompt_ids))
        self.assertEqual(whole.usage.completion_tokens, len(whole.token_ids))
        self.assertEqual(last.usage.prompt_tokens, whole.usage.prompt_tokens)
        self.assertEqual(last.usage.completion_tokens, whole.usage.completion_tokens)
        self.assertGreater(last.usage.total_s, 0)
        self.assertGreaterEqual(last.usage.total_s, last.usage.ttft_s)

    def test_max_tokens_ends_with_length(self):
        r = self.client.generate("Once upon a time", max_tokens=5, temperature=0, ignore_eos=True)
        self.assertEqual((r.finish_reason, len(r.token_ids), r.usage.completion_tokens), ("length", 5, 5))

    def test_stop_strings(self):
        """The text ends right before the first stop string, in both forms of the call."""
        full = self.client.generate(messages=QUESTION, max_tokens=48, temperature=0).text
        words = re.findall(r" \w{3,}", full)
        self.assertGreater(len(words), 2, full)
        stop = words[2]  # A word well inside the answer.
        want = full[:full.index(stop)]
        r = self.client.generate(messages=QUESTION, max_tokens=48, temperature=0, stop=[stop, "never-seen"])
        self.assertEqual((r.text, r.finish_reason), (want, "stop"))
        streamed = "".join(c.text for c in self.client.stream(messages=QUESTION, max_tokens=48, temperature=0,
                                                              stop=stop))
        self.assertEqual(streamed, want)

    def test_invalid_request_raises_cascade_error(self):
        import grpc
        with self.assertRaises(self.cc.CascadeError) as e:
            self.client.generate("Hello", max_tokens=0)
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("max_tokens", e.exception.message)
        with self.assertRaises(self.cc.CascadeError) as e:
            list(self.client.stream(messages=[], max_tokens=4))
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("INVALID_ARGUMENT", str(e.exception))
        with self.assertRaises(TypeError):
            self.client.generate(max_tokens=4)  # Neither prompt nor messages.

    def test_tokenize_round_trip(self):
        """tokenize gives the ids the cluster generates from, for text and chat alike, and
        generating from those ids is generating from the text."""
        text = "The quick brown fox jumps over the lazy dog"
        toks = self.client.tokenize(text, add_special=True)
        self.assertEqual(len(toks.ids), len(toks.pieces))
        self.assertEqual("".join(toks.pieces).replace("\u0120", " "), text)  # GPT-2 byte-level: Ġ is a space.
        by_text = self.client.generate(text, max_tokens=8, temperature=0, ignore_eos=True)
        self.assertEqual(by_text.prompt_ids, toks.ids)
        by_ids = self.client.generate(toks.ids, max_tokens=8, temperature=0, ignore_eos=True)
        self.assertEqual((by_ids.prompt_ids, by_ids.token_ids), (toks.ids, by_text.token_ids))
        chat = self.client.tokenize(messages=QUESTION)
        self.assertEqual(self.client.generate(messages=QUESTION, max_tokens=1).prompt_ids, chat.ids)
        as_messages = [self.cc.Message(m["role"], m["content"]) for m in QUESTION]
        self.assertEqual(self.client.tokenize(messages=as_messages).ids, chat.ids)

    def test_deadline(self):
        import grpc
        with self.assertRaises(self.cc.CascadeError) as e:
            self.client.generate("Once upon a time", max_tokens=2000, ignore_eos=True, timeout=0.3)
        self.assertEqual(e.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)

    def test_context_manager_closes_the_channel(self):
        with self.cc.Client(ADDRESS) as c:
            self.assertEqual(c.health(), "SERVING")
        with self.assertRaises(Exception):
            c.health()

    def test_chat_example(self):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([INSTALLED, os.environ.get("PYTHONPATH", "")]))
        p = subprocess.run([sys.executable, os.path.join(PACKAGE, "examples", "chat.py"), "--server", ADDRESS,
                            "--max-tokens", "24", "--temperature", "0", "--system", "You are a helpful assistant.",
                            QUESTION[1]["content"]],
                           capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("Paris", p.stdout)
        self.assertIn("tokens", p.stderr)  # The usage line.


if __name__ == "__main__":
    need(SMOL)  # SKIP (exit 0) without the default model.
    unittest.main(verbosity=2)
