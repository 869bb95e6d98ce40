"""Every EC2 instance type: a user's ``aws ec2 describe-instance-types`` answer (their own region's)
turned into instance-type presets (``instances.py``'s layout), merged with Karpenter's generated
per-type tables (bandwidth, on-demand prices, ENI limits) at a pinned karpenter-provider-aws version.

``data/karpenter_instance_tables.json`` holds those tables, generated from the Go module's
``zz_generated.*.go`` files by :func:`karpenter_tables_from_module`
(``python -m slinkyml.instance_import MODULE_DIR``); ``data/accelerators.yaml`` says what EC2's
answer cannot (a chip's peak BF16, its link, whether its EFA does RDMA, its Slurm GRES type).
"""

from __future__ import annotations

import json
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from slinkyml import DATA_DIR, specload
from slinkyml.errors import SpecError

TABLES_FILE = DATA_DIR / "karpenter_instance_tables.json"
ACCELERATORS_FILE = DATA_DIR / "accelerators.yaml"
KARPENTER_MODULE = "github.com/aws/karpenter-provider-aws"
KARPENTER_VERSION = "v1.14.1"


# ---------------------------------------------------------------- Karpenter's generated tables


def karpenter_tables_from_module(module_dir: Path) -> dict[str, Any]:
    """The three generated tables of karpenter-provider-aws, read from its Go sources."""
    itype = module_dir / "pkg" / "providers" / "instancetype"
    bandwidth_src = (itype / "zz_generated.bandwidth.go").read_text()
    bandwidth = {name: int(mbps) for name, mbps in re.findall(r'^\s*"([a-z0-9.-]+)":\s*(\d+),', bandwidth_src, re.M)}
    vpc_src = (itype / "zz_generated.vpclimits.go").read_text()
    vpc_src = vpc_src[vpc_src.index("var Limits"):]
    vpc: dict[str, dict[str, int]] = {}
    for name, body in re.findall(r'^\t"([a-z0-9.-]+)": \{\n(.*?)^\t\},', vpc_src, re.M | re.S):
        default = int(re.search(r"DefaultNetworkCardIndex:\s*(\d+)", body).group(1))  # type: ignore[union-attr]
        cards = {int(index): int(most) for most, index in re.findall(
            r"MaximumNetworkInterfaces:\s*(\d+),\s*NetworkCardIndex:\s*(\d+)", body)}
        vpc[name] = {"enis": cards.get(default, int(re.search(r"Interface:\s*(\d+)", body).group(1))),  # type: ignore[union-attr]
                     "ipv4_per_eni": int(re.search(r"IPv4PerInterface:\s*(\d+)", body).group(1)),  # type: ignore[union-attr]
                     "network_cards": len(cards)}
    price_src = (module_dir / "pkg" / "providers" / "pricing" / "zz_generated.pricing_aws.go").read_text()
    generated = re.search(r"// generated at (\S+) for (\S+)", price_src)
    region_start = price_src.index('"us-east-1": {')
    region_end = price_src.index("\n\t},", region_start)
    prices = {name: float(p) for name, p in re.findall(r'"([a-z0-9.-]+)":\s*([0-9.]+)',
                                                       price_src[region_start:region_end])}
    return {
        "source": f"{KARPENTER_MODULE}@{KARPENTER_VERSION}: pkg/providers/instancetype/zz_generated.bandwidth.go, "
                  "zz_generated.vpclimits.go (default network card's ENIs, IPv4 per ENI, cards), "
                  "pkg/providers/pricing/zz_generated.pricing_aws.go (on-demand, us-east-1"
                  + (f", generated at {generated.group(1)}" if generated else "") + ")",
        "bandwidth_mbps": dict(sorted(bandwidth.items())),
        "vpc_limits": dict(sorted(vpc.items())),
        "on_demand_usd_us_east_1": dict(sorted(prices.items())),
    }


@lru_cache(maxsize=1)
def karpenter_tables() -> dict[str, Any]:
    """The packaged tables (``data/karpenter_instance_tables.json``)."""
    data: dict[str, Any] = json.loads(TABLES_FILE.read_text())
    return data


@lru_cache(maxsize=1)
def accelerator_chips() -> list[dict[str, Any]]:
    """``data/accelerators.yaml``: what EC2's answer does not say about a chip, matched by its
    manufacturer, name and the memory EC2 reports."""
    chips: list[dict[str, Any]] = specload.load_data(ACCELERATORS_FILE.read_text())["accelerators"]
    return chips


# ---------------------------------------------------------------- DescribeInstanceTypes -> presets


def _chip(manufacturer: str, name: str, memory_mib: int) -> dict[str, Any] | None:
    for chip in accelerator_chips():
        if (chip["manufacturer"].lower(), chip["name"].lower()) == (manufacturer.lower(), name.lower()) \
                and chip.get("ec2_memory_mib", memory_mib) == memory_mib:
            return chip
    return None


