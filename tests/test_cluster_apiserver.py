"""Every rendered example on a real API server: install the Slinky CRDs, server-side apply, `cluster
diff` (no changes), `cluster status`, delete.

Runs when one of these is given, else skips saying so:
- ``KUBEBUILDER_ASSETS``: a folder with envtest's ``etcd`` and ``kube-apiserver`` (e.g.
  ``setup-envtest use -p path``); this module starts both on loopback ports of its own, with a
  token for a ``system:masters`` user, and stops them afterwards;
- ``KUBECONFIG``: an existing cluster (e.g. ``kind create cluster``), whose current context is used.
  Each example goes into its own namespace under a cluster name no one else uses (``t<hex>-...``),
  CRDs already installed are left as they are, and everything created is deleted at the end.

Karpenter and mariadb-operator CRDs are not installed here: those objects are skipped by apply and
reported by diff as "not served", which is all diff may report.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.crds import crd_files
from slinkyml.cluster.render import render
from slinkyml.cluster.spec import to_dict

EXAMPLES = ["cpu-small", "h100-efa", "trn1"]
ASSETS = os.environ.get("KUBEBUILDER_ASSETS", "")
KUBECONFIG = os.environ.get("KUBECONFIG", "")


def _skip_reason() -> str | None:
    if ASSETS:
        missing = [b for b in ("etcd", "kube-apiserver") if not (Path(ASSETS) / b).is_file()]
        return f"KUBEBUILDER_ASSETS={ASSETS} has no {' or '.join(missing)}" if missing else None
    if KUBECONFIG:
        return None if all(Path(p).is_file() for p in KUBECONFIG.split(os.pathsep)) else \
            f"KUBECONFIG={KUBECONFIG} names no readable file"
    return "neither KUBEBUILDER_ASSETS (envtest's etcd + kube-apiserver) nor KUBECONFIG is set"


SKIP = _skip_reason()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, token: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 90) -> None:
    import ssl
    import urllib.request

    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # the server's own self-signed cert
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"kube-apiserver exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            req = urllib.request.Request(f"{url}/readyz", headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"kube-apiserver not ready after {timeout:.0f} s: {log.read_text()[-2000:]}")


@contextlib.contextmanager
def _envtest(tmp: Path) -> Iterator[Path]:
    """etcd + kube-apiserver from KUBEBUILDER_ASSETS; yields a kubeconfig for a system:masters token."""
    etcd_port, peer_port, api_port = _free_port(), _free_port(), _free_port()
    token = secrets.token_hex(16)
    (tmp / "tokens.csv").write_text(f'{token},slinkyml-test,slinkyml-test,"system:masters"\n')
    subprocess.run(["openssl", "genrsa", "-out", str(tmp / "sa.key"), "2048"], check=True, capture_output=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        etcd_log = (tmp / "etcd.log").open("wb")
        procs.append(subprocess.Popen(
            [str(Path(ASSETS) / "etcd"), "--data-dir", str(tmp / "etcd"), "--unsafe-no-fsync",
             "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
             "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
             "--initial-cluster", f"default=http://127.0.0.1:{peer_port}"],
            stdout=etcd_log, stderr=subprocess.STDOUT))
        api_log = tmp / "kube-apiserver.log"
        procs.append(subprocess.Popen(
            [str(Path(ASSETS) / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
             "--bind-address=127.0.0.1", f"--secure-port={api_port}", f"--cert-dir={tmp / 'certs'}",
             f"--token-auth-file={tmp / 'tokens.csv'}", "--authorization-mode=RBAC",
             f"--service-account-issuer=https://127.0.0.1:{api_port}",
             f"--service-account-key-file={tmp / 'sa.key'}",
             f"--service-account-signing-key-file={tmp / 'sa.key'}",
             "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
             "--disable-admission-plugins=ServiceAccount"],
            stdout=api_log.open("wb"), stderr=subprocess.STDOUT))
        url = f"https://127.0.0.1:{api_port}"
        _wait_ready(url, token, procs[-1], api_log)
        kubeconfig = tmp / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "envtest",
            "clusters": [{"name": "envtest", "cluster": {"server": url, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "admin", "user": {"token": token}}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "admin"}}]}))
        yield kubeconfig
    finally:
        for proc in reversed(procs):  # only the processes this fixture started, by their handles
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if ASSETS:
        with _envtest(tmp_path_factory.mktemp("envtest")) as path:
            yield path
    else:
        yield Path(KUBECONFIG.split(os.pathsep)[0])


@pytest.fixture(scope="module")
def crds(kubeconfig: Path) -> Iterator[None]:
    """The Slinky CRDs from shared/slinky-crds (or the vendored copies), created unless present."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    api = config.new_client_from_config(config_file=str(kubeconfig))
    ext = client.ApiextensionsV1Api(api)
    created = []
    for f in crd_files():
        crd = yaml.safe_load(f.read_text())
        try:
            ext.create_custom_resource_definition(crd)
            created.append(crd["metadata"]["name"])
        except ApiException as exc:
            if exc.status != 409:  # 409: already installed (e.g. by the operator's chart): keep it
                raise
    deadline = time.monotonic() + 60
    for name in created:
        while not any(c.type == "Established" and c.status == "True"
                      for c in ext.read_custom_resource_definition(name).status.conditions or []):
            assert time.monotonic() < deadline, f"CRD {name} not Established"
            time.sleep(0.5)
    time.sleep(2)  # discovery catches up with the new groups
    yield
    for name in created:
        ext.delete_custom_resource_definition(name)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slinkyml", "cluster", *args],
                          capture_output=True, text=True, timeout=300)


