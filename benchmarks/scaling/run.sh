#!/usr/bin/env bash
# Scaling benchmark: BlockScalingJob — shuffles of tiny records in which each of M map tasks writes one
# record to each of R reducers (M × R non-empty blocks of a few bytes) for M × R in --sizes — on an
# embedded local cluster (two 1-core executor JVMs, like examples/run-main-job.sh), under Spark's sort
# shuffle and rdma-shuffle (tcp provider), one application per manager and round, alternating. Reports
# per size the reduce stage's time and the executors' process CPU (/proc, both executors, reduce job
# only) per block, medians over the rounds and the ratio rdma/sort. No root needed.
#
#   benchmarks/scaling/run.sh [--rounds 2] [--sizes 10x10,100x100,300x300,1000x1000] [--out DIR]
#                             [--conf key=value ...]
#
# RDMA_SKIP_BUILD=1 skips the build. Wrap it in `flock /tmp/bench.lock` on a shared machine.
# Results: DIR/results.jsonl (one line per size and run) and DIR/results.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
rounds=2
sizes=10x10,100x100,300x300,1000x1000
scratch="$root/benchmarks/target/scaling"
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --out) scratch=$2; shift 2 ;;
    --conf) extra+=(--conf "$2"); shift 2 ;;
    *) sed -n '2,13p' "$0" >&2; exit 2 ;;
  esac
done
rm -rf "$scratch"; mkdir -p "$scratch"
if [ "${RDMA_SKIP_BUILD:-0}" != 1 ]; then
  echo "building (mvn package, tests skipped)..."
  mvn -B -ntp -q -DskipTests -pl examples -am package
fi
results="$scratch/results.jsonl"
: > "$results"
managers="sort rdma"
for k in $(seq "$rounds"); do
  for manager in $managers; do
    echo "[scaling $(date +%H:%M:%S)] round $k, $manager"
    before=$(wc -l < "$results")
    RDMA_SKIP_BUILD=1 RDMA_MAIN_CLASS=BlockScalingJob SPARK_LOCAL_DIRS="$scratch/local" \
      examples/run-main-job.sh --manager "$manager" --sizes "$sizes" --result "$scratch/run.jsonl" \
      --conf spark.shuffle.rdma.provider=tcp "${extra[@]}" > "$scratch/driver-$manager-$k.log" 2>&1 \
      || echo "  $manager round $k exited with $? (see $scratch/driver-$manager-$k.log)"
    python3 - "$scratch/run.jsonl" "$k" >> "$results" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line); r["round"] = int(sys.argv[2]); print(json.dumps(r))
PY
    rm -f "$scratch/run.jsonl"
    echo "  $(( $(wc -l < "$results") - before )) sizes done"
  done
  managers=$(echo "$managers" | awk '{for (i = NF; i > 0; i--) printf "%s%s", $i, (i > 1 ? " " : "\n")}')
done
python3 "$root/benchmarks/scaling/table.py" "$results" | tee "$scratch/results.md"
