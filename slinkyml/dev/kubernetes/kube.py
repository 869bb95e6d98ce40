"""``KubeControlPlane``: a real Kubernetes control plane on loopback for ``slinkyml dev kube``.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler (built from Go modules by
``kube/build.sh`` into a cache keyed by version), the Slinky CRDs plus the upstream CRDs of the
examples' other kinds, and the slurm-operator's manager and webhook as processes (v1.2.1, or another
version the cache built: ``OPERATOR_VERSIONS``), the webhook registered with the API server at
``https://127.0.0.1:PORT`` with a ``caBundle``. Daemons are
PID-tracked with :class:`slinkyml.process.Daemon`, as ``dev up``'s are; ``up`` is idempotent.
With ``kubelet=True`` (``dev kube up --kubelet``) a real node joins: containerd, runc, the bridge CNI and
the kubelet (``kubenode.py``), registered Ready, so pods run, with kube-proxy and CoreDNS (``kubenet.py``);
the operator's manager then runs as a pod of the plane (Deployment ``slurm-operator`` in ``slinky``, an
image of the built binary), so it reaches Services by their cluster DNS names as it does on EKS.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slinkyml import DATA_DIR
from slinkyml.cluster.apply import api_client, apply_objects
from slinkyml.cluster.crds import crd_files
from slinkyml.config import dev_state_dir
from slinkyml.dev.images.images import Entry, ImageSpec
from slinkyml.dev.kubernetes.kubenet import SERVICE_CIDR
from slinkyml.dev.kubernetes.kubenode import KubeNode, NodeSettings
from slinkyml.dev.kubernetes.pki import Identity, Pki
from slinkyml.errors import SlinkyError
from slinkyml.process import Daemon, exclusive_lock, port_in_use, port_open
from slinkyml.secretfile import write_secret
from slinkyml.specload import load_data_all

SHARED_STATE_DIR = Path("/var/lib/slinkyml/kube-dev")
#: the checkout's kube/build.sh, beside the package (found from slinkyml/data, not from this module's folder)
BUILD_SCRIPT = DATA_DIR.parents[1] / "kube" / "build.sh"
GO_FALLBACK_DIR = "/usr/local/go/bin"
CLUSTER_NAME = "slinkyml-dev"
#: loopback ports, clear of the Slurm dev clusters (6817-6820, 7947-7960, 8817-8820, 9117-9520,
#: 13306-16706); ``$SLINKYML_KUBE_PORT_BASE`` moves them all
DEFAULT_PORT_BASE = 17400
#: the slurm-operator versions kube/build.sh builds (one Go module each, ``kube/operator-LABEL``), by the
#: label ``dev kube up --operator-version`` takes; the first is the default: the newest release
OPERATOR_VERSIONS = ("v1.2.1", "f2ed3fc")
DEFAULT_OPERATOR_VERSION = OPERATOR_VERSIONS[0]
#: the operator's identity: cluster-admin through system:masters (its chart's RBAC is not installed)
OPERATOR = Identity("operator", "slurm-operator", ("system:masters",))
CLIENTS = (Identity("admin", "slinkyml-admin", ("system:masters",)),
           Identity("controller-manager", "system:kube-controller-manager"),
           Identity("scheduler", "system:kube-scheduler"), OPERATOR)
#: the API server's client certificate towards kubelets (logs, exec): the kubelet asks the API server
#: whether this user may, and system:masters may
KUBELET_CLIENT = Identity("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",))
WEBHOOK_CONFIG_NAME = "slinkyml-dev-slurm-operator"
#: where the manager runs as a pod on planes with a node (the chart's default namespace)
OPERATOR_NAMESPACE = "slinky"
OPERATOR_IMAGE = "slinkyml.local/slurm-operator"
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Ports:
    """Every port the control plane listens on, all on 127.0.0.1."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    manager_health: int
    webhook_health: int
    webhook: int

    @classmethod
    def from_base(cls, base: int) -> Ports:
        return cls(etcd_client=base + 1, etcd_peer=base + 2, apiserver=base + 43, controller_manager=base + 57,
                   scheduler=base + 59, manager_health=base + 81, webhook_health=base + 82, webhook=base + 83)


