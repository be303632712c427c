#!/usr/bin/env bash
# Spindle's PostgreSQL engine against graphile-worker on the same private server: the job cycle
# (no-op jobs of about 100 bytes) and the enqueue (1,000 jobs to a call), interleaved, ROUNDS
# rounds; prints the median of every figure and its ratio to graphile-worker. See README.md.
#
#   benches/peers/postgres/run.sh                                  # 20,000 jobs, 3 rounds
#   JOBS=5000 ROUNDS=1 HANDLERS="16" PROCESSES="1" benches/peers/postgres/run.sh
set -euo pipefail
cd "$(dirname "$0")"
JOBS="${JOBS:-20000}"
ROUNDS="${ROUNDS:-3}"
HANDLERS="${HANDLERS:-1 4 16}"
PROCESSES="${PROCESSES:-1 3}"
MODES="${MODES:-graphile pool single batch}"

echo "== building (graphile-worker from npm, Spindle's postgres bench)"
[ -d node_modules/graphile-worker ] || npm ci --no-audit --no-fund --silent
spindle_bench="$(cd ../../.. && cargo bench --features postgres --bench postgres --no-run 2>&1 |
  sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)"
case "$spindle_bench" in /*) ;; *) spindle_bench="../../../$spindle_bench" ;; esac

# A private server in a temporary directory: a Unix socket only, fsync off (as .ci/run starts
# the one the test suites use), stopped and removed at exit. initdb refuses to run as root.
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
scratch="$(mktemp -d)"
chmod 755 "$scratch"
as_server() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$scratch"
stop_server() {
  as_server "$PGBIN/pg_ctl" -D "$scratch/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$scratch"
}
trap stop_server EXIT
as_server "$PGBIN/initdb" -D "$scratch/data" -U spindle -A trust -E UTF8 --locale=C --no-sync \
  >/dev/null
as_server "$PGBIN/pg_ctl" -D "$scratch/data" -l "$scratch/log" -w start \
  -o "-c listen_addresses='' -k $scratch -c max_connections=300 -c fsync=off \
  -c wal_level=minimal -c max_wal_senders=0 -c max_wal_size=256MB" >/dev/null
server="host=$scratch user=spindle dbname=postgres"
graphile_url="postgres:///postgres?host=$scratch&user=spindle"
echo "server: $("$PGBIN/postgres" --version), socket in $scratch, fsync off"
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"

# CPU time the server has used so far, in clock ticks: the postmaster's own and that of the
# children it reaped (each connection's backend exits with its connection), and its children
# still running (the background processes).
server_ticks() {
  local pm children
  pm=$(head -1 "$scratch/data/postmaster.pid")
  children=$(pgrep -P "$pm" | sed 's|.*|/proc/&/stat|')
  # shellcheck disable=SC2086
  cat "/proc/$pm/stat" $children 2>/dev/null |
    awk '{ sub(/^.*\) /, ""); t += $12 + $13; if (NR == 1) t += $14 + $15 } END { print t }'
}
ticks_per_s=$(getconf CLK_TCK)

results="$(mktemp)"
timing="$(mktemp)"
trap 'stop_server; rm -f "$results" "$timing"' EXIT
run=0
for round in $(seq 1 "$ROUNDS"); do
  for processes in $PROCESSES; do
    for handlers in $HANDLERS; do
      for mode in $MODES; do
        run=$((run + 1))
        before=$(server_ticks)
        if [ "$mode" = graphile ]; then
          line="$(/usr/bin/time -o "$timing" -f "%U %S" \
            node graphile.mjs "$graphile_url" "gw_$run" "$handlers" "$processes" "$JOBS")"
        else
          line="$(SPINDLE_BENCH_PG="$server" /usr/bin/time -o "$timing" -f "%U %S" \
            "$spindle_bench" --peer "$mode" "$handlers" "$processes" "$JOBS")"
        fi
        sleep 0.2 # the server reaps the row's backends
        server_us=$(( ($(server_ticks) - before) * 1000000 / ticks_per_s / JOBS ))
        client_us=$(awk -v jobs="$JOBS" '{ printf "%d", ($1 + $2) * 1e6 / jobs }' "$timing")
        line="$line server_cpu_us_per_job=$server_us client_cpu_us_per_job=$client_us"
        echo "round $round: $line"
        echo "$line" >> "$results"
      done
    done
  done
done
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"

echo
python3 - "$results" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    fields = dict(re.findall(r"(\w+)=(\S+)", line))
    name = "graphile-worker" if fields["system"] == "graphile" else "spindle " + fields["mode"]
    key = (name, int(fields["processes"]), int(fields["handlers"]))
    runs.setdefault(key, []).append((
        float(fields["jobs_per_s"]),
        float(fields["enqueue_per_s"]),
        float(fields.get("server_cpu_us_per_job", "nan")),
        float(fields.get("client_cpu_us_per_job", "nan")),
    ))
median = {
    key: tuple(statistics.median(v[i] for v in values) for i in range(4))
    for key, values in runs.items()
}
names = sorted({k[0] for k in median}, key=lambda n: (n != "graphile-worker", n))
shapes = sorted({(k[1], k[2]) for k in median})
count = min(len(values) for values in runs.values())
print(f"median of {count} or more runs each; x = ratio to graphile-worker in the same shape")
print()
print(f"{'job cycle, jobs/s':<22}" + "".join(f"{f'{p} proc x {h}':>20}" for p, h in shapes))
for name in names:
    cells = []
    for p, h in shapes:
        got, base = median.get((name, p, h)), median.get(("graphile-worker", p, h))
        if got is None:
            cells.append(f"{'-':>20}")
        elif base is None or name == "graphile-worker":
            cells.append(f"{got[0]:>20,.0f}")
        else:
            cells.append(f"{got[0]:>11,.0f} ({got[0] / base[0]:>4.2f}x)")
    print(f"{name:<22}" + "".join(cells))
print()
print("CPU per job, us (the whole row: enqueue, start, job cycle), server / client processes")
print(f"{'':<22}" + "".join(f"{f'{p} proc x {h}':>20}" for p, h in shapes))
for name in names:
    cells = []
    for p, h in shapes:
        got = median.get((name, p, h))
        cells.append(f"{'-':>20}" if got is None else f"{f'{got[2]:.0f} / {got[3]:.0f}':>20}")
    print(f"{name:<22}" + "".join(cells))
print()
print("enqueue, jobs/s (1,000 to a call: addJobs, enqueue_batch), all runs of a system")
base = [v[1] for k, vs in runs.items() if k[0] == "graphile-worker" for v in vs]
spin = [v[1] for k, vs in runs.items() if k[0] != "graphile-worker" for v in vs]
if base:
    print(f"  graphile-worker addJobs       {statistics.median(base):>10,.0f}")
if spin:
    ratio = f" ({statistics.median(spin) / statistics.median(base):.2f}x)" if base else ""
    print(f"  spindle enqueue_batch         {statistics.median(spin):>10,.0f}{ratio}")
print()
print("more processes: jobs/s at P processes / at 1 process, same handlers per process")
for name in names:
    for p, h in shapes:
        one = median.get((name, 1, h))
        if p > 1 and one and (name, p, h) in median:
            print(f"  {name:<20} {p} x {h} / 1 x {h}: {median[(name, p, h)][0] / one[0]:.2f}x")
PY
