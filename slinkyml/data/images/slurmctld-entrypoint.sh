#!/usr/bin/env bash
# The slurmctld image's entrypoint, to the contract of Slinky's slurmctld image (the operator runs the
# pod as SlurmUser 401 with /run, /etc/slurm, /var/spool/slurmctld and /var/log/slurm mounted): the
# container's arguments and $SLURMCTLD_OPTIONS are slurmctld's options, re-read as shell words so that
# quoted values survive as the operator writes them; slurmctld runs in the foreground as the container's
# main process; /run/slurmctld is where its auth socket goes.
set -euo pipefail

mkdir -p /run/slurmctld
options="${SLURMCTLD_OPTIONS:-} $*"
eval "set -- ${options}"
exec /usr/sbin/slurmctld -D "$@"
