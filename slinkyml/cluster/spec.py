"""Typed cluster spec: ``SlurmCluster`` and ``SlurmNodeSet``, built in Python or loaded from YAML.

Every user mistake raises :class:`~slinkyml.errors.SpecError` naming the field path.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from slinkyml import specload
from slinkyml.cluster.addons import addons, chart_name, operator_release
from slinkyml.errors import SpecError, did_you_mean
from slinkyml.instances import get_instance_type

#: Slurm version -> Slinky image tag (images ghcr.io/slinkyproject/<component>:<tag>): 26.05 as the
#: operator's slurm chart names it (both releases), 25.11 as SlinkyProject/containers publishes it
#: (data/cluster_addons.yaml [SC]); a release takes those at or above its minimum-slurm-version
SLURM_IMAGE_TAGS = {
    "25.11": "25.11-ubuntu24.04",
    "26.05": "26.05-ubuntu26.04",
}
DEFAULT_SLURM_VERSION = "26.05"
IMAGE_REGISTRY = "ghcr.io/slinkyproject"
FSX_THROUGHPUTS = (125, 250, 500, 1000)  # PERSISTENT_2 MB/s/TiB
#: most nodes one node set may have (gres.conf host ranges cover all of them): the schema's
#: node_sets[].count maximum, checked equal by tests/test_spec_schema.py
MAX_NODES = 10000


def supported_slurm_versions(release: str | None = None) -> list[str]:
    """The Slurm versions a slurm-operator release supports that Slinky publishes images for."""
    minimum = tuple(map(int, operator_release(release)["minimum_slurm_version"].split(".")))
    return [v for v in SLURM_IMAGE_TAGS if tuple(map(int, v.split("."))) >= minimum]


def image_tag(slurm_version: str) -> str:
    return SLURM_IMAGE_TAGS[slurm_version]


def default_image(component: str, slurm_version: str) -> str:
    """The upstream Slinky image for a component (slurmctld, slurmd, login, ...)."""
    return f"{IMAGE_REGISTRY}/{component}:{image_tag(slurm_version)}"


def training_image(c: SlurmCluster, name: str) -> str | None:
    """``images``' image ``name`` (worker, login) for cluster ``c``; None when no registry is set."""
    i = c.images
    return f"{i.registry}/{i.repository}/{name}:{i.tag or c.slurm_version}" if i.registry else None


def worker_image(c: SlurmCluster, ns: SlurmNodeSet) -> str:
    """What a node set's slurmd pods run: its own image, else the cluster's worker image (worker-neuron on
    Trainium/Inferentia: the Neuron runtime and torch-neuronx instead of CUDA's), else Slinky's."""
    accelerator = get_instance_type(ns.instance_type).accelerator
    name = "worker-neuron" if accelerator and accelerator.kind == "neuron" else "worker"
    return ns.image or training_image(c, name) or default_image("slurmd", c.slurm_version)


def login_image(c: SlurmCluster) -> str:
    """What the login pods run: ``login.image``, else the cluster's login image, else Slinky's."""
    return c.login.image or training_image(c, "login") or default_image("login", c.slurm_version)


@dataclass
class SlurmNodeSet:
    """A group of identical Slurm worker pods on one EC2 instance type (one Karpenter NodePool)."""

    name: str
    instance_type: str
    count: int = 1
    partition: str | None = None  # default: the node set's name
    zone: str | None = None  # required when efa is on (EFA traffic does not cross AZs)
    capacity_type: str = "on-demand"
    efa: bool | None = None  # default: on when the instance type has EFA interfaces
    features: list[str] = field(default_factory=list)
    image: str | None = None  # default: the Slinky slurmd image; see containers/worker
    extra_slurmd_conf: str = ""
    accelerators: int | None = None  # default: all of the instance's
    partition_config: str = ""  # extra options for the partition line (MaxTime=...)
    root_volume_gib: int = 200
    spare_nodes: int = 1  # NodePool limits leave room for this many replacement nodes


