#!/usr/bin/env python3
"""deploy/k8s without a cluster: every object against the Kubernetes API's JSON schemas
(`kubernetes-validate` from PyPI, strict: an unknown field fails), the references between
the manifests that no schema sees (names, ports, mounts, the workers' DNS names), and the
ConfigMap's cluster.yaml through the coordinator's own parser and planner
(`cascade-coordinator --list-workers`). Nothing here is applied to a cluster.

Usage: scripts/python_deps.sh k8s_manifests_test.py BUILD_BIN_DIR [DEPLOY_DIR]
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.append(os.path.join(os.environ.get("CASCADE_PYTHON_CACHE", ""), "k8s"))  # python_deps.sh's k8s/ set
import kubernetes_validate  # noqa: E402
import yaml  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testdata import ROOT, SMOL, need  # noqa: E402

BIN = sys.argv[1]
DEPLOY = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "deploy", "k8s")
# The oldest release still common in clusters, and the newest the package knows.
VERSIONS = ["1.29.0", kubernetes_validate.utils.latest_version()]
TEMPLATES = {"trust-secret.yaml"}  # made from files, not applied as is (it says so)


def load():
    """{(kind, name): object} over every manifest, and the kustomization."""
    objects, kustomization = {}, None
    for f in sorted(os.listdir(DEPLOY)):
        if not f.endswith(".yaml"):
            continue
        with open(os.path.join(DEPLOY, f)) as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d is not None]
        if f == "kustomization.yaml":
            kustomization = docs[0]
            continue
        for d in docs:
            for v in VERSIONS:
                try:
                    kubernetes_validate.validate(d, v, strict=True)
                except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
                    sys.exit(f"FAIL: {f}: {d.get('kind')}/{d.get('metadata', {}).get('name')} "
                             f"(Kubernetes {v}): {getattr(e, 'message', e)}")
            key = (d["kind"], d["metadata"]["name"])
            assert key not in objects, f"{key} twice"
            objects[key] = dict(d, _file=f)
            print(f"schema ok ({', '.join(VERSIONS)}): {f}: {d['kind']}/{d['metadata']['name']}")
    return objects, kustomization


def container(spec):
    (c,) = spec["template"]["spec"]["containers"]
    return c


def volume_of(spec, mount_path):
    """The pod volume mounted at mount_path, and its mount."""
    pod = spec["template"]["spec"]
    (m,) = [m for m in container(spec)["volumeMounts"] if m["mountPath"] == mount_path]
    (v,) = [v for v in pod["volumes"] if v["name"] == m["name"]]
    return v, m


def flag(c, name):
    args = c["args"]
    for i, a in enumerate(args):
        if a == f"--{name}":
            return args[i + 1]
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    sys.exit(f"FAIL: {c['name']} has no --{name}")


def port(address):
    return int(address.rsplit(":", 1)[1])


def cluster_config(objs):
    """The text of cluster.yaml: the ConfigMap key mounted where the coordinator's --config reads it."""
    coord = objs[("Deployment", "cascade-coordinator")]["spec"]
    path = flag(container(coord), "config")
    vol, _ = volume_of(coord, os.path.dirname(path))
    return objs[("ConfigMap", vol["configMap"]["name"])]["data"][os.path.basename(path)]


