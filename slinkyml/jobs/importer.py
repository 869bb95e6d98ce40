"""Kubeflow and Volcano training jobs → slinkyml job specs (``slinkyml import``).

Pod → node: replicas become ``nodes``, limits per-node resources, the container pyxis's. What has
no Slurm meaning is one :class:`ImportWarning` per field, never dropped silently.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from slinkyml import kube
from slinkyml.errors import SpecError
from slinkyml.instances import InstanceType, get_instance_type
from slinkyml.jobs.spec import JobSpec

#: (apiVersion, kind) pairs this module reads.
SUPPORTED = (("kubeflow.org/v1", "PyTorchJob"), ("kubeflow.org/v2beta1", "MPIJob"),
             ("kubeflow.org/v1", "MPIJob"), ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
             ("batch.volcano.sh/v1alpha1", "Job"))
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
NEURON_DEVICE = "aws.amazon.com/neuron"
NEURON_CORE = "aws.amazon.com/neuroncore"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
#: NeuronCores per device when only ``aws.amazon.com/neuroncore`` is requested and the pod names no
#: known instance type (trn1: 2; trn2 has 8, from the instance data)
NEURON_CORES_PER_DEVICE = 2
#: node labels that name the instance type (Kubernetes' well-known label, its beta name, Karpenter's)
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type",
                        "karpenter.k8s.aws/instance-type")
_PYTHON = re.compile(r"^(?:.*/)?python(?:3(?:\.\d+)?)?$")
_TORCHRUN_VALUE_OPTS = {"--nnodes", "--nproc-per-node", "--nproc_per_node", "--rdzv-backend", "--rdzv_backend",
                        "--rdzv-endpoint", "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--rdzv-conf",
                        "--rdzv_conf", "--max-restarts", "--max_restarts", "--monitor-interval",
                        "--monitor_interval", "--start-method", "--start_method", "--role", "--log-dir",
                        "--log_dir", "-r", "--redirects", "-t", "--tee", "--local-ranks-filter",
                        "--local_ranks_filter", "--node-rank", "--node_rank", "--master-addr", "--master_addr",
                        "--master-port", "--master_port", "--local-addr", "--local_addr",
                        "--logs-specs", "--logs_specs", "--signals-to-handle", "--signals_to_handle"}
_MPIRUN_VALUE_OPTS = {"-np", "-n", "-c", "--np", "-N", "-npernode", "--npernode", "-bind-to", "--bind-to",
                      "-map-by", "--map-by", "-mca", "--mca", "-H", "-host", "--host", "-hostfile",
                      "--hostfile", "-ppn", "-rf", "--rankfile", "-wdir", "--wdir", "-output-filename",
                      "--output-filename", "-genv", "-env"}


#: the largest manifest file ``import`` reads: a Kubernetes object is at most 1.5 MiB (etcd's default
#: --max-request-bytes), so a few objects fit with room to spare; past it the file is refused unread
#: (a 50 MB one took 50 s and 259 MB to parse)
MAX_MANIFEST_BYTES = 8 << 20


class ManifestError(SpecError):
    """A manifest that cannot be imported; one line naming the file and field."""

    exit_code = 1


@dataclass(frozen=True)
class ImportWarning:
    """A manifest field with no Slurm equivalent (dropped, or an error with ``strict``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True)
class ImportOptions:
    """How cluster-specific names translate: claims to paths, queues to partitions/accounts."""

    #: PersistentVolumeClaim name → path on the cluster's shared filesystem.
    claim_paths: Mapping[str, str] = field(default_factory=dict)
    #: Where claims without an entry in ``claim_paths`` are mounted from (``ROOT/CLAIM``).
    shared_root: str = "/fsx"
    #: Kubernetes/Volcano queue → ``partition:NAME`` or ``account:NAME`` (bare NAME: partition).
    queue_map: Mapping[str, str] = field(default_factory=dict)
    #: Time limit when the manifest sets no deadline (``activeDeadlineSeconds``).
    default_time: str | None = None
    #: Run in the manifest's image (pyxis); False: on the nodes' own software (e.g. Slinky's slurmd image).
    container: bool = True
    strict: bool = False


@dataclass(frozen=True)
class ImportResult:
    """The job spec (validated), its plain data in field order, and what could not be mapped."""

    spec: JobSpec
    data: dict[str, Any]
    warnings: tuple[ImportWarning, ...]
    notes: tuple[str, ...]
    source: str

    def to_yaml(self) -> str:
        header = f"# Imported by `slinkyml import` from {self.source}\n"
        header += "".join(f"# note: {n}\n" for n in self.notes)
        header += "".join(f"# not mapped: {w}\n" for w in self.warnings)
        return header + yaml.safe_dump(self.data, sort_keys=False, default_flow_style=None, width=100)


