#!/bin/bash
# GPU check (≤ 8 minutes): the torchrun path with NCCL and bf16 on a ~1B-parameter GPT.
#
# NOT RUN during development: no GPU machine was available. Written to be correct by reading;
# the parts testable on CPU (1B parameter count, MFU formula, rendered script) are unit-tested.
#
#   benchmarks/gpu_check.sh            # env: STEPS=30 BATCH=8 NODES=1 PY=.venv/bin/python
#
# 1. `slinkyml dev up` — the dev cluster sees `nvidia-smi -L` and writes Gres=gpu:N per node;
# 2. renders the torchrun job (NCCL, bf16, --model 1b) from a YAML spec and submits it, waiting;
# 3. prints tokens/s and MFU against the H200 peak from slinkyml/data/gpus.yaml (989 TFLOP/s bf16).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PY:-.venv/bin/python}
slinkyml=${SLINKYML:-$(dirname "$py")/slinkyml}
steps=${STEPS:-30}
batch=${BATCH:-8}
nodes=${NODES:-1}

if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU (nvidia-smi -L failed)" >&2
  exit 1
fi
if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_check: $py has a torch without CUDA; point PY= at an interpreter with CUDA torch" >&2
  exit 1
fi

timeout 180 "$slinkyml" dev up
export SLURM_CONF=${SLURM_CONF:-/var/lib/slinkyml/dev/etc/slurm.conf}
gres=$(scontrol -o show node n1 | grep -o 'Gres=gpu:[0-9]*' | cut -d: -f2)
if [[ -z "$gres" || "$gres" == 0 ]]; then
  echo "gpu_check: the dev cluster has no Gres=gpu (was it started before the GPU was visible?)" >&2
  exit 1
fi
peak=$("$py" -c 'import yaml; print(yaml.safe_load(open("slinkyml/data/gpus.yaml"))["gpus"]["h200-141gb"]["peak_bf16_tflops"])' 2>/dev/null || echo 989)

work=$(mktemp -d /tmp/slinkyml-gpu-check-XXXXXX)
chmod 777 "$work"
cat > "$work/job.yaml" <<YAML
name: gpu-check
nodes: $nodes
gpus_per_node: $gres
cpus_per_task: 4
mem_per_node: 3G
time_limit: "00:08:00"
launcher: torchrun
network: tcp
python: $(realpath "$py")
env: {NCCL_DEBUG: WARN}
entry:
  module: slinkyml.train
  args: [--model, 1b, --precision, bf16, --backend, nccl, --steps, "$steps", --batch-size, "$batch",
         --checkpoint-every, "100000", --peak-tflops, "$peak"]
checkpoint_dir: $work/ckpt
log_dir: $work/logs
requeue: {max_restarts: 0}
YAML
"$slinkyml" sbatch render "$work/job.yaml" -o "$work/job.sbatch"
(cd "$work" && timeout 420 "$slinkyml" sbatch submit job.yaml --follow --timeout 400)
"$py" - "$work/ckpt/final.json" <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))
print(f"gpu_check: {f['params'] / 1e9:.2f}B params, {f['world_size']} GPU(s), {f['steps']} steps, "
      f"loss {f['first_loss']:.3f} -> {f['final_loss']:.3f}")
print(f"gpu_check: {f['tokens_per_second']:.0f} tokens/s, MFU {100 * f['mfu']:.1f}% "
      f"(peak {f['peak_tflops_per_device']:g} TFLOP/s per GPU, all-reduce ok={f['allreduce']['ok']})")
PY
