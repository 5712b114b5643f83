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
python3 - "$out" <<'PY'
import csv, os, sys
out = sys.argv[1]
def rows(name):
    p = os.path.join(out, name)
    return list(csv.DictReader(open(p))) if os.path.exists(p) else []
def marks(n):
    return sorted({1, *[k for k in (10, 25, 50, 100, 150, 200, 300, 500) if k < n], n})
lines = ["## One application, shuffles cleaned by the ContextCleaner (per executor, worst of the executors)", "",
         "| manager | after shuffle | registered output bytes | output tables | shuffle files | mappings of them | open fds | threads (Spark's storage pool apart) | storage-pool threads | direct MiB | shuffle ms | READs so far | to Spark's path |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for m in ("sort", "rdma"):
    r = rows("soak-shuffles-%s.csv" % m)
    if not r:
        continue
    n = max(int(x["shuffle"]) for x in r)
    for k in marks(n):
        at = [x for x in r if int(x["shuffle"]) == k]
        mx = lambda f: max(int(x[f]) for x in at)
        pool = max(int(x["threads"]) - int(x["otherThreads"]) for x in at)
        total = lambda f: sum(int(x.get(f) or 0) for x in at)
        lines.append("| %s | %d | %d | %d | %d | %d | %d | %d | %d | %.1f | %d | %d | %d |" % (
            m, k, mx("registeredOutputBytes"), mx("tables"), mx("shuffleFiles"), mx("shuffleMappings"),
            mx("openFds"), mx("otherThreads"), pool, mx("directBytes") / 2**20, mx("jobMs"),
            total("readsCompleted"), total("sparkPathFallbacks")))
lines += ["", "## Applications in a row in one driver JVM", "",
          "| manager | after application | executors' registered output bytes | executors' shuffle files | driver open fds | driver threads | driver direct MiB | local dirs left | app ms |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for m in ("sort", "rdma"):
    r = rows("soak-apps-%s.csv" % m)
    if not r:
        continue
    for k in marks(len(r)):
        x = r[k - 1]
        lines.append("| %s | %d | %s | %s | %s | %s | %.1f | %s | %s |" % (m, k, x["executorsRegisteredOutputBytes"],
            x["executorsShuffleFiles"], x["driverOpenFds"], x["driverThreads"], int(x["driverDirectBytes"]) / 2**20,
            x["localDirsLeft"], x["appMs"]))
text = "\n".join(lines) + "\n"
open(os.path.join(out, "results.md"), "w").write(text)
print(text)
PY
exit $status
