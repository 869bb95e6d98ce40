#!/usr/bin/env bash
# What the operator's initconf init container does: Slurm refuses a slurmdbd.conf or auth key that is not
# SlurmUser's alone (mode 0600, owned by slurm), which a Secret volume cannot give (its files belong to
# root), so each file of SRC (default /mnt/slurm) is installed into DEST (default /etc/slurm) that way.
set -euo pipefail

src="${1:-/mnt/slurm}"
dest="${2:-/etc/slurm}"
mkdir -p "${dest}"
for file in "${src}"/*; do
	install -o slurm -g slurm -m 0600 "${file}" "${dest}/$(basename "${file}")"
done
