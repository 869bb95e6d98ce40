"""``install.sh``: INSTALL.md as a script (issue 39 item 8), ``data/shell/cluster-install.sh`` with each
render's steps filled in.

Offline: it is shellcheck clean, lists INSTALL.md's steps in INSTALL.md's order, every step INSTALL.md
shows says what ``TARGET=dev-kube`` does with it, and it refuses to run without a target. Live (``dev
kube``'s control plane, kubectl from PATH): cpu-small, rendered under a name and namespace of its own, is
installed start to finish with ``TARGET=dev-kube ROUTE=kubectl``: the AWS-only steps are skipped with their
reason, the Secrets made, the objects applied as rendered (``cluster diff``: no difference), the operator
reconciles them, and a second run changes nothing.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from rendered_example import render_renamed
from waiting import wait_until

from slinkyml.cluster import EXAMPLES_DIR, load_spec, names
from slinkyml.cluster.install import DEV_KUBE, SCRIPT, SKIPPED_ON_DEV_KUBE, install_steps
from slinkyml.cluster.placement import delete_cluster_scoped
from slinkyml.cluster.render import render
from slinkyml.dev.kubernetes.kube import KubeControlPlane

EXAMPLES = ["cpu-small", "h100-efa", "trn1"]
SHELLCHECK = shutil.which("shellcheck")
KUBECTL = shutil.which("kubectl")
#: how long the operator may take to make the Controller's Service on a loaded 2-core VM
RECONCILE_TIMEOUT_S = 180.0


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (apt-get install shellcheck)")
@pytest.mark.parametrize("name", EXAMPLES)
def test_script_is_shellcheck_clean(name: str) -> None:
    for path in (SCRIPT, EXAMPLES_DIR / name / "install.sh"):
        done = subprocess.run([str(SHELLCHECK), "-s", "sh", str(path)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("name", EXAMPLES)
def test_script_runs_install_md_steps_in_order(name: str) -> None:
    out = render(load_spec(EXAMPLES_DIR / name / "cluster.yaml"))
    steps = install_steps(out.objects, out.plugin_values)
    install = out.files["INSTALL.md"]
    assert re.findall(r"^\d+\. \*\*(.+?)\*\*", install, re.M) == [s.what for s in steps]
    args = _script_steps(out.files["install.sh"])
    assert args[1::4] == [s.what for s in steps]
    kinds = [s.kind.partition("=")[0] for s in steps]
    assert args[3::4] == [DEV_KUBE[k] for k in kinds]
    assert args[2::4] == [s.command if s.run is None else s.run for s in steps]
    # every step that does not simply run as on EKS is marked in INSTALL.md, with what dev kube does instead
    marked = re.findall(r"^   \*dev kube: (.+)\.\*$", install, re.M)
    assert marked == [("skipped, " if k in SKIPPED_ON_DEV_KUBE else "") + DEV_KUBE[k]
                      for k in kinds if k not in ("secrets", "objects")]
    assert "skipped, AWS only" in install


def _script_steps(script: str) -> list[str]:
    """The words of install.sh's ``set --`` line (continued with backslashes): its steps, four words each."""
    lines = script[script.index("\nset -- ") + 1:].splitlines()
    end = next(i for i, line in enumerate(lines) if not line.endswith("\\"))
    words = shlex.split(" ".join(line.rstrip("\\") for line in lines[:end + 1]))
    assert words[:2] == ["set", "--"] and len(words[2:]) % 4 == 0
    return words[2:]


