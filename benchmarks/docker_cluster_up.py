"""Start-up of the Docker cluster (``dev up --docker``) beside the netns cluster's (``dev up``), both Slurm
26.05 with 4 nodes, in ABBA pairs in one process (machines here are noisy): each ``up`` from nothing (the
netns cluster in a new state dir, so MariaDB's data folder is made again, as the Docker cluster's is), then
``srun -N2 true`` on it, then its ``down``/``reset``. The Docker engine is ``$DOCKER_HOST``'s, else one
started here for the run (its start-up and the images' load timed apart: a one-time cost) and stopped.
Usage (root): .venv/bin/python benchmarks/docker_cluster_up.py [--pairs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import docker

from slinkyml.dev import LocalCluster
from slinkyml.dev.docker.cluster import DockerCluster, ensure_images
from slinkyml.dev.docker.engine import Engine

#: names and ports nothing else here uses
NETNS = dict(bridge="slkbd0", node_prefix="bd", subnet="10.237.0.0/24", slurmctld_port=9917, slurmd_port=9918,
             slurmdbd_port=9919, slurmrestd_port=9920, mariadb_port=16406, slurm_version="26.05")
DOCKER = dict(name="slkbd", subnet="10.237.1.0/24", bridge="slkbdd", restd_port=16840)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def netns_once(root: Path, i: int) -> tuple[float, float]:
    cluster = LocalCluster(root / f"netns-{i}", nodes=4, **NETNS)
    try:
        up = timed(cluster.up)
        srun = timed(lambda: cluster.slurm.run("srun", ["-N2", "true"], timeout=120))
    finally:
        cluster.reset()
    return up, srun


def docker_once(root: Path, i: int) -> tuple[float, float]:
    cluster = DockerCluster(root / f"docker-{i}", nodes=4, shares=(str(root),), **DOCKER)
    try:
        up = timed(cluster.up)
        srun = timed(lambda: cluster.slurm.run("srun", ["-N2", "true"], timeout=120))
    finally:
        cluster.reset()
    return up, srun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2, help="ABBA pairs (default 2: 4 ups of each)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="slinkyml-bench-docker-", dir="/var/tmp"))
    engine = Engine(root / "engine")
    started_engine = False
    try:
        if not os.environ.get("DOCKER_HOST"):
            start = time.perf_counter()
            os.environ["DOCKER_HOST"], started_engine = engine.ensure()
            print(f"engine: {'started' if started_engine else 'found'} in {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        ensure_images(docker.DockerClient(base_url=os.environ["DOCKER_HOST"]))
        print(f"images present or loaded in {time.perf_counter() - start:.1f} s")
        netns: list[tuple[float, float]] = []
        dock: list[tuple[float, float]] = []
        for pair in range(args.pairs):
            order = (netns_once, docker_once, docker_once, netns_once) if pair % 2 == 0 else \
                (docker_once, netns_once, netns_once, docker_once)
            for k, run in enumerate(order):
                (netns if run is netns_once else dock).append(run(root, pair * 4 + k))
        for name, rows in (("dev up (netns, 26.05)", netns), ("dev up --docker", dock)):
            ups = [u for u, _ in rows]
            sruns = [s for _, s in rows]
            print(f"{name:<24} up {statistics.median(ups):6.1f} s (min {min(ups):.1f}, max {max(ups):.1f}); "
                  f"srun -N2 true {statistics.median(sruns):.2f} s  [n={len(rows)}]")
        ratios = [d[0] / n[0] for n, d in zip(netns, dock, strict=True)]
        print(f"docker / netns up: median ratio {statistics.median(ratios):.2f} over {len(ratios)} pairs "
              f"(load {os.getloadavg()[0]:.1f})")
    finally:
        if started_engine:
            engine.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
