#!/usr/bin/env python3
"""The HTTP front through clients nobody here wrote: the official `openai` SDK (PyPI) for
/v1/completions, /v1/chat/completions and /v1/models, `prometheus_client`'s own parser for
/metrics, and plain sockets for what SDKs hide (disconnects, health). A real coordinator
with real workers on loopback, the default model (SmolLM2-135M-Instruct Q4_1).

Usage: scripts/python_deps.sh http_test.py BUILD_BIN_DIR TEST_NAME
"""
import concurrent.futures
import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import openai
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_test  # noqa: E402  (reads BUILD_BIN_DIR from argv[1] too)
from cluster_test import cluster_from_yaml, config_yaml, generate  # noqa: E402
from testdata import ROOT, SMOL, need  # noqa: E402

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"


@contextlib.contextmanager
def http_cluster(pipeline=1, extra="", model=SMOL, model_id=MODEL_ID, tensor=1, data=1):
    need(SMOL)
    text = config_yaml(model, pipeline, kv_cache_mb=64, extra=extra, tensor=tensor, data=data)
    text = text.replace("server: {listen: 127.0.0.1:0}", "server: {listen: 127.0.0.1:0, http_listen: 127.0.0.1:0}")
    with cluster_from_yaml(text) as (address, proc, log_path):
        m = re.search(r"http front on (\S+) \(model '([^']+)'\)", open(log_path).read())
        assert m, open(log_path).read()
        assert m.group(2) == model_id, m.group(2)
        yield address, m.group(1), proc


def client(http_address, **kw):
    return openai.OpenAI(base_url=f"http://{http_address}/v1", api_key="unused", max_retries=0, **kw)


def get(http_address, path):
    host, port = http_address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read().decode()
    conn.close()
    return r.status, body


def metrics(http_address):
    status, text = get(http_address, "/metrics")
    assert status == 200, status
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def metric(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def kv_used(http_address):
    return metric(metrics(http_address), "cascade_kv_blocks_used")


SYSTEM, QUESTION = "You are a concise assistant.", "Name three colors of the rainbow."
CHAT = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]