def import_manifest(source: str | Path | Mapping[str, Any], options: ImportOptions | None = None,
                    name: str | None = None) -> ImportResult:
    """Read a PyTorchJob / MPIJob / TrainJob / Volcano Job (a path, YAML text or a dict) → job spec.

    ``name`` picks one job of several; bad manifests raise :class:`ManifestError`; ``strict`` makes
    every :class:`ImportWarning` an error.
    """
    options = options or ImportOptions()
    label, documents = _documents(source)
    jobs = [d for d in documents if isinstance(d, Mapping) and (d.get("apiVersion"), d.get("kind")) in SUPPORTED]
    if name is not None:
        jobs = [d for d in jobs if (d.get("metadata") or {}).get("name") == name]
    if not jobs:
        kinds = sorted({f"{d.get('apiVersion')} {d.get('kind')}" for d in documents if isinstance(d, Mapping)})
        what = f"no job named {name!r}" if name is not None else "no supported training job"
        raise ManifestError("", f"{label}: {what} (found: {', '.join(kinds) or 'nothing'}; supported: "
                            + ", ".join(f"{k} ({a})" for a, k in SUPPORTED) + ")")
    if len(jobs) > 1:
        names = ", ".join(str((d.get("metadata") or {}).get("name")) for d in jobs)
        raise ManifestError("", f"{label}: holds {len(jobs)} jobs ({names}); pick one with --name")
    manifest = jobs[0]
    builder = _Builder(label, options)
    try:
        data = _CONVERTERS[(manifest["apiVersion"], manifest["kind"])](builder, manifest)
    except _FieldError as exc:
        raise ManifestError("", f"{label}: {exc.path}: {exc.message}") from None
    if options.strict and builder.warnings:
        raise ManifestError("", f"{label}: --strict: {len(builder.warnings)} field(s) cannot be mapped: "
                            + "; ".join(map(str, builder.warnings)))
    try:
        spec = JobSpec.from_dict(data)
    except SpecError as exc:
        raise ManifestError("", f"{label}: the imported spec is not valid: {exc.one_line()}") from None
    return ImportResult(spec=spec, data=data, warnings=tuple(builder.warnings), notes=tuple(builder.notes),
                        source=label)


