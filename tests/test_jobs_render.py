"""Renderer: shellcheck-clean for every launcher, literal quoting, templates in sbatch/ up to date."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from slinkyml.errors import SlinkyError
from slinkyml.jobs.render import launch_argv, render_sbatch
from slinkyml.jobs.request import SlurmJobRequest
from slinkyml.jobs.spec import JobSpec

REPO = Path(__file__).resolve().parent.parent
SHELLCHECK = shutil.which("shellcheck")
EVIL = "x $(touch /tmp/slinkyml-pwned) `touch /tmp/slinkyml-pwned`; echo \"q\" 'q' \\ \n second line"

VARIANTS = {
    "torchrun": {"launcher": "torchrun", "gpus_per_node": 8},
    "deepspeed-torchrun": {"launcher": "deepspeed", "deepspeed_config": {"zero_optimization": {"stage": 3}}},
    "deepspeed-launcher": {"launcher": "deepspeed", "deepspeed_via": "deepspeed",
                           "deepspeed_config": "/fsx/ds.json"},
    "neuron": {"launcher": "neuron", "neuron_devices_per_node": 16, "network": "efa",
               "container": {"image": "img:1", "mounts": ["/fsx:/fsx"], "workdir": "/w"}},
    "srun": {"launcher": "srun", "entry": {"script": "/bin/echo", "args": [EVIL]}},
    "evil": {"name": EVIL.replace("\n", " "), "env": {"E": EVIL}, "checkpoint_dir": "/tmp/c k$(x)",
             "log_dir": "/tmp/l %j", "entry": {"module": "slinkyml.train", "args": [EVIL, "--x"]},
             "partition": "debug", "account": "ml", "qos": "normal", "exclusive": True,
             "dependencies": ["afterok:1", "afterany:2_3"], "nodelist": "n[1-2]", "mem_per_node": "2G"},
}


def _spec(extra: dict) -> JobSpec:
    data = {"name": "job", "nodes": 2, "entry": {"module": "slinkyml.train", "args": ["--steps", "3"]}}
    data.update(extra)
    return JobSpec.from_dict(data)


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (apt-get install shellcheck)")
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_scripts_pass_shellcheck(variant, tmp_path):
    path = tmp_path / f"{variant}.sbatch"
    path.write_text(render_sbatch(_spec(VARIANTS[variant])))
    proc = subprocess.run([SHELLCHECK, "--severity=style", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (apt-get install shellcheck)")
def test_checked_in_templates_pass_shellcheck():
    scripts = sorted((REPO / "sbatch").glob("*.sbatch"))
    assert len(scripts) >= 4
    proc = subprocess.run([SHELLCHECK, "--severity=style", *map(str, scripts)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("yaml_path", sorted((REPO / "sbatch").glob("*.yaml")), ids=lambda p: p.stem)
def test_checked_in_templates_are_regenerated(yaml_path):
    expected = render_sbatch(JobSpec.from_yaml(yaml_path))
    actual = yaml_path.with_suffix(".sbatch").read_text()
    assert actual == expected, (f"{yaml_path.with_suffix('.sbatch').name} is stale: slinkyml sbatch render "
                                f"sbatch/{yaml_path.name} -o sbatch/{yaml_path.stem}.sbatch")


def test_render_is_pure_and_torchrun_line_is_complete():
    spec = _spec(VARIANTS["torchrun"])
    script = render_sbatch(spec)
    assert script == render_sbatch(spec)
    assert 'head_node="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"' in script
    for needle in ("--kill-on-bad-exit=1", '--nnodes "$SLURM_NNODES"', "--nproc-per-node 8",
                   '--rdzv-id "$SLURM_JOB_ID"', "--rdzv-backend static", 'PET_NODE_RANK="$SLURM_NODEID"',
                   '--rdzv-endpoint "$head_node:$rdzv_port"', "#SBATCH --gres=gpu:8",
                   "#SBATCH --signal=B:USR2@60", "#SBATCH --requeue", 'scontrol requeue "$SLURM_JOB_ID"',
                   "-r$restart_count-"):
        assert needle in script, needle


def test_launch_argv_for_one_node():
    argv = launch_argv(_spec(VARIANTS["torchrun"]), "n7", 1234, rdzv_id="42")
    assert argv[:3] == ["python3", "-m", "torch.distributed.run"]
    assert argv[argv.index("--rdzv-endpoint") + 1] == "n7:1234"
    assert argv[argv.index("--nnodes") + 1] == "2" and argv[-4:] == ["-m", "slinkyml.train", "--steps", "3"]


def test_values_stay_literal_when_the_script_runs(tmp_path):
    """Run the rendered script with stub srun/scontrol: every value arrives byte for byte."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\n[ \"$1\" = show ] && echo n1\nexit 0\n")
    # the stub srun drops its own options and runs the command, like one task would
    (bin_dir / "srun").write_text("#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\nexec \"$@\"\n")
    for tool in ("squeue", "sinfo"):  # the machine's own would wait for a controller (offline tier: none)
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    dump = tmp_path / "dump.py"
    dump.write_text("import json, os, sys\njson.dump({'argv': sys.argv[1:], 'env': os.environ['E']}, "
                    "open(os.environ['OUT'], 'w'))\n")
    spec = _spec({"launcher": "srun", "name": EVIL.replace("\n", " "), "python": shutil.which("python3"),
                  "entry": {"script": str(dump), "args": [EVIL, "$HOME", "*"]},
                  "env": {"E": EVIL, "OUT": str(tmp_path / "out.json")}, "log_dir": str(tmp_path / "logs")})
    script = tmp_path / "job.sbatch"
    script.write_text(render_sbatch(spec))
    canary = Path("/tmp/slinkyml-pwned")
    canary.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "n1", "SLURM_NNODES": "1"}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    import json

    out = json.loads((tmp_path / "out.json").read_text())
    assert out == {"argv": [EVIL, "$HOME", "*"], "env": EVIL}
    assert not canary.exists()


