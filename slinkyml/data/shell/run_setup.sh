#!/bin/bash
# The batch script after its environment: a run past requeue.max_restarts stops here, the log folder is
# made, and the script keeps a copy of itself next to its logs. slinkyml/jobs/render.py renders it in,
# replacing __LOG_NAME__ with the job's name as its log files carry it (letters, digits, . _ - only).
# The settings before it set restart_count, max_restarts and log_dir.
# SC2154: variables set by the script's settings.
# shellcheck disable=SC2154
# -- rendered from here (slinkyml/jobs/render.py carries what follows into every batch script)

if (( restart_count > max_restarts )); then
  echo "slinkyml: restart $restart_count exceeds the limit of $max_restarts; not running" >&2
  exit 1
fi
mkdir -p -- "$log_dir"
# a copy of this script (as Slurm runs it, however it was submitted) next to its logs
cp -- "$0" "$log_dir/__LOG_NAME__-$SLURM_JOB_ID.sbatch" 2>/dev/null || true
