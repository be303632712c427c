#!/usr/bin/env bash
# Spindle's job cycle against effectum (as shipped and in WAL mode) and raw rusqlite, each
# configuration in its own process on a fresh file, interleaved, ROUNDS rounds; prints the
# median of every figure and the ratios issue 12's targets name. See README.md.
#
#   benches/peers/run.sh                      # 20,000 jobs, 3 rounds, 1/4/16 workers
#   JOBS=5000 ROUNDS=1 WORKERS="16" benches/peers/run.sh
set -euo pipefail
cd "$(dirname "$0")"
JOBS="${JOBS:-20000}"
ROUNDS="${ROUNDS:-3}"
WORKERS="${WORKERS:-1 4 16}"

echo "== building (Spindle's queue bench, then effectum-bench)"
spindle_bench="$(cd ../.. && cargo bench --bench queue --no-run 2>&1 |
  sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)"
spindle_bench="../../$spindle_bench"
(cd effectum-bench && cargo build --release --quiet)
effectum_bench="effectum-bench/target/release/effectum-bench"

configs=(
  "spindle pool"
  "spindle pool --normal"
  "spindle single"
  "spindle single --normal"
  "spindle batch --normal"
  "spindle pool --normal --no-item-events"
  "spindle single --normal --no-item-events"
  "spindle batch --normal --no-item-events"
  "spindle raw --normal"
  "spindle raw-pipelined --normal"
  "spindle raw-store-statements --normal"
  "effectum shipped"
  "effectum wal"
)

results="$(mktemp)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch" "$results"' EXIT
for round in $(seq 1 "$ROUNDS"); do
  for workers in $WORKERS; do
    for config in "${configs[@]}"; do
      set -- $config
      rm -rf "$scratch"/*
      if [ "$1" = spindle ]; then
        line="$("$spindle_bench" --one "$2" --threads "$workers" --jobs "$JOBS" ${3:-} ${4:-})"
      else
        line="$("$effectum_bench" --mode "$2" --workers "$workers" --jobs "$JOBS" \
          --file "$scratch/effectum.db")"
      fi
      echo "round $round: $line"
      echo "$line" >> "$results"
    done
  done
done

echo
python3 - "$results" <<'PY'
import re, statistics, sys
rates = {}
for line in open(sys.argv[1]):
    fields = dict(re.findall(r"(\w+)=(\S+)", line))
    key = (fields["mode"], int(fields["workers"]))
    rates.setdefault(key, []).append(float(fields["jobs_per_s"]))
median = {key: statistics.median(values) for key, values in rates.items()}
modes = sorted({mode for mode, _ in median})
workers = sorted({w for _, w in median})
runs = min(len(values) for values in rates.values())
print(f"median jobs/s ({runs} or more runs of each)")
print(f"{'configuration':<34}" + "".join(f"{str(w) + ' workers':>12}" for w in workers))
for mode in modes:
    print(f"{mode:<34}" + "".join(f"{median.get((mode, w), 0):>12,.0f}" for w in workers))
ratios = [
    ("pool Full / effectum shipped", "spindle-pool-full", "effectum-shipped", 2.0),
    ("pool Normal / effectum WAL", "spindle-pool-normal", "effectum-wal", 2.0),
    ("pool Normal / raw", "spindle-pool-normal", "spindle-raw-normal", 0.5),
    ("single Full / effectum shipped", "spindle-single-full", "effectum-shipped", 2.0),
    ("single Normal / effectum WAL", "spindle-single-normal", "effectum-wal", 1.0),
    ("batch Normal / raw", "spindle-batch-normal", "spindle-raw-normal", 0.8),
    ("events off: pool Normal / effectum WAL", "spindle-pool-normal-no-events", "effectum-wal", 2.0),
    ("events off: pool Normal / raw", "spindle-pool-normal-no-events", "spindle-raw-normal", 0.5),
    ("events off: single Normal / eff. WAL", "spindle-single-normal-no-events", "effectum-wal", 1.0),
    ("events off: batch Normal / raw", "spindle-batch-normal-no-events", "spindle-raw-normal", 0.8),
    ("raw pipelined / raw (no target)", "spindle-raw-pipelined-normal", "spindle-raw-normal", 0.0),
    ("batch Normal / raw pipelined (no target)", "spindle-batch-normal", "spindle-raw-pipelined-normal", 0.0),
    ("raw, store's statements / raw (no target)", "spindle-raw-store-statements-normal", "spindle-raw-normal", 0.0),
    ("batch Normal / raw, store's statements", "spindle-batch-normal", "spindle-raw-store-statements-normal", 0.0),
]
print()
print(f"{'ratio (target)':<46}" + "".join(f"{str(w) + ' workers':>12}" for w in workers))
for name, top, bottom, target in ratios:
    cells = []
    for w in workers:
        if (top, w) in median and median.get((bottom, w)):
            cells.append(f"{median[(top, w)] / median[(bottom, w)]:>11.2f}x")
        else:
            cells.append(f"{'-':>12}")
    label = name + (f" (>= {target}x)" if target else "")
    print(f"{label:<46}" + "".join(cells))
PY
