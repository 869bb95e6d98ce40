"""``slinkyml dev kube``: the build cache, the generated replace block, the certificates, and the
control plane's life cycle (idempotent ``up``, a dead daemon restarted alone, ``env`` for the client).

The control plane is the shared one of the session (``kube_plane``): these tests never take it down
as a whole, only restart single daemons, so other tests using it keep running.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from kubernetes import client, config
from private_cluster import port_shift

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.apply import apply_objects, ensure_secrets
from slinkyml.cluster.render import render
from slinkyml.dev.kubernetes.kube import (
    BUILD_SCRIPT,
    OPERATOR_VERSIONS,
    WEBHOOK_CONFIG_NAME,
    KubeControlPlane,
    Ports,
)
from slinkyml.errors import SlinkyError
from slinkyml.process import port_open

KUBE_DIR = BUILD_SCRIPT.parent
#: the second control plane of test_second_plane_runs_another_operator_and_its_own_webhook (the kubelet
#: tests' plane is at 18000)
SECOND_PLANE_PORT_BASE = 18100
pytestmark = pytest.mark.slow


def _replaces(gomod: Path) -> list[tuple[str, str, str]]:
    done = subprocess.run(["go", "mod", "edit", "-json", str(gomod)], capture_output=True, text=True, check=True)
    return sorted((r["Old"]["Path"], r["New"]["Path"], r["New"].get("Version", ""))
                  for r in json.loads(done.stdout).get("Replace") or [])


def test_replace_block_is_the_generated_one(tmp_path: Path) -> None:
    """The committed replace block is exactly what kube/gen_replace.py writes from k8s.io/kubernetes'
    own go.mod (one per staging module, each at v0.MINOR.PATCH), not a hand-kept copy."""
    work = tmp_path / "controlplane"
    shutil.copytree(KUBE_DIR / "controlplane", work)
    subprocess.run(["go", "mod", "edit", *[f"-dropreplace={old}" for old, _, _ in
                                           _replaces(work / "go.mod")]], cwd=work, check=True)
    assert _replaces(work / "go.mod") == []
    done = subprocess.run([sys.executable, str(KUBE_DIR / "gen_replace.py"), str(work)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    generated = _replaces(work / "go.mod")
    assert generated == _replaces(KUBE_DIR / "controlplane" / "go.mod")
    assert len(generated) >= 33 and ("k8s.io/streaming", "k8s.io/streaming", "v0.36.3") in generated
    assert all(new == old and version == "v0.36.3" for old, new, version in generated)


def test_other_modules_have_no_replace() -> None:
    operators = sorted(KUBE_DIR.glob("operator-*/go.mod"))
    assert [p.parent.name for p in operators] == sorted(f"operator-{v}" for v in OPERATOR_VERSIONS)
    for gomod in [*operators, KUBE_DIR / "etcd" / "go.mod"]:
        assert _replaces(gomod) == [], gomod


def test_cache_key_names_every_version(kube_plane: KubeControlPlane) -> None:
    key = subprocess.run(["bash", str(BUILD_SCRIPT), "--key"], capture_output=True, text=True,
                         check=True).stdout.strip()
    versions = kube_plane.versions()
    for part in ("kubernetes", "etcd", "go"):
        assert versions[part] in key
    assert set(versions["slurm-operators"]) == set(OPERATOR_VERSIONS)
    for label, module_version in versions["slurm-operators"].items():
        assert module_version in key
        assert module_version == label or module_version.rsplit("-", 1)[1].startswith(label)  # pseudo-version
        for binary in ("manager", "webhook"):
            assert os.access(kube_plane.operator_dir(label) / binary, os.X_OK)
    assert kube_plane.bin_dir.parent.name == key == versions["key"]
    assert f"coredns-{versions['coredns']}" in key
    for binary in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy",
                   "coredns", "pause"):
        assert os.access(kube_plane.bin_dir / binary, os.X_OK)
    proxy = subprocess.run([str(kube_plane.bin_dir / "kube-proxy"), "--version"], capture_output=True, text=True,
                           check=True, timeout=60).stdout
    assert proxy.split() == ["Kubernetes", versions["kubernetes"]]


#: the plugins kube/coredns/main.go builds CoreDNS with (a cluster DNS's, and bind)
COREDNS_PLUGINS = {"bind", "cache", "errors", "forward", "health", "kubernetes", "loadbalance", "loop", "ready",
                   "reload"}


def _nslookup(name: str, server: str) -> list[str]:
    """The IPv4 addresses busybox's nslookup gets for ``name`` from ``server`` (``IP:PORT``)."""
    done = subprocess.run(["busybox", "nslookup", "-type=A", name, server], capture_output=True, text=True,
                          timeout=30)
    answer = done.stdout.split(name, 1)[-1] if "Name:" in done.stdout else ""
    return [line.split()[-1] for line in answer.splitlines() if line.strip().startswith("Address")]


