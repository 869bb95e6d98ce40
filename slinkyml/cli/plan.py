"""``slinkyml plan``: how to split a model over the GPUs asked for, whether it fits, DeepSpeed config.

Only the standard library is imported here; the planner (numpy, yaml) loads inside the handler.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan", description="Search every tensor/pipeline/data-parallel split (and micro-batch, ZeRO stage, "
        "offload, activation recompute) for a model on N GPUs, judge memory per GPU and rank by "
        "estimated step time. Example: slinkyml plan --params 200e9 --gpus 64 --gpu a100-80gb "
        "--check 8,4,2")
    model = p.add_argument_group("model (either --params, or --layers/--hidden/--heads)")
    model.add_argument("--params", type=_positive_float, help="parameter count, e.g. 200e9")
    model.add_argument("--layers", type=_positive_int)
    model.add_argument("--hidden", type=_positive_int)
    model.add_argument("--heads", type=_positive_int)
    model.add_argument("--seq", type=_positive_int, default=2048, help="sequence length (2048)")
    model.add_argument("--vocab", type=_positive_int, default=51200, help="vocabulary (51200)")
    hw = p.add_argument_group("hardware")
    hw.add_argument("--gpus", type=_positive_int, required=True, help="number of devices")
    hw.add_argument("--gpu", help="device model: a100-40gb, a100-80gb, h100-80gb, h200-141gb, a10g, "
                                  "l40s, trainium, trainium2")
    hw.add_argument("--instance-type", help="EC2 instance preset instead of --gpu, e.g. p5.48xlarge")
    run = p.add_argument_group("run")
    run.add_argument("--global-batch", type=_positive_int, default=1024,
                     help="sequences per optimizer step (1024)")
    run.add_argument("--micro-batch", type=_positive_int, help="fix the micro-batch per GPU")
    run.add_argument("--zero", type=_zero_list, help="allowed ZeRO stages, e.g. 1 or 1,3 (all)")
    run.add_argument("--recompute", type=_recompute_list,
                     help="allowed activation recompute: none,selective,full (all)")
    run.add_argument("--no-offload", action="store_true", help="never offload to CPU memory")
    run.add_argument("--precision", choices=("bf16", "fp16"), default="bf16")
    run.add_argument("--efficiency", type=_fraction, default=0.45,
                     help="fraction of peak FLOP/s the kernels reach (0.45)")
    run.add_argument("--overhead-gib", type=_nonneg_float, default=3.0,
                     help="per-GPU memory reserved for CUDA/NCCL/fragmentation (3)")
    run.add_argument("--gradient-clipping", type=_nonneg_float, default=1.0)
    out = p.add_argument_group("output")
    out.add_argument("--check", type=_split, metavar="TP,PP,DP", help="judge this split only")
    out.add_argument("--deepspeed-config", metavar="PATH",
                     help="write the best layout's DeepSpeed config (JSON) here")
    out.add_argument("--json", action="store_true", help="print the answer as JSON")
    out.add_argument("--top", type=_positive_int, default=5, help="layouts to list (5)")
    p.set_defaults(handler=run_plan)


def _err(msg: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(msg)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _err(f"not a number: {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise _err(f"must be a positive number, got {text!r}")
    return value


def _nonneg_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _err(f"not a number: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise _err(f"must be >= 0, got {text!r}")
    return value


def _fraction(text: str) -> float:
    value = _positive_float(text)
    if value > 1:
        raise _err(f"must be in (0, 1], got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(float(text)) if "e" in text.lower() else int(text)
    except ValueError:
        raise _err(f"not an integer: {text!r}") from None
    if value <= 0:
        raise _err(f"must be a positive integer, got {text!r}")
    return value


def _split(text: str) -> tuple[int, int, int]:
    parts = text.replace("x", ",").split(",")
    if len(parts) != 3:
        raise _err(f"expected TP,PP,DP such as 8,4,2, got {text!r}")
    values = tuple(_positive_int(x.strip()) for x in parts)
    return values[0], values[1], values[2]


def _zero_list(text: str) -> tuple[int, ...]:
    try:
        stages = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise _err(f"expected stages like 1 or 1,3, got {text!r}") from None
    if not stages or any(z not in (0, 1, 2, 3) for z in stages):
        raise _err(f"ZeRO stages are 0, 1, 2, 3; got {text!r}")
    return stages


def _recompute_list(text: str) -> tuple[str, ...]:
    names = ("none", "selective", "full")
    chosen = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in chosen if x not in names]
    if bad or not chosen:
        raise _err(f"choose from none, selective, full; got {text!r}")
    return tuple(n for n in names if n in chosen)


def run_plan(args: argparse.Namespace) -> int:
    import json

    from slinkyml.errors import SpecError
    from slinkyml.plan import ModelShape, Settings, check, plan, resolve_hardware, shape_from_params
    from slinkyml.plan.deepspeed import config_for
    from slinkyml.plan.explain import render, to_json

    shape_flags = [args.layers, args.hidden, args.heads]
    if any(x is not None for x in shape_flags):
        missing = [f"--{n}" for n, x in zip(("layers", "hidden", "heads"), shape_flags, strict=True)
                   if x is None]
        if missing:
            raise SpecError(missing[0], "required with --layers/--hidden/--heads")
        model = ModelShape(layers=args.layers, hidden=args.hidden, heads=args.heads, seq=args.seq,
                           vocab=args.vocab, total_params=args.params)
    elif args.params is not None:
        model = shape_from_params(args.params, seq=args.seq, vocab=args.vocab)
    else:
        raise SpecError("--params", "give --params (e.g. 200e9) or --layers, --hidden and --heads")
    hw = resolve_hardware(args.gpu, args.instance_type)
    settings = Settings(
        global_batch=args.global_batch, precision=args.precision, efficiency=args.efficiency,
        overhead_gib=args.overhead_gib, zero_stages=args.zero or (0, 1, 2, 3),
        recompute=args.recompute or ("none", "selective", "full"), allow_offload=not args.no_offload,
        micro_batches=(args.micro_batch,) if args.micro_batch else None)
    if args.check:
        result = check(model, hw, args.gpus, args.check, settings, top=args.top)
    else:
        result = plan(model, hw, args.gpus, settings, top=args.top)
    if args.deepspeed_config:
        if result.best is None:
            raise SpecError("--deepspeed-config", "nothing fits, so there is no configuration to write "
                                                  "(run without --deepspeed-config to see why)")
        config = config_for(result.best, precision=args.precision,
                            gradient_clipping=args.gradient_clipping)
        try:
            with open(args.deepspeed_config, "w") as fh:
                json.dump(config, fh, indent=2)
                fh.write("\n")
        except OSError as exc:
            raise SpecError("--deepspeed-config", f"cannot write {args.deepspeed_config}: "
                                                  f"{exc.strerror}") from None
    if args.json:
        doc = to_json(result)
        if doc["deepspeed_config"] is not None:
            doc["deepspeed_config"]["gradient_clipping"] = args.gradient_clipping
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(render(result))
        if args.deepspeed_config:
            print(f"\nwrote DeepSpeed config: {args.deepspeed_config}")
    return 0 if result.best is not None else 1
