"""The training job spec: one description of a run, rendered to sbatch or launched via submitit.

``JobSpec`` is frozen and validated on construction, so a renderer never sees a half-checked
value. It loads from YAML/dicts (``JobSpec.from_yaml``/``from_dict``); every user mistake raises
:class:`~slinkyml.errors.SpecError` naming the field path (``requeue.max_restarts: must be ≥ 0``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from slinkyml.errors import SpecError
from slinkyml.instances import InstanceType, get_instance_type

LAUNCHERS = ("torchrun", "deepspeed", "neuron", "srun")
NETWORKS = ("efa", "ib", "tcp")
DEEPSPEED_VIA = ("torchrun", "deepspeed")
#: Signals a job may ask for ahead of preemption/time limit (``--signal``).
SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "URG")
#: Ranks per Neuron device when the spec names no instance type (trn1: 2 NeuronCores per device;
#: with ``instance_type`` the instance data decides: trn2.48xlarge runs 4 per device, 64 per node).
NEURON_CORES_PER_DEVICE = 2
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?$")
_MEM = re.compile(r"^\d+[KMGT]?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_DEPENDENCY = re.compile(r"^(after|afterany|afterok|afternotok|aftercorr|afterburstbuffer|singleton)"
                         r"(:\d+(_\d+)?(\+\d+)?)*$")
_SLURM_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True)
class Entry:
    """What each training process runs: a Python module or a script, plus arguments (literal)."""

    module: str | None = None
    script: str | None = None
    args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.module is None) == (self.script is None):
            raise SpecError("entry", "give exactly one of 'module' or 'script'")
        if self.module is not None and not _MODULE.match(self.module):
            raise SpecError("entry.module", f"not a Python module name: {self.module!r}")
        if self.script is not None and (not self.script or "\n" in self.script or "\0" in self.script):
            raise SpecError("entry.script", "must be a non-empty path on one line")
        object.__setattr__(self, "args", _str_tuple("entry.args", self.args))

    @property
    def is_python(self) -> bool:
        """Modules and ``*.py`` scripts run under the job's interpreter; other scripts run as is."""
        return self.module is not None or str(self.script).endswith(".py")


@dataclass(frozen=True)
class Container:
    """A pyxis/enroot container for the tasks (``srun --container-image/--container-mounts``)."""

    image: str
    mounts: tuple[str, ...] = ()
    workdir: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.image, str) or not self.image.strip() or "\n" in self.image:
            raise SpecError("container.image", "must be a non-empty image reference")
        mounts = _str_tuple("container.mounts", self.mounts)
        for i, mount in enumerate(mounts):
            if "," in mount or not mount.strip():
                raise SpecError(f"container.mounts[{i}]", "one SRC:DST[:FLAGS] per entry, no commas")
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
    """How a run survives preemption: signal ahead of the end, checkpoint, requeue up to a limit."""

    signal: str = "USR2"
    grace_seconds: int = 60
    max_restarts: int = 3

    def __post_init__(self) -> None:
        sig = str(self.signal).upper().removeprefix("SIG")
        if sig not in SIGNALS:
            raise SpecError("requeue.signal", f"must be one of {', '.join(SIGNALS)}")
        object.__setattr__(self, "signal", sig)
        _check_int("requeue.grace_seconds", self.grace_seconds, 0, 65535)
        _check_int("requeue.max_restarts", self.max_restarts, 0, 1000)


