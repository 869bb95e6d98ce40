"""The training job spec: one description of a run, rendered to sbatch or launched via submitit.

Frozen and validated on construction; field checks come from ``data/schemas/job.schema.json``
(through :mod:`slinkyml.specload`), cross-field checks are here, errors name the field path.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from slinkyml import specload
from slinkyml.errors import SpecError
from slinkyml.jobs import params
from slinkyml.jobs.params import flag, param
from slinkyml.slurm.protocol import DEFAULT_REQUEUE_ON, REQUEUE_CAUSES

if TYPE_CHECKING:  # loaded by JobSpec.instance: a spec without an instance type never reads the presets
    from slinkyml.instances import InstanceType

#: Ranks per Neuron device when the spec names no instance type (trn1: 2 NeuronCores per device;
#: with ``instance_type`` the instance data decides: trn2.48xlarge runs 4 per device, 64 per node).
NEURON_CORES_PER_DEVICE = 2
#: set while :meth:`JobSpec.from_dict` builds the objects of a document the schema has passed whole: their own
#: field checks (for the Python API's direct construction) would check the same values again, and load a
#: generated validator each (~3 ms of a command's start)
_CHECKED: ContextVar[bool] = ContextVar("slinkyml_spec_checked", default=False)
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?$", re.ASCII)
#: the schema's patterns and messages that several parameters share
_ONE_LINE = r"^[^\n]+$"
_MODULE = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
_SLURM_NAME, _NOT_A_NAME = "^[A-Za-z0-9_][A-Za-z0-9_.+-]*$", "not a valid Slurm name: {value}"
_DEPENDENCY = (r"^(after|afterany|afterok|afternotok|aftercorr|afterburstbuffer|singleton)"
               r"(:[0-9]+(_[0-9]+)?(\+[0-9]+)?)*$")
_NOT_A_DEPENDENCY = "expected e.g. afterok:1234, got {value}"
_NOT_AN_SRUN_OPTION = "expected an srun option like --mpi=pmix, got {value}"
#: the stop signals a job may name (each also as SIGNAME)
SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "URG")


@dataclass(frozen=True)
class Entry:
    """What each training process runs: a Python module or a script, plus arguments (literal)."""

    module: str | None = param(None, pattern=_MODULE, error="not a Python module name: {value}")
    script: str | None = param(None, minLength=1, pattern=_ONE_LINE, error="must be a path on one line")
    args: tuple[str, ...] = param((), accepts=["array"], items={"type": ["string", "number"]})

    def __post_init__(self) -> None:
        if not _CHECKED.get():
            specload.check_fields(self, "job", definition="entry", path="entry")
        if (self.module is None) == (self.script is None):
            raise SpecError("entry", "give exactly one of 'module' or 'script'")
        object.__setattr__(self, "args", tuple(str(arg) for arg in self.args))

    @property
    def is_python(self) -> bool:
        """Modules and ``*.py`` scripts run under the job's interpreter; other scripts run as is."""
        return self.module is not None or str(self.script).endswith(".py")


@dataclass(frozen=True)
class Container:
    """A pyxis/enroot container for the tasks (``srun --container-image/--container-mounts``)."""

    image: str = param(minLength=1, pattern=r"^[^\n]*\S[^\n]*$", error="must be a non-empty image reference on one line",
                       cli=flag("--container", metavar="IMAGE", help="pyxis/enroot image for the tasks"))
    mounts: tuple[str, ...] = param((), accepts=["array"], items={
        "type": "string", "pattern": "^[^,]*[^,\\s][^,]*$", "x-error": "one SRC:DST[:FLAGS] per entry, no commas"},
        cli=flag("--container-mounts", metavar="SRC:DST[,...]", help="pyxis mounts, comma-separated", each="comma-list"))
    workdir: str | None = param(None)

    def __post_init__(self) -> None:
        if not _CHECKED.get():
            specload.check_fields(self, "job", definition="container", path="container")
        mounts = tuple(self.mounts)
        for i, mount in enumerate(mounts):
            # pyxis refuses anything else at srun time, i.e. only once the job has its nodes
            source, _, rest = mount.partition(":")
            target = rest.partition(":")[0] if ":" in mount else source
            if not source.startswith(("/", ".")) and source not in ("tmpfs", "umount"):
                raise SpecError(f"container.mounts[{i}]", "the source must be an absolute path, a ./relative "
                                f"path, tmpfs or umount (pyxis), got {source!r}")
            if not target.startswith(("/", ".")):
                raise SpecError(f"container.mounts[{i}]", "the target must be an absolute or ./relative path "
                                f"(pyxis), got {target!r}")
        object.__setattr__(self, "mounts", mounts)