def test_openai_sdk():
    with http_cluster() as (address, http_address, _):
        c = client(http_address)
        models = c.models.list().data
        assert [m.id for m in models] == [MODEL_ID], models

        # Chat, whole: greedy text equals the gRPC API's for the same conversation.
        whole = c.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=24, temperature=0)
        text = whole.choices[0].message.content
        assert whole.choices[0].message.role == "assistant" and text, whole
        assert whole.object == "chat.completion" and whole.id.startswith("chatcmpl-"), whole
        grpc = generate(address, "--chat", QUESTION, "--system", SYSTEM, "--temperature", "0", "--max-tokens", "24")
        assert text == grpc["text"], (text, grpc["text"])
        assert whole.usage.completion_tokens == len(grpc["token_ids"]), (whole.usage, grpc)
        assert whole.usage.prompt_tokens == len(grpc["prompt_ids"]), (whole.usage, grpc["prompt_ids"])
        assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
        assert whole.choices[0].finish_reason in ("stop", "length"), whole

        # Chat, streamed, with usage: the deltas add up to the whole answer.
        chunks = list(c.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=24, temperature=0,
                                                stream=True, stream_options={"include_usage": True}))
        assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
        streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        assert streamed == text, (streamed, text)
        finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        assert finishes == [whole.choices[0].finish_reason], finishes
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
        # The same conversation again: its prompt's full blocks come from the prefix cache.
        n_prompt = whole.usage.prompt_tokens
        assert whole.usage.prompt_tokens_details.cached_tokens == 0, whole.usage
        assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 16 * ((n_prompt - 1) // 16), chunks[-1].usage
        assert all(ch.usage is None for ch in chunks[:-1])
        print(f"chat: {whole.usage.completion_tokens} tokens, streamed in {len(chunks)} chunks, equal to gRPC: {text!r}")

        # chat_template_kwargs are variables of the model's own template: overriding
        # add_generation_prompt drops the assistant opening "<|im_start|>assistant\n", 4 tokens in
        # SmolLM2's vocabulary (<|im_start|>, "ass", "istant", "\n").
        no_opening = c.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=1, temperature=0,
                                               extra_body={"chat_template_kwargs": {"add_generation_prompt": False}})
        assert no_opening.usage.prompt_tokens == n_prompt - 4, (no_opening.usage, n_prompt)
        try:
            c.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=1, extra_body={"chat_template_kwargs": 1})
            raise AssertionError("chat_template_kwargs: 1 was accepted")
        except openai.BadRequestError as e:
            assert "chat_template_kwargs" in str(e), e

        # Completions, whole and streamed; max_tokens ends it with "length".
        prompt = "The capital of France is"
        comp = c.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=12, temperature=0)
        assert comp.choices[0].finish_reason == "length" and comp.usage.completion_tokens == 12, comp
        grpc = generate(address, "--prompt", prompt, "--temperature", "0", "--max-tokens", "12")
        assert comp.choices[0].text == grpc["text"], (comp.choices[0].text, grpc["text"])
        parts = list(c.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=12, temperature=0, stream=True))
        assert "".join(p.choices[0].text for p in parts) == comp.choices[0].text
        # A token-id prompt gives the same answer.
        by_ids = c.completions.create(model=MODEL_ID, prompt=grpc["prompt_ids"], max_tokens=12, temperature=0)
        assert by_ids.choices[0].text == comp.choices[0].text, by_ids

        # Stop strings: the text ends before the first one, finish_reason "stop".
        full = comp.choices[0].text
        cut = full.find(" ", 3)
        if cut > 0:
            stop = full[cut:cut + 2]
            stopped = c.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=12, temperature=0, stop=[stop])
            assert stopped.choices[0].finish_reason == "stop", stopped
            assert stopped.choices[0].text == full[:full.find(stop)], (stopped.choices[0].text, full, stop)
            print(f"stop {stop!r}: {stopped.choices[0].text!r}")

        # Logprobs: the chosen (greedy) token is the most likely one, top_logprobs sorted.
        lp = c.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=6, temperature=0, logprobs=True,
                                       top_logprobs=3)
        content = lp.choices[0].logprobs.content
        assert len(content) == lp.usage.completion_tokens, (len(content), lp.usage)
        for t in content:
            tops = [x.logprob for x in t.top_logprobs]
            assert len(tops) == 3 and tops == sorted(tops, reverse=True), t
            assert abs(t.logprob - tops[0]) < 1e-5 and t.logprob <= 0, t
        assert "".join(t.token for t in content) == lp.choices[0].message.content

        # Seeded sampling repeats; penalties are accepted.
        a = c.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=16, temperature=1.0, seed=7,
                                 presence_penalty=0.5, frequency_penalty=0.5, top_p=0.9)
        b = c.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=16, temperature=1.0, seed=7,
                                 presence_penalty=0.5, frequency_penalty=0.5, top_p=0.9)
        assert a.choices[0].text == b.choices[0].text, (a, b)

        # Refusals: OpenAI's error shape, the right status, the field named.
        for kwargs, status, param in [
            (dict(n=0), 400, "n"),
            (dict(temperature=5), 400, "temperature"),
            (dict(max_tokens=0), 400, "max_tokens"),
            (dict(logit_bias={"1": 5}), 400, "logit_bias"),
        ]:
            try:
                c.chat.completions.create(model=MODEL_ID, messages=CHAT, **kwargs)
                raise AssertionError(f"{kwargs} was accepted")
            except openai.APIStatusError as e:
                assert e.status_code == status and e.body["param"] == param, (kwargs, e.status_code, e.body)
                assert e.body["type"] == "invalid_request_error" and e.body["message"], e.body
        try:
            c.chat.completions.create(model="gpt-4o", messages=CHAT)
            raise AssertionError("an unknown model was accepted")
        except openai.NotFoundError as e:
            assert "gpt-4o" in e.body["message"] and MODEL_ID in e.body["message"], e.body
        try:
            c.completions.create(model=MODEL_ID, prompt="hello " * 5000, max_tokens=4)
            raise AssertionError("an oversized prompt was accepted")
        except openai.BadRequestError as e:
            assert "context" in e.body["message"] and e.body["param"] == "prompt", e.body
        print("refusals: n=2, temperature=5, max_tokens=0, logit_bias, unknown model, oversized prompt")

        # Concurrency 32 through the SDK: no errors, every answer whole.
        def one(i):
            r = c.completions.create(model=MODEL_ID, prompt=f"Story number {i}:", max_tokens=16, temperature=0.7,
                                     seed=i, extra_body={"ignore_eos": True})
            return r.usage.completion_tokens
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            counts = list(pool.map(one, range(64)))
        assert counts == [16] * 64, counts
        print(f"64 requests at concurrency 32: no errors, {64 * 16 / (time.time() - t0):.0f} tok/s")


