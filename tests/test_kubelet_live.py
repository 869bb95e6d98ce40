"""``slinkyml dev kube up --kubelet``: a real node (Debian's containerd and runc, the bridge CNI, the kubelet
built from k8s.io/kubernetes) registers Ready, runs a pod from an image built here to Succeeded, serves its
log through the API server, never pulls, and ``down`` leaves nothing on the machine.

On a control plane of this module's own, without the operator (its own state folder, ports, bridge and pod
subnet): the session's shared plane (``kube_plane``) must not get a node, or the operator's pods of other
tests would be scheduled onto it.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import importlib.metadata
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.stream import stream
from private_cluster import kubelet_node, port_shift, require_kubelet_node
from tiers import needs
from waiting import wait_until

from slinkyml.dev.images.slurm_images import image_name, slinky_name
from slinkyml.dev.kubernetes.kube import KubeControlPlane, Ports
from slinkyml.dev.kubernetes.kubenode import (
    BUSYBOX_IMAGE,
    CNI_CACHE_DIR,
    CONTAINER_LOG_LINKS,
    NETNS_DIR,
    NO_PULL_PROXY,
    SHIM_SOCKET_DIR,
    KubeNode,
    NodeSettings,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
#: clear of CI's control plane (17400-17483) and of those helpers and developers run beside it (17600, 17700)
PORT_BASE = 18000
NAMESPACE = "default"
RELEASE = "26.05"
#: configless: the slurmd pods fetch it from slurmctld; dynamic nodes (-Z) in the NodeSet of their feature
SLURM_CONF = """\
ClusterName=kube
SlurmctldHost=slurmctld
AuthType=auth/slurm
CredType=cred/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
SlurmUser=slurm
StateSaveLocation=/var/spool/slurmctld
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldParameters=enable_configless
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MaxNodeCount=8
ReturnToService=2
NodeSet=kube Feature=kube
PartitionName=all Nodes=kube Default=YES State=UP
"""


@pytest.fixture(scope="module")
@needs("kubelet")
def node_plane() -> Iterator[tuple[KubeControlPlane, KubeNode]]:
    require_kubelet_node()
    shift = port_shift()
    state = Path(tempfile.mkdtemp(prefix="slinkyml-kubelet-", dir="/var/tmp"))
    plane = KubeControlPlane(state, ports=Ports.from_base(PORT_BASE + shift),
                             node=NodeSettings(*kubelet_node("slinkyml-test-node", "slkkt", 246)))
    node = plane.node()
    try:
        started = time.monotonic()
        plane.up(kubelet=True, operator=False)
        print(f"control plane and node Ready in {time.monotonic() - started:.1f} s")
        yield plane, node
    finally:
        plane.reset()
        shutil.rmtree(state, ignore_errors=True)


def _core(plane: KubeControlPlane) -> client.CoreV1Api:
    return client.CoreV1Api(plane.api())


_wait = functools.partial(wait_until, timeout=120.0, every=0.3)


def _pod(name: str, image: str, command: list[str], restart: str = "Never") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                                     "command": command}]}}


def test_node_registers_ready(node_plane) -> None:
    plane, node = node_plane
    got = _core(plane).read_node(node.settings.name)
    ready = {c.type: c.status for c in got.status.conditions}
    assert ready["Ready"] == "True", got.status.conditions
    info = got.status.node_info
    assert info.kubelet_version == "v1.36.3"
    assert info.container_runtime_version.startswith("containerd://")
    assert {(a.type, a.address) for a in got.status.addresses} >= {("InternalIP", node.settings.node_ip)}
    assert not got.spec.taints  # schedulable: nothing held it back


def test_pod_runs_to_succeeded_and_its_log_is_served(node_plane) -> None:
    """A pod from the busybox image built here: it runs on the bridge, ends Succeeded, and its output
    comes back through the API server from the kubelet (what `kubectl logs` does)."""
    plane, node = node_plane
    core = _core(plane)
    core.create_namespaced_pod(NAMESPACE, _pod("hello", BUSYBOX_IMAGE, [
        "sh", "-c", "echo hello from $(hostname); ip -4 -o addr show eth0; echo done"]))
    pod = _wait("pod hello to finish", lambda: (p := core.read_namespaced_pod("hello", NAMESPACE)).status.phase
                in ("Succeeded", "Failed") and p)
    assert pod.status.phase == "Succeeded", pod.status
    assert pod.spec.node_name == node.settings.name
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(node.settings.subnet)
    log = core.read_namespaced_pod_log("hello", NAMESPACE)
    assert "hello from hello" in log
    assert f"inet {pod.status.pod_ip}/" in log  # the address the container saw is the pod's
    assert log.rstrip().endswith("done")


def test_an_image_not_imported_is_never_pulled(node_plane) -> None:
    """A chart's default image is not here: the pull fails at once on loopback instead of reaching out."""
    plane, _ = node_plane
    core = _core(plane)
    core.create_namespaced_pod(NAMESPACE, _pod("notpulled", "ghcr.io/slinkyproject/slurmctld:26.05-ubuntu24.04",
                                               ["true"]))

    def waiting():
        statuses = core.read_namespaced_pod("notpulled", NAMESPACE).status.container_statuses or []
        w = statuses and statuses[0].state.waiting
        return w if w and w.reason in ("ErrImagePull", "ImagePullBackOff") else None

    reason = _wait("the pull to fail", waiting, timeout=60)
    assert NO_PULL_PROXY.removeprefix("http://") in reason.message
    core.delete_namespaced_pod("notpulled", NAMESPACE, grace_period_seconds=0)