@dataclass
class Images:
    """Where the training images built from ``containers/`` are pushed: node sets run
    ``<registry>/<repository>/worker:<tag>`` and login pods ``<registry>/<repository>/login:<tag>`` unless
    they name an image of their own (Slinky's own images have no Python, PyTorch or DeepSpeed)."""

    registry: str | None = None  # e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com; None: no training images
    repository: str = "slinkyml"
    tag: str | None = None  # default: the cluster's slurm_version


@dataclass
class Controller:
    persistence_size: str = "16Gi"
    storage_class: str | None = None
    extra_conf: str = ""
    cpu: str = "2"
    memory: str = "4Gi"


@dataclass
class Login:
    replicas: int = 1
    image: str | None = None  # default: the Slinky login image; see containers/login
    service_type: str = "LoadBalancer"
    root_ssh_authorized_keys: str = ""  # public keys only


@dataclass
class RestApi:
    enabled: bool = True
    replicas: int = 1
    token_user: str | None = "slurm"  # a Token CR minting a JWT for this user (None: no Token)
    token_lifetime: str = "24h"


@dataclass
class Accounting:
    enabled: bool = False
    mariadb: bool = True  # deploy a MariaDB (mariadb-operator); False: use external host
    host: str | None = None
    port: int = 3306
    database: str = "slurm_acct_db"
    username: str = "slurm"
    storage_size: str = "50Gi"
    storage_class: str | None = None


@dataclass
class Fsx:
    """FSx for Lustre (PERSISTENT_2) mounted RWX at the same path in login and worker pods."""

    enabled: bool = False
    mount_path: str = "/fsx"
    capacity_gib: int = 4800
    throughput_per_tib: int = 250
    subnet_id: str = ""
    security_group_ids: list[str] = field(default_factory=list)
    s3_bucket: str | None = None  # s3://bucket[/prefix] linked by a data-repository association
    s3_file_system_path: str = "/s3"  # where the bucket appears under the file system root
    storage_class_name: str | None = None


@dataclass
class Secrets:
    """Names (``name`` or ``name:key``) of Secrets holding credentials. Never the values."""

    slurm_key: str | None = None
    jwt_key: str | None = None
    db_password: str | None = None
    db_root_password: str | None = None


@dataclass
class Aws:
    region: str = "us-east-1"
    eks_cluster: str = "my-eks"  # discovery tag value for subnets/security groups
    node_role: str | None = None  # default: KarpenterNodeRole-<eks_cluster> (Karpenter's CloudFormation stack's)
    interruption_queue: str | None = None  # default: <eks_cluster> (the SQS queue that stack creates)
    ami_alias: str = "al2023@latest"  # EKS-optimized AL2023; Karpenter picks the accelerated variant


@dataclass
class SlurmCluster:
    """A whole training cluster: Slurm control plane, login pods, node sets, storage, accounting."""

    name: str
    node_sets: list[SlurmNodeSet]
    namespace: str = "slurm"
    slurm_version: str = DEFAULT_SLURM_VERSION
    #: the slurm-operator release to install: "1.2.1" (the newest release) or "f2ed3fc" (main, the
    #: vendored CRDs' revision, unreleased); data/cluster_addons.yaml slurm_operator.releases
    slurm_operator: str = "1.2.1"
    images: Images = field(default_factory=Images)
    controller: Controller = field(default_factory=Controller)
    login: Login = field(default_factory=Login)
    rest_api: RestApi = field(default_factory=RestApi)
    accounting: Accounting = field(default_factory=Accounting)
    storage: Fsx = field(default_factory=Fsx)
    secrets: Secrets = field(default_factory=Secrets)
    aws: Aws = field(default_factory=Aws)

    def check(self) -> SlurmCluster:
        """Validate everything a Python-built spec could get wrong; returns self."""
        return from_dict(to_dict(self))


# ---------------------------------------------------------------- parsing
# from_dict first checks the data against the published schema (fields, types, ranges, patterns,
# choices: data/schemas/cluster.schema.json); what follows builds the spec from checked data and adds
# the rules that need the instance data or span fields.

