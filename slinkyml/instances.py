"""Instance-type presets (accelerators, EFA, CPU, memory, links, prices) from
``data/instance_types.yaml``, with a user file (``SLINKYML_INSTANCE_TYPES`` or ``path=``) merged over.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from slinkyml import DATA_DIR, specload
from slinkyml.errors import SpecError, did_you_mean

DATA_FILE = DATA_DIR / "instance_types.yaml"
#: how a user makes any EC2 type known (slinkyml/instance_import.py); unknown types' errors say it
HOW_TO_IMPORT = ("aws ec2 describe-instance-types --region REGION --output json > types.json; "
                 "slinkyml cluster import-instance-types types.json -o instance_types.yaml; "
                 "export SLINKYML_INSTANCE_TYPES=$PWD/instance_types.yaml")


@dataclass(frozen=True)
class Accelerator:
    """An instance's accelerators (GPUs or Neuron devices), one entry of the data file."""

    kind: str  # "nvidia" | "neuron"
    model: str  # "H100", "A100", "Trainium2"...
    count: int  # devices per instance (GPUs, or Neuron devices/chips)
    memory_gib: float  # per device
    peak_bf16_tflops: float  # dense, per device
    resource: str  # Kubernetes extended resource: nvidia.com/gpu, aws.amazon.com/neuron
    gres_type: str  # Slurm GRES type name (gpu:h100)
    cores_per_device: int = 0  # NeuronCores per Neuron device (0 for GPUs)
    logical_core_config: int = 1  # NeuronCores per logical core (rank) by default: trn2 2, else 1

    @property
    def ranks_per_device(self) -> int:
        """Training processes per Neuron device (logical NeuronCores); 1 for a GPU."""
        if not self.cores_per_device:
            return 1
        return max(1, self.cores_per_device // max(1, self.logical_core_config))


@dataclass(frozen=True)
class InstanceType:
    """One instance type preset (``instance_types.yaml``): CPUs, memory, accelerators, network, price."""

    name: str
    vcpus: int
    memory_gib: float
    accelerator: Accelerator | None
    efa_interfaces: int
    network_gbps: float
    intra_node_link: str | None  # "NVLink", "NeuronLink", None (PCIe)
    intra_node_gbytes_per_s: float  # per device, unidirectional aggregate the link offers
    price_per_hour_usd: float | None
    source: str = ""
    efa_rdma: bool = False  # the EFA device does RDMA: FI_EFA_USE_DEVICE_RDMA=1 is safe (else it aborts)
    extra: dict[str, Any] = field(default_factory=dict)
    enis: int = 0  # ENIs of the default network card (VPC CNI uses only that card)
    ipv4_per_eni: int = 0
    max_pods_override: int | None = None  # when the ENI figures are not published
    architecture: str = "x86_64"  # EC2's ProcessorInfo.SupportedArchitectures: x86_64 | arm64

    @property
    def kubernetes_arch(self) -> str:
        """The node label ``kubernetes.io/arch`` of this type's nodes (amd64 | arm64)."""
        return "arm64" if self.architecture == "arm64" else "amd64"

    @property
    def max_pods(self) -> int | None:
        """Karpenter's ENI-limited pod density: enis * (ipv4_per_eni - 1) + 2; None if unknown."""
        if self.max_pods_override is not None:
            return self.max_pods_override
        if self.enis and self.ipv4_per_eni:
            return self.enis * (self.ipv4_per_eni - 1) + 2
        return None

    @property
    def accelerator_count(self) -> int:
        return self.accelerator.count if self.accelerator else 0

    @property
    def efa(self) -> bool:
        return self.efa_interfaces > 0


def _parse(name: str, raw: dict[str, Any]) -> InstanceType:
    path = f"instance_types.{name}"
    try:
        acc = raw.get("accelerator")
        accelerator = None
        if acc:
            accelerator = Accelerator(
                kind=str(acc["kind"]), model=str(acc["model"]), count=int(acc["count"]),
                memory_gib=float(acc["memory_gib"]), peak_bf16_tflops=float(acc["peak_bf16_tflops"]),
                resource=str(acc["resource"]), gres_type=str(acc["gres_type"]),
                cores_per_device=int(acc.get("cores_per_device", 0)),
                logical_core_config=int(acc.get("logical_core_config", 1)))
        known = {"vcpus", "memory_gib", "accelerator", "efa_interfaces", "network_gbps",
                 "intra_node_link", "intra_node_gbytes_per_s", "price_per_hour_usd", "source",
                 "enis", "ipv4_per_eni", "max_pods", "efa_rdma", "architecture"}
        architecture = raw.get("architecture", "x86_64")
        if architecture not in ("x86_64", "arm64"):
            raise SpecError(f"{path}.architecture", f"must be x86_64 or arm64, got {architecture!r}")
        efa_rdma = raw.get("efa_rdma", False)
        if not isinstance(efa_rdma, bool):
            raise SpecError(f"{path}.efa_rdma", f"must be true or false, got {efa_rdma!r}")
        return InstanceType(
            name=name, vcpus=int(raw["vcpus"]), memory_gib=float(raw["memory_gib"]),
            accelerator=accelerator, efa_interfaces=int(raw.get("efa_interfaces", 0)),
            network_gbps=float(raw.get("network_gbps", 0)),
            intra_node_link=raw.get("intra_node_link"),
            intra_node_gbytes_per_s=float(raw.get("intra_node_gbytes_per_s", 0)),
            price_per_hour_usd=(float(raw["price_per_hour_usd"])
                                if raw.get("price_per_hour_usd") is not None else None),
            source=str(raw.get("source", "")), efa_rdma=efa_rdma,
            enis=int(raw.get("enis", 0)), ipv4_per_eni=int(raw.get("ipv4_per_eni", 0)),
            max_pods_override=int(raw["max_pods"]) if raw.get("max_pods") is not None else None,
            architecture=architecture,
            extra={k: v for k, v in raw.items() if k not in known})
    except KeyError as exc:
        raise SpecError(f"{path}.{exc.args[0]}", "required field missing") from None
    except (TypeError, ValueError) as exc:
        raise SpecError(path, f"bad value: {exc}") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = specload.load_data_file(path)
    except OSError as exc:
        raise SpecError(str(path), f"cannot read instance types: {exc.strerror}") from None
    except Exception as exc:
        if not isinstance(exc, specload.yaml_error()):
            raise
        raise SpecError(str(path), f"not valid YAML: {' '.join(str(exc).split())}") from None
    types = (data or {}).get("instance_types", data or {})
    if not isinstance(types, dict):
        raise SpecError(f"{path}: instance_types", "must be a mapping of name → preset")
    return types


@lru_cache(maxsize=8)
def _load(user_path: str | None) -> dict[str, InstanceType]:
    merged = dict(_read_yaml(DATA_FILE))
    if user_path:
        merged.update(_read_yaml(Path(user_path)))
    return {name: _parse(name, raw) for name, raw in merged.items()}


def load_instance_types(path: str | os.PathLike[str] | None = None) -> dict[str, InstanceType]:
    """All presets: the packaged file, overridden by ``path`` or ``$SLINKYML_INSTANCE_TYPES``."""
    user = path or os.environ.get("SLINKYML_INSTANCE_TYPES")
    return _load(str(user) if user else None)


def get_instance_type(name: str, *, field_path: str = "instance_type",
                      path: str | os.PathLike[str] | None = None) -> InstanceType:
    """Look up a preset; unknown names raise a one-line error with a suggestion."""
    types = load_instance_types(path)
    if name in types:
        return types[name]
    hint = did_you_mean(str(name), types, f" (known: {', '.join(sorted(types))})")
    raise SpecError(field_path, f"unknown '{name}'{hint}; any other EC2 type: {HOW_TO_IMPORT}")
