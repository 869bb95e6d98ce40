# -- a requeued run avoids the nodes that just failed: nodes of this run (not the batch node, which
# still runs this script) that srun named in its node-failure lines, whose slurmd started after this
# run did (a replaced slurmd pod, perhaps at a new address), or that slurmctld no longer reaches.
# The next run excludes them (ExcNodeList, which slurmctld takes once the job is pending again),
# unless the job asks for one of them by name or the partition would have too few nodes left.
# (slinkyml/data/templates/exclude_failed_nodes.sh; uses $run_started, $step_errors, $infra_regex,
# $events, $batch_nodes, $requeue_on, $restart_count, $max_restarts)
# failed_nodes prints them, comma-separated, before the requeue: from the requeue on, slurmstepd
# signals every process of the job, so only one command (exclude_nodes, SIGTERM ignored) runs after.
node_failed_since() {
  local record started state
  record="$(scontrol -o show node "$1" 2>/dev/null || true)"
  started="$(sed -n 's/.* SlurmdStartTime=\([^ ]*\).*/\1/p' <<<"$record")"
  state="$(sed -n 's/.* State=\([^ ]*\).*/\1/p' <<<"$record")"
  [[ $state == *NOT_RESPONDING* || $state == DOWN* || $state == *FAIL* ]] \
    || (( $(date -d "${started:-@0}" +%s 2>/dev/null || echo 0) > $2 ))
}
failed_nodes() {
  local node failed=()
  for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null); do
    [[ $node == "${SLURMD_NODENAME:-}" ]] && continue
    if grep -E -- "$infra_regex" "$step_errors" 2>/dev/null | grep -qw -- "$node" \
        || node_failed_since "$node" "$run_started"; then
      failed+=("$node")
    fi
  done
  (( ${#failed[@]} )) || return 0
  excludable "${failed[@]}"
}
# prints its nodes, comma-separated, unless the job asks for one by name or too few would be left
excludable() {
  local node job required total
  job="$(scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null || true)"
  required="$(sed -n 's/.* ReqNodeList=\([^ ]*\).*/\1/p' <<<"$job")"
  if [[ -n $required && $required != "(null)" ]]; then
    for node in "$@"; do
      if scontrol show hostnames "$required" 2>/dev/null | grep -qxF -- "$node"; then
        echo "slinkyml: $node failed, but the job asks for it by name (ReqNodeList=$required): not excluded" >&2
        return 0
      fi
    done
  fi
  total="$(sinfo -h -N -p "$SLURM_JOB_PARTITION" -o %N 2>/dev/null | sort -u | wc -l || true)"
  if (( total - $# < SLURM_JOB_NUM_NODES )); then
    echo "slinkyml: $* failed, but partition $SLURM_JOB_PARTITION has $total nodes: not excluded" >&2
    return 0
  fi
  (IFS=,; echo "$*")
}
exclude_nodes() {
  [[ -n $1 ]] || return 0
  if (trap '' TERM; scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$1"); then
    echo "slinkyml: the next run (restart $((restart_count + 1))) avoids ${1//,/ } (ExcNodeList=$1)"
  fi
}
# -- the batch node that failed: slurmctld requeues such a job itself (its batch script ended with the
# node, deciding nothing), so no script was left to exclude the node. Every run notes its batch node
# and start in $batch_nodes; a restarted run whose previous run left no decision in $events checks that
# node by the facts above and, when it failed and this run has it again, requeues the job without it
# (requeue.on and max_restarts permitting) before anything trains.
avoid_lost_batch_node() {
  local prev=$((restart_count - 1)) node="" started="" avoid
  if (( prev >= 0 )) && ! grep -q "^r$prev " "$events" 2>/dev/null; then
    read -r _ node started < <(grep "^r$prev " "$batch_nodes" 2>/dev/null | tail -n 1 || true)
  fi
  echo "r$restart_count ${SLURMD_NODENAME:-$(hostname -s)} $run_started" >> "$batch_nodes"
  if [[ -z $node || -z $started ]] || ! node_failed_since "$node" "$started"; then
    return 0
  fi
  if ! scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | grep -qxF -- "$node"; then
    echo "slinkyml: run r$prev ended with its batch node $node (slurmctld requeued the job); this run avoids it"
    return 0
  fi
  avoid="$(excludable "$node")"
  if [[ -z $avoid || " $requeue_on " != *" node_failure "* && " $requeue_on " != *" any_failure "* ]] \
      || (( restart_count >= max_restarts )); then
    echo "slinkyml: run r$prev ended with its batch node $node, which this run has again; running here" \
      "(requeue.on: $requeue_on, restarts $restart_count of $max_restarts)" >&2
    return 0
  fi
  echo "slinkyml: run r$prev ended with its batch node $node (slurmctld requeued the job), which this run" \
    "has again: requeueing without it"
  echo "r$restart_count requeue node_failure: batch node $node of r$prev failed (slurmd restarted or down)" >> "$events"
  trap '' TERM  # the requeue signals every process of the job: exclude the node first thing after it
  for _ in 1 2 3 4 5 6 7 8 9 10; do  # slurmctld may be restarting
    if scontrol requeue "$SLURM_JOB_ID"; then exclude_nodes "$avoid" || true; exit 0; fi
    sleep 3
  done
  echo "slinkyml: scontrol requeue failed; running here" >&2
  trap - TERM
}
