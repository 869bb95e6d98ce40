"""The GPU check's job: its checked-in rendering, and a CPU rehearsal of the no-Slurm path.

The GPU machine lent to development has no Slurm, so benchmarks/gpu_check.sh runs the rendered
batch script there with SLURM_* set and benchmarks/noslurm/ standing in for srun/scontrol. The
rehearsal runs that same path here on CPU (tiny model, gloo) so that a GPU session only has to run it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from slinkyml.jobs.render import render_sbatch
from slinkyml.jobs.spec import JobSpec

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"


def test_checked_in_gpu_check_script_is_regenerated_and_shellcheck_clean():
    spec = JobSpec.from_yaml(BENCH / "gpu-check.yaml")
    assert (BENCH / "gpu-check.sbatch").read_text() == render_sbatch(spec), \
        "stale: slinkyml sbatch render benchmarks/gpu-check.yaml -o benchmarks/gpu-check.sbatch"
    assert spec.gpus_per_node == 1 and spec.launcher == "torchrun"
    args = spec.to_dict()["entry"]["args"]
    assert args[args.index("--model") + 1] == "1b" and args[args.index("--backend") + 1] == "nccl"
    assert args[args.index("--precision") + 1] == "bf16"
    if shutil.which("shellcheck"):
        files = [BENCH / "gpu-check.sbatch", BENCH / "gpu_check.sh", BENCH / "noslurm" / "srun",
                 BENCH / "noslurm" / "scontrol"]
        proc = subprocess.run(["shellcheck", "--severity=style", *map(str, files)], capture_output=True,
                              text=True)
        assert proc.returncode == 0, proc.stdout


def test_noslurm_stand_ins_refuse_what_they_cannot_do(tmp_path):
    env = {**os.environ, "SLURM_JOB_NODELIST": "gpu1"}
    srun, scontrol = str(BENCH / "noslurm" / "srun"), str(BENCH / "noslurm" / "scontrol")
    assert subprocess.run([scontrol, "show", "hostnames"], env=env, capture_output=True,
                          text=True).stdout == "gpu1\n"
    bad = subprocess.run([srun, "--nodes=2", "true"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "only one node" in bad.stderr
    out = tmp_path / "task-%t-%j.log"
    env["SLURM_JOB_ID"] = "77"
    ok = subprocess.run([srun, "--kill-on-bad-exit=1", f"--output={out}", "sh", "-c",
                         "echo $SLURM_PROCID $SLURM_NTASKS"], env=env)
    assert ok.returncode == 0 and (tmp_path / "task-0-77.log").read_text() == "0 1\n"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cpu_rehearsal_of_the_no_slurm_path(tmp_path):
    pytest.importorskip("torch", reason="torch is not installed (pip install '.[train]')")
    data = yaml.safe_load((BENCH / "gpu-check.yaml").read_text())
    args = data["entry"]["args"]
    for flag, value in (("--model", "tiny"), ("--backend", "gloo"), ("--precision", "fp32"), ("--steps", "3"),
                        ("--batch-size", "4")):
        args[args.index(flag) + 1] = value
    assert "checkpoint_dir" not in data and "--peak-tflops" not in args  # off by default; peak detected
    data.update(gpus_per_node=0, log_dir=str(tmp_path / "logs"))
    script = tmp_path / "cpu.sbatch"
    script.write_text(render_sbatch(JobSpec.from_dict(data)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "SLINKYML_CHECKPOINT"))}
    env.update(GPU_CHECK_ALLOW_CPU="1", GPU_CHECK_NO_SLURM="1", GPU_CHECK_SCRIPT=str(script),
               GPU_CHECK_RESULT=str(tmp_path / "logs" / "final.json"), PY=str(Path(os.sys.executable)))
    proc = subprocess.run(["bash", str(BENCH / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=280)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "as the batch step of job 4242" in proc.stdout
    assert "1 cpu rank(s), 3 steps" in proc.stdout and "all-reduce ok=True" in proc.stdout
    assert "tokens/s" in proc.stdout
    final = json.loads((tmp_path / "logs" / "final.json").read_text())
    assert final["steps"] == 3 and final["world_size"] == 1 and final["tokens_per_second"] > 0
    assert list((tmp_path / "logs").glob("gpu-check-4242-r0-node0.log"))  # srun --output honoured
    assert not list(tmp_path.rglob("ckpt-*")), "a checkpoint was written though none was asked for"

    # asked for: the checkpoint (and the result) go to GPU_CHECK_CHECKPOINT_DIR
    ckpt = tmp_path / "ckpt"
    env.update(GPU_CHECK_CHECKPOINT_DIR=str(ckpt), GPU_CHECK_RESULT=str(ckpt / "final.json"))
    proc = subprocess.run(["bash", str(BENCH / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=280)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads((ckpt / "final.json").read_text())["steps"] == 3
    assert list(ckpt.glob("ckpt-*")), "no checkpoint in GPU_CHECK_CHECKPOINT_DIR"