def test_metrics():
    with http_cluster(pipeline=2) as (_, http_address, _):
        before = metrics(http_address)
        c = client(http_address)
        for i in range(3):
            c.completions.create(model=MODEL_ID, prompt=f"Count to {i + 3}:", max_tokens=8, temperature=0,
                                 extra_body={"ignore_eos": True})
        with contextlib.suppress(openai.BadRequestError):
            c.completions.create(model=MODEL_ID, prompt="x", max_tokens=0)
        after = metrics(http_address)

        def moved(name, **labels):
            return metric(after, name, **labels) - metric(before, name, **labels)
        assert moved("cascade_requests_total", api="http", outcome="length") == 3, after
        assert moved("cascade_requests_total", api="http", outcome="invalid") == 1
        assert moved("cascade_http_requests_total", path="/v1/completions", code="200") == 3
        assert moved("cascade_http_requests_total", path="/v1/completions", code="400") == 1
        assert moved("cascade_generation_tokens_total") == 24
        # Three prompts sharing "Count to " (no full block) looked up; none hit.
        assert moved("cascade_prefix_cache_query_tokens_total") >= 3 * 4, after
        assert moved("cascade_prefix_cache_hit_tokens_total") == 0
        long_prompt = "The quick brown fox jumps over the lazy dog. " * 6
        for _ in range(2):
            c.completions.create(model=MODEL_ID, prompt=long_prompt, max_tokens=2, temperature=0)
        again = metrics(http_address)
        hit = metric(again, "cascade_prefix_cache_hit_tokens_total") - metric(after, "cascade_prefix_cache_hit_tokens_total")
        assert hit >= 48 and hit % 16 == 0, hit
        assert metric(again, "cascade_kv_blocks_cached") >= hit / 16
        assert 0 < metric(again, "cascade_prefix_cache_hit_rate") < 1
        for h in ("cascade_time_to_first_token_seconds", "cascade_e2e_request_latency_seconds",
                  "cascade_queue_time_seconds", "cascade_time_per_output_token_seconds"):
            assert moved(h + "_count") == 3, h
            assert metric(after, h + "_bucket", le="+Inf") == metric(after, h + "_count"), h
        assert moved("cascade_inter_token_latency_seconds_count") == 3 * 7
        for stage in ("0", "1"):
            assert moved("cascade_stage_step_seconds_count", replica="0", stage=stage, tp_rank="0") >= 8, stage
            assert moved("cascade_stage_handoff_seconds_count", replica="0", stage=stage, tp_rank="0") >= 8, stage
            # A round trip (the coordinator's view) holds the worker's forward time.
            assert moved("cascade_stage_round_trip_seconds_count", replica="0", stage=stage, tp_rank="0") >= 8, stage
            assert moved("cascade_stage_round_trip_seconds_sum", replica="0", stage=stage, tp_rank="0") > \
                moved("cascade_stage_step_seconds_sum", replica="0", stage=stage, tp_rank="0"), stage
        # Stage 1 receives what stage 0 computed: its hand-off is part of its forward time.
        assert 0 < moved("cascade_stage_handoff_seconds_sum", replica="0", stage="1", tp_rank="0") < \
            moved("cascade_stage_step_seconds_sum", replica="0", stage="1", tp_rank="0")
        assert metric(after, "cascade_kv_blocks_total") > 0 and metric(after, "cascade_kv_blocks_used") == 0
        # An unknown route: 404 naming every route, counted under "other" (no label per path).
        status, body = get(http_address, "/v2/nothing")
        assert status == 404, status
        assert json.loads(body)["error"]["message"] == (
            "no route GET /v2/nothing (POST /v1/completions, POST /v1/chat/completions, GET /v1/models, "
            "GET /health, GET /metrics)"), body
        assert metric(metrics(http_address), "cascade_http_requests_total", path="other", code="404") >= 1
        assert metric(after, "cascade_cluster_ready") == 1 and metric(after, "cascade_workers", state="ready") == 2
        for name in ("cascade_running_sequences", "cascade_waiting_sequences", "cascade_preemptions_total",
                     "cascade_spec_acceptance_rate", "cascade_spec_mean_accepted_length"):
            assert (name, ()) in after, name
        print(f"metrics: {len(after)} samples; counters moved by the 3 requests and 1 refusal")