def _accelerator(info: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the preset's accelerator, its chip row or {}) from GpuInfo or NeuronInfo."""
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    neurons = (info.get("NeuronInfo") or {}).get("NeuronDevices") or []
    if gpus:
        gpu = gpus[0]
        manufacturer, name = str(gpu.get("Manufacturer", "")), str(gpu.get("Name", ""))
        memory = int((gpu.get("MemoryInfo") or {}).get("SizeInMiB", 0))
        if manufacturer.upper() != "NVIDIA":
            return None, {}  # AMD/Habana/Xilinx: no Slurm GRES or device plugin modelled here
        chip = _chip(manufacturer, name, memory) or {}
        return {"kind": "nvidia", "model": chip.get("model", name), "count": int(gpu.get("Count", 0)),
                "memory_gib": chip.get("memory_gib", round(memory / 1024, 2)),
                "peak_bf16_tflops": chip.get("peak_bf16_tflops", 0), "resource": "nvidia.com/gpu",
                "gres_type": chip.get("gres_type", re.sub(r"[^a-z0-9]", "", name.lower()))}, chip
    if neurons:
        dev = neurons[0]
        name = str(dev.get("Name", ""))
        memory = int((dev.get("MemoryInfo") or {}).get("SizeInMiB", 0))
        chip = _chip("AWS", name, memory) or {}
        return {"kind": "neuron", "model": chip.get("model", name), "count": int(dev.get("Count", 0)),
                "memory_gib": chip.get("memory_gib", round(memory / 1024, 2)),
                "peak_bf16_tflops": chip.get("peak_bf16_tflops", 0), "resource": "aws.amazon.com/neuron",
                "gres_type": chip.get("gres_type", re.sub(r"[^a-z0-9]", "", name.lower())),
                "cores_per_device": int((dev.get("CoreInfo") or {}).get("Count", 0)),
                "logical_core_config": chip.get("logical_core_config", 1)}, chip
    return None, {}


def preset(info: dict[str, Any], tables: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """One DescribeInstanceTypes entry -> (name, preset in ``instance_types.yaml``'s layout)."""
    tables = tables or karpenter_tables()
    name = str(info["InstanceType"])
    net = info.get("NetworkInfo") or {}
    cards = net.get("NetworkCards") or []
    default_card = int(net.get("DefaultNetworkCardIndex", 0))
    enis = next((int(c["MaximumNetworkInterfaces"]) for c in cards if int(c.get("NetworkCardIndex", 0)) == default_card),
                int(net.get("MaximumNetworkInterfaces", 0)))
    accelerator, chip = _accelerator(info)
    bandwidth = tables["bandwidth_mbps"].get(name)
    arch = [a for a in (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or [] if a in ("x86_64", "arm64")]
    out: dict[str, Any] = {
        "vcpus": int(info["VCpuInfo"]["DefaultVCpus"]),
        "memory_gib": int(info["MemoryInfo"]["SizeInMiB"]) / 1024,
        "architecture": arch[0] if arch else "x86_64",
        "efa_interfaces": int((net.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0)),
        "enis": enis,
        "ipv4_per_eni": int(net.get("Ipv4AddressesPerInterface", 0)),
        # Karpenter's bandwidth table (baseline, Mbps); EC2's NetworkPerformance text where it has none
        "network_gbps": bandwidth / 1000 if bandwidth is not None else _gbps(str(net.get("NetworkPerformance", ""))),
        "price_per_hour_usd": tables["on_demand_usd_us_east_1"].get(name),
        "source": f"aws ec2 describe-instance-types; {tables['source'].split(':')[0]} tables",
    }
    if accelerator is not None:
        out["accelerator"] = accelerator
        out["efa_rdma"] = bool(chip.get("efa_rdma", False)) and out["efa_interfaces"] > 0
        out["intra_node_link"] = chip.get("intra_node_link")
        out["intra_node_gbytes_per_s"] = chip.get("intra_node_gbytes_per_s", 0)
    return name, out


def _gbps(text: str) -> float:
    m = re.search(r"([0-9.]+)\s*Gigabit", text)
    return float(m.group(1)) if m else 0.0


def import_describe_instance_types(path: Path) -> dict[str, dict[str, Any]]:
    """Presets for every type in a saved ``aws ec2 describe-instance-types --output json`` answer."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise SpecError(str(path), f"cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}:{exc.lineno}", f"not JSON: {exc.msg}") from None
    types = data.get("InstanceTypes") if isinstance(data, dict) else None
    if not isinstance(types, list) or not types:
        raise SpecError(str(path), "InstanceTypes: missing or empty (the output of aws ec2 "
                        "describe-instance-types --output json)")
    out = {}
    for i, info in enumerate(types):
        try:
            name, raw = preset(info)
        except (KeyError, TypeError, ValueError) as exc:
            raise SpecError(str(path), f"InstanceTypes[{i}]: malformed entry ({type(exc).__name__}: {exc})") from None
        out[name] = raw
    return dict(sorted(out.items()))


if __name__ == "__main__":  # regenerate data/karpenter_instance_tables.json from the Go module
    TABLES_FILE.write_text(json.dumps(karpenter_tables_from_module(Path(sys.argv[1])), indent=1) + "\n")
