"""``launcher: deepspeed`` with ``deepspeed_via: deepspeed``: DeepSpeed's own launcher (``--launcher
slurm``) runs once on the batch node and starts every rank as a task of one ``srun``.

Unit tests run the rendered script with stub commands and feed what it runs to DeepSpeed's own
argument parser and ``SlurmRunner``; the live tests (slurm/slow) train ZeRO-2 on two nodes of the
local cluster through it, and preempt → checkpoint → requeue → resume a run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_train_cluster import (  # the live tests share the torchrun tests' fixtures and helpers
    _assert_zero2_trained,
    _logs,
    _metrics,
    _submit,
    _train_spec,
    _wait_done,
    _wait_steps,
    needs_host_toolchain,
    own_jobs,  # noqa: F401 (fixture)
    workdir,  # noqa: F401 (fixture)
)

from slinkyml.errors import SpecError
from slinkyml.jobs.render import DS_RANK_ENTRY, render_sbatch, safe_name
from slinkyml.jobs.spec import JobSpec
from slinkyml.train import FINAL_FILE

needs_training = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("deepspeed") is None,
    reason="torch and deepspeed are not installed (pip install '.[train]')")
EVIL = "x $(touch /tmp/slinkyml-pwned) `touch /tmp/slinkyml-pwned`; echo \"q\" 'q' \\ \n second line"
SHELLCHECK = shutil.which("shellcheck")


def _spec(**extra) -> JobSpec:
    data = {"name": "ds", "nodes": 2, "launcher": "deepspeed", "deepspeed_via": "deepspeed",
            "entry": {"module": "slinkyml.train", "args": ["--deepspeed", "--steps", "3"]}}
    data.update(extra)
    return JobSpec.from_dict(data)


def _stub(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def _run_rendered(tmp_path: Path, spec_extra: dict, *, runner: str,
                  preempt: bool = False) -> tuple[subprocess.CompletedProcess, JobSpec]:
    """Run the rendered batch script with a stub ``scontrol`` and ``runner`` as the job's interpreter
    (it stands in for ``python -m deepspeed.launcher.runner``); ``preempt``: send the batch shell
    SIGUSR2 once the runner's child has started."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    _stub(bin_dir / "scontrol", "#!/bin/sh\n[ \"$1\" = show ] && printf 'n1\\nn2\\n'\n"
          "[ \"$1\" = requeue ] && echo requeued >> \"$OUT.requeue\"\nexit 0\n")
    _stub(bin_dir / "squeue", "#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")
    py = _stub(tmp_path / "fake-python", f"#!{sys.executable}\n{runner}")
    spec = _spec(python=str(py), **spec_extra)
    script = tmp_path / "job.sbatch"
    script.write_text(render_sbatch(spec))
    run_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
               "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2", "OUT": str(tmp_path / "out.json")}
    run_env.pop("SLURM_RESTART_COUNT", None)
    proc = subprocess.Popen(["bash", str(script)], env=run_env, cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        if preempt:
            deadline = time.monotonic() + 20
            while not (tmp_path / "out.json.child").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.send_signal(signal.SIGUSR2)  # what sbatch --signal=B:USR2@… / scancel --batch does
        stdout, stderr = proc.communicate(timeout=20)
    finally:  # a child left running (signal not forwarded) must not outlive the test
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), spec


# -- spec ----------------------------------------------------------------------------------------
def test_every_rank_is_a_slurm_task():
    assert _spec().effective_tasks_per_node == 1 and _spec(gpus_per_node=8).effective_tasks_per_node == 8
    assert _spec(procs_per_node=4).world_size == 8
    assert "#SBATCH --ntasks-per-node=4" in render_sbatch(_spec(procs_per_node=4, cpus_per_task=2))
    assert _spec(deepspeed_via="torchrun", gpus_per_node=8).effective_tasks_per_node == 1  # unchanged
    with pytest.raises(SpecError, match="tasks_per_node"):
        _spec(gpus_per_node=8, tasks_per_node=1)
    with pytest.raises(SpecError, match="container"):
        _spec(container={"image": "img:1"})


# -- the rendered script, run with stubs, parsed by DeepSpeed itself ------------------------------
_DUMP_ARGV = """import json, os, sys
json.dump({"argv": sys.argv[1:], "cwd": os.getcwd(),
           "env": {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "E", "NCCL_IB_DISABLE")}},
          open(os.environ["OUT"], "w"))
"""


