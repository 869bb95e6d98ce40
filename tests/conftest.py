"""Shared fixtures. The local Slurm cluster is started once per session (or reused if running)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from tiers import TIERS, needs, tier_of

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    for tier, what in TIERS.items():
        config.addinivalue_line("markers", f"{tier}: tier: {what} (set from the test's fixtures: tests/tiers.py)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test gets exactly one tier mark, from the fixtures it uses (tests/tiers.py)."""
    counts = dict.fromkeys(TIERS, 0)
    files: dict[str, set[str]] = {tier: set() for tier in TIERS}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        funcs = []
        if info is not None:
            for name in info.names_closure:
                defs = info.name2fixturedefs.get(name)
                if defs:
                    funcs.append(defs[-1].func)  # the definition this test gets (a module's own overrides)
        tier = tier_of(funcs, item.get_closest_marker("slurm") is not None)
        item.add_marker(tier)
        counts[tier] += 1
        files[tier].add(item.nodeid.split("::")[0])
    if os.environ.get("SLINKYML_TIER_COUNTS"):  # before -m deselects: the whole suite's count per tier
        print("\ntiers: " + ", ".join(f"{tier} {n}" for tier, n in counts.items()) + f" ({len(items)} tests)")
        for tier, paths in files.items():  # so that each tier's run collects only its own modules
            print(f"tier-files {tier}: {' '.join(sorted(paths))}")



def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """``SLINKYML_TEST_PROGRESS=FILE``: a line per finished test, which tests/run_tiers.py counts."""
    path = os.environ.get("SLINKYML_TEST_PROGRESS")
    if os.environ.get("PYTEST_XDIST_WORKER"):  # xdist's controller writes the line for its workers' reports
        return
    if path and (report.when == "call" or (report.when == "setup" and not report.passed)):
        with open(path, "a") as progress:
            progress.write(f"{report.outcome} {report.nodeid}\n")

@pytest.fixture(scope="session")
@needs("slurm")
def local_cluster():
    """The real local multi-node Slurm cluster (munge, MariaDB, slurmdbd, slurmctld, 4 slurmd, slurmrestd).

    Brought up once per session and left running afterwards (a second `up` is a no-op, ~0.1 s), so
    concurrent test sessions never pull it from under each other. `make test` starts it before pytest.
    """
    if os.environ.get("SLINKYML_TEST_CLUSTER") == "docker":
        return _docker_cluster()
    from slinkyml.dev import LocalCluster

    cluster = LocalCluster(keep_running=True)
    cluster.up()
    return cluster


def _docker_cluster():
    """``SLINKYML_TEST_CLUSTER=docker``: the session's cluster is the Docker one (``dev up --docker``, its state
    dir ``$SLINKYML_DOCKER_STATE_DIR``), and this process's Slurm commands are its (``dev env``: SLURM_CONF and
    its bin/ first on PATH), as for a user who typed ``eval $(slinkyml dev env --docker)``."""
    from slinkyml.dev.docker.cluster import DockerCluster

    cluster = DockerCluster(keep_running=True)
    if os.geteuid() == 0:  # tests submit as the accounts' users: they exist before `up` and may use the engine
        for user in cluster.spec.users:
            if subprocess.run(["id", user], capture_output=True).returncode != 0:
                subprocess.run(["useradd", "--create-home", "--user-group", user], check=True)
            subprocess.run(["usermod", "-aG", "docker", user], check=True)
    cluster.up()
    os.environ["SLURM_CONF"] = str(cluster.spec.slurm_conf)
    os.environ["PATH"] = f"{cluster.spec.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    return cluster


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.netns_only("why")``: skipped on the Docker cluster, with the reason."""
    marker = item.get_closest_marker("netns_only")
    if marker is not None and os.environ.get("SLINKYML_TEST_CLUSTER") == "docker":
        pytest.skip(f"netns cluster only ({marker.args[0] if marker.args else 'its daemons on the host'}): "
                    "SLINKYML_TEST_CLUSTER=docker")


@pytest.fixture
@needs("disruptive")
def exclusive_cluster(local_cluster):
    """The session's cluster, for a test that stops or restarts its daemons: such a test never runs beside
    another test of the session's cluster (its tier, ``disruptive``, runs alone: tests/run_tiers.py)."""
    return local_cluster