def test_coredns_serves_the_planes_services(kube_plane: KubeControlPlane, tmp_path: Path) -> None:
    """CoreDNS as kube/build.sh builds it (coredns' coremain and the cluster-DNS plugins only) serves the
    plane's Services from its API server: ``<svc>.<ns>.svc.cluster.local`` gives the ClusterIP and a
    headless Service's ``<host>.<svc>.<ns>.svc.cluster.local`` its endpoint's address. (``dev kube up
    --kubelet`` runs it as a pod: tests/test_kubelet_live.py.)"""
    coredns = kube_plane.bin_dir / "coredns"
    listed = set(subprocess.run([str(coredns), "-plugins"], capture_output=True, text=True, check=True,
                                timeout=60).stdout.split())
    assert COREDNS_PLUGINS <= listed
    port = kube_plane.ports.apiserver + 10  # base + 53
    corefile = tmp_path / "Corefile"
    corefile.write_text(f"cluster.local:{port} {{\n    bind 127.0.0.1\n    errors\n"
                        f"    kubernetes cluster.local {{\n        kubeconfig {kube_plane.kubeconfig}\n    }}\n"
                        "    cache 5\n    loadbalance\n}\n")
    api = kube_plane.api()
    core, discovery = client.CoreV1Api(api), client.DiscoveryV1Api(api)
    ns = f"dns-{os.getpid()}"
    server = subprocess.Popen([str(coredns), "-conf", str(corefile)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        svc = core.create_namespaced_service(ns, client.V1Service(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=80)], selector={"app": "web"})))
        core.create_namespaced_service(ns, client.V1Service(
            metadata=client.V1ObjectMeta(name="workers"),
            spec=client.V1ServiceSpec(cluster_ip="None", ports=[client.V1ServicePort(port=6818)])))
        discovery.create_namespaced_endpoint_slice(ns, client.V1EndpointSlice(
            metadata=client.V1ObjectMeta(name="workers-1", labels={"kubernetes.io/service-name": "workers"}),
            address_type="IPv4", ports=[client.DiscoveryV1EndpointPort(port=6818)],
            endpoints=[client.V1Endpoint(addresses=["10.244.0.99"], hostname="node-0",
                                         conditions=client.V1EndpointConditions(ready=True))]))
        deadline = time.monotonic() + 60
        want = {f"web.{ns}.svc.cluster.local": [svc.spec.cluster_ip],
                f"node-0.workers.{ns}.svc.cluster.local": ["10.244.0.99"]}
        got: dict[str, list[str]] = {}
        while got != want and time.monotonic() < deadline:
            got = {name: _nslookup(name, f"127.0.0.1:{port}") for name in want}
            time.sleep(1)
        assert got == want
    finally:
        server.terminate()
        server.wait(timeout=30)
        with contextlib.suppress(client.exceptions.ApiException):
            core.delete_namespace(ns)


def test_certificates_and_keys(kube_plane: KubeControlPlane) -> None:
    """Keys and kubeconfigs readable by their owner only; every certificate signed by our CA; the API
    server's serving certificate names the loopback address clients use."""
    pki = kube_plane.pki
    for path in [*pki.folder.glob("*.key"), *kube_plane.state_dir.glob("*kubeconfig")]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    for crt in pki.folder.glob("*.crt"):
        cert = x509.load_pem_x509_certificate(crt.read_bytes())
        cert.verify_directly_issued_by(ca)
    serving = x509.load_pem_x509_certificate(pki.path("apiserver.crt").read_bytes())
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}


def test_env_gives_the_python_client_its_cluster(kube_plane: KubeControlPlane) -> None:
    out = subprocess.run([sys.executable, "-m", "slinkyml", "dev", "kube", "env", "--state-dir",
                          str(kube_plane.state_dir)], capture_output=True, text=True, check=True).stdout
    assert out.startswith("export KUBECONFIG=")
    path = out.strip().split("=", 1)[1]
    api = config.new_client_from_config(config_file=path)
    assert client.VersionApi(api).get_code().git_version == kube_plane.versions()["kubernetes"]
    kubeconfig = yaml.safe_load(Path(path).read_text())
    assert kubeconfig["clusters"][0]["cluster"]["server"] == kube_plane.server


