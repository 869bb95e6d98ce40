"""``slinkyml dev up|down|status|reset|env|node readdress``: the local multi-node Slurm cluster;
``slinkyml dev kube up|down|status|reset|env``: the local Kubernetes control plane with the slurm-operator."""

from __future__ import annotations

import argparse
import json

from slinkyml.errors import SlinkyError


def register(subparsers: argparse._SubParsersAction) -> None:
    dev = subparsers.add_parser("dev",
                                description="A local Slurm cluster (munge, MariaDB, slurmdbd, slurmctld, "
                                "N slurmd in their own network namespaces, slurmrestd) for the demo, "
                                "notebooks and tests. Needs root.")
    sub = dev.add_subparsers(dest="dev_command", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser, nodes: int | None, nodes_help: str) -> None:
        p.add_argument("--state-dir", help="all state lives here (default: $SLINKYML_STATE_DIR, "
                       "/var/lib/slinkyml/dev for root, else ~/.local/state/slinkyml/dev; with --docker "
                       "$SLINKYML_DOCKER_STATE_DIR, .../dev-docker)")
        p.add_argument("--nodes", type=int, default=nodes, help=nodes_help)
        p.add_argument("--docker", action="store_true",
                       help="the cluster as Docker containers (Slurm 26.05, the pods' images) through "
                       "testcontainers: no root or network namespaces, only a Docker engine (docs/docker-cluster.md); "
                       "implied for a state dir a Docker cluster's `up` made")

    up = sub.add_parser("up", help="start the cluster (idempotent)")
    common(up, 4, "number of compute nodes (default 4)")
    # None = "not given": the spec's default, or the SLINKYML_DEV_* environment (see slinkyml.dev.slurm.config).
    up.add_argument("--cpus-per-node", type=int, help="CPUs per node (default 4)")
    up.add_argument("--memory-mb", type=int, help="RealMemory per node in MB (default 4096)")
    up.add_argument("--slurmctld-port", type=int, help="default 6817 (slurmd, slurmdbd, slurmrestd follow)")
    up.add_argument("--slurmdbd-port", type=int, help="default 6819")
    up.add_argument("--slurmrestd-port", type=int, help="default 6820 (JWT on 127.0.0.1)")
    up.add_argument("--mariadb-port", type=int, help="default 13306 (127.0.0.1)")
    up.add_argument("--subnet", help="bridge network for the nodes (default 10.213.0.0/24)")
    up.add_argument("--bridge", help="the nodes' bridge (default slkml0); a second cluster needs its own")
    up.add_argument("--node-prefix", help="node names PREFIX1.. and their network namespaces slkml-PREFIX1.. "
                    "(default n); a second cluster needs its own")
    up.add_argument("--spank-plugin", action="append", metavar="'PATH [ARG ...]'",
                    help="load this SPANK plugin (plugstack.conf, `required`), e.g. pyxis's spank_pyxis.so; "
                    "repeatable (default: $SLINKYML_DEV_SPANK_PLUGINS, entries separated by ';')")
    up.add_argument("--slurm-version", metavar="{system,26.05}",
                    help="system (default: the machine's Slurm) or 26.05: Debian sid's Slurm, unpacked once "
                    "into /var/lib/slinkyml/roots (debootstrap); give it its own --state-dir, bridge, "
                    "node prefix, subnet and ports (default: $SLINKYML_DEV_SLURM_VERSION, or as at the last up)")
    up.add_argument("--emulated-nodes", type=int, metavar="N",
                    help="N nodes shaped like production GPU nodes (default p5.48xlarge: 192 CPUs, 2 TiB, "
                    "gres gpu:h100:8, features p5.48xlarge,h100,efa), each a real slurmd in its own network "
                    "namespace declaring that hardware (SlurmdParameters=config_overrides), up to 1024; give "
                    "the cluster its own state dir and a subnet that fits (e.g. a /21)")
    up.add_argument("--emulated-gres", metavar="gpu:[TYPE:]N", help="GRES of each emulated node (default gpu:h100:8)")
    up.add_argument("--emulated-features", metavar="F1,F2", help="features of each emulated node")
    up.add_argument("--preempt-grace", type=int, metavar="SECONDS",
                    help="real Slurm preemption: jobs of partition 'urgent' requeue those of 'preemptible' "
                    "(and debug, short) on the nodes they need, after SECONDS of GraceTime (default: none)")
    up.set_defaults(handler=_up)
    for name, handler, text in (("down", _down, "stop every daemon (state is kept)"),
                                ("status", _status, "show daemons and node states"),
                                ("reset", _reset, "stop and delete all state (database included)"),
                                ("env", _env, "print `export SLURM_CONF=...` for this cluster")):
        p = sub.add_parser(name, help=text)
        common(p, None, "number of compute nodes (default: as at the last `up`, saved in the state dir)")
        if name == "status":
            p.add_argument("--json", action="store_true")
        p.set_defaults(handler=handler)
    node = sub.add_parser("node", help="act on one node as Kubernetes acts on a slurmd pod")
    node_sub = node.add_subparsers(dest="node_command", metavar="ACTION", required=True)
    readdress = node_sub.add_parser(
        "readdress", help="bring NODE back at a new address, as a rescheduled slurmd pod comes back",
        description="Every process of the node ends (its slurmd, the job steps and tasks on it), its network "
        "namespace gets a new address, slurm.conf, /etc/hosts and slurmctld (scontrol update NodeAddr=) learn it, "
        "and a new slurmd registers from there. Later `up`s keep the address (saved in the state dir).")
    readdress.add_argument("node", metavar="NODE")
    readdress.add_argument("--address", help="the new address, on the cluster's subnet (default: the lowest free one)")
    common(readdress, None, "number of compute nodes (default: as at the last `up`)")
    readdress.set_defaults(handler=_readdress)
    _register_kube(sub)