def check_references(objs, kustomization):
    """What the API server accepts but a cluster would not run: the names and numbers each
    manifest takes from another."""
    files = {o["_file"] for o in objs.values()}
    assert sorted(kustomization["resources"]) == sorted(files - TEMPLATES), (kustomization["resources"], files)
    (ns,) = [name for kind, name in objs if kind == "Namespace"]
    for (kind, name), o in objs.items():
        assert kind == "Namespace" or o["metadata"].get("namespace") == ns, f"{kind}/{name} not in {ns}"
    for kind in ("Deployment", "StatefulSet"):
        for (k, name), o in objs.items():
            if k == kind:
                assert o["spec"]["selector"]["matchLabels"].items() <= o["spec"]["template"]["metadata"]["labels"].items()
    coord = objs[("Deployment", "cascade-coordinator")]["spec"]
    sts = objs[("StatefulSet", "cascade-worker")]["spec"]
    cc, wc = container(coord), container(sts)
    assert cc["image"] == wc["image"]
    cluster = yaml.safe_load(cluster_config(objs))
    # Nodes: one per StatefulSet pod, named as the pod, at its DNS name under the headless Service.
    headless = objs[("Service", sts["serviceName"])]["spec"]
    assert headless["clusterIP"] == "None" and headless["selector"].items() <= sts["template"]["metadata"]["labels"].items()
    sts_name = objs[("StatefulSet", "cascade-worker")]["metadata"]["name"]
    want = [(f"{sts_name}-{i}", f"{sts_name}-{i}.{sts['serviceName']}.{ns}.svc.cluster.local")
            for i in range(sts["replicas"])]
    assert [(n["name"], n["host"]) for n in cluster["nodes"]] == want, (cluster["nodes"], want)
    assert all(n["launch"] == "external" for n in cluster["nodes"])
    assert flag(wc, "node") == "$(POD_NAME)" and {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in wc["env"]
    n_devices = sum(len(n["devices"]) for n in cluster["nodes"])
    assert cluster["parallel"]["pipeline"] * cluster["parallel"].get("tensor", 1) == n_devices
    assert all(n["devices"] == [flag(wc, "device")] for n in cluster["nodes"])
    # Ports: server.* in the config, the container's ports, the Services'.
    named = {p["name"]: p["containerPort"] for p in cc["ports"]}

    def service_port(service, name):
        (p,) = [p for p in objs[("Service", service)]["spec"]["ports"] if p["name"] == name]
        assert objs[("Service", service)]["spec"]["selector"].items() <= coord["template"]["metadata"]["labels"].items()
        return p["port"], named[p["targetPort"]]

    server = cluster["server"]
    assert service_port("cascade-coordinator", "grpc")[1] == port(server["listen"])
    assert service_port("cascade-coordinator", "http")[1] == port(server["http_listen"])
    control_port, control_target = service_port("cascade-control", "control")
    assert control_target == port(server["cluster_listen"])
    assert objs[("Service", "cascade-control")]["spec"].get("publishNotReadyAddresses") is True
    assert flag(wc, "coordinator") == f"cascade-control.{ns}.svc.cluster.local:{control_port}", flag(wc, "coordinator")
    wnamed = {p["name"]: p["containerPort"] for p in wc["ports"]}
    assert port(flag(wc, "listen")) == wnamed[headless["ports"][0]["targetPort"]]
    # Trust: the coordinator mounts the whole Secret at security.cluster_dir, owner-only
    # (it refuses a ca.key or join.token its group or others can read); workers only
    # ca.pem and join.token.
    secret = objs[("Secret", "cascade-trust")]
    tv, tm = volume_of(coord, cluster["security"]["cluster_dir"])
    assert tv["secret"]["secretName"] == secret["metadata"]["name"] and tv["secret"]["defaultMode"] & 0o077 == 0
    assert "items" not in tv["secret"] and set(secret["stringData"]) == {"ca.pem", "ca.key", "join.token"}
    assert "fsGroup" not in coord["template"]["spec"].get("securityContext", {})
    wtv, wtm = volume_of(sts, os.path.dirname(flag(wc, "ca")))
    assert wtv["secret"]["secretName"] == secret["metadata"]["name"]
    assert {i["key"] for i in wtv["secret"]["items"]} == {"ca.pem", "join.token"}
    assert flag(wc, "token-file") == os.path.join(wtm["mountPath"], "join.token")
    # The model: one claim, read-only, at the same path in every pod.
    model_dir = os.path.dirname(cluster["model"]["path"])
    for spec in (coord, sts):
        mv, mm = volume_of(spec, model_dir)
        assert mm.get("readOnly") is True
        assert mv["persistentVolumeClaim"]["claimName"] in [n for k, n in objs if k == "PersistentVolumeClaim"]
    print(f"references ok: {len(want)} worker pods = config nodes, ports, trust, model path")


def check_kustomize(objs):
    """`kubectl kustomize` (offline, no cluster) renders what `kubectl apply -k` would send."""
    if shutil.which("kubectl") is None:
        print("kubectl: not installed here, `kubectl kustomize` not run")
        return
    r = subprocess.run(["kubectl", "kustomize", DEPLOY], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = sorted((d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(r.stdout) if d)
    assert got == sorted(k for k, o in objs.items() if o["_file"] not in TEMPLATES), got
    print(f"kubectl kustomize ok: {len(got)} objects")


def list_workers(text, tmp):
    path = os.path.join(tmp, "cluster.yaml")
    with open(path, "w") as f:
        f.write(text)
    return subprocess.run([os.path.join(BIN, "cascade-coordinator"), "--config", path, "--list-workers"],
                          capture_output=True, text=True, timeout=120)


def check_parser(cluster_yaml):
    """As shipped: the parser accepts every key; what stops it is the model, absent here
    (a config error would name the file and line instead)."""
    model = yaml.safe_load(cluster_yaml)["model"]["path"]
    with tempfile.TemporaryDirectory() as tmp:
        r = list_workers(cluster_yaml, tmp)
    if os.path.exists(model):
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip() == f"cascade-coordinator: model.path: {model}: no such file or directory", r.stderr
    print(f"parser ok: cluster.yaml as shipped: {r.stderr.strip() or 'exit 0'}")


def check_plan(cluster_yaml):
    """With the same model file from this checkout: the whole plan, as the pods would get it."""
    need(SMOL)
    cluster = yaml.safe_load(cluster_yaml)
    model = cluster["model"]["path"]
    with tempfile.TemporaryDirectory() as tmp:
        assert os.path.basename(model) == os.path.basename(SMOL) and cluster_yaml.count(model) == 1
        r = list_workers(cluster_yaml.replace(model, SMOL), tmp)
        assert r.returncode == 0, r.stderr
        want = [f"control {cluster['server']['cluster_listen']}", f"security tls {cluster['security']['cluster_dir']}"]
        want += [f"worker {i} {n['name']} {n['host']} {n['devices'][0]}" for i, n in enumerate(cluster["nodes"])]
        assert r.stdout.splitlines() == want, r.stdout
        print("plan ok (--list-workers):\n  " + "\n  ".join(want))


def main():
    objs, kustomization = load()
    cluster_yaml = cluster_config(objs)
    check_parser(cluster_yaml)
    check_references(objs, kustomization)
    check_kustomize(objs)
    check_plan(cluster_yaml)
    print("PASS")


if __name__ == "__main__":
    main()