#: quantities YAML reads as numbers (`cpu: 2`): kept as the strings Kubernetes takes
_NUMERIC_STR = {"cpu", "memory", "persistence_size", "storage_size"}
_NESTED = {"images": Images, "controller": Controller, "login": Login, "rest_api": RestApi, "accounting": Accounting,
           "storage": Fsx, "secrets": Secrets, "aws": Aws}


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _node_set(raw: dict[str, Any], path: str) -> SlurmNodeSet:
    itype = get_instance_type(raw["instance_type"], field_path=_join(path, "instance_type"))
    efa = itype.efa if raw.get("efa") is None else raw["efa"]
    if efa and not itype.efa:
        raise SpecError(_join(path, "efa"), f"instance type '{itype.name}' has no EFA interfaces")
    if efa and raw.get("zone") is None:
        raise SpecError(_join(path, "zone"), "required when efa is on (EFA traffic stays in one "
                        "availability zone)")
    accelerators = raw.get("accelerators")
    if accelerators is not None and accelerators > itype.accelerator_count:
        raise SpecError(_join(path, "accelerators"), f"{accelerators} requested but '{itype.name}' has "
                        f"{itype.accelerator_count}")
    fields: dict[str, Any] = {
        **raw, "instance_type": itype.name, "efa": efa, "features": list(raw.get("features") or []),
        **{key: raw[key].strip() for key in ("extra_slurmd_conf", "partition_config") if key in raw}}
    return SlurmNodeSet(**fields)


def _section(raw: dict[str, Any] | None, cls: type) -> Any:
    """A nested section (controller, login...): its schema-checked fields over the defaults."""
    values = dict(raw or {})
    for key, value in values.items():
        if key in _NUMERIC_STR and not isinstance(value, str):
            values[key] = str(int(value)) if float(value).is_integer() else str(value)
    if values.get("security_group_ids", []) is None:
        values["security_group_ids"] = []
    return cls(**values)


def from_dict(raw: Any, *, source: str = "") -> SlurmCluster:
    """Build a checked :class:`SlurmCluster` from plain data (a parsed YAML document): every problem
    the published schema (``data/schemas/cluster.schema.json``) finds at once, then the checks across
    fields, one at a time."""
    specload.check_or_raise(raw, "cluster")
    return _from_dict(raw)


def _from_dict(raw: dict[str, Any]) -> SlurmCluster:
    version = raw.get("slurm_version", DEFAULT_SLURM_VERSION)
    version = f"{version:.2f}" if not isinstance(version, str) else version  # YAML reads 26.05 as a number
    release = operator_release(raw.get("slurm_operator"))  # the schema allows only known releases
    supported = supported_slurm_versions(release["name"])
    if version not in supported:
        why = (f": slurm-operator {chart_name(release)} declares minimum-slurm-version "
               f"{release['minimum_slurm_version']}" if version in addons()["slinky_images"]["slurm_versions"] else "")
        hint = did_you_mean(version, supported)
        raise SpecError("slurm_version", f"unsupported '{version}'{why} (supported: "
                        f"{', '.join(supported)}){hint}")
    node_sets = [_node_set(ns, f"node_sets[{i}]") for i, ns in enumerate(raw["node_sets"])]
    seen: dict[str, int] = {}
    for i, ns in enumerate(node_sets):
        if ns.name in seen:
            raise SpecError(f"node_sets[{i}].name", f"duplicate node set name '{ns.name}' "
                            f"(also node_sets[{seen[ns.name]}])")
        seen[ns.name] = i
    parts: dict[str, Any] = {}
    for i, ns in enumerate(node_sets):
        part = ns.partition or ns.name
        if part in seen and part != ns.name:
            raise SpecError(f"node_sets[{i}].partition", f"'{part}' is the name of another node set, "
                            "whose own partition it would clash with")
        if ns.partition_config and part in parts and parts[part][1] != ns.partition_config:
            raise SpecError(f"node_sets[{i}].partition_config", f"differs from node_sets[{parts[part][0]}]"
                            f" which shares partition '{part}'")
        parts.setdefault(part, (i, ns.partition_config))
    cluster = SlurmCluster(
        name=raw["name"], namespace=raw.get("namespace", "slurm"), slurm_version=version, node_sets=node_sets,
        slurm_operator=release["name"],
        **{key: _section(raw.get(key), cls) for key, cls in _NESTED.items()})
    _check_sections(cluster)
    return cluster