@pytest.mark.parametrize("env, message", [
    ({}, "TARGET=(unset): set TARGET=eks"),
    ({"TARGET": "gke"}, "TARGET=gke: set TARGET=eks"),
    ({"TARGET": "dev-kube", "ROUTE": "argo"}, "ROUTE=argo: one of kubectl, helm"),
    ({"TARGET": "dev-kube", "FROM": "x"}, "FROM=x: a step number"),
])
def test_script_refuses_bad_settings_in_one_line(env: dict[str, str], message: str) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("TARGET", "ROUTE", "FROM")}
    done = subprocess.run(["sh", str(EXAMPLES_DIR / "cpu-small" / "install.sh")], capture_output=True, text=True,
                          env={**clean, **env}, timeout=60, check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr


def test_the_images_step_on_eks_needs_a_source_checkout_and_says_so() -> None:
    """The training images' build context is a slinkyml checkout, which install.sh takes from $SLINKYML_SOURCE:
    without it the step stops in one line naming the variable, before any docker command."""
    steps = [s.kind for s in install_steps(render(load_spec(EXAMPLES_DIR / "cpu-small" / "cluster.yaml")).objects)]
    number = steps.index("images") + 1
    clean = {k: v for k, v in os.environ.items() if k not in ("TARGET", "ROUTE", "FROM", "SLINKYML_SOURCE")}
    done = subprocess.run(["sh", str(EXAMPLES_DIR / "cpu-small" / "install.sh")], capture_output=True, text=True,
                          env={**clean, "TARGET": "eks", "FROM": str(number)}, timeout=60, check=False)
    assert done.returncode == 1 and done.stdout == f"== {number}. the training images (eks, kubectl)\n", done.stdout
    assert done.stderr == (f"install.sh: step {number} builds the training images: set SLINKYML_SOURCE to a slinkyml "
                           "source checkout (its containers/ and package are the build context)\n"), done.stderr


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH (install.sh drives kubectl)")
def test_cpu_small_installs_on_dev_kube_start_to_finish(kube_plane: KubeControlPlane, tmp_path: Path) -> None:
    api: Any = kube_plane.api()
    core, storage = client.CoreV1Api(api), client.StorageV1Api(api)
    cluster, spec_file, folder = render_renamed("cpu-small", "i", "slinkyml-install", tmp_path)
    defaults_before = {sc.metadata.name for sc in storage.list_storage_class().items
                       if (sc.metadata.annotations or {}).get("storageclass.kubernetes.io/is-default-class") == "true"}
    env = {**os.environ, "KUBECONFIG": str(kube_plane.kubeconfig), "TARGET": "dev-kube", "ROUTE": "kubectl"}
    env.pop("FROM", None)
    objs = render(cluster).objects
    try:
        first = subprocess.run(["sh", str(folder / "install.sh")], capture_output=True, text=True, env=env,
                               timeout=600, check=False)
        assert first.returncode == 0, first.stdout + first.stderr
        steps = install_steps(objs)
        assert re.findall(r"^== (\d+)\. ", first.stdout, re.M) == [str(i) for i in range(1, len(steps) + 1)]
        for kind in ("cert-manager", "karpenter-aws", "karpenter", "images"):
            assert f"   skipped on dev-kube: {DEV_KUBE[kind]}" in first.stdout, kind
        assert first.stdout.count("skipped on dev-kube") == 4
        assert f"install.sh: {len(steps)} steps done (dev-kube, kubectl)" in first.stdout
        # the Secrets made with their keys; no value printed
        for ref in names.secret_refs(cluster):
            secret = core.read_namespaced_secret(ref.name, cluster.namespace)
            assert ref.key in secret.data and secret.data[ref.key] not in first.stdout + first.stderr
        # a default StorageClass for the Controller's volume: the plane's own, or the one the script made
        defaults = {sc.metadata.name: sc for sc in storage.list_storage_class().items
                    if (sc.metadata.annotations or {}).get("storageclass.kubernetes.io/is-default-class") == "true"}
        assert defaults
        if not defaults_before:
            assert defaults["gp3"].provisioner == "ebs.csi.aws.com" and defaults["gp3"].parameters == {"type": "gp3"}
        # every object as rendered, and the operator takes it up
        diff = subprocess.run([sys.executable, "-m", "slinkyml", "cluster", "diff", str(spec_file), "--kubeconfig",
                               str(kube_plane.kubeconfig)], capture_output=True, text=True, timeout=300, check=False)
        assert (diff.returncode, diff.stdout) == (0, ""), diff.stdout + diff.stderr
        service = f"{cluster.name}-controller"
        wait_until(f"Service {cluster.namespace}/{service} from the operator",
                   lambda: _exists(core.read_namespaced_service, service, cluster.namespace),
                   timeout=RECONCILE_TIMEOUT_S, every=1.0)
        # a second run: every Secret and the StorageClass kept, the objects unchanged
        again = subprocess.run(["sh", str(folder / "install.sh")], capture_output=True, text=True, env=env,
                               timeout=600, check=False)
        assert again.returncode == 0, again.stdout + again.stderr
        assert again.stdout.count("exists: kept") == len(names.secret_refs(cluster)) + 1, again.stdout
        # FROM=N starts at step N
        last = subprocess.run(["sh", str(folder / "install.sh")], capture_output=True, text=True,
                              env={**env, "FROM": str(len(steps))}, timeout=600, check=False)
        assert last.returncode == 0 and re.findall(r"^== (\d+)\. ", last.stdout, re.M) == [str(len(steps))]
    finally:
        try:
            core.delete_namespace(cluster.namespace)
        except ApiException:
            pass
        delete_cluster_scoped(api, objs)
        if not defaults_before:  # the default class this run made: other tests on this plane bring their own
            try:
                storage.delete_storage_class("gp3")
            except ApiException:
                pass


def _exists(read: Any, name: str, namespace: str) -> bool:
    try:
        read(name, namespace)
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
