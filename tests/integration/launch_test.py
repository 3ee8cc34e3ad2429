#!/usr/bin/env python3
"""Launching a cluster the ways a user does on real machines, with the real daemons:
scripts/launch_cluster.sh through a real sshd (OpenSSH) into another network namespace,
and scripts/slurm/cascade.sbatch through a real Slurm (munged, slurmctld, slurmd). Each
test makes its own keys, configs, state directories and network namespaces (10.77.x.x
addresses, nothing listens outside them) and tears everything down again; the packages
come from scripts/setup.sh. Where the machine cannot (not root, no namespaces, a package
missing, a daemon that will not start in this container) a test prints SKIP and why.

Usage: launch_test.py BUILD_BIN_DIR TEST_NAME
"""
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_test  # noqa: E402,F401  (reads BUILD_BIN_DIR from argv[1] too)
from cluster_test import BIN, CASCADE, COORDINATOR, netns_or_skip, stop  # noqa: E402
from testdata import ROOT, STORIES, STORIES_IDS, need  # noqa: E402

LAUNCH_CLUSTER = os.path.join(ROOT, "scripts", "launch_cluster.sh")
CASCADE_SBATCH = os.path.join(ROOT, "scripts", "slurm", "cascade.sbatch")
BUILD_DIR = os.path.dirname(os.path.abspath(BIN))
GREEDY = ["--prompt-ids", "1", "--temperature", "0", "--max-tokens", "20"]


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(0)


def root_and_tools_or_skip(*tools, package):
    if os.geteuid() != 0:
        skip("network namespaces and the daemons need root")
    found = {}
    for t in tools:
        found[t] = shutil.which(t) or shutil.which(t, path="/usr/sbin:/sbin")
        if found[t] is None:
            skip(f"no `{t}` ({package}; scripts/setup.sh installs it)")
    return found


