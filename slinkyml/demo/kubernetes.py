"""``make demo-kube`` (``slinkyml demo --kubernetes``): the Kubernetes half on this machine, ending in a job.
The parts are built from Go modules first (kube/build.sh: a line per part with the time so far and what
remains), then the control plane with a kubelet node comes up, the Slurm 26.05 images are built here and
imported under the names the rendered manifests give Slinky's, ``manifests/cpu-small`` is applied, the
real slurm-operator makes the Slurm pods, and a job submitted in the login pod runs in its slurmd pod.
What this one-node, 2-CPU, cgroup-v1 machine changes is ``dev/kubernetes/operator_cluster.py``'s, said as it happens.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.apply import api_client
from slinkyml.demo import _step
from slinkyml.dev.kubernetes.kube import BUILD_SCRIPT, KubeControlPlane
from slinkyml.dev.kubernetes.operator_cluster import OperatorPods, apply_cluster, fit_spec, wait_for
from slinkyml.errors import SlinkyError
from slinkyml.slurm.conf import SlurmConfBuilder

EXAMPLE = "cpu-small"
RELEASE = "26.05"
#: how long the demo waits for the Slurm pods (the first start of every daemon on 2 cores)
PODS_WAIT_S = 600.0
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

    def images() -> str:
        digests = plane.node().import_slurm_images(RELEASE, log=lambda line: print(f"   {line}", flush=True))
        return f"{len(digests)} images on the node: " + ", ".join(sorted(digests))

    _step(f"Build the Slurm {RELEASE} images and import them on the node (no registry here)", images)

    cluster = fit_spec(load_spec(EXAMPLES_DIR / EXAMPLE / "cluster.yaml"))
    api = api_client(str(plane.kubeconfig))
    pods = OperatorPods(api, cluster)

    def apply() -> str:  # what `slinkyml cluster apply` does: the Namespace, the cluster's Secrets, the rest
        applied = apply_cluster(pods, plane.state_dir / "volumes" / cluster.name,
                                log=lambda line: print(f"   {line}", flush=True))
        return (f"{applied} objects applied to namespace {cluster.namespace}; the Controller "
                f"asks 1 CPU (this node has 2), its state claim is bound to a folder of the node's")

    _step(f"Apply manifests/{EXAMPLE} (as slinkyml cluster apply does)", apply)
    _step("What the real slurm-operator made of it", lambda: operator_objects(pods))

    def workers() -> str:
        nodeset = pods.fit_nodeset(plane.node().settings.name, wait_s=PODS_WAIT_S)
        ready = wait_for("slurmd pod of the NodeSet idle in sinfo",
                         lambda: pods.registered_workers(nodeset["spec"]["replicas"]), PODS_WAIT_S)
        return (f"slurmd pod {', '.join(p.metadata.name for p in ready)} registered (configless, from the "
                f"Controller's Service); this node carries the NodeSet's Karpenter labels, the pod requests "
                f"nothing, one replica, cgroup.conf CgroupPlugin=autodetect (cgroup v1 here)")

    _step("The operator's slurmd pods register with slurmctld", workers)
    _step("A job from the login pod (kubectl exec ... srun), as a user on EKS runs it", lambda: first_job(pods))
    print("\n`slinkyml dev kube down` stops the plane; docs/local-kubernetes-cluster.md says what differs from EKS.")
    return 0


def first_job(pods: OperatorPods) -> str:
    login = wait_for("Ready login pod", lambda: pods.ready("LoginSet"), PODS_WAIT_S).metadata.name
    command = ["srun", "-N1", "-n1", "-t", "1", "bash", "-c",
               'echo "job $SLURM_JOB_ID ran on node $SLURMD_NODENAME (pod $(hostname)) as $(id -un)"']
    out = pods.exec(login, "login", command).strip()
    if not out.startswith("job "):
        raise SlinkyError(f"srun in {login}: {out[:300]}")
    sinfo = pods.exec(login, "login", ["sinfo"]).strip()
    return f"$ srun {' '.join(command[1:6])} ...\n{out}\n$ sinfo\n{sinfo}"


def operator_objects(pods: OperatorPods) -> str:
    name, namespace = pods.cluster.name, pods.namespace

    def made() -> tuple[list[str], list[str], dict[str, Any]] | None:
        sets = [s.metadata.name for s in pods.apps.list_namespaced_stateful_set(namespace).items]
        deployments = [d.metadata.name for d in pods.apps.list_namespaced_deployment(namespace).items]
        maps = {m.metadata.name: m for m in pods.core.list_namespaced_config_map(namespace).items}
        return (sets, deployments, maps) if f"{name}-controller" in sets and f"{name}-config" in maps else None

    sets, deployments, maps = wait_for(f"{name}-controller StatefulSet and {name}-config ConfigMap from the operator",
                                       made, WAIT_S)
    core = pods.core
    services = sorted(s.metadata.name for s in core.list_namespaced_service(namespace).items)
    settings = SlurmConfBuilder().extra((maps[f"{name}-config"].data or {}).get("slurm.conf", "")).build().settings()
    lines = [f"StatefulSets: {', '.join(sorted(sets))}", f"Deployments: {', '.join(sorted(deployments)) or '-'}",
             f"Services: {', '.join(services)}", f"slurm.conf ({name}-config), as the operator wrote it:"]
    lines += [f"  {key}={settings[key]}" for key in SHOWN_KEYS if key in settings]
    return "\n".join(lines)
