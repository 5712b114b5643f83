#!/usr/bin/env bash
# Registration cost against the number of outputs: RegistrationBenchmark at 1k, 10k and 100k map outputs on one
# node, tcp and emulated verbs, and the time per output it implies (docs/benchmarks.md reports it).
# Usage: benchmarks/registration.sh [extra JMH options]   (env WARMUPS, ITERATIONS: default 3 and 5; JAR, OUT, JAVA_OPTS)
# Each registered output is one file mapping: 100k outputs need vm.max_map_count above 110,000 (Linux's default
# is 65,530). Run as root, this script raises it to 262,144 for the run and puts the old value back after.
set -euo pipefail
cd "$(dirname "$0")/.."
JAVA=${JAVA:-java}
if [ ! -f benchmarks/target/benchmarks.jar ] || [ -n "${REBUILD:-}" ]; then
  mvn -q -pl benchmarks -am package -DskipTests
fi
NEED=262144
OLD=$(cat /proc/sys/vm/max_map_count)
if [ "$OLD" -lt "$NEED" ]; then
  if [ "$(id -u)" = 0 ]; then
    sysctl -qw vm.max_map_count=$NEED
    trap 'sysctl -qw vm.max_map_count='"$OLD" EXIT
    echo "vm.max_map_count raised from $OLD to $NEED for this run"
  else
    echo "vm.max_map_count is $OLD: 100k outputs need $NEED (sysctl -w vm.max_map_count=$NEED as root)" >&2
  fi
fi
OUT=${OUT:-benchmarks/target/jmh-registration.json}
JAR=${JAR:-benchmarks/target/benchmarks.jar}
"$JAVA" ${JAVA_OPTS:-} -jar "$JAR" RegistrationBenchmark \
  -wi "${WARMUPS:-3}" -i "${ITERATIONS:-5}" -rf json -rff "$OUT" "$@" | grep -v '^# \|^$' | grep -i 'footprint\|Benchmark \|ms/op\|Exception\|failure' || true
python3 - "$OUT" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))
rows = {}
for r in runs:
    p = r["params"]
    n = int(p["outputs"])
    m = r["primaryMetric"]
    rows[(p["provider"], r["benchmark"].rsplit(".", 1)[1], n)] = (float(m["score"]) * 1e3 / n, float(m["scoreError"]) * 1e3 / n)
print("\n| provider | operation | outputs | µs per output | 100k / 1k |")
print("| --- | --- | --- | --- | --- |")
for (prov, op, n) in sorted(rows):
    s, e = rows[(prov, op, n)]
    base = rows.get((prov, op, 1000))
    ratio = f"{rows[(prov, op, 100000)][0] / base[0]:.2f}" if n == 100000 and base else ""
    err = "" if e != e else f" ± {e:.2f}"
    print(f"| {prov} | {op} | {n:,} | {s:.2f}{err} | {ratio} |")
PY
