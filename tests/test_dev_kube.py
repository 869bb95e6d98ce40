"""``slinkyml dev kube``: the build cache, the generated replace block, the certificates, and the
control plane's life cycle (idempotent ``up``, a dead daemon restarted alone, ``env`` for the client).

The control plane is the shared one of the session (``kube_plane``): these tests never take it down
as a whole, only restart single daemons, so other tests using it keep running.
"""

from __future__ import annotations

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
from slinkyml.dev.kube import BUILD_SCRIPT, WEBHOOK_CONFIG_NAME, KubeControlPlane, Ports
from slinkyml.dev.process import port_open

KUBE_DIR = BUILD_SCRIPT.parent
#: the second control plane of test_second_plane_runs_the_operator_without_the_webhook (the kubelet
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
    assert _replaces(KUBE_DIR / "operator" / "go.mod") == []
    assert _replaces(KUBE_DIR / "etcd" / "go.mod") == []


def test_cache_key_names_every_version(kube_plane: KubeControlPlane) -> None:
    key = subprocess.run(["bash", str(BUILD_SCRIPT), "--key"], capture_output=True, text=True,
                         check=True).stdout.strip()
    versions = kube_plane.versions()
    for part in ("kubernetes", "etcd", "slurm-operator", "go"):
        assert versions[part] in key
    assert kube_plane.bin_dir.parent.name == key == versions["key"]
    for binary in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "pause",
                   "slurm-operator-manager", "slurm-operator-webhook"):
        assert os.access(kube_plane.bin_dir / binary, os.X_OK)


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
    webhook = "slurm-operator-webhook" in kube_plane.wanted()  # as the session's fixture brought it up
    assert kube_plane.up(webhook=webhook).status()["daemons"] == before  # nothing restarted
    scheduler = next(d for d in kube_plane.daemons() if d.name == "kube-scheduler")
    assert scheduler.stop()
    assert kube_plane.status()["daemons"]["kube-scheduler"] is None
    after = kube_plane.up(webhook=webhook).status()["daemons"]
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
])
def test_bad_input_is_one_line(argv: list[str], env: dict[str, str], message: str) -> None:
    done = subprocess.run([sys.executable, "-m", "slinkyml", "dev", "kube", *argv], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"slinkyml: error: {message}") and done.stderr.count("\n") == 1, done.stderr


def test_second_plane_runs_the_operator_without_the_webhook(kube_plane: KubeControlPlane, tmp_path: Path) -> None:
    """Beside the session's plane, whose webhook holds the one port v1.0.1's webhook listens on (no flag
    moves it), a second plane comes up with ``--no-webhook``: the manager reconciles, no webhook
    configuration of ours is registered (it would refuse every Slinky object), and so admission is the
    CRD schemas' alone: a Slurm ClusterName over 40 characters, which the webhook refuses, is stored."""
    base = SECOND_PLANE_PORT_BASE + port_shift()
    state = Path(tempfile.mkdtemp(prefix="slinkyml-kube-second-", dir="/var/tmp"))
    plane = KubeControlPlane(state, ports=Ports.from_base(base))
    try:
        done = subprocess.run([sys.executable, "-m", "slinkyml", "dev", "kube", "up", "--no-webhook", "--state-dir",
                               str(state)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "SLINKYML_KUBE_PORT_BASE": str(base)})
        assert done.returncode == 0, done.stderr
        status = plane.status()
        assert status["running"] and status["without"] == ["slurm-operator-webhook"], status
        assert plane.running and not port_open("127.0.0.1", plane.ports.webhook_health)
        api = plane.api()
        admission = client.AdmissionregistrationV1Api(api)
        assert [c.metadata.name for c in admission.list_validating_webhook_configuration().items
                if c.metadata.name.startswith(WEBHOOK_CONFIG_NAME)] == []

        cluster = load_spec(EXAMPLES_DIR / "cpu-small" / "cluster.yaml")
        objs = render(cluster).objects
        controller = next(o for o in objs if o["kind"] == "Controller")
        controller["spec"]["clusterName"] = "c" * 41
        apply_objects(objs[:1], api, log=lambda _: None)
        ensure_secrets(cluster, api, log=lambda _: None)
        apply_objects(objs[1:], api, log=lambda _: None)
        core = client.CoreV1Api(api)
        name, deadline = f"{cluster.name}-config", time.monotonic() + 180
        while not any(c.metadata.name == name for c in core.list_namespaced_config_map(cluster.namespace).items):
            assert time.monotonic() < deadline, f"the manager made no ConfigMap {cluster.namespace}/{name}"
            time.sleep(1)
    finally:
        plane.reset()
        shutil.rmtree(state, ignore_errors=True)
