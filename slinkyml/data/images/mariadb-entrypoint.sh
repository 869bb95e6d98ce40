#!/usr/bin/env bash
# The mariadb image's entrypoint (Debian's mariadb-server from the sid root), for slurmdbd's database:
# makes the data folder on first start, then runs mariadbd in the foreground on port 3306 of the pod,
# with the database user slurmdbd connects as ($MARIADB_USER, password $MARIADB_PASSWORD from the
# cluster's Secret) created or updated at every start by an init file only the server reads.
set -euo pipefail

datadir=/var/lib/mariadb  # Debian sid's default data folder
user="${MARIADB_USER:-slurm}"
: "${MARIADB_PASSWORD:?the database password comes from the cluster Secret}"
mkdir -p "${datadir}" /run/mariadbd
chown mysql:mysql "${datadir}" /run/mariadbd
if [[ ! -d "${datadir}/mysql" ]]; then
	mariadb-install-db --user=mysql --datadir="${datadir}" --skip-test-db >/dev/null
fi
init=/run/mariadbd/init.sql
umask 077
# the password is the Secret's hex (no quote can occur); the user name is ours
cat >"${init}" <<SQL
CREATE USER IF NOT EXISTS '${user}'@'%' IDENTIFIED BY '${MARIADB_PASSWORD}';
ALTER USER '${user}'@'%' IDENTIFIED BY '${MARIADB_PASSWORD}';
GRANT ALL ON slurm_acct_db.* TO '${user}'@'%';
SQL
chown mysql:mysql "${init}"
exec mariadbd --user=mysql --datadir="${datadir}" --bind-address=0.0.0.0 --port=3306 \
	--socket=/run/mariadbd/mysqld.sock --skip-name-resolve --init-file="${init}" --innodb-buffer-pool-size=128M \
	--innodb-lock-wait-timeout=900 --innodb-snapshot-isolation=OFF
