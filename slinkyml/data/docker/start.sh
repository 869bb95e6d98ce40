#!/usr/bin/env bash
# The command of every container of the Docker cluster (slinkyml/dev/docker/cluster.py), run by bash from
# the images the Kubernetes pods use: `start.sh ROLE [ARGS]`. The cluster's files come read-only at
# /mnt/slurm (the state dir's etc/): they are installed into /etc/slurm owned by root (SlurmUser, as in
# the netns cluster), the secret ones 0600. The host's users ($SLINKYML_USERS, "name:uid:gid" between
# commas) are added to /etc/passwd and /etc/group by id, so a job of the host user runs as that uid and its
# files in the shared folders are the user's. Each daemon runs in the foreground as the container's process.
set -euo pipefail

role="$1"
shift

IFS=, read -r -a users <<<"${SLINKYML_USERS:-}"
for entry in "${users[@]}"; do
	IFS=: read -r name uid gid <<<"${entry}"
	getent group "${gid}" >/dev/null || getent group "${name}" >/dev/null || echo "${name}:x:${gid}:" >>/etc/group
	if ! getent passwd "${uid}" >/dev/null && ! getent passwd "${name}" >/dev/null; then
		echo "${name}:x:${uid}:${gid}:${name}:/tmp:/bin/bash" >>/etc/passwd
	fi
done

mkdir -p /etc/slurm
for file in /mnt/slurm/*; do
	case "$(basename "${file}")" in
	munge.key) ;;
	slurmdbd.conf | jwt_hs256.key) install -o root -g root -m 0600 "${file}" /etc/slurm/ ;;
	*) install -o root -g root -m 0644 "${file}" /etc/slurm/ ;;
	esac
done

case "${role}" in
munge)
	# the socket's folder is the cluster's munge volume, mounted at /run/munge in every container
	install -d -o munge -g munge -m 0755 /run/munge
	install -o munge -g munge -m 0400 /mnt/slurm/munge.key /etc/munge/munge.key
	exec setpriv --reuid=munge --regid=munge --init-groups munged -F --num-threads=4
	;;
mariadb)
	# the data folder is kept across `down` (a folder of the state dir, mounted): mysql's, whoever made it
	# and whatever uid mysql had in the image that wrote it
	mkdir -p /var/lib/mariadb
	chown -R mysql:mysql /var/lib/mariadb
	exec /usr/local/bin/entrypoint.sh # the mariadb image's own ($MARIADB_PASSWORD)
	;;
slurmdbd) exec slurmdbd -D ;;
slurmctld)
	mkdir -p /var/spool/slurmctld
	exec slurmctld -D -i
	;;
slurmd)
	mkdir -p /var/spool/slurmd
	exec slurmd -D -N "$1"
	;;
slurmrestd)
	# Slurm 26.05's slurmrestd refuses root and SlurmUser: JWT only, as nobody (the netns cluster's way)
	exec setpriv --reuid=nobody --regid=nogroup --clear-groups env SLURM_JWT=daemon \
		slurmrestd -a rest_auth/jwt 0.0.0.0:6820
	;;
login) exec tini -- sleep infinity ;;
*)
	echo "start.sh: unknown role ${role}" >&2
	exit 2
	;;
esac
