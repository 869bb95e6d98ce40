"""Human-readable and JSON answers: every verdict shows the arithmetic behind it."""

from __future__ import annotations

from typing import Any

from slinkyml.plan.deepspeed import config_for
from slinkyml.plan.hardware import GIB
from slinkyml.plan.memory import GRAD16, OPTIMIZER_STATES, PARAM16, SHARDED_STATES
from slinkyml.plan.search import Candidate, PlanResult


def _gib(x: float) -> str:
    return f"{x / GIB:.1f} GiB"


def state_formula(c: Candidate) -> str:
    """Bytes per parameter of the model states, as a formula with the numbers filled in."""
    d = c.dp
    val: float
    if c.zero == 0:
        per = f"({PARAM16} + {SHARDED_STATES}) = {PARAM16 + SHARDED_STATES} B"
        val = PARAM16 + SHARDED_STATES
    elif c.zero == 1:
        if c.offload_optimizer:
            per, val = f"{PARAM16} + {GRAD16} = 4 B (fp32 states on CPU)", 4.0
        else:
            val = PARAM16 + GRAD16 + OPTIMIZER_STATES / d
            per = f"{PARAM16} + {GRAD16} + {OPTIMIZER_STATES}/DP={d} = {val:.2f} B"
    elif c.zero == 2:
        if c.offload_optimizer:
            per, val = f"{PARAM16} B (fp32 states on CPU)", 2.0
        else:
            val = PARAM16 + SHARDED_STATES / d
            per = f"{PARAM16} + {SHARDED_STATES}/DP={d} = {val:.2f} B"
    else:
        if c.offload_params:
            per, val = "0 B (all on CPU) + one gathered module", 0.0
        elif c.offload_optimizer:
            val = PARAM16 / d
            per = f"{PARAM16}/DP={d} = {val:.2f} B + one gathered module"
        else:
            val = SHARDED_STATES / d
            per = f"{SHARDED_STATES}/DP={d} = {val:.2f} B + one gathered module"
    return f"{c.params_rank / 1e9:.2f}B params/GPU x {per}"


def explain_candidate(c: Candidate, *, indent: str = "  ") -> list[str]:
    verdict = "FITS" if c.fits else "DOES NOT FIT"
    margin = c.capacity - c.peak
    stage = "last" if c.last_stage_is_peak else "first"
    lines = [
        f"{c.split}; micro-batch {c.micro_batch} x {c.grad_accum} accumulation; ZeRO-{c.zero}; "
        f"recompute {c.recompute}; offload {c.offload}"
        + ("; sequence parallel" if c.sequence_parallel else "") + f" -> {verdict}",
        f"{indent}memory on the busiest GPU ({stage} pipeline stage, "
        f"{c.first_stage_layers} layers on the first stage):",
        f"{indent}  model states  {_gib(c.model_states):>11}  = {state_formula(c)}",
        f"{indent}  activations   {_gib(c.activations):>11}  (Korthikanti et al. 2022, "
        f"{min(c.pp, c.grad_accum)} micro-batch(es) in flight)",
        f"{indent}  overhead      {_gib(c.overhead):>11}  (CUDA context, NCCL, fragmentation)",
        f"{indent}  total         {_gib(c.peak):>11}  of {_gib(c.capacity)} -> "
        + (f"{_gib(margin)} spare" if margin >= 0 else f"{_gib(-margin)} short"),
    ]
    if c.host_per_node:
        lines.append(f"{indent}  host (pinned) {_gib(c.host_per_node):>11}  per node of "
                     f"{_gib(c.host_capacity)} usable"
                     + ("" if c.fits_host else " -> DOES NOT FIT in host memory"))
    lines.append(
        f"{indent}step time ~{c.step_time:.1f} s = compute {c.t_compute:.1f} + bubble {c.t_bubble:.1f} "
        f"({c.bubble:.1%}) + TP {c.t_tp:.1f} + PP {c.t_pp:.1f} + DP {c.t_dp:.1f} + offload "
        f"{c.t_offload:.1f}; ~{c.model_tflops_per_gpu:.0f} model TFLOP/s per GPU")
    lines += [f"{indent}note: {n}" for n in c.notes]
    return lines


def render(result: PlanResult) -> str:
    m, hw, s = result.model, result.hardware, result.settings
    out = [
        f"model: {m.describe()}",
        f"hardware: {result.gpus} x {hw.model} ({hw.memory_gib:g} GiB, {hw.peak_bf16_tflops:g} "
        f"TFLOP/s bf16) on {hw.instance_type}: {hw.gpus_per_node} per node, NVLink domain "
        f"{hw.nvlink_domain}, {hw.intra_node_gbytes_per_s:g} GB/s intra-node, "
        f"{hw.inter_node_gbytes_per_s:g} GB/s per GPU inter-node",
        f"batch: {s.global_batch} sequences x {m.seq} tokens; {s.precision}; efficiency "
        f"{s.efficiency:.0%} of peak",
    ]
    if result.checked:
        tp, pp, dp = result.checked
        out.append(f"checking TP={tp}, PP={pp}, DP={dp}: {result.evaluated} variants "
                   f"(micro-batch, ZeRO, recompute, offload), {result.feasible} fit")
    else:
        out.append(f"searched {result.evaluated} layouts, {result.feasible} fit")
    for p in result.problems:
        out.append(f"problem: {p}")
    if result.ranked:
        out.append("")
        out.append("best:" if not result.checked else "best at this split:")
        out += ["  " + line for line in explain_candidate(result.ranked[0])]
        if len(result.ranked) > 1:
            out.append("")
            out.append("next:")
            for c in result.ranked[1:]:
                out.append(f"  {c.step_time:8.1f} s  {c.split}, mb {c.micro_batch}, ZeRO-{c.zero}, "
                           f"recompute {c.recompute}, offload {c.offload}, {_gib(c.peak)}")
    elif result.closest is not None:
        out.append("")
        out.append("nothing fits; the closest:")
        out += ["  " + line for line in explain_candidate(result.closest)]
    if result.suggestions:
        out.append("")
        out.append("what would fit:")
        out += [f"  - {x}" for x in result.suggestions]
    return "\n".join(out)


def to_json(result: PlanResult) -> dict[str, Any]:
    best = result.best
    return {
        "model": {**{k: getattr(result.model, k) for k in ("layers", "hidden", "heads", "seq",
                                                          "vocab", "assumed")},
                  "params": result.model.params},
        "hardware": result.hardware.as_dict(),
        "gpus": result.gpus,
        "settings": {k: getattr(result.settings, k) for k in result.settings.__dataclass_fields__},
        "checked": list(result.checked) if result.checked else None,
        "evaluated": result.evaluated,
        "feasible": result.feasible,
        "fits": best is not None,
        "problems": result.problems,
        "best": best.as_dict() if best else None,
        "ranked": [c.as_dict() for c in result.ranked],
        "closest": result.closest.as_dict() if result.closest and not best else None,
        "suggestions": result.suggestions,
        "deepspeed_config": config_for(best, precision=result.settings.precision) if best else None,
    }
