#!/usr/bin/env bash
# The slurmctld image's entrypoint, to the contract of Slinky's slurmctld image (the operator runs the
# pod as SlurmUser 401 with /run, /etc/slurm, /var/spool/slurmctld and /var/log/slurm mounted): the
# container's arguments and $SLURMCTLD_OPTIONS are slurmctld's options, re-read as shell words so that
# quoted values survive as the operator writes them; slurmctld runs in the foreground as the container's
# main process; /run/slurmctld is where its auth socket goes.
set -euo pipefail

mkdir -p /run/slurmctld

# The operator's logfile sidecar (a native sidecar, started just before this container) makes
# SlurmctldLogFile a FIFO and relays it to the pod's log; a slurmctld that opened the path first would write
# to a plain file the sidecar then replaces, and its log would reach no one. Wait for the path, 10 s at most
# (a pod without such a sidecar starts 10 s later, once).
log_file=$(sed -n 's/^[[:space:]]*SlurmctldLogFile[[:space:]]*=[[:space:]]*//Ip' "${SLURM_CONF:-/etc/slurm/slurm.conf}" \
	2>/dev/null | tail -n 1)
if [[ -n "${log_file}" && -d "$(dirname "${log_file}")" ]]; then
	for _ in $(seq 50); do
		if [[ -e "${log_file}" ]]; then break; fi
		sleep 0.2
	done
fi
options="${SLURMCTLD_OPTIONS:-} $*"
eval "set -- ${options}"
exec /usr/sbin/slurmctld -D "$@"
