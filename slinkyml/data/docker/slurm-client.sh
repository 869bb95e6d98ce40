#!/usr/bin/env bash
# A Slurm command of the Docker cluster, run from the host: this file is linked as sbatch, srun, squeue...
# in the cluster's state dir (bin/, first on PATH after `eval $(slinkyml dev env --docker)`), and runs the
# command of its name in the cluster's login container (docker exec) as the calling user, in the same folder
# (the shared folders are mounted at their own paths) and with the caller's environment. The host's own
# Slurm cannot serve: its 22.05 clients do not speak 26.05's protocol, and slurmd must reach srun.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# LOGIN, DOCKER_HOST, SHARED_FOLDERS (":" between them)
# shellcheck source=/dev/null
source "${here}/docker-cluster.env"
export DOCKER_HOST

IFS=: read -r -a shares <<<"${SHARED_FOLDERS}"
shared() { # whether $1 lies in a shared folder (the same path in the containers)
	local share
	for share in "${shares[@]}"; do
		[[ "$1/" == "${share%/}/"* ]] && return 0
	done
	return 1
}
workdir=/tmp
if shared "${PWD}"; then
	workdir="${PWD}"
fi

# the caller's environment, as sbatch hands it to a job (--export=ALL), less what belongs to this host
# alone: its loader's settings, its names for itself, Docker's and Slurm's own paths; PATH without this folder
args=(exec -i -u "$(id -u):$(id -g)" -w "${workdir}")
while IFS= read -r name; do
	case "${name}" in
	SLURM_CONF | LD_* | HOSTNAME | PWD | OLDPWD | SHLVL | _ | DOCKER_* | TERM | DISPLAY | PATH) ;;
	*) args+=(-e "${name}") ;;
	esac
done < <(compgen -e)
# a slurm.conf of the caller's own (not the cluster's, beside this folder) is read as on the host when the
# containers see it: one in a shared folder
conf="${SLURM_CONF:-}"
if [[ -n "${conf}" && "${conf}" != "$(dirname "${here}")/etc/slurm.conf" && -f "${conf}" ]] && shared "$(cd "$(dirname "${conf}")" && pwd)"; then
	args+=(-e "SLURM_CONF=$(cd "$(dirname "${conf}")" && pwd)/$(basename "${conf}")")
fi
path=":${PATH}:"
path="${path//:${here}:/:}"
path="${path#:}"
args+=(-e "PATH=${path%:}")
exec docker "${args[@]}" "${LOGIN}" "$(basename "$0")" "$@"