def test_deepspeed_config_is_embedded_from_the_planner():
    script = render_sbatch(_spec({"launcher": "deepspeed"}))
    assert "<<'SLINKYML_DS_CONFIG'" in script and '"train_batch_size": 2' in script
    assert "export SLINKYML_DEEPSPEED_CONFIG=" in script


def test_restapi_bodies_branch_on_version():
    spec = _spec({"mem_per_node": "2G", "time_limit": "00:10:30", "gpus_per_node": 1})
    path, body = SlurmJobRequest.from_spec(spec).restapi_body("#!/bin/bash\n", version="v0.0.38", cwd="/w", environment={"PATH": "/bin"})
    assert path == "/slurm/v0.0.38/job/submit" and body["script"].startswith("#!")
    job = body["job"]
    assert job["nodes"] == "2" and job["time_limit"] == 11 and job["memory_per_node"] == 2048
    assert job["environment"] == {"PATH": "/bin"} and job["signal"] == "12@60" and job["gres"] == "gpu:1"
    path, body = SlurmJobRequest.from_spec(spec).restapi_body("#!/bin/bash\n", version="v0.0.40", cwd="/w", environment={"PATH": "/bin"})
    job = body["job"]
    assert path == "/slurm/v0.0.40/job/submit" and job["environment"] == ["PATH=/bin"]
    assert job["time_limit"]["number"] == 11 and job["kill_warning_signal"] == "USR2"


def test_rendezvous_port_is_derived_in_bash_exactly_as_in_python(tmp_path):
    """The rendered script's port choice (job id + restart, first free) equals port_candidates'; a
    port something listens on is skipped; a pinned rdzv_port is used as is."""
    import socket
    import subprocess

    from slinkyml import rendezvous

    block = "\n".join(rendezvous.bash_lines())
    for job, restart in ((1, 0), (4242, 0), (4242, 3), (987654, 1)):
        out = subprocess.run(["bash", "-c", f"set -euo pipefail; SLURM_JOB_ID={job}; restart_count={restart}\n"
                              f"{block}\necho $rdzv_port"], capture_output=True, text=True, check=True).stdout
        assert int(out) == rendezvous.port_candidates(job, restart)[0]
    taken = rendezvous.port_candidates(77)[0]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", taken))
        sock.listen()
        out = subprocess.run(["bash", "-c", f"SLURM_JOB_ID=77; restart_count=0\n{block}\necho $rdzv_port"],
                             capture_output=True, text=True, check=True).stdout
    assert int(out) == rendezvous.port_candidates(77)[1]
    pinned = render_sbatch(_spec(VARIANTS["torchrun"]).replace(rdzv_port=29555))
    assert "rdzv_port=29555" in pinned and "/dev/tcp" not in pinned


