"""Instance-type presets: data loads, figures are self-consistent, lookups suggest fixes."""

from __future__ import annotations

from pathlib import Path

import pytest

from slinkyml.errors import SpecError
from slinkyml.instances import DATA_FILE, get_instance_type, load_instance_types


def test_presets_load_and_are_consistent() -> None:
    types = load_instance_types()
    assert {"p5.48xlarge", "trn1.32xlarge", "m7i.8xlarge"} <= set(types)
    for name, t in types.items():
        assert t.vcpus > 0 and t.memory_gib > 0 and t.source.startswith("https://"), name
        if t.accelerator:
            assert t.accelerator.resource in ("nvidia.com/gpu", "aws.amazon.com/neuron"), name
            assert t.accelerator.count > 0 and t.accelerator.peak_bf16_tflops > 0, name
        if t.efa:
            assert t.network_gbps >= 100, name


@pytest.mark.parametrize(("name", "vcpus", "mem", "acc", "acc_mem", "efa", "gbps"), [
    # verified figures (see the verification log in instance_types.yaml)
    ("p4d.24xlarge", 96, 1152, 8, 40, 4, 400),
    ("p4de.24xlarge", 96, 1152, 8, 80, 4, 400),
    ("p5.48xlarge", 192, 2048, 8, 80, 32, 3200),
    ("p5e.48xlarge", 192, 2048, 8, 141, 32, 3200),
    ("p5en.48xlarge", 192, 2048, 8, 141, 16, 3200),
    ("g5.48xlarge", 192, 768, 8, 24, 1, 100),
    ("g6e.48xlarge", 192, 1536, 8, 48, 4, 400),
    ("trn1.32xlarge", 128, 512, 16, 32, 8, 800),
    ("trn2.48xlarge", 192, 2048, 16, 96, 16, 3200),
])
def test_verified_figures(name: str, vcpus: int, mem: int, acc: int, acc_mem: int, efa: int, gbps: int) -> None:
    t = get_instance_type(name)
    assert (t.vcpus, t.memory_gib, t.accelerator_count, t.accelerator.memory_gib, t.efa_interfaces,
            t.network_gbps) == (vcpus, mem, acc, acc_mem, efa, gbps)


def test_neuron_figures_from_neuron_docs() -> None:
    trn1, trn2 = get_instance_type("trn1.32xlarge"), get_instance_type("trn2.48xlarge")
    assert trn1.accelerator.peak_bf16_tflops == 190 and trn1.accelerator.cores_per_device == 2
    assert trn1.intra_node_gbytes_per_s == 384
    assert trn2.accelerator.peak_bf16_tflops == 667 and trn2.accelerator.cores_per_device == 8
    assert trn2.intra_node_gbytes_per_s == 1024


@pytest.mark.parametrize(("name", "price"), [
    # AWS Price List API, us-east-1 on-demand Linux (see [K-price] in instance_types.yaml)
    ("p4d.24xlarge", 21.957642), ("p4de.24xlarge", 27.44705), ("p5.48xlarge", 55.04),
    ("p5en.48xlarge", 63.296), ("g5.48xlarge", 16.288), ("g6e.48xlarge", 30.13118),
    ("trn1.32xlarge", 21.50), ("m7i.8xlarge", 1.6128), ("c7i.4xlarge", 0.714),
])
def test_verified_prices(name: str, price: float) -> None:
    assert get_instance_type(name).price_per_hour_usd == price


def test_unknown_type_suggests() -> None:
    with pytest.raises(SpecError, match=r"^node_sets\[1\]\.instance_type: unknown 'p5.48xlage' — did you mean "
                       r"'p5.48xlarge'\?; any other EC2 type: aws ec2 describe-instance-types .*$"):
        get_instance_type("p5.48xlage", field_path="node_sets[1].instance_type")


def test_user_file_overrides(tmp_path: Path) -> None:
    f = tmp_path / "types.yaml"
    f.write_text("instance_types:\n  p5.48xlarge:\n    vcpus: 192\n    memory_gib: 2048\n"
                 "    price_per_hour_usd: 40.0\n    source: https://example.com\n")
    assert load_instance_types(f)["p5.48xlarge"].price_per_hour_usd == 40.0
    assert load_instance_types()["p5.48xlarge"].price_per_hour_usd != 40.0
    assert DATA_FILE.exists()
