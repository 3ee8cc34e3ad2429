"""Network-namespace "hosts" on one machine for the multi-host benchmarks
(scripts/bench_multinode.py, scripts/bench_disagg.py): every host is a network namespace
joined to the others by a veth on one Linux bridge (10.78.0.x/24, removed on close), each
host's link shaped on its way out (rate by `tc tbf`, one-way delay by `tc netem`, or, on
kernels without sch_netem, by scripts/nfq_delay.c behind an iptables NFQUEUE rule).
Needs root and iproute2 (ip, tc, ss). Also the processes' helpers both benchmarks use:
wait_for (a line in a log) and stop (a cluster's process groups)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

# name: tbf rate, its bucket, one-way delay in microseconds (each host's egress).
NET_SPECS = {"10g": ("10gbit", "2mb", 100), "1g": ("1gbit", "256kb", 1000)}
SUBNET = "10.78.0"


def sh(*cmd, check=True, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + [str(c) for c in cmd]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise SystemExit(f"{os.path.basename(sys.argv[0])}: {' '.join(cmd)}: {p.stderr.strip()}")
    return p


class Hosts:
    """n network namespaces on one bridge (in a namespace of its own); host i is
    SUBNET.(i+1) on its veth `eth0`."""

    def __init__(self, n, tag, nfq_delay):
        self.n, self.nfq_delay = n, nfq_delay
        self.switch = f"{tag}sw"
        self.names = [f"{tag}h{i}" for i in range(n)]
        self.delayers = []
        self.netem = None
        sh("ip", "netns", "add", self.switch)
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        for i, ns in enumerate(self.names):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"p{i}", "netns", self.switch)
            sh("ip", "-n", self.switch, "link", "set", f"p{i}", "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.ip(i)}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    @staticmethod
    def ip(i):
        return f"{SUBNET}.{i + 1}"

    def shape(self, net):
        """Rate and one-way delay on every host's egress (so each path between two hosts
        crosses one shaped link)."""
        rate, burst, delay_us = NET_SPECS[net]
        self.stop_delayers()
        if self.netem is None:  # Probe once: this kernel may lack sch_netem.
            self.netem = sh("tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "1ms", ns=self.names[0],
                            check=False).returncode == 0
            sh("tc", "qdisc", "del", "dev", "eth0", "root", ns=self.names[0], check=False)
            if not self.netem:
                print("tc netem is not in this kernel: one-way delay by scripts/nfq_delay.c (iptables NFQUEUE)")
                if shutil.which("iptables") is None:
                    raise SystemExit("no sch_netem and no iptables to queue packets to nfq_delay "
                                     "(apt-get install iptables)")
        for ns in self.names:
            sh("tc", "qdisc", "del", "dev", "eth0", "root", ns=ns, check=False)
            if self.netem:
                sh("tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "netem", "delay", f"{delay_us}us",
                   "limit", "100000", ns=ns)
                sh("tc", "qdisc", "add", "dev", "eth0", "parent", "1:", "handle", "2:", "tbf", "rate", rate, "burst",
                   burst, "latency", "50ms", ns=ns)
            else:
                sh("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate, "burst", burst, "latency", "50ms",
                   ns=ns)
                if sh("iptables", "-C", "OUTPUT", "-o", "eth0", "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass",
                      ns=ns, check=False).returncode != 0:
                    sh("iptables", "-A", "OUTPUT", "-o", "eth0", "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass",
                       ns=ns)
                self.delayers.append(subprocess.Popen(["ip", "netns", "exec", ns, self.nfq_delay, "0", str(delay_us)],
                                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.3)

    def stop_delayers(self):
        for p in self.delayers:
            p.terminate()
            p.wait()
        self.delayers = []

    def tx_bytes(self):
        return [int(sh("cat", "/sys/class/net/eth0/statistics/tx_bytes", ns=ns).stdout) for ns in self.names]

    def socket_bytes(self, i):
        """{(local, peer): bytes sent} of host i's TCP sockets to other hosts."""
        out = {}
        key = None
        for line in sh("ss", "-tinH", "state", "established", ns=self.names[i]).stdout.splitlines():
            m = re.search(r"(\d+\.\d+\.\d+\.\d+):(\d+)\s+(\d+\.\d+\.\d+\.\d+):(\d+)", line)
            if m:
                key = (m.group(1), int(m.group(2)), m.group(3), int(m.group(4))) if m.group(1) != m.group(3) else None
                continue
            b = re.search(r"bytes_sent:(\d+)", line) or re.search(r"bytes_acked:(\d+)", line)
            if key and b:
                out[key] = int(b.group(1))
                key = None
        return out

    def rtt_us(self):
        """Median round trip of 64-byte TCP messages between hosts 0 and 1, microseconds."""
        code = ("import socket,sys,time\n"
                "if sys.argv[1]=='s':\n"
                " s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind((sys.argv[2],7777))\n"
                " s.listen(1);c,_=s.accept();c.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1)\n"
                " while True:\n"
                "  d=c.recv(64)\n"
                "  if not d: break\n"
                "  c.sendall(d)\n"
                "else:\n"
                " c=socket.create_connection((sys.argv[2],7777),timeout=10)\n"
                " c.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1);t=[]\n"
                " for _ in range(101):\n"
                "  a=time.perf_counter();c.sendall(b'x'*64);c.recv(64);t.append(time.perf_counter()-a)\n"
                " print(sorted(t)[50]*1e6)\n")
        server = subprocess.Popen(["ip", "netns", "exec", self.names[1], sys.executable, "-c", code, "s", self.ip(1)])
        time.sleep(0.3)
        try:
            return float(sh(sys.executable, "-c", code, "c", self.ip(1), ns=self.names[0]).stdout)
        finally:
            server.kill()
            server.wait()

    def close(self):
        self.stop_delayers()
        for ns in self.names + [self.switch]:
            sh("ip", "netns", "del", ns, check=False)


