#!/usr/bin/env bash
# Ensures PostgreSQL server binaries (initdb, pg_ctl) are installed and that a
# non-root "postgres" user exists, so internal/pgtest can start throwaway
# clusters when the tests run as root. Idempotent; CI runs it as root on a
# fresh Debian machine. Prints the directory holding the binaries.
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

if ! bindir=$(find_bindir); then
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-postgres: initdb/pg_ctl not found and not root: install postgresql" >&2
		exit 1
	fi
	echo "install-postgres: installing postgresql" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends postgresql >/dev/null
	bindir=$(find_bindir) || { echo "install-postgres: initdb still not found after install" >&2; exit 1; }
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