def _readdress(args: argparse.Namespace) -> int:
    if _docker(args):
        raise SlinkyError("dev node readdress: the netns cluster's only (a Docker cluster's node keeps its address)")
    old, new = _cluster(args).readdress(args.node, args.address)
    print(f"node {args.node}: {old} → {new} (slurm.conf, /etc/hosts, slurmctld); a new slurmd registered from "
          f"{new}; what ran on the node ended with its old slurmd")
    return 0


def _register_kube(sub: argparse._SubParsersAction) -> None:
    kube = sub.add_parser("kube", help="a local Kubernetes control plane with the slurm-operator (loopback)",
                          description="etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the "
                          "slurm-operator's manager and webhook, built from Go modules (`make kube`), on "
                          "127.0.0.1 with generated certificates; the Slinky, Karpenter and MariaDB CRDs "
                          "installed. With `up --kubelet`, a real node too (containerd, runc, the bridge CNI, "
                          "the kubelet), so pods run. Needs root.")
    ksub = kube.add_subparsers(dest="kube_command", metavar="ACTION", required=True)
    for name, handler, text in (("up", _kube_up, "start the control plane (idempotent)"),
                                ("down", _kube_down, "stop every process (state is kept)"),
                                ("status", _kube_status, "show processes, versions and the server"),
                                ("reset", _kube_reset, "stop and delete all state (etcd's data included)"),
                                ("env", _kube_env, "print `export KUBECONFIG=...` for this control plane"),
                                ("charts", _kube_charts, "prepare the slurm-operator's Helm charts (its Go module's "
                                 "helm/ folders, at the version this plane runs) and print their folder: "
                                 "install.sh's CHARTS")):
        p = ksub.add_parser(name, help=text)
        p.add_argument("--state-dir", help="all state lives here (default: $SLINKYML_KUBE_STATE_DIR, "
                       "/var/lib/slinkyml/kube-dev for root, else ~/.local/state/slinkyml/kube-dev)")
        if name == "status":
            p.add_argument("--json", action="store_true")
        if name == "up":
            p.add_argument("--kubelet", action="store_true",
                           help="also start a node: Debian's containerd and runc, the bridge CNI and the kubelet, "
                           "and wait until it is Ready (name, bridge and pod subnet: $SLINKYML_KUBE_NODE_NAME, "
                           "$SLINKYML_KUBE_BRIDGE, $SLINKYML_KUBE_POD_SUBNET; default slinkyml-dev-node, slkk0, "
                           "10.244.0.0/24)")
            p.add_argument("--no-operator", dest="operator", action="store_false",
                           help="without the slurm-operator's manager and webhook")
            p.add_argument("--operator-version", default="v1.2.1", metavar="VERSION",
                           help="the slurm-operator to run: v1.2.1 (default, the newest release) or f2ed3fc (the "
                           "revision of the CRDs slinkyml renders for); one of another version running is replaced")
            p.add_argument("--slurm-images", metavar="RELEASE", choices=("26.05",),
                           help="with --kubelet: build the slurmctld, slurmd, login, slurmdbd and slurmrestd images of this Slurm "
                           "release from its Debian root (as `dev up --slurm-version` unpacks it) and import them")
            p.add_argument("--slurm-pods", metavar="CLUSTER_YAML",
                           help="with --kubelet and the operator: `cluster apply` this cluster spec (slurm_version "
                           "26.05, its images built and imported) and let the slurm-operator make its pods on the node, "
                           "fitted to it as `demo --kubernetes` does (the Controller asks 1 CPU, the first node set's "
                           "slurmd pods request nothing and share the node); the training stack and a shared folder "
                           "are mounted in the slurmd and login pods; waits until every slurmd pod is idle in sinfo")
        p.set_defaults(handler=handler)


