# -- a requeued run avoids the nodes that just failed: nodes of this run (not the batch node, which
# still runs this script) that srun named in its node-failure lines, whose slurmd started after this
# run did (a replaced slurmd pod, perhaps at a new address), or that slurmctld no longer reaches.
# The next run excludes them (ExcNodeList, which slurmctld takes once the job is pending again),
# unless the job asks for one of them by name or the partition would have too few nodes left.
# (slinkyml/data/templates/exclude_failed_nodes.sh; uses $run_started, $step_errors, $infra_regex)
# failed_nodes prints them, comma-separated, before the requeue: from the requeue on, slurmstepd
# signals every process of the job, so only one command (exclude_nodes, SIGTERM ignored) runs after.
failed_nodes() {
  local node record started state failed=() job required total
  for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null); do
    [[ $node == "${SLURMD_NODENAME:-}" ]] && continue
    record="$(scontrol -o show node "$node" 2>/dev/null || true)"
    started="$(sed -n 's/.* SlurmdStartTime=\([^ ]*\).*/\1/p' <<<"$record")"
    state="$(sed -n 's/.* State=\([^ ]*\).*/\1/p' <<<"$record")"
    if grep -E -- "$infra_regex" "$step_errors" 2>/dev/null | grep -qw -- "$node" \
        || [[ $state == *NOT_RESPONDING* || $state == DOWN* || $state == *FAIL* ]] \
        || (( $(date -d "${started:-@0}" +%s 2>/dev/null || echo 0) > run_started )); then
      failed+=("$node")
    fi
  done
  (( ${#failed[@]} )) || return 0
  job="$(scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null || true)"
  required="$(sed -n 's/.* ReqNodeList=\([^ ]*\).*/\1/p' <<<"$job")"
  if [[ -n $required && $required != "(null)" ]]; then
    for node in "${failed[@]}"; do
      if scontrol show hostnames "$required" 2>/dev/null | grep -qxF -- "$node"; then
        echo "slinkyml: $node failed, but the job asks for it by name (ReqNodeList=$required): not excluded" >&2
        return 0
      fi
    done
  fi
  total="$(sinfo -h -N -p "$SLURM_JOB_PARTITION" -o %N 2>/dev/null | sort -u | wc -l || true)"
  if (( total - ${#failed[@]} < SLURM_JOB_NUM_NODES )); then
    echo "slinkyml: ${failed[*]} failed, but partition $SLURM_JOB_PARTITION has $total nodes: not excluded" >&2
    return 0
  fi
  (IFS=,; echo "${failed[*]}")
}
exclude_nodes() {
  [[ -n $1 ]] || return 0
  if (trap '' TERM; scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$1"); then
    echo "slinkyml: the next run (restart $((restart_count + 1))) avoids ${1//,/ } (ExcNodeList=$1)"
  fi
}
