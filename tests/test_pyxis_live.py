"""pyxis + enroot, live: a rendered JobSpec with a container runs its tasks inside the container.

Optional: it needs NVIDIA's pyxis SPANK plugin and enroot, which CI cannot download (neither is
packaged for Debian; both are built from source), so it skips unless all of these are given:

- ``SLINKYML_PYXIS_PLUGIN``: the built ``spank_pyxis.so``;
- ``enroot`` on ``PATH`` (as the cluster's slurmd will see it: the PATH of ``slinkyml dev up``);
- ``SLINKYML_PYXIS_IMAGE``: a squashfs image (``enroot import`` or ``mksquashfs`` of a root
  filesystem) that has ``/bin/sh`` and ``cat``. No registry is needed.

The local cluster gets the plugin through its ``spank_plugins`` (plugstack.conf). Start it with
``SLINKYML_DEV_SPANK_PLUGINS`` set to the same plugin and nothing is restarted; otherwise the
module adds the plugin (slurmctld and the slurmd restart; running jobs survive) and puts the
cluster back as it found it afterwards.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tiers import needs

from slinkyml.dev import LocalCluster
from slinkyml.jobs.follow import wait
from slinkyml.jobs.render import render_sbatch
from slinkyml.jobs.spec import JobSpec
from slinkyml.jobs.validate import problems

pytestmark = pytest.mark.slurm

PLUGIN_ENV = "SLINKYML_PYXIS_PLUGIN"
IMAGE_ENV = "SLINKYML_PYXIS_IMAGE"
#: Where the test directory is mounted in the container: a path that must not exist on the host,
#: so a file that arrives through it was written inside the container.
MOUNT = "/slinkyml-pyxis-test"
TASK = (f'out="{MOUNT}/out-$SLURM_JOB_ID-$SLURM_PROCID"; '
        '{ echo "host=$(cat /proc/sys/kernel/hostname)"; echo "pwd=$(pwd)"; echo "env=$SPEC_VAR"; '
        'echo "--- os-release"; cat /etc/os-release; } > "$out"')


@pytest.fixture(scope="module")
def pyxis() -> tuple[Path, Path]:
    """(plugin, image), or skip saying what is missing."""
    plugin, image = os.environ.get(PLUGIN_ENV, ""), os.environ.get(IMAGE_ENV, "")
    missing = []
    if not plugin or not Path(plugin).is_file():
        missing.append(f"${PLUGIN_ENV} (path to a built spank_pyxis.so)")
    if not shutil.which("enroot"):
        missing.append("enroot on PATH")
    if not image or not Path(image).is_file():
        missing.append(f"${IMAGE_ENV} (a squashfs image with /bin/sh)")
    if missing:
        pytest.skip("pyxis live test: needs " + ", ".join(missing) + "; CI cannot download pyxis/enroot "
                    "(built from NVIDIA's sources), see tests/test_pyxis_live.py")
    return Path(plugin).absolute(), Path(image).absolute()


@pytest.fixture(scope="module")
@needs("own_cluster")
def pyxis_cluster(pyxis, request):
    """The session's local cluster with the pyxis plugin in its plugstack.conf."""
    plugin, _image = pyxis
    local_cluster = request.getfixturevalue("local_cluster")  # only once pyxis is there: a skip starts nothing
    spec = local_cluster.spec
    if plugin in spec.spank_plugin_paths:
        yield local_cluster
        return
    options = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name not in ("state_dir", "nodes")}
    options["spank_plugins"] = (*spec.spank_plugins, str(plugin))
    cluster = LocalCluster(spec.state_dir, nodes=spec.nodes, keep_running=True, **options)
    try:
        cluster.up()
        yield cluster
    finally:
        local_cluster.up()  # back to the plugins the session started with