def default_state_dir() -> Path:
    """``$SLINKYML_KUBE_STATE_DIR``; for root ``/var/lib/slinkyml/kube-dev``, else under ``$XDG_STATE_HOME``
    (``~/.local/state``), by the rule ``dev up`` chooses its own by (:func:`slinkyml.config.dev_state_dir`)."""
    return dev_state_dir("SLINKYML_KUBE_STATE_DIR", SHARED_STATE_DIR.name)


def default_ports() -> Ports:
    raw = os.environ.get("SLINKYML_KUBE_PORT_BASE", "")
    try:
        base = int(raw) if raw else DEFAULT_PORT_BASE
    except ValueError:
        base = -1
    if not 1024 <= base <= 65535 - 100:  # every port is base + 1..83
        raise SlinkyError(f"SLINKYML_KUBE_PORT_BASE={raw}: not a port number from 1024 to 65435")
    return Ports.from_base(base)


def binaries_dir() -> Path:
    """The built binaries: ``$SLINKYML_KUBE_BIN``, else the cache folder ``kube/build.sh`` keys by version."""
    given = os.environ.get("SLINKYML_KUBE_BIN")
    if given:
        return Path(given)
    if not BUILD_SCRIPT.is_file():
        raise SlinkyError(f"{BUILD_SCRIPT} not found: set SLINKYML_KUBE_BIN to the folder of the built binaries")
    env = dict(os.environ)
    if shutil.which("go") is None:  # the official archive's place, for shells whose PATH lacks it
        env["PATH"] = f"{env.get('PATH', '/usr/bin:/bin')}:{GO_FALLBACK_DIR}"
    done = subprocess.run(["bash", str(BUILD_SCRIPT), "--bindir"], capture_output=True, text=True, timeout=60,
                          env=env)
    if done.returncode != 0:
        raise SlinkyError(done.stderr.strip() or f"{BUILD_SCRIPT} --bindir failed ({done.returncode})")
    return Path(done.stdout.strip())


def operator_label(version: str) -> str:
    """``1.2.1`` or ``v1.2.1`` -> ``v1.2.1``; ``f2ed3fc`` as it is; anything else: a one-line error."""
    label = f"v{version}" if version[:1].isdigit() else version
    if label not in OPERATOR_VERSIONS:
        raise SlinkyError(f"--operator-version {version}: not one of {', '.join(OPERATOR_VERSIONS)} "
                          "(the slurm-operator versions kube/build.sh builds)")
    return label


