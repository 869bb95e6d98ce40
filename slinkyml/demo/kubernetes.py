"""``make demo-kube`` (``slinkyml demo --kubernetes``): the Kubernetes half on this machine. The parts are
built from Go modules first (kube/build.sh: a line per part with the time so far and what remains), then
the control plane with a kubelet node comes up, ``manifests/cpu-small`` is applied, and the demo shows what
the real slurm-operator made of it. The Slurm pods themselves do not run in the demo yet: the images its
pods name are built here (``dev kube up --kubelet --slurm-images 26.05``) and run the operator's pods in
``tests/test_kubelet_operator_live.py``, but the demo imports none and gives the Controller's claim no volume.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.apply import api_client, apply_objects, ensure_secrets
from slinkyml.cluster.render import render
from slinkyml.demo import _step
from slinkyml.dev.kube import BUILD_SCRIPT, KubeControlPlane
from slinkyml.errors import SlinkyError
from slinkyml.slurm.conf import SlurmConfBuilder

EXAMPLE = "cpu-small"
#: how long the demo waits for the operator's objects (it makes them within seconds of the apply)
WAIT_S = 120.0
#: the slurm.conf lines the demo shows from the operator's ConfigMap
SHOWN_KEYS = ("ClusterName", "SlurmctldHost", "AuthType", "SelectType", "ProctrackType", "TaskPlugin",
              "JobAcctGatherType", "ReturnToService")


def build() -> str:
    """kube/build.sh with its progress lines on the terminal as they come."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SlinkyError(f"kube/build.sh failed ({done.returncode}): its log is named above")
    bindir = Path(done.stdout.strip())
    versions = json.loads((bindir.parent / "versions.json").read_text())
    return "built (or found in the cache): " + ", ".join(f"{k} {v}" for k, v in versions.items() if k != "key")


def main() -> int:
    _step("Build the Kubernetes parts from Go modules (kube/build.sh, cached by version)", build)
    plane = KubeControlPlane()

    def up() -> str:
        start = time.monotonic()
        plane.up(log=lambda line: print(f"   {line}", flush=True), kubelet=True)
        status = plane.status()
        return (f"etcd, kube-apiserver, -controller-manager, -scheduler, kubelet (containerd + runc + bridge CNI) "
                f"with kube-proxy and CoreDNS, and the slurm-operator {status.get('operator_version', '')} (its manager "
                f"a pod) in {time.monotonic() - start:.1f} s; "
                f"KUBECONFIG={plane.kubeconfig}")

    _step("Bring up the control plane with a kubelet node (slinkyml dev kube up --kubelet)", up)

    spec_file = EXAMPLES_DIR / EXAMPLE / "cluster.yaml"
    cluster = load_spec(spec_file)

    def apply() -> str:  # what `slinkyml cluster apply` does: the Namespace, the cluster's Secrets, the rest
        objs = render(cluster).objects
        api = api_client(str(plane.kubeconfig))
        apply_objects(objs[:1], api)
        ensure_secrets(cluster, api, log=lambda line: print(f"   {line}", flush=True))
        result = apply_objects(objs[1:], api)
        return f"{len(result['applied']) + 1} objects applied to namespace {cluster.namespace}"

    _step(f"Apply manifests/{EXAMPLE} (as slinkyml cluster apply does)", apply)
    _step("What the real slurm-operator made of it", lambda: operator_objects(plane, cluster.name, cluster.namespace))
    print("\nNot yet: the Slurm pods running a job here. The images the operator's pods name are built by\n"
          "`dev kube up --kubelet --slurm-images 26.05` (docs/local-kubernetes-cluster.md); the demo imports\n"
          "none yet and gives the Controller's state claim no volume.\n"
          "`slinkyml dev kube down` stops the plane.")
    return 0


def operator_objects(plane: KubeControlPlane, name: str, namespace: str) -> str:
    from kubernetes import client  # the k8s extra, which `cluster apply` has just used

    api = api_client(str(plane.kubeconfig))
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    deadline = time.monotonic() + WAIT_S
    while True:
        sets = [s.metadata.name for s in apps.list_namespaced_stateful_set(namespace).items]
        deployments = [d.metadata.name for d in apps.list_namespaced_deployment(namespace).items]
        maps = {m.metadata.name: m for m in core.list_namespaced_config_map(namespace).items}
        if f"{name}-controller" in sets and f"{name}-config" in maps:
            break
        if time.monotonic() > deadline:
            raise SlinkyError(f"the operator made no {name}-controller StatefulSet and {name}-config ConfigMap "
                              f"in {WAIT_S:.0f} s: `slinkyml dev kube status` shows its state")
        time.sleep(1.0)
    services = sorted(s.metadata.name for s in core.list_namespaced_service(namespace).items)
    settings = SlurmConfBuilder().extra((maps[f"{name}-config"].data or {}).get("slurm.conf", "")).build().settings()
    lines = [f"StatefulSets: {', '.join(sorted(sets))}", f"Deployments: {', '.join(sorted(deployments)) or '-'}",
             f"Services: {', '.join(services)}", f"slurm.conf ({name}-config), as the operator wrote it:"]
    lines += [f"  {key}={settings[key]}" for key in SHOWN_KEYS if key in settings]
    return "\n".join(lines)
