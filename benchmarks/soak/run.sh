#!/usr/bin/env bash
# Soak: SoakJob under Spark's sort shuffle and under rdma-shuffle on an embedded local cluster (two
# executor JVMs): one application running --shuffles shuffles (200), each cleaned by Spark's
# ContextCleaner, and --apps applications (50) in a row; after every cleanup it samples what the
# executors (and, between applications, the driver) hold. Writes the CSVs and a table sampled along
# the run to benchmarks/target/soak/results.md.
#
#   benchmarks/soak/run.sh [--shuffles N] [--apps N] [--records N] [--managers "sort rdma"] [--conf k=v ...]
#
# RDMA_SKIP_BUILD=1 skips the build. Needs a JDK 17+, Maven and python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
shuffles=200
apps=50
records=100000
managers="sort rdma"
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --shuffles) shuffles=$2; shift 2 ;;
    --apps) apps=$2; shift 2 ;;
    --records) records=$2; shift 2 ;;
    --managers) managers=$2; shift 2 ;;
    --conf) extra+=(--conf "$2"); shift 2 ;;
    *) sed -n '2,11p' "$0" >&2; exit 2 ;;
  esac
done
command -v python3 >/dev/null || { echo "needs python3" >&2; exit 1; }
out="$root/benchmarks/target/soak"
rm -rf "$out"; mkdir -p "$out/local"
if [ "${RDMA_SKIP_BUILD:-0}" != 1 ]; then
  echo "building (mvn package, tests skipped)..."
  mvn -B -ntp -q -DskipTests -pl examples -am package
fi
status=0
for mode in shuffles apps; do
  count=$shuffles; [ $mode = apps ] && count=$apps
  [ "$count" = 0 ] && continue
  for m in $managers; do
    echo "[soak $(date +%H:%M:%S)] $mode x$count, $m"
    # One local directory for the driver and the executors, so that what is left in it is ours to count.
    SPARK_LOCAL_DIRS="$out/local" RDMA_SKIP_BUILD=1 RDMA_MAIN_CLASS=SoakJob "$root/examples/run-main-job.sh" \
      --manager "$m" --mode $mode --count "$count" --records "$records" --out "$out" ${extra[@]+"${extra[@]}"} \
      > "$out/$mode-$m.log" 2>&1 || { echo "  failed (exit $?); see $out/$mode-$m.log"; status=1; }
    grep '^soak ' "$out/$mode-$m.log" || true
  done
done
python3 "$root/benchmarks/soak/table.py" "$out"
exit $status
