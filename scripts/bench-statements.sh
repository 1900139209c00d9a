#!/usr/bin/env bash
# bench-statements.sh: where the database's time goes in `converge bench
# pipeline`, per statement (docs/benchmarks.md, "River's job deleted at the
# run's end").
#
# Starts a private PostgreSQL cluster (initdb into a temporary folder, as
# the postgres user when run as root) with pg_stat_statements and
# track_planning, runs the pipeline benchmark on it, and prints, for the
# first bare-River anchor phase and for converge's phase, each statement's
# calls and its execution time, planning time and WAL per event. The
# statistics are reset when the benchmark's log says a phase began and
# copied when it says the phase ended, so the other phases are left out.
#
#   scripts/bench-statements.sh [path/to/converge] [bench flags...]
#   scripts/bench-statements.sh ./bin/converge --events 10000
#
# Environment: PG_BIN (default /usr/lib/postgresql/15/bin), PORT (5499).
set -euo pipefail

bin=${1:-}
if [[ -z "$bin" || "$bin" == --* ]]; then
	bin=$(mktemp -d)/converge
	go build -o "$bin" ./cmd/converge
else
	shift
fi
events=10000
for a in "$@"; do [[ "$a" == --events=* ]] && events=${a#--events=}; done
prev=""
for a in "$@"; do [[ "$prev" == --events ]] && events=$a; prev=$a; done

pg_bin=${PG_BIN:-/usr/lib/postgresql/15/bin}
port=${PORT:-5499}
dir=$(mktemp -d)
as_pg=()
if [[ $(id -u) -eq 0 ]]; then
	chown postgres "$dir"
	as_pg=(runuser -u postgres --)
fi
"${as_pg[@]}" "$pg_bin/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
cat >>"$dir/data/postgresql.conf" <<EOF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track_planning = on
pg_stat_statements.max = 2000
autovacuum = off
max_connections = 200
EOF
"${as_pg[@]}" "$pg_bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w start >/dev/null
trap '"${as_pg[@]}" "$pg_bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null; rm -rf "$dir"' EXIT

psql=(psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -At -q)
"${psql[@]}" -c "CREATE EXTENSION pg_stat_statements"
snapshot="COPY (SELECT calls, total_exec_time, total_plan_time, wal_bytes,
	left(regexp_replace(query, '\s+', ' ', 'g'), 100)
	FROM pg_stat_statements ORDER BY total_exec_time + total_plan_time DESC LIMIT 30) TO STDOUT WITH CSV"

DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres" "$bin" bench pipeline --json "$@" 2>&1 |
	while IFS= read -r line; do
		case "$line" in
		*"anchor: bare River"*) "${psql[@]}" -c "SELECT pg_stat_statements_reset()" >/dev/null ;;
		*"anchor: "*" jobs/s"*) [[ -f "$dir/anchor.csv" ]] || "${psql[@]}" -c "$snapshot" >"$dir/anchor.csv" ;;
		*"converge: "*" events over "*) "${psql[@]}" -c "SELECT pg_stat_statements_reset()" >/dev/null ;;
		*"converge: "*" events/s"*) "${psql[@]}" -c "$snapshot" >"$dir/converge.csv" ;;
		"{"*) echo "$line" >"$dir/result.json" ;;
		esac
	done

for phase in anchor converge; do
	echo "== $phase phase: per event ($events), exec µs + plan µs, WAL bytes, calls, statement"
	python3 - "$dir/$phase.csv" "$events" <<'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
n = int(sys.argv[2])
ex = pl = wal = 0.0
for calls, e, p, w, q in rows:
    e, p, w = float(e) * 1000 / n, float(p) * 1000 / n, int(w) / n
    ex, pl, wal = ex + e, pl + p, wal + w
    print(f"{e:7.1f} + {p:4.1f}  {w:6.0f} B  {calls:>6}  {q}")
print(f"{ex:7.1f} + {pl:4.1f}  {wal:6.0f} B  in all (the top {len(rows)} statements)")
EOF
done
cat "$dir/result.json"
