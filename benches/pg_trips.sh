#!/bin/sh
# Round trips per operation on PostgreSQL: runs `benches/postgres.rs -- --trips WHAT N [K]`
# under strace and counts the `sendto` calls (one per round trip) between its two marks.
#   SPINDLE_BENCH_PG="host=/tmp/pg user=spindle dbname=postgres" benches/pg_trips.sh BENCH cycle 200
# BENCH is the bench binary (`cargo bench --features postgres --bench postgres --no-run` names it).
set -eu
bench=$1; shift
what=$1; n=$2
log=$(mktemp)
strace -f -e trace=sendto,write -o "$log" "$bench" --trips "$@" >/dev/null 2>&1
awk -v n="$n" -v what="$*" '
  /write\(2, "trips: begin/ { on = 1; next }
  /write\(2, "trips: end/ { on = 0 }
  on && /sendto\(/ { trips++ }
  END { printf "%s: %d round trips, %.2f per operation\n", what, trips, trips / n }' "$log"
rm -f "$log"
