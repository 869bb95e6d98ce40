#!/bin/bash
# A DeepSpeed job's config as a JSON object (the spec's, or the planner's default for its world size),
# written next to the logs at run time. slinkyml/jobs/render.py renders it in after run_setup.sh,
# replacing __ENV_DS_CONFIG__ (the variable of slurm/protocol.py that names the file for the job) and
# __DS_CONFIG_JSON__ (the config). A config given as a path is exported as it is instead.
# SC2154: log_dir is one of the script's settings (run_settings.sh).
# shellcheck disable=SC2154
# -- rendered from here (slinkyml/jobs/render.py carries what follows into a DeepSpeed job's script)
export __ENV_DS_CONFIG__="$log_dir/ds_config-${SLURM_JOB_ID}.json"
cat > "$__ENV_DS_CONFIG__" <<'SLINKYML_DS_CONFIG'
__DS_CONFIG_JSON__
SLINKYML_DS_CONFIG
