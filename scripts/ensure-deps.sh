#!/usr/bin/env bash
# Makes sure this machine has what the tests need. Each step does nothing
# when its dependency is already there, so it is cheap to run before every
# test run (make test does). Add new dependencies as new steps.
set -euo pipefail

log() { echo "ensure-deps: $*" >&2; }

# pg_reachable succeeds when something accepts TCP connections on
# 127.0.0.1:5432.
pg_reachable() {
	timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/5432' 2>/dev/null
}

# ensure_postgres starts the machine's PostgreSQL cluster when nothing
# answers on 127.0.0.1:5432. Failure is fine: test/pgtest then starts a
# private cluster from the PostgreSQL binaries by itself.
ensure_postgres() {
	if pg_reachable; then
		return 0
	fi
	if ! command -v pg_ctlcluster >/dev/null 2>&1; then
		log "nothing on 127.0.0.1:5432 and no pg_ctlcluster; the tests will start a private PostgreSQL"
		return 0
	fi
	local version=15
	if [ -d /etc/postgresql ]; then
		local newest
		newest=$(ls /etc/postgresql | sort -V | tail -n 1)
		if [ -n "$newest" ]; then
			version=$newest
		fi
	fi
	log "nothing on 127.0.0.1:5432; starting PostgreSQL $version/main"
	if pg_ctlcluster --skip-systemctl-redirect "$version" main start; then
		# pg_ctlcluster waits for start-up; poll a little in case it did not.
		local i
		for i in $(seq 1 50); do
			if pg_reachable; then
				return 0
			fi
			sleep 0.2
		done
	fi
	log "could not start PostgreSQL $version/main; the tests will start a private PostgreSQL"
}

# ensure_chromium installs Debian's Chromium for the browser tests, when it
# is missing and we may install packages (root).
ensure_chromium() {
	if command -v chromium >/dev/null 2>&1; then
		return 0
	fi
	if [ "$(id -u)" -ne 0 ]; then
		log "chromium is missing and we are not root to install it; browser tests will not find it"
		return 0
	fi
	log "installing chromium"
	export DEBIAN_FRONTEND=noninteractive
	# Wait for the package lock rather than fail when another install runs.
	local lock=(-o DPkg::Lock::Timeout=600)
	if ! { apt-get "${lock[@]}" update -qq && apt-get "${lock[@]}" install -y -qq chromium; } </dev/null; then
		log "WARNING: installing chromium failed; browser tests will not find it"
	fi
}

# ensure_pgbouncer installs Debian's PgBouncer for the pooler tests
# (test/pooler, make test-pgbouncer), when it is missing and we may install
# packages (root). The tests run their own instance from a config they
# write; the package's service is not used.
ensure_pgbouncer() {
	if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then
		return 0
	fi
	if [ "$(id -u)" -ne 0 ]; then
		log "pgbouncer is missing and we are not root to install it; the pooler tests will skip"
		return 0
	fi
	log "installing pgbouncer"
	export DEBIAN_FRONTEND=noninteractive
	local lock=(-o DPkg::Lock::Timeout=600)
	if ! { apt-get "${lock[@]}" update -qq && apt-get "${lock[@]}" install -y -qq pgbouncer; } </dev/null; then
		log "WARNING: installing pgbouncer failed; the pooler tests will skip"
	fi
}

ensure_postgres
ensure_chromium
ensure_pgbouncer
