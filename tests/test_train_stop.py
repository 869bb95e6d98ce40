"""Stop requests are never lost: a signal at a random point of a step stops every rank at the next
step boundary (the trainer's own StopFlag, 2 gloo ranks, many random deliveries), and a trainer
dies with its launcher."""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

TRIALS = int(os.environ.get("SLINKYML_STOP_TRIALS", "150"))

#: each rank: steps of random length; every step ends with the trainer's all-reduce of loss and
#: flag; after an agreed stop it reports (trial, stop step, step in progress when the signal came)
RANK = textwrap.dedent("""
    import json, os, random, signal, sys, time
    import torch, torch.distributed as dist
    from slinkyml.train.loop import StopFlag

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    state = {"step": 0, "at": None}
    stop = StopFlag()

    def handler(signum, frame):
        if stop.request("USR2"):
            state["at"] = state["step"]

    signal.signal(signal.SIGUSR2, handler)
    rng = random.Random(rank)
    print("ready", flush=True)
    for trial in range(int(sys.argv[1])):
        while not stop.agreed and state["step"] < 3000:
            state["step"] += 1
            busy_until = time.perf_counter() + rng.uniform(0, 0.002)
            while time.perf_counter() < busy_until:  # a step's work: the signal may land anywhere
                pass
            stop.all_reduce(torch, dist, 1.0, "cpu", 2)
        report = json.dumps({"trial": trial, "stopped": state["step"], "at": state["at"]})
        stop.__init__()  # reset before reporting: the next signal may come as soon as both reported
        state["at"] = None
        state["step"] = 0
        dist.barrier()
        print(report, flush=True)
    dist.destroy_process_group()
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_signal_at_any_point_stops_every_rank_at_the_next_boundary():
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": "2"}
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, str(TRIALS)], env={**env, "RANK": str(r)},
                              stdout=subprocess.PIPE, text=True) for r in (0, 1)]
    rng = random.Random(12)
    try:
        for proc in ranks:
            assert proc.stdout.readline().strip() == "ready"
        target = []
        for trial in range(TRIALS):
            victim = rng.randrange(2)
            target.append(victim)
            time.sleep(rng.uniform(0, 0.02))
            ranks[victim].send_signal(signal.SIGUSR2)
            reports = [__import__("json").loads(proc.stdout.readline()) for proc in ranks]
            stops = {r["stopped"] for r in reports}
            assert len(stops) == 1, f"trial {trial}: ranks stopped at different steps {reports}"
            at = reports[victim]["at"]
            assert at is not None, f"trial {trial}: rank {victim} never saw its signal"
            # handled during step `at` (before or after that step's all-reduce): stop after it or the next
            assert stops.pop() in (at, at + 1), f"trial {trial}: signal in step {at}, stop {reports}"
        for proc in ranks:
            assert proc.wait(timeout=60) == 0
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.timeout(60)
def test_a_trainer_dies_with_its_launcher():
    """The agent killed -9 (no chance to stop its workers): the worker gets SIGKILL at once."""
    child = textwrap.dedent("""
        import os, sys, time
        from slinkyml.slurm.protocol import die_with_parent
        die_with_parent()
        print(os.getpid(), flush=True)
        time.sleep(120)
    """)
    launcher = textwrap.dedent(f"""
        import subprocess, sys, time
        proc = subprocess.Popen([sys.executable, "-c", {child!r}], stdout=sys.stdout)
        time.sleep(120)
    """)
    agent = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    worker = int(agent.stdout.readline())
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        with open(f"/proc/{worker}/stat") as fh:  # reaped by init once it is a zombie
            if fh.read().split(")")[1].split()[0] == "Z":
                return
        time.sleep(0.05)
    os.kill(worker, signal.SIGKILL)
    pytest.fail("the worker outlived its killed launcher")