@dataclass(frozen=True)
class JobSpec:
    """A training job. Only ``name`` and ``entry`` are required."""

    name: str
    entry: Entry = field(default=None)  # type: ignore[assignment]  # required; checked below
    nodes: int = 1
    gpus_per_node: int = 0
    neuron_devices_per_node: int = 0
    tasks_per_node: int | None = None
    procs_per_node: int | None = None
    cpus_per_task: int = 1
    mem_per_node: str | None = None
    time_limit: str = "01:00:00"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    exclusive: bool = False
    nodelist: str | None = None
    launcher: str = "torchrun"
    deepspeed_via: str = "torchrun"
    container: Container | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    network: str = "tcp"
    checkpoint_dir: str | None = None
    requeue: RequeuePolicy = field(default_factory=RequeuePolicy)
    log_dir: str = "logs"
    dependencies: tuple[str, ...] = ()
    deepspeed_config: Mapping[str, Any] | str | None = None
    rdzv_port: int | None = None  # None: derived from the job id and restart, the first free one
    python: str = "python3"
    neuron_precompile: bool = True
    neuron_compile_steps: int = 5
    neuron_compile_dir: str | None = None
    instance_type: str | None = None
    library_versions: Mapping[str, str] = field(default_factory=dict)
    srun_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or len(self.name) > 200 or "\n" in self.name:
            raise SpecError("name", "must be a non-empty single line (≤ 200 characters)")
        if not isinstance(self.entry, Entry):
            raise SpecError("entry", "is required (module: or script:, plus args:)")
        _check_int("nodes", self.nodes, 1, 100_000)
        _check_int("gpus_per_node", self.gpus_per_node, 0, 64)
        _check_int("neuron_devices_per_node", self.neuron_devices_per_node, 0, 64)
        if self.gpus_per_node and self.neuron_devices_per_node:
            raise SpecError("neuron_devices_per_node", "cannot be combined with gpus_per_node")
        if self.tasks_per_node is not None:
            _check_int("tasks_per_node", self.tasks_per_node, 1, 1024)
        if self.procs_per_node is not None:
            _check_int("procs_per_node", self.procs_per_node, 1, 1024)
        _check_int("cpus_per_task", self.cpus_per_task, 1, 4096)
        if self.mem_per_node is not None and not _MEM.match(str(self.mem_per_node)):
            raise SpecError("mem_per_node", f"expected e.g. 8G or 4096M, got {self.mem_per_node!r}")
        if time_limit_seconds(self.time_limit) is None:
            raise SpecError("time_limit", f"expected [D-]HH:MM:SS or minutes, got {self.time_limit!r}")
        for name in ("partition", "account", "qos"):
            value = getattr(self, name)
            if value is not None and not _SLURM_NAME.match(str(value)):
                raise SpecError(name, f"not a valid Slurm name: {value!r}")
        if self.nodelist is not None and not re.match(r"^[A-Za-z0-9_.,\[\]-]+$", self.nodelist):
            raise SpecError("nodelist", f"not a Slurm node list: {self.nodelist!r}")
        _choice("launcher", self.launcher, LAUNCHERS)
        _choice("deepspeed_via", self.deepspeed_via, DEEPSPEED_VIA)
        _choice("network", self.network, NETWORKS)
        if self.launcher in ("torchrun", "deepspeed", "neuron") and not self.entry.is_python:
            raise SpecError("entry.script", f"the {self.launcher} launcher runs Python: give a .py "
                            "script or a module (or use launcher: srun)")
        if self.launcher == "neuron" and not self.neuron_devices_per_node:
            raise SpecError("neuron_devices_per_node", "the neuron launcher needs ≥ 1 device per node")
        _check_int("neuron_compile_steps", self.neuron_compile_steps, 1, 1000)
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
        if self.deepspeed_config is not None and not isinstance(self.deepspeed_config, (str, Mapping)):
            raise SpecError("deepspeed_config", "must be a mapping or a path to a JSON file")
        env = _str_mapping("env", self.env)
        for key in env:
            if not _ENV_NAME.match(key):
                raise SpecError(f"env.{key}", "not a valid environment variable name")
        object.__setattr__(self, "env", MappingProxyType(env))
        object.__setattr__(self, "library_versions",
                           MappingProxyType(_str_mapping("library_versions", self.library_versions)))
        if isinstance(self.deepspeed_config, Mapping):
            object.__setattr__(self, "deepspeed_config", MappingProxyType(dict(self.deepspeed_config)))
        deps = _str_tuple("dependencies", self.dependencies)
        for i, dep in enumerate(deps):
            if not _DEPENDENCY.match(dep):
                raise SpecError(f"dependencies[{i}]", f"expected e.g. afterok:1234, got {dep!r}")
        object.__setattr__(self, "dependencies", deps)
        srun_args = _str_tuple("srun_args", self.srun_args)
        for i, arg in enumerate(srun_args):
            if not arg.startswith("-"):
                raise SpecError(f"srun_args[{i}]", f"expected an srun option like --mpi=pmix, got {arg!r}")
        object.__setattr__(self, "srun_args", srun_args)
        if self.rdzv_port is not None:
            _check_int("rdzv_port", self.rdzv_port, 1, 65535)
        for name in ("log_dir", "python", "checkpoint_dir", "neuron_compile_dir"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value or "\n" in value):
                raise SpecError(name, "must be a non-empty path on one line")
        if not isinstance(self.requeue, RequeuePolicy):
            raise SpecError("requeue", "must be a mapping (signal, grace_seconds, max_restarts)")

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
            if dataclasses.is_dataclass(value):
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
        if not isinstance(data, Mapping):
            raise SpecError("", "a job spec must be a mapping of fields")
        data = dict(data)
        known = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key not in known:
                hint = _close(str(key), known)
                raise SpecError(str(key), "unknown field" + (f" (did you mean {hint[0]!r}?)" if hint else ""))
        if "name" not in data:
            raise SpecError("name", "is required")
        if "entry" not in data:
            raise SpecError("entry", "is required (module: or script:, plus args:)")
        data["entry"] = _sub(Entry, "entry", data["entry"])
        if data.get("container") is not None:
            data["container"] = _sub(Container, "container", data["container"])
        if "requeue" in data:
            data["requeue"] = _sub(RequeuePolicy, "requeue", data["requeue"] or {})
        for key in ("dependencies", "srun_args"):
            if isinstance(data.get(key), str):
                data[key] = (data[key],)
        try:
            return cls(**data)
        except TypeError as exc:  # pragma: no cover - guarded by the field check above
            raise SpecError("", str(exc)) from None

    @classmethod
    def from_yaml(cls, source: str | Path) -> JobSpec:
        """Load from a YAML file path or YAML text."""
        import yaml

        text = str(source)
        if isinstance(source, Path) or ("\n" not in text and text.endswith((".yaml", ".yml"))):
            try:
                text = Path(source).read_text()
            except OSError as exc:
                raise SpecError("", f"cannot read {source}: {exc.strerror}") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpecError("", f"not valid YAML: {' '.join(str(exc).split())}") from None
        return cls.from_dict(data or {})