#: the label the operator's Controller sets on the active slurmctld pod, its Service's selector (f2ed3fc:
#: api/v1beta1/well_known.go LabelControllerActive, controllerbuilder/controller_service.go)
ACTIVE_LABEL = "controller.slinky.slurm.net/active"


def test_cluster_dns_and_service_addresses_inside_pods(node_plane) -> None:
    """As on EKS: CoreDNS behind the kube-dns Service and kube-proxy's rules in the node's namespace. From a
    busybox pod (resolv.conf from the kubelet): ``<svc>.<ns>`` and its FQDN, a StatefulSet-style pod's name in
    its headless Service's subdomain, a Service selecting the active-controller label, and ``kubernetes``,
    each reached over TCP through its ClusterIP (or the pod's address); a name outside the cluster gets no
    address (nothing is forwarded off the machine)."""
    plane, _ = node_plane
    core = _core(plane)
    ns = "dns-check"
    core.create_namespace({"metadata": {"name": ns}})
    serve = "while true; do echo \"$(hostname)\" | nc -l -p 8080; done"
    for name, labels in (("web-0", {"app": "web", ACTIVE_LABEL: "true"}), ("web-1", {"app": "web"})):
        pod = _pod(name, BUSYBOX_IMAGE, ["sh", "-c", serve], restart="Always")
        pod["metadata"]["labels"] = labels
        pod["spec"].update(hostname=name, subdomain="webs")
        core.create_namespaced_pod(ns, pod)
    services = {"webs": {"clusterIP": "None", "selector": {"app": "web"}},
                "active": {"selector": {"app": "web", ACTIVE_LABEL: "true"}}}
    for name, spec in services.items():
        core.create_namespaced_service(ns, {"metadata": {"name": name},
                                            "spec": {**spec, "ports": [{"port": 8080, "targetPort": 8080}]}})
    core.create_namespaced_pod(ns, _pod("client", BUSYBOX_IMAGE, ["sleep", "100000"], restart="Always"))
    for name in ("web-0", "web-1", "client"):
        _wait(f"pod {name} to run", lambda n=name: core.read_namespaced_pod(n, ns).status.phase == "Running")
    resolv = _exec(core, "client", ns, ["cat", "/etc/resolv.conf"])
    assert "nameserver 10.96.0.10" in resolv and f"search {ns}.svc.cluster.local svc.cluster.local" in resolv

    def answer(target: str) -> str:
        # through the C library's resolver (search list, ndots:5), as a program in a pod resolves
        return _exec(core, "client", ns, ["sh", "-c", f"nc -w 5 {target} </dev/null"]).strip()

    for target, want in ((f"active.{ns} 8080", "web-0"), (f"active.{ns}.svc.cluster.local 8080", "web-0"),
                         (f"web-1.webs.{ns} 8080", "web-1"), (f"web-0.webs.{ns}.svc.cluster.local 8080", "web-0")):
        assert _wait(f"{target} to answer", lambda t=target: answer(t), timeout=60) == want, target
    clusterip = core.read_namespaced_service("active", ns).spec.cluster_ip
    assert answer(f"{clusterip} 8080") == "web-0"
    lookup = _exec(core, "client", ns, ["nslookup", f"active.{ns}.svc.cluster.local"])
    assert f"Address: {clusterip}" in lookup
    # the API server through the `kubernetes` Service, as in-cluster clients reach it
    assert "api-ok" in _exec(core, "client", ns, ["sh", "-c", "nc -w 5 kubernetes.default 443 </dev/null "
                                                  "&& echo api-ok"])
    assert "Address: " not in _exec(core, "client", ns, ["nslookup", "example.org"]).split("example.org", 1)[-1]
    core.delete_namespace(ns, grace_period_seconds=0)