@pytest.mark.parametrize("gpus", [0, 4])
def test_launch_line_is_what_deepspeeds_slurm_runner_expects(tmp_path, gpus):
    runner = pytest.importorskip("deepspeed.launcher.runner")
    from deepspeed.launcher.multinode_runner import SlurmRunner

    log_dir = tmp_path / "l %j"  # '%' must reach srun's --output escaped
    extra = {"name": EVIL.replace("\n", " "), "log_dir": str(log_dir), "env": {"E": EVIL},
             "entry": {"module": "slinkyml.train", "args": [EVIL, "--x"]}, "rdzv_port": 29777,
             "srun_args": ["--mpi=pmix", f"--comment={EVIL}"]}
    if gpus:
        extra["gpus_per_node"] = gpus
    else:
        extra["procs_per_node"] = 2
    canary = Path("/tmp/slinkyml-pwned")
    canary.unlink(missing_ok=True)
    proc, spec = _run_rendered(tmp_path, extra, runner=_DUMP_ARGV)
    assert proc.returncode == 0, proc.stderr
    assert not canary.exists()
    out = json.loads((tmp_path / "out.json").read_text())
    argv = out["argv"]
    assert argv[:2] == ["-m", "deepspeed.launcher.runner"]
    assert out["env"] == {"MASTER_ADDR": "n1", "MASTER_PORT": "29777", "E": EVIL, "NCCL_IB_DISABLE": "1"}
    procs = gpus or 2
    args = runner.parse_args(argv[2:])
    assert (args.launcher, args.num_nodes, args.master_addr, args.master_port) == ("slurm", 2, "n1", 29777)
    assert args.no_ssh_check and args.force_multi and not args.module
    assert Path(args.hostfile).read_text() == f"n1 slots={procs}\nn2 slots={procs}\n"
    assert Path(args.user_script).read_text() == DS_RANK_ENTRY
    assert args.user_args == ["-m", "slinkyml.train", EVIL, "--x"]
    # what runner.main() then builds and runs
    pool = runner.fetch_hostfile(args.hostfile)
    active = runner.apply_num_nodes_and_gpus(
        runner.parse_inclusion_exclusion(pool, args.include, args.exclude), args.num_nodes, args.num_gpus)
    assert len(active) == 2  # multi-node: DeepSpeed's srun, not a local launch in the batch step
    cmd = SlurmRunner(args, runner.encode_world_info(active), pool).get_cmd(dict(os.environ), active)
    output = f"--output={str(log_dir).replace('%', '%%')}/{safe_name(spec.name)}-%j-r0-rank%t.log"
    assert cmd[:8] == ["srun", "-n", str(2 * procs), "--kill-on-bad-exit=1", output, "--mpi=pmix",
                       f"--comment={EVIL}", "--nodes"]
    assert ("--gpus-per-node" in cmd) == bool(gpus)  # a CPU job must not ask srun for GPUs
    assert cmd[cmd.index(args.user_script) - 2:] == [sys.executable, "-u", args.user_script, "-m",
                                                     "slinkyml.train", EVIL, "--x"]


_RUNNER_WITH_SRUN_CHILD = """import os, subprocess, sys
# stands in for DeepSpeed's runner: no signal handler of its own, its srun is a child process
child = subprocess.Popen(["bash", "-c", 'trap "echo USR2 > \\"$OUT.child\\"; exit 0" USR2; '
                          'touch "$OUT.child"; while :; do sleep 0.05; done'])
code = child.wait()
open(os.environ["OUT"] + ".runner", "w").write(f"child exited {code}")  # the runner itself lived on
sys.exit(code)
"""


