#!/usr/bin/env bash
# Ensures PostgreSQL server binaries (initdb, pg_ctl) and PgBouncer are
# installed and that a non-root "postgres" user exists, so internal/pgtest can
# start throwaway clusters and bouncers (the pooler tests of store/postgres)
# when the tests run as root. Idempotent; CI runs it as root on a fresh Debian
# machine. Prints the directory holding the PostgreSQL binaries.
set -euo pipefail

find_bindir() {
	local p
	if p=$(command -v initdb 2>/dev/null) && [ -x "$(dirname "$(readlink -f "$p")")/pg_ctl" ]; then
		dirname "$(readlink -f "$p")"
		return 0
	fi
	# Newest major version first.
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5 -rn); do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

have_pgbouncer() {
	command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]
}

pkgs=()
bindir=$(find_bindir) || pkgs+=(postgresql)
have_pgbouncer || pkgs+=(pgbouncer)
if [ ${#pkgs[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		if [[ " ${pkgs[*]} " == *" postgresql "* ]]; then
			echo "install-postgres: initdb/pg_ctl not found and not root: install postgresql" >&2
			exit 1
		fi
		# The pooler tests skip without it (and fail under CI=true).
		echo "install-postgres: pgbouncer not found and not root: install pgbouncer to run the pooler tests" >&2
	else
		echo "install-postgres: installing ${pkgs[*]}" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
		bindir=$(find_bindir) || { echo "install-postgres: initdb still not found after install" >&2; exit 1; }
		have_pgbouncer || { echo "install-postgres: pgbouncer still not found after install" >&2; exit 1; }
		if [[ " ${pkgs[*]} " == *" pgbouncer "* ]] && [ -d /run/systemd/system ] &&
			systemctl is-enabled --quiet pgbouncer 2>/dev/null; then
			# The package enables a service on port 6432 with its own
			# config. The tests start their own bouncers (a free port, no
			# Unix socket, a config in a temporary directory), so it is not
			# in the way, but it is not needed either.
			systemctl disable --now pgbouncer >/dev/null 2>&1 || true
		fi
	fi
fi

# The Debian package creates the user; make sure it exists either way.
if [ "$(id -u)" -eq 0 ] && ! id -u postgres >/dev/null 2>&1; then
	echo "install-postgres: creating system user postgres" >&2
	if command -v useradd >/dev/null 2>&1; then
		useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/sh postgres
	else
		adduser --system --group --home /var/lib/postgresql --shell /bin/sh postgres
	fi
fi

# The Debian package also starts a cluster on port 5432 via its service
# scripts; the tests do not use it (pgtest starts its own on a free port).
echo "$bindir"
