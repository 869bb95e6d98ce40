#!/bin/bash
# GPU check (≤ 8 minutes): the torchrun path with NCCL and bf16 on a ~1B-parameter GPT; prints
# tokens/s and MFU (goal ≥ 40 %).
#
#   benchmarks/gpu_check.sh            # env: PY (default .venv/bin/python, else python3)
#
# Runs the job spec benchmarks/gpu-check.yaml in one of two ways:
# * Slurm installed (slurmctld on PATH): `slinkyml dev up` (the dev cluster sees `nvidia-smi -L`
#   and writes Gres=gpu:N), render the spec with this interpreter and the GPUs found, submit, follow;
# * no Slurm (the GPU machine lent to development has none): run the checked-in rendering
#   benchmarks/gpu-check.sbatch as the batch step, SLURM_* set as Slurm would set them and
#   benchmarks/noslurm/ standing in for srun/scontrol, so the torchrun line is the template's own.
# MFU is against the data-sheet dense BF16 peak of the GPU model the trainer detects (nvidia-smi's
# name looked up in slinkyml/data/gpus.yaml; an unknown model gets no MFU); the figure against the
# measured matmul peak is printed too when MATMUL_PEAK_TFLOPS is set.
# No checkpoint unless GPU_CHECK_CHECKPOINT_DIR names a directory (the 1B model's is ~13 GB); the
# result (final.json) is then written there, else next to the logs.
# For a CPU rehearsal of the no-Slurm path (tests/test_gpu_check.py): GPU_CHECK_ALLOW_CPU=1,
# GPU_CHECK_SCRIPT=<a CPU rendering>, GPU_CHECK_RESULT=<its final.json>.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
py=${PY:-}
if [[ -z "$py" ]]; then
  if [[ -x .venv/bin/python ]]; then py=.venv/bin/python; else py=python3; fi
fi
py=$(command -v "$py")

if [[ -z "${GPU_CHECK_ALLOW_CPU:-}" ]]; then
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no NVIDIA GPU (nvidia-smi -L failed)" >&2
    exit 1
  fi
  if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: $py has a torch without CUDA; point PY= at an interpreter with CUDA torch" >&2
    exit 1
  fi
fi

if command -v slurmctld >/dev/null 2>&1 && [[ -z "${GPU_CHECK_NO_SLURM:-}" ]]; then
  slinkyml=${SLINKYML:-$(dirname "$py")/slinkyml}
  timeout 180 "$slinkyml" dev up
  export SLURM_CONF=${SLURM_CONF:-/var/lib/slinkyml/dev/etc/slurm.conf}
  gres=$(scontrol -o show node n1 | grep -o 'Gres=gpu:[0-9]*' | cut -d: -f2)
  if [[ -z "$gres" || "$gres" == 0 ]]; then
    echo "gpu_check: the dev cluster has no Gres=gpu (was it started before the GPU was visible?)" >&2
    exit 1
  fi
  work=$(mktemp -d /tmp/slinkyml-gpu-check-XXXXXX)
  chmod 777 "$work"
  ckpt=${GPU_CHECK_CHECKPOINT_DIR:-}
  "$py" - "$work" "$gres" "$py" "$ckpt" <<'PY'
import sys, yaml
work, gres, py, ckpt = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
spec = yaml.safe_load(open("benchmarks/gpu-check.yaml"))
spec.update(gpus_per_node=gres, python=py, log_dir=f"{work}/logs")
if ckpt:
    spec["checkpoint_dir"] = ckpt
yaml.safe_dump(spec, open(f"{work}/job.yaml", "w"), sort_keys=False)
PY
  "$slinkyml" sbatch render "$work/job.yaml" -o "$work/job.sbatch"
  (cd "$work" && timeout 420 "$slinkyml" sbatch submit job.yaml --follow --timeout 400)
  result=${ckpt:-$work/logs}/final.json
else
  script=${GPU_CHECK_SCRIPT:-benchmarks/gpu-check.sbatch}
  if [[ -n "${GPU_CHECK_CHECKPOINT_DIR:-}" ]]; then
    export SLINKYML_CHECKPOINT_DIR=$GPU_CHECK_CHECKPOINT_DIR  # the trainer's --checkpoint-dir default
  fi
  result=${GPU_CHECK_RESULT:-${GPU_CHECK_CHECKPOINT_DIR:-/tmp/slinkyml-gpu-check/logs}/final.json}
  rm -f "$result"
  shim=$(mktemp -d /tmp/slinkyml-gpu-check-bin-XXXXXX)
  trap 'rm -rf "$shim"' EXIT
  printf '#!/bin/sh\nexec %q "$@"\n' "$py" > "$shim/python3"  # the script's `python: python3`
  chmod +x "$shim/python3"
  host=$(hostname -s)
  getent hosts "$host" >/dev/null || host=localhost  # the rendezvous endpoint must resolve
  ngpu=$("$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
  export PATH="$shim:$repo/benchmarks/noslurm:$PATH" PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
  export SLURM_JOB_ID=${SLURM_JOB_ID:-4242} SLURM_JOB_NAME=gpu-check SLURM_NNODES=1 SLURM_JOB_NUM_NODES=1
  export SLURM_JOB_NODELIST=$host SLURM_NODELIST=$host SLURMD_NODENAME=$host SLURM_SUBMIT_DIR=$repo
  export SLURM_CPUS_PER_TASK=8 SLURM_NTASKS_PER_NODE=1 SLURM_GPUS_ON_NODE=$ngpu SLURM_JOB_PARTITION=local
  echo "gpu_check: no Slurm here: running $script as the batch step of job $SLURM_JOB_ID on $host"
  timeout 420 bash "$script"
fi

"$py" - "$result" <<'PY'
import json, os, sys
f = json.load(open(sys.argv[1]))
print(f"gpu_check: {f['params'] / 1e9:.2f}B params, {f['world_size']} {f['device']} rank(s), "
      f"{f['steps']} steps, loss {f['first_loss']:.3f} -> {f['final_loss']:.3f}, "
      f"all-reduce ok={f['allreduce']['ok']}")
line = f"gpu_check: {f['tokens_per_second']:.0f} tokens/s"
if f.get("mfu") is not None:
    line += (f", MFU {100 * f['mfu']:.1f}% of the {f['peak_tflops_per_device']:g} TFLOP/s data-sheet peak"
             f" of the {f.get('gpu_name')} ({f.get('peak_source')})")
    measured = os.environ.get("MATMUL_PEAK_TFLOPS")
    if measured:
        line += f" ({100 * f['mfu'] * f['peak_tflops_per_device'] / float(measured):.1f}% of {measured} measured)"
elif f.get("device") == "cuda":
    line += f", no MFU: no peak known for the {f.get('gpu_name')} (give --peak-tflops)"
print(line)
sys.exit(0 if f["allreduce"]["ok"] else 1)
PY