@dataclass(frozen=True)
class RequeuePolicy:
    """How a run survives preemption, lost nodes and its time limit: signal ahead of the end,
    checkpoint, requeue up to a limit. ``on`` says which causes of an ending requeue (their rules:
    slinkyml/data/run_causes.json): ``time_limit`` (only a run that checkpointed since it started),
    ``preemption``, ``node_failure`` by default; ``oom``, ``user_error`` when listed; ``any_failure``
    all of them. A cancelled job never requeues."""

    signal: str = param("USR2", enum=[*SIGNALS, *(f"SIG{name}" for name in SIGNALS)])
    grace_seconds: int = param(60, minimum=0, maximum=65535)
    max_restarts: int = param(3, minimum=0, maximum=1000,
                              cli=flag("--max-restarts", metavar="R", help="requeues after preemption (3)"))
    on: tuple[str, ...] = param(DEFAULT_REQUEUE_ON, "which endings requeue the job (slinkyml/data/run_causes.json); "
                                "default: time_limit (only after a checkpoint), preemption, node_failure",
                                accepts=["array"], items={"type": "string", "enum": list(REQUEUE_CAUSES)})

    def __post_init__(self) -> None:
        if not _CHECKED.get():
            specload.check_fields(self, "job", definition="requeue", path="requeue")
        object.__setattr__(self, "signal", self.signal.removeprefix("SIG"))
        object.__setattr__(self, "on", tuple(dict.fromkeys((self.on,) if isinstance(self.on, str) else self.on)))