def clean_env(**extra):
    """This environment without Slurm's job variables (a test run inside an allocation
    must not make launch_cluster.sh take its srun path) or UCX's, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "UCX_"))}
    env.update(extra)
    return env


def kill_netns(ns):
    """SIGKILLs what still runs in the test's namespace `ns` (all started by this test),
    then deletes it."""
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(0.2 if pids else 0)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def tail(path, n=20):
    try:
        return "".join(open(path, errors="replace").readlines()[-n:])
    except FileNotFoundError:
        return f"({path} not written)"


def wait_for(what, check, timeout_s, alive=()):
    """Polls `check()` (a truthy result ends the wait) every 0.1 s; fails when a process
    in `alive` (name, Popen, log) exits first or after timeout_s, with their logs."""
    deadline = time.time() + timeout_s
    while True:
        got = check()
        if got:
            return got
        dead = [(name, p, log) for name, p, log in alive if p.poll() is not None]
        if dead or time.time() > deadline:
            logs = "\n".join(f"--- {name} (exit {p.poll()}):\n{tail(log, 40)}" for name, p, log in alive)
            raise AssertionError(f"{what}: " + (f"{dead[0][0]} exited" if dead else f"not within {timeout_s} s") + "\n" + logs)
        time.sleep(0.1)


def log_match(path, pattern):
    try:
        return re.search(pattern, open(path, errors="replace").read())
    except FileNotFoundError:
        return None


def worker_processes(ns):
    """(pid, argv, environment) of each cascade-worker running in namespace `ns`."""
    out = []
    for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0].decode()) == "cascade-worker":
            out.append((int(pid), [a.decode() for a in argv if a],
                        dict(e.decode().split("=", 1) for e in env if b"=" in e)))
    return out


def test_ssh():
    """scripts/launch_cluster.sh over a real sshd. Host A (namespace, 10.77.0.1) runs the
    coordinator with node a's worker (launch: local); host B (10.77.0.2) runs sshd with a
    host key and one authorized key made here, and node b (launch: external) is started
    there by launch_cluster.sh run from A, with ssh pointed at this test's key and
    known_hosts through CASCADE_SSH_OPTS="-F FILE". The cluster gets ready over mutual
    TLS, a greedy generation of stories260K matches the reference, the CA bundle and join
    token arrived 0600 in the remote user's ~/.cascade/trust (0700), and the remote worker
    got UCX_TLS from launch_cluster.sh's environment (sshd passes none by itself)."""
    need(STORIES)
    tools = root_and_tools_or_skip("sshd", "ssh", "ssh-keygen", package="openssh-server")
    ns_a, ns_b = netns_or_skip()
    t0 = time.time()
    try:
        with tempfile.TemporaryDirectory() as d:
            home = os.path.join(d, "remote-home")  # HOME of the ssh sessions on B.
            os.mkdir(home)
            for key in ("host_key", "id"):
                subprocess.run([tools["ssh-keygen"], "-q", "-t", "ed25519", "-N", "", "-C", f"cascade-test-{key}",
                                "-f", os.path.join(d, key)], check=True)
            shutil.copy(os.path.join(d, "id.pub"), os.path.join(d, "authorized_keys"))
            sshd_config = os.path.join(d, "sshd_config")
            open(sshd_config, "w").write(
                "ListenAddress 10.77.0.2:22\n"
                f"HostKey {d}/host_key\n"
                f"PidFile {d}/sshd.pid\n"
                f"AuthorizedKeysFile {d}/authorized_keys\n"
                "AuthenticationMethods publickey\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                "PermitRootLogin prohibit-password\n"
                # The keys live under /tmp (world-writable), which StrictModes refuses.
                "StrictModes no\n"
                f"SetEnv HOME={home}\n")
            host_pub = open(os.path.join(d, "host_key.pub")).read().split()
            open(os.path.join(d, "known_hosts"), "w").write(f"10.77.0.2 {host_pub[0]} {host_pub[1]}\n")
            ssh_config = os.path.join(d, "ssh_config")
            open(ssh_config, "w").write(
                "Host 10.77.0.2\n  User root\n"
                f"  IdentityFile {d}/id\n  IdentitiesOnly yes\n"
                f"  UserKnownHostsFile {d}/known_hosts\n  GlobalKnownHostsFile /dev/null\n"
                "  StrictHostKeyChecking yes\n  PasswordAuthentication no\n")
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation directory.

            cfg = os.path.join(d, "cluster.yaml")
            open(cfg, "w").write(
                f"model: {{path: {STORIES}}}\nparallel: {{pipeline: 2, tensor: 1}}\n"
                "nodes:\n  - {name: a, host: 10.77.0.1, devices: [cpu], launch: local}\n"
                "  - {name: b, host: 10.77.0.2, devices: [cpu], launch: external}\n"
                "server: {listen: 10.77.0.1:0}\nscheduler: {kv_cache_mb: 16}\n"
                "security: {cluster_dir: trust}\n")
            logs = {n: os.path.join(d, f"{n}.log") for n in ("sshd", "coordinator", "launch")}
            procs = {}
            try:
                # sshd needs its absolute path (it re-executes itself); no UCX_* of ours leaks into it.
                procs["sshd"] = subprocess.Popen(["ip", "netns", "exec", ns_b, tools["sshd"], "-D", "-e", "-f", sshd_config],
                                                 stdout=open(logs["sshd"], "w"), stderr=subprocess.STDOUT,
                                                 env=clean_env(), start_new_session=True)
                for _ in range(100):
                    if log_match(logs["sshd"], "Server listening on 10.77.0.2") or procs["sshd"].poll() is not None:
                        break
                    time.sleep(0.1)
                if procs["sshd"].poll() is not None:
                    skip(f"sshd does not start here: {tail(logs['sshd'], 3).strip()}")
                assert log_match(logs["sshd"], "Server listening on 10.77.0.2"), tail(logs["sshd"])

                procs["coordinator"] = subprocess.Popen(["ip", "netns", "exec", ns_a, COORDINATOR, "--config", cfg],
                                                        stdout=open(logs["coordinator"], "w"), stderr=subprocess.STDOUT,
                                                        env=clean_env(UCX_TLS="tcp"), start_new_session=True)
                alive = [("coordinator", procs["coordinator"], logs["coordinator"])]
                control = wait_for("the coordinator's control plane", lambda: log_match(
                    logs["coordinator"], r"waiting for \d+ worker\(s\) on (\S+) \(mutual TLS\)"), 60, alive).group(1)
                assert control.startswith("10.77.0.1:"), control
                env = clean_env(UCX_TLS="tcp", CASCADE_SSH_OPTS=f"-F {ssh_config}", CASCADE_BUILD_DIR=BUILD_DIR)
                procs["launch"] = subprocess.Popen(["ip", "netns", "exec", ns_a, LAUNCH_CLUSTER, cfg, control],
                                                   stdout=open(logs["launch"], "w"), stderr=subprocess.STDOUT, env=env,
                                                   start_new_session=True)
                alive += [("launch_cluster.sh", procs["launch"], logs["launch"]), ("sshd", procs["sshd"], logs["sshd"])]
                address = wait_for("ready", lambda: log_match(logs["coordinator"], r"ready on (\S+)"), 90, alive).group(1)
                t_ready = time.time() - t0

                p = subprocess.run(["ip", "netns", "exec", ns_a, CASCADE, "generate", "--server", address, *GREEDY,
                                    "--json"], capture_output=True, text=True, timeout=60)
                assert p.returncode == 0, p.stderr
                got = json.loads(p.stdout)["token_ids"]
                assert got == STORIES_IDS, got

                launch_text = open(logs["launch"]).read()
                assert re.search(r"stage 1 on b \(10\.77\.0\.2\): ssh -F \S+ -o BatchMode=yes 10\.77\.0\.2 UCX_TLS=tcp ",
                                 launch_text), launch_text
                assert "Accepted publickey for root from 10.77.0.1" in open(logs["sshd"]).read(), tail(logs["sshd"])
                trust = os.path.join(home, ".cascade", "trust")
                assert stat.S_IMODE(os.stat(trust).st_mode) == 0o700, oct(os.stat(trust).st_mode)
                for f in ("ca.pem", "join.token"):
                    mode = stat.S_IMODE(os.stat(os.path.join(trust, f)).st_mode)
                    assert mode == 0o600, (f, oct(mode))
                    assert open(os.path.join(trust, f)).read() == open(os.path.join(d, "trust", f)).read(), f
                workers = worker_processes(ns_b)
                assert len(workers) == 1, workers
                _, argv, wenv = workers[0]
                assert wenv.get("UCX_TLS") == "tcp" and wenv.get("HOME") == home, wenv
                assert ["--ca", f"{trust}/ca.pem"] == argv[argv.index("--ca"):argv.index("--ca") + 2], argv
                assert "--node" in argv and argv[argv.index("--node") + 1] == "b", argv
                print(f"ssh: node b's worker launched over sshd in {ns_b} (trust files 0600 in ~/.cascade/trust, "
                      f"UCX_TLS passed), cluster ready in {t_ready:.1f} s, greedy ids match the reference")
            finally:
                for name in ("launch", "coordinator", "sshd"):
                    if name in procs:
                        stop(procs[name])
                kill_netns(ns_b)  # The remote worker (sshd's session) if it outlived its coordinator.
    finally:
        kill_netns(ns_a)
        kill_netns(ns_b)


