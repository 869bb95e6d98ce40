# slinkyml_decide: why the run ended (one cause, from Slurm's own facts) and what to do about it.
# Written once: the batch script carries this function (rendered in), the submitit launcher runs
# this file; the rules are slinkyml/data/run_causes.json, given as lines of TAB-separated words.
# In:  cause_rules ("CAUSE<TAB>FACT<TAB>ERE[<TAB>FACT<TAB>ERE...]", first match wins),
#      requeue_rules ("CAUSE<TAB>never|when_on|when_on_and_checkpointed<TAB>yes|no<TAB>MESSAGE": the
#      rule, whether requeue.on: [any_failure] covers it, the cause's one line), warning_slack_s,
#      status (the launcher's exit status as bash reports it), stop_signal ("SIGUSR2", "" if none)
#      and signal_at (epoch seconds), warn_signal ("USR2") and grace_s (the job's --signal),
#      step_errors, failure_marker, preempted_marker (files), job_output and job_output_from (the
#      batch log and its size when this run began: slurmstepd writes the batch step's "*** JOB …
#      CANCELLED AT … ***" there; "" for none), checkpoint_dir, run_started (epoch),
#      requeue_on, restart_count, max_restarts, SLURM_JOB_ID.
# Out: decided_cause, decided_message (the cause's line), decided_detail (the fact, one line) and
#      decided_action (requeue: scontrol requeue it; slurm: Slurm is already ending or requeueing
#      it; failed: it ends here; "" and no cause: it succeeded).
# prints LABEL when VALUE matches the extended regex
slinkyml_match() {
  if [[ $1 =~ $2 ]]; then printf '%s\n' "$3"; fi
}

# srun's and slurmstepd's lines of this run: its steps' stderr, then what the batch log got since it began
# shellcheck disable=SC2154  # step_errors: set by the batch script, or the launcher's environment
slinkyml_step_lines() {
  cat -- "$step_errors" 2>/dev/null || true
  if [[ -n ${job_output:-} && -f $job_output ]]; then
    tail -c "+$((${job_output_from:-0} + 1))" -- "$job_output" 2>/dev/null | grep -v '^slinkyml: ' || true
  fi
}

# shellcheck disable=SC2154  # the inputs above: set by the batch script, or the launcher's environment
slinkyml_decide() {
  local slurm_now end left warning="" checkpointed="" cgroup_facts="" exit_fact="" memcg dir
  local cause fact regex matched first rule rest
  decided_cause="" decided_detail="" decided_action="" decided_message=""
  slurm_now="$(squeue -h -j "$SLURM_JOB_ID" -o '%T %r' 2>/dev/null | head -n 1 || true)"
  # the job's own --signal within its grace (+ slurmctld's 30 s check period) of the end: the time limit
  # (when only the ranks got it, the marker they wrote after their checkpoint is the latest it came)
  if [[ -z $signal_at && -e $preempted_marker ]]; then
    signal_at="$(stat -c %Y -- "$preempted_marker" 2>/dev/null || true)"
  fi
  if [[ -n $stop_signal && $stop_signal == "SIG${warn_signal#SIG}" && -n $signal_at ]]; then
    end="$(squeue -h -j "$SLURM_JOB_ID" -o %e 2>/dev/null | head -n 1 || true)"
    if [[ $end == [0-9]*T* ]] && end="$(date -d "$end" +%s 2>/dev/null)" && [[ $end =~ ^[0-9]+$ ]]; then
      left=$((end - signal_at))
      if ((left <= grace_s + warning_slack_s)); then warning=at_limit; else warning=early; fi
    fi
  fi
  if [[ -e $preempted_marker ]]; then
    checkpointed=yes
  elif [[ -n $checkpoint_dir && -d $checkpoint_dir && -n $run_started ]] &&
    [[ -n "$(find "$checkpoint_dir" -newermt "@$run_started" -type f -print -quit 2>/dev/null)" ]]; then
    checkpointed=yes
  fi
  memcg="$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup 2>/dev/null || true)"
  for dir in "/sys/fs/cgroup/memory$memcg" "/sys/fs/cgroup/memory${memcg%/*}"; do
    if [[ -n $memcg && -r $dir/memory.oom_control ]]; then
      cgroup_facts+="$(grep -m 1 '^oom_kill ' "$dir/memory.oom_control" 2>/dev/null || true) "
    fi
  done
  if ((status > 128)); then exit_fact="killed by signal $((status - 128))"
  elif ((status != 0)); then exit_fact="exit status $status"
  fi
  if [[ -z $stop_signal && -z $exit_fact ]]; then
    return 0
  fi
  while IFS= read -r rule; do
    [[ -n $rule ]] || continue
    cause="${rule%%$'\t'*}" rest="${rule#*$'\t'}" first=""
    while [[ -n $rest ]]; do
      fact="${rest%%$'\t'*}" rest="${rest#*$'\t'}"
      regex="${rest%%$'\t'*}"
      if [[ $rest == *$'\t'* ]]; then rest="${rest#*$'\t'}"; else rest=""; fi
      case $fact in
        step_errors) matched="$(slinkyml_step_lines | grep -E -m 1 -- "$regex" || true)" ;;
        rank_failure) matched="$(grep -E -m 1 -- "$regex" "$failure_marker" 2>/dev/null || true)" ;;
        signal) matched="$(slinkyml_match "$stop_signal" "$regex" "$stop_signal")" ;;
        warning) matched="$(slinkyml_match "$warning" "$regex" "$warning")" ;;
        slurm) matched="$(slinkyml_match "$slurm_now" "$regex" "Slurm: $slurm_now")" ;;
        exit) matched="$(slinkyml_match "$exit_fact" "$regex" "$exit_fact")" ;;
        cgroup) matched="$(slinkyml_match "$cgroup_facts" "$regex" "memory cgroup: ${cgroup_facts% }")" ;;
        *) matched="" ;;
      esac
      if [[ -z $matched ]]; then first="" && break; fi
      first="${first:-$matched}"
    done
    if [[ -n $first ]]; then
      decided_cause="$cause" decided_detail="$first"
      break
    fi
  done <<<"$cause_rules"
  decided_detail="$(printf %s "$decided_detail" | tr -s '\n\t' '  ' | cut -c 1-400)"
  local how="" any="" wanted=0 c
  IFS=$'\t' read -r _ how any decided_message <<<"$(printf '%s\n' "$requeue_rules" | grep -m 1 "^$decided_cause"$'\t' || true)"
  for c in $requeue_on; do
    if [[ $c == "$decided_cause" || ($c == any_failure && $any == yes) ]]; then wanted=1; fi
  done
  if [[ $how == never ]]; then wanted=0; fi
  if ((wanted)) && [[ $how == when_on_and_checkpointed && -z $checkpointed ]]; then
    decided_detail+=" (no checkpoint since the run started)"
    wanted=0
  fi
  if ((wanted)) && [[ -n $slurm_now && $slurm_now != RUNNING* ]]; then
    decided_action=slurm
  elif ((wanted && restart_count < max_restarts)); then
    decided_action=requeue
  else
    decided_action=failed
  fi
}

# -- run as a program (the submitit launcher): print the decision, a line each
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  slinkyml_decide
  printf '%s\n%s\n%s\n%s\n' "$decided_cause" "$decided_action" "$decided_detail" "$decided_message"
fi