def _kube(args: argparse.Namespace):
    from slinkyml.dev.kubernetes.kube import KubeControlPlane

    return KubeControlPlane(args.state_dir)


def _kube_up(args: argparse.Namespace) -> int:
    import time

    from slinkyml.cluster.spec import load_spec
    from slinkyml.slurm import roots

    spec = load_spec(args.slurm_pods) if args.slurm_pods else None  # a bad spec stops before anything starts
    if spec is not None and not args.kubelet:
        raise SlinkyError("--slurm-pods: needs --kubelet (the pods run on the node)")
    if spec is not None and not args.operator:
        raise SlinkyError("--slurm-pods: needs the operator (it makes the pods), not --no-operator")
    if spec is not None and spec.slurm_version not in roots.RELEASES:  # the releases images can be built for
        raise SlinkyError(f"{args.slurm_pods}: slurm_version: --slurm-pods runs {', '.join(roots.RELEASES)} only (its "
                          f"images are built from a Debian root of that Slurm), got {spec.slurm_version}")
    start = time.monotonic()
    plane = _kube(args).up(kubelet=args.kubelet, operator=args.operator, operator_version=args.operator_version,
                           slurm_images=args.slurm_images or (spec.slurm_version if spec else None))
    versions = plane.versions()
    print(f"local Kubernetes {versions.get('kubernetes', '?')} control plane up in {time.monotonic() - start:.1f} s "
          f"at {plane.server} (slurm-operator {versions.get('slurm-operator', '?')}), state in {plane.state_dir}")
    if args.kubelet or args.slurm_images:
        node = plane.node().settings
        print(f"  node {node.name} Ready at {node.node_ip} (bridge {node.bridge}, pods in {node.subnet})")
    if spec is not None:
        # lazy: the k8s extra, only with --slurm-pods
        from slinkyml.dev.kubernetes.operator_cluster import up_here

        here = up_here(plane, spec, log=lambda line: print(f"  {line}", flush=True))
        print(f"  Slurm cluster {spec.name} made by the slurm-operator (namespace {spec.namespace}): slurmd pods "
              f"{', '.join(p.metadata.name for p in here.workers)} idle in sinfo; login pod {here.login} "
              f"(kubectl exec -n {spec.namespace} {here.login} -- sinfo); jobs' shared folder {here.shared}; "
              f"{time.monotonic() - start:.1f} s in all")
    print(f"  eval $(slinkyml dev kube env --state-dir {plane.state_dir})")
    return 0