def _delete(api: Any, objs: list[dict[str, Any]]) -> None:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    dyn = DynamicClient(api)
    for obj in reversed(objs):
        try:
            res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            dyn.delete(res, name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
        except ResourceNotFoundError:
            continue
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.mark.parametrize("name", EXAMPLES)
def test_rendered_example_applies_diffs_clean_and_deletes(name: str, kubeconfig: Path, crds: None,
                                                          tmp_path: Path) -> None:
    from kubernetes import config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient

    from slinkyml.cluster.apply import apply_objects, ensure_secrets

    example = load_spec(EXAMPLES_DIR / name / "cluster.yaml")
    tag = secrets.token_hex(3)
    cluster = replace(example, name=f"t{tag}-{example.name}"[:40], namespace=f"slinkyml-test-{tag}")
    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text(yaml.safe_dump(to_dict(cluster), sort_keys=False))
    objs = render(cluster).objects
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        apply_objects(objs[:1], api, log=lambda _: None)
        assert len(ensure_secrets(cluster, api, log=lambda _: None)) >= 2
        result = apply_objects(objs[1:], api, skip_missing_kinds=True, log=lambda _: None)
        skipped = {s.split()[0] for s in result["skipped"]}
        assert skipped <= {"NodePool", "EC2NodeClass", "MariaDB"}, skipped
        assert {"Controller", "NodeSet", "LoginSet", "RestApi", "Token"} <= {a.split()[0] for a in result["applied"]}

        diff = _cli("diff", str(spec_file), "--kubeconfig", str(kubeconfig))
        assert diff.returncode in (0, 1), diff.stderr
        unexpected = [line for line in diff.stdout.splitlines()
                      if not (line.startswith("? ") and line.split(": ")[0].split()[1].split("/")[0] in skipped)]
        assert unexpected == [], diff.stdout  # nothing but the kinds this server does not serve

        status = _cli("status", str(spec_file), "--kubeconfig", str(kubeconfig))
        assert status.returncode == 0, status.stderr
        nodesets = {f"{cluster.name}-{ns.name}" for ns in cluster.node_sets}
        assert {line.split()[0] for line in status.stdout.splitlines()[1:]} == nodesets, status.stdout
    finally:
        _delete(api, objs)
    dyn = DynamicClient(api)
    deadline = time.monotonic() + 120  # an installed operator first runs its finalizers
    for obj in objs:
        if obj["kind"] in ("Namespace", "NodePool", "EC2NodeClass", "MariaDB"):
            continue  # a namespace terminates only where a controller-manager runs (not in envtest)
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        while True:
            try:
                dyn.get(res, name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
            except ApiException as exc:
                assert exc.status == 404, exc
                break
            assert time.monotonic() < deadline, f"{obj['kind']} {obj['metadata']['name']} still there"
            time.sleep(1)


def test_kubectl_sees_the_crds(kubeconfig: Path, crds: None) -> None:
    """The same API server through kubectl, when there is one (what a user with kind would run)."""
    if shutil.which("kubectl") is None:
        pytest.skip("no kubectl on PATH")
    out = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "api-resources", "--api-group",
                          "slinky.slurm.net", "-o", "name"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert {"controllers.slinky.slurm.net", "nodesets.slinky.slurm.net"} <= set(out.stdout.split())
