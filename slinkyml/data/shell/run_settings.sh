#!/bin/bash
# The batch script after its #SBATCH lines: the job spec's settings, this run's own values (restart count,
# start time, head node, rendezvous port) and its environment. slinkyml/jobs/render.py renders it in,
# replacing __SETTINGS__ (the spec's settings, one quoted assignment a line), __RDZV_PORT__ (the
# rendezvous port's lines of rendezvous.py, or nothing where the launch line does not use the port),
# __NETWORK__ (the spec's network preset), __ENV_RESTART__, __ENV_SIGNAL__ and __ENV_LOG_DIR__ (the
# names of slurm/protocol.py), __SIG__ (the stop signal) and __ENVIRONMENT__ (the checkpoint folder's,
# the network preset's and the spec's own exports). A placeholder alone on its line that fills with
# nothing leaves no line.
# SC2154/SC2034: log_dir is one of the settings; run_started and head_node are read by the parts after.
# shellcheck disable=SC2154,SC2034
# -- rendered from here (slinkyml/jobs/render.py carries what follows into every batch script)
set -euo pipefail

# -- settings from the job spec
__SETTINGS__
restart_count="${SLURM_RESTART_COUNT:-0}"
run_started="$(date +%s)"
head_node="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
__RDZV_PORT__

# -- environment: slinkyml, network preset (__NETWORK__), then the spec's own
export __ENV_RESTART__="$restart_count"
export __ENV_SIGNAL__=__SIG__
export __ENV_LOG_DIR__="$log_dir"
__ENVIRONMENT__
