"""Every EC2 type from the user's own ``aws ec2 describe-instance-types`` answer, merged with
Karpenter's generated tables: the 11 hand-reviewed rows of ``data/instance_types.yaml`` are the
oracle the merged model must reproduce from a recorded answer for them.

``tests/data/describe-instance-types-reviewed.json`` is that answer, written from the facts the
reviewed rows cite (vCPUs, memory MiB, GPU/Neuron names, counts and the MiB EC2 reports, EFA
interfaces, architecture; network cards and IPv4 per ENI as Karpenter's generated vpclimits table
holds them; trn2.48xlarge, absent there, with the 2 ENIs x 50 addresses its 100 pods imply).
``describe-instance-types-new.json`` is input in the same shape for types the packaged presets lack
(r7i.8xlarge, the Graviton m7g.16xlarge, g6.12xlarge, p6-b200.48xlarge), for the render tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.addons import karpenter_allocatable
from slinkyml.cluster.install import SOURCE_PLACEHOLDER
from slinkyml.cluster.render import render
from slinkyml.cluster.spec import from_dict, to_dict
from slinkyml.errors import SpecError
from slinkyml.instance_import import (
    KARPENTER_VERSION,
    import_describe_instance_types,
    karpenter_tables,
    karpenter_tables_from_module,
)
from slinkyml.instances import DATA_FILE, _parse, get_instance_type, load_instance_types

DATA = Path(__file__).parent / "data"
REVIEWED = DATA / "describe-instance-types-reviewed.json"
NEW = DATA / "describe-instance-types-new.json"


def _imported(path: Path) -> dict[str, Any]:
    return {name: _parse(name, raw) for name, raw in import_describe_instance_types(path).items()}


def test_the_merged_model_reproduces_every_hand_reviewed_row() -> None:
    oracle = load_instance_types(DATA_FILE)
    merged = _imported(REVIEWED)
    assert sorted(merged) == sorted(oracle)
    for name, want in oracle.items():
        got = merged[name]
        for field in ("vcpus", "memory_gib", "accelerator", "efa_interfaces", "network_gbps", "intra_node_link",
                      "intra_node_gbytes_per_s", "price_per_hour_usd", "efa_rdma", "max_pods", "architecture"):
            assert getattr(got, field) == getattr(want, field), f"{name}.{field}"
        if want.max_pods_override is None:  # the rows with Karpenter's ENI figures
            assert (got.enis, got.ipv4_per_eni) == (want.enis, want.ipv4_per_eni), name
        assert karpenter_allocatable(got) == karpenter_allocatable(want), name


def test_an_imported_type_renders_with_its_allocatable_max_pods_and_architecture(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "types.yaml"
    done = subprocess.run([sys.executable, "-m", "slinkyml", "cluster", "import-instance-types", str(NEW),
                           "-o", str(out)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("SLINKYML_INSTANCE_TYPES", str(out))
    raw = to_dict(load_spec(EXAMPLES_DIR / "cpu-small" / "cluster.yaml"))
    raw["node_sets"] = [{"name": n.replace(".", "-"), "instance_type": n, "count": 1, "zone": "us-east-1a"}
                        for n in ("r7i.8xlarge", "m7g.16xlarge", "g6.12xlarge", "p6-b200.48xlarge")]
    rendered = render(from_dict(raw))
    pools = {o["spec"]["template"]["spec"]["requirements"][0]["values"][0]: o
             for o in rendered.objects if o["kind"] == "NodePool"}
    arch = {n: next(r["values"] for r in p["spec"]["template"]["spec"]["requirements"]
                    if r["key"] == "kubernetes.io/arch") for n, p in pools.items()}
    assert arch == {"r7i.8xlarge": ["amd64"], "m7g.16xlarge": ["arm64"], "g6.12xlarge": ["amd64"],
                    "p6-b200.48xlarge": ["amd64"]}
    r7i = get_instance_type("r7i.8xlarge")
    alloc = karpenter_allocatable(r7i)
    assert (r7i.vcpus, r7i.memory_gib, r7i.max_pods) == (32, 256, 8 * 29 + 2)  # Karpenter's ENI-limited pods
    assert r7i.network_gbps == 12.5 and r7i.price_per_hour_usd == karpenter_tables()["on_demand_usd_us_east_1"][
        "r7i.8xlarge"]
    assert alloc.max_pods == 234 and alloc.cpu_millis == 32000 - 60 - 10 - 10 - 70  # kube-reserved CPU ranges
    g6 = get_instance_type("g6.12xlarge")
    assert g6.accelerator is not None and (g6.accelerator.count, g6.accelerator.gres_type) == (4, "l4")
    nodeset = next(o for o in rendered.objects if o["kind"] == "NodeSet" and "g6-12xlarge" in o["metadata"]["name"])
    assert nodeset["spec"]["slurmd"]["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert "Gres=gpu:l4:4" in nodeset["spec"]["extraConf"]
    b200 = get_instance_type("p6-b200.48xlarge")
    assert b200.efa_interfaces == 8 and b200.efa_rdma and b200.max_pods == 4 * 49 + 2


def test_an_unknown_type_says_how_to_import_it() -> None:
    with pytest.raises(SpecError) as info:
        get_instance_type("x8g.48xlarge", field_path="node_sets[0].instance_type")
    message = str(info.value)
    assert "\n" not in message and "aws ec2 describe-instance-types" in message
    assert "slinkyml cluster import-instance-types" in message and "SLINKYML_INSTANCE_TYPES" in message
    with pytest.raises(SpecError, match="did you mean 'p5.48xlarge'"):  # a typo still gets its suggestion
        get_instance_type("p5.48xlage")


def test_bad_answers_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "a.json"
    for text, expected in (("{", r"a.json:1: not JSON"), ('{"InstanceTypes": []}', "InstanceTypes: missing or empty"),
                           ('{"InstanceTypes": [{"InstanceType": "x"}]}', r"InstanceTypes\[0\]: malformed entry")):
        bad.write_text(text)
        with pytest.raises(SpecError, match=expected) as info:
            import_describe_instance_types(bad)
        assert "\n" not in str(info.value)


def test_packaged_tables_are_the_pinned_karpenter_modules(go_module: Callable[[str], Path]) -> None:
    folder = go_module(f"github.com/aws/karpenter-provider-aws@{KARPENTER_VERSION}")
    assert karpenter_tables_from_module(folder) == json.loads(json.dumps(karpenter_tables()))
    assert re.search(r"@v\d+\.\d+\.\d+:", karpenter_tables()["source"])


def test_karpenter_is_installable_from_the_spec_names() -> None:
    raw = to_dict(load_spec(EXAMPLES_DIR / "h100-efa" / "cluster.yaml"))
    out = render(from_dict(raw))
    install = out.files["INSTALL.md"]
    classes = [o for o in out.objects if o["kind"] == "EC2NodeClass"]
    assert {o["spec"]["role"] for o in classes} == {"KarpenterNodeRole-training-eks"}
    assert {o["metadata"]["annotations"]["slinkyml.io/interruption-queue"] for o in classes} == {"training-eks"}
    assert "--set settings.clusterName=training-eks --set settings.interruptionQueue=training-eks" in install
    assert "--version 1.14.1" in install and "ClusterName=training-eks" in install
    # no placeholder after Karpenter's step but the images' build context, which install.sh takes from $SLINKYML_SOURCE
    assert "role/KarpenterNodeRole-training-eks" in install
    assert "<" not in install.split("Karpenter 1.14.1")[1].replace(SOURCE_PLACEHOLDER, "")
    assert install.index("AWS prerequisites") < install.index("**Karpenter 1.14.1**")
    raw["aws"].update(node_role="team-nodes", interruption_queue="team-interruptions")
    mine = render(from_dict(raw))
    assert {o["spec"]["role"] for o in mine.objects if o["kind"] == "EC2NodeClass"} == {"team-nodes"}
    assert "settings.interruptionQueue=team-interruptions" in mine.files["INSTALL.md"]
    assert "role/team-nodes" in mine.files["INSTALL.md"]