def _kube_down(args: argparse.Namespace) -> int:
    stopped = _kube(args).down()
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def _kube_reset(args: argparse.Namespace) -> int:
    plane = _kube(args)
    plane.reset()
    print(f"removed {plane.state_dir}")
    return 0


def _kube_env(args: argparse.Namespace) -> int:
    print(f"export KUBECONFIG={_kube(args).kubeconfig}")
    return 0


def _kube_charts(args: argparse.Namespace) -> int:
    from slinkyml.dev.kubernetes.helm import Helm, helm_binary, prepare_charts

    print(prepare_charts(Helm(helm_binary(), _kube(args))))
    return 0


def _kube_status(args: argparse.Namespace) -> int:
    status = _kube(args).status()
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        v = status["versions"]
        print(f"Kubernetes {v.get('kubernetes', '?')}, etcd {v.get('etcd', '?')}, slurm-operator "
              f"{v.get('slurm-operator', '?')} at {status['server']}, state in {status['state_dir']}")
        for name, pid in {**status["daemons"], **status.get("node", {}).get("daemons", {})}.items():
            print(f"  {name:<24} {'running, pid ' + str(pid) if pid else 'stopped'}")
        for name in status["without"]:
            where = (f"a pod of the node (Deployment {status['operator_pod']})" if status.get("operator_pod")
                     and name == "slurm-operator-manager" else "not run on this plane (`up --no-operator`)")
            print(f"  {name:<24} {where}")
    return 0 if status["running"] else 1


def _cluster(args: argparse.Namespace, **options):
    if _docker(args):
        from slinkyml.dev.docker.cluster import DockerCluster

        return DockerCluster(args.state_dir, nodes=args.nodes)
    from slinkyml.dev import LocalCluster

    return LocalCluster(args.state_dir, nodes=args.nodes, **options)


def _docker(args: argparse.Namespace) -> bool:
    """``--docker``, or a state dir given that a Docker cluster's ``up`` made."""
    from pathlib import Path

    from slinkyml.dev.docker.config import MARKER

    return bool(args.docker) or bool(args.state_dir and (Path(args.state_dir) / MARKER).is_file())


def _docker_only(args: argparse.Namespace) -> None:
    """The netns cluster's options a Docker cluster does not take: one line, before anything starts."""
    given = [flag for flag, value in (("--slurmctld-port", args.slurmctld_port), ("--slurmdbd-port", args.slurmdbd_port),
                                      ("--mariadb-port", args.mariadb_port), ("--subnet", args.subnet),
                                      ("--bridge", args.bridge), ("--node-prefix", args.node_prefix),
                                      ("--spank-plugin", args.spank_plugin), ("--emulated-nodes", args.emulated_nodes),
                                      ("--preempt-grace", args.preempt_grace)) if value]
    if args.slurm_version not in (None, "26.05"):
        given.append(f"--slurm-version {args.slurm_version}")
    if given:
        raise SlinkyError(f"--docker: {', '.join(given)} not taken (the Docker cluster runs Slurm 26.05 from the "
                          "pods' images; its network, bridge and port: $SLINKYML_DOCKER_SUBNET, _BRIDGE, _RESTD_PORT)")


def _up_docker(args: argparse.Namespace) -> int:
    import time

    from slinkyml.dev.docker.cluster import DockerCluster

    _docker_only(args)
    start = time.monotonic()
    cluster = DockerCluster(args.state_dir, nodes=args.nodes, cpus_per_node=args.cpus_per_node,
                            memory_mb_per_node=args.memory_mb, restd_port=args.slurmrestd_port).up()
    spec = cluster.spec
    print(f"local Slurm {cluster.version} cluster '{spec.cluster_name}' up in Docker in "
          f"{time.monotonic() - start:.1f} s: {spec.nodes} nodes ({', '.join(spec.node_names)}), "
          f"containers {spec.name}-*, state in {spec.state_dir}")
    print(f"  eval $(slinkyml dev env --state-dir {spec.state_dir})")
    print(f"  slurmrestd: {spec.restd_url} (JWT); commands run in {spec.container('login')}; shared folders: "
          f"{', '.join(spec.shares)}")
    return 0


