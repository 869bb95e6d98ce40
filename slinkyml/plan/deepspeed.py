"""DeepSpeed configuration for a planned layout — a pure function, no DeepSpeed import (the tests
parse it with DeepSpeed's own ``DeepSpeedConfig``)."""

from __future__ import annotations

from typing import Any

from slinkyml.errors import SpecError

RECOMPUTE_CHOICES = ("none", "selective", "full")


def deepspeed_config(*, micro_batch: int, grad_accum: int, dp: int, zero: int = 1,
                     precision: str = "bf16", offload_optimizer: bool = False,
                     offload_params: bool = False, gradient_clipping: float = 1.0,
                     recompute: str = "none", tp: int = 1, pp: int = 1,
                     reduce_bucket_size: int = 200_000_000,
                     steps_per_print: int = 100) -> dict[str, Any]:
    """Return a DeepSpeed config dict for one data-parallel layout (keyword-only arguments).

    ``train_batch_size = micro_batch * grad_accum * dp``, so pass the plan's DP, not the GPU count.
    ``recompute="selective"`` is a Megatron flag and adds nothing here; ``tp``/``pp`` only validate.
    Raises :class:`~slinkyml.errors.SpecError` for combinations DeepSpeed would reject.
    """
    for name, value in (("micro_batch", micro_batch), ("grad_accum", grad_accum), ("dp", dp),
                        ("tp", tp), ("pp", pp)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise SpecError(name, f"must be a positive integer, got {value!r}")
    if zero not in (0, 1, 2, 3):
        raise SpecError("zero", f"ZeRO stage must be 0, 1, 2 or 3, got {zero!r}")
    if precision not in ("bf16", "fp16"):
        raise SpecError("precision", f"must be 'bf16' or 'fp16', got {precision!r}")
    if recompute not in RECOMPUTE_CHOICES:
        raise SpecError("recompute", f"must be one of {', '.join(RECOMPUTE_CHOICES)}, got {recompute!r}")
    if offload_optimizer and zero == 0:
        raise SpecError("offload_optimizer", "optimizer offload needs ZeRO stage 1, 2 or 3")
    if offload_params and zero != 3:
        raise SpecError("offload_params", "parameter offload needs ZeRO stage 3")
    if pp > 1 and zero > 1:
        raise SpecError("zero", f"ZeRO-{zero} cannot be used with pipeline parallelism (pp={pp}); "
                                "use ZeRO-1 or pp=1")
    if gradient_clipping < 0:
        raise SpecError("gradient_clipping", f"must be >= 0, got {gradient_clipping}")

    config: dict[str, Any] = {
        "train_batch_size": micro_batch * grad_accum * dp,
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": grad_accum,
        "gradient_clipping": float(gradient_clipping),
        "steps_per_print": steps_per_print,
        "wall_clock_breakdown": False,
    }
    if precision == "bf16":
        config["bf16"] = {"enabled": True}
    else:
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
                          "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1}
    zero_section: dict[str, Any] = {"stage": zero}
    if zero > 0:
        zero_section.update({"overlap_comm": True, "contiguous_gradients": True,
                             "reduce_scatter": True, "reduce_bucket_size": reduce_bucket_size,
                             "allgather_bucket_size": reduce_bucket_size})
    if zero == 3:
        zero_section.update({"stage3_prefetch_bucket_size": reduce_bucket_size,
                             "stage3_param_persistence_threshold": 1_000_000,
                             "stage3_gather_16bit_weights_on_model_save": True})
        zero_section.pop("allgather_bucket_size")
    if offload_optimizer:
        zero_section["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if offload_params:
        zero_section["offload_param"] = {"device": "cpu", "pin_memory": True}
    config["zero_optimization"] = zero_section
    if recompute == "full":
        config["activation_checkpointing"] = {
            "partition_activations": tp > 1, "contiguous_memory_optimization": False,
            "cpu_checkpointing": False, "number_checkpoints": None,
            "synchronize_checkpoint_boundary": False, "profile": False}
    return config


def config_for(candidate: Any, *, precision: str = "bf16", gradient_clipping: float = 1.0) -> dict[str, Any]:
    """:func:`deepspeed_config` for a planner candidate (``slinkyml.plan.search.Candidate``)."""
    return deepspeed_config(
        micro_batch=candidate.micro_batch, grad_accum=candidate.grad_accum, dp=candidate.dp,
        zero=candidate.zero, precision=precision, offload_optimizer=candidate.offload_optimizer,
        offload_params=candidate.offload_params, gradient_clipping=gradient_clipping,
        recompute=candidate.recompute, tp=candidate.tp, pp=candidate.pp)