@dataclass(frozen=True)
class JobSpec:
    """A training job. Only ``name`` and ``entry`` are required."""

    name: str = param(description="Job name (sbatch --job-name)", minLength=1, maxLength=200, pattern=_ONE_LINE,
                      error="must be a single line",
                      cli=flag("-J", "--job-name", help="default: the script's or module's name"))
    entry: Entry = param(description="What each process runs: module or script, plus args", required=True)
    nodes: int = param(1, "Nodes (sbatch --nodes)", minimum=1, maximum=100000,
                       cli=flag("-N", "--nodes", help="nodes (1)", default=True))
    gpus_per_node: int = param(0, minimum=0, maximum=64,
                               cli=flag("--gpus-per-node", metavar="G", help="GPUs per node (0)", default=True))
    neuron_devices_per_node: int = param(0, "Trainium devices per node", minimum=0, maximum=64)
    tasks_per_node: int | None = param(
        None, "Slurm tasks per node (default: one launcher per node)", minimum=1, maximum=1024,
        cli=flag("--ntasks-per-node", metavar="T", help="Slurm tasks per node (default: what the launcher needs)"))
    procs_per_node: int | None = param(
        None, "Processes the launcher starts per node (default: one per GPU/NeuronCore)", minimum=1, maximum=1024,
        cli=flag("--nproc-per-node", metavar="P", help="processes per node (default: one per GPU, else 1)"))
    cpus_per_task: int = param(1, minimum=1, maximum=4096,
                               cli=flag("-c", "--cpus-per-task", metavar="C", default=True))
    mem_per_node: str | None = param(None, "Memory per node: 8G, 4096M, or megabytes",
                                     accepts=["string", "integer", "null"], pattern="^[0-9]+[KMGT]?$", minimum=1,
                                     error="expected e.g. 8G or 4096M, got {value}",
                                     cli=flag("--mem", metavar="SIZE", help="memory per node (e.g. 16G)"))
    time_limit: str = param("01:00:00", "[D-]HH:MM:SS, MM, ... or minutes", accepts=["string", "integer"],
                            pattern="^(?:([0-9]+)-)?([0-9]+)(?::([0-9]{1,2}))?(?::([0-9]{1,2}))?$", minimum=1,
                            error="expected [D-]HH:MM:SS or minutes, got {value}",
                            cli=flag("-t", "--time", metavar="TIME", default=True,
                                     help="time limit, [D-]HH:MM:SS or minutes (1:00:00)"))
    partition: str | None = param(None, pattern=_SLURM_NAME, error=_NOT_A_NAME, cli=flag("-p", "--partition"))
    account: str | None = param(None, pattern=_SLURM_NAME, error=_NOT_A_NAME, cli=flag("-A", "--account"))
    qos: str | None = param(None, pattern=_SLURM_NAME, error=_NOT_A_NAME, cli=flag("-q", "--qos"))
    exclusive: bool = param(False, cli=flag("--exclusive"))
    nodelist: str | None = param(None, pattern=r"^[A-Za-z0-9_.,\[\]-]+$", error="not a Slurm node list: {value}",
                                 cli=flag("-w", "--nodelist"))
    launcher: str = param("torchrun", enum=["torchrun", "deepspeed", "neuron", "srun"],
                          cli=flag("--launcher", help="torchrun (default), deepspeed, neuron or srun", default=True))
    deepspeed_via: str = param("torchrun", "deepspeed launcher: start ranks with torchrun or DeepSpeed's own launcher",
                               enum=["torchrun", "deepspeed"])
    container: Container | None = param(None, "pyxis/enroot container")
    env: Mapping[str, str] = param(
        description="Environment variables for the tasks", factory=dict, accepts=["object"],
        propertyNames={"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                       "x-error": "not a valid environment variable name"},
        additionalProperties={"type": ["string", "number", "boolean"]},
        cli=flag("--env", metavar="K=V", help="environment (repeatable)", each="key=value"))
    network: str = param("tcp", enum=["efa", "ib", "tcp"], cli=flag("--network", help="tcp (default), efa or ib"))
    checkpoint_dir: str | None = param(None, "Checkpoint folder", minLength=1, pattern=_ONE_LINE,
                                       error="must be a path on one line", cli=flag("--checkpoint-dir"))
    requeue: RequeuePolicy = param(factory=RequeuePolicy, accepts=["object", "null"])
    log_dir: str = param("logs", "Log folder", minLength=1, pattern=_ONE_LINE, error="must be a path on one line",
                         cli=flag("--log-dir", help="where the job writes its logs (./logs)", default=True))
    dependencies: tuple[str, ...] = param((), accepts=["string", "array"], pattern=_DEPENDENCY,
                                          items={"type": "string", "pattern": _DEPENDENCY, "x-error": _NOT_A_DEPENDENCY},
                                          error=_NOT_A_DEPENDENCY,
                                          cli=flag("-d", "--dependency", metavar="DEP", each="append",
                                                   help="e.g. afterok:1234 (repeatable)"))
    deepspeed_config: Mapping[str, Any] | str | None = param(
        None, "DeepSpeed config (mapping) or path to a JSON file; default: planned", accepts=["object", "string", "null"])
    #: None: derived from the job id and restart, the first free one
    rdzv_port: int | None = param(None, "torchrun rendezvous port (default: derived from the job id and restart, the "
                                  "first free one)", minimum=1, maximum=65535)
    #: None: the submitting interpreter (interpreter()); a script rendered alone: python3
    python: str | None = param(
        None, "Interpreter on the nodes (default: the one that submits, sys.executable; python3 in a script rendered "
        "without submitting)", minLength=1, pattern=_ONE_LINE, error="must be a path on one line",
        cli=flag("--python", help="the job's interpreter (default: the one running slinkyml, sys.executable)"))
    neuron_precompile: bool = param(True)
    neuron_compile_steps: int = param(5, minimum=1, maximum=1000)
    neuron_compile_dir: str | None = param(None, "Neuron compile cache folder", minLength=1, pattern=_ONE_LINE,
                                           error="must be a path on one line")
    instance_type: str | None = param(None, "EC2 instance type the job runs on, e.g. trn2.48xlarge (ranks per Neuron "
                                      "device, device counts)", minLength=1)
    library_versions: Mapping[str, str] = param(factory=dict, accepts=["object"],
                                                additionalProperties={"type": ["string", "number"]})
    srun_args: tuple[str, ...] = param((), accepts=["string", "array"], pattern="^-",
                                       items={"type": "string", "pattern": "^-", "x-error": _NOT_AN_SRUN_OPTION},
                                       error=_NOT_AN_SRUN_OPTION)

    def __post_init__(self) -> None:
        if not isinstance(self.entry, Entry):
            raise SpecError("entry", "is required (module: or script:, plus args:)")
        if self.requeue is None:
            object.__setattr__(self, "requeue", RequeuePolicy())
        if not isinstance(self.requeue, RequeuePolicy):
            raise SpecError("requeue", "must be a mapping (signal, grace_seconds, max_restarts)")
        for name in ("dependencies", "srun_args"):  # one string is a list of one
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, (getattr(self, name),))
        if not _CHECKED.get():
            specload.check_fields(self, "job")
        if self.gpus_per_node and self.neuron_devices_per_node:
            raise SpecError("neuron_devices_per_node", "cannot be combined with gpus_per_node")
        if time_limit_seconds(self.time_limit) is None:
            raise SpecError("time_limit", f"expected [D-]HH:MM:SS (hours 0-23 after a day, minutes and seconds "
                            f"0-59) or minutes, at most {MAX_TIME_LIMIT_MIN} minutes, got {self.time_limit!r}")
        if self.mem_per_node and mem_mb(self.mem_per_node) > MAX_MEM_MB:
            raise SpecError("mem_per_node", f"at most {MAX_MEM_MB} MB (Slurm's 63-bit memory field), got "
                            f"{self.mem_per_node!r}")
        if self.launcher in ("torchrun", "deepspeed", "neuron") and not self.entry.is_python:
            raise SpecError("entry.script", f"the {self.launcher} launcher runs Python: give a .py "
                            "script or a module (or use launcher: srun)")
        if self.launcher == "neuron" and not self.neuron_devices_per_node:
            raise SpecError("neuron_devices_per_node", "the neuron launcher needs ≥ 1 device per node")
        if self.instance_type is not None:
            itype = self.instance  # raises on an unknown name, with a suggestion
            devices = itype.accelerator_count if itype else 0
            for name in ("gpus_per_node", "neuron_devices_per_node"):
                asked = getattr(self, name)
                if asked and asked > devices:
                    raise SpecError(name, f"{asked} is more than {self.instance_type} has ({devices})")
        if self.uses_deepspeed_launcher:
            # DeepSpeed's launcher runs on the batch node and starts every rank as an srun task of
            # its own: the allocation must hold one Slurm task per rank, and the ranks run the
            # batch node's interpreter (it puts its sys.executable on the srun line).
            if self.container is not None:
                raise SpecError("container", "deepspeed_via: deepspeed starts the ranks with the batch "
                                "node's interpreter outside any container; use deepspeed_via: torchrun")
            if self.tasks_per_node is not None and self.tasks_per_node != self.effective_procs_per_node:
                raise SpecError("tasks_per_node", "with deepspeed_via: deepspeed every rank is a Slurm task: "
                                f"leave it unset or equal to procs_per_node ({self.effective_procs_per_node})")
        object.__setattr__(self, "env", MappingProxyType(_str_mapping(self.env)))
        object.__setattr__(self, "library_versions", MappingProxyType(_str_mapping(self.library_versions)))
        if isinstance(self.deepspeed_config, Mapping):
            object.__setattr__(self, "deepspeed_config", MappingProxyType(dict(self.deepspeed_config)))
        object.__setattr__(self, "dependencies", tuple(self.dependencies))
        object.__setattr__(self, "srun_args", tuple(self.srun_args))

    # -- derived values -----------------------------------------------------------------------
    @property
    def uses_deepspeed_launcher(self) -> bool:
        """DeepSpeed's own launcher (``deepspeed_via: deepspeed``): it srun-starts one task per rank."""
        return self.launcher == "deepspeed" and self.deepspeed_via == "deepspeed"

    @property
    def effective_tasks_per_node(self) -> int:
        """Slurm tasks per node: one launcher per node, or one task per rank for plain srun and for
        DeepSpeed's launcher (whose ``srun -n <world>`` needs that many tasks in the allocation;
        ``cpus_per_task`` is then per rank)."""
        if self.tasks_per_node is not None:
            return self.tasks_per_node
        if self.launcher == "srun":
            return self.gpus_per_node or 1
        if self.uses_deepspeed_launcher:
            return self.effective_procs_per_node
        return 1

    @property
    def instance(self) -> InstanceType | None:
        """The instance type's data (``instance_type``), or None when the spec names none."""
        if self.instance_type is None:
            return None
        from slinkyml.instances import get_instance_type  # lazy: its dataclasses cost every start ~3 ms

        return get_instance_type(self.instance_type)

    @property
    def effective_procs_per_node(self) -> int:
        """Processes the launcher starts per node (one per GPU / logical NeuronCore; 1 on CPU)."""
        if self.procs_per_node is not None:
            return self.procs_per_node
        if self.launcher == "neuron":
            itype = self.instance
            per_device = (itype.accelerator.ranks_per_device if itype and itype.accelerator
                          else NEURON_CORES_PER_DEVICE)
            return self.neuron_devices_per_node * per_device
        return self.gpus_per_node or 1

    @property
    def world_size(self) -> int:
        if self.launcher == "srun":
            return self.nodes * self.effective_tasks_per_node
        return self.nodes * self.effective_procs_per_node

    @property
    def time_limit_seconds(self) -> int:
        return time_limit_seconds(self.time_limit) or 0

    def replace(self, **changes: Any) -> JobSpec:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (round-trips through ``from_dict``)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                value = {k: (list(v) if isinstance(v, tuple) else v)
                         for k, v in dataclasses.asdict(value).items()}
            elif isinstance(value, Mapping):
                value = dict(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    # -- loading --------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        """From plain data (a parsed YAML document): every problem the schema finds at once, then the
        checks across fields. Spec objects (``Entry``...) may stand in for their mappings."""
        if isinstance(data, Mapping):
            data = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else v
                    for k, v in data.items()}
        specload.check_or_raise(data, "job")
        data = dict(data)
        checked = _CHECKED.set(True)  # the whole document passed: the objects need not check their fields again
        try:
            data["entry"] = Entry(**data["entry"])
            if data.get("container") is not None:
                data["container"] = Container(**data["container"])
            if "requeue" in data:
                data["requeue"] = RequeuePolicy(**(data["requeue"] or {}))
            return cls(**data)
        finally:
            _CHECKED.reset(checked)

    @classmethod
    def from_yaml(cls, source: str | Path) -> JobSpec:
        """Load from a YAML file path or YAML text; errors name the file and line of each field."""
        text = str(source)
        if isinstance(source, Path) or ("\n" not in text and text.endswith((".yaml", ".yml"))):
            document = specload.load(source)
        else:
            document = specload.parse_yaml(text)
        return document.build(lambda data: cls.from_dict({} if data is None else data))


def job_schema() -> dict[str, Any]:
    """The published job schema, from the fields above (``make schema`` writes it to data/schemas/)."""
    return params.schema(JobSpec, title="slinkyml job spec",
                         description="A training job for `slinkyml sbatch render|submit|check` (slinkyml.jobs.JobSpec).")


# -- helpers -------------------------------------------------------------------------------------
#: the interpreter of a script rendered with no submission (``sbatch render``): the nodes' own
NODE_PYTHON = "python3"


def interpreter(spec: JobSpec) -> tuple[JobSpec, str]:
    """The spec as submitted, with its interpreter, and where that came from: the one the spec names, else
    the one submitting (``sys.executable``, as submitit does: its venv has what the job imports)."""
    if spec.python is not None:
        return spec, "named by the job spec"
    # from plain data, not replace(): the frozen mappings would send the field check down jsonschema's slow path
    return (JobSpec.from_dict({**spec.to_dict(), "python": sys.executable}),
            "the interpreter running slinkyml (set python: to name another)")


#: Slurm keeps a time limit in minutes in a uint32 whose two top values are NO_VAL and INFINITE
MAX_TIME_LIMIT_MIN = 0xFFFFFFFD
#: Slurm keeps memory in MB in a uint64 whose top bit marks "per CPU" (and NO_VAL64/INFINITE64 below it)
MAX_MEM_MB = 2**63 - 3


def time_limit_seconds(text: str | int) -> int | None:
    """Slurm time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS → seconds. The first field
    is unbounded (``90:00`` is 90 minutes) but the ones after it are clock fields (``1:99:99`` is
    refused); ``None`` for a zero, malformed or larger-than-Slurm-keeps limit."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        secs = text * 60
    else:
        match = _TIME.match(str(text).strip())
        if not match:
            return None
        days, a, b, c = match.groups()
        if days is not None:  # D-HH[:MM[:SS]]
            if int(a) > 23 or int(b or 0) > 59 or int(c or 0) > 59:
                return None
            secs = int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
        elif c is not None:  # HH:MM:SS
            if int(b) > 59 or int(c) > 59:
                return None
            secs = int(a) * 3600 + int(b) * 60 + int(c)
        elif b is not None:  # MM:SS
            if int(b) > 59:
                return None
            secs = int(a) * 60 + int(b)
        else:  # MM
            secs = int(a) * 60
    return secs if 0 < secs and -(-secs // 60) <= MAX_TIME_LIMIT_MIN else None


def mem_mb(text: str) -> int:
    """``mem_per_node`` (already schema-checked: digits and an optional K/M/G/T) → MiB."""
    match = re.fullmatch(r"([0-9]+)([KMGT]?)", text)
    assert match
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[match.group(2)]
    return int(int(match.group(1)) * scale)


def _str_mapping(value: Mapping[str, Any]) -> dict[str, str]:
    """``env``-style values as the shell sees them (the schema allows numbers and booleans)."""
    return {str(key): ("1" if item else "0") if isinstance(item, bool) else str(item)
            for key, item in value.items()}