class KubeControlPlane:
    """The local control plane's files, daemons and API client, all under one state folder."""

    def __init__(self, state_dir: str | os.PathLike[str] | None = None, *, ports: Ports | None = None,
                 node: NodeSettings | None = None):
        self.state_dir = Path(state_dir).absolute() if state_dir else default_state_dir()
        self.ports = ports or default_ports()
        self._node_settings = node
        self.pki = Pki(self.state_dir / "pki")
        self._bin: Path | None = None

    # -- paths -------------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (system:masters) that ``dev kube env`` exports."""
        return self.state_dir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def bin_dir(self) -> Path:
        if self._bin is None:
            self._bin = binaries_dir()
        return self._bin

    def _kubeconfig_for(self, identity: Identity) -> Path:
        return self.kubeconfig if identity.file == "admin" else self.state_dir / f"{identity.file}.kubeconfig"

    @property
    def _operator_file(self) -> Path:
        """The operator version the last ``up`` started (its label)."""
        return self.state_dir / "run" / "operator-version"

    @property
    def operator_version(self) -> str:
        """The label of the operator version this plane runs: what the last ``up`` chose, else the default."""
        try:
            return operator_label(self._operator_file.read_text().strip())
        except (OSError, SlinkyError):
            return DEFAULT_OPERATOR_VERSION

    def operator_dir(self, label: str | None = None) -> Path:
        """The built operator of this version (default: the one this plane runs): its manager and webhook."""
        return self.bin_dir / f"slurm-operator-{label or self.operator_version}"

    @property
    def webhook_tmpdir(self) -> Path:
        """The webhook's TMPDIR: controller-runtime reads its serving certificate from
        ``$TMPDIR/k8s-webhook-server/serving-certs/tls.{crt,key}`` (the command has no flag for it)."""
        return self.state_dir / "webhook-tmp"

    # -- daemons -----------------------------------------------------------------------------------
    def daemons(self) -> list[Daemon]:
        """In start order."""
        b, p, pki, s = self.bin_dir, self.ports, self.pki, self.state_dir
        run, log = s / "run", s / "log"

        def daemon(name: str, argv: list[str], env: dict[str, str] | None = None) -> Daemon:
            return Daemon(name, argv, pid_file=run / f"{name}.pid", log_file=log / f"{name}.log", env=env)

        etcd_url, peer_url = f"http://127.0.0.1:{p.etcd_client}", f"http://127.0.0.1:{p.etcd_peer}"
        kcm, sched = self._kubeconfig_for(CLIENTS[1]), self._kubeconfig_for(CLIENTS[2])
        operator_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                        "KUBECONFIG": str(self._kubeconfig_for(OPERATOR))}
        operator = self.operator_dir()
        return [
            # plain http on loopback, as envtest runs it; --unsafe-no-fsync: a throwaway dev store on a
            # shared machine, where fsync latency would slow every write of the API server
            daemon("etcd", [str(b / "etcd"), "--name=slinkyml-dev", f"--data-dir={s / 'etcd'}",
                            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
                            f"--initial-cluster=slinkyml-dev={peer_url}", "--unsafe-no-fsync",
                            "--log-level=warn"]),
            daemon("kube-apiserver", [
                str(b / "kube-apiserver"), f"--etcd-servers={etcd_url}", "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1", f"--secure-port={p.apiserver}",
                f"--tls-cert-file={pki.path('apiserver.crt')}", f"--tls-private-key-file={pki.path('apiserver.key')}",
                f"--client-ca-file={pki.ca_cert}",
                # Node: a kubelet (system:node:NAME) may read and write only what its own pods need
                "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
                f"--kubelet-client-certificate={pki.path(KUBELET_CLIENT.file + '.crt')}",
                f"--kubelet-client-key={pki.path(KUBELET_CLIENT.file + '.key')}",
                f"--kubelet-certificate-authority={pki.ca_cert}",
                # by address: a node's name resolves nowhere (and a DNS query would leave the machine)
                "--kubelet-preferred-address-types=InternalIP",
                f"--service-account-issuer={self.server}", f"--service-account-key-file={pki.path('sa.pub')}",
                f"--service-account-signing-key-file={pki.path('sa.key')}",
                f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
                # no endpoint for the `kubernetes` Service (a loopback address is invalid for one)
                "--endpoint-reconciler-type=none", "--profiling=false"]),
            daemon("kube-controller-manager", [
                str(b / "kube-controller-manager"), f"--kubeconfig={kcm}", f"--authentication-kubeconfig={kcm}",
                f"--authorization-kubeconfig={kcm}", "--bind-address=127.0.0.1",
                f"--secure-port={p.controller_manager}", "--leader-elect=false",
                f"--cluster-name={CLUSTER_NAME}", f"--cert-dir={pki.path('controller-manager-serving')}",
                f"--service-account-private-key-file={pki.path('sa.key')}", f"--root-ca-file={pki.ca_cert}",
                "--use-service-account-credentials=true", f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--profiling=false"]),
            daemon("kube-scheduler", [
                str(b / "kube-scheduler"), f"--kubeconfig={sched}", f"--authentication-kubeconfig={sched}",
                f"--authorization-kubeconfig={sched}", "--bind-address=127.0.0.1", f"--secure-port={p.scheduler}",
                "--leader-elect=false", "--profiling=false"]),
            daemon("slurm-operator-webhook", [
                str(operator / "webhook"), f"--server-addr=127.0.0.1:{p.webhook}",
                f"--health-addr=127.0.0.1:{p.webhook_health}", "--metrics-addr=0"],
                env={**operator_env, "TMPDIR": str(self.webhook_tmpdir)}),
            daemon("slurm-operator-manager", [
                str(operator / "manager"), f"--health-addr=127.0.0.1:{p.manager_health}",
                "--metrics-addr=0"], env=operator_env),
        ]

    def _listen_ports(self) -> dict[str, tuple[int, ...]]:
        p = self.ports
        return {"etcd": (p.etcd_client, p.etcd_peer), "kube-apiserver": (p.apiserver,),
                "kube-controller-manager": (p.controller_manager,), "kube-scheduler": (p.scheduler,),
                "slurm-operator-webhook": (p.webhook, p.webhook_health),
                "slurm-operator-manager": (p.manager_health,)}

    # -- lifecycle ---------------------------------------------------------------------------------
    def up(self, log: Callable[[str], None] = lambda _: None, *, kubelet: bool = False,
           operator: bool = True, operator_version: str = DEFAULT_OPERATOR_VERSION,
           slurm_images: str | None = None) -> KubeControlPlane:
        """Start whatever is not running; idempotent. On failure stop what this call started and raise.
        Concurrent ``up``/``down`` of one state dir (``make test`` and a test session's fixture) take turns.
        ``kubelet``: also the node (containerd, kubelet), waiting until it is Ready. ``operator=False``:
        without the slurm-operator's manager and webhook (a plane for pods alone). ``operator_version``: which
        built operator runs (``OPERATOR_VERSIONS``); one of another version left running is stopped first.
        ``slurm_images``: a Slurm release whose slurmctld and slurmd images the node imports (needs ``kubelet``)."""
        label = operator_label(operator_version)
        with self._lock():
            self._switch_operator(label)
            with_node = bool(kubelet or slurm_images) or self._node_running()
            self._up(log, operator=operator, manager_on_host=not with_node)
            if with_node:
                node = self.node()
                node.up(self.api(), log)
                if slurm_images:
                    node.import_slurm_images(slurm_images, log)
                if operator:
                    self._operator_pod_up(node, log)
                else:
                    self._operator_pod_down(log)
            return self

    def _node_running(self) -> bool:
        return (self.state_dir / "node").is_dir() and self.node().running

    @property
    def node_running(self) -> bool:
        """Whether this plane's kubelet node runs: ``up`` then keeps it, and the operator's manager runs as a pod."""
        return self._node_running()

    def operator_image(self, label: str | None = None) -> ImageSpec:
        """The manager of this version as an image (the binary ``kube/build.sh`` built, nothing else)."""
        label = label or self.operator_version
        return ImageSpec(f"{OPERATOR_IMAGE}:{label}", (Entry("manager", source=self.operator_dir(label) / "manager"),
                                                      Entry("tmp", mode=0o1777)),
                         entrypoint=("/manager",), user="65532:65532")

    def operator_objects(self) -> list[dict[str, Any]]:
        """The manager as the chart deploys it (Deployment ``slurm-operator``, its health port 8081 probed,
        metrics off), as a ServiceAccount bound to ``cluster-admin``: the identity the manager has as a
        process (system:masters); the chart's narrower ClusterRole is a Helm template, not rendered here."""
        labels = {"app.kubernetes.io/name": "slurm-operator", "app.kubernetes.io/instance": "slurm-operator"}
        meta = {"name": "slurm-operator", "namespace": OPERATOR_NAMESPACE, "labels": labels}
        probe = {"port": 8081}
        return [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "slinkyml-dev-slurm-operator"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
             "subjects": [{"kind": "ServiceAccount", "name": "slurm-operator", "namespace": OPERATOR_NAMESPACE}]},
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
                "replicas": 1, "revisionHistoryLimit": 0, "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {
                    "hostname": "slurm-operator", "serviceAccountName": "slurm-operator",
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "slurm-operator", "image": self.operator_image().name,
                        "imagePullPolicy": "IfNotPresent",
                        "args": ["--health-addr", ":8081", "--metrics-addr", "0", "--leader-elect-namespace",
                                 OPERATOR_NAMESPACE],
                        "livenessProbe": {"httpGet": {"path": "/healthz", **probe}},
                        "readinessProbe": {"httpGet": {"path": "/readyz", **probe}, "periodSeconds": 2}}]}}}},
        ]

    def _operator_pod_down(self, log: Callable[[str], None]) -> None:
        """No manager pod on a plane ``up`` without the operator (an earlier ``up`` may have made one)."""
        # lazy: the kubernetes client is the optional [k8s] extra
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            client.AppsV1Api(self.api()).delete_namespaced_deployment("slurm-operator", OPERATOR_NAMESPACE)
            log(f"Deployment {OPERATOR_NAMESPACE}/slurm-operator removed (no operator on this plane)")
        except ApiException as exc:
            if exc.status != 404:
                raise SlinkyError(f"cannot remove the Deployment {OPERATOR_NAMESPACE}/slurm-operator: "
                                  f"{exc.reason}") from None

    def _operator_pod_up(self, node: KubeNode, log: Callable[[str], None]) -> None:
        """The manager's image imported, its Deployment applied, and its pod of this version ready."""
        node.import_images([self.operator_image()], log)
        api = self.api()
        apply_objects(self.operator_objects(), api, log=log)
        # lazy: the kubernetes client is the optional [k8s] extra
        from kubernetes import client

        apps = client.AppsV1Api(api)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            got = apps.read_namespaced_deployment("slurm-operator", OPERATOR_NAMESPACE)
            st = got.status
            if (st.observed_generation == got.metadata.generation and st.updated_replicas == 1
                    and st.ready_replicas == 1 and (st.replicas or 0) == 1):
                return
            if time.monotonic() > deadline:
                raise SlinkyError(f"the slurm-operator pod ({OPERATOR_NAMESPACE}/slurm-operator) not ready after "
                                  f"{READY_TIMEOUT_S:.0f} s: `kubectl -n {OPERATOR_NAMESPACE} describe pod`")
            time.sleep(0.5)

    def _switch_operator(self, label: str) -> None:
        """Stop the operator's daemons where they run another version than ``label`` (or one no ``up`` recorded,
        as a plane of an older slinkyml left running); record ``label``."""
        if not self._operator_file.is_file() or label != self.operator_version:
            for daemon in reversed(self.daemons()):
                if daemon.name.startswith("slurm-operator"):
                    daemon.stop()
        (self.state_dir / "run").mkdir(parents=True, exist_ok=True)
        self._operator_file.write_text(label + "\n")

    def node(self) -> KubeNode:
        """The kubelet node of this control plane: as given, else ``$SLINKYML_KUBE_NODE_NAME``, ``_BRIDGE``,
        ``_POD_SUBNET``."""
        return KubeNode(self, self._node_settings)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SlinkyError(f"state dir {self.state_dir}: cannot write {exc.filename or ''}: "
                              f"{exc.strerror or exc}") from None
        with exclusive_lock(self.state_dir / ".lock"):
            yield

    def _up(self, log: Callable[[str], None], *, operator: bool = True,
            manager_on_host: bool = True) -> KubeControlPlane:
        daemons = {d.name: d for d in self.daemons()}
        missing = [d.argv[0] for d in daemons.values() if not os.access(d.argv[0], os.X_OK)]
        if missing:
            raise SlinkyError(f"not built: {', '.join(missing)} (run `make kube`)")
        try:
            self._write_files()
        except OSError as exc:
            raise SlinkyError(f"state dir {self.state_dir}: cannot write {exc.filename or ''}: "
                              f"{exc.strerror or exc}") from None
        already = {name for name, d in daemons.items() if d.running}
        wanted = set(daemons) if operator else {n for n in daemons if not n.startswith("slurm-operator")}
        if not manager_on_host:  # it runs as a pod of the node
            wanted.discard("slurm-operator-manager")
        busy = [f"{port} ({name})" for name, ports in self._listen_ports().items()
                if name in wanted and name not in already for port in ports if port_in_use(port)]
        if busy:
            raise SlinkyError(f"ports in use: {', '.join(busy)} (another control plane? `slinkyml dev kube "
                              "status`; SLINKYML_KUBE_PORT_BASE moves them all)")
        self._wanted_file.write_text("".join(f"{name}\n" for name in sorted(wanted)))
        for name in already - wanted:  # an earlier `up` started it; this one asks for the plane without
            daemons[name].stop()
        started: list[Daemon] = []
        try:
            self._start(daemons["etcd"], self._etcd_healthy, started)
            self._start(daemons["kube-apiserver"], self._apiserver_ready, started)
            self._start(daemons["kube-controller-manager"],
                        lambda: port_open("127.0.0.1", self.ports.controller_manager), started)
            self._start(daemons["kube-scheduler"], lambda: port_open("127.0.0.1", self.ports.scheduler), started)
            api = self.api()
            self._install_crds(api, log)
            if not operator:  # a configuration left registered (failurePolicy: Fail) would refuse every object
                self._unregister_webhook(api, log)
                self._wait_default_service_account(api)
                return self
            self._start(daemons["slurm-operator-webhook"], lambda: port_open("127.0.0.1", self.ports.webhook),
                        started)
            self._register_webhook(api, log)
            if manager_on_host:
                self._start(daemons["slurm-operator-manager"],
                            lambda: _http_ok(f"http://127.0.0.1:{self.ports.manager_health}/readyz"), started)
            self._wait_default_service_account(api)
        except BaseException:
            for daemon in reversed(started):
                daemon.stop()
            raise
        return self

    def down(self) -> list[str]:
        """Stop every daemon by PID, last started first. State (etcd's data, certificates) is kept."""
        if not self.state_dir.is_dir():
            return []
        with self._lock():
            try:
                stopped = self.node().down() if (self.state_dir / "node").is_dir() else []
            finally:  # the control plane stops even when the node's clean-up failed
                plane = [d.name for d in reversed(self.daemons()) if d.stop()]
            return stopped + plane

    def reset(self) -> None:
        """Stop everything and delete the state folder."""
        self.down()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    @property
    def _wanted_file(self) -> Path:
        """The daemons the last ``up`` started or kept (without the operator, fewer)."""
        return self.state_dir / "run" / "wanted"

    def wanted(self) -> set[str]:
        """The daemons this plane runs when it is up: what the last ``up`` asked for, else all."""
        names = {d.name for d in self.daemons()}
        try:
            return names & set(self._wanted_file.read_text().split())
        except OSError:
            return names

    def status(self) -> dict[str, Any]:
        wanted = self.wanted()
        daemons = {d.name: d.pid for d in self.daemons() if d.name in wanted}
        status = {"state_dir": str(self.state_dir), "server": self.server, "kubeconfig": str(self.kubeconfig),
                  "daemons": daemons, "running": all(daemons.values()), "versions": self.versions(),
                  "operator_version": self.operator_version,
                  "without": sorted({d.name for d in self.daemons()} - wanted)}
        if "slurm-operator-webhook" in wanted and "slurm-operator-manager" not in wanted:
            status["operator_pod"] = f"{OPERATOR_NAMESPACE}/slurm-operator"  # the manager runs on the node
        if (self.state_dir / "node").is_dir():
            status["node"] = self.node().status()
        return status

    def versions(self) -> dict[str, Any]:
        """What the cache built (``versions.json`` beside ``bin/``), and as ``slurm-operator`` the module
        version of the operator this plane runs."""
        try:
            built = json.loads((self.bin_dir.parent / "versions.json").read_text())
        except (OSError, ValueError, SlinkyError):
            return {}
        return {**built, "slurm-operator": built.get("slurm-operators", {}).get(self.operator_version, "?")}

    @property
    def running(self) -> bool:
        wanted = self.wanted()
        return all(d.running for d in self.daemons() if d.name in wanted)

    def api(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for the admin kubeconfig."""
        return api_client(str(self.kubeconfig))

    # -- steps -------------------------------------------------------------------------------------
    def _write_files(self) -> None:
        for sub in ("run", "log", "etcd"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir / "etcd", 0o700)
        renewed = self.pki.ensure_ca()
        self.pki.ensure_service_account_keys()
        self.pki.ensure_cert("apiserver", "kube-apiserver", server=True, force=renewed,
                             hosts=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                                    "kubernetes.default.svc", SERVICE_CIDR.rsplit(".", 1)[0] + ".1"))
        self.pki.ensure_cert("webhook", "slurm-operator-webhook", server=True, force=renewed,
                             hosts=("127.0.0.1", "localhost"))
        self.pki.ensure_cert(KUBELET_CLIENT.file, KUBELET_CLIENT.user, organizations=KUBELET_CLIENT.groups,
                             force=renewed)
        for identity in CLIENTS:
            self.pki.ensure_cert(identity.file, identity.user, organizations=identity.groups, force=renewed)
            self.pki.kubeconfig(self._kubeconfig_for(identity), self.server, identity.file, CLUSTER_NAME)
        certs = self.webhook_tmpdir / "k8s-webhook-server" / "serving-certs"
        certs.mkdir(parents=True, exist_ok=True)
        for src, dst in (("webhook.crt", "tls.crt"), ("webhook.key", "tls.key")):
            data = self.pki.path(src).read_bytes()
            if not ((certs / dst).is_file() and (certs / dst).read_bytes() == data):
                write_secret(certs / dst, data, force=True)

    def _start(self, daemon: Daemon, ready: Callable[[], bool], started: list[Daemon]) -> None:
        if daemon.running:
            return
        daemon.start()
        started.append(daemon)
        daemon.wait_ready(ready, READY_TIMEOUT_S, 0.2)

    def _etcd_healthy(self) -> bool:
        return _http_ok(f"http://127.0.0.1:{self.ports.etcd_client}/health")

    def _apiserver_ready(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        ctx.load_cert_chain(str(self.pki.path("admin.crt")), str(self.pki.path("admin.key")))
        return _http_ok(f"{self.server}/readyz", ctx)

    def crd_documents(self) -> list[dict[str, Any]]:
        """The vendored Slinky CRDs, then those ``kube/crds.txt`` took from upstream modules."""
        files = [*crd_files(), *sorted((self.bin_dir.parent / "crds").glob("*.yaml"))]
        return [doc for f in files for doc in load_data_all(f.read_text()) if doc]

    def _install_crds(self, api: Any, log: Callable[[str], None]) -> None:
        # lazy: the kubernetes client is the optional [k8s] extra
        from kubernetes import client

        docs = self.crd_documents()
        apply_objects(docs, api, log=log)
        ext = client.ApiextensionsV1Api(api)
        deadline = time.monotonic() + READY_TIMEOUT_S
        for name in (d["metadata"]["name"] for d in docs):
            while not any(c.type == "Established" and c.status == "True"
                          for c in ext.read_custom_resource_definition(name).status.conditions or []):
                if time.monotonic() > deadline:
                    raise SlinkyError(f"CRD {name} not Established after {READY_TIMEOUT_S:.0f} s")
                time.sleep(0.2)

    def webhook_configurations(self) -> list[dict[str, Any]]:
        """The operator's own webhook configuration (its ``config/webhook/manifests.yaml`` at the version
        this plane runs), each webhook pointed at ``https://127.0.0.1:PORT/PATH`` with our CA."""
        source = self.bin_dir.parent / f"operator-{self.operator_version}" / "webhook-manifests.yaml"
        out = []
        for doc in load_data_all(source.read_text()):
            if not doc:
                continue
            suffix = "validating" if doc["kind"].startswith("Validating") else "mutating"
            doc["metadata"] = {"name": f"{WEBHOOK_CONFIG_NAME}-{suffix}"}
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{self.ports.webhook}{path}",
                                        "caBundle": self.pki.ca_bundle()}
            out.append(doc)
        return out

    def _register_webhook(self, api: Any, log: Callable[[str], None]) -> None:
        apply_objects(self.webhook_configurations(), api, log=log)

    def _unregister_webhook(self, api: Any, log: Callable[[str], None]) -> None:
        # lazy: the kubernetes client is the optional [k8s] extra
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        admission = client.AdmissionregistrationV1Api(api)
        for delete, suffix in ((admission.delete_validating_webhook_configuration, "validating"),
                               (admission.delete_mutating_webhook_configuration, "mutating")):
            try:
                delete(f"{WEBHOOK_CONFIG_NAME}-{suffix}")
                log(f"{WEBHOOK_CONFIG_NAME}-{suffix} removed (the webhook does not run on this plane)")
            except ApiException as exc:
                if exc.status != 404:
                    raise SlinkyError(f"cannot remove the webhook configuration {WEBHOOK_CONFIG_NAME}-{suffix}: "
                                      f"{exc.reason}") from None

    def _wait_default_service_account(self, api: Any) -> None:
        """kube-controller-manager's service-account controller has made ``default`` in ``default``
        (pods of every namespace need theirs; the first one shows the controller works)."""
        # lazy: the kubernetes client is the optional [k8s] extra
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        core = client.CoreV1Api(api)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                core.read_namespaced_service_account("default", "default")
                return
            except ApiException as exc:
                if exc.status != 404 or time.monotonic() > deadline:
                    raise SlinkyError(f"no default ServiceAccount from kube-controller-manager: {exc.reason}") \
                        from None
            time.sleep(0.2)


def _http_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False
