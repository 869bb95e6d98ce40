"""The trainer on one CPU process: model arithmetic, data determinism, checkpoints, precision."""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install '.[train]')")

from slinkyml.train import FINAL_FILE, METRICS_FILE  # noqa: E402
from slinkyml.train import checkpoint as ck  # noqa: E402
from slinkyml.train.model import GPT, PRESETS, GPTConfig, flops_per_token, mfu, param_count, synthetic_batch  # noqa: E402


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_param_count_matches_the_model(name):
    cfg = PRESETS[name]
    assert param_count(cfg) == sum(p.numel() for p in GPT(cfg).parameters())


def test_one_billion_config_really_has_about_a_billion_parameters():
    with torch.device("meta"):
        model = GPT(PRESETS["1b"])
    n = sum(p.numel() for p in model.parameters())
    assert n == param_count(PRESETS["1b"]) and 0.9e9 < n < 1.2e9


def test_mfu_formula():
    cfg = GPTConfig(vocab=100, seq_len=10, layers=1, hidden=8, heads=2)
    assert flops_per_token(cfg) == 6 * param_count(cfg) + 12 * 1 * 10 * 8
    # 1e4 tokens/s on a model of F FLOPs/token against a peak of 2F·1e4 is 50 %
    assert mfu(1e4, cfg, 2 * flops_per_token(cfg) * 1e4) == pytest.approx(0.5)


def test_synthetic_data_is_deterministic_per_seed_step_rank():
    cfg = PRESETS["tiny"]
    a = synthetic_batch(cfg, 4, seed=1, step=3, rank=0)
    assert all(torch.equal(x, y) for x, y in zip(a, synthetic_batch(cfg, 4, seed=1, step=3, rank=0), strict=True))
    assert not torch.equal(a[0], synthetic_batch(cfg, 4, seed=1, step=3, rank=1)[0])
    assert torch.equal(a[0][:, 1:], a[1][:, :-1])  # targets are the inputs shifted by one


def test_corrupt_newest_checkpoint_falls_back(tmp_path):
    for step in (5, 10):
        ck.temp_path(tmp_path, step).mkdir()
        torch.save({"v": step}, ck.temp_path(tmp_path, step) / "state.pt")
        ck.publish(tmp_path, step, {"x": 1}, keep=5)
    ck.temp_path(tmp_path, 15).mkdir()  # a crash mid-write leaves only a temp dir: ignored
    (ck.final_path(tmp_path, 10) / "state.pt").write_bytes(b"garbage")
    messages = []
    path, meta, state = ck.load_newest(tmp_path, lambda p: torch.load(p / "state.pt"), log=messages.append)
    assert meta["step"] == 5 and state == {"v": 5} and "ckpt-00000010" in messages[0]


def test_keep_last_k(tmp_path):
    for step in (1, 2, 3, 4):
        ck.temp_path(tmp_path, step).mkdir()
        ck.publish(tmp_path, step, {}, keep=2)
    assert [p.name for p in ck.checkpoint_dirs(tmp_path)] == ["ckpt-00000004", "ckpt-00000003"]


def _run(args, monkeypatch, tmp_path):
    from slinkyml.train.loop import main

    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    assert main([*args, "--checkpoint-dir", str(tmp_path)]) == 0
    rows = [json.loads(line) for line in (tmp_path / METRICS_FILE).read_text().splitlines()]
    return rows, json.loads((tmp_path / FINAL_FILE).read_text())


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_train_resume_continues_steps_and_loss(tmp_path, monkeypatch):
    rows, final = _run(["--steps", "6", "--checkpoint-every", "3"], monkeypatch, tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6] and final["allreduce"]["ok"]
    rows2, final2 = _run(["--steps", "10", "--checkpoint-every", "3"], monkeypatch, tmp_path)
    assert [r["step"] for r in rows2] == list(range(1, 11)) and final2["start_step"] == 6
    # an uninterrupted run gives the same curve: the resumed run continued, not restarted
    fresh = tmp_path / "fresh"
    rows3, _ = _run(["--steps", "10", "--checkpoint-every", "100"], monkeypatch, fresh)
    assert [r["loss"] for r in rows2] == pytest.approx([r["loss"] for r in rows3], rel=1e-4)
    assert rows2[-1]["loss"] < rows2[0]["loss"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_and_gradient_checkpointing(precision, tmp_path, monkeypatch):
    rows, final = _run(["--steps", "4", "--precision", precision, "--gradient-checkpointing"],
                       monkeypatch, tmp_path)
    assert final["precision"] == precision and all(r["loss"] == r["loss"] for r in rows)  # no NaN
    assert final["mfu"] is None and os.path.exists(tmp_path / "ckpt-00000004")
