#!/usr/bin/env bash
# The slurmd image's entrypoint, to the contract of Slinky's slurmd image: the container's arguments and
# $SLURMD_OPTIONS are slurmd's options (the operator passes `-Z --conf-server HOST:PORT --conf 'ITEMS'`),
# re-read as shell words so the quoted --conf value stays one word; the pod's asserted limits become
# slurm.conf items merged into that --conf value: $POD_CPUS (CPUs) -> CoreSpecCount (the cores slurmd
# must leave alone), $POD_MEMORY (MiB) -> MemSpecLimit, $POD_TOPOLOGY -> Topology. slurmd runs in the
# foreground as the container's main process.
set -euo pipefail

POD_CPUS="${POD_CPUS:-0}"
POD_MEMORY="${POD_MEMORY:-0}"
POD_TOPOLOGY="${POD_TOPOLOGY:-}"

# One field of `slurmd -C` (this machine's hardware as slurmd sees it).
hardware() {
	slurmd -C | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1
}

extra=()
if ((POD_CPUS > 0)); then
	threads=$(hardware ThreadsPerCore)
	cores=$(($(hardware Boards) * $(hardware SocketsPerBoard) * $(hardware CoresPerSocket)))
	spec=$((cores - POD_CPUS / threads))
	if ((spec > 0)); then extra+=("CoreSpecCount=${spec}"); fi
fi
if ((POD_MEMORY > 0)); then
	spec=$(($(hardware RealMemory) - POD_MEMORY))
	if ((spec > 0)); then extra+=("MemSpecLimit=${spec}"); fi
fi
if [[ -n "${POD_TOPOLOGY}" ]]; then extra+=("Topology=${POD_TOPOLOGY}"); fi

options="${SLURMD_OPTIONS:-} $*"
eval "set -- ${options}"
args=()
merged=0
while (($#)); do
	case "$1" in
	--conf)
		args+=("--conf" "${2:-}${extra[*]:+ ${extra[*]}}")
		merged=1
		shift 2 || shift
		;;
	--conf=*)
		args+=("--conf=${1#--conf=}${extra[*]:+ ${extra[*]}}")
		merged=1
		shift
		;;
	*)
		args+=("$1")
		shift
		;;
	esac
done
if ((merged == 0 && ${#extra[@]} > 0)); then args+=("--conf" "${extra[*]}"); fi

mkdir -p /run/slurm /var/spool/slurmd
exec /usr/sbin/slurmd -D "${args[@]}"