@pytest.fixture(scope="session")
@needs("kube")
def go_module():
    """``go_module("path@version")``: that module's folder in the Go module cache, as `make kube` (kube/build.sh)
    fills it: the Kubernetes, operator, Karpenter and mariadb-operator modules whose files our vendored data
    must equal. In the kube tier, which runs after those builds (on a cold machine the offline tier runs
    before them); a module missing there fails the test: the build that should have fetched it did not."""
    if shutil.which("go") is None:
        pytest.skip("Go is not installed (`make setup`): the module cache cannot be read")
    cache = Path(subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip())

    def folder(module: str) -> Path:
        path, _, version = module.partition("@")
        escaped = "".join(f"!{c.lower()}" if c.isupper() else c for c in path)
        found = cache / f"{escaped}@{version}"
        if not found.is_dir():
            pytest.fail(f"{module} is not in the Go module cache ({cache}) after `make kube`: kube/build.sh "
                        "should have downloaded it (kube/crds.txt, the operator-*/go.mod files)")
        return found

    return folder


@pytest.fixture(scope="session")
@needs("kube")
def kube_plane():
    """The local Kubernetes control plane of `slinkyml dev kube` (etcd, kube-apiserver, -controller-manager,
    -scheduler, the slurm-operator's manager and webhook at the default version), brought up once per
    session and left running, as the Slurm cluster is (`make test` starts it before pytest; a second `up`
    is a no-op). A run beside another plane takes a `SLINKYML_KUBE_PORT_BASE` and state dir of its own.
    A kubelet node left on that plane (`make demo-kube`'s) is stopped first: these tests read the operator's
    manager as the process a plane without a node runs, and judge objects no pod serves."""
    from slinkyml.dev.kubernetes.kube import KubeControlPlane

    plane = KubeControlPlane()
    if plane.node_running:
        plane.down()
    return plane.up()


@pytest.fixture(scope="session")
def slurm(local_cluster):
    """The Slurm command layer bound to the local cluster."""
    return local_cluster.slurm


@pytest.fixture(scope="session")
def restapi(local_cluster) -> dict[str, str | None]:
    """How the session's cluster serves slurmrestd, as RestClient/RestBackend keyword arguments: its unix
    socket (local auth) where it runs one, else its JWT port with a token for root (Slurm 26.05's
    slurmrestd refuses root, so that cluster serves only JWT)."""
    spec = local_cluster.spec
    if not local_cluster.version.restd_refuses_root:
        return {"url": f"unix:{spec.restd_socket}", "token": None, "user": None}
    return {"url": spec.restd_url, "token": local_cluster.token("root", lifespan=7200), "user": "root"}


@pytest.fixture(autouse=True)
def accounting_store_dir(tmp_path_factory, monkeypatch) -> Path:
    """Each test's reports get an accounting store of their own (they sync it as they would the
    user's), so records of one test's cluster or recorded data never reach another's."""
    path = tmp_path_factory.mktemp("accounting-store")
    monkeypatch.setenv("SLINKYML_ACCOUNTING_STORE", str(path))
    return path


@pytest.fixture
def shared_tmp():
    """A world-writable temporary directory outside root's private home, for jobs run as other users."""
    path = Path(tempfile.mkdtemp(prefix="slinkyml-test-", dir="/tmp"))
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def cli(monkeypatch):
    """Run the slinkyml CLI in-process: returns (exit code, stdout, stderr)."""
    import contextlib
    import io

    from slinkyml.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse usage errors
                code = exc.code if isinstance(exc.code, int) else 2
        return code, out.getvalue(), err.getvalue()

    return run


@pytest.fixture
def imported_by():
    """``imported_by(code, names)``: which of ``names`` a fresh interpreter has imported after ``code``
    (start-up and import-weight checks)."""

    def run(code: str, names: tuple[str, ...]) -> list[str]:
        probe = f"{code}\nimport sys\nprint(','.join(m for m in {names!r} if m in sys.modules))"
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
        return [m for m in out.strip().split(",") if m]

    return run


@pytest.fixture
def own(slurm):
    """Job ids to cancel at the end (only ours)."""
    ids: list[str] = []
    yield ids
    for job_id in ids:
        slurm.run("scancel", [job_id], check=False, retries=0)