def _up(args: argparse.Namespace) -> int:
    import time

    if _docker(args):
        return _up_docker(args)
    start = time.monotonic()
    shape = {}
    if args.emulated_nodes:
        from slinkyml.dev.slurm.config import EMULATED_NODE

        args.nodes = args.emulated_nodes
        features = tuple(f for f in args.emulated_features.split(",") if f) if args.emulated_features else None
        shape = {**EMULATED_NODE, **{k: v for k, v in (("node_gres", args.emulated_gres),
                                                         ("node_features", features)) if v is not None}}
    cluster = _cluster(args, **{**shape, **{k: v for k, v in (("cpus_per_node", args.cpus_per_node),
                                                               ("memory_mb_per_node", args.memory_mb)) if v}},
                       slurmctld_port=args.slurmctld_port, slurmdbd_port=args.slurmdbd_port,
                       slurmrestd_port=args.slurmrestd_port, mariadb_port=args.mariadb_port,
                       subnet=args.subnet, bridge=args.bridge, node_prefix=args.node_prefix,
                       spank_plugins=tuple(args.spank_plugin) if args.spank_plugin else None,
                       slurm_version=args.slurm_version, preempt_grace_s=args.preempt_grace)
    cluster.up()
    spec = cluster.spec
    print(f"local Slurm {cluster.version} cluster '{spec.cluster_name}' up in {time.monotonic() - start:.1f} s: "
          f"{spec.nodes} nodes ({_names(spec)}), state in {spec.state_dir}")
    print(f"  eval $(slinkyml dev env --state-dir {spec.state_dir})")
    unix = "" if cluster.version.restd_refuses_root else f"unix:{spec.restd_socket} (local auth), "
    print(f"  slurmrestd: {unix}{spec.restd_url} (JWT)")
    if cluster.cgroup_note:
        print(f"  {cluster.cgroup_note}")
    return 0


def _names(spec) -> str:
    names = spec.node_names
    return ", ".join(names) if len(names) <= 8 else f"{names[0]} … {names[-1]}"


def _down(args: argparse.Namespace) -> int:
    stopped = _cluster(args).down()
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def _reset(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    cluster.reset()
    print(f"removed {cluster.spec.state_dir}")
    return 0


def _env(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    print(f"export SLURM_CONF={cluster.spec.slurm_conf}")
    if getattr(cluster.spec, "slurm_version", None) != "system":  # its release's sbatch, srun... before the machine's
        print(f'export PATH={cluster.spec.bin_dir}:"$PATH"')
    return 0


def _status(args: argparse.Namespace) -> int:
    status = _cluster(args).status()
    if "containers" in status:  # the Docker cluster's
        return _status_docker(args, status)
    if args.json:
        out = dict(status)
        out["daemons"] = {d.name: d.pid for d in status["daemons"]}
        print(json.dumps(out, indent=2))
    else:
        print(f"Slurm {status['version']}, state in {status['state_dir']}")
        for d in status["daemons"]:
            print(f"  {d.name:<16} {'running, pid ' + str(d.pid) if d.running else 'stopped'}")
        for node, state in status["nodes"].items():
            print(f"  node {node:<11} {state}")
    return 0 if status["running"] else 1


def _status_docker(args: argparse.Namespace, status: dict) -> int:
    if args.json:
        print(json.dumps({**status, "containers": {c.name: c.state for c in status["containers"]}}, indent=2))
    else:
        engine = " (engine started by this cluster)" if status["engine_started_here"] else ""
        print(f"Slurm {status['version']} in Docker at {status['docker_host']}{engine}, state in {status['state_dir']}")
        for c in status["containers"]:
            print(f"  {c.name:<28} {c.state}")
        for node, state in status["nodes"].items():
            print(f"  node {node:<11} {state}")
    return 0 if status["running"] else 1
