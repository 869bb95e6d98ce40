"""`make test`: the whole suite, its tiers side by side, on 2 cores (what `.ci/run` runs).

1. Start the Go builds of `make kube` (kube/build.sh, niced) at once: they take most of a cold machine's CPU
   for ~20-30 min, while the live tests below mostly wait on Slurm.
2. The offline tier in parallel (pytest-xdist, 2 workers).
3. Then lanes side by side, each one pytest process with a log of its own (printed whole when it ends):
   - slurm-1, slurm-2: the slurm tier split by recorded seconds (tests/durations.json) between the session
     cluster and a second one (SLURM_B), then the disruptive tier once nothing else uses the session cluster;
   - own_cluster-1..3: the modules with a Slurm cluster of their own (ports, bridges, subnets of their own), a
     module longer than 10 min in two halves on two such clusters;
   - kube, kubelet: the Kubernetes tiers once the Go builds are done;
   - slurm2605: a Slurm 26.05 cluster beside the machine's, its smoke suite, in that cluster's `dev env`.
4. One summary: tests per tier, the 30 slowest tests of all lanes, and one closing line.

Extra arguments go to every pytest run (e.g. `-x`, `-k expr`). `SLINKYML_TEST_LANES=slurm,kube` runs only those.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from tiers import exclusive

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
SLINKYML = [PY, "-m", "slinkyml"]
PYTEST = [PY, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "--timeout=900"]
#: the Slurm 26.05 cluster beside the machine's (Makefile SLURM2605; README "Slurm 26.05 beside ...")
SLURM2605 = {"SLINKYML_STATE_DIR": "/var/lib/slinkyml/dev-26.05", "SLINKYML_DEV_SLURM_VERSION": "26.05",
             "SLINKYML_DEV_BRIDGE": "slkml26", "SLINKYML_DEV_NODE_PREFIX": "u", "SLINKYML_DEV_SUBNET": "10.226.0.0/24",
             "SLINKYML_DEV_PORT_BASE": "8817", "SLINKYML_DEV_MARIADB_PORT": "15306"}
#: a second session cluster with the machine's Slurm, for the second half of the slurm tier
#: (`SLINKYML_TEST_SLURM_LANES=2`): its own state dir, bridge, node names, subnet and ports
SLURM_B = {"SLINKYML_STATE_DIR": "/var/lib/slinkyml/dev-b", "SLINKYML_DEV_BRIDGE": "slkmlb",
           "SLINKYML_DEV_NODE_PREFIX": "b", "SLINKYML_DEV_SUBNET": "10.227.0.0/24", "SLINKYML_DEV_PORT_BASE": "8917",
           "SLINKYML_DEV_MARIADB_PORT": "15406"}
#: each test module's seconds in a recent run (tests/durations.json, written by `run_tiers.py --durations-out`),
#: which splits the slurm tier's modules between its lanes; a module not listed counts as DEFAULT_MODULE_S
DURATIONS = Path(__file__).with_name("durations.json")
DEFAULT_MODULE_S = 30.0
DEFAULT_TEST_S = 20.0
#: a module with a cluster of its own that runs longer than this is split in two by its tests' recorded seconds,
#: the second half on a second cluster that SPLIT_PORT_SHIFT and SPLIT_CLUSTER_TAG move (tests/private_cluster.py)
SPLIT_MODULE_S = 600.0
SPLIT_PORT_SHIFT = 10
SPLIT_CLUSTER_TAG = 200
OWN_CLUSTER_LANES = 3
PROGRESS_EVERY_S = 30.0
T0 = time.monotonic()


def elapsed() -> str:
    s = int(time.monotonic() - T0)
    return f"{s // 60}:{s % 60:02d}"


def say(line: str) -> None:
    print(f"[{elapsed()}] {line}", flush=True)


@dataclass
class Run:
    """One pytest process of a lane."""

    name: str
    marks: str
    tiers: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    workers: int = 0
    paths: list[str] | None = None  # its test modules (default: those of its tiers)
    log: Path | None = None
    junit: Path | None = None
    progress: Path | None = None
    code: int | None = None
    seconds: float = 0.0

    def done_count(self) -> int:
        try:
            return len(self.progress.read_text().splitlines()) if self.progress else 0
        except OSError:
            return 0


class Suite:
    def __init__(self, args: list[str], out: Path) -> None:
        self.args = args
        self.out = out
        self.runs: list[Run] = []
        self.running: list[Run] = []
        self.lock = threading.Lock()
        self.failed: list[str] = []
        self.files: dict[str, list[str]] = {}  # tier -> its test modules (from the counting collection)

    def pytest(self, run: Run) -> int:
        """Run one pytest process to its end; its log is printed whole when it ends."""
        run.log = self.out / f"{run.name}.log"
        run.junit = self.out / f"{run.name}.xml"
        run.progress = self.out / f"{run.name}.progress"
        paths = run.paths if run.paths is not None else sorted(
            {path for tier in run.tiers for path in self.files.get(tier, ["tests"])})
        if not paths:
            say(f"{run.name}: no tests")
            return 5
        argv = [*PYTEST, "-m", run.marks, f"--junitxml={run.junit}", *self.args, *paths]
        if run.workers:
            argv += ["-n", str(run.workers)]
        env = {**os.environ, **run.env, "SLINKYML_TEST_PROGRESS": str(run.progress)}
        with self.lock:
            self.runs.append(run)
            self.running.append(run)
        say(f"{run.name}: started (pytest -m '{run.marks}')")
        start = time.monotonic()
        with open(run.log, "wb") as log:
            run.code = subprocess.run(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
        run.seconds = time.monotonic() - start
        with self.lock:
            self.running.remove(run)
            ok = run.code in (0, 5)  # 5: nothing collected for this tier (e.g. with -k)
            if not ok:
                self.failed.append(run.name)
            print(f"\n===== {run.name}: exit {run.code} after {run.seconds / 60:.1f} min =====", flush=True)
            sys.stdout.write(run.log.read_text(errors="replace"))
            print(f"===== end of {run.name} =====\n", flush=True)
        return run.code

    def cluster_env(self, name: str, env: dict[str, str]) -> dict[str, str] | None:
        """Up the cluster ``env`` names, then the environment its `slinkyml dev env` gives (SLURM_CONF, and PATH
        with its own Slurm first), as a user's `eval "$(slinkyml dev env)"` would; None when it fails."""
        if not self.step(f"{name}: its cluster", [*SLINKYML, "dev", "up"], env):
            return None
        done = subprocess.run(["bash", "-c", 'eval "$("$0" -m slinkyml dev env)" && env -0', PY], cwd=REPO,
                              env={**os.environ, **env}, capture_output=True)
        if done.returncode != 0:
            with self.lock:
                self.failed.append(name)
                print(f"===== {name}: dev env failed =====\n{done.stderr.decode(errors='replace')}", flush=True)
            return None
        pairs = (item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)
        return {key: value for key, value in pairs}

    def step(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> bool:
        """A set-up command of a lane (its output printed when it fails)."""
        say(f"{name}: {' '.join(argv[-3:])}")
        done = subprocess.run(argv, cwd=REPO, env={**os.environ, **(env or {})}, capture_output=True, text=True)
        if done.returncode != 0:
            with self.lock:
                self.failed.append(name)
                print(f"===== {name} failed ({done.returncode}) =====\n{done.stdout}{done.stderr}", flush=True)
            return False
        return True


class GoBuild(threading.Thread):
    """kube/build.sh in the background, niced: its lines are passed on as they come."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.code: int | None = None
        self.finished = threading.Event()
        self.current = "starting"

    def run(self) -> None:
        proc = subprocess.Popen(["nice", "-n", "10", "bash", str(REPO / "kube" / "build.sh")], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            if line:
                self.current = line
                say(f"go builds: {line}")
        self.code = proc.wait()
        say(f"go builds: {'done' if self.code == 0 else f'FAILED ({self.code})'}")
        self.finished.set()


def recorded_seconds() -> dict[str, float]:
    """tests/durations.json: module -> seconds, and ``module::test`` -> seconds for the modules split by test."""
    try:
        return {key: float(value) for key, value in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError):
        return {}


def split(items: list[str], lanes: int, default: float = DEFAULT_MODULE_S) -> list[list[str]]:
    """Modules (or test ids) into ``lanes`` groups of about equal time (longest first, each to the least loaded
    group); each group keeps the items' given order."""
    seconds = recorded_seconds()
    groups: list[list[str]] = [[] for _ in range(lanes)]
    load = [0.0] * lanes
    for item in sorted(items, key=lambda m: (-seconds.get(m, default), m)):
        least = load.index(min(load))
        groups[least].append(item)
        load[least] += seconds.get(item, default)
    order = {item: i for i, item in enumerate(items)}
    return [sorted(group, key=order.__getitem__) for group in groups]


def test_ids(module: str, marks: str) -> list[str]:
    """The ids of a module's tests that ``marks`` selects, in the module's order."""
    done = subprocess.run([*PYTEST, "--collect-only", "-m", marks, module], cwd=REPO, capture_output=True,
                          text=True)
    return [line.strip() for line in done.stdout.splitlines() if line.startswith(module + "::")]


def moved_cluster_env() -> dict[str, str]:
    """For the second half of a split module: its private cluster on other ports, bridge, nodes and subnet (moved
    again from wherever this run's own SLINKYML_TEST_PORT_SHIFT/CLUSTER_TAG put the first half)."""
    shift = int(os.environ.get("SLINKYML_TEST_PORT_SHIFT", "0") or 0) + SPLIT_PORT_SHIFT
    tag = SPLIT_CLUSTER_TAG + int(os.environ.get("SLINKYML_TEST_CLUSTER_TAG", "0") or 0) % 50
    return {"SLINKYML_TEST_PORT_SHIFT": str(shift), "SLINKYML_TEST_CLUSTER_TAG": str(tag)}


def own_cluster_runs(modules: list[str]) -> list[Run]:
    """The own-cluster tier in OWN_CLUSTER_LANES pytest runs side by side: a module longer than SPLIT_MODULE_S in
    two halves (the second on a moved cluster), the other modules split between the remaining lanes."""
    marks = exclusive("own_cluster")
    seconds = recorded_seconds()
    runs: list[Run] = []
    rest: list[str] = []
    for module in modules:
        ids = test_ids(module, marks) if seconds.get(module, DEFAULT_MODULE_S) > SPLIT_MODULE_S else []
        if len(ids) < 2:
            rest.append(module)
            continue
        first, second = split(ids, 2, default=DEFAULT_TEST_S)
        runs.append(Run(f"own_cluster-{len(runs) + 1}", marks, ("own_cluster",), paths=first))
        runs.append(Run(f"own_cluster-{len(runs) + 1}", marks, ("own_cluster",), env=moved_cluster_env(),
                        paths=second))
    for group in split(rest, max(1, OWN_CLUSTER_LANES - len(runs))):
        if group:
            runs.append(Run(f"own_cluster-{len(runs) + 1}", marks, ("own_cluster",), paths=group))
    return runs


def lanes(suite: Suite, build: GoBuild, wanted: set[str]) -> list[threading.Thread]:
    slurm_lanes = max(1, min(2, int(os.environ.get("SLINKYML_TEST_SLURM_LANES", "2") or 2)))
    groups = split(suite.files.get("slurm", []), slurm_lanes)

    def slurm_lane(name: str, modules: list[str], cluster: dict[str, str]) -> None:
        env = suite.cluster_env(name, cluster) if cluster else {}
        if env is not None:
            suite.pytest(Run(name, exclusive("slurm"), ("slurm",), env=env, paths=modules))

    def session_cluster_lanes() -> None:
        others = [threading.Thread(target=slurm_lane, args=(f"slurm-{i + 1}", group, SLURM_B if i else {}))
                  for i, group in enumerate(groups)]
        for thread in others:
            thread.start()
        for thread in [*others, own]:
            thread.join()  # the disruptive tier stops the session cluster's daemons: nothing else may use it then
        suite.pytest(Run("disruptive", exclusive("disruptive"), ("disruptive",)))

    def own_lanes() -> None:  # the modules' own clusters have their own ports, bridges and subnets: side by side
        runs = [threading.Thread(target=suite.pytest, args=(run,))
                for run in own_cluster_runs(suite.files.get("own_cluster", []))]
        for run in runs:
            run.start()
        for run in runs:
            run.join()

    def kube_lane(tier: str) -> None:  # the kube tier on the session's plane; kubelet modules on planes of their own
        build.finished.wait()
        if build.code != 0:
            with suite.lock:
                if "go builds" not in suite.failed:
                    suite.failed.append("go builds")
            return
        suite.pytest(Run(tier, exclusive(tier), (tier,)))

    def lane_2605() -> None:
        env = suite.cluster_env("slurm2605", SLURM2605)
        if env is not None:
            suite.pytest(Run("slurm2605", f"slurm2605 and ({exclusive('offline')} or {exclusive('slurm')})",
                             ("offline", "slurm"), env=env))

    own = threading.Thread(target=own_lanes if "own_cluster" in wanted else (lambda: None), name="own_cluster")
    threads = [own]
    for name, target, args in (("slurm", session_cluster_lanes, ()), ("kube", kube_lane, ("kube",)),
                               ("kube", kube_lane, ("kubelet",)), ("2605", lane_2605, ())):
        if name in wanted:
            threads.append(threading.Thread(target=target, args=args, name=name))
    return threads


def write_durations(suite: Suite, path: Path) -> None:
    """Each test module's seconds in this run (module -> seconds), and each test's of the modules longer than
    SPLIT_MODULE_S (``module::test`` -> seconds), for the next run's split."""
    seconds: dict[str, float] = {}
    tests: dict[str, float] = {}
    for run in suite.runs:
        if run.junit and run.junit.is_file():
            for case in ET.parse(run.junit).getroot().iter("testcase"):
                module = "tests/" + (case.get("classname") or "").split(".")[1] + ".py"
                took = float(case.get("time") or 0)
                seconds[module] = round(seconds.get(module, 0.0) + took, 1)
                tests[f"{module}::{case.get('name', '')}"] = round(took, 1)
    seconds.update((key, took) for key, took in tests.items() if seconds[key.split("::")[0]] > SPLIT_MODULE_S)
    path.write_text(json.dumps(dict(sorted(seconds.items())), indent=1) + "\n")


def summary(suite: Suite) -> int:
    totals = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    cases: list[tuple[float, str]] = []
    for run in suite.runs:
        if not run.junit or not run.junit.is_file():
            continue
        for case in ET.parse(run.junit).getroot().iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            cases.append((float(case.get("time") or 0), f"{run.name:<12} {name}"))
            kinds = {child.tag for child in case}
            if "failure" in kinds:
                totals["failed"] += 1
            elif "error" in kinds:
                totals["error"] += 1
            elif "skipped" in kinds:
                totals["skipped"] += 1
            else:
                totals["passed"] += 1
    print("\n===== slowest 30 tests (all lanes) =====")
    for seconds, name in sorted(cases, reverse=True)[:30]:
        print(f"{seconds:8.1f}s {name}")
    print("\n===== lanes =====")
    for run in suite.runs:
        print(f"{run.name:<12} exit {run.code}  {run.seconds / 60:5.1f} min  {run.done_count()} tests")
    print(f"whole suite: {elapsed()}")
    if suite.failed:
        print(f"FAILED: {', '.join(suite.failed)}")
    ran = totals["passed"] + totals["failed"] + totals["error"]
    # the one closing line for the whole suite (each lane's own pytest line is in its log above)
    print(f"{totals['passed']} passed, {totals['failed'] + totals['error']} failed, {totals['skipped']} skipped")
    return 1 if suite.failed or ran == 0 else 0


def main() -> int:
    args = sys.argv[1:]
    durations_out = None
    if args[:1] == ["--durations-out"]:
        durations_out, args = Path(args[1]), args[2:]
    wanted = set(filter(None, os.environ.get("SLINKYML_TEST_LANES", "offline,slurm,own_cluster,kube,2605")
                        .split(",")))
    out = Path(tempfile.mkdtemp(prefix="slinkyml-tiers-"))
    suite = Suite(args, out)
    build = GoBuild()
    if "kube" in wanted:
        build.start()
    finished = threading.Event()

    def report() -> None:  # a status line every 30 s: a terminal is never silent for long
        while not finished.wait(PROGRESS_EVERY_S):
            with suite.lock:
                state = ", ".join(f"{run.name} {run.done_count()} done" for run in suite.running) or "setting up"
            if "kube" in wanted and not build.finished.is_set():
                state += f"; go builds: {build.current}"
            say(f"running: {state}")

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    counted = subprocess.run([*PYTEST, "--collect-only", "-q", *args], cwd=REPO, capture_output=True, text=True,
                             env={**os.environ, "SLINKYML_TIER_COUNTS": "1"})
    match = re.search(r"^tiers: .*$", counted.stdout, re.M)
    for tier, paths in re.findall(r"^tier-files (\w+): ?(.*)$", counted.stdout, re.M):
        suite.files[tier] = paths.split()
    say(match.group(0) if match else f"tiers: could not count ({counted.stdout[-500:]}{counted.stderr[-500:]})")
    if "offline" in wanted:
        # the offline tests of the 26.05 smoke suite run in its lane, once its cluster (and its root) are up:
        # on a cold machine the root is not there yet while this lane runs
        later = " and not slurm2605" if "2605" in wanted else ""
        suite.pytest(Run("offline", exclusive("offline") + later, ("offline",), workers=2))
    if "SLURM_CONF" not in os.environ and wanted & {"slurm", "kube"}:
        # the lanes without a cluster of their own name the session's by its slurm.conf: a `slinkyml` or
        # `sbatch` without SLURM_CONF reads /etc/slurm/slurm.conf, which the first cluster `dev up` started on
        # this machine claims, and that may be another state dir's (a second run's, a developer's)
        session = suite.cluster_env("session cluster", {})
        if session and session.get("SLURM_CONF"):
            os.environ["SLURM_CONF"] = session["SLURM_CONF"]
    threads = lanes(suite, build, wanted)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    finished.set()
    if durations_out:
        write_durations(suite, durations_out)
    return summary(suite)


if __name__ == "__main__":
    sys.exit(main())