def one_netns_or_skip():
    """One namespace for a whole Slurm cluster: loopback plus a veth pair with 10.77.1.1.
    Slurm resolves names with AI_ADDRCONFIG, which finds nothing where loopback is the only
    interface with an address."""
    tag = f"c{os.getpid() % 100000}"
    ns = f"{tag}s"
    cmds = [f"ip netns add {ns}", f"ip netns exec {ns} ip link set lo up",
            f"ip netns exec {ns} ip link add {tag}sa type veth peer name {tag}sb",
            f"ip netns exec {ns} ip addr add 10.77.1.1/24 dev {tag}sa",
            f"ip netns exec {ns} ip link set {tag}sa up", f"ip netns exec {ns} ip link set {tag}sb up"]
    for c in cmds:
        p = subprocess.run(c.split(), capture_output=True, text=True)
        if p.returncode != 0:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            skip(f"cannot build a network namespace here ({c}: {p.stderr.strip()})")
    return ns


SLURM_CONF = """\
# Written by tests/integration/launch_test.py: a one-node cluster in a private directory.
ClusterName=cascadetest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/munge.sock
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
# No cgroups: linuxproc tracks a job's processes by their parents.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MailProg=/bin/true
# The node says it has 4 CPUs whatever the machine has.
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


def test_slurm():
    """scripts/slurm/cascade.sbatch through a real Slurm: munged with a key made here,
    slurmctld and slurmd (one node, `localhost`) with their state, spool and logs in a
    temporary directory, all in a network namespace of their own. `sbatch --wait` runs the
    batch script with two CPU devices on the node: the coordinator starts in the batch step,
    each worker is a job step (srun, through launch_cluster.sh, trust in its environment),
    and the script's own greedy generation (--generate) matches the reference. The job
    leaves neither its trust directory nor the steps' copies of the CA behind."""
    need(STORIES)
    tools = root_and_tools_or_skip("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "sinfo", "squeue", "scancel",
                                   package="slurm-wlm and munge")
    if shutil.which("nsenter") is None:
        skip("no `nsenter` (util-linux)")
    ns = one_netns_or_skip()
    # nsenter --net, not `ip netns exec`: the latter mounts a sysfs of the namespace's own,
    # without /sys/fs/cgroup, and slurmd will not start without it.
    nsenter = ["nsenter", f"--net=/run/netns/{ns}"]
    t0 = time.time()
    d = tempfile.mkdtemp(prefix="cascade-slurm-")
    procs = {}
    try:
        os.chmod(d, 0o711)  # munged wants every directory above its socket searchable by all.
        os.mkdir(os.path.join(d, "munge"), 0o755)
        for sub in ("state", "spool", "tmp"):
            os.mkdir(os.path.join(d, sub), 0o700)
        key = os.path.join(d, "munge.key")
        subprocess.run([tools["mungekey"], "--create", f"--keyfile={key}"], check=True)
        os.chmod(key, 0o600)
        conf = os.path.join(d, "slurm.conf")
        open(conf, "w").write(SLURM_CONF.format(d=d))
        env = clean_env(SLURM_CONF=conf)
        logs = {n: os.path.join(d, f"{n}.out") for n in ("munged", "slurmctld", "slurmd")}

        def start(name, argv):
            procs[name] = subprocess.Popen(nsenter + argv, stdout=open(logs[name], "w"), stderr=subprocess.STDOUT,
                                           env=env, start_new_session=True)

        def started_or_skip(names, ready, timeout_s):
            """Waits for ready(); a daemon that exits first cannot run here: SKIP with its reason."""
            deadline = time.time() + timeout_s
            while time.time() < deadline:
                if ready():
                    return
                for name in names:
                    if procs[name].poll() is not None:
                        skip(f"{name} does not start here (exit {procs[name].returncode}): "
                             f"{tail(logs[name], 3).strip()}")
                time.sleep(0.2)
            raise AssertionError(f"{', '.join(names)} not ready in {timeout_s} s:\n" + "".join(
                f"--- {n}:\n{tail(p)}\n" for n, p in logs.items()))

        m = os.path.join(d, "munge")
        start("munged", [tools["munged"], "--foreground", f"--key-file={key}", f"--socket={m}/munge.sock",
                         f"--pid-file={m}/munged.pid", f"--seed-file={m}/munged.seed", f"--log-file={m}/munged.log"])
        started_or_skip(["munged"], lambda: os.path.exists(f"{m}/munge.sock"), 10)
        start("slurmctld", [tools["slurmctld"], "-D", "-f", conf])
        start("slurmd", [tools["slurmd"], "-D", "-N", "localhost", "-f", conf])

        def idle():
            p = subprocess.run(nsenter + [tools["sinfo"], "-h", "-n", "localhost", "-o", "%T"], capture_output=True,
                               text=True, env=env, timeout=30)
            return p.returncode == 0 and p.stdout.strip() == "idle"
        started_or_skip(["munged", "slurmctld", "slurmd"], idle, 60)
        t_idle = time.time() - t0

        job_out = os.path.join(d, "job.out")
        # TMPDIR: where each worker step keeps its copy of the CA, to be removed when it ends.
        job_env = dict(env, CASCADE_DIR=ROOT, CASCADE_BUILD_DIR=BUILD_DIR, CASCADE_RUN_DIR=os.path.join(d, "run"),
                       TMPDIR=os.path.join(d, "tmp"))
        try:
            p = subprocess.run(nsenter + [tools["sbatch"], "--wait", f"--output={job_out}", f"--chdir={d}",
                                          "--time=5", CASCADE_SBATCH, STORIES, "--devices", "cpu,cpu", "--port", "0",
                                          "--threads", "1", "--generate", " ".join(GREEDY)],
                               capture_output=True, text=True, env=job_env, timeout=150)
        except subprocess.TimeoutExpired:
            raise AssertionError("sbatch --wait: the job did not end within 150 s:\n" + tail(job_out, 60))
        out = open(job_out).read() if os.path.exists(job_out) else ""
        assert p.returncode == 0, f"sbatch exit {p.returncode}: {p.stdout}{p.stderr}\n--- job output:\n{out}"
        m = re.search(r"^cascade\.sbatch: generate: (.*)$", out, re.M)
        assert m, out
        got = json.loads(m.group(1))["token_ids"]
        assert got == STORIES_IDS, (got, out)
        for stage in (0, 1):
            assert re.search(rf"^stage {stage} on localhost \(localhost\): srun .*--overlap", out, re.M), out
        assert re.search(r"^cascade\.sbatch: ready on localhost:\d+", out, re.M), out
        assert not os.path.exists(os.path.join(d, "run", "trust")), "the job left its trust directory"
        assert os.listdir(os.path.join(d, "tmp")) == [], ("the worker steps left files", os.listdir(os.path.join(d, "tmp")))
        print(f"slurm: node idle in {t_idle:.1f} s; job with the coordinator and 2 workers as srun steps: greedy ids "
              f"match the reference ({time.time() - t0:.1f} s in all)")
    finally:
        if "slurmctld" in procs and procs["slurmctld"].poll() is None:
            subprocess.run(nsenter + ["scancel", "--partition=debug"], env=clean_env(SLURM_CONF=os.path.join(
                d, "slurm.conf")), capture_output=True, timeout=30)
        for name in ("slurmd", "slurmctld", "munged"):
            if name in procs:
                stop(procs[name])
        kill_netns(ns)  # Job processes that outlived their slurmd.
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    globals()["test_" + sys.argv[2]]()
    print("PASS")
