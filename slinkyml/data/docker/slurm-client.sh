#!/usr/bin/env bash
# A Slurm command of the Docker cluster, run from the host: this file is linked as sbatch, srun, squeue...
# in the cluster's state dir (bin/, first on PATH after `eval $(slinkyml dev env --docker)`), and runs the
# command of its name in the cluster's login container (docker exec) as the calling user, in the same folder
# (the shared folders are mounted at their own paths) and with the caller's Slurm variables. The host's own
# Slurm cannot serve: its 22.05 clients do not speak 26.05's protocol, and slurmd must reach srun.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# LOGIN, DOCKER_HOST, SHARED_FOLDERS (":" between them)
# shellcheck source=/dev/null
source "${here}/docker-cluster.env"
export DOCKER_HOST

workdir=/tmp
IFS=: read -r -a shares <<<"${SHARED_FOLDERS}"
for share in "${shares[@]}"; do
	if [[ "${PWD}/" == "${share%/}/"* ]]; then
		workdir="${PWD}"
		break
	fi
done

args=(exec -i -u "$(id -u):$(id -g)" -w "${workdir}")
while IFS= read -r name; do
	case "${name}" in
	SLURM_CONF) ;; # the container's own /etc/slurm/slurm.conf
	SLURM_* | SBATCH_* | SALLOC_* | SRUN_* | SQUEUE_* | SACCT_* | SINFO_* | SCONTROL_* | SACCTMGR_* | SPANK_* | TZ)
		args+=(-e "${name}")
		;;
	esac
done < <(compgen -e)
exec docker "${args[@]}" "${LOGIN}" "$(basename "$0")" "$@"