def open_stream(http_address, body):
    host, port = http_address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=30)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def wait_blocks_free(http_address, deadline_s):
    t0 = time.time()
    while time.time() - t0 < deadline_s:
        if kv_used(http_address) == 0:
            return time.time() - t0
        time.sleep(0.2)
    raise AssertionError(f"KV blocks not freed in {deadline_s} s: {kv_used(http_address)} used")


def test_disconnect_cancels():
    with http_cluster() as (_, http_address, _):
        before = metrics(http_address)
        # A stream read for a while, then dropped.
        s = open_stream(http_address, {"prompt": "Once upon a time", "max_tokens": 2000, "temperature": 0,
                                       "stream": True, "ignore_eos": True})
        got = b""
        while got.count(b"data: ") < 5:
            got += s.recv(4096)
        assert b"HTTP/1.1 200" in got and b"text/event-stream" in got, got[:200]
        assert kv_used(http_address) > 0
        s.close()
        took = wait_blocks_free(http_address, 10)
        print(f"stream dropped: blocks free again {took:.2f} s later")
        # A whole response waited on, then dropped: found by the keep-alive writes.
        s = open_stream(http_address, {"prompt": "Once upon a time", "max_tokens": 2000, "temperature": 0,
                                       "ignore_eos": True})
        time.sleep(1.5)
        assert kv_used(http_address) > 0
        s.close()
        took = wait_blocks_free(http_address, 10)
        print(f"whole request dropped: blocks free again {took:.2f} s later")
        after = metrics(http_address)
        assert metric(after, "cascade_requests_total", api="http", outcome="cancelled") - \
            metric(before, "cascade_requests_total", api="http", outcome="cancelled") == 2
        # The server still serves.
        r = client(http_address).completions.create(model=MODEL_ID, prompt="Hi", max_tokens=3, temperature=0)
        assert r.usage.completion_tokens == 3


def wait_health(http_address, want, timeout_s):
    """Polls /health until it answers `want`; (seconds taken, body)."""
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        status, body = get(http_address, "/health")
        if status == want:
            return time.time() - t0, body
        time.sleep(0.1)
    raise AssertionError(f"/health not {want} within {timeout_s} s: {status} {body}")


def test_health_follows_cluster():
    with http_cluster(pipeline=2) as (_, http_address, proc):
        status, body = get(http_address, "/health")
        assert status == 200 and json.loads(body)["status"] == "ready", (status, body)
        # A stopped worker misses its heartbeats: dead, and (not having exited) not restarted
        # until it runs again, so the degraded window lasts.
        workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        victim = int(workers[1])
        os.kill(victim, signal.SIGSTOP)
        took, body = wait_health(http_address, 503, 15)
        assert json.loads(body)["status"] == "degraded", body
        print(f"/health 503 {took:.2f} s after SIGSTOP: {body}")
        # While degraded, a request waits for the cluster to rebuild instead of failing.
        waiting = concurrent.futures.ThreadPoolExecutor(1).submit(
            lambda: client(http_address).completions.create(model=MODEL_ID, prompt="Hi", max_tokens=3, temperature=0))
        time.sleep(1.0)
        assert not waiting.done(), waiting.result()
        os.kill(victim, signal.SIGCONT)  # It learns it was declared dead, exits, and is restarted.
        took, _ = wait_health(http_address, 200, 60)
        assert waiting.result(timeout=60).usage.completion_tokens == 3  # Served once rebuilt.
        r = client(http_address).completions.create(model=MODEL_ID, prompt="Hi", max_tokens=3, temperature=0)
        assert r.usage.completion_tokens == 3
        print(f"/health 200 again {took:.1f} s after SIGCONT; the request sent while degraded was served")


