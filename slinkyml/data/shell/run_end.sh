#!/bin/bash
# The batch script after its launch line: stop signals forwarded to the trainers, the wait, one cause
# from Slurm's facts (slinkyml_decide, data/shell/decide.sh) and what that cause's requeue rule says.
# slinkyml/jobs/render.py renders it in, replacing each __NAME__ with the job's value: __SIG__ (the
# stop signal, e.g. USR2), __FORWARD__/__FORWARD_TERM__ (the command that passes it / SIGTERM on to
# the launcher), __GRACE_S__, __CHECKPOINT_DIR__ (quoted), __WARNING_SLACK_S__, __CAUSE_RULES__ and
# __REQUEUE_RULES__ (data/run_causes.json as lines), __DECIDE_FUNCTIONS__ (decide.sh's functions),
# the run protocol's file names (__STEP_ERRORS__, __PREEMPTED_MARKER__, __FAILURE_MARKER__: quoted
# paths of slurm/protocol.py), cause names (__NODE_FAILURE__, __TIME_LIMIT__) and __EXIT_FAILED__.
# The script's first part (run_start.sh and the settings) sets launch, log_dir, restart_count,
# max_restarts, requeue_on, events and run_started; slinkyml_decide sets decided_*.
# SC2154/SC2034: variables set by the script's other parts, and read there (the rendered-in decide.sh functions read what it assigns).
# shellcheck disable=SC2154,SC2034
# -- rendered from here (slinkyml/jobs/render.py carries what follows into every batch script)

# -- stop signals: the job's --signal (the time-limit warning, or someone asking for a requeue) and
# Slurm's SIGTERM (preemption's GraceTime, scontrol requeue, scancel, the time limit) are forwarded;
# the script waits for the trainers, which checkpoint and leave the preemption marker
stop_signal="" signal_at=""
trap 'stop_signal=${stop_signal:-SIG__SIG__} signal_at=${signal_at:-$(date +%s)}; echo "slinkyml: SIG__SIG__ received; forwarding to the training processes"; __FORWARD__ 2>/dev/null || true' __SIG__
trap 'stop_signal=${stop_signal:-SIGTERM} signal_at=${signal_at:-$(date +%s)}; echo "slinkyml: SIGTERM received; forwarding to the training processes"; __FORWARD_TERM__ 2>/dev/null || true' TERM
step_errors=__STEP_ERRORS__
# the batch log (this shell's stderr) and where this run's part of it begins
job_output="$(readlink -f /proc/$$/fd/2 2>/dev/null || true)"
job_output_from="$(stat -c %s -- "$job_output" 2>/dev/null || echo 0)"
"${launch[@]}" 2>>"$step_errors" &
launcher_pid=$!
status=0
while true; do
  if wait "$launcher_pid"; then status=0; else status=$?; fi
  kill -0 "$launcher_pid" 2>/dev/null || break  # still running: wait was cut short by the trap
done
cat -- "$step_errors" >&2 2>/dev/null || true  # srun's own messages, into the batch log

# -- why it ended: one cause from Slurm's facts (the rules of slinkyml/data/run_causes.json; the
# submitit launcher decides with this same function) and what that cause's requeue rule says
preempted_marker=__PREEMPTED_MARKER__
failure_marker=__FAILURE_MARKER__
# the signal the batch shell itself got is the first fact; the ranks' marker says which reached
# them (torchrun's agent, signalled twice, may stop them with SIGTERM), used when the shell got none
if [[ -z $stop_signal && -e "$preempted_marker" ]]; then
  stop_signal="$(cat -- "$preempted_marker" 2>/dev/null || true)" stop_signal="SIG${stop_signal:-__SIG__}"
fi
warn_signal=__SIG__ grace_s=__GRACE_S__ warning_slack_s=__WARNING_SLACK_S__
checkpoint_dir=__CHECKPOINT_DIR__
cause_rules="$(cat <<'SLINKYML_CAUSE_RULES'
__CAUSE_RULES__
SLINKYML_CAUSE_RULES
)"
requeue_rules="$(cat <<'SLINKYML_REQUEUE_RULES'
__REQUEUE_RULES__
SLINKYML_REQUEUE_RULES
)"
__DECIDE_FUNCTIONS__
slinkyml_decide
if [[ -z $decided_cause ]]; then
  echo "slinkyml: training exited with status 0"
  exit 0
fi
what="$decided_cause: $decided_detail"
if [[ $decided_action == slurm ]]; then
  echo "slinkyml: $decided_message ($decided_detail); Slurm ends or requeues the job"
  echo "r$restart_count slurm $what" >> "$events"
  exit 0
fi
if [[ $decided_action == requeue ]]; then
  echo "slinkyml: requeueing (restart $((restart_count + 1)) of $max_restarts): $decided_message: $decided_detail"
  echo "r$restart_count requeue $what" >> "$events"
  avoid=""
  if [[ $decided_cause == __NODE_FAILURE__ ]]; then avoid="$(failed_nodes || true)"; fi
  for _ in 1 2 3 4 5 6 7 8 9 10; do  # slurmctld may be restarting
    if scontrol requeue "$SLURM_JOB_ID"; then exclude_nodes "$avoid" || true; exit 0; fi
    sleep 3
  done
  echo "slinkyml: scontrol requeue failed; the job ends here" >&2
  # shellcheck disable=SC2242  # a number once rendered (lines like this one are not rendered in)
  exit __EXIT_FAILED__
fi
echo "slinkyml: $decided_message: $decided_detail; not requeued (requeue.on: $requeue_on, restarts $restart_count of $max_restarts)" >&2
echo "r$restart_count failed $what" >> "$events"
if [[ $decided_cause == __TIME_LIMIT__ ]]; then
  # the allocation is held to its end, so that Slurm itself records the job TIMEOUT
  trap 'exit 0' TERM
  while true; do sleep 1; done
fi
# the training's own status as the job's exit code (what sbatch --wait and sacct show)
exit $(( status != 0 ? status : __EXIT_FAILED__ ))