# -- helpers -------------------------------------------------------------------------------------
def time_limit_seconds(text: str | int) -> int | None:
    """Slurm time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS → seconds."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text * 60 if text > 0 else None
    match = _TIME.match(str(text).strip())
    if not match:
        return None
    days, a, b, c = match.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        secs = int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    elif c is not None:  # HH:MM:SS
        secs = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:  # MM:SS
        secs = int(a) * 60 + int(b)
    else:  # MM
        secs = int(a) * 60
    return secs if secs > 0 else None


def _sub(cls: type, path: str, value: Any) -> Any:
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise SpecError(path, "must be a mapping")
    known = {f.name for f in dataclasses.fields(cls)}
    for key in value:
        if key not in known:
            hint = _close(str(key), known)
            raise SpecError(f"{path}.{key}", "unknown field"
                            + (f" (did you mean {hint[0]!r}?)" if hint else ""))
    return cls(**dict(value))


def _close(word: str, known: set[str]) -> list[str]:
    import difflib  # only on the error path: keeps CLI start-up short

    return difflib.get_close_matches(word, sorted(known), n=1)


def _check_int(path: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(path, f"must be an integer, got {value!r}")
    if value < low:
        raise SpecError(path, f"must be ≥ {low}")
    if value > high:
        raise SpecError(path, f"must be ≤ {high}")


def _choice(path: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise SpecError(path, f"must be one of {', '.join(choices)}, got {value!r}")


def _str_tuple(path: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise SpecError(path, "must be a list of strings")
    out = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise SpecError(f"{path}[{i}]", "must be a string")
        if "\0" in str(item):
            raise SpecError(f"{path}[{i}]", "must not contain NUL")
        out.append(str(item))
    return tuple(out)


def _str_mapping(path: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise SpecError(path, "must be a mapping of names to strings")
    out = {}
    for key, item in value.items():
        if isinstance(item, bool):
            item = "1" if item else "0"
        if not isinstance(item, (str, int, float)):
            raise SpecError(f"{path}.{key}", "must be a string")
        if "\0" in str(item):
            raise SpecError(f"{path}.{key}", "must not contain NUL")
        out[str(key)] = str(item)
    return out