def test_up_is_idempotent_and_restarts_only_what_died(kube_plane: KubeControlPlane) -> None:
    before = kube_plane.status()["daemons"]
    assert all(before.values()), before
    assert kube_plane.up().status()["daemons"] == before  # nothing restarted
    scheduler = next(d for d in kube_plane.daemons() if d.name == "kube-scheduler")
    assert scheduler.stop()
    assert kube_plane.status()["daemons"]["kube-scheduler"] is None
    after = kube_plane.up().status()["daemons"]
    assert after["kube-scheduler"] not in (None, before["kube-scheduler"])
    assert {k: v for k, v in after.items() if k != "kube-scheduler"} == \
        {k: v for k, v in before.items() if k != "kube-scheduler"}
    assert port_open("127.0.0.1", kube_plane.ports.scheduler)


def test_status_exit_code_and_json(kube_plane: KubeControlPlane) -> None:
    done = subprocess.run([sys.executable, "-m", "slinkyml", "dev", "kube", "status", "--json", "--state-dir",
                           str(kube_plane.state_dir)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["running"] and status["server"] == kube_plane.server


@pytest.mark.parametrize("argv, env, message", [
    (["up", "--state-dir", "/proc/slinkyml-no"], {}, "state dir /proc/slinkyml-no: cannot write"),
    (["status"], {"SLINKYML_KUBE_PORT_BASE": "99999"}, "SLINKYML_KUBE_PORT_BASE=99999: not a port number"),
    (["up", "--operator-version", "1.0.1"], {}, "--operator-version 1.0.1: not one of v1.2.1, f2ed3fc"),
])
def test_bad_input_is_one_line(argv: list[str], env: dict[str, str], message: str) -> None:
    done = subprocess.run([sys.executable, "-m", "slinkyml", "dev", "kube", *argv], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"slinkyml: error: {message}") and done.stderr.count("\n") == 1, done.stderr


def test_second_plane_runs_another_operator_and_its_own_webhook(kube_plane: KubeControlPlane) -> None:
    """Beside the session's plane (the default operator, v1.2.1), a second plane at another port base
    runs the other operator version (``--operator-version f2ed3fc``) with its webhook on a port of its own
    (``--server-addr``): its webhook configuration points there and refuses a Slurm ClusterName over 40
    characters with its own reason, and its manager reconciles a valid Controller into its ConfigMap."""
    base = SECOND_PLANE_PORT_BASE + port_shift()
    state = Path(tempfile.mkdtemp(prefix="slinkyml-kube-second-", dir="/var/tmp"))
    plane = KubeControlPlane(state, ports=Ports.from_base(base))
    try:
        done = subprocess.run([sys.executable, "-m", "slinkyml", "dev", "kube", "up", "--operator-version", "f2ed3fc",
                               "--state-dir", str(state)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "SLINKYML_KUBE_PORT_BASE": str(base)})
        assert done.returncode == 0, done.stderr
        assert f"slurm-operator {kube_plane.versions()['slurm-operators']['f2ed3fc']}" in done.stdout, done.stdout
        status = plane.status()
        assert status["running"] and status["without"] == [] and status["operator_version"] == "f2ed3fc", status
        assert plane.ports.webhook != kube_plane.ports.webhook and port_open("127.0.0.1", plane.ports.webhook)
        api = plane.api()
        admission = client.AdmissionregistrationV1Api(api)
        urls = {h.client_config.url for c in admission.list_validating_webhook_configuration().items
                if c.metadata.name.startswith(WEBHOOK_CONFIG_NAME) for h in c.webhooks}
        assert urls and all(u.startswith(f"https://127.0.0.1:{plane.ports.webhook}/validate-") for u in urls), urls

        cluster = load_spec(EXAMPLES_DIR / "cpu-small" / "cluster.yaml")
        objs = render(cluster).objects
        controller = next(o for o in objs if o["kind"] == "Controller")
        apply_objects(objs[:1], api, log=lambda _: None)
        ensure_secrets(cluster, api, log=lambda _: None)
        with pytest.raises(SlinkyError, match="ClusterName exceeds 40 characters"):
            apply_objects([{**controller, "spec": {**controller["spec"], "clusterName": "c" * 41}}], api,
                          log=lambda _: None)
        apply_objects(objs[1:], api, log=lambda _: None)
        core = client.CoreV1Api(api)
        name, deadline = f"{cluster.name}-config", time.monotonic() + 180
        while not any(c.metadata.name == name for c in core.list_namespaced_config_map(cluster.namespace).items):
            assert time.monotonic() < deadline, f"the manager made no ConfigMap {cluster.namespace}/{name}"
            time.sleep(1)
    finally:
        plane.reset()
        shutil.rmtree(state, ignore_errors=True)