def run_cli(address, *args, key=None):
    env = {k: v for k, v in os.environ.items() if k != "CASCADE_API_KEY"}
    if key:
        env["CASCADE_API_KEY"] = key
    return subprocess.run([cluster_test.CASCADE, *args, "--server", address], capture_output=True, text=True,
                          timeout=120, env=env)


def test_api_keys():
    """security.api_keys_file: gRPC and HTTP calls without a key or with a wrong one are
    refused (UNAUTHENTICATED, 401 in OpenAI's shape), with a right one served; /health
    stays open, /metrics wants a key (metrics_needs_key); the keys never reach the log."""
    keys = ["k-" + "a1b2c3d4" * 3, "k-" + "e5f6a7b8" * 3]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "keys")
        with open(path, "w") as f:
            f.write(f"# two keys\n{keys[0]}\n\n{keys[1]}  # the second\n")
        extra = f"security: {{api_keys_file: {path}, metrics_needs_key: true}}\n"
        with http_cluster(extra=extra) as (address, http_address, proc):
            prompt = ("generate", "--prompt-ids", "1,2,3", "--max-tokens", "3", "--temperature", "0")
            p = run_cli(address, *prompt)
            assert p.returncode == 2 and "UNAUTHENTICATED" in p.stderr and "no API key" in p.stderr, p.stderr
            p = run_cli(address, *prompt, key="k-wrong-but-long-enough")
            assert p.returncode == 2 and "UNAUTHENTICATED" in p.stderr and "not valid" in p.stderr, p.stderr
            assert "k-wrong" not in p.stderr
            for key in keys:
                p = run_cli(address, *prompt, key=key)
                assert p.returncode == 0, p.stderr
            p = run_cli(address, "status", "--wait", "0")
            assert p.returncode != 0 and "UNAUTHENTICATED" in p.stdout + p.stderr, p.stdout + p.stderr
            assert run_cli(address, "status", "--wait", "0", key=keys[1]).returncode == 0
            # HTTP: the OpenAI SDK's api_key is the bearer token.
            for bad in ("unused", keys[0] + "x"):
                try:
                    client(http_address, ).with_options(api_key=bad).completions.create(model=MODEL_ID, prompt="Hi",
                                                                                         max_tokens=2)
                    raise AssertionError(f"served with key {bad!r}")
                except openai.AuthenticationError as e:
                    assert e.status_code == 401 and e.body["code"] == "invalid_api_key", e.body
            r = client(http_address).with_options(api_key=keys[0]).completions.create(model=MODEL_ID, prompt="Hi",
                                                                                       max_tokens=2, temperature=0)
            assert r.usage.completion_tokens == 2
            assert get(http_address, "/health")[0] == 200  # Open for load balancers.
            assert get(http_address, "/metrics")[0] == 401
            host, port = http_address.rsplit(":", 1)
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {keys[1]}"})
            assert conn.getresponse().status == 200
            log = open(proc.args[2].replace("cluster.yaml", "coordinator.log")).read()
            assert "API keys: 2 loaded" in log, log
            assert not any(k in log for k in keys), "a key reached the log"
            print("API keys: refused without and with a wrong key (gRPC UNAUTHENTICATED, HTTP 401), served with "
                  "either right key; /health open, /metrics keyed; no key in the log")