# -- reading -------------------------------------------------------------------------------------
def _documents(source: str | Path | Mapping[str, Any]) -> tuple[str, list[Any]]:
    if isinstance(source, Mapping):
        return "<manifest>", [source]
    text = str(source)
    label = "<text>"
    if isinstance(source, Path) or ("\n" not in text and text.endswith((".yaml", ".yml", ".json"))):
        label = str(source)
        try:
            with open(source, "rb") as fh:
                raw = fh.read(MAX_MANIFEST_BYTES + 1)
        except OSError as exc:
            raise ManifestError("", f"{label}: cannot read: {exc.strerror}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestError("", f"{label}: not UTF-8 text (byte {exc.start})") from None
    if len(text) > MAX_MANIFEST_BYTES:
        raise ManifestError("", f"{label}: larger than {MAX_MANIFEST_BYTES >> 20} MiB, the import limit (a "
                            "Kubernetes object is at most 1.5 MiB, etcd's default request limit)")
    try:
        return label, [d for d in yaml.safe_load_all(text) if d is not None]
    except RecursionError:
        raise ManifestError("", f"{label}: not a manifest: nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError("", f"{label}{where}: not valid YAML: {' '.join(str(problem).split())}") from None


class _FieldError(Exception):
    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path, self.message = path, message


@dataclass
class _Pod:
    """The one container of a pod template that runs the training program, and the pod around it."""

    path: str
    pod: Mapping[str, Any]
    container: Mapping[str, Any]
    container_path: str


class _Builder:
    """Collects the spec's fields and the warnings while one manifest is converted."""

    def __init__(self, label: str, options: ImportOptions):
        self.label = label
        self.options = options
        self.warnings: list[ImportWarning] = []
        self.notes: list[str] = []
        self.instance: InstanceType | None = None

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(ImportWarning(path, message))

    # -- generic pieces ---------------------------------------------------------------------------
    def mapping(self, value: Any, path: str, required: bool = False) -> Mapping[str, Any]:
        if value is None and not required:
            return {}
        if not isinstance(value, Mapping):
            raise _FieldError(path, "must be a mapping" if value is not None else "is required")
        return value

    def integer(self, value: Any, path: str, low: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise _FieldError(path, f"must be an integer ≥ {low}, got {value!r}")
        return value

    def pod(self, template: Any, path: str, container_name: str | None = None) -> _Pod:
        template = self.mapping(template, path, required=True)
        pod = self.mapping(template.get("spec"), f"{path}.spec", required=True)
        containers = pod.get("containers")
        if not isinstance(containers, list) or not containers or not all(isinstance(c, Mapping) for c in containers):
            raise _FieldError(f"{path}.spec.containers", "must be a non-empty list of containers")
        index = 0
        if container_name is not None:
            named = [i for i, c in enumerate(containers) if c.get("name") == container_name]
            index = named[0] if named else 0
        for i, other in enumerate(containers):
            if i != index:
                self.warn(f"{path}.spec.containers[{i}]", f"sidecar container {other.get('name')!r} is not run "
                          "(slinkyml runs one program per node)")
        selector = dict(self.mapping(pod.get("nodeSelector"), f"{path}.spec.nodeSelector"))
        for label in INSTANCE_TYPE_LABELS:
            if label in selector:
                self.instance_type(str(selector.pop(label)), f"{path}.spec.nodeSelector.{label}")
        for key, what in (("initContainers", "init containers"), ("affinity", "node/pod affinity"), ("tolerations", "tolerations"),
                          ("topologySpreadConstraints", "topology spread"), ("hostNetwork", "host networking"),
                          ("securityContext", "pod security context"), ("serviceAccountName", "service accounts"),
                          ("priorityClassName", "priority classes (use the job's qos)")):
            if pod.get(key):
                self.warn(f"{path}.spec.{key}", f"{what} have no Slurm equivalent here; dropped")
        for label in selector:
            self.warn(f"{path}.spec.nodeSelector.{label}", "node selectors have no Slurm equivalent here; dropped")
        return _Pod(path, pod, containers[index], f"{path}.spec.containers[{index}]")

    def instance_type(self, name: str, path: str) -> None:
        """A node selector's instance type: the spec's ``instance_type`` when the instance data knows it."""
        try:
            self.instance = get_instance_type(name)
        except SpecError:
            self.warn(path, f"instance type {name!r} is not in slinkyml's instance data; dropped")

    def resources(self, pod: _Pod) -> dict[str, Any]:
        """Pod resource limits (else requests) → per-node fields."""
        res = self.mapping(pod.container.get("resources"), f"{pod.container_path}.resources")
        limits = dict(self.mapping(res.get("requests"), f"{pod.container_path}.resources.requests"))
        limits.update(self.mapping(res.get("limits"), f"{pod.container_path}.resources.limits"))
        out: dict[str, Any] = {}
        where = f"{pod.container_path}.resources.limits"
        gpus = sum(_count(limits[k], f"{where}.{k}") for k in GPU_RESOURCES if k in limits)
        if gpus:
            out["gpus_per_node"] = gpus
        if NEURON_DEVICE in limits:
            out["neuron_devices_per_node"] = _count(limits[NEURON_DEVICE], f"{where}.{NEURON_DEVICE}")
        elif NEURON_CORE in limits:
            cores = _count(limits[NEURON_CORE], f"{where}.{NEURON_CORE}")
            accelerator = self.instance.accelerator if self.instance else None
            if accelerator is not None and accelerator.kind == "neuron":
                # ranks per device come from the instance data (trn2 runs 4 logical cores of 8)
                out["neuron_devices_per_node"] = max(1, math.ceil(cores / accelerator.cores_per_device))
            else:
                out["neuron_devices_per_node"] = max(1, math.ceil(cores / NEURON_CORES_PER_DEVICE))
                out["procs_per_node"] = cores
                self.notes.append(f"{where}.{NEURON_CORE}: {cores} cores read as trn1 devices (2 cores each); "
                                  "a nodeSelector naming the instance type decides it")
        if EFA_RESOURCE in limits and _count(limits[EFA_RESOURCE], f"{where}.{EFA_RESOURCE}"):
            out["network"] = "efa"
        if "cpu" in limits:
            out["cpus_per_task"] = max(1, math.ceil(_quantity(limits["cpu"], f"{where}.cpu")))
        if "memory" in limits:
            memory = _quantity(limits["memory"], f"{where}.memory")
            out["mem_per_node"] = f"{max(1, math.ceil(memory / 2**20))}M"
        for key in sorted(set(limits) - {*GPU_RESOURCES, NEURON_DEVICE, NEURON_CORE, EFA_RESOURCE, "cpu", "memory"}):
            self.warn(f"{where}.{key}", "resource has no Slurm mapping here; dropped")
        return out

    def environment(self, pod: _Pod) -> dict[str, str]:
        env: dict[str, str] = {}
        items = pod.container.get("env") or []
        if not isinstance(items, list):
            raise _FieldError(f"{pod.container_path}.env", "must be a list of {name, value}")
        for i, item in enumerate(items):
            path = f"{pod.container_path}.env[{i}]"
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                raise _FieldError(path, "must be a mapping with a name")
            if "valueFrom" in item:
                source = next(iter(self.mapping(item["valueFrom"], f"{path}.valueFrom")), "valueFrom")
                self.warn(f"{path}.valueFrom", f"{item['name']} comes from a {source}; set it in the job's "
                          "environment yourself (secrets do not belong in a job spec)")
                continue
            value = item.get("value", "")
            if isinstance(value, (Mapping, list)):
                raise _FieldError(f"{path}.value", "must be a string")
            env[item["name"]] = str(value)
        if pod.container.get("envFrom"):
            self.warn(f"{pod.container_path}.envFrom", "environment from ConfigMaps/Secrets is not imported")
        return env

    def container(self, pod: _Pod) -> dict[str, Any] | None:
        image = pod.container.get("image")
        if not isinstance(image, str) or not image.strip():
            raise _FieldError(f"{pod.container_path}.image", "is required (the program's container image)")
        container: dict[str, Any] = {"image": pyxis_image(image)}
        volumes = {v.get("name"): (i, v) for i, v in enumerate(pod.pod.get("volumes") or []) if isinstance(v, Mapping)}
        mounts = []
        for j, mount in enumerate(pod.container.get("volumeMounts") or []):
            path = f"{pod.container_path}.volumeMounts[{j}]"
            if not isinstance(mount, Mapping) or not isinstance(mount.get("mountPath"), str):
                raise _FieldError(path, "must be a mapping with name and mountPath")
            index, volume = volumes.get(mount.get("name"), (None, None))
            source = self.volume_source(volume, f"{pod.path}.spec.volumes[{index}]", path)
            if source is None:
                continue
            if mount.get("subPath"):
                source = f"{source.rstrip('/')}/{mount['subPath']}"
            flags = ":ro" if mount.get("readOnly") else ""
            mounts.append(f"{source}:{mount['mountPath']}{flags}" if source != "tmpfs" else f"tmpfs:{mount['mountPath']}")
        if mounts:
            container["mounts"] = mounts
        if isinstance(pod.container.get("workingDir"), str):
            container["workdir"] = pod.container["workingDir"]
        return container

    def volume_source(self, volume: Mapping[str, Any] | None, path: str, mount_path: str) -> str | None:
        if volume is None:
            self.warn(mount_path, "mounts a volume the pod does not define; dropped")
            return None
        if "persistentVolumeClaim" in volume:
            claim = self.mapping(volume["persistentVolumeClaim"], f"{path}.persistentVolumeClaim").get("claimName")
            return self.claim(str(claim))
        if "hostPath" in volume:
            return str(self.mapping(volume["hostPath"], f"{path}.hostPath").get("path"))
        if "emptyDir" in volume:
            medium = self.mapping(volume["emptyDir"], f"{path}.emptyDir").get("medium")
            if medium == "Memory":
                return "tmpfs"
            self.warn(f"{path}.emptyDir", "a node-local scratch dir: use the job's own directory or $TMPDIR; dropped")
            return None
        kind = next((k for k in volume if k != "name"), "unknown")
        self.warn(f"{path}.{kind}", f"{kind} volumes are not imported (put the files on the shared filesystem)")
        return None

    def claim(self, claim: str) -> str:
        if claim in self.options.claim_paths:
            return self.options.claim_paths[claim]
        path = f"{self.options.shared_root.rstrip('/')}/{claim}"
        self.notes.append(f"claim {claim!r} mounted from {path} (override with --claim-path {claim}=PATH)")
        return path

    def time_limit(self, seconds: Any, path: str) -> str | None:
        if seconds is None:
            return self.options.default_time
        seconds = self.integer(seconds, path, low=1)
        return _slurm_time(seconds)

    def queue(self, queue: Any, path: str) -> dict[str, str]:
        if not queue:
            return {}
        target = self.options.queue_map.get(str(queue))
        if target is None:
            if queue != "default":
                self.warn(path, f"queue {queue!r} has no --queue-map entry; the cluster's default partition is used")
            return {}
        kind, _, value = target.rpartition(":")
        kind = kind or "partition"
        if kind not in ("partition", "account", "qos"):
            raise _FieldError(path, f"--queue-map {queue}={target}: expected partition:NAME, account:NAME or qos:NAME")
        return {kind: value}

    def gang(self, min_available: Any, total: int, path: str) -> None:
        if min_available is None:
            return
        wanted = self.integer(min_available, path, low=0)
        if wanted < total:
            raise _FieldError(path, f"{wanted} of {total} pods: an elastic gang has no Slurm equivalent (a Slurm "
                              "allocation starts all its nodes together or none); set it to the replica total")
        self.notes.append("minAvailable: a Slurm allocation is gang-scheduled by construction")

    def run_policy(self, policy: Any, path: str, total: int) -> dict[str, Any]:
        policy = self.mapping(policy, path)
        out: dict[str, Any] = {}
        if policy.get("backoffLimit") is not None:
            out["requeue"] = {"max_restarts": min(1000, self.integer(policy["backoffLimit"], f"{path}.backoffLimit"))}
        limit = self.time_limit(policy.get("activeDeadlineSeconds"), f"{path}.activeDeadlineSeconds")
        if limit:
            out["time_limit"] = limit
        scheduling = self.mapping(policy.get("schedulingPolicy"), f"{path}.schedulingPolicy")
        self.gang(scheduling.get("minAvailable"), total, f"{path}.schedulingPolicy.minAvailable")
        out.update(self.queue(scheduling.get("queue"), f"{path}.schedulingPolicy.queue"))
        for key in ("priorityClass", "minResources", "scheduleTimeoutSeconds"):
            if scheduling.get(key):
                self.warn(f"{path}.schedulingPolicy.{key}", "no Slurm equivalent here; dropped")
        if policy.get("suspend"):
            self.warn(f"{path}.suspend", "a suspended job: submit it when you want it to run (or sbatch --hold)")
        return out

    def entry(self, pod: _Pod, style: str) -> dict[str, Any]:
        """The container's command line → launcher, entry and interpreter (``style``: torch or mpi)."""
        argv = _argv(pod.container, pod.container_path)
        if not argv:
            raise _FieldError(f"{pod.container_path}.command", "not set: the image's entrypoint cannot be read here; "
                              "give command/args in the manifest")
        return _parse_command(self, argv, style, f"{pod.container_path}.command")


def pyxis_image(image: str) -> str:
    """A Kubernetes image reference → pyxis/enroot's ``[REGISTRY#]IMAGE[:TAG]`` (the registry host,
    when there is one, is separated by ``#``: ``nvcr.io/nvidia/pytorch:24.01`` → ``nvcr.io#nvidia/...``)."""
    head, sep, rest = image.partition("/")
    if head == "docker.io":  # enroot's default registry
        return rest
    if sep and ("." in head or ":" in head or head == "localhost"):
        return f"{head}#{rest}"
    return image


def _argv(container: Mapping[str, Any], path: str) -> list[str]:
    argv: list[str] = []
    for key in ("command", "args"):
        value = container.get(key) or []
        if not isinstance(value, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool)
                                                  for a in value):
            raise _FieldError(f"{path}.{key}", "must be a list of strings")
        argv += [str(a) for a in value]
    return argv


def _parse_command(b: _Builder, argv: list[str], style: str, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if Path(argv[0]).name in ("bash", "sh") and len(argv) >= 3 and argv[1] in ("-c", "-lc", "-ec"):
        inner = _shell_program(argv[2])
        if inner is None:
            b.warn(path, "a shell command line: run as is with the srun launcher (its own torchrun/mpirun, if any, "
                   "is not translated)")
            return {"launcher": "srun", "entry": {"script": argv[0], "args": argv[1:]}}
        if inner[1]:
            b.notes.append(f"{path}: only its `{inner[0][0]}` line is imported; the rest of the shell script "
                           "(ssh daemons, host files) is Kubernetes scaffolding that srun replaces")
        argv = inner[0] + argv[3:]
    words = list(argv)
    if _PYTHON.match(words[0]) and words[1:3] in (["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"]):
        out["python"] = words[0]
        words = ["torchrun", *words[3:]]
    if Path(words[0]).name == "torchrun":
        return {**out, **_torchrun(b, words[1:], path)}
    if Path(words[0]).name in ("mpirun", "mpiexec", "mpiexec.hydra"):
        return {**out, **_mpirun(b, words[1:], path)}
    if Path(words[0]).name == "deepspeed":
        b.warn(path, "DeepSpeed's own launcher (it ssh-es to a hostfile): imported as torchrun with the same "
               "script; set launcher: deepspeed and a deepspeed_config to use DeepSpeed's launcher on Slurm")
        words = ["torchrun", *[w for w in words[1:] if not w.startswith(("--num_gpus", "--num_nodes", "--hostfile"))]]
        return _torchrun(b, words[1:], path)
    if _PYTHON.match(words[0]):
        program = _python_entry(words[1:], path)
        if style == "mpi":
            return {"python": words[0], "launcher": "srun", "srun_args": ["--mpi=pmix"], **program}
        # the operator starts one process per pod with RANK/WORLD_SIZE/MASTER_ADDR set: torchrun with
        # one process per node gives the same environment
        return {"python": words[0], "launcher": "torchrun", "procs_per_node": 1, **program}
    if style == "torch":
        b.warn(path, f"{words[0]!r} is not python/torchrun: run as is with the srun launcher, one task per node")
    result = {"launcher": "srun", "entry": {"script": words[0], "args": words[1:]}}
    if style == "mpi":
        result["srun_args"] = ["--mpi=pmix"]
    return result


_LAUNCH_WORDS = ("mpirun", "mpiexec", "mpiexec.hydra", "torchrun")


def _shell_program(script: str) -> tuple[list[str], bool] | None:
    """The program a ``sh -c`` script runs: the whole line when it is one plain command, else its
    one ``mpirun``/``mpiexec``/``torchrun`` command (the flag says the script held more)."""
    if not re.search(r"[|&;<>`$(){}\n]", script.strip()):
        return shlex.split(script), False
    commands = [c.strip() for c in re.split(r"&&|\|\||[;\n]", script) if c.strip()]
    launches = []
    for command in commands:
        try:
            words = shlex.split(command)
        except ValueError:
            continue
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]  # VAR=value prefixes
        if words and Path(words[0]).name in _LAUNCH_WORDS:
            launches.append(words)
    return (launches[0], True) if len(launches) == 1 else None


def _runs_mpi(argv: list[str]) -> bool:
    return bool(re.search(r"(^|[\s/;])mpi(run|exec)(\.hydra)?\s", " ".join(argv) + " "))


def _python_entry(words: list[str], path: str) -> dict[str, Any]:
    """``[-u] script.py ARGS`` / ``-m module ARGS`` → entry (``-u`` → PYTHONUNBUFFERED, the rest of the
    interpreter's flags are dropped)."""
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-m":
        i += 1
    if i >= len(words):
        raise _FieldError(path, "python without a script or -m module")
    if words[i] == "-m":
        if i + 1 >= len(words):
            raise _FieldError(path, "python -m without a module")
        entry: dict[str, Any] = {"module": words[i + 1], "args": words[i + 2:]}
    else:
        entry = {"script": words[i], "args": words[i + 1:]}
    return {"entry": entry, **({"env": {"PYTHONUNBUFFERED": "1"}} if "-u" in words[:i] else {})}


def _torchrun(b: _Builder, words: list[str], path: str) -> dict[str, Any]:
    out: dict[str, Any] = {"launcher": "torchrun"}
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] not in ("-m", "--module"):
        word = words[i]
        key, has_value, value = word.partition("=")
        if key in _TORCHRUN_VALUE_OPTS and not has_value:
            value = words[i + 1] if i + 1 < len(words) else ""
            i += 1
        if key in ("--nproc-per-node", "--nproc_per_node") and value.isdigit():
            out["procs_per_node"] = int(value)
        elif key in ("--nproc-per-node", "--nproc_per_node"):
            pass  # auto/gpu/cpu: decided from the GPUs below
        elif key in ("--nnodes", "--standalone", "--node-rank", "--node_rank", "--rdzv-backend", "--rdzv_backend",
                     "--rdzv-endpoint", "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--master-addr",
                     "--master_addr", "--master-port", "--master_port", "--no-python", "--no_python"):
            pass  # slinkyml's launch line sets the rendezvous from the allocation
        else:
            b.warn(f"{path}: {word}", "torchrun option not carried over (slinkyml sets its own launch flags)")
        i += 1
    if i >= len(words):
        raise _FieldError(path, "torchrun without a script or -m module")
    if words[i] in ("-m", "--module"):
        if i + 1 >= len(words):
            raise _FieldError(path, "torchrun -m without a module")
        out["entry"] = {"module": words[i + 1], "args": words[i + 2:]}
    else:
        out["entry"] = {"script": words[i], "args": words[i + 1:]}
    return out


def _mpirun(b: _Builder, words: list[str], path: str) -> dict[str, Any]:
    """``mpirun [opts] PROGRAM`` → ``srun --mpi=pmix PROGRAM``: placement comes from the allocation,
    ``-x NAME=VALUE`` / ``-genv NAME VALUE`` become env, ``-mca KEY VALUE`` becomes ``OMPI_MCA_KEY``."""
    out: dict[str, Any] = {"launcher": "srun", "srun_args": ["--mpi=pmix"]}
    env: dict[str, str] = {}
    i = 0
    while i < len(words) and words[i].startswith("-"):
        word = words[i]
        rest = words[i + 1:]
        if word == "-x" and rest:
            name, has_value, setting = rest[0].partition("=")
            if has_value:  # -x NAME alone exports the caller's value: srun does so already
                env[name] = setting
            i += 2
        elif word in ("-mca", "--mca", "-genv", "-env") and len(rest) >= 2:
            env[f"OMPI_MCA_{rest[0]}" if "mca" in word else rest[0]] = rest[1]
            i += 3
        elif word in ("-np", "-n", "-c", "--np") and rest:
            out["_np"] = int(rest[0]) if rest[0].isdigit() else None
            i += 2
        elif word in ("--allow-run-as-root", "--oversubscribe", "--tag-output", "--timestamp-output",
                      "-bind-to", "--bind-to", "-map-by", "--map-by", "-H", "-host", "--host", "-hostfile",
                      "--hostfile", "-N", "-npernode", "--npernode", "-ppn"):
            i += 2 if word in _MPIRUN_VALUE_OPTS and rest else 1  # placement comes from the Slurm allocation
        else:
            b.warn(f"{path}: {word}", "mpirun option not carried over to srun")
            i += 2 if word in _MPIRUN_VALUE_OPTS and rest else 1
    if i >= len(words):
        raise _FieldError(path, "mpirun without a program")
    program = words[i:]
    if _PYTHON.match(program[0]):
        out["python"] = program[0]
        python = _python_entry(program[1:], path)
        out["entry"] = python["entry"]
        env.update(python.get("env", {}))
    else:
        out["entry"] = {"script": program[0], "args": program[1:]}
    if env:
        out["env"] = env
    return out


# -- kinds ---------------------------------------------------------------------------------------
def _base(manifest: Mapping[str, Any]) -> dict[str, Any]:
    meta = manifest.get("metadata") or {}
    name = str(meta.get("name") or meta.get("generateName") or "imported").rstrip("-")
    return {"name": re.sub(r"[^A-Za-z0-9_.+-]", "-", name)[:200]}


def _replicas(b: _Builder, specs: Any, path: str, allowed: Sequence[str]) -> dict[str, tuple[int, Mapping]]:
    specs = b.mapping(specs, path, required=True)
    out = {}
    for role, replica in specs.items():
        if role not in allowed:
            raise _FieldError(f"{path}.{role}", f"unknown replica type (expected {', '.join(allowed)})")
        replica = b.mapping(replica, f"{path}.{role}", required=True)
        count = b.integer(replica.get("replicas", 1), f"{path}.{role}.replicas")
        out[role] = (count, replica)
    return out


def _assemble(b: _Builder, data: dict[str, Any], pod: _Pod, style: str,
              launcher: _Pod | None = None) -> tuple[dict[str, Any], bool, int | None]:
    """Command (from ``launcher`` when an MPI launcher pod runs it, else from ``pod``), resources, env
    and container of ``pod`` into ``data``. Also returns whether the command line fixed the
    processes per node (``--nproc-per-node N``, a plain ``python``) and mpirun's ``-np``."""
    data.update(b.entry(launcher or pod, style))
    procs = data.pop("procs_per_node", None)
    np = data.pop("_np", None)
    data.update(b.resources(pod))
    if procs is not None and "procs_per_node" not in data:
        data["procs_per_node"] = procs
    if data.get("neuron_devices_per_node") and data.get("launcher") == "torchrun":
        data["launcher"] = "neuron"
    env = {**b.environment(pod), **data.pop("env", {})}
    if env:
        data["env"] = env
    container = b.container(pod)
    if b.options.container:
        data["container"] = container
    elif container is not None:
        b.notes.append(f"image {container['image']} not used (--no-container): the nodes' own software runs it")
    return data, procs is not None, np


def _finish(b: _Builder, data: dict[str, Any]) -> dict[str, Any]:
    """Per-task CPUs for multi-task nodes, the time-limit note, the instance type, the field order."""
    if b.instance is not None:
        data["instance_type"] = b.instance.name
    tasks = data.get("tasks_per_node") or (data.get("gpus_per_node") or 1 if data.get("launcher") == "srun" else 1)
    if "cpus_per_task" in data and tasks > 1:  # a pod's CPU limit is per node; its tasks share it
        data["cpus_per_task"] = max(1, data["cpus_per_task"] // tasks)
    if "time_limit" not in data:
        b.notes.append("no activeDeadlineSeconds: time_limit is slinkyml's default 01:00:00 (set it with --time)")
    return _ordered(data)


def _pytorchjob(b: _Builder, manifest: Mapping[str, Any]) -> dict[str, Any]:
    spec = b.mapping(manifest.get("spec"), "spec", required=True)
    replicas = _replicas(b, spec.get("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs", ("Master", "Worker"))
    total = sum(count for count, _ in replicas.values())
    if total < 1:
        raise _FieldError("spec.pytorchReplicaSpecs", "no replicas")
    data = _base(manifest)
    data["nodes"] = total
    data.update(b.run_policy(spec.get("runPolicy"), "spec.runPolicy", total))
    pods = {role: b.pod(replica.get("template"), f"spec.pytorchReplicaSpecs.{role}.template", "pytorch")
            for role, (_, replica) in replicas.items()}
    _same_program(b, pods, "spec.pytorchReplicaSpecs")
    if spec.get("elasticPolicy"):
        b.warn("spec.elasticPolicy", "elastic (min/max replicas) training: imported with a fixed node count")
    data, explicit, _ = _assemble(b, data, pods.get("Master") or pods["Worker"], "torch")
    nproc = spec.get("nprocPerNode", (spec.get("elasticPolicy") or {}).get("nProcPerNode"))
    _nproc(b, data, nproc, "spec.nprocPerNode", explicit)
    return _finish(b, data)


def _nproc(b: _Builder, data: dict[str, Any], nproc: Any, path: str, explicit: bool) -> None:
    """``nprocPerNode`` → ``procs_per_node``, unless the command line already fixed it."""
    if nproc is None or explicit:
        return
    if isinstance(nproc, int) and not isinstance(nproc, bool) or str(nproc).isdigit():
        data["procs_per_node"] = int(nproc)
    elif nproc == "cpu":
        data["procs_per_node"] = data.get("cpus_per_task", 1)
    elif nproc in ("auto", "gpu"):
        data.pop("procs_per_node", None)  # one per GPU (or 1 on CPU), slinkyml's default
    else:
        raise _FieldError(path, f"expected an integer, auto, cpu or gpu, got {nproc!r}")


def _same_program(b: _Builder, pods: Mapping[str, _Pod], path: str) -> None:
    """Master and workers must run one program: Slurm runs the same launch line on every node."""
    programs = {role: repr((p.container.get("image"), _argv(p.container, p.container_path)))
                for role, p in pods.items()}
    if len(set(programs.values())) > 1:
        b.warn(path, f"{', '.join(programs)} run different images or commands; the first one's runs on every node")


def _mpijob(b: _Builder, manifest: Mapping[str, Any]) -> dict[str, Any]:
    spec = b.mapping(manifest.get("spec"), "spec", required=True)
    replicas = _replicas(b, spec.get("mpiReplicaSpecs"), "spec.mpiReplicaSpecs", ("Launcher", "Worker"))
    if "Worker" not in replicas or replicas["Worker"][0] < 1:
        raise _FieldError("spec.mpiReplicaSpecs.Worker", "at least one worker is required")
    workers = replicas["Worker"][0]
    slots = b.integer(spec.get("slotsPerWorker", 1), "spec.slotsPerWorker", low=1)
    data = _base(manifest)
    data["nodes"] = workers
    data["tasks_per_node"] = slots
    data.update(b.run_policy(spec.get("runPolicy"), "spec.runPolicy", workers))
    if spec.get("mpiImplementation") not in (None, "OpenMPI"):
        b.notes.append(f"mpiImplementation {spec['mpiImplementation']}: srun --mpi=pmix needs the image's MPI "
                       "built with PMIx support")
    worker = b.pod(replicas["Worker"][1].get("template"), "spec.mpiReplicaSpecs.Worker.template")
    launcher = None
    if "Launcher" in replicas:
        launcher = b.pod(replicas["Launcher"][1].get("template"), "spec.mpiReplicaSpecs.Launcher.template")
        if spec.get("runLauncherAsWorker"):
            data["nodes"] = workers + 1
    data, _, np = _assemble(b, data, worker, "mpi", launcher)
    if np is not None and np != data["nodes"] * slots:
        b.warn("spec.mpiReplicaSpecs.Launcher: -np", f"mpirun -np {np} but {data['nodes']} workers × {slots} slots "
               f"= {data['nodes'] * slots}; srun runs one rank per slot")
    return _finish(b, data)


def _trainjob(b: _Builder, manifest: Mapping[str, Any]) -> dict[str, Any]:
    spec = b.mapping(manifest.get("spec"), "spec", required=True)
    runtime = b.mapping(spec.get("runtimeRef"), "spec.runtimeRef", required=True)
    trainer = b.mapping(spec.get("trainer"), "spec.trainer", required=True)
    runtime_name = str(runtime.get("name", ""))
    style = "mpi" if "mpi" in runtime_name else "torch"
    b.notes.append(f"runtime {runtime_name!r}: its template is not read; image and command come from spec.trainer")
    data = _base(manifest)
    data["nodes"] = b.integer(trainer.get("numNodes", 1), "spec.trainer.numNodes", low=1)
    limit = b.time_limit(spec.get("activeDeadlineSeconds"), "spec.activeDeadlineSeconds")
    if limit:
        data["time_limit"] = limit
    container = {k: trainer[k] for k in ("image", "command", "args", "env") if k in trainer}
    per_node = b.mapping(trainer.get("resourcesPerNode"), "spec.trainer.resourcesPerNode")
    container["resources"] = per_node
    pod = _Pod("spec.trainer", {}, container, "spec.trainer")
    data, explicit, _ = _assemble(b, data, pod, style)
    if style == "mpi":
        data["tasks_per_node"] = b.integer(trainer.get("numProcPerNode", 1), "spec.trainer.numProcPerNode", low=1)
    else:
        _nproc(b, data, trainer.get("numProcPerNode"), "spec.trainer.numProcPerNode", explicit)
    for key in ("initializer", "podTemplateOverrides", "podSpecOverrides", "runtimePatches"):
        if spec.get(key):
            b.warn(f"spec.{key}", "not imported (no Slurm equivalent here)")
    if spec.get("suspend"):
        b.warn("spec.suspend", "a suspended job: submit it when you want it to run (or sbatch --hold)")
    return _finish(b, data)


def _volcano(b: _Builder, manifest: Mapping[str, Any]) -> dict[str, Any]:
    spec = b.mapping(manifest.get("spec"), "spec", required=True)
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, Mapping) for t in tasks):
        raise _FieldError("spec.tasks", "must be a non-empty list of tasks")
    plugins = b.mapping(spec.get("plugins"), "spec.plugins")
    pods = []
    launcher_task = None
    for i, task in enumerate(tasks):
        count = b.integer(task.get("replicas", 1), f"spec.tasks[{i}].replicas")
        pod = b.pod(task.get("template"), f"spec.tasks[{i}].template")
        argv = _argv(pod.container, pod.container_path)
        if _runs_mpi(argv):
            launcher_task = (i, pod)
            continue
        if task.get("minAvailable") is not None:
            b.gang(task["minAvailable"], count, f"spec.tasks[{i}].minAvailable")
        pods.append((i, count, pod))
    if not pods:
        raise _FieldError("spec.tasks", "no worker tasks (only an mpirun launcher)")
    total = sum(count for _, count, _ in pods)
    counted = total + (1 if launcher_task else 0)
    if spec.get("minAvailable") is not None:
        b.gang(spec["minAvailable"], counted, "spec.minAvailable")
    first = pods[0][2]
    programs = {repr((p.container.get("image"), _argv(p.container, p.container_path))) for _, _, p in pods}
    if len(programs) > 1 and not launcher_task:
        b.warn("spec.tasks", "tasks run different images or commands; the first task's program runs on every node")
    data = _base(manifest)
    data["nodes"] = total
    if spec.get("maxRetry") is not None:
        data["requeue"] = {"max_restarts": min(1000, b.integer(spec["maxRetry"], "spec.maxRetry"))}
    deadline = first.pod.get("activeDeadlineSeconds")
    limit = b.time_limit(deadline, f"{first.path}.spec.activeDeadlineSeconds")
    if limit:
        data["time_limit"] = limit
    data.update(b.queue(spec.get("queue"), "spec.queue"))
    if spec.get("priorityClassName"):
        b.warn("spec.priorityClassName", "priority classes have no equivalent here (use the job's qos)")
    if spec.get("policies"):
        b.notes.append("spec.policies: slinkyml requeues on preemption and node failure (requeue.max_restarts)")
    for key in ("volumes", "networkTopology", "minSuccess", "runningEstimate"):
        if spec.get(key):
            b.warn(f"spec.{key}", "not imported (no Slurm equivalent here)")
    for plugin in plugins:
        if plugin not in ("ssh", "svc", "env", "pytorch", "mpi"):
            b.warn(f"spec.plugins.{plugin}", "Volcano plugin not imported")
    if launcher_task is None:
        data, _, _ = _assemble(b, data, first, "mpi" if "mpi" in plugins else "torch")
        return _finish(b, data)
    data, _, np = _assemble(b, data, first, "mpi", launcher_task[1])
    if np is not None and np % total == 0 and np // total > 1:
        data["tasks_per_node"] = np // total
    return _finish(b, data)


_CONVERTERS = {("kubeflow.org/v1", "PyTorchJob"): _pytorchjob, ("kubeflow.org/v2beta1", "MPIJob"): _mpijob,
               ("kubeflow.org/v1", "MPIJob"): _mpijob, ("trainer.kubeflow.org/v1alpha1", "TrainJob"): _trainjob,
               ("batch.volcano.sh/v1alpha1", "Job"): _volcano}

_FIELD_ORDER = ("name", "instance_type", "nodes", "gpus_per_node", "neuron_devices_per_node", "tasks_per_node", "procs_per_node",
                "cpus_per_task", "mem_per_node", "time_limit", "partition", "account", "qos", "launcher",
                "network", "python", "srun_args", "container", "env", "entry", "requeue")


def _ordered(data: dict[str, Any]) -> dict[str, Any]:
    """The spec's fields in the order people read a job (shape, time, launcher, program)."""
    data.pop("_np", None)
    ordered = {k: data[k] for k in _FIELD_ORDER if k in data}
    ordered.update({k: v for k, v in data.items() if k not in ordered})
    if ordered.get("python") == "python3":
        del ordered["python"]  # the spec's default
    return ordered


# -- quantities ----------------------------------------------------------------------------------
def _quantity(value: Any, path: str) -> float:
    """A Kubernetes resource quantity (``500m``, ``1.5Gi``, ``4``) as a number."""
    number = kube.quantity(value)
    if number is None or number < 0:
        raise _FieldError(path, f"not a resource quantity: {value!r}")
    return float(number)


def _count(value: Any, path: str) -> int:
    number = _quantity(value, path)
    if number != int(number):  # negative quantities are refused by _quantity
        raise _FieldError(path, f"must be a whole number of devices, got {value!r}")
    return int(number)


def _slurm_time(seconds: int) -> str:
    """Seconds → ``[D-]HH:MM:SS``, rounded up to the minute (Slurm's time limits are minutes)."""
    minutes = math.ceil(seconds / 60)
    days, minutes = divmod(minutes, 1440)
    hours, minutes = divmod(minutes, 60)
    text = f"{hours:02d}:{minutes:02d}:00"
    return f"{days}-{text}" if days else text