def test_one_request_feeds_sbatch_restapi_and_submitit():
    """The JobSpec → Slurm mapping happens once: every backend writes the same SlurmJobRequest."""
    from slinkyml.jobs.request import SlurmJobRequest

    spec = _spec({"mem_per_node": "2G", "time_limit": "00:10:30", "gpus_per_node": 2, "partition": "gpu"})
    request = SlurmJobRequest.from_spec(spec)
    directives = dict(request.sbatch_directives())
    assert directives["--gres"] == "gpu:2" and directives["--nodes"] == str(request.nodes) == "2"
    _, body = SlurmJobRequest.from_spec(spec).restapi_body("", version="v0.0.42", cwd="/w", environment={})
    assert body["job"]["tres_per_node"] == "gres/gpu:2" and body["job"]["partition"] == "gpu"
    params = request.submitit_parameters()
    assert (params["gpus_per_node"], params["nodes"], params["time"], params["partition"]) == (2, 2, 11, "gpu")
    assert params["additional_parameters"]["mem"] == "2G"
    assert '"gres": ["gpu:2"]' in str(request)  # what --dry-run prints
    with pytest.raises(SlinkyError, match="nodes"):
        SlurmJobRequest(name="x", nodes=0)


def test_the_launch_line_takes_the_node_count_from_slurm_not_a_placeholder():
    """The launcher's words are written as shell words directly: user words that look like the
    old placeholders (N, HEAD:0) stay literal."""
    script = render_sbatch(_spec({"entry": {"module": "N", "args": ["N", "HEAD:0"]}}))
    launch = script[script.index("launch=("):].split(")\n", 1)[0]
    assert '  --nnodes "$SLURM_NNODES"\n' in launch and '  --rdzv-id "$SLURM_JOB_ID"\n' in launch
    assert launch.endswith('  --rdzv-endpoint "$head_node:$rdzv_port"\n  -m N\n  N\n  HEAD:0\n')


#: the batch script's parts under data/shell and a spec whose script carries each
_PARTS = {"run_settings.sh": {}, "run_setup.sh": {}, "run_start.sh": {}, "run_end.sh": {},
          "ds_config.sh": {"launcher": "deepspeed"},
          "deepspeed_launch.sh": {"launcher": "deepspeed", "deepspeed_via": "deepspeed"}}


def test_every_shell_part_is_checked() -> None:
    from slinkyml.jobs.render import _RENDERED_FROM, SHELL_DIR

    assert {path.name for path in SHELL_DIR.glob("*.sh") if _RENDERED_FROM in path.read_text()} == set(_PARTS)


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (apt-get install shellcheck)")
@pytest.mark.parametrize("name", sorted(_PARTS))
def test_the_scripts_shell_parts_are_real_shellcheck_clean_files(name: str) -> None:
    """The batch script's shell lives in data/shell/*.sh (not in Python strings): each file is checked as it
    is, every __NAME__ in it is one the renderer fills, and each of its lines without one is in the script."""
    from slinkyml.jobs.render import _PLACEHOLDER, SHELL_DIR, shell_part

    path = SHELL_DIR / name
    proc = subprocess.run([SHELLCHECK, "-s", "bash", "--severity=style", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
    script = render_sbatch(JobSpec.from_dict({"name": "j", "entry": {"module": "m"}, **_PARTS[name]}))
    assert not _PLACEHOLDER.search(script)
    assert "# shellcheck" not in shell_part(name)
    fixed = [line for line in shell_part(name).splitlines() if line.strip() and not _PLACEHOLDER.search(line)]
    assert fixed and all(line in script.splitlines() for line in fixed), name


def test_a_placeholder_alone_on_its_line_that_fills_with_nothing_leaves_no_line() -> None:
    from slinkyml.jobs.render import fill

    part = "a=__VALUE__\n__BLOCK__\nb=1 # __VALUE__\n"
    assert fill(part, {"VALUE": "x", "BLOCK": ""}) == "a=x\nb=1 # x\n"
    assert fill(part, {"VALUE": "__BLOCK__", "BLOCK": "l1\nl2"}) == "a=__BLOCK__\nl1\nl2\nb=1 # __BLOCK__\n"