@pytest.fixture(scope="module")
def image_os_release(pyxis) -> str:
    """/etc/os-release of the image as enroot itself shows it (outside Slurm)."""
    _plugin, image = pyxis
    proc = subprocess.run(["enroot", "start", str(image), "cat", "/etc/os-release"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"enroot cannot start {image} here: {proc.stderr[-2000:]}"
    return proc.stdout


def _container_spec(image: Path, tmp: Path, name: str, nodes: int) -> JobSpec:
    return JobSpec.from_dict({
        "name": name, "launcher": "srun", "nodes": nodes, "mem_per_node": "256M", "time_limit": "5",
        "entry": {"script": "/bin/sh", "args": ["-c", TASK]}, "env": {"SPEC_VAR": "from the job spec"},
        "container": {"image": str(image), "mounts": [f"{tmp}:{MOUNT}"], "workdir": MOUNT},
        "log_dir": str(tmp / "logs")})


def _check_ran_inside(tmp: Path, job_id: int, nodes: list[str], os_release: str) -> None:
    assert not Path(MOUNT).exists()  # so the files below came in through the container's mount
    hosts = set()
    for rank in range(len(nodes)):
        out = (tmp / f"out-{job_id}-{rank}").read_text()
        head, _, release = out.partition("--- os-release\n")
        fields = dict(line.split("=", 1) for line in head.splitlines())
        assert fields["pwd"] == MOUNT and fields["env"] == "from the job spec", out  # --container-workdir, env
        assert release == os_release  # the image's root filesystem, not the host's
        hosts.add(fields["host"])
    assert hosts == set(nodes)


@pytest.mark.timeout(240)
def test_rendered_container_job_runs_in_the_image_with_plain_sbatch(pyxis, pyxis_cluster, image_os_release,
                                                                   shared_tmp):
    slurm = pyxis_cluster.slurm
    nodes = min(2, pyxis_cluster.spec.nodes)
    spec = _container_spec(pyxis[1], shared_tmp, "pyxis-sbatch", nodes)
    script = render_sbatch(spec)
    assert f"--container-image={pyxis[1]}" in script and f"--container-mounts={shared_tmp}:{MOUNT}" in script
    assert f"--container-workdir={MOUNT}" in script
    (shared_tmp / "logs").mkdir()
    (shared_tmp / "job.sbatch").write_text(script)
    out = slurm.run("sbatch", ["--parsable", str(shared_tmp / "job.sbatch")], cwd=str(shared_tmp)).stdout
    job_id = int(out.strip().split(";")[0])
    state = wait(slurm, job_id, timeout=180, poll=1.0)
    log = shared_tmp / "logs" / f"pyxis-sbatch-{job_id}.out"
    assert (state.state, state.exit_code) == ("COMPLETED", "0:0"), log.read_text() if log.exists() else state
    assert "slinkyml: training exited with status 0" in log.read_text()
    _check_ran_inside(shared_tmp, job_id, slurm.run("scontrol", ["show", "hostnames", state.nodes]).stdout.split(),
                      image_os_release)


@pytest.mark.timeout(240)
def test_slinkyml_submit_passes_the_pyxis_check_and_runs_in_the_image(pyxis, pyxis_cluster, image_os_release,
                                                                      shared_tmp, cli, monkeypatch):
    slurm = pyxis_cluster.slurm
    nodes = min(2, pyxis_cluster.spec.nodes)
    spec = _container_spec(pyxis[1], shared_tmp, "pyxis-cli", nodes)
    assert problems(spec, slurm) == []  # srun --help now lists --container-image
    job = shared_tmp / "job.yaml"
    job.write_text(
        f"name: pyxis-cli\nlauncher: srun\nnodes: {nodes}\nmem_per_node: 256M\ntime_limit: '5'\n"
        f"entry: {{script: /bin/sh, args: [-c, {TASK!r}]}}\nenv: {{SPEC_VAR: from the job spec}}\n"
        f"container: {{image: {pyxis[1]}, mounts: ['{shared_tmp}:{MOUNT}'], workdir: {MOUNT}}}\n"
        f"log_dir: {shared_tmp / 'logs'}\n")
    assert JobSpec.from_yaml(job) == spec
    monkeypatch.setenv("SLURM_CONF", str(pyxis_cluster.spec.slurm_conf))
    monkeypatch.chdir(shared_tmp)
    code, _, err = cli("sbatch", "submit", str(job), "--dry-run")
    assert code == 0 and "passes the cluster checks" in err, err
    code, out, err = cli("sbatch", "submit", str(job), "--wait", "--timeout", "180")
    assert code == 0 and "COMPLETED" in out, out + err
    job_id = int(out.split("Submitted batch job ")[1].split()[0])
    state = wait(slurm, job_id, timeout=10)
    _check_ran_inside(shared_tmp, job_id, slurm.run("scontrol", ["show", "hostnames", state.nodes]).stdout.split(),
                      image_os_release)
