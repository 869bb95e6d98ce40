"""Typed cluster spec: ``SlurmCluster`` and ``SlurmNodeSet``, built in Python or loaded from YAML.

These are slinkyml's own planning types (not Kubernetes kinds): one spec renders to the
Slinky operator's Controller/NodeSet/LoginSet/... objects plus the AWS pieces around them.
Every user mistake raises :class:`~slinkyml.errors.SpecError` naming the field path
(``node_sets[1].instance_type``), never a traceback.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from slinkyml import specload
from slinkyml.errors import SpecError

#: Slurm version -> Slinky image tag suffix (images ghcr.io/slinkyproject/<component>:<tag>).
SLURM_IMAGE_TAGS = {
    "26.05": "26.05-ubuntu26.04",
    "25.11": "25.11-ubuntu24.04",
}
DEFAULT_SLURM_VERSION = "26.05"
IMAGE_REGISTRY = "ghcr.io/slinkyproject"
CAPACITY_TYPES = ("on-demand", "spot", "reserved")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SLURM_PARTITION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
SLURM_FEATURE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]*$")
ZONE = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$")
QUANTITY = re.compile(r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
SECRET_REF = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[-._a-zA-Z0-9]+)?$")
FSX_THROUGHPUTS = (125, 250, 500, 1000)  # PERSISTENT_2 MB/s/TiB
MAX_NODES = 10000  # most nodes one node set may have (gres.conf host ranges cover all of them)


def image_tag(slurm_version: str) -> str:
    return SLURM_IMAGE_TAGS[slurm_version]


def default_image(component: str, slurm_version: str) -> str:
    """The upstream Slinky image for a component (slurmctld, slurmd, login, ...)."""
    return f"{IMAGE_REGISTRY}/{component}:{image_tag(slurm_version)}"


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
    node_role: str | None = None  # default: KarpenterNodeRole-<eks_cluster>
    ami_alias: str = "al2023@latest"  # EKS-optimized AL2023; Karpenter picks the accelerated variant


@dataclass
class SlurmCluster:
    """A whole training cluster: Slurm control plane, login pods, node sets, storage, accounting."""

    name: str
    node_sets: list[SlurmNodeSet]
    namespace: str = "slurm"
    slurm_version: str = DEFAULT_SLURM_VERSION
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


_NULLABLE = {"token_user"}
_NUMERIC_STR = {"cpu", "memory", "persistence_size", "storage_size"}
_NESTED = {"controller": Controller, "login": Login, "rest_api": RestApi, "accounting": Accounting,
           "storage": Fsx, "secrets": Secrets, "aws": Aws}


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
            dict: "mapping", type(None): "null"}.get(type(value), type(value).__name__)


def _check_keys(raw: Any, path: str, cls: type) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise SpecError(path or "spec", f"expected a mapping, got {_type_name(raw)}")
    known = [f.name for f in fields(cls)]
    for key in raw:
        if not isinstance(key, str) or key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" — did you mean '{close[0]}'?" if close else f" (known: {', '.join(known)})"
            raise SpecError(_join(path, str(key)), f"unknown field{hint}")
    return raw


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _get(raw: dict[str, Any], path: str, key: str, kind: type | tuple[type, ...], default: Any,
         *, required: bool = False, nullable: bool = False) -> Any:
    p = _join(path, key)
    if key not in raw:
        if required:
            raise SpecError(p, "required field missing")
        return default
    value = raw[key]
    if value is None and (nullable or not required and default is None):
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise SpecError(p, f"expected {_type_name(kinds[0]())}, got boolean {value!r}")
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kinds):
        want = " or ".join(_type_name(k()) if k is not type(None) else "null" for k in kinds)
        raise SpecError(p, f"expected {want}, got {_type_name(value)} {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _str_list(raw: dict[str, Any], path: str, key: str) -> list[str]:
    value = _get(raw, path, key, list, [])
    if value is None:
        return []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise SpecError(f"{_join(path, key)}[{i}]", f"expected string, got {_type_name(item)}")
    return list(value)


def _dns_label(value: str, path: str, max_len: int = 63) -> str:
    if not DNS1123_LABEL.match(value) or len(value) > max_len:
        raise SpecError(path, f"'{value}' is not a DNS-1123 label (lower-case letters, digits and '-', "
                        f"starting and ending alphanumeric, at most {max_len} characters)")
    return value


def _quantity(value: str, path: str) -> str:
    if not QUANTITY.match(value):
        raise SpecError(path, f"'{value}' is not a Kubernetes quantity (e.g. 16Gi)")
    return value


def _positive(value: int, path: str, minimum: int = 1, maximum: int | None = None) -> int:
    if value < minimum or (maximum is not None and value > maximum):
        rng = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise SpecError(path, f"must be {rng}, got {value}")
    return value


def _one_line(value: str, path: str) -> str:
    if "\n" in value.strip():
        raise SpecError(path, "must be a single line")
    return value.strip()


def _node_set(raw: Any, path: str) -> SlurmNodeSet:
    from slinkyml.instances import get_instance_type

    raw = _check_keys(raw, path, SlurmNodeSet)
    name = _dns_label(_get(raw, path, "name", str, None, required=True), _join(path, "name"), 40)
    itype_name = _get(raw, path, "instance_type", str, None, required=True)
    itype = get_instance_type(itype_name, field_path=_join(path, "instance_type"))
    count = _positive(_get(raw, path, "count", int, 1), _join(path, "count"), 0, MAX_NODES)
    partition = _get(raw, path, "partition", str, None)
    if partition is not None and not SLURM_PARTITION.match(partition):
        raise SpecError(_join(path, "partition"), f"'{partition}' is not a valid Slurm partition name")
    zone = _get(raw, path, "zone", str, None)
    if zone is not None and not ZONE.match(zone):
        raise SpecError(_join(path, "zone"), f"'{zone}' is not an availability zone name (e.g. us-east-1a)")
    capacity = _get(raw, path, "capacity_type", str, "on-demand")
    if capacity not in CAPACITY_TYPES:
        close = difflib.get_close_matches(capacity, CAPACITY_TYPES, n=1)
        hint = f" — did you mean '{close[0]}'?" if close else f" (one of {', '.join(CAPACITY_TYPES)})"
        raise SpecError(_join(path, "capacity_type"), f"unknown '{capacity}'{hint}")
    efa = _get(raw, path, "efa", bool, None)
    if efa is None:
        efa = itype.efa
    if efa and not itype.efa:
        raise SpecError(_join(path, "efa"), f"instance type '{itype.name}' has no EFA interfaces")
    if efa and zone is None:
        raise SpecError(_join(path, "zone"), "required when efa is on (EFA traffic stays in one "
                        "availability zone)")
    features = _str_list(raw, path, "features")
    for i, feat in enumerate(features):
        if not SLURM_FEATURE.match(feat):
            raise SpecError(f"{_join(path, 'features')}[{i}]", f"'{feat}' is not a valid Slurm feature name")
    accelerators = _get(raw, path, "accelerators", int, None)
    if accelerators is not None:
        _positive(accelerators, _join(path, "accelerators"), 0)
        if accelerators > itype.accelerator_count:
            raise SpecError(_join(path, "accelerators"), f"{accelerators} requested but '{itype.name}' has "
                            f"{itype.accelerator_count}")
    image = _get(raw, path, "image", str, None)
    if image is not None and (not image.strip() or any(c.isspace() for c in image)):
        raise SpecError(_join(path, "image"), f"'{image}' is not an image reference")
    return SlurmNodeSet(
        name=name, instance_type=itype.name, count=count, partition=partition, zone=zone,
        capacity_type=capacity, efa=efa, features=features, image=image,
        extra_slurmd_conf=_one_line(_get(raw, path, "extra_slurmd_conf", str, ""),
                                    _join(path, "extra_slurmd_conf")),
        accelerators=accelerators,
        partition_config=_one_line(_get(raw, path, "partition_config", str, ""),
                                   _join(path, "partition_config")),
        root_volume_gib=_positive(_get(raw, path, "root_volume_gib", int, 200),
                                  _join(path, "root_volume_gib"), 20, 16384),
        spare_nodes=_positive(_get(raw, path, "spare_nodes", int, 1), _join(path, "spare_nodes"), 0, 100))


def _simple(raw: Any, path: str, cls: type) -> Any:
    """Parse a flat nested section whose fields are str/int/bool/list[str] by their defaults."""
    raw = _check_keys(raw if raw is not None else {}, path, cls)
    defaults = cls()
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        default = getattr(defaults, f.name)
        if isinstance(default, list):
            kwargs[f.name] = _str_list(raw, path, f.name)
            continue
        kind: type | tuple[type, ...]
        if isinstance(default, bool):
            kind = bool
        elif isinstance(default, int):
            kind = int
        else:
            # YAML turns `cpu: 2` into a number; accept and stringify for quantities only
            kind = (str, int, float) if f.name in _NUMERIC_STR else str
        value = _get(raw, path, f.name, kind, default, nullable=default is None or f.name in _NULLABLE)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and kind is not int:
            value = str(int(value)) if float(value).is_integer() else str(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def from_dict(raw: Any, *, source: str = "") -> SlurmCluster:
    """Build a checked :class:`SlurmCluster` from plain data (a parsed YAML document): every problem
    the published schema (``data/schemas/cluster.schema.json``) finds at once, then the checks across
    fields, one at a time."""
    specload.check_or_raise(raw, "cluster")
    return _from_dict(raw)


def _from_dict(raw: Any) -> SlurmCluster:
    raw = _check_keys(raw, "", SlurmCluster)
    name = _dns_label(_get(raw, "", "name", str, None, required=True), "name", 40)
    namespace = _dns_label(_get(raw, "", "namespace", str, "slurm"), "namespace")
    version = _get(raw, "", "slurm_version", (str, float), DEFAULT_SLURM_VERSION)
    version = f"{version:.2f}" if isinstance(version, float) else version
    if version not in SLURM_IMAGE_TAGS:
        close = difflib.get_close_matches(version, list(SLURM_IMAGE_TAGS), n=1)
        hint = f" — did you mean '{close[0]}'?" if close else ""
        raise SpecError("slurm_version", f"unsupported '{version}' (supported: "
                        f"{', '.join(SLURM_IMAGE_TAGS)}){hint}")
    node_sets_raw = _get(raw, "", "node_sets", list, None, required=True)
    if not node_sets_raw:
        raise SpecError("node_sets", "at least one node set is required")
    node_sets = [_node_set(ns, f"node_sets[{i}]") for i, ns in enumerate(node_sets_raw)]
    seen: dict[str, int] = {}
    for i, ns in enumerate(node_sets):
        if ns.name in seen:
            raise SpecError(f"node_sets[{i}].name", f"duplicate node set name '{ns.name}' "
                            f"(also node_sets[{seen[ns.name]}])")
        seen[ns.name] = i
    parts = {}
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
        name=name, namespace=namespace, slurm_version=version, node_sets=node_sets,
        **{key: _simple(raw.get(key), key, cls) for key, cls in _NESTED.items()})
    _check_sections(cluster)
    return cluster


def _check_sections(c: SlurmCluster) -> None:
    _quantity(c.controller.persistence_size, "controller.persistence_size")
    _quantity(c.controller.memory, "controller.memory")
    if not re.match(r"^\d+(\.\d+)?m?$", c.controller.cpu):
        raise SpecError("controller.cpu", f"'{c.controller.cpu}' is not a CPU quantity (e.g. 2 or 500m)")
    _positive(c.login.replicas, "login.replicas", 0, 100)
    if c.login.service_type not in ("LoadBalancer", "ClusterIP", "NodePort"):
        raise SpecError("login.service_type", f"unknown '{c.login.service_type}' (LoadBalancer, ClusterIP "
                        "or NodePort)")
    for line in c.login.root_ssh_authorized_keys.splitlines():
        if line.strip() and "PRIVATE KEY" in line:
            raise SpecError("login.root_ssh_authorized_keys", "looks like a private key; give public keys only")
    _positive(c.rest_api.replicas, "rest_api.replicas", 0, 100)
    if c.rest_api.token_user is not None and not re.match(r"^[a-z_][a-z0-9_-]*$", c.rest_api.token_user):
        raise SpecError("rest_api.token_user", f"'{c.rest_api.token_user}' is not a user name")
    if not re.match(r"^\d+(s|m|h)$", c.rest_api.token_lifetime):
        raise SpecError("rest_api.token_lifetime", f"'{c.rest_api.token_lifetime}' is not a duration like 24h")
    a = c.accounting
    if a.enabled:
        if not a.mariadb and not a.host:
            raise SpecError("accounting.host", "required when accounting.mariadb is false")
        _positive(a.port, "accounting.port", 1, 65535)
        _quantity(a.storage_size, "accounting.storage_size")
        if not re.match(r"^[A-Za-z0-9_]+$", a.database):
            raise SpecError("accounting.database", f"'{a.database}' is not a database name")
        if not re.match(r"^[A-Za-z0-9_]+$", a.username):
            raise SpecError("accounting.username", f"'{a.username}' is not a database user name")
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
    for key in ("slurm_key", "jwt_key", "db_password", "db_root_password"):
        ref = getattr(c.secrets, key)
        if ref is not None and not SECRET_REF.match(ref):
            raise SpecError(f"secrets.{key}", f"'{ref}' is not a Secret reference (name or name:key)")
    if not re.match(r"^[a-z]{2}(-gov)?-[a-z]+-\d$", c.aws.region):
        raise SpecError("aws.region", f"'{c.aws.region}' is not an AWS region (e.g. us-east-1)")
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$", c.aws.eks_cluster):
        raise SpecError("aws.eks_cluster", f"'{c.aws.eks_cluster}' is not an EKS cluster name")
    if not re.match(r"^(al2023|bottlerocket)@(latest|v\d{8})$", c.aws.ami_alias):
        raise SpecError("aws.ami_alias", f"'{c.aws.ami_alias}' is not an AMI alias like al2023@latest or "
                        "al2023@v20250505")
    for i, ns in enumerate(c.node_sets):
        if ns.zone and not ns.zone.startswith(c.aws.region):
            raise SpecError(f"node_sets[{i}].zone", f"'{ns.zone}' is not in region '{c.aws.region}'")


def to_dict(cluster: SlurmCluster) -> dict[str, Any]:
    """Plain data (YAML-ready) for a spec; ``from_dict(to_dict(c))`` round-trips."""
    from dataclasses import asdict

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
