#!/bin/bash
# A job run by DeepSpeed's own launcher: what comes before its launch line, on the batch node: the
# rendezvous address, the hostfile the launcher reads and the entry every rank runs first
# (ds_rank_entry.py, written next to the logs). slinkyml/jobs/render.py renders it in after
# run_start.sh, replacing __SLOTS__ (processes per node) and __DS_RANK_ENTRY__ (ds_rank_entry.py).
# SC2154/SC2034: log_dir, head_node and rdzv_port are set by the script's settings; the launch line
# after this part reads hostfile and rank_entry.
# shellcheck disable=SC2154,SC2034
# -- rendered from here (slinkyml/jobs/render.py carries what follows into a DeepSpeed launcher's script)
# -- launch: DeepSpeed's launcher (--launcher slurm) runs here, on the batch node, and starts
# every rank as a task of one srun; ranks take RANK/LOCAL_RANK/WORLD_SIZE from srun
# (ds_rank_entry), MASTER_ADDR/PORT from here (srun --export=ALL passes this environment on)
export MASTER_ADDR="$head_node" MASTER_PORT="$rdzv_port"
hostfile="$log_dir/hostfile-${SLURM_JOB_ID}"
scontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/\$/ slots=__SLOTS__/" > "$hostfile"
rank_entry="$log_dir/ds_rank_entry-${SLURM_JOB_ID}.py"
cat > "$rank_entry" <<'SLINKYML_RANK_ENTRY'
__DS_RANK_ENTRY__
SLINKYML_RANK_ENTRY
