#!/usr/bin/env python3
"""TLS on the public API (server.tls_cert_file / server.tls_key_file): a real coordinator
with real workers on loopback (stories260K), its gRPC API and HTTP front serving a
certificate that the `openssl` CLI makes here (its own CA, the server's certificate with
IP SAN 127.0.0.1), independently of the code under test. Clients: the `cascade` CLI
(--tls-ca, CASCADE_TLS_CA), the Python client (tls_ca=, installed with pip into a
temporary directory), the official `openai` SDK over HTTPS, and Python's ssl module for
what SDKs hide (disconnects).

Usage: scripts/python_deps.sh tls_test.py BUILD_BIN_DIR TEST_NAME
"""
import concurrent.futures
import contextlib
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import time

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_test  # noqa: E402  (reads BUILD_BIN_DIR from argv[1] too)
from cluster_test import COORDINATOR, cluster_from_yaml, config_yaml  # noqa: E402
from testdata import ROOT, SMOL, STORIES, STORIES_IDS, need  # noqa: E402

MODEL_ID = "stories260K"
SMOL_ID = "SmolLM2-135M-Instruct.Q4_1"
KEY = "k-" + "0123abcd" * 3  # An API key (security.api_keys_file), sent over TLS.


def openssl(*args, cwd):
    p = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"openssl {' '.join(args)}: {p.stderr}"