class HostCluster:
    """A cluster over `hosts`: the coordinator in host 0 (launching host 0's workers), and
    `devices[i]` external CPU workers in host i > 0, joined with the cluster's CA and token,
    UCX over TCP (`ucx_tls`). `parallel` is the config's parallel map (YAML flow), `extra`
    more top-level YAML. Clients run in host 0 (client, bench); stop() ends it all."""

    def __init__(self, hosts, bin_dir, tmp, name, model, parallel, devices, extra="", ucx_tls="tcp"):
        self.hosts, self.bin, self.procs = hosts, bin_dir, []
        try:
            self.start(tmp, name, model, parallel, devices, extra, ucx_tls)
        except BaseException:
            self.stop()
            raise

    def start(self, tmp, name, model, parallel, devices, extra, ucx_tls):
        hosts = self.hosts
        nodes = "".join(f"  - {{name: h{i}, host: {hosts.ip(i)}, devices: [{', '.join(['cpu'] * d)}], "
                        f"launch: {'local' if i == 0 else 'external'}}}\n" for i, d in enumerate(devices))
        trust = os.path.join(tmp, f"{name}-cluster")
        cfg = os.path.join(tmp, f"{name}.yaml")
        open(cfg, "w").write(
            f"model: {{path: {os.path.abspath(model)}}}\nparallel: {parallel}\nnodes:\n{nodes}"
            f"server: {{listen: {hosts.ip(0)}:0, http_listen: {hosts.ip(0)}:0}}\n"
            f"security: {{cluster_dir: {trust}}}\n{extra}")
        env = dict(os.environ, UCX_TLS=ucx_tls)
        self.log = os.path.join(tmp, f"{name}.log")
        log = open(self.log, "w")
        self.procs.append(subprocess.Popen(["ip", "netns", "exec", hosts.names[0], f"{self.bin}/cascade-coordinator",
                                            "--config", cfg], stdout=log, stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True))
        control = wait_for(self.log, r"waiting for \d+ worker\(s\) on (\S+) \(mutual TLS\)", 120, self.procs).group(1)
        for i, d in enumerate(devices):
            for _ in range(d if i > 0 else 0):
                self.procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", hosts.names[i], f"{self.bin}/cascade-worker", "--coordinator", control,
                     "--node", f"h{i}", "--device", "cpu", "--listen", f"{hosts.ip(i)}:0", "--ca",
                     f"{trust}/ca.pem", "--token-file", f"{trust}/join.token"],
                    stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        self.address = wait_for(self.log, r"ready on (\S+)", 600, self.procs).group(1)
        self.http = wait_for(self.log, r"http front on (\S+)", 10, self.procs).group(1)
        # gRPC listens on the control port and each worker's; every other TCP port between hosts is UCX.
        status = self.client("status", "--server", self.address).stdout
        self.grpc_ports = {int(control.rsplit(":", 1)[1])} | {int(p) for p in re.findall(r"\d+\.\d+\.\d+\.\d+:(\d+)",
                                                                                             status)}

    def client(self, *args):
        return sh(f"{self.bin}/cascade", *args, ns=self.hosts.names[0])

    def bench(self, concurrency, requests, prompt_tokens, max_tokens, json_path=None):
        args = ["bench", "--server", self.address, "--requests", requests, "--concurrency", concurrency,
                "--prompt-tokens", prompt_tokens, "--max-tokens", max_tokens]
        self.client(*args, *(["--json", json_path] if json_path else []))
        return json.load(open(json_path)) if json_path else None

    def data_plane_bytes(self, before, after):
        """TCP payload sent between hosts on sockets that are not gRPC (the UCX data plane),
        from two lists of Hosts.socket_bytes."""
        data = 0
        for b, a in zip(before, after):
            for k, v in a.items():
                if k[1] not in self.grpc_ports and k[3] not in self.grpc_ports:
                    data += v - b.get(k, 0)
        return data

    def stop(self):
        stop(self.procs)


def wait_for(path, pattern, timeout, procs):
    """The first match of `pattern` in the log at `path`, polled every 0.1 s for `timeout`
    seconds; exits with the log's tail when one of `procs` exits first or time runs out."""
    name = os.path.basename(sys.argv[0])
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(pattern, open(path).read())
        if m:
            return m
        for p in procs:
            if p.poll() is not None:
                raise SystemExit(f"{name}: a process exited ({p.args[3]}):\n{open(path).read()[-3000:]}")
        time.sleep(0.1)
    raise SystemExit(f"{name}: no /{pattern}/ in {timeout} s:\n{open(path).read()[-3000:]}")


def stop(procs):
    """SIGTERM to each process group (the newest first), then SIGKILL to those still up 15 s later."""
    for p in reversed(procs):
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in reversed(procs):
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
