#!/bin/bash
# The batch script between its settings and its launch line: the run's first log line, the files of
# the run protocol, and a requeued run kept off the batch node that was lost (exclude_failed_nodes.sh).
# slinkyml/jobs/render.py renders it in, replacing __INFRA_REGEX__ (the node-failure lines of
# data/run_causes.json, quoted), __EVENTS_FILE__ and __BATCH_NODES__ (quoted paths of
# slurm/protocol.py) and __EXCLUDE_FAILED_NODES__ (data/templates/exclude_failed_nodes.sh).
# The settings before it set restart_count, max_restarts and head_node.
# SC2154/SC2034: variables set by the script's other parts, and read there (the rendered-in functions and the script's end read what it assigns).
# shellcheck disable=SC2154,SC2034
# -- rendered from here (slinkyml/jobs/render.py carries what follows into every batch script)
echo "slinkyml: job $SLURM_JOB_ID restart $restart_count/$max_restarts on $SLURM_JOB_NODELIST (head $head_node)"

infra_regex=__INFRA_REGEX__
events=__EVENTS_FILE__
batch_nodes=__BATCH_NODES__
__EXCLUDE_FAILED_NODES__
avoid_lost_batch_node
