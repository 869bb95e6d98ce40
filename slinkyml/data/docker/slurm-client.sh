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

workdir=/tmp
IFS=: read -r -a shares <<<"${SHARED_FOLDERS}"
for share in "${shares[@]}"; do
	if [[ "${PWD}/" == "${share%/}/"* ]]; then
		workdir="${PWD}"
		break
	fi
done

# the caller's environment, as sbatch hands it to a job (--export=ALL), less what belongs to this host
# alone: its loader's settings, its names for itself, Docker's and Slurm's own paths; PATH without this folder
args=(exec -i -u "$(id -u):$(id -g)" -w "${workdir}")
while IFS= read -r name; do
	case "${name}" in
	SLURM_CONF | LD_* | HOSTNAME | PWD | OLDPWD | SHLVL | _ | DOCKER_* | TERM | DISPLAY | PATH) ;;
	*) args+=(-e "${name}") ;;
	esac
done < <(compgen -e)
path=":${PATH}:"
path="${path//:${here}:/:}"
path="${path#:}"
args+=(-e "PATH=${path%:}")
exec docker "${args[@]}" "${LOGIN}" "$(basename "$0")" "$@"
