"""Accelerator figures the planner needs, from ``data/gpus.yaml`` and the shared instance presets
(node size, host memory and network always from the preset, so planner and renderer agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from slinkyml import DATA_DIR
from slinkyml.errors import SpecError, did_you_mean
from slinkyml.instances import get_instance_type

GPUS_FILE = DATA_DIR / "gpus.yaml"
GIB = 1024**3


@dataclass(frozen=True)
class Hardware:
    """One device type in one node type: everything the cost and memory models read."""

    name: str  # what the user typed, normalised (a100-80gb, p5.48xlarge)
    model: str
    memory_gib: float
    peak_bf16_tflops: float
    nvlink_domain: int  # devices that share the fast link: upper bound for tensor parallelism
    gpus_per_node: int
    intra_node_gbytes_per_s: float  # per device, one direction
    inter_node_gbytes_per_s: float  # per device, one direction: node network / devices per node
    host_memory_gib: float  # per node
    pcie_gbytes_per_s: float
    instance_type: str

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * GIB

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@lru_cache(maxsize=1)
def _gpu_table() -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    import yaml  # lazy: PyYAML only when the data file is first read

    data = yaml.safe_load(GPUS_FILE.read_text()) or {}
    return dict(data.get("gpus", {})), dict(data.get("aliases", {}))


def peak_for_device_name(device_name: str) -> tuple[str, float] | None:
    """The gpus.yaml entry and dense BF16 peak (TFLOP/s) of a GPU as nvidia-smi names it, or None."""
    words = device_name.upper()
    for key, entry in _gpu_table()[0].items():
        match = entry.get("device_name") or {}
        wanted = [str(w).upper() for w in match.get("all") or ()]
        if wanted and all(w in words for w in wanted) and \
                not any(str(w).upper() in words for w in match.get("none") or ()):
            return key, float(entry["peak_bf16_tflops"])
    return None


def gpu_names() -> list[str]:
    """Known ``--gpu`` names (without aliases)."""
    return sorted(_gpu_table()[0])


def _from_instance(name: str, inst: Any, *, memory_gib: float | None = None,
                   peak: float | None = None, domain: int | None = None,
                   pcie: float = 25.0, model: str | None = None) -> Hardware:
    acc = inst.accelerator
    if acc is None:
        raise SpecError("--instance-type", f"'{inst.name}' has no accelerators to plan for")
    per_node = acc.count
    if domain is None:
        domain = per_node if inst.intra_node_link else 1
    intra = inst.intra_node_gbytes_per_s
    inter = inst.network_gbps / 8.0 / per_node
    return Hardware(
        name=name, model=model or acc.model,
        memory_gib=float(memory_gib if memory_gib is not None else acc.memory_gib),
        peak_bf16_tflops=float(peak if peak is not None else acc.peak_bf16_tflops),
        nvlink_domain=int(domain), gpus_per_node=int(per_node),
        intra_node_gbytes_per_s=float(intra) if intra else inter,
        inter_node_gbytes_per_s=float(inter), host_memory_gib=float(inst.memory_gib),
        pcie_gbytes_per_s=float(pcie), instance_type=inst.name)


def gpu_hardware(name: str) -> Hardware:
    """``--gpu NAME``: a device model from gpus.yaml joined with its instance preset."""
    table, aliases = _gpu_table()
    key = str(name).strip().lower()
    key = aliases.get(key, key)
    if key not in table:
        hint = did_you_mean(key, [*table, *aliases], f" (known: {', '.join(sorted(table))})")
        raise SpecError("--gpu", f"unknown GPU '{name}'{hint}")
    row = table[key]
    inst = get_instance_type(str(row["instance_type"]), field_path=f"gpus.{key}.instance_type")
    return _from_instance(key, inst, memory_gib=float(row["memory_gib"]),
                          peak=float(row["peak_bf16_tflops"]), domain=int(row["nvlink_domain"]),
                          pcie=float(row.get("pcie_gbytes_per_s", 25)), model=str(row["model"]))


def instance_hardware(name: str) -> Hardware:
    """``--instance-type NAME``: device figures straight from the shared preset."""
    inst = get_instance_type(name, field_path="--instance-type")
    pcie = 25.0
    for row in _gpu_table()[0].values():  # borrow the PCIe figure of the matching GPU model
        if row.get("instance_type") == inst.name:
            pcie = float(row.get("pcie_gbytes_per_s", 25))
    return _from_instance(inst.name, inst, pcie=pcie)


def resolve_hardware(gpu: str | None = None, instance_type: str | None = None) -> Hardware:
    """Either a GPU model name or an instance type (not both)."""
    if gpu and instance_type:
        raise SpecError("--gpu", "give either --gpu or --instance-type, not both")
    if instance_type:
        return instance_hardware(instance_type)
    if gpu:
        return gpu_hardware(gpu)
    raise SpecError("--gpu", "required: --gpu NAME (e.g. a100-80gb) or --instance-type NAME")
