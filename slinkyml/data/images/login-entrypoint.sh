#!/usr/bin/env bash
# The login image's entrypoint, to the contract of Slinky's login image: sackd (the operator passes
# `--conf-server HOST:PORT` in $SACKD_OPTIONS) fetches slurm.conf and serves the auth socket under /run/slurm,
# so Slurm's commands work here with only the auth key mounted; sshd (options in $SSHD_OPTIONS) serves
# logins with the host keys the operator mounts, or keys made here when none are. Both run in the
# foreground under this shell; the container ends when either does, and Kubernetes restarts it.
set -euo pipefail

mkdir -p /run/sshd /run/slurm
chmod 0755 /run/sshd
ssh-keygen -A

eval "set -- ${SACKD_OPTIONS:-}"
sackd -D "$@" &
eval "set -- ${SSHD_OPTIONS:-}"
/usr/sbin/sshd -D -e "$@" &
wait -n