def make_ca(d, name):
    """A self-signed EC P-256 CA: (name.pem, name.key) in `d`."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
            f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN=Cascade test {name}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-addext", "subjectKeyIdentifier=hash", cwd=d)
    return os.path.join(d, f"{name}.pem"), os.path.join(d, f"{name}.key")


def make_server_cert(d, ca, name="server"):
    """A server certificate for 127.0.0.1 and localhost, signed by `ca`: (name.pem, name.key)."""
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
                "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", ca[0], "-CAkey", ca[1], "-set_serial", "2", "-days", "2",
            "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=d)
    return os.path.join(d, f"{name}.pem"), os.path.join(d, f"{name}.key")


@contextlib.contextmanager
def tls_cluster(d, cert, key, model=STORIES, model_id=MODEL_ID, pipeline=2):
    """A TLS cluster (gRPC and HTTPS, API keys on): (address, https address, log path)."""
    keys = os.path.join(d, "keys")
    with open(keys, "w") as f:
        f.write(KEY + "\n")
    text = config_yaml(model, pipeline, kv_cache_mb=64).replace(
        "server: {listen: 127.0.0.1:0}",
        f"server: {{listen: 127.0.0.1:0, http_listen: 127.0.0.1:0, tls_cert_file: {cert}, tls_key_file: {key}}}")
    text += f"security: {{api_keys_file: {keys}}}\n"
    with cluster_from_yaml(text) as (address, _, log_path):
        log = open(log_path).read()
        m = re.search(r"https front on (\S+) \(model '([^']+)'\)", log)
        assert m and m.group(2) == model_id, log
        assert "public API over TLS" in log, log
        yield address, m.group(1), log_path


def cli(address, *args, ca=None, env_ca=None, key=KEY):
    env = {k: v for k, v in os.environ.items() if k not in ("CASCADE_API_KEY", "CASCADE_TLS_CA")}
    if key:
        env["CASCADE_API_KEY"] = key
    if env_ca:
        env["CASCADE_TLS_CA"] = env_ca
    tls = ["--tls-ca", ca] if ca else []
    return subprocess.run([cluster_test.CASCADE, *args, "--server", address, *tls], capture_output=True, text=True,
                          timeout=120, env=env)


GREEDY = ("generate", "--prompt-ids", "1", "--temperature", "0", "--max-tokens", "20", "--json")


def check_cli(address, ca, other_ca):
    p = cli(address, *GREEDY, ca=ca)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["token_ids"] == STORIES_IDS, p.stdout  # The float64 reference, as in plaintext.
    p = cli(address, *GREEDY, env_ca=ca)  # CASCADE_TLS_CA when --tls-ca is absent.
    assert p.returncode == 0 and json.loads(p.stdout)["token_ids"] == STORIES_IDS, p.stderr
    p = cli(address, "generate", "--prompt", "Once upon a time", "--max-tokens", "8", ca=ca)  # Streamed.
    assert p.returncode == 0 and p.stdout.strip(), p.stderr
    p = cli(address, "status", "--wait", "0", ca=ca)
    assert p.returncode == 0 and "cluster ready" in p.stdout, p.stdout + p.stderr
    p = cli(address, "bench", "--requests", "4", "--concurrency", "2", "--max-tokens", "4", ca=ca)
    assert p.returncode == 0, p.stdout + p.stderr  # Every request served.
    # Plaintext to the TLS port: refused, with the hint.
    p = cli(address, *GREEDY)
    assert p.returncode == 2 and "UNAVAILABLE" in p.stderr and "--tls-ca" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    print(f"CLI without --tls-ca: {p.stderr.strip()}")
    # A CA that did not issue the server's certificate: the handshake fails.
    p = cli(address, *GREEDY, ca=other_ca)
    assert p.returncode == 2 and "UNAVAILABLE" in p.stderr, p.stderr
    print(f"CLI with another CA: {p.stderr.strip()}")
    p = cli(address, *GREEDY, ca="/nonexistent/ca.pem")
    assert p.returncode == 2 and "/nonexistent/ca.pem" in p.stderr, p.stderr
    # Over TLS, API keys still count.
    p = cli(address, *GREEDY, ca=ca, key=None)
    assert p.returncode == 2 and "UNAUTHENTICATED" in p.stderr, p.stderr
    print("CLI: greedy ids over TLS equal the reference (--tls-ca and CASCADE_TLS_CA), status and bench served; "
          "plaintext, another CA, a missing CA file and a missing key refused")


def install_python_client(d):
    installed = os.path.join(d, "site")
    package = os.path.join(ROOT, "clients", "python")
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                        "--no-build-isolation", "--target", installed, package], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, f"pip install {package}: {p.stdout}\n{p.stderr}"
    sys.path.insert(0, installed)
    import cascade_client
    assert cascade_client.__file__.startswith(installed), cascade_client.__file__
    return cascade_client


def check_python_client(cascade_client, address, ca):
    with cascade_client.Client(address, timeout=60, tls_ca=ca, api_key=KEY) as c:
        assert c.health() == "SERVING"
        r = c.generate([1], max_tokens=20, temperature=0)
        assert r.token_ids == STORIES_IDS, r.token_ids
        streamed = [i for chunk in c.stream([1], max_tokens=20, temperature=0) for i in chunk.token_ids]
        assert streamed == STORIES_IDS, streamed
    with open(ca, "rb") as f:
        pem = f.read()
    with cascade_client.Client(address, timeout=60, tls_ca=pem, api_key=KEY) as c:  # The PEM itself.
        assert c.generate([1], max_tokens=20, temperature=0).token_ids == STORIES_IDS
    with cascade_client.Client(address, timeout=10, api_key=KEY) as c:  # Plaintext.
        try:
            c.generate([1], max_tokens=2)
            raise AssertionError("a plaintext call to the TLS port was served")
        except cascade_client.CascadeError as e:
            assert e.code.name == "UNAVAILABLE", e
    try:
        cascade_client.Client(address, tls_ca=b"not a certificate")
        raise AssertionError("tls_ca without a certificate was accepted")
    except ValueError as e:
        assert "tls_ca" in str(e), e
    print("Python client: tls_ca as a path and as PEM bytes, greedy ids equal the reference; plaintext UNAVAILABLE")


def sdk(https_address, ca, key=KEY):
    http_client = openai.DefaultHttpx2Client(verify=ssl.create_default_context(cafile=ca))
    return openai.OpenAI(base_url=f"https://{https_address}/v1", api_key=key, max_retries=0, http_client=http_client)


def https_get(https_address, path, ca, headers=None):
    host, port = https_address.rsplit(":", 1)
    conn = http.client.HTTPSConnection(host, int(port), timeout=30, context=ssl.create_default_context(cafile=ca))
    conn.request("GET", path, headers=headers or {})
    r = conn.getresponse()
    body = r.read().decode()
    conn.close()
    return r.status, body


def kv_used(https_address, ca):
    status, text = https_get(https_address, "/metrics", ca)
    assert status == 200, status
    m = re.search(r"^cascade_kv_blocks_used (\S+)$", text, re.M)
    assert m, text[:500]
    return float(m.group(1))


def check_https(address, https_address, ca):
    c = sdk(https_address, ca)
    assert [m.id for m in c.models.list().data] == [MODEL_ID]
    whole = c.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=16, temperature=0)
    grpc = json.loads(cli(address, "generate", "--prompt", "Once upon a time", "--temperature", "0", "--max-tokens",
                          "16", "--json", ca=ca).stdout)
    assert whole.choices[0].text == grpc["text"], (whole.choices[0].text, grpc["text"])
    parts = list(c.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=16, temperature=0,
                                      stream=True))  # SSE over TLS.
    assert "".join(p.choices[0].text for p in parts) == whole.choices[0].text

    # Concurrency 32 over TLS (the pool, the raised backlog, keep-alive connections).
    def one(i):
        return c.completions.create(model=MODEL_ID, prompt=f"Story {i}:", max_tokens=8, temperature=0.7, seed=i,
                                    extra_body={"ignore_eos": True}).usage.completion_tokens
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        assert list(pool.map(one, range(64))) == [8] * 64
    # API keys over TLS: a wrong one is 401 in OpenAI's shape.
    try:
        sdk(https_address, ca, key="wrong-key-but-long-enough").completions.create(model=MODEL_ID, prompt="Hi",
                                                                                   max_tokens=2)
        raise AssertionError("served with a wrong key")
    except openai.AuthenticationError as e:
        assert e.status_code == 401 and e.body["code"] == "invalid_api_key", e.body
    assert https_get(https_address, "/health", ca)[0] == 200
    # The SDK trusting only the system's CAs refuses the certificate.
    try:
        openai.OpenAI(base_url=f"https://{https_address}/v1", api_key=KEY, max_retries=0).models.list()
        raise AssertionError("a certificate from an unknown CA was accepted")
    except openai.APIConnectionError:
        pass
    # Plain HTTP to the HTTPS port gets no HTTP answer.
    host, port = https_address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/health")
        r = conn.getresponse()
        raise AssertionError(f"plain HTTP was answered: {r.status}")
    except (http.client.HTTPException, ConnectionError, socket.timeout) as e:
        print(f"plain http:// to the TLS port: {type(e).__name__}")
    finally:
        conn.close()
    print("HTTPS: the openai SDK (models, completions whole and streamed, 64 requests at concurrency 32) "
          "with the test CA; a wrong key 401; unknown CA and plain HTTP refused")


def check_https_disconnect(https_address, ca):
    """A TLS client that goes away cancels its request (the front's writes fail)."""
    before = cancelled(https_address, ca)
    host, port = https_address.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=ca)
    for stream in (True, False):
        raw = socket.create_connection((host, int(port)), timeout=30)
        s = ctx.wrap_socket(raw, server_hostname=host)
        body = json.dumps({"model": SMOL_ID, "prompt": "Once upon a time", "max_tokens": 2000, "temperature": 0,
                           "stream": stream, "ignore_eos": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        if stream:
            got = b""
            while got.count(b"data: ") < 5:
                got += s.recv(4096)
            assert b"HTTP/1.1 200" in got and b"text/event-stream" in got, got[:200]
        else:
            time.sleep(1.5)
        assert kv_used(https_address, ca) > 0
        s.close()
        t0 = time.time()
        while kv_used(https_address, ca) > 0:
            assert time.time() - t0 < 10, "KV blocks not freed 10 s after the TLS client went away"
            time.sleep(0.2)
        print(f"TLS client gone ({'stream' if stream else 'whole response'}): blocks free {time.time() - t0:.2f} s "
              "later")
    assert cancelled(https_address, ca) - before == 2


def cancelled(https_address, ca):
    status, text = https_get(https_address, "/metrics", ca)
    m = re.search(r'^cascade_requests_total\{api="http",outcome="cancelled"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def test_public_api():
    need(STORIES)
    with tempfile.TemporaryDirectory() as d:
        ca = make_ca(d, "ca")
        other_ca = make_ca(d, "other-ca")
        cert, key = make_server_cert(d, ca)
        cascade_client = install_python_client(d)
        with tls_cluster(d, cert, key) as (address, https_address, _):
            check_cli(address, ca[0], other_ca[0])
            check_python_client(cascade_client, address, ca[0])
            check_https(address, https_address, ca[0])


def test_https_disconnect():
    """The HTTP front's disconnect detection over TLS, on the default model (stories260K
    would finish its whole context before the client leaves)."""
    need(SMOL)
    with tempfile.TemporaryDirectory() as d:
        ca = make_ca(d, "ca")
        cert, key = make_server_cert(d, ca)
        with tls_cluster(d, cert, key, model=SMOL, model_id=SMOL_ID, pipeline=1) as (_, https_address, _):
            check_https_disconnect(https_address, ca[0])


def test_bad_files_exit_2():
    """The coordinator refuses at start-up, exit 2 with one line naming the key and the
    file: a key that is not the certificate's, a missing file, a file that is no PEM; and
    the config refuses one key without the other."""
    need(STORIES)
    with tempfile.TemporaryDirectory() as d:
        ca = make_ca(d, "ca")
        cert, key = make_server_cert(d, ca)
        other_cert, other_key = make_server_cert(d, ca, "other")
        garbage = os.path.join(d, "garbage.pem")
        with open(garbage, "w") as f:
            f.write("not a certificate\n")
        cases = [
            (f"tls_cert_file: {cert}, tls_key_file: {other_key}", ["server.tls_key_file", other_key, cert]),
            (f"tls_cert_file: {os.path.join(d, 'missing.pem')}, tls_key_file: {key}",
             ["server.tls_cert_file", os.path.join(d, "missing.pem")]),
            (f"tls_cert_file: {garbage}, tls_key_file: {key}", ["server.tls_cert_file", garbage]),
            (f"tls_cert_file: {cert}, tls_key_file: {garbage}", ["server.tls_key_file", garbage]),
            (f"tls_cert_file: {cert}", ["server.tls_key_file", "both or neither"]),
            (f"tls_key_file: {key}", ["server.tls_cert_file", "both or neither"]),
        ]
        for server, wants in cases:
            cfg = os.path.join(d, "bad.yaml")
            with open(cfg, "w") as f:
                f.write(config_yaml(STORIES, 1).replace("server: {listen: 127.0.0.1:0}",
                                                        f"server: {{listen: 127.0.0.1:0, {server}}}"))
            t0 = time.time()
            p = subprocess.run([COORDINATOR, "--config", cfg], capture_output=True, text=True, timeout=60)
            last = p.stderr.strip().splitlines()[-1]
            assert p.returncode == 2, (server, p.returncode, p.stderr)
            assert last.startswith("cascade-coordinator: ") and all(w in last for w in wants), (wants, p.stderr)
            assert "ready on" not in p.stderr and time.time() - t0 < 20, p.stderr
            print(f"{server}: exit 2: {last}")


if __name__ == "__main__":
    globals()["test_" + sys.argv[2]]()