def _check_sections(c: SlurmCluster) -> None:
    """Rules the schema cannot say: conditional on a switch, or across sections."""
    for i, ns in enumerate(c.node_sets):
        accelerator = get_instance_type(ns.instance_type).accelerator
        if accelerator and not (ns.image or c.images.registry):
            kind, what, folder = (("Neuron", "Neuron runtime or torch-neuronx", "worker-neuron")
                                  if accelerator.kind == "neuron" else ("GPU", "Python, PyTorch or NCCL", "worker"))
            raise SpecError(f"node_sets[{i}].image", f"required for {kind} instance type "
                            f"'{ns.instance_type}': Slinky's slurmd image has no {what}; build containers/{folder}, "
                            "push it and name it here, or set images.registry (containers/README.md)")
    for line in c.login.root_ssh_authorized_keys.splitlines():
        if line.strip() and "PRIVATE KEY" in line:
            raise SpecError("login.root_ssh_authorized_keys", "looks like a private key; give public keys only")
    if c.accounting.enabled and not c.accounting.mariadb and not c.accounting.host:
        raise SpecError("accounting.host", "required when accounting.mariadb is false")
    s = c.storage
    if s.enabled:
        if not s.mount_path.startswith("/") or s.mount_path.rstrip("/") in ("", "/etc", "/usr", "/var"):
            raise SpecError("storage.mount_path", f"'{s.mount_path}' must be an absolute path outside "
                            "system folders")
        if s.throughput_per_tib not in FSX_THROUGHPUTS:
            raise SpecError("storage.throughput_per_tib", f"{s.throughput_per_tib} is not a PERSISTENT_2 "
                            f"throughput ({', '.join(map(str, FSX_THROUGHPUTS))} MB/s/TiB)")
        if s.capacity_gib != 1200 and (s.capacity_gib <= 0 or s.capacity_gib % 2400):
            raise SpecError("storage.capacity_gib", f"{s.capacity_gib} GiB: PERSISTENT_2 takes 1200 GiB or "
                            "a multiple of 2400 GiB")
        if not re.match(r"^subnet-[0-9a-f]{8,17}$", s.subnet_id):
            raise SpecError("storage.subnet_id", f"'{s.subnet_id}' is not a subnet id (subnet-0123abcd...)")
        if not s.security_group_ids:
            raise SpecError("storage.security_group_ids", "at least one security group is required")
        for i, sg in enumerate(s.security_group_ids):
            if not re.match(r"^sg-[0-9a-f]{8,17}$", sg):
                raise SpecError(f"storage.security_group_ids[{i}]", f"'{sg}' is not a security group id")
        if s.s3_bucket is not None and not re.match(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$",
                                                    s.s3_bucket):
            raise SpecError("storage.s3_bucket", f"'{s.s3_bucket}' is not an s3://bucket[/prefix] URL")
        if not s.s3_file_system_path.startswith("/"):
            raise SpecError("storage.s3_file_system_path", "must start with '/'")
    for i, ns in enumerate(c.node_sets):
        if ns.zone and not ns.zone.startswith(c.aws.region):
            raise SpecError(f"node_sets[{i}].zone", f"'{ns.zone}' is not in region '{c.aws.region}'")


def to_dict(cluster: SlurmCluster) -> dict[str, Any]:
    """Plain data (YAML-ready) for a spec; ``from_dict(to_dict(c))`` round-trips."""
    return asdict(cluster)


def load_spec(path: str | Path) -> SlurmCluster:
    """Read a spec YAML file; errors name the file, line and field path of every problem."""
    return _build(specload.load(path))


def loads_spec(text: str, *, source: str = "") -> SlurmCluster:
    """Parse spec YAML text (``source`` names it in errors)."""
    return _build(specload.parse_yaml(text, source))


def _build(document: specload.Document) -> SlurmCluster:
    raw = document.data
    if isinstance(raw, dict) and "spec" in raw and raw.get("kind") == "SlurmCluster":  # resource form
        document = document.sub("spec")
    try:
        return document.build(lambda data: from_dict(data, source=document.source))
    except SpecError:
        raise
    except (TypeError, ValueError, AttributeError, RecursionError) as exc:  # defensive: stay one line
        raise SpecError(document.source or "spec", f"malformed spec: {type(exc).__name__}") from None