def test_preemption_signal_reaches_deepspeeds_srun_and_the_job_requeues(tmp_path):
    proc, _ = _run_rendered(tmp_path, {"requeue": {"signal": "USR2", "max_restarts": 2}},
                            runner=_RUNNER_WITH_SRUN_CHILD, preempt=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "out.json.child").read_text() == "USR2\n"  # the srun child got it
    assert (tmp_path / "out.json.runner").read_text() == "child exited 0"  # the runner did not
    assert "requeueing (restart 1 of 2)" in proc.stdout
    assert (tmp_path / "out.json.requeue").read_text() == "requeued\n"


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (apt-get install shellcheck)")
def test_hostile_values_render_shellcheck_clean(tmp_path):
    path = tmp_path / "job.sbatch"
    path.write_text(render_sbatch(_spec(name=EVIL.replace("\n", " "), log_dir="/tmp/l %j", gpus_per_node=8,
                                        env={"E": EVIL}, srun_args=[f"--comment={EVIL}"],
                                        entry={"script": "/w/t $(x).py", "args": [EVIL]})))
    proc = subprocess.run([SHELLCHECK, "--severity=style", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


# -- the rank entry --------------------------------------------------------------------------------
def test_rank_entry_sets_the_rank_environment_and_undoes_deepspeeds_quotes(tmp_path):
    entry = tmp_path / "entry.py"
    entry.write_text(DS_RANK_ENTRY)
    (tmp_path / "pkg").mkdir()
    dump = ("import json, os, sys\njson.dump({'argv': sys.argv, 'name': __name__, 'env': {k: os.environ.get(k) "
            "for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'NCCL_SOCKET_IFNAME', 'NCCL_NET', 'PYTHON_X', 'PYTHON_Y',"
            " 'OTHER')}},"
            " open(os.environ['OUT'], 'w'))\n")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "dump.py").write_text(dump)
    (tmp_path / "dump_script.py").write_text(dump)
    env = {"PATH": os.environ["PATH"], "OUT": str(tmp_path / "out.json"), "SLURM_PROCID": "3",
           "SLURM_LOCALID": "1", "SLURM_STEP_NUM_TASKS": "4", "RANK": "0",
           "NCCL_SOCKET_IFNAME": '"^lo,docker,veth"',  # as DeepSpeed's add_export + srun deliver it
           "NCCL_NET": '"AWS Libfabric"',  # the efa preset's plugin name, quoted the same way
           "PYTHON_X": '""a b""', "PYTHON_Y": '"plain"', "OTHER": '"^lo"'}
    expected_env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "NCCL_SOCKET_IFNAME": "^lo,docker,veth",
                    "NCCL_NET": "AWS Libfabric",
                    "PYTHON_X": '"a b"', "PYTHON_Y": '"plain"', "OTHER": '"^lo"'}
    workdir_ = tmp_path / "run"
    workdir_.mkdir()
    # module mode runs from the working directory like `python -m`
    subprocess.run([sys.executable, "-u", str(entry), "-m", "pkg.dump", "a b", "-m"], env=env,
                   cwd=tmp_path, check=True)
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["argv"] == [str(tmp_path / "pkg" / "dump.py"), "a b", "-m"] and out["name"] == "__main__"
    assert out["env"] == expected_env
    # script mode: the script's folder comes first on sys.path, like `python script.py`
    subprocess.run([sys.executable, "-u", str(entry), str(tmp_path / "dump_script.py"), "--x"], env=env,
                   cwd=workdir_, check=True)
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["argv"] == [str(tmp_path / "dump_script.py"), "--x"] and out["env"] == expected_env