def _installed_source() -> str:
    """The source tree the venv's editable install of slinkyml points at (``-I``: not $PYTHONPATH's)."""
    return subprocess.run([sys.executable, "-I", "-c", "import os, slinkyml; print(os.path.dirname("
                           "os.path.dirname(slinkyml.__file__)))"], capture_output=True, text=True,
                          check=True).stdout.strip()


def torch_version() -> str:
    return importlib.metadata.version("torch")


def _shim_socket(node: KubeNode, container: str) -> str:
    """containerd 1.6's name for a shim's socket: sha256 of its address, namespace and container id."""
    return hashlib.sha256(f"{node.socket}/k8s.io/{container}".encode()).hexdigest()


def _exec(core: client.CoreV1Api, pod: str, namespace: str, command: list[str]) -> str:
    """What `kubectl exec` does: API server -> kubelet -> containerd's streaming server."""
    return stream(core.connect_get_namespaced_pod_exec, pod, namespace, command=command, stderr=True,
                  stdout=True, stdin=False, tty=False)


def test_slurm_images_run_slurmctld_and_slurmd_pods(node_plane) -> None:
    """The slurmctld and slurmd images built from the Debian sid root, run as the operator's pods run them
    (slurmctld as SlurmUser 401 with /etc/slurm projected from a ConfigMap and the auth/slurm key Secret,
    /run, statesave and log volumes; slurmd privileged with `-Z --conf-server HOST:6817 --conf
    'Features=...'` and $POD_CPUS/$POD_MEMORY): both slurmd register over the bridge, configless, and
    `sinfo` inside the slurmctld pod lists them idle with their feature."""
    plane, node = node_plane
    digests = node.import_slurm_images(RELEASE)
    ctld_image, slurmd_image = image_name("slurmctld", RELEASE), image_name("slurmd", RELEASE)
    slinky = ("slurmctld", "slurmd", "login", "slurmdbd", "slurmrestd")
    assert set(digests) == {image_name(c, RELEASE) for c in (*slinky, "mariadb")} | {
        slinky_name(c, RELEASE) for c in slinky}
    # Slinky's names, as the rendered manifests use them, are the same images
    assert all(digests[slinky_name(c, RELEASE)] == digests[image_name(c, RELEASE)] for c in slinky)
    core = _core(plane)
    ns = "slurm-images"
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "slurm-config"}, "data": {"slurm.conf": SLURM_CONF}})
    core.create_namespaced_secret(ns, {"metadata": {"name": "slurm-key"},
                                       "data": {"slurm.key": base64.b64encode(os.urandom(1024)).decode(),
                                                "jwt_hs256.key": base64.b64encode(os.urandom(32)).decode()}})
    etc = {"name": "slurm-etc", "projected": {"defaultMode": 0o610, "sources": [
        {"configMap": {"name": "slurm-config"}},
        {"secret": {"name": "slurm-key", "items": [{"key": "slurm.key", "path": "slurm.key"},
                                                   {"key": "jwt_hs256.key", "path": "jwt_hs256.key"}]}}]}}
    etc_mount = {"name": "slurm-etc", "mountPath": "/etc/slurm", "readOnly": True}
    core.create_namespaced_pod(ns, {"metadata": {"name": "slurmctld"}, "spec": {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 401, "runAsGroup": 401, "fsGroup": 401},
        "automountServiceAccountToken": False,
        "volumes": [etc, *({"name": v, "emptyDir": {}} for v in ("run", "statesave", "log"))],
        "containers": [{"name": "slurmctld", "image": ctld_image, "ports": [{"containerPort": 6817}],
                        "volumeMounts": [etc_mount, {"name": "run", "mountPath": "/run"},
                                         {"name": "statesave", "mountPath": "/var/spool/slurmctld"},
                                         {"name": "log", "mountPath": "/var/log/slurm"}]}]}})
    ctld = _wait("slurmctld to run", lambda: (p := core.read_namespaced_pod("slurmctld", ns)).status.phase
                 == "Running" and p)
    _wait("slurmctld to listen", lambda: "Running as primary controller" in core.read_namespaced_pod_log(
        "slurmctld", ns))
    # the training stack is the host's venv, mounted read-only at its own paths (with the Python it was
    # made from and this source tree, which its editable install points at): ~6 GB that an image layer
    # would copy into every node's store, and exactly the versions the rest of the tests run
    host_paths = sorted({sys.prefix, sys.base_prefix, _installed_source()})
    stack = [{"name": f"host{i}", "hostPath": {"path": p, "type": "Directory"}} for i, p in enumerate(host_paths)]
    stack_mounts = [{"name": f"host{i}", "mountPath": p, "readOnly": True} for i, p in enumerate(host_paths)]
    for i in (1, 2):
        core.create_namespaced_pod(ns, {"metadata": {"name": f"kube-{i}"}, "spec": {
            "hostAliases": [{"ip": ctld.status.pod_ip, "hostnames": ["slurmctld"]}],
            "automountServiceAccountToken": False, "volumes": [etc, {"name": "log", "emptyDir": {}}, *stack],
            "containers": [{"name": "slurmd", "image": slurmd_image, "securityContext": {"privileged": True},
                            "args": ["-Z", "--conf-server", f"{ctld.status.pod_ip}:6817", "--conf",
                                     "'Features=kube'"],
                            "env": [{"name": "POD_CPUS", "value": "1"}, {"name": "POD_MEMORY", "value": "1024"}],
                            "volumeMounts": [etc_mount, {"name": "log", "mountPath": "/var/log/slurm"},
                                             *stack_mounts]}]}})

    def nodes() -> list[str]:
        out = _exec(core, "slurmctld", ns, ["sinfo", "-h", "-N", "-o", "%N %t %f"])
        return sorted(line.strip() for line in out.splitlines() if line.strip())

    assert _wait("both slurmd to register", lambda: nodes() == ["kube-1 idle kube", "kube-2 idle kube"]) is True
    # the pod's asserted CPUs and memory reached slurmd as --conf items (the entrypoint's contract)
    log = core.read_namespaced_pod_log("kube-1", ns)
    assert "Resource spec: Reserved abstract CPU IDs" in log and "slurmd version 26.05" in log

    # slurmrestd as the operator runs it (nobody, SLURM_JWT=daemon, `-s openapi/slurmctld 0.0.0.0:6820` without
    # accounting), answering a JWT from `scontrol token` over the bridge
    core.create_namespaced_pod(ns, {"metadata": {"name": "restapi"}, "spec": {
        "hostAliases": [{"ip": ctld.status.pod_ip, "hostnames": ["slurmctld"]}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534, "fsGroup": 65534},
        "automountServiceAccountToken": False, "volumes": [etc],
        "containers": [{"name": "slurmrestd", "image": image_name("slurmrestd", RELEASE),
                        "args": ["-s", "openapi/slurmctld", "0.0.0.0:6820"],
                        "env": [{"name": "SLURM_JWT", "value": "daemon"},
                                {"name": "SLURMRESTD_SECURITY", "value": "disable_unshare_files,disable_unshare_sysv"}],
                        "volumeMounts": [etc_mount]}]}})
    restapi = _wait("slurmrestd to run", lambda: (p := core.read_namespaced_pod("restapi", ns)).status.phase
                    == "Running" and p)
    token = _exec(core, "slurmctld", ns, ["scontrol", "token", "username=slurm"]).strip().split("=", 1)[1]

    def ping() -> dict | None:
        request = urllib.request.Request(f"http://{restapi.status.pod_ip}:6820/slurm/v0.0.44/ping",
                                         headers={"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token})
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                return json.loads(resp.read())
        except OSError:
            return None

    answer = _wait("slurmrestd to answer", ping, timeout=60)
    assert [(p["hostname"], p["pinged"]) for p in answer["pings"]] == [("slurmctld", "UP")], answer

    # a login pod as the operator makes one (sackd told the conf server in $SACKD_OPTIONS; only the auth key
    # mounted): Slurm's commands work there through sackd, and sshd answers on port 22
    core.create_namespaced_pod(ns, {"metadata": {"name": "login"}, "spec": {
        "hostAliases": [{"ip": ctld.status.pod_ip, "hostnames": ["slurmctld"]}],
        "automountServiceAccountToken": False,
        "volumes": [{"name": "slurm-key", "secret": {"secretName": "slurm-key", "defaultMode": 0o600,
                                                     "items": [{"key": "slurm.key", "path": "slurm.key"}]}}],
        "containers": [{"name": "login", "image": image_name("login", RELEASE),
                        "env": [{"name": "SACKD_OPTIONS", "value": f"--conf-server {ctld.status.pod_ip}:6817"}],
                        "volumeMounts": [{"name": "slurm-key", "mountPath": "/etc/slurm", "readOnly": True}]}]}})
    login = _wait("login to run", lambda: (p := core.read_namespaced_pod("login", ns)).status.phase == "Running"
                  and p)

    def login_nodes() -> list[str]:
        out = _exec(core, "login", ns, ["sinfo", "-h", "-N", "-o", "%N %t"])
        return sorted(line.strip() for line in out.splitlines() if line.strip())

    assert _wait("sinfo in the login pod", lambda: login_nodes() == ["kube-1 idle", "kube-2 idle"]) is True
    # a job from the login pod on both slurmd pods, importing torch and slinkyml from the mounted venv
    out = _exec(core, "login", ns, ["srun", "-N2", "-t", "5", f"{sys.prefix}/bin/python", "-c",
                                    "import socket, torch, slinkyml; print('ran', socket.gethostname(), torch.__version__)"])
    ran = sorted(line.split() for line in out.splitlines() if line.startswith("ran "))
    assert [r[1] for r in ran] == ["kube-1", "kube-2"], out
    assert all(r[2].split("+")[0] == torch_version() for r in ran), out  # 2.13.0+cu130: the wheel's local tag

    def banner() -> bytes:
        try:
            with socket.create_connection((login.status.pod_ip, 22), timeout=5) as conn:
                return conn.recv(64)
        except OSError:
            return b""

    assert _wait("sshd's banner", banner).startswith(b"SSH-2.0-OpenSSH")
    core.delete_namespace(ns, grace_period_seconds=0)


def test_the_operator_runs_as_a_pod_and_reaches_services_by_name(node_plane) -> None:
    """With the operator, a plane with a node runs the manager as a pod (an image of the built binary, its
    ServiceAccount), not as a process: it reaches the API server through the ``kubernetes`` Service and the
    Slurm cluster's Services by their DNS names. ``slinkyml cluster apply manifests/cpu-small``: the
    operator makes the controller StatefulSet, and its NodeSet sync's Reservation step finds
    ``cpu-small-restapi.slurm`` (a ClusterIP it dials, or NodeSet pods once slurmrestd answers) where the
    manager as a process of the machine could not resolve it."""
    plane, _ = node_plane
    core, apps = _core(plane), client.AppsV1Api(plane.api())
    try:
        plane.up(kubelet=True)
        status = plane.status()
        assert status["operator_pod"] == "slinky/slurm-operator" and "slurm-operator-manager" not in status["daemons"]
        pod = core.list_namespaced_pod("slinky", label_selector="app.kubernetes.io/name=slurm-operator").items[0]
        assert pod.spec.containers[0].image == f"slinkyml.local/slurm-operator:{plane.operator_version}"
        assert pod.spec.service_account_name == "slurm-operator"
        done = subprocess.run([sys.executable, "-m", "slinkyml", "cluster", "apply", "--kubeconfig",
                               str(plane.kubeconfig), "--skip-missing-kinds",
                               str(REPO / "manifests" / "cpu-small" / "cluster.yaml")],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        _wait("the operator's controller StatefulSet", lambda: apps.read_namespaced_stateful_set(
            "cpu-small-controller", "slurm"), retry_on=(client.ApiException,))
        restapi = _wait("the restapi Service", lambda: core.read_namespaced_service("cpu-small-restapi", "slurm"),
                        retry_on=(client.ApiException,))

        def reached() -> str:
            log = core.read_namespaced_pod_log(pod.metadata.name, "slinky")
            assert "no such host" not in log, log[-2000:]
            dialed = f"dial tcp {restapi.spec.cluster_ip}:6820" in log
            made = [p for p in core.list_namespaced_pod("slurm").items if p.metadata.name.startswith("cpu-small-cpu-")]
            return "dialed" if dialed else "nodeset pods" if made else ""

        print("the operator's NodeSet sync reached the restapi Service:", _wait("the NodeSet sync", reached))
    finally:
        with contextlib.suppress(client.ApiException):
            core.delete_namespace("slurm", grace_period_seconds=0)
        plane.up(kubelet=True, operator=False)
    _wait("the manager pod to go", lambda: not core.list_namespaced_pod("slinky").items)


def _leftovers(node: KubeNode, containers: set[str] = frozenset()) -> dict[str, list[str]]:
    net = ipaddress.ip_network(node.settings.subnet)
    netns = []
    for ns in sorted(NETNS_DIR.glob("cni-*")) if NETNS_DIR.is_dir() else []:
        out = subprocess.run(["ip", "-n", ns.name, "-j", "-4", "addr"], capture_output=True, text=True).stdout
        addrs = [a["local"] for i in json.loads(out or "[]") for a in i.get("addr_info", [])]
        if any(ipaddress.ip_address(a) in net for a in addrs):
            netns.append(ns.name)
    mounts = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True).stdout
    shims = subprocess.run(["pgrep", "-f", f"containerd-shim.*-address {node.socket}"], capture_output=True,
                           text=True).stdout.split()
    fixed = [str(f) for d in (SHIM_SOCKET_DIR, CNI_CACHE_DIR) if d.is_dir() for f in d.iterdir()
             if any(cid in f.name for cid in containers)
             or (d == SHIM_SOCKET_DIR and f.name in {_shim_socket(node, cid) for cid in containers})]
    fixed += [str(f) for f in CONTAINER_LOG_LINKS.iterdir() if f.is_symlink()
              and os.readlink(f).startswith(f"{node.dir}/")] if CONTAINER_LOG_LINKS.is_dir() else []
    daemons = [f"{d.name} {d.pid}" for d in node.daemons() if d.running]
    # anything of the node still in the machine's iptables (the node's own rules live in its namespace)
    rules = [line for table in ("nat", "filter") for line in subprocess.run(
        ["iptables", "-w", "-t", table, "-S"], capture_output=True, text=True).stdout.splitlines()
             if node.settings.network.netns in line or node.settings.network.host_ip in line]
    return {"netns": netns, "mounts": [m for m in mounts.splitlines() if m.startswith(f"{node.dir}/")],
            "network": node.settings.network.leftovers() + rules, "daemons": daemons,
            "fixed paths": fixed,
            "cgroups": [str(d) for d in node._cgroup_dirs() if d.exists()], "shims": shims,
            "bridge": [node.settings.bridge] if Path(f"/sys/class/net/{node.settings.bridge}").exists() else []}


def test_down_leaves_nothing_and_up_comes_back(node_plane) -> None:
    """With a pod running (its netns, veth, overlay mount, shim, cgroups) and the node's network (its
    namespace with kube-proxy's rules, the veth pair, the DNAT rule of the machine), the node's ``down``
    removes all of it; a second ``up`` registers Ready again and runs pods."""
    plane, node = node_plane
    core = _core(plane)
    core.create_namespaced_pod(NAMESPACE, _pod("sleeper", BUSYBOX_IMAGE, ["sleep", "100000"], restart="Always"))
    _wait("pod sleeper to run", lambda: core.read_namespaced_pod("sleeper", NAMESPACE).status.phase == "Running")
    containers = node._container_ids()
    before = _leftovers(node, containers)
    assert before["netns"] and before["mounts"] and before["shims"] and before["bridge"], before
    assert len(before["daemons"]) == 3 and before["network"], before
    assert before["fixed paths"], before  # a shim socket, libcni's cache, the kubelet's log links
    assert node.down() == ["kube-proxy", "kubelet", "containerd"]
    assert _leftovers(node, containers) == {"netns": [], "mounts": [], "network": [], "daemons": [],
                                            "fixed paths": [], "cgroups": [], "shims": [], "bridge": []}
    plane.up(kubelet=True, operator=False)
    _wait("pod sleeper to run again", lambda: (p := core.read_namespaced_pod("sleeper", NAMESPACE)).status.phase
          == "Running" and all(c.ready for c in p.status.container_statuses or []))
    core.delete_namespaced_pod("sleeper", NAMESPACE, grace_period_seconds=0)