def test_harmony_reasoning():
    """gpt-oss's harmony format through the OpenAI API: a gpt-oss model built to answer a
    harmony chat in it (scripts/make_random_gpt_oss.py --harmony: a bigram chain in its LM
    head, so greedy decoding with presence_penalty 1 writes an analysis message "The user
    says hi." and a final one "Hello!"), at PP 2 x TP 2 with n-gram speculation. The SDK's
    message has the final channel as `content` and the analysis channel as
    `reasoning_content`, whole and streamed, no markup in either; the ids equal `cascade
    run`'s, which splits them the same way."""
    need(SMOL)
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "gpt-oss-harmony")
        subprocess.run([os.path.join(ROOT, "scripts", "python_deps.sh"),
                        os.path.join(ROOT, "scripts", "make_random_gpt_oss.py"), SMOL, "--harmony", model],
                       check=True, capture_output=True)
        sampling = ("--temperature", "0", "--presence-penalty", "1", "--max-tokens", "40")
        local = cluster_test.run_json("run", "--model", model, "--chat", "Hi", *sampling)
        assert (local["reasoning"], local["text"], local["finish_reason"]) == ("The user says hi.", "Hello!", "stop"), local
        extra = "draft: {ngram: {n: 2}, adaptive: false}\n"
        with http_cluster(pipeline=2, tensor=2, extra=extra, model=model, model_id="gpt-oss-harmony") as (
                address, http_address, _):
            grpc = generate(address, "--chat", "Hi", *sampling)
            assert grpc["token_ids"] == local["token_ids"], (grpc["token_ids"], local["token_ids"])
            assert (grpc["reasoning"], grpc["text"]) == ("The user says hi.", "Hello!"), grpc
            c = client(http_address)
            args = dict(model="gpt-oss-harmony", messages=[{"role": "user", "content": "Hi"}], max_tokens=40,
                        temperature=0, presence_penalty=1)
            whole = c.chat.completions.create(**args)
            message = whole.choices[0].message
            assert (message.reasoning_content, message.content) == ("The user says hi.", "Hello!"), message
            assert whole.choices[0].finish_reason == "stop", whole
            assert whole.usage.completion_tokens == len(local["token_ids"]), whole.usage
            chunks = list(c.chat.completions.create(**args, stream=True))
            deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
            reasoning = "".join(getattr(dl, "reasoning_content", None) or "" for dl in deltas)
            content = "".join(dl.content or "" for dl in deltas)
            assert (reasoning, content) == ("The user says hi.", "Hello!"), deltas
            print(f"harmony at PP=2 TP=2: reasoning {reasoning!r}, content {content!r} in {len(chunks)} chunks, "
                  f"ids equal cascade run's")


def test_n_choices():
    """n = 4: four choices with their indices, sampled with seeds 100-103 (so they differ);
    the prompt's full blocks computed once (the prefix cache's hit counter grows by three
    choices' worth: choice 0 computes them, the others start once it has); usage counts
    the prompt once and every choice's tokens (each choice's logprobs list its tokens);
    streamed chunks carry each choice's index, and each choice ends once."""
    with http_cluster() as (_, http_address, _):
        c = client(http_address)
        chat = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Write one sentence about a lighthouse keeper named Oskar who "
                                            "collects seashells, paints them blue and sells them at the market."}]
        kw = dict(model=MODEL_ID, messages=chat, max_tokens=16, temperature=1.0, seed=100)
        before = metrics(http_address)
        whole = c.chat.completions.create(n=4, logprobs=True, **kw)
        after = metrics(http_address)
        assert [ch.index for ch in whole.choices] == [0, 1, 2, 3], whole
        texts = [ch.message.content for ch in whole.choices]
        assert len(set(texts)) == 4 and all(texts), texts
        n_prompt = whole.usage.prompt_tokens
        full = 16 * ((n_prompt - 1) // 16)
        hits = metric(after, "cascade_prefix_cache_hit_tokens_total") - metric(before, "cascade_prefix_cache_hit_tokens_total")
        assert full > 0 and hits == 3 * full, (hits, full, n_prompt)
        single = c.chat.completions.create(**kw)
        assert single.usage.prompt_tokens == n_prompt, single.usage
        tokens = [len(ch.logprobs.content) for ch in whole.choices]
        assert whole.usage.completion_tokens == sum(tokens) and min(tokens) > 0, (whole.usage, tokens)
        assert whole.usage.total_tokens == n_prompt + whole.usage.completion_tokens
        streamed = ["", "", "", ""]
        finishes = []
        usage = None
        for ch in c.chat.completions.create(n=4, stream=True, stream_options={"include_usage": True}, **kw):
            for choice in ch.choices:
                streamed[choice.index] += choice.delta.content or ""
                if choice.finish_reason:
                    finishes.append(choice.index)
            usage = ch.usage or usage
        assert sorted(finishes) == [0, 1, 2, 3] and all(streamed), (streamed, finishes)
        assert usage.prompt_tokens == n_prompt and 4 <= usage.completion_tokens <= 64, usage
        try:
            c.chat.completions.create(n=17, **kw)
            raise AssertionError("n = 17 was accepted")
        except openai.BadRequestError as e:
            assert "n:" in str(e), e
        print(f"n=4: {n_prompt} prompt tokens, {hits:.0f} served from the prefix cache for choices 1-3; "
              f"{whole.usage.completion_tokens} completion tokens ({tokens})")


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "maxLength": 16}, "limit": {"type": "integer", "minimum": 1, "maximum": 5}},
        "required": ["query"]}}}


