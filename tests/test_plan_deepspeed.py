"""The generated DeepSpeed configs parse with DeepSpeed's own config class."""

from __future__ import annotations

import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import pytest

pytest.importorskip("deepspeed", reason="deepspeed is not installed (pip install '.[train]')")

from deepspeed.runtime import config as ds_config_module
from deepspeed.runtime.config import DeepSpeedConfig

from slinkyml.errors import SpecError
from slinkyml.plan import Settings, check, deepspeed_config, gpu_hardware, shape_from_params
from slinkyml.plan.deepspeed import config_for


class _Mpu:
    """Stands in for Megatron's mpu so DeepSpeed sees the plan's data-parallel size."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


@pytest.fixture(autouse=True)
def _fake_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    # DeepSpeedConfig asks torch.distributed for the rank; without a process group it would
    # silently fall back to world size 1 and ignore the mpu.
    monkeypatch.setattr(ds_config_module.dist, "get_rank", lambda *a, **k: 0)


def _parse(cfg: dict, dp: int) -> DeepSpeedConfig:
    return DeepSpeedConfig(cfg, mpu=_Mpu(dp))


@pytest.mark.parametrize("zero,offload,offload_params", [
    (0, False, False), (1, False, False), (1, True, False), (2, False, False), (2, True, False),
    (3, False, False), (3, True, False), (3, True, True)])
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_configs_parse(zero: int, offload: bool, offload_params: bool, precision: str) -> None:
    cfg = deepspeed_config(micro_batch=2, grad_accum=16, dp=8, zero=zero, precision=precision,
                           offload_optimizer=offload, offload_params=offload_params,
                           gradient_clipping=1.0, recompute="full", tp=2)
    parsed = _parse(cfg, 8)
    assert parsed.train_batch_size == 2 * 16 * 8
    assert parsed.train_micro_batch_size_per_gpu == 2 and parsed.gradient_accumulation_steps == 16
    assert parsed.zero_optimization_stage == zero
    assert parsed.gradient_clipping == 1.0
    if precision == "bf16":
        assert parsed.bfloat16_config.enabled and not parsed.float16_config.enabled
    else:
        fp16 = parsed.float16_config
        assert fp16.enabled and fp16.loss_scale == 0  # 0 = dynamic loss scaling
        assert fp16.initial_scale_power == 16
    zc = parsed.zero_config
    if offload:
        assert zc.offload_optimizer is not None and zc.offload_optimizer.pin_memory
        assert str(zc.offload_optimizer.device).endswith("cpu")
    if offload_params:
        assert zc.offload_param is not None and zc.offload_param.pin_memory
    assert parsed.activation_checkpointing_config.partition_activations is True


def test_batch_inconsistent_with_dp_is_rejected_by_deepspeed() -> None:
    cfg = deepspeed_config(micro_batch=1, grad_accum=4, dp=2)
    with pytest.raises(AssertionError):
        _parse(cfg, 4)  # DeepSpeed's own check: train_batch = micro * accum * world


def test_plan_best_config_parses() -> None:
    result = check(shape_from_params(200e9), gpu_hardware("a100-80gb"), 64, (8, 4, 2),
                   Settings(allow_offload=False))
    best = result.best
    parsed = _parse(config_for(best), best.dp)
    assert parsed.train_batch_size == 1024 and parsed.zero_optimization_stage == 1
    assert parsed.activation_checkpointing_config.partition_activations  # full recompute, TP=8


@pytest.mark.parametrize("kwargs,field", [
    (dict(zero=0, offload_optimizer=True), "offload_optimizer"),
    (dict(zero=2, offload_params=True, offload_optimizer=True), "offload_params"),
    (dict(zero=2, pp=4), "zero"),
    (dict(precision="fp32"), "precision"),
    (dict(recompute="some"), "recompute"),
    (dict(micro_batch=0), "micro_batch"),
])
def test_invalid_combinations_are_user_errors(kwargs: dict, field: str) -> None:
    base = dict(micro_batch=1, grad_accum=1, dp=1)
    base.update(kwargs)
    with pytest.raises(SpecError) as err:
        deepspeed_config(**base)
    assert err.value.path == field
