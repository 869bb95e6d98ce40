"""The training loop: DDP or DeepSpeed, bf16/fp16/fp32, checkpoints, preemption, metrics.

Started once per process by torchrun (or DeepSpeed's launcher); a lone ``python -m slinkyml.train``
runs as a world of one. On the preemption signal (``$SLINKYML_PREEMPT_SIGNAL``, default USR2) or
SIGTERM every rank finishes its step, the ranks agree (an all-reduce of the flag) to stop at the
same step, checkpoint, leave the preemption marker and exit 0 — the batch script then requeues the
job. A rank that raises leaves one line in the failure marker (see :mod:`slinkyml.slurm.protocol`).
Under a launcher every rank dies with its launcher (``PR_SET_PDEATHSIG``): no orphan keeps training.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from slinkyml.plan.hardware import peak_for_device_name
from slinkyml.slurm import protocol
from slinkyml.train import FINAL_FILE, METRICS_FILE
from slinkyml.train import checkpoint as ck


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m slinkyml.train", description=__doc__)
    p.add_argument("--model", default="tiny", help="tiny | small | 1b (see slinkyml.train.model.PRESETS)")
    p.add_argument("--layers", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--steps", type=int, default=20, help="total optimizer steps of the run")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--deepspeed", action="store_true", help="train with DeepSpeed (config from "
                   "--deepspeed-config or $SLINKYML_DEEPSPEED_CONFIG)")
    p.add_argument("--deepspeed-config")
    p.add_argument("--zero", type=int, help="override the config's ZeRO stage")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    p.add_argument("--checkpoint-dir", default=os.environ.get(protocol.ENV_CHECKPOINT_DIR))
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--keep", type=int, default=2, help="checkpoints to keep")
    p.add_argument("--metrics-dir", help="default: the checkpoint dir, else $SLINKYML_LOG_DIR, else .")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="sleep after each step (tests: leave time to preempt mid-run)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="per-device peak for the MFU estimate (GPU only); default: the dense BF16 peak "
                   "of the GPU model detected (slinkyml/data/gpus.yaml), none for an unknown model")
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "checkpoint_every", "keep"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be ≥ 1")
    return args


class StopFlag:
    """A stop request: set by the signal handler, agreed on by every rank at a step boundary
    (kept apart, so a signal during an all-reduce reaches the next step).
    """

    def __init__(self) -> None:
        self.requested = False
        self.signal = ""
        self.agreed = False

    def request(self, signame: str) -> bool:
        """From a signal handler; True the first time."""
        first = not self.requested
        self.requested = True
        self.signal = self.signal or signame
        return first

    def all_reduce(self, torch: Any, dist: Any, loss: float, device: Any, world: int) -> float:
        """One all-reduce per step: the mean loss, and whether any rank was asked to stop."""
        flags = torch.tensor([loss, 1.0 if self.requested else 0.0], device=device)
        dist.all_reduce(flags)
        self.agreed = self.agreed or float(flags[1].item()) > 0
        return float(flags[0].item()) / world


class Trainer:
    def __init__(self, args: argparse.Namespace):
        import torch  # lazy: torch only once training starts

        self.args = args
        self.torch = torch
        self.cuda = torch.cuda.is_available()
        if args.deepspeed and not self.cuda:
            # DeepSpeed's CPU accelerator; a torch optimizer avoids JIT-building FusedAdam.
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.device = torch.device(f"cuda:{self.local_rank}" if self.cuda else "cpu")
        if self.cuda:
            torch.cuda.set_device(self.device)
        self.restart = int(os.environ.get(protocol.ENV_RESTART, "0"))
        self.stop = StopFlag()
        self.ckpt_dir = Path(args.checkpoint_dir) if args.checkpoint_dir else None
        metrics = args.metrics_dir or args.checkpoint_dir or os.environ.get(protocol.ENV_LOG_DIR) or "."
        self.metrics_dir = Path(metrics)

    # -- output -------------------------------------------------------------------------------
    def log(self, message: str) -> None:
        print(f"[rank {self.rank}] {message}", flush=True)

    # -- setup --------------------------------------------------------------------------------
    def init_distributed(self) -> None:
        import torch.distributed as dist  # lazy: torch only once training starts

        backend = self.args.backend
        if backend == "auto":
            backend = "nccl" if self.cuda else "gloo"
        if "MASTER_ADDR" not in os.environ:  # a world of one, outside any launcher
            os.environ["MASTER_ADDR"] = "127.0.0.1"
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(s.getsockname()[1])
        if self.args.deepspeed:
            import deepspeed  # lazy: torch only once training starts

            from slinkyml.train.deepspeed_op import clear_stale_lock

            removed = clear_stale_lock()  # else init_distributed waits on it for ever
            if removed:
                self.log(f"removed {removed}, left by a killed build")
            deepspeed.init_distributed(dist_backend=backend, rank=self.rank, world_size=self.world)
        else:
            dist.init_process_group(backend, rank=self.rank, world_size=self.world)
        self.dist = dist

    def allreduce_check(self) -> dict[str, Any]:
        """Each rank contributes rank+1; the sum must be W(W+1)/2 everywhere."""
        t = self.torch.tensor([float(self.rank + 1)], device=self.device)
        self.dist.all_reduce(t)
        expected = self.world * (self.world + 1) / 2
        ok = abs(float(t.item()) - expected) < 1e-6
        self.log(f"all-reduce check: world={self.world} sum={t.item():g} expected={expected:g} "
                 f"{'ok' if ok else 'FAILED'}")
        return {"world_size": self.world, "sum": float(t.item()), "expected": expected, "ok": ok}

    def build(self) -> None:
        from slinkyml.train.model import GPT, PRESETS  # lazy: torch only once training starts

        torch, args = self.torch, self.args
        if args.model not in PRESETS:
            raise SystemExit(f"unknown --model {args.model!r}; have {', '.join(PRESETS)}")
        base = PRESETS[args.model]
        overrides = {k: getattr(args, a) for k, a in (("layers", "layers"), ("hidden", "hidden"),
                     ("heads", "heads"), ("vocab", "vocab"), ("seq_len", "seq_len"))
                     if getattr(args, a) is not None}
        self.cfg = replace(base, **overrides)
        torch.manual_seed(args.seed)  # identical initial weights on every rank
        with self.device:  # build in place: a 1B model never passes through host memory
            model = GPT(self.cfg, gradient_checkpointing=args.gradient_checkpointing)
        self.dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
        if args.deepspeed:
            self._build_deepspeed(model)
        else:
            from torch.nn.parallel import DistributedDataParallel as DDP  # lazy: as torch above

            self.model = DDP(model, device_ids=[self.local_rank] if self.cuda else None)
            self.raw_model = model
            # fused AdamW: one kernel for all parameters on CUDA (several % of a step at 1B)
            self.optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0,
                                               fused=True if self.cuda else None)
            # fp16 needs dynamic loss scaling; bf16 has fp32's range and needs none.
            self.scaler = torch.amp.GradScaler(self.device.type, enabled=args.precision == "fp16")

    def _build_deepspeed(self, model: Any) -> None:
        import deepspeed  # lazy: torch only once training starts

        args = self.args
        path = args.deepspeed_config or os.environ.get("SLINKYML_DEEPSPEED_CONFIG")
        config: dict[str, Any] = json.loads(Path(path).read_text()) if path else {}
        # The trainer owns the batch arithmetic and precision; the config supplies the rest.
        config["train_micro_batch_size_per_gpu"] = args.batch_size
        config["gradient_accumulation_steps"] = 1
        config["train_batch_size"] = args.batch_size * self.world
        config["bf16"] = {"enabled": args.precision == "bf16"}
        config["fp16"] = ({"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
                          if args.precision == "fp16" else {"enabled": False})
        config.setdefault("zero_optimization", {"stage": 2})
        if args.zero is not None:
            config["zero_optimization"]["stage"] = args.zero
        config["steps_per_print"] = 10**9
        config.pop("optimizer", None)  # a torch optimizer: no JIT-built FusedAdam
        config.pop("activation_checkpointing", None)
        optimizer = self.torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        self.model, self.optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                                                config=config)
        self.raw_model = model

    # -- checkpoints --------------------------------------------------------------------------
    def save(self, step: int, losses: list[float]) -> None:
        if self.ckpt_dir is None:
            return
        tmp = ck.temp_path(self.ckpt_dir, step)
        if self.rank == 0:
            self.ckpt_dir.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir()
        self.dist.barrier()
        if self.args.deepspeed:
            self.model.save_checkpoint(str(tmp), tag="state", save_latest=False)  # type: ignore[operator]  # a DeepSpeed engine
        elif self.rank == 0:
            state = {"model": self.raw_model.state_dict(), "optimizer": self.optimizer.state_dict(),
                     "scaler": self.scaler.state_dict()}
            with open(tmp / "state.pt", "wb") as fh:
                self.torch.save(state, fh)
                fh.flush()
                os.fsync(fh.fileno())
        self.dist.barrier()
        if self.rank == 0:
            path = ck.publish(self.ckpt_dir, step, {"restart": self.restart, "last_loss": losses[-1]
                                                    if losses else None, "world_size": self.world},
                              keep=self.args.keep)
            self.log(f"checkpoint saved: {path.name}")
        self.dist.barrier()

    def resume(self) -> int:
        if self.ckpt_dir is None:
            return 0

        def load(path: Path) -> None:
            if self.args.deepspeed:
                loaded, _ = self.model.load_checkpoint(str(path), tag="state")  # type: ignore[operator]  # a DeepSpeed engine
                if loaded is None:
                    raise RuntimeError("DeepSpeed found no checkpoint files")
            else:
                state = self.torch.load(path / "state.pt", map_location=self.device, weights_only=True)
                self.raw_model.load_state_dict(state["model"])
                self.optimizer.load_state_dict(state["optimizer"])
                self.scaler.load_state_dict(state["scaler"])

        found = ck.load_newest(self.ckpt_dir, load, log=self.log)
        if found is None:
            self.log("no checkpoint: starting at step 0")
            return 0
        path, meta, _ = found
        self.log(f"resumed from {path.name} at step {meta['step']}")
        return int(meta["step"])

    # -- the loop -----------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        name = os.environ.get(protocol.ENV_SIGNAL, "USR2")
        sigs = {getattr(signal, f"SIG{name}", signal.SIGUSR2), getattr(signal, f"SIG{protocol.SLURM_STOP_SIGNAL}")}

        def handler(signum: int, _frame: Any) -> None:
            if self.stop.request(signal.Signals(signum).name.removeprefix("SIG")):
                print(f"[rank {self.rank}] {signal.Signals(signum).name} received: will checkpoint "
                      "and stop after this step", flush=True)

        for sig in sigs:
            signal.signal(sig, handler)

    def step(self, step: int) -> float:
        from slinkyml.train.model import synthetic_batch  # lazy: torch only once training starts

        torch, args = self.torch, self.args
        x, y = synthetic_batch(self.cfg, args.batch_size, seed=args.seed, step=step, rank=self.rank,
                               device=self.device)
        autocast = torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None
                                  and not args.deepspeed)
        if args.deepspeed:
            loss = self.model(x, y)
            self.model.backward(loss)  # type: ignore[operator]  # a DeepSpeed engine
            self.model.step()  # type: ignore[operator]  # a DeepSpeed engine
        else:
            with autocast:
                loss = self.model(x, y)
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        return self.stop.all_reduce(torch, self.dist, loss.detach().float().item(), self.device, self.world)

    def run(self) -> int:
        args = self.args
        self.install_signal_handlers()
        self.init_distributed()
        check = self.allreduce_check()
        self.build()
        start_step = self.resume()
        if self.rank == 0:
            self.metrics_dir.mkdir(parents=True, exist_ok=True)
        tokens_per_step = args.batch_size * self.cfg.seq_len * self.world
        losses: list[float] = []
        step = start_step
        t_start = time.perf_counter()
        timed_tokens, timed_secs = 0, 0.0
        while step < args.steps:
            t0 = time.perf_counter()
            loss = self.step(step + 1)
            if self.cuda:
                self.torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            step += 1
            losses.append(loss)
            if step > start_step + 1:  # the first step includes warm-up (allocations, NCCL setup)
                timed_tokens += tokens_per_step
                timed_secs += dt
            if self.rank == 0:
                record = {"step": step, "loss": round(loss, 6), "tokens": tokens_per_step * step,
                          "time": round(dt, 6), "restart": self.restart, "wall": time.time()}
                with open(self.metrics_dir / METRICS_FILE, "a") as fh:
                    fh.write(json.dumps(record) + "\n")
                self.log(f"step {step} loss {loss:.4f} ({dt * 1000:.0f} ms)")
            if self.stop.agreed:
                self.log(f"preempted at step {step}: checkpointing and exiting for requeue")
                self.save(step, losses)
                self.mark_preempted()
                self.dist.barrier()
                self.dist.destroy_process_group()
                return 0
            if step % args.checkpoint_every == 0 or step == args.steps:
                self.save(step, losses)
            if args.step_sleep:
                time.sleep(args.step_sleep)
        if self.rank == 0:
            self.write_final(check, start_step, step, losses, timed_tokens, timed_secs,
                             time.perf_counter() - t_start)
        self.dist.barrier()
        self.dist.destroy_process_group()
        return 0 if check["ok"] else 1

    def mark_preempted(self) -> None:
        """Tell the batch script the checkpoint is written and which signal stopped us (the
        preemption signal: requeue; SIGTERM: Slurm is already ending or requeueing the job)."""
        job, log_dir = os.environ.get("SLURM_JOB_ID"), os.environ.get(protocol.ENV_LOG_DIR)
        if self.rank == 0 and job and log_dir:
            marker = protocol.preempted_marker(log_dir, job, self.restart)
            try:
                marker.write_text((self.stop.signal or "?") + "\n")
            except OSError as exc:
                self.log(f"cannot write the preemption marker {marker}: {exc}")

    def peak_tflops(self, gpu_name: str) -> tuple[float | None, str]:
        """The per-device peak for MFU: --peak-tflops, else the detected model's data-sheet figure."""
        if self.args.peak_tflops is not None:
            return self.args.peak_tflops, "--peak-tflops"
        found = peak_for_device_name(gpu_name)
        if found is None:
            self.log(f"no peak for {gpu_name!r} in slinkyml/data/gpus.yaml: no MFU (give --peak-tflops)")
            return None, "unknown"
        return found[1], f"gpus.yaml:{found[0]}"

    def mark_failed(self, exc: BaseException) -> None:
        """One line for the batch script's decision and ``slinkyml jobs status`` (kind, rank, host,
        exception); the first failing rank's line comes first."""
        job, log_dir = os.environ.get("SLURM_JOB_ID"), os.environ.get(protocol.ENV_LOG_DIR)
        if job and log_dir:
            protocol.record_failure(log_dir, job, self.restart, self.rank, exc)

    def write_final(self, check: dict[str, Any], start_step: int, step: int, losses: list[float],
                    timed_tokens: int, timed_secs: float, wall: float) -> None:
        from slinkyml.train.model import mfu, param_count  # lazy: torch only once training starts

        tps = timed_tokens / timed_secs if timed_secs > 0 else None
        final = {"steps": step, "start_step": start_step, "final_loss": losses[-1] if losses else None,
                 "first_loss": losses[0] if losses else None, "tokens_per_second": tps,
                 "params": param_count(self.cfg), "world_size": self.world, "restart": self.restart,
                 "precision": self.args.precision, "deepspeed": bool(self.args.deepspeed),
                 "allreduce": check, "wall_seconds": wall, "mfu": None, "device": self.device.type}
        if self.cuda:
            final["gpu_name"] = self.torch.cuda.get_device_name(self.device)
            peak, source = self.peak_tflops(final["gpu_name"])
            final["peak_tflops_per_device"], final["peak_source"] = peak, source
            if tps and peak:
                final["mfu"] = mfu(tps, self.cfg, peak * 1e12 * self.world)
        tmp = tempfile.NamedTemporaryFile("w", dir=self.metrics_dir, delete=False, suffix=".tmp")
        with tmp:
            json.dump(final, tmp, indent=2)
        os.replace(tmp.name, self.metrics_dir / FINAL_FILE)
        self.log(f"done: {json.dumps(final)}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ:
        protocol.die_with_parent()
    trainer = Trainer(args)
    try:
        return trainer.run()
    except (Exception, SystemExit) as exc:
        if not (isinstance(exc, SystemExit) and exc.code in (0, None)):
            trainer.mark_failed(exc)
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