# -- live: the local cluster -----------------------------------------------------------------------
_ENV_PROBE = """import json, os, runpy, sys
from pathlib import Path
names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NCCL_IB_DISABLE", "NCCL_DEBUG",
         "SLINKYML_CHECKPOINT_DIR", "SLINKYML_LOG_DIR", "SLINKYML_PREEMPT_SIGNAL", "SLINKYML_RESTART_COUNT",
         "SLINKYML_DEEPSPEED_CONFIG", "SLINKYML_PROBE", "PYTHON_SLINKYML_PROBE")
out = Path(os.environ["SLINKYML_CHECKPOINT_DIR"]).parent
out.mkdir(parents=True, exist_ok=True)
(out / f"env-rank{os.environ['RANK']}-r{os.environ['SLINKYML_RESTART_COUNT']}.json").write_text(
    json.dumps({"env": {k: os.environ.get(k) for k in names}, "argv": sys.argv}))
runpy.run_module("slinkyml.train", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slurm
@pytest.mark.slow
@needs_training
@needs_host_toolchain
@pytest.mark.timeout(300)
def test_two_node_deepspeed_launcher_zero2(slurm, workdir, own_jobs):  # noqa: F811
    spec = _train_spec(workdir, "dsl", ["--deepspeed", "--steps", "4", "--checkpoint-every", "2"],
                       launcher="deepspeed", deepspeed_via="deepspeed", mem_per_node="2G", rdzv_port=29613,
                       deepspeed_config={"zero_optimization": {"stage": 2}, "gradient_clipping": 1.0})
    job_id = _submit(slurm, spec, workdir, own_jobs)
    _assert_zero2_trained(slurm, spec, job_id)
    assert [r["step"] for r in _metrics(spec)] == [1, 2, 3, 4]
    # one srun from DeepSpeed's launcher (not nested in another), one task per rank on each node
    ranks = {p.name: p.read_text() for p in Path(spec.log_dir).glob(f"dsl-{job_id}-r0-rank*.log")}
    assert sorted(ranks) == [f"dsl-{job_id}-r0-rank0.log", f"dsl-{job_id}-r0-rank1.log"]
    assert all("all-reduce check: world=2 sum=3 expected=3 ok" in text for text in ranks.values())
    for _ in range(20):  # accounting trails the controller by a moment
        steps = slurm.run("sacct", ["-n", "-P", "-j", str(job_id), "-o", "JobID,NTasks"]).stdout.split()
        if f"{job_id}.0|2" in steps:
            break
        time.sleep(0.5)
    assert f"{job_id}.0|2" in steps and not any(s.startswith(f"{job_id}.1|") for s in steps), steps


@pytest.mark.slurm
@pytest.mark.slow
@needs_training
@needs_host_toolchain
@pytest.mark.timeout(300)
def test_deepspeed_launcher_preempted_checkpoints_requeues_and_resumes(slurm, workdir, own_jobs):  # noqa: F811
    probe = workdir / "ds_env_probe.py"
    probe.write_text(_ENV_PROBE)
    spec = _train_spec(workdir, "dslpre", [], launcher="deepspeed", deepspeed_via="deepspeed",
                       mem_per_node="2G", rdzv_port=29614,
                       entry={"script": str(probe), "args": ["--deepspeed", "--steps", "14", "--checkpoint-every",
                                                             "4", "--step-sleep", "0.5"]},
                       env={"SLINKYML_PROBE": "a b $(x) \"q\"", "PYTHON_SLINKYML_PROBE": "^lo,docker,veth x"},
                       deepspeed_config={"zero_optimization": {"stage": 2}})
    job_id = _submit(slurm, spec, workdir, own_jobs)
    _wait_steps(slurm, job_id, spec, 5)
    slurm.run("scancel", ["--signal=USR2", "--batch", str(job_id)])  # what --signal does before the end
    state = _wait_done(slurm, job_id)
    logs = _logs(spec)
    assert state.state == "COMPLETED" and state.restarts == 1, logs[-3000:]
    rows = _metrics(spec)
    first = [r["step"] for r in rows if r["restart"] == 0]
    second = [r["step"] for r in rows if r["restart"] == 1]
    stopped = first[-1]
    assert first == list(range(1, stopped + 1)) and stopped >= 5
    assert second == list(range(stopped + 1, 15))  # no gap, no repeat
    batch_log = (Path(spec.log_dir) / f"dslpre-{job_id}.out").read_text()
    assert "slinkyml: SIGUSR2 received; forwarding to the training processes" in batch_log
    heads = dict(re.findall(r"restart (\d+)/2 on \S+ \(head (\S+)\)", batch_log))
    assert logs.count("SIGUSR2 received: will checkpoint and stop after this step") == 2  # both ranks
    assert f"checkpoint saved: ckpt-{stopped:08d}" in logs and "requeueing (restart 1 of 2)" in logs
    assert logs.count(f"resumed from ckpt-{stopped:08d} at step {stopped}") == 2
    assert logs.count("all-reduce check: world=2 sum=3 expected=3 ok") == 4  # 2 ranks x 2 runs
    final = json.loads((Path(spec.checkpoint_dir) / FINAL_FILE).read_text())
    assert final["steps"] == 14 and final["start_step"] == stopped and final["allreduce"]["ok"]
    # every rank got the batch script's environment, exactly, on both runs
    for rank in (0, 1):
        for restart in (0, 1):
            seen = json.loads((workdir / "dslpre" / f"env-rank{rank}-r{restart}.json").read_text())
            assert seen["argv"] == [str(probe), *spec.entry.args]
            assert seen["env"] == {
                "RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": heads[str(restart)],
                "MASTER_PORT": "29614", "NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "WARN",
                "SLINKYML_CHECKPOINT_DIR": spec.checkpoint_dir, "SLINKYML_LOG_DIR": spec.log_dir,
                "SLINKYML_PREEMPT_SIGNAL": "USR2", "SLINKYML_RESTART_COUNT": str(restart),
                "SLINKYML_DEEPSPEED_CONFIG": f"{spec.log_dir}/ds_config-{job_id}.json",
                "SLINKYML_PROBE": "a b $(x) \"q\"", "PYTHON_SLINKYML_PROBE": "^lo,docker,veth x"}
