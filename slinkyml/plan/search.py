"""Search over 3D-parallel layouts that divide the job evenly, judged for memory and ranked by an
estimated step time (:func:`evaluate`, one candidate or numpy arrays of all of them).

Step time: 6·P·tokens FLOPs (more with recompute) stretched by the pipeline bubble, plus TP, PP,
DP and offload traffic over NVLink, EFA or PCIe, with no overlap assumed (conservative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from slinkyml.errors import SpecError
from slinkyml.plan._xp import maximum, where
from slinkyml.plan.activations import (
    RECOMPUTE_FULL,
    RECOMPUTE_NAMES,
    RECOMPUTE_SELECTIVE,
    stage_activation_bytes,
)
from slinkyml.plan.hardware import GIB, Hardware, gpu_hardware, gpu_names
from slinkyml.plan.memory import host_bytes_per_node, model_state_bytes
from slinkyml.plan.model import ModelShape, stage_layers

#: (ZeRO stage, offload optimizer, offload parameters) combinations DeepSpeed supports.
ZERO_OPTIONS: tuple[tuple[int, bool, bool], ...] = (
    (0, False, False), (1, False, False), (1, True, False), (2, False, False), (2, True, False),
    (3, False, False), (3, True, False), (3, True, True),
)


@dataclass(frozen=True)
class Settings:
    """Everything about the run that is not the model or the hardware."""

    global_batch: int = 1024  # sequences per optimizer step
    precision: str = "bf16"
    efficiency: float = 0.45  # fraction of peak the math kernels sustain (MFU-like)
    overhead_gib: float = 3.0  # CUDA context, NCCL buffers, allocator fragmentation, DS buckets
    host_usable_fraction: float = 0.9  # of node RAM that pinned offload buffers may take
    sequence_parallel: bool = True  # Megatron SP whenever TP > 1
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    recompute: tuple[str, ...] = RECOMPUTE_NAMES
    allow_offload: bool = True
    micro_batches: tuple[int, ...] | None = None  # None: every divisor that fits the batch
    cpu_adam_params_per_s: float = 2e9  # per node, DeepSpeed CPU-Adam order of magnitude

    def __post_init__(self) -> None:
        if self.global_batch <= 0:
            raise SpecError("--global-batch", f"must be positive, got {self.global_batch}")
        if not 0 < self.efficiency <= 1:
            raise SpecError("--efficiency", f"must be in (0, 1], got {self.efficiency}")
        if self.precision not in ("bf16", "fp16"):
            raise SpecError("--precision", f"must be bf16 or fp16, got {self.precision!r}")
        bad = [r for r in self.recompute if r not in RECOMPUTE_NAMES]
        if bad or not self.recompute:
            raise SpecError("--recompute", f"choose from {', '.join(RECOMPUTE_NAMES)}")
        if not self.zero_stages or any(z not in (0, 1, 2, 3) for z in self.zero_stages):
            raise SpecError("--zero", "stages are 0, 1, 2 or 3")


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


# ----------------------------------------------------------------------------- the model


def evaluate(model: ModelShape, hw: Hardware, settings: Settings, *, tp: Any, pp: Any, dp: Any,
             mb: Any, zero: Any, recompute: Any, offload_optimizer: Any, offload_params: Any,
             first_layers: Any, last_layers: Any, most_layers: Any = None) -> dict[str, Any]:
    """Memory and step time of candidates (scalars, or numpy arrays of equal length)."""
    s, h, a, v, L = model.seq, model.hidden, model.heads, model.vocab, model.layers
    gpus = tp * pp * dp
    gas = settings.global_batch / (dp * mb)  # micro-batches per step per pipeline (m)
    sp = (tp > 1) & settings.sequence_parallel if hasattr(tp, "shape") else \
        (tp > 1 and settings.sequence_parallel)
    lp = model.layer_params
    embed = float(v * h)
    # Parameters per TP rank on the first / last stage (tied embedding copy on both ends).
    first_params = (first_layers * lp + embed + s * h) / tp
    last_params = (last_layers * lp + embed + 2 * h) / tp
    single = (L * lp + embed + s * h + 2 * h) / tp
    first_params = where(pp == 1, single, first_params)
    last_params = where(pp == 1, single, last_params)
    largest = model.largest_module_params / tp
    ms_first = model_state_bytes(first_params, largest, dp, zero, offload_optimizer, offload_params)
    ms_last = model_state_bytes(last_params, largest, dp, zero, offload_optimizer, offload_params)
    act_first, act_last = stage_activation_bytes(
        s=s, b=mb, h=h, a=a, v=v, t=tp, p=pp, micro_batches=gas, first_layers=first_layers,
        last_layers=last_layers, recompute=recompute, sp=sp, most_layers=most_layers)
    overhead = settings.overhead_gib * GIB
    total_first = ms_first + act_first + overhead
    total_last = ms_last + act_last + overhead
    last_is_peak = total_last > total_first
    peak = maximum(total_first, total_last)
    params_rank = maximum(first_params, last_params)
    host = host_bytes_per_node(params_rank, dp, zero, offload_optimizer, offload_params,
                               hw.gpus_per_node)
    fits_gpu = peak <= hw.memory_bytes
    fits_host = host <= hw.host_memory_gib * GIB * settings.host_usable_fraction
    # --- time
    tokens = settings.global_batch * s
    P = model.params
    flops_token = where(recompute == RECOMPUTE_FULL, 8.0 * P,
                        where(recompute == RECOMPUTE_SELECTIVE, 6.0 * P + 4.0 * s * h * L, 6.0 * P))
    rate = gpus * hw.peak_bf16_tflops * 1e12 * settings.efficiency
    t_compute = flops_token * tokens / rate
    bubble = (pp - 1) / (gas + pp - 1)
    t_pipeline = t_compute / (1 - bubble)  # = t_compute * (m + p - 1) / m
    act_bytes = 2.0 * s * mb * h  # one 16-bit activation tensor of a micro-batch
    node = hw.gpus_per_node
    tp_bw = where(tp <= node, hw.intra_node_gbytes_per_s, hw.inter_node_gbytes_per_s) * 1e9
    collectives = where(recompute == RECOMPUTE_FULL, 6.0, 4.0)
    tp_bytes = collectives * first_layers * gas * act_bytes * 2.0 * (tp - 1) / tp
    t_tp = tp_bytes / tp_bw
    pp_bw = where(tp * pp <= node, hw.intra_node_gbytes_per_s, hw.inter_node_gbytes_per_s) * 1e9
    t_pp = where(pp > 1, 2.0 * gas * act_bytes / tp / pp_bw, 0.0)
    dp_bw = where(gpus <= node, hw.intra_node_gbytes_per_s, hw.inter_node_gbytes_per_s) * 1e9
    ring = (dp - 1) / dp
    grad_bytes = 2.0 * params_rank  # 16-bit
    dp_volume = where(zero <= 1, 2.0 * grad_bytes * ring,
                      where(zero == 2, (gas + 1.0) * grad_bytes * ring, 3.0 * gas * grad_bytes * ring))
    t_dp = dp_volume / dp_bw
    shard = params_rank / dp
    pcie = hw.pcie_gbytes_per_s * 1e9
    t_offload = where(offload_optimizer & (zero > 0),
                      4.0 * shard / pcie
                      + shard / (settings.cpu_adam_params_per_s / node), 0.0)
    t_offload = t_offload + where(offload_params & (zero == 3), 2.0 * gas * 2.0 * shard / pcie, 0.0)
    step = t_pipeline + t_tp + t_pp + t_dp + t_offload
    return {
        "gas": gas, "params_rank": params_rank, "model_states": where(last_is_peak, ms_last, ms_first),
        "activations": where(last_is_peak, act_last, act_first), "overhead": overhead,
        "peak": peak, "last_stage_is_peak": last_is_peak, "host_per_node": host,
        "fits_gpu": fits_gpu, "fits_host": fits_host, "fits": fits_gpu & fits_host,
        "t_compute": t_compute, "t_bubble": t_pipeline - t_compute, "bubble": bubble, "t_tp": t_tp,
        "t_pp": t_pp, "t_dp": t_dp, "t_offload": t_offload, "step_time": step,
        "model_tflops_per_gpu": 6.0 * P * tokens / step / gpus / 1e12,
    }


# ----------------------------------------------------------------------------- candidates


@dataclass
class Candidate:
    """One judged layout, with the arithmetic that judged it."""

    tp: int
    pp: int
    dp: int
    micro_batch: int
    grad_accum: int
    zero: int
    recompute: str
    offload_optimizer: bool
    offload_params: bool
    sequence_parallel: bool
    first_stage_layers: int
    max_stage_layers: int
    params_rank: float
    model_states: float
    activations: float
    overhead: float
    peak: float
    capacity: float
    host_per_node: float
    host_capacity: float
    fits_gpu: bool
    fits_host: bool
    step_time: float
    t_compute: float
    t_bubble: float
    bubble: float
    t_tp: float
    t_pp: float
    t_dp: float
    t_offload: float
    model_tflops_per_gpu: float
    last_stage_is_peak: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.fits_gpu and self.fits_host

    @property
    def split(self) -> str:
        return f"TP={self.tp}, PP={self.pp}, DP={self.dp}"

    @property
    def offload(self) -> str:
        if self.offload_params:
            return "optimizer+params"
        return "optimizer" if self.offload_optimizer else "none"

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items()}
        out["fits"] = self.fits
        out["offload"] = self.offload
        return out


@dataclass
class Grid:
    """Column arrays of candidates (numpy)."""

    columns: dict[str, Any]

    def __len__(self) -> int:
        return int(len(self.columns["tp"]))


def _combos(settings: Settings, pp: int, dp: int) -> list[tuple[int, bool, bool]]:
    out = []
    for zero, opt, par in ZERO_OPTIONS:
        if zero not in settings.zero_stages or (opt and not settings.allow_offload):
            continue
        if pp > 1 and zero > 1:  # DeepSpeed's pipeline engine supports ZeRO-0/1 only
            continue
        if dp == 1 and zero > 0 and not opt:  # nothing to shard: same as ZeRO-0, don't list twice
            continue
        out.append((zero, opt, par))
    return out


def build_grid(model: ModelShape, hw: Hardware, gpus: int, settings: Settings, *,
               splits: list[tuple[int, int, int]] | None = None) -> Grid:
    """All candidates for ``gpus`` (or only the given (tp, pp, dp) splits), as numpy columns."""
    import numpy as np  # lazy: numpy only for the search (`import slinkyml.plan` stays light)

    if splits is None:
        splits = [(tp, pp, gpus // (tp * pp))
                  for tp in divisors(gpus) if tp <= hw.nvlink_domain and model.heads % tp == 0
                  for pp in divisors(gpus // tp) if model.layers % pp == 0]
    recomputes = [RECOMPUTE_NAMES.index(r) for r in settings.recompute]
    cols: dict[str, list[Any]] = {k: [] for k in (
        "tp", "pp", "dp", "mb", "zero", "recompute", "offload_optimizer", "offload_params",
        "first_layers", "last_layers", "most_layers")}
    for tp, pp, dp in splits:
        if settings.global_batch % dp:
            continue
        per_dp = settings.global_batch // dp
        mbs = [b for b in divisors(per_dp)
               if settings.micro_batches is None or b in settings.micro_batches]
        combos = _combos(settings, pp, dp)
        if not mbs or not combos:
            continue
        first, most, _ = stage_layers(model.layers, pp)
        last = first if model.layers % pp else most
        mb_a, combo_i, rc_a = np.meshgrid(np.array(mbs), np.arange(len(combos)), np.array(recomputes),
                                          indexing="ij")
        n = mb_a.size
        combo_arr = np.array(combos, dtype=np.int64)[combo_i.ravel()]
        cols["tp"].append(np.full(n, tp))
        cols["pp"].append(np.full(n, pp))
        cols["dp"].append(np.full(n, dp))
        cols["mb"].append(mb_a.ravel())
        cols["zero"].append(combo_arr[:, 0])
        cols["offload_optimizer"].append(combo_arr[:, 1].astype(bool))
        cols["offload_params"].append(combo_arr[:, 2].astype(bool))
        cols["recompute"].append(rc_a.ravel())
        # Busiest stage: uneven splits put the extra layer on the middle stages; the first
        # stage holds the most micro-batches, so judge it with the most layers too unless the
        # embedding takes a slot (Megatron-DeepSpeed type:transformer|embedding).
        cols["first_layers"].append(np.full(n, first))
        cols["last_layers"].append(np.full(n, last))
        cols["most_layers"].append(np.full(n, most))
    if not cols["tp"]:
        return Grid({k: np.zeros(0, dtype=np.int64 if k not in ("offload_optimizer", "offload_params")
                                 else bool) for k in cols})
    return Grid({k: np.concatenate(v) for k, v in cols.items()})


def evaluate_grid(model: ModelShape, hw: Hardware, settings: Settings, grid: Grid) -> dict[str, Any]:
    c = grid.columns
    import numpy as np  # lazy: numpy only for the search (`import slinkyml.plan` stays light)

    f = {k: c[k].astype(np.float64) for k in ("tp", "pp", "dp", "mb", "first_layers", "last_layers",
                                                 "most_layers")}
    return evaluate(model, hw, settings, tp=f["tp"], pp=f["pp"], dp=f["dp"], mb=f["mb"], zero=c["zero"],
                    recompute=c["recompute"], offload_optimizer=c["offload_optimizer"],
                    offload_params=c["offload_params"], first_layers=f["first_layers"],
                    last_layers=f["last_layers"], most_layers=f["most_layers"])


def evaluate_one(model: ModelShape, hw: Hardware, settings: Settings, *, tp: int, pp: int, dp: int,
                 mb: int, zero: int, recompute: str | int, offload_optimizer: bool = False,
                 offload_params: bool = False) -> Candidate:
    """Judge a single layout with plain Python numbers (no numpy)."""
    rc = RECOMPUTE_NAMES.index(recompute) if isinstance(recompute, str) else int(recompute)
    first, most, _ = stage_layers(model.layers, pp)
    last = first if model.layers % pp else most
    r = evaluate(model, hw, settings, tp=float(tp), pp=float(pp), dp=float(dp), mb=float(mb),
                 zero=zero, recompute=rc, offload_optimizer=offload_optimizer,
                 offload_params=offload_params, first_layers=float(first), last_layers=float(last),
                 most_layers=float(most))
    return _candidate(model, hw, settings, dict(tp=tp, pp=pp, dp=dp, mb=mb, zero=zero, recompute=rc,
                                               offload_optimizer=offload_optimizer,
                                               offload_params=offload_params), r)


def _candidate(model: ModelShape, hw: Hardware, settings: Settings, row: dict[str, Any],
               r: dict[str, Any]) -> Candidate:
    tp, pp = int(row["tp"]), int(row["pp"])
    first, most, emb_slot = stage_layers(model.layers, pp)
    notes = []
    if model.layers % pp:
        notes.append(f"{model.layers} layers do not divide evenly over {pp} stages: "
                     + ("embedding and output layer take one slot each "
                        "(Megatron-DeepSpeed --pp-partition-method 'type:transformer|embedding'), "
                        if emb_slot else "")
                     + f"first stage {first} layers, up to {most} on others")
    if tp > hw.nvlink_domain:
        notes.append(f"TP={tp} spans more than one {hw.nvlink_domain}-device NVLink domain: "
                     "tensor-parallel all-reduces go over the network")
    return Candidate(
        tp=tp, pp=pp, dp=int(row["dp"]), micro_batch=int(row["mb"]), grad_accum=int(round(r["gas"])),
        zero=int(row["zero"]), recompute=RECOMPUTE_NAMES[int(row["recompute"])],
        offload_optimizer=bool(row["offload_optimizer"]), offload_params=bool(row["offload_params"]),
        sequence_parallel=bool(tp > 1 and settings.sequence_parallel),
        first_stage_layers=first, max_stage_layers=most,
        params_rank=float(r["params_rank"]), model_states=float(r["model_states"]),
        activations=float(r["activations"]), overhead=float(r["overhead"]), peak=float(r["peak"]),
        capacity=hw.memory_bytes, host_per_node=float(r["host_per_node"]),
        host_capacity=hw.host_memory_gib * GIB * settings.host_usable_fraction,
        fits_gpu=bool(r["fits_gpu"]), fits_host=bool(r["fits_host"]),
        step_time=float(r["step_time"]), t_compute=float(r["t_compute"]),
        t_bubble=float(r["t_bubble"]), bubble=float(r["bubble"]), t_tp=float(r["t_tp"]),
        t_pp=float(r["t_pp"]), t_dp=float(r["t_dp"]), t_offload=float(r["t_offload"]),
        model_tflops_per_gpu=float(r["model_tflops_per_gpu"]),
        last_stage_is_peak=bool(r["last_stage_is_peak"]), notes=notes)


def _pick(model: ModelShape, hw: Hardware, settings: Settings, grid: Grid, r: dict[str, Any],
          index: Any) -> list[Candidate]:
    c = grid.columns
    out = []
    for i in index:
        row = {k: c[k][i] for k in ("tp", "pp", "dp", "mb", "zero", "recompute",
                                    "offload_optimizer", "offload_params")}
        one = {k: (v[i] if hasattr(v, "shape") and bool(getattr(v, "ndim", 0)) else v) for k, v in r.items()}
        out.append(_candidate(model, hw, settings, row, one))
    return out


# ----------------------------------------------------------------------------- answers


@dataclass
class PlanResult:
    """The search's answer: ranked feasible layouts, or the closest miss and what would fit."""

    model: ModelShape
    hardware: Hardware
    gpus: int
    settings: Settings
    evaluated: int
    feasible: int
    ranked: list[Candidate]
    closest: Candidate | None
    suggestions: list[str]
    checked: tuple[int, int, int] | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def best(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None


def search(model: ModelShape, hw: Hardware, gpus: int, settings: Settings, *, top: int = 5,
           splits: list[tuple[int, int, int]] | None = None) -> tuple[int, int, list[Candidate],
                                                                       Candidate | None]:
    """(evaluated, feasible, best ``top`` feasible by step time, the lowest-memory candidate)."""
    import numpy as np  # lazy: numpy only for the search (`import slinkyml.plan` stays light)

    grid = build_grid(model, hw, gpus, settings, splits=splits)
    if not len(grid):
        return 0, 0, [], None
    r = evaluate_grid(model, hw, settings, grid)
    fits = np.asarray(r["fits"])
    feasible = int(fits.sum())
    ranked: list[Candidate] = []
    if feasible:
        idx = np.flatnonzero(fits)
        order = idx[np.argsort(np.asarray(r["step_time"])[idx], kind="stable")[:top]]
        ranked = _pick(model, hw, settings, grid, r, order)
    # closest: smallest overshoot relative to capacity (GPU or host, whichever binds)
    over = np.maximum(np.asarray(r["peak"]) / hw.memory_bytes,
                      np.asarray(r["host_per_node"]) / (hw.host_memory_gib * GIB
                                                        * settings.host_usable_fraction))
    closest = _pick(model, hw, settings, grid, r, [int(np.argmin(over))])[0]
    return len(grid), feasible, ranked, closest


def _validate(gpus: int, hw: Hardware) -> None:
    if gpus <= 0:
        raise SpecError("--gpus", f"must be a positive integer, got {gpus}")
    if gpus > hw.gpus_per_node and gpus % hw.gpus_per_node:
        raise SpecError("--gpus", f"{gpus} is not a whole number of {hw.instance_type} nodes "
                                  f"({hw.gpus_per_node} devices each)")


def plan(model: ModelShape, hw: Hardware, gpus: int, settings: Settings | None = None, *,
         top: int = 5, suggest: bool = True) -> PlanResult:
    """Search every layout for ``gpus`` devices and rank the ones that fit."""
    settings = settings or Settings()
    _validate(gpus, hw)
    evaluated, feasible, ranked, closest = search(model, hw, gpus, settings, top=top)
    problems = []
    if not evaluated:
        problems.append(f"no layout divides the job: TP must divide {model.heads} heads and stay "
                        f"within {hw.nvlink_domain} devices, PP must divide {model.layers} layers, "
                        f"and DP must divide the global batch {settings.global_batch}")
    result = PlanResult(model, hw, gpus, settings, evaluated, feasible, ranked, closest, [],
                        problems=problems)
    if not ranked and suggest:
        result.suggestions = suggestions(model, hw, gpus, settings)
    return result


def check(model: ModelShape, hw: Hardware, gpus: int, split: tuple[int, int, int],
          settings: Settings | None = None, *, top: int = 5, suggest: bool = True) -> PlanResult:
    """Judge one (TP, PP, DP) split: the best micro-batch / ZeRO / recompute / offload at it."""
    settings = settings or Settings()
    tp, pp, dp = split
    if min(split) <= 0:
        raise SpecError("--check", f"TP, PP and DP must be positive, got {tp},{pp},{dp}")
    if tp * pp * dp != gpus:
        raise SpecError("--check", f"TP x PP x DP = {tp}x{pp}x{dp} = {tp * pp * dp}, "
                                   f"but --gpus is {gpus}")
    problems = []
    if model.heads % tp:
        problems.append(f"TP={tp} does not divide {model.heads} attention heads")
    if settings.global_batch % dp:
        problems.append(f"DP={dp} does not divide the global batch {settings.global_batch}")
    if pp > model.layers:
        problems.append(f"PP={pp} is more stages than {model.layers} layers")
    if problems:
        result = PlanResult(model, hw, gpus, settings, 0, 0, [], None, [], checked=split,
                            problems=problems)
        if suggest:
            result.suggestions = suggestions(model, hw, gpus, settings, split=split)
        return result
    evaluated, feasible, ranked, closest = search(model, hw, gpus, settings, top=top,
                                                  splits=[split])
    result = PlanResult(model, hw, gpus, settings, evaluated, feasible, ranked, closest, [],
                        checked=split)
    if not ranked and suggest:
        result.suggestions = suggestions(model, hw, gpus, settings, split=split)
    return result


def _fits_with(model: ModelShape, hw: Hardware, gpus: int, settings: Settings,
               split: tuple[int, int, int] | None) -> Candidate | None:
    try:
        if split is not None:
            res = check(model, hw, gpus, split, settings, top=1, suggest=False)
        else:
            res = plan(model, hw, gpus, settings, top=1, suggest=False)
    except SpecError:
        return None
    return res.best


def suggestions(model: ModelShape, hw: Hardware, gpus: int, settings: Settings,
                split: tuple[int, int, int] | None = None) -> list[str]:
    """When nothing fits: which single change would (ZeRO-3, offload, recompute, more GPUs, a
    different split, a bigger device)."""
    out: list[str] = []
    everything = replace(settings, zero_stages=(0, 1, 2, 3), allow_offload=True,
                         recompute=RECOMPUTE_NAMES, micro_batches=None)
    relaxations = [
        ("ZeRO-3", replace(settings, zero_stages=tuple(sorted(set(settings.zero_stages) | {3})))),
        ("CPU offload of optimizer states (and parameters with ZeRO-3)",
         replace(settings, allow_offload=True)),
        ("full activation recompute", replace(settings, recompute=tuple(
            sorted(set(settings.recompute) | {"full"}, key=RECOMPUTE_NAMES.index)))),
        ("micro-batch 1", replace(settings, micro_batches=None)),
        ("all of ZeRO stages, offload, recompute and micro-batch sizes", everything),
    ]
    for label, relaxed in relaxations:
        if relaxed == settings:
            continue
        best = _fits_with(model, hw, gpus, relaxed, split)
        if best:
            out.append(f"enable {label}: fits as {_short(best)}")
            break
    if split is not None:
        tp, pp, dp = split
        if pp > 1 and not out:
            out.append("ZeRO-2/3 cannot combine with pipeline parallelism in DeepSpeed; "
                       "a split with PP=1 could use ZeRO-3")
        best = _fits_with(model, hw, gpus, everything, None)
        if best and (best.tp, best.pp, best.dp) != split:
            out.append(f"a different split of the same {gpus} GPUs fits: {_short(best)}")
    step = hw.gpus_per_node if gpus >= hw.gpus_per_node else gpus
    for factor in range(2, 33):
        more = gpus * factor
        if split is not None:
            tp, pp, dp = split
            more = tp * pp * dp * factor
            best = _fits_with(model, hw, more, settings, (tp, pp, dp * factor))
            if best is None:
                best = _fits_with(model, hw, more, everything, (tp, pp, dp * factor))
        else:
            if more % step:
                continue
            best = _fits_with(model, hw, more, settings, None) or _fits_with(model, hw, more, everything, None)
        if best:
            out.append(f"more GPUs: {more} ({more // max(hw.gpus_per_node, 1)} x {hw.instance_type}) "
                       f"fit as {_short(best)}")
            break
    else:
        out.append(f"even {gpus * 32} GPUs do not fit this model on {hw.model}")
    bigger = []
    for name in gpu_names():
        other = gpu_hardware(name)
        if other.memory_gib <= hw.memory_gib or (gpus > other.gpus_per_node
                                                  and gpus % other.gpus_per_node):
            continue
        best = _fits_with(model, other, gpus, everything, None)
        if best:
            bigger.append(f"{name} ({_short(best)})")
    if bigger:
        out.append(f"devices with more memory at {gpus} GPUs: " + "; ".join(bigger[:3]))
    return out


def _short(c: Candidate) -> str:
    return (f"{c.split}, micro-batch {c.micro_batch}, ZeRO-{c.zero}, recompute {c.recompute}, "
            f"offload {c.offload}, {c.peak / GIB:.1f} of {c.capacity / GIB:.0f} GiB")
