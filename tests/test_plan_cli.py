"""`slinkyml plan` end to end: text with the arithmetic, JSON, config file, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slinkyml.cli import main
from slinkyml.plan.hardware import gpu_hardware, gpu_names, instance_hardware


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["plan", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_classic_example_80gb_check_shows_memory_arithmetic(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    rc, out, _ = run(capsys, "--params", "200e9", "--gpus", "64", "--gpu", "a100-80gb",
                     "--check", "8,4,2", "--no-offload", "--deepspeed-config", str(path))
    assert rc == 0
    assert "TP=8, PP=4, DP=2" in out and "FITS" in out
    assert "6.31B params/GPU x 2 + 2 + 16/DP=2 = 12.00 B" in out
    assert "recompute full" in out
    cfg = json.loads(path.read_text())
    assert cfg["train_batch_size"] == 1024 and cfg["zero_optimization"]["stage"] == 1


def test_classic_example_40gb_does_not_fit_without_offload(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "--params", "200e9", "--gpus", "64", "--gpu", "a100-40gb",
                     "--check", "8,4,2", "--no-offload")
    assert rc == 1
    assert "nothing fits" in out and "DOES NOT FIT" in out and "short" in out
    assert "what would fit" in out and "offload" in out


def test_json_and_model_shape(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "--layers", "48", "--hidden", "8192", "--heads", "64", "--gpus", "512",
                     "--instance-type", "p5.48xlarge", "--global-batch", "1536", "--json", "--top", "3")
    assert rc == 0
    doc = json.loads(out)
    assert doc["fits"] and len(doc["ranked"]) == 3
    best = doc["best"]
    assert best["tp"] * best["pp"] * best["dp"] == 512
    assert doc["deepspeed_config"]["train_batch_size"] == 1536
    assert doc["hardware"]["instance_type"] == "p5.48xlarge"


@pytest.mark.parametrize("argv,flag", [
    (["--params", "200e9", "--gpus", "64", "--gpu", "a100-81gb"], "--gpu"),
    (["--params", "200e9", "--gpus", "64", "--instance-type", "p9.nope"], "--instance-type"),
    (["--params", "200e9", "--gpus", "64", "--gpu", "a100-80gb", "--check", "8,4,4"], "--check"),
    (["--params", "200e9", "--gpus", "60", "--gpu", "a100-80gb"], "--gpus"),
    (["--gpus", "64", "--gpu", "a100-80gb"], "--params"),
    (["--layers", "10", "--gpus", "8", "--gpu", "a100-80gb"], "--hidden"),
    (["--params", "1e9", "--gpus", "8"], "--gpu"),
])
def test_user_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], flag: str) -> None:
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slinkyml: error: ") and flag in lines[0]


def test_bad_flag_value_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--params", "200e9", "--gpus", "64", "--gpu", "a100", "--check", "8,4"])
    assert exc.value.code == 2
    assert "--check" in capsys.readouterr().err.strip().splitlines()[-1]


def test_cli_module_imports_only_stdlib(imported_by) -> None:
    code = "import slinkyml.cli.plan, slinkyml.cli; slinkyml.cli.build_parser()"
    assert imported_by(code, ("numpy", "yaml", "rich", "torch", "deepspeed", "pandas")) == []


def test_planner_never_imports_torch_or_deepspeed(imported_by) -> None:
    code = ("from slinkyml.plan import plan, shape_from_params, gpu_hardware; "
            "plan(shape_from_params(70e9), gpu_hardware('h100-80gb'), 64)")
    assert imported_by(code, ("torch", "deepspeed")) == []


def test_gpu_table_agrees_with_instance_presets() -> None:
    """gpus.yaml and instance_types.yaml must not disagree about a device."""
    for name in gpu_names():
        gpu = gpu_hardware(name)
        inst = instance_hardware(gpu.instance_type)
        assert gpu.memory_gib == inst.memory_gib, name
        assert gpu.peak_bf16_tflops == inst.peak_bf16_tflops, name
        assert gpu.nvlink_domain <= gpu.gpus_per_node
