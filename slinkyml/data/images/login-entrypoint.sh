#!/usr/bin/env bash
# The login image's entrypoint, to the contract of Slinky's login image: sackd, as user slurm as Slinky's
# image runs it (the operator passes `--conf-server HOST:PORT` in $SACKD_OPTIONS; its initconf step gives
# slurm the auth key), fetches slurm.conf and serves the auth socket under /run/slurm (the operator's
# readiness probe: `test -S /run/slurm/sack.socket`), so Slurm's commands work here with only the auth key
# mounted; sshd (options in $SSHD_OPTIONS) serves
# logins with the host keys the operator mounts, or keys made here when none are. Both run in the
# foreground under this shell; the container ends when either does, and Kubernetes restarts it.
set -euo pipefail

mkdir -p /run/sshd /run/slurm
chmod 0755 /run/sshd
chown slurm:slurm /run/slurm
ssh-keygen -A

as_slurm=(setpriv --reuid=slurm --regid=slurm --init-groups)
if ! "${as_slurm[@]}" test -r /etc/slurm/slurm.key; then
	# a pod without the operator's initconf step (tests/test_kubelet_live.py's) mounts the key as root's alone
	echo "login-entrypoint: /etc/slurm/slurm.key is not readable by slurm (no initconf step): sackd runs as root" >&2
	as_slurm=()
fi
eval "set -- ${SACKD_OPTIONS:-}"
"${as_slurm[@]}" /usr/sbin/sackd -D "$@" &
eval "set -- ${SSHD_OPTIONS:-}"
/usr/sbin/sshd -D -e "$@" &
wait -n