@contextlib.contextmanager
def qwen_tools_cluster(template_name="Qwen-Qwen2.5-7B-Instruct.jinja"):
    """A random-weight Qwen3-MoE model (scripts/make_random_gguf.py moe-tiny) with Qwen2's
    vocabulary and a real Qwen chat template from llama.cpp's tree (Qwen2.5-7B-Instruct's:
    tools in the system prompt, calls as <tool_call> blocks, tool results as
    <tool_response>)."""
    need(os.path.join(ROOT, "..", "shared", "testdata", "vocab", "ggml-vocab-qwen2.gguf"))
    src = subprocess.run([os.path.join(ROOT, "scripts", "llama_cpp.sh"), "--src"], capture_output=True, text=True,
                         check=True).stdout.strip()
    template = os.path.join(src, "models", "templates", template_name)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "qwen-tools.gguf")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_random_gguf.py"), "moe-tiny",
                        os.path.join(ROOT, "..", "shared", "testdata", "vocab", "ggml-vocab-qwen2.gguf"), path,
                        "--chat-template", template], check=True, capture_output=True)
        with http_cluster(model=path, model_id="qwen-tools") as (address, http_address, proc):
            yield http_address, open(template).read()


def check_calls(calls, tools, named=None):
    """Each call names a declared function and its arguments validate against its schema."""
    import jsonschema
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert calls, "no tool call"
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_"), call
        assert call.function.name in schemas and (named is None or call.function.name == named), call
        jsonschema.Draft202012Validator(schemas[call.function.name]).validate(json.loads(call.function.arguments))


def test_tool_calls():
    """tool_choice required and named on a random-weight model with a Qwen template: the
    forced call parses into tool_calls, its arguments validate against the function's
    schema, finish_reason is tool_calls; the role: tool answer goes into the next turn (the
    prompt is the template's own rendering, by jinja2, of the whole conversation); the same
    streamed as tool_calls deltas."""
    sys.path.insert(0, os.path.join(os.environ["CASCADE_PYTHON_CACHE"], "jsonschema"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "text"))
    import jinja_goldens
    with qwen_tools_cluster() as (http_address, template):
        c = client(http_address)
        tools = [WEATHER, SEARCH]
        ask = [{"role": "user", "content": "What is the weather in Paris?"}]
        kw = dict(model="qwen-tools", tools=tools, max_tokens=120, temperature=0, parallel_tool_calls=False)
        whole = c.chat.completions.create(messages=ask, tool_choice="required", **kw)
        choice = whole.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        assert choice.message.content is None, choice.message
        check_calls(choice.message.tool_calls, tools)
        named = c.chat.completions.create(messages=ask, **{**kw, "tool_choice": {"type": "function",
                                                                               "function": {"name": "search"}}})
        check_calls(named.choices[0].message.tool_calls, tools, named="search")
        print(f"required: {[(t.function.name, t.function.arguments) for t in choice.message.tool_calls]}")

        # Streamed: the deltas carry the same call.
        deltas, finish = [], None
        for ch in c.chat.completions.create(messages=ask, tool_choice="required", stream=True, **kw):
            for d in ch.choices:
                deltas += d.delta.tool_calls or []
                finish = d.finish_reason or finish
        assert finish == "tool_calls", finish
        assert [(t.index, t.function.name, t.function.arguments) for t in deltas] == \
            [(i, t.function.name, t.function.arguments) for i, t in enumerate(choice.message.tool_calls)], deltas
        check_calls(deltas, tools)

        # The next turn: the call and the tool's answer, rendered by the model's template.
        call = choice.message.tool_calls[0]
        turn = ask + [{"role": "assistant", "content": None, "tool_calls": [
                          {"id": call.id, "type": "function",
                           "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
                      {"role": "tool", "tool_call_id": call.id, "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}]
        after = c.chat.completions.create(messages=turn, tool_choice="auto", **{**kw, "max_tokens": 4})
        reference = jinja_goldens.make_env().from_string(template).render(
            messages=[turn[0], {**turn[1], "tool_calls": [{**turn[1]["tool_calls"][0], "function": {
                "name": call.function.name, "arguments": json.loads(call.function.arguments)}}]}, turn[2]],
            tools=tools, add_generation_prompt=True, bos_token="", eos_token="<|endoftext|>")
        assert "<tool_response>" in reference and "temperature" in reference, reference
        expected = c.completions.create(model="qwen-tools", prompt=reference, max_tokens=1, temperature=0)
        assert after.usage.prompt_tokens == expected.usage.prompt_tokens, (after.usage, expected.usage)
        print(f"next turn: {after.usage.prompt_tokens} prompt tokens, as jinja2 renders the conversation")

        # Refusals name the field.
        for body, words in [({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
                            ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
                            ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice")]:
            try:
                c.chat.completions.create(model="qwen-tools", messages=ask, max_tokens=4,
                                          **{"tools": tools, **body})
                raise AssertionError(f"{body} was accepted")
            except openai.BadRequestError as e:
                assert words in str(e), (body, str(e))


def test_thinking_reasoning():
    """Qwen3's template marks a thinking model: the answer's leading <think> block comes back
    as reasoning_content, the rest as content, whole and streamed. A grammar makes the
    random-weight model write such an answer; with enable_thinking false the template
    closes an empty block itself and the answer is all content, tags and all."""
    with qwen_tools_cluster("Qwen-Qwen3-0.6B.jinja") as (http_address, _):
        c = client(http_address)
        ask = [{"role": "user", "content": "Is it raining?"}]
        gbnf = 'root ::= "<think>" [a-z]{3,12} "</think>" ("yes" | "no")'
        kw = dict(model="qwen-tools", messages=ask, max_tokens=40, temperature=0, extra_body={"grammar": gbnf})
        whole = c.chat.completions.create(**kw)
        message = whole.choices[0].message
        reasoning = message.model_extra.get("reasoning_content")
        assert message.content in ("yes", "no") and re.fullmatch("[a-z]{3,12}", reasoning or ""), message
        streamed = {"content": "", "reasoning_content": ""}
        for ch in c.chat.completions.create(stream=True, **kw):
            for d in ch.choices:
                streamed["content"] += d.delta.content or ""
                streamed["reasoning_content"] += (d.delta.model_extra or {}).get("reasoning_content") or ""
        assert streamed == {"content": message.content, "reasoning_content": reasoning}, streamed
        off = c.chat.completions.create(**{**kw, "extra_body": {"grammar": 'root ::= "<think>x</think>no"',
                                                                 "chat_template_kwargs": {"enable_thinking": False}}})
        assert off.choices[0].message.content == "<think>x</think>no", off.choices[0].message
        print(f"thinking: reasoning {reasoning!r}, content {message.content!r}")


if __name__ == "__main__":
    globals()["test_" + sys.argv[2]]()
